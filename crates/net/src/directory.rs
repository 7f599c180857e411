//! SAP discovery's book: which announced streams exist, from the SAP datagrams heard on
//! the SAP groups. The receiver (a socket, a thread: the daemon's) hands each datagram
//! with its sender's address and arrival time to [`Directory::receive`], which answers
//! what changed — a stream found, its description changed, a stream deleted — and
//! [`Directory::expire`] ends the streams whose announcements stopped.
//!
//! A session is named as RFC 2974 names an announcement: the sender's address and the
//! message id hash, with the SDP's `o=` origin address and session id (a deletion must
//! repeat them). Everything here comes from any host on the link, so it is bounded:
//! at most `max_sessions` streams are kept (announcements of more are counted and
//! dropped), deletions of streams never announced are counted and ignored, and SAP
//! packets or SDP texts that do not parse are counted by kind and dropped. A known
//! stream announced again costs a lookup among at most `max_sessions`.

use crate::sap::{SapKind, SapPacket};
use crate::sdp::SessionDescription;
use std::net::IpAddr;

/// Limits of a [`Directory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryConfig {
    /// Most streams kept at once.
    pub max_sessions: usize,
    /// A stream not announced for this long (ns) is gone.
    pub timeout_ns: u64,
}

/// What names one announced stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The address the SAP datagram came from (also the only sender its RTP is taken
    /// from).
    pub sender: IpAddr,
    /// SAP's message id hash.
    pub hash: u16,
    /// The SDP `o=` origin address.
    pub origin: IpAddr,
    /// The SDP `o=` session id.
    pub session_id: u64,
}

/// Why a stream left the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneReason {
    /// Its sender deleted it.
    Deleted,
    /// No announcement within the timeout.
    TimedOut,
}

/// What one datagram changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A stream announced for the first time.
    Found(SessionKey, SessionDescription),
    /// A known stream announced with another description (format, address, name): its
    /// receiver must be made again.
    Changed(SessionKey, SessionDescription),
    /// A known stream deleted by its sender.
    Gone(SessionKey, GoneReason),
}

/// Counters, for the log and `quaver status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirectoryStats {
    /// Datagrams handed to [`Directory::receive`].
    pub datagrams: u64,
    /// Datagrams that are not SAP packets quaver reads (wrong version, encrypted,
    /// compressed, truncated, another payload type, not text).
    pub bad_sap: u64,
    /// Announcements whose SDP did not parse or carries no L16/L24 stream.
    pub bad_sdp: u64,
    /// Announcements of streams already known, unchanged.
    pub refreshed: u64,
    /// Streams found.
    pub found: u64,
    /// Known streams whose description changed.
    pub changed: u64,
    /// Streams deleted by their sender.
    pub deleted: u64,
    /// Deletions of streams never announced (or already gone).
    pub unknown_deletions: u64,
    /// Streams that timed out.
    pub timed_out: u64,
    /// Announcements of new streams dropped because `max_sessions` were known.
    pub over_limit: u64,
    /// Announcements of this process's own streams (ignored).
    pub own: u64,
}

struct Entry {
    key: SessionKey,
    sdp: SessionDescription,
    last_ns: u64,
}

/// The announced streams (see the module docs).
pub struct Directory {
    cfg: DirectoryConfig,
    entries: Vec<Entry>,
    stats: DirectoryStats,
}

/// Whether two descriptions describe the same stream (the version may move on without
/// anything a receiver uses changing).
fn same_stream(a: &SessionDescription, b: &SessionDescription) -> bool {
    let mut b = b.clone();
    b.session_version = a.session_version;
    *a == b
}

impl Directory {
    /// An empty directory.
    pub fn new(cfg: DirectoryConfig) -> Self {
        Directory {
            cfg,
            entries: Vec::new(),
            stats: DirectoryStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> DirectoryStats {
        self.stats
    }

    /// How many streams are known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no stream is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reads one datagram from `sender`, received at `now_ns` (any monotonic clock, the
    /// one [`Directory::expire`] is given). `own` are the session ids this process
    /// announces itself: those are not discovered.
    pub fn receive(
        &mut self,
        data: &[u8],
        sender: IpAddr,
        now_ns: u64,
        own: &[u64],
    ) -> Option<Change> {
        self.stats.datagrams += 1;
        let Ok(packet) = SapPacket::parse(data) else {
            self.stats.bad_sap += 1;
            return None;
        };
        let Ok((origin, session_id)) = SessionDescription::origin_of(packet.sdp) else {
            self.stats.bad_sdp += 1;
            return None;
        };
        if own.contains(&session_id) {
            self.stats.own += 1;
            return None;
        }
        let key = SessionKey {
            sender,
            hash: packet.hash,
            origin,
            session_id,
        };
        let at = self.entries.iter().position(|e| e.key == key);
        if packet.kind == SapKind::Delete {
            let Some(i) = at else {
                self.stats.unknown_deletions += 1;
                return None;
            };
            self.entries.swap_remove(i);
            self.stats.deleted += 1;
            return Some(Change::Gone(key, GoneReason::Deleted));
        }
        let sdp = match SessionDescription::parse(packet.sdp) {
            Ok(d) => d,
            Err(_) => {
                self.stats.bad_sdp += 1;
                return None;
            }
        };
        match at {
            Some(i) => {
                let e = &mut self.entries[i];
                e.last_ns = now_ns;
                if same_stream(&e.sdp, &sdp) {
                    self.stats.refreshed += 1;
                    return None;
                }
                e.sdp = sdp.clone();
                self.stats.changed += 1;
                Some(Change::Changed(key, sdp))
            }
            None if self.entries.len() >= self.cfg.max_sessions => {
                self.stats.over_limit += 1;
                None
            }
            None => {
                self.entries.push(Entry {
                    key,
                    sdp: sdp.clone(),
                    last_ns: now_ns,
                });
                self.stats.found += 1;
                Some(Change::Found(key, sdp))
            }
        }
    }

    /// Takes out the streams not announced within the timeout before `now_ns`.
    pub fn expire(&mut self, now_ns: u64) -> Vec<SessionKey> {
        let timeout = self.cfg.timeout_ns;
        let mut gone = Vec::new();
        self.entries.retain(|e| {
            let alive = now_ns.saturating_sub(e.last_ns) < timeout;
            if !alive {
                gone.push(e.key);
            }
            alive
        });
        self.stats.timed_out += gone.len() as u64;
        gone
    }

    /// When the next stream times out if nothing is heard from it (`None`: no stream).
    pub fn next_expiry(&self) -> Option<u64> {
        self.entries
            .iter()
            .map(|e| e.last_ns.saturating_add(self.cfg.timeout_ns))
            .min()
    }
}

#[cfg(test)]
mod tests;
