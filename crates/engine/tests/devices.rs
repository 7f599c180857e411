//! Devices added and removed while the engine runs, and devices that vanish mid-cycle:
//! their nodes come and go, a vanished device is handed back and closed at once, the
//! next device drives when the driver goes, and none of it allocates in the cycle.

mod common;

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use common::Dc;
use quaver_devices::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_engine::{
    Engine, EngineConfig, GraphEvent, NodeKind, NodeSpec, Processor, RtEvent, RtRunner,
};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

const RATE: u32 = 48_000;

/// What a test sees of a [`Card`] after handing it to the engine.
#[derive(Clone, Default)]
struct Probe {
    /// Set by the test: every call fails with `Gone` from now on (the card is unplugged).
    unplugged: Arc<AtomicBool>,
    /// Set by `close`.
    closed: Arc<AtomicBool>,
    /// Driver waits.
    waits: Arc<AtomicU64>,
    /// Starts.
    starts: Arc<AtomicU64>,
    /// Sum of the first channel's samples written (what reached the card).
    written: Arc<AtomicU64>,
}

/// A card that can be unplugged: it drives without sleeping, counts what it gets, and
/// answers `Gone` (built without allocating) once unplugged.
struct Card {
    info: DeviceInfo,
    probe: Probe,
}

impl Card {
    fn plug(name: &str) -> (Box<dyn Device>, Probe) {
        let probe = Probe::default();
        let card = Card {
            info: DeviceInfo {
                name: name.into(),
                description: format!("test card {name}"),
                rate: RATE,
                playback: Some(ChannelMap::stereo()),
                capture: None,
                freewheel: false,
            },
            probe: probe.clone(),
        };
        (Box::new(card), probe)
    }

    fn check(&self) -> Result<(), DeviceError> {
        if self.probe.unplugged.load(Relaxed) {
            // `String::new` does not allocate: the cycle stays allocation-free.
            Err(DeviceError::Gone(String::new()))
        } else {
            Ok(())
        }
    }
}

impl Device for Card {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn start(&mut self, _quantum: usize) -> Result<(), DeviceError> {
        self.probe.starts.fetch_add(1, Relaxed);
        self.check()
    }
    fn wait(&mut self, _quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.check()?;
        self.probe.waits.fetch_add(1, Relaxed);
        Ok(WaitStatus::Ready)
    }
    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        self.check()?;
        let sum: f32 = buf.channel(0).iter().sum();
        self.probe.written.fetch_add(sum.round() as u64, Relaxed);
        Ok(())
    }
    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        buf.fill_silence();
        self.check()
    }
    fn suspend(&mut self) {}
    fn fades_in_on_start(&self) -> bool {
        false
    }
    fn playback_delay(&self) -> usize {
        0
    }
    fn capture_delay(&self) -> usize {
        0
    }
    fn counters(&self) -> DeviceCounters {
        DeviceCounters::default()
    }
    fn close(&mut self) -> Result<(), DeviceError> {
        self.probe.closed.store(true, Relaxed);
        self.check()
    }
}

fn config() -> EngineConfig {
    EngineConfig {
        quantum_default: 256,
        quantum_min: 32,
        quantum_max: 1024,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    }
}

/// Cards plugged in under `names` and an engine over them, in that order (the first
/// drives); what the test sees of each card.
fn running<const N: usize>(names: [&str; N]) -> (Engine, RtRunner, [Probe; N]) {
    let mut cards = Vec::new();
    let probes = names.map(|name| {
        let (card, probe) = Card::plug(name);
        cards.push(card);
        probe
    });
    let (engine, runner) = Engine::new_manual(config(), cards).unwrap();
    (engine, runner, probes)
}

