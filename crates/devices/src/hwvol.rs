//! Hardware volume: the trait a card's volume control offers (implemented by the ALSA
//! mixer, `alsa/mixer.rs`), and the arithmetic that splits a requested volume between
//! the hardware and the software gain.
//!
//! Why the trait lives here: the device layer knows cards but not the graph, and the
//! engine (which owns device nodes and their gains) sits above it. The daemon opens a
//! card's mixer and attaches it to the device's node through the engine
//! (`Engine::attach_hardware_volume`); front-ends only ever set a node's volume, so
//! neither protocol knows a mixer exists (docs/alsa/mixer.md).
//!
//! The split, as PulseAudio does it with a dB-capable mixer path: the requested volume
//! in dB is clamped into the element's range and the hardware is asked for it, rounding
//! *up* to its next step (`snd_mixer_selem_set_playback_dB(…, +1)`), so the hardware is
//! never quieter than asked and the software gain that completes it is at most unity: it
//! only ever attenuates, so samples never exceed full scale because of the split. If the
//! residual is within [`ACCURACY`] of unity, the software gain is exactly 1.0 (a step a
//! hair above the request is "accurate enough", PulseAudio's `VOLUME_ACCURACY`), which
//! keeps the path bit-exact whenever the hardware lands on the request, 100 % = 0 dB
//! above all.

use crate::DeviceError;

/// How close to unity (as a fraction of PulseAudio's cubic volume scale, 1 % like
/// PulseAudio's `VOLUME_ACCURACY`) the software gain may be before it is made exactly 1.
pub const ACCURACY: f64 = 0.01;

/// What a hardware volume control is: fixed once it is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct HwVolumeInfo {
    /// The card, as alsa-lib names its control device ("hw:Dummy").
    pub card: String,
    /// The element, e.g. "Master" (index appended when not 0: "PCM,1").
    pub element: String,
    /// A capture element (a source's), else a playback one.
    pub capture: bool,
    /// Lowest gain in dB (may be alsa-lib's "mute" value, -99999.99 dB).
    pub min_db: f64,
    /// Highest gain in dB.
    pub max_db: f64,
    /// Number of distinct hardware settings (raw range + 1): PulseAudio's
    /// `n_volume_steps` for a hardware volume.
    pub steps: u32,
    /// The element has a switch: mute is done in hardware.
    pub has_switch: bool,
}

/// The element's state as read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HwReading {
    /// The loudest channel's gain in dB (a per-channel balance set by another program
    /// becomes the node's single gain, as `pa_cvolume_max` does).
    pub db: f64,
    /// Muted by its switch (any channel off); `None` without a switch.
    pub muted: Option<bool>,
}

/// What a watch reports.
#[derive(Debug, Clone, PartialEq)]
pub enum HwEvent {
    /// Another program changed the element; this is what it holds now.
    Changed(HwReading),
    /// The control device went away (card removed) or failed; the watch has ended and
    /// the control is closed. The text says what happened.
    Gone(String),
}

/// Called on the watch's own (non-real-time) thread.
pub type HwCallback = Box<dyn Fn(HwEvent) + Send + Sync>;

/// A hardware volume control. *control*: every method may block briefly (an ioctl) and
/// must never be called from the real-time thread.
pub trait HardwareVolume: Send + Sync {
    /// What the control is.
    fn info(&self) -> &HwVolumeInfo;
    /// Sets every channel to `db`, rounding up to the next hardware step; returns the
    /// gain the hardware took (the loudest channel's, read back).
    fn set_db(&self, db: f64) -> Result<f64, DeviceError>;
    /// Sets the switch (only meaningful with [`HwVolumeInfo::has_switch`]).
    fn set_mute(&self, mute: bool) -> Result<(), DeviceError>;
    /// Reads the element now.
    fn read(&self) -> Result<HwReading, DeviceError>;
    /// Calls `on_event` on a watch thread whenever another program changes the element
    /// (changes made through this control are not reported back), and once with
    /// [`HwEvent::Gone`] if the control goes away. Replaces an earlier callback.
    fn watch(&self, on_event: HwCallback);
}

