//! Hardware volume for ALSA devices: opens the mixer of each opened card and attaches
//! the element a desktop server would use to the device's sink and source
//! (docs/alsa/mixer.md). Anything that goes wrong leaves that device on software volume
//! and says why. The same watch thread reports the card's jacks (docs/alsa/jacks.md):
//! they set the availability of the card's ports, which switches sinks and sources
//! between ports; the mixer follows the active port (docs/alsa/ports.md).

use quaver_devices::alsa::cards::{CardProbe, Mapping, Profile};
use quaver_devices::alsa::jack::{Jack, port_of_jack};
use quaver_devices::alsa::mixer::{Mixer, NoElement, card_of_pcm};
use quaver_devices::alsa::params::Direction;
use quaver_devices::alsa::ports::{analog_ports, output_switches};
use quaver_devices::alsa::ucm::Ucm;
use quaver_devices::alsa::ucm::profiles::UcmPort;
use quaver_devices::spec::{DeviceDefaults, DeviceSpec, parse_spec};
use quaver_engine::Engine;
use quaver_policy::cards::ports::FoundPort;
use quaver_policy::cards::{Availability, PortDirection, SharedCards};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A card with a UCM configuration, in its active profile: its manager and the ports
/// (UCM devices, best first) of each of its sinks and sources.
pub(crate) struct UcmCard {
    /// The card's use case manager. Weak: the card's probe owns it, and the threads
    /// that follow ports (which outlive a card that goes) must not keep its control
    /// device open, which would block the card's removal.
    pub ucm: Weak<Ucm>,
    /// How logs name the card.
    pub label: String,
    /// One per sink and source of the profile.
    pub groups: Vec<UcmGroup>,
}

/// The UCM devices one sink or source offers as ports: those on its PCM.
pub(crate) struct UcmGroup {
    /// A source's (true) or a sink's.
    pub capture: bool,
    /// The PCM it opens (`hw:ID,DEV`, as the card's devices are opened).
    pub pcm: String,
    /// Its ports, best first.
    pub ports: Vec<UcmPort>,
}

impl UcmCard {
    /// The UCM side of `probe` in `profile`; `None` for a card without UCM.
    pub(crate) fn of(probe: &CardProbe, profile: Option<&Profile>) -> Option<Arc<UcmCard>> {
        let ucm = probe.ucm.as_ref()?;
        let groups = profile
            .into_iter()
            .flat_map(|p| p.mappings())
            .map(|m: &Mapping| UcmGroup {
                capture: m.dir == Direction::Capture,
                pcm: format!("hw:{},{}", probe.id, m.device),
                ports: m.ucm_ports.clone(),
            })
            .collect();
        Some(Arc::new(UcmCard {
            ucm: Arc::downgrade(ucm),
            label: ucm.label.clone(),
            groups,
        }))
    }

    /// Every port of every sink and source.
    fn ports(&self) -> impl Iterator<Item = &UcmPort> {
        self.groups.iter().flat_map(|g| &g.ports)
    }
}

/// What follows a card's active ports: its mixer, and its UCM devices if it has UCM.
type PortFollower = (Mixer, Option<Arc<UcmCard>>);

