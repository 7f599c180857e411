//! Stream adapters: turn a client's interleaved frames at its own rate and channel
//! layout into the node's planar ports at the engine rate, and back for recording.
//!
//! Front-ends provide the transport ([`FrameSource`] / [`FrameSink`], e.g. a
//! shared-memory ring); conversion happens here, once per path: channel mixing and at
//! most one resampler, only when the rates differ.

use crate::node::{CycleInfo, Processor};
use quaver_dsp::channels::ChannelMixer;
use quaver_dsp::format::{deinterleave, interleave};
use quaver_dsp::resample::{ResampleQuality, StreamResampler};
use quaver_dsp::{ChannelMap, Planar, PlanarBuf, PlanarMut};

/// Where a playback stream's frames come from. Every method is *RT*.
pub trait FrameSource: Send {
    /// Interleaved frames ready to read.
    fn available(&self) -> usize;
    /// Reads up to `out.len() / channels` interleaved frames; returns frames read.
    fn read(&mut self, out: &mut [f32]) -> usize;
    /// True once the client has written its last frame and waits for it to play.
    fn draining(&self) -> bool;
    /// Publishes progress: stream frames that have reached the listener, the delay in
    /// stream frames still ahead of them, the xrun count, and whether playback started.
    fn report(&mut self, played: u64, delay: u32, xruns: u32, started: bool);
    /// The stream's rate now, for streams whose client may change it while playing
    /// (see [`PlaybackAdapter::variable_rate`]); `None` keeps the creation rate.
    fn rate(&self) -> Option<u32> {
        None
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
    /// Builds the resampler even when the rates match now, and grows the client-side
    /// scratch for up to [`MAX_RATE_CHANGE`] more client frames per cycle.
    fn prepare(
        &self,
        resampler: &mut Option<StreamResampler>,
        scratch: &mut Vec<f32>,
        quality: ResampleQuality,
    ) -> Result<(), quaver_dsp::resample::ResampleError> {
        if resampler.is_none() {
            *resampler = Some(StreamResampler::new(
                self.from,
                self.to,
                self.channels,
                quality,
                self.max_quantum,
            )?);
        }
        let need = (self.max_quantum as f64 * MAX_RATE_CHANGE * self.client_rate as f64
            / self.engine_rate as f64) as usize
            + 1024;
        if scratch.len() < need * self.channels {
            *scratch = vec![0.0; need * self.channels];
        }
        Ok(())
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
        let resampler = if format.rate != engine_rate {
            Some(StreamResampler::new(
                format.rate,
                engine_rate,
                ch,
                quality,
                max_quantum,
            )?)
        } else {
            None
        };
        // Input needed for one output cycle, plus slack for the resampler's chunking.
        let max_in = max_quantum * (format.rate as usize).div_ceil(engine_rate as usize) + 1024;
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
        })
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

impl<S: FrameSource> Processor for PlaybackAdapter<S> {
    fn process(&mut self, cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        let q = cx.frames;
        self.follow_rate();
        let draining = self.source.draining();
        if !self.started {
            if self.source.available() >= self.prebuf.max(1)
                || (draining && self.source.available() > 0)
            {
                self.started = true;
            } else {
                outputs.fill_silence();
                let played = self.consumed;
                self.source.report(played, 0, self.xruns, false);
                return;
            }
        }
        let mut client = self.client.view_mut(q);
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
        self.mixer.process(client.as_planar(), outputs);
        // Once a draining stream's ring is empty, the frames still in flight play out
        // cycle by cycle; count them so `played` reaches the last frame and drain ends.
        if draining && self.source.available() == 0 {
            self.tail += q;
        } else {
            self.tail = 0;
        }
        let in_flight = cx.playback_delay + self.resampler.as_ref().map_or(0, |r| r.delay_frames());
        let delay = self.to_stream_frames(in_flight.saturating_sub(self.tail));
        let played = self.consumed.saturating_sub(delay);
        self.source
            .report(played, delay.min(u32::MAX as u64) as u32, self.xruns, true);
    }

    fn ready(&self, frames: usize) -> bool {
        let need = (frames as u64 * self.in_rate as u64).div_ceil(self.out_rate as u64) as usize;
        let slack = if self.resampler.is_some() { 256 } else { 0 };
        self.source.draining() || self.source.available() >= need + slack
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
            Some(StreamResampler::new(
                engine_rate,
                format.rate,
                ch,
                quality,
                max_quantum,
            )?)
        } else {
            None
        };
        let max_out = max_quantum * (format.rate as usize).div_ceil(engine_rate as usize) + 1024;
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
}
