//! A simulated alsa-lib PCM for the driver's tests: a kernel-like hardware pointer that
//! moves with a [`VirtualClock`], ALSA's state machine (PREPARED, RUNNING, XRUN at the
//! stop threshold, SUSPENDED, DISCONNECTED) and its error codes, so the scheduling and
//! recovery logic of [`super::Driver`] runs here exactly as it would on a card — which
//! this machine does not have.

use super::driver::{Driver, Side};
use super::params::{Access, AlsaError, Direction, HwRequest, HwSetup, PcmFormat, PcmIo, Status};
use crate::clock::VirtualClock;
use crate::margin::MarginConfig;
use crate::{DeviceInfo, WaitStatus};
use quaver_dsp::{ChannelMap, Planar, PlanarBuf, PlanarMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// SND_PCM_STATE_OPEN, _SETUP, _PREPARED (pcm.h).
const OPEN: i32 = 0;
const SETUP: i32 = 1;
const PREPARED: i32 = 2;
const RUNNING: i32 = super::ffi::SND_PCM_STATE_RUNNING;
const XRUN: i32 = super::ffi::SND_PCM_STATE_XRUN;
const SUSPENDED: i32 = super::ffi::SND_PCM_STATE_SUSPENDED;
const DISCONNECTED: i32 = super::ffi::SND_PCM_STATE_DISCONNECTED;

/// The simulated hardware, shared between the PCM (owned by the driver) and the test.
#[derive(Debug)]
pub(crate) struct FakeHw {
    dir: Direction,
    /// Frames per second × 1e9 (drift included).
    rate_nano: u128,
    buffer: u64,
    pub state: i32,
    t_start: u64,
    hw_start: u64,
    /// Hardware and application positions, frames since open (never reset).
    pub hw: u64,
    pub appl: u64,
    /// `status` calls (pointer queries).
    pub queries: u64,
    /// Channel 0 of every frame queued for playback, in order (prefill included).
    pub played: Vec<f32>,
    pub xruns: u64,
    pub starts: u64,
    /// One-shot faults at virtual times.
    pub suspend_at: Option<u64>,
    pub unplug_at: Option<u64>,
    /// `resume` answers -EAGAIN this many times, then works (or -ENOSYS).
    pub resume_eagain: u32,
    pub resume_enosys: bool,
    /// Behave like alsa-lib's null PCM: the pointer follows the application at once.
    pub unpaced: bool,
    /// "close" and "open" in the order the driver called them (the first open is the
    /// rig's and not recorded).
    pub calls: Vec<&'static str>,
    /// The request of every reopen.
    pub reopened_with: Vec<HwRequest>,
    /// The next reopen fails with this errno (negative), as a card that vanished or is
    /// busy would.
    pub reopen_error: Option<i32>,
    /// The next reopen negotiates this rate instead of the requested one.
    pub reopen_rate: Option<u32>,
    /// The next reopen negotiates this format (as a snd-aloop end whose far end
    /// another program opened with it) and this ring, instead of the requested ones.
    pub reopen_format: Option<PcmFormat>,
    pub reopen_buffer: Option<usize>,
    /// `rewind` calls that took frames back.
    pub rewinds: u64,
    /// The next `start` finds the stream already in XRUN and says -EBADFD, as a linked
    /// capture does when its partner's start ran it and it overran before its own start
    /// (a starved snd-aloop guest did).
    pub xrun_before_start: bool,
}

/// What the fake negotiates for `req`: exactly what was asked (F32 unless a format is
/// forced, mmap unless turned off).
pub(crate) fn fake_setup(req: &HwRequest) -> HwSetup {
    HwSetup {
        access: if req.mmap {
            Access::Mmap
        } else {
            Access::ReadWrite
        },
        format: req.format.unwrap_or(PcmFormat::F32),
        channels: req.channels,
        rate: req.rate,
        buffer_frames: req.buffer_frames,
        period_frames: req.period_frames.unwrap_or(req.buffer_frames / 2),
        buffer_max_frames: req.buffer_frames,
        period_wakeup_disabled: req.no_period_wakeup,
        pcm_type: 0,
        formats_refused: Vec::new(),
        silences_played: false,
    }
}

impl FakeHw {
    fn sync(&mut self, now: u64) {
        if let Some(at) = self.unplug_at
            && now >= at
        {
            self.state = DISCONNECTED;
            return;
        }
        if let Some(at) = self.suspend_at
            && now >= at
            && matches!(self.state, RUNNING | PREPARED)
        {
            self.advance(at);
            self.state = SUSPENDED;
            self.suspend_at = None;
            return;
        }
        if self.state == RUNNING {
            self.advance(now);
        }
    }

    fn advance(&mut self, now: u64) {
        if self.state != RUNNING {
            return;
        }
        let target = if self.unpaced {
            match self.dir {
                Direction::Playback => self.appl,
                Direction::Capture => self.appl + self.buffer,
            }
        } else {
            let dt = now.saturating_sub(self.t_start) as u128;
            self.hw_start + (dt * self.rate_nano / 1_000_000_000_000_000_000) as u64
        };
        match self.dir {
            Direction::Playback => {
                // The stop threshold is the buffer: an empty ring is an xrun.
                if target >= self.appl && !self.unpaced {
                    self.hw = self.appl;
                    self.state = XRUN;
                    self.xruns += 1;
                } else {
                    self.hw = target.max(self.hw);
                }
            }
            Direction::Capture => {
                if target >= self.appl + self.buffer && !self.unpaced {
                    self.hw = self.appl + self.buffer;
                    self.state = XRUN;
                    self.xruns += 1;
                } else {
                    self.hw = target.max(self.hw);
                }
            }
        }
    }

    fn avail(&self) -> u64 {
        match self.dir {
            Direction::Playback => self.buffer - (self.appl - self.hw).min(self.buffer),
            Direction::Capture => self.hw.saturating_sub(self.appl).min(self.buffer),
        }
    }

    fn io_state(&self) -> Result<(), i32> {
        match self.state {
            XRUN => Err(-libc::EPIPE),
            SUSPENDED => Err(-libc::ESTRPIPE),
            DISCONNECTED => Err(-libc::ENODEV),
            PREPARED | RUNNING => Ok(()),
            _ => Err(-libc::EBADFD),
        }
    }
}

pub(crate) struct FakePcm {
    hw: Arc<Mutex<FakeHw>>,
    clock: VirtualClock,
    closed: bool,
}

impl FakePcm {
    pub(crate) fn new(
        dir: Direction,
        rate: u32,
        drift_ppm: f64,
        buffer: usize,
        clock: &VirtualClock,
    ) -> (FakePcm, Arc<Mutex<FakeHw>>) {
        let hw = Arc::new(Mutex::new(FakeHw {
            dir,
            rate_nano: (rate as f64 * (1e9 + drift_ppm * 1e3)).round() as u128,
            buffer: buffer as u64,
            state: SETUP,
            t_start: 0,
            hw_start: 0,
            hw: 0,
            appl: 0,
            queries: 0,
            played: Vec::new(),
            xruns: 0,
            starts: 0,
            suspend_at: None,
            unplug_at: None,
            resume_eagain: 0,
            resume_enosys: false,
            unpaced: false,
            calls: Vec::new(),
            reopened_with: Vec::new(),
            reopen_error: None,
            reopen_rate: None,
            reopen_format: None,
            reopen_buffer: None,
            rewinds: 0,
            xrun_before_start: false,
        }));
        (
            FakePcm {
                hw: hw.clone(),
                clock: clock.clone(),
                closed: false,
            },
            hw,
        )
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut FakeHw, u64) -> Result<T, i32>) -> Result<T, i32> {
        if self.closed {
            return Err(-libc::EBADFD);
        }
        let now = self.clock.now();
        let mut hw = self.hw.lock().unwrap();
        hw.sync(now);
        f(&mut hw, now)
    }
}

