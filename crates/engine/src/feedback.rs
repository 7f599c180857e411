//! Feedback links and the processing order that leaves them out.
//!
//! A link may close a loop — a node's output into its own input, or a path through
//! other nodes back to where it started — as JACK allows. A loop has no order in which
//! every node runs after what feeds it, so one link of each loop carries the previous
//! cycle's audio instead: a *feedback link*, one quantum of delay. Which one is decided
//! as jackd2 decides it when the connection is made (`JackGraphManager::Connect`: when
//! `IsLoopPath` finds a path from the input's client to the output's client, the
//! connection is a feedback one, which orders its clients the other way round): links
//! are taken in the order they were made
//! (link ids only grow), and a link whose input node already reaches its output node
//! through the links kept so far, or that joins a node to itself, is feedback. So the
//! link that closed the loop is the delayed one and the order of the rest is the order
//! they had before it. Unlike jackd2 the choice is made again on every edit: once the
//! loop is broken elsewhere, a former feedback link orders its nodes again.
//!
//! Feedback links need no buffer of their own: a node's output buffers, preallocated
//! in its slot, still hold its previous cycle when a node before it in the plan reads
//! them, and they survive plan swaps (a per-plan buffer would lose a quantum at every
//! edit). The real-time side only has to read a node's own outputs for a link from the
//! node to itself (`rt/process.rs`). A split-phase node is finished only when a later
//! step reads it, and the source of a feedback link comes later in the plan than its
//! destination, so nothing ever waits for a node that has not begun.

use crate::graph::{Graph, LinkId, NodeId, PortId};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// The order nodes run in, and the links that carry the previous cycle.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Order {
    /// Every node, each after the nodes that feed it through links that are not
    /// feedback, level by level: every node whose inputs are ready comes before any
    /// node that must wait for another, so independent split-phase nodes (callback
    /// clients) are all woken before the first wait for one of them.
    pub nodes: Vec<NodeId>,
    /// The (output, input) port pairs of the feedback links: each closes a loop, its
    /// source runs after its destination (or is its destination), and it carries the
    /// source's previous cycle.
    pub feedback: HashSet<(PortId, PortId)>,
}

/// The processing order of `graph` ([`order_with`] with no extra links).
pub fn order(graph: &Graph) -> Order {
    order_with(graph, &[])
}

/// The processing order of `graph`'s links plus `extra` port pairs (links fading out
/// for one cycle, whose ports still exist). The extra pairs come after every link of
/// the graph: one of them that closes a loop is the feedback link, so the order the
/// plan keeps after its first cycle is the graph's own.
pub fn order_with(graph: &Graph, extra: &[(PortId, PortId)]) -> Order {
    let mut edges: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
    let mut feedback = HashSet::new();
    let pairs = graph
        .links
        .values()
        .map(|l| (l.output, l.input))
        .chain(extra.iter().copied());
    for (o, i) in pairs {
        let (Some(a), Some(b)) = (graph.ports.get(&o), graph.ports.get(&i)) else {
            continue;
        };
        let (a, b) = (a.node, b.node);
        if edges.get(&a).is_some_and(|next| next.contains(&b)) {
            continue;
        }
        if a == b || reaches(&edges, b, a) {
            feedback.insert((o, i));
        } else {
            edges.entry(a).or_default().push(b);
        }
    }
    let mut indeg: BTreeMap<NodeId, usize> = graph.nodes.keys().map(|&k| (k, 0)).collect();
    for next in edges.values() {
        for m in next {
            if let Some(d) = indeg.get_mut(m) {
                *d += 1;
            }
        }
    }
    let mut ready: VecDeque<NodeId> = indeg.iter().filter(|e| *e.1 == 0).map(|e| *e.0).collect();
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    while let Some(n) = ready.pop_front() {
        nodes.push(n);
        for m in edges.get(&n).into_iter().flatten() {
            let d = indeg.get_mut(m).expect("edges join known nodes");
            *d -= 1;
            if *d == 0 {
                ready.push_back(*m);
            }
        }
    }
    debug_assert_eq!(
        nodes.len(),
        graph.nodes.len(),
        "the kept links form no loop"
    );
    Order { nodes, feedback }
}

/// The ids of `graph`'s feedback links (for listings).
pub fn feedback_links(graph: &Graph) -> HashSet<LinkId> {
    let fb = order(graph).feedback;
    graph
        .links
        .values()
        .filter(|l| fb.contains(&(l.output, l.input)))
        .map(|l| l.id)
        .collect()
}

