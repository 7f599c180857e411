//! The filter a sink gets instead of a chain whose plugin failed.

use quaver_dsp::PlanarMut;
use quaver_dsp::filter::{Controls, Filter, FilterError};

/// What a sink plays when its chain has a plugin that could not be used: silence,
/// rather than the audio without a filter the chain may exist to protect from (a
/// crossover, a limiter).
pub struct Mute;

impl Filter for Mute {
    fn process(&mut self, buf: &mut PlanarMut) {
        buf.fill_silence();
    }
    fn reset(&mut self) {}
    fn set_control(&mut self, _name: &str, _value: f64) -> Result<(), FilterError> {
        Err(FilterError::UnknownControl {
            known: "no controls (the chain is muted: a plugin in it failed, see the log)",
        })
    }
    fn controls(&self) -> Controls {
        Controls::None
    }
}
