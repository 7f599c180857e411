//! Building and starting an engine (its real-time and service threads), the service
//! thread's work, and shutdown.

use crate::EngineError;
use crate::engine::config::EngineConfig;
use crate::engine::handle::{Control, Engine, Shared, notify, round_pow2};
use crate::engine::report::{GraphEvent, SlotMark};
use crate::graph::{Graph, NodeId, NodeKind, NodeSpec};
use crate::rt::follow::Follower;
use crate::rt::msg::{Garbage, RtEvent, ToRt};
use crate::rt::plan::NodeSlot;
use crate::rt::runner::{RtLinks, RtRunner, RtSettings};
use crate::rt::sched::{RtOutcome, RtThread};
use crate::rt::stats::{MAX_DEVICES, RtStats};
use crate::rt::timing::NodeTimes;
use quaver_devices::{Device, DeviceInfo};
use quaver_rt::monotonic_ns;
use rustix::event::{EventfdFlags, eventfd};
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

/// Capacity of the control → RT queue. The RT thread takes every message each cycle
/// (plans included once they back up), so only a stalled RT thread lets it fill; an edit
/// then waits for room ([`SEND_WAIT`]) rather than fail half-done.
const CONTROL_QUEUE: usize = 1024;
/// Capacity of the garbage queue; large so the RT thread never has to leak.
const GARBAGE_QUEUE: usize = 8192;
/// Capacity of the event queue; events beyond it are dropped and counted.
const EVENT_QUEUE: usize = 1024;

/// Fade-in after a device starts or resumes: long enough to turn the step out of
/// silence into a ramp no one hears as a click, short enough not to eat a note's attack.
const START_FADE_MS: u64 = 5;

/// Returns freed heap to the kernel: a stream's buffers are megabytes and glibc keeps
/// freed memory mapped. Only called when a node was freed, off the real-time thread.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of glibc's own heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl Engine {
    /// Builds an engine over `devices` (the first one drives the clock) without
    /// starting a thread; tests drive the returned runner cycle by cycle.
    pub fn new_manual(
        mut config: EngineConfig,
        devices: Vec<Box<dyn Device>>,
    ) -> Result<(Engine, RtRunner), EngineError> {
        check_devices(&mut config, &devices)?;
        let rate = devices[0].info().rate;
        let infos: Vec<DeviceInfo> = devices.iter().map(|d| d.info().clone()).collect();
        let mut net: Vec<_> = devices.iter().map(|d| d.net()).collect();
        net.resize(MAX_DEVICES, None);
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
        let transport = Arc::new(crate::rt::transport::TransportShared::default());
        let freewheel = infos[0].freewheel;
        let followers = followers(&infos, rate, config.quantum_max)?;
        let links = RtLinks {
            from_ctl,
            garbage: garbage_tx,
            events: events_tx,
            service_bell: service_bell.clone(),
            wake: wake.clone(),
            stats: stats.clone(),
            node_times: node_times.clone(),
            transport: transport.clone(),
        };
        let settings = RtSettings {
            slots: config.max_nodes,
            quantum: config.quantum_default,
            max_quantum: config.quantum_max,
            rate,
            start_fade_frames: (rate as u64 * START_FADE_MS / 1000).max(1) as usize,
            node_timing: config.node_timing,
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
        };
        let runner = RtRunner::new(devices, followers, links, settings);
        let ctl = Control {
            graph: Graph::default(),
            to_rt,
            free_slots: (0..config.max_nodes).rev().collect(),
            published: HashSet::new(),
            stopped: HashSet::new(),
            watchers: Vec::new(),
            quantum: config.quantum_default,
            forced: None,
            freewheel: false,
            garbage,
            events,
            held: false,
            hw: Default::default(),
            chains: Default::default(),
            retiring: HashSet::new(),
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
                devices: std::sync::RwLock::new({
                    let mut v: Vec<Option<DeviceInfo>> = infos.iter().cloned().map(Some).collect();
                    v.resize(MAX_DEVICES, None);
                    v
                }),
                net: std::sync::RwLock::new(net),
                periods,
                max_fill,
                realtime: Mutex::new(RtThread {
                    outcome: RtOutcome::Disabled,
                    tid: None,
                    freewheeling: false,
                }),
                threads: Mutex::new(None),
                stopping: false.into(),
                transport,
            }),
        };
        let specs = infos
            .iter()
            .enumerate()
            .flat_map(|(i, info)| device_node_specs(i, info))
            .collect();
        engine.add_device_nodes(&mut engine.lock(), specs)?;
        Ok((engine, runner))
    }

    /// Adds every device node in one plan, so the first cycle already reads every
    /// capture side and writes every playback side: a duplex card whose sides started
    /// a cycle apart would carry an extra quantum of round-trip latency for good.
    /// Returns the new nodes.
    pub(super) fn add_device_nodes(
        &self,
        ctl: &mut Control,
        specs: Vec<NodeSpec>,
    ) -> Result<Vec<NodeId>, EngineError> {
        let mut ids = HashSet::new();
        let mut order = Vec::new();
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
                spec.kind.volume_on_inputs(),
            ));
            let id = ctl.graph.add_node(&spec, slot);
            ids.insert(id);
            order.push(id);
            self.send(ctl, ToRt::AddNode { slot, node })?;
        }
        self.publish_with_new(ctl, &ids)?;
        Ok(order)
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
        let lock = crate::rt::sched::lock_memory(config.lock_memory);
        let (engine, runner) = Engine::new_manual(config, devices)?;
        let (rt, tid, stack) = quaver_rt::spawn("quaver-rt".into(), lock, move || runner.run())
            .map_err(EngineError::Io)?;
        if let Some(why) = stack {
            tracing::warn!("{why}");
        }
        let period = crate::rt::sched::period(engine.quantum(), engine.shared.rate);
        let req = quaver_rt::Request {
            period: Some(period),
            ..req
        };
        *engine.shared.realtime.lock().expect("poisoned") = RtThread {
            outcome: crate::rt::sched::promote(tid, &req),
            tid: Some(tid),
            freewheeling: false,
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
                    tracing::warn!("xrun on device {}", self.device_name(device))
                }
                RtEvent::DeviceGone { device } => {
                    if ctl.retiring.remove(&device) {
                        tracing::debug!("device {} retired", self.device_name(device));
                    } else {
                        tracing::error!(
                            "device {} failed or went away and is no longer driven",
                            self.device_name(device)
                        );
                    }
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
                RtEvent::Freewheel(on) => {
                    tracing::debug!(
                        "devices {} for freewheel",
                        if on { "suspended" } else { "restarted" }
                    );
                }
                RtEvent::Quantum(q) => {
                    tracing::debug!("quantum is now {q} frames");
                    let (rate, prio) = (self.shared.rate, self.shared.config.rt_priority);
                    crate::rt::sched::quantum_changed(&self.shared.realtime, q, rate, prio);
                }
                RtEvent::ForcedSleep { ran_ns } => {
                    let forced_sleeps = self.shared.stats.forced_sleeps.load(Relaxed);
                    let msg = format!(
                        "real-time thread: cycles ran back to back for {:.1} ms; it slept \
                         {} µs so that RLIMIT_RTTIME does not end the daemon ({forced_sleeps} \
                         times so far)",
                        ran_ns as f64 / 1e6,
                        quaver_rt::rttime::FORCED_SLEEP.as_micros()
                    );
                    if forced_sleeps.is_power_of_two() {
                        tracing::warn!("{msg}");
                    } else {
                        tracing::debug!("{msg}");
                    }
                }
                RtEvent::Margin { device, frames } => tracing::debug!(
                    "device {}: safety margin now {frames} frames ({:.1} ms)",
                    self.device_name(device),
                    frames as f64 * 1000.0 / self.shared.rate as f64
                ),
                RtEvent::DeviceClosed { device } => {
                    tracing::info!("device {} closed (idle)", self.device_name(device))
                }
                RtEvent::DeviceReopened { device } => {
                    tracing::info!("device {} reopened", self.device_name(device))
                }
            }
            out.push(e);
        }
        out
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

