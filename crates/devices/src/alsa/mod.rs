//! ALSA sound cards: the `alsa:` device, with alsa-lib loaded at run time.
//!
//! * [`ffi`]: `dlopen("libasound.so.2")` and a typed table of the `snd_*` calls; where
//!   the library is missing, opening fails with [`DeviceError::Unavailable`]
//!   ("ALSA unavailable: libasound.so.2 not found (…)"), which a caller can answer by
//!   falling back to the null sink.
//! * [`pcm`]: one configured PCM handle — negotiation (format F32 → S32 → S24 → S24_3 →
//!   S16, access MMAP → RW, rate/buffer/period "near"), conversion to and from the
//!   graph's planar f32, status readings.
//! * [`dll`]: a delay-locked loop over the hardware timestamps that learns the card's true
//!   rate.
//! * this module: [`AlsaDevice`], timer-based scheduling on top of those.
//!
//! # Scheduling
//!
//! Timer-based, the way the simulated card's driver works (docs/devices.md, docs/alsa.md):
//! after each cycle's write the ring holds `quantum + margin` frames; `wait` predicts
//! from its last pointer reading (and the DLL's rate) when only `margin` frames will be
//! left — and, for capture, when `quantum` frames will be ready — sleeps once until
//! then, and reads the hardware pointer once (`snd_pcm_status`, counted in
//! `pointer_queries`). The reading stays valid until something invalidates it: a write
//! or read adjusts it by the frames moved (arithmetic, not a query); start, restart and
//! recovery replace it with what they know (the prefill) — so a normal wakeup costs one
//! query per PCM. The margin is a [`Margin`]: it jumps to its maximum on an underrun and
//! decays back (see [`crate::margin`]).
//!
//! alsa-lib's `null` and `file` PCMs do not run in real time (their pointer follows the
//! application at once). For those ([`Pacing::Clock`], chosen automatically from the
//! PCM type, or when a PCM's pointer is seen to run unpaced) the device paces itself on
//! `CLOCK_MONOTONIC` exactly like the null device and does not prefill, so what reaches a
//! `file:` PCM is exactly what was written.
//!
//! # Recovery
//!
//! An xrun (`-EPIPE`, or state XRUN in a reading) or a system suspend (`-ESTRPIPE`,
//! state SUSPENDED) is remembered; the next `wait` restarts the streams (resuming first
//! after a suspend; `-EAGAIN` from `snd_pcm_resume` means "not yet" and that wait just
//! paces one quantum and tries again — alsa-lib's own `snd_pcm_recover` would sleep in
//! 1 s steps on the real-time thread), requeues `quantum + margin` frames of silence and
//! returns [`WaitStatus::Xrun`]. `-ENODEV`/DISCONNECTED is [`DeviceError::Gone`].

pub mod dll;
pub(crate) mod ffi;
pub mod pcm;

#[cfg(test)]
mod fake;

use crate::clock::{RealClock, SimClock};
use crate::margin::{Margin, MarginChange, MarginConfig, us_to_frames};
use crate::pacer::Pacer;
use crate::{
    Device, DeviceCounters, DeviceError, DeviceInfo, ErrName, FollowerLevels, WaitStatus,
    check_format,
};
use dll::Dll;
use pcm::{AlsaError, Direction, HwRequest, HwSetup, Pcm, PcmFormat, PcmIo, Status};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use rustix::fd::BorrowedFd;
use std::ffi::c_int;
use std::io;

pub use ffi::{LIBRARY, LIBRARY_ENV};

/// Default ring size: a quarter second holds the largest quantum plus the largest margin
/// with room, and timer scheduling does not need period interrupts to fill it.
pub const DEFAULT_BUFFER_US: u64 = 250_000;

/// The driver wakes this much (relative) later than its prediction of the due point, so
/// that a small rate error never wakes it early for a second pointer query.
const WAKE_LATE: f64 = 500e-6;

/// Consecutive readings of a running PCM that show its ring completely drained
/// (playback) or full (capture) without an xrun before the device decides the PCM does
/// not run in real time and paces itself instead. A kernel PCM reports an xrun at that
/// point (stop threshold = buffer), so it never gets here.
const UNPACED_READINGS: u32 = 3;

/// A timestamp further than this from `CLOCK_MONOTONIC` is not a monotonic stamp (old
/// kernels give gettimeofday stamps); the driver then uses its own clock reading.
const STAMP_PLAUSIBLE_NS: u64 = 100_000_000;

/// What paces an ALSA device's cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pacing {
    /// The device's own pointer unless the PCM is alsa-lib's `null` or `file` plugin
    /// (which do not run in real time), or its pointer is seen running unpaced.
    #[default]
    Auto,
    /// Timer scheduling on the hardware pointer.
    Device,
    /// `CLOCK_MONOTONIC` at the nominal rate, like the null device.
    Clock,
}

impl Pacing {
    /// "auto", "device" or "clock".
    pub fn name(self) -> &'static str {
        match self {
            Pacing::Auto => "auto",
            Pacing::Device => "device",
            Pacing::Clock => "clock",
        }
    }
}

/// How to open an [`AlsaDevice`] (the `alsa:` spec).
#[derive(Debug, Clone, PartialEq)]
pub struct AlsaConfig {
    /// The ALSA PCM name: `default`, `hw:0`, `plughw:1,0`, `null`, `file:FILE=…`, …
    pub pcm: String,
    /// Requested rate in Hz (the nearest the PCM offers is used).
    pub rate: u32,
    /// Requested channels (exact if offered, else the nearest count with its default
    /// layout).
    pub channels: ChannelMap,
    /// One sample format, or `None` for the fallback order F32 → S32 → S24 → S24_3 → S16.
    pub format: Option<PcmFormat>,
    /// Ring size in frames (nearest); `None` = [`DEFAULT_BUFFER_US`].
    pub buffer_frames: Option<usize>,
    /// Period size in frames (nearest); `None` = half the buffer.
    pub period_frames: Option<usize>,
    /// Try mmap access first (default); `false` = read/write access only.
    pub mmap: bool,
    /// Open the playback side (a sink).
    pub playback: bool,
    /// Open the capture side (a source) on the same clock.
    pub capture: bool,
    /// Smallest safety margin in frames; `None` = [`crate::margin::DEFAULT_MIN_US`].
    pub margin_frames: Option<usize>,
    /// Largest safety margin in frames (after an underrun); `None` =
    /// [`crate::margin::DEFAULT_MAX_US`]; equal to `margin_frames` = fixed margin.
    pub margin_max_frames: Option<usize>,
    /// What paces the cycles.
    pub pacing: Pacing,
    /// Device name (graph node name); empty = "alsa".
    pub name: String,
}

