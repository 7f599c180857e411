//! The notification thread: calls the application's non-real-time callbacks (port
//! connections and registrations, graph order, latency, xruns) and notices when the
//! server goes away (shutdown callbacks). It blocks on an eventfd and on the control
//! socket's hangup, so an idle client makes no periodic wakeups.

use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use quaver_client::quaver_protocol::EventBell;
use rustix::event::{PollFd, PollFlags};

use crate::client::Client;
use crate::types::*;

/// Something to tell the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// Ports `a` → `b` were connected (true) or disconnected.
    PortConnect(u32, u32, bool),
    /// A port of ours was registered (true) or unregistered.
    PortRegistration(u32, bool),
    /// The processing order may have changed.
    GraphOrder,
    /// Latencies should be recomputed (capture, then playback callback).
    Latency,
}

/// The queue between API calls / the process thread and the notification thread.
pub struct Notifier {
    queue: Mutex<VecDeque<Note>>,
    bell: EventBell,
    /// Set by the process thread when it saw the server go away; real-time safe.
    gone: AtomicBool,
    /// Set by the process thread when the server counted new xruns; real-time safe.
    xrun: AtomicBool,
    stop: AtomicBool,
    shut_down: AtomicBool,
}

impl Notifier {
    pub(crate) fn new() -> std::io::Result<Notifier> {
        Ok(Notifier {
            queue: Mutex::new(VecDeque::new()),
            bell: EventBell::new()?,
            gone: AtomicBool::new(false),
            xrun: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
        })
    }

    /// Queues a note (control threads).
    pub(crate) fn push(&self, n: Note) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(n);
        self.bell.signal();
    }

    /// Reports new xruns (process thread: an atomic store and an eventfd write).
    pub(crate) fn xrun(&self) {
        self.xrun.store(true, Ordering::Release);
        self.bell.signal();
    }

    /// Reports that the server went away (process thread).
    pub(crate) fn server_gone(&self) {
        self.gone.store(true, Ordering::Release);
        self.bell.signal();
    }

    /// Ends the notification thread.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.bell.signal();
    }

    /// True once the server was seen gone (by either thread).
    pub(crate) fn server_is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire) || self.shut_down.load(Ordering::Acquire)
    }

    /// True once the shutdown callbacks ran.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }
}

/// The thread body.
pub(crate) fn run(client: &Client, hangup: OwnedFd) {
    let n = &*client.notifier;
    loop {
        let mut fds = [
            PollFd::new(&n.bell, PollFlags::IN),
            PollFd::new(&hangup, PollFlags::RDHUP),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        let hung_up = !fds[1].revents().is_empty();
        n.bell.drain();
        if n.stop.load(Ordering::Acquire) {
            return;
        }
        let notes: Vec<Note> = n
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        let cbs = *client.callbacks();
        for note in notes {
            deliver(client, &cbs, note);
        }
        if n.xrun.swap(false, Ordering::AcqRel)
            && let (Some(f), a) = cbs.xrun
        {
            // SAFETY: the application's callback with its own argument.
            unsafe { f(a.0) };
        }
        if hung_up || n.gone.load(Ordering::Acquire) {
            shutdown(client, &cbs, "quaverd closed the connection");
            return;
        }
    }
}

fn deliver(client: &Client, cbs: &crate::client::Callbacks, note: Note) {
    // SAFETY (all calls below): the application's callbacks with its own arguments.
    match note {
        Note::PortConnect(a, b, on) => {
            if let (Some(f), arg) = cbs.port_connect {
                unsafe { f(a, b, on as i32, arg.0) };
            }
        }
        Note::PortRegistration(id, on) => {
            if let (Some(f), arg) = cbs.port_registration {
                unsafe { f(id, on as i32, arg.0) };
            }
        }
        Note::GraphOrder => {
            if let (Some(f), arg) = cbs.graph_order {
                unsafe { f(arg.0) };
            }
        }
        Note::Latency => {
            crate::api_port::default_latencies(client);
            if let (Some(f), arg) = cbs.latency {
                unsafe {
                    f(JACK_CAPTURE_LATENCY, arg.0);
                    f(JACK_PLAYBACK_LATENCY, arg.0);
                }
            }
        }
    }
}

/// Runs the shutdown callbacks once.
pub(crate) fn shutdown(client: &Client, cbs: &crate::client::Callbacks, why: &str) {
    if client.notifier.shut_down.swap(true, Ordering::AcqRel) {
        return;
    }
    client.active.store(false, Ordering::Release);
    crate::error(why);
    let reason = CString::new(why).unwrap_or_default();
    // SAFETY: the application's callbacks with their own arguments.
    unsafe {
        if let (Some(f), arg) = cbs.info_shutdown {
            f(JACK_FAILURE | JACK_SERVER_ERROR, reason.as_ptr(), arg.0);
        } else if let (Some(f), arg) = cbs.shutdown {
            f(arg.0);
        }
    }
}
