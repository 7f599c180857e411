//! How a simulated card is set up ([`SimConfig`]), the faults it can be told to inject,
//! and the DAC probe tests watch it with.

use quaver_dsp::ChannelMap;
use std::time::Duration;

/// A fault injected into a [`super::SimCard`] at a given cycle (the n-th call of `wait`
/// since the card was opened, counting from 0; of `follow` for a card that follows
/// another's clock).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// The card reports an xrun: queued audio is dropped and the streams restart.
    Xrun {
        /// Cycle at which the xrun happens.
        at_cycle: u64,
    },
    /// The driver thread stalls for `duration` inside the cycle (as if descheduled); a
    /// stall longer than the headroom makes the hardware underrun.
    Stall {
        /// Cycle in which the stall happens.
        at_cycle: u64,
        /// How long the thread stalls.
        duration: Duration,
    },
    /// The card disappears: `wait` (and every later call) fails with `DeviceError::Gone`.
    Unplug {
        /// Cycle at which the card is unplugged.
        at_cycle: u64,
    },
}

impl Fault {
    /// The cycle the fault fires in.
    pub fn at_cycle(&self) -> u64 {
        match *self {
            Fault::Xrun { at_cycle }
            | Fault::Stall { at_cycle, .. }
            | Fault::Unplug { at_cycle } => at_cycle,
        }
    }
}

/// How to build a [`super::SimCard`].
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Nominal sample rate in Hz.
    pub rate: u32,
    /// Channels of both the playback and the capture side.
    pub channels: ChannelMap,
    /// Size of each ring in frames; `quantum + period_frames` may not exceed it.
    pub buffer_frames: usize,
    /// The watermark: frames still queued for playback when the driver wakes (with an
    /// adaptive margin, its minimum).
    pub period_frames: usize,
    /// Makes the watermark adaptive ([`crate::margin`]): it jumps to this many frames on
    /// an underrun and decays back to `period_frames`. `None` keeps it fixed.
    pub margin_max_frames: Option<usize>,
    /// Capture returns what was played at the same hardware position.
    pub loopback: bool,
    /// The hardware clock runs at `rate · (1 + drift_ppm / 1e6)` frames per second.
    pub drift_ppm: f64,
    /// The drift changes once while running, as a crystal warming up does.
    pub drift_step: Option<DriftStep>,
    /// Faults to inject.
    pub faults: Vec<Fault>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            rate: 48_000,
            channels: ChannelMap::stereo(),
            buffer_frames: 8192,
            period_frames: 256,
            margin_max_frames: None,
            loopback: true,
            drift_ppm: 0.0,
            drift_step: None,
            faults: Vec::new(),
        }
    }
}

/// A change of a [`SimConfig`]'s drift while the card runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriftStep {
    /// How long after the card first starts, on its clock.
    pub after: Duration,
    /// The drift from then on, ppm (|drift| ≤ [`MAX_DRIFT_PPM`]).
    pub ppm: f64,
}

/// Largest accepted |drift_ppm|: 10 %, far beyond any real crystal.
pub const MAX_DRIFT_PPM: f64 = 100_000.0;

/// Frames from a sample passed to `write` in some cycle until the same sample comes back
/// from `read`, through loopback, for an engine that runs `wait → read → process → write`
/// at a constant `quantum` since the last start or xrun: `quantum + period_frames`.
///
/// After `write`, `quantum + period_frames` frames are queued ahead of the hardware, and
/// the capture side has nothing unread, so the written sample is played, and captured,
/// exactly that many frames after the capture position the application reads next. The
/// derivation is in docs/devices.md. With an adaptive margin (`margin_max_frames`) the
/// watermark in effect replaces `period_frames`: after an underrun the round trip is
/// `quantum + margin_max_frames`, and it keeps the largest value since the last restart
/// (a decaying margin shortens the playback headroom, not the lead).
pub fn theoretical_round_trip_frames(cfg: &SimConfig, quantum: usize) -> usize {
    quantum + cfg.period_frames
}

/// A test instrument on the simulated card's DAC: the time the first sample at or above
/// a threshold (channel 0, absolute value) is played. Clones share one probe, so a test
/// keeps one while the card, inside an engine, holds the other.
#[derive(Debug, Clone)]
pub struct DacProbe(pub(super) std::sync::Arc<ProbeState>);

#[derive(Debug)]
pub(super) struct ProbeState {
    pub(super) threshold: f32,
    pub(super) first_ns: std::sync::atomic::AtomicU64,
}

impl DacProbe {
    /// A probe that fires on the first played sample with `|x| >= threshold`.
    pub fn new(threshold: f32) -> Self {
        DacProbe(std::sync::Arc::new(ProbeState {
            threshold,
            first_ns: u64::MAX.into(),
        }))
    }

    /// When (on the card's clock, ns) the first such sample was played, if yet.
    pub fn first_played_ns(&self) -> Option<u64> {
        let t = self.0.first_ns.load(std::sync::atomic::Ordering::Acquire);
        (t != u64::MAX).then_some(t)
    }

    /// Arms the probe again.
    pub fn reset(&self) {
        self.0
            .first_ns
            .store(u64::MAX, std::sync::atomic::Ordering::Release);
    }
}
