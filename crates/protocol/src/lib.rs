//! quaver's native protocol, version 1.
//!
//! Three layers, each usable on its own:
//! - [`message`]: the JSON control messages (requests, replies, envelopes);
//! - [`framing`]: length-prefixed frames over a Unix stream socket, with file
//!   descriptors attached through `SCM_RIGHTS`;
//! - [`shm`]: the per-stream audio ring in a sealed memfd plus its eventfd doorbell;
//! - [`callback`]: the port buffers and wakeups of callback (JACK-style) clients.
//!
//! [`paths`] says where the server's socket lives. The wire format is described in
//! `docs/protocol.md`.

#![warn(missing_docs)]

pub mod callback;
pub mod framing;
pub mod message;
pub mod midi;
pub mod paths;
pub mod shm;

pub use callback::{CallbackGeometry, CallbackShm, CycleHeader, EventBell};
pub use framing::{Frame, FrameError, FramedSocket, MAX_FDS, MAX_MESSAGE_BYTES, ProtocolError};
pub use message::{
    CallbackCreated, CallbackNodeInfo, CallbackParams, CallbackPort, ClientInfo, DeviceStatus,
    Direction, ErrorCode, GraphEvent, GraphInfo, LinkInfo, NodeInfo, NodeTimingInfo,
    PROTOCOL_VERSION, PortDirection, PortInfo, PortParams, QuantumReport, Reply, ReplyEnvelope,
    Request, RequestEnvelope, StageClass, StageStats, StatusInfo, StreamCreated, StreamParams,
    TimingStats,
};
pub use quaver_dsp::{ChannelMap, ChannelPosition};
pub use shm::{Doorbell, ShmError, ShmRing};
