//! Time and transport. Frame times come from the graph's frame clock that quaverd
//! publishes with every cycle (CLOCK_MONOTONIC based, like jackd2's `jack_get_time`).
//! The transport is the server's (docs/engine/transport.md): the state machine runs in
//! quaverd's engine and every client reads it from its shared block (`transport.rs`).

use std::ffi::c_int;

use quaver_client::ClientError;
use quaver_client::quaver_protocol::callback::{TRANSPORT_START, TRANSPORT_STOP, TransportWords};
use quaver_client::quaver_protocol::message::{ErrorCode, Request};

use crate::client::{Client, as_client, now_ns};
use crate::transport;
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

fn transport_words(c: &Client) -> TransportWords {
    c.cb.shm().transport()
}

/// `jack_transport_query`: the state and position of the current cycle, as the server
/// published them at its start.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_query(
    client_p: *const Client,
    pos: *mut jack_position_t,
) -> jack_transport_state_t {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return JACK_TRANSPORT_STOPPED;
    };
    let t = transport_words(c);
    if !pos.is_null() {
        let p = transport::position(&t.current, &t);
        // SAFETY: the caller's out-pointer (packed: unaligned write).
        unsafe { pos.write_unaligned(p) };
    }
    t.state as jack_transport_state_t
}

/// `jack_get_current_transport_frame`: the frame of the current cycle, extrapolated to
/// now while rolling (as jackd2 does).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_current_transport_frame(
    client_p: *const Client,
) -> jack_nframes_t {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return 0;
    };
    let t = transport_words(c);
    let frame = t.current[0];
    if t.state as jack_transport_state_t != transport::ROLLING {
        return frame;
    }
    let usecs = jack_get_time().saturating_sub(t.usecs) as f64;
    let elapsed = (t.frame_rate as f64 / 1e6 * usecs).floor() as u32;
    frame.wrapping_add(elapsed)
}

/// `jack_transport_start`: applied at the next cycle start. Real-time safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_start(client_p: *mut Client) {
    // SAFETY: see `client`.
    if let Some(c) = unsafe { as_client(client_p) } {
        c.cb.shm().send_transport_command(TRANSPORT_START);
    }
}

/// `jack_transport_stop`. Real-time safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_stop(client_p: *mut Client) {
    // SAFETY: see `client`.
    if let Some(c) = unsafe { as_client(client_p) } {
        c.cb.shm().send_transport_command(TRANSPORT_STOP);
    }
}

fn request(c: &Client, pos: &jack_position_t) {
    let _g = c.transport.request_lock();
    c.cb.shm().send_transport_request(&transport::words(pos));
}

/// `jack_transport_locate`: moves to `frame` at the next cycle start, without BBT
/// (as jackd2's `TransportLocate`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_locate(
    client_p: *mut Client,
    frame: jack_nframes_t,
) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return libc::EINVAL;
    };
    // SAFETY: all-zero is a valid jack_position_t.
    let mut p: jack_position_t = unsafe { std::mem::zeroed() };
    p.frame = frame;
    request(c, &p);
    0
}

/// `JACK_POSITION_MASK`: what a reposition may carry.
const POSITION_MASK: c_int = 0x10 | 0x20;

/// `jack_transport_reposition`: a position with bits outside `JACK_POSITION_MASK` is
/// refused (EINVAL, said through the error callback) and not applied; like jackd2's
/// libjack, which drops `TransportReposition`'s EINVAL, it still returns 0, so that
/// programs see the same answers on both servers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_transport_reposition(
    client_p: *mut Client,
    pos: *const jack_position_t,
) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return -1;
    };
    if pos.is_null() {
        crate::error("jack_transport_reposition: NULL position (EINVAL)");
        return 0;
    }
    // SAFETY: the caller's position (packed: unaligned read).
    let p = unsafe { pos.read_unaligned() };
    if p.valid & !POSITION_MASK != 0 {
        let valid = p.valid;
        crate::error(&format!(
            "jack_transport_reposition: position bits {valid:#x} outside \
             JACK_POSITION_MASK (0x30): not applied (EINVAL)"
        ));
        return 0;
    }
    request(c, &p);
    0
}

/// `jack_set_sync_callback`: makes the client a slow-sync client; the callback runs on
/// the process thread before the process callback, from the next cycle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_sync_callback(
    client_p: *mut Client,
    cb: JackSyncCallback,
    arg: *mut std::ffi::c_void,
) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return -1;
    };
    c.transport.set_sync(c.cb.shm(), cb, arg);
    0
}

/// `jack_set_sync_timeout`: for everyone, as in jackd2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_sync_timeout(
    client_p: *mut Client,
    timeout: jack_time_t,
) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return -1;
    };
    match c.conn().request(Request::SetSyncTimeout { usecs: timeout }) {
        Ok(_) => 0,
        Err(e) => {
            crate::error(&format!("cannot set the sync timeout: {e}"));
            -1
        }
    }
}

/// Maps a refused timebase request to JACK's code.
fn timebase_errno(e: &ClientError) -> c_int {
    match e {
        ClientError::Server {
            code: ErrorCode::Busy,
            ..
        } => libc::EBUSY,
        ClientError::Server { .. } => libc::EINVAL,
        _ => -1,
    }
}

/// `jack_set_timebase_callback`: `EBUSY` when `conditional` and another client is the
/// master.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_timebase_callback(
    client_p: *mut Client,
    conditional: c_int,
    cb: JackTimebaseCallback,
    arg: *mut std::ffi::c_void,
) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return -1;
    };
    let r = c.conn().request(Request::SetTimebase {
        node: c.node,
        conditional: conditional != 0,
    });
    match r {
        Ok(_) => {
            c.transport.set_timebase(cb, arg);
            0
        }
        Err(e) => {
            c.transport.set_timebase(None, std::ptr::null_mut());
            timebase_errno(&e)
        }
    }
}

/// `jack_release_timebase`: `EINVAL` when the client is not the master.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_release_timebase(client_p: *mut Client) -> c_int {
    // SAFETY: see `client`.
    let Some(c) = (unsafe { as_client(client_p) }) else {
        return -1;
    };
    match c.conn().request(Request::ReleaseTimebase { node: c.node }) {
        Ok(_) => {
            c.transport.set_timebase(None, std::ptr::null_mut());
            0
        }
        Err(e) => timebase_errno(&e),
    }
}

/// `jack_engine_takeover_timebase`: deprecated; jackd2 says so and returns 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_engine_takeover_timebase(_client: *mut Client) -> c_int {
    crate::error("jack_engine_takeover_timebase: deprecated");
    0
}

/// `jack_get_transport_info` (deprecated): zeroes `tinfo`, as jackd2 does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_transport_info(
    _client: *mut Client,
    tinfo: *mut jack_transport_info_t,
) {
    crate::error("jack_get_transport_info: deprecated");
    if !tinfo.is_null() {
        // SAFETY: the caller's out-pointer; all-zero is valid.
        unsafe { *tinfo = std::mem::zeroed() };
    }
}

/// `jack_set_transport_info` (deprecated): zeroes `tinfo` and does nothing else, as
/// jackd2 does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_transport_info(
    _client: *mut Client,
    tinfo: *mut jack_transport_info_t,
) {
    crate::error("jack_set_transport_info: deprecated");
    if !tinfo.is_null() {
        // SAFETY: the caller's out-pointer; all-zero is valid.
        unsafe { *tinfo = std::mem::zeroed() };
    }
}
