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

use crate::clock::monotonic_ns;
use crate::daemon::DaemonSpec;
use crate::exec::{describe, run_bounded, stop_child, which};
use crate::machine::{NOT_INSTALLED, tool_version};
use crate::peers::{PeerLatency, write_wav};
use crate::procfs::{self, ProcSample};
use crate::report::{ModeOutput, Table};
use crate::rng::Rng;
use crate::servers::{Server, ServerKind};
use crate::stats::Summary;
use crate::svg::{Series, bar_chart, line_plot};
use crate::{Ctx, rt};
use anyhow::{Context, Result, anyhow, bail};
use quaver_devices::{DacProbe, SimCard, SimConfig};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::stream::{FrameSource, PlaybackAdapter, StreamFormat};
use quaver_engine::{Engine, EngineConfig, NodeId, NodeKind, NodeSpec, RtOutcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The device rate everywhere in this mode.
pub const RATE: u32 = 48_000;
/// The sim card's ring: 2 s, the "2 s maximum buffer".
pub const BUFFER_FRAMES: usize = 96_000;
/// The sim card's watermark.
pub const PERIOD_FRAMES: usize = 256;
/// quaverd's device in the wakeups part.
pub const QUAVERD_DEVICE: &str = "sim:buffer=96000,loopback=off";
/// PulseAudio's first choice: alsa-lib's `null` PCM through the ALSA sink module.
pub const PA_ALSA_NULL_SINK: &str =
    "module-alsa-sink device=null sink_name=null rate=48000 channels=2";
/// The acceptance bound on an event sound's latency, ms.
pub const EVENT_BOUND_MS: f64 = 30.0;
/// The DAC probe's threshold: above the music (0.1, two streams 0.2), below a click.
const PROBE_THRESHOLD: f32 = 0.5;
/// The quiet music's amplitude.
const MUSIC_AMPLITUDE: f32 = 0.1;
/// The click's one loud sample.
const CLICK_AMPLITUDE: f32 = 0.9;
/// A click is one loud frame then 100 ms of silence.
const CLICK_FRAMES: usize = 4800;
/// Longest wait for the card to fill, refill, or play a click; the ring holds 2 s and
/// the probe learns what was played at the driver's next pointer read (≤ 2 s later).
const EVENT_WAIT: Duration = Duration::from_secs(8);
/// A refill is over when the card's counters have not moved for this long.
const STILL: Duration = Duration::from_millis(30);
/// How long PulseAudio on alsa-lib's `null` PCM must survive, and at what CPU cost, to
/// be used: the null PCM never blocks, so a sink thread without timer scheduling spins.
const ALSA_PROBE: Duration = Duration::from_secs(3);
/// CPU seconds per second above which the alsa-null PulseAudio counts as spinning.
const ALSA_SPIN_CPU: f64 = 0.5;

/// Settings of a `bigbuf` run.
#[derive(Debug, Clone)]
pub struct BigbufOptions {
    /// The paplay client's latency requests.
    pub latencies: Vec<PeerLatency>,
    /// Measurement window, s.
    pub window_seconds: f64,
    /// From starting paplay to the window, s.
    pub settle_seconds: f64,
    /// Repetitions (servers alternate within each).
    pub repeats: usize,
    /// Click events per event run.
    pub events: usize,
    /// Run the wakeups part.
    pub wakeups: bool,
    /// Run the event-latency part.
    pub event_part: bool,
}

impl BigbufOptions {
    /// Defaults: 2000 ms and the default latency, 30 s windows after 5 s, 3 repetitions,
    /// 20 events (quick: 3 s windows after 3 s, once, 3 events).
    pub fn new(quick: bool) -> BigbufOptions {
        BigbufOptions {
            latencies: vec![PeerLatency::Ms(2000), PeerLatency::Default],
            window_seconds: if quick { 3.0 } else { 30.0 },
            settle_seconds: if quick { 3.0 } else { 5.0 },
            repeats: if quick { 1 } else { 3 },
            events: if quick { 3 } else { 20 },
            wakeups: true,
            event_part: true,
        }
    }
}

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

/// One event run (rewinds possible, or blocked).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventRun {
    /// `rewind` or `rewind blocked`.
    pub label: String,
    /// Whether every stream keeps rewind history.
    pub rewindable: bool,
    /// Per event: click added → played, ms (`None`: not heard within the bound).
    pub latencies_ms: Vec<Option<f64>>,
    /// Per event: the audio queued on the card when the click was added, ms (estimate
    /// from the last refill).
    pub queued_ms: Vec<f64>,
    /// Per event: whether no driver wakeup came between the refill and the click.
    pub mid_sleep: Vec<bool>,
    /// Per event: how long `add_node_linked` took, µs.
    pub add_us: Vec<f64>,
    /// Summary of the heard events, ms.
    pub summary: Option<Summary>,
    /// Rewinds the card counted during the events.
    pub rewinds: u64,
    /// Frames they took back.
    pub rewound_frames: u64,
    /// Driver wakeups during the events.
    pub wakeups: u64,
    /// Underruns during the events.
    pub underruns: u64,
    /// Seconds the events took.
    pub seconds: f64,
    /// The engine's quantum with the music playing.
    pub quantum: usize,
}

