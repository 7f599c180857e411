//! ALSA sequencer MIDI: what a2jmidid does for jackd2, as a device layer the daemon can
//! turn into MIDI graph ports. docs/alsa/seq.md.
//!
//! [`SeqBridge::open`] opens the sequencer as client "quaver" with one input port
//! (`quaver:in`, others' ports are subscribed to it) and one output port (`quaver:out`,
//! the source of what is sent), lists every other client's ports that can be read from
//! (`READ|SUBS_READ`) or written to (`WRITE|SUBS_WRITE`), subscribes to the readable ones
//! and to the system announce port, and runs one thread of its own that makes every ALSA
//! call and blocks in `poll` (no wakeups when idle):
//!
//! * incoming events become raw MIDI bytes (`snd_midi_event_decode`, running status
//!   expanded; sysex reassembled from the kernel's chunks, bounded by
//!   [`SeqConfig::max_sysex`]) stamped with `CLOCK_MONOTONIC` and their source
//!   [`PortId`], in a bounded lock-free queue a real-time thread drains
//!   ([`MidiReceiver`], from [`SeqBridge::take_input`]);
//! * bytes queued with [`SeqOutput::send`] (checked to be one complete message first)
//!   are encoded (`snd_midi_event_encode`) and sent straight to their port
//!   (`snd_seq_event_output_direct`);
//! * ports coming and going are [`SeqNotice`]s ([`SeqBridge::notices`]).

mod bridge;
pub mod codec;
pub(crate) mod ffi;
mod handle;
pub mod queue;
mod types;

pub use bridge::{SeqBridge, SeqOutput};
pub use codec::{MalformedMidi, check_message};
pub use queue::{Message, MidiReceiver, MidiSender, queue};
pub use types::{PortId, PortInfo, SendError, SeqConfig, SeqCounters, SeqError, SeqNotice, now_ns};

#[cfg(test)]
mod tests;
