//! The engine's control API: graph edits, volume, status, start and shutdown.
//!
//! Thread: every method here is for control threads (protocol front-ends, policy, the
//! daemon). Edits lock a control-side mutex that the real-time thread never touches.
//!
//! - [`handle`]: the [`Engine`] handle, its control state, and publishing plans;
//! - [`build`]: building and starting an engine, the service thread, shutdown;
//! - [`edit`]: graph edits;
//! - [`status`]: reading the graph, status and per-node timing;
//! - [`config`] and [`report`]: the types going in and coming out.

pub mod build;
pub mod config;
pub mod edit;
pub mod handle;
pub mod report;
pub mod status;

pub use config::EngineConfig;
pub use edit::MAX_PORTS_PER_NODE;
pub use handle::Engine;
pub use report::{DeviceStatus, EngineStatus, GraphEvent, NodeTiming};
