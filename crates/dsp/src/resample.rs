//! Sample-rate conversion for streams.
//!
//! Two cores behind one type:
//! - **Adjustable** ([`StreamResampler::new`]): rubato's `Async` resampler (never `Fft`),
//!   for a stream whose ratio moves at run time
//!   ([`StreamResampler::set_ratio_relative`]: clock drift, variable-rate streams),
//!   which only `Async` supports; `Fft` works in fixed blocks that add a block of
//!   latency on top of the filter delay.
//! - **Fixed** ([`StreamResampler::new_fixed`]): at `medium` quality, an exact
//!   polyphase filter whose table is shared by every stream with the same two rates
//!   (`polyphase.rs` says why rubato is not used there); other qualities and rare
//!   ratios fall back to rubato.
//!
//! The resampler runs with a fixed *output* chunk that is resized to each call's
//! request. That makes the pull side exact (one call produces exactly the frames asked
//! for, reading exactly the input it needs, with no output FIFO and no latency beyond
//! the filter's), and the push side uses a small input FIFO for the fraction of a
//! frame that is not yet enough to produce output.

use crate::buffer::{Planar, PlanarMut};
use audioadapter_buffers::direct::SequentialSlice;
use rubato::{
    Adjustable, Async, FixedAsync, Indexing, PolynomialDegree, Resampler, Resizable,
    SincInterpolationParameters, SincInterpolationType, WindowFunction,
};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How far [`StreamResampler::set_ratio_relative`] may move the ratio either way.
/// ±10 % covers any real clock drift (usually well under 0.1 %) with room for a
/// catch-up; a wider range would only grow the buffers.
pub const MAX_RELATIVE_RATIO: f64 = 1.1;

/// Most sub-phases `medium` tabulates to resample exactly (32 taps each: 80 KiB of
/// table per stream at this bound); rarer ratios interpolate between 128.
const MAX_EXACT_PHASES: usize = 640;

/// Largest ratio one converter stage spans. Beyond it the converter is a cascade of
/// stages (e.g. 1 Hz → 48 kHz in four): one stage would size its buffers in proportion
/// to the ratio (gigabytes for 1 Hz), and its fixed-length filter, its cutoff scaled by
/// the ratio, would no longer filter anything.
pub const MAX_STAGE_RATIO: u32 = 16;

/// The largest block a cascade's stage converts in one call; its buffers are sized for
/// this, whatever the quantum (see [`StreamResampler::cascade`]).
const CASCADE_BLOCK: usize = 1024;

/// Taps of `medium` at exact sub-phases. Without interpolation error 32 taps keep
/// images below −80 dB up to 15 kHz and −70 dB at 19 kHz (tested below).
const MEDIUM_TAPS: usize = 32;

use crate::polyphase::{Polyphase, gcd};

/// Trade-off between CPU time and conversion quality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResampleQuality {
    /// Cubic polynomial interpolation: cheapest, no anti-aliasing filter.
    Fast,
    /// Windowed sinc: 32 taps on exact sub-phases for common rate pairs at a ratio that
    /// never moves, else 64 taps with linear interpolation between 128 sub-phases.
    #[default]
    Medium,
    /// Windowed sinc of 256 taps, cubic interpolation between 256 sub-phases.
    High,
}

impl ResampleQuality {
    /// Every quality, cheapest first.
    pub const ALL: [ResampleQuality; 3] = [
        ResampleQuality::Fast,
        ResampleQuality::Medium,
        ResampleQuality::High,
    ];

    /// The lowercase name ("fast", "medium", "high").
    pub fn name(&self) -> &'static str {
        match self {
            ResampleQuality::Fast => "fast",
            ResampleQuality::Medium => "medium",
            ResampleQuality::High => "high",
        }
    }
}

impl fmt::Display for ResampleQuality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ResampleQuality {
    type Err = ResampleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fast" => Ok(ResampleQuality::Fast),
            "medium" => Ok(ResampleQuality::Medium),
            "high" => Ok(ResampleQuality::High),
            _ => Err(ResampleError::UnknownQuality(s.to_string())),
        }
    }
}

/// Why a resampler could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ResampleError {
    /// A sample rate of zero.
    #[error("invalid sample rates {from} -> {to} Hz")]
    InvalidRate {
        /// Input rate.
        from: u32,
        /// Output rate.
        to: u32,
    },
    /// Zero channels.
    #[error("a resampler needs at least one channel")]
    NoChannels,
    /// A zero `max_frames`.
    #[error("max_frames must be at least 1")]
    NoFrames,
    /// A quality name that is not "fast", "medium" or "high".
    #[error("unknown resample quality '{0}' (expected fast, medium or high)")]
    UnknownQuality(String),
    /// rubato refused the parameters.
    #[error("resampler construction failed: {0}")]
    Rubato(#[from] rubato::ResamplerConstructionError),
}

/// A sample-rate converter for one stream, usable from the real-time thread. Use an
/// instance either for pull or for push: a pull discards input queued by a push.
pub struct StreamResampler {
    core: Core,
    from_rate: u32,
    to_rate: u32,
    channels: usize,
    quality: ResampleQuality,
    max_frames: usize,
}

enum Core {
    Sinc(Box<SincCore>),
    Exact(Box<Polyphase>),
    /// Stages of at most [`MAX_STAGE_RATIO`] each, in signal order.
    Cascade(Vec<StreamResampler>),
}

/// rubato's `Async` with its input FIFO and output scratch.
struct SincCore {
    inner: Async<f32>,
    channels: usize,
    /// Input scratch (pull) or input FIFO (push): `channels` runs of `in_cap` frames.
    in_buf: Vec<f32>,
    in_cap: usize,
    /// Frames waiting in `in_buf` (push mode only).
    fifo_len: usize,
    /// Output scratch: `channels` runs of `out_cap` frames.
    out_buf: Vec<f32>,
    out_cap: usize,
    /// The output chunk size rubato is currently set to.
    chunk: usize,
    relative: f64,
}

