//! `module-combine-sink`: a null sink whose outputs are linked to every slave sink, so
//! what is played into it is played on all of them.

use super::args::unescape;
use super::context::{Load, port_layout};
use super::nodes::NullSink;
use super::null::null_sink;
use super::record::ModuleRec;
use crate::state::Device;
use pulseaudio::protocol::PulseError;
use quaver_engine::NodeKind;

/// `module-combine-sink` (`slaves`, by default every sink).
pub(super) fn load(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, args, graph, ..
    } = cx;
    let fail = cx.fail();
    let sink_named = |n: &str| cx.sink_named(n);
    let slaves: Vec<Device> = match args.get("slaves") {
        Some(s) => unescape(s)
            .split(',')
            .filter(|n| !n.is_empty())
            .map(&sink_named)
            .collect::<Result<_, _>>()?,
        None => graph
            .nodes
            .values()
            .filter(|n| n.kind == NodeKind::DeviceSink)
            .filter_map(|n| srv.sink_by_index(graph, n.id))
            .collect(),
    };
    if slaves.is_empty() {
        return Err(fail("no slave sinks".into()));
    }
    let mut own = args.clone();
    own.retain(|k, _| !["slaves", "adjust_time", "resample_method"].contains(&k.as_str()));
    own.entry("sink_name".into())
        .or_insert_with(|| "combined".into());
    let first = port_layout(graph, &graph.nodes[&slaves[0].node], true);
    let mut plan = null_sink(&own, &first, srv.engine.rate())?;
    if !own.contains_key("sink_properties") {
        plan.spec.description = "Simultaneous output".into();
    }
    let node = srv
        .engine
        .add_node(plan.spec, Some(Box::new(NullSink)))
        .map_err(|e| fail(e.to_string()))?;
    rec.nodes.push(node);
    let me = srv.engine.node_name(node).unwrap_or_default();
    for s in &slaves {
        if let Err(e) = srv.engine.link(&me, &s.name) {
            let _ = srv.engine.remove_node(node);
            return Err(fail(e.to_string()));
        }
    }
    Ok(())
}
