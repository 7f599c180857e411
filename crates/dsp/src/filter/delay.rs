//! A whole-frame delay per channel (speaker distance alignment). A change of delay
//! crossfades from the old read position to the new one, since jumping would cut
//! the waveform.

use super::base::Filter;
use super::controls::Controls;
use super::error::{DEFAULT_FADE_FRAMES, FilterError};
use crate::buffer::PlanarMut;

/// Delays each channel by a whole number of frames, up to a maximum fixed at
/// construction.
pub struct Delay {
    /// One ring per channel, `mask + 1` long (a power of two).
    lines: Vec<Vec<f32>>,
    mask: usize,
    write: usize,
    max: usize,
    delays: Vec<usize>,
    /// The delays being faded away from; equal to `delays` when no fade runs.
    old: Vec<usize>,
    fade_done: usize,
    fade_frames: usize,
}

impl Delay {
    /// A delay line holding up to `max_frames` on each of `channels` channels, set
    /// to `delays` (one per channel, or one value for all).
    pub fn new(channels: usize, max_frames: usize, delays: &[usize]) -> Result<Self, FilterError> {
        let len = (max_frames + 1).next_power_of_two();
        let mut d = Delay {
            lines: vec![vec![0.0; len]; channels],
            mask: len - 1,
            write: 0,
            max: max_frames,
            delays: vec![0; channels],
            old: vec![0; channels],
            fade_done: 0,
            fade_frames: 0,
        };
        d.set_delays(delays)?;
        d.old.copy_from_slice(&d.delays);
        d.fade_frames = DEFAULT_FADE_FRAMES;
        d.fade_done = DEFAULT_FADE_FRAMES;
        Ok(d)
    }

    /// Sets the crossfade length for later changes (0 jumps).
    pub fn set_fade_frames(&mut self, frames: usize) {
        if self.fade_done >= self.fade_frames {
            self.fade_done = frames;
        }
        self.fade_frames = frames;
    }

    /// The delays in frames, per channel.
    pub fn delays(&self) -> &[usize] {
        &self.delays
    }

    /// Changes the delays (one per channel, or one for all), crossfading from the
    /// current output. A change during a fade restarts the fade from the old delays'
    /// output as it is, which still keeps the output continuous. Does not allocate.
    pub fn set_delays(&mut self, delays: &[usize]) -> Result<(), FilterError> {
        if let Some(&frames) = delays.iter().find(|&&d| d > self.max) {
            return Err(FilterError::Delay {
                frames,
                max: self.max,
            });
        }
        if delays.len() != 1 && delays.len() != self.delays.len() {
            return Err(FilterError::ImpulseCount {
                irs: delays.len(),
                channels: self.delays.len(),
            });
        }
        let fading = self.fade_done < self.fade_frames;
        for ch in 0..self.delays.len() {
            if !fading {
                self.old[ch] = self.delays[ch];
            }
            self.delays[ch] = delays[if delays.len() == 1 { 0 } else { ch }];
        }
        if self.fade_frames == 0 {
            self.old.copy_from_slice(&self.delays);
        } else {
            self.fade_done = 0;
        }
        Ok(())
    }
}

impl Filter for Delay {
    fn process(&mut self, buf: &mut PlanarMut) {
        let frames = buf.frames();
        let channels = buf.channels().min(self.lines.len());
        let total = self.fade_frames as f32;
        for ch in 0..channels {
            let line = &mut self.lines[ch];
            let (d_new, d_old) = (self.delays[ch], self.old[ch]);
            let mut w = self.write;
            for (i, x) in buf.channel_mut(ch).iter_mut().enumerate() {
                line[w] = *x;
                let y = line[(w.wrapping_sub(d_new)) & self.mask];
                let done = self.fade_done + i;
                *x = if done < self.fade_frames {
                    let y_old = line[(w.wrapping_sub(d_old)) & self.mask];
                    y_old + (y - y_old) * ((done + 1) as f32 / total)
                } else {
                    y
                };
                w = (w + 1) & self.mask;
            }
        }
        self.write = (self.write + frames) & self.mask;
        self.fade_done = (self.fade_done + frames).min(self.fade_frames);
        if self.fade_done >= self.fade_frames {
            self.old.copy_from_slice(&self.delays);
        }
    }

    fn reset(&mut self) {
        for l in &mut self.lines {
            l.fill(0.0);
        }
        self.fade_done = self.fade_frames;
        self.old.copy_from_slice(&self.delays);
    }

    fn latency(&self) -> usize {
        self.delays.iter().copied().max().unwrap_or(0)
    }

    fn controls(&self) -> Controls {
        Controls::Delay { max: self.max }
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        match name {
            "frames" if value >= 0.0 && value.fract() == 0.0 && value <= self.max as f64 => {
                self.set_delays(&[value as usize])
            }
            "frames" => Err(FilterError::ControlValue {
                name: "frames",
                value,
                why: "must be a whole number of frames within the line's maximum",
            }),
            _ => Err(super::error::unknown_control(name, "frames")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PlanarBuf;

    #[test]
    fn an_impulse_comes_out_after_each_channels_delay() {
        let mut d = Delay::new(2, 100, &[3, 70]).unwrap();
        let mut buf = PlanarBuf::new(2, 64);
        let mut out = vec![vec![]; 2];
        for block in 0..3 {
            for ch in 0..2 {
                buf.channel_mut(ch).fill(0.0);
                if block == 0 {
                    buf.channel_mut(ch)[5] = 1.0;
                }
            }
            d.process(&mut buf.view_mut(64));
            for (ch, o) in out.iter_mut().enumerate() {
                o.extend_from_slice(buf.channel(ch));
            }
        }
        let at = |o: &Vec<f32>| o.iter().position(|&x| x == 1.0);
        assert_eq!(at(&out[0]), Some(8));
        assert_eq!(at(&out[1]), Some(75));
        assert!(Delay::new(1, 10, &[11]).is_err());
        assert!(d.set_delays(&[1, 2, 3]).is_err());
    }

    #[test]
    fn a_delay_change_fades_without_a_step() {
        let mut d = Delay::new(1, 1000, &[0]).unwrap();
        d.set_fade_frames(256);
        let mut buf = PlanarBuf::new(1, 128);
        let mut out = vec![];
        let mut n = 0usize;
        for block in 0..20 {
            if block == 5 {
                d.set_delays(&[500]).unwrap();
            }
            for x in buf.channel_mut(0).iter_mut() {
                *x = (n as f32 * 0.01).sin();
                n += 1;
            }
            d.process(&mut buf.view_mut(128));
            out.extend_from_slice(buf.channel(0));
        }
        // A sine of 0.01 rad/sample steps at most 0.01; the fade from one tap to the
        // other adds at most 2/256 per sample.
        let max_step = out
            .windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .fold(0.0, f32::max);
        assert!(max_step < 0.01 + 2.0 / 256.0 + 1e-4, "step {max_step}");
    }
}
