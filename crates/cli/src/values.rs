//! Parsing and printing of the small values the command line deals in: volume
//! levels, channel layouts, WAV sample formats and durations.

use anyhow::{Result, anyhow, bail};
use quaver_dsp::volume::{db_to_linear, linear_to_db};
use quaver_dsp::{ChannelMap, SampleFormat};
use quaver_protocol::message::{MAX_CHANNELS, MAX_VOLUME};

/// Parses a volume level: linear (`0.5`), percent (`50%`) or decibels (`-6dB`, `-inf dB`).
pub fn parse_level(s: &str) -> Result<f32> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let bad = || anyhow!("invalid volume level '{s}' (use e.g. 0.5, 50% or -6dB)");
    let linear = if let Some(num) = lower.strip_suffix("db") {
        let num = num.trim();
        // "-inf dB" is the conventional spelling of silence in mixers.
        let db: f32 = match num {
            "-inf" | "-infinity" => f32::NEG_INFINITY,
            _ => num
                .parse()
                .ok()
                .filter(|d: &f32| d.is_finite())
                .ok_or_else(bad)?,
        };
        db_to_linear(db)
    } else if let Some(num) = lower.strip_suffix('%') {
        let pct: f32 = num.trim().parse().map_err(|_| bad())?;
        pct / 100.0
    } else {
        lower.parse().map_err(|_| bad())?
    };
    if !linear.is_finite() || linear < 0.0 {
        return Err(bad());
    }
    if linear > MAX_VOLUME {
        bail!(
            "volume level '{s}' is too loud (at most {MAX_VOLUME}, i.e. {:.0}% or +{:.0}dB)",
            MAX_VOLUME * 100.0,
            linear_to_db(MAX_VOLUME)
        );
    }
    Ok(linear)
}

/// Formats a linear volume for people: `100%`, `50% (-6.0 dB)`, plus ` muted`.
pub fn format_volume(linear: f32, mute: bool) -> String {
    let mut s = format!("{:.0}%", linear * 100.0);
    // Unity gain needs no dB figure; anything else is easier to judge in dB.
    if (linear - 1.0).abs() > 1e-6 {
        let db = linear_to_db(linear);
        if db.is_finite() {
            s.push_str(&format!(" ({db:+.1} dB)"));
        } else {
            s.push_str(" (-inf dB)");
        }
    }
    if mute {
        s.push_str(" muted");
    }
    s
}

/// Parses a channel count (`2`) or a layout (`stereo`, `5.1`, `FL,FR,LFE`).
pub fn parse_channels(s: &str) -> Result<ChannelMap> {
    let t = s.trim();
    if let Ok(n) = t.parse::<usize>() {
        if !(1..=MAX_CHANNELS).contains(&n) {
            bail!("channel count {n} out of range 1..={MAX_CHANNELS}");
        }
        return Ok(ChannelMap::default_for(n));
    }
    let map: ChannelMap = t.parse().map_err(|_| {
        anyhow!(
            "unknown channel layout '{s}' (use a count, mono, stereo, 2.1, 4.0, 5.1, 7.1 \
             or positions like FL,FR)"
        )
    })?;
    if map.len() > MAX_CHANNELS {
        bail!("{} channels is more than {MAX_CHANNELS}", map.len());
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = map.positions().iter().find(|p| !seen.insert(**p)) {
        bail!("channel layout '{s}' names {dup} twice");
    }
    Ok(map)
}

/// Parses a raw PCM sample format name (`s16le`, `f32le`, `u8`, …).
pub fn parse_sample_format(s: &str) -> Result<SampleFormat> {
    s.parse().map_err(|_| {
        let names: Vec<&str> = SampleFormat::ALL.iter().map(|f| f.name()).collect();
        anyhow!("unknown sample format '{s}' (one of {})", names.join(", "))
    })
}

/// Sample format of a recorded WAV file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WavFormat {
    /// 16-bit integer.
    S16,
    /// 24-bit integer (packed in 3 bytes).
    S24,
    /// 32-bit integer.
    S32,
    /// 32-bit IEEE float.
    F32,
}

impl WavFormat {
    /// Parses `s16`, `s24`, `s32` or `f32` (little-endian spellings accepted too).
    pub fn parse(s: &str) -> Result<WavFormat> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "s16" | "s16le" => WavFormat::S16,
            "s24" | "s24le" => WavFormat::S24,
            "s32" | "s32le" => WavFormat::S32,
            "f32" | "f32le" | "float" => WavFormat::F32,
            _ => bail!("unknown WAV sample format '{s}' (one of s16, s24, s32, f32)"),
        })
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            WavFormat::S16 => "s16",
            WavFormat::S24 => "s24",
            WavFormat::S32 => "s32",
            WavFormat::F32 => "f32",
        }
    }

    /// The hound spec for this format.
    pub fn spec(self, channels: u16, rate: u32) -> hound::WavSpec {
        let (bits, sample_format) = match self {
            WavFormat::S16 => (16, hound::SampleFormat::Int),
            WavFormat::S24 => (24, hound::SampleFormat::Int),
            WavFormat::S32 => (32, hound::SampleFormat::Int),
            WavFormat::F32 => (32, hound::SampleFormat::Float),
        };
        hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: bits,
            sample_format,
        }
    }
}

