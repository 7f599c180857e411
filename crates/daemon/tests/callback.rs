//! Native callback clients against a real daemon: audio through a client's process
//! callback, quantum requests, a hung client that must not disturb the others, a
//! client that vanishes, and bad requests.

use quaver_client::callback::{Mode, ProcessHandler, ProcessScope, RtPriority};
use quaver_client::quaver_protocol::{
    CallbackParams, ChannelMap, ErrorCode, PortDirection, PortParams, StreamParams,
};
use quaver_client::{ClientError, Connection};
use quaver_testkit::{Daemon, WAIT};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Multiplies input 0 by a gain into output 0; counts cycles; remembers frame sizes.
#[derive(Clone, Default)]
struct Probe {
    cycles: Arc<AtomicU64>,
    frames: Arc<AtomicUsize>,
    quanta: Arc<Mutex<Vec<usize>>>,
    hang: Arc<AtomicBool>,
    gain: f32,
}

impl ProcessHandler for Probe {
    fn process(&mut self, scope: &mut ProcessScope<'_>) {
        while self.hang.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let f = scope.frames();
        self.frames.store(f, Ordering::Relaxed);
        let g = self.gain;
        let input: Vec<f32> = scope.input(0).to_vec();
        for (o, i) in scope.output(0).iter_mut().zip(input) {
            *o = i * g;
        }
        self.cycles.fetch_add(1, Ordering::Relaxed);
    }
    fn quantum_changed(&mut self, frames: usize) {
        self.quanta.lock().unwrap().push(frames);
    }
}

fn params(name: &str, quantum: Option<u32>) -> CallbackParams {
    let mut p = CallbackParams::new(name);
    p.inputs.push(PortParams::new("in"));
    p.outputs.push(PortParams::new("out"));
    p.quantum = quantum;
    p
}

fn node_info(
    conn: &mut Connection,
    name: &str,
) -> Option<quaver_client::quaver_protocol::NodeInfo> {
    conn.graph()
        .unwrap()
        .nodes
        .into_iter()
        .find(|n| n.name == name)
}

#[test]
fn audio_flows_through_a_process_callback() {
    let mut d = Daemon::start(&[]);
    let mut conn = d.connect("fx-client");
    let client = conn.create_callback(params("fx", Some(256))).unwrap();
    assert_eq!(client.rate(), 48000);
    assert_eq!(client.ports().len(), 2);
    let probe = Probe {
        gain: 2.0,
        ..Probe::default()
    };
    let active = client.activate(probe.clone(), RtPriority::Off).unwrap();
    // A playback stream into the client's input, a record stream from its output.
    let mut ctl = d.connect("streams");
    let mut rec_p = StreamParams::record("rec", 48000, ChannelMap::mono());
    rec_p.target = Some("fx".into());
    let mut rec = ctl.create_record(rec_p).unwrap();
    let mut play_p = StreamParams::playback("tone", 48000, ChannelMap::mono());
    play_p.target = Some("fx".into());
    play_p.latency_ms = Some(40.0);
    let mut play = ctl.create_playback(play_p).unwrap();
    let g = ctl.graph().unwrap();
    let fx = g.nodes.iter().find(|n| n.name == "fx").unwrap();
    assert_eq!(fx.kind, "client");
    assert!(
        g.links
            .iter()
            .any(|l| l.output_node == "tone" && l.input_node == "fx" && l.input_port == "in")
    );
    assert!(
        g.links
            .iter()
            .any(|l| l.output_node == "fx" && l.output_port == "out" && l.input_node == "rec")
    );
    let feeder = std::thread::spawn(move || {
        let block = vec![0.25f32; 4800];
        for _ in 0..20 {
            play.write(&block).unwrap();
        }
        play
    });
    // Wait until the doubled tone comes out of the callback.
    let mut got = Vec::new();
    let mut buf = vec![0.0f32; 4800];
    let found = wait_until(WAIT, || {
        if let Ok(n) = rec.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.windows(256).any(|w| w.iter().all(|&v| v == 0.5))
    });
    assert!(
        found,
        "the callback's doubled input never reached the recorder"
    );
    let _play = feeder.join().unwrap();
    assert_eq!(
        probe.frames.load(Ordering::Relaxed),
        256,
        "quantum request honoured"
    );
    assert!(probe.cycles.load(Ordering::Relaxed) > 10);
    let info = node_info(&mut ctl, "fx").unwrap().callback.unwrap();
    assert_eq!(info.mode, "sync");
    assert!(info.active);
    assert_eq!(info.quantum, Some(256));
    assert!(info.woken > 10);
    let (_client, _probe) = active.deactivate();
    let info = node_info(&mut ctl, "fx").unwrap().callback.unwrap();
    assert!(!info.active);
    d.stop();
}

