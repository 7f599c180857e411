//! Stream restore on the live streams: the entry for a new stream, a client's change
//! remembered, streams following a device that appears, and written entries applied.
//! The store itself (`restore.rs`) sits below the state; this half works on it.

use crate::ext::restore::{Entry, stream_key, volume_for};
use crate::io::shared::ConnMsg;
use crate::state::{Server, StreamIo, StreamRec, record_source_index, stream_target};
use crate::wire::convert::cvolume_to_linear;
use pulseaudio::protocol::{ChannelMap as PaMap, Props};
use quaver_engine::graph::Graph;
use quaver_engine::{NodeId, NodeKind};
use std::sync::PoisonError;

impl Server {
    /// The remembered entry for a new stream with proplist `props`.
    pub fn restore_for(&self, props: &Props, playback: bool) -> Option<Entry> {
        let store = self.restore.as_ref()?;
        let key = stream_key(props, playback)?;
        let e = store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if e.is_some() {
            tracing::debug!("stream restore: new stream of {key} restored");
        }
        e
    }

    /// Records a client's change to stream `node` for the stream's kind (`f` edits the
    /// entry, given the stream) and tells the extension's subscribers.
    pub fn remember(&self, node: NodeId, f: impl FnOnce(&mut Entry, &StreamRec)) {
        let Some(store) = &self.restore else {
            return;
        };
        let st = self.lock();
        let Some(s) = st.streams.get(&node) else {
            return;
        };
        let playback = matches!(s.io, StreamIo::Play(_));
        let Some(key) = stream_key(&s.props, playback) else {
            return;
        };
        let changed = store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remember(&key, |e| f(e, s));
        drop(st);
        if changed {
            tracing::debug!("stream restore: remembered {key}");
            self.restore_changed();
        }
    }

    /// Tells every client subscribed to the extension that the entries changed.
    pub fn restore_changed(&self) {
        self.post_all(ConnMsg::RestoreEvent);
    }

    /// Device node `dev_node` appeared (plugged in, module loaded): the streams whose
    /// kind remembers it move there, except those whose client named another device
    /// (PulseAudio's `on_hotplug`). A stream that had to leave the device when it went
    /// away comes back to it.
    pub fn restore_device_appeared(&self, graph: &Graph, dev_node: NodeId) {
        let Some(store) = &self.restore else {
            return;
        };
        let Some(n) = graph.nodes.get(&dev_node).filter(|n| !n.gone) else {
            return;
        };
        let (playback, dev) = match n.kind {
            NodeKind::DeviceSink => (true, self.sink_by_name(graph, &n.name)),
            NodeKind::DeviceSource => (false, self.source_by_name(graph, &n.name)),
            _ => return,
        };
        let Some(dev) = dev else {
            return;
        };
        let movers: Vec<NodeId> = {
            let st = self.lock();
            let store = store.lock().unwrap_or_else(PoisonError::into_inner);
            st.streams
                .iter()
                .filter(|(_, s)| !s.pinned && matches!(s.io, StreamIo::Play(_)) == playback)
                .filter(|&(&id, s)| {
                    let here = if playback {
                        stream_target(graph, id) == Some(dev_node)
                    } else {
                        record_source_index(graph, id) == Some(dev.index)
                    };
                    !here
                        && stream_key(&s.props, playback)
                            .and_then(|k| store.get(&k))
                            .and_then(|e| e.device.as_deref())
                            == Some(n.name.as_str())
                })
                .map(|(&id, _)| id)
                .collect()
        };
        for id in movers {
            if self.move_stream(graph, id, &dev, playback).is_ok() {
                tracing::info!("stream restore: stream {id} back on {}", dev.name);
                if let Some(s) = self.lock().streams.get_mut(&id) {
                    s.follows_default = false;
                }
            }
        }
    }

    /// Gives the streams now playing (or recording) whose kind is in `names` their
    /// entry: volume, mute, and device when it exists (a WRITE with "apply").
    pub fn apply_restore(&self, names: &[String]) {
        let Some(store) = &self.restore else {
            return;
        };
        let targets: Vec<(NodeId, bool, PaMap, Entry)> = {
            let st = self.lock();
            let store = store.lock().unwrap_or_else(PoisonError::into_inner);
            st.streams
                .iter()
                .filter_map(|(&id, s)| {
                    let playback = matches!(s.io, StreamIo::Play(_));
                    let key = stream_key(&s.props, playback)?;
                    if !names.contains(&key) {
                        return None;
                    }
                    Some((id, playback, s.map, store.get(&key)?.clone()))
                })
                .collect()
        };
        let graph = self.engine.graph();
        for (id, playback, map, e) in targets {
            let name = id.to_string();
            if let Some(v) = volume_for(&e, &map) {
                if let Some(s) = self.lock().streams.get_mut(&id) {
                    s.cvolume = v;
                }
                if let Err(err) = self
                    .engine
                    .set_volume(&name, Some(cvolume_to_linear(&v)), None)
                {
                    tracing::debug!("stream restore: volume of stream {id}: {err}");
                }
            }
            if let Some(m) = e.mute
                && let Err(err) = self.engine.set_volume(&name, None, Some(m))
            {
                tracing::debug!("stream restore: mute of stream {id}: {err}");
            }
            let Some(d) = &e.device else {
                continue;
            };
            let dev = if playback {
                self.sink_by_name(&graph, d)
            } else {
                self.source_by_name(&graph, d)
            };
            if let Some(dev) = dev
                && self.move_stream(&graph, id, &dev, playback).is_ok()
                && let Some(s) = self.lock().streams.get_mut(&id)
            {
                s.follows_default = false;
            }
        }
    }
}
