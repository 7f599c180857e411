//! The engine's control API: graph edits, volume, status, start and shutdown.
//!
//! Thread: every method here is for control threads (protocol front-ends, policy, the
//! daemon). Edits lock a control-side mutex that the real-time thread never touches.

use crate::EngineError;
use crate::graph::{Graph, LinkId, NodeId, NodeKind, NodeSpec, PortId};
use crate::node::Processor;
use crate::plan::{NodeSlot, Plan, compile, stopped_nodes};
use crate::rt::{Garbage, MAX_DEVICES, RtEvent, RtRunner, RtStats, ToRt};
use crate::sched::{MemoryLock, RtOutcome, RtThread, Scheduler};
use crate::timing::{NodeTimes, NodeTiming, SlotMark};
use quaver_devices::{Device, DeviceInfo};
use quaver_rt::monotonic_ns;
use rustix::event::{EventfdFlags, eventfd};
use rustix::fd::OwnedFd;
use std::collections::HashSet;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Capacity of the control → RT queue. The RT thread takes every message each cycle
/// (plans included once they back up), so only a stalled RT thread lets it fill; an edit
/// then waits for room ([`SEND_WAIT`]) rather than fail half-done.
const CONTROL_QUEUE: usize = 1024;
/// Longest an edit waits for room in the control queue before it is refused: far more
/// than a cycle at the largest quantum, so only a stuck RT thread gets there.
const SEND_WAIT: Duration = Duration::from_secs(2);
/// Plans that may wait for the RT thread before it catches up. It applies one plan per
/// cycle, so each plan's link fades (computed against the plan before) play out; a
/// burst of edits beyond this (clients loading modules as fast as they can, 32 streams
/// starting within one 341 ms cycle of a default-latency graph) is applied at once
/// instead, trading the fades of links changed in the skipped plans for a backlog that
/// never grows: without it, hundreds of queued plans held every later message (a volume,
/// a shutdown) back for seconds; with a bound that made edits wait instead, the
/// PulseAudio front-end's I/O thread blocked for seconds while 32 clients connected.
pub(crate) const MAX_PENDING_PLANS: u64 = 4;
/// Capacity of the garbage queue; large so the RT thread never has to leak.
const GARBAGE_QUEUE: usize = 8192;
/// Capacity of the event queue; events beyond it are dropped and counted.
const EVENT_QUEUE: usize = 1024;
/// Most ports (inputs plus outputs, reserved ones included) one node may have.
pub const MAX_PORTS_PER_NODE: usize = 4096;

/// Engine settings fixed at start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Smallest quantum a client may ask for, frames.
    pub quantum_min: usize,
    /// Largest quantum, frames; buffers are sized for it.
    pub quantum_max: usize,
    /// Quantum when no stream asks for a latency.
    pub quantum_default: usize,
    /// SCHED_FIFO priority for the RT thread; 0 disables real-time scheduling.
    pub rt_priority: i32,
    /// SCHED_FIFO, or SCHED_DEADLINE with the quantum as period (FIFO if refused).
    pub scheduler: Scheduler,
    /// How much memory to lock against page faults on the RT thread.
    pub lock_memory: MemoryLock,
    /// Idle time before devices suspend; `None` never suspends.
    pub suspend_timeout: Option<Duration>,
    /// Most nodes at once.
    pub max_nodes: usize,
    /// Length of link and volume ramps, frames (capped at one quantum for links).
    pub ramp_frames: usize,
    /// Time every node per cycle ([`crate::timing`]): one clock read per node boundary
    /// on the real-time thread.
    pub node_timing: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            quantum_min: 32,
            quantum_max: 8192,
            quantum_default: 1024,
            rt_priority: 20,
            scheduler: Scheduler::Fifo,
            lock_memory: MemoryLock::Auto,
            suspend_timeout: Some(quaver_devices::DEFAULT_SUSPEND_TIMEOUT),
            max_nodes: 1024,
            ramp_frames: quaver_dsp::volume::DEFAULT_RAMP_FRAMES,
            node_timing: true,
        }
    }
}

/// A device as the engine reports it.
#[derive(Debug, Clone)]
pub struct DeviceStatus {
    /// Static description.
    pub info: DeviceInfo,
    /// Suspended for idleness.
    pub suspended: bool,
    /// Failed and no longer driven.
    pub gone: bool,
    /// Suspended with its handles closed (idle); the next stream reopens it.
    pub closed: bool,
    /// Idle closes so far.
    pub idle_closes: u64,
    /// Reopens after an idle close so far.
    pub reopens: u64,
    /// Driver wakeups.
    pub wakeups: u64,
    /// Hardware-pointer queries.
    pub pointer_queries: u64,
    /// Underruns.
    pub underruns: u64,
    /// Overruns.
    pub overruns: u64,
    /// Frames written.
    pub frames_written: u64,
    /// The safety margin (watermark) in effect, frames; 0 where the device has none.
    pub margin_frames: u64,
    /// How often an adaptive margin changed.
    pub margin_changes: u64,
}

/// A snapshot of the engine's state for `quaver status`.
#[derive(Debug, Clone)]
pub struct EngineStatus {
    /// Sample rate.
    pub rate: u32,
    /// Current quantum.
    pub quantum: usize,
    /// Quantum bounds.
    pub quantum_min: usize,
    /// Quantum bounds.
    pub quantum_max: usize,
    /// Real-time scheduling outcome.
    pub realtime: RtOutcome,
    /// Cycles run.
    pub cycles: u64,
    /// Driver xruns.
    pub xruns: u64,
    /// Last cycle's processing time, ns.
    pub busy_ns_last: u64,
    /// Longest processing time, ns.
    pub busy_ns_max: u64,
    /// Devices.
    pub devices: Vec<DeviceStatus>,
}

/// A change in the graph or device state, for front-ends that notify their clients
/// (e.g. PulseAudio subscriptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphEvent {
    /// A node appeared.
    NodeAdded(NodeId),
    /// A node went away.
    NodeRemoved(NodeId),
    /// A node's volume or mute changed.
    NodeChanged(NodeId),
    /// Links were added or removed.
    LinksChanged,
    /// Devices suspended (true) or resumed (false).
    Suspended(bool),
    /// The device with this index failed or went away; its nodes are marked `gone` and streams linked
    /// to them should move elsewhere (the daemon's policy does that).
    DeviceGone(usize),
}

