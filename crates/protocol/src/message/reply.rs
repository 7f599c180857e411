//! Replies from server to client, their error codes, and the graph events sent to
//! watching connections.

use super::callback::{CallbackCreated, CallbackPort};
use super::graph::GraphInfo;
use super::latency::PortLatency;
use super::meta::{PortAliases, Property, PropertyEvent};
use super::quantum::QuantumReport;
use super::session::{SessionCommand, SessionEvent};
use super::status::{StatusInfo, TimingStats};
use super::stream::StreamCreated;
use super::transport::TransportInfo;
use serde::{Deserialize, Serialize};
use std::fmt;

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
    /// Someone else holds it (JACK's `EBUSY`: another timebase master).
    Busy,
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
            ErrorCode::Busy => "busy",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// Answer to `Process`.
    Process(super::process::ServerProcess),
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
    /// Answer to `TransportQuery`.
    Transport(TransportInfo),
    /// Answer to `Quantum`.
    Quantum(QuantumReport),
    /// Sent unsolicited (id 0) on a connection that asked to `Watch`.
    Event(GraphEvent),
    /// Answer to `GetProperties`.
    Properties {
        /// The properties, by subject then key.
        properties: Vec<Property>,
    },
    /// Answer to `Aliases`.
    Aliases {
        /// The ports that have aliases.
        ports: Vec<PortAliases>,
    },
    /// Answer to `PortLatencies`.
    PortLatencies {
        /// The ports whose owner published their latency.
        ports: Vec<PortLatency>,
    },
    /// Answer to `SessionNotify`: one entry per notified client.
    SessionCommands {
        /// What each client answered.
        commands: Vec<SessionCommand>,
    },
    /// Answer to `HasSessionCallback`.
    HasSessionCallback {
        /// True if the client has a session callback.
        has: bool,
    },
    /// Answer to `RemoveProperty` and `RemoveAllProperties`.
    Removed {
        /// How many properties were removed.
        count: u32,
    },
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
            Reply::Process(_) => "process",
            Reply::Timing(_) => "timing",
            Reply::Graph(_) => "graph",
            Reply::StreamCreated(_) => "stream_created",
            Reply::CallbackCreated(_) => "callback_created",
            Reply::PortAdded(_) => "port_added",
            Reply::Transport(_) => "transport",
            Reply::Quantum(_) => "quantum",
            Reply::Event(_) => "event",
            Reply::Properties { .. } => "properties",
            Reply::Removed { .. } => "removed",
            Reply::Aliases { .. } => "aliases",
            Reply::PortLatencies { .. } => "port_latencies",
            Reply::SessionCommands { .. } => "session_commands",
            Reply::HasSessionCallback { .. } => "has_session_callback",
            Reply::Ok => "ok",
            Reply::Error { .. } => "error",
        }
    }
}

/// A change in the graph or the devices, sent to watching connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphEvent {
    /// `node_added`, `node_removed`, `node_changed` (volume, mute, ports, latency
    /// request), `links_changed`, `suspended`, `resumed`, `property` (with
    /// `property`) or `latency` (a port of `node` published new latency ranges) or `session` (with
    /// `session`: a session manager's notify for `node`);
    /// clients ignore kinds they do not know.
    pub event: String,
    /// The node concerned, for node events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// For `property` events: what changed (added within v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub property: Option<PropertyEvent>,
    /// For `session` events: what `node` is asked to do (added within v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionEvent>,
}