/// Formats seconds as `m:ss` (or `h:mm:ss` from an hour on).
pub fn format_time(secs: f64) -> String {
    let total = if secs.is_finite() && secs > 0.0 {
        secs.floor() as u64
    } else {
        0
    };
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The message of an I/O error without Rust's " (os error N)" suffix, which
/// means nothing to a user.
pub fn io_message(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_dsp::ChannelPosition;

    #[test]
    fn levels() {
        assert_eq!(parse_level("0.5").unwrap(), 0.5);
        assert_eq!(parse_level("1").unwrap(), 1.0);
        assert_eq!(parse_level("50%").unwrap(), 0.5);
        assert_eq!(parse_level(" 150 % ").unwrap(), 1.5);
        assert_eq!(parse_level("0dB").unwrap(), 1.0);
        assert!((parse_level("-6dB").unwrap() - 0.501_187).abs() < 1e-5);
        assert!((parse_level("-6 dB").unwrap() - 0.501_187).abs() < 1e-5);
        assert!((parse_level("+6DB").unwrap() - 1.995_262).abs() < 1e-5);
        assert_eq!(parse_level("-inf dB").unwrap(), 0.0);
        assert_eq!(parse_level("0").unwrap(), 0.0);
        assert_eq!(parse_level("1000%").unwrap(), 10.0);
        assert_eq!(parse_level("20dB").unwrap(), db_to_linear(20.0));
    }

    #[test]
    fn bad_levels() {
        for s in [
            "", "loud", "-0.5", "-10%", "dB", "5x", "nan", "inf", "infdB", "1e40",
        ] {
            let e = parse_level(s).unwrap_err().to_string();
            assert!(e.contains("invalid volume level"), "{s}: {e}");
        }
        let e = parse_level("11").unwrap_err().to_string();
        assert!(e.contains("too loud"), "{e}");
        assert!(parse_level("+21dB").is_err());
    }

    #[test]
    fn volume_display() {
        assert_eq!(format_volume(1.0, false), "100%");
        assert_eq!(format_volume(0.5, false), "50% (-6.0 dB)");
        assert_eq!(format_volume(1.0, true), "100% muted");
        assert_eq!(format_volume(0.0, false), "0% (-inf dB)");
    }

    #[test]
    fn channels() {
        assert_eq!(parse_channels("1").unwrap(), ChannelMap::mono());
        assert_eq!(parse_channels("2").unwrap(), ChannelMap::stereo());
        assert_eq!(parse_channels("stereo").unwrap(), ChannelMap::stereo());
        assert_eq!(parse_channels("6").unwrap(), ChannelMap::default_for(6));
        assert_eq!(parse_channels("5.1").unwrap(), ChannelMap::default_for(6));
        assert_eq!(
            parse_channels("FL,FR,LFE").unwrap(),
            ChannelMap(vec![
                ChannelPosition::FL,
                ChannelPosition::FR,
                ChannelPosition::LFE
            ])
        );
        assert!(parse_channels("0").is_err());
        assert!(parse_channels("65").is_err());
        assert!(
            parse_channels("FL,FL")
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        assert!(
            parse_channels("surround")
                .unwrap_err()
                .to_string()
                .contains("unknown channel layout")
        );
    }

    #[test]
    fn sample_formats() {
        assert_eq!(parse_sample_format("s16le").unwrap(), SampleFormat::S16Le);
        assert_eq!(parse_sample_format("F32LE").unwrap(), SampleFormat::F32Le);
        let e = parse_sample_format("s17").unwrap_err().to_string();
        assert!(
            e.contains("unknown sample format 's17'") && e.contains("s16le"),
            "{e}"
        );
        assert_eq!(WavFormat::parse("s16").unwrap(), WavFormat::S16);
        assert_eq!(WavFormat::parse("S24").unwrap(), WavFormat::S24);
        assert_eq!(WavFormat::parse("s32").unwrap(), WavFormat::S32);
        assert_eq!(WavFormat::parse("f32").unwrap(), WavFormat::F32);
        assert!(WavFormat::parse("u8").is_err());
        let spec = WavFormat::F32.spec(2, 44100);
        assert_eq!(spec.bits_per_sample, 32);
        assert_eq!(spec.sample_format, hound::SampleFormat::Float);
    }

    #[test]
    fn times() {
        assert_eq!(format_time(0.0), "0:00");
        assert_eq!(format_time(59.9), "0:59");
        assert_eq!(format_time(61.0), "1:01");
        assert_eq!(format_time(3725.0), "1:02:05");
        assert_eq!(format_time(f64::NAN), "0:00");
    }

    #[test]
    fn io_messages_lose_the_os_error_suffix() {
        let e = std::io::Error::from_raw_os_error(2);
        assert_eq!(io_message(&e), "No such file or directory");
        let e = std::io::Error::other("plain");
        assert_eq!(io_message(&e), "plain");
    }
}
