//! The front-end's I/O thread: every PulseAudio connection is served by one thread that
//! sleeps in `epoll` on the client sockets and one shared [`Bell`].
//!
//! Why one thread and not one per client: the wakeups of a playing client come in
//! pairs (its stream asks for data; the client's data arrives), and with a thread per
//! client every stream pays both on its own. With one thread, every stream that crossed
//! its request threshold in a cycle is served in the same wakeup (the RT side rings the
//! shared bell once per cycle at most), and replies from several clients that arrive
//! together are read in one pass. PulseAudio and pipewire-pulse serve their clients
//! from one main loop for the same reason. Nothing a connection does blocks: the engine's
//! control calls queue a plan and return, sockets are non-blocking and buffered.
//!
//! The thread runs at normal priority while only long-buffered streams play. At nice −11
//! (PulseAudio's main-loop level) it preempted each client the moment that client's data
//! arrived, so 32 low-latency streams cost it 1 870 wakeups/s instead of 150: at normal
//! priority the replies of several clients pile up while it waits for the CPU and are read
//! in one pass. While a stream leaves its client less than twice
//! `PulseOptions::realtime_io_below_usec` to answer a request ([`FIFO_FACTOR`]), the
//! thread is SCHED_FIFO ([`IoPriority`]): it is then never kept from a client's answer
//! by busy CPUs, and batches on purpose instead ([`GATHER_MAX_USEC`]).

use crate::conn::{Conn, PlaybackSummary};
use crate::io::shared::IoShared;
use crate::rt::shared::Bell;
use crate::state::{IO_RT_PRIORITY, Server};
use rustix::buffer::spare_capacity;
use rustix::event::epoll::{self, EventData, EventFlags};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Bytes read from a socket per `read`.
const READ_CHUNK: usize = 64 * 1024;
/// epoll token of the bell; connections count up from 1 and are never reused.
const BELL: u64 = 0;
/// Set in the epoll token of a connection's srbchannel wakeup descriptor.
const SRB: u64 = 1 << 63;

/// A pass of the loop that starts this long after the bell was rung, or takes this long,
/// is logged (debug level) with where its time went.
const SLOW_PASS_NS: u64 = 2_000_000;

/// Where one pass of the loop spent its time, taken only while debug logging is on.
///
/// Why: a stream that leaves its client 2.5 ms to answer underruns when this thread
/// answers its bell late. The underrun log says *that* it was late; this says whether the
/// thread slept through the ring (woken late: preempted or the vCPU stolen) or was busy,
/// and if busy, in which step and whether it blocked (voluntary switches: a lock, a page
/// fault from disk) or was preempted (involuntary).
struct PassClock {
    slept_at: u64,
    before: Option<quaver_rt::ThreadUsage>,
    woke: u64,
    rung_at: u64,
    /// When each step ended: sockets read, srbchannels looked at, bell handled, streams
    /// serviced ([`PassClock::mark`]'s index).
    marks: [u64; 4],
    /// The client whose single step took longest, and how long (ns).
    slowest: (u32, u64),
}

impl PassClock {
    fn start() -> Option<PassClock> {
        tracing::enabled!(tracing::Level::DEBUG).then(|| PassClock {
            slept_at: quaver_rt::monotonic_ns(),
            before: quaver_rt::thread_usage().ok(),
            woke: 0,
            rung_at: 0,
            marks: [0; 4],
            slowest: (0, 0),
        })
    }

    /// The wait returned: the time, and the last ring (the one that woke us, if any).
    fn woke(&mut self, bell: &Bell) {
        self.woke = quaver_rt::monotonic_ns();
        self.rung_at = bell.written_at_ns();
    }

    fn mark(&mut self, step: usize) {
        self.marks[step] = quaver_rt::monotonic_ns();
    }

    /// Times one connection's step from `t0`.
    fn conn_step(&mut self, client: u32, t0: u64) {
        let d = quaver_rt::monotonic_ns().saturating_sub(t0);
        if d > self.slowest.1 {
            self.slowest = (client, d);
        }
    }

