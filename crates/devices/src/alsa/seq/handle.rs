//! Our sequencer client: opening it with its two ports, listing and looking up other
//! clients' ports, subscribing. Used only by the bridge's thread after `open`.

use super::ffi::{self, Addr, SeqLib};
use super::types::{PortId, PortInfo, SeqError};
use crate::alsa::ffi::{Opaque, cstr_lossy};
use std::ffi::{CString, c_int};

/// An alsa-lib error code as text (sequencer errors are negative errno values).
pub(super) fn errno_text(rc: c_int) -> String {
    std::io::Error::from_raw_os_error(-rc).to_string()
}

/// An open sequencer client with our two ports.
pub(super) struct Seq {
    pub(super) lib: &'static SeqLib,
    pub(super) h: *mut Opaque,
    pub(super) client: u8,
    pub(super) in_port: u8,
    pub(super) out_port: u8,
}

// SAFETY: the handle is used by one thread at a time (moved to the bridge's thread).
unsafe impl Send for Seq {}

impl Drop for Seq {
    fn drop(&mut self) {
        // SAFETY: opened by snd_seq_open, closed once; the kernel drops our ports and
        // subscriptions with the client.
        unsafe { (self.lib.seq_close)(self.h) };
    }
}

/// Frees an alsa-lib info object when dropped.
struct Info {
    p: *mut Opaque,
    free: unsafe extern "C" fn(*mut Opaque),
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: allocated by the matching *_malloc.
        unsafe { (self.free)(self.p) };
    }
}

/// The kernel's sequencer device.
const SEQ_DEVICE: &str = "/dev/snd/seq";

