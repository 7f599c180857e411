//! The plugin kinds as the config writes them, why one cannot be used, and small
//! helpers every host file shares.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

/// A LADSPA filter as the config writes it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LadspaSpec {
    /// A library name looked up in `$LADSPA_PATH` (or `/usr/lib/ladspa`, …), with or
    /// without `.so`, or a path with a `/` in it.
    pub plugin: String,
    /// The descriptor's label; may be left out when the library has only one.
    #[serde(default)]
    pub label: Option<String>,
    /// Input control ports to set, by port name or its lowercase alias.
    #[serde(default)]
    pub controls: BTreeMap<String, f64>,
}

/// An LV2 filter as the config writes it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Lv2Spec {
    /// The plugin's URI (`lv2ls` lists them).
    pub uri: String,
    /// Input control ports to set, by port symbol.
    #[serde(default)]
    pub controls: BTreeMap<String, f64>,
}

/// Either kind of plugin, with what it is built for: what the probe child is given.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub enum PluginSpec {
    /// A LADSPA plugin.
    Ladspa(LadspaSpec),
    /// An LV2 plugin.
    Lv2(Lv2Spec),
}

/// Why a plugin could not be used. Every variant mutes the sink whose chain holds it
/// (the daemon keeps serving everything else).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// No library file for a LADSPA plugin name.
    #[error("LADSPA plugin '{name}' not found in {searched} (install its package, or give a path)")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The directories searched.
        searched: String,
    },
    /// `dlopen` failed.
    #[error("cannot load {library}: {why}")]
    Load {
        /// The library.
        library: String,
        /// dlerror's text.
        why: String,
    },
    /// The library or plugin is not usable as it describes itself.
    #[error("{what}: {why}")]
    Invalid {
        /// The plugin.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// A feature or port kind quaverd does not host.
    #[error("{what}: {why}")]
    Unsupported {
        /// The plugin.
        what: String,
        /// What it needs.
        why: String,
    },
    /// A control in the config the plugin refuses.
    #[error("{what}: control '{name}': {why}")]
    Control {
        /// The plugin.
        what: String,
        /// The control.
        name: String,
        /// Why.
        why: String,
    },
    /// The probe child died of a signal: the plugin crashed.
    #[error(
        "{what} crashed ({signal}) while it was built and run in a probe process; it is not loaded into quaverd{stderr}"
    )]
    Crashed {
        /// The plugin.
        what: String,
        /// The signal, by name.
        signal: String,
        /// What the child wrote, if anything, introduced by ": ".
        stderr: String,
    },
    /// The probe child did not finish in time.
    #[error(
        "{what} did not finish building and running in a probe process within {secs} s (killed); it is not loaded into quaverd"
    )]
    Hung {
        /// The plugin.
        what: String,
        /// The limit.
        secs: f64,
    },
    /// The probe child could not run or failed without saying why.
    #[error("probing {what}: {why}")]
    Probe {
        /// The plugin.
        what: String,
        /// What went wrong.
        why: String,
    },
}

impl PluginSpec {
    /// A short name for messages.
    pub fn what(&self) -> String {
        match self {
            PluginSpec::Ladspa(s) => match &s.label {
                Some(l) => format!("LADSPA plugin '{}' label '{l}'", s.plugin),
                None => format!("LADSPA plugin '{}'", s.plugin),
            },
            PluginSpec::Lv2(s) => format!("LV2 plugin <{}>", s.uri),
        }
    }
}

/// A string kept for the life of the process, once per distinct text: control names
/// in errors are `&'static str`, so that refusing a control never allocates.
pub(crate) fn intern(s: &str) -> &'static str {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let set = seen.get_or_insert_with(HashSet::new);
    if let Some(&k) = set.get(s) {
        return k;
    }
    let k: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(k);
    k
}

/// A port name as a TOML-friendly key: lowercase, every run of other characters one
/// `_` ("Delay Time (s)" is `delay_time_s`).
pub(crate) fn alias(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_toml_keys() {
        assert_eq!(alias("Gain"), "gain");
        assert_eq!(alias("Delay Time (s)"), "delay_time_s");
        assert_eq!(alias("  Input (Left) "), "input_left");
        assert!(std::ptr::eq(intern("x-y"), intern(&String::from("x-y"))));
    }
}
