//! Sound cards as a desktop sound server presents them: every card the kernel has, its
//! PCM devices per direction and what each one really negotiates ([`discover`]), and the
//! profiles built from that ([`build_profiles`]), named like PulseAudio's
//! (`output:analog-stereo+input:analog-stereo`, `output:hdmi-stereo`, `off`, …).
//!
//! Discovery reads the control interface (`snd_ctl_card_info`, `snd_ctl_pcm_next_device`,
//! `snd_ctl_pcm_info`) and opens each PCM non-blocking on `hw:CARD,DEV` just long enough
//! to read its configuration space (channel counts, rates, formats); a busy or failing
//! PCM is reported, never waited for. Profile building is pure (probe data in, profiles
//! out), so it is tested on machines without sound cards. docs/alsa/discovery.md.

use super::config::AlsaConfig;
use super::ffi::{self, Lib, Opaque};
use super::params::{Direction, PcmFormat};
use super::ucm::{Ucm, UcmPort};
use super::{card_numbers, unavailable};
use crate::DeviceError;
use quaver_dsp::ChannelMap;
use std::ffi::{CString, c_int, c_uint};
use std::sync::Arc;

/// Channel counts a probe tests: what the profiles below can use.
const PROBED_CHANNELS: [u32; 5] = [1, 2, 4, 6, 8];
/// Rates a probe tests (besides the range).
const PROBED_RATES: [u32; 6] = [32_000, 44_100, 48_000, 88_200, 96_000, 192_000];

/// What a PCM's configuration space allows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PcmCaps {
    /// Fewest and most channels.
    pub channels_min: u32,
    /// Most channels.
    pub channels_max: u32,
    /// Which of 1, 2, 4, 6 and 8 channels it accepts.
    pub channel_counts: Vec<u32>,
    /// Lowest rate in Hz.
    pub rate_min: u32,
    /// Highest rate in Hz.
    pub rate_max: u32,
    /// Which of the common rates (32 kHz … 192 kHz) it accepts.
    pub rates: Vec<u32>,
    /// The formats quaver converts to and from that it accepts.
    pub formats: Vec<PcmFormat>,
}

impl PcmCaps {
    /// Whether it runs at `rate` Hz (a tested common rate, or inside a continuous range).
    pub fn has_rate(&self, rate: u32) -> bool {
        if PROBED_RATES.contains(&rate) {
            self.rates.contains(&rate)
        } else {
            (self.rate_min..=self.rate_max).contains(&rate)
        }
    }
}

/// One PCM device of a card in one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcmProbe {
    /// The device number (`hw:CARD,DEV`).
    pub device: u32,
    /// Playback or capture.
    pub dir: Direction,
    /// The driver's id for it (`snd_pcm_info_get_id`), e.g. "HDMI 0".
    pub id: String,
    /// The driver's name for it, e.g. "ALC257 Analog".
    pub name: String,
    /// What it negotiates, or why it could not be probed (busy, refused).
    pub caps: Result<PcmCaps, String>,
}

/// A sound card and its PCMs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardProbe {
    /// The kernel's card number.
    pub index: i32,
    /// The card's id, e.g. "Loopback", "PCH" (stable across reboots, usable as `hw:ID`).
    pub id: String,
    /// Its name, e.g. "HDA Intel PCH".
    pub name: String,
    /// Its long name (with the bus address).
    pub long_name: String,
    /// The kernel driver, e.g. "HDA-Intel".
    pub driver: String,
    /// Every PCM device, per direction, in device order.
    pub pcms: Vec<PcmProbe>,
    /// Its UCM configuration and open use case manager, when it has one that loads:
    /// then the verbs define the profiles ([`super::ucm`]).
    pub ucm: Option<Arc<Ucm>>,
}

/// What kind of connector a mapping drives (for the port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// Analog line/speaker/headphone or microphone.
    Analog,
    /// HDMI or DisplayPort.
    Hdmi,
    /// S/PDIF (IEC958).
    Spdif,
}

