//! Real applications' PulseAudio outputs and inputs against a private quaverd: mpv,
//! ffmpeg and GStreamer play into a file sink and record from the null sink's monitor;
//! the audio that arrives is compared with what was sent.

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_testkit::*;

/// Skips the calling test (loudly) when an application is missing.
macro_rules! require_app {
    ($pkg:expr, $($t:expr),+) => {
        if !pulse_util::have(&[$($t),+]) {
            eprintln!(
                "SKIPPED {}: needs {:?} (apt-get install {}); not tested",
                module_path!(),
                [$($t),+],
                $pkg
            );
            return;
        }
    };
}

/// Largest sample difference between `input` and `out`, aligned on the first
/// non-zero sample (input starts with a non-zero sample). Panics if `out` is short.
fn max_diff(out: &[i16], input: &[i16], what: &str) -> i32 {
    let start = onset(out) - onset(input);
    assert!(
        out.len() >= start + input.len(),
        "{what}: output has {} samples after the onset, input {}",
        out.len() - start,
        input.len()
    );
    out[start..start + input.len()]
        .iter()
        .zip(input)
        .map(|(&a, &b)| (a as i32 - b as i32).abs())
        .max()
        .unwrap()
}

/// Normalised correlation of `input` with `out` at the onset alignment.
fn correlation(out: &[i16], input: &[i16]) -> f64 {
    let start = onset(out) - onset(input);
    let o = &out[start..(start + input.len()).min(out.len())];
    let (mut xy, mut xx, mut yy) = (0f64, 0f64, 0f64);
    for (&a, &b) in o.iter().zip(input) {
        let (a, b) = (a as f64, b as f64);
        xy += a * b;
        xx += a * a;
        yy += b * b;
    }
    xy / (xx * yy).sqrt()
}

/// Two seconds of stereo noise at 48 kHz whose first sample is non-zero.
fn test_input(seed: u64) -> Vec<i16> {
    let mut s = noise_s16(48000 * 2 * 2, seed, 16000);
    if s[0] == 0 {
        s[0] = 1000;
    }
    s
}

