//! What the control API hands out: status snapshots, per-node timing and graph events.

use crate::graph::{NodeId, NodeKind};
use crate::rt::sched::RtOutcome;
use quaver_devices::DeviceInfo;

/// A device as the engine reports it.
#[derive(Debug, Clone)]
pub struct DeviceStatus {
    /// Its index (a node's `device`).
    pub index: usize,
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
    /// Its rate matching, while it is steered as a follower (`rt/follow.rs`).
    pub follow: Option<FollowStatus>,
    /// A network device's live figures (jitter, loss, delay; packets sent).
    pub net: Option<quaver_devices::NetStatus>,
}

/// Where a follower's rate-matching loop stands (docs/engine/followers.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FollowStatus {
    /// The follower's clock against the driver's, minus 1, in ppm, as the playback
    /// loop's ratio has it (if it plays).
    pub play_ppm: Option<f64>,
    /// The same as the capture loop's ratio has it (if it captures).
    pub capture_ppm: Option<f64>,
    /// Playback frames queued at the last reading.
    pub play_level: Option<u64>,
    /// The playback level the loop holds.
    pub play_target: Option<u64>,
    /// Lowest and highest playback level minus its target since the loop last
    /// restarted, frames.
    pub play_error: (i64, i64),
    /// Times the loop restarted (the device started, or recovered from an xrun).
    pub restarts: u64,
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

/// A node's timing over the interval since the previous [`crate::Engine::node_timing`]
/// call (by any caller).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTiming {
    /// Node id.
    pub id: NodeId,
    /// Node name.
    pub name: String,
    /// Node kind.
    pub kind: NodeKind,
    /// Device index for device nodes.
    pub device: Option<usize>,
    /// Frames per cycle the node runs at (the engine's quantum: one clock domain).
    pub quantum: usize,
    /// The quantum the node asks for through its latency request, if it does.
    pub quantum_requested: Option<usize>,
    /// Sample rate, Hz.
    pub rate: u32,
    /// Cycles sampled in the interval (0: the node did not run, e.g. an inactive client).
    pub cycles: u64,
    /// Cycles sampled since the node was added.
    pub cycles_total: u64,
    /// Mean wait per cycle over the interval (the last value when no cycle ran), ns.
    pub wait_avg_ns: u64,
    /// Longest wait in the interval, ns.
    pub wait_max_ns: u64,
    /// Mean busy time per cycle over the interval (the last value when no cycle ran), ns.
    pub busy_avg_ns: u64,
    /// Longest busy time in the interval, ns.
    pub busy_max_ns: u64,
    /// Mean time the RT thread spent on the node per cycle over the interval, ns.
    pub rt_avg_ns: u64,
    /// Longest such time in the interval, ns.
    pub rt_max_ns: u64,
    /// Xruns counted against the node since it was added (misses of a callback client,
    /// stream underruns/overruns, device underruns/overruns).
    pub xruns: u64,
    /// Length of the interval, ns.
    pub interval_ns: u64,
}

/// What the control side remembers of a slot between two reads.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SlotMark {
    pub node: Option<NodeId>,
    pub samples: u64,
    pub wait_total: u64,
    pub busy_total: u64,
    pub rt_total: u64,
}
