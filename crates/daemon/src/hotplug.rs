//! Cards plugged in and unplugged while quaverd runs: one thread blocked on the kernel's
//! uevents (`quaver_devices::alsa::hotplug`, no periodic wakeups). A card that appears
//! is probed and opened the way discovery opens cards ([`LiveCards::card_added`]: its
//! remembered or default profile, a card record, its mixers), so its sink and source
//! show up in every front-end (and streams that remember it move there: stream
//! restore). A card that disappears is reported gone to the engine, which drops and
//! closes it at once; the rehome thread (`quaver_policy::rehome`) moves its streams to
//! the next sink and removes it. docs/alsa/hotplug.md.

use crate::live::{LiveCards, present};
use crate::reserve::Plugged;
use quaver_devices::alsa::cards::{self as alsa_cards, CardProbe};
use quaver_devices::alsa::hotplug::{CardEvent, UeventSocket, card_id, pcm_card};
use quaver_devices::spec::{DeviceDefaults, DeviceSpec, parse_spec};
use quaver_engine::Engine;
use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Tries at probing a card that was just announced: its PCMs are registered before its
/// control device, but the first look can still fail (udev applying permissions,
/// another server probing it).
const PROBE_TRIES: u32 = 3;
/// Pause between those tries.
const PROBE_RETRY: Duration = Duration::from_millis(200);

/// Most waits for a new card's id: the kernel names the card (`Dummy`, `PCH`) after its
/// devices are registered, so its `add` can come a moment before.
const ID_TRIES: u32 = 10;
/// Pause between those waits.
const ID_RETRY: Duration = Duration::from_millis(100);

/// Reads card `card` as discovery does, once the kernel has named it.
fn probe_card(card: u32) -> Option<CardProbe> {
    let mut id = None;
    for _ in 1..ID_TRIES {
        id = card_id(card);
        if id.is_some() {
            break;
        }
        std::thread::sleep(ID_RETRY);
    }
    // How the log names a card that cannot be read: by its id when the kernel gave one
    // before the card went again.
    let name = match &id {
        Some(id) => format!("card {card} ({id})"),
        None => format!("card {card} (never named: gone again, or not a sound card)"),
    };
    let mut tries = 0;
    loop {
        tries += 1;
        match alsa_cards::probe(card) {
            Ok(p) => return Some(p),
            Err(e) if tries < PROBE_TRIES => {
                tracing::debug!("hotplug: {e}; trying again");
                std::thread::sleep(PROBE_RETRY);
            }
            Err(e) => {
                tracing::warn!("hotplug: {name} appeared but cannot be read: {e}");
                return None;
            }
        }
    }
}

/// Card number → the engine's devices on it (index and name), for the cards the thread
/// knows (a configuration may open several PCMs of one card).
type Cards = HashMap<u32, Vec<(usize, String)>>;

/// The cards that the configured devices opened (`specs`: engine device index, spec):
/// so the card's removal reaches them even while they are closed for idleness, and its
/// return does not open it a second time.
pub fn configured_cards(
    engine: &Engine,
    specs: &[(usize, String)],
    defaults: &DeviceDefaults,
) -> Cards {
    let devices = engine.devices();
    let mut cards = Cards::new();
    for (index, spec) in specs {
        let Ok(DeviceSpec::Alsa(cfg)) = parse_spec(spec, defaults) else {
            continue;
        };
        // A card that could not be opened fell back to the null device: not a card.
        let Some((_, info)) = devices
            .iter()
            .find(|(i, d)| i == index && d.description.starts_with("ALSA "))
        else {
            continue;
        };
        if let Some(card) = pcm_card(&cfg.pcm) {
            cards
                .entry(card)
                .or_default()
                .push((*index, info.name.clone()));
        }
    }
    cards
}

/// Starts the thread that follows cards as they come and go; `cards` are those the
/// configured devices opened ([`configured_cards`]), `live` the discovered ones (and
/// where cards plugged in go, through the reservation thread when there is one:
/// `plugged`). Without a netlink socket (a sandbox that forbids it) it
/// logs why and returns `None`: the daemon runs on with the cards it has.
pub fn spawn(
    engine: Engine,
    cards: Cards,
    live: Arc<LiveCards>,
    plugged: Option<Plugged>,
) -> Option<JoinHandle<()>> {
    let socket = match UeventSocket::open() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("hotplug: {e}; cards plugged in later are not opened");
            return None;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("quaver-hotplug".into())
        .spawn(move || follow_cards(&socket, &engine, cards, &live, plugged.as_ref()));
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("hotplug: cannot start its thread: {e}");
            None
        }
    }
}

/// The thread's loop: ends when the socket fails.
fn follow_cards(
    socket: &UeventSocket,
    engine: &Engine,
    cards: Cards,
    live: &LiveCards,
    plugged: Option<&Plugged>,
) {
    let mut cards = cards;
    loop {
        let event = match socket.next_card_event() {
            Ok(e) => e,
            Err(e) => {
                tracing::error!("hotplug: reading kernel uevents: {e}; no more cards followed");
                return;
            }
        };
        match event {
            CardEvent::Added(card) => {
                // Ours already (configured, discovered, or an `add` seen twice).
                let known = cards.get(&card).into_iter().flatten();
                if known.clone().any(|(i, name)| present(engine, *i, name)) || live.knows(card) {
                    continue;
                }
                cards.remove(&card);
                if let Some(probe) = probe_card(card) {
                    // Through the reservation thread when cards are reserved, so a
                    // card plugged in is asked for like one found at start.
                    match plugged {
                        Some(p) => {
                            if !p.send(probe) {
                                tracing::warn!(
                                    "hotplug: card {card}: the reservation thread is gone; not opened"
                                );
                            }
                        }
                        None => live.card_added(probe),
                    }
                }
            }
            CardEvent::Removed(card) => {
                for (index, name) in cards.remove(&card).unwrap_or_default() {
                    card_removed(engine, card, index, &name);
                }
                live.card_removed(card);
            }
        }
    }
}

/// Card `card`, configured as device `index`, went away: the engine drops it (if it
/// has not noticed by itself already) and the rehome thread moves its streams.
fn card_removed(engine: &Engine, card: u32, index: usize, name: &str) {
    // The index may already be free (the engine saw the card fail first and its
    // streams moved), and then must not name another device.
    if !present(engine, index, name) {
        return;
    }
    tracing::info!("hotplug: card {card} ({name}) unplugged");
    if let Err(e) = engine.device_gone(index) {
        tracing::debug!("hotplug: card {card}: {e}");
    }
}
