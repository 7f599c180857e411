//! `peers`: quaverd next to PulseAudio and PipeWire (JACK2 later), the same
//! workload against each.
//!
//! Every server is started headless in its own runtime directory with a null sink at
//! 48 kHz stereo and driven by the same PulseAudio-protocol clients, so the client side
//! is identical and only the server differs. Two parts:
//!
//! - **load**: N `paplay` processes playing a 44.1 kHz s16 stereo WAV into the 48 kHz
//!   sink (every server resamples), at each latency of [`PeersOptions::latencies`]
//!   (the server's default, or `--latency-msec=N`). Per server and repetition: its idle
//!   cost (after quaverd's idle suspend timeout), then for each latency and N its CPU
//!   seconds per second, context switches per second (all threads), RSS/PSS, and the
//!   playback latency it reports to the first client (`paplay -v`). Tables give medians
//!   over repetitions and ratios quaverd / peer.
//! - **monitor latency** ([`crate::modes::peers::monlat`]): for each N of
//!   [`MonitorOptions::latencies_ms`], what a `paplay --latency-msec=N` stream measures
//!   through the sink's monitor next to what the server reports, and its underruns.
//! - **capture path** ([`crate::modes::peers::capture`]): one libpulse client playing
//!   and recording the sink's monitor at N ms each: write→capture, and the playback-
//!   and capture-side latencies libpulse reports, separately.
//! - **under load** ([`crate::modes::peers::underload`], `--under-load`): the underruns N
//!   `paplay --latency-msec=L` clients are told of while CPU hogs oversubscribe every core.
//!
//! PipeWire is pipewire + wireplumber + pipewire-pulse (their costs add up), on a
//! private D-Bus session bus (see [`crate::tools::servers::Server::pipewire`]).
//!
//! Not yet: JACK2 is detected and its version recorded, but not started.

pub mod capture;
pub mod monlat;
pub mod render;
mod rounds;
pub mod underload;

use crate::Ctx;
use crate::modes::peers::capture::{CaptureOptions, CapturePoint};
use crate::modes::peers::monlat::{MonitorOptions, MonitorPoint};
use crate::modes::peers::underload::{UnderLoadOptions, UnderLoadPoint};
use crate::report::progress::run_with_progress;
use crate::report::stats::Summary;
use crate::tools::exec::{describe, stop_child};
use crate::tools::machine::{NOT_INSTALLED, tool_version};
use crate::tools::procfs::{self, ProcDelta};
use crate::tools::rng::Rng;
use crate::tools::servers::{Server, ServerKind};
use crate::tools::signal::{FILE_RATE, write_wav};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A load client's latency request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PeerLatency {
    /// No `--latency-msec`: the server's default buffering.
    Default,
    /// `--latency-msec=N`.
    Ms(u32),
}

impl PeerLatency {
    /// Label in tables and keys in the record: `default` or the number of ms.
    pub fn label(&self) -> String {
        match self {
            PeerLatency::Default => "default".into(),
            PeerLatency::Ms(n) => n.to_string(),
        }
    }
}

impl std::str::FromStr for PeerLatency {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<PeerLatency, String> {
        match s.trim() {
            "default" => Ok(PeerLatency::Default),
            n => n
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .map(PeerLatency::Ms)
                .ok_or_else(|| format!("`{s}`: expected `default` or a number of ms")),
        }
    }
}

/// Settings of a `peers` run.
#[derive(Debug, Clone)]
pub struct PeersOptions {
    /// Stream counts.
    pub counts: Vec<usize>,
    /// Repetitions of the load part (medians are taken over them).
    pub repeats: usize,
    /// Idle window, s.
    pub idle_seconds: f64,
    /// Warm-up before each load window, s.
    pub warmup_seconds: f64,
    /// Load window, s.
    pub window_seconds: f64,
    /// The load clients' latency requests.
    pub latencies: Vec<PeerLatency>,
    /// Run the load part.
    pub load: bool,
    /// The monitor-latency part (`None`: skipped).
    pub monitor: Option<MonitorOptions>,
    /// The capture-path part (`None`: skipped).
    pub capture: Option<CaptureOptions>,
    /// The under-load part (`None`: skipped, the default).
    pub under_load: Option<UnderLoadOptions>,
}

