//! Unmodified JACK programs from Debian's jackd2 (jack_lsp, jack_connect,
//! jack_disconnect, jack_simple_client, jack_metro, jack_thru, jack_bufsize,
//! jack_iodelay) run
//! through `quaver-jack` against a private quaverd. Each test skips, saying so, when
//! the program is not installed.

mod common;

use common::*;
use quaver_client::quaver_protocol::GraphInfo;
use std::process::Stdio;
use std::time::Duration;

fn linked(g: &GraphInfo, out: &str, inp: &str) -> bool {
    g.links.iter().any(|l| {
        format!("{}:{}", l.output_node, l.output_port) == out
            && format!("{}:{}", l.input_node, l.input_port) == inp
    })
}

#[test]
fn jack_lsp_lists_the_graph_with_physical_ports_and_aliases() {
    if !have_tool("jack_lsp") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let out = ok(&d.run(&["jack_lsp"]));
    let ports: Vec<&str> = out.lines().collect();
    assert_eq!(
        ports,
        [
            "null-sink:playback_FL",
            "null-sink:playback_FR",
            "null-sink:monitor_FL",
            "null-sink:monitor_FR",
            "null-source:capture_FL",
            "null-source:capture_FR"
        ],
        "{out}"
    );
    // jack_lsp filters by substring of the port name.
    let out = ok(&d.run(&["jack_lsp", "-A", "-p", "-t", "playback_FL"]));
    assert!(out.starts_with("null-sink:playback_FL\n"), "{out}");
    assert!(out.contains("   system:playback_1\n"), "{out}");
    assert!(out.contains("input,physical,terminal"), "{out}");
    assert!(out.contains("32 bit float mono audio"), "{out}");
    let out = ok(&d.run(&["jack_lsp", "-p", "null-sink:monitor_FL"]));
    assert!(out.contains("properties: output,\n"), "{out}");
    d.stop();
}

#[test]
fn jack_simple_client_plays_into_the_sink_and_a_kill_removes_it() {
    if !have_tool("jack_simple_client") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let child = d.spawn(&["jack_simple_client"]);
    assert!(
        wait_until(WAIT, || callback_info(&d, "jack_simple_client")
            .is_some_and(|c| c.active && c.woken > 20)),
        "jack_simple_client never ran its process callback:\n{}",
        d.log_text()
    );
    let g = graph(&d);
    assert!(linked(
        &g,
        "jack_simple_client:output1",
        "null-sink:playback_FL"
    ));
    assert!(linked(
        &g,
        "jack_simple_client:output2",
        "null-sink:playback_FR"
    ));
    let node = g
        .nodes
        .iter()
        .find(|n| n.name == "jack_simple_client")
        .unwrap();
    assert_eq!(node.kind, "client");
    assert_eq!(node.callback.as_ref().unwrap().mode, "sync");
    // A crash: the node and its links go away, the graph runs on.
    signal(child.id(), libc::SIGKILL);
    let _ = kill(child);
    assert!(wait_until(WAIT, || callback_info(&d, "jack_simple_client").is_none()));
    let c0 = d.connect().status().unwrap().cycles;
    assert!(wait_until(WAIT, || d.connect().status().unwrap().cycles > c0 + 5));
    d.stop();
}

#[test]
fn jack_connect_and_disconnect_change_quaver_links() {
    if !have_tool("jack_metro") || !have_tool("jack_connect") || !have_tool("jack_disconnect") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let metro = d.spawn(&["jack_metro", "-b", "120"]);
    assert!(wait_until(WAIT, || callback_info(&d, "metro")
        .is_some_and(|c| c.active)));
    // By alias, as scripts written for JACK do.
    ok(&d.run(&["jack_connect", "metro:120_bpm", "system:playback_1"]));
    assert!(linked(&graph(&d), "metro:120_bpm", "null-sink:playback_FL"));
    // Connecting twice is EEXIST, which jack_connect reports as a failure.
    let again = d.run(&["jack_connect", "metro:120_bpm", "null-sink:playback_FL"]);
    assert!(!again.status.success());
    ok(&d.run(&["jack_connect", "metro:120_bpm", "null-sink:playback_FR"]));
    let out = ok(&d.run(&["jack_lsp", "-c", "metro:120_bpm"]));
    assert!(out.contains("   null-sink:playback_FL"), "{out}");
    assert!(out.contains("   null-sink:playback_FR"), "{out}");
    ok(&d.run(&["jack_disconnect", "metro:120_bpm", "null-sink:playback_FL"]));
    let g = graph(&d);
    assert!(!linked(&g, "metro:120_bpm", "null-sink:playback_FL"));
    assert!(linked(&g, "metro:120_bpm", "null-sink:playback_FR"));
    let bad = d.run(&["jack_connect", "metro:120_bpm", "nowhere:nothing"]);
    assert!(!bad.status.success());
    let _ = kill(metro);
    assert!(wait_until(WAIT, || callback_info(&d, "metro").is_none()));
    d.stop();
}

