//! `latency`: round-trip latency, measured with impulses and set against the latency
//! the design predicts.
//!
//! Two paths, each through a fresh private quaverd per point:
//!
//! - **sim**: a playback stream to the simulated card's sink, its loopback, and a record
//!   stream from the card's source (`--device sim:period=P,loopback=on`);
//! - **monitor**: a playback stream to a null sink and a record stream from that sink's
//!   monitor (`--device null`).
//!
//! The client (one thread, SCHED_FIFO just below quaverd when permitted) is woken by
//! the record stream once per cycle, reads everything captured, then tops the playback
//! ring up to `T` frames — the most the client library queues for the requested
//! latency. Now and then it puts a full-scale impulse into the last quantum of a top-up
//! and looks for it in the capture.
//!
//! For an impulse at offset `j` of that last quantum, written when the client had read
//! `R0` captured frames, the measured round trip is `M = r − R0 − j` where `r` is the
//! capture index it comes back at: the time from writing a sample to reading it back,
//! in frames of the capture clock, for a frame at the start of the client's block.
//! The chain (derived in docs/bench.md) predicts
//!
//! ```text
//! M = (T − q)            client ring: the impulse waits behind T − q queued frames
//!   + S                  server, ring to ring:
//!        sim:     S = q + P    the sim card's loopback (docs/devices.md), graph adds 0
//!        monitor: S = 0        the monitor taps the sink's input in the same cycle
//! ```
//!
//! `S` is measured too: `S = r − w − K`, where `w` is the impulse's index in the
//! playback ring and `K` the steady offset between the record ring's write position and
//! the playback ring's read position (the same cycle writes the one and reads the
//! other). Impulses whose bookkeeping a server cycle could have raced (the playback
//! read position moved between the client's snapshot and its write, or the snapshot fell
//! between the record and the playback node of one cycle) are counted as *ambiguous*
//! and left out; impulses during which any xrun happened are counted apart too.

pub mod client;

use crate::Ctx;
use crate::modes::latency::client::{LoopConfig, Measured, client_loop};
use crate::report::doc::{Doc, yes_no};
use crate::report::progress::run_with_progress;
use crate::report::stats::{IntHist, Summary};
use crate::report::svg::{Series, bar_chart, line_plot};
use crate::report::{ModeOutput, Table};
use crate::tools::daemon::{Daemon, DaemonSpec};
use crate::tools::rng::Rng;
use crate::tools::rt;
use anyhow::{Context, Result, bail};
use quaver_client::quaver_protocol::{ChannelMap, StreamParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which loop an impulse travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LatencyPath {
    /// Through the simulated card's loopback.
    Sim,
    /// Through a null sink's monitor.
    Monitor,
}

impl LatencyPath {
    /// Name used in tables and file names.
    pub fn name(&self) -> &'static str {
        match self {
            LatencyPath::Sim => "sim",
            LatencyPath::Monitor => "monitor",
        }
    }
}

/// Settings of a `latency` run.
#[derive(Debug, Clone)]
pub struct LatencyOptions {
    /// Paths to measure.
    pub paths: Vec<LatencyPath>,
    /// Quanta to measure at (powers of two).
    pub quanta: Vec<usize>,
    /// Extra points on the sim path: (quantum, requested playback latency in frames)
    /// with the requested latency above 2 × quantum (the quantum held by the record
    /// stream's request).
    pub requests: Vec<(usize, usize)>,
    /// The sim card's watermark `period` in frames.
    pub period: usize,
    /// Sample rate of the devices and streams.
    pub rate: u32,
    /// Impulses per point (at most; see `point_seconds`).
    pub impulses: usize,
    /// Time budget per point, s.
    pub point_seconds: f64,
    /// Warm-up before the first impulse, s.
    pub warmup_seconds: f64,
    /// A deliberate extra delay inside the client, frames (the client holds its output
    /// back this long): it must show up in the measurement. A test aid.
    pub inject_delay: usize,
    /// Let quaverd suspend its idle devices before the streams start, so the streams
    /// wake a suspended device (the usual case on a desktop) instead of joining a device
    /// that has run since the daemon started.
    pub after_idle: bool,
}