impl Default for AlsaConfig {
    fn default() -> Self {
        AlsaConfig {
            pcm: "default".into(),
            rate: 48_000,
            channels: ChannelMap::stereo(),
            format: None,
            buffer_frames: None,
            period_frames: None,
            mmap: true,
            playback: true,
            capture: false,
            margin_frames: None,
            margin_max_frames: None,
            pacing: Pacing::Auto,
            name: "alsa".into(),
        }
    }
}

/// Whether alsa-lib can be loaded here; `Err` says why not (the same text an `alsa:`
/// device's [`DeviceError::Unavailable`] carries).
pub fn available() -> Result<(), String> {
    ffi::lib().map(|_| ()).map_err(str::to_string)
}

fn unavailable(reason: &str) -> DeviceError {
    DeviceError::Unavailable {
        backend: "ALSA",
        reason: reason.to_string(),
    }
}

/// One PCM from alsa-lib's device-name hints (`aplay -L`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcmHint {
    /// The PCM name to put after `alsa:`.
    pub name: String,
    /// alsa-lib's description (may span lines).
    pub description: String,
    /// It can play.
    pub playback: bool,
    /// It can capture.
    pub capture: bool,
}

/// The PCMs alsa-lib knows: cards' `hw`/`plughw`/`default`… and plugins such as `null`,
/// `pulse`, `jack`. *control*.
pub fn list_pcms() -> Result<Vec<PcmHint>, DeviceError> {
    let lib = ffi::lib().map_err(unavailable)?;
    let mut hints: *mut *mut std::ffi::c_void = std::ptr::null_mut();
    let iface = c"pcm";
    // SAFETY: valid out-pointer; card -1 = all cards.
    let rc = unsafe { (lib.device_name_hint)(-1, iface.as_ptr(), &mut hints) };
    if rc < 0 {
        return Err(alsa_io(
            "alsa",
            &format!("snd_device_name_hint: {}", lib.error_text(rc)),
            rc,
        ));
    }
    let get = |hint: *const std::ffi::c_void, id: &std::ffi::CStr| -> Option<String> {
        // SAFETY: `hint` is an entry of the hint array; the returned string is malloc'd
        // and freed here.
        unsafe {
            let p = (lib.device_name_get_hint)(hint, id.as_ptr());
            let s = ffi::cstr_lossy(p);
            if !p.is_null() {
                libc::free(p.cast());
            }
            s
        }
    };
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated.
        let hint = unsafe { *hints.add(i) };
        if hint.is_null() {
            break;
        }
        i += 1;
        let Some(name) = get(hint, c"NAME") else {
            continue;
        };
        let ioid = get(hint, c"IOID");
        out.push(PcmHint {
            name,
            description: get(hint, c"DESC").unwrap_or_default(),
            playback: ioid.as_deref() != Some("Input"),
            capture: ioid.as_deref() != Some("Output"),
        });
    }
    // SAFETY: allocated by snd_device_name_hint.
    unsafe { (lib.device_name_free_hint)(hints) };
    Ok(out)
}

/// The sound cards the kernel has: (index, name). Empty without kernel ALSA. *control*.
pub fn list_cards() -> Result<Vec<(i32, String)>, DeviceError> {
    let lib = ffi::lib().map_err(unavailable)?;
    let mut out = Vec::new();
    let mut card: c_int = -1;
    loop {
        // SAFETY: valid in/out pointer.
        if unsafe { (lib.card_next)(&mut card) } < 0 || card < 0 {
            break;
        }
        let mut name: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the string is malloc'd and freed here.
        let name = unsafe {
            if (lib.card_get_name)(card, &mut name) < 0 {
                None
            } else {
                let s = ffi::cstr_lossy(name);
                libc::free(name.cast());
                s
            }
        };
        out.push((card, name.unwrap_or_default()));
    }
    Ok(out)
}

fn alsa_io(device: &str, message: &str, code: i32) -> DeviceError {
    DeviceError::Io {
        device: device.to_string(),
        source: io::Error::new(
            io::Error::from_raw_os_error(-code).kind(),
            message.to_string(),
        ),
    }
}

/// An ALSA PCM (playback, capture or both on one clock) driven by timer-based
/// scheduling; see the module docs.
pub struct AlsaDevice {
    driver: Driver<Pcm>,
    setups: Vec<(Direction, HwSetup)>,
}

impl AlsaDevice {
    /// Loads alsa-lib (once per process), opens and configures the PCM(s). *control*.
    pub fn open(cfg: AlsaConfig) -> Result<Self, DeviceError> {
        Self::open_with_clock(cfg, Box::new(RealClock), Box::new(RealClock))
    }

