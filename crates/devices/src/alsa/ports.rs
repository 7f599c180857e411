//! The analog ports a card has, from its mixer element names and jack controls, with
//! PulseAudio's names and priorities (headphones above line out above speakers;
//! microphones likewise). Pure: names in, ports out. docs/alsa/ports.md.

use super::jack::{Jack, port_of_jack};

/// One analog port the card's controls reveal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnalogPort {
    /// PulseAudio's name: "analog-output-headphones", "analog-output" (the fallback), …
    pub name: &'static str,
    /// "Headphones", …
    pub description: &'static str,
    /// Higher is preferred.
    pub priority: u32,
    /// `Some(plugged)` from its jack; `None` without one (availability unknown).
    pub plugged: Option<bool>,
}

/// (port, description, priority, mixer element that reveals it). A jack mapped to the
/// port by [`port_of_jack`] reveals it too.
const OUTPUTS: &[(&str, &str, u32, &str)] = &[
    ("analog-output-headphones", "Headphones", 9900, "Headphone"),
    ("analog-output-lineout", "Line Out", 9100, "Line Out"),
    ("analog-output-speaker", "Speakers", 9000, "Speaker"),
];

const INPUTS: &[(&str, &str, u32, &str)] = &[
    (
        "analog-input-internal-mic",
        "Internal Microphone",
        8900,
        "Internal Mic",
    ),
    (
        "analog-input-headset-mic",
        "Headset Microphone",
        8800,
        "Headset Mic",
    ),
    ("analog-input-mic", "Microphone", 8700, "Mic"),
    ("analog-input-dock-mic", "Dock Microphone", 7800, "Dock Mic"),
    ("analog-input-linein", "Line In", 8100, "Line"),
];

/// The fallback port's priority: below every port the controls name.
pub const FALLBACK_PRIORITY: u32 = 8000;

/// The analog output (`output`) or input ports of a card whose simple mixer elements
/// are `elements` and whose jack controls are `jacks`. A port exists when its element
/// or its jack does; its availability is its jack's (plugged if any of its jacks is).
/// The generic `analog-output` / `analog-input` stays as a fallback while no port
/// without a jack (one that is always there, like speakers) is known. Empty when
/// nothing is known (the card keeps its generic port).
pub fn analog_ports(elements: &[String], jacks: &[Jack], output: bool) -> Vec<AnalogPort> {
    let (table, (fallback, fallback_description)) = if output {
        (OUTPUTS, ("analog-output", "Analog Output"))
    } else {
        (INPUTS, ("analog-input", "Analog Input"))
    };
    let mut ports: Vec<AnalogPort> = Vec::new();
    for &(name, description, priority, element) in table {
        let mut plugged: Option<bool> = None;
        for j in jacks.iter().filter(|j| !j.removed) {
            if port_of_jack(&j.name) == Some((name, output)) {
                plugged = Some(plugged.unwrap_or(false) || j.plugged);
            }
        }
        if plugged.is_none() && !elements.iter().any(|e| e == element) {
            continue;
        }
        ports.push(AnalogPort {
            name,
            description,
            priority,
            plugged,
        });
    }
    if ports.is_empty() {
        return ports;
    }
    if ports.iter().all(|p| p.plugged.is_some()) {
        ports.push(AnalogPort {
            name: fallback,
            description: fallback_description,
            priority: FALLBACK_PRIORITY,
            plugged: None,
        });
    }
    ports
}

/// The mixer elements to switch on and off when `port` becomes a sink's active port:
/// (on, off). Headphones mute the speakers; speakers and line out mute the headphones;
/// the fallback port touches nothing.
pub fn output_switches(port: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match port {
        "analog-output-headphones" => (&["Headphone"], &["Speaker"]),
        "analog-output-speaker" => (&["Speaker"], &["Headphone"]),
        "analog-output-lineout" => (&["Line Out"], &["Headphone"]),
        _ => (&[], &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jack(name: &str, plugged: bool) -> Jack {
        Jack {
            name: name.into(),
            index: 0,
            plugged,
            removed: false,
        }
    }

    fn names(ports: &[AnalogPort]) -> Vec<(&str, Option<bool>)> {
        ports.iter().map(|p| (p.name, p.plugged)).collect()
    }

    #[test]
    fn nothing_known_keeps_the_generic_port() {
        let els = vec!["Master".to_string(), "PCM".to_string()];
        assert!(analog_ports(&els, &[], true).is_empty());
        assert!(analog_ports(&els, &[jack("HDMI/DP,pcm=3 Jack", true)], true).is_empty());
    }

    #[test]
    fn a_headphone_jack_alone_adds_headphones_beside_the_fallback() {
        let ports = analog_ports(&[], &[jack("Headphone Jack", true)], true);
        assert_eq!(
            names(&ports),
            [
                ("analog-output-headphones", Some(true)),
                ("analog-output", None)
            ]
        );
        assert!(ports[0].priority > ports[1].priority);
        let mut gone = jack("Headphone Jack", false);
        gone.removed = true;
        assert!(analog_ports(&[], &[gone], true).is_empty());
    }

    #[test]
    fn a_laptop_has_speakers_and_headphones_and_mics() {
        let els: Vec<String> = [
            "Master",
            "Headphone",
            "Speaker",
            "Mic",
            "Internal Mic",
            "Capture",
        ]
        .map(String::from)
        .to_vec();
        let jacks = [
            jack("Headphone Jack", false),
            jack("Front Mic Jack", false),
            jack("Rear Mic Jack", true),
        ];
        let out = analog_ports(&els, &jacks, true);
        assert_eq!(
            names(&out),
            [
                ("analog-output-headphones", Some(false)),
                ("analog-output-speaker", None)
            ]
        );
        assert!(
            out[0].priority > out[1].priority,
            "headphones above speakers"
        );
        let inp = analog_ports(&els, &jacks, false);
        assert_eq!(
            names(&inp),
            [
                ("analog-input-internal-mic", None),
                ("analog-input-mic", Some(true))
            ]
        );
        // A Headphone element without a jack: the port, availability unknown.
        let out = analog_ports(&els, &[], true);
        assert_eq!(
            out[0],
            AnalogPort {
                name: "analog-output-headphones",
                description: "Headphones",
                priority: 9900,
                plugged: None,
            }
        );
    }

    #[test]
    fn headphones_mute_the_speakers_and_back() {
        assert_eq!(
            output_switches("analog-output-headphones"),
            (&["Headphone"][..], &["Speaker"][..])
        );
        assert_eq!(
            output_switches("analog-output-speaker"),
            (&["Speaker"][..], &["Headphone"][..])
        );
        assert_eq!(output_switches("analog-output"), (&[][..], &[][..]));
    }
}