/// Runs an application (not a libpulse tool) aimed at `d`, bounded, and asserts success.
fn run_app(d: &Daemon, prog: &str, args: &[&str]) -> String {
    let child = pa(d, prog)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"));
    let out = wait_output(child, WAIT);
    assert!(
        out.status.success(),
        "{prog} failed ({}): {}\n--- quaverd log ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Plays `args` (which read in.wav) into a 48 kHz stereo s16 file sink and returns what
/// the sink wrote next to the input.
fn play_into_file(prog: &str, args: &[&str], seed: u64) -> (Vec<i16>, Vec<i16>) {
    play_padded_into_file(prog, args, seed, 0)
}

/// Like [`play_into_file`], with `pad` seconds of silence after the signal in in.wav
/// (for players that disconnect without draining, as PulseAudio then drops what is
/// still queued).
fn play_padded_into_file(prog: &str, args: &[&str], seed: u64, pad: usize) -> (Vec<i16>, Vec<i16>) {
    let mut d = pulse_util::start(&["--device", "file:out.wav"]);
    let input = test_input(seed);
    let mut file = input.clone();
    file.resize(input.len() + pad * 48000 * 2, 0);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &file);
    run_app(&d, prog, args);
    let out_path = d.path("out.wav");
    d.stop();
    let (spec, out) = read_wav_s16(&out_path);
    assert_eq!((spec.sample_rate, spec.channels), (48000, 2));
    (out, input)
}

#[test]
fn mpv_ao_pulse_plays_bit_exact() {
    require_app!("mpv", "mpv");
    let (out, input) = play_into_file(
        "mpv",
        &[
            "--ao=pulse",
            "--no-video",
            "--no-config",
            "--really-quiet",
            "--audio-format=s16",
            "in.wav",
        ],
        71,
    );
    assert_contains_exactly(&out, &input, "mpv --ao=pulse");
}

/// libcanberra, through which desktops play their event sounds (GTK and GNOME's
/// `canberra-gtk-play`, here under Xvfb since it opens a display): a file played as an
/// event sound arrives whole.
#[test]
fn canberra_gtk_play_plays_an_event_sound_bit_exact() {
    require_app!(
        "gnome-session-canberra libcanberra-pulse xvfb xauth",
        "canberra-gtk-play",
        "xvfb-run"
    );
    let (out, input) = play_into_file(
        "xvfb-run",
        &[
            "-a",
            "canberra-gtk-play",
            "-f",
            "in.wav",
            "-d",
            "quaver test sound",
        ],
        79,
    );
    assert_contains_exactly(&out, &input, "canberra-gtk-play");
}

#[test]
fn ffmpeg_pulse_output_plays_bit_exact() {
    require_app!("ffmpeg", "ffmpeg");
    // ffmpeg's pulse muxer disconnects at the end without draining: the silence after
    // the signal is what PulseAudio (and quaverd) drop.
    let (out, input) = play_padded_into_file(
        "ffmpeg",
        &[
            "-nostdin",
            "-loglevel",
            "error",
            "-re",
            "-i",
            "in.wav",
            "-f",
            "pulse",
            "default",
        ],
        72,
        3,
    );
    assert_contains_exactly(&out, &input, "ffmpeg -f pulse");
}

#[test]
fn gstreamer_pulsesink_plays_bit_exact() {
    require_app!(
        "gstreamer1.0-tools gstreamer1.0-pulseaudio",
        "gst-launch-1.0"
    );
    let (out, input) = play_into_file(
        "gst-launch-1.0",
        &[
            "-q",
            "filesrc",
            "location=in.wav",
            "!",
            "decodebin",
            "!",
            "audioconvert",
            "!",
            "pulsesink",
        ],
        73,
    );
    assert_contains_exactly(&out, &input, "gst pulsesink");
}

/// Starts a recorder on the null sink's monitor, plays in.wav with paplay once the
/// recorder's stream exists, lets the recorder finish, and returns what it wrote.
fn record_monitor(
    prog: &str,
    args: &[&str],
    env: &[(&str, &str)],
    seed: u64,
    stop: impl FnOnce(std::process::Child) -> std::process::Output,
) -> (Vec<i16>, Vec<i16>) {
    let input = test_input(seed);
    let got = record_monitor_of(prog, args, env, &input, (48000, 2), stop);
    (got, input)
}

/// [`record_monitor`] of a given 48 kHz stereo `input`, for a recorder that writes
/// rec.wav at `(rate, channels)`.
fn record_monitor_of(
    prog: &str,
    args: &[&str],
    env: &[(&str, &str)],
    input: &[i16],
    (rate, channels): (u32, u16),
    stop: impl FnOnce(std::process::Child) -> std::process::Output,
) -> Vec<i16> {
    let d = pulse_util::start(&["--device", "null"]);
    write_wav_s16(&d.path("in.wav"), 48000, 2, input);
    let rec = pa(&d, prog)
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"));
    assert!(
        wait_until(WAIT, || {
            let o = run_pa(&d, "pactl", &["list", "short", "source-outputs"]);
            pa_ok(&d, &o).lines().count() == 1
        }),
        "{prog}'s record stream did not appear\n{}",
        d.log_text()
    );
    pa_ok(&d, &run_pa(&d, "paplay", &["in.wav"]));
    let out = stop(rec);
    assert!(
        out.status.success(),
        "{prog} failed ({}): {}\n--- quaverd log ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    let (spec, got) = read_wav_s16(&d.path("rec.wav"));
    assert_eq!((spec.sample_rate, spec.channels), (rate, channels));
    got
}

/// A sine of `period` samples (never exactly zero), `frames` long, at amplitude 8000.
fn sine(frames: usize, period: f64) -> impl Iterator<Item = i16> {
    (0..frames)
        .map(move |i| (8000.0 * (std::f64::consts::TAU * (i as f64 + 0.5) / period).sin()) as i16)
}

/// What one channel of interleaved audio holds: the frames from its first to its last
/// loud sample, the sign changes between them, and the longest quiet run inside.
fn tone_of(samples: &[i16], channels: usize, ch: usize) -> (usize, usize, usize) {
    let x: Vec<i16> = samples.iter().skip(ch).step_by(channels).copied().collect();
    let loud = |v: &i16| v.abs() > 300;
    let Some(first) = x.iter().position(loud) else {
        return (0, 0, 0);
    };
    let last = x.iter().rposition(loud).unwrap();
    let x = &x[first..=last];
    let crossings = x.windows(2).filter(|w| (w[0] < 0) != (w[1] < 0)).count();
    let quiet = x.split(loud).map(<[i16]>::len).max().unwrap_or(0);
    (last - first, crossings, quiet)
}

/// Asserts `got` is `seconds` of a tone of `hz` at `rate`: its length within 2 %, its
/// sign changes (two a period) within 2 %, and no gap.
fn assert_tone(got: (usize, usize, usize), seconds: f64, hz: f64, rate: f64, what: &str) {
    let (span, crossings, quiet) = got;
    let want_span = seconds * rate;
    let want_crossings = 2.0 * hz * seconds;
    assert!(
        (span as f64 - want_span).abs() < 0.02 * want_span,
        "{what}: {span} frames, {want_span} expected"
    );
    assert!(
        (crossings as f64 - want_crossings).abs() < 0.02 * want_crossings,
        "{what}: {crossings} sign changes, {want_crossings} expected"
    );
    assert!(
        quiet < (rate / hz / 4.0) as usize,
        "{what}: a gap of {quiet} frames"
    );
}

/// mpv sends a 44.1 kHz 5.1 file as it is (`--audio-channels=5.1`): quaverd resamples
/// it to the 48 kHz sink and maps it down to stereo; a tone only in front-left and
/// another only in front-right come out on their own sides, at their pitch and length.
#[test]
fn mpv_plays_a_44k1_5_1_file_into_the_48k_stereo_sink() {
    require_app!("mpv", "mpv");
    let mut d = pulse_util::start(&["--device", "file:out.wav"]);
    let frames = 2 * 44100;
    let mut file = vec![0i16; frames * 6];
    for (i, v) in sine(frames, 100.0).enumerate() {
        file[i * 6] = v; // 441 Hz, front left
    }
    for (i, v) in sine(frames, 40.0).enumerate() {
        file[i * 6 + 1] = v; // 1102.5 Hz, front right
    }
    write_wav_s16(&d.path("in.wav"), 44100, 6, &file);
    run_app(
        &d,
        "mpv",
        &[
            "--ao=pulse",
            "--no-video",
            "--no-config",
            "--really-quiet",
            "--audio-format=s16",
            "--audio-channels=5.1",
            "in.wav",
        ],
    );
    let out_path = d.path("out.wav");
    let log = d.stop();
    assert!(
        log.lines()
            .any(|l| l.contains(" 6 ch ") && l.contains(" 44100 Hz → ")),
        "mpv did not send 44.1 kHz 5.1\n{log}"
    );
    let (spec, out) = read_wav_s16(&out_path);
    assert_eq!((spec.sample_rate, spec.channels), (48000, 2));
    assert_tone(tone_of(&out, 2, 0), 2.0, 441.0, 48000.0, "left");
    assert_tone(tone_of(&out, 2, 1), 2.0, 1102.5, 48000.0, "right");
}

/// ffmpeg records the monitor at 44.1 kHz mono while a 48 kHz stereo tone plays: quaverd
/// mixes the two channels down and resamples; the tone arrives at its pitch and length.
#[test]
fn ffmpeg_records_the_monitor_at_44k1_mono() {
    require_app!("ffmpeg", "ffmpeg");
    require_tools!("paplay", "pactl");
    // 1 kHz (48 samples a period) on both channels for two seconds.
    let input: Vec<i16> = sine(2 * 48000, 48.0).flat_map(|v| [v, v]).collect();
    let got = record_monitor_of(
        "ffmpeg",
        &ffmpeg_records_the_monitor("44100", "1"),
        &[],
        &input,
        (44100, 1),
        |c| wait_output(c, WAIT),
    );
    assert_tone(
        tone_of(&got, 1, 0),
        2.0,
        1000.0,
        44100.0,
        "ffmpeg 44.1 kHz mono",
    );
}

/// ffmpeg's arguments to record six seconds of the null sink's monitor into rec.wav at
/// `rate` Hz and `channels` channels, s16.
fn ffmpeg_records_the_monitor(rate: &'static str, channels: &'static str) -> [&'static str; 16] {
    [
        "-nostdin",
        "-loglevel",
        "error",
        "-f",
        "pulse",
        "-sample_rate",
        rate,
        "-channels",
        channels,
        "-i",
        "null-sink.monitor",
        "-t",
        "6",
        "-c:a",
        "pcm_s16le",
        "rec.wav",
    ]
}

#[test]
fn ffmpeg_pulse_input_records_the_monitor_bit_exact() {
    require_app!("ffmpeg", "ffmpeg");
    require_tools!("paplay", "pactl");
    // Six seconds: the two-second file is played once the recorder is running.
    let (got, input) = record_monitor(
        "ffmpeg",
        &ffmpeg_records_the_monitor("48000", "2"),
        &[],
        74,
        |c| wait_output(c, WAIT),
    );
    assert_contains_exactly(&got, &input, "ffmpeg -f pulse -i monitor");
}

#[test]
fn gstreamer_pulsesrc_records_the_monitor_bit_exact() {
    require_app!(
        "gstreamer1.0-tools gstreamer1.0-pulseaudio",
        "gst-launch-1.0"
    );
    require_tools!("paplay", "pactl");
    // 6 s at 48 kHz in buffers of 1024 frames: num-buffers=282.
    let (got, input) = record_monitor(
        "gst-launch-1.0",
        &[
            "-q",
            "pulsesrc",
            "device=null-sink.monitor",
            "num-buffers=282",
            "blocksize=4096",
            "!",
            "audio/x-raw,format=S16LE,rate=48000,channels=2",
            "!",
            "wavenc",
            "!",
            "filesink",
            "location=rec.wav",
        ],
        &[],
        75,
        |c| wait_output(c, WAIT),
    );
    let d = max_diff(&got, &input, "gst pulsesrc");
    assert!(
        d == 0,
        "gst pulsesrc: max difference {d}, correlation {}",
        correlation(&got, &input)
    );
}

/// pavucontrol under Xvfb: it connects (its stream-restore requests are served, its
/// device-manager ones get PulseAudio's "no such extension"), lists the playing stream, and opens its level
/// meters — 25 Hz peak-detecting record streams on the stream, the sink's monitor and
/// the source, the latter two named by index ("1") as pavucontrol does.
#[test]
fn pavucontrol_under_xvfb_opens_its_level_meters() {
    require_app!("pavucontrol xvfb xauth", "pavucontrol", "xvfb-run");
    require_tools!("paplay", "pactl");
    use std::os::unix::process::CommandExt;
    let d = pulse_util::start(&["--device", "null"]);
    let long = noise_s16(48000 * 2 * 30, 76, 8000);
    write_wav_s16(&d.path("long.wav"), 48000, 2, &long);
    let mut play = spawn_pa(&d, "paplay", &["long.wav"]);
    let mut pv = pa(&d, "xvfb-run");
    pv.args(["-a", "-s", "-screen 0 800x600x24", "pavucontrol", "--tab=1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    let pv = pv.spawn().expect("spawning xvfb-run pavucontrol");
    let count = |what: &str| {
        let o = run_pa(&d, "pactl", &["list", "short", what]);
        pa_ok(&d, &o).lines().count()
    };
    // paplay, pavucontrol and each pactl that asks.
    let met = wait_until(WAIT, || count("source-outputs") >= 3);
    let outputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "source-outputs"]));
    let clients = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "clients"]));
    // Ends xvfb-run, Xvfb and pavucontrol (their own process group) and paplay.
    signal(pv.id(), libc::SIGTERM);
    // SAFETY: plain syscall on the process group we started.
    unsafe { libc::kill(-(pv.id() as i32), libc::SIGTERM) };
    let out = wait_output(pv, WAIT);
    let _ = play.kill();
    let _ = play.wait();
    assert!(
        met,
        "pavucontrol's level meters did not appear:\n{outputs}\n{clients}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    assert!(clients.contains("pavucontrol"), "{clients}");
    assert_eq!(
        outputs.matches("float32le 1ch 25Hz").count(),
        3,
        "{outputs}"
    );
    // Streams carry their client's properties, so pavucontrol can hide its own meters.
    assert_eq!(
        outputs
            .matches("application.id = \"org.PulseAudio.pavucontrol\"")
            .count(),
        3,
        "{outputs}"
    );
}

