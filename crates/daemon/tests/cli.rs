//! The `quaver` command line against a real daemon: every command, JSON output,
//! stdin playback, compressed files and Ctrl-C during a recording.

use quaver_testkit::*;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn status_ls_and_graph_describe_the_default_server() {
    let mut d = Daemon::start(&[]);
    let text = ok(&d.run(&["status"]));
    assert!(text.contains("null"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&ok(&d.run(&["status", "--json"]))).unwrap();
    assert_eq!(json["rate"], 48000);
    assert_eq!(json["devices"][0]["name"], "null");
    let ls: serde_json::Value = serde_json::from_str(&ok(&d.run(&["ls", "--json"]))).unwrap();
    let names: Vec<&str> = ls["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"null-sink") && names.contains(&"null-source"),
        "{names:?}"
    );
    let text = ok(&d.run(&["ls"]));
    assert!(text.contains("monitor_FL"), "{text}");
    let dot = ok(&d.run(&["graph", "--dot"]));
    assert!(
        dot.starts_with("digraph") && dot.contains("null-sink"),
        "{dot}"
    );
    d.stop();
}

#[test]
fn volume_accepts_linear_percent_and_db() {
    let mut d = Daemon::start(&[]);
    let vol = |d: &Daemon| -> (f64, bool) {
        let ls: serde_json::Value = serde_json::from_str(&ok(&d.run(&["ls", "--json"]))).unwrap();
        let n = ls["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == "null-sink")
            .unwrap()
            .clone();
        (n["volume"].as_f64().unwrap(), n["mute"].as_bool().unwrap())
    };
    ok(&d.run(&["volume", "null-sink", "-6dB"]));
    assert!((vol(&d).0 - 0.501).abs() < 0.001, "{:?}", vol(&d));
    ok(&d.run(&["volume", "null-sink", "50%"]));
    assert!((vol(&d).0 - 0.5).abs() < 1e-6);
    ok(&d.run(&["volume", "null-sink", "--mute"]));
    assert!(vol(&d).1);
    ok(&d.run(&["volume", "null-sink", "1.0", "--unmute"]));
    assert_eq!(vol(&d), (1.0, false));
    let out = d.run(&["volume", "null-sink", "loud"]);
    assert!(!out.status.success());
    d.stop();
}

#[test]
fn raw_pcm_from_stdin_arrives_bit_exact() {
    let mut d = Daemon::start(&["--device", "file:out.wav"]);
    let input = noise_s16(48000 * 2, 77, 12000);
    let bytes: Vec<u8> = input.iter().flat_map(|s| s.to_le_bytes()).collect();
    let mut child = d
        .quaver()
        .args([
            "play",
            "-",
            "--raw",
            "--rate",
            "48000",
            "--channels",
            "2",
            "--format",
            "s16le",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    ok(&wait_output(child, WAIT));
    let out_path = d.path("out.wav");
    d.stop();
    let (_, out) = read_wav_s16(&out_path);
    assert_contains_exactly(&out, &input, "raw PCM from stdin");
}

#[test]
fn compressed_files_play_through_the_resampler() {
    let mut d = Daemon::start(&["--device", "file:out.wav"]);
    // Cargo's value at run time (see the cli crate's decode tests for why).
    let data = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("../cli/testdata");
    for f in ["stereo.flac", "stereo.ogg", "stereo.mp3", "mono.mp3"] {
        let p = data.join(f);
        ok(&d.run(&["play", p.to_str().unwrap()]));
    }
    let out_path = d.path("out.wav");
    d.stop();
    let (spec, out) = read_wav_s16(&out_path);
    assert_eq!(spec.sample_rate, 48000);
    // Four 22.05 kHz files of 5000 frames each, resampled to 48 kHz: about 43,500
    // frames of signal in all.
    let loud = out.chunks(2).filter(|f| f[0] != 0 || f[1] != 0).count();
    assert!(loud > 35_000, "only {loud} frames of signal");
}

#[test]
fn ctrl_c_finalizes_a_recording() {
    let mut d = Daemon::start(&[]);
    let child = d
        .quaver()
        .args(["record", "rec.wav", "--from", "null-sink"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut conn = d.connect("watch");
    assert!(wait_until(WAIT, || conn
        .graph()
        .unwrap()
        .nodes
        .iter()
        .any(|n| n.kind == "record")));
    std::thread::sleep(Duration::from_millis(500));
    signal(child.id(), libc::SIGINT);
    ok(&wait_output(child, WAIT));
    let r = hound::WavReader::open(d.path("rec.wav")).expect("a valid WAV after Ctrl-C");
    assert!(r.duration() > 4800, "recorded {} frames", r.duration());
    assert_eq!(r.len() as u64, r.duration() as u64 * 2);
    // The record stream is gone once the client left.
    assert!(wait_until(WAIT, || !conn
        .graph()
        .unwrap()
        .nodes
        .iter()
        .any(|n| n.kind == "record")));
    drop(conn);
    d.stop();
}

#[test]
fn clear_errors_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(quaver_bin())
        .args(["status"])
        .env("QUAVER_SERVER", dir.path().join("nothing-here"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is quaverd running"), "{err}");
}

#[test]
fn rules_check_names_a_typo_with_its_line_and_counts_valid_rules() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.toml");
    let check = |text: &str| {
        std::fs::write(&file, text).unwrap();
        std::process::Command::new(quaver_bin())
            .args(["rules", "check"])
            .arg(&file)
            .output()
            .unwrap()
    };
    let good = "[[rule]]\nmatch = { \"application.name\" = \"mpv\" }\ntarget = \"hdmi\"\n\n\
                [[rule]]\nmatch = { \"media.role\" = \"voip\" }\nrole = \"phone\"\n";
    let out = check(good);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 rule(s), valid"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = check(&good.replace("role = \"phone\"", "rol = \"phone\""));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 7") && err.contains("unknown field `rol`"),
        "{err}"
    );
    assert!(err.contains("rules.toml"), "{err}");
    let out = check("[[rule]]\nmatch = { \"application.name\" = \"mpv\" }\n");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rule 1 (line 1): no action"), "{err}");
}

/// Roles for native clients too (docs/policy/roles.md): `quaver play --role phone`
/// ducks music another `quaver play` sends, by 20 dB, and it comes back after.
#[test]
fn a_native_phone_stream_ducks_native_music() {
    let mut d = Daemon::start(&["--device", "file:out.wav,format=f32"]);
    let sine = quaver_dsp::analysis::sine(48000, 1000.0, 0.5, 48000 * 3);
    let stereo: Vec<f32> = sine.iter().flat_map(|&s| [s, s]).collect();
    write_wav_f32(&d.path("music.wav"), 48000, 2, &stereo);
    write_wav_f32(&d.path("call.wav"), 48000, 2, &vec![0.0; 48000 * 2]);
    let music = d
        .quaver()
        .args(["play", "music.wav"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(WAIT, || d.log_text().contains("stream music")),
        "{}",
        d.log_text()
    );
    std::thread::sleep(Duration::from_millis(400));
    ok(&d.run(&["play", "--role", "phone", "call.wav"]));
    ok(&wait_output(music, WAIT));
    let log = d.log_text();
    let out_path = d.path("out.wav");
    d.stop();
    assert!(
        log.contains("ducked (-20 dB)") && log.contains("restored"),
        "{log}"
    );
    let (_, got) = read_wav_f32(&out_path);
    let peaks = quaver_testkit::block_peaks(&got, 2, 0, 480);
    let ducked = peaks.iter().filter(|&&p| (p - 0.05).abs() < 0.005).count();
    let loud = peaks.iter().filter(|&&p| (p - 0.5).abs() < 0.01).count();
    // The one-second call (about 100 blocks of 10 ms) ducked, the rest of the music loud.
    assert!(
        (80..=115).contains(&ducked),
        "{ducked} ducked blocks: {peaks:?}"
    );
    assert!(loud >= 50, "{loud} loud blocks: {peaks:?}");
}
