//! The simulated card itself: its hardware model (`sync`: the DMA pointer as a pure
//! function of time, loopback, xruns) and its driver (`wait`); see [`crate::sim`].

use super::config::{DacProbe, Fault, MAX_DRIFT_PPM, SimConfig, theoretical_round_trip_frames};
use crate::clock::{RealClock, SimClock};
use crate::margin::{Margin, MarginConfig};
use crate::{
    Device, DeviceCounters, DeviceError, DeviceInfo, ErrName, FollowerLevels, WaitStatus,
    check_format,
};
use quaver_dsp::{Planar, PlanarMut};
use rustix::fd::BorrowedFd;
use std::io;

/// A simulated sound card with a playback (sink) and a capture (source) side on one clock.
pub struct SimCard {
    info: DeviceInfo,
    cfg: SimConfig,
    clock: Box<dyn SimClock>,
    counters: DeviceCounters,
    err_name: ErrName,
    channels: usize,
    /// Ring size in frames (as u64 for position arithmetic).
    size: u64,
    /// Playback and capture rings, planar: channel `c`, slot `s` at `c * size + s`.
    play: Vec<f32>,
    cap: Vec<f32>,

    // Hardware model.
    /// Hardware clock in units of 1e-9 frames per second (exact integer rate with drift).
    hw_rate_nano: u128,
    /// When (clock ns) the configured drift step takes effect: set at the first start,
    /// cleared once applied.
    step_at: Option<u64>,
    /// The step's time was set (at the first start).
    step_armed: bool,
    running: bool,
    t_base: u64,
    hw_base: u64,
    /// Hardware position as of the last model update, and the time of that update.
    hw: u64,
    t_hw: u64,
    /// Application positions: next frame `write` fills, next frame `read` returns.
    play_appl: u64,
    cap_appl: u64,
    /// An underrun or overrun happened and the streams have not been restarted yet.
    xrun_pending: bool,
    unplugged: bool,
    /// Closed after an idle suspend: a real card's handle would be released; the next
    /// `start` "reopens" it (counted in the counters).
    closed: bool,

    // Driver (scheduler) state.
    cycle: u64,
    fired: Vec<bool>,
    /// Estimated nanoseconds per hardware frame, from the driver's own pointer readings.
    ns_per_frame: f64,
    est_t: u64,
    est_hw: u64,
    /// The watermark policy (fixed at `period_frames` unless `margin_max_frames` is set).
    margin: Margin,
    /// Fill level the engine asked for ([`Device::set_fill`]); 0 = one quantum per wakeup.
    fill: usize,
    /// Woken at the watermark (or rewound) and still topping the ring up to `fill`.
    refilling: bool,
    /// The largest quantum [`Device::follow`] saw since the last (re)start (0: none).
    follow_quantum: usize,
    probe: Option<DacProbe>,
}

/// A clock of `rate · (1 + ppm/1e6)` frames per second in units of 1e-9 frames.
fn rate_nano(rate: u32, ppm: f64) -> u128 {
    (rate as f64 * (1e9 + ppm * 1e3)).round() as u128
}

/// The driver wakes this much later than its estimate says the watermark is reached, so
/// that estimation error does not make it wake early and read the pointer twice.
const WAKE_MARGIN: f64 = 500e-6;

impl SimCard {
    /// A simulated card paced by the real monotonic clock. *control*.
    pub fn new(cfg: SimConfig) -> Result<Self, DeviceError> {
        Self::with_clock(cfg, Box::new(RealClock))
    }

