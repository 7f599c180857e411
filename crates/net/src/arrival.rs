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

/// Windows in the fit beyond which [`ClockDrift::ppm`] gives a figure (one frame of
/// rounding over eight windows of a second is 2.6 ppm).
pub const MIN_WINDOWS: u64 = 8;

/// Steps of the lowest transit between windows beyond this (relative to a window's
/// length, in ppm) are steps, not drift: a new segment of the same line.
pub const MAX_STEP_PPM: u64 = 1000;

/// Windows a window's weight in [`ClockDrift`]'s fit takes to fall to 1/e: long enough
/// that a frame of rounding per window is a fraction of a ppm, short enough that a
/// sender settling after its start, or a crystal warming up, is forgotten in a minute.
pub const MEMORY_WINDOWS: f64 = 8.0;

/// One straight run of windows' lowest transits, as weighted running means and
/// co-moments (West's update: no cancellation however long the stream runs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Segment {
    /// The weights' sum; 0 while the segment is empty.
    w: f64,
    /// Arrival of the segment's first point: positions are taken from it.
    origin: u64,
    mean_x: f64,
    mean_y: f64,
    /// Weighted sums of (x − mean)² and (x − mean)(y − mean).
    sxx: f64,
    sxy: f64,
}

impl Segment {
    /// Scales every point's weight by `f` (the means stay).
    fn fade(&mut self, f: f64) {
        self.w *= f;
        self.sxx *= f;
        self.sxy *= f;
    }

    /// Adds a point of weight 1.
    fn add(&mut self, at: u64, low: i64) {
        if self.w == 0.0 {
            *self = Segment {
                origin: at,
                ..Segment::default()
            };
        }
        let (x, y) = ((at - self.origin) as f64, low as f64);
        self.w += 1.0;
        let dx = x - self.mean_x;
        self.mean_x += dx / self.w;
        self.mean_y += (y - self.mean_y) / self.w;
        self.sxx += dx * (x - self.mean_x);
        self.sxy += dx * (y - self.mean_y);
    }
}

/// The sender's clock against the receiver's, from the drift of packets' transit time.
///
/// A packet's transit time (arrival minus timestamp) is the network's delay plus the
/// clocks' offset; when the sender's clock runs fast its timestamps gain on the
/// receiver's clock and the transit time shrinks. Queueing only ever adds delay, so the
/// smallest transit time seen in each window of `window` frames is the one nearest the
/// clocks' true offset; the drift is the slope of the least-squares line through those
/// minima, each window's weight fading by 1/e per [`MEMORY_WINDOWS`] windows: a window
/// off the line (a sender settling after its start) is forgotten, where a slope from
/// the first window would carry its error for the whole run. None is given before more
/// than [`MIN_WINDOWS`] windows are in the fit. A window whose lowest transit moved from the previous one's by
/// more than [`MAX_STEP_PPM`] of a window (and two frames of rounding) is a step, not
/// drift — the sender skipped time it lost, or paused, or the route changed: that window
/// (which may hold both sides of the step) is left out and the next starts a new segment;
/// the slope is common to all segments, each with its own offset (the pooled
/// within-segment fit), so a step costs neither the estimate so far nor a measurement of
/// its size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockDrift {
    window: u64,
    /// The open window: where it started (arrival), and its lowest transit with that
    /// packet's arrival.
    open: Option<(u64, i64, u64)>,
    /// The latest whole window's lowest transit.
    last: Option<i64>,
    /// The segment the windows go to now, and the co-moments of those before it.
    seg: Segment,
    sxx: f64,
    sxy: f64,
    /// Steps seen since the last restart, and windows in the fit.
    steps: u32,
    windows: u64,
}

