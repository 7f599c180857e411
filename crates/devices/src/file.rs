//! The file sink: writes exactly the audio it is given to a WAV file, paced in real time
//! like the null sink, or freewheeling (as fast as the engine can render).
//!
//! The WAV header carries the data length, which is only known at the end: the daemon
//! must call [`Device::close`] on shutdown, including on SIGTERM/SIGINT, or the header
//! keeps a data length of 0 (the samples are in the file, but most readers ignore them).
//! Dropping a [`FileSink`] also closes it, ignoring errors.

use crate::clock::{RealClock, SimClock};
use crate::pacer::Pacer;
use crate::{Device, DeviceCounters, DeviceError, DeviceInfo, ErrName, WaitStatus, check_format};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::str::FromStr;

/// How to open a [`FileSink`].
#[derive(Debug, Clone, PartialEq)]
pub struct FileConfig {
    /// The WAV file to create (truncated if it exists).
    pub path: PathBuf,
    /// Sample rate in Hz.
    pub rate: u32,
    /// Channels written to the file, in this order.
    pub channels: ChannelMap,
    /// Sample format in the file.
    pub format: WavFormat,
    /// Render as fast as possible instead of in real time.
    pub freewheel: bool,
}

/// Sample format of a WAV file written by [`FileSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WavFormat {
    /// 16-bit signed integer.
    #[default]
    S16,
    /// 24-bit signed integer (3 bytes per sample).
    S24,
    /// 32-bit signed integer.
    S32,
    /// 32-bit IEEE float, written bit-exactly.
    F32,
}

impl WavFormat {
    /// Bits per sample.
    pub fn bits(self) -> u16 {
        match self {
            WavFormat::S16 => 16,
            WavFormat::S24 => 24,
            WavFormat::S32 | WavFormat::F32 => 32,
        }
    }

    /// Bytes one sample occupies in the file.
    pub fn bytes(self) -> usize {
        self.bits() as usize / 8
    }

    /// The name used in specs: "s16", "s24", "s32" or "f32".
    pub fn name(self) -> &'static str {
        match self {
            WavFormat::S16 => "s16",
            WavFormat::S24 => "s24",
            WavFormat::S32 => "s32",
            WavFormat::F32 => "f32",
        }
    }
}

impl fmt::Display for WavFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a sample format name other than s16, s24, s32 or f32.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sample format '{0}' (expected s16, s24, s32 or f32)")]
pub struct UnknownWavFormat(pub String);

impl FromStr for WavFormat {
    type Err = UnknownWavFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "s16" => Ok(WavFormat::S16),
            "s24" => Ok(WavFormat::S24),
            "s32" => Ok(WavFormat::S32),
            "f32" => Ok(WavFormat::F32),
            _ => Err(UnknownWavFormat(s.to_string())),
        }
    }
}

/// Converts a float sample to a `bits`-wide integer: scale by 2^(bits-1), round to nearest,
/// clamp. Values k/2^(bits-1) therefore come back as exactly k, full scale +1.0 clips to
/// the largest positive code, and NaN becomes 0.
#[inline]
pub(crate) fn f32_to_int(x: f32, bits: u16) -> i32 {
    // f64 holds every product exactly (24-bit mantissa × power of two), so the only
    // rounding is the deliberate one.
    let scale = (1u64 << (bits - 1)) as f64;
    (x as f64 * scale).round().clamp(-scale, scale - 1.0) as i32
}

/// The largest data chunk a WAV file can describe (its sizes are 32-bit), minus room for
/// the header; hound would overflow past it.
const MAX_DATA_BYTES: u64 = u32::MAX as u64 - 4096;

/// Output buffer size: large enough that a write(2) happens every few cycles, not per cycle.
const BUF_BYTES: usize = 256 * 1024;

type Writer = hound::WavWriter<BufWriter<File>>;

/// A sink that writes its input to a WAV file.
pub struct FileSink {
    info: DeviceInfo,
    format: WavFormat,
    writer: Option<Writer>,
    /// A second handle on the file, to fsync it after hound has finalized and let go.
    sync_handle: Option<File>,
    path: PathBuf,
    data_bytes: u64,
    pacer: Pacer,
    counters: DeviceCounters,
    last_write: usize,
    err_name: ErrName,
}

