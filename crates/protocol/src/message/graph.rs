//! What `graph` reports: nodes, their ports and the links between them.

use serde::{Deserialize, Serialize};

/// The processing graph for `quaver graph`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphInfo {
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
    /// Links.
    pub links: Vec<LinkInfo>,
}

/// One node in [`GraphInfo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node id.
    pub id: u32,
    /// Unique node name.
    pub name: String,
    /// Kind, e.g. `sink`, `source`, `playback`, `record`, `monitor`, `filter`.
    pub kind: String,
    /// Human-readable description.
    pub description: String,
    /// Linear volume.
    pub volume: f32,
    /// Mute state.
    pub mute: bool,
    /// Latency the node contributes, when known.
    pub latency_ms: Option<f64>,
    /// Ports.
    pub ports: Vec<PortInfo>,
    /// For callback client nodes: how the client is run (added within v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackNodeInfo>,
    /// Device sinks: frames the device still holds for playback when the driver wakes
    /// (its safety margin), i.e. how long the first sample a cycle writes waits to be
    /// played: JACK's playback latency of a physical port (added within v1; absent for
    /// other nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub playback_lead_frames: Option<u64>,
    /// Suspended on its own (a virtual sink): it and the streams it holds do not run
    /// (added within v1; absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Its ports stand for hardware outside the graph, as a device's do (the ALSA
    /// sequencer's MIDI ports): JACK shows them physical and terminal (added within v1;
    /// absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub physical: bool,
}

/// How a callback client node runs, in [`NodeInfo`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CallbackNodeInfo {
    /// `sync` or `async`.
    pub mode: String,
    /// Whether the client's process thread is active.
    pub active: bool,
    /// Cycles the client was woken.
    pub woken: u64,
    /// Cycles the client missed (counted against it).
    pub xruns: u64,
    /// Runs of consecutive missed cycles (xrun events, as JACK counts them).
    pub xrun_events: u64,
    /// Cycles the server ran early (catching up) and waited for the busy client.
    pub caught_up: u64,
    /// Why the node runs asynchronously: `late`, `hung`, or empty.
    pub async_cause: String,
    /// Times the node went back from asynchronous to synchronous mode.
    pub resynced: u64,
    /// Cycles it was not woken because an upstream node used up the deadline.
    pub skipped: u64,
    /// Mean time the server waited for the client per wake, ns.
    pub wait_avg_ns: u64,
    /// Longest such wait, ns.
    pub wait_max_ns: u64,
    /// The quantum the client asked for, if any.
    pub quantum: Option<u32>,
}

/// Whether a port receives or produces audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortDirection {
    /// Input port (link target).
    In,
    /// Output port (link source).
    Out,
}

/// What a port carries (added within v1; absent means audio).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortType {
    /// One channel of f32 audio.
    #[default]
    Audio,
    /// Timestamped MIDI events (`docs/protocol/callback.md`, "MIDI ports").
    Midi,
}

impl PortType {
    /// True for audio (the default, left out of messages).
    pub fn is_audio(&self) -> bool {
        *self == PortType::Audio
    }

    /// `"audio"` or `"midi"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PortType::Audio => "audio",
            PortType::Midi => "midi",
        }
    }
}

/// One port of a [`NodeInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// Port id.
    pub id: u32,
    /// Port name, unique within its node.
    pub name: String,
    /// In or out.
    pub direction: PortDirection,
    /// Channel position name (`FL`, `AUX3`, ...).
    pub channel: String,
    /// What it carries (absent: audio).
    #[serde(default, skip_serializing_if = "PortType::is_audio")]
    pub port_type: PortType,
}

/// One link in [`GraphInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    /// Link id.
    pub id: u32,
    /// Name of the node owning the output port.
    pub output_node: String,
    /// Name of the output port.
    pub output_port: String,
    /// Name of the node owning the input port.
    pub input_node: String,
    /// Name of the input port.
    pub input_port: String,
    /// The link closes a loop and carries the previous cycle, one quantum late
    /// (docs/engine/feedback.md; added within v1, absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub feedback: bool,
}
