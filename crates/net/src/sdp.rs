//! SDP session descriptions (RFC 4566) for one RTP audio stream, the subset that
//! PulseAudio, PipeWire and AES67 (RFC 7273 clock attributes) senders write:
//!
//! ```text
//! v=0
//! o=- 1311738121 1311738121 IN IP4 192.168.1.10
//! s=Living room
//! c=IN IP4 239.69.0.1/32
//! t=0 0
//! m=audio 5004 RTP/AVP 97
//! a=rtpmap:97 L24/48000/2
//! a=ptime:1
//! a=ts-refclk:ptp=IEEE1588-2008:00-11-22-FF-FE-33-44-55:0
//! a=mediaclk:direct=0
//! ```
//!
//! The first `m=audio` section with a payload type quaver can decode (L16 or L24 by
//! `rtpmap`, or the static types 10 and 11) is the stream; other media sections are
//! skipped. Lines may end in CRLF or LF; unknown lines and attributes are ignored.
//! Limits, so a hostile announcement costs little: 16 KiB of text, 32 payload types on
//! the `m=` line, 1..=64 channels, 1..=768000 Hz, `ptime` 0.001..=1000 ms, names and
//! attribute values of 255 bytes of printable text.

use crate::payload::Encoding;
use crate::{MAX_CHANNELS, MAX_RATE};
use std::fmt::{self, Write};
use std::net::IpAddr;

/// Longest SDP text accepted, in bytes.
pub const MAX_SDP: usize = 16 * 1024;
/// Most payload types an `m=` line may list.
pub const MAX_PAYLOAD_TYPES: usize = 32;
/// Longest session name or attribute value kept, in bytes.
pub const MAX_TEXT: usize = 255;

/// Why a session description was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SdpError {
    /// Longer than [`MAX_SDP`].
    #[error("SDP of {0} bytes, at most {MAX_SDP} accepted")]
    TooLong(usize),
    /// The first line is not `v=0`.
    #[error("SDP does not start with v=0")]
    NoVersion,
    /// A line is not `X=value`.
    #[error("SDP line {line}: '{text}' is not type=value")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The line, cut to 64 bytes.
        text: String,
    },
    /// A field's value is malformed or out of range.
    #[error("SDP line {line}: bad {field}: {reason}")]
    BadField {
        /// 1-based line number.
        line: usize,
        /// The field, e.g. "c=", "rtpmap channels".
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A required line is missing.
    #[error("SDP has no {0} line")]
    Missing(&'static str),
    /// The `m=` line lists more than [`MAX_PAYLOAD_TYPES`] formats.
    #[error("SDP line {line}: {count} payload types, at most {MAX_PAYLOAD_TYPES} accepted")]
    TooManyPayloadTypes {
        /// 1-based line number.
        line: usize,
        /// How many were listed.
        count: usize,
    },
    /// No audio section carries a format quaver decodes.
    #[error("SDP has no audio stream in L16 or L24 (payload types offered: {0})")]
    Unsupported(String),
}

/// The stream described by an SDP: where it is sent and what it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionDescription {
    /// `o=` session id.
    pub session_id: u64,
    /// `o=` session version.
    pub session_version: u64,
    /// `o=` the originating host's address.
    pub origin: IpAddr,
    /// `s=` the session name (shown as the source's name).
    pub name: String,
    /// `c=` the destination address (multicast group or unicast host).
    pub address: IpAddr,
    /// `c=` an IPv4 multicast address's TTL, when given.
    pub ttl: Option<u8>,
    /// `m=` the destination UDP port.
    pub port: u16,
    /// `m=` the payload type used.
    pub payload_type: u8,
    /// The payload's encoding.
    pub encoding: Encoding,
    /// The sample rate in Hz.
    pub rate: u32,
    /// The channel count.
    pub channels: u16,
    /// `a=ptime` in microseconds (1000 = 1 ms; AES67 also uses 125).
    pub ptime_us: Option<u32>,
    /// `a=ts-refclk` (RFC 7273), e.g. `ptp=IEEE1588-2008:00-11-22-FF-FE-33-44-55:0`.
    pub ts_refclk: Option<String>,
    /// `a=mediaclk` (RFC 7273), e.g. `direct=0`.
    pub mediaclk: Option<String>,
}

