//! Opening playback and record streams.

use super::{Reply, engine_err, engine_frames};
use crate::conn::Conn;
use crate::conn::playback::Playback;
use crate::conn::record::{Peak, Record, record_wake_frames};
use crate::rt::shared::{PlayShared, RecShared};
use crate::rt::transport::{PlaySource, RecSink};
use crate::state::{Server, StreamIo, StreamRec, ports_map};
use crate::wire::bufattr::{self, LatencyMode};
use crate::wire::convert::{
    Codec, bytes_to_usec, check_spec, cvolume_to_linear, frame_size, frames_to_usec, map_from_pa,
};
use crate::wire::convert::{cstr, prop_str};
use pulseaudio::protocol::{
    self as pa, ChannelMap as PaMap, ChannelVolume, CreatePlaybackStreamReply,
    CreateRecordStreamReply, FormatEncoding, FormatInfo, PlaybackStreamParams, Prop, Props,
    PulseError, RecordStreamParams, SampleFormat, SampleSpec,
};
use quaver_engine::stream::{PlaybackAdapter, RecordAdapter, StreamFormat};
use quaver_engine::{NodeId, NodeKind, NodeSpec, Processor};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Release;

/// What a new stream links to.
pub(crate) struct Target {
    /// Node to link with.
    pub(crate) node: NodeId,
    /// Its name (the engine links by name).
    pub(crate) name: String,
    /// PulseAudio index and name of the device the client sees.
    pub(crate) dev_index: u32,
    pub(crate) dev_name: String,
}

/// What opening a stream starts from, in either direction.
pub(crate) struct Opening {
    pub(crate) spec: SampleSpec,
    pub(crate) codec: Codec,
    pub(crate) map: PaMap,
    /// The stream's proplist merged with its client's (moved into its record).
    pub(crate) props: Props,
    /// Stream restore's entry for it, when it was looked up and exists.
    pub(crate) restored: Option<crate::ext::restore::Entry>,
}

/// How a new stream's node is made and shown (see [`Conn::add_stream`]).
pub(crate) struct NewStream<'a> {
    pub(crate) kind: NodeKind,
    /// The channels of the target's ports the node connects to.
    pub(crate) ports: quaver_dsp::ChannelMap,
    pub(crate) latency_frames: Option<u32>,
    /// The node (by name) it links to.
    pub(crate) link_to: &'a str,
    /// The volume the client asked for, if any.
    pub(crate) cvolume: Option<ChannelVolume>,
    pub(crate) start_muted: Option<bool>,
    pub(crate) corked: bool,
    pub(crate) follows_default: bool,
    pub(crate) pinned: bool,
    pub(crate) monitors: Option<NodeId>,
    pub(crate) io: StreamIo,
}

/// A playback stream's processor: from the client's rate and layout (`format`) to the
/// sink's channels (`node_map`).
fn playback_adapter(
    srv: &Server,
    source: PlaySource,
    format: &StreamFormat,
    node_map: &quaver_dsp::ChannelMap,
    variable_rate: bool,
) -> Result<Box<dyn Processor>, PulseError> {
    let (rate, quality) = (srv.engine.rate(), srv.opts.resample_quality);
    let quantum_max = srv.engine.config().quantum_max;
    let mut a = PlaybackAdapter::new(source, format, node_map, rate, quantum_max, 0, quality);
    if variable_rate {
        a = a.and_then(|a| a.variable_rate(quality));
    }
    let a = a.map(|a| a.with_rewind(srv.engine.rewind_capacity(), node_map.len()));
    boxed(a, format.rate)
}

/// A record stream's processor: from the source's channels (`node_map`) to the
/// client's rate and layout (`format`); `client_rate` is for the log.
fn record_adapter(
    srv: &Server,
    sink: RecSink,
    format: &StreamFormat,
    node_map: &quaver_dsp::ChannelMap,
    client_rate: u32,
    flags: &pa::stream::StreamFlags,
) -> Result<Box<dyn Processor>, PulseError> {
    let (rate, quality) = (srv.engine.rate(), srv.opts.resample_quality);
    let quantum_max = srv.engine.config().quantum_max;
    let mut a = RecordAdapter::new(sink, format, node_map, rate, quantum_max, quality);
    if flags.variable_rate {
        a = a.and_then(|a| a.variable_rate(quality));
    }
    boxed(a, client_rate)
}

