//! What a PCM is asked for and what it negotiated ([`HwRequest`], [`HwSetup`], the
//! sample formats), and the real-time operations the driver needs from one (`PcmIo`),
//! which alsa-lib's PCM (`pcm.rs`) and the tests' simulated one implement.

use super::ffi;
use quaver_dsp::{Planar, PlanarMut, SampleFormat};
use std::ffi::c_int;
use std::fmt;
use std::str::FromStr;

/// Which way a PCM moves audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Audio to the device (a sink).
    Playback,
    /// Audio from the device (a source).
    Capture,
}

impl Direction {
    pub(super) fn alsa(self) -> c_int {
        match self {
            Direction::Playback => ffi::SND_PCM_STREAM_PLAYBACK,
            Direction::Capture => ffi::SND_PCM_STREAM_CAPTURE,
        }
    }

    /// "playback" or "capture".
    pub fn name(self) -> &'static str {
        match self {
            Direction::Playback => "playback",
            Direction::Capture => "capture",
        }
    }
}

/// Sample formats the backend negotiates, all little-endian interleaved.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcmFormat {
    /// 32-bit float (`FLOAT_LE`): what the graph uses, no conversion loss.
    F32,
    /// 32-bit signed (`S32_LE`).
    S32,
    /// 24-bit signed in the low bits of 32 (`S24_LE`), common on HDA and USB cards.
    S24,
    /// 24-bit signed packed in 3 bytes (`S24_3LE`), common on USB cards.
    S24_3,
    /// 16-bit signed (`S16_LE`), which every card offers.
    S16,
}

impl PcmFormat {
    /// The negotiation order when no format is requested: the most precise first.
    pub const FALLBACK: [PcmFormat; 5] = [
        PcmFormat::F32,
        PcmFormat::S32,
        PcmFormat::S24,
        PcmFormat::S24_3,
        PcmFormat::S16,
    ];

    pub(crate) fn alsa(self) -> c_int {
        match self {
            PcmFormat::F32 => ffi::SND_PCM_FORMAT_FLOAT_LE,
            PcmFormat::S32 => ffi::SND_PCM_FORMAT_S32_LE,
            PcmFormat::S24 => ffi::SND_PCM_FORMAT_S24_LE,
            PcmFormat::S24_3 => ffi::SND_PCM_FORMAT_S24_3LE,
            PcmFormat::S16 => ffi::SND_PCM_FORMAT_S16_LE,
        }
    }

    pub(super) fn from_alsa(code: c_int) -> Option<PcmFormat> {
        PcmFormat::FALLBACK.into_iter().find(|f| f.alsa() == code)
    }

    /// The matching quaver sample format (for conversion).
    pub fn sample_format(self) -> SampleFormat {
        match self {
            PcmFormat::F32 => SampleFormat::F32Le,
            PcmFormat::S32 => SampleFormat::S32Le,
            PcmFormat::S24 => SampleFormat::S24_32Le,
            PcmFormat::S24_3 => SampleFormat::S24Le,
            PcmFormat::S16 => SampleFormat::S16Le,
        }
    }

    /// The name used in specs: f32, s32, s24, s24_3, s16.
    pub fn name(self) -> &'static str {
        match self {
            PcmFormat::F32 => "f32",
            PcmFormat::S32 => "s32",
            PcmFormat::S24 => "s24",
            PcmFormat::S24_3 => "s24_3",
            PcmFormat::S16 => "s16",
        }
    }

    /// alsa-lib's name: FLOAT_LE, S32_LE, S24_LE, S24_3LE, S16_LE.
    pub fn alsa_name(self) -> &'static str {
        match self {
            PcmFormat::F32 => "FLOAT_LE",
            PcmFormat::S32 => "S32_LE",
            PcmFormat::S24 => "S24_LE",
            PcmFormat::S24_3 => "S24_3LE",
            PcmFormat::S16 => "S16_LE",
        }
    }
}

impl fmt::Display for PcmFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PcmFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "f32" | "float" | "float_le" | "f32le" => PcmFormat::F32,
            "s32" | "s32_le" | "s32le" => PcmFormat::S32,
            "s24" | "s24_le" | "s24_32" => PcmFormat::S24,
            "s24_3" | "s24_3le" => PcmFormat::S24_3,
            "s16" | "s16_le" | "s16le" => PcmFormat::S16,
            _ => {
                return Err(format!(
                    "unknown ALSA format '{s}' (expected f32, s32, s24, s24_3 or s16)"
                ));
            }
        })
    }
}

/// How samples move between quaver and alsa-lib.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `MMAP_INTERLEAVED`: convert straight into the device's ring (no extra copy).
    Mmap,
    /// `RW_INTERLEAVED`: `snd_pcm_writei`/`readi` from a scratch buffer.
    ReadWrite,
}

/// What to ask the device for; every value but the format is "near".
#[derive(Debug, Clone, PartialEq)]
pub struct HwRequest {
    /// One format only, or `None` for [`PcmFormat::FALLBACK`] order.
    pub format: Option<PcmFormat>,
    /// Try `MMAP_INTERLEAVED` before `RW_INTERLEAVED`.
    pub mmap: bool,
    /// Channels (exact if possible, else nearest).
    pub channels: u32,
    /// Sample rate in Hz (nearest; alsa-lib's own resampling is disabled).
    pub rate: u32,
    /// Ring size in frames (nearest).
    pub buffer_frames: usize,
    /// Period (interrupt interval) in frames (nearest); `None` = a quarter of the buffer.
    pub period_frames: Option<usize>,
    /// Ask the driver not to interrupt every period (timer scheduling needs none).
    pub no_period_wakeup: bool,
}

