//! Control: defaults, volumes, mutes, suspend, move, kill, EXIT.

use super::{Reply, engine_err};
use crate::conn::Conn;
use crate::io::shared::ConnMsg;
use crate::state::{Device, record_source_index, stream_target};
use crate::wire::convert::cstr;
use crate::wire::convert::cvolume_to_linear;
use pulseaudio::protocol::{
    self as pa, ChannelVolume, Command, PlaybackStreamMovedParams, PulseError,
    RecordStreamMovedParams, SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use quaver_engine::{Graph, NodeId, NodeKind};

impl Conn {
    /// KILL_SINK_INPUT / KILL_SOURCE_OUTPUT (`kind` says which): a module's stream unloads
    /// its module; another client's stream is killed by its own connection.
    pub(crate) fn kill_stream_request(&mut self, seq: u32, idx: u32, kind: NodeKind) -> Reply {
        let srv = self.srv.clone();
        let is_stream = srv.engine.graph().nodes.get(&idx).is_some_and(|n| {
            n.kind == kind || (kind == NodeKind::RecordStream && crate::state::is_source_output(n))
        });
        let (owner, module) = {
            let st = srv.lock();
            let module = st
                .modules
                .iter()
                .find(|(_, m)| is_stream && m.nodes.contains(&idx))
                .map(|(&i, _)| i);
            (st.streams.get(&idx).map(|s| s.client), module)
        };
        if let (None, Some(module)) = (owner, module) {
            // A module's stream (a loopback): PulseAudio unloads the module.
            self.unload_module_at(module)?;
            self.out().ack(seq);
            return Ok(());
        }
        let owner = owner.ok_or(PulseError::NoEntity)?;
        self.out().ack(seq);
        if owner == self.client {
            self.kill_stream(idx);
        } else if let Some(c) = srv.lock().clients.get(&owner) {
            c.conn.post(ConnMsg::KillStream(idx));
        }
        Ok(())
    }

    /// EXIT.
    pub(crate) fn exit(&mut self, seq: u32) -> Reply {
        let Some(exit) = self.srv.opts.on_exit else {
            tracing::info!(
                "pulse client {}: EXIT refused ([pulse] allow_exit = false)",
                self.client
            );
            return Err(PulseError::AccessDenied);
        };
        tracing::info!("pulse client {} asked the server to exit", self.client);
        // The answer goes out now: the stop closes every connection soon after.
        self.out().ack(seq);
        let _ = self.flush_out();
        exit();
        Ok(())
    }

    /// SET_DEFAULT_SINK.
    pub(crate) fn set_default_sink(&mut self, seq: u32, name: std::ffi::CString) -> Reply {
        self.set_default(seq, name, true)
    }

    /// SET_DEFAULT_SOURCE.
    pub(crate) fn set_default_source(&mut self, seq: u32, name: std::ffi::CString) -> Reply {
        self.set_default(seq, name, false)
    }

    /// The default sink (`sink`) or source becomes the device named `name`, and the
    /// streams that follow the default move to it.
    fn set_default(&mut self, seq: u32, name: std::ffi::CString, sink: bool) -> Reply {
        let srv = self.srv.clone();
        let name = name.to_str().map_err(|_| PulseError::Invalid)?;
        let graph = srv.engine.graph();
        let d = if sink {
            srv.sink_by_name(&graph, name)
        } else {
            srv.source_by_name(&graph, name)
        }
        .ok_or(PulseError::NoEntity)?;
        {
            let mut policy = srv
                .policy
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if sink {
                policy.set_default_sink(Some(d.name.clone()));
            } else {
                policy.set_default_source(Some(d.name.clone()));
            }
        }
        // The default follows the choice unless its port is unplugged (the policy's
        // order); subscribers hear of the set either way, as from PulseAudio.
        if !srv.check_defaults() {
            srv.broadcast(Fac::Server, Ev::Changed, u32::MAX);
        }
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SINK_VOLUME.
    pub(crate) fn set_sink_volume(&mut self, seq: u32, p: pa::SetDeviceVolumeParams) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let d = srv
            .find_sink(
                &graph,
                p.device_index,
                p.device_name.as_ref().and_then(|n| n.to_str().ok()),
            )
            .ok_or(PulseError::NoEntity)?;
        srv.engine
            .set_volume(&d.name, Some(cvolume_to_linear(&p.volume)), None)
            .map_err(engine_err)?;
        srv.lock().device_volumes.insert((false, d.index), p.volume);
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SOURCE_VOLUME.
    pub(crate) fn set_source_volume(&mut self, seq: u32, p: pa::SetDeviceVolumeParams) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let d = srv
            .find_source(
                &graph,
                p.device_index,
                p.device_name.as_ref().and_then(|n| n.to_str().ok()),
            )
            .ok_or(PulseError::NoEntity)?;
        srv.lock().device_volumes.insert((true, d.index), p.volume);
        if d.monitor {
            srv.broadcast(Fac::Source, Ev::Changed, d.index);
        } else {
            srv.engine
                .set_volume(&d.name, Some(cvolume_to_linear(&p.volume)), None)
                .map_err(engine_err)?;
        }
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SINK_MUTE.
    pub(crate) fn set_sink_mute(&mut self, seq: u32, p: pa::SetDeviceMuteParams) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let d = srv
            .find_sink(
                &graph,
                p.device_index,
                p.device_name.as_ref().and_then(|n| n.to_str().ok()),
            )
            .ok_or(PulseError::NoEntity)?;
        srv.engine
            .set_volume(&d.name, None, Some(p.mute))
            .map_err(engine_err)?;
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SOURCE_MUTE.
    pub(crate) fn set_source_mute(&mut self, seq: u32, p: pa::SetDeviceMuteParams) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let d = srv
            .find_source(
                &graph,
                p.device_index,
                p.device_name.as_ref().and_then(|n| n.to_str().ok()),
            )
            .ok_or(PulseError::NoEntity)?;
        if d.monitor {
            srv.lock().monitor_mute.insert(d.index, p.mute);
            srv.broadcast(Fac::Source, Ev::Changed, d.index);
        } else {
            srv.engine
                .set_volume(&d.name, None, Some(p.mute))
                .map_err(engine_err)?;
        }
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SINK_INPUT_VOLUME.
    pub(crate) fn set_sink_input_volume(
        &mut self,
        seq: u32,
        p: pa::SetStreamVolumeParams,
    ) -> Reply {
        self.set_stream_volume(p.index, NodeKind::PlaybackStream, Some(p.volume), None)?;
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SOURCE_OUTPUT_VOLUME.
    pub(crate) fn set_source_output_volume(
        &mut self,
        seq: u32,
        p: pa::SetStreamVolumeParams,
    ) -> Reply {
        self.set_stream_volume(p.index, NodeKind::RecordStream, Some(p.volume), None)?;
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SINK_INPUT_MUTE.
    pub(crate) fn set_sink_input_mute(&mut self, seq: u32, p: pa::SetStreamMuteParams) -> Reply {
        self.set_stream_volume(p.index, NodeKind::PlaybackStream, None, Some(p.mute))?;
        self.out().ack(seq);
        Ok(())
    }

    /// SET_SOURCE_OUTPUT_MUTE.
    pub(crate) fn set_source_output_mute(&mut self, seq: u32, p: pa::SetStreamMuteParams) -> Reply {
        self.set_stream_volume(p.index, NodeKind::RecordStream, None, Some(p.mute))?;
        self.out().ack(seq);
        Ok(())
    }

    /// SUSPEND_SINK.
    pub(crate) fn suspend_sink(&mut self, seq: u32, p: pa::SuspendParams) -> Reply {
        self.suspend_devices(&p, true)?;
        self.out().ack(seq);
        Ok(())
    }

    /// SUSPEND_SOURCE.
    pub(crate) fn suspend_source(&mut self, seq: u32, p: pa::SuspendParams) -> Reply {
        self.suspend_devices(&p, false)?;
        self.out().ack(seq);
        Ok(())
    }

    /// MOVE_SINK_INPUT.
    pub(crate) fn move_sink_input(&mut self, seq: u32, p: pa::MoveStreamParams) -> Reply {
        self.move_stream(p.index, p.device_index, p.device_name, true)?;
        self.out().ack(seq);
        Ok(())
    }

    /// MOVE_SOURCE_OUTPUT.
    pub(crate) fn move_source_output(&mut self, seq: u32, p: pa::MoveStreamParams) -> Reply {
        self.move_stream(p.index, p.device_index, p.device_name, false)?;
        self.out().ack(seq);
        Ok(())
    }

    /// KILL_CLIENT.
    pub(crate) fn kill_client(&mut self, seq: u32, idx: u32) -> Reply {
        let srv = self.srv.clone();
        let conn = srv
            .lock()
            .clients
            .get(&idx)
            .map(|c| c.conn.clone())
            .ok_or(PulseError::NoEntity)?;
        self.out().ack(seq);
        if idx == self.client {
            self.closing = true;
        } else {
            conn.post(ConnMsg::Kill);
        }
        Ok(())
    }

    pub(crate) fn set_stream_volume(
        &self,
        index: u32,
        kind: NodeKind,
        volume: Option<ChannelVolume>,
        mute: Option<bool>,
    ) -> Reply {
        let graph = self.srv.engine.graph();
        if kind == NodeKind::RecordStream
            && graph.nodes.get(&index).is_some_and(crate::state::is_loop)
        {
            // A loopback's capture side has a volume of its own (the module's).
            let capture = self
                .srv
                .lock()
                .modules
                .values()
                .find(|m| m.nodes.contains(&index))
                .and_then(|m| m.capture.clone())
                .ok_or(PulseError::NoEntity)?;
            capture.update(volume.map(|v| cvolume_to_linear(&v)), mute);
            self.srv.broadcast(Fac::SourceOutput, Ev::Changed, index);
            return Ok(());
        }
        graph
            .nodes
            .get(&index)
            .filter(|n| n.kind == kind)
            .ok_or(PulseError::NoEntity)?;
        if let Some(v) = &volume
            && let Some(s) = self.srv.lock().streams.get_mut(&index)
        {
            let n = v.channels().len();
            if n != s.spec.channels as usize && n != 1 {
                return Err(PulseError::Invalid);
            }
            s.cvolume = if n == 1 {
                crate::wire::convert::uniform_cvolume(
                    s.spec.channels as usize,
                    cvolume_to_linear(v),
                )
            } else {
                *v
            };
        }
        self.srv
            .engine
            .set_volume(
                &index.to_string(),
                volume.map(|v| cvolume_to_linear(&v)),
                mute,
            )
            .map_err(engine_err)?;
        self.srv.remember(index, |e, s| {
            if volume.is_some() {
                e.volume = Some(crate::ext::restore::volume_from_pa(&s.map, &s.cvolume));
            }
            if mute.is_some() {
                e.mute = mute;
            }
        });
        Ok(())
    }

    /// SUSPEND_SINK / SUSPEND_SOURCE (`sink`): records the request for the named
    /// device, or for every sink (source) when none is named, as `pasuspender` asks;
    /// the engine's devices are held suspended while any request stands (they share
    /// one clock, so they suspend together; streams wait and lose nothing).
    pub(crate) fn suspend_devices(&self, p: &pa::SuspendParams, sink: bool) -> Reply {
        let srv = &self.srv;
        let graph = srv.engine.graph();
        // No index and an empty name (libpulse's "by index" with PA_INVALID_INDEX, as
        // pasuspender sends) or no name at all: every device.
        let name = p
            .device_name
            .as_ref()
            .map(|n| n.to_str().unwrap_or("\u{fffd}"));
        let all = p.device_index.is_none() && name.is_none_or(str::is_empty);
        let targets: Vec<NodeId> = if !all {
            let dev = if sink {
                srv.find_sink(&graph, p.device_index, name)
            } else {
                srv.find_source(&graph, p.device_index, name)
            };
            let dev = dev.ok_or(PulseError::NoEntity)?;
            if graph
                .nodes
                .get(&dev.node)
                .is_some_and(|n| n.device.is_none())
            {
                return self.suspend_module_node(&dev, sink, p.suspend);
            }
            let node = dev.node;
            vec![node]
        } else if sink {
            graph
                .nodes
                .values()
                .filter(|n| n.kind == NodeKind::DeviceSink)
                .map(|n| n.id)
                .collect()
        } else {
            srv.sources(&graph).iter().map(|d| d.node).collect()
        };
        let held = {
            let mut st = srv.lock();
            for n in targets {
                if p.suspend {
                    st.suspend_requests.insert((sink, n));
                } else {
                    st.suspend_requests.remove(&(sink, n));
                }
            }
            // Requests for devices that are gone no longer count.
            st.suspend_requests
                .retain(|(_, n)| graph.nodes.contains_key(n));
            !st.suspend_requests.is_empty()
        };
        let was = srv.engine.held();
        let suspended = srv.engine.hold(held).map_err(engine_err)?;
        if held && !suspended {
            tracing::warn!(
                "pulse: client {}: devices did not suspend in time; they will at the end of the running cycle",
                self.client
            );
        }
        if was != held {
            tracing::info!(
                "pulse: client {}: devices {} on request",
                self.client,
                if held { "suspended" } else { "resumed" }
            );
        }
        Ok(())
    }

    /// Suspends a module's sink or source (a null sink, a remap) on its own: it has no
    /// clock, so the engine stops it and the streams that only feed it or only read it,
    /// and the card plays on. A monitor follows its sink, as in PulseAudio.
    pub(crate) fn suspend_module_node(&self, dev: &Device, sink: bool, on: bool) -> Reply {
        if dev.monitor {
            tracing::info!(
                "pulse: client {}: {} is a monitor; it is suspended with its sink",
                self.client,
                dev.name
            );
            return Err(PulseError::NotSupported);
        }
        let changed = self
            .srv
            .engine
            .suspend_node(dev.node, on)
            .map_err(engine_err)?;
        if changed {
            tracing::info!(
                "pulse: client {}: {} {} {} on request",
                self.client,
                if sink { "sink" } else { "source" },
                dev.name,
                if on { "suspended" } else { "resumed" }
            );
            if sink {
                // Its monitor's state changed with it.
                self.srv.broadcast(Fac::Source, Ev::Changed, dev.index);
            }
            self.srv.post_all(ConnMsg::NodeSuspended(dev.node, on));
        }
        Ok(())
    }

    /// Tells this client's streams on the sink or source `node` (every stream: `None`,
    /// the devices) that it was suspended or resumed (PLAYBACK/RECORD_STREAM_SUSPENDED,
    /// what `pacat -v` prints as "Stream device suspended.").
    pub(crate) fn tell_suspended(&mut self, node: Option<NodeId>, on: bool) {
        let graph = self.srv.engine.graph();
        let on_node = |stream: NodeId| node.is_none() || stream_target(&graph, stream) == node;
        let play: Vec<u32> = (self.playback.values())
            .filter(|p| on_node(p.node))
            .map(|p| p.channel)
            .collect();
        let rec: Vec<u32> = (self.record.values())
            .filter(|r| on_node(r.node))
            .map(|r| r.channel)
            .collect();
        let params = |stream_index| pa::StreamSuspendedParams {
            stream_index,
            suspended: on,
        };
        for channel in play {
            self.out()
                .command(&Command::PlaybackStreamSuspended(params(channel)));
        }
        for channel in rec {
            self.out()
                .command(&Command::RecordStreamSuspended(params(channel)));
        }
    }

    /// Whether the sink or source on `node` is suspended: all devices held, or that
    /// node on its own.
    pub(crate) fn is_suspended(&self, graph: &Graph, node: NodeId) -> bool {
        self.srv.engine.held() || graph.nodes.get(&node).is_some_and(|n| n.suspended)
    }

    pub(crate) fn move_stream(
        &self,
        index: Option<u32>,
        dev_index: Option<u32>,
        dev_name: Option<std::ffi::CString>,
        playback: bool,
    ) -> Reply {
        let srv = &self.srv;
        let index = index.ok_or(PulseError::Invalid)?;
        let graph = srv.engine.graph();
        let name = dev_name.as_ref().and_then(|n| n.to_str().ok());
        let dev = if playback {
            srv.find_sink(&graph, dev_index, name)
        } else {
            srv.find_source(&graph, dev_index, name)
        }
        .ok_or(PulseError::NoEntity)?;
        srv.move_stream(&graph, index, &dev, playback)?;
        if let Some(s) = srv.lock().streams.get_mut(&index) {
            s.follows_default = false;
            s.pinned = false;
        }
        srv.remember(index, |e, _| e.device = Some(dev.name.clone()));
        Ok(())
    }

    pub(crate) fn send_moved(&mut self, node: NodeId) {
        let graph = self.srv.engine.graph();
        if let Some(p) = self.playback.values().find(|p| p.node == node) {
            let Some(sink) = stream_target(&graph, node) else {
                return;
            };
            let cmd = Command::PlaybackStreamMoved(PlaybackStreamMovedParams {
                stream_index: p.channel,
                device_index: sink,
                device_name: cstr(&graph.nodes[&sink].name),
                device_suspended: self.is_suspended(&graph, sink),
                buffer_attr: p.attr,
                configured_sink_latency: p.configured_usec,
            });
            self.out().command(&cmd);
        } else if let Some(r) = self.record.values().find(|r| r.node == node) {
            let Some(src) = record_source_index(&graph, node) else {
                return;
            };
            let Some(dev) = self.srv.source_by_index(&graph, src) else {
                return;
            };
            let cmd = Command::RecordStreamMoved(RecordStreamMovedParams {
                stream_index: r.channel,
                device_index: dev.index,
                device_name: cstr(&dev.name),
                device_suspended: self.is_suspended(&graph, dev.node),
                buffer_attr: r.attr,
                configured_source_latency: r.configured_usec,
            });
            self.out().command(&cmd);
        }
    }

    pub(crate) fn kill_stream(&mut self, node: NodeId) {
        if let Some(ch) = self
            .playback
            .iter()
            .find(|(_, p)| p.node == node)
            .map(|(c, _)| *c)
        {
            self.playback.remove(&ch);
            self.drop_stream(node);
            self.out().command(&Command::PlaybackStreamKilled(ch));
        } else if let Some(ch) = self
            .record
            .iter()
            .find(|(_, r)| r.node == node)
            .map(|(c, _)| *c)
        {
            self.record.remove(&ch);
            self.drop_stream(node);
            self.out().command(&Command::RecordStreamKilled(ch));
        }
    }
}
