//! The event-latency part, in-process: an engine over the simulated card plays
//! music into a big buffer, a click starts meanwhile, and the DAC probe says when
//! it is heard.

use crate::Ctx;
use crate::modes::bigbuf::options::*;
use crate::report::stats::Summary;
use crate::tools::clock::monotonic_ns;
use crate::tools::rng::Rng;
use crate::tools::rt;
use anyhow::{Result, anyhow, bail};
use quaver_devices::{DacProbe, SimCard, SimConfig};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::stream::{FrameSource, PlaybackAdapter, StreamFormat};
use quaver_engine::{Engine, EngineConfig, NodeId, NodeKind, NodeSpec, RtOutcome};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

pub(crate) fn event_part(
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
        let r = crate::report::progress::run_with_progress(pb, base, |done| {
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
