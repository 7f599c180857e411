//! The records of loaded modules, which the front-end's state keeps: below the state,
//! so it does not import `modules` (which loads them and needs the state).

use crate::io::shared::Acceptor;
use quaver_engine::NodeId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

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
    pub pipe: Option<Arc<crate::pipe::PipeOut>>,
    /// A pipe source's reader.
    pub pipe_in: Option<Arc<crate::pipe::PipeIn>>,
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
    pub(crate) fn new(name: &str, argument: &str) -> ModuleRec {
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

/// The source-output side of a loopback: its volume and mute as last set, and the
/// gain they make, which the loop's processor reads each cycle.
#[derive(Debug)]
pub struct LoopCapture {
    /// Linear volume and mute as set (reported back as the source output's).
    pub set: std::sync::Mutex<(f32, bool)>,
    /// `f32` bits of the gain in effect: the volume, or 0 when muted.
    pub(crate) gain: AtomicU32,
}

impl LoopCapture {
    /// Volume 1 and unmuted.
    pub(crate) fn new() -> Self {
        LoopCapture {
            set: std::sync::Mutex::new((1.0, false)),
            gain: AtomicU32::new(1.0f32.to_bits()),
        }
    }

    /// Sets the volume (linear) and/or the mute; the loop follows within a ramp.
    pub fn update(&self, volume: Option<f32>, mute: Option<bool>) {
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = volume {
            set.0 = v;
        }
        if let Some(m) = mute {
            set.1 = m;
        }
        let gain = if set.1 { 0.0 } else { set.0 };
        self.gain.store(gain.to_bits(), Ordering::Relaxed);
    }

    /// The volume (linear) and mute as set.
    pub fn get(&self) -> (f32, bool) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner())
    }
}
