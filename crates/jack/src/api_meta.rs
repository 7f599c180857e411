//! Names and metadata: JACK's metadata API (`jack_set_property` and friends, the
//! property-change callback) and port aliases, both kept by quaverd for every client
//! (docs/jack/metadata.md). UUIDs are the server's: `(type << 32) | id` of its node
//! and port ids, which it never reuses.
//!
//! The getters take no client in JACK's API, so they ask the server over a short
//! connection of their own.

use std::ffi::{CStr, c_char, c_int, c_void};

use quaver_client::quaver_protocol::message::{Property, PropertyValue};
use quaver_client::quaver_protocol::{Reply, Request};
use quaver_client::{ClientError, Connection};

use crate::api_port::port;
use crate::client::{Arg, Client, as_client, owner};
use crate::port::Port;
use crate::types::*;
use crate::{cstr, guard, malloc_string};

/// `jack_property_t`.
#[repr(C)]
pub struct JackProperty {
    /// The key.
    pub key: *const c_char,
    /// The value.
    pub data: *const c_char,
    /// The type, or NULL.
    pub type_: *const c_char,
}

/// `jack_description_t`.
#[repr(C)]
pub struct JackDescription {
    /// The subject.
    pub subject: jack_uuid_t,
    /// How many properties.
    pub property_cnt: u32,
    /// `property_cnt` properties (one `malloc`ed array).
    pub properties: *mut JackProperty,
    /// Capacity of `properties`.
    pub property_size: u32,
}

/// One request on a connection of its own (for the calls that take no client).
fn ask(req: Request) -> Result<Reply, ClientError> {
    let mut conn = Connection::connect(None, "libjack (metadata)")?;
    Ok(conn.request(req)?.0)
}

/// The properties of `subject` (every subject for `None`), or why not.
fn fetch(subject: Option<u64>) -> Option<Vec<Property>> {
    match ask(Request::GetProperties { subject }) {
        Ok(Reply::Properties { properties }) => Some(properties),
        Ok(other) => {
            crate::error(&format!(
                "reading metadata: unexpected '{}' reply",
                other.kind()
            ));
            None
        }
        Err(e) => {
            crate::error(&format!("reading metadata: {e}"));
            None
        }
    }
}

/// A `malloc`ed copy of `bytes` plus a NUL.
fn malloc_bytes(bytes: &[u8]) -> *mut c_char {
    // SAFETY: a block of len + 1 bytes, all written below.
    unsafe {
        let p = libc::malloc(bytes.len() + 1).cast::<u8>();
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
            *p.add(bytes.len()) = 0;
        }
        p.cast()
    }
}

/// Fills `desc` with `props` (all of one subject): one `malloc`ed array and one
/// `malloc`ed string per field, as `jack_free_description` frees them.
///
/// # Safety
/// `desc` points to writable memory for a `JackDescription`.
unsafe fn fill(desc: *mut JackDescription, subject: u64, props: &[&Property]) {
    let n = props.len();
    let array = if n == 0 {
        std::ptr::null_mut()
    } else {
        // SAFETY: plain allocation, filled below.
        unsafe { libc::malloc(n * size_of::<JackProperty>()).cast::<JackProperty>() }
    };
    let n = if array.is_null() { 0 } else { n };
    for (i, p) in props.iter().take(n).enumerate() {
        // SAFETY: `array` holds `n` entries.
        unsafe {
            array.add(i).write(JackProperty {
                key: malloc_string(&p.key).cast_const(),
                data: malloc_bytes(&p.value.0).cast_const(),
                type_: p
                    .value_type
                    .as_deref()
                    .map_or(std::ptr::null(), |t| malloc_string(t).cast_const()),
            });
        }
    }
    // SAFETY: per the contract.
    unsafe {
        desc.write(JackDescription {
            subject,
            property_cnt: n as u32,
            properties: array,
            property_size: n as u32,
        });
    }
}

/// `jack_set_property`: 0, or -1 with the reason on the error callback (no such
/// client or port, a limit, a bad key).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_property(
    client: *mut Client,
    subject: jack_uuid_t,
    key: *const c_char,
    value: *const c_char,
    type_: *const c_char,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `as_client`; C strings from the caller.
        let (Some(c), Some(k)) = (unsafe { as_client(client) }, unsafe { cstr(key) }) else {
            crate::error("jack_set_property: a client and a UTF-8 key are needed");
            return -1;
        };
        if value.is_null() {
            crate::error("jack_set_property: NULL value");
            return -1;
        }
        // SAFETY: a NUL-terminated string from the caller.
        let v = unsafe { CStr::from_ptr(value) }.to_bytes().to_vec();
        let t = if type_.is_null() {
            None
        } else {
            // SAFETY: as above.
            match unsafe { cstr(type_) } {
                Some(t) => Some(t.to_string()).filter(|t| !t.is_empty()),
                None => {
                    crate::error("jack_set_property: the type is not UTF-8");
                    return -1;
                }
            }
        };
        let req = Request::SetProperty {
            subject,
            key: k.to_string(),
            value: PropertyValue(v),
            value_type: t,
        };
        match c.conn().request(req) {
            Ok(_) => 0,
            Err(e) => {
                crate::error(&format!("cannot set property '{k}' of {subject}: {e}"));
                -1
            }
        }
    })
}

