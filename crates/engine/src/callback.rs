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
//!   its outputs, a missed cycle counted against it (and published to it). A client
//!   still busy with an earlier cycle when the next one begins is not woken and not
//!   waited for (another missed cycle), so a hung client costs one deadline, once.
//! - **Xrun events.** A run of consecutive missed cycles is one *xrun event*, as JACK
//!   counts them (jackd2 signals an xrun "only for the first failing cycle" of a graph
//!   that has not finished): one stall of the client's CPU is one glitch to a listener
//!   however many quanta it spans. Both counts are published.
//! - **Not late yet.** A client still busy with a cycle whose deadline has not passed
//!   (the server runs cycles back to back to catch up after its own thread was late) is
//!   waited for until that deadline instead of being counted as a miss: the lateness is
//!   the server's.
//! - **Asynchronous mode.** After `async_after` consecutive *woken* cycles answered
//!   late (a client too slow for the quantum), or after the client has left every
//!   cycle unanswered for `hung_ms` (a hung client), the node stops waiting: at each
//!   cycle start it takes the outputs the client produced for the previous cycle (one
//!   extra quantum of latency) and wakes it for the next. Cycles the client was busy
//!   for do not count towards `async_after`, so one stall of a few milliseconds (one
//!   late answer, then busy cycles) does not cost the client a quantum of latency for
//!   the rest of its life. The mode and its cause are published to the client.
//! - **Back to synchronous.** An asynchronous client whose answers have all come
//!   within the synchronous budget (by its own stamps) for `recover_ms` goes back to
//!   synchronous mode: the answer it made to the cycle before is dropped, and its
//!   latency is one quantum shorter again. A burst of load does not cost it that
//!   quantum for the rest of its life.
//! - **Upstream lateness is not the client's fault.** If the deadline has already
//!   passed when the node's turn comes (an upstream client used the budget), the node
//!   is not woken, outputs silence and counts a *skip*, not an xrun.
//! - **Inactive clients** (not yet activated, or deactivated) are neither woken nor
//!   counted; their outputs are silent.

use crate::rt::midi::{MidiPorts, PortSet};
use crate::rt::node::{CycleInfo, Processor};
use crate::rt::spin::{Completion, CompletionSpin};
use crate::rt::stats::{HIST_BUCKETS, hist_bucket};
use crate::rt::timing::RemoteTimes;
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
    /// The graph freewheels: no device waits, the deadline is [`FREEWHEEL_BUDGET_NS`]
    /// away.
    pub freewheel: bool,
}

/// How long a freewheeling cycle waits for a synchronous client: no device runs dry,
/// so as long as a slow offline render needs, but a hung client still costs only this
/// (and goes asynchronous after `hung_ms`, as always).
pub const FREEWHEEL_BUDGET_NS: u64 = 2_000_000_000;

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
    /// Called at the start of every cycle, woken or not (inactive clients too), before
    /// anything else: publishes what every client sees each cycle (the transport).
    fn begin_cycle(&mut self) {}
    /// [`CallbackTransport::start`] for a node with MIDI ports: the inputs in `midi`
    /// hold event lists ([`crate::rt::midi`]) in their whole buffers, to be handed over
    /// as such. Transports that carry no MIDI treat every buffer as audio.
    fn start_midi(&mut self, cycle: &CallbackCycle, inputs: Planar<'_>, midi: &PortSet) {
        let _ = midi;
        self.start(cycle, inputs);
    }
    /// [`CallbackTransport::read_outputs`] for a node with MIDI ports: the outputs in
    /// `midi` get the client's event lists, checked (the client is not trusted).
    fn read_outputs_midi(&mut self, outputs: &mut PlanarMut<'_>, midi: &PortSet) {
        let _ = midi;
        self.read_outputs(outputs);
    }
}