impl PcmIo for FakePcm {
    fn name(&self) -> &str {
        "fake"
    }

    fn rewindable(&mut self) -> Result<usize, i32> {
        self.with(|hw, _| {
            hw.io_state()?;
            Ok(match hw.dir {
                Direction::Playback => hw.appl.saturating_sub(hw.hw) as usize,
                Direction::Capture => 0,
            })
        })
    }

    fn rewind(&mut self, frames: usize) -> Result<usize, i32> {
        self.with(|hw, _| {
            hw.io_state()?;
            if hw.dir == Direction::Capture {
                return Ok(0);
            }
            let n = (frames as u64).min(hw.appl.saturating_sub(hw.hw)) as usize;
            hw.appl -= n as u64;
            // `played` lists what the hardware will play: the taken-back frames never will.
            let keep = hw.played.len() - n;
            hw.played.truncate(keep);
            hw.rewinds += 1;
            Ok(n)
        })
    }

    fn status(&mut self) -> Result<Status, i32> {
        self.with(|hw, now| {
            hw.queries += 1;
            Ok(Status {
                state: hw.state,
                avail: hw.avail() as usize,
                htstamp_ns: now,
            })
        })
    }

    fn prepare(&mut self) -> Result<(), i32> {
        self.with(|hw, _| {
            if hw.state == DISCONNECTED {
                return Err(-libc::ENODEV);
            }
            hw.state = PREPARED;
            match hw.dir {
                Direction::Playback => hw.appl = hw.hw,
                Direction::Capture => hw.appl = hw.hw,
            }
            Ok(())
        })
    }

    fn start(&mut self) -> Result<(), i32> {
        self.with(|hw, now| {
            if std::mem::take(&mut hw.xrun_before_start) {
                hw.state = XRUN;
                hw.xruns += 1;
            }
            if hw.state != PREPARED {
                return Err(-libc::EBADFD);
            }
            hw.state = RUNNING;
            hw.t_start = now;
            hw.hw_start = hw.hw;
            hw.starts += 1;
            Ok(())
        })
    }

    fn drop_stream(&mut self) -> Result<(), i32> {
        self.with(|hw, _| {
            if hw.state == DISCONNECTED {
                return Err(-libc::ENODEV);
            }
            hw.state = SETUP;
            Ok(())
        })
    }

    fn resume(&mut self) -> Result<(), i32> {
        self.with(|hw, _| {
            if hw.resume_eagain > 0 {
                hw.resume_eagain -= 1;
                return Err(-libc::EAGAIN);
            }
            if hw.resume_enosys {
                return Err(-libc::ENOSYS);
            }
            if hw.state == SUSPENDED {
                hw.state = PREPARED;
            }
            Ok(())
        })
    }