#[test]
fn the_smallest_quantum_request_wins_and_clients_see_changes() {
    let mut d = Daemon::start(&[]);
    let mut a_conn = d.connect("a");
    let a = a_conn.create_callback(params("a", Some(512))).unwrap();
    let pa = Probe::default();
    let a_active = a.activate(pa.clone(), RtPriority::Off).unwrap();
    assert!(wait_until(WAIT, || pa.frames.load(Ordering::Relaxed) == 512));
    let mut b_conn = d.connect("b");
    let b = b_conn.create_callback(params("b", Some(128))).unwrap();
    let b_node = b.node();
    let pb = Probe::default();
    let _b_active = b.activate(pb.clone(), RtPriority::Off).unwrap();
    assert!(wait_until(WAIT, || pa.frames.load(Ordering::Relaxed)
        == 128
        && pb.frames.load(Ordering::Relaxed) == 128));
    assert_eq!(d.connect("s").status().unwrap().quantum, 128);
    // Withdrawing the small request brings the larger one back.
    b_conn.set_quantum(b_node, None).unwrap();
    assert!(wait_until(WAIT, || pa.frames.load(Ordering::Relaxed) == 512));
    let seen = pa.quanta.lock().unwrap().clone();
    assert_eq!(seen, vec![512, 128, 512], "every change is announced once");
    drop(a_active);
    d.stop();
}

#[test]
fn a_hung_client_is_moved_to_async_and_the_others_never_miss() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config/quaver");
    std::fs::create_dir_all(&cfg).unwrap();
    // Short, so the end of the test sees the client come back to synchronous mode.
    std::fs::write(cfg.join("quaver.toml"), "[callback]\nrecover_ms = 400\n").unwrap();
    let mut d = Daemon::start_in(dir, &[]);
    let mut good_conn = d.connect("good");
    // A large quantum keeps the good client's deadline (17 ms) far from any
    // scheduling noise of a busy test machine.
    let good = good_conn
        .create_callback(params("good", Some(1024)))
        .unwrap();
    let pg = Probe::default();
    let _good_active = good.activate(pg.clone(), RtPriority::Off).unwrap();
    let mut bad_conn = d.connect("bad");
    let bad = bad_conn.create_callback(params("bad", None)).unwrap();
    let pb = Probe::default();
    let bad_active = bad.activate(pb.clone(), RtPriority::Off).unwrap();
    let mut ctl = d.connect("ctl");
    ctl.link("good", "null-sink").unwrap();
    ctl.link("bad", "null-sink").unwrap();
    assert!(wait_until(WAIT, || pb.cycles.load(Ordering::Relaxed) > 20));
    let good_before = node_info(&mut ctl, "good").unwrap().callback.unwrap();
    pb.hang.store(true, Ordering::Relaxed);
    assert!(
        wait_until(WAIT, || node_info(&mut ctl, "bad")
            .unwrap()
            .callback
            .unwrap()
            .mode
            == "async"),
        "the hung client was never moved to async mode"
    );
    assert_eq!(bad_active.client().mode(), Mode::Async, "and it is told");
    let cycles = pg.cycles.load(Ordering::Relaxed);
    assert!(wait_until(WAIT, || pg.cycles.load(Ordering::Relaxed) > cycles + 50));
    let good_after = node_info(&mut ctl, "good").unwrap().callback.unwrap();
    assert_eq!(
        good_after.xruns, good_before.xruns,
        "the good client missed cycles while the other one hung"
    );
    assert_eq!(good_after.skipped, 0);
    let bad_info = node_info(&mut ctl, "bad").unwrap().callback.unwrap();
    assert!(bad_info.xruns >= 8, "{bad_info:?}");
    assert_eq!(bad_info.async_cause, "hung", "marked as hung: {bad_info:?}");
    // The hang is one run of missed cycles (earlier misses of a loaded machine add theirs).
    assert!(
        bad_info.xrun_events >= 1 && bad_info.xrun_events < bad_info.xruns,
        "{bad_info:?}"
    );
    // It answers in time again: after `recover_ms` of that it is synchronous again,
    // and told so.
    pb.hang.store(false, Ordering::Relaxed);
    assert!(
        wait_until(WAIT, || {
            let c = node_info(&mut ctl, "bad").unwrap().callback.unwrap();
            c.mode == "sync" && c.resynced >= 1
        }),
        "the client never went back to sync: {:?}",
        node_info(&mut ctl, "bad").unwrap().callback
    );
    assert!(wait_until(WAIT, || bad_active.client().mode() == Mode::Sync));
    // The hung client's connection goes away: its node goes with it.
    drop(bad_active);
    drop(bad_conn);
    assert!(wait_until(WAIT, || node_info(&mut ctl, "bad").is_none()));
    let log = d.stop();
    assert!(log.contains("callback node good"), "{log}");
}

