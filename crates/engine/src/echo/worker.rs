//! The canceller's two halves: [`EchoProcessor`], the source node's processor on the
//! RT thread (it only moves samples through wait-free rings and writes an eventfd),
//! and the worker thread running the canceller, which allocates and so stays off the
//! RT thread.

use crate::rt::node::{CycleInfo, Processor};
use aec3::nodes::audio::AudioFormat;
use aec3::pipelines::linear::{self, LinearPipeline};
use quaver_dsp::{Planar, PlanarMut};
use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd, poll};
use rustix::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The canceller works on 10 ms blocks.
pub const BLOCK_MS: u32 = 10;
/// Audio each ring between the node and the worker holds: room for a worker
/// descheduled for a while on a loaded machine.
const RING_MS: u32 = 500;

/// What the node and the worker share.
#[derive(Debug)]
struct Shared {
    /// Rung by the node once a block's worth of input is in the ring; read by the worker.
    bell: OwnedFd,
    stop: AtomicBool,
    /// Blocks the canceller processed.
    blocks: AtomicU64,
    /// Nanoseconds the worker spent in the canceller.
    busy_ns: AtomicU64,
    /// Cycles whose output the worker had not delivered in time (silence played).
    late: AtomicU64,
    /// Frames lost because a ring was full (the worker fell far behind).
    dropped: AtomicU64,
    /// Blocks whose output was not finite, after which the canceller was reset.
    resets: AtomicU64,
}

impl Shared {
    /// Counters at zero, rung through `bell`.
    fn new(bell: OwnedFd) -> Shared {
        Shared {
            bell,
            stop: AtomicBool::new(false),
            blocks: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            late: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        }
    }

    fn ring(&self) {
        // A full counter (never, at one write per block) only means a wakeup is
        // already pending.
        let _ = rustix::io::write(&self.bell, &1u64.to_ne_bytes());
    }
}

/// Counters of a running canceller, for status and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EchoStats {
    /// 10 ms blocks processed.
    pub blocks: u64,
    /// Time spent in the canceller, nanoseconds.
    pub busy_ns: u64,
    /// Cycles played as silence because the worker was late.
    pub late: u64,
    /// Frames lost to a full ring.
    pub dropped: u64,
    /// Canceller resets after a non-finite output.
    pub resets: u64,
}

/// The worker thread of one echo canceller; stopped and joined on [`EchoWorker::stop`]
/// or drop. Keep it as long as its node is in the graph.
#[derive(Debug)]
pub struct EchoWorker {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EchoWorker {
    /// The canceller's counters so far.
    pub fn stats(&self) -> EchoStats {
        let s = &self.shared;
        EchoStats {
            blocks: s.blocks.load(Ordering::Relaxed),
            busy_ns: s.busy_ns.load(Ordering::Relaxed),
            late: s.late.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            resets: s.resets.load(Ordering::Relaxed),
        }
    }

    /// Stops the thread and waits for it (at most one block's processing).
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.ring();
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            if h.join().is_err() {
                tracing::error!("echo canceller: its worker thread panicked");
            }
            let s = self.stats();
            tracing::info!(
                "echo canceller stopped: {} blocks of {BLOCK_MS} ms, {:.0} µs each on average, \
                 {} late, {} frames dropped, {} resets",
                s.blocks,
                s.busy_ns as f64 / s.blocks.max(1) as f64 / 1e3,
                s.late,
                s.dropped,
                s.resets
            );
        }
    }
}

impl Drop for EchoWorker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The echo-cancel source node's processor (*RT*, never allocates): its first
/// `mic_channels` inputs are the microphone, the rest the speakers' mix; each is
/// downmixed to mono and both go to the worker as frame pairs; the cleaned microphone
/// comes back on every output.
pub struct EchoProcessor {
    shared: Arc<Shared>,
    to_worker: rtrb::Producer<f32>,
    from_worker: rtrb::Consumer<f32>,
    mic_channels: usize,
    block: usize,
    since_bell: usize,
    /// The output runs two blocks + a quantum behind the input; until the worker has
    /// delivered that much (at the start, after a stall longer than the ring) the node
    /// plays silence.
    primed: bool,
    /// Frames played as silence because the worker was late: skipped when they come,
    /// so the output stays exactly as far behind the input as when it was primed.
    /// (Played late instead, each late cycle would add its length to the delay for
    /// good: a call's latency would creep up, and its audio would shift in time.)
    owed: usize,
}

