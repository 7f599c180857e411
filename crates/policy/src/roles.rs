//! Roles and ducking: while a stream of a higher role plays, streams of lower roles are
//! attenuated, and restored when it stops — PulseAudio's module-role-ducking, for every
//! front-end alike.
//!
//! A stream's role is its `media.role` ("phone", "event", "music", …). The configured
//! order ranks roles, highest first (`phone`, then `event`); roles not in it, and streams
//! without a role, rank below all of them. While any uncorked stream of a ranked role
//! plays, every stream ranked below the highest one playing is ducked by `duck_db` over
//! `ramp_ms`; streams of that role or above it are left alone. The attenuation is the
//! engine's per-node duck factor ([`quaver_engine::Engine::set_duck`]), on top of the
//! stream's volume: what clients see as its volume does not change. docs/policy/roles.md.

use quaver_engine::{Engine, GraphEvent, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Role settings (the `[policy.roles]` table of quaver.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolesConfig {
    /// Duck lower roles while a ranked one plays.
    pub ducking: bool,
    /// Roles that duck the ones below them, highest first.
    pub order: Vec<String>,
    /// How much a ducked stream is attenuated, dB (negative).
    pub duck_db: f32,
    /// How long the ramp down and back up takes, ms.
    pub ramp_ms: u32,
}

impl Default for RolesConfig {
    fn default() -> Self {
        // PulseAudio's role-ducking defaults: phone calls duck the rest by 20 dB.
        // Notification sounds duck music too, as Android's transient focus does.
        RolesConfig {
            ducking: true,
            order: vec!["phone".into(), "event".into()],
            duck_db: -20.0,
            ramp_ms: 50,
        }
    }
}

/// Why a role setting is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RolesError {
    /// `duck_db` is not a finite attenuation.
    #[error("policy.roles.duck_db = {0}: must be between -120 and 0 dB")]
    DuckDb(f32),
    /// `ramp_ms` is too long to be a ramp.
    #[error("policy.roles.ramp_ms = {0}: must be at most 10000 ms")]
    Ramp(u32),
    /// A role is empty or listed twice.
    #[error("policy.roles.order: role \"{0}\" is empty or listed twice")]
    Order(String),
}

impl RolesConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), RolesError> {
        if !(self.duck_db.is_finite() && (-120.0..=0.0).contains(&self.duck_db)) {
            return Err(RolesError::DuckDb(self.duck_db));
        }
        if self.ramp_ms > 10_000 {
            return Err(RolesError::Ramp(self.ramp_ms));
        }
        for (i, r) in self.order.iter().enumerate() {
            if r.is_empty() || self.order[..i].contains(r) {
                return Err(RolesError::Order(r.clone()));
            }
        }
        Ok(())
    }

    /// The rank of `role`: 0 is the highest; `None` for roles outside the order.
    fn rank(&self, role: Option<&str>) -> Option<usize> {
        let role = role?;
        self.order.iter().position(|r| r == role)
    }
}

/// One stream the policy ducks or not.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    rank: Option<usize>,
    playing: bool,
    ducked: bool,
}

/// Which streams are ducked. Front-ends report their streams' roles and corking; the
/// ducking applies to the engine at once.
pub struct Ducking {
    cfg: RolesConfig,
    engine: Engine,
    streams: Mutex<HashMap<NodeId, Tracked>>,
}

/// The ducking shared by the front-ends.
pub type SharedDucking = Arc<Ducking>;

impl Ducking {
    /// Ducking by `cfg` on `engine`.
    pub fn new(cfg: RolesConfig, engine: Engine) -> SharedDucking {
        Arc::new(Ducking {
            cfg,
            engine,
            streams: Mutex::new(HashMap::new()),
        })
    }

    /// A playback stream appeared with this `media.role`, corked or not.
    pub fn add(&self, node: NodeId, role: Option<&str>, corked: bool) {
        let t = Tracked {
            rank: self.cfg.rank(role),
            playing: !corked,
            ducked: false,
        };
        self.update(|s| {
            s.insert(node, t);
        });
    }

    /// A stream was corked or uncorked.
    pub fn set_playing(&self, node: NodeId, playing: bool) {
        self.update(|s| {
            if let Some(t) = s.get_mut(&node) {
                t.playing = playing;
            }
        });
    }

    /// Starts the thread that forgets a stream once its node leaves the engine, whoever
    /// removed it (a front-end, a client that died, a device that went away): no
    /// front-end has to remember to. Woken only by graph events.
    pub fn watch(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let events = self.engine.subscribe();
        let me = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("quaver-roles".into())
            .spawn(move || {
                while let Ok(ev) = events.recv() {
                    if let GraphEvent::NodeRemoved(node) = ev {
                        let Some(d) = me.upgrade() else { break };
                        d.remove(node);
                    }
                }
            })
    }

    /// A stream is gone.
    pub fn remove(&self, node: NodeId) {
        self.update(|s| {
            s.remove(&node);
        });
    }

    /// Whether `node` is ducked now (for status and tests).
    pub fn is_ducked(&self, node: NodeId) -> bool {
        let s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        s.get(&node).is_some_and(|t| t.ducked)
    }

    fn update(&self, change: impl FnOnce(&mut HashMap<NodeId, Tracked>)) {
        let mut s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut s);
        if !self.cfg.ducking {
            return;
        }
        let top = s
            .values()
            .filter(|t| t.playing)
            .filter_map(|t| t.rank)
            .min();
        let factor = 10f32.powf(self.cfg.duck_db / 20.0);
        let ramp = (self.engine.rate() as u64 * self.cfg.ramp_ms as u64 / 1000) as usize;
        for (&node, t) in s.iter_mut() {
            // Unranked streams rank below every ranked one.
            let duck = top.is_some_and(|top| t.rank.is_none_or(|r| r > top));
            if duck == t.ducked {
                continue;
            }
            match self
                .engine
                .set_duck(node, if duck { factor } else { 1.0 }, ramp)
            {
                Ok(()) => {
                    t.ducked = duck;
                    tracing::info!(
                        "roles: stream {node} {} ({} dB)",
                        if duck { "ducked" } else { "restored" },
                        if duck { self.cfg.duck_db } else { 0.0 }
                    );
                }
                // Gone from the engine before its front-end told us: forget it below.
                Err(e) => tracing::debug!("roles: stream {node}: {e}"),
            }
        }
    }
}

impl std::fmt::Debug for Ducking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ducking").field("cfg", &self.cfg).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_the_order_and_unknown_roles_rank_last() {
        let c = RolesConfig::default();
        assert_eq!(c.rank(Some("phone")), Some(0));
        assert_eq!(c.rank(Some("event")), Some(1));
        assert_eq!(c.rank(Some("music")), None);
        assert_eq!(c.rank(None), None);
    }

    #[test]
    fn bad_settings_are_refused_with_the_key() {
        let bad = |f: fn(&mut RolesConfig)| {
            let mut c = RolesConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(bad(|c| c.duck_db = 6.0).contains("duck_db = 6"));
        assert!(bad(|c| c.duck_db = f32::NAN).contains("duck_db"));
        assert!(bad(|c| c.ramp_ms = 60_000).contains("ramp_ms"));
        assert!(bad(|c| c.order.push("phone".into())).contains("\"phone\""));
        assert!(RolesConfig::default().validate().is_ok());
    }
}
