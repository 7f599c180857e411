//! The ALSA sequencer bridge on a real kernel ALSA, in the QEMU guest (`scripts/guest`)
//! with snd-virmidi and snd-seq-dummy: the `seq_probe` example (the bridge from a shell)
//! lists the virmidi and Midi Through ports; its thread does not wake while idle; bytes written with `amidi -S` into the
//! virmidi rawmidi device reach the bridge's queue intact (note on/off, sysex) with
//! increasing timestamps; bytes the bridge sends to the virmidi seq port come out of
//! `amidi -d`; a malformed message is refused; an oversized sysex is counted and dropped
//! on input and refused on output; the virmidi card removed while subscribed is
//! reported port by port, and a send to it fails with a reason; the card loaded again
//! and aseqdump starting are reported as ports added (our note reaches aseqdump), and
//! aseqdump ending as its port removed. One guest boot; skipped,
//! loudly, where the rig cannot run. docs/alsa/seq.md.

use quaver_testkit::guest::{Guest, quote, section, skip_unless_available};
use std::path::PathBuf;
use std::time::Duration;

/// The steps, run as root in the guest; `$PROBE` is the seq_probe example.
const SCRIPT: &str = r#"
CARD=$(awk '/VirMIDI/ {print $1; exit}' /proc/asound/cards)
echo "=== CARD"; echo "$CARD"
F=$(mktemp -u); mkfifo "$F"
"$PROBE" --max-sysex 64 < "$F" > "$OUT/probe.txt" 2>&1 & PP=$!
exec 3> "$F"
for _ in $(seq 150); do grep -q '^ready' "$OUT/probe.txt" && break; sleep 0.2; done
VPORT=$(awk -v c="'Virtual Raw MIDI $CARD-0'" '$1=="port" && index($0, c) {print $2; exit}' "$OUT/probe.txt")
echo "=== VPORT"; echo "$VPORT"
echo "=== ACONNECT"; aconnect -l
# Idle, the bridge's thread sleeps in poll: no wakeups in 2 s without traffic.
T=$(dirname "$(grep -lx alsa-seq /proc/$PP/task/*/comm | head -1)")
ctx() { awk '/^voluntary_ctxt_switches/ {print $2}' "$T/status"; }
a=$(ctx); sleep 2; b=$(ctx)
echo "=== IDLE"; echo "thread $T wakeups $((b - a))"
# 1. Into the virmidi rawmidi device: note on, note off, a sysex; then a sysex longer
#    than the probe's 64-byte bound followed by a note that must still arrive.
amidi -p "hw:$CARD,0" -S '90 3C 7F 80 3C 00 F0 7E 7F 06 01 F7'; echo "amidi send exit $?"
amidi -p "hw:$CARD,0" -S "F0 $(for i in $(seq 100); do printf '02 '; done)F7 90 3D 7F"
# 2. Out through the virmidi seq port to its rawmidi device, read by amidi -d.
amidi -p "hw:$CARD,0" -d -t 4 > "$OUT/amidi.txt" 2>&1 & AP=$!
sleep 1
echo "send $VPORT 90 3C 7F" >&3
echo "send $VPORT F0 7E 7F 06 01 F7" >&3
# 3. Through Midi Through (snd-seq-dummy): out and back in. Bad input: refused.
echo "send 14:0 B0 07 64" >&3
echo "send $VPORT 90 3C" >&3
echo "send $VPORT 3C 7F" >&3
echo "send $VPORT F0 $(for i in $(seq 70); do printf '01 '; done)F7" >&3
echo "send 99:0 90 3C 7F" >&3
wait $AP
echo "=== AMIDI"; tr -d ' \n' < "$OUT/amidi.txt"; echo
# 4. The card removed while subscribed. The subscriptions hold the module (as any
#    sequencer client's do), so modprobe -r refuses; unbinding the device removes the
#    card the way an unplug does, and then the module unloads.
echo "=== REMOVE"
modprobe -r snd-virmidi 2>&1; echo "modprobe -r exit $?"
echo snd_virmidi.0 > /sys/bus/platform/drivers/snd_virmidi/unbind; echo "unbind exit $?"
for _ in $(seq 50); do grep -q "^removed $VPORT" "$OUT/probe.txt" && break; sleep 0.2; done
modprobe -r snd-virmidi; echo "modprobe -r after unbind exit $?"
echo "send $VPORT 90 3C 7F" >&3
echo "send 14:0 C0 05" >&3
# 5. Ports appearing: the virmidi card back, and a user-space client (aseqdump) that we
#    send to; aseqdump ending takes its port away.
echo "=== ADD"
modprobe snd-virmidi; echo "modprobe exit $?"
for _ in $(seq 50); do [ "$(grep -c "^added .* 'Virtual Raw MIDI" "$OUT/probe.txt")" -ge 4 ] && break; sleep 0.2; done
CARD2=$(awk '/VirMIDI/ {print $1; exit}' /proc/asound/cards)
NPORT=$(awk -v c="'Virtual Raw MIDI $CARD2-0'" '$1=="added" && index($0, c) {print $2; exit}' "$OUT/probe.txt")
echo "new card $CARD2 port $NPORT"
amidi -p "hw:$CARD2,0" -S '90 40 10'
aseqdump > "$OUT/aseqdump.txt" 2>&1 & DP=$!
for _ in $(seq 50); do grep -q "^added .* 'aseqdump'" "$OUT/probe.txt" && break; sleep 0.2; done
DPORT=$(awk '$1=="added" && /aseqdump/ {print $2; exit}' "$OUT/probe.txt")
echo "aseqdump port $DPORT"
echo "send $DPORT 90 41 22" >&3
sleep 1
kill $DP; wait $DP
for _ in $(seq 50); do grep -q "^removed $DPORT\$" "$OUT/probe.txt" && break; sleep 0.2; done
echo "=== ASEQDUMP"; cat "$OUT/aseqdump.txt"
sleep 1
echo counters >&3
echo quit >&3
exec 3>&-
for _ in $(seq 100); do kill -0 $PP 2>/dev/null || break; sleep 0.2; done
kill -0 $PP 2>/dev/null && { echo "probe still running"; kill -9 $PP; }
wait $PP; echo "probe exit $?"
echo "=== PROBE"; cat "$OUT/probe.txt"
echo "=== END"
"#;

/// The seq_probe example next to this test's binary (`cargo test` builds examples).
fn probe() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target profile dir");
    dir.join("examples").join("seq_probe")
}

