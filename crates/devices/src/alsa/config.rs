//! How an `alsa:` device is opened ([`AlsaConfig`]), what paces it ([`Pacing`]), and
//! the safety margin that follows from both.

use super::params::PcmFormat;
use crate::margin::MarginConfig;
use quaver_dsp::ChannelMap;

/// Default ring size of a PCM that does not run in real time (alsa-lib's `null` and
/// `file` plugins, paced by our clock): a quarter second holds the largest quantum plus
/// the largest margin with room.
pub const DEFAULT_BUFFER_US: u64 = 250_000;

/// Default ring size of a PCM the hardware paces: 2 s, or the card's largest ring if
/// smaller, as PulseAudio's timer-based scheduling opens it (`tsched_buffer_size`). The
/// ring is only the room there is: what is queued follows the streams (one quantum
/// plus the margin, or, for a stream that asks for a long latency, a fill of up to
/// that latency, so the card wakes once per refill; docs/alsa/big-buffers.md).
pub const TSCHED_BUFFER_US: u64 = 2_000_000;

/// What paces an ALSA device's cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pacing {
    /// The device's own pointer unless the PCM is alsa-lib's `null` or `file` plugin
    /// (which do not run in real time), or its pointer is seen running unpaced.
    #[default]
    Auto,
    /// Timer scheduling on the hardware pointer.
    Device,
    /// `CLOCK_MONOTONIC` at the nominal rate, like the null device.
    Clock,
}

impl Pacing {
    /// "auto", "device" or "clock".
    pub fn name(self) -> &'static str {
        match self {
            Pacing::Auto => "auto",
            Pacing::Device => "device",
            Pacing::Clock => "clock",
        }
    }
}

/// How to open an [`super::AlsaDevice`] (the `alsa:` spec).
#[derive(Debug, Clone, PartialEq)]
pub struct AlsaConfig {
    /// The ALSA PCM name: `default`, `hw:0`, `plughw:1,0`, `null`, `file:FILE=…`, …
    pub pcm: String,
    /// Requested rate in Hz (the nearest the PCM offers is used).
    pub rate: u32,
    /// Requested channels (exact if offered, else the nearest count with its default
    /// layout).
    pub channels: ChannelMap,
    /// One sample format, or `None` for the fallback order F32 → S32 → S24 → S24_3 → S16.
    pub format: Option<PcmFormat>,
    /// Ring size in frames (nearest); `None` = [`TSCHED_BUFFER_US`] for a PCM the
    /// hardware paces, [`DEFAULT_BUFFER_US`] for one paced by our clock.
    pub buffer_frames: Option<usize>,
    /// Period size in frames (nearest); `None` = half the buffer.
    pub period_frames: Option<usize>,
    /// Try mmap access first (default); `false` = read/write access only.
    pub mmap: bool,
    /// Open the playback side (a sink).
    pub playback: bool,
    /// Open the capture side (a source) on the same clock.
    pub capture: bool,
    /// Smallest safety margin in frames; `None` = [`crate::margin::DEFAULT_MIN_US`].
    pub margin_frames: Option<usize>,
    /// Largest safety margin in frames (after an underrun); `None` =
    /// [`crate::margin::DEFAULT_MAX_US`]; equal to `margin_frames` = fixed margin.
    pub margin_max_frames: Option<usize>,
    /// What paces the cycles.
    pub pacing: Pacing,
    /// Device name (graph node name); empty = "alsa".
    pub name: String,
}

impl Default for AlsaConfig {
    fn default() -> Self {
        AlsaConfig {
            pcm: "default".into(),
            rate: 48_000,
            channels: ChannelMap::stereo(),
            format: None,
            buffer_frames: None,
            period_frames: None,
            mmap: true,
            playback: true,
            capture: false,
            margin_frames: None,
            margin_max_frames: None,
            pacing: Pacing::Auto,
            name: "alsa".into(),
        }
    }
}

pub(super) fn margin_config(cfg: &AlsaConfig, rate: u32, buffer: usize) -> MarginConfig {
    let d = MarginConfig::for_rate(rate);
    // Leave at least a quarter of the ring for the quantum.
    let cap = (buffer * 3 / 4).max(1);
    let min = cfg.margin_frames.unwrap_or(d.min_frames).clamp(1, cap);
    let max = cfg
        .margin_max_frames
        .unwrap_or(d.max_frames.max(min))
        .clamp(min, cap);
    MarginConfig {
        rate,
        min_frames: min,
        max_frames: max,
    }
}
