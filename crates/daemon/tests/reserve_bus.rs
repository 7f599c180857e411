//! The device reservation protocol against a real `dbus-daemon` (started by the test,
//! on the host): quaverd's reserver takes a free card, refuses a lower priority, hands
//! the card to a higher one (a silent holder counts as a refusal) and takes it back
//! when the name is free; `gdbus` (GLib's
//! D-Bus, another implementation) reads its properties and gets its answers.

use quaver_daemon::reserve::{Acquired, Event, Holder, Reserver, object_path, service_name};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

struct Bus {
    child: Child,
    address: String,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private session bus, or `None` (said loudly) without `dbus-daemon` or `gdbus`.
fn bus() -> Option<Bus> {
    if Command::new("gdbus").arg("help").output().is_err() {
        eprintln!("SKIPPED: gdbus (libglib2.0-bin) is not installed");
        return None;
    }
    let spawned = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIPPED: dbus-daemon cannot be started: {e}");
            return None;
        }
    };
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("dbus-daemon prints its address");
    let address = line.trim().to_string();
    assert!(address.starts_with("unix:"), "dbus-daemon said {line:?}");
    Some(Bus { child, address })
}

/// `gdbus call` on card 1's reservation object; its printed answer.
fn gdbus(bus: &Bus, method: &str, args: &[&str]) -> String {
    let out = Command::new("gdbus")
        .args(["call", "--address", &bus.address, "--dest"])
        .arg(service_name(1))
        .arg("--object-path")
        .arg(object_path(1))
        .arg("--method")
        .arg(method)
        .args(args)
        .output()
        .expect("gdbus runs");
    assert!(
        out.status.success(),
        "gdbus {method} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn acquire_refuse_hand_over_and_take_back() {
    let Some(bus) = bus() else { return };
    let mut ours = Reserver::connect(Some(&bus.address), "quaverd", 0).unwrap();
    assert_eq!(ours.acquire(1, "alsa_card.Dummy").unwrap(), Acquired::Taken);
    assert!(ours.holds(1));

    // Serve ours on its own thread, as quaverd does; report every event and request.
    let (tx, rx) = mpsc::channel::<String>();
    let server = std::thread::spawn(move || {
        loop {
            let t = tx.clone();
            let event = ours.next_event(&mut |card, prio| {
                let _ = t.send(format!("release {card} {prio}"));
                true
            });
            let msg = match event {
                Ok(Some(Event::Free(card))) => {
                    let got = ours.acquire(card, "alsa_card.Dummy");
                    format!("free {card}, acquire: {got:?}")
                }
                Ok(Some(e)) => format!("{e:?}"),
                Ok(None) => continue,
                Err(e) => {
                    let _ = tx.send(format!("ended: {e}"));
                    return;
                }
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });

    // Another implementation reads the properties and is refused below our priority.
    let app = gdbus(
        &bus,
        "org.freedesktop.DBus.Properties.Get",
        &["org.freedesktop.ReserveDevice1", "ApplicationName"],
    );
    assert_eq!(app, "(<'quaverd'>,)");
    let all = gdbus(
        &bus,
        "org.freedesktop.DBus.Properties.GetAll",
        &["org.freedesktop.ReserveDevice1"],
    );
    assert!(
        all.contains("'ApplicationDeviceName': <'alsa_card.Dummy'>"),
        "{all}"
    );
    assert!(all.contains("'Priority': <0>"), "{all}");
    let intro = gdbus(&bus, "org.freedesktop.DBus.Introspectable.Introspect", &[]);
    assert!(intro.contains("RequestRelease"), "{intro}");
    assert_eq!(
        gdbus(
            &bus,
            "org.freedesktop.ReserveDevice1.RequestRelease",
            &["--", "-1"]
        ),
        "(false,)"
    );

    // A lower priority is refused and told who holds the card.
    let mut low = Reserver::connect(Some(&bus.address), "low", -5).unwrap();
    assert_eq!(
        low.acquire(1, "low").unwrap(),
        Acquired::Refused(Holder {
            application: Some("quaverd".into()),
            priority: Some(0),
        })
    );
    assert!(!low.holds(1));

    // A higher priority (jackd's 10) asks; ours closes the card and says yes.
    let mut jack = Reserver::connect(Some(&bus.address), "jackd", 10).unwrap();
    assert_eq!(jack.acquire(1, "jack").unwrap(), Acquired::Taken);
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "release 1 10");
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "HandedOver(1)");
    assert_eq!(
        rx.recv_timeout(WAIT).unwrap(),
        "Lost { card: 1, lent: true }"
    );
    // The bus made jackd the owner (RequestName answered PRIMARY_OWNER).
    assert!(jack.holds(1));
    // A holder that never answers (this one serves nothing) counts as a refusal after
    // the call's time limit.
    let mut late = Reserver::connect(Some(&bus.address), "late", 20).unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(
        late.acquire(1, "late").unwrap(),
        Acquired::Refused(Holder {
            application: None,
            priority: None,
        })
    );
    assert!(t0.elapsed() < WAIT, "{:?}", t0.elapsed());
    assert!(!late.holds(1));

    // jackd lets go: ours takes the card back.
    jack.release(1).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), "free 1, acquire: Ok(Taken)");
    let app = gdbus(
        &bus,
        "org.freedesktop.DBus.Properties.Get",
        &["org.freedesktop.ReserveDevice1", "ApplicationName"],
    );
    assert_eq!(app, "(<'quaverd'>,)");
    drop(low);
    // The bus going away ends the serving thread with an error, not a hang.
    drop(bus);
    let last = rx.recv_timeout(WAIT).unwrap();
    assert!(last.starts_with("ended"), "{last}");
    server.join().unwrap();
}
