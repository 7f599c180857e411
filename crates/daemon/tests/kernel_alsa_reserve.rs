//! Acceptance 5 of issue 32, on a real kernel ALSA in the QEMU guest: sharing the dummy
//! card through the D-Bus device reservation protocol, with a private session bus
//! (`dbus-daemon`) and a second program (python3-dbus) playing jackd's part with
//! priority 10. Holding `org.freedesktop.ReserveDevice1.Audio<Dummy>` before quaverd
//! starts keeps quaverd off the card (no Dummy sink, the card free for `aplay`) while the
//! loopback card serves; letting go gives quaverd the card. Then, with a stream playing
//! on the dummy card, the other program asks for it (`RequestRelease(10)`): quaverd
//! closes the card and says yes, the program opens it with `aplay`, the stream goes on
//! on the loopback card, and quaverd takes the card back when the name is free.
//! Where jackd (jackd2) is installed, a real `jackd -d alsa -d hw:Dummy` does the same
//! (it asks with priority INT32_MAX). Skipped, loudly, where the rig cannot run.

use quaver_testkit::guest::{Guest, section, skip_unless_available};
use std::time::Duration;

/// The other program: takes the reservation as the spec says (RequestName; if taken,
/// RequestRelease with its priority, then RequestName replacing the owner), serves the
/// reservation object (it never gives the card away), prints HELD or REFUSED, and
/// runs until SIGTERM (its connection closing frees the name).
const HOLDER: &str = r#"
import signal, sys
import dbus, dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

card, prio, app = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
IFACE = "org.freedesktop.ReserveDevice1"
name = f"{IFACE}.Audio{card}"
path = f"/org/freedesktop/ReserveDevice1/Audio{card}"
DBusGMainLoop(set_as_default=True)
bus = dbus.SessionBus()

class Reservation(dbus.service.Object):
    @dbus.service.method(IFACE, in_signature="i", out_signature="b")
    def RequestRelease(self, p):
        print(f"asked to release for priority {p}: no", flush=True)
        return False

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, iface, prop):
        return self.GetAll(iface)[prop]

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        return {"ApplicationName": app, "ApplicationDeviceName": f"hw:{card}",
                "Priority": dbus.Int32(prio)}

Reservation(bus, path)
flags = 4 | 1  # DO_NOT_QUEUE | ALLOW_REPLACEMENT
r = bus.request_name(name, flags)
if r == 3:  # EXISTS
    owner = bus.get_object(name, path, introspect=False)
    ok = owner.RequestRelease(dbus.Int32(prio), dbus_interface=IFACE, timeout=20)
    print(f"RequestRelease({prio}) answered {bool(ok)}", flush=True)
    if not ok:
        print("REFUSED", flush=True)
        sys.exit(1)
    r = bus.request_name(name, flags | 2)  # REPLACE_EXISTING
print("HELD" if r in (1, 4) else f"NOT HELD ({r})", flush=True)
loop = GLib.MainLoop()
GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
loop.run()
"#;

/// The steps, run as root in the guest (`$OUT`, `$QUAVERD` exported).
const SCRIPT: &str = r#"
out=$OUT; holder=$OUT/holder.py
private_runtime; priv=$PRIV
pactl() { timeout 20 env pactl "$@"; }
dbus-daemon --session --fork --address="unix:path=$priv/bus" --print-address=1 --print-pid=1 > "$priv/bus.txt"
export DBUS_SESSION_BUS_ADDRESS=$(sed -n 1p "$priv/bus.txt")
BUSPID=$(sed -n 2p "$priv/bus.txt")
echo "BUS=$DBUS_SESSION_BUS_ADDRESS"
DUMMY=$(awk '$2 == "[Dummy" {print $1}' /proc/asound/cards)
echo "DUMMY=$DUMMY"
until_line() { # file, text: bounded wait until the file has the text
    for _ in $(seq 150); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
    echo "timed out waiting for '$2' in $1"; return 1
}
sinks_until() { # grep -E pattern the sink list must match (1) or not (0)
    for _ in $(seq 150); do
        if pactl list short sinks | grep -qE "$1"; then [ "$2" = 1 ] && return 0
        else [ "$2" = 0 ] && return 0; fi
        sleep 0.2
    done
    echo "timed out waiting for sinks ~ '$1' = $2"; return 1
}
hold() { # log; runs the other program with priority 10
    /usr/bin/python3 "$holder" "$DUMMY" 10 jackd > "$1" 2>&1 & H=$!
    until_line "$1" "HELD\|REFUSED"
}

