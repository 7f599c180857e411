//! Turns the engine's graph events into PulseAudio subscription events.
//!
//! One thread blocks on `Engine::subscribe()`'s channel (no periodic wakeups) and
//! remembers each node's kind, each stream's device and each device's busy state, so
//! that a removal, a relink (a move) or a state change becomes the `new` / `change` /
//! `remove` event PulseAudio would send for the right facility and index.

use crate::io::shared::ConnMsg;
use crate::state::{Server, is_loop, loop_source, stream_target};
use pulseaudio::protocol::{SubscriptionEventFacility as F, SubscriptionEventType as T};
use quaver_engine::graph::Graph;
use quaver_engine::{GraphEvent, NodeId, NodeKind};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::Receiver;

#[derive(Default)]
struct Memory {
    kinds: BTreeMap<NodeId, NodeKind>,
    targets: BTreeMap<NodeId, Option<NodeId>>,
    busy: BTreeMap<NodeId, bool>,
    /// Loopbacks (also source outputs) and the source each records.
    loops: BTreeMap<NodeId, Option<NodeId>>,
}

fn facilities(kind: NodeKind) -> &'static [F] {
    match kind {
        // A sink brings its monitor source along.
        NodeKind::DeviceSink => &[F::Sink, F::Source],
        NodeKind::DeviceSource => &[F::Source],
        NodeKind::PlaybackStream => &[F::SinkInput],
        NodeKind::RecordStream => &[F::SourceOutput],
        NodeKind::Filter => &[],
    }
}

fn busy(graph: &Graph, id: NodeId) -> bool {
    let Some(n) = graph.nodes.get(&id) else {
        return false;
    };
    graph
        .links
        .values()
        .any(|l| n.inputs.contains(&l.input) || n.outputs.contains(&l.output))
}

impl Memory {
    fn learn(&mut self, graph: &Graph) {
        for n in graph.nodes.values() {
            self.kinds.insert(n.id, n.kind);
            if n.kind.is_stream() {
                self.targets.insert(n.id, stream_target(graph, n.id));
            } else if n.kind != NodeKind::Filter {
                self.busy.insert(n.id, busy(graph, n.id));
            }
            if is_loop(n) {
                self.loops.insert(n.id, loop_source(graph, n.id));
            }
        }
    }

    /// Streams whose device changed and devices whose busy state flipped.
    fn relinked(&mut self, graph: &Graph) -> Vec<(F, u32)> {
        let mut out = Vec::new();
        for n in graph.nodes.values() {
            if n.kind.is_stream() {
                let t = stream_target(graph, n.id);
                if self.targets.insert(n.id, t) != Some(t) {
                    out.extend(facilities(n.kind).iter().map(|&f| (f, n.id)));
                }
            } else if n.kind != NodeKind::Filter {
                let b = busy(graph, n.id);
                if self.busy.insert(n.id, b) != Some(b) {
                    out.extend(facilities(n.kind).iter().map(|&f| (f, n.id)));
                }
            }
            if is_loop(n) {
                let s = loop_source(graph, n.id);
                if self.loops.insert(n.id, s) != Some(s) {
                    out.push((F::SourceOutput, n.id));
                }
            }
        }
        out
    }
}

/// Kills the record streams that tapped the sink input `gone` (PulseAudio kills a
/// sink input's direct outputs when it is unlinked): left alone they would record
/// silence from nothing, with no source to report.
fn kill_monitors_of(server: &Server, gone: NodeId) {
    let st = server.lock();
    for (&node, s) in st.streams.iter().filter(|(_, s)| s.monitors == Some(gone)) {
        if let Some(c) = st.clients.get(&s.client) {
            c.conn.post(ConnMsg::KillStream(node));
        }
    }
}

/// Runs the event loop until the engine drops its side of the channel.
pub fn run(server: Arc<Server>, rx: Receiver<GraphEvent>) {
    let mut mem = Memory::default();
    mem.learn(&server.engine.graph());
    while let Ok(first) = rx.recv() {
        // Handle a burst with one graph snapshot.
        let mut batch = vec![first];
        while let Ok(e) = rx.try_recv() {
            batch.push(e);
        }
        let graph = server.engine.graph();
        let mut links_changed = false;
        let mut removed = false;
        let mut appeared = Vec::new();
        let mut devices_changed = false;
        for ev in batch {
            match ev {
                GraphEvent::NodeAdded(id) => {
                    if let Some(n) = graph.nodes.get(&id) {
                        mem.kinds.insert(id, n.kind);
                        if n.kind.is_stream() {
                            mem.targets.insert(id, stream_target(&graph, id));
                        } else if n.kind != NodeKind::Filter {
                            mem.busy.insert(id, busy(&graph, id));
                        }
                        for &f in facilities(n.kind) {
                            server.broadcast(f, T::New, id);
                        }
                        if is_loop(n) {
                            mem.loops.insert(id, loop_source(&graph, id));
                            server.broadcast(F::SourceOutput, T::New, id);
                        }
                        links_changed = true;
                        appeared.push(id);
                        devices_changed |= !n.kind.is_stream();
                    }
                }
                GraphEvent::NodeRemoved(id) => {
                    removed = true;
                    kill_monitors_of(&server, id);
                    mem.targets.remove(&id);
                    mem.busy.remove(&id);
                    if mem.loops.remove(&id).is_some() {
                        server.broadcast(F::SourceOutput, T::Removed, id);
                    }
                    if let Some(kind) = mem.kinds.remove(&id) {
                        devices_changed |= !kind.is_stream();
                        for &f in facilities(kind).iter().rev() {
                            server.broadcast(f, T::Removed, id);
                        }
                        links_changed = true;
                    }
                }
                GraphEvent::NodeChanged(id) => {
                    if let Some(&kind) = mem.kinds.get(&id) {
                        // A sink's volume is the sink's; its monitor is unchanged.
                        if let Some(&f) = facilities(kind).first() {
                            server.broadcast(f, T::Changed, id);
                        }
                    }
                }
                GraphEvent::LinksChanged => links_changed = true,
                // The daemon moves the device's streams and removes its nodes; those
                // edits arrive as their own events.
                GraphEvent::DeviceGone(_) => {}
                GraphEvent::Suspended(on) => {
                    server.post_all(ConnMsg::DevicesSuspended(on));
                    for (&id, &kind) in &mem.kinds {
                        if !kind.is_stream() {
                            for &f in facilities(kind) {
                                server.broadcast(f, T::Changed, id);
                            }
                        }
                    }
                }
            }
        }
        if links_changed {
            for (f, id) in mem.relinked(&graph) {
                server.broadcast(f, T::Changed, id);
            }
        }
        // After the events above: a stream moved here is announced by its own events.
        for id in appeared {
            server.restore_device_appeared(&graph, id);
        }
        if removed {
            crate::modules::unload_orphans(&server);
        }
        if devices_changed {
            server.check_defaults();
        }
    }
}
