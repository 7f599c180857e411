//! Follower devices kept in step with the driver's clock.
//!
//! Every device of an engine runs at the same nominal rate, but each card has its own
//! crystal: a second card plays a little faster or slower than the one that paces the
//! cycles (tens to hundreds of ppm), so its queue drains or grows until it under- or
//! overruns — a click every few minutes, or, before followers recovered, silence for
//! good. Each cycle the engine reads a follower's levels ([`Device::follow`]) and
//! resamples what it writes to the follower, and what it reads from it, by a ratio a PI
//! loop steers to hold each level where it was after the start. Devices without a clock
//! of their own (null, file) answer `None` and are written as before.
//!
//! [`Device::follow`]: quaver_devices::Device::follow

use crate::rt::stats::{DeviceStats, NO_LEVEL, NO_RATIO};
use quaver_devices::Device;
use quaver_dsp::resample::{ResampleError, ResampleQuality, StreamResampler};
use quaver_dsp::{Planar, PlanarMut};

/// Proportional gain, per second of level error (the loop settles in a few seconds).
const KP: f64 = 2.0;
/// Integral gain, per second² (with [`KP`]: critically damped, about 1 rad/s).
const KI: f64 = 1.0;
/// Most the ratio moves either way: well beyond real crystal drift (a few hundred ppm),
/// and small enough that one late cycle on a loaded machine, which reads as a level
/// error of its lateness, bends the pitch by at most 3.5 cents for that cycle.
pub const MAX_CORRECTION: f64 = 0.002;

/// Frames of capture a follower keeps ready beyond a cycle (at most a cycle): 10.7 ms
/// at 48 kHz, for the driver waking late.
const CAPTURE_HEADROOM: usize = 512;

/// Readings a loop lets pass at most, waiting for a steady level, before it takes one as
/// its target anyway: a few seconds at the smallest quanta, never for good on a machine
/// too loaded for two readings to agree.
const MAX_SETTLE: u16 = 400;

/// Steers one direction of a follower: the level it should hold, and the integral.
#[derive(Debug, Default)]
pub(crate) struct RateLoop {
    target: Option<f64>,
    integral: f64,
    /// While there is no target: the last reading, and how many more may pass before
    /// one is taken however unsteady (0: the next one is taken).
    previous: Option<usize>,
    settle_left: u16,
}

impl RateLoop {
    /// After the device restarted (an xrun, a resume): a new level to hold, but the
    /// estimate of the clocks' ratio stays — the crystals did not change. Forgetting it,
    /// as at first, made every xrun cost the loop 8 s of relocking from 0 at ±400 ppm
    /// (`quaver-bench drift` on a loaded machine: 55 scheduling xruns in 10 minutes, no
    /// lock that lasted). The level to hold is the first steady one (see [`Self::update`]):
    /// a follower that xran on its own while the whole daemon stalled restarts with its
    /// prefill before the driver's wait, and the driver then catches up on the stall in
    /// back-to-back cycles that each queue a quantum more on the follower. Taken at the
    /// prefill, the target sat 1016 frames below the level in `quaver-bench drift`, and
    /// the loop spent 30 s at its bound (its estimate 1600 ppm off) draining it.
    pub(crate) fn restart(&mut self) {
        self.target = None;
        self.previous = None;
        self.settle_left = MAX_SETTLE;
    }

    /// New level to hold after a quantum change, keeping the estimate of the clocks'
    /// ratio (the crystals did not change). The reading right after the change is not
    /// the level to hold: it comes before the driver's first wait at the new quantum,
    /// and that wait drains (or fills) the driver's lead from the old quantum to the new
    /// one while the follower plays on. Taken as the target, a drop from 1024 to 192
    /// frames left the level 830 frames below it, and the loop spent 9 s at its bound
    /// refilling (`quaver-bench drift`). The first steady reading after it is the level.
    pub(crate) fn retarget(&mut self) {
        self.restart();
    }

