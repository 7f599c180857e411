//! `bigbuf`: big buffers without sluggishness (issue 6, acceptance item 2).
//!
//! Two parts:
//!
//! - **wakeups**: one `paplay` of a 48 kHz stereo WAV asking for a long latency
//!   (`--latency-msec=2000`, and the server's default), played by quaverd on the
//!   simulated card with a 2 s ring (`sim:buffer=96000,loopback=off`, where the engine
//!   fills ahead and wakes at the watermark) and by PulseAudio (alsa-lib's `null` PCM
//!   through module-alsa-sink if that works here, else module-null-sink). Per point a
//!   fresh server; over a window, the voluntary and involuntary context switches and
//!   CPU time of every thread of the server, from `/proc`. Repetitions alternate the
//!   servers; tables give medians and quaverd / PulseAudio.
//! - **events** (in-process): an engine over a [`SimCard`] on the real clock with a
//!   [`DacProbe`], a quiet music stream asking for 2 s with rewind history, and click
//!   streams started at seeded random moments while the card sleeps on a full ring:
//!   the time from adding the click's node to the card's virtual DAC playing it. The
//!   contrast run adds a second music stream without history, which blocks rewinds.

pub mod event;
pub mod options;
pub mod render;

pub use options::*;

use crate::Ctx;
use crate::modes::bigbuf::event::{EventPart, event_part};
use crate::modes::peers::PeerLatency;
use crate::tools::daemon::DaemonSpec;
use crate::tools::exec::{describe, run_bounded, stop_child, which};
use crate::tools::machine::{NOT_INSTALLED, tool_version};
use crate::tools::procfs::{self, ProcSample};
use crate::tools::rng::Rng;
use crate::tools::servers::{Server, ServerKind};
use crate::tools::signal::write_wav;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One thread name's share of a window (threads of the same name added up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadRate {
    /// `comm`.
    pub name: String,
    /// Threads of that name alive at both ends of the window.
    pub threads: usize,
    /// Voluntary context switches per second.
    pub voluntary_per_s: f64,
    /// Involuntary context switches per second.
    pub involuntary_per_s: f64,
    /// CPU seconds per second.
    pub cpu_per_s: f64,
}

/// What quaverd itself said around a window (`status` before and after it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuaverdState {
    /// The quantum at the end, frames.
    pub quantum: u32,
    /// The device's description (names its buffer and period).
    pub device: String,
    /// The device's state.
    pub device_state: String,
    /// Driver wakeups per second between the two `status` replies.
    pub device_wakeups_per_s: f64,
    /// Cycles per driver wakeup in that interval (> 1: filling ahead).
    pub cycles_per_wakeup: Option<f64>,
    /// Seconds between the two replies.
    pub interval_s: f64,
    /// xruns in that interval.
    pub xruns: u64,
    /// Device underruns in that interval.
    pub underruns: u64,
}

/// One window on one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeupSample {
    /// Repetition (from 1).
    pub run: usize,
    /// Window length, s.
    pub window_s: f64,
    /// Voluntary context switches per second, all threads.
    pub voluntary_per_s: f64,
    /// Involuntary context switches per second, all threads.
    pub involuntary_per_s: f64,
    /// CPU seconds per second (the process, every thread).
    pub cpu_per_s: f64,
    /// Per thread name.
    pub threads: Vec<ThreadRate>,
    /// Sink inputs `pactl list sink-inputs short` listed before the window.
    pub sink_inputs: usize,
    /// quaverd's own account (quaverd only).
    pub quaverd: Option<QuaverdState>,
}

/// One (server, latency) point: a sample per repetition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WakeupPoint {
    /// Which server.
    pub server: ServerKind,
    /// `2000` or `default`.
    pub latency: String,
    /// The samples.
    pub samples: Vec<WakeupSample>,
    /// Repetitions that failed, with the reason.
    pub failures: Vec<String>,
}

