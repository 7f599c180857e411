//! The simulated card driven the way the engine drives a device: wait → read → process →
//! write, on virtual time (deterministic and instant) unless stated otherwise.

use quaver_devices::sim::theoretical_round_trip_frames;
use quaver_devices::{Device, DeviceError, Fault, SimCard, SimConfig, VirtualClock, WaitStatus};
use quaver_dsp::{ChannelMap, PlanarBuf};
use std::time::Duration;

/// A minimal engine: it records the capture stream (channel 0) and writes whatever the
/// test puts in `next_out` for the coming cycle.
struct Engine {
    dev: SimCard,
    clock: VirtualClock,
    inbuf: PlanarBuf,
    outbuf: PlanarBuf,
    captured: Vec<f32>,
    written: usize,
    statuses: Vec<WaitStatus>,
}

impl Engine {
    fn new(cfg: SimConfig) -> Self {
        let clock = VirtualClock::new();
        let channels = cfg.channels.len();
        let max = cfg.buffer_frames;
        let dev = SimCard::with_clock(cfg, Box::new(clock.clone())).unwrap();
        Engine {
            dev,
            clock,
            inbuf: PlanarBuf::new(channels, max),
            outbuf: PlanarBuf::new(channels, max),
            captured: Vec::new(),
            written: 0,
            statuses: Vec::new(),
        }
    }

    /// One cycle; `fill(out, first_frame_index)` produces the playback data.
    fn cycle_with(
        &mut self,
        q: usize,
        fill: impl FnOnce(&mut PlanarBuf, usize),
    ) -> Result<WaitStatus, DeviceError> {
        let st = self.dev.wait(q)?;
        self.statuses.push(st);
        self.dev.read(&mut self.inbuf.view_mut(q))?;
        self.captured.extend_from_slice(&self.inbuf.channel(0)[..q]);
        for ch in 0..self.outbuf.channels() {
            self.outbuf.channel_mut(ch).fill(0.0);
        }
        fill(&mut self.outbuf, self.written);
        self.dev.write(self.outbuf.view(q))?;
        self.written += q;
        Ok(st)
    }

    fn cycle(&mut self, q: usize) -> WaitStatus {
        self.cycle_with(q, |_, _| {}).unwrap()
    }

    /// Writes an impulse at `offset` in this cycle; returns its write-stream index.
    fn impulse(&mut self, q: usize, offset: usize) -> usize {
        let at = self.written + offset;
        self.cycle_with(q, |out, _| {
            out.channel_mut(0)[offset] = 1.0;
            if out.channels() > 1 {
                out.channel_mut(1)[offset] = 0.5;
            }
        })
        .unwrap();
        at
    }

    /// Read-stream indices where channel 0 is non-zero.
    fn found(&self) -> Vec<usize> {
        (0..self.captured.len())
            .filter(|&i| self.captured[i] != 0.0)
            .collect()
    }
}

fn cfg(buffer: usize, period: usize) -> SimConfig {
    SimConfig {
        rate: 48_000,
        channels: ChannelMap::stereo(),
        buffer_frames: buffer,
        period_frames: period,
        margin_max_frames: None,
        loopback: true,
        drift_ppm: 0.0,
        drift_step: None,
        faults: vec![],
    }
}

#[test]
fn impulse_round_trip_matches_the_formula_at_64_256_1024() {
    for q in [64, 256, 1024] {
        let c = cfg(4096, 256);
        let expect = theoretical_round_trip_frames(&c, q);
        assert_eq!(expect, q + 256);
        let mut e = Engine::new(c);
        assert_eq!(e.dev.theoretical_round_trip_frames(q), expect);
        e.dev.start(q).unwrap();
        for _ in 0..5 {
            e.cycle(q);
        }
        let at = e.impulse(q, 7);
        // Run until the impulse must have come back, plus a few cycles.
        for _ in 0..(expect / q + 4) {
            e.cycle(q);
        }
        assert_eq!(e.found(), vec![at + expect], "quantum {q}");
        // The second channel loops back on its own channel.
        let c = &e.dev;
        assert_eq!(c.counters().underruns + c.counters().overruns, 0);
        assert!(e.statuses.iter().all(|s| *s == WaitStatus::Ready));
        let k = e.dev.counters();
        assert_eq!(
            k.pointer_queries, k.wakeups,
            "one pointer read per wakeup, q {q}"
        );
        // Right after a cycle, the two delays add up to the round trip.
        assert_eq!(e.dev.playback_delay() + e.dev.capture_delay(), expect);
    }
}

