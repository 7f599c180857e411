//! Stream restore's PulseAudio extension protocol (`pa_ext_stream_restore_*`, which
//! pavucontrol uses for its "System Sounds" slider), and the conversion between its
//! volumes and the policy store's.
//!
//! The store itself (entries per kind of stream, its file, its limits, how kinds are
//! formed) is `quaver_policy::restore`, shared with the native front-end; the half that
//! works on live PulseAudio streams (`Server::restore_for`, `remember`,
//! `apply_restore`) is `restore_live.rs`.
//!
//! - **Bad input.** Every field of the extension protocol is checked; a malformed request
//!   gets an error reply (PulseAudio drops the whole connection instead), and the number
//!   of entries is capped at [`MAX_ENTRIES`].
//! - **Volumes.** The store keeps linear gains; a PulseAudio volume converts to one and
//!   back exactly (the cube and cube root in `f64` lose less than half a step).

use crate::wire::convert::prop_str;
use crate::wire::convert::{MAX_CHANNELS, map_from_pa, map_to_pa};
use pulseaudio::protocol::{ChannelMap as PaMap, ChannelVolume, Prop, Props, PulseError, Volume};
pub use quaver_policy::restore::{Entry, MAX_ENTRIES, MAX_NAME, WriteMode};
use quaver_policy::restore::{StoreError, StreamProps};

/// The module name clients address the extension by.
pub const MODULE_NAME: &str = "module-stream-restore";
/// The loudest volume the protocol allows (`PA_VOLUME_MAX`).
pub const VOLUME_MAX: u32 = u32::MAX / 2;
/// Version answered to TEST (PulseAudio's module answers 1).
pub const VERSION: u32 = 1;

/// Subcommand numbers of the extension protocol.
pub mod sub {
    /// Is the extension there: replies its version.
    pub const TEST: u32 = 0;
    /// Every entry.
    pub const READ: u32 = 1;
    /// Store entries.
    pub const WRITE: u32 = 2;
    /// Remove entries by name.
    pub const DELETE: u32 = 3;
    /// Ask for (or stop) EVENT messages.
    pub const SUBSCRIBE: u32 = 4;
    /// Sent to subscribers after the entries changed.
    pub const EVENT: u32 = 5;
}

/// A parsed extension request (after the module index and name).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// TEST.
    Test,
    /// READ.
    Read,
    /// WRITE: mode, apply to playing streams now, entries.
    Write(WriteMode, bool, Vec<(String, Entry)>),
    /// DELETE these names.
    Delete(Vec<String>),
    /// SUBSCRIBE on or off.
    Subscribe(bool),
}

/// Why an extension request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The tagstruct did not hold what the subcommand needs.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// An unknown subcommand (EVENT is server-to-client only).
    #[error("unknown subcommand {0}")]
    Unknown(u32),
}

impl RequestError {
    /// The protocol error a client is sent.
    pub fn pulse(&self) -> PulseError {
        match self {
            RequestError::Malformed(_) => PulseError::Invalid,
            RequestError::Unknown(_) => PulseError::NotSupported,
        }
    }
}

