//! `load`: what N playback streams cost quaverd.
//!
//! For each stream count and variant (streams at the device rate, or at 44.1 kHz so that
//! quaverd resamples every one to 48 kHz) a fresh private quaverd on a null sink gets N
//! clients with one playback stream each. One feeder thread in the benchmark keeps
//! every ring topped up (copies from a precomputed signal, so the benchmark's own cost
//! stays small and its wakeups are not the server's). After a warm-up the benchmark
//! samples `/proc/PID` and quaverd's `status`/`timing` replies at the start and end of
//! a window and reports:
//!
//! - CPU seconds per second of audio: (utime + stime) / (cycles × quantum / rate);
//! - context switches per second, voluntary (≈ wakeups) and involuntary, summed over
//!   every thread of quaverd;
//! - xruns (device, from `status`; streams, from the rings' counters);
//! - RSS and PSS from `smaps_rollup` at the end of the window;
//! - the RT thread's cycle busy time (p50/p99 from the `timing` histograms).

use crate::Ctx;
use crate::report::doc::{Doc, yes_no};
use crate::report::progress::run_with_progress;
use crate::report::stats::{Log2Hist, fmt_bounds};
use crate::report::svg::{Series, line_plot};
use crate::report::{ModeOutput, Table};
use crate::tools::daemon::{Daemon, DaemonSpec};
use crate::tools::procfs::{self, ProcDelta};
use crate::tools::rng::Rng;
use crate::tools::signal::Signal;
use anyhow::{Context, Result};
use quaver_client::quaver_protocol::{ChannelMap, StreamParams};
use quaver_client::{Connection, PlaybackStream};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How the streams relate to the device rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Streams at the device rate (48 kHz): no resampling.
    Native,
    /// Streams at 44.1 kHz, resampled to 48 kHz by quaverd.
    Resampled,
}

impl Variant {
    /// Name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            Variant::Native => "native",
            Variant::Resampled => "resampled",
        }
    }

    /// The client's rate for a device at `device_rate`.
    pub fn client_rate(&self, device_rate: u32) -> u32 {
        match self {
            Variant::Native => device_rate,
            Variant::Resampled => 44_100,
        }
    }
}

/// Settings of a `load` run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Stream counts to measure.
    pub streams: Vec<usize>,
    /// Variants to measure at each count.
    pub variants: Vec<Variant>,
    /// Latency each stream requests, ms (sets the quantum: request / 2, power of two).
    pub latency_ms: f64,
    /// Device rate.
    pub rate: u32,
    /// Warm-up before the window, s.
    pub warmup_seconds: f64,
    /// Measurement window, s.
    pub window_seconds: f64,
}

impl LoadOptions {
    /// Defaults: one count (`streams`) or the sweep 1, 2, 4, … up to `max` streams.
    pub fn new(quick: bool, streams: Option<usize>, sweep: bool, max: usize) -> LoadOptions {
        let counts = if sweep {
            let mut v = Vec::new();
            let mut n = 1;
            while n <= max.max(1) {
                v.push(n);
                n *= 2;
            }
            v
        } else {
            vec![streams.unwrap_or(if quick { 4 } else { 8 })]
        };
        LoadOptions {
            streams: counts,
            variants: vec![Variant::Native, Variant::Resampled],
            latency_ms: 20.0,
            rate: 48_000,
            warmup_seconds: if quick { 0.5 } else { 1.5 },
            window_seconds: if quick { 1.0 } else { 5.0 },
        }
    }
}

/// What one (variant, N) measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadPoint {
    /// Variant.
    pub variant: Variant,
    /// Number of streams.
    pub streams: usize,
    /// The streams' rate.
    pub client_rate: u32,
    /// Quantum quaverd ran at.
    pub quantum: u32,
    /// Whether quaverd's RT thread ran SCHED_FIFO.
    pub realtime: bool,
    /// Length of the window, s (wall clock).
    pub wall_s: f64,
    /// Audio played in the window, s (cycles × quantum / rate).
    pub audio_s: f64,
    /// Audio seconds per wall second: below 1 quaverd could not keep up.
    pub realtime_ratio: f64,
    /// quaverd CPU time in the window, s.
    pub cpu_s: f64,
    /// CPU seconds per second of audio.
    pub cpu_per_audio_s: f64,
    /// The same per stream.
    pub cpu_per_audio_s_per_stream: f64,
    /// Share of the CPU time spent in the RT thread (`quaver-rt`).
    pub rt_thread_share: Option<f64>,
    /// Voluntary context switches per second (all threads).
    pub wakeups_per_s: f64,
    /// Involuntary context switches per second.
    pub preemptions_per_s: f64,
    /// Threads of quaverd at the end.
    pub threads: usize,
    /// Device xruns in the window.
    pub device_xruns: u64,
    /// Stream underruns in the window (all streams).
    pub stream_xruns: u64,
    /// RSS at the end, kB.
    pub rss_kb: u64,
    /// PSS at the end, kB.
    pub pss_kb: u64,
    /// Cycle busy time in the window, log2 histogram (ns); None if quaverd has no
    /// `timing` request.
    pub busy: Option<Log2Hist>,
    /// Clock ticks per second of the CPU figures (their resolution).
    pub clock_ticks: u64,
}