    /// Like [`AlsaDevice::open`], with the clocks the driver sleeps on and paces
    /// non-real-time PCMs with (two handles on one time line; a
    /// [`crate::VirtualClock`] makes `null`/`file:` runs instant). *control*.
    pub fn open_with_clock(
        cfg: AlsaConfig,
        clock: Box<dyn SimClock>,
        pacer_clock: Box<dyn SimClock>,
    ) -> Result<Self, DeviceError> {
        let name = if cfg.name.is_empty() {
            "alsa".to_string()
        } else {
            cfg.name.clone()
        };
        check_format(&name, cfg.rate, &cfg.channels)?;
        if !cfg.playback && !cfg.capture {
            return Err(DeviceError::BadSpec {
                spec: name,
                reason: "an ALSA device needs playback, capture or both".into(),
            });
        }
        let lib = ffi::lib().map_err(unavailable)?;
        let io_err = |e: AlsaError| alsa_io(&name, &e.message, e.code);
        let mut pcms = Vec::new();
        for (on, dir) in [
            (cfg.playback, Direction::Playback),
            (cfg.capture, Direction::Capture),
        ] {
            if on {
                pcms.push((dir, Pcm::open(lib, &cfg.pcm, dir).map_err(io_err)?));
            }
        }
        let pacing = match cfg.pacing {
            Pacing::Auto
                if pcms.iter().any(|(_, p)| {
                    matches!(
                        p.pcm_type(),
                        ffi::SND_PCM_TYPE_NULL | ffi::SND_PCM_TYPE_FILE
                    )
                }) =>
            {
                Pacing::Clock
            }
            Pacing::Auto => Pacing::Device,
            other => other,
        };
        let req = HwRequest {
            format: cfg.format,
            mmap: cfg.mmap,
            channels: cfg.channels.len() as u32,
            rate: cfg.rate,
            buffer_frames: cfg
                .buffer_frames
                .unwrap_or_else(|| us_to_frames(DEFAULT_BUFFER_US, cfg.rate)),
            period_frames: cfg.period_frames,
            no_period_wakeup: pacing == Pacing::Device,
        };
        let mut setups = Vec::new();
        let mut requests = Vec::new();
        for (dir, pcm) in pcms.iter_mut() {
            let mut r = req.clone();
            if r.period_frames.is_none() {
                r.period_frames = Some(r.buffer_frames / 2);
            }
            let setup = pcm.configure(&r).map_err(io_err)?;
            requests.push(r);
            if let Some((_, first)) = setups.first() {
                let first: &HwSetup = first;
                if first.rate != setup.rate {
                    return Err(alsa_io(
                        &name,
                        &format!(
                            "'{}': playback runs at {} Hz but capture at {} Hz; open them as two devices",
                            cfg.pcm, first.rate, setup.rate
                        ),
                        -libc::EINVAL,
                    ));
                }
            }
            setups.push((*dir, setup));
        }
        // Same card: start and stop together (plugins usually refuse; that is fine).
        let linked = if pcms.len() == 2 {
            let (a, b) = pcms.split_at_mut(1);
            a[0].1.link(&mut b[0].1)
        } else {
            false
        };
        let rate = setups[0].1.rate;
        let map_for = |n: u32| {
            if n as usize == cfg.channels.len() {
                cfg.channels.clone()
            } else {
                ChannelMap::default_for(n as usize)
            }
        };
        let mut play = None;
        let mut cap = None;
        let mut parts = Vec::new();
        for (((dir, pcm), (_, setup)), request) in pcms.into_iter().zip(&setups).zip(requests) {
            parts.push(format!(
                "{} {} {} Hz {} ch, {}, buffer {}, period {}{}",
                dir.name(),
                setup.format.alsa_name(),
                setup.rate,
                setup.channels,
                match setup.access {
                    pcm::Access::Mmap => "mmap",
                    pcm::Access::ReadWrite => "read/write",
                },
                setup.buffer_frames,
                setup.period_frames,
                if setup.period_wakeup_disabled {
                    ", no period interrupts"
                } else {
                    ""
                }
            ));
            let side = Side::new(pcm, request, setup.clone());
            match dir {
                Direction::Playback => play = Some((side, map_for(setup.channels))),
                Direction::Capture => cap = Some((side, map_for(setup.channels))),
            }
        }
        let description = format!(
            "ALSA '{}': {}; {}{}",
            cfg.pcm,
            parts.join("; "),
            match pacing {
                Pacing::Clock => "paced by CLOCK_MONOTONIC (the PCM does not run in real time)",
                _ => "timer-scheduled on the hardware pointer",
            },
            if linked { "; linked" } else { "" }
        );
        let info = DeviceInfo {
            name,
            description,
            rate,
            playback: play.as_ref().map(|(_, m)| m.clone()),
            capture: cap.as_ref().map(|(_, m)| m.clone()),
            freewheel: false,
        };
        let buffer = setups
            .iter()
            .map(|(_, s)| s.buffer_frames)
            .min()
            .unwrap_or(0);
        let margin = margin_config(&cfg, rate, buffer);
        let mut driver = Driver::new(
            info,
            play.map(|(s, _)| s),
            cap.map(|(s, _)| s),
            margin,
            pacing == Pacing::Clock,
            clock,
            pacer_clock,
        );
        driver.linked = linked;
        driver.closes_when_idle = setups
            .iter()
            .all(|(_, s)| s.pcm_type != ffi::SND_PCM_TYPE_FILE);
        Ok(AlsaDevice { driver, setups })
    }

    /// What was negotiated, per direction (a reopen after an idle close must negotiate
    /// the same, or the device fails).
    pub fn setups(&self) -> &[(Direction, HwSetup)] {
        &self.setups
    }

    /// Whether the PCM handles are open: false between an idle close
    /// ([`Device::close_idle`]) and the start that reopens them.
    pub fn is_open(&self) -> bool {
        [self.driver.play.as_ref(), self.driver.cap.as_ref()]
            .into_iter()
            .flatten()
            .all(|s| s.pcm.is_open())
    }

    /// What paces the cycles now ([`Pacing::Device`] or [`Pacing::Clock`]; a device
    /// opened as `Device` switches to `Clock` if its PCM turns out not to run in real
    /// time).
    pub fn pacing(&self) -> Pacing {
        if self.driver.paced_by_clock {
            Pacing::Clock
        } else {
            Pacing::Device
        }
    }

    /// The safety margin's state (current value, bounds, changes).
    pub fn margin(&self) -> &Margin {
        &self.driver.margin
    }

    /// The rate the device clock was measured at so far (DLL estimate), in Hz.
    pub fn measured_rate_hz(&self) -> f64 {
        self.driver.dll.rate_hz()
    }

    /// Poll descriptors of the playback (else capture) PCM: what a period-interrupt mode
    /// would wait on. *control*.
    pub fn poll_descriptor_count(&self) -> usize {
        self.driver
            .play
            .as_ref()
            .or(self.driver.cap.as_ref())
            .map_or(0, |s| s.pcm.poll_descriptor_count())
    }

    /// Frames of queued playback alsa-lib could take back now (`snd_pcm_rewindable`),
    /// the basis of future rewinds. *control*.
    pub fn rewindable(&mut self) -> Result<usize, DeviceError> {
        let name = self.driver.info.name.clone();
        match self.driver.play.as_mut() {
            Some(s) => s
                .pcm
                .rewindable()
                .map_err(|e| alsa_io(&name, "snd_pcm_rewindable", e)),
            None => Ok(0),
        }
    }