/// Settings of a callback node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallbackConfig {
    /// Fraction of the quantum period, from the cycle start, within which a
    /// synchronous client must answer (0 < x ≤ 1); capped by the device's margin.
    pub deadline: f64,
    /// Consecutive woken cycles answered late after which the client moves to
    /// asynchronous mode (0: never); cycles it was still busy for do not count.
    pub async_after: u32,
    /// Milliseconds of unanswered cycles after which a client is taken as hung and moved
    /// to asynchronous mode (0: never).
    pub hung_ms: u32,
    /// Milliseconds of asynchronous answers all within the synchronous budget after which
    /// the client goes back to synchronous mode (0: never).
    pub recover_ms: u32,
    /// Microseconds the RT thread may poll a synchronous client's completion around its
    /// expected answer before blocking ([`crate::rt::spin`]; 0: block at once).
    pub spin_us: u32,
    /// Runs the client asynchronously from its first cycle and for good, as jackd2 runs
    /// every client unless started with `-S`: the RT thread never waits for it (one
    /// wakeup per cycle instead of two), at the price of one quantum of latency.
    pub asynchronous: bool,
}

impl Default for CallbackConfig {
    fn default() -> Self {
        CallbackConfig {
            // The whole period: clients that miss a shorter deadline under load were
            // woken in time and slowed down by the CPU; an answer within the period is
            // still in time for the device, whose margin (≥ 4 ms by default) covers the
            // server's own mixing afterwards.
            deadline: 1.0,
            async_after: 8,
            // Far above the longest stall a loaded machine gives a woken client, well
            // below what a user takes for "hung"; jackd2 gives a client 500 ms (its
            // default --timeout) before it gives up on it.
            hung_ms: 250,
            // Long against the bursts that sent it async (CPU slowdowns of tens of ms,
            // seconds of compile or GC load come and go several times a second), short
            // against a session: a client is not stuck with the extra quantum for good
            // after a few bad seconds.
            recover_ms: 5_000,
            // Off until measured to help (docs/engine/stages.md).
            spin_us: 0,
            // A quantum less latency than jackd2's default; docs/bench/jack.md has what
            // the second wakeup costs.
            asynchronous: false,
        }
    }
}

/// Why a callback node runs asynchronously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AsyncCause {
    /// Still synchronous.
    None = 0,
    /// `async_after` woken cycles in a row answered late.
    Late = 1,
    /// Every cycle unanswered for `hung_ms`.
    Hung = 2,
    /// The server's configuration (`asynchronous`): from the first cycle, for good.
    Configured = 3,
}

