//! Sample formats at the edges of the graph and the conversions to and from f32.
//!
//! Scaling is `integer / 2^(bits-1)` (S16: `x / 32768`, U8: `(x - 128) / 128`,
//! S24: `x / 2^23`, S32: `x / 2^31`). Every U8, S16 and S24 value survives a round
//! trip through f32 bit-exactly, because f32 has a 24-bit significand and the scale
//! factors are powers of two. S32 keeps only 24 bits of precision through f32: the low
//! 8 bits are rounded away on decode.
//!
//! Encoding clips integer formats to [-1, 1) and rounds to nearest (ties to even).
//! Float formats are passed through unchanged: clipping is a property of fixed point,
//! and a float sink keeps the headroom for whatever converts it later.

use crate::buffer::{Planar, PlanarMut};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The layout of one sample in a byte stream.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleFormat {
    /// Unsigned 8-bit, silence at 128.
    U8,
    /// Signed 16-bit little-endian.
    S16Le,
    /// Signed 16-bit big-endian.
    S16Be,
    /// Signed 24-bit packed in 3 bytes, little-endian.
    S24Le,
    /// Signed 24-bit packed in 3 bytes, big-endian.
    S24Be,
    /// Signed 24-bit in the low bits of a 32-bit little-endian word.
    S24_32Le,
    /// Signed 24-bit in the low bits of a 32-bit big-endian word.
    S24_32Be,
    /// Signed 32-bit little-endian.
    S32Le,
    /// Signed 32-bit big-endian.
    S32Be,
    /// IEEE 754 single precision little-endian.
    F32Le,
    /// IEEE 754 single precision big-endian.
    F32Be,
}

impl SampleFormat {
    /// Every format, in declaration order (for tests, help texts and negotiation).
    pub const ALL: [SampleFormat; 11] = [
        SampleFormat::U8,
        SampleFormat::S16Le,
        SampleFormat::S16Be,
        SampleFormat::S24Le,
        SampleFormat::S24Be,
        SampleFormat::S24_32Le,
        SampleFormat::S24_32Be,
        SampleFormat::S32Le,
        SampleFormat::S32Be,
        SampleFormat::F32Le,
        SampleFormat::F32Be,
    ];

    /// Bytes one sample of one channel occupies.
    pub fn bytes_per_sample(&self) -> usize {
        use SampleFormat::*;
        match self {
            U8 => 1,
            S16Le | S16Be => 2,
            S24Le | S24Be => 3,
            S24_32Le | S24_32Be | S32Le | S32Be | F32Le | F32Be => 4,
        }
    }

    /// The canonical lowercase name ("s16le").
    pub fn name(&self) -> &'static str {
        use SampleFormat::*;
        match self {
            U8 => "u8",
            S16Le => "s16le",
            S16Be => "s16be",
            S24Le => "s24le",
            S24Be => "s24be",
            S24_32Le => "s24_32le",
            S24_32Be => "s24_32be",
            S32Le => "s32le",
            S32Be => "s32be",
            F32Le => "f32le",
            F32Be => "f32be",
        }
    }

    /// True for the IEEE float formats, which are not clipped on encode.
    pub fn is_float(&self) -> bool {
        matches!(self, SampleFormat::F32Le | SampleFormat::F32Be)
    }
}

impl fmt::Display for SampleFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for a sample format name that is not recognised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sample format '{0}'")]
pub struct UnknownSampleFormat(pub String);

impl FromStr for SampleFormat {
    type Err = UnknownSampleFormat;
    /// Accepts the canonical names plus endian-less aliases, which mean little-endian
    /// because that is what every host we target is. ALSA's "s24_le" is deliberately
    /// not accepted: there it means 24-in-32, here "s24" means packed, so it is ambiguous.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use SampleFormat::*;
        let lower = s.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "u8" => U8,
            "s16le" | "s16" | "s16_le" => S16Le,
            "s16be" | "s16_be" => S16Be,
            "s24le" | "s24" | "s24_3le" => S24Le,
            "s24be" | "s24_3be" => S24Be,
            "s24_32le" | "s24_32" | "s24-32le" | "s24-32" => S24_32Le,
            "s24_32be" | "s24-32be" => S24_32Be,
            "s32le" | "s32" | "s32_le" => S32Le,
            "s32be" | "s32_be" => S32Be,
            "f32le" | "f32" | "float32le" | "float32" | "float" | "float_le" | "float32_le" => {
                F32Le
            }
            "f32be" | "float32be" | "float_be" | "float32_be" => F32Be,
            _ => return Err(UnknownSampleFormat(s.to_string())),
        })
    }
}

