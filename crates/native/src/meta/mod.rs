//! Names and metadata for JACK clients: the property store and alias table
//! ([`store`]), the requests that read and change them, and the hub that merges the
//! engine's graph events with property changes for every watching connection.
//!
//! One thread (`quaver-meta`) is the front-end's only subscriber to the engine's graph
//! events for watchers: it forwards each to every watcher and, when a node or port went
//! away, drops its properties and aliases and announces the deletion, so a watcher sees
//! graph and property events in one order. It blocks on the engine's channel: no
//! periodic wakeups. Each watcher has a bounded queue (`WATCH_BACKLOG`); one that falls
//! that far behind is dropped rather than let the server's memory grow.

mod latency;
mod session;
mod session_state;
mod store;

use crate::NativeServer;
use quaver_engine::{Engine, GraphEvent};
use quaver_protocol::message::{
    ErrorCode, PropertyChange, PropertyEvent, Reply, UuidSubject, parse_uuid,
};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard};
use store::{MetaError, MetaStore};

/// What a watching connection is sent.
#[derive(Debug, Clone)]
pub(crate) enum WatchItem {
    /// A change in the graph or the devices.
    Graph(GraphEvent),
    /// A property was created, changed or deleted.
    Property(PropertyEvent),
    /// A port of this node has new published latency ranges.
    Latency(u32),
    /// A session manager's notify for this node.
    Session(u32, quaver_protocol::message::SessionEvent),
}

/// The store and the watchers of its changes.
#[derive(Default)]
pub(crate) struct Meta {
    store: Mutex<MetaStore>,
    watchers: Mutex<Vec<SyncSender<WatchItem>>>,
    sessions: session_state::Sessions,
}

/// Events a watcher may have waiting before it is dropped: bounds what a client that
/// stops reading its `watch` connection (while another makes changes) costs the server.
const WATCH_BACKLOG: usize = 4096;

impl Meta {
    /// Starts the hub thread over `engine`'s graph events.
    pub(crate) fn start(engine: &Engine) -> Arc<Meta> {
        let meta = Arc::new(Meta::default());
        let rx = engine.subscribe();
        let (m, e) = (meta.clone(), engine.clone());
        let spawned = std::thread::Builder::new()
            .name("quaver-meta".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                for ev in rx {
                    m.send(WatchItem::Graph(ev));
                    if matches!(ev, GraphEvent::NodeRemoved(_) | GraphEvent::NodeChanged(_)) {
                        m.prune(&e);
                    }
                }
            });
        if let Err(err) = spawned {
            tracing::error!("cannot start the metadata thread: {err}; watchers get no events");
        }
        meta
    }

    /// A new watcher's stream of events.
    pub(crate) fn subscribe(&self) -> Receiver<WatchItem> {
        let (tx, rx) = sync_channel(WATCH_BACKLOG);
        self.lock_watchers().push(tx);
        rx
    }

    fn lock_watchers(&self) -> MutexGuard<'_, Vec<SyncSender<WatchItem>>> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_store(&self) -> MutexGuard<'_, MetaStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn send(&self, item: WatchItem) {
        self.lock_watchers()
            .retain(|w| match w.try_send(item.clone()) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    // Its connection ends once it has read what is queued.
                    tracing::warn!(
                        "a watcher left {WATCH_BACKLOG} events unread; no more are sent to it"
                    );
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            });
    }

    fn announce(&self, subject: u64, key: Option<String>, change: PropertyChange) {
        self.send(WatchItem::Property(PropertyEvent {
            subject,
            key,
            change,
        }));
    }

    /// Drops what belonged to nodes and ports that are gone.
    fn prune(&self, engine: &Engine) {
        let gone = {
            let mut store = self.lock_store();
            engine.inspect(|g| {
                store.retain(
                    |u| match parse_uuid(u) {
                        Some(UuidSubject::Node(n)) => g.nodes.contains_key(&n),
                        Some(UuidSubject::Port(p)) => g.ports.contains_key(&p),
                        None => false,
                    },
                    |p| g.ports.contains_key(&p),
                )
            })
        };
        let nodes: std::collections::BTreeSet<u32> =
            engine.inspect(|g| g.nodes.keys().copied().collect());
        self.sessions.retain(|n| nodes.contains(&n));
        for subject in gone {
            tracing::debug!("properties of {subject} dropped: its node or port went away");
            self.announce(subject, None, PropertyChange::Deleted);
        }
    }
}