    /// Takes back up to `frames` queued playback frames (`snd_pcm_rewind`) and returns
    /// how many; they must then be written again. The basis for rewinds, which the engine
    /// does not drive yet (docs/alsa.md). *control*, on a stopped engine.
    pub fn rewind_playback(&mut self, frames: usize) -> Result<usize, DeviceError> {
        let name = self.driver.info.name.clone();
        match self.driver.play.as_mut() {
            Some(s) => {
                let n = s
                    .pcm
                    .rewind(frames)
                    .map_err(|e| alsa_io(&name, "snd_pcm_rewind", e))?;
                s.appl = s.appl.saturating_sub(n as u64);
                if let Some(r) = self.driver.reading.as_mut() {
                    r.play_queued = r.play_queued.saturating_sub(n as u64);
                }
                Ok(n)
            }
            None => Ok(0),
        }
    }

    /// alsa-lib's playback delay (`snd_pcm_delay`): frames until a sample written now is
    /// heard. A pointer query of its own; for diagnostics. *control*.
    pub fn alsa_delay(&mut self) -> Result<isize, DeviceError> {
        let name = self.driver.info.name.clone();
        match self.driver.play.as_mut() {
            Some(s) => s
                .pcm
                .delay()
                .map_err(|e| alsa_io(&name, "snd_pcm_delay", e)),
            None => Ok(0),
        }
    }

    /// Plays out what is queued and stops (blocking; `close` drops instead). *control*.
    pub fn drain(&mut self) -> Result<(), DeviceError> {
        let name = self.driver.info.name.clone();
        if let Some(s) = self.driver.play.as_mut() {
            s.pcm
                .drain()
                .map_err(|e| alsa_io(&name, "snd_pcm_drain", e))?;
        }
        self.driver.running = false;
        Ok(())
    }

    /// Recovers the playback PCM from `err` the way alsa-lib's `snd_pcm_recover` does
    /// (it may sleep; the real-time path recovers without it). *control*.
    pub fn recover_blocking(&mut self, err: i32) -> Result<(), DeviceError> {
        let name = self.driver.info.name.clone();
        if let Some(s) = self.driver.play.as_mut() {
            s.pcm
                .recover(err)
                .map_err(|e| alsa_io(&name, "snd_pcm_recover", e))?;
        }
        Ok(())
    }
}

fn margin_config(cfg: &AlsaConfig, rate: u32, buffer: usize) -> MarginConfig {
    let d = MarginConfig::for_rate(rate);
    // Leave at least a quarter of the ring for the quantum.
    let cap = (buffer * 3 / 4).max(1);
    let min = cfg.margin_frames.unwrap_or(d.min_frames).clamp(1, cap);
    let max = cfg
        .margin_max_frames
        .unwrap_or(d.max_frames.max(min))
        .clamp(min, cap);
    MarginConfig {
        rate,
        min_frames: min,
        max_frames: max,
    }
}

impl Device for AlsaDevice {
    fn info(&self) -> &DeviceInfo {
        self.driver.info()
    }
    fn start(&mut self, quantum: usize) -> Result<(), DeviceError> {
        self.driver.start(quantum)
    }
    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.driver.wait(quantum, None)
    }
    fn wait_or_wake(
        &mut self,
        quantum: usize,
        wake: BorrowedFd<'_>,
    ) -> Result<WaitStatus, DeviceError> {
        self.driver.wait(quantum, Some(wake))
    }
    fn max_fill(&self) -> usize {
        self.driver.max_fill()
    }
    fn set_fill(&mut self, frames: usize) {
        self.driver.set_fill(frames)
    }
    fn rewind(&mut self, keep: usize) -> usize {
        self.driver.rewind(keep)
    }
    fn follow(&mut self, quantum: usize) -> Result<Option<FollowerLevels>, DeviceError> {
        self.driver.follow(quantum)
    }
    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        self.driver.write(buf)
    }
    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        self.driver.read(buf)
    }
    fn suspend(&mut self) {
        self.driver.suspend()
    }
    /// `snd_pcm_close` on every PCM; `start` reopens and renegotiates.
    fn close_idle(&mut self) -> bool {
        self.driver.close_idle()
    }
    fn playback_delay(&self) -> usize {
        self.driver.playback_delay()
    }
    fn capture_delay(&self) -> usize {
        self.driver.capture_delay()
    }
    fn max_quantum(&self) -> Option<usize> {
        Some(self.driver.max_quantum())
    }
    /// alsa-lib's userspace PCMs (`null`, `file:`) are not heard, and `file:` must stay
    /// byte-exact; cards fade in.
    fn fades_in_on_start(&self) -> bool {
        !self.driver.paced_by_clock
    }

    fn counters(&self) -> DeviceCounters {
        self.driver.counters()
    }
    fn wakeup_lateness_ns(&self) -> Option<u64> {
        self.driver.wakeup_lateness_ns()
    }
    fn close(&mut self) -> Result<(), DeviceError> {
        self.driver.close()
    }
}

/// One direction's PCM and the driver's bookkeeping for it.
pub(crate) struct Side<P> {
    pcm: P,
    buffer: usize,
    /// Frames written (playback, prefill included) or read (capture) since the stream
    /// started: the application pointer.
    appl: u64,
    /// What the first open asked for and got: a reopen after an idle close asks the
    /// same and must get the same stream, which the engine's graph was built for.
    request: HwRequest,
    setup: HwSetup,
}

impl<P> Side<P> {
    pub(crate) fn new(pcm: P, request: HwRequest, setup: HwSetup) -> Self {
        Side {
            pcm,
            buffer: setup.buffer_frames,
            appl: 0,
            request,
            setup,
        }
    }
}

/// The parts of a negotiation the driver and the engine depend on: access, format,
/// channels, rate and ring size.
fn same_stream(a: &HwSetup, b: &HwSetup) -> bool {
    (a.access, a.format, a.channels, a.rate, a.buffer_frames)
        == (b.access, b.format, b.channels, b.rate, b.buffer_frames)
}

fn describe_stream(s: &HwSetup) -> String {
    format!(
        "{} {} Hz {} ch, buffer {}, {}",
        s.format.alsa_name(),
        s.rate,
        s.channels,
        s.buffer_frames,
        match s.access {
            pcm::Access::Mmap => "mmap",
            pcm::Access::ReadWrite => "read/write",
        }
    )
}