    fn state(&mut self) -> i32 {
        self.with(|hw, _| Ok(hw.state)).unwrap_or(OPEN)
    }

    fn write(&mut self, src: Planar<'_>, from: usize, frames: usize) -> Result<usize, i32> {
        self.with(|hw, _| {
            hw.io_state()?;
            let n = (frames as u64).min(hw.avail()) as usize;
            if src.channels() > 0 {
                hw.played.extend_from_slice(&src.channel(0)[from..from + n]);
            } else {
                hw.played.extend(std::iter::repeat_n(0.0, n));
            }
            hw.appl += n as u64;
            Ok(n)
        })
    }

    fn write_silence(&mut self, frames: usize) -> Result<usize, i32> {
        self.with(|hw, _| {
            hw.io_state()?;
            let n = (frames as u64).min(hw.avail()) as usize;
            hw.played.extend(std::iter::repeat_n(0.0, n));
            hw.appl += n as u64;
            Ok(n)
        })
    }

    fn read(&mut self, dst: &mut PlanarMut<'_>, from: usize, frames: usize) -> Result<usize, i32> {
        self.with(|hw, _| {
            hw.io_state()?;
            let n = (frames as u64).min(hw.avail()) as usize;
            for ch in 0..dst.channels() {
                for (k, x) in dst.channel_mut(ch)[from..from + n].iter_mut().enumerate() {
                    // The captured value is the hardware position it was taken at.
                    *x = (hw.appl + k as u64) as f32;
                }
            }
            hw.appl += n as u64;
            Ok(n)
        })
    }

    fn close(&mut self) -> Result<(), i32> {
        if !self.closed {
            self.closed = true;
            let mut hw = self.hw.lock().unwrap();
            hw.calls.push("close");
            // A closed stream is stopped; what it had queued is gone.
            if hw.state != DISCONNECTED {
                hw.state = OPEN;
            }
        }
        Ok(())
    }

    fn reopen(&mut self, req: &HwRequest) -> Result<HwSetup, AlsaError> {
        let _ = self.close();
        let mut hw = self.hw.lock().unwrap();
        hw.calls.push("open");
        hw.reopened_with.push(req.clone());
        if let Some(code) = hw.reopen_error.take() {
            return Err(AlsaError {
                code,
                message: format!("snd_pcm_open('fake'): errno {}", -code),
            });
        }
        if hw.state == DISCONNECTED {
            return Err(AlsaError {
                code: -libc::ENOENT,
                message: "snd_pcm_open('fake'): No such file or directory".into(),
            });
        }
        let mut setup = fake_setup(req);
        if let Some(rate) = hw.reopen_rate.take() {
            setup.rate = rate;
        }
        if let Some(format) = hw.reopen_format.take() {
            setup.format = format;
        }
        if let Some(buffer) = hw.reopen_buffer.take() {
            setup.buffer_frames = buffer;
            hw.buffer = buffer as u64;
        }
        hw.state = SETUP;
        self.closed = false;
        Ok(setup)
    }

    fn link(&mut self, _other: &mut Self) -> bool {
        false
    }
}

/// A device on simulated PCMs, the way `AlsaDevice::open` builds one.
pub(crate) struct Rig {
    pub dev: Driver<FakePcm>,
    pub clock: VirtualClock,
    pub play: Option<Arc<Mutex<FakeHw>>>,
    pub cap: Option<Arc<Mutex<FakeHw>>>,
    out: PlanarBuf,
    inb: PlanarBuf,
    /// Frames written by the "engine" so far (the ramp continues across cycles).
    pub written: u64,
    /// Channel 0 of everything read.
    pub captured: Vec<f32>,
    pub statuses: Vec<WaitStatus>,
}

pub(crate) struct RigConfig {
    pub rate: u32,
    pub buffer: usize,
    pub drift_ppm: f64,
    pub playback: bool,
    pub capture: bool,
    pub margin: MarginConfig,
}

impl Default for RigConfig {
    fn default() -> Self {
        RigConfig {
            rate: 48_000,
            buffer: 8192,
            drift_ppm: 0.0,
            playback: true,
            capture: false,
            margin: MarginConfig::for_rate(48_000),
        }
    }
}

