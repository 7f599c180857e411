//! The ALSA sequencer bridge from a shell, for the kernel-ALSA guest test
//! (tests/kernel_alsa_seq.rs) and for trying it by hand:
//!
//!     seq_probe [--max-sysex N] < commands
//!
//! Prints the ports found (`port C:P r|- w|- 'client' 'port'`), then `ready`; then every
//! message received (`midi <monotonic ns> C:P <hex>`) and notice (`added …`, `removed
//! C:P`, `send-failed C:P <why>`) as it comes. Reads commands from stdin, one a line:
//! `send C:P <hex bytes>` (prints `queued` or `refused: <why>`), `counters`, `quit`
//! (also at end of input).

use quaver_devices::alsa::seq::{PortId, SeqBridge, SeqConfig, SeqCounters, SeqNotice};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse_hex(words: &[&str]) -> Result<Vec<u8>, String> {
    words
        .iter()
        .map(|w| u8::from_str_radix(w, 16).map_err(|_| format!("'{w}' is not a hex byte")))
        .collect()
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn notice(n: SeqNotice) -> String {
    match n {
        SeqNotice::PortAdded(p) => format!("added {} '{}' '{}'", p.id, p.client_name, p.port_name),
        SeqNotice::PortRemoved(p) => format!("removed {p}"),
        SeqNotice::SendFailed { port, error } => format!("send-failed {port} {error}"),
        SeqNotice::Stopped(why) => format!("stopped {why}"),
    }
}

fn counters(c: &SeqCounters) -> String {
    let g = SeqCounters::get;
    format!(
        "counters received={} input_dropped={} sysex_dropped={} overruns={} not_midi={} sent={} send_failed={}",
        g(&c.received),
        g(&c.input_dropped),
        g(&c.sysex_dropped),
        g(&c.overruns),
        g(&c.not_midi),
        g(&c.sent),
        g(&c.send_failed)
    )
}

fn main() {
    let mut config = SeqConfig::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, n] = args.as_slice()
        && flag == "--max-sysex"
    {
        config.max_sysex = n.parse().expect("--max-sysex takes a number");
    }
    let mut bridge = match SeqBridge::open(config) {
        Ok(b) => b,
        Err(e) => {
            say(format!("open failed: {e}"));
            std::process::exit(1);
        }
    };
    say(format!("client {}", bridge.client()));
    for p in bridge.ports() {
        say(format!(
            "port {} {} {} '{}' '{}'",
            p.id,
            if p.readable { "r" } else { "-" },
            if p.writable { "w" } else { "-" },
            p.client_name,
            p.port_name
        ));
    }
    let mut input = bridge.take_input().expect("input");
    let mut output = bridge.take_output().expect("output");
    let done = Arc::new(AtomicBool::new(false));
    // The consumer a real-time thread would be: drains the queue (here every ms).
    let printer = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                while let Some(m) = input.pop() {
                    let (a, b) = m.slices();
                    say(format!(
                        "midi {} {} {}",
                        m.time_ns,
                        m.port,
                        hex(&[a, b].concat())
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    say("ready".into());
    // Stdin on a thread of its own, so notices print as they come, not at the next line.
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        while let Ok(n) = bridge.notices().try_recv() {
            say(notice(n));
        }
        let line = match lines.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["send", port, bytes @ ..] => {
                let r = port
                    .parse::<PortId>()
                    .and_then(|p| parse_hex(bytes).map(|b| (p, b)))
                    .and_then(|(p, b)| output.send(p, &b).map_err(|e| e.to_string()));
                say(match r {
                    Ok(()) => "queued".into(),
                    Err(e) => format!("refused: {e}"),
                });
            }
            ["counters"] => say(counters(bridge.counters())),
            [] => {}
            ["quit"] => break,
            _ => say(format!("unknown command: {line}")),
        }
    }
    // Let the last messages and notices through before closing.
    std::thread::sleep(Duration::from_millis(200));
    while let Ok(n) = bridge.notices().try_recv() {
        say(notice(n));
    }
    done.store(true, Ordering::Release);
    let _ = printer.join();
    drop(bridge);
    say("closed".into());
}
