//! Conversions between PulseAudio's types and quaver's: sample formats (including the
//! G.711 A-law and µ-law codecs, which quaver's DSP does not carry), channel positions,
//! volumes and byte/time arithmetic on sample specs.

use pulseaudio::protocol::{
    ChannelMap as PaMap, ChannelPosition as PaPos, ChannelVolume, Prop, Props,
    SampleFormat as PaFormat, SampleSpec, Volume,
};
use quaver_dsp::format::{SampleFormat, decode_interleaved, encode_interleaved};
use quaver_dsp::{ChannelMap, ChannelPosition};
use std::ffi::CString;

/// Highest sample rate accepted from a client (the 1 Hz – 384 kHz range).
pub const MAX_RATE: u32 = 384_000;
/// Most channels a PulseAudio stream may have.
pub const MAX_CHANNELS: u8 = 32;

/// How one PulseAudio sample format maps onto quaver's conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// A format quaver's DSP converts.
    Pcm(SampleFormat),
    /// G.711 A-law.
    Alaw,
    /// G.711 µ-law.
    Ulaw,
}

impl Codec {
    /// The codec for a PulseAudio sample format; `None` for `Invalid`.
    pub fn of(f: PaFormat) -> Option<Codec> {
        use SampleFormat as Q;
        Some(match f {
            PaFormat::Invalid => return None,
            PaFormat::U8 => Codec::Pcm(Q::U8),
            PaFormat::Alaw => Codec::Alaw,
            PaFormat::Ulaw => Codec::Ulaw,
            PaFormat::S16Le => Codec::Pcm(Q::S16Le),
            PaFormat::S16Be => Codec::Pcm(Q::S16Be),
            PaFormat::Float32Le => Codec::Pcm(Q::F32Le),
            PaFormat::Float32Be => Codec::Pcm(Q::F32Be),
            PaFormat::S32Le => Codec::Pcm(Q::S32Le),
            PaFormat::S32Be => Codec::Pcm(Q::S32Be),
            PaFormat::S24Le => Codec::Pcm(Q::S24Le),
            PaFormat::S24Be => Codec::Pcm(Q::S24Be),
            PaFormat::S24In32Le => Codec::Pcm(Q::S24_32Le),
            PaFormat::S24In32Be => Codec::Pcm(Q::S24_32Be),
        })
    }

    /// Bytes per sample.
    pub fn bytes(&self) -> usize {
        match self {
            Codec::Pcm(f) => f.bytes_per_sample(),
            Codec::Alaw | Codec::Ulaw => 1,
        }
    }

    /// Decodes `dst.len()` samples from `src` (exactly `dst.len() * bytes()` bytes).
    pub fn decode(&self, src: &[u8], dst: &mut [f32]) {
        match self {
            Codec::Pcm(f) => decode_interleaved(*f, src, dst),
            Codec::Alaw => {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = alaw_to_linear(s) as f32 / 32768.0;
                }
            }
            Codec::Ulaw => {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = ulaw_to_linear(s) as f32 / 32768.0;
                }
            }
        }
    }

    /// Encodes `src` into `dst` (exactly `src.len() * bytes()` bytes).
    pub fn encode(&self, src: &[f32], dst: &mut [u8]) {
        let s16 = |x: f32| -> i16 {
            let v = (x * 32768.0).round();
            if v.is_nan() {
                0
            } else {
                v.clamp(-32768.0, 32767.0) as i16
            }
        };
        match self {
            Codec::Pcm(f) => encode_interleaved(*f, src, dst),
            Codec::Alaw => {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = linear_to_alaw(s16(s));
                }
            }
            Codec::Ulaw => {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = linear_to_ulaw(s16(s));
                }
            }
        }
    }
}

/// G.711 A-law to 16-bit linear.
pub fn alaw_to_linear(code: u8) -> i16 {
    // Even bits are inverted on the wire; the sign bit set means positive.
    let a = code ^ 0x55;
    let segment = (a >> 4) & 0x07;
    let mut magnitude = (((a & 0x0f) as i32) << 4) | 0x08;
    if segment > 0 {
        magnitude = (magnitude | 0x100) << (segment - 1);
    }
    if a & 0x80 != 0 {
        magnitude as i16
    } else {
        -magnitude as i16
    }
}

