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
//! The thread runs at normal priority while only long-buffered streams play: raised (to
//! PulseAudio's nice −11), it preempted each client the moment that client's data
//! arrived, instead of reading the replies of several clients in one pass. While a
//! stream leaves its client less than [`FIFO_FACTOR`] times
//! `PulseOptions::realtime_io_below_usec` to answer a request, the thread is SCHED_FIFO
//! ([`IoPriority`]): it is then never kept from a client's answer by busy CPUs, and
//! batches on purpose instead ([`GATHER_MAX_USEC`]).

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
/// Why: a low-latency stream's client has a few ms to answer each request, and such a
/// stream underran when this thread, at normal priority, was kept off the CPU longer
/// than that (docs/pulse.md, "Threads"). At normal latencies it stays a normal thread
/// for the batching described above.
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
/// answer makes the I/O thread SCHED_FIFO: under CPU load a normal thread reads such a
/// stream's answers too late, and it underruns.
const FIFO_FACTOR: u64 = 2;

/// How long the SCHED_FIFO thread sleeps after a bell pass that asked several streams
/// for data before it reads their answers (and, once per bell, after the first answer
/// that woke it otherwise): at most this, and never more than an eighth of the shortest
/// client's time to answer.
///
/// Why: at SCHED_FIFO the thread preempts each client the moment its answer arrives, so
/// N streams asked together would cost N wakeups; sleeping a moment lets the clients
/// answer, and one pass reads them all while the thread keeps its priority.
const GATHER_MAX_USEC: u64 = 1_000;

/// How long the thread sleeps at most while the RT thread holds an intake: the
/// watch on it costs five wakeups a second, against the ~25–125 a second it saves a
/// stream asked for data every 8–40 ms.
const INTAKE_WATCH_NS: i64 = 200_000_000;

/// No wait at all: only look at what is ready.
const ZERO: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};
/// The longest sleep while the RT thread holds an intake ([`INTAKE_WATCH_NS`]).
const INTAKE_WATCH: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: 0,
    tv_nsec: INTAKE_WATCH_NS,
};

/// The I/O thread's state, kept from one pass of its loop to the next.
struct IoLoop {
    srv: Arc<Server>,
    io: Arc<IoShared>,
    ep: rustix::fd::OwnedFd,
    conns: BTreeMap<u64, Entry>,
    next_key: u64,
    events: Vec<epoll::Event>,
    buf: Vec<u8>,
    touched: Vec<u64>,
    dead: Vec<(u64, String)>,
    /// Connections with an srbchannel, and those whose wakeup descriptor fired.
    srb_keys: Vec<u64>,
    srb_woken: Vec<u64>,
    priority: IoPriority,
    below: u64,
    /// Streams asked for data and not answered, and the gathering wait, as of the last
    /// pass; whether this bell round has gathered already; whether the next pass starts
    /// with the gathering wait.
    awaiting: usize,
    gather_usec: u64,
    gathered: bool,
    gather_now: bool,
    /// Intakes the RT thread holds, as of the last pass.
    lent: usize,
    /// At SCHED_FIFO, makes the thread sleep now and then when it is too busy to (see
    /// `quaver_rt::rttime`): RLIMIT_RTTIME would kill the daemon otherwise.
    rttime: quaver_rt::RttimeGuard,
}

/// Serves every connection until the process ends.
pub fn run(srv: Arc<Server>, io: Arc<IoShared>) -> std::io::Result<()> {
    let mut lp = IoLoop::new(srv, io)?;
    loop {
        lp.pass()?;
    }
}

