//! The real-time half of a PulseAudio stream: a `FrameSource` / `FrameSink` over an
//! `rtrb` ring of interleaved f32 at the client's rate and layout, plus the atomics
//! through which it and the connection thread see each other.
//!
//! The front-end's I/O thread decodes the client's samples and pushes them (playback), or
//! pops and encodes them (record); for a lone low-latency playback stream the RT thread
//! may take its client's blocks in itself ([`crate::rt::intake`]). Everything here runs on
//! the RT thread: no allocation, no locks, no blocking; one system call is the write
//! that rings the I/O thread's [`Bell`], made only when the I/O thread asked for it (a
//! request threshold, a drain target, a fragment) or when something it must report
//! happened (stream started, underflow, overflow), and at most once until the I/O
//! thread has woken: however many streams cross a threshold in one cycle, the I/O
//! thread wakes once. The one other system call is a non-blocking `send` of a stream's
//! REQUEST to its client (or the srbchannel's wakeup pipe write), when the connection
//! armed one ([`crate::rt::rtwire`]): that replaces the ring.
//!
//! PulseAudio's prebuffering lives here rather than in the engine's adapter: a stream
//! starts once `prebuf` bytes are queued (or on TRIGGER/DRAIN), and after running dry it
//! waits for `prebuf` again, as `pa_memblockq` does.

use crate::rt::intake::{MAX_RELEASES, RELEASE_LEN, RtIntake};
use crate::rt::rtwire::{REQUEST_LEN, RtWire, Sent};
/// The shared state and the flags, where this file's users have always found them.
pub use crate::rt::shared::{
    Bell, F_CORKED, F_DRAIN, F_PREBUF, F_TRIGGER, LATE_HOLD_NS, NEVER, PlayShared, R_CORKED,
    RecShared,
};
use quaver_engine::CycleInfo;
use quaver_engine::stream::{FrameSink, FrameSource};
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

/// The RT reader of a playback stream's ring.
pub struct PlaySource {
    shared: Arc<PlayShared>,
    ring: rtrb::Consumer<f32>,
    channels: usize,
    in_prebuf: bool,
    dry: bool,
    consumed: u64,
    removed: u64,
    played: u64,
    notify: bool,
    /// Frames the read index ran ahead of the data (silence read past the write index
    /// of a stream without prebuffering); dropped from the next data, as PulseAudio's
    /// memblockq drops writes behind its read index.
    debt: u64,
    flush_seen: u64,
    /// The client's socket, where the RT side may send the stream's requests itself.
    wire: Option<Arc<RtWire>>,
    /// The connection's intake, when it may lend it to this stream, and its channel.
    intake: Option<Arc<RtIntake>>,
    channel: u32,
    /// When the last request this reader has seen went out, and the one whose answer
    /// was last timed.
    asked_ns: u64,
    answered_ns: u64,
    /// The start of the cycle being reported (the moment its delay holds).
    cycle_ns: u64,
    /// Filling ahead, another cycle follows this one at once (`CycleInfo`).
    burst_goes_on: bool,
    /// `consumed` at the last report (what a cycle read is the difference).
    reported_consumed: u64,
}

impl PlaySource {
    /// The reader over `ring` (interleaved, `channels` per frame).
    pub fn new(shared: Arc<PlayShared>, ring: rtrb::Consumer<f32>, channels: usize) -> Self {
        PlaySource {
            shared,
            ring,
            channels: channels.max(1),
            in_prebuf: true,
            dry: true,
            consumed: 0,
            removed: 0,
            played: 0,
            notify: false,
            debt: 0,
            flush_seen: 0,
            wire: None,
            intake: None,
            channel: 0,
            asked_ns: 0,
            answered_ns: 0,
            cycle_ns: 0,
            burst_goes_on: false,
            reported_consumed: 0,
        }
    }

