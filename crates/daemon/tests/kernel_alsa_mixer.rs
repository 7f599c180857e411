//! Hardware volume on real kernel ALSA, in the QEMU guest (`scripts/guest`): quaverd
//! drives snd-dummy's Master in dB from `pactl`, follows `amixer` (shown in
//! `pactl list sinks` and as a subscription event), sees a user-space "Headphone Jack"
//! plugged and unplugged, and keeps snd-aloop (no dB-capable element) on software
//! volume, bit-exact at 100 %. One guest boot for all of it (each costs ~1 min of both
//! CPUs). Skipped, loudly, where the rig cannot run (`scripts/guest --check` exits 3).

use quaver_testkit::guest::{self, Guest};
use quaver_testkit::{assert_contains_exactly, noise_s16, quaver_bin, quaverd_bin, write_wav_s16};
use std::path::Path;

/// What runs in the guest. Every wait is bounded; processes are stopped by PID.
/// Environment: `$Q` quaverd, `$OUT` the shared directory, `$WAV` the file to play,
/// `$QC` the quaver CLI.
const SCRIPT: &str = r#"
set -u
private_runtime
wait_for() {  # FILE PATTERN: up to 10 s
    for _ in $(seq 50); do grep -q "$2" "$1" && return 0; sleep 0.2; done; return 1
}
# Idle suspend off: its state events would mix with the volume events.
QARGS="--suspend-timeout-ms 0"

# 1. snd-dummy: Master has a dB range (-45..0 dB, 0.3 dB steps) and no playback switch;
#    Mic (the source's) the same range and a capture switch.
amixer -q -c Dummy sset Master -- -30dB
amixer -q -c Dummy sset Mic nocap
"$Q" $QARGS --device alsa:hw:Dummy,capture=on > "$OUT/dummy.log" 2>&1 & QP=$!
wait_server || exit 10
pactl list sinks > "$OUT/sinks-start.txt"
pactl set-sink-volume @DEFAULT_SINK@ 50%
amixer -c Dummy sget Master > "$OUT/master-50.txt"
pactl set-sink-volume @DEFAULT_SINK@ 100%
amixer -c Dummy sget Master > "$OUT/master-100.txt"
# The native protocol reaches the same volume (the engine does the split).
"$QC" volume alsa-sink -6dB > "$OUT/native-volume.txt" 2>&1
amixer -c Dummy sget Master > "$OUT/master-native.txt"
pactl list sources > "$OUT/sources-start.txt"
pactl set-source-volume alsa-source 50%
pactl set-source-mute alsa-source 0
amixer -c Dummy sget Mic > "$OUT/mic-unmuted.txt"
pactl set-source-mute alsa-source 1
amixer -c Dummy sget Mic > "$OUT/mic-muted.txt"
pactl subscribe > "$OUT/subscribe.txt" 2>&1 & SP=$!
sleep 2
cp "$OUT/subscribe.txt" "$OUT/subscribe-before.txt"
amixer -q -c Dummy sset Master -- -21dB
wait_for "$OUT/subscribe.txt" "'change' on sink" || echo "no sink change event in 10 s"
pactl list sinks > "$OUT/sinks-amixer.txt"
kill $SP; wait $SP
# Jacks: a user-space "Headphone Jack" (interface CARD, BOOLEAN) added, plugged, unplugged.
python3 - <<'PY' > "$OUT/jack.txt" 2>&1
import ctypes, time
a = ctypes.CDLL("libasound.so.2")
ctl = ctypes.c_void_p()
assert a.snd_ctl_open(ctypes.byref(ctl), b"hw:Dummy", 0) == 0
eid = ctypes.c_void_p()
a.snd_ctl_elem_id_malloc(ctypes.byref(eid))
a.snd_ctl_elem_id_set_interface(eid, 0)  # SND_CTL_ELEM_IFACE_CARD
a.snd_ctl_elem_id_set_name(eid, b"Headphone Jack")
print("snd_ctl_elem_add_boolean", a.snd_ctl_elem_add_boolean(ctl, eid, 1), flush=True)
val = ctypes.c_void_p()
a.snd_ctl_elem_value_malloc(ctypes.byref(val))
a.snd_ctl_elem_value_set_id(val, eid)
for on in (1, 0):
    time.sleep(1)
    a.snd_ctl_elem_value_set_boolean(val, 0, ctypes.c_long(on))
    print("snd_ctl_elem_write", on, a.snd_ctl_elem_write(ctl, val), flush=True)
PY
for _ in $(seq 50); do
    [ "$(grep -c "jack 'Headphone Jack'" "$OUT/dummy.log")" -ge 3 ] && break; sleep 0.2
done
# The watch thread sleeps in poll: no wakeup while nothing changes.
T=$(dirname "$(grep -lx "mixer hw:Dummy" /proc/$QP/task/*/comm | head -1)")
switches() { awk '/^voluntary_ctxt_switches/ {print $2}' "$T/status"; }
c1=$(switches); sleep 3; c2=$(switches)
echo "$T $c1 $c2" > "$OUT/mixer-wakeups.txt"
stop_pid $QP; echo $RC > "$OUT/dummy.rc"

