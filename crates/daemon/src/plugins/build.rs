//! Building a plugin filter in this process, whichever kind it is.

use super::host::PluginFilter;
use super::types::{PluginError, PluginSpec};
use super::{ladspa, lv2};

impl PluginSpec {
    /// Builds the filter in this process for `channels` channels at `rate` Hz,
    /// without a probe (the probe child calls this; tests use it for their own
    /// plugins).
    pub fn build_here(&self, channels: usize, rate: u32) -> Result<PluginFilter, PluginError> {
        match self {
            PluginSpec::Ladspa(s) => ladspa::build(s, channels, rate),
            PluginSpec::Lv2(s) => lv2::build(s, channels, rate),
        }
    }
}
