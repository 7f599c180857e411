//! The JACK transport in the real-time cycle allocates nothing: thousands of cycles
//! through start, slow-sync waits, locates while rolling, a timebase master writing
//! BBT, its loss and stops, with a node doing a callback client's transport work
//! (snapshot, sync answer, BBT, position requests) on the RT thread, under the
//! allocation guard.

mod common;

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use common::RecordingDevice;
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::rt::transport::{Position, TransportShared, TransportState};
use quaver_engine::{CycleInfo, Engine, EngineConfig, NodeKind, NodeSpec, Processor};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

/// What a callback node does for its client's transport each cycle.
struct Probe {
    transport: Arc<TransportShared>,
    token: u64,
    /// Cycles to answer "not ready" for, from the test thread.
    unready: Arc<AtomicU64>,
    rolling_cycles: Arc<AtomicU64>,
    cycle: u64,
}

impl Processor for Probe {
    fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        outputs.fill_silence();
        self.cycle += 1;
        let s = self.transport.snapshot();
        if s.state == TransportState::Starting && self.unready.load(Relaxed) > 0 {
            self.unready.fetch_sub(1, Relaxed);
            self.transport.report_unready();
        }
        if s.state == TransportState::Rolling {
            self.rolling_cycles.fetch_add(1, Relaxed);
        }
        if s.master == self.token {
            let mut bbt = s.next;
            bbt.valid = 0x10;
            bbt.extra[0] = s.next.frame / 24000 / 4 + 1;
            self.transport.report_master(self.token, &bbt);
        }
        if self.cycle.is_multiple_of(97) {
            self.transport.request_rt(&Position {
                frame: self.cycle as u32,
                ..Position::default()
            });
        }
    }
}

#[test]
fn the_transport_allocates_nothing_in_the_cycle() {
    let dev = RecordingDevice::new(48000, 0);
    let cfg = EngineConfig {
        quantum_default: 64,
        quantum_min: 32,
        quantum_max: 1024,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    let t = engine.transport().clone();
    let token = t.new_token();
    let unready = Arc::new(AtomicU64::new(0));
    let rolling = Arc::new(AtomicU64::new(0));
    let mut s = NodeSpec::new("probe", NodeKind::Filter);
    s.outputs = ChannelMap::stereo();
    engine
        .add_node(
            s,
            Some(Box::new(Probe {
                transport: t.clone(),
                token,
                unready: unready.clone(),
                rolling_cycles: rolling.clone(),
                cycle: 0,
            })),
        )
        .unwrap();
    engine.link("probe", "test-sink").unwrap();
    reset_violation_count();
    for round in 0..60 {
        match round % 6 {
            0 => {
                t.set_master(token, false).unwrap();
                unready.store(5, Relaxed);
                t.start();
            }
            1 => t
                .request(&Position {
                    frame: 48000 * round,
                    ..Position::default()
                })
                .unwrap(),
            2 => t.set_sync_timeout(10_000),
            3 => {
                unready.store(1000, Relaxed);
                t.request(&Position::default()).unwrap();
            }
            4 => t.release_master(token).unwrap(),
            _ => t.stop(),
        }
        assert_no_alloc(|| {
            for _ in 0..50 {
                runner.run_cycle();
            }
        });
        engine.collect();
    }
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    assert!(rolling.load(Relaxed) > 500, "the transport rolled");
    engine.shutdown_manual(runner).unwrap();
}