impl Seq {
    pub(super) fn open(lib: &'static SeqLib, name: &str) -> Result<Seq, SeqError> {
        // Without the device, snd_seq_open would only fail, after loading alsa-lib's whole
        // configuration: its hooks (libasound2-plugins' PulseAudio one) pull libpulse and
        // a dozen libraries into the daemon for good, 610 kB of an idle quaverd's 3.7 MB
        // PSS on a machine with no sound card.
        if !std::path::Path::new(SEQ_DEVICE).exists() {
            return Err(SeqError::NoSequencer(format!(
                "{SEQ_DEVICE} does not exist (no snd-seq module, or no ALSA)"
            )));
        }
        let mut h = std::ptr::null_mut();
        // SAFETY: out-pointer to a local, NUL-terminated name.
        let rc = unsafe {
            (lib.seq_open)(
                &mut h,
                c"default".as_ptr(),
                ffi::SND_SEQ_OPEN_DUPLEX,
                ffi::SND_SEQ_NONBLOCK,
            )
        };
        if rc < 0 || h.is_null() {
            return Err(SeqError::NoSequencer(format!(
                "snd_seq_open(\"default\") failed: {}",
                errno_text(rc)
            )));
        }
        let mut seq = Seq {
            lib,
            h,
            client: 0,
            in_port: 0,
            out_port: 0,
        };
        let call = |what: &'static str, rc: c_int| {
            if rc < 0 {
                Err(SeqError::Call {
                    what,
                    why: errno_text(rc),
                })
            } else {
                Ok(rc)
            }
        };
        let cname = CString::new(name).map_err(|_| SeqError::Call {
            what: "snd_seq_set_client_name",
            why: format!("client name {name:?} contains NUL"),
        })?;
        // SAFETY: live handle, NUL-terminated strings.
        unsafe {
            call(
                "snd_seq_set_client_name",
                (lib.seq_set_client_name)(h, cname.as_ptr()),
            )?;
            seq.client = call("snd_seq_client_id", (lib.seq_client_id)(h))? as u8;
            let kind = ffi::PORT_TYPE_MIDI_GENERIC | ffi::PORT_TYPE_APPLICATION;
            seq.in_port = call(
                "snd_seq_create_simple_port(in)",
                (lib.seq_create_simple_port)(
                    h,
                    c"in".as_ptr(),
                    ffi::CAP_WRITE | ffi::CAP_SUBS_WRITE,
                    kind,
                ),
            )? as u8;
            seq.out_port = call(
                "snd_seq_create_simple_port(out)",
                (lib.seq_create_simple_port)(h, c"out".as_ptr(), ffi::CAP_READ, kind),
            )? as u8;
            call(
                "subscribing to the system announce port",
                (lib.seq_connect_from)(
                    h,
                    c_int::from(seq.in_port),
                    c_int::from(ffi::CLIENT_SYSTEM),
                    c_int::from(ffi::PORT_SYSTEM_ANNOUNCE),
                ),
            )?;
        }
        Ok(seq)
    }

    fn info(
        &self,
        malloc: unsafe extern "C" fn(*mut *mut Opaque) -> c_int,
        free: unsafe extern "C" fn(*mut Opaque),
    ) -> Option<Info> {
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        (unsafe { malloc(&mut p) } >= 0 && !p.is_null()).then_some(Info { p, free })
    }

    /// A port's info as a [`PortInfo`], if it is another client's and usable.
    pub(super) fn port_info(
        &self,
        client_name: &str,
        pi: *mut Opaque,
        client: u8,
    ) -> Option<PortInfo> {
        let l = self.lib;
        // SAFETY: a filled port info.
        let (port, caps, name) = unsafe {
            (
                (l.port_info_get_port)(pi),
                (l.port_info_get_capability)(pi),
                cstr_lossy((l.port_info_get_name)(pi)).unwrap_or_default(),
            )
        };
        let both = |a: u32, b: u32| caps & (a | b) == a | b;
        let readable = both(ffi::CAP_READ, ffi::CAP_SUBS_READ);
        let writable = both(ffi::CAP_WRITE, ffi::CAP_SUBS_WRITE);
        if client == ffi::CLIENT_SYSTEM
            || client == self.client
            || caps & ffi::CAP_NO_EXPORT != 0
            || !(readable || writable)
        {
            return None;
        }
        Some(PortInfo {
            id: PortId {
                client,
                port: port as u8,
            },
            client_name: client_name.to_string(),
            port_name: name,
            readable,
            writable,
        })
    }

    /// Every other client's usable port.
    pub(super) fn list(&self) -> Vec<PortInfo> {
        let l = self.lib;
        let (Some(ci), Some(pi)) = (
            self.info(l.client_info_malloc, l.client_info_free),
            self.info(l.port_info_malloc, l.port_info_free),
        ) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        // SAFETY: live handle and info objects throughout.
        unsafe {
            (l.client_info_set_client)(ci.p, -1);
            while (l.query_next_client)(self.h, ci.p) >= 0 {
                let client = (l.client_info_get_client)(ci.p);
                let cname = cstr_lossy((l.client_info_get_name)(ci.p)).unwrap_or_default();
                (l.port_info_set_client)(pi.p, client);
                (l.port_info_set_port)(pi.p, -1);
                while (l.query_next_port)(self.h, pi.p) >= 0 {
                    out.extend(self.port_info(&cname, pi.p, client as u8));
                }
            }
        }
        out
    }

    /// One port's current info (announced ports), if usable.
    pub(super) fn lookup(&self, a: Addr) -> Option<PortInfo> {
        let l = self.lib;
        let ci = self.info(l.client_info_malloc, l.client_info_free)?;
        let pi = self.info(l.port_info_malloc, l.port_info_free)?;
        // SAFETY: live handle and info objects.
        unsafe {
            if (l.get_any_client_info)(self.h, c_int::from(a.client), ci.p) < 0
                || (l.get_any_port_info)(self.h, c_int::from(a.client), c_int::from(a.port), pi.p)
                    < 0
            {
                return None;
            }
            let cname = cstr_lossy((l.client_info_get_name)(ci.p)).unwrap_or_default();
            self.port_info(&cname, pi.p, a.client)
        }
    }

    /// Subscribes our input port to a readable port, and our output port to a writable
    /// one: events are sent to it directly, but some ports act only while someone is
    /// subscribed (a virmidi port passes events to its rawmidi device only while "used").
    pub(super) fn subscribe(&self, p: &PortInfo) -> Result<(), String> {
        let l = self.lib;
        let (c, n) = (c_int::from(p.id.client), c_int::from(p.id.port));
        // SAFETY: live handle.
        let rc = unsafe {
            let r = if p.readable {
                (l.seq_connect_from)(self.h, c_int::from(self.in_port), c, n)
            } else {
                0
            };
            if r >= 0 && p.writable {
                (l.seq_connect_to)(self.h, c_int::from(self.out_port), c, n)
            } else {
                r
            }
        };
        if rc < 0 { Err(errno_text(rc)) } else { Ok(()) }
    }

    pub(super) fn poll_fds(&self) -> Vec<libc::pollfd> {
        let ev = libc::POLLIN;
        // SAFETY: live handle; the vector has room for `n` descriptors.
        unsafe {
            let n = (self.lib.seq_poll_descriptors_count)(self.h, ev).max(0) as usize;
            let mut fds = vec![
                libc::pollfd {
                    fd: -1,
                    events: 0,
                    revents: 0
                };
                n
            ];
            let got = (self.lib.seq_poll_descriptors)(self.h, fds.as_mut_ptr(), n as u32, ev);
            fds.truncate(got.max(0) as usize);
            fds
        }
    }
}
