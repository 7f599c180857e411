//! The C types and constants of JACK's public headers (`<jack/types.h>` and friends),
//! laid out exactly as jackd2 1.9.21 compiles them on Linux (checked by offset asserts
//! below against values measured with gcc).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::offset_of;

pub type jack_nframes_t = u32;
pub type jack_time_t = u64;
pub type jack_uuid_t = u64;
pub type jack_port_id_t = u32;
pub type jack_port_type_id_t = u32;
pub type jack_intclient_t = u64;
pub type jack_options_t = c_int;
pub type jack_status_t = c_int;
pub type jack_native_thread_t = libc::pthread_t;
pub type jack_transport_state_t = c_int;
pub type jack_latency_callback_mode_t = c_int;

pub const JACK_DEFAULT_AUDIO_TYPE: &std::ffi::CStr = c"32 bit float mono audio";
pub const JACK_DEFAULT_MIDI_TYPE: &std::ffi::CStr = c"8 bit raw midi";

// JackOptions
pub const JACK_NO_START_SERVER: c_int = 0x01;
pub const JACK_USE_EXACT_NAME: c_int = 0x02;
pub const JACK_SERVER_NAME: c_int = 0x04;
pub const JACK_LOAD_NAME: c_int = 0x08;
pub const JACK_LOAD_INIT: c_int = 0x10;
pub const JACK_SESSION_ID: c_int = 0x20;
pub const JACK_OPEN_OPTIONS: c_int =
    JACK_SESSION_ID | JACK_SERVER_NAME | JACK_NO_START_SERVER | JACK_USE_EXACT_NAME;

// JackStatus
pub const JACK_FAILURE: c_int = 0x01;
pub const JACK_INVALID_OPTION: c_int = 0x02;
pub const JACK_NAME_NOT_UNIQUE: c_int = 0x04;
pub const JACK_SERVER_FAILED: c_int = 0x10;
pub const JACK_SERVER_ERROR: c_int = 0x20;
pub const JACK_NO_SUCH_CLIENT: c_int = 0x40;
pub const JACK_LOAD_FAILURE: c_int = 0x80;
pub const JACK_INIT_FAILURE: c_int = 0x100;

// JackPortFlags
pub const JACK_PORT_IS_INPUT: c_int = 0x1;
pub const JACK_PORT_IS_OUTPUT: c_int = 0x2;
pub const JACK_PORT_IS_PHYSICAL: c_int = 0x4;
pub const JACK_PORT_CAN_MONITOR: c_int = 0x8;
pub const JACK_PORT_IS_TERMINAL: c_int = 0x10;

// JackLatencyCallbackMode
pub const JACK_CAPTURE_LATENCY: c_int = 0;
pub const JACK_PLAYBACK_LATENCY: c_int = 1;

// jack_transport_state_t
pub const JACK_TRANSPORT_STOPPED: c_int = 0;

/// Client name length limit, including the terminating NUL.
pub const CLIENT_NAME_SIZE: usize = 65;
/// Full port name length limit ("client:port"), including the terminating NUL.
pub const PORT_NAME_SIZE: usize = 321;
/// `JACK_UUID_STRING_SIZE`: 36 characters plus NUL.
pub const UUID_STRING_SIZE: usize = 37;

pub type JackProcessCallback = Option<unsafe extern "C" fn(jack_nframes_t, *mut c_void) -> c_int>;
pub type JackThreadCallback = Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>;
pub type JackThreadInitCallback = Option<unsafe extern "C" fn(*mut c_void)>;
pub type JackGraphOrderCallback = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
pub type JackXRunCallback = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
pub type JackBufferSizeCallback =
    Option<unsafe extern "C" fn(jack_nframes_t, *mut c_void) -> c_int>;
pub type JackSampleRateCallback =
    Option<unsafe extern "C" fn(jack_nframes_t, *mut c_void) -> c_int>;
pub type JackPortRegistrationCallback =
    Option<unsafe extern "C" fn(jack_port_id_t, c_int, *mut c_void)>;
pub type JackClientRegistrationCallback =
    Option<unsafe extern "C" fn(*const c_char, c_int, *mut c_void)>;
pub type JackPortConnectCallback =
    Option<unsafe extern "C" fn(jack_port_id_t, jack_port_id_t, c_int, *mut c_void)>;
pub type JackPortRenameCallback =
    Option<unsafe extern "C" fn(jack_port_id_t, *const c_char, *const c_char, *mut c_void)>;
pub type JackFreewheelCallback = Option<unsafe extern "C" fn(c_int, *mut c_void)>;
pub type JackShutdownCallback = Option<unsafe extern "C" fn(*mut c_void)>;
pub type JackInfoShutdownCallback =
    Option<unsafe extern "C" fn(jack_status_t, *const c_char, *mut c_void)>;
