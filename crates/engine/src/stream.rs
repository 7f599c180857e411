//! Stream adapters: turn a client's interleaved frames at its own rate and channel
//! layout into the node's planar ports at the engine rate, and back for recording.
//!
//! Front-ends provide the transport ([`FrameSource`] / [`FrameSink`], e.g. a
//! shared-memory ring); conversion happens here, once per path: channel mixing and at
//! most one resampler, only when the rates differ.

use crate::rt::node::{CycleInfo, Processor};
pub use crate::rt::retune::Retune;
use quaver_dsp::channels::ChannelMixer;
use quaver_dsp::format::{deinterleave, interleave};
use quaver_dsp::resample::{ResampleQuality, StreamResampler};
use quaver_dsp::{ChannelMap, Planar, PlanarBuf, PlanarMut};

/// Where a playback stream's frames come from. Every method is *RT*.
pub trait FrameSource: Send {
    /// Called before the source is looked at in a cycle: a source may take in what its
    /// client delivered since the last cycle.
    fn prepare(&mut self) {}
    /// Interleaved frames ready to read.
    fn available(&self) -> usize;
    /// Reads up to `out.len() / channels` interleaved frames; returns frames read.
    fn read(&mut self, out: &mut [f32]) -> usize;
    /// True once the client has written its last frame and waits for it to play.
    fn draining(&self) -> bool;
    /// Publishes progress: stream frames that have reached the listener, the delay in
    /// stream frames still ahead of them, the xrun count, and whether playback started.
    /// The delay holds at the cycle's start (the time given to [`FrameSource::cycle_at`]
    /// just before), when the device's delay was read.
    fn report(&mut self, played: u64, delay: u32, xruns: u32, started: bool);
    /// The cycle the next [`FrameSource::report`] describes: its start (the moment the
    /// delay holds, for sources that tell their clients the delay at another moment)
    /// and whether another cycle follows at once (filling ahead).
    fn cycle_at(&mut self, _cx: &CycleInfo) {}
    /// The stream's rate now, for streams whose client may change it while playing
    /// (see [`PlaybackAdapter::variable_rate`]); `None` keeps the creation rate.
    fn rate(&self) -> Option<u32> {
        None
    }
    /// True while the client has paused the stream (PulseAudio's cork): the node plays
    /// silence, reads nothing and counts no underrun.
    fn paused(&self) -> bool {
        false
    }
}

/// Where a record stream's frames go. Every method is *RT*.
pub trait FrameSink: Send {
    /// Writes interleaved frames; returns how many fitted (the rest are dropped).
    fn write(&mut self, frames: &[f32]) -> usize;
    /// Publishes the overrun count and the capture delay in stream frames.
    fn report(&mut self, overruns: u32, delay: u32);
    /// The stream's rate now, for streams whose client may change it while recording
    /// (see [`RecordAdapter::variable_rate`]); `None` keeps the creation rate.
    fn rate(&self) -> Option<u32> {
        None
    }
}

/// Stream format as the client sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFormat {
    /// Sample rate in Hz.
    pub rate: u32,
    /// Channel layout of the interleaved frames.
    pub channels: ChannelMap,
}

fn read_planar<S: FrameSource>(
    src: &mut S,
    scratch: &mut [f32],
    buf: &mut PlanarMut,
    draining: bool,
    xruns: &mut u32,
) -> usize {
    let frames = buf.frames();
    let ch = buf.channels();
    let got = src.read(&mut scratch[..frames * ch]);
    if got < frames {
        scratch[got * ch..frames * ch].fill(0.0);
        if !draining {
            *xruns += 1;
        }
    }
    deinterleave(&scratch[..frames * ch], buf);
    got
}

/// A playback stream node: reads the client's frames and fills the node's outputs.
pub struct PlaybackAdapter<S: FrameSource> {
    source: S,
    mixer: ChannelMixer,
    resampler: Option<StreamResampler>,
    scratch: Vec<f32>,
    client: PlanarBuf,
    prebuf: usize,
    started: bool,
    consumed: u64,
    /// Engine frames output since the client's last frame was consumed (while draining).
    tail: usize,
    xruns: u32,
    in_rate: u32,
    out_rate: u32,
    /// The creation rate, which the resampler's base ratio was built for.
    base_rate: u32,
    max_quantum: usize,
    /// What the node played lately, so a rewind can take it back (see
    /// [`PlaybackAdapter::with_rewind`]).
    history: Option<History>,
}

