//! Raw MIDI bytes and sequencer events: checking a message before it is sent, splitting
//! decoded bytes into messages, alsa-lib's coder (`snd_midi_event_*`, which needs no
//! device), and putting sysex back together from the chunks the kernel delivers.

use super::ffi::{EV_NONE, EV_SYSEX, SeqEvent, SeqLib};
use crate::alsa::ffi::Opaque;
use std::collections::HashMap;
use std::ffi::c_long;

/// Why bytes given to [`super::SeqOutput::send`] are not one MIDI message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MalformedMidi {
    /// Nothing to send.
    #[error("empty MIDI message")]
    Empty,
    /// The first byte is a data byte (running status is not accepted: one message,
    /// status first).
    #[error("MIDI message starts with data byte {0:#04x}, not a status byte")]
    NoStatus(u8),
    /// F4, F5, F9, FD: undefined in MIDI 1.0; or a lone F7.
    #[error("status byte {0:#04x} is undefined or out of place")]
    BadStatus(u8),
    /// The status needs a different number of data bytes.
    #[error("status {status:#04x} takes {want} data byte(s), got {got}")]
    WrongLength { status: u8, want: usize, got: usize },
    /// A status byte where a data byte belongs.
    #[error("byte {byte:#04x} at offset {at} is a status byte inside a message")]
    StatusInData { byte: u8, at: usize },
    /// Sysex without its closing F7.
    #[error("system exclusive message does not end with F7")]
    UnterminatedSysex,
}

/// Data bytes that follow `status`, or `None` for sysex (variable) and undefined ones.
fn data_len(status: u8) -> Option<Result<usize, ()>> {
    Some(Ok(match status {
        0x80..=0xBF | 0xE0..=0xEF => 2,
        0xC0..=0xDF => 1,
        0xF0 => return None,
        0xF1 | 0xF3 => 1,
        0xF2 => 2,
        0xF6 | 0xF8 | 0xFA | 0xFB | 0xFC | 0xFE | 0xFF => 0,
        _ => return Some(Err(())),
    }))
}

/// Checks that `bytes` are exactly one complete MIDI 1.0 message.
pub fn check_message(bytes: &[u8]) -> Result<(), MalformedMidi> {
    let (&status, rest) = bytes.split_first().ok_or(MalformedMidi::Empty)?;
    if status < 0x80 {
        return Err(MalformedMidi::NoStatus(status));
    }
    let in_data = |rest: &[u8]| {
        rest.iter()
            .position(|&b| b >= 0x80)
            .map(|i| MalformedMidi::StatusInData {
                byte: rest[i],
                at: i + 1,
            })
    };
    match data_len(status) {
        Some(Ok(want)) => {
            if let Some(e) = in_data(rest) {
                return Err(e);
            }
            if rest.len() != want {
                return Err(MalformedMidi::WrongLength {
                    status,
                    want,
                    got: rest.len(),
                });
            }
            Ok(())
        }
        Some(Err(())) => Err(MalformedMidi::BadStatus(status)),
        None => match rest.split_last() {
            Some((&0xF7, body)) => in_data(body).map_or(Ok(()), Err),
            _ => Err(MalformedMidi::UnterminatedSysex),
        },
    }
}

/// Splits decoded bytes (complete messages, status always present) into messages: the
/// decoder turns one 14-bit controller or (N)RPN event into several.
pub fn split_messages(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (&status, _) = bytes.split_first()?;
        let n = match data_len(status) {
            Some(Ok(n)) => 1 + n,
            // Sysex comes whole from the decoder; undefined bytes are kept as they are.
            _ => bytes.len(),
        }
        .min(bytes.len());
        let (msg, rest) = bytes.split_at(n);
        bytes = rest;
        Some(msg)
    })
}

/// One `snd_midi_event_t`: an encoder with room for `capacity` bytes of sysex, or a
/// decoder that always writes the status byte (running status expanded).
pub(crate) struct Coder {
    lib: &'static SeqLib,
    dev: *mut Opaque,
}

// SAFETY: the coder is plain memory owned by this value, used from one thread at a time.
unsafe impl Send for Coder {}

impl Coder {
    /// A coder whose encoder holds `capacity` bytes (the longest sysex sent whole).
    pub(crate) fn new(lib: &'static SeqLib, capacity: usize) -> Result<Coder, String> {
        let mut dev = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        let rc = unsafe { (lib.midi_event_new)(capacity, &mut dev) };
        if rc < 0 || dev.is_null() {
            return Err(format!("snd_midi_event_new({capacity}) failed ({rc})"));
        }
        // SAFETY: live coder.
        unsafe { (lib.midi_event_no_status)(dev, 1) };
        Ok(Coder { lib, dev })
    }