impl FileSink {
    /// Creates (truncates) the WAV file and writes its provisional header. *control*.
    pub fn create(cfg: FileConfig) -> Result<Self, DeviceError> {
        Self::create_with_clock(cfg, Box::new(RealClock))
    }

    /// Like [`FileSink::create`] but paced by `clock` when not freewheeling. *control*.
    pub fn create_with_clock(
        cfg: FileConfig,
        clock: Box<dyn SimClock>,
    ) -> Result<Self, DeviceError> {
        let name = "file".to_string();
        check_format(&name, cfg.rate, &cfg.channels)?;
        let io_err = |e: io::Error, what: &str| DeviceError::Io {
            device: name.clone(),
            source: io::Error::new(e.kind(), format!("{what} {}: {e}", cfg.path.display())),
        };
        let file = File::create(&cfg.path).map_err(|e| io_err(e, "cannot create"))?;
        let sync_handle = file
            .try_clone()
            .map_err(|e| io_err(e, "cannot duplicate"))?;
        let spec = hound::WavSpec {
            channels: cfg.channels.len() as u16,
            sample_rate: cfg.rate,
            bits_per_sample: cfg.format.bits(),
            sample_format: match cfg.format {
                WavFormat::F32 => hound::SampleFormat::Float,
                _ => hound::SampleFormat::Int,
            },
        };
        let writer = hound::WavWriter::new(BufWriter::with_capacity(BUF_BYTES, file), spec)
            .map_err(|e| io_err(hound_to_io(e), "cannot write header to"))?;
        let info = DeviceInfo {
            description: format!(
                "File sink writing {} ({}, {} Hz, {} ch{})",
                cfg.path.display(),
                cfg.format,
                cfg.rate,
                cfg.channels.len(),
                if cfg.freewheel { ", freewheel" } else { "" }
            ),
            rate: cfg.rate,
            playback: Some(cfg.channels),
            capture: None,
            freewheel: cfg.freewheel,
            name,
        };
        Ok(FileSink {
            err_name: ErrName::new(&info.name),
            info,
            format: cfg.format,
            writer: Some(writer),
            sync_handle: Some(sync_handle),
            path: cfg.path,
            data_bytes: 0,
            pacer: Pacer::new(cfg.rate, clock),
            counters: DeviceCounters::default(),
            last_write: 0,
        })
    }

    /// Renames the device (its graph node name). *control*.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.info.name = name.into();
        self.err_name = ErrName::new(&self.info.name);
        self
    }

    /// The file being written.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn io_error(&mut self, source: io::Error) -> DeviceError {
        DeviceError::Io {
            device: self.err_name.take(&self.info.name),
            source,
        }
    }
}