const CHILD_ENV: &str = "QUAVER_TEST_CALLBACK_CHILD";

/// The child process of the test below: a callback client that hangs inside its
/// callback after a few cycles and waits to be killed.
fn child_client(socket: &str) {
    let mut conn = Connection::connect(Some(std::path::Path::new(socket)), "victim").unwrap();
    let c = conn.create_callback(params("victim", Some(256))).unwrap();
    let p = Probe::default();
    let _active = c.activate(p.clone(), RtPriority::Off).unwrap();
    while p.cycles.load(Ordering::Relaxed) < 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    p.hang.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_client_killed_inside_its_callback_is_removed_and_the_graph_runs_on() {
    if let Ok(socket) = std::env::var(CHILD_ENV) {
        child_client(&socket);
        return;
    }
    let mut d = Daemon::start(&[]);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_client_killed_inside_its_callback_is_removed_and_the_graph_runs_on",
            "--nocapture",
        ])
        .env(CHILD_ENV, &d.socket)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut ctl = d.connect("ctl");
    assert!(
        wait_until(WAIT, || node_info(&mut ctl, "victim")
            .and_then(|n| n.callback)
            .is_some_and(|c| c.xruns > 0)),
        "the child never hung in its callback"
    );
    quaver_testkit::signal(child.id(), libc::SIGKILL);
    let _ = child.wait();
    assert!(
        wait_until(WAIT, || node_info(&mut ctl, "victim").is_none()),
        "the killed client's node stayed"
    );
    let c0 = ctl.status().unwrap().cycles;
    assert!(wait_until(WAIT, || ctl.status().unwrap().cycles > c0 + 10));
    d.stop();
}

#[test]
fn bad_callback_requests_are_refused_clearly() {
    let mut d = Daemon::start(&[]);
    let mut conn = d.connect("bad-requests");
    let mut p = CallbackParams::new("many");
    p.max_inputs = Some(100_000);
    let e = conn.create_callback(p).unwrap_err();
    assert!(matches!(e, ClientError::InvalidParams(_)), "{e}");
    let mut p = CallbackParams::new("many");
    p.max_inputs = Some(1000);
    match conn.create_callback(p).unwrap_err() {
        ClientError::Server { code, message } => {
            assert_eq!(code, ErrorCode::TooMany);
            assert!(message.contains("limit"), "{message}");
        }
        e => panic!("{e}"),
    }
    let mut p = params("small", None);
    p.max_inputs = Some(3);
    let c = conn.create_callback(p).unwrap();
    let port = conn
        .add_port(c.node(), PortDirection::In, "in2", None)
        .unwrap();
    assert_eq!((port.index, port.channel.as_str()), (1, "AUX1"));
    match conn
        .add_port(c.node(), PortDirection::In, "out", None)
        .unwrap_err()
    {
        ClientError::Server { code, message } => {
            assert_eq!(code, ErrorCode::BadRequest);
            assert!(message.contains("already has a port"), "{message}");
        }
        e => panic!("{e}"),
    }
    conn.add_port(c.node(), PortDirection::In, "in3", None)
        .unwrap();
    match conn
        .add_port(c.node(), PortDirection::In, "in4", None)
        .unwrap_err()
    {
        ClientError::Server { code, .. } => assert_eq!(code, ErrorCode::TooMany),
        e => panic!("{e}"),
    }
    assert!(matches!(
        conn.add_port(c.node(), PortDirection::Out, "a:b", None),
        Err(ClientError::InvalidArgument(_))
    ));
    // Another client may not touch this node's ports.
    let mut other = d.connect("other");
    match other
        .add_port(c.node(), PortDirection::Out, "x", None)
        .unwrap_err()
    {
        ClientError::Server { code, .. } => assert_eq!(code, ErrorCode::NoSuchNode),
        e => panic!("{e}"),
    }
    match other.set_quantum(c.node(), Some(64)).unwrap_err() {
        ClientError::Server { code, .. } => assert_eq!(code, ErrorCode::NoSuchNode),
        e => panic!("{e}"),
    }
    conn.remove_port(c.node(), port.id).unwrap();
    assert!(conn.remove_port(c.node(), port.id).is_err());
    conn.destroy_stream(c.node()).unwrap();
    assert!(node_info(&mut conn, "small").is_none());
    d.stop();
}

