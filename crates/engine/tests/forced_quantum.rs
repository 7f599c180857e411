//! The forced quantum (`Engine::force_quantum`): it overrides every latency request,
//! outlives the node that was running when it was set, is refused outside the bounds or
//! off the powers of two, and released goes back to the request rule.

mod common;

use common::{Dc, RecordingDevice};
use quaver_dsp::ChannelMap;
use quaver_engine::{Engine, EngineConfig, EngineError, NodeKind, NodeSpec, QuantumSource};
use std::sync::atomic::Ordering::Relaxed;

const RATE: u32 = 48000;

fn config() -> EngineConfig {
    EngineConfig {
        quantum_default: 1024,
        quantum_min: 32,
        quantum_max: 4096,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    }
}

fn source(engine: &Engine, name: &str, latency: Option<u32>) -> u32 {
    let mut s = NodeSpec::new(name, NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    s.latency_frames = latency;
    engine.add_node(s, Some(Box::new(Dc(0.0)))).unwrap()
}

/// The quantum the RT thread runs once every queued edit is applied.
fn running_quantum(engine: &Engine, runner: &mut quaver_engine::RtRunner) -> usize {
    let mut n = 0;
    while runner.pending() > 0 {
        runner.run_cycle();
        n += 1;
        assert!(n < 100, "edits never drained");
    }
    runner.run_cycle();
    engine.stats().quantum.load(Relaxed) as usize
}

#[test]
fn a_forced_quantum_overrides_requests_and_outlives_them() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, mut runner) = Engine::new_manual(config(), vec![Box::new(dev)]).unwrap();
    assert_eq!(engine.quantum_info().source, QuantumSource::Default);
    let a = source(&engine, "a", Some(960)); // 480 → 384
    assert_eq!(engine.quantum(), 384);
    let info = engine.quantum_info();
    assert_eq!(
        info.source,
        QuantumSource::Requested {
            node: a,
            name: "a".into(),
            latency: 960
        }
    );

    engine.force_quantum(Some(128)).unwrap();
    assert_eq!(engine.quantum(), 128);
    assert_eq!(running_quantum(&engine, &mut runner), 128);
    let info = engine.quantum_info();
    assert_eq!(
        (info.source, info.forced),
        (QuantumSource::Forced, Some(128))
    );

    // A smaller request does not win against it, nor a larger one.
    let b = source(&engine, "b", Some(64));
    assert_eq!(engine.quantum(), 128);
    engine.remove_node(b).unwrap();
    engine.remove_node(a).unwrap();
    // With every node gone it stays: it is the server's setting, not a request.
    assert_eq!(engine.quantum(), 128);
    assert_eq!(running_quantum(&engine, &mut runner), 128);

    // Forcing it larger than every request works too.
    let c = source(&engine, "c", Some(128)); // 64
    engine.force_quantum(Some(2048)).unwrap();
    assert_eq!(running_quantum(&engine, &mut runner), 2048);

    engine.force_quantum(None).unwrap();
    assert_eq!(engine.quantum(), 64, "released: the request rule again");
    assert_eq!(running_quantum(&engine, &mut runner), 64);
    assert_eq!(engine.quantum_info().forced, None);
    engine.remove_node(c).unwrap();
    assert_eq!(engine.quantum(), 1024);
    assert_eq!(engine.quantum_info().source, QuantumSource::Default);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_forced_quantum_off_the_powers_of_two_or_out_of_bounds_is_refused() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, mut runner) = Engine::new_manual(config(), vec![Box::new(dev)]).unwrap();
    engine.force_quantum(Some(256)).unwrap();
    for bad in [0, 3, 100, 192, 16, 8192, 1 << 20] {
        let e = engine.force_quantum(Some(bad)).unwrap_err();
        assert!(matches!(e, EngineError::Invalid(_)), "{bad}: {e}");
        let msg = e.to_string();
        assert!(
            msg.contains("power of two") || msg.contains("out of bounds 32..=4096"),
            "{bad}: {msg}"
        );
        // The refusal changed nothing.
        assert_eq!(engine.quantum_info().forced, Some(256));
    }
    assert_eq!(running_quantum(&engine, &mut runner), 256);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_forced_quantum_needs_no_rounding_for_power_of_two_nodes() {
    let dev = RecordingDevice::new(RATE, 0);
    let (engine, mut runner) = Engine::new_manual(config(), vec![Box::new(dev)]).unwrap();
    let mut s = NodeSpec::new("jack-like", NodeKind::Filter);
    s.inputs = ChannelMap::stereo();
    s.pow2_quantum = true;
    engine.add_node(s, Some(Box::new(Dc(0.0)))).unwrap();
    engine.force_quantum(Some(32)).unwrap();
    assert_eq!(running_quantum(&engine, &mut runner), 32);
    engine.force_quantum(Some(4096)).unwrap();
    assert_eq!(running_quantum(&engine, &mut runner), 4096);
    engine.shutdown_manual(runner).unwrap();
}
