//! Playing a received stream at its sender's pace.
//!
//! A sender's clock is never exactly the receiver's: a sender 100 ppm fast sends 0.1 ms
//! of audio per second more than the receiver plays, so its jitter buffer grows (latency
//! creeps up until the buffer overflows and restarts), and a slow one drains it into an
//! underrun every few minutes. [`PlayoutSteer`] watches the buffer's level and says how
//! fast to consume the stream so that the level stays where it settled after the start:
//! the receiver then resamples by that factor.
//!
//! Two choices keep it from costing what it need not:
//! - It does nothing until the level has clearly moved (more than [`DEADBAND_S`] or a
//!   quarter of the target, whichever is more) or the sender's clock is clearly off
//!   ([`ENGAGE_PPM`], from [`crate::ClockDrift`]'s estimate). Streams on one clock (two
//!   daemons on one host, AES67 devices on one PTP clock) stay on the direct path,
//!   bit-exact and without a resampler's cost; once engaged it stays engaged for the
//!   stream (the clocks do not converge later).
//! - The level is smoothed (two stages of half a second) before the loop sees it: a
//!   buffer fed 20 ms packets and read in 21.3 ms cycles reads as a sawtooth of a
//!   packet's size beating every 0.32 s, which a loop steering on the raw reading would
//!   turn into a wobble of the pitch (one stage of a second left 470 ppm of it). The
//!   loop itself is slow (it settles in about a minute; seeded by the arrival times'
//!   estimate, within seconds), as network jitter is large beside the drift it
//!   corrects.

/// Time constant of each of the level's two smoothing stages, in seconds.
pub const SMOOTH_S: f64 = 0.5;

/// Proportional gain, per second of level error.
pub const KP: f64 = 0.2;

/// Integral gain, per second² (with [`KP`], critically damped at 0.1 rad/s), while the
/// loop has no measurement of the clocks to go by. Twice as fast (0.5 and 0.0625)
/// swung the estimate by 1000 ppm within seconds when a sender hiccup moved the level
/// by 10 ms in a loaded run.
pub const KI: f64 = 0.01;

/// Integral gain, per second², on top of the arrival times' drift estimate (fed
/// forward): the integral then learns only what that estimate cannot see (the
/// receiver's card against its monotonic clock), and a level shift of a couple of
/// milliseconds (a sender re-phasing its packets after an xrun) moves the rate by
/// ppm, not by the 76 ppm the full gain gives it (a unit test below).
pub const KI_TRIM: f64 = 0.001;

/// Most the proportional part moves the rate from the loop's estimate either way: a
/// level that jumps (a sender's hiccup) is paid back slowly, not by bending the pitch
/// (500 ppm is under a cent).
pub const MAX_PROPORTIONAL: f64 = 0.0005;

/// Most the consumption rate moves from nominal either way: beyond any crystal (and
/// 44.1 kHz streams nominally at 48 kHz are not drift; the resampler's nominal ratio
/// takes those).
pub const MAX_CORRECTION: f64 = 0.005;

/// Smallest level error, in seconds, that engages the loop.
pub const DEADBAND_S: f64 = 0.010;

/// A drift estimate this large (ppm) engages the loop before the level has moved.
pub const ENGAGE_PPM: f64 = 200.0;

/// Seconds of readings after a start before the level to hold is taken: the buffer has
/// just filled to its target and the first packets' timing is the least steady.
pub const SETTLE_S: f64 = 2.0;

/// A level that moves this far (seconds of audio) within [`STEP_WINDOW_S`] has stepped:
/// the sender lost time in an xrun, or a route changed. Drift moves it by a millisecond
/// a second at most (1000 ppm), so a step is not drift: the loop takes a new level to
/// hold, or — going by the arrival times' estimate — pays the step back through its
/// proportional term and integrates nothing while the level is this far from the one
/// held. Integrated, a
/// 29 ms step pulled the estimate 2000 ppm off within seconds (seen with a sender whose
/// card had an xrun); re-held, every event moved the latency for good.
pub const STEP_S: f64 = 0.005;

/// The span over which [`STEP_S`] is measured, seconds.
pub const STEP_WINDOW_S: f64 = 1.0;

