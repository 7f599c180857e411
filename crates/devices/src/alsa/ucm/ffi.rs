//! alsa-lib's use case manager (`snd_use_case_*`, `use-case.h`), loaded from the same
//! library as the PCM table (alsa/ffi.rs) and the same way: one `dlopen`, every symbol
//! resolved up front, a missing one an "unavailable" error (then no card uses UCM).
//!
//! alsa-lib explains a configuration it cannot load only through its error handler
//! (`SNDERR`: "_toplevel_:7:0:Unexpected char", "could not load configuration file …"),
//! while the return code says just "Invalid argument". [`capture_errors`] installs a
//! thread-local handler (`snd_lib_error_set_local`) around a call and returns those
//! lines, so the log can say what alsa-lib said (and nothing reaches stderr).

use crate::alsa::ffi::{Opaque, alsa_table, library_name, open_library};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_long, c_void};
use std::sync::OnceLock;

/// `snd_local_error_handler_t`: `(file, line, function, err, fmt, va_list)`. A `va_list`
/// parameter is passed as a pointer on the platforms alsa-lib runs on (x86-64: the
/// array decays; AArch64: a composite larger than 16 bytes goes by reference).
pub(crate) type LocalErrorHandler =
    unsafe extern "C" fn(*const c_char, c_int, *const c_char, c_int, *const c_char, *mut c_void);

alsa_table! {
    UcmLib;
    mgr_open = "snd_use_case_mgr_open": fn(*mut *mut Opaque, *const c_char) -> c_int;
    mgr_close = "snd_use_case_mgr_close": fn(*mut Opaque) -> c_int;
    mgr_reload = "snd_use_case_mgr_reload": fn(*mut Opaque) -> c_int;
    get = "snd_use_case_get": fn(*mut Opaque, *const c_char, *mut *const c_char) -> c_int;
    geti = "snd_use_case_geti": fn(*mut Opaque, *const c_char, *mut c_long) -> c_int;
    get_list = "snd_use_case_get_list": fn(*mut Opaque, *const c_char, *mut *mut *const c_char) -> c_int;
    free_list = "snd_use_case_free_list": fn(*mut *const c_char, c_int) -> c_int;
    set = "snd_use_case_set": fn(*mut Opaque, *const c_char, *const c_char) -> c_int;
    error_set_local = "snd_lib_error_set_local": fn(Option<LocalErrorHandler>) -> Option<LocalErrorHandler>;
}

// SAFETY: plain function pointers into a library that is never unloaded.
unsafe impl Send for UcmLib {}
unsafe impl Sync for UcmLib {}

/// The UCM table, loaded once per process; the error says why it is unavailable.
pub(crate) fn ucm_lib() -> Result<&'static UcmLib, &'static str> {
    static LIB: OnceLock<Result<UcmLib, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let handle: *mut c_void = open_library(&library_name())?;
        // SAFETY: a live handle of alsa-lib, never closed.
        unsafe { UcmLib::resolve(handle) }
    })
    .as_ref()
    .map_err(|e| e.as_str())
}

unsafe extern "C" {
    /// C's `vsnprintf` (libc, which std links): formats alsa-lib's message.
    fn vsnprintf(buf: *mut c_char, n: usize, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

thread_local! {
    /// Messages alsa-lib reported on this thread while [`capture_errors`] runs.
    static CAPTURED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// The local handler: formats the message and keeps it for [`capture_errors`].
unsafe extern "C" fn keep_error(
    _file: *const c_char,
    _line: c_int,
    _function: *const c_char,
    _err: c_int,
    fmt: *const c_char,
    ap: *mut c_void,
) {
    let mut buf = [0 as c_char; 512];
    // SAFETY: alsa-lib passes its printf format and the matching va_list; the buffer
    // length bounds the write.
    let n = unsafe { vsnprintf(buf.as_mut_ptr(), buf.len(), fmt, ap) };
    if n < 0 {
        return;
    }
    // SAFETY: vsnprintf NUL-terminates within the buffer.
    let text = unsafe { crate::alsa::ffi::cstr_lossy(buf.as_ptr()) }.unwrap_or_default();
    CAPTURED.with(|c| {
        if let Some(v) = c.borrow_mut().as_mut() {
            v.push(text.trim().to_string());
        }
    });
}

/// Runs `f` with alsa-lib's error messages on this thread collected instead of printed;
/// returns `f`'s result and the messages.
pub(crate) fn capture_errors<T>(lib: &UcmLib, f: impl FnOnce() -> T) -> (T, Vec<String>) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
    // SAFETY: the handler is a valid function for the process's life; alsa-lib keeps
    // it in a thread-local, so other threads are not affected.
    let old = unsafe { (lib.error_set_local)(Some(keep_error)) };
    let out = f();
    // SAFETY: as above; the previous handler (usually none) comes back.
    unsafe { (lib.error_set_local)(old) };
    let lines = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (out, lines)
}
