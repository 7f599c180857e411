//! Ports and jacks end to end on a real kernel ALSA, in the QEMU guest (`scripts/guest`)
//! with snd-dummy and snd-aloop: quaverd with no configuration; a user-space
//! "Headphone Jack" (interface CARD, BOOLEAN) added to the dummy card gives its sink an
//! `analog-output-headphones` port; plugging it (value 1) while a `paplay` plays makes
//! headphones the active port, with card and sink change events, and the paplay plays
//! on; unplugging moves back to `analog-output`; `pactl set-sink-port` switches by hand
//! and refuses an unknown port. One guest boot; skipped, loudly, where the rig cannot
//! run. docs/alsa/ports.md.
//!
//! Then, with `ALSA_CONFIG_UCM2` naming `tests/data/ucm2`, the dummy card's UCM verbs and
//! devices are its profiles and ports (jack, device sequences, volume elements, a
//! profile switch), while the loopback card's configuration there, which has a syntax
//! error, is logged and the card probed instead (docs/alsa/ucm.md).

use quaver_testkit::guest::{Guest, quote, section, skip_unless_available};
use quaver_testkit::{noise_s16, quaverd_bin, write_wav_s16};
use std::time::Duration;

/// The steps, run as root in the guest; `=== STEP` sections for the assertions.
/// `$Q`: quaverd, `$WAV`: what paplay plays (long enough to outlast the steps).
const SCRIPT: &str = r#"
private_runtime
pactl() { timeout 90 env pactl "$@"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
jack() { # VALUE, or "add" [NAME]: the dummy card's user-space jack NAME (Headphone Jack)
python3 - "$1" "${2:-Headphone Jack}" <<'PY'
import ctypes, sys
a = ctypes.CDLL("libasound.so.2")
ctl = ctypes.c_void_p()
assert a.snd_ctl_open(ctypes.byref(ctl), b"hw:Dummy", 0) == 0
eid = ctypes.c_void_p()
a.snd_ctl_elem_id_malloc(ctypes.byref(eid))
a.snd_ctl_elem_id_set_interface(eid, 0)  # SND_CTL_ELEM_IFACE_CARD
a.snd_ctl_elem_id_set_name(eid, sys.argv[2].encode())
if sys.argv[1] == "add":
    print("jack add", a.snd_ctl_elem_add_boolean(ctl, eid, 1))
else:
    val = ctypes.c_void_p()
    a.snd_ctl_elem_value_malloc(ctypes.byref(val))
    a.snd_ctl_elem_value_set_id(val, eid)
    a.snd_ctl_elem_value_set_boolean(val, 0, ctypes.c_long(int(sys.argv[1])))
    import time
    t = time.time_ns() // 1000000  # just before the write: delays are upper bounds
    print("jack write", sys.argv[1], a.snd_ctl_elem_write(ctl, val))
    print("write_ms", t)
PY
}
active() { # the Dummy sink's active port
    pactl list sinks | awk -v s="$SINK" '$1=="Name:" {n=$2} n==s && $1=="Active" {sub(/^[ \t]*Active Port: /, ""); print; exit}'
}
wait_port() { # T0 PORT: polls (bounded, 60 s) until PORT is active; prints the delay
    t0=$1; shift
    while [ $(( $(now_ms) - t0 )) -lt 60000 ]; do
        [ "$(active)" = "$1" ] && { echo "active $1 after $(( $(now_ms) - t0 )) ms"; return 0; }
        sleep 0.05
    done
    echo "active port still $(active), not $1, after 60 s"
}
"$Q" --realtime-priority 0 --suspend-timeout-ms 0 2> "$OUT/quaverd.log" & QP=$!
wait_server
SINK=$(pactl list short sinks | awk '$2 ~ /^Dummy\./ {print $2; exit}')
echo "=== SINK"; echo "$SINK"
echo "=== START"; active
echo "=== ADD"; jack add
sleep 1
echo "=== CARD-ADDED"; pactl list cards
echo "=== SINKS-ADDED"; pactl list sinks
paplay --device="$SINK" "$WAV" & PP=$!
timeout 600 env pactl subscribe > "$OUT/events.txt" 2>&1 & SP=$!
sleep 2
echo "=== PLUG"
w=$(jack 1); echo "$w"; t_plug=$(echo "$w" | awk '/write_ms/ {print $2}')
wait_port "$t_plug" analog-output-headphones
sleep 0.5
kill -0 $PP && echo "paplay running"
pactl list short sink-inputs | awk -v s="$(pactl list short sinks | awk -v n="$SINK" '$2==n {print $1}')" '$2==s {print "sink-input on the sink"}'
echo "=== CARD-PLUGGED"; pactl list cards
echo "=== SINKS-PLUGGED"; pactl list sinks
echo "=== UNPLUG"
w=$(jack 0); echo "$w"; t_unplug=$(echo "$w" | awk '/write_ms/ {print $2}')
wait_port "$t_unplug" analog-output
sleep 0.5
kill -0 $PP && echo "paplay running"
echo "=== BY-HAND"
pactl set-sink-port "$SINK" analog-output-headphones; echo "set exit $?"; active
pactl set-sink-port "$SINK" no-such-port; echo "bad set exit $?"; active
pactl set-sink-port "$SINK" analog-output; echo "set back exit $?"; active
kill -0 $PP && echo "paplay running"
sleep 1
kill $SP; wait $SP
echo "=== EVENTS"; cat "$OUT/events.txt"
kill $PP; wait $PP
stop_pid $QP; echo "quaverd exit $RC"
# 2. The mixer follows the active port: the card given Headphone and Speaker playback
#    switches (user-space MIXER elements, off when added), quaverd started again with the
#    jack still unplugged: speakers, then headphones while plugged, then speakers.
python3 - <<'PY'
import ctypes
a = ctypes.CDLL("libasound.so.2")
ctl = ctypes.c_void_p()
assert a.snd_ctl_open(ctypes.byref(ctl), b"hw:Dummy", 0) == 0
for name in (b"Headphone Playback Switch", b"Speaker Playback Switch"):
    eid = ctypes.c_void_p()
    a.snd_ctl_elem_id_malloc(ctypes.byref(eid))
    a.snd_ctl_elem_id_set_interface(eid, 2)  # SND_CTL_ELEM_IFACE_MIXER
    a.snd_ctl_elem_id_set_name(eid, name)
    print("element add", name.decode(), a.snd_ctl_elem_add_boolean(ctl, eid, 2))
PY
"$Q" --realtime-priority 0 --suspend-timeout-ms 0 2> "$OUT/quaverd2.log" & QP=$!
wait_server
sw() { amixer -c Dummy sget "$1" | grep -o '\[o[nf]*\]' | head -1; }
state() { # LABEL WANTED-PORT WANTED-HEADPHONE: waits (bounded) for the switch, then says
    for _ in $(seq 100); do [ "$(sw Headphone)" = "$3" ] && break; sleep 0.1; done
    echo "$1 $(active) speaker $(sw Speaker) headphone $(sw Headphone)"
}
echo "=== MIXER"
state start analog-output-speaker "[off]"
w=$(jack 1); wait_port "$(echo "$w" | awk '/write_ms/ {print $2}')" analog-output-headphones
state plugged analog-output-headphones "[on]"
w=$(jack 0); wait_port "$(echo "$w" | awk '/write_ms/ {print $2}')" analog-output-speaker
state unplugged analog-output-speaker "[off]"
# 3. A port chosen by hand is remembered on disk for the card and profile: headphones
#    plugged, the speakers chosen by hand; started again (still plugged), the sink is on
#    the speakers, not on the plugged headphones a fresh start picks.
w=$(jack 1); wait_port "$(echo "$w" | awk '/write_ms/ {print $2}')" analog-output-headphones
pactl set-sink-port "$SINK" analog-output-speaker; echo "hand exit $?"
stop_pid $QP; echo "quaverd exit $RC"
grep -E "switched" "$OUT/quaverd2.log"
"$Q" --realtime-priority 0 --suspend-timeout-ms 0 2> "$OUT/quaverd3.log" & QP=$!
wait_server
echo "=== REMEMBERED"
grep -A2 '^\[ports' "$XDG_STATE_HOME/quaver/card-profiles.toml"
for _ in $(seq 100); do [ "$(active)" = analog-output-speaker ] && break; sleep 0.1; done
echo "after restart: $(active) speaker $(sw Speaker) headphone $(sw Headphone)"
grep -E "chosen earlier" "$OUT/quaverd3.log"
stop_pid $QP; echo "quaverd exit $RC"
jack 0 > /dev/null  # part 4 starts with the jack unplugged
echo "=== LOG"; grep -E "jack|port|ERROR" "$OUT/quaverd.log"
echo "=== DELAYS"  # from the jack write to quaverd's switch, by quaverd's log clock
for x in "analog-output-headphones $t_plug" "analog-output $t_unplug"; do
    set -- $x
    ts=$(grep -m1 "$SINK switched to port $1\$" "$OUT/quaverd.log" | cut -d' ' -f1)
    [ -n "$ts" ] && echo "switch to $1: $(( $(date -d "$ts" +%s%N) / 1000000 - $2 )) ms"
done
# 4. UCM (docs/alsa/ucm.md): the test configuration $UCM/ucm2 gives the dummy card
#    verbs HiFi (Speaker, Headphones with the jack above, still unplugged, Mic) and
#    Voice Call. Each UCM device's enable sequence turns one capture switch on (Speaker:
#    Synth, Headphones: Line), so amixer shows which device UCM enabled. The loopback
#    card's configuration there has a syntax error: logged, and the card probed.
#    The dummy card comes back first with three PCM devices: HiFi's HDMI1 device plays
#    on the third, a sink of its own (its enable sequence turns the Mic switch on); its
#    LineOut device is on the second, which is non-interleaved: logged, not offered.
T_UCM=$(now_ms)
modprobe -r snd-dummy && modprobe snd-dummy pcm_devs=3; echo "dummy reload exit $?"
for _ in $(seq 100); do ls /dev/snd/pcmC*D2p > /dev/null 2>&1 && [ -e /proc/asound/Dummy ] && break; sleep 0.1; done
jack add > /dev/null
jack add "HDMI/DP,pcm=2 Jack" > /dev/null
ALSA_CONFIG_UCM2="$UCM/ucm2" "$Q" --realtime-priority 0 --suspend-timeout-ms 0 2> "$OUT/quaverd4.log" & QP=$!
wait_server
SINK=$(pactl list short sinks | awk '$2 ~ /^Dummy\..*-hw0-sink$/ {print $2; exit}')
SOURCE=$(pactl list short sources | awk '$2 ~ /^Dummy\./ && $2 !~ /monitor$/ {print $2; exit}')
db() { amixer -c Dummy sget "$1" | grep -o '\[-*[0-9.]*dB\]' | head -1; }
capsw() { amixer -c Dummy sget "$1" | grep -o 'Capture \[o[nf]*\]' | head -1; }
devices() { # WANTED-HEADPHONES: waits (bounded) for the Line switch, then says both
    for _ in $(seq 50); do [ "$(capsw Line)" = "Capture $1" ] && break; sleep 0.1; done
    echo "speaker $(capsw Synth) headphones $(capsw Line)"
}
echo "=== UCM-NODES"; echo "$SINK $SOURCE"
echo "=== UCM-SINKS"; pactl list short sinks
echo "=== UCM-CARD"; pactl list cards
echo "=== UCM-START"; active; devices "[off]"; echo "hdmi $(capsw Mic)"
echo "=== UCM-VOLUME"
master=$(db Master)
pactl set-sink-volume "$SINK" 50%; pactl set-source-volume "$SOURCE" 50%
for _ in $(seq 50); do [ "$(db Synth)" = "[-18.00dB]" ] && break; sleep 0.1; done
echo "synth $(db Synth) cd $(db CD) master $([ "$(db Master)" = "$master" ] && echo unchanged || echo changed)"
echo "=== UCM-PLUG"
w=$(jack 1); wait_port "$(echo "$w" | awk '/write_ms/ {print $2}')" "[Out] Headphones"; devices "[on]"
echo "=== UCM-BY-HAND"
pactl set-sink-port "$SINK" "[Out] Speaker"; echo "set exit $?"; active; devices "[off]"
# The default sink by availability and priority: HDMI1 outranks every other port but
# its jack is unplugged, so another sink is the default and a paplay naming no sink
# plays there; plugged, HDMI1's sink becomes the default and the paplay follows it;
# unplugged, both go back.
default_is() { # SINK: waits (bounded, 60 s) until it is the default; says so
    for _ in $(seq 600); do [ "$(pactl get-default-sink)" = "$1" ] && break; sleep 0.1; done
    echo "default $( [ "$(pactl get-default-sink)" = "$1" ] && echo "is" || echo "is not") $1"
}
on_sink() { # the sink the paplay of PID $DP plays on
    pactl list sink-inputs | awk -v p="$DP" '$1=="Sink:" {s=$2} /application.process.id = / {gsub(/"/, "", $3); if ($3 == p) print s}' | head -1
}
sink_index() { pactl list short sinks | awk -v n="$1" '$2==n {print $1}'; }
HDMI=Dummy.HiFi-hw2-sink
BEFORE=$(pactl get-default-sink)
timeout 600 env pactl subscribe > "$OUT/events4.txt" 2>&1 & SP=$!
paplay "$WAV" & DP=$!
for _ in $(seq 100); do [ -n "$(on_sink)" ] && break; sleep 0.1; done
echo "=== UCM-DEFAULT-BEFORE"; echo "$BEFORE"
echo "=== UCM-DEFAULT"
[ "$BEFORE" = "$HDMI" ] && echo "unplugged HDMI is the default" || echo "unplugged: not HDMI"
[ "$(on_sink)" = "$(sink_index "$BEFORE")" ] && echo "paplay on the default"
jack 1 "HDMI/DP,pcm=2 Jack" > /dev/null
default_is "$HDMI"
for _ in $(seq 100); do [ "$(on_sink)" = "$(sink_index "$HDMI")" ] && break; sleep 0.1; done
[ "$(on_sink)" = "$(sink_index "$HDMI")" ] && echo "paplay followed to HDMI"
jack 0 "HDMI/DP,pcm=2 Jack" > /dev/null
default_is "$BEFORE"
for _ in $(seq 100); do [ "$(on_sink)" = "$(sink_index "$BEFORE")" ] && break; sleep 0.1; done
[ "$(on_sink)" = "$(sink_index "$BEFORE")" ] && echo "paplay followed back"
kill -0 $DP && echo "paplay running"
kill $DP; wait $DP
sleep 0.5; kill $SP; wait $SP
echo "server events: $(grep -c "'change' on server" "$OUT/events4.txt")"
echo "=== UCM-PROFILE"
pactl set-card-profile alsa_card.Dummy "Voice Call"; echo "profile exit $?"
pactl list cards | awk '/Name: alsa_card.Dummy/ {f=1} f && /Active Profile/ {print; exit}'
SINK=$(pactl list short sinks | awk '$2 ~ /^Dummy\./ {print $2; exit}'); echo "$SINK"; active
pactl set-sink-volume "$SINK" 50%
for _ in $(seq 50); do [ "$(db Master)" = "[-18.00dB]" ] && break; sleep 0.1; done
echo "master $(db Master)"
stop_pid $QP; echo "quaverd exit $RC"
echo "=== UCM-LOG"; grep -E "UCM|port|ERROR.*Dummy" "$OUT/quaverd4.log"
echo "=== UCM-TIME"; echo "part 4: $(( $(now_ms) - T_UCM )) ms"
echo "=== FULL-LOG"; cat "$OUT/quaverd.log"  # read when an assertion fails
echo "=== END"
"#;

/// The trimmed lines of `block` after the line `start` up to the next line at that
/// line's indentation or less (a section of `pactl list cards`).
fn sub_lines<'a>(block: &'a str, start: &str) -> Vec<&'a str> {
    let mut lines = block.lines().skip_while(|l| l.trim() != start);
    let Some(head) = lines.next() else {
        panic!("no {start} in:\n{block}");
    };
    let indent = |l: &str| l.len() - l.trim_start().len();
    let depth = indent(head);
    lines
        .take_while(|l| indent(l) > depth)
        .map(str::trim)
        .collect()
}

