//! The measuring client: plays impulses at a fixed fill, reads them back through the
//! path, and pairs each capture with its write.

use crate::report::stats::IntHist;
use crate::tools::rng::Rng;
use crate::tools::rt;
use anyhow::Result;
use quaver_client::{PlaybackStream, RecordStream};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Settings of the client loop.
#[derive(Debug, Clone)]
pub(super) struct LoopConfig {
    pub(super) quantum: usize,
    pub(super) fill: usize,
    pub(super) impulses: usize,
    pub(super) budget: Duration,
    pub(super) warmup: Duration,
    pub(super) lost_after: u64,
    pub(super) inject_delay: usize,
    pub(super) rt_priority: i32,
}

/// An impulse in flight.
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    /// Capture frames read when it was written.
    pub(super) r0: u64,
    /// Its offset in the client's last quantum.
    pub(super) j: u64,
    /// Its index in the playback ring, as the client's bookkeeping has it.
    pub(super) w: u64,
    /// Steady offset K when written.
    pub(super) k: i64,
    pub(super) written: Instant,
    pub(super) ambiguous: bool,
    /// Playback, record and device xrun counts when written.
    pub(super) xruns: (u32, u32, u64),
}

/// A found impulse.
#[derive(Debug, Clone)]
pub(super) struct Measured {
    pub(super) round_trip: i64,
    pub(super) server: i64,
    pub(super) wall_ns: u64,
    pub(super) ambiguous: bool,
    pub(super) xrun: bool,
}

impl Measured {
    pub(super) fn clean(&self) -> bool {
        !self.ambiguous && !self.xrun
    }
}

#[derive(Debug, Default)]
pub(super) struct LoopOutput {
    pub(super) found: Vec<Measured>,
    pub(super) sent: usize,
    pub(super) lost: usize,
    pub(super) spurious: usize,
    pub(super) relocks: usize,
    pub(super) play_xruns: u32,
    pub(super) record_xruns: u32,
    pub(super) client_realtime: bool,
}

/// Tracks the steady offset `K = record write position − playback read position`:
/// the most frequent value seen (after a short settle following each wake-up, nearly
/// every snapshot falls between cycles); relearned when it has not been seen in the
/// last [`OffsetLock::RELOCK_AFTER`] snapshots (an xrun shifted the rings).
#[derive(Debug, Default)]
pub(super) struct OffsetLock {
    pub(super) recent: VecDeque<i64>,
    pub(super) k: Option<i64>,
    pub(super) relocks: usize,
}

impl OffsetLock {
    const WINDOW: usize = 32;
    const RELOCK_AFTER: usize = 16;

    pub(super) fn mode(v: impl Iterator<Item = i64>) -> Option<i64> {
        IntHist::of(v).mode()
    }

    /// Feeds one observation; returns whether it equals the locked offset.
    pub(super) fn observe(&mut self, k: i64, warming: bool) -> bool {
        self.recent.push_back(k);
        if self.recent.len() > Self::WINDOW {
            self.recent.pop_front();
        }
        if warming {
            return false;
        }
        let locked = match self.k {
            Some(v) => v,
            None => {
                let v = Self::mode(self.recent.iter().copied()).unwrap_or(k);
                self.k = Some(v);
                v
            }
        };
        if k == locked {
            return true;
        }
        let n = self.recent.len();
        if n >= Self::RELOCK_AFTER
            && self
                .recent
                .iter()
                .skip(n - Self::RELOCK_AFTER)
                .all(|&v| v != locked)
        {
            self.k = Self::mode(self.recent.iter().skip(n - Self::RELOCK_AFTER).copied());
            self.relocks += 1;
            return self.k == Some(k);
        }
        false
    }
}

