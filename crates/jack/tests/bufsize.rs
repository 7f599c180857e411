//! The buffer size as a server setting (issue 33, item 2): `jack_bufsize N` under
//! `quaver-jack` forces the graph's quantum for everyone and it stays after
//! `jack_bufsize` exits, as on jackd2; running clients get their buffer-size callback;
//! sizes the server cannot run are refused with the code jackd2 gives, harming nobody;
//! `quaver quantum release` gives the quantum back to the clients' requests. The exit
//! codes are compared with a real `jackd -d dummy` when it is installed.

mod common;

use common::*;
use std::process::Output;

/// A python3-jack-client probe: prints every buffer-size callback and how many process
/// cycles it ran, and lives until its stdin closes.
const PROBE: &str = r#"
import sys, threading, jack
c = jack.Client("bsprobe")
cycles = [0]
@c.set_blocksize_callback
def blocksize(n):
    print("blocksize", n, flush=True)
@c.set_process_callback
def process(frames):
    cycles[0] += 1
c.activate()
print("active", c.blocksize, flush=True)
for line in sys.stdin:
    print("cycles", cycles[0], c.blocksize, flush=True)
"#;

impl Probe {
    /// Process cycles the probe has run so far, and its buffer size.
    fn cycles(&mut self) -> (u64, String) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"?\n").unwrap();
        stdin.flush().unwrap();
        let l = self.expect("cycles ");
        let mut w = l.split_whitespace().skip(1);
        (
            w.next().unwrap().parse().unwrap(),
            w.next().unwrap().to_string(),
        )
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