/// Part 3: the UCM configuration's profiles, ports, jacks, devices and volume elements;
/// the loopback card's broken configuration falls back to probing.
fn check_ucm(out: &str) {
    assert!(out.contains("dummy reload exit 0\n"), "{out}");
    let nodes = section(out, "UCM-NODES").trim();
    assert_eq!(nodes, "Dummy.HiFi-hw0-sink Dummy.HiFi-hw0-source", "{out}");
    let card = block(section(out, "UCM-CARD"), "alsa_card.Dummy");
    assert_eq!(
        sub_lines(card, "Profiles:"),
        [
            "HiFi: Play HiFi quality Music (sinks: 2, sources: 1, priority: 8000, available: yes)",
            "Voice Call: Make a phone call (sinks: 1, sources: 1, priority: 6000, available: yes)",
            "off: Off (sinks: 0, sources: 0, priority: 0, available: yes)",
        ],
        "{card}"
    );
    assert!(card.contains("Active Profile: HiFi\n"), "{card}");
    let port = |rest: &str| format!("(type: Analog, priority: {rest})");
    assert_eq!(
        sub_lines(card, "Ports:"),
        [
            // Ports by priority: HDMI1's is the highest (the default-sink check below).
            format!(
                "[Out] HDMI1: HDMI 1 (type: HDMI, priority: {})",
                "20000, latency offset: 0 usec, not available"
            ),
            "Part of profile(s): HiFi".to_string(),
            format!(
                "[Out] Headphones: Headphones {}",
                port("200, latency offset: 0 usec, not available")
            ),
            "Part of profile(s): HiFi".to_string(),
            format!(
                "[Out] Speaker: Speaker {}",
                port("100, latency offset: 0 usec, availability unknown")
            ),
            "Part of profile(s): HiFi".to_string(),
            format!(
                "[In] Mic: Internal Microphone {}",
                port("100, latency offset: 0 usec, availability unknown")
            ),
            "Part of profile(s): HiFi, Voice Call".to_string(),
            format!(
                "[Out] Earpiece: Earpiece {}",
                port("100, latency offset: 0 usec, availability unknown")
            ),
            "Part of profile(s): Voice Call".to_string(),
        ],
        "{card}"
    );
    // Headphones unplugged: the speaker, and UCM enabled the Speaker device only on the
    // first PCM, and HDMI1 on the second.
    assert_eq!(
        section(out, "UCM-START").trim(),
        "[Out] Speaker\nspeaker Capture [on] headphones Capture [off]\nhdmi Capture [on]",
        "{out}"
    );
    // Volume goes to the elements the configuration names, not to Master.
    assert_eq!(
        section(out, "UCM-VOLUME").trim(),
        "synth [-18.00dB] cd [-18.00dB] master unchanged",
        "{out}"
    );
    // Plugged: the headphones, and UCM switched the devices.
    let plug = section(out, "UCM-PLUG");
    assert!(
        plug.contains("active [Out] Headphones after ")
            && plug.ends_with("speaker Capture [off] headphones Capture [on]\n"),
        "{plug}"
    );
    // By hand, headphones still plugged: the speaker.
    assert_eq!(
        section(out, "UCM-BY-HAND").trim(),
        "set exit 0\n[Out] Speaker\nspeaker Capture [on] headphones Capture [off]",
        "{out}"
    );
    let profile = section(out, "UCM-PROFILE");
    assert!(
        profile.starts_with(
            "profile exit 0\n\tActive Profile: Voice Call\nDummy.Voice_Call-hw0-sink\n[Out] Earpiece\nmaster [-18.00dB]\n"
        ),
        "{profile}"
    );
    let log = section(out, "UCM-LOG");
    assert!(
        log.contains(
            "card 'Dummy' (Dummy): UCM configuration with verbs [\"HiFi\", \"Voice Call\"]"
        ),
        "{log}"
    );
    assert!(!log.contains("ERROR"), "{log}");
    // The non-interleaved PCM: named with the device, the PCM and why.
    assert!(
        log.lines().any(|l| l.contains(
            "card 'Dummy' (Dummy): UCM verb 'HiFi' device 'LineOut': card 'Dummy' (Dummy) PCM hw:Dummy,1 playback"
        ) && l.ends_with(
            "offers no interleaved access (non-interleaved PCMs are not supported); not offered; skipped"
        )),
        "{log}"
    );
    assert!(
        log.contains("Dummy.HiFi-hw0-sink switched to port [Out] Headphones")
            && log.contains("UCM device 'Headphones' enabled")
            && log.contains("port [Out] Speaker chosen by a client"),
        "{log}"
    );
    // The loopback card's broken configuration: said with the card and alsa-lib's
    // words; the card probed instead, and served.
    let broken = log
        .lines()
        .find(|l| l.contains("card 'Loopback' (Loopback): UCM configuration does not load"))
        .unwrap_or_else(|| panic!("the broken configuration is not logged:\n{log}"));
    assert!(
        broken.contains(
            "WARN card 'Loopback' (Loopback): UCM configuration does not load: snd_use_case_mgr_open('hw:0'): Invalid argument (alsa-lib: "
        ) && broken.contains("Unexpected char")
            && broken.contains("ucm2/conf.d/Loopback/Loopback.conf")
            && broken.ends_with("); profiles from PCM probing instead"),
        "{broken}"
    );
    let sinks = section(out, "UCM-SINKS");
    assert!(
        sinks.contains("\tLoopback.analog-stereo-sink\t")
            && sinks.contains("\tDummy.HiFi-hw0-sink\t")
            && sinks.contains("\tDummy.HiFi-hw2-sink\t"),
        "{sinks}"
    );
    // The default by availability, then priority; a stream naming no sink follows it.
    assert_eq!(
        section(out, "UCM-DEFAULT").trim(),
        "unplugged: not HDMI\npaplay on the default\ndefault is Dummy.HiFi-hw2-sink\n\
         paplay followed to HDMI\ndefault is BACK\npaplay followed back\npaplay running\n\
         server events: 2"
            .replace("BACK", section(out, "UCM-DEFAULT-BEFORE").trim()),
        "{out}"
    );
    eprintln!("{}", section(out, "UCM-TIME"));
}

