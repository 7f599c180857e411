//! JACK sessions: which callback nodes have a session callback, and a session
//! manager's notify. A notify sends each notified node a `session` event on the
//! watchers' streams (its libjack runs the application's callback on the notification
//! thread, never the process thread) and waits, on the notifier's own connection
//! thread, until each replied, went away or ran out of time.

use super::session_state::Sessions;
use super::{Meta, WatchItem};
use crate::NativeServer;
use quaver_protocol::message::{
    ErrorCode, Reply, SESSION_SAVE_ERROR, SessionCommand, SessionEvent, SessionEventType, node_uuid,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a notify waits for the clients' replies. jackd2 waits without end; a
/// client that never answers then holds every later notify, so here it is marked
/// `JackSessionSaveError` instead.
const REPLY_WAIT: Duration = Duration::from_secs(10);

impl Meta {
    fn sessions(&self) -> &Sessions {
        &self.sessions
    }
}

impl NativeServer {
    /// `set_session_callback`.
    pub(crate) fn set_session_callback(&self, client: u32, node: u32, on: bool) -> Reply {
        if let Err(r) = self.check_callback(client, node) {
            return r;
        }
        let mut s = self.meta.sessions().lock();
        if on {
            s.callbacks.insert(node);
        } else {
            s.callbacks.remove(&node);
        }
        Reply::Ok
    }

    /// `has_session_callback`: `no_such_node` for a name no node has (jackd2's -1).
    pub(crate) fn has_session_callback(&self, name: &str) -> Reply {
        let Some(node) = self
            .engine
            .inspect(|g| g.nodes.values().find(|n| n.name == name).map(|n| n.id))
        else {
            return Reply::error(ErrorCode::NoSuchNode, format!("no client named '{name}'"));
        };
        Reply::HasSessionCallback {
            has: self.meta.sessions().lock().callbacks.contains(&node),
        }
    }

    /// `session_notify`: one at a time (`busy` while another runs).
    pub(crate) fn session_notify(
        &self,
        target: Option<&str>,
        kind: SessionEventType,
        path: &str,
    ) -> Reply {
        let sessions = self.meta.sessions();
        let targets: Vec<(u32, String)> = {
            let mut s = sessions.lock();
            if s.pending.is_some() {
                return Reply::error(ErrorCode::Busy, "another session notify is in progress");
            }
            let names: Vec<(u32, String)> = self.engine.inspect(|g| {
                s.callbacks
                    .iter()
                    .filter_map(|n| g.nodes.get(n).map(|node| (*n, node.name.clone())))
                    .filter(|(_, name)| target.is_none_or(|t| t == name))
                    .collect()
            });
            // A target no client with a callback has gets an empty answer, as on jackd2.
            s.pending = Some(names.iter().map(|(n, _)| (*n, None)).collect());
            names
        };
        for (node, name) in &targets {
            let dir = format!(
                "{path}{}{name}/",
                if path.ends_with('/') { "" } else { "/" }
            );
            // As jackd2: a directory that cannot be made is logged and the client is
            // told anyway (its own save then fails and it says so in its reply).
            if let Err(e) = std::fs::create_dir(&dir)
                && e.kind() != std::io::ErrorKind::AlreadyExists
            {
                tracing::warn!("cannot create the session directory {dir}: {e}");
            }
            self.meta
                .send(WatchItem::Session(*node, SessionEvent { kind, dir }));
        }
        let answers = self.wait_replies(sessions);
        let commands = targets
            .into_iter()
            .map(|(node, client_name)| {
                let (command, flags) = answers
                    .get(&node)
                    .cloned()
                    .flatten()
                    .unwrap_or((String::new(), SESSION_SAVE_ERROR));
                SessionCommand {
                    uuid: node_uuid(node).to_string(),
                    client_name,
                    command,
                    flags,
                }
            })
            .collect();
        Reply::SessionCommands { commands }
    }

    /// Waits until every notified node answered or is gone, at most [`REPLY_WAIT`];
    /// ends the notify and returns the answers.
    fn wait_replies(&self, sessions: &Sessions) -> BTreeMap<u32, Option<(String, u32)>> {
        let until = Instant::now() + REPLY_WAIT;
        let mut s = sessions.lock();
        loop {
            let done = s.pending.as_ref().is_none_or(|p| {
                p.iter()
                    .all(|(n, a)| a.is_some() || !self.engine.inspect(|g| g.nodes.contains_key(n)))
            });
            let now = Instant::now();
            if done || now >= until {
                return s.pending.take().unwrap_or_default();
            }
            // Woken by a reply; a node that goes away is noticed within the slice.
            let slice = (until - now).min(Duration::from_millis(100));
            s = sessions
                .replied
                .wait_timeout(s, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// `session_reply`: `bad_request` when no notify waits for this node's answer.
    pub(crate) fn session_reply(
        &self,
        client: u32,
        node: u32,
        command: String,
        flags: u32,
    ) -> Reply {
        if let Err(r) = self.check_callback(client, node) {
            return r;
        }
        let sessions = self.meta.sessions();
        let mut s = sessions.lock();
        match s.pending.as_mut().and_then(|p| p.get_mut(&node)) {
            Some(slot @ None) => {
                *slot = Some((command, flags));
                sessions.replied.notify_all();
                Reply::Ok
            }
            Some(Some(_)) => Reply::error(
                ErrorCode::BadRequest,
                format!("node {node} already answered this session notify"),
            ),
            None => Reply::error(
                ErrorCode::BadRequest,
                format!("no session event is pending for node {node}"),
            ),
        }
    }
}