/// Which sink PulseAudio ran on, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaSink {
    /// The `-L` module line used.
    pub module: String,
    /// `alsa-null` or `null-sink`.
    pub kind: String,
    /// What happened with module-alsa-sink on alsa-lib's `null` PCM.
    pub alsa_null: String,
}

/// Everything a `bigbuf` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BigbufResults {
    /// Latency labels.
    pub latencies: Vec<String>,
    /// Window, s.
    pub window_seconds: f64,
    /// Settle, s.
    pub settle_seconds: f64,
    /// Repetitions.
    pub repeats: usize,
    /// Seconds of the WAV.
    pub file_seconds: f64,
    /// quaverd's `--device`.
    pub quaverd_device: String,
    /// PulseAudio's version (or `not installed`).
    pub pulseaudio_version: String,
    /// PulseAudio's sink, when it was measured.
    pub pulseaudio_sink: Option<PaSink>,
    /// Why PulseAudio was not measured, if it was not.
    pub pulseaudio_error: Option<String>,
    /// The points.
    pub points: Vec<WakeupPoint>,
    /// The event part (None: skipped).
    pub events: Option<EventPart>,
    /// Event part: clicks per run.
    pub events_per_run: usize,
}

/// Runs the mode.
pub fn run(ctx: &mut Ctx, o: &BigbufOptions) -> Result<BigbufResults> {
    let pa_version = tool_version("pulseaudio", &["--version"]);
    let mut pa_error = None;
    let mut pa_sink = None;
    let mut points = Vec::new();
    // The file outlasts the settle time, the window and a 2 s buffer, with room for
    // PulseAudio's start (its idle null sink holds a new stream back up to ~2 s).
    let file_seconds = o.settle_seconds + o.window_seconds + 10.0;
    let mut steps = 0u64;
    if o.wakeups {
        steps += (o.repeats * o.latencies.len() * 2) as u64 + 1;
    }
    if o.event_part {
        steps += 2 * o.events as u64;
    }
    let pb = ctx.progress.bar(steps, "bigbuf");
    let mut step = 0u64;
    let _dir;
    if o.wakeups {
        if which("paplay").is_none() {
            bail!("bigbuf needs paplay (Debian: pulseaudio-utils) as the client");
        }
        let dir = crate::tools::exec::tempdir("quaver-bench-bigbuf-")?;
        let wav = dir.path().join("music-s16-48000-2ch.wav");
        write_wav(&wav, RATE, file_seconds, &mut Rng::new(ctx.seed))?;
        _dir = dir;
        let mut kinds = vec![ServerKind::Quaverd];
        if pa_version == NOT_INSTALLED {
            pa_error = Some(NOT_INSTALLED.to_string());
        } else {
            pb.set_message("bigbuf: PulseAudio on alsa-lib's null PCM?");
            let sink = choose_pa_sink(ctx);
            pa_sink = Some(sink);
            kinds.push(ServerKind::Pulseaudio);
        }
        step += 1;
        pb.set_position(step);
        for &lat in &o.latencies {
            for &k in &kinds {
                points.push(WakeupPoint {
                    server: k,
                    latency: lat.label(),
                    samples: Vec::new(),
                    failures: Vec::new(),
                });
            }
        }
        ctx.record_command(
            "# per point: a fresh server, one paplay; after the settle time `pactl list \
             sink-inputs short` (the stream is there) and, for quaverd, `status` over its \
             native socket before and after the window",
        );
        for rep in 1..=o.repeats {
            for &lat in &o.latencies {
                for &k in &kinds {
                    pb.set_message(format!(
                        "bigbuf: {} at {} (run {rep} of {})",
                        k.name(),
                        lat.label(),
                        o.repeats
                    ));
                    let module = pa_sink.as_ref().map(|s| s.module.clone());
                    let r = measure_point(ctx, o, k, module.as_deref(), lat, &wav, rep);
                    let p = points
                        .iter_mut()
                        .find(|p| p.server == k && p.latency == lat.label())
                        .expect("point listed above");
                    match r {
                        Ok(s) => p.samples.push(s),
                        Err(e) => p.failures.push(format!("run {rep}: {e:#}")),
                    }
                    step += 1;
                    pb.set_position(step);
                }
            }
        }
        if !kinds.contains(&ServerKind::Pulseaudio) {
            step += (o.repeats * o.latencies.len()) as u64;
            pb.set_position(step);
        }
    }
    let events = if o.event_part {
        pb.set_message("bigbuf: event sounds");
        Some(event_part(ctx, o, &pb, &mut step))
    } else {
        None
    };
    pb.finish_and_clear();
    Ok(BigbufResults {
        latencies: o.latencies.iter().map(PeerLatency::label).collect(),
        window_seconds: o.window_seconds,
        settle_seconds: o.settle_seconds,
        repeats: o.repeats,
        file_seconds,
        quaverd_device: QUAVERD_DEVICE.into(),
        pulseaudio_version: pa_version,
        pulseaudio_sink: pa_sink,
        pulseaudio_error: pa_error,
        points,
        events,
        events_per_run: o.events,
    })
}

