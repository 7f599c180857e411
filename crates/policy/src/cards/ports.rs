//! Ports at run time: the analog ports the card's controls and jacks reveal, their
//! availability, the active port of each sink and source, PulseAudio's
//! switch-on-port-available rule, and the changes the front-ends announce and the
//! mixer follows. docs/alsa/ports.md.

use super::{Availability, Card, CardPort, Cards, PortChange, PortDirection, PortType};
use std::sync::mpsc;

/// An analog port the card's controls say exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPort {
    /// "analog-output-headphones", "analog-output", …
    pub name: String,
    /// "Headphones", …
    pub description: String,
    /// Higher is preferred.
    pub priority: u32,
    /// From the port's jack; unknown without one.
    pub available: Availability,
}

/// Why a port request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// No card opened a sink or source of that name.
    #[error("no card's sink or source is called '{0}'")]
    NoNode(String),
    /// The node's card offers no such port in the node's direction and profile.
    #[error("{node} has no port '{port}'")]
    NoPort {
        /// The sink or source.
        node: String,
        /// The port asked for.
        port: String,
    },
}

/// The name every analog port of `direction` starts with.
fn analog_prefix(direction: PortDirection) -> &'static str {
    match direction {
        PortDirection::Output => "analog-output",
        PortDirection::Input => "analog-input",
    }
}

/// The ports a sink or source of `direction` can use: the card's ports of that
/// direction offered by its active profile.
pub fn node_ports(card: &Card, direction: PortDirection) -> impl Iterator<Item = &CardPort> {
    card.ports
        .iter()
        .filter(move |p| p.direction == direction && p.profiles.contains(&card.active))
}

/// The port to fall back to: the highest priority among those plugged in, else among
/// those that cannot tell, else (everything unplugged) the highest of all.
pub fn best_port<'a>(ports: impl Iterator<Item = &'a CardPort> + Clone) -> Option<&'a CardPort> {
    let top = |want: Option<Availability>| {
        ports
            .clone()
            .filter(|p| want.is_none_or(|a| p.available == a))
            .max_by_key(|p| p.priority)
    };
    top(Some(Availability::Yes))
        .or_else(|| top(Some(Availability::Unknown)))
        .or_else(|| top(None))
}

/// switch-on-port-available for one sink or source: `current` is its port, `became_yes`
/// the ports that have just become available. Returns the port to switch to, if any:
/// the best one when the current port is gone or unplugged, else a newly plugged port
/// of higher priority.
fn switch_to(ports: &[&CardPort], current: &str, became_yes: &[String]) -> Option<String> {
    let cur = ports.iter().find(|p| p.name == current);
    let best = || best_port(ports.iter().copied()).map(|p| p.name.clone());
    match cur {
        None => best(),
        Some(c) if c.available == Availability::No => best().filter(|b| *b != current),
        Some(c) => ports
            .iter()
            .filter(|p| became_yes.contains(&p.name) && p.priority > c.priority)
            .max_by_key(|p| p.priority)
            .map(|p| p.name.clone()),
    }
}

impl Cards {
    /// A receiver of every [`PortChange`] from now on.
    pub fn watch(&mut self) -> mpsc::Receiver<PortChange> {
        let (tx, rx) = mpsc::channel();
        self.watchers.push(tx);
        rx
    }

    fn announce(&mut self, change: &PortChange) {
        self.watchers.retain(|w| w.send(change.clone()).is_ok());
    }