/// An adapter as the node's processor; NOTSUPPORTED when the engine cannot convert
/// the client's rate (`client_rate`, for the log).
fn boxed<A: Processor + 'static>(
    built: Result<A, quaver_dsp::resample::ResampleError>,
    client_rate: u32,
) -> Result<Box<dyn Processor>, PulseError> {
    match built {
        Ok(a) => Ok(Box::new(a)),
        Err(e) => {
            tracing::warn!("pulse: cannot resample {client_rate} Hz: {e}");
            Err(PulseError::NotSupported)
        }
    }
}

impl Conn {
    pub(crate) fn stream_node(&self, channel: u32, playback: bool) -> Result<NodeId, PulseError> {
        if playback {
            self.playback.get(&channel).map(|p| p.node)
        } else {
            self.record.get(&channel).map(|r| r.node)
        }
        .ok_or(PulseError::NoEntity)
    }

    /// What the engine grants for a device-latency request: the device latency of the
    /// quantum this stream alone would make, or the request itself where the device
    /// fills ahead that far.
    pub(crate) fn grant(&self) -> impl Fn(u64) -> u64 + use<> {
        let engine = self.srv.engine.clone();
        let rate = engine.rate();
        move |usec: u64| {
            let granted = engine.granted_latency(engine_frames(rate, usec) as usize);
            frames_to_usec(granted as u64, rate)
        }
    }

    pub(crate) fn stream_limit(&self) -> Reply {
        if self.playback.len() + self.record.len() + self.uploads.len()
            >= self.srv.opts.max_streams_per_client
        {
            return Err(PulseError::TooLarge);
        }
        Ok(())
    }

    /// Spec, codec and channel map of a new stream, from the spec or the format list.
    pub(crate) fn stream_format(
        &self,
        spec: SampleSpec,
        map: PaMap,
        formats: &[FormatInfo],
    ) -> Result<(SampleSpec, Codec, PaMap), PulseError> {
        let (spec, map) = if spec.format == SampleFormat::Invalid {
            let (s, m) = spec_from_formats(formats, self.srv.engine.rate())
                .ok_or(PulseError::NotSupported)?;
            (s, m.unwrap_or_else(PaMap::empty))
        } else {
            (spec, map)
        };
        let codec = check_spec(&spec).map_err(|why| {
            tracing::debug!("pulse client {}: {why}", self.client);
            PulseError::Invalid
        })?;
        let map = if map.num_channels() == 0 {
            default_pa_map(spec.channels)
        } else if map.num_channels() != spec.channels {
            return Err(PulseError::Invalid);
        } else {
            map
        };
        Ok((spec, codec, map))
    }

    /// A new stream's proplist: its own, plus the client's properties it does not set
    /// (PulseAudio merges them the same way, so e.g. pavucontrol recognises and hides
    /// its own meter streams by `application.id`).
    pub(crate) fn stream_props(&self, own: &Props) -> Props {
        let mut props = own.clone();
        if let Some(c) = self.srv.lock().clients.get(&self.client) {
            for (k, v) in c.props.iter() {
                if props.get_bytes(&**k).is_none() {
                    props.set_bytes(&**k, &**v);
                }
            }
        }
        props
    }

    pub(crate) fn client_name(&self) -> String {
        self.srv
            .lock()
            .clients
            .get(&self.client)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }

    /// The first steps of opening a stream in either direction: the client's stream
    /// limit, the format, the proplist and, with `restore` (`Some(playback)`), stream
    /// restore's entry for it.
    pub(crate) fn open_stream(
        &self,
        spec: SampleSpec,
        map: PaMap,
        formats: &[FormatInfo],
        own: &Props,
        restore: Option<bool>,
    ) -> Result<Opening, PulseError> {
        self.stream_limit()?;
        let (spec, codec, map) = self.stream_format(spec, map, formats)?;
        let props = self.stream_props(own);
        let restored = restore.and_then(|playback| self.srv.restore_for(&props, playback));
        Ok(Opening {
            spec,
            codec,
            map,
            props,
            restored,
        })
    }

