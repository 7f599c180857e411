//! The queues between the control side and the real-time thread: what each side sends.

use crate::rt::follow::Follower;
use crate::rt::plan::{NodeSlot, Plan};
use crate::rt::retune::Retune;
use quaver_devices::Device;

/// Plans that may wait for the RT thread before it takes them all in one cycle: it
/// applies one per cycle so each plan's link fades play out, but a burst of edits must
/// not hold later messages (a volume, a shutdown) back behind hundreds of plans.
pub(crate) const MAX_PENDING_PLANS: u64 = 4;

/// Control → RT messages.
pub(crate) enum ToRt {
    AddNode {
        slot: usize,
        node: Box<NodeSlot>,
    },
    RemoveNode {
        slot: usize,
    },
    Plan(Box<Plan>),
    Volume {
        slot: usize,
        gain: f32,
        ramp: usize,
    },
    /// Something audible changed: take back the driver's queued playback (when it holds
    /// more than a normal cycle's worth) and render it again. `discard` names a node
    /// whose taken-back output is dropped rather than played again (a flushed stream).
    Rewind {
        discard: Option<usize>,
    },
    /// A stream node's new rate converter ([`crate::Engine::retune`]).
    Retune {
        slot: usize,
        retune: Box<Retune>,
    },
    /// A node's processor replaced (a filter chain put on a device's sink node, or
    /// taken off with `None`); the old one goes back as garbage.
    SetProcessor {
        slot: usize,
        processor: Option<Box<dyn crate::rt::node::Processor>>,
    },
    /// A stream node's own filter chain put on, replaced or taken off (`None`); the
    /// old one goes back as garbage.
    SetChain {
        slot: usize,
        chain: Option<Box<quaver_dsp::filter::FilterChain>>,
    },
    /// A control of one of a node's filters: its own chain's when it has one, else
    /// its processor's ([`crate::rt::node::Processor::control`]).
    Control {
        slot: usize,
        index: usize,
        name: ControlName,
        value: f64,
    },
    /// A new idle timeout before the devices suspend, in frames (`None`: never).
    SuspendAfter(Option<u64>),
    /// A device opened at run time takes the free index `index` (its nodes follow in
    /// their own messages); it drives the cycles if no device does.
    AddDevice {
        index: usize,
        device: Box<dyn Device>,
        follower: Option<Box<Follower>>,
    },
    /// The device at `index` leaves (its nodes are already out of the plan): handed
    /// back to be closed on the control side.
    RemoveDevice {
        index: usize,
    },
    /// The device at `index` went away (its card was unplugged): dropped and reported
    /// as [`RtEvent::DeviceGone`], as if it had failed.
    DeviceGone {
        index: usize,
    },
    Shutdown,
}

/// A control's name carried to the RT thread without a heap allocation.
#[derive(Clone, Copy)]
pub(crate) struct ControlName {
    bytes: [u8; ControlName::MAX],
    len: u8,
}

impl ControlName {
    /// The longest name that fits.
    pub(crate) const MAX: usize = 32;

    /// `name`, if it fits.
    pub(crate) fn new(name: &str) -> Option<ControlName> {
        let len = name.len();
        if len > Self::MAX {
            return None;
        }
        let mut bytes = [0; Self::MAX];
        bytes[..len].copy_from_slice(name.as_bytes());
        Some(ControlName {
            bytes,
            len: len as u8,
        })
    }

    /// The name (always valid UTF-8: it was copied from a `str`).
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

/// Objects the RT thread retired; dropped on the control side.
pub(crate) enum Garbage {
    Plan(#[allow(dead_code)] Box<Plan>),
    Node(#[allow(dead_code)] Box<NodeSlot>),
    /// The rate converter a retune replaced.
    Retune(#[allow(dead_code)] Box<Retune>),
    /// A processor replaced by [`ToRt::SetProcessor`].
    Processor(#[allow(dead_code)] Box<dyn crate::rt::node::Processor>),
    /// A stream's chain replaced by [`ToRt::SetChain`].
    Chain(#[allow(dead_code)] Box<quaver_dsp::filter::FilterChain>),
    /// A device that failed, went away or was removed, with its rate matching: closed
    /// (at once: its card may be waiting for the handles to go) and freed by the control
    /// side.
    Device {
        device: Box<dyn Device>,
        #[allow(dead_code)]
        follower: Option<Box<Follower>>,
    },
    /// A follower's rate matching left behind by a device taken out before.
    Follower(#[allow(dead_code)] Box<Follower>),
    /// Why a device failed: logged (and freed) by the control side.
    DeviceError {
        device: usize,
        error: quaver_devices::DeviceError,
    },
}

/// Things the RT thread reports to the control side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtEvent {
    /// The driver reported an xrun.
    Xrun {
        /// Device index.
        device: usize,
    },
    /// A device failed and is no longer driven.
    DeviceGone {
        /// Device index.
        device: usize,
    },
    /// Devices suspended for idleness.
    Suspended,
    /// Devices resumed.
    Resumed,
    /// A suspended device closed its handles (idle).
    DeviceClosed {
        /// Device index.
        device: usize,
    },
    /// A device closed for idleness was opened again.
    DeviceReopened {
        /// Device index.
        device: usize,
    },
    /// The quantum changed.
    Quantum(usize),
    /// Freewheel started (`true`: the devices are suspended) or stopped.
    Freewheel(bool),
    /// Cycles ran back to back this long (ns) without the thread sleeping, so it slept
    /// briefly to stay inside RLIMIT_RTTIME (`quaver_rt::rttime`).
    ForcedSleep {
        /// How long it had run without blocking.
        ran_ns: u64,
    },
    /// A device's adaptive safety margin changed.
    Margin {
        /// Device index.
        device: usize,
        /// The margin now, frames.
        frames: u64,
    },
}
