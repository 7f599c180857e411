//! LV2: `liblilv-0.so.0` (Debian's liblilv-0-0) opened at run time reads the installed
//! bundles' Turtle, finds the plugin by URI and instantiates it; the host then runs it
//! through the plugin's own `LV2_Descriptor`. Lilv is not thread-safe, so every call
//! into it holds one lock, and all of them are on control threads.
//!
//! Features given to plugins: `urid:map`, `urid:unmap`, `options:options`
//! (sample rate, block lengths) and `buf-size:boundedBlockLength`. A plugin that
//! requires any other is refused, naming it. Atom ports (events in, notifications
//! out, for a UI) get an empty sequence and room to write each cycle; a port of any
//! other kind (CV) is refused unless it may be left unconnected.

use super::dl::{Library, cstr};
use super::host::{CHUNK, Description, PluginFilter, Port, RawInstance, Role};
use super::types::{Lv2Spec, PluginError};
use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::{Mutex, OnceLock};

/// The library, by soname (no -dev package needed).
pub const LILV: &str = "liblilv-0.so.0";

type World = c_void;
type Node = c_void;
type Nodes = c_void;
type Plugin = c_void;
type LPort = c_void;
type Iter = c_void;

#[repr(C)]
struct Feature {
    uri: *const c_char,
    data: *mut c_void,
}

#[repr(C)]
struct Lv2Descriptor {
    uri: *const c_char,
    instantiate: *const c_void,
    connect_port: Option<unsafe extern "C" fn(*mut c_void, u32, *mut c_void)>,
    activate: Option<unsafe extern "C" fn(*mut c_void)>,
    run: Option<unsafe extern "C" fn(*mut c_void, u32)>,
    deactivate: Option<unsafe extern "C" fn(*mut c_void)>,
    cleanup: Option<unsafe extern "C" fn(*mut c_void)>,
    extension_data: *const c_void,
}

/// `LilvInstance`, whose accessors are inline functions in lilv.h.
#[repr(C)]
struct LilvInstance {
    descriptor: *const Lv2Descriptor,
    handle: *mut c_void,
    pimpl: *mut c_void,
}

macro_rules! table {
    ($( $field:ident : $ty:ty; )*) => {
        /// liblilv's functions used here.
        struct Lilv { $( $field: $ty, )* }
        impl Lilv {
            fn resolve(lib: &Library) -> Result<Lilv, PluginError> {
                Ok(Lilv { $( $field: {
                    let name = CString::new(stringify!($field)).expect("no NUL");
                    let p = lib.symbol(&name);
                    if p.is_null() {
                        return Err(PluginError::Load {
                            library: LILV.into(),
                            why: format!("it has no {}", stringify!($field)),
                        });
                    }
                    // SAFETY: lilv's exported function of this signature (lilv.h).
                    unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
                }, )* })
            }
        }
    };
}

table! {
    lilv_world_new: unsafe extern "C" fn() -> *mut World;
    lilv_world_load_all: unsafe extern "C" fn(*mut World);
    lilv_new_uri: unsafe extern "C" fn(*mut World, *const c_char) -> *mut Node;
    lilv_node_free: unsafe extern "C" fn(*mut Node);
    lilv_node_as_string: unsafe extern "C" fn(*const Node) -> *const c_char;
    lilv_world_get_all_plugins: unsafe extern "C" fn(*const World) -> *const c_void;
    lilv_plugins_get_by_uri: unsafe extern "C" fn(*const c_void, *const Node) -> *const Plugin;
    lilv_plugin_verify: unsafe extern "C" fn(*const Plugin) -> bool;
    lilv_plugin_get_num_ports: unsafe extern "C" fn(*const Plugin) -> u32;
    lilv_plugin_get_port_by_index: unsafe extern "C" fn(*const Plugin, u32) -> *const LPort;
    lilv_port_is_a: unsafe extern "C" fn(*const Plugin, *const LPort, *const Node) -> bool;
    lilv_port_has_property: unsafe extern "C" fn(*const Plugin, *const LPort, *const Node) -> bool;
    lilv_port_get_symbol: unsafe extern "C" fn(*const Plugin, *const LPort) -> *const Node;
    lilv_plugin_get_port_ranges_float: unsafe extern "C" fn(*const Plugin, *mut f32, *mut f32, *mut f32);
    lilv_plugin_get_required_features: unsafe extern "C" fn(*const Plugin) -> *mut Nodes;
    lilv_plugin_has_feature: unsafe extern "C" fn(*const Plugin, *const Node) -> bool;
    lilv_nodes_begin: unsafe extern "C" fn(*const Nodes) -> *mut Iter;
    lilv_nodes_get: unsafe extern "C" fn(*const Nodes, *const Iter) -> *const Node;
    lilv_nodes_next: unsafe extern "C" fn(*const Nodes, *mut Iter) -> *mut Iter;
    lilv_nodes_is_end: unsafe extern "C" fn(*const Nodes, *const Iter) -> bool;
    lilv_nodes_free: unsafe extern "C" fn(*mut Nodes);
    lilv_plugin_instantiate: unsafe extern "C" fn(*const Plugin, f64, *const *const Feature) -> *mut LilvInstance;
    lilv_instance_free: unsafe extern "C" fn(*mut LilvInstance);
}

