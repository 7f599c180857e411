//! What packets' arrival times, set against their RTP timestamps, say about the network
//! and the sender: RFC 3550's interarrival jitter (6.4.1, A.8) and the sender's clock
//! drift against the receiver's.
//!
//! Both take times in frames of the stream's rate: the arrival on the receiver's clock
//! (any origin) and the packet's extended RTP timestamp. Neither allocates, locks or
//! makes a system call, so both run on the real-time thread inside the jitter buffer.

/// RFC 3550's interarrival jitter estimate: the mean deviation of the difference in
/// transit time between consecutive packets, smoothed with gain 1/16.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InterarrivalJitter {
    /// The previous packet's transit time (arrival minus timestamp), if any.
    transit: Option<i64>,
    /// The estimate, frames.
    jitter: f64,
}

impl InterarrivalJitter {
    /// Takes one packet's arrival and timestamp (frames).
    pub fn update(&mut self, arrival: u64, ts: u64) {
        let transit = arrival as i64 - ts as i64;
        if let Some(prev) = self.transit {
            let d = (transit - prev).unsigned_abs() as f64;
            self.jitter += (d - self.jitter) / 16.0;
        }
        self.transit = Some(transit);
    }

    /// Forgets the previous packet (the stream started over: its timestamps are on
    /// another timeline); the estimate so far stays.
    pub fn restart(&mut self) {
        self.transit = None;
    }

    /// The estimate, frames.
    pub fn frames(&self) -> f64 {
        self.jitter
    }
}

/// Windows between the first and the latest before [`ClockDrift::ppm`] gives a figure.
pub const MIN_WINDOWS: u64 = 8;

/// Steps of the lowest transit between windows beyond this (relative to a window's
/// length, in ppm) start the estimate over.
pub const MAX_STEP_PPM: u64 = 1000;

/// The sender's clock against the receiver's, from the drift of packets' transit time.
///
/// A packet's transit time (arrival minus timestamp) is the network's delay plus the
/// clocks' offset; when the sender's clock runs fast its timestamps gain on the
/// receiver's clock and the transit time shrinks. Queueing only ever adds delay, so the
/// smallest transit time seen in each window of `window` frames is the one nearest the
/// clocks' true offset; the drift is the slope between the first window's minimum and
/// the latest whole window's: the mean since the stream started, more precise the
/// longer it runs (one frame of rounding over `t` frames is `1e6 / t` ppm), so none is
/// given before [`MIN_WINDOWS`] windows lie between the two. A window whose lowest
/// transit moved from the previous one's by more than [`MAX_STEP_PPM`] of a window
/// (and two frames of rounding) is a new timeline, not drift — the sender paused and
/// its timestamps went on from where they stopped, or the route changed — and the
/// estimate starts over from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockDrift {
    window: u64,
    /// The open window: where it started (arrival), and its lowest transit with that
    /// packet's arrival.
    open: Option<(u64, i64, u64)>,
    /// The first whole window's lowest transit and its arrival.
    first: Option<(i64, u64)>,
    /// The latest whole window's.
    last: Option<(i64, u64)>,
}

impl ClockDrift {
    /// An estimator over windows of `window` frames (at least 1).
    pub fn new(window: u64) -> Self {
        ClockDrift {
            window: window.max(1),
            open: None,
            first: None,
            last: None,
        }
    }

    /// Takes one packet's arrival and timestamp (frames).
    pub fn update(&mut self, arrival: u64, ts: u64) {
        let transit = arrival as i64 - ts as i64;
        match &mut self.open {
            Some((start, low, at)) if arrival < *start + self.window => {
                if transit < *low {
                    (*low, *at) = (transit, arrival);
                }
            }
            Some((_, low, at)) => {
                let done = (*low, *at);
                let step = self.window * MAX_STEP_PPM / 1_000_000 + 2;
                match self.last.or(self.first) {
                    Some((prev, _)) if (done.0 - prev).unsigned_abs() <= step => {
                        self.last = Some(done)
                    }
                    _ => (self.first, self.last) = (Some(done), None),
                }
                self.open = Some((arrival, transit, arrival));
            }
            None => self.open = Some((arrival, transit, arrival)),
        }
    }

    /// Starts over (a new stream, or the sender restarted its clock).
    pub fn restart(&mut self) {
        *self = ClockDrift::new(self.window);
    }

