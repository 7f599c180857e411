//! Ports and connections: registration, names, buffers, lookup (`jack_get_ports` with
//! POSIX extended regular expressions, as JACK), connections, latency (aliases are `api_meta`).

use std::ffi::{CStr, CString, c_char, c_int, c_ulong, c_void};
use std::sync::atomic::Ordering;

use crate::client::{Client, as_client, owner};
use crate::latency::foreign_range_now;
use crate::port::{Port, PortKind};
use crate::types::*;
use crate::{cstr, guard, malloc_string_array};

/// # Safety
/// `p` is NULL or a port object of a live client.
pub(crate) unsafe fn port<'a>(p: *const Port) -> Option<&'a Port> {
    // SAFETY: per the contract.
    unsafe { p.as_ref() }
}

/// `jack_port_register`: audio and MIDI ports become ports of the client's graph
/// node. `buffer_size` is ignored, as for JACK's built-in types.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_register(
    client_p: *mut Client,
    port_name: *const c_char,
    port_type: *const c_char,
    flags: c_ulong,
    _buffer_size: c_ulong,
) -> *mut Port {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`; C strings from the caller.
        let (Some(c), Some(name)) = (unsafe { as_client(client_p) }, unsafe { cstr(port_name) })
        else {
            return std::ptr::null_mut();
        };
        // SAFETY: a C string from the caller (NULL means audio, as in jackd2).
        let ty = unsafe { cstr(port_type) }.unwrap_or("32 bit float mono audio");
        let kind = if ty.as_bytes() == JACK_DEFAULT_AUDIO_TYPE.to_bytes() {
            PortKind::Audio
        } else if ty.as_bytes() == JACK_DEFAULT_MIDI_TYPE.to_bytes() {
            PortKind::Midi
        } else {
            crate::error(&format!("port type '{ty}' is not supported"));
            return std::ptr::null_mut();
        };
        match c.register_port(name, kind, flags as c_int) {
            Ok(p) => p,
            Err(e) => {
                crate::error(&e);
                std::ptr::null_mut()
            }
        }
    })
}

/// `jack_port_unregister`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_unregister(client_p: *mut Client, port_p: *mut Port) -> c_int {
    guard(-1, || {
        // SAFETY: see `client` and `port`.
        let (Some(c), Some(p)) = (unsafe { as_client(client_p) }, unsafe { port(port_p) }) else {
            return -1;
        };
        match c.unregister_port(p) {
            Ok(()) => 0,
            Err(e) => {
                crate::error(&e);
                -1
            }
        }
    })
}

/// `jack_port_get_buffer`: the port's buffer for this cycle (own ports only; NULL for
/// other clients' ports). Valid until the process callback returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_buffer(
    port_p: *mut Port,
    _nframes: jack_nframes_t,
) -> *mut c_void {
    // SAFETY: see `port`.
    match unsafe { port(port_p) } {
        Some(p) => p.buffer_ptr(),
        None => std::ptr::null_mut(),
    }
}

/// `jack_port_name`: "client:port".
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_name(port_p: *const Port) -> *const c_char {
    // SAFETY: see `port`.
    unsafe { port(port_p) }.map_or(std::ptr::null(), |p| p.full_name.as_ptr())
}

/// `jack_port_short_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_short_name(port_p: *const Port) -> *const c_char {
    // SAFETY: see `port`.
    unsafe { port(port_p) }.map_or(std::ptr::null(), |p| p.short_name.as_ptr())
}

/// `jack_port_flags`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_flags(port_p: *const Port) -> c_int {
    // SAFETY: see `port`.
    unsafe { port(port_p) }.map_or(0, |p| p.flags)
}

/// `jack_port_type`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_type(port_p: *const Port) -> *const c_char {
    // SAFETY: see `port`.
    unsafe { port(port_p) }.map_or(std::ptr::null(), |p| p.type_name().as_ptr())
}

/// `jack_port_type_id`: 0 audio, 1 MIDI.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_type_id(port_p: *const Port) -> jack_port_type_id_t {
    // SAFETY: see `port`.
    unsafe { port(port_p) }.map_or(0, |p| (p.kind == PortKind::Midi) as u32)
}

/// `jack_port_uuid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_uuid(port_p: *const Port) -> jack_uuid_t {
    // SAFETY: see `port`.
    unsafe { port(port_p) }.map_or(0, |p| p.uuid())
}

