//! LOAD_MODULE for `module-pipe-sink` and `module-pipe-source`.

use super::{PipeIn, PipeOut};
use crate::modules::args::{parse_bool, unescape};
use crate::modules::context::Load;
use crate::modules::nodes::NullSink;
use crate::modules::null::{null_sink, source_args};
use crate::modules::record::ModuleRec;
use crate::state::Server;
use pulseaudio::protocol::PulseError;
use quaver_engine::{NodeId, NodeKind, NodeSpec, Processor};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `module-pipe-sink` (`file`, `format`; the graph's rate).
pub(in crate::modules) fn load_sink(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv,
        args,
        default_map,
        ..
    } = cx;
    let fail = cx.fail();
    let file = pipe_file(args, "fifo_output").map_err(&fail)?;
    let (format, codec) = pipe_codec(args).map_err(&fail)?;
    let rate = srv.engine.rate();
    if let Some(r) = args.get("rate")
        && unescape(r).parse::<u32>().ok() != Some(rate)
    {
        return Err(fail(format!(
            "rate={r}: the graph runs at {rate} Hz, and the pipe gets the graph's rate"
        )));
    }
    // Accepted either way: the graph's clock paces every sink (see the module docs).
    if let Some(v) = args.get("use_system_clock_for_timing") {
        parse_bool("use_system_clock_for_timing", &unescape(v)).map_err(&fail)?;
    }
    let mut own = args.clone();
    own.retain(|k, _| !["file", "format", "use_system_clock_for_timing"].contains(&k.as_str()));
    own.entry("sink_name".into())
        .or_insert_with(|| "fifo_output".into());
    let mut plan = null_sink(&own, default_map, rate)?;
    if !own.contains_key("sink_properties") {
        plan.spec.description = format!("Unix FIFO sink {}", file.display());
    }
    let map = plan.spec.inputs.clone();
    let channels = map.len();
    let tap_name = format!("{}.pipe", plan.spec.name);
    let (out, tap) = PipeOut::start(&file, codec, channels, rate).map_err(&fail)?;
    let out = Arc::new(out);
    let mut tap_spec = NodeSpec::new(&tap_name, NodeKind::Filter);
    tap_spec.inputs = map;
    let (sink, tap) =
        add_with_helper(srv, plan.spec, tap_spec, Box::new(tap), true).map_err(|e| {
            out.stop();
            fail(e)
        })?;
    tracing::info!(
        "module-pipe-sink: {} writes {:?} {} ch {rate} Hz into {}",
        srv.engine.node_name(sink).unwrap_or_default(),
        format,
        channels,
        file.display()
    );
    rec.nodes.push(sink);
    rec.nodes.push(tap);
    rec.pipe = Some(out);
    Ok(())
}

/// `module-pipe-source` (`file`, `format`, `rate`: any rate, resampled).
pub(in crate::modules) fn load_source(
    cx: &Load<'_>,
    rec: &mut ModuleRec,
) -> Result<(), PulseError> {
    let Load {
        srv,
        args,
        default_map,
        ..
    } = cx;
    let fail = cx.fail();
    let file = pipe_file(args, "fifo_input").map_err(&fail)?;
    let (_, codec) = pipe_codec(args).map_err(&fail)?;
    let own = source_args(args, &["file", "format", "rate"], "fifo_input".into()).map_err(&fail)?;
    let engine_rate = srv.engine.rate();
    let rate = match args.get("rate") {
        Some(r) => unescape(r)
            .parse::<u32>()
            .ok()
            .filter(|r| (1..=384_000).contains(r))
            .ok_or_else(|| fail(format!("bad rate '{r}'")))?,
        None => engine_rate,
    };
    let mut plan = null_sink(&own, default_map, engine_rate)?;
    plan.spec.kind = NodeKind::DeviceSource;
    if !own.contains_key("sink_properties") {
        plan.spec.description = format!("Unix FIFO source {}", file.display());
    }
    let map = plan.spec.outputs.clone();
    let feeder_name = format!("{}.pipe", plan.spec.name);
    let format = quaver_engine::stream::StreamFormat {
        rate,
        channels: map.clone(),
    };
    let (reader, feeder) = PipeIn::start(
        &file,
        codec,
        &format,
        &map,
        engine_rate,
        srv.engine.config().quantum_max,
        srv.opts.resample_quality,
    )
    .map_err(&fail)?;
    let reader = Arc::new(reader);
    let mut feeder_spec = NodeSpec::new(&feeder_name, NodeKind::Filter);
    feeder_spec.outputs = map;
    let (source, feeder) = add_with_helper(srv, plan.spec, feeder_spec, feeder.processor, false)
        .map_err(|e| {
            reader.stop();
            fail(e)
        })?;
    tracing::info!(
        "module-pipe-source: {} reads {} ch {rate} Hz from {}",
        srv.engine.node_name(source).unwrap_or_default(),
        format.channels.len(),
        file.display()
    );
    rec.nodes.push(source);
    rec.nodes.push(feeder);
    rec.pipe_in = Some(reader);
    Ok(())
}

