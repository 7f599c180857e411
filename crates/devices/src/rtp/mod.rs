//! RTP network devices: `rtp-send` (a sink whose playback goes out as an RTP stream) and
//! `rtp-recv` (a source that plays an RTP stream received through a jitter buffer), in
//! the formats of `quaver_net` (L16/L24). docs/net.md.
//!
//! Sockets never touch the real-time thread: each device starts one network thread of
//! its own (plain scheduling) that owns the UDP socket, non-blocking, waiting in `poll`
//! or sleeping between packets; the device's RT methods and that thread share only
//! lock-free rings (`rtrb`) and atomics. Both devices keep time with the monotonic clock
//! like the null sink (see [`crate::null`]); as followers they take the driver's pace.

mod common;
mod discover;
mod playout;
mod recv;
mod sap;
mod send;
mod status;

pub use common::{DEFAULT_PAYLOAD_TYPE, MAX_PAYLOAD, default_payload_type};
pub use discover::SapSocket;
pub use recv::{RtpRecv, RtpRecvConfig};
pub use sap::own_sessions;
pub use send::{RtpSend, RtpSendConfig};
pub use status::{NetHandle, NetStatus, RtpRecvStatus, RtpSendStatus};

#[cfg(test)]
mod tests;
