//! `jack`: one JACK client ([`crate::modes::jack::client`]) against quaverd (quaver's libjack),
//! jackd2 (dummy driver) and PipeWire (pipewire-jack), for two acceptance items of the
//! low-latency work:
//!
//! - **xruns under load**: at each period (64 and 32 frames) and with `stress-ng --cpu
//!   2` running, the client renders a SynthMark-like voice load of about half a core
//!   for a window (60 s) on each server, in rounds (3) whose windows alternate the
//!   servers; xruns as each server counts them, as the client's xrun callback reports
//!   them and as the client observes them (frame-time jumps, callbacks ending after the
//!   next cycle's start), per window and summed per server (the verdict is on the
//!   sums), next to cyclictest's count of wakeups later than one period under the same
//!   load for the same time;
//! - **per-client overhead**: 1, 8 and 32 clients with a light fixed load; quaverd's
//!   per-node WAIT/BUSY per client (its `timing` reply's nodes, pw-top's definitions),
//!   the time its RT thread blocked on and spent on each client, cycle busy time,
//!   PipeWire's per-node WAIT/BUSY as `pw-top` computes them (from `pw-top -b`, or,
//!   where pw-top has no batch mode, from the same profiler data through
//!   `pw-profiler`), and every server's figures as the client itself measures them.

pub mod client;
pub mod ffi;
pub mod jackd;
pub mod options;
pub mod pipewire;
pub mod quaver;
pub mod render;
pub mod runner;
pub mod stages;

pub use jackd::JACKD_START_TIMEOUT;
pub use options::{CLIENT_OPEN_TIMEOUT, JackOptions, JackServer};
pub use quaver::QuaverSide;

use crate::Ctx;
use crate::modes::jack::client::{ClientRun, CounterSnapshot};
use crate::modes::jack::jackd::{jackd_driver_xrun_lines, jackd_xrun_lines};
use crate::modes::jack::pipewire::PW_JACK_LIB;
use crate::modes::jack::pipewire::{NodeTimes, PwMonitor, PwTool, pw_tool};
use crate::modes::jack::quaver::{QuaverSnap, quaver_side, quaver_snap};
use crate::modes::jack::runner::{
    Running, client_args, client_command, find_next_to_me, run_client, start_server,
};
use crate::tools::cyclictest::{self, CyclictestResult};
use crate::tools::exec::{describe, which};
use crate::tools::machine::{NOT_INSTALLED, tool_version};
use crate::tools::stressor::{self, StressorConfig, StressorKind};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- results

/// One window of one server at one period in the xrun part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XrunPoint {
    /// Server.
    pub server: JackServer,
    /// Period asked for.
    pub period: usize,
    /// Round of the period's alternating windows, from 0 (records from before
    /// `--repeats` had one round and read as 0).
    #[serde(default)]
    pub repeat: usize,
    /// The client's figures (None: failed).
    pub client: Option<ClientRun>,
    /// The server's own xrun count in the window, as jackd2 counts them (quaverd: xrun
    /// events — runs of missed cycles — + device xruns + times its RT thread fell a cycle
    /// behind; jackd2: xrun lines in its log,
    /// which it writes for the first failing cycle of a run only; PipeWire: none, see the
    /// xrun callbacks).
    pub server_xruns: Option<u64>,
    /// quaverd: cycles the client missed (every cycle of every run).
    #[serde(default)]
    pub missed_cycles: Option<u64>,
    /// Of `server_xruns`, the server's own lateness: jackd2's timed-driver lines (a cycle
    /// ended after the next was due), quaverd's runs of overdue driver cycles.
    #[serde(default)]
    pub driver_xruns: Option<u64>,
    /// quaverd's details.
    pub quaver: Option<QuaverSide>,
    /// The load's command.
    pub stressor: Option<String>,
    /// Why there are no figures.
    pub error: Option<String>,
}

impl XrunPoint {
    fn totals(&self) -> Option<CounterSnapshot> {
        self.client
            .as_ref()
            .map(|c| CounterSnapshot::sum(c.clients.iter().map(|x| &x.window)))
    }

    fn minutes(&self) -> f64 {
        self.client.as_ref().map_or(0.0, |c| c.seconds / 60.0)
    }
}

