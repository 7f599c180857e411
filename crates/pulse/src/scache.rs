//! The sample cache: samples uploaded once (event sounds) and played on request.
//!
//! A sample is stored decoded (f32, the sample's own rate and layout). Playing it adds a
//! playback node over a [`SampleSource`] — a `FrameSource` reading the shared samples —
//! linked to the sink; a small waiter thread removes the node once the adapter reports
//! the last frame played (the RT side rings an eventfd then), or after a deadline.

use crate::memstat::Counted;
use crate::state::{Device, Sample, Server};
use crate::wire::convert::{frames_to_usec, map_from_pa};
use pulseaudio::protocol::PulseError;
use quaver_engine::stream::{FrameSource, PlaybackAdapter, StreamFormat};
use quaver_engine::{NodeId, NodeKind, NodeSpec};
use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec, eventfd, poll};
use rustix::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Largest sample accepted, in bytes (PulseAudio's `PA_SCACHE_ENTRY_SIZE_MAX`).
pub const MAX_SAMPLE_BYTES: u32 = 16 * 1024 * 1024;
/// Most samples playing at once.
pub const MAX_PLAYING: usize = 64;

static PLAYING: AtomicUsize = AtomicUsize::new(0);

/// Reads a cached sample once. RT-safe: the data is shared, nothing is allocated.
pub struct SampleSource {
    data: Arc<Counted<Vec<f32>>>,
    pos: usize,
    frames: u64,
    done: bool,
    bell: Arc<OwnedFd>,
}

impl FrameSource for SampleSource {
    fn available(&self) -> usize {
        (self.data.len() - self.pos) / self.channels()
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        let n = (self.data.len() - self.pos).min(out.len() / self.channels() * self.channels());
        out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        n / self.channels()
    }
    fn draining(&self) -> bool {
        // The whole sample is there from the start: running dry is its end.
        true
    }
    fn report(&mut self, played: u64, _delay: u32, _xruns: u32, _started: bool) {
        if !self.done && played >= self.frames {
            self.done = true;
            let _ = rustix::io::write(&*self.bell, &1u64.to_ne_bytes());
        }
    }
}

impl SampleSource {
    fn channels(&self) -> usize {
        (self.data.len() / self.frames.max(1) as usize).max(1)
    }
}

/// Plays `sample` on `sink` at linear `gain`; returns the sink input's node id.
pub fn play(
    srv: &Arc<Server>,
    sample: &Sample,
    sink: &Device,
    gain: f32,
) -> Result<NodeId, PulseError> {
    if sample.frames() == 0 {
        return Err(PulseError::Invalid);
    }
    if PLAYING.fetch_add(1, Ordering::AcqRel) >= MAX_PLAYING {
        PLAYING.fetch_sub(1, Ordering::AcqRel);
        return Err(PulseError::TooLarge);
    }
    let guard = PlayingGuard;
    let bell = Arc::new(
        eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|_| PulseError::Internal)?,
    );
    let graph = srv.engine.graph();
    let sink_node = graph.nodes.get(&sink.node).ok_or(PulseError::NoEntity)?;
    let node_map = quaver_dsp::ChannelMap(
        sink_node
            .inputs
            .iter()
            .map(|id| graph.ports[id].channel)
            .collect(),
    );
    let cfg = srv.engine.config().clone();
    let rate = srv.engine.rate();
    let source = SampleSource {
        data: sample.data.clone(),
        pos: 0,
        frames: sample.frames() as u64,
        done: false,
        bell: bell.clone(),
    };
    let adapter = PlaybackAdapter::new(
        source,
        &StreamFormat {
            rate: sample.spec.sample_rate,
            channels: map_from_pa(&sample.map),
        },
        &node_map,
        rate,
        cfg.quantum_max,
        1,
        srv.opts.resample_quality,
    )
    .map(|a| a.with_rewind(srv.engine.rewind_capacity(), node_map.len()))
    .map_err(|_| PulseError::NotSupported)?;
    let name: String = sample
        .name
        .chars()
        .map(|c| if c == ':' || c.is_control() { '_' } else { c })
        .take(100)
        .collect();
    let mut spec = NodeSpec::new(&name, NodeKind::PlaybackStream);
    spec.description = format!("sample {}", sample.name);
    spec.outputs = node_map;
    spec.volume = gain.clamp(0.0, 10.0);
    let node = srv
        .engine
        .add_node_linked(spec, Some(Box::new(adapter)), Some(&sink.name))
        .map_err(|_| PulseError::Internal)?;
    // The sample's length, the device latency and a margin bound the wait.
    let limit = Duration::from_micros(frames_to_usec(
        sample.frames() as u64,
        sample.spec.sample_rate,
    )) + Duration::from_secs(5);
    let s = srv.clone();
    let spawned = std::thread::Builder::new()
        .name("quaver-pulse-sample".into())
        .stack_size(64 * 1024)
        .spawn(move || {
            let _guard = guard;
            let mut fds = [PollFd::new(&*bell, PollFlags::IN)];
            let t = Timespec::try_from(limit).unwrap_or(Timespec {
                tv_sec: 60,
                tv_nsec: 0,
            });
            let _ = poll(&mut fds, Some(&t));
            if let Err(e) = s.engine.remove_node(node) {
                tracing::debug!("pulse: removing sample node {node}: {e}");
            }
        });
    if spawned.is_err() {
        let _ = srv.engine.remove_node(node);
        return Err(PulseError::Internal);
    }
    Ok(node)
}

struct PlayingGuard;

impl Drop for PlayingGuard {
    fn drop(&mut self) {
        PLAYING.fetch_sub(1, Ordering::AcqRel);
    }
}