/// `jack_port_is_mine`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_is_mine(client_p: *const Client, port_p: *const Port) -> c_int {
    // SAFETY: see `port`.
    match unsafe { port(port_p) } {
        Some(p) => (p.mine && p.client == client_p.cast()) as c_int,
        None => 0,
    }
}

/// `jack_port_name_size`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_port_name_size() -> c_int {
    PORT_NAME_SIZE as c_int
}

/// `jack_port_type_size`: bytes per audio sample.
#[unsafe(no_mangle)]
pub extern "C" fn jack_port_type_size() -> c_int {
    size_of::<f32>() as c_int
}

/// `jack_port_type_get_buffer_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_type_get_buffer_size(
    client_p: *mut Client,
    port_type: *const c_char,
) -> usize {
    guard(0, || {
        // SAFETY: see `client`; a C string from the caller.
        let Some(c) = (unsafe { as_client(client_p) }) else {
            return 0;
        };
        match unsafe { cstr(port_type) } {
            Some(t) if t.as_bytes() == JACK_DEFAULT_MIDI_TYPE.to_bytes() => {
                crate::port::MIDI_BUFFER_BYTES
            }
            _ => c.max_frames * size_of::<f32>(),
        }
    })
}

/// Matches `text` against a POSIX extended regular expression (as JACK does);
/// `None`/empty patterns match everything.
struct Regex(Option<libc::regex_t>);

impl Regex {
    fn new(pattern: Option<&CStr>) -> Option<Regex> {
        let Some(p) = pattern.filter(|p| !p.is_empty()) else {
            return Some(Regex(None));
        };
        // SAFETY: regcomp initialises the zeroed struct; freed in Drop.
        unsafe {
            let mut re: libc::regex_t = std::mem::zeroed();
            if libc::regcomp(&mut re, p.as_ptr(), libc::REG_EXTENDED | libc::REG_NOSUB) != 0 {
                return None;
            }
            Some(Regex(Some(re)))
        }
    }

    fn matches(&self, text: &str) -> bool {
        let Some(re) = &self.0 else { return true };
        let Ok(t) = CString::new(text) else {
            return false;
        };
        // SAFETY: a compiled regex and a NUL-terminated string.
        unsafe { libc::regexec(re, t.as_ptr(), 0, std::ptr::null_mut(), 0) == 0 }
    }
}

impl Drop for Regex {
    fn drop(&mut self) {
        if let Some(re) = &mut self.0 {
            // SAFETY: compiled by regcomp, freed once.
            unsafe { libc::regfree(re) };
        }
    }
}

/// `jack_get_ports`: full names of the ports whose name and type match the regular
/// expressions and that have all of `flags`; one `malloc`ed block (free with
/// `jack_free`), NULL if none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_ports(
    client_p: *mut Client,
    port_name_pattern: *const c_char,
    type_name_pattern: *const c_char,
    flags: c_ulong,
) -> *mut *const c_char {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client_p) }) else {
            return std::ptr::null_mut();
        };
        let opt = |p: *const c_char| {
            // SAFETY: a C string from the caller.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
        };
        let (Some(name_re), Some(type_re)) = (
            Regex::new(opt(port_name_pattern)),
            Regex::new(opt(type_name_pattern)),
        ) else {
            crate::error("jack_get_ports: bad regular expression");
            return std::ptr::null_mut();
        };
        let flags = flags as c_int;
        let Some(g) = c.graph() else {
            return std::ptr::null_mut();
        };
        let audio = JACK_DEFAULT_AUDIO_TYPE.to_str().unwrap_or_default();
        let midi = JACK_DEFAULT_MIDI_TYPE.to_str().unwrap_or_default();
        let names: Vec<String> = g
            .ports
            .iter()
            .filter(|p| p.flags & flags == flags)
            .filter(|p| type_re.matches(if p.midi { midi } else { audio }))
            .filter(|p| name_re.matches(&p.name))
            .map(|p| p.name.clone())
            .collect();
        malloc_string_array(&names)
    })
}

