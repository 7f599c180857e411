//! Control messages of the native protocol (JSON, one message per frame).
//!
//! Requests are parsed strictly (`deny_unknown_fields`): they come from untrusted
//! clients and a typo should be an error, not a silently ignored option. Info
//! replies are parsed leniently so that a server may add fields within v1 without
//! breaking older clients.

use quaver_dsp::{ChannelMap, ChannelPosition};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;

/// Version of the message set; a server rejects a `Hello` carrying another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest accepted name (node, stream, client, port address) in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Highest accepted stream sample rate.
pub const MAX_RATE: u32 = 384_000;
/// Most channels a stream may have.
pub const MAX_CHANNELS: usize = 64;
/// Largest accepted requested latency in milliseconds.
pub const MAX_LATENCY_MS: f64 = 10_000.0;
/// Largest accepted linear volume (+20 dB).
pub const MAX_VOLUME: f32 = 10.0;
/// Largest quantum a client may ask for, frames.
pub const MAX_QUANTUM: u32 = 65536;
/// Most ports of one direction a callback node may ask for.
pub const MAX_CALLBACK_PORTS: u32 = crate::callback::MAX_CALLBACK_PORTS;
/// Longest port name in bytes.
pub const MAX_PORT_NAME_BYTES: usize = 128;

/// A request from client to server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// First message on every connection; the server answers `Welcome` or `Error`.
    Hello {
        /// The client's `PROTOCOL_VERSION`.
        version: u32,
        /// Human-readable client name shown in status output.
        client_name: String,
    },
    /// Asks for [`StatusInfo`].
    Status,
    /// Asks for [`TimingStats`]: the real-time thread's wakeup lateness and busy time.
    Timing,
    /// Asks for [`GraphInfo`].
    Graph,
    /// Creates a playback or record stream; answered by `StreamCreated` plus two fds.
    CreateStream(StreamParams),
    /// Destroys a stream this connection created.
    DestroyStream {
        /// Node id from `StreamCreated`.
        node: u32,
    },
    /// Connects an output (`node` or `node:port`) to an input.
    Link {
        /// Output node or port.
        output: String,
        /// Input node or port.
        input: String,
    },
    /// Removes the link(s) between an output and an input.
    Unlink {
        /// Output node or port.
        output: String,
        /// Input node or port.
        input: String,
    },
    /// Creates a callback client node; answered by `CallbackCreated` plus three fds
    /// (shared block, wake eventfd, done eventfd).
    CreateCallback(CallbackParams),
    /// Adds a port to a callback node of this connection; answered by `PortAdded`.
    AddPort {
        /// Node id from `CallbackCreated`.
        node: u32,
        /// Input or output.
        direction: PortDirection,
        /// Port name, unique within the node.
        name: String,
        /// Channel position the port carries (default `AUX<index>`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        channel: Option<ChannelPosition>,
    },
    /// Removes a port of a callback node of this connection (and its links).
    RemovePort {
        /// Node id.
        node: u32,
        /// Port id from `CallbackCreated` or `PortAdded`.
        port: u32,
    },
    /// Asks for a quantum (frames) for a node of this connection; `None` withdraws the
    /// request. The server honours the smallest request within its bounds.
    SetQuantum {
        /// Node id.
        node: u32,
        /// Requested quantum in frames.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quantum: Option<u32>,
    },
    /// Turns this connection into a one-way event stream: the server answers `Ok`, then
    /// sends an `Event` reply (id 0) after every graph or device change and reads no
    /// further requests. Open another connection for requests.
    Watch,
    /// Changes a node's volume and/or mute; `None` leaves that setting alone.
    SetVolume {
        /// Node name or numeric id as a string.
        node: String,
        /// Linear gain, 0..=10.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        volume: Option<f32>,
        /// Mute state.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mute: Option<bool>,
    },
}