    fn finish(self, bell_fired: bool) {
        let end = quaver_rt::monotonic_ns();
        let late = wake_delay(bell_fired, self.rung_at, self.slept_at, self.woke);
        let work = end.saturating_sub(self.woke);
        if late < SLOW_PASS_NS && work < SLOW_PASS_NS {
            return;
        }
        let ms = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
        let [read, srb, bell, pump] = self.marks;
        let usage = match (self.before, quaver_rt::thread_usage().ok()) {
            (Some(a), Some(b)) => {
                let d = b.since(&a);
                format!(
                    "{} blocking and {} preempting switches, {} page faults ({} from disk) \
                     since it went to sleep",
                    d.voluntary,
                    d.involuntary,
                    d.minor_faults + d.major_faults,
                    d.major_faults
                )
            }
            _ => "no usage counts".into(),
        };
        tracing::debug!(
            "pulse I/O thread: woke {:.2} ms after the bell; pass took {:.2} ms (sockets \
             {:.2}, srbchannels {:.2}, bell {:.2}, streams {:.2}; slowest client {} at \
             {:.2} ms); {usage}",
            late as f64 / 1e6,
            work as f64 / 1e6,
            ms(self.woke, read),
            ms(read, srb),
            ms(srb, bell),
            ms(bell, pump),
            self.slowest.0,
            self.slowest.1 as f64 / 1e6,
        );
    }
}

/// How long after the bell rang the thread woke, when the ring is what woke it: only a
/// ring that came while the thread slept measures the wakeup (one that came during the
/// previous pass is answered by a pass that starts without sleeping).
fn wake_delay(bell_fired: bool, rung_at: u64, slept_at: u64, woke: u64) -> u64 {
    if bell_fired && rung_at > slept_at {
        woke.saturating_sub(rung_at)
    } else {
        0
    }
}

struct Entry {
    conn: Conn,
    interest: EventFlags,
    /// Its srbchannel's wakeup descriptor is in the epoll set.
    srb: bool,
}

/// Ends connection `key`: out of the epoll set, its streams and client object removed.
fn bury(
    conns: &mut BTreeMap<u64, Entry>,
    ep: &rustix::fd::OwnedFd,
    srb_keys: &mut Vec<u64>,
    key: u64,
    why: &str,
) {
    let Some(mut e) = conns.remove(&key) else {
        return;
    };
    let _ = epoll::delete(ep, e.conn.sock());
    if e.srb {
        if let Some(fd) = e.conn.srb_wake_fd() {
            let _ = epoll::delete(ep, fd);
        }
        srb_keys.retain(|k| *k != key);
    }
    if catch_unwind(AssertUnwindSafe(|| e.conn.close(why))).is_err() {
        tracing::error!("pulse: cleaning up a connection failed");
    }
}

/// Runs a connection step; a panic costs that client its connection, never the thread.
fn guarded(conn: &mut Conn, f: impl FnOnce(&mut Conn) -> Result<(), String>) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| f(conn))) {
        Ok(r) => r,
        Err(_) => Err("panic".into()),
    }
}

/// The I/O thread's scheduling class, raised while a low-latency stream plays.
///
/// Why: with `paplay --latency-msec=5` a client has about 2.5 ms to answer each request.
/// Instrumented runs on this project's 2-vCPU VM showed every underrun of such a stream
/// came after the I/O thread, a normal thread, had not run for 4–5.5 ms (the client
/// answered each request within 40 µs); with the thread at SCHED_FIFO 1 they became
/// rarer (docs/pulse.md, "Threads"). At normal latencies it stays a normal thread for the
/// batching described above.
#[derive(Default)]
struct IoPriority {
    boosted: bool,
    refused: bool,
}

