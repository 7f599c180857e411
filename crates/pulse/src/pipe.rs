//! `module-pipe-sink` and `module-pipe-source`: a sink whose audio goes into a named
//! pipe (FIFO), for programs that read a sound server's output from one (snapcast's
//! `pipe` source, visualizers), and a source whose audio comes from one (a program's
//! output as a virtual microphone).
//!
//! **Sink.** A null sink; a tap node behind it (a filter, not listed to clients)
//! reads what the sink plays, after its volume, like its monitor, and hands it to a
//! writer thread through a lock-free ring. The writer encodes the samples and writes
//! them to the FIFO without blocking. The graph's clock paces the sink, as PulseAudio's
//! pipe sink with `use_system_clock_for_timing=yes`: a reader that falls behind (or
//! none at all, once the pipe's buffer is full) loses audio rather than stalling every
//! stream on the sink. The tap rings the writer every [`WRITE_EVERY_MS`], not every
//! cycle, so a pipe costs a few wakeups per second.
//!
//! **Source.** A source node fed by a feeder node (a filter) that plays what a reader
//! thread takes from the FIFO, through the same ring, prebuffering and resampler as a
//! PulseAudio playback stream ([`crate::transport::PlaySource`] in a
//! [`PlaybackAdapter`]), so the pipe may run at any rate. The reader takes from the
//! pipe only while the ring has room: a writer faster than real time (`cat file >
//! fifo`) is held back by the full pipe, as PulseAudio's pipe source holds it, instead
//! of losing audio. Between writes the source records silence.

use crate::rt::shared::{Bell, F_TRIGGER, NEVER, PlayShared};
use crate::rt::transport::PlaySource;
use crate::wire::convert::Codec;
use quaver_dsp::{Planar, PlanarMut};
use quaver_engine::stream::{PlaybackAdapter, StreamFormat};
use quaver_engine::{CycleInfo, Processor};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// How much audio the tap gathers before it wakes the writer.
pub const WRITE_EVERY_MS: u64 = 20;
/// Audio the ring between the tap and the writer holds.
const RING_MS: u64 = 500;

/// What the tap and the writer share.
#[derive(Debug)]
struct Shared {
    bell: Arc<Bell>,
    /// Frames lost: the ring was full (the writer was late) or the pipe was.
    dropped: AtomicU64,
    /// Frames written to the pipe.
    written: AtomicU64,
}

/// A running pipe sink's writer: stopped (and the FIFO removed, if it made it) by
/// [`PipeOut::stop`].
#[derive(Debug)]
pub struct PipeOut {
    shared: Arc<Shared>,
    thread: PipeThread,
}

/// A pipe module's thread and FIFO: [`PipeThread::stop`] ends the thread and removes
/// the FIFO if the module made it.
#[derive(Debug)]
struct PipeThread {
    stop: Arc<AtomicBool>,
    bell: Arc<Bell>,
    thread: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// The FIFO did not exist before: it is removed on unload, as PulseAudio does.
    created: bool,
}

impl PipeThread {
    /// Runs `body` on a thread called `name`; it must return once `stop` is set and
    /// `bell` rung. If the thread cannot start, the FIFO is removed (if made here).
    fn spawn(
        name: &str,
        path: &Path,
        created: bool,
        stop: Arc<AtomicBool>,
        bell: Arc<Bell>,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<PipeThread, String> {
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .map_err(|e| {
                if created {
                    let _ = std::fs::remove_file(path);
                }
                format!("cannot start {name}: {e}")
            })?;
        Ok(PipeThread {
            stop,
            bell,
            thread: Mutex::new(Some(thread)),
            path: path.to_path_buf(),
            created,
        })
    }

    fn stop(&self, module: &str) {
        self.stop.store(true, Ordering::Release);
        self.bell.ring();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        if self.created
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            tracing::warn!("{module}: removing {}: {e}", self.path.display());
        }
    }
}

/// The tap node's processor: interleaves its inputs into the ring. *RT*.
pub struct PipeTap {
    shared: Arc<Shared>,
    ring: rtrb::Producer<f32>,
    channels: usize,
    since_ring: usize,
    ring_every: usize,
}

