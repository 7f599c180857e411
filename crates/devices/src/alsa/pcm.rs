//! One alsa-lib PCM handle (`snd_pcm_t`), configured once and then driven by
//! [`super::AlsaDevice`] through the [`PcmIo`] trait.
//!
//! Control side (`open`, `configure`, `list_pcms`): errors are `String`s with context.
//! Real-time side ([`PcmIo`]): every method returns alsa-lib's negative errno as the
//! error, never allocates (scratch buffers are sized at `configure`), and makes no
//! syscalls but alsa-lib's own device I/O.
//!
//! Long file: one handle's hardware and software negotiation and its transfers in both
//! access modes share the layout and scratch buffers that only this type may touch;
//! split, they would need those private fields opened to a second file.

use super::ffi::{self, ChannelArea, Lib, Opaque, sframes, uframes};
use quaver_dsp::format::{decode_interleaved, encode_interleaved};
use quaver_dsp::{Planar, PlanarMut, SampleFormat};
use std::ffi::{CString, c_int, c_uint, c_void};

pub use super::params::{Access, Direction, HwRequest, HwSetup, PcmFormat};
pub(crate) use super::params::{AlsaError, PcmIo, Status};

/// The negotiated layout, as the real-time path uses it.
#[derive(Debug, Clone, Copy)]
struct Layout {
    access: Access,
    format: SampleFormat,
    channels: usize,
    frame_bytes: usize,
    buffer_frames: usize,
}

/// An open alsa-lib PCM.
pub(crate) struct Pcm {
    lib: &'static Lib,
    handle: *mut Opaque,
    status: *mut Opaque,
    name: String,
    dir: Direction,
    setup: Option<HwSetup>,
    /// The parts of `setup` the real-time path needs, copyable without allocating.
    layout: Option<Layout>,
    /// Interleaved f32 scratch (buffer × channels) for conversion.
    scratch: Vec<f32>,
    /// Byte scratch (buffer × frame bytes) for RW access.
    bytes: Vec<u8>,
    /// alsa-lib's null PCM "captures" by moving its pointer without writing its ring
    /// (mmap) or the caller's buffer (RW): what is there is stale heap memory. Its
    /// documented behaviour is to capture zeros, so that is what this delivers.
    zero_capture: bool,
}

// SAFETY: an alsa-lib PCM may be used from any thread as long as one thread at a time
// does; `Pcm` is owned by one device, which the engine moves between threads whole.
unsafe impl Send for Pcm {}

impl Pcm {
    /// Opens `name` (non-blocking: a busy device fails at once instead of hanging).
    pub(crate) fn open(lib: &'static Lib, name: &str, dir: Direction) -> Result<Pcm, AlsaError> {
        let handle = open_handle(lib, name, dir)?;
        let mut status = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { (lib.status_malloc)(&mut status) };
        if rc < 0 {
            // SAFETY: handle is open.
            unsafe { (lib.pcm_close)(handle) };
            return Err(AlsaError {
                code: rc,
                message: format!("snd_pcm_status_malloc: {}", lib.error_text(rc)),
            });
        }
        Ok(Pcm {
            lib,
            handle,
            status,
            name: name.to_string(),
            dir,
            setup: None,
            layout: None,
            scratch: Vec::new(),
            bytes: Vec::new(),
            zero_capture: false,
        })
    }

    /// Whether the handle is open (not closed by [`PcmIo::close`]).
    pub(crate) fn is_open(&self) -> bool {
        !self.handle.is_null()
    }

    /// alsa-lib's PCM type (`SND_PCM_TYPE_*`) of the outermost plugin.
    pub(crate) fn pcm_type(&self) -> i32 {
        if self.handle.is_null() {
            return -1;
        }
        // SAFETY: open PCM.
        unsafe { (self.lib.pcm_type)(self.handle) }
    }

    fn err(&self, call: &str, rc: c_int) -> AlsaError {
        AlsaError {
            code: rc,
            message: format!(
                "{call} on '{}' ({}): {}",
                self.name,
                self.dir.name(),
                self.lib.error_text(rc)
            ),
        }
    }

