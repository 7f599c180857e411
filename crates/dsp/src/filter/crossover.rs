//! A Linkwitz–Riley crossover of 4th order: each input channel split into 2, 3 or 4
//! bands, each band put on an output channel of its own (active speakers: a woofer
//! and a tweeter per side, each on its own amplifier channel).
//!
//! Each split at f is two cascaded 2nd-order Butterworth low-passes (the low side)
//! and two high-passes (the rest), all from the cookbook's bilinear designs with one
//! prewarp. LP² + HP² at one frequency is then exactly the 2nd-order all-pass with
//! Q = 1/√2 at that frequency, in z as in s (the bilinear map is a substitution), so
//! the bands sum to an all-pass: flat magnitude, −6 dB per band at the split, 24 dB
//! per octave beyond. With more than one split, a band below split k also goes
//! through the all-pass of every later split, so every band carries the same phase
//! and the sum stays flat.
//!
//! The frequencies are live controls (`freq` with one split, else `freq_0`, `freq_1`,
//! …). A change crossfades as a biquad's does: the new sections start from the old
//! ones' state, both run for [`DEFAULT_FADE_FRAMES`] frames and their bands are mixed
//! linearly, so the output stays a blend of two stable crossovers.

use super::base::Filter;
use super::controls::Controls;
use super::design::{BiquadKind, BiquadParams, Coeffs};
use super::error::{DEFAULT_FADE_FRAMES, FilterError, flush_tiny};
use crate::buffer::PlanarMut;
use std::f64::consts::FRAC_1_SQRT_2;

/// Frames per pass: each band of each channel is kept aside for a pass, since the
/// outputs overwrite the inputs in place.
const CHUNK: usize = 256;

pub use super::splits::MAX_SPLITS;
use super::splits::check_freq;

/// One split's sections.
#[derive(Debug, Clone, Copy)]
struct Split {
    lp: Coeffs,
    hp: Coeffs,
    ap: Coeffs,
}

/// Runs one transposed direct form II section over `x` in place.
fn run(c: &Coeffs, s: &mut [f64; 2], x: &mut [f64]) {
    let [b0, b1, b2] = c.b;
    let [a1, a2] = c.a;
    let (mut s0, mut s1) = (s[0], s[1]);
    for v in x {
        let y = b0 * *v + s0;
        s0 = b1 * *v - a1 * y + s1;
        s1 = b2 * *v - a2 * y;
        *v = y;
    }
    *s = [flush_tiny(s0), flush_tiny(s1)];
}

/// One TDF-II step; the state is two locals the caller keeps in registers.
#[inline(always)]
fn tick(c: &Coeffs, s: &mut [f64; 2], x: f64) -> f64 {
    let y = c.b[0] * x + s[0];
    s[0] = c.b[1] * x - c.a[0] * y + s[1];
    s[1] = c.b[2] * x - c.a[1] * y;
    y
}

/// One split: the low side of `rest` into `band`, the high side back into `rest`. All
/// four sections run in one loop: each recursion waits on its own last output, and
/// the low and high pairs are independent, so they fill each other's pipeline gaps
/// (on the stereo bench, 54 µs a block with one section per pass, see the docs).
fn split(sp: &Split, st: &mut [[f64; 2]], rest: &mut [f64], band: &mut [f64]) {
    let (mut l1, mut l2, mut h1, mut h2) = (st[0], st[1], st[2], st[3]);
    for (r, b) in rest.iter_mut().zip(band.iter_mut()) {
        let x = *r;
        *b = tick(&sp.lp, &mut l2, tick(&sp.lp, &mut l1, x));
        *r = tick(&sp.hp, &mut h2, tick(&sp.hp, &mut h1, x));
    }
    for (d, v) in st.iter_mut().zip([l1, l2, h1, h2]) {
        *d = [flush_tiny(v[0]), flush_tiny(v[1])];
    }
}

/// Splits each of `channels` input channels into bands and writes the bands listed in
/// `outputs` (input channel, band from 0 = lowest) to output channels 0, 1, …
pub struct Crossover {
    channels: usize,
    rate: f64,
    freqs: Vec<f64>,
    splits: Vec<Split>,
    outputs: Vec<(usize, usize)>,
    /// Per channel, the state of every section in the order `process` runs them.
    state: Vec<Vec<[f64; 2]>>,
    /// Every band of every channel for one pass: `(channel * bands + band) * CHUNK`.
    bands_out: Vec<f32>,
    rest: Vec<f64>,
    band: Vec<f64>,
    /// A frequency change under way: the sections faded to, their state and bands.
    next_freqs: Vec<f64>,
    next_splits: Vec<Split>,
    next_state: Vec<Vec<[f64; 2]>>,
    next_bands: Vec<f32>,
    /// Frames of the fade done; `fade_frames` when none runs.
    fade_done: usize,
    fade_frames: usize,
    /// A change that came during a fade, applied when it ends (the latest wins).
    pending: Option<[f64; MAX_SPLITS]>,
}

