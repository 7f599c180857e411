//! SAP announcements (RFC 2974): the header that carries an SDP text to the well-known
//! multicast group (239.255.255.255 / 224.2.127.254, port 9875) every few seconds, and
//! the deletion that withdraws it.
//!
//! ```text
//! | V=1 |A|R|T|E|C| auth len (words) |      message id hash        |
//! | originating source (4 bytes, or 16 when A=1)                   |
//! | authentication data (auth len × 4 bytes)                       |
//! | optional payload type "application/sdp" NUL | payload (SDP)   |
//! ```
//!
//! Encrypted (E) and compressed (C) announcements are refused: no sender quaver
//! interoperates with uses them, and decompressing what any host sends would be a cost
//! an attacker chooses. The payload must be UTF-8 of at most [`crate::sdp::MAX_SDP`]
//! bytes; the SDP itself is parsed by [`crate::SessionDescription::parse`].

use crate::sdp::MAX_SDP;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// SAP's UDP port.
pub const SAP_PORT: u16 = 9875;
/// The IPv4 group SAP uses for administratively scoped sessions (239.255.255.255).
pub const SAP_GROUP_V4: Ipv4Addr = Ipv4Addr::new(239, 255, 255, 255);
/// The group PulseAudio's module-rtp-send/-recv and PipeWire's module-rtp-sink/-source
/// announce to and listen on by default (224.0.0.56, link-local: never routed).
pub const SAP_GROUP_AUDIO: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 56);
/// The payload type SAP names for SDP.
pub const SDP_MIME: &str = "application/sdp";

/// Whether a SAP packet announces a session or deletes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SapKind {
    /// The session exists (sent again every few seconds).
    Announce,
    /// The session is gone.
    Delete,
}

/// Why a datagram is not a SAP packet we can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SapError {
    /// Shorter than its header says.
    #[error("SAP packet truncated: {len} bytes, its header needs {need}")]
    Truncated {
        /// The datagram's length.
        len: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// The version is not 1.
    #[error("SAP version {0}, expected 1")]
    BadVersion(u8),
    /// Encrypted payloads are not supported.
    #[error("SAP packet is encrypted (not supported)")]
    Encrypted,
    /// Compressed payloads are not supported.
    #[error("SAP packet is compressed (not supported)")]
    Compressed,
    /// The payload type is not `application/sdp`.
    #[error("SAP payload type '{0}', expected application/sdp")]
    PayloadType(String),
    /// The payload is not UTF-8 text.
    #[error("SAP payload is not UTF-8 text")]
    NotText,
    /// The payload is longer than an SDP may be.
    #[error("SAP payload of {0} bytes, at most {MAX_SDP} accepted")]
    TooLong(usize),
    /// Building: the output buffer is too small.
    #[error("SAP packet of {need} bytes does not fit a buffer of {len}")]
    NoRoom {
        /// The buffer's length.
        len: usize,
        /// The packet's length.
        need: usize,
    },
}

/// One parsed SAP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SapPacket<'a> {
    /// Announcement or deletion.
    pub kind: SapKind,
    /// The message id hash (with the source, it names the announcement).
    pub hash: u16,
    /// The originating source address.
    pub source: IpAddr,
    /// The SDP text (for a deletion, possibly only its `o=` line).
    pub sdp: &'a str,
}

impl<'a> SapPacket<'a> {
    /// Parses one datagram received on the SAP port.
    pub fn parse(data: &'a [u8]) -> Result<Self, SapError> {
        let truncated = |need| SapError::Truncated {
            len: data.len(),
            need,
        };
        if data.len() < 4 {
            return Err(truncated(4));
        }
        let flags = data[0];
        let version = flags >> 5;
        if version != 1 {
            return Err(SapError::BadVersion(version));
        }
        if flags & 0x02 != 0 {
            return Err(SapError::Encrypted);
        }
        if flags & 0x01 != 0 {
            return Err(SapError::Compressed);
        }
        let ipv6 = flags & 0x10 != 0;
        let kind = if flags & 0x04 != 0 {
            SapKind::Delete
        } else {
            SapKind::Announce
        };
        let auth = data[1] as usize * 4;
        let hash = u16::from_be_bytes([data[2], data[3]]);
        let addr_len = if ipv6 { 16 } else { 4 };
        let head = 4 + addr_len + auth;
        if data.len() < head {
            return Err(truncated(head));
        }
        let a = &data[4..4 + addr_len];
        let source = if ipv6 {
            let mut b = [0u8; 16];
            b.copy_from_slice(a);
            IpAddr::V6(Ipv6Addr::from(b))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        };
        let mut payload = &data[head..];
        // The payload type is optional: an SDP starts with "v=0", anything else is a
        // NUL-terminated MIME type.
        if !payload.starts_with(b"v=0") {
            let Some(nul) = payload.iter().position(|&b| b == 0) else {
                return Err(SapError::PayloadType(
                    String::from_utf8_lossy(&payload[..payload.len().min(64)]).into_owned(),
                ));
            };
            let mime = &payload[..nul];
            if mime != SDP_MIME.as_bytes() {
                return Err(SapError::PayloadType(
                    String::from_utf8_lossy(&mime[..mime.len().min(64)]).into_owned(),
                ));
            }
            payload = &payload[nul + 1..];
        }
        if payload.len() > MAX_SDP {
            return Err(SapError::TooLong(payload.len()));
        }
        let sdp = std::str::from_utf8(payload).map_err(|_| SapError::NotText)?;
        Ok(SapPacket {
            kind,
            hash,
            source,
            sdp,
        })
    }