impl IoLoop {
    fn new(srv: Arc<Server>, io: Arc<IoShared>) -> std::io::Result<IoLoop> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(&ep, &*io.bell, EventData::new_u64(BELL), EventFlags::IN)?;
        let below = srv.opts.realtime_io_below_usec;
        Ok(IoLoop {
            srv,
            io,
            ep,
            conns: BTreeMap::new(),
            next_key: 1,
            events: Vec::with_capacity(256),
            buf: vec![0u8; READ_CHUNK],
            touched: Vec::new(),
            dead: Vec::new(),
            srb_keys: Vec::new(),
            srb_woken: Vec::new(),
            priority: IoPriority::default(),
            below,
            awaiting: 0,
            gather_usec: 0,
            gathered: false,
            gather_now: false,
            lent: 0,
            rttime: quaver_rt::RttimeGuard::for_this_process(),
        })
    }

    /// One pass: wait, read what came, serve srbchannels, adopt new clients, pump the
    /// connections that have work, and follow the streams' needs.
    fn pass(&mut self) -> std::io::Result<()> {
        let Some((after_bell, mut clock)) = self.wait()? else {
            return Ok(());
        };
        if let Some(ran) = self.rttime.check() {
            let n = self.rttime.forced();
            let msg = format!(
                "pulse I/O thread: busy {:.1} ms without sleeping; slept {} µs so that \
                 RLIMIT_RTTIME does not end the daemon ({n} times so far)",
                ran as f64 / 1e6,
                quaver_rt::rttime::FORCED_SLEEP.as_micros(),
            );
            if n.is_power_of_two() {
                tracing::warn!("{msg}");
            } else {
                tracing::debug!("{msg}");
            }
        }
        self.gather(after_bell)?;
        let all = self.read_sockets(&mut clock);
        if let Some(c) = clock.as_mut() {
            c.mark(0);
        }
        self.serve_srbchannels();
        if let Some(c) = clock.as_mut() {
            c.mark(1);
        }
        if all {
            self.adopt_new();
        }
        if let Some(c) = clock.as_mut() {
            c.mark(2);
        }
        self.pump_touched(all, &mut clock);
        if let Some(c) = clock.as_mut() {
            c.mark(3);
        }
        self.bury_dead();
        self.follow_streams(all);
        if let Some(c) = clock {
            c.finish(all);
        }
        Ok(())
    }

    /// Sleeps in epoll until something is ready; returns whether this pass follows a
    /// gathering wait, and the pass's clock; `None` when the wait was interrupted.
    fn wait(&mut self) -> std::io::Result<Option<(bool, Option<PassClock>)>> {
        self.events.clear();
        // pa_fdsem: tell each srbchannel client we are about to sleep, unless it has
        // posted already (then only look, don't sleep).
        let mut pending = false;
        for key in &self.srb_keys {
            if let Some(e) = self.conns.get_mut(key) {
                pending |= e.conn.srb_before_poll();
            }
        }
        // Right after a bell pass that asked several streams for data, the thread
        // sleeps a moment and then only looks: the answers come in that moment, and
        // none of them has to wake it.
        let after_bell = std::mem::take(&mut self.gather_now);
        if after_bell {
            std::thread::sleep(std::time::Duration::from_micros(self.gather_usec));
        }
        // While the RT thread holds an intake, look now and then whether it still
        // reads (see `conn::INTAKE_STALE_NS`).
        let timeout = if pending || after_bell {
            Some(&ZERO)
        } else if self.lent > 0 {
            Some(&INTAKE_WATCH)
        } else {
            None
        };
        let mut clock = PassClock::start();
        match epoll::wait(&self.ep, spare_capacity(&mut self.events), timeout) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        if let Some(c) = clock.as_mut() {
            c.woke(&self.io.bell);
        }
        Ok(Some((after_bell, clock)))
    }

    /// Decides whether this bell round has gathered; woken at SCHED_FIFO by the first
    /// of several answers, waits for the others and adds them to the events.
    fn gather(&mut self, after_bell: bool) -> std::io::Result<()> {
        let events = &mut self.events;
        if events.iter().any(|e| e.data.u64() == BELL) {
            self.gathered = false;
        } else if after_bell {
            self.gathered = true;
        } else if self.priority.boosted
            && self.awaiting >= 2
            && !self.gathered
            && self.gather_usec > 0
        {
            // Woken by the first of several answers: let the others come (see
            // GATHER_MAX_USEC), then read whatever is ready in one pass.
            self.gathered = true;
            std::thread::sleep(std::time::Duration::from_micros(self.gather_usec));
            let first = events.len();
            match epoll::wait(&self.ep, spare_capacity(events), Some(&ZERO)) {
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
        Ok(())
    }

    /// Reads every socket that is ready and notes which srbchannels fired; returns
    /// whether the bell rang.
    fn read_sockets(&mut self, clock: &mut Option<PassClock>) -> bool {
        let mut all = false;
        self.touched.clear();
        self.srb_woken.clear();
        for ev in self.events.iter().copied() {
            let (key, flags) = (ev.data.u64(), ev.flags);
            if key == BELL {
                all = true;
                continue;
            }
            if key & SRB != 0 {
                self.srb_woken.push(key & !SRB);
                continue;
            }
            let Some(e) = self.conns.get_mut(&key) else {
                continue;
            };
            self.touched.push(key);
            let t0 = clock.as_ref().map(|_| quaver_rt::monotonic_ns());
            let buf = &mut self.buf;
            let read = if flags.intersects(EventFlags::IN | EventFlags::HUP | EventFlags::ERR) {
                guarded(&mut e.conn, |c| c.on_readable(buf))
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
                bury(&mut self.conns, &self.ep, &mut self.srb_keys, key, &why);
            }
        }
        all
    }

    /// Looks at every srbchannel on every wakeup (one atomic load when idle): that
    /// keeps the one-wakeup-per-cycle batching for ring traffic too.
    fn serve_srbchannels(&mut self) {
        for key in &self.srb_keys {
            let Some(e) = self.conns.get_mut(key) else {
                continue;
            };
            if self.dead.iter().any(|(k, _)| k == key) {
                continue;
            }
            let woken = self.srb_woken.contains(key);
            match catch_unwind(AssertUnwindSafe(|| e.conn.on_srb(woken))) {
                Ok(Ok(true)) => self.touched.push(*key),
                Ok(Ok(false)) => {}
                Ok(Err(why)) => self.dead.push((*key, why)),
                Err(_) => self.dead.push((*key, "panic".into())),
            }
        }
        self.bury_dead();
    }

    /// Ends the connections found dead during the pass.
    fn bury_dead(&mut self) {
        for (key, why) in self.dead.drain(..) {
            bury(&mut self.conns, &self.ep, &mut self.srb_keys, key, &why);
        }
    }

    /// Takes the clients the accept threads handed over; every connection is pumped
    /// in this pass.
    fn adopt_new(&mut self) {
        // Re-arm before looking at anything, so a ring that comes while we work
        // wakes us again instead of being lost.
        self.io.bell.take();
        let new: Vec<_> = std::mem::take(
            &mut *self
                .io
                .incoming
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (sock, handle) in new {
            let client = handle.client;
            let conn = match Conn::new(self.srv.clone(), sock, handle) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("pulse client {client}: socket setup failed: {e}");
                    self.srv.lock().clients.remove(&client);
                    continue;
                }
            };
            let key = self.next_key;
            self.next_key += 1;
            if let Err(e) = epoll::add(
                &self.ep,
                conn.sock(),
                EventData::new_u64(key),
                EventFlags::IN,
            ) {
                tracing::warn!("pulse client {client}: cannot watch its socket: {e}");
                let mut conn = conn;
                conn.close("cannot watch the socket");
                continue;
            }
            self.conns.insert(
                key,
                Entry {
                    conn,
                    interest: EventFlags::IN,
                    srb: false,
                },
            );
        }
        self.touched.clear();
        self.touched.extend(self.conns.keys().copied());
    }

    /// Pumps every connection touched in this pass (`all`: the bell rang), watches a
    /// new srbchannel and follows each socket's write interest.
    fn pump_touched(&mut self, all: bool, clock: &mut Option<PassClock>) {
        self.touched.sort_unstable();
        self.touched.dedup();
        let due = all && self.conns.values().any(|e| e.conn.playback_due());
        for key in &self.touched {
            if self.dead.iter().any(|(k, _)| k == key) {
                continue;
            }
            let Some(e) = self.conns.get_mut(key) else {
                continue;
            };
            let t0 = clock.as_ref().map(|_| quaver_rt::monotonic_ns());
            let pumped = guarded(&mut e.conn, |c| c.pump(due));
            if let (Some(c), Some(t0)) = (clock.as_mut(), t0) {
                c.conn_step(e.conn.client(), t0);
            }
            if let Err(why) = pumped {
                self.dead.push((*key, why));
                continue;
            }
            if !e.srb
                && let Some(fd) = e.conn.srb_wake_fd()
            {
                if let Err(err) =
                    epoll::add(&self.ep, fd, EventData::new_u64(key | SRB), EventFlags::IN)
                {
                    self.dead.push((*key, format!("epoll: {err}")));
                    continue;
                }
                e.srb = true;
                self.srb_keys.push(*key);
            }
            let want = if e.conn.wants_write() {
                EventFlags::IN | EventFlags::OUT
            } else {
                EventFlags::IN
            };
            if want != e.interest {
                match epoll::modify(&self.ep, e.conn.sock(), EventData::new_u64(*key), want) {
                    Ok(()) => e.interest = want,
                    Err(err) => self.dead.push((*key, format!("epoll: {err}"))),
                }
            }
        }
    }

    /// One walk over the streams for the RT side's lone-sender rule, the I/O thread's
    /// priority and its gathering wait.
    fn follow_streams(&mut self, all: bool) {
        let mut sum = PlaybackSummary::default();
        for e in self.conns.values() {
            e.conn.add_playback_to(&mut sum);
        }
        let shortest = sum.shortest_low_water_usec;
        self.awaiting = sum.awaiting;
        self.lent = sum.lent;
        self.io.bell.set_armed(sum.armed);
        if self.below > 0 {
            self.priority.follow(shortest < FIFO_FACTOR * self.below);
        }
        self.gather_usec = (shortest / 8).min(GATHER_MAX_USEC);
        self.gather_now =
            all && self.priority.boosted && self.awaiting >= 2 && self.gather_usec > 0;
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
