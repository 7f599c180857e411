//! The adaptive safety margin (watermark): how much audio a timer-scheduled device keeps
//! queued when the driver wakes up, and the matching utilization floor for the real-time
//! thread ([`util_min_for`]; `quaver_rt::UtilClamp` applies it where the kernel can).
//!
//! Policy ("jump, hold, decay"):
//!
//! * **Underrun → jump.** The margin goes straight to its maximum (not a step up: one
//!   glitch already happened, a second one while creeping upwards is what users notice).
//! * **Hold.** For [`HOLD_AFTER_UNDERRUN_US`] after the last underrun the margin does not
//!   decrease, so underruns that repeat within the hold keep it at the maximum.
//! * **Decay.** After the hold, every [`DECAY_INTERVAL_US`] without trouble lowers it by
//!   one [`DECAY_STEP_US`] step, linearly, down to the minimum.
//! * **Near miss → hold again.** A cycle that used more than [`NEAR_MISS_PERCENT`] of the
//!   margin (the device came close to running dry) restarts the hold without raising
//!   the margin. The margin therefore settles just above what the recurring load needs
//!   instead of decaying into the next underrun, and returns to the minimum once the
//!   load stops.
//!
//! The module is pure arithmetic on times and frame counts the caller passes in; it
//! never reads a clock, allocates or logs, so it runs on the real-time thread. Every
//! method that changes the margin returns a [`MarginChange`]; the caller publishes it
//! (e.g. in [`crate::DeviceCounters`]) and the control side logs it at debug level.

/// Default smallest margin. Covers a timer wakeup's latency on a loaded desktop (well
/// under 1 ms with SCHED_FIFO) plus the processing of one small quantum; PulseAudio's
/// minimum wakeup margin (`TSCHED_MIN_WAKEUP_USEC`) is the same 4 ms.
pub const DEFAULT_MIN_US: u64 = 4_000;

/// Default largest margin. Absorbs a ~30 ms stall (page-fault storm, CPU frequency
/// ramp, VM steal) with room to spare; a margin beyond this costs more latency than the
/// rare glitch it would prevent.
pub const DEFAULT_MAX_US: u64 = 40_000;

/// How long the margin stays up after an underrun or near miss before it may decrease.
/// Load spikes (compiles, GC, app start-up) come in bursts lasting seconds; PulseAudio
/// waits 20 s (`TSCHED_WATERMARK_VERIFY_AFTER_USEC`) before it re-checks.
pub const HOLD_AFTER_UNDERRUN_US: u64 = 10_000_000;

/// One decay step. Small against the spikes the margin exists for, so lowering it never
/// uncovers in one go a spike the previous level absorbed with room.
pub const DECAY_STEP_US: u64 = 1_000;

/// Time between decay steps. With the defaults the way down from 40 ms to 4 ms takes
/// 36 s after the hold: slow enough that a sporadic load is still covered, fast enough
/// that latency and power come back within a minute.
pub const DECAY_INTERVAL_US: u64 = 1_000_000;

/// A cycle that used more than this share of the margin (left less than the rest) was
/// nearly an underrun: the margin holds instead of decaying further. At one half, a
/// margin settles between one and two times what a recurring load needs, and that band
/// is wider than the few decay steps that fit between spikes seconds apart, so the
/// decay cannot step over it into the next underrun.
pub const NEAR_MISS_PERCENT: u64 = 50;

/// Bounds of an adaptive margin, in frames at `rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarginConfig {
    /// Sample rate in Hz (turns the time constants into frames).
    pub rate: u32,
    /// The margin the device settles at without trouble, in frames.
    pub min_frames: usize,
    /// The margin after an underrun, in frames (≥ `min_frames`; equal = fixed margin).
    pub max_frames: usize,
}

impl MarginConfig {
    /// [`DEFAULT_MIN_US`] … [`DEFAULT_MAX_US`] at `rate`.
    pub fn for_rate(rate: u32) -> Self {
        MarginConfig {
            rate,
            min_frames: us_to_frames(DEFAULT_MIN_US, rate).max(1),
            max_frames: us_to_frames(DEFAULT_MAX_US, rate).max(1),
        }
    }

    /// A margin that never moves.
    pub fn fixed(rate: u32, frames: usize) -> Self {
        MarginConfig {
            rate,
            min_frames: frames,
            max_frames: frames,
        }
    }

    /// True if the margin can change at all.
    pub fn is_adaptive(&self) -> bool {
        self.max_frames > self.min_frames
    }
}

/// Frames in `us` microseconds at `rate` (rounded down).
pub fn us_to_frames(us: u64, rate: u32) -> usize {
    (us as u128 * rate as u128 / 1_000_000) as usize
}