/// A playback node's recent output, kept so a device rewind can take frames back and
/// play them again instead of losing or repeating them.
///
/// Frames are numbered in the order they were produced (`total` so far); the last
/// `pending` of them were taken back and are played again before anything new.
/// Silence the node played while paused (or before it started) is not stored; the
/// latest such run is remembered by position so a rewind that reaches into it takes
/// back silence, not the audio from before the pause.
struct History {
    ring: PlanarBuf,
    cap: usize,
    total: u64,
    pending: usize,
    silent_at: u64,
    silent_len: usize,
    /// Scratch for the fresh part of a cycle that starts with replayed frames.
    fresh: PlanarBuf,
}

impl History {
    fn new(channels: usize, cap: usize, max_quantum: usize) -> Self {
        History {
            ring: PlanarBuf::new(channels, cap),
            cap,
            total: 0,
            pending: 0,
            silent_at: 0,
            silent_len: 0,
            fresh: PlanarBuf::new(channels, max_quantum),
        }
    }

    /// Frames produced and played (not taken back).
    fn out(&self) -> u64 {
        self.total - self.pending as u64
    }

    /// Copies `frames` frames of `src` starting at `from` into the ring.
    fn record(&mut self, src: Planar<'_>, from: usize, frames: usize) {
        let frames = frames.min(self.cap);
        for ch in 0..self.ring.channels().min(src.channels()) {
            let s = &src.channel(ch)[from..from + frames];
            let start = (self.total % self.cap as u64) as usize;
            let first = frames.min(self.cap - start);
            let ring = self.ring.channel_mut(ch);
            ring[start..start + first].copy_from_slice(&s[..first]);
            ring[..frames - first].copy_from_slice(&s[first..]);
        }
        self.total += frames as u64;
    }

    /// Plays up to `frames` taken-back frames into the start of `dst`; returns how many.
    fn replay(&mut self, dst: &mut PlanarMut<'_>, frames: usize) -> usize {
        let n = frames.min(self.pending);
        let start = (self.out() % self.cap as u64) as usize;
        let first = n.min(self.cap - start);
        for ch in 0..dst.channels().min(self.ring.channels()) {
            let ring = self.ring.channel(ch);
            let d = dst.channel_mut(ch);
            d[..first].copy_from_slice(&ring[start..start + first]);
            d[first..n].copy_from_slice(&ring[..n - first]);
        }
        self.pending -= n;
        n
    }

    /// The node played `frames` of silence it does not store.
    fn silence(&mut self, frames: usize) {
        let out = self.out();
        if self.silent_len == 0 || self.silent_at != out {
            self.silent_at = out;
            self.silent_len = 0;
        }
        self.silent_len += frames;
    }

    /// Drops the taken-back frames: they will not be played (the stream was flushed).
    fn forget_pending(&mut self) {
        self.total -= self.pending as u64;
        self.pending = 0;
    }

    /// The device took back the last `frames` frames this node played.
    fn take_back(&mut self, frames: usize) {
        let mut k = frames as u64;
        let oldest = self.total.saturating_sub(self.cap as u64);
        let take = |h: &mut History, limit: u64, k: &mut u64| {
            let t = (*k).min(limit).min(h.out() - oldest);
            h.pending += t as usize;
            *k -= t;
        };
        // Newest first: frames played after the latest silent run, the run itself
        // (silence: nothing to play again), then what came before it.
        let after = if self.silent_len > 0 {
            self.out().saturating_sub(self.silent_at)
        } else {
            u64::MAX
        };
        take(self, after, &mut k);
        if k > 0 && self.silent_len > 0 && self.out() == self.silent_at {
            let s = k.min(self.silent_len as u64);
            self.silent_len -= s as usize;
            k -= s;
        }
        take(self, u64::MAX, &mut k);
        // Anything left reaches back before this node played at all: nothing to take.
    }
}

/// How far a variable-rate stream may move from its creation rate (the resampler's
/// ratio range).
pub const MAX_RATE_CHANGE: f64 = quaver_dsp::resample::MAX_RELATIVE_RATIO;

/// Whether `rate` is within [`MAX_RATE_CHANGE`] of `base` (both ways).
pub fn rate_change_ok(base: u32, rate: u32) -> bool {
    let r = rate as f64 / base.max(1) as f64;
    rate > 0 && (1.0 / MAX_RATE_CHANGE..=MAX_RATE_CHANGE).contains(&r)
}

/// What making an adapter variable-rate needs to know.
struct Variable {
    from: u32,
    to: u32,
    client_rate: u32,
    engine_rate: u32,
    channels: usize,
    max_quantum: usize,
}