/// One way to use one PCM in one direction: PulseAudio's "mapping".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// "analog-stereo", "analog-surround-51", "hdmi-stereo-extra1", …
    pub name: String,
    /// "Analog Stereo", "Digital Stereo (HDMI 2)", …
    pub description: String,
    /// Playback (a sink) or capture (a source).
    pub dir: Direction,
    /// The PCM device number.
    pub device: u32,
    /// Channels it opens.
    pub channels: u32,
    /// Higher is preferred.
    pub priority: u32,
    /// The port it offers: "analog-output", "hdmi-output-0", "iec958-stereo-input", …
    pub port: String,
    /// The port's description.
    pub port_description: String,
    /// The port's connector.
    pub port_kind: PortKind,
    /// From a UCM verb: every device on this PCM as a port, best first (the first is
    /// `port`). Empty for probed mappings.
    pub ucm_ports: Vec<UcmPort>,
}

/// A card profile: which mappings are open together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// "output:analog-stereo+input:analog-stereo", "off", …
    pub name: String,
    /// "Analog Stereo Output + Analog Stereo Input", "Off", …
    pub description: String,
    /// Higher is preferred: output priority × 100 + input priority, as PulseAudio does.
    pub priority: u32,
    /// The sinks' mappings: at most one for a probed profile; one per PCM device for a
    /// UCM verb (a laptop's speaker/headphone PCM and its HDMI PCMs, say).
    pub outputs: Vec<Mapping>,
    /// The sources' mappings, likewise.
    pub inputs: Vec<Mapping>,
    /// The UCM verb it sets, for a card with a UCM configuration.
    pub verb: Option<String>,
}

impl Profile {
    /// The profile that opens nothing.
    pub fn off() -> Profile {
        Profile {
            name: "off".into(),
            description: "Off".into(),
            priority: 0,
            outputs: Vec::new(),
            inputs: Vec::new(),
            verb: None,
        }
    }

    /// Sinks it opens.
    pub fn sinks(&self) -> u32 {
        self.outputs.len() as u32
    }
    /// Sources it opens.
    pub fn sources(&self) -> u32 {
        self.inputs.len() as u32
    }

    /// Every mapping: the outputs, then the inputs.
    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.outputs.iter().chain(&self.inputs)
    }

    /// The mapping called `name` in direction `dir`.
    pub fn mapping(&self, dir: Direction, name: &str) -> Option<&Mapping> {
        self.mappings().find(|m| m.dir == dir && m.name == name)
    }
}

/// A card's profiles, best first and `off` last, and what was left out and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardProfiles {
    /// Every profile; the first is the default (the best duplex one when there is one).
    pub profiles: Vec<Profile>,
    /// One line per PCM that offers nothing usable, saying why.
    pub problems: Vec<String>,
}

impl CardProfiles {
    /// The default profile: the highest priority (a duplex one when the card has both
    /// directions), `off` when nothing else exists.
    pub fn default_profile(&self) -> &Profile {
        &self.profiles[0]
    }

    /// The profile called `name`.
    pub fn get(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }
}

/// How a PCM's id and name classify it.
fn port_kind_of(pcm: &PcmProbe) -> PortKind {
    let text = format!("{} {}", pcm.id, pcm.name).to_ascii_uppercase();
    if text.contains("HDMI") || text.contains("DISPLAYPORT") {
        PortKind::Hdmi
    } else if text.contains("IEC958") || text.contains("SPDIF") || text.contains("S/PDIF") {
        PortKind::Spdif
    } else {
        PortKind::Analog
    }
}

/// "card 'NAME' (ID) PCM hw:ID,DEV DIRECTION": how a problem names a PCM.
fn pcm_label(card: &CardProbe, pcm: &PcmProbe) -> String {
    format!(
        "card '{}' ({}) PCM hw:{},{} {}",
        card.name,
        card.id,
        card.id,
        pcm.device,
        pcm.dir.name()
    )
}

/// The usable capabilities of `pcm` at `rate`, or why it is not usable.
pub(crate) fn usable(card: &CardProbe, pcm: &PcmProbe, rate: u32) -> Result<PcmCaps, String> {
    let what = format!("{} '{}'", pcm_label(card, pcm), pcm.name);
    let caps = pcm.caps.as_ref().map_err(|e| format!("{what}: {e}"))?;
    if caps.formats.is_empty() {
        return Err(format!(
            "{what}: accepts none of the formats FLOAT_LE, S32_LE, S24_LE, S24_3LE, S16_LE"
        ));
    }
    if !caps.has_rate(rate) {
        return Err(format!(
            "{what}: does not run at {rate} Hz (offers {}..{} Hz; one engine runs one rate)",
            caps.rate_min, caps.rate_max
        ));
    }
    Ok(caps.clone())
}

