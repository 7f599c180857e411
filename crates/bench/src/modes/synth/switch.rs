//! The synth switch mark on the simulated card: the voice count toggles between a low
//! and a high value while the card stalls the real-time thread every few seconds (a
//! processing spike), once with a fixed safety margin and once with the adaptive one.
//!
//! quaverd's adaptive control is the device safety margin (watermark, see
//! `crates/devices/src/margin.rs`): on an underrun it jumps from `period` to
//! `margin_max`, holds 10 s, then decays 1 ms per second. The quantum stays fixed. Each
//! run gets a fresh `quaverd --device sim:rate=R,period=P,stall=C:MS,…` ("off") or the
//! same plus `margin_max=M` ("on"); the spikes are the sim card's `stall=CYCLE:MS`
//! faults at cycles computed from the quantum and rate, so both runs see the same
//! spikes at the same points of the card's clock. The bench polls `status` (quantum,
//! cycles, the card's underruns and margin) every 25 ms and attributes underruns to
//! spikes by the cycle counter.

use crate::Ctx;
use crate::modes::synth::client::{Client, priority};
use crate::modes::synth::options::SynthOptions;
use crate::report::stats::Since;
use crate::tools::daemon::{Daemon, DaemonSpec};
use anyhow::{Result, bail};
use quaver_client::quaver_protocol::message::StatusInfo;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The sim card's ring (its default `buffer`): bounds period, margin and quantum.
pub const SIM_BUFFER_FRAMES: usize = 8192;

/// The margin policy's hold after an underrun or near miss (`margin::HOLD_AFTER_UNDERRUN_US`).
pub const MARGIN_HOLD_S: f64 = 10.0;

/// The margin policy's decay: one step of this many ms per second (`margin::DECAY_STEP_US`).
pub const MARGIN_DECAY_STEP_MS: f64 = 1.0;

/// Most stall faults one spec carries: the card scans its fault list on every wait.
pub const MAX_SPIKES: usize = 256;

/// How often the bench polls quaverd's status during a run.
pub const POLL: Duration = Duration::from_millis(25);

/// The spikes of a switch run, in the card's cycles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpikePlan {
    /// Sample rate, Hz.
    pub rate: u32,
    /// Quantum, frames (one card cycle).
    pub quantum: usize,
    /// Length of each spike, ms.
    pub spike_ms: f64,
    /// Time between spikes, ms (0: no spikes).
    pub every_ms: u64,
    /// Time of the first spike after the card starts, ms.
    pub lead_ms: u64,
    /// Cycles (0 = the card's first wait) that stall.
    pub cycles: Vec<u64>,
    /// The load phase ends when the card has run this many cycles.
    pub load_end_cycle: u64,
}

impl SpikePlan {
    /// Spikes every `every_ms` from `lead_ms` on, all at least half a second before the
    /// load phase of `load_seconds` (counted on the card's clock from its start) ends.
    pub fn new(
        rate: u32,
        quantum: usize,
        spike_ms: f64,
        every_ms: u64,
        lead_ms: u64,
        load_seconds: f64,
    ) -> Result<SpikePlan> {
        if rate == 0 || quantum == 0 {
            bail!("rate and quantum must be positive");
        }
        if !(spike_ms.is_finite() && spike_ms >= 0.0) {
            bail!("--spike-ms must be a non-negative number");
        }
        let cycle_of = |ms: f64| (ms * rate as f64 / (1000.0 * quantum as f64)).round() as u64;
        let load_end_cycle = cycle_of(load_seconds * 1000.0).max(1);
        let mut cycles = Vec::new();
        if every_ms > 0 && spike_ms > 0.0 {
            let last_ms = load_seconds * 1000.0 - 500.0;
            let mut t = lead_ms as f64;
            while t <= last_ms {
                cycles.push(cycle_of(t));
                if cycles.len() > MAX_SPIKES {
                    bail!(
                        "more than {MAX_SPIKES} spikes: raise --spike-every-ms or shorten the run"
                    );
                }
                t += every_ms as f64;
            }
        }
        Ok(SpikePlan {
            rate,
            quantum,
            spike_ms,
            every_ms,
            lead_ms,
            cycles,
            load_end_cycle,
        })
    }

