//! A uniformly partitioned overlap-save FFT convolver with no added latency, for
//! impulse responses of up to a few seconds (room correction, cabinet or reverb).
//!
//! The response is cut into `P` partitions of `B` frames; each is zero-padded to
//! `2B` and transformed once, at construction. The input goes into a block of `B`
//! frames; every call transforms the previous block followed by the current one
//! (filled so far, zeros after), multiplies by the first partition's spectrum, adds
//! the sum of the older blocks' spectra times the later partitions (computed once when
//! a block completes), and transforms back. The frames the call brought in are then
//! exact in the second half of the result, so output never waits for a block to
//! fill: the cost is one forward and one inverse FFT of `2B` per call, plus `P - 1`
//! spectrum products per `B` frames. The FFT is realfft (over rustfft), which
//! rubato already pulls into the build.

use super::base::Filter;
use super::controls::Controls;
use super::error::FilterError;
use crate::buffer::PlanarMut;
use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use std::sync::Arc;

type C32 = Complex<f32>;

struct Channel {
    /// Which of the convolver's responses this channel uses.
    ir: usize,
    /// The previous block then the current one, `2B` frames.
    input: Vec<f32>,
    /// Spectra of the last `P` complete blocks, `B + 1` bins each, a ring.
    history: Vec<C32>,
    /// Sum over the partitions after the first of their spectrum times the block's.
    tail: Vec<C32>,
}

/// Convolution of each channel with an impulse response.
pub struct Convolver {
    block: usize,
    parts: usize,
    bins: usize,
    fwd: Arc<dyn RealToComplex<f32>>,
    inv: Arc<dyn ComplexToReal<f32>>,
    /// Per response: `P` spectra of `B + 1` bins, already divided by `2B` (the
    /// inverse FFT is not normalised).
    irs: Vec<Vec<C32>>,
    channels: Vec<Channel>,
    /// Frames of the current block filled so far (the same for every channel).
    filled: usize,
    /// Ring slot of the block being filled.
    slot: usize,
    time: Vec<f32>,
    spec: Vec<C32>,
    sum: Vec<C32>,
    scratch: Vec<C32>,
}

impl Convolver {
    /// A convolver for `channels` channels with partitions of `partition` frames (a
    /// power of two; smaller costs more per frame for short calls less, see
    /// docs/dsp.md). `irs` holds one response for all channels or one per channel.
    pub fn new(channels: usize, irs: &[Vec<f32>], partition: usize) -> Result<Self, FilterError> {
        if !partition.is_power_of_two() || !(16..=65_536).contains(&partition) {
            return Err(FilterError::Partition(partition));
        }
        if irs.is_empty() || (irs.len() != 1 && irs.len() != channels) {
            return Err(FilterError::ImpulseCount {
                irs: irs.len(),
                channels,
            });
        }
        for (channel, ir) in irs.iter().enumerate() {
            if ir.is_empty() {
                return Err(FilterError::Impulse {
                    channel,
                    what: "is empty",
                });
            }
            if ir.iter().any(|x| !x.is_finite()) {
                return Err(FilterError::Impulse {
                    channel,
                    what: "holds NaN or infinity",
                });
            }
        }
        let block = partition;
        let n = 2 * block;
        let bins = block + 1;
        let parts = irs
            .iter()
            .map(|ir| ir.len().div_ceil(block))
            .max()
            .unwrap_or(1);
        let mut planner = RealFftPlanner::<f32>::new();
        let fwd = planner.plan_fft_forward(n);
        let inv = planner.plan_fft_inverse(n);
        let mut scratch = vec![C32::default(); fwd.get_scratch_len().max(inv.get_scratch_len())];
        let mut time = vec![0.0f32; n];
        let spectra = irs
            .iter()
            .map(|ir| {
                let mut out = vec![C32::default(); parts * bins];
                for (k, chunk) in ir.chunks(block).enumerate() {
                    time.fill(0.0);
                    for (t, &x) in time.iter_mut().zip(chunk) {
                        *t = x / n as f32;
                    }
                    fwd.process_with_scratch(
                        &mut time,
                        &mut out[k * bins..(k + 1) * bins],
                        &mut scratch,
                    )
                    .expect("buffer lengths come from the plan");
                }
                out
            })
            .collect();
        let channels = (0..channels)
            .map(|ch| Channel {
                ir: if irs.len() == 1 { 0 } else { ch },
                input: vec![0.0; n],
                history: vec![C32::default(); parts * bins],
                tail: vec![C32::default(); bins],
            })
            .collect();
        Ok(Convolver {
            block,
            parts,
            bins,
            fwd,
            inv,
            irs: spectra,
            channels,
            filled: 0,
            slot: 0,
            time,
            spec: vec![C32::default(); bins],
            sum: vec![C32::default(); bins],
            scratch,
        })
    }

