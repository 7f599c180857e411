//! What the server keeps of JACK sessions (`session.rs` serves the requests): the
//! nodes with a session callback and the notify in progress, behind one lock, with
//! the condition a notify waits on for its replies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Session state of the server.
#[derive(Default)]
pub(crate) struct Sessions {
    state: Mutex<State>,
    /// Signalled by each reply and when nodes go away.
    pub(super) replied: Condvar,
}

/// What [`Sessions`] guards.
#[derive(Default)]
pub(super) struct State {
    /// Nodes whose client set a session callback.
    pub(super) callbacks: BTreeSet<u32>,
    /// The notify in progress: each notified node and its answer once given.
    pub(super) pending: Option<BTreeMap<u32, Option<(String, u32)>>>,
}

impl Sessions {
    /// The state, locked.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets nodes that went away.
    pub(crate) fn retain(&self, exists: impl Fn(u32) -> bool) {
        self.lock().callbacks.retain(|&n| exists(n));
        self.replied.notify_all();
    }
}
