//! `stress`: the `latencytest` of old. quaverd runs at quantum Q with one playback
//! stream while a stressor loads every core, the disk (with fsync) and memory; the
//! report shows the RT thread's wakeup lateness and per-cycle busy time (quaverd's
//! `timing` histograms over the measurement window) and every xrun, next to what
//! cyclictest reaches under the same load right after (the floor any server can reach
//! on this machine). By default an idle baseline runs first.

use crate::Ctx;
use crate::report::doc::{Doc, yes_no};
use crate::report::progress::run_with_progress;
use crate::report::stats::{Log2Hist, Summary, fmt_bounds, fmt_ns};
use crate::report::svg::bar_chart;
use crate::report::{ModeOutput, Table};
use crate::tools::cyclictest::{self, CyclictestResult};
use crate::tools::daemon::{Daemon, DaemonSpec};
use crate::tools::rt;
use crate::tools::stressor::{self, StressorConfig, StressorKind};
use anyhow::{Context, Result};
use quaver_client::PlaybackStream;
use quaver_client::quaver_protocol::{ChannelMap, StreamParams};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The device quaverd drives during `stress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum StressDevice {
    /// A null sink (timer-paced): reports wakeup lateness, never xruns short of 1 s.
    Null,
    /// The simulated card with a watermark of `period` frames: xruns when a wakeup is
    /// later than the watermark allows (it does not report lateness yet).
    Sim,
}

/// Settings of a `stress` run.
#[derive(Debug, Clone)]
pub struct StressOptions {
    /// Quantum, frames.
    pub quantum: usize,
    /// Length of each measurement (quaverd, then cyclictest), s.
    pub seconds: f64,
    /// Load.
    pub stressor: StressorKind,
    /// Load settings.
    pub load: StressorConfig,
    /// Device.
    pub device: StressDevice,
    /// Sim watermark, frames (default: one quantum).
    pub period: Option<usize>,
    /// Device rate.
    pub rate: u32,
    /// Run an idle phase first.
    pub baseline: bool,
    /// cyclictest's `-i`, µs.
    pub cyclictest_interval_us: u64,
    /// The quaver-bench binary (runs the built-in stressor).
    pub self_exe: PathBuf,
}

impl StressOptions {
    /// Defaults for a full or quick run.
    pub fn new(quick: bool, self_exe: PathBuf) -> StressOptions {
        let cores = crate::tools::machine::Machine::probe().cores;
        StressOptions {
            quantum: 64,
            seconds: if quick { 1.5 } else { 20.0 },
            stressor: StressorKind::Auto,
            load: StressorConfig::default_for(cores),
            device: StressDevice::Null,
            period: None,
            rate: 48_000,
            baseline: !quick,
            cyclictest_interval_us: 1000,
            self_exe,
        }
    }
}

/// An xrun seen while polling `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct XrunEvent {
    /// Seconds into the window.
    pub t_s: f64,
    /// New device xruns since the previous poll.
    pub new: u64,
    /// Device underruns so far (all devices).
    pub underruns: u64,
    /// Device overruns so far.
    pub overruns: u64,
}

/// What quaverd did during one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuaverPhase {
    /// Quantum it ran at.
    pub quantum: u32,
    /// Whether its RT thread ran SCHED_FIFO.
    pub realtime: bool,
    /// Whether the client's feeder thread ran SCHED_FIFO.
    pub client_realtime: bool,
    /// Window length, s.
    pub seconds: f64,
    /// Cycles in the window.
    pub cycles: u64,
    /// Whether quaverd answers the `timing` request.
    pub timing_available: bool,
    /// Wakeup lateness in the window (None: the device cannot tell, or no timing).
    pub lateness: Option<Log2Hist>,
    /// Largest lateness since quaverd started (includes the warm-up), ns.
    pub lateness_max_ns: Option<u64>,
    /// Cycle busy time in the window.
    pub busy: Option<Log2Hist>,
    /// Largest busy time since start, ns.
    pub busy_max_ns: Option<u64>,
    /// Cycles woken later than one quantum (a card with a one-quantum watermark would
    /// have run dry): (surely, at most) from the log2 buckets.
    pub late_beyond_quantum: Option<(u64, u64)>,
    /// Device xruns in the window.
    pub device_xruns: u64,
    /// Every device xrun seen, with its time.
    pub xruns: Vec<XrunEvent>,
    /// Underruns of the client's stream in the window.
    pub stream_xruns: u64,
}