/// Steers the playout rate of one received stream (no allocation, for the RT side).
#[derive(Debug, Clone, PartialEq)]
pub struct PlayoutSteer {
    /// The buffer's target, frames (the dead band is at least a quarter of it).
    target: f64,
    rate: f64,
    /// The level after the first smoothing stage, and after the second, frames.
    level: Option<(f64, f64)>,
    /// The level to hold, taken [`SETTLE_S`] after a start.
    hold: Option<f64>,
    /// Seconds of readings since the start.
    age: f64,
    /// The integral: with no drift estimate, the loop's estimate of the sender's rate
    /// over ours, minus one; with one, what it adds to that estimate.
    integral: f64,
    /// The arrival times' latest drift estimate, relative (fed forward), once engaged.
    feed: Option<f64>,
    engaged: bool,
    /// The first stage's level at the start of the current step window, and the window's
    /// age so far.
    mark: Option<(f64, f64)>,
}

impl PlayoutSteer {
    /// A loop for a buffer whose target is `target` frames at `rate` Hz.
    pub fn new(target: usize, rate: u32) -> Self {
        PlayoutSteer {
            target: target as f64,
            rate: rate.max(1) as f64,
            level: None,
            hold: None,
            age: 0.0,
            integral: 0.0,
            feed: None,
            engaged: false,
            mark: None,
        }
    }

    /// The buffer started over (an underrun, a new stream from the same sender): a new
    /// level to hold, the estimate of the clocks kept.
    pub fn restart(&mut self) {
        self.level = None;
        self.hold = None;
        self.age = 0.0;
        self.mark = None;
    }

    /// Whether the loop steers (the stream goes through the resampler).
    pub fn engaged(&self) -> bool {
        self.engaged
    }

    /// The loop's estimate of the sender's clock against ours, in ppm (positive: the
    /// sender runs fast); 0 until engaged.
    pub fn estimate_ppm(&self) -> f64 {
        (self.feed.unwrap_or(0.0) + self.integral) * 1e6
    }

    /// The level held, minus the smoothed level now, in frames (`None` before it is
    /// taken): how far the loop has let it wander.
    pub fn error_frames(&self) -> Option<f64> {
        Some(self.level?.1 - self.hold?)
    }

    /// The level held, frames (`None` before it is taken).
    pub fn held(&self) -> Option<f64> {
        self.hold
    }

    /// The buffer was made `frames` emptier on purpose (frames dropped after the
    /// receiver's own stall): the smoothed level follows at once, so the loop sees no
    /// step.
    pub fn shift(&mut self, frames: f64) {
        if let Some((f, l)) = &mut self.level {
            *f -= frames;
            *l -= frames;
        }
        if let Some((at, _)) = &mut self.mark {
            *at -= frames;
        }
    }

    /// Takes one reading: `buffered` frames in the buffer, `dt` seconds after the last
    /// reading, and the sender's drift estimate in ppm where there is one. Returns how
    /// many stream frames to consume per frame played, relative to nominal: above 1
    /// when the buffer grows. Exactly 1 while not engaged.
    pub fn update(&mut self, buffered: usize, dt: f64, drift_ppm: Option<f64>) -> f64 {
        let x = buffered as f64;
        let a = (dt / SMOOTH_S).min(1.0);
        let (first, level) = match self.level {
            None => (x, x),
            Some((f, l)) => {
                let f = f + (x - f) * a;
                (f, l + (f - l) * a)
            }
        };
        self.level = Some((first, level));
        let drift = drift_ppm
            .filter(|p| p.abs() <= MAX_CORRECTION * 1e6)
            .map(|p| p * 1e-6);
        if self.engaged {
            self.feed_forward(drift, true);
        }
        if self.stepped(first, dt) && self.feed.is_none() {
            // Settle on the new level as after a start. Going by the arrival times'
            // estimate the level held stays: the proportional term pays a step back (at
            // most [`MAX_PROPORTIONAL`], inaudible) and the integral waits it out.
            self.restart();
            return self.settled();
        }
        self.age += dt;
        if self.age < SETTLE_S {
            return self.settled();
        }
        let hold = *self.hold.get_or_insert(level);
        let err = (level - hold) / self.rate;
        if !self.engaged {
            let deadband = DEADBAND_S.max(self.target / self.rate / 4.0);
            let off = drift.filter(|p| p.abs() >= ENGAGE_PPM * 1e-6);
            if err.abs() <= deadband && off.is_none() {
                return 1.0;
            }
            self.engaged = true;
            // Start from what the arrival times say of the clocks, where they say it.
            self.feed_forward(drift, false);
            // Hold the level where it is: paying back what drifted in before (13 ms in
            // a run engaged late) wound the estimate 900 ppm past the sender's.
            self.hold = Some(level);
            return self.settled();
        }
        // With the arrival times' estimate, only a level near the one held says anything
        // about the rest: a step (a sender's xrun, a shared stall) integrated pulled the
        // estimate 2000 ppm off. Without it the integral must learn the whole drift.
        if err.abs() < STEP_S || self.feed.is_none() {
            let ki = if self.feed.is_some() { KI_TRIM } else { KI };
            self.integral = (self.integral + ki * err * dt).clamp(-MAX_CORRECTION, MAX_CORRECTION);
        }
        let p = (KP * err).clamp(-MAX_PROPORTIONAL, MAX_PROPORTIONAL);
        1.0 + (p + self.estimate_ppm() * 1e-6).clamp(-MAX_CORRECTION, MAX_CORRECTION)
    }

