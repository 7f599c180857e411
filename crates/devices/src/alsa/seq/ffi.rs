//! alsa-lib's sequencer (`snd_seq_*`) and MIDI event coder (`snd_midi_event_*`), loaded
//! from the same library as the PCM table (alsa/ffi.rs) and the same way: one `dlopen`,
//! every symbol resolved up front, a missing one an "unavailable" error.
//!
//! [`SeqEvent`] is `snd_seq_event_t` (`seq_event.h`); its layout and the constants below
//! are alsa-lib's and the kernel's ABI (`sound/asequencer.h`).

use crate::alsa::ffi::{Opaque, alsa_table, library_name, open_library};
use std::ffi::{c_char, c_int, c_long, c_short, c_uint, c_void};
use std::sync::OnceLock;

/// `SND_SEQ_OPEN_DUPLEX`.
pub(crate) const SND_SEQ_OPEN_DUPLEX: c_int = 3;
/// `SND_SEQ_NONBLOCK`.
pub(crate) const SND_SEQ_NONBLOCK: c_int = 1;

pub(crate) const CAP_READ: c_uint = 1 << 0;
pub(crate) const CAP_WRITE: c_uint = 1 << 1;
pub(crate) const CAP_SUBS_READ: c_uint = 1 << 5;
pub(crate) const CAP_SUBS_WRITE: c_uint = 1 << 6;
pub(crate) const CAP_NO_EXPORT: c_uint = 1 << 7;

pub(crate) const PORT_TYPE_MIDI_GENERIC: c_uint = 1 << 1;
pub(crate) const PORT_TYPE_APPLICATION: c_uint = 1 << 20;

/// The system client and its announce port (`SND_SEQ_CLIENT_SYSTEM`,
/// `SND_SEQ_PORT_SYSTEM_ANNOUNCE`).
pub(crate) const CLIENT_SYSTEM: u8 = 0;
pub(crate) const PORT_SYSTEM_ANNOUNCE: u8 = 1;

/// `SND_SEQ_QUEUE_DIRECT`: delivered at once, not scheduled.
pub(crate) const QUEUE_DIRECT: u8 = 253;

/// Event types (`snd_seq_event_type`).
pub(crate) const EV_CLIENT_EXIT: u8 = 61;
pub(crate) const EV_PORT_START: u8 = 63;
pub(crate) const EV_PORT_EXIT: u8 = 64;
pub(crate) const EV_PORT_CHANGE: u8 = 65;
pub(crate) const EV_SYSEX: u8 = 130;
/// `SND_SEQ_EVENT_NONE`: what the encoder leaves while a message is incomplete.
pub(crate) const EV_NONE: u8 = 255;

/// `SND_SEQ_EVENT_LENGTH_MASK` / `…_VARIABLE` in [`SeqEvent::flags`].
pub(crate) const EV_LENGTH_MASK: u8 = 3 << 2;
pub(crate) const EV_LENGTH_VARIABLE: u8 = 1 << 2;

/// `snd_seq_addr_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Addr {
    pub client: u8,
    pub port: u8,
}

/// `snd_seq_event_t`: 28 bytes, 4-byte aligned; `data` is the 12-byte union.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SeqEvent {
    pub kind: u8,
    pub flags: u8,
    pub tag: u8,
    pub queue: u8,
    pub time: [u32; 2],
    pub source: Addr,
    pub dest: Addr,
    pub data: [u32; 3],
}

const _: () = assert!(std::mem::size_of::<SeqEvent>() == 28);

impl SeqEvent {
    /// `data.addr` (announce events name the client/port that came or went there).
    pub(crate) fn data_addr(&self) -> Addr {
        let b = self.data[0].to_ne_bytes();
        Addr {
            client: b[0],
            port: b[1],
        }
    }

