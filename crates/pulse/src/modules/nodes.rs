//! The processors module nodes run (*RT*): a null device's copy, a loopback's gain.

use quaver_dsp::volume::GainRamp;
use quaver_dsp::{Planar, PlanarMut};
use quaver_engine::{CycleInfo, Processor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The processor of a null sink: the monitor is what was played into it.
pub struct NullSink;

impl Processor for NullSink {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            if ch < inputs.channels() {
                outputs.channel_mut(ch).copy_from_slice(inputs.channel(ch));
            } else {
                outputs.channel_mut(ch).fill(0.0);
            }
        }
    }
}

/// The source-output side of a loopback: its volume and mute as last set, and the
/// gain they make, which the loop's processor reads each cycle.
#[derive(Debug)]
pub struct LoopCapture {
    /// Linear volume and mute as set (reported back as the source output's).
    pub set: std::sync::Mutex<(f32, bool)>,
    /// `f32` bits of the gain in effect: the volume, or 0 when muted.
    gain: AtomicU32,
}

impl LoopCapture {
    pub(super) fn new() -> Self {
        LoopCapture {
            set: std::sync::Mutex::new((1.0, false)),
            gain: AtomicU32::new(1.0f32.to_bits()),
        }
    }

    /// Sets the volume (linear) and/or the mute; the loop follows within a ramp.
    pub fn update(&self, volume: Option<f32>, mute: Option<bool>) {
        let mut set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = volume {
            set.0 = v;
        }
        if let Some(m) = mute {
            set.1 = m;
        }
        let gain = if set.1 { 0.0 } else { set.0 };
        self.gain.store(gain.to_bits(), Ordering::Relaxed);
    }

    /// The volume (linear) and mute as set.
    pub fn get(&self) -> (f32, bool) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Frames over which a loopback's capture gain moves to a new value (no click).
const LOOP_RAMP_FRAMES: usize = 256;

/// A loopback's processor: its inputs to its outputs at the capture side's gain (the
/// sink input's volume is the node's own, applied by the engine to its outputs).
pub(super) struct Loop {
    pub(super) capture: Arc<LoopCapture>,
    pub(super) ramp: GainRamp,
}

impl Processor for Loop {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        NullSink.process(_cx, inputs, outputs);
        let target = f32::from_bits(self.capture.gain.load(Ordering::Relaxed));
        if target != self.ramp.target() {
            self.ramp.set_target(target, LOOP_RAMP_FRAMES);
        }
        self.ramp.apply(outputs);
    }
}