    /// Replaces the analog ports of `direction` of card `card` with `found` (what its
    /// controls and jacks say now), keeping the profiles the old ones belonged to, and
    /// switches its sinks or sources as switch-on-port-available does. Announces and
    /// returns the change; `None` when nothing changed (or the card has no analog port
    /// of that direction, or `found` is empty: the card keeps what it had).
    pub fn set_analog_ports(
        &mut self,
        card: u32,
        direction: PortDirection,
        found: &[FoundPort],
    ) -> Option<PortChange> {
        let prefix = analog_prefix(direction);
        let c = self.cards.iter_mut().find(|c| c.index == card)?;
        let is_analog = |p: &CardPort| p.direction == direction && p.name.starts_with(prefix);
        let first = c.ports.iter().position(is_analog)?;
        if found.is_empty() {
            return None;
        }
        let mut profiles: Vec<String> = Vec::new();
        for p in c.ports.iter().filter(|p| is_analog(p)) {
            for name in &p.profiles {
                if !profiles.contains(name) {
                    profiles.push(name.clone());
                }
            }
        }
        let old: Vec<CardPort> = c.ports.iter().filter(|p| is_analog(p)).cloned().collect();
        let new: Vec<CardPort> = found
            .iter()
            .map(|f| CardPort {
                name: f.name.clone(),
                description: f.description.clone(),
                priority: f.priority,
                direction,
                available: f.available,
                port_type: PortType::Analog,
                profiles: profiles.clone(),
            })
            .collect();
        if old == new {
            return None;
        }
        let became_yes: Vec<String> = new
            .iter()
            .filter(|p| {
                p.available == Availability::Yes
                    && old
                        .iter()
                        .find(|o| o.name == p.name)
                        .is_none_or(|o| o.available != Availability::Yes)
            })
            .map(|p| p.name.clone())
            .collect();
        c.ports.retain(|p| !is_analog(p));
        let at = first.min(c.ports.len());
        c.ports.splice(at..at, new);
        let change = switch_nodes(c, direction, &became_yes);
        self.announce(&change);
        Some(change)
    }

    /// Sets the availability of card `card`'s ports named in `updates` (a UCM card's
    /// ports, whose jacks are named by its configuration: the set of ports stays) and
    /// switches its sinks and sources as switch-on-port-available does. Announces and
    /// returns the change; `None` when no availability changed.
    pub fn set_availability(
        &mut self,
        card: u32,
        updates: &[(String, Availability)],
    ) -> Option<PortChange> {
        let c = self.cards.iter_mut().find(|c| c.index == card)?;
        let mut became_yes = Vec::new();
        let mut changed = false;
        for (name, available) in updates {
            let Some(p) = c.ports.iter_mut().find(|p| p.name == *name) else {
                continue;
            };
            if p.available != *available {
                if *available == Availability::Yes {
                    became_yes.push(name.clone());
                }
                p.available = *available;
                changed = true;
            }
        }
        if !changed {
            return None;
        }
        let mut change = PortChange {
            card,
            nodes: Vec::new(),
            switched: Vec::new(),
        };
        for direction in [PortDirection::Output, PortDirection::Input] {
            let d = switch_nodes(c, direction, &became_yes);
            change.nodes.extend(d.nodes);
            change.switched.extend(d.switched);
        }
        self.announce(&change);
        Some(change)
    }

    /// Makes `port` the active port of the sink or source `node` (SET_SINK_PORT,
    /// SET_SOURCE_PORT); announces the change.
    pub fn set_port(&mut self, node: &str, port: &str) -> Result<PortChange, PortError> {
        let ci = self
            .cards
            .iter()
            .position(|c| c.nodes.iter().any(|n| n.node == node))
            .ok_or_else(|| PortError::NoNode(node.to_string()))?;
        let c = &mut self.cards[ci];
        let n = c.nodes.iter().position(|n| n.node == node).unwrap_or(0);
        if !node_ports(c, c.nodes[n].direction).any(|p| p.name == port) {
            return Err(PortError::NoPort {
                node: node.to_string(),
                port: port.to_string(),
            });
        }
        let mut change = PortChange {
            card: c.index,
            nodes: vec![node.to_string()],
            switched: Vec::new(),
        };
        if c.nodes[n].port != port {
            c.nodes[n].port = port.to_string();
            change.switched.push((node.to_string(), port.to_string()));
        }
        // Remembered for this card and profile, on disk: the next time the profile
        // opens (this run or a later one), `settle` gives the node this port again.
        let (card, profile) = (c.name.clone(), c.active.clone());
        self.store.set_port(&card, &profile, node, port);
        self.announce(&change);
        Ok(change)
    }

    /// The ports of the sink or source `node` and the index of its active one (listed
    /// even if the card's active profile no longer offers it, so the record stays whole).
    pub fn ports_of(&self, node: &str) -> Option<(Vec<CardPort>, usize)> {
        let (card, n) = self.node(node)?;
        let mut ports: Vec<CardPort> = node_ports(card, n.direction).cloned().collect();
        if let Some(active) = ports.iter().position(|p| p.name == n.port) {
            return Some((ports, active));
        }
        match card.ports.iter().find(|p| p.name == n.port) {
            Some(p) => ports.push(p.clone()),
            // A port the card no longer has (nodes made from a profile's generic port
            // after the ports were refined, until `settle` runs): show the best.
            None => {
                let best = best_port(ports.iter())?.name.clone();
                let active = ports.iter().position(|p| p.name == best)?;
                return Some((ports, active));
            }
        }
        let active = ports.len() - 1;
        Some((ports, active))
    }