impl Request {
    /// Checks value ranges the type system cannot express; the server calls this
    /// before acting on a request.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Request::Hello { client_name, .. } => check_name("client_name", client_name),
            Request::Status | Request::Timing | Request::Graph | Request::DestroyStream { .. } => {
                Ok(())
            }
            Request::CreateStream(p) => p.validate(),
            Request::CreateCallback(p) => p.validate(),
            Request::AddPort { name, .. } => check_port_name("name", name),
            Request::RemovePort { .. } | Request::Watch => Ok(()),
            Request::SetQuantum { quantum, .. } => match quantum {
                Some(q) if !(1..=MAX_QUANTUM).contains(q) => {
                    Err(format!("quantum {q} out of range 1..={MAX_QUANTUM}"))
                }
                _ => Ok(()),
            },
            Request::Link { output, input } | Request::Unlink { output, input } => {
                check_name("output", output)?;
                check_name("input", input)
            }
            Request::SetVolume { node, volume, mute } => {
                check_name("node", node)?;
                if let Some(v) = volume {
                    check_volume(*v)?;
                }
                if volume.is_none() && mute.is_none() {
                    return Err("set_volume needs volume and/or mute".into());
                }
                Ok(())
            }
        }
    }

    /// The `type` tag of this request, for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Status => "status",
            Request::Timing => "timing",
            Request::Graph => "graph",
            Request::CreateStream(_) => "create_stream",
            Request::DestroyStream { .. } => "destroy_stream",
            Request::Link { .. } => "link",
            Request::Unlink { .. } => "unlink",
            Request::SetVolume { .. } => "set_volume",
            Request::CreateCallback(_) => "create_callback",
            Request::AddPort { .. } => "add_port",
            Request::RemovePort { .. } => "remove_port",
            Request::SetQuantum { .. } => "set_quantum",
            Request::Watch => "watch",
        }
    }
}

/// Which way audio flows through a stream, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client writes audio that the server plays.
    Playback,
    /// The client reads audio the server captured.
    Record,
}

/// Parameters of a new stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamParams {
    /// Playback or record.
    pub direction: Direction,
    /// Stream (node) name; the server may make it unique.
    pub name: String,
    /// Sample rate of the client's audio in Hz; the server resamples if needed.
    pub rate: u32,
    /// Channel positions of the interleaved frames in the ring.
    pub channels: ChannelMap,
    /// Requested latency: how much audio may be queued between client and device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// Node to link to instead of the policy's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Initial linear volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<f32>,
    /// Record streams only: record what this sink plays instead of a source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor_of: Option<String>,
}

impl StreamParams {
    /// Parameters for a playback stream with defaults for the optional fields.
    pub fn playback(name: impl Into<String>, rate: u32, channels: ChannelMap) -> Self {
        Self::new(Direction::Playback, name.into(), rate, channels)
    }

    /// Parameters for a record stream with defaults for the optional fields.
    pub fn record(name: impl Into<String>, rate: u32, channels: ChannelMap) -> Self {
        Self::new(Direction::Record, name.into(), rate, channels)
    }

    fn new(direction: Direction, name: String, rate: u32, channels: ChannelMap) -> Self {
        StreamParams {
            direction,
            name,
            rate,
            channels,
            latency_ms: None,
            target: None,
            volume: None,
            monitor_of: None,
        }
    }

    /// Checks every field's range; returns a message naming the offending field.
    pub fn validate(&self) -> Result<(), String> {
        check_name("name", &self.name)?;
        if !(1..=MAX_RATE).contains(&self.rate) {
            return Err(format!("rate {} out of range 1..={MAX_RATE}", self.rate));
        }
        let n = self.channels.len();
        if !(1..=MAX_CHANNELS).contains(&n) {
            return Err(format!("{n} channels out of range 1..={MAX_CHANNELS}"));
        }
        // Ports are named after positions, so duplicates would make links ambiguous.
        let mut seen: HashSet<ChannelPosition> = HashSet::with_capacity(n);
        for p in self.channels.positions() {
            if !seen.insert(*p) {
                return Err(format!("channel position {p} appears twice"));
            }
        }
        if let Some(l) = self.latency_ms
            && !(l.is_finite() && l > 0.0 && l <= MAX_LATENCY_MS)
        {
            return Err(format!("latency_ms {l} out of range (0, {MAX_LATENCY_MS}]"));
        }
        if let Some(v) = self.volume {
            check_volume(v)?;
        }
        if let Some(t) = &self.target {
            check_name("target", t)?;
        }
        if let Some(m) = &self.monitor_of {
            check_name("monitor_of", m)?;
            if self.direction != Direction::Record {
                return Err("monitor_of is only valid for record streams".into());
            }
        }
        Ok(())
    }
}