/// Attaches hardware volumes to the devices opened from `opened` (engine device index,
/// spec as configured). Returns the mixers, which the caller keeps for as long as it
/// serves (their watch threads end when they are dropped). `ucm`: the devices are a
/// UCM card's (one card), whose configuration names the volume elements and jacks.
pub(crate) fn attach(
    engine: &Engine,
    opened: &[(usize, String)],
    defaults: &DeviceDefaults,
    cards: &SharedCards,
    ucm: Option<Arc<UcmCard>>,
) -> Vec<Mixer> {
    let mut mixers = Vec::new();
    // The mixer of each card with ports to follow, by card index.
    let mut by_card: BTreeMap<u32, PortFollower> = BTreeMap::new();
    for (index, spec) in opened {
        let Ok(DeviceSpec::Alsa(cfg)) = parse_spec(spec, defaults) else {
            continue;
        };
        let Some(card) = card_of_pcm(&cfg.pcm) else {
            tracing::info!(
                "{spec}: PCM '{}' names no card; software volume only",
                cfg.pcm
            );
            continue;
        };
        let mixer = match Mixer::open(&card) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("{spec}: no mixer ({e}); software volume only");
                continue;
            }
        };
        match card_index(cards, &card) {
            Some(i) if !by_card.contains_key(&i) => {
                match &ucm {
                    Some(u) => follow_ucm_jacks(&mixer, &card, i, cards, u),
                    None => follow_ports(&mixer, &card, i, cards),
                }
                by_card.insert(i, (mixer.clone(), ucm.clone()));
            }
            Some(_) => {}
            None => watch_jacks(&mixer, &card),
        }
        for (capture, wanted) in [(false, cfg.playback), (true, cfg.capture)] {
            if !wanted {
                continue;
            }
            let side = if capture { "source" } else { "sink" };
            let picked = match &ucm {
                Some(u) => match ucm_element(u, capture, &cfg.pcm) {
                    Some(name) => mixer.element(&name, capture),
                    None => {
                        tracing::info!(
                            "{spec}: {}: the UCM configuration names no {side} volume element; software volume only",
                            u.label
                        );
                        continue;
                    }
                },
                None => mixer.pick(capture),
            };
            if let (Some(u), Err(NoElement::NoneFound)) = (&ucm, &picked) {
                tracing::warn!(
                    "{spec}: {}: the UCM {side} volume element '{}' is not a {side} volume of card {card}; software volume only",
                    u.label,
                    ucm_element(u, capture, &cfg.pcm).unwrap_or_default()
                );
                continue;
            }
            match picked {
                Ok(element) => {
                    let info = element.info_summary();
                    match engine.attach_hardware_volume(*index, capture, Arc::new(element)) {
                        Ok(_) => tracing::info!("{spec}: {side} volume on {info}"),
                        Err(e) => tracing::warn!("{spec}: {side} volume on {info}: {e}"),
                    }
                }
                Err(NoElement::NoDb { element }) => tracing::warn!(
                    "{spec}: card {card}, element '{element}' has no dB information; {side} volume in software only"
                ),
                Err(NoElement::NoneFound) => tracing::info!(
                    "{spec}: card {card} has no {side} volume element (among {:?}); software volume only",
                    mixer.element_names()
                ),
            }
        }
        mixers.push(mixer);
    }
    follow_active_ports(cards, by_card);
    mixers
}

/// The registry index of the card a mixer calls `card` ("hw:Dummy", "hw:1").
fn card_index(cards: &SharedCards, card: &str) -> Option<u32> {
    let id = card.strip_prefix("hw:")?;
    let reg = cards.lock().unwrap_or_else(PoisonError::into_inner);
    reg.list()
        .iter()
        .find(|c| {
            c.props
                .iter()
                .any(|(k, v)| (k == "alsa.id" || k == "alsa.card") && v == id)
        })
        .map(|c| c.index)
}

/// Sets the card's analog ports from its elements and `jacks` (switching its sinks and
/// sources as their availability says).
fn refresh_ports(
    cards: &SharedCards,
    label: &str,
    index: u32,
    elements: &[String],
    jacks: &[Jack],
) {
    for (output, direction) in [(true, PortDirection::Output), (false, PortDirection::Input)] {
        let found: Vec<FoundPort> = analog_ports(elements, jacks, output)
            .into_iter()
            .map(|p| FoundPort {
                name: p.name.to_string(),
                description: p.description.to_string(),
                priority: p.priority,
                available: match p.plugged {
                    None => Availability::Unknown,
                    Some(true) => Availability::Yes,
                    Some(false) => Availability::No,
                },
            })
            .collect();
        let change = cards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set_analog_ports(index, direction, &found);
        for (node, port) in change.iter().flat_map(|c| &c.switched) {
            tracing::info!("card {label}: {node} switched to port {port}");
        }
    }
}

