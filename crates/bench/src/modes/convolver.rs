//! `convolver`: what a 64k-tap convolver on 2 channels costs on quaverd beside
//! PipeWire's filter-chain convolver, on the same impulse response in the same minutes
//! (issue 36, acceptance 7).
//!
//! One stereo impulse response (decaying noise, a different one per channel, seeded)
//! is written as a WAV file. Each server is started headless twice per repeat, once
//! with the convolver and once without, in alternation, both at a fixed quantum of
//! 1024 frames at 48 kHz: quaverd with a `[[filters]]` convolver (partition 1024 by default) on
//! its null sink; PipeWire (pipewire, wireplumber, pipewire-pulse) with
//! libpipewire-module-filter-chain in its pipewire.conf, two builtin `convolver` nodes
//! (channel 0 and 1 of the file) making a sink in front of its null sink. The same
//! `paplay` of stereo noise plays into the sink with the convolver (or the plain null
//! sink) and the servers' CPU time (every thread's schedstat) is read over a window.
//! The convolver's cost is the difference between the two.

use crate::Ctx;
use crate::report::{ModeOutput, Table, doc::Doc};
use crate::tools::daemon::DaemonSpec;
use crate::tools::exec::{describe, stop_child, which};
use crate::tools::procfs::{self, ProcDelta, ProcSample};
use crate::tools::rng::Rng;
use crate::tools::servers::{Server, ServerKind};
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The servers' rate.
const RATE: u32 = 48_000;
/// Taps per channel.
pub const TAPS: usize = 65_536;
/// The quantum both servers are held to, frames.
pub const QUANTUM: usize = 1024;

/// One measured window.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    /// Which server.
    pub server: String,
    /// Whether the stream went through the convolver.
    pub convolver: bool,
    /// Repeat number, from 1.
    pub repeat: usize,
    /// CPU seconds per second of the server's processes over the window, or why not.
    pub cpu_s_per_s: Result<f64, String>,
    /// Whether that CPU time is to the nanosecond (schedstat) rather than in ticks.
    pub exact: bool,
}

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct ConvolverResults {
    /// Taps per channel.
    pub taps: usize,
    /// The quantum, frames.
    pub quantum: usize,
    /// quaverd's partition size, frames.
    pub partition: usize,
    /// Seconds of each measured window.
    pub window_s: f64,
    /// Every window, in the order measured.
    pub rounds: Vec<Round>,
}

impl ConvolverResults {
    /// Median CPU s/s of `server` with or without the convolver.
    pub fn median(&self, server: &str, convolver: bool) -> Option<f64> {
        let mut v: Vec<f64> = self
            .rounds
            .iter()
            .filter(|r| r.server == server && r.convolver == convolver)
            .filter_map(|r| r.cpu_s_per_s.as_ref().ok().copied())
            .collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        })
    }

    /// The convolver's own cost on `server`: the medians' difference, CPU s/s.
    pub fn cost(&self, server: &str) -> Option<f64> {
        Some(self.median(server, true)? - self.median(server, false)?)
    }
}

/// Writes a stereo float WAV.
fn write_wav(path: &Path, left: &[f32], right: &[f32]) -> Result<()> {
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: RATE,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec)?;
    for (l, r) in left.iter().zip(right) {
        w.write_sample(*l)?;
        w.write_sample(*r)?;
    }
    w.finalize()?;
    Ok(())
}

/// Uniform noise in ±`amp`.
fn noise(rng: &mut Rng, n: usize, amp: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.unit() as f32 * 2.0 - 1.0) * amp)
        .collect()
}

/// A room-like response: noise decaying by 60 dB over its length, the direct sound
/// first. The exact shape does not change the work (every tap is multiplied).
fn impulse(rng: &mut Rng) -> Vec<f32> {
    let mut ir = noise(rng, TAPS, 0.5);
    let k = (1e-3f64).ln() / TAPS as f64;
    for (i, s) in ir.iter_mut().enumerate() {
        *s *= (k * i as f64).exp() as f32;
    }
    ir[0] = 1.0;
    ir
}

