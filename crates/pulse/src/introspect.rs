//! PulseAudio's view of the graph: sink, source, sink-input, source-output, client and
//! module records built from a graph snapshot and the front-end's own state.

use crate::state::{
    Device, Server, State, StreamIo, StreamRec, monitor_name, ports_map, stream_target,
};
use crate::wire::convert::{cstr, prop_str};
use crate::wire::convert::{cvolume_to_linear, frames_to_usec, map_to_pa, uniform_cvolume};
use pulseaudio::protocol::{
    ChannelVolume, ClientInfo, FormatEncoding, FormatInfo, ModuleInfo, Prop, Props, SampleFormat,
    SampleSpec, SinkFlags, SinkInfo, SinkInputInfo, SinkState, SourceFlags, SourceInfo,
    SourceOutputInfo, SourceState, Volume,
};
use quaver_engine::graph::{Graph, Node};
use quaver_engine::{NodeId, NodeKind};
use std::ffi::CString;
use std::sync::atomic::Ordering::Relaxed;

use crate::modules::{DEVICES_MODULE, PROTOCOL_MODULE};

/// A consistent view for one introspection reply.
pub struct Snapshot {
    /// The graph.
    pub graph: Graph,
    /// Engine rate.
    pub rate: u32,
    /// Current quantum.
    pub quantum: usize,
    /// Devices suspended for idleness.
    pub suspended: bool,
    /// Nodes the engine does not run (held by a suspended sink, see
    /// [`quaver_engine::compile::stopped_nodes`]).
    pub stopped: std::collections::HashSet<quaver_engine::NodeId>,
    /// Default sink.
    pub default_sink: Option<Device>,
    /// Default source.
    pub default_source: Option<Device>,
    /// Device nodes whose volume drives a mixer element.
    pub hw_volumes: std::collections::BTreeMap<NodeId, quaver_engine::HwVolumeInfo>,
    /// Network devices' live figures by device name (`quaver.rtp.*` properties).
    pub net: Vec<(String, quaver_engine::NetStatus)>,
}

fn set(props: &mut Props, key: Prop, value: &str) {
    props.set(key, cstr(value));
}

fn float_spec(rate: u32, channels: usize) -> SampleSpec {
    SampleSpec {
        format: SampleFormat::Float32Le,
        channels: channels.clamp(1, 32) as u8,
        sample_rate: rate,
    }
}

fn pcm_format(spec: &SampleSpec) -> FormatInfo {
    let mut f = FormatInfo::new(FormatEncoding::Pcm);
    let name = match spec.format {
        SampleFormat::U8 => "u8",
        SampleFormat::Alaw => "aLaw",
        SampleFormat::Ulaw => "uLaw",
        SampleFormat::S16Le => "s16le",
        SampleFormat::S16Be => "s16be",
        SampleFormat::Float32Le => "float32le",
        SampleFormat::Float32Be => "float32be",
        SampleFormat::S32Le => "s32le",
        SampleFormat::S32Be => "s32be",
        SampleFormat::S24Le => "s24le",
        SampleFormat::S24Be => "s24be",
        SampleFormat::S24In32Le => "s24-32le",
        SampleFormat::S24In32Be => "s24-32be",
        SampleFormat::Invalid => return f,
    };
    // Values are JSON, as pa_format_info stores them.
    f.props
        .set(Prop::FormatSampleFormat, cstr(&format!("\"{name}\"")));
    f.props
        .set(Prop::FormatRate, cstr(&spec.sample_rate.to_string()));
    f.props
        .set(Prop::FormatChannels, cstr(&spec.channels.to_string()));
    f
}