    /// Lets the RT side take the stream's blocks in itself when its connection lends it
    /// the intake for `channel` ([`crate::rt::intake`]).
    pub fn with_intake(mut self, intake: Option<Arc<RtIntake>>, channel: u32) -> Self {
        self.intake = intake;
        self.channel = channel;
        self
    }

    /// Sends the armed request `packet` when the intake is lent to this stream, after
    /// the block releases it holds (in the same write, or not at all); `None` when it is
    /// not lent, and the bell's rule decides ([`Bell::may_send`]). A lent stream's
    /// requests always go from here: the I/O thread does not wake for its answers, so a
    /// request it sent would cost a wakeup of its own.
    fn send_lent(&self, wire: &RtWire, packet: &[u8; REQUEST_LEN]) -> Option<Sent> {
        self.intake.as_ref().and_then(|ik| {
            ik.with_lease(self.channel, |l| {
                let mut buf = [0u8; MAX_RELEASES * RELEASE_LEN + REQUEST_LEN];
                let n = l.releases_into(&mut buf);
                buf[n..n + REQUEST_LEN].copy_from_slice(packet);
                let sent = wire.try_send(&buf[..n + REQUEST_LEN]);
                if sent == Sent::Whole {
                    l.taken.held = 0;
                }
                (sent, true)
            })
        })
    }

    /// Lets the RT side send the stream's armed requests on `wire`.
    pub fn with_wire(mut self, wire: Option<Arc<RtWire>>) -> Self {
        self.wire = wire;
        self
    }

    fn queued(&self) -> usize {
        self.ring.slots() / self.channels
    }

    /// Frames a read may take now, honouring cork and prebuffering.
    fn readable(&self, flags: u32) -> usize {
        if flags & F_CORKED != 0 {
            return 0;
        }
        let q = self.queued();
        if self.in_prebuf && !self.prebuf_satisfied(flags, q) {
            return 0;
        }
        q
    }

    fn prebuf_satisfied(&self, flags: u32, queued: usize) -> bool {
        let prebuf = self.shared.prebuf.load(Relaxed) as usize;
        queued >= prebuf.max(1) || (flags & (F_DRAIN | F_TRIGGER) != 0 && queued > 0)
    }

    fn discard_flushed(&mut self) {
        let target = self.shared.flush_to.load(Acquire);
        if target != self.flush_seen {
            // A flush moves the write index back to the read index: no debt left.
            self.flush_seen = target;
            self.debt = 0;
        }
        while self.removed < target {
            let n = ((target - self.removed) as usize).min(self.queued());
            if n == 0 {
                break;
            }
            match self.ring.read_chunk(n * self.channels) {
                Ok(c) => c.commit_all(),
                Err(_) => break,
            }
            self.removed += n as u64;
        }
    }
}

impl FrameSource for PlaySource {
    fn prepare(&mut self) {
        let Some(ik) = &self.intake else {
            return;
        };
        let to = self.wire.as_deref().map(|w| (w, &*self.shared));
        let pulled = ik.pull(self.channel, self.removed, to);
        if pulled.frames > 0 {
            // The connection's count, carried on while the RT thread pushes (the
            // introspection's buffer figure reads it).
            self.shared.pushed.fetch_add(pulled.frames, Release);
        }
        if pulled.handed_back {
            // Something in the ring is the I/O thread's: at once, not at the cycle's end.
            self.shared.bell.ring();
        }
        // The first data after a request the RT side sent: did the client take long? An
        // answer there at the first look after the request is on time, however long a
        // cycle is; one that comes later is late once it took more than `late_after_ns`.
        let s = &*self.shared;
        let asked = s.request.last_sent_ns();
        let first_look = asked != self.asked_ns;
        self.asked_ns = asked;
        if pulled.frames > 0 && asked != 0 && asked != self.answered_ns {
            self.answered_ns = asked;
            let now = quaver_rt::monotonic_ns();
            let late_after = s.late_after_ns.load(Relaxed);
            if !first_look && late_after > 0 && now.saturating_sub(asked) > late_after {
                s.late_ns.store(now, Relaxed);
                s.late_answers.fetch_add(1, Relaxed);
            }
        }
    }

