//! The echo-cancellation scene through quaverd's module-echo-cancel
//! (docs/dsp/echo-cancel.md): far-end and near-end speech from espeak-ng, the room
//! rendered by quaver_dsp::echo_scene, played and recorded with paplay and parec.

use crate::pulse_util::*;
use quaver_dsp::echo_scene::{FAR_TEXT, Layout, Measures, NEAR_TEXT, ROOM_MODULES, Scene};
use quaver_testkit::*;

/// `text` spoken by espeak-ng's `voice` at `wpm`, as 48 kHz mono samples (sox
/// converts espeak-ng's 22.05 kHz).
fn speech(d: &Daemon, voice: &str, wpm: &str, text: &str, name: &str) -> Vec<f32> {
    let raw = d.path(&format!("{name}-22k.wav"));
    let wav = d.path(&format!("{name}.wav"));
    let ok = std::process::Command::new("espeak-ng")
        .args(["-v", voice, "-s", wpm, "-w"])
        .arg(&raw)
        .arg(text)
        .status()
        .expect("espeak-ng runs");
    assert!(ok.success(), "espeak-ng failed");
    let ok = std::process::Command::new("sox")
        .arg(&raw)
        .args(["-r", "48000", "-e", "floating-point", "-b", "32"])
        .arg(&wav)
        .status()
        .expect("sox runs");
    assert!(ok.success(), "sox failed to convert {}", raw.display());
    read_wav_f32(&wav).1
}

/// Renders the scene and writes it as scene.wav for paplay: the far end on the left,
/// the microphone on the right.
pub fn render(d: &Daemon, layout: Layout) -> Scene {
    let far = speech(d, "en-us", "165", FAR_TEXT, "far");
    let near = speech(d, "en+f3", "150", NEAR_TEXT, "near");
    let scene = Scene::render(48_000, &far, &near, layout);
    let stereo: Vec<f32> = scene
        .far
        .iter()
        .zip(&scene.mic)
        .flat_map(|(f, m)| [*f, *m])
        .collect();
    write_wav_f32(&d.path("scene.wav"), 48_000, 2, &stereo);
    scene
}

/// The room in the graph ([`ROOM_MODULES`], as `quaver-bench echo` builds it).
/// Returns the echo-cancel module's index.
pub fn build_room(d: &Daemon) -> String {
    let mut module = None;
    for args in ROOM_MODULES {
        let index = load_module(d, args);
        if args[0] == "module-echo-cancel" {
            module = Some(index);
        }
    }
    module.expect("the room has an echo canceller")
}

/// Plays scene.wav into `scene` while parec records `source`; returns the
/// recording (48 kHz mono f32) once it holds the whole scene and half a second more.
pub fn play_and_record(d: &Daemon, scene: &Scene, source: &str) -> Vec<f32> {
    let outputs = || {
        pa_ok(d, &run_pa(d, "pactl", &["list", "short", "source-outputs"]))
            .lines()
            .count()
    };
    // The loopback's capture side is one already.
    let before = outputs();
    let rec = spawn_pa(
        d,
        "parec",
        &[
            "-d",
            source,
            "--format=float32le",
            "--rate=48000",
            "--channels=1",
            "--latency-msec=20",
            "--raw",
            "out.raw",
        ],
    );
    assert!(
        wait_until(WAIT, || outputs() == before + 1),
        "parec's stream did not appear"
    );
    pa_ok(d, &run_pa(d, "paplay", &["-d", "scene", "scene.wav"]));
    wait_for_file(d, "out.raw", ((scene.mic.len() + 24_000) * 4) as u64);
    let _ = interrupt(rec);
    let bytes = std::fs::read(d.path("out.raw")).expect("parec wrote out.raw");
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Finds the scene in `out` and measures it.
pub fn measure(d: &Daemon, scene: &Scene, out: &[f32]) -> Measures {
    let at = scene.find_in(out).unwrap_or_else(|| {
        panic!(
            "the recording ({} frames) is shorter than the scene\n{}",
            out.len(),
            d.log_text()
        )
    });
    scene.measure(&out[at..])
}
