//! `jack_port_t`: a port of this client (with its private buffer) or a handle on
//! another node's port.
//!
//! Port objects are never freed before their client closes (unregistered ones are
//! only marked dead), so a pointer an application holds never dangles while its
//! client lives.

use std::cell::UnsafeCell;
use std::ffi::{CString, c_int};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::midi;
use crate::types::*;

/// What a port carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// f32 audio, a quaver graph port.
    Audio,
    /// JACK MIDI, a quaver graph port carrying event lists.
    Midi,
}

/// A JACK port.
pub struct Port {
    /// The client that made this object (for queries); valid while the port is. An
    /// address only, so this file stays below `client.rs` ([`crate::client::owner`]).
    pub(crate) client: *const (),
    /// Graph port id.
    pub(crate) id: u32,
    pub(crate) full_name: CString,
    pub(crate) short_name: CString,
    pub(crate) kind: PortKind,
    pub(crate) flags: c_int,
    /// Owned by `client`.
    pub(crate) mine: bool,
    /// Buffer index in the shared block (own audio ports).
    pub(crate) index: usize,
    /// Own audio ports: the buffer `jack_port_get_buffer` returns.
    audio: UnsafeCell<Box<[f32]>>,
    /// Own MIDI ports: a JACK MIDI buffer.
    midi: UnsafeCell<Box<[u8]>>,
    /// Own MIDI ports: the event list on its way to or from the shared block
    /// (`quaver_protocol::midi`), one port buffer long.
    wire: UnsafeCell<Box<[u32]>>,
    /// Capture and playback latency ranges, `min << 32 | max`.
    latency: [AtomicU64; 2],
    /// Own ports: the ranges last published to the server (`latency::publish`).
    pub(crate) published: std::sync::Mutex<Option<[u64; 2]>>,
    pub(crate) alive: AtomicBool,
}

// SAFETY: the buffers are touched only by the client's process thread (and by the
// application from its process callback on that same thread); everything else is
// immutable or atomic/locked.
unsafe impl Send for Port {}
// SAFETY: as above.
unsafe impl Sync for Port {}

/// Bytes of a MIDI port buffer.
pub const MIDI_BUFFER_BYTES: usize = 32 * 1024;

fn pack(r: jack_latency_range_t) -> u64 {
    ((r.min as u64) << 32) | r.max as u64
}

impl Port {
    /// One of this client's own ports.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn own(
        client: *const (),
        id: u32,
        full_name: &str,
        short_name: &str,
        kind: PortKind,
        flags: c_int,
        index: usize,
        max_frames: usize,
    ) -> Port {
        let audio = if kind == PortKind::Audio {
            vec![0.0f32; max_frames]
        } else {
            Vec::new()
        };
        let (midi, wire) = if kind == PortKind::Midi {
            let mut b = vec![0u8; MIDI_BUFFER_BYTES];
            midi::init_buffer(&mut b, max_frames as u32);
            (b, vec![0u32; max_frames])
        } else {
            (Vec::new(), Vec::new())
        };
        Port {
            client,
            id,
            full_name: CString::new(full_name).unwrap_or_default(),
            short_name: CString::new(short_name).unwrap_or_default(),
            kind,
            flags,
            mine: true,
            index,
            audio: UnsafeCell::new(audio.into_boxed_slice()),
            midi: UnsafeCell::new(midi.into_boxed_slice()),
            wire: UnsafeCell::new(wire.into_boxed_slice()),
            latency: [AtomicU64::new(0), AtomicU64::new(0)],
            published: std::sync::Mutex::new(None),
            alive: AtomicBool::new(true),
        }
    }

    /// A handle on a port of another node.
    pub(crate) fn foreign(
        client: *const (),
        id: u32,
        full_name: &str,
        short_name: &str,
        flags: c_int,
        kind: PortKind,
    ) -> Port {
        Port {
            client,
            id,
            full_name: CString::new(full_name).unwrap_or_default(),
            short_name: CString::new(short_name).unwrap_or_default(),
            kind,
            flags,
            mine: false,
            index: 0,
            audio: UnsafeCell::new(Box::new([])),
            midi: UnsafeCell::new(Box::new([])),
            wire: UnsafeCell::new(Box::new([])),
            latency: [AtomicU64::new(0), AtomicU64::new(0)],
            published: std::sync::Mutex::new(None),
            alive: AtomicBool::new(true),
        }
    }

    /// The full name as text.
    pub(crate) fn name(&self) -> &str {
        self.full_name.to_str().unwrap_or("")
    }

    /// The buffer `jack_port_get_buffer` hands out (NULL for foreign ports).
    pub(crate) fn buffer_ptr(&self) -> *mut std::ffi::c_void {
        if !self.mine {
            return std::ptr::null_mut();
        }
        // SAFETY: we only take a raw pointer; the boxes are never reallocated.
        unsafe {
            match self.kind {
                PortKind::Audio => (*self.audio.get()).as_mut_ptr().cast(),
                PortKind::Midi => (*self.midi.get()).as_mut_ptr().cast(),
            }
        }
    }

    /// The audio buffer, for the process thread.
    ///
    /// # Safety
    /// Only the client's process thread may call this, and not while another borrow
    /// of the same buffer is alive.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn audio_mut(&self) -> &mut [f32] {
        // SAFETY: per the contract.
        unsafe { &mut *self.audio.get() }
    }

    /// The MIDI buffer, for the process thread.
    ///
    /// # Safety
    /// As for [`Port::audio_mut`].
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn midi_mut(&self) -> &mut [u8] {
        // SAFETY: per the contract.
        unsafe { &mut *self.midi.get() }
    }

    /// The MIDI port's event list for the shared block, for the process thread.
    ///
    /// # Safety
    /// As for [`Port::audio_mut`].
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn wire_mut(&self) -> &mut [u32] {
        // SAFETY: per the contract.
        unsafe { &mut *self.wire.get() }
    }

    /// The latency range for `mode` (capture or playback).
    pub(crate) fn latency(&self, mode: c_int) -> jack_latency_range_t {
        let v = self.latency[(mode == JACK_PLAYBACK_LATENCY) as usize].load(Ordering::Relaxed);
        jack_latency_range_t {
            min: (v >> 32) as u32,
            max: v as u32,
        }
    }

    /// Both ranges packed, capture first: what [`crate::latency::publish`] compares.
    pub(crate) fn latency_bits(&self) -> [u64; 2] {
        [
            self.latency[0].load(Ordering::Relaxed),
            self.latency[1].load(Ordering::Relaxed),
        ]
    }

    /// Sets the latency range for `mode`.
    pub(crate) fn set_latency(&self, mode: c_int, r: jack_latency_range_t) {
        self.latency[(mode == JACK_PLAYBACK_LATENCY) as usize].store(pack(r), Ordering::Relaxed);
    }

    /// The port type string.
    pub(crate) fn type_name(&self) -> &'static std::ffi::CStr {
        match self.kind {
            PortKind::Audio => JACK_DEFAULT_AUDIO_TYPE,
            PortKind::Midi => JACK_DEFAULT_MIDI_TYPE,
        }
    }

    /// The port's UUID as the server gives it (`(type << 32) | id`).
    pub(crate) fn uuid(&self) -> u64 {
        quaver_protocol::message::port_uuid(self.id)
    }
}