impl Rig {
    pub(crate) fn new(cfg: RigConfig) -> Rig {
        let clock = VirtualClock::new();
        // Start at an arbitrary non-zero time, as CLOCK_MONOTONIC does.
        clock.advance(Duration::from_secs(1234));
        let mut play = None;
        let mut cap = None;
        let mut sides = (None, None);
        let request = HwRequest {
            format: None,
            mmap: true,
            channels: 2,
            rate: cfg.rate,
            buffer_frames: cfg.buffer,
            period_frames: Some(cfg.buffer / 2),
            no_period_wakeup: true,
        };
        let side = |p| Side::new(p, request.clone(), fake_setup(&request));
        if cfg.playback {
            let (p, h) = FakePcm::new(
                Direction::Playback,
                cfg.rate,
                cfg.drift_ppm,
                cfg.buffer,
                &clock,
            );
            sides.0 = Some(side(p));
            play = Some(h);
        }
        if cfg.capture {
            let (p, h) = FakePcm::new(
                Direction::Capture,
                cfg.rate,
                cfg.drift_ppm,
                cfg.buffer,
                &clock,
            );
            sides.1 = Some(side(p));
            cap = Some(h);
        }
        let info = DeviceInfo {
            name: "fake".into(),
            description: "simulated ALSA PCM".into(),
            rate: cfg.rate,
            playback: cfg.playback.then(ChannelMap::stereo),
            capture: cfg.capture.then(ChannelMap::stereo),
            freewheel: false,
        };
        let dev = Driver::new(
            info,
            sides.0,
            sides.1,
            cfg.margin,
            false,
            Box::new(clock.clone()),
            Box::new(clock.clone()),
        );
        Rig {
            dev,
            clock,
            play,
            cap,
            out: PlanarBuf::new(2, cfg.buffer),
            inb: PlanarBuf::new(2, cfg.buffer),
            written: 0,
            captured: Vec::new(),
            statuses: Vec::new(),
        }
    }

    /// One engine cycle: wait, read, "process" for `busy`, write a ramp (value = the
    /// index of the frame in the engine's output stream).
    pub(crate) fn cycle(&mut self, q: usize, busy: Duration) -> WaitStatus {
        let st = self.dev.wait(q, None).unwrap();
        self.statuses.push(st);
        self.dev.read(&mut self.inb.view_mut(q)).unwrap();
        if self.cap.is_some() {
            self.captured.extend_from_slice(&self.inb.channel(0)[..q]);
        }
        self.clock.advance(busy);
        for (k, x) in self.out.channel_mut(0)[..q].iter_mut().enumerate() {
            *x = (self.written + k as u64 + 1) as f32;
        }
        self.dev.write(self.out.view(q)).unwrap();
        self.written += q as u64;
        st
    }