impl AsyncCause {
    /// `""`, `"late"` or `"hung"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            AsyncCause::None => "",
            AsyncCause::Late => "late",
            AsyncCause::Hung => "hung",
            AsyncCause::Configured => "configured",
        }
    }

    /// From the numeric value in [`CallbackStats::async_cause`].
    pub fn from_u32(v: u32) -> AsyncCause {
        match v {
            1 => AsyncCause::Late,
            2 => AsyncCause::Hung,
            3 => AsyncCause::Configured,
            _ => AsyncCause::None,
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
    /// Runs of consecutive missed cycles: xrun events as JACK counts them.
    pub xrun_events: AtomicU64,
    /// Cycles a busy client was waited for because its deadline had not passed yet
    /// (the server catching up), not counted against it.
    pub caught_up: AtomicU64,
    /// [`AsyncCause`] as a number.
    pub async_cause: AtomicU32,
    /// Times the node went back from asynchronous to synchronous mode.
    pub resynced: AtomicU64,
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

    /// Why the node went asynchronous, if it did.
    pub fn async_cause(&self) -> AsyncCause {
        AsyncCause::from_u32(self.async_cause.load(Relaxed))
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
    if cx.freewheel {
        return FREEWHEEL_BUDGET_NS;
    }
    let budget = (cx.period_ns() as f64 * deadline) as u64;
    if cx.margin_frames > 0 {
        budget.min(cx.margin_ns() / 4 * 3)
    } else {
        budget
    }
}

/// Silence on every output: zeros, and empty event lists on the MIDI ones.
fn silence(outputs: &mut PlanarMut<'_>, midi: &PortSet) {
    outputs.fill_silence();
    if !midi.is_empty() {
        for ch in 0..outputs.channels() {
            if midi.contains(ch) {
                crate::rt::midi::clear(crate::rt::midi::words_mut(outputs.whole_channel_mut(ch)));
            }
        }
    }
}

/// A graph node driven by a callback client. Build it on a control thread and hand it
/// to [`crate::Engine::add_node`] in a spec with `keep_awake` set.
pub struct CallbackNode<T: CallbackTransport> {
    transport: T,
    config: CallbackConfig,
    stats: Arc<CallbackStats>,
    mode: CallbackMode,
    /// Consecutive missed cycles.
    misses: u32,
    /// Consecutive woken cycles answered late (busy cycles leave it alone).
    late_answers: u32,
    /// When the current run of missed cycles began (its cycle's start).
    missing_since_ns: u64,
    /// The deadline of the cycle the client was last woken for.
    pending_deadline_ns: u64,
    /// Asynchronous: since when every answer came within the synchronous budget (0: not).
    in_time_since_ns: u64,
    xruns: u64,
    xrun_events: u64,
    phase: Phase,
    /// When the client was last signalled (0: not since it was last collected).
    signal_ns: u64,
    /// Times of the work collected this cycle, for per-node timing.
    remote: Option<RemoteTimes>,
    /// Which port buffers carry MIDI ([`Processor::midi_ports`]).
    midi: Box<MidiPorts>,
    /// The completion wait's optional spin.
    spin: CompletionSpin,
}

/// The spin's view of a transport.
struct Waiting<'a, T: CallbackTransport>(&'a mut T);

impl<T: CallbackTransport> Completion for Waiting<'_, T> {
    fn is_complete(&self) -> bool {
        self.0.completed()
    }
    fn block_until(&mut self, deadline_ns: u64) -> bool {
        self.0.wait_completed(deadline_ns)
    }
}

impl<T: CallbackTransport> CallbackNode<T> {
    /// A node over `transport`; the returned stats are for the control side.
    pub fn new(transport: T, config: CallbackConfig) -> (Self, Arc<CallbackStats>) {
        let stats = Arc::new(CallbackStats::default());
        let mut node = CallbackNode {
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
            late_answers: 0,
            missing_since_ns: 0,
            pending_deadline_ns: 0,
            in_time_since_ns: 0,
            xruns: 0,
            xrun_events: 0,
            phase: Phase::Inactive,
            signal_ns: 0,
            remote: None,
            midi: Box::new(MidiPorts::NONE),
            spin: CompletionSpin::new(config.spin_us),
        };
        if config.asynchronous {
            node.set_mode(CallbackMode::Async, AsyncCause::Configured);
        }
        (node, stats)
    }

    /// Counts a missed cycle that began at `cycle_ns`; `answered_late` when the client
    /// was woken for it (not merely still busy with an earlier one).
    fn miss(&mut self, cycle_ns: u64, answered_late: bool) {
        self.xruns += 1;
        if self.misses == 0 {
            self.xrun_events += 1;
            self.missing_since_ns = cycle_ns;
            self.stats.xrun_events.store(self.xrun_events, Relaxed);
        }
        self.misses = self.misses.saturating_add(1);
        if answered_late {
            self.late_answers = self.late_answers.saturating_add(1);
        }
        self.stats.xruns.store(self.xruns, Relaxed);
        self.in_time_since_ns = 0;
        if self.mode != CallbackMode::Sync {
            return;
        }
        let c = &self.config;
        let cause = if c.async_after > 0 && self.late_answers >= c.async_after {
            AsyncCause::Late
        } else if c.hung_ms > 0
            && cycle_ns.saturating_sub(self.missing_since_ns) >= c.hung_ms as u64 * 1_000_000
        {
            AsyncCause::Hung
        } else {
            return;
        };
        self.set_mode(CallbackMode::Async, cause);
    }

