//! LADSPA: the plugin's library opened with `dlopen`, `ladspa_descriptor(i)` walked
//! until the label matches, the descriptor checked field by field before anything in
//! it is called.

use super::dl::{Library, cstr};
use super::host::{Description, PluginFilter, Port, RawInstance, Role};
use super::types::{LadspaSpec, PluginError};
use std::ffi::{c_char, c_int, c_ulong, c_void};
use std::path::{Path, PathBuf};

const PORT_INPUT: c_int = 0x1;
const PORT_OUTPUT: c_int = 0x2;
const PORT_CONTROL: c_int = 0x4;
const PORT_AUDIO: c_int = 0x8;

const PROPERTY_HARD_RT_CAPABLE: c_int = 0x4;

const HINT_BOUNDED_BELOW: c_int = 0x1;
const HINT_BOUNDED_ABOVE: c_int = 0x2;
const HINT_TOGGLED: c_int = 0x4;
const HINT_SAMPLE_RATE: c_int = 0x8;
const HINT_LOGARITHMIC: c_int = 0x10;
const HINT_INTEGER: c_int = 0x20;
const HINT_DEFAULT_MASK: c_int = 0x3C0;

/// More ports than any real plugin has: a count beyond it is garbage.
const MAX_PORTS: c_ulong = 4096;
/// Descriptors tried per library before giving up on finding a label.
const MAX_DESCRIPTORS: c_ulong = 4096;

type Handle = *mut c_void;

#[repr(C)]
struct RangeHint {
    hint: c_int,
    lower: f32,
    upper: f32,
}

/// `LADSPA_Descriptor`, as ladspa.h (version 1.1) lays it out.
#[repr(C)]
struct Descriptor {
    unique_id: c_ulong,
    label: *const c_char,
    properties: c_int,
    name: *const c_char,
    maker: *const c_char,
    copyright: *const c_char,
    port_count: c_ulong,
    port_descriptors: *const c_int,
    port_names: *const *const c_char,
    port_range_hints: *const RangeHint,
    implementation_data: *mut c_void,
    instantiate: Option<unsafe extern "C" fn(*const Descriptor, c_ulong) -> Handle>,
    connect_port: Option<unsafe extern "C" fn(Handle, c_ulong, *mut f32)>,
    activate: Option<unsafe extern "C" fn(Handle)>,
    run: Option<unsafe extern "C" fn(Handle, c_ulong)>,
    run_adding: Option<unsafe extern "C" fn(Handle, c_ulong)>,
    set_run_adding_gain: Option<unsafe extern "C" fn(Handle, f32)>,
    deactivate: Option<unsafe extern "C" fn(Handle)>,
    cleanup: Option<unsafe extern "C" fn(Handle)>,
}

type DescriptorFn = unsafe extern "C" fn(c_ulong) -> *const Descriptor;

/// Where LADSPA libraries are looked for: `$LADSPA_PATH`, else Debian's directories.
fn search_path() -> Vec<PathBuf> {
    match std::env::var_os("LADSPA_PATH") {
        Some(p) if !p.is_empty() => std::env::split_paths(&p).collect(),
        _ => [
            "/usr/lib/ladspa",
            "/usr/local/lib/ladspa",
            "/usr/lib/x86_64-linux-gnu/ladspa",
        ]
        .iter()
        .map(PathBuf::from)
        .collect(),
    }
}

/// The library file for `plugin`: a path as it is, a name in the search path.
pub fn find_library(plugin: &str) -> Result<PathBuf, PluginError> {
    if plugin.contains('/') {
        return Ok(PathBuf::from(plugin));
    }
    let file = if plugin.ends_with(".so") {
        plugin.to_string()
    } else {
        format!("{plugin}.so")
    };
    let dirs = search_path();
    dirs.iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
        .ok_or_else(|| PluginError::NotFound {
            name: plugin.into(),
            searched: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(":"),
        })
}