impl Processor for PipeTap {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        let frames = cx.frames.min(inputs.frames());
        let ch = self.channels.min(inputs.channels());
        let n = frames * self.channels;
        match self.ring.write_chunk_uninit(n) {
            Ok(chunk) => {
                let samples = (0..frames).flat_map(|f| {
                    (0..self.channels).map(move |c| if c < ch { inputs.channel(c)[f] } else { 0.0 })
                });
                chunk.fill_from_iter(samples);
            }
            Err(_) => {
                self.shared
                    .dropped
                    .fetch_add(frames as u64, Ordering::Relaxed);
            }
        }
        self.since_ring += frames;
        if self.since_ring >= self.ring_every {
            self.since_ring = 0;
            self.shared.bell.ring();
        }
    }
}

/// Opens (making it if needed) the FIFO at `path` for writing without blocking.
/// Returns the descriptor and whether it was made here.
fn open_fifo(path: &Path) -> Result<(OwnedFd, bool), String> {
    let shown = path.display();
    let created = match rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::Fifo,
        Mode::from_raw_mode(0o666),
        0,
    ) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(format!("cannot make the FIFO {shown}: {e}")),
    };
    // Read-write: the pipe then always has a reader (us), so writing never fails with
    // EPIPE while no program reads it, and opening never waits for one.
    let fd = rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {shown}: {e}"))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Fifo {
        return Err(format!("{shown} exists and is not a FIFO"));
    }
    Ok((fd, created))
}

impl PipeOut {
    /// Opens the FIFO at `path` and starts the writer for `channels` channels at `rate`
    /// in `codec`'s format; returns it and the tap to put in the graph.
    pub fn start(
        path: &Path,
        codec: Codec,
        channels: usize,
        rate: u32,
    ) -> Result<(PipeOut, PipeTap), String> {
        let (fd, created) = open_fifo(path)?;
        let bell = Arc::new(Bell::new().map_err(|e| format!("eventfd: {e}"))?);
        let shared = Arc::new(Shared {
            bell: bell.clone(),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let ring_frames = (rate as u64 * RING_MS / 1000) as usize;
        let (tx, rx) = rtrb::RingBuffer::new(ring_frames * channels);
        let writer = Writer {
            shared: shared.clone(),
            stop: stop.clone(),
            ring: rx,
            fd,
            codec,
            channels,
            path: path.to_path_buf(),
        };
        let thread = PipeThread::spawn("quaver-pipe", path, created, stop, bell, move || {
            writer.run()
        })?;
        let out = PipeOut {
            shared: shared.clone(),
            thread,
        };
        let tap = PipeTap {
            shared,
            ring: tx,
            channels,
            since_ring: 0,
            ring_every: (rate as u64 * WRITE_EVERY_MS / 1000).max(1) as usize,
        };
        Ok((out, tap))
    }

    /// Frames written to the pipe and frames lost so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.written.load(Ordering::Relaxed),
            self.shared.dropped.load(Ordering::Relaxed),
        )
    }

    /// Stops the writer (what the ring still holds is written first) and removes the
    /// FIFO if it was made for this sink. Call after the tap left the graph.
    pub fn stop(&self) {
        self.thread.stop("module-pipe-sink");
    }
}

/// The writer thread's side.
struct Writer {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    ring: rtrb::Consumer<f32>,
    fd: OwnedFd,
    codec: Codec,
    channels: usize,
    path: PathBuf,
}

impl Writer {
    fn run(mut self) {
        let frame_bytes = self.codec.bytes() * self.channels;
        let mut bytes = Vec::new();
        let mut lost_logged = 0u64;
        loop {
            let mut fds = [rustix::event::PollFd::new(
                &*self.shared.bell,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    tracing::error!("module-pipe-sink: poll: {e}; the pipe gets no more audio");
                    return;
                }
            }
            self.shared.bell.take();
            let stopping = self.stop.load(Ordering::Acquire);
            let n = self.ring.slots() / self.channels * self.channels;
            if n > 0
                && let Ok(chunk) = self.ring.read_chunk(n)
            {
                let (a, b) = chunk.as_slices();
                bytes.resize(n * self.codec.bytes(), 0);
                let split = a.len() * self.codec.bytes();
                self.codec.encode(a, &mut bytes[..split]);
                self.codec.encode(b, &mut bytes[split..]);
                chunk.commit_all();
                let sent = self.write_all(&bytes);
                let frames = (n / self.channels) as u64;
                let sent_frames = (sent / frame_bytes) as u64;
                self.shared
                    .written
                    .fetch_add(sent_frames, Ordering::Relaxed);
                self.shared
                    .dropped
                    .fetch_add(frames - sent_frames, Ordering::Relaxed);
            }
            // Once per second of losses at most, so a pipe no one reads logs little.
            let dropped = self.shared.dropped.load(Ordering::Relaxed);
            if dropped >= lost_logged + 48_000 {
                tracing::debug!(
                    "module-pipe-sink: {dropped} frames lost so far: nothing reads {} fast enough",
                    self.path.display()
                );
                lost_logged = dropped;
            }
            if stopping {
                return;
            }
        }
    }