/// A change of the margin, for the caller to publish and log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarginChange {
    /// An underrun raised the margin.
    Raised {
        /// Frames before.
        from: usize,
        /// Frames after.
        to: usize,
    },
    /// A decay step lowered it.
    Lowered {
        /// Frames before.
        from: usize,
        /// Frames after.
        to: usize,
    },
}

/// The adaptive margin's state. Times are nanoseconds on the caller's clock.
#[derive(Debug, Clone)]
pub struct Margin {
    cfg: MarginConfig,
    step_frames: usize,
    current: usize,
    /// No decay before this time (0 = no hold yet).
    hold_until_ns: u64,
    /// No decay step before this time.
    next_step_ns: u64,
    changes: u64,
}

impl Margin {
    /// Starts at the minimum, with no hold. `max_frames` below `min_frames` is raised to it.
    pub fn new(cfg: MarginConfig) -> Self {
        let cfg = MarginConfig {
            max_frames: cfg.max_frames.max(cfg.min_frames),
            ..cfg
        };
        Margin {
            step_frames: us_to_frames(DECAY_STEP_US, cfg.rate).max(1),
            current: cfg.min_frames,
            hold_until_ns: 0,
            next_step_ns: 0,
            changes: 0,
            cfg,
        }
    }

    /// The bounds.
    pub fn config(&self) -> MarginConfig {
        self.cfg
    }

    /// The margin now, in frames.
    pub fn current(&self) -> usize {
        self.current
    }

    /// How many times the margin changed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Where the margin stands between its bounds: 0 at the minimum, 1 at the maximum
    /// (0 for a fixed margin).
    pub fn level(&self) -> f64 {
        let span = self.cfg.max_frames - self.cfg.min_frames;
        if span == 0 {
            0.0
        } else {
            (self.current - self.cfg.min_frames) as f64 / span as f64
        }
    }

    /// An underrun (or overrun) happened at `now_ns`: jump to the maximum and hold.
    pub fn on_underrun(&mut self, now_ns: u64) -> Option<MarginChange> {
        self.hold(now_ns);
        let from = self.current;
        if from == self.cfg.max_frames {
            return None;
        }
        self.current = self.cfg.max_frames;
        self.changes += 1;
        Some(MarginChange::Raised {
            from,
            to: self.current,
        })
    }

    /// A cycle completed at `now_ns` with `left_frames` still queued at its lowest point
    /// (the device's headroom when the cycle's audio was handed over). Near misses
    /// restart the hold; otherwise the margin decays one step per interval once the
    /// hold is over.
    pub fn on_cycle(&mut self, now_ns: u64, left_frames: usize) -> Option<MarginChange> {
        if (left_frames as u64) * 100 < self.current as u64 * (100 - NEAR_MISS_PERCENT) {
            self.hold(now_ns);
            return None;
        }
        if self.current == self.cfg.min_frames
            || now_ns < self.hold_until_ns
            || now_ns < self.next_step_ns
        {
            return None;
        }
        let from = self.current;
        self.current = from
            .saturating_sub(self.step_frames)
            .max(self.cfg.min_frames);
        self.next_step_ns = now_ns.saturating_add(DECAY_INTERVAL_US * 1_000);
        self.changes += 1;
        Some(MarginChange::Lowered {
            from,
            to: self.current,
        })
    }

    fn hold(&mut self, now_ns: u64) {
        self.hold_until_ns = now_ns.saturating_add(HOLD_AFTER_UNDERRUN_US * 1_000);
        self.next_step_ns = self.hold_until_ns;
    }
}

/// Largest `util_min` the clamp requests (the kernel's scale is 0…1024). Half the
/// capacity of the biggest CPU keeps the frequency governor from starting the audio
/// thread at the lowest clock after an underrun, without pinning the CPU at maximum.
pub const UCLAMP_MIN_AT_MAX_MARGIN: u32 = 512;

/// The kernel's utilization scale (`SCHED_CAPACITY_SCALE`).
pub const UCLAMP_SCALE: u32 = 1024;