/// Every mapping `card` offers at `rate`, and what was left out and why.
pub fn mappings(card: &CardProbe, rate: u32) -> (Vec<Mapping>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for dir in [Direction::Playback, Direction::Capture] {
        let (suffix, word) = match dir {
            Direction::Playback => ("output", "Output"),
            Direction::Capture => ("input", "Input"),
        };
        let mut analog_done = false;
        let mut spdif_done = false;
        let mut hdmi = 0u32;
        for pcm in card.pcms.iter().filter(|p| p.dir == dir) {
            let caps = match usable(card, pcm, rate) {
                Ok(c) => c,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            let has = |n: u32| caps.channel_counts.contains(&n);
            let base = |name: &str, desc: &str, channels: u32, priority: u32| Mapping {
                name: name.to_string(),
                description: desc.to_string(),
                dir,
                device: pcm.device,
                channels,
                priority,
                port: format!("analog-{suffix}"),
                port_description: format!("Analog {word}"),
                port_kind: PortKind::Analog,
                ucm_ports: Vec::new(),
            };
            match port_kind_of(pcm) {
                PortKind::Analog if !analog_done => {
                    analog_done = true;
                    let before = out.len();
                    if has(2) {
                        out.push(base("analog-stereo", "Analog Stereo", 2, 15));
                    }
                    if dir == Direction::Playback && has(6) {
                        out.push(base("analog-surround-51", "Analog Surround 5.1", 6, 13));
                    }
                    if !has(2) && has(1) {
                        out.push(base("analog-mono", "Analog Mono", 1, 2));
                    }
                    if out.len() == before {
                        problems.push(format!(
                            "{}: opens {}..{} channels, none of 1, 2 or 6",
                            pcm_label(card, pcm),
                            caps.channels_min,
                            caps.channels_max
                        ));
                    }
                }
                PortKind::Hdmi if dir == Direction::Playback && has(2) => {
                    let (name, desc, port_desc) = if hdmi == 0 {
                        (
                            "hdmi-stereo".to_string(),
                            "Digital Stereo (HDMI)".to_string(),
                            "HDMI / DisplayPort".to_string(),
                        )
                    } else {
                        (
                            format!("hdmi-stereo-extra{hdmi}"),
                            format!("Digital Stereo (HDMI {})", hdmi + 1),
                            format!("HDMI / DisplayPort {}", hdmi + 1),
                        )
                    };
                    out.push(Mapping {
                        port: format!("hdmi-output-{hdmi}"),
                        port_description: port_desc,
                        port_kind: PortKind::Hdmi,
                        ..base(&name, &desc, 2, if hdmi == 0 { 9 } else { 8 })
                    });
                    hdmi += 1;
                }
                PortKind::Spdif if !spdif_done && has(2) => {
                    spdif_done = true;
                    out.push(Mapping {
                        port: format!("iec958-stereo-{suffix}"),
                        port_description: format!("Digital {word} (S/PDIF)"),
                        port_kind: PortKind::Spdif,
                        ..base("iec958-stereo", "Digital Stereo (IEC958)", 2, 5)
                    });
                }
                // A second analog PCM (a loopback cable's other end, a dummy card's
                // extra devices): PulseAudio's default profile set uses the first only.
                _ => {}
            }
        }
    }
    (out, problems)
}

/// The profiles `card`'s PCMs offer at `rate` (see the module docs), best first, `off`
/// last. A card with a UCM configuration gets its profiles from it instead:
/// [`super::ucm::profiles::card_profiles`] chooses.
pub fn build_profiles(card: &CardProbe, rate: u32) -> CardProfiles {
    let (maps, problems) = mappings(card, rate);
    let outs: Vec<&Mapping> = maps
        .iter()
        .filter(|m| m.dir == Direction::Playback)
        .collect();
    let ins: Vec<&Mapping> = maps
        .iter()
        .filter(|m| m.dir == Direction::Capture)
        .collect();
    let mut profiles = Vec::new();
    let profile = |o: Option<&Mapping>, i: Option<&Mapping>| {
        let mut names = Vec::new();
        let mut descs = Vec::new();
        if let Some(o) = o {
            names.push(format!("output:{}", o.name));
            descs.push(format!("{} Output", o.description));
        }
        if let Some(i) = i {
            names.push(format!("input:{}", i.name));
            descs.push(format!("{} Input", i.description));
        }
        Profile {
            name: names.join("+"),
            description: descs.join(" + "),
            priority: o.map_or(0, |m| m.priority * 100) + i.map_or(0, |m| m.priority),
            outputs: o.into_iter().cloned().collect(),
            inputs: i.into_iter().cloned().collect(),
            verb: None,
        }
    };
    for o in &outs {
        profiles.push(profile(Some(o), None));
        for i in &ins {
            profiles.push(profile(Some(o), Some(i)));
        }
    }
    for i in &ins {
        profiles.push(profile(None, Some(i)));
    }
    // Stable: equal priorities keep the order above (outputs in device order).
    profiles.sort_by_key(|p| std::cmp::Reverse(p.priority));
    profiles.push(Profile::off());
    CardProfiles { profiles, problems }
}

/// One device to open for a card's profile.
#[derive(Debug, Clone, PartialEq)]
pub struct CardDevice {
    /// How to open it (`hw:ID,DEV`, channels, directions, the device name).
    pub config: AlsaConfig,
    /// The sink and source description: the card's name and the mapping's.
    pub description: String,
    /// The output mapping it carries, if any.
    pub output: Option<String>,
    /// The input mapping it carries, if any.
    pub input: Option<String>,
}

/// The device name of `mapping` on the card `id`: `ID.MAPPING` (the engine names its
/// nodes `ID.MAPPING-sink` and `ID.MAPPING-source`).
pub fn device_name(card_id: &str, mapping: &str) -> String {
    format!("{card_id}.{mapping}")
}

/// The devices to open for `profile` of `card`, with `template`'s rate and options:
/// one playback+capture device for an output and an input that are the same mapping on
/// one PCM device (one clock, started together), else one device per mapping.
pub fn devices_for(card: &CardProbe, profile: &Profile, template: &AlsaConfig) -> Vec<CardDevice> {
    let make = |m: &Mapping, playback: bool, capture: bool| CardDevice {
        config: AlsaConfig {
            pcm: format!("hw:{},{}", card.id, m.device),
            channels: ChannelMap::default_for(m.channels as usize),
            playback,
            capture,
            name: device_name(&card.id, &m.name),
            ..template.clone()
        },
        description: format!("{} {}", card.name, m.description),
        output: playback.then(|| m.name.clone()),
        input: capture.then(|| m.name.clone()),
    };
    let duplex = |o: &Mapping, i: &Mapping| {
        o.device == i.device && o.name == i.name && o.channels == i.channels
    };
    let mut devices = Vec::new();
    for o in &profile.outputs {
        let both = profile.inputs.iter().any(|i| duplex(o, i));
        devices.push(make(o, true, both));
    }
    for i in &profile.inputs {
        if !profile.outputs.iter().any(|o| duplex(o, i)) {
            devices.push(make(i, false, true));
        }
    }
    devices
}

/// Every card the kernel has, each with its PCMs probed; a card whose control
/// interface cannot be read is an `Err` naming it. Empty without kernel ALSA.
/// *control* (opens and closes each PCM once).
pub fn discover() -> Result<Vec<Result<CardProbe, String>>, DeviceError> {
    let lib = ffi::lib().map_err(unavailable)?;
    Ok(card_numbers(lib)
        .map(|card| probe_card(lib, card))
        .collect())
}

/// Card `index` alone, probed as [`discover`] probes each card (a card plugged in).
/// *control* (opens and closes each PCM once).
pub fn probe(index: u32) -> Result<CardProbe, String> {
    let lib = ffi::lib().map_err(|e| format!("card {index}: {e}"))?;
    probe_card(lib, index as c_int)
}

/// An alsa-lib object freed (`snd_*_free`, `R` = `()`) or a handle closed
/// (`snd_ctl_close`, `snd_pcm_close`, `R` = `c_int`) when dropped.
struct Owned<R = ()>(*mut Opaque, unsafe extern "C" fn(*mut Opaque) -> R);

impl Owned {
    /// An object from `malloc` (`snd_*_malloc`), freed with `free`; `None` when out of
    /// memory.
    fn alloc(
        malloc: unsafe extern "C" fn(*mut *mut Opaque) -> c_int,
        free: unsafe extern "C" fn(*mut Opaque),
    ) -> Option<Owned> {
        let mut p = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        (unsafe { malloc(&mut p) } >= 0).then_some(Owned(p, free))
    }
}

impl<R> Drop for Owned<R> {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by the matching _malloc, or opened by the matching
            // _open, and freed or closed once.
            unsafe { (self.1)(self.0) };
        }
    }
}

