//! End-to-end acceptance tests: a real quaverd, the real `quaver` CLI, real WAV files.

use quaver_testkit::*;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn file_sink_gets_a_48k_s16_file_bit_exact() {
    let mut d = Daemon::start(&["--device", "file:out.wav"]);
    let input = noise_s16(48000 * 2, 7, 20000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    ok(&d.run(&["play", "in.wav"]));
    let out_path = d.path("out.wav");
    d.stop();
    let (spec, out) = read_wav_s16(&out_path);
    assert_eq!((spec.sample_rate, spec.channels), (48000, 2));
    assert_contains_exactly(&out, &input, "48 kHz s16 file sink");
}

#[test]
fn resampled_sine_has_thd_n_below_minus_90_db() {
    let mut d = Daemon::start(&["--device", "file:out.wav,format=f32"]);
    let sine = quaver_dsp::analysis::sine(44100, 1000.0, 0.5, 44100 * 2);
    let stereo: Vec<f32> = sine.iter().flat_map(|&s| [s, s]).collect();
    write_wav_f32(&d.path("sine.wav"), 44100, 2, &stereo);
    ok(&d.run(&["play", "sine.wav"]));
    let out_path = d.path("out.wav");
    d.stop();
    let (spec, out) = read_wav_f32(&out_path);
    assert_eq!(spec.sample_rate, 48000);
    let left: Vec<f32> = out.iter().step_by(2).copied().collect();
    let start = onset(&left);
    // Skip the filter's settling at both ends; analyse a clean second.
    let seg = &left[start + 4800..start + 4800 + 48000];
    let thd = quaver_dsp::analysis::thd_n_db(seg, 48000, 1000.0);
    eprintln!("THD+N of 44.1→48 kHz 1 kHz sine: {thd:.1} dB");
    assert!(thd < -90.0, "THD+N {thd} dB");
}

#[test]
fn two_streams_sum_within_one_lsb() {
    let mut d = Daemon::start(&["--device", "file:out.wav"]);
    let n = 48000;
    // Left carries the signal; right carries one marker sample at each file's start,
    // with different amplitudes, so each stream's offset in the mix can be found.
    let a = noise_s16(n, 11, 8000);
    let b = noise_s16(n, 23, 8000);
    let mk = |sig: &[i16], marker: i16| -> Vec<i16> {
        sig.iter()
            .enumerate()
            .flat_map(|(i, &s)| [s, if i == 0 { marker } else { 0 }])
            .collect()
    };
    write_wav_s16(&d.path("a.wav"), 48000, 2, &mk(&a, 16000));
    write_wav_s16(&d.path("b.wav"), 48000, 2, &mk(&b, -8000));
    let pa = d
        .quaver()
        .args(["play", "a.wav"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pb = d
        .quaver()
        .args(["play", "b.wav"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ok(&wait_output(pa, WAIT));
    ok(&wait_output(pb, WAIT));
    let out_path = d.path("out.wav");
    d.stop();
    let (_, out) = read_wav_s16(&out_path);
    let left: Vec<i32> = out.iter().step_by(2).map(|&s| s as i32).collect();
    let right: Vec<i32> = out.iter().skip(1).step_by(2).map(|&s| s as i32).collect();
    let (oa, ob) = match (
        right.iter().position(|&s| s == 16000),
        right.iter().position(|&s| s == -8000),
    ) {
        (Some(x), Some(y)) => (x, y),
        _ => {
            let both = right
                .iter()
                .position(|&s| s == 8000)
                .expect("markers not found");
            (both, both)
        }
    };
    let mut worst = 0;
    for (i, &l) in left.iter().enumerate() {
        let va = i
            .checked_sub(oa)
            .and_then(|k| a.get(k))
            .map_or(0, |&s| s as i32);
        let vb = i
            .checked_sub(ob)
            .and_then(|k| b.get(k))
            .map_or(0, |&s| s as i32);
        worst = worst.max((l - va - vb).abs());
    }
    assert!(worst <= 1, "mix differs from the sum by {worst} LSB");
}

#[test]
fn recording_the_sink_monitor_equals_what_played() {
    let mut d = Daemon::start(&[]);
    let input = noise_s16(48000 * 2, 5, 15000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    let rec = d
        .quaver()
        .args([
            "record",
            "rec.wav",
            "--from",
            "null-sink",
            "--duration",
            "5",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the record stream exists so nothing of the playback is missed.
    let mut conn = d.connect("test");
    assert!(wait_until(WAIT, || conn
        .graph()
        .unwrap()
        .nodes
        .iter()
        .any(|n| n.kind == "record")));
    ok(&d.run(&["play", "in.wav"]));
    ok(&wait_output(rec, WAIT));
    let (spec, rec) = read_wav_s16(&d.path("rec.wav"));
    assert_eq!((spec.sample_rate, spec.channels), (48000, 2));
    assert_eq!(
        rec.len(),
        48000 * 5 * 2,
        "--duration gives exactly that many frames"
    );
    assert_contains_exactly(&rec, &input, "monitor recording");
    d.stop();
}

#[test]
fn killed_client_leaves_within_a_second_and_others_play_on() {
    let mut d = Daemon::start(&["--device", "file:out.wav"]);
    let secs = 4;
    // A steady stream: constant left channel, so any gap shows up as a zero.
    let steady: Vec<i16> = (0..48000 * secs).flat_map(|_| [8192i16, 0]).collect();
    write_wav_s16(&d.path("steady.wav"), 48000, 2, &steady);
    let victim: Vec<i16> = (0..48000 * 10).flat_map(|_| [0i16, 4096]).collect();
    write_wav_s16(&d.path("victim.wav"), 48000, 2, &victim);
    let steady_p = d
        .quaver()
        .args(["play", "steady.wav", "--latency-ms", "300"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut victim_p = d
        .quaver()
        .args(["play", "victim.wav"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut conn = d.connect("observer");
    let count_playback = |c: &mut quaver_client::Connection| {
        c.graph()
            .unwrap()
            .nodes
            .iter()
            .filter(|n| n.kind == "playback")
            .count()
    };
    assert!(wait_until(WAIT, || count_playback(&mut conn) == 2));
    std::thread::sleep(Duration::from_millis(1000));
    signal(victim_p.id(), libc::SIGKILL);
    let killed = std::time::Instant::now();
    let _ = victim_p.wait();
    assert!(wait_until(Duration::from_secs(1), || count_playback(
        &mut conn
    ) == 1));
    eprintln!("victim's node gone {:?} after SIGKILL", killed.elapsed());
    ok(&wait_output(steady_p, WAIT));
    let status = conn.status().unwrap();
    let out_path = d.path("out.wav");
    drop(conn);
    d.stop();
    assert_eq!(status.xruns, 0, "device xruns");
    let (_, out) = read_wav_s16(&out_path);
    let left: Vec<i16> = out.iter().step_by(2).copied().collect();
    let start = onset(&left);
    let played = &left[start..start + 48000 * secs];
    let gaps = played.iter().filter(|&&s| s != 8192).count();
    assert_eq!(
        gaps, 0,
        "the steady stream has {gaps} wrong samples (gap or glitch)"
    );
}

/// Context switches of every thread of `pid`, from /proc.
fn context_switches(pid: u32) -> u64 {
    switches(
        pid,
        &["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"],
    )
}

/// The sum of the /proc status fields `fields` over every thread of `pid`.
fn switches(pid: u32, fields: &[&str]) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let status =
            std::fs::read_to_string(task.unwrap().path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if fields.iter().any(|f| line.split(':').next() == Some(*f)) {
                total += line
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    total
}

#[test]
fn idle_daemon_suspends_and_stops_waking_up() {
    let mut d = Daemon::start(&["--suspend-timeout-ms", "300"]);
    let mut conn = d.connect("probe");
    assert!(wait_until(WAIT, || conn.status().unwrap().devices[0].state
        == "suspended"));
    drop(conn);
    std::thread::sleep(Duration::from_millis(300));
    let before = context_switches(d.pid());
    std::thread::sleep(Duration::from_secs(3));
    let after = context_switches(d.pid());
    let per_sec = (after - before) as f64 / 3.0;
    eprintln!("idle context switches: {per_sec:.2}/s");
    assert!(
        per_sec <= 1.0,
        "{per_sec} context switches per second while idle"
    );
    // It wakes up again for a stream.
    let input = noise_s16(4800 * 2, 3, 1000);
    write_wav_s16(&d.path("short.wav"), 48000, 2, &input);
    ok(&d.run(&["play", "short.wav"]));
    d.stop();
}

/// Suspend on idle with a card (the simulated one, and alsa-lib's `null` PCM through the
/// ALSA driver): after the timeout the device is closed and no thread of the daemon
/// wakes periodically; a stream reopens it and plays, and it closes again afterwards.
#[test]
fn an_idle_card_is_closed_and_reopened_by_the_next_stream() {
    let mut devices = vec!["sim"];
    match quaver_devices::alsa::available() {
        Ok(()) => devices.push("alsa:null"),
        Err(why) => eprintln!("alsa:null skipped: {why}"),
    }
    for device in devices {
        let mut d = Daemon::start(&["--device", device, "--suspend-timeout-ms", "300"]);
        let mut conn = d.connect("probe");
        let state =
            |c: &mut quaver_client::Connection| c.status().unwrap().devices[0].state.clone();
        assert!(
            wait_until(WAIT, || state(&mut conn) == "closed"),
            "{device}: {}",
            state(&mut conn)
        );
        drop(conn);
        let shown = d.run(&["status"]);
        ok(&shown);
        assert!(
            String::from_utf8_lossy(&shown.stdout).contains("closed (idle)"),
            "{device}: {}",
            String::from_utf8_lossy(&shown.stdout)
        );
        // Let the status request's own wakeups pass, then watch every thread.
        std::thread::sleep(Duration::from_millis(300));
        let before = switches(d.pid(), &["voluntary_ctxt_switches"]);
        std::thread::sleep(Duration::from_secs(3));
        let after = switches(d.pid(), &["voluntary_ctxt_switches"]);
        let per_sec = (after - before) as f64 / 3.0;
        eprintln!("{device}: closed when idle, {per_sec:.2} voluntary switches/s");
        assert!(
            per_sec <= 1.0,
            "{device}: {per_sec} voluntary context switches per second while closed"
        );
        let input = noise_s16(4800 * 2, 5, 1000);
        write_wav_s16(&d.path("short.wav"), 48000, 2, &input);
        ok(&d.run(&["play", "short.wav"]));
        let mut conn = d.connect("probe");
        assert!(wait_until(WAIT, || state(&mut conn) == "closed"));
        drop(conn);
        let log = d.stop();
        let name = if device == "sim" { "sim" } else { "alsa" };
        let closed = format!("device {name} closed (idle)");
        let reopened = format!("device {name} reopened");
        assert_eq!(log.matches(&closed).count(), 2, "{device}:\n{log}");
        assert_eq!(log.matches(&reopened).count(), 1, "{device}:\n{log}");
        assert!(!log.contains("no longer driven"), "{device}:\n{log}");
    }
}

#[test]
fn timing_statistics_count_every_cycle() {
    let mut d = Daemon::start(&["--quantum", "256"]);
    let mut conn = d.connect("timing");
    assert!(wait_until(WAIT, || conn.timing().unwrap().cycles > 50));
    let t = conn.timing().unwrap();
    let busy: u64 = t.busy_ns_log2.iter().sum();
    let late: u64 = t.lateness_ns_log2.iter().sum();
    // Each cycle lands in exactly one bucket of each histogram (the null sink sleeps to
    // a deadline, so it knows its lateness); a few cycles may run between the reads.
    assert!(
        busy + 1 >= t.cycles && busy <= t.cycles + 5,
        "{busy} vs {}",
        t.cycles
    );
    assert!(
        late >= t.cycles && late <= t.cycles + 5,
        "{late} vs {}",
        t.cycles
    );
    assert_eq!(t.quantum, 256);
    drop(conn);
    d.stop();
}

#[test]
fn unlink_and_relink_during_playback_ramp_without_clicks() {
    let mut d = Daemon::start(&["--device", "file:out.wav,format=f32"]);
    let level = 0.25f32;
    let dc: Vec<f32> = vec![level; 48000 * 2 * 4];
    write_wav_f32(&d.path("dc.wav"), 48000, 2, &dc);
    let player = d
        .quaver()
        .args(["play", "dc.wav", "--latency-ms", "300"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut conn = d.connect("patchbay");
    let mut node = String::new();
    assert!(wait_until(WAIT, || {
        let g = conn.graph().unwrap();
        match g.nodes.iter().find(|n| n.kind == "playback") {
            Some(n) => {
                node = n.name.clone();
                true
            }
            None => false,
        }
    }));
    std::thread::sleep(Duration::from_millis(700));
    ok(&d.run(&["unlink", &node, "file-sink"]));
    std::thread::sleep(Duration::from_millis(500));
    ok(&d.run(&["link", &node, "file-sink"]));
    ok(&wait_output(player, WAIT));
    let out_path = d.path("out.wav");
    drop(conn);
    d.stop();
    let (_, out) = read_wav_f32(&out_path);
    let left: Vec<f32> = out.iter().step_by(2).copied().collect();
    let start = onset(&left);
    let end = left.iter().rposition(|&s| s != 0.0).unwrap();
    let body = &left[start..end];
    // Two ramps (down, then up), each at most 256 frames long; no step anywhere larger
    // than one ramp increment.
    let max_step = body
        .windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(0.0, f32::max);
    assert!(
        max_step <= level / 256.0 + 1e-6,
        "click: a step of {max_step}"
    );
    let silent = body.iter().filter(|&&s| s == 0.0).count();
    assert!(
        silent > 4800,
        "the unlink produced no silence ({silent} frames)"
    );
    let partial = body.iter().filter(|&&s| s != 0.0 && s != level).count();
    assert!(
        partial <= 2 * 256,
        "ramps longer than expected: {partial} frames"
    );
    assert_eq!(
        body[0], level,
        "a new stream starts at full level, not ramped"
    );
}

#[test]
fn freewheel_file_sink_renders_everything_bit_exact() {
    let mut d = Daemon::start(&["--device", "file:out.wav,freewheel"]);
    let input = noise_s16(48000 * 2 * 5, 31, 9000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    let t0 = std::time::Instant::now();
    ok(&d.run(&["play", "in.wav"]));
    eprintln!("5 s rendered in {:?} (freewheel)", t0.elapsed());
    let out_path = d.path("out.wav");
    d.stop();
    let (_, out) = read_wav_s16(&out_path);
    // Freewheel must wait for the client, not skip ahead.
    assert_contains_exactly(&out, &input, "freewheel render");
}
