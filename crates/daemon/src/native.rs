//! The native-protocol front-end: a unix socket in the runtime directory, one thread per
//! client, streams as graph nodes fed through shared-memory rings.
//!
//! This module translates protocol requests into engine edits; it owns no mixing or
//! timing, and it asks the policy where new streams go.

use anyhow::{Context, Result, bail};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_dsp::{ChannelPosition, Planar, PlanarMut};
use quaver_engine::callback::CallbackCycle;
use quaver_engine::stream::{FrameSink, FrameSource, PlaybackAdapter, RecordAdapter, StreamFormat};
use quaver_engine::{
    CallbackConfig, CallbackMode, CallbackNode, CallbackStats, CallbackTransport,
    Direction as PortDir, Engine, EngineError, NodeId, NodeKind, NodeSpec,
};
use quaver_policy::{NodeView, Policy};
use quaver_protocol::callback::{
    CLIENT_ACTIVE, CallbackGeometry, CallbackShm, CycleHeader, EventBell, SERVER_ERROR,
};
use quaver_protocol::framing::{FramedSocket, decode_json, encode_json};
use quaver_protocol::message::*;
use quaver_protocol::shm::{Doorbell, FLAG_CLIENT_DRAIN, FLAG_SERVER_STARTED, ShmRing};
use rustix::fd::{AsFd, OwnedFd};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
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
        }
    }
}

/// The listening socket plus the lock that makes it ours.
pub struct Listener {
    listener: UnixListener,
    socket_path: PathBuf,
    _lock: File,
}

impl Listener {
    /// Creates the runtime directory (0700), takes its lock and binds the socket. Fails
    /// with a clear message when another quaverd already serves this directory.
    pub fn bind(runtime_dir: &Path) -> Result<Listener> {
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
        // We hold the lock, so a socket file left here belongs to a dead daemon.
        let _ = std::fs::remove_file(&socket_path);
        let listener = UnixListener::bind(&socket_path)
            .with_context(|| format!("binding {}", socket_path.display()))?;
        Ok(Listener {
            listener,
            socket_path,
            _lock: lock,
        })
    }

    /// Path of the socket clients connect to.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket_path);
    }
}

struct ClientEntry {
    name: String,
    pid: Option<u32>,
    /// Streams and callback nodes of this client.
    streams: Vec<NodeId>,
    callbacks: BTreeMap<NodeId, CallbackEntry>,
}

/// What the control side keeps of a callback node.
struct CallbackEntry {
    stats: Arc<CallbackStats>,
    shm: Arc<CallbackShm>,
    wake: Arc<EventBell>,
    quantum: Option<u32>,
}

