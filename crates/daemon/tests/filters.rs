//! A filter chain on a device sink, end to end: quaverd started with a `[[filters]]`
//! config, real `paplay`s (two tones with one NaN in them, then a sine whose gain is
//! changed three times while it plays), and the samples the file sink wrote.

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
  { type = "biquad", kind = "peaking", freq = 1000.0, q = 1.0, gain_db = 6.0 },
  { type = "gain", gain_db = -3.0 },
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
    let changes = play_with_gain_changes(&d);
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
    // The NaN became one silent sample where the client's float audio is decoded, so
    // it never reached the chain: no block of silence (a chain reset) around it. The
    // chain's own guard, for NaN a filter makes, is tested in crates/dsp/tests/filters.rs.
    let around = &right[start + NAN_AT - 8_192..start + NAN_AT + 8_192];
    let mut run = 0usize;
    let mut longest = 0usize;
    for v in around {
        run = if *v == 0.0 { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    assert!(
        longest < 16,
        "silent run of {longest} frames around the NaN"
    );
    assert!(around.iter().all(|v| v.is_finite()));
    check_gain_changes(&right, start + 60_000, &c, &changes);
}

/// Gains (dB) the second play ends at, after its changes.
const GAIN_STEPS: [f64; 3] = [-15.0, 0.0, -9.0];
const LOW_FREQ: f64 = 100.0;
const LOW_FRAMES: usize = 2 * RATE;

/// Plays 2 s of a 100 Hz sine and changes the chain's gain three times meanwhile,
/// through the native protocol's `set_filter_control`. Returns the gains it set.
fn play_with_gain_changes(d: &Daemon) -> [f64; 3] {
    let sine: Vec<f32> = (0..LOW_FRAMES)
        .flat_map(|n| {
            let v = AMP * (2.0 * PI * LOW_FREQ * n as f64 / RATE as f64).sin() as f32;
            [v, v]
        })
        .collect();
    write_wav_f32(&d.path("low.wav"), RATE as u32, 2, &sine);
    let player = pa(d, "paplay")
        .arg("low.wav")
        .current_dir(d.dir.path())
        .spawn()
        .unwrap();
    let mut c = d.connect("filter-test");
    // Refused with the reason, and nothing changes.
    let e = c
        .set_filter_control("file-sink", 1, "gian_db", -6.0)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no such control: this filter has gain_db"),
        "{e}"
    );
    let e = c
        .set_filter_control("file-sink", 5, "gain_db", -6.0)
        .unwrap_err();
    assert!(e.to_string().contains("its chain has 2"), "{e}");
    for db in GAIN_STEPS {
        std::thread::sleep(std::time::Duration::from_millis(350));
        c.set_filter_control("file-sink", 1, "gain_db", db).unwrap();
    }
    let out = wait_output(player, WAIT);
    assert!(
        out.status.success(),
        "paplay: {}\n{}",
        text(&out),
        d.log_text()
    );
    GAIN_STEPS
}

/// The second play, from `from` on in channel `x`: no sample step beyond what the
/// gain's 256-frame ramp allows on the filtered sine, and it ends at the last gain.
fn check_gain_changes(x: &[f32], from: usize, c: &Coeffs, gains: &[f64; 3]) {
    // The first play's chain rings on at a tiny level after it: the second play
    // starts at the first sample anywhere near its own level.
    let start = from
        + x[from..]
            .iter()
            .position(|v| v.abs() > 1e-3)
            .expect("the second play is in the file");
    let play = &x[start..(start + LOW_FRAMES).min(x.len())];
    assert!(play.len() > LOW_FRAMES - 4_800, "second play cut short");
    let g = |db: f64| 10f64.powf(db / 20.0);
    // y = g[n]·s[n] with s the sine after the biquad (amplitude a):
    // |y[n] - y[n-1]| ≤ g_max·(the sine's step) + a·(largest gain change per frame).
    let a = AMP as f64 * c.magnitude(LOW_FREQ, RATE as f64);
    let levels = [-3.0, gains[0], gains[1], gains[2]];
    let g_max = levels.iter().map(|&l| g(l)).fold(0.0, f64::max);
    let per_frame = levels
        .windows(2)
        .map(|w| (g(w[1]) - g(w[0])).abs() / 256.0)
        .fold(0.0, f64::max);
    let sine_step = 2.0 * a * (PI * LOW_FREQ / RATE as f64).sin();
    let allowed = g_max * sine_step + a * per_frame + 1e-6;
    // The stream's own start and end are not the chain's: skip a few ms at each.
    let body = &play[480..play.len() - 480];
    let step = body
        .windows(2)
        .map(|w| (w[1] as f64 - w[0] as f64).abs())
        .fold(0.0, f64::max);
    eprintln!(
        "gain changes while a 100 Hz sine plays: largest step {step:.5}, allowed {allowed:.5}"
    );
    assert!(
        step <= allowed,
        "step {step} > {allowed} allowed by the ramp"
    );
    // An unramped change at any but the rarest phase would step far more.
    assert!(
        allowed < 0.2 * a * (g(0.0) - g(-15.0)),
        "the check would not see a jump"
    );
    let tail = &play[play.len() - 4_800 - 480..play.len() - 480];
    let got = 20.0 * (amplitude(tail, LOW_FREQ) / AMP as f64).log10();
    let want = gains[2] + 20.0 * c.magnitude(LOW_FREQ, RATE as f64).log10();
    assert!(
        (got - want).abs() < 0.05,
        "ends at {got:.3} dB, expected {want:.3} dB"
    );
}