    /// Gives each sink and source of card `card` the port chosen for it by hand under
    /// its active profile (this run or an earlier one: remembered on disk; if usable),
    /// else, if the card no longer offers its port (a profile
    /// switch or a reopen made new nodes), the best port it can use; announces and
    /// returns the change, `None` when every node was fine.
    pub fn settle(&mut self, card: u32) -> Option<PortChange> {
        let c = self.cards.iter_mut().find(|c| c.index == card)?;
        let mut change = PortChange {
            card,
            nodes: Vec::new(),
            switched: Vec::new(),
        };
        // A port chosen by hand comes back if the node can use it and it is not
        // unplugged.
        for i in 0..c.nodes.len() {
            let n = &c.nodes[i];
            let Some(want) = self.store.port(&c.name, &c.active, &n.node) else {
                continue;
            };
            let want = want.to_string();
            let usable = node_ports(c, n.direction)
                .any(|p| p.name == *want && p.available != Availability::No);
            if usable && n.port != *want {
                c.nodes[i].port = want.clone();
                change
                    .switched
                    .push((c.nodes[i].node.clone(), want.clone()));
            }
        }
        for direction in [PortDirection::Output, PortDirection::Input] {
            let d = switch_nodes(c, direction, &[]);
            change.switched.extend(d.switched);
        }
        if change.switched.is_empty() {
            return None;
        }
        change.nodes = change.switched.iter().map(|(n, _)| n.clone()).collect();
        self.announce(&change);
        Some(change)
    }
}

/// Applies switch-on-port-available to every sink or source of `direction` on `card`.
fn switch_nodes(card: &mut Card, direction: PortDirection, became_yes: &[String]) -> PortChange {
    let mut change = PortChange {
        card: card.index,
        nodes: Vec::new(),
        switched: Vec::new(),
    };
    let ports: Vec<CardPort> = node_ports(card, direction).cloned().collect();
    let refs: Vec<&CardPort> = ports.iter().collect();
    for n in card.nodes.iter_mut().filter(|n| n.direction == direction) {
        change.nodes.push(n.node.clone());
        if let Some(to) = switch_to(&refs, &n.port, became_yes) {
            n.port = to.clone();
            change.switched.push((n.node.clone(), to));
        }
    }
    change
}

#[cfg(test)]
mod tests {
    use super::super::{CardNode, CardProfile, ProfileStore};
    use super::*;

    fn card() -> Card {
        let port = |name: &str, direction| CardPort {
            name: name.into(),
            description: name.into(),
            priority: 100,
            direction,
            available: Availability::Unknown,
            port_type: PortType::Analog,
            profiles: vec!["output:analog-stereo+input:analog-stereo".into()],
        };
        Card {
            index: 1,
            name: "alsa_card.Dummy".into(),
            driver: "quaver-alsa".into(),
            props: Vec::new(),
            profiles: vec![CardProfile {
                name: "output:analog-stereo+input:analog-stereo".into(),
                description: String::new(),
                priority: 1,
                sinks: 1,
                sources: 1,
                available: true,
            }],
            ports: vec![
                port("analog-output", PortDirection::Output),
                port("analog-input", PortDirection::Input),
            ],
            active: "output:analog-stereo+input:analog-stereo".into(),
            pending: None,
            nodes: vec![
                CardNode {
                    node: "sink".into(),
                    direction: PortDirection::Output,
                    port: "analog-output".into(),
                },
                CardNode {
                    node: "source".into(),
                    direction: PortDirection::Input,
                    port: "analog-input".into(),
                },
            ],
        }
    }

    fn found(name: &str, priority: u32, available: Availability) -> FoundPort {
        FoundPort {
            name: name.into(),
            description: name.into(),
            priority,
            available,
        }
    }

    fn active(cards: &Cards, node: &str) -> String {
        cards.node(node).unwrap().1.port.clone()
    }