#[test]
fn whole_stream_comes_back_delayed_by_the_round_trip_on_every_channel() {
    let q = 128;
    let mut e = Engine::new(SimConfig {
        channels: ChannelMap::default_for(3),
        ..cfg(2048, 100)
    });
    let rt = e.dev.theoretical_round_trip_frames(q);
    let signal = |i: usize, ch: usize| ((i * 7 + ch * 13) % 101) as f32 / 101.0 + 0.001;
    let mut right = Vec::new();
    e.dev.start(q).unwrap();
    for _ in 0..200 {
        e.cycle_with(q, |out, first| {
            for ch in 0..3 {
                for (k, s) in out.channel_mut(ch)[..q].iter_mut().enumerate() {
                    *s = signal(first + k, ch);
                }
            }
        })
        .unwrap();
        right.extend_from_slice(&e.inbuf.channel(2)[..q]);
    }
    assert!(
        e.captured[..rt].iter().all(|&x| x == 0.0),
        "prefill is silence"
    );
    for i in 0..e.captured.len() - rt {
        assert_eq!(e.captured[i + rt], signal(i, 0));
        assert_eq!(right[i + rt], signal(i, 2));
    }
}

#[test]
fn no_loopback_captures_silence() {
    let mut e = Engine::new(SimConfig {
        loopback: false,
        ..cfg(4096, 256)
    });
    e.dev.start(256).unwrap();
    e.impulse(256, 0);
    for _ in 0..10 {
        e.cycle(256);
    }
    assert!(e.found().is_empty());
}

/// Runs `cycles` cycles on a mono card without loopback (fast) and returns the engine.
fn long_run(drift_ppm: f64, q: usize, cycles: usize) -> Engine {
    let mut e = Engine::new(SimConfig {
        channels: ChannelMap::mono(),
        loopback: false,
        drift_ppm,
        ..cfg(4096, 256)
    });
    e.dev.start(q).unwrap();
    for _ in 0..cycles {
        assert_eq!(e.cycle(q), WaitStatus::Ready);
    }
    e
}

#[test]
fn drift_makes_the_hardware_consume_faster_or_slower() {
    // 1000 s of virtual time at 48 kHz in 256-frame cycles.
    let cycles = 187_500;
    for ppm in [100.0, -100.0, 0.0] {
        let e = long_run(ppm, 256, cycles);
        let secs = e.clock.now() as f64 / 1e9;
        // Measured from the hardware pointer, and from what the engine wrote: the card
        // pulled 100 ppm more (or fewer) frames per second than nominal.
        let hw = e.dev.hw_position() as f64 / (secs * 48_000.0) - 1.0;
        let written = e.dev.counters().frames_written as f64 / (secs * 48_000.0) - 1.0;
        assert!((hw * 1e6 - ppm).abs() < 0.1, "{ppm} ppm: hw {}", hw * 1e6);
        assert!(
            (written * 1e6 - ppm).abs() < 0.5,
            "{ppm} ppm: written {}",
            written * 1e6
        );
        let k = e.dev.counters();
        assert_eq!(k.wakeups, cycles as u64);
        assert_eq!(k.pointer_queries, k.wakeups, "{ppm} ppm");
        assert_eq!(k.underruns + k.overruns, 0);
    }
}

#[test]
fn large_drift_is_learned_so_wakeups_stay_single_query() {
    // Far beyond the driver's late-wake margin: early wakeups happen only until the
    // driver's rate estimate has a quarter second of readings.
    let e = long_run(-3000.0, 256, 20_000);
    let k = e.dev.counters();
    let ratio = k.pointer_queries as f64 / k.wakeups as f64;
    assert!(ratio <= 1.01, "queries per wakeup {ratio}");
    assert_eq!(k.underruns + k.overruns, 0);
}

