//! Client life cycle and callbacks: `jack_client_open` … `jack_client_close`,
//! `jack_activate`, the `jack_set_*_callback` family, buffer size and sample rate,
//! threads.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;

use crate::client::{Arg, Client, as_client};
use crate::types::*;
use crate::{cstr, guard, malloc_string};

/// `jack_client_open`. The server-name variadic argument (`JackServerName`) cannot be
/// read from Rust and is ignored: the server is `$QUAVER_SERVER` or the default socket.
/// Declaring only the fixed arguments is ABI-compatible for callers on x86-64 and
/// aarch64 (System V).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_open(
    client_name: *const c_char,
    options: jack_options_t,
    status: *mut jack_status_t,
) -> *mut Client {
    guard(std::ptr::null_mut(), || {
        let set_status = |s: c_int| {
            if !status.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *status = s };
            }
        };
        // SAFETY: a C string from the caller.
        let Some(name) = (unsafe { cstr(client_name) }) else {
            set_status(JACK_FAILURE | JACK_INVALID_OPTION);
            return std::ptr::null_mut();
        };
        match Client::open(name, options, crate::notify_thread::run) {
            Ok((c, s)) => {
                set_status(s);
                Box::into_raw(c)
            }
            Err(s) => {
                set_status(s);
                std::ptr::null_mut()
            }
        }
    })
}

/// `jack_client_new` (deprecated): open with default options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_new(client_name: *const c_char) -> *mut Client {
    // SAFETY: forwarded.
    unsafe { jack_client_open(client_name, JACK_NO_START_SERVER, std::ptr::null_mut()) }
}

/// `jack_client_close`: deactivates, removes the node, frees the client.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_close(client: *mut Client) -> c_int {
    guard(-1, || {
        if client.is_null() {
            return -1;
        }
        // SAFETY: a live client, reclaimed exactly once here.
        let c = unsafe { Box::from_raw(client) };
        crate::process::deactivate(&c);
        c.notifier.stop();
        let t = c
            .notify_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            if t.thread().id() == std::thread::current().id() {
                // Closed from a notification callback: the thread ends on its own,
                // but then the client must outlive it.
                std::mem::forget(c);
                return 0;
            }
            let _ = t.join();
        }
        let node = c.node;
        let _ = c.conn().destroy_stream(node);
        drop(c);
        0
    })
}

/// `jack_client_name_size`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_client_name_size() -> c_int {
    CLIENT_NAME_SIZE as c_int
}

/// `jack_get_client_name`: the name as registered (maybe made unique).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_client_name(client: *mut Client) -> *mut c_char {
    // SAFETY: see `client`.
    match unsafe { as_client(client) } {
        Some(c) => c.name.as_ptr().cast_mut(),
        None => std::ptr::null_mut(),
    }
}

/// `jack_activate`: starts the process thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_activate(client: *mut Client) -> c_int {
    // SAFETY: see `client`.
    guard(-1, || match unsafe { as_client(client) } {
        Some(c) => crate::process::activate(c),
        None => -1,
    })
}

/// `jack_deactivate`: stops the process thread and, as JACK does, disconnects all of
/// the client's ports.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_deactivate(client: *mut Client) -> c_int {
    // SAFETY: see `client`.
    guard(-1, || match unsafe { as_client(client) } {
        Some(c) => {
            let was = c.active.load(Ordering::Acquire);
            let rc = crate::process::deactivate(c);
            if was && !c.notifier.is_shut_down() {
                c.disconnect_all(None);
            }
            rc
        }
        None => -1,
    })
}

/// `jack_get_client_pid`: the pid of the process behind client `name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_client_pid(name: *const c_char) -> c_int {
    guard(0, || {
        // SAFETY: a C string from the caller.
        let Some(name) = (unsafe { cstr(name) }) else {
            return 0;
        };
        let Ok(mut conn) = quaver_client::Connection::connect(None, "jack-pid-query") else {
            return 0;
        };
        conn.status()
            .ok()
            .and_then(|s| s.clients.into_iter().find(|c| c.name == name))
            .and_then(|c| c.pid)
            .map_or(0, |p| p as c_int)
    })
}

/// `jack_client_thread_id`: the process thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_thread_id(client: *mut Client) -> jack_native_thread_t {
    // SAFETY: see `client`.
    match unsafe { as_client(client) } {
        Some(c) => c.process_thread_id.load(Ordering::Relaxed) as jack_native_thread_t,
        None => 0,
    }
}

