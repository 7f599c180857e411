//! `peers`: quaverd next to PulseAudio and PipeWire (JACK2 later), the same
//! workload against each.
//!
//! Every server is started headless in its own runtime directory with a null sink at
//! 48 kHz stereo and driven by the same PulseAudio-protocol clients: N `pacat`
//! processes (float32le, 48 kHz stereo, `--latency-msec`), so the client side is
//! identical and only the server differs. Per server and repetition: its idle cost
//! (after quaverd's idle suspend timeout), then for each N its CPU seconds per second,
//! context switches per second (all threads), RSS/PSS, and the playback latency it
//! reports to the first client (`pacat -v`). Tables give medians over repetitions and
//! ratios quaver / peer.
//!
//! PipeWire is pipewire + wireplumber + pipewire-pulse (their costs add up), on a
//! private D-Bus session bus (see [`crate::servers::Server::pipewire`]).
//!
//! Not yet: JACK2 is detected and its version recorded, but not started; the impulse
//! round trip with PulseAudio-protocol clients (the `latency` mode's monitor path for
//! every server).

use crate::exec::{describe, stop_child};
use crate::machine::{NOT_INSTALLED, tool_version};
use crate::procfs::{self, ProcDelta};
use crate::progress::run_with_progress;
use crate::report::{ModeOutput, Table};
use crate::rng::Rng;
use crate::servers::{Server, ServerKind};
use crate::stats::Summary;
use crate::svg::{Series, line_plot};
use crate::{Ctx, load};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Settings of a `peers` run.
#[derive(Debug, Clone)]
pub struct PeersOptions {
    /// Stream counts.
    pub counts: Vec<usize>,
    /// Repetitions (medians are taken over them).
    pub repeats: usize,
    /// Idle window, s.
    pub idle_seconds: f64,
    /// Warm-up before each load window, s.
    pub warmup_seconds: f64,
    /// Load window, s.
    pub window_seconds: f64,
    /// `pacat --latency-msec`.
    pub latency_ms: u32,
}

impl PeersOptions {
    /// Defaults: 1, 8 and 32 streams, three repetitions (quick: 1 and 4 streams, once).
    pub fn new(quick: bool) -> PeersOptions {
        PeersOptions {
            counts: if quick { vec![1, 4] } else { vec![1, 8, 32] },
            repeats: if quick { 1 } else { 3 },
            idle_seconds: if quick { 1.0 } else { 5.0 },
            warmup_seconds: if quick { 0.5 } else { 1.5 },
            window_seconds: if quick { 1.0 } else { 5.0 },
            latency_ms: 20,
        }
    }
}

/// One measurement of a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// CPU seconds per second (of wall time; the servers play in real time).
    pub cpu_per_s: f64,
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
    /// Load samples per stream count, one per repetition.
    pub load: BTreeMap<usize, Vec<Sample>>,
    /// Why it could not be measured at all, if it could not.
    pub error: Option<String>,
    /// Repetitions that failed part-way (the points before the failure are kept; the
    /// other repetitions still run).
    #[serde(default)]
    pub failures: Vec<String>,
}

/// Everything a `peers` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeersResults {
    /// Stream counts.
    pub counts: Vec<usize>,
    /// Repetitions.
    pub repeats: usize,
    /// `pacat --latency-msec`.
    pub latency_ms: u32,
    /// Measured servers (quaverd first).
    pub servers: Vec<ServerResult>,
    /// Peers not measured, with the reason ("not installed", …).
    pub skipped: Vec<(String, String)>,
}

/// Runs the comparison.
pub fn run(ctx: &mut Ctx, o: &PeersOptions) -> Result<PeersResults> {
    if crate::exec::which("pacat").is_none() {
        bail!("peers needs pacat (Debian: pulseaudio-utils) as the common client");
    }
    let mut kinds = vec![ServerKind::Quaverd];
    let mut skipped = Vec::new();
    let pa = tool_version("pulseaudio", &["--version"]);
    if pa == NOT_INSTALLED {
        skipped.push(("pulseaudio".into(), NOT_INSTALLED.into()));
    } else {
        kinds.push(ServerKind::Pulseaudio);
    }
    let missing: Vec<&str> = crate::servers::PIPEWIRE_PROGRAMS
        .iter()
        .copied()
        .filter(|p| crate::exec::which(p).is_none())
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
    let audio_s = o.warmup_seconds + o.window_seconds + 3.0;
    let dir = tempfile::Builder::new()
        .prefix("quaver-bench-peers-")
        .tempdir()?;
    let raw = dir.path().join("signal-f32le-48000-2ch.raw");
    write_raw(&raw, 48_000, audio_s, &mut Rng::new(ctx.seed))?;
    let steps = (o.repeats * kinds.len() * (1 + o.counts.len())) as u64;
    let pb = ctx.progress.bar(steps, "peers");
    let mut results: Vec<ServerResult> = kinds
        .iter()
        .map(|&k| ServerResult {
            server: k,
            version: match k {
                ServerKind::Quaverd => crate::daemon::quaverd_version(&ctx.quaverd),
                ServerKind::Pulseaudio => pa.clone(),
                ServerKind::Pipewire => tool_version("pipewire", &["--version"]),
            },
            idle: Vec::new(),
            load: BTreeMap::new(),
            error: None,
            failures: Vec::new(),
        })
        .collect();
    let mut step = 0;
    for rep in 0..o.repeats {
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
            if let Err(e) = measure_server(ctx, o, r, &raw, &pb, &mut step) {
                r.failures.push(format!("run {}: {e:#}", rep + 1));
                // A server that never came up is not retried.
                if r.idle.is_empty() {
                    r.error = Some(format!("{e:#}"));
                }
            }
        }
    }
    pb.finish_and_clear();
    Ok(PeersResults {
        counts: o.counts.clone(),
        repeats: o.repeats,
        latency_ms: o.latency_ms,
        servers: results,
        skipped,
    })
}

