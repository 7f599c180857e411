//! State shared by every PulseAudio connection: clients, the streams this front-end
//! created, volumes as PulseAudio clients set them, and event fan-out.
//!
//! PulseAudio indexes are derived from graph node ids, which the engine never reuses
//! while it runs: a sink, source, sink input or source output has the index of its node;
//! the monitor source of a sink has the sink's node id as its source index (node ids are
//! unique across kinds, so it never collides with a real source). Clients and modules
//! have indexes of their own, allocated by counters.

use crate::io::shared::{ConnHandle, ConnMsg};
use crate::memstat::{Counted, MemStats};
use crate::rt::shared::{PlayShared, RecShared};
use crate::wire::convert::{cstr, frames_to_usec};
use pulseaudio::protocol::{
    ChannelMap as PaMap, ChannelVolume, Props, SampleInfo, SampleSpec, SubscriptionEvent,
    SubscriptionEventFacility as Facility, SubscriptionEventType as EventType,
};
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::graph::{Graph, Node};
use quaver_engine::{Engine, NodeId, NodeKind};
use quaver_policy::{NodeView, Policy};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, MutexGuard};

/// Settings of the PulseAudio front-end.
#[derive(Debug, Clone)]
pub struct PulseOptions {
    /// Most clients at once; further connections are closed at once.
    pub max_clients: usize,
    /// Most streams per client.
    pub max_streams_per_client: usize,
    /// Resampler for streams whose rate differs from the engine's.
    pub resample_quality: ResampleQuality,
    /// Let unix-socket clients that can send audio as memfd references do so.
    pub memfd: bool,
    /// Offer memfd clients the shared ring-buffer channel (srbchannel).
    pub srbchannel: bool,
    /// Send memfd clients their record audio as references into a memfd pool of ours.
    pub memfd_record: bool,
    /// While a playback stream's low-water time (tlength − minreq: how long the client
    /// has to answer a request) is below this many µs, or the only one below twice
    /// this, the I/O thread runs SCHED_FIFO ([`IO_RT_PRIORITY`]); 0: never.
    pub realtime_io_below_usec: u64,
    /// Let the RT thread send playback streams' requests to unix-socket clients itself
    /// ([`crate::rt::rtwire`]).
    pub rt_requests: bool,
    /// Stream restore's entries, shared with the daemon's other front-ends (see
    /// [`crate::ext::restore`]); `None`: off, and its extension answers NOEXTENSION.
    pub stream_restore: Option<quaver_policy::restore::SharedStore>,
    /// The auth cookie TCP clients present (`[pulse] cookie`); `None`:
    /// `~/.config/pulse/cookie`. Read (or created) when a TCP listener starts.
    pub cookie_path: Option<std::path::PathBuf>,
    /// Modules to load at start (`name args`), in order; one that fails is logged and
    /// skipped.
    pub modules: Vec<String>,
    /// What an EXIT command (`pactl exit`) does once it is answered: quaverd's is its
    /// clean stop, as on SIGTERM. `None`: EXIT is refused with ACCESS, as by
    /// PulseAudio's `--disallow-exit`.
    pub on_exit: Option<fn()>,
    /// The sound cards the daemon opened (`pactl list cards`, `set-card-profile`, the
    /// card fields of sinks and sources); `None`: no cards.
    pub cards: Option<quaver_policy::cards::SharedCards>,
    /// Role ducking shared with the daemon's other front-ends; `None`: no ducking.
    pub ducking: Option<quaver_policy::roles::SharedDucking>,
}

/// SCHED_FIFO priority of the I/O thread while a low-latency stream plays: above every
/// normal thread (the clients it answers), below the engine's and callback clients'.
pub const IO_RT_PRIORITY: i32 = 1;

impl Default for PulseOptions {
    fn default() -> Self {
        PulseOptions {
            max_clients: 256,
            max_streams_per_client: 64,
            resample_quality: ResampleQuality::High,
            memfd: true,
            srbchannel: true,
            memfd_record: true,
            realtime_io_below_usec: 8_000,
            rt_requests: false,
            // A library default must not write into the user's state directory.
            stream_restore: Some(quaver_policy::restore::Store::memory().shared()),
            cookie_path: None,
            modules: Vec::new(),
            // A library must not let its clients stop the program it runs in unasked.
            on_exit: None,
            cards: None,
            ducking: None,
        }
    }
}