impl Variable {
    /// Builds an adjustable resampler (even when the rates match now) in place of none
    /// or a fixed one, and grows the client-side scratch for up to
    /// [`MAX_RATE_CHANGE`] more client frames per cycle.
    fn prepare(
        &self,
        resampler: &mut Option<StreamResampler>,
        scratch: &mut Vec<f32>,
        quality: ResampleQuality,
    ) -> Result<(), quaver_dsp::resample::ResampleError> {
        if !resampler
            .as_ref()
            .is_some_and(StreamResampler::is_adjustable)
        {
            *resampler = Some(StreamResampler::new(
                self.from,
                self.to,
                self.channels,
                quality,
                self.max_quantum,
            )?);
        }
        // The converter's own bound covers a cascade's first or last stage, whose
        // blocks need not follow the quantum.
        let own = resampler
            .as_ref()
            .map_or(0, |r| r.max_pull_input().max(r.max_push_output()));
        let need = scratch_frames(self.client_rate, self.engine_rate, self.max_quantum).max(own);
        if scratch.len() < need * self.channels {
            *scratch = vec![0.0; need * self.channels];
        }
        Ok(())
    }
}

/// Client-side frames one cycle of at most `max_quantum` engine frames may need when
/// the client's rate moves up to [`MAX_RATE_CHANGE`] from `client_rate`, with slack for
/// the resampler's chunking.
fn scratch_frames(client_rate: u32, engine_rate: u32, max_quantum: usize) -> usize {
    let moved = (max_quantum as f64 * MAX_RATE_CHANGE * client_rate as f64
        / engine_rate.max(1) as f64) as usize;
    let whole = max_quantum * (client_rate as usize).div_ceil(engine_rate.max(1) as usize);
    moved.max(whole).max(max_quantum) + 1024
}

/// Construction happens here, where the adapters' converters are built; the type
/// lives with the RT core, which swaps it in.
impl Retune {
    /// For a [`PlaybackAdapter`] (client rate → engine rate). Control thread.
    pub fn playback(
        client_rate: u32,
        channels: usize,
        engine_rate: u32,
        max_quantum: usize,
        quality: ResampleQuality,
    ) -> Result<Retune, quaver_dsp::resample::ResampleError> {
        Retune::build(
            client_rate,
            engine_rate,
            client_rate,
            engine_rate,
            channels,
            max_quantum,
            quality,
        )
    }

    /// For a [`RecordAdapter`] (engine rate → client rate). Control thread.
    pub fn record(
        client_rate: u32,
        channels: usize,
        engine_rate: u32,
        max_quantum: usize,
        quality: ResampleQuality,
    ) -> Result<Retune, quaver_dsp::resample::ResampleError> {
        Retune::build(
            engine_rate,
            client_rate,
            client_rate,
            engine_rate,
            channels,
            max_quantum,
            quality,
        )
    }

    fn build(
        from: u32,
        to: u32,
        client_rate: u32,
        engine_rate: u32,
        channels: usize,
        max_quantum: usize,
        quality: ResampleQuality,
    ) -> Result<Retune, quaver_dsp::resample::ResampleError> {
        let v = Variable {
            from,
            to,
            client_rate,
            engine_rate,
            channels,
            max_quantum,
        };
        let (mut resampler, mut scratch) = (None, Vec::new());
        v.prepare(&mut resampler, &mut scratch, quality)?;
        Ok(Retune {
            rate: client_rate,
            resampler,
            scratch,
        })
    }
}

impl<S: FrameSource> PlaybackAdapter<S> {
    /// Builds the adapter (control thread; allocates everything it will need).
    /// `node_channels` is the layout of the node's output ports; `max_quantum` bounds
    /// the cycle size; playback starts once `prebuf` frames are queued (or on drain).
    pub fn new(
        source: S,
        format: &StreamFormat,
        node_channels: &ChannelMap,
        engine_rate: u32,
        max_quantum: usize,
        prebuf: usize,
        quality: ResampleQuality,
    ) -> Result<Self, quaver_dsp::resample::ResampleError> {
        let ch = format.channels.len();
        // Fixed until `variable_rate` says otherwise: the shared exact filter where it
        // applies (see quaver_dsp::resample).
        let resampler = if format.rate != engine_rate {
            Some(StreamResampler::new_fixed(
                format.rate,
                engine_rate,
                ch,
                quality,
                max_quantum,
            )?)
        } else {
            None
        };
        // Input needed for one output cycle, plus slack for the resampler's chunking, and
        // never less than what the converter may ask for at once.
        let max_in = (max_quantum * (format.rate as usize).div_ceil(engine_rate as usize) + 1024)
            .max(
                resampler
                    .as_ref()
                    .map_or(0, StreamResampler::max_pull_input),
            );
        Ok(PlaybackAdapter {
            source,
            mixer: ChannelMixer::new(&format.channels, node_channels),
            resampler,
            scratch: vec![0.0; max_in.max(max_quantum) * ch],
            client: PlanarBuf::new(ch, max_quantum),
            prebuf,
            started: false,
            consumed: 0,
            tail: 0,
            xruns: 0,
            in_rate: format.rate,
            out_rate: engine_rate,
            base_rate: format.rate,
            max_quantum,
            history: None,
        })
    }

