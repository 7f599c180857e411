//! Hardware volume for ALSA devices: opens the mixer of each opened card and attaches
//! the element a desktop server would use to the device's sink and source
//! (docs/alsa/mixer.md). Anything that goes wrong leaves that device on software volume
//! and says why. The same watch thread reports the card's jacks (docs/alsa/jacks.md):
//! they set the availability of the card's ports, which switches sinks and sources
//! between ports; the mixer follows the active port (docs/alsa/ports.md).

use quaver_devices::alsa::jack::{Jack, port_of_jack};
use quaver_devices::alsa::mixer::{Mixer, NoElement, card_of_pcm};
use quaver_devices::alsa::ports::{analog_ports, output_switches};
use quaver_devices::spec::{DeviceDefaults, DeviceSpec, parse_spec};
use quaver_engine::Engine;
use quaver_policy::cards::ports::FoundPort;
use quaver_policy::cards::{Availability, PortDirection, SharedCards};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Attaches hardware volumes to the devices opened from `opened` (engine device index,
/// spec as configured). Returns the mixers, which the caller keeps for as long as it
/// serves (their watch threads end when they are dropped).
pub(crate) fn attach(
    engine: &Engine,
    opened: &[(usize, String)],
    defaults: &DeviceDefaults,
    cards: &SharedCards,
) -> Vec<Mixer> {
    let mut mixers = Vec::new();
    // The mixer of each card with ports to follow, by card index.
    let mut by_card: BTreeMap<u32, Mixer> = BTreeMap::new();
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
                follow_ports(&mixer, &card, i, cards);
                by_card.insert(i, mixer.clone());
            }
            Some(_) => {}
            None => watch_jacks(&mixer, &card),
        }
        for (capture, wanted) in [(false, cfg.playback), (true, cfg.capture)] {
            if !wanted {
                continue;
            }
            let side = if capture { "source" } else { "sink" };
            match mixer.pick(capture) {
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
fn follow_active_ports(cards: &SharedCards, mixers: BTreeMap<u32, Mixer>) {
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
    for (card, node, port) in now {
        if let Some(m) = mixers.get(&card) {
            apply_port(m, &node, &port);
        }
    }
    let spawned = std::thread::Builder::new()
        .name("card ports".into())
        .spawn(move || {
            for change in rx {
                let Some(m) = mixers.get(&change.card) else {
                    continue;
                };
                for (node, port) in &change.switched {
                    apply_port(m, node, port);
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
