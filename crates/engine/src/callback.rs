//! Callback clients: graph nodes whose processing runs in another process, JACK-style.
//!
//! Every cycle a [`CallbackNode`] hands its inputs to the client, wakes it, and (in
//! synchronous mode) waits for the client's outputs — but never past a deadline: a
//! configured fraction of the quantum period measured from the cycle start (by default
//! the whole period, the budget JACK and PipeWire give a client), and never past three
//! quarters of the driver device's safety margin, after which the device would run dry
//! before the server has mixed and written the cycle. The
//! transport (shared memory, eventfds) belongs to the protocol front-end and is reached
//! through [`CallbackTransport`]; this module holds the policy:
//!
//! - **Split phase.** The node is a split-phase [`Processor`]: `begin` starts the client
//!   and returns at once, `finish` collects the result when a later node needs it, so
//!   independent clients run in parallel and one client's wait overlaps the others'
//!   work.
//! - **Misses.** A client that has not answered by the deadline is skipped: silence on
//!   its outputs, an xrun counted against it (and published to it). A client still busy
//!   with an earlier cycle when the next one begins is not woken and not waited for
//!   (another miss), so a hung client costs one deadline, once.
//! - **Asynchronous mode.** After `async_after` consecutive misses the node stops
//!   waiting: at each cycle start it takes the outputs the client produced for the
//!   previous cycle (one extra quantum of latency) and wakes it for the next. The mode
//!   is published to the client. It is sticky for the life of the node.
//! - **Upstream lateness is not the client's fault.** If the deadline has already
//!   passed when the node's turn comes (an upstream client used the budget), the node
//!   is not woken, outputs silence and counts a *skip*, not an xrun.
//! - **Inactive clients** (not yet activated, or deactivated) are neither woken nor
//!   counted; their outputs are silent.

use crate::node::{CycleInfo, Processor};
use crate::rt::{HIST_BUCKETS, hist_bucket};
use crate::timing::RemoteTimes;
use quaver_dsp::{Planar, PlanarMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// How the server runs a callback client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CallbackMode {
    /// The server waits (up to the deadline) for the client within the cycle.
    Sync = 0,
    /// The server never waits; the client's outputs come one quantum later.
    Async = 1,
}

impl CallbackMode {
    /// `"sync"` or `"async"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallbackMode::Sync => "sync",
            CallbackMode::Async => "async",
        }
    }

    /// From the numeric value published in shared memory.
    pub fn from_u32(v: u32) -> Option<CallbackMode> {
        match v {
            0 => Some(CallbackMode::Sync),
            1 => Some(CallbackMode::Async),
            _ => None,
        }
    }
}

/// What the server tells the client about the cycle it is woken for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallbackCycle {
    /// Engine cycle counter.
    pub cycle: u64,
    /// Graph frame clock at the cycle start.
    pub position: u64,
    /// CLOCK_MONOTONIC ns at the cycle start.
    pub time_ns: u64,
    /// Nominal cycle duration, ns.
    pub period_ns: u64,
    /// CLOCK_MONOTONIC ns by which the outputs are needed (sync mode).
    pub deadline_ns: u64,
    /// Frames in this cycle (the current quantum).
    pub frames: u32,
}

