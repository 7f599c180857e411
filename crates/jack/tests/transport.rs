//! The JACK transport end to end: jackd2's `jack_transport` (commands on stdin) and
//! `jack_showtime`, and python3-jack-client's transport API, against a private quaverd;
//! the python script's answers are the ones jackd2 gave (docs/engine/transport.md).

mod common;

use common::*;
use quaver_client::ClientError;
use quaver_client::quaver_protocol::message::{ErrorCode, Reply, Request};
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

fn transport(d: &Daemon) -> quaver_client::quaver_protocol::message::TransportInfo {
    match d.connect().request(Request::TransportQuery).unwrap().0 {
        Reply::Transport(t) => t,
        other => panic!("transport_query answered {other:?}"),
    }
}

/// `jack_showtime`'s lines with the times taken out and blanks squeezed:
/// `frame = N state: S [BBT: b|b|tttt]`.
fn showtime_states(out: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = words.iter().position(|w| *w == "state:") else {
            continue;
        };
        let mut s = format!("frame = {} ", words.get(2).copied().unwrap_or(""));
        s.push_str(&words[i..].join(" "));
        if v.last() != Some(&s) {
            v.push(s);
        }
    }
    v
}

#[test]
fn jack_transport_commands_drive_jack_showtime_as_on_jackd2() {
    if !have_tool("jack_transport") || !have_tool("jack_showtime") {
        return;
    }
    let mut d = Daemon::start(&["--quantum", "256"]);
    // To a file: it prints a line every few hundred µs, more than a pipe holds.
    let show_file = d.path("showtime.txt");
    let show = d
        .jack(&["jack_showtime"])
        .stdout(std::fs::File::create(&show_file).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tr = d
        .jack(&["jack_transport"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = tr.stdin.take().unwrap();
    let mut say = |cmd: &str, pause_ms: u64| {
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(Duration::from_millis(pause_ms));
    };
    // Both clients up before the first command.
    assert!(wait_until(WAIT, || {
        let g = d.connect().graph().unwrap();
        ["jack_transport", "showtime"]
            .iter()
            .all(|n| g.nodes.iter().any(|x| x.name == *n))
    }));
    std::thread::sleep(Duration::from_millis(300));
    say("master", 400);
    assert_eq!(transport(&d).valid & 0x10, 0x10, "the master's BBT");
    say("play", 1000);
    let t = transport(&d);
    assert_eq!(t.state, "rolling");
    assert!(t.frame > 0 && t.bar.is_some(), "{t:?}");
    say("stop", 500);
    say("locate 96000", 500);
    let t = transport(&d);
    assert_eq!((t.state.as_str(), t.frame), ("stopped", 96000));
    // 120 bpm at 48 kHz: 24000 frames a beat, 96000 is bar 2, beat 1.
    assert_eq!((t.bar, t.beat, t.tick), (Some(2), Some(1), Some(0)));
    say("tempo 90", 50);
    say("play", 500);
    say("release", 500);
    let t = transport(&d);
    assert_eq!(
        (t.state.as_str(), t.valid & 0x10, t.master),
        ("rolling", 0, None)
    );
    say("quit", 0);
    drop(stdin);
    let tr_out = wait_output(tr, WAIT);
    assert!(tr_out.status.success(), "{tr_out:?}");
    // jack_showtime's stdout is a file, so fully buffered: SIGTERM makes it close and
    // exit, flushing it (a kill would lose the buffer).
    signal(show.id(), libc::SIGTERM);
    let show_out = wait_output(show, WAIT);
    assert!(show_out.status.success(), "{show_out:?}");
    let states = showtime_states(&std::fs::read_to_string(&show_file).unwrap());
    let find = |s: &str| states.iter().position(|l| l.contains(s));
    // What jackd2 printed for the same commands (docs/engine/transport.md): the
    // master's BBT while stopped, then rolling with BBT; after the locate the master's
    // BBT for 96000 (120 bpm, 24000 frames a beat: bar 2, beat 1); at 90 bpm from
    // 96000 (bar 1, beat 4) jack_transport's callback adds 15 ticks a 256-frame cycle;
    // after the release no BBT any more. (One-cycle states such as starting are not
    // required: jack_showtime polls and may miss a 5 ms cycle.)
    let master = find("state: Stopped BBT: 1|1|0000");
    let rolling = find("state: Rolling BBT:");
    assert!(
        master.is_some() && rolling.is_some() && master < rolling,
        "{states:#?}"
    );
    let located = find("frame = 96000 state: Stopped BBT: 2|1|0000");
    let located = located.unwrap_or_else(|| panic!("the locate: {states:#?}"));
    let mut at90 = 0;
    for l in &states[located..] {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.get(4) != Some(&"Rolling") || w.len() < 7 {
            continue;
        }
        let frame: u32 = w[2].parse().unwrap();
        let n = (frame - 96000) / 256;
        if 15 * n < 1920 {
            // jack_transport counts ticks cycle by cycle: a cycle its process thread
            // missed under load leaves it 15 behind for good, as it would on jackd2.
            let tick: u32 = w[6]
                .strip_prefix("1|4|")
                .unwrap_or("x")
                .parse()
                .unwrap_or(u32::MAX);
            assert!(
                tick.is_multiple_of(15) && tick <= 15 * n && 15 * n - tick <= 45,
                "{l}"
            );
            at90 += usize::from(tick == 15 * n);
        }
    }
    assert!(at90 >= 10, "{states:#?}");
    let last = states.last().unwrap();
    assert!(
        last.contains("state: Rolling") && !last.contains("BBT"),
        "{states:#?}"
    );
    d.stop();
}

/// What python3-jack-client answered against `jackd -d dummy -r 48000 -p 256` (run
/// 2026-11-27, docs/engine/transport.md).
const JACKD2_ANSWERS: &str = "\
initial: jack.STOPPED frame=0 rate=True
sync callback called once after registering: True
conditional master: True
second conditional master: False
locate while stopped: True
state after locate: jack.STOPPED
master new_pos after locate: True
bbt at 48000: (1, 3, 0, 120.0)
starting while the slow client is not ready: True
still starting after 0.3 s: (jack.STARTING, 48000)
sync callback saw starting: True
rolling once ready: True
frame advances: True
bbt follows the frame while rolling: True
every client sees the same state: True
stop: True
stopped frame stands still: True
sync timeout of 0.3 s starts without the slow client: True
locate while rolling: True
release_timebase: ok
bbt gone after release: True
after release: (jack.ROLLING, True)
second release: refused code=22
unconditional master: True
bbt back: True
bbt gone after the master closed: True
locate 2**32: OverflowError
reposition with bad bits: accepted
bad reposition not applied: True
still rolling after bad input: True
stopped at the end: True
";

#[test]
fn python_jack_client_gets_jackd2s_transport_answers() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/transport_check.py");
    let mut d = Daemon::start(&["--quantum", "256"]);
    let out = d.run(&["/usr/bin/python3", script.to_str().unwrap()]);
    let stdout = text(&out);
    if out.status.code() == Some(77) {
        eprintln!("SKIPPED: {}", stdout.trim());
        d.stop();
        return;
    }
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, JACKD2_ANSWERS);
    d.stop();
}

#[test]
fn a_locate_beyond_the_32_bit_frame_range_is_refused_and_harms_nobody() {
    let mut d = Daemon::start(&[]);
    let mut c = d.connect();
    let far = c.request(Request::TransportLocate { frame: 1 << 32 });
    match far {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, ErrorCode::BadRequest);
            assert!(
                message.contains("32-bit") && message.contains("EINVAL"),
                "{message}"
            );
        }
        other => panic!("a locate to 2^32 was answered {other:?}"),
    }
    // The server still answers, and a good locate still works.
    c.request(Request::TransportLocate {
        frame: u32::MAX as u64,
    })
    .unwrap();
    c.request(Request::TransportStart).unwrap();
    // Past u32::MAX the frame wraps, as a jack_nframes_t does.
    assert!(wait_until(WAIT, || {
        let t = transport(&d);
        t.state == "rolling" && t.frame < 1 << 20
    }));
    c.request(Request::TransportStop).unwrap();
    assert!(wait_until(WAIT, || transport(&d).state == "stopped"));
    // Timebase requests name a callback node of the connection.
    let e = c.request(Request::SetTimebase {
        node: 9999,
        conditional: false,
    });
    assert!(
        matches!(
            e,
            Err(ClientError::Server {
                code: ErrorCode::NoSuchNode,
                ..
            })
        ),
        "{e:?}"
    );
    d.stop();
}