/// Everything a `load` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoadResults {
    /// Requested latency, ms.
    pub latency_ms: f64,
    /// Device rate.
    pub rate: u32,
    /// Points in the order run.
    pub points: Vec<LoadPoint>,
}

/// Runs every point.
pub fn run(ctx: &mut Ctx, o: &LoadOptions) -> Result<LoadResults> {
    let total = (o.streams.len() * o.variants.len()) as u64;
    let pb = ctx.progress.bar(total * 100, "load");
    let mut rng = Rng::new(ctx.seed);
    let signal = Signal::new(o.rate, &mut rng);
    let mut points = Vec::new();
    let mut i = 0;
    for &n in &o.streams {
        for &v in &o.variants {
            pb.set_message(format!("load {} × {}", n, v.name()));
            let p = run_point(ctx, o, v, n, &signal, &mut rng.fork(), &pb, i * 100)
                .with_context(|| format!("load: {n} {} streams", v.name()))?;
            points.push(p);
            i += 1;
        }
    }
    pb.finish_and_clear();
    Ok(LoadResults {
        latency_ms: o.latency_ms,
        rate: o.rate,
        points,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_point(
    ctx: &mut Ctx,
    o: &LoadOptions,
    variant: Variant,
    n: usize,
    signal: &Signal,
    rng: &mut Rng,
    pb: &indicatif::ProgressBar,
    base: u64,
) -> Result<LoadPoint> {
    let config = if n + 8 > 256 {
        format!("[server]\nmax_clients = {}\n", n + 16)
    } else {
        String::new()
    };
    let spec = DaemonSpec {
        devices: vec![format!("null:rate={}", o.rate)],
        rate: Some(o.rate),
        config,
        ..DaemonSpec::default()
    };
    let mut daemon = ctx.start_daemon(spec)?;
    let result = measure(&daemon, o, variant, n, signal, rng, pb, base);
    let stopped = daemon.stop();
    let r = result?;
    stopped?;
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
fn measure(
    daemon: &Daemon,
    o: &LoadOptions,
    variant: Variant,
    n: usize,
    signal: &Signal,
    rng: &mut Rng,
    pb: &indicatif::ProgressBar,
    base: u64,
) -> Result<LoadPoint> {
    let mut control = daemon.connect("quaver-bench load control")?;
    let client_rate = variant.client_rate(o.rate);
    let mut conns: Vec<Connection> = Vec::with_capacity(n);
    let mut streams: Vec<(PlaybackStream, usize)> = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = daemon.connect(&format!("quaver-bench load {i}"))?;
        let mut p = StreamParams::playback(format!("load-{i}"), client_rate, ChannelMap::stereo());
        p.latency_ms = Some(o.latency_ms);
        let s = c
            .create_playback(p)
            .with_context(|| format!("creating stream {} of {n}", i + 1))?;
        streams.push((s, rng.below(client_rate as u64) as usize));
        conns.push(c);
    }
    let stop = AtomicBool::new(false);
    let window_started = AtomicBool::new(false);
    let xruns_at_start = AtomicU64::new(u64::MAX);
    let period = Duration::from_secs_f64((o.latency_ms / 4000.0).max(0.001));
    let pid = daemon.pid();
    let total_s = o.warmup_seconds + o.window_seconds;
    std::thread::scope(|s| -> Result<LoadPoint> {
        let feeder = s.spawn(|| {
            feed(
                streams,
                signal,
                period,
                &stop,
                &window_started,
                &xruns_at_start,
            )
        });
        let r = run_with_progress(pb, base, |counter| -> Result<_> {
            let t0 = Instant::now();
            let tick = |counter: &AtomicU64| {
                counter.store(
                    (t0.elapsed().as_secs_f64() / total_s * 100.0).min(100.0) as u64,
                    Ordering::Relaxed,
                )
            };
            while t0.elapsed().as_secs_f64() < o.warmup_seconds {
                tick(counter);
                std::thread::sleep(Duration::from_millis(50));
            }
            window_started.store(true, Ordering::Relaxed);
            let st0 = control.status()?;
            let tm0 = control.timing().ok();
            let s0 = procfs::sample(pid)?;
            let w0 = Instant::now();
            while w0.elapsed().as_secs_f64() < o.window_seconds {
                tick(counter);
                std::thread::sleep(Duration::from_millis(50));
            }
            let s1 = procfs::sample(pid)?;
            let st1 = control.status()?;
            let tm1 = control.timing().ok();
            let mem = procfs::memory(pid)?;
            tick(counter);
            Ok((st0, st1, tm0, tm1, s0, s1, mem))
        });
        stop.store(true, Ordering::Relaxed);
        let fed = feeder
            .join()
            .map_err(|_| anyhow::anyhow!("feeder thread panicked"))??;
        let (st0, st1, tm0, tm1, s0, s1, mem) = r?;
        let ticks = procfs::clock_ticks_per_second();
        let d = ProcDelta::between(&s0, &s1, ticks);
        let quantum = st1.quantum;
        let audio_s = st1.cycles.saturating_sub(st0.cycles) as f64 * quantum as f64 / o.rate as f64;
        let cpu_per_audio_s = if audio_s > 0.0 {
            d.cpu_s / audio_s
        } else {
            f64::NAN
        };
        let rt_cpu: f64 = d
            .cpu_s_by_thread
            .iter()
            .filter(|(name, _)| name == "quaver-rt")
            .map(|(_, c)| c)
            .sum();
        let thread_total: f64 = d.cpu_s_by_thread.iter().map(|(_, c)| c).sum();
        let busy = match (tm0, tm1) {
            (Some(a), Some(b)) => Some(
                Log2Hist::from_counts(&b.busy_ns_log2)
                    .since(&Log2Hist::from_counts(&a.busy_ns_log2)),
            ),
            _ => None,
        };
        let start_xruns = xruns_at_start.load(Ordering::Relaxed);
        Ok(LoadPoint {
            variant,
            streams: n,
            client_rate,
            quantum,
            realtime: st1.realtime,
            wall_s: d.wall_s,
            audio_s,
            realtime_ratio: audio_s / d.wall_s.max(1e-9),
            cpu_s: d.cpu_s,
            cpu_per_audio_s,
            cpu_per_audio_s_per_stream: cpu_per_audio_s / n as f64,
            rt_thread_share: (thread_total > 0.0).then(|| rt_cpu / thread_total),
            wakeups_per_s: d.voluntary as f64 / d.wall_s.max(1e-9),
            preemptions_per_s: d.nonvoluntary as f64 / d.wall_s.max(1e-9),
            threads: s1.threads.len(),
            device_xruns: st1.xruns.saturating_sub(st0.xruns),
            stream_xruns: if start_xruns == u64::MAX {
                0
            } else {
                fed.saturating_sub(start_xruns)
            },
            rss_kb: mem.rss_kb,
            pss_kb: mem.pss_kb,
            busy,
            clock_ticks: ticks,
        })
    })
}

/// Keeps every stream's ring topped up until `stop`; returns the streams' total xruns.
/// When `window` turns true it stores the xrun total at that moment in `at_start`.
fn feed(
    mut streams: Vec<(PlaybackStream, usize)>,
    signal: &Signal,
    period: Duration,
    stop: &AtomicBool,
    window: &AtomicBool,
    at_start: &AtomicU64,
) -> Result<u64> {
    let mut buf: Vec<f32> = Vec::new();
    let total_xruns = |streams: &[(PlaybackStream, usize)]| {
        streams.iter().map(|s| s.0.xruns() as u64).sum::<u64>()
    };
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for (s, pos) in streams.iter_mut() {
            let queued = s.frames_queued();
            // Until the server has taken anything, fill the ring (its prebuffer may be
            // more than the latency cap); then keep the requested latency queued.
            let started = s.frames_written() > queued as u64;
            let limit = if started {
                s.max_queued_frames()
            } else {
                s.info().capacity_frames as usize
            };
            let n = limit.saturating_sub(queued);
            if n == 0 {
                continue;
            }
            buf.resize(n * 2, 0.0);
            signal.fill(pos, &mut buf);
            s.write(&buf)?;
        }
        if window.load(Ordering::Relaxed) && at_start.load(Ordering::Relaxed) == u64::MAX {
            at_start.store(total_xruns(&streams), Ordering::Relaxed);
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    Ok(total_xruns(&streams))
}

/// Tables, plots and the terminal summary.
pub fn render(r: &LoadResults) -> ModeOutput {
    let busy = |p: &LoadPoint, pc: f64| fmt_bounds(p.busy.as_ref().and_then(|h| h.percentile(pc)));
    let summary = Table::of(
        &r.points,
        &[
            ("streams", &|p| p.streams.to_string()),
            ("variant", &|p| p.variant.name().into()),
            ("CPU s/s", &|p| format!("{:.4}", p.cpu_per_audio_s)),
            ("per stream", &|p| {
                format!("{:.5}", p.cpu_per_audio_s_per_stream)
            }),
            ("wakeups/s", &|p| format!("{:.0}", p.wakeups_per_s)),
            ("xruns dev/str", &|p| {
                format!("{}/{}", p.device_xruns, p.stream_xruns)
            }),
            ("RSS MiB", &|p| format!("{:.1}", p.rss_kb as f64 / 1024.0)),
            ("busy p99", &|p| busy(p, 99.0)),
            ("real time", &|p| {
                if p.realtime_ratio >= 0.98 {
                    "yes".to_string()
                } else {
                    format!("NO ({:.0}%)", p.realtime_ratio * 100.0)
                }
            }),
        ],
    );
    let detail = Table::of(
        &r.points,
        &[
            ("streams", &|p| p.streams.to_string()),
            ("variant", &|p| p.variant.name().into()),
            ("rate", &|p| p.client_rate.to_string()),
            ("quantum", &|p| p.quantum.to_string()),
            ("RT", &|p| yes_no(p.realtime).into()),
            ("audio s", &|p| format!("{:.2}", p.audio_s)),
            ("CPU s", &|p| format!("{:.2}", p.cpu_s)),
            ("CPU s/s", &|p| format!("{:.4}", p.cpu_per_audio_s)),
            ("µs CPU per stream-s", &|p| {
                format!("{:.1}", p.cpu_per_audio_s_per_stream * 1e6)
            }),
            ("RT thread share", &|p| {
                p.rt_thread_share
                    .map_or("–".into(), |s| format!("{:.0}%", s * 100.0))
            }),
            ("wakeups/s", &|p| format!("{:.0}", p.wakeups_per_s)),
            ("preempt/s", &|p| format!("{:.0}", p.preemptions_per_s)),
            ("threads", &|p| p.threads.to_string()),
            ("RSS kB", &|p| p.rss_kb.to_string()),
            ("PSS kB", &|p| p.pss_kb.to_string()),
            ("busy p50", &|p| busy(p, 50.0)),
            ("busy p99", &|p| busy(p, 99.0)),
            ("busy max", &|p| {
                fmt_bounds(p.busy.as_ref().and_then(|h| h.max_bucket()))
            }),
        ],
    );
    let per_variant = |f: &dyn Fn(&LoadPoint) -> f64| -> Vec<Series> {
        [Variant::Native, Variant::Resampled]
            .iter()
            .filter_map(|v| {
                let pts: Vec<(f64, f64)> = r
                    .points
                    .iter()
                    .filter(|p| p.variant == *v)
                    .map(|p| (p.streams as f64, f(p)))
                    .collect();
                (!pts.is_empty()).then(|| Series::new(v.name(), pts))
            })
            .collect()
    };
    let plot = |title: &str, y: &str, f: &dyn Fn(&LoadPoint) -> f64| {
        line_plot(title, "playback streams", y, &per_variant(f), true, true)
    };
    let q = r.points.first().map_or(0, |p| p.quantum);
    let mut doc = Doc::new();
    doc.heading(2, "Load")
        .para(format!(
            "Each stream requests {} ms (quantum {q} frames at {} Hz) on a null sink; \
             a fresh quaverd per row. CPU s/s: quaverd's CPU seconds (utime + stime, every \
             thread; resolution 1/{} s) per second of audio played. Wakeups: voluntary context \
             switches of all its threads. Busy: the RT thread's per-cycle processing time \
             (log2 buckets, upper bounds). Real time: whether quaverd rendered at least \
             98% of the window's wall time as audio (below that it could not keep up, and \
             CPU s/s counts CPU per second of audio actually rendered).",
            r.latency_ms,
            r.rate,
            r.points.first().map_or(100, |p| p.clock_ticks)
        ))
        .table(&summary)
        .plot(
            "cost-per-stream",
            plot(
                "quaverd CPU per stream vs number of streams",
                "µs CPU per second of audio, per stream",
                &|p| p.cpu_per_audio_s_per_stream * 1e6,
            ),
        )
        .plot(
            "cpu-total",
            plot(
                "quaverd CPU vs number of streams",
                "CPU seconds per second of audio",
                &|p| p.cpu_per_audio_s,
            ),
        )
        .plot(
            "wakeups",
            plot(
                "quaverd context switches vs number of streams",
                "voluntary context switches per second",
                &|p| p.wakeups_per_s,
            ),
        )
        .heading(3, "Detail")
        .table(&detail);
    doc.finish(r, summary, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_counts_are_powers_of_two() {
        assert_eq!(
            LoadOptions::new(false, None, true, 256).streams,
            vec![1, 2, 4, 8, 16, 32, 64, 128, 256]
        );
        assert_eq!(
            LoadOptions::new(false, Some(3), false, 256).streams,
            vec![3]
        );
        assert_eq!(LoadOptions::new(true, None, true, 4).streams, vec![1, 2, 4]);
    }
}
