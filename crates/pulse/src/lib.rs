//! quaver's PulseAudio front-end: libpulse applications (paplay, pactl, browsers, games)
//! talk to quaverd as if it were PulseAudio.
//!
//! The front-end speaks the PulseAudio native protocol (versions 13–35) on a unix socket
//! and translates its world into graph nodes through the engine's control API only:
//! playback streams become `PlaybackStream` nodes built from
//! [`quaver_engine::stream::PlaybackAdapter`] over an f32 ring ([`transport`]), record
//! streams `RecordStream` nodes over [`quaver_engine::stream::RecordAdapter`]; sinks and
//! sources are the engine's device nodes, a sink's monitor is its outputs. Routing comes
//! from the daemon's shared [`quaver_policy::Policy`]. See `docs/pulse.md`.
//!
//! - [`wire`]: packet framing (our own descriptor handling, seek modes kept).
//! - [`tagcheck`]: bounds check of tagstructs before the codec decodes them.
//! - [`convert`], [`bufattr`]: formats, channel maps, volumes; buffer-attribute rules.
//! - [`transport`]: the RT half of a stream.
//! - `conn`: one client connection; `ioloop`: the one thread that serves them all;
//!   `dispatch`: engine events → subscription events.
//! - [`listener`]: the socket.

pub mod bufattr;
mod conn;
pub mod convert;
mod dispatch;
mod export;
mod introspect;
mod ioloop;
pub mod listener;
pub mod modules;
pub mod restore;
mod scache;
mod server;
mod shm;
pub mod srb;
pub mod tagcheck;
pub mod tcp;
pub mod transport;
pub mod wire;

pub use listener::{PulseListener, default_socket_path};
/// The wire codec, re-exported for tests and tools that speak the protocol directly.
pub use pulseaudio;
pub use server::{PulseOptions, RestoreMode};
pub use tcp::TcpOptions;

use anyhow::{Context, Result};
use quaver_engine::Engine;
use quaver_policy::Policy;
use server::{ClientRec, ConnHandle, Server, State};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// A running PulseAudio front-end. Dropping it removes the socket; connections end with
/// the process.
pub struct PulseServer {
    listener: PulseListener,
    server: Arc<Server>,
    tcp_addr: Option<std::net::SocketAddr>,
}

impl PulseServer {
    /// Starts accepting PulseAudio clients on `listener`.
    pub fn start(
        engine: Engine,
        policy: Arc<Mutex<Policy>>,
        listener: PulseListener,
        opts: PulseOptions,
        tcp: Option<TcpOptions>,
    ) -> Result<PulseServer> {
        let cookie = {
            let mut b = [0u8; 4];
            rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())
                .map(|_| u32::from_ne_bytes(b))
                .unwrap_or_else(|_| std::process::id())
        };
        let restore = match &opts.stream_restore {
            RestoreMode::Off => None,
            RestoreMode::Memory => Some(Mutex::new(restore::Store::memory())),
            RestoreMode::File(path) => Some(Mutex::new(restore::Store::open(path))),
        };
        let server = Arc::new(Server {
            // Subscribe before anything else looks at the graph so no event is missed.
            engine: engine.clone(),
            policy,
            opts,
            state: Mutex::new(State::default()),
            next_client: AtomicU32::new(0),
            cookie,
            restore,
        });
        let events = engine.subscribe();
        let s = server.clone();
        std::thread::Builder::new()
            .name("quaver-pulse-events".into())
            .spawn(move || dispatch::run(s, events))
            .context("spawning the pulse event thread")?;
        let io = Arc::new(ioloop::IoShared::new().context("creating the pulse I/O bell")?);
        let (s, i) = (server.clone(), io.clone());
        std::thread::Builder::new()
            .name("quaver-pulse-io".into())
            .spawn(move || {
                if let Err(e) = ioloop::run(s, i) {
                    tracing::error!(
                        "pulse I/O thread stopped: {e}; PulseAudio clients are no longer served"
                    );
                }
            })
            .context("spawning the pulse I/O thread")?;
        let l = listener
            .listener
            .try_clone()
            .context("cloning the pulse listener")?;
        let (s, i) = (server.clone(), io.clone());
        std::thread::Builder::new()
            .name("quaver-pulse-accept".into())
            .spawn(move || {
                for conn in l.incoming() {
                    match conn {
                        Ok(sock) => accept(&s, &i, tcp::Sock::Unix(sock)),
                        Err(e) => tracing::warn!("pulse accept failed: {e}"),
                    }
                }
            })
            .context("spawning the pulse accept thread")?;
        let tcp_addr = match tcp {
            Some(t) => Some(spawn_tcp(&server, &io, t)?),
            None => None,
        };
        Ok(PulseServer {
            listener,
            server,
            tcp_addr,
        })
    }

    /// The TCP address served, if TCP is on.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp_addr
    }

    /// The socket path clients connect to.
    pub fn socket_path(&self) -> &std::path::Path {
        self.listener.path()
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.server.lock().clients.len()
    }
}