/// The reference measurement next to quaverd.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reference {
    /// cyclictest ran.
    Cyclictest {
        /// Exact command.
        command: String,
        /// Its results.
        result: CyclictestResult,
    },
    /// rt-tests is not installed; the built-in probe ran instead.
    Probe {
        /// Wakeup interval, µs.
        interval_us: u64,
        /// Whether it got SCHED_FIFO 80.
        realtime: bool,
        /// Lateness, µs.
        summary: Option<Summary>,
        /// Lateness histogram.
        hist: Log2Hist,
    },
    /// cyclictest failed.
    Failed {
        /// Why.
        error: String,
    },
}

impl Reference {
    /// The lateness histogram, if any.
    pub fn hist(&self) -> Option<Log2Hist> {
        match self {
            Reference::Cyclictest { result, .. } => Some(result.log2()),
            Reference::Probe { hist, .. } => Some(hist.clone()),
            Reference::Failed { .. } => None,
        }
    }

    /// Name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            Reference::Cyclictest { .. } => "cyclictest",
            Reference::Probe { .. } => "built-in probe",
            Reference::Failed { .. } => "cyclictest (failed)",
        }
    }
}

/// One phase: a load, quaverd under it, and the reference under it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    /// "idle", "stress-ng" or "built-in".
    pub load: String,
    /// The stressor's exact command.
    pub stressor_command: Option<String>,
    /// quaverd's figures.
    pub quaver: QuaverPhase,
    /// cyclictest's (or the probe's).
    pub reference: Reference,
    /// cyclictest's version, or "not installed".
    pub cyclictest: String,
}

/// Everything a `stress` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StressResults {
    /// Quantum.
    pub quantum: usize,
    /// Rate.
    pub rate: u32,
    /// Device spec.
    pub device: String,
    /// Phases in order.
    pub phases: Vec<Phase>,
}