    /// Keeps the last `frames` frames the node played (at the engine rate) so that the
    /// engine can rewind a device that fills ahead ([`Processor::rewind`]); pass
    /// `Engine::rewind_capacity`. 0 keeps nothing (no rewinds). Control thread.
    pub fn with_rewind(mut self, frames: usize, node_channels: usize) -> Self {
        self.history = (frames > 0).then(|| History::new(node_channels, frames, self.max_quantum));
        self
    }

    /// Lets the source change its rate while playing ([`FrameSource::rate`]), within
    /// [`MAX_RATE_CHANGE`] of the creation rate: a resampler is built even when the
    /// rates match now, and its ratio follows the source. Control thread.
    pub fn variable_rate(
        mut self,
        quality: ResampleQuality,
    ) -> Result<Self, quaver_dsp::resample::ResampleError> {
        let v = Variable {
            from: self.in_rate,
            to: self.out_rate,
            client_rate: self.in_rate,
            engine_rate: self.out_rate,
            channels: self.client.channels(),
            max_quantum: self.max_quantum,
        };
        v.prepare(&mut self.resampler, &mut self.scratch, quality)?;
        Ok(self)
    }

    /// Follows a rate change of the source (RT: only the resampler's ratio moves).
    fn follow_rate(&mut self) {
        if let Some(rate) = self.source.rate()
            && rate != self.in_rate
            && rate_change_ok(self.base_rate, rate)
            && let Some(r) = self.resampler.as_mut()
        {
            r.set_ratio_relative(self.base_rate as f64 / rate as f64);
            self.in_rate = rate;
        }
    }

    fn to_stream_frames(&self, engine_frames: usize) -> u64 {
        engine_frames as u64 * self.in_rate as u64 / self.out_rate as u64
    }
}

impl<S: FrameSource> PlaybackAdapter<S> {
    /// Produces `frames` new frames into `out`: reads, resamples, mixes channels.
    /// Returns false, with `out` silent, while the stream waits for its prebuffer. *RT*.
    fn render(&mut self, frames: usize, draining: bool, out: &mut PlanarMut<'_>) -> bool {
        if !self.started {
            if self.source.available() >= self.prebuf.max(1)
                || (draining && self.source.available() > 0)
            {
                self.started = true;
            } else {
                out.fill_silence();
                return false;
            }
        }
        let mut client = self.client.view_mut(frames);
        let Self {
            source,
            scratch,
            xruns,
            resampler,
            consumed,
            ..
        } = self;
        match resampler {
            Some(r) => r.process_pull(&mut client, &mut |buf: &mut PlanarMut| {
                let got = read_planar(source, scratch, buf, draining, xruns);
                *consumed += got as u64;
                got
            }),
            None => {
                let got = read_planar(source, scratch, &mut client, draining, xruns);
                *consumed += got as u64;
            }
        }
        self.mixer.process(client.as_planar(), out);
        true
    }

    /// Fills `outputs` with up to its length of taken-back frames, then new ones;
    /// returns whether the stream has started. *RT*.
    fn fill(&mut self, q: usize, draining: bool, outputs: &mut PlanarMut<'_>) -> bool {
        let Some(mut h) = self.history.take() else {
            return self.render(q, draining, outputs);
        };
        let replayed = h.replay(outputs, q);
        let fresh = q - replayed;
        let mut started = true;
        if fresh > 0 {
            // An empty buffer does not allocate; it only parks the scratch while the ring
            // is written.
            let mut scratch = std::mem::replace(&mut h.fresh, PlanarBuf::new(0, 0));
            let mut buf = scratch.view_mut(fresh);
            started = self.render(fresh, draining, &mut buf);
            for ch in 0..outputs.channels().min(buf.channels()) {
                outputs.channel_mut(ch)[replayed..q].copy_from_slice(buf.channel(ch));
            }
            if started {
                h.record(buf.as_planar(), 0, fresh);
            } else {
                h.silence(fresh);
            }
            h.fresh = scratch;
        }
        self.history = Some(h);
        started
    }
}

impl<S: FrameSource> Processor for PlaybackAdapter<S> {
    fn retune(&mut self, r: &mut Retune) {
        if r.swap(&mut self.resampler, &mut self.scratch, &mut self.base_rate) {
            self.in_rate = self.base_rate;
        }
    }