/// One server's windows at one period, summed: what the acceptance verdict compares.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XrunTotals {
    /// Period asked for.
    pub period: usize,
    /// Server.
    pub server: JackServer,
    /// Windows with figures.
    pub windows: usize,
    /// Windows that failed (left out of every figure here).
    pub failed: usize,
    /// Minutes of the windows with figures.
    pub minutes: f64,
    /// Server-counted xruns over the windows that have a count (None: none has).
    pub server_xruns: Option<u64>,
    /// quaverd: missed cycles over those windows.
    pub missed_cycles: Option<u64>,
    /// jackd2: driver-late lines over those windows.
    pub driver_xruns: Option<u64>,
    /// Minutes of the windows that have a server count.
    pub server_minutes: f64,
    /// The client's xrun callbacks over the windows.
    pub xrun_callbacks: u64,
    /// Client-observed callbacks more than two periods late over the windows
    /// (`CounterSnapshot::late2`).
    pub late: u64,
    /// Of those, frame-time jumps.
    pub jumps: u64,
    /// Of those, overruns.
    pub overruns: u64,
    /// Server-counted xruns / minutes over all windows (None: no count or no window).
    pub server_per_min: Option<f64>,
    /// Client-observed late callbacks / minutes over all windows (None: no window).
    pub late_per_min: Option<f64>,
    /// Each window's server-counted rate, /min, in run order.
    pub server_rates: Vec<f64>,
    /// Each window's client-observed rate, /min, in run order.
    pub late_rates: Vec<f64>,
}

impl XrunTotals {
    /// Sums `server`'s windows at `period` among `points`.
    pub fn of(points: &[XrunPoint], period: usize, server: JackServer) -> XrunTotals {
        let mut t = XrunTotals {
            period,
            server,
            windows: 0,
            failed: 0,
            minutes: 0.0,
            server_xruns: None,
            missed_cycles: None,
            driver_xruns: None,
            server_minutes: 0.0,
            xrun_callbacks: 0,
            late: 0,
            jumps: 0,
            overruns: 0,
            server_per_min: None,
            late_per_min: None,
            server_rates: Vec::new(),
            late_rates: Vec::new(),
        };
        for p in points
            .iter()
            .filter(|p| p.period == period && p.server == server)
        {
            let Some(c) = p.totals() else {
                t.failed += 1;
                continue;
            };
            let m = p.minutes();
            t.windows += 1;
            t.minutes += m;
            t.xrun_callbacks += c.xrun_callbacks;
            t.late += c.late2;
            t.jumps += c.jumps;
            t.overruns += c.overruns;
            t.late_rates.push(rate(c.late2, m));
            if let Some(x) = p.server_xruns {
                t.server_xruns = Some(t.server_xruns.unwrap_or(0) + x);
                let add = |sum: Option<u64>, v: Option<u64>| match v {
                    Some(v) => Some(sum.unwrap_or(0) + v),
                    None => sum,
                };
                t.missed_cycles = add(t.missed_cycles, p.missed_cycles);
                t.driver_xruns = add(t.driver_xruns, p.driver_xruns);
                t.server_minutes += m;
                t.server_rates.push(rate(x, m));
            }
        }
        // Rates over the summed minutes, not means of the window rates: a window cut
        // short weighs by what it measured.
        t.server_per_min = t.server_xruns.map(|x| rate(x, t.server_minutes));
        t.late_per_min = (t.windows > 0).then(|| rate(t.late, t.minutes));
        t
    }
}

pub(crate) fn rate(n: u64, minutes: f64) -> f64 {
    if minutes > 0.0 {
        n as f64 / minutes
    } else {
        0.0
    }
}

/// cyclictest at one period.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CyclictestPoint {
    /// Period, frames (its interval is one period).
    pub period: usize,
    /// Interval, µs.
    pub interval_us: u64,
    /// The command.
    pub command: Option<String>,
    /// Its result.
    pub result: Option<CyclictestResult>,
    /// Wakeups later than one period (histogram bins above it plus overflows).
    pub late: Option<u64>,
    /// Why there is none.
    pub error: Option<String>,
}

/// Wakeups of a cyclictest histogram later than `limit_us`.
pub fn cyclictest_late(r: &CyclictestResult, limit_us: u64) -> u64 {
    r.bins
        .iter()
        .filter(|(us, _)| *us > limit_us)
        .map(|b| b.1)
        .sum::<u64>()
        + r.overflows
}

