//! The runner: owns the node slots, the plan and the devices, applies the control side's
//! messages between cycles, and runs one cycle after the other (or sleeps while idle).
//! The contract it keeps is in [`crate::rt`].

use crate::rt::follow::Follower;
use crate::rt::msg::{Garbage, MAX_PENDING_PLANS, RtEvent, ToRt};
use crate::rt::node::CycleInfo;
use crate::rt::plan::{NodeSlot, Plan};
use crate::rt::retune::Retune;
use crate::rt::stats::{MAX_DEVICES, RtStats, hist_bucket};
use crate::rt::timing::NodeTimes;
use quaver_devices::{Device, WaitStatus};
use quaver_dsp::volume::GainRamp;
use rtrb::{Consumer, Producer};
use rustix::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Longest a freewheeling cycle waits for slow streams before rendering anyway.
const FREEWHEEL_MAX_WAIT_NS: u64 = 2_000_000_000;
/// Poll step while a freewheeling cycle waits for streams.
const FREEWHEEL_POLL_NS: u64 = 1_000_000;

fn sleep_until_ns(t: u64) {
    let ts = rustix::time::Timespec {
        tv_sec: (t / 1_000_000_000) as i64,
        tv_nsec: (t % 1_000_000_000) as i64,
    };
    let _ = rustix::thread::clock_nanosleep_absolute(rustix::thread::ClockId::Monotonic, &ts);
}

/// The runner's state in JACK's freewheel (`freewheel.rs`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freewheel {
    /// Paced by the devices.
    #[default]
    Off,
    /// This cycle still runs with the devices and fades their playback out.
    Entering,
    /// Detached from the devices.
    On,
}

/// The real-time side of an engine. Runs on its own thread ([`RtRunner::run`]) or is
/// driven cycle by cycle by tests ([`RtRunner::run_cycle`]).
pub struct RtRunner {
    pub(crate) slots: Vec<Option<Box<NodeSlot>>>,
    pub(crate) plan: Box<Plan>,
    /// The devices by index (`MAX_DEVICES` entries, allocated up front): `None` for a
    /// free index, or once a device failed, went away or was removed (handed back).
    pub(crate) devices: Vec<Option<Box<dyn Device>>>,
    /// The device whose clock paces the cycles; `None` paces on our own clock.
    pub(crate) driver: Option<usize>,
    /// Per index: the device failed or went away (reported; its nodes may still be in
    /// the plan until the control side removes them).
    pub(crate) gone: [bool; MAX_DEVICES],
    /// Per index: added while running, started at the next cycle's start.
    pub(crate) needs_start: [bool; MAX_DEVICES],
    /// Devices whose handles an idle suspend closed (the next start reopens them).
    pub(crate) closed: [bool; MAX_DEVICES],
    /// Per device: the fade-in applied to playback after each start or resume (unity
    /// once done), so the first sound after a suspend does not click.
    pub(crate) start_fades: [GainRamp; MAX_DEVICES],
    /// Per device index, the rate matching of a follower (`None` for the first driver;
    /// unused while its device drives).
    pub(crate) followers: Vec<Option<Box<Follower>>>,
    /// Length of those fades, frames.
    pub(crate) start_fade_frames: usize,
    pub(crate) from_ctl: Consumer<ToRt>,
    pub(crate) garbage: Producer<Garbage>,
    pub(crate) events: Producer<RtEvent>,
    pub(crate) service_bell: Arc<OwnedFd>,
    pub(crate) wake: Arc<OwnedFd>,
    pub(crate) stats: Arc<RtStats>,
    /// Per slot: the node's timing ([`crate::rt::timing`]), shared with the control side.
    pub(crate) node_times: Arc<[NodeTimes]>,
    /// Whether to time nodes one by one (one clock read per node boundary).
    pub(crate) node_timing: bool,
    pub(crate) rate: u32,
    pub(crate) ramp_frames: usize,
    pub(crate) suspend_after_frames: Option<u64>,
    pub(crate) freewheel: bool,
    /// JACK's freewheel (`freewheel.rs`), not to be confused with a freewheeling device.
    pub(crate) freewheel_state: Freewheel,
    pub(crate) cycle: u64,
    /// Frames processed since the engine started (the graph's frame clock).
    pub(crate) position: u64,
    /// Frames rendered for the driver, less those rewound: the end of what is queued,
    /// on the scale of each slot's `rendered_until`.
    pub(crate) queued_until: u64,
    /// The fill passed to the driver before its last wait (0: not filling ahead).
    pub(crate) driver_fill: usize,
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
    /// This cycle's notes for the per-stage breakdown ([`crate::rt::stages`]).
    pub(crate) stage_clock: crate::rt::stages::StageClock,
    /// Per slot: the next rewind drops this node's taken-back output (one entry per
    /// slot, allocated up front).
    pub(crate) discard: Vec<bool>,
    /// The JACK transport, advanced at each cycle start.
    pub(crate) transport: crate::rt::transport::TransportEngine,
    /// Room to merge MIDI event lists in ([`crate::midi::merge`]), one port buffer long.
    pub(crate) midi_scratch: Vec<u32>,
}

