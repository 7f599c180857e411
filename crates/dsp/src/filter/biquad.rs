//! Second-order IIR sections from Robert Bristow-Johnson's Audio EQ Cookbook.
//!
//! State and coefficients are f64. A low shelf at 30 Hz and 48 kHz has poles within
//! 0.004 of the unit circle; in f32 the coefficient rounding alone moves its corner
//! audibly, and the recursion's round-off noise is amplified by 1/(1-|p|). The
//! recursion is latency-bound (each output waits for the last), so f64 costs little
//! next to f32 on x86-64.
//!
//! Coefficient changes are crossfaded, not interpolated: the old and the new section
//! both run for the fade and the outputs are mixed linearly. The output is then a
//! blend of two stable filters, so it stays bounded whatever the two settings are;
//! per-sample coefficient interpolation keeps the poles stable too, but a
//! time-varying recursion can still gain energy, and a fade costs only a second
//! section for its length. The new section starts from the old one's state, so its
//! own start-up transient is small, and the fade hides what remains.

use super::base::Filter;
use super::controls::Controls;
pub use super::design::{BiquadKind, BiquadParams, Coeffs};
use super::error::{DEFAULT_FADE_FRAMES, FilterError, flush_tiny};
use crate::buffer::PlanarMut;

/// Transposed direct form II state: two values per channel.
type State = [f64; 2];

#[inline(always)]
fn tick(c: &Coeffs, s: &mut State, x: f64) -> f64 {
    let y = c.b[0] * x + s[0];
    s[0] = c.b[1] * x - c.a[0] * y + s[1];
    s[1] = c.b[2] * x - c.a[1] * y;
    y
}

/// One biquad section on every channel, with crossfaded parameter changes.
pub struct Biquad {
    rate: f64,
    params: BiquadParams,
    cur: Coeffs,
    cur_state: Vec<State>,
    next: Coeffs,
    next_state: Vec<State>,
    /// Frames of the fade in progress already done; `fade_frames` when none runs.
    fade_done: usize,
    fade_frames: usize,
    /// A setting that arrived during a fade, started when the fade ends.
    pending: Option<Coeffs>,
}

impl Biquad {
    /// A section with `channels` channels at `rate` Hz.
    pub fn new(channels: usize, rate: f64, params: BiquadParams) -> Result<Self, FilterError> {
        let c = Coeffs::design(&params, rate)?;
        Ok(Biquad {
            rate,
            params,
            cur: c,
            cur_state: vec![[0.0; 2]; channels],
            next: c,
            next_state: vec![[0.0; 2]; channels],
            fade_done: DEFAULT_FADE_FRAMES,
            fade_frames: DEFAULT_FADE_FRAMES,
            pending: None,
        })
    }

    /// Sets the crossfade length for later changes (0 switches at once).
    pub fn set_fade_frames(&mut self, frames: usize) {
        if !self.fading() {
            self.fade_done = frames;
        }
        self.fade_frames = frames;
    }

    /// The current settings (the latest accepted, even while fading to them).
    pub fn params(&self) -> BiquadParams {
        self.params
    }

    /// The coefficients in use (the target of a running fade is not included).
    pub fn coeffs(&self) -> Coeffs {
        self.cur
    }

    /// Changes the settings; the output crossfades to them. A bad setting is refused
    /// and the old one stays. Does not allocate.
    pub fn set_params(&mut self, params: BiquadParams) -> Result<(), FilterError> {
        let c = Coeffs::design(&params, self.rate)?;
        self.params = params;
        if self.fading() {
            self.pending = Some(c);
        } else {
            self.start_fade(c);
        }
        Ok(())
    }

    fn fading(&self) -> bool {
        self.fade_done < self.fade_frames
    }

    fn start_fade(&mut self, c: Coeffs) {
        if self.fade_frames == 0 {
            self.cur = c;
            return;
        }
        self.next = c;
        self.next_state.copy_from_slice(&self.cur_state);
        self.fade_done = 0;
    }

    fn end_fade(&mut self) {
        self.cur = self.next;
        self.cur_state.copy_from_slice(&self.next_state);
        if let Some(c) = self.pending.take() {
            self.start_fade(c);
        }
    }

    /// Runs `n` frames of the fade from frame `off` of every channel.
    fn run_fade(&mut self, buf: &mut PlanarMut, off: usize, n: usize) {
        let total = self.fade_frames as f64;
        let channels = buf.channels().min(self.cur_state.len());
        for ch in 0..channels {
            let (s1, s2) = (&mut self.cur_state[ch], &mut self.next_state[ch]);
            for (i, x) in buf.channel_mut(ch)[off..off + n].iter_mut().enumerate() {
                let w = (self.fade_done + i + 1) as f64 / total;
                let y1 = tick(&self.cur, s1, *x as f64);
                let y2 = tick(&self.next, s2, *x as f64);
                *x = (y1 + (y2 - y1) * w) as f32;
            }
        }
        self.fade_done += n;
    }