/// A port of a new callback node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortParams {
    /// Port name, unique within the node (no ':').
    pub name: String,
    /// Channel position (default `AUX<index>`); whole-node links match positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<ChannelPosition>,
}

impl PortParams {
    /// A port with the default position.
    pub fn new(name: impl Into<String>) -> Self {
        PortParams {
            name: name.into(),
            channel: None,
        }
    }
}

/// Parameters of a new callback client node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallbackParams {
    /// Node name; the server may make it unique.
    pub name: String,
    /// Input ports to create now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<PortParams>,
    /// Output ports to create now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<PortParams>,
    /// Input ports to reserve room for (`add_port` can add up to this many); default
    /// and minimum: `inputs.len()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inputs: Option<u32>,
    /// Output ports to reserve room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_outputs: Option<u32>,
    /// Quantum (frames per callback) this client asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantum: Option<u32>,
}

impl CallbackParams {
    /// A node without ports and without a quantum request.
    pub fn new(name: impl Into<String>) -> Self {
        CallbackParams {
            name: name.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            max_inputs: None,
            max_outputs: None,
            quantum: None,
        }
    }

    /// Checks every field; returns a message naming the offending one.
    pub fn validate(&self) -> Result<(), String> {
        check_name("name", &self.name)?;
        let mut seen = HashSet::new();
        for p in self.inputs.iter().chain(&self.outputs) {
            check_port_name("port name", &p.name)?;
            if !seen.insert(p.name.as_str()) {
                return Err(format!("port name '{}' appears twice", p.name));
            }
        }
        for (what, ports, max) in [
            ("inputs", self.inputs.len(), self.max_inputs),
            ("outputs", self.outputs.len(), self.max_outputs),
        ] {
            let cap = max.map_or(ports, |m| (m as usize).max(ports));
            if cap > MAX_CALLBACK_PORTS as usize {
                return Err(format!(
                    "{cap} {what} out of range 0..={MAX_CALLBACK_PORTS}"
                ));
            }
        }
        if let Some(q) = self.quantum
            && !(1..=MAX_QUANTUM).contains(&q)
        {
            return Err(format!("quantum {q} out of range 1..={MAX_QUANTUM}"));
        }
        Ok(())
    }
}

fn check_port_name(field: &str, s: &str) -> Result<(), String> {
    check_name(field, s)?;
    if s.len() > MAX_PORT_NAME_BYTES {
        return Err(format!(
            "{field} is {} bytes, longer than {MAX_PORT_NAME_BYTES}",
            s.len()
        ));
    }
    if s.contains(':') {
        return Err(format!("{field} '{s}' contains ':'"));
    }
    Ok(())
}

fn check_name(field: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{field} is {} bytes, longer than {MAX_NAME_BYTES}",
            s.len()
        ));
    }
    // Control characters would corrupt terminal output of `quaver status`.
    if s.chars().any(char::is_control) {
        return Err(format!("{field} contains control characters"));
    }
    Ok(())
}

fn check_volume(v: f32) -> Result<(), String> {
    if v.is_finite() && (0.0..=MAX_VOLUME).contains(&v) {
        Ok(())
    } else {
        Err(format!("volume {v} out of range 0..={MAX_VOLUME}"))
    }
}

/// Why the server refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed or out-of-range request.
    BadRequest,
    /// `Hello` carried a protocol version the server does not speak.
    UnsupportedVersion,
    /// The named or numbered node does not exist.
    NoSuchNode,
    /// The named port does not exist.
    NoSuchPort,
    /// The ports cannot be linked (direction or media mismatch).
    Incompatible,
    /// The link or object already exists.
    Exists,
    /// The server failed; not the client's fault.
    Internal,
    /// A limit (streams, clients, memory) was reached.
    TooMany,
    /// A code this client does not know (sent by a newer server); never sent by v1 servers.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The wire name, e.g. `no_such_node`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::NoSuchNode => "no_such_node",
            ErrorCode::NoSuchPort => "no_such_port",
            ErrorCode::Incompatible => "incompatible",
            ErrorCode::Exists => "exists",
            ErrorCode::Internal => "internal",
            ErrorCode::TooMany => "too_many",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    /// Kind, as in [`NodeInfo`] (`sink`, `playback`, `client`, …).
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

