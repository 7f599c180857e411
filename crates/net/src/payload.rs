//! Linear PCM payloads (RFC 3551 L16, RFC 3190 L24): interleaved big-endian signed
//! samples, converted to and from interleaved `f32` in -1.0..1.0.
//!
//! Every 16- and 24-bit value is exactly representable as an `f32` (24-bit mantissa) and
//! the scale is a power of two, so decoding then encoding gives back the same bytes: a
//! stream received and written out unchanged is bit-exact.

use std::fmt;

/// A linear PCM encoding carried in RTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// 16-bit big-endian signed (`L16`).
    L16,
    /// 24-bit big-endian signed, packed in three bytes (`L24`).
    L24,
}

/// Why a payload cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The payload is not a whole number of frames.
    #[error("{len}-byte payload is not a whole number of {frame}-byte frames")]
    PartialFrame {
        /// The payload's length.
        len: usize,
        /// One frame's length (channels × bytes per sample).
        frame: usize,
    },
    /// The output holds fewer samples than the input has.
    #[error("{frames} frames do not fit an output of {room} frames")]
    NoRoom {
        /// Frames to convert.
        frames: usize,
        /// Frames the output holds.
        room: usize,
    },
    /// Zero channels.
    #[error("0 channels")]
    NoChannels,
}

impl Encoding {
    /// Bytes per sample.
    pub fn bytes(self) -> usize {
        match self {
            Encoding::L16 => 2,
            Encoding::L24 => 3,
        }
    }

    /// The SDP encoding name (`rtpmap`).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::L16 => "L16",
            Encoding::L24 => "L24",
        }
    }

    /// The encoding for an SDP encoding name (case-insensitive, as RFC 4566 says).
    pub fn from_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("L16") {
            Some(Encoding::L16)
        } else if name.eq_ignore_ascii_case("L24") {
            Some(Encoding::L24)
        } else {
            None
        }
    }

    fn frame_bytes(self, channels: usize) -> Result<usize, PayloadError> {
        if channels == 0 {
            return Err(PayloadError::NoChannels);
        }
        Ok(self.bytes() * channels)
    }

    /// Frames in a payload of `len` bytes, or why it is not whole frames.
    pub fn frames(self, len: usize, channels: usize) -> Result<usize, PayloadError> {
        let frame = self.frame_bytes(channels)?;
        if !len.is_multiple_of(frame) {
            return Err(PayloadError::PartialFrame { len, frame });
        }
        Ok(len / frame)
    }

    /// Converts a payload to interleaved samples at the start of `out`; returns the
    /// frames converted. Allocates nothing.
    pub fn decode(
        self,
        payload: &[u8],
        channels: usize,
        out: &mut [f32],
    ) -> Result<usize, PayloadError> {
        let frames = self.frames(payload.len(), channels)?;
        let samples = frames * channels;
        if out.len() < samples {
            return Err(PayloadError::NoRoom {
                frames,
                room: out.len() / channels,
            });
        }
        match self {
            Encoding::L16 => {
                for (o, b) in out.iter_mut().zip(payload.chunks_exact(2)) {
                    *o = i16::from_be_bytes([b[0], b[1]]) as f32 / 32_768.0;
                }
            }
            Encoding::L24 => {
                for (o, b) in out.iter_mut().zip(payload.chunks_exact(3)) {
                    // Sign-extend through the top byte of an i32.
                    let v = i32::from_be_bytes([b[0], b[1], b[2], 0]) >> 8;
                    *o = v as f32 / 8_388_608.0;
                }
            }
        }
        Ok(frames)
    }

    /// Converts interleaved samples to a payload at the start of `out` (clipped to the
    /// format's range, rounded to nearest); returns the bytes written.
    pub fn encode(self, samples: &[f32], out: &mut [u8]) -> Result<usize, PayloadError> {
        let n = samples.len() * self.bytes();
        if out.len() < n {
            return Err(PayloadError::NoRoom {
                frames: samples.len(),
                room: out.len() / self.bytes(),
            });
        }
        match self {
            Encoding::L16 => {
                for (s, b) in samples.iter().zip(out.chunks_exact_mut(2)) {
                    let v = (s * 32_768.0).round().clamp(-32_768.0, 32_767.0) as i16;
                    b.copy_from_slice(&v.to_be_bytes());
                }
            }
            Encoding::L24 => {
                for (s, b) in samples.iter().zip(out.chunks_exact_mut(3)) {
                    let v = (s * 8_388_608.0).round().clamp(-8_388_608.0, 8_388_607.0) as i32;
                    b.copy_from_slice(&v.to_be_bytes()[1..]);
                }
            }
        }
        Ok(n)
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l24_known_values() {
        let bytes = [
            0x7f, 0xff, 0xff, 0x80, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff,
        ];
        let mut out = [0.0f32; 4];
        assert_eq!(Encoding::L24.decode(&bytes, 2, &mut out), Ok(2));
        assert_eq!(
            out,
            [
                8_388_607.0 / 8_388_608.0,
                -1.0,
                1.0 / 8_388_608.0,
                -1.0 / 8_388_608.0
            ]
        );
        let mut back = [0u8; 12];
        assert_eq!(Encoding::L24.encode(&out, &mut back), Ok(12));
        assert_eq!(back, bytes);
    }

    #[test]
    fn every_l16_value_and_many_l24_values_round_trip() {
        let all16: Vec<u8> = (i16::MIN..=i16::MAX)
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let mut f = vec![0.0f32; all16.len() / 2];
        Encoding::L16.decode(&all16, 1, &mut f).unwrap();
        let mut back = vec![0u8; all16.len()];
        Encoding::L16.encode(&f, &mut back).unwrap();
        assert_eq!(back, all16);
        let some24: Vec<u8> = (-8_388_608i32..8_388_608)
            .step_by(97)
            .chain([8_388_607])
            .flat_map(|v| v.to_be_bytes()[1..].to_vec())
            .collect();
        let mut f = vec![0.0f32; some24.len() / 3];
        Encoding::L24.decode(&some24, 1, &mut f).unwrap();
        let mut back = vec![0u8; some24.len()];
        Encoding::L24.encode(&f, &mut back).unwrap();
        assert_eq!(back, some24);
    }

    #[test]
    fn encode_clips() {
        let mut b = [0u8; 6];
        Encoding::L16
            .encode(&[2.0, -2.0, f32::NAN], &mut b)
            .unwrap();
        assert_eq!(b, [0x7f, 0xff, 0x80, 0x00, 0, 0]);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let mut out = [0.0f32; 2];
        assert_eq!(
            Encoding::L24.decode(&[0; 7], 2, &mut out),
            Err(PayloadError::PartialFrame { len: 7, frame: 6 })
        );
        assert_eq!(
            Encoding::L16.decode(&[0; 8], 1, &mut out),
            Err(PayloadError::NoRoom { frames: 4, room: 2 })
        );
        assert_eq!(
            Encoding::L16.decode(&[], 0, &mut out),
            Err(PayloadError::NoChannels)
        );
        assert_eq!(
            Encoding::L16.encode(&[0.0; 3], &mut [0u8; 5]),
            Err(PayloadError::NoRoom { frames: 3, room: 2 })
        );
        assert_eq!(Encoding::from_name("l24"), Some(Encoding::L24));
        assert_eq!(Encoding::from_name("opus"), None);
    }
}
