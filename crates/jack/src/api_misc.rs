//! Version, memory, error hooks, UUIDs, and the parts of the API quaver does not
//! provide (reserved names, internal clients), which fail cleanly. Metadata is
//! `api_meta`, sessions `api_session`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::Client;
use crate::types::*;
use crate::{JACK_VERSION, cstr, guard};

/// `jack_get_version`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_version(
    major: *mut c_int,
    minor: *mut c_int,
    micro: *mut c_int,
    proto: *mut c_int,
) {
    let (a, b, c, d) = JACK_VERSION;
    // SAFETY: the caller's out-pointers (each may be NULL).
    unsafe {
        for (p, v) in [(major, a), (minor, b), (micro, c), (proto, d)] {
            if !p.is_null() {
                *p = v;
            }
        }
    }
}

/// `jack_get_version_string`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_get_version_string() -> *const c_char {
    c"1.9.21 (quaver)".as_ptr()
}

/// `jack_free`: frees what this library `malloc`ed for the caller.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_free(ptr: *mut c_void) {
    // SAFETY: `ptr` came from malloc in this library (or is NULL).
    unsafe { libc::free(ptr) }
}

/// `jack_set_error_function`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_error_function(func: JackErrorFunction) {
    // SAFETY: a pointer-sized store the application makes before using JACK.
    unsafe { std::ptr::addr_of_mut!(crate::jack_error_callback).write(func) };
}

/// `jack_set_info_function`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_info_function(func: JackErrorFunction) {
    // SAFETY: as above.
    unsafe { std::ptr::addr_of_mut!(crate::jack_info_callback).write(func) };
}

/// `jack_get_max_delayed_usecs`: not measured; 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_max_delayed_usecs(_client: *mut Client) -> f32 {
    0.0
}

/// `jack_get_xrun_delayed_usecs`: not measured; 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_xrun_delayed_usecs(_client: *mut Client) -> f32 {
    0.0
}

/// `jack_reset_max_delayed_usecs`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_reset_max_delayed_usecs(_client: *mut Client) {}

// ----- UUIDs: (type << 32) | index, printed in decimal as jackd2 does -----

static NEXT_UUID: AtomicU64 = AtomicU64::new(1);

/// `jack_client_uuid_generate`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_client_uuid_generate() -> jack_uuid_t {
    (2u64 << 32) | (0x4000_0000 | NEXT_UUID.fetch_add(1, Ordering::Relaxed) as u32) as u64
}

/// `jack_port_uuid_generate`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_port_uuid_generate(port_id: u32) -> jack_uuid_t {
    (1u64 << 32) | port_id as u64
}

/// `jack_uuid_to_index`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_uuid_to_index(u: jack_uuid_t) -> u32 {
    (u & 0xffff_ffff) as u32
}

/// `jack_uuid_compare`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_uuid_compare(a: jack_uuid_t, b: jack_uuid_t) -> c_int {
    a.cmp(&b) as c_int
}

/// `jack_uuid_copy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_uuid_copy(dst: *mut jack_uuid_t, src: jack_uuid_t) {
    if !dst.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *dst = src };
    }
}

/// `jack_uuid_clear`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_uuid_clear(u: *mut jack_uuid_t) {
    if !u.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *u = 0 };
    }
}

/// `jack_uuid_empty`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_uuid_empty(u: jack_uuid_t) -> c_int {
    (u == 0) as c_int
}

/// `jack_uuid_parse`: decimal; 0 on success, -1 otherwise, and -1 for a number without
/// the type bits (below 2^32), as jackd2 does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_uuid_parse(buf: *const c_char, u: *mut jack_uuid_t) -> c_int {
    guard(-1, || {
        // SAFETY: a C string from the caller.
        let Some(s) = (unsafe { cstr(buf) }) else {
            return -1;
        };
        match s.trim().parse::<u64>() {
            Ok(v) if !u.is_null() && v >> 32 != 0 => {
                // SAFETY: the caller's out-pointer.
                unsafe { *u = v };
                0
            }
            _ => -1,
        }
    })
}

/// `jack_uuid_unparse`: decimal into a `JACK_UUID_STRING_SIZE` buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_uuid_unparse(u: jack_uuid_t, buf: *mut c_char) {
    if buf.is_null() {
        return;
    }
    let s = u.to_string();
    let n = s.len().min(UUID_STRING_SIZE - 1);
    // SAFETY: the caller's buffer holds JACK_UUID_STRING_SIZE bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast(), buf, n);
        *buf.add(n) = 0;
    }
}

/// `jack_reserve_client_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_reserve_client_name(
    _client: *mut Client,
    _name: *const c_char,
    _uuid: *const c_char,
) -> c_int {
    -1
}

// ----- internal clients: not supported -----

/// `jack_internal_client_new` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_internal_client_new(
    _client_name: *const c_char,
    _load_name: *const c_char,
    _load_init: *const c_char,
) -> c_int {
    -1
}

/// `jack_internal_client_close` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_internal_client_close(_client_name: *const c_char) {}

/// `jack_get_internal_client_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_internal_client_name(
    _client: *mut Client,
    _intclient: jack_intclient_t,
) -> *mut c_char {
    std::ptr::null_mut()
}

fn no_such_client(status: *mut jack_status_t) -> jack_intclient_t {
    if !status.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *status = JACK_FAILURE | JACK_NO_SUCH_CLIENT };
    }
    0
}

/// `jack_internal_client_handle`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_internal_client_handle(
    _client: *mut Client,
    _client_name: *const c_char,
    status: *mut jack_status_t,
) -> jack_intclient_t {
    no_such_client(status)
}

/// `jack_internal_client_load` (variadic in C; only the fixed arguments are read).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_internal_client_load(
    _client: *mut Client,
    _client_name: *const c_char,
    _options: jack_options_t,
    status: *mut jack_status_t,
) -> jack_intclient_t {
    if !status.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *status = JACK_FAILURE | JACK_LOAD_FAILURE | JACK_INIT_FAILURE };
    }
    0
}

/// `jack_internal_client_unload`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_internal_client_unload(
    _client: *mut Client,
    _intclient: jack_intclient_t,
) -> jack_status_t {
    JACK_FAILURE | JACK_NO_SUCH_CLIENT
}
