//! LADSPA and LV2 plugins as filters of a `[[filters]]` chain (docs/dsp/plugins.md).
//!
//! * [`ladspa`]: the plugin's `.so` opened with `dlopen`, its descriptor found by label.
//! * [`lv2`]: `liblilv-0.so.0` opened at run time to find the plugin by URI and read
//!   its ports; the plugin runs through its own `LV2_Descriptor`.
//! * [`host`]: [`PluginFilter`], the [`quaver_dsp::filter::Filter`] around one
//!   instance (or one per channel for a mono plugin), with buffers allocated once.
//! * [`probe`]: every plugin is first built and run in a short-lived child process
//!   (`quaverd --probe-plugin`), so one that crashes in its constructor kills the
//!   child, not the daemon.
//!
//! No `-dev` package is needed to build any of it.

mod build;
mod dl;
pub mod host;
pub mod ladspa;
pub mod lv2;
mod mute;
pub mod probe;
mod types;

pub use host::PluginFilter;
pub use mute::Mute;
pub use types::{LadspaSpec, Lv2Spec, PluginError, PluginSpec};
