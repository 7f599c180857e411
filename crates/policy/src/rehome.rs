//! Rehoming: when a device fails or is unplugged, the streams playing to it (or
//! recording from it) move to the policy's choice among the devices left, and the
//! device leaves the engine with its nodes (`Engine::remove_device`), so every front-end
//! sees the sink or source go away and its streams turn up on the new one. The daemon
//! keeps running either way. Streams with nowhere to go stay (silent) on the gone
//! device's nodes until a device appears; then they move there and the gone device goes.
//!
//! One thread, woken only by graph events (no periodic wakeups). Not to be confused with
//! `quaver_engine::follow` (follower devices and their clock drift).

use crate::{NodeView, Policy};
use quaver_engine::{Engine, Graph, GraphEvent, NodeId, NodeKind};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Starts the thread that moves streams off devices that go away.
pub fn spawn(engine: Engine, policy: Arc<Mutex<Policy>>) -> std::io::Result<JoinHandle<()>> {
    let events = engine.subscribe();
    std::thread::Builder::new()
        .name("quaver-follow".into())
        .spawn(move || {
            // Gone devices whose streams had nowhere to go.
            let mut stranded = BTreeSet::new();
            // Ends when the engine (and with it the sender) is gone.
            while let Ok(ev) = events.recv() {
                match ev {
                    GraphEvent::DeviceGone(device) if !device_gone(&engine, &policy, device) => {
                        stranded.insert(device);
                    }
                    GraphEvent::NodeAdded(id) if !stranded.is_empty() => {
                        let is_device = engine.inspect(|g| {
                            g.nodes
                                .get(&id)
                                .is_some_and(|n| n.device.is_some() && !n.gone)
                        });
                        if is_device {
                            stranded.retain(|&d| !device_gone(&engine, &policy, d));
                        }
                    }
                    _ => {}
                }
            }
        })
}

/// The policy's view of the nodes that are still usable.
fn live_views(graph: &Graph) -> Vec<NodeView> {
    graph
        .nodes
        .values()
        .filter(|n| !n.gone)
        .map(|n| NodeView {
            name: n.name.clone(),
            kind: n.kind.as_str().to_string(),
        })
        .collect()
}

/// Non-device nodes linked to `node` (feeding its inputs or fed by its outputs).
fn peers(graph: &Graph, node: NodeId) -> BTreeSet<NodeId> {
    let owner = |p| graph.ports.get(p).map(|p| p.node);
    graph
        .links
        .values()
        .filter_map(|l| {
            let (out, inp) = (owner(&l.output)?, owner(&l.input)?);
            if inp == node {
                Some(out)
            } else if out == node {
                Some(inp)
            } else {
                None
            }
        })
        .filter(|&n| graph.nodes.get(&n).is_some_and(|n| n.device.is_none()))
        .collect()
}

/// Moves every stream of device `device` to the policy's fallback, then removes the
/// device and its nodes; returns whether it did. With nowhere to go, the streams stay
/// (silent) and the reason is logged.
fn device_gone(engine: &Engine, policy: &Mutex<Policy>, device: usize) -> bool {
    let graph = engine.graph();
    let views = live_views(&graph);
    let (sink, source) = {
        let p = policy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (p.default_sink(&views), p.default_source(&views))
    };
    let gone: Vec<_> = graph
        .nodes
        .values()
        .filter(|n| n.device == Some(device))
        .map(|n| (n.id, n.name.clone(), n.kind))
        .collect();
    let mut stranded = false;
    for (id, name, kind) in &gone {
        // A sink's playback streams go to the new sink; whatever records its monitor
        // goes to the new sink's monitor. A source's record streams go to the new source.
        let fallback = match kind {
            NodeKind::DeviceSink => sink.as_deref(),
            _ => source.as_deref(),
        };
        for peer in peers(&graph, *id) {
            let Some(peer_name) = graph.nodes.get(&peer).map(|n| n.name.clone()) else {
                continue;
            };
            match fallback {
                Some(to) => match engine.relink(&peer_name, Some(name), to) {
                    Ok(()) => tracing::warn!("{name} is gone: moved {peer_name} to {to}"),
                    Err(e) => {
                        stranded = true;
                        tracing::error!("{name} is gone: cannot move {peer_name} to {to}: {e}")
                    }
                },
                None => {
                    stranded = true;
                    tracing::error!(
                        "{name} is gone and no other device can take {peer_name}; it stays silent"
                    );
                }
            }
        }
    }
    if stranded {
        return false;
    }
    let names: Vec<String> = gone.into_iter().map(|(_, name, _)| name).collect();
    match engine.remove_device(device) {
        Ok(()) => tracing::info!("removed {}: its device is gone", names.join(" and ")),
        Err(e) => tracing::error!("removing {}: {e}", names.join(" and ")),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_devices::{NullConfig, NullDevice};
    use quaver_dsp::{ChannelMap, Planar, PlanarMut};
    use quaver_engine::{CycleInfo, EngineConfig, NodeSpec, Processor};
    use std::time::{Duration, Instant};

    struct Silence;

    impl Processor for Silence {
        fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
            outputs.fill_silence();
        }
    }

    fn null(name: &str) -> Box<NullDevice> {
        Box::new(
            NullDevice::new(NullConfig {
                name: name.into(),
                ..NullConfig::default()
            })
            .unwrap(),
        )
    }

    /// The sink `stream` plays into, if any.
    fn target(engine: &Engine, stream: NodeId) -> Option<String> {
        engine.inspect(|g| {
            let out = g.nodes.get(&stream)?.outputs.first()?;
            let l = g.links.values().find(|l| l.output == *out)?;
            Some(g.nodes[&g.ports[&l.input].node].name.clone())
        })
    }

    fn wait(mut f: impl FnMut() -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_stream_left_without_a_sink_moves_to_the_next_device_that_appears() {
        let cfg = EngineConfig {
            rt_priority: 0,
            suspend_timeout: None,
            ..EngineConfig::default()
        };
        let engine = Engine::start(cfg, vec![null("a")]).unwrap();
        spawn(engine.clone(), Arc::new(Mutex::new(Policy::default()))).unwrap();
        let mut s = NodeSpec::new("tone", NodeKind::PlaybackStream);
        s.outputs = ChannelMap::stereo();
        let tone = engine
            .add_node_linked(s, Some(Box::new(Silence)), Some("a-sink"))
            .unwrap();
        engine.device_gone(0).unwrap();
        let gone = || engine.inspect(|g| g.node_by_name("a-sink").is_some_and(|n| n.gone));
        assert!(wait(gone), "a-sink was not marked gone");
        // Nowhere to go: it stays where it was, and so does the gone device.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(target(&engine, tone).as_deref(), Some("a-sink"));
        assert_eq!(engine.devices().len(), 1);
        let b = engine.add_device(null("b")).unwrap();
        assert!(
            wait(|| target(&engine, tone).as_deref() == Some("b-sink")),
            "the stream did not move to the new device: {:?}",
            target(&engine, tone)
        );
        assert!(wait(|| engine.devices().iter().map(|d| d.0).eq([b])));
        assert!(engine.inspect(|g| g.node_by_name("a-sink").is_none()));
        engine.shutdown().unwrap();
    }
}