#[test]
fn forced_xrun_restarts_cleanly() {
    let q = 256;
    let mut e = Engine::new(SimConfig {
        faults: vec![Fault::Xrun { at_cycle: 10 }],
        ..cfg(4096, 256)
    });
    e.dev.start(q).unwrap();
    for _ in 0..10 {
        assert_eq!(e.cycle(q), WaitStatus::Ready);
    }
    assert_eq!(e.cycle(q), WaitStatus::Xrun);
    assert_eq!(e.dev.counters().underruns, 1);
    for _ in 0..5 {
        assert_eq!(e.cycle(q), WaitStatus::Ready);
    }
    let at = e.impulse(q, 3);
    for _ in 0..5 {
        e.cycle(q);
    }
    assert_eq!(e.found(), vec![at + q + 256], "round trip is restored");
    assert_eq!(e.dev.counters().underruns, 1);
}

#[test]
fn short_stall_is_absorbed_by_the_headroom() {
    let q = 256;
    let mut e = Engine::new(SimConfig {
        // 256 frames of headroom is 5.3 ms; a 2 ms stall fits.
        faults: vec![Fault::Stall {
            at_cycle: 10,
            duration: Duration::from_millis(2),
        }],
        ..cfg(4096, 256)
    });
    e.dev.start(q).unwrap();
    for _ in 0..20 {
        assert_eq!(e.cycle(q), WaitStatus::Ready);
    }
    let k = e.dev.counters();
    assert_eq!(k.underruns + k.overruns, 0);
}

#[test]
fn long_stall_underruns_and_recovers() {
    let q = 256;
    let mut e = Engine::new(SimConfig {
        faults: vec![Fault::Stall {
            at_cycle: 10,
            duration: Duration::from_millis(100),
        }],
        ..cfg(8192, 256)
    });
    e.dev.start(q).unwrap();
    for _ in 0..10 {
        assert_eq!(e.cycle(q), WaitStatus::Ready);
    }
    let before = e.clock.now();
    assert_eq!(e.cycle(q), WaitStatus::Xrun);
    assert!(e.clock.now() - before >= 100_000_000, "the stall took time");
    let k = e.dev.counters();
    // 100 ms is 4800 frames: playback ran dry, capture (8192 frames) did not overflow.
    assert_eq!((k.underruns, k.overruns), (1, 0));
    for _ in 0..10 {
        assert_eq!(e.cycle(q), WaitStatus::Ready);
    }
    let at = e.impulse(q, 0);
    for _ in 0..4 {
        e.cycle(q);
    }
    assert_eq!(e.found(), vec![at + q + 256]);
}

#[test]
fn stall_beyond_the_ring_also_overruns_capture() {
    let mut e = Engine::new(SimConfig {
        faults: vec![Fault::Stall {
            at_cycle: 3,
            duration: Duration::from_millis(500),
        }],
        ..cfg(4096, 256)
    });
    e.dev.start(256).unwrap();
    for _ in 0..3 {
        e.cycle(256);
    }
    assert_eq!(e.cycle(256), WaitStatus::Xrun);
    let k = e.dev.counters();
    assert_eq!((k.underruns, k.overruns), (1, 1));
    assert_eq!(e.cycle(256), WaitStatus::Ready);
}

