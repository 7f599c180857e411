//! The native-protocol front-end: a unix socket in the runtime directory, one thread per
//! client, streams as graph nodes fed through shared-memory rings.
//!
//! This crate translates protocol requests into engine edits; it owns no mixing or
//! timing, and it asks the policy where new streams go.
//!
//! - [`Listener`], [`NativeServer`] and their options: here.
//! - `session`: one client's thread: hello, the request loop, `watch`.
//! - `streams`: playback and record streams over shared-memory rings.
//! - `callback`: callback (JACK-style) nodes.
//! - `introspect`: the status, timing and graph replies.
//! - `quantum`: the forced quantum and the quantum report.
//! - `restore`: stream restore (the policy's store) for native streams.
//! - `meta`: JACK metadata properties and port aliases, and the events watchers get.
//! - `rt`: the RT half, what the engine calls every cycle.
//!
//! The protocol is described in `docs/protocol.md`, callback clients in `docs/jack.md`.

mod callback;
mod introspect;
mod meta;
mod netstatus;
mod quantum;
mod restore;
mod rt;
mod rt_transport;
mod session;
mod streams;
mod transport;

use anyhow::{Context, Result, bail};
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::{CallbackConfig, CallbackStats, Engine, EngineError, NodeId};
use quaver_policy::Policy;
use quaver_protocol::callback::{CallbackShm, EventBell, SERVER_ERROR};
use quaver_protocol::message::{ErrorCode, Reply};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

/// Settings of the native front-end.
#[derive(Debug, Clone)]
pub struct NativeOptions {
    /// Most clients at once.
    pub max_clients: usize,
    /// Most streams per client.
    pub max_streams_per_client: usize,
    /// Resampler quality for streams whose rate differs from the engine's.
    pub resample_quality: ResampleQuality,
    /// Stream restore's entries, shared with the daemon's other front-ends; `None`: off.
    pub restore: Option<quaver_policy::restore::SharedStore>,
    /// Role ducking shared with the daemon's other front-ends; `None`: none.
    pub ducking: Option<quaver_policy::roles::SharedDucking>,
}

/// Settings of callback (JACK-style) clients.
#[derive(Debug, Clone)]
pub struct CallbackOptions {
    /// Fraction of the quantum period, from the cycle start, within which a
    /// synchronous client must answer.
    pub deadline: f64,
    /// Consecutive woken cycles answered late after which a client moves to
    /// asynchronous mode (0: never).
    pub async_after: u32,
    /// Milliseconds of unanswered cycles after which a client is taken as hung and moved
    /// to asynchronous mode (0: never).
    pub hung_ms: u32,
    /// Milliseconds of asynchronous answers all in time after which a client goes back
    /// to synchronous mode (0: never).
    pub recover_ms: u32,
    /// Most ports of one direction a callback node may reserve.
    pub max_ports: u32,
    /// Microseconds the RT thread may poll a client's completion before blocking.
    pub spin_us: u32,
    /// Every client asynchronous from its first cycle (jackd2's default mode).
    pub asynchronous: bool,
}

impl Default for CallbackOptions {
    fn default() -> Self {
        let c = CallbackConfig::default();
        CallbackOptions {
            deadline: c.deadline,
            async_after: c.async_after,
            hung_ms: c.hung_ms,
            recover_ms: c.recover_ms,
            max_ports: 256,
            spin_us: c.spin_us,
            asynchronous: c.asynchronous,
        }
    }
}

/// The listening socket plus the lock that makes it ours.
pub struct Listener {
    listener: UnixListener,
    socket_path: PathBuf,
    _lock: File,
    /// Whether the socket file is ours to remove (not when systemd bound it).
    owns_file: bool,
}

impl Listener {
    /// Creates the runtime directory (0700), takes its lock and binds the socket. Fails
    /// with a clear message when another quaverd already serves this directory.
    pub fn bind(runtime_dir: &Path) -> Result<Listener> {
        Listener::open(runtime_dir, None)
    }

    /// Like [`Listener::bind`] with a socket systemd already bound and listens on
    /// (socket activation); the socket file stays systemd's.
    pub fn adopt(runtime_dir: &Path, listener: UnixListener) -> Result<Listener> {
        Listener::open(runtime_dir, Some(listener))
    }

    fn open(runtime_dir: &Path, passed: Option<UnixListener>) -> Result<Listener> {
        quaver_protocol::paths::ensure_private_dir(runtime_dir)
            .with_context(|| format!("preparing runtime directory {}", runtime_dir.display()))?;
        let lock_path = runtime_dir.join("quaverd.lock");
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            let pid = std::fs::read_to_string(&lock_path).unwrap_or_default();
            bail!(
                "another quaverd (pid {}) already serves {}; stop it or pick another --runtime-dir",
                pid.trim(),
                runtime_dir.display()
            );
        }
        std::fs::write(&lock_path, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing {}", lock_path.display()))?;
        let socket_path = runtime_dir.join(quaver_protocol::paths::SOCKET_NAME);
        let owns_file = passed.is_none();
        let listener = match passed {
            Some(l) => l,
            None => {
                // We hold the lock, so a socket file left here belongs to a dead daemon.
                let _ = std::fs::remove_file(&socket_path);
                UnixListener::bind(&socket_path)
                    .with_context(|| format!("binding {}", socket_path.display()))?
            }
        };
        Ok(Listener {
            listener,
            socket_path,
            _lock: lock,
            owns_file,
        })
    }

