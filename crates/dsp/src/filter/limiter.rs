//! A lookahead peak limiter whose output never exceeds its threshold.
//!
//! For each frame the gain that would bring the loudest channel down to the threshold
//! is `r[n]`. The limiter takes the minimum of `r` over the last `L + 1` frames, lets
//! that rise back towards 1 no faster than the release allows, and averages the
//! result over `L + 1` frames; the input is delayed by `L` frames. Every value in that
//! average is a minimum over a window that contains the delayed frame, so the gain
//! applied to a frame is never above the gain the frame needs: the output peak is at
//! most the threshold, with a gain curve that ramps down over the lookahead instead
//! of jumping (no clicks) and the channels limited together (no image shift).

use super::base::Filter;
use super::controls::Controls;
use super::error::FilterError;
use crate::buffer::PlanarMut;

/// A linked-channel lookahead limiter.
pub struct Limiter {
    threshold: f64,
    /// L: the lookahead in frames.
    lookahead: usize,
    /// Per-frame factor for the release, towards 1.
    release: f64,
    /// Delayed input, one ring of `L + 1` per channel.
    delay: Vec<Vec<f32>>,
    /// The monotonic queue of the sliding minimum: (frame number, gain), increasing
    /// gains from front to back, in a ring of `L + 1`.
    queue: Vec<(u64, f64)>,
    q_head: usize,
    q_len: usize,
    /// The last `L + 1` released gains and their sum, for the average.
    hist: Vec<f64>,
    sum: f64,
    held: f64,
    /// Position in the `L + 1` rings; frame counter for the queue.
    pos: usize,
    frame: u64,
}

impl Limiter {
    /// A limiter for `channels` channels at `rate` Hz with its ceiling at
    /// `threshold_db` dBFS, `lookahead_ms` of lookahead (also its attack and its
    /// added latency) and a release of `release_ms` (time constant).
    pub fn new(
        channels: usize,
        rate: f64,
        threshold_db: f64,
        lookahead_ms: f64,
        release_ms: f64,
    ) -> Result<Self, FilterError> {
        super::error::check_rate(rate)?;
        if !(threshold_db.is_finite() && (-60.0..=0.0).contains(&threshold_db)) {
            return Err(FilterError::Limiter {
                what: "threshold must be between -60 and 0 dBFS",
            });
        }
        if !(lookahead_ms.is_finite() && (0.0..=100.0).contains(&lookahead_ms)) {
            return Err(FilterError::Limiter {
                what: "lookahead must be between 0 and 100 ms",
            });
        }
        if !(release_ms.is_finite() && (0.0..=10_000.0).contains(&release_ms)) {
            return Err(FilterError::Limiter {
                what: "release must be between 0 and 10000 ms",
            });
        }
        let lookahead = (lookahead_ms * rate / 1000.0).round() as usize;
        let release_frames = release_ms * rate / 1000.0;
        let n = lookahead + 1;
        Ok(Limiter {
            threshold: 10f64.powf(threshold_db / 20.0),
            lookahead,
            release: if release_frames > 0.0 {
                (-1.0 / release_frames).exp()
            } else {
                0.0
            },
            delay: vec![vec![0.0; n]; channels],
            queue: vec![(0, 1.0); n],
            q_head: 0,
            q_len: 0,
            hist: vec![1.0; n],
            sum: n as f64,
            held: 1.0,
            pos: 0,
            frame: 0,
        })
    }

    /// Gain the frame now entering needs, over all channels.
    fn needed(&self, buf: &PlanarMut, channels: usize, i: usize) -> f64 {
        let mut peak = 0.0f64;
        for ch in 0..channels {
            peak = peak.max(buf.channel(ch)[i].abs() as f64);
        }
        if peak > self.threshold {
            self.threshold / peak
        } else {
            1.0
        }
    }

    /// Pushes `r` for the current frame and returns the minimum over the window.
    fn window_min(&mut self, r: f64) -> f64 {
        let cap = self.queue.len();
        while self.q_len > 0 && self.queue[(self.q_head + self.q_len - 1) % cap].1 >= r {
            self.q_len -= 1;
        }
        self.queue[(self.q_head + self.q_len) % cap] = (self.frame, r);
        self.q_len += 1;
        while self.queue[self.q_head].0 + (self.lookahead as u64) < self.frame {
            self.q_head = (self.q_head + 1) % cap;
            self.q_len -= 1;
        }
        self.queue[self.q_head].1
    }
}

