//! ALSA sequencer MIDI in the graph, on a real kernel ALSA (the QEMU guest of
//! `scripts/guest`, with snd-virmidi and snd-seq-dummy): quaverd puts the virmidi and
//! Midi Through ports in the graph as the `a2j` node's MIDI ports (`quaver ls`,
//! `jack_lsp -t -p`: MIDI, physical, terminal); `amidi -S` into the virmidi card reaches
//! jack_midi_dump through the capture port with its bytes intact; jack_midiseq's notes
//! sent to the playback port come out of `amidi -d`; unbinding the virmidi card takes
//! its ports out of the graph while quaverd keeps serving (Midi Through stays); loading
//! it again brings them back, carrying MIDI. One guest
//! boot; skipped, loudly, where the rig cannot run (`scripts/guest --check` exits 3).
//! docs/alsa/seq.md.

use quaver_testkit::guest::{Guest, section, skip_unless_available};
use quaver_testkit::{quaver_bin, quaver_jack_bin, quaverd_bin};
use std::time::Duration;

/// The steps, run as root in the guest; `$Q`, `$QC`, `$QJ`: quaverd, quaver, quaver-jack.
const SCRIPT: &str = r#"
set -u
private_runtime
export QUAVER_RT_PRIORITY=0
CARD=$(awk '/VirMIDI/ {print $1; exit}' /proc/asound/cards)
echo "=== CARD"; echo "$CARD"
"$Q" --device null > "$OUT/quaverd.log" 2>&1 & QP=$!
lsp() { timeout 90 "$QJ" jack_lsp "$@" 2>/dev/null; }
for _ in $(seq 150); do lsp | grep -q "^a2j:Virtual Raw MIDI $CARD-0 " && break; sleep 0.2; done
echo "=== LS"; timeout 90 "$QC" ls
echo "=== LSP"; lsp -t -p
CAP=$(lsp | grep "^a2j:Virtual Raw MIDI $CARD-0 .*(capture)" | head -1)
PLAY=$(lsp | grep "^a2j:Virtual Raw MIDI $CARD-0 .*(playback)" | head -1)
echo "=== PORTS"; echo "CAP=$CAP"; echo "PLAY=$PLAY"
# 1. amidi → virmidi → the capture port → jack_midi_dump.
"$QJ" jack_midi_dump > "$OUT/dump.txt" 2>&1 & MP=$!
for _ in $(seq 100); do lsp | grep -q '^midi-monitor:input$' && break; sleep 0.2; done
timeout 90 "$QJ" jack_connect "$CAP" midi-monitor:input; echo "connect exit $?"
amidi -p "hw:$CARD,0" -S '90 3C 7F 80 3C 00'; echo "amidi send exit $?"
sleep 2
stop_pid $MP
echo "=== DUMP"; cat "$OUT/dump.txt"
# 2. jack_midiseq → the playback port → virmidi → amidi -d.
# amidi -t ends it 3 s after the last byte, so jack_midiseq (which loops) stops first.
amidi -p "hw:$CARD,0" -d -t 3 > "$OUT/amidi.txt" 2>&1 & AP=$!
"$QJ" jack_midiseq seq 24000 0 60 8000 > "$OUT/seq.txt" 2>&1 & SP=$!
for _ in $(seq 100); do lsp | grep -q '^seq:out$' && break; sleep 0.2; done
timeout 90 "$QJ" jack_connect seq:out "$PLAY"; echo "connect exit $?"
sleep 2
stop_pid $SP
for _ in $(seq 75); do kill -0 $AP 2>/dev/null || break; sleep 0.2; done
kill -0 $AP 2>/dev/null && { echo "amidi -d still running"; kill -INT $AP; }
wait $AP
echo "=== AMIDI"; tr -d ' \n' < "$OUT/amidi.txt"; echo
# 3. The card goes (as an unplugged USB interface does): its ports leave the graph.
echo "=== REMOVE"
echo snd_virmidi.0 > /sys/bus/platform/drivers/snd_virmidi/unbind; echo "unbind exit $?"
for _ in $(seq 100); do lsp | grep -q "^a2j:Virtual Raw MIDI" || break; sleep 0.2; done
echo "=== AFTER"; lsp -t
# 4. A card plugged in while quaverd runs: its ports join the graph and carry MIDI.
modprobe -r snd-virmidi; modprobe snd-virmidi; echo "reload exit $?"
CARD2=$(awk '/VirMIDI/ {print $1; exit}' /proc/asound/cards)
for _ in $(seq 100); do lsp | grep -q "^a2j:Virtual Raw MIDI $CARD2-0 .*(capture)" && break; sleep 0.2; done
CAP2=$(lsp | grep "^a2j:Virtual Raw MIDI $CARD2-0 .*(capture)" | head -1)
"$QJ" jack_midi_dump > "$OUT/dump2.txt" 2>&1 & MP=$!
for _ in $(seq 100); do lsp | grep -q '^midi-monitor:input$' && break; sleep 0.2; done
timeout 90 "$QJ" jack_connect "$CAP2" midi-monitor:input; echo "connect exit $?"
amidi -p "hw:$CARD2,0" -S 'B0 07 64'; echo "amidi send exit $?"
sleep 2
stop_pid $MP
echo "=== READDED"; echo "CAP2=$CAP2"; cat "$OUT/dump2.txt"
echo "=== SERVING"; timeout 90 "$QC" ls > /dev/null; echo "ls exit $?"
kill -0 $QP && echo "quaverd alive"
stop_pid $QP; echo "QUAVERD_RC=$RC"
echo "=== LOG"; grep 'ALSA MIDI' "$OUT/quaverd.log"
echo "=== END"
"#;