    /// Takes one reading of `level` frames, a cycle of `dt` seconds after the previous
    /// one at `rate` Hz; returns the converter ratio (output/input) for this cycle: below
    /// 1 when the level is above its target. Without a target (a start, a restart, a new
    /// quantum) the first steady reading sets it, `raise` frames above the level read:
    /// one within half a cycle of the reading before. A level still moving by about a
    /// cycle per reading is the driver catching up, or draining its old lead. *RT*.
    pub(crate) fn update(&mut self, level: usize, raise: usize, dt: f64, rate: f64) -> f64 {
        if self.target.is_none() && self.settle_left > 0 {
            let steady = self
                .previous
                .is_some_and(|p| p.abs_diff(level) as f64 <= dt * rate / 2.0);
            if !steady {
                self.settle_left -= 1;
                self.previous = Some(level);
                return self.settled_ratio();
            }
        }
        let level = level as f64;
        let target = *self.target.get_or_insert(level + raise as f64);
        let error = (level - target) / rate;
        let bound = MAX_CORRECTION / KI;
        self.integral = (self.integral + error * dt).clamp(-bound, bound);
        1.0 - (KP * error + KI * self.integral).clamp(-MAX_CORRECTION, MAX_CORRECTION)
    }

    /// The ratio the loop has settled on, without this cycle's proportional part: its
    /// estimate of the clocks' ratio. The applied ratio jitters around it by 42 ppm per
    /// frame of level error (a late wakeup reads as several); this moves by well under
    /// a ppm per cycle.
    pub(crate) fn settled_ratio(&self) -> f64 {
        1.0 - (KI * self.integral).clamp(-MAX_CORRECTION, MAX_CORRECTION)
    }
}

/// One direction of a follower: its converter and its loop.
pub(crate) struct Side {
    pub(crate) resampler: StreamResampler,
    pub(crate) rate_loop: RateLoop,
}

impl Side {
    fn new(rate: u32, channels: usize, max_frames: usize) -> Result<Self, ResampleError> {
        Ok(Side {
            resampler: StreamResampler::new(
                rate,
                rate,
                channels,
                ResampleQuality::Medium,
                max_frames,
            )?,
            rate_loop: RateLoop::default(),
        })
    }

    /// Feeds a reading and sets the converter's ratio for this cycle. *RT*.
    fn steer(&mut self, level: usize, raise: usize, dt: f64, rate: f64) {
        // Below 1 when the level is high. Playback then writes fewer frames than the
        // graph made (output/input below 1); capture makes the graph's frames from more
        // of the follower's (output/input below 1 too): either way the level falls.
        let r = self.rate_loop.update(level, raise, dt, rate);
        self.resampler.set_ratio_relative(r);
    }
}

/// The playback and capture sides of one follower device.
pub(crate) struct Follower {
    pub(crate) play: Option<Side>,
    pub(crate) cap: Option<Side>,
    /// The device answered [`quaver_devices::Device::follow`] with levels this cycle: its
    /// audio goes through the converters.
    pub(crate) active: bool,
    /// The capture is far below its level this cycle: the graph gets silence instead.
    pub(crate) cap_hold: bool,
    /// The quantum of the last reading: a new one moves the levels to keep.
    quantum: usize,
    /// The playback level at the last reading, frames.
    play_level: Option<usize>,
    /// Lowest and highest playback level minus its target since the last restart.
    play_err: (i64, i64),
    /// Restarts of the loop after the device restarted (an xrun, or a start).
    restarts: u64,
}

impl Follower {
    /// Builds the converters for a device with these channel counts (control thread).
    pub(crate) fn new(
        rate: u32,
        playback: Option<usize>,
        capture: Option<usize>,
        max_frames: usize,
    ) -> Result<Self, ResampleError> {
        Ok(Follower {
            play: playback
                .map(|c| Side::new(rate, c, max_frames))
                .transpose()?,
            cap: capture
                .map(|c| Side::new(rate, c, max_frames))
                .transpose()?,
            active: false,
            cap_hold: false,
            quantum: 0,
            play_level: None,
            play_err: (0, 0),
            restarts: 0,
        })
    }

