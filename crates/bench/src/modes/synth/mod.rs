//! `synth`: a SynthMark-like workload inside a low-latency callback client.
//!
//! A callback client of the native protocol renders N voices (a sawtooth oscillator,
//! a linear ADSR envelope and a state-variable low-pass filter whose cutoff follows
//! the envelope) in its process callback, linked to quaverd's null sink. The callback
//! timestamps itself (CLOCK_MONOTONIC, the clock of the cycle header) and keeps
//! lock-free log2 histograms of its wakeup latency (callback start − cycle start) and
//! render time, which the control thread snapshots and differences. Glitches are the
//! misses the server counts against the client (`CallbackClient::xruns`).
//!
//! Marks: **voice** (most voices whose mean render time stays within a share of the
//! cycle), **latency** (smallest quantum with no glitch for a voice count), **jitter**
//! (wakeup and render-time histograms) and **switch** (the voice count toggles between
//! a low and a high value every P ms while the simulated card stalls the real-time
//! thread every few seconds, with quaverd's adaptive safety margin off and on: glitches,
//! the margin over time and the latency it ends at; module [`crate::modes::synth::switch`]).

pub mod client;
pub mod options;
pub mod render;
pub mod switch;
pub mod voice;

pub use client::{Client, Window, priority};
pub use options::{ADAPTIVE_CONTROL, ADAPTIVE_QUANTUM_AVAILABLE, Mark, SynthOptions};
pub use voice::{Shared, Snapshot, Synth, Voice, now_ns};

use crate::Ctx;
use crate::modes::synth::switch::SwitchMark;
use crate::tools::daemon::{Daemon, DaemonSpec};
use anyhow::{Context, Result, bail};
use quaver_client::callback::RtPriority;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::Duration;

// ---------------------------------------------------------------- the marks

/// Voice mark result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoiceMark {
    /// Quantum, frames.
    pub quantum: usize,
    /// Budget (share of the cycle).
    pub budget: f64,
    /// Largest voice count whose mean render time stayed within the budget.
    pub voices: usize,
    /// Whether the search stopped at `max_voices` still within budget.
    pub capped: bool,
    /// Every point measured, in order.
    pub points: Vec<Window>,
    /// Client scheduling.
    pub realtime: String,
}

/// Latency mark result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyMark {
    /// Voices rendered.
    pub voices: usize,
    /// Smallest quantum with no glitch, frames (None: every quantum glitched).
    pub quantum: Option<usize>,
    /// The same in ms.
    pub ms: Option<f64>,
    /// Every point.
    pub points: Vec<LatencyPoint>,
}

/// One quantum of the latency mark.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyPoint {
    /// Quantum requested.
    pub requested: usize,
    /// The window (or why there is none).
    pub window: Option<Window>,
    /// Error, if the point could not run.
    pub error: Option<String>,
}

/// Jitter mark result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JitterMark {
    /// The window.
    pub window: Window,
    /// Largest wakeup latency, ns (exact).
    pub wake_max_ns: u64,
    /// Largest render time, ns (exact).
    pub render_max_ns: u64,
    /// Client scheduling.
    pub realtime: String,
}

/// Everything a synth run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SynthResults {
    /// Sample rate.
    pub rate: u32,
    /// Quantum of the voice, jitter and switch marks.
    pub quantum: usize,
    /// Whether quaverd has an adaptive quantum control (it has not).
    pub adaptive_quantum_available: bool,
    /// The adaptive control the switch mark turns on and off.
    pub adaptive_control: String,
    /// Voice mark.
    pub voice: Option<VoiceMark>,
    /// Latency mark.
    pub latency: Option<LatencyMark>,
    /// Jitter mark.
    pub jitter: Option<JitterMark>,
    /// Switch mark: adaptive margin on, then off.
    pub switch: Option<SwitchMark>,
}

/// Runs the marks: voice, latency and jitter against one private quaverd on the null
/// sink (started when the first of them runs), switch on quaverds of its own
/// ([`crate::modes::synth::switch`]).
pub fn run(ctx: &mut Ctx, o: &SynthOptions) -> Result<SynthResults> {
    if o.max_voices == 0 || o.quantum == 0 {
        bail!("--max-voices and --quantum must be positive");
    }
    let mut daemon = None;
    let r = run_marks(ctx, &mut daemon, o);
    let Some(mut daemon) = daemon else {
        return r;
    };
    let stopped = daemon.stop();
    let r = r.with_context(|| format!("quaverd log:\n{}", daemon.log_tail()))?;
    stopped?;
    Ok(r)
}

fn null_daemon<'d>(
    ctx: &mut Ctx,
    slot: &'d mut Option<Daemon>,
    o: &SynthOptions,
) -> Result<&'d Daemon> {
    if slot.is_none() {
        let qmin = o
            .quanta
            .iter()
            .copied()
            .chain([o.quantum])
            .min()
            .unwrap_or(16);
        let qmax = o
            .quanta
            .iter()
            .copied()
            .chain([o.quantum])
            .max()
            .unwrap_or(1024);
        let spec = DaemonSpec {
            devices: vec![format!("null:rate={}", o.rate)],
            rate: Some(o.rate),
            quantum: Some(o.quantum),
            quantum_min: Some(qmin),
            quantum_max: Some(qmax.max(o.quantum)),
            ..DaemonSpec::default()
        };
        *slot = Some(ctx.start_daemon(spec)?);
    }
    Ok(slot.as_ref().expect("started above"))
}

fn steps(o: &SynthOptions) -> u64 {
    o.marks
        .iter()
        .map(|m| match m {
            Mark::Voice => 20,
            Mark::Latency => o.quanta.len() as u64,
            Mark::Jitter => 1,
            Mark::Switch => 2,
        })
        .sum()
}