/// Frames `data` as a client's byte stream and decodes every control packet the way a
/// connection does (bounds check, then the codec at the oldest and newest protocol
/// versions). For fuzzing: it must never panic, hang or allocate beyond the packet caps.
#[doc(hidden)]
pub fn decode_stream_for_fuzzing(mut data: &[u8]) {
    let mut reader = wire::PacketReader::new();
    // The first byte decides whether shared-memory frames were negotiated.
    if let Some((&first, rest)) = data.split_first() {
        if first & 1 == 1 {
            reader.enable_shm();
        }
        data = rest;
    }
    while !data.is_empty() {
        let Ok((used, packet)) = reader.feed(data) else {
            return;
        };
        data = &data[used..];
        if let Some(wire::Packet::Control(body)) = packet
            && tagcheck::check(&body).is_ok()
        {
            for version in [
                pulseaudio::protocol::MIN_VERSION,
                pulseaudio::protocol::MAX_VERSION,
            ] {
                let mut cur = std::io::Cursor::new(&body[..]);
                let _ = pulseaudio::protocol::Command::read_tag_prefixed(&mut cur, version);
            }
            // EXTENSION payloads go to stream restore's own parser.
            if body.len() >= 10
                && body[1..5] == (pulseaudio::protocol::CommandTag::Extension as u32).to_be_bytes()
                && let Ok((_, _, at)) = restore::split_target(&body[10..])
            {
                let _ = restore::Request::parse(&body[10 + at..]);
            }
        }
    }
}

/// Binds the TCP listener and accepts on a thread of its own.
fn spawn_tcp(
    srv: &Arc<Server>,
    io: &Arc<ioloop::IoShared>,
    t: TcpOptions,
) -> Result<std::net::SocketAddr> {
    let l = std::net::TcpListener::bind(&t.listen)
        .with_context(|| format!("binding PulseAudio TCP address {}", t.listen))?;
    let addr = l.local_addr().context("TCP address")?;
    let cookie = Arc::new(t.cookie);
    let (s, i) = (srv.clone(), io.clone());
    std::thread::Builder::new()
        .name("quaver-pulse-tcp".into())
        .spawn(move || {
            for conn in l.incoming() {
                match conn {
                    Ok(stream) => {
                        let peer = stream.peer_addr().map(|a| a.ip());
                        let allowed = peer
                            .as_ref()
                            .is_ok_and(|ip| t.allow.iter().any(|n| n.contains(*ip)));
                        tracing::debug!(
                            "pulse TCP connection from {peer:?} ({})",
                            if allowed {
                                "allow-listed"
                            } else {
                                "needs the cookie"
                            }
                        );
                        accept(
                            &s,
                            &i,
                            tcp::Sock::Tcp {
                                stream,
                                cookie: (!allowed).then(|| cookie.clone()),
                            },
                        );
                    }
                    Err(e) => tracing::warn!("pulse TCP accept failed: {e}"),
                }
            }
        })
        .context("spawning the pulse TCP thread")?;
    Ok(addr)
}

fn peer_pid(sock: &tcp::Sock) -> Option<u32> {
    match sock {
        tcp::Sock::Unix(s) => rustix::net::sockopt::socket_peercred(s)
            .ok()
            .map(|c| c.pid.as_raw_nonzero().get() as u32),
        tcp::Sock::Tcp { .. } => None,
    }
}

fn accept(srv: &Arc<Server>, io: &ioloop::IoShared, sock: tcp::Sock) {
    let pid = peer_pid(&sock);
    if srv.lock().clients.len() >= srv.opts.max_clients {
        tracing::warn!(
            "refusing PulseAudio client (pid {pid:?}): {} clients connected",
            srv.opts.max_clients
        );
        return;
    }
    let index = srv.next_client.fetch_add(1, Ordering::Relaxed);
    let handle = Arc::new(ConnHandle {
        client: index,
        mask: AtomicU32::new(0),
        restore_events: std::sync::atomic::AtomicBool::new(false),
        queue: Mutex::new(VecDeque::new()),
        bell: io.bell.clone(),
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
                        introspect::cstr(&pid.to_string()),
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
    io.adopt(sock, handle);
}
