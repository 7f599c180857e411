//! Jack detection: a card's `… Jack` controls (interface CARD, BOOLEAN: on = plugged),
//! read through a control handle subscribed to events. The handle's descriptors are
//! polled by the card's mixer watch thread (`mixer.rs`), so jacks cost no thread and no
//! periodic wakeup of their own. *control* only.
//!
//! The kernel's HDA, USB and ASoC drivers name their jack controls after the port
//! ("Headphone Jack", "Front Mic Jack", "Line Out Jack", "HDMI/DP,pcm=3 Jack");
//! [`port_of_jack`] maps the common names to PulseAudio's port names, which the card
//! model uses for availability.

use super::ffi::{self, Lib, Opaque};
use std::collections::BTreeMap;
use std::ffi::{CString, c_uint, c_ushort};

/// One jack control and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jack {
    /// The control's name, e.g. "Headphone Jack".
    pub name: String,
    /// The control's index (several jacks may share a name).
    pub index: u32,
    /// Something is plugged in.
    pub plugged: bool,
    /// The control was removed (then `plugged` is false).
    pub removed: bool,
}

/// The PulseAudio port a jack's name says it detects, and whether it is an output:
/// `"Headphone Jack"` → `("analog-output-headphones", true)`. `None` for names this
/// table does not know (HDMI jacks are per PCM device, for the card model to map).
pub fn port_of_jack(name: &str) -> Option<(&'static str, bool)> {
    let base = name.strip_suffix(" Jack")?;
    let base = base
        .strip_prefix("Front ")
        .or_else(|| base.strip_prefix("Rear "))
        .unwrap_or(base);
    Some(match base {
        "Headphone" | "Headphones" => ("analog-output-headphones", true),
        "Line Out" => ("analog-output-lineout", true),
        "Speaker" | "Speaker Phantom" => ("analog-output-speaker", true),
        "Mic" | "Mic Phantom" => ("analog-input-mic", false),
        "Headset Mic" | "Headset Mic Phantom" => ("analog-input-headset-mic", false),
        "Internal Mic" | "Internal Mic Phantom" => ("analog-input-internal-mic", false),
        "Line" => ("analog-input-linein", false),
        "Dock Mic" => ("analog-input-dock-mic", false),
        _ => return None,
    })
}

/// A subscribed control handle and the jacks it has seen.
pub(super) struct Jacks {
    ctl: *mut Opaque,
    event: *mut Opaque,
    id: *mut Opaque,
    value: *mut Opaque,
    known: BTreeMap<(String, u32), bool>,
}

// SAFETY: the handle and its scratch objects are only used under the mixer's lock.
unsafe impl Send for Jacks {}

impl Jacks {
    /// Opens `card`'s control device (non-blocking), subscribes to its events and reads
    /// every jack.
    pub(super) fn open(lib: &Lib, card: &str) -> Result<Jacks, String> {
        let cname = CString::new(card).map_err(|_| "NUL in card name".to_string())?;
        let mut j = Jacks {
            ctl: std::ptr::null_mut(),
            event: std::ptr::null_mut(),
            id: std::ptr::null_mut(),
            value: std::ptr::null_mut(),
            known: BTreeMap::new(),
        };
        // SAFETY: valid out-pointers and name; `j.close` frees whatever was allocated.
        let rc = unsafe {
            let rc = (lib.ctl_open)(&mut j.ctl, cname.as_ptr(), ffi::SND_CTL_NONBLOCK);
            if rc < 0 {
                Err(("snd_ctl_open", rc))
            } else if (lib.ctl_event_malloc)(&mut j.event) < 0
                || (lib.ctl_elem_id_malloc)(&mut j.id) < 0
                || (lib.ctl_elem_value_malloc)(&mut j.value) < 0
            {
                Err(("allocating control objects", -libc::ENOMEM))
            } else {
                let rc = (lib.ctl_subscribe_events)(j.ctl, 1);
                if rc < 0 {
                    Err(("snd_ctl_subscribe_events", rc))
                } else {
                    Ok(())
                }
            }
        };
        if let Err((what, rc)) = rc {
            j.close(lib);
            return Err(format!("{what} {card}: {}", lib.error_text(rc)));
        }
        j.scan(lib);
        Ok(j)
    }

    /// Frees the handle (idempotent).
    pub(super) fn close(&mut self, lib: &Lib) {
        // SAFETY: each pointer is null or owned by us, and nulled after freeing.
        unsafe {
            if !self.ctl.is_null() {
                (lib.ctl_close)(self.ctl);
            }
            if !self.event.is_null() {
                (lib.ctl_event_free)(self.event);
            }
            if !self.id.is_null() {
                (lib.ctl_elem_id_free)(self.id);
            }
            if !self.value.is_null() {
                (lib.ctl_elem_value_free)(self.value);
            }
        }
        self.ctl = std::ptr::null_mut();
        self.event = std::ptr::null_mut();
        self.id = std::ptr::null_mut();
        self.value = std::ptr::null_mut();
    }

    /// The jacks as last read.
    pub(super) fn current(&self) -> Vec<Jack> {
        self.known
            .iter()
            .map(|((name, index), &plugged)| Jack {
                name: name.clone(),
                index: *index,
                plugged,
                removed: false,
            })
            .collect()
    }

