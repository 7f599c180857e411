//! Gain in decibels and linear terms, and click-free gain changes.
//!
//! Mute is a ramp to 0: there is no separate mute path, so muting and unmuting
//! never click and cost nothing extra.

use crate::buffer::PlanarMut;
use crate::mix;

/// Frames a volume change or (un)mute takes by default: 256 frames are about 5 ms
/// at 48 kHz, long enough to avoid an audible click and short enough to feel instant.
pub const DEFAULT_RAMP_FRAMES: usize = 256;

/// Converts decibels to a linear amplitude factor (−∞ dB gives 0).
pub fn db_to_linear(db: f32) -> f32 {
    if db == f32::NEG_INFINITY {
        0.0
    } else {
        10f32.powf(db / 20.0)
    }
}

/// Converts a linear amplitude factor to decibels (0 gives −∞ dB).
pub fn linear_to_db(g: f32) -> f32 {
    if g <= 0.0 {
        f32::NEG_INFINITY
    } else {
        20.0 * g.log10()
    }
}

/// Multiplies every sample by `gain`; unity leaves the buffer untouched.
pub fn apply_gain(buf: &mut [f32], gain: f32) {
    if gain == 1.0 {
        return;
    }
    if gain == 0.0 {
        // Not 0·x: that would keep NaN and −0, and silence should be plain zeros.
        buf.fill(0.0);
        return;
    }
    mix::scale(buf, gain);
}

/// A gain that moves linearly to a new target over a number of frames.
#[derive(Debug, Clone, PartialEq)]
pub struct GainRamp {
    /// Gain at the start of the running ramp (equals `target` when idle).
    from: f32,
    target: f32,
    /// Ramp length in frames; 0 when idle.
    total: usize,
    /// Frames of the ramp already applied.
    done: usize,
}

impl GainRamp {
    /// A gain that starts settled at `gain`.
    pub fn new(gain: f32) -> Self {
        GainRamp {
            from: gain,
            target: gain,
            total: 0,
            done: 0,
        }
    }

    /// Starts a ramp from the current gain to `gain` over `ramp_frames` frames
    /// (0 jumps at once). A ramp already under way is restarted from where it is.
    pub fn set_target(&mut self, gain: f32, ramp_frames: usize) {
        let current = self.current();
        if ramp_frames == 0 || current == gain {
            *self = GainRamp::new(gain);
        } else {
            self.from = current;
            self.target = gain;
            self.total = ramp_frames;
            self.done = 0;
        }
    }

    /// The gain the next frame would be ramped from.
    pub fn current(&self) -> f32 {
        if self.done >= self.total {
            self.target
        } else {
            self.gain_at(self.done)
        }
    }

    /// The gain the ramp is heading to (or sits at).
    pub fn target(&self) -> f32 {
        self.target
    }

    /// True while a ramp is under way.
    pub fn is_ramping(&self) -> bool {
        self.done < self.total
    }

    /// Gain after `frames` frames of the ramp, on the same grid as [`mix::scale_ramp`].
    fn gain_at(&self, frames: usize) -> f32 {
        if frames >= self.total {
            self.target
        } else {
            self.from + (self.target - self.from) / self.total as f32 * frames as f32
        }
    }