/// Runs the phases.
pub fn run(ctx: &mut Ctx, o: &StressOptions) -> Result<StressResults> {
    let period = o.period.unwrap_or(o.quantum);
    let device = match o.device {
        StressDevice::Null => format!("null:rate={}", o.rate),
        StressDevice::Sim => format!("sim:rate={},period={period},loopback=off", o.rate),
    };
    let loaded = stressor::resolve(o.stressor);
    let mut loads = Vec::new();
    if o.baseline && loaded != StressorKind::None {
        loads.push(StressorKind::None);
    }
    loads.push(loaded);
    let secs = o.seconds.max(0.5);
    let ct_secs = secs.ceil() as u64;
    let phase_len = 0.5 + secs + ct_secs as f64 + 1.0;
    let pb = ctx
        .progress
        .bar((phase_len * loads.len() as f64).ceil() as u64, "stress");
    let ct_version = crate::tools::machine::tool_version("cyclictest", &["--help"]);
    if ct_version == crate::tools::machine::NOT_INSTALLED {
        ctx.note(
            "cyclictest is not installed (apt install rt-tests); a built-in probe \
             (SCHED_FIFO 80, absolute sleeps every interval) stands in for it",
        );
    }
    let mut phases = Vec::new();
    for (i, &kind) in loads.iter().enumerate() {
        let base = (i as f64 * phase_len) as u64;
        let stressor = stressor::start(
            kind,
            o.load,
            Duration::from_secs_f64(phase_len + 5.0),
            ctx.seed,
            &o.self_exe,
        )?;
        let (load, stressor_command) = match &stressor {
            Some(s) => (s.name.to_string(), Some(s.command.clone())),
            None => ("idle".to_string(), None),
        };
        if let Some(c) = &stressor_command {
            ctx.record_command(format!("{c} &"));
        }
        pb.set_message(format!("stress: quaverd under {load}"));
        let result = (|| -> Result<Phase> {
            std::thread::sleep(Duration::from_millis(500));
            let spec = DaemonSpec {
                devices: vec![device.clone()],
                rate: Some(o.rate),
                quantum: Some(o.quantum),
                quantum_min: Some(o.quantum.min(32)),
                ..DaemonSpec::default()
            };
            let mut daemon = ctx.start_daemon(spec)?;
            let prio = rt::client_priority(ctx.realtime_priority);
            let q = run_with_progress(&pb, base, |c| measure_quaver(&daemon, o, secs, prio, c));
            let stopped = daemon.stop();
            let quaver = q?;
            stopped?;
            pb.set_message(format!("stress: reference under {load}"));
            let reference = run_with_progress(&pb, base + secs as u64, |c| {
                let t0 = Instant::now();
                std::thread::scope(|s| {
                    let h = s.spawn(|| reference(o, ct_secs));
                    while !h.is_finished() {
                        c.store(t0.elapsed().as_secs(), Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    h.join().unwrap_or_else(|_| Reference::Failed {
                        error: "reference thread panicked".into(),
                    })
                })
            });
            if let Reference::Cyclictest { command, .. } = &reference {
                ctx.record_command(command.clone());
            }
            Ok(Phase {
                load: load.clone(),
                stressor_command: stressor_command.clone(),
                quaver,
                reference,
                cyclictest: ct_version.clone(),
            })
        })();
        if let Some(s) = stressor {
            s.stop();
        }
        phases.push(result.with_context(|| format!("stress phase under {load}"))?);
    }
    pb.finish_and_clear();
    Ok(StressResults {
        quantum: o.quantum,
        rate: o.rate,
        device,
        phases,
    })
}

fn reference(o: &StressOptions, secs: u64) -> Reference {
    match cyclictest::run(secs, o.cyclictest_interval_us) {
        Ok(Some((command, result))) => Reference::Cyclictest { command, result },
        Ok(None) => {
            let interval = Duration::from_micros(o.cyclictest_interval_us);
            let (late, realtime) = cyclictest::probe(Duration::from_secs(secs), interval, 80);
            let mut hist = Log2Hist::default();
            for &l in &late {
                hist.add(l);
            }
            Reference::Probe {
                interval_us: o.cyclictest_interval_us,
                realtime,
                summary: cyclictest::probe_summary(&late),
                hist,
            }
        }
        Err(e) => Reference::Failed {
            error: format!("{e:#}"),
        },
    }
}

fn measure_quaver(
    daemon: &Daemon,
    o: &StressOptions,
    secs: f64,
    client_prio: i32,
    counter: &AtomicU64,
) -> Result<QuaverPhase> {
    let q = o.quantum;
    let mut conn = daemon.connect("quaver-bench stress")?;
    let sink = match o.device {
        StressDevice::Null => "null-sink",
        StressDevice::Sim => "sim-sink",
    };
    let mut p = StreamParams::playback("stress-play", o.rate, ChannelMap::stereo());
    p.latency_ms = Some(2.0 * q as f64 * 1000.0 / o.rate as f64);
    p.target = Some(sink.into());
    let stream = conn
        .create_playback(p)
        .context("creating the playback stream")?;
    let stop = AtomicBool::new(false);
    let xr_start = AtomicU64::new(u64::MAX);
    let window = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<QuaverPhase> {
        let feeder = s.spawn(|| feed(stream, q, client_prio, &stop, &window, &xr_start));
        let r = (|| -> Result<_> {
            let t0 = Instant::now();
            std::thread::sleep(Duration::from_millis(300));
            window.store(true, Ordering::Relaxed);
            let st0 = conn.status()?;
            let tm0 = conn.timing().ok();
            let w0 = Instant::now();
            let mut last = st0.xruns;
            let mut events = Vec::new();
            while w0.elapsed().as_secs_f64() < secs {
                std::thread::sleep(Duration::from_millis(100));
                counter.store(t0.elapsed().as_secs(), Ordering::Relaxed);
                let st = conn.status()?;
                if st.xruns > last {
                    events.push(XrunEvent {
                        t_s: w0.elapsed().as_secs_f64(),
                        new: st.xruns - last,
                        underruns: st.devices.iter().map(|d| d.underruns).sum(),
                        overruns: st.devices.iter().map(|d| d.overruns).sum(),
                    });
                    last = st.xruns;
                }
            }
            let st1 = conn.status()?;
            let tm1 = conn.timing().ok();
            Ok((st0, st1, tm0, tm1, events, w0.elapsed().as_secs_f64()))
        })();
        stop.store(true, Ordering::Relaxed);
        let (stream_xruns_end, client_rt) = feeder
            .join()
            .map_err(|_| anyhow::anyhow!("feeder thread panicked"))??;
        let (st0, st1, tm0, tm1, xruns, seconds) = r?;
        let timing_available = tm0.is_some() && tm1.is_some();
        let (lateness, busy, lmax, bmax) = match (&tm0, &tm1) {
            (Some(a), Some(b)) => {
                let l = Log2Hist::from_counts(&b.lateness_ns_log2)
                    .since(&Log2Hist::from_counts(&a.lateness_ns_log2));
                let bz = Log2Hist::from_counts(&b.busy_ns_log2)
                    .since(&Log2Hist::from_counts(&a.busy_ns_log2));
                (
                    (l.total() > 0).then_some(l),
                    Some(bz),
                    Some(b.lateness_max_ns),
                    Some(b.busy_max_ns),
                )
            }
            _ => (None, None, None, None),
        };
        let quantum_ns = q as u64 * 1_000_000_000 / o.rate as u64;
        let start = xr_start.load(Ordering::Relaxed);
        Ok(QuaverPhase {
            quantum: st1.quantum,
            realtime: st1.realtime,
            client_realtime: client_rt,
            seconds,
            cycles: st1.cycles.saturating_sub(st0.cycles),
            timing_available,
            late_beyond_quantum: lateness.as_ref().map(|l| l.count_at_least(quantum_ns)),
            lateness,
            lateness_max_ns: lmax.filter(|_| o.device == StressDevice::Null),
            busy,
            busy_max_ns: bmax,
            device_xruns: st1.xruns.saturating_sub(st0.xruns),
            xruns,
            stream_xruns: if start == u64::MAX {
                0
            } else {
                stream_xruns_end.saturating_sub(start)
            },
        })
    })
}

/// Writes quantum-sized blocks of a quiet tone until `stop` (blocking writes, like an
/// ordinary client); returns the stream's xrun total and whether it ran SCHED_FIFO.
fn feed(
    mut s: PlaybackStream,
    q: usize,
    prio: i32,
    stop: &AtomicBool,
    window: &AtomicBool,
    xr_start: &AtomicU64,
) -> Result<(u64, bool)> {
    let rt = rt::set_fifo(prio);
    let mut block = vec![0f32; q * 2];
    let mut phase = 0f64;
    while !stop.load(Ordering::Relaxed) {
        for f in block.chunks_mut(2) {
            let v = (0.05 * phase.sin()) as f32;
            f.fill(v);
            phase += 2.0 * std::f64::consts::PI * 440.0 / 48_000.0;
        }
        s.write(&block)?;
        if window.load(Ordering::Relaxed) && xr_start.load(Ordering::Relaxed) == u64::MAX {
            xr_start.store(s.xruns() as u64, Ordering::Relaxed);
        }
    }
    Ok((s.xruns() as u64, rt))
}

/// p50 / p99 / p99.9 / max of a log2 histogram, as text.
pub fn hist_line(h: Option<&Log2Hist>) -> String {
    match h {
        None => "–".into(),
        Some(h) => format!(
            "{} / {} / {} / {}",
            fmt_bounds(h.percentile(50.0)),
            fmt_bounds(h.percentile(99.0)),
            fmt_bounds(h.percentile(99.9)),
            fmt_bounds(h.max_bucket())
        ),
    }
}

/// Tables, plots and the terminal summary.
pub fn render(r: &StressResults) -> ModeOutput {
    let mut summary = Table::new(&[
        "load", "measure", "p50", "p99", "p99.9", "max", "events", "xruns",
    ]);
    for ph in &r.phases {
        summary_rows(&mut summary, ph);
    }
    let mut doc = Doc::new();
    doc.heading(2, "Stress")
        .para(format!(
            "quaverd at quantum {} ({:.2} ms at {} Hz) on `{}` with one playback \
             stream; then the reference under the same load. quaverd's figures are log2 \
             buckets (upper bounds, `< x`), over the measurement window only; cyclictest's \
             are exact µs from its histogram.",
            r.quantum,
            r.quantum as f64 * 1000.0 / r.rate as f64,
            r.rate,
            r.device
        ))
        .table(&summary)
        .place("lateness")
        .place("busy")
        .heading(3, "Phases");
    for ph in &r.phases {
        phase_section(&mut doc, ph);
    }
    // Plots: lateness and busy histograms, as shares of each series' events.
    let mut lat_series = Vec::new();
    let mut busy_series = Vec::new();
    for ph in &r.phases {
        if let Some(l) = &ph.quaver.lateness {
            lat_series.push((format!("quaverd, {}", ph.load), l.clone()));
        }
        if let Some(h) = ph.reference.hist() {
            lat_series.push((format!("{}, {}", ph.reference.name(), ph.load), h));
        }
        if let Some(bz) = &ph.quaver.busy {
            busy_series.push((format!("quaverd, {}", ph.load), bz.clone()));
        }
    }
    doc.add_plot("lateness", log2_chart("Wakeup lateness", &lat_series))
        .add_plot("busy", log2_chart("quaverd cycle busy time", &busy_series));
    doc.finish(r, summary, Vec::new())
}

/// One phase's rows of the summary: quaverd's lateness and busy time, the reference.
fn summary_rows(summary: &mut Table, ph: &Phase) {
    let b = |h: &Log2Hist, p: f64| fmt_bounds(h.percentile(p));
    let qp = &ph.quaver;
    let xr = format!("{} dev / {} stream", qp.device_xruns, qp.stream_xruns);
    let load = ph.load.clone();
    match &qp.lateness {
        Some(l) => summary.row(vec![
            load.clone(),
            "quaverd wakeup lateness".into(),
            b(l, 50.0),
            b(l, 99.0),
            b(l, 99.9),
            qp.lateness_max_ns
                .map_or_else(|| fmt_bounds(l.max_bucket()), |m| fmt_ns(m as f64)),
            l.total().to_string(),
            xr,
        ]),
        None => {
            let why = if qp.timing_available {
                "not reported by this device"
            } else {
                "quaverd has no timing request"
            };
            let mut row = vec![load.clone(), "quaverd wakeup lateness".into(), why.into()];
            row.resize(7, String::new());
            row.push(xr);
            summary.row(row)
        }
    }
    if let Some(bz) = &qp.busy {
        summary.row_padded(vec![
            load.clone(),
            "quaverd cycle busy".into(),
            b(bz, 50.0),
            b(bz, 99.0),
            b(bz, 99.9),
            fmt_bounds(bz.max_bucket()),
            bz.total().to_string(),
        ]);
    }
    match &ph.reference {
        Reference::Cyclictest { result: c, .. } => {
            let us = |v: Option<u64>| v.map_or("–".into(), |v| format!("{v} µs"));
            summary.row_padded(vec![
                load,
                "cyclictest latency".into(),
                us(c.percentile_us(50.0)),
                us(c.percentile_us(99.0)),
                us(c.percentile_us(99.9)),
                format!("{} µs", c.max_us),
                c.samples.to_string(),
            ])
        }
        Reference::Probe { summary: s, .. } => {
            let us = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0} µs"));
            summary.row_padded(vec![
                load,
                "built-in probe (cyclictest not installed)".into(),
                us(s.map(|s| s.p50)),
                us(s.map(|s| s.p99)),
                us(s.map(|s| s.p999)),
                us(s.map(|s| s.max)),
                s.map_or(0, |s| s.n).to_string(),
            ])
        }
        Reference::Failed { error } => {
            summary.row_padded(vec![load, "cyclictest".into(), format!("failed: {error}")])
        }
    }
}

