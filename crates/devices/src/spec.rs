//! Device specs: the `--device` strings that name and configure a device.
//!
//! ```text
//! spec    = "null" [":" options]
//!         | "file:" PATH ["," options]
//!         | "sim"  [":" options]
//!         | "alsa:" [PCM] ["," options]
//! options = option *("," option)
//! option  = key "=" value | key          (a bare key is a boolean flag set to on)
//! ```
//!
//! * `null`: `rate`, `channels`, `playback=on|off` (default on), `capture=on|off`
//!   (default on: the embedded default is a null sink, its monitor and a null source),
//!   `name`.
//! * `file`: `format=s16|s24|s32|f32` (default s16), `freewheel[=on|off]` (default off),
//!   `rate`, `channels`, `name`. PATH is everything up to the first comma, so it cannot
//!   contain one.
//! * `sim`: `rate`, `channels`, `buffer` (frames, default 8192), `period` (frames, the
//!   watermark, default 256), `margin_max` (frames: makes the watermark adaptive between
//!   `period` and this), `drift_ppm` (default 0), `drift_step=SECONDS:PPM` (the drift
//!   becomes PPM that long after the card starts), `loopback=on|off` (default on),
//!   `name`, and faults, each repeatable: `xrun=CYCLE`, `stall=CYCLE:MILLISECONDS`,
//!   `unplug=CYCLE`.
//!
//! * `alsa`: PCM is an ALSA PCM name (`default` if empty): `hw:0`, `plughw:1,0`, `null`,
//!   `file:FILE=/tmp/x.raw,FORMAT=raw`, … It may be quoted with `'…'` or `"…"` (no
//!   escapes inside: use the other quote character for quotes within); unquoted, it runs
//!   up to the first item that is one of the options below, so `alsa:hw:0,0,rate=44100`
//!   means PCM `hw:0,0`. `pcm=NAME` (quoted or not) is the same as the leading PCM.
//!   Options: `rate`, `channels`, `format=f32|s32|s24|s24_3|s16` (default: that order),
//!   `buffer` and `period` (frames, nearest), `mmap=on|off` (default on), `playback=on|off`
//!   (default on), `capture=on|off` (default off), `margin` and `margin_max` (frames:
//!   the adaptive safety margin's bounds), `pace=auto|device|clock`, `name`.
//!
//! * `rtp-send:dest=ADDR:PORT,…` and `rtp-recv:listen=ADDR:PORT,…`: RTP network devices
//!   (options in `spec/rtp.rs`, docs/net.md).
//!
//! `rate` is in Hz; `channels` is a count (`2`), a layout name (`mono`, `stereo`, `2.1`,
//! `4.0`, `5.1`, `7.1`) or positions joined by `+` (`FL+FR+LFE`). Both default to the
//! [`DeviceDefaults`]. Booleans accept on/off, true/false, yes/no, 1/0. Keys may not
//! repeat (except faults).

use crate::alsa::{AlsaConfig, AlsaDevice, Pacing};
use crate::file::{FileConfig, FileSink, WavFormat};
use crate::null::{NullConfig, NullDevice};
use crate::rtp::{RtpRecv, RtpRecvConfig, RtpSend, RtpSendConfig};
use crate::sim::{DriftStep, Fault, SimCard, SimConfig};
use crate::{Device, DeviceError, MAX_CHANNELS, MAX_RATE};
use quaver_dsp::ChannelMap;
use std::path::PathBuf;
use std::time::Duration;

mod rtp;

/// Rate and channels a spec gets unless it sets its own (from the daemon's configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDefaults {
    /// Sample rate in Hz.
    pub rate: u32,
    /// Channel layout.
    pub channels: ChannelMap,
}

impl Default for DeviceDefaults {
    fn default() -> Self {
        DeviceDefaults {
            rate: 48_000,
            channels: ChannelMap::stereo(),
        }
    }
}

/// A parsed device spec, not yet opened (lets callers validate `--device` early).
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceSpec {
    /// A null device.
    Null(NullConfig),
    /// A WAV file sink and its device name.
    File {
        /// File sink settings.
        config: FileConfig,
        /// Device name.
        name: String,
    },
    /// A simulated card and its device name.
    Sim {
        /// Simulated card settings.
        config: SimConfig,
        /// Device name.
        name: String,
    },
    /// An ALSA PCM (its name is in the config).
    Alsa(AlsaConfig),
    /// A sink sending an RTP stream.
    RtpSend(RtpSendConfig),
    /// A source playing a received RTP stream.
    RtpRecv(RtpRecvConfig),
}

