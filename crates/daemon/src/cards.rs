//! Discovery by default: with no devices configured (or `"auto"` among them) quaverd
//! opens every ALSA card it finds, each through its active profile's PCMs, and fills
//! the card registry the front-ends present. Every failure is logged with the card's
//! name and what was wrong, and the other cards serve. docs/alsa/discovery.md.

use quaver_devices::alsa::cards::{self as alsa_cards, CardProbe, CardProfiles, PortKind, Profile};
use quaver_devices::alsa::ucm::Ucm;
use quaver_devices::alsa::ucm::profiles::card_profiles;
use quaver_devices::alsa::{AlsaConfig, AlsaDevice, params::Direction};
use quaver_devices::spec::DeviceDefaults;
use quaver_devices::{Device, DeviceError};
use quaver_engine::{Engine, NodeKind};
use quaver_policy::cards::{
    Availability, Card, CardNode, CardPort, CardProfile, Cards, PortDirection, PortType,
};

/// The value of `engine.devices` that asks for discovery.
pub const AUTO: &str = "auto";

/// The card an engine device belongs to, and the ports its sink and source use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The card's index.
    pub card: u32,
    /// The port its sink uses, if it plays.
    pub output_port: Option<String>,
    /// The port its source uses, if it captures.
    pub input_port: Option<String>,
}

/// A device opened for a card, waiting for its graph nodes.
pub struct Opened {
    /// The device.
    pub device: Box<dyn Device>,
    /// Its card and ports.
    pub owner: Owner,
    /// An `alsa:` spec for the same PCM and directions (the mixer finds its card and
    /// elements from it).
    pub spec: String,
}

/// Cards found and devices opened by [`open_cards`].
#[derive(Default)]
pub struct Discovered {
    /// The devices, in card order.
    pub devices: Vec<Opened>,
    /// The cards (their nodes are filled once the engine runs, [`fill_nodes`]).
    pub cards: Vec<Card>,
    /// Each card's probe and profiles, in the same order: what a later profile switch
    /// opens from.
    pub probes: Vec<(CardProbe, CardProfiles)>,
    /// What could not be used or opened, one line each, with the card's name (each
    /// also logged).
    pub problems: Vec<String>,
}

/// The card's name in the registry and for PulseAudio: `alsa_card.ID`.
pub fn card_name(id: &str) -> String {
    format!("alsa_card.{id}")
}

/// Finds every card, builds its profiles and opens the devices of the profile
/// remembered for it in `reg` (else its default), at most `room` devices in all; a
/// card `may_open(index, id)` refuses (reserved by another program) is left alone.
pub fn open_cards(
    defaults: &DeviceDefaults,
    reg: &Cards,
    room: usize,
    may_open: &mut dyn FnMut(u32, &str) -> bool,
) -> Discovered {
    let mut out = Discovered::default();
    let found = match alsa_cards::discover() {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("card discovery: {e}");
            return out;
        }
    };
    if found.is_empty() {
        tracing::info!("card discovery: no ALSA cards");
    }
    for card in found {
        let card = match card {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("card discovery: {e}; card skipped");
                continue;
            }
        };
        if !may_open(card.index as u32, &card.id) {
            continue;
        }
        open_card(&card, defaults, reg, room, &mut out, &mut AlsaDevice::open);
    }
    out
}

/// How a card's device is opened: [`AlsaDevice::open`]; tests put failures in its place.
pub type Opener<'a> = dyn FnMut(AlsaConfig) -> Result<AlsaDevice, DeviceError> + 'a;

fn open_card(
    card: &CardProbe,
    defaults: &DeviceDefaults,
    reg: &Cards,
    room: usize,
    out: &mut Discovered,
    open: &mut Opener<'_>,
) {
    let profiles = card_profiles(card, defaults.rate);
    for p in &profiles.problems {
        tracing::warn!("{p}; skipped");
    }
    let profile = pick_profile(card, &profiles, reg.remembered(&card_name(&card.id)));
    let room = room.saturating_sub(out.devices.len());
    let (opened, problems) = open_profile_with(card, profile, defaults, room, open);
    out.problems.extend(profiles.problems.iter().cloned());
    out.problems.extend(problems);
    let active = if !opened.is_empty() || profile.name == "off" {
        profile.name.clone()
    } else {
        tracing::warn!(
            "{}: nothing of profile {} opened; the card is off",
            label(card),
            profile.name
        );
        "off".to_string()
    };
    out.devices.extend(opened);
    out.cards.push(card_record(card, &profiles, active));
    out.probes.push((card.clone(), profiles));
}

