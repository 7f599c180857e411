//! A C client built against JACK's headers (`libjack-jackd2-dev`) and linked with
//! quaver's libjack: API semantics checked from C, and audio through its process
//! callback measured with native streams. Skips, saying so, without gcc or the headers.

mod common;

use common::*;
use quaver_client::quaver_protocol::{ChannelMap, StreamParams};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

fn build_client(d: &Daemon) -> Option<std::path::PathBuf> {
    build_c("api_client", "/usr/include/jack/jack.h", &d.path(""))
}

#[test]
fn a_c_client_sees_jack_semantics_and_its_callback_carries_audio() {
    let mut d = Daemon::start(&[]);
    let Some(exe) = build_client(&d) else { return };
    let mut child = d
        .jack(&[exe.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut log = Vec::new();
    loop {
        let l = lines.next().expect("the client ended early").unwrap();
        log.push(l.clone());
        if l == "ready" {
            break;
        }
    }
    // Audio: a playback stream into cgain:in, a record stream from cgain:out.
    let mut conn = d.connect();
    let mut rp = StreamParams::record("rec", 48000, ChannelMap::mono());
    rp.target = Some("cgain".into());
    let mut rec = conn.create_record(rp).unwrap();
    let mut pp = StreamParams::playback("tone", 48000, ChannelMap::mono());
    pp.target = Some("cgain".into());
    pp.latency_ms = Some(40.0);
    let mut play = conn.create_playback(pp).unwrap();
    let feeder = std::thread::spawn(move || {
        for _ in 0..20 {
            play.write(&[0.25f32; 4800]).unwrap();
        }
        play
    });
    let mut got = Vec::new();
    let mut buf = vec![0.0f32; 4800];
    let doubled = wait_until(WAIT, || {
        if let Ok(n) = rec.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.windows(512).any(|w| w.iter().all(|&v| v == 0.5))
    });
    assert!(
        doubled,
        "the C process callback's output never reached the recorder"
    );
    assert!(!got.contains(&100.0), "a MIDI input port received events");
    let _play = feeder.join().unwrap();
    drop(child.stdin.take());
    for l in lines {
        log.push(l.unwrap());
    }
    let out = wait_output(child, WAIT);
    let text = log.join("\n");
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("FAIL"), "{text}");
    assert!(
        text.contains("ok uuid round trip") && text.ends_with("closed"),
        "{text}"
    );
    assert!(wait_until(WAIT, || !d
        .connect()
        .graph()
        .unwrap()
        .nodes
        .iter()
        .any(|n| n.name == "cgain")));
    let _ = std::io::stdout().flush();
    d.stop();
}