/// One (server, N) point of the overhead part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverheadPoint {
    /// Server.
    pub server: JackServer,
    /// Clients.
    pub clients: usize,
    /// The client's figures.
    pub client: Option<ClientRun>,
    /// quaverd's server-side figures.
    pub quaver: Option<QuaverSide>,
    /// PipeWire's per-node figures (ours only), and how they were taken.
    pub pw_nodes: Option<Vec<NodeTimes>>,
    /// The tool.
    pub pw_tool: Option<PwTool>,
    /// Its command.
    pub pw_command: Option<String>,
    /// Why there are no figures.
    pub error: Option<String>,
}

/// Everything a `jack` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JackResults {
    /// Rate.
    pub rate: u32,
    /// Calibration: render time of one voice per cycle, ns, per period.
    pub ns_per_voice: Vec<(usize, f64)>,
    /// Voices of the xrun part, per period.
    pub voices: Vec<(usize, usize)>,
    /// Target share of a core.
    pub load: f64,
    /// Load name ("stress-ng", "built-in", "idle").
    pub stressor: String,
    /// Xrun part.
    pub xruns: Vec<XrunPoint>,
    /// cyclictest per period.
    pub cyclictest: Vec<CyclictestPoint>,
    /// Overhead part.
    pub overhead: Vec<OverheadPoint>,
    /// Overhead part's period.
    pub overhead_period: usize,
    /// Overhead part's voices per client.
    pub overhead_voices: usize,
    /// Servers not measured, with the reason.
    pub missing: Vec<(JackServer, String)>,
    /// quaverd's `callback.spin_us` when the run set it.
    #[serde(default)]
    pub callback_spin_us: Option<u32>,
}

// ---------------------------------------------------------------- the run

fn load_cfg() -> StressorConfig {
    StressorConfig {
        cpu: 2,
        io: false,
        vm_mb: 0,
    }
}

/// Runs both parts.
pub fn run(ctx: &mut Ctx, o: &JackOptions) -> Result<JackResults> {
    let prio = crate::tools::rt::client_priority(ctx.realtime_priority);
    let mut res = JackResults {
        rate: o.rate,
        ns_per_voice: Vec::new(),
        voices: Vec::new(),
        load: o.load,
        stressor: match stressor::resolve(o.stressor) {
            StressorKind::StressNg => "stress-ng".into(),
            StressorKind::None => "idle".into(),
            _ => "built-in".into(),
        },
        xruns: Vec::new(),
        cyclictest: Vec::new(),
        overhead: Vec::new(),
        overhead_period: o.overhead_period,
        callback_spin_us: o.callback_spin_us,
        overhead_voices: o.overhead_voices,
        missing: Vec::new(),
    };
    if res.stressor == "built-in" {
        ctx.note(
            "stress-ng is not installed: the built-in stressor (2 spinning threads) is the load",
        );
    }
    // Which servers can run at all.
    let mut servers = Vec::new();
    for &s in &o.servers {
        let why = match s {
            JackServer::Quaverd | JackServer::QuaverdAsync => {
                find_next_to_me(&o.self_exe, "quaver-jack")
                    .is_none()
                    .then(|| "quaver-jack not found (cargo build --release -p quaver-jack)".into())
            }
            JackServer::Jackd2 => (tool_version("jackd", &["--version"]) == NOT_INSTALLED)
                .then(|| "jackd: not installed".to_string()),
            JackServer::Pipewire => {
                if !Path::new(PW_JACK_LIB).exists() {
                    Some(format!(
                        "pipewire-jack: not installed ({PW_JACK_LIB} missing)"
                    ))
                } else if which("pw-jack").is_none() {
                    Some("pw-jack: not installed".into())
                } else {
                    crate::tools::servers::PIPEWIRE_PROGRAMS
                        .iter()
                        .find(|p| which(p).is_none())
                        .map(|p| format!("{p}: not installed"))
                }
            }
        };
        match why {
            Some(w) => {
                ctx.note(format!("{}: not measured — {w}", s.name()));
                res.missing.push((s, w));
            }
            None => servers.push(s),
        }
    }
    // Per period: every server's window in every round, then one cyclictest.
    let xrun_steps = if o.xruns {
        o.periods.len() as f64
            * ((servers.len() * o.repeats.max(1)) as f64 + 1.0)
            * (o.seconds + o.warmup + 3.0)
    } else {
        0.0
    };
    let oh_steps = if o.overhead {
        o.counts.len() as f64 * servers.len() as f64 * (o.overhead_seconds + o.warmup + 3.0)
    } else {
        0.0
    };
    let pb = ctx
        .progress
        .bar((xrun_steps + oh_steps).ceil() as u64, "jack");
    let t_start = Instant::now();
    let tick = |pb: &indicatif::ProgressBar| pb.set_position(t_start.elapsed().as_secs());
    if o.xruns {
        for &period in &o.periods {
            pb.set_message(format!("jack: calibrating the voices at {period}"));
            let ns = client::calibrate(
                period,
                o.rate,
                64,
                if ctx.quick { 300 } else { 3000 },
                ctx.seed,
                prio,
            );
            let voices = o
                .voices
                .unwrap_or_else(|| client::voices_for(o.load, period, o.rate, ns));
            res.ns_per_voice.push((period, ns));
            res.voices.push((period, voices));
            // Rounds alternate the servers (q, j, p, q, j, p, …) rather than running
            // one server's windows back to back: xruns on a shared VM come in bursts
            // (CPU slowdowns of tens of ms) that cluster in time, and alternating
            // spreads the same stretch of that noise over every server.
            let rounds = o.repeats.max(1);
            for repeat in 0..rounds {
                for &s in &servers {
                    pb.set_message(format!(
                        "jack: {} at {period} under load, window {}/{rounds}",
                        s.name(),
                        repeat + 1
                    ));
                    tick(&pb);
                    let p = xrun_point(ctx, o, s, period, voices, repeat);
                    tick(&pb);
                    res.xruns.push(p);
                }
            }
            // cyclictest is a reference for the machine, not part of the verdict: one
            // run per period, after the windows, keeps a full run's length in check.
            pb.set_message(format!("jack: cyclictest at {period} under load"));
            res.cyclictest.push(cyclictest_point(ctx, o, period));
            tick(&pb);
        }
    }
    if o.overhead {
        for &n in &o.counts {
            for &s in &servers {
                pb.set_message(format!("jack: {n} clients on {}", s.name()));
                tick(&pb);
                res.overhead.push(overhead_point(ctx, o, s, n));
            }
        }
    }
    pb.finish_and_clear();
    Ok(res)
}

