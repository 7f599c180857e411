//! LOAD_MODULE / UNLOAD_MODULE for the modules quaver can express as graph objects.
//!
//! - `module-null-sink`: a sink node without a device. Its processor copies the (post-
//!   volume) inputs to its outputs, which are the monitor, exactly as a device sink's
//!   outputs are; nothing is played anywhere.
//! - `module-null-source`: a source node without a device that records silence.
//! - `module-combine-sink`: the same kind of node, its outputs linked to every slave
//!   sink: what is played into it is played on all of them.
//! - `module-remap-sink`: the same kind of node in the remapped layout, its outputs
//!   linked channel by channel to the master sink (`master_channel_map`).
//! - `module-remap-source`: a source node in the remapped layout, its inputs linked
//!   channel by channel from the master source (or monitor), e.g. one channel of a
//!   multi-channel interface as a mono microphone.
//! - `module-loopback`: a node from a source (or a sink's monitor) to a sink, listed as
//!   a sink input (volume, mute, move). Both ends run on the engine's one clock, so no
//!   resampler or latency adaptation is needed.
//!
//! - `module-native-protocol-tcp`: a TCP listener (`port`, `listen`, `auth-anonymous`,
//!   `auth-ip-acl`, `auth-cookie`, `auth-cookie-enabled`, with PulseAudio's defaults:
//!   port 4713 on every address, the cookie required); unloading it stops the listener
//!   and disconnects the clients it let in.
//! - `module-native-protocol-unix`: another unix socket (`socket`, an absolute path);
//!   its clients are trusted like the main socket's.
//!
//! Other modules answer PA_ERR_MODINITFAILED, as PulseAudio does for a module it cannot
//! load.

use crate::io::accept::{self, TcpAuth};
use crate::io::listener::PulseListener;
pub use crate::modules_rec::{LoopCapture, ModuleRec, SUSPEND_ON_IDLE};
use crate::state::{Device, Server, stream_target};
use crate::wire::convert::position_from_pa;
use pulseaudio::protocol::{ChannelPosition as PaPos, PulseError};
use quaver_dsp::volume::GainRamp;
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{CycleInfo, NodeId, NodeKind, NodeSpec, Processor};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Index of the pseudo-module standing for this front-end.
pub const PROTOCOL_MODULE: u32 = 0;
/// Index of the pseudo-module owning the engine's devices.
pub const DEVICES_MODULE: u32 = 1;
/// Index of the pseudo-module standing for stream restore ([`crate::restore`]).
pub const RESTORE_MODULE: u32 = 2;
/// Index of the pseudo-module standing for device restore's extension
/// ([`crate::devrestore`]).
pub const DEVICE_RESTORE_MODULE: u32 = 3;
/// First index of loaded modules.
pub const FIRST_LOADED: u32 = 4;

/// Parses PulseAudio's module argument syntax (`key=value`, `key="v w"`, `key='v'`)
/// and returns each value *raw*: quotes removed, backslash escapes kept, as
/// `pa_modargs` keeps them for values that are parsed again (proplists).
pub fn parse_args_raw(args: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut it = args.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        if it.next() != Some('=') || key.is_empty() {
            return Err(format!("expected key=value near '{key}'"));
        }
        let mut value = String::new();
        let quote = match it.peek() {
            Some(&q) if q == '"' || q == '\'' => {
                it.next();
                Some(q)
            }
            _ => None,
        };
        loop {
            match (it.next(), quote) {
                (None, Some(_)) => return Err(format!("unterminated quote in '{key}'")),
                (None, None) => break,
                (Some(c), None) if c.is_whitespace() => break,
                (Some(c), Some(q)) if c == q => break,
                (Some('\\'), _) => {
                    value.push('\\');
                    value.extend(it.next());
                }
                (Some(c), _) => value.push(c),
            }
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(format!("'{key}' given twice"));
        }
    }
}

