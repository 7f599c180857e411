//! The real-time thread: waits for the driver, runs the plan for one quantum, does the
//! device I/O.
//!
//! Contract of everything reachable from [`RtRunner::run_cycle`]:
//! - no allocation and no freeing: retired plans and nodes go back to the control side
//!   through the garbage queue (if it is ever full they are leaked and counted, never
//!   dropped here);
//! - no locks: the control side talks to us only through the lock-free `rtrb` queue;
//! - no logging: events go to the control side through a queue and an eventfd doorbell;
//! - no syscalls but device I/O, clock reads, the driver's own sleep and eventfd writes;
//! - one blocking exception, for callback clients that run in other processes
//!   ([`crate::callback`]): a split-phase node's `finish` may wait on the client's
//!   completion eventfd (`ppoll` with a timeout) — never past the deadline it computed
//!   from the cycle start (a configured fraction of the quantum period), and not at all
//!   when the client has already answered or is still busy with an earlier cycle. A
//!   late, hung or crashed client therefore costs at most one deadline once, then
//!   nothing; this is how JACK and PipeWire drive their clients too;
//! - one plan per cycle, swapped at the cycle boundary, so every plan (and the link
//!   fades it carries) runs for at least one whole cycle.
//!
//! While suspended (no client streams for the idle timeout, or held on request) the
//! thread blocks on the wake eventfd and makes no periodic wakeups; that is outside the
//! cycle.
//!
//! One exception to the rules above, also outside the cycle: right after the idle
//! suspend the thread closes the devices' handles ([`quaver_devices::Device::close_idle`])
//! and the start that resumes them reopens and renegotiates (ALSA: `snd_pcm_close`,
//! `snd_pcm_open` and the hw/sw parameters), which allocates and makes blocking calls.
//! Nothing plays at either moment, and only the thread that owns the devices may touch
//! them; PulseAudio's I/O thread suspends and reopens its cards the same way.
//!
//! Devices come and go while the thread runs (`devices.rs`): a device opened on a
//! control thread arrives through the queue into a place allocated up front, and is
//! started at the next cycle's start (device I/O: prepare, a prefill of silence,
//! start). A device that fails or goes away (an unplugged card answers `-ENODEV`) is
//! taken out in the cycle that saw it and handed back through the garbage queue, so
//! its handles are closed on the service thread at its next wakeup rather than here:
//! the unplug waits for them, and closing blocks. If it drove, the next device drives.
//!
//! Another, between cycles: when cycles have run back to back for a quarter of
//! RLIMIT_RTTIME (at most 50 ms) without the thread ever sleeping — an overloaded
//! engine whose deadlines are always already past — it sleeps 100 µs
//! ([`quaver_rt::RttimeGuard`]), counted in [`RtStats::forced_sleeps`]. Without that
//! sleep the kernel kills the whole daemon at the limit; RealtimeKit always sets one.
//! The guard reads the thread's context-switch count (`getrusage`) at most every
//! quarter budget, nothing else.
//!
//! Exceptions granted to front-end code that runs inside the cycle (through
//! [`Processor`], `stream::FrameSource`/`FrameSink` and `callback::CallbackTransport`),
//! each with its bound (the PulseAudio ones in detail: `docs/pulse.md`, "Threads"):
//!
//! - **Doorbells** (native `ShmSource`/`ShmSink`, `native/src/rt.rs`): one eventfd
//!   write per stream per cycle; pulse's `Bell` (`transport.rs`): at most one until the
//!   I/O thread has woken, however many streams ring it.
//! - **Callback clients** (native `ShmCallback`): one eventfd write to wake the client,
//!   then the bounded completion wait above, never past the cycle's deadline.
//! - **Client shared memory** (native `ShmRing`/`CallbackShm`, pulse's srbchannel and
//!   memfd pool): plain loads and copies; every index a client can write is validated
//!   first, and a corrupt one silences the stream or hands it back, never faults.
//! - **REQUEST** (`pulse/src/rt/rtwire.rs`): one non-blocking (`MSG_DONTWAIT`) `send` of 40
//!   bytes on the client's unix socket, at most one per stream per cycle, only under a
//!   try-lock it never waits for; the kernel may allocate the socket buffer.
//! - **Block releases** (`pulse/src/rt/intake.rs`): at most `MAX_RELEASES` (16) 20-byte
//!   frames, only in the same write as that REQUEST, never alone.
//! - **srbchannel** (`pulse/src/io/srb.rs`): for a client that took it, those packets go
//!   whole (or not at all) into its 32 KiB shared ring instead of the socket, plus one
//!   non-blocking 8-byte pipe write to wake it if it sleeps (none again until it woke).
//! - **Intake** (`pulse/src/rt/intake.rs`): for one lent low-latency stream, up to 16 whole
//!   memfd blocks per cycle, each copied from the client's sealed pool into a scratch
//!   buffer (no larger than it) and decoded into the stream's ring; anything else in the
//!   channel stops it before the frame and hands the intake back to the I/O thread.
//! - **GET_PLAYBACK_LATENCY** for that lent stream (`Lease::latency_reply`), answered in
//!   place: a fixed-size reply built on the stack from shared atomics and one wall-clock
//!   (vDSO) read, written whole into the srbchannel ring, else handed back unread; as
//!   many as the client's ring holds, fewer once the reply ring is full.
//!
//! The RT core is the bottom layer of the engine: nothing here imports the control API
//! ([`crate::engine`], [`crate::graph`], [`crate::compile`], [`crate::stream`]).
//!
//! - [`runner`] and `process.rs`: the thread's loop and one cycle's graph work;
//!   `freewheel.rs`: JACK's freewheel, the graph detached from the devices;
//! - [`plan`]: the compiled plan and the node slots it runs;
//! - [`node`]: the [`Processor`] trait every non-device node implements;
//! - [`msg`]: the queues' messages; [`stats`], [`timing`] and [`stages`]: what the
//!   thread counts;
//! - [`spin`]: the optional bounded spin of a callback client's completion wait;
//! - [`follow`]: rate matching of follower devices; [`retune`]: a stream's new rate
//!   converter; [`sched`]: the thread's scheduling, set from the control side.

mod devices;
pub mod follow;
mod freewheel;
pub mod midi;
pub mod msg;
pub mod node;
pub mod plan;
mod process;
pub mod retune;
pub mod runner;
pub mod sched;
pub mod spin;
pub mod stages;
pub mod stats;
pub mod timing;
pub mod transport;

pub use msg::RtEvent;
pub use node::{CycleInfo, Processor};
pub use runner::RtRunner;
pub use stats::{DeviceStats, HIST_BUCKETS, MAX_DEVICES, RtStats, hist_bucket};
