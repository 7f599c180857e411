//! C libraries loaded at run time: `dlopen` plus a typed table of functions.
//!
//! Why: the bench measures clients that link a peer's library (libjack, libpulse)
//! without needing its `-dev` package at build time, and the library a process gets
//! is the one the dynamic linker picks, as for any program. `libc::dlopen` rather
//! than the `libloading` crate: `libc` is already in the tree, and tables are resolved
//! once and never unloaded (these libraries start threads of their own).

use std::ffi::{CStr, CString, c_char, c_void};

/// Declares `pub struct $name` holding the listed C functions and its
/// `unsafe fn resolve(handle)`; `$lib` names the library in errors.
macro_rules! dl_table {
    ($(#[$meta:meta])* $name:ident, $lib:literal { $( $field:ident = $sym:literal : $ty:ty; )* }) => {
        $(#[$meta])*
        #[allow(missing_docs)]
        pub struct $name {
            $( pub $field: $ty, )*
        }

        impl $name {
            /// Resolves every symbol of the table in `handle`.
            ///
            /// # Safety
            /// `handle` must be a live `dlopen` handle of a library whose functions
            /// have the signatures above.
            unsafe fn resolve(handle: *mut std::ffi::c_void) -> Result<$name, String> {
                Ok($name {
                    $( $field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: live handle, NUL-terminated name.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("{} has no symbol {}", $lib, $sym));
                        }
                        // SAFETY: the symbol is a function with this signature (the
                        // library's ABI).
                        unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p) }
                    }, )*
                })
            }
        }
    };
}
pub(crate) use dl_table;

/// `dlopen(name)`, or why not (with `hint`: what to install).
pub fn open(name: &str, hint: &str) -> Result<*mut c_void, String> {
    let cname = CString::new(name).map_err(|_| format!("bad library name '{name}'"))?;
    // SAFETY: NUL-terminated name; RTLD_LOCAL keeps the library's symbols to itself.
    let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or null.
        let why = unsafe { cstr(libc::dlerror()) }.unwrap_or_default();
        return Err(format!("{name} not found ({why}); {hint}"));
    }
    Ok(handle)
}

/// Closes a handle whose table could not be resolved.
///
/// # Safety
/// Nothing resolved from `handle` may be used afterwards.
pub unsafe fn close(handle: *mut c_void) {
    // SAFETY: the caller's promise.
    unsafe { libc::dlclose(handle) };
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