/// The probe's `midi` lines: (time, port, bytes).
fn midi_lines(probe: &str) -> Vec<(u64, String, String)> {
    probe
        .lines()
        .filter_map(|l| l.strip_prefix("midi "))
        .map(|l| {
            let mut w = l.splitn(3, ' ');
            let t = w.next().unwrap().parse().unwrap();
            (
                t,
                w.next().unwrap().to_string(),
                w.next().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn virmidi_and_midi_through_ports_carry_midi_both_ways_and_a_removed_card_is_reported() {
    if !skip_unless_available("kernel_alsa_seq") {
        return;
    }
    let bin = probe();
    if !bin.exists() {
        panic!("{} not built (cargo test builds examples)", bin.display());
    }
    let guest = Guest::new()
        .modules("snd-virmidi snd-seq-dummy")
        .timeout(Duration::from_secs(300));
    let run = guest.run(&format!(
        "PROBE={}\n{SCRIPT}",
        quote(&bin.to_string_lossy())
    ));
    let out = run.ok();
    eprintln!("{out}");
    let card = section(out, "CARD").trim();
    assert!(!card.is_empty(), "no VirMIDI card:\n{out}");
    let probe = section(out, "PROBE");
    let vport = section(out, "VPORT").trim();
    // Listed: the four virmidi ports of the card and Midi Through, readable and writable.
    for i in 0..4 {
        let want = format!(" r w 'Virtual Raw MIDI {card}-{i}' 'VirMIDI {card}-{i}'");
        assert!(
            probe
                .lines()
                .any(|l| l.starts_with("port ") && l.ends_with(&want)),
            "{want} not listed:\n{probe}"
        );
    }
    assert!(
        probe.contains("port 14:0 r w 'Midi Through' 'Midi Through Port-0'"),
        "{probe}"
    );
    assert!(
        !probe.lines().any(|l| l.starts_with("port 0:")),
        "system ports listed:\n{probe}"
    );
    assert!(section(out, "ACONNECT").contains(&format!("Connected From: 0:1, 14:0, {vport}")));
    let idle = section(out, "IDLE").lines().next().unwrap_or("");
    assert!(idle.ends_with(" wakeups 0"), "{idle}");
    // In from amidi: intact, in order, timestamps increasing; the oversized sysex dropped
    // (counted) and the note after it delivered.
    let midi = midi_lines(probe);
    // Before the card is removed (a card loaded again may reuse the address).
    let before = midi_lines(&probe[..probe.find("\nremoved ").unwrap_or(probe.len())]);
    let from_v: Vec<&(u64, String, String)> = before.iter().filter(|m| m.1 == vport).collect();
    let bytes: Vec<&str> = from_v.iter().map(|m| m.2.as_str()).collect();
    assert_eq!(
        bytes,
        ["90 3C 7F", "80 3C 00", "F0 7E 7F 06 01 F7", "90 3D 7F"],
        "{probe}"
    );
    assert!(
        from_v.windows(2).all(|w| w[0].0 < w[1].0),
        "timestamps not increasing:\n{probe}"
    );
    // Out to the virmidi seq port: amidi -d read what we sent.
    assert_eq!(section(out, "AMIDI").trim(), "903C7FF07E7F0601F7", "{out}");
    // Out and back through Midi Through, twice (the second after the card went).
    let through: Vec<&str> = midi
        .iter()
        .filter(|m| m.1 == "14:0")
        .map(|m| m.2.as_str())
        .collect();
    assert_eq!(through, ["B0 07 64", "C0 05"], "{probe}");
    // Bad input refused with the reason; a port that does not exist fails by notice.
    for want in [
        "refused: not sent: status 0x90 takes 2 data byte(s), got 1",
        "refused: not sent: MIDI message starts with data byte 0x3c, not a status byte",
        "refused: not sent: 72-byte sysex is longer than the 64-byte limit",
        "send-failed 99:0 99:0 is not (or no longer) a writable sequencer port",
    ] {
        assert!(probe.contains(want), "no '{want}' in:\n{probe}");
    }
    // The card removed: every one of its ports reported gone, sending to it fails,
    // the bridge goes on (Midi Through still works, counters, clean close).
    let remove = section(out, "REMOVE");
    assert!(remove.contains("unbind exit 0"), "{remove}");
    assert!(
        remove.contains("modprobe -r after unbind exit 0"),
        "{remove}"
    );
    for i in 0..4 {
        let client: u32 = vport.split(':').next().unwrap().parse().unwrap();
        let gone = format!("removed {}:0", client + i);
        assert!(probe.contains(&gone), "no '{gone}' in:\n{probe}");
    }
    assert!(
        probe.contains(&format!(
            "send-failed {vport} {vport} is not (or no longer) a writable sequencer port"
        )),
        "{probe}"
    );
    // Ports appearing: the card back (its note arrives from its new port), aseqdump's
    // port added, our note reaching aseqdump, its port removed when it ends.
    let add = section(out, "ADD");
    assert!(add.contains("modprobe exit 0"), "{add}");
    let field = |key: &str| {
        add.lines()
            .find_map(|l| {
                l.split_once(key)
                    .map(|(_, v)| v.split(' ').next().unwrap().to_string())
            })
            .unwrap_or_else(|| panic!("no '{key}' in:\n{add}"))
    };
    let (nport, dport) = (field(" port "), field("aseqdump port "));
    assert!(!nport.is_empty() && !dport.is_empty(), "{add}");
    assert!(
        midi.iter().any(|m| m.1 == nport && m.2 == "90 40 10"),
        "nothing from the new card's {nport}:\n{probe}"
    );
    assert!(
        probe.contains(&format!("added {dport} 'aseqdump' 'aseqdump'")),
        "{probe}"
    );
    let dump = section(out, "ASEQDUMP");
    assert!(
        dump.lines()
            .any(|l| l.contains("Note on") && l.contains("note 65, velocity 34")),
        "{dump}"
    );
    assert!(probe.contains(&format!("removed {dport}\n")), "{probe}");
    let counters = probe
        .lines()
        .find(|l| l.starts_with("counters "))
        .unwrap_or_else(|| panic!("no counters:\n{probe}"));
    for want in [
        "received=7 ",
        "sysex_dropped=1 ",
        "overruns=0 ",
        "sent=5 ",
        "send_failed=2",
    ] {
        assert!(counters.contains(want), "{want} not in {counters}");
    }
    assert!(probe.contains("\nclosed\n"), "{probe}");
    assert!(out.contains("probe exit 0"), "{out}");
}