/// Removes backslash escapes.
pub fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut it = raw.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            out.extend(it.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses module arguments with escapes removed from every value.
pub fn parse_args(args: &str) -> Result<BTreeMap<String, String>, String> {
    Ok(parse_args_raw(args)?
        .into_iter()
        .map(|(k, v)| (k, unescape(&v)))
        .collect())
}

/// A PulseAudio channel-map string ("front-left,front-right" or a name like "stereo").
pub fn parse_channel_map(s: &str) -> Option<ChannelMap> {
    use PaPos::*;
    let named: Option<Vec<PaPos>> = match s {
        "mono" => Some(vec![Mono]),
        "stereo" => Some(vec![FrontLeft, FrontRight]),
        "surround-21" => Some(vec![FrontLeft, FrontRight, Lfe]),
        "surround-40" => Some(vec![FrontLeft, FrontRight, RearLeft, RearRight]),
        "surround-51" => Some(vec![
            FrontLeft,
            FrontRight,
            RearLeft,
            RearRight,
            FrontCenter,
            Lfe,
        ]),
        "surround-71" => Some(vec![
            FrontLeft,
            FrontRight,
            RearLeft,
            RearRight,
            FrontCenter,
            Lfe,
            SideLeft,
            SideRight,
        ]),
        _ => None,
    };
    let positions = match named {
        Some(p) => p,
        None => s
            .split(',')
            .map(|p| {
                Some(match p.trim() {
                    "mono" => Mono,
                    "front-left" | "left" => FrontLeft,
                    "front-right" | "right" => FrontRight,
                    "front-center" | "center" => FrontCenter,
                    "rear-center" => RearCenter,
                    "rear-left" => RearLeft,
                    "rear-right" => RearRight,
                    "lfe" | "subwoofer" => Lfe,
                    "side-left" => SideLeft,
                    "side-right" => SideRight,
                    "front-left-of-center" => FrontLeftOfCenter,
                    "front-right-of-center" => FrontRightOfCenter,
                    other => {
                        let n: u8 = other.strip_prefix("aux")?.parse().ok()?;
                        if n > 31 {
                            return None;
                        }
                        crate::convert::position_to_pa(quaver_dsp::ChannelPosition::Aux(n as u16))
                    }
                })
            })
            .collect::<Option<Vec<_>>>()?,
    };
    if positions.is_empty() || positions.len() > 32 {
        return None;
    }
    Some(ChannelMap(
        positions.into_iter().map(position_from_pa).collect(),
    ))
}

/// Parses a proplist string (`key=value key2="v w" key3=v\\ w`), as in
/// `sink_properties`.
pub fn parse_props(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_args(s)
}

/// The processor of a null sink: the monitor is what was played into it.
pub struct NullSink;

impl Processor for NullSink {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            if ch < inputs.channels() {
                outputs.channel_mut(ch).copy_from_slice(inputs.channel(ch));
            } else {
                outputs.channel_mut(ch).fill(0.0);
            }
        }
    }
}

/// Frames over which a loopback's capture gain moves to a new value (no click).
const LOOP_RAMP_FRAMES: usize = 256;

/// A loopback's processor: its inputs to its outputs at the capture side's gain (the
/// sink input's volume is the node's own, applied by the engine to its outputs).
struct Loop {
    capture: Arc<LoopCapture>,
    ramp: GainRamp,
}

impl Processor for Loop {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        NullSink.process(_cx, inputs, outputs);
        let target = f32::from_bits(self.capture.gain.load(Ordering::Relaxed));
        if target != self.ramp.target() {
            self.ramp.set_target(target, LOOP_RAMP_FRAMES);
        }
        self.ramp.apply(outputs);
    }
}

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

