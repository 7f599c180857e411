//! quaverd's own view of a window: its status, graph and timing replies before and
//! after, differenced.

use crate::report::stats::Log2Hist;
use crate::tools::daemon::Daemon;
use quaver_client::quaver_protocol::{GraphInfo, NodeTimingInfo, StatusInfo, TimingStats};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default)]
pub(super) struct QuaverSnap {
    pub(super) status: Option<StatusInfo>,
    pub(super) timing: Option<TimingStats>,
    pub(super) graph: Option<GraphInfo>,
}

pub(super) fn quaver_snap(d: &Daemon) -> QuaverSnap {
    match d.connect("quaver-bench jack") {
        Ok(mut c) => QuaverSnap {
            status: c.status().ok(),
            timing: c.timing().ok(),
            graph: c.graph().ok(),
        },
        Err(_) => QuaverSnap::default(),
    }
}

/// quaverd's own account of a window, for the clients named `prefix-…`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QuaverSide {
    /// Device xruns (status).
    pub device_xruns: u64,
    /// Cycles missed by the clients (graph, callback nodes).
    pub client_misses: u64,
    /// Runs of consecutive missed cycles: xrun events, as jackd2 counts them.
    #[serde(default)]
    pub client_xrun_events: u64,
    /// Cycles quaverd ran early (catching up after its own late wakeup) and waited for a
    /// client still within its deadline.
    #[serde(default)]
    pub client_caught_up: u64,
    /// Cycles the clients were not woken because an upstream node was late.
    pub client_skips: u64,
    /// Times the RT thread fell behind: runs of driver wakeups more than a period after
    /// their deadline (what jackd2's timed driver logs as an xrun).
    #[serde(default)]
    pub overdue_runs: u64,
    /// The driver cycles of those runs.
    #[serde(default)]
    pub overdue_cycles: u64,
    /// Clients in async mode at the end.
    pub async_clients: usize,
    /// Whether both graph snapshots came back and the end one still held the clients'
    /// nodes: without it the miss count is unknown, not zero.
    #[serde(default)]
    pub counted: bool,
    /// Mean time the server waited for a client per wake, ns (over the window, mean of
    /// the clients).
    pub wait_per_client_ns: Option<f64>,
    /// Wakes in the window (all clients).
    pub wakes: u64,
    /// Cycles in the window.
    pub cycles: u64,
    /// The RT thread's busy time per cycle over the window.
    pub busy: Option<Log2Hist>,
    /// The RT thread's wakeup lateness over the window.
    pub lateness: Option<Log2Hist>,
    /// Whether the RT thread ran SCHED_FIFO.
    pub realtime: bool,
    /// pw-top's WAIT per cycle as quaverd times it (`timing` nodes: signal → the
    /// client's process thread awake), mean over the window, mean of the clients, ns.
    #[serde(default)]
    pub node_wait_ns: Option<f64>,
    /// pw-top's BUSY per cycle as quaverd times it (awake → completion), ns.
    #[serde(default)]
    pub node_busy_ns: Option<f64>,
    /// The RT thread's own time per client per cycle (waking it, blocking on it,
    /// collecting it), ns.
    #[serde(default)]
    pub node_rt_ns: Option<f64>,
    /// Clients the per-node figures cover.
    #[serde(default)]
    pub timed_clients: usize,
    /// Where the window's cycles spent their time, stage by stage (None: a server
    /// without the breakdown, or node timing off).
    #[serde(default)]
    pub stages: Option<super::stages::StageWindow>,
}

pub(super) fn quaver_side(a: &QuaverSnap, b: &QuaverSnap, prefix: &str) -> QuaverSide {
    let mut q = QuaverSide::default();
    if let (Some(s0), Some(s1)) = (&a.status, &b.status) {
        q.device_xruns = s1.xruns.saturating_sub(s0.xruns);
        q.cycles = s1.cycles.saturating_sub(s0.cycles);
        q.realtime = s1.realtime;
    }
    if let (Some(t0), Some(t1)) = (&a.timing, &b.timing) {
        q.busy = Some(
            Log2Hist::from_counts(&t1.busy_ns_log2).since(&Log2Hist::from_counts(&t0.busy_ns_log2)),
        );
        let l = Log2Hist::from_counts(&t1.lateness_ns_log2)
            .since(&Log2Hist::from_counts(&t0.lateness_ns_log2));
        q.lateness = (l.total() > 0).then_some(l);
        q.overdue_runs = t1.overdue_runs.saturating_sub(t0.overdue_runs);
        q.overdue_cycles = t1.overdue_cycles.saturating_sub(t0.overdue_cycles);
        if let (Some(s0), Some(s1)) = (&t0.stages, &t1.stages) {
            q.stages = Some(super::stages::window(s0, s1));
        }
        // The window-start snapshot's `timing` request opened the interval the end
        // snapshot's node figures cover: exactly the window.
        let ours: Vec<_> = t1
            .nodes
            .iter()
            .filter(|n| n.name.starts_with(&format!("{prefix}-")) && n.cycles > 0)
            .collect();
        let mean = |f: fn(&NodeTimingInfo) -> u64| {
            (!ours.is_empty())
                .then(|| ours.iter().map(|n| f(n) as f64).sum::<f64>() / ours.len() as f64)
        };
        q.node_wait_ns = mean(|n| n.wait_avg_ns);
        q.node_busy_ns = mean(|n| n.busy_avg_ns);
        q.node_rt_ns = mean(|n| n.rt_avg_ns);
        q.timed_clients = ours.len();
    }
    if let (Some(g0), Some(g1)) = (&a.graph, &b.graph) {
        let mut waits = Vec::new();
        for n in &g1.nodes {
            let Some(cb1) = &n.callback else { continue };
            if !n.name.starts_with(&format!("{prefix}-")) {
                continue;
            }
            q.counted = true;
            let cb0 = g0
                .nodes
                .iter()
                .find(|m| m.id == n.id)
                .and_then(|m| m.callback.clone())
                .unwrap_or_default();
            q.client_misses += cb1.xruns.saturating_sub(cb0.xruns);
            q.client_xrun_events += cb1.xrun_events.saturating_sub(cb0.xrun_events);
            q.client_caught_up += cb1.caught_up.saturating_sub(cb0.caught_up);
            q.client_skips += cb1.skipped.saturating_sub(cb0.skipped);
            if cb1.mode == "async" {
                q.async_clients += 1;
            }
            let woken = cb1.woken.saturating_sub(cb0.woken);
            q.wakes += woken;
            if woken > 0 {
                let total = cb1.wait_avg_ns as f64 * cb1.woken as f64
                    - cb0.wait_avg_ns as f64 * cb0.woken as f64;
                waits.push((total / woken as f64).max(0.0));
            }
        }
        if !waits.is_empty() {
            q.wait_per_client_ns = Some(waits.iter().sum::<f64>() / waits.len() as f64);
        }
    }
    q
}