/// The sections of a crossover at `freqs` for `rate` Hz, checked.
fn design_splits(freqs: &[f64], rate: f64) -> Result<Vec<Split>, FilterError> {
    let design = |kind, freq| {
        Coeffs::design(
            &BiquadParams {
                kind,
                freq,
                q: FRAC_1_SQRT_2,
                gain_db: 0.0,
            },
            rate,
        )
    };
    let splits = freqs
        .iter()
        .map(|&f| {
            Ok(Split {
                lp: design(BiquadKind::LowPass, f)?,
                hp: design(BiquadKind::HighPass, f)?,
                ap: design(BiquadKind::AllPass, f)?,
            })
        })
        .collect::<Result<Vec<_>, FilterError>>()?;
    // Each is a finite number in range now, so `>=` is the whole test.
    if freqs.windows(2).any(|w| w[0] >= w[1]) {
        return Err(FilterError::Crossover {
            what: "crossover frequencies must rise from one to the next",
        });
    }
    Ok(splits)
}

/// Splits `n` frames of `input` into bands with `splits`, each channel's sections'
/// state in `st`, into `out` (one `CHUNK` per band, lowest first).
fn split_bands(
    splits: &[Split],
    st: &mut [[f64; 2]],
    input: &[f32],
    rest: &mut [f64],
    band: &mut [f64],
    out: &mut [f32],
) {
    let n = input.len();
    let bands = splits.len() + 1;
    let (rest, band) = (&mut rest[..n], &mut band[..n]);
    for (r, x) in rest.iter_mut().zip(input) {
        *r = *x as f64;
    }
    let mut s = 0;
    for (k, sp) in splits.iter().enumerate() {
        split(sp, &mut st[s..s + 4], rest, band);
        s += 4;
        for later in &splits[k + 1..] {
            run(&later.ap, &mut st[s], band);
            s += 1;
        }
        for (d, v) in out[k * CHUNK..k * CHUNK + n].iter_mut().zip(band.iter()) {
            *d = *v as f32;
        }
    }
    let at = (bands - 1) * CHUNK;
    for (d, v) in out[at..at + n].iter_mut().zip(rest.iter()) {
        *d = *v as f32;
    }
}

impl Crossover {
    /// A crossover at `freqs` (ascending, 1 to [`MAX_SPLITS`] of them, each in
    /// (0, rate/2)) for `channels` channels at `rate` Hz. `outputs` lists the output
    /// channels as (input channel, band); `None` puts each channel's bands in order,
    /// channel after channel (stereo, 2-way: L-low, L-high, R-low, R-high).
    pub fn new(
        channels: usize,
        rate: f64,
        freqs: &[f64],
        outputs: Option<&[(usize, usize)]>,
    ) -> Result<Self, FilterError> {
        if freqs.is_empty() || freqs.len() > MAX_SPLITS {
            return Err(FilterError::Crossover {
                what: "give 1 to 3 crossover frequencies (2 to 4 bands)",
            });
        }
        if channels == 0 {
            return Err(FilterError::Crossover {
                what: "needs at least one channel in",
            });
        }
        let splits = design_splits(freqs, rate)?;
        let bands = freqs.len() + 1;
        let outputs: Vec<(usize, usize)> = match outputs {
            Some(o) => o.to_vec(),
            None => (0..channels)
                .flat_map(|c| (0..bands).map(move |b| (c, b)))
                .collect(),
        };
        if outputs.is_empty() {
            return Err(FilterError::Crossover {
                what: "no output channels listed",
            });
        }
        if outputs.iter().any(|&(c, _)| c >= channels) {
            return Err(FilterError::Crossover {
                what: "an output names an input channel the crossover does not get",
            });
        }
        if outputs.iter().any(|&(_, b)| b >= bands) {
            return Err(FilterError::Crossover {
                what: "an output names a band past the highest (one more band than frequencies)",
            });
        }
        let n = freqs.len();
        let sections = 4 * n + n * (n - 1) / 2;
        Ok(Crossover {
            channels,
            rate,
            freqs: freqs.to_vec(),
            next_freqs: freqs.to_vec(),
            next_splits: splits.clone(),
            splits,
            outputs,
            state: vec![vec![[0.0; 2]; sections]; channels],
            next_state: vec![vec![[0.0; 2]; sections]; channels],
            bands_out: vec![0.0; channels * bands * CHUNK],
            next_bands: vec![0.0; channels * bands * CHUNK],
            rest: vec![0.0; CHUNK],
            band: vec![0.0; CHUNK],
            fade_done: DEFAULT_FADE_FRAMES,
            fade_frames: DEFAULT_FADE_FRAMES,
            pending: None,
        })
    }

    /// Frames a frequency change crossfades over (0: it jumps).
    pub fn set_fade_frames(&mut self, frames: usize) {
        self.fade_frames = frames;
        self.fade_done = frames;
    }

    fn fading(&self) -> bool {
        self.fade_done < self.fade_frames
    }

