//! A loaded tunnel as its module's record holds it: the network thread and the nodes it
//! has in the graph now. Stopping it is quick wherever the thread is: its waits watch the
//! bell, and a write blocked on a remote that stopped reading ends when the socket is
//! shut down.

use crate::rt::transport::Bell;
use quaver_engine::NodeId;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// The connection the network thread serves now (a clone of its socket), for
/// [`Tunnel::stop`] to shut down.
pub(super) type ConnSlot = Arc<Mutex<Option<TcpStream>>>;

/// A loaded tunnel: its network thread and the nodes it has in the graph now (none
/// while the remote is away).
#[derive(Debug)]
pub struct Tunnel {
    stop: Arc<AtomicBool>,
    bell: Arc<Bell>,
    thread: Mutex<Option<JoinHandle<()>>>,
    nodes: Arc<Mutex<Vec<NodeId>>>,
    conn: ConnSlot,
}

impl Tunnel {
    /// The tunnel whose network thread is `thread`, stopped by `stop` and `bell`.
    pub(super) fn new(
        stop: Arc<AtomicBool>,
        bell: Arc<Bell>,
        thread: JoinHandle<()>,
        nodes: Arc<Mutex<Vec<NodeId>>>,
        conn: ConnSlot,
    ) -> Tunnel {
        Tunnel {
            stop,
            bell,
            thread: Mutex::new(Some(thread)),
            nodes,
            conn,
        }
    }

    /// Stops the network thread (closing the connection); returns the nodes it leaves in
    /// the graph, for the unload to remove. Called on the I/O thread: the network thread
    /// sees the bell in whatever it waits for (a connect, a handshake answer, the
    /// backoff) and a blocked write fails on the shut-down socket, so the join is short.
    pub fn stop(&self) -> Vec<NodeId> {
        let t0 = Instant::now();
        self.stop.store(true, Ordering::Release);
        self.bell.ring();
        if let Some(sock) = lock(&self.conn).as_ref() {
            let _ = sock.shutdown(Shutdown::Both);
        }
        let thread = lock(&self.thread).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        tracing::debug!("tunnel: network thread stopped in {:?}", t0.elapsed());
        std::mem::take(&mut *lock(&self.nodes))
    }

    /// Whether `nodes` is this tunnel's list (the network thread finds its module so).
    pub(super) fn owns(&self, nodes: &Arc<Mutex<Vec<NodeId>>>) -> bool {
        Arc::ptr_eq(&self.nodes, nodes)
    }
}

/// Locks `m`, poisoned or not.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