/// What one cycle of the echo-cancel node plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// Silence (not primed, or the worker is late).
    Silence,
    /// Drop `skip` stale frames, then play the next ones.
    Play { skip: usize },
}

/// Mean of `channels` of `inputs` at frame `f` (0 without channels).
fn mono(inputs: &Planar<'_>, channels: std::ops::Range<usize>, f: usize) -> f32 {
    let n = channels.len();
    if n == 0 {
        return 0.0;
    }
    channels.map(|c| inputs.channel(c)[f]).sum::<f32>() / n as f32
}

impl Processor for EchoProcessor {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        let q = cx.frames.min(inputs.frames());
        let mic = 0..self.mic_channels.min(inputs.channels());
        let refs = mic.end..inputs.channels();
        match self.to_worker.write_chunk_uninit(2 * q) {
            Ok(chunk) => {
                let pairs = (0..q).flat_map(|f| {
                    [
                        mono(&inputs, mic.clone(), f),
                        mono(&inputs, refs.clone(), f),
                    ]
                });
                chunk.fill_from_iter(pairs);
            }
            Err(_) => {
                self.shared.dropped.fetch_add(q as u64, Ordering::Relaxed);
            }
        }
        self.since_bell += q;
        if self.since_bell >= self.block {
            self.since_bell %= self.block;
            self.shared.ring();
        }
        self.play(cx.frames, outputs);
    }
}

impl EchoProcessor {
    /// What a cycle of `frames` plays when the worker has delivered `have` frames.
    fn turn(&mut self, have: usize, frames: usize) -> Turn {
        // Two blocks of slack: a worker descheduled for up to a block on a busy
        // machine is still in time.
        let target = frames + 2 * self.block;
        if !self.primed {
            if have < target {
                return Turn::Silence;
            }
            // Exactly the target ahead, whatever a stalled worker left behind.
            self.primed = true;
            self.owed = 0;
            return Turn::Play {
                skip: have - target,
            };
        }
        if have >= self.owed + frames {
            return Turn::Play {
                skip: std::mem::take(&mut self.owed),
            };
        }
        self.shared.late.fetch_add(1, Ordering::Relaxed);
        self.owed += frames;
        if self.owed + target > self.from_worker.buffer().capacity() {
            // Stalled for longer than the ring holds: start over.
            self.primed = false;
            self.owed = 0;
        }
        Turn::Silence
    }

    /// Writes `frames` of cleaned audio to every output, or silence while not primed
    /// or while the worker is late.
    fn play(&mut self, frames: usize, outputs: &mut PlanarMut<'_>) {
        if outputs.channels() == 0 {
            return;
        }
        let chunk = match self.turn(self.from_worker.slots(), frames) {
            Turn::Play { skip } => {
                if let Ok(stale) = self.from_worker.read_chunk(skip) {
                    stale.commit_all();
                }
                self.from_worker.read_chunk(frames).ok()
            }
            Turn::Silence => None,
        };
        for ch in 0..outputs.channels() {
            let out = &mut outputs.channel_mut(ch)[..frames];
            match &chunk {
                Some(c) => {
                    let (a, b) = c.as_slices();
                    out[..a.len()].copy_from_slice(a);
                    out[a.len()..].copy_from_slice(b);
                }
                None => out.fill(0.0),
            }
        }
        if let Some(c) = chunk {
            c.commit_all();
        }
    }
}

/// The canceller proper, on the worker thread (the pipeline is not `Send`: it is
/// built there).
struct Worker {
    shared: Arc<Shared>,
    from_node: rtrb::Consumer<f32>,
    to_node: rtrb::Producer<f32>,
    block: usize,
    mic: Vec<f32>,
    reference: Vec<f32>,
    out: Vec<f32>,
}

