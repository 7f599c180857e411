//! Counters the RT thread publishes in preallocated atomics; the control side reads them
//! and turns them into statistics.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64};

/// Most devices one engine drives (one clock domain).
pub const MAX_DEVICES: usize = 8;

/// Per-device counters the RT thread publishes.
#[derive(Debug, Default)]
pub struct DeviceStats {
    /// Driver wakeups.
    pub wakeups: AtomicU64,
    /// Hardware-pointer queries.
    pub pointer_queries: AtomicU64,
    /// Underruns.
    pub underruns: AtomicU64,
    /// Overruns.
    pub overruns: AtomicU64,
    /// Frames written.
    pub frames_written: AtomicU64,
    /// Frames read.
    pub frames_read: AtomicU64,
    /// Playback delay in frames after the last write.
    pub playback_delay: AtomicU64,
    /// The device failed.
    pub gone: AtomicBool,
    /// Rewinds done.
    pub rewinds: AtomicU64,
    /// Playback frames taken back by rewinds.
    pub rewound_frames: AtomicU64,
    /// Its handles are closed (idle).
    pub closed: AtomicBool,
    /// Idle closes.
    pub idle_closes: AtomicU64,
    /// Reopens after an idle close.
    pub reopens: AtomicU64,
    /// The safety margin (watermark) in effect, frames; 0 where the device has none.
    pub margin_frames: AtomicU64,
    /// How often an adaptive margin changed.
    pub margin_changes: AtomicU64,
    /// Steered as a follower in the last cycle (`rt/follow.rs`); the `follow_*` fields
    /// below are its loop's state.
    pub follow_active: AtomicBool,
    /// The follower's clock against the driver's as the playback loop has it, minus 1,
    /// parts per billion ([`NO_RATIO`]: it does not play).
    pub follow_play_ppb: AtomicI64,
    /// The same as the capture loop has it ([`NO_RATIO`]: it does not capture).
    pub follow_cap_ppb: AtomicI64,
    /// Playback frames queued at the last reading ([`NO_LEVEL`]: none yet).
    pub follow_play_level: AtomicU64,
    /// The playback level the loop holds ([`NO_LEVEL`]: none yet).
    pub follow_play_target: AtomicU64,
    /// Lowest playback level minus its target since the loop last restarted, frames.
    pub follow_play_err_min: AtomicI64,
    /// Highest playback level minus its target since the loop last restarted, frames.
    pub follow_play_err_max: AtomicI64,
    /// Times the loop restarted (the device (re)started, or recovered from an xrun).
    pub follow_restarts: AtomicU64,
}

/// A `follow_*` level not read yet.
pub const NO_LEVEL: u64 = u64::MAX;
/// A `follow_*_ppb` of a side the device does not have.
pub const NO_RATIO: i64 = i64::MIN;

/// Counters the RT thread increments and the control side turns into statistics.
#[derive(Debug, Default)]
pub struct RtStats {
    /// Cycles run.
    pub cycles: AtomicU64,
    /// Plans the control side has queued.
    pub plans_sent: AtomicU64,
    /// Plans taken from the control queue; more than `MAX_PENDING_PLANS` behind
    /// `plans_sent`, the RT thread takes them all in one cycle.
    pub plans_applied: AtomicU64,
    /// Driver xruns.
    pub xruns: AtomicU64,
    /// Current quantum.
    pub quantum: AtomicU64,
    /// Devices suspended.
    pub suspended: AtomicBool,
    /// Time spent processing the last cycle, ns.
    pub busy_ns_last: AtomicU64,
    /// Longest cycle processing time, ns.
    pub busy_ns_max: AtomicU64,
    /// Retired objects leaked because the garbage queue was full (should stay 0).
    pub leaked: AtomicU64,
    /// Events dropped because the event queue was full.
    pub events_dropped: AtomicU64,
    /// Filter control changes the node refused (no such filter or control, or a value
    /// out of range) or whose node was gone.
    pub controls_refused: AtomicU64,
    /// Per-device counters.
    pub devices: [DeviceStats; MAX_DEVICES],
    /// Driver wakeup lateness, log2 buckets of ns (bucket i: [2^i, 2^(i+1))).
    pub lateness_hist: [AtomicU64; HIST_BUCKETS],
    /// Largest wakeup lateness, ns.
    pub lateness_max_ns: AtomicU64,
    /// Driver wakeups more than one period after their deadline (devices that sleep to a
    /// computed deadline: null, file): the thread had fallen a whole cycle behind.
    pub overdue_cycles: AtomicU64,
    /// Runs of consecutive overdue cycles: how often the thread fell behind (jackd2's
    /// timed driver logs one xrun for each, then restarts its time line).
    pub overdue_runs: AtomicU64,
    /// Cycle processing time, log2 buckets of ns.
    pub busy_hist: [AtomicU64; HIST_BUCKETS],
    /// Brief sleeps forced on the thread after cycles ran back to back for a quarter of
    /// RLIMIT_RTTIME (`quaver_rt::rttime`).
    pub forced_sleeps: AtomicU64,
    /// Per-cycle stage times of the cycle's callback client ([`crate::rt::stages`]).
    pub stages: crate::rt::stages::CycleStages,
}

/// Buckets of the log2 timing histograms (the last, from 2^31 ns ≈ 2.1 s, takes all longer).
pub const HIST_BUCKETS: usize = 32;

/// The log2 bucket of a duration in ns.
pub fn hist_bucket(ns: u64) -> usize {
    ((u64::BITS - ns.leading_zeros()) as usize)
        .saturating_sub(1)
        .min(HIST_BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::hist_bucket;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(1), 0);
        assert_eq!(hist_bucket(2), 1);
        assert_eq!(hist_bucket(1023), 9);
        assert_eq!(hist_bucket(1024), 10);
        assert_eq!(hist_bucket(u64::MAX), 31);
    }
}