impl PeersOptions {
    /// Defaults: 1, 8 and 32 streams at the default latency and at 20 ms, three
    /// repetitions, then the monitor latency at 5, 10, 20 and 50 ms (quick: 1 and 4
    /// streams, once, short windows).
    pub fn new(quick: bool) -> PeersOptions {
        PeersOptions {
            counts: if quick { vec![1, 4] } else { vec![1, 8, 32] },
            repeats: if quick { 1 } else { 3 },
            idle_seconds: if quick { 1.0 } else { 5.0 },
            warmup_seconds: if quick { 0.5 } else { 1.5 },
            window_seconds: if quick { 1.0 } else { 5.0 },
            latencies: vec![PeerLatency::Default, PeerLatency::Ms(20)],
            load: true,
            monitor: Some(MonitorOptions::new(quick)),
            capture: Some(CaptureOptions::new(quick)),
            under_load: None,
        }
    }
}

/// One measurement of a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// CPU seconds per second (of wall time; the servers play in real time).
    pub cpu_per_s: f64,
    /// Whether that CPU time is to the nanosecond (every process's threads' schedstat)
    /// rather than in clock ticks; see [`ProcDelta::between`].
    #[serde(default)]
    pub cpu_exact: bool,
    /// Voluntary context switches per second, all threads.
    pub wakeups_per_s: f64,
    /// Involuntary context switches per second.
    pub preemptions_per_s: f64,
    /// RSS at the end, kB.
    pub rss_kb: u64,
    /// PSS at the end, kB.
    pub pss_kb: u64,
    /// Threads.
    pub threads: usize,
    /// Median playback latency the server reported to the first client, µs.
    pub reported_latency_us: Option<f64>,
}

/// Everything measured for one server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerResult {
    /// Which.
    pub server: ServerKind,
    /// Its version.
    pub version: String,
    /// Idle samples, one per repetition.
    pub idle: Vec<Sample>,
    /// Load samples per latency label (`default`, `20`, …) and stream count, one per
    /// repetition.
    pub load: BTreeMap<String, BTreeMap<usize, Vec<Sample>>>,
    /// Monitor-latency points, one per requested latency.
    #[serde(default)]
    pub monitor: Vec<MonitorPoint>,
    /// Why the monitor-latency part could not run, if it could not.
    #[serde(default)]
    pub monitor_error: Option<String>,
    /// Capture-path points, one per requested latency.
    #[serde(default)]
    pub capture: Vec<CapturePoint>,
    /// Why the capture-path part could not run, if it could not.
    #[serde(default)]
    pub capture_error: Option<String>,
    /// Why it could not be measured at all, if it could not.
    pub error: Option<String>,
    /// Repetitions that failed part-way (the points before the failure are kept; the
    /// other repetitions still run).
    #[serde(default)]
    pub failures: Vec<String>,
    /// Under-load windows, in the order they ran.
    #[serde(default)]
    pub under_load: Vec<UnderLoadPoint>,
}

fn one() -> usize {
    1
}

/// Everything a `peers` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeersResults {
    /// Stream counts.
    pub counts: Vec<usize>,
    /// Repetitions.
    pub repeats: usize,
    /// The load clients' latency labels (`default`: no `--latency-msec`).
    pub latencies: Vec<String>,
    /// Seconds of the load file (44.1 kHz s16 stereo WAV).
    pub file_seconds: f64,
    /// The monitor-latency part's requested latencies, ms (empty: not run).
    pub monitor_latencies_ms: Vec<u32>,
    /// Its record fragsize, ms.
    pub monitor_fragsize_ms: f64,
    /// Its seconds of impulses per point.
    pub monitor_seconds: f64,
    /// The rounds each point was measured in, alternating between the servers (1 in
    /// reports from before rounds: each server's points in one go).
    #[serde(default = "one")]
    pub monitor_rounds: usize,
    /// Its injected delay, ms (instrument check; 0 in real runs).
    pub monitor_inject_delay_ms: u32,
    /// The capture-path part's requested latencies, ms (empty: not run).
    #[serde(default)]
    pub capture_latencies_ms: Vec<u32>,
    /// Its seconds of impulses per round.
    #[serde(default)]
    pub capture_seconds: f64,
    /// Its rounds per point.
    #[serde(default)]
    pub capture_rounds: usize,
    /// The under-load part's clients' latency, ms (`None`: not run).
    #[serde(default)]
    pub under_load_latency_ms: Option<u32>,
    /// Its window per point, s.
    #[serde(default)]
    pub under_load_seconds: f64,
    /// Its stream counts.
    #[serde(default)]
    pub under_load_counts: Vec<usize>,
    /// Its stressor's command.
    #[serde(default)]
    pub under_load_stressor: String,
    /// Measured servers (quaverd first).
    pub servers: Vec<ServerResult>,
    /// Peers not measured, with the reason ("not installed", …).
    pub skipped: Vec<(String, String)>,
}