    #[test]
    fn plugging_headphones_switches_to_them_and_unplugging_switches_back() {
        let mut cards = Cards::new(ProfileStore::memory());
        cards.add(card());
        let rx = cards.watch();
        let out = PortDirection::Output;
        let hp = |a| {
            [
                found("analog-output-headphones", 9900, a),
                found("analog-output", 8000, Availability::Unknown),
            ]
        };
        // The jack appears unplugged: the port shows, the sink stays.
        let c = cards
            .set_analog_ports(1, out, &hp(Availability::No))
            .unwrap();
        assert_eq!(c.nodes, ["sink"]);
        assert!(c.switched.is_empty());
        assert_eq!(active(&cards, "sink"), "analog-output");
        let (ports, i) = cards.ports_of("sink").unwrap();
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[i].name, "analog-output");
        assert_eq!(ports[0].profiles, card().ports[0].profiles);
        // Plugged: the sink moves; the source is untouched.
        let c = cards
            .set_analog_ports(1, out, &hp(Availability::Yes))
            .unwrap();
        assert_eq!(
            c.switched,
            [("sink".to_string(), "analog-output-headphones".to_string())]
        );
        assert_eq!(active(&cards, "source"), "analog-input");
        // The same state again changes nothing and says nothing.
        assert_eq!(cards.set_analog_ports(1, out, &hp(Availability::Yes)), None);
        // Unplugged: back to the best port left.
        let c = cards
            .set_analog_ports(1, out, &hp(Availability::No))
            .unwrap();
        assert_eq!(
            c.switched,
            [("sink".to_string(), "analog-output".to_string())]
        );
        let seen: Vec<PortChange> = rx.try_iter().collect();
        assert_eq!(seen.len(), 3, "{seen:?}");
    }

    #[test]
    fn a_port_chosen_by_hand_holds_until_its_own_jack_says_otherwise() {
        let mut cards = Cards::new(ProfileStore::memory());
        cards.add(card());
        let out = PortDirection::Output;
        let ports = |hp, spk| {
            [
                found("analog-output-headphones", 9900, hp),
                found("analog-output-speaker", 9000, spk),
            ]
        };
        use Availability::{No, Unknown, Yes};
        // The generic port is gone: the best one takes over.
        let c = cards
            .set_analog_ports(1, out, &ports(Yes, Unknown))
            .unwrap();
        assert_eq!(c.switched[0].1, "analog-output-headphones");
        cards.set_port("sink", "analog-output-speaker").unwrap();
        // Another change that plugs nothing new keeps the hand-chosen port.
        assert!(
            cards
                .set_analog_ports(
                    1,
                    out,
                    &[
                        found("analog-output-headphones", 9900, Yes),
                        found("analog-output-speaker", 9000, Unknown),
                        found("analog-output-lineout", 8900, No),
                    ]
                )
                .unwrap()
                .switched
                .is_empty()
        );
        assert_eq!(active(&cards, "sink"), "analog-output-speaker");
        assert_eq!(
            cards.set_port("sink", "hdmi-output-0"),
            Err(PortError::NoPort {
                node: "sink".into(),
                port: "hdmi-output-0".into()
            })
        );
        assert_eq!(
            cards.set_port("sink", "analog-input"),
            Err(PortError::NoPort {
                node: "sink".into(),
                port: "analog-input".into()
            })
        );
        assert_eq!(
            cards.set_port("nothing", "analog-output"),
            Err(PortError::NoNode("nothing".into()))
        );
        // Nothing found: the card keeps its ports.
        assert_eq!(cards.set_analog_ports(1, out, &[]), None);
        // A node remade with the generic port the card no longer has: shown on the
        // best port, and settled onto it.
        let mut again = cards.find(Some(1), None).unwrap().clone();
        again.nodes[0].port = "analog-output".into();
        cards.add(again);
        let (ports, i) = cards.ports_of("sink").unwrap();
        assert_eq!(ports[i].name, "analog-output-headphones");
        // …and settled back onto the port chosen by hand.
        let c = cards.settle(1).unwrap();
        assert_eq!(
            c.switched,
            [("sink".to_string(), "analog-output-speaker".to_string())]
        );
        assert_eq!(cards.settle(1), None);
    }

    /// A port chosen by hand is kept on disk per card and profile: a registry opened
    /// from the same file (a daemon restart) settles the node onto it again, and the
    /// choice belongs to its profile only.
    #[test]
    fn a_port_chosen_by_hand_is_remembered_per_card_and_profile_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("card-profiles.toml");
        let out = PortDirection::Output;
        let ports = [
            found("analog-output-headphones", 9900, Availability::Unknown),
            found("analog-output-speaker", 9000, Availability::Unknown),
        ];
        {
            let mut cards = Cards::new(ProfileStore::open(&path));
            cards.add(card());
            cards.set_analog_ports(1, out, &ports).unwrap();
            assert_eq!(active(&cards, "sink"), "analog-output-headphones");
            cards.set_port("sink", "analog-output-speaker").unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(
                "[ports.\"alsa_card.Dummy\".\"output:analog-stereo+input:analog-stereo\"]"
            ) && text.contains("sink = \"analog-output-speaker\""),
            "{text}"
        );
        // Restarted: the card comes with its best port, and settles onto the chosen one.
        let mut cards = Cards::new(ProfileStore::open(&path));
        cards.add(card());
        cards.set_analog_ports(1, out, &ports).unwrap();
        assert_eq!(active(&cards, "sink"), "analog-output-headphones");
        let c = cards.settle(1).unwrap();
        assert_eq!(
            c.switched,
            [("sink".to_string(), "analog-output-speaker".to_string())]
        );
        // Under another profile the choice does not apply.
        let mut other = card();
        other.active = "output:analog-stereo".into();
        for p in &mut other.ports {
            p.profiles.push("output:analog-stereo".into());
        }
        let mut cards = Cards::new(ProfileStore::open(&path));
        cards.add(other);
        cards.set_analog_ports(1, out, &ports).unwrap();
        assert_eq!(cards.settle(1), None);
        assert_eq!(active(&cards, "sink"), "analog-output-headphones");
    }

    #[test]
    fn ucm_ports_follow_their_jacks_by_availability_alone() {
        use Availability::{No, Unknown, Yes};
        let mut cards = Cards::new(ProfileStore::memory());
        let mut c = card();
        let profile = c.ports[0].profiles.clone();
        let port = |name: &str, priority| CardPort {
            name: name.into(),
            description: name.into(),
            priority,
            direction: PortDirection::Output,
            available: Unknown,
            port_type: PortType::Analog,
            profiles: profile.clone(),
        };
        c.ports = vec![port("[Out] Headphones", 200), port("[Out] Speaker", 100)];
        c.nodes[0].port = "[Out] Headphones".into();
        cards.add(c);
        let rx = cards.watch();
        let set = |cards: &mut Cards, a| {
            cards.set_availability(1, &[("[Out] Headphones".to_string(), a)])
        };
        // Unplugged at start: the sink leaves the headphones for the speaker.
        let ch = set(&mut cards, No).unwrap();
        assert_eq!(
            ch.switched,
            [("sink".to_string(), "[Out] Speaker".to_string())]
        );
        assert_eq!(set(&mut cards, No), None);
        // Plugged: back to the headphones (the higher priority).
        let ch = set(&mut cards, Yes).unwrap();
        assert_eq!(ch.switched[0].1, "[Out] Headphones");
        assert!(ch.nodes.contains(&"sink".to_string()));
        // A port the card does not have changes nothing.
        assert_eq!(
            cards.set_availability(1, &[("[Out] Nothing".to_string(), Yes)]),
            None
        );
        let names: Vec<_> = cards
            .find(Some(1), None)
            .unwrap()
            .ports
            .iter()
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(names, ["[Out] Headphones", "[Out] Speaker"]);
        assert_eq!(rx.try_iter().count(), 2);
    }

    #[test]
    fn the_best_port_prefers_plugged_then_unknown_then_priority() {
        let p = |name: &str, priority, available| CardPort {
            name: name.into(),
            description: String::new(),
            priority,
            direction: PortDirection::Output,
            available,
            port_type: PortType::Analog,
            profiles: Vec::new(),
        };
        use Availability::{No, Unknown, Yes};
        let ports = [
            p("hp", 9900, No),
            p("spk", 9000, Unknown),
            p("line", 100, Yes),
        ];
        assert_eq!(best_port(ports.iter()).unwrap().name, "line");
        assert_eq!(best_port(ports[..2].iter()).unwrap().name, "spk");
        assert_eq!(best_port(ports[..1].iter()).unwrap().name, "hp");
    }
}
