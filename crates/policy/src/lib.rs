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
//! - [`rules`]: the rule file: where streams go and their roles, by their properties.

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
    /// Preferred sink for new playback streams; the first sink when unset or absent.
    pub default_sink: Option<String>,
    /// Preferred source for new record streams; the first source when unset or absent.
    pub default_source: Option<String>,
    /// Roles and ducking (`[policy.roles]`).
    #[serde(default)]
    pub roles: roles::RolesConfig,
    /// The rule file; `$XDG_CONFIG_HOME/quaver/rules.toml` when unset and it exists.
    pub rules: Option<std::path::PathBuf>,
}

/// The routing policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    config: PolicyConfig,
    rules: rules::Rules,
}

impl Policy {
    /// A policy with the given settings.
    pub fn new(config: PolicyConfig) -> Self {
        Policy {
            config,
            rules: rules::Rules::none(),
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> &rules::Rules {
        &self.rules
    }

    /// Replaces the rules (at start, and when the file is read again).
    pub fn set_rules(&mut self, rules: rules::Rules) {
        self.rules = rules;
    }

    fn pick(preferred: Option<&str>, kind: &str, nodes: &[NodeView]) -> Option<String> {
        preferred
            .and_then(|p| nodes.iter().find(|n| n.name == p && n.kind == kind))
            .or_else(|| nodes.iter().find(|n| n.kind == kind))
            .map(|n| n.name.clone())
    }

    /// The sink new playback streams go to when they name none.
    pub fn default_sink(&self, nodes: &[NodeView]) -> Option<String> {
        Self::pick(self.config.default_sink.as_deref(), "sink", nodes)
    }

    /// The source new record streams read when they name none.
    pub fn default_source(&self, nodes: &[NodeView]) -> Option<String> {
        Self::pick(self.config.default_source.as_deref(), "source", nodes)
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
