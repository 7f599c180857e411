//! Waiting for a synchronous callback client without paying a wakeup after its answer
//! (`callback.spin_us`; docs/engine/stages.md, "The second wakeup").
//!
//! Blocking on the client's completion eventfd costs the RT thread a wakeup *after* the
//! client has answered; on a loaded or virtualised machine that wakeup is itself
//! delayed (the *resume* stage). [`CompletionSpin`] instead sleeps until shortly before
//! the client is expected to answer (a moving average of its past answers), so the
//! timer wakeup's own delay passes while the client still works, then polls the
//! completion word for at most `spin_us`, and only then blocks as before. The
//! synchronous contract is unchanged: nothing past the deadline, the same outcome for a
//! client that does not answer. Off (0) by default.

/// What the spin needs of a client: a completion test and the bounded blocking wait.
pub trait Completion {
    /// The client completed the cycle it was last woken for.
    fn is_complete(&self) -> bool;
    /// Blocks until it completes or CLOCK_MONOTONIC reaches `deadline_ns`; whether it
    /// completed.
    fn block_until(&mut self, deadline_ns: u64) -> bool;
}

/// Per client: the spin budget and its answer time so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct CompletionSpin {
    spin_ns: u64,
    /// Moving average of signal → the client's answer, ns (0: nothing learnt yet).
    expect_ns: u64,
}

impl CompletionSpin {
    /// Spins for at most `spin_us` per cycle (0: never, block at once).
    pub fn new(spin_us: u32) -> CompletionSpin {
        CompletionSpin {
            spin_ns: spin_us as u64 * 1000,
            expect_ns: 0,
        }
    }

    /// Waits for a client signalled at `signal_ns` until `deadline_ns`; whether it
    /// answered. *RT*: clock reads, the completion word and the client's own bounded
    /// wait only.
    pub fn wait(&mut self, c: &mut impl Completion, signal_ns: u64, deadline_ns: u64) -> bool {
        if self.spin_ns == 0 {
            return c.block_until(deadline_ns);
        }
        if c.is_complete() {
            return true;
        }
        if self.expect_ns > 0 {
            // Start polling half a budget before the expected answer; sleeping is only
            // worth it when that is further off than the wakeup it costs.
            let spin_from = (signal_ns + self.expect_ns).saturating_sub(self.spin_ns / 2);
            if spin_from > quaver_rt::monotonic_ns() + self.spin_ns / 2
                && c.block_until(spin_from.min(deadline_ns))
            {
                return true;
            }
        }
        let stop = (quaver_rt::monotonic_ns() + self.spin_ns).min(deadline_ns);
        loop {
            if c.is_complete() {
                return true;
            }
            if quaver_rt::monotonic_ns() >= stop {
                break;
            }
            std::hint::spin_loop();
        }
        c.block_until(deadline_ns)
    }

    /// Learns from an answer at `answered_ns` (the client's own completion stamp where
    /// trusted, else when the thread saw it) to a signal at `signal_ns`. *RT*.
    pub fn learn(&mut self, signal_ns: u64, answered_ns: u64) {
        let took = answered_ns.saturating_sub(signal_ns);
        self.expect_ns = if self.expect_ns == 0 {
            took
        } else {
            // 1/8 per answer: a few late answers under load move it little.
            self.expect_ns - self.expect_ns / 8 + took / 8
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that completes at a set CLOCK_MONOTONIC time.
    struct At {
        done_at: u64,
        blocks: Vec<u64>,
    }

    impl Completion for At {
        fn is_complete(&self) -> bool {
            quaver_rt::monotonic_ns() >= self.done_at
        }
        fn block_until(&mut self, deadline_ns: u64) -> bool {
            self.blocks.push(deadline_ns);
            while quaver_rt::monotonic_ns() < deadline_ns.min(self.done_at) {
                std::thread::yield_now();
            }
            self.is_complete()
        }
    }

    #[test]
    fn off_blocks_at_once() {
        let now = quaver_rt::monotonic_ns();
        let mut c = At {
            done_at: now + 100_000,
            blocks: Vec::new(),
        };
        assert!(CompletionSpin::new(0).wait(&mut c, now, now + 10_000_000));
        assert_eq!(c.blocks, vec![now + 10_000_000]);
    }

    #[test]
    fn sleeps_until_near_the_expected_answer_then_polls() {
        // 100 ms: far more than a loaded machine delays this thread between its steps.
        let mut s = CompletionSpin::new(100);
        s.learn(0, 100_000_000);
        let now = quaver_rt::monotonic_ns();
        let mut c = At {
            done_at: now + 100_000_000,
            blocks: Vec::new(),
        };
        assert!(s.wait(&mut c, now, now + 500_000_000));
        // One sleep to 50 µs before the expected answer; the answer found by polling
        // (or by a last block if this machine preempted the test).
        assert_eq!(c.blocks[0], now + 100_000_000 - 50_000);
    }

    #[test]
    fn never_waits_past_the_deadline_and_reports_no_answer() {
        let mut s = CompletionSpin::new(100);
        s.learn(0, 1_000_000);
        let now = quaver_rt::monotonic_ns();
        let mut c = At {
            done_at: u64::MAX,
            blocks: Vec::new(),
        };
        assert!(!s.wait(&mut c, now, now + 3_000_000));
        assert!(c.blocks.iter().all(|&b| b <= now + 3_000_000));
        assert!(quaver_rt::monotonic_ns() >= now + 3_000_000);
    }

    #[test]
    fn the_expectation_moves_slowly() {
        let mut s = CompletionSpin::new(50);
        s.learn(100, 1_100);
        assert_eq!(s.expect_ns, 1_000);
        s.learn(0, 9_000);
        assert_eq!(s.expect_ns, 1_000 - 125 + 1_125);
    }
}