fn xrun_point(
    ctx: &mut Ctx,
    o: &JackOptions,
    s: JackServer,
    period: usize,
    voices: usize,
    repeat: usize,
) -> XrunPoint {
    let mut p = XrunPoint {
        server: s,
        period,
        repeat,
        client: None,
        server_xruns: None,
        missed_cycles: None,
        driver_xruns: None,
        quaver: None,
        stressor: None,
        error: None,
    };
    let budget = Duration::from_secs_f64(o.seconds + o.warmup + 60.0);
    let st = match stressor::start(o.stressor, load_cfg(), budget, ctx.seed, &o.self_exe) {
        Ok(st) => st,
        Err(e) => {
            p.error = Some(format!("{e:#}"));
            return p;
        }
    };
    if let Some(st) = &st {
        ctx.record_command(format!("{} &", st.command));
        p.stressor = Some(st.command.clone());
    }
    let r = (|| -> Result<()> {
        std::thread::sleep(Duration::from_millis(500));
        let mut server = start_server(ctx, o, s, period)?;
        let prefix = "qb-synth";
        let args = client_args(1, voices, prefix, o.warmup, o.seconds, ctx.seed);
        let cmd = client_command(o, &server, period, &args)?;
        ctx.record_command(describe(&cmd));
        let mut snaps = (QuaverSnap::default(), QuaverSnap::default());
        let mut log = (0u64, 0u64);
        let r = {
            let srv = &server;
            run_client(
                cmd,
                o.warmup,
                o.seconds,
                || match srv {
                    Running::Quaverd(d) => snaps.0 = quaver_snap(d),
                    Running::Jackd(j) => log.0 = j.log_len(),
                    Running::Pipewire(_) => {}
                },
                || match srv {
                    Running::Quaverd(d) => snaps.1 = quaver_snap(d),
                    Running::Jackd(j) => log.1 = j.log_len(),
                    Running::Pipewire(_) => {}
                },
            )
        };
        match &server {
            Running::Quaverd(_) => {
                let q = quaver_side(&snaps.0, &snaps.1, prefix);
                p.server_xruns = q
                    .counted
                    .then_some(q.client_xrun_events + q.device_xruns + q.overdue_runs);
                p.missed_cycles = q.counted.then_some(q.client_misses + q.device_xruns);
                p.driver_xruns = q.counted.then_some(q.overdue_runs);
                if !q.counted {
                    ctx.note(
                        "quaverd: a window's closing snapshot did not find the client's node, \
                         so its miss count is unknown (n/a), not zero",
                    );
                }
                p.quaver = Some(q);
            }
            Running::Jackd(j) => {
                let text = j.log_text();
                let a = (log.0 as usize).min(text.len());
                let b = (log.1 as usize).clamp(a, text.len());
                p.server_xruns = text.get(a..b).map(jackd_xrun_lines);
                p.driver_xruns = text.get(a..b).map(jackd_driver_xrun_lines);
            }
            Running::Pipewire(_) => {}
        }
        server.stop();
        p.client = Some(r?);
        Ok(())
    })();
    if let Some(st) = st {
        st.stop();
    }
    if let Err(e) = r {
        p.error = Some(format!("{e:#}"));
    }
    p
}

