//! Engine behaviour driven cycle by cycle on a recording device.

mod common;

use common::{Dc, RecordingDevice, Thru};
use quaver_dsp::ChannelMap;
use quaver_engine::{Engine, EngineConfig, NodeKind, NodeSpec};

const RATE: u32 = 48000;

fn config(quantum: usize) -> EngineConfig {
    EngineConfig {
        quantum_default: quantum,
        quantum_min: 32,
        quantum_max: 4096,
        rt_priority: 0,
        suspend_timeout: None,
        ramp_frames: 64,
        ..EngineConfig::default()
    }
}

/// Runs cycles until every queued edit is applied, then forgets the output so far.
fn settle(
    runner: &mut quaver_engine::RtRunner,
    out: &[&std::sync::Arc<std::sync::Mutex<Vec<f32>>>],
) {
    let mut n = 0;
    while runner.pending() > 0 {
        runner.run_cycle();
        n += 1;
        assert!(n < 100, "edits never drained");
    }
    runner.run_cycle();
    for o in out {
        o.lock().unwrap().clear();
    }
}

fn source(engine: &Engine, name: &str, value: f32, latency: Option<u32>) -> u32 {
    let mut s = NodeSpec::new(name, NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    s.latency_frames = latency;
    engine.add_node(s, Some(Box::new(Dc(value)))).unwrap()
}

#[test]
fn device_nodes_exist_with_ports() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, runner) = Engine::new_manual(config(256), vec![Box::new(dev)]).unwrap();
    let g = engine.graph();
    let sink = g.node_by_name("test-sink").unwrap();
    assert_eq!(sink.inputs.len(), 2);
    assert_eq!(sink.outputs.len(), 2, "a sink has monitor outputs");
    assert!(g.node_by_name("test-source").is_some());
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn fan_in_sums_and_fan_out_copies() {
    let dev = RecordingDevice::new(RATE, 4096);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(256), vec![Box::new(dev)]).unwrap();
    source(&engine, "a", 0.25, None);
    source(&engine, "b", 0.125, None);
    engine.link("a", "test-sink").unwrap();
    engine.link("b", "test-sink").unwrap();
    // Monitor fan-out: the sink's monitor feeds a filter node.
    let mut f = NodeSpec::new("thru", NodeKind::Filter);
    f.inputs = ChannelMap::stereo();
    f.outputs = ChannelMap::stereo();
    engine.add_node(f, Some(Box::new(Thru))).unwrap();
    engine.link("test-sink", "thru").unwrap();
    settle(&mut runner, &[&left]);
    for _ in 0..4 {
        runner.run_cycle();
    }
    let out = left.lock().unwrap().clone();
    assert_eq!(out.len(), 4 * 256);
    // After the fade-in cycle, the sum is exact.
    assert!(
        out[256..].iter().all(|&s| s == 0.375),
        "{:?}",
        &out[256..260]
    );
    engine.shutdown_manual(runner).unwrap();
}

fn max_step(s: &[f32]) -> f32 {
    s.windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(0.0, f32::max)
}

