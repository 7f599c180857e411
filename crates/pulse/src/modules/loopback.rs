//! `module-loopback`: a node from a source (or a sink's monitor) to a sink, listed as a
//! sink input (volume, mute, move). Both ends run on the engine's one clock, so no
//! resampler or latency adaptation is needed.

use super::args::{parse_bool, parse_channel_map, parse_props, unescape};
use super::context::{Load, port_layout};
use super::nodes::{Loop, LoopCapture};
use super::record::ModuleRec;
use pulseaudio::protocol::PulseError;
use quaver_dsp::ChannelMap;
use quaver_dsp::volume::GainRamp;
use quaver_engine::{NodeKind, NodeSpec};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `module-loopback` (`source`, `sink`: by default the default devices).
pub(super) fn load(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, args, graph, ..
    } = cx;
    let fail = cx.fail();
    let sink_named = |n: &str| cx.sink_named(n);
    for k in args.keys() {
        if ![
            "source",
            "sink",
            "latency_msec",
            "rate",
            "channels",
            "channel_map",
            "format",
            "source_dont_move",
            "sink_dont_move",
            "remix",
            "adjust_time",
            "max_latency_msec",
            "fast_adjust_threshold_msec",
            "adjust_threshold_usec",
            "sink_input_properties",
            "source_output_properties",
            "volume",
        ]
        .contains(&k.as_str())
        {
            return Err(fail(format!("unknown argument '{k}'")));
        }
    }
    let source = match args.get("source") {
        Some(s) => srv.source_by_name(graph, &unescape(s)),
        None => srv.default_source(graph),
    }
    .ok_or_else(|| fail("no such source".into()))?;
    let sink = match args.get("sink") {
        Some(s) => sink_named(&unescape(s))?,
        None => srv
            .default_sink(graph)
            .ok_or_else(|| fail("no sink".into()))?,
    };
    for (key, flag) in [
        ("sink_dont_move", &mut rec.sink_dont_move),
        ("source_dont_move", &mut rec.source_dont_move),
    ] {
        if let Some(v) = args.get(key) {
            *flag = parse_bool(key, v).map_err(&fail)?;
        }
    }
    if rec.sink_dont_move {
        // As PulseAudio's: gone with its sink instead of rescued to another.
        rec.needs.push(sink.node);
    }
    let src = &graph.nodes[&source.node];
    let map = match (args.get("channel_map"), args.get("channels")) {
        (Some(m), _) => {
            parse_channel_map(&unescape(m)).ok_or_else(|| fail(format!("bad channel_map '{m}'")))?
        }
        (None, Some(n)) => match n.parse::<usize>() {
            Ok(n) if (1..=32).contains(&n) => ChannelMap::default_for(n),
            _ => return Err(fail(format!("channels={n} is not 1-32"))),
        },
        (None, None) => port_layout(graph, src, false),
    };
    let latency_frames = match args.get("latency_msec") {
        Some(ms) => {
            let ms: u64 = ms
                .parse()
                .ok()
                .filter(|&ms| (1..=30_000).contains(&ms))
                .ok_or_else(|| fail(format!("latency_msec={ms} is not 1-30000")))?;
            Some((ms * srv.engine.rate() as u64 / 1000) as u32)
        }
        None => None,
    };
    let props = match args.get("sink_input_properties") {
        Some(p) => parse_props(p).map_err(|e| fail(format!("sink_input_properties: {e}")))?,
        None => BTreeMap::new(),
    };
    let what = if src.kind == NodeKind::DeviceSink {
        format!("Monitor of {}", src.description)
    } else {
        src.description.clone()
    };
    // One node between the source and the sink, listed as a sink input: its
    // volume, mute and sink are set like any stream's, and `latency_msec` is
    // its latency request (the graph's quantum follows it, so the loop is never
    // slower than asked for; without it the loop adds no latency of its own).
    let mut spec = NodeSpec::new("loopback", NodeKind::PlaybackStream);
    spec.description = props
        .get("media.name")
        .cloned()
        .unwrap_or_else(|| format!("Loopback from {what}"));
    spec.inputs = map.clone();
    spec.outputs = map;
    spec.latency_frames = latency_frames;
    let capture = Arc::new(LoopCapture::new());
    let processor = Loop {
        capture: capture.clone(),
        ramp: GainRamp::new(1.0),
    };
    let node = srv
        .engine
        .add_node(spec, Some(Box::new(processor)))
        .map_err(|e| fail(e.to_string()))?;
    rec.nodes.push(node);
    rec.capture = Some(capture);
    // Its sink may go (the loop moves to the default sink like any stream);
    // without a source (the one it records now, see `unload_orphans`) it has
    // nothing to play.
    let me = srv.engine.node_name(node).unwrap_or_default();
    let linked = srv
        .engine
        .link(&src.name, &me)
        .and_then(|_| srv.engine.link(&me, &sink.name));
    if let Err(e) = linked {
        let _ = srv.engine.remove_node(node);
        return Err(fail(e.to_string()));
    }
    Ok(())
}
