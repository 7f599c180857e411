//! The real-time thread: waits for the driver, runs the plan for one quantum, does the
//! device I/O.
//!
//! Contract of everything reachable from [`RtRunner::run_cycle`]:
//! - no allocation and no freeing: retired plans and nodes go back to the control side
//!   through the garbage queue (if it is ever full they are leaked and counted, never
//!   dropped here);
//! - no locks: the control side talks to us only through the lock-free `rtrb` queue;
//! - no logging: events go to the control side through a queue and an eventfd doorbell;
//! - no syscalls but device I/O, clock reads, the driver's own sleep and eventfd writes;
//! - one blocking exception, for callback clients that run in other processes
//!   ([`crate::callback`]): a split-phase node's `finish` may wait on the client's
//!   completion eventfd (`ppoll` with a timeout) — never past the deadline it computed
//!   from the cycle start (a configured fraction of the quantum period), and not at all
//!   when the client has already answered or is still busy with an earlier cycle. A
//!   late, hung or crashed client therefore costs at most one deadline once, then
//!   nothing; this is how JACK and PipeWire drive their clients too;
//! - one plan per cycle, swapped at the cycle boundary, so every plan (and the link
//!   fades it carries) runs for at least one whole cycle.
//!
//! While suspended (no client streams for the idle timeout, or held on request) the
//! thread blocks on the wake eventfd and makes no periodic wakeups; that is outside the
//! cycle.
//!
//! One exception to the rules above, also outside the cycle: right after the idle
//! suspend the thread closes the devices' handles ([`quaver_devices::Device::close_idle`])
//! and the start that resumes them reopens and renegotiates (ALSA: `snd_pcm_close`,
//! `snd_pcm_open` and the hw/sw parameters), which allocates and makes blocking calls.
//! Nothing plays at either moment, and only the thread that owns the devices may touch
//! them; PulseAudio's I/O thread suspends and reopens its cards the same way.

use crate::node::CycleInfo;
use crate::plan::{DeviceRole, Fade, NodeSlot, Plan};
use crate::timing::NodeTimes;
use quaver_devices::{Device, WaitStatus};
use quaver_dsp::mix::{mix_into, mix_into_ramp};
use quaver_dsp::volume::GainRamp;
use rtrb::{Consumer, Producer};
use rustix::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed},
};

/// Most devices one engine drives (one clock domain).
pub const MAX_DEVICES: usize = 8;
/// Longest a freewheeling cycle waits for slow streams before rendering anyway.
const FREEWHEEL_MAX_WAIT_NS: u64 = 2_000_000_000;
/// Poll step while a freewheeling cycle waits for streams.
const FREEWHEEL_POLL_NS: u64 = 1_000_000;

/// Control → RT messages.
pub(crate) enum ToRt {
    AddNode {
        slot: usize,
        node: Box<NodeSlot>,
    },
    RemoveNode {
        slot: usize,
    },
    Plan(Box<Plan>),
    Volume {
        slot: usize,
        gain: f32,
        ramp: usize,
    },
    /// Something audible changed: take back the driver's queued playback (when it holds
    /// more than a normal cycle's worth) and render it again. `discard` names a node
    /// whose taken-back output is dropped rather than played again (a flushed stream).
    Rewind {
        discard: Option<usize>,
    },
    /// A stream node's new rate converter ([`crate::Engine::retune`]).
    Retune {
        slot: usize,
        retune: Box<crate::stream::Retune>,
    },
    /// A new idle timeout before the devices suspend, in frames (`None`: never).
    SuspendAfter(Option<u64>),
    Shutdown,
}

