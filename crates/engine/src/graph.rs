//! The control side's description of the graph: nodes, typed ports and links.
//!
//! Everything here runs on control threads. Edits are validated here; the result is
//! compiled into a [`crate::rt::plan::Plan`] ([`crate::compile`]) and published to the real-time thread.

use crate::EngineError;
use quaver_dsp::{ChannelMap, ChannelPosition};
use std::collections::{BTreeMap, HashSet};

/// Stable identifier of a node (never reused while the engine runs).
pub type NodeId = u32;
/// Stable identifier of a port.
pub type PortId = u32;
/// Stable identifier of a link.
pub type LinkId = u32;

/// What a node stands for; decides port names, volume placement and idle policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// A device's playback side: inputs are played, outputs are its monitor.
    DeviceSink,
    /// A device's capture side: outputs carry what it captured.
    DeviceSource,
    /// A client stream that produces audio (outputs only).
    PlaybackStream,
    /// A client stream that consumes audio (inputs only).
    RecordStream,
    /// Any other processing node (filters, test generators).
    Filter,
}

impl NodeKind {
    /// The name used in listings ("sink", "source", "playback", "record", "filter").
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeKind::DeviceSink => "sink",
            NodeKind::DeviceSource => "source",
            NodeKind::PlaybackStream => "playback",
            NodeKind::RecordStream => "record",
            NodeKind::Filter => "filter",
        }
    }
    /// True for client streams, whose presence keeps the devices awake.
    pub fn is_stream(&self) -> bool {
        matches!(self, NodeKind::PlaybackStream | NodeKind::RecordStream)
    }
    /// True if this node's volume scales its inputs rather than its outputs.
    pub fn volume_on_inputs(&self) -> bool {
        matches!(self, NodeKind::DeviceSink | NodeKind::RecordStream)
    }
}

/// Direction of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Receives audio from links.
    In,
    /// Sends audio to links.
    Out,
}

/// The kind of data a port carries; links only join ports of the same type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortType {
    /// One channel of f32 audio at the driver's rate.
    Audio,
    /// Timestamped MIDI events in the port's buffer ([`crate::midi`]).
    Midi,
}

impl PortType {
    /// `"audio"` or `"midi"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PortType::Audio => "audio",
            PortType::Midi => "midi",
        }
    }
}

/// A port as the control side knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    /// Port id.
    pub id: PortId,
    /// Owning node.
    pub node: NodeId,
    /// Index among the node's ports of the same direction (its buffer channel).
    pub index: usize,
    /// Name unique within the node, e.g. "playback_FL".
    pub name: String,
    /// In or out.
    pub direction: Direction,
    /// Data type.
    pub port_type: PortType,
    /// Channel position carried.
    pub channel: ChannelPosition,
}

/// What a caller asks for when creating a node.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// Requested name; made unique by appending "-N" if taken.
    pub name: String,
    /// Human description.
    pub description: String,
    /// Kind of node.
    pub kind: NodeKind,
    /// Input port channels (empty for none).
    pub inputs: ChannelMap,
    /// Output port channels (empty for none).
    pub outputs: ChannelMap,
    /// Latency this node asks for, in frames at the engine rate (drives the quantum).
    pub latency_frames: Option<u32>,
    /// Initial linear volume.
    pub volume: f32,
    /// Device index in the engine's device list, for device nodes.
    pub device: Option<usize>,
    /// Client that owns the node, if any (for status and cleanup).
    pub owner: Option<u32>,
    /// Port names in the order of `inputs` (empty: derived from kind and channel).
    pub input_names: Vec<String>,
    /// Port names in the order of `outputs` (empty: derived from kind and channel).
    pub output_names: Vec<String>,
    /// Input ports the node's buffers are sized for; ports can be added up to this
    /// many with [`Graph::add_port`]. Values below `inputs.len()` mean `inputs.len()`.
    pub max_inputs: usize,
    /// Output ports the node's buffers are sized for (see `max_inputs`).
    pub max_outputs: usize,
    /// Types of the ports of `inputs`, in order (missing entries: audio).
    pub input_types: Vec<PortType>,
    /// Types of the ports of `outputs`, in order (missing entries: audio).
    pub output_types: Vec<PortType>,
    /// Keeps the devices from suspending while the node exists (callback clients).
    pub keep_awake: bool,
    /// The node's client only takes power-of-two quanta (JACK clients); while it runs,
    /// the graph's quantum is rounded down to one.
    pub pow2_quantum: bool,
    /// The node's ports stand for hardware outside the graph (JACK's physical and
    /// terminal ports), as device nodes' do: the ALSA sequencer bridge's MIDI ports.
    pub physical: bool,
}

