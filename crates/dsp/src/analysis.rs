//! Measurements for tests and acceptance checks: test tones, distortion, impulses.
//! These allocate and are not meant for the real-time cycle.

use std::f64::consts::PI;

/// `frames` samples of a sine of `freq` Hz and peak `amplitude` at `rate` Hz,
/// starting at phase 0 (computed in f64, so the only error is f32 rounding).
pub fn sine(rate: u32, freq: f64, amplitude: f32, frames: usize) -> Vec<f32> {
    let w = 2.0 * PI * freq / rate as f64;
    (0..frames)
        .map(|n| (amplitude as f64 * (w * n as f64).sin()) as f32)
        .collect()
}

/// THD+N of `signal` around a sine of `freq` Hz, in dB: everything that a least-squares
/// fit of `a·sin + b·cos + c` at that frequency does not explain, relative to the
/// fitted sine's power. DC is fitted out, so it does not count as noise.
pub fn thd_n_db(signal: &[f32], rate: u32, freq: f64) -> f64 {
    let w = 2.0 * PI * freq / rate as f64;
    // Normal equations for the basis (sin, cos, 1), accumulated in f64.
    let mut ata = [[0.0f64; 3]; 3];
    let mut atb = [0.0f64; 3];
    let basis = |n: usize| {
        let (s, c) = (w * n as f64).sin_cos();
        [s, c, 1.0]
    };
    for (n, &x) in signal.iter().enumerate() {
        let b = basis(n);
        for i in 0..3 {
            for j in 0..3 {
                ata[i][j] += b[i] * b[j];
            }
            atb[i] += b[i] * x as f64;
        }
    }
    let Some(coef) = solve3(ata, atb) else {
        return f64::NAN;
    };
    let mut residual = 0.0f64;
    for (n, &x) in signal.iter().enumerate() {
        let b = basis(n);
        let fit = coef[0] * b[0] + coef[1] * b[1] + coef[2] * b[2];
        residual += (x as f64 - fit).powi(2);
    }
    let residual = residual / signal.len() as f64;
    let fundamental = (coef[0] * coef[0] + coef[1] * coef[1]) / 2.0;
    10.0 * (residual / fundamental).log10()
}

/// Gaussian elimination with partial pivoting; `None` for a singular system.
#[allow(clippy::needless_range_loop)]
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..3 {
            let f = a[row][col] / a[col][col];
            for k in col..3 {
                a[row][k] -= f * a[col][k];
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0f64; 3];
    for row in (0..3).rev() {
        let s: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

/// Finds the first impulse: the index of the largest magnitude within the first run
/// of samples whose magnitude reaches `threshold`. Taking the peak rather than the
/// first crossing keeps a filtered impulse's pre-ringing from moving the answer.
pub fn find_impulse(signal: &[f32], threshold: f32) -> Option<usize> {
    let start = signal.iter().position(|x| x.abs() >= threshold)?;
    let mut best = start;
    for (i, x) in signal.iter().enumerate().skip(start) {
        if x.abs() < threshold {
            break;
        }
        if x.abs() > signal[best].abs() {
            best = i;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pure_sine_has_tiny_thd_n() {
        let s = sine(48000, 1000.0, 0.5, 48000);
        let thd = thd_n_db(&s, 48000, 1000.0);
        // Only f32 rounding is left: about -150 dB for a half-scale sine.
        assert!(thd < -130.0, "{thd}");
    }

    #[test]
    fn known_noise_level_is_measured() {
        let mut s = sine(48000, 1000.0, 1.0, 48000);
        // Add a 3rd harmonic at -40 dB relative amplitude and a DC offset.
        let h = sine(48000, 3000.0, 0.01, 48000);
        for (x, y) in s.iter_mut().zip(&h) {
            *x += y + 0.25;
        }
        let thd = thd_n_db(&s, 48000, 1000.0);
        assert!((thd + 40.0).abs() < 0.05, "{thd}");
    }

    #[test]
    fn phase_and_partial_periods_do_not_matter() {
        let s = sine(44100, 1234.5, 0.3, 10_007);
        let thd = thd_n_db(&s[123..], 44100, 1234.5);
        assert!(thd < -130.0, "{thd}");
    }

    #[test]
    fn impulses() {
        assert_eq!(find_impulse(&[0.0, 0.1, 0.0], 0.5), None);
        let s = [0.0, 0.05, -0.2, 0.6, 0.9, 0.7, 0.1, 1.0];
        assert_eq!(find_impulse(&s, 0.5), Some(4));
        assert_eq!(find_impulse(&[0.0, -1.0], 0.5), Some(1));
    }

    #[test]
    fn sine_values() {
        let s = sine(8, 2.0, 1.0, 4);
        assert_eq!(s[0], 0.0);
        assert!((s[1] - 1.0).abs() < 1e-7);
        assert!(s[2].abs() < 1e-7);
    }
}
