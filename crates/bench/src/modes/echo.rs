//! `echo`: echo cancellation on a recorded scene (issue 36, acceptance 3), quaverd's
//! module-echo-cancel beside PulseAudio's with its webrtc canceller, on the same files.
//!
//! The scene (quaver_dsp::echo_scene): far-end speech from espeak-ng through a
//! simulated room impulse response and a path delay, plus near-end speech, rendered
//! into one stereo file (far end left, microphone right). On each server, headless in
//! its own runtime directory: a stereo null sink `scene` that paplay plays the file
//! into, its left channel remapped to a source `far` and its right to `mic`, a null
//! sink `spk` (the speakers), module-echo-cancel over `mic` and `spk` (aec_method=webrtc;
//! no noise suppression or gain control on either side), and a loopback from `far` into
//! the echo-cancel sink, so the far end is what the speakers play. parec records the
//! echo-cancel source; the recording is found in the scene by the near end's speech and
//! measured: ERLE after convergence, the near end kept, and the server's CPU time.

use crate::Ctx;
use crate::report::{ModeOutput, Table, doc::Doc};
use crate::tools::exec::{describe, which};
use crate::tools::procfs;
use crate::tools::servers::{Server, ServerKind};
use anyhow::{Context, Result, bail};
use quaver_dsp::echo_scene::{
    FAR_TEXT, Layout, Measures, NEAR_TEXT, ROOM_MODULES, ROOM_SOURCE, Scene,
};
use serde::Serialize;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The scene's rate.
const RATE: u32 = 48_000;

/// One server's run.
#[derive(Debug, Clone, Serialize)]
pub struct EchoResult {
    /// Which server.
    pub server: String,
    /// What the scene measured, or why it could not run.
    pub measures: Result<Measures, String>,
    /// The server's CPU time while the scene played, % of one core.
    pub cpu_percent: Option<f64>,
}

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct EchoResults {
    /// The scene's layout.
    pub layout: String,
    /// Seconds of scene.
    pub seconds: f64,
    /// One entry per server.
    pub runs: Vec<EchoResult>,
}

/// `text` spoken by espeak-ng's `voice` at `wpm` words a minute, at 48 kHz (sox
/// converts espeak-ng's 22.05 kHz).
fn speech(ctx: &mut Ctx, dir: &Path, voice: &str, wpm: &str, text: &str) -> Result<Vec<f32>> {
    let raw = dir.join(format!("{voice}-22k.wav"));
    let wav = dir.join(format!("{voice}.wav"));
    let mut espeak = Command::new("espeak-ng");
    espeak
        .args(["-v", voice, "-s", wpm, "-w"])
        .arg(&raw)
        .arg(text);
    let mut sox = Command::new("sox");
    sox.arg(&raw)
        .args(["-r", "48000", "-e", "floating-point", "-b", "32"])
        .arg(&wav);
    for mut c in [espeak, sox] {
        ctx.record_command(describe(&c));
        let st = c.status().with_context(|| describe(&c))?;
        if !st.success() {
            bail!("{} failed: {st}", describe(&c));
        }
    }
    let reader = hound::WavReader::open(&wav).with_context(|| wav.display().to_string())?;
    reader
        .into_samples::<f32>()
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| wav.display().to_string())
}

/// Renders the scene into `dir`/scene.wav.
fn render_scene(ctx: &mut Ctx, dir: &Path, layout: Layout) -> Result<Scene> {
    for tool in ["espeak-ng", "sox", "paplay", "parec", "pactl"] {
        if which(tool).is_none() {
            bail!("{tool} is not installed (Debian: espeak-ng, sox, pulseaudio-utils)");
        }
    }
    let far = speech(ctx, dir, "en-us", "165", FAR_TEXT)?;
    let near = speech(ctx, dir, "en+f3", "150", NEAR_TEXT)?;
    let scene = Scene::render(RATE, &far, &near, layout);
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: RATE,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let path = dir.join("scene.wav");
    let mut w = hound::WavWriter::create(&path, spec)?;
    for (f, m) in scene.far.iter().zip(&scene.mic) {
        w.write_sample(*f)?;
        w.write_sample(*m)?;
    }
    w.finalize()?;
    Ok(scene)
}

/// Runs a PulseAudio client program against `srv`; fails with its output.
fn pa(ctx: &mut Ctx, srv: &Server, prog: &str, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(prog);
    cmd.args(args);
    srv.client_env(&mut cmd);
    ctx.record_command(describe(&cmd));
    let out = cmd.output().with_context(|| describe(&cmd))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            describe(&cmd),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The room ([`ROOM_MODULES`]) on `srv`; returns the echo-cancel source's name.
fn build_room(ctx: &mut Ctx, srv: &Server) -> Result<&'static str> {
    for args in ROOM_MODULES {
        let mut a = vec!["load-module"];
        a.extend(*args);
        pa(ctx, srv, "pactl", &a)?;
    }
    Ok(ROOM_SOURCE)
}

/// CPU ticks of every process of `srv`.
fn cpu_ticks(srv: &Server) -> Option<u64> {
    srv.pids()
        .iter()
        .map(|p| procfs::sample(*p).ok().map(|s| s.cpu_ticks))
        .sum()
}

