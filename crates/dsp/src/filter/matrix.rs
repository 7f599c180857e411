//! A channel mixer's controls, `gain_<output>_<input>`: the names read without
//! allocating and the values checked, the same on the control side
//! ([`super::Controls::check`]) and in the mixer.

use super::error::{FilterError, MAX_GAIN_DB};

/// The largest weight a mixer takes, linear (the ±120 dB every gain is held to).
pub fn max_weight() -> f64 {
    10f64.powf(MAX_GAIN_DB / 20.0)
}

pub(crate) fn check_weight(w: f64) -> Result<(), FilterError> {
    if w.is_finite() && w.abs() <= max_weight() {
        Ok(())
    } else {
        Err(FilterError::ControlValue {
            name: "gain_<output>_<input>",
            value: w,
            why: "a weight must be a finite linear factor within ±1e6 (±120 dB)",
        })
    }
}

pub(crate) fn check_index(
    o: usize,
    i: usize,
    outputs: usize,
    inputs: usize,
    value: f64,
) -> Result<(), FilterError> {
    if o < outputs && i < inputs {
        Ok(())
    } else {
        Err(FilterError::ControlValue {
            name: "gain_<output>_<input>",
            value,
            why: "no such matrix entry: outputs and inputs count from 0",
        })
    }
}

/// Reads a control name `gain_<output>_<input>` without allocating.
pub(crate) fn parse_control(name: &str) -> Option<(usize, usize)> {
    let (o, i) = name.strip_prefix("gain_")?.split_once('_')?;
    Some((o.parse().ok()?, i.parse().ok()?))
}

/// The names of a mixer's controls, for messages.
pub(crate) const CONTROL_NAMES: &str = "gain_<output>_<input> (a linear weight, from 0)";

/// The control-side check of a change to a mixer of `outputs` × `inputs`.
pub(crate) fn check_control(
    name: &str,
    value: f64,
    outputs: usize,
    inputs: usize,
) -> Result<(), FilterError> {
    let (o, i) = parse_control(name).ok_or(FilterError::UnknownControl {
        known: CONTROL_NAMES,
    })?;
    check_index(o, i, outputs, inputs, value)?;
    check_weight(value)
}