/// Finds the descriptor labelled `label` (or the only one) in `path`.
fn find_descriptor(path: &Path, label: Option<&str>) -> Result<&'static Descriptor, PluginError> {
    let shown = path.display().to_string();
    let lib = Library::open(&shown)?;
    let sym = lib.symbol(c"ladspa_descriptor");
    if sym.is_null() {
        return Err(PluginError::Invalid {
            what: shown,
            why: "not a LADSPA library (no ladspa_descriptor function)".into(),
        });
    }
    // SAFETY: a LADSPA library's ladspa_descriptor has this signature (ladspa.h).
    let get: DescriptorFn = unsafe { std::mem::transmute::<*mut c_void, DescriptorFn>(sym) };
    let mut found: Vec<(String, &'static Descriptor)> = Vec::new();
    for i in 0..MAX_DESCRIPTORS {
        // SAFETY: the function returns null past the last descriptor.
        let d = unsafe { get(i) };
        if d.is_null() {
            break;
        }
        // SAFETY: a non-null descriptor lives as long as the library, which is never
        // unloaded.
        let d: &'static Descriptor = unsafe { &*d };
        // SAFETY: the label is null or a C string.
        let l = unsafe { cstr(d.label) }.unwrap_or_default();
        if label == Some(l.as_str()) {
            return Ok(d);
        }
        found.push((l, d));
    }
    if label.is_none() && found.len() == 1 {
        return Ok(found[0].1);
    }
    let labels: Vec<&str> = found.iter().map(|(l, _)| l.as_str()).collect();
    Err(PluginError::Invalid {
        what: shown,
        why: match label {
            Some(l) => format!(
                "has no plugin labelled '{l}'; its labels: {}",
                labels.join(", ")
            ),
            None => format!(
                "holds several plugins; give one with label = …: {}",
                labels.join(", ")
            ),
        },
    })
}

/// Reads and checks the descriptor's ports, at `rate` Hz.
fn describe(d: &Descriptor, what: &str, rate: u32) -> Result<Description, PluginError> {
    let bad = |why: String| PluginError::Invalid {
        what: what.into(),
        why,
    };
    if d.instantiate.is_none() || d.connect_port.is_none() || d.run.is_none() {
        return Err(bad(
            "its descriptor lacks instantiate, connect_port or run".into()
        ));
    }
    if d.port_count > MAX_PORTS {
        return Err(bad(format!("claims {} ports", d.port_count)));
    }
    let n = d.port_count as usize;
    if n > 0
        && (d.port_descriptors.is_null() || d.port_names.is_null() || d.port_range_hints.is_null())
    {
        return Err(bad("its descriptor has ports but no port tables".into()));
    }
    let mut ports = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: the three tables hold port_count entries each (ladspa.h).
        let (pd, name, hint) = unsafe {
            (
                *d.port_descriptors.add(i),
                cstr(*d.port_names.add(i)),
                &*d.port_range_hints.add(i),
            )
        };
        let name = name.unwrap_or_else(|| format!("port {i}"));
        let role = match (
            pd & (PORT_INPUT | PORT_OUTPUT),
            pd & (PORT_CONTROL | PORT_AUDIO),
        ) {
            (PORT_INPUT, PORT_AUDIO) => Role::AudioIn,
            (PORT_OUTPUT, PORT_AUDIO) => Role::AudioOut,
            (PORT_INPUT, PORT_CONTROL) => Role::ControlIn,
            (PORT_OUTPUT, PORT_CONTROL) => Role::ControlOut,
            _ => {
                return Err(bad(format!(
                    "port {i} ('{name}') has descriptor {pd:#x}: not one direction and one type"
                )));
            }
        };
        let (min, max, default, integer) = range(hint, rate);
        if role == Role::ControlIn && min > max {
            return Err(bad(format!(
                "control port {i} ('{name}') has its lower bound {min} above its upper bound {max}"
            )));
        }
        ports.push(Port {
            index: i as u32,
            role,
            latency: role == Role::ControlOut && name.eq_ignore_ascii_case("latency"),
            name,
            min,
            max,
            default,
            integer,
        });
    }
    Ok(Description {
        what: what.into(),
        ports,
        atom_types: (0, 0),
        hard_rt: d.properties & PROPERTY_HARD_RT_CAPABLE != 0,
    })
}

/// A control port's bounds, default and whether it takes whole numbers only.
fn range(h: &RangeHint, rate: u32) -> (f64, f64, f64, bool) {
    let scale = if h.hint & HINT_SAMPLE_RATE != 0 {
        rate as f64
    } else {
        1.0
    };
    let toggled = h.hint & HINT_TOGGLED != 0;
    let (lo, hi) = if toggled {
        (0.0, 1.0)
    } else {
        (
            if h.hint & HINT_BOUNDED_BELOW != 0 && h.lower.is_finite() {
                h.lower as f64 * scale
            } else {
                f64::NEG_INFINITY
            },
            if h.hint & HINT_BOUNDED_ABOVE != 0 && h.upper.is_finite() {
                h.upper as f64 * scale
            } else {
                f64::INFINITY
            },
        )
    };
    let log = h.hint & HINT_LOGARITHMIC != 0 && lo > 0.0 && hi > 0.0;
    let between = |w: f64| {
        if log {
            (lo.ln() * (1.0 - w) + hi.ln() * w).exp()
        } else {
            lo * (1.0 - w) + hi * w
        }
    };
    let default = match h.hint & HINT_DEFAULT_MASK {
        0x40 => lo,
        0x80 => between(0.25),
        0xC0 => between(0.5),
        0x100 => between(0.75),
        0x140 => hi,
        0x200 => 0.0,
        0x240 => 1.0,
        0x280 => 100.0,
        0x2C0 => 440.0,
        _ => 0.0,
    };
    // Bounds in the wrong order are refused by the caller; max() keeps clamp from
    // panicking before that.
    let default = if default.is_finite() { default } else { 0.0 }.clamp(lo, hi.max(lo));
    (lo, hi, default, toggled || h.hint & HINT_INTEGER != 0)
}

