//! PulseAudio's module argument syntax, shared by every module: `key=value` lists,
//! channel maps, proplists and booleans as `pa_modargs` reads them.

use crate::wire::convert::position_from_pa;
use pulseaudio::protocol::ChannelPosition as PaPos;
use quaver_dsp::ChannelMap;
use std::collections::BTreeMap;

/// Parses PulseAudio's module argument syntax (`key=value`, `key="v w"`, `key='v'`)
/// and returns each value *raw*: quotes removed, backslash escapes kept, as
/// `pa_modargs` keeps them for values that are parsed again (proplists).
pub fn parse_args_raw(args: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut it = args.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        if it.next() != Some('=') || key.is_empty() {
            return Err(format!("expected key=value near '{key}'"));
        }
        let mut value = String::new();
        let quote = match it.peek() {
            Some(&q) if q == '"' || q == '\'' => {
                it.next();
                Some(q)
            }
            _ => None,
        };
        loop {
            match (it.next(), quote) {
                (None, Some(_)) => return Err(format!("unterminated quote in '{key}'")),
                (None, None) => break,
                (Some(c), None) if c.is_whitespace() => break,
                (Some(c), Some(q)) if c == q => break,
                (Some('\\'), _) => {
                    value.push('\\');
                    value.extend(it.next());
                }
                (Some(c), _) => value.push(c),
            }
        }
        if out.insert(key.clone(), value).is_some() {
            return Err(format!("'{key}' given twice"));
        }
    }
}

/// Removes backslash escapes.
pub fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut it = raw.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            out.extend(it.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses module arguments with escapes removed from every value.
pub fn parse_args(args: &str) -> Result<BTreeMap<String, String>, String> {
    Ok(parse_args_raw(args)?
        .into_iter()
        .map(|(k, v)| (k, unescape(&v)))
        .collect())
}

/// A PulseAudio channel-map string ("front-left,front-right" or a name like "stereo").
pub fn parse_channel_map(s: &str) -> Option<ChannelMap> {
    use PaPos::*;
    let named: Option<Vec<PaPos>> = match s {
        "mono" => Some(vec![Mono]),
        "stereo" => Some(vec![FrontLeft, FrontRight]),
        "surround-21" => Some(vec![FrontLeft, FrontRight, Lfe]),
        "surround-40" => Some(vec![FrontLeft, FrontRight, RearLeft, RearRight]),
        "surround-51" => Some(vec![
            FrontLeft,
            FrontRight,
            RearLeft,
            RearRight,
            FrontCenter,
            Lfe,
        ]),
        "surround-71" => Some(vec![
            FrontLeft,
            FrontRight,
            RearLeft,
            RearRight,
            FrontCenter,
            Lfe,
            SideLeft,
            SideRight,
        ]),
        _ => None,
    };
    let positions = match named {
        Some(p) => p,
        None => s
            .split(',')
            .map(|p| {
                Some(match p.trim() {
                    "mono" => Mono,
                    "front-left" | "left" => FrontLeft,
                    "front-right" | "right" => FrontRight,
                    "front-center" | "center" => FrontCenter,
                    "rear-center" => RearCenter,
                    "rear-left" => RearLeft,
                    "rear-right" => RearRight,
                    "lfe" | "subwoofer" => Lfe,
                    "side-left" => SideLeft,
                    "side-right" => SideRight,
                    "front-left-of-center" => FrontLeftOfCenter,
                    "front-right-of-center" => FrontRightOfCenter,
                    other => {
                        let n: u8 = other.strip_prefix("aux")?.parse().ok()?;
                        if n > 31 {
                            return None;
                        }
                        crate::wire::convert::position_to_pa(quaver_dsp::ChannelPosition::Aux(
                            n as u16,
                        ))
                    }
                })
            })
            .collect::<Option<Vec<_>>>()?,
    };
    if positions.is_empty() || positions.len() > 32 {
        return None;
    }
    Some(ChannelMap(
        positions.into_iter().map(position_from_pa).collect(),
    ))
}

/// Parses a proplist string (`key=value key2="v w" key3=v\\ w`), as in
/// `sink_properties`.
pub fn parse_props(s: &str) -> Result<BTreeMap<String, String>, String> {
    parse_args(s)
}

/// PulseAudio's booleans (`pa_parse_boolean`).
pub(super) fn parse_bool(key: &str, v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "y" | "t" | "yes" | "true" | "on" => Ok(true),
        "0" | "n" | "f" | "no" | "false" | "off" => Ok(false),
        _ => Err(format!("{key}='{v}' is not a boolean")),
    }
}

/// Refuses an argument not in `known`.
pub(super) fn check_keys(args: &BTreeMap<String, String>, known: &[&str]) -> Result<(), String> {
    match args.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown argument '{k}'")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_arguments_parse_like_pulseaudio() {
        let a = parse_args_raw(
            r#"sink_name=virt sink_properties="device.description='My Sink'" rate=48000"#,
        )
        .unwrap();
        assert_eq!(a["sink_name"], "virt");
        assert_eq!(a["sink_properties"], "device.description='My Sink'");
        let p = parse_props(&a["sink_properties"]).unwrap();
        assert_eq!(p["device.description"], "My Sink");
        // pactl's usual form: an escaped space survives into the proplist.
        let a = parse_args_raw(r"sink_properties=device.description=My\ Sink").unwrap();
        let p = parse_props(&a["sink_properties"]).unwrap();
        assert_eq!(p["device.description"], "My Sink");
        assert_eq!(unescape(r"a\\b\ c"), r"a\b c");
        assert!(parse_args("x").is_err());
        assert!(parse_args("a=1 a=2").is_err());
        assert!(parse_args("a=\"open").is_err());
        assert!(parse_args("").unwrap().is_empty());
    }
}
