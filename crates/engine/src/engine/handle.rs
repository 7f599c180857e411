//! The engine handle and its control state: the graph, the queue to the RT thread, and
//! publishing a new plan after every edit. The public methods are in the sibling files.

use crate::EngineError;
use crate::compile::{compile, stopped_nodes};
use crate::engine::config::EngineConfig;
use crate::engine::report::{GraphEvent, SlotMark};
use crate::graph::{Graph, NodeId, NodeKind, PortId};
use crate::rt::msg::{Garbage, RtEvent, ToRt};
use crate::rt::sched::RtThread;
use crate::rt::stats::RtStats;
use crate::rt::timing::NodeTimes;
use quaver_devices::{Device, DeviceInfo};
use rustix::fd::OwnedFd;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Release;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest an edit waits for room in the control queue before it is refused: far more
/// than a cycle at the largest quantum, so only a stuck RT thread gets there.
const SEND_WAIT: Duration = Duration::from_secs(2);

pub(super) fn notify(ctl: &mut Control, e: GraphEvent) {
    ctl.watchers.retain(|w| w.send(e).is_ok());
}

pub(super) struct Control {
    pub(super) graph: Graph,
    pub(super) to_rt: rtrb::Producer<ToRt>,
    pub(super) free_slots: Vec<usize>,
    pub(super) published: HashSet<(PortId, PortId)>,
    /// The nodes the published plan leaves out ([`stopped_nodes`]).
    pub(super) stopped: HashSet<NodeId>,
    pub(super) watchers: Vec<std::sync::mpsc::Sender<GraphEvent>>,
    pub(super) quantum: usize,
    /// The quantum forced for everyone ([`Engine::force_quantum`]), overriding requests.
    pub(super) forced: Option<usize>,
    /// Freewheeling ([`Engine::set_freewheel`]).
    pub(super) freewheel: bool,
    pub(super) garbage: rtrb::Consumer<Garbage>,
    pub(super) events: rtrb::Consumer<RtEvent>,
    /// Devices suspended on request ([`Engine::hold`]).
    pub(super) held: bool,
    /// Device nodes with a hardware volume (`hwvol.rs`).
    pub(super) hw: std::collections::HashMap<NodeId, HwEntry>,
    /// The controls of the filter chain on each sink that has one (`filters.rs`).
    pub(super) chains: std::collections::HashMap<NodeId, Vec<quaver_dsp::filter::Controls>>,
    /// Devices the control side retired ([`Engine::device_gone`]: a card unplugged, a
    /// network stream deleted by its sender): their end is news, not an error.
    pub(super) retiring: HashSet<usize>,
}

/// A device node's hardware volume and the software gain that completes it (kept here,
/// with the rest of the control state; `hwvol.rs` uses it).
pub(super) struct HwEntry {
    pub(super) control: Arc<dyn quaver_devices::hwvol::HardwareVolume>,
    pub(super) sw_gain: f32,
}

/// The real-time thread (which hands the devices back) and the service thread.
pub(super) type EngineThreads = (JoinHandle<Vec<Option<Box<dyn Device>>>>, JoinHandle<()>);

pub(super) struct Shared {
    pub(super) ctl: Mutex<Control>,
    /// The JACK transport the RT thread advances ([`Engine::transport`]).
    pub(super) transport: Arc<crate::rt::transport::TransportShared>,
    pub(super) stats: Arc<RtStats>,
    pub(super) node_times: Arc<[NodeTimes]>,
    /// When [`Engine::node_timing`] last read, and what it saw per slot.
    pub(super) timing_marks: Mutex<(u64, Vec<SlotMark>)>,
    pub(super) wake: Arc<OwnedFd>,
    pub(super) service_bell: Arc<OwnedFd>,
    pub(super) config: EngineConfig,
    pub(super) rate: u32,
    /// The devices by index (`MAX_DEVICES` entries): `None` for a free index. An index
    /// is taken until [`Engine::remove_device`], gone or not, so node `device` indices
    /// never point at another device.
    pub(super) devices: RwLock<Vec<Option<DeviceInfo>>>,
    /// The network devices' live figures by device index (`None` for other devices),
    /// taken when each device was handed to the real-time thread.
    pub(super) net: RwLock<Vec<Option<quaver_devices::NetHandle>>>,
    /// Most quanta any device holds between render and playout.
    pub(super) periods: usize,
    /// Most playback frames the driver can keep queued filling ahead; 0 where it
    /// cannot (or where more than one device shares the clock).
    pub(super) max_fill: usize,
    pub(super) realtime: Mutex<RtThread>,
    pub(super) threads: Mutex<Option<EngineThreads>>,
    pub(super) stopping: std::sync::atomic::AtomicBool,
}

