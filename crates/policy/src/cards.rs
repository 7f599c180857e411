//! Sound cards as the front-ends present them: each card's profiles, ports, active
//! profile and the sinks and sources it opened, and the profile chosen per card,
//! remembered across restarts.
//!
//! The daemon discovers cards (through `quaver-devices`) and fills this registry; the
//! PulseAudio front-end presents it (`pactl list cards`, `set-card-profile`) without
//! knowing any device type. Plain data only: names, numbers, strings.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

pub mod ports;

/// Whether a port is plugged in, as far as the card can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Availability {
    /// The card cannot tell (no jack detection).
    #[default]
    Unknown,
    /// Unplugged.
    No,
    /// Plugged in.
    Yes,
}

/// Which way a port carries audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortDirection {
    /// To the world: a sink's port.
    Output,
    /// From the world: a source's port.
    Input,
}

/// The connector behind a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortType {
    /// Analog line, speaker, headphones or microphone.
    Analog,
    /// HDMI or DisplayPort.
    Hdmi,
    /// S/PDIF.
    Spdif,
}

/// One profile of a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardProfile {
    /// "output:analog-stereo+input:analog-stereo", "off", …
    pub name: String,
    /// "Analog Stereo Output + Analog Stereo Input", …
    pub description: String,
    /// Higher is preferred.
    pub priority: u32,
    /// Sinks it opens.
    pub sinks: u32,
    /// Sources it opens.
    pub sources: u32,
    /// Whether it can be used now.
    pub available: bool,
}

/// One port of a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardPort {
    /// "analog-output", "hdmi-output-0", …
    pub name: String,
    /// "Analog Output", "HDMI / DisplayPort", …
    pub description: String,
    /// Higher is preferred.
    pub priority: u32,
    /// Output (sink) or input (source).
    pub direction: PortDirection,
    /// Plugged in or not, or unknown.
    pub available: Availability,
    /// The connector.
    pub port_type: PortType,
    /// The profiles that offer it.
    pub profiles: Vec<String>,
}

/// A sink or source a card opened, and the port it plays through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardNode {
    /// The graph node's name.
    pub node: String,
    /// Output for a sink, input for a source.
    pub direction: PortDirection,
    /// The card port it uses.
    pub port: String,
}

/// A sound card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// Its index (the kernel's card number for ALSA cards).
    pub index: u32,
    /// Its name: `alsa_card.ID`.
    pub name: String,
    /// The backend module driving it, e.g. "quaver-alsa".
    pub driver: String,
    /// Properties (`alsa.card`, `device.description`, …), in order.
    pub props: Vec<(String, String)>,
    /// Every profile, best first.
    pub profiles: Vec<CardProfile>,
    /// Every port.
    pub ports: Vec<CardPort>,
    /// The profile whose devices are open.
    pub active: String,
    /// A profile chosen at run time that is not open yet (applied at the next start).
    pub pending: Option<String>,
    /// The sinks and sources it opened.
    pub nodes: Vec<CardNode>,
}

/// Why a card or profile request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// No card has that index or name.
    #[error("no card {0}")]
    NoCard(String),
    /// The card has no profile of that name.
    #[error("card {card} has no profile '{profile}'")]
    NoProfile {
        /// The card's name.
        card: String,
        /// The profile asked for.
        profile: String,
    },
    /// The profile exists but cannot be used now.
    #[error("profile '{profile}' of card {card} is not available")]
    Unavailable {
        /// The card's name.
        card: String,
        /// The profile asked for.
        profile: String,
    },
}

/// What choosing a profile did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// It is the active profile already (any pending choice is dropped).
    Active,
    /// Remembered for the card; its devices open at the next start.
    Pending,
}

/// A card that came or went, for the front-ends' subscribers (a profile switch is
/// announced by the front-end that asked for it, a port change by [`PortChange`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardChange {
    /// The card with this index appeared.
    New(u32),
    /// It went away.
    Removed(u32),
}

/// Told of every [`CardChange`]; called without the registry's lock held.
pub type CardListener = Arc<dyn Fn(CardChange) + Send + Sync>;

/// Switches a card's open devices to another profile (the daemon does: it knows the
/// devices). Called without the registry's lock held; it updates the registry itself.
pub trait ProfileSwitch: Send + Sync {
    /// Closes card `card`'s devices and opens those of `profile`; the error says what
    /// failed, with the card's name.
    fn switch(&self, card: u32, profile: &str) -> Result<(), String>;
}