    /// Path of the socket clients connect to.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if self.owns_file {
            let _ = std::fs::remove_file(&self.socket_path);
        }
    }
}

/// What the control side keeps of a connected client.
struct ClientEntry {
    name: String,
    pid: Option<u32>,
    /// Streams and callback nodes of this client.
    streams: Vec<NodeId>,
    /// Stream restore's kind and the channel map of each stream that has a kind.
    kinds: BTreeMap<NodeId, (String, quaver_dsp::ChannelMap)>,
    callbacks: BTreeMap<NodeId, CallbackEntry>,
}

/// What the control side keeps of a callback node.
struct CallbackEntry {
    stats: Arc<CallbackStats>,
    shm: Arc<CallbackShm>,
    wake: Arc<EventBell>,
    quantum: Option<u32>,
    /// The node's timebase-master token.
    transport_token: u64,
    transport: Arc<quaver_engine::rt::transport::TransportShared>,
}

impl CallbackEntry {
    /// Tells the client its node is gone and wakes it so it notices.
    fn retire(&self) {
        // A master that goes away loses the timebase, as in jackd2.
        let _ = self.transport.release_master(self.transport_token);
        self.shm.set_server_flags(SERVER_ERROR);
        self.wake.signal();
    }
}

/// State shared by every client thread.
pub struct NativeServer {
    engine: Engine,
    policy: Arc<Mutex<Policy>>,
    clients: Mutex<BTreeMap<u32, ClientEntry>>,
    next_client: AtomicU32,
    opts: NativeOptions,
    callbacks: CallbackOptions,
    /// Metadata properties, aliases, and the watchers' event hub.
    meta: Arc<meta::Meta>,
    /// The daemon's process facts for the `process` reply, set once at start.
    process: std::sync::OnceLock<quaver_protocol::message::ServerProcess>,
}

/// The protocol's error reply for an engine error.
fn engine_error(e: EngineError) -> Reply {
    let code = match &e {
        EngineError::NoSuchNode(_) => ErrorCode::NoSuchNode,
        EngineError::NoSuchPort(_) | EngineError::NoSuchLink(_) => ErrorCode::NoSuchPort,
        EngineError::Incompatible(_) => ErrorCode::Incompatible,
        EngineError::Invalid(_) => ErrorCode::BadRequest,
        EngineError::TooMany(_) => ErrorCode::TooMany,
        _ => ErrorCode::Internal,
    };
    Reply::error(code, e.to_string())
}

impl NativeServer {
    /// A server over `engine` routing with `policy`, with default callback settings.
    pub fn new(engine: Engine, policy: Arc<Mutex<Policy>>, opts: NativeOptions) -> Arc<Self> {
        Self::with_callback_options(engine, policy, opts, CallbackOptions::default())
    }

    /// A server with explicit callback-client settings.
    pub fn with_callback_options(
        engine: Engine,
        policy: Arc<Mutex<Policy>>,
        opts: NativeOptions,
        callbacks: CallbackOptions,
    ) -> Arc<Self> {
        let meta = meta::Meta::start(&engine);
        Arc::new(NativeServer {
            meta,
            engine,
            policy,
            clients: Mutex::new(BTreeMap::new()),
            next_client: AtomicU32::new(1),
            opts,
            callbacks,
            process: std::sync::OnceLock::new(),
        })
    }

    /// Sets what the `process` reply says about the daemon's process (once; later
    /// calls are ignored).
    pub fn set_process(&self, process: quaver_protocol::message::ServerProcess) {
        let _ = self.process.set(process);
    }

    /// The `process` reply: the facts set at start, or an error where the embedding
    /// program set none (tests' in-process servers).
    fn process_reply(&self) -> Reply {
        match self.process.get() {
            Some(p) => Reply::Process(p.clone()),
            None => Reply::error(
                ErrorCode::BadRequest,
                "this server does not report its process",
            ),
        }
    }

    /// Accepts clients forever on a thread of its own.
    pub fn spawn_accept(self: &Arc<Self>, listener: &Listener) -> Result<()> {
        let l = listener.listener.try_clone().context("cloning listener")?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("quaver-accept".into())
            .spawn(move || {
                for conn in l.incoming() {
                    match conn {
                        Ok(stream) => me.clone().start_client(stream),
                        Err(e) => tracing::warn!("accept failed: {e}"),
                    }
                }
            })
            .context("spawning accept thread")?;
        Ok(())
    }
}
