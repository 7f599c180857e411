//! Callback nodes: clients woken every cycle, with deadlines, xruns, asynchronous
//! fallback, parallel independent clients, and no blame for upstream lateness.

mod common;

use common::client::{Behaviour, TestClient};
use common::{Dc, RecordingDevice};
use quaver_dsp::ChannelMap;
use quaver_engine::{
    AsyncCause, CallbackConfig, CallbackMode, CallbackNode, CallbackStats, Engine, EngineConfig,
    NodeKind, NodeSpec, RtRunner,
};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RATE: u32 = 48000;
/// Large enough that a prompt client never misses its deadline (17 ms) on a busy
/// test machine; the behaviour under test does not depend on the quantum.
const Q: usize = 1024;

fn engine(capacity: usize) -> (Engine, RtRunner, Arc<Mutex<Vec<f32>>>) {
    let dev = RecordingDevice::new(RATE, capacity);
    let left = dev.left.clone();
    let cfg = EngineConfig {
        quantum_default: Q,
        quantum_min: 32,
        quantum_max: 4096,
        rt_priority: 0,
        suspend_timeout: None,
        ramp_frames: 1,
        ..EngineConfig::default()
    };
    let (e, r) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    (e, r, left)
}

fn add_client(
    engine: &Engine,
    name: &str,
    behaviour: Behaviour,
    config: CallbackConfig,
) -> (TestClient, Arc<CallbackStats>) {
    let (client, transport) = TestClient::start(2, 2, behaviour);
    let (node, stats) = CallbackNode::new(transport, config);
    let mut s = NodeSpec::new(name, NodeKind::Filter);
    s.inputs = ChannelMap::stereo();
    s.outputs = ChannelMap::stereo();
    s.keep_awake = true;
    engine.add_node(s, Some(Box::new(node))).unwrap();
    (client, stats)
}

fn dc(engine: &Engine, name: &str, v: f32) {
    let mut s = NodeSpec::new(name, NodeKind::Filter);
    s.outputs = ChannelMap::stereo();
    engine.add_node(s, Some(Box::new(Dc(v)))).unwrap();
}

/// Applies every queued edit, then forgets what was recorded so far.
fn settle(runner: &mut RtRunner, out: &Mutex<Vec<f32>>) {
    while runner.pending() > 0 {
        runner.run_cycle();
    }
    runner.run_cycle();
    out.lock().unwrap().clear();
}