#[test]
fn unlink_and_link_take_effect_within_one_quantum_with_a_ramp() {
    let q = 256;
    let dev = RecordingDevice::new(RATE, 64 * q);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(q), vec![Box::new(dev)]).unwrap();
    source(&engine, "dc", 0.5, None);
    engine.link("dc", "test-sink").unwrap();
    settle(&mut runner, &[&left]);
    for _ in 0..4 {
        runner.run_cycle();
    }
    engine.unlink("dc", "test-sink").unwrap();
    runner.run_cycle();
    runner.run_cycle();
    engine.link("dc", "test-sink").unwrap();
    runner.run_cycle();
    runner.run_cycle();
    let out = left.lock().unwrap().clone();
    let cycle = |k: usize| &out[k * q..(k + 1) * q];
    // Steady before the edit.
    assert!(cycle(3).iter().all(|&s| s == 0.5));
    // The very next cycle carries the fade-out: 64 ramp frames then silence.
    let c4 = cycle(4);
    assert!(
        c4[0] < 0.5 && c4[0] > 0.49,
        "ramp starts near full level: {}",
        c4[0]
    );
    assert!(c4[64..].iter().all(|&s| s == 0.0), "silent after the ramp");
    assert!(
        max_step(c4) <= 0.5 / 64.0 + 1e-6,
        "no click: max step {}",
        max_step(c4)
    );
    assert!(cycle(5).iter().all(|&s| s == 0.0));
    // Relink: ramps up within the next cycle, steady after.
    let c6 = cycle(6);
    assert!(c6[0] > 0.0 && c6[0] < 0.01);
    assert!(c6[64..].iter().all(|&s| s == 0.5));
    assert!(max_step(c6) <= 0.5 / 64.0 + 1e-6);
    assert!(cycle(7).iter().all(|&s| s == 0.5));
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn quantum_follows_the_smallest_latency_request() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, mut runner) = Engine::new_manual(config(1024), vec![Box::new(dev)]).unwrap();
    assert_eq!(engine.quantum(), 1024);
    // 20 ms over two periods in flight: 480 frames → 384, the ladder's step below.
    let a = source(&engine, "a", 0.0, Some(960));
    assert_eq!(engine.quantum(), 384);
    let b = source(&engine, "b", 0.0, Some(100)); // 50 → 48
    assert_eq!(engine.quantum(), 48);
    settle(&mut runner, &[]);
    assert_eq!(engine.status().quantum, 48);
    assert_eq!(
        engine
            .stats()
            .quantum
            .load(std::sync::atomic::Ordering::Relaxed),
        48
    );
    engine.remove_node(b).unwrap();
    assert_eq!(engine.quantum(), 384);
    let c = source(&engine, "c", 0.0, Some(40)); // 20 → clamped to min 32
    assert_eq!(engine.quantum(), 32);
    engine.remove_node(c).unwrap();
    engine.remove_node(a).unwrap();
    assert_eq!(engine.quantum(), 1024);
    // A huge request is clamped to the maximum.
    source(&engine, "d", 0.0, Some(1 << 20));
    assert_eq!(engine.quantum(), 4096);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_node_that_needs_powers_of_two_rounds_the_quantum_down_to_one() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, mut runner) = Engine::new_manual(config(1024), vec![Box::new(dev)]).unwrap();
    let a = source(&engine, "a", 0.0, Some(480)); // 240 → 192
    assert_eq!(engine.quantum(), 192);
    let mut s = NodeSpec::new("jack-like", NodeKind::Filter);
    s.inputs = ChannelMap::stereo();
    s.pow2_quantum = true;
    s.latency_frames = Some(1024);
    let j = engine.add_node(s, Some(Box::new(Dc(0.0)))).unwrap();
    assert_eq!(
        engine.quantum(),
        128,
        "192 rounded down while the node runs"
    );
    settle(&mut runner, &[]);
    assert_eq!(engine.status().quantum, 128);
    engine.remove_node(j).unwrap();
    assert_eq!(engine.quantum(), 192);
    engine.remove_node(a).unwrap();
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn volume_and_mute_ramp_on_a_node() {
    let q = 256;
    let dev = RecordingDevice::new(RATE, 16 * q);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(q), vec![Box::new(dev)]).unwrap();
    source(&engine, "dc", 0.5, None);
    engine.link("dc", "test-sink").unwrap();
    settle(&mut runner, &[&left]);
    runner.run_cycle();
    runner.run_cycle();
    engine.set_volume("dc", Some(0.5), None).unwrap();
    runner.run_cycle();
    runner.run_cycle();
    engine.set_volume("test-sink", None, Some(true)).unwrap();
    runner.run_cycle();
    runner.run_cycle();
    let out = left.lock().unwrap().clone();
    assert!(out[q..2 * q].iter().all(|&s| s == 0.5));
    assert!(
        max_step(&out[2 * q..3 * q]) < 0.01,
        "volume change is ramped"
    );
    assert!(out[3 * q..4 * q].iter().all(|&s| (s - 0.25).abs() < 1e-6));
    assert!(
        out[5 * q..].iter().all(|&s| s == 0.0),
        "muted sink is silent"
    );
    assert!(engine.set_volume("dc", Some(f32::NAN), None).is_err());
    assert!(engine.set_volume("nope", Some(1.0), None).is_err());
    engine.shutdown_manual(runner).unwrap();
}