# 2. snd-aloop has no mixer elements; give it a "Master Playback Volume" without dB
#    information (a user-space element) so the no-dB path is taken too.
python3 - <<'PY' > "$OUT/add-element.txt" 2>&1
import ctypes
a = ctypes.CDLL("libasound.so.2")
ctl = ctypes.c_void_p()
assert a.snd_ctl_open(ctypes.byref(ctl), b"hw:Loopback", 0) == 0
eid = ctypes.c_void_p()
a.snd_ctl_elem_id_malloc(ctypes.byref(eid))
a.snd_ctl_elem_id_set_interface(eid, 2)  # SND_CTL_ELEM_IFACE_MIXER
a.snd_ctl_elem_id_set_name(eid, b"Master Playback Volume")
rc = a.snd_ctl_elem_add_integer(ctl, eid, 2, ctypes.c_long(0), ctypes.c_long(100), ctypes.c_long(1))
print("snd_ctl_elem_add_integer", rc)
PY
# A 100 ms safety margin: the emulated guest is slow, and an underrun (a gap of silence)
# is not what this test is about.
"$Q" $QARGS --device alsa:hw:Loopback,0,0,format=s16,margin=4800 > "$OUT/loop.log" 2>&1 & QP=$!
wait_server || exit 11
pactl list sinks > "$OUT/sinks-loop.txt"
arecord -q -D hw:Loopback,1,0 -f S16_LE -r 48000 -c 2 -t raw "$OUT/rec.raw" & AP=$!
sleep 1
paplay "$WAV"
sleep 1
kill -INT $AP; wait $AP
stop_pid $QP; echo $RC > "$OUT/loop.rc"

# 3. The mixer never keeps a card: once the PCM is closed for idleness, unbinding
#    snd-dummy closes the mixer at once and the module can be removed.
"$Q" --device alsa:hw:Dummy > "$OUT/unbind.log" 2>&1 & QP=$!
wait_server || exit 12
wait_for "$OUT/unbind.log" "closed (idle)" || echo "no idle close in 10 s"
timeout 30 sh -c 'echo snd_dummy.0 > /sys/bus/platform/drivers/snd_dummy/unbind'
echo "unbind $?" > "$OUT/unbind.txt"
wait_for "$OUT/unbind.log" "mixer hw:Dummy: the control device reported an error" || true
timeout 30 modprobe -r snd-dummy; echo "modprobe-r $?" >> "$OUT/unbind.txt"
kill -0 $QP && echo "alive" >> "$OUT/unbind.txt"
stop_pid $QP
"#;

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The `Volume:` line of the first sink in `pactl list sinks` output.
fn volume_line(sinks: &str) -> &str {
    sinks
        .lines()
        .find(|l| l.trim_start().starts_with("Volume:"))
        .unwrap_or_else(|| panic!("no Volume line in:\n{sinks}"))
}

fn flags_line(sinks: &str) -> &str {
    sinks
        .lines()
        .find(|l| l.trim_start().starts_with("Flags:"))
        .unwrap_or_else(|| panic!("no Flags line in:\n{sinks}"))
}