/// Plays the scene on `srv` while parec records the echo-cancel source; measures it.
fn run_on(ctx: &mut Ctx, srv: &Server, dir: &Path, scene: &Scene) -> Result<(Measures, f64)> {
    let source = build_room(ctx, srv)?;
    let out_path = dir.join(format!("out-{}.raw", srv.kind.name()));
    let mut rec = Command::new("parec");
    rec.args([
        "-d",
        source,
        "--format=float32le",
        "--rate=48000",
        "--channels=1",
        "--latency-msec=20",
        "--raw",
    ])
    .arg(&out_path)
    .stdin(Stdio::null())
    .stderr(Stdio::null());
    srv.client_env(&mut rec);
    ctx.record_command(format!("{} &", describe(&rec)));
    // The loopback's capture side is a source output already: parec's is one more.
    let outputs = |ctx: &mut Ctx| -> Result<usize> {
        Ok(pa(ctx, srv, "pactl", &["list", "short", "source-outputs"])?
            .lines()
            .count())
    };
    let before = outputs(ctx)?;
    let mut rec = rec.spawn().context("starting parec")?;
    // parec's stream is up before the scene starts.
    let up = Instant::now();
    while outputs(ctx)? <= before {
        if up.elapsed() > Duration::from_secs(10) {
            let _ = rec.kill();
            let _ = rec.wait();
            bail!("parec's stream did not appear within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ticks0 = cpu_ticks(srv);
    let t0 = Instant::now();
    let scene_path = dir.join("scene.wav");
    let played = pa(
        ctx,
        srv,
        "paplay",
        &["-d", "scene", &scene_path.to_string_lossy()],
    );
    let seconds = t0.elapsed().as_secs_f64();
    let ticks1 = cpu_ticks(srv);
    // Half a second more, for the canceller's latency and parec's buffer.
    let want = ((scene.mic.len() + RATE as usize / 2) * 4) as u64;
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&out_path).map_or(0, |m| m.len()) < want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    // What parec wrote is in the file already: no need to wait for a graceful exit
    // (it inherits this process's blocked stop signals).
    let _ = rec.kill();
    let _ = rec.wait();
    played?;
    let bytes = std::fs::read(&out_path).with_context(|| out_path.display().to_string())?;
    let out: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let at = scene.find_in(&out).with_context(|| {
        format!(
            "parec recorded {} frames, fewer than the scene's {}",
            out.len(),
            scene.mic.len()
        )
    })?;
    let cpu = match (ticks0, ticks1) {
        (Some(a), Some(b)) => {
            (b - a) as f64 / procfs::clock_ticks_per_second() as f64 / seconds * 100.0
        }
        _ => f64::NAN,
    };
    Ok((scene.measure(&out[at..]), cpu))
}

/// Runs the scene on quaverd and on PulseAudio (when installed).
pub fn run(ctx: &mut Ctx) -> Result<EchoResults> {
    let layout = if ctx.quick {
        Layout::tiny()
    } else {
        Layout::long()
    };
    let dir = crate::tools::exec::tempdir("quaver-bench-echo-")?;
    let scene = render_scene(ctx, dir.path(), layout)?;
    let mut runs = Vec::new();
    for kind in [ServerKind::Quaverd, ServerKind::Pulseaudio] {
        let mut srv = match Server::start(ctx, kind) {
            Ok(s) => s,
            Err(e) => {
                runs.push(EchoResult {
                    server: kind.name().into(),
                    measures: Err(format!("{e:#}")),
                    cpu_percent: None,
                });
                continue;
            }
        };
        let r = run_on(ctx, &srv, dir.path(), &scene);
        srv.stop();
        runs.push(match r {
            Ok((m, cpu)) => EchoResult {
                server: kind.name().into(),
                measures: Ok(m),
                cpu_percent: Some(cpu),
            },
            Err(e) => EchoResult {
                server: kind.name().into(),
                measures: Err(format!("{e:#}")),
                cpu_percent: None,
            },
        });
    }
    Ok(EchoResults {
        layout: format!("{layout:?}"),
        seconds: layout.total,
        runs,
    })
}

/// The report: one row per server.
pub fn render(r: &EchoResults) -> ModeOutput {
    // A failed run says why once, in its first cell.
    let cell = |run: &EchoResult, f: &dyn Fn(&Measures) -> String| match &run.measures {
        Ok(m) => f(m),
        Err(_) => "-".into(),
    };
    let table = Table::of(
        &r.runs,
        &[
            ("server", &|x: &EchoResult| x.server.clone()),
            (
                "ERLE after convergence (dB)",
                &|x: &EchoResult| match &x.measures {
                    Ok(m) => format!("{:.1}", m.erle_db),
                    Err(e) => format!("failed: {e}"),
                },
            ),
            ("near end kept, alone (corr.)", &|x: &EchoResult| {
                cell(x, &|m| format!("{:.3}", m.near_kept_single))
            }),
            ("near end kept, double talk (corr.)", &|x: &EchoResult| {
                cell(x, &|m| format!("{:.3}", m.near_kept_double))
            }),
            ("near-end level (dB)", &|x: &EchoResult| {
                cell(x, &|m| format!("{:+.1}", m.near_level_db))
            }),
            ("server CPU (% of a core)", &|x: &EchoResult| {
                x.cpu_percent.map_or("-".into(), |c| format!("{c:.1}"))
            }),
        ],
    );
    let mut doc = Doc::new();
    doc.heading(2, "Echo cancellation on a recorded scene")
        .para(format!(
            "{:.0} s of scene ({}): far-end speech (espeak-ng) through a simulated room \
             (RT60 0.25 s) after a path delay, plus near-end speech, as a microphone \
             hears them; played with paplay into a null sink whose channels are the far \
             end and the microphone, the far end looped into module-echo-cancel's sink \
             (aec_method=webrtc, no noise suppression or gain control), parec recording \
             its source. ERLE is the microphone's level over the output's while the far \
             end talks alone after convergence; the near end kept is the output's best \
             correlation with the clean near end within ±20 ms.",
            r.seconds, r.layout
        ))
        .table(&table);
    doc.finish(r, table, Vec::new())
}
