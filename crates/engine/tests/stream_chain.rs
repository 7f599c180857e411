//! A client stream's own filter chain (a rule's `chain`), cycle by cycle on a recording
//! device: it acts on that stream alone, from its first cycle, on a playback stream's
//! outputs and a record stream's inputs, and its controls change live.

mod common;

use common::{Dc, RecordingDevice};
use quaver_dsp::filter::{FilterChain, Gain};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{CycleInfo, Engine, EngineConfig, NodeKind, NodeSpec, Processor};
use std::sync::{Arc, Mutex};

const Q: usize = 256;

fn config() -> EngineConfig {
    EngineConfig {
        quantum_default: Q,
        quantum_min: 32,
        quantum_max: 4096,
        rt_priority: 0,
        suspend_timeout: None,
        ramp_frames: 64,
        ..EngineConfig::default()
    }
}

fn halve() -> FilterChain {
    FilterChain::new(vec![Box::new(Gain::new(-20.0 * 2f64.log10()).unwrap())])
}

/// A record stream's processor that keeps channel 0 of what reaches it.
struct Grab(Arc<Mutex<Vec<f32>>>);

impl Processor for Grab {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        self.0.lock().unwrap().extend_from_slice(inputs.channel(0));
    }
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn a_streams_chain_acts_on_that_stream_alone_from_its_first_cycle() {
    let dev = RecordingDevice::new(48_000, 1 << 16);
    let left = dev.left.clone();
    let (engine, mut runner) = Engine::new_manual(config(), vec![Box::new(dev)]).unwrap();
    let stream = |name: &str| {
        let mut s = NodeSpec::new(name, NodeKind::PlaybackStream);
        s.outputs = ChannelMap::stereo();
        s
    };
    engine
        .add_stream_node(
            stream("plain"),
            Some(Box::new(Dc(0.25))),
            Some("test-sink"),
            None,
        )
        .unwrap();
    engine
        .add_stream_node(
            stream("chained"),
            Some(Box::new(Dc(0.25))),
            Some("test-sink"),
            Some(halve()),
        )
        .unwrap();
    let grabbed = Arc::new(Mutex::new(Vec::new()));
    let mut r = NodeSpec::new("rec", NodeKind::RecordStream);
    r.inputs = ChannelMap::stereo();
    engine
        .add_stream_node(
            r,
            Some(Box::new(Grab(grabbed.clone()))),
            Some("test-source"),
            Some(halve()),
        )
        .unwrap();
    let mut n = 0;
    while runner.pending() > 0 {
        runner.run_cycle();
        n += 1;
        assert!(n < 100, "edits never drained");
    }
    for _ in 0..4 {
        runner.run_cycle();
    }
    // No cycle ever carried the chained stream unfiltered (0.25 + 0.25); once both
    // play, 0.25 + 0.25 / 2 exactly as far as the gain's f32 goes.
    let out = left.lock().unwrap().clone();
    assert!(out.len() >= 4 * Q);
    assert!(
        out.iter().all(|&s| s <= 0.375 + 1e-6),
        "the chained stream played unfiltered"
    );
    let tail = &out[out.len() - 2 * Q..];
    assert!(tail.iter().all(|&s| close(s, 0.375)), "{:?}", &tail[..4]);
    // The record stream got the source (0.25) through its chain, from its first cycle.
    let got = grabbed.lock().unwrap().clone();
    assert!(got.len() >= 3 * Q);
    assert!(got.iter().all(|&s| close(s, 0.125)), "{:?}", &got[..4]);

    // A control of the stream's chain changes live: to 0 dB, ramped.
    engine.filter_control("chained", 0, "gain_db", 0.0).unwrap();
    let e = engine
        .filter_control("chained", 3, "gain_db", 0.0)
        .unwrap_err();
    assert!(e.to_string().contains("no filter 3"), "{e}");
    for _ in 0..4 {
        runner.run_cycle();
    }
    let out = left.lock().unwrap().clone();
    assert!(close(*out.last().unwrap(), 0.5), "{:?}", out.last());
    // Taken off: the stream plays as it is; a device sink refuses a stream's chain.
    let chained = engine.inspect(|g| g.node_by_name("chained").unwrap().id);
    engine.set_stream_filter(chained, None).unwrap();
    let sink = engine.inspect(|g| g.node_by_name("test-sink").unwrap().id);
    let e = engine.set_stream_filter(sink, Some(halve())).unwrap_err();
    assert!(e.to_string().contains("for client streams"), "{e}");
    engine.shutdown_manual(runner).unwrap();
}