/// The last pointer reading, kept up to date by the driver's own writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reading {
    /// When the pointer was read (device timestamp, else our clock).
    t_ns: u64,
    /// Playback frames queued at `t_ns`, plus those written since.
    play_queued: u64,
    /// Capture frames ready at `t_ns`, minus those read since.
    cap_avail: u64,
}

/// Something the next `wait` must recover from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    None,
    Xrun,
    Suspended,
}

/// The scheduling logic over any [`PcmIo`] (alsa-lib's, or the tests' simulated PCM).
pub(crate) struct Driver<P: PcmIo> {
    info: DeviceInfo,
    err_name: ErrName,
    counters: DeviceCounters,
    play: Option<Side<P>>,
    cap: Option<Side<P>>,
    clock: Box<dyn SimClock>,
    pacer: Pacer,
    paced_by_clock: bool,
    margin: Margin,
    dll: Dll,
    running: bool,
    reading: Option<Reading>,
    pending: Pending,
    unpaced_readings: u32,
    last_lateness_ns: u64,
    play_delay: usize,
    cap_delay: usize,
    last_write: usize,
    /// The PCMs are closed after an idle suspend; `start` reopens them.
    closed: bool,
    /// Playback and capture were `snd_pcm_link`ed at open (and are again on reopen).
    linked: bool,
    /// Whether an idle suspend closes the PCMs: not for alsa-lib's `file` plugin,
    /// whose reopen truncates the output file it was writing.
    closes_when_idle: bool,
    /// Fill level the engine asked for (`Device::set_fill`); 0 = one quantum per wakeup.
    fill: usize,
    /// Woken (or rewound) and still topping the ring up to `fill`.
    refilling: bool,
    /// The largest quantum [`Device::follow`] saw since the last restart (0: none).
    follow_quantum: usize,
}

fn is_gone(err: i32) -> bool {
    // A vanished card: the kernel's DISCONNECTED state answers -ENODEV; some drivers
    // and plugins say -ENXIO or -ESHUTDOWN. (-EBADFD is a call in the wrong state, or a
    // closed handle: an error, not an unplug.)
    matches!(-err, libc::ENODEV | libc::ENXIO | libc::ESHUTDOWN)
}

impl<P: PcmIo> Driver<P> {
    pub(crate) fn new(
        info: DeviceInfo,
        play: Option<Side<P>>,
        cap: Option<Side<P>>,
        margin: MarginConfig,
        paced_by_clock: bool,
        clock: Box<dyn SimClock>,
        pacer_clock: Box<dyn SimClock>,
    ) -> Self {
        let rate = info.rate;
        Driver {
            err_name: ErrName::new(&info.name),
            counters: DeviceCounters::default(),
            play,
            cap,
            clock,
            pacer: Pacer::new(rate, pacer_clock),
            paced_by_clock,
            margin: Margin::new(margin),
            dll: Dll::new(rate),
            running: false,
            reading: None,
            pending: Pending::None,
            unpaced_readings: 0,
            last_lateness_ns: 0,
            play_delay: 0,
            cap_delay: 0,
            last_write: 0,
            closed: false,
            linked: false,
            closes_when_idle: true,
            fill: 0,
            refilling: false,
            follow_quantum: 0,
            info,
        }
    }

    /// How much playback the driver can keep queued filling ahead: the ring less its
    /// largest watermark, for a playback-only PCM that the hardware paces. Capture would
    /// be read in bursts (not supported), and a PCM paced by our clock has no queue.
    fn max_fill(&self) -> usize {
        match (&self.play, &self.cap) {
            (Some(_), None) if !self.paced_by_clock => self
                .buffer()
                .saturating_sub(self.margin.config().max_frames),
            _ => 0,
        }
    }

    fn set_fill(&mut self, frames: usize) {
        self.fill = frames.min(self.max_fill());
    }

    /// Takes back queued playback beyond the watermark plus `keep` (`snd_pcm_rewindable`
    /// then `snd_pcm_rewind`); returns the frames taken back. The rewindable query reads
    /// the hardware pointer, so it is counted as a pointer query.
    fn rewind(&mut self, keep: usize) -> usize {
        if !self.running || self.pending != Pending::None || self.paced_by_clock || self.closed {
            return 0;
        }
        let w = self.margin.current();
        let Some(side) = self.play.as_mut() else {
            return 0;
        };
        self.counters.pointer_queries += 1;
        let Ok(rewindable) = side.pcm.rewindable() else {
            return 0;
        };
        let want = rewindable.saturating_sub(w + keep);
        if want == 0 {
            return 0;
        }
        let Ok(n) = side.pcm.rewind(want) else {
            return 0;
        };
        side.appl = side.appl.saturating_sub(n as u64);
        if let Some(r) = self.reading.as_mut() {
            r.play_queued = r.play_queued.saturating_sub(n as u64);
        }
        self.play_delay = self.play_delay.saturating_sub(n);
        self.refilling = true;
        self.counters.rewinds += 1;
        self.counters.rewound_frames += n as u64;
        n
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The error for alsa-lib code `err` (`Gone` for a vanished device).
    /// What a failed read or write means, the same for both directions: EPIPE is an
    /// xrun (the margin jumps, recovery waits for the next wait), ESTRPIPE a system
    /// suspend (resume pending); anything else fails the device.
    fn transfer_failed(&mut self, err: i32) -> Result<(), DeviceError> {
        if err == -libc::EPIPE {
            let now = self.clock.now_ns();
            let change = self.margin.on_underrun(now);
            self.publish(change);
            self.pending = Pending::Xrun;
        } else if err == -libc::ESTRPIPE {
            self.pending = Pending::Suspended;
        } else {
            return Err(self.fail(err));
        }
        self.reading = None;
        Ok(())
    }

    fn fail(&mut self, err: i32) -> DeviceError {
        let device = self.err_name.take(&self.info.name);
        if is_gone(err) {
            DeviceError::Gone(device)
        } else {
            DeviceError::Io {
                device,
                source: io::Error::from_raw_os_error(-err),
            }
        }
    }

    /// The smallest ring among the open sides.
    fn buffer(&self) -> usize {
        let p = self.play.as_ref().map_or(usize::MAX, |s| s.buffer);
        let c = self.cap.as_ref().map_or(usize::MAX, |s| s.buffer);
        p.min(c)
    }

    /// The largest quantum the ring allows: the buffer minus the minimum margin.
    fn max_quantum(&self) -> usize {
        let min_margin = if self.play.is_some() && !self.paced_by_clock {
            self.margin.config().min_frames
        } else {
            0
        };
        self.buffer().saturating_sub(min_margin).max(1)
    }

    fn check_quantum(&mut self, quantum: usize) -> Result<(), DeviceError> {
        let min_margin = if self.play.is_some() && !self.paced_by_clock {
            self.margin.config().min_frames
        } else {
            0
        };
        if quantum == 0 || quantum + min_margin > self.buffer() {
            // Only an engine bug (or a quantum beyond this card's ring) gets here.
            return Err(DeviceError::Io {
                device: self.err_name.take(&self.info.name),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "quantum must be at least 1 and at most the ALSA buffer minus the margin",
                ),
            });
        }
        Ok(())
    }

