//! Device specs: the `--device` strings that name and configure a device.
//!
//! ```text
//! spec    = "null" [":" options]
//!         | "file:" PATH ["," options]
//!         | "sim"  [":" options]
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
//!   watermark, default 256), `drift_ppm` (default 0), `loopback=on|off` (default on),
//!   `name`, and faults, each repeatable: `xrun=CYCLE`, `stall=CYCLE:MILLISECONDS`,
//!   `unplug=CYCLE`.
//!
//! `rate` is in Hz; `channels` is a count (`2`), a layout name (`mono`, `stereo`, `2.1`,
//! `4.0`, `5.1`, `7.1`) or positions joined by `+` (`FL+FR+LFE`). Both default to the
//! [`DeviceDefaults`]. Booleans accept on/off, true/false, yes/no, 1/0. Keys may not
//! repeat (except faults).

use crate::file::{FileConfig, FileSink, WavFormat};
use crate::null::{NullConfig, NullDevice};
use crate::sim::{Fault, SimCard, SimConfig};
use crate::{Device, DeviceError, MAX_CHANNELS, MAX_RATE};
use quaver_dsp::ChannelMap;
use std::path::PathBuf;
use std::time::Duration;

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
        "" => Err(p.bad("empty device kind (expected null, file or sim)".into())),
        other => Err(p.bad(format!(
            "unknown device kind '{other}' (expected null, file or sim)"
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
                        Some((c.trim().parse().ok()?, ms))
                    });
                    let Some((at_cycle, ms)) = parsed else {
                        return Err(self.bad(format!(
                            "bad value '{v}' for stall (expected CYCLE:MILLISECONDS)"
                        )));
                    };
                    config.faults.push(Fault::Stall {
                        at_cycle,
                        duration: Duration::from_secs_f64(ms / 1000.0),
                    });
                }
                _ => {
                    return Err(self.unknown(
                        "sim",
                        key,
                        "rate, channels, buffer, period, drift_ppm, loopback, name, xrun, stall, unplug",
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
        Ok(DeviceSpec::Sim { config, name })
    }
}
