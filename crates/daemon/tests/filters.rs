//! A filter chain on a device sink, end to end: quaverd started with a `[[filters]]`
//! config, a real `paplay` of a two-tone float WAV (with one NaN in it), and the
//! samples the file sink wrote.

use quaver_dsp::filter::{BiquadKind, BiquadParams, Coeffs};
use quaver_testkit::*;
use std::f64::consts::PI;
use std::process::Command;

const RATE: usize = 48_000;
const AMP: f32 = 0.25;
/// Where the NaN sits in the played file, in frames.
const NAN_AT: usize = 36_000;

fn pa(d: &Daemon, prog: &str) -> Command {
    let conf = d.path("pulse-client.conf");
    std::fs::write(&conf, "autospawn = no\n").unwrap();
    let home = d.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let sock = d.runtime.parent().unwrap().join("pulse").join("native");
    let mut c = Command::new(prog);
    c.env("PULSE_SERVER", format!("unix:{}", sock.display()))
        .env("PULSE_CLIENTCONFIG", &conf)
        .env("PULSE_RUNTIME_PATH", home.join("pulse-runtime"))
        .env("PULSE_STATE_PATH", home.join("pulse-state"))
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", d.runtime.parent().unwrap())
        .env("XDG_CONFIG_HOME", home.join(".config"));
    c
}

/// Amplitude of the `freq` component of `x` (a whole number of periods long).
fn amplitude(x: &[f32], freq: f64) -> f64 {
    let w = 2.0 * PI * freq / RATE as f64;
    let (mut re, mut im) = (0.0, 0.0);
    for (n, &v) in x.iter().enumerate() {
        re += v as f64 * (w * n as f64).cos();
        im += v as f64 * (w * n as f64).sin();
    }
    2.0 * re.hypot(im) / x.len() as f64
}

#[test]
fn paplay_through_a_sink_with_a_gain_and_eq_chain() {
    if !on_path("paplay") {
        eprintln!(
            "SKIPPED: paplay_through_a_sink_with_a_gain_and_eq_chain needs paplay (pulseaudio-utils)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("quaver.toml"),
        r#"
[engine]
devices = ["file:out.wav,format=f32"]

[[filters]]
sink = "file-sink"
chain = [
  { type = "gain", gain_db = -3.0 },
  { type = "biquad", kind = "peaking", freq = 1000.0, q = 1.0, gain_db = 6.0 },
]
"#,
    )
    .unwrap();
    let mut d = Daemon::start_in(dir, &["--config", "quaver.toml"]);
    // Left 1 kHz, right 250 Hz, 1.25 s, one NaN on the left at 0.75 s.
    let frames = 60_000;
    let mut input = Vec::with_capacity(frames * 2);
    for n in 0..frames {
        let t = n as f64 / RATE as f64;
        let left = if n == NAN_AT {
            f32::NAN
        } else {
            AMP * (2.0 * PI * 1000.0 * t).sin() as f32
        };
        input.push(left);
        input.push(AMP * (2.0 * PI * 250.0 * t).sin() as f32);
    }
    write_wav_f32(&d.path("tones.wav"), RATE as u32, 2, &input);
    let out = wait_output(
        pa(&d, "paplay")
            .arg("tones.wav")
            .current_dir(d.dir.path())
            .spawn()
            .unwrap(),
        WAIT,
    );
    assert!(
        out.status.success(),
        "paplay: {}\n{}",
        text(&out),
        d.log_text()
    );
    let out_path = d.path("out.wav");
    d.stop();
    let (spec, out) = read_wav_f32(&out_path);
    assert_eq!((spec.sample_rate, spec.channels), (RATE as u32, 2));
    assert!(
        out.iter().all(|x| x.is_finite()),
        "NaN or infinity reached the file sink"
    );
    let left: Vec<f32> = out.iter().step_by(2).copied().collect();
    let right: Vec<f32> = out.iter().skip(1).step_by(2).copied().collect();
    let start = onset(&right);
    assert!(
        left.len() >= start + 55_000,
        "only {} frames written",
        left.len()
    );

    // What the chain should do: −3 dB, and the peaking filter's response at each tone
    // (checked against the analytic response in quaver-dsp's tests).
    let peak = BiquadParams {
        kind: BiquadKind::Peaking,
        freq: 1000.0,
        q: 1.0,
        gain_db: 6.0,
    };
    let c = Coeffs::design(&peak, RATE as f64).unwrap();
    let db = |x: f64| 20.0 * x.log10();
    for (what, from) in [("before the NaN", 4_800), ("after it", 48_000)] {
        let seg = start + from..start + from + 4_800;
        for (ch, x, f) in [("left", &left, 1000.0), ("right", &right, 250.0)] {
            let got = db(amplitude(&x[seg.clone()], f) / AMP as f64);
            let want = -3.0 + db(c.magnitude(f, RATE as f64));
            eprintln!("{ch} {f} Hz {what}: {got:.3} dB, expected {want:.3} dB");
            assert!(
                (got - want).abs() < 0.02,
                "{ch} {what}: {got} dB, expected {want} dB"
            );
        }
    }
    // The block with the NaN came out as silence on both channels (the chain reset),
    // and only that block: the signal is back long before the second measurement.
    let around = &right[start + NAN_AT - 8_192..start + NAN_AT + 8_192];
    let mut run = 0usize;
    let mut longest = 0usize;
    for v in around {
        run = if *v == 0.0 { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    assert!(
        (16..=8_192).contains(&longest),
        "silent run of {longest} frames around the NaN"
    );
}