    /// Writes the packet (no authentication, payload type `application/sdp`) into
    /// `out`; returns its length.
    pub fn write(&self, out: &mut [u8]) -> Result<usize, SapError> {
        if self.sdp.len() > MAX_SDP {
            return Err(SapError::TooLong(self.sdp.len()));
        }
        let addr_len = if self.source.is_ipv6() { 16 } else { 4 };
        let head = 4 + addr_len;
        let need = head + SDP_MIME.len() + 1 + self.sdp.len();
        if out.len() < need {
            return Err(SapError::NoRoom {
                len: out.len(),
                need,
            });
        }
        out[0] = 0x20
            | if self.source.is_ipv6() { 0x10 } else { 0 }
            | if self.kind == SapKind::Delete {
                0x04
            } else {
                0
            };
        out[1] = 0;
        out[2..4].copy_from_slice(&self.hash.to_be_bytes());
        match self.source {
            IpAddr::V4(a) => out[4..8].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => out[4..20].copy_from_slice(&a.octets()),
        }
        let mime_end = head + SDP_MIME.len();
        out[head..mime_end].copy_from_slice(SDP_MIME.as_bytes());
        out[mime_end] = 0;
        out[mime_end + 1..need].copy_from_slice(self.sdp.as_bytes());
        Ok(need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(p: SapPacket<'_>) {
        let mut buf = vec![0u8; 2048];
        let n = p.write(&mut buf).unwrap();
        assert_eq!(SapPacket::parse(&buf[..n]), Ok(p));
    }

    #[test]
    fn announce_and_delete_round_trip() {
        round_trip(SapPacket {
            kind: SapKind::Announce,
            hash: 0xbeef,
            source: "10.0.0.1".parse().unwrap(),
            sdp: "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\n",
        });
        round_trip(SapPacket {
            kind: SapKind::Delete,
            hash: 1,
            source: "fe80::1".parse().unwrap(),
            sdp: "v=0\r\n",
        });
    }

    #[test]
    fn known_bytes_with_auth_and_without_payload_type() {
        // V=1 announce, one auth word, hash 0x0102, source 1.2.3.4, auth, bare SDP.
        let mut d = vec![0x20, 1, 1, 2, 1, 2, 3, 4, 9, 9, 9, 9];
        d.extend_from_slice(b"v=0\n");
        let p = SapPacket::parse(&d).unwrap();
        assert_eq!(p.kind, SapKind::Announce);
        assert_eq!(p.hash, 0x0102);
        assert_eq!(p.source, "1.2.3.4".parse::<IpAddr>().unwrap());
        assert_eq!(p.sdp, "v=0\n");
    }

    #[test]
    fn bad_packets_are_refused_with_the_reason() {
        assert_eq!(
            SapPacket::parse(&[0x20, 0]),
            Err(SapError::Truncated { len: 2, need: 4 })
        );
        assert_eq!(
            SapPacket::parse(&[0x40, 0, 0, 0]),
            Err(SapError::BadVersion(2))
        );
        assert_eq!(SapPacket::parse(&[0x22, 0, 0, 0]), Err(SapError::Encrypted));
        assert_eq!(
            SapPacket::parse(&[0x21, 0, 0, 0]),
            Err(SapError::Compressed)
        );
        assert_eq!(
            SapPacket::parse(&[0x30, 0, 0, 0, 1, 2, 3, 4]),
            Err(SapError::Truncated { len: 8, need: 20 })
        );
        assert_eq!(
            SapPacket::parse(&[0x20, 255, 0, 0, 1, 2, 3, 4]),
            Err(SapError::Truncated {
                len: 8,
                need: 8 + 1020
            })
        );
        let mut d = vec![0x20, 0, 0, 0, 1, 2, 3, 4];
        d.extend_from_slice(b"text/plain\0v=0\n");
        assert_eq!(
            SapPacket::parse(&d),
            Err(SapError::PayloadType("text/plain".into()))
        );
        let mut d = vec![0x20, 0, 0, 0, 1, 2, 3, 4];
        d.extend_from_slice(b"v=0\n\xff");
        assert_eq!(SapPacket::parse(&d), Err(SapError::NotText));
        let mut d = vec![0x20, 0, 0, 0, 1, 2, 3, 4];
        d.extend_from_slice(b"v=0");
        d.resize(8 + MAX_SDP + 1, b'x');
        assert_eq!(SapPacket::parse(&d), Err(SapError::TooLong(MAX_SDP + 1)));
    }
}