/// PipeWire's drop-in: the quantum held at [`QUANTUM`], and with `ir` a filter-chain
/// sink `convolver` of two builtin convolvers, playing into the null sink.
fn pipewire_conf(ir: Option<&Path>) -> String {
    let mut text = format!(
        "context.properties = {{\n    default.clock.quantum = {QUANTUM}\n    \
         default.clock.min-quantum = {QUANTUM}\n    default.clock.max-quantum = {QUANTUM}\n}}\n"
    );
    if let Some(ir) = ir {
        let ir = ir.display();
        text.push_str(&format!(
            r#"context.modules = [
    {{ name = libpipewire-module-filter-chain
      args = {{
          node.description = "convolver"
          media.name = "convolver"
          filter.graph = {{
              nodes = [
                  {{ type = builtin label = convolver name = convL
                    config = {{ filename = "{ir}" channel = 0 }} }}
                  {{ type = builtin label = convolver name = convR
                    config = {{ filename = "{ir}" channel = 1 }} }}
              ]
              inputs = [ "convL:In" "convR:In" ]
              outputs = [ "convL:Out" "convR:Out" ]
          }}
          audio.channels = 2
          audio.position = [ FL FR ]
          capture.props = {{ node.name = "convolver" media.class = "Audio/Sink" }}
          playback.props = {{ node.name = "convolver.out" target.object = "null" }}
      }}
    }}
]
"#
        ));
    }
    text
}

/// Starts `kind` with or without the convolver; returns it and the sink to play to.
fn start(
    ctx: &mut Ctx,
    kind: ServerKind,
    ir: &Path,
    partition: Option<usize>,
) -> Result<(Server, String)> {
    let with = partition.is_some();
    match kind {
        ServerKind::Quaverd => {
            let config = match partition {
                Some(p) => format!(
                    "[[filters]]\nsink = \"null-sink\"\nchain = [{{ type = \"convolver\", \
                     ir = \"{}\", partition = {p} }}]\n",
                    ir.display()
                ),
                None => String::new(),
            };
            let spec = DaemonSpec {
                devices: vec!["null:rate=48000,channels=stereo".into()],
                rate: Some(RATE),
                quantum: Some(QUANTUM),
                quantum_min: Some(QUANTUM),
                quantum_max: Some(QUANTUM),
                config,
                ..DaemonSpec::default()
            };
            Ok((Server::quaverd_with(ctx, spec)?, "null-sink".into()))
        }
        ServerKind::Pipewire => {
            let conf = pipewire_conf(with.then_some(ir));
            let srv = Server::pipewire_with(
                ctx,
                &[(
                    "pipewire/pipewire.conf.d/91-quaver-bench-convolver.conf",
                    &conf,
                )],
            )?;
            let sink = if with { "convolver" } else { "null" };
            Ok((srv, sink.into()))
        }
        ServerKind::Pulseaudio => bail!("PulseAudio has no convolver module"),
    }
}

/// Samples every process of `srv`.
fn sample(srv: &Server) -> Result<Vec<ProcSample>> {
    srv.pids().into_iter().map(procfs::sample).collect()
}