/// A connected client.
#[derive(Debug)]
pub struct ClientRec {
    /// Application name (from `application.name`).
    pub name: String,
    /// Client proplist.
    pub props: Props,
    /// Its connection.
    pub conn: Arc<ConnHandle>,
}

/// Live view of a stream's transport, for introspection.
#[derive(Debug, Clone)]
pub enum StreamIo {
    /// A playback stream.
    Play(Arc<PlayShared>),
    /// A record stream.
    Record(Arc<RecShared>),
}

/// A stream created by this front-end (a sink input or source output).
#[derive(Debug, Clone)]
pub struct StreamRec {
    /// Owning client.
    pub client: u32,
    /// Client's sample spec.
    pub spec: SampleSpec,
    /// Client's channel map.
    pub map: PaMap,
    /// Stream proplist.
    pub props: Props,
    /// Volume as the client or a mixer set it.
    pub cvolume: ChannelVolume,
    /// Corked by its client.
    pub corked: bool,
    /// Created without naming a device (or on `@DEFAULT_…@`) and never moved by hand:
    /// it follows the default device when that changes, as in PulseAudio 15+.
    pub follows_default: bool,
    /// Its client named a device at creation and no one has moved it since: stream
    /// restore leaves it where it is when a remembered device appears.
    pub pinned: bool,
    /// For a record stream on a single sink input's monitor, that sink input: the
    /// record stream is killed when it goes, as in PulseAudio.
    pub monitors: Option<NodeId>,
    /// Transport state.
    pub io: StreamIo,
}

