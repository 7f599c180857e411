//! Commands on open streams: delete, drain, cork, flush, trigger, prebuf, latency,
//! buffer attributes, names, proplists, sample rate.

use super::{Reply, engine_err, engine_frames, remove_props, update_props};
use crate::conn::Conn;
use crate::conn::record::record_wake_frames;
use crate::rt::shared::{F_CORKED, F_DRAIN, F_PREBUF, F_TRIGGER, R_CORKED, query_time_ns};
use crate::state::{Server, StreamIo, record_source_index};
use crate::wire::bufattr::{self, LatencyMode};
use crate::wire::convert::frames_to_usec;
use pulseaudio::protocol::props::PropsUpdateMode;
use pulseaudio::protocol::{
    self as pa, PlaybackLatency, Prop, Props, PulseError, RecordLatency, SampleSpec,
    SetPlaybackStreamBufferAttrReply, SetRecordStreamBufferAttrReply,
    SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use quaver_engine::stream::Retune;
use quaver_engine::{NodeId, NodeKind};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{SystemTime, UNIX_EPOCH};

impl Conn {
    /// REMOVE_PLAYBACK_STREAM_PROPLIST / REMOVE_RECORD_STREAM_PROPLIST.
    pub(crate) fn remove_stream_proplist(
        &mut self,
        seq: u32,
        channel: u32,
        playback: bool,
        keys: &[std::ffi::CString],
    ) -> Reply {
        let node = self.stream_node(channel, playback)?;
        if let Some(s) = self.srv.lock().streams.get_mut(&node) {
            remove_props(&mut s.props, keys);
        }
        self.srv.broadcast(
            if playback {
                Fac::SinkInput
            } else {
                Fac::SourceOutput
            },
            Ev::Changed,
            node,
        );
        self.out().ack(seq);
        Ok(())
    }

    /// DELETE_PLAYBACK_STREAM.
    pub(crate) fn delete_playback_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let p = self.playback.remove(&ch).ok_or(PulseError::NoEntity)?;
        self.drop_stream(p.node);
        self.out().ack(seq);
        Ok(())
    }

    /// DELETE_RECORD_STREAM.
    pub(crate) fn delete_record_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let r = self.record.remove(&ch).ok_or(PulseError::NoEntity)?;
        self.drop_stream(r.node);
        self.out().ack(seq);
        Ok(())
    }

    /// DRAIN_PLAYBACK_STREAM.
    pub(crate) fn drain_playback_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let p = self.playback.get_mut(&ch).ok_or(PulseError::NoEntity)?;
        p.shared.set_flag(F_DRAIN, true);
        p.drains.push(seq);
        // Acked from service() once the last frame has played.
        Ok(())
    }

    /// CORK_PLAYBACK_STREAM.
    pub(crate) fn cork_playback_stream(&mut self, seq: u32, c: pa::CorkStreamParams) -> Reply {
        let p = self.playback.get(&c.channel).ok_or(PulseError::NoEntity)?;
        p.shared.set_flag(F_CORKED, c.cork);
        let node = p.node;
        self.set_corked(node, c.cork);
        // Where the device holds a long queue, pause and resume are heard at
        // once: the queue is taken back and rendered again (the stream keeps
        // the audio it had queued for when it resumes).
        if let Err(e) = self.srv.engine.rewind() {
            tracing::debug!("pulse: rewind after cork: {e}");
        }
        self.out().ack(seq);
        Ok(())
    }

    /// CORK_RECORD_STREAM.
    pub(crate) fn cork_record_stream(&mut self, seq: u32, c: pa::CorkStreamParams) -> Reply {
        let r = self.record.get(&c.channel).ok_or(PulseError::NoEntity)?;
        if c.cork {
            r.shared.flags.fetch_or(R_CORKED, Release);
        } else {
            r.shared.flags.fetch_and(!R_CORKED, Release);
        }
        let node = r.node;
        self.set_corked(node, c.cork);
        self.out().ack(seq);
        Ok(())
    }

    /// FLUSH_PLAYBACK_STREAM.
    pub(crate) fn flush_playback_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let p = self.playback.get_mut(&ch).ok_or(PulseError::NoEntity)?;
        p.flush();
        // What the device already holds of this stream goes too (a seek is heard
        // at once where the device keeps a long queue).
        let node = p.node;
        if let Err(e) = self.srv.engine.rewind_flushed(node) {
            tracing::debug!("pulse: rewind after flush: {e}");
        }
        self.out().ack(seq);
        Ok(())
    }

    /// FLUSH_RECORD_STREAM.
    pub(crate) fn flush_record_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let r = self.record.get_mut(&ch).ok_or(PulseError::NoEntity)?;
        let n = r.ring.slots();
        if let Ok(c) = r.ring.read_chunk(n) {
            c.commit_all();
        }
        r.sent += (n / r.ch) as u64;
        self.out().ack(seq);
        Ok(())
    }

    /// TRIGGER_PLAYBACK_STREAM.
    pub(crate) fn trigger_playback_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let p = self.playback.get(&ch).ok_or(PulseError::NoEntity)?;
        p.shared.set_flag(F_TRIGGER, true);
        self.out().ack(seq);
        Ok(())
    }

    /// PREBUF_PLAYBACK_STREAM.
    pub(crate) fn prebuf_playback_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let p = self.playback.get(&ch).ok_or(PulseError::NoEntity)?;
        p.shared.set_flag(F_PREBUF, true);
        self.out().ack(seq);
        Ok(())
    }

    /// GET_PLAYBACK_LATENCY.
    pub(crate) fn get_playback_latency(&mut self, seq: u32, q: pa::LatencyParams) -> Reply {
        let p = self.playback.get(&q.channel).ok_or(PulseError::NoEntity)?;
        let t = p.shared.timing();
        let remote = SystemTime::now();
        let since_epoch = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap_or_default();
        let query_ns = query_time_ns(
            since_epoch(q.now).as_micros() as u64,
            since_epoch(remote).as_nanos() as u64,
            quaver_rt::monotonic_ns(),
        );
        let (sink_usec, read_offset, playing_for) =
            t.figures(p.fs as u64, p.spec.sample_rate, query_ns);
        let reply = PlaybackLatency {
            sink_usec,
            source_usec: 0,
            playing: t.playing,
            local_time: q.now,
            remote_time: remote,
            write_offset: p.write_index,
            read_offset,
            underrun_for: 0,
            playing_for,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    /// GET_RECORD_LATENCY.
    pub(crate) fn get_record_latency(&mut self, seq: u32, q: pa::LatencyParams) -> Reply {
        let r = self.record.get(&q.channel).ok_or(PulseError::NoEntity)?;
        let sh = &r.shared;
        let reply = RecordLatency {
            sink_usec: self.monitor_usec(r.node),
            source_usec: frames_to_usec(sh.delay.load(Relaxed) as u64, r.spec.sample_rate),
            playing: sh.flags.load(Acquire) & R_CORKED == 0,
            local_time: q.now,
            remote_time: SystemTime::now(),
            write_offset: (sh.produced.load(Acquire) * r.fs as u64) as i64,
            read_offset: (r.sent * r.fs as u64) as i64,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    /// SET_PLAYBACK_STREAM_NAME.
    pub(crate) fn set_playback_stream_name(
        &mut self,
        seq: u32,
        p: pa::SetStreamNameParams,
    ) -> Reply {
        self.rename_stream(p.index, true, &p.name)?;
        self.out().ack(seq);
        Ok(())
    }

    /// SET_RECORD_STREAM_NAME.
    pub(crate) fn set_record_stream_name(&mut self, seq: u32, p: pa::SetStreamNameParams) -> Reply {
        self.rename_stream(p.index, false, &p.name)?;
        self.out().ack(seq);
        Ok(())
    }

    /// UPDATE_PLAYBACK_STREAM_PROPLIST.
    pub(crate) fn update_playback_stream_proplist(
        &mut self,
        seq: u32,
        p: pa::UpdatePropsParams,
    ) -> Reply {
        self.update_stream_props(p.index, true, p.mode, &p.props)?;
        self.out().ack(seq);
        Ok(())
    }

    /// UPDATE_RECORD_STREAM_PROPLIST.
    pub(crate) fn update_record_stream_proplist(
        &mut self,
        seq: u32,
        p: pa::UpdatePropsParams,
    ) -> Reply {
        self.update_stream_props(p.index, false, p.mode, &p.props)?;
        self.out().ack(seq);
        Ok(())
    }

    /// SET_PLAYBACK_STREAM_BUFFER_ATTR.
    pub(crate) fn set_playback_stream_buffer_attr(
        &mut self,
        seq: u32,
        q: pa::SetPlaybackStreamBufferAttrParams,
    ) -> Reply {
        let grant = self.grant();
        let rate = self.srv.engine.rate();
        let p = self
            .playback
            .get_mut(&q.index)
            .ok_or(PulseError::NoEntity)?;
        let mode = LatencyMode {
            adjust_latency: q.adjust_latency,
            early_requests: q.early_requests,
        };
        let fixed = bufattr::fix_playback(&q.buffer_attr, &p.spec, mode, grant);
        // The node's latency request, and with it the quantum, follows the new
        // sink latency; the queue follows at once.
        let frames = engine_frames(rate, fixed.sink_request_usec);
        if let Err(e) = self.srv.engine.set_latency(p.node, Some(frames)) {
            tracing::debug!("pulse: latency of stream {}: {e}", p.node);
        }
        let old_tlength = p.attr.target_length as i64;
        p.attr = fixed.attr;
        p.missing += fixed.attr.target_length as i64 - old_tlength;
        p.shared
            .prebuf
            .store(fixed.attr.pre_buffering / p.fs as u32, Relaxed);
        p.configured_usec = fixed.configured_sink_usec;
        let reply = SetPlaybackStreamBufferAttrReply {
            buffer_attr: fixed.attr,
            configured_sink_latency: fixed.configured_sink_usec,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    /// SET_RECORD_STREAM_BUFFER_ATTR.
    pub(crate) fn set_record_stream_buffer_attr(
        &mut self,
        seq: u32,
        q: pa::SetRecordStreamBufferAttrParams,
    ) -> Reply {
        let grant = self.grant();
        let r = self.record.get_mut(&q.index).ok_or(PulseError::NoEntity)?;
        let mode = LatencyMode {
            adjust_latency: q.adjust_latency,
            early_requests: q.early_requests,
        };
        let fixed = bufattr::fix_record(&q.buffer_attr, &r.spec, mode, grant);
        let rate = self.srv.engine.rate();
        let frames = fixed.source_request_usec.map(|u| engine_frames(rate, u));
        if let Err(e) = self.srv.engine.set_latency(r.node, frames) {
            tracing::debug!("pulse: latency of stream {}: {e}", r.node);
        }
        r.attr = fixed.attr;
        let ring_frames = r.ring.buffer().capacity() / r.ch;
        let decim = r.peak.as_ref().map_or(1, |p| p.decim);
        r.frag_frames = (record_wake_frames(&fixed, &r.spec, ring_frames) * decim)
            .clamp(1, (ring_frames / 2).max(1));
        r.configured_usec = fixed.configured_source_usec;
        r.latency_bound = fixed.source_request_usec.is_some();
        let reply = SetRecordStreamBufferAttrReply {
            buffer_attr: fixed.attr,
            configured_source_latency: fixed.configured_source_usec,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    /// UPDATE_PLAYBACK_STREAM_SAMPLE_RATE.
    pub(crate) fn update_playback_stream_sample_rate(
        &mut self,
        seq: u32,
        q: pa::UpdateSampleRateParams,
    ) -> Reply {
        let _srv = self.srv.clone();
        let p = self
            .playback
            .get_mut(&q.index)
            .ok_or(PulseError::NoEntity)?;
        let (node, ch) = (p.node, p.ch);
        let srv = &self.srv;
        change_rate(
            &mut p.variable_rate,
            &mut p.spec,
            &p.shared.rate,
            q.sample_rate,
            |rate| retune_stream(srv, node, ch, rate, true),
        )?;
        self.rate_changed(node, q.sample_rate, true);
        self.out().ack(seq);
        Ok(())
    }

    /// UPDATE_RECORD_STREAM_SAMPLE_RATE.
    pub(crate) fn update_record_stream_sample_rate(
        &mut self,
        seq: u32,
        q: pa::UpdateSampleRateParams,
    ) -> Reply {
        let _srv = self.srv.clone();
        let r = self.record.get_mut(&q.index).ok_or(PulseError::NoEntity)?;
        if r.peak.is_some() {
            // Its ring carries engine-rate frames for the peak detector.
            return Err(PulseError::NotSupported);
        }
        let (node, ch) = (r.node, r.ch);
        let srv = &self.srv;
        change_rate(
            &mut r.variable_rate,
            &mut r.spec,
            &r.shared.rate,
            q.sample_rate,
            |rate| retune_stream(srv, node, ch, rate, false),
        )?;
        self.rate_changed(node, q.sample_rate, false);
        self.out().ack(seq);
        Ok(())
    }

    /// For a record stream on a sink's monitor (or on a sink input's), the sink's
    /// latency: PulseAudio reports it as the monitor latency, which libpulse subtracts,
    /// because a monitor hears a sample before the sink plays it. 0 for real sources.
    pub(crate) fn monitor_usec(&self, node: NodeId) -> u64 {
        // Asked on every latency query: look, do not copy the graph.
        let device = self.srv.engine.inspect(|graph| {
            record_source_index(graph, node)
                .and_then(|src| graph.nodes.get(&src))
                .filter(|n| n.kind == NodeKind::DeviceSink)
                .and_then(|n| n.device)
        });
        device.map_or(0, |i| {
            let frames = self.srv.engine.stats().devices[i]
                .playback_delay
                .load(Relaxed);
            frames_to_usec(frames, self.srv.engine.rate())
        })
    }

    /// Introspection shows the new rate; subscribers hear of the change.
    pub(crate) fn rate_changed(&self, node: NodeId, rate: u32, playback: bool) {
        if let Some(rec) = self.srv.lock().streams.get_mut(&node) {
            rec.spec.sample_rate = rate;
        }
        self.stream_changed(node, playback);
    }

    pub(crate) fn rename_stream(
        &self,
        channel: u32,
        playback: bool,
        name: &std::ffi::CStr,
    ) -> Reply {
        let node = self.stream_node(channel, playback)?;
        if let Some(s) = self.srv.lock().streams.get_mut(&node) {
            s.props.set(Prop::MediaName, name);
        }
        self.stream_changed(node, playback);
        Ok(())
    }

    pub(crate) fn update_stream_props(
        &self,
        channel: u32,
        playback: bool,
        mode: PropsUpdateMode,
        props: &Props,
    ) -> Reply {
        let node = self.stream_node(channel, playback)?;
        if let Some(s) = self.srv.lock().streams.get_mut(&node) {
            update_props(&mut s.props, mode, props);
        }
        self.stream_changed(node, playback);
        Ok(())
    }

    pub(crate) fn stream_changed(&self, node: NodeId, playback: bool) {
        self.srv.broadcast(
            if playback {
                Fac::SinkInput
            } else {
                Fac::SourceOutput
            },
            Ev::Changed,
            node,
        );
    }

    pub(crate) fn set_corked(&self, node: NodeId, corked: bool) {
        let playback = {
            let mut st = self.srv.lock();
            match st.streams.get_mut(&node) {
                Some(s) => {
                    s.corked = corked;
                    matches!(s.io, StreamIo::Play(_))
                }
                None => return,
            }
        };
        if playback && let Some(d) = &self.srv.opts.ducking {
            d.set_playing(node, !corked);
        }
        self.stream_changed(node, playback);
        // The device's state may have changed with it (RUNNING ↔ IDLE), which
        // PulseAudio announces as a change of the sink or source.
        let graph = self.srv.engine.graph();
        if playback {
            if let Some(sink) = crate::state::stream_target(&graph, node) {
                self.srv.broadcast(Fac::Sink, Ev::Changed, sink);
            }
        } else if let Some(source) = crate::state::record_source_index(&graph, node) {
            self.srv.broadcast(Fac::Source, Ev::Changed, source);
        }
    }
}

/// UPDATE_*_SAMPLE_RATE on a stream whose converter was built for `variable` (None: a
/// fixed-rate stream, BADSTATE): the stream's spec takes the new rate and its RT side
/// is told through `cell`. Within the converter's ratio range the RT side follows the
/// cell by itself; beyond it, as PulseAudio (which rebuilds its resampler for any
/// rate), `retune` hands the node a converter built for the new rate, which becomes
/// the new base. A rate the engine cannot convert at all is NOTSUPPORTED.
pub(crate) fn change_rate(
    variable: &mut Option<u32>,
    spec: &mut SampleSpec,
    cell: &std::sync::atomic::AtomicU32,
    rate: u32,
    retune: impl FnOnce(u32) -> Result<(), PulseError>,
) -> Reply {
    let base = variable.ok_or(PulseError::BadState)?;
    if rate == 0 || rate > crate::wire::convert::MAX_RATE {
        return Err(PulseError::Invalid);
    }
    if !quaver_engine::stream::rate_change_ok(base, rate) {
        retune(rate)?;
        *variable = Some(rate);
    }
    spec.sample_rate = rate;
    cell.store(rate, Relaxed);
    Ok(())
}

/// Builds a stream's converter for `rate` and hands it to its node
/// ([`quaver_engine::Engine::retune`]).
pub(crate) fn retune_stream(
    srv: &Server,
    node: NodeId,
    channels: usize,
    rate: u32,
    playback: bool,
) -> Result<(), PulseError> {
    let engine_rate = srv.engine.rate();
    let quantum_max = srv.engine.config().quantum_max;
    let quality = srv.opts.resample_quality;
    let built = if playback {
        Retune::playback(rate, channels, engine_rate, quantum_max, quality)
    } else {
        Retune::record(rate, channels, engine_rate, quantum_max, quality)
    };
    let r = built.map_err(|e| {
        tracing::info!("pulse: stream {node} cannot change to {rate} Hz: {e}");
        PulseError::NotSupported
    })?;
    srv.engine.retune(node, r).map_err(engine_err)
}
