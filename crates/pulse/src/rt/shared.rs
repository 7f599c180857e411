//! The state a pulse stream's RT side shares with its connection on the I/O thread:
//! atomics each side writes and the other reads, and the I/O thread's doorbell. Both
//! threads use it, so it sits below both (`transport`, `intake`, the connections).

use crate::rt::rtwire::ArmedRequest;
use crate::wire::convert::frames_to_usec;
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

    /// Whether the RT side may send a request itself (`crate::rt::rtwire`) rather than
    /// ring, for a stream whose intake it does not hold (those it always sends for:
    /// see `PlaySource::send_lent`): while at most one stream has a request armed, and
    /// not while a ring is pending. Sending saves a wakeup only when it is the one thing
    /// the waiter would have woken for. Several streams are kept aligned by the bell
    /// anyway (a bell wakeup tops up every stream, so they reach their thresholds in
    /// the same cycle and share the next wakeup): sending for them too saved nothing
    /// measurable and would only put their sockets on the RT thread's cycle.
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
    /// CLOCK_MONOTONIC ns at which `delay` held (the cycle's start; 0: not yet), and
    /// the version guard of the three figures a latency reply reads together (see
    /// [`PlayShared::timing`]).
    pub delay_at_ns: AtomicU64,
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
    ///
    /// The read index, the delay and the moment the delay held must come from the same
    /// cycle (a read index one cycle newer than its delay is a quantum off), so the
    /// writer ([`PlayShared::publish_position`]) zeroes `delay_at_ns` first and stores it
    /// last, and a reader that sees it change or zero reads again.
    pub fn timing(&self) -> PlayTiming {
        let mut t = PlayTiming::default();
        for _ in 0..4 {
            let at = self.delay_at_ns.load(Acquire);
            t.consumed = self.consumed.load(Acquire);
            t.delay = self.delay.load(Acquire);
            std::sync::atomic::fence(Acquire);
            t.at_ns = at;
            if at != 0 && self.delay_at_ns.load(Relaxed) == at {
                break;
            }
        }
        t.playing = self.playing.load(Acquire) && self.flags.load(Acquire) & F_CORKED == 0;
        t.start_at = self.start_at.load(Relaxed);
        t
    }

    /// Publishes a cycle's read index and the delay that held at `at_ns` (its start),
    /// as one for [`PlayShared::timing`]. *RT*.
    pub fn publish_position(&self, consumed: u64, delay: u32, at_ns: u64) {
        self.delay_at_ns.store(0, Relaxed);
        std::sync::atomic::fence(Release);
        self.delay.store(delay, Relaxed);
        self.consumed.store(consumed, Release);
        self.delay_at_ns.store(at_ns.max(1), Release);
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
            delay_at_ns: AtomicU64::new(0),
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

/// The lent stream as a latency reply reports it, read by the RT side when a query
/// comes (the same shared state the connection reads for its replies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlayTiming {
    /// Frames the stream has played into the graph (its read index).
    pub consumed: u64,
    /// Frames between the graph and the speaker.
    pub delay: u32,
    /// Whether it plays (started and not corked).
    pub playing: bool,
    /// The read index at which it last started.
    pub start_at: u64,
    /// CLOCK_MONOTONIC ns at which `delay` held (0: unknown).
    pub at_ns: u64,
}

impl PlayTiming {
    /// A latency reply's figures for a stream of `frame_bytes` frames at `rate`, as
    /// they stood at `query_ns` (CLOCK_MONOTONIC, see [`query_time_ns`]): the device
    /// latency (µs), the read index and how long it has played (bytes).
    ///
    /// Why at the query's moment: libpulse takes the reply's figures to hold when the
    /// query was sent, give or take the way back (it subtracts remote − local time, the
    /// "transport", from its receipt time), then interpolates from there. The published
    /// figures held at the start of the last cycle; while playing, the device delay
    /// shrinks in real time from then on (and was larger before), so it is moved to the
    /// query's moment. Unmoved it was off by up to a quantum either way: a reply just
    /// after a cycle over-reported the latency by the time since the cycle, and one
    /// answered by the RT thread at the next cycle's start, after the query had waited
    /// up to a quantum in the ring, under-reported it by that wait (libpulse counts the
    /// wait as transport and moves its clock ahead by it).
    pub fn figures(&self, frame_bytes: u64, rate: u32, query_ns: u64) -> (u64, i64, u64) {
        let playing_for = if self.playing {
            (self.consumed - self.start_at.min(self.consumed)) * frame_bytes
        } else {
            0
        };
        let mut delay_usec = frames_to_usec(self.delay as u64, rate) as i64;
        if self.playing && self.at_ns != 0 {
            delay_usec += (self.at_ns as i64 - query_ns as i64) / 1_000;
        }
        (
            delay_usec.max(0) as u64,
            (self.consumed * frame_bytes) as i64,
            playing_for,
        )
    }
}