impl Serialize for SampleFormat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for SampleFormat {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

const S16_SCALE: f32 = 32768.0;
const S24_SCALE: f64 = 8_388_608.0; // 2^23
const S32_SCALE: f64 = 2_147_483_648.0; // 2^31
// Adding 1.5·2^23 to an f32 below 2^22 in magnitude rounds it to an integer (ties to
// even) and leaves that integer, two's complement, in the low mantissa bits. Reading
// the bits replaces the float-to-int conversion, which does not vectorise on x86-64.
const ROUND_F32: f32 = 12_582_912.0;
// The same trick in f64 (1.5·2^52) for the 24- and 32-bit formats.
const ROUND_F64: f64 = 6_755_399_441_055_744.0;

/// Scales and clips to `[lo, hi]`; NaN becomes silence rather than full scale.
#[inline(always)]
fn clip32(x: f32, scale: f32, lo: f32, hi: f32) -> f32 {
    let v = x * scale;
    if v.is_nan() { 0.0 } else { v.clamp(lo, hi) }
}

#[inline(always)]
fn clip64(x: f32, scale: f64, lo: f64, hi: f64) -> f64 {
    let v = x as f64 * scale;
    if v.is_nan() { 0.0 } else { v.clamp(lo, hi) }
}

#[inline(always)]
fn enc_u8(x: f32) -> u8 {
    let v = clip32(x, 128.0, -128.0, 127.0);
    ((v + ROUND_F32).to_bits() as u8) ^ 0x80
}

#[inline(always)]
fn enc_s16(x: f32) -> i16 {
    let v = clip32(x, S16_SCALE, -32768.0, 32767.0);
    (v + ROUND_F32).to_bits() as u16 as i16
}

#[inline(always)]
fn enc_s24(x: f32) -> i32 {
    let v = clip64(x, S24_SCALE, -8_388_608.0, 8_388_607.0);
    (v + ROUND_F64).to_bits() as u32 as i32
}

#[inline(always)]
fn enc_s32(x: f32) -> i32 {
    let v = clip64(x, S32_SCALE, -2_147_483_648.0, 2_147_483_647.0);
    (v + ROUND_F64).to_bits() as u32 as i32
}

#[inline(always)]
fn dec_s24_bits(v: u32) -> f32 {
    // Shift the 24 bits to the top and back to sign-extend them.
    let s = ((v << 8) as i32) >> 8;
    s as f32 * (1.0 / S24_SCALE as f32)
}

#[inline(always)]
fn dec_s32(v: i32) -> f32 {
    // One rounding to f32's 24-bit significand, then an exact power-of-two scale.
    v as f32 * (1.0 / S32_SCALE as f32)
}

/// Largest float sample taken from outside: 60 dB over full scale. Beyond it no audio
/// is meant, and a few such samples summed in a mix could reach infinity.
pub const MAX_FLOAT_SAMPLE: f32 = 1000.0;

/// A float sample from outside (a client, a file) made safe for the graph: NaN and
/// infinities become silence, absurd magnitudes are clipped to [`MAX_FLOAT_SAMPLE`].
/// One NaN in a mix, a resampler's history or a filter's state would otherwise silence
/// or poison everything after it, up to the device. *RT*.
#[inline]
pub fn finite_sample(x: f32) -> f32 {
    if x.is_finite() {
        x.clamp(-MAX_FLOAT_SAMPLE, MAX_FLOAT_SAMPLE)
    } else {
        0.0
    }
}

#[inline(always)]
fn decode_with<const N: usize>(src: &[u8], dst: &mut [f32], f: impl Fn([u8; N]) -> f32) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(N)) {
        *d = f(s.try_into().expect("chunk of N bytes"));
    }
}

#[inline(always)]
fn encode_with<const N: usize>(src: &[f32], dst: &mut [u8], f: impl Fn(f32) -> [u8; N]) {
    for (d, &s) in dst.chunks_exact_mut(N).zip(src) {
        d.copy_from_slice(&f(s));
    }
}

/// Reads one channel of an interleaved byte stream: `stride` bytes per frame, the
/// sample at byte `offset` of each frame.
#[inline(always)]
fn decode_strided<const N: usize>(
    src: &[u8],
    stride: usize,
    offset: usize,
    dst: &mut [f32],
    f: impl Fn([u8; N]) -> f32,
) {
    for (d, frame) in dst.iter_mut().zip(src.chunks_exact(stride)) {
        *d = f(frame[offset..offset + N].try_into().expect("N bytes"));
    }
}