/// True if a path of `edges` leads from node `from` to node `to`.
fn reaches(edges: &BTreeMap<NodeId, Vec<NodeId>>, from: NodeId, to: NodeId) -> bool {
    let mut stack = vec![from];
    let mut seen = HashSet::new();
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if seen.insert(n) {
            stack.extend(edges.get(&n).into_iter().flatten());
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{NodeKind, NodeSpec};
    use quaver_dsp::ChannelMap;

    /// A graph with stereo filters (inputs and outputs) named by `names`.
    fn filters(names: &[&str]) -> (Graph, Vec<NodeId>) {
        let mut g = Graph::default();
        let ids = names
            .iter()
            .enumerate()
            .map(|(slot, name)| {
                let mut f = NodeSpec::new(name, NodeKind::Filter);
                f.inputs = ChannelMap::stereo();
                f.outputs = ChannelMap::stereo();
                g.add_node(&f, slot)
            })
            .collect();
        (g, ids)
    }

    fn link(g: &mut Graph, out: &str, inp: &str) {
        let pairs = g.link_pairs(out, inp).unwrap();
        g.add_links_with_feedback(&pairs).unwrap();
    }

    /// The feedback links as "node:port→node:port", sorted.
    fn feedback_names(g: &Graph) -> Vec<String> {
        let mut v: Vec<String> = order(g)
            .feedback
            .iter()
            .map(|&(o, i)| format!("{}→{}", g.port_path(o), g.port_path(i)))
            .collect();
        v.sort();
        v
    }

    fn pos(o: &Order, n: NodeId) -> usize {
        o.nodes.iter().position(|&x| x == n).unwrap()
    }

    #[test]
    fn a_node_linked_to_itself_is_accepted_as_feedback() {
        let (mut g, ids) = filters(&["a"]);
        link(&mut g, "a", "a");
        assert_eq!(g.links.len(), 2);
        let o = order(&g);
        assert_eq!(o.nodes, ids);
        assert_eq!(
            feedback_names(&g),
            ["a:output_FL→a:input_FL", "a:output_FR→a:input_FR"]
        );
        assert_eq!(feedback_links(&g).len(), 2);
    }

    #[test]
    fn the_link_that_closes_a_loop_of_two_is_the_feedback_one() {
        let (mut g, ids) = filters(&["a", "b"]);
        link(&mut g, "b", "a");
        link(&mut g, "a:output_FL", "b:input_FL");
        // b → a came first: it orders the nodes, a → b is delayed.
        let o = order(&g);
        assert!(pos(&o, ids[1]) < pos(&o, ids[0]), "{o:?}");
        assert_eq!(feedback_names(&g), ["a:output_FL→b:input_FL"]);
        // A second link along the loop's direction is feedback too; one along the kept
        // direction is not.
        link(&mut g, "a:output_FR", "b:input_FR");
        link(&mut g, "b:output_FL", "a:input_FR");
        assert_eq!(
            feedback_names(&g),
            ["a:output_FL→b:input_FL", "a:output_FR→b:input_FR"]
        );
    }

    #[test]
    fn a_loop_through_three_keeps_the_order_of_the_rest() {
        // src → a → b → c → sink, then c → a closes a loop: a, b, c keep their order
        // and every node still runs after what feeds it.
        let (mut g, ids) = filters(&["src", "a", "b", "c", "sink"]);
        for (o, i) in [("src", "a"), ("a", "b"), ("b", "c"), ("c", "sink")] {
            link(&mut g, o, i);
        }
        let before = order(&g);
        link(&mut g, "c", "a");
        let o = order(&g);
        assert_eq!(o.nodes, before.nodes);
        assert_eq!(
            feedback_names(&g),
            ["c:output_FL→a:input_FL", "c:output_FR→a:input_FR"]
        );
        let p: Vec<usize> = ids.iter().map(|&n| pos(&o, n)).collect();
        assert!(p.windows(2).all(|w| w[0] < w[1]), "{o:?}");
    }

    #[test]
    fn removing_the_closing_link_restores_the_order() {
        let (mut g, ids) = filters(&["a", "b", "c"]);
        link(&mut g, "a", "b");
        link(&mut g, "b", "c");
        link(&mut g, "c", "a");
        assert_eq!(order(&g).feedback.len(), 2);
        g.unlink("c", "a").unwrap();
        let o = order(&g);
        assert!(o.feedback.is_empty());
        assert_eq!(o.nodes, ids);
        // Broken elsewhere instead, the former feedback link orders its nodes: c
        // before a.
        link(&mut g, "c", "a");
        g.unlink("a", "b").unwrap();
        let o = order(&g);
        assert!(o.feedback.is_empty());
        assert!(pos(&o, ids[1]) < pos(&o, ids[2]) && pos(&o, ids[2]) < pos(&o, ids[0]));
    }

    #[test]
    fn fading_links_come_after_the_graph_own() {
        // b → a is gone but fades out for a cycle; a → b is new. The new link orders the
        // plan; the fading one is read as feedback.
        let (mut g, ids) = filters(&["a", "b"]);
        link(&mut g, "a", "b");
        let gone: Vec<(PortId, PortId)> = g.link_pairs("b", "a").unwrap().into_iter().collect();
        let o = order_with(&g, &gone);
        assert_eq!(o.nodes, ids);
        assert_eq!(o.feedback, gone.into_iter().collect());
    }

    #[test]
    fn every_source_comes_before_any_sink() {
        // a → sink, and b unlinked: b must not wait behind the sink (which waits for a).
        let (mut g, ids) = filters(&["sink", "a", "b"]);
        link(&mut g, "a", "sink");
        let o = order(&g);
        assert!(pos(&o, ids[1]) < pos(&o, ids[0]) && pos(&o, ids[2]) < pos(&o, ids[0]));
        assert!(o.feedback.is_empty());
    }
}