/// `jack_is_realtime`: whether the process thread runs with real-time scheduling.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_is_realtime(client: *mut Client) -> c_int {
    // SAFETY: see `client`.
    match unsafe { as_client(client) } {
        Some(c) if c.active.load(Ordering::Relaxed) => {
            (c.rt_priority.load(Ordering::Relaxed) > 0) as c_int
        }
        Some(_) => (crate::process::wanted_priority() > 0) as c_int,
        None => 0,
    }
}

macro_rules! setter {
    ($(#[$m:meta])* $fname:ident, $field:ident, $ty:ty) => {
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fname(client: *mut Client, callback: $ty, arg: *mut c_void) -> c_int {
            guard(-1, || {
                // SAFETY: see `client`.
                let Some(c) = (unsafe { as_client(client) }) else { return -1 };
                c.callbacks().$field = (callback, Arg(arg));
                0
            })
        }
    };
}

/// Like `setter!`, but refused while the client is active (JACK does the same).
macro_rules! setter_inactive {
    ($(#[$m:meta])* $fname:ident, $field:ident, $ty:ty) => {
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fname(client: *mut Client, callback: $ty, arg: *mut c_void) -> c_int {
            guard(-1, || {
                // SAFETY: see `client`.
                let Some(c) = (unsafe { as_client(client) }) else { return -1 };
                if c.active.load(Ordering::Acquire) {
                    crate::error(concat!(stringify!($fname), " is not allowed while the client is active"));
                    return -1;
                }
                c.callbacks().$field = (callback, Arg(arg));
                0
            })
        }
    };
}

setter_inactive!(
    /// `jack_set_process_callback`.
    jack_set_process_callback, process, JackProcessCallback
);
setter_inactive!(
    /// `jack_set_process_thread`: the application runs its own loop with
    /// `jack_cycle_wait`/`jack_cycle_signal`.
    jack_set_process_thread, process_thread, JackThreadCallback
);
setter_inactive!(
    /// `jack_set_thread_init_callback`.
    jack_set_thread_init_callback, thread_init, JackThreadInitCallback
);
setter!(
    /// `jack_set_buffer_size_callback` (called on the process thread before the first
    /// cycle of a new size).
    jack_set_buffer_size_callback, buffer_size, JackBufferSizeCallback
);
setter!(
    /// `jack_set_xrun_callback` (called on the notification thread).
    jack_set_xrun_callback, xrun, JackXRunCallback
);
setter!(
    /// `jack_set_port_connect_callback`.
    jack_set_port_connect_callback, port_connect, JackPortConnectCallback
);
setter!(
    /// `jack_set_port_registration_callback`.
    jack_set_port_registration_callback, port_registration, JackPortRegistrationCallback
);
setter!(
    /// `jack_set_client_registration_callback` (other clients are not reported yet).
    jack_set_client_registration_callback, client_registration, JackClientRegistrationCallback
);
setter!(
    /// `jack_set_graph_order_callback`.
    jack_set_graph_order_callback, graph_order, JackGraphOrderCallback
);
setter!(
    /// `jack_set_latency_callback`.
    jack_set_latency_callback, latency, JackLatencyCallback
);
setter!(
    /// `jack_set_freewheel_callback` (called on the process thread before the first
    /// cycle after freewheel started or stopped).
    jack_set_freewheel_callback, freewheel, JackFreewheelCallback
);
setter!(
    /// `jack_set_port_rename_callback` (ports are not renamed).
    jack_set_port_rename_callback, port_rename, JackPortRenameCallback
);

/// `jack_set_sample_rate_callback`: as jackd2 does, calls it at once with the rate.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_sample_rate_callback(
    client: *mut Client,
    callback: JackSampleRateCallback,
    arg: *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client) }) else {
            return -1;
        };
        c.callbacks().sample_rate = (callback, Arg(arg));
        if let Some(f) = callback {
            // SAFETY: the application's callback with its own argument.
            unsafe { f(c.rate, arg) };
        }
        0
    })
}

/// `jack_on_shutdown`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_on_shutdown(
    client: *mut Client,
    callback: JackShutdownCallback,
    arg: *mut c_void,
) {
    guard((), || {
        // SAFETY: see `client`.
        if let Some(c) = unsafe { as_client(client) } {
            c.callbacks().shutdown = (callback, Arg(arg));
        }
    })
}

/// `jack_on_info_shutdown`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_on_info_shutdown(
    client: *mut Client,
    callback: JackInfoShutdownCallback,
    arg: *mut c_void,
) {
    guard((), || {
        // SAFETY: see `client`.
        if let Some(c) = unsafe { as_client(client) } {
            c.callbacks().info_shutdown = (callback, Arg(arg));
        }
    })
}