/// Loads module `name` ([`load`]) and lists it under the next free index, which it
/// returns; subscribers are told.
pub fn load_indexed(srv: &Arc<Server>, name: &str, argument: &str) -> Result<u32, PulseError> {
    let rec = load(srv, name, argument)?;
    let mut st = srv.lock();
    let idx = st.next_module.max(FIRST_LOADED);
    st.next_module = idx + 1;
    st.modules.insert(idx, rec);
    drop(st);
    srv.broadcast(
        pulseaudio::protocol::SubscriptionEventFacility::Module,
        pulseaudio::protocol::SubscriptionEventType::New,
        idx,
    );
    tracing::info!("pulse: loaded {name} {argument} as module #{idx}");
    Ok(idx)
}

/// Creates what module `name` stands for in the graph.
pub fn load(srv: &Arc<Server>, name: &str, argument: &str) -> Result<ModuleRec, PulseError> {
    let args = parse_args_raw(argument).map_err(|why| {
        tracing::info!("pulse: {name}: {why}");
        PulseError::ModInitFailed
    })?;
    let graph = srv.engine.graph();
    let layout = |n: &quaver_engine::graph::Node, inputs: bool| {
        ChannelMap(
            if inputs { &n.inputs } else { &n.outputs }
                .iter()
                .map(|p| graph.ports[p].channel)
                .collect(),
        )
    };
    let default_map = srv
        .default_sink(&graph)
        .and_then(|d| graph.nodes.get(&d.node))
        .map(|n| layout(n, true))
        .unwrap_or_else(ChannelMap::stereo);
    let fail = |why: String| {
        tracing::info!("pulse: {name}: {why}");
        PulseError::ModInitFailed
    };
    let sink_named = |n: &str| {
        srv.sink_by_name(&graph, n)
            .ok_or_else(|| fail(format!("no sink '{n}'")))
    };
    let mut rec = ModuleRec::new(name, argument);
    match name {
        "module-null-sink" => {
            let plan = null_sink(&args, &default_map, srv.engine.rate())?;
            let node = srv
                .engine
                .add_node(plan.spec, Some(Box::new(NullSink)))
                .map_err(|e| fail(e.to_string()))?;
            rec.nodes.push(node);
        }
        "module-null-source" => {
            let own = source_args(&args, &["latency_time"], "source.null".into()).map_err(fail)?;
            let mut plan = null_sink(&own, &default_map, srv.engine.rate())?;
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
        }
        "module-pipe-sink" => {
            let file = pipe_file(&args, "fifo_output").map_err(&fail)?;
            let (format, codec) = pipe_codec(&args).map_err(&fail)?;
            let rate = srv.engine.rate();
            if let Some(r) = args.get("rate")
                && unescape(r).parse::<u32>().ok() != Some(rate)
            {
                return Err(fail(format!(
                    "rate={r}: the graph runs at {rate} Hz, and the pipe gets the graph's rate"
                )));
            }
            // Accepted either way: the graph's clock paces every sink (see crate::pipe).
            if let Some(v) = args.get("use_system_clock_for_timing") {
                parse_bool("use_system_clock_for_timing", &unescape(v)).map_err(&fail)?;
            }
            let mut own = args.clone();
            own.retain(|k, _| {
                !["file", "format", "use_system_clock_for_timing"].contains(&k.as_str())
            });
            own.entry("sink_name".into())
                .or_insert_with(|| "fifo_output".into());
            let mut plan = null_sink(&own, &default_map, rate)?;
            if !own.contains_key("sink_properties") {
                plan.spec.description = format!("Unix FIFO sink {}", file.display());
            }
            let map = plan.spec.inputs.clone();
            let channels = map.len();
            let tap_name = format!("{}.pipe", plan.spec.name);
            let (out, tap) =
                crate::pipe::PipeOut::start(&file, codec, channels, rate).map_err(&fail)?;
            let out = Arc::new(out);
            let mut tap_spec = NodeSpec::new(&tap_name, NodeKind::Filter);
            tap_spec.inputs = map;
            let (sink, tap) = add_with_helper(srv, plan.spec, tap_spec, Box::new(tap), true)
                .map_err(|e| {
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
        }
        SUSPEND_ON_IDLE => {
            if srv.lock().modules.values().any(|m| m.idle_suspend) {
                return Err(fail("already loaded (it loads once)".into()));
            }
            if let Some(k) = args.keys().find(|k| k.as_str() != "timeout") {
                return Err(fail(format!("unknown argument '{k}'")));
            }
            // PulseAudio's default: 5 s.
            let secs = match args.get("timeout") {
                Some(t) => unescape(t)
                    .parse::<u32>()
                    .map_err(|_| fail(format!("bad timeout '{t}'")))?,
                None => 5,
            };
            srv.engine
                .set_suspend_timeout(Some(std::time::Duration::from_secs(secs.into())))
                .map_err(|e| fail(e.to_string()))?;
            tracing::info!("idle devices suspend after {secs} s");
            rec.idle_suspend = true;
        }
        "module-pipe-source" => {
            let file = pipe_file(&args, "fifo_input").map_err(&fail)?;
            let (_, codec) = pipe_codec(&args).map_err(&fail)?;
            let own = source_args(&args, &["file", "format", "rate"], "fifo_input".into())
                .map_err(&fail)?;
            let engine_rate = srv.engine.rate();
            let rate = match args.get("rate") {
                Some(r) => unescape(r)
                    .parse::<u32>()
                    .ok()
                    .filter(|r| (1..=384_000).contains(r))
                    .ok_or_else(|| fail(format!("bad rate '{r}'")))?,
                None => engine_rate,
            };
            let mut plan = null_sink(&own, &default_map, engine_rate)?;
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
            let (reader, feeder) = crate::pipe::PipeIn::start(
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
            let (source, feeder) =
                add_with_helper(srv, plan.spec, feeder_spec, feeder.processor, false).map_err(
                    |e| {
                        reader.stop();
                        fail(e)
                    },
                )?;
            tracing::info!(
                "module-pipe-source: {} reads {} ch {rate} Hz from {}",
                srv.engine.node_name(source).unwrap_or_default(),
                format.channels.len(),
                file.display()
            );
            rec.nodes.push(source);
            rec.nodes.push(feeder);
            rec.pipe_in = Some(reader);
        }
        "module-combine-sink" => {
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
                    .filter_map(|n| srv.sink_by_index(&graph, n.id))
                    .collect(),
            };
            if slaves.is_empty() {
                return Err(fail("no slave sinks".into()));
            }
            let mut own = args.clone();
            own.retain(|k, _| !["slaves", "adjust_time", "resample_method"].contains(&k.as_str()));
            own.entry("sink_name".into())
                .or_insert_with(|| "combined".into());
            let first = layout(&graph.nodes[&slaves[0].node], true);
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
        }
        "module-remap-sink" => {
            let master = match args.get("master") {
                Some(m) => sink_named(&unescape(m))?,
                None => srv
                    .default_sink(&graph)
                    .ok_or_else(|| fail("no sink".into()))?,
            };
            let mut own = args.clone();
            own.retain(|k, _| {
                !["master", "master_channel_map", "remix", "resample_method"].contains(&k.as_str())
            });
            own.entry("sink_name".into())
                .or_insert_with(|| format!("{}.remapped", master.name));
            add_remap(srv, &graph, &args, &own, &master, true, &mut rec, &fail)?;
        }
        "module-remap-source" => {
            let master = match args.get("master") {
                Some(m) => srv
                    .source_by_name(&graph, &unescape(m))
                    .ok_or_else(|| fail(format!("no source '{m}'")))?,
                None => srv
                    .default_source(&graph)
                    .ok_or_else(|| fail("no source".into()))?,
            };
            let own = source_args(
                &args,
                &["master", "master_channel_map", "remix", "resample_method"],
                format!("{}.remapped", master.name),
            )
            .map_err(fail)?;
            add_remap(srv, &graph, &args, &own, &master, false, &mut rec, &fail)?;
        }
        "module-loopback" => {
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
                Some(s) => srv.source_by_name(&graph, &unescape(s)),
                None => srv.default_source(&graph),
            }
            .ok_or_else(|| fail("no such source".into()))?;
            let sink = match args.get("sink") {
                Some(s) => sink_named(&unescape(s))?,
                None => srv
                    .default_sink(&graph)
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
                (Some(m), _) => parse_channel_map(&unescape(m))
                    .ok_or_else(|| fail(format!("bad channel_map '{m}'")))?,
                (None, Some(n)) => match n.parse::<usize>() {
                    Ok(n) if (1..=32).contains(&n) => ChannelMap::default_for(n),
                    _ => return Err(fail(format!("channels={n} is not 1-32"))),
                },
                (None, None) => layout(src, false),
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
                Some(p) => {
                    parse_props(p).map_err(|e| fail(format!("sink_input_properties: {e}")))?
                }
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
        }
        "module-native-protocol-tcp" => {
            let (listen, auth, addr) = tcp_listener(srv, &args).map_err(fail)?;
            tracing::info!(
                "pulse: {name}: PulseAudio TCP clients served on {addr} ({})",
                auth.describe()
            );
            let acc = accept::spawn(
                srv,
                accept::Listen::Tcp(listen, auth),
                addr,
                "quaver-pulse-tcp",
                None,
            )
            .map_err(|e| fail(format!("{e:#}")))?;
            rec.acceptor = Some(acc);
        }
        "module-native-protocol-unix" => {
            let file = unix_listener(&args).map_err(fail)?;
            let l = file
                .listener
                .try_clone()
                .map_err(|e| fail(format!("cloning the listener: {e}")))?;
            let addr = file.path().display().to_string();
            tracing::info!("pulse: {name}: PulseAudio clients served on {addr}");
            let acc = accept::spawn(
                srv,
                accept::Listen::Unix(l),
                addr,
                "quaver-pulse-unix",
                Some(file),
            )
            .map_err(|e| fail(format!("{e:#}")))?;
            rec.acceptor = Some(acc);
        }
        other => return Err(fail(format!("{other} is not available in quaver"))),
    }
    Ok(rec)
}

/// Undoes [`load`]: streams on its sinks move to the default devices that remain (as
/// PulseAudio rescues them), then its nodes and links go.
pub fn unload(srv: &Server, m: &ModuleRec) {
    if let Some(acc) = &m.acceptor {
        acc.stop(srv);
    }
    for node in &m.nodes {
        let graph = srv.engine.graph();
        // The defaults as they will be once the module's devices are gone: the user's
        // default may be one of them, and the policy then falls back to another.
        let mut rest = graph.clone();
        rest.nodes.retain(|id, _| !m.nodes.contains(id));
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
            tracing::warn!("pulse: unloading {}: {e}", m.name);
        }
    }
    for (o, i) in &m.links {
        let _ = srv.engine.unlink(o, i);
    }
    // After its tap left the graph: what the tap wrote last still reaches the pipe.
    if let Some(p) = &m.pipe {
        let (written, lost) = p.counts();
        p.stop();
        tracing::info!("module-pipe-sink: {written} frames written, {lost} lost");
    }
    if let Some(p) = &m.pipe_in {
        p.stop();
        tracing::info!("module-pipe-source: {} frames read", p.frames_read());
    }
    if m.idle_suspend {
        match srv.engine.set_suspend_timeout(None) {
            Ok(()) => tracing::info!("idle devices no longer suspend"),
            Err(e) => tracing::warn!("{SUSPEND_ON_IDLE}: {e}"),
        }
    }
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
) -> Result<(pulseaudio::protocol::SampleFormat, crate::convert::Codec), String> {
    let format = match args.get("format") {
        Some(f) => crate::convert::parse_sample_format(&unescape(f))
            .ok_or_else(|| format!("unknown format '{f}'"))?,
        None => pulseaudio::protocol::SampleFormat::S16Le,
    };
    let codec = crate::convert::Codec::of(format).expect("a parsed format has a codec");
    Ok((format, codec))
}

/// Adds a module's device node (a null sink's or source's: its inputs copied to its
/// outputs) and a helper filter linked behind it (`after`: the device's outputs feed
/// the helper) or in front of it; on failure nothing stays in the graph.
fn add_with_helper(
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

/// A source module's arguments in the sink-style form [`null_sink`] checks (name,
/// proplist, layout): `source_name` / `source_properties` renamed, the keys in `skip`
/// left to the caller, `name` as the default name; the sink-style keys are refused.
fn source_args(
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

/// Unloads every module a node it needs has left (a remap whose master sink was
/// unloaded or unplugged), and then those that needed what it made.
pub fn unload_orphans(srv: &Server) {
    loop {
        // Every stream that ends comes here: copy the graph only when some module
        // depends on other nodes at all.
        let dependent = srv
            .lock()
            .modules
            .values()
            .any(|m| !m.needs.is_empty() || m.capture.is_some());
        if !dependent {
            return;
        }
        let graph = srv.engine.graph();
        let orphan = {
            let mut st = srv.lock();
            // A loop without a source has nothing to play; one whose sink went and
            // that no other sink could take (the default sink's monitor was its
            // source) plays nowhere: PulseAudio kills it too.
            let stranded_loop = |n: &NodeId| {
                graph.nodes.get(n).is_some_and(crate::state::is_loop)
                    && (crate::state::loop_source(&graph, *n).is_none()
                        || stream_target(&graph, *n).is_none())
            };
            let idx = st
                .modules
                .iter()
                .find(|(_, m)| {
                    m.needs.iter().any(|n| !graph.nodes.contains_key(n))
                        || m.nodes.iter().any(stranded_loop)
                })
                .map(|(&i, _)| i);
            idx.and_then(|i| st.modules.remove(&i).map(|m| (i, m)))
        };
        let Some((idx, m)) = orphan else {
            return;
        };
        unload(srv, &m);
        srv.broadcast(
            pulseaudio::protocol::SubscriptionEventFacility::Module,
            pulseaudio::protocol::SubscriptionEventType::Removed,
            idx,
        );
        tracing::info!(
            "pulse: unloaded module #{idx} ({} {}): a device it needs is gone",
            m.name,
            m.argument
        );
    }
}

/// PulseAudio's booleans (`pa_parse_boolean`).
fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "y" | "t" | "yes" | "true" | "on" => Ok(true),
        "0" | "n" | "f" | "no" | "false" | "off" => Ok(false),
        _ => Err(format!("{key}='{v}' is not a boolean")),
    }
}

fn check_keys(args: &BTreeMap<String, String>, known: &[&str]) -> Result<(), String> {
    match args.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown argument '{k}'")),
        None => Ok(()),
    }
}