    /// `data.ext` of a variable-length event (SYSEX): its bytes.
    ///
    /// # Safety
    /// The event is variable-length and its pointer is alive (alsa-lib's input buffer
    /// until the next `snd_seq_event_input`, or the encoder's buffer).
    pub(crate) unsafe fn ext(&self) -> &[u8] {
        let len = self.data[0] as usize;
        // `ext` is packed: the pointer sits 4 bytes in, unaligned.
        let base = self.data.as_ptr().cast::<u8>();
        // SAFETY: within the 12-byte union; read unaligned as alsa-lib packs it.
        let ptr = unsafe { base.add(4).cast::<*const u8>().read_unaligned() };
        if ptr.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: per the contract, `ptr` points to `len` live bytes.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// Whether the event carries variable-length data.
    pub(crate) fn is_variable(&self) -> bool {
        self.flags & EV_LENGTH_MASK == EV_LENGTH_VARIABLE
    }
}

alsa_table! {
    SeqLib;
    seq_open = "snd_seq_open": fn(*mut *mut Opaque, *const c_char, c_int, c_int) -> c_int;
    seq_close = "snd_seq_close": fn(*mut Opaque) -> c_int;
    seq_client_id = "snd_seq_client_id": fn(*mut Opaque) -> c_int;
    seq_set_client_name = "snd_seq_set_client_name": fn(*mut Opaque, *const c_char) -> c_int;
    seq_create_simple_port = "snd_seq_create_simple_port": fn(*mut Opaque, *const c_char, c_uint, c_uint) -> c_int;
    seq_connect_from = "snd_seq_connect_from": fn(*mut Opaque, c_int, c_int, c_int) -> c_int;
    seq_connect_to = "snd_seq_connect_to": fn(*mut Opaque, c_int, c_int, c_int) -> c_int;
    seq_poll_descriptors_count = "snd_seq_poll_descriptors_count": fn(*mut Opaque, c_short) -> c_int;
    seq_poll_descriptors = "snd_seq_poll_descriptors": fn(*mut Opaque, *mut libc::pollfd, c_uint, c_short) -> c_int;
    seq_event_input = "snd_seq_event_input": fn(*mut Opaque, *mut *mut SeqEvent) -> c_int;
    seq_event_output_direct = "snd_seq_event_output_direct": fn(*mut Opaque, *mut SeqEvent) -> c_int;

    client_info_malloc = "snd_seq_client_info_malloc": fn(*mut *mut Opaque) -> c_int;
    client_info_free = "snd_seq_client_info_free": fn(*mut Opaque);
    client_info_set_client = "snd_seq_client_info_set_client": fn(*mut Opaque, c_int);
    client_info_get_client = "snd_seq_client_info_get_client": fn(*const Opaque) -> c_int;
    client_info_get_name = "snd_seq_client_info_get_name": fn(*mut Opaque) -> *const c_char;
    query_next_client = "snd_seq_query_next_client": fn(*mut Opaque, *mut Opaque) -> c_int;
    get_any_client_info = "snd_seq_get_any_client_info": fn(*mut Opaque, c_int, *mut Opaque) -> c_int;

    port_info_malloc = "snd_seq_port_info_malloc": fn(*mut *mut Opaque) -> c_int;
    port_info_free = "snd_seq_port_info_free": fn(*mut Opaque);
    port_info_set_client = "snd_seq_port_info_set_client": fn(*mut Opaque, c_int);
    port_info_set_port = "snd_seq_port_info_set_port": fn(*mut Opaque, c_int);
    port_info_get_port = "snd_seq_port_info_get_port": fn(*const Opaque) -> c_int;
    port_info_get_name = "snd_seq_port_info_get_name": fn(*const Opaque) -> *const c_char;
    port_info_get_capability = "snd_seq_port_info_get_capability": fn(*const Opaque) -> c_uint;
    query_next_port = "snd_seq_query_next_port": fn(*mut Opaque, *mut Opaque) -> c_int;
    get_any_port_info = "snd_seq_get_any_port_info": fn(*mut Opaque, c_int, c_int, *mut Opaque) -> c_int;

    midi_event_new = "snd_midi_event_new": fn(usize, *mut *mut Opaque) -> c_int;
    midi_event_free = "snd_midi_event_free": fn(*mut Opaque);
    midi_event_no_status = "snd_midi_event_no_status": fn(*mut Opaque, c_int);
    midi_event_reset_encode = "snd_midi_event_reset_encode": fn(*mut Opaque);
    midi_event_reset_decode = "snd_midi_event_reset_decode": fn(*mut Opaque);
    midi_event_encode = "snd_midi_event_encode": fn(*mut Opaque, *const u8, c_long, *mut SeqEvent) -> c_long;
    midi_event_decode = "snd_midi_event_decode": fn(*mut Opaque, *mut u8, c_long, *const SeqEvent) -> c_long;
}

// SAFETY: plain function pointers into a library that is never unloaded.
unsafe impl Send for SeqLib {}
unsafe impl Sync for SeqLib {}

/// The sequencer table, loaded once per process; the error says why it is unavailable.
pub(crate) fn seq_lib() -> Result<&'static SeqLib, &'static str> {
    static LIB: OnceLock<Result<SeqLib, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let handle: *mut c_void = open_library(&library_name())?;
        // SAFETY: a live handle of alsa-lib, never closed.
        unsafe { SeqLib::resolve(handle) }
    })
    .as_ref()
    .map_err(|e| e.as_str())
}