    /// Moves to `freqs` (checked), through a crossfade unless none is set.
    fn start_fade(&mut self, freqs: &[f64]) -> Result<(), FilterError> {
        // `design_splits` collects into a new Vec: design in place instead, no
        // allocation on the RT thread.
        for (sp, &f) in self.next_splits.iter_mut().zip(freqs) {
            let d = |kind| {
                Coeffs::design(
                    &BiquadParams {
                        kind,
                        freq: f,
                        q: FRAC_1_SQRT_2,
                        gain_db: 0.0,
                    },
                    self.rate,
                )
            };
            *sp = Split {
                lp: d(BiquadKind::LowPass)?,
                hp: d(BiquadKind::HighPass)?,
                ap: d(BiquadKind::AllPass)?,
            };
        }
        self.next_freqs.copy_from_slice(freqs);
        for (n, c) in self.next_state.iter_mut().zip(&self.state) {
            n.copy_from_slice(c);
        }
        if self.fade_frames == 0 {
            self.end_fade();
        } else {
            self.fade_done = 0;
        }
        Ok(())
    }

    fn end_fade(&mut self) {
        std::mem::swap(&mut self.splits, &mut self.next_splits);
        std::mem::swap(&mut self.state, &mut self.next_state);
        self.freqs.copy_from_slice(&self.next_freqs);
        self.fade_done = self.fade_frames;
        if let Some(p) = self.pending.take() {
            let n = self.freqs.len();
            // Checked when it was set, against what was then in force or pending.
            let _ = self.start_fade(&p[..n]);
        }
    }

    /// The crossover frequencies, Hz.
    pub fn freqs(&self) -> &[f64] {
        &self.freqs
    }

    /// The output channels as (input channel, band).
    pub fn outputs(&self) -> &[(usize, usize)] {
        &self.outputs
    }

    fn bands(&self) -> usize {
        self.splits.len() + 1
    }

    /// Splits `n` frames from `off` of input channel `ch` into its bands, with the
    /// sections in force and, while a change fades, with the new ones too.
    fn split_channel(&mut self, buf: &PlanarMut, ch: usize, off: usize, n: usize) {
        let len = self.bands() * CHUNK;
        let input = &buf.channel(ch)[off..off + n];
        split_bands(
            &self.splits,
            &mut self.state[ch],
            input,
            &mut self.rest,
            &mut self.band,
            &mut self.bands_out[ch * len..(ch + 1) * len],
        );
        if self.fading() {
            split_bands(
                &self.next_splits,
                &mut self.next_state[ch],
                input,
                &mut self.rest,
                &mut self.band,
                &mut self.next_bands[ch * len..(ch + 1) * len],
            );
        }
    }
}

impl Filter for Crossover {
    fn process(&mut self, buf: &mut PlanarMut) {
        // A chain built by `FilterChain::for_channels` always gives enough channels;
        // anything else is a caller's mistake, answered with silence, never a panic
        // on the RT thread.
        if buf.channels() < self.channels.max(self.outputs.len()) {
            buf.fill_silence();
            return;
        }
        let bands = self.bands();
        let frames = buf.frames();
        let mut off = 0;
        while off < frames {
            let n = (frames - off).min(CHUNK);
            for ch in 0..self.channels {
                self.split_channel(buf, ch, off, n);
            }
            let fading = self.fading();
            let total = self.fade_frames.max(1) as f32;
            for (o, &(ch, b)) in self.outputs.iter().enumerate() {
                let at = (ch * bands + b) * CHUNK;
                let out = &mut buf.channel_mut(o)[off..off + n];
                out.copy_from_slice(&self.bands_out[at..at + n]);
                if fading {
                    for (i, (y, z)) in out.iter_mut().zip(&self.next_bands[at..at + n]).enumerate()
                    {
                        let w = ((self.fade_done + i + 1) as f32 / total).min(1.0);
                        *y += (*z - *y) * w;
                    }
                }
            }
            if fading {
                self.fade_done += n;
                if self.fade_done >= self.fade_frames {
                    self.end_fade();
                }
            }
            off += n;
        }
        for ch in self.outputs.len()..self.channels {
            buf.channel_mut(ch).fill(0.0);
        }
    }

    fn reset(&mut self) {
        for s in self.state.iter_mut().chain(&mut self.next_state) {
            s.fill([0.0; 2]);
        }
    }

    fn channels_in_out(&self) -> Option<(usize, usize)> {
        Some((self.channels, self.outputs.len()))
    }

    fn controls(&self) -> Controls {
        let mut freqs = [0.0; MAX_SPLITS];
        let latest = self
            .pending
            .as_ref()
            .map_or(&self.next_freqs[..], |p| &p[..]);
        freqs[..self.freqs.len()].copy_from_slice(&latest[..self.freqs.len()]);
        Controls::Crossover {
            rate: self.rate,
            freqs,
            splits: self.freqs.len(),
        }
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        let n = self.freqs.len();
        // Checked against the latest setting: the pending one, else the one faded to.
        let mut want = [0.0; MAX_SPLITS];
        match &self.pending {
            Some(p) => want = *p,
            None => want[..n].copy_from_slice(&self.next_freqs),
        }
        check_freq(&mut want[..n], self.rate, name, value)?;
        if self.fading() {
            self.pending = Some(want);
            Ok(())
        } else {
            self.start_fade(&want[..n])
        }
    }
}