#[test]
fn pactl_drives_the_mixer_amixer_drives_pactl_jacks_are_seen_and_100_percent_is_bit_exact() {
    if !guest::skip_unless_available("kernel ALSA mixer tests") {
        return;
    }
    let g = Guest::new()
        .modules("snd-aloop snd-dummy")
        .timeout(std::time::Duration::from_secs(400))
        .env("Q", quaverd_bin())
        .env("QC", quaver_bin());
    let wav = g.path("noise.wav");
    let input = noise_s16(48000 * 2, 32, 20000);
    write_wav_s16(&wav, 48000, 2, &input);
    let g = g.env("WAV", &wav);
    let dir = g.out();
    let t0 = std::time::Instant::now();
    let run = g.run(SCRIPT);
    eprintln!("kernel_alsa_mixer: guest run took {:?}", t0.elapsed());
    let said = format!(
        "guest exit {:?}\noutput:\n{}\nscripts/guest:\n{}",
        run.status.code(),
        run.output,
        run.rig
    );
    assert!(run.status.success(), "{said}");
    let dummy_log = read(dir, "dummy.log");
    let loop_log = read(dir, "loop.log");
    let logs = format!("{said}\ndummy.log:\n{dummy_log}\nloop.log:\n{loop_log}");

    // The dummy sink has a hardware volume, in dB, starting from what Master held.
    assert!(
        dummy_log.contains("sink volume on hw:Dummy 'Master' (-45.00..0.00 dB"),
        "{logs}"
    );
    let start = read(dir, "sinks-start.txt");
    assert!(flags_line(&start).contains("HW_VOLUME_CTRL"), "{start}");
    assert!(flags_line(&start).contains("DECIBEL_VOLUME"), "{start}");
    assert!(volume_line(&start).contains("-30.00 dB"), "{start}");
    // 50 % (cubic) = -18.06 dB; Master rounds up to its next 0.3 dB step.
    let m50 = read(dir, "master-50.txt");
    assert_eq!(m50.matches("[-18.00dB]").count(), 2, "{m50}");
    // 100 % = 0 dB in hardware.
    let m100 = read(dir, "master-100.txt");
    assert_eq!(m100.matches("[0.00dB]").count(), 2, "{m100}");
    // `quaver volume alsa-sink -6dB` (native protocol): -6 dB is a step.
    let native = read(dir, "master-native.txt");
    assert_eq!(
        native.matches("[-6.00dB]").count(),
        2,
        "{native}\nquaver volume said: {}",
        read(dir, "native-volume.txt")
    );
    // The source: Mic in dB, mute on its capture switch (muted at start: switch off).
    let sources = read(dir, "sources-start.txt");
    let source = sources
        .split("Source #")
        .find(|s| s.contains("Name: alsa-source"))
        .unwrap_or_else(|| panic!("no alsa-source in:\n{sources}"));
    let flags = flags_line(source);
    assert!(
        flags.contains("HW_VOLUME_CTRL") && flags.contains("HW_MUTE_CTRL"),
        "{source}"
    );
    assert!(source.contains("Mute: yes"), "{source}");
    let mic = read(dir, "mic-unmuted.txt");
    assert_eq!(mic.matches("[-18.00dB] Capture [on]").count(), 2, "{mic}");
    let mic = read(dir, "mic-muted.txt");
    assert_eq!(mic.matches("[-18.00dB] Capture [off]").count(), 2, "{mic}");
    // amixer -21 dB (a step: -45 + 80 × 0.3): the sink's volume follows
    // (10^(-21/60) = 45 %), with a change event.
    let before = read(dir, "subscribe-before.txt");
    assert!(
        !before.contains("on sink"),
        "events before amixer: {before}"
    );
    let events = read(dir, "subscribe.txt");
    assert!(
        events.contains("Event 'change' on sink #"),
        "{events}\n{logs}"
    );
    let after = read(dir, "sinks-amixer.txt");
    let v = volume_line(&after);
    assert!(v.contains("-21.00 dB") && v.contains("45%"), "{v}\n{logs}");
    assert_eq!(read(dir, "dummy.rc").trim(), "0", "{logs}");

    // The mixer's watch thread: no wakeup in 3 idle seconds.
    let w = read(dir, "mixer-wakeups.txt");
    let f: Vec<&str> = w.split_whitespace().collect();
    assert!(
        f.len() == 3 && f[0].starts_with("/proc/") && f[1] == f[2],
        "mixer thread (task, switches before, after): {w}"
    );

    // The jack: added (unplugged), plugged, unplugged — each seen by the watch thread.
    let jack = read(dir, "jack.txt");
    assert!(
        jack.contains("snd_ctl_elem_add_boolean 0")
            && jack.contains("snd_ctl_elem_write 1 ")
            && jack.contains("snd_ctl_elem_write 0 "),
        "{jack}"
    );
    let seen: Vec<&str> = dummy_log
        .lines()
        .filter_map(|l| {
            l.split_once("card hw:Dummy: jack 'Headphone Jack' ")
                .map(|x| x.1)
        })
        .collect();
    assert_eq!(
        seen,
        [
            "unplugged (analog-output-headphones: not available)",
            "plugged (analog-output-headphones: available)",
            "unplugged (analog-output-headphones: not available)",
        ],
        "{logs}"
    );

    // The loopback card: its only element has no dB information → software volume,
    // logged with the card and the element; 100 % is bit-exact through the cable.
    assert!(
        read(dir, "add-element.txt").contains("snd_ctl_elem_add_integer 0"),
        "{}",
        read(dir, "add-element.txt")
    );
    assert!(
        loop_log.contains("card hw:Loopback, element 'Master' has no dB information"),
        "{logs}"
    );
    let sinks = read(dir, "sinks-loop.txt");
    assert!(!flags_line(&sinks).contains("HW_VOLUME_CTRL"), "{sinks}");
    let raw = std::fs::read(dir.join("rec.raw")).unwrap();
    let rec: Vec<i16> = raw
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    // Shown only if the comparison fails: an xrun there explains a gap.
    eprintln!("loop.log:\n{loop_log}");
    assert_contains_exactly(&rec, &input, "paplay → quaverd → hw:Loopback,0,0 → arecord");
    assert_eq!(read(dir, "loop.rc").trim(), "0", "{logs}");

    // Unbinding the card closes its mixer; the module then goes; quaverd runs on.
    let unbind = read(dir, "unbind.txt");
    let unbind_log = read(dir, "unbind.log");
    assert_eq!(unbind, "unbind 0\nmodprobe-r 0\nalive\n", "{unbind_log}");
    assert!(
        unbind_log.contains("mixer hw:Dummy: the control device reported an error"),
        "{unbind_log}"
    );
}