/// `jack_port_by_name` (full names and `system:` aliases).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_by_name(
    client_p: *mut Client,
    port_name: *const c_char,
) -> *mut Port {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`; a C string from the caller.
        let (Some(c), Some(n)) = (unsafe { as_client(client_p) }, unsafe { cstr(port_name) })
        else {
            return std::ptr::null_mut();
        };
        c.port_by_name(n).unwrap_or(std::ptr::null_mut())
    })
}

/// `jack_port_by_id`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_by_id(client_p: *mut Client, id: jack_port_id_t) -> *mut Port {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client_p) }) else {
            return std::ptr::null_mut();
        };
        c.port_by_id(id).unwrap_or(std::ptr::null_mut())
    })
}

/// `jack_connect` and `jack_disconnect`: `op` on the two named ports; on success the
/// client's graph-order and latency callbacks run, as after any change of links.
///
/// # Safety
/// As for those functions: a client from `jack_client_open` and C strings.
unsafe fn link_ports(
    client_p: *mut Client,
    source_port: *const c_char,
    destination_port: *const c_char,
    op: fn(&Client, &str, &str) -> c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`; C strings from the caller.
        let (Some(c), Some(s), Some(d)) = (
            unsafe { as_client(client_p) },
            unsafe { cstr(source_port) },
            unsafe { cstr(destination_port) },
        ) else {
            return -1;
        };
        let rc = op(c, s, d);
        if rc == 0 {
            c.notify(crate::notify::Note::GraphOrder);
            c.notify(crate::notify::Note::Latency);
        }
        rc
    })
}

/// `jack_connect`: 0, `EEXIST` if already connected, -1 on error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_connect(
    client_p: *mut Client,
    source_port: *const c_char,
    destination_port: *const c_char,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { link_ports(client_p, source_port, destination_port, Client::connect) }
}

/// `jack_disconnect`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_disconnect(
    client_p: *mut Client,
    source_port: *const c_char,
    destination_port: *const c_char,
) -> c_int {
    // SAFETY: forwarded from the caller.
    unsafe { link_ports(client_p, source_port, destination_port, Client::disconnect) }
}

/// `jack_port_disconnect`: removes every connection of the port.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_disconnect(client_p: *mut Client, port_p: *mut Port) -> c_int {
    guard(-1, || {
        // SAFETY: see `client` and `port`.
        let (Some(c), Some(p)) = (unsafe { as_client(client_p) }, unsafe { port(port_p) }) else {
            return -1;
        };
        c.disconnect_all(Some(p.name()))
    })
}

fn connections(p: &Port) -> Vec<String> {
    owner(p)
        .and_then(|c| c.graph())
        .map(|g| g.connections(p.name()))
        .unwrap_or_default()
}

/// `jack_port_connected`: number of connections.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_connected(port_p: *const Port) -> c_int {
    // SAFETY: see `port`.
    guard(0, || {
        unsafe { port(port_p) }.map_or(0, |p| connections(p).len() as c_int)
    })
}

/// `jack_port_connected_to`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_connected_to(
    port_p: *const Port,
    port_name: *const c_char,
) -> c_int {
    guard(0, || {
        // SAFETY: see `port`; a C string from the caller.
        let (Some(p), Some(other)) = (unsafe { port(port_p) }, unsafe { cstr(port_name) }) else {
            return 0;
        };
        let Some(c) = owner(p) else { return 0 };
        let Some(g) = c.graph() else { return 0 };
        let other = c.canonical(&g, other).unwrap_or_else(|| other.to_string());
        g.connections(p.name()).contains(&other) as c_int
    })
}

/// `jack_port_get_connections`: NULL-terminated, one block, NULL if none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_connections(port_p: *const Port) -> *mut *const c_char {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `port`.
        unsafe { port(port_p) }.map_or(std::ptr::null_mut(), |p| {
            malloc_string_array(&connections(p))
        })
    })
}

/// `jack_port_get_all_connections`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_all_connections(
    _client: *const Client,
    port_p: *const Port,
) -> *mut *const c_char {
    // SAFETY: forwarded.
    unsafe { jack_port_get_connections(port_p) }
}

/// `jack_port_set_name` / `jack_port_rename`: renaming is not supported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_set_name(_port: *mut Port, _name: *const c_char) -> c_int {
    crate::error("renaming ports is not supported");
    -1
}

/// See `jack_port_set_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_rename(
    _client: *mut Client,
    _port: *mut Port,
    _name: *const c_char,
) -> c_int {
    crate::error("renaming ports is not supported");
    -1
}

/// `jack_port_request_monitor` and friends: monitoring is not supported; accepted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_request_monitor(_port: *mut Port, _onoff: c_int) -> c_int {
    0
}

