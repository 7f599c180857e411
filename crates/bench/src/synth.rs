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
//! the margin over time and the latency it ends at; module [`crate::switch`]).

use crate::Ctx;
use crate::daemon::{Daemon, DaemonSpec};
use crate::report::{ModeOutput, Table};
use crate::rng::Rng;
use crate::stats::{LOG2_BUCKETS, Log2Hist, fmt_bounds, fmt_ns};
use crate::svg::{Series, bar_chart, line_plot};
use crate::switch::SwitchMark;
use anyhow::{Context, Result, bail};
use quaver_client::Connection;
use quaver_client::callback::{
    ActiveCallback, Mode as CbMode, ProcessHandler, ProcessScope, RtPriority, RtStatus,
};
use quaver_client::quaver_protocol::message::StatusInfo;
use quaver_client::quaver_protocol::{CallbackParams, PortParams};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Whether quaverd adapts its quantum to the load. It does not: its adaptive control
/// is the devices' safety margin (watermark), which the switch mark turns on and off
/// ([`ADAPTIVE_CONTROL`]); the quantum is the same in both runs.
pub const ADAPTIVE_QUANTUM_AVAILABLE: bool = false;

/// The adaptive control the switch mark's "on" and "off" runs differ in.
pub const ADAPTIVE_CONTROL: &str = "device safety margin (watermark)";

/// The sub-modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    /// Most voices within a CPU budget per cycle.
    Voice,
    /// Smallest quantum with no glitch.
    Latency,
    /// Wakeup and render-time histograms.
    Jitter,
    /// Load toggling between a low and a high voice count.
    Switch,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Marks to run, in this order.
    pub marks: Vec<Mark>,
    /// Sample rate.
    pub rate: u32,
    /// Quantum of the voice, jitter and switch marks, frames.
    pub quantum: usize,
    /// CPU budget of the voice mark: mean render time as a share of the cycle.
    pub budget: f64,
    /// Most voices the client can render (preallocated).
    pub max_voices: usize,
    /// Voices of the latency and jitter marks (default: half the voice mark, else 32).
    pub voices: Option<usize>,
    /// Quanta the latency mark tries.
    pub quanta: Vec<usize>,
    /// Window per voice-mark point, s.
    pub point_seconds: f64,
    /// Window per latency-mark point, s.
    pub latency_seconds: f64,
    /// Jitter mark duration, s.
    pub jitter_seconds: f64,
    /// Switch mark: load phase per run (toggling, spikes), s of the card's clock.
    pub switch_seconds: f64,
    /// Switch mark: period of the toggle, ms.
    pub switch_period_ms: u64,
    /// Switch mark: low voice count.
    pub switch_low: usize,
    /// Switch mark: high voice count (default: 1.5 × the voice mark, else 256).
    pub switch_high: Option<usize>,
    /// Switch mark: the sim card's period (its fixed, and smallest, margin), frames.
    pub sim_period: usize,
    /// Switch mark: `margin_max` of the adaptive run, frames.
    pub margin_max: usize,
    /// Switch mark: a processing spike (the card stalls) every this many ms (0: none).
    pub spike_every_ms: u64,
    /// Switch mark: length of each spike, ms.
    pub spike_ms: f64,
}

impl SynthOptions {
    /// Defaults (shortened with `quick`).
    pub fn new(quick: bool) -> SynthOptions {
        SynthOptions {
            marks: vec![Mark::Voice, Mark::Latency, Mark::Jitter, Mark::Switch],
            rate: 48_000,
            quantum: 128,
            budget: 0.5,
            max_voices: if quick { 512 } else { 4096 },
            voices: None,
            quanta: vec![16, 32, 64, 128, 256, 512, 1024],
            point_seconds: if quick { 0.25 } else { 1.0 },
            latency_seconds: if quick { 0.3 } else { 2.0 },
            jitter_seconds: if quick { 1.0 } else { 10.0 },
            switch_seconds: if quick { 3.0 } else { 20.0 },
            switch_period_ms: if quick { 200 } else { 500 },
            switch_low: 4,
            switch_high: None,
            sim_period: 256,
            // 21.3 ms absorbs the 15 ms spike with a 2.67 ms quantum on top and decays
            // back in 10 + 16 s; quick: 11.3 ms against 10 ms spikes, back in 10 + 6 s.
            margin_max: if quick { 544 } else { 1024 },
            spike_every_ms: if quick { 1000 } else { 3000 },
            spike_ms: if quick { 10.0 } else { 15.0 },
        }
    }
}