/// Tries PulseAudio on alsa-lib's `null` PCM: it must answer, survive [`ALSA_PROBE`]
/// and stay below [`ALSA_SPIN_CPU`]; otherwise the null sink is used, and why is kept.
fn choose_pa_sink(ctx: &mut Ctx) -> PaSink {
    ctx.record_command(format!(
        "# trying PulseAudio on alsa-lib's null PCM ({PA_ALSA_NULL_SINK}) for {} s:",
        ALSA_PROBE.as_secs()
    ));
    let outcome = (|| -> Result<std::result::Result<(), String>> {
        let mut s = match Server::pulseaudio_with_sink(ctx, PA_ALSA_NULL_SINK) {
            Ok(s) => s,
            Err(e) => return Ok(Err(start_failure(&e))),
        };
        let pid = s.pid();
        let a = procfs::sample(pid);
        std::thread::sleep(ALSA_PROBE);
        let b = procfs::sample(pid);
        let log = s.log_text().unwrap_or_default();
        let hint = log_hints(&log);
        if let Some(st) = s.exit_status() {
            return Ok(Err(format!(
                "loaded, but pulseaudio ended ({st}) within {} s — its sink thread spins \
                 on the null PCM, which never blocks, and a real-time thread that does not \
                 block is killed at RLIMIT_RTTIME{hint}",
                ALSA_PROBE.as_secs()
            )));
        }
        let (a, b) = (a?, b?);
        let d = procfs::ProcDelta::between(&a, &b, procfs::clock_ticks_per_second());
        let cpu = d.cpu_s / d.wall_s.max(1e-9);
        s.stop();
        if cpu > ALSA_SPIN_CPU {
            return Ok(Err(format!(
                "loaded, but pulseaudio used {cpu:.2} CPU s/s idle (its sink thread spins \
                 on the null PCM){hint}"
            )));
        }
        Ok(Ok(()))
    })();
    match outcome {
        Ok(Ok(())) => PaSink {
            module: PA_ALSA_NULL_SINK.into(),
            kind: "alsa-null".into(),
            alsa_null: "used: it ran idle without spinning".into(),
        },
        Ok(Err(why)) => {
            ctx.note(format!(
                "PulseAudio runs on module-null-sink: module-alsa-sink on alsa-lib's null \
                 PCM {why}"
            ));
            PaSink {
                module: Server::PULSEAUDIO_NULL_SINK.into(),
                kind: "null-sink".into(),
                alsa_null: why,
            }
        }
        Err(e) => PaSink {
            module: Server::PULSEAUDIO_NULL_SINK.into(),
            kind: "null-sink".into(),
            alsa_null: format!("could not be tried: {e:#}"),
        },
    }
}