    /// The last steps of opening a stream in either direction: its node, built around
    /// `processor` and linked to `s.link_to`, muted if the client or stream restore
    /// asks, then its channel and the record introspection shows. Returns the node and
    /// the channel.
    pub(crate) fn add_stream(
        &mut self,
        o: &mut Opening,
        own: &Props,
        s: NewStream<'_>,
        processor: Box<dyn Processor>,
    ) -> Result<(NodeId, u32), PulseError> {
        let srv = self.srv.clone();
        let playback = s.kind == NodeKind::PlaybackStream;
        let client_name = self.client_name();
        let mut nspec = NodeSpec::new(&node_name(own, &client_name, playback), s.kind);
        if playback {
            nspec.description = format!("PulseAudio stream of {client_name}");
            nspec.outputs = s.ports;
        } else {
            nspec.description = format!("PulseAudio record stream of {client_name}");
            nspec.inputs = s.ports;
        }
        nspec.latency_frames = s.latency_frames;
        let ch = o.spec.channels as usize;
        let extras = self.stream_extras(&o.props);
        let remembered = o
            .restored
            .as_ref()
            .and_then(|e| crate::ext::restore::volume_for(e, &o.map))
            .is_some();
        let cvolume = match extras.volume {
            // The rule's volume starts a stream nothing else gives one.
            Some(v) if s.cvolume.is_none() && !remembered => {
                crate::wire::convert::uniform_cvolume(ch, v)
            }
            _ => stream_volume(s.cvolume, o.restored.as_ref(), &o.map, ch),
        };
        nspec.volume = cvolume_to_linear(&cvolume);
        // The node carries its device's layout (its adapter converts once).
        let chain = match extras.build_chain(nspec.outputs.len().max(nspec.inputs.len())) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                tracing::warn!("rules: {e}; stream of {client_name} plays without it");
                None
            }
            None => None,
        };
        let node = srv
            .engine
            .add_stream_node(nspec, Some(processor), Some(s.link_to), chain)
            .map_err(engine_err)?;
        if s.start_muted
            .or_else(|| o.restored.as_ref().and_then(|e| e.mute))
            == Some(true)
        {
            let _ = srv.engine.set_volume(&node.to_string(), None, Some(true));
        }
        let channel = self.next_channel;
        self.next_channel += 1;
        srv.lock().streams.insert(
            node,
            StreamRec {
                client: self.client,
                spec: o.spec,
                map: o.map,
                props: std::mem::take(&mut o.props),
                cvolume,
                corked: s.corked,
                follows_default: s.follows_default,
                pinned: s.pinned,
                monitors: s.monitors,
                io: s.io,
            },
        );
        Ok((node, channel))
    }

    /// Frames a cycle at the largest quantum takes from a stream at `top_rate`.
    fn quantum_frames(&self, top_rate: u32) -> usize {
        let cfg = self.srv.engine.config();
        (cfg.quantum_max as u64 * top_rate as u64).div_ceil(self.srv.engine.rate() as u64) as usize
    }

    /// CREATE_PLAYBACK_STREAM.
    pub(crate) fn create_playback(&mut self, seq: u32, p: PlaybackStreamParams) -> Reply {
        let srv = self.srv.clone();
        let mut o = self.open_stream(
            p.sample_spec,
            p.channel_map,
            &p.formats,
            &p.props,
            Some(true),
        )?;
        let (spec, codec, map) = (o.spec, o.codec, o.map);
        let graph = srv.engine.graph();
        let (sink, from_restore) = self.playback_target(&graph, &p, &o)?;
        let node_map = ports_map(&graph, &graph.nodes[&sink.node].inputs);
        let mode = LatencyMode {
            adjust_latency: p.flags.adjust_latency,
            early_requests: p.flags.early_requests,
        };
        let fixed = bufattr::fix_playback(&p.buffer_attr, &spec, mode, self.grant());
        let attr = fixed.attr;
        let fs = frame_size(&spec);
        let ch = spec.channels as usize;
        let rate = srv.engine.rate();
        let tlength_frames = attr.target_length as usize / fs;
        let minreq_frames = attr.minimum_request_length as usize / fs;
        // A cycle at the largest quantum must fit in the ring, at any rate the stream
        // may move to.
        let top_rate = highest_rate(p.flags.variable_rate, spec.sample_rate);
        let ring_frames = (tlength_frames + minreq_frames + self.quantum_frames(top_rate))
            .max(1024)
            .next_power_of_two();
        let (producer, consumer) = rtrb::RingBuffer::new(ring_frames * ch);
        let ring_block = srv.mem.block(ring_frames * ch * size_of::<f32>());
        let corked = p.flags.start_corked;
        let shared = Arc::new(PlayShared::new(
            self.handle.bell.clone(),
            attr.pre_buffering / fs as u32,
            corked,
        ));
        let wire = self.rt_wire();
        // The channel this stream is about to get (assigned below, once it exists).
        let intake = wire
            .as_ref()
            .map(|_| self.intake.get_or_insert_default().clone());
        let source = PlaySource::new(shared.clone(), consumer, ch)
            .with_wire(wire)
            .with_intake(intake, self.next_channel);
        let at = StreamFormat {
            rate: spec.sample_rate,
            channels: map_from_pa(&map),
        };
        let adapter = playback_adapter(&srv, source, &at, &node_map, p.flags.variable_rate)?;
        let stream = NewStream {
            kind: NodeKind::PlaybackStream,
            ports: node_map,
            latency_frames: Some(engine_frames(rate, fixed.sink_request_usec)),
            link_to: &sink.name,
            cvolume: p.cvolume,
            start_muted: p.flags.start_muted,
            corked,
            follows_default: !from_restore
                && p.sink_index.is_none()
                && p.sink_name
                    .as_ref()
                    .is_none_or(|n| n.as_bytes() == b"@DEFAULT_SINK@"),
            pinned: p.sink_index.is_some() || p.sink_name.is_some(),
            monitors: None,
            io: StreamIo::Play(shared.clone()),
        };
        // Read before add_stream takes the merged proplist into the stream's record.
        let role = srv
            .opts
            .ducking
            .is_some()
            .then(|| self.stream_role(&o.props))
            .flatten();
        let (node, channel) = self.add_stream(&mut o, &p.props, stream, adapter)?;
        if let Some(d) = &srv.opts.ducking {
            d.add(node, role.as_deref(), corked);
        }
        tracing::info!(
            "pulse client {}: playback {node} {:?} {} ch {:?} {} Hz → {} (tlength {} ms, minreq {} ms, prebuf {} ms, device {} ms)",
            self.client,
            spec.format,
            spec.channels,
            map,
            spec.sample_rate,
            sink.name,
            bytes_to_usec(attr.target_length as u64, &spec) / 1000,
            bytes_to_usec(attr.minimum_request_length as u64, &spec) / 1000,
            bytes_to_usec(attr.pre_buffering as u64, &spec) / 1000,
            fixed.configured_sink_usec / 1000,
        );
        let requested = attr.target_length;
        self.playback.insert(
            channel,
            Playback {
                node,
                channel,
                spec,
                codec,
                fs,
                ch,
                attr,
                configured_usec: fixed.configured_sink_usec,
                shared,
                ring: Some(producer),
                _ring_block: ring_block,
                ring_frames,
                pending: VecDeque::new(),
                carry: Vec::new(),
                decoded: Vec::new(),
                write_index: 0,
                missing: 0,
                pushed: 0,
                seen_consumed: 0,
                seen_starts: 0,
                seen_underruns: 0,
                drains: Vec::new(),
                variable_rate: p.flags.variable_rate.then_some(spec.sample_rate),
                asked: requested as i64,
                last_request: None,
                last_data: None,
                armed_wake: 0,
                rt_requests: self.wire.is_some(),
                armed: false,
                requests: 0,
                rt_sent: 0,
                rt_blocks: 0,
                rt_answers: 0,
                lease_scratch: Vec::new(),
            },
        );
        let reply = CreatePlaybackStreamReply {
            channel,
            stream_index: node,
            requested_bytes: requested,
            buffer_attr: attr,
            sample_spec: spec,
            channel_map: map,
            stream_latency: fixed.configured_sink_usec,
            sink_index: sink.index,
            sink_name: Some(cstr(&sink.name)),
            suspended: self.is_suspended(&graph, sink.node),
            format: FormatInfo::new(FormatEncoding::Pcm),
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    /// CREATE_RECORD_STREAM.
    pub(crate) fn create_record(&mut self, seq: u32, p: RecordStreamParams) -> Reply {
        let srv = self.srv.clone();
        // Meters (peak detection, one sink input's monitor) are not the user's streams.
        let restore = (p.direct_on_input_index.is_none() && !p.flags.peak_detect).then_some(false);
        let mut o =
            self.open_stream(p.sample_spec, p.channel_map, &p.formats, &p.props, restore)?;
        let (spec, codec, map) = (o.spec, o.codec, o.map);
        let restored_device = o.restored.as_ref().and_then(|e| e.device.as_deref());
        // Meters keep to what they name; the user's streams follow the rule file.
        let ruled = restore.and_then(|_| self.ruled_target(&o.props));
        let (target, dev) = self.record_target(&p, ruled.as_deref(), restored_device)?;
        let restored_dev = p.source_index.is_none()
            && p.source_name.is_none()
            && restored_device.is_some_and(|d| d == dev.name);
        let graph = srv.engine.graph();
        let tnode = graph.nodes.get(&target.node).ok_or(PulseError::NoEntity)?;
        let node_map = ports_map(&graph, &tnode.outputs);
        if node_map.is_empty() {
            return Err(PulseError::NoEntity);
        }
        let mode = LatencyMode {
            adjust_latency: p.flags.adjust_latency,
            early_requests: p.flags.early_requests,
        };
        let fixed = bufattr::fix_record(&p.buffer_attr, &spec, mode, self.grant());
        let fs = frame_size(&spec);
        let ch = spec.channels as usize;
        let rate = srv.engine.rate();
        // A peak-detecting stream below the engine rate records at the engine rate and
        // decimates to peaks on the connection thread.
        let decim = if p.flags.peak_detect && spec.sample_rate < rate {
            (rate / spec.sample_rate) as usize
        } else {
            1
        };
        let ring_rate = if decim > 1 { rate } else { spec.sample_rate };
        // A cycle at the largest quantum must fit in the ring, at any rate the stream
        // may move to (a peak-detecting one never moves).
        let top_rate = highest_rate(p.flags.variable_rate && !p.flags.peak_detect, ring_rate);
        let quantum_frames = self.quantum_frames(top_rate);
        let frag = (fixed.attr.fragment_size as usize / fs).max(1) * decim;
        let ring_frames = (2 * frag.min(ring_rate as usize * 4) + 2 * quantum_frames)
            .max(4096)
            .next_power_of_two();
        let (producer, consumer) = rtrb::RingBuffer::new(ring_frames * ch);
        let ring_block = srv.mem.block(ring_frames * ch * size_of::<f32>());
        let corked = p.flags.start_corked;
        let shared = Arc::new(RecShared::new(self.handle.bell.clone(), corked));
        let sink = RecSink::new(shared.clone(), producer, ch);
        let at = StreamFormat {
            rate: ring_rate,
            channels: map_from_pa(&map),
        };
        let adapter = record_adapter(&srv, sink, &at, &node_map, spec.sample_rate, &p.flags)?;
        let stream = NewStream {
            kind: NodeKind::RecordStream,
            ports: node_map,
            latency_frames: fixed.source_request_usec.map(|u| engine_frames(rate, u)),
            link_to: &target.name,
            cvolume: p.cvolume,
            start_muted: p.flags.start_muted,
            corked,
            pinned: p.direct_on_input_index.is_some()
                || p.source_index.is_some()
                || p.source_name.is_some(),
            monitors: p.direct_on_input_index.map(|_| target.node),
            follows_default: !restored_dev
                && p.direct_on_input_index.is_none()
                && p.source_index.is_none()
                && p.source_name.as_ref().is_none_or(|n| {
                    n.as_bytes() == b"@DEFAULT_SOURCE@" || n.as_bytes() == b"@DEFAULT_MONITOR@"
                }),
            io: StreamIo::Record(shared.clone()),
        };
        let (node, channel) = self.add_stream(&mut o, &p.props, stream, adapter)?;
        let frag_frames =
            (record_wake_frames(&fixed, &spec, ring_frames) * decim).clamp(1, ring_frames / 2);
        tracing::info!(
            "pulse client {}: record {node} {:?} {} ch {} Hz ← {} (fragment {} ms)",
            self.client,
            spec.format,
            spec.channels,
            spec.sample_rate,
            target.dev_name,
            frames_to_usec(frag_frames as u64, ring_rate) / 1000,
        );
        shared.wake_at.store(frag_frames as u64, Release);
        self.record.insert(
            channel,
            Record {
                node,
                channel,
                spec,
                codec,
                fs,
                ch,
                attr: fixed.attr,
                configured_usec: fixed.configured_source_usec,
                shared,
                ring: consumer,
                _ring_block: ring_block,
                frag_frames,
                latency_bound: fixed.source_request_usec.is_some(),
                sent: 0,
                scratch: Vec::new(),
                peak: (decim > 1).then(|| Peak {
                    decim,
                    acc: vec![0.0; ch],
                    count: 0,
                    out: Vec::new(),
                }),
                variable_rate: p.flags.variable_rate.then_some(spec.sample_rate),
            },
        );
        let reply = CreateRecordStreamReply {
            channel,
            stream_index: node,
            buffer_attr: fixed.attr,
            sample_spec: spec,
            channel_map: map,
            stream_latency: fixed.configured_source_usec,
            sink_index: target.dev_index,
            sink_name: Some(cstr(&dev.name)),
            suspended: self.is_suspended(&graph, target.node),
            format: FormatInfo::new(FormatEncoding::Pcm),
        };
        self.out().reply(seq, &reply);
        Ok(())
    }
}

/// The highest rate a stream created at `rate` may run at: a VARIABLE_RATE stream may
/// move to any rate PulseAudio allows. Its ring is built on the control side and cannot
/// grow once the RT thread holds the other end, so it is sized for this rate.
pub(crate) fn highest_rate(variable_rate: bool, rate: u32) -> u32 {
    if variable_rate {
        crate::wire::convert::MAX_RATE.max(rate)
    } else {
        rate
    }
}

/// A node name from a stream's proplist: readable, without ':' and not too long.
pub(crate) fn node_name(props: &Props, client: &str, playback: bool) -> String {
    let base = prop_str(props, Prop::MediaName)
        .or_else(|| prop_str(props, Prop::ApplicationName))
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| {
            if client.is_empty() {
                if playback {
                    "pulse-playback"
                } else {
                    "pulse-record"
                }
                .to_string()
            } else {
                client.to_string()
            }
        });
    let clean: String = base
        .chars()
        .map(|c| if c == ':' || c.is_control() { '_' } else { c })
        .take(100)
        .collect();
    if clean.is_empty() {
        "pulse-stream".into()
    } else {
        clean
    }
}