impl CallbackEntry {
    /// Tells the client its node is gone and wakes it so it notices.
    fn retire(&self) {
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
}

/// The engine's view of a callback client: its shared block and eventfds.
struct ShmCallback {
    shm: Arc<CallbackShm>,
    wake: Arc<EventBell>,
    done: EventBell,
    seq: u64,
}

impl CallbackTransport for ShmCallback {
    fn active(&self) -> bool {
        self.shm.client_flags() & CLIENT_ACTIVE != 0
    }
    fn completed(&self) -> bool {
        self.shm.done_seq() == self.seq
    }
    fn start(&mut self, c: &CallbackCycle, inputs: Planar<'_>) {
        for i in 0..inputs.channels() {
            self.shm.write_input(i, inputs.channel(i));
        }
        self.seq += 1;
        self.shm.publish_cycle(&CycleHeader {
            seq: self.seq,
            cycle: c.cycle,
            position: c.position,
            time_ns: c.time_ns,
            period_ns: c.period_ns,
            deadline_ns: c.deadline_ns,
            frames: c.frames,
        });
        self.wake.signal();
    }
    fn wait_completed(&mut self, deadline_ns: u64) -> bool {
        loop {
            if self.completed() {
                return true;
            }
            // A signal left over from a late answer wakes us early; re-check.
            if !self.done.wait_until(deadline_ns) {
                return self.completed();
            }
        }
    }
    fn read_outputs(&mut self, outputs: &mut PlanarMut<'_>) {
        for o in 0..outputs.channels() {
            self.shm.read_output(o, outputs.channel_mut(o));
        }
    }
    fn report(&mut self, xruns: u64, mode: CallbackMode) {
        self.shm.set_status(xruns, mode as u32);
    }
    fn client_times(&self) -> Option<(u64, u64)> {
        self.shm.client_times(self.seq)
    }
}

/// Reads a playback stream's frames from its shared-memory ring.
struct ShmSource {
    ring: ShmRing,
    bell: Arc<Doorbell>,
    xruns_reported: u32,
}

impl FrameSource for ShmSource {
    fn available(&self) -> usize {
        self.ring.readable()
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        self.ring.read(out)
    }
    fn draining(&self) -> bool {
        self.ring.flags() & FLAG_CLIENT_DRAIN != 0
    }
    fn report(&mut self, played: u64, delay: u32, xruns: u32, started: bool) {
        self.ring.set_played_pos(played);
        self.ring.set_delay_frames(delay);
        while self.xruns_reported < xruns {
            self.ring.add_xrun();
            self.xruns_reported += 1;
        }
        if started && self.ring.flags() & FLAG_SERVER_STARTED == 0 {
            self.ring.set_flags(FLAG_SERVER_STARTED);
        }
        // One eventfd write per cycle wakes a client blocked on a full ring or a drain.
        self.bell.ring();
    }
}

/// Writes a record stream's frames into its shared-memory ring.
struct ShmSink {
    ring: ShmRing,
    bell: Arc<Doorbell>,
    overruns_reported: u32,
}

impl FrameSink for ShmSink {
    fn write(&mut self, frames: &[f32]) -> usize {
        self.ring.write(frames)
    }
    fn report(&mut self, overruns: u32, delay: u32) {
        self.ring.set_delay_frames(delay);
        while self.overruns_reported < overruns {
            self.ring.add_xrun();
            self.overruns_reported += 1;
        }
        if self.ring.flags() & FLAG_SERVER_STARTED == 0 {
            self.ring.set_flags(FLAG_SERVER_STARTED);
        }
        self.bell.ring();
    }
}

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

fn pow2_ceil(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// True if the client closed its end (checked without reading: a watching client
/// sends nothing, so any readable state means EOF or garbage, and either ends it).
fn peer_gone(sock: &FramedSocket) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        sock.get_ref(),
        rustix::event::PollFlags::IN | rustix::event::PollFlags::RDHUP,
    )];
    matches!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0)
}