    /// A simulated card paced by `clock`; with a [`crate::VirtualClock`] runs are deterministic
    /// and take no wall time. *control*.
    pub fn with_clock(cfg: SimConfig, clock: Box<dyn SimClock>) -> Result<Self, DeviceError> {
        let name = "sim".to_string();
        check_format(&name, cfg.rate, &cfg.channels)?;
        let bad = |reason: String| DeviceError::BadSpec {
            spec: name.clone(),
            reason,
        };
        if cfg.period_frames == 0 || cfg.period_frames >= cfg.buffer_frames {
            return Err(bad(format!(
                "period {} must be at least 1 and smaller than the buffer ({})",
                cfg.period_frames, cfg.buffer_frames
            )));
        }
        if let Some(max) = cfg.margin_max_frames
            && (max < cfg.period_frames || max >= cfg.buffer_frames)
        {
            return Err(bad(format!(
                "margin_max {max} must be at least the period ({}) and smaller than the buffer ({})",
                cfg.period_frames, cfg.buffer_frames
            )));
        }
        if cfg.buffer_frames > 1 << 24 {
            return Err(bad(format!("buffer {} is too large", cfg.buffer_frames)));
        }
        let step_ppm = cfg.drift_step.map(|s| s.ppm);
        for ppm in std::iter::once(cfg.drift_ppm).chain(step_ppm) {
            if !ppm.is_finite() || ppm.abs() > MAX_DRIFT_PPM {
                return Err(bad(format!("drift {ppm} ppm is outside ±{MAX_DRIFT_PPM}")));
            }
        }
        let channels = cfg.channels.len();
        let size = cfg.buffer_frames;
        let info = DeviceInfo {
            description: format!(
                "Simulated card ({} Hz, {} ch, buffer {}, period {}, {}, {:+} ppm)",
                cfg.rate,
                channels,
                cfg.buffer_frames,
                cfg.period_frames,
                if cfg.loopback {
                    "loopback"
                } else {
                    "no loopback"
                },
                cfg.drift_ppm
            ),
            rate: cfg.rate,
            playback: Some(cfg.channels.clone()),
            capture: Some(cfg.channels.clone()),
            freewheel: false,
            name,
        };
        let hw_rate_nano = rate_nano(cfg.rate, cfg.drift_ppm);
        let margin = Margin::new(MarginConfig {
            rate: cfg.rate,
            min_frames: cfg.period_frames,
            max_frames: cfg.margin_max_frames.unwrap_or(cfg.period_frames),
        });
        Ok(SimCard {
            err_name: ErrName::new(&info.name),
            info,
            clock,
            counters: DeviceCounters::default(),
            channels,
            size: size as u64,
            play: vec![0.0; channels * size],
            cap: vec![0.0; channels * size],
            hw_rate_nano,
            step_at: None,
            step_armed: false,
            running: false,
            t_base: 0,
            hw_base: 0,
            hw: 0,
            t_hw: 0,
            play_appl: 0,
            cap_appl: 0,
            xrun_pending: false,
            unplugged: false,
            closed: false,
            cycle: 0,
            fired: vec![false; cfg.faults.len()],
            ns_per_frame: 1e9 / cfg.rate as f64,
            est_t: 0,
            est_hw: 0,
            margin,
            fill: 0,
            refilling: false,
            follow_quantum: 0,
            probe: None,
            cfg,
        })
    }