/// A volume set while the engine is suspended holds from the first frame after the
/// resume: no ramp from the old volume over the start of the stream that woke it.
#[test]
fn a_volume_set_while_suspended_holds_from_the_first_frame() {
    use std::sync::atomic::Ordering::Relaxed;
    let q = 256;
    let mut dev = RecordingDevice::new(RATE, 16 * q);
    dev.fade_in = false;
    let left = dev.left.clone();
    let mut cfg = config(q);
    // Volume ramps longer than a new link's fade-in (at most one quantum).
    cfg.ramp_frames = 4 * q;
    cfg.suspend_timeout = Some(std::time::Duration::ZERO);
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    runner.run_cycle();
    assert!(engine.stats().suspended.load(Relaxed), "idle: suspended");
    engine.set_volume("test-sink", Some(0.25), None).unwrap();
    let mut s = NodeSpec::new("dc", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    engine
        .add_node_linked(s, Some(Box::new(Dc(0.5))), Some("test-sink"))
        .unwrap();
    left.lock().unwrap().clear();
    for _ in 0..8 {
        runner.run_cycle();
    }
    let out = left.lock().unwrap().clone();
    let first = out
        .iter()
        .position(|&s| s != 0.0)
        .expect("the stream played");
    let wrong: Vec<(usize, f32)> = out[first + q..first + 4 * q]
        .iter()
        .enumerate()
        .filter(|(_, s)| (**s - 0.125).abs() > 1e-6)
        .map(|(i, s)| (i + q, *s))
        .take(4)
        .collect();
    assert!(wrong.is_empty(), "not at the new volume: {wrong:?}");
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn bad_edits_are_refused_and_change_nothing() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, runner) = Engine::new_manual(config(256), vec![Box::new(dev)]).unwrap();
    source(&engine, "a", 0.1, None);
    let before = engine.graph().links.len();
    assert!(engine.link("a", "nope").is_err());
    assert!(engine.link("test-sink:playback_FL", "a:output_FL").is_err());
    assert!(engine.link("a:output_XX", "test-sink").is_err());
    assert!(engine.unlink("a", "test-sink").is_err());
    assert_eq!(engine.graph().links.len(), before);
    let mut bad = NodeSpec::new("has:colon", NodeKind::Filter);
    bad.outputs = ChannelMap::mono();
    assert!(engine.add_node(bad, Some(Box::new(Dc(0.0)))).is_err());
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn node_limit_is_enforced() {
    let dev = RecordingDevice::new(RATE, 0);
    let mut cfg = config(256);
    cfg.max_nodes = 4; // two device nodes + two more
    let (engine, runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    source(&engine, "a", 0.0, None);
    source(&engine, "b", 0.0, None);
    let mut s = NodeSpec::new("c", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    let err = engine.add_node(s, Some(Box::new(Dc(0.0)))).unwrap_err();
    assert!(err.to_string().contains("limit"), "{err}");
    engine.shutdown_manual(runner).unwrap();
}

/// Waits (bounded) until the engine's devices are suspended (`want`) or running.
fn wait_suspended(engine: &Engine, want: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};
    let t0 = Instant::now();
    while engine.stats().suspended.load(Relaxed) != want {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "suspended never became {want}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_suspended_engine_wakes_for_a_burst_of_edits() {
    use std::time::Duration;
    let dev = RecordingDevice::new(RATE, 0);
    let mut cfg = config(256);
    cfg.suspend_timeout = Some(Duration::from_millis(5));
    let engine = Engine::start(cfg, vec![Box::new(dev)]).unwrap();
    let wait = |want: bool| wait_suspended(&engine, want);
    wait(true);
    // Several messages behind one wake-up: the stream's plan must not be left queued.
    let mut f = NodeSpec::new("fx", NodeKind::Filter);
    f.inputs = ChannelMap::stereo();
    f.outputs = ChannelMap::stereo();
    engine.add_node(f, Some(Box::new(Thru))).unwrap();
    engine.link("test-sink", "fx").unwrap();
    let id = source(&engine, "s", 0.1, None);
    wait(false);
    engine.remove_node(id).unwrap();
    wait(true);
    engine.shutdown().unwrap();
}

#[test]
fn a_burst_of_edits_neither_blocks_its_caller_nor_waits_a_cycle_per_plan() {
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};
    // A long period, like a default-latency PulseAudio graph's 341 ms: one plan per
    // cycle would make the twelfth stream below wait twelve cycles, and an editor that
    // waited for room would sit through most of them (32 paplay clients starting at
    // once stalled quaverd's PulseAudio I/O thread for seconds that way).
    let mut dev = RecordingDevice::new(RATE, 0);
    dev.period = Duration::from_millis(300);
    let engine = Engine::start(config(256), vec![Box::new(dev)]).unwrap();
    let stats = engine.stats();
    let settled = |what: &str| {
        let t0 = Instant::now();
        while stats.plans_applied.load(Relaxed) < stats.plans_sent.load(Relaxed) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{what}: plans never applied"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    source(&engine, "first", 0.1, None);
    engine.link("first", "test-sink").unwrap();
    settled("the first stream");
    let before = stats.cycles.load(Relaxed);
    for i in 0..12 {
        let mut s = NodeSpec::new(&format!("s{i}"), NodeKind::PlaybackStream);
        s.outputs = ChannelMap::stereo();
        engine
            .add_node_linked(s, Some(Box::new(Dc(0.01))), Some("test-sink"))
            .unwrap();
    }
    let returned = stats.cycles.load(Relaxed);
    assert!(
        returned <= before + 1,
        "the edits waited for {} cycles",
        returned - before
    );
    settled("the burst");
    let applied = stats.cycles.load(Relaxed);
    assert!(
        applied <= before + 3,
        "the burst took {} cycles to apply",
        applied - before
    );
    engine.shutdown().unwrap();
}

#[test]
fn subscribers_see_every_change_in_order() {
    use quaver_engine::GraphEvent;
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, runner) = Engine::new_manual(config(256), vec![Box::new(dev)]).unwrap();
    let rx = engine.subscribe();
    let id = source(&engine, "a", 0.1, None);
    engine.link("a", "test-sink").unwrap();
    engine.set_volume("a", Some(0.5), None).unwrap();
    assert!(engine.link("a", "nope").is_err());
    engine.remove_node(id).unwrap();
    let got: Vec<GraphEvent> = rx.try_iter().collect();
    assert_eq!(
        got,
        vec![
            GraphEvent::NodeAdded(id),
            GraphEvent::LinksChanged,
            GraphEvent::NodeChanged(id),
            GraphEvent::NodeRemoved(id),
        ]
    );
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_device_ring_caps_the_quantum() {
    use quaver_devices::sim::{SimCard, SimConfig, VirtualClock};
    let card = SimCard::with_clock(
        SimConfig {
            buffer_frames: 1024,
            period_frames: 256,
            ..SimConfig::default()
        },
        Box::new(VirtualClock::new()),
    )
    .unwrap();
    let (engine, mut runner) = Engine::new_manual(config(1024), vec![Box::new(card)]).unwrap();
    // 1024 - 256 = 768 frames fit; the largest power of two is 512.
    assert_eq!(engine.config().quantum_max, 512);
    assert_eq!(engine.quantum(), 512);
    source(&engine, "big", 0.0, Some(1 << 16));
    assert_eq!(engine.quantum(), 512);
    for _ in 0..20 {
        runner.run_cycle();
    }
    assert!(
        !engine.status().devices[0].gone,
        "the card was never asked for too much"
    );
    engine.shutdown_manual(runner).unwrap();
}

/// Outputs the cycle number / 1000 on every channel, so a stale cycle is visible.
struct CycleValue;

impl quaver_engine::Processor for CycleValue {
    fn process(
        &mut self,
        cx: &quaver_engine::CycleInfo,
        _inputs: quaver_dsp::Planar<'_>,
        outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        for ch in 0..outputs.channels() {
            outputs.channel_mut(ch).fill(cx.cycle as f32 / 1000.0);
        }
    }
}

#[test]
fn a_fading_link_carries_the_current_cycle_not_the_previous_one() {
    let q = 256;
    let dev = RecordingDevice::new(RATE, 64 * q);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(q), vec![Box::new(dev)]).unwrap();
    // The filter gets the lower id, so without the fading link it would run first.
    let mut f = NodeSpec::new("thru", NodeKind::Filter);
    f.inputs = ChannelMap::stereo();
    f.outputs = ChannelMap::stereo();
    engine.add_node(f, Some(Box::new(Thru))).unwrap();
    let mut s = NodeSpec::new("counter", NodeKind::Filter);
    s.outputs = ChannelMap::stereo();
    engine.add_node(s, Some(Box::new(CycleValue))).unwrap();
    engine.link("counter", "thru").unwrap();
    engine.link("thru", "test-sink").unwrap();
    while runner.pending() > 0 {
        runner.run_cycle();
    }
    runner.run_cycle();
    engine.unlink("counter", "thru").unwrap();
    let fade_cycle = engine
        .stats()
        .cycles
        .load(std::sync::atomic::Ordering::Relaxed);
    runner.run_cycle();
    let out = left.lock().unwrap().clone();
    let first = out[fade_cycle as usize * q];
    let current = fade_cycle as f32 / 1000.0;
    assert!(
        (first - current * 63.0 / 64.0).abs() < 1e-6,
        "fade-out sample {first}, expected the current cycle's value {current} ramped"
    );
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn relink_moves_a_stream_in_one_cycle() {
    let q = 256;
    let dev = RecordingDevice::new(RATE, 64 * q);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(q), vec![Box::new(dev)]).unwrap();
    let mut f = NodeSpec::new("other", NodeKind::Filter);
    f.inputs = ChannelMap::stereo();
    f.outputs = ChannelMap::stereo();
    engine.add_node(f, Some(Box::new(Thru))).unwrap();
    source(&engine, "dc", 0.5, None);
    engine.link("dc", "test-sink").unwrap();
    settle(&mut runner, &[&left]);
    let rx = engine.subscribe();
    engine.relink("dc", Some("test-sink"), "other").unwrap();
    assert_eq!(runner.pending(), 1, "one plan for the whole move");
    runner.run_cycle();
    runner.run_cycle();
    let out = left.lock().unwrap().clone();
    assert!(out[0] < 0.5 && out[0] > 0.49 && out[64..q].iter().all(|&s| s == 0.0));
    assert!(out[q..].iter().all(|&s| s == 0.0));
    let g = engine.graph();
    let dests: Vec<String> = g
        .links
        .values()
        .filter(|l| g.ports[&l.output].node == g.node_by_name("dc").unwrap().id)
        .map(|l| g.port_path(l.input))
        .collect();
    assert_eq!(dests, vec!["other:input_FL", "other:input_FR"]);
    assert_eq!(rx.try_iter().count(), 1);
    // A failed move changes nothing.
    assert!(engine.relink("dc", None, "nope").is_err());
    assert_eq!(engine.graph().links.len(), g.links.len());
    engine.shutdown_manual(runner).unwrap();
}

/// A device whose reopen after the idle close fails, as when the card vanished or
/// another program took it while we were idle.
struct ReopenFails {
    inner: RecordingDevice,
    closed: bool,
}

impl quaver_devices::Device for ReopenFails {
    fn info(&self) -> &quaver_devices::DeviceInfo {
        self.inner.info()
    }
    fn start(&mut self, quantum: usize) -> Result<(), quaver_devices::DeviceError> {
        if self.closed {
            return Err(quaver_devices::DeviceError::Io {
                device: "test".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::ResourceBusy,
                    "reopening after the idle close: busy",
                ),
            });
        }
        self.inner.start(quantum)
    }
    fn wait(
        &mut self,
        q: usize,
    ) -> Result<quaver_devices::WaitStatus, quaver_devices::DeviceError> {
        self.inner.wait(q)
    }
    fn write(&mut self, buf: quaver_dsp::Planar<'_>) -> Result<(), quaver_devices::DeviceError> {
        self.inner.write(buf)
    }
    fn read(
        &mut self,
        buf: &mut quaver_dsp::PlanarMut<'_>,
    ) -> Result<(), quaver_devices::DeviceError> {
        self.inner.read(buf)
    }
    fn suspend(&mut self) {}
    fn close_idle(&mut self) -> bool {
        self.closed = true;
        true
    }
    fn playback_delay(&self) -> usize {
        0
    }
    fn capture_delay(&self) -> usize {
        0
    }
    fn counters(&self) -> quaver_devices::DeviceCounters {
        self.inner.counters()
    }
    fn close(&mut self) -> Result<(), quaver_devices::DeviceError> {
        Ok(())
    }
}

#[test]
fn a_device_that_cannot_reopen_after_the_idle_close_is_dropped_not_a_panic() {
    use quaver_engine::RtEvent;
    let dev = ReopenFails {
        inner: RecordingDevice::new(RATE, 0),
        closed: false,
    };
    let mut cfg = config(256);
    cfg.suspend_timeout = Some(std::time::Duration::from_millis(5));
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    // Driven by hand, the runner restarts its devices in the next cycle whatever the
    // graph: stop at the first idle suspend, as the real thread would block there.
    let mut events = Vec::new();
    for _ in 0..10 {
        runner.run_cycle();
        events.extend(engine.collect());
        if events.contains(&RtEvent::Suspended) {
            break;
        }
    }
    assert!(
        events.contains(&RtEvent::DeviceClosed { device: 0 }),
        "{events:?}"
    );
    source(&engine, "s", 0.1, None);
    for _ in 0..3 {
        runner.run_cycle();
    }
    let events = engine.collect();
    assert!(
        events.contains(&RtEvent::DeviceGone { device: 0 }),
        "{events:?}"
    );
    assert!(!events.contains(&RtEvent::DeviceReopened { device: 0 }));
    assert!(engine.status().devices[0].gone);
    engine.shutdown_manual(runner).unwrap();
}

/// Busy-waits (no sleep: its thread stays on the CPU) a fixed time per cycle.
struct Spin(std::time::Duration);

impl quaver_engine::Processor for Spin {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        _inputs: quaver_dsp::Planar<'_>,
        outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < self.0 {
            std::hint::spin_loop();
        }
        outputs.fill_silence();
    }
}

