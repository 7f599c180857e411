//! What `status` and `timing` report: server state, devices, clients and the
//! real-time thread's timing.

use serde::{Deserialize, Serialize};

/// Timing of the real-time thread since the daemon started, as log2 histograms:
/// bucket `i` counts events of `[2^i, 2^(i+1))` nanoseconds (bucket 0 also counts 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingStats {
    /// Sample rate in Hz.
    pub rate: u32,
    /// Current quantum in frames.
    pub quantum: u32,
    /// Cycles run.
    pub cycles: u64,
    /// Driver xruns.
    pub xruns: u64,
    /// How late the driver woke the real-time thread after its deadline (timer-driven
    /// devices only; empty when the driver cannot tell).
    pub lateness_ns_log2: Vec<u64>,
    /// Time spent processing each cycle.
    pub busy_ns_log2: Vec<u64>,
    /// Largest lateness seen, ns.
    pub lateness_max_ns: u64,
    /// Largest busy time seen, ns.
    pub busy_max_ns: u64,
    /// Every node's timing over the interval since the previous `timing` request of any
    /// client (added within v1; absent from older servers).
    #[serde(default)]
    pub nodes: Vec<NodeTimingInfo>,
    /// Length of that interval, ns (added within v1).
    #[serde(default)]
    pub interval_ns: u64,
    /// The devices are suspended (idle), so no node runs (added within v1).
    #[serde(default)]
    pub suspended: bool,
    /// Driver wakeups more than one period after their deadline (devices that sleep to a
    /// computed deadline; added within v1).
    #[serde(default)]
    pub overdue_cycles: u64,
    /// Runs of consecutive overdue cycles: times the real-time thread fell a cycle behind
    /// (added within v1).
    #[serde(default)]
    pub overdue_runs: u64,
    /// Per-cycle stage times of the cycle's callback client since the daemon started
    /// (added within v1; absent from older servers and with node timing off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<StageStats>,
}

/// Where cycles with a callback client spent their time, stage by stage
/// (docs/engine/stages.md): cumulative histograms per class of cycles.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StageStats {
    /// Stage names, in the order of every per-stage vector below.
    pub stages: Vec<String>,
    /// Per class of cycles: `all`, `late` (the callback started more than two periods
    /// after the cycle's nominal start), `xrun` (the client missed the cycle, or the
    /// server woke more than a period late).
    pub classes: Vec<StageClass>,
}

/// One class of cycles in [`StageStats`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StageClass {
    /// `all`, `late` or `xrun`.
    pub name: String,
    /// Cycles in the class.
    pub cycles: u64,
    /// Per stage: a histogram of ns, exact below 8 ns, then eight linear buckets per
    /// power of two (bucket `i ≥ 8` starts at `(8 + i % 8) << (i / 8 - 1)`); trailing
    /// empty buckets cut.
    pub hist: Vec<Vec<u64>>,
    /// Per stage: cycles in which it was the longest stage.
    pub dominant: Vec<u64>,
    /// Per stage: sum over the class's cycles, ns.
    pub sum_ns: Vec<u64>,
}

/// One node's timing per cycle in [`TimingStats`], in the terms of PipeWire's `pw-top`
/// (docs/engine.md, "Observability"): averages and maxima over the interval.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeTimingInfo {
    /// Node id.
    pub id: u32,
    /// Node name.
    pub name: String,
    /// Kind, as in [`NodeInfo`](super::NodeInfo) (`sink`, `playback`, `client`, …).
    pub kind: String,
    /// Frames per cycle the node runs at.
    pub quantum: u32,
    /// The quantum the node asks for, if it asks for one.
    pub quantum_requested: Option<u32>,
    /// Sample rate, Hz.
    pub rate: u32,
    /// Cycles the node ran in the interval (0: idle, e.g. an inactive client).
    pub cycles: u64,
    /// Mean wait per cycle, ns: for a callback client the time from the server's signal
    /// to its process thread waking; 0 for nodes the server runs itself.
    pub wait_avg_ns: u64,
    /// Longest wait in the interval, ns.
    pub wait_max_ns: u64,
    /// Mean busy time per cycle, ns: the client's callback (wake to completion), or the
    /// server's processing of the node.
    pub busy_avg_ns: u64,
    /// Longest busy time in the interval, ns.
    pub busy_max_ns: u64,
    /// Mean time the server's real-time thread spent on the node per cycle (for a
    /// callback client: waking it, blocking on it, collecting its outputs), ns.
    pub rt_avg_ns: u64,
    /// Longest such time in the interval, ns.
    pub rt_max_ns: u64,
    /// Xruns counted against the node since it was created (client misses, stream
    /// underruns and overruns, device underruns and overruns).
    pub xruns: u64,
}