#[test]
fn sox_records_the_monitor_bit_exact() {
    require_tools!("sox", "paplay", "pactl");
    let (got, input) = record_monitor(
        "sox",
        &[
            "-q",
            "-t",
            "pulseaudio",
            "-r",
            "48000",
            "-c",
            "2",
            "-b",
            "16",
            "-e",
            "signed",
            "null-sink.monitor",
            "rec.wav",
            "trim",
            "0",
            "6",
        ],
        &[],
        77,
        |c| wait_output(c, WAIT),
    );
    assert_contains_exactly(&got, &input, "sox -t pulseaudio (record)");
}

#[test]
fn arecord_through_the_alsa_pulse_plugin_records_bit_exact() {
    require_tools!("arecord", "paplay", "pactl");
    let plugin = ["x86_64", "aarch64"].iter().any(|a| {
        std::path::Path::new(&format!(
            "/usr/lib/{a}-linux-gnu/alsa-lib/libasound_module_pcm_pulse.so"
        ))
        .exists()
    });
    if !plugin {
        eprintln!(
            "SKIPPED arecord: needs the ALSA pulse plugin (apt-get install libasound2-plugins)"
        );
        return;
    }
    // The plugin records from libpulse's default source; PULSE_SOURCE picks the monitor.
    let (got, input) = record_monitor(
        "arecord",
        &[
            "-q", "-D", "pulse", "-f", "S16_LE", "-r", "48000", "-c", "2", "-d", "6", "rec.wav",
        ],
        &[("PULSE_SOURCE", "null-sink.monitor")],
        78,
        |c| wait_output(c, WAIT),
    );
    assert_contains_exactly(&got, &input, "arecord -D pulse");
}