    /// Switches mode and publishes it with its cause (None for synchronous).
    fn set_mode(&mut self, mode: CallbackMode, cause: AsyncCause) {
        self.mode = mode;
        self.stats.async_cause.store(cause as u32, Relaxed);
        self.stats.mode.store(mode as u32, Relaxed);
    }

    /// The client answered a cycle in time: the run of misses is over.
    fn answered(&mut self) {
        self.misses = 0;
        self.late_answers = 0;
    }

    /// Asynchronous, the client has just completed the cycle it was last woken for:
    /// whether it has now answered within the synchronous budget for `recover_ms` on
    /// end (by its own stamps: a client that stamps nothing stays asynchronous).
    fn recovered(&mut self, cx: &CycleInfo) -> bool {
        let budget = budget_ns(self.config.deadline, cx);
        let in_time = self
            .collected_times()
            .is_some_and(|r| r.finish_ns >= r.signal_ns && r.finish_ns - r.signal_ns <= budget);
        if !in_time || self.config.recover_ms == 0 {
            self.in_time_since_ns = 0;
            return false;
        }
        if self.in_time_since_ns == 0 {
            self.in_time_since_ns = cx.time_ns.max(1);
            return false;
        }
        let recovered = cx.time_ns.saturating_sub(self.in_time_since_ns)
            >= self.config.recover_ms as u64 * 1_000_000;
        if recovered {
            self.in_time_since_ns = 0;
        }
        recovered
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

    fn midi_ports(&mut self, ports: &MidiPorts) {
        *self.midi = *ports;
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
            freewheel: cx.freewheel,
        };
        self.remote = None;
        self.transport.begin_cycle();
        if !self.transport.active() {
            self.phase = Phase::Inactive;
            self.signal_ns = 0;
            return;
        }
        if !self.transport.completed() {
            // Busy with a cycle it still has time for: this cycle came early (the server
            // catching up after its own late wakeup), so wait as the earlier cycle would
            // have.
            let pending = self.pending_deadline_ns;
            if quaver_rt::monotonic_ns() >= pending || !self.transport.wait_completed(pending) {
                self.phase = Phase::Busy;
                return;
            }
            self.stats.caught_up.fetch_add(1, Relaxed);
        }
        if self.mode == CallbackMode::Async && !self.config.asynchronous && self.recovered(cx) {
            // Its answer to the previous cycle is dropped: from this cycle on its outputs
            // are this cycle's again, one quantum earlier.
            self.set_mode(CallbackMode::Sync, AsyncCause::None);
            self.answered();
            self.stats.resynced.fetch_add(1, Relaxed);
        }
        match self.mode {
            CallbackMode::Sync => {
                // Also the signal time (read before the wake, so a client that wakes at
                // once never appears to wake before it was signalled).
                let now = quaver_rt::monotonic_ns();
                if now >= deadline {
                    self.phase = Phase::Skipped;
                    return;
                }
                self.signal_ns = now;
                self.pending_deadline_ns = deadline;
                self.transport.start_midi(&cycle, inputs, &self.midi.inputs);
                self.phase = Phase::Started(deadline);
            }
            CallbackMode::Async => {
                // What the client made of the previous cycle, then the next cycle.
                self.transport
                    .read_outputs_midi(outputs, &self.midi.outputs);
                self.remote = self.collected_times();
                self.signal_ns = quaver_rt::monotonic_ns();
                // It has the whole period, until the next cycle would take its outputs.
                self.pending_deadline_ns = cx.time_ns + period;
                self.transport.start_midi(&cycle, inputs, &self.midi.inputs);
                self.phase = Phase::AsyncDone;
            }
        }
        self.stats.woken.fetch_add(1, Relaxed);
    }

