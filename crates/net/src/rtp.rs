//! RTP packets (RFC 3550 section 5.1): the fixed 12-byte header, the CSRC list, the
//! header extension and padding.
//!
//! ```text
//!  0                   1                   2                   3
//! |V=2|P|X|  CC   |M|     PT      |       sequence number         |
//! |                           timestamp                           |
//! |           synchronization source (SSRC) identifier            |
//! |            contributing source (CSRC) identifiers (CC of them) |
//! | [extension: profile-defined 16 bits | length in 32-bit words, then the words] |
//! | payload ... [padding, its last byte = the padding's length]   |
//! ```
//!
//! Parsing borrows the payload from the datagram and allocates nothing, so the receive
//! path can run it per packet without touching the allocator.

/// The fixed header's length in bytes.
pub const FIXED_HEADER: usize = 12;

/// Most CSRCs a header can name (the CC field has four bits).
pub const MAX_CSRC: usize = 15;

/// Why a datagram is not an RTP packet we can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtpError {
    /// Fewer bytes than the header says there are.
    #[error("RTP packet truncated: {len} bytes, its header needs {need}")]
    Truncated {
        /// The datagram's length.
        len: usize,
        /// Bytes the header (fixed part, CSRCs, extension) needs.
        need: usize,
    },
    /// The version field is not 2.
    #[error("RTP version {0}, expected 2")]
    BadVersion(u8),
    /// The padding count is zero or covers the header.
    #[error("RTP padding of {pad} bytes, but {available} bytes follow the header")]
    BadPadding {
        /// The last byte of the packet.
        pad: u8,
        /// Bytes after the header (payload and padding).
        available: usize,
    },
    /// Building: a payload type above 127 (it has seven bits).
    #[error("RTP payload type {0} is outside 0..=127")]
    PayloadType(u8),
    /// Building: more CSRCs than the four-bit count holds.
    #[error("{0} CSRCs, an RTP header holds at most 15")]
    TooManyCsrc(usize),
    /// Building: the output buffer cannot hold the header and payload.
    #[error("RTP packet of {need} bytes does not fit a buffer of {len}")]
    NoRoom {
        /// The buffer's length.
        len: usize,
        /// The packet's length.
        need: usize,
    },
}

/// The header fields of an RTP packet (the extension's contents are skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpHeader {
    /// The marker bit (the first packet after silence, for audio).
    pub marker: bool,
    /// The payload type, 0..=127 (the SDP's `m=` line maps it to an encoding).
    pub payload_type: u8,
    /// The sequence number, one more per packet, wrapping at 2^16.
    pub sequence: u16,
    /// The sampling instant of the first sample, in the media clock's units (frames).
    pub timestamp: u32,
    /// The synchronization source: the sender's random stream identifier.
    pub ssrc: u32,
    /// How many of `csrc` are used.
    pub csrc_count: u8,
    /// The contributing sources (the first `csrc_count`).
    pub csrc: [u32; MAX_CSRC],
    /// The extension's profile-defined 16 bits, when the X bit was set.
    pub extension: Option<u16>,
}

impl RtpHeader {
    /// A header without CSRCs or extension, as quaver sends them.
    pub fn new(payload_type: u8, sequence: u16, timestamp: u32, ssrc: u32) -> Self {
        RtpHeader {
            marker: false,
            payload_type,
            sequence,
            timestamp,
            ssrc,
            csrc_count: 0,
            csrc: [0; MAX_CSRC],
            extension: None,
        }
    }

    /// The CSRCs in use.
    pub fn csrcs(&self) -> &[u32] {
        &self.csrc[..self.csrc_count as usize]
    }

    /// Bytes [`RtpHeader::write`] writes (the fixed part and the CSRCs).
    pub fn len(&self) -> usize {
        FIXED_HEADER + 4 * self.csrc_count as usize
    }

    /// Always false: a header has at least its fixed 12 bytes.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the header, then `payload`, into `out`; returns the packet's length. The
    /// extension is not written (quaver sends none): `extension` must be `None`.
    pub fn write(&self, payload: &[u8], out: &mut [u8]) -> Result<usize, RtpError> {
        if self.payload_type > 127 {
            return Err(RtpError::PayloadType(self.payload_type));
        }
        if self.csrc_count as usize > MAX_CSRC {
            return Err(RtpError::TooManyCsrc(self.csrc_count as usize));
        }
        let head = self.len();
        let need = head + payload.len();
        if out.len() < need {
            return Err(RtpError::NoRoom {
                len: out.len(),
                need,
            });
        }
        out[0] = 0x80 | self.csrc_count;
        out[1] = (u8::from(self.marker) << 7) | self.payload_type;
        out[2..4].copy_from_slice(&self.sequence.to_be_bytes());
        out[4..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
        for (i, c) in self.csrcs().iter().enumerate() {
            out[12 + 4 * i..16 + 4 * i].copy_from_slice(&c.to_be_bytes());
        }
        out[head..need].copy_from_slice(payload);
        Ok(need)
    }
}

/// One parsed RTP packet: its header and its payload (padding removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpPacket<'a> {
    /// The header fields.
    pub header: RtpHeader,
    /// The payload, borrowed from the datagram.
    pub payload: &'a [u8],
}

