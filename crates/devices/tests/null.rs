//! The null device against the real monotonic clock.

use quaver_devices::{Device, NullConfig, NullDevice, WaitStatus};
use quaver_dsp::PlanarBuf;
use std::time::Instant;

#[test]
fn real_clock_null_does_not_drift() {
    let q = 256;
    let rate = 48_000;
    let mut dev = NullDevice::new(NullConfig {
        rate,
        capture: true,
        ..NullConfig::default()
    })
    .unwrap();
    let mut buf = PlanarBuf::new(2, q);
    let cycles = 375; // 96 000 frames: 2 s
    let t0 = Instant::now();
    dev.start(q).unwrap();
    let mut xruns = 0;
    // A wakeup more than a period late restarts the time line at that wakeup (the
    // pacer's rule: no burst after a stall of the machine), which moves every later
    // deadline by that lateness: those stalls are the machine's, not drift.
    let period_ns = (q as u64) * 1_000_000_000 / rate as u64;
    let mut restarted_ns = 0u64;
    for _ in 0..cycles {
        if dev.wait(q).unwrap() == WaitStatus::Xrun {
            xruns += 1;
        }
        let late = dev.wakeup_lateness_ns().unwrap();
        if late > period_ns {
            restarted_ns += late;
        }
        dev.read(&mut buf.view_mut(q)).unwrap();
        dev.write(buf.view(q)).unwrap();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let expect = (cycles * q) as f64 / rate as f64;
    let restarted = restarted_ns as f64 / 1e9;
    eprintln!(
        "null: {cycles} cycles took {elapsed:.6} s, nominal {expect:.6} s, stalls that \
         restarted the time line {restarted:.6} s"
    );
    assert_eq!(xruns, 0);
    // Deadlines are absolute, so the error is one wakeup's latency, not 375 of them
    // summed; the upper bound allows for a loaded two-core VM.
    assert!(elapsed >= expect - 0.001, "{elapsed} s < {expect} s");
    assert!(
        elapsed - expect - restarted < 0.020,
        "{elapsed} s vs {expect} s ({restarted} s of stalls)"
    );
    let c = dev.counters();
    assert_eq!(c.wakeups, cycles as u64);
    assert_eq!(c.frames_written, (cycles * q) as u64);
    assert_eq!(c.frames_read, (cycles * q) as u64);
}
