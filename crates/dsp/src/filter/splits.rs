//! A crossover's split frequencies as controls: their names and the checks both the
//! filter and the control side run (`crossover.rs`, [`super::Controls::Crossover`]),
//! apart from both so that neither imports the other.

use super::design::{BiquadKind, BiquadParams, Coeffs};
use super::error::FilterError;
use std::f64::consts::FRAC_1_SQRT_2;

/// The most splits (4 bands): more is beyond what active speakers use.
pub const MAX_SPLITS: usize = 3;

/// Which frequency control `name` sets, of `splits`: `freq` with one split, else
/// `freq_<k>`.
pub(crate) fn freq_index(name: &str, splits: usize) -> Option<usize> {
    if splits == 1 {
        return (name == "freq").then_some(0);
    }
    let k: usize = name.strip_prefix("freq_")?.parse().ok()?;
    (k < splits).then_some(k)
}

/// Checks a change of frequency `k` of `freqs` at `rate`, and makes it when the
/// crossover would take it (the control side's [`super::Controls::Crossover`]).
pub(crate) fn check_freq(
    freqs: &mut [f64],
    rate: f64,
    name: &str,
    value: f64,
) -> Result<(), FilterError> {
    let k = freq_index(name, freqs.len()).ok_or(FilterError::UnknownControl {
        known: CONTROL_NAMES,
    })?;
    let mut next = [0.0; MAX_SPLITS];
    next[..freqs.len()].copy_from_slice(freqs);
    next[k] = value;
    let n = freqs.len();
    for f in &next[..n] {
        Coeffs::design(
            &BiquadParams {
                kind: BiquadKind::LowPass,
                freq: *f,
                q: FRAC_1_SQRT_2,
                gain_db: 0.0,
            },
            rate,
        )?;
    }
    if next[..n].windows(2).any(|w| w[0] >= w[1]) {
        return Err(FilterError::ControlValue {
            name: "freq",
            value,
            why: "crossover frequencies must rise from one to the next",
        });
    }
    freqs.copy_from_slice(&next[..n]);
    Ok(())
}

/// The controls' names, for messages.
pub(crate) const CONTROL_NAMES: &str = "freq (one split), or freq_0, freq_1, freq_2";