impl fmt::Debug for StreamResampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamResampler")
            .field("from_rate", &self.from_rate)
            .field("to_rate", &self.to_rate)
            .field("channels", &self.channels)
            .field("quality", &self.quality)
            .field("max_frames", &self.max_frames)
            .field("adjustable", &self.is_adjustable())
            .field("ratio", &self.ratio())
            .finish()
    }
}

impl StreamResampler {
    fn check(
        from_rate: u32,
        to_rate: u32,
        channels: usize,
        max_frames: usize,
    ) -> Result<(), ResampleError> {
        if from_rate == 0 || to_rate == 0 {
            return Err(ResampleError::InvalidRate {
                from: from_rate,
                to: to_rate,
            });
        }
        if channels == 0 {
            return Err(ResampleError::NoChannels);
        }
        if max_frames == 0 {
            return Err(ResampleError::NoFrames);
        }
        Ok(())
    }

    /// Builds an adjustable converter (see [`StreamResampler::set_ratio_relative`]) from
    /// `from_rate` to `to_rate` for up to `max_frames` output frames per pull or input
    /// frames per push. All allocation happens here.
    pub fn new(
        from_rate: u32,
        to_rate: u32,
        channels: usize,
        quality: ResampleQuality,
        max_frames: usize,
    ) -> Result<Self, ResampleError> {
        Self::build(from_rate, to_rate, channels, quality, max_frames, false)
    }

    /// Builds a converter whose ratio never moves: the shared exact polyphase filter at
    /// `medium` quality for rate pairs with at most 640 sub-phases (44.1 → 48 kHz has 160),
    /// otherwise the same as [`StreamResampler::new`]. All allocation happens here.
    pub fn new_fixed(
        from_rate: u32,
        to_rate: u32,
        channels: usize,
        quality: ResampleQuality,
        max_frames: usize,
    ) -> Result<Self, ResampleError> {
        Self::build(from_rate, to_rate, channels, quality, max_frames, true)
    }

    fn build(
        from_rate: u32,
        to_rate: u32,
        channels: usize,
        quality: ResampleQuality,
        max_frames: usize,
        fixed: bool,
    ) -> Result<Self, ResampleError> {
        Self::check(from_rate, to_rate, channels, max_frames)?;
        if from_rate.max(to_rate) > from_rate.min(to_rate).saturating_mul(MAX_STAGE_RATIO) {
            return Self::cascade(from_rate, to_rate, channels, quality, max_frames, fixed);
        }
        let exact = fixed
            && quality == ResampleQuality::Medium
            && from_rate != to_rate
            && Polyphase::phases(from_rate, to_rate) <= MAX_EXACT_PHASES;
        let core = if exact {
            Core::Exact(Box::new(Polyphase::new(
                from_rate,
                to_rate,
                channels,
                MEDIUM_TAPS,
                max_frames,
            )))
        } else {
            Core::Sinc(Box::new(SincCore::new(
                from_rate, to_rate, channels, quality, max_frames, !fixed,
            )?))
        };
        Ok(StreamResampler {
            core,
            from_rate,
            to_rate,
            channels,
            quality,
            max_frames,
        })
    }

