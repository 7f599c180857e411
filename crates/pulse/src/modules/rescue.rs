//! Taking a module's devices out of the graph the way PulseAudio does: the streams on
//! them move to the default devices that remain first.

use crate::state::{Server, stream_target};
use quaver_engine::{NodeId, NodeKind};

/// Removes `nodes` (module `module`'s) from the graph, first moving the streams on them
/// to the default devices that remain, as PulseAudio rescues them.
pub(crate) fn remove_rescuing(srv: &Server, nodes: &[NodeId], module: &str) {
    for node in nodes {
        let graph = srv.engine.graph();
        // The defaults as they will be once the module's devices are gone: the user's
        // default may be one of them, and the policy then falls back to another.
        let mut rest = graph.clone();
        rest.nodes.retain(|id, _| !nodes.contains(id));
        for s in graph.nodes.values().filter(|n| n.kind.is_stream()) {
            if stream_target(&graph, s.id) != Some(*node) {
                continue;
            }
            let playback = s.kind == NodeKind::PlaybackStream;
            let dev = if playback {
                srv.default_sink(&rest)
            } else {
                srv.default_source(&rest)
            };
            if let Some(dev) = dev {
                let _ = srv.move_stream(&graph, s.id, &dev, playback);
            }
        }
        if let Err(e) = srv.engine.remove_node(*node) {
            tracing::warn!("pulse: unloading {module}: {e}");
        }
    }
}