/// One phase in detail: its stressor, quaverd's figures, the xruns, the reference.
fn phase_section(doc: &mut Doc, ph: &Phase) {
    let qp = &ph.quaver;
    doc.heading(4, format!("Under {}", ph.load));
    if let Some(c) = &ph.stressor_command {
        doc.para(format!("Stressor: `{c}`"));
    }
    let mut items = vec![
        format!(
            "quaverd: quantum {}, RT thread SCHED_FIFO: {}, client SCHED_FIFO: {}, {} cycles in {:.1} s",
            qp.quantum,
            yes_no(qp.realtime),
            yes_no(qp.client_realtime),
            qp.cycles,
            qp.seconds
        ),
        format!(
            "lateness p50/p99/p99.9/max: {}",
            hist_line(qp.lateness.as_ref())
        ),
        format!(
            "cycle busy p50/p99/p99.9/max: {}",
            hist_line(qp.busy.as_ref())
        ),
    ];
    if let Some(m) = qp.busy_max_ns {
        items.push(format!(
            "largest busy time since quaverd started: {}",
            fmt_ns(m as f64)
        ));
    }
    if let Some((a, b)) = qp.late_beyond_quantum {
        items.push(format!(
            "cycles woken later than one quantum (a one-quantum watermark would run dry): {}",
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        ));
    }
    let mut xruns = format!(
        "xruns: {} device, {} on the client's stream",
        qp.device_xruns, qp.stream_xruns
    );
    for x in &qp.xruns {
        let _ = write!(
            xruns,
            "\n  - at {:.2} s: {} new (device underruns {}, overruns {})",
            x.t_s, x.new, x.underruns, x.overruns
        );
    }
    items.push(xruns);
    items.push(format!(
        "reference: {} ({})",
        ph.reference.name(),
        ph.cyclictest
    ));
    doc.list(items);
}

