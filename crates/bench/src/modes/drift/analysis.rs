//! From a follower's `status` readings to the figures: when its loop locked, how far its
//! estimate stays from the true drift, where its playback level sat and whether it left
//! its band. Pure functions over the samples, so the tests below can check them.

use serde::{Deserialize, Serialize};

/// The sim cards' default watermark, frames (`--period`): also the glitch band's width
/// (a follower's playback level more than half of it from the level its loop holds is
/// outside its band).
pub const PERIOD_FRAMES: usize = 1024;
/// The loop counts as locked once its estimate stays this close to the true drift for
/// [`LOCK_HOLD_S`], ppm. Real time is not the engine test's virtual time: a wakeup a
/// frame late for a second moves the estimate by about 20 ppm, so a busy machine's
/// scheduling keeps it a few ppm off (the test holds 2 ppm in virtual time).
pub const LOCK_PPM: f64 = 10.0;
/// How long the estimate must stay within [`LOCK_PPM`] to count as locked, s.
pub const LOCK_HOLD_S: f64 = 5.0;

/// One `status` reading of a follower.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the daemon was started.
    pub t: f64,
    /// The loop's settled estimate of the follower's clock against the driver's, ppm.
    pub ppm: Option<f64>,
    /// Playback level minus the level the loop holds, frames.
    pub level_error: Option<i64>,
    /// Loop restarts so far (1: the start).
    pub restarts: u64,
}

impl Sample {
    /// The reading at `t` of `f`.
    pub fn of(t: f64, f: &quaver_protocol::message::FollowStatus) -> Sample {
        Sample {
            t,
            ppm: f.play_ppb.map(|p| p as f64 / 1e3),
            level_error: match (f.play_level, f.play_target) {
                (Some(l), Some(t)) => Some(l as i64 - t as i64),
                _ => None,
            },
            restarts: f.restarts,
        }
    }
}

/// The follower's clock against the driver's, ppm, for crystals `follower` and
/// `driver` ppm off.
pub fn relative_ppm(follower: f64, driver: f64) -> f64 {
    ((1.0 + follower * 1e-6) / (1.0 + driver * 1e-6) - 1.0) * 1e6
}

/// A span with one true drift: the run, or the parts before and after a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Its start and end, s since the daemon started.
    pub from_s: f64,
    /// Its end.
    pub to_s: f64,
    /// The follower's clock against the driver's, ppm.
    pub truth_ppm: f64,
    /// From the phase's start until the loop's estimate first stayed within the lock
    /// band for [`LOCK_HOLD_S`], s (None: it never did).
    pub lock_s: Option<f64>,
    /// After the lock: mean of the estimate minus the truth, ppm.
    pub settled_error_ppm: Option<f64>,
    /// After the lock: median |estimate − truth|, ppm.
    #[serde(default)]
    pub settled_error_p50_ppm: Option<f64>,
    /// After the lock: readings whose estimate was outside the lock band.
    #[serde(default)]
    pub settled_outside_lock: usize,
    /// After the lock: largest |estimate − truth|, ppm.
    pub settled_error_max_ppm: Option<f64>,
    /// After the lock: playback level minus its target, lowest, frames.
    pub level_min: Option<i64>,
    /// Highest.
    pub level_max: Option<i64>,
    /// Mean.
    pub level_mean: Option<f64>,
    /// The ratio the converter really applied on average after the lock, minus the
    /// truth, ppm, from how far the level moved: the mean level over the settled span's
    /// last fifth minus its first fifth, over the time between them.
    pub level_drift_ppm: Option<f64>,
    /// Readings whose level was outside the band (the whole phase).
    pub outside_band: usize,
    /// Readings in the phase.
    pub readings: usize,
}

/// One follower's figures over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FollowerFigures {
    /// One phase, or two around a step.
    pub phases: Vec<Phase>,
    /// The widest level error the real-time thread saw (every cycle since the loop's
    /// last restart), frames.
    pub rt_level_error: Option<(i64, i64)>,
    /// Loop restarts after the start (xrun recoveries, resumes).
    pub restarts: u64,
    /// The glitch band used, ± frames.
    pub band_frames: i64,
    /// Any glitch: a reading or the real-time extremes outside the band, or a restart.
    pub glitch: bool,
    /// Once a second: (s, estimate − truth ppm, level error frames), for the plots.
    pub trace: Vec<(f64, f64, f64)>,
}

