//! One cycle of the driver: the wait (predicted from the last pointer reading, one
//! query per wakeup), topping the ring up, the transfers, and follower levels.

use super::driver::{Driver, Pending, Reading, UNPACED_READINGS, WAKE_LATE};
use super::params::PcmIo;
use crate::{DeviceError, FollowerLevels, WaitStatus};
use quaver_dsp::{Planar, PlanarMut};
use rustix::fd::BorrowedFd;

impl<P: PcmIo> Driver<P> {
    /// A follower whose quantum grew by `growth`: as much silence, as far as the ring has
    /// room (see [`Device::follow`]). Uses the last reading.
    pub(super) fn top_up(&mut self, growth: usize) -> Result<(), DeviceError> {
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
    pub(super) fn follow(&mut self, quantum: usize) -> Result<Option<FollowerLevels>, DeviceError> {
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

    pub(super) fn wait(
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

    pub(super) fn wait_on_clock(&mut self, quantum: usize) -> WaitStatus {
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
    pub(super) fn elapsed_frames(&mut self, r: &Reading) -> (u64, u64) {
        let now = self.clock.now_ns();
        let frames = (now.saturating_sub(r.t_ns) as f64 / self.dll.ns_per_frame()) as u64;
        (now, frames)
    }

    pub(super) fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
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

    pub(super) fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
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
}