/// `jack_cycle_wait`: for clients with their own process loop; 0 once the server is
/// gone. After deactivation the calling thread parks for good (JACK kills it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_cycle_wait(client: *mut Client) -> jack_nframes_t {
    guard(0, || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client) }) else {
            return 0;
        };
        let cbs = *c.callbacks();
        let n = crate::process::cycle_wait(c, &cbs);
        if n == 0 && !c.notifier.server_is_gone() {
            loop {
                std::thread::park();
            }
        }
        n
    })
}

/// `jack_cycle_signal`: completes the cycle `jack_cycle_wait` returned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_cycle_signal(client: *mut Client, status: c_int) {
    guard((), || {
        // SAFETY: see `client`.
        if let Some(c) = unsafe { as_client(client) } {
            crate::process::cycle_signal(c, status);
        }
    })
}

/// `jack_thread_wait` (deprecated): signal the current cycle, wait for the next.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_thread_wait(client: *mut Client, status: c_int) -> jack_nframes_t {
    // SAFETY: forwarded.
    unsafe {
        jack_cycle_signal(client, status);
        jack_cycle_wait(client)
    }
}

/// `jack_get_sample_rate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_sample_rate(client: *mut Client) -> jack_nframes_t {
    // SAFETY: see `client`.
    unsafe { as_client(client) }.map_or(0, |c| c.rate)
}

/// `jack_get_buffer_size`: the server's buffer size as last learnt — the frames of the
/// latest cycle, the size this client just set, or the quantum announced when it
/// opened.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_buffer_size(client: *mut Client) -> jack_nframes_t {
    // SAFETY: see `client`.
    unsafe { as_client(client) }.map_or(0, |c| c.known_size.load(Ordering::Relaxed))
}

/// `jack_set_buffer_size`: sets the server's quantum for every client, and it stays
/// after this client closes, as jackd2's buffer size does (quaverd's forced quantum,
/// `quaver quantum release` gives the graph back to its clients' latency requests).
/// A size that is not a power of two or outside the server's bounds is refused with
/// -1, the code jackd2 returns for a size its driver refuses.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_buffer_size(
    client: *mut Client,
    nframes: jack_nframes_t,
) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client) }) else {
            crate::error("jack_set_buffer_size called with a NULL client");
            return -1;
        };
        if nframes == 0 || nframes as usize > c.max_frames {
            crate::error(&format!(
                "cannot set the buffer size to {nframes}: out of range 1..={}",
                c.max_frames
            ));
            return -1;
        }
        match c.conn().force_quantum(Some(nframes)) {
            Ok(()) => {
                // In force from the next cycle on, as jackd2's is when this returns.
                c.known_size.store(nframes, Ordering::Relaxed);
                0
            }
            Err(e) => {
                crate::error(&format!("cannot set the buffer size to {nframes}: {e}"));
                -1
            }
        }
    })
}

/// `jack_cpu_load`: the share of the period this client's process callback used, in
/// percent (smoothed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_cpu_load(client: *mut Client) -> f32 {
    // SAFETY: see `client`.
    unsafe { as_client(client) }.map_or(0.0, |c| f32::from_bits(c.load.load(Ordering::Relaxed)))
}

/// `jack_set_freewheel`: starts (non-zero) or stops quaverd's freewheel, for the whole
/// server as on jackd2 (it stays after this client closes): the graph runs as fast as
/// its clients allow, detached from the devices. 0 on success, -1 when refused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_set_freewheel(client: *mut Client, onoff: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: see `client`.
        let Some(c) = (unsafe { as_client(client) }) else {
            crate::error("jack_set_freewheel called with a NULL client");
            return -1;
        };
        match c.conn().set_freewheel(onoff != 0) {
            Ok(()) => 0,
            Err(e) => {
                crate::error(&format!("cannot set freewheel: {e}"));
                -1
            }
        }
    })
}

/// `jack_client_get_uuid`: `malloc`ed decimal UUID of the client.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_get_uuid(client: *mut Client) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`.
        match unsafe { as_client(client) } {
            Some(c) => malloc_string(&client_uuid(c.node).to_string()),
            None => std::ptr::null_mut(),
        }
    })
}

/// The UUID the server gives a client node.
pub(crate) fn client_uuid(node: u32) -> u64 {
    quaver_client::quaver_protocol::message::node_uuid(node)
}