#[test]
fn slow_processing_underruns_and_loopback_hears_the_gap() {
    let q = 256;
    let mut e = Engine::new(cfg(4096, 256));
    e.dev.start(q).unwrap();
    let ones = |out: &mut PlanarBuf, _: usize| out.channel_mut(0)[..256].fill(1.0);
    for _ in 0..10 {
        e.cycle_with(q, ones).unwrap();
    }
    // Cycle 10 takes 10 ms (480 frames) to process: more than the 256-frame headroom.
    e.dev.wait(q).unwrap();
    e.dev.read(&mut e.inbuf.view_mut(q)).unwrap();
    e.captured.extend_from_slice(&e.inbuf.channel(0)[..q]);
    e.clock.advance(Duration::from_millis(10));
    e.outbuf.channel_mut(0)[..q].fill(1.0);
    e.dev.write(e.outbuf.view(q)).unwrap();
    assert_eq!(e.dev.counters().underruns, 1);
    assert_eq!(e.cycle_with(q, ones).unwrap(), WaitStatus::Xrun);
    for _ in 0..10 {
        assert_eq!(e.cycle_with(q, ones).unwrap(), WaitStatus::Ready);
    }
    assert_eq!(e.dev.counters().underruns, 1);
    // The capture stream holds a run of silence where the card played nothing.
    let first_one = e.captured.iter().position(|&x| x == 1.0).unwrap();
    assert_eq!(first_one, q + 256);
    let gap = e.captured[first_one..].iter().position(|&x| x == 0.0);
    assert!(gap.is_some(), "the underrun is audible in the loopback");
}