/// What the control side shares with a new runner: its queues, doorbells and counters.
pub(crate) struct RtLinks {
    pub from_ctl: Consumer<ToRt>,
    pub garbage: Producer<Garbage>,
    pub events: Producer<RtEvent>,
    pub service_bell: Arc<OwnedFd>,
    pub wake: Arc<OwnedFd>,
    pub stats: Arc<RtStats>,
    pub node_times: Arc<[NodeTimes]>,
    pub transport: Arc<crate::rt::transport::TransportShared>,
}

/// A new runner's fixed settings.
pub(crate) struct RtSettings {
    /// Node slots (the engine's node limit).
    pub slots: usize,
    /// The first plan's quantum.
    pub quantum: usize,
    /// Frames of a port buffer (the largest quantum).
    pub max_quantum: usize,
    pub rate: u32,
    pub start_fade_frames: usize,
    pub node_timing: bool,
    pub ramp_frames: usize,
    pub suspend_after_frames: Option<u64>,
    pub freewheel: bool,
}

impl RtRunner {
    /// A runner over `devices` (the first drives the clock), with one follower entry per
    /// device. Control thread: allocates every slot and buffer it will use, including
    /// room for `MAX_DEVICES` devices.
    pub(crate) fn new(
        devices: Vec<Box<dyn Device>>,
        followers: Vec<Option<Box<Follower>>>,
        links: RtLinks,
        s: RtSettings,
    ) -> RtRunner {
        let driver = (!devices.is_empty()).then_some(0);
        let mut devices: Vec<Option<Box<dyn Device>>> = devices.into_iter().map(Some).collect();
        devices.resize_with(MAX_DEVICES, || None);
        let mut followers = followers;
        followers.resize_with(MAX_DEVICES, || None);
        RtRunner {
            slots: (0..s.slots).map(|_| None).collect(),
            plan: Box::new(Plan {
                quantum: s.quantum,
                ..Plan::default()
            }),
            devices,
            driver,
            followers,
            gone: [false; MAX_DEVICES],
            needs_start: [false; MAX_DEVICES],
            closed: [false; MAX_DEVICES],
            start_fades: std::array::from_fn(|_| GainRamp::new(1.0)),
            start_fade_frames: s.start_fade_frames,
            from_ctl: links.from_ctl,
            garbage: links.garbage,
            events: links.events,
            service_bell: links.service_bell,
            wake: links.wake,
            stats: links.stats,
            node_times: links.node_times,
            node_timing: s.node_timing,
            rate: s.rate,
            ramp_frames: s.ramp_frames,
            suspend_after_frames: s.suspend_after_frames,
            freewheel: s.freewheel,
            freewheel_state: Freewheel::Off,
            cycle: 0,
            position: 0,
            queued_until: 0,
            driver_fill: 0,
            pending: Vec::with_capacity(s.slots),
            idle_frames: 0,
            running: false,
            suspended: false,
            shutdown: false,
            first_cycle_of_plan: true,
            last_quantum: 0,
            notify: false,
            fallback_deadline: 0,
            rewind_requested: false,
            was_overdue: false,
            stage_clock: Default::default(),
            discard: vec![false; s.slots],
            transport: crate::rt::transport::TransportEngine::new(links.transport),
            midi_scratch: vec![0; s.max_quantum],
        }
    }

    pub(crate) fn retire(&mut self, g: Garbage) {
        if let Err(rtrb::PushError::Full(g)) = self.garbage.push(g) {
            // Freeing here would break the no-free rule; a leak is the lesser evil.
            std::mem::forget(g);
            self.stats.leaked.fetch_add(1, Relaxed);
        }
        self.notify = true;
    }