impl LatencyOptions {
    /// Defaults for a full run or a quick one.
    pub fn new(quick: bool) -> LatencyOptions {
        LatencyOptions {
            paths: vec![LatencyPath::Sim, LatencyPath::Monitor],
            quanta: vec![32, 64, 128, 256, 512, 1024, 2048],
            requests: if quick {
                Vec::new()
            } else {
                vec![(256, 1024), (256, 2048), (256, 4096)]
            },
            period: 256,
            rate: 48_000,
            impulses: if quick { 12 } else { 200 },
            point_seconds: if quick { 1.5 } else { 8.0 },
            warmup_seconds: if quick { 0.15 } else { 0.3 },
            inject_delay: 0,
            after_idle: false,
        }
    }
}

/// One measured configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// The path.
    pub path: LatencyPath,
    /// Quantum the daemon should run at, frames.
    pub quantum: usize,
    /// Latency the playback stream requests, frames.
    pub request: usize,
}

/// What one point measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PointResult {
    /// The configuration.
    pub point: Point,
    /// Quantum quaverd reported once both streams ran.
    pub quantum_reported: u32,
    /// Whether quaverd's RT thread ran SCHED_FIFO.
    pub server_realtime: bool,
    /// Whether the client thread ran SCHED_FIFO.
    pub client_realtime: bool,
    /// Sim watermark (None on the monitor path).
    pub period: Option<usize>,
    /// Frames the client keeps queued after each top-up (the library's cap).
    pub client_fill: usize,
    /// Playback ring capacity.
    pub play_capacity: u32,
    /// Record ring capacity.
    pub record_capacity: u32,
    /// Delay injected into the client, frames.
    pub injected_delay: usize,
    /// Predicted server part `S`, frames.
    pub theory_server: i64,
    /// Predicted round trip `M`, frames.
    pub theory: i64,
    /// Impulses written.
    pub sent: usize,
    /// Impulses found and used.
    pub used: usize,
    /// Found, but the bookkeeping may have raced a cycle (left out).
    pub ambiguous: usize,
    /// Found, but an xrun happened in flight (left out).
    pub xrun_affected: usize,
    /// Never came back.
    pub lost: usize,
    /// Impulse-like samples with no impulse in flight.
    pub spurious: usize,
    /// Times the steady ring offset `K` changed (after an xrun).
    pub relocks: usize,
    /// Measured round trip `M`, frames.
    pub measured: Option<Summary>,
    /// Measured server part `S`, frames.
    pub measured_server: Option<Summary>,
    /// Histogram of `M`, frames.
    pub histogram: IntHist,
    /// Wall-clock time from the write to the read that returned the impulse, ms
    /// (includes the client's wake-up granularity; for orientation only).
    pub wall_ms: Option<Summary>,
    /// Playback stream underruns during the point.
    pub play_xruns: u32,
    /// Record stream overruns during the point.
    pub record_xruns: u32,
    /// Device xruns quaverd counted.
    pub device_xruns: u64,
    /// |median(M) − theory| ≤ one quantum.
    pub within_one_quantum: bool,
}

impl PointResult {
    /// Median `M` minus theory, frames.
    pub fn error(&self) -> Option<f64> {
        self.measured.map(|m| m.p50 - self.theory as f64)
    }
}

/// Everything a `latency` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyResults {
    /// Sample rate.
    pub rate: u32,
    /// Sim watermark.
    pub period: usize,
    /// Injected client delay.
    pub inject_delay: usize,
    /// Whether the streams woke suspended devices.
    pub after_idle: bool,
    /// One entry per point, in the order run.
    pub points: Vec<PointResult>,
}

/// The points a run measures, in order.
pub fn points(o: &LatencyOptions) -> Vec<Point> {
    let mut v = Vec::new();
    for &path in &o.paths {
        for &q in &o.quanta {
            v.push(Point {
                path,
                quantum: q,
                request: 2 * q,
            });
        }
        if path == LatencyPath::Sim {
            for &(q, l) in &o.requests {
                v.push(Point {
                    path,
                    quantum: q,
                    request: l,
                });
            }
        }
    }
    v
}