/// Reads card `index`'s identity and probes each of its PCMs.
fn probe_card(lib: &'static Lib, index: c_int) -> Result<CardProbe, String> {
    let ctl_name = format!("hw:{index}");
    let cname = CString::new(ctl_name.clone()).expect("no NUL");
    let mut ctl = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    let rc = unsafe { (lib.ctl_open)(&mut ctl, cname.as_ptr(), 0) };
    if rc < 0 {
        return Err(format!(
            "card {index}: snd_ctl_open('{ctl_name}'): {}",
            lib.error_text(rc)
        ));
    }
    let ctl = Owned(ctl, lib.ctl_close);
    let info = Owned::alloc(lib.ctl_card_info_malloc, lib.ctl_card_info_free)
        .ok_or_else(|| format!("card {index}: out of memory"))?;
    // SAFETY: open control handle, allocated info.
    let rc = unsafe { (lib.ctl_card_info)(ctl.0, info.0) };
    if rc < 0 {
        return Err(format!(
            "card {index}: snd_ctl_card_info: {}",
            lib.error_text(rc)
        ));
    }
    // SAFETY: the getters return strings inside `info`, copied at once.
    let text = |f: unsafe extern "C" fn(*const Opaque) -> *const std::ffi::c_char| unsafe {
        ffi::cstr_lossy(f(info.0)).unwrap_or_default()
    };
    let mut card = CardProbe {
        index,
        id: text(lib.ctl_card_info_get_id),
        name: text(lib.ctl_card_info_get_name),
        long_name: text(lib.ctl_card_info_get_longname),
        driver: text(lib.ctl_card_info_get_driver),
        pcms: Vec::new(),
        ucm: None,
    };
    if card.id.is_empty() {
        card.id = index.to_string();
    }
    let pinfo = Owned::alloc(lib.pcm_info_malloc, lib.pcm_info_free)
        .ok_or_else(|| format!("card '{}': out of memory", card.name))?;
    let mut dev: c_int = -1;
    loop {
        // SAFETY: open control handle, valid in/out pointer.
        if unsafe { (lib.ctl_pcm_next_device)(ctl.0, &mut dev) } < 0 || dev < 0 {
            break;
        }
        for dir in [Direction::Playback, Direction::Capture] {
            // SAFETY: allocated info; open control handle.
            let rc = unsafe {
                (lib.pcm_info_set_device)(pinfo.0, dev as c_uint);
                (lib.pcm_info_set_subdevice)(pinfo.0, 0);
                (lib.pcm_info_set_stream)(pinfo.0, dir.alsa());
                (lib.ctl_pcm_info)(ctl.0, pinfo.0)
            };
            if rc < 0 {
                // -ENOENT: the device has no such direction.
                continue;
            }
            // SAFETY: strings inside `pinfo`, copied at once.
            let (id, name, count, avail) = unsafe {
                (
                    ffi::cstr_lossy((lib.pcm_info_get_id)(pinfo.0)).unwrap_or_default(),
                    ffi::cstr_lossy((lib.pcm_info_get_name)(pinfo.0)).unwrap_or_default(),
                    (lib.pcm_info_get_subdevices_count)(pinfo.0),
                    (lib.pcm_info_get_subdevices_avail)(pinfo.0),
                )
            };
            let caps = if count > 0 && avail == 0 {
                Err(format!(
                    "busy: all {count} subdevices are open by another program"
                ))
            } else {
                probe_pcm(lib, &format!("hw:{index},{dev}"), dir)
            };
            card.pcms.push(PcmProbe {
                device: dev as u32,
                dir,
                id,
                name,
                caps,
            });
        }
    }
    // A UCM configuration that does not load is the card's problem, not a reason to
    // skip it: logged, and the card is probed as if it had none.
    let label = format!("card '{}' ({})", card.name, card.id);
    match super::ucm::open(index as u32, &label) {
        Ok(Some(ucm)) => {
            tracing::info!(
                "{label}: UCM configuration with verbs {:?}",
                ucm.config.verbs.iter().map(|v| &v.name).collect::<Vec<_>>()
            );
            card.ucm = Some(ucm);
        }
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}; profiles from PCM probing instead"),
    }
    Ok(card)
}