    /// Encodes one complete message (checked by [`check_message`]) into `ev`.
    pub(crate) fn encode(&mut self, msg: &[u8], ev: &mut SeqEvent) -> Result<(), String> {
        // SAFETY: live coder; `msg` and `ev` valid for the call. Resetting first keeps
        // a previous message's state (running status, a partial sysex) out of this one.
        let used = unsafe {
            (self.lib.midi_event_reset_encode)(self.dev);
            (self.lib.midi_event_encode)(self.dev, msg.as_ptr(), msg.len() as c_long, ev)
        };
        if used < 0 {
            return Err(format!("snd_midi_event_encode failed ({used})"));
        }
        if ev.kind == EV_NONE || used as usize != msg.len() {
            return Err(format!(
                "alsa-lib encoded {used} of {} bytes into no complete event",
                msg.len()
            ));
        }
        Ok(())
    }

    /// Decodes a non-sysex event into `out`; `None` when it is not a MIDI message
    /// (sequencer-only events) or does not fit.
    pub(crate) fn decode<'a>(&mut self, ev: &SeqEvent, out: &'a mut [u8]) -> Option<&'a [u8]> {
        // SAFETY: live coder; `out` writable for its length; `ev` valid.
        let n = unsafe {
            (self.lib.midi_event_reset_decode)(self.dev);
            (self.lib.midi_event_decode)(self.dev, out.as_mut_ptr(), out.len() as c_long, ev)
        };
        (n > 0).then(|| &out[..n as usize])
    }
}

impl Drop for Coder {
    fn drop(&mut self) {
        // SAFETY: created by snd_midi_event_new, freed once.
        unsafe { (self.lib.midi_event_free)(self.dev) };
    }
}

/// What [`Assembler::push`] made of a sysex chunk.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sysex<'a> {
    /// A complete message, F0 … F7.
    Complete(&'a [u8]),
    /// Kept until the rest arrives.
    Partial,
    /// Thrown away: longer than the bound, or a chunk with no start.
    Dropped,
}

/// Sysex reassembly per source port: the kernel hands a long sysex over in chunks
/// (a rawmidi port's as the bytes come), the first starting with F0, the last ending
/// with F7. Bounded: a message longer than `max` bytes is dropped whole.
pub(crate) struct Assembler<K> {
    max: usize,
    pending: HashMap<K, Collect>,
    done: Vec<u8>,
}

/// One port's reassembly.
enum Collect {
    Idle,
    Collecting(Vec<u8>),
    /// Past the bound: the rest is skipped up to F7.
    Overflow,
}

impl<K: std::hash::Hash + Eq + Copy> Assembler<K> {
    /// Sysex up to `max` bytes (F0 and F7 included) are delivered.
    pub(crate) fn new(max: usize) -> Self {
        Assembler {
            max,
            pending: HashMap::new(),
            done: Vec::new(),
        }
    }

    /// Adds a chunk from `port`.
    pub(crate) fn push(&mut self, port: K, chunk: &[u8]) -> Sysex<'_> {
        let starts = chunk.first() == Some(&0xF0);
        let ends = chunk.last() == Some(&0xF7);
        let state = self.pending.entry(port).or_insert(Collect::Idle);
        if starts {
            *state = Collect::Collecting(Vec::with_capacity(chunk.len()));
        } else if matches!(state, Collect::Idle) {
            // A continuation without a start: its beginning was lost.
            return Sysex::Dropped;
        }
        if let Collect::Collecting(buf) = state {
            if buf.len() + chunk.len() <= self.max {
                buf.extend_from_slice(chunk);
            } else {
                *state = Collect::Overflow;
            }
        }
        if !ends {
            return Sysex::Partial;
        }
        match std::mem::replace(state, Collect::Idle) {
            Collect::Collecting(buf) => {
                self.done = buf;
                Sysex::Complete(&self.done)
            }
            _ => Sysex::Dropped,
        }
    }

    /// Forgets a port's partial message (the port went away).
    pub(crate) fn forget(&mut self, port: K) {
        self.pending.remove(&port);
    }
}

/// Whether `ev` is a sysex chunk.
pub(crate) fn is_sysex(ev: &SeqEvent) -> bool {
    ev.kind == EV_SYSEX && ev.is_variable()
}
