//! Freewheel (issue 33, item 6): `jack_freewheel 1` under `quaver-jack` makes the graph
//! run as fast as its clients allow, detached from the devices, and it stays after
//! `jack_freewheel` exits, as on jackd2; every running client gets its freewheel
//! callback; `jack_freewheel 0` returns to the device's pace. The same probe runs
//! against a real `jackd -d dummy` when it is installed.

mod common;

use common::*;
use std::io::Write;
use std::process::Output;

/// A python3-jack-client probe: prints its freewheel callbacks, and on each line of
/// stdin how many process cycles it ran in the next half second.
/// On a line `policy`, the scheduling policy its process thread last ran under.
const PROBE: &str = r#"
import os, sys, time, jack
c = jack.Client("fwprobe")
cycles = [0]
policy = [-1]
@c.set_freewheel_callback
def freewheel(starting):
    print("freewheel", int(starting), flush=True)
@c.set_process_callback
def process(frames):
    cycles[0] += 1
    policy[0] = os.sched_getscheduler(0)
c.activate()
print("active", c.blocksize, c.samplerate, flush=True)
for line in sys.stdin:
    if line.startswith("policy"):
        p = policy[0] & ~0x40000000  # without SCHED_RESET_ON_FORK, which quaver sets
        print("policy", {0: "other", 1: "fifo", 2: "rr"}.get(p, p), flush=True)
        continue
    n = cycles[0]
    time.sleep(0.5)
    print("cycles", (cycles[0] - n) * 2, flush=True)
"#;

impl Probe {
    /// Process cycles per second, over half a second.
    fn rate(&mut self) -> u64 {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"?\n").unwrap();
        stdin.flush().unwrap();
        self.expect("cycles ")[7..].parse().unwrap()
    }

    /// The scheduling policy of its process thread in its latest cycle.
    fn policy(&mut self) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"policy\n").unwrap();
        stdin.flush().unwrap();
        self.expect("policy ")[7..].to_string()
    }

    fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = kill(self.child);
    }
}

/// Real time at the probe's buffer size and rate, in cycles per second.
fn real_rate(active: &str) -> f64 {
    let w: Vec<f64> = active
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    w[1] / w[0]
}

/// What one freewheel sequence measured.
struct Sequence {
    /// Real time at the probe's buffer size and rate, cycles per second.
    real: f64,
    /// Cycles per second while freewheeling.
    fast: u64,
    /// The probe's process thread's policy before, during and after freewheel.
    policies: [String; 3],
}

