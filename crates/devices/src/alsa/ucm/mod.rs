//! ALSA Use Case Manager (alsa-ucm-conf): when a card has a UCM configuration, its
//! verbs and devices define the card's profiles and ports instead of PCM probing, as in
//! PulseAudio's alsa-ucm. docs/alsa/ucm.md.
//!
//! [`open`] loads a card's configuration (`snd_use_case_mgr_open` on `hw:N`; alsa-lib
//! finds it through `ucm2/ucm.conf`, by default `conf.d/DRIVER/LONGNAME.conf` or
//! `conf.d/DRIVER/DRIVER.conf` under `/usr/share/alsa/ucm2`, or under
//! `$ALSA_CONFIG_UCM2`) and reads every verb's devices and their values into plain data
//! ([`UcmConfig`]); [`profiles::build_profiles`] turns that into profiles and ports
//! (pure, tested on the host). The [`Ucm`] handle stays open while the card is used:
//! opening a profile sets its verb (`_verb`), choosing a port enables its device
//! (`_enadev`, after `_disdev` of the others), which runs the sequences the
//! configuration declares. *control*: never on the real-time thread.

mod ffi;
pub mod profiles;

use crate::alsa::ffi::{Opaque, cstr_lossy};
use ffi::{UcmLib, capture_errors, ucm_lib};
use std::ffi::{CString, c_char, c_int, c_long};
use std::sync::{Arc, Mutex, PoisonError};

/// The verb that means "no use case" (`SND_USE_CASE_VERB_INACTIVE`).
pub const VERB_INACTIVE: &str = "Inactive";

/// One UCM device of a verb: a port.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UcmDevice {
    /// The device's name ("Speaker", "Headphones", "Mic").
    pub name: String,
    /// Its comment (the port's description).
    pub comment: String,
    /// `PlaybackPCM`: the PCM a sink of this device opens ("hw:Dummy,0").
    pub playback_pcm: Option<String>,
    /// `CapturePCM`.
    pub capture_pcm: Option<String>,
    /// `PlaybackPriority`, else `Priority`.
    pub playback_priority: Option<u32>,
    /// `CapturePriority`, else `Priority`.
    pub capture_priority: Option<u32>,
    /// `PlaybackChannels`.
    pub playback_channels: Option<u32>,
    /// `CaptureChannels`.
    pub capture_channels: Option<u32>,
    /// The simple mixer element of the sink's volume: `PlaybackMixerElem`, else
    /// `PlaybackMasterElem`, else the element named by `PlaybackVolume`.
    pub playback_element: Option<String>,
    /// The same for capture (`CaptureMixerElem`, `CaptureMasterElem`, `CaptureVolume`).
    pub capture_element: Option<String>,
    /// `JackControl`: the control whose value says whether it is plugged in
    /// ("Headphone Jack").
    pub jack: Option<String>,
    /// `ConflictingDevice`: devices that cannot be enabled with it.
    pub conflicting: Vec<String>,
    /// `SupportedDevice`: the only devices that can be enabled with it (empty: any).
    pub supported: Vec<String>,
}

/// One verb (a use case: "HiFi", "Voice Call"): a profile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UcmVerb {
    /// The verb's name.
    pub name: String,
    /// Its comment (the profile's description).
    pub comment: String,
    /// Its devices, in the configuration's order.
    pub devices: Vec<UcmDevice>,
}

/// A card's UCM configuration as read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UcmConfig {
    /// Every verb, in the configuration's order.
    pub verbs: Vec<UcmVerb>,
}

impl UcmConfig {
    /// The verb called `name`.
    pub fn verb(&self, name: &str) -> Option<&UcmVerb> {
        self.verbs.iter().find(|v| v.name == name)
    }
}

/// One UCM device as a port of a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UcmPort {
    /// "[Out] Speaker", "[In] Mic".
    pub name: String,
    /// The UCM device ("Speaker"): what `_enadev` / `_disdev` take.
    pub device: String,
    /// The device's comment, else its name.
    pub description: String,
    /// The device's priority in this direction (higher is preferred).
    pub priority: u32,
    /// The jack control that says whether it is plugged in.
    pub jack: Option<String>,
    /// The mixer element of its volume.
    pub element: Option<String>,
}

struct Handle(*mut Opaque);
// SAFETY: the manager is used only under the `Ucm` mutex.
unsafe impl Send for Handle {}