    /// Renames the device (its graph node name). *control*.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.info.name = name.into();
        self.err_name = ErrName::new(&self.info.name);
        self
    }

    /// Watches the DAC with `probe` (tests: when does a sound written now get played?).
    pub fn with_dac_probe(mut self, probe: DacProbe) -> Self {
        self.probe = Some(probe);
        self
    }

    /// The configuration the card was built from.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Round-trip frames through loopback at `quantum`; see [`theoretical_round_trip_frames`].
    pub fn theoretical_round_trip_frames(&self, quantum: usize) -> usize {
        theoretical_round_trip_frames(&self.cfg, quantum)
    }

    /// The watermark policy's state.
    pub fn margin(&self) -> &Margin {
        &self.margin
    }

    /// The watermark in effect for `quantum`: the margin, limited by the ring.
    fn watermark(&self, quantum: usize) -> usize {
        self.margin
            .current()
            .min(self.cfg.buffer_frames.saturating_sub(quantum))
    }

    fn note_xrun(&mut self, t: u64) {
        if self.margin.on_underrun(t).is_some() {
            self.counters.margin_changes = self.margin.changes();
        }
    }

    /// Frames the virtual hardware has played since the card was opened, as of its last
    /// update (for tests and diagnostics).
    pub fn hw_position(&self) -> u64 {
        self.hw
    }

    fn gone(&mut self) -> DeviceError {
        DeviceError::Gone(self.err_name.take(&self.info.name))
    }

    fn check_quantum(&mut self, quantum: usize) -> Result<(), DeviceError> {
        if quantum == 0 || quantum + self.cfg.period_frames > self.cfg.buffer_frames {
            // Only an engine bug gets here, so this error path may allocate.
            return Err(DeviceError::Io {
                device: self.err_name.take(&self.info.name),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "quantum must be at least 1 and at most buffer - period frames",
                ),
            });
        }
        Ok(())
    }

    // ---- hardware model ----

    fn hw_at(&self, t: u64) -> u64 {
        if !self.running {
            return self.hw;
        }
        let dt = t.saturating_sub(self.t_base) as u128;
        self.hw_base + (dt * self.hw_rate_nano / 1_000_000_000_000_000_000) as u64
    }

    /// Brings the hardware model up to the current time: plays, loops back and detects
    /// xruns. Not a driver pointer query.
    fn sync(&mut self) {
        let t = self.clock.now_ns();
        self.step_drift(t);
        let new = self.hw_at(t);
        self.t_hw = t;
        if new <= self.hw {
            return;
        }
        if self.cfg.loopback {
            self.loop_back(self.hw, new);
        }
        if self.probe.is_some() {
            self.watch_dac(self.hw, new);
        }
        if self.fill > 0 {
            // Filling ahead, the engine reads capture only as far as it has arrived, and
            // not every period: what it did not take is dropped, not an overrun.
            self.cap_appl = self.cap_appl.max(new.saturating_sub(self.size));
        }
        if !self.xrun_pending {
            if new > self.play_appl {
                self.counters.underruns += 1;
                self.xrun_pending = true;
            }
            if new - self.cap_appl.min(new) > self.size {
                self.counters.overruns += 1;
                self.xrun_pending = true;
            }
            if self.xrun_pending {
                self.note_xrun(t);
            }
        }
        self.hw = new;
    }

    /// Applies the drift step once its time has come: the position at that moment at the
    /// old rate becomes the base of the new one, so the pointer never jumps.
    fn step_drift(&mut self, t: u64) {
        let (Some(at), Some(step)) = (self.step_at, self.cfg.drift_step) else {
            return;
        };
        if t < at {
            return;
        }
        if self.running && at >= self.t_base {
            self.hw_base = self.hw_at(at);
            self.t_base = at;
        }
        self.hw_rate_nano = rate_nano(self.cfg.rate, step.ppm);
        self.step_at = None;
    }

    /// Fires the DAC probe at the first loud sample the hardware played in `from..to`.
    fn watch_dac(&mut self, from: u64, to: u64) {
        let Some(probe) = &self.probe else { return };
        if probe.first_played_ns().is_some() {
            return;
        }
        let from = from.max(to.saturating_sub(self.size));
        // Positions at or past `play_appl` were never written: they played silence.
        for p in from..to.min(self.play_appl) {
            if self.play[(p % self.size) as usize].abs() >= probe.0.threshold {
                // Invert hw_at: the time the hardware reached position p.
                let dt = ((p - self.hw_base) as u128 * 1_000_000_000_000_000_000)
                    .div_ceil(self.hw_rate_nano) as u64;
                probe
                    .0
                    .first_ns
                    .store(self.t_base + dt, std::sync::atomic::Ordering::Release);
                return;
            }
        }
    }

    /// Copies what the hardware played at positions `from..to` into the capture ring at
    /// the same positions; positions not written yet (underrun) were played as silence.
    fn loop_back(&mut self, from: u64, to: u64) {
        let size = self.size;
        // Anything older than one ring would be overwritten again anyway.
        let mut p = from.max(to.saturating_sub(size));
        while p < to {
            let slot = (p % size) as usize;
            let run_end = to.min(p + (size - slot as u64));
            let played_end = run_end.min(self.play_appl).max(p);
            let n_copy = (played_end - p) as usize;
            let n_all = (run_end - p) as usize;
            for ch in 0..self.channels {
                let base = ch * self.size as usize + slot;
                self.cap[base..base + n_copy].copy_from_slice(&self.play[base..base + n_copy]);
                self.cap[base + n_copy..base + n_all].fill(0.0);
            }
            p = run_end;
        }
    }

    /// Restarts both streams around hardware position `at` (ALSA's prepare + prefill +
    /// start): unread capture and queued playback are dropped, and `quantum +
    /// watermark` frames of silence are queued so the next wakeup finds exactly the
    /// watermark left.
    fn restart(&mut self, at: u64, quantum: usize) {
        self.cap_appl = at;
        self.play_appl = at;
        self.queue_silence((quantum + self.watermark(quantum)) as u64);
        self.xrun_pending = false;
        self.follow_quantum = quantum;
    }

    fn queue_silence(&mut self, frames: u64) {
        let mut left = frames;
        while left > 0 {
            let slot = (self.play_appl % self.size) as usize;
            let n = left.min(self.size - slot as u64) as usize;
            for ch in 0..self.channels {
                let base = ch * self.size as usize + slot;
                self.play[base..base + n].fill(0.0);
            }
            self.play_appl += n as u64;
            left -= n as u64;
        }
    }

    // ---- driver ----

    /// One driver read of the hardware pointer (counted), which also refines the rate
    /// estimate the driver uses to predict wakeups.
    fn query_pointer(&mut self) {
        self.counters.pointer_queries += 1;
        self.sync();
        let frames = self.hw - self.est_hw;
        // Readings are floored to whole frames; over a quarter second that error is below
        // 100 ppm, well inside WAKE_MARGIN, and it only makes the estimate (and so the
        // wakeup) later, never earlier.
        if frames >= self.cfg.rate as u64 / 4 {
            self.ns_per_frame = (self.t_hw - self.est_t) as f64 / frames as f64;
        }
    }

    /// The hardware position at which the cycle is due: playback down to the watermark
    /// and `quantum` frames captured.
    fn due_position(&self, quantum: usize) -> u64 {
        let play_due = self
            .play_appl
            .saturating_sub(self.watermark(quantum) as u64);
        if self.fill > 0 {
            // Filling ahead serves playback; capture is read as far as it has arrived.
            return play_due;
        }
        let cap_due = self.cap_appl + quantum as u64;
        play_due.max(cap_due)
    }

    /// Whether, while refilling, another `quantum` still fits within the fill level.
    /// Uses the position of the last update: the hardware only moves on, so the real
    /// queue is at most this and the answer is safe without a pointer query.
    fn room_to_fill(&self, quantum: usize) -> bool {
        self.refilling
            && self.play_appl.saturating_sub(self.hw) + quantum as u64 <= self.fill as u64
    }

    /// Fires the faults due in this cycle (the driver's `wait`, or a follower's
    /// `follow`, counts cycles): whether one was an xrun, which restarted the streams.
    fn fire_faults(&mut self, quantum: usize) -> Result<bool, DeviceError> {
        let cycle = self.cycle;
        self.cycle += 1;
        let mut xrun = false;
        for i in 0..self.cfg.faults.len() {
            let fault = self.cfg.faults[i];
            if self.fired[i] || fault.at_cycle() != cycle {
                continue;
            }
            self.fired[i] = true;
            match fault {
                Fault::Stall { duration, .. } => {
                    let t = self.clock.now_ns();
                    let d = duration.as_nanos().min(u64::MAX as u128) as u64;
                    self.clock.sleep_until_ns(t.saturating_add(d));
                }
                Fault::Xrun { .. } => {
                    self.query_pointer();
                    if !self.xrun_pending {
                        self.counters.underruns += 1;
                        let t = self.t_hw;
                        self.note_xrun(t);
                    }
                    self.restart(self.hw, quantum);
                    xrun = true;
                }
                Fault::Unplug { .. } => {
                    self.unplugged = true;
                    self.running = false;
                    return Err(self.gone());
                }
            }
        }
        Ok(xrun)
    }

    /// The driver's wait; with `wake`, a long sleep while filling ahead ends early when
    /// it becomes readable.
    fn wait_inner(
        &mut self,
        quantum: usize,
        wake_fd: Option<BorrowedFd<'_>>,
    ) -> Result<WaitStatus, DeviceError> {
        if self.unplugged {
            return Err(self.gone());
        }
        self.check_quantum(quantum)?;
        if !self.running {
            self.start(quantum)?;
        }
        let mut xrun = self.fire_faults(quantum)?;
        if self.xrun_pending {
            // Detected by write/read since the last wakeup; restart around the hardware's
            // current position, not the stale one.
            self.query_pointer();
            self.restart(self.hw, quantum);
            xrun = true;
        }
        // After a quantum increase keep the same headroom: queue silence so that
        // playback still leads capture by quantum + period (latency grows with the
        // quantum; a decrease keeps the larger lead rather than dropping audio).
        // Filling ahead keeps far more than that queued, and after a rewind the lead is
        // short on purpose: no silence then.
        let lead = self.play_appl.saturating_sub(self.cap_appl);
        let want = (quantum + self.watermark(quantum)) as u64;
        if self.fill == 0 && lead < want {
            let room = self.size - self.play_appl.saturating_sub(self.hw).min(self.size);
            self.queue_silence((want - lead).min(room));
        }
        if !xrun && self.room_to_fill(quantum) {
            // Refilling: another quantum fits; no sleep and no pointer query.
            return Ok(WaitStatus::Ready);
        }
        self.refilling = false;
        loop {
            let due = self.due_position(quantum);
            if self.hw >= due {
                break;
            }
            let ahead = (due - self.hw) as f64 * self.ns_per_frame * (1.0 + WAKE_MARGIN);
            let wake = self.t_hw + ahead.ceil() as u64;
            match wake_fd {
                // A sleep of up to a whole buffer: let a control message cut it short.
                Some(fd) if self.fill > 0 && !xrun => {
                    if self.clock.sleep_until_ns_or_wake(wake, fd) {
                        return Ok(WaitStatus::Woken);
                    }
                }
                _ => self.clock.sleep_until_ns(wake),
            }
            self.query_pointer();
            if self.xrun_pending {
                self.restart(self.hw, quantum);
                xrun = true;
            }
        }
        // Every real wakeup starts a refill, also one that began at one quantum per
        // wakeup: the fill level may be raised for the very next cycle (once every
        // stream can deliver), and waiting for the watermark again first would cost a
        // second wakeup.
        self.refilling = true;
        self.counters.wakeups += 1;
        self.counters.margin_frames = self.watermark(quantum) as u64;
        Ok(if xrun {
            WaitStatus::Xrun
        } else {
            WaitStatus::Ready
        })
    }
}

