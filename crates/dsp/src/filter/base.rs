//! The trait every filter implements.

use super::controls::Controls;
use super::error::FilterError;
use crate::buffer::PlanarMut;

/// One filter of a chain. Implementations process in place, take any number of frames
/// per call, and never allocate in `process`.
pub trait Filter: Send {
    /// Filters `buf` in place. Channels beyond the filter's own count pass unchanged.
    fn process(&mut self, buf: &mut PlanarMut);
    /// Forgets all history (delay lines, filter state), as if just built; settings stay.
    fn reset(&mut self);
    /// `(inputs, outputs)` for a filter that changes the channel count (a channel mixer,
    /// a crossover): it reads the first `inputs` channels and writes the first
    /// `outputs`. `None` for a filter that works in place on the channels it was built
    /// for, which is every other kind.
    fn channels_in_out(&self) -> Option<(usize, usize)> {
        None
    }
    /// Frames by which the filter delays its input (a limiter's lookahead).
    fn latency(&self) -> usize {
        0
    }
    /// Changes the named control live, without a click (ramped or crossfaded). A bad
    /// name or value is refused and nothing changes. Never allocates, not even to fail.
    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError>;
    /// The controls and the values they take, to check changes on the control side.
    fn controls(&self) -> Controls;
}