/// A card's open use case manager and its configuration. Equal when the
/// configurations are (the handle is not data).
pub struct Ucm {
    /// What the configuration declares.
    pub config: UcmConfig,
    /// How logs name the card: `card 'Dummy' (Dummy)`.
    pub label: String,
    handle: Mutex<Option<Handle>>,
}

impl std::fmt::Debug for Ucm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ucm")
            .field("label", &self.label)
            .field("config", &self.config)
            .finish()
    }
}

impl PartialEq for Ucm {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
    }
}
impl Eq for Ucm {}

/// The text of an alsa-lib error with the messages alsa-lib reported while it happened.
fn explain(lib: &crate::alsa::ffi::Lib, rc: c_int, said: &[String]) -> String {
    let text = lib.error_text(rc);
    let said: Vec<&str> = said
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    if said.is_empty() {
        text
    } else {
        format!("{text} (alsa-lib: {})", said.join("; "))
    }
}

/// Loads card `index`'s UCM configuration: `Ok(None)` when it has none (or alsa-lib
/// has no UCM), `Err` (naming the card, with what alsa-lib said) when it has one that
/// does not load. `label` names the card in errors: `card 'Dummy' (Dummy)`.
pub fn open(index: u32, label: &str) -> Result<Option<Arc<Ucm>>, String> {
    let Ok(ucm) = ucm_lib() else {
        return Ok(None);
    };
    let lib = crate::alsa::ffi::lib().map_err(|e| format!("{label}: {e}"))?;
    let card = format!("hw:{index}");
    let name = CString::new(card.clone()).expect("no NUL");
    let mut h: *mut Opaque = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    let (rc, said) = capture_errors(ucm, || unsafe { (ucm.mgr_open)(&mut h, name.as_ptr()) });
    if rc == -libc::ENOENT {
        return Ok(None);
    }
    if rc < 0 || h.is_null() {
        return Err(format!(
            "{label}: UCM configuration does not load: snd_use_case_mgr_open('{card}'): {}",
            explain(lib, rc, &said)
        ));
    }
    let handle = Handle(h);
    let (config, said) = capture_errors(ucm, || read_config(ucm, handle.0));
    // Owns the manager from here: an error below closes it.
    let mut out = Ucm {
        config: UcmConfig::default(),
        label: label.to_string(),
        handle: Mutex::new(Some(handle)),
    };
    out.config = config.map_err(|(what, rc)| {
        format!(
            "{label}: UCM configuration does not load: {what}: {}",
            explain(lib, rc, &said)
        )
    })?;
    if out.config.verbs.is_empty() {
        return Err(format!("{label}: UCM configuration declares no verb"));
    }
    Ok(Some(Arc::new(out)))
}

/// A UCM call that failed: what was asked, alsa-lib's code.
type Failed = (String, c_int);

/// `snd_use_case_get(identifier)`: `None` when the value is not set.
fn get(lib: &UcmLib, h: *mut Opaque, id: &str) -> Result<Option<String>, Failed> {
    let cid = CString::new(id).map_err(|_| (format!("'{id}' contains NUL"), -libc::EINVAL))?;
    let mut v: *const c_char = std::ptr::null();
    // SAFETY: open manager, NUL-terminated identifier, valid out-pointer.
    let rc = unsafe { (lib.get)(h, cid.as_ptr(), &mut v) };
    if rc == -libc::ENOENT {
        return Ok(None);
    }
    if rc < 0 {
        return Err((format!("snd_use_case_get('{id}')"), rc));
    }
    // SAFETY: alsa-lib returns a malloc'd string the caller frees.
    let s = unsafe { cstr_lossy(v) };
    unsafe { libc::free(v as *mut libc::c_void) };
    Ok(s)
}

