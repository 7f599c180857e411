//! The JACK C API, loaded at run time: `dlopen("libjack.so.0")` and a typed table of
//! the `jack_*` functions the `jack` mode's client calls.
//!
//! Why run-time loading: the same client code must run against three libraries that
//! share one soname — quaver's `libjack.so.0` (through `quaver-jack`), jackd2's and
//! pipewire-jack's (through `pw-jack`) — picked, as for any JACK program, by
//! `LD_LIBRARY_PATH` when the process starts; and the build must not need
//! `libjack-dev`. Why `libc::dlopen` and not the `libloading` crate: it is not in the
//! tree, `libc` is, and the table is resolved once and never unloaded (a libjack has
//! threads of its own; `dlclose` under them would be unsafe), as
//! `crates/devices/src/alsa/ffi.rs` does for alsa-lib.
//!
//! Signatures and constants are those of JACK's public headers (`jack/jack.h`,
//! `jack/types.h`), which are ABI.

use std::ffi::{CStr, CString, c_char, c_int, c_ulong, c_void};

/// The soname every JACK program opens.
pub const LIBRARY: &str = "libjack.so.0";

/// `jack_options_t`: do not start a server if none runs.
pub const JACK_NO_START_SERVER: c_int = 0x01;
/// `JackPortIsInput`.
pub const PORT_IS_INPUT: c_ulong = 0x1;
/// `JackPortIsOutput`.
pub const PORT_IS_OUTPUT: c_ulong = 0x2;
/// `JackPortIsPhysical`.
pub const PORT_IS_PHYSICAL: c_ulong = 0x4;
/// `JACK_DEFAULT_AUDIO_TYPE`.
pub const DEFAULT_AUDIO_TYPE: &CStr = c"32 bit float mono audio";

/// `JackProcessCallback`.
pub type ProcessCallback = unsafe extern "C" fn(nframes: u32, arg: *mut c_void) -> c_int;
/// `JackXRunCallback`.
pub type XrunCallback = unsafe extern "C" fn(arg: *mut c_void) -> c_int;

macro_rules! jack_table {
    ($( $field:ident = $sym:literal : $ty:ty; )*) => {
        /// The resolved libjack functions. Calling any of them is `unsafe`: the
        /// caller keeps to JACK's API contract (live client and port pointers,
        /// NUL-terminated strings).
        #[allow(missing_docs)]
        pub struct JackLib {
            $( pub $field: $ty, )*
            /// Where the dynamic linker found the library (from /proc/self/maps).
            pub path: String,
        }

        impl JackLib {
            /// Resolves every symbol of the table in `handle`.
            ///
            /// # Safety
            /// `handle` must be a live `dlopen` handle of a libjack whose functions
            /// have the signatures above.
            unsafe fn resolve(handle: *mut c_void) -> Result<JackLib, String> {
                Ok(JackLib {
                    $( $field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: live handle, NUL-terminated name.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("libjack has no symbol {}", $sym));
                        }
                        // SAFETY: the symbol is a function with this signature (JACK's ABI).
                        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
                    }, )*
                    path: String::new(),
                })
            }
        }
    };
}

jack_table! {
    client_open = "jack_client_open":
        unsafe extern "C" fn(*const c_char, c_int, *mut c_int, ...) -> *mut c_void;
    client_close = "jack_client_close": unsafe extern "C" fn(*mut c_void) -> c_int;
    get_client_name = "jack_get_client_name": unsafe extern "C" fn(*mut c_void) -> *const c_char;
    set_process_callback = "jack_set_process_callback":
        unsafe extern "C" fn(*mut c_void, Option<ProcessCallback>, *mut c_void) -> c_int;
    set_xrun_callback = "jack_set_xrun_callback":
        unsafe extern "C" fn(*mut c_void, Option<XrunCallback>, *mut c_void) -> c_int;
    activate = "jack_activate": unsafe extern "C" fn(*mut c_void) -> c_int;
    deactivate = "jack_deactivate": unsafe extern "C" fn(*mut c_void) -> c_int;
    port_register = "jack_port_register":
        unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, c_ulong, c_ulong) -> *mut c_void;
    port_get_buffer = "jack_port_get_buffer": unsafe extern "C" fn(*mut c_void, u32) -> *mut c_void;
    port_name = "jack_port_name": unsafe extern "C" fn(*const c_void) -> *const c_char;
    connect = "jack_connect":
        unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> c_int;
    get_ports = "jack_get_ports":
        unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, c_ulong) -> *mut *const c_char;
    free = "jack_free": unsafe extern "C" fn(*mut c_void);
    get_buffer_size = "jack_get_buffer_size": unsafe extern "C" fn(*mut c_void) -> u32;
    get_sample_rate = "jack_get_sample_rate": unsafe extern "C" fn(*mut c_void) -> u32;
    last_frame_time = "jack_last_frame_time": unsafe extern "C" fn(*const c_void) -> u32;
    get_cycle_times = "jack_get_cycle_times":
        unsafe extern "C" fn(*const c_void, *mut u32, *mut u64, *mut u64, *mut f32) -> c_int;
    get_time = "jack_get_time": unsafe extern "C" fn() -> u64;
    cpu_load = "jack_cpu_load": unsafe extern "C" fn(*mut c_void) -> f32;
    is_realtime = "jack_is_realtime": unsafe extern "C" fn(*mut c_void) -> c_int;
    get_version_string = "jack_get_version_string": unsafe extern "C" fn() -> *const c_char;
}