/// A handle to a running engine; clones share it.
#[derive(Clone)]
pub struct Engine {
    pub(super) shared: Arc<Shared>,
}

/// The largest power of two at most `frames` (1 for 0).
pub(super) fn round_pow2(frames: usize) -> usize {
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
    /// The JACK transport: requests, the timebase master, and the state the RT thread
    /// publishes at each cycle start (docs/engine/transport.md).
    pub fn transport(&self) -> &Arc<crate::rt::transport::TransportShared> {
        &self.shared.transport
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Control> {
        self.shared
            .ctl
            .lock()
            .expect("engine control mutex poisoned")
    }

    /// Frees an object the RT thread retired; a device error is logged first, and a
    /// device handed back is closed.
    pub(super) fn dispose(&self, g: Garbage) {
        match g {
            Garbage::DeviceError { device, error } => {
                tracing::error!("device {}: {error}", self.device_name(device));
            }
            Garbage::Device { mut device, .. } => {
                let name = device.info().name.clone();
                // A vanished card answers its close with "No such device": expected.
                match device.close() {
                    Ok(()) => tracing::info!("device {name} closed"),
                    Err(e) => tracing::info!("device {name} closed ({e})"),
                }
            }
            g => drop(g),
        }
    }

    /// The name of device `index` for logs ("device N" once it is removed).
    pub(super) fn device_name(&self, index: usize) -> String {
        self.shared
            .devices
            .read()
            .expect("poisoned")
            .get(index)
            .and_then(|d| d.as_ref())
            .map_or_else(|| format!("#{index}"), |d| d.name.clone())
    }

    pub(super) fn send(&self, ctl: &mut Control, msg: ToRt) -> Result<(), EngineError> {
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
    /// ([`crate::rt::node::Processor::rewind`]): the most the device can have queued; 0 when
    /// this engine never fills ahead.
    pub fn rewind_capacity(&self) -> usize {
        self.shared.max_fill
    }

    pub(super) fn request_rewind(&self, ctl: &mut Control) -> Result<(), EngineError> {
        self.request_rewind_of(ctl, None)
    }

    /// Sends a rewind request (nothing where the device never fills ahead); `flushed`
    /// names a node whose taken-back output is dropped instead of played again.
    pub(super) fn request_rewind_of(
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
    pub(super) fn fill_for(
        &self,
        graph: &Graph,
        stopped: &HashSet<NodeId>,
        quantum: usize,
    ) -> usize {
        // Filling ahead needs the only device (a follower could not be rewound with it).
        if self.shared.max_fill == 0
            || graph
                .nodes
                .values()
                .filter_map(|n| n.device)
                .any(|d| d != 0)
        {
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
        // A rewind cannot take back what a feedback link already carried into the next
        // cycle (a sink's monitor into its own playback, say).
        if !crate::feedback::order(graph).feedback.is_empty() {
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

    pub(super) fn quantum_for(
        &self,
        graph: &Graph,
        stopped: &HashSet<NodeId>,
        forced: Option<usize>,
    ) -> usize {
        // Checked when forced: a power of two within the bounds, so no rounding applies.
        if let Some(q) = forced {
            return q;
        }
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

    pub(super) fn publish(&self, ctl: &mut Control) -> Result<(), EngineError> {
        self.publish_with_new(ctl, &HashSet::new())
    }

    pub(super) fn publish_with_new(
        &self,
        ctl: &mut Control,
        new_nodes: &HashSet<NodeId>,
    ) -> Result<(), EngineError> {
        let stopped = stopped_nodes(&ctl.graph);
        ctl.quantum = self.quantum_for(&ctl.graph, &stopped, ctl.forced);
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
        plan.freewheel = ctl.freewheel;
        ctl.published = current;
        ctl.stopped = stopped;
        self.send(ctl, ToRt::Plan(Box::new(plan)))
    }
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