#[test]
fn node_timing_shows_at_least_the_time_a_node_spends() {
    const SPIN: std::time::Duration = std::time::Duration::from_micros(1500);
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, mut runner) = Engine::new_manual(config(256), vec![Box::new(dev)]).unwrap();
    let mut s = NodeSpec::new("slow", NodeKind::Filter);
    s.outputs = ChannelMap::stereo();
    engine.add_node(s, Some(Box::new(Spin(SPIN)))).unwrap();
    source(&engine, "fast", 0.1, None);
    engine.link("slow", "test-sink").unwrap();
    engine.link("fast", "test-sink").unwrap();
    settle(&mut runner, &[]);
    let _ = engine.node_timing();
    for _ in 0..20 {
        runner.run_cycle();
    }
    let t = engine.node_timing();
    let get = |name: &str| t.iter().find(|n| n.name == name).unwrap().clone();
    let (slow, fast, sink) = (get("slow"), get("fast"), get("test-sink"));
    let spin = SPIN.as_nanos() as u64;
    assert_eq!(slow.cycles, 20);
    assert!(slow.busy_avg_ns >= spin, "{slow:?}");
    assert!(slow.busy_max_ns >= spin, "{slow:?}");
    assert!(slow.rt_avg_ns >= spin, "{slow:?}");
    assert_eq!(
        (slow.wait_avg_ns, slow.wait_max_ns),
        (0, 0),
        "in-process nodes do not wait"
    );
    assert!(fast.busy_avg_ns < slow.busy_avg_ns, "{fast:?} vs {slow:?}");
    assert_eq!((fast.quantum, fast.rate), (256, RATE));
    assert_eq!(sink.cycles, 20);
    // The maxima cover the interval since the previous read: nothing ran since.
    let again = engine.node_timing();
    let slow2 = again.iter().find(|n| n.name == "slow").unwrap();
    assert_eq!((slow2.cycles, slow2.busy_max_ns), (0, 0));
    assert!(
        slow2.busy_avg_ns >= spin,
        "an idle interval shows the last value"
    );
    // The cycle's busy time holds every node's.
    assert!(
        engine
            .stats()
            .busy_ns_max
            .load(std::sync::atomic::Ordering::Relaxed)
            >= spin
    );
}

