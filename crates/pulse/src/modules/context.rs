//! What a module's constructor works from.

use crate::state::{Device, Server};
use pulseaudio::protocol::PulseError;
use quaver_dsp::ChannelMap;
use quaver_engine::graph::{Graph, Node};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a module's constructor works from: the server, the module's name and raw
/// arguments (`parse_args_raw`), and the graph as the load began.
pub(super) struct Load<'a> {
    pub(super) srv: &'a Arc<Server>,
    pub(super) name: &'a str,
    pub(super) args: BTreeMap<String, String>,
    pub(super) graph: Graph,
    /// The default sink's layout (stereo without one).
    pub(super) default_map: ChannelMap,
}

impl Load<'_> {
    /// Logs why the module failed to load; PulseAudio's answer to it.
    pub(super) fn fail(&self) -> impl Fn(String) -> PulseError + Copy + '_ {
        let name = self.name;
        move |why: String| {
            tracing::info!("pulse: {name}: {why}");
            PulseError::ModInitFailed
        }
    }

    /// The sink called `n`, or the module fails.
    pub(super) fn sink_named(&self, n: &str) -> Result<Device, PulseError> {
        self.srv
            .sink_by_name(&self.graph, n)
            .ok_or_else(|| self.fail()(format!("no sink '{n}'")))
    }
}

/// The channel layout of `n`'s inputs or outputs.
pub(super) fn port_layout(graph: &Graph, n: &Node, inputs: bool) -> ChannelMap {
    ChannelMap(
        if inputs { &n.inputs } else { &n.outputs }
            .iter()
            .map(|p| graph.ports[p].channel)
            .collect(),
    )
}