/// The index a name that is a number stands for, read as PulseAudio's name registry
/// reads one (`pa_atou`): decimal, `0x` hexadecimal or `0` octal, without sign or
/// spaces, within `u32`; `None` when the name is not a number. PulseAudio tries a name
/// as an index only after no object has that name (pavucontrol connects its level
/// meters to "<index>"; `pactl set-default-sink 1` works).
pub fn index_name(name: &str) -> Option<u32> {
    let (digits, radix) = match name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if name.len() > 1 && name.starts_with('0') => (&name[1..], 8),
        None => (name, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// Mutable state behind the server's mutex.
#[derive(Debug, Default)]
pub struct State {
    /// Clients by index.
    pub clients: BTreeMap<u32, ClientRec>,
    /// Our streams by node id.
    pub streams: BTreeMap<NodeId, StreamRec>,
    /// Per-channel volumes PulseAudio clients set on sinks and sources, keyed by
    /// (is_source, index); reported while the node's gain still matches them.
    pub device_volumes: BTreeMap<(bool, u32), ChannelVolume>,
    /// Monitor sources' own volume and mute (stored; the monitor taps the sink's
    /// post-volume signal, so they do not change the audio).
    pub monitor_mute: BTreeMap<u32, bool>,
    /// The sample cache by index.
    pub samples: BTreeMap<u32, Sample>,
    /// Next sample index.
    pub next_sample: u32,
    /// Loaded modules by index.
    pub modules: BTreeMap<u32, crate::modules::record::ModuleRec>,
    /// SUSPEND_SINK / SUSPEND_SOURCE requests standing: (is a sink, device node).
    pub suspend_requests: std::collections::BTreeSet<(bool, NodeId)>,
    /// Next module index.
    pub next_module: u32,
    /// The default sink's and source's names as last announced ([`Server::check_defaults`]).
    pub announced_defaults: (Option<String>, Option<String>),
}

impl State {
    /// The index of the cached sample `name` resolves to, as PulseAudio's name registry
    /// resolves it: a sample of that name, else a name that is a number as an index.
    pub fn sample_by_name(&self, name: &str) -> Option<u32> {
        self.samples
            .iter()
            .find(|(_, s)| s.name == name)
            .map(|(&i, _)| i)
            .or_else(|| index_name(name).filter(|i| self.samples.contains_key(i)))
    }
}

/// Everything the connection, accept and event threads share.
pub struct Server {
    /// The engine (control API only).
    pub engine: Engine,
    /// The daemon's routing policy, shared with the other front-ends.
    pub policy: Arc<Mutex<Policy>>,
    /// Settings.
    pub opts: PulseOptions,
    /// Mutable state.
    pub state: Mutex<State>,
    /// Next client index.
    pub next_client: AtomicU32,
    /// A per-run random number PulseAudio clients use to detect restarts.
    pub cookie: u32,
    /// Stream restore's entries; `None` when it is off.
    pub restore: Option<quaver_policy::restore::SharedStore>,
    /// Where accepted connections are handed to the I/O thread.
    pub(crate) io: Arc<crate::io::shared::IoShared>,
    /// The memory blocks STAT reports.
    pub mem: Arc<MemStats>,
}

/// A resolved device (sink or source) by PulseAudio's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// PulseAudio index.
    pub index: u32,
    /// PulseAudio name.
    pub name: String,
    /// The graph node carrying it.
    pub node: NodeId,
    /// True for a sink's monitor source.
    pub monitor: bool,
}

/// Name of a sink's monitor source.
pub fn monitor_name(sink: &str) -> String {
    format!("{sink}.monitor")
}

impl Server {
    /// Locks the state.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends an event to every subscribed client.
    pub fn broadcast(&self, facility: Facility, kind: EventType, index: u32) {
        let ev = SubscriptionEvent {
            event_facility: facility,
            event_type: kind,
            index: Some(index),
        };
        self.post_all(ConnMsg::Event(ev));
    }

    /// Posts `msg` to every connection (each filters what its client asked for).
    pub fn post_all(&self, msg: ConnMsg) {
        let conns: Vec<Arc<ConnHandle>> = self
            .lock()
            .clients
            .values()
            .map(|c| c.conn.clone())
            .collect();
        for c in conns {
            c.post(msg.clone());
        }
    }

    /// The policy's view of the graph: devices, then monitors as sources.
    pub fn policy_views(graph: &Graph) -> Vec<NodeView> {
        let mut v: Vec<NodeView> = graph
            .nodes
            .values()
            .map(|n| NodeView {
                name: n.name.clone(),
                kind: n.kind.as_str().to_string(),
            })
            .collect();
        v.extend(
            graph
                .nodes
                .values()
                .filter(|n| n.kind == NodeKind::DeviceSink)
                .map(|n| NodeView {
                    name: monitor_name(&n.name),
                    kind: "source".into(),
                }),
        );
        v
    }

    /// The default sink's node, by policy.
    pub fn default_sink(&self, graph: &Graph) -> Option<Device> {
        let views = Self::policy_views(graph);
        let name = self
            .policy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .default_sink(&views)?;
        self.sink_by_name(graph, &name)
    }

    /// The default source (a real source, else the default sink's monitor).
    pub fn default_source(&self, graph: &Graph) -> Option<Device> {
        let views = Self::policy_views(graph);
        let name = self
            .policy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .default_source(&views);
        match name {
            Some(n) => self.source_by_name(graph, &n),
            None => self
                .default_sink(graph)
                .and_then(|s| self.monitor_of(graph, s.node)),
        }
    }

    /// A sink as PulseAudio's name registry resolves a name: `@DEFAULT_SINK@`, a sink
    /// of that name, else a name that is a number ([`index_name`]) as an index. Every
    /// command and module argument that names a sink comes through here.
    pub fn sink_by_name(&self, graph: &Graph, name: &str) -> Option<Device> {
        if name == "@DEFAULT_SINK@" {
            return self.default_sink(graph);
        }
        graph
            .nodes
            .values()
            .find(|n| n.kind == NodeKind::DeviceSink && n.name == name)
            .map(sink_device)
            .or_else(|| self.sink_by_index(graph, index_name(name)?))
    }

    /// A sink by index.
    pub fn sink_by_index(&self, graph: &Graph, index: u32) -> Option<Device> {
        graph
            .nodes
            .get(&index)
            .filter(|n| n.kind == NodeKind::DeviceSink)
            .map(sink_device)
    }

    /// A sink by index or name, as PulseAudio commands address them.
    pub fn find_sink(
        &self,
        graph: &Graph,
        index: Option<u32>,
        name: Option<&str>,
    ) -> Option<Device> {
        match (index, name) {
            (Some(i), _) => self.sink_by_index(graph, i),
            (None, Some(n)) => self.sink_by_name(graph, n),
            (None, None) => None,
        }
    }

    /// The monitor source of sink node `sink`.
    pub fn monitor_of(&self, graph: &Graph, sink: NodeId) -> Option<Device> {
        graph
            .nodes
            .get(&sink)
            .filter(|n| n.kind == NodeKind::DeviceSink)
            .map(|n| Device {
                index: n.id,
                name: monitor_name(&n.name),
                node: n.id,
                monitor: true,
            })
    }

    /// A source as PulseAudio's name registry resolves a name: a capture device, a
    /// `<sink>.monitor`, `@DEFAULT_SOURCE@` or `@DEFAULT_MONITOR@`, else a name that is
    /// a number ([`index_name`]) as an index. Every command and module argument that
    /// names a source comes through here.
    pub fn source_by_name(&self, graph: &Graph, name: &str) -> Option<Device> {
        match name {
            "@DEFAULT_SOURCE@" => return self.default_source(graph),
            "@DEFAULT_MONITOR@" => {
                let sink = self.default_sink(graph)?;
                return self.monitor_of(graph, sink.node);
            }
            _ => {}
        }
        if let Some(n) = graph
            .nodes
            .values()
            .find(|n| n.kind == NodeKind::DeviceSource && n.name == name)
        {
            return Some(source_device(n));
        }
        let monitored = name.strip_suffix(".monitor").and_then(|sink| {
            graph
                .nodes
                .values()
                .find(|n| n.kind == NodeKind::DeviceSink && n.name == sink)
        });
        match monitored {
            Some(node) => self.monitor_of(graph, node.id),
            None => self.source_by_index(graph, index_name(name)?),
        }
    }

    /// A source by index.
    pub fn source_by_index(&self, graph: &Graph, index: u32) -> Option<Device> {
        let n = graph.nodes.get(&index)?;
        match n.kind {
            NodeKind::DeviceSource => Some(source_device(n)),
            NodeKind::DeviceSink => self.monitor_of(graph, n.id),
            _ => None,
        }
    }

    /// A source by index or name.
    pub fn find_source(
        &self,
        graph: &Graph,
        index: Option<u32>,
        name: Option<&str>,
    ) -> Option<Device> {
        match (index, name) {
            (Some(i), _) => self.source_by_index(graph, i),
            (None, Some(n)) => self.source_by_name(graph, n),
            (None, None) => None,
        }
    }

    /// Every source in index order: capture devices and sink monitors.
    pub fn sources(&self, graph: &Graph) -> Vec<Device> {
        graph
            .nodes
            .values()
            .filter_map(|n| match n.kind {
                NodeKind::DeviceSource => Some(source_device(n)),
                NodeKind::DeviceSink => self.monitor_of(graph, n.id),
                _ => None,
            })
            .collect()
    }
}

impl Server {
    /// Moves stream node `index` to device `dev` in one engine plan (a crossfade within
    /// one cycle: never silent, never on both). The owning client is told.
    pub fn move_stream(
        &self,
        graph: &Graph,
        index: NodeId,
        dev: &Device,
        playback: bool,
    ) -> Result<(), pulseaudio::protocol::PulseError> {
        use pulseaudio::protocol::PulseError;
        let kind = if playback {
            NodeKind::PlaybackStream
        } else {
            NodeKind::RecordStream
        };
        let node = graph
            .nodes
            .get(&index)
            .filter(|n| n.kind == kind || (!playback && is_loop(n)))
            .ok_or(PulseError::NoEntity)?;
        let dev_node = graph.nodes.get(&dev.node).ok_or(PulseError::NoEntity)?;
        let pinned = self.lock().modules.values().any(|m| {
            m.nodes.contains(&index)
                && if playback {
                    m.sink_dont_move
                } else {
                    m.source_dont_move
                }
        });
        if pinned {
            tracing::info!(
                "pulse: {} was loaded with {}_dont_move and stays",
                node.name,
                if playback { "sink" } else { "source" }
            );
            return Err(PulseError::Invalid);
        }
        // A loopback moved as a source output changes the source it records.
        let inputs_of_loop = !playback && is_loop(node);
        let old = if inputs_of_loop {
            loop_source(graph, index)
        } else {
            stream_target(graph, index)
        };
        if old == Some(dev.node) {
            return Ok(());
        }
        let err = |e: quaver_engine::EngineError| {
            use quaver_engine::EngineError as E;
            match e {
                // The request cannot be done (a loopback onto its own source's sink):
                // the client is told; nothing is wrong with the server.
                E::Incompatible(_) | E::NoSuchNode(_) | E::NoSuchPort(_) => {
                    tracing::info!("pulse: cannot move {}: {e}", node.name)
                }
                _ => tracing::warn!("pulse: moving {}: {e}", node.name),
            }
            PulseError::Invalid
        };
        // One plan: the old links fade out while the new ones fade in, in one cycle.
        let from = old.map(|o| graph.nodes[&o].name.clone());
        if inputs_of_loop {
            self.engine
                .relink_inputs(&node.name, from.as_deref(), &dev_node.name)
        } else {
            self.engine
                .relink(&node.name, from.as_deref(), &dev_node.name)
        }
        .map_err(err)?;
        let owner = self.lock().streams.get(&index).map(|s| s.client);
        if let Some(owner) = owner
            && let Some(c) = self.lock().clients.get(&owner)
        {
            c.conn.post(ConnMsg::Moved(index));
        }
        tracing::info!("pulse: moved {} to {}", node.name, dev.name);
        Ok(())
    }
}

impl Server {
    /// Compares the policy's default sink and source now with those last announced:
    /// when one changed (a port plugged or unplugged, a card come or gone, a default
    /// set), tells subscribers and moves the streams that follow the default to it.
    /// Returns whether anything changed.
    pub fn check_defaults(&self) -> bool {
        let graph = self.engine.graph();
        let (sink, source) = (self.default_sink(&graph), self.default_source(&graph));
        let now = (
            sink.as_ref().map(|d| d.name.clone()),
            source.as_ref().map(|d| d.name.clone()),
        );
        let before = std::mem::replace(&mut self.lock().announced_defaults, now.clone());
        if before == now {
            return false;
        }
        tracing::info!(
            "default sink {}, default source {}",
            now.0.as_deref().unwrap_or("(none)"),
            now.1.as_deref().unwrap_or("(none)")
        );
        self.broadcast(Facility::Server, EventType::Changed, u32::MAX);
        if before.0 != now.0
            && let Some(d) = &sink
        {
            self.follow_default(d, true);
        }
        if before.1 != now.1
            && let Some(d) = &source
        {
            self.follow_default(d, false);
        }
        true
    }

    /// Moves every stream that follows the default device to the new default `dev`.
    pub fn follow_default(&self, dev: &Device, playback: bool) {
        let graph = self.engine.graph();
        let kind = if playback {
            NodeKind::PlaybackStream
        } else {
            NodeKind::RecordStream
        };
        let followers: Vec<NodeId> = self
            .lock()
            .streams
            .iter()
            .filter(|(id, s)| {
                s.follows_default && graph.nodes.get(id).is_some_and(|n| n.kind == kind)
            })
            .map(|(&id, _)| id)
            .collect();
        for id in followers {
            let _ = self.move_stream(&graph, id, dev, playback);
        }
    }
}

fn sink_device(n: &Node) -> Device {
    Device {
        index: n.id,
        name: n.name.clone(),
        node: n.id,
        monitor: false,
    }
}

fn source_device(n: &Node) -> Device {
    Device {
        index: n.id,
        name: n.name.clone(),
        node: n.id,
        monitor: false,
    }
}

/// The device a stream node is linked to: for playback the first sink its outputs feed;
/// for record the node feeding its inputs (a source, a sink's monitor, or a playback
/// stream for single-input monitors).
pub fn stream_target(graph: &Graph, node: NodeId) -> Option<NodeId> {
    let n = graph.nodes.get(&node)?;
    match n.kind {
        NodeKind::PlaybackStream => peers(graph, n, true).find(|id| {
            graph
                .nodes
                .get(id)
                .is_some_and(|t| t.kind == NodeKind::DeviceSink)
        }),
        NodeKind::RecordStream => peers(graph, n, false).next(),
        _ => None,
    }
}

/// The nodes `n`'s outputs feed (`outward`) or that feed its inputs, one per link.
fn peers<'a>(graph: &'a Graph, n: &'a Node, outward: bool) -> impl Iterator<Item = NodeId> + 'a {
    graph.links.values().filter_map(move |l| {
        if outward {
            n.outputs
                .contains(&l.output)
                .then(|| graph.ports[&l.input].node)
        } else {
            n.inputs
                .contains(&l.input)
                .then(|| graph.ports[&l.output].node)
        }
    })
}

/// The PulseAudio source index a record stream reads (a stream-monitor counts as its
/// sink's monitor).
pub fn record_source_index(graph: &Graph, node: NodeId) -> Option<u32> {
    if graph.nodes.get(&node).is_some_and(is_loop) {
        return loop_source(graph, node);
    }
    let t = stream_target(graph, node)?;
    match graph.nodes.get(&t)?.kind {
        NodeKind::DeviceSource | NodeKind::DeviceSink => Some(t),
        NodeKind::PlaybackStream => stream_target(graph, t),
        _ => None,
    }
}

/// A loopback's node: a playback stream fed from the graph (module-loopback). It is
/// listed as a sink input and, for its capture side, as a source output, as
/// PulseAudio's loopback is.
pub fn is_loop(n: &Node) -> bool {
    n.kind == NodeKind::PlaybackStream && !n.inputs.is_empty()
}

/// Whether `n` is listed as a source output: a record stream or a loopback.
pub fn is_source_output(n: &Node) -> bool {
    n.kind == NodeKind::RecordStream || is_loop(n)
}

/// The device (a source, or a sink for its monitor) feeding a loopback's inputs.
pub fn loop_source(graph: &Graph, node: NodeId) -> Option<NodeId> {
    peers(graph, graph.nodes.get(&node)?, false).find(|id| {
        graph
            .nodes
            .get(id)
            .is_some_and(|d| matches!(d.kind, NodeKind::DeviceSource | NodeKind::DeviceSink))
    })
}

/// The channels of `ports`, in order.
pub fn ports_map(graph: &Graph, ports: &[u32]) -> quaver_dsp::ChannelMap {
    quaver_dsp::ChannelMap(ports.iter().map(|p| graph.ports[p].channel).collect())
}

/// A cached sample.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Name clients play it by.
    pub name: String,
    /// Format it was uploaded in.
    pub spec: SampleSpec,
    /// Its channel map.
    pub map: PaMap,
    /// Proplist given at upload.
    pub props: Props,
    /// Decoded interleaved samples, counted as a memory block while anything holds
    /// them (a playing sample outlives its removal from the cache).
    pub data: Arc<Counted<Vec<f32>>>,
    /// Uploaded size in bytes.
    pub bytes: u32,
}

