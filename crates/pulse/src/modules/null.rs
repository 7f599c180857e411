//! `module-null-sink` and `module-null-source`: device nodes without a device, and the
//! argument checks every module that makes a sink or source shares ([`null_sink`]).

use super::args::{parse_channel_map, parse_props, unescape};
use super::context::Load;
use super::nodes::NullSink;
use super::record::ModuleRec;
use pulseaudio::protocol::PulseError;
use quaver_dsp::ChannelMap;
use quaver_engine::{NodeKind, NodeSpec};
use std::collections::BTreeMap;

/// What LOAD_MODULE should create.
pub struct NullSinkPlan {
    /// The node to add.
    pub spec: NodeSpec,
}

/// Validates `module-null-sink` arguments (raw, from [`parse_args_raw`]) against the
/// engine's layout and rate.
pub fn null_sink(
    args: &BTreeMap<String, String>,
    default_map: &ChannelMap,
    engine_rate: u32,
) -> Result<NullSinkPlan, PulseError> {
    for k in args.keys() {
        if ![
            "sink_name",
            "sink_properties",
            "rate",
            "channels",
            "channel_map",
            "format",
            "norewinds",
        ]
        .contains(&k.as_str())
        {
            tracing::info!("module-null-sink: unknown argument '{k}'");
            return Err(PulseError::ModInitFailed);
        }
    }
    // `args` holds raw values; the proplist is parsed from the raw text.
    let props = match args.get("sink_properties") {
        Some(p) => parse_props(p).map_err(|_| PulseError::ModInitFailed)?,
        None => BTreeMap::new(),
    };
    let args: BTreeMap<String, String> =
        args.iter().map(|(k, v)| (k.clone(), unescape(v))).collect();
    let args = &args;
    let name = args.get("sink_name").map_or("null", String::as_str);
    if name.is_empty() || name.contains(':') || name.len() > 128 {
        return Err(PulseError::ModInitFailed);
    }
    let map = match (args.get("channel_map"), args.get("channels")) {
        (Some(m), _) => parse_channel_map(m).ok_or(PulseError::ModInitFailed)?,
        (None, Some(n)) => {
            let n: usize = n.parse().map_err(|_| PulseError::ModInitFailed)?;
            if !(1..=32).contains(&n) {
                return Err(PulseError::ModInitFailed);
            }
            ChannelMap::default_for(n)
        }
        (None, None) => default_map.clone(),
    };
    if let Some(n) = args.get("channels") {
        let n: usize = n.parse().map_err(|_| PulseError::ModInitFailed)?;
        if n != map.len() {
            return Err(PulseError::ModInitFailed);
        }
    }
    if let Some(r) = args.get("rate") {
        let r: u32 = r.parse().map_err(|_| PulseError::ModInitFailed)?;
        if r != engine_rate {
            tracing::info!(
                "module-null-sink: rate {r} Hz ignored; the graph runs at {engine_rate} Hz"
            );
        }
    }
    let description = props
        .get("device.description")
        .cloned()
        .unwrap_or_else(|| "Null Output".to_string());
    let mut spec = NodeSpec::new(name, NodeKind::DeviceSink);
    spec.description = description;
    spec.inputs = map.clone();
    spec.outputs = map;
    Ok(NullSinkPlan { spec })
}

/// A source module's arguments in the sink-style form [`null_sink`] checks (name,
/// proplist, layout): `source_name` / `source_properties` renamed, the keys in `skip`
/// left to the caller, `name` as the default name; the sink-style keys are refused.
pub(super) fn source_args(
    args: &BTreeMap<String, String>,
    skip: &[&str],
    name: String,
) -> Result<BTreeMap<String, String>, String> {
    let mut own = BTreeMap::new();
    for (k, v) in args {
        let k = match k.as_str() {
            "source_name" => "sink_name",
            "source_properties" => "sink_properties",
            "sink_name" | "sink_properties" => return Err(format!("unknown argument '{k}'")),
            k if skip.contains(&k) => continue,
            other => other,
        };
        own.insert(k.to_string(), v.clone());
    }
    own.entry("sink_name".into()).or_insert(name);
    Ok(own)
}

/// `module-null-sink`: a sink node whose monitor is what was played into it.
pub(super) fn load_sink(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv,
        args,
        default_map,
        ..
    } = cx;
    let fail = cx.fail();
    let plan = null_sink(args, default_map, srv.engine.rate())?;
    let node = srv
        .engine
        .add_node(plan.spec, Some(Box::new(NullSink)))
        .map_err(|e| fail(e.to_string()))?;
    rec.nodes.push(node);
    Ok(())
}

/// `module-null-source`: a source node that records silence.
pub(super) fn load_source(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv,
        args,
        default_map,
        ..
    } = cx;
    let fail = cx.fail();
    let own = source_args(args, &["latency_time"], "source.null".into()).map_err(fail)?;
    let mut plan = null_sink(&own, default_map, srv.engine.rate())?;
    plan.spec.kind = NodeKind::DeviceSource;
    plan.spec.inputs = ChannelMap(Vec::new());
    if !own.contains_key("sink_properties") {
        plan.spec.description = "Null Input".into();
    }
    // With no inputs the copying processor writes silence.
    let node = srv
        .engine
        .add_node(plan.spec, Some(Box::new(NullSink)))
        .map_err(|e| fail(e.to_string()))?;
    rec.nodes.push(node);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::args::{parse_args, parse_args_raw};

    #[test]
    fn null_sink_layouts() {
        let stereo = ChannelMap::stereo();
        let p = null_sink(&parse_args_raw("").unwrap(), &stereo, 48000).unwrap();
        assert_eq!(p.spec.name, "null");
        assert_eq!(p.spec.inputs, stereo);
        let p = null_sink(&parse_args_raw("channels=6").unwrap(), &stereo, 48000).unwrap();
        assert_eq!(p.spec.outputs.len(), 6);
        let p = null_sink(
            &parse_args("channel_map=front-left,front-right,lfe").unwrap(),
            &stereo,
            48000,
        )
        .unwrap();
        assert_eq!(p.spec.inputs.len(), 3);
        assert!(
            null_sink(
                &parse_args("channels=3 channel_map=stereo").unwrap(),
                &stereo,
                1
            )
            .is_err()
        );
        assert!(null_sink(&parse_args_raw("bogus=1").unwrap(), &stereo, 1).is_err());
    }
}
