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
//! * [`config`]: [`AlsaConfig`], [`Pacing`] and the margin that follows from them.
//! * `driver.rs` and `cycle.rs`: timer-based scheduling and recovery on top of those.
//! * [`hotplug`]: cards coming and going, from the kernel's uevents.
//! * [`cards`]: card discovery and PulseAudio-style profiles built from what each PCM
//!   negotiates.
//! * [`seq`]: the ALSA sequencer's MIDI ports, bridged to lock-free raw MIDI queues
//!   (docs/alsa/seq.md).
//! * this module: [`AlsaDevice`] over the driver, and listing PCMs and cards.
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

pub mod cards;
pub mod config;
mod cycle;
pub mod dll;
mod driver;
pub(crate) mod ffi;
pub mod hotplug;
pub mod jack;
pub mod mixer;
pub mod params;
pub mod pcm;
pub mod ports;
pub mod seq;
pub mod ucm;

#[cfg(test)]
mod fake;

use crate::clock::{RealClock, SimClock};
use crate::margin::{Margin, us_to_frames};
use crate::{
    Device, DeviceCounters, DeviceError, DeviceInfo, FollowerLevels, WaitStatus, check_format,
};
use config::margin_config;
use driver::{Driver, Side, alsa_io};
use pcm::{AlsaError, Direction, HwRequest, HwSetup, Pcm, PcmIo};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use rustix::fd::BorrowedFd;
use std::ffi::c_int;

pub use config::{AlsaConfig, DEFAULT_BUFFER_US, Pacing, TSCHED_BUFFER_US};
pub use ffi::{LIBRARY, LIBRARY_ENV};

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
    Ok(card_numbers(lib)
        .map(|card| {
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
            (card, name.unwrap_or_default())
        })
        .collect())
}

/// The numbers of the kernel's sound cards, in order (`snd_card_next`).
fn card_numbers(lib: &ffi::Lib) -> impl Iterator<Item = c_int> + '_ {
    let mut card: c_int = -1;
    std::iter::from_fn(move || {
        // SAFETY: valid in/out pointer.
        let rc = unsafe { (lib.card_next)(&mut card) };
        (rc >= 0 && card >= 0).then_some(card)
    })
}

/// An ALSA PCM (playback, capture or both on one clock) driven by timer-based
/// scheduling; see the module docs.
pub struct AlsaDevice {
    driver: Driver<Pcm>,
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
        let pacing = pacing_for(cfg.pacing, &pcms);
        let req = HwRequest {
            format: cfg.format,
            mmap: cfg.mmap,
            channels: cfg.channels.len() as u32,
            rate: cfg.rate,
            buffer_frames: cfg.buffer_frames.unwrap_or_else(|| {
                let us = match pacing {
                    Pacing::Clock => DEFAULT_BUFFER_US,
                    _ => TSCHED_BUFFER_US,
                };
                us_to_frames(us, cfg.rate)
            }),
            period_frames: cfg.period_frames,
            no_period_wakeup: pacing == Pacing::Device,
        };
        let (setups, requests) = configure_all(&name, &cfg.pcm, &mut pcms, &req)?;
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
            parts.push(describe_side(dir, setup));
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
        Ok(AlsaDevice { driver })
    }

    /// This device with `description` for its sink and source (a card's name and
    /// profile, instead of the negotiation summary). *control*.
    pub fn with_description(mut self, description: String) -> Self {
        self.driver.info.description = description;
        self
    }

    /// What is negotiated now, per direction: the first open's, or the last reopen's
    /// after an idle close (same rate and channels; the format or ring may differ).
    pub fn setups(&self) -> Vec<(Direction, HwSetup)> {
        [
            (Direction::Playback, self.driver.play.as_ref()),
            (Direction::Capture, self.driver.cap.as_ref()),
        ]
        .into_iter()
        .filter_map(|(dir, side)| Some((dir, side?.setup.clone())))
        .collect()
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

/// What paces a device whose PCMs are `pcms`: `Auto` is the clock for alsa-lib's `null`
/// and `file` plugins (they do not run in real time), the device's pointer otherwise.
fn pacing_for(asked: Pacing, pcms: &[(Direction, Pcm)]) -> Pacing {
    match asked {
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
    }
}

/// Per direction, what a PCM got; and what each asked for, in the same order.
type Negotiated = (Vec<(Direction, HwSetup)>, Vec<HwRequest>);

/// Negotiates every PCM from `req` (a period of half the ring unless asked); both
/// directions must run at one rate. Returns what each got and what it asked for.
fn configure_all(
    name: &str,
    pcm_name: &str,
    pcms: &mut [(Direction, Pcm)],
    req: &HwRequest,
) -> Result<Negotiated, DeviceError> {
    let io_err = |e: AlsaError| alsa_io(name, &e.message, e.code);
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
                    name,
                    &format!(
                        "'{}': playback runs at {} Hz but capture at {} Hz; open them as two devices",
                        pcm_name, first.rate, setup.rate
                    ),
                    -libc::EINVAL,
                ));
            }
        }
        setups.push((*dir, setup));
    }
    Ok((setups, requests))
}

/// One direction's negotiation, for the device's description.
fn describe_side(dir: Direction, setup: &HwSetup) -> String {
    format!(
        "{} {} {} Hz {} ch, {}, buffer {}, period {}{}{}",
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
        },
        if setup.silences_played {
            ", played audio silenced"
        } else {
            ""
        }
    )
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
