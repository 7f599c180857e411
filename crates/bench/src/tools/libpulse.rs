//! libpulse's asynchronous API, loaded at run time: one client (a `pa_mainloop` and a
//! `pa_context`) with any number of streams, as an application sees a server.
//!
//! The `peers` capture-path probe uses it where the wire client of
//! [`crate::tools::paclient`] would not do: what an application measures depends on
//! libpulse's own requests, prebuffering and latency interpolation. Signatures and
//! constants are those of PulseAudio's public headers (`pulse/*.h`), which are ABI.

use crate::tools::dl::{self, dl_table};
use std::ffi::{CString, c_char, c_int, c_void};
use std::ptr;
use std::time::{Duration, Instant};

/// `PA_SAMPLE_FLOAT32LE`.
pub const SAMPLE_FLOAT32LE: c_int = 5;
/// `PA_STREAM_INTERPOLATE_TIMING`.
pub const INTERPOLATE_TIMING: c_int = 0x0002;
/// `PA_STREAM_AUTO_TIMING_UPDATE`.
pub const AUTO_TIMING_UPDATE: c_int = 0x0008;
/// `PA_STREAM_ADJUST_LATENCY`.
pub const ADJUST_LATENCY: c_int = 0x2000;

const CONTEXT_READY: c_int = 4;
const CONTEXT_FAILED: c_int = 5;
const CONTEXT_TERMINATED: c_int = 6;
const STREAM_READY: c_int = 2;
const STREAM_FAILED: c_int = 3;
const STREAM_TERMINATED: c_int = 4;

/// `pa_sample_spec`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SampleSpec {
    /// `pa_sample_format_t`.
    pub format: c_int,
    /// Frames per second.
    pub rate: u32,
    /// Channels.
    pub channels: u8,
}

/// `pa_buffer_attr` (`u32::MAX`: the server's choice).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BufferAttr {
    /// Bytes the server buffers at most.
    pub maxlength: u32,
    /// Playback: bytes the server keeps queued.
    pub tlength: u32,
    /// Playback: bytes before playing starts.
    pub prebuf: u32,
    /// Playback: smallest request.
    pub minreq: u32,
    /// Record: bytes per delivered block.
    pub fragsize: u32,
}

/// `pa_stream_notify_cb_t`.
pub type NotifyCb = unsafe extern "C" fn(stream: *mut c_void, userdata: *mut c_void);

dl_table! {
    /// The libpulse functions the probe calls. Calling any of them is `unsafe`: the
    /// caller keeps to libpulse's contract (live objects, one thread per mainloop).
    PulseLib, "libpulse" {
        mainloop_new = "pa_mainloop_new": unsafe extern "C" fn() -> *mut c_void;
        mainloop_get_api = "pa_mainloop_get_api": unsafe extern "C" fn(*mut c_void) -> *mut c_void;
        mainloop_prepare = "pa_mainloop_prepare": unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
        mainloop_poll = "pa_mainloop_poll": unsafe extern "C" fn(*mut c_void) -> c_int;
        mainloop_dispatch = "pa_mainloop_dispatch": unsafe extern "C" fn(*mut c_void) -> c_int;
        mainloop_free = "pa_mainloop_free": unsafe extern "C" fn(*mut c_void);
        context_new = "pa_context_new":
            unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
        context_connect = "pa_context_connect":
            unsafe extern "C" fn(*mut c_void, *const c_char, c_int, *const c_void) -> c_int;
        context_get_state = "pa_context_get_state": unsafe extern "C" fn(*const c_void) -> c_int;
        context_errno = "pa_context_errno": unsafe extern "C" fn(*const c_void) -> c_int;
        context_disconnect = "pa_context_disconnect": unsafe extern "C" fn(*mut c_void);
        context_unref = "pa_context_unref": unsafe extern "C" fn(*mut c_void);
        strerror = "pa_strerror": unsafe extern "C" fn(c_int) -> *const c_char;
        stream_new = "pa_stream_new":
            unsafe extern "C" fn(*mut c_void, *const c_char, *const SampleSpec, *const c_void) -> *mut c_void;
        stream_connect_playback = "pa_stream_connect_playback":
            unsafe extern "C" fn(*mut c_void, *const c_char, *const BufferAttr, c_int, *const c_void, *mut c_void) -> c_int;
        stream_connect_record = "pa_stream_connect_record":
            unsafe extern "C" fn(*mut c_void, *const c_char, *const BufferAttr, c_int) -> c_int;
        stream_get_state = "pa_stream_get_state": unsafe extern "C" fn(*const c_void) -> c_int;
        stream_writable_size = "pa_stream_writable_size": unsafe extern "C" fn(*const c_void) -> usize;
        stream_write = "pa_stream_write":
            unsafe extern "C" fn(*mut c_void, *const c_void, usize, *const c_void, i64, c_int) -> c_int;
        stream_peek = "pa_stream_peek":
            unsafe extern "C" fn(*mut c_void, *mut *const c_void, *mut usize) -> c_int;
        stream_drop = "pa_stream_drop": unsafe extern "C" fn(*mut c_void) -> c_int;
        stream_get_latency = "pa_stream_get_latency":
            unsafe extern "C" fn(*mut c_void, *mut u64, *mut c_int) -> c_int;
        stream_get_buffer_attr = "pa_stream_get_buffer_attr":
            unsafe extern "C" fn(*mut c_void) -> *const BufferAttr;
        stream_set_underflow_callback = "pa_stream_set_underflow_callback":
            unsafe extern "C" fn(*mut c_void, Option<NotifyCb>, *mut c_void);
        stream_disconnect = "pa_stream_disconnect": unsafe extern "C" fn(*mut c_void) -> c_int;
        stream_unref = "pa_stream_unref": unsafe extern "C" fn(*mut c_void);
    }
}