#[inline(always)]
fn encode_strided<const N: usize>(
    src: &[f32],
    stride: usize,
    offset: usize,
    dst: &mut [u8],
    f: impl Fn(f32) -> [u8; N],
) {
    for (frame, &s) in dst.chunks_exact_mut(stride).zip(src) {
        frame[offset..offset + N].copy_from_slice(&f(s));
    }
}

/// Calls `$driver::<N>($args.., codec)` with the decoder for `$fmt`, so every
/// layout (interleaved, strided) gets a loop monomorphised per format.
macro_rules! with_decoder {
    ($fmt:expr, $driver:ident($($arg:expr),*)) => {{
        use SampleFormat::*;
        match $fmt {
            U8 => $driver::<1>($($arg,)* |b| (b[0] as f32 - 128.0) * (1.0 / 128.0)),
            S16Le => $driver::<2>($($arg,)* |b| i16::from_le_bytes(b) as f32 * (1.0 / S16_SCALE)),
            S16Be => $driver::<2>($($arg,)* |b| i16::from_be_bytes(b) as f32 * (1.0 / S16_SCALE)),
            S24Le => $driver::<3>($($arg,)* |b| dec_s24_bits(u32::from_le_bytes([b[0], b[1], b[2], 0]))),
            S24Be => $driver::<3>($($arg,)* |b| dec_s24_bits(u32::from_be_bytes([0, b[0], b[1], b[2]]))),
            S24_32Le => $driver::<4>($($arg,)* |b| dec_s24_bits(u32::from_le_bytes(b))),
            S24_32Be => $driver::<4>($($arg,)* |b| dec_s24_bits(u32::from_be_bytes(b))),
            S32Le => $driver::<4>($($arg,)* |b| dec_s32(i32::from_le_bytes(b))),
            S32Be => $driver::<4>($($arg,)* |b| dec_s32(i32::from_be_bytes(b))),
            F32Le => $driver::<4>($($arg,)* |b| finite_sample(f32::from_le_bytes(b))),
            F32Be => $driver::<4>($($arg,)* |b| finite_sample(f32::from_be_bytes(b))),
        }
    }};
}

/// The encoding counterpart of `with_decoder!`.
macro_rules! with_encoder {
    ($fmt:expr, $driver:ident($($arg:expr),*)) => {{
        use SampleFormat::*;
        match $fmt {
            U8 => $driver::<1>($($arg,)* |x| [enc_u8(x)]),
            S16Le => $driver::<2>($($arg,)* |x| enc_s16(x).to_le_bytes()),
            S16Be => $driver::<2>($($arg,)* |x| enc_s16(x).to_be_bytes()),
            S24Le => $driver::<3>($($arg,)* |x| {
                let b = enc_s24(x).to_le_bytes();
                [b[0], b[1], b[2]]
            }),
            S24Be => $driver::<3>($($arg,)* |x| {
                let b = enc_s24(x).to_be_bytes();
                [b[1], b[2], b[3]]
            }),
            // The top byte carries the sign extension, as ALSA drivers expect.
            S24_32Le => $driver::<4>($($arg,)* |x| enc_s24(x).to_le_bytes()),
            S24_32Be => $driver::<4>($($arg,)* |x| enc_s24(x).to_be_bytes()),
            S32Le => $driver::<4>($($arg,)* |x| enc_s32(x).to_le_bytes()),
            S32Be => $driver::<4>($($arg,)* |x| enc_s32(x).to_be_bytes()),
            F32Le => $driver::<4>($($arg,)* f32::to_le_bytes),
            F32Be => $driver::<4>($($arg,)* f32::to_be_bytes),
        }
    }};
}

/// Decodes `dst.len()` interleaved samples from `src`. Panics unless
/// `src.len() == dst.len() * fmt.bytes_per_sample()`. Never allocates.
pub fn decode_interleaved(fmt: SampleFormat, src: &[u8], dst: &mut [f32]) {
    assert_eq!(
        src.len(),
        dst.len() * fmt.bytes_per_sample(),
        "decode_interleaved: {} bytes of {fmt} do not hold {} samples",
        src.len(),
        dst.len()
    );
    with_decoder!(fmt, decode_with(src, dst))
}

