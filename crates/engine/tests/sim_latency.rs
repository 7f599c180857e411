//! Round-trip latency through the simulated card's loopback, measured by playing an
//! impulse through the graph and finding it in the captured stream, checked against the
//! theoretical value (quantum + period) at quanta 64, 256 and 1024 (virtual clock: exact
//! and instant).

use quaver_devices::sim::{SimCard, SimConfig, VirtualClock};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{CycleInfo, Engine, EngineConfig, NodeKind, NodeSpec, Processor, RtEvent};
use std::sync::{Arc, Mutex};

/// Engine frame index of the first frame of this cycle (the quantum is constant here).
fn frame0(cx: &CycleInfo) -> u64 {
    cx.cycle * cx.frames as u64
}

/// Emits one full-scale sample at engine frame `at`, silence elsewhere.
struct Impulse {
    at: u64,
}

impl Processor for Impulse {
    fn process(&mut self, cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        outputs.fill_silence();
        let pos = frame0(cx);
        if (pos..pos + cx.frames as u64).contains(&self.at) {
            let i = (self.at - pos) as usize;
            for ch in 0..outputs.channels() {
                outputs.channel_mut(ch)[i] = 1.0;
            }
        }
    }
}

/// Records the engine frame index of every sample above 0.5 on its first input.
struct Probe {
    hits: Arc<Mutex<Vec<u64>>>,
}

impl Processor for Probe {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        for (i, &s) in inputs.channel(0).iter().enumerate() {
            if s > 0.5 {
                // Test-only: the hit list is pre-reserved, so this does not allocate.
                self.hits.lock().unwrap().push(frame0(cx) + i as u64);
            }
        }
    }
}

fn round_trip(quantum: usize) -> (u64, usize) {
    let cfg = SimConfig {
        buffer_frames: 4096,
        period_frames: 256,
        ..SimConfig::default()
    };
    let card = SimCard::with_clock(cfg, Box::new(VirtualClock::new())).unwrap();
    let theory_device = card.theoretical_round_trip_frames(quantum);
    let ecfg = EngineConfig {
        quantum_default: quantum,
        quantum_min: 32,
        quantum_max: 4096,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(ecfg, vec![Box::new(card)]).unwrap();
    let hits = Arc::new(Mutex::new(Vec::with_capacity(64)));
    // Fire well after start-up (all edits applied), at an offset that is not
    // cycle-aligned.
    let at = (quantum * 20 + quantum / 3) as u64;
    let mut imp = NodeSpec::new("impulse", NodeKind::Filter);
    imp.outputs = ChannelMap::stereo();
    engine
        .add_node(imp, Some(Box::new(Impulse { at })))
        .unwrap();
    let mut probe = NodeSpec::new("probe", NodeKind::Filter);
    probe.inputs = ChannelMap::stereo();
    let probe_node = Probe { hits: hits.clone() };
    engine.add_node(probe, Some(Box::new(probe_node))).unwrap();
    engine.link("impulse", "sim-sink").unwrap();
    engine.link("sim-source", "probe").unwrap();
    for _ in 0..60 {
        runner.run_cycle();
    }
    let hits = hits.lock().unwrap().clone();
    assert_eq!(hits.len(), 1, "exactly one impulse comes back: {hits:?}");
    // The graph adds nothing: both device nodes start in the same cycle, so the capture
    // and playback frame counters stay aligned and the card's lead is the whole delay.
    let theory = theory_device;
    engine.shutdown_manual(runner).unwrap();
    (hits[0] - at, theory)
}

#[test]
fn loopback_round_trip_matches_theory_at_quanta_64_256_1024() {
    for q in [64, 256, 1024] {
        let (measured, theory) = round_trip(q);
        eprintln!("quantum {q}: round trip {measured} frames, theory {theory}");
        assert_eq!(measured as usize, theory, "quantum {q}");
    }
}

/// A constant level on every output, as a stream node (streams keep the devices awake).
struct Level(f32);

impl Processor for Level {
    fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            outputs.channel_mut(ch).fill(self.0);
        }
    }
}

/// Keeps every captured sample of its first input.
struct Tape {
    samples: Arc<Mutex<Vec<f32>>>,
}

impl Processor for Tape {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        // Test-only: the tape is pre-reserved, so this does not allocate.
        self.samples
            .lock()
            .unwrap()
            .extend_from_slice(inputs.channel(0));
    }
}