/// `jack_get_property`: 0 with `malloc`ed value and type (NULL when it has none), or
/// -1 when the subject has no such key.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_property(
    subject: jack_uuid_t,
    key: *const c_char,
    value: *mut *mut c_char,
    type_: *mut *mut c_char,
) -> c_int {
    guard(-1, || {
        // SAFETY: a C string from the caller.
        let Some(k) = (unsafe { cstr(key) }) else {
            return -1;
        };
        if value.is_null() {
            return -1;
        }
        let Some(props) = fetch(Some(subject)) else {
            return -1;
        };
        let Some(p) = props.iter().find(|p| p.key == k) else {
            return -1;
        };
        // SAFETY: the caller's out-pointers (`type_` may be NULL).
        unsafe {
            *value = malloc_bytes(&p.value.0);
            if !type_.is_null() {
                *type_ = p
                    .value_type
                    .as_deref()
                    .map_or(std::ptr::null_mut(), malloc_string);
            }
        }
        0
    })
}

/// `jack_get_properties`: how many properties `subject` has (0 for none), with them in
/// `desc`; -1 if the server cannot be asked.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_properties(
    subject: jack_uuid_t,
    desc: *mut JackDescription,
) -> c_int {
    guard(-1, || {
        if desc.is_null() {
            return -1;
        }
        let Some(props) = fetch(Some(subject)) else {
            return -1;
        };
        let refs: Vec<&Property> = props.iter().collect();
        // SAFETY: the caller's description.
        unsafe { fill(desc, subject, &refs) };
        // SAFETY: just written.
        unsafe { (*desc).property_cnt as c_int }
    })
}

/// `jack_get_all_properties`: how many subjects have properties, with one `malloc`ed
/// array of their descriptions in `*descs` (each freed by `jack_free_description`,
/// the array by `jack_free`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_all_properties(descs: *mut *mut JackDescription) -> c_int {
    guard(-1, || {
        if descs.is_null() {
            return -1;
        }
        let Some(props) = fetch(None) else {
            return -1;
        };
        // The server sends them by subject, then key.
        let mut groups: Vec<(u64, Vec<&Property>)> = Vec::new();
        for p in &props {
            match groups.last_mut() {
                Some((s, list)) if *s == p.subject => list.push(p),
                _ => groups.push((p.subject, vec![p])),
            }
        }
        let array = if groups.is_empty() {
            std::ptr::null_mut()
        } else {
            // SAFETY: plain allocation, filled below.
            unsafe { libc::malloc(groups.len() * size_of::<JackDescription>()) }
                .cast::<JackDescription>()
        };
        if array.is_null() && !groups.is_empty() {
            return -1;
        }
        for (i, (s, list)) in groups.iter().enumerate() {
            // SAFETY: `array` holds one description per group.
            unsafe { fill(array.add(i), *s, list) };
        }
        // SAFETY: the caller's out-pointer.
        unsafe { *descs = array };
        groups.len() as c_int
    })
}

/// `jack_free_description`: frees the strings and the property array of `desc`, and
/// `desc` itself if `free_description_itself`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_free_description(
    desc: *mut JackDescription,
    free_description_itself: c_int,
) {
    if desc.is_null() {
        return;
    }
    // SAFETY: a description this library filled (all fields malloc'ed or NULL).
    unsafe {
        let d = &mut *desc;
        if !d.properties.is_null() {
            for i in 0..d.property_cnt as usize {
                let p = &*d.properties.add(i);
                libc::free(p.key as *mut c_void);
                libc::free(p.data as *mut c_void);
                libc::free(p.type_ as *mut c_void);
            }
            libc::free(d.properties.cast());
        }
        d.properties = std::ptr::null_mut();
        d.property_cnt = 0;
        d.property_size = 0;
        if free_description_itself != 0 {
            libc::free(desc.cast());
        }
    }
}

/// Sends a removal; the number removed, or -1.
fn remove(client: *mut Client, req: Request) -> c_int {
    // SAFETY: see `as_client`.
    let Some(c) = (unsafe { as_client(client) }) else {
        return -1;
    };
    let what = req.kind();
    match c.conn().request(req) {
        Ok((Reply::Removed { count }, _)) => count.min(c_int::MAX as u32) as c_int,
        Ok((other, _)) => {
            crate::error(&format!("{what}: unexpected '{}' reply", other.kind()));
            -1
        }
        Err(e) => {
            crate::error(&format!("{what}: {e}"));
            -1
        }
    }
}