/// A reply from server to client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// Answer to `Hello`.
    Welcome {
        /// quaverd's version string.
        server_version: String,
        /// The protocol version the server speaks on this connection.
        protocol_version: u32,
    },
    /// Answer to `Status`.
    Status(StatusInfo),
    /// Answer to `Timing` (boxed: with its node table it is the largest reply).
    Timing(Box<TimingStats>),
    /// Answer to `Graph`.
    Graph(GraphInfo),
    /// Answer to `CreateStream`; carries the ring memfd and doorbell eventfd.
    StreamCreated(StreamCreated),
    /// Answer to `CreateCallback`; carries the shared block, wake and done eventfds.
    CallbackCreated(CallbackCreated),
    /// Answer to `AddPort`.
    PortAdded(CallbackPort),
    /// Sent unsolicited (id 0) on a connection that asked to `Watch`.
    Event(GraphEvent),
    /// Success without data.
    Ok,
    /// The request failed.
    Error {
        /// Machine-readable reason.
        code: ErrorCode,
        /// Human-readable explanation.
        message: String,
    },
}

impl Reply {
    /// Shorthand for an `Error` reply.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Reply::Error {
            code,
            message: message.into(),
        }
    }

    /// The `type` tag of this reply, for logs and error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Welcome { .. } => "welcome",
            Reply::Status(_) => "status",
            Reply::Timing(_) => "timing",
            Reply::Graph(_) => "graph",
            Reply::StreamCreated(_) => "stream_created",
            Reply::CallbackCreated(_) => "callback_created",
            Reply::PortAdded(_) => "port_added",
            Reply::Event(_) => "event",
            Reply::Ok => "ok",
            Reply::Error { .. } => "error",
        }
    }
}

/// Details of a new stream; fd 0 = ring memfd, fd 1 = doorbell eventfd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCreated {
    /// Node id, used by `DestroyStream`.
    pub node: u32,
    /// Node name as the server registered it (maybe made unique).
    pub node_name: String,
    /// Ring capacity in frames (a power of two).
    pub capacity_frames: u32,
    /// Channels per frame in the ring.
    pub channels: u32,
    /// Stream rate (the client's rate).
    pub rate: u32,
    /// Rate of the device the stream is linked to.
    pub device_rate: u32,
    /// Current graph quantum in device frames.
    pub quantum: u32,
}

/// A port of a callback node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallbackPort {
    /// Port id (for `remove_port`; graph-wide).
    pub id: u32,
    /// Port name as registered.
    pub name: String,
    /// In or out.
    pub direction: PortDirection,
    /// Buffer index within its direction in the shared block.
    pub index: u32,
    /// Channel position name.
    pub channel: String,
}

/// A change in the graph or the devices, sent to watching connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphEvent {
    /// `node_added`, `node_removed`, `node_changed` (volume, mute, ports, latency
    /// request), `links_changed`, `suspended` or `resumed`; clients ignore kinds they
    /// do not know.
    pub event: String,
    /// The node concerned, for node events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
}

/// Details of a new callback node; fd 0 = shared block memfd, fd 1 = wake eventfd
/// (server signals), fd 2 = done eventfd (client signals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallbackCreated {
    /// Node id.
    pub node: u32,
    /// Node name as registered (maybe made unique).
    pub node_name: String,
    /// Graph sample rate.
    pub rate: u32,
    /// Current quantum.
    pub quantum: u32,
    /// Frames per port buffer in the shared block (the largest possible quantum).
    pub max_frames: u32,
    /// Input port buffers in the block.
    pub max_inputs: u32,
    /// Output port buffers in the block.
    pub max_outputs: u32,
    /// The ports created with the node.
    pub ports: Vec<CallbackPort>,
    /// Fraction of the quantum period, from the cycle start, within which the client
    /// must complete a cycle.
    pub deadline: f64,
    /// Consecutive woken cycles answered late after which the server moves the client
    /// to asynchronous mode (0: never).
    pub async_after: u32,
    /// Milliseconds of unanswered cycles after which the server takes the client as hung
    /// and moves it to asynchronous mode (0: never; absent from older servers).
    #[serde(default)]
    pub hung_ms: u32,
    /// Milliseconds of asynchronous answers all in time after which the server moves the
    /// client back to synchronous mode (0: never; absent from older servers).
    #[serde(default)]
    pub recover_ms: u32,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// The processing graph for `quaver graph`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphInfo {
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
    /// Links.
    pub links: Vec<LinkInfo>,
}

