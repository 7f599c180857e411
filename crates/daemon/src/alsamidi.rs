//! ALSA sequencer MIDI in the graph, as a2jmidid does for jackd2: one node, `a2j`, with a
//! MIDI output port per readable sequencer port (what it plays comes out there) and a
//! MIDI input port per writable one (what reaches it is sent there), named the way
//! a2jmidid names them so JACK users find them where they expect. Ports follow the
//! sequencer's announcements while quaverd runs. docs/alsa/seq.md ("In the graph").
//!
//! Two sides: [`SeqMidiNode`], the node's processor on the engine's RT thread, drains the
//! bridge's input queue into its output ports' event lists and sends its input ports'
//! events through [`SeqOutput`] (a bounded lock-free queue to the bridge's thread); the
//! `alsa-midi` thread adds and removes ports on [`SeqNotice`]s and tells the processor
//! which buffer is which sequencer port through a lock-free ring of [`Route`]s.

use quaver_devices::alsa::seq::{
    MidiReceiver, MidiSender, PortId as SeqPort, PortInfo, SeqBridge, SeqConfig, SeqNotice,
    SeqOutput,
};
use quaver_dsp::{ChannelPosition, Planar, PlanarMut};
use quaver_engine::graph::{Direction, NodeKind, NodeSpec, PortId, PortType};
use quaver_engine::rt::midi::{self, MidiPorts};
use quaver_engine::{CycleInfo, Engine, NodeId, Processor};
use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::Duration;

/// The node's name: a2jmidid's JACK client name, so `a2j:…` port names carry over.
pub const NODE_NAME: &str = "a2j";
/// Sequencer ports per direction the node has room for: every port's buffer is
/// allocated up front at the largest quantum (32 KiB at 8192 frames), so room for 64 a
/// side costs 4 MiB; a port past it is logged and left out.
pub const MAX_PORTS: usize = 64;
/// Route changes the ring to the RT side holds.
const ROUTE_RING: usize = 2 * MAX_PORTS;
/// Messages read longer than this before a cycle began are dropped, not delivered: no
/// cycle ran to take them (the devices were suspended, nothing listened), and a burst
/// of old notes at frame 0 of the first cycle after would be worse than losing them.
pub const STALE_NS: u64 = 1_000_000_000;

/// Which sequencer port a buffer of the node stands for, from now on (`None`: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Output buffer `index` carries what sequencer port `port` plays.
    Source {
        /// Output buffer index.
        index: usize,
        /// The readable sequencer port.
        port: Option<SeqPort>,
    },
    /// What reaches input buffer `index` is sent to sequencer port `port`.
    Sink {
        /// Input buffer index.
        index: usize,
        /// The writable sequencer port.
        port: Option<SeqPort>,
    },
}

/// Where the processor sends its input ports' events. *RT*: allocation- and lock-free.
pub trait MidiOut: Send {
    /// Queues one message for `port`; false when refused (not one valid message, or
    /// the queue is full).
    fn send(&mut self, port: SeqPort, bytes: &[u8]) -> bool;
}

impl MidiOut for SeqOutput {
    fn send(&mut self, port: SeqPort, bytes: &[u8]) -> bool {
        SeqOutput::send(self, port, bytes).is_ok()
    }
}

impl MidiOut for MidiSender {
    fn send(&mut self, port: SeqPort, bytes: &[u8]) -> bool {
        self.push(0, port, bytes).is_ok()
    }
}

/// The `a2j` node's processor (not split: it never waits).
pub struct SeqMidiNode<O: MidiOut> {
    input: MidiReceiver,
    output: O,
    routes: rtrb::Consumer<Route>,
    /// Sequencer port per output buffer index.
    sources: Vec<Option<SeqPort>>,
    /// Sequencer port per input buffer index.
    sinks: Vec<Option<SeqPort>>,
    midi: MidiPorts,
    /// A message that wraps in the input ring is put together here (sized for the
    /// longest sysex the bridge delivers).
    scratch: Vec<u8>,
    /// Messages from ports with no graph port or too old to deliver, and events the
    /// output side refused.
    dropped: u64,
}

impl<O: MidiOut> SeqMidiNode<O> {
    /// A processor reading `input`, sending through `output`, told its routes through
    /// `routes`; `max_message` is the longest message `input` can hold.
    pub fn new(
        input: MidiReceiver,
        output: O,
        routes: rtrb::Consumer<Route>,
        max_message: usize,
    ) -> Self {
        SeqMidiNode {
            input,
            output,
            routes,
            sources: vec![None; MAX_PORTS],
            sinks: vec![None; MAX_PORTS],
            midi: MidiPorts::NONE,
            scratch: vec![0; max_message],
            dropped: 0,
        }
    }

