//! Routing policy: which device a new stream goes to.
//!
//! Front-ends ask the policy instead of deciding routing themselves, so every protocol
//! routes the same way. The policy sees a plain view of the graph (no engine types) and
//! answers with node names.
//!
//! - [`cards`]: the sound cards the daemon opened (profiles, ports, active profile,
//!   their sinks and sources) and the profile chosen per card, for the front-ends.
//! - [`rehome`]: the thread that moves streams off a device that goes away; it applies
//!   the policy's answers to the engine.
//! - [`restore`]: stream restore's memory (volume, mute and device per kind of stream),
//!   one store for every front-end.
//! - [`roles`]: streams of lower roles ducked while a higher one plays.
//! - [`rules`]: the rule file: where streams go, their roles, own filter chains and
//!   starting volumes, by their properties.

pub mod cards;
pub mod rehome;
pub mod restore;
pub mod roles;
pub mod rules;

use serde::{Deserialize, Serialize};

/// What the policy needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Node kind as the engine names it ("sink", "source", "playback", "record", "filter").
    pub kind: String,
}

/// Policy settings (the `[policy]` table of quaver.toml).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Preferred sink for new playback streams while its port is not unplugged; unset or
    /// absent: the sink of highest priority (a card's active port), the first of equals.
    pub default_sink: Option<String>,
    /// Preferred source for new record streams; otherwise as for the sink.
    pub default_source: Option<String>,
    /// Roles and ducking (`[policy.roles]`).
    #[serde(default)]
    pub roles: roles::RolesConfig,
    /// The rule file; `$XDG_CONFIG_HOME/quaver/rules.toml` when unset and it exists.
    pub rules: Option<std::path::PathBuf>,
}

/// Builds the config's named filter chains for one stream (the daemon's `[[filters]]`
/// entries with a `name`), for the rules' `chain` action. The front-ends call it
/// outside the policy's lock: building may probe a plugin in a child process.
pub trait ChainMaker: Send + Sync {
    /// The chain `name` built for `channels` channels at the engine's rate, or why not.
    fn make(&self, name: &str, channels: usize) -> Result<quaver_dsp::filter::FilterChain, String>;
    /// Whether the config has a chain `name`.
    fn has(&self, name: &str) -> bool;
}

/// The chain maker the daemon installed, if any.
#[derive(Clone, Default)]
struct Chains(Option<std::sync::Arc<dyn ChainMaker>>);

impl std::fmt::Debug for Chains {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Chains(installed)"
        } else {
            "Chains(none)"
        })
    }
}

/// What the rules give a new stream besides its target and role.
#[derive(Clone, Default)]
pub struct StreamExtras {
    /// A named chain and what builds it (`None`: no rule gives one).
    pub chain: Option<(String, Option<std::sync::Arc<dyn ChainMaker>>)>,
    /// A starting volume, linear.
    pub volume: Option<f32>,
}

impl StreamExtras {
    /// Builds the rule's chain for `channels` channels: `None` when no rule gives one;
    /// an error naming the chain when it cannot be built (the stream then plays
    /// without it: a missing effect must not cost the sound).
    pub fn build_chain(
        &self,
        channels: usize,
    ) -> Option<Result<quaver_dsp::filter::FilterChain, String>> {
        let (name, maker) = self.chain.as_ref()?;
        Some(match maker {
            Some(m) => m
                .make(name, channels)
                .map_err(|e| format!("chain '{name}': {e}")),
            None => Err(format!(
                "chain '{name}': no [[filters]] chains are configured"
            )),
        })
    }
}

/// The card registry the policy reads each device's port priority and availability
/// from. Lock order: the policy's lock, then the registry's; holders of the registry's
/// lock never take the policy's.
#[derive(Clone, Default)]
struct CardsHandle(Option<cards::SharedCards>);

impl std::fmt::Debug for CardsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "CardsHandle(installed)"
        } else {
            "CardsHandle(none)"
        })
    }
}

/// How a device competes for default: PulseAudio's order (a device whose port is
/// unplugged loses to any other, then the configured default wins, then the higher
/// priority, then the earlier device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    plugged: bool,
    configured: bool,
    priority: u32,
    earlier: std::cmp::Reverse<usize>,
}