    /// Both sides, those the device has.
    fn sides(&mut self) -> impl Iterator<Item = &mut Side> {
        [self.play.as_mut(), self.cap.as_mut()]
            .into_iter()
            .flatten()
    }

    /// Starts over: after the device (re)started, its levels are new (its clock is
    /// not). *RT*.
    pub(crate) fn reset(&mut self) {
        for side in self.sides() {
            side.rate_loop.restart();
            side.resampler.reset();
        }
        self.play_level = None;
        self.play_err = (0, 0);
        self.restarts += 1;
    }

    /// New levels to keep, keeping the audio in the converters (a quantum change). *RT*.
    fn retarget(&mut self) {
        for side in self.sides() {
            side.rate_loop.retarget();
        }
    }

    /// Writes a cycle to `dev` through the playback converter: whether it succeeded, or
    /// `None` when the follower is not steered this cycle (write it as it is). *RT*.
    pub(crate) fn write(&mut self, dev: &mut dyn Device, buf: Planar<'_>) -> Option<bool> {
        let side = self.play.as_mut().filter(|_| self.active)?;
        let mut ok = true;
        side.resampler.process_push(buf, &mut |piece| {
            ok &= dev.write(piece).is_ok();
        });
        Some(ok)
    }

    /// Fills a cycle from `dev` through the capture converter (silence while holding):
    /// whether it succeeded, or `None` when the follower is not steered this cycle (read
    /// it as it is). *RT*.
    pub(crate) fn read(&mut self, dev: &mut dyn Device, out: &mut PlanarMut<'_>) -> Option<bool> {
        if !self.active {
            return None;
        }
        if self.cap_hold {
            out.fill_silence();
            return Some(true);
        }
        let side = self.cap.as_mut()?;
        let mut ok = true;
        side.resampler.process_pull(out, &mut |scratch| {
            ok &= dev.read(scratch).is_ok();
            scratch.frames()
        });
        Some(ok)
    }

    /// Applies this cycle's reading. *RT*.
    pub(crate) fn update(&mut self, levels: quaver_devices::FollowerLevels, q: usize, rate: u32) {
        if levels.restarted {
            self.reset();
        } else if q != self.quantum {
            self.retarget();
        }
        self.quantum = q;
        let (dt, rate) = (q as f64 / rate as f64, rate as f64);
        if let (Some(side), Some(level)) = (self.play.as_mut(), levels.play_queued) {
            // Read just before the driver's wait: what the last write left queued (after a
            // start, the prefill), which is the level to keep.
            side.steer(level, 0, dt, rate);
            if let Some(t) = side.rate_loop.target {
                let err = level as i64 - t.round() as i64;
                self.play_err = (self.play_err.0.min(err), self.play_err.1.max(err));
            }
            self.play_level = Some(level);
        }
        if let (Some(side), Some(level)) = (self.cap.as_mut(), levels.cap_avail) {
            // Far below its level — half a cycle, and more than the loop's own wander (the
            // driver's wait before a grown quantum can be shorter than the new cycle):
            // reading would run past the hardware every cycle until the loop, at its slow
            // rate, caught up. Give the graph silence for one cycle instead while the
            // capture builds up.
            let far = (q / 2).max(CAPTURE_HEADROOM / 2);
            self.cap_hold = side
                .rate_loop
                .target
                .is_some_and(|t| (level + far) as f64 <= t);
            if !self.cap_hold {
                // Read just before the driver's wait: what the last read left (after a
                // start, nothing). The wait adds about a cycle, exactly what the cycle
                // reads, so steering to the first level would read past the hardware half
                // the time. Aim higher (the loop gets there by reading a little less at
                // first), by up to a cycle but never so much that a big cycle on a small
                // ring overflows it.
                side.steer(level, q.min(CAPTURE_HEADROOM), dt, rate);
            }
        }
    }
}