// SAFETY: plain function pointers into a library that is never unloaded; each client
// built from them stays on the thread that made it.
unsafe impl Send for PulseLib {}
unsafe impl Sync for PulseLib {}

impl PulseLib {
    /// Opens `libpulse.so.0` and resolves the table.
    pub fn open() -> Result<PulseLib, String> {
        let handle = dl::open("libpulse.so.0", "install libpulse0")?;
        // SAFETY: live handle, never closed on success.
        unsafe { PulseLib::resolve(handle) }.inspect_err(|_| {
            // SAFETY: nothing from this handle escapes.
            unsafe { dl::close(handle) }
        })
    }

    fn error(&self, ctx: *const c_void) -> String {
        // SAFETY: live context; pa_strerror returns a static string.
        unsafe { dl::cstr((self.strerror)((self.context_errno)(ctx))) }
            .unwrap_or_else(|| "unknown error".into())
    }
}

/// One libpulse client: a mainloop and a connected context. Not `Send`: libpulse
/// objects stay on the thread that made them.
pub struct Client<'a> {
    lib: &'a PulseLib,
    mainloop: *mut c_void,
    context: *mut c_void,
}

impl<'a> Client<'a> {
    /// Connects to `server` (e.g. `unix:/run/…/pulse/native`; `None`: libpulse's own
    /// lookup, from the environment and runtime directory) within `timeout`.
    pub fn connect(
        lib: &'a PulseLib,
        server: Option<&str>,
        name: &str,
        timeout: Duration,
    ) -> Result<Self, String> {
        let server = server
            .map(CString::new)
            .transpose()
            .map_err(|_| "bad server string".to_string())?;
        let name = CString::new(name).map_err(|_| "bad client name".to_string())?;
        // SAFETY: libpulse's documented construction order; the client owns both.
        let mut c = unsafe {
            let mainloop = (lib.mainloop_new)();
            if mainloop.is_null() {
                return Err("pa_mainloop_new failed".into());
            }
            let context = (lib.context_new)((lib.mainloop_get_api)(mainloop), name.as_ptr());
            Client {
                lib,
                mainloop,
                context,
            }
        };
        if c.context.is_null() {
            return Err("pa_context_new failed".into());
        }
        // SAFETY: live context; no spawn API.
        let server = server.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        if unsafe { (lib.context_connect)(c.context, server, 0, ptr::null()) } < 0 {
            return Err(format!("connect: {}", lib.error(c.context)));
        }
        c.wait_until(timeout, "the context", |c| {
            // SAFETY: live context.
            match unsafe { (c.lib.context_get_state)(c.context) } {
                CONTEXT_READY => Some(Ok(())),
                CONTEXT_FAILED | CONTEXT_TERMINATED => {
                    Some(Err(format!("connect: {}", c.lib.error(c.context))))
                }
                _ => None,
            }
        })?;
        Ok(c)
    }

