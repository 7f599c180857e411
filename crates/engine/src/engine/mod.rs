//! The engine's control API: graph edits, volume, status, start and shutdown.
//!
//! Thread: every method here is for control threads (protocol front-ends, policy, the
//! daemon). Edits lock a control-side mutex that the real-time thread never touches.
//!
//! - `handle.rs`: the [`Engine`] handle, its control state, and publishing plans;
//! - `build.rs`: building and starting an engine, the service thread, shutdown;
//! - `edit.rs`: graph edits;
//! - `devices.rs`: devices added and removed while the engine runs;
//! - `filters.rs`: filter chains on device sinks and client streams, and their live
//!   controls;
//! - `freewheel.rs`: JACK's freewheel, and the RT thread's scheduling meanwhile;
//! - `quantum.rs`: the forced quantum and why the quantum in force is what it is;
//! - `status.rs`: reading the graph, status and per-node timing;
//! - [`config`] and [`report`]: the types going in and coming out.

mod build;
pub mod config;
mod devices;
mod edit;
mod filters;
mod freewheel;
mod handle;
mod hwvol;
mod quantum;
pub mod report;
mod status;

pub use config::EngineConfig;
pub use edit::MAX_PORTS_PER_NODE;
pub use handle::Engine;
pub use quantum::{QuantumInfo, QuantumSource};
pub use report::{DeviceStatus, EngineStatus, FollowStatus, GraphEvent, NodeTiming};
