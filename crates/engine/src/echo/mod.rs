//! Echo cancellation as a source/sink pair, like PulseAudio's module-echo-cancel
//! (docs/dsp/echo-cancel.md).
//!
//! - The **echo-cancel source** is a device-source node whose inputs are the
//!   microphone (every output port of `source_master`) and the reference (every
//!   output port of `sink_master`, i.e. its monitor: the mix the speakers play in the
//!   same cycle). Its processor ([`EchoProcessor`]) hands both, downmixed to mono, to a
//!   worker thread running the canceller (WebRTC's AEC3, pure Rust, through the `aec3`
//!   crate), which estimates the echo path's delay itself; the cleaned microphone
//!   comes back on every output, two 10 ms blocks plus a quantum later.
//! - The **echo-cancel sink** is a device-sink node passing what is played into it on
//!   to `sink_master`: applications that play there are heard and cancelled, as with
//!   PulseAudio. Everything else `sink_master` plays is cancelled too, since the
//!   reference is its whole mix.
//!
//! Both masters run on the engine's one clock (a second card is a follower whose
//! converter keeps it on the driver's clock), so there is no drift to compensate; what
//! is left is a slowly moving delay, which the canceller's delay estimator follows.

mod worker;

pub use worker::{BLOCK_MS, EchoProcessor, EchoStats, EchoWorker, RATES, start};

use crate::graph::{Graph, NodeId};
use crate::rt::node::{CycleInfo, Processor};
use crate::{Engine, EngineError, NodeKind, NodeSpec};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use std::sync::Arc;

/// What an echo-cancel pair is made of.
#[derive(Debug, Clone)]
pub struct EchoSpec {
    /// Name of the cleaned source node.
    pub source_name: String,
    /// Its description.
    pub source_description: String,
    /// Name of the sink node that plays on `sink_master`.
    pub sink_name: String,
    /// Its description.
    pub sink_description: String,
    /// The microphone: a device source, or a device sink (its monitor).
    pub source_master: String,
    /// The speakers: a device sink, whose mix is the reference.
    pub sink_master: String,
    /// The cleaned source's layout (the same mono signal on every channel).
    pub channels: ChannelMap,
}

/// A running echo-cancel pair. Remove its nodes ([`EchoPair::remove`]) before the
/// worker goes: dropping the pair stops the worker.
#[derive(Debug, Clone)]
pub struct EchoPair {
    /// The cleaned source.
    pub source: NodeId,
    /// The sink playing on the speakers.
    pub sink: NodeId,
    /// The canceller's thread.
    pub worker: Arc<EchoWorker>,
}

impl EchoPair {
    /// Takes both nodes out of the graph and stops the worker.
    pub fn remove(&self, engine: &Engine) {
        for node in [self.source, self.sink] {
            if let Err(e) = engine.remove_node(node) {
                tracing::debug!("echo canceller: removing node {node:?}: {e}");
            }
        }
        self.worker.stop();
    }
}

/// One output port of a master: its id (linked by id: a device node's input and output
/// ports may share a name), name and channel.
type MasterPort = (crate::graph::PortId, String, quaver_dsp::ChannelPosition);

/// A node's output ports, or an error naming what is missing.
fn outputs_of(
    graph: &Graph,
    name: &str,
    want: &[NodeKind],
) -> Result<Vec<MasterPort>, EngineError> {
    let node = graph
        .nodes
        .values()
        .find(|n| n.name == name)
        .ok_or_else(|| EngineError::NoSuchNode(name.to_string()))?;
    if !want.contains(&node.kind) {
        return Err(EngineError::Invalid(format!(
            "'{name}' is a {:?}, not a device",
            node.kind
        )));
    }
    let ports: Vec<_> = node
        .outputs
        .iter()
        .map(|p| (*p, graph.ports[p].name.clone(), graph.ports[p].channel))
        .collect();
    if ports.is_empty() {
        return Err(EngineError::Invalid(format!(
            "'{name}' has no audio to take"
        )));
    }
    Ok(ports)
}

/// Creates the pair `spec` describes: both nodes, their links and the canceller's
/// worker. On an error nothing stays in the graph.
pub fn add(engine: &Engine, spec: &EchoSpec) -> Result<EchoPair, EngineError> {
    let graph = engine.graph();
    let mic = outputs_of(
        &graph,
        &spec.source_master,
        &[NodeKind::DeviceSource, NodeKind::DeviceSink],
    )?;
    let speakers = outputs_of(&graph, &spec.sink_master, &[NodeKind::DeviceSink])?;
    if spec.channels.is_empty() {
        return Err(EngineError::Invalid("the source needs a channel".into()));
    }
    let (worker, processor) = start(engine.rate(), mic.len()).map_err(EngineError::Invalid)?;
    let worker = Arc::new(worker);

    let mut source = NodeSpec::new(&spec.source_name, NodeKind::DeviceSource);
    source.description = spec.source_description.clone();
    source.inputs = ChannelMap(mic.iter().chain(&speakers).map(|p| p.2).collect());
    source.input_names = mic
        .iter()
        .map(|p| format!("mic_{}", p.1))
        .chain(speakers.iter().map(|p| format!("ref_{}", p.1)))
        .collect();
    source.outputs = spec.channels.clone();
    let source = engine.add_node(source, Some(Box::new(processor)))?;

    let layout = ChannelMap(speakers.iter().map(|p| p.2).collect());
    let mut sink = NodeSpec::new(&spec.sink_name, NodeKind::DeviceSink);
    sink.description = spec.sink_description.clone();
    sink.inputs = layout.clone();
    sink.outputs = layout;
    let sink = match engine.add_node(sink, Some(Box::new(PassThrough))) {
        Ok(id) => id,
        Err(e) => {
            let _ = engine.remove_node(source);
            return Err(e);
        }
    };
    let pair = EchoPair {
        source,
        sink,
        worker,
    };
    if let Err(e) = link_pair(engine, spec, &pair, &mic, &speakers) {
        pair.remove(engine);
        return Err(e);
    }
    Ok(pair)
}

/// The pair's links: microphone and reference into the source port by port, the
/// sink to the speakers by channel.
fn link_pair(
    engine: &Engine,
    spec: &EchoSpec,
    pair: &EchoPair,
    mic: &[MasterPort],
    speakers: &[MasterPort],
) -> Result<(), EngineError> {
    let name = |id| {
        engine
            .node_name(id)
            .ok_or_else(|| EngineError::NoSuchNode(format!("{id:?}")))
    };
    let (source, sink) = (name(pair.source)?, name(pair.sink)?);
    for (id, port, _) in mic {
        let from = format!("{}:{id}", spec.source_master);
        engine.link(&from, &format!("{source}:mic_{port}"))?;
    }
    for (id, port, _) in speakers {
        let from = format!("{}:{id}", spec.sink_master);
        engine.link(&from, &format!("{source}:ref_{port}"))?;
    }
    engine.link(&sink, &spec.sink_master)?;
    Ok(())
}

/// The echo-cancel sink's processor: what is played into it goes on (its outputs feed
/// the speakers and are its monitor).
struct PassThrough;

impl Processor for PassThrough {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            let out = &mut outputs.channel_mut(ch)[..cx.frames];
            if ch < inputs.channels() {
                out.copy_from_slice(&inputs.channel(ch)[..cx.frames]);
            } else {
                out.fill(0.0);
            }
        }
    }
}
