//! quaver's device layer: one trait for every device, the devices that work on every
//! machine (`null`, `file:`, `sim`), and ALSA sound cards (`alsa:`, alsa-lib loaded at run
//! time).
//!
//! Thread rules: methods marked *RT* are called only from the engine's real-time
//! thread while the device is running; they must not allocate, lock, log or make
//! syscalls other than device I/O, clock reads and sleeping until the device's
//! next deadline in [`Device::wait`]. Methods marked *control* are called from
//! control threads while the real-time thread does not own the device.
//!
//! One exception, outside the cycle: after an idle suspend the real-time thread calls
//! [`Device::close_idle`], and the [`Device::start`] that resumes reopens the device;
//! both may allocate and make blocking open/close calls. Nothing is playing then, and
//! the thread that owns the device is the only one that may touch it (PulseAudio's I/O
//! thread closes and reopens its cards the same way).

use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use std::time::Duration;

pub mod alsa;
pub mod clock;
pub mod file;
pub mod hwvol;
pub mod margin;
pub mod null;
mod pacer;
pub mod rtp;
pub mod sim;
pub mod spec;

pub use alsa::{AlsaConfig, AlsaDevice};
pub use clock::{RealClock, SimClock, VirtualClock};
pub use file::{FileConfig, FileSink, WavFormat};
pub use margin::{Margin, MarginConfig};
pub use null::{NullConfig, NullDevice};
pub use rtp::{
    NetHandle, NetStatus, RtpRecv, RtpRecvConfig, RtpRecvStatus, RtpSend, RtpSendConfig,
    RtpSendStatus,
};
pub use sim::{DacProbe, DriftStep, Fault, SimCard, SimConfig};
pub use spec::{DeviceDefaults, DeviceSpec, open_device, parse_spec};

/// Why a device operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The device description could not be understood (e.g. `--device` syntax).
    #[error("bad device spec '{spec}': {reason}")]
    BadSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error while opening, writing or finalizing the device.
    #[error("device {device}: {source}")]
    Io {
        /// Device name.
        device: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The device went away (unplugged); the engine stops driving it.
    #[error("device {0} is gone")]
    Gone(String),
    /// The backend cannot work on this machine at all (e.g. `libasound.so.2` is not
    /// installed). Unlike the other errors this says nothing about the spec or the
    /// device: a caller may fall back to another device, such as the null sink.
    #[error("{backend} unavailable: {reason}")]
    Unavailable {
        /// The backend, e.g. "ALSA".
        backend: &'static str,
        /// Why, e.g. "libasound.so.2 not found (…)".
        reason: String,
    },
}

/// Static description of a device, fixed once it is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// Short unique name used for its graph nodes, e.g. "null", "sim", "file".
    pub name: String,
    /// Human description, e.g. "File sink writing out.wav".
    pub description: String,
    /// Sample rate in Hz.
    pub rate: u32,
    /// Playback channels (the sink node's input ports); `None` if no playback.
    pub playback: Option<ChannelMap>,
    /// Capture channels (the source node's output ports); `None` if no capture.
    pub capture: Option<ChannelMap>,
    /// True if the device renders as fast as possible instead of in real time.
    pub freewheel: bool,
}

/// Where a follower's hardware stands at the start of a cycle ([`Device::follow`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowerLevels {
    /// Playback frames queued ahead of the hardware; `None` without playback.
    pub play_queued: Option<usize>,
    /// Frames captured and not read yet; `None` without capture.
    pub cap_avail: Option<usize>,
    /// The streams were restarted by this call (after an xrun): the levels start over.
    pub restarted: bool,
}

/// What [`Device::wait`] found when the next cycle became due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStatus {
    /// Time for the next cycle.
    Ready,
    /// The device ran dry (playback) or overflowed (capture) since the last cycle and has
    /// recovered; the cycle should still run.
    Xrun,
    /// [`Device::wait_or_wake`] returned early because its wake descriptor became
    /// readable: no cycle is due; the caller handles its messages and waits again.
    Woken,
}