/// A pipe module's `file`: absolute, by default `$XDG_RUNTIME_DIR/pulse/<default>` as
/// PulseAudio's runtime path.
fn pipe_file(args: &BTreeMap<String, String>, default: &str) -> Result<std::path::PathBuf, String> {
    let file = match args.get("file") {
        Some(f) => std::path::PathBuf::from(unescape(f)),
        None => std::env::var_os("XDG_RUNTIME_DIR")
            .map(|d| std::path::Path::new(&d).join("pulse").join(default))
            .ok_or("no file= and no XDG_RUNTIME_DIR")?,
    };
    if !file.is_absolute() {
        return Err(format!("file={} is not an absolute path", file.display()));
    }
    Ok(file)
}

/// A pipe module's `format` (s16le by default, as PulseAudio's default sample spec)
/// and its codec.
fn pipe_codec(
    args: &BTreeMap<String, String>,
) -> Result<
    (
        pulseaudio::protocol::SampleFormat,
        crate::wire::convert::Codec,
    ),
    String,
> {
    let format = match args.get("format") {
        Some(f) => crate::wire::convert::parse_sample_format(&unescape(f))
            .ok_or_else(|| format!("unknown format '{f}'"))?,
        None => pulseaudio::protocol::SampleFormat::S16Le,
    };
    let codec = crate::wire::convert::Codec::of(format).expect("a parsed format has a codec");
    Ok((format, codec))
}

/// Adds a module's device node (a null sink's or source's: its inputs copied to its
/// outputs) and a helper filter linked behind it (`after`: the device's outputs feed
/// the helper) or in front of it; on failure nothing stays in the graph.
pub(in crate::modules) fn add_with_helper(
    srv: &Server,
    device: NodeSpec,
    helper: NodeSpec,
    processor: Box<dyn Processor>,
    after: bool,
) -> Result<(NodeId, NodeId), String> {
    let dev = srv
        .engine
        .add_node(device, Some(Box::new(NullSink)))
        .map_err(|e| e.to_string())?;
    let helper_name = helper.name.clone();
    let added = srv.engine.add_node(helper, Some(processor)).and_then(|h| {
        let me = srv.engine.node_name(dev).unwrap_or_default();
        let linked = if after {
            srv.engine.link(&me, &helper_name)
        } else {
            srv.engine.link(&helper_name, &me)
        };
        linked.map(|_| h)
    });
    added.map(|h| (dev, h)).map_err(|e| {
        let _ = srv.engine.remove_node(dev);
        remove_named(srv, &helper_name);
        e.to_string()
    })
}

/// Removes the node called `name`, if there is one (undoing half a load).
fn remove_named(srv: &Server, name: &str) {
    if let Some(n) = srv.engine.graph().nodes.values().find(|n| n.name == name) {
        let _ = srv.engine.remove_node(n.id);
    }
}
