//! A pipe source's feeder (a playback adapter, RT) and reader thread.

use super::fifo::{PipeThread, open_fifo};
use crate::rt::transport::{Bell, F_TRIGGER, NEVER, PlayShared, PlaySource};
use crate::wire::convert::Codec;
use quaver_engine::Processor;
use quaver_engine::stream::{PlaybackAdapter, StreamFormat};
use rustix::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, Ordering::Relaxed};

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