/// Gives the card its ports now and follows its jacks.
fn follow_ports(mixer: &Mixer, label: &str, index: u32, cards: &SharedCards) {
    let elements = mixer.element_names();
    let jacks = match mixer.jacks() {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!("card {label}: no jack detection ({e}); port availability unknown");
            Vec::new()
        }
    };
    for j in &jacks {
        log_jack(label, j);
    }
    refresh_ports(cards, label, index, &elements, &jacks);
    // The ports are known now: a port chosen by hand for this card and profile (in an
    // earlier run too: card-profiles.toml) comes back.
    let settled = cards
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .settle(index);
    for (node, port) in settled.iter().flat_map(|c| &c.switched) {
        tracing::info!("card {label}: {node} on port {port} (chosen earlier)");
    }
    let known = Mutex::new(jacks);
    let (label, cards) = (label.to_string(), cards.clone());
    mixer.watch_jacks(Box::new(move |j| {
        log_jack(&label, &j);
        let mut known = known.lock().unwrap_or_else(PoisonError::into_inner);
        known.retain(|k| (k.name.as_str(), k.index) != (j.name.as_str(), j.index));
        known.push(j);
        refresh_ports(&cards, &label, index, &elements, &known);
    }));
}

/// The volume element the UCM card's sink (or source) on `pcm` uses: that of its best
/// port that names one.
fn ucm_element(u: &UcmCard, capture: bool, pcm: &str) -> Option<String> {
    let g = u
        .groups
        .iter()
        .find(|g| g.capture == capture && g.pcm == pcm)?;
    g.ports.iter().find_map(|p| p.element.clone())
}

/// The availability of each UCM port with a jack, from the jacks as they are now
/// (`Unknown` while its jack control does not exist).
fn ucm_availability(u: &UcmCard, jacks: &[Jack]) -> Vec<(String, Availability)> {
    u.ports()
        .filter_map(|p| {
            let jack = p.jack.as_ref()?;
            let mut state = Availability::Unknown;
            for j in jacks.iter().filter(|j| !j.removed && &j.name == jack) {
                if j.plugged {
                    state = Availability::Yes;
                } else if state == Availability::Unknown {
                    state = Availability::No;
                }
            }
            Some((p.name.clone(), state))
        })
        .collect()
}

/// Sets the availability of a UCM card's ports from `jacks` (switching its sinks and
/// sources as their availability says).
fn refresh_ucm_ports(cards: &SharedCards, label: &str, index: u32, u: &UcmCard, jacks: &[Jack]) {
    let change = cards
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .set_availability(index, &ucm_availability(u, jacks));
    for (node, port) in change.iter().flat_map(|c| &c.switched) {
        tracing::info!("card {label}: {node} switched to port {port}");
    }
}

/// A UCM card's ports: availability from the jack controls its devices name, now and
/// on every jack event.
fn follow_ucm_jacks(mixer: &Mixer, label: &str, index: u32, cards: &SharedCards, u: &Arc<UcmCard>) {
    let jacks = match mixer.jacks() {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!("card {label}: no jack detection ({e}); port availability unknown");
            Vec::new()
        }
    };
    for j in &jacks {
        log_ucm_jack(label, j, u);
    }
    refresh_ucm_ports(cards, label, index, u, &jacks);
    let known = Mutex::new(jacks);
    let (label, cards, u) = (label.to_string(), cards.clone(), u.clone());
    mixer.watch_jacks(Box::new(move |j| {
        log_ucm_jack(&label, &j, &u);
        let mut known = known.lock().unwrap_or_else(PoisonError::into_inner);
        known.retain(|k| (k.name.as_str(), k.index) != (j.name.as_str(), j.index));
        known.push(j);
        refresh_ucm_ports(&cards, &label, index, &u, &known);
    }));
}

/// Logs a jack of a UCM card with the ports whose `JackControl` it is.
fn log_ucm_jack(card: &str, j: &Jack, u: &UcmCard) {
    let ports: Vec<&str> = u
        .ports()
        .filter(|p| p.jack.as_deref() == Some(j.name.as_str()))
        .map(|p| p.name.as_str())
        .collect();
    let state = match (j.removed, j.plugged) {
        (true, _) => "removed",
        (false, true) => "plugged",
        (false, false) => "unplugged",
    };
    tracing::info!(
        "card {card}: jack '{}' {state} (UCM ports {ports:?})",
        j.name
    );
}

