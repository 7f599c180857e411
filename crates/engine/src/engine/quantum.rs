//! The forced quantum: a quantum set for the whole graph (JACK's `jack_set_buffer_size`,
//! PipeWire's `clock.force-quantum`) that overrides every latency request until it is
//! released, and the report of which rule gives the quantum in force.

use crate::EngineError;
use crate::engine::handle::{Control, Engine};
use crate::graph::NodeId;

/// Why the quantum in force is what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantumSource {
    /// Set with [`Engine::force_quantum`]; latency requests are ignored until released.
    Forced,
    /// The smallest latency request of a running node (the first such node, by id).
    Requested {
        /// The node asking.
        node: NodeId,
        /// Its name.
        name: String,
        /// Its latency request, frames.
        latency: u32,
    },
    /// No running node asks for a latency: the configured default.
    Default,
}

/// The quantum in force and the rule that gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantumInfo {
    /// Frames per cycle of the latest published plan.
    pub quantum: usize,
    /// Where it comes from.
    pub source: QuantumSource,
    /// The forced value, when one is set.
    pub forced: Option<usize>,
    /// The configured bounds a forced quantum must lie within.
    pub min: usize,
    /// See `min`.
    pub max: usize,
    /// The quantum with no request and nothing forced.
    pub default: usize,
}

impl Engine {
    /// Forces the graph's quantum to `quantum` frames for every node, whatever they ask
    /// for, until released with `None`. The value must be a power of two within the
    /// configured bounds (JACK clients assume power-of-two periods); it takes effect with
    /// the plan this publishes, at a cycle boundary, and stays when the node that set
    /// it goes away.
    pub fn force_quantum(&self, quantum: Option<usize>) -> Result<(), EngineError> {
        if let Some(q) = quantum {
            self.check_forced(q)?;
        }
        let mut ctl = self.lock();
        if ctl.forced == quantum {
            return Ok(());
        }
        let before = ctl.forced;
        ctl.forced = quantum;
        if let Err(e) = self.publish(&mut ctl) {
            ctl.forced = before;
            return Err(e);
        }
        match quantum {
            Some(q) => tracing::info!("quantum forced to {q} frames"),
            None => tracing::info!("forced quantum released; now {} frames", ctl.quantum),
        }
        Ok(())
    }

    /// Refuses a forced quantum that is not a power of two or out of the bounds.
    pub fn check_forced(&self, quantum: usize) -> Result<(), EngineError> {
        let c = &self.shared.config;
        if !quantum.is_power_of_two() {
            return Err(EngineError::Invalid(format!(
                "quantum {quantum} is not a power of two"
            )));
        }
        if !(c.quantum_min..=c.quantum_max).contains(&quantum) {
            return Err(EngineError::Invalid(format!(
                "quantum {quantum} is out of bounds {}..={}",
                c.quantum_min, c.quantum_max
            )));
        }
        Ok(())
    }

    /// The quantum in force, why, and the forced value if any.
    pub fn quantum_info(&self) -> QuantumInfo {
        let ctl = self.lock();
        let c = &self.shared.config;
        QuantumInfo {
            quantum: ctl.quantum,
            source: source_of(&ctl),
            forced: ctl.forced,
            min: c.quantum_min,
            max: c.quantum_max,
            default: c.quantum_default.clamp(c.quantum_min, c.quantum_max),
        }
    }
}

fn source_of(ctl: &Control) -> QuantumSource {
    if ctl.forced.is_some() {
        return QuantumSource::Forced;
    }
    // The same nodes `quantum_for` looked at: those the published plan runs.
    ctl.graph
        .nodes
        .values()
        .filter(|n| !ctl.stopped.contains(&n.id))
        .filter_map(|n| n.latency_frames.map(|l| (l, n.id, n)))
        .min_by_key(|&(l, id, _)| (l, id))
        .map_or(QuantumSource::Default, |(latency, node, n)| {
            QuantumSource::Requested {
                node,
                name: n.name.clone(),
                latency,
            }
        })
}