impl Follower {
    /// Publishes where the loop stands, for `status` and the drift bench: the follower's
    /// clock against the driver's as each side's settled ratio says it, the playback level and
    /// its target, the level's widest excursions since the last restart. *RT*.
    pub(crate) fn publish(&self, s: &DeviceStats) {
        use std::sync::atomic::Ordering::Relaxed;
        // Playback writes r follower frames per graph frame: the follower's clock is r
        // times the driver's. Capture makes r graph frames per follower frame: 1/r.
        let ppb = |clock: f64| ((clock - 1.0) * 1e9).round() as i64;
        let play = self.play.as_ref();
        let play_ppb = play.map_or(NO_RATIO, |p| ppb(p.rate_loop.settled_ratio()));
        s.follow_play_ppb.store(play_ppb, Relaxed);
        let target = play.and_then(|p| p.rate_loop.target);
        s.follow_play_target
            .store(target.map_or(NO_LEVEL, |t| t.round() as u64), Relaxed);
        let cap_ppb = self
            .cap
            .as_ref()
            .map_or(NO_RATIO, |c| ppb(1.0 / c.rate_loop.settled_ratio()));
        s.follow_cap_ppb.store(cap_ppb, Relaxed);
        let level = self.play_level.map_or(NO_LEVEL, |l| l as u64);
        s.follow_play_level.store(level, Relaxed);
        s.follow_play_err_min.store(self.play_err.0, Relaxed);
        s.follow_play_err_max.store(self.play_err.1, Relaxed);
        s.follow_restarts.store(self.restarts, Relaxed);
        s.follow_active.store(self.active, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_holds_the_level_against_a_steady_drift() {
        // A follower 300 ppm fast drains 300 ppm of a frame per frame written; the loop
        // must find a ratio 300 ppm above 1 and hold the level near where it started.
        let (rate, q) = (48_000.0, 256usize);
        let dt = q as f64 / rate;
        let mut l = RateLoop::default();
        let mut level = 512.0f64;
        let mut worst: f64 = 0.0;
        let mut r = 1.0;
        for cycle in 0..(60.0 / dt) as usize {
            r = l.update(level.round() as usize, 0, dt, rate);
            level += q as f64 * r - q as f64 * 1.0003;
            if cycle as f64 * dt > 10.0 {
                worst = worst.max((level - 512.0).abs());
            }
        }
        assert!((r - 1.0003).abs() < 20e-6, "settled ratio {r}");
        assert!(worst < 4.0, "level strayed {worst} frames after settling");
    }

    #[test]
    fn a_restart_keeps_the_clocks_ratio_and_takes_a_new_level() {
        let (rate, q) = (48_000.0, 256usize);
        let dt = q as f64 / rate;
        let mut l = RateLoop::default();
        let mut level = 512.0f64;
        for _ in 0..(30.0 / dt) as usize {
            let r = l.update(level.round() as usize, 0, dt, rate);
            level += q as f64 * r - q as f64 * 1.0003;
        }
        // The device restarted with another prefill, and the driver catches up on a stall
        // in cycles that each add a quantum: the level where it stops moving is the one
        // to hold, at the ratio already found.
        l.restart();
        for level in [900, 900 + q, 900 + 2 * q, 900 + 2 * q] {
            let r = l.update(level, 0, dt, rate);
            assert!((r - 1.0003).abs() < 5e-6, "{r}");
        }
        assert_eq!(l.target, Some((900 + 2 * q) as f64));
        assert!((l.settled_ratio() - 1.0003).abs() < 5e-6);
    }

    #[test]
    fn a_level_that_never_settles_is_taken_after_a_bound() {
        let mut l = RateLoop::default();
        l.restart();
        for i in 0..=MAX_SETTLE as usize {
            assert!(l.target.is_none(), "target after {i} unsteady readings");
            l.update(1000 + (i % 2) * 500, 0, 0.005, 48_000.0);
        }
        assert!(l.target.is_some());
    }

    #[test]
    fn one_late_reading_moves_the_ratio_by_at_most_the_bound() {
        let mut l = RateLoop::default();
        // A 100 ms stall reads as the level 4800 frames low for one cycle.
        l.update(5000, 0, 0.005, 48_000.0);
        let r = l.update(200, 0, 0.005, 48_000.0);
        assert!((r - (1.0 + MAX_CORRECTION)).abs() < 1e-12, "{r}");
    }
}