fn notify(ctl: &mut Control, e: GraphEvent) {
    ctl.watchers.retain(|w| w.send(e).is_ok());
}

struct Control {
    graph: Graph,
    to_rt: rtrb::Producer<ToRt>,
    free_slots: Vec<usize>,
    published: HashSet<(PortId, PortId)>,
    /// The nodes the published plan leaves out ([`stopped_nodes`]).
    stopped: HashSet<NodeId>,
    watchers: Vec<std::sync::mpsc::Sender<GraphEvent>>,
    quantum: usize,
    garbage: rtrb::Consumer<Garbage>,
    events: rtrb::Consumer<RtEvent>,
    /// Devices suspended on request ([`Engine::hold`]).
    held: bool,
}

/// The real-time thread (which hands the devices back) and the service thread.
type EngineThreads = (JoinHandle<Vec<Box<dyn Device>>>, JoinHandle<()>);

struct Shared {
    ctl: Mutex<Control>,
    stats: Arc<RtStats>,
    node_times: Arc<[NodeTimes]>,
    /// When [`Engine::node_timing`] last read, and what it saw per slot.
    timing_marks: Mutex<(u64, Vec<SlotMark>)>,
    wake: Arc<OwnedFd>,
    service_bell: Arc<OwnedFd>,
    config: EngineConfig,
    rate: u32,
    devices: Vec<DeviceInfo>,
    /// Most quanta any device holds between render and playout.
    periods: usize,
    /// Most playback frames the driver can keep queued filling ahead; 0 where it
    /// cannot (or where more than one device shares the clock).
    max_fill: usize,
    realtime: Mutex<RtThread>,
    threads: Mutex<Option<EngineThreads>>,
    stopping: std::sync::atomic::AtomicBool,
}

/// Fade-in after a device starts or resumes: long enough to turn the step out of
/// silence into a ramp no one hears as a click, short enough not to eat a note's attack.
const START_FADE_MS: u64 = 5;

/// Returns freed heap to the kernel. A stream's buffers (a 2 s queue, resampler state,
/// port buffers sized for the largest quantum) are megabytes, and glibc keeps freed
/// memory mapped: after 32 media streams came and went, quaverd stayed at 62 MB RSS
/// (20 MB with this, 5 s after; the rest is the arenas' bookkeeping and caches).
/// Only called when a node was freed, off the real-time thread.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of glibc's own heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A handle to a running engine; clones share it.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

/// Longest [`Engine::hold`] waits for the devices to suspend: a cycle of the largest
/// quantum and then some.
const HOLD_WAIT: Duration = Duration::from_secs(2);

/// The largest power of two at most `frames` (1 for 0).
fn round_pow2(frames: usize) -> usize {
    let f = frames.max(1);
    1usize << (usize::BITS - 1 - f.leading_zeros())
}

/// The largest quantum at most `frames` on the ladder of powers of two and their
/// halfway steps (…, 128, 192, 256, 384, …). Rounding down to a power of two alone can
/// cost up to half the requested latency in extra wakeups: a 5 ms request at 48 kHz
/// (240 frames) ran 128-frame cycles, 375 wakeups/s; 192 frames run 250/s and still fit
/// the request. Every step is a multiple of 16 from 32 up, so buffers stay aligned.
fn round_quantum(frames: usize) -> usize {
    let p = round_pow2(frames);
    if p >= 4 && frames >= p + p / 2 {
        p + p / 2
    } else {
        p
    }
}

