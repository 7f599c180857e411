//! The real-time half of a PulseAudio stream: a `FrameSource` / `FrameSink` over an
//! `rtrb` ring of interleaved f32 at the client's rate and layout, plus the atomics
//! through which it and the connection thread see each other.
//!
//! The front-end's I/O thread decodes the client's samples and pushes them (playback), or
//! pops and encodes them (record); for a lone low-latency playback stream the RT thread
//! may take its client's blocks in itself ([`crate::intake`]). Everything here runs on
//! the RT thread: no allocation, no locks, no blocking; one system call is the write
//! that rings the I/O thread's [`Bell`], made only when the I/O thread asked for it (a
//! request threshold, a drain target, a fragment) or when something it must report
//! happened (stream started, underflow, overflow), and at most once until the I/O
//! thread has woken: however many streams cross a threshold in one cycle, the I/O
//! thread wakes once. The one other system call is a non-blocking `send` of a stream's
//! REQUEST to its client (or the srbchannel's wakeup pipe write), when the connection
//! armed one ([`crate::rtwire`]): that replaces the ring.
//!
//! PulseAudio's prebuffering lives here rather than in the engine's adapter: a stream
//! starts once `prebuf` bytes are queued (or on TRIGGER/DRAIN), and after running dry it
//! waits for `prebuf` again, as `pa_memblockq` does.

use crate::intake::{MAX_RELEASES, PlayTiming, RELEASE_LEN, RtIntake};
use crate::rtwire::{ArmedRequest, REQUEST_LEN, RtWire, Sent};
use quaver_engine::stream::{FrameSink, FrameSource};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

/// Playback flag: the stream is corked (paused); nothing is read.
pub const F_CORKED: u32 = 1;
/// Playback flag: the client drains; prebuffering is off and running dry is the end.
pub const F_DRAIN: u32 = 2;
/// Playback flag (one-shot): leave prebuffering now (TRIGGER).
pub const F_TRIGGER: u32 = 4;
/// Playback flag (one-shot): start prebuffering again (PREBUF).
pub const F_PREBUF: u32 = 8;

/// "Never" for the wake thresholds.
pub const NEVER: u64 = u64::MAX;

/// How long a stream stays asked sooner after its client answered late or underran
/// (PulseAudio's sinks similarly raise a watermark on an underrun and lower it slowly).
pub const LATE_HOLD_NS: u64 = 10_000_000_000;

/// An eventfd doorbell that is written at most once between two [`Bell::take`]s, so a
/// burst of rings (many streams in one cycle, many events) costs one system call and
/// one wakeup. Ringing is lock-free and RT-safe.
#[derive(Debug)]
pub struct Bell {
    fd: OwnedFd,
    rung: AtomicBool,
    /// CLOCK_MONOTONIC ns of the last eventfd write and of the last take (diagnostics:
    /// an underrun log tells a late wakeup from a missing ring).
    written_ns: AtomicU64,
    taken_ns: AtomicU64,
    /// Set by the waiter while at most one stream has a request armed.
    solo: AtomicBool,
}

impl Bell {
    /// A new, quiet doorbell (non-blocking, close-on-exec eventfd).
    pub fn new() -> rustix::io::Result<Bell> {
        use rustix::event::{EventfdFlags, eventfd};
        Ok(Bell {
            fd: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
            rung: AtomicBool::new(false),
            written_ns: AtomicU64::new(0),
            taken_ns: AtomicU64::new(0),
            solo: AtomicBool::new(true),
        })
    }

    /// Nanoseconds since the bell was last written and last taken (`u64::MAX`: never).
    pub fn ages_ns(&self) -> (u64, u64) {
        let now = quaver_rt::monotonic_ns();
        let age = |t: u64| {
            if t == 0 {
                u64::MAX
            } else {
                now.saturating_sub(t)
            }
        };
        (
            age(self.written_ns.load(Relaxed)),
            age(self.taken_ns.load(Relaxed)),
        )
    }

    /// CLOCK_MONOTONIC ns of the last eventfd write (0: never).
    pub fn written_at_ns(&self) -> u64 {
        self.written_ns.load(Relaxed)
    }