/// The lines of PulseAudio's log that explain how its ALSA sink drives the null PCM,
/// as `; its log: "…"` (empty if none).
fn log_hints(log: &str) -> String {
    let hints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("timer-based scheduling") || l.contains("rewind"))
        .map(str::trim)
        .collect();
    if hints.is_empty() {
        String::new()
    } else {
        format!("; its log: \"{}\"", hints.join("\" \""))
    }
}

/// Why PulseAudio on the null PCM did not come up: the innermost error (the start
/// helper wraps it in the whole log) and the log's telling lines.
fn start_failure(e: &anyhow::Error) -> String {
    format!(
        "did not come up ({}){}",
        e.root_cause(),
        log_hints(&format!("{e:#}"))
    )
}

/// A fresh server, one paplay, settle, one window.
fn measure_point(
    ctx: &mut Ctx,
    o: &BigbufOptions,
    kind: ServerKind,
    pa_module: Option<&str>,
    lat: PeerLatency,
    wav: &std::path::Path,
    run: usize,
) -> Result<WakeupSample> {
    let mut server = match kind {
        ServerKind::Quaverd => Server::quaverd_with(
            ctx,
            DaemonSpec {
                devices: vec![QUAVERD_DEVICE.into()],
                rate: Some(RATE),
                ..DaemonSpec::default()
            },
        )?,
        ServerKind::Pulseaudio => {
            Server::pulseaudio_with_sink(ctx, pa_module.unwrap_or(Server::PULSEAUDIO_NULL_SINK))?
        }
        ServerKind::Pipewire => bail!("bigbuf compares quaverd with PulseAudio only"),
    };
    let mut c = Command::new("paplay");
    server.client_env(&mut c);
    if let PeerLatency::Ms(ms) = lat {
        c.arg(format!("--latency-msec={ms}"));
    }
    // No -v: paplay -v asks the server for timing every 50 ms, which would be most of
    // the wakeups measured here.
    c.args(["--stream-name=bigbuf", "--client-name=quaver-bench"])
        .arg(wav);
    ctx.record_command(format!("{} &", describe(&c)));
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting paplay")?;
    let mut player = Player(child);
    let result = (|| -> Result<WakeupSample> {
        std::thread::sleep(Duration::from_secs_f64(o.settle_seconds));
        player.check()?;
        let sink_inputs = count_sink_inputs(&server)?;
        if sink_inputs == 0 {
            bail!("paplay's stream is not among the server's sink inputs");
        }
        let st0 = quaverd_status(&server, kind)?;
        // Let the control connections' threads finish before the window.
        std::thread::sleep(Duration::from_millis(500));
        let pid = server.pid();
        let a = procfs::sample(pid)?;
        std::thread::sleep(Duration::from_secs_f64(o.window_seconds));
        let b = procfs::sample(pid)?;
        let st1 = quaverd_status(&server, kind)?;
        player.check()?;
        server.check_alive()?;
        let mut s = window_rates(&a, &b, run);
        s.sink_inputs = sink_inputs;
        if let (Some(s0), Some(s1)) = (st0, st1) {
            s.quaverd = Some(quaverd_state(&s0, &s1));
        }
        Ok(s)
    })();
    player.stop();
    server.stop();
    result
}

/// The paplay client, stopped by PID when dropped.
struct Player(Child);

impl Player {
    fn check(&mut self) -> Result<()> {
        if let Some(st) = self.0.try_wait()? {
            let mut msg = String::new();
            if let Some(mut e) = self.0.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut msg);
            }
            bail!("paplay exited early ({st}): {}", msg.trim());
        }
        Ok(())
    }

    fn stop(&mut self) {
        stop_child(&mut self.0, Duration::from_secs(5));
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        self.stop();
    }
}

fn count_sink_inputs(server: &Server) -> Result<usize> {
    let mut c = Command::new("pactl");
    server.client_env(&mut c);
    c.args(["list", "sink-inputs", "short"]);
    let out = run_bounded(&mut c, Duration::from_secs(5))?;
    if !out.success() {
        bail!("pactl list sink-inputs failed: {}", out.stderr.trim());
    }
    Ok(out.stdout.lines().filter(|l| !l.trim().is_empty()).count())
}