/// Lilv and the world of every installed bundle, loaded once per process.
struct Host {
    lilv: Lilv,
    world: *mut World,
}

// SAFETY: only used under HOST's lock.
unsafe impl Send for Host {}

fn host() -> Result<std::sync::MutexGuard<'static, Host>, PluginError> {
    static HOST: OnceLock<Result<Mutex<Host>, String>> = OnceLock::new();
    let h = HOST.get_or_init(|| {
        let lib = Library::open(LILV).map_err(|e| format!("{e} (install liblilv-0-0)"))?;
        let lilv = Lilv::resolve(&lib).map_err(|e| e.to_string())?;
        // SAFETY: lilv's constructor and loader; the world lives for the process.
        let world = unsafe { (lilv.lilv_world_new)() };
        if world.is_null() {
            return Err("lilv_world_new failed".into());
        }
        // SAFETY: a live world.
        unsafe { (lilv.lilv_world_load_all)(world) };
        Ok(Mutex::new(Host { lilv, world }))
    });
    match h {
        Ok(m) => Ok(m.lock().unwrap_or_else(|e| e.into_inner())),
        Err(e) => Err(PluginError::Load {
            library: LILV.into(),
            why: e.clone(),
        }),
    }
}

const LV2: &str = "http://lv2plug.in/ns/lv2core#";
const URID_MAP: &CStr = c"http://lv2plug.in/ns/ext/urid#map";
const URID_UNMAP: &CStr = c"http://lv2plug.in/ns/ext/urid#unmap";
const OPTIONS: &CStr = c"http://lv2plug.in/ns/ext/options#options";
const BOUNDED: &CStr = c"http://lv2plug.in/ns/ext/buf-size#boundedBlockLength";

impl Host {
    fn uri(&self, s: &str) -> *mut Node {
        let c = CString::new(s).unwrap_or_default();
        // SAFETY: a live world and a C string.
        unsafe { (self.lilv.lilv_new_uri)(self.world, c.as_ptr()) }
    }

    fn free(&self, n: *mut Node) {
        // SAFETY: a node from lilv_new_uri, freed once.
        unsafe { (self.lilv.lilv_node_free)(n) }
    }

    fn plugin(&self, uri: &str) -> Result<*const Plugin, PluginError> {
        let what = format!("LV2 plugin <{uri}>");
        let node = self.uri(uri);
        // SAFETY: a live world; the node is freed after use.
        let p = unsafe {
            let all = (self.lilv.lilv_world_get_all_plugins)(self.world);
            (self.lilv.lilv_plugins_get_by_uri)(all, node)
        };
        self.free(node);
        if p.is_null() {
            return Err(PluginError::Invalid {
                what,
                why: "not installed: no bundle in LV2_PATH describes it (lv2ls lists what is)"
                    .into(),
            });
        }
        // SAFETY: a plugin of the world.
        if !unsafe { (self.lilv.lilv_plugin_verify)(p) } {
            return Err(PluginError::Invalid {
                what,
                why: "its description is incomplete (lilv_plugin_verify)".into(),
            });
        }
        Ok(p)
    }