fn meta_error(e: MetaError) -> Reply {
    let code = match &e {
        MetaError::NoSuchSubject(_) => ErrorCode::NoSuchNode,
        MetaError::NoSuchPort(_) => ErrorCode::NoSuchPort,
        MetaError::TooMany(_) | MetaError::AliasesFull(_) => ErrorCode::TooMany,
        MetaError::NoSuchAlias(..) => ErrorCode::BadRequest,
    };
    Reply::error(code, e.to_string())
}

impl NativeServer {
    /// True if `uuid` names a node or port of the graph now.
    fn subject_exists(&self, uuid: u64) -> bool {
        self.engine.inspect(|g| match parse_uuid(uuid) {
            Some(UuidSubject::Node(n)) => g.nodes.contains_key(&n),
            Some(UuidSubject::Port(p)) => g.ports.contains_key(&p),
            None => false,
        })
    }

    /// `set_property`: refused for a UUID no node or port has, so nothing is kept for
    /// a subject that can never be cleaned up.
    pub(crate) fn set_property(
        &self,
        subject: u64,
        key: &str,
        value: &[u8],
        value_type: Option<&str>,
    ) -> Reply {
        let change = {
            // Checked under the store's lock, so the hub cannot prune between the
            // check and the insert and leave a property of a subject that is gone.
            let mut store = self.meta.lock_store();
            if !self.subject_exists(subject) {
                return meta_error(MetaError::NoSuchSubject(subject));
            }
            match store.set(subject, key, value, value_type) {
                Ok(c) => c,
                Err(e) => return meta_error(e),
            }
        };
        self.meta.announce(subject, Some(key.to_string()), change);
        Reply::Ok
    }

    /// `get_properties`.
    pub(crate) fn get_properties(&self, subject: Option<u64>) -> Reply {
        Reply::Properties {
            properties: self.meta.lock_store().get(subject),
        }
    }

    /// `remove_property`: one key, or all of a subject's.
    pub(crate) fn remove_property(&self, subject: u64, key: Option<String>) -> Reply {
        let count = self.meta.lock_store().remove(subject, key.as_deref());
        if count > 0 {
            self.meta.announce(subject, key, PropertyChange::Deleted);
        }
        Reply::Removed { count }
    }

    /// `remove_all_properties`: announced once, for subject 0, as jackd2 does.
    pub(crate) fn remove_all_properties(&self) -> Reply {
        let count = self.meta.lock_store().remove_all();
        self.meta.announce(0, None, PropertyChange::Deleted);
        Reply::Removed { count }
    }

    /// `set_alias` and `unset_alias`.
    pub(crate) fn alias(&self, port: u32, alias: &str, set: bool) -> Reply {
        let mut store = self.meta.lock_store();
        if !self.engine.inspect(|g| g.ports.contains_key(&port)) {
            return meta_error(MetaError::NoSuchPort(port));
        }
        let r = if set {
            store.set_alias(port, alias)
        } else {
            store.unset_alias(port, alias)
        };
        match r {
            Ok(()) => Reply::Ok,
            Err(e) => meta_error(e),
        }
    }

    /// `aliases`.
    pub(crate) fn aliases(&self) -> Reply {
        Reply::Aliases {
            ports: self.meta.lock_store().aliases(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watcher_that_stops_reading_is_dropped_at_the_backlog() {
        let meta = Meta::default();
        let slow = meta.subscribe();
        let quick = meta.subscribe();
        for i in 0..=WATCH_BACKLOG {
            meta.announce(i as u64, None, PropertyChange::Deleted);
            // The quick one keeps up.
            assert!(matches!(quick.try_recv(), Ok(WatchItem::Property(_))));
        }
        assert_eq!(
            meta.lock_watchers().len(),
            1,
            "only the quick watcher stays"
        );
        // The slow one gets what was queued, then its stream ends.
        assert_eq!(slow.try_iter().count(), WATCH_BACKLOG);
        assert!(matches!(
            slow.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        ));
    }
}