impl NodeSpec {
    /// A spec with no ports, unity volume and no latency request.
    pub fn new(name: &str, kind: NodeKind) -> Self {
        NodeSpec {
            name: name.to_string(),
            description: String::new(),
            kind,
            inputs: ChannelMap(Vec::new()),
            outputs: ChannelMap(Vec::new()),
            latency_frames: None,
            volume: 1.0,
            device: None,
            owner: None,
            input_names: Vec::new(),
            output_names: Vec::new(),
            max_inputs: 0,
            max_outputs: 0,
            input_types: Vec::new(),
            output_types: Vec::new(),
            keep_awake: false,
            pow2_quantum: false,
            physical: false,
        }
    }

    /// Input buffers the node needs.
    pub fn input_capacity(&self) -> usize {
        self.max_inputs.max(self.inputs.len())
    }

    /// Output buffers the node needs.
    pub fn output_capacity(&self) -> usize {
        self.max_outputs.max(self.outputs.len())
    }
}

/// A node as the control side knows it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Node id.
    pub id: NodeId,
    /// Unique name.
    pub name: String,
    /// Human description.
    pub description: String,
    /// Kind.
    pub kind: NodeKind,
    /// Slot in the real-time thread's node table.
    pub slot: usize,
    /// Input port ids in buffer order.
    pub inputs: Vec<PortId>,
    /// Output port ids in buffer order.
    pub outputs: Vec<PortId>,
    /// Latency request in frames.
    pub latency_frames: Option<u32>,
    /// Linear volume.
    pub volume: f32,
    /// Mute flag.
    pub mute: bool,
    /// Policy's attenuation on top of the volume (role ducking; 1 = none), linear.
    pub duck: f32,
    /// Device index for device nodes.
    pub device: Option<usize>,
    /// Owning client.
    pub owner: Option<u32>,
    /// Input buffers reserved in the node's slot (ports may be added up to this).
    pub max_inputs: usize,
    /// Output buffers reserved in the node's slot.
    pub max_outputs: usize,
    /// Keeps the devices awake while the node exists.
    pub keep_awake: bool,
    /// Only power-of-two quanta while this node runs ([`NodeSpec::pow2_quantum`]).
    pub pow2_quantum: bool,
    /// Its ports stand for hardware ([`NodeSpec::physical`]).
    pub physical: bool,
    /// A device node whose device failed or went away: policy routes nothing to it.
    pub gone: bool,
    /// Suspended on its own ([`crate::Engine::suspend_node`]): it and the streams that
    /// only feed it, or are only fed by it, stop running while the devices go on.
    pub suspended: bool,
}

/// A link from an output port to an input port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Link {
    /// Link id.
    pub id: LinkId,
    /// Output port.
    pub output: PortId,
    /// Input port.
    pub input: PortId,
}

/// The whole graph description.
#[derive(Debug, Default, Clone)]
pub struct Graph {
    /// Nodes by id.
    pub nodes: BTreeMap<NodeId, Node>,
    /// Ports by id.
    pub ports: BTreeMap<PortId, Port>,
    /// Links by id.
    pub links: BTreeMap<LinkId, Link>,
    next_id: u32,
}

fn port_prefix(kind: NodeKind, dir: Direction) -> &'static str {
    match (kind, dir) {
        (NodeKind::DeviceSink, Direction::In) => "playback",
        (NodeKind::DeviceSink, Direction::Out) => "monitor",
        (NodeKind::DeviceSource, _) => "capture",
        (_, Direction::In) => "input",
        (_, Direction::Out) => "output",
    }
}