/// The event-latency part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventPart {
    /// The engine's RT thread scheduling (`SCHED_FIFO 20`, `normal (refused: …)`).
    pub realtime: String,
    /// Whether it ran SCHED_FIFO.
    pub fifo: bool,
    /// The card.
    pub card: String,
    /// The runs.
    pub runs: Vec<EventRun>,
    /// Failures (a run that could not complete).
    pub failures: Vec<String>,
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
        let dir = crate::exec::tempdir("quaver-bench-bigbuf-")?;
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

// ---------------------------------------------------------------------------------
// Event latency, in-process.

/// Quiet endless music: a sine far below the probe's threshold.
struct Music {
    phase: f32,
    step: f32,
}

impl FrameSource for Music {
    fn available(&self) -> usize {
        1 << 24
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        for f in out.chunks_exact_mut(2) {
            let v = MUSIC_AMPLITUDE * self.phase.sin();
            f[0] = v;
            f[1] = v;
            self.phase += self.step;
            if self.phase > std::f32::consts::TAU {
                self.phase -= std::f32::consts::TAU;
            }
        }
        out.len() / 2
    }
    fn draining(&self) -> bool {
        false
    }
    fn report(&mut self, _played: u64, _delay: u32, _xruns: u32, _started: bool) {}
}

/// An event sound: one loud frame, then silence, then done.
struct Click {
    left: usize,
    first: bool,
}

impl FrameSource for Click {
    fn available(&self) -> usize {
        self.left
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        let n = (out.len() / 2).min(self.left);
        out[..n * 2].fill(0.0);
        if self.first && n > 0 {
            out[0] = CLICK_AMPLITUDE;
            out[1] = CLICK_AMPLITUDE;
            self.first = false;
        }
        self.left -= n;
        n
    }
    fn draining(&self) -> bool {
        true
    }
    fn report(&mut self, _played: u64, _delay: u32, _xruns: u32, _started: bool) {}
}

/// Stops the engine on every path.
struct EngineGuard(Engine);

impl Drop for EngineGuard {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

fn stream_adapter<S: FrameSource + 'static>(
    engine: &Engine,
    src: S,
    rewind: bool,
) -> Result<Box<PlaybackAdapter<S>>> {
    let fmt = StreamFormat {
        rate: RATE,
        channels: ChannelMap::stereo(),
    };
    let a = PlaybackAdapter::new(
        src,
        &fmt,
        &ChannelMap::stereo(),
        RATE,
        engine.config().quantum_max,
        0,
        ResampleQuality::Medium,
    )
    .map_err(|e| anyhow!("stream adapter: {e}"))?;
    Ok(Box::new(if rewind {
        a.with_rewind(engine.rewind_capacity(), 2)
    } else {
        a
    }))
}

fn music_node(engine: &Engine, name: &str, rewind: bool, freq: f32) -> Result<NodeId> {
    let mut spec = NodeSpec::new(name, NodeKind::PlaybackStream);
    spec.outputs = ChannelMap::stereo();
    spec.latency_frames = Some(BUFFER_FRAMES as u32);
    let m = stream_adapter(
        engine,
        Music {
            phase: 0.0,
            step: std::f32::consts::TAU * freq / RATE as f32,
        },
        rewind,
    )?;
    engine
        .add_node_linked(spec, Some(m), Some("sim-sink"))
        .map_err(|e| anyhow!("adding {name}: {e}"))
}