fn cyclictest_point(ctx: &mut Ctx, o: &JackOptions, period: usize) -> CyclictestPoint {
    let interval_us = (period as u64 * 1_000_000).div_ceil(o.rate as u64);
    let mut c = CyclictestPoint {
        period,
        interval_us,
        command: None,
        result: None,
        late: None,
        error: None,
    };
    let secs = o.seconds.ceil().max(1.0) as u64;
    let st = stressor::start(
        o.stressor,
        load_cfg(),
        Duration::from_secs(secs + 30),
        ctx.seed,
        &o.self_exe,
    );
    let st = match st {
        Ok(st) => st,
        Err(e) => {
            c.error = Some(format!("{e:#}"));
            return c;
        }
    };
    if let Some(st) = &st {
        ctx.record_command(format!("{} &", st.command));
    }
    std::thread::sleep(Duration::from_millis(500));
    match cyclictest::run(secs, interval_us) {
        Ok(Some((cmd, r))) => {
            ctx.record_command(cmd.clone());
            c.late = Some(cyclictest_late(&r, interval_us));
            c.command = Some(cmd);
            c.result = Some(r);
        }
        Ok(None) => c.error = Some("cyclictest: not installed (apt install rt-tests)".into()),
        Err(e) => c.error = Some(format!("{e:#}")),
    }
    if let Some(st) = st {
        st.stop();
    }
    c
}