/// The front-end's side of a callback client: port buffers it shares with the client
/// and the two wakeup signals. Every method is *RT*: no allocation, no locks, no
/// logging; only `wait_completed` may block, and only until its deadline.
pub trait CallbackTransport: Send {
    /// True while the client wants to be woken (it activated its process callback).
    fn active(&self) -> bool;
    /// True when the client completed the last cycle it was woken for (or was never
    /// woken).
    fn completed(&self) -> bool;
    /// Copies `inputs` to the client, publishes `cycle` and wakes the client. Called
    /// only when `completed()`; must not block.
    fn start(&mut self, cycle: &CallbackCycle, inputs: Planar<'_>);
    /// Waits until the client completes the cycle last started, or until CLOCK_MONOTONIC
    /// reaches `deadline_ns`; returns whether it completed.
    fn wait_completed(&mut self, deadline_ns: u64) -> bool;
    /// Copies the outputs of the client's last completed cycle into `outputs`
    /// (sanitised: the client is not trusted).
    fn read_outputs(&mut self, outputs: &mut PlanarMut<'_>);
    /// Publishes the miss counter and the mode to the client.
    fn report(&mut self, xruns: u64, mode: CallbackMode);
    /// When the client's process thread woke for the cycle it completed last and when
    /// it finished it (CLOCK_MONOTONIC ns), if it stamped them; untrusted values, used
    /// for statistics only.
    fn client_times(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Settings of a callback node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallbackConfig {
    /// Fraction of the quantum period, from the cycle start, within which a
    /// synchronous client must answer (0 < x ≤ 1); capped by the device's margin.
    pub deadline: f64,
    /// Consecutive misses after which the client moves to asynchronous mode (0: never).
    pub async_after: u32,
}

impl Default for CallbackConfig {
    fn default() -> Self {
        CallbackConfig {
            // The whole period: under stress-ng on a 2-vCPU VM the callbacks that missed
            // a 0.8 deadline at 64 frames had woken within 35 µs and finished between
            // 0.87 and 1.03 periods (CPU slowdown episodes); answers a whole period
            // allows are still in time for the device, whose margin (≥ 4 ms by default)
            // covers the server's own mixing afterwards.
            deadline: 1.0,
            async_after: 8,
        }
    }
}

/// Counters a callback node publishes for status output; written only by the
/// real-time thread.
#[derive(Debug, Default)]
pub struct CallbackStats {
    /// Cycles in which the client was woken.
    pub woken: AtomicU64,
    /// Cycles the client missed (late, busy or hung), counted against it.
    pub xruns: AtomicU64,
    /// Cycles the client was not woken because the deadline had already passed.
    pub skipped: AtomicU64,
    /// [`CallbackMode`] as a number.
    pub mode: AtomicU32,
    /// Consecutive misses right now.
    pub consecutive_misses: AtomicU32,
    /// Time the real-time thread spent waiting for the client, last cycle, ns.
    pub wait_ns_last: AtomicU64,
    /// Longest such wait, ns.
    pub wait_ns_max: AtomicU64,
    /// Sum of all waits, ns (divide by `woken` for the mean).
    pub wait_ns_total: AtomicU64,
    /// Wait times, log2 buckets of ns.
    pub wait_hist: [AtomicU64; HIST_BUCKETS],
}

impl CallbackStats {
    /// The current mode.
    pub fn mode(&self) -> CallbackMode {
        CallbackMode::from_u32(self.mode.load(Relaxed)).unwrap_or(CallbackMode::Sync)
    }
}

/// What `begin` decided for this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not activated: silence, nothing counted.
    Inactive,
    /// Deadline gone before our turn: silence, a skip.
    Skipped,
    /// Still busy with an earlier cycle: silence, a miss.
    Busy,
    /// Woken synchronously; `finish` waits until this deadline.
    Started(u64),
    /// Asynchronous: outputs already filled in `begin`.
    AsyncDone,
}

/// How long after the cycle start a synchronous client may answer: `deadline` of the
/// period, but at most three quarters of the device's margin when it has one (past the
/// margin the device runs dry whatever the client does; the last quarter is left for
/// waking the server and its mixing and write).
fn budget_ns(deadline: f64, cx: &CycleInfo) -> u64 {
    let budget = (cx.period_ns() as f64 * deadline) as u64;
    if cx.margin_frames > 0 {
        budget.min(cx.margin_ns() / 4 * 3)
    } else {
        budget
    }
}

fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A graph node driven by a callback client. Build it on a control thread and hand it
/// to [`crate::Engine::add_node`] in a spec with `keep_awake` set.
pub struct CallbackNode<T: CallbackTransport> {
    transport: T,
    config: CallbackConfig,
    stats: Arc<CallbackStats>,
    mode: CallbackMode,
    misses: u32,
    xruns: u64,
    phase: Phase,
    /// When the client was last signalled (0: not since it was last collected).
    signal_ns: u64,
    /// Times of the work collected this cycle, for per-node timing.
    remote: Option<RemoteTimes>,
}

impl<T: CallbackTransport> CallbackNode<T> {
    /// A node over `transport`; the returned stats are for the control side.
    pub fn new(transport: T, config: CallbackConfig) -> (Self, Arc<CallbackStats>) {
        let stats = Arc::new(CallbackStats::default());
        let node = CallbackNode {
            transport,
            config: CallbackConfig {
                deadline: if config.deadline.is_finite() {
                    config.deadline.clamp(0.05, 1.0)
                } else {
                    CallbackConfig::default().deadline
                },
                ..config
            },
            stats: stats.clone(),
            mode: CallbackMode::Sync,
            misses: 0,
            xruns: 0,
            phase: Phase::Inactive,
            signal_ns: 0,
            remote: None,
        };
        (node, stats)
    }

    fn miss(&mut self) {
        self.xruns += 1;
        self.misses = self.misses.saturating_add(1);
        self.stats.xruns.store(self.xruns, Relaxed);
        if self.mode == CallbackMode::Sync
            && self.config.async_after > 0
            && self.misses >= self.config.async_after
        {
            self.mode = CallbackMode::Async;
            self.stats.mode.store(CallbackMode::Async as u32, Relaxed);
        }
    }

    /// The times of the cycle the client just completed (signalled at `signal_ns`).
    fn collected_times(&self) -> Option<RemoteTimes> {
        if self.signal_ns == 0 {
            return None;
        }
        let (awake_ns, finish_ns) = self.transport.client_times().unwrap_or((0, 0));
        Some(RemoteTimes {
            signal_ns: self.signal_ns,
            awake_ns,
            finish_ns,
        })
    }

    fn record_wait(&self, ns: u64) {
        let s = &self.stats;
        s.wait_ns_last.store(ns, Relaxed);
        s.wait_ns_max.fetch_max(ns, Relaxed);
        s.wait_ns_total.fetch_add(ns, Relaxed);
        s.wait_hist[hist_bucket(ns)].fetch_add(1, Relaxed);
    }
}

impl<T: CallbackTransport> Processor for CallbackNode<T> {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        self.begin(cx, inputs, outputs);
        self.finish(cx, outputs);
    }

    fn is_split(&self) -> bool {
        true
    }

    fn xruns(&self) -> u64 {
        self.xruns
    }

    fn remote_times(&self) -> Option<RemoteTimes> {
        self.remote
    }

    fn begin(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        let period = cx.period_ns();
        let deadline = cx.time_ns + budget_ns(self.config.deadline, cx);
        let cycle = CallbackCycle {
            cycle: cx.cycle,
            position: cx.position,
            time_ns: cx.time_ns,
            period_ns: period,
            deadline_ns: deadline,
            frames: cx.frames as u32,
        };
        self.remote = None;
        if !self.transport.active() {
            self.phase = Phase::Inactive;
            self.signal_ns = 0;
            return;
        }
        if !self.transport.completed() {
            self.phase = Phase::Busy;
            return;
        }
        match self.mode {
            CallbackMode::Sync => {
                // Also the signal time (read before the wake, so a client that wakes at
                // once never appears to wake before it was signalled).
                let now = now_ns();
                if now >= deadline {
                    self.phase = Phase::Skipped;
                    return;
                }
                self.signal_ns = now;
                self.transport.start(&cycle, inputs);
                self.phase = Phase::Started(deadline);
            }
            CallbackMode::Async => {
                // What the client made of the previous cycle, then the next cycle.
                self.transport.read_outputs(outputs);
                self.remote = self.collected_times();
                self.signal_ns = now_ns();
                self.transport.start(&cycle, inputs);
                self.phase = Phase::AsyncDone;
            }
        }
        self.stats.woken.fetch_add(1, Relaxed);
    }

    fn finish(&mut self, _cx: &CycleInfo, outputs: &mut PlanarMut<'_>) {
        match self.phase {
            Phase::Inactive => outputs.fill_silence(),
            Phase::Skipped => {
                outputs.fill_silence();
                self.stats.skipped.fetch_add(1, Relaxed);
            }
            Phase::Busy => {
                outputs.fill_silence();
                self.miss();
            }
            Phase::Started(deadline) => {
                let t0 = now_ns();
                let done = self.transport.wait_completed(deadline);
                self.record_wait(now_ns().saturating_sub(t0));
                if done {
                    self.transport.read_outputs(outputs);
                    self.remote = self.collected_times();
                    self.misses = 0;
                } else if !self.transport.active() {
                    // Deactivated while we waited: not the client's miss.
                    outputs.fill_silence();
                } else {
                    outputs.fill_silence();
                    self.miss();
                }
            }
            Phase::AsyncDone => self.misses = 0,
        }
        self.stats.consecutive_misses.store(self.misses, Relaxed);
        self.transport.report(self.xruns, self.mode);
        self.phase = Phase::Inactive;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx(frames: usize, margin_frames: usize) -> CycleInfo {
        CycleInfo {
            frames,
            rate: 48_000,
            margin_frames,
            ..CycleInfo::default()
        }
    }

    #[test]
    fn the_budget_is_the_period_share_unless_the_margin_is_shorter() {
        // 64 frames = 1 333 333 ns; a 4 ms margin (192 frames) leaves the whole period.
        assert_eq!(budget_ns(1.0, &cx(64, 192)), 1_333_333);
        assert_eq!(budget_ns(0.5, &cx(64, 192)), 666_666);
        // No margin (null sink): the period share alone.
        assert_eq!(budget_ns(1.0, &cx(256, 0)), 5_333_333);
        // 256 frames (5.33 ms) against a 4 ms margin: three quarters of the margin.
        assert_eq!(budget_ns(1.0, &cx(256, 192)), 3_000_000);
    }
}
