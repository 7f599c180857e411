//! `dlopen` and `dlsym` for plugin libraries and liblilv. `libc` is already a
//! dependency, so no loader crate is needed. Libraries are never closed: plugins
//! start threads and register static destructors that an unload would leave dangling.

use super::types::PluginError;
use std::ffi::{CStr, CString, c_char, c_void};

/// A `dlopen` handle kept for the life of the process.
#[derive(Clone, Copy)]
pub(crate) struct Library(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token; dlsym is thread-safe.
unsafe impl Send for Library {}
// SAFETY: as above.
unsafe impl Sync for Library {}

impl Library {
    /// Opens `name` (a path, or a soname the dynamic linker finds).
    pub(crate) fn open(name: &str) -> Result<Library, PluginError> {
        let cname = CString::new(name).map_err(|_| PluginError::Load {
            library: name.into(),
            why: "the name has a NUL byte in it".into(),
        })?;
        // SAFETY: NUL-terminated name. RTLD_LOCAL keeps one plugin's symbols from
        // resolving another's.
        let h = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a thread-local C string or null.
            let why = unsafe { cstr(libc::dlerror()) }.unwrap_or_else(|| "dlopen failed".into());
            return Err(PluginError::Load {
                library: name.into(),
                why,
            });
        }
        Ok(Library(h))
    }

    /// The address of `symbol` (NUL-terminated), or null.
    pub(crate) fn symbol(&self, symbol: &CStr) -> *mut c_void {
        // SAFETY: live handle (never closed), NUL-terminated name.
        unsafe { libc::dlsym(self.0, symbol.as_ptr()) }
    }
}

/// Copies a C string (possibly null), replacing bad UTF-8.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub(crate) unsafe fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the caller's promise.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}
