//! Client library for quaverd's native protocol (v1).
//!
//! [`Connection`] speaks the JSON control protocol; [`PlaybackStream`] and
//! [`RecordStream`] move audio through the shared-memory ring the server hands
//! out with each stream. Every blocking call is bounded by a timeout so that a
//! hung or stopped server turns into an error instead of a hang.

#![warn(missing_docs)]

pub mod callback;
pub mod peers;
mod quantum;

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quaver_protocol::shm::{FLAG_CLIENT_DRAIN, FLAG_SERVER_ERROR, FLAG_SERVER_STARTED};
use quaver_protocol::{CallbackParams, GraphEvent};
use quaver_protocol::{
    Direction, Doorbell, ErrorCode, FrameError, FramedSocket, GraphInfo, PROTOCOL_VERSION,
    ProtocolError, Reply, ReplyEnvelope, Request, RequestEnvelope, ShmError, ShmRing, StatusInfo,
    StreamCreated, StreamParams, TimingStats, paths,
};

pub use quaver_protocol;

/// How long a control request may wait for its reply by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stream call may wait without the server making progress by default.
pub const DEFAULT_STREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// Everything that can go wrong talking to quaverd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens on the socket.
    #[error("no quaver server at {} (is quaverd running?)", path.display())]
    NoServer {
        /// The socket path tried.
        path: PathBuf,
    },
    /// Connecting failed for another reason (e.g. permissions).
    #[error("cannot connect to quaver server at {}: {source}", path.display())]
    Connect {
        /// The socket path tried.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Framing or JSON failure on the control socket.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The server refused the request.
    #[error("{message}")]
    Server {
        /// Machine-readable reason.
        code: ErrorCode,
        /// The server's explanation.
        message: String,
    },
    /// The server speaks another protocol version.
    #[error("server speaks protocol version {server}, this client speaks {client}")]
    VersionMismatch {
        /// Server's version.
        server: u32,
        /// Our version.
        client: u32,
    },
    /// The server's reply made no sense for the request.
    #[error("bad reply from server: {0}")]
    BadReply(String),
    /// The server closed the connection.
    #[error("the quaver server closed the connection")]
    Disconnected,
    /// The server made no progress in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// How long we waited without progress.
        after: Duration,
    },
    /// Stream parameters failed validation before being sent.
    #[error("invalid stream parameters: {0}")]
    InvalidParams(String),
    /// A call argument was unusable (e.g. a buffer that is not whole frames).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The ring memfd from the server was unusable.
    #[error("cannot use the stream's shared memory: {0}")]
    Shm(#[from] ShmError),
    /// The server flagged the stream as failed.
    #[error("the server stopped this stream (device gone, stream killed or ring corrupt)")]
    StreamFailed,
    /// The ring's positions are inconsistent; a buggy server.
    #[error("the stream's shared ring is corrupt")]
    Corrupt,
    /// Another OS error.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

/// Result with [`ClientError`].
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// A control connection to quaverd.
#[derive(Debug)]
pub struct Connection {
    sock: FramedSocket,
    next_id: u64,
    path: PathBuf,
    server_version: String,
    request_timeout: Option<Duration>,
}

impl Connection {
    /// Connects to `path` (or [`paths::default_socket_path`]) and says hello.
    pub fn connect(path: Option<&Path>, client_name: &str) -> Result<Connection> {
        let path = path.map_or_else(paths::default_socket_path, Path::to_path_buf);
        let stream = match UnixStream::connect(&path) {
            Ok(s) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Err(ClientError::NoServer { path });
            }
            Err(source) => return Err(ClientError::Connect { path, source }),
        };
        stream.set_read_timeout(Some(DEFAULT_REQUEST_TIMEOUT))?;
        stream.set_write_timeout(Some(DEFAULT_REQUEST_TIMEOUT))?;
        let mut conn = Connection {
            sock: FramedSocket::new(stream),
            next_id: 1,
            path,
            server_version: String::new(),
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
        };
        let reply = conn.request(Request::Hello {
            version: PROTOCOL_VERSION,
            client_name: client_name.to_string(),
        })?;
        match reply.0 {
            Reply::Welcome {
                server_version,
                protocol_version,
            } => {
                if protocol_version != PROTOCOL_VERSION {
                    return Err(ClientError::VersionMismatch {
                        server: protocol_version,
                        client: PROTOCOL_VERSION,
                    });
                }
                conn.server_version = server_version;
                Ok(conn)
            }
            other => Err(unexpected("hello", &other)),
        }
    }

    /// The socket this connection uses.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A duplicate of the control socket, only for `poll`ing for `POLLRDHUP` (the
    /// server went away). Never read from or write to it: that would corrupt the
    /// framing of this connection.
    pub fn hangup_fd(&self) -> Result<OwnedFd> {
        use std::os::fd::AsFd;
        Ok(self.sock.get_ref().as_fd().try_clone_to_owned()?)
    }

    /// quaverd's version string from the handshake.
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// Sets how long a request waits for its reply (`None` = forever).
    pub fn set_request_timeout(&mut self, timeout: Option<Duration>) -> Result<()> {
        self.sock.get_ref().set_read_timeout(timeout)?;
        self.sock.get_ref().set_write_timeout(timeout)?;
        self.request_timeout = timeout;
        Ok(())
    }

    /// Sends any request and returns the reply and attached fds; an `Error` reply
    /// becomes [`ClientError::Server`].
    pub fn request(&mut self, request: Request) -> Result<(Reply, Vec<OwnedFd>)> {
        let id = self.next_id;
        self.next_id += 1;
        let env = RequestEnvelope { id, request };
        self.sock
            .send_json(&env, &[])
            .map_err(|e| self.map_timeout(e, "the server to accept a request"))?;
        loop {
            let got = self
                .sock
                .recv_json::<ReplyEnvelope>()
                .map_err(|e| self.map_timeout(e, "a reply from the server"))?;
            let Some((reply, fds)) = got else {
                return Err(ClientError::Disconnected);
            };
            // v1 servers answer in order and send nothing unsolicited; a stray id
            // (e.g. a late reply to a request that timed out) is skipped, and its
            // fds are closed by dropping them. A request the server could not parse
            // (e.g. one it is too old to know) is answered by an error with id 0.
            let unparsed = reply.id == 0 && matches!(reply.reply, Reply::Error { .. });
            if reply.id != id && !unparsed {
                continue;
            }
            return match reply.reply {
                Reply::Error { code, message } => Err(ClientError::Server { code, message }),
                r => Ok((r, fds)),
            };
        }
    }

    fn map_timeout(&self, e: ProtocolError, what: &'static str) -> ClientError {
        match &e {
            ProtocolError::Frame(f) if f.is_retryable() => ClientError::Timeout {
                what,
                after: self.request_timeout.unwrap_or_default(),
            },
            ProtocolError::Frame(FrameError::Io(io))
                if matches!(
                    io.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                ClientError::Disconnected
            }
            _ => ClientError::Protocol(e),
        }
    }

    /// Sends a request whose only successful answer is `Ok`.
    fn request_ok(&mut self, request: Request) -> Result<()> {
        let kind = request.kind();
        match self.request(request)?.0 {
            Reply::Ok => Ok(()),
            other => Err(unexpected(kind, &other)),
        }
    }

    /// Server-wide status.
    pub fn status(&mut self) -> Result<StatusInfo> {
        match self.request(Request::Status)?.0 {
            Reply::Status(s) => Ok(s),
            other => Err(unexpected("status", &other)),
        }
    }

    /// Timing statistics of the server's real-time thread.
    pub fn timing(&mut self) -> Result<TimingStats> {
        match self.request(Request::Timing)?.0 {
            Reply::Timing(t) => Ok(*t),
            other => Err(unexpected("timing", &other)),
        }
    }

    /// The processing graph.
    pub fn graph(&mut self) -> Result<GraphInfo> {
        match self.request(Request::Graph)?.0 {
            Reply::Graph(g) => Ok(g),
            other => Err(unexpected("graph", &other)),
        }
    }

    /// Links an output (`node` or `node:port`) to an input.
    pub fn link(&mut self, output: &str, input: &str) -> Result<()> {
        self.request_ok(Request::Link {
            output: output.into(),
            input: input.into(),
        })
    }

    /// Removes the link(s) between an output and an input.
    pub fn unlink(&mut self, output: &str, input: &str) -> Result<()> {
        self.request_ok(Request::Unlink {
            output: output.into(),
            input: input.into(),
        })
    }

    /// Sets a node's linear volume and/or mute; `None` leaves that setting alone.
    pub fn set_volume(
        &mut self,
        node: &str,
        volume: Option<f32>,
        mute: Option<bool>,
    ) -> Result<()> {
        let req = Request::SetVolume {
            node: node.into(),
            volume,
            mute,
        };
        req.validate().map_err(ClientError::InvalidArgument)?;
        self.request_ok(req)
    }

    /// Changes control `control` of filter `index` (from 0) in the chain on sink
    /// `node` to `value`; the filter ramps or crossfades to it.
    pub fn set_filter_control(
        &mut self,
        node: &str,
        index: u32,
        control: &str,
        value: f64,
    ) -> Result<()> {
        let req = Request::SetFilterControl {
            node: node.into(),
            index,
            control: control.into(),
            value,
        };
        req.validate().map_err(ClientError::InvalidArgument)?;
        self.request_ok(req)
    }

    /// Creates a playback stream (`params.direction` must be `Playback`).
    pub fn create_playback(&mut self, params: StreamParams) -> Result<PlaybackStream> {
        let s = self.create_stream(params, Direction::Playback)?;
        let info = &s.info;
        let cap = info.capacity_frames as u64;
        // Queue no more than the requested latency: the ring may be bigger (power of
        // two), but filling it would add latency the user did not ask for. Never
        // below one quantum, or the server would run dry every cycle.
        let max_queued = match s.latency_ms {
            Some(ms) => {
                let latency = (ms * info.rate as f64 / 1000.0).ceil() as u64;
                let quantum = (info.quantum as u64 * info.rate as u64)
                    .div_ceil(info.device_rate.max(1) as u64);
                latency.max(quantum).clamp(1, cap)
            }
            None => cap,
        };
        Ok(PlaybackStream {
            ring: s.ring,
            bell: s.bell,
            info: s.info,
            max_queued: max_queued as usize,
            timeout: DEFAULT_STREAM_TIMEOUT,
        })
    }

    /// Creates a record stream (`params.direction` must be `Record`).
    pub fn create_record(&mut self, params: StreamParams) -> Result<RecordStream> {
        let s = self.create_stream(params, Direction::Record)?;
        Ok(RecordStream {
            ring: s.ring,
            bell: s.bell,
            info: s.info,
            timeout: DEFAULT_STREAM_TIMEOUT,
        })
    }

    fn create_stream(&mut self, params: StreamParams, direction: Direction) -> Result<NewStream> {
        if params.direction != direction {
            return Err(ClientError::InvalidParams(format!(
                "direction is {:?} but a {direction:?} stream was requested",
                params.direction
            )));
        }
        params.validate().map_err(ClientError::InvalidParams)?;
        let channels = params.channels.len() as u32;
        let latency_ms = params.latency_ms;
        let (reply, fds) = self.request(Request::CreateStream(params))?;
        let info = match reply {
            Reply::StreamCreated(info) => info,
            other => return Err(unexpected("create_stream", &other)),
        };
        let node = info.node;
        match open_stream(info, fds, channels) {
            Ok((info, ring, bell)) => Ok(NewStream {
                info,
                ring,
                bell,
                latency_ms,
            }),
            Err(e) => {
                // The server has a stream we cannot use; do not leave it behind.
                let _ = self.destroy_stream(node);
                Err(e)
            }
        }
    }

    /// Destroys a stream (or callback node) created on this connection.
    pub fn destroy_stream(&mut self, node: u32) -> Result<()> {
        self.request_ok(Request::DestroyStream { node })
    }

    /// Creates a callback client node; activate it with
    /// [`callback::CallbackClient::activate`] (or run a process loop of your own).
    pub fn create_callback(&mut self, params: CallbackParams) -> Result<callback::CallbackClient> {
        params.validate().map_err(ClientError::InvalidParams)?;
        let (reply, fds) = self.request(Request::CreateCallback(params))?;
        let info = match reply {
            Reply::CallbackCreated(info) => info,
            other => return Err(unexpected("create_callback", &other)),
        };
        let node = info.node;
        match callback::CallbackClient::open(info, fds, self.sock.get_ref()) {
            Ok(c) => Ok(c),
            Err(e) => {
                let _ = self.destroy_stream(node);
                Err(e)
            }
        }
    }

    /// Turns this connection into a stream of graph and device events (the server
    /// then reads no more requests from it; use another connection for those).
    pub fn watch(mut self) -> Result<GraphWatcher> {
        self.request_ok(Request::Watch)?;
        Ok(GraphWatcher { sock: self.sock })
    }

    /// Asks for a quantum (frames per cycle) for a node of this connection, or
    /// withdraws the request with `None`. The server honours the smallest request
    /// within its bounds; callback clients see the result in each cycle's frames.
    pub fn set_quantum(&mut self, node: u32, quantum: Option<u32>) -> Result<()> {
        let req = Request::SetQuantum { node, quantum };
        req.validate().map_err(ClientError::InvalidArgument)?;
        self.request_ok(req)
    }
}