/// 16-bit linear to G.711 A-law (13-bit magnitude, segment search).
pub fn linear_to_alaw(pcm: i16) -> u8 {
    let mut v = (pcm as i32) >> 3;
    let mask = if v >= 0 {
        0xd5
    } else {
        v = -v - 1;
        0x55
    };
    let segment = (0..8).find(|&s| v < (0x20 << s));
    let code = match segment {
        None => 0x7f,
        Some(s) => {
            let mantissa = if s < 2 {
                (v >> 1) & 0x0f
            } else {
                (v >> s) & 0x0f
            };
            ((s << 4) | mantissa) as u8
        }
    };
    code ^ mask
}

const ULAW_BIAS: i32 = 0x84;

/// G.711 µ-law to 16-bit linear.
pub fn ulaw_to_linear(code: u8) -> i16 {
    let u = !code;
    let segment = (u >> 4) & 0x07;
    let magnitude = ((((u & 0x0f) as i32) << 3) + ULAW_BIAS) << segment;
    if u & 0x80 != 0 {
        (ULAW_BIAS - magnitude) as i16
    } else {
        (magnitude - ULAW_BIAS) as i16
    }
}

/// 16-bit linear to G.711 µ-law.
pub fn linear_to_ulaw(pcm: i16) -> u8 {
    let mut v = pcm as i32;
    let sign = if v < 0 {
        v = -v;
        0x80
    } else {
        0
    };
    v = v.min(32635) + ULAW_BIAS;
    let segment = (0..8).rev().find(|&s| v & (0x80 << s) != 0).unwrap_or(0);
    let mantissa = (v >> (segment + 3)) & 0x0f;
    !((sign | (segment << 4) | mantissa) as u8)
}

/// A sample format by the names `pa_parse_sample_format` accepts (any case): `s16le`,
/// `float32be`, `s24-32le`, `aLaw`, the native-endian short forms (`s16`, `float`,
/// `32`, …), `ne`/`re` suffixes. `None` for anything else.
pub fn parse_sample_format(name: &str) -> Option<PaFormat> {
    use PaFormat as F;
    let n = name.to_ascii_lowercase();
    // This server runs little-endian: `ne` is `le`, `re` is `be`.
    let n = n
        .strip_suffix("ne")
        .map(|b| format!("{b}le"))
        .or_else(|| n.strip_suffix("re").map(|b| format!("{b}be")))
        .unwrap_or(n);
    Some(match n.as_str() {
        "u8" | "8" => F::U8,
        "alaw" => F::Alaw,
        "ulaw" | "mulaw" => F::Ulaw,
        "s16le" | "s16" | "16" => F::S16Le,
        "s16be" => F::S16Be,
        "float32le" | "float32" | "float" => F::Float32Le,
        "float32be" => F::Float32Be,
        "s32le" | "s32" | "32" => F::S32Le,
        "s32be" => F::S32Be,
        "s24le" | "s24" | "24" => F::S24Le,
        "s24be" => F::S24Be,
        "s24-32le" | "s24-32" => F::S24In32Le,
        "s24-32be" => F::S24In32Be,
        _ => return None,
    })
}
/// Bytes in one frame of `spec`.
pub fn frame_size(spec: &SampleSpec) -> usize {
    Codec::of(spec.format).map_or(0, |c| c.bytes()) * spec.channels as usize
}

/// Duration of `bytes` of `spec`, in microseconds (rounded down).
pub fn bytes_to_usec(bytes: u64, spec: &SampleSpec) -> u64 {
    let fs = frame_size(spec) as u64;
    if fs == 0 || spec.sample_rate == 0 {
        return 0;
    }
    ((bytes / fs) as u128 * 1_000_000 / spec.sample_rate as u128) as u64
}

/// Whole frames in `usec` microseconds of `spec`, in bytes (rounded down).
pub fn usec_to_bytes(usec: u64, spec: &SampleSpec) -> u64 {
    (usec as u128 * spec.sample_rate as u128 / 1_000_000) as u64 * frame_size(spec) as u64
}

/// Like [`usec_to_bytes`] but rounded up to whole frames.
pub fn usec_to_bytes_round_up(usec: u64, spec: &SampleSpec) -> u64 {
    (usec as u128 * spec.sample_rate as u128).div_ceil(1_000_000) as u64 * frame_size(spec) as u64
}

/// Frames to microseconds at `rate`.
pub fn frames_to_usec(frames: u64, rate: u32) -> u64 {
    if rate == 0 {
        return 0;
    }
    (frames as u128 * 1_000_000 / rate as u128) as u64
}