#[test]
fn virmidi_ports_are_jack_midi_ports_both_ways_and_leave_with_their_card() {
    if !skip_unless_available("kernel_alsa_midi") {
        return;
    }
    // quaver-jack runs the libjack.so beside it: this crate's tests may run before any
    // of the jack crate's has put the newest one there.
    quaver_testkit::libjack();
    let guest = Guest::new()
        .modules("snd-virmidi snd-seq-dummy")
        .timeout(Duration::from_secs(300))
        .env("Q", quaverd_bin())
        .env("QC", quaver_bin())
        .env("QJ", quaver_jack_bin());
    let run = guest.run(SCRIPT);
    let out = run.ok();
    eprintln!("{out}");
    let card = section(out, "CARD").trim();
    assert!(!card.is_empty(), "no VirMIDI card:\n{out}");
    // Listed as MIDI ports: by quaver ls, and by jack_lsp as physical, terminal MIDI.
    let ls = section(out, "LS");
    assert!(
        ls.contains(&format!("Virtual Raw MIDI {card}-0 ["))
            && ls.contains(&format!("(capture) - VirMIDI {card}-0[midi]")),
        "{ls}"
    );
    let lsp = section(out, "LSP");
    let ports = section(out, "PORTS");
    let cap = ports
        .lines()
        .find_map(|l| l.strip_prefix("CAP="))
        .unwrap_or("");
    let play = ports
        .lines()
        .find_map(|l| l.strip_prefix("PLAY="))
        .unwrap_or("");
    assert!(
        cap.starts_with(&format!("a2j:Virtual Raw MIDI {card}-0 ["))
            && cap.ends_with(&format!("] (capture) - VirMIDI {card}-0")),
        "{ports}"
    );
    assert!(
        play.ends_with(&format!("] (playback) - VirMIDI {card}-0")),
        "{ports}"
    );
    for (port, dir) in [(cap, "output"), (play, "input")] {
        let block: Vec<&str> = lsp
            .lines()
            .skip_while(|l| *l != port)
            .skip(1)
            .take_while(|l| l.starts_with(char::is_whitespace))
            .collect();
        let block = block.join("\n");
        assert!(block.contains("8 bit raw midi"), "{port}:\n{lsp}");
        assert!(
            block.contains(&format!("properties: {dir},physical,terminal,")),
            "{port}:\n{lsp}"
        );
    }
    assert!(
        lsp.contains("a2j:Midi Through [14] (capture) - Midi Through Port-0"),
        "{lsp}"
    );
    // In: jack_midi_dump printed the two messages amidi wrote, byte for byte.
    let dump = section(out, "DUMP").to_ascii_lowercase();
    let on = dump.find("90 3c 7f");
    let off = dump.find("80 3c 00");
    assert!(
        on.is_some() && off.is_some() && on < off,
        "jack_midi_dump did not print 90 3c 7f then 80 3c 00:\n{out}"
    );
    // Out: amidi read jack_midiseq's note on and off of C4 (velocity 64).
    let amidi = section(out, "AMIDI").trim().to_ascii_uppercase();
    assert!(
        amidi.contains("903C40") && amidi.contains("803C40"),
        "amidi -d did not receive jack_midiseq's notes:\n{out}"
    );
    // The card gone: its ports left the graph; quaverd serves on; Midi Through stayed.
    let remove = section(out, "REMOVE");
    assert!(remove.contains("unbind exit 0"), "{remove}");
    let after = section(out, "AFTER");
    assert!(!after.contains("Virtual Raw MIDI"), "{after}");
    assert!(after.contains("a2j:Midi Through"), "{after}");
    // Plugged in again: back in the graph, and its MIDI reaches JACK.
    let readded = section(out, "READDED");
    assert!(
        readded.contains("CAP2=a2j:Virtual Raw MIDI ") && readded.contains("(capture) - VirMIDI "),
        "{out}"
    );
    assert!(
        readded.to_ascii_lowercase().contains("b0 07 64"),
        "jack_midi_dump did not print the controller sent after the card came back:\n{out}"
    );
    let serving = section(out, "SERVING");
    assert!(
        serving.contains("ls exit 0") && serving.contains("quaverd alive"),
        "{serving}"
    );
    assert!(serving.contains("QUAVERD_RC=0"), "{serving}");
    assert!(section(out, "LOG").contains("left the graph"), "{out}");
}