/// Opens `pcm` non-blocking for `dir`, reads its configuration space and closes it.
fn probe_pcm(lib: &'static Lib, pcm: &str, dir: Direction) -> Result<PcmCaps, String> {
    let cname = CString::new(pcm).map_err(|_| format!("PCM name '{pcm}' contains NUL"))?;
    let mut h = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    let rc = unsafe { (lib.pcm_open)(&mut h, cname.as_ptr(), dir.alsa(), ffi::SND_PCM_NONBLOCK) };
    if rc < 0 {
        return Err(format!(
            "snd_pcm_open('{pcm}', {}): {}",
            dir.name(),
            lib.error_text(rc)
        ));
    }
    let h = Owned(h, lib.pcm_close);
    let hw = Owned::alloc(lib.hw_malloc, lib.hw_free).ok_or("out of memory")?;
    // SAFETY (every call below): open PCM, its parameter space, out-pointers to locals.
    let rc = unsafe { (lib.hw_any)(h.0, hw.0) };
    if rc < 0 {
        return Err(format!(
            "snd_pcm_hw_params_any('{pcm}'): {}",
            lib.error_text(rc)
        ));
    }
    // Quaver moves interleaved frames only; a non-interleaved PCM (snd-dummy's odd
    // devices, some pro cards) is named here rather than failing when it is opened.
    let interleaved = [
        ffi::SND_PCM_ACCESS_MMAP_INTERLEAVED,
        ffi::SND_PCM_ACCESS_RW_INTERLEAVED,
    ]
    .into_iter()
    .any(|a| unsafe { (lib.hw_test_access)(h.0, hw.0, a) } == 0);
    if !interleaved {
        return Err(format!(
            "'{pcm}' offers no interleaved access (non-interleaved PCMs are not supported)"
        ));
    }
    let mut caps = PcmCaps::default();
    let mut d: c_int = 0;
    unsafe {
        (lib.hw_get_channels_min)(hw.0, &mut caps.channels_min);
        (lib.hw_get_channels_max)(hw.0, &mut caps.channels_max);
        (lib.hw_get_rate_min)(hw.0, &mut caps.rate_min, &mut d);
        (lib.hw_get_rate_max)(hw.0, &mut caps.rate_max, &mut d);
    }
    caps.channel_counts = PROBED_CHANNELS
        .into_iter()
        .filter(|&n| unsafe { (lib.hw_test_channels)(h.0, hw.0, n) } == 0)
        .collect();
    caps.rates = PROBED_RATES
        .into_iter()
        .filter(|&r| unsafe { (lib.hw_test_rate)(h.0, hw.0, r, 0) } == 0)
        .collect();
    caps.formats = PcmFormat::FALLBACK
        .into_iter()
        .filter(|f| unsafe { (lib.hw_test_format)(h.0, hw.0, f.alsa()) } == 0)
        .collect();
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(channels: &[u32], rates: &[u32], formats: &[PcmFormat]) -> Result<PcmCaps, String> {
        Ok(PcmCaps {
            channels_min: *channels.iter().min().unwrap_or(&0),
            channels_max: *channels.iter().max().unwrap_or(&0),
            channel_counts: channels.to_vec(),
            rate_min: *rates.iter().min().unwrap_or(&0),
            rate_max: *rates.iter().max().unwrap_or(&0),
            rates: rates.to_vec(),
            formats: formats.to_vec(),
        })
    }

    fn pcm(device: u32, dir: Direction, name: &str, caps: Result<PcmCaps, String>) -> PcmProbe {
        PcmProbe {
            device,
            dir,
            id: name.to_string(),
            name: name.to_string(),
            caps,
        }
    }

    fn card(pcms: Vec<PcmProbe>) -> CardProbe {
        CardProbe {
            index: 0,
            id: "PCH".into(),
            name: "HDA Intel PCH".into(),
            long_name: "HDA Intel PCH at 0xf7f10000 irq 32".into(),
            driver: "HDA-Intel".into(),
            pcms,
            ucm: None,
        }
    }

    fn names(p: &CardProfiles) -> Vec<&str> {
        p.profiles.iter().map(|p| p.name.as_str()).collect()
    }

    const STEREO_48K: fn() -> Result<PcmCaps, String> = || {
        caps(
            &[1, 2],
            &[44_100, 48_000],
            &[PcmFormat::S16, PcmFormat::S32],
        )
    };

    /// A laptop codec: analog duplex with 5.1 out, one HDMI output, an S/PDIF output.
    fn laptop() -> CardProbe {
        card(vec![
            pcm(
                0,
                Direction::Playback,
                "ALC892 Analog",
                caps(&[2, 4, 6, 8], &[48_000], &[PcmFormat::S32]),
            ),
            pcm(0, Direction::Capture, "ALC892 Analog", STEREO_48K()),
            pcm(1, Direction::Playback, "ALC892 Digital", STEREO_48K()),
            pcm(3, Direction::Playback, "HDMI 0", STEREO_48K()),
        ])
    }

    #[test]
    fn a_laptop_codec_gets_pulseaudios_profiles_best_first() {
        let p = build_profiles(&laptop(), 48_000);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        // "ALC892 Digital" names no connector: it is not taken for S/PDIF.
        assert_eq!(
            names(&p),
            [
                "output:analog-stereo+input:analog-stereo",
                "output:analog-stereo",
                "output:analog-surround-51+input:analog-stereo",
                "output:analog-surround-51",
                "output:hdmi-stereo+input:analog-stereo",
                "output:hdmi-stereo",
                "input:analog-stereo",
                "off",
            ]
        );
        let best = p.default_profile();
        assert_eq!(
            best.description,
            "Analog Stereo Output + Analog Stereo Input"
        );
        assert_eq!(best.priority, 1515);
        assert_eq!((best.sinks(), best.sources()), (1, 1));
        let hdmi = p.get("output:hdmi-stereo").unwrap();
        assert_eq!(hdmi.description, "Digital Stereo (HDMI) Output");
        let m = &hdmi.outputs[0];
        assert_eq!((m.device, m.port.as_str()), (3, "hdmi-output-0"));
        assert_eq!(m.port_kind, PortKind::Hdmi);
        let off = p.get("off").unwrap();
        assert_eq!((off.sinks(), off.sources(), off.priority), (0, 0, 0));
    }

    #[test]
    fn iec958_and_extra_hdmi_outputs_are_named_like_pulseaudio() {
        let c = card(vec![
            pcm(1, Direction::Playback, "ALC1220 IEC958", STEREO_48K()),
            pcm(1, Direction::Capture, "ALC1220 IEC958 In", STEREO_48K()),
            pcm(3, Direction::Playback, "HDMI 0", STEREO_48K()),
            pcm(7, Direction::Playback, "HDMI 1", STEREO_48K()),
        ]);
        let p = build_profiles(&c, 48_000);
        let n = names(&p);
        assert!(n.contains(&"output:hdmi-stereo-extra1"), "{n:?}");
        assert!(
            n.contains(&"output:iec958-stereo+input:iec958-stereo"),
            "{n:?}"
        );
        let extra = p.get("output:hdmi-stereo-extra1").unwrap();
        assert_eq!(extra.description, "Digital Stereo (HDMI 2) Output");
        let m = &extra.outputs[0];
        assert_eq!(m.port, "hdmi-output-1");
        let spdif = p.get("input:iec958-stereo").unwrap().inputs[0].clone();
        assert_eq!(spdif.port, "iec958-stereo-input");
        assert_eq!(spdif.port_description, "Digital Input (S/PDIF)");
        // HDMI (9) beats S/PDIF (5): the default is HDMI with the S/PDIF input.
        assert_eq!(
            p.default_profile().name,
            "output:hdmi-stereo+input:iec958-stereo"
        );
    }

    #[test]
    fn busy_refusing_and_wrong_rate_pcms_are_reported_and_skipped() {
        let c = card(vec![
            pcm(
                0,
                Direction::Playback,
                "Analog",
                Err("snd_pcm_open('hw:0,0', playback): Device or resource busy".into()),
            ),
            pcm(0, Direction::Capture, "Analog", caps(&[2], &[48_000], &[])),
            pcm(
                3,
                Direction::Playback,
                "HDMI 0",
                caps(&[2], &[44_100], &[PcmFormat::S16]),
            ),
        ]);
        let p = build_profiles(&c, 48_000);
        assert_eq!(names(&p), ["off"]);
        assert_eq!(p.problems.len(), 3, "{:?}", p.problems);
        assert!(p.problems[0].contains("card 'HDA Intel PCH' (PCH) PCM hw:PCH,0 playback"));
        assert!(p.problems[0].contains("Device or resource busy"));
        assert!(
            p.problems
                .iter()
                .any(|e| e.contains("accepts none of the formats"))
        );
        assert!(
            p.problems
                .iter()
                .any(|e| e.contains("does not run at 48000 Hz"))
        );
    }

    #[test]
    fn a_mono_microphone_and_a_second_analog_pcm() {
        let c = card(vec![
            pcm(0, Direction::Playback, "USB Audio", STEREO_48K()),
            pcm(1, Direction::Playback, "USB Audio #1", STEREO_48K()),
            pcm(
                0,
                Direction::Capture,
                "USB Audio",
                caps(&[1], &[48_000], &[PcmFormat::S16]),
            ),
        ]);
        let p = build_profiles(&c, 48_000);
        assert_eq!(
            p.default_profile().name,
            "output:analog-stereo+input:analog-mono"
        );
        // The second analog PCM adds no profile (PulseAudio's default set uses the first).
        assert_eq!(names(&p).len(), 4, "{:?}", names(&p));
    }

    #[test]
    fn duplex_on_one_pcm_opens_one_device_else_one_per_direction() {
        let c = laptop();
        let p = build_profiles(&c, 48_000);
        let t = AlsaConfig {
            rate: 48_000,
            ..AlsaConfig::default()
        };
        let d = devices_for(&c, p.default_profile(), &t);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].config.pcm, "hw:PCH,0");
        assert!(d[0].config.playback && d[0].config.capture);
        assert_eq!(d[0].config.name, "PCH.analog-stereo");
        assert_eq!(d[0].description, "HDA Intel PCH Analog Stereo");
        assert_eq!(d[0].config.channels.len(), 2);

        let d = devices_for(
            &c,
            p.get("output:analog-surround-51+input:analog-stereo")
                .unwrap(),
            &t,
        );
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].config.name, "PCH.analog-surround-51");
        assert_eq!(d[0].config.channels.len(), 6);
        assert!(d[0].config.playback && !d[0].config.capture);
        assert_eq!(d[1].config.name, "PCH.analog-stereo");
        assert!(!d[1].config.playback && d[1].config.capture);
        assert_eq!(d[1].input.as_deref(), Some("analog-stereo"));

        assert!(devices_for(&c, p.get("off").unwrap(), &t).is_empty());
    }

    #[test]
    fn odd_rates_use_the_range() {
        let c = caps(&[2], &[], &[PcmFormat::S16]).map(|mut c| {
            c.rate_min = 8_000;
            c.rate_max = 192_000;
            c
        });
        let c = c.unwrap();
        assert!(c.has_rate(22_050));
        assert!(
            !c.has_rate(48_000),
            "a tested common rate must be in the list"
        );
    }
}
