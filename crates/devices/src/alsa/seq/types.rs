//! The bridge's plain types: port addresses and descriptions, notices, errors, sizes,
//! counters.

use super::codec::MalformedMidi;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A sequencer port's address, shown as "client:port" like `aconnect -l`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId {
    /// The client number.
    pub client: u8,
    /// The port number within the client.
    pub port: u8,
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.client, self.port)
    }
}

impl std::str::FromStr for PortId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (c, p) = s
            .split_once(':')
            .ok_or_else(|| format!("'{s}' is not a client:port address"))?;
        let num = |x: &str| {
            x.parse::<u8>()
                .map_err(|_| format!("'{s}': '{x}' is not a number 0-255"))
        };
        Ok(PortId {
            client: num(c)?,
            port: num(p)?,
        })
    }
}

/// Another client's port, as listed or announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Its address.
    pub id: PortId,
    /// The client's name ("Virtual Raw MIDI 1-0", "Midi Through").
    pub client_name: String,
    /// The port's name ("VirMIDI 1-0", "Midi Through Port-0").
    pub port_name: String,
    /// Events can be read from it (`READ|SUBS_READ`): the bridge is subscribed to it.
    pub readable: bool,
    /// Events can be written to it (`WRITE|SUBS_WRITE`): `SeqOutput::send` accepts it.
    pub writable: bool,
}

/// A change the daemon answers by adding or removing graph ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeqNotice {
    /// A port appeared (a client started, a card was plugged).
    PortAdded(PortInfo),
    /// A port disappeared (its client ended, its card was removed).
    PortRemoved(PortId),
    /// A queued message could not be delivered.
    SendFailed {
        /// Where it was going.
        port: PortId,
        /// Why (the port is gone, the kernel refused).
        error: String,
    },
    /// The bridge's thread ended on an error; nothing more will come.
    Stopped(String),
}

/// Why the sequencer could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SeqError {
    /// alsa-lib (or its sequencer functions) could not be loaded.
    #[error("ALSA sequencer unavailable: {0}")]
    Unavailable(String),
    /// alsa-lib is there but the kernel offers no sequencer (no /dev/snd/seq: the snd-seq
    /// module not loaded, or no ALSA at all).
    #[error("no ALSA sequencer: {0}")]
    NoSequencer(String),
    /// A sequencer call failed while setting up.
    #[error("ALSA sequencer: {what} failed: {why}")]
    Call {
        /// The call.
        what: &'static str,
        /// alsa-lib's error text.
        why: String,
    },
    /// The bridge's thread or wakeup descriptor could not be created.
    #[error("ALSA sequencer bridge: {0}")]
    Io(#[from] std::io::Error),
}

/// Why `SeqOutput::send` refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The bytes are not one complete MIDI message.
    #[error("not sent: {0}")]
    Malformed(#[from] MalformedMidi),
    /// A sysex longer than [`SeqConfig::max_sysex`].
    #[error("not sent: {len}-byte sysex is longer than the {max}-byte limit")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The queue to the bridge's thread has no room now.
    #[error("not sent: {0}")]
    Queue(#[from] QueueError),
}

/// The bridge's sizes and name.
#[derive(Debug, Clone)]
pub struct SeqConfig {
    /// The sequencer client's name.
    pub client_name: String,
    /// Longest sysex delivered or sent, F0 and F7 included; longer ones are counted
    /// and dropped (input) or refused (output).
    pub max_sysex: usize,
    /// Messages each queue holds.
    pub queue_messages: usize,
    /// Bytes each queue holds (at least `max_sysex`).
    pub queue_bytes: usize,
}

impl Default for SeqConfig {
    fn default() -> Self {
        SeqConfig {
            client_name: "quaver".into(),
            max_sysex: 64 * 1024,
            queue_messages: 1024,
            queue_bytes: 128 * 1024,
        }
    }
}

/// What the bridge counted.
#[derive(Debug, Default)]
pub struct SeqCounters {
    /// Messages put in the input queue.
    pub received: AtomicU64,
    /// Incoming messages dropped because the input queue was full.
    pub input_dropped: AtomicU64,
    /// Incoming sysex dropped: longer than the limit, or a chunk without its start.
    pub sysex_dropped: AtomicU64,
    /// Times the kernel's input buffer overran (events lost before we read them).
    pub overruns: AtomicU64,
    /// Events that are not MIDI messages (sequencer-only events), skipped.
    pub not_midi: AtomicU64,
    /// Messages delivered to a port.
    pub sent: AtomicU64,
    /// Messages that could not be delivered ([`SeqNotice::SendFailed`]).
    pub send_failed: AtomicU64,
}

impl SeqCounters {
    /// One counter's value.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// No room now (the consumer is behind): the message is dropped, not waited for.
    #[error("MIDI queue full")]
    Full,
    /// Longer than the queue can ever hold.
    #[error("MIDI message of {len} bytes is longer than the queue's {capacity}")]
    TooLong {
        /// The message's length.
        len: usize,
        /// The byte ring's size.
        capacity: usize,
    },
}
