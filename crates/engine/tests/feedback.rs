//! Links that close a loop, driven cycle by cycle on a recording device: a node into
//! itself, loops of two and three, the closing link removed, split-phase (callback)
//! nodes in a loop. The link that closed the loop carries exactly the previous cycle;
//! every other link keeps carrying the same cycle.

mod common;

use common::client::{Behaviour, TestClient};
use common::{Dc, RecordingDevice, Thru};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::feedback::feedback_links;
use quaver_engine::{
    CallbackConfig, CallbackNode, CycleInfo, Engine, EngineConfig, NodeId, NodeKind, NodeSpec,
    Processor, RtRunner,
};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

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

type Rec = Arc<Mutex<Vec<f32>>>;

/// An engine on a recording device that does not fade in, and its two recorded channels.
fn setup(quantum: usize) -> (Engine, RtRunner, Rec, Rec) {
    let mut dev = RecordingDevice::new(RATE, 1 << 20);
    dev.fade_in = false;
    let (l, r) = (dev.left.clone(), dev.right.clone());
    let (engine, runner) = Engine::new_manual(config(quantum), vec![Box::new(dev)]).unwrap();
    (engine, runner, l, r)
}

/// Runs cycles until every queued edit is applied, then forgets what was recorded.
fn settle(runner: &mut RtRunner, out: &[&Rec]) {
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

/// Output = input + (1 + frame index): linked into itself, cycle k makes (k + 1)(1 + i)
/// only if every cycle reads exactly the one before, frame for frame.
struct Accumulate;

impl Processor for Accumulate {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            let out = outputs.channel_mut(ch);
            for (i, s) in out.iter_mut().enumerate() {
                *s = inputs.channel(ch)[i] + (1 + i) as f32;
            }
        }
    }
}

/// Output 0 is the graph's frame clock (position + i); output 1 is what input 0 got.
struct Clock;

impl Processor for Clock {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for (i, s) in outputs.channel_mut(0).iter_mut().enumerate() {
            *s = (cx.position + i as u64) as f32;
        }
        outputs.channel_mut(1).copy_from_slice(inputs.channel(0));
    }
}

fn filter(engine: &Engine, name: &str, p: Box<dyn Processor>) -> NodeId {
    let mut f = NodeSpec::new(name, NodeKind::Filter);
    f.inputs = ChannelMap::stereo();
    f.outputs = ChannelMap::stereo();
    engine.add_node(f, Some(p)).unwrap()
}

/// The graph's feedback links as "node:port→node:port", sorted.
fn feedback(engine: &Engine) -> Vec<String> {
    let g = engine.graph();
    let ids = feedback_links(&g);
    let mut v: Vec<String> = g
        .links
        .values()
        .filter(|l| ids.contains(&l.id))
        .map(|l| format!("{}→{}", g.port_path(l.output), g.port_path(l.input)))
        .collect();
    v.sort();
    v
}

