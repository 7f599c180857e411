//! The discovered cards while quaverd runs: which engine devices and mixers each card
//! has open, so that a card plugged in is opened the way discovery opens cards, one
//! unplugged is closed and leaves the registry, and `set-card-profile` switches a
//! card's devices at run time (docs/alsa/discovery.md, docs/alsa/hotplug.md).

use crate::cards::{self, Opened, Owner, card_record, fill_nodes, label, open_profile};
use crate::mixers::{self, UcmCard};
use quaver_devices::alsa::AlsaConfig;
use quaver_devices::alsa::cards::{CardProbe, CardProfiles, Profile, devices_for};
use quaver_devices::alsa::mixer::Mixer;
use quaver_devices::spec::DeviceDefaults;
use quaver_engine::{Engine, Graph, NodeKind};
use quaver_policy::cards::{CardChange, CardNode, ProfileSwitch, SharedCards};
use quaver_policy::{NodeView, Policy};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One open card.
struct LiveCard {
    probe: CardProbe,
    profiles: CardProfiles,
    /// Engine devices of its active profile: index, device name, card and ports.
    devices: Vec<(usize, String, Owner)>,
    /// Its mixers; dropped when the card goes or switches (they hold its control device).
    mixers: Vec<Mixer>,
}

/// The discovered cards and what each has open.
pub struct LiveCards {
    engine: Engine,
    defaults: DeviceDefaults,
    registry: SharedCards,
    policy: Arc<Mutex<Policy>>,
    cards: Mutex<BTreeMap<u32, LiveCard>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LiveCards {
    /// No cards yet.
    pub fn new(
        engine: Engine,
        defaults: DeviceDefaults,
        registry: SharedCards,
        policy: Arc<Mutex<Policy>>,
    ) -> Arc<LiveCards> {
        Arc::new(LiveCards {
            engine,
            defaults,
            registry,
            policy,
            cards: Mutex::new(BTreeMap::new()),
        })
    }

    /// Takes over a card discovery opened at start: `devices` are its engine devices
    /// (index, spec, owner); their mixers are attached here.
    pub fn adopt(
        &self,
        probe: CardProbe,
        profiles: CardProfiles,
        devices: Vec<(usize, String, Owner)>,
    ) {
        let names = self.engine.devices();
        let specs: Vec<(usize, String)> = devices.iter().map(|(i, s, _)| (*i, s.clone())).collect();
        let active = locked(&self.registry)
            .find(Some(probe.index as u32), None)
            .map(|c| c.active.clone());
        let ucm = UcmCard::of(&probe, active.and_then(|a| profiles.get(&a)));
        let mixers = mixers::attach(&self.engine, &specs, &self.defaults, &self.registry, ucm);
        let devices = devices
            .into_iter()
            .filter_map(|(i, _, o)| {
                let (_, info) = names.iter().find(|(j, _)| *j == i)?;
                Some((i, info.name.clone(), o))
            })
            .collect();
        let card = LiveCard {
            probe,
            profiles,
            devices,
            mixers,
        };
        locked(&self.cards).insert(card.probe.index as u32, card);
    }

    /// Whether card `card` is one of these (open, or off).
    pub fn knows(&self, card: u32) -> bool {
        locked(&self.cards).contains_key(&card)
    }

    /// Card `card`'s engine devices (index, name); none when it is unknown or off.
    pub fn devices_of(&self, card: u32) -> Vec<(usize, String)> {
        locked(&self.cards)
            .get(&card)
            .map(|c| c.devices.iter().map(|(i, n, _)| (*i, n.clone())).collect())
            .unwrap_or_default()
    }

    fn notify(&self, change: CardChange) {
        let listeners = locked(&self.registry).listeners();
        for l in listeners {
            l(change);
        }
    }

    /// Card `card` was plugged in: probed, opened in its remembered (else default)
    /// profile, added to the engine and the registry, its mixers attached. `probe` is
    /// how to read it (the hotplug thread waits for the card's name and retries).
    pub fn card_added(&self, probe: CardProbe) {
        let index = probe.index as u32;
        let mut cards = locked(&self.cards);
        if cards.contains_key(&index) {
            return;
        }
        let profiles =
            quaver_devices::alsa::ucm::profiles::card_profiles(&probe, self.defaults.rate);
        for p in &profiles.problems {
            tracing::warn!("{p}; skipped");
        }
        let remembered = locked(&self.registry)
            .remembered(&cards::card_name(&probe.id))
            .map(str::to_string);
        let profile = cards::pick_profile(&probe, &profiles, remembered.as_deref()).clone();
        let mut card = LiveCard {
            probe,
            profiles,
            devices: Vec::new(),
            mixers: Vec::new(),
        };
        let active = match self.open(&mut card, &profile) {
            Ok(()) => profile.name.clone(),
            Err(e) => {
                tracing::warn!("hotplug: {e}; the card is off");
                "off".to_string()
            }
        };
        let mut record = card_record(&card.probe, &card.profiles, active);
        record.nodes = self.nodes_of(&card);
        tracing::info!(
            "hotplug: {} plugged in, profile {}",
            label(&card.probe),
            record.active
        );
        locked(&self.registry).add(record);
        cards.insert(index, card);
        drop(cards);
        self.notify(CardChange::New(index));
    }

    /// Card `card` went away: its devices are reported gone (the rehome thread moves
    /// their streams and removes them), its mixers closed, and it leaves the registry.
    /// Whether it was one of these.
    pub fn card_removed(&self, card: u32) -> bool {
        let Some(gone) = locked(&self.cards).remove(&card) else {
            return false;
        };
        for (index, name, _) in &gone.devices {
            if present(&self.engine, *index, name) {
                tracing::info!("hotplug: {} ({name}) unplugged", label(&gone.probe));
                if let Err(e) = self.engine.device_gone(*index) {
                    tracing::debug!("hotplug: card {card}: {e}");
                }
            }
        }
        drop(gone);
        let removed = locked(&self.registry).remove(card).is_some();
        if removed {
            self.notify(CardChange::Removed(card));
        }
        true
    }

    /// Opens `profile`'s devices for `card` and adds them to the engine, with their
    /// mixers. All or nothing: on error what opened is closed again.
    fn open(&self, card: &mut LiveCard, profile: &Profile) -> Result<(), String> {
        let room = quaver_engine::rt::MAX_DEVICES.saturating_sub(self.engine.devices().len());
        let expected = devices_for(&card.probe, profile, &AlsaConfig::default()).len();
        wait_released(&card.probe, profile);
        let (opened, problems) = open_profile(&card.probe, profile, &self.defaults, room);
        let what = format!(
            "{}: profile {} did not open",
            label(&card.probe),
            profile.name
        );
        let fail = |opened: Vec<Opened>, why: String| {
            for mut o in opened {
                let _ = o.device.close();
            }
            Err(format!("{what}: {why}"))
        };
        if opened.len() < expected {
            return fail(opened, problems.join("; "));
        }
        let mut specs = Vec::new();
        for o in opened {
            let name = o.device.info().name.clone();
            match self.engine.add_device(o.device) {
                Ok(index) => {
                    specs.push((index, o.spec));
                    card.devices.push((index, name, o.owner));
                }
                Err(e) => {
                    self.close(card);
                    return fail(Vec::new(), format!("{name} cannot join the engine: {e}"));
                }
            }
        }
        let ucm = UcmCard::of(&card.probe, Some(profile));
        card.mixers = mixers::attach(&self.engine, &specs, &self.defaults, &self.registry, ucm);
        Ok(())
    }

    /// Closes `card`'s devices (their nodes' links go with them: move streams first)
    /// and mixers.
    fn close(&self, card: &mut LiveCard) {
        card.mixers.clear();
        for (index, name, _) in card.devices.drain(..) {
            if present(&self.engine, index, &name)
                && let Err(e) = self.engine.remove_device(index)
            {
                tracing::warn!("{}: removing {name}: {e}", label(&card.probe));
            }
        }
    }

    /// The registry's nodes of `card`'s open devices.
    fn nodes_of(&self, card: &LiveCard) -> Vec<CardNode> {
        let mut owners = vec![None; quaver_engine::rt::MAX_DEVICES];
        for (index, _, owner) in &card.devices {
            if let Some(slot) = owners.get_mut(*index) {
                *slot = Some(owner.clone());
            }
        }
        let mut record = card_record(&card.probe, &card.profiles, String::new());
        fill_nodes(&self.engine, std::slice::from_mut(&mut record), &owners);
        record.nodes
    }

    /// Switches card `index` to `profile`: streams on its nodes move to another device
    /// (when there is one), its devices close, the new profile's open, and the streams
    /// move onto the card's new sink or source of the same kind. On failure the old
    /// profile is opened again.
    fn switch_locked(&self, index: u32, profile: &str) -> Result<(), String> {
        let mut cards = locked(&self.cards);
        let card = cards
            .get_mut(&index)
            .ok_or_else(|| format!("card {index} is not open by discovery"))?;
        let new = card
            .profiles
            .get(profile)
            .cloned()
            .ok_or_else(|| format!("{} has no profile '{profile}'", label(&card.probe)))?;
        let old_name = locked(&self.registry)
            .find(Some(index), None)
            .map(|c| c.active.clone())
            .unwrap_or_else(|| "off".into());
        let moved = self.move_off(card);
        self.close(card);
        let result = match self.open(card, &new) {
            Ok(()) => Ok(new.name.clone()),
            Err(e) => {
                tracing::warn!("{e}; going back to profile {old_name}");
                let back = card.profiles.get(&old_name).cloned();
                let active = match back.map(|p| self.open(card, &p)) {
                    Some(Ok(())) => old_name.clone(),
                    Some(Err(e2)) => {
                        tracing::warn!("{e2}; the card is off");
                        "off".into()
                    }
                    None => "off".into(),
                };
                Err((e, active))
            }
        };
        let nodes = self.nodes_of(card);
        self.move_back(card, &moved);
        let (active, out) = match result {
            Ok(a) => (a, Ok(())),
            Err((e, a)) => (a, Err(e)),
        };
        tracing::info!("{}: profile {active}", label(&card.probe));
        {
            let mut reg = locked(&self.registry);
            reg.set_active(index, &active, nodes, out.is_ok());
            // The new nodes come with the mapping's generic port; a card whose ports
            // the jacks refined moves them to the port it offers (ports.rs).
            reg.settle(index);
        }
        out
    }

    /// Moves the streams on `card`'s nodes to the policy's choice among the other
    /// devices; returns each stream's name and the kind of card node it was on.
    fn move_off(&self, card: &LiveCard) -> Vec<(String, NodeKind)> {
        let graph = self.engine.graph();
        let mine: BTreeSet<usize> = card.devices.iter().map(|(i, _, _)| *i).collect();
        let others: Vec<NodeView> = graph
            .nodes
            .values()
            .filter(|n| !n.gone && n.device.is_none_or(|d| !mine.contains(&d)))
            .map(|n| NodeView {
                name: n.name.clone(),
                kind: n.kind.as_str().to_string(),
            })
            .collect();
        let (sink, source) = {
            let p = locked(&self.policy);
            (p.default_sink(&others), p.default_source(&others))
        };
        let mut moved = Vec::new();
        for n in graph.nodes.values() {
            if !n.device.is_some_and(|d| mine.contains(&d)) {
                continue;
            }
            let to = match n.kind {
                NodeKind::DeviceSink => sink.as_deref(),
                _ => source.as_deref(),
            };
            for peer in streams_on(&graph, n.id) {
                if let Some(to) = to
                    && let Err(e) = self.engine.relink(&peer, Some(&n.name), to)
                {
                    tracing::warn!("moving {peer} off {}: {e}", n.name);
                }
                moved.push((peer, n.kind));
            }
        }
        moved
    }

    /// Moves streams back onto `card`'s new nodes of the kind they were on, where it
    /// has one; the others stay where [`Self::move_off`] put them.
    fn move_back(&self, card: &LiveCard, moved: &[(String, NodeKind)]) {
        let graph = self.engine.graph();
        let mine: BTreeSet<usize> = card.devices.iter().map(|(i, _, _)| *i).collect();
        for (stream, kind) in moved {
            let target = graph
                .nodes
                .values()
                .find(|n| n.kind == *kind && n.device.is_some_and(|d| mine.contains(&d)));
            match target {
                Some(t) => {
                    if let Err(e) = self.engine.relink(stream, None, &t.name) {
                        tracing::warn!("moving {stream} to {}: {e}", t.name);
                    }
                }
                None => tracing::info!(
                    "{}: {stream} stays where it was moved; the new profile has no {}",
                    label(&card.probe),
                    kind.as_str()
                ),
            }
        }
    }
}

/// The front-end that asked sends the card's `change` event.
impl ProfileSwitch for LiveCards {
    fn switch(&self, card: u32, profile: &str) -> Result<(), String> {
        self.switch_locked(card, profile)
    }
}

/// Stream (non-device) nodes linked to `node`.
fn streams_on(graph: &Graph, node: quaver_engine::NodeId) -> Vec<String> {
    let owner = |p| graph.ports.get(p).map(|p| p.node);
    let ids: BTreeSet<_> = graph
        .links
        .values()
        .filter_map(|l| {
            let (out, inp) = (owner(&l.output)?, owner(&l.input)?);
            (inp == node)
                .then_some(out)
                .or((out == node).then_some(inp))
        })
        .collect();
    ids.into_iter()
        .filter_map(|id| graph.nodes.get(&id))
        .filter(|n| n.device.is_none())
        .map(|n| n.name.clone())
        .collect()
}

/// Most time to wait for the engine's service thread to close a card's PCMs after
/// their devices were removed (a profile switch reopens them right after).
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Waits, bounded, until no subdevice of the PCMs `profile` opens on `card` is open
/// (the kernel's `/proc/asound/cardN/pcmDp/sub0/status` reads "closed"): removed
/// devices are closed asynchronously, and a PCM opens non-blocking, so opening it
/// again too soon would find it busy. A PCM another program holds is not waited out
/// for long: the open that follows says it is busy.
fn wait_released(card: &CardProbe, profile: &Profile) {
    let mut paths = Vec::new();
    for d in devices_for(card, profile, &AlsaConfig::default()) {
        let Some(dev) = d.config.pcm.rsplit(',').next() else {
            continue;
        };
        for (on, c) in [(d.config.playback, 'p'), (d.config.capture, 'c')] {
            if on {
                paths.push(format!(
                    "/proc/asound/card{}/pcm{dev}{c}/sub0/status",
                    card.index
                ));
            }
        }
    }
    let busy = |p: &String| std::fs::read_to_string(p).is_ok_and(|s| s.trim() != "closed");
    let until = Instant::now() + RELEASE_WAIT;
    while paths.iter().any(busy) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether device `index` is still the device named `name`.
pub fn present(engine: &Engine, index: usize, name: &str) -> bool {
    engine
        .devices()
        .iter()
        .any(|(i, info)| *i == index && info.name == name)
}
