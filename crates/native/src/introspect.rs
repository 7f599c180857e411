//! The status, timing and graph replies: the engine's published state in protocol
//! terms, with callback nodes shown as clients.

use crate::NativeServer;
use quaver_engine::{Direction as PortDir, NodeId, NodeKind};
use quaver_protocol::callback::CLIENT_ACTIVE;
use quaver_protocol::message::*;
use std::collections::BTreeMap;

impl NativeServer {
    /// Callback details of every callback node, for the graph reply.
    fn callback_infos(&self) -> BTreeMap<NodeId, CallbackNodeInfo> {
        use std::sync::atomic::Ordering::Relaxed;
        let clients = self.clients.lock().expect("poisoned");
        clients
            .values()
            .flat_map(|c| c.callbacks.iter())
            .map(|(id, cb)| {
                let s = &cb.stats;
                let woken = s.woken.load(Relaxed);
                (
                    *id,
                    CallbackNodeInfo {
                        mode: s.mode().as_str().into(),
                        active: cb.shm.client_flags() & CLIENT_ACTIVE != 0,
                        woken,
                        xruns: s.xruns.load(Relaxed),
                        xrun_events: s.xrun_events.load(Relaxed),
                        caught_up: s.caught_up.load(Relaxed),
                        async_cause: s.async_cause().as_str().into(),
                        resynced: s.resynced.load(Relaxed),
                        skipped: s.skipped.load(Relaxed),
                        wait_avg_ns: s.wait_ns_total.load(Relaxed) / woken.max(1),
                        wait_max_ns: s.wait_ns_max.load(Relaxed),
                        quantum: cb.quantum,
                    },
                )
            })
            .collect()
    }

    /// The status reply.
    pub fn status(&self) -> StatusInfo {
        let s = self.engine.status();
        let clients = self.clients.lock().expect("poisoned");
        StatusInfo {
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: PROTOCOL_VERSION,
            rate: s.rate,
            quantum: s.quantum as u32,
            quantum_min: s.quantum_min as u32,
            quantum_max: s.quantum_max as u32,
            realtime: s.realtime.is_realtime(),
            scheduling: Box::new(s.realtime.to_string()),
            cycles: s.cycles,
            xruns: s.xruns,
            devices: s
                .devices
                .iter()
                .map(|d| quaver_protocol::message::DeviceStatus {
                    name: d.info.name.clone(),
                    description: d.info.description.clone(),
                    state: if d.gone {
                        "gone"
                    } else if d.closed {
                        "closed"
                    } else if d.suspended {
                        "suspended"
                    } else {
                        "running"
                    }
                    .into(),
                    rate: d.info.rate,
                    playback_channels: d.info.playback.as_ref().map(|m| m.len() as u32),
                    capture_channels: d.info.capture.as_ref().map(|m| m.len() as u32),
                    underruns: d.underruns,
                    overruns: d.overruns,
                    wakeups: d.wakeups,
                    margin_frames: d.margin_frames,
                    margin_changes: d.margin_changes,
                    follow: d.follow.map(|f| quaver_protocol::message::FollowStatus {
                        play_ppb: f.play_ppm.map(|p| (p * 1e3).round() as i64),
                        capture_ppb: f.capture_ppm.map(|p| (p * 1e3).round() as i64),
                        play_level: f.play_level,
                        play_target: f.play_target,
                        play_error_min: f.play_error.0,
                        play_error_max: f.play_error.1,
                        restarts: f.restarts,
                    }),
                    net: d.net.as_ref().map(crate::netstatus::net_info),
                })
                .collect(),
            clients: clients
                .iter()
                .map(|(id, c)| ClientInfo {
                    id: *id,
                    name: c.name.clone(),
                    pid: c.pid,
                    streams: c.streams.clone(),
                })
                .collect(),
        }
    }