impl Server {
    /// Takes a snapshot of the graph and the defaults.
    pub fn snapshot(&self) -> Snapshot {
        let graph = self.engine.graph();
        let status = self.engine.status();
        let default_sink = self.default_sink(&graph);
        let default_source = self.default_source(&graph);
        Snapshot {
            rate: status.rate,
            quantum: status.quantum,
            suspended: status.devices.iter().any(|d| d.suspended),
            stopped: quaver_engine::compile::stopped_nodes(&graph),
            graph,
            default_sink,
            default_source,
            hw_volumes: self.engine.hardware_volumes(),
            net: status
                .devices
                .iter()
                .filter_map(|d| Some((d.info.name.clone(), d.net.clone()?)))
                .collect(),
        }
    }

    /// The volume to report for a device: what a client set, while the node's gain still
    /// matches it, else the gain spread over every channel.
    fn device_volume(
        st: &State,
        source: bool,
        index: u32,
        gain: f32,
        channels: usize,
    ) -> ChannelVolume {
        match st.device_volumes.get(&(source, index)) {
            Some(v)
                if v.channels().len() == channels
                    && (cvolume_to_linear(v) - gain).abs() <= 1e-4 * gain.max(1.0) =>
            {
                *v
            }
            _ => uniform_cvolume(channels, gain),
        }
    }

    /// The volume flags and step count of a device node, as PulseAudio reports an ALSA
    /// sink or source: with a hardware volume (always with dB, see
    /// docs/alsa/mixer.md) HW_VOLUME_CTRL, HW_MUTE_CTRL where the element has a switch,
    /// and the element's steps; a software volume has 65537 steps. The base volume is
    /// always NORM: 100 % is 0 dB in hardware.
    fn volume_caps(snap: &Snapshot, node: NodeId) -> (bool, bool, u32) {
        match snap.hw_volumes.get(&node) {
            Some(hw) => (true, hw.has_switch, hw.steps),
            None => (false, false, 65537),
        }
    }

    fn device_latency_usec(snap: &Snapshot) -> u64 {
        frames_to_usec(2 * snap.quantum as u64, snap.rate)
    }

    /// Whether `peer` moves audio through a link with a device: not held by a suspended
    /// sink, and not a corked stream (PulseAudio counts neither as using the device).
    fn active_peer(snap: &Snapshot, st: &State, peer: Option<NodeId>) -> bool {
        peer.is_some_and(|p| {
            !snap.stopped.contains(&p) && !st.streams.get(&p).is_some_and(|r| r.corked)
        })
    }

    /// A sink is RUNNING while something plays into it.
    fn has_inputs(snap: &Snapshot, st: &State, node: &Node) -> bool {
        let g = &snap.graph;
        g.links.values().any(|l| {
            node.inputs.contains(&l.input)
                && Self::active_peer(snap, st, g.ports.get(&l.output).map(|p| p.node))
        })
    }

    /// A source is RUNNING while something records from it.
    fn has_readers(snap: &Snapshot, st: &State, node: &Node) -> bool {
        let g = &snap.graph;
        g.links.values().any(|l| {
            node.outputs.contains(&l.output)
                && Self::active_peer(snap, st, g.ports.get(&l.input).map(|p| p.node))
        })
    }