#[test]
fn quantum_requests_reach_jack_programs() {
    if !have_tool("jack_thru") || !have_tool("jack_bufsize") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let thru = d.spawn(&["--quantum", "64", "jack_thru"]);
    assert!(wait_until(WAIT, || callback_info(&d, "jack_thru")
        .is_some_and(|c| c.active && c.woken > 50)));
    assert_eq!(d.connect().status().unwrap().quantum, 64);
    let info = callback_info(&d, "jack_thru").unwrap();
    assert_eq!(info.quantum, Some(64));
    // jack_thru connects the physical capture ports to its inputs and its outputs to
    // the physical playback ports.
    let g = graph(&d);
    assert!(linked(&g, "null-source:capture_FL", "jack_thru:input_1"));
    assert!(linked(&g, "jack_thru:output_2", "null-sink:playback_FR"));
    let out = ok(&d.run(&["jack_bufsize"]));
    assert_eq!(out.trim(), "64");
    let _ = kill(thru);
    // With the request gone the quantum returns to the default.
    assert!(wait_until(WAIT, || d.connect().status().unwrap().quantum == 1024));
    d.stop();
}

#[test]
fn a_stopped_jack_client_goes_async_and_costs_the_others_nothing() {
    if !have_tool("jack_metro") || !have_tool("jack_simple_client") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let good = d.spawn(&["jack_metro", "-b", "100", "-n", "good"]);
    let bad = d.spawn(&["jack_simple_client"]);
    assert!(wait_until(WAIT, || {
        callback_info(&d, "good").is_some_and(|c| c.woken > 20)
            && callback_info(&d, "jack_simple_client").is_some_and(|c| c.woken > 20)
    }));
    let before = callback_info(&d, "good").unwrap();
    // SIGSTOP freezes the client inside (or right before) its callback: a hang.
    signal(bad.id(), libc::SIGSTOP);
    assert!(
        wait_until(WAIT, || callback_info(&d, "jack_simple_client")
            .is_some_and(|c| c.mode == "async")),
        "the stopped client was never moved to async mode"
    );
    let woken = callback_info(&d, "good").unwrap().woken;
    assert!(wait_until(WAIT, || callback_info(&d, "good")
        .is_some_and(|c| c.woken > woken + 50)));
    let after = callback_info(&d, "good").unwrap();
    assert_eq!(
        after.xruns, before.xruns,
        "the good client missed cycles because of the stopped one"
    );
    assert_eq!(after.skipped, 0);
    let status = d.connect().status().unwrap();
    assert!(
        status
            .clients
            .iter()
            .any(|c| c.name == "jack_simple_client")
    );
    signal(bad.id(), libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(100));
    let _ = kill(bad);
    let _ = kill(good);
    d.stop();
}

/// The frames of every "total roundtrip latency" report in jack_iodelay's output.
fn iodelay_reports(out: &str) -> Vec<f64> {
    out.lines()
        .filter(|l| l.contains("total roundtrip latency"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn jack_iodelay_measures_the_sim_loopback_that_the_latency_bench_predicts() {
    if !have_tool("jack_iodelay") || !have_tool("stdbuf") {
        return;
    }
    const Q: usize = 64;
    const P: usize = 256;
    let mut d = Daemon::start(&[
        "--device",
        &format!("sim:rate=48000,period={P},loopback=on"),
        "--quantum",
        &Q.to_string(),
    ]);
    // jack_iodelay prints a report every half second until stopped; line-buffered so the
    // reports reach the pipe before it is killed.
    let mut child = d
        .jack(&["--quantum", "64", "stdbuf", "-oL", "jack_iodelay"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning jack_iodelay");
    let stdout = child.stdout.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let mut s = lines.lock().unwrap();
                s.push_str(&l);
                s.push('\n');
            }
        })
    };
    assert!(
        wait_until(WAIT, || callback_info(&d, "jack_delay")
            .is_some_and(|c| c.active)),
        "jack_iodelay never became active:\n{}",
        d.log_text()
    );
    ok(&d.run(&["jack_connect", "jack_delay:out", "sim-sink:playback_FL"]));
    ok(&d.run(&["jack_connect", "sim-source:capture_FL", "jack_delay:in"]));
    let enough = wait_until(WAIT, || iodelay_reports(&lines.lock().unwrap()).len() >= 6);
    let _ = kill(child);
    let _ = reader.join();
    let out = lines.lock().unwrap().clone();
    assert!(enough, "too few reports from jack_iodelay:\n{out}");
    // `quaver-bench latency` predicts the sim path's server part (ring to ring) as
    // S = q + P (crates/bench/src/modes/latency/): a JACK client reads its input and writes
    // its output in the same cycle, with no ring of its own, so it sees exactly S. The
    // first reports come while jack_iodelay's detector locks on; of the rest, a device
    // xrun of a stalled VM may disturb one or two (the card restarts with the same lead).
    let reports = iodelay_reports(&out);
    eprintln!("jack_iodelay reports: {reports:?}");
    let settled = &reports[reports.len() / 2..];
    let agree = settled.iter().filter(|&&f| f == (Q + P) as f64).count();
    assert!(
        agree * 3 >= settled.len() * 2,
        "jack_iodelay measured {settled:?}, the latency bench predicts {}:\n{out}",
        Q + P
    );
    // The physical ports' latencies (the card's lead P for playback, one quantum for
    // capture) account for all of it: nothing is left for jack_iodelay to call extra.
    // jack_iodelay prints floor(measured − ports) as unsigned: a measurement a hair
    // under 320 frames reads as 2^32 − 1.
    let extra: Vec<i64> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("extra loopback latency:"))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u32>().ok())
        .map(|u| u as i32 as i64)
        .collect();
    eprintln!("jack_iodelay extra loopback latency: {extra:?}");
    let last = extra.last().copied();
    assert!(
        last.is_some_and(|e| e.abs() <= 1),
        "jack_iodelay found latency the ports do not report: {extra:?}\n{out}"
    );
    d.stop();
}