/// Runs python3-pulsectl's own test suite (`DummyTests`, written against a PulseAudio
/// with two null sinks and TCP listeners) on quaverd instead, through the hook it has
/// for a server started by hand (`PA_TMPDIR`, `PA_REUSE`). `test_cli` is left out: it
/// drives PulseAudio's text command protocol (`pacmd`), which quaverd does not speak.
const PULSECTL_RUNNER: &str = r#"
import os, sys, unittest
from pulsectl import _pulsectl as c
from pulsectl.tests import test_with_dummy_instance as t
# get_peak_sample lets its ctypes read callback be freed when it returns, while
# libpulse still holds it for a stream whose disconnect is in flight: record data
# already on its way then runs whatever took the callback's place (the next call's),
# and a peak of the old stream lands in the new one (0.88 for a nonexistent source,
# once in seven runs). Keeping every callback alive keeps the suite's peak test.
kept = []
set_read = c.pa.stream_set_read_callback
def keep_read_callback(s, cb, data):
    kept.append(cb)
    return set_read(s, cb, data)
c.pa.stream_set_read_callback = keep_read_callback
setup = t.DummyTests.setUpClass.__func__
def set_up(cls):
    setup(cls)
    # With PA_TMPDIR the suite leaves tmp_dir unset, and its paplay needs it.
    cls.tmp_dir = os.environ['PA_TMPDIR']
