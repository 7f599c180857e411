//! Filter chains in the graph: a [`quaver_dsp::filter::FilterChain`] as a node's
//! processor, either a node of its own (kind [`crate::NodeKind::Filter`], inputs to
//! outputs) or attached to a device's sink node, where it runs on the mix of every
//! stream before the device gets it ([`crate::Engine::set_sink_filter`]).

use crate::rt::node::{CycleInfo, Processor};
use quaver_dsp::filter::FilterChain;
use quaver_dsp::{Planar, PlanarMut};

/// Runs a filter chain on a node's audio. *RT*: never allocates.
pub struct ChainProcessor {
    chain: FilterChain,
}

impl ChainProcessor {
    /// Wraps `chain`, built for the node's channel count and the engine's rate.
    pub fn new(chain: FilterChain) -> Self {
        ChainProcessor { chain }
    }
}

impl Processor for ChainProcessor {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        let q = cx.frames;
        for ch in 0..outputs.channels() {
            let out = &mut outputs.channel_mut(ch)[..q];
            if ch < inputs.channels() {
                out.copy_from_slice(&inputs.channel(ch)[..q]);
            } else {
                out.fill(0.0);
            }
        }
        self.chain.process(outputs);
    }

    /// Blocks the chain silenced because NaN or infinity came out of it.
    fn xruns(&self) -> u64 {
        self.chain.nonfinite_resets()
    }

    fn control(&mut self, index: usize, name: &str, value: f64) -> bool {
        self.chain.set_control(index, name, value).is_ok()
    }
}
