//! The real-time cycle never allocates: 10,000+ cycles with link changes, volume ramps,
//! node additions/removals, a resampling stream whose rate converter is replaced
//! (retuned) as it plays, and a filter chain on the sink whose controls change and
//! which is swapped for another, under an allocation guard; callback clients and
//! feedback loops likewise.

mod common;

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use common::{RecordingDevice, Sine};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::stream::{FrameSource, PlaybackAdapter, Retune, StreamFormat};
use quaver_engine::{Engine, EngineConfig, NodeKind, NodeSpec};

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

/// An endless 44.1 kHz source that never allocates.
struct Tone {
    phase: f32,
}

impl FrameSource for Tone {
    fn available(&self) -> usize {
        1 << 20
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        for f in out.chunks_exact_mut(2) {
            let v = 0.3 * self.phase.sin();
            f[0] = v;
            f[1] = v;
            self.phase = (self.phase + 0.0625) % std::f32::consts::TAU;
        }
        out.len() / 2
    }
    fn draining(&self) -> bool {
        false
    }
    fn report(&mut self, _played: u64, _delay: u32, _xruns: u32, _started: bool) {}
}

#[test]
fn ten_thousand_cycles_with_link_changes_allocate_nothing() {
    let (engine, mut runner) = common::manual_engine(64, 1024);
    common::add_sine(&engine, "sine");
    let fmt = StreamFormat {
        rate: 44100,
        channels: ChannelMap::stereo(),
    };
    let adapter = PlaybackAdapter::new(
        Tone { phase: 0.0 },
        &fmt,
        &ChannelMap::stereo(),
        48000,
        1024,
        0,
        ResampleQuality::High,
    )
    .unwrap()
    .variable_rate(ResampleQuality::High)
    .unwrap();
    let mut p = NodeSpec::new("tone", NodeKind::PlaybackStream);
    p.outputs = ChannelMap::stereo();
    let tone = engine.add_node(p, Some(Box::new(adapter))).unwrap();
    engine.link("tone", "test-sink").unwrap();
    let sink = engine.inspect(|g| g.node_by_name("test-sink").unwrap().id);
    engine.set_sink_filter(sink, Some(chain(2))).unwrap();

    reset_violation_count();
    let mut cycles = 0;
    let mut temp = None;
    for round in 0..200 {
        // The sink's chain: controls change on the RT thread (one refused, which must
        // not allocate either), and every 50 rounds a new chain replaces it.
        match round % 50 {
            7 => engine
                .filter_control("test-sink", 0, "freq", 3000.0)
                .unwrap(),
            8 => engine
                .filter_control("test-sink", 1, "gain_db", -12.0)
                .unwrap(),
            10 => engine
                .filter_control("test-sink", 6, "gain_1_2", 0.5)
                .unwrap(),
            // Refused on the control side, with the reason; nothing reaches the cycle.
            9 => {
                let e = engine
                    .filter_control("test-sink", 1, "no-such", 1.0)
                    .unwrap_err();
                assert_eq!(
                    e.to_string(),
                    "filter 1 on 'test-sink', control 'no-such': no such control: this filter has gain_db"
                );
            }
            30 => engine.set_sink_filter(sink, Some(chain(2))).unwrap(),
            // A stream's own chain (a rule's `chain`): put on, a control changed on
            // it, taken off.
            20 => engine.set_stream_filter(tone, Some(chain(2))).unwrap(),
            22 => engine.filter_control("tone", 1, "gain_db", -6.0).unwrap(),
            45 => engine.set_stream_filter(tone, None).unwrap(),
            _ => {}
        }
        // Control-side edits happen outside the guard; the cycles that apply them are
        // inside it.
        match round % 4 {
            0 => drop(engine.link("sine", "test-sink").unwrap()),
            1 => {
                engine.unlink("sine", "test-sink").unwrap();
                // Rates far beyond what the converter could follow by itself: each
                // retune swaps in a new one, and the old one is freed out here (1 kHz
                // is a cascade of stages).
                let rate = [22_050, 96_000, 1_000, 8_000, 44_100][(round / 4) % 5];
                let r = Retune::playback(rate, 2, 48000, 1024, ResampleQuality::High).unwrap();
                engine.retune(tone, r).unwrap();
            }
            2 => {
                let mut t = NodeSpec::new("temp", NodeKind::PlaybackStream);
                t.outputs = ChannelMap::stereo();
                t.latency_frames = Some(if round % 8 == 2 { 128 } else { 2048 });
                // Every other one with a chain of its own from its first cycle.
                let id = engine
                    .add_stream_node(
                        t,
                        Some(Box::new(Sine {
                            phase: 0.0,
                            step: 0.01,
                        })),
                        None,
                        (round % 8 == 2).then(|| chain(2)),
                    )
                    .unwrap();
                engine.link("temp", "test-sink").unwrap();
                temp = Some(id);
            }
            _ => {
                engine.remove_node(temp.take().unwrap()).unwrap();
                engine
                    .set_volume("test-sink", Some(0.5 + (round % 3) as f32 * 0.2), None)
                    .unwrap();
            }
        }
        // JACK's freewheel: entering (a fade-out cycle, the devices suspended), cycles
        // detached from them, and leaving (the devices started again, fading in).
        match round % 20 {
            10 => engine.set_freewheel(true).unwrap(),
            15 => engine.set_freewheel(false).unwrap(),
            _ => {}
        }
        assert_no_alloc(|| {
            for _ in 0..51 {
                runner.run_cycle();
            }
        });
        cycles += 51;
        engine.collect();
    }
    assert!(cycles >= 10_000);
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    assert_eq!(
        engine
            .stats()
            .controls_refused
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        engine
            .stats()
            .leaked
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    engine.shutdown_manual(runner).unwrap();
}

/// A chain of every filter kind for `channels` channels at 48 kHz.
fn chain(channels: usize) -> quaver_dsp::filter::FilterChain {
    use quaver_dsp::filter::*;
    let ir: Vec<f32> = (0..3000)
        .map(|i| (i as f32 * 0.37).sin() * (-(i as f32) / 500.0).exp())
        .collect();
    let peaking = BiquadParams {
        kind: BiquadKind::Peaking,
        freq: 1000.0,
        q: 1.0,
        gain_db: 3.0,
    };
    // A crossover to twice the channels and a mixer summing each channel's bands back:
    // the chain runs wider inside than the sink, through its own buffer.
    let sum_bands: Vec<Vec<f64>> = (0..channels)
        .map(|o| (0..2 * channels).map(|i| f64::from(i / 2 == o)).collect())
        .collect();
    FilterChain::for_channels(
        vec![
            Box::new(Biquad::new(channels, 48_000.0, peaking).unwrap()),
            Box::new(Gain::new(-3.0).unwrap()),
            Box::new(Delay::new(channels, 480, &[0, 24]).unwrap()),
            Box::new(Convolver::new(channels, &[ir], 256).unwrap()),
            Box::new(Limiter::new(channels, 48_000.0, -1.0, 1.0, 50.0).unwrap()),
            Box::new(Crossover::new(channels, 48_000.0, &[500.0], None).unwrap()),
            Box::new(ChannelMixer::new(&sum_bands).unwrap()),
        ],
        channels,
    )
    .unwrap()
}

/// Allocates on every cycle: proves the guard above would catch a real violation.
struct Allocates;

impl quaver_engine::Processor for Allocates {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        _inputs: quaver_dsp::Planar<'_>,
        outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        let v = std::hint::black_box(vec![0.25f32; 16]);
        outputs.channel_mut(0)[0] = v[0];
    }
}