    /// Writes as many whole frames of `buf` as the pipe has room for now; returns the
    /// bytes written. Sizing each write to the room (pipe size less what is unread)
    /// means a write is never cut inside a frame, so a reader stays frame-aligned
    /// whatever is lost.
    fn write_all(&self, mut buf: &[u8]) -> usize {
        let frame_bytes = self.codec.bytes() * self.channels;
        let mut sent = 0;
        while !buf.is_empty() {
            let room = match (
                rustix::pipe::fcntl_getpipe_size(&self.fd),
                rustix::io::ioctl_fionread(&self.fd),
            ) {
                (Ok(size), Ok(unread)) => size.saturating_sub(unread as usize),
                _ => 0,
            };
            let n = room.min(buf.len()) / frame_bytes * frame_bytes;
            if n == 0 {
                break;
            }
            match rustix::io::write(self.fd.as_fd(), &buf[..n]) {
                Ok(k) if k % frame_bytes == 0 && k > 0 => {
                    sent += k;
                    buf = &buf[k..];
                }
                Ok(k) => {
                    // Cannot happen with the room measured; if it does, stop rather
                    // than guess how to realign the reader.
                    tracing::warn!(
                        "module-pipe-sink: short write of {k} bytes to {}",
                        self.path.display()
                    );
                    sent += k;
                    break;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => {
                    tracing::warn!("module-pipe-sink: writing {}: {e}", self.path.display());
                    break;
                }
            }
        }
        sent
    }
}

/// Audio a pipe source buffers before it starts, and again after it ran dry: room for
/// a writer's own chunking and scheduling (a jitter buffer).
const SOURCE_PREBUF_MS: u64 = 50;

/// What LOAD_MODULE needs to build a pipe source's feeder.
pub struct SourceFeeder {
    /// The feeder node's processor.
    pub processor: Box<dyn Processor>,
}

/// A running pipe source's reader: stopped (and the FIFO removed, if it made it) by
/// [`PipeIn::stop`].
#[derive(Debug)]
pub struct PipeIn {
    read: Arc<AtomicU64>,
    thread: PipeThread,
}

impl PipeIn {
    /// Opens the FIFO at `path` and starts the reader for `format` (the pipe's rate
    /// and layout) in `codec`'s encoding; returns it and the feeder's processor, which
    /// plays into `node_map` at the engine's `engine_rate` with cycles up to
    /// `max_quantum` frames.
    pub fn start(
        path: &Path,
        codec: Codec,
        format: &StreamFormat,
        node_map: &quaver_dsp::ChannelMap,
        engine_rate: u32,
        max_quantum: usize,
        quality: quaver_dsp::resample::ResampleQuality,
    ) -> Result<(PipeIn, SourceFeeder), String> {
        let channels = format.channels.len();
        // A cycle at the largest quantum must fit, at the pipe's rate.
        let cycle = (max_quantum as u64 * format.rate as u64).div_ceil(engine_rate as u64);
        let prebuf = format.rate as u64 * SOURCE_PREBUF_MS / 1000;
        let ring_frames = ((cycle + prebuf) as usize).max(1024).next_power_of_two();
        let bell = Arc::new(Bell::new().map_err(|e| format!("eventfd: {e}"))?);
        let shared = Arc::new(PlayShared::new(bell, prebuf as u32, false));
        let (tx, rx) = rtrb::RingBuffer::new(ring_frames * channels);
        let adapter = PlaybackAdapter::new(
            PlaySource::new(shared.clone(), rx, channels),
            format,
            node_map,
            engine_rate,
            max_quantum,
            0,
            quality,
        )
        .map_err(|e| format!("cannot play {} Hz: {e}", format.rate))?;
        let (fd, created) = open_fifo(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let read = Arc::new(AtomicU64::new(0));
        let bell = shared.bell.clone();
        let reader = Reader {
            shared,
            stop: stop.clone(),
            read: read.clone(),
            ring: tx,
            ring_frames,
            fd,
            codec,
            channels,
        };
        let thread = PipeThread::spawn("quaver-pipe-in", path, created, stop, bell, move || {
            reader.run()
        })?;
        Ok((
            PipeIn { read, thread },
            SourceFeeder {
                processor: Box::new(adapter),
            },
        ))
    }

    /// Frames read from the pipe so far.
    pub fn frames_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Stops the reader and removes the FIFO if it was made for this source.
    pub fn stop(&self) {
        self.thread.stop("module-pipe-source");
    }
}

/// The reader thread's side of a pipe source.
struct Reader {
    shared: Arc<PlayShared>,
    stop: Arc<AtomicBool>,
    read: Arc<AtomicU64>,
    ring: rtrb::Producer<f32>,
    ring_frames: usize,
    fd: OwnedFd,
    codec: Codec,
    channels: usize,
}

impl Reader {
    fn run(mut self) {
        let frame_bytes = self.codec.bytes() * self.channels;
        let mut bytes = vec![0u8; 64 * 1024];
        let mut have = 0usize;
        let mut samples = Vec::new();
        let mut triggered = false;
        loop {
            let room = self.ring.slots() / self.channels;
            // Take from the pipe only what the ring can hold; when it is full, sleep
            // until the graph has played a quarter of it (the RT side rings then).
            let take = room.min(bytes.len() / frame_bytes);
            if take == 0 {
                let consumed = self.shared.consumed.load(Ordering::Acquire);
                self.shared
                    .wake_at
                    .store(consumed + (self.ring_frames / 4) as u64, Ordering::Release);
            } else {
                self.shared.wake_at.store(NEVER, Ordering::Release);
            }
            let mut fds = [
                rustix::event::PollFd::new(&*self.shared.bell, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(
                    &self.fd,
                    if take > 0 {
                        rustix::event::PollFlags::IN
                    } else {
                        rustix::event::PollFlags::empty()
                    },
                ),
            ];
            // A write shorter than the prebuffer (a short beep) would wait for the next
            // one: if the pipe stays quiet that long while audio waits to start, start it.
            // Once per write: a source no one records from does not run, and must not
            // cost a wakeup every prebuffer while it sits with unplayed audio.
            let waiting =
                !triggered && self.ring_frames - room > 0 && self.shared.prebuffering.load(Relaxed);
            let quiet = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: (SOURCE_PREBUF_MS * 1_000_000) as i64,
            };
            match rustix::event::poll(&mut fds, waiting.then_some(&quiet)) {
                Ok(0) if waiting => {
                    self.shared.set_flag(F_TRIGGER, true);
                    triggered = true;
                    continue;
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    tracing::error!("module-pipe-source: poll: {e}; the source stays silent");
                    return;
                }
            }
            self.shared.bell.take();
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            if take == 0 {
                continue;
            }
            // Bytes of a frame cut by the previous read wait at the front.
            let limit = take * frame_bytes;
            match rustix::io::read(&self.fd, &mut bytes[have..limit.max(have)]) {
                Ok(n) => {
                    have += n;
                    triggered = false;
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::error!("module-pipe-source: read: {e}; the source stays silent");
                    return;
                }
            }
            let frames = have / frame_bytes;
            if frames == 0 {
                continue;
            }
            samples.resize(frames * self.channels, 0.0);
            self.codec
                .decode(&bytes[..frames * frame_bytes], &mut samples);
            if let Ok(mut chunk) = self.ring.write_chunk(samples.len()) {
                let (a, b) = chunk.as_mut_slices();
                let split = a.len();
                a.copy_from_slice(&samples[..split]);
                b.copy_from_slice(&samples[split..]);
                chunk.commit_all();
            }
            self.read.fetch_add(frames as u64, Ordering::Relaxed);
            bytes.copy_within(frames * frame_bytes..have, 0);
            have -= frames * frame_bytes;
        }
    }
}
