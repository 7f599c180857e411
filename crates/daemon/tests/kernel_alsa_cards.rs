//! Card discovery against a real kernel ALSA, in the QEMU guest (`scripts/guest`) with
//! snd-aloop and snd-dummy: quaverd with no configuration opens both cards, `pactl`
//! lists them with profiles and ports and their sinks, a `paplay` to the loopback
//! card's sink arrives bit-exact at the other end of the cable, `set-card-profile`
//! switches a card's devices at run time (off lets another program open the card; back
//! on, the sink returns; a switch under a playing stream keeps it alive) and is
//! remembered for the next start, and a card whose PCM is busy, or whose PCMs refuse
//! every format, is logged while the other card serves. Skipped (loudly) where the rig cannot run.
//!
//! One guest boot runs every step (a boot costs ~10-30 s of both CPUs); the script
//! prints `=== STEP` sections that the assertions below read.

use quaver_testkit::guest::{self, Guest, section};
use quaver_testkit::{compare_recording, s16_values, write_wav_s16};
use std::path::Path;

/// The steps, run as root in the guest (`$OUT`: the shared directory; `$QUAVERD`).
const SCRIPT: &str = r#"
out=$OUT; quaverd=$QUAVERD; wav=$out/tone.wav
# Sockets cannot live on the 9p --out mount: the runtime and state stay in the guest.
private_runtime; priv=$PRIV
# Every wait is bounded: a client that hangs is killed and its exit status shows it.
pactl() { timeout 90 env pactl "$@"; }
paplay() { timeout 60 env paplay "$@"; }
start() { "$quaverd" --realtime-priority 0 2> "$1" & Q=$!; wait_server; } # log file
stop() { stop_pid "$Q"; echo "quaverd exit $RC"; }

start "$out/run1.log"
echo "=== CARDS"; pactl list cards
echo "=== SINKS"; pactl list short sinks
echo "=== SOURCES"; pactl list short sources
timeout 200 env pactl subscribe > "$priv/events.log" 2>&1 & SUB=$!
wait_subscribed "$priv/events.log"
echo "=== CHOOSE"
pactl set-card-profile alsa_card.Dummy off; echo "set exit $?"
pactl set-card-profile alsa_card.Dummy output:no-such; echo "bad set exit $?"
pactl list cards | grep -E "Name: alsa_card|Active Profile|quaver.profile.pending"
cat "$XDG_STATE_HOME/quaver/card-profiles.toml"
echo "=== OFF"
pactl list short sinks
# Off closes the card's PCMs: another program can open them.
timeout 90 aplay -q -D hw:Dummy -f S16_LE -r 48000 -c 2 -d 1 /dev/zero; echo "aplay exit $?"
echo "=== BACK"
pactl set-card-profile alsa_card.Dummy output:analog-stereo+input:analog-stereo; echo "back exit $?"
pactl list short sinks
pactl list cards | grep -E "Name: alsa_card|Active Profile"
paplay --device=Dummy.analog-stereo-sink "$wav"; echo "dummy paplay exit $?"
echo "=== SWITCH"
paplay --device=Loopback.analog-stereo-sink "$out/long.wav" & P=$!
for _ in $(seq 50); do pactl list short sink-inputs | grep -q . && break; sleep 0.2; done
pactl set-card-profile alsa_card.Loopback output:analog-stereo; echo "loop switch exit $?"
# The stream moves back onto the card's new sink once it exists: wait for that (bounded;
# the emulated guest is slow when the host is busy).
loop_idx=""
for _ in $(seq 50); do
    loop_idx=$(pactl list short sinks | awk -F'\t' '$2 == "Loopback.analog-stereo-sink" {print $1}')
    [ -n "$loop_idx" ] && pactl list short sink-inputs | awk -F'\t' -v s="$loop_idx" '$2 == s {f=1} END {exit !f}' && break
    sleep 0.2