    fn run_steady(&mut self, buf: &mut PlanarMut, off: usize) {
        let channels = buf.channels().min(self.cur_state.len());
        let mut ch = 0;
        // Two channels per pass: each recursion waits on its own last output, so two
        // independent ones interleave in the pipeline at nearly the cost of one.
        while ch + 1 < channels {
            let (c, frames) = (self.cur, buf.frames());
            let (data, stride) = buf.raw_mut();
            let (a, b) = data[ch * stride..].split_at_mut(stride);
            let (sa, sb) = self.cur_state[ch..ch + 2].split_at_mut(1);
            let (sa, sb) = (&mut sa[0], &mut sb[0]);
            for (x, y) in a[off..frames].iter_mut().zip(&mut b[off..frames]) {
                *x = tick(&c, sa, *x as f64) as f32;
                *y = tick(&c, sb, *y as f64) as f32;
            }
            ch += 2;
        }
        if ch < channels {
            let s = &mut self.cur_state[ch];
            for x in &mut buf.channel_mut(ch)[off..] {
                *x = tick(&self.cur, s, *x as f64) as f32;
            }
        }
    }
}

impl Filter for Biquad {
    fn process(&mut self, buf: &mut PlanarMut) {
        let frames = buf.frames();
        let mut off = 0;
        while off < frames && self.fading() {
            let n = (frames - off).min(self.fade_frames - self.fade_done);
            self.run_fade(buf, off, n);
            off += n;
            if !self.fading() {
                self.end_fade();
            }
        }
        if off < frames {
            self.run_steady(buf, off);
        }
        for s in self.cur_state.iter_mut().chain(self.next_state.iter_mut()) {
            *s = [flush_tiny(s[0]), flush_tiny(s[1])];
        }
    }

    fn reset(&mut self) {
        if self.fading() {
            self.fade_done = self.fade_frames;
            self.end_fade();
        }
        self.cur_state.fill([0.0; 2]);
        self.next_state.fill([0.0; 2]);
    }

    fn controls(&self) -> Controls {
        Controls::Biquad {
            rate: self.rate,
            params: self.params,
        }
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        let mut p = self.params;
        match name {
            "freq" => p.freq = value,
            "q" => p.q = value,
            "gain_db" => p.gain_db = value,
            _ => return Err(super::error::unknown_control(name, "freq, q, gain_db")),
        }
        self.set_params(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlanarBuf;

    fn p(kind: BiquadKind, freq: f64, q: f64, gain_db: f64) -> BiquadParams {
        BiquadParams {
            kind,
            freq,
            q,
            gain_db,
        }
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let e = Coeffs::design(&p(BiquadKind::Peaking, 30_000.0, 1.0, 3.0), 48_000.0);
        assert_eq!(
            e.unwrap_err().to_string(),
            "frequency 30000 Hz is outside (0, 24000) Hz, the range at sample rate 48000 Hz"
        );
        assert!(Coeffs::design(&p(BiquadKind::Peaking, 1e3, 0.0, 3.0), 48e3).is_err());
        assert!(Coeffs::design(&p(BiquadKind::Peaking, 1e3, 1.0, f64::NAN), 48e3).is_err());
        let mut b = Biquad::new(2, 48e3, p(BiquadKind::LowPass, 1e3, 0.7, 0.0)).unwrap();
        assert!(
            b.set_params(p(BiquadKind::LowPass, -1.0, 0.7, 0.0))
                .is_err()
        );
        assert_eq!(b.params().freq, 1e3);
    }

    #[test]
    fn silence_after_a_burst_decays_to_exact_zero() {
        let mut b = Biquad::new(1, 48e3, p(BiquadKind::LowShelf, 30.0, 0.707, 12.0)).unwrap();
        let mut buf = PlanarBuf::new(1, 1024);
        buf.channel_mut(0).fill(0.5);
        b.process(&mut buf.view_mut(1024));
        let mut last = 1.0f32;
        for _ in 0..2000 {
            buf.channel_mut(0).fill(0.0);
            b.process(&mut buf.view_mut(1024));
            last = buf.channel(0)[1023];
        }
        assert_eq!(last, 0.0);
        assert_eq!(
            b.cur_state[0],
            [0.0, 0.0],
            "state must flush, never go subnormal"
        );
    }

    #[test]
    fn a_change_during_a_fade_is_applied_after_it() {
        let mut b = Biquad::new(1, 48e3, p(BiquadKind::Peaking, 1e3, 1.0, 0.0)).unwrap();
        b.set_fade_frames(100);
        b.set_params(p(BiquadKind::Peaking, 1e3, 1.0, 6.0)).unwrap();
        b.set_params(p(BiquadKind::Peaking, 2e3, 1.0, -6.0))
            .unwrap();
        let mut buf = PlanarBuf::new(1, 256);
        b.process(&mut buf.view_mut(150));
        assert!(b.fading() && b.pending.is_none());
        b.process(&mut buf.view_mut(60));
        let want = Coeffs::design(&p(BiquadKind::Peaking, 2e3, 1.0, -6.0), 48e3).unwrap();
        assert_eq!(b.coeffs(), want);
    }
}
