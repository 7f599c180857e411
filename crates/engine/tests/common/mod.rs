//! Test fixtures: a device that records what it is given and needs no clock, and
//! simple processors.

#![allow(dead_code)]

pub mod client;

use quaver_devices::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{
    CycleInfo, Engine, EngineConfig, NodeId, NodeKind, NodeSpec, Processor, RtRunner,
};
use std::sync::{Arc, Mutex};

/// A playback+capture device for tests: `wait` returns at once, `write` appends channel
/// 0 and 1 to shared vectors whose capacity is reserved up front (so recording does not
/// allocate inside the cycle), `read` returns a constant.
pub struct RecordingDevice {
    info: DeviceInfo,
    pub left: Arc<Mutex<Vec<f32>>>,
    pub right: Arc<Mutex<Vec<f32>>>,
    capture_value: f32,
    counters: DeviceCounters,
    /// Whether the engine fades playback in after a start (a card's default: yes).
    pub fade_in: bool,
    /// How long each wait for the device takes (zero: none), standing in for a card's
    /// long period.
    pub period: std::time::Duration,
}

impl RecordingDevice {
    pub fn new(rate: u32, capacity: usize) -> Self {
        RecordingDevice {
            info: DeviceInfo {
                name: "test".into(),
                description: "recording test device".into(),
                rate,
                playback: Some(ChannelMap::stereo()),
                capture: Some(ChannelMap::stereo()),
                freewheel: false,
            },
            left: Arc::new(Mutex::new(Vec::with_capacity(capacity))),
            right: Arc::new(Mutex::new(Vec::with_capacity(capacity))),
            capture_value: 0.25,
            counters: DeviceCounters::default(),
            fade_in: true,
            period: std::time::Duration::ZERO,
        }
    }
}

impl Device for RecordingDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn start(&mut self, _quantum: usize) -> Result<(), DeviceError> {
        Ok(())
    }
    fn wait(&mut self, _quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.counters.wakeups += 1;
        if !self.period.is_zero() {
            std::thread::sleep(self.period);
        }
        Ok(WaitStatus::Ready)
    }
    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        let mut l = self.left.lock().unwrap();
        let mut r = self.right.lock().unwrap();
        // Never grow inside the cycle: drop what does not fit.
        let room = l.capacity() - l.len();
        let n = buf.frames().min(room);
        l.extend_from_slice(&buf.channel(0)[..n]);
        r.extend_from_slice(&buf.channel(1)[..n]);
        self.counters.frames_written += buf.frames() as u64;
        Ok(())
    }
    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        for ch in 0..buf.channels() {
            buf.channel_mut(ch).fill(self.capture_value);
        }
        self.counters.frames_read += buf.frames() as u64;
        Ok(())
    }
    fn suspend(&mut self) {}
    fn fades_in_on_start(&self) -> bool {
        self.fade_in
    }
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

/// Outputs a constant on every output channel.
pub struct Dc(pub f32);

impl Processor for Dc {
    fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels() {
            outputs.channel_mut(ch).fill(self.0);
        }
    }
}

/// Outputs a sine on every output channel.
pub struct Sine {
    pub phase: f32,
    pub step: f32,
}

impl Processor for Sine {
    fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        let start = self.phase;
        for ch in 0..outputs.channels() {
            let mut p = start;
            for s in outputs.channel_mut(ch).iter_mut() {
                *s = 0.5 * p.sin();
                p += self.step;
            }
            self.phase = p % std::f32::consts::TAU;
        }
    }
}

/// Passes inputs to outputs (a trivial filter).
pub struct Thru;

impl Processor for Thru {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        for ch in 0..outputs.channels().min(inputs.channels()) {
            outputs.channel_mut(ch).copy_from_slice(inputs.channel(ch));
        }
    }
}

/// Adds "vsink", a virtual sink as a null sink's node is (no device; its stereo outputs
/// are its monitor, a copy of its inputs).
pub fn virtual_sink(engine: &Engine) -> NodeId {
    let mut v = NodeSpec::new("vsink", NodeKind::DeviceSink);
    v.inputs = ChannelMap::stereo();
    v.outputs = ChannelMap::stereo();
    engine.add_node(v, Some(Box::new(Thru))).unwrap()
}

/// An engine driven by hand (no RT thread, no suspend) on a [`RecordingDevice`] at
/// 48 kHz, its quantum `default` frames and free between 32 and `max`.
pub fn manual_engine(default: usize, max: usize) -> (Engine, RtRunner) {
    let cfg = EngineConfig {
        quantum_default: default,
        quantum_min: 32,
        quantum_max: max,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    Engine::new_manual(cfg, vec![Box::new(RecordingDevice::new(48000, 0))]).unwrap()
}

/// Adds a stereo [`Sine`] source named `name`.
pub fn add_sine(engine: &Engine, name: &str) -> NodeId {
    let mut s = NodeSpec::new(name, NodeKind::Filter);
    s.outputs = quaver_dsp::ChannelMap::stereo();
    engine
        .add_node(
            s,
            Some(Box::new(Sine {
                phase: 0.0,
                step: 0.05,
            })),
        )
        .unwrap()
}