fn close_all(devices: Vec<Option<Box<dyn Device>>>) -> Result<(), EngineError> {
    let mut first = Ok(());
    for mut d in devices.into_iter().flatten() {
        match d.close() {
            // A card that vanished unnoticed (closed for idleness, say) has nothing
            // left to flush: not a failed shutdown.
            Err(e) if is_vanished(&e) => {
                tracing::info!("closing {}: {e} (the device is gone)", d.info().name);
            }
            Err(e) => {
                tracing::error!("closing {}: {e}", d.info().name);
                if first.is_ok() {
                    first = Err(EngineError::Device(e));
                }
            }
            Ok(()) => {}
        }
    }
    first
}

/// Whether a device error says the device is no longer there.
fn is_vanished(e: &quaver_devices::DeviceError) -> bool {
    match e {
        quaver_devices::DeviceError::Gone(_) => true,
        quaver_devices::DeviceError::Io { source, .. } => {
            matches!(source.raw_os_error(), Some(libc::ENODEV | libc::ENXIO))
        }
        _ => false,
    }
}

/// Refuses what one engine cannot drive (no device, too many, bad quantum bounds, mixed
/// rates) and lowers the quantum bounds to what the devices' rings allow.
fn check_devices(
    config: &mut EngineConfig,
    devices: &[Box<dyn Device>],
) -> Result<(), EngineError> {
    if devices.is_empty() {
        return Err(EngineError::Config("at least one device is needed".into()));
    }
    if devices.len() > MAX_DEVICES {
        return Err(EngineError::Config(format!(
            "at most {MAX_DEVICES} devices"
        )));
    }
    let c = &*config;
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
    Ok(())
}

/// One follower per device but the driver (device 0), which keeps `None`.
fn followers(
    infos: &[DeviceInfo],
    rate: u32,
    quantum_max: usize,
) -> Result<Vec<Option<Box<Follower>>>, EngineError> {
    infos
        .iter()
        .enumerate()
        .map(|(i, info)| {
            if i == 0 {
                return Ok(None);
            }
            follower_for(info, rate, quantum_max).map(Some)
        })
        .collect()
}

/// The rate matching of a device that follows another's clock (control thread).
pub(super) fn follower_for(
    info: &DeviceInfo,
    rate: u32,
    quantum_max: usize,
) -> Result<Box<Follower>, EngineError> {
    Follower::new(
        rate,
        info.playback.as_ref().map(|c| c.len()),
        info.capture.as_ref().map(|c| c.len()),
        quantum_max,
    )
    .map(Box::new)
    .map_err(|e| EngineError::Config(format!("device {}: rate matching: {e}", info.name)))
}

/// The nodes of device `i`: a sink for its playback side, a source for its capture side.
pub(super) fn device_node_specs(i: usize, info: &DeviceInfo) -> Vec<NodeSpec> {
    let mut specs = Vec::new();
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
    specs
}