fn run_marks(ctx: &mut Ctx, daemon: &mut Option<Daemon>, o: &SynthOptions) -> Result<SynthResults> {
    let prio = priority(ctx);
    let pb = ctx.progress.bar(steps(o), "synth");
    let mut res = SynthResults {
        rate: o.rate,
        quantum: o.quantum,
        adaptive_quantum_available: ADAPTIVE_QUANTUM_AVAILABLE,
        adaptive_control: ADAPTIVE_CONTROL.into(),
        voice: None,
        latency: None,
        jitter: None,
        switch: None,
    };
    for &mark in &o.marks {
        match mark {
            Mark::Voice => {
                pb.set_message("synth: voice mark");
                let daemon = null_daemon(ctx, daemon, o)?;
                res.voice = Some(voice_mark(ctx, daemon, o, prio, &pb)?);
                pb.set_position(20);
            }
            Mark::Latency => {
                let voices = default_voices(o, &res);
                pb.set_message(format!("synth: latency mark, {voices} voices"));
                let daemon = null_daemon(ctx, daemon, o)?;
                let mut points = Vec::new();
                for &q in &o.quanta {
                    let r = (|| -> Result<Window> {
                        let mut c = Client::start(
                            daemon,
                            "null-sink",
                            q,
                            o.max_voices,
                            voices,
                            o.rate,
                            ctx.seed,
                            prio,
                        )?;
                        std::thread::sleep(Duration::from_millis(100));
                        let w = c.window(o.latency_seconds)?;
                        c.stop()?;
                        Ok(w)
                    })();
                    points.push(match r {
                        Ok(w) => LatencyPoint {
                            requested: q,
                            window: Some(w),
                            error: None,
                        },
                        Err(e) => LatencyPoint {
                            requested: q,
                            window: None,
                            error: Some(format!("{e:#}")),
                        },
                    });
                    pb.inc(1);
                }
                let best = points
                    .iter()
                    .filter_map(|p| p.window.as_ref())
                    .filter(|w| w.glitches == 0 && !w.went_async)
                    .map(|w| w.quantum)
                    .min();
                res.latency = Some(LatencyMark {
                    voices,
                    quantum: best,
                    ms: best.map(|q| q as f64 * 1000.0 / o.rate as f64),
                    points,
                });
            }
            Mark::Jitter => {
                let voices = default_voices(o, &res);
                pb.set_message(format!("synth: jitter mark, {voices} voices"));
                let daemon = null_daemon(ctx, daemon, o)?;
                let mut c = Client::start(
                    daemon,
                    "null-sink",
                    o.quantum,
                    o.max_voices,
                    voices,
                    o.rate,
                    ctx.seed,
                    prio,
                )?;
                std::thread::sleep(Duration::from_millis(200));
                let w = c.window(o.jitter_seconds)?;
                let (render_max_ns, wake_max_ns) = c.shared.maxima();
                let realtime = c.realtime.clone();
                c.stop()?;
                res.jitter = Some(JitterMark {
                    window: w,
                    wake_max_ns,
                    render_max_ns,
                    realtime,
                });
                pb.inc(1);
            }
            Mark::Switch => {
                let high = o.switch_high.unwrap_or_else(|| {
                    res.voice
                        .as_ref()
                        .map_or(256, |v| (v.voices * 3 / 2).max(o.switch_low + 1))
                });
                let high = high.min(o.max_voices);
                pb.set_message("synth: switch, adaptive margin on and off");
                res.switch = Some(crate::modes::synth::switch::run(ctx, o, high)?);
                pb.inc(2);
            }
        }
    }
    pb.finish_and_clear();
    Ok(res)
}

/// The voice mark: voice counts doubled, then bisected, until the mean render time
/// leaves the budget.
fn voice_mark(
    ctx: &Ctx,
    daemon: &Daemon,
    o: &SynthOptions,
    prio: RtPriority,
    pb: &indicatif::ProgressBar,
) -> Result<VoiceMark> {
    let mut c = Client::start(
        daemon,
        "null-sink",
        o.quantum,
        o.max_voices,
        1,
        o.rate,
        ctx.seed,
        prio,
    )?;
    let realtime = c.realtime.clone();
    let mut points = Vec::new();
    let mut measure = |c: &mut Client, n: usize| -> Result<f64> {
        c.shared.voices.store(n, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        let w = c.window(o.point_seconds)?;
        let l = w.stats.load();
        points.push(w);
        pb.inc(1);
        Ok(l)
    };
    // Doubling, then bisection between the last point within budget and
    // the first beyond it.
    let (mut good, mut bad) = (0usize, None);
    let mut n = 1;
    loop {
        if measure(&mut c, n)? <= o.budget {
            good = n;
            if n >= o.max_voices {
                break;
            }
            n = (n * 2).min(o.max_voices);
        } else {
            bad = Some(n);
            break;
        }
    }
    let bisect = if ctx.quick { 3 } else { 6 };
    if let Some(mut hi) = bad {
        for _ in 0..bisect {
            if hi - good <= 1 {
                break;
            }
            let mid = (good + hi) / 2;
            if measure(&mut c, mid)? <= o.budget {
                good = mid;
            } else {
                hi = mid;
            }
        }
    }
    c.stop()?;
    points.sort_by_key(|w| w.voices);
    Ok(VoiceMark {
        quantum: o.quantum,
        budget: o.budget,
        voices: good,
        capped: bad.is_none(),
        points,
        realtime,
    })
}

fn default_voices(o: &SynthOptions, res: &SynthResults) -> usize {
    o.voices
        .unwrap_or_else(|| res.voice.as_ref().map_or(32, |v| (v.voices / 2).max(1)))
        .min(o.max_voices)
}
