//! TEST FIXTURE — a tiny fake quaverd for exercising the client library.
//!
//! It is not the real server and implements no mixing or routing: it answers
//! Hello/Status/Graph/Link/SetVolume/DestroyStream with canned replies, and for
//! CreateStream it makes a real `ShmRing` + `Doorbell` and runs a "device" thread
//! that plays the other end of the ring on a timer, the way the real server's
//! real-time thread would. Behaviour knobs in [`Mode`] simulate a stalled server.

#![allow(dead_code)]

use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use quaver_protocol::shm::{FLAG_CLIENT_DRAIN, FLAG_SERVER_STARTED};
use quaver_protocol::{
    Direction, Doorbell, ErrorCode, FramedSocket, GraphInfo, PROTOCOL_VERSION, Reply,
    ReplyEnvelope, Request, RequestEnvelope, ShmRing, StatusInfo, StreamCreated,
};

/// How the fake server misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plays and captures normally.
    Normal,
    /// Creates streams but never touches the rings (a hung server).
    Stalled,
    /// Consumes playback but never reports it as played (drain never finishes).
    NeverPlayed,
    /// Sends a reply with a stale id before every real reply.
    StrayReplies,
    /// Answers Hello with protocol version 99.
    WrongVersion,
    /// Starts a playback stream only once the ring is full (a large prebuffer).
    Prebuffer,
}

/// Counters shared between the fixture's threads and the test.
#[derive(Default)]
pub struct Stats {
    /// Every playback sample the fake device consumed, in order.
    pub played: Mutex<Vec<f32>>,
    /// Highest fill level seen in a playback ring before consuming.
    pub max_fill: AtomicUsize,
    /// Underruns while the client was not draining.
    pub underruns: AtomicU64,
    /// Streams currently alive.
    pub live_streams: AtomicUsize,
    /// Client names from Hello.
    pub clients: Mutex<Vec<String>>,
}

pub struct FakeServer {
    pub path: PathBuf,
    pub stats: Arc<Stats>,
    _dir: tempfile::TempDir,
}

/// Frames the fake device moves per cycle.
pub const QUANTUM: u32 = 256;
/// Device rate reported to clients.
pub const DEVICE_RATE: u32 = 48_000;

impl FakeServer {
    pub fn start(mode: Mode) -> FakeServer {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("native");
        let listener = UnixListener::bind(&path).unwrap();
        let stats = Arc::new(Stats::default());
        let st = stats.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let st = st.clone();
                std::thread::spawn(move || serve(conn, mode, st));
            }
        });
        FakeServer {
            path,
            stats,
            _dir: dir,
        }
    }
}

