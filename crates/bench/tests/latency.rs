//! The latency instrument measures what it claims: on the sim card the measured round
//! trip matches the derived chain within one quantum at every quantum, its parts add up,
//! and a delay injected into the client shows up frame for frame.

mod common;

use quaver_bench::Ctx;
use quaver_bench::modes::latency::{self, LatencyOptions, LatencyPath, LatencyResults};

fn run(paths: &[LatencyPath], quanta: &[usize], inject: usize, after_idle: bool) -> LatencyResults {
    let mut ctx = Ctx::new(common::quaverd_bin(), 7, true);
    let mut o = LatencyOptions::new(true);
    o.paths = paths.to_vec();
    o.quanta = quanta.to_vec();
    o.impulses = 6;
    o.inject_delay = inject;
    o.after_idle = after_idle;
    latency::run(&mut ctx, &o).expect("latency run")
}

#[test]
fn sim_round_trip_matches_theory_within_one_quantum_at_every_quantum() {
    let _g = common::serial();
    let quanta = [32, 64, 128, 256, 512, 1024, 2048];
    for after_idle in [false, true] {
        let r = run(&[LatencyPath::Sim], &quanta, 0, after_idle);
        assert_eq!(r.points.len(), quanta.len());
        for p in &r.points {
            let q = p.point.quantum as f64;
            let m = p
                .measured
                .unwrap_or_else(|| panic!("no impulse came back: {p:?}"));
            assert!(p.used >= 3, "too few clean impulses: {p:?}");
            assert_eq!(p.quantum_reported as usize, p.point.quantum, "{p:?}");
            // The theory: client ring (T − q) plus the sim card's q + P.
            assert_eq!(p.theory, (p.client_fill + 256) as i64);
            assert!(
                (m.p50 - p.theory as f64).abs() <= q,
                "after_idle={after_idle} q={q}: measured {} vs theory {}",
                m.p50,
                p.theory
            );
            // The parts add up: M − S is the client-ring term, for every impulse.
            let s = p.measured_server.unwrap();
            assert_eq!(
                m.p50 - s.p50,
                (p.client_fill - p.point.quantum) as f64,
                "{p:?}"
            );
            assert!(p.within_one_quantum);
        }
    }
}

#[test]
fn monitor_round_trip_is_the_client_ring_alone() {
    let _g = common::serial();
    let r = run(&[LatencyPath::Monitor], &[64, 1024], 0, false);
    for p in &r.points {
        assert_eq!(p.theory_server, 0);
        let m = p.measured.expect("impulses came back");
        assert!(
            (m.p50 - p.theory as f64).abs() <= p.point.quantum as f64,
            "{p:?}"
        );
    }
}

#[test]
fn an_injected_client_delay_shows_up_frame_for_frame() {
    let _g = common::serial();
    // 100 frames: not a multiple of any quantum, so it cannot hide in cycle rounding.
    for path in [LatencyPath::Monitor, LatencyPath::Sim] {
        let base = run(&[path], &[64], 0, false);
        let late = run(&[path], &[64], 100, false);
        let (b, l) = (&base.points[0], &late.points[0]);
        assert_eq!(b.theory, l.theory, "theory ignores the injected delay");
        let (bm, lm) = (b.measured.unwrap(), l.measured.unwrap());
        assert_eq!(lm.p50 - bm.p50, 100.0, "{path:?}: {b:?} vs {l:?}");
        assert_eq!(lm.min - bm.min, 100.0, "{path:?}");
        assert_eq!(lm.max - bm.max, 100.0, "{path:?}");
        assert_eq!(late.inject_delay, 100);
    }
}

#[test]
fn larger_requested_latencies_add_exactly_their_ring_depth() {
    let _g = common::serial();
    let mut ctx = Ctx::new(common::quaverd_bin(), 9, true);
    let mut o = LatencyOptions::new(true);
    o.paths = vec![LatencyPath::Sim];
    o.quanta = Vec::new();
    o.requests = vec![(256, 1024), (256, 4096)];
    o.impulses = 4;
    let r = latency::run(&mut ctx, &o).expect("latency run");
    assert_eq!(r.points.len(), 2);
    for p in &r.points {
        // The record stream holds the quantum at 256; the playback stream queues its
        // whole request.
        assert_eq!(p.quantum_reported, 256, "{p:?}");
        assert_eq!(p.client_fill, p.point.request, "{p:?}");
        let m = p.measured.expect("impulses came back");
        assert!((m.p50 - p.theory as f64).abs() <= 256.0, "{p:?}");
    }
}