fn event_part(
    ctx: &mut Ctx,
    o: &BigbufOptions,
    pb: &indicatif::ProgressBar,
    step: &mut u64,
) -> EventPart {
    let priority = match ctx.realtime_priority {
        Some(p) => p.max(0),
        None => rt::QUAVERD_DEFAULT_PRIORITY,
    };
    let card = format!(
        "a SimCard at {RATE} Hz, buffer {BUFFER_FRAMES}, period {PERIOD_FRAMES}, loopback \
         off, with a DacProbe at threshold {PROBE_THRESHOLD}"
    );
    ctx.record_command(format!(
        "# event latency, in-process: Engine::start(EngineConfig {{ rt_priority: {priority}, \
         suspend_timeout: None, .. }}) over {card}; music: PlaybackAdapter 48 kHz stereo, \
         latency_frames {BUFFER_FRAMES}, with_rewind(engine.rewind_capacity(), 2); \
         {} clicks per run (one {CLICK_AMPLITUDE} frame + {CLICK_FRAMES} silent frames, \
         with_rewind) at seeded moments mid-sleep; contrast run: a second music stream \
         without with_rewind",
        o.events
    ));
    let mut part = EventPart {
        realtime: String::new(),
        fifo: false,
        card,
        runs: Vec::new(),
        failures: Vec::new(),
    };
    let mut rng = Rng::new(ctx.seed ^ 0x6269_6762_7566);
    for rewindable in [true, false] {
        let label = if rewindable {
            "rewind"
        } else {
            "rewind blocked"
        };
        let base = *step;
        let r = crate::progress::run_with_progress(pb, base, |done| {
            event_run(o, priority, rewindable, rng.fork(), done)
        });
        *step = base + o.events as u64;
        pb.set_position(*step);
        match r {
            Ok((run, outcome)) => {
                if part.realtime.is_empty() {
                    (part.realtime, part.fifo) = match &outcome {
                        RtOutcome::Disabled => ("normal (disabled: priority 0)".into(), false),
                        RtOutcome::Refused(why) => (format!("normal (refused: {why})"), false),
                        o => (o.to_string(), o.is_realtime()),
                    };
                }
                part.runs.push(run);
            }
            Err(e) => part.failures.push(format!("{label}: {e:#}")),
        }
    }
    if !part.fifo && !part.realtime.is_empty() {
        ctx.note(format!(
            "event part: the engine's real-time thread ran with {}",
            part.realtime
        ));
    }
    part
}