    pub(crate) fn run(&mut self, q: usize, secs: f64, busy: Duration) {
        let end = self.clock.now() + (secs * 1e9) as u64;
        while self.clock.now() < end {
            self.cycle(q, busy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceError;

    const BUSY: Duration = Duration::from_micros(300);

    fn xruns(rig: &Rig) -> usize {
        rig.statuses
            .iter()
            .filter(|s| **s == WaitStatus::Xrun)
            .count()
    }

    #[test]
    fn one_pointer_query_per_wakeup_and_every_frame_played_in_order() {
        let mut rig = Rig::new(RigConfig::default());
        rig.dev.start(256).unwrap();
        rig.run(256, 60.0, BUSY);
        let c = rig.dev.counters();
        let hw = rig.play.as_ref().unwrap().lock().unwrap();
        assert_eq!(xruns(&rig), 0);
        assert_eq!((c.underruns, hw.xruns), (0, 0));
        assert!(c.wakeups >= 11_000, "{c:?}");
        // Exactly one query per wakeup: the reading is predicted from, never re-read.
        assert_eq!(c.pointer_queries, hw.queries);
        assert!(c.pointer_queries <= c.wakeups, "{c:?}");
        // The device kept quantum + margin queued: silence prefill, then the ramp.
        let prefill = 256 + 192;
        assert!(hw.played[..prefill].iter().all(|&x| x == 0.0));
        for (i, &x) in hw.played[prefill..].iter().enumerate() {
            assert_eq!(x, (i + 1) as f32, "frame {i}");
        }
        // Headroom when the driver wakes is the margin (192 frames = 4 ms).
        assert_eq!(c.margin_frames, 192);
        assert_eq!(rig.dev.playback_delay(), 256 + 192 - 14); // 300 µs of processing
    }

    /// Follower cycles: the clock moves a quantum at a time (another device paces
    /// them); `follow`, then read and write, as the engine drives a follower. Returns the
    /// last levels and how many calls restarted the streams.
    fn follow_run(rig: &mut Rig, q: usize, cycles: usize) -> (crate::FollowerLevels, usize) {
        let mut last = crate::FollowerLevels::default();
        let mut restarts = 0;
        for _ in 0..cycles {
            rig.clock
                .advance(Duration::from_nanos(q as u64 * 1_000_000_000 / 48_000));
            last = rig
                .dev
                .follow(q)
                .unwrap()
                .expect("a running PCM has levels");
            restarts += last.restarted as usize;
            rig.dev.read(&mut rig.inb.view_mut(q)).unwrap();
            rig.dev.write(rig.out.view(q)).unwrap();
        }
        (last, restarts)
    }

    #[test]
    fn a_follower_reads_its_levels_once_a_cycle_and_recovers_from_an_xrun() {
        let q = 256;
        let mut rig = Rig::new(RigConfig {
            capture: true,
            ..RigConfig::default()
        });
        rig.dev.start(q).unwrap();
        let (levels, restarts) = follow_run(&mut rig, q, 200);
        assert_eq!(restarts, 0);
        let queued = levels.play_queued.expect("playback");
        assert!(
            (1..=q + rig.dev.margin.current()).contains(&queued),
            "{levels:?}"
        );
        assert!(levels.cap_avail.is_some_and(|a| a <= 2 * q), "{levels:?}");
        // One status per PCM per cycle: the follower's only pointer reads.
        assert_eq!(rig.dev.counters().pointer_queries, 2 * 200);
        // A stall: the playback runs dry and the capture overflows.
        rig.clock.advance(Duration::from_millis(300));
        let (_, restarts) = follow_run(&mut rig, q, 1);
        assert_eq!(restarts, 1, "the xrun was not recovered");
        let underruns = rig.dev.counters().underruns;
        assert!(underruns >= 1);
        let (levels, restarts) = follow_run(&mut rig, q, 200);
        assert_eq!(
            restarts, 0,
            "it kept xrunning after the restart: {levels:?}"
        );
        assert_eq!(rig.dev.counters().underruns, underruns);
        assert!(levels.play_queued.is_some_and(|l| l > 0), "{levels:?}");
        // The quantum grows to 1024: the growth is queued as silence, once.
        let before = rig.dev.follow(q).unwrap().unwrap().play_queued.unwrap();
        let grown = rig.dev.follow(1024).unwrap().unwrap().play_queued.unwrap();
        assert_eq!(grown, before + 1024 - q);
        let again = rig.dev.follow(1024).unwrap().unwrap().play_queued.unwrap();
        assert_eq!(again, grown, "the growth was queued twice");
        let (_, restarts) = follow_run(&mut rig, 1024, 50);
        assert_eq!(restarts, 0);
        assert_eq!(rig.dev.counters().underruns, underruns);
    }

    #[test]
    fn drift_is_learned_by_the_dll_and_wakeups_stay_single_query() {
        for ppm in [-800.0, 250.0] {
            let mut rig = Rig::new(RigConfig {
                drift_ppm: ppm,
                ..RigConfig::default()
            });
            rig.run(128, 60.0, BUSY);
            let c = rig.dev.counters();
            assert_eq!(xruns(&rig), 0, "{ppm}");
            let per = c.pointer_queries as f64 / c.wakeups as f64;
            assert!(per <= 1.005, "{ppm} ppm: {per} queries per wakeup");
            let est = rig.dev.dll.drift_ppm();
            assert!((est - ppm).abs() < 2.0, "{ppm} ppm estimated as {est}");
        }
    }

    #[test]
    fn an_xrun_between_a_restarts_prepare_and_start_is_recovered_not_fatal() {
        let q = 256;
        let mut rig = Rig::new(RigConfig {
            capture: true,
            ..RigConfig::default()
        });
        rig.dev.start(q).unwrap();
        follow_run(&mut rig, q, 20);
        // A stall, and the capture overruns again while the restart starts it.
        rig.clock.advance(Duration::from_millis(300));
        rig.cap.as_ref().unwrap().lock().unwrap().xrun_before_start = true;
        // The cycle whose restart met the xrun has no levels; the next one recovers.
        let mut outcomes = Vec::new();
        for _ in 0..2 {
            rig.clock
                .advance(Duration::from_nanos(q as u64 * 1_000_000_000 / 48_000));
            outcomes.push(rig.dev.follow(q).unwrap().map(|l| l.restarted));
            rig.dev.read(&mut rig.inb.view_mut(q)).unwrap();
            rig.dev.write(rig.out.view(q)).unwrap();
        }
        assert_eq!(outcomes, [None, Some(true)]);
        let (levels, restarts) = follow_run(&mut rig, q, 200);
        assert_eq!(restarts, 0, "still xrunning: {levels:?}");
        assert_eq!(rig.cap.as_ref().unwrap().lock().unwrap().state, RUNNING);
        // The same for a driving device: its wait recovers again at once.
        let mut rig = Rig::new(RigConfig {
            capture: true,
            ..RigConfig::default()
        });
        rig.run(q, 0.5, BUSY);
        rig.clock.advance(Duration::from_millis(300));
        rig.cap.as_ref().unwrap().lock().unwrap().xrun_before_start = true;
        rig.run(q, 2.0, BUSY);
        assert_eq!(xruns(&rig), 1);
        assert_eq!(rig.cap.as_ref().unwrap().lock().unwrap().state, RUNNING);
    }

    #[test]
    fn duplex_reads_every_captured_frame_once_and_in_order() {
        let mut rig = Rig::new(RigConfig {
            capture: true,
            drift_ppm: 40.0,
            ..RigConfig::default()
        });
        rig.run(256, 10.0, BUSY);
        let c = rig.dev.counters();
        assert_eq!(xruns(&rig), 0);
        // One query per PCM per wakeup.
        assert!(c.pointer_queries <= 2 * c.wakeups, "{c:?}");
        for (i, &x) in rig.captured.iter().enumerate() {
            assert_eq!(x, i as f32, "captured frame {i}");
        }
        assert!(rig.dev.capture_delay() < 256);
    }

    #[test]
    fn capture_only_wakes_when_a_quantum_is_ready() {
        let mut rig = Rig::new(RigConfig {
            playback: false,
            capture: true,
            ..RigConfig::default()
        });
        let t0 = rig.clock.now();
        rig.run(480, 1.0, BUSY);
        let c = rig.dev.counters();
        assert_eq!(c.wakeups, 100);
        assert_eq!(c.pointer_queries, 100);
        // 100 cycles of 10 ms, each woken 500 ppm late: 1 s and 0.5 ms.
        let elapsed = rig.clock.now() - t0;
        assert!(
            (1_000_000_000..1_001_000_000).contains(&elapsed),
            "{elapsed}"
        );
        assert_eq!(rig.captured.len(), 48_000);
        assert!(rig.captured.iter().enumerate().all(|(i, &x)| x == i as f32));
    }

    /// An engine that takes `spike` to process one cycle every three seconds.
    fn spikes(margin: MarginConfig, spike: Duration, secs: u64) -> Rig {
        let mut rig = Rig::new(RigConfig {
            margin,
            ..RigConfig::default()
        });
        let q = 256;
        let cycles_per_3s = 3 * 48_000 / q as u64;
        for cycle in 0..secs * 48_000 / q as u64 {
            let busy = if cycle % cycles_per_3s == cycles_per_3s / 2 {
                spike
            } else {
                BUSY
            };
            rig.cycle(q, busy);
        }
        rig
    }

    #[test]
    fn the_adaptive_margin_stops_repeat_underruns_a_fixed_one_has() {
        // 12 ms spikes against a 4 ms minimum margin, every 3 s for a minute.
        let fixed = spikes(
            MarginConfig::fixed(48_000, 192),
            Duration::from_millis(12),
            60,
        );
        let adaptive = spikes(
            MarginConfig::for_rate(48_000),
            Duration::from_millis(12),
            60,
        );
        let (f, a) = (fixed.dev.counters(), adaptive.dev.counters());
        assert_eq!(f.underruns, 20, "fixed: {f:?}");
        assert_eq!(a.underruns, 1, "adaptive: {a:?}");
        assert_eq!(xruns(&fixed), 20);
        assert_eq!(xruns(&adaptive), 1);
        // It settled above the spike, not at the maximum.
        assert!(a.margin_frames > 12 * 48 && a.margin_frames < 1920, "{a:?}");
        // One query per wakeup even through the underrun.
        assert!(a.pointer_queries <= a.wakeups);
    }

    #[test]
    fn the_margin_returns_to_its_minimum_after_the_load_stops() {
        let mut rig = spikes(
            MarginConfig::for_rate(48_000),
            Duration::from_millis(12),
            30,
        );
        assert!(rig.dev.counters().margin_frames > 192);
        rig.run(256, 60.0, BUSY);
        let c = rig.dev.counters();
        assert_eq!(c.margin_frames, 192, "{c:?}");
        assert_eq!(c.underruns, 1);
        assert!(c.margin_changes > 10);
    }

    #[test]
    fn suspend_is_resumed_after_eagain_and_the_stream_restarts() {
        let mut rig = Rig::new(RigConfig::default());
        rig.run(256, 1.0, BUSY);
        {
            let mut hw = rig.play.as_ref().unwrap().lock().unwrap();
            hw.suspend_at = Some(rig.clock.now() + 50_000_000);
            hw.resume_eagain = 2;
        }
        rig.run(256, 1.0, BUSY);
        let hw = rig.play.as_ref().unwrap().lock().unwrap();
        // Found suspended, two "not yet"s (each paced one quantum), then a restart.
        assert_eq!(xruns(&rig), 3, "{:?}", rig.dev.counters());
        assert_eq!(hw.state, RUNNING);
        assert_eq!(hw.starts, 2);
        assert_eq!(rig.dev.counters().underruns, 0);
    }

    #[test]
    fn suspend_without_resume_support_prepares() {
        let mut rig = Rig::new(RigConfig::default());
        rig.run(256, 0.5, BUSY);
        {
            let mut hw = rig.play.as_ref().unwrap().lock().unwrap();
            hw.suspend_at = Some(rig.clock.now() + 1);
            hw.resume_enosys = true;
        }
        rig.run(256, 0.5, BUSY);
        assert_eq!(xruns(&rig), 1);
        assert_eq!(rig.play.as_ref().unwrap().lock().unwrap().state, RUNNING);
    }

    #[test]
    fn an_unplugged_card_is_gone() {
        let mut rig = Rig::new(RigConfig::default());
        rig.run(256, 0.2, BUSY);
        let at = rig.clock.now() + 20_000_000;
        rig.play.as_ref().unwrap().lock().unwrap().unplug_at = Some(at);
        let mut err = None;
        for _ in 0..100 {
            match rig.dev.wait(256, None) {
                Ok(_) => {
                    let out = PlanarBuf::new(2, 256);
                    if let Err(e) = rig.dev.write(out.view(256)) {
                        err = Some(e);
                        break;
                    }
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert!(
            matches!(err, Some(DeviceError::Gone(ref n)) if n == "fake"),
            "{err:?}"
        );
    }

    #[test]
    fn an_unpaced_pcm_is_noticed_and_paced_on_the_clock() {
        let mut rig = Rig::new(RigConfig::default());
        rig.play.as_ref().unwrap().lock().unwrap().unpaced = true;
        let t0 = rig.clock.now();
        for _ in 0..100 {
            rig.cycle(480, Duration::ZERO);
        }
        assert!(rig.dev.paced_by_clock);
        // Without the switch the loop would spin at no time cost; paced, 100 cycles of
        // 10 ms take a second (give or take the few cycles before the switch).
        let elapsed = rig.clock.now() - t0;
        assert!(
            (990_000_000..=1_010_000_000).contains(&elapsed),
            "{elapsed}"
        );
        assert!(rig.dev.counters().pointer_queries <= UNPACED + 1);
    }
    const UNPACED: u64 = super::super::driver::UNPACED_READINGS as u64;

    #[test]
    fn quantum_changes_keep_the_margin_and_play_everything() {
        let mut rig = Rig::new(RigConfig::default());
        for q in [256, 1024, 64, 512, 128] {
            for _ in 0..200 {
                rig.cycle(q, BUSY);
            }
        }
        let c = rig.dev.counters();
        assert_eq!(xruns(&rig), 0, "{c:?}");
        assert!(c.pointer_queries <= c.wakeups);
        let hw = rig.play.as_ref().unwrap().lock().unwrap();
        let data: Vec<f32> = hw.played.iter().copied().filter(|&x| x != 0.0).collect();
        assert_eq!(data.len() as u64, rig.written);
        assert!(data.iter().enumerate().all(|(i, &x)| x == (i + 1) as f32));
        // A quantum the ring cannot hold with the margin is refused.
        assert!(rig.dev.wait(8192, None).is_err());
    }

    #[test]
    fn suspend_and_start_again_restart_cleanly() {
        let mut rig = Rig::new(RigConfig::default());
        rig.run(256, 0.5, BUSY);
        rig.dev.suspend();
        rig.clock.advance(Duration::from_secs(5));
        rig.dev.start(256).unwrap();
        rig.run(256, 0.5, BUSY);
        assert_eq!(xruns(&rig), 0);
        assert_eq!(rig.play.as_ref().unwrap().lock().unwrap().starts, 2);
        rig.dev.close().unwrap();
        assert!(rig.dev.start(256).is_err());
    }

    #[test]
    fn an_idle_close_closes_the_pcms_and_start_reopens_them_with_the_same_request() {
        let mut rig = Rig::new(RigConfig {
            capture: true,
            ..RigConfig::default()
        });
        rig.run(256, 0.5, BUSY);
        let written_before = rig.written;
        rig.dev.suspend();
        assert!(rig.dev.close_idle());
        assert!(
            !rig.dev.close_idle(),
            "a closed device has nothing left to close"
        );
        let c = rig.dev.counters();
        assert_eq!((c.closed, c.idle_closes, c.reopens), (true, 1, 0));
        rig.clock.advance(Duration::from_secs(5));
        rig.dev.start(256).unwrap();
        rig.run(256, 0.5, BUSY);
        let c = rig.dev.counters();
        assert_eq!((c.closed, c.idle_closes, c.reopens), (false, 1, 1));
        assert_eq!(xruns(&rig), 0, "{c:?}");
        for (side, hw) in [
            (rig.dev.play.as_ref(), rig.play.as_ref()),
            (rig.dev.cap.as_ref(), rig.cap.as_ref()),
        ] {
            let (side, hw) = (side.unwrap(), hw.unwrap().lock().unwrap());
            assert_eq!(hw.calls, ["close", "open"]);
            assert_eq!(hw.reopened_with, std::slice::from_ref(&side.request));
            assert_eq!(hw.starts, 2);
            assert_eq!(hw.state, RUNNING);
        }
        // Everything written after the reopen is played, in order, after the prefill.
        let hw = rig.play.as_ref().unwrap().lock().unwrap();
        let after: Vec<f32> = hw.played.iter().copied().filter(|&x| x != 0.0).collect();
        assert_eq!(after.len() as u64, rig.written);
        assert!(rig.written > written_before);
        assert!(after.iter().enumerate().all(|(i, &x)| x == (i + 1) as f32));
        drop(hw);
        // Shutdown after a reopen closes once more.
        rig.dev.close().unwrap();
        assert_eq!(
            rig.play.as_ref().unwrap().lock().unwrap().calls,
            ["close", "open", "close"]
        );
    }

    #[test]
    fn a_reopen_that_fails_or_negotiates_another_stream_is_an_error_not_a_panic() {
        let closed_rig = || {
            let mut rig = Rig::new(RigConfig::default());
            rig.run(256, 0.2, BUSY);
            rig.dev.suspend();
            assert!(rig.dev.close_idle());
            rig
        };
        let mut rig = closed_rig();
        rig.play.as_ref().unwrap().lock().unwrap().reopen_error = Some(-libc::EBUSY);
        let e = rig.dev.start(256).unwrap_err().to_string();
        assert!(
            e.starts_with("device fake: reopening after the idle close: snd_pcm_open"),
            "{e}"
        );
        // `wait` starts a stopped device, so it reopens (and fails) the same way.
        let mut rig = closed_rig();
        rig.play.as_ref().unwrap().lock().unwrap().reopen_rate = Some(44_100);
        let e = rig.dev.wait(256, None).unwrap_err().to_string();
        assert_eq!(
            e,
            "device fake: reopening 'fake' after the idle close: playback now negotiates \
             FLOAT_LE 44100 Hz 2 ch, buffer 8192, mmap; the graph was built for 48000 Hz \
             2 ch"
        );
        assert!(rig.dev.counters().closed);
        // A card unplugged while closed cannot be reopened either.
        let mut rig = closed_rig();
        rig.play.as_ref().unwrap().lock().unwrap().state = DISCONNECTED;
        let e = rig.dev.start(256).unwrap_err().to_string();
        assert!(e.contains("No such file or directory"), "{e}");
    }

    /// A reopen after the idle close that negotiates another format (a snd-aloop end
    /// whose far end someone opened at S16 meanwhile) or another ring plays on: the PCM
    /// converts, the driver takes the new ring. Only the rate and channels, which the
    /// graph was built for, must stay.
    #[test]
    fn a_reopen_with_another_format_or_ring_plays_on() {
        let mut rig = Rig::new(RigConfig::default());
        rig.run(256, 0.2, BUSY);
        rig.dev.suspend();
        assert!(rig.dev.close_idle());
        {
            let mut hw = rig.play.as_ref().unwrap().lock().unwrap();
            hw.reopen_format = Some(PcmFormat::S16);
            hw.reopen_buffer = Some(4096);
        }
        rig.dev.start(256).unwrap();
        let side = rig.dev.play.as_ref().unwrap();
        assert_eq!((side.setup.format, side.buffer), (PcmFormat::S16, 4096));
        let written_before = rig.written;
        rig.run(256, 0.5, BUSY);
        assert_eq!(xruns(&rig), 0, "{:?}", rig.dev.counters());
        assert!(rig.written > written_before + 256 * 50);
        assert_eq!(rig.dev.counters().reopens, 1);
        // A ring too small for the quantum is refused, not overrun.
        rig.dev.suspend();
        assert!(rig.dev.close_idle());
        rig.play.as_ref().unwrap().lock().unwrap().reopen_buffer = Some(256);
        let e = rig.dev.start(256).unwrap_err().to_string();
        assert!(e.contains("quantum must be at least 1 and at most"), "{e}");
    }

    #[test]
    fn late_wakeups_are_reported() {
        let mut rig = Rig::new(RigConfig::default());
        rig.run(256, 0.1, BUSY);
        assert_eq!(rig.dev.wakeup_lateness_ns(), Some(0));
    }

    #[test]
    fn filling_ahead_wakes_once_per_refill_with_one_query_each() {
        let mut rig = Rig::new(RigConfig {
            buffer: 96_000,
            ..RigConfig::default()
        });
        let fill = rig.dev.max_fill();
        assert_eq!(fill, 96_000 - MarginConfig::for_rate(48_000).max_frames);
        rig.dev.set_fill(fill);
        rig.run(8192, 2.0, BUSY);
        let before = rig.dev.counters();
        rig.run(8192, 20.0, BUSY);
        let c = rig.dev.counters();
        let wakeups = c.wakeups - before.wakeups;
        // One wakeup per refill from the watermark to within a quantum of the fill.
        let per_refill = (fill - 8192 - 192) as f64 / 48_000.0;
        assert!(
            wakeups as f64 <= (20.0 / per_refill).ceil() + 1.0,
            "{wakeups} wakeups in 20 s"
        );
        let queries = c.pointer_queries - before.pointer_queries;
        assert!(queries <= wakeups, "{queries} queries, {wakeups} wakeups");
        assert_eq!(xruns(&rig), 0);
        // Without the fill the same run wakes once per quantum.
        rig.dev.set_fill(0);
        let before = rig.dev.counters();
        rig.run(8192, 20.0, BUSY);
        let plain = rig.dev.counters().wakeups - before.wakeups;
        assert!(plain > 5 * wakeups, "{plain} vs {wakeups} wakeups");
    }

    #[test]
    fn a_rewind_takes_back_what_is_queued_beyond_the_watermark() {
        let mut rig = Rig::new(RigConfig {
            buffer: 96_000,
            ..RigConfig::default()
        });
        let fill = rig.dev.max_fill();
        rig.dev.set_fill(fill);
        rig.run(8192, 1.0, BUSY);
        let hw = rig.play.clone().unwrap();
        // Finish the refill in progress (on virtual time, time only passes in sleeps,
        // so `run` stops right after a wakeup), then sleep a little: mid-sleep, well over
        // a second is queued.
        for _ in 0..100 {
            let queued = {
                let h = hw.lock().unwrap();
                h.appl - h.hw
            };
            if queued + 8192 > fill as u64 {
                break;
            }
            rig.cycle(8192, BUSY);
        }
        rig.clock.advance(Duration::from_millis(300));
        let queued_before = {
            let h = hw.lock().unwrap();
            h.appl - h.hw
        };
        assert!(queued_before > 48_000, "{queued_before}");
        let played_before = hw.lock().unwrap().played.len();
        let n = rig.dev.rewind(0);
        let (queued, played) = {
            let h = hw.lock().unwrap();
            (h.appl - h.hw, h.played.len())
        };
        let w = rig.dev.margin.current() as u64;
        assert!(n > 0);
        assert_eq!(
            played,
            played_before - n,
            "the taken-back frames never play"
        );
        assert!(
            queued >= w && queued <= w + 64,
            "{queued} left, watermark {w}"
        );
        assert_eq!(rig.dev.counters().rewinds, 1);
        // The engine writes again at once and nothing underruns.
        rig.run(8192, 3.0, BUSY);
        assert_eq!(xruns(&rig), 0);
    }
}
