//! The native-protocol front-end: a unix socket in the runtime directory, one thread per
//! client, streams as graph nodes fed through shared-memory rings.
//!
//! This module translates protocol requests into engine edits; it owns no mixing or
//! timing, and it asks the policy where new streams go.

use anyhow::{Context, Result, bail};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::stream::{FrameSink, FrameSource, PlaybackAdapter, RecordAdapter, StreamFormat};
use quaver_engine::{
    Direction as PortDir, Engine, EngineError, NodeId, NodeKind, NodeSpec, RtOutcome,
};
use quaver_policy::{NodeView, Policy};
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
    streams: Vec<NodeId>,
}

/// State shared by every client thread.
pub struct NativeServer {
    engine: Engine,
    policy: Arc<Mutex<Policy>>,
    clients: Mutex<BTreeMap<u32, ClientEntry>>,
    next_client: AtomicU32,
    opts: NativeOptions,
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

fn peer_pid(stream: &UnixStream) -> Option<u32> {
    rustix::net::sockopt::socket_peercred(stream)
        .ok()
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
}

impl NativeServer {
    /// A server over `engine` routing with `policy`.
    pub fn new(engine: Engine, policy: Arc<Mutex<Policy>>, opts: NativeOptions) -> Arc<Self> {
        Arc::new(NativeServer {
            engine,
            policy,
            clients: Mutex::new(BTreeMap::new()),
            next_client: AtomicU32::new(1),
            opts,
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

    fn handle(&self, client: u32, req: Request) -> (Reply, Vec<OwnedFd>) {
        let none = Vec::new();
        match req {
            Request::Hello { .. } => (
                Reply::error(ErrorCode::BadRequest, "hello was already sent"),
                none,
            ),
            Request::Status => (Reply::Status(self.status()), none),
            Request::Timing => (Reply::Timing(self.timing()), none),
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
            .unwrap_or(2 * cfg.quantum_default)
            .max(1);
        let quantum = (1usize << (usize::BITS - 1 - (latency_engine / 2).max(1).leading_zeros()))
            .clamp(cfg.quantum_min, cfg.quantum_max);
        let to_stream =
            |frames: usize| (frames as u64 * p.rate as u64).div_ceil(rate as u64) as usize;
        let mut capacity = pow2_ceil(
            to_stream(latency_engine)
                .max(to_stream(2 * quantum))
                .max(64),
        );
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
            realtime: matches!(s.realtime, RtOutcome::Fifo(_)),
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
        TimingStats {
            rate: self.engine.rate(),
            quantum: self.engine.quantum() as u32,
            cycles: st.cycles.load(Relaxed),
            xruns: st.xruns.load(Relaxed),
            lateness_ns_log2: hist(&st.lateness_hist),
            busy_ns_log2: hist(&st.busy_hist),
            lateness_max_ns: st.lateness_max_ns.load(Relaxed),
            busy_max_ns: st.busy_ns_max.load(Relaxed),
        }
    }

    /// The graph reply.
    pub fn graph_info(&self) -> GraphInfo {
        let g = self.engine.graph();
        let rate = self.engine.rate() as f64;
        GraphInfo {
            nodes: g
                .nodes
                .values()
                .map(|n| NodeInfo {
                    id: n.id,
                    name: n.name.clone(),
                    kind: n.kind.as_str().into(),
                    description: n.description.clone(),
                    volume: n.volume,
                    mute: n.mute,
                    latency_ms: n.latency_frames.map(|f| f as f64 * 1000.0 / rate),
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