impl Device for SimCard {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn start(&mut self, quantum: usize) -> Result<(), DeviceError> {
        if self.unplugged {
            return Err(self.gone());
        }
        self.check_quantum(quantum)?;
        if self.closed {
            self.closed = false;
            self.counters.closed = false;
            self.counters.reopens += 1;
        }
        if self.running {
            self.sync();
        }
        let t = self.clock.now_ns();
        if let Some(step) = self.cfg.drift_step
            && !self.step_armed
        {
            self.step_armed = true;
            self.step_at = Some(t + step.after.as_nanos() as u64);
        }
        self.step_drift(t);
        self.running = true;
        self.t_base = t;
        self.hw_base = self.hw;
        self.t_hw = t;
        self.est_t = t;
        self.est_hw = self.hw;
        self.restart(self.hw, quantum);
        Ok(())
    }

    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError> {
        self.wait_inner(quantum, None)
    }

    fn wait_or_wake(
        &mut self,
        quantum: usize,
        wake: BorrowedFd<'_>,
    ) -> Result<WaitStatus, DeviceError> {
        self.wait_inner(quantum, Some(wake))
    }

    fn max_fill(&self) -> usize {
        self.cfg.buffer_frames
    }

    fn follow(&mut self, quantum: usize) -> Result<Option<FollowerLevels>, DeviceError> {
        if self.unplugged {
            return Err(self.gone());
        }
        self.check_quantum(quantum)?;
        if !self.running {
            return Ok(None);
        }
        // A clock read (the model catching up), then one pointer read, as `wait` does.
        self.sync();
        self.counters.pointer_queries += 1;
        let faulted = self.fire_faults(quantum)?;
        let restarted = faulted || self.xrun_pending;
        if self.xrun_pending {
            self.restart(self.hw, quantum);
        } else if !faulted && quantum > self.follow_quantum {
            // The wait plays a quantum of it before this cycle writes the next one.
            let room = self.size - self.play_appl.saturating_sub(self.hw).min(self.size);
            self.queue_silence(((quantum - self.follow_quantum) as u64).min(room));
            self.follow_quantum = quantum;
        }
        Ok(Some(FollowerLevels {
            play_queued: Some(self.play_appl.saturating_sub(self.hw) as usize),
            cap_avail: Some(self.hw.saturating_sub(self.cap_appl) as usize),
            restarted,
        }))
    }