#[test]
fn unplug_makes_the_card_gone() {
    let mut e = Engine::new(SimConfig {
        faults: vec![Fault::Unplug { at_cycle: 4 }],
        ..cfg(4096, 256)
    });
    e.dev.start(256).unwrap();
    for _ in 0..4 {
        assert_eq!(e.cycle(256), WaitStatus::Ready);
    }
    match e.dev.wait(256) {
        Err(DeviceError::Gone(name)) => assert_eq!(name, "sim"),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(matches!(e.dev.wait(256), Err(DeviceError::Gone(_))));
    assert!(matches!(e.dev.start(256), Err(DeviceError::Gone(_))));
    assert!(matches!(
        e.dev.write(e.outbuf.view(256)),
        Err(DeviceError::Gone(_))
    ));
    assert_eq!(e.dev.counters().wakeups, 4);
}

#[test]
fn quantum_changes_keep_running_and_latency_follows_increases() {
    let p = 256;
    let mut e = Engine::new(cfg(4096, p));
    e.dev.start(256).unwrap();
    let check = |e: &mut Engine, q: usize, expect: usize| {
        for _ in 0..3 {
            e.cycle(q);
        }
        let at = e.impulse(q, 1);
        for _ in 0..(expect / q + 3) {
            e.cycle(q);
        }
        let found = e.found();
        assert_eq!(found.last(), Some(&(at + expect)), "quantum {q}");
    };
    check(&mut e, 256, 256 + p);
    check(&mut e, 1024, 1024 + p); // grew: silence was queued to keep the headroom
    check(&mut e, 64, 1024 + p); // shrank: the larger lead is kept, nothing dropped
    check(&mut e, 1024, 1024 + p);
    let k = e.dev.counters();
    assert_eq!(k.underruns + k.overruns, 0);
    assert!(e.statuses.iter().all(|s| *s == WaitStatus::Ready));
    assert!(k.pointer_queries <= k.wakeups);
}

#[test]
fn suspend_and_resume_restart_without_xrun() {
    // Also with the idle close in between: the card reports itself closed until the
    // start that reopens it, and runs exactly as after a plain suspend.
    for close in [false, true] {
        let q = 256;
        let mut e = Engine::new(cfg(4096, 256));
        e.dev.start(q).unwrap();
        for _ in 0..5 {
            e.cycle(q);
        }
        e.dev.suspend();
        if close {
            assert!(e.dev.close_idle());
            assert!(!e.dev.close_idle(), "closed once");
        }
        assert_eq!(e.dev.counters().closed, close);
        let hw = e.dev.hw_position();
        e.clock.advance(Duration::from_secs(30));
        assert_eq!(e.dev.hw_position(), hw);
        e.dev.start(q).unwrap();
        let k = e.dev.counters();
        assert_eq!(
            (k.closed, k.idle_closes, k.reopens),
            (false, close as u64, close as u64)
        );
        for _ in 0..5 {
            assert_eq!(e.cycle(q), WaitStatus::Ready);
        }
        let at = e.impulse(q, 0);
        for _ in 0..4 {
            e.cycle(q);
        }
        assert_eq!(e.found(), vec![at + q + 256]);
        let k = e.dev.counters();
        assert_eq!(k.underruns + k.overruns, 0);
        // 30 s suspended are not played: the pointer moved only while running.
        assert!(e.dev.hw_position() < hw + 48_000);
    }
}

#[test]
fn wait_starts_an_unstarted_card_and_bad_quanta_are_refused() {
    let mut e = Engine::new(cfg(1024, 256));
    assert_eq!(e.cycle(256), WaitStatus::Ready);
    assert!(matches!(e.dev.wait(1024), Err(DeviceError::Io { .. })));
    assert!(matches!(e.dev.wait(0), Err(DeviceError::Io { .. })));
    assert_eq!(e.cycle(768), WaitStatus::Ready);
}

#[test]
fn real_clock_card_paces_in_real_time() {
    let q = 256;
    let c = SimConfig {
        // Generous headroom: this VM's timer wakeups can be milliseconds late.
        ..cfg(8192, 2048)
    };
    let mut dev = SimCard::new(c).unwrap();
    let mut buf = PlanarBuf::new(2, q);
    let start = std::time::Instant::now();
    dev.start(q).unwrap();
    let cycles = 60; // 320 ms
    for _ in 0..cycles {
        dev.wait(q).unwrap();
        dev.read(&mut buf.view_mut(q)).unwrap();
        dev.write(buf.view(q)).unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let expect = (cycles * q) as f64 / 48_000.0;
    assert!(elapsed >= expect * 0.999, "{elapsed} s < {expect} s");
    assert!(elapsed < expect + 0.1, "{elapsed} s vs {expect} s");
    let k = dev.counters();
    assert_eq!(k.wakeups, cycles as u64);
    assert!(k.pointer_queries <= k.wakeups + 2 * (k.underruns + k.overruns));
}

/// 60 s at 240-frame cycles on a mono card without loopback, with a 15 ms processing
/// spike (`Fault::Stall`) every 3 s: 20 spikes, each longer than quantum + minimum
/// watermark (240 + 128 frames = 7.7 ms) but shorter than quantum + maximum (2048).
fn spiky_run(margin_max: Option<usize>) -> Engine {
    let q = 240;
    let every = 3 * 48_000 / q as u64;
    let mut e = Engine::new(SimConfig {
        channels: ChannelMap::mono(),
        loopback: false,
        margin_max_frames: margin_max,
        faults: (0..20)
            .map(|i| Fault::Stall {
                at_cycle: every / 2 + i * every,
                duration: Duration::from_millis(15),
            })
            .collect(),
        ..cfg(8192, 128)
    });
    e.dev.start(q).unwrap();
    for _ in 0..20 * every {
        e.cycle(q);
    }
    e
}

#[test]
fn adaptive_margin_stops_the_repeat_underruns_a_fixed_minimal_margin_has() {
    let fixed = spiky_run(None);
    let adaptive = spiky_run(Some(2048));
    let (f, a) = (fixed.dev.counters(), adaptive.dev.counters());
    let xruns = |e: &Engine| {
        e.statuses
            .iter()
            .filter(|s| **s == WaitStatus::Xrun)
            .count()
    };
    println!(
        "fixed margin: {} underruns; adaptive: {} underrun(s), settled at {} frames",
        f.underruns, a.underruns, a.margin_frames
    );
    assert_eq!(f.underruns, 20, "fixed: {f:?}");
    assert_eq!(xruns(&fixed), 20);
    assert_eq!(f.margin_frames, 128);
    // The first spike underruns and raises the margin; it then settles above what the
    // spikes need (720 − 240 = 480 frames) instead of at the maximum.
    assert_eq!(a.underruns, 1, "adaptive: {a:?}");
    assert_eq!(xruns(&adaptive), 1);
    assert!(
        (480..2048).contains(&a.margin_frames),
        "settled at {}",
        a.margin_frames
    );
    // Pointer reads stay at one per wakeup at most, spikes and restart included.
    assert!(a.pointer_queries <= a.wakeups, "{a:?}");
}

#[test]
fn adaptive_margin_returns_to_its_minimum_after_the_load_stops() {
    let mut e = spiky_run(Some(2048));
    assert!(e.dev.counters().margin_frames > 128);
    // Another minute without spikes: hold (10 s) plus linear decay back to the minimum.
    for _ in 0..12_000 {
        assert_eq!(e.cycle(240), WaitStatus::Ready);
    }
    let c = e.dev.counters();
    assert_eq!(c.margin_frames, 128, "{c:?}");
    assert_eq!(e.dev.margin().current(), 128);
    assert_eq!(c.underruns, 1);
    assert!(c.margin_changes > 10);
}

#[test]
fn pointer_queries_per_wakeup_average_at_most_one_over_a_long_run() {
    // 60 s of virtual time with drift and the adaptive margin, no faults: every wakeup
    // reads the pointer exactly once.
    let mut e = Engine::new(SimConfig {
        channels: ChannelMap::mono(),
        loopback: false,
        drift_ppm: 50.0,
        margin_max_frames: Some(2048),
        ..cfg(8192, 256)
    });
    e.dev.start(256).unwrap();
    while e.clock.now() < 60_000_000_000 {
        assert_eq!(e.cycle(256), WaitStatus::Ready);
    }
    let c = e.dev.counters();
    let per = c.pointer_queries as f64 / c.wakeups as f64;
    println!(
        "{} wakeups, {} pointer queries: {per} per wakeup",
        c.wakeups, c.pointer_queries
    );
    assert!(c.wakeups >= 11_000);
    assert!(per <= 1.0, "{per}");
    // And with the spikes and their underrun, still at most one on average.
    let spiky = spiky_run(Some(2048)).dev.counters();
    assert!(
        spiky.pointer_queries as f64 / spiky.wakeups as f64 <= 1.0,
        "{spiky:?}"
    );
}

/// Runs `cycles` follower cycles of `q` frames, the clock paced by someone else (the
/// test advances it one quantum at a time): follow → read → write, as the engine does.
/// Returns how many `follow` calls reported a restart.
fn follow_cycles(dev: &mut SimCard, clock: &VirtualClock, q: usize, cycles: usize) -> usize {
    let mut buf = PlanarBuf::new(2, q);
    let mut restarts = 0;
    for _ in 0..cycles {
        clock.advance(Duration::from_nanos(q as u64 * 1_000_000_000 / 48_000));
        let levels = dev
            .follow(q)
            .unwrap()
            .expect("a sim card has a clock to follow");
        restarts += levels.restarted as usize;
        dev.read(&mut buf.view_mut(q)).unwrap();
        dev.write(buf.view(q)).unwrap();
    }
    restarts
}

#[test]
fn a_follower_that_xran_restarts_at_the_next_cycle_instead_of_going_silent() {
    let q = 256;
    let clock = VirtualClock::new();
    let mut dev = SimCard::with_clock(cfg(4096, 256), Box::new(clock.clone())).unwrap();
    dev.start(q).unwrap();
    assert_eq!(follow_cycles(&mut dev, &clock, q, 100), 0);
    // Right after a write: the margin (the period) plus the cycle just written.
    let levels = dev.follow(q).unwrap().unwrap();
    assert!(
        levels
            .play_queued
            .is_some_and(|l| (2 * q..=2 * q + 1).contains(&l)),
        "{levels:?}"
    );
    assert_eq!(dev.counters().underruns, 0);
    // A stall: nothing written for 100 ms.
    clock.advance(Duration::from_millis(100));
    assert_eq!(
        follow_cycles(&mut dev, &clock, q, 1),
        1,
        "the xrun was not recovered"
    );
    assert_eq!(dev.counters().underruns, 1);
    // Playing again: what is written is played, with no further xrun.
    assert_eq!(follow_cycles(&mut dev, &clock, q, 400), 0);
    assert_eq!(dev.counters().underruns, 1);
    let levels = dev.follow(q).unwrap().unwrap();
    assert!(
        levels.play_queued.is_some_and(|l| l > 0),
        "nothing queued after the restart: {levels:?}"
    );
}