    /// Messages dropped so far (no graph port for their source, older than
    /// [`STALE_NS`], or refused on the way out).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn apply_routes(&mut self) {
        while let Ok(r) = self.routes.pop() {
            let (table, index, port) = match r {
                Route::Source { index, port } => (&mut self.sources, index, port),
                Route::Sink { index, port } => (&mut self.sinks, index, port),
            };
            if let Some(slot) = table.get_mut(index) {
                *slot = port;
            }
        }
    }

    /// Moves every queued sequencer message into its output port's list. *RT*.
    fn deliver(&mut self, cx: &CycleInfo, outputs: &mut PlanarMut<'_>) {
        let last = cx.frames.saturating_sub(1) as u64;
        while let Some(m) = self.input.pop() {
            let index = self.sources.iter().position(|p| *p == Some(m.port));
            let Some(index) =
                index.filter(|i| self.midi.outputs.contains(*i) && *i < outputs.channels())
            else {
                self.dropped += 1;
                continue;
            };
            if cx.time_ns.saturating_sub(m.time_ns) > STALE_NS {
                self.dropped += 1;
                continue;
            }
            // Read before the cycle began: at its start; during it: where it was read.
            let after = m.time_ns.saturating_sub(cx.time_ns);
            let offset = (after as u128 * cx.rate as u128 / 1_000_000_000) as u64;
            let time = offset.min(last) as u32;
            let (a, b) = m.slices();
            let data = if b.is_empty() {
                a
            } else if let Some(n) = m.copy_to(&mut self.scratch) {
                &self.scratch[..n]
            } else {
                self.dropped += 1;
                continue;
            };
            // A full list counts the event in its `lost`.
            midi::push(
                midi::words_mut(outputs.whole_channel_mut(index)),
                time,
                data,
            );
        }
    }

    /// Sends what reached each input port to its sequencer port. *RT*.
    fn send_inputs(&mut self, inputs: &Planar<'_>) {
        for (index, port) in self.sinks.iter().enumerate() {
            let Some(port) = *port else { continue };
            if !self.midi.inputs.contains(index) || index >= inputs.channels() {
                continue;
            }
            for ev in midi::events(midi::words(inputs.whole_channel(index))) {
                if !self.output.send(port, ev.data) {
                    self.dropped += 1;
                }
            }
        }
    }
}

impl<O: MidiOut> Processor for SeqMidiNode<O> {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        self.apply_routes();
        for ch in 0..outputs.channels() {
            if self.midi.outputs.contains(ch) {
                midi::clear(midi::words_mut(outputs.whole_channel_mut(ch)));
            }
        }
        self.deliver(cx, outputs);
        self.send_inputs(&inputs);
    }

    fn midi_ports(&mut self, ports: &MidiPorts) {
        self.midi = *ports;
    }
}