/// Graph and device change events from a connection that asked to
/// [`Connection::watch`]. Poll its fd for readability to wait on it with other fds.
#[derive(Debug)]
pub struct GraphWatcher {
    sock: FramedSocket,
}

impl GraphWatcher {
    /// The next event, waiting at most `timeout` (`None`: forever); `Ok(None)` on
    /// timeout, `Err(Disconnected)` once the server closed the connection.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<GraphEvent>> {
        use std::os::fd::AsFd;
        if !quaver_protocol::framing::poll_fd(
            self.sock.get_ref().as_fd(),
            rustix::event::PollFlags::IN,
            timeout,
        )? {
            return Ok(None);
        }
        loop {
            // The server writes whole frames; once readable, the rest follows at once.
            let got = self.sock.recv_json::<ReplyEnvelope>()?;
            let Some((env, _fds)) = got else {
                return Err(ClientError::Disconnected);
            };
            match env.reply {
                Reply::Event(e) => return Ok(Some(e)),
                _ => continue,
            }
        }
    }
}

impl std::os::fd::AsFd for GraphWatcher {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.get_ref().as_fd()
    }
}

struct NewStream {
    info: StreamCreated,
    ring: ShmRing,
    bell: Doorbell,
    latency_ms: Option<f64>,
}

fn open_stream(
    info: StreamCreated,
    fds: Vec<OwnedFd>,
    channels: u32,
) -> Result<(StreamCreated, ShmRing, Doorbell)> {
    if info.channels != channels {
        return Err(ClientError::BadReply(format!(
            "stream has {} channels, requested {channels}",
            info.channels
        )));
    }
    if info.rate == 0 || info.device_rate == 0 {
        return Err(ClientError::BadReply("stream rate of 0".into()));
    }
    let [ring_fd, bell_fd]: [OwnedFd; 2] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
        ClientError::BadReply(format!(
            "stream_created carried {} file descriptors, expected 2",
            fds.len()
        ))
    })?;
    let ring = ShmRing::open(ring_fd, channels)?;
    if ring.capacity_frames() != info.capacity_frames {
        return Err(ClientError::BadReply(format!(
            "reply says {} frames but the ring holds {}",
            info.capacity_frames,
            ring.capacity_frames()
        )));
    }
    let bell = Doorbell::from_fd(bell_fd)?;
    Ok((info, ring, bell))
}

