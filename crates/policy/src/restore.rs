//! Stream restore's memory: the volume, mute and device of each kind of stream,
//! remembered across restarts and given back to new streams of that kind, whichever
//! front-end (PulseAudio or native) the streams come through.
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
//!   warning instead of being overwritten. The number of entries is capped at
//!   [`MAX_ENTRIES`].
//!
//! Volumes are linear per-channel gains with their channel positions; the PulseAudio
//! front-end converts its own units at its edge. PulseAudio's extension protocol for
//! these entries is in `quaver-pulse` (`ext/restore.rs`).

use quaver_dsp::ChannelMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

/// Most entries kept; a write that would exceed it is refused.
pub const MAX_ENTRIES: usize = 1024;
/// Longest entry name (stream kind) kept, in bytes.
pub const MAX_NAME: usize = 512;
/// Most channels of a remembered volume (PulseAudio's limit).
pub const MAX_CHANNELS: usize = 32;
/// `100 %` in the unit of the file's old `volume` field (PulseAudio's `PA_VOLUME_NORM`).
const OLD_VOLUME_NORM: f64 = 65536.0;
/// The loudest value the old `volume` field may hold (`PA_VOLUME_MAX`).
const OLD_VOLUME_MAX: u32 = u32::MAX / 2;

/// The store shared by every front-end of one daemon.
pub type SharedStore = Arc<Mutex<Store>>;

/// Whether and where stream restore remembers stream volumes, mutes and devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreMode {
    /// No stream restore.
    Off,
    /// Remembered until the server stops.
    Memory,
    /// Remembered in this file across restarts.
    File(PathBuf),
}

impl RestoreMode {
    /// The store this mode asks for; `None` when restore is off.
    pub fn open(&self) -> Option<SharedStore> {
        match self {
            RestoreMode::Off => None,
            RestoreMode::Memory => Some(Arc::new(Mutex::new(Store::memory()))),
            RestoreMode::File(path) => Some(Arc::new(Mutex::new(Store::open(path)))),
        }
    }
}

/// A remembered volume: one linear gain per channel, with the channel positions it was
/// set on.
#[derive(Debug, Clone, PartialEq)]
pub struct Volume {
    /// The channel positions the gains belong to.
    pub map: ChannelMap,
    /// Linear gain per channel (1.0 = unchanged).
    pub gains: Vec<f64>,
}

impl Volume {
    /// The same gain on every channel of `map`.
    pub fn uniform(map: ChannelMap, gain: f64) -> Volume {
        let gains = vec![gain; map.len()];
        Volume { map, gains }
    }

    /// The loudest channel's gain (1.0 for no channels).
    pub fn loudest(&self) -> f64 {
        self.gains.iter().copied().reduce(f64::max).unwrap_or(1.0)
    }

    /// The gains for a stream with channel map `map`: as stored when the maps match,
    /// else the loudest channel on every channel (no balance is carried across layouts).
    pub fn gains_for(&self, map: &ChannelMap) -> Vec<f64> {
        if &self.map == map {
            return self.gains.clone();
        }
        vec![self.loudest(); map.len().max(1)]
    }
}

/// One remembered kind of stream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Entry {
    /// Per-channel volume with the channel map it was set in.
    pub volume: Option<Volume>,
    /// Device name.
    pub device: Option<String>,
    /// Mute.
    pub mute: Option<bool>,
}

/// How a write of several entries combines them with the stored ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Drop every stored entry first.
    Set,
    /// Add only names not stored yet.
    Merge,
    /// Overwrite the names given.
    Replace,
}

/// Why the store refused a change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The change would keep more than [`MAX_ENTRIES`] entries.
    #[error("more than {MAX_ENTRIES} entries")]
    TooMany,
}

/// Why a restore file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// Not TOML of the expected shape.
    #[error("{0}")]
    Toml(String),
    /// An entry's channel list does not parse.
    #[error("entry \"{entry}\": {reason}")]
    Channels {
        /// Entry name.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An entry's channel and volume counts differ (or are out of range).
    #[error("entry \"{entry}\": {channels} channels but {volumes} volumes")]
    Count {
        /// Entry name.
        entry: String,
        /// Channels listed.
        channels: usize,
        /// Volumes listed.
        volumes: usize,
    },
    /// An entry has channels without volumes or the other way round, or both units.
    #[error("entry \"{0}\": channels and one volume list go together")]
    Unpaired(String),
}

/// The properties a stream's kind is formed from; any may be missing.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamProps<'a> {
    /// `media.role` ("music", "event", …).
    pub role: Option<&'a str>,
    /// `application.id`.
    pub app_id: Option<&'a str>,
    /// `application.name` (the native protocol's client name).
    pub app_name: Option<&'a str>,
    /// `media.name` (the native protocol's stream name).
    pub media_name: Option<&'a str>,
}