// ---------------------------------------------------------------- the synthesizer

/// One voice: sawtooth → state-variable low-pass (cutoff follows the envelope) ×
/// ADSR envelope, retriggered every `note` frames.
#[derive(Debug, Clone)]
pub struct Voice {
    phase: f32,
    inc: f32,
    env: f32,
    stage: u8,
    t: u32,
    gate: u32,
    note: u32,
    attack: f32,
    decay: f32,
    sustain: f32,
    release: f32,
    low: f32,
    band: f32,
    f0: f32,
    fenv: f32,
}

const ATTACK: u8 = 0;
const DECAY: u8 = 1;
const SUSTAIN: u8 = 2;
const RELEASE: u8 = 3;

impl Voice {
    /// A voice at `freq` Hz with per-voice variation from `rng`.
    pub fn new(rate: u32, freq: f32, rng: &mut Rng) -> Voice {
        let r = rate as f32;
        let note = (r * (0.25 + 0.5 * rng.unit() as f32)) as u32;
        let pi = std::f32::consts::PI;
        Voice {
            phase: rng.unit() as f32,
            inc: freq / r,
            env: 0.0,
            stage: ATTACK,
            t: rng.below(note as u64) as u32,
            gate: note * 3 / 4,
            note,
            attack: 1.0 / (0.005 * r),
            decay: 1.0 / (0.1 * r),
            sustain: 0.6,
            release: 1.0 / (0.05 * r),
            low: 0.0,
            band: 0.0,
            f0: 2.0 * (pi * 200.0 / r).sin(),
            fenv: 2.0 * (pi * 3000.0 / r).sin(),
        }
    }

    /// Adds `out.len()` frames of this voice to `out`.
    pub fn render_add(&mut self, out: &mut [f32]) {
        for o in out.iter_mut() {
            if self.t == 0 {
                self.stage = ATTACK;
            } else if self.t == self.gate {
                self.stage = RELEASE;
            }
            self.t += 1;
            if self.t >= self.note {
                self.t = 0;
            }
            match self.stage {
                ATTACK => {
                    self.env += self.attack;
                    if self.env >= 1.0 {
                        self.env = 1.0;
                        self.stage = DECAY;
                    }
                }
                DECAY => {
                    self.env -= self.decay;
                    if self.env <= self.sustain {
                        self.env = self.sustain;
                        self.stage = SUSTAIN;
                    }
                }
                SUSTAIN => {}
                _ => self.env = (self.env - self.release).max(0.0),
            }
            self.phase += self.inc;
            if self.phase >= 1.0 {
                self.phase -= 1.0;
            }
            let saw = 2.0 * self.phase - 1.0;
            let f = self.f0 + self.fenv * self.env;
            self.low += f * self.band;
            let high = saw - self.low - 0.7 * self.band;
            self.band += f * high;
            *o += self.low * self.env * 0.05;
        }
    }
}

/// CLOCK_MONOTONIC in ns (the clock of the cycle header).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the process callback publishes (all lock-free; cumulative since creation).
#[derive(Debug, Default)]
pub struct Shared {
    /// Voices to render now (set by the control thread).
    pub voices: AtomicUsize,
    /// Frames of the latest cycle.
    pub frames: AtomicUsize,
    cycles: AtomicU64,
    render_ns: AtomicU64,
    period_ns: AtomicU64,
    voice_frames: AtomicU64,
    late: AtomicU64,
    async_cycles: AtomicU64,
    render_max: AtomicU64,
    wake_max: AtomicU64,
    render_hist: [AtomicU64; LOG2_BUCKETS],
    wake_hist: [AtomicU64; LOG2_BUCKETS],
}

