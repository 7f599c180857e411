//! `module-echo-cancel`: a source that is `source_master` cleaned of what
//! `sink_master` plays, and a sink that plays on `sink_master`, as PulseAudio's
//! module makes them; the canceller is WebRTC's AEC3 (quaver_engine::echo,
//! docs/dsp/echo-cancel.md).

use super::args::{parse_channel_map, parse_props, unescape};
use super::context::{Load, port_layout};
use super::record::ModuleRec;
use pulseaudio::protocol::PulseError;
use quaver_dsp::ChannelMap;
use quaver_engine::echo::{self, EchoSpec};

/// Arguments PulseAudio's module takes that change nothing here: formats and rates
/// (the graph has one), its drift and volume tuning, and where it saves debug dumps.
const IGNORED: [&str; 9] = [
    "rate",
    "format",
    "adjust_time",
    "adjust_threshold",
    "autoloaded",
    "use_volume_sharing",
    "use_master_format",
    "save_aec",
    "aec_args",
];

/// `module-echo-cancel` (`source_master`, `sink_master`: by default the default
/// devices; `source_name`, `sink_name`, `*_properties`, `channels`, `channel_map`;
/// `aec_method` webrtc, the default).
pub(super) fn load(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, args, graph, ..
    } = cx;
    let fail = cx.fail();
    for k in args.keys() {
        let known = [
            "source_master",
            "sink_master",
            "source_name",
            "sink_name",
            "source_properties",
            "sink_properties",
            "channels",
            "channel_map",
            "aec_method",
        ];
        if !known.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()) {
            return Err(fail(format!("unknown argument '{k}'")));
        }
        if IGNORED.contains(&k.as_str()) {
            tracing::info!("module-echo-cancel: {k} has no effect in quaver");
        }
    }
    match args.get("aec_method").map(|m| unescape(m)) {
        None => {}
        Some(m) if m == "webrtc" => {}
        Some(m) => {
            return Err(fail(format!(
                "aec_method={m}: quaver's canceller is WebRTC's AEC3 (aec_method=webrtc)"
            )));
        }
    }
    let mic = match args.get("source_master") {
        Some(s) => srv
            .source_by_name(graph, &unescape(s))
            .ok_or_else(|| fail(format!("no source '{s}'")))?,
        None => srv
            .default_source(graph)
            .ok_or_else(|| fail("no source".into()))?,
    };
    let speakers = match args.get("sink_master") {
        Some(s) => cx.sink_named(&unescape(s))?,
        None => srv
            .default_sink(graph)
            .ok_or_else(|| fail("no sink".into()))?,
    };
    let mic_node = &graph.nodes[&mic.node];
    let channels = match (args.get("channel_map"), args.get("channels")) {
        (Some(m), _) => {
            parse_channel_map(&unescape(m)).ok_or_else(|| fail(format!("bad channel_map '{m}'")))?
        }
        (None, Some(n)) => match n.parse::<usize>() {
            Ok(n) if (1..=32).contains(&n) => ChannelMap::default_for(n),
            _ => return Err(fail(format!("channels={n} is not 1-32"))),
        },
        (None, None) => port_layout(graph, mic_node, false),
    };
    let name_arg = |key: &str, default: String| -> Result<String, PulseError> {
        let n = args.get(key).map_or(default, |n| unescape(n));
        if n.is_empty() || n.contains(':') || n.len() > 128 {
            return Err(fail(format!("{key}='{n}' is not a usable name")));
        }
        Ok(n)
    };
    let description = |key: &str, default: String| -> Result<String, PulseError> {
        let props = match args.get(key) {
            Some(p) => parse_props(p).map_err(|e| fail(format!("{key}: {e}")))?,
            None => Default::default(),
        };
        Ok(props.get("device.description").cloned().unwrap_or(default))
    };
    let spk_node = &graph.nodes[&speakers.node];
    let spec = EchoSpec {
        source_name: name_arg("source_name", format!("{}.echo-cancel", mic.name))?,
        source_description: description(
            "source_properties",
            format!(
                "{} (echo cancelled with {})",
                mic_node.description, spk_node.description
            ),
        )?,
        sink_name: name_arg("sink_name", format!("{}.echo-cancel", speakers.name))?,
        sink_description: description(
            "sink_properties",
            format!(
                "{} (echo cancelled with {})",
                spk_node.description, mic_node.description
            ),
        )?,
        source_master: mic_node.name.clone(),
        sink_master: spk_node.name.clone(),
        channels,
    };
    let pair = echo::add(&srv.engine, &spec).map_err(|e| fail(e.to_string()))?;
    rec.nodes.push(pair.source);
    rec.nodes.push(pair.sink);
    // As PulseAudio's: unloaded when either master goes.
    rec.needs.push(mic.node);
    rec.needs.push(speakers.node);
    rec.echo = Some(pair);
    Ok(())
}
