//! The processing graph in Graphviz dot form (`quaver graph --dot`).
//!
//! Each node is a record with its input ports on the left, name and kind in the
//! middle and output ports on the right; each link is an edge from an output
//! port to an input port (dashed and labelled for a feedback link, one that closes a
//! loop and carries the previous cycle). Graphviz identifiers are made from the
//! server's numeric ids, so names only ever appear inside escaped labels.

use quaver_protocol::{GraphInfo, NodeInfo, PortDirection};
use std::collections::HashMap;
use std::fmt::Write;

/// Renders `graph` as a dot digraph.
pub fn to_dot(graph: &GraphInfo) -> String {
    let mut s = String::new();
    s.push_str("digraph quaver {\n");
    s.push_str("  rankdir=LR;\n");
    s.push_str("  node [shape=record, fontname=\"sans-serif\", fontsize=10];\n");
    s.push_str("  edge [arrowsize=0.6];\n");
    for node in &graph.nodes {
        let _ = writeln!(s, "  n{} [label=\"{}\"];", node.id, node_label(node));
    }
    let by_name: HashMap<&str, &NodeInfo> =
        graph.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    for link in &graph.links {
        let from = endpoint(
            &by_name,
            &link.output_node,
            &link.output_port,
            PortDirection::Out,
        );
        let to = endpoint(
            &by_name,
            &link.input_node,
            &link.input_port,
            PortDirection::In,
        );
        if link.feedback {
            // Carries the previous cycle: drawn apart, and not allowed to bend the
            // layout, which follows the processing order.
            let _ = writeln!(
                s,
                "  {from} -> {to} [style=dashed, constraint=false, label=\"feedback\"];"
            );
        } else {
            let _ = writeln!(s, "  {from} -> {to};");
        }
    }
    s.push_str("}\n");
    s
}

/// `{ {<p1> FL|<p2> FR} | {name|kind} | {<p3> monitor_FL} }`: with rankdir=LR the
/// outer braces lay the three columns out left to right.
fn node_label(node: &NodeInfo) -> String {
    let column = |dir: PortDirection| -> Option<String> {
        let ports: Vec<String> = node
            .ports
            .iter()
            .filter(|p| p.direction == dir)
            .map(|p| format!("<p{}> {}", p.id, escape(&p.name)))
            .collect();
        (!ports.is_empty()).then(|| format!("{{{}}}", ports.join("|")))
    };
    let mut middle = format!("{}|{}", escape(&node.name), escape(&node.kind));
    if node.suspended {
        middle.push_str("|suspended");
    }
    if node.mute || (node.volume - 1.0).abs() > 1e-6 {
        middle.push('|');
        middle.push_str(&escape(&crate::values::format_volume(
            node.volume,
            node.mute,
        )));
    }
    let mut cols = Vec::with_capacity(3);
    cols.extend(column(PortDirection::In));
    cols.push(format!("{{{middle}}}"));
    cols.extend(column(PortDirection::Out));
    format!("{{{}}}", cols.join("|"))
}

/// A link end: `n1:p3:e` when the port is known, else the node or a quoted name
/// (the graph may have changed between listing nodes and links).
fn endpoint(
    nodes: &HashMap<&str, &NodeInfo>,
    node: &str,
    port: &str,
    dir: PortDirection,
) -> String {
    let side = if dir == PortDirection::Out { "e" } else { "w" };
    match nodes.get(node) {
        Some(n) => match n
            .ports
            .iter()
            .find(|p| p.name == port && p.direction == dir)
        {
            Some(p) => format!("n{}:p{}:{side}", n.id, p.id),
            None => format!("n{}", n.id),
        },
        None => format!("\"{}\"", quote(&format!("{node}:{port}"))),
    }
}

/// Escapes text for a record label, where braces, bars and angle brackets are syntax.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '{' | '}' | '|' | '<' | '>' | '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Escapes text for a plain quoted dot string.
fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_protocol::{LinkInfo, PortInfo};

    fn port(id: u32, name: &str, direction: PortDirection) -> PortInfo {
        PortInfo {
            id,
            name: name.into(),
            direction,
            channel: name.trim_start_matches("monitor_").into(),
            port_type: Default::default(),
        }
    }

    fn node(id: u32, name: &str, kind: &str, ports: Vec<PortInfo>) -> NodeInfo {
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
            ports,
            callback: None,
        }
    }

    fn link(id: u32, on: &str, op: &str, inn: &str, ip: &str) -> LinkInfo {
        LinkInfo {
            id,
            output_node: on.into(),
            output_port: op.into(),
            input_node: inn.into(),
            input_port: ip.into(),
            feedback: false,
        }
    }

    fn sample() -> GraphInfo {
        use PortDirection::{In, Out};
        let mut music = node(
            5,
            "music.wav",
            "playback",
            vec![port(20, "FL", Out), port(21, "FR", Out)],
        );
        music.volume = 0.5;
        music.mute = true;
        GraphInfo {
            nodes: vec![
                node(
                    1,
                    "null",
                    "sink",
                    vec![
                        port(10, "FL", In),
                        port(11, "FR", In),
                        port(12, "monitor_FL", Out),
                        port(13, "monitor_FR", Out),
                    ],
                ),
                music,
            ],
            links: vec![
                link(1, "music.wav", "FL", "null", "FL"),
                link(2, "music.wav", "FR", "null", "FR"),
                LinkInfo {
                    feedback: true,
                    ..link(3, "null", "monitor_FL", "null", "FL")
                },
            ],
        }
    }

    #[test]
    fn dot_output() {
        let dot = to_dot(&sample());
        let want = r#"digraph quaver {
  rankdir=LR;
  node [shape=record, fontname="sans-serif", fontsize=10];
  edge [arrowsize=0.6];
  n1 [label="{{<p10> FL|<p11> FR}|{null|sink}|{<p12> monitor_FL|<p13> monitor_FR}}"];
  n5 [label="{{music.wav|playback|50% (-6.0 dB) muted}|{<p20> FL|<p21> FR}}"];
  n5:p20:e -> n1:p10:w;
  n5:p21:e -> n1:p11:w;
  n1:p12:e -> n1:p10:w [style=dashed, constraint=false, label="feedback"];
}
"#;
        assert_eq!(dot, want);
    }

    #[test]
    fn names_are_escaped() {
        use PortDirection::In;
        let g = GraphInfo {
            nodes: vec![node(
                2,
                "a|b {x} <y> \"q\"",
                "sink",
                vec![port(3, "in<1>", In)],
            )],
            links: vec![link(9, "gone", "FL", "a|b {x} <y> \"q\"", "in<1>")],
        };
        let dot = to_dot(&g);
        assert!(
            dot.contains(r#"n2 [label="{{<p3> in\<1\>}|{a\|b \{x\} \<y\> \"q\"|sink}}"];"#),
            "{dot}"
        );
        // A link to a node that vanished still renders as valid dot.
        assert!(dot.contains(r#"  "gone:FL" -> n2:p3:w;"#), "{dot}");
    }

    #[test]
    fn empty_graph() {
        let dot = to_dot(&GraphInfo {
            nodes: vec![],
            links: vec![],
        });
        assert!(dot.starts_with("digraph quaver {\n") && dot.ends_with("}\n"));
    }
}
