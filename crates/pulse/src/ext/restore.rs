//! Stream restore: the volume, mute and device of each kind of stream remembered across
//! restarts and given back to new streams of that kind, plus PulseAudio's extension
//! protocol for it (`pa_ext_stream_restore_*`, which pavucontrol uses for its "System
//! Sounds" slider).
//!
//! - **Kinds.** A stream's kind is its first of `media.role`, `application.id`,
//!   `application.name`, `media.name`, prefixed by the direction, as PulseAudio forms them
//!   ("sink-input-by-application-name:mpv"). A stream with none of them is not remembered.
//! - **Remembering.** A client changing a stream's volume or mute, or moving it, records
//!   the new value for the stream's kind. A client's own volume at creation is not
//!   recorded (PulseAudio's `save_volume = false` there): only a choice made afterwards.
//! - **Restoring.** A new stream takes the remembered device, volume and mute, each only
//!   if the client did not ask for one itself, and the device only if it exists.
//! - **Keeping.** The entries live in a TOML file (`$XDG_STATE_HOME/quaver/restore.toml`
//!   by default), rewritten whole by a background thread after each change so no client
//!   thread waits on the disk. A file that cannot be parsed is set aside as `….bad` with a
//!   warning instead of being overwritten.
//! - **Bad input.** Every field of the extension protocol is checked; a malformed request
//!   gets an error reply (PulseAudio drops the whole connection instead), and the number
//!   of entries is capped at [`MAX_ENTRIES`].
//!
//! This file is the store and the extension's parser, below the front-end's state; the
//! half that works on live streams (`Server::restore_for`, `remember`, `apply_restore`)
//! is `restore_live.rs`.

use crate::wire::convert::prop_str;
use crate::wire::convert::{MAX_CHANNELS, map_from_pa, map_to_pa};
use pulseaudio::protocol::{ChannelMap as PaMap, ChannelVolume, Prop, Props, PulseError, Volume};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// The module name clients address the extension by.
pub const MODULE_NAME: &str = "module-stream-restore";
/// Most entries kept; a write that would exceed it is refused.
pub const MAX_ENTRIES: usize = 1024;
/// Longest entry name or device name accepted, in bytes.
pub const MAX_NAME: usize = 512;
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

/// How WRITE combines its entries with the stored ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Drop every stored entry first.
    Set,
    /// Add only names not stored yet.
    Merge,
    /// Overwrite the names given.
    Replace,
}

/// One remembered kind of stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entry {
    /// Per-channel volume with the channel map it was set in.
    pub volume: Option<(PaMap, ChannelVolume)>,
    /// Device name.
    pub device: Option<String>,
    /// Mute.
    pub mute: Option<bool>,
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
                        Some((map, vol))
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

/// The kind of a stream, from its proplist (PulseAudio's stream-group order).
pub fn stream_key(props: &Props, playback: bool) -> Option<String> {
    let prefix = if playback {
        "sink-input"
    } else {
        "source-output"
    };
    [
        (Prop::MediaRole, "media-role"),
        (Prop::ApplicationId, "application-id"),
        (Prop::ApplicationName, "application-name"),
        (Prop::MediaName, "media-name"),
    ]
    .into_iter()
    .find_map(|(p, what)| {
        prop_str(props, p)
            .filter(|v| !v.is_empty())
            .map(|v| format!("{prefix}-by-{what}:{v}"))
    })
    .filter(|k| k.len() <= MAX_NAME)
}

/// `entry`'s volume for a stream with channel map `map`: as stored when the maps match,
/// else its loudest channel on every channel (no balance is carried across layouts).
pub fn volume_for(entry: &Entry, map: &PaMap) -> Option<ChannelVolume> {
    let (m, v) = entry.volume.as_ref()?;
    if m == map {
        return Some(*v);
    }
    let loudest = v
        .channels()
        .iter()
        .map(|c| c.as_u32())
        .max()
        .unwrap_or(Volume::NORM.as_u32());
    let mut out = ChannelVolume::empty();
    for _ in 0..map.num_channels().max(1) {
        out.push(Volume::from_u32_clamped(loudest));
    }
    Some(out)
}

/// One entry in the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mute: Option<bool>,
    /// Channel positions, quaver's names ("FL,FR").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    channels: Option<String>,
    /// Per-channel volume in PulseAudio units (65536 = 100 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume: Option<Vec<u32>>,
}

/// The file: a table of entries by name.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    entry: BTreeMap<String, FileEntry>,
}

/// The remembered entries, and the thread that keeps them on disk.
#[derive(Debug)]
pub struct Store {
    entries: BTreeMap<String, Entry>,
    saver: Option<mpsc::Sender<BTreeMap<String, Entry>>>,
}