/// Binds what `module-native-protocol-tcp`'s arguments ask for; the listener, who it
/// serves, and its address.
fn tcp_listener(
    srv: &Server,
    args: &BTreeMap<String, String>,
) -> Result<(TcpListener, TcpAuth, String), String> {
    check_keys(
        args,
        &[
            "port",
            "listen",
            "auth-anonymous",
            "auth-ip-acl",
            "auth-cookie",
            "auth-cookie-enabled",
        ],
    )?;
    let port = match args.get("port") {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("port='{p}' is not a port number (1-65535)"))?,
        None => 4713,
    };
    let anonymous = match args.get("auth-anonymous") {
        Some(v) => parse_bool("auth-anonymous", v)?,
        None => false,
    };
    let allow = match args.get("auth-ip-acl") {
        Some(acl) => acl
            .split(';')
            .filter(|a| !a.trim().is_empty())
            .map(crate::tcp::Net::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("auth-ip-acl: {e}"))?,
        None => Vec::new(),
    };
    let cookie_enabled = match args.get("auth-cookie-enabled") {
        Some(v) => parse_bool("auth-cookie-enabled", v)?,
        None => true,
    };
    let cookie = if cookie_enabled && !anonymous {
        let path = args
            .get("auth-cookie")
            .map(|p| std::path::PathBuf::from(unescape(p)))
            .or_else(|| srv.opts.cookie_path.clone())
            .or_else(crate::tcp::default_cookie_path)
            .ok_or("no cookie path: give auth-cookie= (HOME is not set)")?;
        let c = crate::tcp::load_or_create_cookie(&path).map_err(|e| format!("{e:#}"))?;
        Some(Arc::new(c))
    } else {
        None
    };
    let listener = match args.get("listen") {
        Some(a) => {
            let a = a.trim_start_matches('[').trim_end_matches(']');
            let ip: IpAddr = a
                .parse()
                .map_err(|_| format!("listen='{a}' is not an IPv4 or IPv6 address"))?;
            TcpListener::bind(SocketAddr::new(ip, port))
                .map_err(|e| format!("binding {}: {e}", SocketAddr::new(ip, port)))?
        }
        // PulseAudio listens on every address by default; one IPv6 socket serves IPv4
        // too unless the system turned that off, so IPv4 alone is the fallback.
        None => TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port))
            .or_else(|_| TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))))
            .map_err(|e| format!("binding port {port}: {e}"))?,
    };
    let addr = listener
        .local_addr()
        .map_err(|e| format!("local address: {e}"))?
        .to_string();
    let auth = TcpAuth {
        anonymous,
        allow,
        cookie,
    };
    Ok((listener, auth, addr))
}

