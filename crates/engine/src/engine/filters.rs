//! Filter chains on device sinks and on client streams, and their controls changed
//! while audio plays.

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
        self.put_chain(
            node,
            chain,
            |k| k == NodeKind::DeviceSink,
            ", not a device sink: filter chains go on sinks",
            |slot, chain| ToRt::SetProcessor {
                slot,
                processor: chain.map(|c| {
                    Box::new(ChainProcessor::new(c)) as Box<dyn crate::rt::node::Processor>
                }),
            },
        )
    }

    /// Puts `chain` on client stream `node`, replacing its own chain, or takes it off
    /// with `None` ([`Engine::add_stream_node`] says where it runs). A replaced chain
    /// is freed on this side; the new one starts from silence, so a change while the
    /// stream plays is not click-free (controls are: [`Engine::filter_control`]).
    pub fn set_stream_filter(
        &self,
        node: NodeId,
        chain: Option<FilterChain>,
    ) -> Result<(), EngineError> {
        self.put_chain(
            node,
            chain,
            |k| k.is_stream(),
            ": a node's own chain is for client streams",
            |slot, chain| ToRt::SetChain {
                slot,
                chain: chain.map(Box::new),
            },
        )
    }

    /// Sends `chain` (or its removal) to `node`'s slot as `to_rt` wraps it, when the
    /// node's kind `accepts` it (else refuses with the node, its kind and `refusal`),
    /// and keeps the chain's controls for [`Engine::filter_control`].
    fn put_chain(
        &self,
        node: NodeId,
        chain: Option<FilterChain>,
        accepts: fn(NodeKind) -> bool,
        refusal: &str,
        to_rt: impl FnOnce(usize, Option<FilterChain>) -> ToRt,
    ) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let n = ctl
            .graph
            .nodes
            .get(&node)
            .ok_or_else(|| EngineError::NoSuchNode(node.to_string()))?;
        if !accepts(n.kind) {
            return Err(EngineError::Invalid(format!(
                "node '{}' is a {}{refusal}",
                n.name,
                n.kind.as_str()
            )));
        }
        let slot = n.slot;
        let controls = chain.as_ref().map(FilterChain::controls);
        self.send(&mut ctl, to_rt(slot, chain))?;
        match controls {
            Some(c) => ctl.chains.insert(node, c),
            None => ctl.chains.remove(&node),
        };
        Ok(())
    }

    /// Sets control `name` of filter `index` (from 0) in the chain on sink or stream `node` (a
    /// name or a numeric id) to `value`; the filter ramps or crossfades to it from the
    /// next cycle on. A filter, control or value the chain would not take is refused
    /// here with the reason, and nothing is sent.
    pub fn filter_control(
        &self,
        node: &str,
        index: usize,
        name: &str,
        value: f64,
    ) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let (id, _) = ctl.graph.resolve(node)?;
        let slot = ctl.graph.nodes[&id].slot;
        let controls = ctl
            .chains
            .get_mut(&id)
            .ok_or_else(|| EngineError::Invalid(format!("node '{node}' has no filter chain")))?;
        let len = controls.len();
        let check = controls.get_mut(index).ok_or_else(|| {
            EngineError::Invalid(format!(
                "no filter {index} on '{node}': its chain has {len} (counted from 0)"
            ))
        })?;
        check.check(name, value).map_err(|e| {
            EngineError::Invalid(format!("filter {index} on '{node}', control '{name}': {e}"))
        })?;
        // Checked names are the filters' own, all well under the limit.
        let name = ControlName::new(name)
            .ok_or_else(|| EngineError::Invalid(format!("control name '{name}' is too long")))?;
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