pub type JackLatencyCallback =
    Option<unsafe extern "C" fn(jack_latency_callback_mode_t, *mut c_void)>;
pub type JackSyncCallback = Option<
    unsafe extern "C" fn(jack_transport_state_t, *mut jack_position_t, *mut c_void) -> c_int,
>;
pub type JackTimebaseCallback = Option<
    unsafe extern "C" fn(
        jack_transport_state_t,
        jack_nframes_t,
        *mut jack_position_t,
        c_int,
        *mut c_void,
    ),
>;
pub type JackPropertyChangeCallback =
    Option<unsafe extern "C" fn(jack_uuid_t, *const c_char, c_int, *mut c_void)>;
pub type JackSessionCallback = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;
pub type JackThreadCreator = Option<
    unsafe extern "C" fn(
        *mut jack_native_thread_t,
        *const libc::pthread_attr_t,
        extern "C" fn(*mut c_void) -> *mut c_void,
        *mut c_void,
    ) -> c_int,
>;
pub type JackErrorFunction = Option<unsafe extern "C" fn(*const c_char)>;

/// `jack_latency_range_t` (packed; 8 bytes either way).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct jack_latency_range_t {
    pub min: jack_nframes_t,
    pub max: jack_nframes_t,
}

/// `jack_position_t` — packed in jackd2's headers.
#[repr(C, packed)]
#[derive(Clone, Copy)]
pub struct jack_position_t {
    pub unique_1: u64,
    pub usecs: jack_time_t,
    pub frame_rate: jack_nframes_t,
    pub frame: jack_nframes_t,
    pub valid: c_int,
    pub bar: i32,
    pub beat: i32,
    pub tick: i32,
    pub bar_start_tick: f64,
    pub beats_per_bar: f32,
    pub beat_type: f32,
    pub ticks_per_beat: f64,
    pub beats_per_minute: f64,
    pub frame_time: f64,
    pub next_time: f64,
    pub bbt_offset: jack_nframes_t,
    pub audio_frames_per_video_frame: f32,
    pub video_offset: jack_nframes_t,
    pub tick_double: f64,
    pub padding: [i32; 5],
    pub unique_2: u64,
}

/// `jack_transport_info_t` (deprecated API; not packed).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct jack_transport_info_t {
    pub frame_rate: jack_nframes_t,
    pub usecs: jack_time_t,
    pub valid: c_int,
    pub transport_state: jack_transport_state_t,
    pub frame: jack_nframes_t,
    pub loop_start: jack_nframes_t,
    pub loop_end: jack_nframes_t,
    pub smpte_offset: libc::c_long,
    pub smpte_frame_rate: f32,
    pub bar: c_int,
    pub beat: c_int,
    pub tick: c_int,
    pub bar_start_tick: f64,
    pub beats_per_bar: f32,
    pub beat_type: f32,
    pub ticks_per_beat: f64,
    pub beats_per_minute: f64,
}

/// `jack_midi_event_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct jack_midi_event_t {
    pub time: jack_nframes_t,
    pub size: usize,
    pub buffer: *mut u8,
}

/// `jack_ringbuffer_data_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct jack_ringbuffer_data_t {
    pub buf: *mut c_char,
    pub len: usize,
}

/// `jack_ringbuffer_t`: a public struct, so its layout is ABI.
#[repr(C)]
pub struct jack_ringbuffer_t {
    pub buf: *mut c_char,
    pub write_ptr: usize,
    pub read_ptr: usize,
    pub size: usize,
    pub size_mask: usize,
    pub mlocked: c_int,
}

const _: () = {
    assert!(size_of::<jack_position_t>() == 136);
    assert!(offset_of!(jack_position_t, frame_rate) == 16);
    assert!(offset_of!(jack_position_t, valid) == 24);
    assert!(offset_of!(jack_position_t, bar_start_tick) == 40);
    assert!(offset_of!(jack_position_t, frame_time) == 72);
    assert!(offset_of!(jack_position_t, bbt_offset) == 88);
    assert!(offset_of!(jack_position_t, tick_double) == 100);
    assert!(offset_of!(jack_position_t, padding) == 108);
    assert!(offset_of!(jack_position_t, unique_2) == 128);
    assert!(size_of::<jack_transport_info_t>() == 96);
    assert!(offset_of!(jack_transport_info_t, smpte_offset) == 40);
    assert!(offset_of!(jack_transport_info_t, bar_start_tick) == 64);
    assert!(offset_of!(jack_transport_info_t, beats_per_minute) == 88);
    assert!(size_of::<jack_midi_event_t>() == 24);
    assert!(size_of::<jack_ringbuffer_t>() == 48);
    assert!(size_of::<jack_latency_range_t>() == 8);
};