impl DeviceSpec {
    /// Opens the device (creates the file for `file:`). *control*.
    pub fn open(self) -> Result<Box<dyn Device>, DeviceError> {
        Ok(match self {
            DeviceSpec::Null(cfg) => Box::new(NullDevice::new(cfg)?),
            DeviceSpec::File { config, name } => {
                Box::new(FileSink::create(config)?.with_name(name))
            }
            DeviceSpec::Sim { config, name } => Box::new(SimCard::new(config)?.with_name(name)),
            DeviceSpec::Alsa(config) => Box::new(AlsaDevice::open(config)?),
            DeviceSpec::RtpSend(config) => Box::new(RtpSend::open(config)?),
            DeviceSpec::RtpRecv(config) => Box::new(RtpRecv::open(config)?),
        })
    }
}

/// Parses and opens a device spec such as `null`, `file:out.wav,format=f32,freewheel` or
/// `sim:period=128,drift_ppm=50`. *control*.
pub fn open_device(spec: &str, defaults: &DeviceDefaults) -> Result<Box<dyn Device>, DeviceError> {
    parse_spec(spec, defaults)?.open().map_err(|e| match e {
        // Constructors only know their own config; name the whole spec in the error.
        DeviceError::BadSpec { reason, .. } => DeviceError::BadSpec {
            spec: spec.to_string(),
            reason,
        },
        other => other,
    })
}

/// Parses a device spec without opening anything. *control*.
pub fn parse_spec(spec: &str, defaults: &DeviceDefaults) -> Result<DeviceSpec, DeviceError> {
    let p = Parser { spec };
    let trimmed = spec.trim();
    let (kind, rest) = match trimmed.split_once(':') {
        Some((k, r)) => (k.trim(), r),
        None => (trimmed, ""),
    };
    match kind {
        "null" => p.null(rest, defaults),
        "file" => p.file(rest, defaults),
        "sim" => p.sim(rest, defaults),
        "alsa" => p.alsa(rest, defaults),
        "rtp-send" => p.rtp_send(rest, defaults),
        "rtp-recv" => p.rtp_recv(rest, defaults),
        "" => Err(p.bad(
            "empty device kind (expected null, file, sim, alsa, rtp-send or rtp-recv)".into(),
        )),
        other => Err(p.bad(format!(
            "unknown device kind '{other}' (expected null, file, sim, alsa, rtp-send or rtp-recv)"
        ))),
    }
}

struct Parser<'a> {
    spec: &'a str,
}

/// One `key[=value]` option.
type Opt<'s> = (&'s str, Option<&'s str>);

