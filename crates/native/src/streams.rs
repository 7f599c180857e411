//! Playback and record streams: a shared-memory ring at the client's rate and layout,
//! and a graph node whose adapter resamples and mixes channels once, to the target's
//! layout.

use crate::rt::{ShmSink, ShmSource};
use crate::{NativeServer, engine_error};
use quaver_dsp::ChannelMap;
use quaver_engine::stream::{PlaybackAdapter, RecordAdapter, StreamFormat};
use quaver_engine::{NodeKind, NodeSpec};
use quaver_policy::NodeView;
use quaver_protocol::message::*;
use quaver_protocol::shm::{Doorbell, ShmRing};
use rustix::fd::{AsFd, OwnedFd};
use std::sync::Arc;

fn pow2_ceil(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

impl NativeServer {
    /// Opens a playback or record stream for `client`: its ring and doorbell (whose fds
    /// the reply carries) and its node, linked to the policy's target.
    pub(crate) fn create_stream(
        &self,
        client: u32,
        p: &StreamParams,
    ) -> Result<(StreamCreated, Vec<OwnedFd>), Reply> {
        self.check_stream_limit(client)?;
        let restored = self.restored(client, p);
        let remembered = restored.device(p, &self.engine.graph());
        let (target, node_map) = self.stream_target(client, p, remembered.as_deref())?;
        let cfg = self.engine.config();
        let rate = self.engine.rate();
        let latency_engine = p
            .latency_ms
            .map(|ms| (ms * rate as f64 / 1000.0).round() as usize)
            .unwrap_or_else(|| self.engine.latency_for_quantum(cfg.quantum_default))
            .max(1);
        let quantum = self.engine.quantum_for_latency(latency_engine);
        let capacity = ring_capacity(p, latency_engine, quantum, rate);
        let ch = p.channels.len() as u32;
        let (ring, memfd) = ShmRing::create(ch, capacity as u32).map_err(|e| {
            Reply::error(ErrorCode::Internal, format!("creating shared memory: {e}"))
        })?;
        let bell =
            Arc::new(Doorbell::new().map_err(|e| {
                Reply::error(ErrorCode::Internal, format!("creating eventfd: {e}"))
            })?);
        let bell_fd = rustix::io::dup(bell.as_fd())
            .map_err(|e| Reply::error(ErrorCode::Internal, format!("dup eventfd: {e}")))?;
        let mut spec = stream_spec(client, p, &node_map, latency_engine);
        let extras = {
            let props = self.rule_props(client, p);
            let policy = self.policy.lock().expect("poisoned");
            policy.stream_extras(&props)
        };
        // The client's own volume, else stream restore's, else the rule's.
        if let Some(v) = restored.volume(p) {
            spec.volume = v;
        } else if let (None, Some(v)) = (p.volume, extras.volume) {
            spec.volume = v;
        }
        // The node carries the target's layout (its adapter converts once).
        let chain = match extras.build_chain(spec.outputs.len().max(spec.inputs.len())) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                tracing::warn!("rules: {e}; stream '{}' plays without it", p.name);
                None
            }
            None => None,
        };
        let processor = self.stream_processor(p, ring, &bell, &node_map, capacity)?;
        let id = self
            .engine
            .add_stream_node(spec, Some(processor), target.as_deref(), chain)
            .map_err(engine_error)?;
        if restored.muted()
            && let Err(e) = self.engine.set_volume(&id.to_string(), None, Some(true))
        {
            tracing::debug!("stream restore: mute of stream {id}: {e}");
        }
        let node_name = self.engine.node_name(id).unwrap_or_default();
        if let (Some(d), Direction::Playback) = (&self.opts.ducking, p.direction) {
            let role = p.role.clone().or_else(|| {
                let props = self.rule_props(client, p);
                let policy = self.policy.lock().ok()?;
                policy.rules().role(&props).map(str::to_string)
            });
            d.add(id, role.as_deref(), false);
        }
        {
            let mut clients = self.clients.lock().expect("poisoned");
            let c = clients.get_mut(&client).expect("registered at hello");
            c.streams.push(id);
            if let Some(key) = restored.key {
                c.kinds.insert(id, (key, p.channels.clone()));
            }
        }
        tracing::info!(
            "client {client}: {:?} stream {node_name} ({} Hz, {}) → {}",
            p.direction,
            p.rate,
            p.channels,
            target.as_deref().unwrap_or("unlinked")
        );
        Ok((
            StreamCreated {
                node: id,
                node_name,
                capacity_frames: capacity as u32,
                channels: ch,
                rate: p.rate,
                device_rate: rate,
                quantum: self.engine.quantum() as u32,
            },
            vec![memfd, bell_fd],
        ))
    }

    /// A native stream's properties as rules see them, named as PulseAudio names them:
    /// `application.name` (the client's name), `media.name` (the stream's) and
    /// `media.role`.
    fn rule_props(&self, client: u32, p: &StreamParams) -> impl Fn(&str) -> Option<String> + use<> {
        let app = self
            .clients
            .lock()
            .expect("poisoned")
            .get(&client)
            .map(|c| c.name.clone());
        let (name, role) = (p.name.clone(), p.role.clone());
        move |key: &str| match key {
            "application.name" => app.clone(),
            "media.name" => Some(name.clone()),
            "media.role" => role.clone(),
            _ => None,
        }
    }

    /// Refuses a new stream or callback node once `client` has reached its limit.
    pub(crate) fn check_stream_limit(&self, client: u32) -> Result<(), Reply> {
        let clients = self.clients.lock().expect("poisoned");
        if clients[&client].streams.len() >= self.opts.max_streams_per_client {
            let msg = format!(
                "stream limit of {} per client reached",
                self.opts.max_streams_per_client
            );
            return Err(Reply::error(ErrorCode::TooMany, msg));
        }
        Ok(())
    }

    /// Where a new stream goes (the node it named, else the device stream restore
    /// remembers for its kind, else the policy's default; none when there is nothing to
    /// link to) and the channel layout of its node's ports.
    fn stream_target(
        &self,
        client: u32,
        p: &StreamParams,
        remembered: Option<&str>,
    ) -> Result<(Option<String>, ChannelMap), Reply> {
        let graph = self.engine.graph();
        let views: Vec<NodeView> = graph
            .nodes
            .values()
            .map(|n| NodeView {
                name: n.name.clone(),
                kind: n.kind.as_str().to_string(),
            })
            .collect();
        // The rule file comes before stream restore's memory (docs/policy/rules.md).
        let ruled = match p.direction {
            _ if p.target.is_none() && p.monitor_of.is_none() => {
                let props = self.rule_props(client, p);
                let policy = self.policy.lock().expect("poisoned");
                policy
                    .rules()
                    .target(&props)
                    .filter(|t| graph.node_by_name(t).is_some())
                    .map(str::to_string)
            }
            _ => None,
        };
        let requested = p
            .target
            .as_deref()
            .or(p.monitor_of.as_deref())
            .or(ruled.as_deref())
            .or(remembered);
        let target = {
            let policy = self.policy.lock().expect("poisoned");
            match p.direction {
                Direction::Playback => policy.playback_target(requested, &views),
                Direction::Record => policy.record_target(requested, &views),
            }
        };
        let target_node = match &target {
            Some(t) => Some(graph.node_by_name(t).ok_or_else(|| {
                Reply::error(ErrorCode::NoSuchNode, format!("no node named '{t}'"))
            })?),
            None => None,
        };
        // The node's ports take the target's layout so the adapter does the up/down-mix
        // once, with proper coefficients, instead of links dropping channels.
        let node_map = match (target_node, p.direction) {
            (Some(n), Direction::Playback) if !n.inputs.is_empty() => {
                ChannelMap(n.inputs.iter().map(|id| graph.ports[id].channel).collect())
            }
            (Some(n), Direction::Record) if !n.outputs.is_empty() => {
                ChannelMap(n.outputs.iter().map(|id| graph.ports[id].channel).collect())
            }
            (Some(n), dir) => {
                let what = if dir == Direction::Playback {
                    "input"
                } else {
                    "output"
                };
                let msg = format!("node '{}' has no {what} ports", n.name);
                return Err(Reply::error(ErrorCode::Incompatible, msg));
            }
            (None, _) => p.channels.clone(),
        };
        Ok((target, node_map))
    }

    /// The node's processor: the engine's stream adapter over the ring, resampling from
    /// the client's rate and mixing to `node_map`.
    fn stream_processor(
        &self,
        p: &StreamParams,
        ring: ShmRing,
        bell: &Arc<Doorbell>,
        node_map: &ChannelMap,
        capacity: usize,
    ) -> Result<Box<dyn quaver_engine::Processor>, Reply> {
        let cfg = self.engine.config();
        let rate = self.engine.rate();
        let format = StreamFormat {
            rate: p.rate,
            channels: p.channels.clone(),
        };
        let internal = |e: quaver_dsp::resample::ResampleError| {
            Reply::error(ErrorCode::Internal, e.to_string())
        };
        let processor: Box<dyn quaver_engine::Processor> = match p.direction {
            Direction::Playback => Box::new(
                PlaybackAdapter::new(
                    ShmSource {
                        ring,
                        bell: bell.clone(),
                        xruns_reported: 0,
                    },
                    &format,
                    node_map,
                    rate,
                    cfg.quantum_max,
                    capacity / 2,
                    self.opts.resample_quality,
                )
                .map(|a| a.with_rewind(self.engine.rewind_capacity(), node_map.len()))
                .map_err(internal)?,
            ),
            Direction::Record => Box::new(
                RecordAdapter::new(
                    ShmSink {
                        ring,
                        bell: bell.clone(),
                        overruns_reported: 0,
                    },
                    &format,
                    node_map,
                    rate,
                    cfg.quantum_max,
                    self.opts.resample_quality,
                )
                .map_err(internal)?,
            ),
        };
        Ok(processor)
    }
}

