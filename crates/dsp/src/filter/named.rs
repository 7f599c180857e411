//! Controls known only when a filter is built, each with a name and a range: a LADSPA
//! or LV2 plugin's input control ports.

use super::error::FilterError;

/// One control with its accepted range.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedControl {
    /// The name as the filter knows it (a LADSPA port name, an LV2 port symbol).
    pub name: &'static str,
    /// A second accepted spelling (a LADSPA port name lowercased, non-alphanumerics as
    /// `_`), so `Gain` is also `gain` in a TOML key.
    pub alias: &'static str,
    /// Smallest accepted value.
    pub min: f64,
    /// Largest accepted value.
    pub max: f64,
    /// Only whole numbers (integer and toggled ports).
    pub integer: bool,
    /// What a value out of range is told, with the range in it
    /// ("outside [0, 10], the range the plugin declares").
    pub out_of_range: &'static str,
}

impl NamedControl {
    /// True when `name` is this control's name or alias.
    pub fn is(&self, name: &str) -> bool {
        self.name == name || self.alias == name
    }

    /// Checks `value` against the range.
    pub fn check(&self, value: f64) -> Result<(), FilterError> {
        if !value.is_finite() || value < self.min || value > self.max {
            return Err(FilterError::ControlValue {
                name: self.name,
                value,
                why: self.out_of_range,
            });
        }
        if self.integer && value.fract() != 0.0 {
            return Err(FilterError::ControlValue {
                name: self.name,
                value,
                why: "this port takes whole numbers only",
            });
        }
        Ok(())
    }
}

/// A filter's run-time controls: `names` lists them for messages.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedControls {
    /// Every control's name, comma-separated, for "no such control" errors.
    pub names: &'static str,
    /// The controls.
    pub controls: Vec<NamedControl>,
}

impl NamedControls {
    /// The control called `name` (or with that alias).
    pub fn find(&self, name: &str) -> Option<&NamedControl> {
        self.controls.iter().find(|c| c.is(name))
    }

    /// Checks a change of control `name` to `value`.
    pub fn check(&self, name: &str, value: f64) -> Result<(), FilterError> {
        match self.find(name) {
            Some(c) => c.check(value),
            None => Err(FilterError::UnknownControl { known: self.names }),
        }
    }
}
