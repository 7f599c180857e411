//! A card's UCM configuration as profiles and ports, the way PulseAudio's alsa-ucm
//! presents it: one profile per verb (named after the verb, described by its comment)
//! plus `off`; in each, one sink per PCM device the verb's playback devices use and one
//! source per capture PCM (a laptop's speaker/headphone PCM and its HDMI PCMs); each
//! device on a PCM is a port of its sink or source (`[Out] Speaker`, `[In] Mic`) with
//! the device's priority, jack and volume element.
//! Pure: configuration and probe data in, profiles out. docs/alsa/ucm.md.

pub use super::UcmPort;
use super::{UcmConfig, UcmDevice, UcmVerb};
use crate::alsa::cards::{self, CardProbe, CardProfiles, Mapping, PortKind, Profile, usable};
use crate::alsa::params::Direction;

/// A port priority for devices that declare none.
pub const DEFAULT_PORT_PRIORITY: u32 = 100;

/// The priority of a profile made from `verb`: the usual music verbs first, calls
/// after, anything else below (UCM gives verbs no priority of their own).
pub fn verb_priority(verb: &str) -> u32 {
    let v = verb.replace('_', " ").to_ascii_lowercase();
    match v.as_str() {
        "hifi" => 8000,
        "hifi low power" => 7000,
        "voice call" | "voice" => 6000,
        "voip" | "voice communication" => 5000,
        "fm analog radio" | "fm digital radio" => 4000,
        "record" | "hifi record" => 3000,
        _ => 1000,
    }
}

/// The port name of a UCM device: PulseAudio's `[Out] NAME` / `[In] NAME`.
pub fn port_name(device: &str, dir: Direction) -> String {
    match dir {
        Direction::Playback => format!("[Out] {device}"),
        Direction::Capture => format!("[In] {device}"),
    }
}

/// The device number of `pcm` on `card`: `hw:CARD,DEV`, `hw:CARD` (device 0),
/// `hw:CARD=ID,DEV=N`, or the same with `plughw:`; CARD is the card's id or number.
/// `Err` says why it is not a PCM of this card that quaver opens.
pub fn pcm_device(card: &CardProbe, pcm: &str) -> Result<u32, String> {
    let args = pcm
        .strip_prefix("hw:")
        .or_else(|| pcm.strip_prefix("plughw:"))
        .ok_or_else(|| format!("PCM '{pcm}' is not a hw: PCM"))?;
    let mut parts = args.split(',').map(str::trim);
    let strip = |s: &str, key: &str| s.strip_prefix(key).unwrap_or(s).to_string();
    let c = strip(parts.next().unwrap_or_default(), "CARD=");
    if c != card.id && c != card.index.to_string() {
        return Err(format!("PCM '{pcm}' is not on this card"));
    }
    match parts.next() {
        None => Ok(0),
        Some(d) => strip(d, "DEV=")
            .parse()
            .map_err(|_| format!("PCM '{pcm}' has no device number")),
    }
}

fn pcm_of(d: &UcmDevice, dir: Direction) -> Option<&String> {
    match dir {
        Direction::Playback => d.playback_pcm.as_ref(),
        Direction::Capture => d.capture_pcm.as_ref(),
    }
}

fn priority_of(d: &UcmDevice, dir: Direction) -> u32 {
    match dir {
        Direction::Playback => d.playback_priority,
        Direction::Capture => d.capture_priority,
    }
    .unwrap_or(DEFAULT_PORT_PRIORITY)
}