/// `jack_remove_property`: 0, or -1 if the subject has no such key.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_remove_property(
    client: *mut Client,
    subject: jack_uuid_t,
    key: *const c_char,
) -> c_int {
    guard(-1, || {
        // SAFETY: a C string from the caller.
        let Some(k) = (unsafe { cstr(key) }) else {
            return -1;
        };
        let req = Request::RemoveProperty {
            subject,
            key: Some(k.to_string()),
        };
        match remove(client, req) {
            1 => 0,
            0 => {
                crate::error(&format!(
                    "cannot remove property '{k}' of {subject}: it has none"
                ));
                -1
            }
            // The reason is already on the error callback.
            _ => -1,
        }
    })
}

/// `jack_remove_properties`: how many properties of `subject` were removed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_remove_properties(
    client: *mut Client,
    subject: jack_uuid_t,
) -> c_int {
    guard(-1, || {
        remove(client, Request::RemoveProperty { subject, key: None })
    })
}

/// `jack_remove_all_properties`: 0 or -1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_remove_all_properties(client: *mut Client) -> c_int {
    guard(-1, || {
        if remove(client, Request::RemoveAllProperties) < 0 {
            -1
        } else {
            0
        }
    })
}

/// `jack_set_property_change_callback`: called on the notification thread for every
/// property created, changed or deleted by any client.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_property_change_callback(
    client: *mut Client,
    cb: JackPropertyChangeCallback,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: see `as_client`.
    match unsafe { as_client(client) } {
        Some(c) => {
            c.callbacks().property_change = (cb, Arg(arg));
            0
        }
        None => -1,
    }
}

// ----- aliases: kept by the server, seen by every client -----

/// The aliases of `p` now: the server's (after the `system:` name of a default device
/// port). Every port, MIDI ones included, is a graph port.
fn aliases_of(p: &Port) -> Vec<String> {
    owner(p)
        .and_then(Client::graph)
        .and_then(|g| g.by_id(p.id).map(|v| v.aliases.clone()))
        .unwrap_or_default()
}

/// `jack_port_get_aliases`: copies up to two aliases into the caller's buffers (each
/// `jack_port_name_size()` bytes); returns how many.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_get_aliases(
    port_p: *const Port,
    aliases: *const *mut c_char,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `port`.
        let Some(p) = (unsafe { port(port_p) }) else {
            return -1;
        };
        if aliases.is_null() {
            return -1;
        }
        let mut n = 0;
        for (i, a) in aliases_of(p).iter().take(2).enumerate() {
            // SAFETY: the caller provides two buffers of jack_port_name_size() bytes.
            unsafe {
                let dst = *aliases.add(i);
                if dst.is_null() {
                    continue;
                }
                let b = a.as_bytes();
                let len = b.len().min(PORT_NAME_SIZE - 1);
                std::ptr::copy_nonoverlapping(b.as_ptr().cast(), dst, len);
                *dst.add(len) = 0;
            }
            n += 1;
        }
        n
    })
}

/// `jack_port_set_alias` / `jack_port_unset_alias` on port `p`.
fn change_alias(p: &Port, alias: &str, set: bool) -> c_int {
    let Some(c) = owner(p) else { return -1 };
    let now = aliases_of(p);
    // A default device port's `system:` name takes one of its two places.
    if set && now.len() >= 2 {
        crate::error(&format!("port '{}' already has two aliases", p.name()));
        return -1;
    }
    let req = if set {
        Request::SetAlias {
            port: p.id,
            alias: alias.to_string(),
        }
    } else {
        Request::UnsetAlias {
            port: p.id,
            alias: alias.to_string(),
        }
    };
    match c.conn().request(req) {
        Ok(_) => 0,
        Err(e) => {
            crate::error(&format!("alias '{alias}' of '{}': {e}", p.name()));
            -1
        }
    }
}

/// `jack_port_set_alias`: at most two per port, as in JACK; anyone may set them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_set_alias(port_p: *mut Port, alias: *const c_char) -> c_int {
    guard(-1, || {
        // SAFETY: see `port`; a C string from the caller.
        match (unsafe { port(port_p) }, unsafe { cstr(alias) }) {
            (Some(p), Some(a)) => change_alias(p, a, true),
            _ => -1,
        }
    })
}

/// `jack_port_unset_alias`: -1 if the port has no such alias.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_port_unset_alias(port_p: *mut Port, alias: *const c_char) -> c_int {
    guard(-1, || {
        // SAFETY: see `port`; a C string from the caller.
        match (unsafe { port(port_p) }, unsafe { cstr(alias) }) {
            (Some(p), Some(a)) => change_alias(p, a, false),
            _ => -1,
        }
    })
}