hold "$out/holder1.log"
echo "=== HOLDER1"; cat "$out/holder1.log"
"$QUAVERD" --realtime-priority 0 2> "$out/quaverd.log" & Q=$!
wait_server
echo "=== KEPT_OFF"; pactl list short sinks
echo "=== DOCTOR_RESERVED"; echo "HOLDERPID=$H"; "$QUAVER" doctor; echo "doctor exit $?"
echo "=== FREE_FOR_APLAY"
fuser /dev/snd/pcmC${DUMMY}D0p; echo "fuser exit $?"
timeout 20 aplay -q -D hw:Dummy,0 -f S16_LE -r 48000 -c 2 -t raw -d 1 /dev/zero; echo "aplay exit $?"
kill $H; wait $H
sinks_until Dummy 1
echo "=== TAKEN"; pactl list short sinks

DSINK=$(pactl list short sinks | awk '/Dummy/ {print $2; exit}')
echo "DSINK=$DSINK"
timeout 120 pacat --playback -d "$DSINK" < /dev/zero & P=$!
for _ in $(seq 100); do pactl list short sink-inputs | grep -q . && break; sleep 0.2; done
sleep 1
echo "=== PLAYING"; pactl list short sink-inputs
echo "=== HELD_BY_QUAVERD"; fuser /dev/snd/pcmC${DUMMY}D0p; echo "fuser exit $?"
hold "$out/holder2.log"
echo "=== HOLDER2"; cat "$out/holder2.log"
echo "=== HANDED_OVER"
pactl list short sinks
timeout 20 aplay -q -D hw:Dummy,0 -f S16_LE -r 48000 -c 2 -t raw -d 1 /dev/zero; echo "aplay exit $?"
echo "=== STREAM_MOVED"; pactl list short sink-inputs; kill -0 $P && echo "pacat alive"
kill $H; wait $H
sinks_until Dummy 1
echo "=== BACK"; pactl list short sinks
echo "=== CARDS_BACK"; pactl list cards | grep -E "Name: alsa_card|Active Profile"
kill $P; wait $P
echo "=== JACKD"
if command -v jackd >/dev/null; then
    jackd -d alsa -d hw:Dummy -r 48000 -P > "$out/jackd.log" 2>&1 & J=$!
    echo "JACKPID=$J"
    for _ in $(seq 300); do fuser /dev/snd/pcmC${DUMMY}D0p 2>/dev/null | grep -qw "${J}m\|$J" && break; sleep 0.2; done
    echo "holding hw:Dummy: $(fuser /dev/snd/pcmC${DUMMY}D0p 2>/dev/null)"
    "$QUAVER" doctor 2>&1 | sed 's/^/doctor: /'
    pactl list short sinks
    kill $J; wait $J; echo "jackd exit $?"
    sinks_until Dummy 1
    echo "after jackd:"; pactl list short sinks
    grep -E "Acquire|Released" "$out/jackd.log"
else
    echo "SKIPPED: no jackd in the guest"