/// Sanitised verb for a device name: letters, digits, `-` and `_` only.
fn slug(verb: &str) -> String {
    verb.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The mappings of `verb` in `dir`: one per PCM device its devices use, that of its best
/// device first, each with every device on its PCM as a port (best first). Empty when
/// the verb has no usable device there; what was left out goes to `problems`.
fn mappings(
    card: &CardProbe,
    verb: &UcmVerb,
    dir: Direction,
    rate: u32,
    problems: &mut Vec<String>,
) -> Vec<Mapping> {
    let what = |d: &UcmDevice| {
        format!(
            "card '{}' ({}): UCM verb '{}' device '{}'",
            card.name, card.id, verb.name, d.name
        )
    };
    let mut devs: Vec<(&UcmDevice, u32)> = Vec::new();
    for d in verb.devices.iter() {
        let Some(pcm) = pcm_of(d, dir) else { continue };
        match pcm_device(card, pcm) {
            Ok(n) => devs.push((d, n)),
            Err(e) => problems.push(format!("{}: {e}; not offered", what(d))),
        }
    }
    // Stable: equal priorities keep the configuration's order.
    devs.sort_by_key(|(d, _)| std::cmp::Reverse(priority_of(d, dir)));
    let mut pcms: Vec<u32> = Vec::new();
    for (_, n) in &devs {
        if !pcms.contains(n) {
            pcms.push(*n);
        }
    }
    let several = pcms.len() > 1;
    pcms.into_iter()
        .filter_map(|device| {
            let on: Vec<&UcmDevice> = devs
                .iter()
                .filter(|(_, n)| *n == device)
                .map(|(d, _)| *d)
                .collect();
            let m = mapping(card, verb, dir, rate, device, &on, several);
            m.map_err(|e| problems.push(format!("{}: {e}", what(on[0]))))
                .ok()
        })
        .collect()
}

/// The mapping of `verb` on PCM `device` in `dir`, whose ports are `devs` (best first);
/// `several`: the verb has other PCMs in this direction, so the description names the
/// devices. `Err` says why it is not offered.
fn mapping(
    card: &CardProbe,
    verb: &UcmVerb,
    dir: Direction,
    rate: u32,
    device: u32,
    devs: &[&UcmDevice],
    several: bool,
) -> Result<Mapping, String> {
    let best = devs[0];
    let probe = card
        .pcms
        .iter()
        .find(|p| p.device == device && p.dir == dir)
        .ok_or_else(|| {
            format!(
                "the card has no {} PCM device {device}; not offered",
                dir.name()
            )
        })?;
    let caps = usable(card, probe, rate).map_err(|e| format!("{e}; not offered"))?;
    let want = match dir {
        Direction::Playback => best.playback_channels,
        Direction::Capture => best.capture_channels,
    };
    let channels = match want {
        Some(n) => n,
        None if caps.channel_counts.contains(&2) => 2,
        None if caps.channel_counts.contains(&1) => 1,
        None => caps.channels_min,
    };
    if !caps.channel_counts.contains(&channels)
        && !(caps.channels_min..=caps.channels_max).contains(&channels)
    {
        return Err(format!(
            "PCM device {device} does not open {channels} channels; not offered"
        ));
    }
    let described = |d: &UcmDevice| {
        if d.comment.is_empty() {
            d.name.clone()
        } else {
            d.comment.clone()
        }
    };
    let ports: Vec<UcmPort> = devs
        .iter()
        .map(|d| UcmPort {
            name: port_name(&d.name, dir),
            device: d.name.clone(),
            description: described(d),
            priority: priority_of(d, dir),
            jack: d.jack.clone(),
            element: match dir {
                Direction::Playback => d.playback_element.clone(),
                Direction::Capture => d.capture_element.clone(),
            },
        })
        .collect();
    let kind = if best.name.to_ascii_uppercase().contains("HDMI") {
        PortKind::Hdmi
    } else if best.name.to_ascii_uppercase().contains("SPDIF") {
        PortKind::Spdif
    } else {
        PortKind::Analog
    };
    let verb_description = if verb.comment.is_empty() {
        verb.name.clone()
    } else {
        verb.comment.clone()
    };
    let description = if several {
        let names: Vec<String> = devs.iter().map(|d| described(d)).collect();
        format!("{verb_description} ({})", names.join(" / "))
    } else {
        verb_description
    };
    Ok(Mapping {
        name: format!("{}-hw{device}", slug(&verb.name)),
        description,
        dir,
        device,
        channels,
        priority: priority_of(best, dir),
        port: ports[0].name.clone(),
        port_description: ports[0].description.clone(),
        port_kind: kind,
        ucm_ports: ports,
    })
}

/// The profiles `card` offers at `rate`: from its UCM configuration when it has one,
/// else from its PCMs ([`cards::build_profiles`]).
pub fn card_profiles(card: &CardProbe, rate: u32) -> CardProfiles {
    match &card.ucm {
        Some(ucm) => build_profiles(card, &ucm.config, rate),
        None => cards::build_profiles(card, rate),
    }
}

/// The profiles of `card` from its UCM configuration at `rate`: one per verb that has a
/// usable device, best first, and `off` last (no verb).
pub fn build_profiles(card: &CardProbe, config: &UcmConfig, rate: u32) -> CardProfiles {
    let mut problems = Vec::new();
    let mut profiles = Vec::new();
    for verb in &config.verbs {
        let outputs = mappings(card, verb, Direction::Playback, rate, &mut problems);
        let inputs = mappings(card, verb, Direction::Capture, rate, &mut problems);
        if outputs.is_empty() && inputs.is_empty() {
            problems.push(format!(
                "card '{}' ({}): UCM verb '{}' has no usable device; no profile",
                card.name, card.id, verb.name
            ));
            continue;
        }
        profiles.push(Profile {
            name: verb.name.clone(),
            description: if verb.comment.is_empty() {
                verb.name.clone()
            } else {
                verb.comment.clone()
            },
            priority: verb_priority(&verb.name),
            outputs,
            inputs,
            verb: Some(verb.name.clone()),
        });
    }
    profiles.sort_by_key(|p| std::cmp::Reverse(p.priority));
    profiles.push(Profile::off());
    CardProfiles { profiles, problems }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alsa::cards::{PcmCaps, PcmProbe};
    use crate::alsa::params::PcmFormat;

    fn pcm(device: u32, dir: Direction) -> PcmProbe {
        PcmProbe {
            device,
            dir,
            id: "Dummy PCM".into(),
            name: "Dummy PCM".into(),
            caps: Ok(PcmCaps {
                channels_min: 1,
                channels_max: 2,
                channel_counts: vec![1, 2],
                rate_min: 5_500,
                rate_max: 48_000,
                rates: vec![32_000, 44_100, 48_000],
                formats: vec![PcmFormat::S16],
            }),
        }
    }

    fn dummy() -> CardProbe {
        CardProbe {
            index: 1,
            id: "Dummy".into(),
            name: "Dummy".into(),
            long_name: "Dummy 1".into(),
            driver: "Dummy".into(),
            pcms: vec![
                pcm(0, Direction::Playback),
                pcm(0, Direction::Capture),
                pcm(1, Direction::Playback),
                pcm(1, Direction::Capture),
            ],
            ucm: None,
        }
    }

    fn out(name: &str, comment: &str, pcm: &str, prio: u32) -> UcmDevice {
        UcmDevice {
            name: name.into(),
            comment: comment.into(),
            playback_pcm: Some(pcm.into()),
            playback_priority: Some(prio),
            ..UcmDevice::default()
        }
    }

    /// The configuration of crates/daemon/tests/data/ucm2, as alsa-lib reads it.
    fn config() -> UcmConfig {
        UcmConfig {
            verbs: vec![
                UcmVerb {
                    name: "Voice Call".into(),
                    comment: "Make a phone call".into(),
                    devices: vec![
                        out("Earpiece", "Earpiece", "hw:Dummy,1", 100),
                        UcmDevice {
                            name: "Mic".into(),
                            comment: "Internal Microphone".into(),
                            capture_pcm: Some("hw:Dummy,1".into()),
                            capture_priority: Some(100),
                            ..UcmDevice::default()
                        },
                    ],
                },
                UcmVerb {
                    name: "HiFi".into(),
                    comment: "Play HiFi quality Music".into(),
                    devices: vec![
                        UcmDevice {
                            playback_element: Some("Synth".into()),
                            conflicting: vec!["Headphones".into()],
                            ..out("Speaker", "Speaker", "hw:Dummy,0", 100)
                        },
                        UcmDevice {
                            playback_element: Some("Synth".into()),
                            jack: Some("Headphone Jack".into()),
                            ..out("Headphones", "Headphones", "hw:Dummy,0", 200)
                        },
                        UcmDevice {
                            name: "Mic".into(),
                            comment: "Internal Microphone".into(),
                            capture_pcm: Some("hw:Dummy,0".into()),
                            capture_priority: Some(100),
                            capture_element: Some("CD".into()),
                            ..UcmDevice::default()
                        },
                    ],
                },
            ],
        }
    }

    #[test]
    fn one_profile_per_verb_best_first_and_off() {
        let p = build_profiles(&dummy(), &config(), 48_000);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let names: Vec<&str> = p.profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["HiFi", "Voice Call", "off"]);
        let hifi = p.default_profile();
        assert_eq!(hifi.description, "Play HiFi quality Music");
        assert_eq!(hifi.verb.as_deref(), Some("HiFi"));
        assert!(hifi.priority > p.get("Voice Call").unwrap().priority);
        assert_eq!(p.get("off").unwrap().verb, None);
    }

    #[test]
    fn devices_on_the_verbs_pcm_are_its_ports_best_first() {
        let p = build_profiles(&dummy(), &config(), 48_000);
        let hifi = p.get("HiFi").unwrap();
        assert_eq!((hifi.outputs.len(), hifi.inputs.len()), (1, 1));
        let o = &hifi.outputs[0];
        assert_eq!((o.name.as_str(), o.device, o.channels), ("HiFi-hw0", 0, 2));
        let ports: Vec<(&str, u32, Option<&str>)> = o
            .ucm_ports
            .iter()
            .map(|p| (p.name.as_str(), p.priority, p.jack.as_deref()))
            .collect();
        assert_eq!(
            ports,
            [
                ("[Out] Headphones", 200, Some("Headphone Jack")),
                ("[Out] Speaker", 100, None)
            ]
        );
        assert_eq!(o.port, "[Out] Headphones");
        assert_eq!(o.ucm_ports[1].element.as_deref(), Some("Synth"));
        let i = &hifi.inputs[0];
        assert_eq!(i.ucm_ports[0].name, "[In] Mic");
        assert_eq!(i.ucm_ports[0].description, "Internal Microphone");
        assert_eq!(i.ucm_ports[0].element.as_deref(), Some("CD"));
        // Same PCM both ways: one duplex device, as for probed profiles.
        assert_eq!(o.name, i.name);
        let call = p.get("Voice Call").unwrap();
        assert_eq!(call.outputs[0].device, 1);
        assert_eq!(call.outputs[0].port, "[Out] Earpiece");
        // One PCM per direction: the verb's own description.
        assert_eq!(o.description, "Play HiFi quality Music");
    }

    #[test]
    fn pcms_elsewhere_unusable_or_missing_are_reported() {
        let mut c = config();
        c.verbs[1]
            .devices
            .push(out("HDMI", "HDMI", "hw:Dummy,1", 50));
        c.verbs[1]
            .devices
            .push(out("Other", "Other", "hw:PCH,0", 50));
        c.verbs[0].devices[0].playback_pcm = Some("hw:Dummy,7".into());
        c.verbs[0].devices[1].capture_pcm = Some("dmix:Dummy".into());
        let p = build_profiles(&dummy(), &c, 48_000);
        let problems = p.problems.join("\n");
        assert!(
            problems.contains("'Other': PCM 'hw:PCH,0' is not on this card"),
            "{problems}"
        );
        assert!(
            problems.contains("has no playback PCM device 7"),
            "{problems}"
        );
        assert!(
            problems.contains("'dmix:Dummy' is not a hw: PCM"),
            "{problems}"
        );
        assert!(
            problems.contains("UCM verb 'Voice Call' has no usable device; no profile"),
            "{problems}"
        );
        let names: Vec<&str> = p.profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["HiFi", "off"]);
        assert!(!problems.contains("HDMI"), "{problems}");
        // A rate the PCM does not run at leaves the verb without that direction.
        let p = build_profiles(&dummy(), &config(), 96_000);
        assert_eq!(p.profiles.len(), 1, "{:?}", p.profiles);
        assert!(
            p.problems
                .iter()
                .any(|e| e.contains("does not run at 96000 Hz"))
        );
    }

    #[test]
    fn devices_on_other_pcms_of_a_verb_are_sinks_of_their_own() {
        // A laptop with SOF: speaker and headphones on PCM 0, HDMI on PCM 1, each with
        // a sink of its own in the one profile (and in the order of their best device).
        let mut c = config();
        c.verbs[1].devices.push(UcmDevice {
            jack: Some("HDMI/DP,pcm=1 Jack".into()),
            ..out("HDMI1", "HDMI / DisplayPort 1 Output", "hw:Dummy,1", 500)
        });
        let p = build_profiles(&dummy(), &c, 48_000);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let hifi = p.get("HiFi").unwrap();
        assert_eq!((hifi.sinks(), hifi.sources()), (2, 1));
        let outs: Vec<(&str, u32, &str, &str)> = hifi
            .outputs
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.device,
                    m.port.as_str(),
                    m.description.as_str(),
                )
            })
            .collect();
        assert_eq!(
            outs,
            [
                (
                    "HiFi-hw1",
                    1,
                    "[Out] HDMI1",
                    "Play HiFi quality Music (HDMI / DisplayPort 1 Output)"
                ),
                (
                    "HiFi-hw0",
                    0,
                    "[Out] Headphones",
                    "Play HiFi quality Music (Headphones / Speaker)"
                ),
            ]
        );
        assert_eq!(hifi.outputs[0].port_kind, PortKind::Hdmi);
        assert_eq!(hifi.outputs[0].ucm_ports.len(), 1);
        assert_eq!(hifi.outputs[1].ucm_ports.len(), 2);
        // Opened as three devices: HDMI alone, then speaker/headphones with the mic
        // (same PCM, same mapping name: duplex).
        let t = crate::alsa::config::AlsaConfig::default();
        let d = crate::alsa::cards::devices_for(&dummy(), hifi, &t);
        let opened: Vec<(&str, bool, bool)> = d
            .iter()
            .map(|d| (d.config.pcm.as_str(), d.config.playback, d.config.capture))
            .collect();
        assert_eq!(
            opened,
            [("hw:Dummy,1", true, false), ("hw:Dummy,0", true, true)]
        );
    }

    #[test]
    fn pcm_names_and_verb_priorities() {
        let c = dummy();
        assert_eq!(pcm_device(&c, "hw:Dummy,1"), Ok(1));
        assert_eq!(pcm_device(&c, "hw:1"), Ok(0));
        assert_eq!(pcm_device(&c, "plughw:CARD=Dummy,DEV=2"), Ok(2));
        assert!(pcm_device(&c, "hw:0,0").is_err());
        assert!(verb_priority("HiFi") > verb_priority("Voice_Call"));
        assert!(verb_priority("Voice Call") > verb_priority("Something Else"));
    }
}
