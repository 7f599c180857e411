//! Fuzzes device spec parsing (`--device`, `engine.devices`): `parse_spec` on arbitrary
//! text must not panic, every spec it accepts must hold the ranges the devices rely
//! on, and (where every field can be written back) the accepted spec written out with
//! every option explicit must parse to the same spec.
//!
//! The first input byte picks the defaults (rate and channels a spec inherits), so that
//! defaults the spec does not override are covered too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quaver_devices::alsa::Pacing;
use quaver_devices::sim::Fault;
use quaver_devices::spec::{DeviceDefaults, DeviceSpec, parse_spec};
use quaver_devices::{DeviceError, MAX_CHANNELS, MAX_RATE};
use quaver_dsp::ChannelMap;
use std::fmt::Write;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let defaults = DeviceDefaults {
        rate: [48_000, 44_100, 8_000, 384_000][pick as usize % 4],
        channels: ChannelMap::default_for([2, 1, 6, 64][(pick as usize >> 2) % 4]),
    };
    let spec = match parse_spec(text, &defaults) {
        Ok(spec) => spec,
        Err(DeviceError::BadSpec { spec, reason }) => {
            assert_eq!(spec, text, "the error names the whole spec");
            assert!(!reason.is_empty());
            return;
        }
        Err(other) => panic!("parsing gave a non-spec error: {other}"),
    };
    check_ranges(&spec);
    if let Some(canonical) = render(&spec) {
        // Same defaults: an RTP device's own rate (`device_rate`) has no option and
        // always comes from them.
        let again = parse_spec(&canonical, &defaults)
            .unwrap_or_else(|e| panic!("{canonical:?} (from {text:?}) does not parse: {e}"));
        assert_eq!(again, spec, "{text:?} written as {canonical:?}");
    }
});

fn check_channels(channels: &ChannelMap) {
    assert!((1..=MAX_CHANNELS).contains(&channels.len()), "{channels:?}");
}

fn check_rate(rate: u32) {
    assert!((1..=MAX_RATE).contains(&rate), "rate {rate}");
}

/// The promises a parsed spec makes to the device constructors.
fn check_ranges(spec: &DeviceSpec) {
    match spec {
        DeviceSpec::Null(c) => {
            check_rate(c.rate);
            check_channels(&c.channels);
            assert!(c.playback || c.capture);
        }
        DeviceSpec::File { config, name } => {
            check_rate(config.rate);
            check_channels(&config.channels);
            assert!(!config.path.as_os_str().is_empty());
            assert!(!name.is_empty());
        }
        DeviceSpec::Sim { config, name } => {
            check_rate(config.rate);
            check_channels(&config.channels);
            assert!(config.period_frames >= 1 && config.period_frames < config.buffer_frames);
            if let Some(max) = config.margin_max_frames {
                assert!(max >= config.period_frames && max < config.buffer_frames);
            }
            assert!(config.drift_ppm.is_finite());
            assert!(config.drift_ppm.abs() <= quaver_devices::sim::MAX_DRIFT_PPM);
            assert!(!name.is_empty());
        }
        DeviceSpec::Alsa(c) => {
            check_rate(c.rate);
            check_channels(&c.channels);
            assert!(c.playback || c.capture);
            assert!(!c.pcm.is_empty());
            for f in [
                c.buffer_frames,
                c.period_frames,
                c.margin_frames,
                c.margin_max_frames,
            ] {
                assert!(f.is_none_or(|f| (1..=1 << 24).contains(&f)));
            }
            if let (Some(b), Some(p)) = (c.buffer_frames, c.period_frames) {
                assert!(p <= b);
            }
            if let (Some(min), Some(max)) = (c.margin_frames, c.margin_max_frames) {
                assert!(min <= max);
            }
        }
        DeviceSpec::RtpSend(c) => {
            check_rate(c.rate);
            check_channels(&c.channels);
            assert!(c.dest.port() != 0 && c.payload_type <= 127 && c.ttl <= 255);
            assert!((1..=1_000_000).contains(&c.ptime_us));
            assert!(!c.name.is_empty());
        }
        DeviceSpec::RtpRecv(c) => {
            check_rate(c.rate);
            check_channels(&c.channels);
            assert!(c.payload_type <= 127 && c.latency_us <= 2_000_000);
            assert!(!c.name.is_empty());
        }
    }
}

/// A value that a spec can carry unquoted: no separators, nothing trimming would change.
fn plain(s: &str) -> Option<&str> {
    let ok = !s.is_empty()
        && s.trim() == s
        && !s.contains([',', '=', '\'', '"'])
        && !s.chars().any(char::is_whitespace);
    ok.then_some(s)
}