/// A stream "tone" rendered by `p` into `sink`.
fn stream_with(engine: &Engine, sink: &str, p: impl Processor + 'static) {
    let mut s = NodeSpec::new("tone", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    engine
        .add_node_linked(s, Some(Box::new(p)), Some(sink))
        .unwrap();
}

/// A constant 1.0 stream into `sink`: each cycle adds 256 to what the sink's card got.
fn stream_into(engine: &Engine, sink: &str) {
    stream_with(engine, sink, Dc(1.0));
}

fn sinks(engine: &Engine) -> Vec<String> {
    engine.inspect(|g| {
        g.nodes
            .values()
            .filter(|n| n.kind == NodeKind::DeviceSink)
            .map(|n| n.name.clone())
            .collect()
    })
}

#[test]
fn a_device_added_while_running_gets_nodes_and_audio_and_leaves_closed() {
    let (engine, mut runner, _) = running(["a"]);
    let events = engine.subscribe();
    for _ in 0..3 {
        runner.run_cycle();
    }
    let (b, pb) = Card::plug("b");
    let index = engine.add_device(b).unwrap();
    assert_eq!(index, 1);
    assert_eq!(sinks(&engine), ["a-sink", "b-sink"]);
    let added: Vec<_> = events.try_iter().collect();
    let b_sink = engine.inspect(|g| g.node_by_name("b-sink").unwrap().id);
    assert!(added.contains(&GraphEvent::NodeAdded(b_sink)), "{added:?}");
    stream_into(&engine, "b-sink");
    for _ in 0..10 {
        runner.run_cycle();
    }
    assert_eq!(
        pb.starts.load(Relaxed),
        1,
        "started once, at the cycle after the add"
    );
    assert!(
        pb.written.load(Relaxed) >= 256 * 5,
        "the new card got the stream"
    );
    assert_eq!(pb.waits.load(Relaxed), 0, "a follower is never waited for");
    let st = engine.status();
    assert_eq!(
        st.devices
            .iter()
            .map(|d| (d.index, d.info.name.as_str()))
            .collect::<Vec<_>>(),
        [(0, "a"), (1, "b")]
    );

    engine.remove_device(index).unwrap();
    assert_eq!(sinks(&engine), ["a-sink"]);
    let removed: Vec<_> = events.try_iter().collect();
    assert!(
        removed.contains(&GraphEvent::NodeRemoved(b_sink)),
        "{removed:?}"
    );
    for _ in 0..3 {
        runner.run_cycle();
    }
    engine.collect();
    assert!(
        pb.closed.load(Relaxed),
        "a removed device is closed by the control side"
    );
    assert_eq!(engine.devices().len(), 1);
    // Its index is free again.
    let (c, _pc) = Card::plug("c");
    assert_eq!(engine.add_device(c).unwrap(), 1);
    assert!(engine.remove_device(5).is_err());
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn an_unplugged_driver_is_closed_at_once_and_the_next_device_drives() {
    let (engine, mut runner, [pa, pb]) = running(["a", "b"]);
    stream_into(&engine, "b-sink");
    for _ in 0..5 {
        runner.run_cycle();
    }
    assert!(pa.waits.load(Relaxed) >= 4);
    assert_eq!(pb.waits.load(Relaxed), 0);
    pa.unplugged.store(true, Relaxed);
    runner.run_cycle();
    // The cycle that saw it gone handed it back: the service side closes it when woken.
    let events = engine.collect();
    assert!(
        events.contains(&RtEvent::DeviceGone { device: 0 }),
        "{events:?}"
    );
    assert!(
        pa.closed.load(Relaxed),
        "the vanished card's handles are closed at once"
    );
    // The cycle went on: the follower was waited for in the same cycle, as the driver.
    let before = pb.written.load(Relaxed);
    for _ in 0..5 {
        runner.run_cycle();
    }
    assert!(pb.waits.load(Relaxed) >= 5, "b drives now");
    assert_eq!(
        pb.written.load(Relaxed) - before,
        5 * 256,
        "no cycle lost on b"
    );
    let st = engine.status();
    assert!(st.devices[0].gone && st.devices[0].index == 0);
    // Its nodes stay, marked gone, until the policy moves the streams and removes it.
    assert!(engine.inspect(|g| g.node_by_name("a-sink").unwrap().gone));
    engine.remove_device(0).unwrap();
    assert_eq!(sinks(&engine), ["b-sink"]);
    // Shutdown closes only what is left, without the vanished card's error.
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_device_reported_gone_from_outside_leaves_and_an_added_one_drives_after_the_last() {
    let (engine, mut runner, [pa]) = running(["a"]);
    runner.run_cycle();
    // A uevent said the card went away before any call failed.
    engine.device_gone(0).unwrap();
    runner.run_cycle();
    let (events, log) = logged(|| engine.collect());
    assert!(
        events.contains(&RtEvent::DeviceGone { device: 0 }),
        "{events:?}"
    );
    // Retired on purpose: news, not an error (a deleted network stream logged one).
    assert!(
        log.contains("device a retired") && !log.contains("ERROR"),
        "{log}"
    );
    assert!(pa.closed.load(Relaxed));
    // No device left: the thread paces itself and keeps running.
    let cycles = engine.stats().cycles.load(Relaxed);
    runner.run_cycle();
    assert_eq!(engine.stats().cycles.load(Relaxed), cycles + 1);
    engine.remove_device(0).unwrap();
    // A card plugged in now drives.
    let (b, pb) = Card::plug("b");
    assert_eq!(engine.add_device(b).unwrap(), 0);
    stream_into(&engine, "b-sink");
    // One plan per cycle: the card's nodes, then the stream's.
    for _ in 0..6 {
        runner.run_cycle();
    }
    assert!(pb.waits.load(Relaxed) >= 3);
    assert!(pb.written.load(Relaxed) >= 256 * 3);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_device_that_failed_before_its_uevent_leaves_no_mark_on_the_next_at_its_index() {
    let (engine, mut runner, [pa]) = running(["a"]);
    runner.run_cycle();
    // The card fails first; the uevent that retires it arrives after.
    pa.unplugged.store(true, Relaxed);
    runner.run_cycle();
    let (_, log) = logged(|| engine.collect());
    assert!(
        log.contains("ERROR") && log.contains("device a failed"),
        "{log}"
    );
    engine.device_gone(0).unwrap();
    runner.run_cycle();
    engine.collect();
    engine.remove_device(0).unwrap();
    // A new card at the same index that really fails is an error again, not "retired".
    let (b, pb) = Card::plug("b");
    assert_eq!(engine.add_device(b).unwrap(), 0);
    runner.run_cycle();
    pb.unplugged.store(true, Relaxed);
    runner.run_cycle();
    let (events, log) = logged(|| engine.collect());
    assert!(
        events.contains(&RtEvent::DeviceGone { device: 0 }),
        "{events:?}"
    );
    assert!(
        log.contains("ERROR") && log.contains("device b failed") && !log.contains("retired"),
        "{log}"
    );
    engine.shutdown_manual(runner).unwrap();
}

/// What `f` returns and what it logged (at debug and above, on this thread).
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let w = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || w.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    (out, text)
}

/// A stream that counts the cycles it is run.
struct Counted(Arc<AtomicU64>);

impl Processor for Counted {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        _inputs: Planar<'_>,
        outputs: &mut PlanarMut<'_>,
    ) {
        self.0.fetch_add(1, Relaxed);
        for ch in 0..outputs.channels() {
            outputs.channel_mut(ch).fill(1.0);
        }
    }
}

#[test]
fn a_stream_of_a_vanished_card_waits_for_its_move_and_loses_nothing() {
    let (engine, mut runner, [pa, pb]) = running(["a", "b"]);
    let runs = Arc::new(AtomicU64::new(0));
    stream_with(&engine, "b-sink", Counted(runs.clone()));
    for _ in 0..3 {
        runner.run_cycle();
    }
    let before = runs.load(Relaxed);
    assert!(before >= 2);
    pb.unplugged.store(true, Relaxed);
    // The cycle that finds b gone ran the stream (its audio was lost with the card);
    // the cycles until the policy moves it do not run it.
    runner.run_cycle();
    let at_unplug = runs.load(Relaxed);
    for _ in 0..5 {
        runner.run_cycle();
    }
    assert_eq!(
        runs.load(Relaxed),
        at_unplug,
        "a stream into a gone card only ran on"
    );
    let to_a = pa.written.load(Relaxed);
    engine.relink("tone", None, "a-sink").unwrap();
    engine.remove_device(1).unwrap();
    for _ in 0..4 {
        runner.run_cycle();
    }
    assert!(runs.load(Relaxed) >= at_unplug + 3, "moved, it runs again");
    assert!(pa.written.load(Relaxed) > to_a, "and plays on a");
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn devices_of_another_rate_or_too_small_a_ring_are_refused_and_closed() {
    let (engine, _runner, _) = running(["a"]);
    let slow = quaver_devices::NullDevice::new(quaver_devices::NullConfig {
        rate: 44_100,
        ..Default::default()
    })
    .unwrap();
    let e = engine.add_device(Box::new(slow)).unwrap_err().to_string();
    assert!(e.contains("44100 Hz") && e.contains("48000 Hz"), "{e}");
    assert_eq!(engine.devices().len(), 1);
}

#[test]
fn adding_removing_and_losing_devices_allocates_nothing_in_the_cycle() {
    let (engine, mut runner, _) = running(["a"]);
    stream_into(&engine, "a-sink");
    reset_violation_count();
    for round in 0..40 {
        // Control-side work outside the guard; the cycles applying it inside.
        let (b, pb) = Card::plug("b");
        let index = engine.add_device(b).unwrap();
        engine.relink("tone", None, "b-sink").unwrap();
        assert_no_alloc(|| {
            for _ in 0..10 {
                runner.run_cycle();
            }
        });
        if round % 2 == 0 {
            // Unplugged mid-stream: found by the write, handed back in the cycle.
            pb.unplugged.store(true, Relaxed);
            assert_no_alloc(|| {
                for _ in 0..3 {
                    runner.run_cycle();
                }
            });
        }
        engine.relink("tone", None, "a-sink").unwrap();
        engine.remove_device(index).unwrap();
        assert_no_alloc(|| {
            for _ in 0..5 {
                runner.run_cycle();
            }
        });
        engine.collect();
        assert!(pb.closed.load(Relaxed), "round {round}");
    }
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    assert_eq!(engine.stats().leaked.load(Relaxed), 0);
    engine.shutdown_manual(runner).unwrap();
}

#[test]
fn a_card_that_vanished_unnoticed_does_not_fail_the_shutdown() {
    let (engine, mut runner, [pa]) = running(["a"]);
    runner.run_cycle();
    // Gone while nothing looked (closed for idleness, say): found only by the close.
    pa.unplugged.store(true, Relaxed);
    engine.shutdown_manual(runner).unwrap();
    assert!(pa.closed.load(Relaxed));
}
