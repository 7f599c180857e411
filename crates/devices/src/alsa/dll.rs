//! A delay-locked loop that learns a sound card's true clock from (timestamp, hardware
//! position) pairs: how many nanoseconds of `CLOCK_MONOTONIC` one device frame lasts,
//! and when the hardware will reach a given position.
//!
//! The loop is the classic second-order one (a filtered phase plus a filtered period),
//! written over positions rather than fixed periods, because the driver's readings come
//! at irregular positions (every quantum, which changes; xrun restarts). Its state is a
//! reference point `(p_ref, t_ref)` and the period `ns_per_frame`. For a reading
//! `(t, p)`:
//!
//! ```text
//! dp   = p − p_ref                       frames since the last reading
//! pred = t_ref + dp · ns_per_frame        when the loop expected the hardware at p
//! e    = t − pred                          phase error, ns
//! ω    = min(2π · B · dp · ns_per_frame/1e9, ω_max)      loop gain for this interval
//! t_ref = pred + √2·ω · e ,  p_ref = p     phase correction (critically damped)
//! ns_per_frame += ω² · e / dp              period correction
//! ```
//!
//! `B` is the loop bandwidth in Hz: wide ([`BW_START_HZ`]) for the first readings so the
//! loop locks within a second, then narrow ([`BW_LOCKED_HZ`]) so timestamp jitter (tens
//! of µs on a loaded machine, DMA bursts on real cards) barely moves the estimate. The
//! gain per reading is capped at [`OMEGA_MAX`]: with very rare readings (big buffers) a
//! bandwidth in Hz would otherwise make the loop unstable.
//!
//! Arithmetic is f64 on times relative to the last reset, so precision does not depend
//! on the uptime. Pure: no clock reads, no allocation.

use std::f64::consts::{PI, SQRT_2};

/// Bandwidth while locking: settles a few hundred ppm of error within about a second.
pub const BW_START_HZ: f64 = 1.0;
/// Bandwidth once locked: averages jitter over several seconds.
pub const BW_LOCKED_HZ: f64 = 0.05;
/// Readings after a reset before the loop narrows to [`BW_LOCKED_HZ`].
pub const LOCK_AFTER: u32 = 64;
/// Largest loop gain per reading; keeps the loop stable when readings are far apart.
pub const OMEGA_MAX: f64 = 0.5;
/// A reading whose phase error exceeds this is a discontinuity (a missed xrun, a
/// suspended VM): the loop resets instead of being dragged along.
pub const MAX_ERROR_NS: f64 = 20e6;

/// The loop state.
#[derive(Debug, Clone)]
pub struct Dll {
    nominal: f64,
    ns_per_frame: f64,
    t0: u64,
    t_ref: f64,
    p_ref: u64,
    readings: u32,
    primed: bool,
}

impl Dll {
    /// A loop for a device of nominal `rate` Hz; it predicts with the nominal rate until
    /// fed readings.
    pub fn new(rate: u32) -> Self {
        let nominal = 1e9 / rate.max(1) as f64;
        Dll {
            nominal,
            ns_per_frame: nominal,
            t0: 0,
            t_ref: 0.0,
            p_ref: 0,
            readings: 0,
            primed: false,
        }
    }

    /// Restarts the phase at a known point (stream start or xrun restart). The learnt
    /// period is kept: the crystal did not change.
    pub fn reset(&mut self, t_ns: u64, pos: u64) {
        self.t0 = t_ns;
        self.t_ref = 0.0;
        self.p_ref = pos;
        self.primed = true;
    }

    /// Forgets everything, including the learnt period.
    pub fn forget(&mut self) {
        self.ns_per_frame = self.nominal;
        self.readings = 0;
        self.primed = false;
    }

    /// Feeds one reading: the hardware was at frame `pos` at time `t_ns`.
    pub fn update(&mut self, t_ns: u64, pos: u64) {
        if !self.primed || pos < self.p_ref || t_ns < self.t0 {
            self.reset(t_ns, pos);
            return;
        }
        let dp = pos - self.p_ref;
        if dp == 0 {
            return;
        }
        let t = (t_ns - self.t0) as f64;
        let pred = self.t_ref + dp as f64 * self.ns_per_frame;
        let e = t - pred;
        if e.abs() > MAX_ERROR_NS {
            self.reset(t_ns, pos);
            return;
        }
        let bw = if self.readings < LOCK_AFTER {
            BW_START_HZ
        } else {
            BW_LOCKED_HZ
        };
        let omega = (2.0 * PI * bw * dp as f64 * self.ns_per_frame * 1e-9).min(OMEGA_MAX);
        self.t_ref = pred + SQRT_2 * omega * e;
        self.p_ref = pos;
        self.ns_per_frame += omega * omega * e / dp as f64;
        // A period more than 1 % off nominal is not a crystal: clamp while locking.
        self.ns_per_frame = self
            .ns_per_frame
            .clamp(self.nominal * 0.99, self.nominal * 1.01);
        self.readings = self.readings.saturating_add(1);
        // Keep times small: move the origin to the reference point.
        if self.t_ref > 1e12 {
            let shift = self.t_ref.floor();
            self.t0 += shift as u64;
            self.t_ref -= shift;
        }
    }

    /// Estimated nanoseconds per device frame.
    pub fn ns_per_frame(&self) -> f64 {
        self.ns_per_frame
    }

    /// Estimated device rate in Hz.
    pub fn rate_hz(&self) -> f64 {
        1e9 / self.ns_per_frame
    }