/// How logs name a card: `card 'Dummy' (Dummy)`.
pub fn label(card: &CardProbe) -> String {
    format!("card '{}' ({})", card.name, card.id)
}

/// The profile to open: the one `remembered` for the card if it is offered now (else
/// the reason is logged), otherwise the default.
pub fn pick_profile<'a>(
    card: &CardProbe,
    profiles: &'a CardProfiles,
    remembered: Option<&str>,
) -> &'a Profile {
    match remembered {
        Some(r) => match profiles.get(r) {
            Some(p) => p,
            None => {
                tracing::warn!(
                    "{}: the remembered profile '{r}' is not offered now; using the default",
                    label(card)
                );
                profiles.default_profile()
            }
        },
        None => profiles.default_profile(),
    }
}

/// Opens the devices of `profile` of `card` at the engine's rate, at most `room`; what
/// failed is logged with the card's name, skipped, and returned as one line each.
pub fn open_profile(
    card: &CardProbe,
    profile: &Profile,
    defaults: &DeviceDefaults,
    room: usize,
) -> (Vec<Opened>, Vec<String>) {
    open_profile_with(card, profile, defaults, room, &mut AlsaDevice::open)
}

/// [`open_profile`] through `open`.
fn open_profile_with(
    card: &CardProbe,
    profile: &Profile,
    defaults: &DeviceDefaults,
    room: usize,
    open: &mut Opener<'_>,
) -> (Vec<Opened>, Vec<String>) {
    let label = label(card);
    let template = AlsaConfig {
        rate: defaults.rate,
        ..AlsaConfig::default()
    };
    let mut opened = Vec::new();
    let mut problems = Vec::new();
    let mut fail = |why: String| {
        tracing::warn!("{why}; skipped");
        problems.push(why);
    };
    if let Some(ucm) = &card.ucm
        && let Err(e) = ucm_enable(ucm, profile)
    {
        fail(format!("{label}: profile {}: {e}", profile.name));
        return (opened, problems);
    }
    for dev in alsa_cards::devices_for(card, profile, &template) {
        if opened.len() >= room {
            fail(format!(
                "{label}: {} not opened: one engine drives at most {} devices",
                dev.config.name,
                quaver_engine::rt::MAX_DEVICES
            ));
            continue;
        }
        let pcm = dev.config.pcm.clone();
        let onoff = |b: bool| if b { "on" } else { "off" };
        let spec = format!(
            "alsa:{pcm},playback={},capture={}",
            onoff(dev.config.playback),
            onoff(dev.config.capture)
        );
        let mut d = match open(dev.config) {
            Ok(d) => d,
            Err(e) => {
                fail(format!(
                    "{label}: opening {pcm} for profile {}: {e}",
                    profile.name
                ));
                continue;
            }
        };
        if d.info().rate != defaults.rate {
            fail(format!(
                "{label}: {pcm} opened at {} Hz, not the engine's {} Hz",
                d.info().rate,
                defaults.rate
            ));
            let _ = d.close();
            continue;
        }
        tracing::info!(
            "{label}: device {}: {}",
            d.info().name,
            d.info().description
        );
        let port_of = |m: &Option<String>, dir: Direction| {
            m.as_ref()
                .and_then(|name| profile.mapping(dir, name))
                .map(|m| m.port.clone())
        };
        opened.push(Opened {
            spec,
            owner: Owner {
                card: card.index as u32,
                output_port: port_of(&dev.output, Direction::Playback),
                input_port: port_of(&dev.input, Direction::Capture),
            },
            device: Box::new(d.with_description(dev.description)),
        });
    }
    (opened, problems)
}

