//! A tunnel's local half: its device node (a null sink or source, what clients see) and
//! the helper node behind or in front of it that moves audio between the RT thread and
//! the network thread through a wait-free ring — the sink's [`Tap`], or the source's
//! feeder (a playback adapter over the ring, as a pipe source's). Made afresh for each
//! connection, so a ring never outlives the nodes that use it.

use crate::modules::pipe::load::add_with_helper;
use crate::rt::transport::{Bell, PlayShared, PlaySource};
use crate::state::Server;
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::stream::{PlaybackAdapter, StreamFormat};
use quaver_engine::{CycleInfo, NodeId, NodeKind, NodeSpec, Processor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How much audio the tap gathers before it wakes the network thread.
const WAKE_EVERY_MS: u64 = 10;

/// What a tunnel's local half is made from, kept for every reconnection.
#[derive(Debug, Clone)]
pub(super) struct Shape {
    /// The device node (sink or source), as the module's arguments made it.
    pub(super) device: NodeSpec,
    /// Its layout.
    pub(super) map: ChannelMap,
    /// The graph's rate (the stream's on the remote too).
    pub(super) rate: u32,
    /// The latency bound, in frames.
    pub(super) latency: usize,
    /// The engine's largest cycle, in frames.
    pub(super) max_quantum: usize,
    /// The resampler quality (the feeder's adapter needs one even at one rate).
    pub(super) quality: quaver_dsp::resample::ResampleQuality,
}

impl Shape {
    fn is_sink(&self) -> bool {
        self.device.kind == NodeKind::DeviceSink
    }

    /// Frames the ring holds: the latency and the largest cycle.
    fn ring_frames(&self) -> usize {
        (self.latency + self.max_quantum).next_power_of_two()
    }
}

/// The network thread's end of one connection's ring.
pub(super) enum LocalIo {
    /// What the sink played, to send.
    Sink(rtrb::Consumer<f32>),
    /// What the remote recorded, to play into the source.
    Source(rtrb::Producer<f32>),
}

/// Adds the tunnel's nodes to the graph; returns them (the device first) and the
/// network thread's end of their ring. On failure nothing stays in the graph.
pub(super) fn add_nodes(
    srv: &Server,
    shape: &Shape,
    bell: &Arc<Bell>,
    dropped: &Arc<AtomicU64>,
    cycle: &Arc<AtomicUsize>,
) -> Result<(Vec<NodeId>, LocalIo), String> {
    let channels = shape.map.len();
    let (tx, rx) = rtrb::RingBuffer::new(shape.ring_frames() * channels);
    let helper_name = format!("{}.tunnel", shape.device.name);
    let mut helper = NodeSpec::new(&helper_name, NodeKind::Filter);
    let (processor, io): (Box<dyn Processor>, LocalIo) = if shape.is_sink() {
        helper.inputs = shape.map.clone();
        let tap = Tap {
            ring: tx,
            channels,
            bell: bell.clone(),
            dropped: dropped.clone(),
            cycle: cycle.clone(),
            since_ring: 0,
            ring_every: ring_every(shape.rate),
        };
        (Box::new(tap), LocalIo::Sink(rx))
    } else {
        helper.outputs = shape.map.clone();
        // Prebuffered to half the latency: room for the remote's fragments to arrive
        // unevenly without the source running dry.
        let shared = Arc::new(PlayShared::new(
            bell.clone(),
            (shape.latency / 2).max(1) as u32,
            false,
        ));
        let format = StreamFormat {
            rate: shape.rate,
            channels: shape.map.clone(),
        };
        let adapter = PlaybackAdapter::new(
            PlaySource::new(shared, rx, channels),
            &format,
            &shape.map,
            shape.rate,
            shape.max_quantum,
            0,
            shape.quality,
        )
        .map_err(|e| format!("cannot build the source's feeder: {e}"))?;
        (Box::new(adapter), LocalIo::Source(tx))
    };
    let (dev, h) = add_with_helper(
        srv,
        shape.device.clone(),
        helper,
        processor,
        shape.is_sink(),
    )?;
    Ok((vec![dev, h], io))
}

/// Frames between two wakes of the network thread at `rate`.
fn ring_every(rate: u32) -> usize {
    (rate as u64 * WAKE_EVERY_MS / 1000).max(1) as usize
}

/// A tunnel sink's tap over a ring of `frames` frames of `channels`, as
/// [`add_nodes`] makes it, with the ring's other end: for the allocation guard
/// (`crates/pulse/tests/rt_no_alloc.rs`).
#[doc(hidden)]
pub fn tap_for_alloc_guard(
    channels: usize,
    frames: usize,
    rate: u32,
    bell: Arc<Bell>,
) -> (Box<dyn Processor>, rtrb::Consumer<f32>) {
    let (tx, rx) = rtrb::RingBuffer::new(frames * channels);
    let tap = Tap {
        ring: tx,
        channels,
        bell,
        dropped: Arc::new(AtomicU64::new(0)),
        cycle: Arc::new(AtomicUsize::new(0)),
        since_ring: 0,
        ring_every: ring_every(rate),
    };
    (Box::new(tap), rx)
}

/// The sink's tap: interleaves what the sink plays (after its volume) into the ring
/// and wakes the network thread every [`WAKE_EVERY_MS`]. *RT*: no allocation, no
/// lock, one eventfd write at most per wake period.
struct Tap {
    ring: rtrb::Producer<f32>,
    channels: usize,
    bell: Arc<Bell>,
    /// Frames lost because the ring was full (the network thread fell behind).
    dropped: Arc<AtomicU64>,
    /// The last cycle's length in frames: the network thread's latency bound allows
    /// for one whole cycle arriving at once.
    cycle: Arc<AtomicUsize>,
    since_ring: usize,
    ring_every: usize,
}

impl Processor for Tap {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        let frames = cx.frames.min(inputs.frames());
        let ch = self.channels.min(inputs.channels());
        self.cycle.store(frames, Ordering::Relaxed);
        match self.ring.write_chunk_uninit(frames * self.channels) {
            Ok(chunk) => {
                let samples = (0..frames).flat_map(|f| {
                    (0..self.channels).map(move |c| if c < ch { inputs.channel(c)[f] } else { 0.0 })
                });
                chunk.fill_from_iter(samples);
            }
            Err(_) => {
                self.dropped.fetch_add(frames as u64, Ordering::Relaxed);
            }
        }
        self.since_ring += frames;
        if self.since_ring >= self.ring_every {
            self.since_ring = 0;
            self.bell.ring();
        }
    }
}
