//! Callback (JACK-style) client messages: the node and ports a client asks for and
//! the server's answers.

use super::graph::{PortDirection, PortType};
use super::limits::{MAX_CALLBACK_PORTS, MAX_QUANTUM, check_name, check_port_name};
use quaver_dsp::ChannelPosition;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// A port of a new callback node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortParams {
    /// Port name, unique within the node (no ':').
    pub name: String,
    /// Channel position (default `AUX<index>`); whole-node links match positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<ChannelPosition>,
    /// What the port carries (default audio).
    #[serde(default, skip_serializing_if = "PortType::is_audio")]
    pub port_type: PortType,
}

impl PortParams {
    /// An audio port with the default position.
    pub fn new(name: impl Into<String>) -> Self {
        PortParams {
            name: name.into(),
            channel: None,
            port_type: PortType::Audio,
        }
    }

    /// A MIDI port.
    pub fn midi(name: impl Into<String>) -> Self {
        PortParams {
            port_type: PortType::Midi,
            ..PortParams::new(name)
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
    /// What it carries (absent from older servers: audio).
    #[serde(default, skip_serializing_if = "PortType::is_audio")]
    pub port_type: PortType,
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