/// `snd_use_case_get_list(identifier)`: empty when there is no such list.
fn get_list(lib: &UcmLib, h: *mut Opaque, id: &str) -> Result<Vec<String>, Failed> {
    let cid = CString::new(id).map_err(|_| (format!("'{id}' contains NUL"), -libc::EINVAL))?;
    let mut list: *mut *const c_char = std::ptr::null_mut();
    // SAFETY: open manager, NUL-terminated identifier, valid out-pointer.
    let n = unsafe { (lib.get_list)(h, cid.as_ptr(), &mut list) };
    if n == -libc::ENOENT {
        return Ok(Vec::new());
    }
    if n < 0 {
        return Err((format!("snd_use_case_get_list('{id}')"), n));
    }
    let out = (0..n as usize)
        // SAFETY: `n` entries, each a C string or null.
        .map(|i| unsafe { cstr_lossy(*list.add(i)) }.unwrap_or_default())
        .collect();
    if !list.is_null() {
        // SAFETY: the list alsa-lib returned, freed once.
        unsafe { (lib.free_list)(list, n) };
    }
    Ok(out)
}

/// `snd_use_case_set(identifier, value)`.
fn set(lib: &UcmLib, h: *mut Opaque, id: &str, value: &str) -> Result<(), Failed> {
    let bad = || (format!("'{id}={value}' contains NUL"), -libc::EINVAL);
    let cid = CString::new(id).map_err(|_| bad())?;
    let cv = CString::new(value).map_err(|_| bad())?;
    // SAFETY: open manager, NUL-terminated strings.
    let rc = unsafe { (lib.set)(h, cid.as_ptr(), cv.as_ptr()) };
    if rc < 0 {
        return Err((format!("snd_use_case_set('{id}', '{value}')"), rc));
    }
    Ok(())
}

/// `snd_use_case_geti(identifier)`: the status of a device or modifier.
fn geti(lib: &UcmLib, h: *mut Opaque, id: &str) -> Result<c_long, Failed> {
    let cid = CString::new(id).map_err(|_| (format!("'{id}' contains NUL"), -libc::EINVAL))?;
    let mut v: c_long = 0;
    // SAFETY: open manager, NUL-terminated identifier, valid out-pointer.
    let rc = unsafe { (lib.geti)(h, cid.as_ptr(), &mut v) };
    if rc < 0 {
        return Err((format!("snd_use_case_geti('{id}')"), rc));
    }
    Ok(v)
}

