//! The test signal the load-style modes play: a precomputed stereo second of a few sines
//! and a little noise, streamed from memory or written once as a WAV for PulseAudio
//! clients.

use crate::tools::rng::Rng;
use anyhow::{Context, Result};

/// The load file's sample rate: not the sinks' 48 kHz, so every server resamples.
pub const FILE_RATE: u32 = 44_100;

/// A precomputed stereo test signal (a few sines and a little noise, 1 s long) that
/// every stream plays from its own random offset.
pub struct Signal {
    frames: Vec<f32>,
}

impl Signal {
    /// One second at `rate`.
    pub fn new(rate: u32, rng: &mut Rng) -> Signal {
        let n = rate as usize;
        let mut frames = Vec::with_capacity(n * 2);
        for i in 0..n {
            let t = i as f64 / rate as f64;
            let s = 0.05 * (2.0 * std::f64::consts::PI * 220.0 * t).sin()
                + 0.03 * (2.0 * std::f64::consts::PI * 1375.0 * t).sin()
                + 0.005 * (rng.unit() - 0.5);
            frames.push(s as f32);
            frames.push((0.8 * s) as f32);
        }
        Signal { frames }
    }

    /// Copies `out.len() / 2` frames starting at frame `pos` (wrapping).
    pub fn fill(&self, pos: &mut usize, out: &mut [f32]) {
        let len = self.frames.len();
        let mut done = 0;
        while done < out.len() {
            let start = (*pos * 2) % len;
            let take = (len - start).min(out.len() - done);
            out[done..done + take].copy_from_slice(&self.frames[start..start + take]);
            done += take;
            *pos += take / 2;
        }
    }
}

/// Writes `seconds` of the load signal as a 16-bit stereo WAV at `rate`.
pub fn write_wav(path: &std::path::Path, rate: u32, seconds: f64, rng: &mut Rng) -> Result<()> {
    let sig = Signal::new(rate, rng);
    let frames = (seconds * rate as f64) as usize;
    let mut buf = vec![0f32; frames * 2];
    let mut pos = 0;
    sig.fill(&mut pos, &mut buf);
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec)
        .with_context(|| format!("creating {}", path.display()))?;
    for s in buf {
        w.write_sample((s.clamp(-1.0, 1.0) * i16::MAX as f32).round() as i16)?;
    }
    w.finalize()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_wraps_and_advances() {
        let s = Signal::new(100, &mut Rng::new(1));
        let mut pos = 95;
        let mut out = vec![0.0; 20];
        s.fill(&mut pos, &mut out);
        assert_eq!(pos, 105);
        assert_eq!(out[10], s.frames[0]);
        assert_eq!(out[0], s.frames[190]);
    }
}
