//! The processor trait every non-device node implements.

use crate::rt::retune::Retune;
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
    /// Frames the engine processed before this cycle (the graph's frame clock; it
    /// stands still while the devices are suspended).
    pub position: u64,
    /// Frames of playback the driver device had queued after its last write.
    pub playback_delay: usize,
    /// Frames of capture delay of the driver device.
    pub capture_delay: usize,
    /// Frames the driver device still has queued when it wakes a cycle (its safety
    /// margin): how long the cycle may run before the device runs dry. 0 for a device
    /// with no buffer to run dry (the timer-paced null and file sinks).
    pub margin_frames: usize,
    /// The graph freewheels (JACK's freewheel): no device waits for this cycle, so
    /// nodes may take as long as they need.
    pub freewheel: bool,
    /// The queue the driver fills ahead to at this wakeup (frames; 0: one quantum per
    /// wakeup). See [`CycleInfo::another_cycle_follows`].
    pub fill_frames: usize,
}

impl CycleInfo {
    /// Whether, filling ahead, the driver has room for another quantum after this one,
    /// so the next cycle follows at once rather than after a long sleep (unless some
    /// stream then cannot deliver a quantum: the driver checks that too). A stream can
    /// hold back what would wake another thread until the burst's last cycle.
    pub fn another_cycle_follows(&self) -> bool {
        self.fill_frames > 0 && self.playback_delay + 2 * self.frames <= self.fill_frames
    }

    /// Nominal duration of this cycle in nanoseconds (`frames / rate`).
    pub fn period_ns(&self) -> u64 {
        self.frames as u64 * 1_000_000_000 / self.rate.max(1) as u64
    }

    /// [`CycleInfo::margin_frames`] in nanoseconds (0: no margin).
    pub fn margin_ns(&self) -> u64 {
        self.margin_frames as u64 * 1_000_000_000 / self.rate.max(1) as u64
    }
}

/// A node's signal processing.
///
/// Thread: every method but construction and drop is called only on the real-time
/// thread and must not allocate, lock, log or block (the one exception is
/// [`Processor::finish`], see there). Construction and drop happen on control threads
/// (the engine hands retired processors back before dropping them).
///
/// **Split-phase nodes.** A processor whose work happens elsewhere (a callback client
/// in another process) answers `true` from [`Processor::is_split`]. The runner then
/// calls [`Processor::begin`] when the node's turn comes, carries on with the nodes
/// that do not depend on it, and calls [`Processor::finish`] only when a later node
/// reads its outputs (or at the end of the cycle). Independent clients therefore run
/// in parallel, and one that is late costs the others nothing.
pub trait Processor: Send {
    /// Processes one cycle: reads `inputs` (one channel per input port, `cx.frames`
    /// frames) and fills every output channel. *RT*.
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>);

    /// In freewheel mode, whether the node can deliver a whole cycle of `frames` now
    /// (a stream whose client has not written yet answers false). *RT*.
    fn ready(&mut self, _frames: usize) -> bool {
        true
    }

    /// True if the node runs in two phases, `begin` and `finish`, instead of `process`.
    /// Must not change while the node exists. *RT*.
    fn is_split(&self) -> bool {
        false
    }

    /// Split-phase nodes: starts the cycle's work with the node's `inputs` and must not
    /// block. `outputs` may already be filled here (e.g. with results of the previous
    /// cycle) or left for `finish`. *RT*.
    fn begin(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {}

    /// Split-phase nodes: completes the cycle's work and leaves the outputs in
    /// `outputs`. This is the one place a processor may block, and only on an eventfd
    /// with a timeout that ends no later than the deadline it computed from `cx`
    /// (see the real-time contract in [`crate::rt`]). *RT*.
    fn finish(&mut self, _cx: &CycleInfo, _outputs: &mut PlanarMut<'_>) {}

    /// Whether the node can take back output it already produced ([`Processor::rewind`]).
    /// A device with a big buffer is only rewound when every node that has produced
    /// output can. *RT*.
    fn can_rewind(&self) -> bool {
        false
    }

    /// The device took back the last `frames` frames this node produced and had not
    /// played yet: produce them again from the next cycle on (with whatever changed
    /// since, e.g. a pause), so nothing is lost or repeated. With `discard` the node's
    /// own queued audio was dropped (a flush, e.g. a seek): the frames are not played
    /// again. *RT*.
    fn rewind(&mut self, _frames: usize, _discard: bool) {}

    /// Misses, underruns or overruns this node has counted so far (0 for nodes that
    /// count none); read after each cycle for per-node timing. *RT*.
    fn xruns(&self) -> u64 {
        0
    }

    /// Split-phase nodes: the times of the remote work collected by the last `finish`,
    /// or `None` when no remote work was collected (inactive, skipped or missed). Read
    /// right after `finish` for per-node timing ([`crate::rt::timing`]). *RT*.
    fn remote_times(&self) -> Option<crate::rt::timing::RemoteTimes> {
        None
    }

    /// Takes the rate converter of a [`Retune`] built on the control
    /// thread and leaves the one it replaces in `r`, to be freed off the RT thread
    /// ([`crate::Engine::retune`]). Nodes that convert no rate leave `r` as it is. *RT*.
    fn retune(&mut self, _r: &mut Retune) {}

    /// Which of the node's port buffers carry MIDI event lists ([`crate::rt::midi`])
    /// instead of audio, for the plan now running: called before `process`/`begin` in
    /// every cycle in which the node has MIDI ports, and once more when it has lost
    /// them. Buffers of MIDI ports hold event lists in their whole length
    /// ([`quaver_dsp::Planar::whole_channel`]); they must never be treated as samples.
    /// *RT*.
    fn midi_ports(&mut self, _ports: &crate::rt::midi::MidiPorts) {}

    /// Sets control `name` of the node's filter `index` to `value`
    /// ([`crate::Engine::filter_control`]); false when the node has no such control or
    /// refuses the value. Must not allocate, even to refuse. *RT*.
    fn control(&mut self, _index: usize, _name: &str, _value: f64) -> bool {
        false
    }
}