    /// A converter of several stages for a ratio beyond [`MAX_STAGE_RATIO`]. Every
    /// stage is built for blocks of at most [`CASCADE_BLOCK`] frames and larger calls
    /// are cut into such blocks as they pass through, so no buffer grows with the
    /// overall ratio (a pull of one 48 kHz quantum from a 1 Hz stream, or a push of one
    /// into a 1 Hz record stream, stays small at every stage).
    fn cascade(
        from_rate: u32,
        to_rate: u32,
        channels: usize,
        quality: ResampleQuality,
        max_frames: usize,
        fixed: bool,
    ) -> Result<Self, ResampleError> {
        let rates = stage_rates(from_rate, to_rate);
        let block = max_frames.min(CASCADE_BLOCK);
        let stages = rates
            .windows(2)
            .map(|w| Self::build(w[0], w[1], channels, quality, block, fixed))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StreamResampler {
            core: Core::Cascade(stages),
            from_rate,
            to_rate,
            channels,
            quality,
            max_frames,
        })
    }

    /// Samples held in buffers (ours and rubato's), to bound memory in tests.
    #[cfg(test)]
    fn footprint(&self) -> usize {
        match &self.core {
            Core::Sinc(c) => {
                c.in_buf.len()
                    + c.out_buf.len()
                    + c.channels * (c.inner.input_frames_max() + c.inner.output_frames_max())
            }
            Core::Exact(p) => p.footprint(),
            Core::Cascade(stages) => stages.iter().map(StreamResampler::footprint).sum(),
        }
    }

    /// Most frames one pull hands its callback to fill: what the caller's scratch for
    /// the input must hold.
    pub fn max_pull_input(&self) -> usize {
        match &self.core {
            Core::Sinc(c) => c.in_cap,
            Core::Exact(p) => p.max_pull_input(),
            Core::Cascade(stages) => stages.first().map_or(0, StreamResampler::max_pull_input),
        }
    }

    /// Most frames one push hands its callback in one piece: what the caller's scratch
    /// for the output must hold.
    pub fn max_push_output(&self) -> usize {
        match &self.core {
            Core::Sinc(c) => c.out_cap,
            Core::Exact(p) => p.max_push_output(),
            Core::Cascade(stages) => stages.last().map_or(0, StreamResampler::max_push_output),
        }
    }

    /// How many stages convert (1 unless the ratio is beyond [`MAX_STAGE_RATIO`]).
    pub fn stages(&self) -> usize {
        match &self.core {
            Core::Cascade(stages) => stages.len(),
            _ => 1,
        }
    }

    /// Whether [`StreamResampler::set_ratio_relative`] takes effect.
    pub fn is_adjustable(&self) -> bool {
        match &self.core {
            Core::Sinc(_) => true,
            Core::Exact(_) => false,
            Core::Cascade(stages) => stages.iter().all(StreamResampler::is_adjustable),
        }
    }

    /// Input sample rate.
    pub fn from_rate(&self) -> u32 {
        self.from_rate
    }

    /// Output sample rate.
    pub fn to_rate(&self) -> u32 {
        self.to_rate
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The quality chosen at construction.
    pub fn quality(&self) -> ResampleQuality {
        self.quality
    }

    /// Largest frame count one call may ask for.
    pub fn max_frames(&self) -> usize {
        self.max_frames
    }

    /// The current output/input ratio, including any relative adjustment.
    pub fn ratio(&self) -> f64 {
        match &self.core {
            Core::Sinc(c) => c.inner.resample_ratio(),
            Core::Exact(p) => p.ratio(),
            Core::Cascade(stages) => stages.iter().map(StreamResampler::ratio).product(),
        }
    }

    /// Produces exactly `out.frames()` (at most `max_frames`) output frames, calling
    /// `pull` once with a planar scratch buffer of the input frames needed. `pull`
    /// returns how many frames it filled; the rest count as silence. Never allocates.
    pub fn process_pull(
        &mut self,
        out: &mut PlanarMut,
        pull: &mut dyn FnMut(&mut PlanarMut) -> usize,
    ) {
        let frames = out.frames();
        assert!(
            frames <= self.max_frames,
            "process_pull: {frames} > max_frames"
        );
        assert_eq!(out.channels(), self.channels, "process_pull: channels");
        if frames == 0 {
            return;
        }
        match &mut self.core {
            Core::Sinc(c) => c.process_pull(out, pull),
            Core::Exact(p) => p.pull(out, pull),
            Core::Cascade(stages) => {
                pull_through(stages, out, pull);
            }
        }
    }

    /// Feeds `input` (at most `max_frames` frames) and hands every output frame that
    /// is ready to `out`, possibly in several pieces. Never allocates.
    pub fn process_push(&mut self, input: Planar, out: &mut dyn FnMut(Planar)) {
        let frames = input.frames();
        assert!(
            frames <= self.max_frames,
            "process_push: {frames} > max_frames"
        );
        assert_eq!(input.channels(), self.channels, "process_push: channels");
        match &mut self.core {
            Core::Sinc(c) => c.process_push(input, out),
            Core::Exact(p) => p.push(input, out),
            Core::Cascade(stages) => push_through(stages, input, out),
        }
    }

    /// Latency in output-rate frames: the filter's group delay plus, in push mode,
    /// the input still waiting for the next output frame.
    pub fn delay_frames(&self) -> usize {
        match &self.core {
            Core::Sinc(c) => c.delay_frames(),
            Core::Exact(p) => p.delay_frames(),
            // Each stage's delay in its own output frames, scaled to the last stage's.
            Core::Cascade(stages) => stages
                .iter()
                .map(|s| s.delay_frames() as f64 * self.to_rate as f64 / s.to_rate as f64)
                .sum::<f64>()
                .round() as usize,
        }
    }

    /// Scales the ratio to `r` times the nominal `to_rate / from_rate` (clamped to
    /// [1/`MAX_RELATIVE_RATIO`, `MAX_RELATIVE_RATIO`]); `r > 1` makes more output per
    /// input. The change is ramped over the next chunk so it does not click. A fixed
    /// converter ([`StreamResampler::new_fixed`]) ignores it.
    pub fn set_ratio_relative(&mut self, r: f64) {
        match &mut self.core {
            Core::Sinc(c) => c.set_ratio_relative(r),
            Core::Exact(_) => {}
            // One stage carries the whole adjustment; every stage is sized for it.
            Core::Cascade(stages) => {
                if let Some(s) = stages.first_mut() {
                    s.set_ratio_relative(r);
                }
            }
        }
    }

    /// Forgets all buffered audio and any ratio adjustment, as after a seek or flush.
    pub fn reset(&mut self) {
        match &mut self.core {
            Core::Sinc(c) => c.reset(),
            Core::Exact(p) => p.reset(),
            Core::Cascade(stages) => stages.iter_mut().for_each(StreamResampler::reset),
        }
    }
}

/// The rates of a cascade from `from` to `to`, both included: between them the higher
/// rate divided by 16, 256, … (rounded up), so that no stage spans more than
/// [`MAX_STAGE_RATIO`] and the stage at the higher rate has an exact ratio where that
/// rate is a multiple of 16 (48 kHz → 3 kHz).
fn stage_rates(from: u32, to: u32) -> Vec<u32> {
    let (hi, lo) = (from.max(to) as u64, from.min(to).max(1) as u64);
    let step = MAX_STAGE_RATIO as u64;
    let mut between = Vec::new();
    let mut div = step;
    while hi > lo * div {
        between.push(hi.div_ceil(div) as u32);
        div *= step;
    }
    let mut rates = vec![hi as u32];
    rates.extend(between);
    rates.push(lo as u32);
    if from < to {
        rates.reverse();
    }
    rates
}

/// Pulls `out` through `stages` (in signal order): the last stage pulls from the one
/// before it, and the first from `pull`, each in blocks of at most its `max_frames`.
/// Returns how many frames were filled: what `pull` filled for the first stage (its
/// shortfall counts as silence there), all of them for every later stage.
fn pull_through(
    stages: &mut [StreamResampler],
    out: &mut PlanarMut,
    pull: &mut dyn FnMut(&mut PlanarMut) -> usize,
) -> usize {
    let Some((last, before)) = stages.split_last_mut() else {
        return pull(out);
    };
    let (total, block) = (out.frames(), last.max_frames);
    let mut done = 0;
    while done < total {
        let n = block.min(total - done);
        let mut part = out.part_mut(done, n);
        last.process_pull(&mut part, &mut |buf: &mut PlanarMut| {
            pull_through(before, buf, pull)
        });
        done += n;
    }
    total
}

/// Pushes `input` through `stages` (in signal order), each in blocks of at most its
/// `max_frames`, handing the last stage's output to `out`.
fn push_through(stages: &mut [StreamResampler], input: Planar, out: &mut dyn FnMut(Planar)) {
    let Some((first, after)) = stages.split_first_mut() else {
        return out(input);
    };
    let (total, block) = (input.frames(), first.max_frames);
    let mut done = 0;
    while done < total {
        let n = block.min(total - done);
        first.process_push(input.part(done, n), &mut |p: Planar| {
            push_through(after, p, out)
        });
        done += n;
    }
}

