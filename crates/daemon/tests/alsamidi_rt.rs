//! The `a2j` node's processor (`alsamidi::SeqMidiNode`) on the host, with the bridge's
//! queues standing in for the sequencer: events land in their source's output port at
//! the frame the time stamp says (read before the cycle: frame 0, in order; read during
//! it: that far in; read over a second before: dropped), unknown sources are dropped, an input port's events go to its
//! sequencer port, route changes take effect at the next cycle — and none of it
//! allocates (the workspace's `assert_no_alloc` guard around each cycle).

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use quaver_daemon::alsamidi::{Route, STALE_NS, SeqMidiNode};
use quaver_devices::alsa::seq::{MidiReceiver, PortId, queue};
use quaver_dsp::PlanarBuf;
use quaver_engine::midi::{self, MidiPorts};
use quaver_engine::{CycleInfo, Processor};

// The workspace's allocation guard, as the engine's and native's real-time tests use it.
#[global_allocator]
static GLOBAL: AllocDisabler = AllocDisabler;

const Q: usize = 256;
const RATE: u32 = 48_000;
/// The cycle's start on CLOCK_MONOTONIC.
const T0: u64 = 5_000_000_000;

fn cycle(n: u64) -> CycleInfo {
    CycleInfo {
        frames: Q,
        rate: RATE,
        cycle: n,
        time_ns: T0 + n * 1_000_000_000,
        position: n * Q as u64,
        playback_delay: 0,
        capture_delay: 0,
        margin_frames: 0,
        freewheel: false,
        fill_frames: 0,
    }
}

fn port(client: u8, port: u8) -> PortId {
    PortId { client, port }
}

/// The (time, bytes) of an output buffer's list.
fn listed(buf: &PlanarBuf, ch: usize) -> Vec<(u32, Vec<u8>)> {
    midi::events(midi::words(buf.view(Q).whole_channel(ch)))
        .map(|e| (e.time, e.data.to_vec()))
        .collect()
}

fn drain(rx: &mut MidiReceiver) -> Vec<(PortId, Vec<u8>)> {
    let mut v = Vec::new();
    while let Some(m) = rx.pop() {
        let mut b = vec![0; m.len()];
        m.copy_to(&mut b);
        v.push((m.port, b));
    }
    v
}

