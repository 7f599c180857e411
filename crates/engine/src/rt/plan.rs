//! Compiled execution plans and the node slots the real-time thread owns.
//!
//! A [`Plan`] is built on a control thread ([`crate::compile`]) and is immutable once
//! published: the real-time thread swaps it in at a cycle boundary and hands the old
//! one back to be freed on the control side.

use crate::rt::midi::MidiPorts;
use crate::rt::node::Processor;
use quaver_dsp::PlanarBuf;
use quaver_dsp::filter::FilterChain;
use quaver_dsp::volume::GainRamp;
use std::ops::Range;

/// How a link's gain behaves in the first cycle after its plan is swapped in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fade {
    /// Full gain, no ramp.
    Steady,
    /// New link: ramps 0 → 1 in the first cycle, then steady.
    In,
    /// Removed link: ramps 1 → 0 in the first cycle, then ignored.
    Out,
}

/// One link as the real-time thread executes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanLink {
    pub src_slot: usize,
    pub src_port: usize,
    pub dst_port: usize,
    pub fade: Fade,
    /// Joins MIDI ports: the events are merged, no fade applies.
    pub midi: bool,
}

/// What a step does besides running its processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceRole {
    /// Write the node's inputs to the device, copy them to the monitor outputs.
    Sink(usize),
    /// Fill the node's outputs from the device.
    Source(usize),
}

/// One node's turn in a cycle.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub slot: usize,
    pub links: Range<usize>,
    pub device: Option<DeviceRole>,
    pub stream: bool,
    /// Runs in the plan's first cycle only: a node that stopped in this plan, rendering
    /// the cycle in which its links to running nodes fade out.
    pub once: bool,
    /// A stream linked with one device's nodes only: while that device is gone it does
    /// not run, so none of its audio is lost before the policy moves it elsewhere.
    pub only_device: Option<usize>,
    /// The node's MIDI ports, an index into [`Plan::midi`] (`None`: audio only).
    pub midi: Option<usize>,
}

/// An immutable, fully resolved execution plan.
#[derive(Debug, Default)]
pub struct Plan {
    pub(crate) steps: Vec<Step>,
    pub(crate) links: Vec<PlanLink>,
    /// The MIDI ports of the steps that have some.
    pub(crate) midi: Vec<MidiPorts>,
    pub(crate) quantum: usize,
    /// True when client streams exist, which keeps the devices from suspending.
    pub(crate) keep_awake: bool,
    /// Suspended on request ([`crate::Engine::hold`]): the devices suspend even with
    /// streams, and stay suspended until released.
    pub(crate) held: bool,
    /// Frames of playback the driver may keep queued (filling ahead, see
    /// `Device::set_fill`); 0 for one quantum per wakeup.
    pub(crate) fill: usize,
    /// JACK's freewheel ([`crate::Engine::set_freewheel`]): the graph runs as fast as
    /// its clients allow, detached from the devices.
    pub(crate) freewheel: bool,
}

impl Plan {
    /// Frames per cycle this plan runs at.
    pub fn quantum(&self) -> usize {
        self.quantum
    }
}

/// A node's real-time state: its processor, port buffers and volume ramp.
pub struct NodeSlot {
    pub(crate) processor: Option<Box<dyn Processor>>,
    /// A stream's own filter chain ([`crate::Engine::set_stream_filter`]): on a
    /// playback stream's outputs after its processor, on a record stream's inputs
    /// before it; before the stream's volume either way.
    pub(crate) chain: Option<Box<FilterChain>>,
    pub(crate) inputs: PlanarBuf,
    pub(crate) outputs: PlanarBuf,
    pub(crate) gain: GainRamp,
    pub(crate) volume_on_inputs: bool,
    /// A split-phase processor began this cycle and has not finished yet.
    pub(crate) pending: bool,
    /// The processor has produced output (what a rewind would have to take back).
    pub(crate) rendered: bool,
    /// Where its output last ended on the driver's queue (`RtRunner::queued_until`): a
    /// rewind takes back from this node only what it rendered into the rewound span.
    pub(crate) rendered_until: u64,
    /// Split-phase nodes: the RT thread's time in `begin` this cycle, ns (per-node
    /// timing adds the `finish` part).
    pub(crate) begin_ns: u64,
    /// Which of its buffers carry MIDI event lists, as of the plan last run.
    pub(crate) midi: MidiPorts,
    /// `midi` is not empty.
    pub(crate) has_midi: bool,
}

impl NodeSlot {
    /// Allocates buffers for `max_quantum` frames (control thread).
    pub(crate) fn new(
        processor: Option<Box<dyn Processor>>,
        inputs: usize,
        outputs: usize,
        max_quantum: usize,
        gain: f32,
        volume_on_inputs: bool,
    ) -> Self {
        NodeSlot {
            processor,
            chain: None,
            inputs: PlanarBuf::new(inputs, max_quantum),
            outputs: PlanarBuf::new(outputs, max_quantum),
            gain: GainRamp::new(gain),
            volume_on_inputs,
            pending: false,
            rendered: false,
            rendered_until: 0,
            begin_ns: 0,
            midi: MidiPorts::NONE,
            has_midi: false,
        }
    }
}
