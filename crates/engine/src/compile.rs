//! Compiling the control side's [`Graph`] into the real-time thread's [`Plan`]: which
//! nodes run, in what order, and how each link fades when its plan is swapped in.

use crate::feedback::order_with;
use crate::graph::{Graph, NodeId, NodeKind, PortId, PortType};
use crate::rt::midi::MidiPorts;
use crate::rt::plan::{DeviceRole, Fade, Plan, PlanLink, Step};
use std::collections::HashSet;

/// The nodes that do not run: every suspended node, and, until nothing changes, each
/// other node whose links all lead into stopped nodes (a stream playing only into a
/// suspended sink is not read) or all come from them (a recorder of its monitor gets
/// nothing). A node with no links at all keeps running, and so does every device: a
/// device keeps its own clock and stops only with the others ([`crate::Engine::hold`]).
pub fn stopped_nodes(graph: &Graph) -> HashSet<NodeId> {
    let mut stopped: HashSet<NodeId> = graph
        .nodes
        .values()
        .filter(|n| n.suspended && n.device.is_none())
        .map(|n| n.id)
        .collect();
    if stopped.is_empty() {
        return stopped;
    }
    let pairs: Vec<(NodeId, NodeId)> = graph
        .links
        .values()
        .filter_map(|l| {
            Some((
                graph.ports.get(&l.output)?.node,
                graph.ports.get(&l.input)?.node,
            ))
        })
        .collect();
    loop {
        let before = stopped.len();
        for n in graph.nodes.values() {
            if n.device.is_some() || stopped.contains(&n.id) {
                continue;
            }
            let out = pairs.iter().filter(|(a, _)| *a == n.id).map(|&(_, b)| b);
            let inp = pairs.iter().filter(|(_, b)| *b == n.id).map(|&(a, _)| a);
            if all_in(out, &stopped) || all_in(inp, &stopped) {
                stopped.insert(n.id);
            }
        }
        if stopped.len() == before {
            return stopped;
        }
    }
}

/// True when `peers` is not empty and every one of them is in `set`.
fn all_in(peers: impl Iterator<Item = NodeId>, set: &HashSet<NodeId>) -> bool {
    let mut peers = peers.peekable();
    peers.peek().is_some() && peers.all(|p| set.contains(&p))
}

/// Compiles `graph` into a plan, leaving out the `stopped` nodes ([`stopped_nodes`]).
/// `previous` holds the port pairs of the plan before this one (links between running
/// nodes), so new links fade in and removed ones fade out; `was_stopped` is that plan's
/// stopped set. `new_nodes` are nodes that appear in this plan for the first time: their
/// links start at full gain, because a new stream's first sample is its true start, not a
/// cut into running audio.
///
/// A node that stops while it plays into running nodes (a remap sink into the card) runs
/// once more, with what feeds it, so its links fade out over real audio instead of
/// cutting; when it resumes, those links fade in. Links between nodes that stopped and
/// resume together carry on at full gain: a held stream continues where it stopped.
pub(crate) fn compile(
    graph: &Graph,
    stopped: &HashSet<NodeId>,
    was_stopped: &HashSet<NodeId>,
    quantum: usize,
    previous: &HashSet<(PortId, PortId)>,
    new_nodes: &HashSet<NodeId>,
) -> (Plan, HashSet<(PortId, PortId)>) {
    let node_of = |p: &PortId| graph.ports.get(p).map(|p| p.node);
    let current: HashSet<(PortId, PortId)> = graph
        .links
        .values()
        .map(|l| (l.output, l.input))
        .filter(|(o, i)| {
            [o, i]
                .iter()
                .all(|p| node_of(p).is_some_and(|n| !stopped.contains(&n)))
        })
        .collect();
    let once = stopping_audibly(graph, stopped, was_stopped, previous);
    let runs = |n: NodeId| !stopped.contains(&n) || once.contains(&n);
    let mut plan = Plan {
        quantum,
        // Streams of a suspended virtual sink wait for it, not for the card.
        keep_awake: graph
            .nodes
            .values()
            .any(|n| (n.kind.is_stream() || n.keep_awake) && !stopped.contains(&n.id)),
        ..Plan::default()
    };
    // Links this plan carries on from the previous one: between running nodes, and into
    // a node running its last cycle from what fed it before. The others of `previous`
    // fade out.
    let kept: HashSet<(PortId, PortId)> = graph
        .links
        .values()
        .map(|l| (l.output, l.input))
        .filter(|p| {
            current.contains(p)
                || (previous.contains(p) && node_of(&p.1).is_some_and(|n| once.contains(&n)))
        })
        .collect();
    // Fading-out links still carry audio for one cycle: order their source before their
    // destination too, or the destination would fade out the source's previous cycle.
    let fading: Vec<(PortId, PortId)> = previous
        .iter()
        .filter(|p| !kept.contains(p))
        .filter(|(o, i)| graph.ports.contains_key(o) && graph.ports.contains_key(i))
        .copied()
        .collect();
    // A link that closes a loop runs backwards in this order: its destination reads
    // what its source made the cycle before (crate::feedback).
    let order = order_with(graph, &fading).nodes;
    for id in order {
        if !runs(id) {
            continue;
        }
        let node = &graph.nodes[&id];
        let start = plan.links.len();
        let mut push = |out: PortId, inp: PortId, fade: Fade| {
            let (o, i) = (&graph.ports[&out], &graph.ports[&inp]);
            // A stopped node's outputs are stale: nothing reads them.
            if !runs(o.node) {
                return;
            }
            plan.links.push(PlanLink {
                src_slot: graph.nodes[&o.node].slot,
                src_port: o.index,
                dst_port: i.index,
                fade,
                midi: i.port_type == PortType::Midi,
            });
        };
        for l in graph.links.values() {
            if graph.ports[&l.input].node != id {
                continue;
            }
            let src = graph.ports[&l.output].node;
            // From a node running its last cycle into a running one: faded out below.
            if stopped.contains(&src) && !stopped.contains(&id) {
                continue;
            }
            let fresh = new_nodes.contains(&src) || new_nodes.contains(&id);
            let resumed_together = was_stopped.contains(&src) && was_stopped.contains(&id);
            let fade = if previous.contains(&(l.output, l.input)) || fresh || resumed_together {
                Fade::Steady
            } else {
                Fade::In
            };
            // Into a node running its last cycle, only what fed it before counts.
            if once.contains(&id) && !kept.contains(&(l.output, l.input)) {
                continue;
            }
            push(l.output, l.input, fade);
        }
        // A link that vanished fades out for one cycle, but only if both of its
        // nodes are still there (a removed node's buffers are gone).
        for &(o, i) in &fading {
            if graph.ports[&i].node == id {
                push(o, i, Fade::Out);
            }
        }
        let device = node.device.and_then(|d| match node.kind {
            NodeKind::DeviceSink => Some(DeviceRole::Sink(d)),
            NodeKind::DeviceSource => Some(DeviceRole::Source(d)),
            _ => None,
        });
        let midi = midi_ports(graph, id).map(|m| {
            plan.midi.push(m);
            plan.midi.len() - 1
        });
        plan.steps.push(Step {
            midi,
            slot: node.slot,
            links: start..plan.links.len(),
            device,
            stream: node.kind.is_stream(),
            once: once.contains(&id),
            only_device: if node.kind.is_stream() {
                only_device(graph, id)
            } else {
                None
            },
        });
    }
    (plan, current)
}