    /// The features the plugin requires that quaverd does not provide.
    fn missing_features(&self, p: *const Plugin) -> Vec<String> {
        let given = [URID_MAP, URID_UNMAP, OPTIONS, BOUNDED];
        let mut missing = Vec::new();
        // SAFETY: a plugin of the world; the collection is iterated, then freed.
        unsafe {
            let req = (self.lilv.lilv_plugin_get_required_features)(p);
            if req.is_null() {
                return missing;
            }
            let mut it = (self.lilv.lilv_nodes_begin)(req);
            while !(self.lilv.lilv_nodes_is_end)(req, it) {
                let n = (self.lilv.lilv_nodes_get)(req, it);
                let f = cstr((self.lilv.lilv_node_as_string)(n)).unwrap_or_default();
                if !given.iter().any(|g| g.to_str() == Ok(f.as_str())) {
                    missing.push(f);
                }
                it = (self.lilv.lilv_nodes_next)(req, it);
            }
            (self.lilv.lilv_nodes_free)(req);
        }
        missing
    }

    fn describe(
        &self,
        p: *const Plugin,
        what: &str,
        rate: u32,
    ) -> Result<Description, PluginError> {
        let names = [
            "AudioPort",
            "ControlPort",
            "InputPort",
            "OutputPort",
            "connectionOptional",
            "integer",
            "toggled",
            "enumeration",
            "sampleRate",
            "reportsLatency",
        ];
        let atom_class = self.uri("http://lv2plug.in/ns/ext/atom#AtomPort");
        let nodes: Vec<*mut Node> = names
            .iter()
            .map(|n| self.uri(&format!("{LV2}{n}")))
            .collect();
        let [
            audio,
            control,
            input,
            output,
            optional,
            integer,
            toggled,
            enumeration,
            sample_rate,
            latency,
        ] = nodes[..]
        else {
            unreachable!("ten names")
        };
        // SAFETY: a plugin of the world.
        let n = unsafe { (self.lilv.lilv_plugin_get_num_ports)(p) } as usize;
        let (mut min, mut max, mut def) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
        // SAFETY: three arrays of num_ports floats.
        unsafe {
            (self.lilv.lilv_plugin_get_port_ranges_float)(
                p,
                min.as_mut_ptr(),
                max.as_mut_ptr(),
                def.as_mut_ptr(),
            )
        };
        let mut ports = Vec::with_capacity(n);
        let mut err = None;
        for i in 0..n {
            // SAFETY: index below num_ports; the nodes are live until freed below.
            let (port, is, has) = unsafe {
                let port = (self.lilv.lilv_plugin_get_port_by_index)(p, i as u32);
                let (is_a, has_p) = (self.lilv.lilv_port_is_a, self.lilv.lilv_port_has_property);
                (port, move |c| is_a(p, port, c), move |c| has_p(p, port, c))
            };
            // SAFETY: as above; the symbol node belongs to the plugin.
            let symbol = unsafe {
                cstr((self.lilv.lilv_node_as_string)((self
                    .lilv
                    .lilv_port_get_symbol)(
                    p, port
                )))
            }
            .unwrap_or_else(|| format!("port{i}"));
            let role = match (is(audio), is(control), is(input), is(output)) {
                (true, _, true, _) => Role::AudioIn,
                (true, _, _, true) => Role::AudioOut,
                (_, true, true, _) => Role::ControlIn,
                (_, true, _, true) => Role::ControlOut,
                _ if is(atom_class) && is(input) => Role::AtomIn,
                _ if is(atom_class) && is(output) => Role::AtomOut,
                _ if has(optional) => Role::Unconnected,
                _ => {
                    err = Some(format!(
                        "port {i} ('{symbol}') is neither an audio, a control nor an atom port (a CV port?), which quaverd does not host"
                    ));
                    break;
                }
            };
            let scale = if has(sample_rate) { rate as f64 } else { 1.0 };
            let bound = |v: f32, inf: f64| if v.is_finite() { v as f64 * scale } else { inf };
            let (lo, hi) = (
                bound(min[i], f64::NEG_INFINITY),
                bound(max[i], f64::INFINITY),
            );
            let d = if def[i].is_finite() {
                def[i] as f64 * scale
            } else if lo.is_finite() {
                lo
            } else {
                0.0
            };
            ports.push(Port {
                index: i as u32,
                role,
                name: symbol,
                min: lo,
                max: hi,
                default: d.clamp(lo, hi.max(lo)),
                integer: has(integer) || has(toggled) || has(enumeration),
                latency: role == Role::ControlOut && has(latency),
            });
        }
        for n in nodes {
            self.free(n);
        }
        self.free(atom_class);
        let rt = self.uri(&format!("{LV2}hardRTCapable"));
        // SAFETY: a plugin of the world and a live node.
        let hard_rt = unsafe { (self.lilv.lilv_plugin_has_feature)(p, rt) };
        self.free(rt);
        match err {
            Some(why) => Err(PluginError::Unsupported {
                what: what.into(),
                why,
            }),
            None => Ok(Description {
                what: what.into(),
                ports,
                atom_types: (
                    urid(c"http://lv2plug.in/ns/ext/atom#Sequence"),
                    urid(c"http://lv2plug.in/ns/ext/atom#Chunk"),
                ),
                hard_rt,
            }),
        }
    }
}

