//! What the I/O thread, the accept threads and the front-end's state share about
//! connections: the hand-over point for new ones, the handle other threads post to a
//! connection through, and the record of an accept thread. They sit here, below
//! `state`, so that the state can hold them without importing the threads that use them.

use crate::io::listener::PulseListener;
use crate::io::tcp::Sock;
use crate::rt::shared::Bell;
use pulseaudio::protocol::SubscriptionEvent;
use quaver_engine::NodeId;
use rustix::fd::OwnedFd;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// What the accept threads share with the I/O thread.
pub struct IoShared {
    /// Rung by streams' RT side, by other threads posting to a connection, and for new
    /// connections.
    pub bell: Arc<Bell>,
    pub(crate) incoming: Mutex<Vec<(Sock, Arc<ConnHandle>)>>,
}

impl IoShared {
    /// A new, empty hand-over point.
    pub fn new() -> std::io::Result<IoShared> {
        Ok(IoShared {
            bell: Arc::new(Bell::new()?),
            incoming: Mutex::new(Vec::new()),
        })
    }

    /// Hands a freshly accepted client to the I/O thread.
    pub fn adopt(&self, sock: Sock, handle: Arc<ConnHandle>) {
        self.incoming
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((sock, handle));
        self.bell.ring();
    }
}

/// Something another thread asks a connection thread to do.
#[derive(Debug, Clone)]
pub enum ConnMsg {
    /// A subscription event to forward if the client subscribed to its facility.
    Event(SubscriptionEvent),
    /// Close the connection (KILL_CLIENT).
    Kill,
    /// Remove a stream and tell the client (KILL_SINK_INPUT / KILL_SOURCE_OUTPUT).
    KillStream(NodeId),
    /// A stream was moved to another device; tell the client.
    Moved(NodeId),
    /// Stream restore's entries changed (sent only to its subscribers).
    RestoreEvent,
    /// The devices were suspended (true) or resumed while streams exist; tell the
    /// client's streams (PLAYBACK/RECORD_STREAM_SUSPENDED).
    DevicesSuspended(bool),
    /// Device restore saved a device's formats (type, index): tell the extension's
    /// subscribers.
    DeviceRestoreEvent(u32, u32),
    /// A module's sink or source (this node) was suspended (true) or resumed on its own.
    NodeSuspended(NodeId, bool),
    /// A module loading in the background (a tunnel) is up, under this index, or
    /// failed: the answer to the client's LOAD_MODULE of this sequence number.
    ModuleLoaded(u32, Result<u32, pulseaudio::protocol::PulseError>),
}

/// The handle other threads hold on a connection.
#[derive(Debug)]
pub struct ConnHandle {
    /// Client index.
    pub client: u32,
    /// Subscription mask (`SubscriptionMask` bits).
    pub mask: AtomicU32,
    /// Subscribed to stream restore's events.
    pub restore_events: AtomicBool,
    /// Subscribed to device restore's events.
    pub device_restore_events: AtomicBool,
    /// Messages for the connection thread.
    pub queue: Mutex<VecDeque<ConnMsg>>,
    /// Wakes the I/O thread serving this connection (also rung by its streams' RT side).
    pub bell: Arc<Bell>,
}

impl ConnHandle {
    /// Queues `msg` and wakes the connection.
    pub fn post(&self, msg: ConnMsg) {
        if let ConnMsg::Event(e) = &msg
            && self.mask.load(Ordering::Relaxed) & (1 << e.event_facility as u32) == 0
        {
            return;
        }
        if matches!(msg, ConnMsg::RestoreEvent) && !self.restore_events.load(Ordering::Relaxed) {
            return;
        }
        if matches!(msg, ConnMsg::DeviceRestoreEvent(..))
            && !self.device_restore_events.load(Ordering::Relaxed)
        {
            return;
        }
        let mut q = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A client that never reads its socket must not grow our memory without bound:
        // past this many queued events it gets no more of them.
        // A deferred reply is always kept: the client waits for it.
        if q.len() < 4096 || matches!(msg, ConnMsg::ModuleLoaded(..)) {
            q.push_back(msg);
        }
        drop(q);
        self.bell.ring();
    }
}

/// A running accept thread that can be stopped.
pub struct Acceptor {
    /// What it listens on, for logs and errors.
    pub addr: String,
    pub(crate) stop: AtomicBool,
    pub(crate) fd: OwnedFd,
    /// Clients accepted through it (pruned of those gone as new ones come).
    pub(crate) clients: Mutex<Vec<u32>>,
    /// The socket file of a unix listener, removed when the acceptor goes.
    pub(crate) _file: Option<PulseListener>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Acceptor({})", self.addr)
    }
}