/// The routing policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    config: PolicyConfig,
    rules: rules::Rules,
    chains: Chains,
    cards: CardsHandle,
}

impl Policy {
    /// A policy with the given settings.
    pub fn new(config: PolicyConfig) -> Self {
        Policy {
            config,
            rules: rules::Rules::none(),
            chains: Chains::default(),
            cards: CardsHandle::default(),
        }
    }

    /// Reads the card registry for the default's choice: a card's sink or source
    /// competes with its active port's priority and availability; other devices with
    /// priority 0 and an unknown availability.
    pub fn set_cards(&mut self, cards: cards::SharedCards) {
        self.cards = CardsHandle(Some(cards));
    }

    /// Installs what builds the config's named chains (at start, and on SIGHUP).
    pub fn set_chain_maker(&mut self, maker: std::sync::Arc<dyn ChainMaker>) {
        self.chains = Chains(Some(maker));
    }

    /// The chain and volume the rules give a stream whose properties `prop` gives.
    pub fn stream_extras(&self, prop: &dyn Fn(&str) -> Option<String>) -> StreamExtras {
        StreamExtras {
            chain: self
                .rules
                .chain(prop)
                .map(|n| (n.to_string(), self.chains.0.clone())),
            volume: self.rules.volume(prop),
        }
    }

    /// Rules' chains the config does not have (a typo, or an entry taken out).
    pub fn missing_chains(&self) -> Vec<String> {
        self.rules
            .chains()
            .into_iter()
            .filter(|n| !self.chains.0.as_ref().is_some_and(|m| m.has(n)))
            .map(str::to_string)
            .collect()
    }

    /// The rules in force.
    pub fn rules(&self) -> &rules::Rules {
        &self.rules
    }

    /// Replaces the rules (at start, and when the file is read again).
    pub fn set_rules(&mut self, rules: rules::Rules) {
        self.rules = rules;
    }

    /// The best node of `kind` by [`Rank`].
    fn pick(&self, preferred: Option<&str>, kind: &str, nodes: &[NodeView]) -> Option<String> {
        let reg = self
            .cards
            .0
            .as_ref()
            .map(|c| c.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kind == kind)
            .max_by_key(|(i, n)| {
                let (priority, available) = reg
                    .as_ref()
                    .and_then(|r| r.node_rank(&n.name))
                    .unwrap_or((0, cards::Availability::Unknown));
                Rank {
                    plugged: available != cards::Availability::No,
                    configured: preferred == Some(n.name.as_str()),
                    priority,
                    earlier: std::cmp::Reverse(*i),
                }
            })
            .map(|(_, n)| n.name.clone())
    }

    /// The sink new playback streams go to when they name none.
    pub fn default_sink(&self, nodes: &[NodeView]) -> Option<String> {
        self.pick(self.config.default_sink.as_deref(), "sink", nodes)
    }

    /// The source new record streams read when they name none.
    pub fn default_source(&self, nodes: &[NodeView]) -> Option<String> {
        self.pick(self.config.default_source.as_deref(), "source", nodes)
    }

    /// Changes the default sink (takes effect for new streams).
    pub fn set_default_sink(&mut self, name: Option<String>) {
        self.config.default_sink = name;
    }

    /// Changes the default source.
    pub fn set_default_source(&mut self, name: Option<String>) {
        self.config.default_source = name;
    }

    /// Where a new playback stream goes: the node it asked for, else the default sink.
    pub fn playback_target(&self, requested: Option<&str>, nodes: &[NodeView]) -> Option<String> {
        match requested {
            Some(r) => Some(r.to_string()),
            None => self.default_sink(nodes),
        }
    }

