//! The null device: a sink that discards what it is given and/or a source that captures
//! silence, clocked by `CLOCK_MONOTONIC` at exactly its nominal rate.
//!
//! It has no buffer of its own: each `wait(q)` returns when `q` more frames of time have
//! passed since the previous cycle, measured on an absolute time line from `start`, so a
//! null sink neither drifts against the monotonic clock nor against another null device
//! of the same rate. The engine builds the sink's monitor; this device does not.

use crate::clock::{RealClock, SimClock};
use crate::pacer::Pacer;
use crate::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus, check_format};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};

/// How to open a [`NullDevice`].
#[derive(Debug, Clone, PartialEq)]
pub struct NullConfig {
    /// Sample rate in Hz.
    pub rate: u32,
    /// Channels of the sink and/or source.
    pub channels: ChannelMap,
    /// Whether the device has a sink (playback) side.
    pub playback: bool,
    /// Whether the device has a source (capture) side, which captures silence.
    pub capture: bool,
    /// Device name (graph node name); empty means "null".
    pub name: String,
}

impl Default for NullConfig {
    fn default() -> Self {
        NullConfig {
            rate: 48_000,
            channels: ChannelMap::stereo(),
            playback: true,
            capture: false,
            name: "null".to_string(),
        }
    }
}

/// A timer-clocked sink that discards and/or source that captures silence.
pub struct NullDevice {
    info: DeviceInfo,
    pacer: Pacer,
    counters: DeviceCounters,
    last_write: usize,
}

impl NullDevice {
    /// Opens a null device paced by the real monotonic clock. *control*.
    pub fn new(cfg: NullConfig) -> Result<Self, DeviceError> {
        Self::with_clock(cfg, Box::new(RealClock))
    }

    /// Opens a null device paced by `clock` (a [`crate::VirtualClock`] makes engine tests
    /// instant and deterministic). *control*.
    pub fn with_clock(cfg: NullConfig, clock: Box<dyn SimClock>) -> Result<Self, DeviceError> {
        let name = if cfg.name.is_empty() {
            "null".to_string()
        } else {
            cfg.name
        };
        check_format(&name, cfg.rate, &cfg.channels)?;
        if !cfg.playback && !cfg.capture {
            return Err(DeviceError::BadSpec {
                spec: name,
                reason: "a null device needs playback, capture or both".into(),
            });
        }
        let dirs = match (cfg.playback, cfg.capture) {
            (true, true) => "sink and silent source",
            (true, false) => "sink",
            _ => "silent source",
        };
        let info = DeviceInfo {
            description: format!(
                "Null {dirs} ({} Hz, {} ch, {})",
                cfg.rate,
                cfg.channels.len(),
                cfg.channels
            ),
            rate: cfg.rate,
            playback: cfg.playback.then(|| cfg.channels.clone()),
            capture: cfg.capture.then(|| cfg.channels.clone()),
            freewheel: false,
            name,
        };
        Ok(NullDevice {
            pacer: Pacer::new(cfg.rate, clock),
            info,
            counters: DeviceCounters::default(),
            last_write: 0,
        })
    }
}

impl Device for NullDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn start(&mut self, _quantum: usize) -> Result<(), DeviceError> {
        self.pacer.start();
        self.last_write = 0;
        Ok(())
    }

    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError> {
        let (play, cap) = (self.info.playback.is_some(), self.info.capture.is_some());
        Ok(self
            .pacer
            .wait_device(quantum, &mut self.counters, play, cap))
    }

    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        if self.info.playback.is_some() {
            self.counters.frames_written += buf.frames() as u64;
            self.last_write = buf.frames();
        }
        Ok(())
    }

    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        buf.fill_silence();
        if self.info.capture.is_some() {
            self.counters.frames_read += buf.frames() as u64;
        }
        Ok(())
    }

    fn suspend(&mut self) {
        self.pacer.stop();
        self.last_write = 0;
    }

    /// The cycle just written plays out over the next quantum, as on a card whose hardware
    /// consumes one quantum per cycle.
    fn playback_delay(&self) -> usize {
        self.last_write
    }

    /// Nobody hears the null sink; its monitor stays exact.
    fn fades_in_on_start(&self) -> bool {
        false
    }

    /// Only the cycle just written is ever in flight.
    fn periods_in_flight(&self) -> usize {
        1
    }

    /// Captured frames are handed over the moment the cycle is due.
    fn capture_delay(&self) -> usize {
        0
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }

    fn wakeup_lateness_ns(&self) -> Option<u64> {
        Some(self.pacer.last_lateness_ns)
    }

    fn close(&mut self) -> Result<(), DeviceError> {
        self.pacer.stop();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VirtualClock;
    use quaver_dsp::PlanarBuf;
    use std::time::Duration;

    #[test]
    fn virtual_null_paces_exactly_and_reports_late_wakeups_as_xruns() {
        let clock = VirtualClock::new();
        let cfg = NullConfig {
            capture: true,
            ..NullConfig::default()
        };
        let mut dev = NullDevice::with_clock(cfg, Box::new(clock.clone())).unwrap();
        assert!(dev.info().playback.is_some() && dev.info().capture.is_some());
        dev.start(480).unwrap();
        let mut buf = PlanarBuf::new(2, 480);
        buf.channel_mut(0).fill(0.5);
        for _ in 0..100 {
            assert_eq!(dev.wait(480).unwrap(), WaitStatus::Ready);
            dev.read(&mut buf.view_mut(480)).unwrap();
            assert!(buf.channel(0).iter().all(|&x| x == 0.0));
            dev.write(buf.view(480)).unwrap();
        }
        assert_eq!(clock.now(), 1_000_000_000);
        assert_eq!(dev.playback_delay(), 480);
        clock.advance(Duration::from_secs(2));
        assert_eq!(dev.wait(480).unwrap(), WaitStatus::Xrun);
        let c = dev.counters();
        assert_eq!((c.wakeups, c.underruns, c.overruns), (101, 1, 1));
        assert_eq!((c.frames_written, c.frames_read), (48_000, 48_000));
        assert_eq!(c.pointer_queries, 0);
    }

    #[test]
    fn suspend_then_start_resets_the_time_base() {
        let clock = VirtualClock::new();
        let mut dev =
            NullDevice::with_clock(NullConfig::default(), Box::new(clock.clone())).unwrap();
        dev.start(48).unwrap();
        dev.wait(48).unwrap();
        dev.suspend();
        clock.advance(Duration::from_secs(10));
        dev.start(48).unwrap();
        assert_eq!(dev.wait(48).unwrap(), WaitStatus::Ready);
        assert_eq!(clock.now(), 10_002_000_000);
    }

    #[test]
    fn needs_a_direction_and_a_sane_format() {
        let none = NullConfig {
            playback: false,
            ..NullConfig::default()
        };
        assert!(matches!(
            NullDevice::new(none),
            Err(DeviceError::BadSpec { .. })
        ));
        let zero = NullConfig {
            rate: 0,
            ..NullConfig::default()
        };
        assert!(matches!(
            NullDevice::new(zero),
            Err(DeviceError::BadSpec { .. })
        ));
    }
}