/// Longest the load part waits for the first paplay to report that its stream plays.
const PLAY_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between starting two load clients (see `load_point`).
const CLIENT_STAGGER: Duration = Duration::from_millis(20);

/// Runs the comparison.
pub fn run(ctx: &mut Ctx, o: &PeersOptions) -> Result<PeersResults> {
    if (o.load || o.under_load.is_some()) && crate::tools::exec::which("paplay").is_none() {
        bail!("peers needs paplay (Debian: pulseaudio-utils) as the common client");
    }
    let mut kinds = vec![ServerKind::Quaverd];
    let mut skipped = Vec::new();
    let pa = tool_version("pulseaudio", &["--version"]);
    if pa == NOT_INSTALLED {
        skipped.push(("pulseaudio".into(), NOT_INSTALLED.into()));
    } else {
        kinds.push(ServerKind::Pulseaudio);
    }
    let missing: Vec<&str> = crate::tools::servers::PIPEWIRE_PROGRAMS
        .iter()
        .copied()
        .filter(|p| crate::tools::exec::which(p).is_none())
        .collect();
    if missing.is_empty() {
        kinds.push(ServerKind::Pipewire);
    } else {
        skipped.push((
            "pipewire".into(),
            format!("{NOT_INSTALLED}: {}", missing.join(", ")),
        ));
    }
    let v = tool_version("jackd", &["--version"]);
    let why = if v == NOT_INSTALLED {
        NOT_INSTALLED.to_string()
    } else {
        format!("{v}: installed, but headless start is not implemented yet")
    };
    skipped.push(("jackd".into(), why));
    // With the default latency a server buffers about 2 s ahead of what it plays, and
    // PulseAudio may take up to 2 s to start: the file outlasts both, the warm-up and
    // the window.
    let file_seconds = o.warmup_seconds + o.window_seconds + 8.0;
    let dir = crate::tools::exec::tempdir("quaver-bench-peers-")?;
    let wav = dir.path().join("signal-s16-44100-2ch.wav");
    if o.load {
        write_wav(&wav, FILE_RATE, file_seconds, &mut Rng::new(ctx.seed))?;
    }
    let load_steps = if o.load {
        o.repeats * (1 + o.counts.len() * o.latencies.len())
    } else {
        0
    };
    let mon_steps = o.monitor.as_ref().map_or(0, |m| m.latencies_ms.len())
        + o.capture.as_ref().map_or(0, |c| c.latencies_ms.len());
    let under_steps = o
        .under_load
        .as_ref()
        .map_or(0, |u| u.rounds.max(1) * u.counts.len());
    let steps = (kinds.len() * (load_steps + mon_steps + under_steps)) as u64;
    let pb = ctx.progress.bar(steps, "peers");
    let mut results: Vec<ServerResult> = kinds
        .iter()
        .map(|&k| ServerResult {
            server: k,
            version: match k {
                ServerKind::Quaverd => crate::tools::daemon::quaverd_version(&ctx.quaverd),
                ServerKind::Pulseaudio => pa.clone(),
                ServerKind::Pipewire => tool_version("pipewire", &["--version"]),
            },
            idle: Vec::new(),
            load: BTreeMap::new(),
            monitor: Vec::new(),
            monitor_error: None,
            capture: Vec::new(),
            capture_error: None,
            error: None,
            failures: Vec::new(),
            under_load: Vec::new(),
        })
        .collect();
    let mut step = 0;
    for rep in 0..if o.load { o.repeats } else { 0 } {
        for r in results.iter_mut() {
            if r.error.is_some() {
                continue;
            }
            pb.set_message(format!(
                "peers: {} (run {} of {})",
                r.server.name(),
                rep + 1,
                o.repeats
            ));
            if let Err(e) = measure_server(ctx, o, r, &wav, &pb, &mut step) {
                r.failures.push(format!("run {}: {e:#}", rep + 1));
                // A server that never came up is not retried.
                if r.idle.is_empty() {
                    r.error = Some(format!("{e:#}"));
                }
            }
        }
    }
    latency_parts(ctx, o, &kinds, &mut results, &pb, &mut step);
    let mut under_load_stressor = String::new();
    if let Some(u) = &o.under_load {
        let (points, stressor) = crate::modes::peers::underload::run(ctx, &kinds, u, |msg| {
            pb.set_message(msg);
            step += 1;
            pb.set_position(step);
        })?;
        for (r, p) in results.iter_mut().zip(points) {
            r.under_load = p;
        }
        under_load_stressor = stressor;
    }
    pb.finish_and_clear();
    let m = o.monitor.clone();
    Ok(PeersResults {
        counts: if o.load { o.counts.clone() } else { Vec::new() },
        repeats: o.repeats,
        latencies: if o.load {
            o.latencies.iter().map(PeerLatency::label).collect()
        } else {
            Vec::new()
        },
        file_seconds,
        monitor_latencies_ms: m.as_ref().map_or(Vec::new(), |m| m.latencies_ms.clone()),
        monitor_fragsize_ms: m.as_ref().map_or(0.0, |m| m.fragsize_ms),
        monitor_seconds: m.as_ref().map_or(0.0, |m| m.seconds),
        monitor_rounds: m.as_ref().map_or(1, |m| m.rounds.max(1)),
        monitor_inject_delay_ms: m.as_ref().map_or(0, |m| m.inject_delay_ms),
        capture_latencies_ms: o
            .capture
            .as_ref()
            .map_or(Vec::new(), |c| c.latencies_ms.clone()),
        capture_seconds: o.capture.as_ref().map_or(0.0, |c| c.seconds),
        capture_rounds: o.capture.as_ref().map_or(0, |c| c.rounds),
        under_load_latency_ms: o.under_load.as_ref().map(|u| u.latency_ms),
        under_load_seconds: o.under_load.as_ref().map_or(0.0, |u| u.seconds),
        under_load_counts: o
            .under_load
            .as_ref()
            .map_or(Vec::new(), |u| u.counts.clone()),
        under_load_stressor,
        servers: results,
        skipped,
    })
}