    fn process(&mut self, cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        let q = cx.frames;
        self.source.prepare();
        self.follow_rate();
        let draining = self.source.draining();
        if self.source.paused() {
            outputs.fill_silence();
            if let Some(h) = self.history.as_mut() {
                h.silence(q);
            }
        } else if !self.fill(q, draining, outputs) {
            let played = self.consumed;
            self.source.report(played, 0, self.xruns, false);
            return;
        }
        // Once a draining stream's ring is empty, the frames still in flight play out
        // cycle by cycle; count them so `played` reaches the last frame and drain ends.
        if draining && self.source.available() == 0 {
            self.tail += q;
        } else {
            self.tail = 0;
        }
        // Taken-back frames wait to be played again: still ahead of the listener.
        let in_flight = cx.playback_delay
            + self.resampler.as_ref().map_or(0, |r| r.delay_frames())
            + self.history.as_ref().map_or(0, |h| h.pending);
        let delay = self.to_stream_frames(in_flight.saturating_sub(self.tail));
        let played = self.consumed.saturating_sub(delay);
        self.source.cycle_at(cx);
        self.source.report(
            played,
            delay.min(u32::MAX as u64) as u32,
            self.xruns,
            self.started,
        );
    }

    fn ready(&mut self, frames: usize) -> bool {
        self.source.prepare();
        if self.source.paused() || self.history.as_ref().is_some_and(|h| h.pending >= frames) {
            return true;
        }
        let need = (frames as u64 * self.in_rate as u64).div_ceil(self.out_rate as u64) as usize;
        // Room for the converter's look-ahead, but never more than a cycle's own worth:
        // a low-latency client keeps only a few cycles queued, and a fixed 256 frames
        // could exceed all of it (a 20 ms stream at 8 kHz holds 120 frames, a cycle takes
        // 22), so a freewheeling graph waited out its bound on every cycle.
        let slack = if self.resampler.is_some() {
            need.clamp(1, 256)
        } else {
            0
        };
        self.source.draining() || self.source.available() >= need + slack
    }

    fn can_rewind(&self) -> bool {
        self.history.is_some()
    }

    fn xruns(&self) -> u64 {
        self.xruns as u64
    }

    fn rewind(&mut self, frames: usize, discard: bool) {
        if let Some(h) = self.history.as_mut() {
            h.take_back(frames);
            if discard {
                h.forget_pending();
            }
        }
    }
}

/// A record stream node: converts the node's inputs and writes them to the client.
pub struct RecordAdapter<K: FrameSink> {
    sink: K,
    mixer: ChannelMixer,
    resampler: Option<StreamResampler>,
    client: PlanarBuf,
    scratch: Vec<f32>,
    overruns: u32,
    in_rate: u32,
    out_rate: u32,
    /// The creation rate, which the resampler's base ratio was built for.
    base_rate: u32,
    max_quantum: usize,
}

impl<K: FrameSink> RecordAdapter<K> {
    /// Builds the adapter (control thread). `node_channels` is the layout of the node's
    /// input ports.
    pub fn new(
        sink: K,
        format: &StreamFormat,
        node_channels: &ChannelMap,
        engine_rate: u32,
        max_quantum: usize,
        quality: ResampleQuality,
    ) -> Result<Self, quaver_dsp::resample::ResampleError> {
        let ch = format.channels.len();
        let resampler = if format.rate != engine_rate {
            Some(StreamResampler::new_fixed(
                engine_rate,
                format.rate,
                ch,
                quality,
                max_quantum,
            )?)
        } else {
            None
        };
        let max_out = (max_quantum * (format.rate as usize).div_ceil(engine_rate as usize) + 1024)
            .max(
                resampler
                    .as_ref()
                    .map_or(0, StreamResampler::max_push_output),
            );
        Ok(RecordAdapter {
            sink,
            mixer: ChannelMixer::new(node_channels, &format.channels),
            resampler,
            client: PlanarBuf::new(ch, max_quantum),
            scratch: vec![0.0; max_out.max(max_quantum) * ch],
            overruns: 0,
            in_rate: engine_rate,
            out_rate: format.rate,
            base_rate: format.rate,
            max_quantum,
        })
    }

    /// Lets the sink change its rate while recording ([`FrameSink::rate`]), within
    /// [`MAX_RATE_CHANGE`] of the creation rate. Control thread.
    pub fn variable_rate(
        mut self,
        quality: ResampleQuality,
    ) -> Result<Self, quaver_dsp::resample::ResampleError> {
        let v = Variable {
            from: self.in_rate,
            to: self.out_rate,
            client_rate: self.out_rate,
            engine_rate: self.in_rate,
            channels: self.client.channels(),
            max_quantum: self.max_quantum,
        };
        v.prepare(&mut self.resampler, &mut self.scratch, quality)?;
        Ok(self)
    }
}