/// The element a `PlaybackVolume` / `CaptureVolume` control id names:
/// `name='Master Playback Volume'` → `Master`.
pub fn element_of_control(control: &str) -> Option<String> {
    let name = control
        .split(',')
        .find_map(|part| part.trim().strip_prefix("name="))?
        .trim_matches(|c| c == '\'' || c == '"');
    let base = ["Playback Volume", "Capture Volume", "Volume"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
        .trim();
    (!base.is_empty()).then(|| base.to_string())
}

/// Reads every verb and its devices: each verb is made current in turn (lists of
/// conflicting and supported devices are answered for the current verb), then none.
fn read_config(lib: &UcmLib, h: *mut Opaque) -> Result<UcmConfig, Failed> {
    let mut config = UcmConfig::default();
    let verbs = get_list(lib, h, "_verbs")?;
    for pair in verbs.chunks(2) {
        let mut verb = UcmVerb {
            name: pair[0].clone(),
            comment: pair.get(1).cloned().unwrap_or_default(),
            devices: Vec::new(),
        };
        set(lib, h, "_verb", &verb.name)?;
        let devices = get_list(lib, h, &format!("_devices/{}", verb.name))?;
        for d in devices.chunks(2) {
            verb.devices.push(read_device(lib, h, &d[0], d.get(1))?);
        }
        config.verbs.push(verb);
    }
    set(lib, h, "_verb", VERB_INACTIVE)?;
    Ok(config)
}

/// One device's values in the current verb.
fn read_device(
    lib: &UcmLib,
    h: *mut Opaque,
    name: &str,
    comment: Option<&String>,
) -> Result<UcmDevice, Failed> {
    let value = |key: &str| get(lib, h, &format!("{key}/{name}"));
    let number = |key: &str| -> Result<Option<u32>, Failed> {
        Ok(value(key)?.and_then(|v| v.trim().parse().ok()))
    };
    let element = |elem: &str, master: &str, control: &str| -> Result<Option<String>, Failed> {
        Ok(match value(elem)? {
            Some(e) => Some(e),
            None => match value(master)? {
                Some(e) => Some(e),
                None => value(control)?.and_then(|c| element_of_control(&c)),
            },
        })
    };
    let priority = number("Priority")?;
    Ok(UcmDevice {
        name: name.to_string(),
        comment: comment.cloned().unwrap_or_default(),
        playback_pcm: value("PlaybackPCM")?,
        capture_pcm: value("CapturePCM")?,
        playback_priority: number("PlaybackPriority")?.or(priority),
        capture_priority: number("CapturePriority")?.or(priority),
        playback_channels: number("PlaybackChannels")?,
        capture_channels: number("CaptureChannels")?,
        playback_element: element("PlaybackMixerElem", "PlaybackMasterElem", "PlaybackVolume")?,
        capture_element: element("CaptureMixerElem", "CaptureMasterElem", "CaptureVolume")?,
        jack: value("JackControl")?,
        conflicting: get_list(lib, h, &format!("_conflictingdevs/{name}"))?,
        supported: get_list(lib, h, &format!("_supporteddevs/{name}"))?,
    })
}

impl Ucm {
    /// A configuration without a manager (tests of the mapping; setting fails).
    pub fn from_config(config: UcmConfig, label: &str) -> Ucm {
        Ucm {
            config,
            label: label.to_string(),
            handle: Mutex::new(None),
        }
    }

    /// Runs `f` on the open manager, with alsa-lib's messages kept for the error.
    fn with<T>(
        &self,
        f: impl FnOnce(&UcmLib, *mut Opaque) -> Result<T, Failed>,
    ) -> Result<T, String> {
        let lib = ucm_lib().map_err(|e| format!("{}: {e}", self.label))?;
        let alsa = crate::alsa::ffi::lib().map_err(|e| format!("{}: {e}", self.label))?;
        let guard = self.handle.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(h) = guard.as_ref() else {
            return Err(format!("{}: no UCM manager open", self.label));
        };
        let (out, said) = capture_errors(lib, || f(lib, h.0));
        out.map_err(|(what, rc)| {
            format!("{}: UCM {what}: {}", self.label, explain(alsa, rc, &said))
        })
    }

    /// Makes `verb` current (its enable sequence runs, the previous verb's disable
    /// sequence first); [`VERB_INACTIVE`] (or `None`, a profile without a verb) for none.
    pub fn set_verb(&self, verb: Option<&str>) -> Result<(), String> {
        let verb = verb.unwrap_or(VERB_INACTIVE);
        self.with(|lib, h| {
            let now = get(lib, h, "_verb")?;
            if now.as_deref() == Some(verb) {
                return Ok(());
            }
            set(lib, h, "_verb", verb)
        })
    }

    /// Makes `device` the enabled device among `others` (the devices of the same
    /// direction in the current verb): each other one enabled is disabled (its disable
    /// sequence), then `device` is enabled (its enable sequence) unless it already is.
    /// Returns whether anything changed.
    pub fn enable_device(&self, device: &str, others: &[String]) -> Result<bool, String> {
        self.with(|lib, h| {
            let mut changed = false;
            for o in others.iter().filter(|o| o.as_str() != device) {
                if geti(lib, h, &format!("_devstatus/{o}"))? > 0 {
                    set(lib, h, "_disdev", o)?;
                    changed = true;
                }
            }
            if geti(lib, h, &format!("_devstatus/{device}"))? <= 0 {
                set(lib, h, "_enadev", device)?;
                changed = true;
            }
            Ok(changed)
        })
    }

    /// Reloads the configuration files (`snd_use_case_mgr_reload`); the verb becomes
    /// inactive. The data read at open stays as it was.
    pub fn reload(&self) -> Result<(), String> {
        self.with(|lib, h| {
            // SAFETY: open manager, under the lock.
            let rc = unsafe { (lib.mgr_reload)(h) };
            if rc < 0 {
                return Err(("snd_use_case_mgr_reload".to_string(), rc));
            }
            Ok(())
        })
    }
}

impl Drop for Ucm {
    fn drop(&mut self) {
        let h = self
            .handle
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(h), Ok(lib)) = (h, ucm_lib()) {
            // SAFETY: the manager opened in `open`, closed once.
            unsafe { (lib.mgr_close)(h.0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_controls_name_their_element() {
        assert_eq!(
            element_of_control("name='Master Playback Volume'").as_deref(),
            Some("Master")
        );
        assert_eq!(
            element_of_control("iface=MIXER,name=\"Headset Capture Volume\",index=0").as_deref(),
            Some("Headset")
        );
        assert_eq!(element_of_control("numid=3"), None);
    }
}