fn peer_pid(stream: &UnixStream) -> Option<u32> {
    rustix::net::sockopt::socket_peercred(stream)
        .ok()
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
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
        Arc::new(NativeServer {
            engine,
            policy,
            clients: Mutex::new(BTreeMap::new()),
            next_client: AtomicU32::new(1),
            opts,
            callbacks,
        })
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

    fn start_client(self: Arc<Self>, stream: UnixStream) {
        let id = self.next_client.fetch_add(1, Ordering::Relaxed);
        let pid = peer_pid(&stream);
        let full = self.clients.lock().expect("poisoned").len() >= self.opts.max_clients;
        if full {
            tracing::warn!(
                "refusing client {id} (pid {pid:?}): {} clients connected",
                self.opts.max_clients
            );
            let mut sock = FramedSocket::new(stream);
            let msg = format!("too many clients (limit {})", self.opts.max_clients);
            let _ = send_reply(&mut sock, 0, Reply::error(ErrorCode::TooMany, msg), &[]);
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("quaver-client-{id}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                self.client_loop(id, pid, stream);
                self.drop_client(id);
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread for client {id}: {e}");
        }
    }

    fn drop_client(&self, id: u32) {
        let entry = self.clients.lock().expect("poisoned").remove(&id);
        if let Some(c) = entry {
            for cb in c.callbacks.values() {
                cb.retire();
            }
            for node in &c.streams {
                if let Err(e) = self.engine.remove_node(*node) {
                    tracing::warn!("removing stream {node} of client {id}: {e}");
                }
            }
            tracing::info!(
                "client {id} ({}) left; {} stream(s) removed",
                c.name,
                c.streams.len()
            );
        }
    }

    fn client_loop(&self, id: u32, pid: Option<u32>, stream: UnixStream) {
        let mut sock = FramedSocket::new(stream);
        let mut hello = false;
        loop {
            let (bytes, _fds) = match sock.recv() {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("client {id}: {e}; disconnecting");
                    return;
                }
            };
            let env: RequestEnvelope = match decode_json(&bytes) {
                Ok(env) => env,
                Err(e) => {
                    tracing::warn!("client {id}: bad request: {e}");
                    let reply = Reply::error(ErrorCode::BadRequest, e.to_string());
                    if send_reply(&mut sock, 0, reply, &[]).is_err() {
                        return;
                    }
                    continue;
                }
            };
            let (reply, fds) = if let Err(why) = env.request.validate() {
                (Reply::error(ErrorCode::BadRequest, why), Vec::new())
            } else if !hello {
                match env.request {
                    Request::Hello {
                        version,
                        client_name,
                    } => {
                        if version != PROTOCOL_VERSION {
                            let msg = format!(
                                "protocol version {version} is not supported; this server speaks {PROTOCOL_VERSION}"
                            );
                            let _ = send_reply(
                                &mut sock,
                                env.id,
                                Reply::error(ErrorCode::UnsupportedVersion, msg),
                                &[],
                            );
                            return;
                        }
                        hello = true;
                        tracing::info!("client {id} connected: {client_name} (pid {pid:?})");
                        self.clients.lock().expect("poisoned").insert(
                            id,
                            ClientEntry {
                                name: client_name,
                                pid,
                                streams: Vec::new(),
                                callbacks: BTreeMap::new(),
                            },
                        );
                        (
                            Reply::Welcome {
                                server_version: env!("CARGO_PKG_VERSION").to_string(),
                                protocol_version: PROTOCOL_VERSION,
                            },
                            Vec::new(),
                        )
                    }
                    _ => (
                        Reply::error(ErrorCode::BadRequest, "the first request must be hello"),
                        Vec::new(),
                    ),
                }
            } else if env.request == Request::Watch {
                if send_reply(&mut sock, env.id, Reply::Ok, &[]).is_err() {
                    return;
                }
                self.watch_loop(id, &mut sock);
                return;
            } else {
                self.handle(id, env.request)
            };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            if let Err(e) = send_reply(&mut sock, env.id, reply, &borrowed) {
                tracing::debug!("client {id}: send failed: {e}");
                return;
            }
        }
    }

    /// Serves a connection that asked to `watch`: one event per graph or device change
    /// until the client goes away (noticed at the next send, or by a hangup poll).
    fn watch_loop(&self, client: u32, sock: &mut FramedSocket) {
        use quaver_engine::GraphEvent as E;
        let rx = self.engine.subscribe();
        tracing::debug!("client {client} watches the graph");
        loop {
            // Wake up now and then only to notice a client that left while nothing
            // changed; an event is sent at once.
            let e = match rx.recv_timeout(std::time::Duration::from_secs(5)) {
                Ok(e) => e,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if peer_gone(sock) {
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            let (event, node) = match e {
                E::NodeAdded(n) => ("node_added", Some(n)),
                E::NodeRemoved(n) => ("node_removed", Some(n)),
                E::NodeChanged(n) => ("node_changed", Some(n)),
                E::LinksChanged => ("links_changed", None),
                E::Suspended(true) => ("suspended", None),
                E::Suspended(false) => ("resumed", None),
                E::DeviceGone(_) => ("device_gone", None),
            };
            let reply = Reply::Event(GraphEvent {
                event: event.into(),
                node,
            });
            if send_reply(sock, 0, reply, &[]).is_err() {
                return;
            }
        }
    }

    fn handle(&self, client: u32, req: Request) -> (Reply, Vec<OwnedFd>) {
        let none = Vec::new();
        match req {
            Request::Hello { .. } => (
                Reply::error(ErrorCode::BadRequest, "hello was already sent"),
                none,
            ),
            Request::Watch => (Reply::Ok, none),
            Request::Status => (Reply::Status(self.status()), none),
            Request::Timing => (Reply::Timing(Box::new(self.timing())), none),
            Request::Graph => (Reply::Graph(self.graph_info()), none),
            Request::CreateStream(p) => match self.create_stream(client, &p) {
                Ok((created, fds)) => (Reply::StreamCreated(created), fds),
                Err(reply) => (reply, none),
            },
            Request::DestroyStream { node } => {
                let owned = {
                    let mut clients = self.clients.lock().expect("poisoned");
                    let c = clients.get_mut(&client).expect("registered at hello");
                    let before = c.streams.len();
                    c.streams.retain(|&n| n != node);
                    if let Some(cb) = c.callbacks.remove(&node) {
                        cb.retire();
                    }
                    before != c.streams.len()
                };
                if !owned {
                    let msg = format!("node {node} is not a stream of this client");
                    return (Reply::error(ErrorCode::NoSuchNode, msg), none);
                }
                match self.engine.remove_node(node) {
                    Ok(()) => (Reply::Ok, none),
                    Err(e) => (engine_error(e), none),
                }
            }
            Request::Link { output, input } => match self.engine.link(&output, &input) {
                Ok(_) => (Reply::Ok, none),
                Err(e) => (engine_error(e), none),
            },
            Request::Unlink { output, input } => match self.engine.unlink(&output, &input) {
                Ok(_) => (Reply::Ok, none),
                Err(e) => (engine_error(e), none),
            },
            Request::CreateCallback(p) => match self.create_callback(client, &p) {
                Ok((created, fds)) => (Reply::CallbackCreated(created), fds),
                Err(reply) => (reply, none),
            },
            Request::AddPort {
                node,
                direction,
                name,
                channel,
            } => {
                if let Err(r) = self.check_callback(client, node) {
                    return (r, none);
                }
                let dir = match direction {
                    PortDirection::In => PortDir::In,
                    PortDirection::Out => PortDir::Out,
                };
                let channel = channel.unwrap_or_else(|| {
                    let g = self.engine.graph();
                    let n = g.nodes.get(&node).map_or(0, |n| match dir {
                        PortDir::In => n.inputs.len(),
                        PortDir::Out => n.outputs.len(),
                    });
                    ChannelPosition::Aux(n as u16)
                });
                match self.engine.add_port(node, dir, Some(&name), channel) {
                    Ok(id) => {
                        let g = self.engine.graph();
                        (Reply::PortAdded(callback_port(&g.ports[&id])), none)
                    }
                    Err(e) => (engine_error(e), none),
                }
            }
            Request::RemovePort { node, port } => {
                if let Err(r) = self.check_callback(client, node) {
                    return (r, none);
                }
                match self.engine.remove_port(node, port) {
                    Ok(()) => (Reply::Ok, none),
                    Err(e) => (engine_error(e), none),
                }
            }
            Request::SetQuantum { node, quantum } => {
                {
                    let mut clients = self.clients.lock().expect("poisoned");
                    let c = clients.get_mut(&client).expect("registered at hello");
                    if !c.streams.contains(&node) {
                        let msg = format!("node {node} is not a node of this client");
                        return (Reply::error(ErrorCode::NoSuchNode, msg), none);
                    }
                    if let Some(cb) = c.callbacks.get_mut(&node) {
                        cb.quantum = quantum;
                    }
                }
                // A quantum Q is the latency request the engine turns back into Q.
                let latency = quantum.map(|q| {
                    self.engine
                        .latency_for_quantum(q as usize)
                        .min(u32::MAX as usize) as u32
                });
                match self.engine.set_latency(node, latency) {
                    Ok(()) => (Reply::Ok, none),
                    Err(e) => (engine_error(e), none),
                }
            }
            Request::SetVolume { node, volume, mute } => {
                match self.engine.set_volume(&node, volume, mute) {
                    Ok(()) => (Reply::Ok, none),
                    Err(e) => (engine_error(e), none),
                }
            }
        }
    }

    fn create_stream(
        &self,
        client: u32,
        p: &StreamParams,
    ) -> Result<(StreamCreated, Vec<OwnedFd>), Reply> {
        {
            let clients = self.clients.lock().expect("poisoned");
            if clients[&client].streams.len() >= self.opts.max_streams_per_client {
                let msg = format!(
                    "stream limit of {} per client reached",
                    self.opts.max_streams_per_client
                );
                return Err(Reply::error(ErrorCode::TooMany, msg));
            }
        }
        let graph = self.engine.graph();
        let views: Vec<NodeView> = graph
            .nodes
            .values()
            .map(|n| NodeView {
                name: n.name.clone(),
                kind: n.kind.as_str().to_string(),
            })
            .collect();
        let requested = p.target.as_deref().or(p.monitor_of.as_deref());
        let target = {
            let policy = self.policy.lock().expect("poisoned");
            match p.direction {
                Direction::Playback => policy.playback_target(requested, &views),
                Direction::Record => policy.record_target(requested, &views),
            }
        };
        let target_node = match &target {
            Some(t) => Some(graph.node_by_name(t).ok_or_else(|| {
                Reply::error(ErrorCode::NoSuchNode, format!("no node named '{t}'"))
            })?),
            None => None,
        };
        // The node's ports take the target's layout so the adapter does the up/down-mix
        // once, with proper coefficients, instead of links dropping channels.
        let node_map = match (target_node, p.direction) {
            (Some(n), Direction::Playback) if !n.inputs.is_empty() => {
                ChannelMap(n.inputs.iter().map(|id| graph.ports[id].channel).collect())
            }
            (Some(n), Direction::Record) if !n.outputs.is_empty() => {
                ChannelMap(n.outputs.iter().map(|id| graph.ports[id].channel).collect())
            }
            (Some(n), dir) => {
                let what = if dir == Direction::Playback {
                    "input"
                } else {
                    "output"
                };
                let msg = format!("node '{}' has no {what} ports", n.name);
                return Err(Reply::error(ErrorCode::Incompatible, msg));
            }
            (None, _) => p.channels.clone(),
        };
        let cfg = self.engine.config();
        let rate = self.engine.rate();
        let latency_engine = p
            .latency_ms
            .map(|ms| (ms * rate as f64 / 1000.0).round() as usize)
            .unwrap_or_else(|| self.engine.latency_for_quantum(cfg.quantum_default))
            .max(1);
        let quantum = self.engine.quantum_for_latency(latency_engine);
        let to_stream =
            |frames: usize| (frames as u64 * p.rate as u64).div_ceil(rate as u64) as usize;
        let mut capacity = pow2_ceil(
            to_stream(latency_engine)
                .max(to_stream(2 * quantum))
                .max(64),
        );
        if p.direction == Direction::Record {
            // A capture ring's size is headroom, not latency (the client reads as soon
            // as a cycle lands): give a slow reader about a second before it overruns.
            capacity = capacity.max(pow2_ceil(p.rate as usize));
        }
        if p.rate != rate {
            // The resampler pulls input in chunks; leave room so it never starves.
            capacity *= 2;
        }
        let ch = p.channels.len() as u32;
        let (ring, memfd) = ShmRing::create(ch, capacity as u32).map_err(|e| {
            Reply::error(ErrorCode::Internal, format!("creating shared memory: {e}"))
        })?;
        let bell =
            Arc::new(Doorbell::new().map_err(|e| {
                Reply::error(ErrorCode::Internal, format!("creating eventfd: {e}"))
            })?);
        let bell_fd = rustix::io::dup(bell.as_fd())
            .map_err(|e| Reply::error(ErrorCode::Internal, format!("dup eventfd: {e}")))?;
        let format = StreamFormat {
            rate: p.rate,
            channels: p.channels.clone(),
        };
        let internal = |e: quaver_dsp::resample::ResampleError| {
            Reply::error(ErrorCode::Internal, e.to_string())
        };
        let name = p.name.replace(':', "_");
        let mut spec = match p.direction {
            Direction::Playback => {
                let mut s = NodeSpec::new(&name, NodeKind::PlaybackStream);
                s.outputs = node_map.clone();
                s
            }
            Direction::Record => {
                let mut s = NodeSpec::new(&name, NodeKind::RecordStream);
                s.inputs = node_map.clone();
                s
            }
        };
        spec.description = format!(
            "{} stream of client {client}",
            if p.direction == Direction::Playback {
                "playback"
            } else {
                "record"
            }
        );
        spec.latency_frames = Some(latency_engine as u32);
        spec.volume = p.volume.unwrap_or(1.0);
        spec.owner = Some(client);
        let processor: Box<dyn quaver_engine::Processor> = match p.direction {
            Direction::Playback => Box::new(
                PlaybackAdapter::new(
                    ShmSource {
                        ring,
                        bell: bell.clone(),
                        xruns_reported: 0,
                    },
                    &format,
                    &node_map,
                    rate,
                    cfg.quantum_max,
                    capacity / 2,
                    self.opts.resample_quality,
                )
                .map(|a| a.with_rewind(self.engine.rewind_capacity(), node_map.len()))
                .map_err(internal)?,
            ),
            Direction::Record => Box::new(
                RecordAdapter::new(
                    ShmSink {
                        ring,
                        bell: bell.clone(),
                        overruns_reported: 0,
                    },
                    &format,
                    &node_map,
                    rate,
                    cfg.quantum_max,
                    self.opts.resample_quality,
                )
                .map_err(internal)?,
            ),
        };
        let id = self
            .engine
            .add_node_linked(spec, Some(processor), target.as_deref())
            .map_err(engine_error)?;
        let node_name = self.engine.node_name(id).unwrap_or_default();
        self.clients
            .lock()
            .expect("poisoned")
            .get_mut(&client)
            .expect("registered at hello")
            .streams
            .push(id);
        tracing::info!(
            "client {client}: {:?} stream {node_name} ({} Hz, {}) → {}",
            p.direction,
            p.rate,
            p.channels,
            target.as_deref().unwrap_or("unlinked")
        );
        Ok((
            StreamCreated {
                node: id,
                node_name,
                capacity_frames: capacity as u32,
                channels: ch,
                rate: p.rate,
                device_rate: rate,
                quantum: self.engine.quantum() as u32,
            },
            vec![memfd, bell_fd],
        ))
    }

    /// Ok if `node` is a callback node of `client`.
    fn check_callback(&self, client: u32, node: NodeId) -> Result<(), Reply> {
        let clients = self.clients.lock().expect("poisoned");
        if clients[&client].callbacks.contains_key(&node) {
            Ok(())
        } else {
            let msg = format!("node {node} is not a callback node of this client");
            Err(Reply::error(ErrorCode::NoSuchNode, msg))
        }
    }

    fn create_callback(
        &self,
        client: u32,
        p: &CallbackParams,
    ) -> Result<(CallbackCreated, Vec<OwnedFd>), Reply> {
        {
            let clients = self.clients.lock().expect("poisoned");
            if clients[&client].streams.len() >= self.opts.max_streams_per_client {
                let msg = format!(
                    "stream limit of {} per client reached",
                    self.opts.max_streams_per_client
                );
                return Err(Reply::error(ErrorCode::TooMany, msg));
            }
        }
        let opts = &self.callbacks;
        let max_in = p.max_inputs.unwrap_or(0).max(p.inputs.len() as u32);
        let max_out = p.max_outputs.unwrap_or(0).max(p.outputs.len() as u32);
        if max_in > opts.max_ports || max_out > opts.max_ports {
            let msg = format!(
                "{max_in} inputs / {max_out} outputs exceed the limit of {} ports per direction",
                opts.max_ports
            );
            return Err(Reply::error(ErrorCode::TooMany, msg));
        }
        let cfg = self.engine.config();
        let rate = self.engine.rate();
        let geo = CallbackGeometry {
            inputs: max_in,
            outputs: max_out,
            max_frames: cfg.quantum_max as u32,
        };
        let internal = |what: &str, e: std::io::Error| {
            Reply::error(ErrorCode::Internal, format!("{what}: {e}"))
        };
        let (shm, memfd) =
            CallbackShm::create(geo, rate).map_err(|e| internal("creating shared memory", e))?;
        let shm = Arc::new(shm);
        let wake = Arc::new(EventBell::new().map_err(|e| internal("creating eventfd", e))?);
        let done = EventBell::new().map_err(|e| internal("creating eventfd", e))?;
        let wake_fd =
            rustix::io::dup(wake.as_fd()).map_err(|e| internal("dup eventfd", e.into()))?;
        let done_fd =
            rustix::io::dup(done.as_fd()).map_err(|e| internal("dup eventfd", e.into()))?;
        let positions = |ports: &[PortParams]| {
            ChannelMap(
                ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.channel.unwrap_or(ChannelPosition::Aux(i as u16)))
                    .collect(),
            )
        };
        let mut spec = NodeSpec::new(&p.name.replace(':', "_"), NodeKind::Filter);
        spec.description = format!("callback client of client {client}");
        spec.inputs = positions(&p.inputs);
        spec.outputs = positions(&p.outputs);
        spec.input_names = p.inputs.iter().map(|p| p.name.clone()).collect();
        spec.output_names = p.outputs.iter().map(|p| p.name.clone()).collect();
        spec.max_inputs = max_in as usize;
        spec.max_outputs = max_out as usize;
        spec.keep_awake = true;
        spec.owner = Some(client);
        // JACK programs assume power-of-two buffer sizes (FFT blocks, partitioned
        // convolution), as JACK itself gives them.
        spec.pow2_quantum = true;
        spec.latency_frames = p.quantum.map(|q| {
            self.engine
                .latency_for_quantum(q as usize)
                .min(u32::MAX as usize) as u32
        });
        let (node, stats) = CallbackNode::new(
            ShmCallback {
                shm: shm.clone(),
                wake: wake.clone(),
                done,
                seq: 0,
            },
            CallbackConfig {
                deadline: opts.deadline,
                async_after: opts.async_after,
                hung_ms: opts.hung_ms,
                recover_ms: opts.recover_ms,
            },
        );
        let id = self
            .engine
            .add_node(spec, Some(Box::new(node)))
            .map_err(engine_error)?;
        let g = self.engine.graph();
        let n = &g.nodes[&id];
        let ports = n
            .inputs
            .iter()
            .chain(&n.outputs)
            .map(|pid| callback_port(&g.ports[pid]))
            .collect();
        {
            let mut clients = self.clients.lock().expect("poisoned");
            let c = clients.get_mut(&client).expect("registered at hello");
            c.streams.push(id);
            c.callbacks.insert(
                id,
                CallbackEntry {
                    stats,
                    shm,
                    wake,
                    quantum: p.quantum,
                },
            );
        }
        tracing::info!(
            "client {client}: callback node {} ({max_in} in / {max_out} out reserved{})",
            n.name,
            p.quantum
                .map(|q| format!(", asks for quantum {q}"))
                .unwrap_or_default()
        );
        Ok((
            CallbackCreated {
                node: id,
                node_name: n.name.clone(),
                rate,
                quantum: self.engine.quantum() as u32,
                max_frames: geo.max_frames,
                max_inputs: max_in,
                max_outputs: max_out,
                ports,
                deadline: opts.deadline,
                async_after: opts.async_after,
                hung_ms: opts.hung_ms,
                recover_ms: opts.recover_ms,
            },
            vec![memfd, wake_fd, done_fd],
        ))
    }

    /// Callback details of every callback node, for the graph reply.
    fn callback_infos(&self) -> BTreeMap<NodeId, CallbackNodeInfo> {
        use std::sync::atomic::Ordering::Relaxed;
        let clients = self.clients.lock().expect("poisoned");
        clients
            .values()
            .flat_map(|c| c.callbacks.iter())
            .map(|(id, cb)| {
                let s = &cb.stats;
                let woken = s.woken.load(Relaxed);
                (
                    *id,
                    CallbackNodeInfo {
                        mode: s.mode().as_str().into(),
                        active: cb.shm.client_flags() & CLIENT_ACTIVE != 0,
                        woken,
                        xruns: s.xruns.load(Relaxed),
                        xrun_events: s.xrun_events.load(Relaxed),
                        caught_up: s.caught_up.load(Relaxed),
                        async_cause: s.async_cause().as_str().into(),
                        resynced: s.resynced.load(Relaxed),
                        skipped: s.skipped.load(Relaxed),
                        wait_avg_ns: s.wait_ns_total.load(Relaxed) / woken.max(1),
                        wait_max_ns: s.wait_ns_max.load(Relaxed),
                        quantum: cb.quantum,
                    },
                )
            })
            .collect()
    }

    /// The status reply.
    pub fn status(&self) -> StatusInfo {
        let s = self.engine.status();
        let clients = self.clients.lock().expect("poisoned");
        StatusInfo {
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: PROTOCOL_VERSION,
            rate: s.rate,
            quantum: s.quantum as u32,
            quantum_min: s.quantum_min as u32,
            quantum_max: s.quantum_max as u32,
            realtime: s.realtime.is_realtime(),
            scheduling: Box::new(s.realtime.to_string()),
            cycles: s.cycles,
            xruns: s.xruns,
            devices: s
                .devices
                .iter()
                .map(|d| quaver_protocol::message::DeviceStatus {
                    name: d.info.name.clone(),
                    description: d.info.description.clone(),
                    state: if d.gone {
                        "gone"
                    } else if d.closed {
                        "closed"
                    } else if d.suspended {
                        "suspended"
                    } else {
                        "running"
                    }
                    .into(),
                    rate: d.info.rate,
                    playback_channels: d.info.playback.as_ref().map(|m| m.len() as u32),
                    capture_channels: d.info.capture.as_ref().map(|m| m.len() as u32),
                    underruns: d.underruns,
                    overruns: d.overruns,
                    wakeups: d.wakeups,
                    margin_frames: d.margin_frames,
                    margin_changes: d.margin_changes,
                })
                .collect(),
            clients: clients
                .iter()
                .map(|(id, c)| ClientInfo {
                    id: *id,
                    name: c.name.clone(),
                    pid: c.pid,
                    streams: c.streams.clone(),
                })
                .collect(),
        }
    }

    /// The timing reply.
    pub fn timing(&self) -> TimingStats {
        use std::sync::atomic::Ordering::Relaxed;
        let st = self.engine.stats();
        let hist = |h: &[std::sync::atomic::AtomicU64]| -> Vec<u64> {
            let v: Vec<u64> = h.iter().map(|b| b.load(Relaxed)).collect();
            let used = v.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
            v[..used].to_vec()
        };
        let callbacks: std::collections::BTreeSet<NodeId> = {
            let clients = self.clients.lock().expect("poisoned");
            clients
                .values()
                .flat_map(|c| c.callbacks.keys().copied())
                .collect()
        };
        let timing = self.engine.node_timing();
        let interval_ns = timing.first().map_or(0, |t| t.interval_ns);
        let nodes = timing
            .into_iter()
            .map(|t| NodeTimingInfo {
                id: t.id,
                kind: if callbacks.contains(&t.id) {
                    "client".into()
                } else {
                    t.kind.as_str().into()
                },
                name: t.name,
                quantum: t.quantum as u32,
                quantum_requested: t.quantum_requested.map(|q| q as u32),
                rate: t.rate,
                cycles: t.cycles,
                wait_avg_ns: t.wait_avg_ns,
                wait_max_ns: t.wait_max_ns,
                busy_avg_ns: t.busy_avg_ns,
                busy_max_ns: t.busy_max_ns,
                rt_avg_ns: t.rt_avg_ns,
                rt_max_ns: t.rt_max_ns,
                xruns: t.xruns,
            })
            .collect();
        TimingStats {
            rate: self.engine.rate(),
            quantum: self.engine.quantum() as u32,
            cycles: st.cycles.load(Relaxed),
            xruns: st.xruns.load(Relaxed),
            lateness_ns_log2: hist(&st.lateness_hist),
            busy_ns_log2: hist(&st.busy_hist),
            lateness_max_ns: st.lateness_max_ns.load(Relaxed),
            busy_max_ns: st.busy_ns_max.load(Relaxed),
            nodes,
            interval_ns,
            suspended: st.suspended.load(Relaxed),
            overdue_cycles: st.overdue_cycles.load(Relaxed),
            overdue_runs: st.overdue_runs.load(Relaxed),
        }
    }

    /// The graph reply.
    pub fn graph_info(&self) -> GraphInfo {
        let g = self.engine.graph();
        let rate = self.engine.rate() as f64;
        let mut callbacks = self.callback_infos();
        // The published atomics, not `Engine::status()`: that copies every device's
        // description and takes a lock, on every graph request.
        let stats = self.engine.stats();
        GraphInfo {
            nodes: g
                .nodes
                .values()
                .map(|n| NodeInfo {
                    id: n.id,
                    name: n.name.clone(),
                    kind: if callbacks.contains_key(&n.id) {
                        "client".into()
                    } else {
                        n.kind.as_str().into()
                    },
                    callback: callbacks.remove(&n.id),
                    description: n.description.clone(),
                    volume: n.volume,
                    mute: n.mute,
                    latency_ms: n.latency_frames.map(|f| f as f64 * 1000.0 / rate),
                    playback_lead_frames: n
                        .device
                        .filter(|_| n.kind == NodeKind::DeviceSink)
                        .and_then(|i| stats.devices.get(i))
                        .map(|d| d.margin_frames.load(std::sync::atomic::Ordering::Relaxed)),
                    suspended: n.suspended,
                    ports: n
                        .inputs
                        .iter()
                        .chain(&n.outputs)
                        .map(|id| {
                            let p = &g.ports[id];
                            PortInfo {
                                id: p.id,
                                name: p.name.clone(),
                                direction: match p.direction {
                                    PortDir::In => PortDirection::In,
                                    PortDir::Out => PortDirection::Out,
                                },
                                channel: p.channel.name(),
                            }
                        })
                        .collect(),
                })
                .collect(),
            links: g
                .links
                .values()
                .map(|l| {
                    let (o, i) = (&g.ports[&l.output], &g.ports[&l.input]);
                    LinkInfo {
                        id: l.id,
                        output_node: g.nodes[&o.node].name.clone(),
                        output_port: o.name.clone(),
                        input_node: g.nodes[&i.node].name.clone(),
                        input_port: i.name.clone(),
                    }
                })
                .collect(),
        }
    }
}

fn callback_port(p: &quaver_engine::graph::Port) -> CallbackPort {
    CallbackPort {
        id: p.id,
        name: p.name.clone(),
        direction: match p.direction {
            PortDir::In => PortDirection::In,
            PortDir::Out => PortDirection::Out,
        },
        index: p.index as u32,
        channel: p.channel.name(),
    }
}

fn send_reply(
    sock: &mut FramedSocket,
    id: u64,
    reply: Reply,
    fds: &[rustix::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    let bytes = encode_json(&ReplyEnvelope { id, reply })
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    sock.send(&bytes, fds)
}
