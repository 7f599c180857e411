//! A second card on its own clock: the engine keeps it in step with the driver.
//!
//! Two simulated cards share one virtual clock; the follower's crystal runs 1000 ppm
//! fast or slow (a real one: tens to a few hundred ppm). Without rate matching its queue
//! drains or grows by 48 frames a second until it under- or overruns. Every cycle runs
//! under an allocation guard: the converters are real-time work.

mod common;

use assert_no_alloc::{AllocDisabler, assert_no_alloc, violation_count};
use common::Dc;
use quaver_devices::{DriftStep, Fault, SimCard, SimConfig, VirtualClock};
use quaver_dsp::ChannelMap;
use quaver_engine::{Engine, EngineConfig, NodeKind, NodeSpec};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

const RATE: u32 = 48_000;

/// Counts the cycles whose every sample was within 1 % of 0.25, and the others.
struct Level(Arc<AtomicUsize>, Arc<AtomicUsize>);

impl quaver_engine::Processor for Level {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        inputs: quaver_dsp::Planar<'_>,
        _outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        let s = inputs.channel(0);
        let good = s.iter().all(|&x| (x - 0.25).abs() < 0.0025);
        if good { &self.0 } else { &self.1 }.fetch_add(1, Relaxed);
    }
}

struct Run {
    underruns: u64,
    overruns: u64,
    /// The follower's playback queue after the first second, and its range after that.
    first: u64,
    range: (u64, u64),
    good: usize,
    bad_late: usize,
    /// The smallest quantum the engine ran.
    min_quantum: usize,
    /// Every half second of virtual time: the time (s) and the follower's clock against
    /// the driver's as its loop has settled on it (`status`), ppm.
    estimates: Vec<(f64, f64)>,
    /// The follower's playback level minus its target, lowest and highest (`status`).
    play_error: (i64, i64),
}

/// The two crystals: the driver's and the follower's drift, and a change of the
/// follower's while it plays.
#[derive(Clone, Copy)]
struct Clocks {
    driver_ppm: f64,
    follower_ppm: f64,
    step: Option<DriftStep>,
}

impl Clocks {
    fn follower(ppm: f64) -> Clocks {
        Clocks {
            driver_ppm: 0.0,
            follower_ppm: ppm,
            step: None,
        }
    }

    /// The follower's clock against the driver's, ppm, `t` s after the start.
    fn truth(&self, t: f64) -> f64 {
        let f = match self.step {
            Some(s) if t >= s.after.as_secs_f64() => s.ppm,
            _ => self.follower_ppm,
        };
        ((1.0 + f * 1e-6) / (1.0 + self.driver_ppm * 1e-6) - 1.0) * 1e6
    }
}

/// What the stream asks for while it plays.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Latency {
    /// Nothing: the quantum stays.
    Steady,
    /// 64 frames from 20 s to 40 s: the quantum drops to 32 frames and grows back.
    DropAndBack,
    /// 8192 frames from 5 s on: the quantum grows to 4096 frames while playing.
    Grow,
    /// 384 frames from 5 s on: the quantum drops to 192 frames and stays (a desktop
    /// stream joining an idle daemon).
    Drop,
}

/// Plays a steady 0.25 into a follower `drift_ppm` off for `seconds` of virtual time at
/// `quantum` frames, the stream's latency request changing as `latency` says.
fn run(drift_ppm: f64, seconds: u64, quantum: usize, latency: Latency) -> Run {
    run_clocks(Clocks::follower(drift_ppm), seconds, quantum, latency)
}

/// Faults injected into the two cards, and their period (the driver's headroom).
#[derive(Default)]
struct Faults {
    driver: Vec<Fault>,
    follower: Vec<Fault>,
    period: Option<usize>,
}

/// [`run`] with both cards' crystals as `clocks` says.
fn run_clocks(clocks: Clocks, seconds: u64, quantum: usize, latency: Latency) -> Run {
    run_faults(clocks, seconds, quantum, latency, Faults::default())
}