impl Graph {
    fn alloc_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// Adds a node with its ports; `slot` is its place in the RT node table.
    pub fn add_node(&mut self, spec: &NodeSpec, slot: usize) -> NodeId {
        let id = self.alloc_id();
        let mut name = spec.name.clone();
        if self.node_by_name(&name).is_some() {
            name = format!("{}-{}", spec.name, id);
        }
        let mut node = Node {
            id,
            name,
            description: spec.description.clone(),
            kind: spec.kind,
            slot,
            inputs: Vec::new(),
            outputs: Vec::new(),
            latency_frames: spec.latency_frames,
            volume: spec.volume,
            mute: false,
            duck: 1.0,
            device: spec.device,
            owner: spec.owner,
            max_inputs: spec.input_capacity(),
            max_outputs: spec.output_capacity(),
            keep_awake: spec.keep_awake,
            pow2_quantum: spec.pow2_quantum,
            physical: spec.physical,
            gone: false,
            suspended: false,
        };
        for (dir, map, names, types) in [
            (
                Direction::In,
                &spec.inputs,
                &spec.input_names,
                &spec.input_types,
            ),
            (
                Direction::Out,
                &spec.outputs,
                &spec.output_names,
                &spec.output_types,
            ),
        ] {
            let mut seen = HashSet::new();
            for (index, &channel) in map.positions().iter().enumerate() {
                let pid = self.alloc_id();
                let base = match names.get(index) {
                    Some(n) => n.clone(),
                    None => format!("{}_{}", port_prefix(spec.kind, dir), channel.name()),
                };
                // Duplicate positions (e.g. two AUX0) still need distinct port names.
                let pname = if seen.insert(base.clone()) {
                    base
                } else {
                    format!("{base}_{index}")
                };
                self.ports.insert(
                    pid,
                    Port {
                        id: pid,
                        node: id,
                        index,
                        name: pname,
                        direction: dir,
                        port_type: types.get(index).copied().unwrap_or(PortType::Audio),
                        channel,
                    },
                );
                match dir {
                    Direction::In => node.inputs.push(pid),
                    Direction::Out => node.outputs.push(pid),
                }
            }
        }
        self.nodes.insert(id, node);
        id
    }

    /// Checks a port name given by a client: 1–128 bytes, no ':' (it separates node and
    /// port), no control characters.
    pub fn check_port_name(name: &str) -> Result<(), EngineError> {
        if name.is_empty()
            || name.len() > 128
            || name.contains(':')
            || name.chars().any(char::is_control)
        {
            return Err(EngineError::Invalid(format!(
                "port name '{name}' must be 1–128 bytes without ':' or control characters"
            )));
        }
        Ok(())
    }

    /// Adds a port to node `id` at the lowest free buffer index below the node's
    /// reserved capacity. `name` defaults to the kind's prefix and the channel.
    pub fn add_port(
        &mut self,
        id: NodeId,
        direction: Direction,
        name: Option<&str>,
        channel: ChannelPosition,
    ) -> Result<PortId, EngineError> {
        self.add_port_typed(id, direction, name, channel, PortType::Audio)
    }