    /// Takes the arrival times' latest estimate as the rate to go by. The first one
    /// after the loop ran without (`learned`: the integral holds the drift) takes over
    /// what the integral learned, so the rate does not count the drift twice.
    fn feed_forward(&mut self, drift: Option<f64>, learned: bool) {
        let Some(d) = drift else { return };
        if self.feed.is_none() && learned {
            self.integral -= d;
            if self.integral.abs() > MAX_CORRECTION {
                self.integral = 0.0;
            }
        }
        self.feed = Some(d);
    }

    /// Whether the first stage's level moved by [`STEP_S`] or more within the step
    /// window that ends with this reading.
    fn stepped(&mut self, first: f64, dt: f64) -> bool {
        let (at, span) = self.mark.get_or_insert((first, 0.0));
        *span += dt;
        if (first - *at).abs() >= STEP_S * self.rate {
            return true;
        }
        if *span >= STEP_WINDOW_S {
            self.mark = Some((first, 0.0));
        }
        false
    }

    /// The factor while the level settles: the estimate so far (1 before engaging).
    fn settled(&self) -> f64 {
        if self.engaged {
            1.0 + (self.estimate_ppm() * 1e-6).clamp(-MAX_CORRECTION, MAX_CORRECTION)
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender `drift` fast (relative) sending `packet`-frame packets that arrive with
    /// up to `jitter` frames of delay; a receiver reading `q` frames a cycle at the
    /// factor the loop says for `seconds`. Returns the loop, the factors of the last
    /// minute, and the worst smoothed level error in it.
    fn run(
        drift: f64,
        packet: u64,
        q: u64,
        jitter: u64,
        seconds: u64,
    ) -> (PlayoutSteer, Vec<f64>, f64) {
        let rate = 48_000u64;
        let target = 2_880; // 60 ms
        let mut steer = PlayoutSteer::new(target, rate as u32);
        // Arrival of packet k (receiver frames): sent at k·packet sender frames.
        let arrival = |k: u64| {
            let sent = (k * packet) as f64 / (1.0 + drift);
            sent as u64 + (k * 7919 + 13) % (jitter + 1)
        };
        let (mut next, mut received, mut consumed) = (0u64, 0u64, 0.0f64);
        // Prebuffer: play once the target is in.
        while received < target as u64 {
            received += packet;
            next += 1;
        }
        let start = arrival(next - 1);
        let dt = q as f64 / rate as f64;
        let mut factors = Vec::new();
        let mut worst = 0.0f64;
        for n in 0..seconds * rate / q {
            let now = start + n * q;
            while arrival(next) <= now {
                received += packet;
                next += 1;
            }
            let buffered = received as f64 - consumed;
            assert!(buffered > 0.0, "underrun at {n}");
            let f = steer.update(buffered as usize, dt, None);
            consumed += q as f64 * f;
            if now - start > (seconds - 60) * rate {
                factors.push(f);
                if let Some(e) = steer.error_frames() {
                    worst = worst.max(e.abs());
                }
            }
        }
        (steer, factors, worst)
    }

    #[test]
    fn a_drifting_sender_is_followed_and_the_level_held_within_two_milliseconds() {
        for drift in [300e-6, -300e-6, 2000e-6] {
            // 20 ms packets read in 21.3 ms cycles: the sawtooth beat.
            // 300 ppm takes 50 s to leave the dead band, then about a minute to settle.
            let (steer, factors, worst) = run(drift, 960, 1024, 96, 300);
            assert!(steer.engaged());
            let mean = factors.iter().sum::<f64>() / factors.len() as f64;
            assert!(
                (mean - (1.0 + drift)).abs() < 10e-6,
                "{drift}: mean factor {mean}"
            );
            let ripple = factors.iter().map(|f| (f - mean).abs()).fold(0.0, f64::max);
            // 600 ppm is a cent: a wobble that slow is far below hearing (about 5 cents).
            assert!(ripple < 600e-6, "{drift}: ripple {ripple}");
            assert!(worst < 96.0, "{drift}: level error {worst} frames (2 ms)");
        }
    }

    #[test]
    fn one_clock_never_engages_and_stays_exact() {
        let (steer, factors, _) = run(0.0, 48, 256, 480, 120);
        assert!(!steer.engaged());
        assert!(factors.iter().all(|&f| f == 1.0));
        // Nor does the sawtooth of big packets.
        let (steer, _, _) = run(0.0, 960, 1024, 96, 120);
        assert!(!steer.engaged());
    }

    /// A sender at +500 ppm, its arrival times' estimate saying so, whose level drops by
    /// `shift` seconds of audio at 30 s; 120 s of 1024-frame cycles. Returns the loop and
    /// the largest error of its estimate after `from` seconds, ppm.
    fn shifted(shift: f64, from: f64) -> (PlayoutSteer, f64) {
        let rate = 48_000.0;
        let mut s = PlayoutSteer::new(2_880, 48_000);
        let dt = 1024.0 / rate;
        let (mut level, mut worst) = (2_880.0f64, 0.0f64);
        for n in 0..(120.0 / dt) as usize {
            let t = n as f64 * dt;
            if (30.0..30.0 + dt).contains(&t) {
                level -= shift * rate;
            }
            // The arrival times' estimate engages the loop from the start.
            let f = s.update(level as usize, dt, Some(500.0));
            level += 1024.0 * (1.0005 - f);
            if t > from {
                worst = worst.max((s.estimate_ppm() - 500.0).abs());
            }
        }
        assert!(s.engaged());
        (s, worst)
    }

    /// A sender at +500 ppm whose card loses 29 ms once (an xrun): the loop does not
    /// read the step as drift, and pays it back.
    #[test]
    fn a_step_in_the_level_is_not_drift() {
        let (s, worst) = shifted(0.029, 20.0);
        assert!(worst < 150.0, "estimate off by {worst} ppm after the step");
        // And the level it held before the step is back 90 s after it (paid back at
        // 500 ppm at most: 58 s for 29 ms), so the latency did not move for good.
        let e = s.error_frames().expect("a level held");
        assert!(e.abs() < 96.0, "level {e} frames off the one held");
    }

    #[test]
    fn a_mature_drift_estimate_engages_at_once_and_seeds_the_loop() {
        let mut s = PlayoutSteer::new(2_880, 48_000);
        let dt = 1024.0 / 48_000.0;
        for _ in 0..200 {
            s.update(2_880, dt, Some(50.0));
        }
        assert!(!s.engaged(), "50 ppm is within the dead band's reach");
        let f = s.update(2_880, dt, Some(900.0));
        assert!(s.engaged());
        assert!((f - 1.0009).abs() < 1e-6, "{f}");
        // A restart keeps the estimate.
        s.restart();
        assert!((s.update(1_000, dt, None) - 1.0009).abs() < 1e-6);
    }

    /// A sender at +500 ppm, measured as such, whose packets shift 2 ms later for good
    /// (re-phased after an xrun: below a step): the rate moves by 7.6 ppm, where the
    /// full integral gain moved it by 76 in this test.
    #[test]
    fn a_small_shift_with_a_drift_estimate_barely_moves_the_rate() {
        let (_, worst) = shifted(0.002, 10.0);
        assert!(worst < 30.0, "estimate off by {worst} ppm");
    }

    /// Engaged by the level alone, the loop learns the drift; the arrival times'
    /// estimate arriving later takes over without counting it twice.
    #[test]
    fn a_late_drift_estimate_takes_over_from_the_integral() {
        let rate = 48_000.0;
        let mut s = PlayoutSteer::new(2_880, 48_000);
        let dt = 1024.0 / rate;
        let mut level = 2_880.0f64;
        for n in 0..(200.0 / dt) as usize {
            let t = n as f64 * dt;
            let drift = (t > 150.0).then_some(800.0);
            let f = s.update(level as usize, dt, drift);
            level += 1024.0 * (1.0008 - f);
            if t > 140.0 {
                let e = s.estimate_ppm();
                assert!((e - 800.0).abs() < 60.0, "{t:.1} s: estimate {e} ppm");
            }
        }
    }
}