/// Checks a client's sample spec; the error names what is wrong.
pub fn check_spec(spec: &SampleSpec) -> Result<Codec, String> {
    let codec = Codec::of(spec.format).ok_or("invalid sample format")?;
    if spec.channels == 0 || spec.channels > MAX_CHANNELS {
        return Err(format!(
            "{} channels is outside 1..={MAX_CHANNELS}",
            spec.channels
        ));
    }
    if spec.sample_rate == 0 || spec.sample_rate > MAX_RATE {
        return Err(format!(
            "rate {} Hz is outside 1..={MAX_RATE}",
            spec.sample_rate
        ));
    }
    Ok(codec)
}

/// A PulseAudio channel position as quaver's; positions quaver has no name for become
/// auxiliary channels numbered above PulseAudio's own AUX0–31 so they stay distinct.
pub fn position_from_pa(p: PaPos) -> ChannelPosition {
    use ChannelPosition as Q;
    match p {
        PaPos::Mono => Q::Mono,
        PaPos::FrontLeft => Q::FL,
        PaPos::FrontRight => Q::FR,
        PaPos::FrontCenter => Q::FC,
        PaPos::Lfe => Q::LFE,
        PaPos::RearLeft => Q::RL,
        PaPos::RearRight => Q::RR,
        PaPos::SideLeft => Q::SL,
        PaPos::SideRight => Q::SR,
        PaPos::RearCenter => Q::RC,
        other => {
            let raw = other as u16;
            if (PaPos::Aux0 as u16..=PaPos::Aux31 as u16).contains(&raw) {
                Q::Aux(raw - PaPos::Aux0 as u16)
            } else {
                Q::Aux(100 + raw)
            }
        }
    }
}

/// Quaver's channel position as PulseAudio's (inverse of [`position_from_pa`]).
pub fn position_to_pa(p: ChannelPosition) -> PaPos {
    use ChannelPosition as Q;
    match p {
        Q::Mono => PaPos::Mono,
        Q::FL => PaPos::FrontLeft,
        Q::FR => PaPos::FrontRight,
        Q::FC => PaPos::FrontCenter,
        Q::LFE => PaPos::Lfe,
        Q::RL => PaPos::RearLeft,
        Q::RR => PaPos::RearRight,
        Q::SL => PaPos::SideLeft,
        Q::SR => PaPos::SideRight,
        Q::RC => PaPos::RearCenter,
        Q::Aux(n) if n < 32 => num_from_u8(PaPos::Aux0 as u8 + n as u8),
        Q::Aux(n) if (100..=100 + PaPos::TopRearCenter as u16).contains(&n) => {
            num_from_u8((n - 100) as u8)
        }
        Q::Aux(_) => PaPos::Aux31,
    }
}

/// PulseAudio position number `v` (0–50; beyond: AUX31).
pub(crate) fn num_from_u8(v: u8) -> PaPos {
    // The crate's enum derives FromPrimitive through `enum_primitive_derive`; map by
    // walking the contiguous range instead of depending on num-traits ourselves.
    const ALL: [PaPos; 51] = {
        use PaPos::*;
        [
            Mono,
            FrontLeft,
            FrontRight,
            FrontCenter,
            RearCenter,
            RearLeft,
            RearRight,
            Lfe,
            FrontLeftOfCenter,
            FrontRightOfCenter,
            SideLeft,
            SideRight,
            Aux0,
            Aux1,
            Aux2,
            Aux3,
            Aux4,
            Aux5,
            Aux6,
            Aux7,
            Aux8,
            Aux9,
            Aux10,
            Aux11,
            Aux12,
            Aux13,
            Aux14,
            Aux15,
            Aux16,
            Aux17,
            Aux18,
            Aux19,
            Aux20,
            Aux21,
            Aux22,
            Aux23,
            Aux24,
            Aux25,
            Aux26,
            Aux27,
            Aux28,
            Aux29,
            Aux30,
            Aux31,
            TopCenter,
            TopFrontLeft,
            TopFrontRight,
            TopFrontCenter,
            TopRearLeft,
            TopRearRight,
            TopRearCenter,
        ]
    };
    ALL.get(v as usize).copied().unwrap_or(PaPos::Aux31)
}

/// A PulseAudio channel map as quaver's.
pub fn map_from_pa(m: &PaMap) -> ChannelMap {
    ChannelMap(m.into_iter().map(position_from_pa).collect())
}

/// Quaver's channel map as PulseAudio's (at most 32 channels).
pub fn map_to_pa(m: &ChannelMap) -> PaMap {
    PaMap::new(
        m.positions()
            .iter()
            .take(MAX_CHANNELS as usize)
            .map(|&p| position_to_pa(p)),
    )
}

