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
    for _ in 0..cycles {
        if dev.wait(q).unwrap() == WaitStatus::Xrun {
            xruns += 1;
        }
        dev.read(&mut buf.view_mut(q)).unwrap();
        dev.write(buf.view(q)).unwrap();
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let expect = (cycles * q) as f64 / rate as f64;
    eprintln!("null: {cycles} cycles took {elapsed:.6} s, nominal {expect:.6} s");
    assert_eq!(xruns, 0);
    // Deadlines are absolute, so the error is one wakeup's latency, not 375 of them
    // summed; the upper bound allows for a loaded two-core VM.
    assert!(elapsed >= expect - 0.001, "{elapsed} s < {expect} s");
    assert!(elapsed - expect < 0.020, "{elapsed} s vs {expect} s");
    let c = dev.counters();
    assert_eq!(c.wakeups, cycles as u64);
    assert_eq!(c.frames_written, (cycles * q) as u64);
    assert_eq!(c.frames_read, (cycles * q) as u64);
}