/// quaverd's `status` and when it was taken (None for other servers).
fn quaverd_status(
    server: &Server,
    kind: ServerKind,
) -> Result<Option<(Instant, quaver_protocol::message::StatusInfo)>> {
    if kind != ServerKind::Quaverd {
        return Ok(None);
    }
    let socket = server.runtime_dir().join("quaver").join("native");
    let mut c = quaver_client::Connection::connect(Some(&socket), "quaver-bench-bigbuf")
        .with_context(|| format!("connecting to quaverd at {}", socket.display()))?;
    let st = c.status()?;
    Ok(Some((Instant::now(), st)))
}

fn quaverd_state(
    s0: &(Instant, quaver_protocol::message::StatusInfo),
    s1: &(Instant, quaver_protocol::message::StatusInfo),
) -> QuaverdState {
    let dt = s1.0.duration_since(s0.0).as_secs_f64().max(1e-9);
    let (a, b) = (&s0.1, &s1.1);
    let da = a.devices.first();
    let db = b.devices.first();
    let wakeups = match (da, db) {
        (Some(x), Some(y)) => y.wakeups.saturating_sub(x.wakeups),
        _ => 0,
    };
    let cycles = b.cycles.saturating_sub(a.cycles);
    QuaverdState {
        quantum: b.quantum,
        device: db.map_or(String::new(), |d| d.description.clone()),
        device_state: db.map_or(String::new(), |d| d.state.clone()),
        device_wakeups_per_s: wakeups as f64 / dt,
        cycles_per_wakeup: (wakeups > 0).then(|| cycles as f64 / wakeups as f64),
        interval_s: dt,
        xruns: b.xruns.saturating_sub(a.xruns),
        underruns: match (da, db) {
            (Some(x), Some(y)) => y.underruns.saturating_sub(x.underruns),
            _ => 0,
        },
    }
}