fn quantum(d: &Daemon) -> quaver_client::quaver_protocol::QuantumReport {
    d.connect().quantum().unwrap()
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

/// Both streams, for messages and for what programs print on stderr.
fn both(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn jack_bufsize_sets_the_servers_quantum_and_it_stays_after_it_exits() {
    if !have_tool("jack_bufsize") || !have_python_jack() {
        return;
    }
    let mut d = Daemon::start(&[]);
    let mut probe = Probe::start(d.jack(&[PYTHON, "-c", PROBE]));
    assert_eq!(probe.expect("active "), "active 1024");
    assert_eq!(quantum(&d).source, "default");

    let out = d.run(&["jack_bufsize", "128"]);
    assert_eq!(code(&out), Some(0), "{}", both(&out));
    // jack_bufsize has exited: the size stays, and says why.
    let q = quantum(&d);
    assert_eq!(
        (q.quantum, q.source.as_str(), q.forced),
        (128, "forced", Some(128))
    );
    assert_eq!(ok(&d.run(&["jack_bufsize"])).trim(), "128");
    let shown = ok(&quaver_testkit::Daemon::run(&d, &["quantum"]));
    assert!(
        shown.starts_with("quantum: 128 frames (2.67 ms at 48000 Hz), forced"),
        "{shown}"
    );
    // The running client was told before its first cycle of the new size.
    assert_eq!(probe.expect("blocksize "), "blocksize 128");
    assert_eq!(probe.cycles().1, "128");

    // Sizes the server cannot run: refused, nothing changes, nobody is hurt.
    // 100 and 3 are off the powers of two, 16 and 16384 out of the bounds (32..=8192):
    // libjack's jack_set_buffer_size returns -1, which jack_bufsize reports as
    // "Unknown error -1" and exits with (255), as on jackd2 for a size it refuses.
    for bad in ["100", "3", "16", "16384"] {
        let out = d.run(&["jack_bufsize", bad]);
        assert_eq!(code(&out), Some(255), "{bad}: {}", both(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Unknown error -1"), "{bad}: {err}");
        assert!(
            err.contains(&format!("cannot set the buffer size to {bad}")),
            "{bad}: libjack says why: {err}"
        );
        assert_eq!(quantum(&d).quantum, 128, "{bad} changed the quantum");
    }
    // Beyond jack_bufsize's own range: it refuses before asking (exit 3), as on jackd2.
    let out = d.run(&["jack_bufsize", "1000000"]);
    assert_eq!(code(&out), Some(3), "{}", both(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid buffer size: 1000000"), "{err}");
    let (before, size) = probe.cycles();
    assert_eq!(size, "128");
    assert!(
        wait_until(WAIT, || probe.cycles().0 > before + 10),
        "the probe stopped running"
    );
    assert!(probe.alive());

    // Released: the request rule again (nobody asks, so the default) and the client is
    // told again.
    let shown = ok(&quaver_testkit::Daemon::run(&d, &["quantum", "release"]));
    assert!(shown.contains("quantum: 1024 frames"), "{shown}");
    assert!(shown.contains("default (no client asks"), "{shown}");
    assert_eq!(probe.expect("blocksize "), "blocksize 1024");
    assert_eq!(quantum(&d).forced, None);

    // And forced from the command line, every client follows.
    ok(&quaver_testkit::Daemon::run(
        &d,
        &["quantum", "force", "256"],
    ));
    assert_eq!(probe.expect("blocksize "), "blocksize 256");
    assert_eq!(ok(&d.run(&["jack_bufsize"])).trim(), "256");
    let out = quaver_testkit::Daemon::run(&d, &["quantum", "force", "100"]);
    assert!(!out.status.success());
    assert!(
        both(&out).contains("quaver: quantum 100 is not a power of two"),
        "{}",
        both(&out)
    );
    drop(probe.child.stdin.take());
    let _ = kill(probe.child);
    d.stop();
}

#[test]
fn a_released_quantum_goes_back_to_the_smallest_request() {
    if !have_tool("jack_bufsize") || !have_tool("jack_simple_client") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let client = d.spawn(&["--quantum", "64", "jack_simple_client"]);
    assert!(wait_until(WAIT, || quantum(&d).quantum == 64));
    let q = quantum(&d);
    assert_eq!(q.source, "requested");
    assert_eq!(q.node_name.as_deref(), Some("jack_simple_client"));
    let out = d.run(&["jack_bufsize", "512"]);
    assert_eq!(code(&out), Some(0), "{}", both(&out));
    assert_eq!(quantum(&d).quantum, 512, "forced over the smaller request");
    ok(&quaver_testkit::Daemon::run(&d, &["quantum", "release"]));
    assert_eq!(quantum(&d).quantum, 64, "the request rules again");
    let _ = kill(client);
    d.stop();
}

#[test]
fn jack_bufsize_answers_as_on_jackd2() {
    if !have_tool("jack_bufsize") {
        return;
    }
    let Some(jackd) = Jackd::start("64") else {
        return;
    };
    let mut d = Daemon::start(&[]);
    // (arguments, then `jack_bufsize` alone afterwards): the exit codes and the size
    // left in force must agree. Not compared: sizes off the powers of two, which
    // jackd2's dummy driver runs (a card's driver may not) and quaverd refuses.
    for arg in ["128", "16384", "1000000", "0", "4096"] {
        let j = jackd.run(&["jack_bufsize", arg]);
        let q = d.run(&["jack_bufsize", arg]);
        assert_eq!(
            code(&q),
            code(&j),
            "jack_bufsize {arg}: quaver {} / jackd2 {}",
            both(&q),
            both(&j)
        );
        let j = ok(&jackd.run(&["jack_bufsize"]));
        let q = ok(&d.run(&["jack_bufsize"]));
        assert_eq!(q.trim(), j.trim(), "size after jack_bufsize {arg}");
    }
    d.stop();
}

/// python3-jack-client's `Client.blocksize`: what setting and reading it answer.
const BLOCKSIZE_API: &str = r#"
import sys, time, jack
c = jack.Client("bsapi")
for n in map(int, sys.argv[1:]):
    try:
        c.blocksize = n
        print(n, "ok", c.blocksize, flush=True)
    except jack.JackErrorCode as e:
        print(n, "error", e.code, flush=True)
c.activate()
time.sleep(0.2)
print("active", c.blocksize, flush=True)
"#;

#[test]
fn python_blocksize_answers_as_on_jackd2() {
    if !have_python_jack() {
        return;
    }
    let Some(jackd) = Jackd::start("64") else {
        return;
    };
    // Not 100: jackd2's dummy driver runs it, quaverd refuses it (docs/jack.md).
    let args = [PYTHON, "-c", BLOCKSIZE_API, "128", "0", "16384", "256"];
    let j = jackd.run(&args);
    let d = Daemon::start(&[]);
    let q = d.run(&args);
    assert!(
        j.status.success() && q.status.success(),
        "{}\n{}",
        both(&j),
        both(&q)
    );
    assert_eq!(
        text(&q),
        "128 ok 128\n0 error -1\n16384 error -1\n256 ok 256\nactive 256\n",
        "quaverd"
    );
    assert_eq!(text(&q), text(&j), "the same as jackd2");
}
