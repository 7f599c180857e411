//! Absolute-deadline pacing shared by the null and file devices.
//!
//! Each deadline is computed from the total frame count since the time base as integer
//! nanoseconds (`t0 + frames * 1e9 / rate`), never by adding a period to the previous
//! wakeup, so rounding and wakeup latency do not accumulate into drift.
//!
//! A wakeup more than one period late restarts the time line at the wakeup instead of
//! running the missed cycles back to back: these devices have no buffer that a burst
//! would refill, so a burst only squeezes the cycles after a stall of the machine into
//! less than their period each, and a callback client still recovering from the same
//! stall misses them (jackd2's timed driver restarts its anchor the same way). The engine
//! counts such a wakeup as overdue.

use crate::clock::SimClock;
use crate::{DeviceCounters, WaitStatus};

/// How late a wakeup may be before the time base is resynchronized instead of catching up
/// with a burst of cycles (e.g. after the VM or the process was stopped).
pub(crate) const LATE_LIMIT_NS: u64 = 1_000_000_000;

pub(crate) struct Pacer {
    clock: Box<dyn SimClock>,
    rate: u64,
    t0: u64,
    frames: u64,
    running: bool,
    /// How late the last wakeup was after its deadline.
    pub(crate) last_lateness_ns: u64,
}

impl Pacer {
    pub(crate) fn new(rate: u32, clock: Box<dyn SimClock>) -> Self {
        Pacer {
            clock,
            rate: rate as u64,
            t0: 0,
            frames: 0,
            running: false,
            last_lateness_ns: 0,
        }
    }

    /// Starts a new time base at the current time.
    pub(crate) fn start(&mut self) {
        self.t0 = self.clock.now_ns();
        self.frames = 0;
        self.running = true;
    }

    /// Stops pacing; the next [`Pacer::wait`] or [`Pacer::start`] begins a new time base.
    pub(crate) fn stop(&mut self) {
        self.running = false;
    }

    /// Sleeps until `quantum` more frames are due. Returns true if the wakeup was so late
    /// (over [`LATE_LIMIT_NS`]: the process or the machine was stopped) that the caller
    /// reports an xrun; a wakeup more than one period late restarts the time line too,
    /// silently.
    pub(crate) fn wait(&mut self, quantum: usize) -> bool {
        if !self.running {
            self.start();
        }
        self.frames += quantum as u64;
        let deadline = self.t0 + (self.frames as u128 * 1_000_000_000 / self.rate as u128) as u64;
        self.clock.sleep_until_ns(deadline);
        let now = self.clock.now_ns();
        self.last_lateness_ns = now.saturating_sub(deadline);
        let period = (quantum as u128 * 1_000_000_000 / self.rate as u128) as u64;
        if now > deadline + period {
            self.t0 = now;
            self.frames = 0;
        }
        now > deadline + LATE_LIMIT_NS
    }
}

impl Pacer {
    /// A paced device's `wait`: counts the wakeup; a wakeup so late that the device ran
    /// dry counts as an underrun of its playback and an overrun of its capture, as a
    /// sound card would have had them.
    pub(crate) fn wait_device(
        &mut self,
        quantum: usize,
        counters: &mut DeviceCounters,
        playback: bool,
        capture: bool,
    ) -> WaitStatus {
        let late = self.wait(quantum);
        counters.wakeups += 1;
        if !late {
            return WaitStatus::Ready;
        }
        counters.underruns += playback as u64;
        counters.overruns += capture as u64;
        WaitStatus::Xrun
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use std::time::Duration;

    #[test]
    fn deadlines_are_exact_integer_nanoseconds_from_the_frame_count() {
        let clock = VirtualClock::new();
        clock.advance(Duration::from_secs(5));
        let mut p = Pacer::new(44_100, Box::new(clock.clone()));
        p.start();
        // 44100 frames in cycles of 441 frames is exactly one second, with no rounding
        // carried from one cycle into the next even though 441/44100 s is 10 ms exactly
        // and 1/44100 s is not an integer number of nanoseconds.
        for _ in 0..100 {
            assert!(!p.wait(441));
        }
        assert_eq!(clock.now(), 6_000_000_000);
        for _ in 0..3 {
            assert!(!p.wait(1));
        }
        assert_eq!(clock.now(), 6_000_000_000 + 3 * 1_000_000_000 / 44_100);
    }

    #[test]
    fn very_late_wakeup_resyncs_the_time_base() {
        let clock = VirtualClock::new();
        let mut p = Pacer::new(48_000, Box::new(clock.clone()));
        p.start();
        assert!(!p.wait(480));
        clock.advance(Duration::from_millis(1500));
        assert!(p.wait(480), "1.5 s late must resync");
        let after = clock.now();
        assert!(!p.wait(480));
        assert_eq!(clock.now(), after + 10_000_000);
        // Less than a period late catches up: the next deadline is the usual one.
        clock.advance(Duration::from_millis(14));
        assert!(!p.wait(480));
        assert_eq!(p.last_lateness_ns, 4_000_000);
        assert!(!p.wait(480));
        assert_eq!(clock.now(), after + 30_000_000);
        // More than a period late (a stall of the machine) restarts the time line at the
        // wakeup, silently: the cycles after it keep their whole period, none is run
        // back to back to make up for the stall.
        clock.advance(Duration::from_millis(500));
        let t = clock.now();
        assert!(!p.wait(480));
        assert_eq!(clock.now(), t);
        assert_eq!(p.last_lateness_ns, 490_000_000);
        assert!(!p.wait(480));
        assert_eq!(clock.now(), t + 10_000_000);
        assert_eq!(p.last_lateness_ns, 0);
    }
}