    /// Estimated deviation from the nominal rate in ppm (positive: the card is fast).
    pub fn drift_ppm(&self) -> f64 {
        (self.nominal / self.ns_per_frame - 1.0) * 1e6
    }

    /// Readings taken since [`Dll::forget`].
    pub fn readings(&self) -> u32 {
        self.readings
    }

    /// When the hardware reaches frame `pos` (ns on the caller's clock), or `None` before
    /// the first reading.
    pub fn predict_ns(&self, pos: u64) -> Option<u64> {
        if !self.primed {
            return None;
        }
        let dp = pos as f64 - self.p_ref as f64;
        let t = self.t0 as f64 + self.t_ref + dp * self.ns_per_frame;
        Some(t.max(0.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic jitter in ±`amp` ns (xorshift).
    struct Jitter(u64);
    impl Jitter {
        fn next(&mut self, amp: f64) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 % 20_001) as f64 / 10_000.0 - 1.0) * amp
        }
    }

    /// Feeds readings of a card at `rate · (1 + ppm/1e6)` for `secs`, at irregular
    /// intervals of 128…2047 frames, with ± `jitter_ns` on each timestamp.
    fn run(
        dll: &mut Dll,
        rate: u32,
        ppm: f64,
        secs: f64,
        jitter_ns: f64,
        start: (u64, u64),
    ) -> (u64, u64) {
        let true_rate = rate as f64 * (1.0 + ppm * 1e-6);
        let mut j = Jitter(0x9e37_79b9_7f4a_7c15);
        let (t_start, mut pos) = start;
        let p0 = pos;
        let mut t = t_start;
        let mut step = 128u64;
        while ((pos - p0) as f64) < true_rate * secs {
            step = (step * 7 + 331) % 1920 + 128;
            pos += step;
            let exact = t_start as f64 + (pos - p0) as f64 / true_rate * 1e9;
            t = (exact + j.next(jitter_ns)).max(0.0) as u64;
            dll.update(t, pos);
        }
        (t, pos)
    }

    #[test]
    fn locks_onto_a_drifting_card_without_jitter() {
        for ppm in [-300.0, -40.0, 0.0, 75.0, 500.0] {
            let mut dll = Dll::new(48_000);
            dll.reset(1_000_000_000, 0);
            run(&mut dll, 48_000, ppm, 30.0, 0.0, (1_000_000_000, 0));
            let err = dll.drift_ppm() - ppm;
            assert!(err.abs() < 0.01, "{ppm} ppm: estimated {}", dll.drift_ppm());
        }
    }

    #[test]
    fn averages_out_timestamp_jitter() {
        let mut dll = Dll::new(44_100);
        // 3 days of uptime: precision must not depend on the absolute time.
        let t0 = 3 * 86_400 * 1_000_000_000;
        dll.reset(t0, 10_000);
        run(&mut dll, 44_100, 120.0, 60.0, 50_000.0, (t0, 10_000));
        let err = dll.drift_ppm() - 120.0;
        assert!(err.abs() < 1.0, "estimated {} ppm", dll.drift_ppm());
    }

    #[test]
    fn predicts_when_the_hardware_reaches_a_position() {
        let mut dll = Dll::new(48_000);
        dll.reset(0, 0);
        let (t, pos) = run(&mut dll, 48_000, 200.0, 20.0, 20_000.0, (0, 0));
        // One second ahead, the prediction is within 20 µs of the true time.
        let true_rate = 48_000.0 * (1.0 + 200e-6);
        let exact_now = pos as f64 / true_rate * 1e9;
        let target = pos + 48_000;
        let exact = exact_now + 48_000.0 / true_rate * 1e9;
        let got = dll.predict_ns(target).unwrap() as f64;
        assert!((got - exact).abs() < 20_000.0, "off by {} ns", got - exact);
        assert!(t > 0);
    }

    #[test]
    fn follows_a_rate_change_and_survives_discontinuities() {
        let mut dll = Dll::new(48_000);
        dll.reset(0, 0);
        let end = run(&mut dll, 48_000, 50.0, 20.0, 0.0, (0, 0));
        // The card's clock changes (e.g. another rate family or temperature).
        let end = run(&mut dll, 48_000, -150.0, 120.0, 0.0, end);
        assert!((dll.drift_ppm() + 150.0).abs() < 1.0, "{}", dll.drift_ppm());
        // A 2 s gap the positions do not show (a suspended VM): reset, not a wild period.
        let before = dll.ns_per_frame();
        dll.update(end.0 + 2_000_000_000, end.1 + 100);
        assert_eq!(dll.ns_per_frame(), before);
        // Positions going backwards (xrun restart without reset) also reset.
        dll.update(end.0 + 2_100_000_000, 5);
        assert_eq!(dll.ns_per_frame(), before);
        assert_eq!(dll.predict_ns(5), Some(end.0 + 2_100_000_000));
    }

    #[test]
    fn unprimed_loop_predicts_nothing_and_reports_nominal() {
        let mut dll = Dll::new(48_000);
        assert_eq!(dll.predict_ns(100), None);
        assert_eq!(dll.rate_hz().round(), 48_000.0);
        dll.update(5, 10);
        assert_eq!(dll.predict_ns(10), Some(5));
        dll.forget();
        assert_eq!(dll.readings(), 0);
        assert_eq!(dll.predict_ns(10), None);
    }
}
