//! The queue between API calls (and the process thread) and the notification thread
//! ([`crate::notify_thread`]): notes to deliver, and real-time-safe flags for xruns and
//! the server going away, behind one eventfd.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use quaver_client::quaver_protocol::EventBell;

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
    /// The application set a latency range outside a pass: publish what changed.
    PublishLatency,
    /// The graph changed on the server (watch event): compare and report.
    GraphChanged,
}

/// The queue between API calls / the process thread and the notification thread.
pub struct Notifier {
    pub(crate) queue: Mutex<VecDeque<Note>>,
    pub(crate) bell: EventBell,
    /// Set by the process thread when it saw the server go away; real-time safe.
    pub(crate) gone: AtomicBool,
    /// Set by the process thread when the server counted new xruns; real-time safe.
    pub(crate) xrun: AtomicBool,
    /// Set by the process thread when freewheel started or stopped; real-time safe.
    pub(crate) freewheel: AtomicBool,
    pub(crate) stop: AtomicBool,
    pub(crate) shut_down: AtomicBool,
}

impl Notifier {
    pub(crate) fn new() -> std::io::Result<Notifier> {
        Ok(Notifier {
            queue: Mutex::new(VecDeque::new()),
            bell: EventBell::new()?,
            gone: AtomicBool::new(false),
            xrun: AtomicBool::new(false),
            freewheel: AtomicBool::new(false),
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

    /// Reports that freewheel started or stopped (process thread: an atomic store and
    /// an eventfd write).
    pub(crate) fn freewheel_changed(&self) {
        self.freewheel.store(true, Ordering::Release);
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
