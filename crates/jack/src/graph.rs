//! The quaver graph as JACK sees it: every graph port is a JACK port named
//! `node:port` (audio, or "8 bit raw midi" for MIDI ports); device ports are physical, and the first sink's inputs and the first
//! source's outputs also answer to `system:playback_N` / `system:capture_N`.

use std::ffi::c_int;

use quaver_protocol::message::{PortAliases, PortLatency, PortType};
use quaver_protocol::{GraphInfo, PortDirection};

use crate::types::*;

/// One graph port in JACK terms.
#[derive(Debug, Clone, PartialEq)]
pub struct PortView {
    /// Graph port id (the JACK port id).
    pub id: u32,
    /// `node:port`.
    pub name: String,
    /// Node name.
    pub node: String,
    /// Port name within the node.
    pub short: String,
    /// `JackPortFlags`.
    pub flags: c_int,
    /// Alternative names (`system:…` for the default device).
    pub aliases: Vec<String>,
    /// Physical playback ports: the device's lead in frames, when the server says.
    pub playback_lead: Option<u32>,
    /// A MIDI port (else audio).
    pub midi: bool,
}

/// A snapshot of the graph.
#[derive(Debug, Clone, Default)]
pub struct GraphView {
    /// Ports in graph order (nodes by id, inputs before outputs).
    pub ports: Vec<PortView>,
    /// Links as (output port name, input port name).
    pub links: Vec<(String, String)>,
    /// Node names (JACK client names), in graph order.
    pub nodes: Vec<String>,
    /// Latency ranges the ports' owners published (`set_port_latency`), by port id.
    pub latencies: std::collections::HashMap<u32, PortLatency>,
}

impl GraphView {
    /// Builds the JACK view of `g`.
    pub fn new(g: &GraphInfo) -> GraphView {
        let mut ports = Vec::new();
        let mut playback_alias = g.nodes.iter().any(|n| n.kind == "sink");
        let mut capture_alias = g.nodes.iter().any(|n| n.kind == "source");
        for n in &g.nodes {
            let (mut next_play, mut next_capt) = (1, 1);
            let aliases_play = playback_alias && n.kind == "sink";
            let aliases_capt = capture_alias && n.kind == "source";
            for p in &n.ports {
                let mut flags = match p.direction {
                    PortDirection::In => JACK_PORT_IS_INPUT,
                    PortDirection::Out => JACK_PORT_IS_OUTPUT,
                };
                let device_port = match n.kind.as_str() {
                    "sink" => p.direction == PortDirection::In,
                    "source" => p.direction == PortDirection::Out,
                    _ => false,
                };
                if device_port || n.physical {
                    flags |= JACK_PORT_IS_PHYSICAL | JACK_PORT_IS_TERMINAL;
                }
                let mut aliases = Vec::new();
                if aliases_play && p.direction == PortDirection::In {
                    aliases.push(format!("system:playback_{next_play}"));
                    next_play += 1;
                }
                if aliases_capt && p.direction == PortDirection::Out {
                    aliases.push(format!("system:capture_{next_capt}"));
                    next_capt += 1;
                }
                ports.push(PortView {
                    id: p.id,
                    name: format!("{}:{}", n.name, p.name),
                    node: n.name.clone(),
                    short: p.name.clone(),
                    flags,
                    aliases,
                    playback_lead: if device_port && p.direction == PortDirection::In {
                        n.playback_lead_frames
                            .map(|f| u32::try_from(f).unwrap_or(u32::MAX))
                    } else {
                        None
                    },
                    midi: p.port_type == PortType::Midi,
                });
            }
            // Only the first sink and the first source get the `system:` names.
            if aliases_play {
                playback_alias = false;
            }
            if aliases_capt {
                capture_alias = false;
            }
        }
        let links = g
            .links
            .iter()
            .map(|l| {
                (
                    format!("{}:{}", l.output_node, l.output_port),
                    format!("{}:{}", l.input_node, l.input_port),
                )
            })
            .collect();
        let nodes = g.nodes.iter().map(|n| n.name.clone()).collect();
        GraphView {
            ports,
            links,
            nodes,
            latencies: Default::default(),
        }
    }

