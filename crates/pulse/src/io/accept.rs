//! Accepting connections: the unix socket, the configured TCP address, and the listeners
//! `module-native-protocol-tcp` and `module-native-protocol-unix` add at run time.
//!
//! Each listener has a thread blocked in `accept`. A listener a module added is stopped
//! by shutting its socket down, which wakes that `accept` with an error (no polling, so
//! an idle listener costs no wakeups); the clients it let in are then disconnected, as
//! PulseAudio disconnects a protocol module's clients when the module is unloaded.

use crate::io::listener::PulseListener;
use crate::io::shared::{Acceptor, ConnHandle, ConnMsg};
use crate::io::tcp::{Net, Sock};
use crate::state::{ClientRec, Server};
use anyhow::{Context, Result};
use rustix::fd::{AsFd, OwnedFd};
use std::collections::VecDeque;
use std::net::{IpAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Who a TCP listener serves, and what the other peers must show.
#[derive(Debug, Clone, Default)]
pub struct TcpAuth {
    /// Serve every peer (`auth-anonymous=1`).
    pub anonymous: bool,
    /// Peers in these ranges need no cookie.
    pub allow: Vec<Net>,
    /// The cookie other peers' AUTH must carry; `None` turns them away.
    pub cookie: Option<Arc<Vec<u8>>>,
}

impl TcpAuth {
    /// For a peer at `ip`: `None` to turn it away, else the cookie its AUTH must carry
    /// (`Some(None)`: none needed).
    fn admit(&self, ip: IpAddr) -> Option<Option<Arc<Vec<u8>>>> {
        if self.anonymous || self.allow.iter().any(|n| n.contains(ip)) {
            Some(None)
        } else {
            self.cookie.clone().map(Some)
        }
    }

    /// How the log describes it.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.anonymous {
            parts.push("anonymous".to_string());
        } else {
            if !self.allow.is_empty() {
                parts.push(format!("{} allow-listed range(s)", self.allow.len()));
            }
            parts.push(if self.cookie.is_some() {
                "others need the cookie".to_string()
            } else {
                "others refused".to_string()
            });
        }
        parts.join(", ")
    }
}

/// A listening socket and what its peers are let in on.
pub enum Listen {
    /// A unix socket: peers are trusted (the socket's directory decides who reaches it).
    Unix(UnixListener),
    /// A TCP socket.
    Tcp(TcpListener, TcpAuth),
}

impl Listen {
    fn fd(&self) -> std::io::Result<OwnedFd> {
        match self {
            Listen::Unix(l) => l.as_fd().try_clone_to_owned(),
            Listen::Tcp(l, _) => l.as_fd().try_clone_to_owned(),
        }
    }
}

impl Acceptor {
    /// Stops accepting and disconnects the clients that came in through it.
    pub fn stop(&self, srv: &Server) {
        self.stop.store(true, Ordering::Release);
        // Wakes the blocked accept (EINVAL on Linux for TCP and unix listeners).
        let _ = rustix::net::shutdown(&self.fd, rustix::net::Shutdown::Read);
        let clients = std::mem::take(&mut *self.clients.lock().unwrap_or_else(|e| e.into_inner()));
        let st = srv.lock();
        for c in clients {
            if let Some(rec) = st.clients.get(&c) {
                rec.conn.post(ConnMsg::Kill);
            }
        }
    }
}

/// Starts a thread named `thread` accepting on `listen`; `file` is the unix socket file
/// to remove when the acceptor is dropped.
pub fn spawn(
    srv: &Arc<Server>,
    listen: Listen,
    addr: String,
    thread: &str,
    file: Option<PulseListener>,
) -> Result<Arc<Acceptor>> {
    let acc = Arc::new(Acceptor {
        addr,
        stop: AtomicBool::new(false),
        fd: listen.fd().context("duplicating the listening socket")?,
        clients: Mutex::new(Vec::new()),
        _file: file,
    });
    let (s, a) = (srv.clone(), acc.clone());
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || run(&s, &listen, &a))
        .with_context(|| format!("spawning the accept thread for {}", acc.addr))?;
    Ok(acc)
}