/// Runs `n` cycles about 1 ms apart (the recording device does not pace).
fn run(runner: &mut RtRunner, n: usize) {
    for _ in 0..n {
        runner.run_cycle();
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_sync_client_answers_within_the_same_cycle() {
    let (engine, mut runner, left) = engine(64 * Q);
    dc(&engine, "dc", 0.25);
    let (client, stats) = add_client(
        &engine,
        "cb",
        Behaviour::Gain(2.0),
        CallbackConfig::default(),
    );
    engine.link("dc", "cb").unwrap();
    engine.link("cb", "test-sink").unwrap();
    settle(&mut runner, &left);
    run(&mut runner, 20);
    let out = left.lock().unwrap().clone();
    assert_eq!(out.len(), 20 * Q);
    assert!(
        out.iter().all(|&v| v == 0.5),
        "inputs × 2 in the same cycle"
    );
    assert_eq!(client.xruns(), 0);
    assert_eq!(stats.xruns.load(Relaxed), 0);
    assert_eq!(stats.mode(), CallbackMode::Sync);
    assert!(stats.woken.load(Relaxed) >= 20);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn the_client_sees_the_current_cycle_and_async_mode_adds_one_quantum() {
    let (engine, mut runner, left) = engine(64 * Q);
    let cfg = CallbackConfig {
        deadline: 0.5,
        async_after: 2,
        ..CallbackConfig::default()
    };
    // Sleeps 40 ms in each of its first two callbacks: two late answers → async (the
    // cycles it is busy for in between do not count towards `async_after`).
    let (client, stats) = add_client(
        &engine,
        "cb",
        Behaviour::CycleNumberLateFirst(2, Duration::from_millis(40)),
        cfg,
    );
    engine.link("cb", "test-sink").unwrap();
    settle(&mut runner, &left);
    let start = engine.stats().cycles.load(Relaxed);
    // Sync: the value recorded in cycle c is c; wait for the two late answers first.
    let t0 = Instant::now();
    while stats.mode() != CallbackMode::Async {
        assert!(t0.elapsed() < Duration::from_secs(10), "never went async");
        run(&mut runner, 1);
    }
    assert_eq!(
        client.mode(),
        CallbackMode::Async as u32,
        "the client is told"
    );
    // From now on the client answers at once; give it the time to, so that every
    // async cycle finds the answer to the previous one.
    let step = |runner: &mut RtRunner| {
        client.wait_idle();
        runner.run_cycle();
    };
    for _ in 0..5 {
        step(&mut runner);
    }
    left.lock().unwrap().clear();
    let first = engine.stats().cycles.load(Relaxed);
    for _ in 0..10 {
        step(&mut runner);
    }
    let out = left.lock().unwrap().clone();
    assert_eq!(out.len(), 10 * Q);
    for (k, block) in out.chunks(Q).enumerate() {
        let cycle = first + k as u64;
        assert!(
            block.iter().all(|&v| v == (cycle - 1) as f32),
            "async cycle {cycle} carries the client's answer to cycle {} (got {})",
            cycle - 1,
            block[0]
        );
    }
    assert!(stats.xruns.load(Relaxed) >= 2);
    assert!(start < first);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_hung_client_costs_one_deadline_and_nothing_to_the_others() {
    let (engine, mut runner, left) = engine(1024 * Q);
    // The hung client is created first, so it comes first among equals in the plan:
    // the other one must still be woken before the wait for it.
    let (bad, bad_stats) = add_client(
        &engine,
        "bad",
        Behaviour::HangAfter(3),
        CallbackConfig::default(),
    );
    dc(&engine, "dc", 0.25);
    let (good, good_stats) = add_client(
        &engine,
        "good",
        Behaviour::Gain(1.0),
        CallbackConfig::default(),
    );
    engine.link("dc", "good").unwrap();
    engine.link("good", "test-sink").unwrap();
    engine.link("bad", "test-sink").unwrap();
    settle(&mut runner, &left);
    run(&mut runner, 10);
    // From here on "bad" is hung. Cycles must not wait for it beyond one deadline.
    left.lock().unwrap().clear();
    let t0 = Instant::now();
    for _ in 0..200 {
        runner.run_cycle();
    }
    let elapsed = t0.elapsed();
    let deadline = Duration::from_secs_f64(Q as f64 / RATE as f64);
    assert!(
        elapsed < deadline * 3 + Duration::from_millis(200),
        "200 cycles took {elapsed:?}: the graph waited for a hung client more than once"
    );
    assert_eq!(good.xruns(), 0, "the hung client cost the others nothing");
    assert_eq!(good_stats.xruns.load(Relaxed), 0);
    assert_eq!(good_stats.skipped.load(Relaxed), 0);
    assert!(bad_stats.xruns.load(Relaxed) >= 199);
    assert_eq!(bad_stats.xrun_events.load(Relaxed), 1, "one unbroken run");
    // The good client's audio kept flowing; the hung one is silent.
    let out = left.lock().unwrap().clone();
    assert_eq!(out.len(), 200 * Q);
    assert!(out.iter().all(|&v| v == 0.25));
    assert!(good.calls() >= 210);
    // Silent for `hung_ms` (250 ms by default): marked hung and moved to async.
    let t0 = Instant::now();
    while bad_stats.mode() != CallbackMode::Async {
        assert!(t0.elapsed() < Duration::from_secs(10), "never marked hung");
        run(&mut runner, 1);
    }
    assert_eq!(bad_stats.async_cause(), AsyncCause::Hung);
    assert_eq!(bad.mode(), CallbackMode::Async as u32, "and told so");
    assert_eq!(good_stats.xruns.load(Relaxed), 0);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_client_after_a_late_one_is_skipped_not_blamed() {
    let (engine, mut runner, left) = engine(64 * Q);
    dc(&engine, "dc", 0.25);
    // Hangs only once the graph is settled, so that b depends on it by then.
    let (_a, a_stats) = add_client(
        &engine,
        "a",
        Behaviour::HangAfter(20),
        CallbackConfig::default(),
    );
    let (b, b_stats) = add_client(
        &engine,
        "b",
        Behaviour::Gain(1.0),
        CallbackConfig::default(),
    );
    engine.link("dc", "a").unwrap();
    engine.link("a", "b").unwrap();
    engine.link("b", "test-sink").unwrap();
    settle(&mut runner, &left);
    run(&mut runner, 50);
    assert!(a_stats.xruns.load(Relaxed) >= 25);
    assert_eq!(b_stats.xruns.load(Relaxed), 0, "b was never late");
    assert_eq!(b.xruns(), 0);
    assert!(
        b_stats.skipped.load(Relaxed) >= 1,
        "b was skipped in the cycle a used up"
    );
    assert!(
        b.calls() >= 25,
        "b runs on (with a's silence) once a is known busy"
    );
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn an_inactive_client_is_neither_woken_nor_blamed() {
    let (engine, mut runner, left) = engine(64 * Q);
    let (client, stats) = add_client(
        &engine,
        "cb",
        Behaviour::Gain(1.0),
        CallbackConfig::default(),
    );
    client.sh.active.store(false, Relaxed);
    engine.link("cb", "test-sink").unwrap();
    settle(&mut runner, &left);
    run(&mut runner, 10);
    assert_eq!(client.calls(), 0);
    assert_eq!(stats.xruns.load(Relaxed), 0);
    assert!(left.lock().unwrap().iter().all(|&v| v == 0.0));
    client.sh.active.store(true, Relaxed);
    run(&mut runner, 10);
    assert!(client.calls() >= 10);
    assert_eq!(stats.xruns.load(Relaxed), 0);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn ports_added_later_carry_audio_and_keep_the_devices_awake() {
    let (engine, mut runner, left) = engine(64 * Q);
    dc(&engine, "dc", 0.25);
    let (client, transport) = TestClient::start(2, 2, Behaviour::Gain(3.0));
    let (node, stats) = CallbackNode::new(transport, CallbackConfig::default());
    let mut s = NodeSpec::new("cb", NodeKind::Filter);
    s.max_inputs = 2;
    s.max_outputs = 2;
    s.keep_awake = true;
    let id = engine.add_node(s, Some(Box::new(node))).unwrap();
    let i = engine
        .add_port(
            id,
            quaver_engine::Direction::In,
            Some("in"),
            quaver_dsp::ChannelPosition::Aux(0),
        )
        .unwrap();
    engine
        .add_port(
            id,
            quaver_engine::Direction::Out,
            Some("out"),
            quaver_dsp::ChannelPosition::Aux(0),
        )
        .unwrap();
    engine.link("dc:output_FL", "cb:in").unwrap();
    engine.link("cb:out", "test-sink:playback_FL").unwrap();
    settle(&mut runner, &left);
    run(&mut runner, 5);
    assert!(left.lock().unwrap().iter().all(|&v| v == 0.75));
    engine.remove_port(id, i).unwrap();
    settle(&mut runner, &left);
    run(&mut runner, 5);
    assert!(left.lock().unwrap().iter().all(|&v| v == 0.0));
    assert_eq!(stats.xruns.load(Relaxed), 0);
    assert!(client.calls() >= 10);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn node_timing_shows_a_clients_callback_time_as_busy() {
    const SLOW: Duration = Duration::from_millis(3);
    let (engine, mut runner, left) = engine(64 * Q);
    let (_slow, _) = add_client(
        &engine,
        "slow",
        Behaviour::Slow(SLOW),
        CallbackConfig::default(),
    );
    let (_quick, _) = add_client(
        &engine,
        "quick",
        Behaviour::Gain(1.0),
        CallbackConfig::default(),
    );
    engine.link("slow", "test-sink").unwrap();
    engine.link("quick", "test-sink").unwrap();
    settle(&mut runner, &left);
    let _ = engine.node_timing();
    run(&mut runner, 20);
    let t = engine.node_timing();
    let get = |name: &str| t.iter().find(|n| n.name == name).unwrap().clone();
    let (slow, quick) = (get("slow"), get("quick"));
    let slow_ns = SLOW.as_nanos() as u64;
    assert!(slow.cycles >= 1, "{slow:?}");
    assert!(slow.busy_avg_ns >= slow_ns, "{slow:?}");
    assert!(slow.busy_max_ns >= slow_ns, "{slow:?}");
    assert!(slow.wait_max_ns >= slow.wait_avg_ns, "{slow:?}");
    assert!(quick.cycles >= 1, "{quick:?}");
    assert!(
        quick.busy_avg_ns < slow.busy_avg_ns,
        "{quick:?} vs {slow:?}"
    );
    assert_eq!(quick.xruns, 0);
    engine.shutdown_manual(runner).unwrap();
}