/// Objects the RT thread retired; dropped on the control side.
pub(crate) enum Garbage {
    Plan(#[allow(dead_code)] Box<Plan>),
    Node(#[allow(dead_code)] Box<NodeSlot>),
    /// The rate converter a retune replaced.
    Retune(#[allow(dead_code)] Box<crate::stream::Retune>),
    /// Why a device failed: logged (and freed) by the control side.
    DeviceError {
        device: usize,
        error: quaver_devices::DeviceError,
    },
}

/// Things the RT thread reports to the control side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtEvent {
    /// The driver reported an xrun.
    Xrun {
        /// Device index.
        device: usize,
    },
    /// A device failed and is no longer driven.
    DeviceGone {
        /// Device index.
        device: usize,
    },
    /// Devices suspended for idleness.
    Suspended,
    /// Devices resumed.
    Resumed,
    /// A suspended device closed its handles (idle).
    DeviceClosed {
        /// Device index.
        device: usize,
    },
    /// A device closed for idleness was opened again.
    DeviceReopened {
        /// Device index.
        device: usize,
    },
    /// The quantum changed.
    Quantum(usize),
    /// A device's adaptive safety margin changed.
    Margin {
        /// Device index.
        device: usize,
        /// The margin now, frames.
        frames: u64,
    },
}

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
}

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
}

/// Buckets of the log2 timing histograms (the last, from 2^31 ns ≈ 2.1 s, takes all longer).
pub const HIST_BUCKETS: usize = 32;

/// The log2 bucket of a duration in ns.
pub fn hist_bucket(ns: u64) -> usize {
    ((u64::BITS - ns.leading_zeros()) as usize)
        .saturating_sub(1)
        .min(HIST_BUCKETS - 1)
}

fn sleep_until_ns(t: u64) {
    let ts = rustix::time::Timespec {
        tv_sec: (t / 1_000_000_000) as i64,
        tv_nsec: (t % 1_000_000_000) as i64,
    };
    let _ = rustix::thread::clock_nanosleep_absolute(rustix::thread::ClockId::Monotonic, &ts);
}

/// The real-time side of an engine. Runs on its own thread ([`RtRunner::run`]) or is
/// driven cycle by cycle by tests ([`RtRunner::run_cycle`]).
pub struct RtRunner {
    pub(crate) slots: Vec<Option<Box<NodeSlot>>>,
    pub(crate) plan: Box<Plan>,
    pub(crate) devices: Vec<Box<dyn Device>>,
    pub(crate) gone: [bool; MAX_DEVICES],
    /// Devices whose handles an idle suspend closed (the next start reopens them).
    pub(crate) closed: [bool; MAX_DEVICES],
    /// Per device: the fade-in applied to playback after each start or resume (unity
    /// once done), so the first sound after a suspend does not click.
    pub(crate) start_fades: [GainRamp; MAX_DEVICES],
    /// Per device, the rate matching of a follower (`None` for the driver, device 0).
    pub(crate) followers: Vec<Option<crate::follow::Follower>>,
    /// Length of those fades, frames.
    pub(crate) start_fade_frames: usize,
    pub(crate) from_ctl: Consumer<ToRt>,
    pub(crate) garbage: Producer<Garbage>,
    pub(crate) events: Producer<RtEvent>,
    pub(crate) service_bell: Arc<OwnedFd>,
    pub(crate) wake: Arc<OwnedFd>,
    pub(crate) stats: Arc<RtStats>,
    /// Per slot: the node's timing ([`crate::timing`]), shared with the control side.
    pub(crate) node_times: Arc<[NodeTimes]>,
    /// Whether to time nodes one by one (one clock read per node boundary).
    pub(crate) node_timing: bool,
    pub(crate) rate: u32,
    pub(crate) ramp_frames: usize,
    pub(crate) suspend_after_frames: Option<u64>,
    pub(crate) freewheel: bool,
    pub(crate) cycle: u64,
    /// Frames processed since the engine started (the graph's frame clock).
    pub(crate) position: u64,
    /// Frames rendered for the driver, less those rewound: the end of what is queued,
    /// on the scale of each slot's `rendered_until`.
    pub(crate) queued_until: u64,
    /// Slots of split-phase nodes begun this cycle and not finished yet; its capacity
    /// (one per slot) is reserved up front so pushing never allocates.
    pub(crate) pending: Vec<usize>,
    pub(crate) idle_frames: u64,
    pub(crate) running: bool,
    pub(crate) suspended: bool,
    pub(crate) shutdown: bool,
    pub(crate) first_cycle_of_plan: bool,
    pub(crate) last_quantum: usize,
    pub(crate) notify: bool,
    /// Deadline for our own pacing when the driver device is gone.
    pub(crate) fallback_deadline: u64,
    /// A control message asked for a rewind, done before the next wait.
    pub(crate) rewind_requested: bool,
    /// The driver's previous cycle was overdue (to count runs of them).
    pub(crate) was_overdue: bool,
    /// Per slot: the next rewind drops this node's taken-back output (one entry per
    /// slot, allocated up front).
    pub(crate) discard: Vec<bool>,
}

