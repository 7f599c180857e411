//! The real-time half of the PulseAudio front-end: the code the engine's RT thread runs
//! for pulse streams, and the state it shares with the I/O thread.
//!
//! - [`shared`]: the atomics both threads read and write (`PlayShared`, `RecShared`) and
//!   the I/O thread's [`shared::Bell`].
//! - [`transport`]: a stream's `FrameSource` / `FrameSink` over its ring.
//! - [`rtwire`]: REQUESTs the RT thread sends itself.
//! - [`intake`]: the client's blocks the RT thread takes in itself.
//!
//! The rules every file here follows (the engine's contract, `engine/src/rt/mod.rs`, with
//! the front-end's exceptions, each bounded):
//!
//! - No allocation or freeing, no locks that can wait (only try-locks never waited
//!   for), no logging, no blocking, no spinning.
//! - System calls: the [`shared::Bell`]'s eventfd write, at most once until the I/O
//!   thread has woken, and only when it asked for it or something must be reported;
//!   one non-blocking `send` of a REQUEST (with held block releases) on the client's
//!   unix socket, or instead, once the client took the srbchannel, a whole packet into
//!   its ring plus the channel's 8-byte wakeup pipe write.
//! - Parsing: only what the lent intake reads from the srbchannel (memblock
//!   descriptors, and GET_PLAYBACK_LATENCY for the lent stream, answered in place from
//!   the stream's shared state); anything else stops the intake and goes back to the
//!   I/O thread.
//! - Every value read from shared memory the client can write is checked before use; a
//!   corrupt one stops the intake, never indexes out of bounds.
//!
//! See `docs/pulse.md` for the mechanisms (requests from the RT thread, the intake).

pub mod intake;
pub mod rtwire;
pub mod shared;
pub mod transport;
