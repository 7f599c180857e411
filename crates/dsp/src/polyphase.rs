//! Exact polyphase resampling at a fixed rational ratio, with filter tables shared by
//! every stream that converts between the same two rates.
//!
//! Why not rubato here: rubato builds a private sinc table for every resampler, so 32
//! streams of 44.1 kHz into a 48 kHz graph keep 32 copies of the same 20 KiB table,
//! which other threads' wakeups evict from the cache between two cycles (profiled in
//! docs/dsp.md). One table per rate pair stays in cache. rubato still does every ratio that moves
//! (drift, variable-rate streams) and the other qualities; the filter here is the one
//! a windowed sinc like rubato's, but with a Kaiser window and a cutoff near the lower
//! rate's Nyquist frequency ([`window`] says why), evaluated at the exact sub-phases.
//!
//! Output frame `n` is input time `n·m/l − taps/2` (m/l = from/to reduced): a causal
//! filter with a constant delay of half its length, like rubato's.

use crate::buffer::{Planar, PlanarMut};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Coefficients for every sub-phase of one rate pair: `phases` rows of `taps`.
#[derive(Debug)]
struct Table {
    taps: usize,
    coef: Vec<f32>,
}

impl Table {
    #[cfg(test)]
    fn row(&self, phase: usize) -> &[f32] {
        &self.coef[phase * self.taps..(phase + 1) * self.taps]
    }
}

/// `(from, to, taps)` → the table, while any resampler still holds it.
type Cache = Mutex<HashMap<(u32, u32, usize), Weak<Table>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Attenuation of the filter's stop band, dB: images and aliases of a full-scale tone
/// stay this far below it.
const STOPBAND_DB: f64 = 80.0;

/// Where the stop band starts, relative to the lower rate's Nyquist frequency: the
/// image of a 20 kHz tone at 44.1 kHz (24.1 kHz) is there. Content above 20 kHz may
/// leave an image in the ultrasound; nothing below does.
const STOP_EDGE: f64 = 1.093;

/// The Kaiser window for [`STOPBAND_DB`] at `x` in [0, 1]. Kaiser rather than the
/// squared Blackman–Harris window rubato uses: at 32 taps that window's wide main lobe,
/// with rubato's cutoff for it, put the −3 dB point at 12 kHz for 44.1 kHz streams
/// (−17 dB at 15 kHz: audibly dull); Kaiser's transition band is the narrowest for a
/// given stop band and length.
fn window(x: f64) -> f64 {
    let beta = 0.1102 * (STOPBAND_DB - 8.7);
    let t = 2.0 * x - 1.0;
    bessel_i0(beta * (1.0 - t * t).max(0.0).sqrt()) / bessel_i0(beta)
}