/// One node in [`GraphInfo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node id.
    pub id: u32,
    /// Unique node name.
    pub name: String,
    /// Kind, e.g. `sink`, `source`, `playback`, `record`, `monitor`, `filter`.
    pub kind: String,
    /// Human-readable description.
    pub description: String,
    /// Linear volume.
    pub volume: f32,
    /// Mute state.
    pub mute: bool,
    /// Latency the node contributes, when known.
    pub latency_ms: Option<f64>,
    /// Ports.
    pub ports: Vec<PortInfo>,
    /// For callback client nodes: how the client is run (added within v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackNodeInfo>,
    /// Device sinks: frames the device still holds for playback when the driver wakes
    /// (its safety margin), i.e. how long the first sample a cycle writes waits to be
    /// played: JACK's playback latency of a physical port (added within v1; absent for
    /// other nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playback_lead_frames: Option<u64>,
    /// Suspended on its own (a virtual sink): it and the streams it holds do not run
    /// (added within v1; absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
}

/// How a callback client node runs, in [`NodeInfo`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CallbackNodeInfo {
    /// `sync` or `async`.
    pub mode: String,
    /// Whether the client's process thread is active.
    pub active: bool,
    /// Cycles the client was woken.
    pub woken: u64,
    /// Cycles the client missed (counted against it).
    pub xruns: u64,
    /// Runs of consecutive missed cycles (xrun events, as JACK counts them).
    pub xrun_events: u64,
    /// Cycles the server ran early (catching up) and waited for the busy client.
    pub caught_up: u64,
    /// Why the node runs asynchronously: `late`, `hung`, or empty.
    pub async_cause: String,
    /// Times the node went back from asynchronous to synchronous mode.
    pub resynced: u64,
    /// Cycles it was not woken because an upstream node used up the deadline.
    pub skipped: u64,
    /// Mean time the server waited for the client per wake, ns.
    pub wait_avg_ns: u64,
    /// Longest such wait, ns.
    pub wait_max_ns: u64,
    /// The quantum the client asked for, if any.
    pub quantum: Option<u32>,
}

/// Whether a port receives or produces audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortDirection {
    /// Input port (link target).
    In,
    /// Output port (link source).
    Out,
}

/// One port of a [`NodeInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Port id.
    pub id: u32,
    /// Port name, unique within its node.
    pub name: String,
    /// In or out.
    pub direction: PortDirection,
    /// Channel position name (`FL`, `AUX3`, ...).
    pub channel: String,
}

/// One link in [`GraphInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    /// Link id.
    pub id: u32,
    /// Name of the node owning the output port.
    pub output_node: String,
    /// Name of the output port.
    pub output_port: String,
    /// Name of the node owning the input port.
    pub input_node: String,
    /// Name of the input port.
    pub input_port: String,
}

/// Client→server wire message: `{"id": N, "request": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestEnvelope {
    /// Chosen by the client, echoed in the reply.
    pub id: u64,
    /// The request.
    pub request: Request,
}

/// Server→client wire message: `{"id": N, "reply": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyEnvelope {
    /// The id of the request this answers.
    pub id: u64,
    /// The reply.
    pub reply: Reply,
}

#[cfg(test)]
mod tests {