/// Checks that PipeWire's session manager linked the stream through the convolver to
/// the null sink (`pw-link -l`), so the window measures the convolver at work.
fn linked_through(ctx: &mut Ctx, srv: &Server) -> Result<()> {
    let mut cmd = Command::new("pw-link");
    cmd.arg("-l");
    srv.client_env(&mut cmd);
    ctx.record_command(describe(&cmd));
    let out = cmd
        .output()
        .context("running pw-link (Debian: pipewire-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    // pw-link -l prints each output port, then its links indented under it.
    let linked = |from: &str, to: &str| {
        text.lines()
            .skip_while(|l| l.trim() != from)
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .any(|l| l.contains(to))
    };
    for ch in ["FL", "FR"] {
        let out_port = format!("convolver.out:output_{ch}");
        if !linked(&out_port, &format!("null:playback_{ch}")) {
            bail!("PipeWire did not link {out_port} to the null sink; pw-link -l:\n{text}");
        }
    }
    Ok(())
}

/// One window: the stream into `sink` for `settle` + `window`, the server's CPU over
/// the window.
fn measure(
    ctx: &mut Ctx,
    srv: &mut Server,
    sink: &str,
    music: &Path,
    settle: Duration,
    window: Duration,
) -> Result<(f64, bool)> {
    let mut play = Command::new("paplay");
    play.args(["-d", sink]).arg(music);
    srv.client_env(&mut play);
    ctx.record_command(format!("{} &", describe(&play)));
    let mut child = play
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting paplay")?;
    std::thread::sleep(settle);
    let r = (|| {
        if srv.kind == ServerKind::Pipewire && sink == "convolver" {
            linked_through(ctx, srv)?;
        }
        let a = sample(srv)?;
        std::thread::sleep(window);
        let b = sample(srv)?;
        srv.check_alive()?;
        Ok::<_, anyhow::Error>((a, b))
    })();
    let ended = child.try_wait().ok().flatten();
    stop_child(&mut child, Duration::from_secs(2));
    if let Some(st) = ended {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        bail!("paplay to '{sink}' ended early ({st}): {}", err.trim());
    }
    let (a, b) = r?;
    let tps = procfs::clock_ticks_per_second();
    let mut cpu = 0.0;
    let mut wall = 0.0;
    let mut exact = true;
    for (x, y) in a.iter().zip(&b) {
        let d = ProcDelta::between(x, y, tps);
        cpu += d.cpu_s;
        wall = d.wall_s;
        exact &= d.cpu_exact;
    }
    Ok((cpu / wall, exact))
}

/// Runs every repeat on quaverd and PipeWire (when installed).
pub fn run(
    ctx: &mut Ctx,
    repeats: usize,
    window_s: f64,
    partition: usize,
) -> Result<ConvolverResults> {
    if which("paplay").is_none() {
        bail!("paplay is not installed (Debian: pulseaudio-utils)");
    }
    let (settle, window, repeats) = if ctx.quick {
        (Duration::from_millis(700), Duration::from_secs(1), 1)
    } else {
        (
            Duration::from_secs(3),
            Duration::from_secs_f64(window_s),
            repeats,
        )
    };
    let dir = crate::tools::exec::tempdir("quaver-bench-convolver-")?;
    let mut rng = Rng::new(ctx.seed);
    let ir = dir.path().join("ir.wav");
    let (l, r) = (impulse(&mut rng), impulse(&mut rng));
    write_wav(&ir, &l, &r)?;
    // Long enough for the settling, the window and a server's start-up buffering.
    let n = ((settle + window).as_secs_f64() + 5.0) as usize * RATE as usize;
    let music = dir.path().join("noise.wav");
    write_wav(&music, &noise(&mut rng, n, 0.1), &noise(&mut rng, n, 0.1))?;
    let mut rounds = Vec::new();
    for repeat in 1..=repeats {
        for kind in [ServerKind::Quaverd, ServerKind::Pipewire] {
            for with in [true, false] {
                let cpu =
                    start(ctx, kind, &ir, with.then_some(partition)).and_then(|(mut srv, sink)| {
                        let m = measure(ctx, &mut srv, &sink, &music, settle, window);
                        srv.stop();
                        m
                    });
                rounds.push(Round {
                    server: kind.name().into(),
                    convolver: with,
                    repeat,
                    exact: cpu.as_ref().is_ok_and(|c| c.1),
                    cpu_s_per_s: cpu.map(|c| c.0).map_err(|e| format!("{e:#}")),
                });
            }
        }
    }
    Ok(ConvolverResults {
        taps: TAPS,
        quantum: QUANTUM,
        partition,
        window_s: window.as_secs_f64(),
        rounds,
    })
}

/// The report: the convolver's cost per server, and every window.
pub fn render(r: &ConvolverResults) -> ModeOutput {
    let servers = ["quaverd", "pipewire"];
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.4}", v));
    let summary = Table::of(
        &servers,
        &[
            ("server", &|s: &&str| s.to_string()),
            ("with convolver (CPU s/s, median)", &|s: &&str| {
                f(r.median(s, true))
            }),
            ("without (CPU s/s, median)", &|s: &&str| {
                f(r.median(s, false))
            }),
            ("the convolver's cost (CPU s/s)", &|s: &&str| f(r.cost(s))),
            ("per 1024 frames (µs)", &|s: &&str| {
                r.cost(s).map_or("-".into(), |c| {
                    format!("{:.0}", c * 1e6 * QUANTUM as f64 / RATE as f64)
                })
            }),
        ],
    );
    let rounds = Table::of(
        &r.rounds,
        &[
            ("repeat", &|x: &Round| x.repeat.to_string()),
            ("server", &|x: &Round| x.server.clone()),
            ("convolver", &|x: &Round| {
                if x.convolver { "yes" } else { "no" }.into()
            }),
            ("CPU s/s", &|x: &Round| match &x.cpu_s_per_s {
                Ok(c) => format!("{c:.4}{}", if x.exact { "" } else { " (ticks)" }),
                Err(e) => format!("failed: {e}"),
            }),
        ],
    );
    let mut doc = Doc::new();
    doc.heading(
        2,
        "A 64k-tap stereo convolver: quaverd beside PipeWire's filter-chain",
    )
    .para(format!(
        "{} taps per channel (a different decaying noise per channel) from one WAV \
             file; 48 kHz, quantum held at {} frames on both servers; quaverd's \
             `[[filters]]` convolver (partition {}) on its null sink, PipeWire's \
             filter-chain with two builtin convolvers (its default block and tail sizes) \
             in front of its null sink; paplay of stereo noise into that sink, or into \
             the plain null sink for the run without. CPU is every server thread's time \
             (schedstat) over a {:.0} s window; PipeWire's is pipewire, wireplumber and \
             pipewire-pulse. The convolver's cost is the difference of the medians.",
        r.taps, r.quantum, r.partition, r.window_s
    ))
    .table(&summary)
    .heading(3, "Every window")
    .table(&rounds);
    doc.finish(r, summary, vec![rounds])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipewire_gets_two_convolvers_on_the_file_and_the_quantum() {
        let with = pipewire_conf(Some(Path::new("/tmp/x/ir.wav")));
        for want in [
            "default.clock.max-quantum = 1024",
            "label = convolver name = convL\n                    config = { filename = \"/tmp/x/ir.wav\" channel = 0 }",
            "config = { filename = \"/tmp/x/ir.wav\" channel = 1 }",
            "node.name = \"convolver\" media.class = \"Audio/Sink\"",
        ] {
            assert!(with.contains(want), "{want} not in\n{with}");
        }
        let without = pipewire_conf(None);
        assert!(without.contains("min-quantum = 1024") && !without.contains("filter-chain"));
    }

    #[test]
    fn the_cost_is_the_difference_of_the_medians_and_failures_are_left_out() {
        let round = |server: &str, convolver, cpu: Result<f64, String>| Round {
            server: server.into(),
            convolver,
            repeat: 1,
            cpu_s_per_s: cpu,
            exact: true,
        };
        let r = ConvolverResults {
            taps: TAPS,
            quantum: QUANTUM,
            partition: 1024,
            window_s: 1.0,
            rounds: vec![
                round("quaverd", true, Ok(0.03)),
                round("quaverd", true, Ok(0.01)),
                round("quaverd", true, Ok(0.02)),
                round("quaverd", false, Ok(0.004)),
                round("quaverd", false, Err("paplay ended early".into())),
                round("pipewire", true, Err("not installed".into())),
            ],
        };
        assert!((r.cost("quaverd").unwrap() - 0.016).abs() < 1e-12);
        assert_eq!(r.cost("pipewire"), None);
        assert!(impulse(&mut Rng::new(1)).len() == TAPS);
    }
}