    /// The sink record of a device-sink node.
    pub fn sink_info(&self, snap: &Snapshot, st: &State, node: &Node) -> SinkInfo {
        let map = ports_map(&snap.graph, &node.inputs);
        let mut props = Props::new();
        set(&mut props, Prop::DeviceDescription, &node.description);
        set(&mut props, Prop::DeviceClass, "sound");
        set(&mut props, Prop::DeviceApi, "quaver");
        props.set_bytes(cstr("node.name"), cstr(&node.name).as_bytes_with_nul());
        crate::netprops::add(&mut props, &snap.net, &node.name);
        let card = self.device_card(&node.name);
        if let Some(c) = &card {
            crate::cards::add_props(&mut props, c);
        }
        let latency = Self::device_latency_usec(snap);
        let (hw_volume, hw_mute, steps) = Self::volume_caps(snap, node.id);
        let mut flags = SinkFlags::LATENCY | SinkFlags::DECIBEL_VOLUME;
        flags.set(SinkFlags::HW_VOLUME_CTRL, hw_volume);
        flags.set(SinkFlags::HW_MUTE_CTRL, hw_mute);
        SinkInfo {
            index: node.id,
            name: cstr(&node.name),
            description: Some(cstr(if node.description.is_empty() {
                &node.name
            } else {
                &node.description
            })),
            props,
            state: if snap.suspended || node.suspended {
                SinkState::Suspended
            } else if Self::has_inputs(snap, st, node) {
                SinkState::Running
            } else {
                SinkState::Idle
            },
            sample_spec: float_spec(snap.rate, map.len()),
            channel_map: map_to_pa(&map),
            owner_module_index: Self::device_owner(st, node),
            cvolume: Self::device_volume(st, false, node.id, node.volume, map.len()),
            muted: node.mute,
            monitor_source_index: Some(node.id),
            monitor_source_name: Some(cstr(&monitor_name(&node.name))),
            flags,
            actual_latency: latency,
            configured_latency: latency,
            driver: Some(cstr("quaver")),
            base_volume: Volume::NORM,
            volume_steps: Some(steps),
            card_index: card.as_ref().map(|c| c.index),
            active_port: card.as_ref().map_or(0, |c| c.active),
            ports: card.map(|c| c.ports).unwrap_or_default(),
            formats: vec![FormatInfo::new(FormatEncoding::Pcm)],
        }
    }

    /// The source record of a capture device or a sink's monitor.
    pub fn source_info(&self, snap: &Snapshot, st: &State, dev: &Device) -> Option<SourceInfo> {
        let node = snap.graph.nodes.get(&dev.node)?;
        let map = ports_map(&snap.graph, &node.outputs);
        let mut props = Props::new();
        let description = if dev.monitor {
            format!(
                "Monitor of {}",
                if node.description.is_empty() {
                    &node.name
                } else {
                    &node.description
                }
            )
        } else if node.description.is_empty() {
            node.name.clone()
        } else {
            node.description.clone()
        };
        set(&mut props, Prop::DeviceDescription, &description);
        set(
            &mut props,
            Prop::DeviceClass,
            if dev.monitor { "monitor" } else { "sound" },
        );
        set(&mut props, Prop::DeviceApi, "quaver");
        // A monitor belongs to its sink's card, without a port of its own.
        let card = self.device_card(&node.name);
        if let Some(c) = card.as_ref().filter(|_| !dev.monitor) {
            crate::cards::add_props(&mut props, c);
        }
        if !dev.monitor {
            crate::netprops::add(&mut props, &snap.net, &node.name);
        }
        let latency = Self::device_latency_usec(snap);
        // A monitor's node is its sink's: only a capture device has the source's mixer.
        let (hw_volume, hw_mute, steps) = if dev.monitor {
            (false, false, 65537)
        } else {
            Self::volume_caps(snap, dev.node)
        };
        let mut flags = SourceFlags::LATENCY | SourceFlags::DECIBEL_VOLUME;
        flags.set(SourceFlags::HW_VOLUME_CTRL, hw_volume);
        flags.set(SourceFlags::HW_MUTE_CTRL, hw_mute);
        let (volume, muted) = if dev.monitor {
            (
                Self::device_volume(st, true, dev.index, 1.0, map.len()),
                st.monitor_mute.get(&dev.index).copied().unwrap_or(false),
            )
        } else {
            (
                Self::device_volume(st, true, dev.index, node.volume, map.len()),
                node.mute,
            )
        };
        Some(SourceInfo {
            index: dev.index,
            name: cstr(&dev.name),
            description: Some(cstr(&description)),
            props,
            // A monitor's node is its sink's: it is suspended with it.
            state: if snap.suspended || node.suspended {
                SourceState::Suspended
            } else if Self::has_readers(snap, st, node) {
                SourceState::Running
            } else {
                SourceState::Idle
            },
            sample_spec: float_spec(snap.rate, map.len()),
            channel_map: map_to_pa(&map),
            owner_module_index: Self::device_owner(st, node),
            cvolume: volume,
            base_volume: Volume::NORM,
            volume_steps: Some(steps),
            muted,
            monitor_of_sink_index: dev.monitor.then_some(node.id),
            monitor_of_sink_name: dev.monitor.then(|| cstr(&node.name)),
            flags,
            actual_latency: latency,
            configured_latency: latency,
            driver: Some(cstr("quaver")),
            card_index: card.as_ref().map(|c| c.index),
            active_port: card
                .as_ref()
                .filter(|_| !dev.monitor)
                .map_or(0, |c| c.active),
            ports: card
                .filter(|_| !dev.monitor)
                .map(|c| c.ports)
                .unwrap_or_default(),
            formats: vec![FormatInfo::new(FormatEncoding::Pcm)],
        })
    }