#[test]
fn only_a_link_asked_for_with_feedback_may_close_a_loop() {
    // PulseAudio-facing edits (Engine::link, relink, add_node_linked) refuse a loop as
    // PulseAudio does; JACK's links (Engine::link_with_feedback) take it.
    let (engine, runner, _, _) = setup(64);
    filter(&engine, "a", Box::new(Thru));
    filter(&engine, "b", Box::new(Thru));
    engine.link("a", "b").unwrap();
    for (o, i) in [("b", "a"), ("a", "a")] {
        let err = engine.link(o, i).unwrap_err();
        assert!(err.to_string().contains("would make a cycle"), "{err}");
    }
    assert_eq!(engine.graph().links.len(), 2);
    assert_eq!(engine.link_with_feedback("b", "a").unwrap().len(), 2);
    assert_eq!(engine.link_with_feedback("a", "a").unwrap().len(), 2);
    assert_eq!(feedback(&engine).len(), 4);
    // A loop through a feedback link is still a loop to Engine::link.
    filter(&engine, "c", Box::new(Thru));
    engine.link("b", "c").unwrap();
    assert!(engine.link("c", "a").is_err());
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_node_linked_to_itself_hears_exactly_its_previous_cycle() {
    let q = 64;
    let (engine, mut runner, left, right) = setup(q);
    filter(&engine, "acc", Box::new(Accumulate));
    engine.link_with_feedback("acc", "test-sink").unwrap();
    engine.link_with_feedback("acc", "acc").unwrap();
    assert_eq!(
        feedback(&engine),
        ["acc:output_FL→acc:input_FL", "acc:output_FR→acc:input_FR"]
    );
    settle(&mut runner, &[&left, &right]);
    for _ in 0..8 {
        runner.run_cycle();
    }
    for rec in [&left, &right] {
        let out = rec.lock().unwrap().clone();
        assert_eq!(out.len(), 8 * q);
        for k in 1..8 {
            for i in 0..q {
                assert_eq!(
                    out[k * q + i] - out[(k - 1) * q + i],
                    (1 + i) as f32,
                    "cycle {k} frame {i}"
                );
            }
        }
    }
    engine.shutdown_manual(runner).unwrap();
}

/// Positions of the frames recorded after `settle`: the graph's frame clock.
fn recorded_from(engine: &Engine, q: usize) -> i64 {
    (engine.stats().cycles.load(Relaxed) as usize * q) as i64
}

/// Checks `rec[j] == start + j - lag` for every recorded frame.
fn assert_clock(rec: &Rec, start: i64, lag: i64, what: &str) {
    let out = rec.lock().unwrap().clone();
    assert!(!out.is_empty());
    for (j, &s) in out.iter().enumerate() {
        assert_eq!(s as i64, start + j as i64 - lag, "{what}, frame {j}");
    }
}

#[test]
fn in_a_loop_of_two_the_link_that_closed_it_is_one_quantum_late() {
    let q = 64;
    // a → b first, then b → a closes the loop: b hears a in the same cycle, a hears b
    // one quantum late (jackd2 does the same with the same connections).
    let (engine, mut runner, left, right) = setup(q);
    filter(&engine, "a", Box::new(Clock));
    filter(&engine, "b", Box::new(Thru));
    engine.link_with_feedback("a", "b").unwrap();
    engine
        .link_with_feedback("b:output_FL", "a:input_FL")
        .unwrap();
    engine.link_with_feedback("b", "test-sink").unwrap();
    assert_eq!(feedback(&engine), ["b:output_FL→a:input_FL"]);
    settle(&mut runner, &[&left, &right]);
    let start = recorded_from(&engine, q);
    for _ in 0..6 {
        runner.run_cycle();
    }
    // Left: a's clock through b, same cycle. Right: a's clock back through b into a
    // (one quantum), then through b again (same cycle).
    assert_clock(&left, start, 0, "a → b");
    assert_clock(&right, start, q as i64, "b → a → b");
    engine.shutdown_manual(runner).unwrap();

    // The other way round: b → a first, a → b closes the loop and is the late one.
    let (engine, mut runner, left, right) = setup(q);
    filter(&engine, "a", Box::new(Clock));
    filter(&engine, "b", Box::new(Thru));
    engine
        .link_with_feedback("b:output_FL", "a:input_FL")
        .unwrap();
    engine.link_with_feedback("a", "b").unwrap();
    engine.link_with_feedback("b", "test-sink").unwrap();
    assert_eq!(
        feedback(&engine),
        ["a:output_FL→b:input_FL", "a:output_FR→b:input_FR"]
    );
    settle(&mut runner, &[&left, &right]);
    let start = recorded_from(&engine, q);
    for _ in 0..6 {
        runner.run_cycle();
    }
    assert_clock(&left, start, q as i64, "a → b, late");
    assert_clock(&right, start, 2 * q as i64, "b → a (same cycle) → b (late)");
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_loop_through_three_keeps_the_chain_in_order_until_its_closing_link_goes() {
    let q = 64;
    let (engine, mut runner, left, right) = setup(q);
    filter(&engine, "a", Box::new(Clock));
    filter(&engine, "b", Box::new(Thru));
    filter(&engine, "c", Box::new(Thru));
    engine.link_with_feedback("a", "b").unwrap();
    engine.link_with_feedback("b", "c").unwrap();
    engine.link_with_feedback("c", "test-sink").unwrap();
    engine
        .link_with_feedback("c:output_FL", "a:input_FL")
        .unwrap();
    assert_eq!(feedback(&engine), ["c:output_FL→a:input_FL"]);
    settle(&mut runner, &[&left, &right]);
    let start = recorded_from(&engine, q);
    for _ in 0..5 {
        runner.run_cycle();
    }
    // a → b → c all in the same cycle; c → a one quantum late.
    assert_clock(&left, start, 0, "a → b → c");
    assert_clock(&right, start, q as i64, "c → a");
    // Removed, the closing link fades out over one cycle, then a hears nothing; the
    // chain is unchanged.
    engine.unlink("c:output_FL", "a:input_FL").unwrap();
    assert!(feedback(&engine).is_empty());
    left.lock().unwrap().clear();
    right.lock().unwrap().clear();
    let start = recorded_from(&engine, q);
    for _ in 0..4 {
        runner.run_cycle();
    }
    assert_clock(&left, start, 0, "a → b → c after the unlink");
    let r = right.lock().unwrap().clone();
    // The fade-out cycle: the previous cycle's clock, ramped down to nothing.
    for (i, &s) in r[..q].iter().enumerate() {
        let late = (start + i as i64 - q as i64) as f32;
        assert!(s <= late && s >= 0.0, "frame {i}: {s} vs {late}");
    }
    assert!(r[0] > 0.9 * (start - q as i64) as f32, "{}", r[0]);
    assert!(r[q..].iter().all(|&s| s == 0.0), "{:?}", &r[q..q + 4]);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_new_feedback_link_fades_in() {
    let q = 64;
    let (engine, mut runner, left, right) = setup(q);
    filter(&engine, "a", Box::new(Clock));
    filter(&engine, "b", Box::new(Thru));
    engine.link_with_feedback("a", "b").unwrap();
    engine.link_with_feedback("b", "test-sink").unwrap();
    settle(&mut runner, &[&left, &right]);
    engine
        .link_with_feedback("b:output_FL", "a:input_FL")
        .unwrap();
    let start = recorded_from(&engine, q);
    for _ in 0..3 {
        runner.run_cycle();
    }
    let r = right.lock().unwrap().clone();
    // Ramped from 0 within the first cycle, then exactly one quantum late.
    assert!(r[0] < 0.02 * (start - q as i64) as f32, "{}", r[0]);
    for (i, &s) in r[..q].iter().enumerate() {
        assert!(s <= (start + i as i64 - q as i64) as f32, "frame {i}: {s}");
    }
    for (j, &s) in r.iter().enumerate().skip(q) {
        assert_eq!(s as i64, start + j as i64 - q as i64, "frame {j}");
    }
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn when_the_quantum_grows_the_delayed_link_carries_silence_not_an_older_cycle() {
    // 128 frames, then 64 (a request), then 128 again: in the first grown cycle, frames
    // 64..128 of the previous cycle do not exist; an accumulator into itself must start
    // them from silence, not from what they held two quantum changes ago.
    let (engine, mut runner, left, right) = setup(128);
    let acc = filter(&engine, "acc", Box::new(Accumulate));
    engine.link_with_feedback("acc", "test-sink").unwrap();
    engine.link_with_feedback("acc", "acc").unwrap();
    settle(&mut runner, &[&left, &right]);
    for _ in 0..4 {
        runner.run_cycle();
    }
    engine.set_latency(acc, Some(128)).unwrap();
    settle(&mut runner, &[&left, &right]);
    assert_eq!(engine.status().quantum, 64);
    for _ in 0..4 {
        runner.run_cycle();
    }
    engine.set_latency(acc, None).unwrap();
    left.lock().unwrap().clear();
    runner.run_cycle();
    assert_eq!(engine.status().quantum, 128);
    let out = left.lock().unwrap().clone();
    assert_eq!(out.len(), 128);
    for (i, &s) in out.iter().enumerate().skip(64) {
        assert_eq!(s, (1 + i) as f32, "frame {i}");
    }
    // The first 64 frames carried on from the 64-frame cycle before.
    assert!(out[0] > 8.0, "{}", out[0]);
    engine.shutdown_manual(runner).unwrap();
}

/// A callback node (split phase) over a test client thread.
fn client(engine: &Engine, name: &str, behaviour: Behaviour) -> TestClient {
    let (client, transport) = TestClient::start(2, 2, behaviour);
    let config = CallbackConfig {
        // A hung client goes asynchronous within these tests' cycles, which run back
        // to back (the recording device does not wait).
        hung_ms: 1,
        ..CallbackConfig::default()
    };
    let (node, _stats) = CallbackNode::new(transport, config);
    let mut spec = NodeSpec::new(name, NodeKind::Filter);
    spec.inputs = ChannelMap::stereo();
    spec.outputs = ChannelMap::stereo();
    spec.keep_awake = true;
    engine.add_node(spec, Some(Box::new(node))).unwrap();
    client
}

#[test]
fn callback_clients_in_a_loop_and_into_themselves_never_wait_for_a_later_node() {
    // dc → x → y → x (feedback) → sink left; dc → z → z (into itself) → sink right.
    // Each is a split-phase node whose client runs in its own thread: the plan must
    // never finish a node before it began, so every cycle completes, nothing is missed,
    // and each cycle adds exactly dc to what the loop carried the cycle before.
    let q = 2048;
    let (engine, mut runner, left, right) = setup(q);
    let mut d = NodeSpec::new("dc", NodeKind::Filter);
    d.outputs = ChannelMap::stereo();
    engine.add_node(d, Some(Box::new(Dc(0.5)))).unwrap();
    let x = client(&engine, "x", Behaviour::Gain(1.0));
    let y = client(&engine, "y", Behaviour::Gain(1.0));
    let z = client(&engine, "z", Behaviour::Gain(1.0));
    engine.link_with_feedback("dc", "x").unwrap();
    engine.link_with_feedback("x", "y").unwrap();
    engine.link_with_feedback("y", "x").unwrap();
    engine
        .link_with_feedback("y:output_FL", "test-sink:playback_FL")
        .unwrap();
    engine.link_with_feedback("dc", "z").unwrap();
    engine.link_with_feedback("z", "z").unwrap();
    engine
        .link_with_feedback("z:output_FR", "test-sink:playback_FR")
        .unwrap();
    assert_eq!(
        feedback(&engine),
        [
            "y:output_FL→x:input_FL",
            "y:output_FR→x:input_FR",
            "z:output_FL→z:input_FL",
            "z:output_FR→z:input_FR"
        ]
    );
    settle(&mut runner, &[&left, &right]);
    let calls = (x.calls(), y.calls(), z.calls());
    let cycles = 30;
    for _ in 0..cycles {
        runner.run_cycle();
    }
    for c in [&x, &y, &z] {
        c.wait_idle();
        assert_eq!(c.xruns(), 0, "a client in the loop missed cycles");
    }
    assert_eq!(x.calls() - calls.0, cycles as u64);
    assert_eq!(y.calls() - calls.1, cycles as u64);
    assert_eq!(z.calls() - calls.2, cycles as u64);
    for (rec, what) in [(&left, "x ⇄ y"), (&right, "z → z")] {
        let out = rec.lock().unwrap().clone();
        assert_eq!(out.len(), cycles * q);
        assert!(out[0] > 1.0, "{what}: the loop carried nothing: {}", out[0]);
        for k in 1..cycles {
            let (a, b) = (out[(k - 1) * q], out[k * q]);
            assert_eq!(b - a, 0.5, "{what}: cycle {k}");
            assert!(out[k * q..(k + 1) * q].iter().all(|&s| s == b), "{what}");
        }
    }
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_hung_client_in_a_loop_costs_the_other_nothing() {
    // x → y → x (feedback), y hangs: x was finished before y began, so it never waits
    // for y and misses nothing; y misses, goes asynchronous, and the cycles go on.
    let q = 2048;
    let (engine, mut runner, left, right) = setup(q);
    let x = client(&engine, "x", Behaviour::Gain(1.0));
    let y = client(&engine, "y", Behaviour::HangAfter(5));
    engine.link_with_feedback("x", "y").unwrap();
    engine.link_with_feedback("y", "x").unwrap();
    engine.link_with_feedback("x", "test-sink").unwrap();
    assert_eq!(
        feedback(&engine),
        ["y:output_FL→x:input_FL", "y:output_FR→x:input_FR"]
    );
    settle(&mut runner, &[&left, &right]);
    let calls = x.calls();
    let cycles = 30;
    for _ in 0..cycles {
        runner.run_cycle();
    }
    x.wait_idle();
    assert_eq!(x.xruns(), 0, "x missed cycles behind the hung y");
    assert_eq!(x.calls() - calls, cycles as u64);
    assert!(y.xruns() > 0);
    assert_eq!(y.mode(), 1, "the hung client went asynchronous");
    assert_eq!(
        left.lock().unwrap().len(),
        cycles * q,
        "every cycle reached the sink"
    );
    engine.shutdown_manual(runner).unwrap();
}