    /// The `stall=CYCLE:MS` keys, comma-separated (empty without spikes).
    pub fn stall_keys(&self) -> String {
        self.cycles
            .iter()
            .map(|c| format!("stall={c}:{}", self.spike_ms))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The `--device` spec of one run: the sim card with the spikes, and `margin_max` for
/// the adaptive run.
pub fn device_spec(plan: &SpikePlan, period: usize, margin_max: Option<usize>) -> String {
    let mut s = format!("sim:rate={},period={period}", plan.rate);
    if let Some(m) = margin_max {
        s.push_str(&format!(",margin_max={m}"));
    }
    let stalls = plan.stall_keys();
    if !stalls.is_empty() {
        s.push(',');
        s.push_str(&stalls);
    }
    s
}

/// Longest tail an adaptive margin from `max` down to `min` frames needs: the hold,
/// then one step per second.
pub fn decay_seconds(rate: u32, min: usize, max: usize) -> f64 {
    let step = (rate as f64 * MARGIN_DECAY_STEP_MS / 1000.0).max(1.0);
    MARGIN_HOLD_S + (max.saturating_sub(min) as f64 / step).ceil()
}

/// One status poll: `[s since the run started, card cycles, margin frames, card
/// underruns, client misses]` (an array in the JSON record).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample(pub f64, pub u64, pub u64, pub u64, pub u64);

impl Sample {
    fn cycles(&self) -> u64 {
        self.1
    }
    fn underruns(&self) -> u64 {
        self.3
    }
}

/// What became of one planned spike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpikeHit {
    /// The card cycle that stalled.
    pub cycle: u64,
    /// When the polls first saw that cycle completed, s since the run started (None:
    /// not reached, or before the first poll).
    pub at_s: Option<f64>,
    /// Whether the card's underrun count rose around it: between the last poll before
    /// the cycle began and the first poll after the next cycle completed (the counters
    /// are published after the cycle counter). None when the polls do not bracket it.
    pub underrun: Option<bool>,
}

/// Attributes underruns to spikes by the cycle counter of the polls.
pub fn attribute(samples: &[Sample], spikes: &[u64]) -> Vec<SpikeHit> {
    spikes
        .iter()
        .map(|&c| {
            let seen = samples.iter().find(|s| s.cycles() > c);
            let before = samples.iter().rev().find(|s| s.cycles() < c);
            let after = samples.iter().find(|s| s.cycles() >= c + 2);
            SpikeHit {
                cycle: c,
                at_s: seen.filter(|_| before.is_some()).map(|s| s.0),
                underrun: match (before, after) {
                    (Some(b), Some(a)) => Some(a.underruns() > b.underruns()),
                    _ => None,
                },
            }
        })
        .collect()
}

/// One switch-mark run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SwitchRun {
    /// "on" (adaptive margin) or "off" (fixed margin).
    pub adaptive: String,
    /// What ran, in words.
    pub label: String,
    /// The `--device` spec quaverd ran with.
    pub device: String,
    /// Low voice count.
    pub low: usize,
    /// High voice count.
    pub high: usize,
    /// Toggle period, ms.
    pub period_ms: u64,
    /// Seconds run in all (load + tail).
    pub seconds: f64,
    /// Seconds of the load phase (toggling, spikes).
    pub load_seconds: f64,
    /// Seconds of the tail (low voices, no spikes).
    pub tail_seconds: f64,
    /// Client misses during low phases of the load.
    pub glitches_low: u64,
    /// Client misses during high phases of the load.
    pub glitches_high: u64,
    /// Client misses during the tail.
    pub glitches_tail: u64,
    /// Callbacks ending after the deadline.
    pub late: u64,
    /// Whether the server ran the client asynchronously at the end.
    pub went_async: bool,
    /// Mean load during the high phases (share of the cycle).
    pub high_load: f64,
    /// The card cycle at which the client was ready (the run's start).
    pub start_cycle: u64,
    /// Every planned spike, with its underrun.
    pub spikes: Vec<SpikeHit>,
    /// Spikes whose cycle the card ran during the load phase.
    pub spikes_injected: u64,
    /// Spikes that fired before the run started (before the client was ready).
    pub spikes_before_start: u64,
    /// Whether a spike is longer than the most the card can have queued with its
    /// minimum margin (quantum + period): then it underruns with certainty.
    pub spike_exceeds_min_headroom: bool,
    /// Card underruns from daemon start to the end of the load phase.
    pub underruns_load: u64,
    /// Card underruns during the tail.
    pub underruns_tail: u64,
    /// Card overruns in all.
    pub overruns: u64,
    /// Smallest margin (the sim card's period), frames.
    pub margin_min_frames: usize,
    /// Largest margin configured (= the minimum for a fixed margin), frames.
    pub margin_max_frames: usize,
    /// Largest margin seen, frames.
    pub margin_peak_frames: u64,
    /// Margin at the end of the load phase, frames.
    pub margin_load_end_frames: u64,
    /// Quantum + that margin, ms: the latency the control held under load.
    pub latency_load_end_ms: f64,
    /// How often the margin changed (the card's count).
    pub margin_changes: u64,
    /// Seconds after the load ended until the margin was first back at its minimum
    /// (None: it was not by the end of the tail).
    pub margin_first_at_min_after_s: Option<f64>,
    /// Seconds after the load ended from which the margin stayed at its minimum to the
    /// end of the tail (None: an underrun in the tail raised it again, or it never got
    /// there).
    pub margin_at_min_after_s: Option<f64>,
    /// Quantum quaverd ended at, frames.
    pub final_quantum: u32,
    /// Margin quaverd ended at, frames.
    pub final_margin_frames: u64,
    /// Quantum + margin at the end, ms: the latency the control ends at.
    pub final_latency_ms: f64,
    /// Every quantum quaverd ran at (changes only).
    pub quanta_seen: Vec<u32>,
    /// (s, cumulative client misses) at every toggle.
    pub timeline: Vec<(f64, u64)>,
    /// Every poll (see [`Sample`]).
    pub samples: Vec<Sample>,
}

