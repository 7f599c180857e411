//! Requests from client to server and their range checks.

use super::callback::CallbackParams;
use super::graph::{PortDirection, PortType};
use super::limits::{MAX_QUANTUM, check_name, check_port_name, check_volume};
use super::stream::StreamParams;
use quaver_dsp::ChannelPosition;
use serde::{Deserialize, Serialize};

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