impl Parser<'_> {
    fn bad(&self, reason: String) -> DeviceError {
        DeviceError::BadSpec {
            spec: self.spec.to_string(),
            reason,
        }
    }

    /// Splits `a=1,b,c=x` into options, rejecting repeated keys other than `repeatable`.
    fn options<'s>(&self, s: &'s str, repeatable: &[&str]) -> Result<Vec<Opt<'s>>, DeviceError> {
        let mut out: Vec<Opt<'s>> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item, None),
            };
            if key.is_empty() {
                return Err(self.bad(format!("option '{item}' has no key")));
            }
            if !repeatable.contains(&key) && out.iter().any(|(k, _)| *k == key) {
                return Err(self.bad(format!("option '{key}' given twice")));
            }
            out.push((key, value));
        }
        Ok(out)
    }

    fn value<'s>(&self, key: &str, value: Option<&'s str>) -> Result<&'s str, DeviceError> {
        match value {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(self.bad(format!("option '{key}' needs a value ({key}=...)"))),
        }
    }

    fn flag(&self, key: &str, value: Option<&str>) -> Result<bool, DeviceError> {
        let Some(v) = value else { return Ok(true) };
        match v.to_ascii_lowercase().as_str() {
            "on" | "true" | "yes" | "1" => Ok(true),
            "off" | "false" | "no" | "0" => Ok(false),
            _ => Err(self.bad(format!("bad value '{v}' for {key} (expected on or off)"))),
        }
    }

    fn number<T: std::str::FromStr>(
        &self,
        key: &str,
        value: Option<&str>,
    ) -> Result<T, DeviceError> {
        let v = self.value(key, value)?;
        v.parse()
            .map_err(|_| self.bad(format!("bad value '{v}' for {key} (expected a number)")))
    }

    fn rate(&self, value: Option<&str>) -> Result<u32, DeviceError> {
        let rate: u32 = self.number("rate", value)?;
        if rate == 0 || rate > MAX_RATE {
            return Err(self.bad(format!("rate {rate} is outside 1..={MAX_RATE}")));
        }
        Ok(rate)
    }

    fn channels(&self, value: Option<&str>) -> Result<ChannelMap, DeviceError> {
        let v = self.value("channels", value)?;
        let map = if v.bytes().all(|b| b.is_ascii_digit()) {
            let n: usize = v.parse().unwrap_or(0);
            if n == 0 || n > MAX_CHANNELS {
                return Err(self.bad(format!("channel count {v} is outside 1..={MAX_CHANNELS}")));
            }
            ChannelMap::default_for(n)
        } else {
            v.replace('+', ",")
                .parse::<ChannelMap>()
                .map_err(|e| self.bad(format!("bad value '{v}' for channels: {e}")))?
        };
        if map.is_empty() || map.len() > MAX_CHANNELS {
            return Err(self.bad(format!("bad value '{v}' for channels")));
        }
        Ok(map)
    }

    fn name(&self, value: Option<&str>) -> Result<String, DeviceError> {
        Ok(self.value("name", value)?.to_string())
    }

    fn unknown(&self, kind: &str, key: &str, known: &str) -> DeviceError {
        self.bad(format!(
            "unknown option '{key}' for {kind} (expected {known})"
        ))
    }

    fn null(&self, rest: &str, d: &DeviceDefaults) -> Result<DeviceSpec, DeviceError> {
        let mut cfg = NullConfig {
            rate: d.rate,
            channels: d.channels.clone(),
            playback: true,
            capture: true,
            name: "null".into(),
        };
        for (key, value) in self.options(rest, &[])? {
            match key {
                "rate" => cfg.rate = self.rate(value)?,
                "channels" => cfg.channels = self.channels(value)?,
                "playback" => cfg.playback = self.flag(key, value)?,
                "capture" => cfg.capture = self.flag(key, value)?,
                "name" => cfg.name = self.name(value)?,
                _ => {
                    return Err(self.unknown(
                        "null",
                        key,
                        "rate, channels, playback, capture, name",
                    ));
                }
            }
        }
        if !cfg.playback && !cfg.capture {
            return Err(self.bad("playback=off and capture=off leave nothing to open".into()));
        }
        Ok(DeviceSpec::Null(cfg))
    }

    fn file(&self, rest: &str, d: &DeviceDefaults) -> Result<DeviceSpec, DeviceError> {
        let (path, opts) = rest.split_once(',').unwrap_or((rest, ""));
        let path = path.trim();
        if path.is_empty() {
            return Err(self.bad("missing file path (file:PATH)".into()));
        }
        let mut config = FileConfig {
            path: PathBuf::from(path),
            rate: d.rate,
            channels: d.channels.clone(),
            format: WavFormat::S16,
            freewheel: false,
        };
        let mut name = "file".to_string();
        for (key, value) in self.options(opts, &[])? {
            match key {
                "format" => {
                    let v = self.value(key, value)?;
                    config.format = v.parse().map_err(|e| self.bad(format!("{e}")))?;
                }
                "freewheel" => config.freewheel = self.flag(key, value)?,
                "rate" => config.rate = self.rate(value)?,
                "channels" => config.channels = self.channels(value)?,
                "name" => name = self.name(value)?,
                _ => {
                    return Err(self.unknown(
                        "file",
                        key,
                        "format, freewheel, rate, channels, name",
                    ));
                }
            }
        }
        Ok(DeviceSpec::File { config, name })
    }

    /// `SECONDS:PPM`: the sim card's drift becomes PPM that long after it starts.
    fn drift_step(&self, key: &str, value: Option<&str>) -> Result<DriftStep, DeviceError> {
        let v = self.value(key, value)?;
        let max = crate::sim::MAX_DRIFT_PPM;
        let parsed = v.split_once(':').and_then(|(secs, ppm)| {
            let secs: f64 = secs.trim().parse().ok()?;
            let ppm: f64 = ppm.trim().parse().ok()?;
            (ppm.is_finite() && ppm.abs() <= max).then_some(())?;
            let after = Duration::try_from_secs_f64(secs).ok()?;
            Some(DriftStep { after, ppm })
        });
        parsed.ok_or_else(|| {
            self.bad(format!(
                "bad value '{v}' for drift_step (expected SECONDS:PPM, |PPM| ≤ {max})"
            ))
        })
    }

    fn sim(&self, rest: &str, d: &DeviceDefaults) -> Result<DeviceSpec, DeviceError> {
        let mut config = SimConfig {
            rate: d.rate,
            channels: d.channels.clone(),
            ..SimConfig::default()
        };
        let mut name = "sim".to_string();
        for (key, value) in self.options(rest, &["xrun", "stall", "unplug"])? {
            match key {
                "rate" => config.rate = self.rate(value)?,
                "channels" => config.channels = self.channels(value)?,
                "buffer" => config.buffer_frames = self.number(key, value)?,
                "period" => config.period_frames = self.number(key, value)?,
                "margin_max" => config.margin_max_frames = Some(self.number(key, value)?),
                "drift_ppm" => {
                    let ppm: f64 = self.number(key, value)?;
                    if !ppm.is_finite() || ppm.abs() > crate::sim::MAX_DRIFT_PPM {
                        return Err(self.bad(format!(
                            "drift_ppm {ppm} is outside ±{}",
                            crate::sim::MAX_DRIFT_PPM
                        )));
                    }
                    config.drift_ppm = ppm;
                }
                "drift_step" => config.drift_step = Some(self.drift_step(key, value)?),
                "loopback" => config.loopback = self.flag(key, value)?,
                "name" => name = self.name(value)?,
                "xrun" => config.faults.push(Fault::Xrun {
                    at_cycle: self.number(key, value)?,
                }),
                "unplug" => config.faults.push(Fault::Unplug {
                    at_cycle: self.number(key, value)?,
                }),
                "stall" => {
                    let v = self.value(key, value)?;
                    let parsed = v.split_once(':').and_then(|(c, ms)| {
                        let ms: f64 = ms.trim().parse().ok()?;
                        (ms.is_finite() && ms >= 0.0).then_some(())?;
                        // Not from_secs_f64: it panics past u64::MAX seconds.
                        let duration = Duration::try_from_secs_f64(ms / 1000.0).ok()?;
                        Some((c.trim().parse().ok()?, duration))
                    });
                    let Some((at_cycle, duration)) = parsed else {
                        return Err(self.bad(format!(
                            "bad value '{v}' for stall (expected CYCLE:MILLISECONDS)"
                        )));
                    };
                    config.faults.push(Fault::Stall { at_cycle, duration });
                }
                _ => {
                    return Err(self.unknown(
                        "sim",
                        key,
                        "rate, channels, buffer, period, margin_max, drift_ppm, drift_step, loopback, name, xrun, stall, unplug",
                    ));
                }
            }
        }
        if config.period_frames == 0 || config.period_frames >= config.buffer_frames {
            return Err(self.bad(format!(
                "period {} must be at least 1 and smaller than buffer {}",
                config.period_frames, config.buffer_frames
            )));
        }
        if let Some(max) = config.margin_max_frames
            && (max < config.period_frames || max >= config.buffer_frames)
        {
            return Err(self.bad(format!(
                "margin_max {max} must be at least period {} and smaller than buffer {}",
                config.period_frames, config.buffer_frames
            )));
        }
        Ok(DeviceSpec::Sim { config, name })
    }

    fn alsa(&self, rest: &str, d: &DeviceDefaults) -> Result<DeviceSpec, DeviceError> {
        const KEYS: [&str; 13] = [
            "pcm",
            "rate",
            "channels",
            "format",
            "buffer",
            "period",
            "mmap",
            "playback",
            "capture",
            "margin",
            "margin_max",
            "pace",
            "name",
        ];
        let items = split_quoted(rest).map_err(|e| self.bad(e))?;
        let key_of = |item: &str| -> Option<&'static str> {
            let key = item.split_once('=').map_or(item, |(k, _)| k).trim();
            KEYS.iter().copied().find(|k| *k == key)
        };
        // The PCM: the leading items up to the first one of our options.
        let split = items
            .iter()
            .position(|i| key_of(i).is_some())
            .unwrap_or(items.len());
        let mut pcm = None;
        if split > 0 {
            let first = &items[0];
            if split == 1 && is_quoted(first) {
                pcm = Some(unquote(first).to_string());
            } else {
                if let Some(q) = items[..split].iter().find(|i| is_quoted(i)) {
                    return Err(
                        self.bad(format!("quote the whole PCM name, not a part of it ({q})"))
                    );
                }
                pcm = Some(items[..split].join(","));
            }
        }
        let mut cfg = AlsaConfig {
            rate: d.rate,
            channels: d.channels.clone(),
            ..AlsaConfig::default()
        };
        let mut seen: Vec<&str> = Vec::new();
        for item in &items[split..] {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (item.as_str(), None),
            };
            let Some(key) = key_of(key) else {
                return Err(self.unknown(
                    "alsa",
                    key,
                    "pcm, rate, channels, format, buffer, period, mmap, playback, capture, margin, margin_max, pace, name; quote a PCM name that contains commas",
                ));
            };
            if seen.contains(&key) {
                return Err(self.bad(format!("option '{key}' given twice")));
            }
            seen.push(key);
            let value = value.map(unquote);
            match key {
                "pcm" => {
                    if pcm.is_some() {
                        return Err(self.bad(
                            "the PCM is given twice (before the options and as pcm=)".into(),
                        ));
                    }
                    pcm = Some(self.value(key, value)?.to_string());
                }
                "rate" => cfg.rate = self.rate(value)?,
                "channels" => cfg.channels = self.channels(value)?,
                "format" => {
                    let v = self.value(key, value)?;
                    cfg.format = Some(v.parse().map_err(|e: String| self.bad(e))?);
                }
                "buffer" => cfg.buffer_frames = Some(self.frames(key, value)?),
                "period" => cfg.period_frames = Some(self.frames(key, value)?),
                "mmap" => cfg.mmap = self.flag(key, value)?,
                "playback" => cfg.playback = self.flag(key, value)?,
                "capture" => cfg.capture = self.flag(key, value)?,
                "margin" => cfg.margin_frames = Some(self.frames(key, value)?),
                "margin_max" => cfg.margin_max_frames = Some(self.frames(key, value)?),
                "pace" => {
                    cfg.pacing = match self.value(key, value)? {
                        "auto" => Pacing::Auto,
                        "device" => Pacing::Device,
                        "clock" => Pacing::Clock,
                        v => {
                            return Err(self.bad(format!(
                                "bad value '{v}' for pace (expected auto, device or clock)"
                            )));
                        }
                    }
                }
                "name" => cfg.name = self.name(value)?,
                _ => unreachable!("every key in KEYS is handled"),
            }
        }
        cfg.pcm = match pcm {
            Some(p) if !p.trim().is_empty() => p.trim().to_string(),
            _ => "default".to_string(),
        };
        if !cfg.playback && !cfg.capture {
            return Err(self.bad("playback=off and capture=off leave nothing to open".into()));
        }
        if let (Some(min), Some(max)) = (cfg.margin_frames, cfg.margin_max_frames)
            && max < min
        {
            return Err(self.bad(format!("margin_max {max} is below margin {min}")));
        }
        if let (Some(b), Some(p)) = (cfg.buffer_frames, cfg.period_frames)
            && p > b
        {
            return Err(self.bad(format!("period {p} is larger than buffer {b}")));
        }
        Ok(DeviceSpec::Alsa(cfg))
    }

    fn frames(&self, key: &str, value: Option<&str>) -> Result<usize, DeviceError> {
        let n: usize = self.number(key, value)?;
        if n == 0 || n > 1 << 24 {
            return Err(self.bad(format!("{key} {n} is outside 1..={}", 1 << 24)));
        }
        Ok(n)
    }
}

/// Splits at commas outside `'…'` and `"…"` quotes; items keep their quotes and are
/// trimmed; empty items are dropped.
fn split_quoted(s: &str) -> Result<Vec<String>, String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut quote = None;
    for c in s.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (None, ',') => {
                items.push(std::mem::take(&mut cur));
            }
            _ => cur.push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("unbalanced {q} quote"));
    }
    items.push(cur);
    Ok(items
        .into_iter()
        .map(|i| i.trim().to_string())
        .filter(|i| !i.is_empty())
        .collect())
}

fn is_quoted(s: &str) -> bool {
    s.len() >= 2
        && ((s.starts_with('\'') && s.ends_with('\'')) || (s.starts_with('"') && s.ends_with('"')))
}

/// Removes one pair of quotes around the whole value.
fn unquote(s: &str) -> &str {
    if is_quoted(s) { &s[1..s.len() - 1] } else { s }
}