impl Sample {
    /// Frames in the sample.
    pub fn frames(&self) -> usize {
        self.data.len() / (self.spec.channels.max(1) as usize)
    }

    /// The introspection record.
    pub fn info(&self, index: u32) -> SampleInfo {
        SampleInfo {
            index,
            name: cstr(&self.name),
            cvolume: ChannelVolume::norm(self.spec.channels.max(1)),
            sample_spec: self.spec,
            channel_map: self.map,
            duration: frames_to_usec(self.frames() as u64, self.spec.sample_rate),
            length: self.bytes,
            lazy: None,
            props: self.props.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::index_name;

    #[test]
    fn names_that_are_numbers_read_as_pulseaudio_reads_them() {
        assert_eq!(index_name("0"), Some(0));
        assert_eq!(index_name("12"), Some(12));
        assert_eq!(index_name("0x1f"), Some(31));
        assert_eq!(index_name("0X1F"), Some(31));
        assert_eq!(index_name("010"), Some(8), "a leading zero is octal");
        assert_eq!(index_name("4294967295"), Some(u32::MAX));
        for not in [
            "",
            "+1",
            "-1",
            " 1",
            "1 ",
            "1.0",
            "0x",
            "08",
            "4294967296",
            "sink",
        ] {
            assert_eq!(index_name(not), None, "{not:?}");
        }
    }
}