/// Polls `f` every millisecond until it holds or `limit` passes.
fn wait_for(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > limit {
            bail!("{what}: not within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn event_run(
    o: &BigbufOptions,
    priority: i32,
    rewindable: bool,
    mut rng: Rng,
    done: &std::sync::atomic::AtomicU64,
) -> Result<(EventRun, RtOutcome)> {
    let probe = DacProbe::new(PROBE_THRESHOLD);
    let card = SimCard::new(SimConfig {
        rate: RATE,
        buffer_frames: BUFFER_FRAMES,
        period_frames: PERIOD_FRAMES,
        loopback: false,
        ..SimConfig::default()
    })
    .map_err(|e| anyhow!("sim card: {e}"))?
    .with_dac_probe(probe.clone());
    let cfg = EngineConfig {
        rt_priority: priority,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let g =
        EngineGuard(Engine::start(cfg, vec![Box::new(card)]).map_err(|e| anyhow!("engine: {e}"))?);
    let engine = &g.0;
    let outcome = engine.status().realtime;
    let fill = engine.rewind_capacity();
    if fill == 0 {
        bail!("the engine does not fill ahead on this card (rewind capacity 0)");
    }
    music_node(engine, "music", true, 220.0)?;
    if !rewindable {
        music_node(engine, "music-no-history", false, 330.0)?;
    }
    let dev = &engine.stats().devices[0];
    let delay = || dev.playback_delay.load(Ordering::Relaxed) as usize;
    let q = || engine.quantum();
    wait_for(EVENT_WAIT, "the card filling", || delay() + q() > fill)?;
    let rewinds0 = dev.rewinds.load(Ordering::Relaxed);
    let rewound0 = dev.rewound_frames.load(Ordering::Relaxed);
    let wakeups0 = dev.wakeups.load(Ordering::Relaxed);
    let underruns0 = dev.underruns.load(Ordering::Relaxed);
    let t_start = Instant::now();
    let refill_ns = (fill - q() - PERIOD_FRAMES) as f64 / RATE as f64 * 1e9;
    let mut run = EventRun {
        label: if rewindable {
            "rewind".into()
        } else {
            "rewind blocked".into()
        },
        rewindable,
        latencies_ms: Vec::new(),
        queued_ms: Vec::new(),
        mid_sleep: Vec::new(),
        add_us: Vec::new(),
        summary: None,
        rewinds: 0,
        rewound_frames: 0,
        wakeups: 0,
        underruns: 0,
        seconds: 0.0,
        quantum: q(),
    };
    for i in 0..o.events {
        // A fresh refill: a driver wakeup, then the card full and its counters still.
        let w = dev.wakeups.load(Ordering::Relaxed);
        wait_for(EVENT_WAIT, "a driver wakeup", || {
            dev.wakeups.load(Ordering::Relaxed) > w
        })?;
        let mut last = (u64::MAX, u64::MAX);
        let mut since = Instant::now();
        wait_for(EVENT_WAIT, "the refill", || {
            let now = (
                dev.wakeups.load(Ordering::Relaxed),
                dev.frames_written.load(Ordering::Relaxed),
            );
            if now != last {
                last = now;
                since = Instant::now();
            }
            delay() + q() > fill && since.elapsed() >= STILL
        })?;
        let refilled_at = monotonic_ns() - STILL.as_nanos() as u64;
        let queued_at_refill = delay();
        // Mid-sleep: 5 %–75 % into the ~1.8 s the driver sleeps after a refill.
        let wait_ns = refill_ns * (0.05 + 0.70 * rng.unit());
        let target = refilled_at + wait_ns as u64;
        let now = monotonic_ns();
        if target > now {
            std::thread::sleep(Duration::from_nanos(target - now));
        }
        let mid = dev.wakeups.load(Ordering::Relaxed) == last.0;
        probe.reset();
        let mut spec = NodeSpec::new(&format!("click-{i}"), NodeKind::PlaybackStream);
        spec.outputs = ChannelMap::stereo();
        let click = stream_adapter(
            engine,
            Click {
                left: CLICK_FRAMES,
                first: true,
            },
            true,
        )?;
        let t0 = monotonic_ns();
        let id = engine
            .add_node_linked(spec, Some(click), Some("sim-sink"))
            .map_err(|e| anyhow!("adding a click: {e}"))?;
        let t1 = monotonic_ns();
        let queued_ns =
            (queued_at_refill as f64 / RATE as f64 * 1e9 - (t0 - refilled_at) as f64).max(0.0);
        let heard = wait_for(EVENT_WAIT, "the click played", || {
            probe.first_played_ns().is_some()
        });
        run.latencies_ms.push(match heard {
            Ok(()) => probe
                .first_played_ns()
                .map(|t| t.saturating_sub(t0) as f64 / 1e6),
            Err(_) => None,
        });
        run.queued_ms.push(queued_ns / 1e6);
        run.mid_sleep.push(mid);
        run.add_us.push((t1 - t0) as f64 / 1e3);
        engine
            .remove_node(id)
            .map_err(|e| anyhow!("removing a click: {e}"))?;
        done.fetch_add(1, Ordering::Relaxed);
    }
    run.rewinds = dev.rewinds.load(Ordering::Relaxed) - rewinds0;
    run.rewound_frames = dev.rewound_frames.load(Ordering::Relaxed) - rewound0;
    run.wakeups = dev.wakeups.load(Ordering::Relaxed) - wakeups0;
    run.underruns = dev.underruns.load(Ordering::Relaxed) - underruns0;
    run.seconds = t_start.elapsed().as_secs_f64();
    let heard: Vec<f64> = run.latencies_ms.iter().flatten().copied().collect();
    run.summary = Summary::of(&heard);
    drop(g);
    Ok((run, outcome))
}

// ---------------------------------------------------------------------------------
// Report.

fn median(v: &[f64]) -> Option<f64> {
    Summary::of(v).map(|s| s.p50)
}

impl WakeupPoint {
    fn med(&self, f: impl Fn(&WakeupSample) -> f64) -> Option<f64> {
        median(&self.samples.iter().map(f).collect::<Vec<_>>())
    }
}

fn point<'a>(r: &'a BigbufResults, k: ServerKind, lat: &str) -> Option<&'a WakeupPoint> {
    r.points.iter().find(|p| p.server == k && p.latency == lat)
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// The PulseAudio column's cell when it has no number.
fn pa_missing(r: &BigbufResults, p: Option<&WakeupPoint>) -> String {
    if let Some(e) = &r.pulseaudio_error {
        return e.clone();
    }
    match p {
        Some(p) if !p.failures.is_empty() => "failed".into(),
        _ => "–".into(),
    }
}

/// Verdict of the wakeups acceptance item at `lat`.
pub fn wakeups_verdict(r: &BigbufResults, lat: &str) -> String {
    let q = point(r, ServerKind::Quaverd, lat).and_then(|p| p.med(|s| s.voluntary_per_s));
    let pa = point(r, ServerKind::Pulseaudio, lat).and_then(|p| p.med(|s| s.voluntary_per_s));
    match (q, pa) {
        (Some(q), Some(pa)) if q <= pa => "yes".into(),
        (Some(_), Some(_)) => "no".into(),
        _ => "not measured".into(),
    }
}

/// Tables, plots and the terminal summary.
pub fn render(r: &BigbufResults) -> ModeOutput {
    let mut t = Table::new(&[
        "latency",
        "metric",
        "quaverd",
        "pulseaudio",
        "quaverd / pulseaudio",
    ]);
    type Metric = (&'static str, fn(&WakeupSample) -> f64, usize);
    let metrics: [Metric; 4] = [
        ("wakeups/s (voluntary)", |s| s.voluntary_per_s, 2),
        ("preemptions/s (involuntary)", |s| s.involuntary_per_s, 2),
        (
            "all switches/s",
            |s| s.voluntary_per_s + s.involuntary_per_s,
            2,
        ),
        ("CPU %", |s| s.cpu_per_s * 100.0, 3),
    ];
    for lat in &r.latencies {
        let qp = point(r, ServerKind::Quaverd, lat);
        let pp = point(r, ServerKind::Pulseaudio, lat);
        for (name, f, d) in metrics.iter() {
            let q = qp.and_then(|p| p.med(f));
            let pa = pp.and_then(|p| p.med(f));
            t.row(vec![
                lat.clone(),
                name.to_string(),
                q.map_or_else(
                    || {
                        if qp.is_some_and(|p| !p.failures.is_empty()) {
                            "failed".into()
                        } else {
                            "–".into()
                        }
                    },
                    |v| format!("{v:.d$}"),
                ),
                pa.map_or_else(|| pa_missing(r, pp), |v| format!("{v:.d$}")),
                match (q, pa) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                    _ => "–".into(),
                },
            ]);
        }
        let qs = qp.map(|p| {
            p.samples
                .iter()
                .filter_map(|s| s.quaverd.as_ref())
                .collect::<Vec<_>>()
        });
        if let Some(qs) = qs.filter(|v| !v.is_empty()) {
            let dw = median(
                &qs.iter()
                    .map(|s| s.device_wakeups_per_s)
                    .collect::<Vec<_>>(),
            );
            let cw = median(
                &qs.iter()
                    .filter_map(|s| s.cycles_per_wakeup)
                    .collect::<Vec<_>>(),
            );
            t.row(vec![
                lat.clone(),
                "quaverd: quantum, device wakeups/s, cycles/wakeup".into(),
                format!(
                    "{}, {}, {}",
                    qs.last().map_or(0, |s| s.quantum),
                    fmt(dw, 2),
                    fmt(cw, 1)
                ),
                String::new(),
                String::new(),
            ]);
        }
        t.row(vec![
            lat.clone(),
            "quaverd ≤ pulseaudio (wakeups)".into(),
            wakeups_verdict(r, lat),
            String::new(),
            String::new(),
        ]);
    }
    // Event latency.
    let mut e = Table::new(&[
        "event run",
        "heard",
        "p50 ms",
        "p99 ms",
        "max ms",
        "queued at event ms (median)",
        "rewinds",
        "underruns",
        "≤ 30 ms",
    ]);
    if let Some(ev) = &r.events {
        for run in &ev.runs {
            let heard = run.latencies_ms.iter().flatten().count();
            let s = run.summary;
            e.row(vec![
                run.label.clone(),
                format!("{heard}/{}", run.latencies_ms.len()),
                fmt(s.map(|s| s.p50), 1),
                fmt(s.map(|s| s.p99), 1),
                fmt(s.map(|s| s.max), 1),
                fmt(median(&run.queued_ms), 0),
                run.rewinds.to_string(),
                run.underruns.to_string(),
                match s {
                    Some(s) if heard == run.latencies_ms.len() && s.max <= EVENT_BOUND_MS => {
                        "yes".into()
                    }
                    Some(_) => "no".into(),
                    None => "–".into(),
                },
            ]);
        }
        for f in &ev.failures {
            e.row(vec![
                format!("failed: {f}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
    }
    // Plots.
    let mut plots = Vec::new();
    if !r.points.is_empty() {
        let mut series = Vec::new();
        for k in [ServerKind::Quaverd, ServerKind::Pulseaudio] {
            let v: Vec<f64> = r
                .latencies
                .iter()
                .map(|l| {
                    point(r, k, l)
                        .and_then(|p| p.med(|s| s.voluntary_per_s))
                        .unwrap_or(f64::NAN)
                })
                .collect();
            if v.iter().any(|x| x.is_finite()) {
                series.push((k.name().to_string(), v));
            }
        }
        let cats: Vec<String> = r
            .latencies
            .iter()
            .map(|l| {
                if l == "default" {
                    "default latency".into()
                } else {
                    format!("--latency-msec={l}")
                }
            })
            .collect();
        plots.push((
            "wakeups".to_string(),
            bar_chart(
                "server wakeups per second, one paplay stream (medians)",
                "paplay latency request",
                "voluntary context switches / s, all threads",
                &cats,
                &series,
            ),
        ));
    }
    if let Some(ev) = &r.events {
        let series: Vec<Series> = ev
            .runs
            .iter()
            .map(|run| {
                Series::new(
                    &run.label,
                    run.latencies_ms
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| v.map(|v| ((i + 1) as f64, v)))
                        .collect(),
                )
            })
            .collect();
        if !series.is_empty() {
            plots.push((
                "events".to_string(),
                line_plot(
                    "event sound: click added → played by the virtual DAC",
                    "event",
                    "ms",
                    &series,
                    false,
                    true,
                ),
            ));
        }
    }
    // Markdown.
    let mut md = String::new();
    if !r.points.is_empty() {
        let pa = match (&r.pulseaudio_sink, &r.pulseaudio_error) {
            (Some(s), _) => format!(
                "PulseAudio on `{}` ({}; module-alsa-sink on alsa-lib's `null` PCM: {})",
                s.module, s.kind, s.alsa_null
            ),
            (None, Some(e)) => format!("PulseAudio: {e}"),
            (None, None) => "PulseAudio: not measured".into(),
        };
        let _ = writeln!(
            md,
            "## Wakeups with a 2 s buffer\n\nOne `paplay` of a {:.0} s 48 kHz s16 stereo \
             WAV per point, against a fresh server: quaverd on `--device {}` (the \
             simulated card with a 2 s ring, filling ahead), and {}. Each server \
             runs headless in its own runtime directory. After {} s of playing, \
             `/proc/PID/task/*/{{status,stat}}` of every thread of the server are sampled \
             over a {} s window; medians over {} run(s), servers alternating. quaverd's own \
             `status` before and after the window gives its quantum, the device's \
             wakeups and the cycles rendered per wakeup (> 1: filling ahead).\n",
            r.file_seconds, r.quaverd_device, pa, r.settle_seconds, r.window_seconds, r.repeats
        );
        md.push_str(&t.markdown());
        md.push_str("\n{plot:wakeups}\n\n### Per thread (medians)\n\n");
        let mut pt = Table::new(&[
            "latency",
            "server",
            "thread",
            "threads",
            "wakeups/s",
            "preemptions/s",
            "CPU %",
        ]);
        for lat in &r.latencies {
            for k in [ServerKind::Quaverd, ServerKind::Pulseaudio] {
                let Some(p) = point(r, k, lat) else { continue };
                let mut names: Vec<&str> = p
                    .samples
                    .iter()
                    .flat_map(|s| s.threads.iter().map(|t| t.name.as_str()))
                    .collect();
                names.sort();
                names.dedup();
                for n in names {
                    let of = |f: fn(&ThreadRate) -> f64| {
                        median(
                            &p.samples
                                .iter()
                                .filter_map(|s| s.threads.iter().find(|t| t.name == n))
                                .map(f)
                                .collect::<Vec<_>>(),
                        )
                    };
                    pt.row(vec![
                        lat.clone(),
                        k.name().into(),
                        n.into(),
                        fmt(of(|t| t.threads as f64), 0),
                        fmt(of(|t| t.voluntary_per_s), 2),
                        fmt(of(|t| t.involuntary_per_s), 2),
                        fmt(of(|t| t.cpu_per_s * 100.0), 3),
                    ]);
                }
            }
        }
        md.push_str(&pt.markdown());
        md.push_str("\n### Every window\n\n");
        let mut wt = Table::new(&[
            "latency",
            "server",
            "run",
            "window s",
            "wakeups/s",
            "preemptions/s",
            "CPU %",
            "sink inputs",
            "quaverd quantum",
            "device wakeups/s",
            "cycles/wakeup",
            "xruns",
        ]);
        for p in &r.points {
            for s in &p.samples {
                let q = s.quaverd.as_ref();
                wt.row(vec![
                    p.latency.clone(),
                    p.server.name().into(),
                    s.run.to_string(),
                    format!("{:.1}", s.window_s),
                    format!("{:.2}", s.voluntary_per_s),
                    format!("{:.2}", s.involuntary_per_s),
                    format!("{:.3}", s.cpu_per_s * 100.0),
                    s.sink_inputs.to_string(),
                    q.map_or("–".into(), |q| q.quantum.to_string()),
                    fmt(q.map(|q| q.device_wakeups_per_s), 2),
                    fmt(q.and_then(|q| q.cycles_per_wakeup), 1),
                    q.map_or("–".into(), |q| q.xruns.to_string()),
                ]);
            }
        }
        md.push_str(&wt.markdown());
        if let Some(q) = r
            .points
            .iter()
            .flat_map(|p| p.samples.iter())
            .find_map(|s| s.quaverd.as_ref())
        {
            let _ = writeln!(md, "\nquaverd's device: {} ({}).", q.device, q.device_state);
        }
        for p in &r.points {
            for f in &p.failures {
                let _ = writeln!(md, "- {} at {}: failed: {f}", p.server.name(), p.latency);
            }
        }
        md.push('\n');
    }
    if let Some(ev) = &r.events {
        let _ = writeln!(
            md,
            "## Event sound latency\n\nIn-process, on the real clock: {}. The engine's \
             real-time thread: {}. A quiet music stream (sine, amplitude {MUSIC_AMPLITUDE}) \
             asks for {BUFFER_FRAMES} frames (2 s), so the card fills ahead and the thread \
             sleeps about {:.2} s between refills. {} times per run, after a refill (a \
             driver wakeup, then the card full and its counters still for {} ms) and a \
             seeded random 5–75 % of that sleep, a click stream (one frame at \
             {CLICK_AMPLITUDE}) is added; its latency is the DAC probe's time for the first \
             sample ≥ {PROBE_THRESHOLD} minus the moment just before `add_node_linked`. \
             The probe is re-armed before each click, and each click's node is removed \
             after it played. *queued* is the audio the card held when the click was \
             added (estimated from the refill). Contrast run (*rewind blocked*): a second \
             music stream without rewind history, which makes rewinds impossible, so the \
             click waits behind the queue. Acceptance: heard within {EVENT_BOUND_MS} ms.\n",
            ev.card,
            ev.realtime,
            (BUFFER_FRAMES - 8192 - PERIOD_FRAMES) as f64 / RATE as f64,
            r.events_per_run,
            STILL.as_millis()
        );
        md.push_str(&e.markdown());
        md.push_str("\n{plot:events}\n\n");
        for run in &ev.runs {
            let _ = writeln!(
                md,
                "- {}: quantum {}, {} driver wakeups and {} rewinds ({} frames taken back) \
                 in {:.1} s; events mid-sleep {}/{}; `add_node_linked` took {} µs \
                 (median); per event (ms): {}",
                run.label,
                run.quantum,
                run.wakeups,
                run.rewinds,
                run.rewound_frames,
                run.seconds,
                run.mid_sleep.iter().filter(|m| **m).count(),
                run.mid_sleep.len(),
                fmt(median(&run.add_us), 0),
                run.latencies_ms
                    .iter()
                    .map(|v| fmt(*v, 1))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for f in &ev.failures {
            let _ = writeln!(md, "- failed: {f}");
        }
    }
    let (summary, extra) = if r.points.is_empty() {
        (e, Vec::new())
    } else if r.events.is_some() {
        (t, vec![e])
    } else {
        (t, Vec::new())
    };
    ModeOutput {
        results: serde_json::to_value(r).unwrap_or_default(),
        markdown: md,
        plots,
        summary,
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::{CtxSwitches, ThreadSample};

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
