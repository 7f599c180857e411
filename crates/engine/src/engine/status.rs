//! Reading the engine: the graph, its events, status counters and per-node timing.

use crate::compile::stopped_nodes;
use crate::engine::config::EngineConfig;
use crate::engine::handle::Engine;
use crate::engine::report::{
    DeviceStatus, EngineStatus, FollowStatus, GraphEvent, NodeTiming, SlotMark,
};
use crate::graph::{Graph, NodeId, NodeKind};
use crate::rt::stats::RtStats;
use quaver_rt::monotonic_ns;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;

impl Engine {
    /// A channel that receives every later graph and device change, in order. Events
    /// are sent from control threads; a dropped receiver is forgotten.
    pub fn subscribe(&self) -> std::sync::mpsc::Receiver<GraphEvent> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.lock().watchers.push(tx);
        rx
    }

    /// A copy of the graph description.
    pub fn graph(&self) -> Graph {
        self.lock().graph.clone()
    }

    /// Runs `f` on the graph description without copying it (under the control lock:
    /// keep `f` short, and do not call back into the engine from it).
    pub fn inspect<R>(&self, f: impl FnOnce(&Graph) -> R) -> R {
        f(&self.lock().graph)
    }

    /// The name of node `id`, if it exists.
    pub fn node_name(&self, id: NodeId) -> Option<String> {
        self.lock().graph.nodes.get(&id).map(|n| n.name.clone())
    }

    /// The nodes the graph as it is now leaves out of the plan ([`stopped_nodes`]): the
    /// suspended ones and those that only feed or are fed by them.
    pub fn stopped_nodes(&self) -> HashSet<NodeId> {
        stopped_nodes(&self.lock().graph)
    }

    /// The engine's sample rate.
    pub fn rate(&self) -> u32 {
        self.shared.rate
    }

    /// The quantum of the latest published plan.
    pub fn quantum(&self) -> usize {
        self.lock().quantum
    }

    /// The configuration the engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Counters and state for `quaver status`.
    pub fn status(&self) -> EngineStatus {
        let s = &self.shared.stats;
        let suspended = s.suspended.load(Relaxed);
        let net = self.shared.net.read().expect("poisoned").clone();
        EngineStatus {
            rate: self.shared.rate,
            quantum: self.quantum(),
            quantum_min: self.shared.config.quantum_min,
            quantum_max: self.shared.config.quantum_max,
            realtime: self
                .shared
                .realtime
                .lock()
                .expect("poisoned")
                .outcome
                .clone(),
            cycles: s.cycles.load(Relaxed),
            xruns: s.xruns.load(Relaxed),
            busy_ns_last: s.busy_ns_last.load(Relaxed),
            busy_ns_max: s.busy_ns_max.load(Relaxed),
            devices: self
                .devices()
                .into_iter()
                .map(|(i, info)| {
                    let d = &s.devices[i];
                    DeviceStatus {
                        index: i,
                        info,
                        suspended,
                        gone: d.gone.load(Relaxed),
                        closed: d.closed.load(Relaxed),
                        idle_closes: d.idle_closes.load(Relaxed),
                        reopens: d.reopens.load(Relaxed),
                        wakeups: d.wakeups.load(Relaxed),
                        pointer_queries: d.pointer_queries.load(Relaxed),
                        underruns: d.underruns.load(Relaxed),
                        overruns: d.overruns.load(Relaxed),
                        frames_written: d.frames_written.load(Relaxed),
                        margin_frames: d.margin_frames.load(Relaxed),
                        margin_changes: d.margin_changes.load(Relaxed),
                        follow: follow_status(d),
                        net: net.get(i).and_then(|h| h.as_ref()).map(|h| h.status()),
                    }
                })
                .collect(),
        }
    }

    /// Every node's timing over the interval since the previous call (by any caller):
    /// wait, busy and RT-thread time per cycle (means and maxima), xruns. Nodes in
    /// graph order (by id). Empty figures when node timing is off.
    pub fn node_timing(&self) -> Vec<NodeTiming> {
        let (nodes, quantum) = {
            let ctl = self.lock();
            let nodes: Vec<_> = ctl
                .graph
                .nodes
                .values()
                .map(|n| {
                    (
                        n.id,
                        n.name.clone(),
                        n.kind,
                        n.device,
                        n.slot,
                        n.latency_frames,
                    )
                })
                .collect();
            (nodes, ctl.quantum)
        };
        let s = &self.shared.stats;
        let quantum = match s.quantum.load(Relaxed) {
            0 => quantum,
            q => q as usize,
        };
        let now = monotonic_ns();
        let mut marks = self.shared.timing_marks.lock().expect("poisoned");
        let interval_ns = now.saturating_sub(marks.0);
        marks.0 = now;
        nodes
            .into_iter()
            .map(|(id, name, kind, device, slot, latency)| {
                let t = &self.shared.node_times[slot];
                let samples = t.samples.load(Relaxed);
                let wait_total = t.wait_total.load(Relaxed);
                let busy_total = t.busy_total.load(Relaxed);
                let rt_total = t.rt_total.load(Relaxed);
                // A slot taken over by another node, or reset since: start from zero.
                let prev = match marks.1[slot] {
                    m if m.node == Some(id) && m.samples <= samples => m,
                    _ => SlotMark::default(),
                };
                marks.1[slot] = SlotMark {
                    node: Some(id),
                    samples,
                    wait_total,
                    busy_total,
                    rt_total,
                };
                let cycles = samples - prev.samples;
                let avg = |total: u64, before: u64, last: u64| {
                    total
                        .saturating_sub(before)
                        .checked_div(cycles)
                        .unwrap_or(last)
                };
                let busy_last = t.busy_last.load(Relaxed);
                let device_xruns = device.map(|d| {
                    let d = &s.devices[d];
                    match kind {
                        NodeKind::DeviceSource => d.overruns.load(Relaxed),
                        _ => d.underruns.load(Relaxed),
                    }
                });
                NodeTiming {
                    id,
                    name,
                    kind,
                    device,
                    quantum,
                    quantum_requested: latency.map(|l| self.quantum_for_latency(l as usize)),
                    rate: self.shared.rate,
                    cycles,
                    cycles_total: samples,
                    wait_avg_ns: avg(wait_total, prev.wait_total, t.wait_last.load(Relaxed)),
                    wait_max_ns: t.wait_max.swap(0, Relaxed),
                    busy_avg_ns: avg(busy_total, prev.busy_total, busy_last),
                    busy_max_ns: t.busy_max.swap(0, Relaxed),
                    rt_avg_ns: rt_total
                        .saturating_sub(prev.rt_total)
                        .checked_div(cycles)
                        .unwrap_or(0),
                    rt_max_ns: t.rt_max.swap(0, Relaxed),
                    xruns: device_xruns.unwrap_or_else(|| t.xruns.load(Relaxed)),
                    interval_ns,
                }
            })
            .collect()
    }

    /// The RT thread's raw counters.
    pub fn stats(&self) -> &RtStats {
        &self.shared.stats
    }
}

/// A follower's loop as its device's counters publish it (`None` unless steered).
fn follow_status(d: &crate::rt::stats::DeviceStats) -> Option<FollowStatus> {
    use crate::rt::stats::{NO_LEVEL, NO_RATIO};
    if !d.follow_active.load(Relaxed) {
        return None;
    }
    let level = |a: &std::sync::atomic::AtomicU64| Some(a.load(Relaxed)).filter(|&l| l != NO_LEVEL);
    let ppm = |a: &std::sync::atomic::AtomicI64| {
        Some(a.load(Relaxed))
            .filter(|&p| p != NO_RATIO)
            .map(|p| p as f64 / 1e3)
    };
    let target = level(&d.follow_play_target);
    Some(FollowStatus {
        // The playback side has a level to hold once it has a target; before the first
        // reading (or on a capture-only device) its ratio means nothing.
        play_ppm: target.and_then(|_| ppm(&d.follow_play_ppb)),
        capture_ppm: ppm(&d.follow_cap_ppb),
        play_level: level(&d.follow_play_level),
        play_target: target,
        play_error: (
            d.follow_play_err_min.load(Relaxed),
            d.follow_play_err_max.load(Relaxed),
        ),
        restarts: d.follow_restarts.load(Relaxed),
    })
}