/// What the switch mark measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SwitchMark {
    /// What the adaptive control is.
    pub control: String,
    /// The spikes both runs got.
    pub plan: SpikePlan,
    /// The sim card's period (the minimum margin), frames.
    pub period_frames: usize,
    /// `margin_max` of the adaptive run, frames.
    pub margin_max_frames: usize,
    /// Client scheduling.
    pub realtime: String,
    /// The runs: adaptive on, then off.
    pub runs: Vec<SwitchRun>,
}

fn card(st: &StatusInfo) -> Option<&quaver_client::quaver_protocol::message::DeviceStatus> {
    st.devices
        .iter()
        .find(|d| d.name == "sim")
        .or(st.devices.first())
}

/// Runs both switch runs, each on its own quaverd.
pub fn run(ctx: &mut Ctx, o: &SynthOptions, high: usize) -> Result<SwitchMark> {
    let q = o.quantum;
    let period = o.sim_period;
    let mmax = o.margin_max;
    if period == 0 || period + q > SIM_BUFFER_FRAMES {
        bail!(
            "--sim-period {period} and --quantum {q} must fit the sim card's {SIM_BUFFER_FRAMES}-frame ring"
        );
    }
    if mmax <= period || mmax + q > SIM_BUFFER_FRAMES {
        bail!(
            "--margin-max {mmax} must be above --sim-period {period} and fit the ring with the \
             quantum ({} frames at most)",
            SIM_BUFFER_FRAMES - q
        );
    }
    let lead_ms = if ctx.quick { 1000 } else { 2000 };
    let plan = SpikePlan::new(
        o.rate,
        q,
        o.spike_ms,
        o.spike_every_ms,
        lead_ms,
        o.switch_seconds,
    )?;
    let fixed_headroom_ms = (q + period) as f64 * 1000.0 / o.rate as f64;
    if !plan.cycles.is_empty() && o.spike_ms <= fixed_headroom_ms {
        ctx.note(format!(
            "synth switch: spikes of {} ms are not longer than the fixed margin's headroom \
             (quantum + period = {fixed_headroom_ms:.2} ms), so they need not underrun",
            o.spike_ms
        ));
    }
    ctx.note(
        "synth switch: quaverd's adaptive control is the device safety margin (watermark), \
         not the quantum: the switch mark runs on the simulated card with a fixed margin \
         ('off') and with margin_max ('on'); the quantum is the same in both",
    );
    let mut runs = Vec::new();
    let mut realtime = String::new();
    for adaptive in ["on", "off"] {
        let margin_max = (adaptive == "on").then_some(mmax);
        let spec = device_spec(&plan, period, margin_max);
        let ms = |f: usize| f as f64 * 1000.0 / o.rate as f64;
        let label = match margin_max {
            Some(m) => format!(
                "adaptive margin {period}…{m} frames ({:.2}…{:.2} ms)",
                ms(period),
                ms(m)
            ),
            None => format!("fixed margin {period} frames ({:.2} ms)", ms(period)),
        };
        let dspec = DaemonSpec {
            devices: vec![spec.clone()],
            rate: Some(o.rate),
            quantum: Some(q),
            quantum_min: Some(q),
            quantum_max: Some(q),
            ..DaemonSpec::default()
        };
        let mut daemon = ctx.start_daemon(dspec)?;
        let r = one_run(ctx, &daemon, o, &plan, high, adaptive, label, spec);
        let stopped = daemon.stop();
        let (run, rt) = r.map_err(|e| e.context(format!("quaverd log:\n{}", daemon.log_tail())))?;
        stopped?;
        realtime = rt;
        runs.push(run);
    }
    Ok(SwitchMark {
        control: crate::modes::synth::options::ADAPTIVE_CONTROL.into(),
        plan,
        period_frames: period,
        margin_max_frames: mmax,
        realtime,
        runs,
    })
}

