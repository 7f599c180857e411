//! The rate converter a stream node swaps in on the RT thread when its client's rate
//! moves too far for the converter it has; built by the stream adapters
//! ([`crate::stream`]) on a control thread.

use quaver_dsp::resample::StreamResampler;

/// A variable-rate stream's rate converter for a client rate beyond
/// [`crate::stream::MAX_RATE_CHANGE`] of the one its converter was built for (PulseAudio's
/// UPDATE_*_SAMPLE_RATE allows any rate): built on the control thread (it allocates),
/// swapped into the node on the RT thread by [`crate::Engine::retune`], and the old
/// converter travels back in it to be freed.
pub struct Retune {
    /// The client rate the converter is built for (after the swap: the replaced one's).
    pub(crate) rate: u32,
    pub(crate) resampler: Option<StreamResampler>,
    pub(crate) scratch: Vec<f32>,
}

impl Retune {
    /// The client rate of the converter it holds.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// Swaps converter, scratch and base rate with an adapter's, if the adapter is a
    /// variable-rate one (its converter adjustable; a fixed-rate stream keeps its
    /// own). Returns whether it swapped. *RT*.
    pub(crate) fn swap(
        &mut self,
        resampler: &mut Option<StreamResampler>,
        scratch: &mut Vec<f32>,
        base: &mut u32,
    ) -> bool {
        if !resampler
            .as_ref()
            .is_some_and(StreamResampler::is_adjustable)
        {
            return false;
        }
        std::mem::swap(&mut self.resampler, resampler);
        std::mem::swap(&mut self.scratch, scratch);
        std::mem::swap(&mut self.rate, base);
        true
    }
}
