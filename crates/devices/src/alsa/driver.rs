//! The driver: timer-based scheduling and recovery over any [`PcmIo`] (alsa-lib's PCM,
//! or the tests' simulated one); see the module docs of [`crate::alsa`]. Opening,
//! starting, restarting, closing and reading the pointer are here; one cycle's wait and
//! transfers are in `cycle.rs`.

use super::dll::Dll;
use super::ffi;
use super::params::{self, Direction, HwRequest, HwSetup, PcmIo, Status};
use crate::clock::SimClock;
use crate::margin::{Margin, MarginChange, MarginConfig};
use crate::pacer::Pacer;
use crate::{DeviceCounters, DeviceError, DeviceInfo, ErrName};
use std::io;

/// The driver wakes this much (relative) later than its prediction of the due point, so
/// that a small rate error never wakes it early for a second pointer query.
pub(super) const WAKE_LATE: f64 = 500e-6;

/// Consecutive readings of a running PCM that show its ring completely drained
/// (playback) or full (capture) without an xrun before the device decides the PCM does
/// not run in real time and paces itself instead. A kernel PCM reports an xrun at that
/// point (stop threshold = buffer), so it never gets here.
pub(super) const UNPACED_READINGS: u32 = 3;

/// A timestamp further than this from `CLOCK_MONOTONIC` is not a monotonic stamp (old
/// kernels give gettimeofday stamps); the driver then uses its own clock reading.
const STAMP_PLAUSIBLE_NS: u64 = 100_000_000;

pub(super) fn alsa_io(device: &str, message: &str, code: i32) -> DeviceError {
    DeviceError::Io {
        device: device.to_string(),
        source: io::Error::new(
            io::Error::from_raw_os_error(-code).kind(),
            message.to_string(),
        ),
    }
}

/// One direction's PCM and the driver's bookkeeping for it.
pub(crate) struct Side<P> {
    pub(super) pcm: P,
    pub(super) buffer: usize,
    /// Frames written (playback, prefill included) or read (capture) since the stream
    /// started: the application pointer.
    pub(super) appl: u64,
    /// What the first open asked for and got: a reopen after an idle close asks the
    /// same and must get the same stream, which the engine's graph was built for.
    pub(super) request: HwRequest,
    pub(super) setup: HwSetup,
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

/// Whether a reopen that negotiated `got` can carry the stream the engine was built
/// for (`first`): the same rate and channels. Format and access may differ — the PCM
/// converts from the graph's f32 whatever it negotiated, as at the first open — and so
/// may the ring, as long as the quantum still fits (checked by the caller). This is what
/// a snd-aloop cable needs: its far end, opened by another program while quaverd was
/// closed for idleness, forces its own format on quaverd's end.
fn same_stream(got: &HwSetup, first: &HwSetup) -> bool {
    (got.channels, got.rate) == (first.channels, first.rate)
}

fn describe_stream(s: &HwSetup) -> String {
    format!(
        "{} {} Hz {} ch, buffer {}, {}",
        s.format.alsa_name(),
        s.rate,
        s.channels,
        s.buffer_frames,
        match s.access {
            params::Access::Mmap => "mmap",
            params::Access::ReadWrite => "read/write",
        }
    )
}

/// The last pointer reading, kept up to date by the driver's own writes and reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reading {
    /// When the pointer was read (device timestamp, else our clock).
    pub(super) t_ns: u64,
    /// Playback frames queued at `t_ns`, plus those written since.
    pub(super) play_queued: u64,
    /// Capture frames ready at `t_ns`, minus those read since.
    pub(super) cap_avail: u64,
}

/// Something the next `wait` must recover from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pending {
    None,
    Xrun,
    Suspended,
}

/// The scheduling logic over any [`PcmIo`] (alsa-lib's, or the tests' simulated PCM).
pub(crate) struct Driver<P: PcmIo> {
    pub(super) info: DeviceInfo,
    pub(super) err_name: ErrName,
    pub(super) counters: DeviceCounters,
    pub(super) play: Option<Side<P>>,
    pub(super) cap: Option<Side<P>>,
    pub(super) clock: Box<dyn SimClock>,
    pub(super) pacer: Pacer,
    pub(super) paced_by_clock: bool,
    pub(super) margin: Margin,
    pub(super) dll: Dll,
    pub(super) running: bool,
    pub(super) reading: Option<Reading>,
    pub(super) pending: Pending,
    pub(super) unpaced_readings: u32,
    pub(super) last_lateness_ns: u64,
    pub(super) play_delay: usize,
    pub(super) cap_delay: usize,
    pub(super) last_write: usize,
    /// The PCMs are closed after an idle suspend; `start` reopens them.
    pub(super) closed: bool,
    /// Playback and capture were `snd_pcm_link`ed at open (and are again on reopen).
    pub(super) linked: bool,
    /// Whether an idle suspend closes the PCMs: not for alsa-lib's `file` plugin,
    /// whose reopen truncates the output file it was writing.
    pub(super) closes_when_idle: bool,
    /// Fill level the engine asked for (`Device::set_fill`); 0 = one quantum per wakeup.
    pub(super) fill: usize,
    /// Woken (or rewound) and still topping the ring up to `fill`.
    pub(super) refilling: bool,
    /// The largest quantum [`Device::follow`] saw since the last restart (0: none).
    pub(super) follow_quantum: usize,
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
    pub(super) fn max_fill(&self) -> usize {
        match (&self.play, &self.cap) {
            (Some(_), None) if !self.paced_by_clock => self
                .buffer()
                .saturating_sub(self.margin.config().max_frames),
            _ => 0,
        }
    }