impl IoPriority {
    fn follow(&mut self, urgent: bool) {
        if urgent == self.boosted || (urgent && self.refused) {
            return;
        }
        let tid = quaver_rt::Tid::current();
        if urgent {
            match quaver_rt::set_fifo(tid, IO_RT_PRIORITY) {
                Ok(()) => {
                    self.boosted = true;
                    tracing::debug!(
                        "pulse I/O thread: SCHED_FIFO {IO_RT_PRIORITY} while a low-latency \
                         stream plays"
                    );
                }
                Err(e) => {
                    self.refused = true;
                    tracing::info!(
                        "pulse I/O thread: SCHED_FIFO refused ({e}); low-latency streams may \
                         underrun while the CPUs are busy"
                    );
                }
            }
        } else {
            self.boosted = false;
            match quaver_rt::set_normal(tid) {
                Ok(()) => tracing::debug!("pulse I/O thread: normal scheduling again"),
                Err(e) => tracing::warn!("pulse I/O thread: cannot leave SCHED_FIFO: {e}"),
            }
        }
    }
}

/// A stream whose client has less than this many times `realtime_io_below_usec` to
/// answer makes the I/O thread SCHED_FIFO. Under load it matters: `paplay
/// --latency-msec=20` (10 ms) alone under `stress-ng --cpu 6 --switch 2` underran 11, 73
/// and 8 times in 25 s with a normal thread, 0, 1 and 0 with SCHED_FIFO (every underrun
/// logged: the request 8 ms old, its answer not read); 8 such streams under 6 CPU hogs,
/// see [`GATHER_MAX_USEC`].
const FIFO_FACTOR: u64 = 2;

/// How long the SCHED_FIFO thread sleeps after a bell pass that asked several streams
/// for data before it reads their answers (and, once per bell, after the first answer
/// that woke it otherwise): at most this, and never more than an eighth of the shortest
/// client's time to answer.
///
/// Why: at SCHED_FIFO the thread preempts each client the moment its answer arrives, so
/// N streams asked together cost N wakeups (8 streams at 20 ms: 1 070/s against 570 for
/// the normal thread, which waits for a CPU while the answers pile up). Sleeping a
/// moment lets the clients run and answer, and one pass reads them all: by hand (5 s,
/// per thread from /proc) 8 streams at 20 ms cost the thread 253–263 wakeups/s against
/// 286–303 for the normal thread, 32 streams 288 against 644. And the thread keeps its
/// priority, which is what keeps streams from underrunning while the CPUs are busy
/// (`quaver-bench peers --under-load`, 8 streams at 20 ms under 6 CPU hogs on 2 cores,
/// underruns per 20 s: normal thread 68, 47, 71; SCHED_FIFO without this 10, 3; with it
/// 5, 19; PulseAudio 33, 22, 34 and 26, 25 in the same runs).
const GATHER_MAX_USEC: u64 = 1_000;

/// How long the thread sleeps at most while the RT thread holds an intake: the
/// watch on it costs five wakeups a second, against the ~25–125 a second it saves a
/// stream asked for data every 8–40 ms.
const INTAKE_WATCH_NS: i64 = 200_000_000;