/// PulseAudio's software volume (cubic) as a linear gain, capped at the engine's 10.
pub fn volume_to_linear(v: Volume) -> f32 {
    let f = v.as_u32() as f64 / Volume::NORM.as_u32() as f64;
    (f * f * f).min(10.0) as f32
}

/// A linear gain as PulseAudio's volume, rounded to the nearest step.
pub fn linear_to_volume(l: f32) -> Volume {
    let raw = (l.max(0.0) as f64).cbrt() * Volume::NORM.as_u32() as f64;
    Volume::from_u32_clamped(raw.round() as u32)
}

/// The gain a whole-node volume takes from a per-channel volume: its loudest channel
/// (PulseAudio's `pa_cvolume_max`), so balance changes never make a stream louder.
pub fn cvolume_to_linear(v: &ChannelVolume) -> f32 {
    v.channels()
        .iter()
        .map(|&c| volume_to_linear(c))
        .fold(0.0, f32::max)
}

/// A uniform per-channel volume.
pub fn uniform_cvolume(channels: usize, l: f32) -> ChannelVolume {
    let mut v = ChannelVolume::empty();
    for _ in 0..channels.clamp(1, MAX_CHANNELS as usize) {
        v.push(linear_to_volume(l));
    }
    v
}

/// A C string from text, dropping interior NULs.
pub fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NULs removed")
}

/// A proplist value as text, if it is a NUL-terminated string.
pub fn prop_str(props: &Props, key: Prop) -> Option<String> {
    let v = props.get(key)?;
    let v = v.strip_suffix(&[0]).unwrap_or(v);
    std::str::from_utf8(v).ok().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g711_codes_round_trip_and_hit_known_values() {
        for code in 0..=255u8 {
            let a = alaw_to_linear(code);
            assert_eq!(alaw_to_linear(linear_to_alaw(a)), a, "alaw {code:#x}");
            let u = ulaw_to_linear(code);
            assert_eq!(ulaw_to_linear(linear_to_ulaw(u)), u, "ulaw {code:#x}");
        }
        assert_eq!(alaw_to_linear(0xd5), 8);
        assert_eq!(alaw_to_linear(0xaa), 32256);
        assert_eq!(alaw_to_linear(0x2a), -32256);
        assert_eq!(ulaw_to_linear(0xff), 0);
        assert_eq!(ulaw_to_linear(0x80), 32124);
        assert_eq!(ulaw_to_linear(0x00), -32124);
        assert_eq!(linear_to_ulaw(0), 0xff);
        assert_eq!(linear_to_alaw(0), 0xd5);
    }

    #[test]
    fn every_position_round_trips() {
        for raw in 0..=50u8 {
            let p = num_from_u8(raw);
            assert_eq!(p as u8, raw);
            assert_eq!(position_to_pa(position_from_pa(p)), p);
        }
    }

    #[test]
    fn volume_mapping_is_cubic_and_round_trips() {
        assert_eq!(volume_to_linear(Volume::NORM), 1.0);
        let half = Volume::from_u32_clamped(0x8000);
        assert!((volume_to_linear(half) - 0.125).abs() < 1e-6);
        for raw in [0u32, 1, 655, 0x8000, 0x10000, 0x18000] {
            let v = Volume::from_u32_clamped(raw);
            assert_eq!(linear_to_volume(volume_to_linear(v)).as_u32(), raw);
        }
    }

    #[test]
    fn byte_time_arithmetic() {
        let spec = SampleSpec {
            format: PaFormat::S16Le,
            channels: 2,
            sample_rate: 48000,
        };
        assert_eq!(frame_size(&spec), 4);
        assert_eq!(usec_to_bytes(20_000, &spec), 3840);
        assert_eq!(bytes_to_usec(3840, &spec), 20_000);
        assert_eq!(usec_to_bytes_round_up(1, &spec), 4);
        let ulaw = SampleSpec {
            format: PaFormat::Ulaw,
            channels: 1,
            sample_rate: 8000,
        };
        let mut out = [0u8; 3];
        Codec::of(ulaw.format)
            .unwrap()
            .encode(&[0.0, 1.0, -1.0], &mut out);
        let mut back = [0f32; 3];
        Codec::Ulaw.decode(&out, &mut back);
        assert_eq!(back[0], 0.0);
        assert!(back[1] > 0.97 && back[2] < -0.97);
    }
}