impl SincCore {
    fn new(
        from_rate: u32,
        to_rate: u32,
        channels: usize,
        quality: ResampleQuality,
        max_frames: usize,
        adjustable: bool,
    ) -> Result<Self, ResampleError> {
        let ratio = to_rate as f64 / from_rate as f64;
        // A push of max_frames input frames may produce up to max_frames·ratio output
        // frames; the output chunk must cover both that and a pull of max_frames.
        let max_chunk =
            max_frames.max((max_frames as f64 * ratio * MAX_RELATIVE_RATIO).ceil() as usize);
        let sinc = |len, interpolation, oversampling_factor, window| SincInterpolationParameters {
            sinc_len: len,
            f_cutoff: None,
            oversampling_factor,
            interpolation,
            window,
        };
        let fixed = FixedAsync::Output;
        let inner = match quality {
            ResampleQuality::Fast => Async::new_poly(
                ratio,
                MAX_RELATIVE_RATIO,
                PolynomialDegree::Cubic,
                max_chunk,
                channels,
                fixed,
            )?,
            ResampleQuality::Medium => {
                // A fixed rational ratio only ever needs to_rate / gcd sub-phases
                // (160 for 44.1 → 48 kHz). With exactly that many, "nearest" picks the
                // exact phase: no interpolation error, one dot product per channel
                // instead of linear interpolation's two. Without interpolation error
                // 32 taps keep images below −80 dB up to 19 kHz (tested below), and
                // the dot product is most of the daemon's CPU with many streams.
                // A ratio that moves falls between those phases: "nearest" then rounds
                // every output frame's position to 1/phases of a frame, and at equal
                // rates (one phase) to a whole frame, so a drift correction of 500 ppm
                // dropped or repeated a frame every 2000 (heard as clicks; tested
                // below). Adjustable converters interpolate.
                let phases = (to_rate / gcd(from_rate, to_rate)) as usize;
                let params = if !adjustable && phases <= MAX_EXACT_PHASES {
                    sinc(
                        MEDIUM_TAPS,
                        SincInterpolationType::Nearest,
                        phases,
                        WindowFunction::BlackmanHarris2,
                    )
                } else {
                    // The squared window's main lobe is twice as wide: at 64 taps, with
                    // rubato's cutoff for it, 18 kHz came out 11 dB down.
                    sinc(
                        64,
                        SincInterpolationType::Linear,
                        128,
                        WindowFunction::BlackmanHarris,
                    )
                };
                Async::new_sinc(
                    ratio,
                    MAX_RELATIVE_RATIO,
                    &params,
                    max_chunk,
                    channels,
                    fixed,
                )?
            }
            ResampleQuality::High => Async::new_sinc(
                ratio,
                MAX_RELATIVE_RATIO,
                &sinc(
                    256,
                    SincInterpolationType::Cubic,
                    256,
                    WindowFunction::BlackmanHarris2,
                ),
                max_chunk,
                channels,
                fixed,
            )?,
        };
        // The FIFO holds one push on top of what is left over from the previous one,
        // which is less than one chunk's worth of input.
        let in_cap = inner.input_frames_max() + max_frames + 16;
        let out_cap = inner.output_frames_max();
        Ok(SincCore {
            chunk: max_chunk,
            inner,
            channels,
            in_buf: vec![0.0; channels * in_cap],
            in_cap,
            fifo_len: 0,
            out_buf: vec![0.0; channels * out_cap],
            out_cap,
            relative: 1.0,
        })
    }

    fn set_chunk(&mut self, frames: usize) {
        if frames != self.chunk {
            // Cannot fail: 1 <= frames <= the chunk size given at construction.
            let res = self.inner.set_chunk_size(frames);
            debug_assert!(res.is_ok());
            self.chunk = frames;
        }
    }

    fn process_pull(&mut self, out: &mut PlanarMut, pull: &mut dyn FnMut(&mut PlanarMut) -> usize) {
        let frames = out.frames();
        self.fifo_len = 0;
        self.set_chunk(frames);
        let need = self.inner.input_frames_next();
        debug_assert!(need <= self.in_cap);
        let filled = {
            let mut scratch = PlanarMut::new(&mut self.in_buf, self.channels, need, self.in_cap);
            pull(&mut scratch).min(need)
        };
        let indexing = Indexing {
            input_offset: 0,
            output_offset: 0,
            partial_len: Some(filled),
            active_channels_mask: None,
        };
        match self.run(&indexing) {
            Some((_, produced)) => {
                debug_assert_eq!(produced, frames);
                for ch in 0..self.channels {
                    let start = ch * self.out_cap;
                    out.channel_mut(ch)
                        .copy_from_slice(&self.out_buf[start..start + frames]);
                }
            }
            None => out.fill_silence(),
        }
    }

    fn process_push(&mut self, input: Planar, out: &mut dyn FnMut(Planar)) {
        let frames = input.frames();
        assert!(
            self.fifo_len + frames <= self.in_cap,
            "process_push: FIFO overflow"
        );
        for ch in 0..self.channels {
            let start = ch * self.in_cap + self.fifo_len;
            self.in_buf[start..start + frames].copy_from_slice(input.channel(ch));
        }
        self.fifo_len += frames;

        let mut read = 0;
        loop {
            let avail = self.fifo_len - read;
            let n = self.chunk_for_input(avail);
            if n == 0 {
                break;
            }
            let indexing = Indexing {
                input_offset: read,
                output_offset: 0,
                partial_len: None,
                active_channels_mask: None,
            };
            match self.run(&indexing) {
                Some((consumed, produced)) => {
                    read += consumed;
                    out(Planar::new(
                        &self.out_buf,
                        self.channels,
                        produced,
                        self.out_cap,
                    ));
                }
                None => {
                    read = self.fifo_len;
                    break;
                }
            }
        }
        if read > 0 {
            for ch in 0..self.channels {
                let start = ch * self.in_cap;
                self.in_buf
                    .copy_within(start + read..start + self.fifo_len, start);
            }
            self.fifo_len -= read;
        }
    }