/// A copy of [`Shared`]'s counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Callbacks.
    pub cycles: u64,
    /// Sum of render times, ns.
    pub render_ns: u64,
    /// Sum of the cycles' nominal periods, ns.
    pub period_ns: u64,
    /// Sum of voices × frames rendered.
    pub voice_frames: u64,
    /// Callbacks that ended after the server's deadline.
    pub late: u64,
    /// Callbacks run while the server had the client in async mode.
    pub async_cycles: u64,
    /// Render-time histogram.
    pub render: Log2Hist,
    /// Wakeup-latency histogram (callback start − cycle start).
    pub wake: Log2Hist,
}

impl Shared {
    /// Copies the counters.
    pub fn snapshot(&self) -> Snapshot {
        let h = |a: &[AtomicU64; LOG2_BUCKETS]| {
            Log2Hist::from_counts(
                &a.iter()
                    .map(|c| c.load(Ordering::Relaxed))
                    .collect::<Vec<_>>(),
            )
        };
        Snapshot {
            cycles: self.cycles.load(Ordering::Relaxed),
            render_ns: self.render_ns.load(Ordering::Relaxed),
            period_ns: self.period_ns.load(Ordering::Relaxed),
            voice_frames: self.voice_frames.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            async_cycles: self.async_cycles.load(Ordering::Relaxed),
            render: h(&self.render_hist),
            wake: h(&self.wake_hist),
        }
    }

    /// Largest render time and wakeup latency so far, ns.
    pub fn maxima(&self) -> (u64, u64) {
        (
            self.render_max.load(Ordering::Relaxed),
            self.wake_max.load(Ordering::Relaxed),
        )
    }
}

impl Snapshot {
    /// `self − earlier`.
    pub fn since(&self, e: &Snapshot) -> Snapshot {
        Snapshot {
            cycles: self.cycles - e.cycles,
            render_ns: self.render_ns - e.render_ns,
            period_ns: self.period_ns - e.period_ns,
            voice_frames: self.voice_frames - e.voice_frames,
            late: self.late - e.late,
            async_cycles: self.async_cycles - e.async_cycles,
            render: self.render.since(&e.render),
            wake: self.wake.since(&e.wake),
        }
    }

    /// Mean render time as a share of the cycle period.
    pub fn load(&self) -> f64 {
        if self.period_ns == 0 {
            return 0.0;
        }
        self.render_ns as f64 / self.period_ns as f64
    }

    /// Mean render time per cycle, ns.
    pub fn mean_render_ns(&self) -> f64 {
        if self.cycles == 0 {
            return 0.0;
        }
        self.render_ns as f64 / self.cycles as f64
    }
}

/// The process handler: renders `shared.voices` voices into output 0.
pub struct Synth {
    voices: Vec<Voice>,
    shared: Arc<Shared>,
}

impl Synth {
    /// `max` voices, preallocated, with frequencies spread over four octaves.
    pub fn new(max: usize, rate: u32, seed: u64, shared: Arc<Shared>) -> Synth {
        let mut rng = Rng::new(seed);
        let voices = (0..max)
            .map(|_| {
                let semis = rng.below(48) as f32;
                Voice::new(rate, 55.0 * (semis / 12.0).exp2(), &mut rng)
            })
            .collect();
        Synth { voices, shared }
    }

    /// Renders one cycle into `out` (zeroed by the caller); returns voices rendered.
    pub fn render(&mut self, out: &mut [f32]) -> usize {
        let n = self
            .shared
            .voices
            .load(Ordering::Relaxed)
            .min(self.voices.len());
        for v in &mut self.voices[..n] {
            v.render_add(out);
        }
        n
    }
}