t.DummyTests.setUpClass = classmethod(set_up)
names = [n for n in unittest.defaultTestLoader.getTestCaseNames(t.DummyTests) if n != 'test_cli']
suite = unittest.TestSuite(t.DummyTests(n) for n in names)
result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
print('RAN', result.testsRun)
sys.exit(0 if result.wasSuccessful() else 1)
"#;

#[test]
fn python_pulsectl_passes_its_own_test_suite() {
    require_tools!("pactl", "paplay");
    let python = "/usr/bin/python3";
    let have_pulsectl = std::process::Command::new(python)
        .args(["-c", "import pulsectl.tests.test_with_dummy_instance"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_pulsectl {
        eprintln!(
            "SKIPPED {}: needs python3-pulsectl (apt-get install python3-pulsectl); not tested",
            module_path!()
        );
        return;
    }
    // The suite's PulseAudio: two sinks with their monitors and nothing else.
    let d = pulse_util::start(&["--device", "null:capture=off"]);
    pa_ok(
        &d,
        &run_pa(
            &d,
            "pactl",
            &["load-module", "module-null-sink", "sink_name=null2"],
        ),
    );
    let tcp4 = free_port("127.0.0.1").expect("a free IPv4 port");
    pa_ok(
        &d,
        &run_pa(
            &d,
            "pactl",
            &[
                "load-module",
                "module-native-protocol-tcp",
                "auth-anonymous=true",
                "listen=127.0.0.1",
                &format!("port={tcp4}"),
            ],
        ),
    );
    // IPv6 where the machine has it; port 0 tells the suite to skip it.
    let tcp6 = free_port("::1")
        .filter(|p| {
            run_pa(
                &d,
                "pactl",
                &[
                    "load-module",
                    "module-native-protocol-tcp",
                    "auth-anonymous=true",
                    "listen=::1",
                    &format!("port={p}"),
                ],
            )
            .status
            .success()
        })
        .unwrap_or(0);
    // Its slow-network proxy listens on the third port; the fourth is test_cli's.
    let delay = free_port("127.0.0.1").expect("a free port");
    let runner = d.path("run_pulsectl.py");
    std::fs::write(&runner, PULSECTL_RUNNER).unwrap();
    let tmp = d.runtime.parent().unwrap().to_path_buf();
    let child = pa(&d, python)
        .arg(&runner)
        .env("PA_TMPDIR", &tmp)
        .env("PA_REUSE", format!("{tcp4}:{tcp6}:{delay}:0"))
        // Also the peak-sample test the suite only runs for its developers.
        .env("DEV_TESTS", "1")
        .env_remove("PULSE_SERVER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning python3");
    let out = wait_output(child, std::time::Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pulsectl's suite failed ({}):\n{stdout}\n{stderr}\n--- quaverd log ---\n{}",
        out.status,
        d.log_text()
    );
    assert!(stdout.contains("RAN 13"), "{stdout}\n{stderr}");
}

/// The rule file (docs/policy/rules.md), read again on SIGHUP: a rule sending
/// `application.name = "mpv"` to the second sink moves mpv there as it connects, while
/// paplay, which no rule names, goes to the default sink; a broken file sent with
/// SIGHUP is logged and the rules in force stay.
#[test]
fn a_rule_sends_mpv_to_the_second_sink_and_sighup_reloads_it() {
    require_app!("mpv", "mpv");
    require_tools!("paplay", "pactl");
    let mut d = pulse_util::start(&["--device", "file:a.wav", "--device", "file:b.wav"]);
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]));
    let names: Vec<&str> = sinks.lines().filter_map(|l| l.split('\t').nth(1)).collect();
    assert_eq!(names.len(), 2, "{sinks}");
    let rules = d.path("config/quaver/rules.toml");
    std::fs::create_dir_all(rules.parent().unwrap()).unwrap();
    let rule = format!(
        "# mpv plays on the second sink\n[[rule]]\nmatch = {{ \"application.name\" = \"mpv\" }}\ntarget = \"{}\"\n",
        names[1]
    );
    std::fs::write(&rules, &rule).unwrap();
    let reloaded = |what: &str| {
        let n = d.log_text().matches(what).count();
        signal(d.pid(), libc::SIGHUP);
        assert!(
            wait_until(WAIT, || d.log_text().matches(what).count() > n),
            "no {what:?} after SIGHUP\n{}",
            d.log_text()
        );
    };
    reloaded("SIGHUP: 1 rule(s)");
    // A typo: logged with its line, and the rule in force stays.
    std::fs::write(&rules, rule.replace("target", "targte")).unwrap();
    reloaded("the rules in force stay");
    assert!(d.log_text().contains("line 4"), "{}", d.log_text());
    let music = noise_s16(48000, 73, 20000);
    write_wav_s16(&d.path("mpv.wav"), 48000, 2, &music);
    let other = noise_s16(48000, 74, 20000);
    write_wav_s16(&d.path("paplay.wav"), 48000, 2, &other);
    run_app(
        &d,
        "mpv",
        &[
            "--ao=pulse",
            "--no-video",
            "--no-config",
            "--really-quiet",
            "--audio-format=s16",
            "mpv.wav",
        ],
    );
    pa_ok(&d, &run_pa(&d, "paplay", &["paplay.wav"]));
    let (a_path, b_path) = (d.path("a.wav"), d.path("b.wav"));
    d.stop();
    let (_, a) = read_wav_s16(&a_path);
    let (_, b) = read_wav_s16(&b_path);
    assert_contains_exactly(&b, &music, "mpv on the second sink");
    assert_contains_exactly(&a, &other, "paplay on the default sink");
}
