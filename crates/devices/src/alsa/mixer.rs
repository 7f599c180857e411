//! A card's simple mixer (`snd_mixer_*`): the element that carries a sink's or a
//! source's hardware volume, and a watch thread that notices other programs changing
//! it. *control* only: nothing here runs on the real-time thread (a mixer handle is
//! independent of the PCM the real-time thread owns).
//!
//! Which element: a simplified PulseAudio "path". PulseAudio merges several elements
//! into one volume (Master, then PCM, then the output's own element); quaver drives
//! one, the first of [`PLAYBACK_ELEMENTS`] / [`CAPTURE_ELEMENTS`] the card has with a
//! volume in that direction. Master comes first because it sits after every other
//! playback stage on the codecs that have it (HDA, AC'97), so it scales whatever port
//! is active; PCM is the digital stage of the DAC (the only playback volume on many
//! USB and I²S cards); Speaker / Headphone / Front / Line Out are per-port amplifiers
//! for cards with neither. For capture, Capture is the ADC's gain on HDA and AC'97;
//! cards without it (USB microphones, webcams) name the gain after the input.
//!
//! One [`Mixer`] per card: one `snd_mixer_t` behind a mutex (alsa-lib handles are not
//! thread-safe), one watch thread blocked in `poll` on the mixer's descriptors plus an
//! eventfd that stops it — no periodic wakeups. After `snd_mixer_handle_events` it reads
//! every watched element and reports the ones whose values differ from what quaver last
//! wrote or read, so quaver's own writes (which the kernel also announces) are not
//! reported back.

use super::ffi::{self, Lib, Opaque};
use super::hotplug::pcm_card_token;
use super::jack::{Jack, Jacks};
use crate::DeviceError;
use crate::hwvol::{HardwareVolume, HwCallback, HwEvent, HwReading, HwVolumeInfo};
use std::ffi::{CString, c_int, c_long, c_ushort};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// Playback elements in the order a sink takes them (see the module docs).
pub const PLAYBACK_ELEMENTS: &[&str] =
    &["Master", "PCM", "Speaker", "Headphone", "Front", "Line Out"];

/// Capture elements in the order a source takes them.
pub const CAPTURE_ELEMENTS: &[&str] = &[
    "Capture",
    "Mic",
    "Internal Mic",
    "Headset Mic",
    "Front Mic",
    "Rear Mic",
    "Line",
    "Digital",
];

/// `SND_MIXER_SCHN_LAST`: channels are 0..=31.
const LAST_CHANNEL: c_int = 31;

/// The card of an ALSA PCM name, as its control device ("hw:Dummy" for `hw:Dummy,0`,
/// `plughw:1`, `front:CARD=Dummy,DEV=0`), or `None` for a PCM that names no card
/// (`default`, `null`, plugins): those get software volume only. The card is
/// [`pcm_card_token`]'s, taken from the positional form (`hw:0,0`, `plughw:Dummy`) only
/// for the kinds where the first argument is the card.
pub fn card_of_pcm(pcm: &str) -> Option<String> {
    let (kind, args) = pcm.split_once(':')?;
    let named = args.split(',').any(|a| a.trim().starts_with("CARD="));
    if !named && !matches!(kind, "hw" | "plughw") {
        return None;
    }
    pcm_card_token(pcm).map(|card| format!("hw:{card}"))
}

/// Why no element was attached (the daemon logs it with the card).
#[derive(Debug, Clone, PartialEq)]
pub enum NoElement {
    /// None of the names in the order has a volume in this direction.
    NoneFound,
    /// The element has a volume but no dB information: software volume only.
    NoDb {
        /// The element's name.
        element: String,
    },
}

struct Handle(*mut Opaque);
// SAFETY: the handle is only used under the `State` mutex.
unsafe impl Send for Handle {}

/// One watched element and what quaver last saw in it.
struct Watched {
    elem: *mut Opaque,
    capture: bool,
    channels: Vec<c_int>,
    has_switch: bool,
    /// Per channel (dB·100, switch) as last written or read.
    last: Vec<(c_long, c_int)>,
    on_event: Option<Arc<HwCallback>>,
}

