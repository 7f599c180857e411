//! What a synth run is asked to do: its marks and their parameters.

use serde::Serialize;

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
