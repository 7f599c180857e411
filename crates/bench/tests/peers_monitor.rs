//! The monitor-latency instrument measures what it claims: against a private quaverd,
//! impulses come back, and a delay injected into the playback client (each impulse
//! written later in the stream than its bookkeeping says) shows up in the measured
//! latency and not in the latency the server reports.

mod common;

use quaver_bench::Ctx;
use quaver_bench::modes::peers::monlat::{self, MonitorOptions, MonitorPoint};
use quaver_bench::tools::rng::Rng;
use quaver_bench::tools::servers::Server;

/// A point at 20 ms in two rounds of one second each.
fn point(server: &Server, inject_ms: u32) -> MonitorPoint {
    let mut o = MonitorOptions::new(true);
    o.seconds = 2.0;
    o.rounds = 2;
    o.inject_delay_ms = inject_ms;
    let mut rng = Rng::new(5);
    let rounds = (0..o.rounds)
        .map(|_| monlat::measure_round(server, 20, &o, &mut rng).expect("monitor latency round"))
        .collect();
    monlat::point(20, rounds)
}

#[test]
fn an_injected_write_delay_shows_up_in_the_measured_latency_only() {
    let _g = common::serial();
    let mut ctx = Ctx::new(common::quaverd_bin(), 5, true);
    let server = Server::quaverd(&mut ctx).expect("quaverd");
    let base = point(&server, 0);
    // 100 ms: far above any scheduling noise, well below the impulse spacing
    // (250–350 ms), so every impulse still pairs with its own capture.
    let late = point(&server, 100);
    for p in [&base, &late] {
        assert!(p.error.is_none(), "{p:?}");
        assert!(p.impulses >= 5, "{p:?}");
        assert_eq!(p.lost, 0, "{p:?}");
        assert!(p.record_latency_ms.is_some(), "{p:?}");
    }
    let (b, l) = (base.measured_ms.unwrap(), late.measured_ms.unwrap());
    // Without injection the sample comes back after it was written, and not later
    // than the stream's whole buffer plus a margin.
    assert!(b.p50 > 0.0 && b.p50 < 100.0, "{base:?}");
    let grew = l.p50 - b.p50;
    assert!(
        (75.0..=125.0).contains(&grew),
        "measured grew by {grew} ms, not ≈ 100"
    );
    let grew_arrival = late.arrival_ms.unwrap().p50 - base.arrival_ms.unwrap().p50;
    assert!((75.0..=125.0).contains(&grew_arrival), "{grew_arrival}");
    // The server cannot know: its reported latency stays where it was.
    let rep = late.reported_ms.unwrap().p50 - base.reported_ms.unwrap().p50;
    assert!(rep.abs() < 25.0, "reported moved by {rep} ms");
}

/// A server killed under the bench is reported with how it ended and, for PulseAudio,
/// the end of its log, instead of only the client's "connection refused".
#[test]
fn a_dead_server_says_how_it_ended() {
    let _g = common::serial();
    let mut ctx = Ctx::new(common::quaverd_bin(), 5, true);
    let mut servers = vec![Server::quaverd(&mut ctx).expect("quaverd")];
    if std::process::Command::new("pulseaudio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        servers.push(Server::pulseaudio(&mut ctx).expect("pulseaudio"));
    } else {
        eprintln!("SKIPPED the PulseAudio half: pulseaudio is not installed");
    }
    for s in &mut servers {
        assert_eq!(s.ended(), None, "running");
        assert!(s.check_alive().is_ok());
        for pid in s.pids() {
            // SAFETY: kill has no memory preconditions; the PID is our own child's.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let t0 = std::time::Instant::now();
        while s.ended().is_none() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let how = s.ended().expect("ended");
        let err = format!("{:#}", s.check_alive().unwrap_err());
        assert!(err.contains(&how), "{err}");
        if how.starts_with("pulseaudio") {
            assert!(how.contains("signal: 9"), "{how}");
            assert!(how.contains("its log ends: "), "{how}");
        } else {
            assert!(how.starts_with("quaverd ended"), "{how}");
        }
    }
}

/// The libpulse capture-path probe (`quaver-bench pulse-probe`, as `peers` runs it),
/// against a private quaverd: every impulse comes back, after it was written and
/// within the streams' buffers, and libpulse's latencies for both sides are there.
/// At 50 ms (a 512-frame quantum, the stream's intake lent to the RT thread, which
/// answers its latency queries at a cycle's start) libpulse's interpolated playback
/// latency agrees with the measured one (write→capture − capture reported): it used
/// to under-report by 16 ms there (10.6 against 26.8), the figures being those of the
/// last cycle's start while libpulse took them for the moment it asked.
#[test]
fn the_libpulse_probe_sees_every_impulse_come_back() {
    if quaver_bench::tools::libpulse::PulseLib::open().is_err() {
        eprintln!("SKIPPED: libpulse.so.0 not installed (Debian: libpulse0)");
        return;
    }
    let _g = common::serial();
    let mut ctx = Ctx::new(common::quaverd_bin(), 6, true);
    let server = Server::quaverd(&mut ctx).expect("quaverd");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_quaver-bench"));
    server.client_env(&mut cmd);
    let out = cmd
        .args([
            "pulse-probe",
            "--latency-ms",
            "50",
            "--seconds",
            "2",
            "--seed",
            "6",
        ])
        .output()
        .expect("running the probe");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: quaver_bench::modes::peers::capture::Round =
        serde_json::from_slice(&out.stdout).expect("the probe's JSON");
    assert!(r.impulses >= 5, "{r:?}");
    assert_eq!(r.lost, 0, "{r:?}");
    assert_eq!(r.write_to_capture_ms.len(), r.impulses, "{r:?}");
    for (i, w) in r.write_to_capture_ms.iter().enumerate() {
        // After the write, and not later than the playback buffer (50 ms) plus the
        // fragment (50 ms) plus a generous margin for a loaded machine.
        assert!(*w > 0.0 && *w < 250.0, "impulse {i}: {w} ms; {r:?}");
    }
    assert!(r.capture_reported_ms.iter().all(|x| x.is_finite()), "{r:?}");
    assert!(
        r.playback_reported_ms
            .iter()
            .all(|x| x.is_finite() && *x > 0.0),
        "{r:?}"
    );
    assert!(r.granted_fragsize > 0, "{r:?}");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let measured = median(
        r.write_to_capture_ms
            .iter()
            .zip(&r.capture_reported_ms)
            .map(|(w, c)| w - c)
            .collect(),
    );
    let reported = median(r.playback_reported_ms.clone());
    // PulseAudio agrees within 0.1 ms; 4 ms leaves room for a loaded machine and is
    // well inside the old error.
    assert!(
        (reported - measured).abs() <= 4.0,
        "libpulse reported {reported:.2} ms of playback latency, {measured:.2} measured; {r:?}"
    );
}