struct Instance {
    d: &'static Descriptor,
    handle: Handle,
    active: bool,
}

// SAFETY: LADSPA instances may be used from any one thread at a time; the filter is
// moved to the RT thread whole and only ever used from one thread.
unsafe impl Send for Instance {}

impl RawInstance for Instance {
    unsafe fn connect(&mut self, port: u32, data: *mut f32) {
        if let Some(f) = self.d.connect_port {
            // SAFETY: the caller's promise; port is one of the descriptor's.
            unsafe { f(self.handle, port as c_ulong, data) };
        }
    }

    fn activate(&mut self) {
        if let Some(f) = self.d.activate {
            // SAFETY: a live instance, activated once.
            unsafe { f(self.handle) };
        }
        self.active = true;
    }

    fn run(&mut self, frames: usize) {
        if let Some(f) = self.d.run {
            // SAFETY: every port is connected to a buffer of CHUNK ≥ frames samples.
            unsafe { f(self.handle, frames as c_ulong) };
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.active
            && let Some(f) = self.d.deactivate
        {
            // SAFETY: an active instance.
            unsafe { f(self.handle) };
        }
        if let Some(f) = self.d.cleanup {
            // SAFETY: a live instance, not used again.
            unsafe { f(self.handle) };
        }
    }
}

/// Builds a LADSPA filter in this process.
pub fn build(spec: &LadspaSpec, channels: usize, rate: u32) -> Result<PluginFilter, PluginError> {
    let path = find_library(&spec.plugin)?;
    let d = find_descriptor(&path, spec.label.as_deref())?;
    // SAFETY: checked C strings of a descriptor that stays loaded.
    let label = unsafe { cstr(d.label) }.unwrap_or_default();
    let what = format!("LADSPA plugin '{label}' in {}", path.display());
    let desc = describe(d, &what, rate)?;
    PluginFilter::new(desc, channels, &spec.controls, || {
        let inst = d.instantiate.expect("checked in describe");
        // SAFETY: the descriptor's own instantiate, at a rate above 0.
        let handle = unsafe { inst(d, rate as c_ulong) };
        if handle.is_null() {
            return Err(PluginError::Invalid {
                what: what.clone(),
                why: format!("instantiate at {rate} Hz returned no instance"),
            });
        }
        Ok(Box::new(Instance {
            d,
            handle,
            active: false,
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(hint: c_int, lower: f32, upper: f32) -> RangeHint {
        RangeHint { hint, lower, upper }
    }

    #[test]
    fn ranges_and_defaults_follow_the_hints() {
        let both = HINT_BOUNDED_BELOW | HINT_BOUNDED_ABOVE;
        // Middle of 1..100 on a log scale is 10; linear "low" is a quarter of the way.
        let (lo, hi, d, int) = range(&hint(both | HINT_LOGARITHMIC | 0xC0, 1.0, 100.0), 48_000);
        assert_eq!((lo, hi, int), (1.0, 100.0, false));
        assert!((d - 10.0).abs() < 1e-9, "{d}");
        assert_eq!(range(&hint(both | 0x80, 0.0, 8.0), 48_000).2, 2.0);
        // Bounds relative to the rate: 0.5 of 48 kHz, default the maximum.
        let (_, hi, d, _) = range(&hint(both | HINT_SAMPLE_RATE | 0x140, 0.0, 0.5), 48_000);
        assert_eq!((hi, d), (24_000.0, 24_000.0));
        // Toggled: 0 or 1, whole numbers, whatever bounds it claims.
        assert_eq!(
            range(&hint(HINT_TOGGLED | 0x240, 5.0, 9.0), 48_000),
            (0.0, 1.0, 1.0, true)
        );
        // No bounds, no default: unbounded, 0; NaN bounds count as none.
        let (lo, hi, d, _) = range(&hint(both, f32::NAN, f32::NAN), 48_000);
        assert_eq!((lo, hi, d), (f64::NEG_INFINITY, f64::INFINITY, 0.0));
        // A default outside the bounds is brought inside them.
        assert_eq!(range(&hint(both | 0x2C0, 0.0, 1.0), 48_000).2, 1.0);
        // Reversed bounds do not panic here (describe refuses them).
        let (lo, hi, _, _) = range(&hint(both | 0xC0, 2.0, 1.0), 48_000);
        assert!(lo > hi);
    }
}
