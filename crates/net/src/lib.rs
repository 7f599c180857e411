//! Network audio for quaver, the pure part: the wire formats of the standard protocols
//! (RTP packets, L16/L24 payloads, SDP session descriptions, SAP announcements) and the
//! RTP receiver's jitter buffer. Nothing here opens a socket, spawns a thread or reads a
//! clock: every function takes bytes (or packets and times) and returns values or typed
//! errors, so everything that arrives from the network can be unit-tested and fuzzed
//! (`fuzz/fuzz_targets/net_packets.rs`). docs/net.md says what works and what does not.
//!
//! Everything parsed here comes from any host on the network: every length, count and
//! number is checked before it is used, and refused with an error naming the field.

pub mod arrival;
pub mod directory;
pub mod jitter;
pub mod payload;
pub mod rtp;
pub mod sap;
pub mod sdp;
pub mod steer;

pub use arrival::{ClockDrift, InterarrivalJitter};
pub use directory::{Change, Directory, DirectoryConfig, DirectoryStats, GoneReason, SessionKey};
pub use jitter::{EXCESS_S, JitterBuffer, JitterConfig, JitterError, JitterStats, Push};
pub use payload::{Encoding, PayloadError};
pub use rtp::{RtpError, RtpHeader, RtpPacket};
pub use sap::{SapError, SapKind, SapPacket};
pub use sdp::{SdpError, SessionDescription};
pub use steer::PlayoutSteer;

/// Most channels a stream may carry (AES67 needs 8; the devices' bound is 64).
pub const MAX_CHANNELS: u16 = 64;

/// Highest sample rate a stream may declare, in Hz (the devices' bound).
pub const MAX_RATE: u32 = 768_000;
