//! A pipe sink's tap (RT) and writer thread.

use super::fifo::{PipeThread, open_fifo};
use crate::rt::transport::Bell;
use crate::wire::convert::Codec;
use quaver_dsp::{Planar, PlanarMut};
use quaver_engine::{CycleInfo, Processor};
use rustix::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