impl ClockDrift {
    /// An estimator over windows of `window` frames (at least 1).
    pub fn new(window: u64) -> Self {
        ClockDrift {
            window: window.max(1),
            open: None,
            last: None,
            seg: Segment::default(),
            sxx: 0.0,
            sxy: 0.0,
            steps: 0,
            windows: 0,
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
                let (low, at) = (*low, *at);
                self.close(low, at);
                self.open = Some((arrival, transit, arrival));
            }
            None => self.open = Some((arrival, transit, arrival)),
        }
    }

    /// Ends a window whose lowest transit was `low`, at arrival `at`.
    fn close(&mut self, low: i64, at: u64) {
        let fade = (-1.0 / MEMORY_WINDOWS).exp();
        self.seg.fade(fade);
        self.sxx *= fade;
        self.sxy *= fade;
        let step = (self.window * MAX_STEP_PPM / 1_000_000 + 2) as i64;
        match self.last.replace(low) {
            Some(prev) if (low - prev).abs() > step => {
                self.steps += 1;
                self.sxx += self.seg.sxx;
                self.sxy += self.seg.sxy;
                self.seg = Segment::default();
            }
            _ => {
                self.seg.add(at, low);
                self.windows += 1;
            }
        }
    }

    /// Starts over (a new stream, or the sender restarted its clock).
    pub fn restart(&mut self) {
        *self = ClockDrift::new(self.window);
    }

    /// Steps in the transit time seen since the last restart.
    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// The sender's clock rate over the receiver's, minus one, in parts per million
    /// (positive: the sender runs fast); `None` until more than [`MIN_WINDOWS`]
    /// windows are in the fit.
    pub fn ppm(&self) -> Option<f64> {
        let (sxx, sxy) = (self.sxx + self.seg.sxx, self.sxy + self.seg.sxy);
        if self.windows <= MIN_WINDOWS || sxx <= 0.0 {
            return None;
        }
        // + 0.0: no drift reads as 0, not -0.
        Some(-sxy / sxx * 1e6 + 0.0)
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
        // Window k's lowest transit is k, at arrival 20_000 k: ten points on a line of
        // slope 1 / 20_000, so -50 ppm.
        let ppm = d.ppm().expect("nine windows");
        assert!((ppm + 50.0).abs() < 1e-9, "{ppm}");
    }

    #[test]
    fn a_pause_in_sending_is_a_step_not_drift() {
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
        // Not -4800 frames over some 20_000 (about -200_000 ppm): the step is taken
        // out and the line goes on.
        for k in 2000..3500u64 {
            d.update(4800 + 10 * k, 10 * k);
            assert_eq!(d.ppm(), Some(0.0), "packet {k}");
        }
        assert_eq!(d.steps(), 1);
        d.restart();
        assert_eq!((d.ppm(), d.steps()), (None, 0));
    }

    #[test]
    fn a_drifting_sender_that_skips_lost_time_keeps_its_estimate() {
        // 500 ppm fast through 0..=29 frames of queueing, windows of 48_000; every
        // 10 s the sender skips 1440 frames (30 ms its graph lost) in its timestamps,
        // which lowers the transit time for good.
        let mut d = ClockDrift::new(48_000);
        let mut skipped = 0u64;
        for k in 0..60_000u64 {
            let arrival = 48 * k;
            if k > 0 && k % 10_000 == 0 {
                skipped += 1440;
            }
            let ts = (arrival as f64 * 1.0005) as u64 + skipped;
            d.update(arrival + (k * 7919) % 30, ts);
        }
        assert_eq!(d.steps(), 5);
        let ppm = d.ppm().expect("an estimate after 60 s");
        assert!((ppm - 500.0).abs() < 3.0, "{ppm}");
    }

    #[test]
    fn a_sender_settling_after_its_start_is_forgotten() {
        // 500 ppm fast; the first packets left 6 ms (288 frames) early, less and less
        // so over eight seconds, as a sender settling its pace might (too gradual to be
        // a step). A slope from the first window would be 288 frames short over the
        // run: 200 ppm low at 30 s, 100 ppm at 60 s.
        let mut d = ClockDrift::new(48_000);
        let mut at_30 = None;
        for k in 0..60_000u64 {
            let arrival = 48 * k;
            let early = 288u64.saturating_sub(288 * k / 8000);
            let ts = (arrival as f64 * 1.0005) as u64 + early;
            d.update(arrival, ts);
            if k == 30_000 {
                at_30 = d.ppm();
            }
        }
        let (at_30, at_60) = (at_30.expect("an estimate at 30 s"), d.ppm().unwrap());
        // (Measured: 443.8 and 497.5.)
        assert!((at_30 - 500.0).abs() < 80.0, "{at_30}");
        assert!((at_60 - 500.0).abs() < 5.0, "{at_60}");
    }
}