    /// The timing reply.
    pub fn timing(&self) -> TimingStats {
        use std::sync::atomic::Ordering::Relaxed;
        let st = self.engine.stats();
        let hist = |h: &[std::sync::atomic::AtomicU64]| -> Vec<u64> {
            let v: Vec<u64> = h.iter().map(|b| b.load(Relaxed)).collect();
            let used = v.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
            v[..used].to_vec()
        };
        let callbacks: std::collections::BTreeSet<NodeId> = {
            let clients = self.clients.lock().expect("poisoned");
            clients
                .values()
                .flat_map(|c| c.callbacks.keys().copied())
                .collect()
        };
        let timing = self.engine.node_timing();
        let interval_ns = timing.first().map_or(0, |t| t.interval_ns);
        let nodes = timing
            .into_iter()
            .map(|t| NodeTimingInfo {
                id: t.id,
                kind: if callbacks.contains(&t.id) {
                    "client".into()
                } else {
                    t.kind.as_str().into()
                },
                name: t.name,
                quantum: t.quantum as u32,
                quantum_requested: t.quantum_requested.map(|q| q as u32),
                rate: t.rate,
                cycles: t.cycles,
                wait_avg_ns: t.wait_avg_ns,
                wait_max_ns: t.wait_max_ns,
                busy_avg_ns: t.busy_avg_ns,
                busy_max_ns: t.busy_max_ns,
                rt_avg_ns: t.rt_avg_ns,
                rt_max_ns: t.rt_max_ns,
                xruns: t.xruns,
            })
            .collect();
        TimingStats {
            rate: self.engine.rate(),
            quantum: self.engine.quantum() as u32,
            cycles: st.cycles.load(Relaxed),
            xruns: st.xruns.load(Relaxed),
            lateness_ns_log2: hist(&st.lateness_hist),
            busy_ns_log2: hist(&st.busy_hist),
            lateness_max_ns: st.lateness_max_ns.load(Relaxed),
            busy_max_ns: st.busy_ns_max.load(Relaxed),
            nodes,
            interval_ns,
            suspended: st.suspended.load(Relaxed),
            overdue_cycles: st.overdue_cycles.load(Relaxed),
            overdue_runs: st.overdue_runs.load(Relaxed),
            stages: self
                .engine
                .config()
                .node_timing
                .then(|| stage_stats(&st.stages)),
        }
    }

    /// The graph reply.
    pub fn graph_info(&self) -> GraphInfo {
        let g = self.engine.graph();
        let feedback = quaver_engine::feedback::feedback_links(&g);
        let rate = self.engine.rate() as f64;
        let mut callbacks = self.callback_infos();
        // The published atomics, not `Engine::status()`: that copies every device's
        // description and takes a lock, on every graph request.
        let stats = self.engine.stats();
        GraphInfo {
            nodes: g
                .nodes
                .values()
                .map(|n| NodeInfo {
                    id: n.id,
                    name: n.name.clone(),
                    kind: if callbacks.contains_key(&n.id) {
                        "client".into()
                    } else {
                        n.kind.as_str().into()
                    },
                    callback: callbacks.remove(&n.id),
                    description: n.description.clone(),
                    volume: n.volume,
                    mute: n.mute,
                    latency_ms: n.latency_frames.map(|f| f as f64 * 1000.0 / rate),
                    playback_lead_frames: n
                        .device
                        .filter(|_| n.kind == NodeKind::DeviceSink)
                        .and_then(|i| stats.devices.get(i))
                        .map(|d| d.margin_frames.load(std::sync::atomic::Ordering::Relaxed)),
                    suspended: n.suspended,
                    physical: n.physical,
                    ports: n
                        .inputs
                        .iter()
                        .chain(&n.outputs)
                        .map(|id| {
                            let p = &g.ports[id];
                            PortInfo {
                                id: p.id,
                                name: p.name.clone(),
                                direction: match p.direction {
                                    PortDir::In => PortDirection::In,
                                    PortDir::Out => PortDirection::Out,
                                },
                                channel: p.channel.name(),
                                port_type: crate::callback::wire_type(p.port_type),
                            }
                        })
                        .collect(),
                })
                .collect(),
            links: g
                .links
                .values()
                .map(|l| {
                    let (o, i) = (&g.ports[&l.output], &g.ports[&l.input]);
                    LinkInfo {
                        id: l.id,
                        output_node: g.nodes[&o.node].name.clone(),
                        output_port: o.name.clone(),
                        input_node: g.nodes[&i.node].name.clone(),
                        input_port: i.name.clone(),
                        feedback: feedback.contains(&l.id),
                    }
                })
                .collect(),
        }
    }
}

/// The stage histograms as the `timing` reply carries them.
fn stage_stats(st: &quaver_engine::rt::stages::CycleStages) -> quaver_protocol::StageStats {
    use quaver_engine::rt::stages::{CLASS_NAMES, Class, STAGE_NAMES};
    quaver_protocol::StageStats {
        stages: STAGE_NAMES.iter().map(|s| s.to_string()).collect(),
        classes: [Class::All, Class::Late, Class::Xrun]
            .into_iter()
            .map(|c| {
                let r = st.read(c);
                quaver_protocol::StageClass {
                    name: CLASS_NAMES[c as usize].into(),
                    cycles: r.cycles,
                    hist: r.hist,
                    dominant: r.dominant,
                    sum_ns: r.sum_ns,
                }
            })
            .collect(),
    }
}
