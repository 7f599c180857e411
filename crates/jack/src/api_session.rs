//! JACK's session API (`jack/session.h`, deprecated in JACK but used by session
//! managers and `jack_session_notify`). The server keeps who has a session callback
//! and runs a notify (`session_notify`, docs/protocol/session.md); each notified
//! client gets a `session` event on its watch connection, and the notification thread
//! (never the process thread) hands the application a `jack_session_event_t`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

use quaver_client::quaver_protocol::message::{
    Reply, Request, SESSION_SAVE_ERROR, SessionEvent, SessionEventType, node_uuid,
};

use crate::client::{Arg, Callbacks, Client, as_client};
use crate::types::*;
use crate::{cstr, guard, malloc_string};

/// JACK's `jack_session_event_t`.
#[repr(C)]
pub struct jack_session_event_t {
    /// `jack_session_event_type_t`.
    pub kind: c_int,
    /// The client's session directory.
    pub session_dir: *const c_char,
    /// The client's UUID, as text.
    pub client_uuid: *const c_char,
    /// Set by the application (malloc'ed; freed by `jack_session_event_free`).
    pub command_line: *mut c_char,
    /// `jack_session_flags_t`, set by the application.
    pub flags: c_int,
    /// Reserved.
    pub future: u32,
}

/// JACK's `jack_session_command_t`.
#[repr(C)]
pub struct jack_session_command_t {
    /// The client's UUID (NULL ends the array).
    pub uuid: *const c_char,
    /// Its name.
    pub client_name: *const c_char,
    /// What restores it.
    pub command: *const c_char,
    /// `jack_session_flags_t`.
    pub flags: c_int,
}

fn request(c: &Client, req: Request) -> Result<Reply, String> {
    match c.conn().request(req) {
        Ok((Reply::Error { message, .. }, _)) => Err(message),
        Ok((r, _)) => Ok(r),
        Err(e) => Err(e.to_string()),
    }
}

/// `jack_set_session_callback`: tells the server, which notifies only clients that
/// have one; not while active, as in jackd2.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_session_callback(
    client: *mut Client,
    cb: JackSessionCallback,
    arg: *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client) }) else {
            return -1;
        };
        if c.active.load(Ordering::Acquire) {
            crate::error("jack_set_session_callback is not allowed while the client is active");
            return -1;
        }
        let req = Request::SetSessionCallback {
            node: c.node,
            on: cb.is_some(),
        };
        match request(c, req) {
            Ok(_) => {
                c.callbacks().session = (cb, Arg(arg));
                0
            }
            Err(e) => {
                crate::error(&format!("cannot set the session callback: {e}"));
                -1
            }
        }
    })
}

/// Runs the application's session callback for a `session` event (notification
/// thread). Without a callback (set off meanwhile) the server is answered at once
/// with `JackSessionSaveError`, so the notify is not held up.
pub(crate) fn deliver(c: &Client, cbs: &Callbacks, ev: SessionEvent) {
    let (Some(f), arg) = cbs.session else {
        let req = Request::SessionReply {
            node: c.node,
            command: String::new(),
            flags: SESSION_SAVE_ERROR,
        };
        if let Err(e) = request(c, req) {
            crate::error(&format!("cannot answer a session notify: {e}"));
        }
        return;
    };
    let uuid = node_uuid(c.node).to_string();
    // SAFETY: a zeroed block of the struct's size, filled below; the application
    // frees it with jack_session_event_free.
    let event = unsafe {
        libc::calloc(1, std::mem::size_of::<jack_session_event_t>()).cast::<jack_session_event_t>()
    };
    if event.is_null() {
        crate::error("out of memory for a session event");
        return;
    }
    // SAFETY: `event` is a valid, exclusive allocation.
    unsafe {
        (*event).kind = ev.kind.code();
        (*event).session_dir = malloc_string(&ev.dir);
        (*event).client_uuid = malloc_string(&uuid);
        f(event.cast(), arg.0);
    }
}

