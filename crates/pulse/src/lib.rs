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
//! The source tree, bottom layer first (a file imports only from layers below it or
//! beside it):
//!
//! - `memstat`: the memory-block counts STAT reports (imports nothing of ours).
//! - `wire/`: packet framing ([`wire`]), the tagstruct bounds check ([`tagcheck`]),
//!   conversions ([`convert`]) and buffer-attribute rules ([`bufattr`]).
//! - `rt/`: the RT half of a stream ([`transport`], [`rtwire`], [`intake`]) and the
//!   state it shares with the I/O thread; its `mod.rs` states the RT rules.
//! - `io/`: sockets and shared memory ([`listener`], `accept`, [`tcp`], `shm`,
//!   `export`, [`srb`]).
//! - `ext/`: the stream- and device-restore extensions ([`restore`], [`devrestore`]).
//! - `state`: the front-end's shared state (clients, streams, modules, samples) and the
//!   graph queries on it; `introspect` builds PulseAudio's records from it, `scache`
//!   plays cached samples, `dispatch` turns engine events into subscription events.
//! - `conn/`: one client connection; `commands/`: its commands, one file per group;
//!   `ioloop`: the one thread that serves every connection.
//! - [`modules`]: LOAD_MODULE, one file per module kind (`modules/pipe/` for the pipe
//!   sink and source).

mod cards;
mod commands;
mod conn;
mod dispatch;
mod ext;
mod introspect;
mod io;
mod ioloop;
mod memstat;
pub mod modules;
mod netprops;
pub use modules::pipe;
mod rt;
mod scache;
mod state;
pub mod wire;

pub use ext::{devrestore, restore};
pub use io::{listener, srb, tcp};
pub use listener::{PulseListener, default_socket_path};
/// The wire codec, re-exported for tests and tools that speak the protocol directly.
pub use pulseaudio;
pub use rt::{intake, rtwire, transport};
pub use state::PulseOptions;
pub use tcp::TcpOptions;
pub use wire::{bufattr, convert, tagcheck};

use anyhow::{Context, Result};
use quaver_engine::Engine;
use quaver_policy::Policy;
use state::{Server, State};
use std::sync::atomic::AtomicU32;
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
        let restore = opts.stream_restore.clone();
        let io = Arc::new(io::shared::IoShared::new().context("creating the pulse I/O bell")?);
        let server = Arc::new(Server {
            // Subscribe before anything else looks at the graph so no event is missed.
            engine: engine.clone(),
            policy,
            opts,
            state: Mutex::new(State::default()),
            next_client: AtomicU32::new(0),
            cookie,
            restore,
            io: io.clone(),
            mem: Arc::default(),
        });
        if let Some(t) = engine.config().suspend_timeout {
            // Listed as PulseAudio lists it, loaded at start; `timeout` is whole
            // seconds there, so a timeout in milliseconds shows no argument.
            let argument = if t.subsec_nanos() == 0 {
                format!("timeout={}", t.as_secs())
            } else {
                String::new()
            };
            let mut st = server.lock();
            st.modules.insert(
                modules::FIRST_LOADED,
                modules::ModuleRec::suspend_on_idle(&argument),
            );
            st.next_module = modules::FIRST_LOADED + 1;
        }
        // What later changes of the default are told against.
        server.check_defaults();
        if let Some(reg) = &server.opts.cards {
            cards::listen(reg, &server);
        }
        let events = engine.subscribe();
        let s = server.clone();
        std::thread::Builder::new()
            .name("quaver-pulse-events".into())
            .spawn(move || dispatch::run(s, events))
            .context("spawning the pulse event thread")?;
        cards::spawn_port_events(&server).context("spawning the pulse port events thread")?;
        let (s, i) = (server.clone(), io);
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
        io::accept::spawn(
            &server,
            io::accept::Listen::Unix(l),
            listener.path().display().to_string(),
            "quaver-pulse-accept",
            None,
        )?;
        let tcp_addr = match tcp {
            Some(t) => {
                let l = std::net::TcpListener::bind(&t.listen)
                    .with_context(|| format!("binding PulseAudio TCP address {}", t.listen))?;
                let addr = l.local_addr().context("TCP address")?;
                let auth = io::accept::TcpAuth {
                    anonymous: false,
                    allow: t.allow,
                    cookie: Some(Arc::new(t.cookie)),
                };
                io::accept::spawn(
                    &server,
                    io::accept::Listen::Tcp(l, auth),
                    addr.to_string(),
                    "quaver-pulse-tcp",
                    None,
                )?;
                Some(addr)
            }
            None => None,
        };
        for line in &server.opts.modules {
            let line = line.trim();
            let (name, argument) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let said = line.to_string();
            // A tunnel answers later, from its own thread: its remote may be slow.
            let done: modules::LoadDone = Box::new(move |r| {
                if let Err(e) = r {
                    tracing::error!(
                        "[pulse] modules: '{said}' did not load ({e}); see the lines above"
                    );
                }
            });
            if let Err(e) = modules::load_or_start(&server, name, argument.trim(), done) {
                // The others still load and clients are served: the log says which line.
                tracing::error!(
                    "[pulse] modules: '{line}' did not load ({e}); see the lines above"
                );
            }
        }
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

    /// Unloads every module clients loaded, newest first, as PulseAudio does on exit:
    /// listeners stop, and the FIFOs and sockets they made are removed instead of being
    /// left in the runtime directory. Call before the engine shuts down.
    pub fn unload_modules(&self) {
        let loaded = std::mem::take(&mut self.server.lock().modules);
        for (idx, m) in loaded.into_iter().rev() {
            modules::unload(&self.server, &m);
            tracing::debug!("pulse: unloaded module #{idx} ({}) on shutdown", m.name);
        }
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
            // EXTENSION payloads go to the extensions' own parsers.
            if body.len() >= 10
                && body[1..5] == (pulseaudio::protocol::CommandTag::Extension as u32).to_be_bytes()
                && let Ok((_, _, at)) = restore::split_target(&body[10..])
            {
                let _ = restore::Request::parse(&body[10 + at..]);
                for version in [
                    pulseaudio::protocol::MIN_VERSION,
                    pulseaudio::protocol::MAX_VERSION,
                ] {
                    let _ = devrestore::Request::parse(&body[10 + at..], version);
                }
            }
        }
    }
}