#[test]
fn sequencer_events_reach_their_ports_at_their_frames_and_inputs_go_out_without_allocating() {
    // A small byte ring, so a message wraps and goes through the scratch copy.
    let (mut seq_in, rx) = queue(64, 40);
    let (tx_out, mut sent) = queue(64, 4096);
    let (mut routes, routes_rx) = rtrb::RingBuffer::new(16);
    let mut node = SeqMidiNode::new(rx, tx_out, routes_rx, 40);
    let (a, b, sink) = (port(20, 0), port(24, 0), port(28, 0));
    routes
        .push(Route::Source {
            index: 0,
            port: Some(a),
        })
        .unwrap();
    routes
        .push(Route::Source {
            index: 1,
            port: Some(b),
        })
        .unwrap();
    routes
        .push(Route::Sink {
            index: 0,
            port: Some(sink),
        })
        .unwrap();
    let mut ports = MidiPorts::NONE;
    ports.inputs.insert(0);
    ports.outputs.insert(0);
    ports.outputs.insert(1);
    let mut inb = PlanarBuf::new(1, Q);
    let mut outb = PlanarBuf::new(2, Q);
    // Stale output from the cycle before must not survive.
    midi::push(
        midi::words_mut(outb.view_mut(Q).whole_channel_mut(0)),
        3,
        &[0xC0, 1],
    );

    // Cycle 0: two messages read before the cycle, one 2 ms into it, one from a port
    // with no graph port; an input event to send.
    let c0 = cycle(0);
    seq_in
        .push(c0.time_ns - 3_000_000, a, &[0x90, 0x3C, 0x7F])
        .unwrap();
    seq_in
        .push(c0.time_ns - 1_000_000, b, &[0xB0, 0x07, 0x64])
        .unwrap();
    seq_in
        .push(c0.time_ns + 2_000_000, a, &[0x80, 0x3C, 0x00])
        .unwrap();
    seq_in.push(c0.time_ns, port(99, 0), &[0xF8]).unwrap();
    midi::clear(midi::words_mut(inb.view_mut(Q).whole_channel_mut(0)));
    midi::push(
        midi::words_mut(inb.view_mut(Q).whole_channel_mut(0)),
        7,
        &[0x90, 0x40, 0x10],
    );
    reset_violation_count();
    assert_no_alloc(|| {
        node.midi_ports(&ports);
        node.process(&c0, inb.view(Q), &mut outb.view_mut(Q));
    });
    let spent = violation_count();
    assert_eq!(spent, 0, "cycle 0 allocated {spent} times");
    assert_eq!(
        listed(&outb, 0),
        [(0, vec![0x90, 0x3C, 0x7F]), (96, vec![0x80, 0x3C, 0x00])],
        "2 ms at 48 kHz is frame 96; read before the cycle is frame 0"
    );
    assert_eq!(listed(&outb, 1), [(0, vec![0xB0, 0x07, 0x64])]);
    assert_eq!(node.dropped(), 1, "the unknown port's message is dropped");
    assert_eq!(drain(&mut sent), [(sink, vec![0x90, 0x40, 0x10])]);

    // Cycle 1: a sysex that wraps in the 40-byte ring (cycle 0 used 10 bytes), and a
    // message stamped far past the cycle's start, clamped to its last frame.
    let c1 = cycle(1);
    let sysex: Vec<u8> = [0xF0].into_iter().chain(1..=30).chain([0xF7]).collect();
    seq_in.push(c1.time_ns, a, &sysex).unwrap();
    seq_in.push(c1.time_ns + 1_000_000_000, a, &[0xFE]).unwrap();
    midi::clear(midi::words_mut(inb.view_mut(Q).whole_channel_mut(0)));
    reset_violation_count();
    assert_no_alloc(|| {
        node.midi_ports(&ports);
        node.process(&c1, inb.view(Q), &mut outb.view_mut(Q));
    });
    let spent = violation_count();
    assert_eq!(spent, 0, "cycle 1 allocated {spent} times");
    assert_eq!(
        listed(&outb, 0),
        [(0, sysex.clone()), (Q as u32 - 1, vec![0xFE])]
    );
    assert!(listed(&outb, 1).is_empty(), "last cycle's events are gone");
    assert!(drain(&mut sent).is_empty(), "no input events, nothing sent");

    // Cycle 2: output 1's route removed: its port's message is dropped; a message read
    // 1.5 s before the cycle (no cycle ran meanwhile: suspended) is dropped as stale,
    // one read just within the bound is delivered at frame 0.
    let c2 = cycle(2);
    routes
        .push(Route::Source {
            index: 1,
            port: None,
        })
        .unwrap();
    seq_in.push(c2.time_ns, b, &[0xB0, 0x07, 0x00]).unwrap();
    seq_in
        .push(c2.time_ns - 1_500_000_000, a, &[0x90, 0x30, 0x7F])
        .unwrap();
    seq_in
        .push(c2.time_ns - STALE_NS, a, &[0x90, 0x31, 0x7F])
        .unwrap();
    reset_violation_count();
    assert_no_alloc(|| {
        node.midi_ports(&ports);
        node.process(&c2, inb.view(Q), &mut outb.view_mut(Q));
    });
    let spent = violation_count();
    assert_eq!(spent, 0, "cycle 2 allocated {spent} times");
    assert!(
        listed(&outb, 1).is_empty(),
        "an unrouted port's list is empty"
    );
    assert_eq!(listed(&outb, 0), [(0, vec![0x90, 0x31, 0x7F])]);
    assert_eq!(
        node.dropped(),
        3,
        "the unrouted and the stale message dropped"
    );
}
