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
    d.pulse_client(prog)
}

fn amplitude(x: &[f32], freq: f64) -> f64 {
    tone_amplitude(x, freq, RATE as f64)
}

/// The config quaverd starts with; the last gain change rewrites its `-3.0`.
/// Beside it, active stereo on a 4-channel file sink: the front pair (a stereo stream
/// fills only it) split at 1 kHz into L-low, L-high, R-low, R-high.
const CONFIG: &str = r#"
[engine]
devices = ["file:out.wav,format=f32", "file:xover.wav,format=f32,channels=4,name=xover"]

[[filters]]
sink = "file-sink"
chain = [
  { type = "biquad", kind = "peaking", freq = 1000.0, q = 1.0, gain_db = 6.0 },
  { type = "gain", gain_db = -3.0 },
]

[[filters]]
sink = "xover-sink"
chain = [
  { type = "channel_mixer", matrix = [[1, 0, 0, 0], [0, 1, 0, 0]] },
  { type = "crossover", freq = 1000.0 },
]
"#;

#[test]
fn paplay_through_a_sink_with_a_gain_and_eq_chain() {
    if !on_path("paplay") {
        eprintln!(
            "SKIPPED: paplay_through_a_sink_with_a_gain_and_eq_chain needs paplay (pulseaudio-utils)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("quaver.toml"), CONFIG).unwrap();
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
    // The same tones to the crossover's sink at the same time: no time added.
    let to_xover = pa(&d, "paplay")
        .args(["-d", "xover-sink", "tones.wav"])
        .current_dir(d.dir.path())
        .spawn()
        .unwrap();
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
    let out = wait_output(to_xover, WAIT);
    assert!(
        out.status.success(),
        "paplay to xover-sink: {}\n{}",
        text(&out),
        d.log_text()
    );
    check_mixer_controls(&d);
    let changes = play_with_gain_changes(&d);
    let out_path = d.path("out.wav");
    let xover_path = d.path("xover.wav");
    d.stop();
    check_crossover(&xover_path);
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

/// The channel mixer's controls through the native protocol: by matrix entry, checked.
fn check_mixer_controls(d: &Daemon) {
    let mut c = d.connect("mixer-test");
    let e = c
        .set_filter_control("xover-sink", 0, "gain_2_0", 1.0)
        .unwrap_err();
    assert!(e.to_string().contains("no such matrix entry"), "{e}");
    // The crossover's split: `freq` (one split), in range.
    let e = c
        .set_filter_control("xover-sink", 1, "freq_0", 500.0)
        .unwrap_err();
    assert!(e.to_string().contains("freq (one split)"), "{e}");
    let e = c
        .set_filter_control("xover-sink", 1, "freq", 30_000.0)
        .unwrap_err();
    assert!(e.to_string().contains("outside (0, 24000)"), "{e}");
    // Back to what they are: accepted, and the samples checked are already written.
    c.set_filter_control("xover-sink", 0, "gain_1_1", 1.0)
        .unwrap();
    c.set_filter_control("xover-sink", 1, "freq", 1000.0)
        .unwrap();
}

/// The 4-channel file: left's 1 kHz at the split, −6.02 dB in both of its bands;
/// right's 250 Hz in its low band as the two low-passes give it, 48 dB down in its
/// high band.
fn check_crossover(path: &std::path::Path) {
    let (spec, x) = read_wav_f32(path);
    assert_eq!((spec.sample_rate, spec.channels), (RATE as u32, 4));
    assert!(
        x.iter().all(|v| v.is_finite()),
        "NaN or ∞ reached xover.wav"
    );
    let ch = |c: usize| -> Vec<f32> { x.iter().skip(c).step_by(4).copied().collect() };
    let bands = [ch(0), ch(1), ch(2), ch(3)];
    let start = onset(&bands[2]);
    assert!(
        bands[0].len() >= start + 55_000,
        "only {} frames",
        bands[0].len()
    );
    let section = |kind| {
        let p = BiquadParams {
            kind,
            freq: 1000.0,
            q: std::f64::consts::FRAC_1_SQRT_2,
            gain_db: 0.0,
        };
        Coeffs::design(&p, RATE as f64).unwrap()
    };
    let (lp, hp) = (section(BiquadKind::LowPass), section(BiquadKind::HighPass));
    let db = |x: f64| 20.0 * x.log10();
    let want = |c: &Coeffs, f: f64| 2.0 * db(c.magnitude(f, RATE as f64));
    for (what, from) in [("before the NaN", 4_800), ("after it", 48_000)] {
        let seg = start + from..start + from + 4_800;
        for (name, band, f, c) in [
            ("L-low", 0, 1000.0, &lp),
            ("L-high", 1, 1000.0, &hp),
            ("R-low", 2, 250.0, &lp),
            ("R-high", 3, 250.0, &hp),
        ] {
            let got = db(amplitude(&bands[band][seg.clone()], f) / AMP as f64);
            let want = want(c, f);
            eprintln!("crossover {name} {f} Hz {what}: {got:.3} dB, expected {want:.3} dB");
            assert!(
                (got - want).abs() < 0.05,
                "{name} {what}: {got} dB, expected {want} dB"
            );
        }
    }
}

/// Gains (dB) the second play ends at, after its changes.
const GAIN_STEPS: [f64; 3] = [-15.0, 0.0, -9.0];
const LOW_FREQ: f64 = 100.0;
const LOW_FRAMES: usize = 2 * RATE;

/// Plays 2 s of a 100 Hz sine and changes the chain's gain three times meanwhile:
/// twice through the native protocol's `set_filter_control`, the last time by
/// rewriting the config file's gain and sending SIGHUP. Returns the gains it set.
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
    let (live, reloaded) = GAIN_STEPS.split_at(2);
    for db in live {
        std::thread::sleep(std::time::Duration::from_millis(350));
        c.set_filter_control("file-sink", 1, "gain_db", *db)
            .unwrap();
    }
    // Item 4 of issue 36: chains reload on SIGHUP without dropping audio. Only the
    // gain's value changed, so it goes through the same ramp, the biquad untouched.
    std::thread::sleep(std::time::Duration::from_millis(350));
    let edited = CONFIG.replace("gain_db = -3.0", &format!("gain_db = {:.1}", reloaded[0]));
    assert_ne!(edited, CONFIG);
    std::fs::write(d.path("quaver.toml"), edited).unwrap();
    signal(d.pid(), libc::SIGHUP);
    let applied = "SIGHUP: filters on 'file-sink': Controls([(1, \"gain_db\", -9.0)])";
    assert!(
        wait_until(WAIT, || d.log_text().contains(applied)),
        "no '{applied}' in the log:\n{}",
        d.log_text()
    );
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

/// Catches allocations in `plugins_run_in_the_cycle_without_allocating` (only inside
/// `assert_no_alloc`; every other test here allocates as it likes).
#[global_allocator]
static ALLOC: assert_no_alloc::AllocDisabler = assert_no_alloc::AllocDisabler;

/// The LADSPA amp from Debian's ladspa-sdk: `amp_mono`, `amp_stereo`, control "Gain"
/// (a linear factor).
const SDK_AMP: &str = "/usr/lib/ladspa/amp.so";
/// Steve Harris's "Simple amplifier" from Debian's swh-lv2: control `gain`, in dB.
const SWH_AMP: &str = "http://plugin.org.uk/swh-plugins/amp";
const SWH_AMP_BUNDLE: &str = "/usr/lib/lv2/amp-swh.lv2";
/// x42's digital peak limiter from Debian's x42-plugins: `gain` (input gain, dB) and
/// `threshold` (the most the output reaches, dBFS); it has atom ports and requires
/// urid:map.
const X42_DPL: &str = "http://gareus.org/oss/lv2/dpl#stereo";
const X42_DPL_BUNDLE: &str = "/usr/lib/lv2/dpl.lv2";

/// Two misbehaving LADSPA plugins (tests/fixtures/bad_plugins.c) built with cc.
fn bad_plugins(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let out = dir.join("bad_plugins.so");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad_plugins.c");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg("-lm")
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("SKIPPED: the crashing and NaN test plugins need a C compiler (cc)");
    }
    built.then_some(out)
}

/// Which of Debian's plugins are installed; says loudly what is skipped.
fn debian_plugins(test: &str) -> (bool, bool) {
    let ladspa = std::path::Path::new(SDK_AMP).exists();
    if !ladspa {
        eprintln!("SKIPPED: {test}: the LADSPA part needs {SDK_AMP} (ladspa-sdk)");
    }
    let lv2 = match quaver_daemon::plugins::lv2::available() {
        Ok(()) if std::path::Path::new(SWH_AMP_BUNDLE).exists() => true,
        Ok(()) => {
            eprintln!("SKIPPED: {test}: the LV2 part needs {SWH_AMP_BUNDLE} (swh-lv2)");
            false
        }
        Err(e) => {
            eprintln!("SKIPPED: {test}: the LV2 part needs liblilv (liblilv-0-0): {e}");
            false
        }
    };
    (ladspa, lv2)
}

/// The non-silent frames of `x` from the first to the last.
fn span(x: &[f32]) -> std::ops::Range<usize> {
    let first = x.iter().position(|v| v.abs() > 1e-4).unwrap_or(0);
    let last = x.iter().rposition(|v| v.abs() > 1e-4).unwrap_or(0);
    first..last + 1
}

/// Issue 36, acceptance 2 and 6: Debian's LADSPA amp and swh-lv2's amp on two sinks do
/// what their documentation says; a plugin that aborts in its constructor mutes its
/// sink with an error naming the signal, one that writes NaN and ∞ is silenced by the
/// chain's guard — and the daemon plays on every other sink meanwhile.
#[test]
fn plugins_on_sinks_and_plugins_that_crash_or_write_nan() {
    const TEST: &str = "plugins_on_sinks_and_plugins_that_crash_or_write_nan";
    if !on_path("paplay") {
        eprintln!("SKIPPED: {TEST} needs paplay (pulseaudio-utils)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(bad) = bad_plugins(dir.path()) else {
        return;
    };
    let (ladspa, lv2) = debian_plugins(TEST);
    let mut sinks = vec![];
    let mut chains = String::new();
    let mut add = |name: &str, filter: String| {
        sinks.push(name.to_string());
        chains += &format!("[[filters]]\nsink = \"{name}-sink\"\nchain = [{filter}]\n");
    };
    if ladspa {
        add(
            "ladspa",
            r#"{ type = "ladspa", plugin = "amp", label = "amp_stereo", controls = { gain = 2.0 } }"#.into(),
        );
    }
    if lv2 {
        add(
            "lv2",
            format!(r#"{{ type = "lv2", uri = "{SWH_AMP}", controls = {{ gain = -6.0 }} }}"#),
        );
    }
    let x42 = lv2 && std::path::Path::new(X42_DPL_BUNDLE).exists();
    if lv2 && !x42 {
        eprintln!("SKIPPED: {TEST}: the limiter part needs {X42_DPL_BUNDLE} (x42-plugins)");
    }
    if x42 {
        add(
            "x42",
            format!(
                r#"{{ type = "lv2", uri = "{X42_DPL}", controls = {{ gain = 12.0, threshold = -6.0 }} }}"#
            ),
        );
    }
    let b = bad.display();
    add(
        "crash",
        format!(r#"{{ type = "ladspa", plugin = "{b}", label = "abort_on_instantiate" }}"#),
    );
    add(
        "nan",
        format!(
            r#"{{ type = "ladspa", plugin = "{b}", label = "nan_switch", controls = {{ NaN = 1 }} }}"#
        ),
    );
    let devices: Vec<String> = sinks
        .iter()
        .map(|s| format!("\"file:{s}.wav,format=f32,name={s}\""))
        .collect();
    std::fs::write(
        dir.path().join("quaver.toml"),
        format!("[engine]\ndevices = [{}]\n\n{chains}", devices.join(", ")),
    )
    .unwrap();
    let mut d = Daemon::start_in(dir, &["--config", "quaver.toml"]);
    // The chains are put on before the PulseAudio socket opens; the log may lag.
    wait_until(WAIT, || d.log_text().contains("sink 'crash-sink' is muted"));
    let log = d.log_text();
    assert!(
        log.contains("label 'abort_on_instantiate' crashed (SIGABRT) while it was built and run in a probe process")
            && log.contains("sink 'crash-sink' is muted"),
        "{log}"
    );
    // A quarter second of 1 kHz to every sink at once, then to two after control changes.
    let frames = RATE / 4;
    let tone: Vec<f32> = (0..frames)
        .flat_map(|n| {
            let v = AMP * (2.0 * PI * 1000.0 * n as f64 / RATE as f64).sin() as f32;
            [v, v]
        })
        .collect();
    write_wav_f32(&d.path("tone.wav"), RATE as u32, 2, &tone);
    let play = |d: &Daemon, sinks: &[&str]| {
        let players: Vec<_> = sinks
            .iter()
            .map(|s| {
                pa(d, "paplay")
                    .args(["-d", &format!("{s}-sink"), "tone.wav"])
                    .current_dir(d.dir.path())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (p, s) in players.into_iter().zip(sinks) {
            let out = wait_output(p, WAIT);
            assert!(
                out.status.success(),
                "paplay to {s}: {}\n{}",
                text(&out),
                d.log_text()
            );
        }
    };
    let all: Vec<&str> = sinks.iter().map(String::as_str).collect();
    play(&d, &all);
    let mut c = d.connect("plugin-test");
    c.set_filter_control("nan-sink", 0, "NaN", 0.0).unwrap();
    let e = c
        .set_filter_control("nan-sink", 0, "gain", 1.0)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no such control: this filter has NaN"),
        "{e}"
    );
    let mut second = vec!["nan"];
    if ladspa {
        c.set_filter_control("ladspa-sink", 0, "Gain", 0.5).unwrap();
        let e = c
            .set_filter_control("ladspa-sink", 0, "gain", -1.0)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("Gain = -1: outside [0, inf], the range the plugin declares"),
            "{e}"
        );
        second.push("ladspa");
    }
    play(&d, &second);
    let path = |s: &str| d.path(&format!("{s}.wav"));
    let files: Vec<_> = sinks.iter().map(|s| (s.clone(), path(s))).collect();
    d.stop();
    let left = |p: &std::path::Path| -> Vec<f32> {
        let (_, x) = read_wav_f32(p);
        assert!(
            x.iter().all(|v| v.is_finite()),
            "NaN or ∞ reached {}",
            p.display()
        );
        x.iter().step_by(2).copied().collect()
    };
    let db = |x: f64| 20.0 * x.log10();
    let level = |x: &[f32]| db(amplitude(x, 1000.0) / AMP as f64);
    let check = |what: &str, got: f64, want: f64| {
        eprintln!("{what}: {got:.3} dB, expected {want:.3} dB");
        assert!(
            (got - want).abs() < 0.01,
            "{what}: {got} dB, expected {want} dB"
        );
    };
    for (s, p) in files {
        let x = left(&p);
        let on = span(&x);
        assert!(x.len() > frames, "{s}: only {} frames written", x.len());
        match s.as_str() {
            // First play at a gain of 2, the second at 0.5: measured well inside each.
            "ladspa" => {
                check(
                    "LADSPA amp_stereo, Gain 2",
                    level(&x[on.start + 2_400..on.start + 7_200]),
                    db(2.0),
                );
                check(
                    "LADSPA amp_stereo, Gain 0.5",
                    level(&x[on.end - 7_200..on.end - 2_400]),
                    db(0.5),
                );
            }
            "lv2" => check(
                "LV2 swh amp, gain -6 dB",
                level(&x[on.start + 2_400..on.start + 7_200]),
                -6.0,
            ),
            // −12 dBFS raised by 12 dB, limited to −6 dBFS: the peak never above it,
            // the tone at it (the gain ripples a little within each period).
            "x42" => {
                let peak = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                eprintln!(
                    "x42-dpl, threshold -6 dBFS: peak {:.3} dBFS",
                    db(peak as f64)
                );
                assert!(
                    db(peak as f64) <= -6.0 + 0.05,
                    "peak {peak} above the threshold"
                );
                let got = level(&x[on.start + 2_400..on.start + 7_200]);
                eprintln!("x42-dpl: the tone at {got:.3} dB, about +6.02 dB expected");
                assert!((got - db(2.0)).abs() < 0.5, "x42-dpl: {got} dB");
            }
            "crash" => assert!(x.iter().all(|&v| v == 0.0), "the muted sink played"),
            // All silence while the plugin wrote NaN and ∞ (its whole first play), then
            // the second play as it came.
            "nan" => {
                assert!(
                    on.len() < frames + 1_000,
                    "{s}: {} frames of sound, one play's worth expected",
                    on.len()
                );
                check(
                    "NaN plugin switched off",
                    level(&x[on.start + 2_400..on.start + 7_200]),
                    0.0,
                );
            }
            _ => unreachable!(),
        }
    }
}

/// A chain of plugins in the cycle allocates nothing: blocks of any size, control
/// changes (ramped and jumped), and NaN blocks that the guard silences.
#[test]
fn plugins_run_in_the_cycle_without_allocating() {
    use quaver_daemon::plugins::{LadspaSpec, Lv2Spec, PluginSpec};
    use quaver_dsp::filter::FilterChain;
    const TEST: &str = "plugins_run_in_the_cycle_without_allocating";
    let dir = tempfile::tempdir().unwrap();
    let Some(bad) = bad_plugins(dir.path()) else {
        return;
    };
    let (ladspa, lv2) = debian_plugins(TEST);
    let ladspa_spec = |plugin: &str, label: &str| {
        PluginSpec::Ladspa(LadspaSpec {
            plugin: plugin.into(),
            label: Some(label.into()),
            controls: Default::default(),
        })
    };
    let mut specs = vec![ladspa_spec(&bad.display().to_string(), "nan_switch")];
    if ladspa {
        specs.push(ladspa_spec("amp", "amp_mono"));
    }
    if lv2 {
        specs.push(PluginSpec::Lv2(Lv2Spec {
            uri: SWH_AMP.into(),
            controls: Default::default(),
        }));
    }
    if lv2 && std::path::Path::new(X42_DPL_BUNDLE).exists() {
        specs.push(PluginSpec::Lv2(Lv2Spec {
            uri: X42_DPL.into(),
            controls: Default::default(),
        }));
    }
    let filters = specs
        .iter()
        .map(|s| Box::new(s.build_here(2, 48_000).unwrap()) as Box<dyn quaver_dsp::filter::Filter>)
        .collect();
    let mut chain = FilterChain::new(filters);
    let mut buf = quaver_dsp::PlanarBuf::new(2, 4096);
    let sizes = [64usize, 1, 333, 1024, 4096, 256];
    let mut finite = true;
    assert_no_alloc::reset_violation_count();
    assert_no_alloc::assert_no_alloc(|| {
        for i in 0..3000 {
            let n = sizes[i % sizes.len()];
            for ch in 0..2 {
                for (k, s) in buf.channel_mut(ch)[..n].iter_mut().enumerate() {
                    *s = 0.25 * ((i * 7 + k) as f32 * 0.13).sin();
                }
            }
            match i {
                1000 => chain.set_control(0, "NaN", 1.0).unwrap(),
                1100 => chain.set_control(0, "nan", 0.0).unwrap(),
                _ if i % 50 == 0 && specs.len() > 1 => {
                    let r = chain.set_control(1, "gain", (i % 200) as f64 / 100.0 - 1.0);
                    assert!(r.is_ok() || i % 200 < 100);
                }
                _ => {}
            }
            chain.process(&mut buf.view_mut(n));
            finite &= quaver_dsp::filter::all_finite(&buf.view_mut(n));
        }
    });
    assert_eq!(
        assert_no_alloc::violation_count(),
        0,
        "allocations in the cycle"
    );
    assert!(finite, "NaN or ∞ left the chain");
    // The 100 blocks the plugin wrote NaN into; a limiter after it may carry the last
    // of it one block on through its lookahead.
    let resets = chain.nonfinite_resets();
    assert!((100..=101).contains(&resets), "{resets} blocks silenced");
}

/// A plugin that never returns from its constructor is killed at the probe's limit and
/// refused with the reason; a sound one passes the same probe.
#[test]
fn the_probe_kills_a_plugin_that_hangs() {
    use quaver_daemon::plugins::probe::probe_within;
    use quaver_daemon::plugins::{LadspaSpec, PluginSpec};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let Some(bad) = bad_plugins(dir.path()) else {
        return;
    };
    let spec = |label: &str| {
        PluginSpec::Ladspa(LadspaSpec {
            plugin: bad.display().to_string(),
            label: Some(label.into()),
            controls: Default::default(),
        })
    };
    let exe = quaverd_bin();
    let t = Instant::now();
    let e = probe_within(
        &exe,
        &spec("hang_on_instantiate"),
        2,
        48_000,
        Duration::from_millis(300),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("label 'hang_on_instantiate' did not finish building and running in a probe process within 0.3 s (killed)"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    probe_within(
        &exe,
        &spec("nan_switch"),
        2,
        48_000,
        Duration::from_secs(10),
    )
    .unwrap();
}

/// Not a check: the time per 1024 stereo frames of the built-in gain and of plugins
/// through the host (copies in and out included), for docs/dsp/plugins.md. Run by hand:
/// `cargo test -p quaver-daemon --test filters plugin_cost -- --ignored --nocapture`.
#[test]
#[ignore]
fn plugin_cost() {
    use quaver_daemon::plugins::{LadspaSpec, Lv2Spec, PluginSpec};
    use quaver_dsp::filter::{Filter, Gain};
    use std::time::Instant;
    // Fresh input every block (a copy of one tone block): the same block filtered
    // again and again would decay into subnormals and time those instead.
    fn best(mut f: impl FnMut(&mut quaver_dsp::PlanarBuf)) -> f64 {
        let tone: Vec<f32> = (0..1024).map(|k| 0.25 * (k as f32 * 0.13).sin()).collect();
        let mut buf = quaver_dsp::PlanarBuf::new(2, 1024);
        (0..20)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..200 {
                    for ch in 0..2 {
                        buf.channel_mut(ch)[..1024].copy_from_slice(&tone);
                    }
                    f(&mut buf);
                }
                t.elapsed().as_secs_f64() / 200.0
            })
            .fold(f64::MAX, f64::min)
    }
    let base = best(|_| {});
    let time = |name: &str, f: &mut dyn Filter| {
        let t = best(|b| f.process(&mut b.view_mut(1024))) - base;
        eprintln!("{name}: {:.2} µs per 1024 stereo frames", t * 1e6);
    };
    let (ladspa, lv2) = debian_plugins("plugin_cost");
    time("built-in Gain", &mut Gain::new(-3.0).unwrap());
    let l = |label: &str| {
        PluginSpec::Ladspa(LadspaSpec {
            plugin: "amp".into(),
            label: Some(label.into()),
            controls: Default::default(),
        })
    };
    if ladspa {
        time(
            "LADSPA amp_stereo",
            &mut l("amp_stereo").build_here(2, 48_000).unwrap(),
        );
        time(
            "LADSPA amp_mono, 2 instances",
            &mut l("amp_mono").build_here(2, 48_000).unwrap(),
        );
    }
    if lv2 {
        let v = |uri: &str| {
            PluginSpec::Lv2(Lv2Spec {
                uri: uri.into(),
                controls: Default::default(),
            })
            .build_here(2, 48_000)
            .unwrap()
        };
        time("LV2 swh amp, 2 instances", &mut v(SWH_AMP));
        if std::path::Path::new(X42_DPL_BUNDLE).exists() {
            time("LV2 x42-dpl stereo", &mut v(X42_DPL));
        }
    }
}