/// The URIs plugins map to numbers, shared by every instance (`urid:map`).
static URIDS: Mutex<Vec<CString>> = Mutex::new(Vec::new());

unsafe extern "C" fn map(_h: *mut c_void, uri: *const c_char) -> u32 {
    if uri.is_null() {
        return 0;
    }
    // SAFETY: the plugin passes a C string.
    let uri = unsafe { CStr::from_ptr(uri) };
    let mut v = URIDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = v.iter().position(|u| u.as_c_str() == uri) {
        return i as u32 + 1;
    }
    v.push(uri.to_owned());
    v.len() as u32
}

unsafe extern "C" fn unmap(_h: *mut c_void, urid: u32) -> *const c_char {
    let v = URIDS.lock().unwrap_or_else(|e| e.into_inner());
    match v.get((urid as usize).wrapping_sub(1)) {
        // The strings are never removed or moved (each CString owns its heap bytes).
        Some(u) => u.as_ptr(),
        None => std::ptr::null(),
    }
}

fn urid(uri: &CStr) -> u32 {
    // SAFETY: a C string.
    unsafe { map(std::ptr::null_mut(), uri.as_ptr()) }
}

#[repr(C)]
struct UridMap {
    handle: *mut c_void,
    map: unsafe extern "C" fn(*mut c_void, *const c_char) -> u32,
}

#[repr(C)]
struct UridUnmap {
    handle: *mut c_void,
    unmap: unsafe extern "C" fn(*mut c_void, u32) -> *const c_char,
}

#[repr(C)]
struct LvOption {
    context: u32,
    subject: u32,
    key: u32,
    size: u32,
    kind: u32,
    value: *const c_void,
}

/// The feature structures one instance was given; they must outlive it.
struct Features {
    _map: Box<UridMap>,
    _unmap: Box<UridUnmap>,
    _values: Box<(f32, i32, i32, i32)>,
    _options: Box<[LvOption; 5]>,
    _list: Box<[Feature; 4]>,
    pointers: Box<[*const Feature; 5]>,
}

fn features(rate: u32) -> Features {
    let mut map_f = Box::new(UridMap {
        handle: std::ptr::null_mut(),
        map,
    });
    let mut unmap_f = Box::new(UridUnmap {
        handle: std::ptr::null_mut(),
        unmap,
    });
    let values = Box::new((rate as f32, CHUNK as i32, 1i32, CHUNK as i32));
    let (float, int) = (
        urid(c"http://lv2plug.in/ns/ext/atom#Float"),
        urid(c"http://lv2plug.in/ns/ext/atom#Int"),
    );
    let opt = |key: &CStr, kind: u32, value: *const c_void| LvOption {
        context: 0,
        subject: 0,
        key: urid(key),
        size: 4,
        kind,
        value,
    };
    let mut options = Box::new([
        opt(
            c"http://lv2plug.in/ns/ext/parameters#sampleRate",
            float,
            (&values.0 as *const f32).cast(),
        ),
        opt(
            c"http://lv2plug.in/ns/ext/buf-size#maxBlockLength",
            int,
            (&values.1 as *const i32).cast(),
        ),
        opt(
            c"http://lv2plug.in/ns/ext/buf-size#minBlockLength",
            int,
            (&values.2 as *const i32).cast(),
        ),
        opt(
            c"http://lv2plug.in/ns/ext/buf-size#nominalBlockLength",
            int,
            (&values.3 as *const i32).cast(),
        ),
        LvOption {
            context: 0,
            subject: 0,
            key: 0,
            size: 0,
            kind: 0,
            value: std::ptr::null(),
        },
    ]);
    let list = Box::new([
        Feature {
            uri: URID_MAP.as_ptr(),
            data: (&mut *map_f as *mut UridMap).cast(),
        },
        Feature {
            uri: URID_UNMAP.as_ptr(),
            data: (&mut *unmap_f as *mut UridUnmap).cast(),
        },
        Feature {
            uri: OPTIONS.as_ptr(),
            data: options.as_mut_ptr().cast(),
        },
        Feature {
            uri: BOUNDED.as_ptr(),
            data: std::ptr::null_mut(),
        },
    ]);
    let pointers = Box::new([
        &list[0] as *const Feature,
        &list[1],
        &list[2],
        &list[3],
        std::ptr::null(),
    ]);
    Features {
        _map: map_f,
        _unmap: unmap_f,
        _values: values,
        _options: options,
        _list: list,
        pointers,
    }
}