/// A grouped bar chart of log2 histograms, each normalized to shares of its events.
pub fn log2_chart(title: &str, series: &[(String, Log2Hist)]) -> String {
    let lo = series
        .iter()
        .filter_map(|s| s.1.counts.iter().position(|&c| c > 0))
        .min()
        .unwrap_or(0);
    let hi = series
        .iter()
        .filter_map(|s| s.1.counts.iter().rposition(|&c| c > 0))
        .max()
        .unwrap_or(0);
    let cats: Vec<String> = (lo..=hi)
        .map(|i| fmt_bounds(Some(Log2Hist::bucket_bounds(i))))
        .collect();
    let data: Vec<(String, Vec<f64>)> = series
        .iter()
        .map(|(name, h)| {
            let t = h.total().max(1) as f64;
            (
                name.clone(),
                (lo..=hi)
                    .map(|i| h.counts.get(i).copied().unwrap_or(0) as f64 / t * 100.0)
                    .collect(),
            )
        })
        .collect();
    bar_chart(
        title,
        "duration (log2 bucket, upper bound)",
        "% of events",
        &cats,
        &data,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_lines_and_charts() {
        let mut h = Log2Hist::default();
        for ns in [1500, 1500, 3000, 70_000] {
            h.add(ns);
        }
        assert_eq!(
            hist_line(Some(&h)),
            "< 2.0 µs / < 131.1 µs / < 131.1 µs / < 131.1 µs"
        );
        assert_eq!(hist_line(None), "–");
        let svg = log2_chart("t", &[("a".into(), h)]);
        assert!(svg.contains("&lt; 2.0 µs"));
    }
}