    /// [`Graph::add_port`] for a port of any type. A MIDI port's buffer index must be
    /// below [`crate::midi::MAX_MIDI_PORTS`].
    pub fn add_port_typed(
        &mut self,
        id: NodeId,
        direction: Direction,
        name: Option<&str>,
        channel: ChannelPosition,
        port_type: PortType,
    ) -> Result<PortId, EngineError> {
        let node = self
            .nodes
            .get(&id)
            .ok_or_else(|| EngineError::NoSuchNode(id.to_string()))?;
        let (list, cap) = match direction {
            Direction::In => (&node.inputs, node.max_inputs),
            Direction::Out => (&node.outputs, node.max_outputs),
        };
        let used: HashSet<usize> = list.iter().map(|p| self.ports[p].index).collect();
        let index = (0..cap).find(|i| !used.contains(i)).ok_or_else(|| {
            EngineError::TooMany(format!(
                "node '{}' has all its {cap} {} ports in use",
                node.name,
                if direction == Direction::In {
                    "input"
                } else {
                    "output"
                }
            ))
        })?;
        if port_type == PortType::Midi && index >= crate::midi::MAX_MIDI_PORTS {
            return Err(EngineError::TooMany(format!(
                "node '{}': MIDI ports need a buffer index below {}",
                node.name,
                crate::midi::MAX_MIDI_PORTS
            )));
        }
        let name = match name {
            Some(n) => {
                Self::check_port_name(n)?;
                n.to_string()
            }
            None => format!("{}_{}", port_prefix(node.kind, direction), channel.name()),
        };
        let taken = node
            .inputs
            .iter()
            .chain(&node.outputs)
            .any(|p| self.ports[p].name == name);
        if taken {
            return Err(EngineError::Invalid(format!(
                "node '{}' already has a port named '{name}'",
                node.name
            )));
        }
        let pid = self.alloc_id();
        self.ports.insert(
            pid,
            Port {
                id: pid,
                node: id,
                index,
                name,
                direction,
                port_type,
                channel,
            },
        );
        let node = self.nodes.get_mut(&id).expect("checked");
        let list = match direction {
            Direction::In => &mut node.inputs,
            Direction::Out => &mut node.outputs,
        };
        // Keep the list in buffer order.
        let ports = &self.ports;
        let at = list
            .iter()
            .position(|p| ports[p].index > index)
            .unwrap_or(list.len());
        list.insert(at, pid);
        Ok(pid)
    }

    /// Removes port `port` of node `id` and every link touching it.
    pub fn remove_port(&mut self, id: NodeId, port: PortId) -> Result<Port, EngineError> {
        match self.ports.get(&port) {
            Some(p) if p.node == id => {}
            _ => return Err(EngineError::NoSuchPort(format!("{id}:{port}"))),
        }
        self.links
            .retain(|_, l| l.output != port && l.input != port);
        let node = self.nodes.get_mut(&id).expect("port's node exists");
        node.inputs.retain(|&p| p != port);
        node.outputs.retain(|&p| p != port);
        Ok(self.ports.remove(&port).expect("checked"))
    }

    /// Removes a node, its ports and every link touching them; returns the node.
    pub fn remove_node(&mut self, id: NodeId) -> Option<Node> {
        let node = self.nodes.remove(&id)?;
        let ports: HashSet<PortId> = node.inputs.iter().chain(&node.outputs).copied().collect();
        self.links
            .retain(|_, l| !ports.contains(&l.output) && !ports.contains(&l.input));
        for p in &ports {
            self.ports.remove(p);
        }
        Some(node)
    }

    /// Finds a node by exact name, or by numeric id given as text.
    pub fn node_by_name(&self, name: &str) -> Option<&Node> {
        self.nodes
            .values()
            .find(|n| n.name == name)
            .or_else(|| name.parse().ok().and_then(|id| self.nodes.get(&id)))
    }

    /// Full "node:port" name of a port.
    pub fn port_path(&self, port: PortId) -> String {
        let p = &self.ports[&port];
        format!("{}:{}", self.nodes[&p.node].name, p.name)
    }

    /// Resolves "node" or "node:port" into a node and optionally one port.
    pub fn resolve(&self, what: &str) -> Result<(NodeId, Option<PortId>), EngineError> {
        if let Some(node) = self.node_by_name(what) {
            return Ok((node.id, None));
        }
        let (nname, pname) = what
            .rsplit_once(':')
            .ok_or_else(|| EngineError::NoSuchNode(what.to_string()))?;
        let node = self
            .node_by_name(nname)
            .ok_or_else(|| EngineError::NoSuchNode(nname.to_string()))?;
        let port = node
            .inputs
            .iter()
            .chain(&node.outputs)
            .find(|p| self.ports[p].name == pname || self.ports[p].id.to_string() == pname)
            .ok_or_else(|| EngineError::NoSuchPort(what.to_string()))?;
        Ok((node.id, Some(*port)))
    }