/// Server-wide state for `quaver status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    /// quaverd's version string.
    pub server_version: String,
    /// Protocol version.
    pub protocol_version: u32,
    /// Graph rate in Hz.
    pub rate: u32,
    /// Current quantum in frames.
    pub quantum: u32,
    /// Configured smallest quantum.
    pub quantum_min: u32,
    /// Configured largest quantum.
    pub quantum_max: u32,
    /// Whether the RT thread runs with a real-time scheduling policy.
    pub realtime: bool,
    /// The RT thread's scheduling, e.g. "SCHED_FIFO 20 via RealtimeKit" (empty from
    /// older servers). Boxed: one pointer keeps `Reply`, which the daemon also uses as
    /// an error type, within clippy's size bound.
    #[serde(default)]
    pub scheduling: Box<String>,
    /// Graph cycles run since start.
    pub cycles: u64,
    /// Total xruns since start.
    pub xruns: u64,
    /// Devices.
    pub devices: Vec<DeviceStatus>,
    /// Connected clients.
    pub clients: Vec<ClientInfo>,
}

/// One device in [`StatusInfo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// Device name.
    pub name: String,
    /// Human-readable description.
    pub description: String,
    /// `running`, `suspended`, `closed` (suspended with its handles released while
    /// idle; a stream reopens it) or `gone`.
    pub state: String,
    /// Device rate in Hz.
    pub rate: u32,
    /// Playback channels, if it plays.
    pub playback_channels: Option<u32>,
    /// Capture channels, if it captures.
    pub capture_channels: Option<u32>,
    /// Playback underruns.
    pub underruns: u64,
    /// Capture overruns.
    pub overruns: u64,
    /// Times the device driver woke the server.
    pub wakeups: u64,
    /// The safety margin (watermark) in effect: frames still queued for playback when
    /// the driver wakes; 0 where the device has none (added within v1).
    #[serde(default)]
    pub margin_frames: u64,
    /// How often the device's adaptive margin changed (added within v1).
    #[serde(default)]
    pub margin_changes: u64,
    /// Rate matching of a device on its own clock that does not drive the graph (added
    /// within v1; absent for the driver and for devices without a clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<FollowStatus>,
    /// A network device's live figures: jitter, loss, buffer delay, clock drift;
    /// packets sent (added within v1; absent for other devices and older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<super::net::NetDeviceStatus>,
}

/// A follower's rate matching in [`DeviceStatus`] (docs/engine/followers.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowStatus {
    /// The follower's clock against the driver's, minus 1, in parts per billion, as the
    /// playback loop's ratio has it (if it plays).
    pub play_ppb: Option<i64>,
    /// The same as the capture loop's ratio has it (if it captures).
    pub capture_ppb: Option<i64>,
    /// Playback frames queued at the last reading.
    pub play_level: Option<u64>,
    /// The playback level the loop holds.
    pub play_target: Option<u64>,
    /// Lowest playback level minus its target since the loop last restarted, frames.
    pub play_error_min: i64,
    /// Highest playback level minus its target since the loop last restarted, frames.
    pub play_error_max: i64,
    /// Times the loop restarted (the device started, or recovered from an xrun).
    pub restarts: u64,
}

impl DeviceStatus {
    /// Idle: suspended, or past that with its handles closed (`closed`).
    pub fn is_idle(&self) -> bool {
        self.state == "suspended" || self.state == "closed"
    }
}

/// One client in [`StatusInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Client id.
    pub id: u32,
    /// Name from `Hello`.
    pub name: String,
    /// Peer process id, when the socket tells us.
    pub pid: Option<u32>,
    /// Node ids of the client's streams.
    pub streams: Vec<u32>,
}