/// `jack_get_uuid_for_client_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_uuid_for_client_name(
    client: *mut Client,
    client_name: *const c_char,
) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`; a C string from the caller.
        let (Some(c), Some(name)) = (unsafe { as_client(client) }, unsafe { cstr(client_name) })
        else {
            return std::ptr::null_mut();
        };
        let g = c.conn().graph().ok();
        g.and_then(|g| g.nodes.into_iter().find(|n| n.name == name))
            .map_or(std::ptr::null_mut(), |n| {
                malloc_string(&client_uuid(n.id).to_string())
            })
    })
}

/// `jack_get_client_name_by_uuid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_get_client_name_by_uuid(
    client: *mut Client,
    client_uuid: *const c_char,
) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `client`; a C string from the caller.
        let (Some(c), Some(u)) = (unsafe { as_client(client) }, unsafe { cstr(client_uuid) })
        else {
            return std::ptr::null_mut();
        };
        use quaver_client::quaver_protocol::message::{UuidSubject, parse_uuid};
        let Some(UuidSubject::Node(id)) = u.trim().parse::<u64>().ok().and_then(parse_uuid) else {
            return std::ptr::null_mut();
        };
        let g = c.conn().graph().ok();
        g.and_then(|g| g.nodes.into_iter().find(|n| n.id == id))
            .map_or(std::ptr::null_mut(), |n| malloc_string(&n.name))
    })
}

/// `jack_client_real_time_priority`: the process thread's priority, or -1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_real_time_priority(client: *mut Client) -> c_int {
    // SAFETY: see `client`.
    match unsafe { as_client(client) } {
        Some(c) if c.rt_priority.load(Ordering::Relaxed) > 0 => {
            c.rt_priority.load(Ordering::Relaxed)
        }
        Some(_) => {
            let p = crate::process::wanted_priority();
            if p > 0 { p } else { -1 }
        }
        None => -1,
    }
}

/// `jack_client_max_real_time_priority`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_max_real_time_priority(client: *mut Client) -> c_int {
    // SAFETY: forwarded.
    unsafe { jack_client_real_time_priority(client) }
}

/// `jack_acquire_real_time_scheduling`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_acquire_real_time_scheduling(
    thread: jack_native_thread_t,
    priority: c_int,
) -> c_int {
    match crate::process::set_fifo(thread, priority) {
        0 => 0,
        _ => -1,
    }
}

/// `jack_drop_real_time_scheduling`.
#[unsafe(no_mangle)]
pub extern "C" fn jack_drop_real_time_scheduling(thread: jack_native_thread_t) -> c_int {
    match quaver_rt::sched::set_normal_pthread(thread) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// `jack_client_create_thread`: a thread (through the installed thread creator) that,
/// when `realtime` is set, first asks for SCHED_FIFO at `priority` (directly, else
/// through RealtimeKit) and runs on at normal priority, saying so, when refused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_create_thread(
    _client: *mut Client,
    thread: *mut jack_native_thread_t,
    priority: c_int,
    realtime: c_int,
    start_routine: Option<extern "C" fn(*mut c_void) -> *mut c_void>,
    arg: *mut c_void,
) -> c_int {
    guard(-1, || {
        let Some(routine) = start_routine else {
            return libc::EINVAL;
        };
        let made = if realtime != 0 {
            crate::process::create_rt_thread(routine, arg, priority)
        } else {
            crate::process::create_thread(routine, arg)
        };
        match made {
            Ok(t) => {
                if !thread.is_null() {
                    // SAFETY: the caller's out-pointer.
                    unsafe { *thread = t };
                }
                0
            }
            Err(rc) => rc,
        }
    })
}

/// `jack_client_stop_thread`: joins the thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_stop_thread(
    _client: *mut Client,
    thread: jack_native_thread_t,
) -> c_int {
    // SAFETY: the caller's thread, joined once.
    unsafe { libc::pthread_join(thread, std::ptr::null_mut()) }
}

/// `jack_client_kill_thread`: cancels and joins the thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_client_kill_thread(
    _client: *mut Client,
    thread: jack_native_thread_t,
) -> c_int {
    // SAFETY: the caller's thread.
    unsafe {
        libc::pthread_cancel(thread);
        libc::pthread_join(thread, std::ptr::null_mut())
    }
}

/// `jack_set_thread_creator`: used for the process thread and client threads.
#[unsafe(no_mangle)]
pub extern "C" fn jack_set_thread_creator(creator: JackThreadCreator) {
    *crate::process::THREAD_CREATOR
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = creator;
}