    /// The largest output chunk that `avail` buffered input frames can produce, and
    /// sets rubato to it (0 if not even one frame is ready).
    fn chunk_for_input(&mut self, avail: usize) -> usize {
        let ratio = self.inner.resample_ratio();
        let mut n = ((avail as f64 * ratio) as usize + 1).min(self.out_cap);
        while n > 0 {
            self.set_chunk(n);
            let need = self.inner.input_frames_next();
            if need <= avail {
                return n;
            }
            let cut = (((need - avail) as f64 * ratio).ceil() as usize).max(1);
            n = n.saturating_sub(cut);
        }
        0
    }

    /// One rubato call from `in_buf` into `out_buf`; `None` only on a size bug.
    fn run(&mut self, indexing: &Indexing) -> Option<(usize, usize)> {
        let input = SequentialSlice::new(&self.in_buf[..], self.channels, self.in_cap).ok()?;
        let mut output =
            SequentialSlice::new_mut(&mut self.out_buf[..], self.channels, self.out_cap).ok()?;
        let res = self
            .inner
            .process_into_buffer(&input, &mut output, Some(indexing));
        debug_assert!(res.is_ok(), "rubato: {res:?}");
        res.ok()
    }

    /// Latency in output-rate frames: the filter's group delay plus, in push mode,
    /// the input still waiting in the FIFO.
    fn delay_frames(&self) -> usize {
        let ratio = self.inner.resample_ratio();
        self.inner.output_delay() + (self.fifo_len as f64 * ratio).round() as usize
    }

    /// Scales the ratio to `r` times the nominal `to_rate / from_rate` (clamped to
    /// [1/`MAX_RELATIVE_RATIO`, `MAX_RELATIVE_RATIO`]); `r > 1` makes more output per
    /// input. The change is ramped over the next chunk so it does not click.
    fn set_ratio_relative(&mut self, r: f64) {
        let r = if r.is_finite() {
            r.clamp(1.0 / MAX_RELATIVE_RATIO, MAX_RELATIVE_RATIO)
        } else {
            1.0
        };
        if r != self.relative {
            let res = self.inner.set_resample_ratio_relative(r, true);
            debug_assert!(res.is_ok());
            self.relative = r;
        }
    }