fn channels(map: &ChannelMap) -> String {
    let names: Vec<String> = map.positions().iter().map(|p| p.name()).collect();
    names.join("+")
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// The spec with every option written out, or `None` when a name or path cannot be
/// written back (it holds a separator) or a value has no exact text form.
fn render(spec: &DeviceSpec) -> Option<String> {
    let mut s = String::new();
    match spec {
        DeviceSpec::Null(c) => {
            write!(
                s,
                "null:rate={},channels={},playback={},capture={},name={}",
                c.rate,
                channels(&c.channels),
                on(c.playback),
                on(c.capture),
                plain(&c.name)?
            )
            .ok()?;
        }
        DeviceSpec::File { config, name } => {
            write!(
                s,
                "file:{},format={},freewheel={},rate={},channels={},name={}",
                plain(config.path.to_str()?)?,
                config.format.name(),
                on(config.freewheel),
                config.rate,
                channels(&config.channels),
                plain(name)?
            )
            .ok()?;
        }
        DeviceSpec::Sim { config, name } => {
            write!(
                s,
                "sim:rate={},channels={},buffer={},period={},drift_ppm={},loopback={},name={}",
                config.rate,
                channels(&config.channels),
                config.buffer_frames,
                config.period_frames,
                config.drift_ppm,
                on(config.loopback),
                plain(name)?
            )
            .ok()?;
            if let Some(m) = config.margin_max_frames {
                write!(s, ",margin_max={m}").ok()?;
            }
            for f in &config.faults {
                match f {
                    Fault::Xrun { at_cycle } => write!(s, ",xrun={at_cycle}").ok()?,
                    Fault::Unplug { at_cycle } => write!(s, ",unplug={at_cycle}").ok()?,
                    // Whole milliseconds only, and only those the parser's own
                    // conversion gives back exactly.
                    Fault::Stall { at_cycle, duration } => {
                        let ms = duration.as_millis() as u64;
                        if std::time::Duration::from_secs_f64(ms as f64 / 1000.0) != *duration {
                            return None;
                        }
                        write!(s, ",stall={at_cycle}:{ms}").ok()?
                    }
                }
            }
        }
        DeviceSpec::Alsa(c) => {
            let quote = if !c.pcm.contains('\'') {
                '\''
            } else if !c.pcm.contains('"') {
                '"'
            } else {
                return None;
            };
            if c.pcm.trim() != c.pcm {
                return None;
            }
            write!(
                s,
                "alsa:{quote}{}{quote},rate={},channels={},mmap={},playback={},capture={}",
                c.pcm,
                c.rate,
                channels(&c.channels),
                on(c.mmap),
                on(c.playback),
                on(c.capture),
            )
            .ok()?;
            // Empty: the default, which no `name=` can give.
            if !c.name.is_empty() {
                write!(s, ",name={}", plain(&c.name)?).ok()?;
            }
            let pace = match c.pacing {
                Pacing::Auto => "auto",
                Pacing::Device => "device",
                Pacing::Clock => "clock",
            };
            write!(s, ",pace={pace}").ok()?;
            if let Some(f) = c.format {
                write!(s, ",format={}", f.name()).ok()?;
            }
            for (key, v) in [
                ("buffer", c.buffer_frames),
                ("period", c.period_frames),
                ("margin", c.margin_frames),
                ("margin_max", c.margin_max_frames),
            ] {
                if let Some(v) = v {
                    write!(s, ",{key}={v}").ok()?;
                }
            }
        }
        DeviceSpec::RtpSend(c) => {
            write!(
                s,
                "rtp-send:dest={},format={},rate={},channels={},ptime={},pt={},ttl={},sap={},name={}",
                c.dest,
                c.encoding,
                c.rate,
                channels(&c.channels),
                c.ptime_us as f64 / 1000.0,
                c.payload_type,
                c.ttl,
                c.sap.map_or_else(|| "off".to_string(), |g| g.to_string()),
                plain(&c.name)?
            )
            .ok()?;
        }
        DeviceSpec::RtpRecv(c) => {
            write!(
                s,
                "rtp-recv:listen={},format={},rate={},channels={},pt={},latency={},name={}",
                c.listen,
                c.encoding,
                c.rate,
                channels(&c.channels),
                c.payload_type,
                c.latency_us as f64 / 1000.0,
                plain(&c.name)?
            )
            .ok()?;
            if let Some(ip) = c.source {
                write!(s, ",source={ip}").ok()?;
            }
        }
    }
    Some(s)
}
