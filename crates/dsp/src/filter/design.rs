//! The coefficients of Robert Bristow-Johnson's Audio EQ Cookbook sections.

use super::error::{FilterError, check_gain_db, check_rate};
use std::f64::consts::PI;

/// The cookbook's filter shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BiquadKind {
    /// Bell boost or cut of `gain_db` at `freq`, width set by `q`.
    Peaking,
    /// `gain_db` below `freq`, unity above; `q` = 1/√2 is the cookbook's slope S = 1.
    LowShelf,
    /// `gain_db` above `freq`, unity below.
    HighShelf,
    /// Second-order low-pass; `q` = 1/√2 is Butterworth.
    LowPass,
    /// Second-order high-pass.
    HighPass,
    /// Rejects `freq`, width set by `q`.
    Notch,
    /// Unity magnitude, phase turning through −180° at `freq`.
    AllPass,
}

/// The settings of one section.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BiquadParams {
    /// The shape.
    pub kind: BiquadKind,
    /// Centre or corner frequency in Hz.
    pub freq: f64,
    /// Quality factor.
    pub q: f64,
    /// Boost (positive) or cut in dB; only peaking and shelves use it.
    #[serde(default)]
    pub gain_db: f64,
}

/// Normalised coefficients (a0 = 1): y = b0·x + b1·x₁ + b2·x₂ − a1·y₁ − a2·y₂.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Coeffs {
    /// Feed-forward coefficients.
    pub b: [f64; 3],
    /// Feedback coefficients a1 and a2.
    pub a: [f64; 2],
}

impl Coeffs {
    /// The cookbook design of `p` at sample rate `rate`.
    pub fn design(p: &BiquadParams, rate: f64) -> Result<Coeffs, FilterError> {
        check_rate(rate)?;
        let nyquist = rate / 2.0;
        if !(p.freq.is_finite() && p.freq > 0.0 && p.freq < nyquist) {
            return Err(FilterError::Frequency {
                freq: p.freq,
                nyquist,
                rate,
            });
        }
        if !(p.q.is_finite() && p.q > 0.0) {
            return Err(FilterError::Q(p.q));
        }
        check_gain_db(p.gain_db)?;
        let w0 = 2.0 * PI * p.freq / rate;
        let (sin, cos) = w0.sin_cos();
        let alpha = sin / (2.0 * p.q);
        let a = 10f64.powf(p.gain_db / 40.0);
        let (b, a_) = match p.kind {
            BiquadKind::Peaking => (
                [1.0 + alpha * a, -2.0 * cos, 1.0 - alpha * a],
                [1.0 + alpha / a, -2.0 * cos, 1.0 - alpha / a],
            ),
            BiquadKind::LowShelf => {
                let k = 2.0 * a.sqrt() * alpha;
                (
                    [
                        a * ((a + 1.0) - (a - 1.0) * cos + k),
                        2.0 * a * ((a - 1.0) - (a + 1.0) * cos),
                        a * ((a + 1.0) - (a - 1.0) * cos - k),
                    ],
                    [
                        (a + 1.0) + (a - 1.0) * cos + k,
                        -2.0 * ((a - 1.0) + (a + 1.0) * cos),
                        (a + 1.0) + (a - 1.0) * cos - k,
                    ],
                )
            }
            BiquadKind::HighShelf => {
                let k = 2.0 * a.sqrt() * alpha;
                (
                    [
                        a * ((a + 1.0) + (a - 1.0) * cos + k),
                        -2.0 * a * ((a - 1.0) + (a + 1.0) * cos),
                        a * ((a + 1.0) + (a - 1.0) * cos - k),
                    ],
                    [
                        (a + 1.0) - (a - 1.0) * cos + k,
                        2.0 * ((a - 1.0) - (a + 1.0) * cos),
                        (a + 1.0) - (a - 1.0) * cos - k,
                    ],
                )
            }
            BiquadKind::LowPass => (
                [(1.0 - cos) / 2.0, 1.0 - cos, (1.0 - cos) / 2.0],
                [1.0 + alpha, -2.0 * cos, 1.0 - alpha],
            ),
            BiquadKind::HighPass => (
                [(1.0 + cos) / 2.0, -(1.0 + cos), (1.0 + cos) / 2.0],
                [1.0 + alpha, -2.0 * cos, 1.0 - alpha],
            ),
            BiquadKind::Notch => (
                [1.0, -2.0 * cos, 1.0],
                [1.0 + alpha, -2.0 * cos, 1.0 - alpha],
            ),
            BiquadKind::AllPass => (
                [1.0 - alpha, -2.0 * cos, 1.0 + alpha],
                [1.0 + alpha, -2.0 * cos, 1.0 - alpha],
            ),
        };
        let a0 = a_[0];
        Ok(Coeffs {
            b: [b[0] / a0, b[1] / a0, b[2] / a0],
            a: [a_[1] / a0, a_[2] / a0],
        })
    }

    /// The identity section.
    pub const IDENTITY: Coeffs = Coeffs {
        b: [1.0, 0.0, 0.0],
        a: [0.0, 0.0],
    };

    /// Magnitude of the response at `freq` Hz, from the transfer function.
    pub fn magnitude(&self, freq: f64, rate: f64) -> f64 {
        let w = 2.0 * PI * freq / rate;
        let (z1r, z1i) = (w.cos(), -w.sin());
        let (z2r, z2i) = ((2.0 * w).cos(), -(2.0 * w).sin());
        let nr = self.b[0] + self.b[1] * z1r + self.b[2] * z2r;
        let ni = self.b[1] * z1i + self.b[2] * z2i;
        let dr = 1.0 + self.a[0] * z1r + self.a[1] * z2r;
        let di = self.a[0] * z1i + self.a[1] * z2i;
        ((nr * nr + ni * ni) / (dr * dr + di * di)).sqrt()
    }
}
