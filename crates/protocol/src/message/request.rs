//! Requests from client to server and their range checks.

use super::callback::CallbackParams;
use super::graph::{PortDirection, PortType};
use super::latency::LatencyRange;
use super::limits::{MAX_QUANTUM, check_name, check_port_name, check_volume};
use super::meta::{PropertyValue, check_alias, check_key, check_property};
use super::session::{SessionEventType, check_session_command, check_session_path};
use super::stream::StreamParams;
use quaver_dsp::ChannelPosition;
use serde::{Deserialize, Serialize};

/// Longest sync timeout a client may set, µs (an hour).
pub const MAX_SYNC_TIMEOUT_US: u64 = 3_600_000_000;

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
    /// Asks for [`StatusInfo`](super::StatusInfo).
    Status,
    /// Asks for [`ServerProcess`](super::ServerProcess): the daemon's pid, how it was
    /// started, its configuration file and settings warnings (`quaver doctor`).
    Process,
    /// Asks for [`TimingStats`](super::TimingStats): the real-time thread's wakeup lateness and busy time.
    Timing,
    /// Asks for [`GraphInfo`](super::GraphInfo).
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
        /// What the port carries (default audio).
        #[serde(default, skip_serializing_if = "PortType::is_audio")]
        port_type: PortType,
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
    /// Forces the graph's quantum (frames) for every node, overriding latency and
    /// quantum requests, until released with `None`; it stays after this connection
    /// closes. The server refuses a value that is not a power of two or outside its
    /// bounds (`bad_request`). JACK's `jack_set_buffer_size`.
    ForceQuantum {
        /// The quantum to force; `None` releases it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quantum: Option<u32>,
    },
    /// Asks for [`QuantumReport`](super::QuantumReport): the quantum in force and why.
    Quantum,
    /// Starts (`on`) or stops JACK's freewheel: the graph runs as fast as its clients
    /// allow, detached from the devices. A server setting: it stays after this
    /// connection closes. JACK's `jack_set_freewheel`.
    SetFreewheel {
        /// Freewheel on or off.
        on: bool,
    },
    /// Turns this connection into a one-way event stream: the server answers `Ok`, then
    /// sends an `Event` reply (id 0) after every graph or device change and reads no
    /// further requests. Open another connection for requests.
    Watch,
    /// Changes a control of one filter in the chain on a sink (gain, a biquad's
    /// frequency, ...); the filter ramps or crossfades to it. Answered by `Ok`.
    SetFilterControl {
        /// The sink: node name or numeric id as a string.
        node: String,
        /// The filter's position in the chain, from 0.
        index: u32,
        /// The control's name (e.g. `gain_db`).
        control: String,
        /// The new value.
        value: f64,
    },
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
    /// Starts the JACK transport (at the next cycle start, through starting).
    TransportStart,
    /// Stops the JACK transport.
    TransportStop,
    /// Moves the JACK transport to `frame` (a JACK frame: at most `u32::MAX`).
    TransportLocate {
        /// Transport frame.
        frame: u64,
    },
    /// Asks for [`TransportInfo`](super::TransportInfo).
    TransportQuery,
    /// Makes a callback node of this connection the timebase master; `conditional`
    /// fails with `busy` while another node is.
    SetTimebase {
        /// Node id.
        node: u32,
        /// Only if there is no master.
        #[serde(default)]
        conditional: bool,
    },
    /// Gives up the timebase (`bad_request` when the node is not the master).
    ReleaseTimebase {
        /// Node id.
        node: u32,
    },
    /// How long slow-sync clients may hold a start, µs (JACK's default: 2 s).
    SetSyncTimeout {
        /// Microseconds, at most an hour.
        usecs: u64,
    },
    /// Sets a metadata property on a node's or a port's UUID (docs/protocol/metadata.md);
    /// answered by `Ok`.
    SetProperty {
        /// The UUID of the node or port.
        subject: u64,
        /// The key.
        key: String,
        /// The value.
        value: PropertyValue,
        /// The type (MIME type or URI); absent means text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value_type: Option<String>,
    },
    /// Asks for the properties of one subject, or of every subject; answered by
    /// `Properties`.
    GetProperties {
        /// The subject; absent for all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subject: Option<u64>,
    },
    /// Removes one property of a subject, or all of its properties (no key); answered
    /// by `Removed`.
    RemoveProperty {
        /// The subject.
        subject: u64,
        /// The key; absent for every key of the subject.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    /// Removes every property of every subject; answered by `Removed`.
    RemoveAllProperties,
    /// Gives a port an alias (at most two per port); answered by `Ok`.
    SetAlias {
        /// The port id.
        port: u32,
        /// The alias.
        alias: String,
    },
    /// Asks for every port's aliases; answered by `Aliases`.
    Aliases,
    /// Takes an alias away from a port; answered by `Ok`.
    UnsetAlias {
        /// The port id.
        port: u32,
        /// The alias.
        alias: String,
    },
    /// Publishes the latency ranges of a port of one of this connection's callback
    /// nodes (JACK's `jack_port_set_latency_range`); answered by `Ok`, and a `latency`
    /// event to every watcher when they changed.
    SetPortLatency {
        /// The port id.
        port: u32,
        /// Its capture latency.
        capture: LatencyRange,
        /// Its playback latency.
        playback: LatencyRange,
    },
    /// Asks for every published port latency; answered by `PortLatencies`.
    PortLatencies,
    /// Says whether a callback node of this connection has a JACK session callback
    /// (only those are notified); answered by `Ok`.
    SetSessionCallback {
        /// The node.
        node: u32,
        /// True when it has one.
        on: bool,
    },
    /// Asks whether the client (node) `name` has a session callback; answered by
    /// `HasSessionCallback`.
    HasSessionCallback {
        /// The client name.
        name: String,
    },
    /// A session manager's notify: every client with a session callback (or only
    /// `target`) gets a `session` event with its directory under `path`; answered by
    /// `SessionCommands` once each replied (or went away, or timed out).
    SessionNotify {
        /// One client's name, or every client with a session callback.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// What to do.
        kind: SessionEventType,
        /// The session directory, absolute, ending in `/`.
        path: String,
    },
    /// A notified client's answer; answered by `Ok`.
    SessionReply {
        /// The client's callback node.
        node: u32,
        /// The command line that restores it.
        command: String,
        /// `SESSION_SAVE_ERROR`, `SESSION_NEED_TERMINAL`.
        flags: u32,
    },
}