/// Enables the UCM device of `port` (disabling the other devices of its direction),
/// when `port` is one of the card's UCM ports.
fn apply_ucm_port(u: &UcmCard, node: &str, port: &str) {
    for ports in u.groups.iter().map(|g| &g.ports) {
        let Some(p) = ports.iter().find(|p| p.name == port) else {
            continue;
        };
        let devices: Vec<String> = ports.iter().map(|p| p.device.clone()).collect();
        let Some(ucm) = u.ucm.upgrade() else {
            return;
        };
        match ucm.enable_device(&p.device, &devices) {
            Ok(true) => tracing::info!(
                "{}: port {port} of {node}: UCM device '{}' enabled",
                u.label,
                p.device
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!("port {port} of {node}: {e}"),
        }
    }
}

/// Sets the card's playback switches for the active port of `node` (headphones mute
/// the speakers and the reverse); elements the card lacks are skipped.
fn apply_port(mixer: &Mixer, node: &str, port: &str) {
    let (on, off) = output_switches(port);
    for (names, state) in [(on, true), (off, false)] {
        for name in names {
            match mixer.set_playback_switch(name, state) {
                Ok(true) => tracing::info!(
                    "card {}: port {port} of {node}: '{name}' switched {}",
                    mixer.card(),
                    if state { "on" } else { "off" }
                ),
                Ok(false) => {}
                Err(e) => tracing::warn!("card {}: port {port} of {node}: {e}", mixer.card()),
            }
        }
    }
}

/// Makes each card's mixer follow its sinks' active ports, now and on every switch
/// (jack or `pactl set-sink-port`), on a thread of its own.
fn follow_active_ports(cards: &SharedCards, mixers: BTreeMap<u32, PortFollower>) {
    if mixers.is_empty() {
        return;
    }
    let (rx, now) = {
        let mut reg = cards.lock().unwrap_or_else(PoisonError::into_inner);
        let now: Vec<(u32, String, String)> = reg
            .list()
            .iter()
            .flat_map(|c| {
                c.nodes
                    .iter()
                    .map(|n| (c.index, n.node.clone(), n.port.clone()))
            })
            .collect();
        (reg.watch(), now)
    };
    let apply = |(m, u): &PortFollower, node: &str, port: &str| match u {
        Some(u) => apply_ucm_port(u, node, port),
        None => apply_port(m, node, port),
    };
    for (card, node, port) in now {
        if let Some(f) = mixers.get(&card) {
            apply(f, &node, &port);
        }
    }
    let spawned = std::thread::Builder::new()
        .name("card ports".into())
        .spawn(move || {
            for change in rx {
                let Some(f) = mixers.get(&change.card) else {
                    continue;
                };
                for (node, port) in &change.switched {
                    apply(f, node, port);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("card ports: no thread ({e}); the mixer will not follow port switches");
    }
}

fn log_jack(card: &str, j: &Jack) {
    let port = port_of_jack(&j.name).map_or("no known port", |p| p.0);
    let state = match (j.removed, j.plugged) {
        (true, _) => "removed",
        (false, true) => "plugged",
        (false, false) => "unplugged",
    };
    tracing::info!(
        "card {card}: jack '{}' {state} ({port}: {})",
        j.name,
        if j.plugged {
            "available"
        } else {
            "not available"
        }
    );
}

/// Logs the card's jacks now and whenever one changes.
fn watch_jacks(mixer: &Mixer, card: &str) {
    match mixer.jacks() {
        Ok(jacks) => {
            for j in &jacks {
                log_jack(card, j);
            }
            let card = card.to_string();
            mixer.watch_jacks(Box::new(move |j| log_jack(&card, &j)));
        }
        Err(e) => tracing::warn!("card {card}: no jack detection ({e})"),
    }
}