/// Runs every point.
pub fn run(ctx: &mut Ctx, o: &LatencyOptions) -> Result<LatencyResults> {
    for &q in &o.quanta {
        if !q.is_power_of_two() || !(16..=8192).contains(&q) {
            bail!("quantum {q} must be a power of two in 16..=8192");
        }
    }
    if o.inject_delay > 0 {
        ctx.note(format!(
            "the client held its output back by {} frames on purpose (--inject-delay); \
             measured latencies include it, theory does not",
            o.inject_delay
        ));
    }
    let pts = points(o);
    let per_point = o.impulses as u64;
    let pb = ctx.progress.bar(per_point * pts.len() as u64, "latency");
    let mut rng = Rng::new(ctx.seed);
    let mut results = Vec::new();
    for (i, p) in pts.iter().enumerate() {
        pb.set_message(format!(
            "latency {} q={} L={}",
            p.path.name(),
            p.quantum,
            p.request
        ));
        let r = run_point(ctx, o, *p, &mut rng.fork(), &pb, i as u64 * per_point)
            .with_context(|| format!("latency point {} q={}", p.path.name(), p.quantum))?;
        results.push(r);
    }
    pb.finish_and_clear();
    Ok(LatencyResults {
        rate: o.rate,
        period: o.period,
        inject_delay: o.inject_delay,
        after_idle: o.after_idle,
        points: results,
    })
}

fn ms(frames: usize, rate: u32) -> f64 {
    frames as f64 * 1000.0 / rate as f64
}

