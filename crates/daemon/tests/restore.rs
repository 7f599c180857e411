//! Stream restore across front-ends: one memory in the daemon, so a volume, mute or
//! device set on a native stream comes back for the next native stream of that kind,
//! and a PulseAudio stream and a native one of the same application share it.

use quaver_protocol::message::NodeInfo;
use quaver_testkit::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A WAV of `seconds` of quiet noise in the daemon's directory, long enough to stay
/// playing through each step; players are stopped by PID.
fn long_wav(d: &Daemon, name: &str, seconds: usize) -> PathBuf {
    let path = d.path(name);
    write_wav_s16(&path, 48_000, 2, &noise_s16(48_000 * 2 * seconds, 5, 100));
    path
}

fn play(d: &Daemon, file: &Path, extra: &[&str]) -> Child {
    d.quaver()
        .arg("play")
        .arg(file)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning quaver play")
}

/// The playback stream nodes now in the graph.
fn playback_nodes(d: &Daemon) -> Vec<NodeInfo> {
    let mut c = d.connect("restore-test");
    c.graph()
        .expect("graph")
        .nodes
        .into_iter()
        .filter(|n| n.kind == "playback")
        .collect()
}

/// Waits (bounded) for exactly one playback stream and returns it.
fn wait_one_stream(d: &Daemon) -> NodeInfo {
    let mut found = None;
    assert!(
        wait_until(WAIT, || {
            let mut nodes = playback_nodes(d);
            found = (nodes.len() == 1).then(|| nodes.remove(0));
            found.is_some()
        }),
        "no single playback stream: {:?}\n{}",
        playback_nodes(d),
        d.log_text()
    );
    found.unwrap()
}

fn wait_no_stream(d: &Daemon) {
    assert!(
        wait_until(WAIT, || playback_nodes(d).is_empty()),
        "a playback stream stayed: {:?}",
        playback_nodes(d)
    );
}

fn stop(d: &Daemon, child: Child) {
    kill(child);
    wait_no_stream(d);
}

#[test]
fn a_native_streams_volume_and_mute_come_back_for_its_kind() {
    let mut d = Daemon::start(&[]);
    let wav = long_wav(&d, "tone.wav", 30);

    let player = play(&d, &wav, &[]);
    let first = wait_one_stream(&d);
    assert_eq!(
        (first.volume, first.mute),
        (1.0, false),
        "nothing remembered yet"
    );
    ok(&d.run(&["volume", &first.name, "30%"]));
    stop(&d, player);

    let player = play(&d, &wav, &[]);
    let second = wait_one_stream(&d);
    assert!((second.volume - 0.3).abs() < 1e-6, "{second:?}");
    assert!(!second.mute);
    ok(&d.run(&["volume", &second.name, "--mute"]));
    stop(&d, player);

    let player = play(&d, &wav, &[]);
    let third = wait_one_stream(&d);
    assert!((third.volume - 0.3).abs() < 1e-6 && third.mute, "{third:?}");
    stop(&d, player);

    // A stream that asks for its own volume keeps it; the mute still comes back.
    let player = play(&d, &wav, &["--volume", "0.8"]);
    let own = wait_one_stream(&d);
    assert!((own.volume - 0.8).abs() < 1e-6 && own.mute, "{own:?}");
    stop(&d, player);
    d.stop();
}

/// A libpulse tool aimed at `d`: PULSE_SERVER set, autospawn off, HOME inside the test's
/// directory.
fn pa(d: &Daemon, prog: &str) -> Command {
    let mut c = d.pulse_client(prog);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn pactl(d: &Daemon, args: &[&str]) -> String {
    let child = pa(d, "pactl").args(args).spawn().expect("spawning pactl");
    let out = wait_output(child, WAIT);
    assert!(
        out.status.success(),
        "pactl {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn pulseaudio_and_native_streams_of_one_application_share_their_memory() {
    if !(on_path("pactl") && on_path("paplay")) {
        eprintln!("skipped: needs pactl and paplay");
        return;
    }
    let mut d = Daemon::start(&["--device", "null", "--device", "file:b.wav"]);
    let sock = d.runtime.parent().unwrap().join("pulse").join("native");
    assert!(
        wait_until(WAIT, || std::os::unix::net::UnixStream::connect(&sock)
            .is_ok()),
        "no PulseAudio socket\n{}",
        d.log_text()
    );
    let wav = long_wav(&d, "long.wav", 30);
    // The native CLI's streams are of kind "application-name:quaver" (its client
    // name); this PulseAudio stream names the same application.
    let app = "--property=application.name=quaver";

    let sinks: Vec<String> = d
        .connect("restore-test")
        .graph()
        .unwrap()
        .nodes
        .into_iter()
        .filter(|n| n.kind == "sink")
        .map(|n| n.name)
        .collect();
    assert_eq!(sinks.len(), 2, "{sinks:?}");
    let second = sinks[1].clone();

    // PulseAudio → native: 50 % in PulseAudio's cubic scale is a linear 0.125, and the
    // move to the second sink is remembered too.
    let player = pa(&d, "paplay")
        .args([app, wav.to_str().unwrap()])
        .spawn()
        .expect("spawning paplay");
    wait_one_stream(&d);
    let index = pactl(&d, &["list", "short", "sink-inputs"])
        .split('\t')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    pactl(&d, &["set-sink-input-volume", &index, "50%"]);
    pactl(&d, &["move-sink-input", &index, &second]);
    stop(&d, player);
    let player = play(&d, &wav, &[]);
    let native = wait_one_stream(&d);
    assert!((native.volume - 0.125).abs() < 1e-4, "{native:?}");
    let links = d.connect("restore-test").graph().unwrap().links;
    let targets: Vec<&str> = links
        .iter()
        .filter(|l| l.output_node == native.name)
        .map(|l| l.input_node.as_str())
        .collect();
    assert!(
        !targets.is_empty() && targets.iter().all(|t| *t == second),
        "{targets:?} {links:?}"
    );

    // Native → PulseAudio: a linear 0.216 is 60 % in PulseAudio's scale.
    ok(&d.run(&["volume", &native.name, "0.216"]));
    stop(&d, player);
    let player = pa(&d, "paplay")
        .args([app, wav.to_str().unwrap()])
        .spawn()
        .expect("spawning paplay");
    let pulse = wait_one_stream(&d);
    assert!((pulse.volume - 0.216).abs() < 1e-3, "{pulse:?}");
    let list = pactl(&d, &["list", "sink-inputs"]);
    assert!(list.contains("60%"), "{list}");
    stop(&d, player);
    d.stop();
}