    /// True if a path of links leads from node `from` to node `to`.
    fn reaches(&self, from: NodeId, to: NodeId) -> bool {
        let mut stack = vec![from];
        let mut seen = HashSet::new();
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if !seen.insert(n) {
                continue;
            }
            for l in self.links.values() {
                if self.ports[&l.output].node == n {
                    stack.push(self.ports[&l.input].node);
                }
            }
        }
        false
    }

    /// Checks that `output` → `input` may be linked; a link that closes a loop only
    /// with `feedback` (it then carries the previous cycle, [`crate::feedback`]).
    fn check_link(&self, output: PortId, input: PortId, feedback: bool) -> Result<(), EngineError> {
        let (o, i) = (&self.ports[&output], &self.ports[&input]);
        if o.direction != Direction::Out || i.direction != Direction::In {
            return Err(EngineError::Incompatible(format!(
                "{} → {}: a link goes from an output port to an input port",
                self.port_path(output),
                self.port_path(input)
            )));
        }
        if o.port_type != i.port_type {
            return Err(EngineError::Incompatible(format!(
                "{} and {} carry different data types",
                self.port_path(output),
                self.port_path(input)
            )));
        }
        if !feedback && (o.node == i.node || self.reaches(i.node, o.node)) {
            return Err(EngineError::Incompatible(format!(
                "{} → {} would make a cycle in the graph",
                self.port_path(output),
                self.port_path(input)
            )));
        }
        Ok(())
    }

    /// Port pairs to link when joining two whole nodes: same channel position first,
    /// then mono fan-out/fan-in, then by index; audio ports with audio ports, MIDI with
    /// MIDI.
    fn node_pairs(&self, out_node: NodeId, in_node: NodeId) -> Vec<(PortId, PortId)> {
        let mut pairs = Vec::new();
        for t in [PortType::Audio, PortType::Midi] {
            let of = |list: &[PortId]| -> Vec<PortId> {
                list.iter()
                    .copied()
                    .filter(|p| self.ports[p].port_type == t)
                    .collect()
            };
            let outs = of(&self.nodes[&out_node].outputs);
            let ins = of(&self.nodes[&in_node].inputs);
            pairs.extend(self.typed_pairs(&outs, &ins));
        }
        pairs
    }

    /// [`Graph::node_pairs`] among ports of one type.
    fn typed_pairs(&self, outs: &[PortId], ins: &[PortId]) -> Vec<(PortId, PortId)> {
        let ch = |p: &PortId| self.ports[p].channel;
        let mut pairs: Vec<(PortId, PortId)> = Vec::new();
        for o in outs {
            for i in ins {
                if ch(o) == ch(i) {
                    pairs.push((*o, *i));
                }
            }
        }
        if !pairs.is_empty() {
            return pairs;
        }
        if outs.len() == 1 {
            return ins.iter().map(|i| (outs[0], *i)).collect();
        }
        if ins.len() == 1 {
            return outs.iter().map(|o| (*o, ins[0])).collect();
        }
        outs.iter().zip(ins).map(|(o, i)| (*o, *i)).collect()
    }

    /// The node `id`, to change it.
    pub fn node_mut(&mut self, id: NodeId) -> Result<&mut Node, EngineError> {
        self.nodes
            .get_mut(&id)
            .ok_or_else(|| EngineError::NoSuchNode(id.to_string()))
    }

    /// Resolves a link request ("node" or "node:port" on each side) into port pairs.
    pub fn link_pairs(
        &self,
        output: &str,
        input: &str,
    ) -> Result<Vec<(PortId, PortId)>, EngineError> {
        let (on, op) = self.resolve(output)?;
        let (inn, ip) = self.resolve(input)?;
        let pairs = match (op, ip) {
            (Some(o), Some(i)) => vec![(o, i)],
            (None, None) => self.node_pairs(on, inn),
            (Some(o), None) => self.nodes[&inn].inputs.iter().map(|i| (o, *i)).collect(),
            (None, Some(i)) => self.nodes[&on].outputs.iter().map(|o| (*o, i)).collect(),
        };
        if pairs.is_empty() {
            return Err(EngineError::Incompatible(format!(
                "{output} has no output ports or {input} has no input ports to link"
            )));
        }
        Ok(pairs)
    }

    /// Links the given pairs; already-linked pairs are skipped. Returns new link ids.
    /// A link that would close a loop is refused (PulseAudio refuses to move a stream
    /// or a loopback into what it feeds); [`Graph::add_links_with_feedback`] takes it.
    pub fn add_links(&mut self, pairs: &[(PortId, PortId)]) -> Result<Vec<LinkId>, EngineError> {
        self.insert_links(pairs, false)
    }

    /// Like [`Graph::add_links`], but a link that closes a loop (a node into itself
    /// included) is accepted, as JACK accepts it: it carries the previous cycle
    /// ([`crate::feedback`]).
    pub fn add_links_with_feedback(
        &mut self,
        pairs: &[(PortId, PortId)],
    ) -> Result<Vec<LinkId>, EngineError> {
        self.insert_links(pairs, true)
    }

    fn insert_links(
        &mut self,
        pairs: &[(PortId, PortId)],
        feedback: bool,
    ) -> Result<Vec<LinkId>, EngineError> {
        for &(o, i) in pairs {
            self.check_link(o, i, feedback)?;
        }
        let mut ids = Vec::new();
        for &(o, i) in pairs {
            if self.find_link(o, i).is_some() {
                continue;
            }
            let id = self.alloc_id();
            self.links.insert(
                id,
                Link {
                    id,
                    output: o,
                    input: i,
                },
            );
            ids.push(id);
        }
        Ok(ids)
    }

    /// The link joining two ports, if any.
    pub fn find_link(&self, output: PortId, input: PortId) -> Option<LinkId> {
        self.links
            .values()
            .find(|l| l.output == output && l.input == input)
            .map(|l| l.id)
    }

    /// Removes links between the given ends ("node" or "node:port"); returns how many.
    pub fn unlink(&mut self, output: &str, input: &str) -> Result<usize, EngineError> {
        let (on, op) = self.resolve(output)?;
        let (inn, ip) = self.resolve(input)?;
        let before = self.links.len();
        let ports = &self.ports;
        self.links.retain(|_, l| {
            let (o, i) = (&ports[&l.output], &ports[&l.input]);
            let out_match = op.map_or(o.node == on, |p| p == l.output);
            let in_match = ip.map_or(i.node == inn, |p| p == l.input);
            !(out_match && in_match)
        });
        let removed = before - self.links.len();
        if removed == 0 {
            return Err(EngineError::NoSuchLink(format!("{output} → {input}")));
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stereo_graph() -> (Graph, NodeId, NodeId) {
        let mut g = Graph::default();
        let mut s = NodeSpec::new("sink", NodeKind::DeviceSink);
        s.inputs = ChannelMap::stereo();
        s.outputs = ChannelMap::stereo();
        let sink = g.add_node(&s, 0);
        let mut p = NodeSpec::new("play", NodeKind::PlaybackStream);
        p.outputs = ChannelMap::stereo();
        let play = g.add_node(&p, 1);
        (g, sink, play)
    }

    #[test]
    fn whole_node_link_matches_positions() {
        let (mut g, _, _) = stereo_graph();
        let pairs = g.link_pairs("play", "sink").unwrap();
        assert_eq!(pairs.len(), 2);
        g.add_links(&pairs).unwrap();
        let names: Vec<_> = g
            .links
            .values()
            .map(|l| (g.port_path(l.output), g.port_path(l.input)))
            .collect();
        assert!(names.contains(&("play:output_FL".into(), "sink:playback_FL".into())));
        assert!(names.contains(&("play:output_FR".into(), "sink:playback_FR".into())));
    }

    #[test]
    fn mono_fans_out_to_every_input() {
        let (mut g, _, _) = stereo_graph();
        let mut m = NodeSpec::new("mono", NodeKind::PlaybackStream);
        m.outputs = ChannelMap::mono();
        g.add_node(&m, 2);
        assert_eq!(g.link_pairs("mono", "sink").unwrap().len(), 2);
    }

    #[test]
    fn refuses_wrong_direction_and_loops_unless_feedback_is_asked_for() {
        let (mut g, _, _) = stereo_graph();
        let e = g.link_pairs("sink:playback_FL", "play:output_FL").unwrap();
        assert!(matches!(g.add_links(&e), Err(EngineError::Incompatible(_))));
        assert!(matches!(
            g.add_links_with_feedback(&e),
            Err(EngineError::Incompatible(_))
        ));
        let mut f = NodeSpec::new("fx", NodeKind::Filter);
        f.inputs = ChannelMap::stereo();
        f.outputs = ChannelMap::stereo();
        g.add_node(&f, 3);
        let p = g.link_pairs("sink", "fx").unwrap();
        g.add_links(&p).unwrap();
        // The monitor through fx back into the sink, and fx into itself: loops.
        let back = g.link_pairs("fx", "sink").unwrap();
        let err = g.add_links(&back).unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
        let own = g.link_pairs("fx:output_FL", "fx:input_FL").unwrap();
        assert!(g.add_links(&own).is_err());
        assert_eq!(g.links.len(), 2);
        // As JACK links they carry the previous cycle (crate::feedback).
        assert_eq!(g.add_links_with_feedback(&back).unwrap().len(), 2);
        assert_eq!(g.add_links_with_feedback(&own).unwrap().len(), 1);
        assert_eq!(g.links.len(), 5);
    }

    #[test]
    fn unknown_names_are_errors() {
        let (mut g, _, _) = stereo_graph();
        assert!(matches!(g.resolve("nope"), Err(EngineError::NoSuchNode(_))));
        assert!(matches!(
            g.resolve("sink:nope"),
            Err(EngineError::NoSuchPort(_))
        ));
        assert!(matches!(
            g.unlink("play", "sink"),
            Err(EngineError::NoSuchLink(_))
        ));
    }

    #[test]
    fn ports_come_and_go_within_the_reservation() {
        let (mut g, _, _) = stereo_graph();
        let mut c = NodeSpec::new("cb", NodeKind::Filter);
        c.max_inputs = 2;
        c.max_outputs = 1;
        c.outputs = ChannelMap::mono();
        c.output_names = vec!["out".into()];
        let cb = g.add_node(&c, 5);
        assert_eq!(g.port_path(g.nodes[&cb].outputs[0]), "cb:out");
        let a = g
            .add_port(cb, Direction::In, Some("in_a"), ChannelPosition::Aux(0))
            .unwrap();
        let b = g
            .add_port(cb, Direction::In, Some("in_b"), ChannelPosition::Aux(1))
            .unwrap();
        assert_eq!((g.ports[&a].index, g.ports[&b].index), (0, 1));
        assert!(matches!(
            g.add_port(cb, Direction::In, Some("in_c"), ChannelPosition::Aux(2)),
            Err(EngineError::TooMany(_))
        ));
        assert!(matches!(
            g.add_port(cb, Direction::Out, None, ChannelPosition::FL),
            Err(EngineError::TooMany(_))
        ));
        let pairs = g.link_pairs("sink:monitor_FL", "cb:in_a").unwrap();
        g.add_links(&pairs).unwrap();
        assert_eq!(g.links.len(), 1);
        g.remove_port(cb, a).unwrap();
        assert!(g.links.is_empty());
        // The freed buffer index is reused, and the list stays in buffer order.
        let c2 = g
            .add_port(cb, Direction::In, Some("in_c"), ChannelPosition::Aux(2))
            .unwrap();
        assert_eq!(g.ports[&c2].index, 0);
        assert_eq!(g.nodes[&cb].inputs, vec![c2, b]);
        assert!(
            g.add_port(cb, Direction::In, Some("x:y"), ChannelPosition::FL)
                .is_err()
        );
        assert!(matches!(
            g.remove_port(cb, 9999),
            Err(EngineError::NoSuchPort(_))
        ));
    }

    #[test]
    fn removing_a_node_drops_its_links() {
        let (mut g, _, play) = stereo_graph();
        let p = g.link_pairs("play", "sink").unwrap();
        g.add_links(&p).unwrap();
        g.remove_node(play).unwrap();
        assert!(g.links.is_empty());
    }
}
