//! The record of a loaded module, and the indexes of the pseudo-modules that stand for
//! quaverd's own parts.

use super::nodes::LoopCapture;
use super::pipe::{PipeIn, PipeOut};
use super::tunnel::handle::Tunnel;
use crate::io::shared::Acceptor;
use quaver_engine::NodeId;
use std::sync::Arc;

/// Index of the pseudo-module standing for this front-end.
pub const PROTOCOL_MODULE: u32 = 0;
/// Index of the pseudo-module owning the engine's devices.
pub const DEVICES_MODULE: u32 = 1;
/// Index of the pseudo-module standing for stream restore ([`crate::restore`]).
pub const RESTORE_MODULE: u32 = 2;
/// Index of the pseudo-module standing for device restore's extension
/// ([`crate::devrestore`]).
pub const DEVICE_RESTORE_MODULE: u32 = 3;
/// First index of loaded modules.
pub const FIRST_LOADED: u32 = 4;

/// A loaded module.
#[derive(Debug, Clone)]
pub struct ModuleRec {
    /// Module name.
    pub name: String,
    /// Its argument string as given.
    pub argument: String,
    /// The graph nodes it created.
    pub nodes: Vec<NodeId>,
    /// Links it made between existing nodes ("node" or "node:port" ends).
    pub links: Vec<(String, String)>,
    /// The listener a protocol module added.
    pub acceptor: Option<Arc<Acceptor>>,
    /// A loopback's capture side: the source output's volume and mute.
    pub capture: Option<Arc<LoopCapture>>,
    /// Nodes it cannot do without (a remap's master): when one goes, the module is
    /// unloaded, as PulseAudio's unload themselves (a loopback goes with the source it
    /// records, whichever that is after moves).
    pub needs: Vec<NodeId>,
    /// A pipe sink's writer.
    pub pipe: Option<Arc<PipeOut>>,
    /// A pipe source's reader.
    pub pipe_in: Option<Arc<PipeIn>>,
    /// module-echo-cancel's pair (its worker is stopped on unload).
    pub echo: Option<quaver_engine::echo::EchoPair>,
    /// A tunnel's network thread (stopped on unload).
    pub tunnel: Option<Arc<Tunnel>>,
    /// module-suspend-on-idle: unloading it stops idle suspends.
    pub idle_suspend: bool,
    /// A loopback's `sink_dont_move`: its sink input cannot be moved, and it is
    /// unloaded when its sink goes.
    pub sink_dont_move: bool,
    /// A loopback's `source_dont_move`: its source output cannot be moved.
    pub source_dont_move: bool,
}

/// The module PulseAudio suspends idle devices with; quaverd lists it (as loaded at
/// start) when the engine has an idle timeout, so the common recipes work: unloading it
/// keeps the devices open (no wake-up pops), loading it with `timeout=N` sets the
/// timeout.
pub const SUSPEND_ON_IDLE: &str = "module-suspend-on-idle";

impl ModuleRec {
    /// A module `name` loaded with `argument` that has made nothing yet.
    pub(super) fn new(name: &str, argument: &str) -> ModuleRec {
        ModuleRec {
            name: name.to_string(),
            argument: argument.to_string(),
            nodes: Vec::new(),
            links: Vec::new(),
            acceptor: None,
            capture: None,
            needs: Vec::new(),
            pipe: None,
            pipe_in: None,
            echo: None,
            tunnel: None,
            idle_suspend: false,
            sink_dont_move: false,
            source_dont_move: false,
        }
    }

    /// The record of module-suspend-on-idle with `argument`.
    pub fn suspend_on_idle(argument: &str) -> ModuleRec {
        ModuleRec {
            idle_suspend: true,
            ..ModuleRec::new(SUSPEND_ON_IDLE, argument)
        }
    }
}