/// What changed on a card's ports, sent to every [`Cards::watch`] receiver
/// (`ports.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortChange {
    /// The card's index (a card `change` event).
    pub card: u32,
    /// Its sinks and sources whose ports changed (a sink or source `change` event each).
    pub nodes: Vec<String>,
    /// The sinks and sources whose active port changed, with their new port.
    pub switched: Vec<(String, String)>,
}

/// Every card, and the remembered profile per card.
#[derive(Default)]
pub struct Cards {
    cards: Vec<Card>,
    store: ProfileStore,
    listeners: Vec<CardListener>,
    switcher: Option<Arc<dyn ProfileSwitch>>,
    /// Receivers of port changes (ports.rs).
    watchers: Vec<mpsc::Sender<PortChange>>,
}

impl std::fmt::Debug for Cards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cards")
            .field("cards", &self.cards)
            .field("store", &self.store)
            .field("listeners", &self.listeners.len())
            .field("switcher", &self.switcher.is_some())
            .finish()
    }
}

/// The registry, shared by the daemon and the front-ends.
pub type SharedCards = Arc<Mutex<Cards>>;

impl Cards {
    /// No cards yet; remembered profiles from `store`.
    pub fn new(store: ProfileStore) -> Self {
        Cards {
            cards: Vec::new(),
            store,
            listeners: Vec::new(),
            switcher: None,
            watchers: Vec::new(),
        }
    }

    /// Adds a listener for cards coming, changing and going.
    pub fn listen(&mut self, listener: CardListener) {
        self.listeners.push(listener);
    }

    /// The listeners, to call after the lock is released.
    pub fn listeners(&self) -> Vec<CardListener> {
        self.listeners.clone()
    }

    /// Sets what switches a card's devices at run time.
    pub fn set_switcher(&mut self, switcher: Arc<dyn ProfileSwitch>) {
        self.switcher = Some(switcher);
    }

    /// What switches a card's devices, if anything does.
    pub fn switcher(&self) -> Option<Arc<dyn ProfileSwitch>> {
        self.switcher.clone()
    }

    /// Removes the card with `index`; returns it.
    pub fn remove(&mut self, index: u32) -> Option<Card> {
        let at = self.cards.iter().position(|c| c.index == index)?;
        Some(self.cards.remove(at))
    }

    /// Records that card `index` now runs `profile` with `nodes`, and remembers the
    /// choice when `remember` is set.
    pub fn set_active(&mut self, index: u32, profile: &str, nodes: Vec<CardNode>, remember: bool) {
        let Some(card) = self.cards.iter_mut().find(|c| c.index == index) else {
            return;
        };
        card.active = profile.to_string();
        card.pending = None;
        card.nodes = nodes;
        if remember {
            self.store.set(&card.name, profile);
        }
    }

    /// Checks `profile` against the card (by `index`, else `name`) without remembering
    /// it; returns the card's index.
    pub fn check(
        &self,
        index: Option<u32>,
        name: Option<&str>,
        profile: &str,
    ) -> Result<u32, CardError> {
        let card = self
            .cards
            .iter()
            .find(|c| Some(c.index) == index || Some(c.name.as_str()) == name)
            .ok_or_else(|| {
                CardError::NoCard(
                    name.map(str::to_string)
                        .or(index.map(|i| i.to_string()))
                        .unwrap_or_default(),
                )
            })?;
        let p = card
            .profiles
            .iter()
            .find(|p| p.name == profile)
            .ok_or_else(|| CardError::NoProfile {
                card: card.name.clone(),
                profile: profile.to_string(),
            })?;
        if !p.available {
            return Err(CardError::Unavailable {
                card: card.name.clone(),
                profile: profile.to_string(),
            });
        }
        Ok(card.index)
    }

    /// This registry, ready to share.
    pub fn shared(self) -> SharedCards {
        Arc::new(Mutex::new(self))
    }

    /// Adds (or replaces, by index) a card.
    pub fn add(&mut self, card: Card) {
        self.cards.retain(|c| c.index != card.index);
        self.cards.push(card);
        self.cards.sort_by_key(|c| c.index);
    }

    /// Every card, by index.
    pub fn list(&self) -> &[Card] {
        &self.cards
    }

    /// The card with `index`, else the one called `name`.
    pub fn find(&self, index: Option<u32>, name: Option<&str>) -> Option<&Card> {
        self.cards
            .iter()
            .find(|c| Some(c.index) == index || Some(c.name.as_str()) == name)
    }

    /// The card that opened the node `node` (a sink or source), and the node's entry.
    pub fn node(&self, node: &str) -> Option<(&Card, &CardNode)> {
        self.cards
            .iter()
            .find_map(|c| c.nodes.iter().find(|n| n.node == node).map(|n| (c, n)))
    }