// SAFETY: the table holds plain function pointers into a library that is never
// unloaded; libjack's functions are callable from any thread.
unsafe impl Send for JackLib {}
unsafe impl Sync for JackLib {}

impl JackLib {
    /// Opens `name` (a soname searched as the dynamic linker does, or a path) and
    /// resolves the table. The error says why: library missing, or a symbol missing.
    pub fn open(name: &str) -> Result<JackLib, String> {
        let cname = CString::new(name).map_err(|_| format!("bad library name '{name}'"))?;
        // SAFETY: NUL-terminated name; RTLD_LOCAL keeps libjack's symbols to itself.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns a thread-local C string or null.
            let why = unsafe { cstr(libc::dlerror()) }.unwrap_or_default();
            return Err(format!(
                "{name} not found ({why}); install jackd2's libjack, pipewire-jack, or \
                 build quaver's (crates/jack)"
            ));
        }
        // SAFETY: live handle, never closed on success.
        match unsafe { JackLib::resolve(handle) } {
            Ok(mut lib) => {
                lib.path = loaded_path("libjack.so").unwrap_or_else(|| name.to_string());
                Ok(lib)
            }
            Err(e) => {
                // SAFETY: nothing from this handle escapes.
                unsafe { libc::dlclose(handle) };
                Err(e)
            }
        }
    }

    /// `jack_get_version_string()`.
    pub fn version(&self) -> String {
        // SAFETY: returns a static string (or null).
        unsafe { cstr((self.get_version_string)()) }.unwrap_or_default()
    }
}

/// Copies a C string (possibly null).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub unsafe fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: see above.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// The path of the first mapped file whose name contains `needle`
/// (from /proc/self/maps).
pub fn loaded_path(needle: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps_path(&maps, needle)
}

/// The first path in a `/proc/PID/maps` text whose file name contains `needle`.
pub fn maps_path(maps: &str, needle: &str) -> Option<String> {
    maps.lines().find_map(|l| {
        let path = l.split_whitespace().nth(5)?;
        let file = path.rsplit('/').next()?;
        file.contains(needle).then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clear_error() {
        let e = match JackLib::open("libjack-quaver-bench-no-such.so.0") {
            Err(e) => e,
            Ok(_) => panic!("opened a library that does not exist"),
        };
        assert!(
            e.starts_with("libjack-quaver-bench-no-such.so.0 not found ("),
            "{e}"
        );
        assert!(e.contains("pipewire-jack"), "{e}");
    }

    #[test]
    fn a_library_without_jack_symbols_is_refused() {
        // libc is loaded in every process and has no jack_client_open.
        let e = match JackLib::open("libc.so.6") {
            Err(e) => e,
            Ok(_) => panic!("libc is not a libjack"),
        };
        assert_eq!(e, "libjack has no symbol jack_client_open");
    }

    #[test]
    fn finds_the_mapped_path() {
        let maps = "7f1-7f2 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f3-7f4 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/pipewire-0.3/jack/libjack.so.0.365.0\n\
                    7f5-7f6 rw-p 00000000 00:00 0 \n";
        assert_eq!(
            maps_path(maps, "libjack.so").as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/pipewire-0.3/jack/libjack.so.0.365.0")
        );
        assert_eq!(maps_path(maps, "libasound"), None);
    }
}
