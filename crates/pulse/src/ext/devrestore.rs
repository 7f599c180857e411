//! module-device-restore's protocol extension: the formats a sink takes, which
//! `pactl set-sink-formats` sets and pavucontrol shows in a sink's "Advanced" section.
//!
//! quaverd plays PCM only (there is no passthrough path to a receiver), so every sink
//! takes exactly `pcm`: that is what a read answers, and a save is accepted when it asks
//! for nothing else (PulseAudio's null sink likewise cannot take other formats). Volumes
//! and mutes of devices are the engine's own and are not part of this extension.

pub use crate::ext::restore::RequestError;
use pulseaudio::protocol::{FormatEncoding, FormatInfo, TagStructReader};
use std::io::Cursor;

/// The extension's module name.
pub const MODULE_NAME: &str = "module-device-restore";
/// The extension's version (PulseAudio 16's).
pub const VERSION: u32 = 1;
/// The subcommand of events sent to subscribers.
pub const EVENT: u32 = 2;
/// `pa_device_type_t`: a sink.
pub const TYPE_SINK: u32 = 0;
/// `pa_device_type_t`: a source.
pub const TYPE_SOURCE: u32 = 1;

/// A parsed request (after the module index and name).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// TEST: the version.
    Test,
    /// SUBSCRIBE on or off.
    Subscribe(bool),
    /// READ_FORMATS_ALL: every sink's formats.
    ReadAll,
    /// READ_FORMATS of one device (type, index).
    Read(u32, u32),
    /// SAVE_FORMATS for one device (type, index, formats).
    Save(u32, u32, Vec<FormatInfo>),
}

impl Request {
    /// Parses the subcommand and its arguments; anything left over is malformed.
    pub fn parse(payload: &[u8], version: u16) -> Result<Request, RequestError> {
        let mut cur = Cursor::new(payload);
        let mut ts = TagStructReader::new(&mut cur, version);
        fn bad(what: &'static str) -> impl Fn(pulseaudio::protocol::ProtocolError) -> RequestError {
            move |e| RequestError::Malformed(format!("{what}: {e}"))
        }
        let device_type = |ts: &mut TagStructReader<'_>| {
            let t = ts.read_u32().map_err(bad("device type"))?;
            if t != TYPE_SINK && t != TYPE_SOURCE {
                return Err(RequestError::Malformed(format!("device type {t}")));
            }
            Ok(t)
        };
        let req = match ts.read_u32().map_err(bad("subcommand"))? {
            0 => Request::Test,
            1 => Request::Subscribe(ts.read_bool().map_err(bad("enable"))?),
            3 => Request::ReadAll,
            4 => {
                let t = device_type(&mut ts)?;
                Request::Read(t, ts.read_u32().map_err(bad("index"))?)
            }
            5 => {
                let t = device_type(&mut ts)?;
                let index = ts.read_u32().map_err(bad("index"))?;
                let n = ts.read_u8().map_err(bad("format count"))?;
                if n == 0 {
                    return Err(RequestError::Malformed("no formats".into()));
                }
                let formats = (0..n)
                    .map(|_| ts.read::<FormatInfo>().map_err(bad("format")))
                    .collect::<Result<Vec<_>, _>>()?;
                Request::Save(t, index, formats)
            }
            other => return Err(RequestError::Unknown(other)),
        };
        if ts.has_data_left().unwrap_or(true) {
            return Err(RequestError::Malformed("data after the request".into()));
        }
        Ok(req)
    }
}

/// The formats every sink takes.
pub fn sink_formats() -> Vec<FormatInfo> {
    vec![FormatInfo::new(FormatEncoding::Pcm)]
}

/// Whether a sink can take `formats`: only PCM.
pub fn takes(formats: &[FormatInfo]) -> bool {
    formats.iter().all(|f| f.encoding == FormatEncoding::Pcm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulseaudio::protocol::{MAX_VERSION, PulseError, TagStructWriter};

    fn p(f: impl FnOnce(&mut TagStructWriter<'_>)) -> Result<Request, RequestError> {
        let mut buf = Vec::new();
        let mut w = TagStructWriter::new(&mut buf, MAX_VERSION);
        f(&mut w);
        Request::parse(&buf, MAX_VERSION)
    }

    #[test]
    fn requests_parse_and_leftovers_or_bad_fields_are_refused() {
        assert_eq!(p(|w| w.write_u32(0).unwrap()), Ok(Request::Test));
        assert_eq!(
            p(|w| {
                w.write_u32(1).unwrap();
                w.write_bool(true).unwrap();
            }),
            Ok(Request::Subscribe(true))
        );
        assert_eq!(p(|w| w.write_u32(3).unwrap()), Ok(Request::ReadAll));
        let save = |n: u8, t: u32| {
            p(move |w| {
                w.write_u32(5).unwrap();
                w.write_u32(t).unwrap();
                w.write_u32(7).unwrap();
                w.write_u8(n).unwrap();
                for _ in 0..n {
                    w.write(FormatInfo::new(FormatEncoding::Ac3Iec61937))
                        .unwrap();
                }
            })
        };
        assert_eq!(
            save(2, TYPE_SINK),
            Ok(Request::Save(
                TYPE_SINK,
                7,
                vec![FormatInfo::new(FormatEncoding::Ac3Iec61937); 2]
            ))
        );
        assert!(matches!(
            save(0, TYPE_SINK),
            Err(RequestError::Malformed(_))
        ));
        assert!(matches!(save(1, 9), Err(RequestError::Malformed(_))));
        // EVENT goes the other way; unknown subcommands are not supported.
        assert_eq!(
            p(|w| w.write_u32(2).unwrap()),
            Err(RequestError::Unknown(2))
        );
        let extra = p(|w| {
            w.write_u32(0).unwrap();
            w.write_u32(0).unwrap();
        });
        assert!(
            matches!(extra, Err(RequestError::Malformed(_))),
            "{extra:?}"
        );
        let short = p(|w| {
            w.write_u32(4).unwrap();
            w.write_u32(TYPE_SINK).unwrap();
        });
        assert!(
            matches!(short, Err(RequestError::Malformed(_))),
            "{short:?}"
        );
        assert_eq!(
            Request::parse(&[], MAX_VERSION).map_err(|e| e.pulse()),
            Err(PulseError::Invalid)
        );
    }

    #[test]
    fn sinks_take_pcm_only() {
        assert!(takes(&sink_formats()));
        assert!(!takes(&[
            FormatInfo::new(FormatEncoding::Pcm),
            FormatInfo::new(FormatEncoding::DtsIec61937)
        ]));
    }
}