/// The MIDI ports of node `id`, if it has any.
fn midi_ports(graph: &Graph, id: NodeId) -> Option<MidiPorts> {
    let node = &graph.nodes[&id];
    let mut m = MidiPorts::NONE;
    let mut any = false;
    for (list, set) in [
        (&node.inputs, &mut m.inputs),
        (&node.outputs, &mut m.outputs),
    ] {
        for p in list.iter().filter_map(|p| graph.ports.get(p)) {
            if p.port_type == PortType::Midi {
                any |= set.insert(p.index);
            }
        }
    }
    any.then_some(m)
}

/// The device whose nodes are all that node `id` is linked with, if there is one.
fn only_device(graph: &Graph, id: NodeId) -> Option<usize> {
    let node_of = |p: &PortId| graph.ports.get(p).map(|p| p.node);
    let mut device = None;
    for l in graph.links.values() {
        let (o, i) = (node_of(&l.output)?, node_of(&l.input)?);
        let peer = if o == id {
            i
        } else if i == id {
            o
        } else {
            continue;
        };
        let d = graph.nodes.get(&peer)?.device?;
        if device.is_some_and(|x| x != d) {
            return None;
        }
        device = Some(d);
    }
    device
}

/// The nodes that stop in this plan while they played into running nodes, and the
/// nodes stopping with them that they are linked with (the streams that fed them, the
/// recorders of their monitors): they run the plan's first cycle, in which those links
/// fade out, so a recorder gets every frame its stream played.
fn stopping_audibly(
    graph: &Graph,
    stopped: &HashSet<NodeId>,
    was_stopped: &HashSet<NodeId>,
    previous: &HashSet<(PortId, PortId)>,
) -> HashSet<NodeId> {
    let stopping = |n: &NodeId| stopped.contains(n) && !was_stopped.contains(n);
    let pairs: Vec<(NodeId, NodeId)> = previous
        .iter()
        .filter_map(|(o, i)| Some((graph.ports.get(o)?.node, graph.ports.get(i)?.node)))
        .collect();
    let mut once: HashSet<NodeId> = pairs
        .iter()
        .filter(|(o, i)| stopping(o) && !stopped.contains(i))
        .map(|&(o, _)| o)
        .collect();
    loop {
        let before = once.len();
        for (o, i) in &pairs {
            if once.contains(i) && stopping(o) {
                once.insert(*o);
            }
            if once.contains(o) && stopping(i) {
                once.insert(*i);
            }
        }
        if once.len() == before {
            return once;
        }
    }
}