fn write_interleaved<K: FrameSink>(
    sink: &mut K,
    scratch: &mut [f32],
    buf: Planar,
    overruns: &mut u32,
) {
    let n = buf.frames() * buf.channels();
    interleave(buf, &mut scratch[..n]);
    if sink.write(&scratch[..n]) < buf.frames() {
        *overruns += 1;
    }
}

impl<K: FrameSink> Processor for RecordAdapter<K> {
    fn retune(&mut self, r: &mut Retune) {
        if r.swap(&mut self.resampler, &mut self.scratch, &mut self.base_rate) {
            self.out_rate = self.base_rate;
        }
    }

    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        let q = cx.frames;
        if let Some(rate) = self.sink.rate()
            && rate != self.out_rate
            && rate_change_ok(self.base_rate, rate)
            && let Some(r) = self.resampler.as_mut()
        {
            r.set_ratio_relative(rate as f64 / self.base_rate as f64);
            self.out_rate = rate;
        }
        let mut client = self.client.view_mut(q);
        self.mixer.process(inputs, &mut client);
        let Self {
            sink,
            scratch,
            overruns,
            resampler,
            ..
        } = self;
        match resampler {
            Some(r) => r.process_push(client.as_planar(), &mut |out: Planar| {
                write_interleaved(sink, scratch, out, overruns)
            }),
            None => write_interleaved(sink, scratch, client.as_planar(), overruns),
        }
        let delay = cx.capture_delay as u64 * self.out_rate as u64 / self.in_rate as u64;
        self.sink
            .report(self.overruns, delay.min(u32::MAX as u64) as u32);
    }

    fn xruns(&self) -> u64 {
        self.overruns as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Mono frames numbered 1, 2, 3, … so order, loss and repeats are visible.
    struct Counter {
        next: f32,
        paused: Arc<AtomicBool>,
    }

    impl FrameSource for Counter {
        fn available(&self) -> usize {
            1 << 20
        }
        fn read(&mut self, out: &mut [f32]) -> usize {
            for v in out.iter_mut() {
                *v = self.next;
                self.next += 1.0;
            }
            out.len()
        }
        fn draining(&self) -> bool {
            false
        }
        fn report(&mut self, _: u64, _: u32, _: u32, _: bool) {}
        fn paused(&self) -> bool {
            self.paused.load(Ordering::Relaxed)
        }
    }

    /// A device model: what was played, and what is queued (and may be taken back).
    #[derive(Default)]
    struct Dac {
        played: Vec<f32>,
        queued: Vec<f32>,
    }

    fn adapter() -> (PlaybackAdapter<Counter>, Arc<AtomicBool>) {
        let paused = Arc::new(AtomicBool::new(false));
        let fmt = StreamFormat {
            rate: 48_000,
            channels: ChannelMap::mono(),
        };
        let a = PlaybackAdapter::new(
            Counter {
                next: 1.0,
                paused: paused.clone(),
            },
            &fmt,
            &ChannelMap::mono(),
            48_000,
            64,
            0,
            ResampleQuality::High,
        )
        .unwrap()
        .with_rewind(1000, 1);
        (a, paused)
    }

    fn cycle(a: &mut PlaybackAdapter<Counter>, dac: &mut Dac, q: usize) {
        let mut out = PlanarBuf::new(1, 64);
        let cx = CycleInfo {
            frames: q,
            rate: 48_000,
            ..CycleInfo::default()
        };
        let none = PlanarBuf::new(0, 64);
        a.process(&cx, none.view(q), &mut out.view_mut(q));
        dac.queued.extend_from_slice(&out.channel(0)[..q]);
    }

    /// The device plays `n` queued frames.
    fn play(dac: &mut Dac, n: usize) {
        let n = n.min(dac.queued.len());
        dac.played.extend(dac.queued.drain(..n));
    }

    /// The device takes back `n` queued frames.
    fn rewind(a: &mut PlaybackAdapter<Counter>, dac: &mut Dac, n: usize) {
        let keep = dac.queued.len() - n;
        dac.queued.truncate(keep);
        a.rewind(n, false);
    }

    fn heard(dac: &Dac) -> Vec<f32> {
        dac.played
            .iter()
            .chain(&dac.queued)
            .copied()
            .filter(|&v| v != 0.0)
            .collect()
    }

    fn counting(n: usize) -> Vec<f32> {
        (1..=n).map(|v| v as f32).collect()
    }

    #[test]
    fn a_retune_moves_a_variable_rate_stream_beyond_the_ratio_range() {
        let (a, _) = adapter();
        let mut a = a.variable_rate(ResampleQuality::Medium).unwrap();
        let mut dac = Dac::default();
        for _ in 0..50 {
            cycle(&mut a, &mut dac, 64);
        }
        let before = a.source.next;
        // 48 kHz → 8 kHz: far beyond MAX_RATE_CHANGE, only a new converter gets there.
        let mut r = Retune::playback(8_000, 1, 48_000, 64, ResampleQuality::Medium).unwrap();
        Processor::retune(&mut a, &mut r);
        assert_eq!(
            r.rate(),
            48_000,
            "the replaced converter comes back to be freed"
        );
        for _ in 0..300 {
            cycle(&mut a, &mut dac, 64);
        }
        // 300 cycles of 64 engine frames are 3200 client frames at 8 kHz, plus what
        // the new converter's filter reads ahead.
        let read = a.source.next - before;
        assert!((3200.0..3400.0).contains(&read), "{read}");
    }

    #[test]
    fn a_fixed_rate_stream_ignores_a_retune() {
        let (mut a, _) = adapter();
        let mut dac = Dac::default();
        let mut r = Retune::playback(8_000, 1, 48_000, 64, ResampleQuality::Medium).unwrap();
        Processor::retune(&mut a, &mut r);
        assert_eq!(r.rate(), 8_000, "nothing was swapped");
        for _ in 0..10 {
            cycle(&mut a, &mut dac, 64);
        }
        assert_eq!(heard(&dac), counting(640));
    }

    /// Counts the frames a record stream delivers.
    struct Tally(Arc<std::sync::atomic::AtomicUsize>);

    impl FrameSink for Tally {
        fn write(&mut self, frames: &[f32]) -> usize {
            self.0.fetch_add(frames.len(), Ordering::Relaxed);
            frames.len()
        }
        fn report(&mut self, _: u32, _: u32) {}
    }

    #[test]
    fn a_retune_moves_a_variable_rate_record_stream_too() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let fmt = StreamFormat {
            rate: 48_000,
            channels: ChannelMap::mono(),
        };
        let mut a = RecordAdapter::new(
            Tally(n.clone()),
            &fmt,
            &ChannelMap::mono(),
            48_000,
            64,
            ResampleQuality::Medium,
        )
        .unwrap()
        .variable_rate(ResampleQuality::Medium)
        .unwrap();
        let input = PlanarBuf::new(1, 64);
        let mut none = PlanarBuf::new(0, 64);
        let cx = CycleInfo {
            frames: 64,
            rate: 48_000,
            ..CycleInfo::default()
        };
        let mut r = Retune::record(96_000, 1, 48_000, 64, ResampleQuality::Medium).unwrap();
        Processor::retune(&mut a, &mut r);
        assert_eq!(r.rate(), 48_000);
        for _ in 0..100 {
            a.process(&cx, input.view(64), &mut none.view_mut(64));
        }
        // 6400 engine frames are 12800 client frames at 96 kHz, less what the new
        // converter's filter still holds.
        let wrote = n.load(Ordering::Relaxed);
        assert!((12_500..=12_800).contains(&wrote), "{wrote}");
    }

    #[test]
    fn rewound_frames_are_played_again_in_order_even_mid_cycle() {
        let (mut a, _) = adapter();
        let mut dac = Dac::default();
        for _ in 0..10 {
            cycle(&mut a, &mut dac, 64);
        }
        play(&mut dac, 100);
        // Not a multiple of the cycle: the next cycle starts with 37 replayed frames.
        rewind(&mut a, &mut dac, 101);
        for _ in 0..5 {
            cycle(&mut a, &mut dac, 64);
        }
        assert_eq!(heard(&dac), counting(640 + 5 * 64 - 101));
    }

    #[test]
    fn a_rewind_during_a_pause_keeps_the_audio_for_the_resume() {
        let (mut a, paused) = adapter();
        let mut dac = Dac::default();
        for _ in 0..8 {
            cycle(&mut a, &mut dac, 64);
        }
        play(&mut dac, 200);
        // Pause: the queued music is taken back and held; silence is played instead.
        paused.store(true, Ordering::Relaxed);
        rewind(&mut a, &mut dac, 250);
        for _ in 0..4 {
            cycle(&mut a, &mut dac, 64);
        }
        play(&mut dac, 100);
        // Another rewind during the pause takes back silence only.
        rewind(&mut a, &mut dac, 120);
        cycle(&mut a, &mut dac, 64);
        // Resume: the silence still queued is taken back, the held music plays first.
        paused.store(false, Ordering::Relaxed);
        let q = dac.queued.len();
        rewind(&mut a, &mut dac, q - 10);
        for _ in 0..8 {
            cycle(&mut a, &mut dac, 64);
        }
        assert_eq!(heard(&dac), counting(512 - 250 + 8 * 64));
        // Silence while paused sits between the music played before and after.
        assert!(dac.played.contains(&0.0));
    }

    #[test]
    fn a_rewind_past_the_first_frame_starts_the_stream_earlier_and_repeats_nothing() {
        let (mut a, _) = adapter();
        let mut dac = Dac {
            played: vec![],
            queued: vec![0.0; 500],
        };
        cycle(&mut a, &mut dac, 64);
        rewind(&mut a, &mut dac, 300);
        for _ in 0..3 {
            cycle(&mut a, &mut dac, 64);
        }
        assert_eq!(heard(&dac), counting(3 * 64));
    }

    #[test]
    fn a_flush_drops_what_was_taken_back_instead_of_replaying_it() {
        let (mut a, _) = adapter();
        let mut dac = Dac::default();
        for _ in 0..8 {
            cycle(&mut a, &mut dac, 64);
        }
        play(&mut dac, 100);
        let keep = dac.queued.len() - 300;
        dac.queued.truncate(keep);
        a.rewind(300, true);
        for _ in 0..2 {
            cycle(&mut a, &mut dac, 64);
        }
        // Frames 213..512 were dropped; the stream goes on after them.
        let mut expect = counting(212);
        expect.extend((513..=640).map(|v| v as f32));
        assert_eq!(heard(&dac), expect);
        // A later rewind takes back only what was played after the flush.
        rewind(&mut a, &mut dac, 128);
        cycle(&mut a, &mut dac, 64);
        cycle(&mut a, &mut dac, 64);
        expect.truncate(expect.len() - 128);
        expect.extend((513..=640).map(|v| v as f32));
        assert_eq!(heard(&dac), expect);
    }

    /// Rates more than 16 times apart (a cascade of converter stages, whose blocks do not
    /// follow the quantum), both ways, fixed and variable-rate, at every quality: the
    /// adapters' scratch holds what the converter hands over at once, and the counts add
    /// up. 136 kHz at a 1024-frame quantum is the closest case: a first stage of 16 : 1
    /// asks for about 16 700 frames per 1024-frame block (more when a variable rate
    /// moves it), against 18 432 that the quantum-based estimate alone would allow; the
    /// scratch now also covers the converter's own bound.
    #[test]
    fn adapters_run_cascades_at_the_largest_quantum() {
        for (client, quantum) in [(384_000u32, 8192usize), (136_000, 1024)] {
            let ratio = client as f64 / 8000.0;
            for q in ResampleQuality::ALL {
                for variable in [false, true] {
                    let what = format!("{client} Hz, quantum {quantum}, {q}, variable {variable}");
                    let fmt = StreamFormat {
                        rate: client,
                        channels: ChannelMap::mono(),
                    };
                    let paused = Arc::new(AtomicBool::new(false));
                    let source = Counter { next: 1.0, paused };
                    let mono = ChannelMap::mono();
                    let mut a =
                        PlaybackAdapter::new(source, &fmt, &mono, 8000, quantum, 0, q).unwrap();
                    if variable {
                        a = a.variable_rate(q).unwrap();
                    }
                    let mut out = PlanarBuf::new(1, quantum);
                    let none = PlanarBuf::new(0, quantum);
                    let cx = CycleInfo {
                        frames: quantum,
                        rate: 8000,
                        ..CycleInfo::default()
                    };
                    for _ in 0..3 {
                        a.process(&cx, none.view(quantum), &mut out.view_mut(quantum));
                    }
                    let expect = 3.0 * quantum as f64 * ratio;
                    let consumed = a.consumed as f64;
                    assert!(
                        (consumed - expect).abs() < 0.02 * expect,
                        "{what}: consumed {consumed}, expected {expect}"
                    );

                    let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
                    let mut r = RecordAdapter::new(Tally(n.clone()), &fmt, &mono, 8000, quantum, q)
                        .unwrap();
                    if variable {
                        r = r.variable_rate(q).unwrap();
                    }
                    let input = PlanarBuf::new(1, quantum);
                    let mut none = PlanarBuf::new(0, quantum);
                    for _ in 0..3 {
                        r.process(&cx, input.view(quantum), &mut none.view_mut(quantum));
                    }
                    let wrote = n.load(Ordering::Relaxed) as f64;
                    assert!(
                        (wrote - expect).abs() < 0.02 * expect,
                        "{what}: recorded {wrote}, expected {expect}"
                    );
                }
            }
        }
    }
}