    /// Wakes the waiter unless a ring is already pending.
    pub fn ring(&self) {
        if !self.rung.swap(true, AcqRel) {
            self.written_ns.store(quaver_rt::monotonic_ns(), Relaxed);
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// Whether the RT side may send a request itself (`crate::rtwire`) rather than
    /// ring, for a stream whose intake it does not hold (those it always sends for:
    /// see `PlaySource::send_lent`): while at most one stream has a request armed, and
    /// not while a ring is pending. Sending saves a wakeup only when it is the one thing
    /// the waiter would have woken for. Several streams are kept aligned by the bell
    /// anyway (a bell wakeup tops up every stream, so they reach their thresholds in
    /// the same cycle and share the next wakeup): sending for them too saved nothing
    /// measurable (8 streams at 20 ms: 660–700 wakeups/s either way) and would only put
    /// their sockets on the RT thread's cycle.
    pub fn may_send(&self) -> bool {
        self.solo.load(Acquire) && !self.rung.load(Acquire)
    }

    /// Called by the waiter after each pass with the number of armed requests.
    pub fn set_armed(&self, armed: usize) {
        self.solo.store(armed <= 1, Release);
    }

    /// Called by the waiter after waking, before it looks at what changed: consumes
    /// the eventfd count, then re-arms the bell. Returns whether it had been rung.
    ///
    /// The order matters: re-arming first would let a ring land between the two steps,
    /// its write then consumed here while the bell stays marked rung, and every later
    /// ring would be swallowed. Reading first, a ring that lands in between finds the
    /// bell still marked and writes nothing, which is fine: it happened before the
    /// re-arm, so the waiter's look at the shared state that follows sees its effects.
    pub fn take(&self) -> bool {
        let mut b = [0u8; 8];
        let counted = rustix::io::read(&self.fd, &mut b).is_ok();
        let was = self.rung.swap(false, AcqRel);
        self.taken_ns.store(quaver_rt::monotonic_ns(), Relaxed);
        was || counted
    }
}

impl AsFd for Bell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// State of a playback stream shared between the RT thread and its connection.
#[derive(Debug)]
pub struct PlayShared {
    /// `F_*` bits, set by the connection.
    pub flags: AtomicU32,
    /// Prebuffer threshold in frames (0: start as soon as there is data).
    pub prebuf: AtomicU32,
    /// Frames pushed into the ring (by the connection, or the RT thread's intake).
    pub pushed: AtomicU64,
    /// Frames read from the ring for playback.
    pub consumed: AtomicU64,
    /// Frames removed from the ring: consumed plus discarded by flushes.
    pub removed: AtomicU64,
    /// Ring position (frames ever pushed) up to which queued frames are discarded.
    pub flush_to: AtomicU64,
    /// Stream frames that have reached the device output.
    pub played: AtomicU64,
    /// Frames still between the read position and the listener.
    pub delay: AtomicU32,
    /// Times playback (re)started after prebuffering or an underrun.
    pub starts: AtomicU32,
    /// Times the queue ran dry while playing (not draining).
    pub underruns: AtomicU32,
    /// `consumed` at the last underrun.
    pub underrun_at: AtomicU64,
    /// `consumed` at the last start.
    pub start_at: AtomicU64,
    /// True between a start and the next underrun.
    pub playing: AtomicBool,
    /// True while waiting for the prebuffer to fill.
    pub prebuffering: AtomicBool,
    /// Wake the connection when `consumed` reaches this.
    pub wake_at: AtomicU64,
    /// Wake the connection when `played` reaches this.
    pub drain_at: AtomicU64,
    /// The client's rate after UPDATE_PLAYBACK_STREAM_SAMPLE_RATE (0: as created).
    pub rate: AtomicU32,
    /// The I/O thread's doorbell.
    pub bell: Arc<Bell>,
    /// The next REQUEST, when the connection lets the RT side send it.
    pub request: ArmedRequest,
    /// CLOCK_MONOTONIC ns of the client's last late answer or underrun (0: none):
    /// for a while after it the client is asked sooner, so it keeps more queued.
    pub late_ns: AtomicU64,
    /// An answer that takes longer than this after its request is late (set by the
    /// connection; 0: answers are not timed here).
    pub late_after_ns: AtomicU64,
    /// Late answers timed here (logged at the end).
    pub late_answers: AtomicU32,
}

impl PlayShared {
    /// The stream's state as a latency reply reports it (both the connection's replies
    /// and the RT thread's read it here).
    pub fn timing(&self) -> PlayTiming {
        PlayTiming {
            consumed: self.consumed.load(Acquire),
            delay: self.delay.load(Relaxed),
            playing: self.playing.load(Acquire) && self.flags.load(Acquire) & F_CORKED == 0,
            start_at: self.start_at.load(Relaxed),
        }
    }

    /// Fresh state; `corked` for streams created with START_CORKED.
    pub fn new(bell: Arc<Bell>, prebuf_frames: u32, corked: bool) -> Self {
        PlayShared {
            flags: AtomicU32::new(if corked { F_CORKED } else { 0 }),
            prebuf: AtomicU32::new(prebuf_frames),
            pushed: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            removed: AtomicU64::new(0),
            flush_to: AtomicU64::new(0),
            played: AtomicU64::new(0),
            delay: AtomicU32::new(0),
            starts: AtomicU32::new(0),
            underruns: AtomicU32::new(0),
            underrun_at: AtomicU64::new(0),
            start_at: AtomicU64::new(0),
            playing: AtomicBool::new(false),
            prebuffering: AtomicBool::new(true),
            wake_at: AtomicU64::new(NEVER),
            rate: AtomicU32::new(0),
            drain_at: AtomicU64::new(NEVER),
            bell,
            request: ArmedRequest::default(),
            late_ns: AtomicU64::new(0),
            late_after_ns: AtomicU64::new(0),
            late_answers: AtomicU32::new(0),
        }
    }

    /// Whether the client answered late or underran within the last `LATE_HOLD_NS`.
    pub fn late(&self, now_ns: u64) -> bool {
        let t = self.late_ns.load(Relaxed);
        t != 0 && now_ns.saturating_sub(t) < LATE_HOLD_NS
    }

    /// Sets or clears flag bits.
    pub fn set_flag(&self, flag: u32, on: bool) {
        if on {
            self.flags.fetch_or(flag, AcqRel);
        } else {
            self.flags.fetch_and(!flag, AcqRel);
        }
    }
}

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
        }
    }

    /// Lets the RT side take the stream's blocks in itself when its connection lends it
    /// the intake for `channel` ([`crate::intake`]).
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

    fn report(&mut self, played: u64, delay: u32, _xruns: u32, _started: bool) {
        let s = &*self.shared;
        self.played = self.played.max(played.min(self.consumed));
        s.consumed.store(self.consumed, Release);
        s.removed.store(self.removed, Release);
        s.played.store(self.played, Release);
        s.delay.store(delay, Relaxed);
        s.prebuffering.store(self.in_prebuf, Relaxed);
        if let Some(wire) = &self.wire
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

/// Record flag: the stream is corked; captured frames are dropped, not queued.
pub const R_CORKED: u32 = 1;

/// State of a record stream shared between the RT thread and its connection.
#[derive(Debug)]
pub struct RecShared {
    /// `R_*` bits.
    pub flags: AtomicU32,
    /// Frames written into the ring.
    pub produced: AtomicU64,
    /// Frames dropped because the ring was full.
    pub dropped: AtomicU64,
    /// Frames popped and sent (written by the connection).
    pub sent: AtomicU64,
    /// Times the ring overflowed.
    pub overflows: AtomicU32,
    /// Capture delay in stream frames.
    pub delay: AtomicU32,
    /// Wake the connection when `produced` reaches this.
    pub wake_at: AtomicU64,
    /// The client's rate after UPDATE_RECORD_STREAM_SAMPLE_RATE (0: as created).
    pub rate: AtomicU32,
    /// The I/O thread's doorbell.
    pub bell: Arc<Bell>,
}

impl RecShared {
    /// Fresh state.
    pub fn new(bell: Arc<Bell>, corked: bool) -> Self {
        RecShared {
            flags: AtomicU32::new(if corked { R_CORKED } else { 0 }),
            produced: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            overflows: AtomicU32::new(0),
            delay: AtomicU32::new(0),
            wake_at: AtomicU64::new(NEVER),
            rate: AtomicU32::new(0),
            bell,
        }
    }
}

/// The RT writer of a record stream's ring.
pub struct RecSink {
    shared: Arc<RecShared>,
    ring: rtrb::Producer<f32>,
    channels: usize,
    produced: u64,
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
        let wake = s.wake_at.load(Acquire);
        if self.produced >= wake
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
    fn a_burst_of_rings_writes_the_eventfd_once_until_taken() {
        let b = bell();
        assert!(!b.take(), "quiet at first");
        for _ in 0..5 {
            b.ring();
        }
        // The eventfd counted exactly one write.
        let mut buf = [0u8; 8];
        rustix::io::read(&b.fd, &mut buf).unwrap();
        assert_eq!(u64::from_ne_bytes(buf), 1);
        b.ring();
        assert!(b.take(), "still marked rung until taken");
        assert!(!b.take());
        b.ring();
        rustix::io::read(&b.fd, &mut buf).unwrap();
        assert_eq!(u64::from_ne_bytes(buf), 1, "taking re-armed it");
    }

    /// A ringer racing a waiter: every ring must be followed by a wakeup that sees it.
    /// A lost wakeup (the bell left marked rung with the eventfd drained) shows up as
    /// the waiter's poll timing out while the ringer's last value is still unseen.
    #[test]
    fn racing_rings_and_takes_never_lose_a_wakeup() {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        const N: u64 = 200_000;
        let b = bell();
        let seq = Arc::new(AtomicU64::new(0));
        let (b2, s2) = (b.clone(), seq.clone());
        let ringer = std::thread::spawn(move || {
            for i in 1..=N {
                s2.store(i, Release);
                b2.ring();
            }
        });
        let mut seen = 0;
        let timeout = Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        while seen < N {
            let mut fds = [PollFd::new(&*b, PollFlags::IN)];
            let n = poll(&mut fds, Some(&timeout)).unwrap();
            assert!(n > 0, "lost wakeup: last seen {seen} of {N}");
            b.take();
            seen = seq.load(Acquire);
        }
        ringer.join().unwrap();
    }

    #[test]
    fn the_rt_side_sends_for_a_lone_stream_only() {
        let b = bell();
        assert!(b.may_send());
        b.set_armed(2);
        assert!(
            !b.may_send(),
            "two streams armed: the bell serves them together"
        );
        b.set_armed(1);
        assert!(b.may_send());
        b.ring();
        assert!(!b.may_send(), "a ring is pending: that wakeup serves it");
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
}