/// Serves every connection until the process ends.
pub fn run(srv: Arc<Server>, io: Arc<IoShared>) -> std::io::Result<()> {
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    epoll::add(&ep, &*io.bell, EventData::new_u64(BELL), EventFlags::IN)?;
    let mut conns: BTreeMap<u64, Entry> = BTreeMap::new();
    let mut next_key = 1u64;
    let mut events = Vec::with_capacity(256);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut touched: Vec<u64> = Vec::new();
    let mut dead: Vec<(u64, String)> = Vec::new();
    // Connections with an srbchannel, and those whose wakeup descriptor fired.
    let mut srb_keys: Vec<u64> = Vec::new();
    let mut srb_woken: Vec<u64> = Vec::new();
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut priority = IoPriority::default();
    let below = srv.opts.realtime_io_below_usec;
    // Streams asked for data and not answered, and the gathering wait, as of the last
    // pass; whether this bell round has gathered already.
    let (mut awaiting, mut gather_usec, mut gathered) = (0usize, 0u64, false);
    let mut gather_now = false;
    let mut lent = 0usize;
    let intake_watch = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: INTAKE_WATCH_NS,
    };
    loop {
        events.clear();
        // pa_fdsem: tell each srbchannel client we are about to sleep, unless it has
        // posted already (then only look, don't sleep).
        let mut pending = false;
        for key in &srb_keys {
            if let Some(e) = conns.get_mut(key) {
                pending |= e.conn.srb_before_poll();
            }
        }
        // Right after a bell pass that asked several streams for data, the thread
        // sleeps a moment and then only looks: the answers come in that moment, and
        // none of them has to wake it.
        let after_bell = std::mem::take(&mut gather_now);
        if after_bell {
            std::thread::sleep(std::time::Duration::from_micros(gather_usec));
        }
        // While the RT thread holds an intake, look now and then whether it still
        // reads (see `conn::INTAKE_STALE_NS`).
        let timeout = if pending || after_bell {
            Some(&zero)
        } else if lent > 0 {
            Some(&intake_watch)
        } else {
            None
        };
        let mut clock = PassClock::start();
        match epoll::wait(&ep, spare_capacity(&mut events), timeout) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if let Some(c) = clock.as_mut() {
            c.woke(&io.bell);
        }
        if events.iter().any(|e| e.data.u64() == BELL) {
            gathered = false;
        } else if after_bell {
            gathered = true;
        } else if priority.boosted && awaiting >= 2 && !gathered && gather_usec > 0 {
            // Woken by the first of several answers: let the others come (see
            // GATHER_MAX_USEC), then read whatever is ready in one pass.
            gathered = true;
            std::thread::sleep(std::time::Duration::from_micros(gather_usec));
            let first = events.len();
            match epoll::wait(&ep, spare_capacity(&mut events), Some(&zero)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            // Level-triggered: what woke us is reported again; keep one of each.
            let mut i = first;
            while i < events.len() {
                let key = events[i].data.u64();
                if events[..first].iter().any(|e| e.data.u64() == key) {
                    events.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        let mut all = false;
        touched.clear();
        srb_woken.clear();
        for ev in events.iter().copied() {
            let (key, flags) = (ev.data.u64(), ev.flags);
            if key == BELL {
                all = true;
                continue;
            }
            if key & SRB != 0 {
                srb_woken.push(key & !SRB);
                continue;
            }
            let Some(e) = conns.get_mut(&key) else {
                continue;
            };
            touched.push(key);
            let t0 = clock.as_ref().map(|_| quaver_rt::monotonic_ns());
            let read = if flags.intersects(EventFlags::IN | EventFlags::HUP | EventFlags::ERR) {
                guarded(&mut e.conn, |c| c.on_readable(&mut buf))
            } else {
                Ok(())
            };
            if let (Some(c), Some(t0)) = (clock.as_mut(), t0) {
                c.conn_step(e.conn.client(), t0);
            }
            // At once, not at the end of the pass: a command read after this (from
            // another client in this pass) must find a client that hung up gone with its
            // streams, as it left first. pulsectl's suite asks for the monitor of a
            // stream whose player it has just killed and expects nothing.
            if let Err(why) = read {
                bury(&mut conns, &ep, &mut srb_keys, key, &why);
            }
        }
        if let Some(c) = clock.as_mut() {
            c.mark(0);
        }
        // Every srbchannel is looked at on every wakeup (one atomic load when idle):
        // that keeps the one-wakeup-per-cycle batching for ring traffic too.
        for key in &srb_keys {
            let Some(e) = conns.get_mut(key) else {
                continue;
            };
            if dead.iter().any(|(k, _)| k == key) {
                continue;
            }
            let woken = srb_woken.contains(key);
            match catch_unwind(AssertUnwindSafe(|| e.conn.on_srb(woken))) {
                Ok(Ok(true)) => touched.push(*key),
                Ok(Ok(false)) => {}
                Ok(Err(why)) => dead.push((*key, why)),
                Err(_) => dead.push((*key, "panic".into())),
            }
        }
        for (key, why) in dead.drain(..) {
            bury(&mut conns, &ep, &mut srb_keys, key, &why);
        }
        if let Some(c) = clock.as_mut() {
            c.mark(1);
        }
        if all {
            // Re-arm before looking at anything, so a ring that comes while we work
            // wakes us again instead of being lost.
            io.bell.take();
            let new: Vec<_> = std::mem::take(
                &mut *io
                    .incoming
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            for (sock, handle) in new {
                let client = handle.client;
                let conn = match Conn::new(srv.clone(), sock, handle) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("pulse client {client}: socket setup failed: {e}");
                        srv.lock().clients.remove(&client);
                        continue;
                    }
                };
                let key = next_key;
                next_key += 1;
                if let Err(e) =
                    epoll::add(&ep, conn.sock(), EventData::new_u64(key), EventFlags::IN)
                {
                    tracing::warn!("pulse client {client}: cannot watch its socket: {e}");
                    let mut conn = conn;
                    conn.close("cannot watch the socket");
                    continue;
                }
                conns.insert(
                    key,
                    Entry {
                        conn,
                        interest: EventFlags::IN,
                        srb: false,
                    },
                );
            }
            touched.clear();
            touched.extend(conns.keys().copied());
        }
        if let Some(c) = clock.as_mut() {
            c.mark(2);
        }
        touched.sort_unstable();
        touched.dedup();
        let due = all && conns.values().any(|e| e.conn.playback_due());
        for key in &touched {
            if dead.iter().any(|(k, _)| k == key) {
                continue;
            }
            let Some(e) = conns.get_mut(key) else {
                continue;
            };
            let t0 = clock.as_ref().map(|_| quaver_rt::monotonic_ns());
            let pumped = guarded(&mut e.conn, |c| c.pump(due));
            if let (Some(c), Some(t0)) = (clock.as_mut(), t0) {
                c.conn_step(e.conn.client(), t0);
            }
            if let Err(why) = pumped {
                dead.push((*key, why));
                continue;
            }
            if !e.srb
                && let Some(fd) = e.conn.srb_wake_fd()
            {
                if let Err(err) = epoll::add(&ep, fd, EventData::new_u64(key | SRB), EventFlags::IN)
                {
                    dead.push((*key, format!("epoll: {err}")));
                    continue;
                }
                e.srb = true;
                srb_keys.push(*key);
            }
            let want = if e.conn.wants_write() {
                EventFlags::IN | EventFlags::OUT
            } else {
                EventFlags::IN
            };
            if want != e.interest {
                match epoll::modify(&ep, e.conn.sock(), EventData::new_u64(*key), want) {
                    Ok(()) => e.interest = want,
                    Err(err) => dead.push((*key, format!("epoll: {err}"))),
                }
            }
        }
        if let Some(c) = clock.as_mut() {
            c.mark(3);
        }
        for (key, why) in dead.drain(..) {
            bury(&mut conns, &ep, &mut srb_keys, key, &why);
        }
        // One walk over the streams for the RT side's lone-sender rule, the I/O thread's
        // priority and its gathering wait.
        let mut sum = PlaybackSummary::default();
        for e in conns.values() {
            e.conn.add_playback_to(&mut sum);
        }
        let shortest = sum.shortest_low_water_usec;
        awaiting = sum.awaiting;
        lent = sum.lent;
        io.bell.set_armed(sum.armed);
        if below > 0 {
            priority.follow(shortest < FIFO_FACTOR * below);
        }
        gather_usec = (shortest / 8).min(GATHER_MAX_USEC);
        gather_now = all && priority.boosted && awaiting >= 2 && gather_usec > 0;
        if let Some(c) = clock {
            c.finish(all);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_ring_during_the_sleep_measures_the_wakeup() {
        // Slept at 100, rung at 150, woke at 2_150: 2 000 late.
        assert_eq!(wake_delay(true, 150, 100, 2_150), 2_000);
        // Rung during the previous pass (before the sleep): the wait returned at once.
        assert_eq!(wake_delay(true, 90, 100, 2_150), 0);
        // Woken by a socket, not the bell.
        assert_eq!(wake_delay(false, 150, 100, 2_150), 0);
    }
}