    pub(super) fn set_fill(&mut self, frames: usize) {
        self.fill = frames.min(self.max_fill());
    }

    /// Takes back queued playback beyond the watermark plus `keep` (`snd_pcm_rewindable`
    /// then `snd_pcm_rewind`); returns the frames taken back. The rewindable query reads
    /// the hardware pointer, so it is counted as a pointer query.
    pub(super) fn rewind(&mut self, keep: usize) -> usize {
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

    pub(super) fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The error for alsa-lib code `err` (`Gone` for a vanished device).
    /// What a failed read or write means, the same for both directions: EPIPE is an
    /// xrun (the margin jumps, recovery waits for the next wait), ESTRPIPE a system
    /// suspend (resume pending); anything else fails the device.
    pub(super) fn transfer_failed(&mut self, err: i32) -> Result<(), DeviceError> {
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

    pub(super) fn fail(&mut self, err: i32) -> DeviceError {
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
    pub(super) fn buffer(&self) -> usize {
        let p = self.play.as_ref().map_or(usize::MAX, |s| s.buffer);
        let c = self.cap.as_ref().map_or(usize::MAX, |s| s.buffer);
        p.min(c)
    }

    /// The largest quantum the ring allows: the buffer minus the minimum margin.
    pub(super) fn max_quantum(&self) -> usize {
        let min_margin = if self.play.is_some() && !self.paced_by_clock {
            self.margin.config().min_frames
        } else {
            0
        };
        self.buffer().saturating_sub(min_margin).max(1)
    }

    pub(super) fn check_quantum(&mut self, quantum: usize) -> Result<(), DeviceError> {
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
    pub(super) fn watermark(&self, quantum: usize) -> usize {
        self.margin
            .current()
            .min(self.buffer().saturating_sub(quantum))
    }

    pub(super) fn publish(&mut self, change: Option<MarginChange>) {
        if change.is_some() {
            self.counters.margin_changes = self.margin.changes();
        }
    }

    /// Stops, prepares and restarts the streams: the prefill (`quantum + margin` frames
    /// of silence) is what the new reading knows, so no pointer query is needed.
    pub(super) fn restart(&mut self, quantum: usize) -> Result<(), DeviceError> {
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
            // Linked PCMs start together: only start what is not running yet. A side
            // the other's start ran may already have overrun when its turn comes (a
            // starved machine): its start then says -EBADFD, and that is an xrun to
            // recover at the next wait, not a dead device.
            if side.pcm.state() != ffi::SND_PCM_STATE_RUNNING
                && let Err(e) = side.pcm.start()
            {
                if side.pcm.state() == ffi::SND_PCM_STATE_XRUN {
                    return self.transfer_failed(-libc::EPIPE);
                }
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

    pub(super) fn start(&mut self, quantum: usize) -> Result<(), DeviceError> {
        self.check_quantum(quantum)?;
        if self.closed {
            self.reopen()?;
            // The ring may have changed with the reopen.
            self.check_quantum(quantum)?;
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
    pub(super) fn close_idle(&mut self) -> bool {
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
    /// same path as the first open with the same request. The rate and channels must be
    /// the first open's (the engine built its graph for them); another format, access
    /// or ring is taken as it comes (see `same_stream`). Any failure is an error the
    /// engine answers by dropping the device (logged with this message, the streams
    /// moved elsewhere).
    pub(super) fn reopen(&mut self) -> Result<(), DeviceError> {
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
                            "reopening '{}' after the idle close: {} now negotiates {}; \
                             the graph was built for {} Hz {} ch",
                            side.pcm.name(),
                            dir.name(),
                            describe_stream(&got),
                            side.setup.rate,
                            side.setup.channels
                        ),
                    ),
                });
            }
            side.buffer = got.buffer_frames;
            side.setup = got;
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
    pub(super) fn query(&mut self) -> Result<Option<Reading>, DeviceError> {
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
    pub(super) fn recover(&mut self, quantum: usize) -> Result<bool, DeviceError> {
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

    pub(super) fn suspend(&mut self) {
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

    pub(super) fn playback_delay(&self) -> usize {
        if self.paced_by_clock {
            self.last_write
        } else {
            self.play_delay
        }
    }

    pub(super) fn capture_delay(&self) -> usize {
        if self.paced_by_clock {
            0
        } else {
            self.cap_delay
        }
    }

    pub(super) fn counters(&self) -> DeviceCounters {
        self.counters
    }

    pub(super) fn wakeup_lateness_ns(&self) -> Option<u64> {
        Some(self.last_lateness_ns)
    }

    pub(super) fn close(&mut self) -> Result<(), DeviceError> {
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