impl ProcessHandler for Synth {
    fn process(&mut self, scope: &mut ProcessScope<'_>) {
        let start = now_ns();
        let frames = scope.frames();
        let period = scope.period_ns();
        let deadline = scope.deadline_ns();
        let wake = start.saturating_sub(scope.time_ns());
        let asynchronous = scope.mode() == CbMode::Async;
        let n = self.render(scope.output(0));
        let end = now_ns();
        let render = end.saturating_sub(start);
        let s = &*self.shared;
        s.frames.store(frames, Ordering::Relaxed);
        s.cycles.fetch_add(1, Ordering::Relaxed);
        s.render_ns.fetch_add(render, Ordering::Relaxed);
        s.period_ns.fetch_add(period, Ordering::Relaxed);
        s.voice_frames
            .fetch_add((n * frames) as u64, Ordering::Relaxed);
        if deadline != 0 && end > deadline {
            s.late.fetch_add(1, Ordering::Relaxed);
        }
        if asynchronous {
            s.async_cycles.fetch_add(1, Ordering::Relaxed);
        }
        s.render_max.fetch_max(render, Ordering::Relaxed);
        s.wake_max.fetch_max(wake, Ordering::Relaxed);
        s.render_hist[Log2Hist::bucket(render)].fetch_add(1, Ordering::Relaxed);
        s.wake_hist[Log2Hist::bucket(wake)].fetch_add(1, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------- the client

/// A running synth client on a private quaverd.
pub struct Client {
    conn: Connection,
    active: Option<ActiveCallback<Synth>>,
    /// Its published counters.
    pub shared: Arc<Shared>,
    /// What became of its request for real-time scheduling.
    pub realtime: String,
    node: u32,
}

fn rt_label(s: &RtStatus) -> String {
    match s {
        RtStatus::Disabled => "normal scheduling".into(),
        RtStatus::Refused(e) => format!("SCHED_FIFO refused ({e})"),
        s => s.to_string(),
    }
}

impl Client {
    /// Creates, activates and links (to `sink`) a synth client asking for `quantum`,
    /// rendering `voices` voices; waits (bounded) until its cycles have that quantum.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        daemon: &Daemon,
        sink: &str,
        quantum: usize,
        max_voices: usize,
        voices: usize,
        rate: u32,
        seed: u64,
        prio: RtPriority,
    ) -> Result<Client> {
        let mut conn = daemon.connect("quaver-bench synth")?;
        let mut p = CallbackParams::new("synth");
        p.outputs.push(PortParams::new("out"));
        p.quantum = Some(quantum as u32);
        let client = conn
            .create_callback(p)
            .context("creating the callback client")?;
        let name = client.name().to_string();
        let node = client.node();
        let shared = Arc::new(Shared::default());
        shared.voices.store(voices, Ordering::Relaxed);
        let synth = Synth::new(max_voices, rate, seed, shared.clone());
        let active = client.activate(synth, prio)?;
        let realtime = rt_label(active.realtime());
        conn.link(&name, sink)
            .with_context(|| format!("linking {name} to {sink}"))?;
        let t0 = Instant::now();
        while shared.frames.load(Ordering::Relaxed) != quantum
            || shared.cycles.load(Ordering::Relaxed) < 4
        {
            if t0.elapsed() > Duration::from_secs(5) {
                bail!(
                    "the synth client never ran at quantum {quantum} (last cycle: {} frames, \
                     {} cycles)",
                    shared.frames.load(Ordering::Relaxed),
                    shared.cycles.load(Ordering::Relaxed)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Client {
            conn,
            active: Some(active),
            shared,
            realtime,
            node,
        })
    }

    /// Misses the server counted against the client.
    pub fn xruns(&self) -> u64 {
        self.active.as_ref().map_or(0, |a| a.client().xruns())
    }

    /// Whether the server runs the client asynchronously now.
    pub fn is_async(&self) -> bool {
        self.active
            .as_ref()
            .is_some_and(|a| a.client().mode() == CbMode::Async)
    }

    /// The server's current quantum.
    pub fn server_quantum(&mut self) -> Result<u32> {
        Ok(self.conn.status()?.quantum)
    }

    /// The server's status (quantum, cycles, device counters).
    pub fn status(&mut self) -> Result<StatusInfo> {
        Ok(self.conn.status()?)
    }

    /// True once the client's process thread has ended.
    pub fn finished(&self) -> bool {
        self.active.as_ref().is_some_and(|a| a.is_finished())
    }

    /// Measures a window of `secs` at the current voice count.
    pub fn window(&mut self, secs: f64) -> Result<Window> {
        let s0 = self.shared.snapshot();
        let x0 = self.xruns();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let d = self.shared.snapshot().since(&s0);
        let glitches = self.xruns() - x0;
        if self.finished() {
            bail!("the synth client's process thread ended (server gone?)");
        }
        Ok(Window {
            voices: self.shared.voices.load(Ordering::Relaxed),
            quantum: self.shared.frames.load(Ordering::Relaxed),
            glitches,
            went_async: self.is_async(),
            stats: d,
        })
    }

    /// Deactivates and destroys the client.
    pub fn stop(mut self) -> Result<()> {
        if let Some(a) = self.active.take() {
            drop(a.deactivate());
        }
        self.conn.destroy_stream(self.node)?;
        Ok(())
    }
}

/// One measurement window.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// Voices rendered.
    pub voices: usize,
    /// Frames per cycle.
    pub quantum: usize,
    /// Misses the server counted against the client in the window.
    pub glitches: u64,
    /// Whether the server ran the client asynchronously at the end of the window.
    pub went_async: bool,
    /// The callback's own counters over the window.
    pub stats: Snapshot,
}

// ---------------------------------------------------------------- the marks

/// Voice mark result.
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct LatencyPoint {
    /// Quantum requested.
    pub requested: usize,
    /// The window (or why there is none).
    pub window: Option<Window>,
    /// Error, if the point could not run.
    pub error: Option<String>,
}

/// Jitter mark result.
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
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

/// The benchmark's client priority (one below quaverd's, when permitted).
pub fn priority(ctx: &Ctx) -> RtPriority {
    let p = crate::rt::client_priority(ctx.realtime_priority);
    if p > 0 {
        RtPriority::Fifo(p)
    } else {
        RtPriority::Off
    }
}

/// Runs the marks: voice, latency and jitter against one private quaverd on the null
/// sink (started when the first of them runs), switch on quaverds of its own
/// ([`crate::switch`]).
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
                res.voice = Some(VoiceMark {
                    quantum: o.quantum,
                    budget: o.budget,
                    voices: good,
                    capped: bad.is_none(),
                    points,
                    realtime,
                });
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
                res.switch = Some(crate::switch::run(ctx, o, high)?);
                pb.inc(2);
            }
        }
    }
    pb.finish_and_clear();
    Ok(res)
}