impl Filter for Limiter {
    fn process(&mut self, buf: &mut PlanarMut) {
        let channels = buf.channels().min(self.delay.len());
        let n = self.hist.len();
        for i in 0..buf.frames() {
            let r = self.needed(buf, channels, i);
            let m = self.window_min(r);
            self.held = m.min(1.0 - (1.0 - self.held) * self.release);
            self.sum += self.held - self.hist[self.pos];
            self.hist[self.pos] = self.held;
            let gain = (self.sum / n as f64).min(1.0);
            // The ring holds L + 1 frames: the slot after the one just written holds
            // the frame from L frames ago, the one this gain was computed for.
            let read = if self.pos + 1 == n { 0 } else { self.pos + 1 };
            for ch in 0..channels {
                let x = &mut buf.channel_mut(ch)[i];
                let line = &mut self.delay[ch];
                line[self.pos] = *x;
                *x = (line[read] as f64 * gain) as f32;
            }
            self.pos += 1;
            self.frame += 1;
            if self.pos == n {
                self.pos = 0;
                // A running sum drifts by round-off; re-adding once per lap keeps it
                // exact enough that the average never rises above the minimum.
                self.sum = self.hist.iter().sum();
            }
        }
    }

    fn reset(&mut self) {
        for l in &mut self.delay {
            l.fill(0.0);
        }
        self.hist.fill(1.0);
        self.sum = self.hist.len() as f64;
        self.held = 1.0;
        self.q_len = 0;
        self.pos = 0;
    }

    fn latency(&self) -> usize {
        self.lookahead
    }

    fn controls(&self) -> Controls {
        Controls::Limiter
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        match name {
            // The gain computation follows a new threshold within the lookahead, and
            // the averaging keeps the change smooth.
            "threshold_db" if value.is_finite() && (-60.0..=0.0).contains(&value) => {
                self.threshold = 10f64.powf(value / 20.0);
                Ok(())
            }
            "threshold_db" => Err(FilterError::ControlValue {
                name: "threshold_db",
                value,
                why: "must be between -60 and 0 dBFS",
            }),
            _ => Err(super::error::unknown_control(name, "threshold_db")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlanarBuf;

    #[test]
    fn peaks_stay_under_the_threshold_and_quiet_input_passes_delayed() {
        let rate = 48_000.0;
        let mut l = Limiter::new(2, rate, -6.0, 2.0, 5.0).unwrap();
        let thr = 10f32.powf(-6.0 / 20.0);
        let la = l.latency();
        assert_eq!(la, 96);
        let mut seed = 1u32;
        let mut left = Vec::with_capacity(48_000);
        for n in 0..48_000 {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (seed >> 8) as f32 / (1 << 24) as f32 - 0.5;
            // Loud bursts with peaks to 4 (+12 dBFS) in the first half, quiet after.
            let loud = if n < 24_000 && (n / 3000) % 2 == 0 {
                8.0
            } else {
                0.4
            };
            left.push(noise * loud);
        }
        let right: Vec<f32> = left.iter().map(|x| -0.5 * x).collect();
        let input = [left, right];
        let mut out = [vec![], vec![]];
        let mut buf = PlanarBuf::new(2, 1000);
        for size in [1usize, 17, 256, 1000].iter().cycle() {
            let start = out[0].len();
            if start >= 48_000 {
                break;
            }
            let len = (*size).min(48_000 - start);
            for (ch, x) in input.iter().enumerate() {
                buf.channel_mut(ch)[..len].copy_from_slice(&x[start..start + len]);
            }
            l.process(&mut buf.view_mut(len));
            for (ch, o) in out.iter_mut().enumerate() {
                o.extend_from_slice(&buf.channel(ch)[..len]);
            }
        }
        let peak = out.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(peak <= thr * (1.0 + 1e-6), "peak {peak} over {thr}");
        // 19 000 frames after the last burst (80 release time constants) the quiet part passes unchanged.
        for n in 40_000..48_000 {
            assert_eq!(out[0][n], input[0][n - la]);
        }
    }

    #[test]
    fn bad_settings_say_which() {
        let e = Limiter::new(2, 48e3, 3.0, 5.0, 50.0).err().unwrap();
        assert_eq!(
            e.to_string(),
            "limiter threshold must be between -60 and 0 dBFS"
        );
    }
}
