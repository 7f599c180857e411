//! MIDI ports through the graph: events from two sources merged in time order into one
//! input, losses counted, audio ports of the same nodes still scaled by their volume
//! while the event lists pass untouched — all under the allocation guard.

mod common;

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use common::RecordingDevice;
use quaver_dsp::{ChannelMap, ChannelPosition, Planar, PlanarMut};
use quaver_engine::midi::{self, MidiPorts};
use quaver_engine::{CycleInfo, Direction, Engine, EngineConfig, NodeKind, NodeSpec, PortType};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

/// Writes `events` (time, first byte) into its MIDI output 0 every cycle, and a
/// constant 1.0 on its audio output 1.
struct Source {
    events: &'static [(u32, u8)],
    midi: MidiPorts,
}

impl quaver_engine::Processor for Source {
    fn process(&mut self, _cx: &CycleInfo, _inputs: Planar<'_>, outputs: &mut PlanarMut<'_>) {
        assert!(self.midi.outputs.contains(0) && !self.midi.outputs.contains(1));
        let w = midi::words_mut(outputs.whole_channel_mut(0));
        midi::clear(w);
        for &(t, b) in self.events {
            midi::push(w, t, &[b, 60, 100]);
        }
        outputs.channel_mut(1).fill(1.0);
    }
    fn midi_ports(&mut self, ports: &MidiPorts) {
        self.midi = *ports;
    }
}

/// What the sink saw last cycle: the times and first bytes of its events, packed.
#[derive(Default)]
struct Seen {
    cycles: AtomicU64,
    count: AtomicU32,
    lost: AtomicU32,
    /// `time << 8 | byte` of the first four events.
    first: [AtomicU32; 4],
    /// Third byte of every event all intact (velocity 100).
    intact: AtomicU32,
    audio: AtomicU32,
}

struct Sink {
    seen: Arc<Seen>,
}

impl quaver_engine::Processor for Sink {
    fn process(&mut self, _cx: &CycleInfo, inputs: Planar<'_>, _outputs: &mut PlanarMut<'_>) {
        let w = midi::words(inputs.whole_channel(0));
        let s = &self.seen;
        s.count.store(midi::count(w), Relaxed);
        s.lost.store(midi::lost(w), Relaxed);
        let mut intact = 1;
        for (i, e) in midi::events(w).enumerate() {
            if let Some(slot) = s.first.get(i) {
                slot.store(e.time << 8 | e.data[0] as u32, Relaxed);
            }
            if e.data.len() != 3 || e.data[2] != 100 {
                intact = 0;
            }
        }
        s.intact.store(intact, Relaxed);
        s.audio.store(inputs.channel(1)[0].to_bits(), Relaxed);
        s.cycles.fetch_add(1, Relaxed);
    }
}

fn source(name: &str, events: &'static [(u32, u8)]) -> (NodeSpec, Source) {
    let mut s = NodeSpec::new(name, NodeKind::Filter);
    s.outputs = ChannelMap(vec![ChannelPosition::Aux(0), ChannelPosition::Aux(1)]);
    s.output_names = vec!["midi_out".into(), "audio_out".into()];
    s.output_types = vec![PortType::Midi, PortType::Audio];
    (
        s,
        Source {
            events,
            midi: MidiPorts::NONE,
        },
    )
}

#[test]
fn two_sources_merge_in_time_order_without_allocating() {
    let dev = RecordingDevice::new(48000, 0);
    let cfg = EngineConfig {
        quantum_default: 64,
        quantum_min: 32,
        quantum_max: 64,
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    };
    let (engine, mut runner) = Engine::new_manual(cfg, vec![Box::new(dev)]).unwrap();
    let (a, pa) = source("a", &[(0, 0x90), (20, 0x91), (40, 0x92)]);
    let (b, pb) = source("b", &[(10, 0xA0), (20, 0xA1)]);
    engine.add_node(a, Some(Box::new(pa))).unwrap();
    engine.add_node(b, Some(Box::new(pb))).unwrap();
    let seen = Arc::new(Seen::default());
    let mut k = NodeSpec::new("k", NodeKind::Filter);
    k.inputs = ChannelMap(vec![ChannelPosition::Aux(0), ChannelPosition::Aux(1)]);
    k.input_names = vec!["midi_in".into(), "audio_in".into()];
    k.input_types = vec![PortType::Midi, PortType::Audio];
    k.keep_awake = true;
    engine
        .add_node(k, Some(Box::new(Sink { seen: seen.clone() })))
        .unwrap();
    // Types are checked: MIDI never reaches an audio port.
    let err = engine.link("a:midi_out", "k:audio_in").unwrap_err();
    assert!(err.to_string().contains("different data types"), "{err}");
    // Whole-node links pair MIDI with MIDI and audio with audio.
    engine.link("a", "k").unwrap();
    engine.link("b:midi_out", "k:midi_in").unwrap();
    // A volume on the source scales its audio, never its events.
    engine.set_volume("a", Some(0.5), None).unwrap();
    reset_violation_count();
    assert_no_alloc(|| {
        for _ in 0..500 {
            runner.run_cycle();
        }
    });
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    assert!(seen.cycles.load(Relaxed) > 400);
    assert_eq!(seen.count.load(Relaxed), 5);
    assert_eq!(seen.lost.load(Relaxed), 0);
    assert_eq!(seen.intact.load(Relaxed), 1);
    let first: Vec<u32> = seen.first.iter().map(|x| x.load(Relaxed)).collect();
    assert_eq!(
        first,
        vec![0x90, 10 << 8 | 0xA0, 20 << 8 | 0x91, 20 << 8 | 0xA1],
        "time order, the earlier link first at equal times"
    );
    assert_eq!(f32::from_bits(seen.audio.load(Relaxed)), 0.5);

    // A port added at run time as MIDI, fed by a node whose list overflows the 64-word
    // buffer: the excess is counted lost, the rest arrives.
    let many: &'static [(u32, u8)] = Box::leak(
        (0..40u32)
            .map(|t| (t, 0xB0))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let (c, pc) = source("c", many);
    engine.add_node(c, Some(Box::new(pc))).unwrap();
    engine.unlink("a", "k").unwrap();
    engine.unlink("b", "k").unwrap();
    engine.link("c:midi_out", "k:midi_in").unwrap();
    assert_no_alloc(|| {
        for _ in 0..10 {
            runner.run_cycle();
        }
    });
    assert_eq!(violation_count(), 0, "allocations in the real-time cycle");
    // 64 words: 4 of header, 3 per event → 20 fit in the source, 20 were lost there.
    assert_eq!(seen.count.load(Relaxed), 20);
    assert_eq!(seen.lost.load(Relaxed), 20);
    let x = engine.graph();
    let id = x.node_by_name("k").unwrap().id;
    drop(x);
    let err = engine
        .add_port_typed(
            id,
            Direction::In,
            Some("more"),
            ChannelPosition::Aux(2),
            PortType::Midi,
        )
        .unwrap_err();
    assert!(err.to_string().contains("ports in use"), "{err}");
    engine.shutdown_manual(runner).unwrap();
}