done
kill -0 $P && echo "paplay alive"
echo "sinks:"; pactl list short sinks
echo "inputs:"; pactl list short sink-inputs
pactl list cards | grep -E "Name: alsa_card|Active Profile"
# Seen alive on the new sink: its work is done (the file outlasts any guest's pace).
kill $P 2>/dev/null; wait $P
pactl set-card-profile alsa_card.Loopback output:analog-stereo+input:analog-stereo; echo "loop back exit $?"
# Off again, for the restart below.
pactl set-card-profile alsa_card.Dummy off; echo "off again exit $?"
kill $SUB
echo "=== EVENTS"; cat "$priv/events.log"
stop
# Without the xruns: they only say the host was busy (the guest's timings mean nothing)
# and, in a CI run beside the suite, pushed the lines checked below out of the head.
echo "=== LOG1"; grep -E "WARN|ERROR" "$out/run1.log" | grep -v "xrun on device" | head -40

# The dummy card off (remembered above), the loopback card drives alone: the
# emulated CPU is too slow for a follower's resampling to keep the cable gapless.
# An xrun of the emulated card (the guest's clock stalls when the host is busy) breaks
# the cable's copy for reasons that are not quaverd's data path: up to three attempts
# while quaverd logs one; the last attempt's files are the ones checked.
for a in 1 2 3; do
    start "$out/run2.log"
    if [ $a = 1 ]; then
        echo "=== RESTART"; pactl list cards | grep -E "Name: alsa_card|Active Profile"
        pactl list short sinks; pactl list short sources
    fi
    fmt=$(grep -o "device Loopback.analog-stereo: ALSA 'hw:Loopback,0': playback [A-Z0-9_]*" "$out/run2.log" | awk '{print $NF}')
    timeout 30 arecord -q -D hw:Loopback,1,0 -f "$fmt" -r 48000 -c 2 -t raw -d 6 "$out/cable.raw" & A=$!
    sleep 1
    paplay --device=Loopback.analog-stereo-sink "$wav"; echo "paplay exit $?"
    wait $A; echo "arecord exit $?"
    stop
    x=$(grep -c "xrun on device" "$out/run2.log")
    echo "cable: attempt $a, $x xrun(s)"
    [ "$x" = 0 ] && break
done
echo "=== FORMAT"; echo "$fmt"
echo "=== LOG2"; grep -E "WARN|ERROR" "$out/run2.log" | grep -v "xrun on device" | head -40

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

# A profile whose PCM another program took while the card was off: the switch fails
# with an error to the client, logged with the card's name, and the card stays off.
start "$out/run4.log"
pactl set-card-profile alsa_card.Dummy off; echo "off exit $?"
aplay -q -D hw:Dummy,0 -f S16_LE -r 48000 -c 2 -t raw /dev/zero & B=$!
sleep 1
echo "=== REFUSED"
pactl set-card-profile alsa_card.Dummy output:analog-stereo+input:analog-stereo; echo "busy set exit $?"
pactl list cards | grep -E "Name: alsa_card|Active Profile"
pactl info > /dev/null; echo "info exit $?"
stop
kill "$B"; wait "$B"
echo "=== LOG4"; grep -E "WARN|ERROR" "$out/run4.log" | grep -v "xrun on device" | head -40

# A card whose PCMs refuse every format quaver converts: each playback side of the
# loopback card held by another program in S16_BE, so both capture sides offer that alone
# (the cable's two ends share one format) and both playback sides are busy.
rm -f "$XDG_STATE_HOME/quaver/card-profiles.toml"
modprobe -r snd-aloop && modprobe snd-aloop pcm_substreams=1
aplay -q -D hw:Loopback,0,0 -f S16_BE -r 48000 -c 2 -t raw /dev/zero & H1=$!
aplay -q -D hw:Loopback,1,0 -f S16_BE -r 48000 -c 2 -t raw /dev/zero & H2=$!
sleep 1
start "$out/run5.log"
echo "=== NOFORMAT"; pactl list short sinks; pactl list cards | grep -E "Name: alsa_card|Active Profile"
paplay --device=Dummy.analog-stereo-sink "$wav"; echo "noformat paplay exit $?"
stop
kill "$H1" "$H2"; wait "$H1" "$H2"
echo "=== LOG5"; grep -E "WARN|ERROR" "$out/run5.log" | grep -v "xrun on device" | head -40
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

/// `sig` between 0.5 s of silence on each side, as an s16 stereo 48 kHz WAV.
fn write_wav(path: &Path, sig: &[i16]) {
    let silence = [0i16; 48_000];
    write_wav_s16(path, 48_000, 2, &[&silence[..], sig, &silence[..]].concat());
}