/// Sets the UCM verb of `profile` (none for `off`) and enables, per mapping, its best
/// device: the port its sink or source starts on (the mixers then
/// follow the active port, docs/alsa/ucm.md).
fn ucm_enable(ucm: &Ucm, profile: &Profile) -> Result<(), String> {
    ucm.set_verb(profile.verb.as_deref())?;
    for m in profile.mappings() {
        let devices: Vec<String> = m.ucm_ports.iter().map(|p| p.device.clone()).collect();
        if let Some(first) = devices.first() {
            ucm.enable_device(first, &devices)?;
        }
    }
    Ok(())
}

/// The registry's record of `card` (no nodes yet).
pub fn card_record(card: &CardProbe, profiles: &CardProfiles, active: String) -> Card {
    let mut ports: Vec<CardPort> = Vec::new();
    for p in &profiles.profiles {
        for m in p.mappings() {
            let direction = match m.dir {
                Direction::Playback => PortDirection::Output,
                Direction::Capture => PortDirection::Input,
            };
            // A UCM mapping's ports are its devices; a probed one has one port.
            let own: Vec<(String, String, u32)> = if m.ucm_ports.is_empty() {
                vec![(m.port.clone(), m.port_description.clone(), m.priority * 100)]
            } else {
                m.ucm_ports
                    .iter()
                    .map(|u| (u.name.clone(), u.description.clone(), u.priority))
                    .collect()
            };
            for (name, description, priority) in own {
                match ports.iter_mut().find(|x| x.name == name) {
                    Some(x) if !x.profiles.contains(&p.name) => x.profiles.push(p.name.clone()),
                    Some(_) => {}
                    None => ports.push(CardPort {
                        name,
                        description,
                        priority,
                        direction,
                        // Until the card's jacks are read (mixers.rs).
                        available: Availability::Unknown,
                        port_type: match m.port_kind {
                            PortKind::Analog => PortType::Analog,
                            PortKind::Hdmi => PortType::Hdmi,
                            PortKind::Spdif => PortType::Spdif,
                        },
                        profiles: vec![p.name.clone()],
                    }),
                }
            }
        }
    }
    Card {
        index: card.index as u32,
        name: card_name(&card.id),
        driver: "quaver-alsa".into(),
        props: vec![
            ("alsa.card".into(), card.index.to_string()),
            ("alsa.card_name".into(), card.name.clone()),
            ("alsa.long_card_name".into(), card.long_name.clone()),
            ("alsa.driver_name".into(), card.driver.clone()),
            ("alsa.id".into(), card.id.clone()),
            ("device.api".into(), "alsa".into()),
            ("device.class".into(), "sound".into()),
            ("device.string".into(), card.index.to_string()),
            ("device.description".into(), card.name.clone()),
        ],
        profiles: profiles
            .profiles
            .iter()
            .map(|p| CardProfile {
                name: p.name.clone(),
                description: p.description.clone(),
                priority: p.priority,
                sinks: p.sinks(),
                sources: p.sources(),
                available: true,
            })
            .collect(),
        ports,
        active,
        pending: None,
        nodes: Vec::new(),
    }
}