    /// The margin in effect for `quantum`: the policy's value, limited by the ring.
    fn watermark(&self, quantum: usize) -> usize {
        self.margin
            .current()
            .min(self.buffer().saturating_sub(quantum))
    }

    fn publish(&mut self, change: Option<MarginChange>) {
        if change.is_some() {
            self.counters.margin_changes = self.margin.changes();
        }
    }

    /// Stops, prepares and restarts the streams: the prefill (`quantum + margin` frames
    /// of silence) is what the new reading knows, so no pointer query is needed.
    fn restart(&mut self, quantum: usize) -> Result<(), DeviceError> {
        for side in [self.play.as_mut(), self.cap.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = side.pcm.drop_stream();
            side.appl = 0;
        }
        for i in 0..2 {
            let side = if i == 0 {
                self.play.as_mut()
            } else {
                self.cap.as_mut()
            };
            let Some(side) = side else { continue };
            // Linked PCMs prepare together; a second prepare is harmless.
            if let Err(e) = side.pcm.prepare() {
                return Err(self.fail(e));
            }
        }
        let prefill = if self.paced_by_clock {
            0
        } else {
            quantum + self.watermark(quantum)
        };
        if let Some(side) = self.play.as_mut()
            && prefill > 0
        {
            match side.pcm.write_silence(prefill) {
                Ok(n) => side.appl = n as u64,
                Err(e) => return Err(self.fail(e)),
            }
        }
        for i in 0..2 {
            let side = if i == 0 {
                self.play.as_mut()
            } else {
                self.cap.as_mut()
            };
            let Some(side) = side else { continue };
            // Linked PCMs start together: only start what is not running yet.
            if side.pcm.state() != ffi::SND_PCM_STATE_RUNNING
                && let Err(e) = side.pcm.start()
            {
                return Err(self.fail(e));
            }
        }
        let now = self.clock.now_ns();
        let queued = self.play.as_ref().map_or(0, |s| s.appl);
        self.reading = Some(Reading {
            t_ns: now,
            play_queued: queued,
            cap_avail: 0,
        });
        self.dll.reset(now, 0);
        self.pending = Pending::None;
        self.follow_quantum = quantum;
        self.unpaced_readings = 0;
        self.play_delay = queued as usize;
        self.cap_delay = 0;
        Ok(())
    }

    fn start(&mut self, quantum: usize) -> Result<(), DeviceError> {
        self.check_quantum(quantum)?;
        if self.closed {
            self.reopen()?;
        }
        self.restart(quantum)?;
        if self.paced_by_clock {
            self.pacer.start();
        }
        self.running = true;
        self.counters.margin_frames = self.margin.current() as u64;
        Ok(())
    }

    /// Closes the PCMs of a suspended device (idle): the card is free for other
    /// programs and may power down. alsa-lib frees a handle whatever `snd_pcm_close`
    /// returns, so a failed close changes nothing for the reopen.
    fn close_idle(&mut self) -> bool {
        if self.closed || !self.closes_when_idle {
            return false;
        }
        self.suspend();
        for side in [self.play.as_mut(), self.cap.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = side.pcm.close();
        }
        self.closed = true;
        self.counters.closed = true;
        self.counters.idle_closes += 1;
        true
    }