/// A measured impulse response shipped by Debian: the street in Antwerp that
/// jconvolver's author recorded (jconvolver-config-files, 48 kHz float, 0.39 s).
const STREET: [&str; 2] = [
    "/usr/share/jconvolver/config-files/demo-reverbs/street2-L.wav",
    "/usr/share/jconvolver/config-files/demo-reverbs/street2-R.wav",
];

/// Issue 36, acceptance 1: a convolver with a measured room response against an
/// offline reference convolution (f64, direct), loaded the way quaverd loads `ir`.
#[test]
fn convolver_with_a_measured_room_response_matches_a_direct_convolution() {
    use quaver_dsp::filter::{Convolver, Filter};
    if STREET.iter().any(|p| !std::path::Path::new(p).exists()) {
        eprintln!(
            "SKIPPED: convolver_with_a_measured_room_response_matches_a_direct_convolution needs {} (jconvolver-config-files)",
            STREET[0]
        );
        return;
    }
    let irs: Vec<Vec<f32>> = STREET
        .iter()
        .map(|p| {
            let mut ir =
                quaver_daemon::filters::load_impulse(std::path::Path::new(p), 2, 48_000).unwrap();
            assert_eq!(ir.len(), 1, "{p} is mono");
            ir.remove(0)
        })
        .collect();
    assert!(irs[0].len() > 15_000, "{} taps", irs[0].len());
    let len = 12_000;
    let mut seed = 3u32;
    let input: Vec<Vec<f64>> = (0..2)
        .map(|ch| {
            (0..len)
                .map(|n| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    let noise = (seed >> 8) as f64 / (1u32 << 23) as f64 - 1.0;
                    0.3 * (2.0 * PI * (440.0 + 110.0 * ch as f64) * n as f64 / 48_000.0).sin()
                        + 0.1 * noise
                })
                .collect()
        })
        .collect();
    let mut conv = Convolver::new(2, &irs, 1024).unwrap();
    let mut buf = quaver_dsp::PlanarBuf::new(2, 2048);
    let mut out = [Vec::new(), Vec::new()];
    let mut at = 0;
    for size in [1024usize, 1, 333, 2048, 64, 1000].iter().cycle() {
        if at >= len {
            break;
        }
        let n = (*size).min(len - at);
        for (ch, x) in input.iter().enumerate() {
            for (d, s) in buf.channel_mut(ch)[..n].iter_mut().zip(&x[at..]) {
                *d = *s as f32;
            }
        }
        conv.process(&mut buf.view_mut(n));
        for (ch, o) in out.iter_mut().enumerate() {
            o.extend(buf.channel(ch)[..n].iter().map(|&v| v as f64));
        }
        at += n;
    }
    for ch in 0..2 {
        let h = &irs[ch];
        let want: Vec<f64> = (0..len)
            .map(|n| {
                let lo = n.saturating_sub(h.len() - 1);
                (lo..=n).map(|k| input[ch][k] * h[n - k] as f64).sum()
            })
            .collect();
        let e: f64 = out[ch]
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b) * (a - b))
            .sum();
        let s: f64 = want.iter().map(|b| b * b).sum();
        let db = 10.0 * (e / s).log10();
        eprintln!("measured street response, channel {ch}: relative error {db:.1} dB");
        assert!(db < -100.0, "channel {ch}: {db:.1} dB");
    }
}