/// A linear gain in dB (−∞ for 0).
pub fn gain_to_db(gain: f64) -> f64 {
    if gain > 0.0 {
        20.0 * gain.log10()
    } else {
        f64::NEG_INFINITY
    }
}

/// A dB value as a linear gain (0 for −∞ and alsa-lib's mute value).
pub fn db_to_gain(db: f64) -> f64 {
    if db <= MUTE_DB {
        0.0
    } else {
        10f64.powf(db / 20.0)
    }
}

/// At or below this, a dB value means silence (alsa-lib reports a "mute" minimum as
/// -99999.99 dB, `SND_CTL_TLV_DB_GAIN_MUTE`).
pub const MUTE_DB: f64 = -9999.0;

/// A volume divided between the hardware and the software gain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// What the hardware holds, in dB.
    pub hw_db: f64,
    /// The software gain applied on top (linear; exactly 1.0 when the hardware is
    /// accurate enough).
    pub sw_gain: f32,
}

/// What to ask the hardware for when `gain` (linear) is requested: the request in dB
/// clamped into the element's range (silence asks for the bottom of the range).
pub fn hw_request_db(gain: f32, info: &HwVolumeInfo) -> f64 {
    gain_to_db(gain as f64).clamp(info.min_db, info.max_db)
}

/// The software gain that completes `gain` once the hardware holds `hw_db`: exactly 1.0
/// when that is within [`ACCURACY`] on PulseAudio's cubic scale, 0 for silence.
pub fn software_gain(gain: f32, hw_db: f64) -> f32 {
    let hw = db_to_gain(hw_db);
    if gain <= 0.0 {
        return 0.0;
    }
    if hw <= 0.0 {
        // The hardware is silent at its bottom step: nothing in software can help.
        return 1.0;
    }
    let residual = gain as f64 / hw;
    if (residual.cbrt() - 1.0).abs() <= ACCURACY {
        1.0
    } else {
        residual as f32
    }
}

