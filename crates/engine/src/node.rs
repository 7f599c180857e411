//! The processor trait every non-device node implements.

use quaver_dsp::{Planar, PlanarMut};

/// Facts about the cycle being run, handed to every processor.
#[derive(Debug, Clone, Copy, Default)]
pub struct CycleInfo {
    /// Frames in this cycle (the quantum).
    pub frames: usize,
    /// Engine sample rate in Hz.
    pub rate: u32,
    /// Cycle counter since the engine started.
    pub cycle: u64,
    /// CLOCK_MONOTONIC time the cycle started, in nanoseconds.
    pub time_ns: u64,
    /// Frames of playback the driver device had queued after its last write.
    pub playback_delay: usize,
    /// Frames of capture delay of the driver device.
    pub capture_delay: usize,
}

/// A node's signal processing.
///
/// Thread: `process` and `ready` are called only on the real-time thread; they must not
/// allocate, lock, log or block. Construction and drop happen on control threads (the
/// engine hands retired processors back before dropping them).
pub trait Processor: Send {
    /// Processes one cycle: reads `inputs` (one channel per input port, `cx.frames`
    /// frames) and fills every output channel. *RT*.
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>);

    /// In freewheel mode, whether the node can deliver a whole cycle of `frames` now
    /// (a stream whose client has not written yet answers false). *RT*.
    fn ready(&self, _frames: usize) -> bool {
        true
    }
}