/// `jack_session_reply`: the application's answer to its event; -1 when no notify
/// waits for it (the server says why through the error callback).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_session_reply(client: *mut Client, event: *mut c_void) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client) }) else {
            return -1;
        };
        if event.is_null() {
            return -1;
        }
        let ev = event.cast::<jack_session_event_t>();
        // SAFETY: an event this library made, filled by the application.
        let (command, flags) = unsafe {
            (
                cstr((*ev).command_line).unwrap_or("").to_string(),
                (*ev).flags,
            )
        };
        let req = Request::SessionReply {
            node: c.node,
            command,
            flags: flags as u32,
        };
        match request(c, req) {
            Ok(_) => 0,
            Err(e) => {
                crate::error(&format!("jack_session_reply: {e}"));
                -1
            }
        }
    })
}

/// `jack_session_event_free`: the event and its strings (the command line too, which
/// the application allocated with malloc, as JACK requires).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_session_event_free(event: *mut c_void) {
    if event.is_null() {
        return;
    }
    let ev = event.cast::<jack_session_event_t>();
    // SAFETY: an event this library made; each string is malloc'ed or NULL.
    unsafe {
        libc::free((*ev).session_dir as *mut c_void);
        libc::free((*ev).client_uuid as *mut c_void);
        libc::free((*ev).command_line.cast());
        libc::free(event);
    }
}

/// `jack_client_has_session_callback`: 1 or 0, -1 for a name no client has.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_has_session_callback(
    client: *mut Client,
    name: *const c_char,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`; a C string from the caller.
        let (Some(c), Some(name)) = (unsafe { as_client(client) }, unsafe { cstr(name) }) else {
            return -1;
        };
        match request(
            c,
            Request::HasSessionCallback {
                name: name.to_string(),
            },
        ) {
            Ok(Reply::HasSessionCallback { has }) => has as c_int,
            Ok(_) => -1,
            Err(e) => {
                crate::error(&format!("jack_client_has_session_callback: {e}"));
                -1
            }
        }
    })
}

/// `jack_session_notify`: asks every client with a session callback (or `target`) to
/// save under `path`; returns what each answered, an array ended by a NULL `uuid`
/// (free it with `jack_session_commands_free`), or NULL on error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_session_notify(
    client: *mut Client,
    target: *const c_char,
    kind: c_int,
    path: *const c_char,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`; C strings from the caller (target may be NULL).
        let (Some(c), Some(path)) = (unsafe { as_client(client) }, unsafe { cstr(path) }) else {
            return std::ptr::null_mut();
        };
        let target = unsafe { cstr(target) }.map(str::to_string);
        let Some(kind) = SessionEventType::from_code(kind) else {
            crate::error(&format!(
                "jack_session_notify: {kind} is not a session event type"
            ));
            return std::ptr::null_mut();
        };
        let req = Request::SessionNotify {
            target,
            kind,
            path: path.to_string(),
        };
        let commands = match request(c, req) {
            Ok(Reply::SessionCommands { commands }) => commands,
            Ok(_) => return std::ptr::null_mut(),
            Err(e) => {
                crate::error(&format!("jack_session_notify: {e}"));
                return std::ptr::null_mut();
            }
        };
        let n = commands.len() + 1;
        let size = std::mem::size_of::<jack_session_command_t>();
        // SAFETY: a zeroed array of n entries; the last stays zero (NULL uuid).
        let array = unsafe { libc::calloc(n, size) }.cast::<jack_session_command_t>();
        if array.is_null() {
            return std::ptr::null_mut();
        }
        for (i, cmd) in commands.iter().enumerate() {
            // SAFETY: i < n - 1, inside the allocation.
            unsafe {
                let e = &mut *array.add(i);
                e.uuid = malloc_string(&cmd.uuid);
                e.client_name = malloc_string(&cmd.client_name);
                e.command = malloc_string(&cmd.command);
                e.flags = cmd.flags as c_int;
            }
        }
        array.cast()
    })
}

/// `jack_session_commands_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_session_commands_free(cmds: *mut c_void) {
    if cmds.is_null() {
        return;
    }
    let array = cmds.cast::<jack_session_command_t>();
    // SAFETY: an array from jack_session_notify, ended by a NULL uuid.
    unsafe {
        let mut i = 0;
        loop {
            let e = &*array.add(i);
            if e.uuid.is_null() {
                break;
            }
            libc::free(e.uuid as *mut c_void);
            libc::free(e.client_name as *mut c_void);
            libc::free(e.command as *mut c_void);
            i += 1;
        }
        libc::free(cmds);
    }
}