    /// Adds the aliases the server keeps (`set_alias`) after the `system:` names, at
    /// most two per port in all.
    pub fn add_aliases(&mut self, list: &[PortAliases]) {
        for pa in list {
            if let Some(p) = self.ports.iter_mut().find(|p| p.id == pa.port) {
                for a in &pa.aliases {
                    if p.aliases.len() < 2 {
                        p.aliases.push(a.clone());
                    }
                }
            }
        }
    }

    /// The port called `name` (full name or alias).
    pub fn find(&self, name: &str) -> Option<&PortView> {
        self.ports.iter().find(|p| p.name == name).or_else(|| {
            self.ports
                .iter()
                .find(|p| p.aliases.iter().any(|a| a == name))
        })
    }

    /// The port with graph id `id`.
    pub fn by_id(&self, id: u32) -> Option<&PortView> {
        self.ports.iter().find(|p| p.id == id)
    }

    /// Full names of the ports connected to port `name`.
    pub fn connections(&self, name: &str) -> Vec<String> {
        self.links
            .iter()
            .filter_map(|(o, i)| {
                if o == name {
                    Some(i.clone())
                } else if i == name {
                    Some(o.clone())
                } else {
                    None
                }
            })
            .collect()
    }

    /// What changed from `old` to `self`, as JACK notifications: clients, ports and
    /// connections that appeared or went away.
    pub fn diff(&self, old: &GraphView) -> Changes {
        let mut c = Changes::default();
        for n in &old.nodes {
            if !self.nodes.contains(n) {
                c.clients.push((n.clone(), false));
            }
        }
        for n in &self.nodes {
            if !old.nodes.contains(n) {
                c.clients.push((n.clone(), true));
            }
        }
        for p in &old.ports {
            if self.by_id(p.id).is_none() {
                c.ports.push((p.id, false));
            }
        }
        for p in &self.ports {
            if old.by_id(p.id).is_none() {
                c.ports.push((p.id, true));
            }
        }
        let id = |g: &GraphView, n: &str| g.find(n).map(|p| p.id);
        for (o, i) in &old.links {
            if !self.linked(o, i)
                && let (Some(a), Some(b)) = (id(old, o), id(old, i))
            {
                c.links.push((a, b, false));
            }
        }
        for (o, i) in &self.links {
            if !old.linked(o, i)
                && let (Some(a), Some(b)) = (id(self, o), id(self, i))
            {
                c.links.push((a, b, true));
            }
        }
        c
    }

    /// True if `out` → `inp` is linked.
    pub fn linked(&self, out: &str, inp: &str) -> bool {
        self.links.iter().any(|(o, i)| o == out && i == inp)
    }
}