/// Runs the freewheel sequence against a server: `run` runs a JACK program there.
fn freewheel_sequence(probe: &mut Probe, run: &dyn Fn(&[&str]) -> Output) -> Sequence {
    let real = real_rate(&probe.expect("active "));
    let paced = probe.rate();
    let before = probe.policy();
    let out = run(&["jack_freewheel", "1"]);
    assert!(out.status.success(), "{out:?}");
    // jack_freewheel has exited; freewheel stays, and the client was told.
    assert_eq!(probe.expect("freewheel "), "freewheel 1");
    let fast = probe.rate();
    let during = probe.policy();
    let out = run(&["jack_freewheel", "0"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(probe.expect("freewheel "), "freewheel 0");
    assert!(
        (paced as f64) < real * 1.5,
        "before: {paced} cycles/s, real time is {real}"
    );
    // Its priority comes back from the notification thread: a half second is plenty.
    probe.rate();
    let after = probe.policy();
    Sequence {
        real,
        fast,
        policies: [before, during, after],
    }
}

#[test]
fn jack_freewheel_runs_the_graph_as_fast_as_clients_allow_and_returns() {
    if !have_tool("jack_freewheel") || !have_python_jack() {
        return;
    }
    // The sim card is paced by a clock as a card is, and tells us of its underruns.
    let mut d = Daemon::start(&["--device", "sim"]);
    ok(&quaver_testkit::Daemon::run(
        &d,
        &["quantum", "force", "256"],
    ));
    let mut probe = Probe::start(d.jack(&[PYTHON, "-c", PROBE]));
    let run = |args: &[&str]| d.run(args);
    let real = real_rate(&probe.expect("active "));
    assert_eq!(real, 48000.0 / 256.0);
    let underruns = || -> u64 {
        let st = d.connect().status().unwrap();
        st.devices.iter().map(|dev| dev.underruns).sum()
    };
    // The card's underruns in a half second of plain pacing: what this machine's load
    // costs without any switch (0 on a quiet machine; a loaded one starves the cycle).
    let start = underruns();
    let paced = probe.rate();
    assert!((paced as f64) < real * 1.5, "{paced} cycles/s before");
    let before = underruns();
    let baseline = before - start;
    let out = run(&["jack_freewheel", "1"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(probe.expect("freewheel "), "freewheel 1");
    let q = d.connect().quantum().unwrap();
    assert!(q.freewheel, "the server says it freewheels: {q:?}");
    let shown = ok(&quaver_testkit::Daemon::run(&d, &["quantum"]));
    assert!(shown.contains("freewheeling"), "{shown}");
    let fast = probe.rate();
    assert!(
        fast as f64 > real * 5.0,
        "freewheeling ran {fast} cycles/s, real time is {real}"
    );

    let out = run(&["jack_freewheel", "0"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(probe.expect("freewheel "), "freewheel 0");
    assert!(!d.connect().quantum().unwrap().freewheel);
    let paced = probe.rate();
    assert!(
        (paced as f64) < real * 1.5 && (paced as f64) > real * 0.5,
        "after: {paced} cycles/s, real time is {real}"
    );
    // The devices run again, and neither switch made the card run dry: no more
    // underruns over the two half seconds and the switches than the load alone gave in
    // one half second, twice (exactly none on a quiet machine).
    let during = underruns() - before;
    assert!(
        during <= 2 * baseline,
        "underruns on the sim card: {during} across the switches, {baseline} in a half second without"
    );
    let st = d.connect().status().unwrap();
    assert!(
        st.devices.iter().all(|dev| dev.state == "running"),
        "{:?}",
        st.devices
    );
    probe.stop();
    d.stop();
}

#[test]
fn jack_freewheel_behaves_as_on_jackd2() {
    if !have_tool("jack_freewheel") || !have_python_jack() {
        return;
    }
    let Some(jackd) = Jackd::start("256") else {
        return;
    };
    let mut probe = Probe::start(jackd.cmd(&[PYTHON, "-c", PROBE]));
    let j = freewheel_sequence(&mut probe, &|a| jackd.run(a));
    let (real, fast) = (j.real, j.fast);
    eprintln!(
        "jackd2: real time {real} cycles/s, freewheeling {fast}, process thread {:?}",
        j.policies
    );
    assert!(fast as f64 > real * 5.0, "jackd2: {fast} cycles/s");
    probe.stop();

    let mut d = Daemon::start(&[]);
    ok(&quaver_testkit::Daemon::run(
        &d,
        &["quantum", "force", "256"],
    ));
    // With real-time scheduling asked for, as jackd2's clients have it.
    let mut cmd = d.jack(&[PYTHON, "-c", PROBE]);
    cmd.env("QUAVER_RT_PRIORITY", "19");
    let mut probe = Probe::start(cmd);
    let q = freewheel_sequence(&mut probe, &|a| d.run(a));
    let (real, fast) = (q.real, q.fast);
    eprintln!(
        "quaverd: real time {real} cycles/s, freewheeling {fast}, process thread {:?}",
        q.policies
    );
    assert!(fast as f64 > real * 5.0, "quaverd: {fast} cycles/s");
    probe.stop();
    // As jackd2, the client's process thread leaves real-time scheduling while the
    // graph freewheels and gets it back after.
    if j.policies[0] == "fifo" && q.policies[0] == "fifo" {
        assert_eq!(
            q.policies, j.policies,
            "process thread's policy: quaverd vs jackd2"
        );
    } else {
        eprintln!(
            "SKIPPED: the policy comparison needs SCHED_FIFO for clients (jackd2's {:?}, \
             quaverd's {:?})",
            j.policies, q.policies
        );
    }
    d.stop();
}

/// python3-jack-client's own `Client.set_freewheel`: the client that starts and stops
/// freewheel gets its own callbacks.
const SELF_FREEWHEEL: &str = r#"
import threading, jack
c = jack.Client("fwself")
seen = []
changed = threading.Event()
@c.set_freewheel_callback
def freewheel(starting):
    seen.append(int(starting))
    changed.set()
@c.set_process_callback
def process(frames):
    pass
c.activate()
for on in (True, False):
    changed.clear()
    c.set_freewheel(on)
    called = changed.wait(10)
    print("set", int(on), "called", called, "starting", seen[-1] if seen else None, flush=True)
"#;

#[test]
fn python_set_freewheel_answers_as_on_jackd2() {
    if !have_python_jack() {
        return;
    }
    let Some(jackd) = Jackd::start("256") else {
        return;
    };
    let j = jackd.run(&[PYTHON, "-c", SELF_FREEWHEEL]);
    let mut d = Daemon::start(&[]);
    let q = d.run(&[PYTHON, "-c", SELF_FREEWHEEL]);
    let show = |o: &Output| format!("{o:?}");
    assert!(
        j.status.success() && q.status.success(),
        "{}\n{}",
        show(&j),
        show(&q)
    );
    assert_eq!(
        text(&q),
        "set 1 called True starting 1\nset 0 called True starting 0\n",
        "quaverd"
    );
    assert_eq!(text(&q), text(&j), "the same as jackd2");
    assert!(!d.connect().quantum().unwrap().freewheel);
    d.stop();
}