fn run_point(
    ctx: &mut Ctx,
    o: &LatencyOptions,
    p: Point,
    rng: &mut Rng,
    pb: &indicatif::ProgressBar,
    base: u64,
) -> Result<PointResult> {
    let q = p.quantum;
    let (device, sink, period) = match p.path {
        LatencyPath::Sim => {
            let buffer = (2 * (q + o.period)).next_power_of_two().max(8192);
            (
                format!(
                    "sim:rate={},period={},buffer={buffer},loopback=on",
                    o.rate, o.period
                ),
                "sim-sink",
                Some(o.period),
            )
        }
        LatencyPath::Monitor => (format!("null:rate={}", o.rate), "null-sink", None),
    };
    let spec = DaemonSpec {
        devices: vec![device],
        rate: Some(o.rate),
        quantum: Some(q),
        quantum_min: Some(q.min(32)),
        quantum_max: Some(q.max(8192)),
        config: if o.after_idle {
            format!("[engine]\nsuspend_timeout_ms = {IDLE_SUSPEND_MS}\n")
        } else {
            String::new()
        },
        ..DaemonSpec::default()
    };
    let mut daemon = ctx.start_daemon(spec)?;
    let client_prio = rt::client_priority(ctx.realtime_priority);
    let result = measure(&daemon, o, p, sink, period, rng, pb, base, client_prio);
    let stopped = daemon.stop();
    let r = result?;
    stopped?;
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
fn measure(
    daemon: &Daemon,
    o: &LatencyOptions,
    p: Point,
    sink: &str,
    period: Option<usize>,
    rng: &mut Rng,
    pb: &indicatif::ProgressBar,
    base: u64,
    client_prio: i32,
) -> Result<PointResult> {
    let q = p.quantum;
    let mut conn = daemon.connect("quaver-bench latency")?;
    if o.after_idle {
        wait_suspended(&mut conn)?;
    }
    let to_ms = |frames: usize| ms(frames, o.rate);
    // The playback request sets the quantum (request / 2); the record stream asks for
    // more slack unless it has to hold the quantum down itself.
    let rec_request = if p.request == 2 * q { 8 * q } else { 2 * q };
    let mut pp = StreamParams::playback("bench-play", o.rate, ChannelMap::stereo());
    pp.latency_ms = Some(to_ms(p.request));
    pp.target = Some(sink.to_string());
    let mut rp = StreamParams::record("bench-rec", o.rate, ChannelMap::stereo());
    rp.latency_ms = Some(to_ms(rec_request));
    match p.path {
        LatencyPath::Sim => rp.target = Some("sim-source".into()),
        LatencyPath::Monitor => rp.monitor_of = Some(sink.to_string()),
    }
    // The stream asking for less goes first: a transient larger quantum would leave
    // the sim card with a larger lead for good (a lead never shrinks; docs/devices.md).
    let (play, rec) = if rec_request < p.request {
        let rec = conn
            .create_record(rp)
            .context("creating the record stream")?;
        let play = conn
            .create_playback(pp)
            .context("creating the playback stream")?;
        (play, rec)
    } else {
        let play = conn
            .create_playback(pp)
            .context("creating the playback stream")?;
        let rec = conn
            .create_record(rp)
            .context("creating the record stream")?;
        (play, rec)
    };
    let status0 = conn.status()?;
    let fill = play.max_queued_frames();
    let theory_server = match p.path {
        LatencyPath::Sim => (q + o.period) as i64,
        LatencyPath::Monitor => 0,
    };
    let theory = fill as i64 - q as i64 + theory_server;
    let (play_cap, rec_cap) = (play.info().capacity_frames, rec.info().capacity_frames);
    let cfg = LoopConfig {
        quantum: q,
        fill,
        impulses: o.impulses,
        budget: Duration::from_secs_f64(o.point_seconds),
        warmup: Duration::from_secs_f64(o.warmup_seconds),
        lost_after: (theory.max(0) as usize + o.inject_delay + 8 * q + o.rate as usize / 4) as u64,
        inject_delay: o.inject_delay,
        rt_priority: client_prio,
    };
    let mut lrng = rng.fork();
    // Device xruns are only visible in `status`: a poller publishes the count so the
    // client can tell which impulses an xrun may have hit (50 ms granularity, so it
    // errs on the side of leaving an impulse out).
    let dev_xruns = AtomicU64::new(status0.xruns);
    let done = std::sync::atomic::AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        let poller = s.spawn(|| -> Result<()> {
            while !done.load(Ordering::Relaxed) {
                dev_xruns.store(conn.status()?.xruns, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        });
        let out = run_with_progress(pb, base, |counter| {
            client_loop(play, rec, &cfg, &mut lrng, counter, &dev_xruns)
        });
        done.store(true, Ordering::Relaxed);
        let polled = poller
            .join()
            .map_err(|_| anyhow::anyhow!("status poller panicked"))?;
        let out = out?;
        polled?;
        Ok::<_, anyhow::Error>(out)
    })?;
    let status1 = conn.status()?;
    let quantum_reported = status1.quantum;
    let used: Vec<&Measured> = out.found.iter().filter(|m| m.clean()).collect();
    let m: Vec<f64> = used.iter().map(|m| m.round_trip as f64).collect();
    let s: Vec<f64> = used.iter().map(|m| m.server as f64).collect();
    let w: Vec<f64> = used.iter().map(|m| m.wall_ns as f64 / 1e6).collect();
    let measured = Summary::of(&m);
    let within = measured.is_some_and(|m| (m.p50 - theory as f64).abs() <= q as f64);
    Ok(PointResult {
        point: p,
        quantum_reported,
        server_realtime: status1.realtime,
        client_realtime: out.client_realtime,
        period,
        client_fill: fill,
        play_capacity: play_cap,
        record_capacity: rec_cap,
        injected_delay: o.inject_delay,
        theory_server,
        theory,
        sent: out.sent,
        used: used.len(),
        ambiguous: out.found.iter().filter(|m| m.ambiguous).count(),
        xrun_affected: out.found.iter().filter(|m| !m.ambiguous && m.xrun).count(),
        lost: out.lost,
        spurious: out.spurious,
        relocks: out.relocks,
        measured,
        measured_server: Summary::of(&s),
        histogram: IntHist::of(used.iter().map(|m| m.round_trip)),
        wall_ms: Summary::of(&w),
        play_xruns: out.play_xruns,
        record_xruns: out.record_xruns,
        device_xruns: status1.xruns.saturating_sub(status0.xruns),
        within_one_quantum: within,
    })
}

/// quaverd's idle suspend timeout with `after_idle`, ms.
const IDLE_SUSPEND_MS: u64 = 100;

/// Waits (bounded) until every device of the daemon is idle (suspended, or closed: quaverd
/// releases a card's handles right after the idle suspend).
fn wait_suspended(conn: &mut quaver_client::Connection) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let st = conn.status()?;
        if st.devices.iter().all(|d| d.is_idle()) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("quaverd's devices did not suspend within 10 s of idling");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Tables, plots and the terminal summary for a run.
pub fn render(r: &LatencyResults) -> ModeOutput {
    let f2ms = |f: f64| f * 1000.0 / r.rate as f64;
    let fmt = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
    let summary = Table::of(
        &r.points,
        &[
            ("path", &|p| p.point.path.name().into()),
            ("quantum", &|p| p.point.quantum.to_string()),
            ("request", &|p| p.point.request.to_string()),
            ("theory", &|p| {
                format!("{} ({:.2} ms)", p.theory, f2ms(p.theory as f64))
            }),
            ("median", &|p| {
                p.measured.map_or("–".into(), |m| {
                    format!("{:.0} ({:.2} ms)", m.p50, f2ms(m.p50))
                })
            }),
            ("p99", &|p| fmt(p.measured.map(|m| m.p99))),
            ("max", &|p| fmt(p.measured.map(|m| m.max))),
            ("error", &|p| {
                p.error().map_or("–".into(), |e| format!("{e:+.0}"))
            }),
            ("n", &|p| p.used.to_string()),
            ("ok", &|p| {
                if p.within_one_quantum { "yes" } else { "NO" }.into()
            }),
        ],
    );
    let detail = Table::of(
        &r.points,
        &[
            ("path", &|p| p.point.path.name().into()),
            ("q", &|p| p.point.quantum.to_string()),
            ("L", &|p| p.point.request.to_string()),
            ("T", &|p| p.client_fill.to_string()),
            ("theory M", &|p| p.theory.to_string()),
            ("M min/p50/p99/max", &|p| {
                p.measured.map_or("–".into(), |m| {
                    format!("{:.0}/{:.0}/{:.0}/{:.0}", m.min, m.p50, m.p99, m.max)
                })
            }),
            ("theory S", &|p| p.theory_server.to_string()),
            ("S p50", &|p| fmt(p.measured_server.map(|s| s.p50))),
            ("used/sent", &|p| format!("{}/{}", p.used, p.sent)),
            ("ambiguous", &|p| p.ambiguous.to_string()),
            ("xrun-hit", &|p| p.xrun_affected.to_string()),
            ("lost", &|p| p.lost.to_string()),
            ("xruns play/rec/dev", &|p| {
                format!("{}/{}/{}", p.play_xruns, p.record_xruns, p.device_xruns)
            }),
            ("wall p50 ms", &|p| {
                p.wall_ms.map_or("–".into(), |w| format!("{:.2}", w.p50))
            }),
            ("RT srv/cli", &|p| {
                format!(
                    "{}/{}",
                    yes_no(p.server_realtime),
                    yes_no(p.client_realtime)
                )
            }),
        ],
    );
    let mut doc = Doc::new();
    doc.heading(2, "Round-trip latency").para(format!(
        "Streams {}. Rate {} Hz; sim card watermark P = {} frames. M is the round trip a client \
         sees (from writing a sample to reading it back, for the first frame of its \
         block); theory M = (T − q) + S with S = q + P through the sim card and S = 0 \
         through a monitor (see docs/bench.md). `ok` = median within one quantum of \
         theory.",
        if r.after_idle {
            "woke suspended devices (--after-idle)"
        } else {
            "joined devices running since quaverd started"
        },
        r.rate,
        r.period
    ));
    doc.table(&summary);
    let sim: Vec<&PointResult> = r
        .points
        .iter()
        .filter(|p| p.point.path == LatencyPath::Sim && p.measured.is_some())
        .collect();
    if !sim.is_empty()
        && sim
            .iter()
            .all(|p| p.error() == Some(p.point.quantum as f64))
    {
        doc.para(
            "Every sim point measures exactly one quantum more than the chain predicts. \
             That is the engine's start-up, not the path: the daemon starts the sim card \
             before any stream exists and its first cycle writes the sink without reading \
             the source (the source node's plan arrives a cycle later), so the card's \
             playback lead is q + P + q from then on (docs/devices.md: a lead only grows). \
             `--after-idle`, where the streams wake a suspended card, measures the chain \
             exactly.",
        );
    }
    doc.plot("round-trip", round_trip_plot(r))
        .heading(3, "Detail")
        .para(
            "T: frames the client keeps queued; S: server part, ring to ring; ambiguous: \
             bookkeeping raced a cycle (left out); xrun-hit: an xrun happened in flight \
             (left out); RT: SCHED_FIFO for quaverd's RT thread / the client thread.",
        )
        .table(&detail)
        .plot("error-histogram", error_histogram(r))
        .heading(3, "Histograms of M (frames × impulses)")
        .list(r.points.iter().map(|p| {
            let h: Vec<String> = p
                .histogram
                .0
                .iter()
                .map(|(v, c)| format!("{v}×{c}"))
                .collect();
            format!(
                "{} q={} L={}: {}",
                p.point.path.name(),
                p.point.quantum,
                p.point.request,
                if h.is_empty() {
                    "–".into()
                } else {
                    h.join(", ")
                }
            )
        }));
    doc.finish(r, summary, Vec::new())
}

/// Median round trip and theory against the quantum, per path (points asking for two
/// quanta).
fn round_trip_plot(r: &LatencyResults) -> String {
    let f2ms = |f: f64| f * 1000.0 / r.rate as f64;
    let mut series = Vec::new();
    for path in [LatencyPath::Sim, LatencyPath::Monitor] {
        let pts: Vec<&PointResult> = r
            .points
            .iter()
            .filter(|p| p.point.path == path && p.point.request == 2 * p.point.quantum)
            .collect();
        if pts.is_empty() {
            continue;
        }
        series.push(Series::new(
            format!("{} measured", path.name()),
            pts.iter()
                .filter_map(|p| p.measured.map(|m| (p.point.quantum as f64, f2ms(m.p50))))
                .collect(),
        ));
        series.push(
            Series::new(
                format!("{} theory", path.name()),
                pts.iter()
                    .map(|p| (p.point.quantum as f64, f2ms(p.theory as f64)))
                    .collect(),
            )
            .dashed(),
        );
    }
    line_plot(
        "Round-trip latency (median) vs quantum",
        "quantum (frames; streams request 2 × quantum)",
        "round trip (ms)",
        &series,
        true,
        true,
    )
}

/// Measured − theory over every used impulse, per path.
fn error_histogram(r: &LatencyResults) -> String {
    let mut errs: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for p in &r.points {
        for (&v, &c) in &p.histogram.0 {
            let e = errs.entry(v - p.theory).or_default();
            match p.point.path {
                LatencyPath::Sim => e.0 += c,
                LatencyPath::Monitor => e.1 += c,
            }
        }
    }
    let cats: Vec<String> = errs.keys().map(|k| format!("{k:+}")).collect();
    bar_chart(
        "Measured − theory over all impulses",
        "error (frames)",
        "impulses",
        &cats,
        &[
            ("sim".into(), errs.values().map(|v| v.0 as f64).collect()),
            (
                "monitor".into(),
                errs.values().map(|v| v.1 as f64).collect(),
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::latency::client::OffsetLock;

    #[test]
    fn points_cover_paths_quanta_and_requests() {
        let mut o = LatencyOptions::new(false);
        o.quanta = vec![32, 64];
        o.requests = vec![(256, 1024)];
        let p = points(&o);
        assert_eq!(p.len(), 2 + 1 + 2);
        assert_eq!(p[0].request, 64);
        assert_eq!(
            p[2],
            Point {
                path: LatencyPath::Sim,
                quantum: 256,
                request: 1024
            }
        );
        assert!(p[3..].iter().all(|p| p.path == LatencyPath::Monitor));
    }

    #[test]
    fn offset_lock_takes_the_mode_and_relocks() {
        let mut l = OffsetLock::default();
        for k in [5, 100, 100, 100, 132, 100] {
            assert!(!l.observe(k, true));
        }
        assert!(l.observe(100, false));
        assert_eq!(l.k, Some(100));
        // A mid-cycle snapshot (K + q) is not in phase and does not unlock.
        assert!(!l.observe(132, false));
        assert_eq!(l.k, Some(100));
        // An xrun shifts the rings by exactly one quantum: relock after 16 snapshots
        // without the old offset, even with mid-cycle snapshots mixed in.
        for i in 0..14 {
            assert!(!l.observe(if i % 3 == 0 { 164 } else { 132 }, false));
        }
        assert_eq!(l.relocks, 0);
        assert!(
            l.observe(132, false),
            "the 16th snapshot without 100 relocks"
        );
        assert_eq!((l.k, l.relocks), (Some(132), 1));
        assert!(l.observe(132, false));
    }
}