    /// Runs the mainloop until `done` answers, at most `timeout`.
    fn wait_until<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&Self) -> Option<Result<T, String>>,
    ) -> Result<T, String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(r) = done(self) {
                return r;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{what} was not ready within {timeout:?}"));
            }
            self.iterate(left.min(Duration::from_millis(50)))?;
        }
    }

    /// One mainloop iteration that sleeps at most `max`; errors when the loop quit.
    pub fn iterate(&mut self, max: Duration) -> Result<(), String> {
        let us = max.as_micros().min(c_int::MAX as u128) as c_int;
        // SAFETY: live mainloop, this thread only.
        let r = unsafe {
            if (self.lib.mainloop_prepare)(self.mainloop, us) < 0
                || (self.lib.mainloop_poll)(self.mainloop) < 0
            {
                -1
            } else {
                (self.lib.mainloop_dispatch)(self.mainloop)
            }
        };
        if r < 0 {
            return Err(format!("mainloop: {}", self.lib.error(self.context)));
        }
        Ok(())
    }

    /// A new stream, connected for playback (`Some(attr)`, `flags`) to `device` or the
    /// default, or for record from `device`; ready within `timeout`.
    pub fn stream(
        &mut self,
        name: &str,
        spec: SampleSpec,
        dir: Direction<'_>,
        attr: BufferAttr,
        flags: c_int,
        timeout: Duration,
    ) -> Result<Stream, String> {
        let cname = CString::new(name).map_err(|_| "bad stream name".to_string())?;
        let lib = self.lib;
        // SAFETY: live context; the spec outlives the call (libpulse copies it).
        let s = unsafe { (lib.stream_new)(self.context, cname.as_ptr(), &spec, ptr::null()) };
        if s.is_null() {
            return Err(format!("pa_stream_new: {}", lib.error(self.context)));
        }
        let stream = Stream { raw: s };
        let r = match dir {
            Direction::Playback(dev) => {
                let dev = dev
                    .map(CString::new)
                    .transpose()
                    .map_err(|_| "bad device")?;
                // SAFETY: live stream; attr copied by libpulse; no volume, no sync.
                unsafe {
                    (lib.stream_connect_playback)(
                        s,
                        dev.as_ref().map_or(ptr::null(), |d| d.as_ptr()),
                        &attr,
                        flags,
                        ptr::null(),
                        ptr::null_mut(),
                    )
                }
            }
            Direction::Record(dev) => {
                let dev = CString::new(dev).map_err(|_| "bad device")?;
                // SAFETY: as above.
                unsafe { (lib.stream_connect_record)(s, dev.as_ptr(), &attr, flags) }
            }
        };
        if r < 0 {
            self.release(stream);
            return Err(format!("connect {name}: {}", lib.error(self.context)));
        }
        let ready = self.wait_until(timeout, name, |c| {
            // SAFETY: live stream.
            match unsafe { (c.lib.stream_get_state)(s) } {
                STREAM_READY => Some(Ok(())),
                STREAM_FAILED | STREAM_TERMINATED => {
                    Some(Err(format!("{name}: {}", c.lib.error(c.context))))
                }
                _ => None,
            }
        });
        match ready {
            Ok(()) => Ok(stream),
            Err(e) => {
                self.release(stream);
                Err(e)
            }
        }
    }

    /// What the server granted the stream.
    pub fn granted(&self, s: &Stream) -> Option<BufferAttr> {
        // SAFETY: live stream; the attr is owned by it and copied out at once.
        unsafe { (self.lib.stream_get_buffer_attr)(s.raw).as_ref().copied() }
    }

    /// Calls `cb(userdata)` on each underflow of the stream.
    ///
    /// # Safety
    /// `userdata` must be what `cb` expects and outlive the stream.
    pub unsafe fn on_underflow(&self, s: &Stream, cb: NotifyCb, userdata: *mut c_void) {
        // SAFETY: live stream; the caller keeps userdata alive.
        unsafe { (self.lib.stream_set_underflow_callback)(s.raw, Some(cb), userdata) }
    }

    /// Bytes the stream takes now.
    pub fn writable(&self, s: &Stream) -> usize {
        // SAFETY: live stream.
        unsafe { (self.lib.stream_writable_size)(s.raw) }
    }

    /// Writes `data` (copied by libpulse).
    pub fn write(&self, s: &Stream, data: &[u8]) -> Result<(), String> {
        // SAFETY: live stream; a null free callback makes libpulse copy the data.
        let r = unsafe {
            (self.lib.stream_write)(s.raw, data.as_ptr().cast(), data.len(), ptr::null(), 0, 0)
        };
        if r < 0 {
            return Err(format!("pa_stream_write: {}", self.lib.error(self.context)));
        }
        Ok(())
    }

    /// Hands the next captured fragment to `f` (`None`: a hole), then drops it;
    /// `false` when nothing is readable.
    pub fn read(&self, s: &Stream, f: impl FnOnce(Option<&[u8]>)) -> Result<bool, String> {
        let mut data: *const c_void = ptr::null();
        let mut len = 0usize;
        // SAFETY: live stream; the fragment lives until pa_stream_drop.
        if unsafe { (self.lib.stream_peek)(s.raw, &mut data, &mut len) } < 0 {
            return Err(format!("pa_stream_peek: {}", self.lib.error(self.context)));
        }
        if len == 0 {
            return Ok(false);
        }
        if data.is_null() {
            f(None);
        } else {
            // SAFETY: libpulse's fragment of `len` bytes, valid until the drop below.
            f(Some(unsafe {
                std::slice::from_raw_parts(data.cast::<u8>(), len)
            }));
        }
        // SAFETY: a fragment was peeked.
        unsafe { (self.lib.stream_drop)(s.raw) };
        Ok(true)
    }

    /// `pa_stream_get_latency` in µs (negative for a record stream ahead of its
    /// source's account), or `None` before the first timing update.
    pub fn latency_usec(&self, s: &Stream) -> Option<f64> {
        let mut usec = 0u64;
        let mut negative: c_int = 0;
        // SAFETY: live stream, out-pointers to locals.
        let r = unsafe { (self.lib.stream_get_latency)(s.raw, &mut usec, &mut negative) };
        (r >= 0).then(|| {
            if negative != 0 {
                -(usec as f64)
            } else {
                usec as f64
            }
        })
    }

    /// Disconnects and frees a stream.
    pub fn release(&self, s: Stream) {
        // SAFETY: live stream, not used again (moved in).
        unsafe {
            (self.lib.stream_disconnect)(s.raw);
            (self.lib.stream_unref)(s.raw);
        }
    }
}

impl Drop for Client<'_> {
    fn drop(&mut self) {
        // SAFETY: owned objects, freed in libpulse's order.
        unsafe {
            if !self.context.is_null() {
                (self.lib.context_disconnect)(self.context);
                (self.lib.context_unref)(self.context);
            }
            (self.lib.mainloop_free)(self.mainloop);
        }
    }
}

/// Which way a stream goes.
pub enum Direction<'a> {
    /// To a sink (`None`: the default).
    Playback(Option<&'a str>),
    /// From a source, by name (`@DEFAULT_MONITOR@` works on every server here).
    Record(&'a str),
}

/// A stream of a [`Client`]; give it back with [`Client::release`].
pub struct Stream {
    raw: *mut c_void,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structs_have_libpulses_layout() {
        assert_eq!(std::mem::size_of::<SampleSpec>(), 12);
        assert_eq!(std::mem::size_of::<BufferAttr>(), 20);
    }

    #[test]
    fn libpulse_loads_where_installed() {
        match PulseLib::open() {
            Ok(_) => {}
            Err(e) => {
                assert!(e.starts_with("libpulse.so.0 not found ("), "{e}");
                eprintln!("SKIPPED: {e}");
            }
        }
    }
}
