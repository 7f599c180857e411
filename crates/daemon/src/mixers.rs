//! Hardware volume for ALSA devices: opens the mixer of each opened card and attaches
//! the element a desktop server would use to the device's sink and source
//! (docs/alsa/mixer.md). Anything that goes wrong leaves that device on software volume
//! and says why. The same watch thread reports the card's jacks (docs/alsa/jacks.md);
//! until cards have ports, their availability is logged.

use quaver_devices::alsa::jack::{Jack, port_of_jack};
use quaver_devices::alsa::mixer::{Mixer, NoElement, card_of_pcm};
use quaver_devices::spec::{DeviceDefaults, DeviceSpec, parse_spec};
use quaver_engine::Engine;
use std::sync::Arc;

/// Attaches hardware volumes to the devices opened from `opened` (engine device index,
/// spec as configured). Returns the mixers, which the caller keeps for as long as it
/// serves (their watch threads end when they are dropped).
pub(crate) fn attach(
    engine: &Engine,
    opened: &[(usize, String)],
    defaults: &DeviceDefaults,
) -> Vec<Mixer> {
    let mut mixers = Vec::new();
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
        watch_jacks(&mixer, &card);
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
    mixers
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
