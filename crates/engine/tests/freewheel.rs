//! JACK's freewheel (`Engine::set_freewheel`): one last cycle with the devices fades
//! their playback out, then they are suspended and cycles run without waiting for
//! them, telling every node; stopping starts them again with their fade-in.

mod common;

use common::{Dc, RecordingDevice};
use quaver_devices::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{CycleInfo, Engine, EngineConfig, NodeKind, NodeSpec, Processor};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const RATE: u32 = 48000;
const Q: usize = 64;

/// What the device was asked to do.
#[derive(Default)]
struct Calls {
    starts: AtomicU32,
    waits: AtomicU32,
    suspends: AtomicU32,
}

/// A recording device that counts starts, waits and suspends.
struct Counted(RecordingDevice, Arc<Calls>);

impl Device for Counted {
    fn info(&self) -> &DeviceInfo {
        self.0.info()
    }
    fn start(&mut self, quantum: usize) -> Result<(), DeviceError> {
        self.1.starts.fetch_add(1, Relaxed);
        self.0.start(quantum)
    }
    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.1.waits.fetch_add(1, Relaxed);
        self.0.wait(quantum)
    }
    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        self.0.write(buf)
    }
    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        self.0.read(buf)
    }
    fn suspend(&mut self) {
        self.1.suspends.fetch_add(1, Relaxed);
        self.0.suspend()
    }
    fn fades_in_on_start(&self) -> bool {
        self.0.fades_in_on_start()
    }
    fn playback_delay(&self) -> usize {
        0
    }
    fn capture_delay(&self) -> usize {
        0
    }
    fn counters(&self) -> DeviceCounters {
        self.0.counters()
    }
    fn close(&mut self) -> Result<(), DeviceError> {
        self.0.close()
    }
}

/// Records each cycle's `freewheel` flag and the capture it was given.
struct Watch(Arc<Mutex<Vec<(bool, f32)>>>);

impl Processor for Watch {
    fn process(&mut self, cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        if let Ok(mut v) = self.0.try_lock()
            && v.len() < v.capacity()
        {
            v.push((cx.freewheel, inputs.channel(0)[0]));
        }
    }
}

#[test]
fn freewheel_detaches_the_graph_from_the_devices_and_returns_without_a_click() {
    let mut dev = RecordingDevice::new(RATE, 1 << 20);
    // Each wait takes a real period: freewheeling cycles must not.
    dev.period = Duration::from_millis(2);
    let left = dev.left.clone();
    let calls = Arc::new(Calls::default());
    let config = EngineConfig {
        quantum_default: Q,
        quantum_min: 32,
        quantum_max: 1024,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) =
        Engine::new_manual(config, vec![Box::new(Counted(dev, calls.clone()))]).unwrap();
    let mut s = NodeSpec::new("dc", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    s.keep_awake = true;
    engine.add_node(s, Some(Box::new(Dc(0.5)))).unwrap();
    engine.link("dc", "test-sink").unwrap();
    let seen = Arc::new(Mutex::new(Vec::with_capacity(100_000)));
    let mut w = NodeSpec::new("watch", NodeKind::Filter);
    w.inputs = ChannelMap::mono();
    engine
        .add_node(w, Some(Box::new(Watch(seen.clone()))))
        .unwrap();
    engine.link("test-source:capture_FL", "watch").unwrap();
    for _ in 0..50 {
        runner.run_cycle();
    }
    assert_eq!(calls.starts.load(Relaxed), 1);
    let before = left.lock().unwrap().len();
    assert!(
        left.lock().unwrap()[before - 1] == 0.5,
        "plays at full level"
    );

    engine.set_freewheel(true).unwrap();
    assert!(engine.freewheel());
    // The plan arrives and that cycle fades out; the devices are suspended after it.
    runner.run_cycle();
    let faded = left.lock().unwrap()[before..].to_vec();
    assert_eq!(faded.len(), Q, "one last cycle with the device");
    assert!(
        faded[0] > 0.45 && faded[Q - 1] < 0.02,
        "fades out: {faded:?}"
    );
    assert_eq!(calls.suspends.load(Relaxed), 1);
    let waits = calls.waits.load(Relaxed);
    seen.lock().unwrap().clear();
    let t0 = Instant::now();
    for _ in 0..500 {
        runner.run_cycle();
    }
    // 500 cycles of 2 ms waits would take a second.
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(calls.waits.load(Relaxed), waits, "no wait for the device");
    assert_eq!(left.lock().unwrap().len(), before + Q, "nothing written");
    let fw = seen.lock().unwrap().clone();
    assert_eq!(fw.len(), 500);
    assert!(
        fw.iter().all(|&(f, _)| f),
        "every node is told it freewheels"
    );
    assert!(fw.iter().all(|&(_, v)| v == 0.0), "capture is silence");
    assert_eq!(engine.stats().cycles.load(Relaxed), 551);

    engine.set_freewheel(false).unwrap();
    seen.lock().unwrap().clear();
    for _ in 0..20 {
        runner.run_cycle();
    }
    assert_eq!(calls.starts.load(Relaxed), 2, "started again");
    assert!(
        calls.waits.load(Relaxed) > waits,
        "paced by the device again"
    );
    let back = left.lock().unwrap()[before + Q..].to_vec();
    assert!(back[0] < 0.02, "fades in: starts at {}", back[0]);
    assert_eq!(*back.last().unwrap(), 0.5);
    assert!(
        back.windows(2).take(Q * 4).all(|w| w[1] >= w[0]),
        "a ramp, no step"
    );
    let fw = seen.lock().unwrap().clone();
    assert!(fw.iter().all(|&(f, v)| !f && v == 0.25), "{fw:?}");
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn freewheel_is_a_setting_that_stays_until_changed() {
    let dev = RecordingDevice::new(RATE, 0);
    let config = EngineConfig {
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(config, vec![Box::new(dev)]).unwrap();
    assert!(!engine.freewheel());
    engine.set_freewheel(true).unwrap();
    engine.set_freewheel(true).unwrap();
    // Edits that publish new plans keep it.
    engine.force_quantum(Some(256)).unwrap();
    let mut s = NodeSpec::new("dc", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    let n = engine.add_node(s, Some(Box::new(Dc(0.1)))).unwrap();
    engine.remove_node(n).unwrap();
    assert!(engine.freewheel());
    for _ in 0..10 {
        runner.run_cycle();
    }
    assert!(engine.freewheel());
    engine.set_freewheel(false).unwrap();
    assert!(!engine.freewheel());
    engine.shutdown_manual(runner).unwrap();
}