/// Encodes `src.len()` interleaved samples into `dst`, clipping integer formats to
/// [-1, 1) and rounding to nearest. Panics unless `dst.len() == src.len() * bps`.
/// Never allocates.
pub fn encode_interleaved(fmt: SampleFormat, src: &[f32], dst: &mut [u8]) {
    assert_eq!(
        dst.len(),
        src.len() * fmt.bytes_per_sample(),
        "encode_interleaved: {} bytes of {fmt} do not hold {} samples",
        dst.len(),
        src.len()
    );
    with_encoder!(fmt, encode_with(src, dst))
}

/// Splits interleaved samples into planar channels. Panics unless
/// `src.len() == dst.channels() * dst.frames()`.
pub fn deinterleave(src: &[f32], dst: &mut PlanarMut) {
    let channels = dst.channels();
    assert_eq!(src.len(), channels * dst.frames(), "deinterleave: length");
    if channels == 0 {
        return;
    }
    if channels == 1 {
        dst.channel_mut(0).copy_from_slice(src);
        return;
    }
    for ch in 0..channels {
        let out = dst.channel_mut(ch);
        for (o, frame) in out.iter_mut().zip(src.chunks_exact(channels)) {
            *o = frame[ch];
        }
    }
}

/// Joins planar channels into interleaved samples. Panics unless
/// `dst.len() == src.channels() * src.frames()`.
pub fn interleave(src: Planar, dst: &mut [f32]) {
    let channels = src.channels();
    assert_eq!(dst.len(), channels * src.frames(), "interleave: length");
    if channels == 0 {
        return;
    }
    if channels == 1 {
        dst.copy_from_slice(src.channel(0));
        return;
    }
    for ch in 0..channels {
        let input = src.channel(ch);
        for (frame, &i) in dst.chunks_exact_mut(channels).zip(input) {
            frame[ch] = i;
        }
    }
}

/// Decodes interleaved bytes straight into planar channels, sparing the caller a
/// scratch buffer. Panics unless `src.len() == channels * frames * bps`.
pub fn decode_to_planar(fmt: SampleFormat, src: &[u8], dst: &mut PlanarMut) {
    let channels = dst.channels();
    let bps = fmt.bytes_per_sample();
    assert_eq!(
        src.len(),
        channels * dst.frames() * bps,
        "decode_to_planar: length"
    );
    let stride = channels * bps;
    for ch in 0..channels {
        let out = dst.channel_mut(ch);
        with_decoder!(fmt, decode_strided(src, stride, ch * bps, out));
    }
}