/// The graph port name a2jmidid gives a sequencer port, `Client [N] (capture): Port`,
/// with `- ` for the `:` a graph port name cannot hold (`Virtual Raw MIDI 1-0 [20]
/// (capture) - VirMIDI 1-0`), cut to the graph's 128 bytes.
pub fn port_name(p: &PortInfo, capture: bool) -> String {
    let clean = |s: &str| {
        s.chars()
            .map(|c| if c == ':' || c.is_control() { '-' } else { c })
            .collect::<String>()
    };
    let dir = if capture { "capture" } else { "playback" };
    let mut name = format!(
        "{} [{}] ({dir}) - {}",
        clean(&p.client_name),
        p.id.client,
        clean(&p.port_name)
    );
    if name.len() > 128 {
        let mut end = 128;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

/// The control side: the node and which graph port stands for which sequencer port.
struct Ports {
    engine: Engine,
    node: NodeId,
    routes: rtrb::Producer<Route>,
    /// Sequencer port → (graph port, buffer index) of its capture and playback ports.
    capture: BTreeMap<SeqPort, (PortId, usize)>,
    playback: BTreeMap<SeqPort, (PortId, usize)>,
}

impl Ports {
    /// Tells the RT side a route; the ring only fills if the RT thread stalls, so a
    /// bounded wait is enough.
    fn route(&mut self, r: Route) {
        for _ in 0..100 {
            if self.routes.push(r).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::warn!("ALSA MIDI: the engine took no route change for 1 s; {r:?} lost");
    }

    fn add(&mut self, p: &PortInfo) {
        for (capture, wanted) in [(true, p.readable), (false, p.writable)] {
            let known = if capture {
                &self.capture
            } else {
                &self.playback
            };
            if !wanted || known.contains_key(&p.id) {
                continue;
            }
            let dir = if capture {
                Direction::Out
            } else {
                Direction::In
            };
            let name = port_name(p, capture);
            let added = self.engine.add_port_typed(
                self.node,
                dir,
                Some(&name),
                ChannelPosition::Aux(0),
                PortType::Midi,
            );
            let id = match added {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!("ALSA MIDI: no graph port for {} ({name}): {e}", p.id);
                    continue;
                }
            };
            let Some(index) = self.engine.inspect(|g| g.ports.get(&id).map(|p| p.index)) else {
                continue;
            };
            tracing::info!("ALSA MIDI: {} is {NODE_NAME}:{name}", p.id);
            if capture {
                self.capture.insert(p.id, (id, index));
                self.route(Route::Source {
                    index,
                    port: Some(p.id),
                });
            } else {
                self.playback.insert(p.id, (id, index));
                self.route(Route::Sink {
                    index,
                    port: Some(p.id),
                });
            }
        }
    }

    fn remove(&mut self, port: SeqPort) {
        // The RT side lets go of the buffer before the graph port (and its index) goes.
        if let Some((id, index)) = self.capture.remove(&port) {
            self.route(Route::Source { index, port: None });
            self.remove_graph_port(port, id, "capture");
        }
        if let Some((id, index)) = self.playback.remove(&port) {
            self.route(Route::Sink { index, port: None });
            self.remove_graph_port(port, id, "playback");
        }
    }

    fn remove_graph_port(&self, port: SeqPort, id: PortId, side: &str) {
        match self.engine.remove_port(self.node, id) {
            Ok(()) => tracing::info!("ALSA MIDI: {port} ({side}) left the graph"),
            Err(e) => tracing::warn!("ALSA MIDI: removing the {side} port of {port}: {e}"),
        }
    }
}

/// Opens the ALSA sequencer and puts its ports in the graph, following them on a thread
/// of its own. Without a sequencer (no alsa-lib, no `/dev/snd/seq`) it says so once and
/// returns `None`: quaverd runs on without ALSA MIDI.
pub fn start(engine: &Engine) -> Option<JoinHandle<()>> {
    if let Err(why) = quaver_devices::alsa::available() {
        tracing::info!("ALSA MIDI: off ({why})");
        return None;
    }
    let config = SeqConfig::default();
    let max_message = config.max_sysex;
    let mut bridge = match SeqBridge::open(config) {
        Ok(b) => b,
        Err(e) => {
            tracing::info!("ALSA MIDI: off ({e})");
            return None;
        }
    };
    let (input, output) = (bridge.take_input()?, bridge.take_output()?);
    let (tx, rx) = rtrb::RingBuffer::new(ROUTE_RING);
    let mut spec = NodeSpec::new(NODE_NAME, NodeKind::Filter);
    spec.description = "ALSA sequencer MIDI ports".into();
    spec.max_inputs = MAX_PORTS;
    spec.max_outputs = MAX_PORTS;
    // As a2jmidid's ports: `jack_lsp -p` shows them physical, so programs that look
    // for hardware MIDI (`jack_get_ports(.., JackPortIsPhysical)`) find them.
    spec.physical = true;
    let processor = SeqMidiNode::new(input, output, rx, max_message);
    let node = match engine.add_node(spec, Some(Box::new(processor))) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("ALSA MIDI: cannot add the {NODE_NAME} node: {e}");
            return None;
        }
    };
    let mut ports = Ports {
        engine: engine.clone(),
        node,
        routes: tx,
        capture: BTreeMap::new(),
        playback: BTreeMap::new(),
    };
    for p in bridge.ports().to_vec() {
        ports.add(&p);
    }
    let spawned = std::thread::Builder::new()
        .name("alsa-midi".into())
        .spawn(move || follow(&bridge, &mut ports));
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("ALSA MIDI: cannot start its thread: {e}; ports stay as they are");
            None
        }
    }
}

/// The thread: ports come and go until the bridge stops.
fn follow(bridge: &SeqBridge, ports: &mut Ports) {
    while let Ok(n) = bridge.notices().recv() {
        match n {
            SeqNotice::PortAdded(p) => ports.add(&p),
            SeqNotice::PortRemoved(id) => ports.remove(id),
            SeqNotice::SendFailed { port, error } => {
                tracing::debug!("ALSA MIDI: to {port}: {error}");
            }
            SeqNotice::Stopped(why) => {
                tracing::warn!("ALSA MIDI: the sequencer bridge stopped: {why}");
                let gone: Vec<SeqPort> = ports
                    .capture
                    .keys()
                    .chain(ports.playback.keys())
                    .copied()
                    .collect();
                for id in gone {
                    ports.remove(id);
                }
                break;
            }
        }
    }
}
