//! A gain stage whose changes ramp linearly, so a new setting never clicks.

use super::base::Filter;
use super::controls::Controls;
use super::error::{FilterError, check_gain_db};
use crate::buffer::PlanarMut;
use crate::volume::{DEFAULT_RAMP_FRAMES, GainRamp, db_to_linear};

/// A gain in dB on every channel, ramped over `ramp_frames` on a change.
pub struct Gain {
    ramp: GainRamp,
    ramp_frames: usize,
    db: f64,
}

impl Gain {
    /// A gain of `db` decibels, ramping over [`DEFAULT_RAMP_FRAMES`] on changes.
    pub fn new(db: f64) -> Result<Self, FilterError> {
        check_gain_db(db)?;
        Ok(Gain {
            ramp: GainRamp::new(db_to_linear(db as f32)),
            ramp_frames: DEFAULT_RAMP_FRAMES,
            db,
        })
    }

    /// Sets how many frames later changes take (0 jumps).
    pub fn set_ramp_frames(&mut self, frames: usize) {
        self.ramp_frames = frames;
    }

    /// Frames a change takes.
    pub fn ramp_frames(&self) -> usize {
        self.ramp_frames
    }

    /// The gain asked for last, in dB.
    pub fn db(&self) -> f64 {
        self.db
    }

    /// Starts a ramp from wherever the gain is now to `db`. Does not allocate.
    pub fn set_db(&mut self, db: f64) -> Result<(), FilterError> {
        check_gain_db(db)?;
        self.db = db;
        self.ramp
            .set_target(db_to_linear(db as f32), self.ramp_frames);
        Ok(())
    }
}

impl Filter for Gain {
    fn process(&mut self, buf: &mut PlanarMut) {
        self.ramp.apply(buf);
    }

    fn reset(&mut self) {
        self.ramp = GainRamp::new(self.ramp.target());
    }

    fn controls(&self) -> Controls {
        Controls::Gain
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        match name {
            "gain_db" => self.set_db(value),
            _ => Err(super::error::unknown_control(name, "gain_db")),
        }
    }
}