    /// The handle's poll descriptors.
    pub(super) fn poll_fds(&self, lib: &Lib) -> Vec<libc::pollfd> {
        if self.ctl.is_null() {
            return Vec::new();
        }
        // SAFETY: live handle; room for `n` descriptors.
        unsafe {
            let n = (lib.ctl_poll_descriptors_count)(self.ctl).max(0) as usize;
            let mut fds = vec![
                libc::pollfd {
                    fd: -1,
                    events: 0,
                    revents: 0
                };
                n
            ];
            let got = (lib.ctl_poll_descriptors)(self.ctl, fds.as_mut_ptr(), n as c_uint);
            fds.truncate(got.max(0) as usize);
            fds
        }
    }

    /// After `poll`: whether the descriptors report an error (the card went away).
    pub(super) fn failed(&self, lib: &Lib, fds: &mut [libc::pollfd]) -> bool {
        let mut revents: c_ushort = 0;
        // SAFETY: the descriptors of the live handle, as polled.
        let rc = unsafe {
            (lib.ctl_poll_descriptors_revents)(
                self.ctl,
                fds.as_mut_ptr(),
                fds.len() as c_uint,
                &mut revents,
            )
        };
        rc < 0 || revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) as c_ushort != 0
    }

    /// Reads every pending event; returns the jacks that changed.
    pub(super) fn handle_events(&mut self, lib: &Lib) -> Vec<Jack> {
        let mut changed = Vec::new();
        loop {
            // SAFETY: live handle and event object; non-blocking read.
            let rc = unsafe { (lib.ctl_read)(self.ctl, self.event) };
            if rc <= 0 {
                break;
            }
            // SAFETY: the event just read.
            let (kind, mask) = unsafe {
                (
                    (lib.ctl_event_get_type)(self.event),
                    (lib.ctl_event_elem_get_mask)(self.event),
                )
            };
            if kind != ffi::SND_CTL_EVENT_ELEM {
                continue;
            }
            // SAFETY: an element event; `self.id` is ours.
            unsafe { (lib.ctl_event_elem_get_id)(self.event, self.id) };
            let Some(key) = self.jack_key(lib) else {
                continue;
            };
            if mask == ffi::SND_CTL_EVENT_MASK_REMOVE {
                if self.known.remove(&key).is_some() {
                    changed.push(Jack {
                        name: key.0,
                        index: key.1,
                        plugged: false,
                        removed: true,
                    });
                }
                continue;
            }
            if mask & (ffi::SND_CTL_EVENT_MASK_VALUE | ffi::SND_CTL_EVENT_MASK_ADD) == 0 {
                continue;
            }
            let plugged = self.read_id(lib);
            if self.known.insert(key.clone(), plugged) != Some(plugged) {
                changed.push(Jack {
                    name: key.0,
                    index: key.1,
                    plugged,
                    removed: false,
                });
            }
        }
        changed
    }

    /// `self.id`'s (name, index) if it is a jack control.
    fn jack_key(&self, lib: &Lib) -> Option<(String, u32)> {
        // SAFETY: `self.id` holds a valid id; the name is owned by it.
        let (iface, name, index) = unsafe {
            (
                (lib.ctl_elem_id_get_interface)(self.id),
                ffi::cstr_lossy((lib.ctl_elem_id_get_name)(self.id)).unwrap_or_default(),
                (lib.ctl_elem_id_get_index)(self.id),
            )
        };
        (iface == ffi::SND_CTL_ELEM_IFACE_CARD && name.ends_with(" Jack")).then_some((name, index))
    }

    /// The boolean value of the element `self.id` names (false if it cannot be read).
    fn read_id(&self, lib: &Lib) -> bool {
        // SAFETY: live handle, our id and value objects.
        unsafe {
            (lib.ctl_elem_value_set_id)(self.value, self.id);
            (lib.ctl_elem_read)(self.ctl, self.value) >= 0
                && (lib.ctl_elem_value_get_boolean)(self.value, 0) != 0
        }
    }

    /// Lists the card's elements and reads every jack.
    fn scan(&mut self, lib: &Lib) {
        let mut list: *mut Opaque = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the list and its space are freed below.
        unsafe {
            if (lib.ctl_elem_list_malloc)(&mut list) < 0 {
                return;
            }
            if (lib.ctl_elem_list)(self.ctl, list) >= 0 {
                let count = (lib.ctl_elem_list_get_count)(list);
                if (lib.ctl_elem_list_alloc_space)(list, count) >= 0
                    && (lib.ctl_elem_list)(self.ctl, list) >= 0
                {
                    for i in 0..(lib.ctl_elem_list_get_used)(list) {
                        (lib.ctl_elem_list_get_id)(list, i, self.id);
                        if let Some(key) = self.jack_key(lib) {
                            let plugged = self.read_id(lib);
                            self.known.insert(key, plugged);
                        }
                    }
                    (lib.ctl_elem_list_free_space)(list);
                }
            }
            (lib.ctl_elem_list_free)(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jack_names_map_to_pulseaudio_ports() {
        assert_eq!(
            port_of_jack("Headphone Jack"),
            Some(("analog-output-headphones", true))
        );
        assert_eq!(
            port_of_jack("Front Headphone Jack"),
            Some(("analog-output-headphones", true))
        );
        assert_eq!(
            port_of_jack("Rear Mic Jack"),
            Some(("analog-input-mic", false))
        );
        assert_eq!(
            port_of_jack("Line Out Jack"),
            Some(("analog-output-lineout", true))
        );
        assert_eq!(port_of_jack("HDMI/DP,pcm=3 Jack"), None);
        assert_eq!(port_of_jack("Headphone"), None, "not a jack control");
    }
}