fn unexpected(request: &str, got: &Reply) -> ClientError {
    ClientError::BadReply(format!("got '{}' in reply to '{request}'", got.kind()))
}

/// Waits on `bell` until `deadline`; `Err(Timeout)` if it has passed.
fn wait_until(
    bell: &Doorbell,
    deadline: Instant,
    what: &'static str,
    after: Duration,
) -> Result<()> {
    let now = Instant::now();
    if now >= deadline {
        return Err(ClientError::Timeout { what, after });
    }
    bell.wait(Some(deadline - now))?;
    Ok(())
}

/// A stream the client writes audio into.
///
/// Dropping it unmaps the ring but does not destroy the server's node; call
/// [`Connection::destroy_stream`] (or close the connection) for that.
#[derive(Debug)]
pub struct PlaybackStream {
    ring: ShmRing,
    bell: Doorbell,
    info: StreamCreated,
    max_queued: usize,
    timeout: Duration,
}

impl PlaybackStream {
    fn check_health(&self) -> Result<()> {
        if self.ring.is_corrupt() {
            return Err(ClientError::Corrupt);
        }
        if self.ring.flags() & FLAG_SERVER_ERROR != 0 {
            return Err(ClientError::StreamFailed);
        }
        Ok(())
    }

    /// Writes interleaved frames, blocking until all are queued. Once the server has
    /// started the stream, never queues more than the requested latency (before
    /// that, up to the ring capacity, to satisfy the server's prebuffer). Fails with
    /// `Timeout` if the server consumes nothing for the stream timeout.
    pub fn write(&mut self, interleaved: &[f32]) -> Result<()> {
        let ch = self.info.channels as usize;
        if !interleaved.len().is_multiple_of(ch) {
            return Err(ClientError::InvalidArgument(format!(
                "{} samples is not a whole number of {ch}-channel frames",
                interleaved.len()
            )));
        }
        let mut rest = interleaved;
        let mut deadline = Instant::now() + self.timeout;
        while !rest.is_empty() {
            self.check_health()?;
            // Before the server starts the stream it may wait for a prebuffer of its
            // own choosing (up to the whole ring), so only cap at the requested
            // latency once audio is flowing; the surplus then plays out once.
            let limit = if self.ring.flags() & FLAG_SERVER_STARTED != 0 {
                self.max_queued
            } else {
                self.ring.capacity_frames() as usize
            };
            let queued = self.ring.capacity_frames() as usize - self.ring.writable();
            let room = limit.saturating_sub(queued);
            if room > 0 {
                let frames = room.min(rest.len() / ch);
                let n = self.ring.write(&rest[..frames * ch]);
                if n > 0 {
                    rest = &rest[n * ch..];
                    deadline = Instant::now() + self.timeout;
                    continue;
                }
            }
            wait_until(
                &self.bell,
                deadline,
                "the server to consume audio",
                self.timeout,
            )?;
        }
        Ok(())
    }