/// A new stream's volume: the client's when it set one (uniform if its channel count is
/// wrong), else stream restore's, else 100 %.
pub(crate) fn stream_volume(
    client: Option<ChannelVolume>,
    restored: Option<&crate::ext::restore::Entry>,
    map: &PaMap,
    ch: usize,
) -> ChannelVolume {
    match client {
        Some(v) if v.channels().len() == ch => v,
        Some(_) => crate::wire::convert::uniform_cvolume(ch, 1.0),
        None => restored
            .and_then(|e| crate::ext::restore::volume_for(e, map))
            .filter(|v| v.channels().len() == ch)
            .unwrap_or_else(|| crate::wire::convert::uniform_cvolume(ch, 1.0)),
    }
}

/// A sample spec from a format list (clients that create streams with
/// `pa_stream_new_extended` send an invalid spec plus formats).
pub(crate) fn spec_from_formats(
    formats: &[FormatInfo],
    rate: u32,
) -> Option<(SampleSpec, Option<PaMap>)> {
    let f = formats.iter().find(|f| f.encoding == FormatEncoding::Pcm)?;
    let get = |p: Prop| prop_str(&f.props, p).map(|s| s.trim().trim_matches('"').to_string());
    let format = match get(Prop::FormatSampleFormat) {
        None => SampleFormat::Float32Le,
        Some(name) => crate::wire::convert::parse_sample_format(&name)?,
    };
    let sample_rate = get(Prop::FormatRate)
        .and_then(|s| s.parse().ok())
        .unwrap_or(rate);
    let channels = get(Prop::FormatChannels)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    Some((
        SampleSpec {
            format,
            channels,
            sample_rate,
        },
        None,
    ))
}

/// A channel map for `channels` when the client sent none (PulseAudio's AIFF defaults
/// for the common counts).
pub(crate) fn default_pa_map(channels: u8) -> PaMap {
    use pa::ChannelPosition::*;
    match channels {
        1 => PaMap::mono(),
        2 => PaMap::stereo(),
        3 => PaMap::new([FrontLeft, FrontRight, FrontCenter]),
        4 => PaMap::new([FrontLeft, FrontRight, RearLeft, RearRight]),
        5 => PaMap::new([FrontLeft, FrontRight, RearLeft, RearRight, FrontCenter]),
        6 => PaMap::new([FrontLeft, FrontRight, RearLeft, RearRight, FrontCenter, Lfe]),
        n => crate::wire::convert::map_to_pa(&quaver_dsp::ChannelMap::default_for(n as usize)),
    }
}