/// What the device accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct HwSetup {
    /// Access mode.
    pub access: Access,
    /// Sample format.
    pub format: PcmFormat,
    /// Channels.
    pub channels: u32,
    /// Sample rate in Hz.
    pub rate: u32,
    /// Ring size in frames.
    pub buffer_frames: usize,
    /// Period size in frames.
    pub period_frames: usize,
    /// Largest ring the device offers (for growing the buffer later).
    pub buffer_max_frames: usize,
    /// Period interrupts are off.
    pub period_wakeup_disabled: bool,
    /// alsa-lib's PCM type code (`SND_PCM_TYPE_*`): hw, null, file, plug, …
    pub pcm_type: i32,
    /// Formats tried before the one accepted, in order, for the log.
    pub formats_refused: Vec<PcmFormat>,
    /// Playback: the kernel overwrites what was played with silence (sw_params
    /// silence_size = boundary), so an underrun plays silence, not old audio.
    pub silences_played: bool,
}

impl HwSetup {
    /// Bytes per frame.
    pub fn frame_bytes(&self) -> usize {
        self.channels as usize * self.format.sample_format().bytes_per_sample()
    }
}

/// A control-side failure: alsa-lib's negative errno and a message with context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AlsaError {
    /// Negative errno.
    pub code: i32,
    /// What failed, on which PCM, and alsa-lib's text.
    pub message: String,
}

impl AlsaError {
    pub(super) fn invalid(message: String) -> Self {
        AlsaError {
            code: -libc::EINVAL,
            message,
        }
    }
}

/// One status reading: the hardware pointer and when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Status {
    /// `SND_PCM_STATE_*`.
    pub state: i32,
    /// Frames free (playback) or ready (capture).
    pub avail: usize,
    /// `CLOCK_MONOTONIC` time of the reading in ns (0 = the PCM gave none).
    pub htstamp_ns: u64,
}

/// The real-time operations the device driver needs from a PCM. Errors are alsa-lib's
/// negative errno values (`-EPIPE` xrun, `-ESTRPIPE` suspended, `-ENODEV` unplugged, …).
/// Implementations must not allocate.
pub(crate) trait PcmIo: Send {
    /// The PCM's name as opened (`hw:CARD=Loopback,DEV=0`), for error messages.
    fn name(&self) -> &str;
    /// One hardware-pointer query (`snd_pcm_status`): state, avail and timestamp.
    fn status(&mut self) -> Result<Status, i32>;
    /// `snd_pcm_prepare`.
    fn prepare(&mut self) -> Result<(), i32>;
    /// `snd_pcm_start`.
    fn start(&mut self) -> Result<(), i32>;
    /// `snd_pcm_drop`: stop now, discard what is queued.
    fn drop_stream(&mut self) -> Result<(), i32>;
    /// `snd_pcm_resume` after a system suspend (`-EAGAIN` = not yet, `-ENOSYS` = prepare).
    fn resume(&mut self) -> Result<(), i32>;
    /// `snd_pcm_state` (alsa-lib's view; no pointer query).
    fn state(&mut self) -> i32;
    /// Queues `frames` frames of `src` starting at frame `from`; channels beyond `src`
    /// are silence. Returns the frames accepted (fewer if the ring is full).
    fn write(&mut self, src: Planar<'_>, from: usize, frames: usize) -> Result<usize, i32>;
    /// Queues `frames` frames of silence.
    fn write_silence(&mut self, frames: usize) -> Result<usize, i32>;
    /// Fills `frames` frames of `dst` from frame `from` with captured audio. Returns the
    /// frames filled (fewer if fewer are ready; the rest is untouched).
    fn read(&mut self, dst: &mut PlanarMut<'_>, from: usize, frames: usize) -> Result<usize, i32>;
    /// Closes the handle; later calls fail with `-EBADFD` until [`PcmIo::reopen`].
    /// *control*, or *RT* after an idle suspend (outside the cycle).
    fn close(&mut self) -> Result<(), i32>;
    /// Opens the same PCM again after [`PcmIo::close`] and negotiates `req` (the request
    /// of the first open) through the same path as the first open; returns what it got.
    /// Allocates and may block briefly: *RT* only when resuming from an idle close,
    /// outside the cycle.
    fn reopen(&mut self, req: &HwRequest) -> Result<HwSetup, AlsaError>;
    /// Links `other` so both start and stop together (same card); false if the PCMs
    /// cannot be linked (plugins usually cannot). *control*, or *RT* when reopening.
    fn link(&mut self, other: &mut Self) -> bool;
    /// `snd_pcm_rewindable`: queued playback that could still be taken back.
    fn rewindable(&mut self) -> Result<usize, i32>;
    /// `snd_pcm_rewind`: takes back up to `frames` queued frames; returns how many.
    fn rewind(&mut self, frames: usize) -> Result<usize, i32>;
}
