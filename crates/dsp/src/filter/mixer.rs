//! A channel mixer: every output channel a weighted sum of the input channels, with
//! each weight ramped linearly on a change so a new matrix never clicks.

use super::base::Filter;
use super::controls::Controls;
use super::error::FilterError;
use super::matrix::{CONTROL_NAMES, check_index, check_weight, parse_control};
use crate::buffer::PlanarMut;
use crate::volume::DEFAULT_RAMP_FRAMES;

/// Frames copied aside per pass: the outputs overwrite the inputs in place, so each
/// pass keeps a copy of the inputs it reads. Small enough to stay in L1.
const CHUNK: usize = 256;

/// Ready-made matrices for common jobs, as the config names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MixerPreset {
    /// Every input channel into one, each weighted 1/N (N→1), so a full-scale
    /// signal on every channel stays full scale.
    MonoDownmix,
    /// Left and right exchanged (2→2).
    Swap,
    /// Stereo into the front pair of 5.1, the other four silent (2→6). Front left and
    /// right are the first two channels in every 5.1 order (ALSA's, WAV's).
    #[serde(rename = "stereo_to_5_1_front")]
    StereoTo51Front,
}

impl MixerPreset {
    /// The matrix (rows are outputs, columns inputs) for `inputs` channels in.
    pub fn matrix(self, inputs: usize) -> Result<Vec<Vec<f64>>, FilterError> {
        let fixed = |n: usize, why: &'static str| {
            if inputs == n {
                Ok(())
            } else {
                Err(FilterError::Mixer { what: why })
            }
        };
        Ok(match self {
            MixerPreset::MonoDownmix => {
                if inputs == 0 {
                    return Err(FilterError::Mixer {
                        what: "mono_downmix needs at least one channel in",
                    });
                }
                vec![vec![1.0 / inputs as f64; inputs]]
            }
            MixerPreset::Swap => {
                fixed(2, "swap takes 2 channels in")?;
                vec![vec![0.0, 1.0], vec![1.0, 0.0]]
            }
            MixerPreset::StereoTo51Front => {
                fixed(2, "stereo_to_5_1_front takes 2 channels in")?;
                let mut m = vec![vec![0.0; 2]; 6];
                m[0][0] = 1.0;
                m[1][1] = 1.0;
                m
            }
        })
    }
}

/// One weight and its ramp. The value now is `target - step * left`, computed
/// rather than accumulated, so a ramp lands exactly on its target.
#[derive(Debug, Clone, Copy)]
struct Weight {
    target: f32,
    step: f32,
    left: usize,
}

impl Weight {
    fn now(&self) -> f32 {
        self.target - self.step * self.left as f32
    }
}

/// An outputs × inputs gain matrix. Reads the first `inputs` channels of the buffer
/// and writes the first `outputs`; channels from `outputs` up to `inputs` (when it
/// narrows) are zeroed, since nothing after it owns them.
pub struct ChannelMixer {
    inputs: usize,
    outputs: usize,
    /// Row-major: weight of input `i` in output `o` at `o * inputs + i`.
    weights: Vec<Weight>,
    ramp_frames: usize,
    /// `inputs` runs of [`CHUNK`] frames.
    copy: Vec<f32>,
}

impl ChannelMixer {
    /// A mixer with `matrix` (one row per output channel, each with one weight per
    /// input channel, linear), ramping over [`DEFAULT_RAMP_FRAMES`] on changes.
    pub fn new(matrix: &[Vec<f64>]) -> Result<Self, FilterError> {
        let outputs = matrix.len();
        let inputs = matrix.first().map_or(0, Vec::len);
        if outputs == 0 || inputs == 0 {
            return Err(FilterError::Mixer {
                what: "the matrix needs at least one row (output) and one column (input)",
            });
        }
        if matrix.iter().any(|r| r.len() != inputs) {
            return Err(FilterError::Mixer {
                what: "every row (output) needs the same number of columns (inputs)",
            });
        }
        let mut weights = Vec::with_capacity(outputs * inputs);
        for &w in matrix.iter().flatten() {
            check_weight(w)?;
            weights.push(Weight {
                target: w as f32,
                step: 0.0,
                left: 0,
            });
        }
        Ok(ChannelMixer {
            inputs,
            outputs,
            weights,
            ramp_frames: DEFAULT_RAMP_FRAMES,
            copy: vec![0.0; inputs * CHUNK],
        })
    }

    /// Sets how many frames later changes take (0 jumps).
    pub fn set_ramp_frames(&mut self, frames: usize) {
        self.ramp_frames = frames;
    }

