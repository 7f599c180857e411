//! Stream restore for native streams: the policy's store (shared with the PulseAudio
//! front-end) gives a new stream its kind's remembered volume, mute and device, and a
//! client's later change of a stream's volume or mute is remembered for its kind.
//!
//! A native stream's kind is formed as PulseAudio's: the client name stands for
//! `application.name` and the stream name for `media.name`, so a `quaver play` stream
//! and a PulseAudio stream of an application with the same name share their memory.

use crate::NativeServer;
use quaver_dsp::ChannelMap;
use quaver_engine::{NodeId, NodeKind};
use quaver_policy::restore::{Entry, StreamProps, Volume, stream_key};
use quaver_protocol::message::{Direction, MAX_VOLUME, StreamParams};
use std::sync::PoisonError;

/// What stream restore decided for a stream being created.
#[derive(Debug, Default)]
pub(crate) struct Restored {
    /// The stream's kind, when it has one and restore is on.
    pub key: Option<String>,
    /// Its kind's entry, if one is remembered.
    pub entry: Option<Entry>,
}

impl Restored {
    /// The remembered device, if the stream did not name a node itself and the device
    /// is a node of the kind the stream links to.
    pub fn device(&self, p: &StreamParams, graph: &quaver_engine::Graph) -> Option<String> {
        if p.target.is_some() || p.monitor_of.is_some() {
            return None;
        }
        let d = self.entry.as_ref()?.device.as_deref()?;
        let want = match p.direction {
            Direction::Playback => NodeKind::DeviceSink,
            Direction::Record => NodeKind::DeviceSource,
        };
        graph
            .nodes
            .values()
            .find(|n| n.name == d && n.kind == want && !n.gone)
            .map(|n| n.name.clone())
    }

    /// The remembered linear volume, if the stream did not ask for its own.
    pub fn volume(&self, p: &StreamParams) -> Option<f32> {
        if p.volume.is_some() {
            return None;
        }
        let v = self.entry.as_ref()?.volume.as_ref()?;
        Some((v.loudest() as f32).clamp(0.0, MAX_VOLUME))
    }

    /// Whether the stream starts muted.
    pub fn muted(&self) -> bool {
        self.entry.as_ref().and_then(|e| e.mute) == Some(true)
    }
}

impl NativeServer {
    /// The kind of a stream `client` opens with `p`, and its remembered entry.
    pub(crate) fn restored(&self, client: u32, p: &StreamParams) -> Restored {
        let Some(store) = &self.opts.restore else {
            return Restored::default();
        };
        let app = self
            .clients
            .lock()
            .expect("poisoned")
            .get(&client)
            .map(|c| c.name.clone());
        let props = StreamProps {
            app_name: app.as_deref(),
            media_name: Some(&p.name),
            ..StreamProps::default()
        };
        let Some(key) = stream_key(&props, p.direction == Direction::Playback) else {
            return Restored::default();
        };
        let entry = store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if entry.is_some() {
            tracing::debug!("stream restore: new native stream of {key} restored");
        }
        Restored {
            key: Some(key),
            entry,
        }
    }

    /// Records a client's volume or mute change on node `node` (a name or an id), when
    /// it is a native stream with a kind.
    pub(crate) fn remember(&self, node: &str, volume: Option<f32>, mute: Option<bool>) {
        let Some(store) = &self.opts.restore else {
            return;
        };
        let Some(id) = self.engine.graph().node_by_name(node).map(|n| n.id) else {
            return;
        };
        let Some((key, map)) = self.kind_of(id) else {
            return;
        };
        let changed = store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remember(&key, |e| {
                if let Some(v) = volume {
                    e.volume = Some(Volume::uniform(map, v as f64));
                }
                if mute.is_some() {
                    e.mute = mute;
                }
            });
        if changed {
            tracing::debug!("stream restore: remembered {key}");
        }
    }

    /// The kind and channel map of native stream `id`, whichever client owns it.
    fn kind_of(&self, id: NodeId) -> Option<(String, ChannelMap)> {
        let clients = self.clients.lock().expect("poisoned");
        clients.values().find_map(|c| c.kinds.get(&id).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            volume: Some(Volume {
                map: ChannelMap::stereo(),
                gains: vec![0.25, 0.5],
            }),
            device: Some("b".into()),
            mute: Some(true),
        }
    }

    #[test]
    fn the_streams_own_choices_win() {
        let r = Restored {
            key: Some("k".into()),
            entry: Some(entry()),
        };
        let mut p = StreamParams::playback("p", 48_000, ChannelMap::stereo());
        assert_eq!(r.volume(&p), Some(0.5));
        assert!(r.muted());
        p.volume = Some(0.9);
        assert_eq!(r.volume(&p), None);
        let none = Restored::default();
        assert_eq!(none.volume(&p), None);
        assert!(!none.muted());
    }
}