/// Clients' query timestamps further back than this are not believed (a clock step, a
/// client on another host): the reply then holds at its own moment.
const QUERY_AGE_MAX_NS: u64 = 1_000_000_000;

/// The CLOCK_MONOTONIC moment of a latency query the client stamped `local_us` (µs of
/// its wall clock since the epoch), taking our wall clock `now_wall_ns` and monotonic
/// clock `now_mono_ns` read together; `now_mono_ns` when the stamp is in the future or
/// older than a second (the clocks are not the same clock).
pub fn query_time_ns(local_us: u64, now_wall_ns: u64, now_mono_ns: u64) -> u64 {
    let local_ns = local_us.saturating_mul(1_000);
    match now_wall_ns.checked_sub(local_ns) {
        Some(age) if age <= QUERY_AGE_MAX_NS => now_mono_ns.saturating_sub(age),
        _ => now_mono_ns,
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
    /// Wake the connection when `produced` reaches this, or would pass it in the
    /// next cycle.
    pub wake_at: AtomicU64,
    /// Frames the last cycle brought (stream frames).
    pub cycle_frames: AtomicU32,
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
            cycle_frames: AtomicU32::new(0),
            rate: AtomicU32::new(0),
            bell,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_reply_holds_at_the_moment_the_client_asked() {
        let s = PlayShared::new(bell(), 0, false);
        s.playing.store(true, Relaxed);
        // At the cycle that began at t = 10 s, 4800 frames read and 480 (10 ms at
        // 48 kHz) still ahead of the listener.
        let t0 = 10_000_000_000;
        s.publish_position(4_800, 480, t0);
        let t = s.timing();
        assert_eq!((t.consumed, t.delay, t.at_ns), (4_800, 480, t0));
        let sink_usec = |query_ns| t.figures(4, 48_000, query_ns).0;
        assert_eq!(sink_usec(t0), 10_000);
        // 3 ms later 3 ms of it have played; asked 4 ms before the cycle, the read
        // index was the same distance from the listener plus what played since.
        assert_eq!(sink_usec(t0 + 3_000_000), 7_000);
        assert_eq!(sink_usec(t0 - 4_000_000), 14_000);
        // Past the queue (the next cycle is late): nothing more is ahead.
        assert_eq!(sink_usec(t0 + 30_000_000), 0);
        // A paused stream's queue does not move.
        let paused = PlayTiming {
            playing: false,
            ..t
        };
        assert_eq!(paused.figures(4, 48_000, t0 + 3_000_000).0, 10_000);
        assert_eq!(t.figures(4, 48_000, t0).1, 4_800 * 4);
    }

    #[test]
    fn a_query_stamped_by_the_client_is_placed_on_the_monotonic_clock() {
        let wall = 1_700_000_000_000_000_000u64;
        let mono = 5_000_000_000u64;
        // Sent 2.5 ms ago by the wall clock: 2.5 ms ago by the monotonic one.
        assert_eq!(
            query_time_ns(wall / 1_000 - 2_500, wall, mono),
            mono - 2_500_000
        );
        // A stamp in the future or over a second old is not the same clock: now.
        assert_eq!(query_time_ns(wall / 1_000 + 10, wall, mono), mono);
        assert_eq!(query_time_ns(wall / 1_000 - 2_000_000, wall, mono), mono);
    }

    fn bell() -> Arc<Bell> {
        Arc::new(Bell::new().unwrap())
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
}