/// Rates the canceller runs at (AEC3's full-band rates).
pub const RATES: [u32; 3] = [16_000, 32_000, 48_000];

/// A canceller for mono microphone and reference at `rate`: the pipeline of AEC3 after
/// a high-pass filter, without noise suppression or gain control (they would change
/// the near end's level, which the user's application decides).
fn pipeline(rate: u32) -> Result<LinearPipeline, String> {
    let format = AudioFormat::ten_ms(rate, 1);
    linear::builder(format, format)
        .enable_noise_suppression(false)
        .enable_gain_controller2(false)
        .enable_post_filter(false)
        .build()
        .map_err(|e| format!("echo canceller: {e}"))
}

/// Starts a canceller for the graph's `rate` and a microphone of `mic_channels`
/// channels: its worker thread and the processor for the echo-cancel source node.
pub fn start(rate: u32, mic_channels: usize) -> Result<(EchoWorker, EchoProcessor), String> {
    if !RATES.contains(&rate) {
        return Err(format!(
            "echo cancellation runs at 16000, 32000 or 48000 Hz, and the graph runs at {rate} Hz"
        ));
    }
    let block = (rate * BLOCK_MS / 1000) as usize;
    let ring = (rate * RING_MS / 1000) as usize;
    let bell = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| format!("echo canceller: eventfd: {e}"))?;
    let shared = Arc::new(Shared::new(bell));
    let (in_tx, in_rx) = rtrb::RingBuffer::new(2 * ring);
    let (out_tx, out_rx) = rtrb::RingBuffer::new(ring);
    let worker = Worker {
        shared: shared.clone(),
        from_node: in_rx,
        to_node: out_tx,
        block,
        mic: vec![0.0; block],
        reference: vec![0.0; block],
        out: vec![0.0; block],
    };
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name("quaver-echo".into())
        .spawn(move || match pipeline(rate) {
            Ok(p) => {
                let _ = ready_tx.send(Ok(()));
                worker.run(p)
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(|e| format!("echo canceller: cannot start its thread: {e}"))?;
    ready_rx
        .recv()
        .map_err(|_| "echo canceller: its thread ended before it started".to_string())??;
    let processor = EchoProcessor {
        shared: shared.clone(),
        to_worker: in_tx,
        from_worker: out_rx,
        mic_channels: mic_channels.max(1),
        block,
        since_bell: 0,
        primed: false,
        owed: 0,
    };
    Ok((
        EchoWorker {
            shared,
            thread: Mutex::new(Some(thread)),
        },
        processor,
    ))
}

impl Worker {
    fn run(mut self, mut pipeline: LinearPipeline) {
        loop {
            let mut fds = [PollFd::new(&self.shared.bell, PollFlags::IN)];
            match poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    tracing::error!("echo canceller: poll: {e}; the source stays silent");
                    return;
                }
            }
            let mut count = [0u8; 8];
            let _ = rustix::io::read(&self.shared.bell, &mut count);
            if self.shared.stop.load(Ordering::Acquire) {
                return;
            }
            while self.from_node.slots() >= 2 * self.block {
                self.one_block(&mut pipeline);
            }
        }
    }

    /// Cancels one block: the reference first, as the canceller expects the far end
    /// before the capture that holds its echo.
    fn one_block(&mut self, pipeline: &mut LinearPipeline) {
        let Ok(chunk) = self.from_node.read_chunk(2 * self.block) else {
            return;
        };
        let (a, b) = chunk.as_slices();
        for (i, pair) in a.chunks_exact(2).chain(b.chunks_exact(2)).enumerate() {
            // Not finite in, not finite out: the canceller's state would never recover.
            let clean = |v: f32| if v.is_finite() { v } else { 0.0 };
            self.mic[i] = clean(pair[0]);
            self.reference[i] = clean(pair[1]);
        }
        chunk.commit_all();
        let t = std::time::Instant::now();
        let done = pipeline
            .handle_render_frame(&self.reference)
            .and_then(|()| pipeline.process_capture_frame(&self.mic, &mut self.out));
        let finite = self.out.iter().all(|v| v.is_finite());
        if matches!(done, Ok(false)) {
            // Nothing to output yet (the pipeline's start): silence.
            self.out.fill(0.0);
        } else if done.is_err() || !finite {
            // Played as silence; a fresh canceller converges again within seconds.
            self.out.fill(0.0);
            self.shared.resets.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = pipeline.reset_aec3() {
                tracing::warn!("echo canceller: reset: {e}");
            }
        }
        self.shared
            .busy_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.shared.blocks.fetch_add(1, Ordering::Relaxed);
        match self.to_node.write_chunk_uninit(self.block) {
            Ok(chunk) => {
                chunk.fill_from_iter(self.out.iter().copied());
            }
            Err(_) => {
                self.shared
                    .dropped
                    .fetch_add(self.block as u64, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A processor fed by hand: the test plays the worker, delivering cleaned frame `i`
    /// as the value `i + 1`.
    fn processor(block: usize, ring: usize) -> (EchoProcessor, rtrb::Producer<f32>) {
        let bell = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).unwrap();
        let shared = Arc::new(Shared::new(bell));
        let (in_tx, _in_rx) = rtrb::RingBuffer::new(2 * ring);
        let (out_tx, out_rx) = rtrb::RingBuffer::new(ring);
        let p = EchoProcessor {
            shared,
            to_worker: in_tx,
            from_worker: out_rx,
            mic_channels: 1,
            block,
            since_bell: 0,
            primed: false,
            owed: 0,
        };
        (p, out_tx)
    }

    /// Runs `cycles` cycles of `frames`; the worker delivers whole blocks of what has
    /// come in, except in the cycles `stalled` says, and catches up after. Returns
    /// every frame played.
    fn run(cycles: usize, stalled: impl Fn(usize) -> bool) -> (Vec<f32>, u64) {
        let (block, frames) = (480, 256);
        let (mut p, mut worker) = processor(block, 4800);
        let mut delivered = 0usize;
        let mut played = Vec::new();
        let mut buf = vec![0.0f32; frames];
        for c in 0..cycles {
            let came_in = (c + 1) * frames;
            if !stalled(c) {
                while delivered + block <= came_in {
                    for i in delivered..delivered + block {
                        worker.push(i as f32 + 1.0).unwrap();
                    }
                    delivered += block;
                }
            }
            p.play(frames, &mut PlanarMut::new(&mut buf, 1, frames, frames));
            played.extend_from_slice(&buf);
        }
        (played, p.shared.late.load(Ordering::Relaxed))
    }

    /// Frame `t` of the output is input frame `t - delay` or silence, for one delay
    /// over the whole run; how many frames were silent after the first sound.
    fn one_delay(played: &[f32]) -> (usize, usize) {
        let first = played
            .iter()
            .position(|&v| v != 0.0)
            .expect("something played");
        let delay = first - (played[first] as usize - 1);
        let mut silent = 0;
        for (t, &v) in played.iter().enumerate().skip(first) {
            if v == 0.0 {
                silent += 1;
            } else {
                assert_eq!(
                    v as usize - 1,
                    t - delay,
                    "frame {t} moved off delay {delay}"
                );
            }
        }
        (delay, silent)
    }

    #[test]
    fn a_late_worker_costs_silence_but_never_moves_the_output_in_time() {
        let (steady, late) = run(200, |_| false);
        assert_eq!(late, 0);
        let (delay, silent) = one_delay(&steady);
        assert_eq!(silent, 0);
        // A worker stalled for 30 ms (longer than the two blocks of slack), then
        // catching up: the cycles it missed are silence, the rest as before.
        let (stalled, late) = run(200, |c| (60..66).contains(&c));
        assert!(late > 0, "the stall was never late");
        let (delay_after, silent) = one_delay(&stalled);
        assert_eq!(delay_after, delay, "the stall moved the output in time");
        assert_eq!(silent, late as usize * 256);
    }
}