impl Request {
    /// Checks value ranges the type system cannot express; the server calls this
    /// before acting on a request.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Request::Hello { client_name, .. } => check_name("client_name", client_name),
            Request::Status
            | Request::Process
            | Request::Timing
            | Request::Graph
            | Request::Quantum
            | Request::SetFreewheel { .. }
            | Request::DestroyStream { .. } => Ok(()),
            Request::CreateStream(p) => p.validate(),
            Request::CreateCallback(p) => p.validate(),
            Request::AddPort { name, .. } => check_port_name("name", name),
            Request::RemovePort { .. } | Request::Watch => Ok(()),
            Request::TransportStart
            | Request::TransportStop
            | Request::TransportQuery
            | Request::SetTimebase { .. }
            | Request::ReleaseTimebase { .. } => Ok(()),
            Request::TransportLocate { frame } => {
                if *frame > u32::MAX as u64 {
                    Err(format!(
                        "frame {frame} is beyond JACK's 32-bit frame range (EINVAL)"
                    ))
                } else {
                    Ok(())
                }
            }
            Request::SetSyncTimeout { usecs } => {
                if *usecs > MAX_SYNC_TIMEOUT_US {
                    Err(format!(
                        "sync timeout {usecs} µs is over the limit of {MAX_SYNC_TIMEOUT_US}"
                    ))
                } else {
                    Ok(())
                }
            }
            Request::SetQuantum { quantum, .. } | Request::ForceQuantum { quantum } => {
                match quantum {
                    Some(q) if !(1..=MAX_QUANTUM).contains(q) => {
                        Err(format!("quantum {q} out of range 1..={MAX_QUANTUM}"))
                    }
                    _ => Ok(()),
                }
            }
            Request::Link { output, input } | Request::Unlink { output, input } => {
                check_name("output", output)?;
                check_name("input", input)
            }
            Request::SetProperty {
                key,
                value,
                value_type,
                ..
            } => check_property(key, value, value_type.as_deref()),
            Request::GetProperties { .. }
            | Request::RemoveAllProperties
            | Request::Aliases
            | Request::PortLatencies => Ok(()),
            Request::SetSessionCallback { .. } => Ok(()),
            Request::HasSessionCallback { name } => check_name("name", name),
            Request::SessionNotify { target, path, .. } => {
                if let Some(t) = target {
                    check_name("target", t)?;
                }
                check_session_path(path)
            }
            Request::SessionReply { command, .. } => check_session_command(command),
            Request::SetPortLatency {
                capture, playback, ..
            } => {
                capture.check("capture")?;
                playback.check("playback")
            }
            Request::RemoveProperty { key, .. } => key.as_deref().map_or(Ok(()), check_key),
            Request::SetAlias { alias, .. } | Request::UnsetAlias { alias, .. } => {
                check_alias(alias)
            }
            Request::SetFilterControl {
                node,
                control,
                value,
                ..
            } => {
                check_name("node", node)?;
                check_name("control", control)?;
                if value.is_finite() {
                    Ok(())
                } else {
                    Err(format!("control value {value} is not a finite number"))
                }
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
            Request::Process => "process",
            Request::Timing => "timing",
            Request::Graph => "graph",
            Request::CreateStream(_) => "create_stream",
            Request::DestroyStream { .. } => "destroy_stream",
            Request::Link { .. } => "link",
            Request::Unlink { .. } => "unlink",
            Request::SetVolume { .. } => "set_volume",
            Request::SetFilterControl { .. } => "set_filter_control",
            Request::CreateCallback(_) => "create_callback",
            Request::AddPort { .. } => "add_port",
            Request::RemovePort { .. } => "remove_port",
            Request::SetQuantum { .. } => "set_quantum",
            Request::ForceQuantum { .. } => "force_quantum",
            Request::Quantum => "quantum",
            Request::SetFreewheel { .. } => "set_freewheel",
            Request::Watch => "watch",
            Request::TransportStart => "transport_start",
            Request::TransportStop => "transport_stop",
            Request::TransportLocate { .. } => "transport_locate",
            Request::TransportQuery => "transport_query",
            Request::SetTimebase { .. } => "set_timebase",
            Request::ReleaseTimebase { .. } => "release_timebase",
            Request::SetSyncTimeout { .. } => "set_sync_timeout",
            Request::SetProperty { .. } => "set_property",
            Request::GetProperties { .. } => "get_properties",
            Request::RemoveProperty { .. } => "remove_property",
            Request::RemoveAllProperties => "remove_all_properties",
            Request::SetAlias { .. } => "set_alias",
            Request::Aliases => "aliases",
            Request::UnsetAlias { .. } => "unset_alias",
            Request::SetPortLatency { .. } => "set_port_latency",
            Request::PortLatencies => "port_latencies",
            Request::SetSessionCallback { .. } => "set_session_callback",
            Request::HasSessionCallback { .. } => "has_session_callback",
            Request::SessionNotify { .. } => "session_notify",
            Request::SessionReply { .. } => "session_reply",
        }
    }
}
