//! `module-pipe-sink` and `module-pipe-source`: a sink whose audio goes into a named
//! pipe (FIFO), for programs that read a sound server's output from one (snapcast's
//! `pipe` source, visualizers), and a source whose audio comes from one (a program's
//! output as a virtual microphone).
//!
//! **Sink.** A null sink; a tap node behind it (a filter, not listed to clients)
//! reads what the sink plays, after its volume, like its monitor, and hands it to a
//! writer thread through a lock-free ring. The writer encodes the samples and writes
//! them to the FIFO without blocking. The graph's clock paces the sink, as PulseAudio's
//! pipe sink with `use_system_clock_for_timing=yes`: a reader that falls behind (or
//! none at all, once the pipe's buffer is full) loses audio rather than stalling every
//! stream on the sink. The tap rings the writer every [`WRITE_EVERY_MS`], not every
//! cycle, so a pipe costs a few wakeups per second.
//!
//! **Source.** A source node fed by a feeder node (a filter) that plays what a reader
//! thread takes from the FIFO, through the same ring, prebuffering and resampler as a
//! PulseAudio playback stream ([`crate::rt::transport::PlaySource`] in a
//! [`PlaybackAdapter`]), so the pipe may run at any rate. The reader takes from the
//! pipe only while the ring has room: a writer faster than real time (`cat file >
//! fifo`) is held back by the full pipe, as PulseAudio's pipe source holds it, instead
//! of losing audio. Between writes the source records silence.
//!
//! The modules' constructors are in `load.rs`, the writer in `sink.rs`, the reader in
//! `source.rs`, the FIFO and thread they share in `fifo.rs`.

mod fifo;
pub(super) mod load;
mod sink;
mod source;

pub use sink::{PipeOut, PipeTap, WRITE_EVERY_MS};
pub use source::{PipeIn, SourceFeeder};