impl<'a> RtpPacket<'a> {
    /// Parses one datagram. Refuses versions other than 2, headers longer than the
    /// datagram (CSRCs, extension) and padding that is zero or longer than what follows
    /// the header.
    pub fn parse(data: &'a [u8]) -> Result<Self, RtpError> {
        let truncated = |need| RtpError::Truncated {
            len: data.len(),
            need,
        };
        if data.len() < FIXED_HEADER {
            return Err(truncated(FIXED_HEADER));
        }
        let version = data[0] >> 6;
        if version != 2 {
            return Err(RtpError::BadVersion(version));
        }
        let padding = data[0] & 0x20 != 0;
        let has_ext = data[0] & 0x10 != 0;
        let cc = data[0] & 0x0f;
        let mut header = RtpHeader::new(
            data[1] & 0x7f,
            u16::from_be_bytes([data[2], data[3]]),
            u32::from_be_bytes([data[4], data[5], data[6], data[7]]),
            u32::from_be_bytes([data[8], data[9], data[10], data[11]]),
        );
        header.marker = data[1] & 0x80 != 0;
        header.csrc_count = cc;
        let mut pos = FIXED_HEADER + 4 * cc as usize;
        if data.len() < pos {
            return Err(truncated(pos));
        }
        for (i, c) in header.csrc[..cc as usize].iter_mut().enumerate() {
            let at = FIXED_HEADER + 4 * i;
            *c = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        }
        if has_ext {
            if data.len() < pos + 4 {
                return Err(truncated(pos + 4));
            }
            header.extension = Some(u16::from_be_bytes([data[pos], data[pos + 1]]));
            let words = u16::from_be_bytes([data[pos + 2], data[pos + 3]]) as usize;
            pos += 4 + 4 * words;
            if data.len() < pos {
                return Err(truncated(pos));
            }
        }
        let mut end = data.len();
        if padding {
            let pad = data[end - 1];
            let available = end - pos;
            if pad == 0 || pad as usize > available {
                return Err(RtpError::BadPadding { pad, available });
            }
            end -= pad as usize;
        }
        Ok(RtpPacket {
            header,
            payload: &data[pos..end],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_then_parse_round_trips() {
        let mut h = RtpHeader::new(97, 65535, 0xdead_beef, 0x1234_5678);
        h.marker = true;
        h.csrc_count = 2;
        h.csrc[0] = 7;
        h.csrc[1] = 9;
        let mut buf = [0u8; 64];
        let n = h.write(&[1, 2, 3], &mut buf).unwrap();
        assert_eq!(n, 12 + 8 + 3);
        let p = RtpPacket::parse(&buf[..n]).unwrap();
        assert_eq!(p.header, h);
        assert_eq!(p.header.csrcs(), &[7, 9]);
        assert_eq!(p.payload, &[1, 2, 3]);
    }

    #[test]
    fn known_bytes() {
        // V=2, no P/X/CC, M=0, PT=96, seq 1, ts 2, ssrc 3, payload ab.
        let d = [0x80, 96, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0xab];
        let p = RtpPacket::parse(&d).unwrap();
        assert_eq!(
            (
                p.header.payload_type,
                p.header.sequence,
                p.header.timestamp,
                p.header.ssrc
            ),
            (96, 1, 2, 3)
        );
        assert!(!p.header.marker);
        assert_eq!(p.payload, &[0xab]);
    }

    #[test]
    fn extension_and_padding_are_skipped() {
        let mut d = vec![0xb0, 96, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        d.extend_from_slice(&[0xbe, 0xde, 0, 1, 9, 9, 9, 9]); // one extension word
        d.extend_from_slice(&[5, 6, 0, 0, 3]); // payload 5 6, then 3 bytes of padding
        let p = RtpPacket::parse(&d).unwrap();
        assert_eq!(p.header.extension, Some(0xbede));
        assert_eq!(p.payload, &[5, 6]);
    }

    #[test]
    fn bad_packets_are_refused_with_the_reason() {
        assert_eq!(
            RtpPacket::parse(&[0x80; 11]),
            Err(RtpError::Truncated { len: 11, need: 12 })
        );
        let mut d = [0u8; 12];
        d[0] = 0x40;
        assert_eq!(RtpPacket::parse(&d), Err(RtpError::BadVersion(1)));
        d[0] = 0x8f; // 15 CSRCs announced, none there
        assert_eq!(
            RtpPacket::parse(&d),
            Err(RtpError::Truncated { len: 12, need: 72 })
        );
        d[0] = 0x90; // extension announced, none there
        assert_eq!(
            RtpPacket::parse(&d),
            Err(RtpError::Truncated { len: 12, need: 16 })
        );
        let mut e = vec![0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
        assert_eq!(
            RtpPacket::parse(&e),
            Err(RtpError::Truncated {
                len: 16,
                need: 16 + 4 * 65535
            })
        );
        e = vec![0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5];
        assert_eq!(
            RtpPacket::parse(&e),
            Err(RtpError::BadPadding {
                pad: 5,
                available: 2
            })
        );
        e[13] = 0;
        assert_eq!(
            RtpPacket::parse(&e),
            Err(RtpError::BadPadding {
                pad: 0,
                available: 2
            })
        );
    }

    #[test]
    fn building_checks_its_fields() {
        let mut buf = [0u8; 16];
        assert_eq!(
            RtpHeader::new(128, 0, 0, 0).write(&[], &mut buf),
            Err(RtpError::PayloadType(128))
        );
        assert_eq!(
            RtpHeader::new(96, 0, 0, 0).write(&[0; 5], &mut buf),
            Err(RtpError::NoRoom { len: 16, need: 17 })
        );
        let mut h = RtpHeader::new(96, 0, 0, 0);
        h.csrc_count = 16;
        assert_eq!(h.write(&[], &mut buf), Err(RtpError::TooManyCsrc(16)));
    }
}