    /// The sender's clock rate over the receiver's, minus one, in parts per million
    /// (positive: the sender runs fast); `None` until [`MIN_WINDOWS`] lie between the
    /// first whole window and the latest.
    pub fn ppm(&self) -> Option<f64> {
        let ((t0, a0), (t1, a1)) = (self.first?, self.last?);
        if a1 < a0 + MIN_WINDOWS * self.window {
            return None;
        }
        // + 0.0: no drift reads as 0, not -0.
        Some((t0 - t1) as f64 / (a1 - a0) as f64 * 1e6 + 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_follows_rfc3550_by_hand() {
        let mut j = InterarrivalJitter::default();
        // Packets of 10 frames; transit times 100, 104, 101, 101, 110.
        let arrivals = [100, 114, 121, 131, 150];
        for (k, a) in arrivals.into_iter().enumerate() {
            j.update(a, 10 * k as u64);
        }
        // |D| = 4, 3, 0, 9:
        //   J1 = 0 + (4 - 0)/16 = 0.25
        //   J2 = 0.25 + (3 - 0.25)/16 = 0.421875
        //   J3 = 0.421875 + (0 - 0.421875)/16 = 0.3955078125
        //   J4 = 0.3955078125 + (9 - 0.3955078125)/16 = 0.933288574...
        let want = 0.3955078125 + (9.0 - 0.3955078125) / 16.0;
        assert!((j.frames() - want).abs() < 1e-12, "{}", j.frames());
    }

    #[test]
    fn jitter_is_zero_on_time_and_restart_keeps_the_estimate() {
        let mut j = InterarrivalJitter::default();
        for k in 0..100u64 {
            j.update(5000 + 48 * k, 48 * k);
        }
        assert_eq!(j.frames(), 0.0);
        j.restart();
        j.update(10_000, 0);
        j.update(10_008, 48); // transit 10_000 then 9_960: |D| = 40
        assert_eq!(j.frames(), 2.5);
        // A new timeline: the first packet after it has no predecessor.
        j.restart();
        j.update(1, 1_000_000);
        assert_eq!(j.frames(), 2.5);
        j.update(49, 1_000_048);
        assert_eq!(j.frames(), 2.5 - 2.5 / 16.0);
    }

    #[test]
    fn drift_of_a_fast_sender_through_jitter() {
        // The sender's clock 100 ppm fast: its timestamps advance 1.0001 frames per
        // receiver frame; each packet queued 0..=29 frames on its way.
        let mut d = ClockDrift::new(48_000);
        assert_eq!(d.ppm(), None);
        for k in 0..30_000u64 {
            let arrival = 48 * k;
            let ts = (arrival as f64 * 1.0001) as u64;
            d.update(arrival + (k * 7919) % 30, ts);
        }
        let ppm = d.ppm().expect("an estimate after 30 s");
        assert!((ppm - 100.0).abs() < 2.0, "{ppm}");
        d.restart();
        assert_eq!(d.ppm(), None);
    }

    #[test]
    fn drift_of_a_slow_sender_by_hand_and_none_before_eight_windows() {
        // 50 ppm slow: the transit time grows one frame per 20_000, windows of 20_000.
        let mut d = ClockDrift::new(20_000);
        for k in 0..=20_000u64 {
            let arrival = 10 * k;
            d.update(arrival, arrival - arrival / 20_000);
            if arrival < 180_000 {
                assert_eq!(d.ppm(), None, "at {arrival}");
            }
        }
        // First window's lowest transit 0 at arrival 0; the last whole window
        // [180_000, 200_000) has 9 at 180_000: -9 / 180_000 = -50 ppm.
        assert_eq!(d.ppm(), Some(-50.0));
    }

    #[test]
    fn a_pause_in_sending_starts_the_estimate_over() {
        // On time for 20 windows, then the sender pauses for 4800 frames (100 ms) and
        // its timestamps go on from where they stopped: the transit steps up for good.
        let mut d = ClockDrift::new(1000);
        for k in 0..2000u64 {
            d.update(10 * k, 10 * k);
        }
        assert_eq!(d.ppm(), Some(0.0));
        assert!(
            d.ppm().unwrap().is_sign_positive(),
            "shown as 0.0, not -0.0"
        );
        // Not -4800 frames over some 20_000 (about -200_000 ppm): a new timeline,
        // measured anew, with nothing to say until eight windows passed on it.
        // (The first window after the step closes at packet 2100.)
        for k in 2000..3500u64 {
            d.update(4800 + 10 * k, 10 * k);
            if (2100..2850).contains(&k) {
                assert_eq!(d.ppm(), None, "packet {k}");
            }
        }
        assert_eq!(d.ppm(), Some(0.0));
    }
}