fn overhead_point(ctx: &mut Ctx, o: &JackOptions, s: JackServer, n: usize) -> OverheadPoint {
    let mut p = OverheadPoint {
        server: s,
        clients: n,
        client: None,
        quaver: None,
        pw_nodes: None,
        pw_tool: None,
        pw_command: None,
        error: None,
    };
    let r = (|| -> Result<()> {
        let period = o.overhead_period;
        let mut server = start_server(ctx, o, s, period)?;
        let prefix = "qb-light";
        let args = client_args(
            n,
            o.overhead_voices,
            prefix,
            o.warmup,
            o.overhead_seconds,
            ctx.seed,
        );
        let cmd = client_command(o, &server, period, &args)?;
        ctx.record_command(describe(&cmd));
        let tool = if s == JackServer::Pipewire {
            pw_tool()
        } else {
            None
        };
        p.pw_tool = tool;
        let mut snaps = (QuaverSnap::default(), QuaverSnap::default());
        let mut mon: Option<PwMonitor> = None;
        let mut mon_err = None;
        let r = {
            let srv = &server;
            run_client(
                cmd,
                o.warmup,
                o.overhead_seconds,
                || match srv {
                    Running::Quaverd(d) => snaps.0 = quaver_snap(d),
                    Running::Pipewire(ps) => {
                        if let Some(t) = tool {
                            match PwMonitor::start(t, ps.runtime_dir()) {
                                Ok(m) => mon = Some(m),
                                Err(e) => mon_err = Some(format!("{e:#}")),
                            }
                        }
                    }
                    Running::Jackd(_) => {}
                },
                || {
                    if let Running::Quaverd(d) = srv {
                        snaps.1 = quaver_snap(d)
                    }
                },
            )
        };
        if let Some(m) = mon {
            p.pw_command = Some(m.command.clone());
            ctx.record_command(format!("{} &   # during the window", m.command));
            let nodes = m.finish();
            p.pw_nodes = Some(
                nodes
                    .into_values()
                    .filter(|n| n.name.starts_with(&format!("{prefix}-")))
                    .collect(),
            );
        } else if s == JackServer::Pipewire {
            p.pw_command =
                Some(mon_err.unwrap_or_else(|| "pw-top/pw-profiler: not installed".into()));
        }
        if let Running::Quaverd(_) = &server {
            p.quaver = Some(quaver_side(&snaps.0, &snaps.1, prefix));
        }
        server.stop();
        p.client = Some(r?);
        Ok(())
    })();
    if let Err(e) = r {
        p.error = Some(format!("{e:#}"));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::jack::jackd::Jackd;
    use crate::modes::jack::render::{ratio, render, server_cell, spread};
    use quaver_client::quaver_protocol::{GraphInfo, NodeTimingInfo, TimingStats};

    #[test]
    fn counts_jackd_xrun_lines_and_cyclictest_lateness() {
        let log = "jackdmp 1.9.21\nJackEngine::XRun: client = qb-synth-0 was not finished, state = Triggered\n\
                   JackAudioDriver::ProcessGraphAsyncMaster: Process error\nsome other line\n\
                   JackTimedDriver::Process XRun = 2051 usec\n";
        assert_eq!(jackd_xrun_lines(log), 2);
        assert_eq!(jackd_driver_xrun_lines(log), 1);
        assert_eq!(server_cell(Some(3), Some(40), None), "3 (40 missed cycles)");
        assert_eq!(server_cell(Some(2), None, Some(1)), "2 (1 driver)");
        assert_eq!(
            server_cell(Some(5), Some(40), Some(2)),
            "5 (40 missed cycles, 2 driver)"
        );
        assert_eq!(server_cell(None, Some(1), None), "n/a");
        let r = CyclictestResult {
            min_us: 3,
            avg_us: 10,
            max_us: 20_000,
            samples: 107,
            overflows: 2,
            bins: vec![(5, 100), (1333, 1), (1334, 3), (4000, 1)],
        };
        assert_eq!(cyclictest_late(&r, 1334), 1 + 2);
        assert_eq!(cyclictest_late(&r, 1333), 4 + 2);
    }

    #[test]
    fn quaver_side_differences_the_snapshots() {
        use quaver_client::quaver_protocol::{CallbackNodeInfo, NodeInfo};
        let node = |woken, xruns, xrun_events, wait_avg_ns| NodeInfo {
            id: 7,
            name: "qb-light-0".into(),
            kind: "callback".into(),
            description: String::new(),
            volume: 1.0,
            mute: false,
            latency_ms: None,
            playback_lead_frames: None,
            suspended: false,
            physical: false,
            ports: Vec::new(),
            callback: Some(CallbackNodeInfo {
                mode: "sync".into(),
                active: true,
                woken,
                xruns,
                xrun_events,
                skipped: 0,
                wait_avg_ns,
                wait_max_ns: 0,
                quantum: Some(64),
                ..CallbackNodeInfo::default()
            }),
        };
        let g = |n| GraphInfo {
            nodes: vec![n],
            links: Vec::new(),
        };
        let a = QuaverSnap {
            graph: Some(g(node(100, 1, 1, 10_000))),
            ..QuaverSnap::default()
        };
        let b = QuaverSnap {
            graph: Some(g(node(300, 4, 2, 20_000))),
            ..QuaverSnap::default()
        };
        let q = quaver_side(&a, &b, "qb-light");
        assert_eq!(q.client_misses, 3);
        assert_eq!(q.client_xrun_events, 1);
        assert_eq!(q.wakes, 200);
        // (300·20 µs − 100·10 µs) / 200 = 25 µs.
        assert_eq!(q.wait_per_client_ns, Some(25_000.0));
        assert_eq!(quaver_side(&a, &b, "other").wakes, 0);
        assert_eq!(q.node_busy_ns, None, "no timing, no per-node figures");
    }

    #[test]
    fn quaver_side_takes_per_node_figures_from_the_end_snapshot() {
        let t = |nodes| TimingStats {
            rate: 48000,
            quantum: 64,
            cycles: 0,
            xruns: 0,
            lateness_ns_log2: Vec::new(),
            busy_ns_log2: Vec::new(),
            lateness_max_ns: 0,
            busy_max_ns: 0,
            nodes,
            interval_ns: 3_000_000_000,
            suspended: false,
            overdue_cycles: 0,
            overdue_runs: 0,
            stages: None,
        };
        let node = |name: &str, cycles, wait, busy| NodeTimingInfo {
            name: name.into(),
            cycles,
            wait_avg_ns: wait,
            busy_avg_ns: busy,
            rt_avg_ns: wait + busy,
            ..NodeTimingInfo::default()
        };
        let a = QuaverSnap {
            timing: Some(TimingStats {
                overdue_cycles: 5,
                overdue_runs: 2,
                ..t(Vec::new())
            }),
            ..QuaverSnap::default()
        };
        let b = QuaverSnap {
            timing: Some(TimingStats {
                overdue_cycles: 12,
                overdue_runs: 3,
                ..t(vec![
                    node("qb-light-0", 100, 10_000, 30_000),
                    node("qb-light-1", 100, 20_000, 50_000),
                    node("qb-light-2", 0, 0, 0),
                    node("null-sink", 100, 0, 2_000),
                ])
            }),
            ..QuaverSnap::default()
        };
        let q = quaver_side(&a, &b, "qb-light");
        assert_eq!(
            (q.overdue_runs, q.overdue_cycles),
            (1, 7),
            "the window's own"
        );
        assert_eq!(q.timed_clients, 2, "idle and foreign nodes are left out");
        assert_eq!(q.node_wait_ns, Some(15_000.0));
        assert_eq!(q.node_busy_ns, Some(40_000.0));
        assert_eq!(q.node_rt_ns, Some(55_000.0));
    }

    /// A window of `server` in round `repeat` at period 64: one minute, `srv` server
    /// xruns (None: not counted), `late` late callbacks (None: the window failed).
    fn window(server: JackServer, repeat: usize, srv: Option<u64>, late: Option<u64>) -> XrunPoint {
        let client = late.map(|late| ClientRun {
            open: client::OpenInfo {
                library: "/usr/lib/libjack.so.0".into(),
                version: "1.9.21".into(),
                rate: 48_000,
                buffer_size: 64,
                server_realtime: true,
            },
            nframes: 64,
            seconds: 60.0,
            voices: 100,
            clients: vec![client::ClientFigures {
                name: "qb-synth-0".into(),
                connected_to: Some("system:playback_1".into()),
                sched: "SCHED_FIFO 19".into(),
                cpu_load: 50.0,
                window: CounterSnapshot {
                    cycles: 45_000,
                    late,
                    late2: late,
                    jumps: late,
                    xrun_callbacks: late,
                    ..CounterSnapshot::default()
                },
            }],
        });
        XrunPoint {
            server,
            period: 64,
            repeat,
            error: client.is_none().then(|| "it broke".into()),
            client,
            server_xruns: srv,
            missed_cycles: None,
            driver_xruns: None,
            quaver: None,
            stressor: Some("stress-ng --cpu 2".into()),
        }
    }

    fn results(xruns: Vec<XrunPoint>) -> JackResults {
        JackResults {
            rate: 48_000,
            ns_per_voice: vec![(64, 500.0)],
            voices: vec![(64, 100)],
            load: 0.5,
            stressor: "stress-ng".into(),
            xruns,
            cyclictest: Vec::new(),
            overhead: Vec::new(),
            overhead_period: 64,
            overhead_voices: 4,
            missing: Vec::new(),
            callback_spin_us: None,
        }
    }

    #[test]
    fn totals_sum_the_alternating_windows_and_the_verdict_is_on_them() {
        use JackServer::*;
        // Three rounds, q j p alternating. Round 2 alone would fail quaverd (9 vs 1) and
        // round 1 alone would pass it; the totals (9 in 3 min vs 10 in 3 min) pass.
        let xruns = vec![
            window(Quaverd, 0, Some(0), Some(2)),
            window(Jackd2, 0, Some(5), Some(1)),
            window(Pipewire, 0, None, None),
            window(Quaverd, 1, Some(9), Some(4)),
            window(Jackd2, 1, Some(1), Some(1)),
            window(Pipewire, 1, None, Some(6)),
            window(Quaverd, 2, Some(0), Some(0)),
            window(Jackd2, 2, Some(4), Some(1)),
            window(Pipewire, 2, None, Some(3)),
        ];
        let q = XrunTotals::of(&xruns, 64, Quaverd);
        assert_eq!((q.windows, q.failed), (3, 0));
        assert_eq!(q.server_xruns, Some(9));
        assert_eq!(q.server_per_min, Some(3.0));
        assert_eq!(q.late, 6);
        assert_eq!(q.late_per_min, Some(2.0));
        assert_eq!(q.server_rates, vec![0.0, 9.0, 0.0]);
        assert_eq!(spread(&q.server_rates), "0.00 (0.00–9.00)");
        let j = XrunTotals::of(&xruns, 64, Jackd2);
        assert_eq!(j.server_xruns, Some(10));
        assert!((j.server_per_min.unwrap() - 10.0 / 3.0).abs() < 1e-9);
        assert_eq!(spread(&j.server_rates), "4.00 (1.00–5.00)");
        let p = XrunTotals::of(&xruns, 64, Pipewire);
        assert_eq!(
            (p.windows, p.failed),
            (2, 1),
            "the failed window is left out"
        );
        assert_eq!(p.server_xruns, None);
        assert_eq!(p.server_per_min, None);
        assert_eq!(p.late_per_min, Some(4.5));
        assert_eq!(XrunTotals::of(&xruns, 32, Quaverd).windows, 0);

        let out = render(&results(xruns.clone()));
        let md = &out.markdown;
        assert!(
            md.contains("3 windows per server and period, the servers' windows alternating"),
            "{md}"
        );
        assert!(
            md.contains(
                "period 64: quaverd 3.00/min (9 xruns in 3.00 min, 3 windows) vs jackd2 3.33/min"
            ),
            "{md}"
        );
        assert!(md.contains("quaverd ≤ jackd2: met"), "{md}");
        assert!(md.contains("per-window median 0.00 vs 4.00"), "{md}");
        // 9 vs 10 server xruns: not half of jackd2's.
        assert!(md.contains("issue 33: > 0.5×: NOT met"), "{md}");
        // 6 late in 3 min vs 3 late: not met either.
        assert!(
            md.contains("late 2.00/min vs 1.00/min (6 late, issue 33: > 0.5×: NOT met)"),
            "{md}"
        );
        assert_eq!(md.matches("- period ").count(), 1, "one verdict per period");
        // A row per window with its round, and a total row per server.
        let text = out.summary.markdown();
        assert_eq!(text.matches("| 2/3 |").count(), 3, "{text}");
        assert!(text.contains("| total: 3 (3.00 min) |"), "{text}");
        assert!(text.contains("| total: 2 (2.00 min), 1 failed |"), "{text}");
        // PipeWire's two measured windows: 6 and 3 late per minute, the median between.
        assert!(text.contains("| n/a / 4.50 (3.00–6.00) |"), "{text}");
        assert!(
            text.contains("0.00 (0.00–9.00) / 2.00 (0.00–4.00)"),
            "{text}"
        );
        assert!(md.contains("- quaverd at 64, window 3/3: "), "{md}");
        // The round-2 quaverd row compares with round 2's jackd2 window (9 vs 1).
        assert!(text.contains("| 9.00 / 4.00 | 9.00 / 4.00 |"), "{text}");
        let tot = out.results["xrun_totals"].as_array().unwrap();
        assert_eq!(tot.len(), 3);
        assert_eq!(tot[0]["server"], "quaverd");
        assert_eq!(tot[0]["server_xruns"], 9);

        // One more bad quaverd window tips the totals: 19 in 4 min > 10 in 3 min.
        let mut worse = xruns;
        worse.push(window(Quaverd, 3, Some(10), Some(0)));
        let md = render(&results(worse)).markdown;
        assert!(md.contains("quaverd > jackd2: NOT met"), "{md}");
    }

    #[test]
    fn xrun_points_from_before_repeats_read_as_round_zero() {
        let mut v = serde_json::to_value(window(JackServer::Jackd2, 4, Some(1), Some(1))).unwrap();
        assert_eq!(v["repeat"], 4);
        v.as_object_mut().unwrap().remove("repeat");
        let p: XrunPoint = serde_json::from_value(v).unwrap();
        assert_eq!(p.repeat, 0);
        // A whole old record reads and renders, as one round.
        let mut r = serde_json::to_value(results(vec![window(
            JackServer::Quaverd,
            0,
            Some(2),
            Some(2),
        )]))
        .unwrap();
        r["xruns"][0].as_object_mut().unwrap().remove("repeat");
        let r: JackResults = serde_json::from_value(r).unwrap();
        assert!(
            render(&r)
                .markdown
                .contains("- quaverd at 64, window 1/1: ")
        );
    }

    #[test]
    fn ratios_say_what_they_compare() {
        assert_eq!(ratio(1.0, 2.0), "0.50");
        assert_eq!(ratio(0.0, 0.0), "– (0 / 0)");
        assert_eq!(ratio(1.0, 0.0), "∞ (jackd2: 0)");
        let c = describe(&Jackd::command("x", 20, 48_000, 64));
        assert_eq!(
            c,
            "JACK_NO_AUDIO_RESERVATION=1 jackd -n x -R -P 20 -d dummy -r 48000 -p 64"
        );
    }
}