    /// Applies the gain to every channel of `buf`, advancing the ramp by
    /// `buf.frames()` frames. Unity leaves samples untouched. Never allocates.
    pub fn apply(&mut self, buf: &mut PlanarMut) {
        let frames = buf.frames();
        if frames == 0 {
            return;
        }
        let mut start = 0;
        if self.is_ramping() {
            let n = frames.min(self.total - self.done);
            let (g0, g1) = (self.gain_at(self.done), self.gain_at(self.done + n));
            for ch in 0..buf.channels() {
                mix::scale_ramp(&mut buf.channel_mut(ch)[..n], g0, g1);
            }
            self.done += n;
            if self.done >= self.total {
                *self = GainRamp::new(self.target);
            }
            start = n;
        }
        if start < frames && self.target != 1.0 {
            for ch in 0..buf.channels() {
                apply_gain(&mut buf.channel_mut(ch)[start..], self.target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::PlanarBuf;

    #[test]
    fn db_conversions() {
        assert_eq!(db_to_linear(0.0), 1.0);
        assert_eq!(db_to_linear(f32::NEG_INFINITY), 0.0);
        assert!((db_to_linear(-6.0206) - 0.5).abs() < 1e-4);
        assert!((db_to_linear(20.0) - 10.0).abs() < 1e-5);
        assert_eq!(linear_to_db(0.0), f32::NEG_INFINITY);
        assert_eq!(linear_to_db(1.0), 0.0);
        assert!((linear_to_db(0.5) + 6.0206).abs() < 1e-3);
        for db in [-60.0f32, -12.5, -3.0, 0.0, 6.0] {
            assert!((linear_to_db(db_to_linear(db)) - db).abs() < 1e-4);
        }
    }

    fn noise(buf: &mut PlanarBuf) {
        let mut x = 1u32;
        for ch in 0..buf.channels() {
            for s in buf.channel_mut(ch) {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                *s = (x >> 8) as f32 / (1 << 23) as f32 - 1.0;
            }
        }
    }

    #[test]
    fn unity_is_bit_exact_and_untouched() {
        let mut buf = PlanarBuf::new(2, 128);
        noise(&mut buf);
        // A NaN shows that the samples are not even multiplied.
        buf.channel_mut(1)[5] = f32::NAN;
        let before: Vec<u32> = (0..2)
            .flat_map(|c| {
                buf.channel(c)
                    .iter()
                    .map(|s| s.to_bits())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut ramp = GainRamp::new(1.0);
        ramp.apply(&mut buf.view_mut(128));
        let after: Vec<u32> = (0..2)
            .flat_map(|c| {
                buf.channel(c)
                    .iter()
                    .map(|s| s.to_bits())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(before, after);
        apply_gain(buf.channel_mut(0), 1.0);
        assert_eq!(
            before[..128],
            buf.channel(0)
                .iter()
                .map(|s| s.to_bits())
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn constant_gain_and_mute() {
        let mut buf = PlanarBuf::new(2, 64);
        noise(&mut buf);
        let orig = buf.clone();
        let mut ramp = GainRamp::new(0.5);
        ramp.apply(&mut buf.view_mut(64));
        for ch in 0..2 {
            for (a, b) in buf.channel(ch).iter().zip(orig.channel(ch)) {
                assert_eq!(*a, b * 0.5);
            }
        }
        let mut ramp = GainRamp::new(0.0);
        ramp.apply(&mut buf.view_mut(64));
        assert!(
            buf.channel(0)
                .iter()
                .chain(buf.channel(1))
                .all(|s| s.to_bits() == 0)
        );
    }

    #[test]
    fn ramp_progresses_identically_on_every_channel_across_blocks() {
        let total = 300;
        let mut buf = PlanarBuf::new(3, 1024);
        for ch in 0..3 {
            buf.channel_mut(ch).fill(1.0);
        }
        let mut ramp = GainRamp::new(1.0);
        ramp.set_target(0.0, total);
        assert!(ramp.is_ramping());
        assert_eq!(ramp.target(), 0.0);
        // Odd block sizes so the ramp spans several calls and ends mid-block.
        let mut pos = 0;
        let mut gains = Vec::new();
        for block in [7usize, 64, 100, 1, 200, 50] {
            let mut v = buf.view_mut(block);
            for ch in 0..3 {
                v.channel_mut(ch).fill(1.0);
            }
            ramp.apply(&mut v);
            for f in 0..block {
                let g = v.channel(0)[f];
                assert_eq!(g, v.channel(1)[f]);
                assert_eq!(g, v.channel(2)[f]);
                gains.push(g);
            }
            pos += block;
            if pos < total {
                assert!(ramp.is_ramping());
            }
        }
        assert!(!ramp.is_ramping());
        assert_eq!(ramp.current(), 0.0);
        for (i, g) in gains.iter().enumerate() {
            let expect = if i + 1 >= total {
                0.0
            } else {
                1.0 - (i + 1) as f32 / total as f32
            };
            assert!((g - expect).abs() < 1e-5, "frame {i}: {g} vs {expect}");
        }
        // Strictly decreasing during the ramp, then exactly zero.
        for w in gains[..total].windows(2) {
            assert!(w[1] < w[0]);
        }
        assert!(gains[total - 1..].iter().all(|g| *g == 0.0));
    }

    #[test]
    fn ramp_to_unity_ends_bit_exact() {
        let mut ramp = GainRamp::new(0.0);
        ramp.set_target(1.0, 100);
        let mut buf = PlanarBuf::new(1, 256);
        buf.channel_mut(0).fill(0.3);
        ramp.apply(&mut buf.view_mut(256));
        assert!(!ramp.is_ramping());
        assert_eq!(ramp.current(), 1.0);
        assert_eq!(buf.channel(0)[99], 0.3);
        assert!(buf.channel(0)[100..].iter().all(|s| *s == 0.3));
    }

    #[test]
    fn retarget_mid_ramp_starts_from_current() {
        let mut ramp = GainRamp::new(0.0);
        ramp.set_target(1.0, 100);
        let mut buf = PlanarBuf::new(1, 50);
        ramp.apply(&mut buf.view_mut(50));
        assert!((ramp.current() - 0.5).abs() < 1e-6);
        ramp.set_target(0.0, 10);
        assert!((ramp.current() - 0.5).abs() < 1e-6);
        buf.channel_mut(0).fill(1.0);
        ramp.apply(&mut buf.view_mut(20));
        assert!((buf.channel(0)[0] - 0.45).abs() < 1e-6);
        assert_eq!(buf.channel(0)[9], 0.0);
        assert_eq!(buf.channel(0)[19], 0.0);
        // Zero-length ramps jump.
        ramp.set_target(0.25, 0);
        assert!(!ramp.is_ramping());
        assert_eq!(ramp.current(), 0.25);
    }
}