/// Counters a device keeps for tests and `quaver status`; read from the control side
/// through [`Device::counters`] snapshots taken by the engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Completed waits (device-driven wakeups).
    pub wakeups: u64,
    /// Hardware-pointer queries (sim card, ALSA `snd_pcm_status` calls; 0 where there is
    /// no pointer).
    pub pointer_queries: u64,
    /// Playback underruns seen.
    pub underruns: u64,
    /// Capture overruns seen.
    pub overruns: u64,
    /// Frames written for playback since open.
    pub frames_written: u64,
    /// Frames read from capture since open.
    pub frames_read: u64,
    /// Rewinds done (see [`Device::rewind`]).
    pub rewinds: u64,
    /// Playback frames taken back by rewinds.
    pub rewound_frames: u64,
    /// The safety margin (watermark) now: frames still queued for playback when the
    /// driver wakes (sim card, timer-scheduled ALSA); 0 where there is none.
    pub margin_frames: u64,
    /// How many times an adaptive margin changed (the control side logs each change at
    /// debug level when it sees this move).
    pub margin_changes: u64,
    /// The device's handles are closed after an idle suspend ([`Device::close_idle`]);
    /// the next [`Device::start`] reopens them.
    pub closed: bool,
    /// Idle closes since open.
    pub idle_closes: u64,
    /// Reopens after an idle close since open.
    pub reopens: u64,
}

/// One audio device (a sink, a source or both sharing one clock).
pub trait Device: Send {
    /// Static description. *control* and *RT*.
    fn info(&self) -> &DeviceInfo;

    /// Starts (or resumes after [`Device::suspend`]) the device clock for cycles of
    /// `quantum` frames, reopening the device first after [`Device::close_idle`]. *RT*
    /// (called before the first cycle and on resume; reopening happens only on resume,
    /// outside the cycle).
    fn start(&mut self, quantum: usize) -> Result<(), DeviceError>;

    /// Blocks until the next cycle of `quantum` frames is due. `quantum` may change
    /// between calls (quantum negotiation). A freewheeling device returns at once.
    /// *RT*.
    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError>;

    /// Queues one cycle of playback, `buf.frames()` frames in the playback channel
    /// order. Devices without playback ignore it. *RT*.
    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError>;

    /// Fills one cycle of capture, `buf.frames()` frames in the capture channel order.
    /// Devices without capture fill silence. *RT*.
    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError>;

    /// Stops the clock (idle suspend); no wakeups until [`Device::start`]. *RT*.
    fn suspend(&mut self);

    /// Closes the underlying handles of a suspended device so an idle server holds no
    /// card open (another program may use it; the card may power down); the next
    /// [`Device::start`] opens and negotiates again, and fails (the engine then drops
    /// the device) if that is impossible or yields a different format. Returns whether
    /// anything was closed. The default closes nothing: the null sink and file sinks
    /// hold no device, and a file must stay open to be finalized by [`Device::close`].
    /// *RT*, only right after [`Device::suspend`] for idleness, outside the cycle.
    fn close_idle(&mut self) -> bool {
        false
    }

    /// Frames between a sample passed to `write` and the moment it is heard, right
    /// after a `write` (playback), for latency reports. *RT* and *control*.
    fn playback_delay(&self) -> usize;

    /// Frames between a sample reaching the device and it being returned by `read`,
    /// right after a `read` (capture). *RT* and *control*.
    fn capture_delay(&self) -> usize;

    /// A snapshot of the counters. *RT* (the engine publishes it to control).
    fn counters(&self) -> DeviceCounters;

    /// Quanta between the engine's render and the listener: 2 on a double-buffered card
    /// (one plays while the next waits), 1 where the cycle just written is the one that
    /// plays next (the null and file sinks). The engine sizes the quantum for a latency
    /// budget L as L / this, so a device that holds less gets larger quanta, and fewer
    /// wakeups, for the same latency. *control*.
    fn periods_in_flight(&self) -> usize {
        2
    }

    /// Whether playback should fade in over a few milliseconds each time the device
    /// starts or resumes: true where a step out of silence would be heard as a click
    /// (sound cards, the simulated card), false where the output must stay bit-exact
    /// (files) or is discarded (the null sink). *control*.
    fn fades_in_on_start(&self) -> bool {
        true
    }

    /// Like [`Device::wait`], but a device that may sleep long (while it fills ahead, see
    /// [`Device::set_fill`]) returns [`WaitStatus::Woken`] as soon as `wake` becomes
    /// readable, so the engine can act on a control message (such as a rewind) at once
    /// instead of after up to a whole buffer. `wake` is not read. *RT*.
    fn wait_or_wake(
        &mut self,
        quantum: usize,
        wake: rustix::fd::BorrowedFd<'_>,
    ) -> Result<WaitStatus, DeviceError> {
        let _ = wake;
        self.wait(quantum)
    }

