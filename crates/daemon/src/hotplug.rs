//! Cards plugged in and unplugged while quaverd runs: one thread blocked on the kernel's
//! uevents (`quaver_devices::alsa::hotplug`, no periodic wakeups). A card that appears
//! is opened ([`open_card`]) and added to the running engine, so its sink and source
//! show up in every front-end (and streams that remember it move there: stream
//! restore). A card that disappears is reported gone to the engine, which drops and
//! closes it at once; the rehome thread (`quaver_policy::rehome`) moves its streams to
//! the next sink and removes it. docs/alsa/hotplug.md.

use quaver_devices::alsa::hotplug::{CardEvent, UeventSocket, card_id, pcm_card};
use quaver_devices::spec::{DeviceDefaults, DeviceSpec, open_device, parse_spec};
use quaver_devices::{Device, DeviceError};
use quaver_engine::Engine;
use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::Duration;

/// Tries at opening a card that was just announced: its PCMs are registered before its
/// control device, but the first open can still find it busy (udev applying
/// permissions, another server probing it).
const OPEN_TRIES: u32 = 3;
/// Pause between those tries.
const OPEN_RETRY: Duration = Duration::from_millis(200);

/// Most waits for a new card's id: the kernel names the card (`Dummy`, `PCH`) after its
/// devices are registered, so its `add` can come a moment before.
const ID_TRIES: u32 = 10;
/// Pause between those waits.
const ID_RETRY: Duration = Duration::from_millis(100);

/// Opens card `card` as a device of the engine's rate. The one place that decides what
/// a plugged-in card becomes (today `alsa:hw:N` with the card's id as its name; card
/// profiles replace this).
pub fn open_card(card: u32, defaults: &DeviceDefaults) -> Result<Box<dyn Device>, DeviceError> {
    let mut id = card_id(card);
    for _ in 1..ID_TRIES {
        if id.is_some() {
            break;
        }
        std::thread::sleep(ID_RETRY);
        id = card_id(card);
    }
    let name = id.unwrap_or_else(|| format!("card{card}"));
    open_device(&format!("alsa:hw:{card},name={name}"), defaults)
}

/// Card number → the engine's devices on it (index and name), for the cards the thread
/// knows (a configuration may open several PCMs of one card).
type Cards = HashMap<u32, Vec<(usize, String)>>;

/// The cards that the configured devices (`specs`, opened in this order as engine
/// devices 0, 1, …) opened: so the card's removal reaches them even while they are
/// closed for idleness, and its return does not open it a second time.
pub fn configured_cards(engine: &Engine, specs: &[String], defaults: &DeviceDefaults) -> Cards {
    let devices = engine.devices();
    let mut cards = Cards::new();
    for (index, spec) in specs.iter().enumerate() {
        let Ok(DeviceSpec::Alsa(cfg)) = parse_spec(spec, defaults) else {
            continue;
        };
        // A card that could not be opened fell back to the null device: not a card.
        let Some((_, info)) = devices
            .iter()
            .find(|(i, d)| *i == index && d.description.starts_with("ALSA "))
        else {
            continue;
        };
        if let Some(card) = pcm_card(&cfg.pcm) {
            cards
                .entry(card)
                .or_default()
                .push((index, info.name.clone()));
        }
    }
    cards
}

/// Starts the thread that follows cards as they come and go; `cards` are those the
/// engine has open already ([`configured_cards`]). Without a netlink socket (a sandbox
/// that forbids it) it logs why and returns `None`: the daemon runs on with the cards
/// it has.
pub fn spawn(engine: Engine, defaults: DeviceDefaults, cards: Cards) -> Option<JoinHandle<()>> {
    let socket = match UeventSocket::open() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("hotplug: {e}; cards plugged in later are not opened");
            return None;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("quaver-hotplug".into())
        .spawn(move || follow_cards(&socket, &engine, &defaults, cards));
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("hotplug: cannot start its thread: {e}");
            None
        }
    }
}

/// The thread's loop: ends when the socket fails.
fn follow_cards(socket: &UeventSocket, engine: &Engine, defaults: &DeviceDefaults, cards: Cards) {
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
                // Ours already (configured, or an `add` seen twice): still in the engine.
                let known = cards.get(&card).into_iter().flatten();
                if known.clone().any(|(i, name)| present(engine, *i, name)) {
                    continue;
                }
                if let Some(added) = card_added(engine, defaults, card) {
                    cards.insert(card, vec![added]);
                }
            }
            CardEvent::Removed(card) => {
                for (index, name) in cards.remove(&card).unwrap_or_default() {
                    card_removed(engine, card, index, &name);
                }
            }
        }
    }
}

/// Opens card `card` and adds it to the engine; its index and name.
fn card_added(engine: &Engine, defaults: &DeviceDefaults, card: u32) -> Option<(usize, String)> {
    let mut tries = 0;
    let device = loop {
        tries += 1;
        match open_card(card, defaults) {
            Ok(d) => break d,
            Err(e) if tries < OPEN_TRIES && !matches!(e, DeviceError::Unavailable { .. }) => {
                tracing::debug!("hotplug: card {card}: {e}; trying again");
                std::thread::sleep(OPEN_RETRY);
            }
            Err(e) => {
                tracing::warn!("hotplug: card {card} appeared but cannot be opened: {e}");
                return None;
            }
        }
    };
    let name = device.info().name.clone();
    match engine.add_device(device) {
        Ok(index) => {
            tracing::info!("hotplug: card {card} ({name}) plugged in");
            Some((index, name))
        }
        Err(e) => {
            tracing::warn!("hotplug: card {card} ({name}) cannot join the engine: {e}");
            None
        }
    }
}

/// Whether device `index` is still the device named `name`.
fn present(engine: &Engine, index: usize, name: &str) -> bool {
    engine
        .devices()
        .iter()
        .any(|(i, info)| *i == index && info.name == name)
}

/// Card `card`, added as device `index`, went away: the engine drops it (if it has not
/// noticed by itself already) and the rehome thread moves its streams.
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