/// The block of `pactl list sinks|cards` output that names `name`.
fn block<'a>(list: &'a str, name: &str) -> &'a str {
    list.split("\n\n")
        .find(|b| b.contains(&format!("Name: {name}\n")))
        .unwrap_or_else(|| panic!("no {name} in:\n{list}"))
}

#[test]
fn headphones_plugged_and_unplugged_switch_the_dummy_sinks_port_while_it_plays() {
    if !skip_unless_available("kernel_alsa_jacks") {
        return;
    }
    let guest = Guest::new().timeout(Duration::from_secs(600));
    let wav = guest.path("noise.wav");
    // 60 s: longer than every step, so paplay is still playing when checked.
    write_wav_s16(&wav, 48_000, 2, &noise_s16(48_000 * 2 * 60, 2, 8000));
    let ucm = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let run = guest.run(&format!(
        "Q={}\nWAV={}\nUCM={}\n{SCRIPT}",
        quote(&quaverd_bin().to_string_lossy()),
        quote(&wav.to_string_lossy()),
        quote(ucm)
    ));
    let out = run.ok();
    eprintln!("{out}");
    let sink = section(out, "SINK").trim();
    assert!(section(out, "ADD").contains("jack add 0"), "{out}");
    assert!(sink.starts_with("Dummy."), "{out}");
    // Nothing known at start: the generic port.
    assert_eq!(section(out, "START").trim(), "analog-output", "{out}");
    // The jack added (unplugged): the card and the sink offer headphones, not available.
    let card = block(section(out, "CARD-ADDED"), "alsa_card.Dummy");
    let port_line = |card: &str| {
        card.lines()
            .find(|l| {
                l.trim_start().starts_with(
                    "analog-output-headphones: Headphones (type: Analog, priority: 9900",
                )
            })
            .unwrap_or_else(|| panic!("no headphones port in:\n{card}"))
            .to_string()
    };
    assert!(port_line(card).ends_with(", not available)"), "{card}");
    let s = block(section(out, "SINKS-ADDED"), sink);
    assert!(
        s.contains("analog-output-headphones: Headphones")
            && s.contains("Active Port: analog-output\n"),
        "{s}"
    );
    // Plugged: headphones active, the stream still playing on the sink.
    let plug = section(out, "PLUG");
    assert!(plug.contains("jack write 1 0\nwrite_ms "), "{plug}");
    assert!(
        plug.contains("active analog-output-headphones after "),
        "{out}"
    );
    assert!(
        plug.contains("paplay running") && plug.contains("sink-input on the sink"),
        "{out}"
    );
    let card = block(section(out, "CARD-PLUGGED"), "alsa_card.Dummy");
    assert!(port_line(card).ends_with(", available)"), "{card}");
    let s = block(section(out, "SINKS-PLUGGED"), sink);
    assert!(s.contains("Active Port: analog-output-headphones\n"), "{s}");
    // Unplugged: back to the generic port, still playing.
    let unplug = section(out, "UNPLUG");
    assert!(unplug.contains("active analog-output after "), "{out}");
    assert!(unplug.contains("paplay running"), "{out}");
    // By hand: switched; an unknown port refused (No such entity) and nothing changes.
    let hand = section(out, "BY-HAND");
    assert!(
        hand.contains("set exit 0\nanalog-output-headphones\n"),
        "{hand}"
    );
    assert!(
        hand.contains("No such entity")
            && hand.contains("bad set exit 1\nanalog-output-headphones\n"),
        "{hand}"
    );
    assert!(hand.contains("set back exit 0\nanalog-output\n"), "{hand}");
    assert!(hand.contains("paplay running"), "{hand}");
    // Events: card and sink changes for each plug, unplug and hand switch.
    let events = section(out, "EVENTS");
    let card_changes = events.matches("Event 'change' on card #").count();
    let sink_changes = events.matches("Event 'change' on sink #").count();
    assert!(card_changes >= 4, "{card_changes} card changes:\n{events}");
    assert!(sink_changes >= 4, "{sink_changes} sink changes:\n{events}");
    // The daemon's side, in order: plugged → headphones, unplugged → analog-output.
    let log = section(out, "LOG");
    let switched: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            l.split_once(&format!("{sink} switched to port "))
                .map(|x| x.1)
        })
        .collect();
    assert_eq!(
        switched,
        ["analog-output-headphones", "analog-output"],
        "{log}"
    );
    assert!(out.contains("quaverd exit 0"), "{out}");
    // The mixer follows: headphones on and speakers off while plugged, the reverse
    // before and after.
    let mixer = section(out, "MIXER");
    assert!(
        mixer.contains("start analog-output-speaker speaker [on] headphone [off]\n")
            && mixer.contains("plugged analog-output-headphones speaker [off] headphone [on]\n")
            && mixer.contains("unplugged analog-output-speaker speaker [on] headphone [off]\n"),
        "{mixer}"
    );
    check_ucm(out);
    // The port chosen by hand came back after a restart, with the mixer following it.
    let remembered = section(out, "REMEMBERED");
    assert!(
        remembered.contains(&format!("\"{sink}\" = \"analog-output-speaker\""))
            && remembered
                .contains("after restart: analog-output-speaker speaker [on] headphone [off]"),
        "{remembered}\n{out}"
    );
    assert_eq!(out.matches("quaverd exit 0").count(), 4, "{out}");
    // Reported, not asserted: guest timings mean little (the emulated CPU is slow).
    eprintln!("measured delays:\n{}", section(out, "DELAYS"));
}
