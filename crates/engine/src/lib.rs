//! quaver's graph engine.
//!
//! Two layers. At the bottom, [`rt`]: the real-time thread that swaps plans at cycle
//! boundaries and runs them, the plan data, the processor trait, timing and scheduling
//! (its module docs state the real-time contract); it imports nothing above it. Above
//! it, the control side:
//!
//! - [`graph`]: the control side's description (nodes, typed ports, links), validated.
//! - [`compile`]: the description compiled into an immutable execution plan.
//! - [`feedback`]: links that close a loop (one quantum late) and the processing order
//!   that leaves them out.
//! - [`engine`]: the control API that protocol front-ends and policy use.
//! - [`stream`]: adapters that turn a client's interleaved ring into graph ports.
//! - [`midi`]: MIDI ports' event lists (merge, gain that spares them).
//! - [`callback`]: nodes whose processing runs in a client process (JACK-style
//!   callbacks), with deadlines, xrun accounting and asynchronous fallback.
//! - [`filter`]: filter chains as a node's processor, on a device's sink node or alone.
//!
//! The engine knows DSP and the device trait; it never knows a protocol.

pub mod callback;
pub mod compile;
pub mod echo;
pub mod engine;
pub mod feedback;
pub mod filter;
pub mod graph;
pub mod rt;
pub mod stream;

/// The RT core's modules under their old paths.
pub use rt::{follow, midi, node, sched, timing};

pub use callback::{
    AsyncCause, CallbackConfig, CallbackMode, CallbackNode, CallbackStats, CallbackTransport,
};
pub use engine::{
    DeviceStatus, Engine, EngineConfig, EngineStatus, FollowStatus, GraphEvent, NodeTiming,
    QuantumInfo, QuantumSource,
};
pub use graph::{Direction, Graph, LinkId, NodeId, NodeKind, NodeSpec, PortId, PortType};
pub use quaver_devices::hwvol::{HardwareVolume, HwVolumeInfo};
pub use quaver_devices::{NetStatus, RtpRecvStatus, RtpSendStatus};
pub use rt::msg::RtEvent;
pub use rt::node::{CycleInfo, Processor};
pub use rt::runner::RtRunner;
pub use rt::sched::{MemoryLock, RtOutcome, Scheduler};
pub use rt::timing::RemoteTimes;

/// Why an engine operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No node with that name or id.
    #[error("no node named '{0}'")]
    NoSuchNode(String),
    /// No port with that name.
    #[error("no port named '{0}'")]
    NoSuchPort(String),
    /// No link between the given ends.
    #[error("no link {0}")]
    NoSuchLink(String),
    /// The ports cannot be linked.
    #[error("{0}")]
    Incompatible(String),
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
    /// A configured limit was reached.
    #[error("{0}")]
    TooMany(String),
    /// The real-time thread's queue is full.
    #[error("{0}")]
    Busy(String),
    /// Bad engine configuration.
    #[error("{0}")]
    Config(String),
    /// An OS error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A device error.
    #[error(transparent)]
    Device(#[from] quaver_devices::DeviceError),
}