/// A minimal tagstruct reader for the extension's payload. The codec's own reader
/// refuses a zero-channel volume, which is how libpulse says "no volume" in an entry.
struct Tags<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Tags<'a> {
    fn err<T>(&self, what: &str) -> Result<T, RequestError> {
        Err(RequestError::Malformed(format!(
            "{what} at byte {}",
            self.pos
        )))
    }
    fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }
    fn tag(&mut self) -> Result<u8, RequestError> {
        match self.data.get(self.pos) {
            Some(&t) => {
                self.pos += 1;
                Ok(t)
            }
            None => self.err("truncated"),
        }
    }
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], RequestError> {
        if self.data.len() - self.pos < n {
            return self.err("truncated");
        }
        let b = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, RequestError> {
        if self.tag()? != b'L' {
            return self.err("expected u32");
        }
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn bool(&mut self) -> Result<bool, RequestError> {
        match self.tag()? {
            b'1' => Ok(true),
            b'0' => Ok(false),
            _ => self.err("expected boolean"),
        }
    }
    /// A string or the null string, checked to be UTF-8 of at most [`MAX_NAME`] bytes.
    fn string(&mut self) -> Result<Option<String>, RequestError> {
        match self.tag()? {
            b'N' => Ok(None),
            b't' => {
                let rest = &self.data[self.pos..];
                let Some(n) = rest.iter().position(|&b| b == 0) else {
                    return self.err("unterminated string");
                };
                let s = std::str::from_utf8(&rest[..n]);
                self.pos += n + 1;
                match s {
                    Ok(s) if s.len() <= MAX_NAME && !s.chars().any(char::is_control) => {
                        Ok(Some(s.to_string()))
                    }
                    Ok(_) => self.err("string too long or with control characters"),
                    Err(_) => self.err("string not UTF-8"),
                }
            }
            _ => self.err("expected string"),
        }
    }
    /// The channel count after tag `tag` (a map's or a volume's), at most 32.
    fn channels(&mut self, tag: u8, what: &str) -> Result<u8, RequestError> {
        if self.tag()? != tag {
            return self.err(what);
        }
        let n = self.bytes(1)?[0];
        if n > MAX_CHANNELS {
            return self.err("too many channels");
        }
        Ok(n)
    }
    fn map(&mut self) -> Result<PaMap, RequestError> {
        let n = self.channels(b'm', "expected channel map")?;
        let mut m = PaMap::empty();
        for &p in self.bytes(n as usize)? {
            // 51 positions: mono, the 11 named ones, aux0–31, the 7 top ones.
            if p > 50 {
                return self.err("invalid channel position");
            }
            m.push(crate::wire::convert::num_from_u8(p));
        }
        Ok(m)
    }
    fn cvolume(&mut self) -> Result<ChannelVolume, RequestError> {
        let n = self.channels(b'v', "expected volume")?;
        let mut v = ChannelVolume::empty();
        for c in self.bytes(4 * n as usize)?.chunks(4) {
            let raw = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            if raw > VOLUME_MAX {
                return self.err("volume above PA_VOLUME_MAX");
            }
            v.push(Volume::from_u32_clamped(raw));
        }
        Ok(v)
    }
}

impl Request {
    /// Parses the subcommand and its arguments from `payload`, which starts right
    /// after the module name.
    pub fn parse(payload: &[u8]) -> Result<Request, RequestError> {
        let mut t = Tags {
            data: payload,
            pos: 0,
        };
        let cmd = t.u32()?;
        let req = match cmd {
            sub::TEST => Request::Test,
            sub::READ => Request::Read,
            sub::WRITE => {
                let mode = match t.u32()? {
                    0 => WriteMode::Set,
                    1 => WriteMode::Merge,
                    2 => WriteMode::Replace,
                    m => return Err(RequestError::Malformed(format!("unknown write mode {m}"))),
                };
                let apply = t.bool()?;
                let mut entries = Vec::new();
                while !t.at_end() {
                    let Some(name) = t.string()?.filter(|n| !n.is_empty()) else {
                        return t.err("entry without a name");
                    };
                    let map = t.map()?;
                    let vol = t.cvolume()?;
                    let device = t.string()?.filter(|d| !d.is_empty());
                    let mute = t.bool()?;
                    let nv = vol.channels().len();
                    let volume = if nv == 0 {
                        None
                    } else if nv == map.num_channels() as usize {
                        Some(volume_from_pa(&map, &vol))
                    } else {
                        return t.err("volume and channel map differ in channels");
                    };
                    if entries.len() >= MAX_ENTRIES {
                        return t.err("too many entries");
                    }
                    // libpulse sends no "mute is set" flag: like PulseAudio, a written
                    // entry always carries its mute.
                    entries.push((
                        name,
                        Entry {
                            volume,
                            device,
                            mute: Some(mute),
                        },
                    ));
                }
                Request::Write(mode, apply, entries)
            }
            sub::DELETE => {
                let mut names = Vec::new();
                while !t.at_end() {
                    match t.string()? {
                        Some(n) if !n.is_empty() && names.len() < MAX_ENTRIES => names.push(n),
                        _ => return t.err("bad name to delete"),
                    }
                }
                Request::Delete(names)
            }
            sub::SUBSCRIBE => Request::Subscribe(t.bool()?),
            other => return Err(RequestError::Unknown(other)),
        };
        if !t.at_end() {
            return t.err("trailing data");
        }
        Ok(req)
    }
}

/// The kind of a stream, from its proplist (the policy's rule over PulseAudio's keys).
pub fn stream_key(props: &Props, playback: bool) -> Option<String> {
    let role = prop_str(props, Prop::MediaRole);
    let app_id = prop_str(props, Prop::ApplicationId);
    let app_name = prop_str(props, Prop::ApplicationName);
    let media_name = prop_str(props, Prop::MediaName);
    let props = StreamProps {
        role: role.as_deref(),
        app_id: app_id.as_deref(),
        app_name: app_name.as_deref(),
        media_name: media_name.as_deref(),
    };
    quaver_policy::restore::stream_key(&props, playback)
}

/// PulseAudio's software volume (cubic) as a linear gain, uncapped so that it converts
/// back to the same step.
fn gain_from_pa(v: Volume) -> f64 {
    let f = v.as_u32() as f64 / Volume::NORM.as_u32() as f64;
    f * f * f
}

/// A linear gain as PulseAudio's volume, to the nearest step.
fn gain_to_pa(g: f64) -> Volume {
    let raw = g.max(0.0).cbrt() * Volume::NORM.as_u32() as f64;
    Volume::from_u32_clamped((raw.round() as u32).min(VOLUME_MAX))
}

/// A PulseAudio per-channel volume in channel map `map` as the store keeps it.
pub fn volume_from_pa(map: &PaMap, v: &ChannelVolume) -> quaver_policy::restore::Volume {
    quaver_policy::restore::Volume {
        map: map_from_pa(map),
        gains: v.channels().iter().map(|&c| gain_from_pa(c)).collect(),
    }
}

/// A stored volume as PulseAudio's channel map and per-channel volume.
pub fn volume_to_pa(v: &quaver_policy::restore::Volume) -> (PaMap, ChannelVolume) {
    (map_to_pa(&v.map), cvolume(&v.gains))
}

fn cvolume(gains: &[f64]) -> ChannelVolume {
    let mut out = ChannelVolume::empty();
    for &g in gains.iter().take(MAX_CHANNELS as usize) {
        out.push(gain_to_pa(g));
    }
    out
}

/// `entry`'s volume for a stream with channel map `map`: as stored when the maps match,
/// else its loudest channel on every channel (no balance is carried across layouts).
pub fn volume_for(entry: &Entry, map: &PaMap) -> Option<ChannelVolume> {
    let v = entry.volume.as_ref()?;
    Some(cvolume(&v.gains_for(&map_from_pa(map))))
}

/// The protocol error for a change the store refused.
pub fn store_error(e: StoreError) -> PulseError {
    match e {
        StoreError::TooMany => PulseError::TooLarge,
    }
}

/// Where the extension request in `payload` is addressed (module index, module name)
/// and the offset of its subcommand.
pub fn split_target(payload: &[u8]) -> Result<(Option<u32>, Option<String>, usize), RequestError> {
    let mut t = Tags {
        data: payload,
        pos: 0,
    };
    let index = Some(t.u32()?).filter(|&i| i != u32::MAX);
    let name = t.string()?;
    Ok((index, name, t.pos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulseaudio::protocol::{ChannelPosition as P, TagStructWriter};

    fn payload(f: impl FnOnce(&mut TagStructWriter<'_>)) -> Vec<u8> {
        let mut b = Vec::new();
        let mut ts = TagStructWriter::new(&mut b, 35);
        f(&mut ts);
        b
    }

    /// The start of a WRITE: subcommand, mode, apply.
    fn write_head(ts: &mut TagStructWriter<'_>, mode: u32) {
        ts.write_u32(sub::WRITE).unwrap();
        ts.write_u32(mode).unwrap();
        ts.write_bool(false).unwrap();
    }

    fn stereo(v: u32) -> ChannelVolume {
        let mut c = ChannelVolume::empty();
        c.push(Volume::from_u32_clamped(v));
        c.push(Volume::from_u32_clamped(v));
        c
    }

    #[test]
    fn parses_every_subcommand() {
        let p = payload(|ts| ts.write_u32(sub::TEST).unwrap());
        assert_eq!(Request::parse(&p), Ok(Request::Test));
        let p = payload(|ts| {
            ts.write_u32(sub::SUBSCRIBE).unwrap();
            ts.write_bool(true).unwrap();
        });
        assert_eq!(Request::parse(&p), Ok(Request::Subscribe(true)));
        let p = payload(|ts| {
            ts.write_u32(sub::DELETE).unwrap();
            ts.write_string(Some(c"a")).unwrap();
            ts.write_string(Some(c"b")).unwrap();
        });
        assert_eq!(
            Request::parse(&p),
            Ok(Request::Delete(vec!["a".into(), "b".into()]))
        );
        let p = payload(|ts| {
            ts.write_u32(sub::WRITE).unwrap();
            ts.write_u32(2).unwrap();
            ts.write_bool(true).unwrap();
            ts.write_string(Some(c"sink-input-by-media-role:event"))
                .unwrap();
            ts.write(PaMap::stereo()).unwrap();
            ts.write(stereo(30000)).unwrap();
            ts.write_null_string().unwrap();
            ts.write_bool(false).unwrap();
            // No volume: a zero-channel map and volume, as libpulse sends them.
            ts.write_string(Some(c"sink-input-by-application-name:mpv"))
                .unwrap();
            ts.write(PaMap::empty()).unwrap();
            ts.write(ChannelVolume::empty()).unwrap();
            ts.write_string(Some(c"null-sink")).unwrap();
            ts.write_bool(true).unwrap();
        });
        let Ok(Request::Write(WriteMode::Replace, true, e)) = Request::parse(&p) else {
            panic!("{:?}", Request::parse(&p));
        };
        assert_eq!(e.len(), 2);
        let (map, vol) = volume_to_pa(e[0].1.volume.as_ref().unwrap());
        assert_eq!((map, vol), (PaMap::stereo(), stereo(30000)));
        assert_eq!(e[0].1.device, None);
        assert_eq!(e[1].1.volume, None);
        assert_eq!(e[1].1.device.as_deref(), Some("null-sink"));
        assert_eq!(e[1].1.mute, Some(true));
    }

    #[test]
    fn refuses_malformed_requests() {
        let bad: Vec<Vec<u8>> = vec![
            vec![],
            payload(|ts| ts.write_u32(9).unwrap()),
            payload(|ts| ts.write_u32(sub::EVENT).unwrap()),
            payload(|ts| {
                ts.write_u32(sub::TEST).unwrap();
                ts.write_u32(0).unwrap();
            }),
            payload(|ts| ts.write_u32(sub::SUBSCRIBE).unwrap()),
            payload(|ts| {
                write_head(ts, 7);
            }),
            // Volume of 2 channels on a 1-channel map.
            payload(|ts| {
                write_head(ts, 0);
                ts.write_string(Some(c"x")).unwrap();
                ts.write(PaMap::mono()).unwrap();
                ts.write(stereo(1)).unwrap();
                ts.write_null_string().unwrap();
                ts.write_bool(false).unwrap();
            }),
            // An entry cut short.
            payload(|ts| {
                write_head(ts, 0);
                ts.write_string(Some(c"x")).unwrap();
            }),
            // A nameless entry.
            payload(|ts| {
                write_head(ts, 0);
                ts.write_null_string().unwrap();
            }),
            payload(|ts| {
                ts.write_u32(sub::DELETE).unwrap();
                ts.write_null_string().unwrap();
            }),
            // Channel position 51 and a volume above PA_VOLUME_MAX, raw.
            vec![
                b'L', 0, 0, 0, 2, b'L', 0, 0, 0, 0, b'0', b't', b'x', 0, b'm', 1, 51, b'v', 1, 0,
                0, 0, 1, b'N', b'0',
            ],
            vec![
                b'L', 0, 0, 0, 2, b'L', 0, 0, 0, 0, b'0', b't', b'x', 0, b'm', 1, 1, b'v', 1, 0xff,
                0xff, 0xff, 0xff, b'N', b'0',
            ],
            vec![b'L', 0, 0, 0, 3, b't', 0xff, 0xfe, 0],
        ];
        for p in bad {
            assert!(Request::parse(&p).is_err(), "accepted {p:?}");
        }
    }

    #[test]
    fn keys_follow_pulseaudio_order() {
        let mut props = Props::new();
        props.set(Prop::MediaName, c"song.flac");
        assert_eq!(
            stream_key(&props, true).as_deref(),
            Some("sink-input-by-media-name:song.flac")
        );
        props.set(Prop::ApplicationName, c"mpv");
        assert_eq!(
            stream_key(&props, false).as_deref(),
            Some("source-output-by-application-name:mpv")
        );
        props.set(Prop::ApplicationId, c"io.mpv.Mpv");
        props.set(Prop::MediaRole, c"music");
        assert_eq!(
            stream_key(&props, true).as_deref(),
            Some("sink-input-by-media-role:music")
        );
        assert_eq!(stream_key(&Props::new(), true), None);
    }

    #[test]
    fn volume_is_remapped_by_its_loudest_channel() {
        let mut v = ChannelVolume::empty();
        v.push(Volume::from_u32_clamped(1000));
        v.push(Volume::from_u32_clamped(5000));
        let e = Entry {
            volume: Some(volume_from_pa(&PaMap::stereo(), &v)),
            ..Entry::default()
        };
        assert_eq!(volume_for(&e, &PaMap::stereo()), Some(v));
        let mono = volume_for(&e, &PaMap::mono()).unwrap();
        assert_eq!(mono.channels().len(), 1);
        assert_eq!(mono.channels()[0].as_u32(), 5000);
        assert_eq!(volume_for(&Entry::default(), &PaMap::mono()), None);
    }

    #[test]
    fn volumes_convert_to_the_store_and_back_exactly() {
        let mut map = PaMap::empty();
        map.push(P::FrontLeft);
        map.push(P::Lfe);
        map.push(P::Aux5);
        map.push(P::TopRearCenter);
        for raw in [
            0, 1, 2, 1000, 30000, 40000, 65535, 65536, 65537, 100_000, VOLUME_MAX,
        ] {
            let mut v = ChannelVolume::empty();
            for _ in 0..4 {
                v.push(Volume::from_u32_clamped(raw));
            }
            let stored = volume_from_pa(&map, &v);
            assert_eq!(volume_to_pa(&stored), (map, v), "{raw}");
        }
        let unity = volume_from_pa(&PaMap::stereo(), &stereo(Volume::NORM.as_u32()));
        assert_eq!(unity.gains, [1.0, 1.0]);
        assert_eq!(unity.map, quaver_dsp::ChannelMap::stereo());
    }
}