pub(super) fn client_loop(
    mut play: PlaybackStream,
    mut rec: RecordStream,
    c: &LoopConfig,
    rng: &mut Rng,
    counter: &AtomicU64,
    dev_xruns: &AtomicU64,
) -> Result<LoopOutput> {
    let mut out = LoopOutput {
        client_realtime: rt::set_fifo(c.rt_priority),
        ..LoopOutput::default()
    };
    const CH: usize = 2;
    let q = c.quantum;
    let rec_cap = rec.info().capacity_frames as usize;
    let rate = rec.info().rate;
    let mut rbuf = vec![0f32; rec_cap * CH];
    let mut chunk: Vec<f32> = Vec::with_capacity(c.fill * CH);
    // The injected delay: what the client writes is its signal delayed by this much.
    let mut delay: VecDeque<f32> = std::iter::repeat_n(0.0, c.inject_delay * CH).collect();
    let mut phys: Vec<f32> = Vec::with_capacity(c.fill * CH);
    let xruns0 = (play.xruns(), rec.xruns());
    let mut write = |play: &mut PlaybackStream, chunk: &[f32]| -> Result<()> {
        delay.extend(chunk.iter().copied());
        phys.clear();
        phys.extend(delay.drain(..chunk.len()));
        play.write(&phys)?;
        Ok(())
    };
    // Prefill to the client's level so the server starts the stream at once.
    chunk.resize(c.fill * CH, 0.0);
    write(&mut play, &chunk)?;
    let settle =
        Duration::from_nanos((q as u64 * 1_000_000_000 / rate as u64 / 8).clamp(20_000, 200_000));
    let t0 = Instant::now();
    let hard_deadline = t0 + c.budget + c.warmup + Duration::from_secs(5);
    let mut lock = OffsetLock::default();
    let mut read: u64 = 0;
    let mut pending: Option<InFlight> = None;
    let mut next_at: u64 = 0;
    let stop = |out: &LoopOutput, pending: &Option<InFlight>| {
        let now = Instant::now();
        now > hard_deadline
            || (pending.is_none()
                && (out.found.len() >= c.impulses || now > t0 + c.warmup + c.budget))
    };
    while !stop(&out, &pending) {
        // 1. Everything captured so far. The record stream's doorbell rings in the
        // middle of a cycle; give the server a moment to finish it, so the snapshot
        // below falls between cycles.
        let mut n = rec.read(&mut rbuf)?;
        std::thread::sleep(settle);
        loop {
            let mut found_at = None;
            for f in 0..n {
                if rbuf[f * CH] > 0.5 {
                    found_at = Some(read + f as u64);
                    break;
                }
            }
            if let Some(r) = found_at {
                match pending.take() {
                    Some(imp) => {
                        let now_x = (play.xruns(), rec.xruns(), dev_xruns.load(Ordering::Relaxed));
                        out.found.push(Measured {
                            round_trip: r as i64 - imp.r0 as i64 - imp.j as i64,
                            server: r as i64 - imp.w as i64 - imp.k,
                            wall_ns: imp.written.elapsed().as_nanos() as u64,
                            ambiguous: imp.ambiguous,
                            xrun: now_x != imp.xruns,
                        });
                        counter.store(out.found.len() as u64, Ordering::Relaxed);
                        next_at = read + n as u64 + rng.below(4 * q as u64);
                    }
                    None => out.spurious += 1,
                }
            }
            read += n as u64;
            n = rec.try_read(&mut rbuf)?;
            if n == 0 {
                break;
            }
        }
        if let Some(imp) = &pending
            && read > imp.r0 + c.lost_after
        {
            out.lost += 1;
            pending = None;
        }
        // 2. Snapshot the playback ring and check the phase.
        let queued = play.frames_queued();
        let written = play.frames_written();
        let rp = written - queued as u64;
        let warming = t0.elapsed() < c.warmup;
        let in_phase = lock.observe(read as i64 - rp as i64, warming);
        // 3. Top up to the fill level; maybe with an impulse in the last quantum.
        let n = c.fill.saturating_sub(queued);
        if n == 0 {
            continue;
        }
        chunk.clear();
        chunk.resize(n * CH, 0.0);
        let place = pending.is_none()
            && in_phase
            && n >= q
            && read >= next_at
            && out.sent < c.impulses
            && t0.elapsed() < c.warmup + c.budget;
        if place {
            let j = rng.below(q as u64);
            let at = n - q + j as usize;
            chunk[at * CH..at * CH + CH].fill(1.0);
            pending = Some(InFlight {
                r0: read,
                j,
                w: written + at as u64,
                k: lock.k.unwrap_or_default(),
                written: Instant::now(),
                ambiguous: false,
                xruns: (play.xruns(), rec.xruns(), dev_xruns.load(Ordering::Relaxed)),
            });
            out.sent += 1;
        }
        write(&mut play, &chunk)?;
        if place {
            // A cycle that consumed between the snapshot and the write changed how much
            // was queued ahead of the impulse.
            let rp_after = play.frames_written() - play.frames_queued() as u64;
            if rp_after != rp
                && let Some(imp) = pending.as_mut()
            {
                imp.ambiguous = true;
            }
        }
    }
    out.relocks = lock.relocks;
    out.play_xruns = play.xruns().wrapping_sub(xruns0.0);
    out.record_xruns = rec.xruns().wrapping_sub(xruns0.1);
    Ok(out)
}