    /// Blocks until everything written so far has been played by the device.
    ///
    /// Sets `CLIENT_DRAIN` so the server knows an empty ring is the end of the
    /// audio, not an underrun. Bounded by the queued duration plus the stream
    /// timeout, and fails early if playback stops advancing for the stream timeout.
    pub fn drain(&mut self) -> Result<()> {
        let target = self.ring.write_pos();
        if reached(self.ring.played_pos(), target) {
            return Ok(());
        }
        self.ring.set_flags(FLAG_CLIENT_DRAIN);
        let result = self.wait_played(target);
        self.ring.clear_flags(FLAG_CLIENT_DRAIN);
        result
    }

    fn wait_played(&self, target: u64) -> Result<()> {
        let start = Instant::now();
        let pending =
            target.saturating_sub(self.ring.played_pos()) + self.ring.delay_frames() as u64;
        let audio = Duration::from_secs_f64(pending as f64 / self.info.rate as f64);
        let hard_deadline = start + audio + self.timeout;
        let mut last = (self.ring.played_pos(), self.ring.read_pos());
        let mut progress_deadline = start + self.timeout;
        loop {
            self.check_health()?;
            let played = self.ring.played_pos();
            if reached(played, target) {
                return Ok(());
            }
            let now_pos = (played, self.ring.read_pos());
            if now_pos != last {
                last = now_pos;
                progress_deadline = Instant::now() + self.timeout;
            }
            let deadline = hard_deadline.min(progress_deadline);
            wait_until(
                &self.bell,
                deadline,
                "the server to play the queued audio",
                deadline - start,
            )?;
        }
    }