/// The modified Bessel function of the first kind, order 0 (its power series; ample
/// for the window's β below 20).
fn bessel_i0(x: f64) -> f64 {
    let (mut sum, mut term) = (1.0, 1.0);
    for k in 1..60 {
        term *= (x / (2.0 * k as f64)).powi(2);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// The filter's −6 dB point relative to the lower rate's Nyquist frequency: half a
/// transition band below [`STOP_EDGE`] (Kaiser's length formula solved for the width).
fn cutoff(taps: usize) -> f64 {
    let half_width = (STOPBAND_DB - 7.95) / (2.285 * std::f64::consts::TAU * (taps - 1) as f64);
    (STOP_EDGE - half_width).min(0.97)
}

fn sinc(x: f64) -> f64 {
    if x.abs() < 1e-12 {
        1.0
    } else {
        let px = std::f64::consts::PI * x;
        px.sin() / px
    }
}

/// Builds (or finds) the table for `from` → `to` with `taps` taps and `phases` = the
/// reduced output rate. Control thread only.
fn table(from: u32, to: u32, taps: usize, phases: usize) -> Arc<Table> {
    let key = (from, to, taps);
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = cache.get(&key).and_then(Weak::upgrade) {
        return t;
    }
    // Cutoff relative to the input's Nyquist frequency, lowered below the output's
    // when decimating (as rubato does).
    let mut cutoff = cutoff(taps);
    if to < from {
        cutoff *= to as f64 / from as f64;
    }
    let half = (taps / 2) as f64;
    let mut coef = vec![0.0f32; phases * taps];
    for p in 0..phases {
        let frac = p as f64 / phases as f64;
        let mut row = vec![0.0f64; taps];
        for (k, c) in row.iter_mut().enumerate() {
            // Offset of input k of the window from the output's position, in input frames.
            let tau = k as f64 - half + 1.0 - frac;
            *c = cutoff * sinc(cutoff * tau) * window((tau + half) / taps as f64);
        }
        // Unity gain at DC in every phase, so a constant stays exactly constant.
        let sum: f64 = row.iter().sum();
        for (dst, c) in coef[p * taps..(p + 1) * taps].iter_mut().zip(&row) {
            *dst = (c / sum) as f32;
        }
    }
    let t = Arc::new(Table { taps, coef });
    cache.retain(|_, w| w.strong_count() > 0);
    cache.insert(key, Arc::downgrade(&t));
    t
}

/// Eight running sums so the compiler keeps them in vector registers, added up as
/// [`render_avx2_32`] adds its lanes (so both give the same bits).
#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let t = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    let mut s = (t[0] + t[2]) + (t[1] + t[3]);
    let rest = a.len() / 8 * 8;
    for (x, y) in a[rest..].iter().zip(&b[rest..]) {
        s += x * y;
    }
    s
}

/// What one render reads: the table, the input history and the step between outputs.
struct Job<'a> {
    table: &'a Table,
    buf: &'a [f32],
    cap: usize,
    channels: usize,
    /// Whole input frames per output frame (m / l) and the sub-phases left over (m % l).
    step: usize,
    rem: usize,
    l: usize,
}

impl Job<'_> {
    /// Where the output frame after the one at `(pos, frac)` starts. No division per
    /// frame: the step is split once, at construction.
    #[inline(always)]
    fn next(&self, (mut pos, mut frac): (usize, usize)) -> (usize, usize) {
        pos += self.step;
        frac += self.rem;
        if frac >= self.l {
            frac -= self.l;
            pos += 1;
        }
        (pos, frac)
    }
}

/// Renders `n` output frames from window start `pos`, sub-phase `frac`, into `dst`
/// (channel `c` at `dst[c * stride..]`); returns where the next frame starts. One
/// loop for every frame and channel, compiled per instruction set, so nothing is
/// called per sample; `N` is the tap count when known (0: read it from the table),
/// which lets the compiler unroll the dot product completely.
#[inline(always)]
fn render_body<const N: usize>(
    j: &Job,
    (mut pos, mut frac): (usize, usize),
    n: usize,
    dst: &mut [f32],
    stride: usize,
) -> (usize, usize) {
    let taps = if N == 0 { j.table.taps } else { N };
    for i in 0..n {
        let row = &j.table.coef[frac * taps..frac * taps + taps];
        for c in 0..j.channels {
            let start = c * j.cap + pos;
            dst[c * stride + i] = dot_body(&j.buf[start..start + taps], row);
        }
        (pos, frac) = j.next((pos, frac));
    }
    (pos, frac)
}

type RenderFn = fn(&Job, (usize, usize), usize, &mut [f32], usize) -> (usize, usize);