fn default_voices(o: &SynthOptions, res: &SynthResults) -> usize {
    o.voices
        .unwrap_or_else(|| res.voice.as_ref().map_or(32, |v| (v.voices / 2).max(1)))
        .min(o.max_voices)
}

// ---------------------------------------------------------------- the report

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn b(h: &Log2Hist, p: f64) -> String {
    fmt_bounds(h.percentile(p))
}

/// Tables, Markdown and plots.
pub fn render(r: &SynthResults) -> ModeOutput {
    let mut summary = Table::new(&["mark", "setting", "result", "glitches", "notes"]);
    let mut md = String::new();
    let ms = |q: usize| q as f64 * 1000.0 / r.rate as f64;
    md.push_str(&format!(
        "A callback client renders N voices (sawtooth → SVF low-pass following an ADSR \
         envelope, retriggered) in its process callback into quaverd's null sink at {} Hz. \
         Render time and wakeup latency are measured inside the callback; glitches are the \
         misses quaverd counted against the client.\n\n",
        r.rate
    ));
    let mut plots = Vec::new();
    if let Some(v) = &r.voice {
        summary.row(vec![
            "voice".into(),
            format!(
                "quantum {} ({:.2} ms), budget {}",
                v.quantum,
                ms(v.quantum),
                pct(v.budget)
            ),
            format!("{}{} voices", if v.capped { "≥ " } else { "" }, v.voices),
            v.points.iter().map(|p| p.glitches).sum::<u64>().to_string(),
            v.realtime.clone(),
        ]);
        md.push_str(&format!(
            "## Voice mark\n\n**{}{} voices** within {} of each {}-frame cycle (mean render \
             time){}. Client: {}.\n\n",
            if v.capped { "≥ " } else { "" },
            v.voices,
            pct(v.budget),
            v.quantum,
            if v.capped {
                " — the search stopped at --max-voices"
            } else {
                ""
            },
            v.realtime
        ));
        let mut t = Table::new(&[
            "voices",
            "cycles",
            "mean load",
            "mean render",
            "render p99",
            "ns per voice-frame",
            "glitches",
            "late",
        ]);
        for p in &v.points {
            let s = &p.stats;
            t.row(vec![
                p.voices.to_string(),
                s.cycles.to_string(),
                pct(s.load()),
                fmt_ns(s.mean_render_ns()),
                b(&s.render, 99.0),
                if s.voice_frames > 0 {
                    format!("{:.2}", s.render_ns as f64 / s.voice_frames as f64)
                } else {
                    "–".into()
                },
                p.glitches.to_string(),
                s.late.to_string(),
            ]);
        }
        md.push_str(&t.markdown());
        md.push_str("\n{plot:voice-load}\n\n");
        let pts: Vec<(f64, f64)> = v
            .points
            .iter()
            .map(|p| (p.voices as f64, p.stats.load() * 100.0))
            .collect();
        let budget: Vec<(f64, f64)> = v
            .points
            .iter()
            .map(|p| (p.voices as f64, v.budget * 100.0))
            .collect();
        plots.push((
            "voice-load".to_string(),
            line_plot(
                "Voice mark: mean render time per cycle",
                "voices",
                "% of the cycle",
                &[
                    Series::new("load", pts),
                    Series::new("budget", budget).dashed(),
                ],
                true,
                true,
            ),
        ));
    }
    if let Some(l) = &r.latency {
        summary.row(vec![
            "latency".into(),
            format!("{} voices", l.voices),
            match (l.quantum, l.ms) {
                (Some(q), Some(m)) => format!("{q} frames ({m:.2} ms)"),
                _ => "every quantum glitched".into(),
            },
            l.points
                .iter()
                .filter_map(|p| p.window.as_ref())
                .map(|w| w.glitches)
                .sum::<u64>()
                .to_string(),
            String::new(),
        ]);
        md.push_str(&format!(
            "## Latency mark\n\nSmallest quantum with no glitch for {} voices: **{}**. A \
             fresh client per quantum.\n\n",
            l.voices,
            match (l.quantum, l.ms) {
                (Some(q), Some(m)) => format!("{q} frames = {m:.2} ms"),
                _ => "none".into(),
            }
        ));
        let mut t = Table::new(&[
            "requested",
            "ran at",
            "cycles",
            "mean load",
            "render max",
            "wake p99",
            "glitches",
            "async",
            "late",
        ]);
        for p in &l.points {
            match &p.window {
                Some(w) => t.row(vec![
                    p.requested.to_string(),
                    w.quantum.to_string(),
                    w.stats.cycles.to_string(),
                    pct(w.stats.load()),
                    fmt_bounds(w.stats.render.max_bucket()),
                    b(&w.stats.wake, 99.0),
                    w.glitches.to_string(),
                    if w.went_async { "yes" } else { "no" }.into(),
                    w.stats.late.to_string(),
                ]),
                None => t.row(vec![
                    p.requested.to_string(),
                    format!("failed: {}", p.error.clone().unwrap_or_default()),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
            }
        }
        md.push_str(&t.markdown());
        md.push('\n');
    }
    if let Some(j) = &r.jitter {
        let w = &j.window;
        summary.row(vec![
            "jitter".into(),
            format!("{} voices, quantum {}", w.voices, w.quantum),
            format!(
                "wake p99 {}, render p99 {}",
                b(&w.stats.wake, 99.0),
                b(&w.stats.render, 99.0)
            ),
            w.glitches.to_string(),
            j.realtime.clone(),
        ]);
        md.push_str(&format!(
            "## Jitter mark\n\n{} voices at quantum {} ({:.2} ms), {} callbacks, client {}. \
             Wakeup = callback start − cycle start (the server's timestamp, same clock); \
             render = the voices' rendering. Log2 buckets, shown by their upper bound.\n\n",
            w.voices,
            w.quantum,
            ms(w.quantum),
            w.stats.cycles,
            j.realtime
        ));
        let mut t = Table::new(&["", "p50", "p99", "p99.9", "max bucket", "max (exact)"]);
        for (name, h, max) in [
            ("wakeup", &w.stats.wake, j.wake_max_ns),
            ("render", &w.stats.render, j.render_max_ns),
        ] {
            t.row(vec![
                name.into(),
                b(h, 50.0),
                b(h, 99.0),
                b(h, 99.9),
                fmt_bounds(h.max_bucket()),
                fmt_ns(max as f64),
            ]);
        }
        md.push_str(&t.markdown());
        md.push_str(&format!(
            "\nGlitches: {}; callbacks after the deadline: {}.\n\n{{plot:jitter}}\n\n",
            w.glitches, w.stats.late
        ));
        // One category axis covering both.
        let mut cats: Vec<String> = Vec::new();
        let mut all: Vec<usize> = Vec::new();
        for h in [&w.stats.wake, &w.stats.render] {
            for (i, &c) in h.counts.iter().enumerate() {
                if c > 0 && !all.contains(&i) {
                    all.push(i);
                }
            }
        }
        all.sort_unstable();
        if let (Some(&lo), Some(&hi)) = (all.first(), all.last()) {
            let pick = |h: &Log2Hist| -> Vec<f64> {
                let t = h.total().max(1) as f64;
                (lo..=hi)
                    .map(|i| h.counts.get(i).copied().unwrap_or(0) as f64 * 100.0 / t)
                    .collect()
            };
            for i in lo..=hi {
                cats.push(format!(
                    "<{}",
                    fmt_ns(Log2Hist::bucket_bounds(i).upper as f64)
                ));
            }
            plots.push((
                "jitter".to_string(),
                bar_chart(
                    "Jitter mark: wakeup latency and render time",
                    "log2 bucket",
                    "% of callbacks",
                    &cats,
                    &[
                        ("wakeup".into(), pick(&w.stats.wake)),
                        ("render".into(), pick(&w.stats.render)),
                    ],
                ),
            ));
        }
    }
    if let Some(sw) = &r.switch {
        crate::switch::render(sw, &mut summary, &mut md, &mut plots);
    }
    let results = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
    ModeOutput {
        results,
        markdown: md,
        plots,
        summary,
        extra: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render_ns(voices: usize) -> u64 {
        let shared = Arc::new(Shared::default());
        shared.voices.store(voices, Ordering::Relaxed);
        let mut s = Synth::new(256, 48_000, 1, shared);
        let mut out = vec![0.0f32; 256];
        // Warm up, then the best of a few runs.
        let mut best = u64::MAX;
        for _ in 0..20 {
            out.fill(0.0);
            let t = now_ns();
            s.render(&mut out);
            best = best.min(now_ns() - t);
        }
        assert!(out.iter().all(|x| x.is_finite()));
        best
    }

    #[test]
    fn voices_make_sound_and_stay_bounded() {
        let shared = Arc::new(Shared::default());
        shared.voices.store(16, Ordering::Relaxed);
        let mut s = Synth::new(16, 48_000, 3, shared);
        let mut out = vec![0.0f32; 48_000];
        s.render(&mut out);
        let peak = out.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(peak > 0.01 && peak < 16.0, "peak {peak}");
        assert!(out.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn more_voices_take_longer_to_render() {
        // Work scales with voices: 256 voices cost more than 1 (a 256× difference in
        // work, so no scheduling noise can invert it).
        assert!(render_ns(256) > render_ns(1));
    }

    #[test]
    fn snapshots_difference_and_load() {
        let a = Snapshot {
            cycles: 10,
            render_ns: 100,
            period_ns: 1000,
            ..Snapshot::default()
        };
        let b = Snapshot {
            cycles: 30,
            render_ns: 600,
            period_ns: 3000,
            ..Snapshot::default()
        };
        let d = b.since(&a);
        assert_eq!(d.cycles, 20);
        assert!((d.load() - 0.25).abs() < 1e-12);
        assert!((d.mean_render_ns() - 25.0).abs() < 1e-12);
    }
}