/// `util_min` for the real-time thread that follows the margin: the same jump on
/// underrun and linear decay, mapped onto 0…[`UCLAMP_MIN_AT_MAX_MARGIN`].
pub fn util_min_for(margin: &Margin) -> u32 {
    (margin.level() * UCLAMP_MIN_AT_MAX_MARGIN as f64).round() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn cfg() -> MarginConfig {
        // 48 kHz: 4 ms = 192 frames, 40 ms = 1920 frames, one step = 48 frames.
        MarginConfig::for_rate(48_000)
    }

    #[test]
    fn defaults_in_frames() {
        let c = cfg();
        assert_eq!((c.min_frames, c.max_frames), (192, 1920));
        assert!(c.is_adaptive());
        assert!(!MarginConfig::fixed(48_000, 256).is_adaptive());
        let m = Margin::new(c);
        assert_eq!(m.current(), 192);
        assert_eq!(m.level(), 0.0);
        assert_eq!(util_min_for(&m), 0);
    }

    #[test]
    fn underrun_jumps_straight_to_the_maximum() {
        let mut m = Margin::new(cfg());
        assert_eq!(
            m.on_underrun(5 * S),
            Some(MarginChange::Raised {
                from: 192,
                to: 1920
            })
        );
        assert_eq!(m.current(), 1920);
        assert_eq!(m.level(), 1.0);
        assert_eq!(util_min_for(&m), UCLAMP_MIN_AT_MAX_MARGIN);
        // Already at the ceiling: no change to report.
        assert_eq!(m.on_underrun(6 * S), None);
        assert_eq!(m.changes(), 1);
    }

    #[test]
    fn decay_is_linear_after_the_hold_one_step_per_interval() {
        let mut m = Margin::new(cfg());
        m.on_underrun(0);
        // Comfortable cycles every 10 ms: nothing during the hold.
        let mut t = 0;
        while t < HOLD_AFTER_UNDERRUN_US * 1_000 {
            assert_eq!(m.on_cycle(t, 1900), None, "decayed during the hold at {t}");
            t += 10 * MS;
        }
        // Then one step per second.
        let mut lowered = Vec::new();
        while t < 60 * S {
            if let Some(MarginChange::Lowered { from, to }) = m.on_cycle(t, 1900) {
                assert_eq!(from - to, 48);
                lowered.push((t, to));
            }
            t += 10 * MS;
        }
        // (1920 - 192) / 48 = 36 steps, the first right when the hold ends.
        assert_eq!(lowered.len(), 36);
        assert_eq!(lowered[0], (10 * S, 1872));
        for w in lowered.windows(2) {
            assert_eq!(w[1].0 - w[0].0, S);
        }
        assert_eq!(lowered.last().unwrap().1, 192);
        assert_eq!(m.current(), 192);
        // Floor: no further steps.
        assert_eq!(m.on_cycle(100 * S, 1900), None);
    }

    #[test]
    fn floor_and_ceiling_hold_even_with_odd_steps() {
        let c = MarginConfig {
            rate: 48_000,
            min_frames: 100,
            max_frames: 130,
        };
        let mut m = Margin::new(c);
        m.on_underrun(0);
        assert_eq!(m.current(), 130);
        let t = HOLD_AFTER_UNDERRUN_US * 1_000;
        // One step of 48 would go below the floor: it stops at the floor.
        assert_eq!(
            m.on_cycle(t, 1000),
            Some(MarginChange::Lowered { from: 130, to: 100 })
        );
        assert_eq!(m.on_cycle(t + 10 * S, 1000), None);
        // A max below the min is raised to it (a fixed margin).
        let m = Margin::new(MarginConfig {
            rate: 48_000,
            min_frames: 300,
            max_frames: 10,
        });
        assert_eq!(m.config().max_frames, 300);
        assert_eq!(m.level(), 0.0);
    }

    #[test]
    fn no_decay_while_underruns_repeat() {
        let mut m = Margin::new(cfg());
        // An underrun every 5 s (shorter than the hold) for two minutes.
        let mut t = 0;
        while t < 120 * S {
            if t % (5 * S) == 0 {
                m.on_underrun(t);
            }
            assert_eq!(m.on_cycle(t, 1900), None, "decayed at {t}");
            assert_eq!(m.current(), 1920);
            t += 10 * MS;
        }
        assert_eq!(m.changes(), 1);
    }

    #[test]
    fn near_misses_stop_the_decay_where_the_load_needs_it() {
        let mut m = Margin::new(cfg());
        m.on_underrun(0);
        // A recurring spike eats 600 frames every 3 s; otherwise cycles leave the full
        // margin. Once the margin is low enough that the spike uses more than half of
        // it, decay stops — above the spike, so no underrun ever comes back.
        let mut t = 0;
        while t < 300 * S {
            let left = if t % (3 * S) == 0 {
                let left = m.current().saturating_sub(600);
                assert!(
                    left > 0,
                    "the spike at {t} would underrun (margin {})",
                    m.current()
                );
                left
            } else {
                m.current()
            };
            m.on_cycle(t, left);
            t += 10 * MS;
        }
        let settled = m.current();
        assert!((1000..=1200).contains(&settled), "settled at {settled}");
        // The load stops: back to the minimum within hold + (settled - min)/step s.
        let end = t + HOLD_AFTER_UNDERRUN_US * 1_000 + 30 * S;
        while t < end {
            m.on_cycle(t, m.current());
            t += 10 * MS;
        }
        assert_eq!(m.current(), 192);
    }
}