/// The figures of `samples` for a follower whose clock is `truth` ppm off the driver's,
/// and `step.1` ppm from `step.0` s on; `rt` the real-time thread's level extremes;
/// `band` the glitch band, ± frames.
pub fn figures(
    samples: &[Sample],
    truth: f64,
    step: Option<(f64, f64)>,
    rt: Option<(i64, i64)>,
    rate: u32,
    band: i64,
) -> FollowerFigures {
    let end = samples.last().map_or(0.0, |s| s.t);
    let spans = match step {
        Some((at, after)) => vec![(0.0, at, truth), (at, end, after)],
        None => vec![(0.0, end, truth)],
    };
    let phases: Vec<Phase> = spans
        .iter()
        .map(|&(from, to, truth)| {
            let inside: Vec<Sample> = samples
                .iter()
                .copied()
                .filter(|s| s.t >= from && (s.t < to || to == end))
                .collect();
            phase(&inside, from, to, truth, band, rate)
        })
        .collect();
    let restarts = samples.last().map_or(0, |s| s.restarts.saturating_sub(1));
    let rt_out = rt.is_some_and(|(lo, hi)| lo < -band || hi > band);
    let glitch = restarts > 0 || rt_out || phases.iter().any(|p| p.outside_band > 0);
    let mut trace = Vec::new();
    for s in samples {
        if trace.last().is_none_or(|&(t, _, _)| s.t >= t + 1.0) {
            let truth = step.filter(|&(at, _)| s.t >= at).map_or(truth, |(_, a)| a);
            if let (Some(p), Some(l)) = (s.ppm, s.level_error) {
                trace.push((s.t, p - truth, l as f64));
            }
        }
    }
    FollowerFigures {
        phases,
        rt_level_error: rt,
        restarts,
        band_frames: band,
        glitch,
        trace,
    }
}

