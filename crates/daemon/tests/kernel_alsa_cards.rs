//! Card discovery against a real kernel ALSA, in the QEMU guest (`scripts/guest`) with
//! snd-aloop and snd-dummy: quaverd with no configuration opens both cards, `pactl`
//! lists them with profiles and ports and their sinks, a `paplay` to the loopback
//! card's sink arrives bit-exact at the other end of the cable, a chosen profile is
//! remembered and applied at the next start, and a card whose PCM is busy is logged
//! while the other card serves. Skipped (loudly) where the rig cannot run.
//!
//! One guest boot runs every step (a boot costs ~10-30 s of both CPUs); the script
//! prints `=== STEP` sections that the assertions below read.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The steps, run as root in the guest. `$1`: the --out directory; `$2`: quaverd.
const SCRIPT: &str = r#"
out=$1; quaverd=$2; wav=$out/tone.wav
# Sockets cannot live on the 9p --out mount: the runtime and state stay in the guest.
priv=$(mktemp -d)
export XDG_RUNTIME_DIR=$priv/run HOME=$priv/home XDG_STATE_HOME=$priv/state
mkdir -p "$XDG_RUNTIME_DIR" "$HOME"
# Every wait is bounded: a client that hangs is killed and its exit status shows it.
pactl() { timeout 20 env pactl "$@"; }
paplay() { timeout 60 env paplay "$@"; }
start() { # log file; waits (bounded) until pactl answers
    "$quaverd" --realtime-priority 0 2> "$1" & Q=$!
    for _ in $(seq 100); do pactl info >/dev/null 2>&1 && return 0; sleep 0.2; done
    echo "quaverd did not answer"; return 1
}
stop() { # SIGTERM, then (after 20 s) SIGKILL
    kill "$Q"; for _ in $(seq 100); do kill -0 "$Q" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$Q" 2>/dev/null; wait "$Q"; echo "quaverd exit $?"
}

start "$out/run1.log"
echo "=== CARDS"; pactl list cards
echo "=== SINKS"; pactl list short sinks
echo "=== SOURCES"; pactl list short sources
echo "=== CHOOSE"
pactl set-card-profile alsa_card.Dummy off; echo "set exit $?"
pactl set-card-profile alsa_card.Dummy output:no-such; echo "bad set exit $?"
pactl list cards | grep -E "Name: alsa_card|Active Profile|quaver.profile.pending"
cat "$XDG_STATE_HOME/quaver/card-profiles.toml"
stop

# The dummy card off (remembered above), the loopback card drives alone: the
# emulated CPU is too slow for a follower's resampling to keep the cable gapless.
start "$out/run2.log"
echo "=== RESTART"; pactl list cards | grep -E "Name: alsa_card|Active Profile"
pactl list short sinks; pactl list short sources
fmt=$(grep -o "device Loopback.analog-stereo: ALSA 'hw:Loopback,0': playback [A-Z0-9_]*" "$out/run2.log" | awk '{print $NF}')
echo "=== FORMAT"; echo "$fmt"
timeout 30 arecord -q -D hw:Loopback,1,0 -f "$fmt" -r 48000 -c 2 -t raw -d 6 "$out/cable.raw" & A=$!
sleep 1
paplay --device=Loopback.analog-stereo-sink "$wav"; echo "paplay exit $?"
wait $A; echo "arecord exit $?"
stop
echo "=== LOG2"; grep -E "WARN|ERROR" "$out/run2.log" | head -20

rm -f "$XDG_STATE_HOME/quaver/card-profiles.toml"
modprobe -r snd-dummy && modprobe snd-dummy pcm_substreams=1
aplay -q -D hw:Dummy,0 -f S16_LE -r 48000 -c 2 -t raw /dev/zero & B=$!
sleep 1
start "$out/run3.log"
echo "=== BUSY"; pactl list short sinks; pactl list cards | grep -E "Name: alsa_card|Active Profile"
paplay --device=Loopback.analog-stereo-sink "$wav"; echo "busy paplay exit $?"
stop
kill "$B"; wait "$B"
echo "=== LOG3"; cat "$out/run3.log"
echo "=== END"
"#;

/// 0.5 s of silence, 1 s of noise (different per channel), 0.5 s of silence, s16
/// stereo 48 kHz: the fades of a starting device or a new link act on silence only.
fn signal() -> Vec<i16> {
    let mut x: u32 = 0x1234_5678;
    let mut s = Vec::new();
    for _ in 0..48_000 {
        for _ in 0..2 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // Never 0, so the first frame of the signal shows where it starts.
            s.push(((x >> 16) as i16 / 2) | 1);
        }
    }
    s
}

fn write_wav(path: &Path, sig: &[i16]) {
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 48_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    let silence = std::iter::repeat_n(0i16, 48_000);
    for v in silence.clone().chain(sig.iter().copied()).chain(silence) {
        w.write_sample(v).unwrap();
    }
    w.finalize().unwrap();
}

/// What the cable carried, as samples scaled like s16 (exact for the formats quaverd
/// negotiates with snd-aloop), or why not.
fn decode(raw: &[u8], format: &str) -> Result<Vec<f64>, String> {
    Ok(match format {
        "FLOAT_LE" => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64 * 32768.0)
            .collect(),
        "S32_LE" => raw
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f64 / 65536.0)
            .collect(),
        "S16_LE" => raw
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        other => return Err(format!("unexpected format '{other}'")),
    })
}

fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = out
        .find(&format!("=== {name}\n"))
        .unwrap_or_else(|| panic!("no section {name} in the guest's output:\n{out}"));
    let rest = &out[start + name.len() + 5..];
    &rest[..rest.find("\n=== ").unwrap_or(rest.len())]
}

/// Runs the steps in the guest; `None` when the rig is not available here.
fn run_guest(dir: &Path, quaverd: &Path) -> Option<String> {
    let guest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/guest");
    let check = Command::new(&guest).arg("--check").output().unwrap();
    if check.status.code() == Some(3) {
        eprintln!(
            "SKIPPED: kernel ALSA card tests: {}",
            String::from_utf8_lossy(&check.stderr).trim()
        );
        return None;
    }
    let script = dir.join("steps.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    let out = Command::new(&guest)
        .args([
            "--modules",
            "snd-aloop snd-dummy",
            "--timeout",
            "300",
            "--out",
        ])
        .arg(dir)
        .args(["--", "bash"])
        .arg(&script)
        .arg(dir)
        .arg(quaverd)
        .output()
        .unwrap();
    // The guest's console ends lines with CR LF.
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    // Kept for reading after a failure.
    let _ = std::fs::write(
        quaver_testkit::target_dir().join("kernel_alsa_cards.out"),
        &text,
    );
    assert!(
        out.status.success(),
        "guest failed ({:?}): {}\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(text)
}

#[test]
fn quaverd_without_configuration_opens_every_card() {
    let quaverd = quaver_testkit::quaverd_bin();
    assert!(quaverd.exists(), "build the binaries first: {quaverd:?}");
    // Under /tmp: the guest sees it at the same path and --out makes it writable.
    let dir = tempfile::Builder::new()
        .prefix("quaver-cards-")
        .tempdir_in("/tmp")
        .unwrap();
    let sig = signal();
    write_wav(&dir.path().join("tone.wav"), &sig);
    let Some(out) = run_guest(dir.path(), &quaverd) else {
        return;
    };

    let cards = section(&out, "CARDS");
    for want in [
        "Name: alsa_card.Loopback",
        "Name: alsa_card.Dummy",
        "alsa.card_name = \"Loopback\"",
        "alsa.driver_name = \"Dummy\"",
        "output:analog-stereo+input:analog-stereo: Analog Stereo Output + Analog Stereo Input (sinks: 1, sources: 1, priority: 1515, available: yes)",
        "off: Off (sinks: 0, sources: 0",
        "Active Profile: output:analog-stereo+input:analog-stereo",
        "analog-output: Analog Output (type: Analog",
        "analog-input: Analog Input (type: Analog",
    ] {
        assert!(cards.contains(want), "'{want}' missing from:\n{cards}");
    }
    assert_eq!(cards.matches("Active Profile:").count(), 2, "{cards}");
    let sinks = section(&out, "SINKS");
    assert!(sinks.contains("Loopback.analog-stereo-sink"), "{sinks}");
    assert!(sinks.contains("Dummy.analog-stereo-sink"), "{sinks}");
    assert!(!sinks.contains("null-sink"), "{sinks}");
    let sources = section(&out, "SOURCES");
    assert!(sources.contains("Dummy.analog-stereo-source"), "{sources}");

    // Bit-exact through the cable.
    let format = section(&out, "FORMAT")
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let log2 = section(&out, "LOG2");
    let raw = std::fs::read(dir.path().join("cable.raw")).unwrap();
    let got = decode(&raw, &format).unwrap();
    let first = got.iter().position(|&v| v != 0.0).unwrap_or_else(|| {
        panic!(
            "only silence came through the cable ({} samples); quaverd's warnings:\n{log2}",
            got.len()
        )
    });
    assert_eq!(first % 2, 0, "the signal starts on a frame boundary");
    let tail = &got[first..];
    assert!(
        tail.len() >= sig.len(),
        "the cable carried {} samples of the {}",
        tail.len(),
        sig.len()
    );
    let wrong = sig
        .iter()
        .zip(tail)
        .filter(|(a, b)| **a as f64 != **b)
        .count();
    assert_eq!(
        wrong,
        0,
        "{wrong} of {} samples differ ({format}); quaverd's warnings:\n{log2}",
        sig.len()
    );

    let choose = section(&out, "CHOOSE");
    assert!(choose.lines().any(|l| l == "set exit 0"), "{choose}");
    assert!(!choose.lines().any(|l| l == "bad set exit 0"), "{choose}");
    assert!(
        choose.contains("quaver.profile.pending = \"off\""),
        "{choose}"
    );
    assert!(choose.contains("\"alsa_card.Dummy\" = \"off\""), "{choose}");

    let restart = section(&out, "RESTART");
    assert!(
        restart.contains("Name: alsa_card.Dummy\n\tActive Profile: off"),
        "{restart}"
    );
    assert!(!restart.contains("Dummy."), "{restart}");
    assert!(restart.contains("Loopback.analog-stereo-sink"), "{restart}");

    let busy = section(&out, "BUSY");
    assert!(busy.contains("Loopback.analog-stereo-sink"), "{busy}");
    assert!(!busy.contains("Dummy.analog-stereo-sink"), "{busy}");
    assert!(busy.contains("busy paplay exit 0"), "{busy}");
    let log = section(&out, "LOG3");
    assert!(
        log.lines().any(
            |l| l.contains("card 'Dummy' (Dummy) PCM hw:Dummy,0 playback") && l.contains("busy")
        ),
        "the busy PCM is not logged with its card:\n{log}"
    );
}