    /// The partition size in frames.
    pub fn partition(&self) -> usize {
        self.block
    }

    /// Runs `len` frames of `data` (at most what is left of the block) on channel `ch`.
    fn run(&mut self, ch: usize, data: &mut [f32]) {
        let (b, bins, start) = (self.block, self.bins, self.block + self.filled);
        let c = &mut self.channels[ch];
        let h = &self.irs[c.ir];
        c.input[start..start + data.len()].copy_from_slice(data);
        self.time.copy_from_slice(&c.input);
        self.fwd
            .process_with_scratch(&mut self.time, &mut self.spec, &mut self.scratch)
            .expect("buffer lengths come from the plan");
        for ((s, (x, h0)), t) in self
            .sum
            .iter_mut()
            .zip(self.spec.iter().zip(&h[..bins]))
            .zip(&c.tail)
        {
            *s = x * h0 + t;
        }
        // Bins 0 and B of a real signal's spectrum are real; products of real values
        // are too, but clear any rounding so the inverse transform accepts them.
        self.sum[0].im = 0.0;
        self.sum[b].im = 0.0;
        let _ = self
            .inv
            .process_with_scratch(&mut self.sum, &mut self.time, &mut self.scratch);
        data.copy_from_slice(&self.time[start..start + data.len()]);
        if self.filled + data.len() == b {
            let slot = self.slot;
            c.history[slot * bins..(slot + 1) * bins].copy_from_slice(&self.spec);
            c.tail.fill(C32::default());
            // The block just completed is one block old for the next one, so it meets
            // partition 1; the block before it partition 2, and so on.
            for k in 1..self.parts {
                let j = (slot + self.parts + 1 - k) % self.parts;
                let x = &c.history[j * bins..(j + 1) * bins];
                let hk = &h[k * bins..(k + 1) * bins];
                for ((t, x), h) in c.tail.iter_mut().zip(x).zip(hk) {
                    *t += x * h;
                }
            }
            c.input.copy_within(b.., 0);
            c.input[b..].fill(0.0);
        }
    }
}

impl Filter for Convolver {
    fn process(&mut self, buf: &mut PlanarMut) {
        let frames = buf.frames();
        let channels = buf.channels().min(self.channels.len());
        let mut off = 0;
        while off < frames {
            let n = (frames - off).min(self.block - self.filled);
            for ch in 0..channels {
                self.run(ch, &mut buf.channel_mut(ch)[off..off + n]);
            }
            self.filled += n;
            if self.filled == self.block {
                self.filled = 0;
                self.slot = (self.slot + 1) % self.parts;
            }
            off += n;
        }
    }

    fn reset(&mut self) {
        for c in &mut self.channels {
            c.input.fill(0.0);
            c.history.fill(C32::default());
            c.tail.fill(C32::default());
        }
        self.filled = 0;
        self.slot = 0;
    }

    fn controls(&self) -> Controls {
        Controls::None
    }

    fn set_control(&mut self, name: &str, _value: f64) -> Result<(), FilterError> {
        Err(super::error::unknown_control(name, "no controls"))
    }
}