fn phase(s: &[Sample], from: f64, to: f64, truth: f64, band: i64, rate: u32) -> Phase {
    let err = |x: &Sample| x.ppm.map(|p| p - truth);
    // The lock: the first reading from which the estimate stays within the band for
    // LOCK_HOLD_S (later excursions, from a stalled machine, show in the statistics).
    let inside = |x: &Sample| err(x).is_some_and(|e| e.abs() <= LOCK_PPM);
    let first_in = (0..s.len())
        .find(|&i| {
            let held = s[i..].iter().take_while(|x| inside(x)).last();
            held.is_some_and(|h| h.t - s[i].t >= LOCK_HOLD_S)
        })
        .unwrap_or(s.len());
    let settled = &s[first_in..];
    let lock_s = (!settled.is_empty()).then(|| settled[0].t - from);
    let errs: Vec<f64> = settled.iter().filter_map(err).collect();
    let levels: Vec<i64> = settled.iter().filter_map(|x| x.level_error).collect();
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let level_f: Vec<f64> = levels.iter().map(|&l| l as f64).collect();
    // The level's drift: the first and last fifth of the settled span, by time.
    let level_drift_ppm = (settled.len() >= 10)
        .then(|| {
            let k = settled.len() / 5;
            let (a, b) = (&settled[..k], &settled[settled.len() - k..]);
            let lv = |v: &[Sample]| {
                mean(
                    &v.iter()
                        .filter_map(|x| x.level_error.map(|l| l as f64))
                        .collect::<Vec<_>>(),
                )
            };
            let tv = |v: &[Sample]| mean(&v.iter().map(|x| x.t).collect::<Vec<_>>());
            let (la, lb, ta, tb) = (lv(a)?, lv(b)?, tv(a)?, tv(b)?);
            // The level rises when the converter writes more than the card plays: the
            // applied ratio was above the truth by that many frames per frame.
            (tb > ta).then(|| (lb - la) / ((tb - ta) * rate as f64) * 1e6)
        })
        .flatten();
    Phase {
        from_s: from,
        to_s: to,
        truth_ppm: truth,
        lock_s,
        settled_error_ppm: mean(&errs),
        settled_error_p50_ppm: {
            let mut a: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
            a.sort_by(f64::total_cmp);
            crate::report::stats::percentile(&a, 50.0)
        },
        settled_outside_lock: errs.iter().filter(|e| e.abs() > LOCK_PPM).count(),
        settled_error_max_ppm: errs.iter().map(|e| e.abs()).reduce(f64::max),
        level_min: levels.iter().copied().min(),
        level_max: levels.iter().copied().max(),
        level_mean: mean(&level_f),
        level_drift_ppm,
        outside_band: s
            .iter()
            .filter(|x| x.level_error.is_some_and(|l| l.abs() > band))
            .count(),
        readings: s.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, ppm: f64, level: i64) -> Sample {
        Sample {
            t,
            ppm: Some(ppm),
            level_error: Some(level),
            restarts: 1,
        }
    }

    #[test]
    fn the_truth_is_the_ratio_of_the_two_clocks() {
        assert!((relative_ppm(-200.0, 200.0) + 399.92).abs() < 0.001);
        assert!((relative_ppm(200.0, -200.0) - 400.08).abs() < 0.001);
        assert!((relative_ppm(200.0, 0.0) - 200.0).abs() < 1e-9);
    }

    #[test]
    fn lock_is_the_first_reading_that_holds_the_band() {
        // Converging on -400 ppm: outside 10 ppm until 3 s, a stray at 5 s (before 5 s
        // of holding), then in but for one stray at 15 s (after the lock).
        let mut s: Vec<Sample> = (0..200)
            .map(|i| {
                let t = i as f64 * 0.1;
                let e = if t < 3.0 { 50.0 } else { 0.5 };
                sample(t, -400.0 + e, 2)
            })
            .collect();
        s[50].ppm = Some(-400.0 - 13.0);
        s[150].ppm = Some(-400.0 + 40.0);
        let f = figures(&s, -400.0, None, Some((-3, 4)), 48_000, 128);
        let p = &f.phases[0];
        assert!((p.lock_s.unwrap() - 5.1).abs() < 1e-9, "{:?}", p.lock_s);
        assert_eq!(p.settled_outside_lock, 1);
        assert_eq!(p.settled_error_p50_ppm, Some(0.5));
        assert!(p.settled_error_max_ppm.unwrap() > 39.0);
        assert_eq!(
            (p.level_min, p.level_max, p.outside_band),
            (Some(2), Some(2), 0)
        );
        assert!(!f.glitch);
        assert_eq!(f.trace.len(), 20);
    }

    #[test]
    fn a_step_splits_the_run_and_the_level_drift_shows_a_ratio_error() {
        // After the step at 10 s the level climbs 48 frames in 10 s: the converter
        // wrote 100 ppm more than the card played.
        let s: Vec<Sample> = (0..200)
            .map(|i| {
                let t = i as f64 * 0.1;
                if t < 10.0 {
                    sample(t, 200.0, 0)
                } else {
                    sample(t, -200.0, ((t - 10.0) * 4.8) as i64)
                }
            })
            .collect();
        let f = figures(&s, 200.0, Some((10.0, -200.0)), None, 48_000, 128);
        assert_eq!(f.phases.len(), 2);
        assert_eq!(f.phases[1].lock_s, Some(0.0));
        let d = f.phases[1].level_drift_ppm.unwrap();
        assert!((d - 100.0).abs() < 5.0, "{d}");
        assert_eq!(f.phases[0].level_drift_ppm, Some(0.0));
    }

    #[test]
    fn a_level_outside_the_band_or_a_restart_is_a_glitch() {
        let mut s: Vec<Sample> = (0..20).map(|i| sample(i as f64, 0.0, 0)).collect();
        assert!(!figures(&s, 0.0, None, Some((-5, 5)), 48_000, 128).glitch);
        assert!(figures(&s, 0.0, None, Some((-200, 5)), 48_000, 128).glitch);
        s[7].level_error = Some(129);
        let f = figures(&s, 0.0, None, None, 48_000, 128);
        assert!(f.glitch && f.phases[0].outside_band == 1);
        s[7].level_error = Some(0);
        s[19].restarts = 2;
        assert!(figures(&s, 0.0, None, None, 48_000, 128).glitch);
    }

    #[test]
    fn a_loop_that_never_settles_has_no_lock() {
        let s: Vec<Sample> = (0..20).map(|i| sample(i as f64, 0.0, 0)).collect();
        let p = &figures(&s, 400.0, None, None, 48_000, 128).phases[0];
        assert_eq!((p.lock_s, p.settled_error_ppm), (None, None));
    }
}