/// The loopback card's cable carried the test signal bit-exact.
fn check_cable(out: &str, dir: &std::path::Path, sig: &[i16]) {
    let format = section(out, "FORMAT")
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let log2 = section(out, "LOG2");
    let raw = std::fs::read(dir.join("cable.raw")).unwrap();
    let got = s16_values(&raw, &format);
    let first = got.iter().position(|&v| v != 0.0).unwrap_or_else(|| {
        panic!(
            "only silence came through the cable ({} samples); quaverd's warnings:\n{log2}",
            got.len()
        )
    });
    assert_eq!(first % 2, 0, "the signal starts on a frame boundary");
    if let Err(e) = compare_recording(&got, sig, 0) {
        panic!("{e} ({format}); quaverd's warnings:\n{log2}");
    }
}

/// Runs the steps in `g`; `None` when the rig is not available here.
fn run_guest(g: &Guest) -> Option<String> {
    if !guest::skip_unless_available("kernel ALSA card tests") {
        return None;
    }
    let t0 = std::time::Instant::now();
    let run = g.run(SCRIPT);
    eprintln!("kernel_alsa_cards: guest run took {:?}", t0.elapsed());
    let text = run.ok().to_string();
    // Kept for reading after a failure.
    let _ = std::fs::write(
        quaver_testkit::target_dir().join("kernel_alsa_cards.out"),
        &text,
    );
    Some(text)
}