impl RtRunner {
    fn retire(&mut self, g: Garbage) {
        if let Err(rtrb::PushError::Full(g)) = self.garbage.push(g) {
            // Freeing here would break the no-free rule; a leak is the lesser evil.
            std::mem::forget(g);
            self.stats.leaked.fetch_add(1, Relaxed);
        }
        self.notify = true;
    }

    fn event(&mut self, e: RtEvent) {
        if self.events.push(e).is_err() {
            self.stats.events_dropped.fetch_add(1, Relaxed);
        }
        self.notify = true;
    }

    /// Applies queued control messages: at most one plan, or every queued one when more
    /// than `MAX_PENDING_PLANS` wait (see there). *RT*.
    fn apply_messages(&mut self) {
        let backlog = self
            .stats
            .plans_sent
            .load(Acquire)
            .saturating_sub(self.stats.plans_applied.load(Relaxed));
        self.apply_messages_up_to(if backlog > crate::engine::MAX_PENDING_PLANS {
            usize::MAX
        } else {
            1
        });
    }

    /// Applies queued control messages in order, stopping before a plan once `plans`
    /// have been applied. Between the wait for the device and the graph (`plans` = 0)
    /// this takes what arrived during the wait — a client's new rate converter with its
    /// audio right behind it, a volume change — into this cycle, while a new plan (and
    /// what was queued after it) waits for the next cycle, whose quantum it may change.
    /// *RT*.
    fn apply_messages_up_to(&mut self, plans: usize) {
        let mut plans_left = plans;
        loop {
            if plans_left == 0 && matches!(self.from_ctl.peek(), Ok(ToRt::Plan(_))) {
                break;
            }
            let Ok(msg) = self.from_ctl.pop() else { break };
            match msg {
                ToRt::AddNode { slot, node } => {
                    // The slot's figures are the new node's from now on.
                    if let Some(t) = self.node_times.get(slot) {
                        t.reset();
                    }
                    if let Some(old) = self.slots[slot].replace(node) {
                        self.retire(Garbage::Node(old));
                    }
                }
                ToRt::RemoveNode { slot } => {
                    if let Some(old) = self.slots[slot].take() {
                        self.retire(Garbage::Node(old));
                    }
                }
                ToRt::Plan(p) => {
                    self.stats.plans_applied.fetch_add(1, Relaxed);
                    let old = std::mem::replace(&mut self.plan, p);
                    self.retire(Garbage::Plan(old));
                    self.first_cycle_of_plan = true;
                    plans_left = plans_left.saturating_sub(1);
                }
                ToRt::Volume { slot, gain, ramp } => {
                    // Suspended, nothing plays: a ramp would only play out over the
                    // first frames after the resume (the start of a stream played just
                    // after a volume change came out at the old volume), so jump.
                    let ramp = if self.suspended { 0 } else { ramp };
                    if let Some(s) = self.slots[slot].as_mut() {
                        s.gain.set_target(gain, ramp);
                    }
                }
                ToRt::Retune { slot, retune } => self.retune(slot, retune),
                ToRt::Rewind { discard } => {
                    self.rewind_requested = true;
                    if let Some(slot) = discard
                        && let Some(flag) = self.discard.get_mut(slot)
                    {
                        *flag = true;
                    }
                }
                ToRt::SuspendAfter(frames) => {
                    // A freewheeling driver keeps suspending at once.
                    if !self.freewheel {
                        self.suspend_after_frames = frames;
                    }
                }
                ToRt::Shutdown => {
                    self.shutdown = true;
                    break;
                }
            }
        }
    }

    fn ring_service(&mut self) {
        if self.notify {
            self.notify = false;
            let _ = rustix::io::write(&*self.service_bell, &1u64.to_ne_bytes());
        }
    }

