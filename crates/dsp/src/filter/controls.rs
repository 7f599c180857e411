//! What a filter's controls accept, kept on the control side so that a bad change is
//! refused there with its reason, before anything is sent to the RT thread.

use super::design::{BiquadParams, Coeffs};
use super::error::FilterError;
use super::named::NamedControls;

/// The controls of one filter and the values they take. Built from the filter
/// (`Filter::controls`) and kept beside it; [`Controls::check`] follows the
/// accepted changes, so a biquad's `q` is checked with the frequency set before it.
#[derive(Debug, Clone, PartialEq)]
pub enum Controls {
    /// A filter with no controls (a convolver).
    None,
    /// `gain_db`.
    Gain,
    /// `freq`, `q` and `gain_db` of a biquad at `rate`.
    Biquad {
        /// Sample rate the filter runs at.
        rate: f64,
        /// The settings as changed so far.
        params: BiquadParams,
    },
    /// `frames`, up to `max`.
    Delay {
        /// The longest delay the line holds.
        max: usize,
    },
    /// `threshold_db`.
    Limiter,
    /// `gain_<output>_<input>` of a channel mixer of `outputs` × `inputs`.
    Mixer {
        /// Output channels (rows).
        outputs: usize,
        /// Input channels (columns).
        inputs: usize,
    },
    /// The split frequencies of a crossover at `rate`: `freq`, or `freq_<k>`.
    Crossover {
        /// Sample rate the filter runs at.
        rate: f64,
        /// The frequencies as changed so far; the first `splits` are used.
        freqs: [f64; super::splits::MAX_SPLITS],
        /// How many splits the crossover has.
        splits: usize,
    },
    /// Controls named when the filter was built (a plugin's control ports).
    Named(NamedControls),
}

impl Controls {
    /// The names, for messages.
    pub fn names(&self) -> &'static str {
        match self {
            Controls::None => "no controls",
            Controls::Gain => "gain_db",
            Controls::Biquad { .. } => "freq, q, gain_db",
            Controls::Delay { .. } => "frames",
            Controls::Limiter => "threshold_db",
            Controls::Mixer { .. } => super::matrix::CONTROL_NAMES,
            Controls::Crossover { .. } => super::splits::CONTROL_NAMES,
            Controls::Named(n) => n.names,
        }
    }

    /// Checks that the filter would take `value` for control `name` (and remembers it
    /// when it would).
    pub fn check(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        let unknown = FilterError::UnknownControl {
            known: self.names(),
        };
        match self {
            Controls::None => Err(unknown),
            Controls::Named(n) => n.check(name, value),
            Controls::Crossover {
                rate,
                freqs,
                splits,
            } => super::splits::check_freq(&mut freqs[..*splits], *rate, name, value),
            Controls::Mixer { outputs, inputs } => {
                super::matrix::check_control(name, value, *outputs, *inputs)
            }
            Controls::Gain if name == "gain_db" => super::error::check_gain_db(value),
            Controls::Biquad { rate, params } => {
                let mut p = *params;
                match name {
                    "freq" => p.freq = value,
                    "q" => p.q = value,
                    "gain_db" => p.gain_db = value,
                    _ => return Err(unknown),
                }
                Coeffs::design(&p, *rate)?;
                *params = p;
                Ok(())
            }
            Controls::Delay { max } if name == "frames" => {
                if value >= 0.0 && value.fract() == 0.0 && value <= *max as f64 {
                    Ok(())
                } else {
                    Err(FilterError::ControlValue {
                        name: "frames",
                        value,
                        why: "must be a whole number of frames within the line's maximum",
                    })
                }
            }
            Controls::Limiter if name == "threshold_db" => {
                if value.is_finite() && (-60.0..=0.0).contains(&value) {
                    Ok(())
                } else {
                    Err(FilterError::ControlValue {
                        name: "threshold_db",
                        value,
                        why: "must be between -60 and 0 dBFS",
                    })
                }
            }
            _ => Err(unknown),
        }
    }
}
