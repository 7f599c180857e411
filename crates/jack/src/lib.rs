//! `libjack.so.0` for quaverd: JACK programs run unmodified as quaver callback clients.
//!
//! The library exports JACK's C API (all 168 symbols of jackd2 1.9.21's libjack, no
//! symbol versioning). A `jack_client_t` is a quaver callback node created over the
//! native protocol; its audio ports are graph ports any quaver node can link to, and
//! its process callback runs on a thread this library starts, woken by the server once
//! per cycle (see `docs/jack.md` for the design and what is missing).
//!
//! Layout, bottom up: [`types`] mirrors JACK's C types; [`port`] and [`client`] hold the
//! Rust state behind `jack_port_t`/`jack_client_t` ([`notify`] is the client's queue of
//! notes); [`latency`] computes port latencies; [`process`] is the process thread and
//! [`notify_thread`] the notification thread; the `api_*` modules on top, [`ringbuffer`]
//! and [`midi`] are the exported C functions. Every exported function catches panics
//! (nothing unwinds into C) and checks its pointers for NULL.

#![allow(clippy::missing_safety_doc)]

pub mod api_client;
pub mod api_meta;
pub mod api_misc;
pub mod api_port;
pub mod api_session;
pub mod api_time;
pub mod client;
pub mod graph;
pub mod latency;
pub mod midi;
pub mod notify;
pub mod notify_thread;
pub mod port;
pub mod process;
pub mod ringbuffer;
pub mod transport;
pub mod types;
pub mod wrapper;

use std::ffi::{CStr, CString, c_char};

use types::JackErrorFunction;

/// The JACK version this library stands in for.
pub const JACK_VERSION: (i32, i32, i32, i32) = (1, 9, 21, 0);

unsafe extern "C" fn default_error(msg: *const c_char) {
    if !msg.is_null() {
        // SAFETY: JACK passes NUL-terminated messages.
        let m = unsafe { CStr::from_ptr(msg) };
        eprintln!("{}", m.to_string_lossy());
    }
}

unsafe extern "C" fn default_info(_msg: *const c_char) {}

/// JACK's error reporting hook (a data symbol of libjack).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static mut jack_error_callback: JackErrorFunction = Some(default_error);

/// JACK's info reporting hook (a data symbol of libjack).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static mut jack_info_callback: JackErrorFunction = Some(default_info);

fn report(hook: JackErrorFunction, msg: &str) {
    if let Some(f) = hook {
        let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: the hook was installed by the application for exactly this call.
        unsafe { f(c.as_ptr()) };
    }
}

/// Reports an error through `jack_error_callback`.
pub(crate) fn error(msg: &str) {
    // SAFETY: a plain read of a pointer-sized static the application sets once.
    let hook = unsafe { std::ptr::addr_of!(jack_error_callback).read() };
    report(hook, &format!("quaver-jack: {msg}"));
}

/// Reports information through `jack_info_callback`.
pub(crate) fn info(msg: &str) {
    // SAFETY: as in `error`.
    let hook = unsafe { std::ptr::addr_of!(jack_info_callback).read() };
    report(hook, &format!("quaver-jack: {msg}"));
}

/// Runs `f`, turning a panic into `default` so that nothing unwinds into C.
pub(crate) fn guard<R>(default: R, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            error("internal error (panic) in a JACK call; returning failure");
            default
        }
    }
}

/// A C string argument as `&str` (None for NULL or invalid UTF-8).
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the returned borrow.
pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// A `malloc`ed copy of `s` (freed by the caller with `jack_free`/`free`).
pub(crate) fn malloc_string(s: &str) -> *mut c_char {
    let bytes = s.as_bytes();
    // SAFETY: plain allocation; we write len + 1 bytes into a block of that size.
    unsafe {
        let p = libc::malloc(bytes.len() + 1).cast::<u8>();
        if p.is_null() {
            return std::ptr::null_mut();
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        *p.add(bytes.len()) = 0;
        p.cast()
    }
}

/// A NULL-terminated array of strings in ONE `malloc`ed block (pointers first, then
/// the characters), as JACK returns from `jack_get_ports`: callers free it with a
/// single `jack_free`. NULL for an empty list.
pub(crate) fn malloc_string_array(items: &[String]) -> *mut *const c_char {
    if items.is_empty() {
        return std::ptr::null_mut();
    }
    let ptrs = (items.len() + 1) * size_of::<*const c_char>();
    let chars: usize = items.iter().map(|s| s.len() + 1).sum();
    // SAFETY: one block of ptrs + chars bytes; every write below stays inside it.
    unsafe {
        let block = libc::malloc(ptrs + chars).cast::<u8>();
        if block.is_null() {
            return std::ptr::null_mut();
        }
        let table = block.cast::<*const c_char>();
        let mut text = block.add(ptrs);
        for (i, s) in items.iter().enumerate() {
            let b = s.as_bytes();
            std::ptr::copy_nonoverlapping(b.as_ptr(), text, b.len());
            *text.add(b.len()) = 0;
            *table.add(i) = text.cast();
            text = text.add(b.len() + 1);
        }
        *table.add(items.len()) = std::ptr::null();
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_arrays_are_one_block() {
        let v = vec!["a:b".to_string(), "system:playback_1".to_string()];
        let p = malloc_string_array(&v);
        // SAFETY: built just above; freed once below.
        unsafe {
            assert_eq!(CStr::from_ptr(*p).to_str().unwrap(), "a:b");
            assert_eq!(
                CStr::from_ptr(*p.add(1)).to_str().unwrap(),
                "system:playback_1"
            );
            assert!((*p.add(2)).is_null());
            libc::free(p.cast());
        }
        assert!(malloc_string_array(&[]).is_null());
    }
}