    /// Opens the PCMs closed by [`Driver::close_idle`] again, negotiating through the
    /// same path as the first open with the same request, and insists on the same
    /// stream: the engine sized its graph, buffers and quantum for it. Any failure is an
    /// error the engine answers by dropping the device; it is logged with this message.
    fn reopen(&mut self) -> Result<(), DeviceError> {
        let name = &self.info.name;
        for (dir, side) in [
            (Direction::Playback, self.play.as_mut()),
            (Direction::Capture, self.cap.as_mut()),
        ] {
            let Some(side) = side else { continue };
            let got = side
                .pcm
                .reopen(&side.request)
                .map_err(|e| DeviceError::Io {
                    device: name.clone(),
                    source: io::Error::new(
                        io::Error::from_raw_os_error(-e.code).kind(),
                        format!("reopening after the idle close: {}", e.message),
                    ),
                })?;
            if !same_stream(&got, &side.setup) {
                return Err(DeviceError::Io {
                    device: name.clone(),
                    source: io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "reopening after the idle close: {} now negotiates {} instead of {}",
                            dir.name(),
                            describe_stream(&got),
                            describe_stream(&side.setup)
                        ),
                    ),
                });
            }
        }
        if self.linked
            && let (Some(p), Some(c)) = (self.play.as_mut(), self.cap.as_mut())
        {
            // Unlinked, restart starts both PCMs itself: only their alignment suffers.
            self.linked = p.pcm.link(&mut c.pcm);
        }
        self.closed = false;
        self.counters.closed = false;
        self.counters.reopens += 1;
        Ok(())
    }

    /// One hardware-pointer query per open PCM (`snd_pcm_status`). Returns the reading,
    /// or `None` if it found an xrun or suspend (now pending).
    fn query(&mut self) -> Result<Option<Reading>, DeviceError> {
        let now = self.clock.now_ns();
        let mut r = Reading {
            t_ns: now,
            play_queued: 0,
            cap_avail: 0,
        };
        let mut stamp = 0;
        let mut unpaced = false;
        let mut found = Pending::None;
        for i in 0..2 {
            let side = if i == 0 {
                self.play.as_mut()
            } else {
                self.cap.as_mut()
            };
            let Some(side) = side else { continue };
            self.counters.pointer_queries += 1;
            let st: Status = match side.pcm.status() {
                Ok(st) => st,
                Err(e) => return Err(self.fail(e)),
            };
            let buffer = side.buffer as u64;
            let avail = st.avail as u64;
            match st.state {
                ffi::SND_PCM_STATE_XRUN => {
                    if i == 0 {
                        self.counters.underruns += 1;
                    } else {
                        self.counters.overruns += 1;
                    }
                    found = Pending::Xrun;
                }
                ffi::SND_PCM_STATE_SUSPENDED if found == Pending::None => {
                    found = Pending::Suspended;
                }
                ffi::SND_PCM_STATE_DISCONNECTED => return Err(self.fail(-libc::ENODEV)),
                ffi::SND_PCM_STATE_RUNNING => unpaced |= avail >= buffer,
                _ => {}
            }
            if i == 0 {
                r.play_queued = buffer.saturating_sub(avail);
            } else {
                r.cap_avail = avail.min(buffer);
            }
            if stamp == 0 {
                stamp = st.htstamp_ns;
            }
        }
        if found != Pending::None {
            if found == Pending::Xrun {
                let change = self.margin.on_underrun(now);
                self.publish(change);
            }
            self.pending = found;
            self.reading = None;
            return Ok(None);
        }
        if stamp != 0 && stamp.abs_diff(now) < STAMP_PLAUSIBLE_NS {
            r.t_ns = stamp.min(now);
        }
        // Feed the loop with the hardware position: playback is what was written minus
        // what is still queued; capture is what was read plus what is ready.
        let pos = match (&self.play, &self.cap) {
            (Some(p), _) => p.appl.saturating_sub(r.play_queued),
            (None, Some(c)) => c.appl + r.cap_avail,
            (None, None) => 0,
        };
        self.dll.update(r.t_ns, pos);
        self.unpaced_readings = if unpaced {
            self.unpaced_readings + 1
        } else {
            0
        };
        self.reading = Some(r);
        Ok(Some(r))
    }

    /// Recovers from a pending xrun or suspend. Returns false if the device is still
    /// suspended (resume said "not yet").
    fn recover(&mut self, quantum: usize) -> Result<bool, DeviceError> {
        if self.pending == Pending::Suspended {
            for i in 0..2 {
                let side = if i == 0 {
                    self.play.as_mut()
                } else {
                    self.cap.as_mut()
                };
                let Some(side) = side else { continue };
                match side.pcm.resume() {
                    Ok(()) => {}
                    Err(e) if e == -libc::EAGAIN => return Ok(false),
                    // -ENOSYS (no resume support) and the rest: prepare (in restart).
                    Err(e) if is_gone(e) => return Err(self.fail(e)),
                    Err(_) => {}
                }
            }
        }
        self.restart(quantum)?;
        Ok(true)
    }

    /// A follower whose quantum grew by `growth`: as much silence, as far as the ring has
    /// room (see [`Device::follow`]). Uses the last reading.
    fn top_up(&mut self, growth: usize) -> Result<(), DeviceError> {
        let Some(side) = self.play.as_mut() else {
            return Ok(());
        };
        // The wait plays a quantum of it before the cycle writes the next one.
        let queued = self.reading.map_or(0, |r| r.play_queued as usize);
        let n = growth.min(side.buffer.saturating_sub(queued));
        if n == 0 {
            return Ok(());
        }
        match side.pcm.write_silence(n) {
            Ok(w) => {
                side.appl += w as u64;
                if let Some(r) = self.reading.as_mut() {
                    r.play_queued += w as u64;
                }
                Ok(())
            }
            Err(e) => self.transfer_failed(e),
        }
    }

    /// [`Device::follow`]: recovers a pending xrun as `wait` would, then one reading.
    fn follow(&mut self, quantum: usize) -> Result<Option<FollowerLevels>, DeviceError> {
        self.check_quantum(quantum)?;
        if !self.running || self.paced_by_clock {
            return Ok(None);
        }
        let mut restarted = false;
        // A reading may itself find the xrun: recover then and read again, once.
        for _ in 0..2 {
            if self.pending != Pending::None {
                if !self.recover(quantum)? {
                    return Ok(None);
                }
                restarted = true;
            }
            if !restarted && quantum > self.follow_quantum {
                let growth = quantum - self.follow_quantum;
                self.follow_quantum = quantum;
                self.top_up(growth)?;
            }
            if let Some(r) = self.query()? {
                return Ok(Some(FollowerLevels {
                    play_queued: self.play.is_some().then_some(r.play_queued as usize),
                    cap_avail: self.cap.is_some().then_some(r.cap_avail as usize),
                    restarted,
                }));
            }
        }
        Ok(None)
    }

    fn wait(
        &mut self,
        quantum: usize,
        wake_fd: Option<BorrowedFd<'_>>,
    ) -> Result<WaitStatus, DeviceError> {
        self.check_quantum(quantum)?;
        if !self.running {
            self.start(quantum)?;
        }
        if self.paced_by_clock {
            return Ok(self.wait_on_clock(quantum));
        }
        // Refilling: another quantum fits within the fill, by the last reading (kept up
        // to date by writes; the hardware only moves on, so the real queue is smaller).
        if self.fill > 0
            && self.refilling
            && self.pending == Pending::None
            && self
                .reading
                .is_some_and(|r| r.play_queued + quantum as u64 <= self.fill as u64)
        {
            return Ok(WaitStatus::Ready);
        }
        self.refilling = false;
        let mut xrun = false;
        let mut deadline = None;
        loop {
            if self.pending != Pending::None {
                xrun = true;
                if !self.recover(quantum)? {
                    // Still suspended: pace one quantum and report it again next time.
                    self.pacer.start();
                    self.pacer.wait(quantum);
                    self.counters.wakeups += 1;
                    return Ok(WaitStatus::Xrun);
                }
            }
            let r = match self.reading {
                Some(r) => r,
                None => match self.query()? {
                    Some(r) => r,
                    None => continue,
                },
            };
            if self.unpaced_readings >= UNPACED_READINGS {
                // The pointer follows the application at once: not a real-time PCM.
                self.paced_by_clock = true;
                self.reading = None;
                self.pacer.start();
                return Ok(self.wait_on_clock(quantum));
            }
            let w = self.watermark(quantum) as u64;
            let play_ahead = if self.play.is_some() {
                r.play_queued.saturating_sub(w)
            } else {
                0
            };
            let cap_ahead = if self.cap.is_some() {
                (quantum as u64).saturating_sub(r.cap_avail)
            } else {
                0
            };
            let ahead = play_ahead.max(cap_ahead);
            if ahead == 0 {
                break;
            }
            let ns = (ahead as f64 * self.dll.ns_per_frame() * (1.0 + WAKE_LATE)).ceil() as u64;
            let wake = r.t_ns.saturating_add(ns);
            match wake_fd {
                // Filling ahead, this sleep may last most of the ring: a control message
                // (a rewind) must be able to cut it short.
                Some(fd) if self.fill > 0 && !xrun => {
                    if self.clock.sleep_until_ns_or_wake(wake, fd) {
                        return Ok(WaitStatus::Woken);
                    }
                }
                _ => self.clock.sleep_until_ns(wake),
            }
            deadline = Some(wake);
            // Time has passed: the reading is stale.
            self.reading = None;
        }
        if let Some(d) = deadline {
            let now = self.clock.now_ns();
            self.last_lateness_ns = now.saturating_sub(d);
        } else {
            self.last_lateness_ns = 0;
        }
        self.refilling = true;
        self.counters.wakeups += 1;
        self.counters.margin_frames = self.watermark(quantum) as u64;
        Ok(if xrun {
            WaitStatus::Xrun
        } else {
            WaitStatus::Ready
        })
    }

    fn wait_on_clock(&mut self, quantum: usize) -> WaitStatus {
        let late = self.pacer.wait(quantum);
        self.last_lateness_ns = self.pacer.last_lateness_ns;
        self.counters.wakeups += 1;
        if !late {
            return WaitStatus::Ready;
        }
        if self.play.is_some() {
            self.counters.underruns += 1;
        }
        if self.cap.is_some() {
            self.counters.overruns += 1;
        }
        WaitStatus::Xrun
    }

    /// Frames the hardware has consumed since `r` was taken, estimated from the clock.
    fn elapsed_frames(&mut self, r: &Reading) -> (u64, u64) {
        let now = self.clock.now_ns();
        let frames = (now.saturating_sub(r.t_ns) as f64 / self.dll.ns_per_frame()) as u64;
        (now, frames)
    }

    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        let frames = buf.frames();
        if self.play.is_none() {
            return Ok(());
        }
        self.counters.frames_written += frames as u64;
        if !self.running || self.pending != Pending::None {
            // Dropped: the next wait restarts the stream.
            return Ok(());
        }
        let mut left = 0;
        if !self.paced_by_clock
            && let Some(r) = self.reading
        {
            // The headroom at the moment this cycle's audio arrives: how close the cycle
            // came to an underrun (a clock read, not a pointer query).
            let (now, elapsed) = self.elapsed_frames(&r);
            left = r.play_queued.saturating_sub(elapsed);
            let change = self.margin.on_cycle(now, left as usize);
            self.publish(change);
        }
        let side = self.play.as_mut().expect("checked above");
        match side.pcm.write(buf, 0, frames) {
            Ok(n) => {
                side.appl += n as u64;
                if let Some(r) = self.reading.as_mut() {
                    r.play_queued += n as u64;
                }
                self.play_delay = left as usize + n;
                self.last_write = n;
                Ok(())
            }
            Err(e) => {
                if e == -libc::EPIPE {
                    self.counters.underruns += 1;
                }
                self.transfer_failed(e)
            }
        }
    }

    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        let frames = buf.frames();
        if self.cap.is_none() {
            buf.fill_silence();
            return Ok(());
        }
        self.counters.frames_read += frames as u64;
        if !self.running || self.pending != Pending::None {
            buf.fill_silence();
            return Ok(());
        }
        let side = self.cap.as_mut().expect("checked above");
        match side.pcm.read(buf, 0, frames) {
            Ok(n) => {
                side.appl += n as u64;
                for ch in 0..buf.channels() {
                    buf.channel_mut(ch)[n..].fill(0.0);
                }
                if let Some(r) = self.reading.as_mut() {
                    r.cap_avail = r.cap_avail.saturating_sub(n as u64);
                    self.cap_delay = r.cap_avail as usize;
                }
                Ok(())
            }
            Err(e) => {
                buf.fill_silence();
                if e == -libc::EPIPE {
                    self.counters.overruns += 1;
                }
                self.transfer_failed(e)
            }
        }
    }

    fn suspend(&mut self) {
        for side in [self.play.as_mut(), self.cap.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = side.pcm.drop_stream();
        }
        self.pacer.stop();
        self.running = false;
        self.reading = None;
        self.pending = Pending::None;
        self.play_delay = 0;
        self.cap_delay = 0;
        self.last_write = 0;
    }

    fn playback_delay(&self) -> usize {
        if self.paced_by_clock {
            self.last_write
        } else {
            self.play_delay
        }
    }

    fn capture_delay(&self) -> usize {
        if self.paced_by_clock {
            0
        } else {
            self.cap_delay
        }
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }

    fn wakeup_lateness_ns(&self) -> Option<u64> {
        Some(self.last_lateness_ns)
    }

    fn close(&mut self) -> Result<(), DeviceError> {
        self.suspend();
        let mut first = None;
        for side in [self.play.as_mut(), self.cap.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = side.pcm.close()
                && first.is_none()
            {
                first = Some(e);
            }
        }
        match first {
            Some(e) => Err(DeviceError::Io {
                device: self.info.name.clone(),
                source: io::Error::from_raw_os_error(-e),
            }),
            None => Ok(()),
        }
    }
}

/// Opens `name` for `dir` just to see whether it exists and what it negotiates with the
/// defaults (for `quaver`-side diagnostics and tests). *control*.
pub fn probe(name: &str, dir: Direction) -> Result<HwSetup, DeviceError> {
    let lib = ffi::lib().map_err(unavailable)?;
    let mut pcm = Pcm::open(lib, name, dir).map_err(|e| alsa_io("alsa", &e.message, e.code))?;
    pcm.configure(&HwRequest {
        format: None,
        mmap: true,
        channels: 2,
        rate: 48_000,
        buffer_frames: us_to_frames(DEFAULT_BUFFER_US, 48_000),
        period_frames: None,
        no_period_wakeup: false,
    })
    .map_err(|e| alsa_io("alsa", &e.message, e.code))
}