    fn start_devices(&mut self, q: usize) {
        for i in 0..self.devices.len() {
            if !self.gone[i] {
                match self.devices[i].start(q) {
                    Ok(()) if self.closed[i] => {
                        self.closed[i] = false;
                        self.event(RtEvent::DeviceReopened { device: i });
                    }
                    Ok(()) => {}
                    Err(error) => {
                        // The reason goes to the control side to be logged (a reopen
                        // that failed or negotiated something else says why).
                        self.retire(Garbage::DeviceError { device: i, error });
                        self.mark_gone(i);
                    }
                }
            }
            if let Some(f) = self.followers[i].as_mut() {
                f.reset();
            }
            if self.devices[i].fades_in_on_start() {
                self.start_fades[i] = GainRamp::new(0.0);
                self.start_fades[i].set_target(1.0, self.start_fade_frames);
            }
        }
        self.fallback_deadline = quaver_rt::monotonic_ns();
        self.running = true;
    }

    /// Reads every follower's levels and steers its converters for this cycle. *RT*.
    fn follow_devices(&mut self, q: usize) {
        for i in 1..self.devices.len() {
            let Some(f) = self.followers[i].as_mut() else {
                continue;
            };
            if self.gone[i] {
                f.active = false;
                continue;
            }
            match self.devices[i].follow(q) {
                Ok(Some(levels)) => {
                    f.active = true;
                    f.update(levels, q, self.rate);
                }
                Ok(None) => f.active = false,
                Err(error) => {
                    f.active = false;
                    self.retire(Garbage::DeviceError { device: i, error });
                    self.mark_gone(i);
                }
            }
        }
    }

    fn mark_gone(&mut self, i: usize) {
        if !self.gone[i] {
            self.gone[i] = true;
            self.stats.devices[i].gone.store(true, Relaxed);
            self.event(RtEvent::DeviceGone { device: i });
        }
    }

    /// Waits for the driver (device 0), or paces on our own clock if it is gone.
    /// Returns false when the wait was cut short by a control message (no cycle due).
    fn wait_driver(&mut self, q: usize) -> bool {
        if !self.gone[0] {
            match self.devices[0].wait_or_wake(q, rustix::fd::AsFd::as_fd(&*self.wake)) {
                Ok(WaitStatus::Ready) => return true,
                Ok(WaitStatus::Xrun) => {
                    self.stats.xruns.fetch_add(1, Relaxed);
                    self.event(RtEvent::Xrun { device: 0 });
                    return true;
                }
                Ok(WaitStatus::Woken) => {
                    // Readable, so this read does not block; it re-arms the eventfd.
                    let mut buf = [0u8; 8];
                    let _ = rustix::io::read(&*self.wake, &mut buf);
                    return false;
                }
                Err(_) => {
                    self.mark_gone(0);
                    self.fallback_deadline = quaver_rt::monotonic_ns();
                }
            }
        }
        self.fallback_deadline += q as u64 * 1_000_000_000 / self.rate as u64;
        sleep_until_ns(self.fallback_deadline);
        true
    }

    /// Tells the driver how far to fill ahead this cycle: the plan's fill while every
    /// stream can deliver another quantum (a stream that cannot would underrun in a
    /// burst of cycles; its client gets until the watermark instead), else none.
    fn set_driver_fill(&mut self, q: usize) {
        if self.gone[0] {
            return;
        }
        let fill = if self.plan.fill > 0 && self.streams_ready(q) {
            self.plan.fill
        } else {
            0
        };
        self.devices[0].set_fill(fill);
    }

