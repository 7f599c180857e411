//! The cost of one engine cycle, and of per-node timing (`engine.node_timing`) in it:
//! 32 stereo sources mixed into a device that neither waits nor keeps what it is given.
//!
//! `cargo bench -p quaver-engine -- --warm-up-time 1`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use quaver_devices::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{CycleInfo, Engine, EngineConfig, NodeKind, NodeSpec, Processor};

/// A playback device that is always ready and drops what it is given.
struct Drain {
    info: DeviceInfo,
    counters: DeviceCounters,
}

impl Device for Drain {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn start(&mut self, _quantum: usize) -> Result<(), DeviceError> {
        Ok(())
    }
    fn wait(&mut self, _quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.counters.wakeups += 1;
        Ok(WaitStatus::Ready)
    }
    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        self.counters.frames_written += buf.frames() as u64;
        Ok(())
    }
    fn read(&mut self, _buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        Ok(())
    }
    fn suspend(&mut self) {}
    fn playback_delay(&self) -> usize {
        0
    }
    fn capture_delay(&self) -> usize {
        0
    }
    fn counters(&self) -> DeviceCounters {
        self.counters
    }
    fn close(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
}

/// A constant on every output (the cheapest source, so the engine's own cost shows).
struct Dc(f32);

impl Processor for Dc {
    fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            outputs.channel_mut(ch).fill(self.0);
        }
    }
}

fn bench_cycle(c: &mut Criterion) {
    const SOURCES: usize = 32;
    let mut g = c.benchmark_group("cycle_32_sources_stereo_q128");
    for timing in [false, true] {
        let dev = Drain {
            info: DeviceInfo {
                name: "bench".into(),
                description: "bench device".into(),
                rate: 48_000,
                playback: Some(ChannelMap::stereo()),
                capture: None,
                freewheel: false,
            },
            counters: DeviceCounters::default(),
        };
        let cfg = EngineConfig {
            quantum_default: 128,
            quantum_min: 32,
            quantum_max: 1024,
            rt_priority: 0,
            suspend_timeout: None,
            node_timing: timing,
            ..EngineConfig::default()
        };
        let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
        for i in 0..SOURCES {
            let name = format!("src{i}");
            let mut s = NodeSpec::new(&name, NodeKind::Filter);
            s.outputs = ChannelMap::stereo();
            engine
                .add_node(s, Some(Box::new(Dc(0.01 * i as f32))))
                .unwrap();
            engine.link(&name, "bench-sink").unwrap();
        }
        while runner.pending() > 0 {
            runner.run_cycle();
        }
        let name = if timing {
            "node_timing_on"
        } else {
            "node_timing_off"
        };
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| runner.run_cycle())
        });
        engine.shutdown_manual(runner).unwrap();
    }
    g.finish();
}

criterion_group!(benches, bench_cycle);
criterion_main!(benches);