    fn set_fill(&mut self, frames: usize) {
        self.fill = frames.min(self.cfg.buffer_frames);
    }

    fn rewind(&mut self, keep: usize) -> usize {
        if !self.running || self.xrun_pending || self.unplugged {
            return 0;
        }
        // A rewind must know where the hardware is now: one pointer read.
        self.query_pointer();
        if self.xrun_pending {
            return 0;
        }
        let queued = self.play_appl.saturating_sub(self.hw);
        let keep = (self.margin.current() + keep) as u64;
        if queued <= keep {
            return 0;
        }
        let n = queued - keep;
        self.play_appl -= n;
        self.refilling = true;
        self.counters.rewinds += 1;
        self.counters.rewound_frames += n;
        n as usize
    }

    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        if self.unplugged {
            return Err(self.gone());
        }
        if !self.running {
            return Ok(());
        }
        self.sync();
        let queued = self.play_appl.saturating_sub(self.hw);
        if !self.xrun_pending {
            // The headroom left when this cycle's audio arrives: how close it came to an
            // underrun (the adaptive margin's near-miss signal).
            let t = self.t_hw;
            if self.margin.on_cycle(t, queued as usize).is_some() {
                self.counters.margin_changes = self.margin.changes();
            }
        }
        // Never overwrite frames the hardware has not played (only an engine writing more
        // than `wait` allowed could try); the excess is dropped.
        let frames = (buf.frames() as u64).min(self.size - queued.min(self.size)) as usize;
        let mut done = 0;
        while done < frames {
            let slot = (self.play_appl % self.size) as usize;
            let n = (frames - done).min(self.size as usize - slot);
            for ch in 0..self.channels {
                let dst = &mut self.play[ch * self.size as usize + slot..][..n];
                if ch < buf.channels() {
                    dst.copy_from_slice(&buf.channel(ch)[done..done + n]);
                } else {
                    dst.fill(0.0);
                }
            }
            self.play_appl += n as u64;
            done += n;
        }
        self.counters.frames_written += buf.frames() as u64;
        Ok(())
    }

    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        if self.unplugged {
            buf.fill_silence();
            return Err(self.gone());
        }
        let frames = buf.frames();
        self.counters.frames_read += frames as u64;
        if !self.running {
            buf.fill_silence();
            return Ok(());
        }
        self.sync();
        if self.xrun_pending {
            // The ring may hold newer audio than these positions; hand out silence until
            // the restart at the next wait.
            buf.fill_silence();
            return Ok(());
        }
        // Only an engine reading more than `wait` allowed gets silence for the frames the
        // hardware has not captured yet; positions still advance so the streams stay
        // aligned.
        let avail = self.hw.saturating_sub(self.cap_appl).min(frames as u64) as usize;
        let mut done = 0;
        while done < avail {
            let slot = ((self.cap_appl + done as u64) % self.size) as usize;
            let n = (avail - done).min(self.size as usize - slot);
            for ch in 0..buf.channels() {
                let dst = &mut buf.channel_mut(ch)[done..done + n];
                if ch < self.channels {
                    dst.copy_from_slice(&self.cap[ch * self.size as usize + slot..][..n]);
                } else {
                    dst.fill(0.0);
                }
            }
            done += n;
        }
        for ch in 0..buf.channels() {
            buf.channel_mut(ch)[avail..].fill(0.0);
        }
        // Filling ahead, the engine runs ahead of the capture: take only what arrived
        // (the rest of the buffer is silence) so the capture position never passes the
        // hardware.
        self.cap_appl += if self.fill > 0 { avail } else { frames } as u64;
        Ok(())
    }

    fn suspend(&mut self) {
        if self.running {
            self.sync();
            self.running = false;
        }
    }

    /// Models releasing the card: the state is kept (the DMA pointer holds still, as
    /// suspended), only the open/closed state and its counters change, so tests can see
    /// the engine close and reopen it.
    fn close_idle(&mut self) -> bool {
        if self.closed || self.unplugged {
            return false;
        }
        self.suspend();
        self.closed = true;
        self.counters.closed = true;
        self.counters.idle_closes += 1;
        true
    }

    /// Frames queued ahead of the hardware as of the last update (right after `write`:
    /// how long until a sample written next is played).
    fn playback_delay(&self) -> usize {
        self.play_appl.saturating_sub(self.hw) as usize
    }

    /// Frames captured but not yet read as of the last update.
    fn capture_delay(&self) -> usize {
        self.hw.saturating_sub(self.cap_appl) as usize
    }

    fn max_quantum(&self) -> Option<usize> {
        Some(self.cfg.buffer_frames - self.cfg.period_frames)
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }

    fn close(&mut self) -> Result<(), DeviceError> {
        self.suspend();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use quaver_dsp::ChannelMap;
    use std::time::Duration;

    fn card(cfg: SimConfig) -> (SimCard, VirtualClock) {
        let clock = VirtualClock::new();
        (
            SimCard::with_clock(cfg, Box::new(clock.clone())).unwrap(),
            clock,
        )
    }

    #[test]
    fn hardware_position_is_exact_rational_time() {
        let (mut c, clock) = card(SimConfig {
            rate: 44_100,
            drift_ppm: 0.0,
            ..SimConfig::default()
        });
        c.start(441).unwrap();
        clock.advance(Duration::from_secs(3));
        c.sync();
        assert_eq!(c.hw_position(), 3 * 44_100);
        clock.advance(Duration::from_nanos(22_675)); // 0.99998 of a frame
        c.sync();
        assert_eq!(c.hw_position(), 3 * 44_100);
        clock.advance(Duration::from_nanos(1));
        c.sync();
        assert_eq!(c.hw_position(), 3 * 44_100 + 1);
    }

    #[test]
    fn a_drift_step_changes_the_clock_rate_without_a_jump() {
        let (mut c, clock) = card(SimConfig {
            rate: 48_000,
            drift_ppm: 200.0,
            drift_step: Some(crate::sim::DriftStep {
                after: Duration::from_secs(5),
                ppm: -200.0,
            }),
            ..SimConfig::default()
        });
        clock.advance(Duration::from_secs(1)); // the step counts from the start
        c.start(256).unwrap();
        clock.advance(Duration::from_secs(4));
        c.sync();
        assert_eq!(c.hw_position(), 192_038); // 4 s at 48 009.6 Hz
        // Read 2 s after the step: the second before it still ran fast.
        clock.advance(Duration::from_secs(3));
        c.sync();
        assert_eq!(c.hw_position(), 240_048 + 95_980); // then 47 990.4 Hz
        clock.advance(Duration::from_secs(5));
        c.sync();
        assert_eq!(c.hw_position(), 240_048 + 335_932);
    }

    #[test]
    fn rejects_bad_configs() {
        let bad = [
            SimConfig {
                period_frames: 0,
                ..SimConfig::default()
            },
            SimConfig {
                period_frames: 8192,
                ..SimConfig::default()
            },
            SimConfig {
                drift_ppm: f64::NAN,
                ..SimConfig::default()
            },
            SimConfig {
                channels: ChannelMap(vec![]),
                ..SimConfig::default()
            },
        ];
        for cfg in bad {
            assert!(matches!(
                SimCard::with_clock(cfg, Box::new(VirtualClock::new())),
                Err(DeviceError::BadSpec { .. })
            ));
        }
        let (mut c, _) = card(SimConfig::default());
        assert!(matches!(c.start(8192 - 255), Err(DeviceError::Io { .. })));
        assert!(c.start(8192 - 256).is_ok());
    }
}