    #[test]
    fn suspended_and_closed_devices_are_idle() {
        let mut d: DeviceStatus = serde_json::from_str(
            r#"{"name":"sim","description":"","state":"running","rate":48000,
                "playback_channels":2,"capture_channels":null,"underruns":0,
                "overruns":0,"wakeups":0}"#,
        )
        .unwrap();
        assert!(!d.is_idle());
        for state in ["suspended", "closed"] {
            d.state = state.into();
            assert!(d.is_idle(), "{state}");
        }
        d.state = "gone".into();
        assert!(!d.is_idle());
    }

    use super::*;
    use serde_json::json;

    fn roundtrip_req(r: Request) {
        let env = RequestEnvelope { id: 7, request: r };
        let s = serde_json::to_string(&env).unwrap();
        let back: RequestEnvelope = serde_json::from_str(&s).unwrap();
        assert_eq!(back, env, "{s}");
    }

    #[test]
    fn request_roundtrips() {
        roundtrip_req(Request::Hello {
            version: 1,
            client_name: "cli".into(),
        });
        roundtrip_req(Request::Status);
        roundtrip_req(Request::Graph);
        let mut p = StreamParams::playback("music", 48000, ChannelMap::stereo());
        p.latency_ms = Some(20.0);
        p.volume = Some(0.5);
        p.target = Some("null".into());
        roundtrip_req(Request::CreateStream(p));
        roundtrip_req(Request::DestroyStream { node: 3 });
        roundtrip_req(Request::Link {
            output: "a:FL".into(),
            input: "b:FL".into(),
        });
        roundtrip_req(Request::Unlink {
            output: "a".into(),
            input: "b".into(),
        });
        roundtrip_req(Request::SetVolume {
            node: "a".into(),
            volume: None,
            mute: Some(true),
        });
    }

    #[test]
    fn wire_shape_is_internally_tagged() {
        let env = RequestEnvelope {
            id: 1,
            request: Request::CreateStream(StreamParams::record("rec", 44100, ChannelMap::mono())),
        };
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(
            v,
            json!({"id": 1, "request": {"type": "create_stream", "direction": "record",
                   "name": "rec", "rate": 44100, "channels": ["Mono"]}})
        );
        let v = serde_json::to_value(RequestEnvelope {
            id: 2,
            request: Request::Status,
        })
        .unwrap();
        assert_eq!(v, json!({"id": 2, "request": {"type": "status"}}));
        let v = serde_json::to_value(ReplyEnvelope {
            id: 2,
            reply: Reply::error(ErrorCode::NoSuchNode, "no node x"),
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"id": 2, "reply": {"type": "error", "code": "no_such_node", "message": "no node x"}})
        );
    }

    #[test]
    fn unknown_fields_in_requests_are_rejected() {
        let s = r#"{"id":1,"request":{"type":"hello","version":1,"client_name":"x","extra":1}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
        let s = r#"{"id":1,"request":{"type":"create_stream","direction":"playback","name":"x",
                    "rate":48000,"channels":["FL","FR"],"latncy_ms":5}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
        let s = r#"{"id":1,"request":{"type":"frobnicate"}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
    }

    #[test]
    fn replies_tolerate_added_fields_and_codes() {
        let s = r#"{"id":1,"reply":{"type":"error","code":"quota_exceeded","message":"m"}}"#;
        let r: ReplyEnvelope = serde_json::from_str(s).unwrap();
        assert_eq!(r.reply, Reply::error(ErrorCode::Unknown, "m"));
        let s = r#"{"id":1,"reply":{"type":"welcome","server_version":"0.1","protocol_version":1,"new":true}}"#;
        assert!(serde_json::from_str::<ReplyEnvelope>(s).is_ok());
    }

    #[test]
    fn status_and_graph_roundtrip() {
        let st = Reply::Status(StatusInfo {
            server_version: "0.1.0".into(),
            protocol_version: 1,
            rate: 48000,
            quantum: 256,
            quantum_min: 32,
            quantum_max: 2048,
            realtime: false,
            scheduling: Box::default(),
            cycles: 10,
            xruns: 0,
            devices: vec![DeviceStatus {
                name: "null".into(),
                description: "Null".into(),
                state: "running".into(),
                rate: 48000,
                playback_channels: Some(2),
                capture_channels: None,
                underruns: 0,
                overruns: 0,
                wakeups: 5,
                margin_frames: 256,
                margin_changes: 0,
            }],
            clients: vec![ClientInfo {
                id: 1,
                name: "cli".into(),
                pid: Some(42),
                streams: vec![3],
            }],
        });
        let s = serde_json::to_string(&st).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), st);
        let g = Reply::Graph(GraphInfo {
            nodes: vec![NodeInfo {
                id: 1,
                name: "null".into(),
                kind: "sink".into(),
                description: "Null sink".into(),
                volume: 1.0,
                mute: false,
                latency_ms: Some(5.3),
                playback_lead_frames: None,
                suspended: false,
                ports: vec![PortInfo {
                    id: 10,
                    name: "FL".into(),
                    direction: PortDirection::In,
                    channel: "FL".into(),
                }],
                callback: Some(CallbackNodeInfo {
                    mode: "async".into(),
                    active: true,
                    woken: 9,
                    xruns: 8,
                    xrun_events: 1,
                    caught_up: 2,
                    async_cause: "hung".into(),
                    resynced: 1,
                    skipped: 1,
                    wait_avg_ns: 1000,
                    wait_max_ns: 5000,
                    quantum: Some(64),
                }),
            }],
            links: vec![LinkInfo {
                id: 4,
                output_node: "music".into(),
                output_port: "FL".into(),
                input_node: "null".into(),
                input_port: "FL".into(),
            }],
        });
        let s = serde_json::to_string(&g).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), g);
        let c = Reply::StreamCreated(StreamCreated {
            node: 3,
            node_name: "music".into(),
            capacity_frames: 4096,
            channels: 2,
            rate: 44100,
            device_rate: 48000,
            quantum: 256,
        });
        let s = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), c);
        assert_eq!(
            serde_json::from_str::<Reply>(r#"{"type":"ok"}"#).unwrap(),
            Reply::Ok
        );
    }

    #[test]
    fn timing_with_nodes_roundtrips_and_older_replies_parse() {
        let t = Reply::Timing(Box::new(TimingStats {
            rate: 48000,
            quantum: 64,
            cycles: 1000,
            xruns: 1,
            lateness_ns_log2: vec![0, 3],
            busy_ns_log2: vec![1],
            lateness_max_ns: 9000,
            busy_max_ns: 40000,
            nodes: vec![NodeTimingInfo {
                id: 7,
                name: "synth".into(),
                kind: "client".into(),
                quantum: 64,
                quantum_requested: Some(64),
                rate: 48000,
                cycles: 750,
                wait_avg_ns: 21000,
                wait_max_ns: 80000,
                busy_avg_ns: 110000,
                busy_max_ns: 400000,
                rt_avg_ns: 130000,
                rt_max_ns: 500000,
                xruns: 2,
            }],
            interval_ns: 1_000_000_000,
            suspended: false,
            overdue_cycles: 0,
            overdue_runs: 0,
        }));
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), t);
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["nodes"][0]["busy_avg_ns"], 110000);
        assert_eq!(v["nodes"][0]["wait_max_ns"], 80000);
        // A server from before per-node timing: no nodes, no interval.
        let old = r#"{"type":"timing","rate":48000,"quantum":256,"cycles":5,"xruns":0,
                      "lateness_ns_log2":[],"busy_ns_log2":[],"lateness_max_ns":0,"busy_max_ns":0}"#;
        match serde_json::from_str::<Reply>(old).unwrap() {
            Reply::Timing(t) => assert!(t.nodes.is_empty() && t.interval_ns == 0 && !t.suspended),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn callback_messages_roundtrip_and_validate() {
        let mut p = CallbackParams::new("synth");
        p.outputs.push(PortParams {
            name: "out_L".into(),
            channel: Some(ChannelPosition::FL),
        });
        p.inputs.push(PortParams::new("midi_in"));
        p.max_inputs = Some(4);
        p.quantum = Some(64);
        assert!(p.validate().is_ok());
        roundtrip_req(Request::CreateCallback(p.clone()));
        roundtrip_req(Request::AddPort {
            node: 3,
            direction: PortDirection::Out,
            name: "aux".into(),
            channel: None,
        });
        roundtrip_req(Request::RemovePort { node: 3, port: 9 });
        roundtrip_req(Request::Watch);
        let ev = Reply::Event(GraphEvent {
            event: "links_changed".into(),
            node: None,
        });
        let s = serde_json::to_string(&ev).unwrap();
        assert_eq!(s, r#"{"type":"event","event":"links_changed"}"#);
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), ev);
        roundtrip_req(Request::SetQuantum {
            node: 3,
            quantum: Some(128),
        });
        roundtrip_req(Request::SetQuantum {
            node: 3,
            quantum: None,
        });
        let v = serde_json::to_value(RequestEnvelope {
            id: 1,
            request: Request::CreateCallback(CallbackParams::new("x")),
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"id": 1, "request": {"type": "create_callback", "name": "x"}})
        );
        let bad = |f: &dyn Fn(&mut CallbackParams)| {
            let mut q = p.clone();
            f(&mut q);
            q.validate().unwrap_err()
        };
        assert!(bad(&|q| q.name = String::new()).contains("name"));
        assert!(bad(&|q| q.outputs[0].name = "a:b".into()).contains("':'"));
        assert!(bad(&|q| q.outputs[0].name = "midi_in".into()).contains("twice"));
        assert!(bad(&|q| q.outputs[0].name = "n".repeat(129)).contains("128"));
        assert!(bad(&|q| q.max_inputs = Some(MAX_CALLBACK_PORTS + 1)).contains("inputs"));
        assert!(bad(&|q| q.quantum = Some(0)).contains("quantum"));
        assert!(bad(&|q| q.quantum = Some(MAX_QUANTUM + 1)).contains("quantum"));
        assert!(
            Request::SetQuantum {
                node: 1,
                quantum: Some(0)
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::AddPort {
                node: 1,
                direction: PortDirection::In,
                name: "x:y".into(),
                channel: None
            }
            .validate()
            .is_err()
        );
        let s = r#"{"id":1,"request":{"type":"create_callback","name":"x","latency":5}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
        let created = Reply::CallbackCreated(CallbackCreated {
            node: 3,
            node_name: "synth".into(),
            rate: 48000,
            quantum: 64,
            max_frames: 8192,
            max_inputs: 4,
            max_outputs: 1,
            ports: vec![CallbackPort {
                id: 5,
                name: "out_L".into(),
                direction: PortDirection::Out,
                index: 0,
                channel: "FL".into(),
            }],
            deadline: 0.8,
            async_after: 8,
            hung_ms: 250,
            recover_ms: 5000,
        });
        let s = serde_json::to_string(&created).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), created);
        // Older graph replies (no callback field) still parse.
        let s = r#"{"type":"graph","nodes":[{"id":1,"name":"n","kind":"sink","description":"",
                    "volume":1.0,"mute":false,"latency_ms":null,"ports":[]}],"links":[]}"#;
        match serde_json::from_str::<Reply>(s).unwrap() {
            Reply::Graph(g) => assert_eq!(g.nodes[0].callback, None),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn stream_params_validation() {
        let ok = StreamParams::playback("x", 48000, ChannelMap::stereo());
        assert!(ok.validate().is_ok());
        let bad = |f: &dyn Fn(&mut StreamParams)| {
            let mut p = ok.clone();
            f(&mut p);
            p.validate().unwrap_err()
        };
        assert!(bad(&|p| p.rate = 0).contains("rate"));
        assert!(bad(&|p| p.rate = 384_001).contains("rate"));
        assert!(bad(&|p| p.channels = ChannelMap(vec![])).contains("channels"));
        assert!(bad(&|p| p.channels = ChannelMap::default_for(65)).contains("channels"));
        assert!(
            bad(&|p| p.channels = ChannelMap(vec![ChannelPosition::FL, ChannelPosition::FL]))
                .contains("twice")
        );
        assert!(bad(&|p| p.latency_ms = Some(0.0)).contains("latency"));
        assert!(bad(&|p| p.latency_ms = Some(f64::NAN)).contains("latency"));
        assert!(bad(&|p| p.latency_ms = Some(10_000.5)).contains("latency"));
        assert!(bad(&|p| p.volume = Some(f32::INFINITY)).contains("volume"));
        assert!(bad(&|p| p.volume = Some(-0.1)).contains("volume"));
        assert!(bad(&|p| p.volume = Some(10.5)).contains("volume"));
        assert!(bad(&|p| p.name = "n".repeat(257)).contains("name"));
        assert!(bad(&|p| p.name = String::new()).contains("name"));
        assert!(bad(&|p| p.name = "a\nb".into()).contains("control"));
        assert!(bad(&|p| p.monitor_of = Some("sink".into())).contains("record"));
        let mut p = ok.clone();
        p.latency_ms = Some(10_000.0);
        p.volume = Some(10.0);
        p.channels = ChannelMap::default_for(64);
        p.rate = 384_000;
        p.name = "n".repeat(256);
        assert!(p.validate().is_ok());
    }

    #[test]
    fn request_validation() {
        assert!(
            Request::SetVolume {
                node: "x".into(),
                volume: None,
                mute: None
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::SetVolume {
                node: "x".into(),
                volume: Some(f32::NAN),
                mute: None
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::Link {
                output: String::new(),
                input: "b".into()
            }
            .validate()
            .is_err()
        );
    }
}
