//! Keeping a SCHED_FIFO thread inside RLIMIT_RTTIME.
//!
//! RealtimeKit grants real-time scheduling only to a process that limits how long its
//! real-time threads may run without blocking (RLIMIT_RTTIME, 200 ms by default); a
//! thread that runs that long without a blocking system call gets the whole process
//! killed (SIGXCPU at the soft limit, SIGKILL at the hard one). The kernel counts the
//! CPU time since the thread last went to sleep, so a thread that is merely *busy* —
//! the PulseAudio I/O thread serving 32 low-latency clients whose answers keep it from
//! ever finding nothing to do, or an engine whose cycles take longer than their period
//! — is killed as surely as one that spins on a bug. Seen on this machine kind: the I/O
//! thread at SCHED_FIFO 1, starved of its CPU for 200 ms by other real-time work and then
//! busy with the backlog, took quaverd down with every client (a core dump at SIGXCPU
//! showed it in the srbchannel pass).
//!
//! [`RttimeGuard`] is that thread's promise to block: called once per pass of its loop,
//! right after the loop's wait, it notices (from the thread's count of voluntary context
//! switches, read at most four times per budget) when the thread has not slept for a
//! quarter of the limit and then sleeps [`FORCED_SLEEP`], a real block that restarts the
//! kernel's count. Its clock is the wall clock, so a thread kept off the CPU by others
//! for that long sleeps once needlessly; that costs 100 µs, never a kill. The cost is a
//! tenth of a millisecond in fifty of an overloaded thread, against the whole daemon.

use std::time::Duration;

/// How long a forced sleep lasts: long enough that the kernel surely puts the thread
/// to sleep (a shorter timer may expire before the thread is switched out).
pub const FORCED_SLEEP: Duration = Duration::from_micros(100);

/// The longest budget: even without a limit a real-time thread should not hold a CPU
/// longer than this (the kernel's RT throttling steps in at 950 ms of every second).
const MAX_BUDGET_NS: u64 = 50_000_000;

/// Watches one real-time thread's time without blocking (see the module docs).
#[derive(Debug)]
pub struct RttimeGuard {
    /// Longest run without blocking before a forced sleep; 0 turns the guard off.
    budget_ns: u64,
    /// When the switch count was last read, and what it was.
    probed_at: u64,
    switches: u64,
    /// The latest time the thread is known to have been asleep.
    slept_by: u64,
    forced: u64,
}

impl RttimeGuard {
    /// A guard whose budget is a quarter of this process's RLIMIT_RTTIME soft limit, at
    /// most [`MAX_BUDGET_NS`]; without a limit it still keeps the thread from holding a
    /// CPU longer than that.
    pub fn for_this_process() -> RttimeGuard {
        let limit_us = rttime_limit_us();
        let budget = match limit_us {
            Some(us) => (us.saturating_mul(1_000) / 4).min(MAX_BUDGET_NS),
            None => MAX_BUDGET_NS,
        };
        RttimeGuard::with_budget(Duration::from_nanos(budget))
    }

    /// A guard with this budget (zero: never forces a sleep).
    pub fn with_budget(budget: Duration) -> RttimeGuard {
        let now = crate::monotonic_ns();
        RttimeGuard {
            budget_ns: budget.as_nanos().min(u64::MAX as u128) as u64,
            probed_at: now,
            switches: voluntary_switches(),
            slept_by: now,
            forced: 0,
        }
    }

    /// The budget in nanoseconds.
    pub fn budget_ns(&self) -> u64 {
        self.budget_ns
    }

    /// Forced sleeps so far.
    pub fn forced(&self) -> u64 {
        self.forced
    }

    /// Once per pass of the thread's loop, best right after its wait: sleeps [`FORCED_SLEEP`] when the thread has
    /// not blocked for the budget, and returns how long it had run (ns) when it did.
    /// Reads the time (vDSO) every call and the switch count (one `getrusage`) only
    /// every quarter budget.
    pub fn check(&mut self) -> Option<u64> {
        if self.budget_ns == 0 {
            return None;
        }
        let now = crate::monotonic_ns();
        if now.saturating_sub(self.probed_at) < self.budget_ns / 4 {
            return None;
        }
        let switches = voluntary_switches();
        if switches != self.switches {
            // It slept since the last look, and in a loop that sleeps only in its wait
            // that was at the end of the wait just before this call: count from now. Off
            // by at most one probe interval (a sleep elsewhere in an earlier pass), which
            // the budget's quarter of the limit leaves room for. (Counting from the last
            // look instead forced a sleep after every long idle wait.)
            self.switches = switches;
            self.slept_by = now;
        }
        self.probed_at = now;
        let ran = now.saturating_sub(self.slept_by);
        if ran < self.budget_ns {
            return None;
        }
        std::thread::sleep(FORCED_SLEEP);
        self.forced += 1;
        let after = crate::monotonic_ns();
        self.switches = voluntary_switches();
        self.probed_at = after;
        self.slept_by = after;
        Some(ran)
    }
}

/// The soft RLIMIT_RTTIME in µs, `None` when unlimited.
pub fn rttime_limit_us() -> Option<u64> {
    // SAFETY: getrlimit writes only the struct it is given.
    let mut l: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid resource and a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut l) } != 0 {
        return None;
    }
    (l.rlim_cur != libc::RLIM_INFINITY).then_some(l.rlim_cur)
}

fn voluntary_switches() -> u64 {
    crate::thread_usage().map(|u| u.voluntary).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let end = crate::monotonic_ns() + d.as_nanos() as u64;
        while crate::monotonic_ns() < end {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_thread_that_never_blocks_is_made_to_sleep_once_per_budget() {
        let mut g = RttimeGuard::with_budget(Duration::from_millis(20));
        let mut forced = Vec::new();
        let start = crate::monotonic_ns();
        // 100 ms of passes that never block.
        while crate::monotonic_ns() - start < 100_000_000 {
            if let Some(ran) = g.check() {
                forced.push(ran);
            }
        }
        // 100 ms over a 20 ms budget checked every 5 ms: 4 forced sleeps, each after at
        // least the budget (2 to 5 on a busy machine, where preemption stretches one).
        assert!((2..=5).contains(&forced.len()), "{forced:?}");
        assert!(forced.iter().all(|&ran| ran >= 20_000_000), "{forced:?}");
        assert_eq!(g.forced(), forced.len() as u64);
    }

    #[test]
    fn a_thread_that_sleeps_between_passes_is_left_alone() {
        let mut g = RttimeGuard::with_budget(Duration::from_millis(20));
        for _ in 0..40 {
            spin(Duration::from_millis(2));
            std::thread::sleep(Duration::from_millis(1));
            assert_eq!(g.check(), None);
        }
        assert_eq!(g.forced(), 0);
    }

    #[test]
    fn a_zero_budget_turns_the_guard_off() {
        let mut g = RttimeGuard::with_budget(Duration::ZERO);
        spin(Duration::from_millis(5));
        assert_eq!(g.check(), None);
        assert_eq!(g.budget_ns(), 0);
    }

    #[test]
    fn the_budget_is_a_quarter_of_the_limit_at_most_fifty_ms() {
        let g = RttimeGuard::for_this_process();
        match rttime_limit_us() {
            Some(us) => assert_eq!(g.budget_ns(), (us * 1_000 / 4).min(MAX_BUDGET_NS)),
            None => assert_eq!(g.budget_ns(), MAX_BUDGET_NS),
        }
    }
}