impl Engine {
    /// Builds an engine over `devices` (the first one drives the clock) without
    /// starting a thread; tests drive the returned runner cycle by cycle.
    pub fn new_manual(
        mut config: EngineConfig,
        devices: Vec<Box<dyn Device>>,
    ) -> Result<(Engine, RtRunner), EngineError> {
        if devices.is_empty() {
            return Err(EngineError::Config("at least one device is needed".into()));
        }
        if devices.len() > MAX_DEVICES {
            return Err(EngineError::Config(format!(
                "at most {MAX_DEVICES} devices"
            )));
        }
        let c = &config;
        if !(c.quantum_min.is_power_of_two()
            && c.quantum_max.is_power_of_two()
            && c.quantum_min <= c.quantum_default
            && c.quantum_default <= c.quantum_max
            && c.quantum_max <= 65536)
        {
            return Err(EngineError::Config(format!(
                "quantum bounds must be powers of two with min ≤ default ≤ max ≤ 65536 (got {}..{}, default {})",
                c.quantum_min, c.quantum_max, c.quantum_default
            )));
        }
        // A device's ring bounds the quantum (ring = quantum + watermark): never ask it
        // for more, or it would fail and be marked gone.
        if let Some((name, limit)) = devices
            .iter()
            .filter_map(|d| d.max_quantum().map(|m| (d.info().name.clone(), m)))
            .min_by_key(|e| e.1)
        {
            let cap = round_pow2(limit);
            if cap < config.quantum_min {
                return Err(EngineError::Config(format!(
                    "device {name} allows at most {limit} frames per cycle, below quantum_min {}",
                    config.quantum_min
                )));
            }
            if cap < config.quantum_max {
                tracing::info!("device {name} limits the quantum to {cap} frames");
                config.quantum_max = cap;
                config.quantum_default = config.quantum_default.min(cap);
            }
        }
        let rate = devices[0].info().rate;
        if let Some(d) = devices.iter().find(|d| d.info().rate != rate) {
            return Err(EngineError::Config(format!(
                "device {} runs at {} Hz but the driver {} runs at {rate} Hz; one engine has one rate",
                d.info().name,
                d.info().rate,
                devices[0].info().name
            )));
        }
        let infos: Vec<DeviceInfo> = devices.iter().map(|d| d.info().clone()).collect();
        let periods = devices
            .iter()
            .map(|d| d.periods_in_flight())
            .max()
            .unwrap_or(2)
            .max(1);
        // Filling ahead and rewinding need one device: a follower could not be rewound by
        // the same amount. A freewheeling driver has no real time to fill ahead of.
        // A fill no longer than the largest quantum's latency buys nothing; keeping 0
        // then spares every stream the rewind history.
        let max_fill = if devices.len() == 1 && !infos[0].freewheel {
            devices[0].max_fill()
        } else {
            0
        };
        let max_fill = if max_fill > config.quantum_max.saturating_mul(periods) {
            max_fill
        } else {
            0
        };
        let (to_rt, from_ctl) = rtrb::RingBuffer::new(CONTROL_QUEUE);
        let (garbage_tx, garbage) = rtrb::RingBuffer::new(GARBAGE_QUEUE);
        let (events_tx, events) = rtrb::RingBuffer::new(EVENT_QUEUE);
        let io = |e: rustix::io::Errno| EngineError::Io(e.into());
        let wake = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).map_err(io)?);
        let service_bell = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).map_err(io)?);
        let stats = Arc::new(RtStats::default());
        let node_times: Arc<[NodeTimes]> = (0..config.max_nodes)
            .map(|_| NodeTimes::default())
            .collect();
        let freewheel = infos[0].freewheel;
        let followers = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                if i == 0 {
                    return Ok(None);
                }
                crate::follow::Follower::new(
                    rate,
                    info.playback.as_ref().map(|c| c.len()),
                    info.capture.as_ref().map(|c| c.len()),
                    config.quantum_max,
                )
                .map(Some)
                .map_err(|e| {
                    EngineError::Config(format!("device {}: rate matching: {e}", info.name))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let runner = RtRunner {
            slots: (0..config.max_nodes).map(|_| None).collect(),
            plan: Box::new(Plan {
                quantum: config.quantum_default,
                ..Plan::default()
            }),
            devices,
            followers,
            gone: [false; MAX_DEVICES],
            closed: [false; MAX_DEVICES],
            start_fades: std::array::from_fn(|_| quaver_dsp::volume::GainRamp::new(1.0)),
            start_fade_frames: (rate as u64 * START_FADE_MS / 1000).max(1) as usize,
            from_ctl,
            garbage: garbage_tx,
            events: events_tx,
            service_bell: service_bell.clone(),
            wake: wake.clone(),
            stats: stats.clone(),
            node_times: node_times.clone(),
            node_timing: config.node_timing,
            rate,
            ramp_frames: config.ramp_frames.max(1),
            // A freewheeling driver has no real time to wait out: suspend at once.
            suspend_after_frames: if freewheel {
                Some(0)
            } else {
                config
                    .suspend_timeout
                    .map(|t| (t.as_secs_f64() * rate as f64) as u64)
            },
            freewheel,
            cycle: 0,
            position: 0,
            queued_until: 0,
            pending: Vec::with_capacity(config.max_nodes),
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
            discard: vec![false; config.max_nodes],
        };
        let ctl = Control {
            graph: Graph::default(),
            to_rt,
            free_slots: (0..config.max_nodes).rev().collect(),
            published: HashSet::new(),
            stopped: HashSet::new(),
            watchers: Vec::new(),
            quantum: config.quantum_default,
            garbage,
            events,
            held: false,
        };
        let engine = Engine {
            shared: Arc::new(Shared {
                ctl: Mutex::new(ctl),
                stats,
                timing_marks: Mutex::new((
                    monotonic_ns(),
                    vec![SlotMark::default(); config.max_nodes],
                )),
                node_times,
                wake,
                service_bell,
                config,
                rate,
                devices: infos.clone(),
                periods,
                max_fill,
                realtime: Mutex::new(RtThread {
                    outcome: RtOutcome::Disabled,
                    tid: None,
                }),
                threads: Mutex::new(None),
                stopping: false.into(),
            }),
        };
        let mut specs = Vec::new();
        for (i, info) in infos.iter().enumerate() {
            if let Some(map) = &info.playback {
                let mut s = NodeSpec::new(&format!("{}-sink", info.name), NodeKind::DeviceSink);
                s.description = info.description.clone();
                s.inputs = map.clone();
                s.outputs = map.clone();
                s.device = Some(i);
                specs.push(s);
            }
            if let Some(map) = &info.capture {
                let mut s = NodeSpec::new(&format!("{}-source", info.name), NodeKind::DeviceSource);
                s.description = info.description.clone();
                s.outputs = map.clone();
                s.device = Some(i);
                specs.push(s);
            }
        }
        engine.add_device_nodes(specs)?;
        Ok((engine, runner))
    }

    /// Adds every device node in one plan, so the first cycle already reads every
    /// capture side and writes every playback side: a duplex card whose sides started
    /// a cycle apart would carry an extra quantum of round-trip latency for good.
    fn add_device_nodes(&self, specs: Vec<NodeSpec>) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let mut ids = HashSet::new();
        for spec in specs {
            let slot = ctl
                .free_slots
                .pop()
                .ok_or_else(|| EngineError::TooMany("node limit reached by device nodes".into()))?;
            let node = Box::new(NodeSlot::new(
                None,
                spec.inputs.len(),
                spec.outputs.len(),
                self.shared.config.quantum_max,
                spec.volume,
                spec.kind,
            ));
            ids.insert(ctl.graph.add_node(&spec, slot));
            self.send(&mut ctl, ToRt::AddNode { slot, node })?;
        }
        self.publish_with_new(&mut ctl, &ids)
    }

    /// Builds an engine and starts its real-time and service threads.
    pub fn start(
        config: EngineConfig,
        devices: Vec<Box<dyn Device>>,
    ) -> Result<Engine, EngineError> {
        let req = quaver_rt::Request {
            scheduler: config.scheduler,
            priority: config.rt_priority,
            period: None,
            rtkit: true,
        };
        let lock = crate::sched::lock_memory(config.lock_memory);
        let (engine, runner) = Engine::new_manual(config, devices)?;
        let (rt, tid, stack) = quaver_rt::spawn("quaver-rt".into(), lock, move || runner.run())
            .map_err(EngineError::Io)?;
        if let Some(why) = stack {
            tracing::warn!("{why}");
        }
        let period = crate::sched::period(engine.quantum(), engine.shared.rate);
        let req = quaver_rt::Request {
            period: Some(period),
            ..req
        };
        *engine.shared.realtime.lock().expect("poisoned") = RtThread {
            outcome: crate::sched::promote(tid, &req),
            tid: Some(tid),
        };
        let svc = engine.clone();
        let service = std::thread::Builder::new()
            .name("quaver-service".into())
            .spawn(move || svc.service_loop())
            .map_err(EngineError::Io)?;
        *engine.shared.threads.lock().expect("poisoned") = Some((rt, service));
        Ok(engine)
    }

    fn service_loop(&self) {
        let mut buf = [0u8; 8];
        loop {
            // Blocks until the RT thread rings: no periodic wakeups while idle.
            let _ = rustix::io::read(&*self.shared.service_bell, &mut buf);
            self.collect();
            if self.shared.stopping.load(Relaxed) {
                return;
            }
        }
    }

    /// Frees retired objects and logs RT events. Called by the service thread, and by
    /// tests that drive the runner by hand.
    pub fn collect(&self) -> Vec<RtEvent> {
        let mut ctl = self.lock();
        let mut nodes_freed = false;
        while let Ok(g) = ctl.garbage.pop() {
            nodes_freed |= matches!(g, Garbage::Node(_));
            self.dispose(g);
        }
        if nodes_freed {
            give_back_freed_memory();
        }
        let mut out = Vec::new();
        while let Ok(e) = ctl.events.pop() {
            match e {
                RtEvent::Xrun { device } => {
                    tracing::warn!("xrun on device {}", self.shared.devices[device].name)
                }
                RtEvent::DeviceGone { device } => {
                    tracing::error!(
                        "device {} failed and is no longer driven",
                        self.shared.devices[device].name
                    );
                    for n in ctl.graph.nodes.values_mut() {
                        if n.device == Some(device) {
                            n.gone = true;
                        }
                    }
                    notify(&mut ctl, GraphEvent::DeviceGone(device));
                }
                RtEvent::Suspended => {
                    tracing::debug!("devices suspended (idle)");
                    notify(&mut ctl, GraphEvent::Suspended(true));
                }
                RtEvent::Resumed => {
                    tracing::debug!("devices resumed");
                    notify(&mut ctl, GraphEvent::Suspended(false));
                }
                RtEvent::Quantum(q) => {
                    tracing::debug!("quantum is now {q} frames");
                    let (rate, prio) = (self.shared.rate, self.shared.config.rt_priority);
                    crate::sched::quantum_changed(&self.shared.realtime, q, rate, prio);
                }
                RtEvent::Margin { device, frames } => tracing::debug!(
                    "device {}: safety margin now {frames} frames ({:.1} ms)",
                    self.shared.devices[device].name,
                    frames as f64 * 1000.0 / self.shared.rate as f64
                ),
                RtEvent::DeviceClosed { device } => {
                    tracing::info!("device {} closed (idle)", self.shared.devices[device].name)
                }
                RtEvent::DeviceReopened { device } => {
                    tracing::info!("device {} reopened", self.shared.devices[device].name)
                }
            }
            out.push(e);
        }
        out
    }

    fn lock(&self) -> MutexGuard<'_, Control> {
        self.shared
            .ctl
            .lock()
            .expect("engine control mutex poisoned")
    }

    /// Frees an object the RT thread retired; a device error is logged first.
    fn dispose(&self, g: Garbage) {
        if let Garbage::DeviceError { device, error } = &g {
            tracing::error!("device {}: {error}", self.shared.devices[*device].name);
        }
        drop(g);
    }

    fn send(&self, ctl: &mut Control, msg: ToRt) -> Result<(), EngineError> {
        // Why wait instead of refusing: an edit is several messages (a node, then the
        // plan that uses it; a plan, then the node's removal), and one refused half-way
        // would leave the control graph and the RT thread disagreeing (a node the RT
        // thread runs that the graph forgot, a slot never freed). Room comes within a
        // cycle: the RT thread takes every message each cycle, and every plan once more
        // than MAX_PENDING_PLANS wait.
        let t0 = std::time::Instant::now();
        let is_plan = matches!(msg, ToRt::Plan(_));
        let mut msg = msg;
        loop {
            // Free what the RT thread handed back first, so queues never fill up.
            while let Ok(g) = ctl.garbage.pop() {
                self.dispose(g);
            }
            match ctl.to_rt.push(msg) {
                Ok(()) => break,
                Err(rtrb::PushError::Full(m)) => {
                    if t0.elapsed() > SEND_WAIT {
                        return Err(EngineError::Busy(
                            "the real-time thread is not keeping up".into(),
                        ));
                    }
                    msg = m;
                    let _ = rustix::io::write(&*self.shared.wake, &1u64.to_ne_bytes());
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
        }
        if is_plan {
            // After the push: the RT thread never sees more plans counted than queued.
            self.shared.stats.plans_sent.fetch_add(1, Release);
        }
        let _ = rustix::io::write(&*self.shared.wake, &1u64.to_ne_bytes());
        Ok(())
    }

    /// Suspends the devices on request (`on`), streams or not, until released: what
    /// PulseAudio's SUSPEND_SINK does (`pasuspender` frees a card for a program that
    /// opens it directly). The devices share one clock, so they suspend together; the
    /// streams wait, nothing of theirs is lost. While held, idle suspend and resume
    /// change nothing; released, the devices resume if streams exist.
    ///
    /// A hold returns once the devices are suspended (at the end of the cycle running
    /// now), so a program started next finds the card free, or after `HOLD_WAIT` at most;
    /// the result says whether they are suspended.
    pub fn hold(&self, on: bool) -> Result<bool, EngineError> {
        {
            let mut ctl = self.lock();
            if ctl.held != on {
                ctl.held = on;
                self.publish(&mut ctl)?;
            }
        }
        let suspended = || self.shared.stats.suspended.load(Relaxed);
        if on {
            let t0 = std::time::Instant::now();
            while !suspended() && t0.elapsed() < HOLD_WAIT {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(suspended())
    }

    /// Whether the devices are held suspended ([`Engine::hold`]).
    pub fn held(&self) -> bool {
        self.lock().held
    }

    /// Suspends or resumes one node that is not a device (a virtual sink or source):
    /// it stops running, and so do the nodes that only feed it or are only fed by it
    /// (its streams stop being read, its monitor's recorders get nothing), while the
    /// devices and every other node go on. Returns whether anything changed.
    pub fn suspend_node(&self, node: NodeId, on: bool) -> Result<bool, EngineError> {
        let mut ctl = self.lock();
        let n = ctl.graph.node_mut(node)?;
        if n.device.is_some() {
            // A device stops with its clock: that is `hold`.
            return Err(EngineError::Invalid(format!(
                "{} is a device; devices suspend together",
                n.name
            )));
        }
        if n.suspended == on {
            return Ok(false);
        }
        n.suspended = on;
        self.publish(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        Ok(true)
    }

    /// The quantum a node asking for `latency` frames gets on its own: the latency
    /// divided by the quanta the devices hold in flight (two on a double-buffered card:
    /// one plays while the next is filled; one on the null sink), rounded down to a
    /// power of two or the step halfway to the next one, within the configured bounds.
    pub fn quantum_for_latency(&self, latency: usize) -> usize {
        let c = &self.shared.config;
        round_quantum(latency / self.shared.periods).clamp(c.quantum_min, c.quantum_max)
    }

    /// The latency request that makes `quantum` (the inverse of
    /// [`Engine::quantum_for_latency`] for quanta on its ladder within the bounds); also the
    /// device latency a graph running at `quantum` has.
    pub fn latency_for_quantum(&self, quantum: usize) -> usize {
        quantum.saturating_mul(self.shared.periods)
    }

    /// The device latency a node asking for `latency` frames gets on its own: the
    /// quantum's ([`Engine::latency_for_quantum`]), or, where the device can fill ahead,
    /// up to `latency` itself (capped by the device's buffer) when that is longer.
    pub fn granted_latency(&self, latency: usize) -> usize {
        let base = self.latency_for_quantum(self.quantum_for_latency(latency));
        if self.shared.max_fill > base && latency > base {
            latency.min(self.shared.max_fill)
        } else {
            base
        }
    }

    /// Frames of output a playback node should keep to support rewinds
    /// ([`crate::node::Processor::rewind`]): the most the device can have queued; 0 when
    /// this engine never fills ahead.
    pub fn rewind_capacity(&self) -> usize {
        self.shared.max_fill
    }

    /// Asks the real-time thread to take back the device's queued playback and render
    /// it again, so a change made outside the graph (a stream paused or resumed by its
    /// client) is heard at once. Does nothing unless the device is filling ahead.
    pub fn rewind(&self) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        self.request_rewind(&mut ctl)
    }

    /// Like [`Engine::rewind`], for a stream whose queued audio was dropped (a flush):
    /// what the device takes back of `node`'s output is not played again, so a seek is
    /// heard at once instead of after the device's queue.
    pub fn rewind_flushed(&self, node: NodeId) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        self.request_rewind_of(&mut ctl, Some(node))
    }

    fn request_rewind(&self, ctl: &mut Control) -> Result<(), EngineError> {
        self.request_rewind_of(ctl, None)
    }

    /// Sends a rewind request (nothing where the device never fills ahead); `flushed`
    /// names a node whose taken-back output is dropped instead of played again.
    fn request_rewind_of(
        &self,
        ctl: &mut Control,
        flushed: Option<NodeId>,
    ) -> Result<(), EngineError> {
        if self.shared.max_fill == 0 {
            return Ok(());
        }
        let discard = flushed
            .map(|id| {
                ctl.graph
                    .nodes
                    .get(&id)
                    .map(|n| n.slot)
                    .ok_or_else(|| EngineError::NoSuchNode(id.to_string()))
            })
            .transpose()?;
        self.send(ctl, ToRt::Rewind { discard })
    }

    /// How far the driver fills ahead for `graph` at `quantum`: the smallest latency
    /// any node asks for, when that is beyond what the quantum gives and only playback
    /// streams use the graph. Record streams, filters and playback streams fed from the
    /// graph (a loopback) keep one quantum per wakeup: capture is read in bursts while
    /// filling ahead, and what is computed from other nodes cannot be rewound.
    fn fill_for(&self, graph: &Graph, stopped: &HashSet<NodeId>, quantum: usize) -> usize {
        if self.shared.max_fill == 0 {
            return 0;
        }
        // What a suspended sink holds does not run, so it limits nothing.
        let running = || graph.nodes.values().filter(|n| !stopped.contains(&n.id));
        if running().any(|n| {
            matches!(n.kind, NodeKind::RecordStream | NodeKind::Filter)
                || (n.kind == NodeKind::PlaybackStream && !n.inputs.is_empty())
        }) {
            return 0;
        }
        let Some(latency) = running().filter_map(|n| n.latency_frames).min() else {
            return 0;
        };
        let fill = (latency as usize).min(self.shared.max_fill);
        if fill > self.latency_for_quantum(quantum) {
            fill
        } else {
            0
        }
    }

    fn quantum_for(&self, graph: &Graph, stopped: &HashSet<NodeId>) -> usize {
        // A stream held by a suspended sink asks nothing of the running graph.
        let running = || graph.nodes.values().filter(|n| !stopped.contains(&n.id));
        let q = running()
            .filter_map(|n| n.latency_frames)
            .map(|l| self.quantum_for_latency(l as usize))
            .min()
            .unwrap_or_else(|| {
                let c = &self.shared.config;
                c.quantum_default.clamp(c.quantum_min, c.quantum_max)
            });
        // The bounds are powers of two, so rounding down stays within them.
        if running().any(|n| n.pow2_quantum) {
            round_pow2(q)
        } else {
            q
        }
    }

    fn publish(&self, ctl: &mut Control) -> Result<(), EngineError> {
        self.publish_with_new(ctl, &HashSet::new())
    }

    fn publish_with_new(
        &self,
        ctl: &mut Control,
        new_nodes: &HashSet<NodeId>,
    ) -> Result<(), EngineError> {
        let stopped = stopped_nodes(&ctl.graph);
        ctl.quantum = self.quantum_for(&ctl.graph, &stopped);
        let (mut plan, current) = compile(
            &ctl.graph,
            &stopped,
            &ctl.stopped,
            ctl.quantum,
            &ctl.published,
            new_nodes,
        );
        plan.fill = self.fill_for(&ctl.graph, &stopped, ctl.quantum);
        plan.held = ctl.held;
        ctl.published = current;
        ctl.stopped = stopped;
        self.send(ctl, ToRt::Plan(Box::new(plan)))
    }

    /// Adds a node; `processor` is None only for device nodes. Returns its id.
    pub fn add_node(
        &self,
        spec: NodeSpec,
        processor: Option<Box<dyn Processor>>,
    ) -> Result<NodeId, EngineError> {
        self.add_node_linked(spec, processor, None)
    }

    /// Adds a node and, in the same plan, links it with `target` (its outputs to the
    /// target's inputs, or the target's outputs to its inputs for a node without
    /// outputs). Its links start at full gain: the new node's first sample is its start.
    /// On any error nothing changes.
    pub fn add_node_linked(
        &self,
        spec: NodeSpec,
        processor: Option<Box<dyn Processor>>,
        target: Option<&str>,
    ) -> Result<NodeId, EngineError> {
        if spec.name.is_empty() || spec.name.contains(':') || spec.name.len() > 128 {
            return Err(EngineError::Invalid(format!(
                "node name '{}' must be 1–128 characters without ':'",
                spec.name
            )));
        }
        if processor.is_none() && spec.device.is_none() {
            return Err(EngineError::Invalid("a node needs a processor".into()));
        }
        let mut ctl = self.lock();
        let slot = ctl.free_slots.pop().ok_or_else(|| {
            EngineError::TooMany(format!(
                "node limit of {} reached",
                self.shared.config.max_nodes
            ))
        })?;
        if spec.input_capacity() + spec.output_capacity() > MAX_PORTS_PER_NODE {
            return Err(EngineError::TooMany(format!(
                "a node may have at most {MAX_PORTS_PER_NODE} ports"
            )));
        }
        for n in spec.input_names.iter().chain(&spec.output_names) {
            Graph::check_port_name(n)?;
        }
        let node = Box::new(NodeSlot::new(
            processor,
            spec.input_capacity(),
            spec.output_capacity(),
            self.shared.config.quantum_max,
            spec.volume,
            spec.kind,
        ));
        let id = ctl.graph.add_node(&spec, slot);
        if let Some(t) = target {
            let name = ctl.graph.nodes[&id].name.clone();
            let linked = if spec.outputs.is_empty() {
                ctl.graph.link_pairs(t, &name)
            } else {
                ctl.graph.link_pairs(&name, t)
            }
            .and_then(|pairs| ctl.graph.add_links(&pairs));
            if let Err(e) = linked {
                ctl.graph.remove_node(id);
                ctl.free_slots.push(slot);
                return Err(e);
            }
        }
        if let Err(e) = self.send(&mut ctl, ToRt::AddNode { slot, node }) {
            ctl.graph.remove_node(id);
            ctl.free_slots.push(slot);
            return Err(e);
        }
        self.publish_with_new(&mut ctl, &HashSet::from([id]))?;
        // The new node is heard after the watermark, not after what is queued.
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeAdded(id));
        if target.is_some() {
            notify(&mut ctl, GraphEvent::LinksChanged);
        }
        Ok(id)
    }

    /// Removes a node and its links.
    pub fn remove_node(&self, id: NodeId) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let node = ctl
            .graph
            .remove_node(id)
            .ok_or_else(|| EngineError::NoSuchNode(id.to_string()))?;
        self.publish(&mut ctl)?;
        self.send(&mut ctl, ToRt::RemoveNode { slot: node.slot })?;
        ctl.free_slots.push(node.slot);
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeRemoved(id));
        Ok(())
    }

    /// Hands a stream node the rate converter its client's new rate needs (built on the
    /// calling thread: [`crate::stream::Retune`]); the node swaps it in at its next
    /// cycle and the old one is freed here later. For rate moves beyond what the
    /// node's converter can follow by itself ([`crate::stream::MAX_RATE_CHANGE`]).
    pub fn retune(&self, node: NodeId, r: crate::stream::Retune) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let slot = ctl
            .graph
            .nodes
            .get(&node)
            .ok_or_else(|| EngineError::NoSuchNode(node.to_string()))?
            .slot;
        self.send(
            &mut ctl,
            ToRt::Retune {
                slot,
                retune: Box::new(r),
            },
        )
    }

    /// Changes how long the devices may be idle before they suspend (`None`: never),
    /// as loading and unloading PulseAudio's module-suspend-on-idle do. A freewheeling
    /// engine keeps suspending at once.
    pub fn set_suspend_timeout(&self, timeout: Option<Duration>) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let frames = timeout.map(|t| (t.as_secs_f64() * self.shared.rate as f64) as u64);
        self.send(&mut ctl, ToRt::SuspendAfter(frames))
    }

    /// Adds a port to a node created with room for it (`NodeSpec::max_inputs` /
    /// `max_outputs`); returns its id. Its buffer index is the lowest free one.
    pub fn add_port(
        &self,
        node: NodeId,
        direction: crate::graph::Direction,
        name: Option<&str>,
        channel: quaver_dsp::ChannelPosition,
    ) -> Result<PortId, EngineError> {
        let mut ctl = self.lock();
        let id = ctl.graph.add_port(node, direction, name, channel)?;
        if let Err(e) = self.publish(&mut ctl) {
            let _ = ctl.graph.remove_port(node, id);
            return Err(e);
        }
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        Ok(id)
    }

    /// Removes a port of `node` and its links.
    pub fn remove_port(&self, node: NodeId, port: PortId) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let had_links = ctl
            .graph
            .links
            .values()
            .any(|l| l.output == port || l.input == port);
        ctl.graph.remove_port(node, port)?;
        self.publish(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        if had_links {
            notify(&mut ctl, GraphEvent::LinksChanged);
        }
        Ok(())
    }

    /// Changes the latency a node asks for (frames at the engine rate; `None` for no
    /// request). The quantum follows with the next plan.
    pub fn set_latency(&self, node: NodeId, frames: Option<u32>) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let n = ctl.graph.node_mut(node)?;
        if n.latency_frames == frames {
            return Ok(());
        }
        n.latency_frames = frames;
        self.publish(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        Ok(())
    }

    /// Links `output` to `input` ("node" or "node:port" on each side).
    pub fn link(&self, output: &str, input: &str) -> Result<Vec<LinkId>, EngineError> {
        let mut ctl = self.lock();
        let pairs = ctl.graph.link_pairs(output, input)?;
        let ids = ctl.graph.add_links(&pairs)?;
        self.publish(&mut ctl)?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::LinksChanged);
        Ok(ids)
    }

    /// Moves a node from one peer to another in a single plan, so the old links fade
    /// out while the new ones fade in within the same cycle (no gap, no double play).
    /// A node with outputs is moved between sinks (its output links), a node with only
    /// inputs between sources. `from` limits which peer it leaves; `None` means all.
    /// On error nothing changes.
    pub fn relink(&self, node: &str, from: Option<&str>, to: &str) -> Result<(), EngineError> {
        self.relink_side(node, from, to, None)
    }

    /// Like [`Engine::relink`] for the input side of a node that has outputs too (a
    /// loopback moved to another source).
    pub fn relink_inputs(
        &self,
        node: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<(), EngineError> {
        self.relink_side(node, from, to, Some(false))
    }

    /// [`Engine::relink`] on the output side (`outward`), the input side, or (`None`)
    /// the output side of a node that has outputs, else its input side.
    fn relink_side(
        &self,
        node: &str,
        from: Option<&str>,
        to: &str,
        outward: Option<bool>,
    ) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let backup = ctl.graph.clone();
        let result = (|| {
            let g = &mut ctl.graph;
            let (id, _) = g.resolve(node)?;
            let from_id = from.map(|f| g.resolve(f).map(|r| r.0)).transpose()?;
            let n = &g.nodes[&id];
            let outward = outward.unwrap_or(!n.outputs.is_empty());
            let mine: HashSet<PortId> = if outward {
                n.outputs.iter().copied().collect()
            } else {
                n.inputs.iter().copied().collect()
            };
            let ports = g.ports.clone();
            g.links.retain(|_, l| {
                let (own, peer) = if outward {
                    (l.output, l.input)
                } else {
                    (l.input, l.output)
                };
                !(mine.contains(&own) && from_id.is_none_or(|f| ports[&peer].node == f))
            });
            let name = g.nodes[&id].name.clone();
            let pairs = if outward {
                g.link_pairs(&name, to)?
            } else {
                g.link_pairs(to, &name)?
            };
            g.add_links(&pairs)?;
            Ok(())
        })();
        if let Err(e) = result {
            ctl.graph = backup;
            return Err(e);
        }
        self.publish(&mut ctl)?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::LinksChanged);
        Ok(())
    }

    /// Removes links between `output` and `input`; returns how many.
    pub fn unlink(&self, output: &str, input: &str) -> Result<usize, EngineError> {
        let mut ctl = self.lock();
        let n = ctl.graph.unlink(output, input)?;
        self.publish(&mut ctl)?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::LinksChanged);
        Ok(n)
    }

    /// Sets a node's linear volume and/or mute, ramped.
    pub fn set_volume(
        &self,
        node: &str,
        volume: Option<f32>,
        mute: Option<bool>,
    ) -> Result<(), EngineError> {
        if let Some(v) = volume
            && !(v.is_finite() && (0.0..=10.0).contains(&v))
        {
            return Err(EngineError::Invalid(format!(
                "volume {v} is outside 0..=10"
            )));
        }
        let mut ctl = self.lock();
        let (id, _) = ctl.graph.resolve(node)?;
        let n = ctl.graph.nodes.get_mut(&id).expect("resolved");
        if let Some(v) = volume {
            n.volume = v;
        }
        if let Some(m) = mute {
            n.mute = m;
        }
        let gain = if n.mute { 0.0 } else { n.volume };
        let slot = n.slot;
        let ramp = self.shared.config.ramp_frames;
        self.send(&mut ctl, ToRt::Volume { slot, gain, ramp })?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(id));
        Ok(())
    }

    /// A channel that receives every later graph and device change, in order. Events
    /// are sent from control threads; a dropped receiver is forgotten.
    pub fn subscribe(&self) -> std::sync::mpsc::Receiver<GraphEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.lock().watchers.push(tx);
        rx
    }

    /// A copy of the graph description.
    pub fn graph(&self) -> Graph {
        self.lock().graph.clone()
    }

    /// Runs `f` on the graph description without copying it (under the control lock:
    /// keep `f` short, and do not call back into the engine from it).
    pub fn inspect<R>(&self, f: impl FnOnce(&Graph) -> R) -> R {
        f(&self.lock().graph)
    }

    /// The name of node `id`, if it exists.
    pub fn node_name(&self, id: NodeId) -> Option<String> {
        self.lock().graph.nodes.get(&id).map(|n| n.name.clone())
    }

    /// The engine's sample rate.
    pub fn rate(&self) -> u32 {
        self.shared.rate
    }

    /// The quantum of the latest published plan.
    pub fn quantum(&self) -> usize {
        self.lock().quantum
    }

    /// The configuration the engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Static descriptions of the devices, in engine order.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.shared.devices
    }

    /// Counters and state for `quaver status`.
    pub fn status(&self) -> EngineStatus {
        let s = &self.shared.stats;
        let suspended = s.suspended.load(Relaxed);
        EngineStatus {
            rate: self.shared.rate,
            quantum: self.quantum(),
            quantum_min: self.shared.config.quantum_min,
            quantum_max: self.shared.config.quantum_max,
            realtime: self
                .shared
                .realtime
                .lock()
                .expect("poisoned")
                .outcome
                .clone(),
            cycles: s.cycles.load(Relaxed),
            xruns: s.xruns.load(Relaxed),
            busy_ns_last: s.busy_ns_last.load(Relaxed),
            busy_ns_max: s.busy_ns_max.load(Relaxed),
            devices: self
                .shared
                .devices
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    let d = &s.devices[i];
                    DeviceStatus {
                        info: info.clone(),
                        suspended,
                        gone: d.gone.load(Relaxed),
                        closed: d.closed.load(Relaxed),
                        idle_closes: d.idle_closes.load(Relaxed),
                        reopens: d.reopens.load(Relaxed),
                        wakeups: d.wakeups.load(Relaxed),
                        pointer_queries: d.pointer_queries.load(Relaxed),
                        underruns: d.underruns.load(Relaxed),
                        overruns: d.overruns.load(Relaxed),
                        frames_written: d.frames_written.load(Relaxed),
                        margin_frames: d.margin_frames.load(Relaxed),
                        margin_changes: d.margin_changes.load(Relaxed),
                    }
                })
                .collect(),
        }
    }

    /// Every node's timing over the interval since the previous call (by any caller):
    /// wait, busy and RT-thread time per cycle (means and maxima), xruns. Nodes in
    /// graph order (by id). Empty figures when node timing is off.
    pub fn node_timing(&self) -> Vec<NodeTiming> {
        let (nodes, quantum) = {
            let ctl = self.lock();
            let nodes: Vec<_> = ctl
                .graph
                .nodes
                .values()
                .map(|n| {
                    (
                        n.id,
                        n.name.clone(),
                        n.kind,
                        n.device,
                        n.slot,
                        n.latency_frames,
                    )
                })
                .collect();
            (nodes, ctl.quantum)
        };
        let s = &self.shared.stats;
        let quantum = match s.quantum.load(Relaxed) {
            0 => quantum,
            q => q as usize,
        };
        let now = monotonic_ns();
        let mut marks = self.shared.timing_marks.lock().expect("poisoned");
        let interval_ns = now.saturating_sub(marks.0);
        marks.0 = now;
        nodes
            .into_iter()
            .map(|(id, name, kind, device, slot, latency)| {
                let t = &self.shared.node_times[slot];
                let samples = t.samples.load(Relaxed);
                let wait_total = t.wait_total.load(Relaxed);
                let busy_total = t.busy_total.load(Relaxed);
                let rt_total = t.rt_total.load(Relaxed);
                // A slot taken over by another node, or reset since: start from zero.
                let prev = match marks.1[slot] {
                    m if m.node == Some(id) && m.samples <= samples => m,
                    _ => SlotMark::default(),
                };
                marks.1[slot] = SlotMark {
                    node: Some(id),
                    samples,
                    wait_total,
                    busy_total,
                    rt_total,
                };
                let cycles = samples - prev.samples;
                let avg = |total: u64, before: u64, last: u64| {
                    total
                        .saturating_sub(before)
                        .checked_div(cycles)
                        .unwrap_or(last)
                };
                let busy_last = t.busy_last.load(Relaxed);
                let device_xruns = device.map(|d| {
                    let d = &s.devices[d];
                    match kind {
                        NodeKind::DeviceSource => d.overruns.load(Relaxed),
                        _ => d.underruns.load(Relaxed),
                    }
                });
                NodeTiming {
                    id,
                    name,
                    kind,
                    device,
                    quantum,
                    quantum_requested: latency.map(|l| self.quantum_for_latency(l as usize)),
                    rate: self.shared.rate,
                    cycles,
                    cycles_total: samples,
                    wait_avg_ns: avg(wait_total, prev.wait_total, t.wait_last.load(Relaxed)),
                    wait_max_ns: t.wait_max.swap(0, Relaxed),
                    busy_avg_ns: avg(busy_total, prev.busy_total, busy_last),
                    busy_max_ns: t.busy_max.swap(0, Relaxed),
                    rt_avg_ns: rt_total
                        .saturating_sub(prev.rt_total)
                        .checked_div(cycles)
                        .unwrap_or(0),
                    rt_max_ns: t.rt_max.swap(0, Relaxed),
                    xruns: device_xruns.unwrap_or_else(|| t.xruns.load(Relaxed)),
                    interval_ns,
                }
            })
            .collect()
    }

    /// The RT thread's raw counters.
    pub fn stats(&self) -> &RtStats {
        &self.shared.stats
    }

    /// Stops the threads and closes every device (finalizing files). Other handles
    /// become inert. Returns the first close error, if any.
    pub fn shutdown(&self) -> Result<(), EngineError> {
        let Some((rt, service)) = self.shared.threads.lock().expect("poisoned").take() else {
            return Ok(());
        };
        {
            let mut ctl = self.lock();
            let _ = self.send(&mut ctl, ToRt::Shutdown);
        }
        let devices = rt
            .join()
            .map_err(|_| EngineError::Config("real-time thread panicked".into()))?;
        self.shared.stopping.store(true, Relaxed);
        let _ = rustix::io::write(&*self.shared.service_bell, &1u64.to_ne_bytes());
        let _ = service.join();
        self.collect();
        close_all(devices)
    }

    /// Ends a manual engine: closes the runner's devices after freeing its objects.
    pub fn shutdown_manual(&self, runner: RtRunner) -> Result<(), EngineError> {
        {
            let mut ctl = self.lock();
            let _ = self.send(&mut ctl, ToRt::Shutdown);
        }
        let devices = runner.run();
        self.collect();
        close_all(devices)
    }
}

fn close_all(devices: Vec<Box<dyn Device>>) -> Result<(), EngineError> {
    let mut first = Ok(());
    for mut d in devices {
        if let Err(e) = d.close() {
            tracing::error!("closing {}: {e}", d.info().name);
            if first.is_ok() {
                first = Err(EngineError::Device(e));
            }
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::{round_pow2, round_quantum};

    #[test]
    fn quantum_rounds_down_to_a_power_of_two_or_the_step_halfway() {
        assert_eq!(round_quantum(960), 768);
        assert_eq!(round_quantum(767), 512);
        assert_eq!(round_quantum(1024), 1024);
        assert_eq!(round_quantum(240), 192);
        assert_eq!(round_quantum(191), 128);
        assert_eq!(round_quantum(3), 2);
        assert_eq!(round_quantum(6), 6);
        assert_eq!(round_quantum(0), 1);
        assert_eq!(round_pow2(960), 512);
        assert_eq!(round_pow2(192), 128);
    }
}