    /// What a new record stream reads: the node it asked for (a sink means its
    /// monitor), else the default source.
    pub fn record_target(&self, requested: Option<&str>, nodes: &[NodeView]) -> Option<String> {
        match requested {
            Some(r) => Some(r.to_string()),
            None => self.default_source(nodes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<NodeView> {
        [
            ("a-sink", "sink"),
            ("b-sink", "sink"),
            ("a-source", "source"),
        ]
        .iter()
        .map(|(n, k)| NodeView {
            name: n.to_string(),
            kind: k.to_string(),
        })
        .collect()
    }

    #[test]
    fn first_sink_is_default_unless_configured() {
        let p = Policy::default();
        assert_eq!(p.default_sink(&nodes()).as_deref(), Some("a-sink"));
        let p = Policy::new(PolicyConfig {
            default_sink: Some("b-sink".into()),
            ..PolicyConfig::default()
        });
        assert_eq!(p.default_sink(&nodes()).as_deref(), Some("b-sink"));
    }

    #[test]
    fn missing_preferred_device_falls_back() {
        let p = Policy::new(PolicyConfig {
            default_sink: Some("gone".into()),
            default_source: Some("gone".into()),
            ..PolicyConfig::default()
        });
        assert_eq!(p.default_sink(&nodes()).as_deref(), Some("a-sink"));
        assert_eq!(p.default_source(&nodes()).as_deref(), Some("a-source"));
    }

    /// A card with one sink, `node`, on a port of `priority` and `available`.
    fn one_sink_card(
        index: u32,
        node: &str,
        priority: u32,
        available: cards::Availability,
    ) -> cards::Card {
        use cards::{Card, CardNode, CardPort, CardProfile, PortDirection, PortType};
        let profile = "output:stereo".to_string();
        Card {
            index,
            name: format!("alsa_card.C{index}"),
            driver: "quaver-alsa".into(),
            props: Vec::new(),
            profiles: vec![CardProfile {
                name: profile.clone(),
                description: String::new(),
                priority: 1,
                sinks: 1,
                sources: 0,
                available: true,
            }],
            ports: vec![CardPort {
                name: "out".into(),
                description: "Out".into(),
                priority,
                direction: PortDirection::Output,
                available,
                port_type: PortType::Analog,
                profiles: vec![profile.clone()],
            }],
            active: profile,
            pending: None,
            nodes: vec![CardNode {
                node: node.into(),
                direction: PortDirection::Output,
                port: "out".into(),
            }],
        }
    }

    #[test]
    fn an_unplugged_device_loses_then_the_configured_one_wins_then_priority() {
        use cards::Availability::{No, Unknown, Yes};
        let views: Vec<NodeView> = ["null-sink", "hdmi-sink", "speaker-sink"]
            .iter()
            .map(|n| NodeView {
                name: n.to_string(),
                kind: "sink".into(),
            })
            .collect();
        let reg = cards::Cards::new(cards::ProfileStore::memory()).shared();
        let put = |card| reg.lock().unwrap().add(card);
        put(one_sink_card(1, "hdmi-sink", 9900, No));
        put(one_sink_card(2, "speaker-sink", 9000, Unknown));
        // The policy's default sink over `views` is `want`, for the reason `why`.
        let expect = |p: &Policy, want: &str, why: &str| {
            assert_eq!(p.default_sink(&views).as_deref(), Some(want), "{why}")
        };
        let mut p = Policy::default();
        expect(&p, "null-sink", "no registry: the first");
        p.set_cards(reg.clone());
        expect(
            &p,
            "speaker-sink",
            "the unplugged HDMI loses despite its priority; the null sink has none",
        );
        put(one_sink_card(1, "hdmi-sink", 9900, Yes));
        expect(&p, "hdmi-sink", "plugged in");
        p.set_default_sink(Some("null-sink".into()));
        expect(&p, "null-sink", "configured");
        p.set_default_sink(Some("hdmi-sink".into()));
        put(one_sink_card(1, "hdmi-sink", 9900, No));
        expect(&p, "speaker-sink", "configured but unplugged");
        put(one_sink_card(2, "speaker-sink", 9000, No));
        expect(
            &p,
            "null-sink",
            "every card unplugged: the device that cannot tell",
        );
        reg.lock().unwrap().remove(2);
        put(one_sink_card(1, "hdmi-sink", 9900, No));
        let only: Vec<NodeView> = views
            .iter()
            .filter(|v| v.name == "hdmi-sink")
            .cloned()
            .collect();
        assert_eq!(
            p.default_sink(&only).as_deref(),
            Some("hdmi-sink"),
            "an unplugged sink is still the default when it is the only one"
        );
    }

    #[test]
    fn explicit_target_wins() {
        let p = Policy::default();
        assert_eq!(
            p.playback_target(Some("b-sink"), &nodes()).as_deref(),
            Some("b-sink")
        );
        assert_eq!(p.record_target(None, &nodes()).as_deref(), Some("a-source"));
    }
}