    /// The loaded module that made `node` (a loopback's stream), if any.
    fn module_of(st: &State, node: &Node) -> Option<u32> {
        st.modules
            .iter()
            .find(|(_, m)| m.nodes.contains(&node.id))
            .map(|(&i, _)| i)
    }

    /// A stream's media name: its client's, else a module stream's description, else
    /// the node's name.
    fn media_name(node: &Node, rec: Option<&StreamRec>, module: Option<u32>) -> String {
        rec.and_then(|r| prop_str(&r.props, Prop::MediaName))
            .unwrap_or_else(|| match module {
                Some(_) if !node.description.is_empty() => node.description.clone(),
                _ => node.name.clone(),
            })
    }

    fn stream_name(node: &Node, rec: Option<&StreamRec>, module: Option<u32>) -> CString {
        cstr(&Self::media_name(node, rec, module))
    }

    fn stream_props(node: &Node, rec: Option<&StreamRec>, module: Option<u32>) -> Props {
        let mut p = rec.map(|r| r.props.clone()).unwrap_or_default();
        if prop_str(&p, Prop::MediaName).is_none() {
            set(
                &mut p,
                Prop::MediaName,
                &Self::media_name(node, rec, module),
            );
        }
        p.set_bytes(cstr("node.name"), cstr(&node.name).as_bytes_with_nul());
        p
    }

    fn resample_method(&self, spec_rate: u32, rate: u32) -> Option<CString> {
        (spec_rate != rate).then(|| {
            cstr(match self.opts.resample_quality {
                quaver_dsp::resample::ResampleQuality::Fast => "rubato-poly",
                quaver_dsp::resample::ResampleQuality::Medium => "rubato-sinc-64",
                quaver_dsp::resample::ResampleQuality::High => "rubato-sinc-256",
            })
        })
    }

    /// The sink-input record of a playback-stream node (ours or another front-end's).
    pub fn sink_input_info(&self, snap: &Snapshot, st: &State, node: &Node) -> SinkInputInfo {
        let rec = st.streams.get(&node.id);
        let module = Self::module_of(st, node);
        let outputs = ports_map(&snap.graph, &node.outputs);
        let (spec, map) = match rec {
            Some(r) => (r.spec, r.map),
            None => (float_spec(snap.rate, outputs.len()), map_to_pa(&outputs)),
        };
        let (buffer, sink_latency) = match rec.map(|r| &r.io) {
            Some(StreamIo::Play(p)) => {
                let queued = p
                    .pushed
                    .load(Relaxed)
                    .saturating_sub(p.removed.load(Relaxed));
                (
                    frames_to_usec(queued, spec.sample_rate),
                    frames_to_usec(p.delay.load(Relaxed) as u64, spec.sample_rate),
                )
            }
            _ => (0, Self::device_latency_usec(snap)),
        };
        let cvolume = match rec {
            Some(r) if (cvolume_to_linear(&r.cvolume) - node.volume).abs() <= 1e-4 => r.cvolume,
            _ => uniform_cvolume(spec.channels as usize, node.volume),
        };
        SinkInputInfo {
            index: node.id,
            name: Self::stream_name(node, rec, module),
            owner_module_index: rec.map(|_| PROTOCOL_MODULE).or(module),
            client_index: rec.map(|r| r.client),
            sink_index: stream_target(&snap.graph, node.id).unwrap_or(u32::MAX),
            sample_spec: spec,
            channel_map: map,
            cvolume,
            buffer_latency: buffer,
            sink_latency,
            resample_method: self.resample_method(spec.sample_rate, snap.rate),
            driver: Some(cstr(if rec.is_some() {
                "protocol-native.c"
            } else {
                "quaver"
            })),
            props: Self::stream_props(node, rec, module),
            muted: node.mute,
            corked: rec.is_some_and(|r| r.corked),
            has_volume: true,
            volume_writable: true,
            format: pcm_format(&spec),
        }
    }

