//! The graph's clock: the quantum in force and why, and whether it freewheels — the
//! answer to `quantum`.

use serde::{Deserialize, Serialize};

/// Answer to `Quantum`: the graph's quantum, the rule that gives it, and the bounds a
/// forced quantum must lie within.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuantumReport {
    /// Frames per cycle of the latest published plan.
    pub quantum: u32,
    /// `forced` (set with `force_quantum`), `requested` (the smallest latency request of
    /// a running node, named in `node`), or `default` (nobody asks); clients show other
    /// values as they are.
    pub source: String,
    /// The forced quantum, when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<u32>,
    /// For `requested`: the node whose request wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// For `requested`: that node's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// For `requested`: its latency request, frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<u32>,
    /// Smallest quantum the server runs.
    pub min: u32,
    /// Largest quantum the server runs.
    pub max: u32,
    /// Quantum when nobody asks and nothing is forced.
    pub default: u32,
    /// The graph freewheels (`set_freewheel`): no device paces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub freewheel: bool,
}