/// [`render_body`] with the tap count known at compile time where it usually is: the
/// plain render loop, and (always inlined) the body of each instruction-set variant.
#[inline(always)]
fn render_generic(
    j: &Job,
    at: (usize, usize),
    n: usize,
    dst: &mut [f32],
    stride: usize,
) -> (usize, usize) {
    if j.table.taps == 32 {
        render_body::<32>(j, at, n, dst, stride)
    } else {
        render_body::<0>(j, at, n, dst, stride)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,avx2")]
unsafe fn render_avx2_inner(
    j: &Job,
    at: (usize, usize),
    n: usize,
    dst: &mut [f32],
    stride: usize,
) -> (usize, usize) {
    if j.table.taps == 32 {
        // SAFETY: the caller's CPU has AVX2 (this function's own contract).
        unsafe { render_avx2_32(j, at, n, dst, stride) }
    } else {
        render_generic(j, at, n, dst, stride)
    }
}

/// [`render_body`] for 32 taps with 8-lane vectors written out: the compiler kept the
/// generic loop's sums in 4-lane registers with shuffles between them, a hot spot of the
/// RT thread with one resampled stream (figures in docs/bench.md). The row's
/// four vectors are loaded once per frame for every channel; lane `k` sums taps `k`,
/// `k + 8`, … and the lanes are added up as [`dot_body`] adds them, multiply then add
/// (no fused multiply-add), so the result is the generic loop's bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,avx2")]
unsafe fn render_avx2_32(
    j: &Job,
    (mut pos, mut frac): (usize, usize),
    n: usize,
    dst: &mut [f32],
    stride: usize,
) -> (usize, usize) {
    use std::arch::x86_64::*;
    const TAPS: usize = 32;
    for i in 0..n {
        let row: &[f32; TAPS] = j.table.coef[frac * TAPS..frac * TAPS + TAPS]
            .try_into()
            .expect("a row has 32 taps");
        // SAFETY: every load reads 8 floats inside a checked 32-float array.
        let r = unsafe {
            [
                _mm256_loadu_ps(row[0..8].as_ptr()),
                _mm256_loadu_ps(row[8..16].as_ptr()),
                _mm256_loadu_ps(row[16..24].as_ptr()),
                _mm256_loadu_ps(row[24..32].as_ptr()),
            ]
        };
        for c in 0..j.channels {
            let start = c * j.cap + pos;
            let x: &[f32; TAPS] = j.buf[start..start + TAPS]
                .try_into()
                .expect("a window has 32 frames");
            let mut acc = _mm256_setzero_ps();
            for (k, r) in r.iter().enumerate() {
                // SAFETY: 8 floats inside the checked 32-float window.
                let v = unsafe { _mm256_loadu_ps(x[k * 8..k * 8 + 8].as_ptr()) };
                acc = _mm256_add_ps(acc, _mm256_mul_ps(v, *r));
            }
            let t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            let u = _mm_add_ps(t, _mm_movehl_ps(t, t));
            let s = _mm_add_ss(u, _mm_shuffle_ps(u, u, 1));
            dst[c * stride + i] = _mm_cvtss_f32(s);
        }
        (pos, frac) = j.next((pos, frac));
    }
    (pos, frac)
}

#[cfg(target_arch = "x86_64")]
fn render_avx2(
    j: &Job,
    at: (usize, usize),
    n: usize,
    dst: &mut [f32],
    stride: usize,
) -> (usize, usize) {
    // SAFETY: only chosen by `pick_render` after the CPU was found to support AVX2.
    unsafe { render_avx2_inner(j, at, n, dst, stride) }
}

/// The widest render loop this CPU runs (checked once, at construction).
fn pick_render() -> RenderFn {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        return render_avx2;
    }
    render_generic
}

/// Greatest common divisor (1 for zero inputs).
pub(crate) fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// A fixed-ratio polyphase resampler for one stream. Allocates only in [`Polyphase::new`].
pub(crate) struct Polyphase {
    table: Arc<Table>,
    render: RenderFn,
    /// Input frames per `l` output frames.
    m: usize,
    /// Output frames per `m` input frames (= sub-phases).
    l: usize,
    channels: usize,
    /// Input history and look-ahead, planar: `channels` runs of `cap` frames.
    buf: Vec<f32>,
    cap: usize,
    /// Valid frames in `buf`.
    filled: usize,
    /// Window start in `buf` of the next output frame.
    pos: usize,
    /// Sub-phase of the next output frame, 0..l.
    frac: usize,
    /// Output scratch for pushes: `channels` runs of `out_cap` frames.
    out: Vec<f32>,
    out_cap: usize,
}

impl Polyphase {
    /// Sub-phases a ratio needs (the reduced output rate).
    pub(crate) fn phases(from: u32, to: u32) -> usize {
        (to / gcd(from, to)) as usize
    }

    /// A resampler from `from` to `to` Hz with `taps` taps (a multiple of 8) for up to
    /// `max_frames` output frames per pull or input frames per push.
    pub(crate) fn new(from: u32, to: u32, channels: usize, taps: usize, max_frames: usize) -> Self {
        let g = gcd(from, to);
        let (m, l) = ((from / g) as usize, (to / g) as usize);
        let table = table(from, to, taps, l);
        // A pull of max_frames needs at most max_frames·m/l + 1 new input frames on top
        // of the taps of history; a push adds max_frames to at most taps of history.
        let cap = taps + (max_frames * m).div_ceil(l) + max_frames + 2;
        let out_cap = (((max_frames + taps) * l).div_ceil(m) + 2).max(max_frames);
        let mut p = Polyphase {
            table,
            render: pick_render(),
            m,
            l,
            channels,
            buf: vec![0.0; channels * cap],
            cap,
            filled: 0,
            pos: 0,
            frac: 0,
            out: vec![0.0; channels * out_cap],
            out_cap,
        };
        p.reset();
        p
    }

    /// Forgets all audio: silent history, phase 0.
    pub(crate) fn reset(&mut self) {
        self.buf.fill(0.0);
        // taps − 1 frames of silence before the first input frame: the first output
        // frame's window ends exactly on it.
        self.filled = self.table.taps - 1;
        self.pos = 0;
        self.frac = 0;
    }

    /// Samples held in buffers.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.buf.len() + self.out.len()
    }

    /// Most frames one pull asks its callback for.
    pub(crate) fn max_pull_input(&self) -> usize {
        self.cap
    }

    /// Most frames one push hands its callback.
    pub(crate) fn max_push_output(&self) -> usize {
        self.out_cap
    }

    /// Output / input.
    pub(crate) fn ratio(&self) -> f64 {
        self.l as f64 / self.m as f64
    }

    /// The filter's delay in output frames plus, after pushes, the input not yet used.
    pub(crate) fn delay_frames(&self) -> usize {
        let waiting = self.filled.saturating_sub(self.pos + self.table.taps - 1);
        (((self.table.taps / 2 + waiting) * self.l) as f64 / self.m as f64).round() as usize
    }

    /// Window start after `n` more output frames, and the sub-phase there.
    fn advance(&self, n: usize) -> (usize, usize) {
        let f = self.frac + n * self.m;
        (self.pos + f / self.l, f % self.l)
    }

    /// Computes `n` output frames into `dst` (channel `c` at `dst[c * stride..]`).
    fn render(&mut self, n: usize, dst: &mut [f32], stride: usize) {
        let job = Job {
            table: &self.table,
            buf: &self.buf,
            cap: self.cap,
            channels: self.channels,
            step: self.m / self.l,
            rem: self.m % self.l,
            l: self.l,
        };
        (self.pos, self.frac) = (self.render)(&job, (self.pos, self.frac), n, dst, stride);
    }

    /// Drops input before the next window.
    fn compact(&mut self) {
        if self.pos > 0 {
            for c in 0..self.channels {
                let s = c * self.cap;
                self.buf.copy_within(s + self.pos..s + self.filled, s);
            }
            self.filled -= self.pos;
            self.pos = 0;
        }
    }

    /// Produces exactly `out.frames()` frames, pulling the input they need once.
    pub(crate) fn pull(
        &mut self,
        out: &mut PlanarMut,
        pull: &mut dyn FnMut(&mut PlanarMut) -> usize,
    ) {
        let frames = out.frames();
        let (last, _) = self.advance(frames - 1);
        let need = (last + self.table.taps).saturating_sub(self.filled);
        if need > 0 {
            debug_assert!(self.filled + need <= self.cap);
            let got = {
                let start = self.filled;
                let mut view =
                    PlanarMut::new(&mut self.buf[start..], self.channels, need, self.cap);
                pull(&mut view).min(need)
            };
            for c in 0..self.channels {
                let s = c * self.cap + self.filled;
                self.buf[s + got..s + need].fill(0.0);
            }
            self.filled += need;
        }
        // Straight into the caller's buffer: no scratch, no copy.
        let (dst, stride) = out.raw_mut();
        self.render(frames, dst, stride);
        self.compact();
    }

    /// Takes `input` and hands every output frame it completes to `out` in one piece.
    pub(crate) fn push(&mut self, input: Planar, out: &mut dyn FnMut(Planar)) {
        let frames = input.frames();
        debug_assert!(self.filled + frames <= self.cap);
        for c in 0..self.channels {
            let s = c * self.cap + self.filled;
            self.buf[s..s + frames].copy_from_slice(input.channel(c));
        }
        self.filled += frames;
        // Outputs whose window ends inside what is buffered.
        if self.filled < self.pos + self.table.taps {
            self.compact();
            return;
        }
        let last_start = self.filled - self.table.taps;
        // Frames n with pos(n) <= last_start: pos(n) = pos + (frac + n·m) / l.
        let n = ((last_start - self.pos) * self.l + self.l - 1 - self.frac) / self.m + 1;
        let n = n.min(self.out_cap);
        let mut tmp = std::mem::take(&mut self.out);
        self.render(n, &mut tmp, self.out_cap);
        out(Planar::new(&tmp, self.channels, n, self.out_cap));
        self.out = tmp;
        self.compact();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_with_the_same_rates_share_one_table() {
        let a = Polyphase::new(44100, 48000, 2, 32, 1024);
        let b = Polyphase::new(44100, 48000, 1, 32, 256);
        let c = Polyphase::new(48000, 44100, 2, 32, 1024);
        assert!(Arc::ptr_eq(&a.table, &b.table));
        assert!(!Arc::ptr_eq(&a.table, &c.table));
        assert_eq!(a.table.coef.len(), 160 * 32);
    }

    #[test]
    fn every_phase_has_unity_dc_gain() {
        let p = Polyphase::new(44100, 48000, 1, 32, 64);
        for ph in 0..160 {
            let s: f32 = p.table.row(ph).iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "phase {ph}: {s}");
        }
    }

    #[test]
    fn the_vector_render_matches_the_plain_one() {
        for (from, to, taps) in [
            (44100u32, 48000u32, 32usize),
            (48000, 8000, 32),
            (8000, 11025, 40),
        ] {
            let mut p = Polyphase::new(from, to, 2, taps, 512);
            for (i, x) in p.buf.iter_mut().enumerate() {
                *x = (i as f32 * 0.37).sin();
            }
            let job = Job {
                table: &p.table,
                buf: &p.buf,
                cap: p.cap,
                channels: 2,
                step: p.m / p.l,
                rem: p.m % p.l,
                l: p.l,
            };
            let n = 80;
            let start = (3, 1 % p.l);
            let (mut a, mut b) = (vec![0.0f32; 2 * n], vec![0.0f32; 2 * n]);
            let end_a = pick_render()(&job, start, n, &mut a, n);
            let end_b = render_generic(&job, start, n, &mut b, n);
            assert_eq!(end_a, end_b);
            // The same sums in the same order: the same bits.
            assert_eq!(a, b, "{from}->{to}");
            // And what a plain f64 dot product gives, frame by frame.
            let (mut pos, mut frac) = start;
            for i in 0..n {
                for c in 0..2 {
                    let w = &p.buf[c * p.cap + pos..c * p.cap + pos + taps];
                    let plain: f64 = w
                        .iter()
                        .zip(p.table.row(frac))
                        .map(|(x, y)| *x as f64 * *y as f64)
                        .sum();
                    assert!(
                        (a[c * n + i] as f64 - plain).abs() < 1e-5,
                        "{from}->{to} frame {i}"
                    );
                }
                frac += p.m;
                pos += frac / p.l;
                frac %= p.l;
            }
            assert_eq!((pos, frac), end_a);
            p.reset();
        }
    }
}
