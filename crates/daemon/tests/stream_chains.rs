//! Rules that give single streams their own filter chain and starting volume, end to
//! end: quaverd with a `[[chains]]` entry and a rule file, four real `paplay`s and a
//! `quaver play` at once into one file sink, each a tone of its own, and the level of
//! each tone in what the sink wrote; a `parec` the rules send to that sink's monitor
//! instead of the default source.

use quaver_testkit::*;
use std::f64::consts::PI;
use std::process::Command;

const RATE: usize = 48_000;
const AMP: f64 = 0.1;
/// Each tone lasts this long, so that all overlap however late one starts.
const SECONDS: usize = 4;

const CONFIG: &str = r#"
[engine]
devices = ["file:out.wav,format=f32", "null"]

[policy]
rules = "rules.toml"
default_sink = "file-sink"
default_source = "null-source"

[[chains]]
name = "quiet"
chain = [{ type = "gain", gain_db = -6.0 }]
"#;

const RULES: &str = r#"
[[rule]]
match = { "application.name" = "chained" }
chain = "quiet"

[[rule]]
match = { "application.name" = "soft" }
volume = 0.5

[[rule]]
match = { "application.name" = "lost" }
chain = "nope"

[[rule]]
match = { "media.name" = "native-*" }
chain = "quiet"

[[rule]]
match = { "application.name" = "recorder" }
target = "file-sink.monitor"
"#;

fn pa(d: &Daemon, prog: &str) -> Command {
    d.pulse_client(prog)
}

fn amplitude(x: &[f32], freq: f64) -> f64 {
    tone_amplitude(x, freq, RATE as f64)
}

fn tone(d: &Daemon, name: &str, freq: f64) {
    let frames = SECONDS * RATE;
    let mut s = Vec::with_capacity(frames * 2);
    for n in 0..frames {
        let v = (AMP * (2.0 * PI * freq * n as f64 / RATE as f64).sin()) as f32;
        s.extend([v, v]);
    }
    write_wav_f32(&d.path(name), RATE as u32, 2, &s);
}

#[test]
fn rules_give_single_streams_a_chain_and_a_starting_volume() {
    if !on_path("paplay") {
        eprintln!("SKIPPED: rules_give_single_streams_a_chain… needs paplay (pulseaudio-utils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("quaver.toml"), CONFIG).unwrap();
    std::fs::write(dir.path().join("rules.toml"), RULES).unwrap();
    let mut d = Daemon::start_in(dir, &["--config", "quaver.toml"]);
    // The socket is bound before the rules are read, so the warning may lag its opening.
    let missing = "chain 'nope' is not among the config's [[chains]]";
    wait_until(WAIT, || d.log_text().contains(missing));
    let log = d.log_text();
    assert!(
        log.contains(missing),
        "no warning for the rule's missing chain:\n{log}"
    );
    // (client name, tone, what reaches the sink relative to the tone)
    let gain = |db: f64| 10f64.powf(db / 20.0);
    let streams = [
        ("chained", 1000.0, gain(-6.0)),
        ("plain", 250.0, 1.0),
        ("soft", 500.0, 0.125),
        ("lost", 3000.0, 1.0),
    ];
    let mut children = Vec::new();
    for (client, freq, _) in streams {
        let file = format!("{client}.wav");
        tone(&d, &file, freq);
        let c = pa(&d, "paplay")
            .args([&format!("--client-name={client}"), &file])
            .spawn()
            .unwrap();
        children.push((client.to_string(), c));
    }
    tone(&d, "native-tone.wav", 2000.0);
    let native = d
        .quaver()
        .args(["play", "native-tone.wav"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    children.push(("quaver play".to_string(), native));
    // Two seconds of the mix, from where the rule sends it (the default source is the
    // null device's silence).
    let rec = pa(&d, "parec")
        .args([
            "--client-name=recorder",
            "--format=float32le",
            "--rate=48000",
            "--channels=2",
            "--latency-msec=20",
            "--file-format=wav",
            "rec.wav",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    signal(rec.id(), libc::SIGINT);
    children.push(("parec".to_string(), rec));
    for (who, c) in children {
        let out = wait_output(c, WAIT);
        assert!(
            out.status.success(),
            "{who}: {}\n{}",
            text(&out),
            d.log_text()
        );
    }
    let log = d.log_text();
    let out_path = d.path("out.wav");
    let rec_path = d.path("rec.wav");
    d.stop();
    assert!(
        log.contains("rules: chain 'nope'") && log.contains("plays without it"),
        "the stream whose chain is missing was not named:\n{log}"
    );
    let (_, rec) = read_wav_f32(&rec_path);
    let rec: Vec<f32> = rec.iter().step_by(2).copied().collect();
    assert!(rec.len() >= 48_000, "parec wrote {} frames", rec.len());
    // The plain stream's tone, 0.5 s into the recording (the null source is silent).
    let got = amplitude(&rec[24_000..43_200], 250.0) / AMP;
    assert!(
        (got - 1.0).abs() < 0.06,
        "parec did not record the rule's monitor: the 250 Hz tone at {got:.3} of its level"
    );
    let (spec, out) = read_wav_f32(&out_path);
    assert_eq!((spec.sample_rate, spec.channels), (RATE as u32, 2));
    let left: Vec<f32> = out.iter().step_by(2).copied().collect();
    let start = onset(&left);
    // 0.4 s, two seconds in: a whole number of periods of every tone, while all play.
    let seg = start + 2 * RATE..start + 2 * RATE + 19_200;
    assert!(left.len() >= seg.end, "only {} frames written", left.len());
    let db = |x: f64| 20.0 * x.log10();
    let mut checks = streams
        .iter()
        .map(|&(c, f, g)| (c, f, g))
        .collect::<Vec<_>>();
    checks.push(("quaver play", 2000.0, gain(-6.0)));
    for (who, f, g) in checks {
        let got = db(amplitude(&left[seg.clone()], f) / AMP);
        let want = db(g);
        eprintln!("{who} ({f} Hz): {got:.3} dB, expected {want:.3} dB");
        assert!(
            (got - want).abs() < 0.05,
            "{who} ({f} Hz): {got:.3} dB, expected {want:.3} dB"
        );
    }
}