// SAFETY: `elem` belongs to the handle and is only used under the `State` mutex.
unsafe impl Send for Watched {}

/// Called on the watch thread with a jack that changed.
pub type JackCallback = Box<dyn Fn(Jack) + Send + Sync>;

struct State {
    handle: Handle,
    watched: Vec<Watched>,
    /// The card's jack controls, or why they cannot be watched.
    jacks: Result<Jacks, String>,
    on_jack: Option<Arc<JackCallback>>,
    /// Why the mixer closed, once it has.
    gone: Option<String>,
}

struct Shared {
    lib: &'static Lib,
    card: String,
    state: Mutex<State>,
    stop: OwnedFd,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn err(&self, what: &str, rc: c_int) -> DeviceError {
        super::driver::alsa_io(
            &self.card,
            &format!("{what}: {}", self.lib.error_text(rc)),
            rc,
        )
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Ok(j) = &mut st.jacks {
            j.close(self.lib);
        }
        if !st.handle.0.is_null() {
            // SAFETY: the handle is live and nothing else holds it any more.
            unsafe { (self.lib.mixer_close)(st.handle.0) };
        }
    }
}

/// Stops and joins the watch thread when the last [`Mixer`] or element goes.
struct Owner {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.shared.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = thread
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

/// A card's mixer; clones share it. Its watch thread runs while any clone or element
/// lives.
#[derive(Clone)]
pub struct Mixer {
    owner: Arc<Owner>,
}

impl Mixer {
    /// Opens the mixer of `card` ("hw:0", "hw:Dummy") and starts its watch thread.
    /// *control*.
    pub fn open(card: &str) -> Result<Mixer, DeviceError> {
        let lib = ffi::lib().map_err(super::unavailable)?;
        let cname = CString::new(card).map_err(|_| DeviceError::BadSpec {
            spec: card.to_string(),
            reason: "NUL in card name".into(),
        })?;
        let mut h: *mut Opaque = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { (lib.mixer_open)(&mut h, 0) };
        if rc < 0 {
            return Err(super::driver::alsa_io(
                card,
                &format!("snd_mixer_open: {}", lib.error_text(rc)),
                rc,
            ));
        }
        let fail = |what: &str, rc: c_int| {
            // SAFETY: `h` is the live handle opened above; nothing else holds it.
            unsafe { (lib.mixer_close)(h) };
            super::driver::alsa_io(card, &format!("{what} {card}: {}", lib.error_text(rc)), rc)
        };
        // SAFETY: live handle, NUL-terminated name; NULL options and class are allowed.
        let rc = unsafe { (lib.mixer_attach)(h, cname.as_ptr()) };
        if rc < 0 {
            return Err(fail("snd_mixer_attach", rc));
        }
        // SAFETY: as above.
        let rc =
            unsafe { (lib.mixer_selem_register)(h, std::ptr::null_mut(), std::ptr::null_mut()) };
        if rc < 0 {
            return Err(fail("snd_mixer_selem_register", rc));
        }
        // SAFETY: live handle.
        let rc = unsafe { (lib.mixer_load)(h) };
        if rc < 0 {
            return Err(fail("snd_mixer_load", rc));
        }
        // SAFETY: plain syscall; the fd is owned below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: live handle, not shared yet.
            unsafe { (lib.mixer_close)(h) };
            return Err(DeviceError::Io {
                device: card.to_string(),
                source: e,
            });
        }
        let shared = Arc::new(Shared {
            lib,
            card: card.to_string(),
            state: Mutex::new(State {
                handle: Handle(h),
                watched: Vec::new(),
                jacks: Jacks::open(lib, card),
                on_jack: None,
                gone: None,
            }),
            // SAFETY: a fresh descriptor we own.
            stop: unsafe { OwnedFd::from_raw_fd(efd) },
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("mixer {card}"))
                .spawn(move || watch_loop(&shared))
                .map_err(|e| DeviceError::Io {
                    device: card.to_string(),
                    source: e,
                })?
        };
        Ok(Mixer {
            owner: Arc::new(Owner {
                shared,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// The card this mixer controls.
    pub fn card(&self) -> &str {
        &self.owner.shared.card
    }

    /// The card's jack controls as last read, or why they cannot be watched.
    pub fn jacks(&self) -> Result<Vec<Jack>, String> {
        match &self.owner.shared.lock().jacks {
            Ok(j) => Ok(j.current()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Calls `on_jack` on the watch thread whenever a jack control changes (plugged,
    /// unplugged, added, removed). Replaces an earlier callback.
    pub fn watch_jacks(&self, on_jack: JackCallback) {
        self.owner.shared.lock().on_jack = Some(Arc::new(on_jack));
    }

    /// The names of the card's simple elements (index appended when not 0).
    pub fn element_names(&self) -> Vec<String> {
        let sh = &self.owner.shared;
        let st = sh.lock();
        elements(sh.lib, &st)
            .into_iter()
            .map(|e| element_name(sh.lib, e))
            .collect()
    }

    /// The element a sink (`capture` false) or a source uses, in the order of
    /// [`PLAYBACK_ELEMENTS`] / [`CAPTURE_ELEMENTS`].
    pub fn pick(&self, capture: bool) -> Result<MixerElement, NoElement> {
        let order = if capture {
            CAPTURE_ELEMENTS
        } else {
            PLAYBACK_ELEMENTS
        };
        for name in order {
            match self.element(name, capture) {
                Ok(e) => return Ok(e),
                Err(NoElement::NoneFound) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(NoElement::NoneFound)
    }

    /// Turns the playback switch of the element named `name` (index 0) on or off, as
    /// the active port asks (docs/alsa/ports.md). `Ok(false)`: the card has no such
    /// element with a playback switch.
    pub fn set_playback_switch(&self, name: &str, on: bool) -> Result<bool, DeviceError> {
        let sh = &self.owner.shared;
        let lib = sh.lib;
        let st = sh.lock();
        if let Some(why) = &st.gone {
            return Err(DeviceError::Gone(format!("{} ({why})", sh.card)));
        }
        let Some(elem) = find_element(lib, &st, name) else {
            return Ok(false);
        };
        // SAFETY: `elem` belongs to the live handle, used under the lock.
        let rc = unsafe {
            if (lib.selem_has_playback_switch)(elem) == 0 {
                return Ok(false);
            }
            (lib.selem_set_playback_switch_all)(elem, c_int::from(on))
        };
        if rc < 0 {
            return Err(super::driver::alsa_io(
                &sh.card,
                &format!(
                    "snd_mixer_selem_set_playback_switch_all '{name}': {}",
                    lib.error_text(rc)
                ),
                rc,
            ));
        }
        Ok(true)
    }

    /// The element named `name` (index 0) with a volume in that direction.
    pub fn element(&self, name: &str, capture: bool) -> Result<MixerElement, NoElement> {
        let sh = &self.owner.shared;
        let lib = sh.lib;
        let mut st = sh.lock();
        let Some(elem) = find_element(lib, &st, name) else {
            return Err(NoElement::NoneFound);
        };
        // SAFETY: `elem` belongs to the live handle; out-pointers are valid.
        let info = unsafe {
            let has_volume = if capture {
                (lib.selem_has_capture_volume)(elem)
            } else {
                (lib.selem_has_playback_volume)(elem)
            };
            if has_volume == 0 || (lib.selem_is_active)(elem) == 0 {
                return Err(NoElement::NoneFound);
            }
            let (mut min_db, mut max_db, mut min, mut max) = (0, 0, 0, 0);
            let (db_range, raw_range) = if capture {
                (
                    (lib.selem_get_capture_db_range)(elem, &mut min_db, &mut max_db),
                    (lib.selem_get_capture_volume_range)(elem, &mut min, &mut max),
                )
            } else {
                (
                    (lib.selem_get_playback_db_range)(elem, &mut min_db, &mut max_db),
                    (lib.selem_get_playback_volume_range)(elem, &mut min, &mut max),
                )
            };
            if db_range < 0 || raw_range < 0 || max_db <= min_db {
                return Err(NoElement::NoDb {
                    element: name.to_string(),
                });
            }
            HwVolumeInfo {
                card: sh.card.clone(),
                element: name.to_string(),
                capture,
                min_db: min_db as f64 / 100.0,
                max_db: max_db as f64 / 100.0,
                steps: (max - min + 1).clamp(1, u32::MAX as c_long) as u32,
                has_switch: if capture {
                    (lib.selem_has_capture_switch)(elem) != 0
                } else {
                    (lib.selem_has_playback_switch)(elem) != 0
                },
            }
        };
        let channels: Vec<c_int> = (0..=LAST_CHANNEL)
            // SAFETY: `elem` belongs to the live handle.
            .filter(|&c| unsafe {
                if capture {
                    (lib.selem_has_capture_channel)(elem, c) != 0
                } else {
                    (lib.selem_has_playback_channel)(elem, c) != 0
                }
            })
            .collect();
        if channels.is_empty() {
            return Err(NoElement::NoneFound);
        }
        let mut w = Watched {
            elem,
            capture,
            channels,
            has_switch: info.has_switch,
            last: Vec::new(),
            on_event: None,
        };
        w.last = read_values(lib, &w);
        st.watched.push(w);
        Ok(MixerElement {
            mixer: self.clone(),
            slot: st.watched.len() - 1,
            info,
        })
    }
}

fn elements(lib: &Lib, st: &State) -> Vec<*mut Opaque> {
    let mut out = Vec::new();
    if st.handle.0.is_null() {
        return out;
    }
    // SAFETY: live handle; the element list is walked under the state lock.
    let mut e = unsafe { (lib.mixer_first_elem)(st.handle.0) };
    while !e.is_null() {
        out.push(e);
        // SAFETY: `e` is an element of the live handle.
        e = unsafe { (lib.mixer_elem_next)(e) };
    }
    out
}

/// The element called `name` ([`element_name`]'s form), if the card has it.
fn find_element(lib: &Lib, st: &State, name: &str) -> Option<*mut Opaque> {
    elements(lib, st)
        .into_iter()
        .find(|&e| element_name(lib, e) == name)
}

fn element_name(lib: &Lib, e: *mut Opaque) -> String {
    // SAFETY: `e` is an element of a live handle; the name is owned by it.
    let (name, index) = unsafe {
        (
            ffi::cstr_lossy((lib.selem_get_name)(e)).unwrap_or_default(),
            (lib.selem_get_index)(e),
        )
    };
    if index == 0 {
        name
    } else {
        format!("{name},{index}")
    }
}

/// Per channel (dB·100, switch 1 = on) now; channels that fail to read read as the
/// bottom of the range (alsa-lib only fails for channels the element lacks).
fn read_values(lib: &Lib, w: &Watched) -> Vec<(c_long, c_int)> {
    w.channels
        .iter()
        .map(|&c| {
            let (mut db, mut sw): (c_long, c_int) = (c_long::MIN, 1);
            // SAFETY: `w.elem` belongs to the live handle (callers hold the lock).
            unsafe {
                if w.capture {
                    (lib.selem_get_capture_db)(w.elem, c, &mut db);
                    if w.has_switch {
                        (lib.selem_get_capture_switch)(w.elem, c, &mut sw);
                    }
                } else {
                    (lib.selem_get_playback_db)(w.elem, c, &mut db);
                    if w.has_switch {
                        (lib.selem_get_playback_switch)(w.elem, c, &mut sw);
                    }
                }
            }
            (db, sw)
        })
        .collect()
}

fn reading(w: &Watched, values: &[(c_long, c_int)]) -> HwReading {
    let db = values.iter().map(|v| v.0).max().unwrap_or(c_long::MIN);
    HwReading {
        db: db as f64 / 100.0,
        muted: w.has_switch.then(|| values.iter().any(|v| v.1 == 0)),
    }
}

/// The watch thread: blocks until the mixer or the stop eventfd is readable, lets
/// alsa-lib take the events, reports elements that changed; ends on stop or when the
/// card goes away (closing the handle, so the card can be unbound).
fn watch_loop(sh: &Shared) {
    let lib = sh.lib;
    let why = loop {
        let fds = {
            let st = sh.lock();
            let h = st.handle.0;
            // SAFETY: live handle.
            let n = unsafe { (lib.mixer_poll_descriptors_count)(h) }.max(0) as usize;
            let mut fds = vec![
                libc::pollfd {
                    fd: -1,
                    events: 0,
                    revents: 0
                };
                n + 1
            ];
            // SAFETY: room for `n` descriptors after the first slot.
            let got = unsafe { (lib.mixer_poll_descriptors)(h, fds[1..].as_mut_ptr(), n as _) };
            if got < 0 {
                break format!("snd_mixer_poll_descriptors: {}", lib.error_text(got));
            }
            fds.truncate(got as usize + 1);
            fds[0] = libc::pollfd {
                fd: sh.stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let mixer_fds = fds.len();
            if let Ok(j) = &st.jacks {
                fds.extend(j.poll_fds(lib));
            }
            (fds, mixer_fds)
        };
        let (mut fds, mixer_fds) = fds;
        // SAFETY: valid array of pollfds; blocks without a timeout (no periodic wakeup).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as _, -1) };
        if rc < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break format!("poll: {}", std::io::Error::last_os_error());
        }
        if fds[0].revents != 0 {
            return;
        }
        let mut st = sh.lock();
        let h = st.handle.0;
        let (mixer_part, ctl_part) = fds.split_at_mut(mixer_fds);
        let mut jack_calls = Vec::new();
        if ctl_part.iter().any(|f| f.revents != 0)
            && let Ok(j) = &mut st.jacks
        {
            if j.failed(lib, ctl_part) {
                break "the control device reported an error (card removed?)".to_string();
            }
            let changed = j.handle_events(lib);
            if let Some(f) = &st.on_jack {
                jack_calls = changed.into_iter().map(|c| (f.clone(), c)).collect();
            }
        }
        if mixer_part[1..].iter().all(|f| f.revents == 0) {
            // Only the jack handle woke: nothing for the elements.
            drop(st);
            for (f, j) in jack_calls {
                f(j);
            }
            continue;
        }
        let mut revents: c_ushort = 0;
        let n = (mixer_part.len() - 1) as _;
        // SAFETY: the descriptors polled above, of the live handle.
        let rc = unsafe {
            (lib.mixer_poll_descriptors_revents)(h, mixer_part[1..].as_mut_ptr(), n, &mut revents)
        };
        if rc < 0 {
            break format!("snd_mixer_poll_descriptors_revents: {}", lib.error_text(rc));
        }
        if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) as c_ushort != 0 {
            break "the control device reported an error (card removed?)".to_string();
        }
        // SAFETY: live handle.
        let rc = unsafe { (lib.mixer_handle_events)(h) };
        if rc < 0 {
            break format!("snd_mixer_handle_events: {}", lib.error_text(rc));
        }
        let mut calls = Vec::new();
        for w in &mut st.watched {
            let now = read_values(lib, w);
            if now != w.last {
                w.last = now;
                if let Some(f) = &w.on_event {
                    calls.push((f.clone(), reading(w, &w.last)));
                }
            }
        }
        drop(st);
        // Outside the lock: the callback may set the volume back through this mixer.
        for (f, r) in calls {
            f(HwEvent::Changed(r));
        }
        for (f, j) in jack_calls {
            f(j);
        }
    };
    let calls: Vec<_> = {
        let mut st = sh.lock();
        if !st.handle.0.is_null() {
            // SAFETY: live handle; the elements are forgotten with it.
            unsafe { (lib.mixer_close)(st.handle.0) };
            st.handle.0 = std::ptr::null_mut();
        }
        if let Ok(j) = &mut st.jacks {
            j.close(lib);
        }
        st.jacks = Err(format!("closed: {why}"));
        st.gone = Some(why.clone());
        st.watched
            .iter_mut()
            .filter_map(|w| {
                w.elem = std::ptr::null_mut();
                w.on_event.clone()
            })
            .collect()
    };
    for f in calls {
        f(HwEvent::Gone(format!("mixer {}: {why}", sh.card)));
    }
}

/// One element of a [`Mixer`], as a sink's or source's [`HardwareVolume`].
pub struct MixerElement {
    mixer: Mixer,
    slot: usize,
    info: HwVolumeInfo,
}

impl MixerElement {
    /// "hw:Dummy 'Master' (-45.00..0.00 dB, 151 steps, no switch)", for logs.
    pub fn info_summary(&self) -> String {
        let i = &self.info;
        format!(
            "{} '{}' ({:.2}..{:.2} dB, {} steps, {})",
            i.card,
            i.element,
            i.min_db,
            i.max_db,
            i.steps,
            if i.has_switch { "switch" } else { "no switch" }
        )
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Lib, &mut Watched) -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        let sh = &self.mixer.owner.shared;
        let mut st = sh.lock();
        if let Some(why) = &st.gone {
            return Err(DeviceError::Gone(format!("{} ({why})", sh.card)));
        }
        f(sh.lib, &mut st.watched[self.slot])
    }
}

impl HardwareVolume for MixerElement {
    fn info(&self) -> &HwVolumeInfo {
        &self.info
    }

    fn set_db(&self, db: f64) -> Result<f64, DeviceError> {
        let sh = &self.mixer.owner.shared;
        self.with(|lib, w| {
            let value = (db * 100.0)
                .round()
                .clamp(c_long::MIN as f64, c_long::MAX as f64);
            // SAFETY: element of the live handle (under the lock). Rounding +1: the
            // hardware is never quieter than asked; software attenuates the rest.
            let rc = unsafe {
                if w.capture {
                    (lib.selem_set_capture_db_all)(w.elem, value as c_long, 1)
                } else {
                    (lib.selem_set_playback_db_all)(w.elem, value as c_long, 1)
                }
            };
            if rc < 0 {
                return Err(sh.err(&format!("setting {} to {db:.2} dB", self.info.element), rc));
            }
            w.last = read_values(lib, w);
            Ok(reading(w, &w.last).db)
        })
    }

    fn set_mute(&self, mute: bool) -> Result<(), DeviceError> {
        let sh = &self.mixer.owner.shared;
        self.with(|lib, w| {
            if !w.has_switch {
                return Ok(());
            }
            let on = c_int::from(!mute);
            // SAFETY: element of the live handle (under the lock).
            let rc = unsafe {
                if w.capture {
                    (lib.selem_set_capture_switch_all)(w.elem, on)
                } else {
                    (lib.selem_set_playback_switch_all)(w.elem, on)
                }
            };
            if rc < 0 {
                return Err(sh.err(&format!("switching {}", self.info.element), rc));
            }
            w.last = read_values(lib, w);
            Ok(())
        })
    }

    fn read(&self) -> Result<HwReading, DeviceError> {
        self.with(|lib, w| {
            w.last = read_values(lib, w);
            Ok(reading(w, &w.last))
        })
    }

    fn watch(&self, on_event: HwCallback) {
        let sh = &self.mixer.owner.shared;
        let mut st = sh.lock();
        st.watched[self.slot].on_event = Some(Arc::new(on_event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_of_a_pcm_name() {
        assert_eq!(card_of_pcm("hw:Dummy").as_deref(), Some("hw:Dummy"));
        assert_eq!(
            card_of_pcm("hw:Loopback,0,0").as_deref(),
            Some("hw:Loopback")
        );
        assert_eq!(card_of_pcm("plughw:1,0").as_deref(), Some("hw:1"));
        assert_eq!(
            card_of_pcm("front:CARD=Dummy,DEV=0").as_deref(),
            Some("hw:Dummy")
        );
        assert_eq!(card_of_pcm("hw:CARD=0,DEV=3").as_deref(), Some("hw:0"));
        for none in [
            "default",
            "null",
            "hw:",
            "file:FILE=/tmp/x",
            "dmix",
            "pulse",
        ] {
            assert_eq!(card_of_pcm(none), None, "{none}");
        }
    }

    #[test]
    fn a_card_that_does_not_exist_is_an_error_naming_it() {
        if ffi::lib().is_err() {
            eprintln!("libasound.so.2 is not installed here; skipping");
            return;
        }
        // This host's kernel has no ALSA: every card is missing.
        let err = Mixer::open("hw:NoSuchCard").err().expect("no such card");
        let text = err.to_string();
        assert!(text.contains("hw:NoSuchCard"), "{text}");
        assert!(text.contains("snd_mixer_attach"), "{text}");
    }
}
