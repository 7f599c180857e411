//! Per-node timing: what every node cost per cycle, in the terms of PipeWire's `pw-top`.
//!
//! The real-time thread reads CLOCK_MONOTONIC once per node boundary (the end of one
//! node's work is the start of the next's) and stores, per node slot, into a table of
//! atomics preallocated for every slot ([`NodeTimes`]); the control side turns it into
//! per-interval averages and maxima ([`crate::Engine::node_timing`]).
//!
//! The figures, per node and cycle:
//!
//! - **busy**: for a node the RT thread runs itself (devices, streams, filters), the
//!   time its step took: mixing its inputs, `process` (or the device write/read) and
//!   its volume. For a callback client, pw-top's BUSY: from the moment its process
//!   thread woke to the moment it signalled completion (`finish − awake`, both as the
//!   client library stamped them in the shared block).
//! - **wait**: 0 for nodes the RT thread runs itself (nothing stands between their turn
//!   and their work). For a callback client, pw-top's WAIT: from the moment the server
//!   signalled the client's eventfd to the moment its process thread woke
//!   (`awake − signal`): the client's scheduling delay.
//! - **rt**: the time the RT thread itself spent on the node: its whole step for an
//!   in-process node (= busy); for a callback client `begin` (inputs copied, client
//!   woken) plus `finish` (blocking on its completion, outputs read).
//!
//! A client that publishes no times (an older client library) or publishes ones that do
//! not fit the server's own clock readings (`signal ≤ awake ≤ finish ≤ completion
//! seen`: the client is not trusted) gets wait 0 and busy = completion seen − signal,
//! an upper bound of wait + busy. Cycles a client missed, skipped or was inactive for
//! give no sample; misses are counted as the node's xruns.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Times a split-phase node reports for the remote work it collected: when the server
/// signalled it and, if the remote side stamped them, when it woke and finished
/// (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteTimes {
    /// The server signalled the client.
    pub signal_ns: u64,
    /// The client's process thread woke (0: not reported).
    pub awake_ns: u64,
    /// The client signalled completion (0: not reported).
    pub finish_ns: u64,
}

impl RemoteTimes {
    /// (wait, busy) in ns, given that the server saw the completion at `seen_ns`; the
    /// client's stamps are used only when they fall between the server's readings.
    pub fn wait_busy(&self, seen_ns: u64) -> (u64, u64) {
        let r = self;
        if r.awake_ns != 0
            && r.signal_ns <= r.awake_ns
            && r.awake_ns <= r.finish_ns
            && r.finish_ns <= seen_ns
        {
            (r.awake_ns - r.signal_ns, r.finish_ns - r.awake_ns)
        } else {
            (0, seen_ns.saturating_sub(r.signal_ns))
        }
    }
}

/// One node slot's counters. Written by the real-time thread only (besides the control
/// side resetting the maxima when it reads them).
#[derive(Debug, Default)]
pub struct NodeTimes {
    /// Cycles sampled since the node was added.
    pub samples: AtomicU64,
    /// Last wait, ns.
    pub wait_last: AtomicU64,
    /// Sum of waits, ns.
    pub wait_total: AtomicU64,
    /// Longest wait since the control side last read it, ns.
    pub wait_max: AtomicU64,
    /// Last busy time, ns.
    pub busy_last: AtomicU64,
    /// Sum of busy times, ns.
    pub busy_total: AtomicU64,
    /// Longest busy time since the control side last read it, ns.
    pub busy_max: AtomicU64,
    /// Sum of the RT thread's own time on the node, ns.
    pub rt_total: AtomicU64,
    /// Longest such time since the control side last read it, ns.
    pub rt_max: AtomicU64,
    /// Misses, underruns or overruns the node's processor counted.
    pub xruns: AtomicU64,
}

impl NodeTimes {
    /// Records one cycle. *RT*.
    pub(crate) fn record(&self, wait: u64, busy: u64, rt: u64) {
        self.wait_last.store(wait, Relaxed);
        self.wait_total.fetch_add(wait, Relaxed);
        self.wait_max.fetch_max(wait, Relaxed);
        self.busy_last.store(busy, Relaxed);
        self.busy_total.fetch_add(busy, Relaxed);
        self.busy_max.fetch_max(busy, Relaxed);
        self.rt_total.fetch_add(rt, Relaxed);
        self.rt_max.fetch_max(rt, Relaxed);
        // Last, so a reader that sees the count also sees the sums (roughly: Relaxed,
        // statistics only).
        self.samples.fetch_add(1, Relaxed);
    }

    /// Zeroes everything for a node that takes over the slot. *RT*.
    pub(crate) fn reset(&self) {
        for a in [
            &self.samples,
            &self.wait_last,
            &self.wait_total,
            &self.wait_max,
            &self.busy_last,
            &self.busy_total,
            &self.busy_max,
            &self.rt_total,
            &self.rt_max,
            &self.xruns,
        ] {
            a.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RemoteTimes;

    #[test]
    fn client_times_are_used_only_within_the_servers_readings() {
        let r = RemoteTimes {
            signal_ns: 1000,
            awake_ns: 1300,
            finish_ns: 1800,
        };
        assert_eq!(r.wait_busy(2000), (300, 500));
        // Finished "after" the server saw it: not trusted.
        assert_eq!(r.wait_busy(1700), (0, 700));
        let none = RemoteTimes {
            signal_ns: 1000,
            ..RemoteTimes::default()
        };
        assert_eq!(none.wait_busy(1600), (0, 600));
        let early = RemoteTimes {
            signal_ns: 1000,
            awake_ns: 900,
            finish_ns: 1200,
        };
        assert_eq!(early.wait_busy(1500), (0, 500));
    }
}
