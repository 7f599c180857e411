//! A network device's live figures in `status` (docs/protocol/requests.md, "Network
//! devices"): an RTP receiver's packets, loss, jitter, buffer delay and the sender's
//! clock drift; an RTP sender's packets and bytes. Added within v1: absent for other
//! devices and from older servers.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The longest SDP session name carried (SDP itself has no bound; quaver's SAP
/// directory keeps names far shorter).
pub const MAX_SESSION_NAME_BYTES: usize = 1024;

/// Figures beyond this many ms (jitter, delays) are nonsense from a broken server.
const MAX_MS: f64 = 3_600_000.0;

/// A network device's figures, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum NetDeviceStatus {
    /// An `rtp-recv` device.
    RtpRecv(RtpRecvInfo),
    /// An `rtp-send` device.
    RtpSend(RtpSendInfo),
}

/// An RTP receiver in [`NetDeviceStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RtpRecvInfo {
    /// Address and port listened on (`239.69.0.1:5004`).
    pub listen: String,
    /// The latest accepted packet's sender, `null` before the first.
    pub remote: Option<String>,
    /// The session's SDP name, when the stream was found by SAP.
    pub session: Option<String>,
    /// Datagrams the socket received.
    pub datagrams: u64,
    /// Packets taken into the jitter buffer.
    pub packets: u64,
    /// Packets lost (RFC 3550: expected from the sequence numbers, not taken).
    pub lost: u64,
    /// Packets that came after their frames played.
    pub late: u64,
    /// Every other datagram dropped (not RTP, foreign, duplicate, malformed, jumps).
    pub dropped: u64,
    /// Frames played while missing (concealed).
    pub concealed_frames: u64,
    /// Times the buffer ran dry.
    pub underruns: u64,
    /// Times the stream started over.
    pub restarts: u64,
    /// RFC 3550 interarrival jitter, ms.
    pub jitter_ms: f64,
    /// The jitter buffer's target delay, ms.
    pub target_ms: f64,
    /// What the jitter buffer holds now, ms.
    pub delay_ms: f64,
    /// The sender's clock against the receiver's, minus one, ppm (positive: the
    /// sender runs fast); `null` in the stream's first seconds.
    pub drift_ppm: Option<f64>,
    /// The playout loop's estimate of the sender's clock, ppm, once the receiver
    /// resamples to follow it; `null` while it plays the stream as it comes.
    #[serde(default)]
    pub steered_ppm: Option<f64>,
}

/// An RTP sender in [`NetDeviceStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RtpSendInfo {
    /// Where packets go.
    pub dest: String,
    /// The SAP group announcing the stream, `null` when not announced.
    pub sap: Option<String>,
    /// Packets sent.
    pub packets: u64,
    /// Bytes sent (RTP headers and payloads).
    pub bytes: u64,
    /// Sends that failed.
    pub errors: u64,
}