    fn available(&self) -> usize {
        self.readable(self.shared.flags.load(Acquire))
    }

    fn paused(&self) -> bool {
        self.shared.flags.load(Acquire) & F_CORKED != 0
    }

    fn read(&mut self, out: &mut [f32]) -> usize {
        self.discard_flushed();
        while self.debt > 0 {
            let n = (self.debt as usize).min(self.queued());
            if n == 0 {
                break;
            }
            match self.ring.read_chunk(n * self.channels) {
                Ok(c) => c.commit_all(),
                Err(_) => break,
            }
            self.removed += n as u64;
            self.debt -= n as u64;
        }
        let mut flags = self.shared.flags.load(Acquire);
        if flags & F_PREBUF != 0 {
            self.shared.flags.fetch_and(!F_PREBUF, AcqRel);
            flags &= !F_PREBUF;
            if self.shared.prebuf.load(Relaxed) > 0 {
                self.in_prebuf = true;
            }
        }
        if flags & F_TRIGGER != 0 && flags & F_CORKED == 0 {
            self.shared.flags.fetch_and(!F_TRIGGER, AcqRel);
            if self.queued() > 0 {
                self.in_prebuf = false;
            }
        }
        let want = out.len() / self.channels;
        let n = self.readable(flags).min(want);
        if flags & F_CORKED != 0 {
            return 0;
        }
        if n > 0 {
            self.in_prebuf = false;
            if let Ok(chunk) = self.ring.read_chunk(n * self.channels) {
                let (a, b) = chunk.as_slices();
                out[..a.len()].copy_from_slice(a);
                out[a.len()..a.len() + b.len()].copy_from_slice(b);
                chunk.commit_all();
            }
            if self.dry {
                self.dry = false;
                self.shared.start_at.store(self.consumed, Relaxed);
                self.shared.starts.fetch_add(1, Release);
                self.shared.playing.store(true, Release);
                self.notify = true;
            }
            self.consumed += n as u64;
            self.removed += n as u64;
        }
        let no_prebuf = self.shared.prebuf.load(Relaxed) == 0;
        // A drain that took the last frame has run dry even when the read was served
        // whole: otherwise, had the drain ended on a cycle's boundary, data written
        // after its ack would play on without prebuffering or a STARTED.
        let drained = flags & F_DRAIN != 0 && self.queued() == 0;
        if (n < want || drained) && !self.in_prebuf {
            // The queue ran dry: an underrun unless the client is draining.
            if !self.dry {
                self.dry = true;
                // Without prebuffering the stream keeps running (on silence).
                self.shared
                    .playing
                    .store(no_prebuf && flags & F_DRAIN == 0, Release);
                if flags & F_DRAIN == 0 {
                    self.shared.underrun_at.store(self.consumed, Relaxed);
                    self.shared
                        .late_ns
                        .store(quaver_rt::monotonic_ns(), Relaxed);
                    self.shared.underruns.fetch_add(1, Release);
                    self.notify = true;
                }
            }
            if !no_prebuf {
                self.in_prebuf = true;
            } else if flags & F_DRAIN == 0 {
                // PulseAudio's memblockq without prebuffering hands out silence and
                // its read index moves on past the write index (so clocks built on
                // the read index, e.g. GStreamer's pulsesink, keep running); data
                // later written behind the read index is dropped.
                let gap = want - n;
                out[n * self.channels..want * self.channels].fill(0.0);
                self.consumed += gap as u64;
                self.debt += gap as u64;
                return want;
            }
        }
        n
    }

    fn draining(&self) -> bool {
        // A corked or draining stream's silence is on purpose: the frames in flight play
        // out. A prebuffering stream is not "draining": in freewheel mode the graph then
        // waits (bounded) for its data instead of rendering silence into the file.
        self.shared.flags.load(Acquire) & (F_DRAIN | F_CORKED) != 0
    }