    /// Takes back what the driver has queued beyond a normal cycle and lets every node
    /// that produced it produce it again, so a change (a new stream, a volume, a pause)
    /// is heard after the watermark rather than after the whole buffer. Skipped when a
    /// node that already produced output cannot take it back, or when little is
    /// queued. Single-device engines only (fill is off otherwise). *RT*.
    fn rewind(&mut self, q: usize) {
        if self.gone[0] || !self.running || self.devices.len() != 1 {
            return;
        }
        // A normal cycle keeps about a quantum plus the watermark queued; rewinding
        // that would gain nothing.
        if self.devices[0].playback_delay() <= 2 * q {
            return;
        }
        let all_can = self.plan.steps.iter().all(|s| {
            self.slots[s.slot]
                .as_ref()
                .is_none_or(|n| !n.rendered || n.processor.as_ref().is_none_or(|p| p.can_rewind()))
        });
        if !all_can {
            return;
        }
        // Filling ahead, the refill follows at once; otherwise keep one quantum so the
        // driver's next wakeup finds its usual lead.
        let keep = if self.plan.fill > 0 { 0 } else { q };
        let frames = self.devices[0].rewind(keep);
        if frames == 0 {
            return;
        }
        // Only what a node rendered into the rewound span is its to take back: a stream
        // held by a suspended sink last played long before it, and would replay that.
        let start = self.queued_until.saturating_sub(frames as u64);
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(slot) = slot
                && slot.rendered
                && let Some(p) = slot.processor.as_mut()
            {
                let mine = slot.rendered_until.saturating_sub(start) as usize;
                if mine > 0 || self.discard[i] {
                    p.rewind(mine, self.discard[i]);
                }
                slot.rendered_until = slot.rendered_until.min(start);
            }
        }
        self.queued_until = start;
    }

    /// True when every stream the plan runs on each cycle can deliver `q` frames. *RT*.
    fn streams_ready(&mut self, q: usize) -> bool {
        let slots = &mut self.slots;
        self.plan
            .steps
            .iter()
            .filter(|s| s.stream && !s.once)
            .all(|s| {
                slots[s.slot]
                    .as_mut()
                    .and_then(|n| n.processor.as_mut())
                    .is_none_or(|p| p.ready(q))
            })
    }

    /// In freewheel mode, waits (bounded) until every stream can fill a cycle.
    fn freewheel_wait(&mut self, q: usize) {
        let start = quaver_rt::monotonic_ns();
        loop {
            if self.streams_ready(q)
                || quaver_rt::monotonic_ns() - start > FREEWHEEL_MAX_WAIT_NS
                || self.shutdown
            {
                return;
            }
            sleep_until_ns(quaver_rt::monotonic_ns() + FREEWHEEL_POLL_NS);
            self.apply_messages();
        }
    }

    /// Swaps a stream node's rate converter and retires the old one. *RT*.
    fn retune(&mut self, slot: usize, mut r: Box<crate::stream::Retune>) {
        if let Some(p) = self.slots[slot].as_mut().and_then(|s| s.processor.as_mut()) {
            p.retune(&mut r);
        }
        self.retire(Garbage::Retune(r));
    }

    /// Control messages not yet applied (plans apply one per cycle). For tests.
    pub fn pending(&self) -> usize {
        self.from_ctl.slots()
    }

    /// Runs one cycle: messages, wait, graph, device I/O. Returns false on shutdown.
    /// *RT*.
    pub fn run_cycle(&mut self) -> bool {
        self.apply_messages();
        if self.shutdown {
            return false;
        }
        let q = self.plan.quantum.max(1);
        if !self.running {
            self.start_devices(q);
        }
        if q != self.last_quantum {
            self.last_quantum = q;
            self.stats.quantum.store(q as u64, Relaxed);
            self.event(RtEvent::Quantum(q));
        }
        if std::mem::take(&mut self.rewind_requested) {
            self.rewind(q);
            self.discard.fill(false);
        }
        self.set_driver_fill(q);
        // Before the driver's wait, as if the followers waited with it: a restart's
        // prefill and a grown quantum's silence must cover that wait.
        self.follow_devices(q);
        if !self.wait_driver(q) {
            self.ring_service();
            return true;
        }
        // What arrived during the wait belongs to the audio this cycle renders (a
        // client's rate change has its audio right behind it): apply it now, not a
        // whole cycle later.
        self.apply_messages_up_to(0);
        let mut overdue = false;
        if !self.gone[0]
            && let Some(late) = self.devices[0].wakeup_lateness_ns()
        {
            self.stats.lateness_hist[hist_bucket(late)].fetch_add(1, Relaxed);
            self.stats.lateness_max_ns.fetch_max(late, Relaxed);
            // A whole period late: the next cycle was due before this one began (what
            // cyclictest counts as a wakeup later than one period). Waiting for a client
            // up to its deadline ends a cycle near the next one's start, never a period
            // past it, so a client's miss is not counted here a second time.
            overdue = late > q as u64 * 1_000_000_000 / self.rate.max(1) as u64;
        }
        if overdue {
            self.stats.overdue_cycles.fetch_add(1, Relaxed);
            if !self.was_overdue {
                self.stats.overdue_runs.fetch_add(1, Relaxed);
            }
        }
        self.was_overdue = overdue;
        if self.freewheel {
            self.freewheel_wait(q);
        }
        let t0 = quaver_rt::monotonic_ns();
        let cx = CycleInfo {
            frames: q,
            rate: self.rate,
            cycle: self.cycle,
            time_ns: t0,
            position: self.position,
            playback_delay: if self.gone[0] {
                0
            } else {
                self.devices[0].playback_delay()
            },
            capture_delay: if self.gone[0] {
                0
            } else {
                self.devices[0].capture_delay()
            },
            // As published after the previous cycle: the margin moves seconds apart.
            margin_frames: if self.gone[0] {
                0
            } else {
                self.stats.devices[0].margin_frames.load(Relaxed) as usize
            },
        };
        let end = self.process_graph(&cx);
        self.first_cycle_of_plan = false;
        self.cycle += 1;
        self.position += q as u64;
        self.queued_until += q as u64;
        // With per-node timing the last node boundary is the end of the cycle's work.
        let end = end.unwrap_or_else(quaver_rt::monotonic_ns);
        let busy = end.saturating_sub(t0);
        self.stats.cycles.store(self.cycle, Relaxed);
        self.stats.busy_ns_last.store(busy, Relaxed);
        self.stats.busy_ns_max.fetch_max(busy, Relaxed);
        self.stats.busy_hist[hist_bucket(busy)].fetch_add(1, Relaxed);
        self.publish_device_counters();
        self.account_idle(q);
        self.ring_service();
        true
    }

    fn publish_device_counters(&mut self) {
        // Devices whose adaptive margin moved since the last publish (logged by the
        // service thread at debug level); an array, not a Vec: this runs in the cycle.
        let mut changed = [None; MAX_DEVICES];
        for (i, d) in self.devices.iter().enumerate() {
            let c = d.counters();
            let s = &self.stats.devices[i];
            s.wakeups.store(c.wakeups, Relaxed);
            s.pointer_queries.store(c.pointer_queries, Relaxed);
            s.underruns.store(c.underruns, Relaxed);
            s.overruns.store(c.overruns, Relaxed);
            s.frames_written.store(c.frames_written, Relaxed);
            s.frames_read.store(c.frames_read, Relaxed);
            s.playback_delay.store(d.playback_delay() as u64, Relaxed);
            s.rewinds.store(c.rewinds, Relaxed);
            s.rewound_frames.store(c.rewound_frames, Relaxed);
            s.closed.store(c.closed, Relaxed);
            s.idle_closes.store(c.idle_closes, Relaxed);
            s.reopens.store(c.reopens, Relaxed);
            s.margin_frames.store(c.margin_frames, Relaxed);
            let before = s.margin_changes.swap(c.margin_changes, Relaxed);
            if before != c.margin_changes {
                changed[i] = Some(c.margin_frames);
            }
        }
        for (device, frames) in changed.into_iter().enumerate() {
            if let Some(frames) = frames {
                self.event(RtEvent::Margin { device, frames });
            }
        }
    }

    fn account_idle(&mut self, q: usize) {
        if self.plan.keep_awake && !self.plan.held {
            self.idle_frames = 0;
            return;
        }
        self.idle_frames += q as u64;
        if self.plan.held
            || self
                .suspend_after_frames
                .is_some_and(|limit| self.idle_frames >= limit)
        {
            for d in self.devices.iter_mut() {
                d.suspend();
            }
            self.running = false;
            self.suspended = true;
            self.stats.suspended.store(true, Relaxed);
            self.event(RtEvent::Suspended);
            // The cycle is over and nothing plays until a stream wakes us: release the
            // devices (see the module docs for why this may block here).
            for i in 0..self.devices.len() {
                if !self.gone[i] && self.devices[i].close_idle() {
                    self.closed[i] = true;
                    self.event(RtEvent::DeviceClosed { device: i });
                }
            }
            self.publish_device_counters();
        }
    }

    /// Runs every step of the plan. With per-node timing, returns the clock reading at
    /// the last node boundary (the end of the work). *RT*.
    fn process_graph(&mut self, cx: &CycleInfo) -> Option<u64> {
        let timing = self.node_timing;
        // One clock reading per node boundary: the end of one node's work is the
        // start of the next one's.
        let mut mark = cx.time_ns;
        let q = cx.frames;
        let first = self.first_cycle_of_plan;
        let ramp = self.ramp_frames.min(q);
        for si in 0..self.plan.steps.len() {
            let step = self.plan.steps[si].clone();
            if step.once && !first {
                continue;
            }
            // A split-phase node's outputs exist only once it finished: finish the ones
            // this step reads from (the others keep running in parallel).
            for li in step.links.clone() {
                let src = self.plan.links[li].src_slot;
                if self.slots[src].as_ref().is_some_and(|s| s.pending) {
                    Self::finish_slot(self.slots[src].as_deref_mut(), cx);
                    if timing {
                        mark = self.time_finish(src, mark);
                    }
                }
            }
            let Some(mut cur) = self.slots[step.slot].take() else {
                continue;
            };
            let NodeSlot {
                processor,
                inputs,
                outputs,
                gain,
                volume_on_inputs,
                pending,
                rendered,
                rendered_until,
                begin_ns,
            } = &mut *cur;
            for ch in 0..inputs.channels() {
                inputs.channel_mut(ch)[..q].fill(0.0);
            }
            for l in &self.plan.links[step.links.clone()] {
                let Some(src) = self.slots[l.src_slot].as_ref() else {
                    continue;
                };
                let s = &src.outputs.channel(l.src_port)[..q];
                let d = &mut inputs.channel_mut(l.dst_port)[..q];
                match (l.fade, first) {
                    (Fade::Out, false) => {}
                    (Fade::Steady, _) | (Fade::In, false) => mix_into(d, s),
                    (Fade::In, true) => {
                        mix_into_ramp(&mut d[..ramp], &s[..ramp], 0.0, 1.0);
                        mix_into(&mut d[ramp..], &s[ramp..]);
                    }
                    (Fade::Out, true) => mix_into_ramp(&mut d[..ramp], &s[..ramp], 1.0, 0.0),
                }
            }
            if *volume_on_inputs {
                gain.apply(&mut inputs.view_mut(q));
            }
            match step.device {
                Some(DeviceRole::Sink(d)) => {
                    if self.start_fades[d].is_ramping() {
                        self.start_fades[d].apply(&mut inputs.view_mut(q));
                    }
                    if !self.gone[d] {
                        let ok = self.followers[d]
                            .as_mut()
                            .and_then(|f| f.write(self.devices[d].as_mut(), inputs.view(q)))
                            .unwrap_or_else(|| self.devices[d].write(inputs.view(q)).is_ok());
                        if !ok {
                            self.mark_gone(d);
                        }
                    }
                    for ch in 0..outputs.channels().min(inputs.channels()) {
                        outputs.channel_mut(ch)[..q].copy_from_slice(&inputs.channel(ch)[..q]);
                    }
                }
                Some(DeviceRole::Source(d)) => {
                    let mut out = outputs.view_mut(q);
                    let ok = !self.gone[d]
                        && self.followers[d]
                            .as_mut()
                            .and_then(|f| f.read(self.devices[d].as_mut(), &mut out))
                            .unwrap_or_else(|| self.devices[d].read(&mut out).is_ok());
                    if !ok {
                        out.fill_silence();
                        self.mark_gone(d);
                    }
                }
                None => match processor.as_mut() {
                    Some(p) if p.is_split() => {
                        p.begin(cx, inputs.view(q), &mut outputs.view_mut(q));
                        *pending = true;
                        *rendered = true;
                        *rendered_until = self.queued_until + q as u64;
                    }
                    Some(p) => {
                        p.process(cx, inputs.view(q), &mut outputs.view_mut(q));
                        *rendered = true;
                        *rendered_until = self.queued_until + q as u64;
                    }
                    None => outputs.view_mut(q).fill_silence(),
                },
            }
            if *pending {
                // Never reallocates: the capacity is one entry per slot.
                if self.pending.len() < self.pending.capacity() {
                    self.pending.push(step.slot);
                }
            } else if !*volume_on_inputs {
                gain.apply(&mut outputs.view_mut(q));
            }
            if timing {
                let now = quaver_rt::monotonic_ns();
                let spent = now.saturating_sub(mark);
                mark = now;
                if *pending {
                    *begin_ns = spent;
                } else if let Some(t) = self.node_times.get(step.slot) {
                    t.record(0, spent, spent);
                    if let Some(p) = processor.as_ref() {
                        t.xruns.store(p.xruns(), Relaxed);
                    }
                }
            }
            self.slots[step.slot] = Some(cur);
        }
        for i in 0..self.pending.len() {
            let slot = self.pending[i];
            if self.slots[slot].as_ref().is_some_and(|s| s.pending) {
                Self::finish_slot(self.slots[slot].as_deref_mut(), cx);
                if timing {
                    mark = self.time_finish(slot, mark);
                }
            }
        }
        self.pending.clear();
        timing.then_some(mark)
    }

    /// Records a split-phase node's timing right after its `finish`; returns the clock
    /// reading, the next node boundary. *RT*.
    fn time_finish(&self, slot: usize, mark: u64) -> u64 {
        let now = quaver_rt::monotonic_ns();
        if let (Some(n), Some(t)) = (self.slots[slot].as_deref(), self.node_times.get(slot))
            && let Some(p) = n.processor.as_ref()
        {
            t.xruns.store(p.xruns(), Relaxed);
            if let Some(r) = p.remote_times() {
                let (wait, busy) = r.wait_busy(now);
                t.record(wait, busy, n.begin_ns + now.saturating_sub(mark));
            }
        }
        now
    }

    /// Finishes a split-phase node begun this cycle and applies its volume. *RT*; may
    /// wait (bounded) inside the processor's `finish`.
    fn finish_slot(slot: Option<&mut NodeSlot>, cx: &CycleInfo) {
        let Some(n) = slot else { return };
        n.pending = false;
        let q = cx.frames;
        if let Some(p) = n.processor.as_mut() {
            p.finish(cx, &mut n.outputs.view_mut(q));
        }
        if !n.volume_on_inputs {
            n.gain.apply(&mut n.outputs.view_mut(q));
        }
    }

    fn block_until_woken(&mut self) {
        let mut buf = [0u8; 8];
        // Blocking read: the eventfd is blocking on this side; the control side writes
        // it after every message. This is the idle state, not the cycle.
        let _ = rustix::io::read(&*self.wake, &mut buf);
    }

    /// Runs cycles until shutdown, suspending while idle; returns the devices so the
    /// control side can close them. Runs on the engine's real-time thread.
    pub fn run(mut self) -> Vec<Box<dyn Device>> {
        loop {
            if self.suspended {
                self.ring_service();
                self.block_until_woken();
                // One read of the eventfd may stand for several messages; apply them
                // all (fades are moot while nothing plays) so none waits for a wake
                // that already happened.
                loop {
                    self.apply_messages();
                    if self.shutdown || self.from_ctl.is_empty() {
                        break;
                    }
                }
                if self.shutdown {
                    break;
                }
                if self.plan.keep_awake && !self.plan.held {
                    self.suspended = false;
                    self.idle_frames = 0;
                    self.stats.suspended.store(false, Relaxed);
                    self.event(RtEvent::Resumed);
                }
                continue;
            }
            if !self.run_cycle() {
                break;
            }
        }
        if self.running {
            for d in self.devices.iter_mut() {
                d.suspend();
            }
        }
        // Hand every remaining object back so nothing is freed on this thread.
        for s in 0..self.slots.len() {
            if let Some(n) = self.slots[s].take() {
                self.retire(Garbage::Node(n));
            }
        }
        let plan = std::mem::take(&mut self.plan);
        self.retire(Garbage::Plan(plan));
        self.ring_service();
        std::mem::take(&mut self.devices)
    }
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