    /// Sets how long `write`/`drain` wait without progress before `Timeout`.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Total frames written into the ring.
    pub fn frames_written(&self) -> u64 {
        self.ring.write_pos()
    }

    /// Frames the server reports as played by the device.
    pub fn frames_played(&self) -> u64 {
        self.ring.played_pos()
    }

    /// Frames queued in the ring, not yet taken by the server.
    pub fn frames_queued(&self) -> usize {
        self.ring.capacity_frames() as usize - self.ring.writable()
    }

    /// Most frames `write` keeps queued once the stream runs (the requested latency,
    /// at least one quantum, at most the ring).
    pub fn max_queued_frames(&self) -> usize {
        self.max_queued
    }

    /// Server's current device plus pipeline delay in stream frames.
    pub fn delay_frames(&self) -> u32 {
        self.ring.delay_frames()
    }

    /// Underruns the server counted for this stream.
    pub fn xruns(&self) -> u32 {
        self.ring.xruns()
    }

    /// The stream's node id.
    pub fn node(&self) -> u32 {
        self.info.node
    }

    /// Everything the server said about the stream.
    pub fn info(&self) -> &StreamCreated {
        &self.info
    }
}

/// Position comparison that stays right if positions ever wrap.
fn reached(pos: u64, target: u64) -> bool {
    pos.wrapping_sub(target) as i64 >= 0
}