    fn rate(&self) -> Option<u32> {
        Some(self.shared.rate.load(Relaxed)).filter(|&r| r != 0)
    }

    fn cycle_at(&mut self, cx: &CycleInfo) {
        self.cycle_ns = cx.time_ns;
        self.burst_goes_on = cx.another_cycle_follows();
    }

    fn report(&mut self, played: u64, delay: u32, _xruns: u32, _started: bool) {
        let s = &*self.shared;
        self.played = self.played.max(played.min(self.consumed));
        s.publish_position(self.consumed, delay, self.cycle_ns);
        s.removed.store(self.removed, Release);
        s.played.store(self.played, Release);
        s.prebuffering.store(self.in_prebuf, Relaxed);
        // Filling ahead, the request waits for the burst's last cycle, so it asks for
        // everything the refill takes and the client answers once per refill (its
        // answer wakes the I/O thread once) rather than mid-burst and again at the next
        // refill. Only while the ring still holds another cycle's worth: then the
        // burst goes on (if the other streams can deliver too; if not, the next cycle
        // is at the watermark and the request goes out then, with the ring not yet dry).
        let read = self.consumed - std::mem::replace(&mut self.reported_consumed, self.consumed);
        let hold =
            self.burst_goes_on && read > 0 && (self.ring.slots() / self.channels) as u64 >= read;
        if let Some(wire) = &self.wire
            && !hold
            && let Some(packet) = s.request.due(self.consumed)
        {
            let sent = self.send_lent(wire, &packet).unwrap_or_else(|| {
                if s.bell.may_send() {
                    wire.try_send(&packet)
                } else {
                    Sent::No
                }
            });
            match sent {
                Sent::Whole => s.request.sent(s.late(quaver_rt::monotonic_ns())),
                Sent::Torn => {
                    // The connection thread must finish the packet before the client
                    // can answer it.
                    s.request.sent(s.late(quaver_rt::monotonic_ns()));
                    self.notify = true;
                }
                Sent::No => {
                    s.request.unsent();
                    self.notify = true;
                }
            }
        }
        let wake = s.wake_at.load(Acquire);
        if self.consumed >= wake
            && s.wake_at
                .compare_exchange(wake, NEVER, AcqRel, Relaxed)
                .is_ok()
        {
            self.notify = true;
        }
        let drain = s.drain_at.load(Acquire);
        if self.played >= drain
            && s.drain_at
                .compare_exchange(drain, NEVER, AcqRel, Relaxed)
                .is_ok()
        {
            self.notify = true;
        }
        if self.notify {
            self.notify = false;
            s.bell.ring();
        }
    }
}

/// The RT writer of a record stream's ring.
pub struct RecSink {
    shared: Arc<RecShared>,
    ring: rtrb::Producer<f32>,
    channels: usize,
    produced: u64,
    /// `produced` at the last report: what one cycle brings is the difference.
    reported: u64,
    dropped: u64,
    full: bool,
    notify: bool,
}

impl RecSink {
    /// The writer over `ring`.
    pub fn new(shared: Arc<RecShared>, ring: rtrb::Producer<f32>, channels: usize) -> Self {
        RecSink {
            shared,
            ring,
            channels: channels.max(1),
            produced: 0,
            reported: 0,
            dropped: 0,
            full: false,
            notify: false,
        }
    }
}

impl FrameSink for RecSink {
    fn write(&mut self, frames: &[f32]) -> usize {
        let total = frames.len() / self.channels;
        if self.shared.flags.load(Acquire) & R_CORKED != 0 {
            return total;
        }
        let n = (self.ring.slots() / self.channels).min(total);
        if n > 0
            && let Ok(mut chunk) = self.ring.write_chunk(n * self.channels)
        {
            let (a, b) = chunk.as_mut_slices();
            let split = a.len();
            a.copy_from_slice(&frames[..split]);
            b.copy_from_slice(&frames[split..n * self.channels]);
            chunk.commit_all();
            self.produced += n as u64;
        }
        if n < total {
            self.dropped += (total - n) as u64;
            if !self.full {
                self.full = true;
                self.shared.overflows.fetch_add(1, Release);
                self.notify = true;
            }
        } else {
            self.full = false;
        }
        total
    }

