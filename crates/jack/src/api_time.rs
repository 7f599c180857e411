//! Time and transport. Frame times come from the graph's frame clock that quaverd
//! publishes with every cycle (CLOCK_MONOTONIC based, like jackd2's `jack_get_time`).
//! The transport is always stopped at frame 0: quaver has no transport master yet.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::{Client, as_client, now_ns};
use crate::types::*;

/// `jack_get_time`: CLOCK_MONOTONIC in microseconds.
#[unsafe(no_mangle)]
pub extern "C" fn jack_get_time() -> jack_time_t {
    now_ns() / 1000
}

/// `jack_frame_time`: the estimated current frame time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_frame_time(client_p: *const Client) -> jack_nframes_t {
    // SAFETY: see `client`.
    unsafe { as_client(client_p) }.map_or(0, |c| c.frames_at(now_ns()) as u32)
}

/// `jack_last_frame_time`: the frame time at the start of the current cycle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_last_frame_time(client_p: *const Client) -> jack_nframes_t {
    // SAFETY: see `client`.
    unsafe { as_client(client_p) }.map_or(0, |c| c.last_cycle().0 as u32)
}

/// `jack_frames_since_cycle_start`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_frames_since_cycle_start(client_p: *const Client) -> jack_nframes_t {
    // SAFETY: see `client`.
    unsafe { as_client(client_p) }.map_or(0, |c| {
        let (pos, _, _) = c.last_cycle();
        c.frames_at(now_ns()).saturating_sub(pos) as u32
    })
}

/// `jack_get_cycle_times`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_cycle_times(
    client_p: *const Client,
    current_frames: *mut jack_nframes_t,
    current_usecs: *mut jack_time_t,
    next_usecs: *mut jack_time_t,
    period_usecs: *mut f32,
) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return -1;
    };
    let (pos, t, period) = c.last_cycle();
    // SAFETY: the caller's out-pointers (each may be NULL).
    unsafe {
        if !current_frames.is_null() {
            *current_frames = pos as u32;
        }
        if !current_usecs.is_null() {
            *current_usecs = t / 1000;
        }
        if !next_usecs.is_null() {
            *next_usecs = (t + period) / 1000;
        }
        if !period_usecs.is_null() {
            *period_usecs = period as f32 / 1000.0;
        }
    }
    0
}

/// `jack_frames_to_time`: microseconds at which frame `frames` is/was at the start of
/// the graph.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_frames_to_time(
    client_p: *const Client,
    frames: jack_nframes_t,
) -> jack_time_t {
    // SAFETY: see `client`.
    unsafe { as_client(client_p) }.map_or(0, |c| c.time_at(frames) / 1000)
}

/// `jack_time_to_frames`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_time_to_frames(
    client_p: *const Client,
    usecs: jack_time_t,
) -> jack_nframes_t {
    // SAFETY: see `client`.
    unsafe { as_client(client_p) }.map_or(0, |c| c.frames_at(usecs.saturating_mul(1000)) as u32)
}

static UNIQUE: AtomicU64 = AtomicU64::new(1);

/// `jack_transport_query`: always stopped at frame 0 (no transport master).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_query(
    client_p: *const Client,
    pos: *mut jack_position_t,
) -> jack_transport_state_t {
    // SAFETY: see `client`.
    let rate = unsafe { as_client(client_p) }.map_or(0, |c| c.rate);
    if !pos.is_null() {
        let u = UNIQUE.fetch_add(1, Ordering::Relaxed);
        // SAFETY: all-zero is a valid jack_position_t.
        let mut p: jack_position_t = unsafe { std::mem::zeroed() };
        p.unique_1 = u;
        p.usecs = jack_get_time();
        p.frame_rate = rate;
        p.frame = 0;
        p.valid = 0;
        p.unique_2 = u;
        // SAFETY: the caller's out-pointer (packed: unaligned write).
        unsafe { pos.write_unaligned(p) };
    }
    JACK_TRANSPORT_STOPPED
}

/// `jack_get_current_transport_frame`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_current_transport_frame(
    _client: *const Client,
) -> jack_nframes_t {
    0
}

/// `jack_transport_start`: ignored (no transport yet).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_start(_client: *mut Client) {
    crate::info("transport control is not supported; the transport stays stopped");
}

/// `jack_transport_stop`: the transport is already stopped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_stop(_client: *mut Client) {}

/// `jack_transport_locate`: not supported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_locate(
    _client: *mut Client,
    _frame: jack_nframes_t,
) -> c_int {
    -1
}

/// `jack_transport_reposition`: not supported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_reposition(
    _client: *mut Client,
    _pos: *const jack_position_t,
) -> c_int {
    -1
}

/// `jack_set_sync_callback`: accepted; never called (the transport never starts).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_sync_callback(
    _client: *mut Client,
    _cb: JackSyncCallback,
    _arg: *mut std::ffi::c_void,
) -> c_int {
    0
}

/// `jack_set_sync_timeout`: accepted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_sync_timeout(
    _client: *mut Client,
    _timeout: jack_time_t,
) -> c_int {
    0
}

/// `jack_set_timebase_callback`: there is no timebase master; refused with `EBUSY`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_timebase_callback(
    _client: *mut Client,
    _conditional: c_int,
    _cb: JackTimebaseCallback,
    _arg: *mut std::ffi::c_void,
) -> c_int {
    libc::EBUSY
}

/// `jack_release_timebase`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_release_timebase(_client: *mut Client) -> c_int {
    0
}

/// `jack_engine_takeover_timebase` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_engine_takeover_timebase(_client: *mut Client) -> c_int {
    libc::ENOSYS
}

/// `jack_get_transport_info` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_transport_info(
    client_p: *mut Client,
    tinfo: *mut jack_transport_info_t,
) {
    if tinfo.is_null() {
        return;
    }
    // SAFETY: see `client`.
    let rate = unsafe { as_client(client_p) }.map_or(0, |c| c.rate);
    // SAFETY: all-zero is valid; the caller's out-pointer.
    unsafe {
        let mut t: jack_transport_info_t = std::mem::zeroed();
        t.frame_rate = rate;
        t.usecs = jack_get_time();
        t.valid = 0x1 | 0x2; // state and position
        t.transport_state = JACK_TRANSPORT_STOPPED;
        *tinfo = t;
    }
}

/// `jack_set_transport_info` (deprecated): ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_transport_info(
    _client: *mut Client,
    _tinfo: *mut jack_transport_info_t,
) {
}
