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

use super::base::Filter;
use super::controls::Controls;
use super::design::{BiquadKind, BiquadParams, Coeffs};
use super::error::{FilterError, flush_tiny};
use crate::buffer::PlanarMut;
use std::f64::consts::FRAC_1_SQRT_2;

/// Frames per pass: each band of each channel is kept aside for a pass, since the
/// outputs overwrite the inputs in place.
const CHUNK: usize = 256;

/// The most splits (4 bands): more is beyond what active speakers use.
pub const MAX_SPLITS: usize = 3;

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
    freqs: Vec<f64>,
    splits: Vec<Split>,
    outputs: Vec<(usize, usize)>,
    /// Per channel, the state of every section in the order `process` runs them.
    state: Vec<Vec<[f64; 2]>>,
    /// Every band of every channel for one pass: `(channel * bands + band) * CHUNK`.
    bands_out: Vec<f32>,
    rest: Vec<f64>,
    band: Vec<f64>,
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
            freqs: freqs.to_vec(),
            splits,
            outputs,
            state: vec![vec![[0.0; 2]; sections]; channels],
            bands_out: vec![0.0; channels * bands * CHUNK],
            rest: vec![0.0; CHUNK],
            band: vec![0.0; CHUNK],
        })
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

    /// Splits `n` frames from `off` of input channel `ch` into its bands.
    fn split_channel(&mut self, buf: &PlanarMut, ch: usize, off: usize, n: usize) {
        let bands = self.bands();
        let (rest, band) = (&mut self.rest[..n], &mut self.band[..n]);
        for (r, x) in rest.iter_mut().zip(&buf.channel(ch)[off..off + n]) {
            *r = *x as f64;
        }
        let st = &mut self.state[ch];
        let mut s = 0;
        for (k, sp) in self.splits.iter().enumerate() {
            split(sp, &mut st[s..s + 4], rest, band);
            s += 4;
            for later in &self.splits[k + 1..] {
                run(&later.ap, &mut st[s], band);
                s += 1;
            }
            let at = (ch * bands + k) * CHUNK;
            for (d, v) in self.bands_out[at..at + n].iter_mut().zip(band.iter()) {
                *d = *v as f32;
            }
        }
        let at = (ch * bands + bands - 1) * CHUNK;
        for (d, v) in self.bands_out[at..at + n].iter_mut().zip(rest.iter()) {
            *d = *v as f32;
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
            for (o, &(ch, b)) in self.outputs.iter().enumerate() {
                let at = (ch * bands + b) * CHUNK;
                buf.channel_mut(o)[off..off + n].copy_from_slice(&self.bands_out[at..at + n]);
            }
            off += n;
        }
        for ch in self.outputs.len()..self.channels {
            buf.channel_mut(ch).fill(0.0);
        }
    }

    fn reset(&mut self) {
        for s in &mut self.state {
            s.fill([0.0; 2]);
        }
    }

    fn channels_in_out(&self) -> Option<(usize, usize)> {
        Some((self.channels, self.outputs.len()))
    }

    fn controls(&self) -> Controls {
        Controls::None
    }

    fn set_control(&mut self, name: &str, _value: f64) -> Result<(), FilterError> {
        Err(super::error::unknown_control(name, "no controls"))
    }
}