    pub(crate) fn event(&mut self, e: RtEvent) {
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
        self.apply_messages_up_to(if backlog > MAX_PENDING_PLANS {
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
                ToRt::SetProcessor { slot, processor } => {
                    let old = match self.slots[slot].as_mut() {
                        Some(s) => std::mem::replace(&mut s.processor, processor),
                        None => processor,
                    };
                    if let Some(old) = old {
                        self.retire(Garbage::Processor(old));
                    }
                }
                ToRt::SetChain { slot, chain } => {
                    let old = match self.slots[slot].as_mut() {
                        Some(s) => std::mem::replace(&mut s.chain, chain),
                        None => chain,
                    };
                    if let Some(old) = old {
                        self.retire(Garbage::Chain(old));
                    }
                }
                ToRt::Control {
                    slot,
                    index,
                    name,
                    value,
                } => {
                    let done = self.slots[slot]
                        .as_mut()
                        .is_some_and(|s| match s.chain.as_mut() {
                            Some(c) => c.set_control(index, name.as_str(), value).is_ok(),
                            None => s
                                .processor
                                .as_mut()
                                .is_some_and(|p| p.control(index, name.as_str(), value)),
                        });
                    if !done {
                        self.stats.controls_refused.fetch_add(1, Relaxed);
                    }
                }
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
                ToRt::AddDevice {
                    index,
                    device,
                    follower,
                } => self.add_device(index, device, follower),
                ToRt::RemoveDevice { index } => self.remove_device(index),
                ToRt::DeviceGone { index } => self.mark_gone(index),
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
            self.start_device(i, q);
        }
        self.fallback_deadline = quaver_rt::monotonic_ns();
        self.running = true;
    }

    /// Starts (or reopens and starts) device `i` if it is there, with a fresh follower
    /// loop and a fade-in; a device that fails is dropped. *RT*, between cycles.
    pub(crate) fn start_device(&mut self, i: usize, q: usize) {
        self.needs_start[i] = false;
        let Some(dev) = self.devices[i].as_mut() else {
            return;
        };
        let fades = dev.fades_in_on_start();
        match dev.start(q) {
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
                return;
            }
        }
        if let Some(f) = self.followers[i].as_mut() {
            f.reset();
        }
        if fades {
            self.start_fades[i] = GainRamp::new(0.0);
            self.start_fades[i].set_target(1.0, self.start_fade_frames);
        }
    }

    /// Reads every follower's levels and steers its converters for this cycle. *RT*.
    fn follow_devices(&mut self, q: usize) {
        for i in 0..self.devices.len() {
            if self.driver == Some(i) {
                continue;
            }
            let (Some(f), Some(dev)) = (self.followers[i].as_mut(), self.devices[i].as_mut())
            else {
                continue;
            };
            match dev.follow(q) {
                Ok(Some(levels)) => {
                    f.active = true;
                    f.update(levels, q, self.rate);
                    f.publish(&self.stats.devices[i]);
                }
                Ok(None) => {
                    f.active = false;
                    self.stats.devices[i].follow_active.store(false, Relaxed);
                }
                Err(error) => {
                    f.active = false;
                    self.stats.devices[i].follow_active.store(false, Relaxed);
                    self.retire(Garbage::DeviceError { device: i, error });
                    self.mark_gone(i);
                }
            }
        }
    }