/// The ring's capacity in stream frames: the requested latency, at least two quanta.
fn ring_capacity(p: &StreamParams, latency_engine: usize, quantum: usize, rate: u32) -> usize {
    let to_stream = |frames: usize| (frames as u64 * p.rate as u64).div_ceil(rate as u64) as usize;
    let mut capacity = pow2_ceil(
        to_stream(latency_engine)
            .max(to_stream(2 * quantum))
            .max(64),
    );
    if p.direction == Direction::Record {
        // A capture ring's size is headroom, not latency (the client reads as soon
        // as a cycle lands): give a slow reader about a second before it overruns.
        capacity = capacity.max(pow2_ceil(p.rate as usize));
    }
    if p.rate != rate {
        // The resampler pulls input in chunks; leave room so it never starves.
        capacity *= 2;
    }
    capacity
}

/// The stream node's description: kind, ports in `node_map`'s layout, latency, volume.
fn stream_spec(
    client: u32,
    p: &StreamParams,
    node_map: &ChannelMap,
    latency_engine: usize,
) -> NodeSpec {
    let name = p.name.replace(':', "_");
    let mut spec = match p.direction {
        Direction::Playback => {
            let mut s = NodeSpec::new(&name, NodeKind::PlaybackStream);
            s.outputs = node_map.clone();
            s
        }
        Direction::Record => {
            let mut s = NodeSpec::new(&name, NodeKind::RecordStream);
            s.inputs = node_map.clone();
            s
        }
    };
    spec.description = format!(
        "{} stream of client {client}",
        if p.direction == Direction::Playback {
            "playback"
        } else {
            "record"
        }
    );
    spec.latency_frames = Some(latency_engine as u32);
    spec.volume = p.volume.unwrap_or(1.0);
    spec.owner = Some(client);
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_holds_the_latency_and_two_quanta() {
        let p = StreamParams::playback("p", 48_000, ChannelMap::stereo());
        assert_eq!(ring_capacity(&p, 1000, 256, 48_000), 1024);
        assert_eq!(ring_capacity(&p, 100, 256, 48_000), 512);
        assert_eq!(ring_capacity(&p, 1, 8, 48_000), 64);
    }

    #[test]
    fn record_ring_holds_a_second_and_resampling_doubles() {
        let r = StreamParams::record("r", 48_000, ChannelMap::stereo());
        assert_eq!(ring_capacity(&r, 1000, 256, 48_000), 65_536);
        let p = StreamParams::playback("p", 44_100, ChannelMap::stereo());
        // 1000 engine frames are 919 at 44.1 kHz: 1024, doubled for the resampler.
        assert_eq!(ring_capacity(&p, 1000, 256, 48_000), 2048);
    }
}
