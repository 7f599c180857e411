//! Clocks that pace the timer-driven devices: the real monotonic clock, and a virtual
//! clock that makes simulated runs deterministic and instant.

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fd::BorrowedFd;
use rustix::thread::clock_nanosleep_absolute;
use rustix::time::{ClockId, Timespec};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const NS_PER_S: u64 = 1_000_000_000;

/// A monotonic time line a device is paced by (pluggable so tests can run on virtual time).
///
/// Both methods are called on the real-time thread: they must not allocate or lock.
pub trait SimClock: Send {
    /// Current time in nanoseconds on this clock's time line.
    fn now_ns(&mut self) -> u64;
    /// Blocks until the clock reads at least `t` nanoseconds; returns at once if `t` is past.
    fn sleep_until_ns(&mut self, t: u64);

    /// Like [`SimClock::sleep_until_ns`], but returns `true` early once `wake` is
    /// readable (without reading it), so a long sleep can be cut short by a control
    /// message. A virtual clock only looks at `wake` before it jumps forward.
    fn sleep_until_ns_or_wake(&mut self, t: u64, wake: BorrowedFd<'_>) -> bool {
        if readable(
            wake,
            Some(&Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }),
        ) {
            return true;
        }
        self.sleep_until_ns(t);
        false
    }
}

/// Whether `fd` becomes readable within `timeout` (`None`: no limit). Interrupted polls
/// count as "not readable"; callers loop on their own deadline.
fn readable(fd: BorrowedFd<'_>, timeout: Option<&Timespec>) -> bool {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
}

/// `CLOCK_MONOTONIC`, slept on with absolute deadlines (`clock_nanosleep(TIMER_ABSTIME)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

/// Reads `CLOCK_MONOTONIC` in nanoseconds.
pub use quaver_rt::monotonic_ns;

impl SimClock for RealClock {
    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }

    fn sleep_until_ns(&mut self, t: u64) {
        let ts = Timespec {
            tv_sec: (t / NS_PER_S) as _,
            tv_nsec: (t % NS_PER_S) as _,
        };
        // An absolute deadline makes a signal-interrupted sleep safe to simply repeat.
        while let Err(rustix::io::Errno::INTR) = clock_nanosleep_absolute(ClockId::Monotonic, &ts) {
        }
    }

    fn sleep_until_ns_or_wake(&mut self, t: u64, wake: BorrowedFd<'_>) -> bool {
        // poll takes a relative timeout; recomputing it from the absolute deadline after
        // every return keeps signals and early returns from stretching the sleep.
        loop {
            let now = monotonic_ns();
            if now >= t {
                return false;
            }
            let left = t - now;
            let ts = Timespec {
                tv_sec: (left / NS_PER_S) as _,
                tv_nsec: (left % NS_PER_S) as _,
            };
            if readable(wake, Some(&ts)) {
                return true;
            }
        }
    }
}

/// Virtual time: sleeping just moves the time forward, so runs are deterministic and take
/// no wall time. Clones share one time line, which lets a test hold a handle to advance
/// time (e.g. to model slow processing) while the device owns another.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock {
    now: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A virtual clock reading 0 ns.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current virtual time in nanoseconds.
    pub fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// Moves virtual time forward by `d` (e.g. time spent processing a cycle).
    pub fn advance(&self, d: Duration) {
        self.now
            .fetch_add(d.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }
}

impl SimClock for VirtualClock {
    fn now_ns(&mut self) -> u64 {
        self.now()
    }

    fn sleep_until_ns(&mut self, t: u64) {
        self.now.fetch_max(t, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_sleeps_forward_only_and_clones_share_time() {
        let mut c = VirtualClock::new();
        let handle = c.clone();
        c.sleep_until_ns(1_000);
        assert_eq!(handle.now(), 1_000);
        c.sleep_until_ns(500);
        assert_eq!(c.now_ns(), 1_000);
        handle.advance(Duration::from_micros(1));
        assert_eq!(c.now_ns(), 2_000);
    }

    #[test]
    fn real_clock_absolute_sleep_reaches_deadline() {
        let mut c = RealClock;
        let t = c.now_ns() + 2_000_000;
        c.sleep_until_ns(t);
        assert!(c.now_ns() >= t);
    }
}