    /// The source-output record of a record-stream node.
    pub fn source_output_info(&self, snap: &Snapshot, st: &State, node: &Node) -> SourceOutputInfo {
        let rec = st.streams.get(&node.id);
        let module = Self::module_of(st, node);
        let inputs = ports_map(&snap.graph, &node.inputs);
        let (spec, map) = match rec {
            Some(r) => (r.spec, r.map),
            None => (float_spec(snap.rate, inputs.len()), map_to_pa(&inputs)),
        };
        let (buffer, latency) = match rec.map(|r| &r.io) {
            Some(StreamIo::Record(r)) => (
                frames_to_usec(
                    r.produced
                        .load(Relaxed)
                        .saturating_sub(r.sent.load(Relaxed)),
                    spec.sample_rate,
                ),
                frames_to_usec(r.delay.load(Relaxed) as u64, spec.sample_rate),
            ),
            _ => (0, Self::device_latency_usec(snap)),
        };
        // A loopback's capture side: its own volume and mute (the module's; the node's
        // are the sink input's), and a name that says where it goes.
        let looped = crate::state::is_loop(node);
        let capture = module
            .and_then(|m| st.modules.get(&m))
            .and_then(|m| m.capture.as_ref())
            .map(|c| c.get());
        let cvolume = match rec {
            _ if looped => uniform_cvolume(spec.channels as usize, capture.map_or(1.0, |c| c.0)),
            Some(r) if (cvolume_to_linear(&r.cvolume) - node.volume).abs() <= 1e-4 => r.cvolume,
            _ => uniform_cvolume(spec.channels as usize, node.volume),
        };
        let loop_name = looped.then(|| {
            let to = stream_target(&snap.graph, node.id)
                .and_then(|t| snap.graph.nodes.get(&t))
                .map_or("nothing", |t| t.description.as_str());
            format!("Loopback to {to}")
        });
        let mut props = Self::stream_props(node, rec, module);
        if let Some(n) = &loop_name {
            set(&mut props, Prop::MediaName, n);
        }
        SourceOutputInfo {
            index: node.id,
            name: loop_name
                .as_deref()
                .map(cstr)
                .unwrap_or_else(|| Self::stream_name(node, rec, module)),
            owner_module_index: rec.map(|_| PROTOCOL_MODULE).or(module),
            client_index: rec.map(|r| r.client),
            source_index: crate::state::record_source_index(&snap.graph, node.id)
                .unwrap_or(u32::MAX),
            sample_spec: spec,
            channel_map: map,
            cvolume,
            buffer_latency: buffer,
            source_latency: latency,
            resample_method: self.resample_method(spec.sample_rate, snap.rate),
            driver: Some(cstr(if rec.is_some() {
                "protocol-native.c"
            } else {
                "quaver"
            })),
            props,
            muted: if looped {
                capture.is_some_and(|c| c.1)
            } else {
                node.mute
            },
            corked: rec.is_some_and(|r| r.corked),
            has_volume: true,
            volume_writable: true,
            format: pcm_format(&spec),
        }
    }

    /// Every sink record.
    pub fn sink_list(&self, snap: &Snapshot, st: &State) -> Vec<SinkInfo> {
        snap.graph
            .nodes
            .values()
            .filter(|n| n.kind == NodeKind::DeviceSink)
            .map(|n| self.sink_info(snap, st, n))
            .collect()
    }