    /// How the node `node` competes for default: its active port's priority and
    /// availability (`None`: no card opened it; a port the card does not list: 0,
    /// unknown).
    pub fn node_rank(&self, node: &str) -> Option<(u32, Availability)> {
        let (card, n) = self.node(node)?;
        Some(
            card.ports
                .iter()
                .find(|p| p.name == n.port && p.direction == n.direction)
                .map_or((0, Availability::Unknown), |p| (p.priority, p.available)),
        )
    }

    /// The profile remembered for the card called `card_name`.
    pub fn remembered(&self, card_name: &str) -> Option<&str> {
        self.store.get(card_name)
    }

    /// Checks `profile` against the card (by `index`, else `name`) and remembers it;
    /// returns the card's index and what the choice did. For a registry without a
    /// [`ProfileSwitch`]: the choice applies at the next start.
    pub fn choose(
        &mut self,
        index: Option<u32>,
        name: Option<&str>,
        profile: &str,
    ) -> Result<(u32, Choice), CardError> {
        let at = self.check(index, name, profile)?;
        let card = self
            .cards
            .iter_mut()
            .find(|c| c.index == at)
            .expect("checked above");
        self.store.set(&card.name, profile);
        if card.active == profile {
            card.pending = None;
            Ok((card.index, Choice::Active))
        } else {
            card.pending = Some(profile.to_string());
            Ok((card.index, Choice::Pending))
        }
    }
}

/// The profile chosen per card (`card name = "profile"`), in a small TOML file under
/// the state directory, rewritten (atomically) on every change.
#[derive(Debug, Default)]
pub struct ProfileStore {
    path: Option<PathBuf>,
    entries: BTreeMap<String, String>,
    ports: PortChoices,
}

/// Card name → profile name → sink or source → port.
type PortChoices = BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    #[serde(default)]
    profiles: BTreeMap<String, String>,
    /// Ports chosen by hand (`pactl set-sink-port`), per card and profile: a profile
    /// opens other sinks and sources, with other ports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    ports: PortChoices,
}

impl ProfileStore {
    /// Choices kept in memory only.
    pub fn memory() -> Self {
        ProfileStore::default()
    }