#[test]
fn quaverd_without_configuration_opens_every_card() {
    let quaverd = quaver_testkit::quaverd_bin();
    assert!(quaverd.exists(), "build the binaries first: {quaverd:?}");
    let g = Guest::new()
        .modules("snd-aloop snd-dummy")
        .timeout(std::time::Duration::from_secs(360))
        .env("QUAVERD", &quaverd);
    let sig = signal();
    write_wav(&g.path("tone.wav"), &sig);
    // 30 s of silence: still playing after the profile switch and the wait for the
    // stream to move, however slow the emulated guest (4 s ran out on a busy host);
    // stopped once it is seen on the new sink.
    write_wav(&g.path("long.wav"), &vec![0; 48_000 * 2 * 30]);
    let Some(out) = run_guest(&g) else {
        return;
    };
    let dir = g.out();

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

    // Bit-exact through the cable, unless every attempt saw the emulated card xrun
    // (the guest's clock stalled: the data path was not what failed). That is said
    // loudly and leaves the check to the other kernel-ALSA tests' clean runs.
    let clean = out
        .lines()
        .filter(|l| l.starts_with("cable: attempt"))
        .any(|l| l.ends_with(" 0 xrun(s)"));
    if clean {
        check_cable(&out, dir, &sig);
    } else {
        eprintln!(
            "INCONCLUSIVE: the bit-exact cable check saw an xrun of the emulated card in \
             each of 3 attempts (the host was too busy); not checked in this run"
        );
    }

    let choose = section(&out, "CHOOSE");
    assert!(choose.lines().any(|l| l == "set exit 0"), "{choose}");
    assert!(!choose.lines().any(|l| l == "bad set exit 0"), "{choose}");
    // Switched at once: nothing left pending.
    assert!(
        choose.contains("Name: alsa_card.Dummy\n\tActive Profile: off"),
        "{choose}"
    );
    assert!(!choose.contains("quaver.profile.pending"), "{choose}");
    assert!(choose.contains("\"alsa_card.Dummy\" = \"off\""), "{choose}");
    let log1 = section(&out, "LOG1");
    let off = section(&out, "OFF");
    assert!(
        !off.contains("Dummy."),
        "the dummy card's sink is still there:\n{off}"
    );
    assert!(off.contains("Loopback.analog-stereo-sink"), "{off}");
    assert!(
        off.lines().any(|l| l == "aplay exit 0"),
        "aplay could not open the card switched off:\n{off}\n{log1}"
    );
    let back = section(&out, "BACK");
    assert!(back.lines().any(|l| l == "back exit 0"), "{back}\n{log1}");
    assert!(back.contains("Dummy.analog-stereo-sink"), "{back}");
    assert!(
        back.contains(
            "Name: alsa_card.Dummy\n\tActive Profile: output:analog-stereo+input:analog-stereo"
        ),
        "{back}"
    );
    assert!(
        back.lines().any(|l| l == "dummy paplay exit 0"),
        "{back}\n{log1}"
    );
    let switch = section(&out, "SWITCH");
    assert!(
        switch.lines().any(|l| l == "loop switch exit 0"),
        "{switch}\n{log1}"
    );
    assert!(
        switch.lines().any(|l| l == "paplay alive"),
        "{switch}\n{log1}"
    );
    assert!(
        switch.contains("Name: alsa_card.Loopback\n\tActive Profile: output:analog-stereo\n"),
        "{switch}"
    );
    // The stream is back on the card's new sink (same name, new index).
    let sink_of = |name: &str| {
        switch
            .split("inputs:")
            .next()
            .unwrap()
            .lines()
            .find(|l| l.split('\t').nth(1) == Some(name))
            .and_then(|l| l.split('\t').next())
            .map(str::to_string)
    };
    let loop_sink = sink_of("Loopback.analog-stereo-sink")
        .unwrap_or_else(|| panic!("no loopback sink after the switch:\n{switch}"));
    let inputs = switch.split("inputs:").nth(1).unwrap();
    assert!(
        inputs
            .lines()
            .any(|l| l.split('\t').nth(1) == Some(loop_sink.as_str())),
        "the stream is not on the loopback card's new sink #{loop_sink}:\n{switch}"
    );
    assert!(switch.lines().any(|l| l == "loop back exit 0"), "{switch}");
    assert!(switch.lines().any(|l| l == "off again exit 0"), "{switch}");
    let events = section(&out, "EVENTS");
    assert!(events.contains("Event 'change' on card #1"), "{events}");
    assert!(events.contains("Event 'change' on card #0"), "{events}");
    assert!(events.contains("Event 'remove' on sink #"), "{events}");

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
    let refused = section(&out, "REFUSED");
    let log4 = section(&out, "LOG4");
    assert!(
        refused
            .lines()
            .any(|l| l.starts_with("busy set exit ") && l != "busy set exit 0"),
        "a switch to a busy PCM succeeded:\n{refused}\n{log4}"
    );
    assert!(
        refused.contains("Name: alsa_card.Dummy\n\tActive Profile: off"),
        "{refused}"
    );
    assert!(refused.lines().any(|l| l == "info exit 0"), "{refused}");
    assert!(
        log4.lines().any(|l| l.contains(
            "card 'Dummy' (Dummy): profile output:analog-stereo+input:analog-stereo did not open"
        ) && l.contains("going back to profile off")),
        "the failed switch is not logged with the card's name:\n{log4}"
    );
    let log = section(&out, "LOG3");
    assert!(
        log.lines().any(
            |l| l.contains("card 'Dummy' (Dummy) PCM hw:Dummy,0 playback") && l.contains("busy")
        ),
        "the busy PCM is not logged with its card:\n{log}"
    );

    // Every PCM of the loopback card refuses (busy, or big-endian only): it is logged PCM by
    // PCM with the card's name, it is off, and the dummy card serves.
    let noformat = section(&out, "NOFORMAT");
    let log5 = section(&out, "LOG5");
    assert!(
        noformat.contains("Dummy.analog-stereo-sink"),
        "{noformat}\n{log5}"
    );
    assert!(
        !noformat.contains("Loopback.analog-stereo"),
        "{noformat}\n{log5}"
    );
    assert!(
        noformat.contains("Name: alsa_card.Loopback\n\tActive Profile: off"),
        "{noformat}\n{log5}"
    );
    assert!(
        noformat.contains("noformat paplay exit 0"),
        "{noformat}\n{log5}"
    );
    for dev in [0, 1] {
        assert!(
            log5.lines().any(|l| l.contains(&format!(
                "card 'Loopback' ({}) PCM hw:Loopback,{dev} capture",
                "Loopback"
            )) && l.contains("accepts none of the formats")),
            "capture {dev}, held in S16_BE, is not logged as refusing every format:\n{log5}"
        );
        assert!(
            log5.lines().any(|l| l.contains(&format!(
                "card 'Loopback' (Loopback) PCM hw:Loopback,{dev} playback"
            )) && l.contains("busy")),
            "playback {dev} is not logged as busy:\n{log5}"
        );
    }
    assert!(!log5.contains("ERROR"), "{log5}");
}