/// A stream the client reads captured audio from.
///
/// Dropping it does not destroy the server's node; see [`PlaybackStream`].
#[derive(Debug)]
pub struct RecordStream {
    ring: ShmRing,
    bell: Doorbell,
    info: StreamCreated,
    timeout: Duration,
}

impl RecordStream {
    fn check_frames(&self, out: &[f32]) -> Result<()> {
        let ch = self.info.channels as usize;
        if !out.len().is_multiple_of(ch) {
            return Err(ClientError::InvalidArgument(format!(
                "buffer of {} samples is not a whole number of {ch}-channel frames",
                out.len()
            )));
        }
        Ok(())
    }

    /// Reads without blocking; returns frames read (possibly 0).
    pub fn try_read(&mut self, out: &mut [f32]) -> Result<usize> {
        self.check_frames(out)?;
        let n = self.ring.read(out);
        if n > 0 {
            return Ok(n);
        }
        // Report failure only once buffered audio has been handed out.
        if self.ring.is_corrupt() {
            return Err(ClientError::Corrupt);
        }
        if self.ring.flags() & FLAG_SERVER_ERROR != 0 {
            return Err(ClientError::StreamFailed);
        }
        Ok(0)
    }

    /// Reads at least one frame, blocking up to the stream timeout; returns frames read.
    pub fn read(&mut self, out: &mut [f32]) -> Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        self.check_frames(out)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let n = self.try_read(out)?;
            if n > 0 {
                return Ok(n);
            }
            wait_until(
                &self.bell,
                deadline,
                "the server to capture audio",
                self.timeout,
            )?;
        }
    }

    /// Sets how long `read` waits for audio before `Timeout`.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Frames available to read now.
    pub fn frames_available(&self) -> usize {
        self.ring.readable()
    }

    /// Total frames read so far.
    pub fn frames_read(&self) -> u64 {
        self.ring.read_pos()
    }

    /// Overruns the server counted (audio dropped because the ring was full).
    pub fn xruns(&self) -> u32 {
        self.ring.xruns()
    }

    /// The stream's node id.
    pub fn node(&self) -> u32 {
        self.info.node
    }

    /// Everything the server said about the stream.
    pub fn info(&self) -> &StreamCreated {
        &self.info
    }
}