/// Binds `module-native-protocol-unix`'s socket (refusing one a server answers on).
fn unix_listener(args: &BTreeMap<String, String>) -> Result<PulseListener, String> {
    check_keys(
        args,
        &[
            "socket",
            "auth-anonymous",
            "auth-group",
            "auth-group-enable",
            "auth-cookie",
            "auth-cookie-enabled",
            "srbchannel",
        ],
    )?;
    for key in [
        "auth-anonymous",
        "auth-group-enable",
        "auth-cookie-enabled",
        "srbchannel",
    ] {
        if let Some(v) = args.get(key) {
            parse_bool(key, v)?;
        }
    }
    let path = std::path::PathBuf::from(unescape(
        args.get("socket")
            .ok_or("socket= is required (the default socket is quaverd's own)")?,
    ));
    if !path.is_absolute() {
        return Err(format!(
            "socket='{}' must be an absolute path",
            path.display()
        ));
    }
    PulseListener::bind(&path).map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_arguments_parse_like_pulseaudio() {
        let a = parse_args_raw(
            r#"sink_name=virt sink_properties="device.description='My Sink'" rate=48000"#,
        )
        .unwrap();
        assert_eq!(a["sink_name"], "virt");
        assert_eq!(a["sink_properties"], "device.description='My Sink'");
        let p = parse_props(&a["sink_properties"]).unwrap();
        assert_eq!(p["device.description"], "My Sink");
        // pactl's usual form: an escaped space survives into the proplist.
        let a = parse_args_raw(r"sink_properties=device.description=My\ Sink").unwrap();
        let p = parse_props(&a["sink_properties"]).unwrap();
        assert_eq!(p["device.description"], "My Sink");
        assert_eq!(unescape(r"a\\b\ c"), r"a\b c");
        assert!(parse_args("x").is_err());
        assert!(parse_args("a=1 a=2").is_err());
        assert!(parse_args("a=\"open").is_err());
        assert!(parse_args("").unwrap().is_empty());
    }

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