/// The monitor-latency and capture-path parts, each server's points into `results`.
fn latency_parts(
    ctx: &mut Ctx,
    o: &PeersOptions,
    kinds: &[ServerKind],
    results: &mut [ServerResult],
    pb: &indicatif::ProgressBar,
    step: &mut u64,
) {
    if let Some(m) = &o.monitor {
        let rng = Rng::new(ctx.seed ^ 0x006d_6f6e_6974_6f72);
        let measured = rounds::monitor_servers(ctx, kinds, m, rng, pb, step);
        for (r, got) in results.iter_mut().zip(measured) {
            match got {
                Ok(points) => r.monitor = points,
                Err(e) => r.monitor_error = Some(format!("{e:#}")),
            }
        }
    }
    if let Some(c) = &o.capture {
        let rng = Rng::new(ctx.seed ^ 0x0063_6170_7475_7265);
        let measured = rounds::capture_servers(ctx, kinds, c, rng, pb, step);
        for (r, got) in results.iter_mut().zip(measured) {
            match got {
                Ok(points) => r.capture = points,
                Err(e) => r.capture_error = Some(format!("{e:#}")),
            }
        }
    }
}

fn measure_server(
    ctx: &mut Ctx,
    o: &PeersOptions,
    r: &mut ServerResult,
    wav: &std::path::Path,
    pb: &indicatif::ProgressBar,
    step: &mut u64,
) -> Result<()> {
    let mut server = Server::start(ctx, r.server)?;
    let pid = server.pids();
    // Idle: past quaverd's 3 s suspend timeout, so every server is at rest.
    let idle = run_with_progress(pb, *step, |_| -> Result<Sample> {
        std::thread::sleep(Duration::from_millis(3500));
        sample_window(&pid, o.idle_seconds)
    })?;
    r.idle.push(idle);
    *step += 1;
    for &lat in &o.latencies {
        for &n in &o.counts {
            let result = load_point(ctx, o, &mut server, &pid, wav, lat, n, pb, *step);
            *step += 1;
            pb.set_position(*step);
            match result {
                Ok(sample) => r
                    .load
                    .entry(lat.label())
                    .or_default()
                    .entry(n)
                    .or_default()
                    .push(sample),
                // One failed point (a client refused) costs that point, not the rest of
                // the run; a server that is gone ends it.
                Err(e) if server.ended().is_none() => {
                    r.failures.push(format!("run {}: {e:#}", r.idle.len()));
                }
                Err(e) => return Err(e),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    server.stop();
    Ok(())
}

/// N `paplay` clients at `lat` against `server`: one sample.
#[allow(clippy::too_many_arguments)]
fn load_point(
    ctx: &mut Ctx,
    o: &PeersOptions,
    server: &mut Server,
    pid: &[u32],
    wav: &std::path::Path,
    lat: PeerLatency,
    n: usize,
    pb: &indicatif::ProgressBar,
    step: u64,
) -> Result<Sample> {
    let mut clients = Vec::with_capacity(n);
    let latency = Arc::new(Mutex::new(Vec::new()));
    // paplay 0's other stderr lines (its error, if it exits early).
    let messages = Arc::new(Mutex::new(Vec::<String>::new()));
    // The other clients' stderr, one file each, read only if one exits early.
    let errs = crate::tools::exec::tempdir("quaver-bench-paplay-")?;
    let err_file = |i: usize| errs.path().join(format!("paplay-{i}.err"));
    let result = (|| -> Result<Sample> {
        for i in 0..n {
            let mut c = Command::new("paplay");
            server.client_env(&mut c);
            if let PeerLatency::Ms(ms) = lat {
                c.arg(format!("--latency-msec={ms}"));
            }
            c.args([
                &format!("--stream-name=load-{i}"),
                "--client-name=quaver-bench",
            ]);
            if i == 0 {
                c.arg("-v");
            }
            c.arg(wav);
            if i == 0 || i + 1 == n {
                ctx.record_command(format!(
                    "{} &{}",
                    describe(&c),
                    if i == 0 && n > 1 {
                        format!(
                            "   # ×{n}, stream names load-0…load-{}; only the first with -v",
                            n - 1
                        )
                    } else {
                        String::new()
                    }
                ));
            }
            let mut child = c
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(if i == 0 {
                    Stdio::piped()
                } else {
                    Stdio::from(std::fs::File::create(err_file(i))?)
                })
                .spawn()
                .context("starting paplay")?;
            if let Some(err) = child.stderr.take() {
                let lat = latency.clone();
                let msgs = messages.clone();
                std::thread::spawn(move || {
                    // paplay -v rewrites one status line with '\r', so split on both
                    // line ends.
                    for chunk in BufReader::new(err).split(b'\r').map_while(Result::ok) {
                        for part in String::from_utf8_lossy(&chunk).split('\n') {
                            if let Some(us) = parse_pacat_latency(part) {
                                let playing = parse_pacat_time(part).is_some_and(|t| t > 0.0);
                                lat.lock().expect("latency lock").push((
                                    Instant::now(),
                                    us,
                                    playing,
                                ));
                            } else if !part.trim().is_empty() {
                                let mut m = msgs.lock().expect("messages lock");
                                if m.len() >= 8 {
                                    m.remove(0);
                                }
                                m.push(part.trim().to_string());
                            }
                        }
                    }
                });
            }
            clients.push(child);
            // One connection at a time, as a desktop's programs start: this part
            // measures the cost of playing; 32 clients connecting in the same instant
            // overflow PulseAudio's listen backlog (acceptance 8 tests that apart).
            std::thread::sleep(CLIENT_STAGGER);
        }
        // The warm-up starts when the server plays: paplay 0's stream time has moved.
        // PulseAudio's null sink first finishes the block it rendered while idle (up to
        // its 2 s maximum latency), and that wait must not fall into the window.
        let t_start = Instant::now();
        while t_start.elapsed() < PLAY_TIMEOUT
            && !latency.lock().expect("latency lock").iter().any(|l| l.2)
            && clients[0].try_wait()?.is_none()
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_secs_f64(o.warmup_seconds));
        for (i, c) in clients.iter_mut().enumerate() {
            if let Some(st) = c.try_wait()? {
                std::thread::sleep(Duration::from_millis(100));
                let said = if i == 0 {
                    messages.lock().expect("messages lock").join(" | ")
                } else {
                    std::fs::read_to_string(err_file(i))
                        .unwrap_or_default()
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .collect::<Vec<_>>()
                        .join(" | ")
                };
                bail!(
                    "paplay {i} of {n} (latency {}) exited early ({st}) against {}{}{}",
                    lat.label(),
                    server.kind.name(),
                    if !said.is_empty() {
                        format!("; paplay {i} said: {said}")
                    } else {
                        String::new()
                    },
                    // A client that cannot connect usually means the server is gone.
                    server.ended().map(|e| format!("; {e}")).unwrap_or_default()
                );
            }
        }
        let t0 = Instant::now();
        let mut s = run_with_progress(pb, step, |_| sample_window(pid, o.window_seconds))?;
        let lat: Vec<f64> = latency
            .lock()
            .expect("latency lock")
            .iter()
            .filter(|(t, _, _)| *t >= t0)
            .map(|(_, us, _)| *us)
            .collect();
        s.reported_latency_us = Summary::of(&lat).map(|s| s.p50);
        server.check_alive()?;
        Ok(s)
    })();
    for mut c in clients {
        stop_child(&mut c, Duration::from_secs(5));
    }
    result
}

/// Samples processes over `seconds`; their costs add up.
fn sample_window(pids: &[u32], seconds: f64) -> Result<Sample> {
    let a = pids
        .iter()
        .map(|&p| procfs::sample(p))
        .collect::<Result<Vec<_>>>()?;
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let mut s = Sample {
        cpu_per_s: 0.0,
        cpu_exact: true,
        wakeups_per_s: 0.0,
        preemptions_per_s: 0.0,
        rss_kb: 0,
        pss_kb: 0,
        threads: 0,
        reported_latency_us: None,
    };
    for (&pid, a) in pids.iter().zip(&a) {
        let b = procfs::sample(pid)?;
        let mem = procfs::memory(pid)?;
        let d = ProcDelta::between(a, &b, procfs::clock_ticks_per_second());
        let w = d.wall_s.max(1e-9);
        s.cpu_per_s += d.cpu_s / w;
        s.cpu_exact &= d.cpu_exact;
        s.wakeups_per_s += d.voluntary as f64 / w;
        s.preemptions_per_s += d.nonvoluntary as f64 / w;
        s.rss_kb += mem.rss_kb;
        s.pss_kb += mem.pss_kb;
        s.threads += b.threads.len();
    }
    Ok(s)
}

/// Parses the stream time of a `pacat -v` status line, s.
pub fn parse_pacat_time(line: &str) -> Option<f64> {
    let i = line.find("Time:")? + "Time:".len();
    let rest = line[i..].trim_start();
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let v: f64 = num.parse().ok()?;
    rest[num.len()..]
        .trim_start()
        .starts_with("sec")
        .then_some(v)
}

/// Parses a `pacat -v` status line: `Time: 1.234 sec; Latency: 21304 usec.`
pub fn parse_pacat_latency(line: &str) -> Option<f64> {
    let i = line.find("Latency:")? + "Latency:".len();
    let rest = line[i..].trim_start();
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-' || *c == '.')
        .collect();
    let v: f64 = num.parse().ok()?;
    rest[num.len()..]
        .trim_start()
        .starts_with("usec")
        .then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::peers::render::med_of;

    #[test]
    fn pacat_latency_lines() {
        assert_eq!(
            parse_pacat_latency("Time: 1.234 sec; Latency: 21304 usec."),
            Some(21304.0)
        );
        assert_eq!(
            parse_pacat_latency("Time: 0.0 sec; Latency: -12 usec.  "),
            Some(-12.0)
        );
        assert_eq!(parse_pacat_latency("Stream successfully created."), None);
        assert_eq!(parse_pacat_latency("Latency: 5 msec"), None);
        assert_eq!(
            parse_pacat_time("Time: 1.234 sec; Latency: 21304 usec."),
            Some(1.234)
        );
        assert_eq!(parse_pacat_time("Stream started."), None);
    }

    #[test]
    fn medians_over_repetitions() {
        let s = |c: f64| Sample {
            cpu_per_s: c,
            cpu_exact: true,
            wakeups_per_s: 1.0,
            preemptions_per_s: 0.0,
            rss_kb: 1,
            pss_kb: 1,
            threads: 1,
            reported_latency_us: None,
        };
        assert_eq!(
            med_of(&[s(3.0), s(1.0), s(2.0)], |x| Some(x.cpu_per_s)),
            Some(2.0)
        );
        assert_eq!(med_of(&[s(1.0)], |x| x.reported_latency_us), None);
    }
}