/// Rates between two samples of one process, in total and per thread name.
pub fn window_rates(a: &ProcSample, b: &ProcSample, run: usize) -> WakeupSample {
    let tps = procfs::clock_ticks_per_second() as f64;
    let wall = (b.at_ns.saturating_sub(a.at_ns) as f64 / 1e9).max(1e-9);
    let mut by_name: BTreeMap<String, (usize, u64, u64, u64)> = BTreeMap::new();
    for t in &b.threads {
        if let Some(e) = a.threads.iter().find(|e| e.tid == t.tid) {
            let r = by_name.entry(t.name.clone()).or_default();
            r.0 += 1;
            r.1 += t.ctx.voluntary.saturating_sub(e.ctx.voluntary);
            r.2 += t.ctx.nonvoluntary.saturating_sub(e.ctx.nonvoluntary);
            r.3 += t.cpu_ticks.saturating_sub(e.cpu_ticks);
        }
    }
    let threads: Vec<ThreadRate> = by_name
        .into_iter()
        .map(|(name, (n, v, i, c))| ThreadRate {
            name,
            threads: n,
            voluntary_per_s: v as f64 / wall,
            involuntary_per_s: i as f64 / wall,
            cpu_per_s: c as f64 / tps / wall,
        })
        .collect();
    WakeupSample {
        run,
        window_s: wall,
        voluntary_per_s: threads.iter().map(|t| t.voluntary_per_s).sum(),
        involuntary_per_s: threads.iter().map(|t| t.involuntary_per_s).sum(),
        cpu_per_s: b.cpu_ticks.saturating_sub(a.cpu_ticks) as f64 / tps / wall,
        threads,
        sink_inputs: 0,
        quaverd: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::bigbuf::render::{render, wakeups_verdict};
    use crate::tools::procfs::{CtxSwitches, ThreadSample};
    use anyhow::anyhow;

    fn th(tid: u32, name: &str, v: u64, i: u64, c: u64) -> ThreadSample {
        ThreadSample {
            tid,
            name: name.into(),
            cpu_ticks: c,
            run_ns: None,
            ctx: CtxSwitches {
                voluntary: v,
                nonvoluntary: i,
            },
        }
    }

    #[test]
    fn rates_per_thread_name_over_threads_alive_at_both_ends() {
        let a = ProcSample {
            at_ns: 0,
            cpu_ticks: 10,
            threads: vec![
                th(1, "main", 5, 1, 4),
                th(2, "io", 10, 0, 3),
                th(3, "gone", 1, 1, 1),
            ],
        };
        let b = ProcSample {
            at_ns: 2_000_000_000,
            cpu_ticks: 10 + procfs::clock_ticks_per_second(),
            threads: vec![
                th(1, "main", 9, 1, 4),
                th(2, "io", 20, 2, 3),
                th(4, "io", 100, 0, 0),
            ],
        };
        let s = window_rates(&a, &b, 1);
        assert_eq!(s.window_s, 2.0);
        assert_eq!(s.voluntary_per_s, (4.0 + 10.0) / 2.0);
        assert_eq!(s.involuntary_per_s, 1.0);
        assert!((s.cpu_per_s - 0.5).abs() < 1e-9);
        let io = s.threads.iter().find(|t| t.name == "io").unwrap();
        assert_eq!((io.threads, io.voluntary_per_s), (1, 5.0));
        assert!(s.threads.iter().all(|t| t.name != "gone"));
    }

    #[test]
    fn a_failed_start_names_the_cause_not_the_first_log_line() {
        let log = "W: [pulseaudio] main.c: This program is not intended to be run as root\n\
                   N: [pulseaudio] alsa-util.c: Disabling timer-based scheduling because \
                   running inside a VM.\nI: [pulseaudio] main.c: Daemon startup complete.";
        let e = anyhow!("pulseaudio did not answer `pactl info` within 15s").context(log);
        let why = start_failure(&e);
        assert!(
            why.starts_with("did not come up (pulseaudio did not answer `pactl info`"),
            "{why}"
        );
        assert!(why.contains("Disabling timer-based scheduling"), "{why}");
        assert!(!why.contains("not intended to be run as root"), "{why}");
    }

    #[test]
    fn verdicts_need_both_servers() {
        let sample = |v: f64| WakeupSample {
            run: 1,
            window_s: 1.0,
            voluntary_per_s: v,
            involuntary_per_s: 0.0,
            cpu_per_s: 0.0,
            threads: Vec::new(),
            sink_inputs: 1,
            quaverd: None,
        };
        let pt = |k, v: &[f64]| WakeupPoint {
            server: k,
            latency: "2000".into(),
            samples: v.iter().map(|&v| sample(v)).collect(),
            failures: Vec::new(),
        };
        let mut r = BigbufResults {
            latencies: vec!["2000".into()],
            window_seconds: 1.0,
            settle_seconds: 1.0,
            repeats: 3,
            file_seconds: 12.0,
            quaverd_device: QUAVERD_DEVICE.into(),
            pulseaudio_version: NOT_INSTALLED.into(),
            pulseaudio_sink: None,
            pulseaudio_error: Some(NOT_INSTALLED.into()),
            points: vec![pt(ServerKind::Quaverd, &[5.0, 4.0, 9.0])],
            events: None,
            events_per_run: 0,
        };
        assert_eq!(wakeups_verdict(&r, "2000"), "not measured");
        let out = render(&r);
        assert!(out.summary.text().contains("not installed"));
        r.points.push(pt(ServerKind::Pulseaudio, &[6.0, 7.0, 3.0]));
        assert_eq!(wakeups_verdict(&r, "2000"), "yes", "median 5 vs 6");
        r.points[1].samples[1].voluntary_per_s = 4.5;
        assert_eq!(wakeups_verdict(&r, "2000"), "no", "median 5 vs 4.5");
    }
}