impl Store {
    /// Entries kept in memory only.
    pub fn memory() -> Store {
        Store {
            entries: BTreeMap::new(),
            saver: None,
        }
    }

    /// Entries loaded from `path` (none if it does not exist), saved back there after
    /// every change.
    pub fn open(path: &Path) -> Store {
        let entries = match std::fs::read_to_string(path) {
            Ok(text) => match parse_file(&text) {
                Ok(e) => {
                    tracing::info!(
                        "stream restore: {} entries from {}",
                        e.len(),
                        path.display()
                    );
                    e
                }
                Err(why) => {
                    let bad = path.with_extension("toml.bad");
                    tracing::warn!(
                        "stream restore: {} is not valid ({why}); set aside as {} and starting empty",
                        path.display(),
                        bad.display()
                    );
                    if let Err(e) = std::fs::rename(path, &bad) {
                        tracing::warn!("stream restore: cannot rename it: {e}");
                    }
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(
                    "stream restore: cannot read {}: {e}; starting empty",
                    path.display()
                );
                BTreeMap::new()
            }
        };
        Store {
            entries,
            saver: spawn_saver(path.to_path_buf()),
        }
    }

    /// Every entry, by name.
    pub fn entries(&self) -> &BTreeMap<String, Entry> {
        &self.entries
    }

    /// The entry for `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// Applies a WRITE; returns the names it stored.
    pub fn write(
        &mut self,
        mode: WriteMode,
        entries: Vec<(String, Entry)>,
    ) -> Result<Vec<String>, PulseError> {
        let mut next = if mode == WriteMode::Set {
            BTreeMap::new()
        } else {
            self.entries.clone()
        };
        let mut stored = Vec::new();
        for (name, e) in entries {
            if mode == WriteMode::Merge && next.contains_key(&name) {
                continue;
            }
            next.insert(name.clone(), e);
            stored.push(name);
        }
        if next.len() > MAX_ENTRIES {
            return Err(PulseError::TooLarge);
        }
        self.entries = next;
        self.save();
        Ok(stored)
    }

    /// Removes `names` (unknown ones are ignored, as PulseAudio does).
    pub fn delete(&mut self, names: &[String]) {
        for n in names {
            self.entries.remove(n);
        }
        self.save();
    }

    /// Records a change a client made to a stream of kind `key`; returns whether the
    /// entry changed. Refused silently (with a log line) once the store is full.
    pub fn remember(&mut self, key: &str, f: impl FnOnce(&mut Entry)) -> bool {
        if !self.entries.contains_key(key) && self.entries.len() >= MAX_ENTRIES {
            tracing::warn!("stream restore: {MAX_ENTRIES} entries kept; not remembering {key}");
            return false;
        }
        let e = self.entries.entry(key.to_string()).or_default();
        let before = e.clone();
        f(e);
        if *e == before {
            return false;
        }
        self.save();
        true
    }

    fn save(&self) {
        // Only a copy of the map here, under the caller's locks; the saving thread
        // renders and writes it.
        if let Some(tx) = &self.saver
            && tx.send(self.entries.clone()).is_err()
        {
            tracing::warn!("stream restore: the saving thread has stopped; changes are not kept");
        }
    }
}

fn parse_file(text: &str) -> Result<BTreeMap<String, Entry>, String> {
    let f: FileFormat = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for (name, fe) in f.entry.into_iter().take(MAX_ENTRIES) {
        let volume = match (fe.channels, fe.volume) {
            (Some(c), Some(v)) => {
                let map: quaver_dsp::ChannelMap =
                    c.parse().map_err(|e| format!("entry \"{name}\": {e}"))?;
                if map.len() != v.len() || v.is_empty() || v.len() > MAX_CHANNELS as usize {
                    return Err(format!(
                        "entry \"{name}\": {} channels but {} volumes",
                        map.len(),
                        v.len()
                    ));
                }
                let mut cv = ChannelVolume::empty();
                for raw in v {
                    cv.push(Volume::from_u32_clamped(raw.min(VOLUME_MAX)));
                }
                Some((map_to_pa(&map), cv))
            }
            (None, None) => None,
            _ => return Err(format!("entry \"{name}\": channels and volume go together")),
        };
        out.insert(
            name,
            Entry {
                volume,
                device: fe.device,
                mute: fe.mute,
            },
        );
    }
    Ok(out)
}

fn to_file(entries: &BTreeMap<String, Entry>) -> String {
    let f = FileFormat {
        entry: entries
            .iter()
            .map(|(k, e)| {
                let (channels, volume) = match &e.volume {
                    Some((m, v)) => (
                        Some(map_from_pa(m).to_string()),
                        Some(v.channels().iter().map(|c| c.as_u32()).collect()),
                    ),
                    None => (None, None),
                };
                (
                    k.clone(),
                    FileEntry {
                        device: e.device.clone(),
                        mute: e.mute,
                        channels,
                        volume,
                    },
                )
            })
            .collect(),
    };
    let body = toml::to_string(&f).unwrap_or_default();
    format!(
        "# quaverd's remembered stream volumes, mutes and devices (stream restore).\n\
         # Rewritten by quaverd; volumes are PulseAudio units (65536 = 100 %).\n{body}"
    )
}

/// A thread writing the latest entries to `path` (via a temporary file and a rename, so
/// a crash never leaves half a file); saves that pile up are coalesced.
fn spawn_saver(path: PathBuf) -> Option<mpsc::Sender<BTreeMap<String, Entry>>> {
    let (tx, rx) = mpsc::channel::<BTreeMap<String, Entry>>();
    let spawned = std::thread::Builder::new()
        .name("quaver-restore-save".into())
        .spawn(move || {
            while let Ok(mut entries) = rx.recv() {
                while let Ok(newer) = rx.try_recv() {
                    entries = newer;
                }
                if let Err(e) = write_atomically(&path, &to_file(&entries)) {
                    tracing::warn!("stream restore: cannot save {}: {e}", path.display());
                }
            }
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!("stream restore: cannot start the saving thread ({e}); memory only");
            None
        }
    }
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The default file: `$XDG_STATE_HOME/quaver/restore.toml`, else
/// `$HOME/.local/state/quaver/restore.toml`.
pub fn default_path() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    env("XDG_STATE_HOME")
        .or_else(|| env("HOME").map(|h| h.join(".local/state")))
        .map(|d| d.join("quaver/restore.toml"))
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
        assert_eq!(e[0].1.volume, Some((PaMap::stereo(), stereo(30000))));
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
    fn write_modes_and_the_cap() {
        let mut s = Store::memory();
        let e = |m| Entry {
            mute: Some(m),
            ..Entry::default()
        };
        s.write(WriteMode::Replace, vec![("a".into(), e(true))])
            .unwrap();
        s.write(
            WriteMode::Merge,
            vec![("a".into(), e(false)), ("b".into(), e(false))],
        )
        .unwrap();
        assert_eq!(s.get("a").unwrap().mute, Some(true));
        assert_eq!(s.get("b").unwrap().mute, Some(false));
        s.write(WriteMode::Set, vec![("c".into(), e(true))])
            .unwrap();
        assert_eq!(s.entries().keys().collect::<Vec<_>>(), ["c"]);
        s.delete(&["c".into(), "nothing".into()]);
        assert!(s.entries().is_empty());
        let many: Vec<_> = (0..=MAX_ENTRIES)
            .map(|i| (i.to_string(), e(true)))
            .collect();
        assert_eq!(s.write(WriteMode::Set, many), Err(PulseError::TooLarge));
        assert!(s.entries().is_empty(), "a refused write changes nothing");
    }

    #[test]
    fn volume_is_remapped_by_its_loudest_channel() {
        let mut v = ChannelVolume::empty();
        v.push(Volume::from_u32_clamped(1000));
        v.push(Volume::from_u32_clamped(5000));
        let e = Entry {
            volume: Some((PaMap::stereo(), v)),
            ..Entry::default()
        };
        assert_eq!(volume_for(&e, &PaMap::stereo()), Some(v));
        let mono = volume_for(&e, &PaMap::mono()).unwrap();
        assert_eq!(mono.channels().len(), 1);
        assert_eq!(mono.channels()[0].as_u32(), 5000);
        assert_eq!(volume_for(&Entry::default(), &PaMap::mono()), None);
    }

    #[test]
    fn the_file_round_trips_and_a_bad_one_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/quaver/restore.toml");
        let mut s = Store::open(&path);
        let mut map = PaMap::empty();
        map.push(P::FrontLeft);
        map.push(P::Lfe);
        s.remember("sink-input-by-application-name:mpv", |e| {
            e.volume = Some((map, stereo(40000)));
            e.device = Some("null-sink".into());
            e.mute = Some(false);
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !path.exists() {
            assert!(std::time::Instant::now() < deadline, "never saved");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("channels = \"FL,LFE\""), "{text}");
        let again = Store::open(&path);
        assert_eq!(again.entries(), s.entries());

        std::fs::write(&path, "[entry.x]\nvolume = [1]\n").unwrap();
        let broken = Store::open(&path);
        assert!(broken.entries().is_empty());
        assert!(path.with_extension("toml.bad").exists());
        assert!(!path.exists());
    }
}