fn measure_server(
    ctx: &mut Ctx,
    o: &PeersOptions,
    r: &mut ServerResult,
    raw: &std::path::Path,
    pb: &indicatif::ProgressBar,
    step: &mut u64,
) -> Result<()> {
    let mut server = match r.server {
        ServerKind::Quaverd => Server::quaverd(ctx)?,
        ServerKind::Pulseaudio => Server::pulseaudio(ctx)?,
        ServerKind::Pipewire => Server::pipewire(ctx)?,
    };
    let pid = server.pids();
    // Idle: past quaverd's 3 s suspend timeout, so every server is at rest.
    let idle = run_with_progress(pb, *step, |_| -> Result<Sample> {
        std::thread::sleep(Duration::from_millis(3500));
        sample_window(&pid, o.idle_seconds)
    })?;
    r.idle.push(idle);
    *step += 1;
    for &n in &o.counts {
        let mut clients = Vec::with_capacity(n);
        let latency = Arc::new(Mutex::new(Vec::new()));
        // pacat 0's other stderr lines (its error, if it exits early).
        let messages = Arc::new(Mutex::new(Vec::<String>::new()));
        let result = (|| -> Result<Sample> {
            for i in 0..n {
                let mut c = Command::new("pacat");
                server.client_env(&mut c);
                c.args([
                    "--playback",
                    "--raw",
                    "--format=float32le",
                    "--rate=48000",
                    "--channels=2",
                    &format!("--latency-msec={}", o.latency_ms),
                    &format!("--stream-name=load-{i}"),
                    "--client-name=quaver-bench",
                ]);
                if i == 0 {
                    c.arg("-v");
                }
                c.arg(raw);
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
                        Stdio::null()
                    })
                    .spawn()
                    .context("starting pacat")?;
                if let Some(err) = child.stderr.take() {
                    let lat = latency.clone();
                    let msgs = messages.clone();
                    std::thread::spawn(move || {
                        // pacat -v rewrites one status line with '\r', so split on
                        // both line ends.
                        for chunk in BufReader::new(err).split(b'\r').map_while(Result::ok) {
                            for part in String::from_utf8_lossy(&chunk).split('\n') {
                                if let Some(us) = parse_pacat_latency(part) {
                                    lat.lock().expect("latency lock").push((Instant::now(), us));
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
            }
            std::thread::sleep(Duration::from_secs_f64(o.warmup_seconds));
            for (i, c) in clients.iter_mut().enumerate() {
                if let Some(st) = c.try_wait()? {
                    std::thread::sleep(Duration::from_millis(100));
                    let said = messages.lock().expect("messages lock").join(" | ");
                    bail!(
                        "pacat {i} of {n} exited early ({st}) against {}{}",
                        server.kind.name(),
                        if i == 0 && !said.is_empty() {
                            format!("; pacat 0 said: {said}")
                        } else {
                            String::new()
                        }
                    );
                }
            }
            let t0 = Instant::now();
            let mut s = run_with_progress(pb, *step, |_| sample_window(&pid, o.window_seconds))?;
            let lat: Vec<f64> = latency
                .lock()
                .expect("latency lock")
                .iter()
                .filter(|(t, _)| *t >= t0)
                .map(|(_, us)| *us)
                .collect();
            s.reported_latency_us = Summary::of(&lat).map(|s| s.p50);
            server.check_alive()?;
            Ok(s)
        })();
        for mut c in clients {
            stop_child(&mut c, Duration::from_secs(5));
        }
        *step += 1;
        pb.set_position(*step);
        r.load.entry(n).or_default().push(result?);
        std::thread::sleep(Duration::from_millis(500));
    }
    server.stop();
    Ok(())
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
        s.wakeups_per_s += d.voluntary as f64 / w;
        s.preemptions_per_s += d.nonvoluntary as f64 / w;
        s.rss_kb += mem.rss_kb;
        s.pss_kb += mem.pss_kb;
        s.threads += b.threads.len();
    }
    Ok(s)
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

/// Writes `seconds` of the load signal as raw float32le stereo.
fn write_raw(path: &std::path::Path, rate: u32, seconds: f64, rng: &mut Rng) -> Result<()> {
    let sig = load::Signal::new(rate, rng);
    let frames = (seconds * rate as f64) as usize;
    let mut buf = vec![0f32; frames * 2];
    let mut pos = 0;
    sig.fill(&mut pos, &mut buf);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for s in buf {
        f.write_all(&s.to_le_bytes())?;
    }
    f.flush()?;
    Ok(())
}

fn median(v: &[f64]) -> Option<f64> {
    Summary::of(v).map(|s| s.p50)
}

fn med_of(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = samples.iter().filter_map(f).collect();
    median(&v)
}

/// Tables, plots and the terminal summary.
pub fn render(r: &PeersResults) -> ModeOutput {
    let servers: Vec<&ServerResult> = r.servers.iter().collect();
    let mut headers: Vec<String> = vec!["streams".into(), "metric".into()];
    for s in &servers {
        headers.push(s.server.name().into());
    }
    for s in servers.iter().skip(1) {
        headers.push(format!("quaverd / {}", s.server.name()));
    }
    let mut t = Table {
        headers,
        rows: Vec::new(),
    };
    type Metric = (&'static str, fn(&Sample) -> Option<f64>, fn(f64) -> String);
    let metrics: [Metric; 4] = [
        ("CPU s/s", |s| Some(s.cpu_per_s), |v| format!("{v:.4}")),
        (
            "wakeups/s",
            |s| Some(s.wakeups_per_s),
            |v| format!("{v:.0}"),
        ),
        (
            "RSS MiB",
            |s| Some(s.rss_kb as f64 / 1024.0),
            |v| format!("{v:.1}"),
        ),
        (
            "reported latency ms",
            |s| s.reported_latency_us.map(|u| u / 1000.0),
            |v| format!("{v:.1}"),
        ),
    ];
    let mut rows_for = |label: String, pick: &dyn Fn(&ServerResult) -> Vec<Sample>| {
        for (name, f, fmt) in metrics.iter() {
            let vals: Vec<Option<f64>> = servers.iter().map(|s| med_of(&pick(s), f)).collect();
            if vals.iter().all(Option::is_none) {
                continue;
            }
            let mut row = vec![label.clone(), name.to_string()];
            row.extend(vals.iter().map(|v| v.map_or("–".into(), fmt)));
            for v in vals.iter().skip(1) {
                row.push(match (vals[0], v) {
                    (Some(a), Some(b)) if *b > 0.0 => format!("{:.2}", a / b),
                    _ => "–".into(),
                });
            }
            t.row(row);
        }
    };
    rows_for("idle".into(), &|s| s.idle.clone());
    for &n in &r.counts {
        rows_for(n.to_string(), &|s| {
            s.load.get(&n).cloned().unwrap_or_default()
        });
    }
    let mut plots = Vec::new();
    for (name, title, f) in [
        (
            "cpu",
            "CPU seconds per second",
            (|s: &Sample| Some(s.cpu_per_s)) as fn(&Sample) -> Option<f64>,
        ),
        (
            "wakeups",
            "voluntary context switches per second",
            |s: &Sample| Some(s.wakeups_per_s),
        ),
    ] {
        let series: Vec<Series> = servers
            .iter()
            .map(|s| {
                Series::new(
                    s.server.name(),
                    r.counts
                        .iter()
                        .filter_map(|n| {
                            med_of(s.load.get(n).map_or(&[][..], |v| v), f).map(|v| (*n as f64, v))
                        })
                        .collect(),
                )
            })
            .collect();
        plots.push((
            name.to_string(),
            line_plot(
                &format!("{title}, by number of pacat streams"),
                "playback streams (pacat, float32le 48 kHz stereo)",
                title,
                &series,
                true,
                true,
            ),
        ));
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Peers\n\nEvery server runs headless on a null sink at 48 kHz stereo and plays N \
         identical `pacat --latency-msec={}` clients (float32le 48 kHz stereo): the same \
         PulseAudio-protocol workload for each, so only the server differs. Medians over \
         {} run(s); CPU and context switches are the server process's (every thread; for \
         PipeWire the sum of pipewire, wireplumber and pipewire-pulse — the private D-Bus \
         daemon it needs here is not counted); \
         'reported latency' is what the server reports to the first client (`pacat -v`), \
         not a measured round trip. Idle: after quaverd's 3 s suspend timeout.\n",
        r.latency_ms, r.repeats
    );
    md.push_str(&t.markdown());
    md.push_str("\n{plot:cpu}\n\n{plot:wakeups}\n\n");
    for s in &r.servers {
        let _ = writeln!(md, "- {}: {}", s.server.name(), s.version);
        if let Some(e) = &s.error {
            let _ = writeln!(md, "  - not measured: {e}");
        } else {
            for f in &s.failures {
                let _ = writeln!(
                    md,
                    "  - failed part-way (fewer samples in the medians): {f}"
                );
            }
        }
    }
    for (name, why) in &r.skipped {
        let _ = writeln!(md, "- {name}: {why}");
    }
    ModeOutput {
        results: serde_json::to_value(r).unwrap_or_default(),
        markdown: md,
        plots,
        summary: t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn medians_over_repetitions() {
        let s = |c: f64| Sample {
            cpu_per_s: c,
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