/// Splits `gain` over `hw`: sets the hardware and returns what it took and the software
/// gain that completes the request.
pub fn apply(hw: &dyn HardwareVolume, gain: f32) -> Result<Split, DeviceError> {
    let hw_db = hw.set_db(hw_request_db(gain, hw.info()))?;
    Ok(Split {
        hw_db,
        sw_gain: software_gain(gain, hw_db),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `TLV_DB_SCALE`-like element: `steps` settings from `min_db`, `step_db` apart,
    /// rounding a request up the way alsa-lib's `set_playback_dB(…, +1)` does.
    struct Scale {
        min_db: f64,
        step_db: f64,
        steps: u32,
    }

    impl Scale {
        fn info(&self) -> HwVolumeInfo {
            HwVolumeInfo {
                card: "hw:Test".into(),
                element: "Master".into(),
                capture: false,
                min_db: self.min_db,
                max_db: self.min_db + self.step_db * (self.steps - 1) as f64,
                steps: self.steps,
                has_switch: false,
            }
        }

        fn round_up(&self, db: f64) -> f64 {
            // alsa-lib works in 1/100 dB integers; so does this.
            let k = ((db - self.min_db) / self.step_db - 1e-9).ceil().max(0.0) as u32;
            self.min_db + self.step_db * k.min(self.steps - 1) as f64
        }

        fn split(&self, gain: f32) -> Split {
            let hw_db = self.round_up(hw_request_db(gain, &self.info()));
            Split {
                hw_db,
                sw_gain: software_gain(gain, hw_db),
            }
        }
    }

    /// PulseAudio's cubic volume (1.0 = 100 %) as a linear gain.
    fn cubic(v: f64) -> f32 {
        (v * v * v) as f32
    }

    /// snd-dummy's Master: raw -50..100, 0.3 dB a step, -45..0 dB.
    const DUMMY: Scale = Scale {
        min_db: -45.0,
        step_db: 0.3,
        steps: 151,
    };

    #[test]
    fn full_volume_is_0_db_in_hardware_and_unity_in_software() {
        let s = DUMMY.split(1.0);
        assert_eq!(s.hw_db, 0.0);
        assert_eq!(s.sw_gain.to_bits(), 1.0f32.to_bits());
    }

    #[test]
    fn half_volume_rounds_up_to_the_next_step_and_is_accurate_enough() {
        // 50 % cubic = 60·log10(0.5) = -18.06 dB; the next step up is -18.0 dB, 0.06 dB
        // louder: within 1 % of the cubic scale, so no software gain.
        let s = DUMMY.split(cubic(0.5));
        assert!((s.hw_db - -18.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.sw_gain, 1.0);
    }

    #[test]
    fn below_the_hardware_range_software_does_the_rest() {
        // 10 % = -60 dB: the hardware stops at -45 dB, software takes the other -15 dB.
        let s = DUMMY.split(cubic(0.1));
        assert_eq!(s.hw_db, -45.0);
        assert!((gain_to_db(s.sw_gain as f64) - -15.0).abs() < 1e-3, "{s:?}");
        // 1 %: still exact (-120 dB), the resolution is the software's.
        let s = DUMMY.split(cubic(0.01));
        assert!((gain_to_db(s.sw_gain as f64) - -75.0).abs() < 1e-3, "{s:?}");
    }

    #[test]
    fn the_software_gain_never_exceeds_unity_inside_the_range() {
        // Coarse 1.5 dB steps: every request in the range leaves a residual ≤ 1.
        let coarse = Scale {
            min_db: -30.0,
            step_db: 1.5,
            steps: 21,
        };
        for i in 1..=1000 {
            let v = i as f64 / 1000.0;
            let s = coarse.split(cubic(v));
            assert!(s.sw_gain <= 1.0, "{v}: {s:?}");
            // The total is what was asked (or the accurate-enough step above it).
            let total = db_to_gain(s.hw_db) * s.sw_gain as f64;
            let asked = cubic(v) as f64;
            assert!(
                total >= asked * (1.0 - 1e-5) && (asked / total).cbrt() >= 1.0 - ACCURACY - 1e-9,
                "{v}: {s:?} total {total} asked {asked}"
            );
        }
    }

    #[test]
    fn a_step_that_misses_0_db_is_completed_in_software() {
        // Steps at ..., -0.5, +0.5 dB: 100 % takes +0.5 dB in hardware and -0.5 dB in
        // software (2 % on the cubic scale: more than accurate enough allows).
        let odd = Scale {
            min_db: -45.5,
            step_db: 1.0,
            steps: 47,
        };
        let s = odd.split(1.0);
        assert!((s.hw_db - 0.5).abs() < 1e-9);
        assert!((gain_to_db(s.sw_gain as f64) - -0.5).abs() < 1e-4, "{s:?}");
    }

    #[test]
    fn above_the_hardware_range_software_boosts() {
        // 150 % = +10.6 dB on an element that stops at 0 dB.
        let s = DUMMY.split(cubic(1.5));
        assert_eq!(s.hw_db, 0.0);
        assert!((gain_to_db(s.sw_gain as f64) - 60.0 * 1.5f64.log10()).abs() < 1e-3);
        // An element with +6 dB of headroom takes what it can.
        let loud = Scale {
            min_db: -24.0,
            step_db: 1.5,
            steps: 21,
        };
        let s = loud.split(cubic(1.5));
        assert_eq!(s.hw_db, 6.0);
    }

    #[test]
    fn silence_is_the_bottom_step_and_zero_software_gain() {
        let s = DUMMY.split(0.0);
        assert_eq!(s.hw_db, -45.0);
        assert_eq!(s.sw_gain, 0.0);
        // A "mute" bottom step: silent in hardware already.
        assert_eq!(db_to_gain(-99999.99), 0.0);
        assert_eq!(software_gain(0.5, -99999.99), 1.0);
    }

    #[test]
    fn db_and_gain_round_trip() {
        for db in [-60.0, -18.06, -0.3, 0.0, 6.0] {
            assert!((gain_to_db(db_to_gain(db)) - db).abs() < 1e-9);
        }
        assert_eq!(gain_to_db(0.0), f64::NEG_INFINITY);
    }
}