#[test]
fn node_timing_can_be_turned_off() {
    let dev = RecordingDevice::new(RATE, 0);
    let cfg = EngineConfig {
        node_timing: false,
        ..config(256)
    };
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    source(&engine, "fast", 0.1, None);
    settle(&mut runner, &[]);
    for _ in 0..5 {
        runner.run_cycle();
    }
    let t = engine.node_timing();
    assert!(t.iter().all(|n| n.cycles_total == 0), "{t:?}");
    assert!(
        engine
            .stats()
            .cycles
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 5
    );
}

#[test]
fn falling_behind_a_paced_device_counts_one_run_of_overdue_cycles() {
    use quaver_devices::VirtualClock;
    use quaver_devices::null::{NullConfig, NullDevice};
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Duration;
    let clock = VirtualClock::new();
    let null = NullDevice::with_clock(NullConfig::default(), Box::new(clock.clone())).unwrap();
    let (engine, mut runner) = Engine::new_manual(config(64), vec![Box::new(null)]).unwrap();
    for _ in 0..10 {
        runner.run_cycle();
    }
    let st = engine.stats();
    assert_eq!(st.overdue_cycles.load(Relaxed), 0, "on time");
    // 5 ms lost at 1.33 ms per cycle: the next cycle wakes 3.67 ms after its deadline,
    // and the null device restarts its time line there rather than run the missed
    // cycles back to back, so the cycles after it are on time.
    clock.advance(Duration::from_millis(5));
    for _ in 0..10 {
        runner.run_cycle();
    }
    assert_eq!(st.overdue_cycles.load(Relaxed), 1);
    assert_eq!(st.overdue_runs.load(Relaxed), 1, "one fall behind");
    // Less than a period late is a late wakeup, not a cycle lost.
    clock.advance(Duration::from_millis(1));
    for _ in 0..10 {
        runner.run_cycle();
    }
    assert_eq!(st.overdue_runs.load(Relaxed), 1);
    clock.advance(Duration::from_millis(3));
    for _ in 0..10 {
        runner.run_cycle();
    }
    assert_eq!(st.overdue_cycles.load(Relaxed), 2);
    assert_eq!(st.overdue_runs.load(Relaxed), 2);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_held_engine_suspends_with_streams_and_resumes_when_released() {
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::{Duration, Instant};
    // Idle suspend off: only the hold suspends.
    let dev = RecordingDevice::new(RATE, 0);
    let engine = Engine::start(config(256), vec![Box::new(dev)]).unwrap();
    let wait = |want: bool| wait_suspended(&engine, want);
    source(&engine, "s", 0.25, None);
    engine.link("s", "test-sink").unwrap();
    let written = || engine.stats().cycles.load(Relaxed);
    let t0 = Instant::now();
    while written() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "no cycle ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(engine.hold(true).unwrap(), "hold returns once suspended");
    assert!(engine.held());
    wait(true);
    let at_hold = written();
    // Held: a stream is there, and still no cycle runs (this device never sleeps, so a
    // running engine would count thousands in this time).
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(written(), at_hold, "cycles ran while held");
    engine.hold(false).unwrap();
    wait(false);
    let t0 = Instant::now();
    while written() == at_hold {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no cycle after release"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Again: each hold suspends, each release resumes.
    engine.hold(true).unwrap();
    wait(true);
    engine.hold(false).unwrap();
    wait(false);
    engine.shutdown().unwrap();
}

/// The idle timeout can change while the engine runs (PulseAudio's
/// module-suspend-on-idle unloaded, then loaded again): with none an idle engine never
/// suspends; with one it suspends once idle that long.
#[test]
fn the_idle_suspend_timeout_can_be_changed_while_running() {
    use std::sync::atomic::Ordering::Relaxed;
    let q = 256;
    let dev = RecordingDevice::new(RATE, 16 * q);
    let mut cfg = config(q);
    cfg.suspend_timeout = Some(std::time::Duration::from_millis(20));
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    engine.set_suspend_timeout(None).unwrap();
    // 200 idle cycles (about a second) and still running.
    for _ in 0..200 {
        runner.run_cycle();
    }
    assert!(
        !engine.stats().suspended.load(Relaxed),
        "suspended with no timeout"
    );
    // Idle for long already: the cycles after the change suspend.
    engine
        .set_suspend_timeout(Some(std::time::Duration::from_millis(20)))
        .unwrap();
    for _ in 0..6 {
        runner.run_cycle();
    }
    assert!(
        engine.stats().suspended.load(Relaxed),
        "not suspended after the timeout"
    );
}

/// Counts its cycles and plays a constant.
struct Counted(std::sync::Arc<std::sync::atomic::AtomicUsize>, f32);

impl quaver_engine::Processor for Counted {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        _inputs: quaver_dsp::Planar<'_>,
        outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for ch in 0..outputs.channels() {
            outputs.channel_mut(ch).fill(self.1);
        }
    }
}

/// Counts its cycles and keeps the last sample it was given.
struct Probe(
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicU32>,
);

impl quaver_engine::Processor for Probe {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        inputs: quaver_dsp::Planar<'_>,
        _outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let last = inputs.channel(0).last().copied().unwrap_or(0.0);
        self.1
            .store(last.to_bits(), std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn a_suspended_virtual_sink_stops_its_streams_and_recorders_while_the_card_plays_on() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
    let dev = RecordingDevice::new(RATE, 4096);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(256), vec![Box::new(dev)]).unwrap();
    let vsink = common::virtual_sink(&engine);
    let played = Arc::new(AtomicUsize::new(0));
    let mut a = NodeSpec::new("a", NodeKind::PlaybackStream);
    a.outputs = ChannelMap::stereo();
    // A low-latency stream: it sets the quantum while its sink runs, not while held.
    a.latency_frames = Some(64);
    engine
        .add_node(a, Some(Box::new(Counted(played.clone(), 0.25))))
        .unwrap();
    engine.link("a", "vsink").unwrap();
    let (heard, last) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicU32::new(0)));
    let mut r = NodeSpec::new("rec", NodeKind::RecordStream);
    r.inputs = ChannelMap::stereo();
    engine
        .add_node(r, Some(Box::new(Probe(heard.clone(), last.clone()))))
        .unwrap();
    engine.link("vsink", "rec").unwrap();
    source(&engine, "b", 0.125, None);
    engine.link("b", "test-sink").unwrap();
    let cycles = |runner: &mut quaver_engine::RtRunner| {
        settle(runner, &[&left]);
        // Past the device's start fade, which is longer than a few 64-frame cycles.
        for _ in 0..16 {
            runner.run_cycle();
        }
        left.lock().unwrap().clear();
        played.store(0, Relaxed);
        heard.store(0, Relaxed);
        for _ in 0..4 {
            runner.run_cycle();
        }
        let card = left.lock().unwrap().clone();
        assert_eq!(card.len(), 4 * engine.quantum());
        assert!(
            card.iter().all(|&x| x == 0.125),
            "the card's stream was disturbed: {:?}",
            &card[..8.min(card.len())]
        );
        (played.load(Relaxed), heard.load(Relaxed))
    };
    assert_eq!(cycles(&mut runner), (4, 4));
    assert_eq!(f32::from_bits(last.load(Relaxed)), 0.25);
    assert_eq!(engine.quantum(), engine.quantum_for_latency(64));

    assert!(engine.suspend_node(vsink, true).unwrap());
    assert!(
        !engine.suspend_node(vsink, true).unwrap(),
        "a second suspend changes nothing"
    );
    assert!(engine.graph().nodes[&vsink].suspended);
    assert_eq!(
        cycles(&mut runner),
        (0, 0),
        "the suspended sink's stream or recorder ran"
    );
    assert_eq!(engine.quantum(), 256, "a held stream still set the quantum");

    let card = engine.graph().node_by_name("test-sink").unwrap().id;
    assert!(
        engine.suspend_node(card, true).is_err(),
        "a device is suspended with `hold`"
    );

    assert!(engine.suspend_node(vsink, false).unwrap());
    assert_eq!(cycles(&mut runner), (4, 4));
    assert_eq!(engine.quantum(), engine.quantum_for_latency(64));
    engine.shutdown_manual(runner).unwrap();
}