    /// Forgets all buffered audio and any ratio adjustment, as after a seek or flush.
    fn reset(&mut self) {
        self.inner.reset();
        self.chunk = self.inner.output_frames_next();
        self.fifo_len = 0;
        self.relative = 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{find_impulse, sine, thd_n_db};
    use crate::buffer::PlanarBuf;

    type Ctor =
        fn(u32, u32, usize, ResampleQuality, usize) -> Result<StreamResampler, ResampleError>;
    /// Both constructors: every behaviour below holds for the adjustable and the fixed core.
    const CTORS: [(&str, Ctor); 2] = [
        ("adjustable", StreamResampler::new),
        ("fixed", StreamResampler::new_fixed),
    ];

    /// Every quality with both constructors.
    fn every_kind() -> impl Iterator<Item = (ResampleQuality, (&'static str, Ctor))> {
        ResampleQuality::ALL
            .into_iter()
            .flat_map(|q| CTORS.map(|c| (q, c)))
    }

    /// Resamples `input` (mono) by pulling blocks of the sizes in `blocks` in turn.
    fn pull_all(
        r: &mut StreamResampler,
        input: &[f32],
        out_frames: usize,
        blocks: &[usize],
    ) -> Vec<f32> {
        let mut pos = 0;
        let mut out = Vec::with_capacity(out_frames);
        let mut buf = PlanarBuf::new(1, r.max_frames());
        let mut k = 0;
        while out.len() < out_frames {
            let n = blocks[k % blocks.len()].min(out_frames - out.len());
            k += 1;
            let mut view = buf.view_mut(n);
            r.process_pull(&mut view, &mut |scratch: &mut PlanarMut| {
                let take = scratch.frames().min(input.len() - pos);
                scratch.channel_mut(0)[..take].copy_from_slice(&input[pos..pos + take]);
                pos += take;
                take
            });
            out.extend_from_slice(view.channel(0));
        }
        out
    }

    #[test]
    fn names() {
        for q in ResampleQuality::ALL {
            assert_eq!(q.to_string().parse::<ResampleQuality>().unwrap(), q);
            let json = serde_json::to_string(&q).unwrap();
            assert_eq!(json, format!("\"{q}\""));
            assert_eq!(serde_json::from_str::<ResampleQuality>(&json).unwrap(), q);
        }
        assert!("best".parse::<ResampleQuality>().is_err());
    }

    #[test]
    fn rejects_bad_parameters() {
        assert!(StreamResampler::new(0, 48000, 2, ResampleQuality::Fast, 256).is_err());
        assert!(StreamResampler::new(44100, 48000, 0, ResampleQuality::Fast, 256).is_err());
        assert!(StreamResampler::new(44100, 48000, 2, ResampleQuality::Fast, 0).is_err());
    }

    #[test]
    fn pull_produces_exact_counts_and_consumes_at_the_ratio() {
        for (q, (kind, make)) in every_kind() {
            let mut r = make(44100, 48000, 2, q, 1024).unwrap();
            // Return short now and then: the rest must count as silence.
            let (consumed, produced) =
                pull_counts(&mut r, &[1024, 1, 64, 441, 1000, 128, 7, 256], 200, true);
            let expect = produced as f64 * 44100.0 / 48000.0;
            assert!(
                (consumed as f64 - expect).abs() < 300.0,
                "{q} {kind}: {consumed} vs {expect}"
            );
        }
    }

    /// Pulls `calls` blocks of the sizes in `blocks` in turn, checking each comes out
    /// whole; returns (input frames asked for, output frames produced). With `short`,
    /// every fifth pull fills only half of what was asked.
    fn pull_counts(
        r: &mut StreamResampler,
        blocks: &[usize],
        calls: usize,
        short: bool,
    ) -> (usize, usize) {
        let mut buf = PlanarBuf::new(r.channels(), r.max_frames());
        let (mut consumed, mut produced) = (0usize, 0usize);
        for (i, n) in blocks.iter().cycle().take(calls).enumerate() {
            let mut v = buf.view_mut(*n);
            r.process_pull(&mut v, &mut |s: &mut PlanarMut| {
                consumed += s.frames();
                if short && i % 5 == 0 {
                    s.frames() / 2
                } else {
                    s.frames()
                }
            });
            assert_eq!(v.frames(), *n);
            produced += n;
        }
        (consumed, produced)
    }

    #[test]
    fn push_produces_output_at_the_ratio() {
        for (q, (kind, make)) in every_kind() {
            let mut r = make(48000, 44100, 2, q, 512).unwrap();
            let input = PlanarBuf::new(2, 512);
            let mut produced = 0usize;
            let mut pushed = 0usize;
            for n in [512usize, 1, 3, 100, 480, 256, 17].iter().cycle().take(300) {
                r.process_push(input.view(*n), &mut |p: Planar| {
                    assert_eq!(p.channels(), 2);
                    produced += p.frames();
                });
                pushed += n;
                // Everything except a fraction of a frame has been turned into output.
                let expect = pushed as f64 * 44100.0 / 48000.0;
                assert!(
                    (produced as f64 - expect).abs() < 3.0,
                    "{q} {kind}: {produced} vs {expect}"
                );
            }
        }
    }

    #[test]
    fn push_and_pull_agree() {
        for (kind, make) in CTORS {
            let input = sine(44100, 997.0, 0.5, 20_000);
            let mut a = make(44100, 48000, 1, ResampleQuality::Medium, 512).unwrap();
            let pulled = pull_all(&mut a, &input, 20_000, &[512, 100, 33]);
            let mut b = make(44100, 48000, 1, ResampleQuality::Medium, 512).unwrap();
            let mut pushed = Vec::new();
            let mut pos = 0;
            for n in [300usize, 512, 1, 77].iter().cycle() {
                if pos >= input.len() {
                    break;
                }
                let n = (*n).min(input.len() - pos);
                let view = Planar::new(&input[pos..], 1, n, input.len() - pos);
                b.process_push(view, &mut |p: Planar| {
                    pushed.extend_from_slice(p.channel(0))
                });
                pos += n;
            }
            let len = pushed.len().min(pulled.len());
            assert!(len > 15_000);
            for i in 0..len {
                assert!(
                    (pushed[i] - pulled[i]).abs() < 1e-4,
                    "{kind} frame {i}: {} vs {}",
                    pushed[i],
                    pulled[i]
                );
            }
        }
    }

    #[test]
    fn delay_matches_an_impulse() {
        for (q, (kind, make)) in every_kind() {
            for (from, to) in [
                (44100u32, 48000u32),
                (48000, 44100),
                (48000, 48000),
                (22050, 48000),
            ] {
                let at = 2000;
                let mut input = vec![0.0f32; 8000];
                input[at] = 1.0;
                let mut r = make(from, to, 1, q, 256).unwrap();
                let delay = r.delay_frames();
                let out = pull_all(&mut r, &input, 8000, &[256, 100]);
                let peak = find_impulse(&out, 0.3).expect("impulse");
                let expect = at as f64 * to as f64 / from as f64 + delay as f64;
                assert!(
                    (peak as f64 - expect).abs() <= 2.0,
                    "{q} {kind} {from}->{to}: peak at {peak}, expected {expect:.1} (delay {delay})"
                );
            }
        }
    }

    #[test]
    fn ratio_adjustment_changes_consumption() {
        let mut r = StreamResampler::new(48000, 48000, 1, ResampleQuality::Fast, 256).unwrap();
        r.set_ratio_relative(1.01);
        r.set_ratio_relative(5.0); // clamped
        assert!((r.ratio() - MAX_RELATIVE_RATIO).abs() < 1e-9 || r.ratio() < MAX_RELATIVE_RATIO);
        r.set_ratio_relative(1.01);
        let mut buf = PlanarBuf::new(1, 256);
        let mut consumed = 0;
        for _ in 0..100 {
            r.process_pull(&mut buf.view_mut(256), &mut |s: &mut PlanarMut| {
                consumed += s.frames();
                s.frames()
            });
        }
        assert!((r.ratio() - 1.01).abs() < 1e-9);
        let expect = 25600.0 / 1.01;
        assert!(
            (consumed as f64 - expect).abs() < 10.0,
            "{consumed} vs {expect}"
        );
        r.reset();
        assert_eq!(r.ratio(), 1.0);
    }

    /// A drift correction bends the ratio by a fraction of a frame per frame: every
    /// quality must follow it smoothly, at equal rates too (where `medium`'s exact
    /// phases are a single one).
    #[test]
    fn adjusted_ratios_keep_a_sine_clean() {
        for ((from, rel), q) in [(48000, 1.0005), (48000, 0.9997), (44100, 1.0005)]
            .into_iter()
            .flat_map(|x| ResampleQuality::ALL.map(|q| (x, q)))
        {
            let input = sine(from, 1000.0, 0.5, from as usize * 2);
            let mut r = StreamResampler::new(from, 48000, 1, q, 1024).unwrap();
            r.set_ratio_relative(rel);
            let out = pull_all(&mut r, &input, 90_000, &[1024, 480, 128]);
            // rel more output frames per input frame: the tone comes out lower by rel.
            let f = 1000.0 / rel;
            let thd = thd_n_db(&out[4000..out.len() - 4000], 48000, f);
            eprintln!("THD+N {q} {from} Hz at {rel}: {thd:.1} dB");
            let limit = if q == ResampleQuality::Fast {
                -40.0
            } else {
                -70.0
            };
            assert!(thd < limit, "{q} {from} Hz at {rel}: {thd:.1} dB");
        }
    }

    #[test]
    fn high_quality_44k1_to_48k_thd_n_below_minus_90_db() {
        let input = sine(44100, 1000.0, 0.5, 44100 * 2);
        for (q, (kind, make)) in every_kind() {
            let mut r = make(44100, 48000, 1, q, 1024).unwrap();
            let out = pull_all(&mut r, &input, 96000, &[1024, 480, 128]);
            let skip = 4000;
            // The input runs out just before the end; skip that too.
            let thd = thd_n_db(&out[skip..out.len() - skip], 48000, 1000.0);
            eprintln!("THD+N {q} {kind}: {thd:.1} dB");
            match q {
                ResampleQuality::High => assert!(thd < -90.0, "high: {thd} dB"),
                ResampleQuality::Medium => assert!(thd < -60.0, "medium: {thd} dB"),
                ResampleQuality::Fast => assert!(thd < -40.0, "fast: {thd} dB"),
            }
        }
    }

    /// Treble is where a short filter shows: its images fold back into the band.
    #[test]
    fn medium_keeps_treble_clean_44k1_to_48k() {
        for ((f, limit), (kind, make)) in [(15000.0, -80.0), (19000.0, -70.0)]
            .into_iter()
            .flat_map(|x| CTORS.map(|c| (x, c)))
        {
            let input = sine(44100, f, 0.5, 44100 * 2);
            let mut r = make(44100, 48000, 1, ResampleQuality::Medium, 1024).unwrap();
            let out = pull_all(&mut r, &input, 96000, &[1024, 480, 128]);
            let skip = 4000;
            let thd = thd_n_db(&out[skip..out.len() - skip], 48000, f);
            eprintln!("THD+N medium {kind} at {f} Hz: {thd:.1} dB");
            assert!(thd < limit, "medium {kind} at {f} Hz: {thd} dB");
        }
    }

    /// A 32-tap filter with a wide transition band had put 44.1 kHz streams' −3 dB
    /// point at 12 kHz: every constructor and quality keeps the level within 0.5 dB to
    /// 17 kHz, both ways between 44.1 and 48 kHz.
    #[test]
    fn every_converter_is_flat_to_17_khz() {
        for ((from, to), (q, (kind, make))) in [(44100, 48000), (48000, 44100)]
            .into_iter()
            .flat_map(|x| every_kind().map(move |k| (x, k)))
            .filter(|(_, (q, _))| *q != ResampleQuality::Fast)
        {
            for f in [1000.0, 10_000.0, 15_000.0, 17_000.0] {
                let input = sine(from, f, 0.5, 40_000);
                let mut r = make(from, to, 1, q, 512).unwrap();
                let out = pull_all(&mut r, &input, 36_000, &[512, 100]);
                let w = &out[4000..32_000];
                let rms = (w.iter().map(|x| x * x).sum::<f32>() / w.len() as f32).sqrt();
                let db = 20.0 * (rms / (0.5 / 2f32.sqrt())).log10();
                eprintln!("{q} {kind} {from} → {to} at {f} Hz: {db:+.2} dB");
                assert!(
                    db.abs() < 0.5,
                    "{q} {kind} {from} → {to} at {f} Hz: {db:+.2} dB"
                );
            }
        }
    }

    #[test]
    fn fixed_medium_is_the_shared_exact_filter_and_the_rest_fall_back() {
        let fixed = |from, to, q| StreamResampler::new_fixed(from, to, 2, q, 256).unwrap();
        assert!(!fixed(44100, 48000, ResampleQuality::Medium).is_adjustable());
        assert!(!fixed(48000, 44100, ResampleQuality::Medium).is_adjustable());
        assert!(fixed(44100, 48000, ResampleQuality::High).is_adjustable());
        assert!(fixed(44100, 48000, ResampleQuality::Fast).is_adjustable());
        // 44 101 Hz needs 48 000 sub-phases: too many to tabulate.
        assert!(fixed(44101, 48000, ResampleQuality::Medium).is_adjustable());
        assert!(
            StreamResampler::new(44100, 48000, 2, ResampleQuality::Medium, 256)
                .unwrap()
                .is_adjustable()
        );
        // A fixed converter ignores ratio changes.
        let mut r = fixed(44100, 48000, ResampleQuality::Medium);
        r.set_ratio_relative(1.05);
        assert_eq!(r.ratio(), 48000.0 / 44100.0);
    }

    #[test]
    fn fixed_and_adjustable_medium_sound_the_same() {
        for f in [100.0, 3000.0, 15000.0] {
            let input = sine(44100, f, 0.5, 20_000);
            let rms = |make: Ctor| {
                let mut r = make(44100, 48000, 1, ResampleQuality::Medium, 512).unwrap();
                let out = pull_all(&mut r, &input, 20_000, &[512, 100]);
                let w = &out[2000..18_000];
                (w.iter().map(|x| x * x).sum::<f32>() / w.len() as f32).sqrt()
            };
            let (a, b) = (rms(StreamResampler::new), rms(StreamResampler::new_fixed));
            // Different filters since the adjustable one interpolates (64 taps between
            // 128 sub-phases, the fixed one 32 exact taps), but the same gain in the
            // passband; their delays differ, so the samples themselves are not compared.
            assert!((a - b).abs() < 1e-3 * a, "{f} Hz: rms {a} vs {b}");
        }
    }

    #[test]
    fn extreme_ratios_are_cascades_of_stages_within_16() {
        assert_eq!(stage_rates(1, 48_000), [1, 12, 188, 3000, 48_000]);
        assert_eq!(stage_rates(48_000, 1), [48_000, 3000, 188, 12, 1]);
        assert_eq!(stage_rates(384_000, 8000), [384_000, 24_000, 8000]);
        assert_eq!(stage_rates(2999, 48_000), [2999, 3000, 48_000]);
        for (from, to) in [
            (1u32, 384_000u32),
            (384_000, 1),
            (7, 44_100),
            (48_000, 2999),
        ] {
            let r = stage_rates(from, to);
            assert_eq!((r[0], *r.last().unwrap()), (from, to));
            for w in r.windows(2) {
                let (hi, lo) = (w[0].max(w[1]), w[0].min(w[1]));
                assert!(hi > lo && hi <= lo * MAX_STAGE_RATIO, "{from}->{to}: {r:?}");
            }
        }
        let stages = |from, to| {
            StreamResampler::new(from, to, 1, ResampleQuality::Medium, 256)
                .unwrap()
                .stages()
        };
        assert_eq!(stages(3000, 48_000), 1);
        assert_eq!(stages(48_000, 3000), 1);
        assert_eq!(stages(1, 48_000), 4);
        assert_eq!(stages(384_000, 1), 5);
    }

    #[test]
    fn a_cascade_stays_small_at_any_ratio() {
        // One stage of 1 Hz -> 48 kHz sized for a quantum of 8192 would need 8192 · 48 000
        // frames on one side: gigabytes.
        for (q, (kind, make)) in every_kind() {
            for (from, to) in [(1u32, 384_000u32), (384_000, 1), (1, 48_000), (48_000, 1)] {
                let r = make(from, to, 8, q, 8192).unwrap();
                let mib = r.footprint() * 4 / (1 << 20);
                assert!(mib < 32, "{q} {kind} {from}->{to}: {mib} MiB");
            }
        }
    }

    #[test]
    fn a_cascade_pulls_exact_counts_and_consumes_at_the_ratio() {
        for (q, (kind, make)) in every_kind() {
            for (from, to) in [(1000u32, 48_000u32), (384_000, 8000), (1, 48_000)] {
                let mut r = make(from, to, 2, q, 4096).unwrap();
                let blocks = [4096, 1, 64, 1000, 2048, 7, 256];
                let (consumed, produced) = pull_counts(&mut r, &blocks, 120, false);
                let expect = produced as f64 * from as f64 / to as f64;
                // The filters' history: a few hundred frames at the lower rate per stage.
                let slack = 1200.0 * (from as f64 / to as f64).max(1.0) + 10.0;
                assert!(
                    (consumed as f64 - expect).abs() < slack,
                    "{q} {kind} {from}->{to}: consumed {consumed}, expected {expect:.0}"
                );
            }
        }
    }

    #[test]
    fn a_cascade_keeps_a_tone_and_filters_what_the_low_rate_cannot_carry() {
        for (kind, make) in CTORS {
            // Up: a 5 Hz tone at 100 Hz comes out at 48 kHz as the same tone.
            let input = sine(100, 5.0, 0.5, 400);
            let mut up = make(100, 48_000, 1, ResampleQuality::Medium, 1024).unwrap();
            let out = pull_all(&mut up, &input, 192_000, &[1024, 333]);
            let mid = &out[48_000..144_000];
            let thd = thd_n_db(mid, 48_000, 5.0);
            assert!(thd < -60.0, "{kind} up: THD+N {thd:.1} dB");
            let peak = mid.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            assert!((peak - 0.5).abs() < 0.01, "{kind} up: peak {peak}");

            // Down: the same tone recorded at 100 Hz from 48 kHz, and a 1 kHz tone,
            // far above the 50 Hz the low rate carries, filtered out on the way.
            let down = |freq: f64| {
                let input = sine(48_000, freq, 0.5, 4 * 48_000);
                let mut r = make(48_000, 100, 1, ResampleQuality::Medium, 1024).unwrap();
                let mut out = Vec::new();
                for block in input.chunks(1000) {
                    let view = Planar::new(block, 1, block.len(), block.len());
                    r.process_push(view, &mut |p: Planar| out.extend_from_slice(p.channel(0)));
                }
                out
            };
            let tone = down(5.0);
            assert!(
                (tone.len() as i64 - 400).abs() <= 2,
                "{kind}: {} frames",
                tone.len()
            );
            let thd = thd_n_db(&tone[100..350], 100, 5.0);
            assert!(thd < -40.0, "{kind} down: THD+N {thd:.1} dB");
            let alias = down(1000.0);
            let rms = (alias[100..350].iter().map(|x| x * x).sum::<f32>() / 250.0).sqrt();
            assert!(rms < 0.5 * 0.01, "{kind}: 1 kHz left {rms} rms at 100 Hz");
        }
    }

    #[test]
    fn a_cascade_reports_its_delay() {
        for (kind, make) in CTORS {
            let (from, to) = (1000u32, 48_000u32);
            let at = 300;
            let mut input = vec![0.0f32; 1000];
            input[at] = 1.0;
            let mut r = make(from, to, 1, ResampleQuality::Medium, 1024).unwrap();
            let delay = r.delay_frames();
            let out = pull_all(&mut r, &input, 48_000, &[1024, 100]);
            let peak = find_impulse(&out, 0.3).expect("impulse");
            let expect = at as f64 * 48.0 + delay as f64;
            // Within one input frame (48 output frames).
            assert!(
                (peak as f64 - expect).abs() <= 48.0,
                "{kind}: peak at {peak}, expected {expect:.1} (delay {delay})"
            );
        }
    }

    #[test]
    fn a_cascade_follows_a_ratio_change() {
        let mut r = StreamResampler::new(1000, 48_000, 1, ResampleQuality::Medium, 512).unwrap();
        assert!(r.is_adjustable());
        r.set_ratio_relative(1.05);
        let mut buf = PlanarBuf::new(1, 512);
        let mut consumed = 0usize;
        for _ in 0..400 {
            r.process_pull(&mut buf.view_mut(512), &mut |s: &mut PlanarMut| {
                consumed += s.frames();
                s.frames()
            });
        }
        let expect = 400.0 * 512.0 / 48.0 / 1.05;
        assert!(
            (consumed as f64 - expect).abs() < 60.0,
            "{consumed} vs {expect:.0}"
        );
        assert!((r.ratio() - 48.0 * 1.05).abs() < 1e-6, "{}", r.ratio());
    }
}
