//! MIDI ports of native callback clients against a real daemon: types in
//! `callback_created`, `add_port`, `graph` and `quaver ls`; links only between ports of
//! one type; and events from one client's MIDI output arriving at another's input with
//! their times, merged in time order with a second sender's.

use quaver_client::ClientError;
use quaver_client::callback::{CallbackClient, Wake};
use quaver_client::quaver_protocol::message::PortType;
use quaver_client::quaver_protocol::midi;
use quaver_client::quaver_protocol::{CallbackParams, ErrorCode, PortDirection, PortParams};
use quaver_testkit::{Daemon, WAIT};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Runs `cycle` on every wake of `cb` until `stop`.
fn run(
    cb: Arc<CallbackClient>,
    stop: Arc<AtomicBool>,
    mut cycle: impl FnMut(&CallbackClient, u32) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        cb.set_active(true);
        let mut last = 0;
        while !stop.load(Ordering::Relaxed) {
            match cb.wait(last) {
                Ok(Wake::Cycle(h)) => {
                    last = h.seq;
                    cycle(&cb, h.frames);
                    cb.complete(h.seq);
                }
                _ => return,
            }
        }
    })
}

#[test]
fn midi_ports_carry_timed_events_between_native_clients() {
    let mut d = Daemon::start(&["--quantum", "256"]);
    let mut conn = d.connect("midi");
    let mut p = CallbackParams::new("tx");
    p.outputs.push(PortParams::midi("m"));
    p.outputs.push(PortParams::new("a"));
    p.max_outputs = Some(3);
    let tx = Arc::new(conn.create_callback(p).unwrap());
    let types: Vec<PortType> = tx.ports().iter().map(|p| p.port_type).collect();
    assert_eq!(types, [PortType::Midi, PortType::Audio]);
    let tx2 = conn
        .add_port_typed(tx.node(), PortDirection::Out, "m2", None, PortType::Midi)
        .unwrap();
    assert_eq!((tx2.port_type, tx2.index), (PortType::Midi, 2));
    let mut p = CallbackParams::new("rx");
    p.inputs.push(PortParams::midi("in"));
    p.inputs.push(PortParams::new("audio_in"));
    let rx = Arc::new(conn.create_callback(p).unwrap());

    let g = conn.graph().unwrap();
    let node = g.nodes.iter().find(|n| n.name == "rx").unwrap();
    assert_eq!(node.ports[0].port_type, PortType::Midi);
    assert_eq!(node.ports[1].port_type, PortType::Audio);
    let ls = std::process::Command::new(quaver_testkit::quaver_bin())
        .arg("ls")
        .env("QUAVER_SERVER", &d.socket)
        .output()
        .unwrap();
    let ls = String::from_utf8_lossy(&ls.stdout).into_owned();
    assert!(ls.contains("in: ") && ls.contains("in[midi]"), "{ls}");
    assert!(ls.contains("m[midi] a[AUX1] m2[midi]"), "{ls}");

    // Links join ports of one type only.
    match conn.link("tx:a", "rx:in") {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, ErrorCode::Incompatible);
            assert!(message.contains("different data types"), "{message}");
        }
        other => panic!("audio → MIDI linked: {other:?}"),
    }
    conn.link("tx:m", "rx:in").unwrap();
    conn.link("tx:m2", "rx:in").unwrap();
    // The engine applies one plan per cycle: let the second link's plan in before the
    // clients start, or their first cycle carries the first link only.
    std::thread::sleep(Duration::from_millis(100));

    let stop = Arc::new(AtomicBool::new(false));
    let sender = run(tx.clone(), stop.clone(), |cb, frames| {
        let mut list = vec![0u32; 64];
        midi::push(&mut list, 0, &[0x90, 60, 100]);
        midi::push(&mut list, frames - 1, &[0x80, 60, 0]);
        cb.write_output_midi(0, &list);
        midi::clear(&mut list);
        midi::push(&mut list, 7, &[0xB0, 1, 2]);
        midi::push(&mut list, frames - 1, &[0xF8]);
        cb.write_output_midi(2, &list);
    });
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let receiver = run(rx.clone(), stop.clone(), move |cb, frames| {
        let mut list = vec![0u32; 4096];
        cb.read_input_midi(0, frames, &mut list);
        let events: Vec<(u32, Vec<u8>)> = midi::events(&list)
            .map(|e| (e.time, e.data.to_vec()))
            .collect();
        if !events.is_empty() {
            log.lock().unwrap().push((frames, events));
        }
    });
    let t0 = std::time::Instant::now();
    while seen.lock().unwrap().len() < 20 && t0.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    tx.stop_waiting();
    rx.stop_waiting();
    let _ = sender.join();
    let _ = receiver.join();
    let seen = seen.lock().unwrap();
    assert!(
        seen.len() >= 20,
        "too few cycles with events: {}",
        seen.len()
    );
    // Every cycle both senders' events arrive merged in time order; at equal times the
    // earlier link (tx:m) first.
    for (frames, events) in seen.iter() {
        let f = frames - 1;
        assert_eq!(
            events,
            &vec![
                (0, vec![0x90, 60, 100]),
                (7, vec![0xB0, 1, 2]),
                (f, vec![0x80, 60, 0]),
                (f, vec![0xF8]),
            ]
        );
    }
    drop(conn);
    d.stop();
}
