//! Filter chains on device sinks, and their controls changed while audio plays.

use crate::EngineError;
use crate::engine::handle::Engine;
use crate::filter::ChainProcessor;
use crate::graph::{NodeId, NodeKind};
use crate::rt::msg::{ControlName, ToRt};
use quaver_dsp::filter::FilterChain;

impl Engine {
    /// Puts `chain` on device sink `node` (or takes its chain off with `None`): from
    /// the next cycle on, the mix of every stream to the sink goes through the chain
    /// before the device plays it, and the sink's monitor carries the result. The
    /// chain must be built for the sink's channels at the engine's rate. A chain
    /// already there is replaced and freed on this side.
    pub fn set_sink_filter(
        &self,
        node: NodeId,
        chain: Option<FilterChain>,
    ) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let n = ctl
            .graph
            .nodes
            .get(&node)
            .ok_or_else(|| EngineError::NoSuchNode(node.to_string()))?;
        if n.kind != NodeKind::DeviceSink {
            return Err(EngineError::Invalid(format!(
                "node '{}' is a {}, not a device sink: filter chains go on sinks",
                n.name,
                n.kind.as_str()
            )));
        }
        let slot = n.slot;
        let processor =
            chain.map(|c| Box::new(ChainProcessor::new(c)) as Box<dyn crate::rt::node::Processor>);
        self.send(&mut ctl, ToRt::SetProcessor { slot, processor })
    }

    /// Sets control `name` of filter `index` in the chain of `node` to `value`, on the
    /// RT thread at the next cycle (the filter ramps or crossfades to it). The caller
    /// checks names and values against the chain it built (a refused change is
    /// counted in `RtStats::controls_refused`).
    pub fn filter_control(
        &self,
        node: NodeId,
        index: usize,
        name: &str,
        value: f64,
    ) -> Result<(), EngineError> {
        let name = ControlName::new(name).ok_or_else(|| {
            EngineError::Invalid(format!(
                "control name '{name}' is longer than {} bytes",
                ControlName::MAX
            ))
        })?;
        let mut ctl = self.lock();
        let slot = ctl
            .graph
            .nodes
            .get(&node)
            .ok_or_else(|| EngineError::NoSuchNode(node.to_string()))?
            .slot;
        self.send(
            &mut ctl,
            ToRt::Control {
                slot,
                index,
                name,
                value,
            },
        )
    }
}