    /// Every source record.
    pub fn source_list(&self, snap: &Snapshot, st: &State) -> Vec<SourceInfo> {
        self.sources(&snap.graph)
            .iter()
            .filter_map(|d| self.source_info(snap, st, d))
            .collect()
    }

    /// Every sink-input record.
    pub fn sink_input_list(&self, snap: &Snapshot, st: &State) -> Vec<SinkInputInfo> {
        snap.graph
            .nodes
            .values()
            .filter(|n| n.kind == NodeKind::PlaybackStream)
            .map(|n| self.sink_input_info(snap, st, n))
            .collect()
    }

    /// Every source-output record.
    pub fn source_output_list(&self, snap: &Snapshot, st: &State) -> Vec<SourceOutputInfo> {
        snap.graph
            .nodes
            .values()
            .filter(|n| crate::state::is_source_output(n))
            .map(|n| self.source_output_info(snap, st, n))
            .collect()
    }

    /// The client record of client `index`.
    pub fn client_info(&self, st: &State, index: u32) -> Option<ClientInfo> {
        let c = st.clients.get(&index)?;
        Some(ClientInfo {
            index,
            name: cstr(&c.name),
            owner_module_index: Some(PROTOCOL_MODULE),
            driver: Some(cstr("protocol-native.c")),
            props: c.props.clone(),
        })
    }

    /// Every client record.
    pub fn client_list(&self, st: &State) -> Vec<ClientInfo> {
        st.clients
            .keys()
            .filter_map(|&i| self.client_info(st, i))
            .collect()
    }

    /// Every module record: the front-end, the engine's devices, loaded modules.
    pub fn module_list(&self, st: &State) -> Vec<ModuleInfo> {
        let module = |index: u32, name: &str, argument: Option<&str>, description: &str| {
            let mut props = Props::new();
            set(&mut props, Prop::ModuleDescription, description);
            set(&mut props, Prop::ModuleAuthor, "quaver");
            set(&mut props, Prop::ModuleVersion, env!("CARGO_PKG_VERSION"));
            #[allow(deprecated)]
            ModuleInfo {
                index,
                name: cstr(name),
                argument: argument.map(cstr),
                n_used: None,
                auto_unload: false,
                props,
            }
        };
        let mut v = vec![
            module(
                PROTOCOL_MODULE,
                "module-native-protocol-unix",
                None,
                "Native protocol (UNIX sockets)",
            ),
            module(
                DEVICES_MODULE,
                "module-quaver-devices",
                None,
                "The devices quaverd's engine drives ([engine] devices)",
            ),
        ];
        if self.restore.is_some() {
            v.push(module(
                crate::modules::RESTORE_MODULE,
                crate::ext::restore::MODULE_NAME,
                None,
                "Remembers stream volumes, mutes and devices ([pulse] stream_restore)",
            ));
        }
        v.push(module(
            crate::modules::DEVICE_RESTORE_MODULE,
            crate::ext::devrestore::MODULE_NAME,
            None,
            "The formats each sink takes (PCM: quaverd has no passthrough)",
        ));
        for (&i, m) in &st.modules {
            v.push(module(
                i,
                &m.name,
                Some(&m.argument),
                "Loaded into quaver's graph",
            ));
        }
        v
    }

    /// The module owning device node `node`.
    fn device_owner(st: &State, node: &Node) -> Option<u32> {
        if node.device.is_some() {
            return Some(DEVICES_MODULE);
        }
        st.modules
            .iter()
            .find(|(_, m)| m.nodes.contains(&node.id))
            .map(|(&i, _)| i)
    }

    /// The node of a sink input or source output by index, checked for kind.
    pub fn stream_node(snap: &Snapshot, index: u32, kind: NodeKind) -> Option<&Node> {
        snap.graph.nodes.get(&index).filter(|n| {
            n.kind == kind || (kind == NodeKind::RecordStream && crate::state::is_source_output(n))
        })
    }
}