struct Instance {
    inst: *mut LilvInstance,
    d: &'static Lv2Descriptor,
    active: bool,
    _features: Features,
}

// SAFETY: an LV2 instance may be used from one thread at a time; the filter moves to
// the RT thread whole.
unsafe impl Send for Instance {}

impl RawInstance for Instance {
    unsafe fn connect(&mut self, port: u32, data: *mut f32) {
        if let Some(f) = self.d.connect_port {
            // SAFETY: the caller's promise; a live instance.
            unsafe { f((*self.inst).handle, port, data.cast()) };
        }
    }

    fn activate(&mut self) {
        if let Some(f) = self.d.activate {
            // SAFETY: a live instance, activated once.
            unsafe { f((*self.inst).handle) };
        }
        self.active = true;
    }

    fn run(&mut self, frames: usize) {
        if let Some(f) = self.d.run {
            // SAFETY: every port connected to CHUNK ≥ frames samples, or optional.
            unsafe { f((*self.inst).handle, frames as u32) };
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.active
            && let Some(f) = self.d.deactivate
        {
            // SAFETY: an active instance.
            unsafe { f((*self.inst).handle) };
        }
        if let Ok(h) = host() {
            // SAFETY: lilv's instance, freed once (it calls the plugin's cleanup).
            unsafe { (h.lilv.lilv_instance_free)(self.inst) };
        }
    }
}

/// Whether liblilv can be loaded (its error when not), to skip tests loudly.
pub fn available() -> Result<(), String> {
    host().map(drop).map_err(|e| e.to_string())
}

/// Builds an LV2 filter in this process.
pub fn build(spec: &Lv2Spec, channels: usize, rate: u32) -> Result<PluginFilter, PluginError> {
    let what = format!("LV2 plugin <{}>", spec.uri);
    let (plugin, desc) = {
        let h = host()?;
        let p = h.plugin(&spec.uri)?;
        let missing = h.missing_features(p);
        if !missing.is_empty() {
            return Err(PluginError::Unsupported {
                what,
                why: format!(
                    "it requires the feature(s) {}, which quaverd does not provide (it provides urid:map, urid:unmap, options and boundedBlockLength)",
                    missing.join(", ")
                ),
            });
        }
        (p as usize, h.describe(p, &what, rate)?)
    };
    PluginFilter::new(desc, channels, &spec.controls, || {
        let f = features(rate);
        let h = host()?;
        // SAFETY: a plugin of the world (worlds are never freed); the features live
        // as long as the instance.
        let inst = unsafe {
            (h.lilv.lilv_plugin_instantiate)(
                plugin as *const Plugin,
                rate as f64,
                f.pointers.as_ptr(),
            )
        };
        if inst.is_null() {
            return Err(PluginError::Invalid {
                what: what.clone(),
                why: format!("instantiate at {rate} Hz returned no instance"),
            });
        }
        // SAFETY: lilv filled in the descriptor, which lives as long as the library.
        let d: &'static Lv2Descriptor = unsafe { &*(*inst).descriptor };
        Ok(Box::new(Instance {
            inst,
            d,
            active: false,
            _features: f,
        }))
    })
}