#[test]
fn a_watching_connection_hears_about_every_change() {
    let mut d = Daemon::start(&[]);
    let mut w = d.connect("watcher").watch().unwrap();
    assert_eq!(w.next_event(Some(Duration::from_millis(50))).unwrap(), None);
    let mut conn = d.connect("actor");
    let mut p = params("cb", None);
    p.max_outputs = Some(2);
    let c = conn.create_callback(p).unwrap();
    let mut seen = Vec::new();
    let next = |w: &mut quaver_client::GraphWatcher| {
        let e = w.next_event(Some(WAIT)).unwrap().expect("an event");
        (e.event, e.node)
    };
    seen.push(next(&mut w));
    assert_eq!(seen[0], ("node_added".into(), Some(c.node())));
    conn.link("cb", "null-sink").unwrap();
    assert_eq!(next(&mut w), ("links_changed".into(), None));
    conn.add_port(c.node(), PortDirection::Out, "more", None)
        .unwrap();
    assert_eq!(next(&mut w), ("node_changed".into(), Some(c.node())));
    drop(c);
    drop(conn);
    assert_eq!(
        next(&mut w),
        ("node_removed".into(), Some(seen[0].1.unwrap()))
    );
    d.stop();
    assert!(matches!(
        w.next_event(Some(WAIT)),
        Err(ClientError::Disconnected) | Err(ClientError::Protocol(_))
    ));
}

/// Sleeps a fixed time in every callback.
struct Sleeper(Duration);

impl ProcessHandler for Sleeper {
    fn process(&mut self, _scope: &mut ProcessScope<'_>) {
        std::thread::sleep(self.0);
    }
}

#[test]
fn top_shows_every_node_and_a_clients_callback_time() {
    const SLEEP: Duration = Duration::from_micros(500);
    let mut d = Daemon::start(&[]);
    let mut conn = d.connect("top-client");
    let client = conn.create_callback(params("sleepy", Some(1024))).unwrap();
    let _active = client.activate(Sleeper(SLEEP), RtPriority::Off).unwrap();
    conn.link("sleepy:out", "null-sink").unwrap();
    assert!(
        wait_until(WAIT, || node_info(&mut conn, "sleepy")
            .and_then(|n| n.callback)
            .is_some_and(|c| c.woken > 5)),
        "the client never ran"
    );
    let text = quaver_testkit::ok(&d.run(&["top", "--once", "--interval", "0.5"]));
    let header = text.lines().nth(1).unwrap_or_default();
    for col in [
        "S", "ID", "QUANT", "RATE", "WAIT", "BUSY", "W/Q", "B/Q", "ERR", "NAME",
    ] {
        assert!(header.split_whitespace().any(|c| c == col), "{text}");
    }
    let row = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().last() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}: {text}"))
            .to_string()
    };
    assert!(row("sleepy").starts_with("R "), "{text}");
    assert!(row("sleepy").contains(" client "), "{text}");
    assert!(row("null-sink").starts_with("R "), "{text}");
    // JSON lines, one per iteration; a callback's busy time holds its sleep.
    let out =
        quaver_testkit::ok(&d.run(&["top", "--json", "--iterations", "2", "--interval", "0.3"]));
    let frames: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.len(), 2, "{out}");
    let sleepy = frames[1]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "sleepy")
        .unwrap()
        .clone();
    assert_eq!(sleepy["kind"], "client");
    assert!(sleepy["cycles"].as_u64().unwrap() > 0, "{sleepy}");
    assert!(
        sleepy["busy_avg_ns"].as_u64().unwrap() >= SLEEP.as_nanos() as u64,
        "{sleepy}"
    );
    // status carries the same table.
    let status = quaver_testkit::ok(&d.run(&["status"]));
    assert!(
        status.contains("nodes (per cycle") && status.contains("sleepy"),
        "{status}"
    );
    d.stop();
}