    fn rate(&self) -> Option<u32> {
        Some(self.shared.rate.load(Relaxed)).filter(|&r| r != 0)
    }

    fn report(&mut self, _overruns: u32, delay: u32) {
        let s = &*self.shared;
        s.produced.store(self.produced, Release);
        s.dropped.store(self.dropped, Relaxed);
        s.delay.store(delay, Relaxed);
        let cycle = self.produced - self.reported;
        self.reported = self.produced;
        s.cycle_frames
            .store(cycle.min(u32::MAX as u64) as u32, Relaxed);
        // Wake when the fragment is complete, or when waiting one more cycle would
        // overshoot it: the frames rendered now go out in this cycle instead of waiting
        // a whole extra quantum (a client whose fragment is under two quanta gets every
        // cycle's data as it is rendered).
        let wake = s.wake_at.load(Acquire);
        if (self.produced >= wake || self.produced + cycle > wake)
            && s.wake_at
                .compare_exchange(wake, NEVER, AcqRel, Relaxed)
                .is_ok()
        {
            self.notify = true;
        }
        if self.notify {
            self.notify = false;
            s.bell.ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bell() -> Arc<Bell> {
        Arc::new(Bell::new().unwrap())
    }

    fn rang(b: &Bell) -> bool {
        b.take()
    }

    /// A playback stream's RT side over a 64-sample ring: its bell, shared state, the
    /// ring's producer (the connection's end) and the source.
    fn play_source(
        prebuf: u32,
        corked: bool,
        channels: usize,
    ) -> (Arc<Bell>, Arc<PlayShared>, rtrb::Producer<f32>, PlaySource) {
        let b = bell();
        let shared = Arc::new(PlayShared::new(b.clone(), prebuf, corked));
        let (tx, rx) = rtrb::RingBuffer::new(64);
        let src = PlaySource::new(shared.clone(), rx, channels);
        (b, shared, tx, src)
    }

    #[test]
    fn prebuffers_then_plays_then_underruns_and_prebuffers_again() {
        let (b, shared, mut tx, mut src) = play_source(4, false, 2);
        let mut out = [0f32; 8];
        for x in 0..6 {
            tx.push(x as f32).unwrap(); // 3 frames < prebuf 4
        }
        assert_eq!(src.read(&mut out), 0);
        assert_eq!(src.available(), 0, "prebuffering: nothing readable yet");
        tx.push(6.0).unwrap();
        tx.push(7.0).unwrap();
        assert_eq!(src.read(&mut out[..4]), 2);
        assert_eq!(&out[..4], &[0.0, 1.0, 2.0, 3.0]);
        src.report(0, 0, 0, true);
        assert!(rang(&b), "start rings");
        assert_eq!(shared.starts.load(Relaxed), 1);
        assert_eq!(src.read(&mut out), 2);
        assert_eq!(shared.underruns.load(Relaxed), 1);
        src.report(0, 0, 0, true);
        assert!(rang(&b), "underrun rings");
        // Back to prebuffering: one frame is not enough.
        tx.push(8.0).unwrap();
        tx.push(9.0).unwrap();
        assert_eq!(src.read(&mut out), 0);
        // TRIGGER starts it anyway.
        shared.set_flag(F_TRIGGER, true);
        assert_eq!(src.read(&mut out), 1);
        assert_eq!(shared.starts.load(Relaxed), 2);
    }

    #[test]
    fn a_drain_ending_on_a_cycle_boundary_prebuffers_again() {
        let (_, shared, mut tx, mut src) = play_source(2, false, 1);
        let mut out = [0f32; 4];
        for x in 0..4 {
            tx.push(x as f32).unwrap();
        }
        assert_eq!(src.read(&mut out), 4);
        assert_eq!(shared.starts.load(Relaxed), 1);
        for x in 0..4 {
            tx.push(x as f32).unwrap();
        }
        shared.set_flag(F_DRAIN, true);
        // The drain's last frames fill the read exactly.
        assert_eq!(src.read(&mut out), 4);
        shared.set_flag(F_DRAIN, false);
        assert_eq!(shared.underruns.load(Relaxed), 0, "a drain is no underrun");
        // One frame written after the drain's ack waits for prebuf, and then starts.
        tx.push(1.0).unwrap();
        assert_eq!(src.read(&mut out), 0);
        tx.push(2.0).unwrap();
        assert_eq!(src.read(&mut out), 2);
        assert_eq!(shared.starts.load(Relaxed), 2);
    }

    #[test]
    fn without_prebuf_the_read_index_runs_on_over_silence_and_late_data_is_dropped() {
        let (_, shared, mut tx, mut src) = play_source(0, false, 1);
        let mut out = [9f32; 4];
        tx.push(1.0).unwrap();
        tx.push(2.0).unwrap();
        // Two frames of data, then silence: the whole read is served.
        assert_eq!(src.read(&mut out), 4);
        assert_eq!(out, [1.0, 2.0, 0.0, 0.0]);
        assert_eq!(shared.underruns.load(Relaxed), 1);
        assert!(shared.playing.load(Relaxed), "still running on silence");
        src.report(0, 0, 0, true);
        assert_eq!(shared.consumed.load(Relaxed), 4);
        // Frames written behind the read index (the two silent ones) are skipped.
        for x in [3.0, 4.0, 5.0] {
            tx.push(x).unwrap();
        }
        let mut out = [9f32; 2];
        assert_eq!(src.read(&mut out), 2);
        assert_eq!(out, [5.0, 0.0]);
        // Draining: no more silence, so the drain can complete.
        shared.set_flag(F_DRAIN, true);
        assert_eq!(src.read(&mut out), 0);
    }

    #[test]
    fn cork_flush_and_wake_thresholds() {
        let (b, shared, mut tx, mut src) = play_source(0, true, 1);
        let mut out = [0f32; 4];
        for x in 0..10 {
            tx.push(x as f32).unwrap();
        }
        assert_eq!(src.read(&mut out), 0, "corked");
        shared.set_flag(F_CORKED, false);
        shared.flush_to.store(6, Release);
        shared.wake_at.store(3, Release);
        assert_eq!(src.read(&mut out), 4);
        assert_eq!(out, [6.0, 7.0, 8.0, 9.0]);
        src.report(4, 0, 0, true);
        assert!(rang(&b));
        assert_eq!(shared.wake_at.load(Relaxed), NEVER);
        assert_eq!(shared.removed.load(Relaxed), 10);
        assert_eq!(shared.consumed.load(Relaxed), 4);
        // Draining: running dry is no underrun, and the drain target rings once.
        shared.set_flag(F_DRAIN, true);
        shared.drain_at.store(4, Release);
        assert_eq!(src.read(&mut out), 0);
        src.report(4, 0, 0, true);
        assert!(rang(&b));
        assert_eq!(shared.underruns.load(Relaxed), 0);
    }

    /// Filling ahead, the armed request waits for the burst's last cycle and then asks
    /// for everything the burst read: one request, one answer per refill.
    #[test]
    fn filling_ahead_the_request_goes_out_at_the_bursts_last_cycle() {
        use crate::rt::rtwire::{Periods, RtWire, request_packet};
        use std::io::Read;
        let (ours, mut client) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        client.set_nonblocking(true).unwrap();
        let wire = Arc::new(RtWire::new(&ours).unwrap());
        let (b, shared, mut tx, src) = play_source(0, false, 1);
        let mut src = src.with_wire(Some(wire));
        for x in 0..60 {
            tx.push(x as f32).unwrap();
        }
        // Due once 8 frames are read, for 8 bytes plus what was read past that (one
        // byte a frame).
        shared.request.arm(1, 8, 0, 0, 1, Periods::NONE);
        // A 100-frame fill with 10-frame cycles: the device holds 60, 70, 80, 90 before
        // the cycles; after the one at 90 no other quantum fits.
        let mut out = [0f32; 10];
        let mut got = Vec::new();
        for queued in [60, 70, 80, 90] {
            let cx = CycleInfo {
                frames: 10,
                rate: 48_000,
                playback_delay: queued,
                fill_frames: 100,
                ..CycleInfo::default()
            };
            src.prepare();
            assert_eq!(src.read(&mut out), 10);
            src.cycle_at(&cx);
            // The I/O thread took any bell (a pending one would keep the RT side from
            // sending).
            b.take();
            src.report(0, queued as u32, 0, true);
            let mut buf = [0u8; 64];
            got.push(client.read(&mut buf).map_or(0, |n| n));
            if got.last() != Some(&0) {
                assert_eq!(buf[..REQUEST_LEN], request_packet(1, 40)[..]);
            }
        }
        assert_eq!(got, [0, 0, 0, REQUEST_LEN], "sent at the last cycle only");
        // Not filling ahead, a due request goes out in its cycle.
        shared.request.sent(false);
        shared.request.disarm();
        shared.request.arm(1, 45, 40, 0, 1, Periods::NONE);
        src.cycle_at(&CycleInfo {
            frames: 10,
            ..CycleInfo::default()
        });
        assert_eq!(src.read(&mut out), 10);
        b.take();
        src.report(0, 10, 0, true);
        let mut buf = [0u8; 64];
        assert_eq!(client.read(&mut buf).unwrap(), REQUEST_LEN);
    }

    #[test]
    fn record_sink_drops_when_full_and_counts_once() {
        let b = bell();
        let shared = Arc::new(RecShared::new(b.clone(), false));
        let (tx, mut rx) = rtrb::RingBuffer::new(8);
        let mut sink = RecSink::new(shared.clone(), tx, 2);
        shared.wake_at.store(2, Release);
        assert_eq!(sink.write(&[1.0; 6]), 3);
        sink.report(0, 0);
        assert!(rang(&b));
        assert_eq!(sink.write(&[2.0; 6]), 3);
        assert_eq!(sink.write(&[2.0; 6]), 3);
        sink.report(0, 0);
        assert_eq!(shared.overflows.load(Relaxed), 1);
        assert_eq!(shared.produced.load(Relaxed), 4);
        assert_eq!(shared.dropped.load(Relaxed), 5);
        assert_eq!(rx.slots(), 8);
        rx.read_chunk(8).unwrap().commit_all();
        assert_eq!(sink.write(&[3.0; 2]), 1);
        assert_eq!(shared.overflows.load(Relaxed), 1);
    }

    #[test]
    fn record_sink_rings_when_the_next_cycle_would_overshoot_the_fragment() {
        let b = bell();
        let shared = Arc::new(RecShared::new(b.clone(), false));
        let (tx, _rx) = rtrb::RingBuffer::new(1024);
        let mut sink = RecSink::new(shared.clone(), tx, 1);
        // A fragment of 100 frames, cycles of 64: waiting for the fragment to fill would
        // hold the first cycle's frames a whole extra cycle.
        shared.wake_at.store(100, Release);
        sink.write(&[0.0; 64]);
        sink.report(0, 0);
        assert!(rang(&b), "64 queued + 64 next > 100: deliver now");
        assert_eq!(shared.cycle_frames.load(Relaxed), 64);
        // A fragment of four cycles: three cycles wait, the fourth rings.
        shared.wake_at.store(64 + 256, Release);
        for _ in 0..3 {
            sink.write(&[0.0; 64]);
            sink.report(0, 0);
            assert!(
                !rang(&b),
                "at most 192 queued, 256 after the next cycle: wait"
            );
        }
        sink.write(&[0.0; 64]);
        sink.report(0, 0);
        assert!(rang(&b), "the fragment is full");
    }
}
