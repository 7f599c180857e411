//! Bad input gets a clear error and loses nothing: each case is checked against a real
//! daemon, and the daemon is checked to keep serving afterwards.

use quaver_protocol::message::{Direction, StreamParams};
use quaver_testkit::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn second_daemon_on_the_same_runtime_dir_is_refused() {
    let mut d = Daemon::start(&[]);
    let out = Command::new(quaverd_bin())
        .args(["--realtime-priority", "0"])
        .env("XDG_RUNTIME_DIR", d.runtime.parent().unwrap())
        .env("XDG_CONFIG_HOME", d.path("config"))
        .env("XDG_STATE_HOME", d.path("state"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already serves"), "{}", stderr(&out));
    // The first one is unharmed.
    d.connect("still-there").status().unwrap();
    d.stop();
}

#[test]
fn config_with_unknown_key_or_bad_value_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_dir = dir.path().join("config/quaver");
    std::fs::create_dir_all(&cfg_dir).unwrap();
    for (text, needle) in [
        ("[engine]\nrate = 48000\nquantm_min = 64\n", "line 3"),
        ("[engine]\n\n\nrate = \"high\"\n", "line 4"),
        ("[engine]\nquantum_min = 48\n", "quantum_min"),
    ] {
        std::fs::write(cfg_dir.join("quaver.toml"), text).unwrap();
        let out = Command::new(quaverd_bin())
            .env("XDG_RUNTIME_DIR", dir.path())
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{text} was accepted");
        assert!(
            stderr(&out).contains(needle),
            "error for {text:?} lacks {needle}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn bad_device_spec_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(quaverd_bin())
        .args(["--device", "warp:9"])
        .env("XDG_RUNTIME_DIR", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("warp"), "{}", stderr(&out));
}

#[test]
fn garbage_from_a_client_gets_an_error_and_others_keep_working() {
    let mut d = Daemon::start(&[]);
    let mut good = d.connect("good");
    // Well-framed garbage JSON: an error reply, and the connection stays usable.
    let mut raw = UnixStream::connect(&d.socket).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let junk = b"{this is not json";
    raw.write_all(&(junk.len() as u32).to_le_bytes()).unwrap();
    raw.write_all(junk).unwrap();
    let mut len = [0u8; 4];
    raw.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    raw.read_exact(&mut body).unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("bad_request"), "{text}");
    // A request before hello is refused.
    let early = br#"{"id":1,"request":{"type":"status"}}"#;
    raw.write_all(&(early.len() as u32).to_le_bytes()).unwrap();
    raw.write_all(early).unwrap();
    raw.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    raw.read_exact(&mut body).unwrap();
    assert!(String::from_utf8_lossy(&body).contains("hello"));
    // A frame claiming 2 GiB: the server disconnects this client only.
    raw.write_all(&(0x8000_0000u32).to_le_bytes()).unwrap();
    let mut buf = [0u8; 16];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "server should close the connection");
    // Invalid parameters are refused with a reason.
    let mut p = StreamParams::playback("x", 0, quaver_dsp::ChannelMap::stereo());
    p.direction = Direction::Playback;
    let err = match good.create_playback(p) {
        Ok(_) => panic!("rate 0 accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("rate"), "{err}");
    good.status().expect("the good client is still served");
    d.stop();
}

#[test]
fn unknown_nodes_and_incompatible_links_are_clear_errors() {
    let mut d = Daemon::start(&[]);
    let out = d.run(&["link", "nope", "null-sink"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nope"), "{}", stderr(&out));
    let out = d.run(&["link", "null-sink:playback_FL", "null-source:capture_FL"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("output port to an input port"),
        "{}",
        stderr(&out)
    );
    let out = d.run(&["play", "missing.wav"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.wav"), "{}", stderr(&out));
    std::fs::write(d.path("junk.wav"), b"RIFF....WAVEjunkjunkjunk").unwrap();
    let out = d.run(&["play", "junk.wav"]);
    assert!(!out.status.success());
    let input = noise_s16(4800, 1, 1000);
    write_wav_s16(&d.path("ok.wav"), 48000, 1, &input);
    let out = d.run(&["play", "ok.wav", "--to", "no-such-sink"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no-such-sink"), "{}", stderr(&out));
    ok(&d.run(&["status"]));
    d.stop();
}

#[test]
fn a_client_that_stops_reading_its_capture_ring_harms_no_one() {
    let mut d = Daemon::start(&[]);
    let mut lazy = d.connect("lazy");
    let mut p = StreamParams::record("lazy-rec", 48000, quaver_dsp::ChannelMap::stereo());
    p.target = Some("null-sink".into());
    p.latency_ms = Some(20.0);
    let rec = lazy.create_record(p).unwrap();
    // Never read: the ring fills and the server drops frames for this stream only.
    let input = noise_s16(48000, 9, 1000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    ok(&d.run(&["play", "in.wav"]));
    // The capture ring holds about a second; once it is full, overruns are counted.
    assert!(
        wait_until(WAIT, || rec.xruns() > 0),
        "overruns are counted for the lazy stream"
    );
    ok(&d.run(&["play", "in.wav"]));
    let st = lazy.status().unwrap();
    assert_eq!(st.xruns, 0);
    d.stop();
}

#[test]
fn missing_alsa_library_falls_back_to_the_null_device() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let log = dir.path().join("log");
    let mut child = Command::new(quaverd_bin())
        .args(["--realtime-priority", "0", "--device", "alsa:hw:0"])
        .env("XDG_RUNTIME_DIR", &xdg)
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("QUAVER_ALSA_LIBRARY", "libasound-missing.so.2")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let socket = xdg.join("quaver/native");
    let up = wait_until(WAIT, || UnixStream::connect(&socket).is_ok());
    let device = up.then(|| {
        // The socket is bound before devices open; status waits for the whole start.
        let mut c = quaver_client::Connection::connect(Some(&socket), "probe").unwrap();
        c.status().unwrap().devices[0].name.clone()
    });
    signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(device.as_deref(), Some("null"), "{text}");
    assert!(up, "daemon did not start: {text}");
    assert!(
        text.contains("ALSA unavailable") && text.contains("falling back"),
        "{text}"
    );
}