/// hound reports I/O failures as `IoError`; anything else means we built a bad spec.
fn hound_to_io(e: hound::Error) -> io::Error {
    match e {
        hound::Error::IoError(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

/// Interleaves `buf` into the writer, converting each sample with `conv`; channels the
/// buffer lacks are written as silence so the file's frames stay aligned.
fn write_frames<S: hound::Sample + Copy>(
    w: &mut Writer,
    buf: &Planar<'_>,
    channels: usize,
    conv: impl Fn(f32) -> S,
) -> hound::Result<()> {
    let have = buf.channels().min(channels);
    let silence = conv(0.0);
    for f in 0..buf.frames() {
        for ch in 0..channels {
            let s = if ch < have {
                conv(buf.channel(ch)[f])
            } else {
                silence
            };
            w.write_sample(s)?;
        }
    }
    Ok(())
}

impl Device for FileSink {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn start(&mut self, _quantum: usize) -> Result<(), DeviceError> {
        self.pacer.start();
        Ok(())
    }

    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.counters.wakeups += 1;
        if self.info.freewheel || !self.pacer.wait(quantum) {
            return Ok(WaitStatus::Ready);
        }
        self.counters.underruns += 1;
        Ok(WaitStatus::Xrun)
    }

    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        let channels = self.info.playback.as_ref().map_or(0, |c| c.len());
        let bytes = (buf.frames() * channels * self.format.bytes()) as u64;
        if self.data_bytes + bytes > MAX_DATA_BYTES {
            return Err(self.io_error(io::ErrorKind::FileTooLarge.into()));
        }
        let Some(w) = self.writer.as_mut() else {
            // Closed: the control side owns the device and nothing more goes to the file.
            return Ok(());
        };
        let bits = self.format.bits();
        let res = match self.format {
            WavFormat::S16 => write_frames(w, &buf, channels, |x| f32_to_int(x, 16) as i16),
            WavFormat::S24 | WavFormat::S32 => {
                write_frames(w, &buf, channels, |x| f32_to_int(x, bits))
            }
            WavFormat::F32 => write_frames(w, &buf, channels, |x| x),
        };
        if let Err(e) = res {
            return Err(self.io_error(hound_to_io(e)));
        }
        self.data_bytes += bytes;
        self.counters.frames_written += buf.frames() as u64;
        self.last_write = buf.frames();
        Ok(())
    }

    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        buf.fill_silence();
        Ok(())
    }

    fn suspend(&mut self) {
        // Suspended time is simply absent from the file: it records what was written.
        self.pacer.stop();
        self.last_write = 0;
    }

    /// Freewheeling, a sample is "heard" when written; in real time the cycle just
    /// written plays out over the next quantum, as with the null sink.
    fn playback_delay(&self) -> usize {
        if self.info.freewheel {
            0
        } else {
            self.last_write
        }
    }

    fn capture_delay(&self) -> usize {
        0
    }

    /// A recording must hold exactly what was played.
    fn fades_in_on_start(&self) -> bool {
        false
    }

    /// Like the null sink, only the cycle just written is in flight.
    fn periods_in_flight(&self) -> usize {
        1
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }

    fn wakeup_lateness_ns(&self) -> Option<u64> {
        (!self.info.freewheel).then_some(self.pacer.last_lateness_ns)
    }

    /// Writes the final header, flushes and fsyncs. Safe to call more than once; a failed
    /// close still leaves every sample that reached the kernel in the file.
    fn close(&mut self) -> Result<(), DeviceError> {
        self.pacer.stop();
        let Some(w) = self.writer.take() else {
            return Ok(());
        };
        let path = self.path.display().to_string();
        let ctx = |e: io::Error, what: &str| DeviceError::Io {
            device: self.info.name.clone(),
            source: io::Error::new(e.kind(), format!("{what} {path}: {e}")),
        };
        w.finalize()
            .map_err(|e| ctx(hound_to_io(e), "cannot finalize"))?;
        if let Some(f) = self.sync_handle.take() {
            f.sync_data().map_err(|e| ctx(e, "cannot sync"))?;
        }
        Ok(())
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_rounds_scales_and_clamps() {
        for k in [-32768, -12345, -1, 0, 1, 32767] {
            assert_eq!(f32_to_int(k as f32 / 32768.0, 16), k);
        }
        assert_eq!(f32_to_int(1.0, 16), 32767);
        assert_eq!(f32_to_int(-1.0, 16), -32768);
        assert_eq!(f32_to_int(7.5, 16), 32767);
        assert_eq!(f32_to_int(-7.5, 16), -32768);
        assert_eq!(f32_to_int(f32::NAN, 16), 0);
        assert_eq!(f32_to_int(0.4 / 32768.0, 16), 0);
        assert_eq!(f32_to_int(0.6 / 32768.0, 16), 1);
        assert_eq!(f32_to_int(-0.6 / 32768.0, 16), -1);
        assert_eq!(f32_to_int(1.0, 24), (1 << 23) - 1);
        assert_eq!(f32_to_int(-1.0, 24), -(1 << 23));
        assert_eq!(f32_to_int(1.0, 32), i32::MAX);
        assert_eq!(f32_to_int(-1.0, 32), i32::MIN);
        assert_eq!(f32_to_int(0.5, 32), 1 << 30);
    }

    #[test]
    fn format_names_round_trip() {
        for f in [
            WavFormat::S16,
            WavFormat::S24,
            WavFormat::S32,
            WavFormat::F32,
        ] {
            assert_eq!(f.name().parse::<WavFormat>().unwrap(), f);
        }
        assert_eq!("F32".parse::<WavFormat>().unwrap(), WavFormat::F32);
        assert!("u8".parse::<WavFormat>().is_err());
    }
}
