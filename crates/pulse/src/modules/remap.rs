//! `module-remap-sink` and `module-remap-source`: a device node in another layout,
//! linked channel by channel to its master (`master_channel_map`), e.g. one channel of
//! a multi-channel interface as a mono microphone.

use super::args::{parse_channel_map, unescape};
use super::context::Load;
use super::nodes::NullSink;
use super::null::{null_sink, source_args};
use super::record::ModuleRec;
use crate::state::{Device, Server};
use pulseaudio::protocol::PulseError;
use quaver_dsp::ChannelMap;
use quaver_engine::NodeKind;
use std::collections::BTreeMap;

/// The node of module-remap-sink (`to_master`: its outputs feed the master sink's
/// inputs) or module-remap-source (the master's outputs feed its inputs), in the layout
/// `own` (sink-style arguments) gives, linked port by port as `master_channel_map`
/// says or else by channel position.
#[allow(clippy::too_many_arguments)]
fn add_remap(
    srv: &Server,
    graph: &quaver_engine::graph::Graph,
    args: &BTreeMap<String, String>,
    own: &BTreeMap<String, String>,
    master: &Device,
    to_master: bool,
    rec: &mut ModuleRec,
    fail: &dyn Fn(String) -> PulseError,
) -> Result<(), PulseError> {
    let master_node = &graph.nodes[&master.node];
    let ports = if to_master {
        &master_node.inputs
    } else {
        &master_node.outputs
    };
    let layout = ChannelMap(ports.iter().map(|p| graph.ports[p].channel).collect());
    let mut plan = null_sink(own, &layout, srv.engine.rate())?;
    if !to_master {
        plan.spec.kind = NodeKind::DeviceSource;
    }
    if !own.contains_key("sink_properties") {
        plan.spec.description = format!("Remapped {}", master.name);
    }
    let channels = plan.spec.inputs.len();
    let pairs = match args.get("master_channel_map") {
        Some(m) => {
            let m = parse_channel_map(&unescape(m))
                .ok_or_else(|| fail("bad master_channel_map".into()))?;
            if m.len() != channels {
                return Err(fail(
                    "channel_map and master_channel_map differ in length".into(),
                ));
            }
            Some(m)
        }
        None => None,
    };
    let node = srv
        .engine
        .add_node(plan.spec, Some(Box::new(NullSink)))
        .map_err(|e| fail(e.to_string()))?;
    rec.nodes.push(node);
    rec.needs.push(master.node);
    let g = srv.engine.graph();
    let me = &g.nodes[&node];
    let link = |mine: &str, theirs: &str| {
        if to_master {
            srv.engine.link(mine, theirs)
        } else {
            srv.engine.link(theirs, mine)
        }
        .map(|_| ())
    };
    let linked = match &pairs {
        None => link(&me.name, &master_node.name),
        Some(m) => {
            let mine = if to_master { &me.outputs } else { &me.inputs };
            mine.iter().zip(m.positions()).try_for_each(|(p, pos)| {
                let theirs = ports
                    .iter()
                    .find(|q| graph.ports[q].channel == *pos)
                    .ok_or_else(|| quaver_engine::EngineError::NoSuchPort(format!("{pos}")))?;
                link(
                    &format!("{}:{p}", me.name),
                    &format!("{}:{theirs}", master_node.name),
                )
            })
        }
    };
    if let Err(e) = linked {
        let _ = srv.engine.remove_node(node);
        return Err(fail(e.to_string()));
    }
    Ok(())
}

/// `module-remap-sink` (`master`: by default the default sink).
pub(super) fn load_sink(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, args, graph, ..
    } = cx;
    let fail = cx.fail();
    let sink_named = |n: &str| cx.sink_named(n);
    let master = match args.get("master") {
        Some(m) => sink_named(&unescape(m))?,
        None => srv
            .default_sink(graph)
            .ok_or_else(|| fail("no sink".into()))?,
    };
    let mut own = args.clone();
    own.retain(|k, _| {
        !["master", "master_channel_map", "remix", "resample_method"].contains(&k.as_str())
    });
    own.entry("sink_name".into())
        .or_insert_with(|| format!("{}.remapped", master.name));
    add_remap(srv, graph, args, &own, &master, true, rec, &fail)?;
    Ok(())
}

/// `module-remap-source` (`master`: by default the default source).
pub(super) fn load_source(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, args, graph, ..
    } = cx;
    let fail = cx.fail();
    let master = match args.get("master") {
        Some(m) => srv
            .source_by_name(graph, &unescape(m))
            .ok_or_else(|| fail(format!("no source '{m}'")))?,
        None => srv
            .default_source(graph)
            .ok_or_else(|| fail("no source".into()))?,
    };
    let own = source_args(
        args,
        &["master", "master_channel_map", "remix", "resample_method"],
        format!("{}.remapped", master.name),
    )
    .map_err(fail)?;
    add_remap(srv, graph, args, &own, &master, false, rec, &fail)?;
    Ok(())
}