#[test]
fn the_guard_catches_an_allocating_processor() {
    let dev = RecordingDevice::new(48000, 0);
    let cfg = EngineConfig {
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    let mut s = NodeSpec::new("bad", NodeKind::Filter);
    s.outputs = ChannelMap::mono();
    engine.add_node(s, Some(Box::new(Allocates))).unwrap();
    while runner.pending() > 0 {
        runner.run_cycle();
    }
    reset_violation_count();
    assert_no_alloc(|| runner.run_cycle());
    assert!(violation_count() > 0);
    reset_violation_count();
    engine.shutdown_manual(runner).unwrap();
}

/// Callback clients (one prompt, one that hangs and goes asynchronous) woken every cycle
/// by the real-time thread, with links and ports changing: still no allocation.
#[test]
fn callback_clients_allocate_nothing_in_the_cycle() {
    use common::client::{Behaviour, TestClient};
    use quaver_engine::{CallbackConfig, CallbackNode, Direction};
    let (engine, mut runner) = common::manual_engine(1024, 4096);
    common::add_sine(&engine, "sine");
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for (name, behaviour) in [
        ("good", Behaviour::Gain(0.5)),
        ("hung", Behaviour::HangAfter(100)),
    ] {
        let (client, transport) = TestClient::start(2, 2, behaviour);
        let (node, _stats) = CallbackNode::new(
            transport,
            CallbackConfig {
                deadline: 0.8,
                async_after: 4,
                // The hung client must reach the switch to async inside the guard.
                hung_ms: 1,
                ..CallbackConfig::default()
            },
        );
        let mut spec = NodeSpec::new(name, NodeKind::Filter);
        spec.inputs = ChannelMap::stereo();
        spec.outputs = ChannelMap::stereo();
        spec.max_inputs = 2;
        spec.max_outputs = 4;
        spec.keep_awake = true;
        ids.push(engine.add_node(spec, Some(Box::new(node))).unwrap());
        engine.link("sine", name).unwrap();
        engine.link(name, "test-sink").unwrap();
        clients.push(client);
    }
    reset_violation_count();
    let mut extra = None;
    for round in 0..100 {
        match round % 4 {
            0 => drop(engine.unlink("sine", "good").unwrap()),
            1 => drop(engine.link("sine", "good").unwrap()),
            2 => {
                let p = engine
                    .add_port(
                        ids[0],
                        Direction::Out,
                        Some("extra"),
                        quaver_dsp::ChannelPosition::Aux(3),
                    )
                    .unwrap();
                engine.link("good:extra", "test-sink:playback_FL").unwrap();
                extra = Some(p);
            }
            _ => engine.remove_port(ids[0], extra.take().unwrap()).unwrap(),
        }
        assert_no_alloc(|| {
            for _ in 0..21 {
                runner.run_cycle();
            }
        });
        engine.collect();
    }
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    assert!(clients[0].calls() >= 2000);
    assert_eq!(clients[0].xruns(), 0);
    assert!(clients[1].xruns() > 1000);
    assert_eq!(clients[1].mode(), 1, "the hung client went asynchronous");
    // The per-cycle stage breakdown ran inside the guard: every cycle with a client
    // counted, and the hung client's misses as xrun cycles.
    use quaver_engine::rt::stages::Class;
    let stages = &engine.stats().stages;
    assert!(stages.read(Class::All).cycles >= 2000);
    assert!(stages.read(Class::Xrun).cycles > 1000);
    engine.shutdown_manual(runner).unwrap();
}

/// Feedback links (a node into itself, a loop of two filters, a callback client into
/// itself and looped through a filter) while the closing links come and go (fading in
/// and out) and the quantum shrinks and grows: still no allocation in the cycle.
#[test]
fn feedback_loops_allocate_nothing_in_the_cycle() {
    use common::Thru;
    use common::client::{Behaviour, TestClient};
    use quaver_engine::{CallbackConfig, CallbackNode};
    let (engine, mut runner) = common::manual_engine(1024, 4096);
    let stereo = |name: &str| {
        let mut s = NodeSpec::new(name, NodeKind::Filter);
        s.inputs = ChannelMap::stereo();
        s.outputs = ChannelMap::stereo();
        s
    };
    let mut s = NodeSpec::new("sine", NodeKind::Filter);
    s.outputs = ChannelMap::stereo();
    let sine = Sine {
        phase: 0.0,
        step: 0.05,
    };
    engine.add_node(s, Some(Box::new(sine))).unwrap();
    let a = engine.add_node(stereo("a"), Some(Box::new(Thru))).unwrap();
    engine.add_node(stereo("b"), Some(Box::new(Thru))).unwrap();
    let (client, transport) = TestClient::start(2, 2, Behaviour::Gain(0.25));
    // Never demoted to async: the guard must cover the synchronous hand-off too.
    let never_async = CallbackConfig {
        async_after: 0,
        hung_ms: 0,
        ..CallbackConfig::default()
    };
    let (node, _stats) = CallbackNode::new(transport, never_async);
    let mut spec = stereo("cb");
    spec.keep_awake = true;
    engine.add_node(spec, Some(Box::new(node))).unwrap();
    for (o, i) in [
        ("sine", "a"),
        ("a", "b"),
        ("b", "test-sink"),
        ("cb", "cb"),
        ("sine", "cb"),
        ("cb", "test-sink"),
    ] {
        engine.link_with_feedback(o, i).unwrap();
    }
    reset_violation_count();
    for round in 0..100 {
        match round % 4 {
            0 => drop(engine.link_with_feedback("b", "a").unwrap()),
            1 => drop(engine.link_with_feedback("b", "cb").unwrap()),
            2 => {
                engine.unlink("b", "a").unwrap();
                let latency = if round % 8 == 2 { Some(256) } else { None };
                engine.set_latency(a, latency).unwrap();
            }
            _ => drop(engine.unlink("b", "cb").unwrap()),
        }
        assert_no_alloc(|| {
            for _ in 0..21 {
                runner.run_cycle();
            }
        });
        engine.collect();
    }
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    // The client thread is unprivileged and the machine shared: it may miss some of
    // the 2100 cycles (timing belongs to the benches), but the guarded cycles must
    // have woken it and taken its answers many times.
    assert!(client.calls() >= 500, "client ran {} times", client.calls());
    engine.shutdown_manual(runner).unwrap();
}

/// An echo-cancel pair (docs/dsp/echo-cancel.md): its source node's processor only
/// moves samples through rings and rings the worker's eventfd, so the cycle allocates
/// nothing while the worker (which does) cancels on its own thread; the quantum moves
/// under it.
#[test]
fn echo_cancellation_allocates_nothing_in_the_cycle() {
    use common::Thru;
    use quaver_engine::echo::{self, EchoSpec};
    let (engine, mut runner) = common::manual_engine(256, 4096);
    common::add_sine(&engine, "far");
    // The microphone: a sink-like node whose monitor hears the far end.
    let mut m = NodeSpec::new("mic", NodeKind::DeviceSink);
    m.inputs = ChannelMap::stereo();
    m.outputs = ChannelMap::stereo();
    let mic = engine.add_node(m, Some(Box::new(Thru))).unwrap();
    engine.link("far", "mic").unwrap();
    let pair = echo::add(
        &engine,
        &EchoSpec {
            source_name: "ec".into(),
            source_description: "ec".into(),
            sink_name: "ec-sink".into(),
            sink_description: "ec sink".into(),
            source_master: "mic".into(),
            sink_master: "test-sink".into(),
            channels: ChannelMap::stereo(),
        },
    )
    .unwrap();
    engine.link("far", "ec-sink").unwrap();
    reset_violation_count();
    for round in 0..40 {
        let latency = [None, Some(64), Some(1024)][round % 3];
        engine.set_latency(mic, latency).unwrap();
        assert_no_alloc(|| {
            for _ in 0..25 {
                runner.run_cycle();
            }
        });
        engine.collect();
    }
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    // The worker got the audio: the manual runner does not wait for the clock, so it
    // may lag, but within a bounded wait it has cancelled blocks.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pair.worker.stats().blocks == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(pair.worker.stats().blocks > 0, "{:?}", pair.worker.stats());
    pair.remove(&engine);
    engine.shutdown_manual(runner).unwrap();
}
