//! The synthesizer the callback renders: voices, their lock-free counters and the
//! process handler.

use crate::report::stats::since_by_field;
use crate::report::stats::{LOG2_BUCKETS, Log2Hist};
use crate::tools::rng::Rng;
use quaver_client::callback::{Mode as CbMode, ProcessHandler, ProcessScope};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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
    pub(super) cycles: AtomicU64,
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

since_by_field!(Snapshot {
    cycles,
    render_ns,
    period_ns,
    voice_frames,
    late,
    async_cycles,
    render,
    wake
});

impl Snapshot {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stats::Since;

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