    /// Negotiates hardware and software parameters, in this order: access (MMAP, then
    /// RW), format (requested, or F32 → S32 → S24 → S24_3 → S16), channels (exact, then
    /// nearest), rate (nearest, alsa-lib resampling off), period wakeups off if asked
    /// and offered, buffer size (nearest), period size (nearest). Then software
    /// parameters: explicit start only, stop (xrun) when the ring runs dry or full,
    /// monotonic timestamps. *control*.
    pub(crate) fn configure(&mut self, req: &HwRequest) -> Result<HwSetup, AlsaError> {
        let lib = self.lib;
        let h = self.handle;
        let mut hw = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { (lib.hw_malloc)(&mut hw) };
        if rc < 0 {
            return Err(self.err("snd_pcm_hw_params_malloc", rc));
        }
        struct HwGuard(&'static Lib, *mut Opaque);
        impl Drop for HwGuard {
            fn drop(&mut self) {
                // SAFETY: allocated by snd_pcm_hw_params_malloc.
                unsafe { (self.0.hw_free)(self.1) }
            }
        }
        let _guard = HwGuard(lib, hw);
        // SAFETY (every call below): `h` is an open PCM and `hw` its parameter space;
        // out-pointers point to locals.
        let rc = unsafe { (lib.hw_any)(h, hw) };
        if rc < 0 {
            return Err(self.err("snd_pcm_hw_params_any", rc));
        }

        let access = self.set_access(hw, req)?;

        let (format, refused) = self.set_format(hw, req)?;

        if unsafe { (lib.hw_set_channels)(h, hw, req.channels) } < 0 {
            let mut ch: c_uint = req.channels;
            let rc = unsafe { (lib.hw_set_channels_near)(h, hw, &mut ch) };
            if rc < 0 {
                return Err(self.err("snd_pcm_hw_params_set_channels_near", rc));
            }
        }

        // We resample once, in the graph, only where rates differ; a plug PCM's own
        // resampler would be a second one. Not every PCM knows the flag: ignore failure.
        let _ = unsafe { (lib.hw_set_rate_resample)(h, hw, 0) };
        let mut rate: c_uint = req.rate;
        let mut dir: c_int = 0;
        let rc = unsafe { (lib.hw_set_rate_near)(h, hw, &mut rate, &mut dir) };
        if rc < 0 {
            return Err(self.err("snd_pcm_hw_params_set_rate_near", rc));
        }

        let mut period_wakeup_disabled = false;
        if req.no_period_wakeup
            && unsafe { (lib.hw_can_disable_period_wakeup)(hw) } == 1
            && unsafe { (lib.hw_set_period_wakeup)(h, hw, 0) } == 0
        {
            period_wakeup_disabled = true;
        }

        let mut max: uframes = 0;
        let _ = unsafe { (lib.hw_get_buffer_size_max)(hw, &mut max) };
        let mut buffer: uframes = req.buffer_frames.max(1) as uframes;
        let rc = unsafe { (lib.hw_set_buffer_size_near)(h, hw, &mut buffer) };
        if rc < 0 {
            return Err(self.err("snd_pcm_hw_params_set_buffer_size_near", rc));
        }
        let mut period: uframes =
            req.period_frames.unwrap_or(buffer as usize / 4).max(1) as uframes;
        let mut dir: c_int = 0;
        let rc = unsafe { (lib.hw_set_period_size_near)(h, hw, &mut period, &mut dir) };
        if rc < 0 {
            return Err(self.err("snd_pcm_hw_params_set_period_size_near", rc));
        }

        let rc = unsafe { (lib.hw_commit)(h, hw) };
        if rc < 0 {
            return Err(self.err("snd_pcm_hw_params", rc));
        }

        // Read back what the configuration space collapsed to.
        let mut got_format: c_int = 0;
        let mut got_channels: c_uint = 0;
        let mut got_rate: c_uint = 0;
        let mut got_buffer: uframes = 0;
        let mut got_period: uframes = 0;
        let mut d: c_int = 0;
        unsafe {
            (lib.hw_get_format)(hw, &mut got_format);
            (lib.hw_get_channels)(hw, &mut got_channels);
            (lib.hw_get_rate)(hw, &mut got_rate, &mut d);
            (lib.hw_get_buffer_size)(hw, &mut got_buffer);
            (lib.hw_get_period_size)(hw, &mut got_period, &mut d);
        }
        let format = PcmFormat::from_alsa(got_format).unwrap_or(format);
        let setup = HwSetup {
            access,
            format,
            channels: got_channels,
            rate: got_rate,
            buffer_frames: got_buffer as usize,
            period_frames: got_period as usize,
            buffer_max_frames: (max as usize).max(got_buffer as usize),
            period_wakeup_disabled,
            pcm_type: unsafe { (lib.pcm_type)(h) },
            formats_refused: refused,
            silences_played: false,
        };
        if setup.channels == 0 || setup.rate == 0 || setup.buffer_frames < 2 {
            return Err(AlsaError::invalid(format!(
                "'{}' ({}) negotiated an unusable configuration: {setup:?}",
                self.name,
                self.dir.name()
            )));
        }
        let mut setup = setup;
        setup.silences_played = self.software_params(&setup)?;
        self.scratch = vec![0.0; setup.buffer_frames * setup.channels as usize];
        self.bytes = if access == Access::ReadWrite {
            vec![0; setup.buffer_frames * setup.frame_bytes()]
        } else {
            Vec::new()
        };
        self.zero_capture =
            self.dir == Direction::Capture && setup.pcm_type == ffi::SND_PCM_TYPE_NULL;
        self.layout = Some(Layout {
            access,
            format: setup.format.sample_format(),
            channels: setup.channels as usize,
            frame_bytes: setup.frame_bytes(),
            buffer_frames: setup.buffer_frames,
        });
        self.setup = Some(setup.clone());
        Ok(setup)
    }

    /// Picks the first interleaved access the PCM offers (mmap first, unless `req`
    /// turns it off) in the parameter space `hw`.
    fn set_access(&self, hw: *mut Opaque, req: &HwRequest) -> Result<Access, AlsaError> {
        let (lib, h) = (self.lib, self.handle);
        // SAFETY (every call below): `h` is an open PCM and `hw` its parameter space.
        let mut access = None;
        let choices: &[(Access, c_int)] = if req.mmap {
            &[
                (Access::Mmap, ffi::SND_PCM_ACCESS_MMAP_INTERLEAVED),
                (Access::ReadWrite, ffi::SND_PCM_ACCESS_RW_INTERLEAVED),
            ]
        } else {
            &[(Access::ReadWrite, ffi::SND_PCM_ACCESS_RW_INTERLEAVED)]
        };
        for &(a, code) in choices {
            if unsafe { (lib.hw_test_access)(h, hw, code) } == 0
                && unsafe { (lib.hw_set_access)(h, hw, code) } == 0
            {
                access = Some(a);
                break;
            }
        }
        access.ok_or_else(|| {
            AlsaError::invalid(format!(
                "'{}' ({}) offers no interleaved access{}",
                self.name,
                self.dir.name(),
                if req.mmap { "" } else { " with mmap=off" }
            ))
        })
    }

    /// Picks the asked format, or the first of the fallback order the PCM accepts;
    /// returns it and the ones refused before it.
    fn set_format(
        &self,
        hw: *mut Opaque,
        req: &HwRequest,
    ) -> Result<(PcmFormat, Vec<PcmFormat>), AlsaError> {
        let (lib, h) = (self.lib, self.handle);
        // SAFETY (every call below): `h` is an open PCM and `hw` its parameter space.
        let candidates: &[PcmFormat] = match &req.format {
            Some(f) => std::slice::from_ref(f),
            None => &PcmFormat::FALLBACK,
        };
        let mut refused = Vec::new();
        let mut format = None;
        for &f in candidates {
            if unsafe { (lib.hw_test_format)(h, hw, f.alsa()) } == 0
                && unsafe { (lib.hw_set_format)(h, hw, f.alsa()) } == 0
            {
                format = Some(f);
                break;
            }
            refused.push(f);
        }
        let Some(format) = format else {
            let tried: Vec<_> = candidates.iter().map(|f| f.alsa_name()).collect();
            return Err(AlsaError::invalid(format!(
                "'{}' ({}) accepts none of the formats {}",
                self.name,
                self.dir.name(),
                tried.join(", ")
            )));
        };
        Ok((format, refused))
    }

    /// Returns whether played audio is silenced (playback, where the PCM allows it).
    fn software_params(&mut self, setup: &HwSetup) -> Result<bool, AlsaError> {
        let lib = self.lib;
        let h = self.handle;
        let mut sw = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { (lib.sw_malloc)(&mut sw) };
        if rc < 0 {
            return Err(self.err("snd_pcm_sw_params_malloc", rc));
        }
        struct SwGuard(&'static Lib, *mut Opaque);
        impl Drop for SwGuard {
            fn drop(&mut self) {
                // SAFETY: allocated by snd_pcm_sw_params_malloc.
                unsafe { (self.0.sw_free)(self.1) }
            }
        }
        let _guard = SwGuard(lib, sw);
        // SAFETY (all calls): open PCM, its sw params, locals as out-pointers.
        let rc = unsafe { (lib.sw_current)(h, sw) };
        if rc < 0 {
            return Err(self.err("snd_pcm_sw_params_current", rc));
        }
        let mut boundary: uframes = 0;
        unsafe { (lib.sw_get_boundary)(sw, &mut boundary) };
        let buffer = setup.buffer_frames as uframes;
        let steps: [(&str, c_int); 4] = [
            // The driver starts the stream itself, after the prefill: never on a write.
            ("start_threshold", unsafe {
                (lib.sw_set_start_threshold)(h, sw, boundary.max(buffer + 1))
            }),
            // An empty (playback) or full (capture) ring is an xrun the driver sees.
            ("stop_threshold", unsafe {
                (lib.sw_set_stop_threshold)(h, sw, buffer)
            }),
            // Only matters for poll(), which timer scheduling does not use.
            ("avail_min", unsafe {
                (lib.sw_set_avail_min)(h, sw, setup.period_frames as uframes)
            }),
            ("tstamp_mode", unsafe {
                (lib.sw_set_tstamp_mode)(h, sw, ffi::SND_PCM_TSTAMP_ENABLE)
            }),
        ];
        for (what, rc) in steps {
            if rc < 0 {
                return Err(self.err(&format!("snd_pcm_sw_params_set_{what}"), rc));
            }
        }
        if self.dir == Direction::Playback {
            // Threshold 0 with size = boundary: the kernel overwrites what the card has
            // played with silence as the pointer moves (alsa-lib's pcm.c documents this
            // pair). After an underrun the card then plays silence until the xrun is
            // noticed, instead of the ring's old audio again (PulseAudio's sinks do the
            // same). A plugin that refuses only loses that.
            let _ = unsafe { (lib.sw_set_silence_threshold)(h, sw, 0) };
            let _ = unsafe { (lib.sw_set_silence_size)(h, sw, boundary) };
        }

        // Older kernels only have gettimeofday stamps: the driver then checks the stamp
        // against CLOCK_MONOTONIC and ignores it if it does not match.
        let _ = unsafe { (lib.sw_set_tstamp_type)(h, sw, ffi::SND_PCM_TSTAMP_TYPE_MONOTONIC) };
        let rc = unsafe { (lib.sw_commit)(h, sw) };
        if rc < 0 {
            return Err(self.err("snd_pcm_sw_params", rc));
        }
        // What the PCM holds now, not what was asked.
        let mut silence: uframes = 0;
        if unsafe { (lib.sw_current)(h, sw) } == 0 {
            unsafe { (lib.sw_get_silence_size)(sw, &mut silence) };
        }
        Ok(self.dir == Direction::Playback && silence >= boundary)
    }

    /// Number of poll descriptors (for a future period-interrupt mode and diagnostics).
    pub(crate) fn poll_descriptor_count(&self) -> usize {
        if self.handle.is_null() {
            return 0;
        }
        // SAFETY: open PCM.
        let n = unsafe { (self.lib.poll_descriptors_count)(self.handle) };
        let n = n.max(0) as usize;
        let mut fds = vec![
            libc::pollfd {
                fd: -1,
                events: 0,
                revents: 0
            };
            n
        ];
        // SAFETY: `fds` has room for `n` entries.
        let got =
            unsafe { (self.lib.poll_descriptors)(self.handle, fds.as_mut_ptr(), n as c_uint) };
        if got < 0 {
            return 0;
        }
        let mut revents: u16 = 0;
        // SAFETY: `got` entries filled in above.
        let _ = unsafe {
            (self.lib.poll_descriptors_revents)(
                self.handle,
                fds.as_mut_ptr(),
                got as c_uint,
                &mut revents,
            )
        };
        got as usize
    }

    /// `snd_pcm_rewindable`: frames that could still be taken back (for rewinds).
    pub(crate) fn rewindable(&mut self) -> Result<usize, i32> {
        self.live()?;
        // SAFETY: open PCM.
        let n = unsafe { (self.lib.pcm_rewindable)(self.handle) };
        frames_or_err(n)
    }

    /// `snd_pcm_rewind`: takes back up to `frames` queued frames; returns how many.
    pub(crate) fn rewind(&mut self, frames: usize) -> Result<usize, i32> {
        self.live()?;
        // SAFETY: open PCM.
        let n = unsafe { (self.lib.pcm_rewind)(self.handle, frames as uframes) };
        frames_or_err(n)
    }

    /// `snd_pcm_delay`: frames until a sample written now is heard (playback).
    pub(crate) fn delay(&mut self) -> Result<isize, i32> {
        self.live()?;
        let mut d: sframes = 0;
        // SAFETY: open PCM, local out-pointer.
        let rc = unsafe { (self.lib.pcm_delay)(self.handle, &mut d) };
        if rc < 0 { Err(rc) } else { Ok(d as isize) }
    }

    /// `snd_pcm_drain`, blocking (used by tests; the device drops on close). *control*.
    pub(crate) fn drain(&mut self) -> Result<(), i32> {
        self.live()?;
        // SAFETY: open PCM.
        unsafe {
            (self.lib.pcm_nonblock)(self.handle, 0);
            check((self.lib.pcm_drain)(self.handle))
        }
    }

    /// `snd_pcm_recover` as alsa-lib does it (may sleep in 1 s steps while the system
    /// resumes, so the driver uses its own non-blocking recovery on the real-time
    /// thread). *control*.
    pub(crate) fn recover(&mut self, err: i32) -> Result<(), i32> {
        self.live()?;
        // SAFETY: open PCM; silent = 1 (no stderr output).
        check(unsafe { (self.lib.pcm_recover)(self.handle, err, 1) })
    }

    fn live(&self) -> Result<(), i32> {
        if self.handle.is_null() {
            Err(-libc::EBADFD)
        } else {
            Ok(())
        }
    }

    fn channels(&self) -> usize {
        self.layout.map_or(0, |l| l.channels)
    }

    /// Converts `n` frames (from `src` at `from`, or silence) into interleaved f32 in the
    /// scratch buffer.
    fn interleave_into_scratch(&mut self, src: Option<&Planar<'_>>, from: usize, n: usize) {
        let ch = self.channels();
        let out = &mut self.scratch[..n * ch];
        match src {
            None => out.fill(0.0),
            Some(src) => {
                for c in 0..ch {
                    if c < src.channels() {
                        let input = &src.channel(c)[from..from + n];
                        for (frame, &x) in out.chunks_exact_mut(ch).zip(input) {
                            frame[c] = x;
                        }
                    } else {
                        for frame in out.chunks_exact_mut(ch) {
                            frame[c] = 0.0;
                        }
                    }
                }
            }
        }
    }

    fn deinterleave_from_scratch(&self, dst: &mut PlanarMut<'_>, from: usize, n: usize) {
        let ch = self.channels();
        let input = &self.scratch[..n * ch];
        for c in 0..dst.channels() {
            let out = &mut dst.channel_mut(c)[from..from + n];
            if c < ch {
                for (o, frame) in out.iter_mut().zip(input.chunks_exact(ch)) {
                    *o = frame[c];
                }
            } else {
                out.fill(0.0);
            }
        }
    }

    /// Checks that mmap areas are plain interleaved (they are for MMAP_INTERLEAVED; a
    /// plugin that says otherwise gets -EIO rather than a wild write) and returns the
    /// byte address of frame `offset`.
    fn interleaved_addr(&self, areas: *const ChannelArea, offset: uframes) -> Result<*mut u8, i32> {
        let l = self.layout.ok_or(-libc::EBADFD)?;
        let ch = l.channels;
        let bits = (l.format.bytes_per_sample() * 8) as c_uint;
        // SAFETY: alsa-lib returns `channels` areas from mmap_begin.
        let areas = unsafe { std::slice::from_raw_parts(areas, ch) };
        let base = areas[0].addr;
        for (c, a) in areas.iter().enumerate() {
            if a.addr != base || a.first != c as c_uint * bits || a.step != ch as c_uint * bits {
                return Err(-libc::EIO);
            }
        }
        // SAFETY: offset lies inside the mapped ring (alsa-lib contract).
        Ok(unsafe { (base as *mut u8).add(offset as usize * l.frame_bytes) })
    }

    fn write_frames(
        &mut self,
        src: Option<Planar<'_>>,
        from: usize,
        frames: usize,
    ) -> Result<usize, i32> {
        self.live()?;
        let l = self.layout.ok_or(-libc::EBADFD)?;
        let (fmt, ch, fb) = (l.format, l.channels, l.frame_bytes);
        let mut done = 0;
        match l.access {
            Access::ReadWrite => {
                while done < frames {
                    let n = (frames - done).min(l.buffer_frames);
                    self.interleave_into_scratch(src.as_ref(), from + done, n);
                    encode_interleaved(fmt, &self.scratch[..n * ch], &mut self.bytes[..n * fb]);
                    // SAFETY: `bytes` holds `n` frames.
                    let w = unsafe {
                        (self.lib.pcm_writei)(
                            self.handle,
                            self.bytes.as_ptr().cast::<c_void>(),
                            n as uframes,
                        )
                    };
                    if w == -(libc::EAGAIN as sframes) {
                        break;
                    }
                    let w = frames_or_err(w)?;
                    done += w;
                    if w < n {
                        break;
                    }
                }
            }
            Access::Mmap => {
                while done < frames {
                    // alsa-lib requires avail_update right before mmap_begin; for the
                    // kernel PCM it reads the shared status page, not the hardware.
                    // SAFETY: open PCM.
                    let avail = frames_or_err(unsafe { (self.lib.pcm_avail_update)(self.handle) })?;
                    if avail == 0 {
                        break;
                    }
                    let mut areas: *const ChannelArea = std::ptr::null();
                    let mut offset: uframes = 0;
                    let mut n: uframes = (frames - done).min(avail) as uframes;
                    // SAFETY: open PCM, local out-pointers.
                    check(unsafe {
                        (self.lib.pcm_mmap_begin)(self.handle, &mut areas, &mut offset, &mut n)
                    })?;
                    if n == 0 {
                        break;
                    }
                    let n = n as usize;
                    let dst = self.interleaved_addr(areas, offset)?;
                    self.interleave_into_scratch(src.as_ref(), from + done, n);
                    // SAFETY: mmap_begin granted `n` contiguous frames at `dst`.
                    let dst = unsafe { std::slice::from_raw_parts_mut(dst, n * fb) };
                    encode_interleaved(fmt, &self.scratch[..n * ch], dst);
                    // SAFETY: commits exactly the area begun above.
                    let c = frames_or_err(unsafe {
                        (self.lib.pcm_mmap_commit)(self.handle, offset, n as uframes)
                    })?;
                    done += c;
                    if c < n {
                        break;
                    }
                }
            }
        }
        Ok(done)
    }
}

/// `snd_pcm_open` in non-blocking mode: a busy device fails at once instead of hanging
/// (also on the real-time thread, which reopens a card after an idle close).
fn open_handle(lib: &Lib, name: &str, dir: Direction) -> Result<*mut Opaque, AlsaError> {
    let cname = CString::new(name)
        .map_err(|_| AlsaError::invalid(format!("PCM name '{name}' contains NUL")))?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    let rc = unsafe {
        (lib.pcm_open)(
            &mut handle,
            cname.as_ptr(),
            dir.alsa(),
            ffi::SND_PCM_NONBLOCK,
        )
    };
    if rc < 0 {
        return Err(AlsaError {
            code: rc,
            message: format!(
                "snd_pcm_open('{name}', {}): {}",
                dir.name(),
                lib.error_text(rc)
            ),
        });
    }
    Ok(handle)
}

fn check(rc: c_int) -> Result<(), i32> {
    if rc < 0 { Err(rc) } else { Ok(()) }
}

fn frames_or_err(n: sframes) -> Result<usize, i32> {
    if n < 0 { Err(n as i32) } else { Ok(n as usize) }
}

/// `CLOCK_MONOTONIC` nanoseconds of a timespec (0 for a zero stamp).
fn timespec_ns(ts: &libc::timespec) -> u64 {
    (ts.tv_sec.max(0) as u64) * 1_000_000_000 + ts.tv_nsec.max(0) as u64
}

impl PcmIo for Pcm {
    fn name(&self) -> &str {
        &self.name
    }

    fn rewindable(&mut self) -> Result<usize, i32> {
        Pcm::rewindable(self)
    }

    fn rewind(&mut self, frames: usize) -> Result<usize, i32> {
        Pcm::rewind(self, frames)
    }

    fn status(&mut self) -> Result<Status, i32> {
        self.live()?;
        // SAFETY: open PCM and its preallocated status object.
        check(unsafe { (self.lib.pcm_status)(self.handle, self.status) })?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: status filled in above.
        let (state, avail) = unsafe {
            (self.lib.status_get_htstamp)(self.status, &mut ts);
            (
                (self.lib.status_get_state)(self.status),
                (self.lib.status_get_avail)(self.status),
            )
        };
        Ok(Status {
            state,
            avail: avail as usize,
            htstamp_ns: timespec_ns(&ts),
        })
    }

    fn prepare(&mut self) -> Result<(), i32> {
        self.live()?;
        // SAFETY: open PCM.
        check(unsafe { (self.lib.pcm_prepare)(self.handle) })
    }

    fn start(&mut self) -> Result<(), i32> {
        self.live()?;
        // SAFETY: open PCM.
        check(unsafe { (self.lib.pcm_start)(self.handle) })
    }

    fn drop_stream(&mut self) -> Result<(), i32> {
        self.live()?;
        // SAFETY: open PCM.
        check(unsafe { (self.lib.pcm_drop)(self.handle) })
    }

    fn resume(&mut self) -> Result<(), i32> {
        self.live()?;
        // SAFETY: open PCM.
        check(unsafe { (self.lib.pcm_resume)(self.handle) })
    }

    fn state(&mut self) -> i32 {
        if self.handle.is_null() {
            return ffi::SND_PCM_STATE_DISCONNECTED;
        }
        // SAFETY: open PCM.
        unsafe { (self.lib.pcm_state)(self.handle) }
    }

    fn write(&mut self, src: Planar<'_>, from: usize, frames: usize) -> Result<usize, i32> {
        debug_assert!(from + frames <= src.frames());
        self.write_frames(Some(src), from, frames)
    }

    fn write_silence(&mut self, frames: usize) -> Result<usize, i32> {
        self.write_frames(None, 0, frames)
    }

    fn read(&mut self, dst: &mut PlanarMut<'_>, from: usize, frames: usize) -> Result<usize, i32> {
        self.live()?;
        let l = self.layout.ok_or(-libc::EBADFD)?;
        let (fmt, ch, fb) = (l.format, l.channels, l.frame_bytes);
        let mut done = 0;
        while done < frames {
            let n;
            match l.access {
                Access::ReadWrite => {
                    let want = (frames - done).min(l.buffer_frames);
                    // SAFETY: `bytes` has room for `want` frames.
                    let r = unsafe {
                        (self.lib.pcm_readi)(
                            self.handle,
                            self.bytes.as_mut_ptr().cast::<c_void>(),
                            want as uframes,
                        )
                    };
                    if r == -(libc::EAGAIN as sframes) {
                        break;
                    }
                    n = frames_or_err(r)?;
                    decode_interleaved(fmt, &self.bytes[..n * fb], &mut self.scratch[..n * ch]);
                }
                Access::Mmap => {
                    // SAFETY: open PCM.
                    let avail = frames_or_err(unsafe { (self.lib.pcm_avail_update)(self.handle) })?;
                    if avail == 0 {
                        break;
                    }
                    let mut areas: *const ChannelArea = std::ptr::null();
                    let mut offset: uframes = 0;
                    let mut got: uframes = (frames - done).min(avail) as uframes;
                    // SAFETY: open PCM, local out-pointers.
                    check(unsafe {
                        (self.lib.pcm_mmap_begin)(self.handle, &mut areas, &mut offset, &mut got)
                    })?;
                    if got == 0 {
                        break;
                    }
                    let src = self.interleaved_addr(areas, offset)?;
                    let m = got as usize;
                    // SAFETY: mmap_begin granted `m` contiguous frames at `src`.
                    let bytes = unsafe { std::slice::from_raw_parts(src, m * fb) };
                    decode_interleaved(fmt, bytes, &mut self.scratch[..m * ch]);
                    // SAFETY: commits exactly the area begun above.
                    n = frames_or_err(unsafe {
                        (self.lib.pcm_mmap_commit)(self.handle, offset, got)
                    })?;
                }
            }
            if n == 0 {
                break;
            }
            if self.zero_capture {
                self.scratch[..n * ch].fill(0.0);
            }
            self.deinterleave_from_scratch(dst, from + done, n);
            done += n;
        }
        Ok(done)
    }

    fn close(&mut self) -> Result<(), i32> {
        if self.handle.is_null() {
            return Ok(());
        }
        let h = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        // SAFETY: open PCM, closed exactly once (the handle is cleared first).
        check(unsafe { (self.lib.pcm_close)(h) })
    }

    fn reopen(&mut self, req: &HwRequest) -> Result<HwSetup, AlsaError> {
        // alsa-lib frees the handle whatever snd_pcm_close returns.
        let _ = PcmIo::close(self);
        self.handle = open_handle(self.lib, &self.name, self.dir)?;
        self.configure(req)
    }

    fn link(&mut self, other: &mut Pcm) -> bool {
        if self.handle.is_null() || other.handle.is_null() {
            return false;
        }
        // SAFETY: both open.
        unsafe { (self.lib.pcm_link)(self.handle, other.handle) == 0 }
    }
}

impl Drop for Pcm {
    fn drop(&mut self) {
        let _ = PcmIo::close(self);
        if !self.status.is_null() {
            // SAFETY: allocated by snd_pcm_status_malloc, freed once.
            unsafe { (self.lib.status_free)(self.status) };
            self.status = std::ptr::null_mut();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_dsp::PlanarBuf;

    /// Stereo float at 48 kHz, mmap, a 4096-frame ring of 1024-frame periods.
    fn null_request() -> HwRequest {
        HwRequest {
            format: None,
            mmap: true,
            channels: 2,
            rate: 48_000,
            buffer_frames: 4096,
            period_frames: Some(1024),
            no_period_wakeup: true,
        }
    }

    /// What the device's design relies on about alsa-lib's null PCM (docs/alsa.md):
    /// it accepts any format, its pointer follows the application at once once
    /// started, and mmap access needs an explicit start.
    #[test]
    fn null_pcm_behaves_as_the_design_assumes() {
        let Ok(lib) = ffi::lib() else { return };
        let req = null_request();
        let mut p = Pcm::open(lib, "null", Direction::Playback).unwrap();
        assert_eq!(p.pcm_type(), ffi::SND_PCM_TYPE_NULL);
        let s = p.configure(&req).unwrap();
        assert_eq!((s.access, s.format), (Access::Mmap, PcmFormat::F32));
        assert_eq!((s.buffer_frames, s.period_frames), (4096, 1024));
        assert!(
            !s.period_wakeup_disabled,
            "a plugin has no period interrupts to disable"
        );
        assert_eq!(p.poll_descriptor_count(), 1);
        p.prepare().unwrap();
        let buf = PlanarBuf::new(2, 1024);
        // Prepared, not started: writes queue up like on a card.
        assert_eq!(p.write(buf.view(1024), 0, 1024), Ok(1024));
        let st = p.status().unwrap();
        assert_eq!((st.state, st.avail), (2 /* SND_PCM_STATE_PREPARED */, 3072));
        assert!(st.htstamp_ns > 0);
        // Started: everything is "played" at once, and always will be.
        p.start().unwrap();
        let st = p.status().unwrap();
        assert_eq!((st.state, st.avail), (ffi::SND_PCM_STATE_RUNNING, 4096));
        assert_eq!(p.write_silence(4096), Ok(4096));
        assert_eq!(p.status().unwrap().avail, 4096);
        assert_eq!(p.delay(), Ok(0));
        assert_eq!(p.rewindable(), Ok(4096));
        p.drop_stream().unwrap();
        PcmIo::close(&mut p).unwrap();
        assert_eq!(p.status(), Err(-libc::EBADFD));
    }

    /// Playback asks the kernel to silence what was played (silence_size = boundary,
    /// threshold 0), so an underrun replays silence, not the ring's old audio; capture
    /// has nothing to silence.
    #[test]
    fn playback_silences_what_was_played() {
        let Ok(lib) = ffi::lib() else { return };
        let req = null_request();
        for (dir, silenced) in [(Direction::Playback, true), (Direction::Capture, false)] {
            let mut p = Pcm::open(lib, "null", dir).unwrap();
            let s = p.configure(&req).unwrap();
            assert_eq!(s.silences_played, silenced, "{dir:?}");
        }
    }
}