/// See `jack_port_request_monitor`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_request_monitor_by_name(
    _client: *mut Client,
    _port_name: *const c_char,
    _onoff: c_int,
) -> c_int {
    0
}

/// See `jack_port_request_monitor`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_ensure_monitor(_port: *mut Port, _onoff: c_int) -> c_int {
    0
}

/// See `jack_port_request_monitor`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_monitoring_input(_port: *mut Port) -> c_int {
    0
}

/// `jack_port_tie`: not supported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_tie(_src: *mut Port, _dst: *mut Port) -> c_int {
    -1
}

/// `jack_port_untie`: not supported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_untie(_port: *mut Port) -> c_int {
    -1
}

/// The mode the deprecated one-number latency API means: an output port's capture
/// latency, an input port's playback latency (as jackd2's `JackPort::SetLatency`).
fn own_direction(p: &Port) -> c_int {
    if p.flags & JACK_PORT_IS_OUTPUT != 0 {
        JACK_CAPTURE_LATENCY
    } else {
        JACK_PLAYBACK_LATENCY
    }
}

/// `jack_port_get_latency_range`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_latency_range(
    port_p: *mut Port,
    mode: jack_latency_callback_mode_t,
    range: *mut jack_latency_range_t,
) {
    guard((), || {
        // SAFETY: see `port`.
        let Some(p) = (unsafe { port(port_p) }) else {
            return;
        };
        if range.is_null() {
            return;
        }
        let r = if p.mine {
            p.latency(mode)
        } else {
            foreign_range_now(p, mode)
        };
        // SAFETY: the caller's out-pointer (packed struct: unaligned write).
        unsafe { range.write_unaligned(r) };
    })
}

/// `jack_port_set_latency_range` (own ports).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_set_latency_range(
    port_p: *mut Port,
    mode: jack_latency_callback_mode_t,
    range: *mut jack_latency_range_t,
) {
    guard((), || {
        // SAFETY: see `port`; the caller's range.
        let Some(p) = (unsafe { port(port_p) }) else {
            return;
        };
        if range.is_null() || !p.mine {
            return;
        }
        p.set_latency(mode, unsafe { range.read_unaligned() });
        published_later(p);
    })
}

/// `jack_port_get_latency` (deprecated): the latency in the port's direction.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_latency(port_p: *mut Port) -> jack_nframes_t {
    guard(0, || {
        // SAFETY: see `port`.
        let Some(p) = (unsafe { port(port_p) }) else {
            return 0;
        };
        let mode = own_direction(p);
        if p.mine {
            p.latency(mode).max
        } else {
            foreign_range_now(p, mode).max
        }
    })
}

/// `jack_port_get_total_latency` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_total_latency(
    _client: *mut Client,
    port_p: *mut Port,
) -> jack_nframes_t {
    // SAFETY: forwarded.
    unsafe { jack_port_get_latency(port_p) }
}

/// `jack_port_set_latency` (deprecated): sets the latency in the port's direction.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_set_latency(port_p: *mut Port, frames: jack_nframes_t) {
    guard((), || {
        // SAFETY: see `port`.
        if let Some(p) = unsafe { port(port_p) }
            && p.mine
        {
            p.set_latency(
                own_direction(p),
                jack_latency_range_t {
                    min: frames,
                    max: frames,
                },
            );
            published_later(p);
        }
    })
}

/// Has the notification thread publish a range the application set on `p` (other
/// clients read it from the server, as they read jackd2's shared port table). Not from
/// the process thread, which must not lock or allocate: what it sets is published
/// with the next latency pass.
fn published_later(p: &Port) {
    let Some(c) = owner(p) else {
        return;
    };
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    if c.process_tid.load(Ordering::Relaxed) != tid {
        c.notify(crate::notify::Note::PublishLatency);
    }
}

/// `jack_recompute_total_latencies`: runs the latency callbacks again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_recompute_total_latencies(client_p: *mut Client) -> c_int {
    // SAFETY: see `client`.
    match unsafe { as_client(client_p) } {
        Some(c) => {
            c.notify(crate::notify::Note::Latency);
            0
        }
        None => -1,
    }
}

/// `jack_recompute_total_latency` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_recompute_total_latency(
    client_p: *mut Client,
    _port: *mut Port,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { jack_recompute_total_latencies(client_p) }
}