/// Differences between two graph snapshots (see [`GraphView::diff`]).
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// (client name, appeared).
    pub clients: Vec<(String, bool)>,
    /// (port id, appeared).
    pub ports: Vec<(u32, bool)>,
    /// (output port id, input port id, connected).
    pub links: Vec<(u32, u32, bool)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_protocol::{LinkInfo, NodeInfo, PortInfo};

    fn node(id: u32, name: &str, kind: &str, ports: &[(u32, &str, PortDirection)]) -> NodeInfo {
        NodeInfo {
            id,
            name: name.into(),
            kind: kind.into(),
            description: String::new(),
            volume: 1.0,
            mute: false,
            latency_ms: None,
            playback_lead_frames: None,
            suspended: false,
            physical: false,
            ports: ports
                .iter()
                .map(|&(id, n, direction)| PortInfo {
                    id,
                    name: n.into(),
                    direction,
                    channel: "FL".into(),
                    port_type: PortType::Audio,
                })
                .collect(),
            callback: None,
        }
    }

    #[test]
    fn a_physical_nodes_ports_are_physical_and_terminal_both_ways_without_aliases() {
        use PortDirection::{In, Out};
        let g = GraphInfo {
            nodes: vec![NodeInfo {
                physical: true,
                ..node(
                    1,
                    "a2j",
                    "filter",
                    &[
                        (2, "Midi Through [14] (playback) - Port-0", In),
                        (3, "Midi Through [14] (capture) - Port-0", Out),
                    ],
                )
            }],
            links: Vec::new(),
        };
        let v = GraphView::new(&g);
        let play = v.find("a2j:Midi Through [14] (playback) - Port-0").unwrap();
        assert_eq!(
            play.flags,
            JACK_PORT_IS_INPUT | JACK_PORT_IS_PHYSICAL | JACK_PORT_IS_TERMINAL
        );
        assert!(play.aliases.is_empty(), "system: names are the devices'");
        assert_eq!(play.playback_lead, None, "no device lead");
        let cap = v.find("a2j:Midi Through [14] (capture) - Port-0").unwrap();
        assert_eq!(
            cap.flags,
            JACK_PORT_IS_OUTPUT | JACK_PORT_IS_PHYSICAL | JACK_PORT_IS_TERMINAL
        );
    }

    #[test]
    fn device_ports_are_physical_with_system_aliases() {
        use PortDirection::{In, Out};
        let g = GraphInfo {
            nodes: vec![
                NodeInfo {
                    playback_lead_frames: Some(256),
                    suspended: false,
                    physical: false,
                    ..node(
                        1,
                        "null-sink",
                        "sink",
                        &[
                            (2, "playback_FL", In),
                            (3, "playback_FR", In),
                            (4, "monitor_FL", Out),
                        ],
                    )
                },
                node(5, "metro", "client", &[(6, "out", Out)]),
            ],
            links: vec![LinkInfo {
                id: 9,
                output_node: "metro".into(),
                output_port: "out".into(),
                input_node: "null-sink".into(),
                input_port: "playback_FL".into(),
                feedback: false,
            }],
        };
        let v = GraphView::new(&g);
        let p = v.find("system:playback_2").unwrap();
        assert_eq!(p.name, "null-sink:playback_FR");
        assert_eq!(
            p.flags,
            JACK_PORT_IS_INPUT | JACK_PORT_IS_PHYSICAL | JACK_PORT_IS_TERMINAL
        );
        assert_eq!(p.playback_lead, Some(256), "the device's lead");
        let m = v.find("null-sink:monitor_FL").unwrap();
        assert_eq!(m.flags, JACK_PORT_IS_OUTPUT, "a monitor is not physical");
        assert_eq!(m.playback_lead, None);
        assert!(m.aliases.is_empty());
        assert_eq!(v.find("metro:out").unwrap().flags, JACK_PORT_IS_OUTPUT);
        assert_eq!(v.connections("metro:out"), vec!["null-sink:playback_FL"]);
        assert_eq!(v.connections("null-sink:playback_FL"), vec!["metro:out"]);
        assert!(v.linked("metro:out", "null-sink:playback_FL"));
        assert_eq!(v.by_id(6).unwrap().short, "out");
        assert!(v.find("system:capture_1").is_none());

        // Diffs: metro leaves (its port and link go with it), a new client appears.
        let mut g2 = g.clone();
        g2.nodes.remove(1);
        g2.links.clear();
        g2.nodes.push(node(7, "thru", "client", &[(8, "in", In)]));
        g2.links.push(LinkInfo {
            id: 10,
            output_node: "null-sink".into(),
            output_port: "monitor_FL".into(),
            input_node: "thru".into(),
            input_port: "in".into(),
            feedback: false,
        });
        let d = GraphView::new(&g2).diff(&v);
        assert_eq!(
            d.clients,
            vec![("metro".to_string(), false), ("thru".to_string(), true)]
        );
        assert_eq!(d.ports, vec![(6, false), (8, true)]);
        assert_eq!(d.links, vec![(6, 2, false), (4, 8, true)]);
        assert_eq!(v.diff(&v), Changes::default());
    }
}