    /// Choices loaded from `path` (none if it does not exist; a file that does not parse
    /// is logged and set aside as `*.toml.bad`) and saved back there.
    pub fn open(path: &Path) -> Self {
        let file = match std::fs::read_to_string(path) {
            Ok(text) => match toml::from_str::<ProfileFile>(&text) {
                Ok(f) => f,
                Err(e) => {
                    let bad = path.with_extension("toml.bad");
                    tracing::warn!(
                        "card profiles: {} is not valid ({}); set aside as {}",
                        path.display(),
                        e.to_string().trim_end(),
                        bad.display()
                    );
                    let _ = std::fs::rename(path, &bad);
                    ProfileFile::default()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ProfileFile::default(),
            Err(e) => {
                tracing::warn!("card profiles: cannot read {}: {e}", path.display());
                ProfileFile::default()
            }
        };
        ProfileStore {
            path: Some(path.to_path_buf()),
            entries: file.profiles,
            ports: file.ports,
        }
    }

    /// The port chosen by hand for sink or source `node` of `card` under `profile`.
    pub fn port(&self, card: &str, profile: &str, node: &str) -> Option<&str> {
        let p = self.ports.get(card)?.get(profile)?.get(node)?;
        Some(p.as_str())
    }

    /// Remembers `port` for `node` of `card` under `profile` and saves the file.
    pub fn set_port(&mut self, card: &str, profile: &str, node: &str, port: &str) {
        if self.port(card, profile, node) == Some(port) {
            return;
        }
        self.ports
            .entry(card.to_string())
            .or_default()
            .entry(profile.to_string())
            .or_default()
            .insert(node.to_string(), port.to_string());
        self.save();
    }

    /// The profile remembered for `card`.
    pub fn get(&self, card: &str) -> Option<&str> {
        self.entries.get(card).map(String::as_str)
    }

    /// Remembers `profile` for `card` and saves the file (a failure is logged: the
    /// choice still holds for this run).
    pub fn set(&mut self, card: &str, profile: &str) {
        if self.get(card) == Some(profile) {
            return;
        }
        self.entries.insert(card.to_string(), profile.to_string());
        self.save();
    }

    /// Writes the file (atomically); a failure is logged: the choices still hold for
    /// this run.
    fn save(&self) {
        let Some(path) = &self.path else { return };
        let body = toml::to_string(&ProfileFile {
            profiles: self.entries.clone(),
            ports: self.ports.clone(),
        })
        .unwrap_or_default();
        let text = format!(
            "# quaverd's chosen profile per sound card (pactl set-card-profile) and port\n\
             # per card, profile and sink or source (pactl set-sink-port, set-source-port).\n\
             # Rewritten by quaverd; applied when the card is opened.\n{body}"
        );
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension("toml.tmp");
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!("card profiles: cannot save {}: {e}", path.display());
        }
    }
}

/// The default file: `$XDG_STATE_HOME/quaver/card-profiles.toml`, else
/// `$HOME/.local/state/quaver/card-profiles.toml`.
pub fn default_store_path() -> Option<PathBuf> {
    crate::restore::default_path().map(|p| p.with_file_name("card-profiles.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(index: u32) -> Card {
        let profile = |name: &str, available| CardProfile {
            name: name.into(),
            description: name.into(),
            priority: 1,
            sinks: 1,
            sources: 0,
            available,
        };
        Card {
            index,
            name: format!("alsa_card.C{index}"),
            driver: "quaver-alsa".into(),
            props: Vec::new(),
            profiles: vec![
                profile("output:analog-stereo", true),
                profile("output:hdmi-stereo", false),
                profile("off", true),
            ],
            ports: Vec::new(),
            active: "output:analog-stereo".into(),
            pending: None,
            nodes: vec![CardNode {
                node: format!("C{index}.analog-stereo-sink"),
                direction: PortDirection::Output,
                port: "analog-output".into(),
            }],
        }
    }

    #[test]
    fn choices_are_checked_remembered_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/card-profiles.toml");
        let mut cards = Cards::new(ProfileStore::open(&path));
        cards.add(card(3));
        cards.add(card(1));
        assert_eq!(cards.list()[0].index, 1);
        assert_eq!(
            cards.choose(Some(9), None, "off"),
            Err(CardError::NoCard("9".into()))
        );
        assert!(matches!(
            cards.choose(None, Some("alsa_card.C1"), "output:surround"),
            Err(CardError::NoProfile { .. })
        ));
        assert!(matches!(
            cards.choose(Some(1), None, "output:hdmi-stereo"),
            Err(CardError::Unavailable { .. })
        ));
        assert_eq!(
            cards.choose(None, Some("alsa_card.C1"), "off"),
            Ok((1, Choice::Pending))
        );
        assert_eq!(
            cards.find(Some(1), None).unwrap().pending.as_deref(),
            Some("off")
        );
        assert_eq!(
            cards.choose(Some(3), None, "output:analog-stereo"),
            Ok((3, Choice::Active))
        );
        let again = Cards::new(ProfileStore::open(&path));
        assert_eq!(again.remembered("alsa_card.C1"), Some("off"));
        assert_eq!(
            again.remembered("alsa_card.C3"),
            Some("output:analog-stereo")
        );
        let (c, n) = cards.node("C3.analog-stereo-sink").unwrap();
        assert_eq!((c.index, n.port.as_str()), (3, "analog-output"));
    }

    #[test]
    fn a_switched_card_is_active_at_once_remembered_and_removable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("card-profiles.toml");
        let mut cards = Cards::new(ProfileStore::open(&path));
        cards.add(card(1));
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        cards.listen(Arc::new(move |c| h.lock().unwrap().push(c)));
        assert_eq!(cards.check(None, Some("alsa_card.C1"), "off"), Ok(1));
        assert!(matches!(
            cards.check(Some(1), None, "output:hdmi-stereo"),
            Err(CardError::Unavailable { .. })
        ));
        // Checking remembers nothing; switching does.
        assert_eq!(cards.remembered("alsa_card.C1"), None);
        cards.set_active(1, "off", Vec::new(), true);
        let c = cards.find(Some(1), None).unwrap();
        assert_eq!((c.active.as_str(), c.pending.clone()), ("off", None));
        assert!(cards.node("C1.analog-stereo-sink").is_none());
        assert_eq!(
            Cards::new(ProfileStore::open(&path)).remembered("alsa_card.C1"),
            Some("off")
        );
        for l in cards.listeners() {
            l(CardChange::Removed(1));
        }
        assert_eq!(*heard.lock().unwrap(), [CardChange::Removed(1)]);
        assert_eq!(cards.remove(1).map(|c| c.index), Some(1));
        assert!(cards.list().is_empty());
        assert!(cards.remove(1).is_none());
    }

    #[test]
    fn a_broken_file_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("card-profiles.toml");
        std::fs::write(&path, "profiles = 3\n").unwrap();
        let store = ProfileStore::open(&path);
        assert_eq!(store.get("x"), None);
        assert!(path.with_extension("toml.bad").exists());
    }
}