fi
# A card plugged in while the other program holds its name is asked for like one found
# at start: not opened until the name is free.
echo "=== HOTPLUG_HELD"
drv=/sys/bus/platform/drivers/snd_dummy
timeout 20 sh -c "echo snd_dummy.0 > $drv/unbind"; echo "unbind exit $?"
sinks_until Dummy 0
hold "$out/holder3.log"; cat "$out/holder3.log"
timeout 20 sh -c "echo snd_dummy.0 > $drv/bind"; echo "bind exit $?"
echo "DUMMY again: $(awk '$2 == "[Dummy" {print $1}' /proc/asound/cards)"
for _ in $(seq 75); do # until quaverd refused it (or, wrongly, opened it)
    [ "$(grep -c 'card Dummy is reserved by jackd (priority 10); not opened' "$out/quaverd.log")" -ge 2 ] && break
    pactl list short sinks | grep -q Dummy && break
    sleep 0.2
done
pactl list short sinks
echo "=== HOTPLUG_FREE"
kill $H; wait $H
sinks_until Dummy 1
pactl list short sinks
stop_pid $Q; echo "quaverd exit $RC"
kill $BUSPID
echo "=== LOG"; grep -iE "reserv|Dummy|card 1|handed" "$out/quaverd.log"
echo "=== END"
"#;

#[test]
fn a_higher_priority_reservation_keeps_quaverd_off_the_card_and_gets_it_on_request() {
    if !skip_unless_available("kernel_alsa_reserve") {
        return;
    }
    // The guest runs this machine's programs: the bus and the holder's python modules.
    let tools = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import dbus, gi"])
        .status()
        .is_ok_and(|s| s.success())
        && std::process::Command::new("dbus-daemon")
            .arg("--version")
            .output()
            .is_ok();
    if !tools {
        eprintln!("SKIPPED: kernel_alsa_reserve needs dbus-daemon, python3-dbus and python3-gi");
        return;
    }
    let quaverd = quaver_testkit::quaverd_bin();
    assert!(quaverd.exists(), "build the binaries first: {quaverd:?}");
    let guest = Guest::new()
        .timeout(Duration::from_secs(420))
        .env("QUAVERD", &quaverd)
        .env("QUAVER", quaver_testkit::quaver_bin());
    std::fs::write(guest.path("holder.py"), HOLDER).unwrap();
    let run = guest.run(SCRIPT);
    let out = run.output.clone();
    let _ = std::fs::write(
        quaver_testkit::target_dir().join("kernel_alsa_reserve.out"),
        &out,
    );
    assert!(
        run.status.success(),
        "guest failed ({}):\n{out}\n{}",
        run.status,
        run.rig
    );

    // Held by priority 10 before quaverd started: no Dummy sink, the card free.
    assert!(section(&out, "HOLDER1").contains("HELD"), "{out}");
    let kept = section(&out, "KEPT_OFF");
    assert!(
        kept.contains("Loopback"),
        "the loopback card serves:\n{out}"
    );
    assert!(
        !kept.contains("Dummy"),
        "quaverd opened the reserved card:\n{out}"
    );
    // `quaver doctor` names the holder of the card's reservation (its application
    // name and pid, from the session bus) and the card quaverd serves.
    let doctor = section(&out, "DOCTOR_RESERVED");
    let holder = doctor
        .lines()
        .find_map(|l| l.strip_prefix("HOLDERPID="))
        .expect("the holder's pid");
    assert!(
        doctor
            .lines()
            .any(|l| l.starts_with("problem  cards: card ")
                && l.contains(&format!(
                    "(Dummy) is reserved by jackd (pid {holder} (python3)"
                ))),
        "{out}"
    );
    assert!(
        doctor.contains("ok       devices: quaverd serves ") && doctor.contains("Loopback"),
        "{out}"
    );
    assert!(doctor.contains("doctor exit 1"), "{out}");
    let free = section(&out, "FREE_FOR_APLAY");
    assert!(free.contains("aplay exit 0"), "{out}");
    let log = section(&out, "LOG");
    assert!(
        log.contains("card Dummy is reserved by jackd (priority 10); not opened"),
        "{out}"
    );
    // Released: quaverd takes the card.
    // Opened as discovery opens it: the profile's device names.
    assert!(
        section(&out, "TAKEN").contains("Dummy.analog-stereo-sink"),
        "{out}"
    );

    // Requested while a stream plays on it: handed over, the stream moves on.
    assert!(
        section(&out, "HELD_BY_QUAVERD").contains("fuser exit 0"),
        "the dummy card should be open while it plays:\n{out}"
    );
    let h2 = section(&out, "HOLDER2");
    assert!(h2.contains("RequestRelease(10) answered True"), "{out}");
    assert!(h2.contains("HELD"), "{out}");
    let handed = section(&out, "HANDED_OVER");
    assert!(
        handed.contains("aplay exit 0"),
        "the card was not free:\n{out}"
    );
    assert!(!handed.contains("Dummy"), "the Dummy sink stayed:\n{out}");
    let moved = section(&out, "STREAM_MOVED");
    assert!(moved.contains("pacat alive"), "{out}");
    assert!(
        moved.lines().any(|l| l.contains('\t')),
        "no stream left:\n{out}"
    );
    // The name free again: quaverd takes the card back.
    assert!(
        section(&out, "BACK").contains("Dummy.analog-stereo-sink"),
        "{out}"
    );
    let cards = section(&out, "CARDS_BACK");
    assert!(cards.contains("Name: alsa_card.Dummy"), "{out}");
    assert!(cards.contains("Name: alsa_card.Loopback"), "{out}");
    assert!(out.contains("quaverd exit 0"), "{out}");

    // A card plugged in while held: kept off like at start, opened once free.
    let plugged = section(&out, "HOTPLUG_HELD");
    assert!(
        plugged.contains("unbind exit 0")
            && plugged.contains("bind exit 0")
            && plugged.contains("HELD"),
        "{out}"
    );
    assert!(
        !plugged.contains("Dummy.analog-stereo-sink"),
        "a card plugged in was opened while another program held its reservation:\n{out}"
    );
    assert_eq!(
        log.matches("card Dummy is reserved by jackd (priority 10); not opened")
            .count(),
        2,
        "at start and when plugged in:\n{out}"
    );
    assert!(
        section(&out, "HOTPLUG_FREE").contains("Dummy.analog-stereo-sink"),
        "the card plugged in was not opened once free:\n{out}"
    );

    // A real jackd (jackd2), where installed: it asks with its own priority.
    let jack = section(&out, "JACKD");
    if jack.contains("SKIPPED") {
        eprintln!("SKIPPED: no jackd in the guest; the real-jackd step was not run");
        return;
    }
    let pid = jack
        .lines()
        .find_map(|l| l.strip_prefix("JACKPID="))
        .expect("jackd's pid");
    let holding = jack
        .lines()
        .find(|l| l.starts_with("holding hw:Dummy:"))
        .unwrap_or("");
    assert!(
        holding
            .split_whitespace()
            .any(|w| w.trim_end_matches(|c: char| c.is_ascii_alphabetic()) == pid),
        "jackd did not get the card:\n{out}"
    );
    let (during, after) = jack.split_once("after jackd:").expect("after jackd");
    assert!(
        !during
            .lines()
            .any(|l| l.contains('\t') && l.contains("Dummy")),
        "quaverd kept a Dummy sink while jackd had the card:\n{out}"
    );
    assert!(
        after.contains("Dummy"),
        "quaverd did not take the card back:\n{out}"
    );
    assert!(jack.contains("Acquire audio card Audio"), "{out}");
    // `quaver doctor` names jackd holding the card open.
    assert!(
        jack.lines()
            .any(|l| l.starts_with("doctor: problem  cards: card ")
                && l.contains(&format!("(Dummy) held open by pid {pid} (jackd)"))),
        "{out}"
    );
    assert!(
        log.contains("requested with priority 2147483647; closing it"),
        "{out}"
    );
}