fn run(srv: &Arc<Server>, listen: &Listen, acc: &Acceptor) {
    loop {
        let sock = match listen {
            Listen::Unix(l) => l.accept().map(|(s, _)| Some(Sock::Unix(s))),
            Listen::Tcp(l, auth) => l.accept().map(|(stream, peer)| match auth.admit(peer.ip()) {
                Some(cookie) => {
                    tracing::debug!(
                        "pulse TCP connection from {peer} on {} ({})",
                        acc.addr,
                        if cookie.is_some() {
                            "needs the cookie"
                        } else {
                            "allowed by address"
                        }
                    );
                    Some(Sock::Tcp { stream, cookie })
                }
                None => {
                    tracing::info!(
                        "pulse: refusing TCP connection from {peer} on {}: not allowed by address and cookie authentication is off",
                        acc.addr
                    );
                    None
                }
            }),
        };
        if acc.stop.load(Ordering::Acquire) {
            tracing::debug!("pulse: stopped accepting on {}", acc.addr);
            return;
        }
        match sock {
            Ok(Some(sock)) => {
                if let Some(index) = accept(srv, sock) {
                    let mut list = acc.clients.lock().unwrap_or_else(|e| e.into_inner());
                    let st = srv.lock();
                    list.retain(|c| st.clients.contains_key(c));
                    list.push(index);
                    // Stopped after this client's accept returned: `stop` may have taken
                    // the list before the push, so the client is disconnected here.
                    if acc.stop.load(Ordering::Acquire)
                        && let Some(rec) = st.clients.get(&index)
                    {
                        rec.conn.post(ConnMsg::Kill);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("pulse accept on {} failed: {e}", acc.addr);
                // Out of descriptors, say: retry, but without spinning on the error.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn peer_pid(sock: &Sock) -> Option<u32> {
    match sock {
        Sock::Unix(s) => rustix::net::sockopt::socket_peercred(s)
            .ok()
            .map(|c| c.pid.as_raw_nonzero().get() as u32),
        Sock::Tcp { .. } => None,
    }
}

/// Registers a client for `sock` and hands it to the I/O thread; its index, or `None`
/// when the server is full (the connection is closed).
fn accept(srv: &Arc<Server>, sock: Sock) -> Option<u32> {
    let pid = peer_pid(&sock);
    if srv.lock().clients.len() >= srv.opts.max_clients {
        tracing::warn!(
            "refusing PulseAudio client (pid {pid:?}): {} clients connected",
            srv.opts.max_clients
        );
        return None;
    }
    let index = srv.next_client.fetch_add(1, Ordering::Relaxed);
    let handle = Arc::new(ConnHandle {
        client: index,
        mask: AtomicU32::new(0),
        restore_events: AtomicBool::new(false),
        device_restore_events: AtomicBool::new(false),
        queue: Mutex::new(VecDeque::new()),
        bell: srv.io.bell.clone(),
    });
    srv.lock().clients.insert(
        index,
        ClientRec {
            name: "Native client (UNIX socket client)".into(),
            props: {
                let mut p = pulseaudio::protocol::Props::new();
                if let Some(pid) = pid {
                    p.set(
                        pulseaudio::protocol::Prop::ApplicationProcessId,
                        crate::wire::convert::cstr(&pid.to_string()),
                    );
                }
                p
            },
            conn: handle.clone(),
        },
    );
    srv.broadcast(
        pulseaudio::protocol::SubscriptionEventFacility::Client,
        pulseaudio::protocol::SubscriptionEventType::New,
        index,
    );
    tracing::debug!("pulse client {index} connected (pid {pid:?})");
    srv.io.adopt(sock, handle);
    Some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_peers_are_admitted_by_address_anonymity_or_cookie() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let far: IpAddr = "192.0.2.7".parse().unwrap();
        let cookie = Arc::new(vec![1u8; 256]);
        let acl = TcpAuth {
            anonymous: false,
            allow: vec![Net::parse("127.0.0.0/8").unwrap()],
            cookie: Some(cookie.clone()),
        };
        assert_eq!(acl.admit(local), Some(None));
        assert_eq!(acl.admit(far), Some(Some(cookie)));
        let closed = TcpAuth {
            cookie: None,
            ..acl.clone()
        };
        assert_eq!(closed.admit(local), Some(None));
        assert_eq!(closed.admit(far), None, "no cookie auth: refused");
        let anyone = TcpAuth {
            anonymous: true,
            ..closed
        };
        assert_eq!(anyone.admit(far), Some(None));
        assert_eq!(anyone.describe(), "anonymous");
        assert_eq!(
            acl.describe(),
            "1 allow-listed range(s), others need the cookie"
        );
    }
}