/// A virtual sink that plays into the card (a remap or combine sink) and is suspended
/// must not cut the card's sound mid-wave, nor jump back in at full level on resume.
#[test]
fn suspending_a_virtual_sink_that_feeds_the_card_fades_it_out_and_back_in() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
    let q = 256;
    let dev = RecordingDevice::new(RATE, 64 * q);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(q), vec![Box::new(dev)]).unwrap();
    let vsink = common::virtual_sink(&engine);
    engine.link("vsink", "test-sink").unwrap();
    let played = Arc::new(AtomicUsize::new(0));
    let mut a = NodeSpec::new("dc", NodeKind::PlaybackStream);
    a.outputs = ChannelMap::stereo();
    engine
        .add_node(a, Some(Box::new(Counted(played.clone(), 0.5))))
        .unwrap();
    engine.link("dc", "vsink").unwrap();
    // A recorder of the sink's monitor.
    let heard = Arc::new(AtomicUsize::new(0));
    let mut r = NodeSpec::new("rec", NodeKind::RecordStream);
    r.inputs = ChannelMap::stereo();
    engine
        .add_node(
            r,
            Some(Box::new(Probe(heard.clone(), Arc::new(AtomicU32::new(0))))),
        )
        .unwrap();
    engine.link("vsink", "rec").unwrap();
    settle(&mut runner, &[&left]);
    played.store(0, Relaxed);
    heard.store(0, Relaxed);
    for _ in 0..4 {
        runner.run_cycle();
    }
    engine.suspend_node(vsink, true).unwrap();
    for _ in 0..3 {
        runner.run_cycle();
    }
    engine.suspend_node(vsink, false).unwrap();
    for _ in 0..3 {
        runner.run_cycle();
    }
    let out = left.lock().unwrap().clone();
    assert_eq!(out.len(), 10 * q);
    let cycle = |k: usize| &out[k * q..(k + 1) * q];
    assert!(cycle(3).iter().all(|&s| s == 0.5));
    assert!(
        max_step(&out) <= 0.5 / 64.0 + 1e-6,
        "the suspend or the resume clicked: max step {} (cycles 4 and 7 start {} and {})",
        max_step(&out),
        cycle(4)[0],
        cycle(7)[0]
    );
    assert!(
        cycle(5).iter().chain(cycle(6)).all(|&s| s == 0.0),
        "silent while suspended"
    );
    assert!(
        cycle(9).iter().all(|&s| s == 0.5),
        "steady after the resume"
    );
    // The stream played one cycle into the fade-out, and the monitor's recorder got it.
    assert_eq!(played.load(Relaxed), 4 + 1 + 3);
    assert_eq!(heard.load(Relaxed), played.load(Relaxed));
    engine.shutdown_manual(runner).unwrap();
}