/// After an idle suspend the card is closed; a new stream reopens it, and the first
/// sound on the reopened card fades in instead of stepping out of silence (the click a
/// resuming sink must not make): through the loopback, no step between two samples is
/// larger than the fade's own increment, and the level is reached after the 5 ms fade.
#[test]
fn the_first_sound_after_a_suspend_fades_in_on_the_card() {
    let card = SimCard::with_clock(
        SimConfig {
            buffer_frames: 4096,
            period_frames: 256,
            loopback: true,
            ..SimConfig::default()
        },
        Box::new(VirtualClock::new()),
    )
    .unwrap();
    let ecfg = EngineConfig {
        quantum_default: 256,
        quantum_min: 32,
        quantum_max: 4096,
        rt_priority: 0,
        suspend_timeout: Some(std::time::Duration::from_millis(20)),
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(ecfg, vec![Box::new(card)]).unwrap();
    let tape = Arc::new(Mutex::new(Vec::with_capacity(1 << 16)));
    let mut spec = NodeSpec::new("tape", NodeKind::Filter);
    spec.inputs = ChannelMap::stereo();
    engine
        .add_node(
            spec,
            Some(Box::new(Tape {
                samples: tape.clone(),
            })),
        )
        .unwrap();
    engine.link("sim-source", "tape").unwrap();
    for _ in 0..40 {
        runner.run_cycle();
    }
    assert!(
        engine
            .stats()
            .suspended
            .load(std::sync::atomic::Ordering::Relaxed),
        "idle long enough to suspend"
    );
    let status = engine.status();
    let card = &status.devices[0];
    assert!(
        card.closed && card.idle_closes >= 1,
        "closed when idle: {card:?}"
    );
    assert!(
        engine
            .collect()
            .contains(&RtEvent::DeviceClosed { device: 0 })
    );
    let mut spec = NodeSpec::new("level", NodeKind::PlaybackStream);
    spec.outputs = ChannelMap::stereo();
    // Linked in the same plan, without a link fade (as the front-ends add streams):
    // only the device's start fade stands between silence and the full level.
    engine
        .add_node_linked(spec, Some(Box::new(Level(0.5))), Some("sim-sink"))
        .unwrap();
    for _ in 0..60 {
        runner.run_cycle();
    }
    let status = engine.status();
    let card = &status.devices[0];
    assert!(
        !card.closed && !card.gone && card.reopens == card.idle_closes,
        "the stream reopened the card: {card:?}"
    );
    assert!(
        engine
            .collect()
            .contains(&RtEvent::DeviceReopened { device: 0 })
    );
    let samples = tape.lock().unwrap().clone();
    engine.shutdown_manual(runner).unwrap();
    let first = samples
        .iter()
        .position(|&s| s > 1e-6)
        .expect("the level came back through the loopback");
    let fade = 48000 * 5 / 1000;
    let step = 0.5 / fade as f32;
    let worst = samples
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= step * 1.01,
        "largest step {worst}, a fade of {fade} frames steps by {step}"
    );
    let off: Vec<(usize, f32)> = samples[first + fade..]
        .iter()
        .enumerate()
        .filter(|(_, s)| (**s - 0.5).abs() >= 1e-6)
        .map(|(i, s)| (i, *s))
        .take(8)
        .collect();
    assert!(
        off.is_empty(),
        "full level after the fade; off: {off:?} of {} after {first}",
        samples.len()
    );
}

#[test]
fn a_margin_change_reaches_the_control_side_as_an_event() {
    use quaver_devices::sim::Fault;
    // An injected xrun makes the adaptive watermark jump from the period to its maximum;
    // the service thread logs that from this event (at debug level).
    let cfg = SimConfig {
        buffer_frames: 4096,
        period_frames: 256,
        margin_max_frames: Some(1024),
        faults: vec![Fault::Xrun { at_cycle: 20 }],
        ..SimConfig::default()
    };
    let card = SimCard::with_clock(cfg, Box::new(VirtualClock::new())).unwrap();
    let ecfg = EngineConfig {
        quantum_default: 256,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(ecfg, vec![Box::new(card)]).unwrap();
    let mut events = Vec::new();
    for _ in 0..100 {
        assert!(runner.run_cycle());
        events.extend(engine.collect());
    }
    let margins: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            RtEvent::Margin { device: 0, frames } => Some(*frames),
            _ => None,
        })
        .collect();
    assert_eq!(margins, vec![1024], "{events:?}");
}