    /// Waits for the driver, or paces on our own clock if no device drives. Returns
    /// false when the wait was cut short by a control message (no cycle due). A driver
    /// that fails here is dropped and the next device waited for at once.
    fn wait_driver(&mut self, q: usize) -> bool {
        while let Some(d) = self.driver {
            let Some(dev) = self.devices[d].as_mut() else {
                self.promote_driver();
                continue;
            };
            match dev.wait_or_wake(q, rustix::fd::AsFd::as_fd(&*self.wake)) {
                Ok(WaitStatus::Ready) => return true,
                Ok(WaitStatus::Xrun) => {
                    self.stats.xruns.fetch_add(1, Relaxed);
                    self.event(RtEvent::Xrun { device: d });
                    return true;
                }
                Ok(WaitStatus::Woken) => {
                    // Readable, so this read does not block; it re-arms the eventfd.
                    let mut buf = [0u8; 8];
                    let _ = rustix::io::read(&*self.wake, &mut buf);
                    return false;
                }
                Err(error) => {
                    self.retire(Garbage::DeviceError { device: d, error });
                    self.mark_gone(d);
                }
            }
        }
        self.fallback_deadline += q as u64 * 1_000_000_000 / self.rate as u64;
        sleep_until_ns(self.fallback_deadline);
        true
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
    fn retune(&mut self, slot: usize, mut r: Box<Retune>) {
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
        self.follow_freewheel(q);
        let detached = self.detached();
        if detached {
            // Devices added meanwhile keep `needs_start` for the end of the freewheel.
        } else if !self.running {
            self.start_devices(q);
        } else if self.needs_start.contains(&true) {
            for i in 0..self.devices.len() {
                if self.needs_start[i] {
                    self.start_device(i, q);
                }
            }
        }
        if q != self.last_quantum {
            self.clear_outputs_beyond(self.last_quantum, q);
            self.last_quantum = q;
            self.stats.quantum.store(q as u64, Relaxed);
            self.event(RtEvent::Quantum(q));
        }
        if std::mem::take(&mut self.rewind_requested) && !detached {
            self.rewind(q);
            self.discard.fill(false);
        }
        if !detached {
            self.set_driver_fill(q);
            // Before the driver's wait, as if the followers waited with it: a restart's
            // prefill and a grown quantum's silence must cover that wait.
            self.follow_devices(q);
            if !self.wait_driver(q) {
                self.ring_service();
                return true;
            }
        }
        // What arrived during the wait belongs to the audio this cycle renders (a
        // client's rate change has its audio right behind it): apply it now, not a
        // whole cycle later.
        self.apply_messages_up_to(0);
        let mut overdue = false;
        let lateness = self.driver_device().and_then(|d| d.wakeup_lateness_ns());
        if let Some(late) = lateness.filter(|_| !detached) {
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
        self.transport.cycle(q as u32, self.rate, t0 / 1000);
        let cx = CycleInfo {
            frames: q,
            rate: self.rate,
            cycle: self.cycle,
            time_ns: t0,
            position: self.position,
            playback_delay: self.driver_device().map_or(0, |d| d.playback_delay()),
            capture_delay: self.driver_device().map_or(0, |d| d.capture_delay()),
            // As published after the previous cycle: the margin moves seconds apart.
            margin_frames: self.driver.map_or(0, |d| {
                self.stats.devices[d].margin_frames.load(Relaxed) as usize
            }),
            freewheel: detached,
            fill_frames: if detached { 0 } else { self.driver_fill },
        };
        let timed_end = self.process_graph(&cx);
        self.end_freewheel_fade();
        self.first_cycle_of_plan = false;
        self.cycle += 1;
        self.position += q as u64;
        self.queued_until += q as u64;
        // With per-node timing the last node boundary is the end of the cycle's work.
        let end = timed_end.unwrap_or_else(quaver_rt::monotonic_ns);
        if timed_end.is_some() && !detached {
            let period = q as u64 * 1_000_000_000 / self.rate.max(1) as u64;
            self.stage_clock
                .end_cycle(&self.stats.stages, t0, lateness, overdue, end, period);
        }
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
            let Some(d) = d else { continue };
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
            // Freewheeling, they are suspended already.
            if !self.detached() {
                for d in self.devices.iter_mut().flatten() {
                    d.suspend();
                }
            }
            self.running = false;
            self.suspended = true;
            self.stats.suspended.store(true, Relaxed);
            self.event(RtEvent::Suspended);
            // The cycle is over and nothing plays until a stream wakes us: release the
            // devices (see the module docs for why this may block here).
            for i in 0..self.devices.len() {
                self.close_idle(i);
            }
            self.publish_device_counters();
        }
    }

    /// Runs every step of the plan. With per-node timing, returns the clock reading at
    fn block_until_woken(&mut self) {
        let mut buf = [0u8; 8];
        // Blocking read: the eventfd is blocking on this side; the control side writes
        // it after every message. This is the idle state, not the cycle.
        let _ = rustix::io::read(&*self.wake, &mut buf);
    }

    /// Runs cycles until shutdown, suspending while idle; returns the devices (by
    /// index, `None` where there is none) so the control side can close them. Runs on
    /// the engine's real-time thread.
    pub fn run(mut self) -> Vec<Option<Box<dyn Device>>> {
        // An engine whose cycles take longer than their period never sleeps; under
        // RLIMIT_RTTIME that ends the process (see `quaver_rt::rttime`).
        let mut rttime = quaver_rt::RttimeGuard::for_this_process();
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
            if let Some(ran_ns) = rttime.check() {
                self.stats.forced_sleeps.fetch_add(1, Relaxed);
                self.event(RtEvent::ForcedSleep { ran_ns });
            }
        }
        if self.running {
            for d in self.devices.iter_mut().flatten() {
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