/// Status polls of one run: each adds a sample and notes a new quantum.
struct Poller {
    t0: Instant,
    x0: u64,
    samples: Vec<Sample>,
    quanta_seen: Vec<u32>,
}

impl Poller {
    fn poll(&mut self, c: &mut Client) -> Result<StatusInfo> {
        let st = c.status()?;
        let d = card(&st);
        self.samples.push(Sample(
            self.t0.elapsed().as_secs_f64(),
            st.cycles,
            d.map_or(0, |d| d.margin_frames),
            d.map_or(0, |d| d.underruns),
            c.xruns() - self.x0,
        ));
        if self.quanta_seen.last() != Some(&st.quantum) {
            self.quanta_seen.push(st.quantum);
        }
        Ok(st)
    }
}

/// The tail: polls until the margin has been at its minimum (`period`) for `settle`, or
/// for `tail_max`; returns the last status and when (s into the tail) the margin was
/// back at its minimum for good, and first.
fn tail(
    c: &mut Client,
    poller: &mut Poller,
    period: usize,
    settle: Duration,
    tail_max: Duration,
) -> Result<(StatusInfo, Option<f64>, Option<f64>)> {
    let tail_t0 = Instant::now();
    let mut at_min_since: Option<Instant> = None;
    let mut at_min_after = None;
    let mut first_at_min_after = None;
    loop {
        std::thread::sleep(POLL);
        let st = poller.poll(c)?;
        let m = card(&st).map_or(0, |d| d.margin_frames);
        if m as usize <= period {
            if at_min_since.is_none() {
                at_min_since = Some(Instant::now());
                at_min_after = Some(tail_t0.elapsed().as_secs_f64());
                first_at_min_after = first_at_min_after.or(at_min_after);
            }
        } else {
            at_min_since = None;
            at_min_after = None;
        }
        if at_min_since.is_some_and(|t| t.elapsed() >= settle) || tail_t0.elapsed() >= tail_max {
            return Ok((st, at_min_after, first_at_min_after));
        }
        if c.finished() {
            bail!("the synth client's process thread ended (server gone?)");
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    ctx: &Ctx,
    daemon: &Daemon,
    o: &SynthOptions,
    plan: &SpikePlan,
    high: usize,
    adaptive: &str,
    label: String,
    device: String,
) -> Result<(SwitchRun, String)> {
    let q = o.quantum;
    let period = o.sim_period;
    let max = if adaptive == "on" {
        o.margin_max
    } else {
        period
    };
    let mut c = Client::start(
        daemon,
        "sim-sink",
        q,
        o.max_voices,
        o.switch_low,
        o.rate,
        ctx.seed,
        priority(ctx),
    )?;
    let realtime = c.realtime.clone();
    let t0 = Instant::now();
    let x0 = c.xruns();
    let s0 = c.shared.snapshot();
    let mut poller = Poller {
        t0,
        x0,
        samples: Vec::new(),
        quanta_seen: Vec::new(),
    };
    let first = poller.poll(&mut c)?;
    let start_cycle = first.cycles;
    // Load phase: toggle until the card has run the planned cycles (bounded in time
    // should the card stop).
    let limit = Duration::from_secs_f64(o.switch_seconds + 10.0);
    let toggle = Duration::from_millis(o.switch_period_ms.max(10));
    let (mut glitches_low, mut glitches_high) = (0, 0);
    let (mut high_render, mut high_period) = (0u64, 0u64);
    let mut timeline = vec![(0.0, 0)];
    let mut is_high = false;
    let mut cycles = start_cycle;
    let mut st = first;
    while cycles < plan.load_end_cycle && t0.elapsed() < limit {
        is_high = !is_high;
        c.shared
            .voices
            .store(if is_high { high } else { o.switch_low }, Ordering::Relaxed);
        let px = c.xruns();
        let ps = c.shared.snapshot();
        let pt = Instant::now();
        while pt.elapsed() < toggle && cycles < plan.load_end_cycle {
            std::thread::sleep(POLL);
            st = poller.poll(&mut c)?;
            cycles = st.cycles;
        }
        let g = c.xruns() - px;
        if is_high {
            glitches_high += g;
            let d = c.shared.snapshot().since(&ps);
            high_render += d.render_ns;
            high_period += d.period_ns;
        } else {
            glitches_low += g;
        }
        timeline.push((t0.elapsed().as_secs_f64(), c.xruns() - x0));
        if c.finished() {
            bail!("the synth client's process thread ended (server gone?)");
        }
    }
    c.shared.voices.store(o.switch_low, Ordering::Relaxed);
    let load_seconds = t0.elapsed().as_secs_f64();
    let load_card = card(&st).cloned();
    let underruns_load = load_card.as_ref().map_or(0, |d| d.underruns);
    let margin_load_end = load_card.as_ref().map_or(0, |d| d.margin_frames);
    let x_load = c.xruns();
    // Tail: low voices, no spikes, until the margin has been at its minimum for a
    // while, or as long as the policy can take to get there.
    let settle = Duration::from_secs_f64(if ctx.quick { 1.0 } else { 2.0 });
    let tail_max = Duration::from_secs_f64(decay_seconds(o.rate, period, max) + 5.0);
    let tail_t0 = Instant::now();
    let (st, at_min_after, first_at_min_after) =
        tail(&mut c, &mut poller, period, settle, tail_max)?;
    let tail_seconds = tail_t0.elapsed().as_secs_f64();
    let d = c.shared.snapshot().since(&s0);
    let went_async = c.is_async();
    let glitches_tail = c.xruns() - x_load;
    let end = card(&st).cloned();
    let final_margin = end.as_ref().map_or(0, |d| d.margin_frames);
    let final_quantum = st.quantum;
    c.stop()?;
    let spikes = attribute(&poller.samples, &plan.cycles);
    let ms = |f: f64| f * 1000.0 / o.rate as f64;
    let run = SwitchRun {
        adaptive: adaptive.into(),
        label,
        device,
        low: o.switch_low,
        high,
        period_ms: o.switch_period_ms,
        seconds: t0.elapsed().as_secs_f64(),
        load_seconds,
        tail_seconds,
        glitches_low,
        glitches_high,
        glitches_tail,
        late: d.late,
        went_async,
        high_load: if high_period == 0 {
            0.0
        } else {
            high_render as f64 / high_period as f64
        },
        start_cycle,
        spikes_injected: plan.cycles.iter().filter(|&&s| s < cycles).count() as u64,
        spikes_before_start: plan.cycles.iter().filter(|&&s| s < start_cycle).count() as u64,
        spike_exceeds_min_headroom: ms((q + period) as f64) < plan.spike_ms,
        spikes,
        underruns_load,
        underruns_tail: end
            .as_ref()
            .map_or(0, |d| d.underruns)
            .saturating_sub(underruns_load),
        overruns: end.as_ref().map_or(0, |d| d.overruns),
        margin_min_frames: period,
        margin_max_frames: max,
        margin_peak_frames: poller.samples.iter().map(|s| s.2).max().unwrap_or(0),
        margin_load_end_frames: margin_load_end,
        latency_load_end_ms: ms((q as u64 + margin_load_end) as f64),
        margin_changes: end.as_ref().map_or(0, |d| d.margin_changes),
        margin_first_at_min_after_s: first_at_min_after,
        margin_at_min_after_s: at_min_after,
        final_quantum,
        final_margin_frames: final_margin,
        final_latency_ms: ms((final_quantum as u64 + final_margin) as f64),
        quanta_seen: poller.quanta_seen,
        timeline,
        samples: poller.samples,
    };
    Ok((run, realtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spikes_land_on_cycles_of_the_card_clock() {
        // 48 kHz, quantum 128: 375 cycles per second.
        let p = SpikePlan::new(48_000, 128, 15.0, 3000, 2000, 20.0).unwrap();
        assert_eq!(p.cycles, vec![750, 1875, 3000, 4125, 5250, 6375]);
        assert_eq!(p.load_end_cycle, 7500);
        assert_eq!(
            device_spec(&p, 256, Some(1024)),
            "sim:rate=48000,period=256,margin_max=1024,stall=750:15,stall=1875:15,\
             stall=3000:15,stall=4125:15,stall=5250:15,stall=6375:15"
        );
        let none = SpikePlan::new(48_000, 128, 15.0, 0, 2000, 20.0).unwrap();
        assert!(none.cycles.is_empty());
        assert_eq!(device_spec(&none, 256, None), "sim:rate=48000,period=256");
        // Too many spikes for one spec.
        assert!(SpikePlan::new(48_000, 128, 1.0, 1, 0, 20.0).is_err());
    }

    #[test]
    fn decay_time_follows_the_policy_constants() {
        // 1024 → 256 frames at 48 kHz: 16 steps of 48 frames after the 10 s hold.
        assert_eq!(decay_seconds(48_000, 256, 1024), 26.0);
        assert_eq!(decay_seconds(48_000, 256, 256), 10.0);
    }

    #[test]
    fn underruns_are_attributed_by_the_cycle_counter() {
        let s = |t: f64, cycles: u64, underruns: u64| Sample(t, cycles, 256, underruns, 0);
        let samples = vec![
            s(0.0, 90, 0),
            s(0.1, 98, 0),
            // Spike at 100: the poll sees cycle 100 done but not yet its counters.
            s(0.2, 101, 0),
            s(0.3, 110, 1),
            // Spike at 120 absorbed.
            s(0.4, 119, 1),
            s(0.5, 125, 1),
            s(0.6, 130, 1),
        ];
        let hits = attribute(&samples, &[100, 120, 95, 500, 10]);
        assert_eq!(hits[0].underrun, Some(true));
        assert_eq!(hits[0].at_s, Some(0.2));
        assert_eq!(hits[1].underrun, Some(false));
        assert_eq!(hits[2].underrun, Some(false));
        // Not reached, and before the first poll.
        assert_eq!(hits[3].underrun, None);
        assert_eq!(hits[3].at_s, None);
        assert_eq!(hits[4].underrun, None);
    }
}