    /// The most playback frames this device can keep queued when it fills ahead (see
    /// [`Device::set_fill`]); 0 where it cannot, which keeps the engine at one quantum
    /// plus the watermark. *control*.
    fn max_fill(&self) -> usize {
        0
    }

    /// Timer-based scheduling with a big buffer: while `frames` > 0, [`Device::wait`]
    /// returns without sleeping as long as another quantum fits within `frames` queued
    /// (so the engine renders several quanta back to back), and otherwise sleeps until
    /// only the watermark is left. 0 restores one quantum per wakeup. Called before every
    /// wait; values above [`Device::max_fill`] are capped. *RT*.
    fn set_fill(&mut self, frames: usize) {
        let _ = frames;
    }

    /// Takes back queued playback that has not been played, keeping the watermark plus
    /// `keep` frames, so the engine can render it again with a change in it (a new
    /// stream, a volume, a pause). Returns the frames taken back; the next write
    /// continues from the earlier position. 0 where the device cannot rewind. *RT*.
    fn rewind(&mut self, keep: usize) -> usize {
        let _ = keep;
        0
    }

    /// The largest quantum this device can run (e.g. its ring minus its watermark);
    /// `None` for no limit. The engine never asks for more. *control*, after opening.
    fn max_quantum(&self) -> Option<usize> {
        None
    }

    /// For a follower (a device the engine writes and reads every cycle while another
    /// device's clock paces the cycles, so its own `wait` is never called). Called once
    /// per cycle where the driver's `wait` is, just before it, with the quantum of the
    /// cycle to come: restarts the streams after an xrun since the last call (prefilled
    /// for `quantum`, as `wait` would); when `quantum` is the largest since the start,
    /// queues the growth as silence (the driver may wait for a whole new quantum of
    /// capture before the cycle, so the last one written must last that long); then reads
    /// the hardware pointer once. The engine steers its rate from these levels, since no
    /// two clocks run at exactly the same speed. `None` where the device keeps no clock
    /// of its own (the null and file sinks take whatever pace they get). *RT*.
    fn follow(&mut self, quantum: usize) -> Result<Option<FollowerLevels>, DeviceError> {
        let _ = quantum;
        Ok(None)
    }

    /// How late the last [`Device::wait`] returned after its deadline, in ns, for
    /// devices that sleep until a computed deadline; `None` where that is unknown. *RT*.
    fn wakeup_lateness_ns(&self) -> Option<u64> {
        None
    }

    /// A network device's live figures (jitter, loss, delay, packets sent), readable
    /// from any thread; `None` for other devices. *control*, before the device goes to
    /// the real-time thread.
    fn net(&self) -> Option<NetHandle> {
        None
    }

    /// Flushes and finalizes (e.g. the WAV header) on shutdown. *control*, after the
    /// real-time thread has handed the device back.
    fn close(&mut self) -> Result<(), DeviceError>;
}

/// How long a device may be idle before the engine suspends it, unless configured.
pub const DEFAULT_SUSPEND_TIMEOUT: Duration = Duration::from_secs(3);

/// Most channels a device of this crate accepts (a sanity bound for specs and configs).
pub const MAX_CHANNELS: usize = 64;

/// Highest sample rate a device of this crate accepts, in Hz.
pub const MAX_RATE: u32 = 768_000;

/// Checks the format every device shares; `what` names the device in the error.
pub(crate) fn check_format(
    what: &str,
    rate: u32,
    channels: &ChannelMap,
) -> Result<(), DeviceError> {
    let reason = if rate == 0 || rate > MAX_RATE {
        format!("rate {rate} Hz is outside 1..={MAX_RATE}")
    } else if channels.is_empty() || channels.len() > MAX_CHANNELS {
        format!("{} channels is outside 1..={MAX_CHANNELS}", channels.len())
    } else {
        return Ok(());
    };
    Err(DeviceError::BadSpec {
        spec: what.to_string(),
        reason,
    })
}

/// A device name kept twice, so the first error raised on the real-time thread can own a
/// `String` without allocating there (later errors, already off the happy path, clone).
#[derive(Debug)]
pub(crate) struct ErrName {
    spare: String,
}

impl ErrName {
    pub(crate) fn new(name: &str) -> Self {
        ErrName {
            spare: name.to_string(),
        }
    }

    /// The name for an error value.
    pub(crate) fn take(&mut self, name: &str) -> String {
        if self.spare.is_empty() {
            name.to_string()
        } else {
            std::mem::take(&mut self.spare)
        }
    }
}