impl NetDeviceStatus {
    /// Checks what a server sent: addresses that parse, a session name of at most
    /// [`MAX_SESSION_NAME_BYTES`] without control characters, figures finite and in
    /// range (ms in 0..=1 h, drift within ±10^6 ppm), no more packets taken or lost
    /// than could be.
    pub fn check(&self) -> Result<(), String> {
        let addr = |what: &str, a: &str| {
            a.parse::<SocketAddr>()
                .map(|_| ())
                .map_err(|_| format!("{what} {a:?} is not an address and port"))
        };
        match self {
            NetDeviceStatus::RtpRecv(r) => {
                addr("listen", &r.listen)?;
                if let Some(a) = &r.remote {
                    addr("remote", a)?;
                }
                if let Some(s) = &r.session {
                    if s.len() > MAX_SESSION_NAME_BYTES {
                        return Err(format!(
                            "session name of {} bytes, more than {MAX_SESSION_NAME_BYTES}",
                            s.len()
                        ));
                    }
                    if s.chars().any(char::is_control) {
                        return Err(format!("session name {s:?} has control characters"));
                    }
                }
                for (what, v) in [
                    ("jitter_ms", r.jitter_ms),
                    ("target_ms", r.target_ms),
                    ("delay_ms", r.delay_ms),
                ] {
                    if !(0.0..=MAX_MS).contains(&v) {
                        return Err(format!("{what} {v} is outside 0..={MAX_MS}"));
                    }
                }
                if let Some(d) = r.drift_ppm.filter(|d| !(-1e6..=1e6).contains(d)) {
                    return Err(format!("drift_ppm {d} is outside ±1000000"));
                }
                if let Some(d) = r.steered_ppm.filter(|d| !(-1e6..=1e6).contains(d)) {
                    return Err(format!("steered_ppm {d} is outside ±1000000"));
                }
                if r.packets > r.datagrams {
                    return Err(format!(
                        "{} packets taken of {} datagrams received",
                        r.packets, r.datagrams
                    ));
                }
                Ok(())
            }
            NetDeviceStatus::RtpSend(s) => {
                addr("dest", &s.dest)?;
                if let Some(a) = &s.sap {
                    addr("sap", a)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv() -> RtpRecvInfo {
        RtpRecvInfo {
            listen: "239.69.0.1:5004".into(),
            remote: Some("10.237.0.1:40000".into()),
            session: Some("studio".into()),
            datagrams: 1010,
            packets: 1000,
            lost: 10,
            late: 0,
            dropped: 10,
            concealed_frames: 480,
            underruns: 0,
            restarts: 0,
            jitter_ms: 0.05,
            target_ms: 60.0,
            delay_ms: 60.4,
            drift_ppm: Some(-3.2),
            steered_ppm: Some(-3.0),
        }
    }

    #[test]
    fn roundtrip_tagged_by_kind() {
        let r = NetDeviceStatus::RtpRecv(recv());
        let s = serde_json::to_string(&r).unwrap();
        assert!(
            s.starts_with(r#"{"kind":"rtp-recv","listen":"239.69.0.1:5004""#),
            "{s}"
        );
        assert_eq!(serde_json::from_str::<NetDeviceStatus>(&s).unwrap(), r);
        let t = NetDeviceStatus::RtpSend(RtpSendInfo {
            dest: "239.69.0.1:5004".into(),
            sap: Some("224.0.0.56:9875".into()),
            packets: 3,
            bytes: 900,
            errors: 0,
        });
        let s = serde_json::to_string(&t).unwrap();
        assert!(s.starts_with(r#"{"kind":"rtp-send""#), "{s}");
        assert_eq!(serde_json::from_str::<NetDeviceStatus>(&s).unwrap(), t);
        assert_eq!(r.check(), Ok(()));
        assert_eq!(t.check(), Ok(()));
        assert!(serde_json::from_str::<NetDeviceStatus>(r#"{"kind":"carrier-pigeon"}"#).is_err());
    }

    #[test]
    fn check_refuses_what_no_server_sends() {
        let bad = |f: &dyn Fn(&mut RtpRecvInfo), want: &str| {
            let mut r = recv();
            f(&mut r);
            let e = NetDeviceStatus::RtpRecv(r).check().unwrap_err();
            assert!(e.contains(want), "{e}");
        };
        bad(
            &|r| r.listen = "nowhere".into(),
            "listen \"nowhere\" is not",
        );
        bad(&|r| r.remote = Some("10.0.0.1".into()), "remote");
        bad(&|r| r.session = Some("x".repeat(2000)), "2000 bytes");
        bad(
            &|r| r.session = Some("a\u{1b}[2J".into()),
            "control characters",
        );
        bad(&|r| r.jitter_ms = -1.0, "jitter_ms -1 is outside");
        bad(&|r| r.delay_ms = f64::INFINITY, "delay_ms inf");
        bad(&|r| r.drift_ppm = Some(5e6), "drift_ppm 5000000");
        bad(&|r| r.steered_ppm = Some(f64::INFINITY), "steered_ppm inf");
        bad(&|r| r.packets = 5000, "5000 packets taken of 1010");
        let s = NetDeviceStatus::RtpSend(RtpSendInfo {
            dest: "x".into(),
            sap: None,
            packets: 0,
            bytes: 0,
            errors: 0,
        });
        assert!(s.check().unwrap_err().contains("dest"));
    }
}