/// Records, for each card, the sink and source nodes the engine made of its devices;
/// `owners[i]` is the card and ports of engine device `i` (`None`: not a card's).
pub fn fill_nodes(engine: &Engine, cards: &mut [Card], owners: &[Option<Owner>]) {
    let graph = engine.graph();
    for node in graph.nodes.values() {
        let Some(Some(owner)) = node.device.and_then(|i| owners.get(i)) else {
            continue;
        };
        let Some(c) = cards.iter_mut().find(|c| c.index == owner.card) else {
            continue;
        };
        let (direction, port) = match node.kind {
            NodeKind::DeviceSink => (PortDirection::Output, &owner.output_port),
            NodeKind::DeviceSource => (PortDirection::Input, &owner.input_port),
            _ => continue,
        };
        if let Some(port) = port {
            c.nodes.push(CardNode {
                node: node.name.clone(),
                direction,
                port: port.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_devices::alsa::cards::{PcmCaps, PcmProbe, build_profiles};
    use quaver_devices::alsa::params::PcmFormat;

    fn pcm(device: u32, dir: Direction, name: &str) -> PcmProbe {
        PcmProbe {
            device,
            dir,
            id: name.into(),
            name: name.into(),
            caps: Ok(PcmCaps {
                channels_min: 2,
                channels_max: 2,
                channel_counts: vec![2],
                rate_min: 48_000,
                rate_max: 48_000,
                rates: vec![48_000],
                formats: vec![PcmFormat::S16],
            }),
        }
    }

    /// Acceptance 7's cards that cannot serve, among cards that can: one whose PCMs
    /// refuse every format quaver converts, one that vanishes while its device opens
    /// (its PCM answers ENODEV, as an unbind racing the open leaves it). Each is named
    /// with what was wrong and left off; the good card's device opens (alsa-lib's
    /// `null` PCM in place of its card, where alsa-lib is installed).
    #[test]
    fn cards_that_refuse_every_format_or_vanish_while_opening_are_named_and_skipped() {
        let probe = |index: i32, id: &str, formats: Vec<PcmFormat>| CardProbe {
            index,
            id: id.into(),
            name: format!("{id} card"),
            long_name: String::new(),
            driver: String::new(),
            pcms: vec![PcmProbe {
                caps: pcm(0, Direction::Playback, "Analog")
                    .caps
                    .map(|c| PcmCaps { formats, ..c }),
                ..pcm(0, Direction::Playback, "Analog")
            }],
            ucm: None,
        };
        let refusing = probe(0, "Refusing", Vec::new());
        let vanishing = probe(1, "Vanishing", vec![PcmFormat::S16]);
        let good = probe(2, "Good", vec![PcmFormat::S16]);
        let have_alsa = quaver_devices::alsa::available().is_ok();
        let mut asked = Vec::new();
        let mut open = |cfg: AlsaConfig| {
            asked.push(cfg.pcm.clone());
            if cfg.pcm.contains("Vanishing") {
                return Err(DeviceError::Io {
                    device: cfg.name.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("snd_pcm_open('{}', playback): No such device", cfg.pcm),
                    ),
                });
            }
            if !have_alsa {
                return Err(DeviceError::Unavailable {
                    backend: "ALSA",
                    reason: "no alsa-lib here".into(),
                });
            }
            AlsaDevice::open(AlsaConfig {
                pcm: "null".into(),
                pacing: quaver_devices::alsa::Pacing::Clock,
                ..cfg
            })
        };
        let defaults = DeviceDefaults {
            rate: 48_000,
            channels: quaver_dsp::ChannelMap::stereo(),
        };
        let reg = Cards::new(quaver_policy::cards::ProfileStore::memory());
        let mut out = Discovered::default();
        for card in [&refusing, &vanishing, &good] {
            open_card(card, &defaults, &reg, 8, &mut out, &mut open);
        }
        // The refusing card has nothing to open: its PCM was never asked for.
        assert_eq!(asked.len(), 2, "{asked:?}");
        let active: Vec<(&str, &str)> = out
            .cards
            .iter()
            .map(|c| (c.name.as_str(), c.active.as_str()))
            .collect();
        let good_active = if have_alsa {
            "output:analog-stereo"
        } else {
            "off"
        };
        assert_eq!(
            active,
            [
                ("alsa_card.Refusing", "off"),
                ("alsa_card.Vanishing", "off"),
                ("alsa_card.Good", good_active),
            ]
        );
        let problems = out.problems.join("\n");
        assert!(
            problems.contains("card 'Refusing card' (Refusing) PCM hw:Refusing,0 playback")
                && problems.contains("accepts none of the formats"),
            "{problems}"
        );
        assert!(
            problems.contains("card 'Vanishing card' (Vanishing): opening hw:Vanishing,0 for profile output:analog-stereo")
                && problems.contains("No such device"),
            "{problems}"
        );
        if have_alsa {
            assert_eq!(out.devices.len(), 1);
            assert_eq!(out.devices[0].owner.card, 2);
        } else {
            eprintln!("SKIPPED (part): no alsa-lib, the good card's device was not opened");
        }
        for mut d in out.devices {
            d.device.close().unwrap();
        }
    }

    #[test]
    fn a_card_record_has_one_port_per_mapping_port_with_its_profiles() {
        let probe = CardProbe {
            index: 2,
            id: "PCH".into(),
            name: "HDA Intel PCH".into(),
            long_name: "HDA Intel PCH at 0xf7f10000 irq 32".into(),
            driver: "HDA-Intel".into(),
            ucm: None,
            pcms: vec![
                pcm(0, Direction::Playback, "Analog"),
                pcm(0, Direction::Capture, "Analog"),
                pcm(3, Direction::Playback, "HDMI 0"),
            ],
        };
        let profiles = build_profiles(&probe, 48_000);
        let card = card_record(&probe, &profiles, profiles.default_profile().name.clone());
        assert_eq!(card.name, "alsa_card.PCH");
        assert_eq!(card.index, 2);
        assert_eq!(card.active, "output:analog-stereo+input:analog-stereo");
        let names: Vec<_> = card.ports.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["analog-output", "analog-input", "hdmi-output-0"]);
        let hdmi = &card.ports[2];
        assert_eq!(hdmi.port_type, PortType::Hdmi);
        assert_eq!(hdmi.direction, PortDirection::Output);
        assert_eq!(
            hdmi.profiles,
            [
                "output:hdmi-stereo+input:analog-stereo",
                "output:hdmi-stereo"
            ]
        );
        assert_eq!(card.ports[1].direction, PortDirection::Input);
        assert_eq!(card.ports[1].profiles.len(), 3, "{:?}", card.ports[1]);
        assert!(
            card.ports
                .iter()
                .all(|p| p.available == Availability::Unknown)
        );
        let prop = |k: &str| {
            card.props
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(prop("alsa.card"), Some("2"));
        assert_eq!(
            prop("alsa.long_card_name"),
            Some("HDA Intel PCH at 0xf7f10000 irq 32")
        );
        assert_eq!(prop("device.description"), Some("HDA Intel PCH"));
        assert_eq!(card.profiles.last().unwrap().name, "off");
    }

    #[test]
    fn a_ucm_card_record_has_a_port_per_device_shared_across_verbs() {
        use quaver_devices::alsa::ucm::{Ucm, UcmConfig, UcmDevice, UcmVerb};
        let dev = |name: &str, playback: bool, priority| UcmDevice {
            name: name.into(),
            comment: format!("{name} comment"),
            playback_pcm: playback.then(|| "hw:Dummy,0".to_string()),
            capture_pcm: (!playback).then(|| "hw:Dummy,0".to_string()),
            playback_priority: Some(priority),
            capture_priority: Some(priority),
            ..UcmDevice::default()
        };
        let verb = |name: &str, devices| UcmVerb {
            name: name.into(),
            comment: String::new(),
            devices,
        };
        let config = UcmConfig {
            verbs: vec![
                verb(
                    "HiFi",
                    vec![
                        dev("Speaker", true, 100),
                        dev("Headphones", true, 200),
                        dev("Mic", false, 100),
                    ],
                ),
                verb("Voice Call", vec![dev("Mic", false, 100)]),
            ],
        };
        let probe = CardProbe {
            index: 1,
            id: "Dummy".into(),
            name: "Dummy".into(),
            long_name: "Dummy 1".into(),
            driver: "Dummy".into(),
            pcms: vec![
                pcm(0, Direction::Playback, "Dummy PCM"),
                pcm(0, Direction::Capture, "Dummy PCM"),
            ],
            ucm: Some(std::sync::Arc::new(Ucm::from_config(
                config,
                "card 'Dummy'",
            ))),
        };
        let profiles = card_profiles(&probe, 48_000);
        assert!(profiles.problems.is_empty(), "{:?}", profiles.problems);
        let card = card_record(&probe, &profiles, "HiFi".into());
        let ports: Vec<(&str, &str, u32, &[String])> = card
            .ports
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.description.as_str(),
                    p.priority,
                    p.profiles.as_slice(),
                )
            })
            .collect();
        let hifi = ["HiFi".to_string()];
        let both = ["HiFi".to_string(), "Voice Call".to_string()];
        assert_eq!(
            ports,
            [
                ("[Out] Headphones", "Headphones comment", 200, &hifi[..]),
                ("[Out] Speaker", "Speaker comment", 100, &hifi[..]),
                ("[In] Mic", "Mic comment", 100, &both[..]),
            ]
        );
        assert_eq!(card.ports[2].direction, PortDirection::Input);
        let names: Vec<&str> = card.profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["HiFi", "Voice Call", "off"]);
        assert_eq!((card.profiles[1].sinks, card.profiles[1].sources), (0, 1));
    }
}