/// [`run_clocks`] with `faults` injected.
fn run_faults(
    clocks: Clocks,
    seconds: u64,
    quantum: usize,
    latency: Latency,
    faults: Faults,
) -> Run {
    let clock = VirtualClock::new();
    let period = faults.period.unwrap_or(SimConfig::default().period_frames);
    let card = |drift_ppm: f64, loopback: bool, faults: Vec<Fault>| SimConfig {
        rate: RATE,
        drift_ppm,
        loopback,
        faults,
        period_frames: period,
        ..SimConfig::default()
    };
    let driver = SimCard::with_clock(
        card(clocks.driver_ppm, false, faults.driver),
        Box::new(clock.clone()),
    )
    .unwrap();
    let follower_card = SimConfig {
        drift_step: clocks.step,
        ..card(clocks.follower_ppm, true, faults.follower)
    };
    let follower = SimCard::with_clock(follower_card, Box::new(clock.clone()))
        .unwrap()
        .with_name("sim2");
    let config = EngineConfig {
        rt_priority: 0,
        suspend_timeout: None,
        quantum_default: quantum,
        ..EngineConfig::default()
    };
    let (engine, mut runner) =
        Engine::new_manual(config, vec![Box::new(driver), Box::new(follower)]).unwrap();
    let mut s = NodeSpec::new("dc", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    let dc = engine
        .add_node_linked(s, Some(Box::new(Dc(0.25))), Some("sim2-sink"))
        .unwrap();
    // What the follower played, captured back through its loopback.
    let (good, bad) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut r = NodeSpec::new("rec", NodeKind::RecordStream);
    r.inputs = ChannelMap::stereo();
    let level = Level(good.clone(), bad.clone());
    engine
        .add_node_linked(r, Some(Box::new(level)), Some("sim2-source"))
        .unwrap();
    let stats = engine.stats();
    let queued = || stats.devices[1].playback_delay.load(Relaxed);
    let mut first = 0;
    let mut range = (u64::MAX, 0);
    let mut bad_at_3s = 0;
    let mut min_quantum = usize::MAX;
    let mut estimates = Vec::new();
    let mut play_error = (0, 0);
    for _ in 0..1_000_000 {
        let t = clock.now();
        if t >= seconds * 1_000_000_000 {
            break;
        }
        assert!(assert_no_alloc(|| runner.run_cycle()));
        assert_eq!(violation_count(), 0, "allocation in the real-time cycle");
        engine.collect();
        min_quantum = min_quantum.min(engine.quantum());
        if t >= 1_000_000_000 {
            if first == 0 {
                first = queued();
            }
            range = (range.0.min(queued()), range.1.max(queued()));
        }
        if t < 3_000_000_000 {
            bad_at_3s = bad.load(Relaxed);
        }
        if t >= estimates.len() as u64 * 500_000_000 {
            let f = engine.status().devices[1].follow;
            let f = f.expect("the second card is steered as a follower");
            if let Some(ppm) = f.play_ppm {
                estimates.push((t as f64 / 1e9, ppm));
            }
            play_error = f.play_error;
        }
        let retune = latency == Latency::DropAndBack;
        if retune && t >= 20_000_000_000 && engine.quantum() == quantum && t < 40_000_000_000 {
            engine.set_latency(dc, Some(64)).unwrap();
        }
        if retune && t >= 40_000_000_000 && engine.quantum() != quantum {
            engine.set_latency(dc, None).unwrap();
        }
        if latency == Latency::Grow && t >= 5_000_000_000 && engine.quantum() == quantum {
            engine.set_latency(dc, Some(8192)).unwrap();
        }
        if latency == Latency::Drop && t >= 5_000_000_000 && engine.quantum() == quantum {
            engine.set_latency(dc, Some(384)).unwrap();
        }
    }
    let run = Run {
        underruns: stats.devices[1].underruns.load(Relaxed),
        overruns: stats.devices[1].overruns.load(Relaxed),
        first,
        range,
        good: good.load(Relaxed),
        bad_late: bad.load(Relaxed) - bad_at_3s,
        min_quantum,
        estimates,
        play_error,
    };
    engine.shutdown_manual(runner).unwrap();
    run
}

fn check(drift_ppm: f64) {
    let r = run(drift_ppm, 60, 256, Latency::Steady);
    assert_eq!(
        (r.underruns, r.overruns),
        (0, 0),
        "the {drift_ppm} ppm follower xran"
    );
    // 48 frames a second of drift would have moved the queue by 2800 frames in a minute.
    assert!(
        r.range.0 + 64 >= r.first && r.range.1 <= r.first + 64,
        "the follower's queue wandered: {} after 1 s, then {:?}",
        r.first,
        r.range
    );
    assert!(r.good > 10_000, "{} clean cycles captured", r.good);
    assert_eq!(
        r.bad_late, 0,
        "the follower's loopback broke up after the start"
    );
}

#[test]
fn a_fast_follower_card_stays_in_step_for_a_minute() {
    check(1000.0);
}

#[test]
fn a_slow_follower_card_stays_in_step_for_a_minute() {
    check(-1000.0);
}

#[test]
fn a_follower_card_rides_through_quantum_changes() {
    for drift_ppm in [300.0, -300.0] {
        // Back from 32 to 1024 frames: far more than the card's margin.
        let r = run(drift_ppm, 60, 1024, Latency::DropAndBack);
        assert_eq!(r.min_quantum, 32, "the quantum never dropped");
        assert_eq!(
            (r.underruns, r.overruns),
            (0, 0),
            "the {drift_ppm} ppm follower xran"
        );
        // The capture holds back one cycle when the quantum grows (too little is
        // captured for the bigger cycle): a short gap, not a break every cycle.
        assert!(
            r.bad_late <= 4,
            "{drift_ppm} ppm: {} broken cycles in the follower's loopback",
            r.bad_late
        );
    }
}

#[test]
fn a_follower_whose_ring_holds_only_two_cycles_stays_in_step() {
    // 4096-frame cycles on an 8192-frame ring: no room to aim the capture a whole
    // cycle higher, nor to read past what is there.
    for drift_ppm in [500.0, -500.0] {
        let r = run(drift_ppm, 120, 4096, Latency::Steady);
        assert_eq!((r.underruns, r.overruns), (0, 0), "{drift_ppm} ppm");
        assert_eq!(r.bad_late, 0, "{drift_ppm} ppm: broken cycles");
        assert!(r.good > 1000, "{} clean cycles", r.good);
    }
}

#[test]
fn a_follower_card_plays_on_when_the_quantum_grows_while_it_plays() {
    // From 1024 to 4096 frames on an 8192-frame ring: before the first long cycle the
    // driver waits for a whole new quantum of capture, and plays the growth as silence
    // to last that long; the follower must do the same, not run dry (an xrun, then a
    // restart that left it holding a quantum too much: a full ring on every write).
    let r = run(100.0, 30, 1024, Latency::Grow);
    assert_eq!((r.underruns, r.overruns), (0, 0));
    // That silence, in the loopback: two cycles, not a break every cycle.
    assert!(
        r.bad_late <= 2,
        "{} broken cycles in the follower's loopback",
        r.bad_late
    );
    assert!(
        r.range.1 < 8192,
        "the follower's ring was full after a write: {:?}",
        r.range
    );
}

#[test]
fn the_loop_locks_to_crystals_200_ppm_off_and_follows_a_step() {
    // The case: each card's crystal up to 200 ppm off, the two up to 400 ppm
    // apart; and a follower whose crystal swings from +200 to -200 ppm while it plays.
    let step = Some(DriftStep {
        after: std::time::Duration::from_secs(15),
        ppm: -200.0,
    });
    // 0 against +200 and then -200 ppm: the step. The last drops the quantum from 1024
    // to 192 frames at 5 s: the level to hold moves, the clocks' ratio does not (taking
    // the reading before the driver's first short wait as the target left the level 830
    // frames below it, and the loop at its bound for 9 s).
    let cases = [
        (200.0, -200.0, None, Latency::Steady),
        (-200.0, 200.0, None, Latency::Steady),
        (0.0, 200.0, step, Latency::Steady),
        (200.0, -200.0, None, Latency::Drop),
    ];
    for (driver_ppm, follower_ppm, step, latency) in cases {
        let clocks = Clocks {
            driver_ppm,
            follower_ppm,
            step,
        };
        let what = format!("driver {driver_ppm:+} ppm, follower {follower_ppm:+} ppm, {latency:?}");
        let r = run_clocks(clocks, 30, 1024, latency);
        assert_eq!((r.underruns, r.overruns), (0, 0), "{what}: xruns");
        assert_eq!(r.bad_late, 0, "{what}: the follower's loopback broke up");
        // Locked within 10 s of the start and of the step: the loop's estimate within
        // 2 ppm of the truth from then on (it takes about 8 s for a 400 ppm error; its
        // steps are 0.44 ppm, a frame of level error for a 1024-frame cycle).
        for &(t, ppm) in &r.estimates {
            let since = step.map_or(t, |s| {
                let at = s.after.as_secs_f64();
                if t >= at { t - at } else { t }
            });
            let truth = clocks.truth(t);
            assert!(
                since < 10.0 || (ppm - truth).abs() < 2.0,
                "{what}: at {t} s the loop had {ppm:+.2} ppm, the clocks are {truth:+.2} ppm apart"
            );
        }
        assert!(
            r.estimates.len() >= 55,
            "{what}: {} readings",
            r.estimates.len()
        );
        // 400 ppm is 19 frames a second: the loop keeps the level within a few frames.
        assert!(
            r.play_error.0 >= -32 && r.play_error.1 <= 32,
            "{what}: the follower's level strayed {:?} frames from its target",
            r.play_error
        );
    }
}

#[test]
fn a_follower_that_xruns_alone_while_the_driver_catches_up_holds_the_level_it_settles_at() {
    // The whole daemon stalls for 15 ms in the cycle the follower underruns on its own:
    // the follower restarts with its prefill, then the driver (1024 frames of headroom,
    // so no xrun of its own) catches up on the stall in back-to-back cycles, each queuing
    // a quantum more on the follower. `quaver-bench drift` saw it: the loop took the
    // prefill as the level to hold, sat 1016 frames above it at its bound for 30 s, and
    // its estimate of the clocks went 1600 ppm wrong.
    let at_cycle = 2000; // 10.7 s at 256 frames
    let faults = Faults {
        driver: vec![Fault::Stall {
            at_cycle,
            duration: std::time::Duration::from_millis(15),
        }],
        follower: vec![Fault::Xrun { at_cycle }],
        period: Some(1024),
    };
    let clocks = Clocks {
        driver_ppm: 200.0,
        follower_ppm: -200.0,
        step: None,
    };
    let r = run_faults(clocks, 30, 256, Latency::Steady, faults);
    assert_eq!((r.underruns, r.overruns), (1, 0), "only the injected xrun");
    // Since the restart (the extremes start over there), the level stays near its target.
    assert!(
        r.play_error.0 >= -64 && r.play_error.1 <= 64,
        "after the restart the follower's level strayed {:?} frames from its target",
        r.play_error
    );
    // The estimate is kept through the restart and stays locked.
    let truth = clocks.truth(0.0);
    for &(t, ppm) in &r.estimates {
        assert!(
            t < 10.0 || (ppm - truth).abs() < 5.0,
            "at {t} s the loop had {ppm:+.2} ppm, the clocks are {truth:+.2} ppm apart"
        );
    }
}