    /// Channels read.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Channels written.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// The weight of input `input` in output `output` asked for last.
    pub fn weight(&self, output: usize, input: usize) -> Option<f64> {
        (output < self.outputs && input < self.inputs)
            .then(|| self.weights[output * self.inputs + input].target as f64)
    }

    /// Ramps the weight of input `input` in output `output` from wherever it is now to
    /// `value` (linear). Does not allocate.
    pub fn set_weight(
        &mut self,
        output: usize,
        input: usize,
        value: f64,
    ) -> Result<(), FilterError> {
        check_index(output, input, self.outputs, self.inputs, value)?;
        check_weight(value)?;
        let w = &mut self.weights[output * self.inputs + input];
        let now = w.now();
        w.target = value as f32;
        if self.ramp_frames == 0 || now == w.target {
            (w.step, w.left) = (0.0, 0);
        } else {
            w.step = (w.target - now) / self.ramp_frames as f32;
            w.left = self.ramp_frames;
        }
        Ok(())
    }

    /// Mixes `n` frames from `off` of the copied inputs into output `o`.
    fn mix_output(&mut self, buf: &mut PlanarMut, o: usize, off: usize, n: usize) {
        let out = &mut buf.channel_mut(o)[off..off + n];
        out.fill(0.0);
        for i in 0..self.inputs {
            let w = &mut self.weights[o * self.inputs + i];
            let src = &self.copy[i * CHUNK..i * CHUNK + n];
            let k = w.left.min(n);
            for (t, (y, x)) in out[..k].iter_mut().zip(&src[..k]).enumerate() {
                let g = w.target - w.step * (w.left - t - 1) as f32;
                *y += g * x;
            }
            w.left -= k;
            let g = w.target;
            if g != 0.0 {
                for (y, x) in out[k..].iter_mut().zip(&src[k..]) {
                    *y += g * x;
                }
            }
        }
    }
}

impl Filter for ChannelMixer {
    fn process(&mut self, buf: &mut PlanarMut) {
        // A chain built by `FilterChain::for_channels` always gives enough channels;
        // anything else is a caller's mistake, answered with silence, never a panic
        // on the RT thread.
        if buf.channels() < self.inputs.max(self.outputs) {
            buf.fill_silence();
            return;
        }
        let frames = buf.frames();
        let mut off = 0;
        while off < frames {
            let n = (frames - off).min(CHUNK);
            for i in 0..self.inputs {
                self.copy[i * CHUNK..i * CHUNK + n].copy_from_slice(&buf.channel(i)[off..off + n]);
            }
            for o in 0..self.outputs {
                self.mix_output(buf, o, off, n);
            }
            off += n;
        }
        for ch in self.outputs..self.inputs {
            buf.channel_mut(ch).fill(0.0);
        }
    }

    fn reset(&mut self) {
        for w in &mut self.weights {
            (w.step, w.left) = (0.0, 0);
        }
    }

    fn channels_in_out(&self) -> Option<(usize, usize)> {
        Some((self.inputs, self.outputs))
    }

    fn controls(&self) -> Controls {
        Controls::Mixer {
            outputs: self.outputs,
            inputs: self.inputs,
        }
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        let (o, i) = parse_control(name).ok_or(FilterError::UnknownControl {
            known: CONTROL_NAMES,
        })?;
        self.set_weight(o, i, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_names_parse_without_surprises() {
        assert_eq!(parse_control("gain_0_1"), Some((0, 1)));
        assert_eq!(parse_control("gain_12_3"), Some((12, 3)));
        assert_eq!(parse_control("gain_0"), None);
        assert_eq!(parse_control("gain_a_1"), None);
        assert_eq!(parse_control("gain_db"), None);
        assert_eq!(parse_control("gain_1_2_3"), None);
    }

    #[test]
    fn bad_matrices_are_refused_with_the_reason() {
        let e = |m: &[Vec<f64>]| ChannelMixer::new(m).err().unwrap().to_string();
        assert!(e(&[]).contains("at least one row"));
        assert!(e(&[vec![1.0, 0.0], vec![1.0]]).contains("same number of columns"));
        assert!(e(&[vec![f64::NAN]]).contains("finite linear factor"));
        assert!(
            MixerPreset::Swap
                .matrix(6)
                .unwrap_err()
                .to_string()
                .contains("swap takes 2 channels in")
        );
        let mut m = ChannelMixer::new(&[vec![1.0, 0.0]]).unwrap();
        assert!(m.set_weight(1, 0, 1.0).is_err());
        assert!(m.set_control("gain_0_2", 1.0).is_err());
        assert_eq!(m.weight(0, 0), Some(1.0));
    }
}