struct StreamHandle {
    node: u32,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: UnixStream, mode: Mode, stats: Arc<Stats>) {
    let mut sock = FramedSocket::new(conn);
    let mut streams: Vec<StreamHandle> = Vec::new();
    let mut next_node = 100u32;
    loop {
        let env: RequestEnvelope = match sock.recv_json() {
            Ok(Some((env, _fds))) => env,
            Ok(None) => return,
            Err(_) => return,
        };
        if mode == Mode::StrayReplies {
            let stray = ReplyEnvelope {
                id: env.id + 1000,
                reply: Reply::error(ErrorCode::Internal, "stray reply the client must ignore"),
            };
            sock.send_json(&stray, &[]).unwrap();
        }
        let mut fds_to_send = None;
        let reply = if let Err(msg) = env.request.validate() {
            Reply::error(ErrorCode::BadRequest, msg)
        } else {
            match env.request {
                Request::Hello {
                    version,
                    client_name,
                } => {
                    stats.clients.lock().unwrap().push(client_name);
                    if version != PROTOCOL_VERSION {
                        Reply::error(ErrorCode::UnsupportedVersion, "unsupported version")
                    } else {
                        Reply::Welcome {
                            server_version: "fake-0".into(),
                            protocol_version: if mode == Mode::WrongVersion {
                                99
                            } else {
                                PROTOCOL_VERSION
                            },
                        }
                    }
                }
                Request::Status => Reply::Status(StatusInfo {
                    server_version: "fake-0".into(),
                    protocol_version: PROTOCOL_VERSION,
                    rate: DEVICE_RATE,
                    quantum: QUANTUM,
                    quantum_min: 64,
                    quantum_max: 1024,
                    realtime: false,
                    scheduling: Box::default(),
                    cycles: 1,
                    xruns: 0,
                    devices: vec![],
                    clients: vec![],
                }),
                Request::Timing => Reply::error(ErrorCode::BadRequest, "no timing here"),
                Request::Process => Reply::error(ErrorCode::BadRequest, "no process here"),
                Request::Graph => Reply::Graph(GraphInfo {
                    nodes: vec![],
                    links: vec![],
                }),
                Request::Link { output, .. } | Request::Unlink { output, .. } => {
                    if output.starts_with("null") {
                        Reply::Ok
                    } else {
                        Reply::error(ErrorCode::NoSuchPort, format!("no port '{output}'"))
                    }
                }
                Request::SetVolume { .. } | Request::SetFilterControl { .. } => Reply::Ok,
                Request::CreateCallback(_)
                | Request::AddPort { .. }
                | Request::RemovePort { .. }
                | Request::SetQuantum { .. }
                | Request::TransportStart
                | Request::TransportStop
                | Request::TransportLocate { .. }
                | Request::TransportQuery
                | Request::SetTimebase { .. }
                | Request::ReleaseTimebase { .. }
                | Request::SetSyncTimeout { .. }
                | Request::ForceQuantum { .. }
                | Request::Quantum
                | Request::SetFreewheel { .. }
                | Request::Watch => Reply::error(ErrorCode::BadRequest, "no callback clients here"),
                Request::SetProperty { .. }
                | Request::GetProperties { .. }
                | Request::RemoveProperty { .. }
                | Request::RemoveAllProperties
                | Request::SetAlias { .. }
                | Request::UnsetAlias { .. }
                | Request::Aliases
                | Request::SetPortLatency { .. }
                | Request::PortLatencies
                | Request::SetSessionCallback { .. }
                | Request::HasSessionCallback { .. }
                | Request::SessionNotify { .. }
                | Request::SessionReply { .. } => {
                    Reply::error(ErrorCode::BadRequest, "no metadata here")
                }
                Request::DestroyStream { node } => {
                    match streams.iter().position(|s| s.node == node) {
                        Some(i) => {
                            streams.remove(i);
                            stats.live_streams.fetch_sub(1, Ordering::Relaxed);
                            Reply::Ok
                        }
                        None => Reply::error(ErrorCode::NoSuchNode, format!("no stream {node}")),
                    }
                }
                Request::CreateStream(p) => {
                    let channels = p.channels.len() as u32;
                    let latency = p.latency_ms.unwrap_or(100.0);
                    let frames = (latency * p.rate as f64 / 1000.0).ceil() as u32;
                    let capacity = frames.max(QUANTUM).next_power_of_two();
                    let (ring, ring_fd) = ShmRing::create(channels, capacity).unwrap();
                    // Set before the reply so tests see a deterministic state.
                    if !matches!(mode, Mode::Stalled | Mode::Prebuffer) {
                        ring.set_flags(FLAG_SERVER_STARTED);
                    }
                    let bell = Doorbell::new().unwrap();
                    let bell_fd = bell.as_fd().try_clone_to_owned().unwrap();
                    next_node += 1;
                    let node = next_node;
                    let stop = Arc::new(AtomicBool::new(false));
                    let thread = {
                        let stop = stop.clone();
                        let stats = stats.clone();
                        let dir = p.direction;
                        let rate = p.rate;
                        std::thread::spawn(move || device(ring, bell, dir, rate, mode, stop, stats))
                    };
                    streams.push(StreamHandle {
                        node,
                        stop,
                        thread: Some(thread),
                    });
                    stats.live_streams.fetch_add(1, Ordering::Relaxed);
                    fds_to_send = Some((ring_fd, bell_fd));
                    Reply::StreamCreated(StreamCreated {
                        node,
                        node_name: p.name,
                        capacity_frames: capacity,
                        channels,
                        rate: p.rate,
                        device_rate: DEVICE_RATE,
                        quantum: QUANTUM,
                    })
                }
            }
        };
        let out = ReplyEnvelope { id: env.id, reply };
        match &fds_to_send {
            Some((a, b)) => sock.send_json(&out, &[a.as_fd(), b.as_fd()]).unwrap(),
            None => sock.send_json(&out, &[]).unwrap(),
        }
    }
}

/// The fake device: one quantum per period, like the real server's RT cycle.
fn device(
    ring: ShmRing,
    bell: Doorbell,
    dir: Direction,
    rate: u32,
    mode: Mode,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
) {
    if mode == Mode::Stalled {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
        return;
    }
    let ch = ring.channels() as usize;
    let period = Duration::from_secs_f64(QUANTUM as f64 / rate as f64);
    let mut buf = vec![0.0f32; QUANTUM as usize * ch];
    let mut produced = 0u64;
    let mut played = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(period);
        match dir {
            Direction::Playback => {
                if ring.flags() & FLAG_SERVER_STARTED == 0 {
                    let full = ring.readable() == ring.capacity_frames() as usize;
                    if full || ring.flags() & FLAG_CLIENT_DRAIN != 0 {
                        ring.set_flags(FLAG_SERVER_STARTED);
                    } else {
                        bell.ring();
                        continue;
                    }
                } else {
                    stats.max_fill.fetch_max(ring.readable(), Ordering::Relaxed);
                }
                let n = ring.read(&mut buf);
                if n < QUANTUM as usize
                    && ring.flags() & FLAG_CLIENT_DRAIN == 0
                    && ring.write_pos() > 0
                {
                    stats.underruns.fetch_add(1, Ordering::Relaxed);
                    ring.add_xrun();
                }
                stats
                    .played
                    .lock()
                    .unwrap()
                    .extend_from_slice(&buf[..n * ch]);
                // Pretend the device output is one quantum behind the ring.
                ring.set_delay_frames(QUANTUM);
                if mode != Mode::NeverPlayed {
                    played += n as u64;
                    ring.set_played_pos(played);
                }
            }
            Direction::Record => {
                ring.set_flags(FLAG_SERVER_STARTED);
                for (i, f) in buf.chunks_mut(ch).enumerate() {
                    f.fill((produced + i as u64) as f32);
                }
                produced += QUANTUM as u64;
                let n = ring.write(&buf);
                if n < QUANTUM as usize {
                    ring.add_xrun();
                }
            }
        }
        bell.ring();
    }
}