/// What one `m=audio` section said, before picking its payload type.
#[derive(Default)]
struct Media {
    port: u16,
    pts: Vec<u8>,
    maps: Vec<(u8, Option<Encoding>, u32, u16)>,
    address: Option<(IpAddr, Option<u8>)>,
    ptime_us: Option<u32>,
    ts_refclk: Option<String>,
    mediaclk: Option<String>,
}

impl SessionDescription {
    /// Parses an SDP text, checking every field this crate uses.
    pub fn parse(text: &str) -> Result<Self, SdpError> {
        if text.len() > MAX_SDP {
            return Err(SdpError::TooLong(text.len()));
        }
        let mut lines = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.is_empty());
        if lines.next().map(|(_, l)| l) != Some("v=0") {
            return Err(SdpError::NoVersion);
        }
        let mut origin = None;
        let mut name = None;
        let mut session_addr = None;
        let mut session_refclk = None;
        let mut session_mediaclk = None;
        // The audio section being read, and the one chosen (the first usable).
        let mut media: Option<Media> = None;
        let mut chosen: Option<(Media, u8, Encoding, u32, u16)> = None;
        let mut offered = Vec::new();
        let mut in_other_media = false;
        for (n, line) in lines {
            let Some((kind, value)) = line.split_once('=').filter(|(k, _)| k.len() == 1) else {
                return Err(SdpError::BadLine {
                    line: n,
                    text: cut(line, 64),
                });
            };
            match kind {
                "o" => origin = Some(parse_origin(n, value)?),
                "s" => name = Some(text_value(n, "s=", value)?),
                "c" => {
                    let c = parse_connection(n, value)?;
                    match media.as_mut() {
                        Some(m) => m.address = Some(c),
                        None if !in_other_media => session_addr = Some(c),
                        None => {}
                    }
                }
                "m" => {
                    if let Some(m) = media.take() {
                        pick(m, &mut chosen, &mut offered);
                    }
                    in_other_media = !value.starts_with("audio ");
                    if !in_other_media {
                        media = Some(parse_media(n, value)?);
                    }
                }
                "a" => {
                    let (attr, arg) = value.split_once(':').unwrap_or((value, ""));
                    let target = media.as_mut();
                    match (attr, target) {
                        ("rtpmap", Some(m)) => {
                            // Only the types the m= line lists are kept (at most
                            // 32), the first mapping of each: a flood costs nothing.
                            let map = parse_rtpmap(n, arg)?;
                            if m.pts.contains(&map.0) && !m.maps.iter().any(|x| x.0 == map.0) {
                                m.maps.push(map);
                            }
                        }
                        ("ptime", Some(m)) => m.ptime_us = Some(parse_ptime(n, arg)?),
                        ("ts-refclk", Some(m)) => {
                            m.ts_refclk = Some(text_value(n, "ts-refclk", arg)?)
                        }
                        ("mediaclk", Some(m)) => m.mediaclk = Some(text_value(n, "mediaclk", arg)?),
                        ("ts-refclk", None) if !in_other_media => {
                            session_refclk = Some(text_value(n, "ts-refclk", arg)?)
                        }
                        ("mediaclk", None) if !in_other_media => {
                            session_mediaclk = Some(text_value(n, "mediaclk", arg)?)
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        if let Some(m) = media.take() {
            pick(m, &mut chosen, &mut offered);
        }
        let (origin, session_id, session_version) = origin.ok_or(SdpError::Missing("o="))?;
        let name = name.ok_or(SdpError::Missing("s="))?;
        let Some((m, payload_type, encoding, rate, channels)) = chosen else {
            if offered.is_empty() {
                return Err(SdpError::Missing("m=audio"));
            }
            return Err(SdpError::Unsupported(offered.join(", ")));
        };
        let (address, ttl) = m.address.or(session_addr).ok_or(SdpError::Missing("c="))?;
        Ok(SessionDescription {
            session_id,
            session_version,
            origin,
            name,
            address,
            ttl,
            port: m.port,
            payload_type,
            encoding,
            rate,
            channels,
            ptime_us: m.ptime_us,
            ts_refclk: m.ts_refclk.or(session_refclk),
            mediaclk: m.mediaclk.or(session_mediaclk),
        })
    }

    /// The `o=` line's origin address and session id, alone: what a SAP deletion must
    /// carry (RFC 2974 lets it carry nothing else), so it can name the session it ends.
    pub fn origin_of(text: &str) -> Result<(IpAddr, u64), SdpError> {
        if text.len() > MAX_SDP {
            return Err(SdpError::TooLong(text.len()));
        }
        let (n, line) = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .enumerate()
            .find(|(_, l)| l.starts_with("o="))
            .ok_or(SdpError::Missing("o="))?;
        let (addr, id, _) = parse_origin(n + 1, &line[2..])?;
        Ok((addr, id))
    }

    /// The SDP text for this stream (media-level clock attributes). Lines end in LF, as
    /// PulseAudio and PipeWire write them: PulseAudio 16's parser takes nothing but
    /// `v=0\n` as the first line and keeps a CR in every value, so a CRLF description
    /// (RFC 4566's form) is refused by its module-rtp-recv.
    pub fn to_text(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for SessionDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = |a: &IpAddr| if a.is_ipv4() { "IP4" } else { "IP6" };
        writeln!(f, "v=0")?;
        writeln!(
            f,
            "o=- {} {} IN {} {}",
            self.session_id,
            self.session_version,
            ip(&self.origin),
            self.origin
        )?;
        writeln!(f, "s={}", self.name)?;
        write!(f, "c=IN {} {}", ip(&self.address), self.address)?;
        if let Some(ttl) = self.ttl {
            write!(f, "/{ttl}")?;
        }
        writeln!(f, "\nt=0 0")?;
        writeln!(f, "m=audio {} RTP/AVP {}", self.port, self.payload_type)?;
        writeln!(
            f,
            "a=rtpmap:{} {}/{}/{}",
            self.payload_type, self.encoding, self.rate, self.channels
        )?;
        if let Some(us) = self.ptime_us {
            let mut s = format!("{}", us / 1000);
            if us % 1000 != 0 {
                write!(s, ".{:03}", us % 1000)?;
                while s.ends_with('0') {
                    s.pop();
                }
            }
            writeln!(f, "a=ptime:{s}")?;
        }
        if let Some(r) = &self.ts_refclk {
            writeln!(f, "a=ts-refclk:{r}")?;
        }
        if let Some(m) = &self.mediaclk {
            writeln!(f, "a=mediaclk:{m}")?;
        }
        Ok(())
    }
}

/// Keeps `m` as the stream if it is the first section with a decodable payload type;
/// notes what it offered otherwise.
fn pick(m: Media, chosen: &mut Option<(Media, u8, Encoding, u32, u16)>, offered: &mut Vec<String>) {
    if chosen.is_some() {
        return;
    }
    for &pt in &m.pts {
        let map = m.maps.iter().find(|(p, ..)| *p == pt);
        let found = match (pt, map) {
            (_, Some(&(_, Some(enc), rate, ch))) => Some((enc, rate, ch)),
            // RFC 3551's static types: L16 at 44.1 kHz, stereo (10) and mono (11).
            (10, None) => Some((Encoding::L16, 44_100, 2)),
            (11, None) => Some((Encoding::L16, 44_100, 1)),
            _ => None,
        };
        if let Some((enc, rate, ch)) = found {
            *chosen = Some((m, pt, enc, rate, ch));
            return;
        }
        if offered.len() < MAX_PAYLOAD_TYPES {
            offered.push(pt.to_string());
        }
    }
}

fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn bad(line: usize, field: &'static str, reason: impl Into<String>) -> SdpError {
    SdpError::BadField {
        line,
        field,
        reason: reason.into(),
    }
}

/// A name or attribute value: printable, at most [`MAX_TEXT`] bytes.
fn text_value(line: usize, field: &'static str, v: &str) -> Result<String, SdpError> {
    if v.len() > MAX_TEXT {
        return Err(bad(
            line,
            field,
            format!("{} bytes, at most {MAX_TEXT}", v.len()),
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(bad(line, field, "control characters"));
    }
    Ok(v.to_string())
}

fn number<T: std::str::FromStr>(line: usize, field: &'static str, v: &str) -> Result<T, SdpError> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            line,
            field,
            format!("'{}' is not a number", cut(v, 32)),
        ));
    }
    v.parse()
        .map_err(|_| bad(line, field, format!("{} is out of range", cut(v, 32))))
}

fn address(
    line: usize,
    field: &'static str,
    nettype: &str,
    addrtype: &str,
    v: &str,
) -> Result<IpAddr, SdpError> {
    if nettype != "IN" {
        return Err(bad(
            line,
            field,
            format!("network type '{}', expected IN", cut(nettype, 16)),
        ));
    }
    let ip: IpAddr = v.parse().map_err(|_| {
        bad(
            line,
            field,
            format!("'{}' is not an IP address", cut(v, 64)),
        )
    })?;
    match (addrtype, ip) {
        ("IP4", IpAddr::V4(_)) | ("IP6", IpAddr::V6(_)) => Ok(ip),
        _ => Err(bad(
            line,
            field,
            format!("{addrtype} does not match address {ip}"),
        )),
    }
}

/// `o=<username> <sess-id> <sess-version> IN IP4|IP6 <address>`.
fn parse_origin(line: usize, v: &str) -> Result<(IpAddr, u64, u64), SdpError> {
    let f: Vec<&str> = v.split(' ').collect();
    if f.len() != 6 {
        return Err(bad(line, "o=", format!("{} fields, expected 6", f.len())));
    }
    let id = number(line, "o= session id", f[1])?;
    let version = number(line, "o= session version", f[2])?;
    Ok((address(line, "o=", f[3], f[4], f[5])?, id, version))
}

/// `c=IN IP4 <address>[/<ttl>[/<count>]]` or `c=IN IP6 <address>[/<count>]`.
fn parse_connection(line: usize, v: &str) -> Result<(IpAddr, Option<u8>), SdpError> {
    let f: Vec<&str> = v.split(' ').collect();
    if f.len() != 3 {
        return Err(bad(line, "c=", format!("{} fields, expected 3", f.len())));
    }
    let mut parts = f[2].split('/');
    let addr = address(line, "c=", f[0], f[1], parts.next().unwrap_or(""))?;
    let mut ttl = None;
    if let Some(t) = parts.next() {
        if addr.is_ipv4() {
            ttl = Some(number(line, "c= TTL", t)?);
        } else {
            // IPv6 has no TTL here; the number is an address count.
            let count: u32 = number(line, "c= address count", t)?;
            if count != 1 {
                return Err(bad(
                    line,
                    "c=",
                    format!("{count} addresses, only 1 supported"),
                ));
            }
        }
    }
    if let Some(count) = parts.next() {
        let count: u32 = number(line, "c= address count", count)?;
        if count != 1 {
            return Err(bad(
                line,
                "c=",
                format!("{count} addresses, only 1 supported"),
            ));
        }
    }
    if parts.next().is_some() {
        return Err(bad(line, "c=", "too many '/' parts"));
    }
    Ok((addr, ttl))
}

/// `m=audio <port>[/<count>] RTP/AVP <pt> ...`.
fn parse_media(line: usize, v: &str) -> Result<Media, SdpError> {
    let f: Vec<&str> = v.split(' ').filter(|s| !s.is_empty()).collect();
    if f.len() < 4 {
        return Err(bad(line, "m=", "expected audio PORT RTP/AVP PT..."));
    }
    let (port, count) = f[1].split_once('/').unwrap_or((f[1], "1"));
    let port: u16 = number(line, "m= port", port)?;
    if port == 0 {
        return Err(bad(line, "m= port", "0 (stream disabled)"));
    }
    if count != "1" {
        return Err(bad(
            line,
            "m= port",
            format!("{} ports, only 1 supported", cut(count, 16)),
        ));
    }
    if f[2] != "RTP/AVP" {
        return Err(bad(
            line,
            "m= protocol",
            format!("'{}', expected RTP/AVP", cut(f[2], 32)),
        ));
    }
    let list = &f[3..];
    if list.len() > MAX_PAYLOAD_TYPES {
        return Err(SdpError::TooManyPayloadTypes {
            line,
            count: list.len(),
        });
    }
    let mut pts = Vec::with_capacity(list.len());
    for p in list {
        let pt: u8 = number(line, "m= payload type", p)?;
        if pt > 127 {
            return Err(bad(
                line,
                "m= payload type",
                format!("{pt} is outside 0..=127"),
            ));
        }
        pts.push(pt);
    }
    Ok(Media {
        port,
        pts,
        ..Media::default()
    })
}

/// `a=rtpmap:<pt> <encoding>/<rate>[/<channels>]`; the encoding is `None` when it is
/// not one quaver decodes (the rate and channels are then not checked).
fn parse_rtpmap(line: usize, v: &str) -> Result<(u8, Option<Encoding>, u32, u16), SdpError> {
    let (pt, map) = v
        .split_once(' ')
        .ok_or_else(|| bad(line, "rtpmap", "expected PT ENCODING/RATE[/CHANNELS]"))?;
    let pt: u8 = number(line, "rtpmap payload type", pt)?;
    if pt > 127 {
        return Err(bad(
            line,
            "rtpmap payload type",
            format!("{pt} is outside 0..=127"),
        ));
    }
    let mut parts = map.trim().split('/');
    let Some(enc) = Encoding::from_name(parts.next().unwrap_or("")) else {
        return Ok((pt, None, 0, 0));
    };
    let rate: u32 = number(line, "rtpmap rate", parts.next().unwrap_or(""))?;
    if rate == 0 || rate > MAX_RATE {
        return Err(bad(
            line,
            "rtpmap rate",
            format!("{rate} Hz is outside 1..={MAX_RATE}"),
        ));
    }
    let channels: u16 = match parts.next() {
        Some(c) => number(line, "rtpmap channels", c)?,
        None => 1,
    };
    if channels == 0 || channels > MAX_CHANNELS {
        return Err(bad(
            line,
            "rtpmap channels",
            format!("{channels} is outside 1..={MAX_CHANNELS}"),
        ));
    }
    if parts.next().is_some() {
        return Err(bad(line, "rtpmap", "too many '/' parts"));
    }
    Ok((pt, Some(enc), rate, channels))
}

/// `a=ptime:<ms>` with up to three decimals (AES67's 0.125), as microseconds.
fn parse_ptime(line: usize, v: &str) -> Result<u32, SdpError> {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    let whole: u32 = number(line, "ptime", whole)?;
    if frac.len() > 3 || (!frac.is_empty() && !frac.bytes().all(|b| b.is_ascii_digit())) {
        return Err(bad(
            line,
            "ptime",
            format!("'{}' is not milliseconds with up to 3 decimals", cut(v, 32)),
        ));
    }
    let frac_us = format!("{frac:0<3}").parse::<u32>().unwrap_or(0);
    let us = whole.checked_mul(1000).and_then(|w| w.checked_add(frac_us));
    match us {
        Some(us @ 1..=1_000_000) => Ok(us),
        _ => Err(bad(
            line,
            "ptime",
            format!("{} ms is outside 0.001..=1000", cut(v, 32)),
        )),
    }
}

#[cfg(test)]
mod tests;