    fn finish(&mut self, cx: &CycleInfo, outputs: &mut PlanarMut<'_>) {
        match self.phase {
            Phase::Inactive => silence(outputs, &self.midi.outputs),
            Phase::Skipped => {
                silence(outputs, &self.midi.outputs);
                self.stats.skipped.fetch_add(1, Relaxed);
            }
            Phase::Busy => {
                silence(outputs, &self.midi.outputs);
                self.miss(cx.time_ns, false);
            }
            Phase::Started(deadline) => {
                let t0 = quaver_rt::monotonic_ns();
                let done =
                    self.spin
                        .wait(&mut Waiting(&mut self.transport), self.signal_ns, deadline);
                let seen = quaver_rt::monotonic_ns();
                self.record_wait(seen.saturating_sub(t0));
                if done {
                    self.transport
                        .read_outputs_midi(outputs, &self.midi.outputs);
                    self.remote = self.collected_times();
                    // When the client answered, by its own stamp where it fits the
                    // server's readings: `seen` would also count the wakeup the spin
                    // is there to avoid, and it would then always start too late.
                    let answered = self
                        .remote
                        .map(|r| r.finish_ns)
                        .filter(|&f| f >= self.signal_ns && f <= seen)
                        .unwrap_or(seen);
                    self.spin.learn(self.signal_ns, answered);
                    self.answered();
                } else if !self.transport.active() {
                    // Deactivated while we waited: not the client's miss.
                    silence(outputs, &self.midi.outputs);
                } else {
                    silence(outputs, &self.midi.outputs);
                    self.miss(cx.time_ns, true);
                }
            }
            Phase::AsyncDone => self.answered(),
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

    /// A client whose answers the test decides: `done` says whether the cycle last
    /// started is complete, `answer_on_wait` whether waiting for it ends in an answer.
    #[derive(Default)]
    struct Scripted {
        done: bool,
        answer_on_wait: bool,
        started: u32,
        waits: Vec<u64>,
        /// What the client stamped (awake, finish) for the cycle it completed.
        times: Option<(u64, u64)>,
    }

    impl CallbackTransport for Scripted {
        fn active(&self) -> bool {
            true
        }
        fn completed(&self) -> bool {
            self.done
        }
        fn start(&mut self, _cycle: &CallbackCycle, _inputs: Planar<'_>) {
            self.started += 1;
            self.done = false;
        }
        fn wait_completed(&mut self, deadline_ns: u64) -> bool {
            self.waits.push(deadline_ns);
            self.done |= self.answer_on_wait;
            self.done
        }
        fn read_outputs(&mut self, outputs: &mut PlanarMut<'_>) {
            outputs.fill_silence();
        }
        fn report(&mut self, _xruns: u64, _mode: CallbackMode) {}
        fn client_times(&self) -> Option<(u64, u64)> {
            self.times
        }
    }

    const PERIOD: u64 = 1_333_333;

    /// Runs one 64-frame cycle starting `at` ns.
    fn cycle(node: &mut CallbackNode<Scripted>, n: u64, at: u64) {
        let cx = CycleInfo {
            frames: 64,
            rate: 48_000,
            cycle: n,
            time_ns: at,
            ..CycleInfo::default()
        };
        let mut out = [0.0f32; 64];
        node.process(
            &cx,
            Planar::new(&[], 0, 64, 64),
            &mut PlanarMut::new(&mut out, 1, 64, 64),
        );
    }

    fn node() -> (CallbackNode<Scripted>, Arc<CallbackStats>) {
        CallbackNode::new(
            Scripted {
                done: true,
                ..Scripted::default()
            },
            CallbackConfig::default(),
        )
    }

    #[test]
    fn a_stall_is_one_xrun_event_and_keeps_the_client_synchronous() {
        let (mut n, stats) = node();
        // Cycle 0 is answered late (the wait times out); the client then stays busy for
        // 20 more cycles (a 28 ms stall), and answers again from cycle 21 on.
        let t0 = quaver_rt::monotonic_ns();
        n.transport.answer_on_wait = false;
        cycle(&mut n, 0, t0);
        for k in 1..=20 {
            cycle(&mut n, k, t0 + k * PERIOD);
        }
        n.transport.done = true;
        n.transport.answer_on_wait = true;
        for k in 21..30 {
            cycle(&mut n, k, quaver_rt::monotonic_ns());
        }
        assert_eq!(stats.xruns.load(Relaxed), 21, "every missed cycle");
        assert_eq!(stats.xrun_events.load(Relaxed), 1, "one run of them");
        assert_eq!(
            stats.mode(),
            CallbackMode::Sync,
            "busy cycles are not late answers"
        );
        assert_eq!(stats.async_cause(), AsyncCause::None);
        assert_eq!(stats.consecutive_misses.load(Relaxed), 0);
        // A second stall later is a second event.
        n.transport.answer_on_wait = false;
        cycle(&mut n, 30, quaver_rt::monotonic_ns());
        n.transport.done = true;
        n.transport.answer_on_wait = true;
        cycle(&mut n, 31, quaver_rt::monotonic_ns());
        assert_eq!(stats.xrun_events.load(Relaxed), 2);
        assert_eq!(stats.xruns.load(Relaxed), 22);
    }

    #[test]
    fn a_client_answering_late_again_and_again_goes_async_for_being_late() {
        let (mut n, stats) = node();
        n.transport.answer_on_wait = false;
        // Every woken cycle times out, and the client finishes before the next one: a
        // client too slow for the quantum. Its 8th late answer moves it.
        for k in 0..7 {
            cycle(&mut n, k, quaver_rt::monotonic_ns());
            n.transport.done = true;
        }
        assert_eq!(stats.mode(), CallbackMode::Sync);
        assert_eq!(stats.xrun_events.load(Relaxed), 1, "one unbroken run");
        cycle(&mut n, 7, quaver_rt::monotonic_ns());
        assert_eq!(stats.mode(), CallbackMode::Async);
        assert_eq!(stats.async_cause(), AsyncCause::Late);
        assert_eq!(stats.xruns.load(Relaxed), 8);
    }

    #[test]
    fn a_client_silent_for_hung_ms_goes_async_as_hung() {
        let (mut n, stats) = node();
        n.transport.answer_on_wait = false;
        let t0 = quaver_rt::monotonic_ns();
        cycle(&mut n, 0, t0);
        // Busy from here on. 250 ms = 187.5 periods: still synchronous at 187.
        let mut k = 1;
        while k * PERIOD < 250_000_000 {
            cycle(&mut n, k, t0 + k * PERIOD);
            k += 1;
        }
        assert_eq!(stats.mode(), CallbackMode::Sync, "{k} cycles");
        assert_eq!(n.transport.started, 1, "a busy client is not woken again");
        cycle(&mut n, k, t0 + k * PERIOD);
        assert_eq!(stats.mode(), CallbackMode::Async);
        assert_eq!(stats.async_cause(), AsyncCause::Hung);
        assert_eq!(stats.xrun_events.load(Relaxed), 1);
    }

    #[test]
    fn a_busy_client_still_within_its_deadline_is_waited_for_not_blamed() {
        let (mut n, stats) = node();
        n.config.async_after = 1;
        // One late answer moves it to async mode (where the server never waits in
        // `finish`), then it answers again.
        n.transport.answer_on_wait = false;
        cycle(&mut n, 0, quaver_rt::monotonic_ns());
        assert_eq!(stats.mode(), CallbackMode::Async);
        n.transport.done = true;
        let t = quaver_rt::monotonic_ns();
        cycle(&mut n, 1, t);
        // The server runs the next cycle 20 µs later, catching up: the client is busy
        // with cycle 1, whose outputs are due a period after it began.
        n.transport.answer_on_wait = true;
        n.transport.waits.clear();
        cycle(&mut n, 2, t + 20_000);
        assert_eq!(
            n.transport.waits,
            vec![t + PERIOD],
            "waited until cycle 1's due"
        );
        assert_eq!(stats.caught_up.load(Relaxed), 1);
        assert_eq!(stats.xruns.load(Relaxed), 1, "only cycle 0's miss");
        // Past its deadline a busy client is late: no wait, a miss.
        n.transport.done = false;
        n.transport.waits.clear();
        n.pending_deadline_ns = quaver_rt::monotonic_ns() - 1;
        cycle(&mut n, 3, quaver_rt::monotonic_ns());
        assert!(n.transport.waits.is_empty());
        assert_eq!(stats.xruns.load(Relaxed), 2);
        assert_eq!(stats.xrun_events.load(Relaxed), 2);
    }

    #[test]
    fn an_async_client_in_time_for_recover_ms_goes_back_to_sync() {
        let (mut n, stats) = node();
        n.config.async_after = 1;
        n.transport.answer_on_wait = false;
        let t0 = quaver_rt::monotonic_ns();
        cycle(&mut n, 0, t0);
        assert_eq!(stats.mode(), CallbackMode::Async);
        // Answers every cycle within `took` of its signal; cycles a period apart.
        let run = |n: &mut CallbackNode<Scripted>, from: u64, to: u64, took: u64| {
            for k in from..to {
                n.transport.done = true;
                n.transport.times = Some((n.signal_ns + 1, n.signal_ns + took));
                cycle(n, k, t0 + k * PERIOD);
            }
        };
        // 3 s in time, then one answer slower than the period: the clock restarts.
        let three_s = 3_000_000_000 / PERIOD;
        run(&mut n, 1, three_s, 100_000);
        run(&mut n, three_s, three_s + 1, 2 * PERIOD);
        let five_s = 5_000_000_000 / PERIOD;
        run(&mut n, three_s + 1, three_s + five_s, 100_000);
        assert_eq!(stats.mode(), CallbackMode::Async, "not yet 5 s in time");
        n.transport.answer_on_wait = true;
        run(&mut n, three_s + five_s, three_s + five_s + 3, 100_000);
        assert_eq!(stats.mode(), CallbackMode::Sync);
        assert_eq!(stats.async_cause(), AsyncCause::None);
        assert_eq!(stats.resynced.load(Relaxed), 1);
        // A client that stamps nothing never comes back.
        let (mut quiet, qstats) = node();
        quiet.config.async_after = 1;
        quiet.transport.answer_on_wait = false;
        cycle(&mut quiet, 0, t0);
        for k in 1..2 * five_s {
            quiet.transport.done = true;
            cycle(&mut quiet, k, t0 + k * PERIOD);
        }
        assert_eq!(qstats.mode(), CallbackMode::Async);
    }

    #[test]
    fn a_configured_async_client_is_never_waited_for_and_stays_async() {
        let (mut n, stats) = CallbackNode::new(
            Scripted {
                done: true,
                ..Scripted::default()
            },
            CallbackConfig {
                asynchronous: true,
                ..CallbackConfig::default()
            },
        );
        assert_eq!(stats.mode(), CallbackMode::Async, "from the first cycle");
        assert_eq!(stats.async_cause(), AsyncCause::Configured);
        let t0 = quaver_rt::monotonic_ns();
        // Answers every cycle at once, far within the budget, for longer than
        // `recover_ms`: a configured client is not "recovered" into sync.
        let six_s = 6_000_000_000 / PERIOD;
        for k in 0..six_s {
            n.transport.done = true;
            n.transport.times = Some((n.signal_ns + 1, n.signal_ns + 10_000));
            cycle(&mut n, k, t0 + k * PERIOD);
        }
        assert!(n.transport.waits.is_empty(), "never blocked on the client");
        assert_eq!(n.transport.started as u64, six_s, "woken every cycle");
        assert_eq!(stats.mode(), CallbackMode::Async);
        assert_eq!(stats.async_cause(), AsyncCause::Configured);
        assert_eq!(stats.resynced.load(Relaxed), 0);
        assert_eq!(stats.xruns.load(Relaxed), 0);
        assert_eq!(AsyncCause::from_u32(3).as_str(), "configured");
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