/// Encodes planar channels straight into interleaved bytes, with the same clipping
/// as [`encode_interleaved`]. Panics unless `dst.len() == channels * frames * bps`.
pub fn encode_from_planar(fmt: SampleFormat, src: Planar, dst: &mut [u8]) {
    let channels = src.channels();
    let bps = fmt.bytes_per_sample();
    assert_eq!(
        dst.len(),
        channels * src.frames() * bps,
        "encode_from_planar: length"
    );
    let stride = channels * bps;
    for ch in 0..channels {
        let input = src.channel(ch);
        with_encoder!(fmt, encode_strided(input, stride, ch * bps, &mut *dst));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::PlanarBuf;

    /// xorshift64*: deterministic pseudo-random numbers without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    #[test]
    fn names_round_trip() {
        for f in SampleFormat::ALL {
            assert_eq!(f.to_string().parse::<SampleFormat>().unwrap(), f);
        }
        assert_eq!("s16".parse::<SampleFormat>().unwrap(), SampleFormat::S16Le);
        assert_eq!("S24".parse::<SampleFormat>().unwrap(), SampleFormat::S24Le);
        assert_eq!("s32".parse::<SampleFormat>().unwrap(), SampleFormat::S32Le);
        assert_eq!("f32".parse::<SampleFormat>().unwrap(), SampleFormat::F32Le);
        assert_eq!(
            "float32le".parse::<SampleFormat>().unwrap(),
            SampleFormat::F32Le
        );
        assert_eq!(
            "float32be".parse::<SampleFormat>().unwrap(),
            SampleFormat::F32Be
        );
        assert_eq!(
            "s24-32le".parse::<SampleFormat>().unwrap(),
            SampleFormat::S24_32Le
        );
        assert!("s24_le".parse::<SampleFormat>().is_err());
        assert!("pcm".parse::<SampleFormat>().is_err());
    }

    #[test]
    fn serde_uses_lowercase_names() {
        for f in SampleFormat::ALL {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.name()));
            assert_eq!(serde_json::from_str::<SampleFormat>(&json).unwrap(), f);
        }
        assert_eq!(
            serde_json::from_str::<SampleFormat>("\"s16\"").unwrap(),
            SampleFormat::S16Le
        );
        assert!(serde_json::from_str::<SampleFormat>("\"x\"").is_err());
    }

    #[test]
    fn bytes_per_sample() {
        let bps: Vec<usize> = SampleFormat::ALL
            .iter()
            .map(|f| f.bytes_per_sample())
            .collect();
        assert_eq!(bps, [1, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4]);
    }

    fn round_trip(fmt: SampleFormat, bytes: &[u8]) -> Vec<u8> {
        let n = bytes.len() / fmt.bytes_per_sample();
        let mut f = vec![0.0f32; n];
        decode_interleaved(fmt, bytes, &mut f);
        let mut back = vec![0u8; bytes.len()];
        encode_interleaved(fmt, &f, &mut back);
        back
    }

    #[test]
    fn s16_every_value_is_bit_exact() {
        let values: Vec<i16> = (i16::MIN..=i16::MAX).collect();
        for fmt in [SampleFormat::S16Le, SampleFormat::S16Be] {
            let bytes: Vec<u8> = values
                .iter()
                .flat_map(|v| match fmt {
                    SampleFormat::S16Le => v.to_le_bytes(),
                    _ => v.to_be_bytes(),
                })
                .collect();
            assert_eq!(round_trip(fmt, &bytes), bytes, "{fmt}");
        }
        let mut f = [0.0f32; 3];
        decode_interleaved(SampleFormat::S16Le, &[0, 0x80, 0xff, 0x7f, 0, 0x40], &mut f);
        assert_eq!(f, [-1.0, 32767.0 / 32768.0, 0.5]);
    }

    #[test]
    fn u8_every_value_is_bit_exact() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(round_trip(SampleFormat::U8, &bytes), bytes);
        let mut f = [0.0f32; 3];
        decode_interleaved(SampleFormat::U8, &[0, 128, 192], &mut f);
        assert_eq!(f, [-1.0, 0.0, 0.5]);
    }

    #[test]
    fn s24_random_values_are_bit_exact() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut values: Vec<i32> = (0..200_000)
            .map(|_| ((rng.next() as u32) << 8) as i32 >> 8)
            .collect();
        values.extend([-8_388_608, 8_388_607, 0, 1, -1]);
        for fmt in [
            SampleFormat::S24Le,
            SampleFormat::S24Be,
            SampleFormat::S24_32Le,
            SampleFormat::S24_32Be,
        ] {
            let bytes: Vec<u8> = values
                .iter()
                .flat_map(|v| {
                    let le = v.to_le_bytes();
                    let be = v.to_be_bytes();
                    match fmt {
                        SampleFormat::S24Le => le[..3].to_vec(),
                        SampleFormat::S24Be => be[1..].to_vec(),
                        SampleFormat::S24_32Le => le.to_vec(),
                        _ => be.to_vec(),
                    }
                })
                .collect();
            assert_eq!(round_trip(fmt, &bytes), bytes, "{fmt}");
        }
    }

    #[test]
    fn s24_32_ignores_the_top_byte_on_decode() {
        let mut f = [0.0f32; 2];
        decode_interleaved(
            SampleFormat::S24_32Le,
            &[0, 0, 0x40, 0xAB, 0xff, 0xff, 0xff, 0x00],
            &mut f,
        );
        assert_eq!(f, [0.5, -1.0 / 8_388_608.0]);
    }

    #[test]
    fn s32_keeps_24_bits() {
        let mut rng = Rng(77);
        for fmt in [SampleFormat::S32Le, SampleFormat::S32Be] {
            for _ in 0..100_000 {
                let v = rng.next() as u32 as i32;
                let bytes = if fmt == SampleFormat::S32Le {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let back = round_trip(fmt, &bytes);
                let w = if fmt == SampleFormat::S32Le {
                    i32::from_le_bytes(back.try_into().unwrap())
                } else {
                    i32::from_be_bytes(back.try_into().unwrap())
                };
                // f32 rounds to 24 significant bits, so the error is at most 2^7 LSB.
                assert!((w as i64 - v as i64).abs() <= 128, "{v} -> {w}");
            }
            // Values with only 24 significant bits survive exactly.
            let v: i32 = 0x1234_5600;
            let bytes = if fmt == SampleFormat::S32Le {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            };
            assert_eq!(round_trip(fmt, &bytes), bytes);
        }
    }

    #[test]
    fn encode_clips_and_rounds() {
        let src = [
            2.0,
            1.0,
            -1.0,
            -3.0,
            0.5 / 32768.0,
            1.5 / 32768.0,
            -0.6 / 32768.0,
            f32::NAN,
        ];
        let mut out = [0u8; 16];
        encode_interleaved(SampleFormat::S16Le, &src, &mut out);
        let v: Vec<i16> = out
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(v, [32767, 32767, -32768, -32768, 0, 2, -1, 0]);

        let mut out = [0u8; 4];
        encode_interleaved(SampleFormat::U8, &[1.0, -1.5, 0.0, 0.999], &mut out);
        assert_eq!(out, [255, 0, 128, 255]);

        let mut out = [0u8; 12];
        encode_interleaved(SampleFormat::S32Le, &[1.0, -1.0, 0.5], &mut out);
        let v: Vec<i32> = out
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(v, [i32::MAX, i32::MIN, 1 << 30]);

        let mut out = [0u8; 6];
        encode_interleaved(SampleFormat::S24Le, &[1.0, -1.0], &mut out);
        assert_eq!(out, [0xff, 0xff, 0x7f, 0x00, 0x00, 0x80]);
    }

    #[test]
    fn float_passes_through() {
        let src = [1.5f32, -0.25, f32::MIN_POSITIVE, 0.0];
        for fmt in [SampleFormat::F32Le, SampleFormat::F32Be] {
            let mut bytes = [0u8; 16];
            encode_interleaved(fmt, &src, &mut bytes);
            let mut back = [0.0f32; 4];
            decode_interleaved(fmt, &bytes, &mut back);
            assert_eq!(back, src);
        }
    }

    #[test]
    #[should_panic]
    fn length_mismatch_panics() {
        let mut dst = [0.0f32; 3];
        decode_interleaved(SampleFormat::S16Le, &[0; 5], &mut dst);
    }

    #[test]
    fn interleave_round_trip() {
        let frames = 37;
        for channels in [1usize, 2, 3, 6] {
            let src: Vec<f32> = (0..channels * frames).map(|i| i as f32).collect();
            let mut planar = PlanarBuf::new(channels, 64);
            deinterleave(&src, &mut planar.view_mut(frames));
            for ch in 0..channels {
                for f in 0..frames {
                    assert_eq!(planar.channel(ch)[f], (f * channels + ch) as f32);
                }
            }
            let mut back = vec![0.0; channels * frames];
            interleave(planar.view(frames), &mut back);
            assert_eq!(back, src);
        }
    }

    #[test]
    fn planar_codecs_match_interleaved() {
        let mut rng = Rng(5);
        let channels = 3;
        let frames = 50;
        for fmt in SampleFormat::ALL {
            let src: Vec<f32> = (0..channels * frames)
                .map(|_| (rng.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
                .collect();
            let mut bytes = vec![0u8; src.len() * fmt.bytes_per_sample()];
            encode_interleaved(fmt, &src, &mut bytes);
            let mut planar = PlanarBuf::new(channels, frames);
            deinterleave(&src, &mut planar.view_mut(frames));
            let mut bytes2 = vec![0u8; bytes.len()];
            encode_from_planar(fmt, planar.view(frames), &mut bytes2);
            assert_eq!(bytes, bytes2, "{fmt}");

            let mut flat = vec![0.0f32; src.len()];
            decode_interleaved(fmt, &bytes, &mut flat);
            let mut planar2 = PlanarBuf::new(channels, frames);
            decode_to_planar(fmt, &bytes, &mut planar2.view_mut(frames));
            let mut flat2 = vec![0.0f32; src.len()];
            interleave(planar2.view(frames), &mut flat2);
            assert_eq!(flat, flat2, "{fmt}");
        }
    }
}

#[cfg(test)]
mod finite_tests {
    use super::*;

    #[test]
    fn float_input_never_carries_nan_or_infinity_into_the_graph() {
        let vals = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e30,
            -1e30,
            0.25,
            -1.5,
        ];
        for fmt in [SampleFormat::F32Le, SampleFormat::F32Be] {
            let mut raw = Vec::new();
            for v in vals {
                raw.extend_from_slice(&match fmt {
                    SampleFormat::F32Le => v.to_le_bytes(),
                    _ => v.to_be_bytes(),
                });
            }
            let mut out = [9.0f32; 7];
            decode_interleaved(fmt, &raw, &mut out);
            assert_eq!(out, [0.0, 0.0, 0.0, 1000.0, -1000.0, 0.25, -1.5], "{fmt}");
        }
    }
}