/// The kind of a stream, from its properties (PulseAudio's stream-group order).
pub fn stream_key(props: &StreamProps<'_>, playback: bool) -> Option<String> {
    let prefix = if playback {
        "sink-input"
    } else {
        "source-output"
    };
    [
        (props.role, "media-role"),
        (props.app_id, "application-id"),
        (props.app_name, "application-name"),
        (props.media_name, "media-name"),
    ]
    .into_iter()
    .find_map(|(p, what)| {
        p.filter(|v| !v.is_empty())
            .map(|v| format!("{prefix}-by-{what}:{v}"))
    })
    .filter(|k| k.len() <= MAX_NAME)
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
    /// Per-channel linear gain (1.0 = 100 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gains: Option<Vec<f64>>,
    /// Per-channel volume in PulseAudio units (65536 = 100 %), as files written before
    /// the store moved out of the PulseAudio front-end hold it; read, never written.
    #[serde(default, skip_serializing)]
    volume: Option<Vec<u32>>,
}

/// The file: a table of entries by name.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    entry: BTreeMap<String, FileEntry>,
}

/// A PulseAudio-unit volume (the old file's unit, cubic) as a linear gain.
fn old_volume_to_gain(raw: u32) -> f64 {
    let f = raw.min(OLD_VOLUME_MAX) as f64 / OLD_VOLUME_NORM;
    f * f * f
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

    /// This store, ready to be shared by the front-ends.
    pub fn shared(self) -> SharedStore {
        Arc::new(Mutex::new(self))
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

    /// Stores `entries` as `mode` says; returns the names it stored. Nothing changes
    /// when the result would hold more than [`MAX_ENTRIES`].
    pub fn write(
        &mut self,
        mode: WriteMode,
        entries: Vec<(String, Entry)>,
    ) -> Result<Vec<String>, StoreError> {
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
            return Err(StoreError::TooMany);
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

fn parse_file(text: &str) -> Result<BTreeMap<String, Entry>, FileError> {
    let f: FileFormat = toml::from_str(text).map_err(|e| FileError::Toml(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (name, fe) in f.entry.into_iter().take(MAX_ENTRIES) {
        let gains = match (fe.gains, fe.volume) {
            (Some(g), None) => Some(g),
            (None, Some(v)) => Some(v.into_iter().map(old_volume_to_gain).collect()),
            (None, None) => None,
            (Some(_), Some(_)) => return Err(FileError::Unpaired(name)),
        };
        let volume = match (fe.channels, gains) {
            (Some(c), Some(gains)) => {
                let map: ChannelMap = c.parse().map_err(|e| FileError::Channels {
                    entry: name.clone(),
                    reason: format!("{e}"),
                })?;
                if map.len() != gains.len() || gains.is_empty() || gains.len() > MAX_CHANNELS {
                    return Err(FileError::Count {
                        entry: name,
                        channels: map.len(),
                        volumes: gains.len(),
                    });
                }
                let gains = gains
                    .into_iter()
                    .map(|g| if g.is_finite() { g.max(0.0) } else { 0.0 })
                    .collect();
                Some(Volume { map, gains })
            }
            (None, None) => None,
            _ => return Err(FileError::Unpaired(name)),
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
                let (channels, gains) = match &e.volume {
                    Some(v) => (Some(v.map.to_string()), Some(v.gains.clone())),
                    None => (None, None),
                };
                (
                    k.clone(),
                    FileEntry {
                        device: e.device.clone(),
                        mute: e.mute,
                        channels,
                        gains,
                        volume: None,
                    },
                )
            })
            .collect(),
    };
    let body = toml::to_string(&f).unwrap_or_default();
    format!(
        "# quaverd's remembered stream volumes, mutes and devices (stream restore).\n\
         # Rewritten by quaverd; gains are linear (1.0 = 100 %); an older file's `volume`\n\
         # (PulseAudio units, 65536 = 100 %) is read too.\n{body}"
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

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_dsp::ChannelPosition as P;

    #[test]
    fn keys_follow_pulseaudio_order() {
        let mut p = StreamProps {
            media_name: Some("song.flac"),
            ..StreamProps::default()
        };
        assert_eq!(
            stream_key(&p, true).as_deref(),
            Some("sink-input-by-media-name:song.flac")
        );
        p.app_name = Some("mpv");
        assert_eq!(
            stream_key(&p, false).as_deref(),
            Some("source-output-by-application-name:mpv")
        );
        p.app_id = Some("io.mpv.Mpv");
        p.role = Some("music");
        assert_eq!(
            stream_key(&p, true).as_deref(),
            Some("sink-input-by-media-role:music")
        );
        p.role = Some("");
        assert_eq!(
            stream_key(&p, true).as_deref(),
            Some("sink-input-by-application-id:io.mpv.Mpv")
        );
        assert_eq!(stream_key(&StreamProps::default(), true), None);
        let long = "x".repeat(MAX_NAME);
        let p = StreamProps {
            media_name: Some(&long),
            ..StreamProps::default()
        };
        assert_eq!(stream_key(&p, true), None);
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
        assert_eq!(s.write(WriteMode::Set, many), Err(StoreError::TooMany));
        assert!(s.entries().is_empty(), "a refused write changes nothing");
        for i in 0..MAX_ENTRIES {
            assert!(s.remember(&i.to_string(), |e| e.mute = Some(true)));
        }
        assert!(!s.remember("one more", |e| e.mute = Some(true)));
        assert!(!s.remember("0", |e| e.mute = Some(true)), "unchanged");
        assert!(s.remember("0", |e| e.mute = Some(false)));
    }

    #[test]
    fn volume_is_remapped_by_its_loudest_channel() {
        let v = Volume {
            map: ChannelMap::stereo(),
            gains: vec![0.25, 0.5],
        };
        assert_eq!(v.gains_for(&ChannelMap::stereo()), vec![0.25, 0.5]);
        assert_eq!(v.gains_for(&ChannelMap::mono()), vec![0.5]);
        assert_eq!(v.loudest(), 0.5);
        assert_eq!(Volume::uniform(ChannelMap::stereo(), 0.3).gains, [0.3, 0.3]);
    }

    fn wait_for(path: &Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !path.exists() {
            assert!(std::time::Instant::now() < deadline, "never saved");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn the_file_round_trips_and_a_bad_one_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/quaver/restore.toml");
        let mut s = Store::open(&path);
        let map = ChannelMap(vec![P::FL, P::LFE]);
        s.remember("sink-input-by-application-name:mpv", |e| {
            e.volume = Some(Volume {
                map,
                gains: vec![0.1234567890123, 2.5],
            });
            e.device = Some("null-sink".into());
            e.mute = Some(false);
        });
        wait_for(&path);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("channels = \"FL,LFE\""), "{text}");
        assert!(text.contains("gains = [0.1234567890123, 2.5]"), "{text}");
        let again = Store::open(&path);
        assert_eq!(again.entries(), s.entries());

        for broken in [
            "[entry.x]\nvolume = [1]\n",
            "[entry.x]\nchannels = \"FL\"\nvolume = [1]\ngains = [1.0]\n",
            "[entry.x]\nchannels = \"FL,FR\"\ngains = [1.0]\n",
            "[entry.x]\nchannels = \"nowhere\"\ngains = [1.0]\n",
            "[entry.x]\nloudness = 3\n",
        ] {
            std::fs::write(&path, broken).unwrap();
            let s = Store::open(&path);
            assert!(s.entries().is_empty(), "{broken}");
            assert!(path.with_extension("toml.bad").exists(), "{broken}");
            assert!(!path.exists(), "{broken}");
        }
    }

    #[test]
    fn a_file_written_before_the_move_still_loads() {
        // As the PulseAudio front-end's store wrote it: volumes in PulseAudio units.
        let old = "# quaverd's remembered stream volumes, mutes and devices (stream restore).\n\
                   # Rewritten by quaverd; volumes are PulseAudio units (65536 = 100 %).\n\
                   [entry.\"sink-input-by-application-name:mpv\"]\n\
                   device = \"null-sink\"\n\
                   mute = false\n\
                   channels = \"FL,LFE\"\n\
                   volume = [40000, 65536]\n\
                   \n\
                   [entry.\"sink-input-by-media-role:event\"]\n\
                   mute = true\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("restore.toml");
        std::fs::write(&path, old).unwrap();
        let s = Store::open(&path);
        let mpv = s.get("sink-input-by-application-name:mpv").unwrap();
        let v = mpv.volume.as_ref().unwrap();
        assert_eq!(v.map, ChannelMap(vec![P::FL, P::LFE]));
        let want = (40000.0f64 / 65536.0).powi(3);
        assert!((v.gains[0] - want).abs() < 1e-12, "{:?}", v.gains);
        assert_eq!(v.gains[1], 1.0);
        assert_eq!(mpv.device.as_deref(), Some("null-sink"));
        assert_eq!(mpv.mute, Some(false));
        let event = s.get("sink-input-by-media-role:event").unwrap();
        assert_eq!((event.volume.as_ref(), event.mute), (None, Some(true)));
        assert!(path.exists(), "an old file is not set aside");
    }
}
