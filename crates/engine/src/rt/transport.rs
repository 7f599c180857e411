//! The JACK transport: a state machine (stopped, starting, rolling) advanced once per
//! cycle on the real-time thread, as jackd2's `JackTransportEngine` does it
//! (docs/engine/transport.md).
//!
//! At each cycle start [`TransportEngine::cycle`]:
//! 1. makes the *pending* position current, with the BBT fields the timebase master
//!    wrote during the previous cycle merged in;
//! 2. applies the start/stop command and the position request that arrived during the
//!    previous cycle: a start (or a locate while rolling) enters *starting*, and
//!    starting becomes *rolling* once every active slow-sync client said it is ready
//!    (none of them reported "not ready" in the previous cycle) or the sync timeout ran
//!    out;
//! 3. while rolling, advances the pending position by the cycle's frames;
//! 4. takes a new position request (locate, reposition) as the pending position.
//!
//! So a request made during cycle *n* is seen by every client in cycle *n + 1*, and
//! what the master computes for the pending position in cycle *n* is what everyone
//! reads in cycle *n + 1* — jackd2's order.
//!
//! Everything shared is an atomic in [`TransportShared`]: control threads write
//! commands, position requests, the sync timeout and the timebase master; callback
//! nodes (on the RT thread) forward their clients' requests and answers; the RT thread
//! publishes the state under a sequence lock that control readers retry on. Nothing
//! here allocates, locks or blocks on the RT side.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};

/// Words of a position after `frame` and `valid` (the BBT, timecode and video fields,
/// in the order of the callback block's position words, docs/protocol/callback.md).
pub const POSITION_EXTRA_WORDS: usize = 20;

/// JACK's position bits a request or the timebase master may set
/// (`JackPositionBBT` … `JackTickDouble`); anything else is refused.
pub const POSITION_BITS: u32 = 0x10 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200;

/// Default time slow-sync clients get to become ready, µs (jackd2's 2 s).
pub const DEFAULT_SYNC_TIMEOUT_US: u64 = 2_000_000;

/// The transport states, numbered as `jack_transport_state_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u32)]
pub enum TransportState {
    /// Not moving.
    #[default]
    Stopped = 0,
    /// Moving: the frame advances each cycle.
    Rolling = 1,
    /// Waiting for slow-sync clients before rolling.
    Starting = 3,
}

impl TransportState {
    /// From the published number (anything unknown reads as stopped).
    pub fn from_u32(v: u32) -> TransportState {
        match v {
            1 => TransportState::Rolling,
            3 => TransportState::Starting,
            _ => TransportState::Stopped,
        }
    }

    /// `"stopped"`, `"rolling"` or `"starting"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            TransportState::Stopped => "stopped",
            TransportState::Rolling => "rolling",
            TransportState::Starting => "starting",
        }
    }
}

/// A transport position: the frame, which optional fields are valid, and those fields
/// as opaque words (the engine only copies them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Transport frame.
    pub frame: u32,
    /// JACK's `jack_position_bits_t` for the extra words.
    pub valid: u32,
    /// BBT, timecode and video fields.
    pub extra: [u32; POSITION_EXTRA_WORDS],
}

/// A start/stop command, as jackd2's `transport_command_t`.
const CMD_START: u32 = 1;
const CMD_STOP: u32 = 2;

/// A position under a sequence lock (`seq` odd while written).
#[derive(Default)]
struct PosCell {
    seq: AtomicU32,
    frame: AtomicU32,
    valid: AtomicU32,
    extra: [AtomicU32; POSITION_EXTRA_WORDS],
}

impl PosCell {
    /// Single writer (callers make sure of it).
    fn write(&self, p: &Position) {
        let g = self.seq.load(Relaxed);
        self.seq.store(g.wrapping_add(1) | 1, Relaxed);
        std::sync::atomic::fence(Release);
        self.frame.store(p.frame, Relaxed);
        self.valid.store(p.valid, Relaxed);
        for (d, s) in self.extra.iter().zip(&p.extra) {
            d.store(*s, Relaxed);
        }
        self.seq.store((g | 1).wrapping_add(1), Release);
    }

    /// The position and its generation, or `None` while a writer is at it.
    fn read(&self) -> Option<(u32, Position)> {
        let g = self.seq.load(Acquire);
        if g & 1 != 0 {
            return None;
        }
        let mut p = Position {
            frame: self.frame.load(Relaxed),
            valid: self.valid.load(Relaxed),
            extra: [0; POSITION_EXTRA_WORDS],
        };
        for (d, s) in p.extra.iter_mut().zip(&self.extra) {
            *d = s.load(Relaxed);
        }
        std::sync::atomic::fence(Acquire);
        (self.seq.load(Relaxed) == g).then_some((g, p))
    }
}

/// A snapshot of the transport as published at a cycle start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportSnapshot {
    /// The state in this cycle.
    pub state: TransportState,
    /// The position in this cycle.
    pub current: Position,
    /// The position the next cycle will have unless a request intervenes: what the
    /// timebase master computes BBT for.
    pub next: Position,
    /// CLOCK_MONOTONIC µs at the cycle start (`jack_position_t.usecs`).
    pub usecs: u64,
    /// Sample rate.
    pub rate: u32,
    /// Changes whenever the transport enters starting (slow-sync clients must answer
    /// for it again) or stops.
    pub sync_epoch: u32,
    /// Changes whenever the position jumps (start, locate) or a new master takes
    /// over: the master's next timebase callback gets `new_pos`.
    pub timebase_epoch: u32,
    /// Token of the timebase master, 0 for none.
    pub master: u64,
}

/// Why a timebase request failed (JACK's codes: `EBUSY`, `EINVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimebaseError {
    /// A conditional request while another client is the master.
    #[error("another client is the timebase master")]
    Busy,
    /// Releasing when not the master.
    #[error("this client is not the timebase master")]
    NotMaster,
}

impl TimebaseError {
    /// The errno JACK returns for it.
    pub fn errno(&self) -> i32 {
        match self {
            TimebaseError::Busy => libc::EBUSY,
            TimebaseError::NotMaster => libc::EINVAL,
        }
    }
}

/// The transport's shared state; one per engine ([`crate::Engine::transport`]).
pub struct TransportShared {
    /// Last start/stop command (0 none yet); the last one before a cycle wins.
    cmd: AtomicU32,
    /// Position requests from control threads; the mutex orders the writers.
    ctl_req: PosCell,
    ctl_req_lock: Mutex<()>,
    /// A position request forwarded by a callback node this cycle (RT thread only).
    node_req: PosCell,
    node_req_set: AtomicBool,
    sync_timeout_us: AtomicU64,
    master: AtomicU64,
    next_token: AtomicU64,
    /// An active slow-sync client was not ready in this cycle (RT thread only).
    unready: AtomicBool,
    /// BBT the master wrote this cycle (RT thread only).
    master_pos: PosCell,
    master_set: AtomicBool,
    /// Published at each cycle start.
    pub_seq: AtomicU32,
    state: AtomicU32,
    usecs: AtomicU64,
    rate: AtomicU32,
    sync_epoch: AtomicU32,
    timebase_epoch: AtomicU32,
    current: PosCell,
    next: PosCell,
    /// Requests refused as malformed (unknown position bits), from any source.
    refused: AtomicU64,
}

impl Default for TransportShared {
    fn default() -> Self {
        TransportShared {
            cmd: AtomicU32::new(0),
            ctl_req: PosCell::default(),
            ctl_req_lock: Mutex::new(()),
            node_req: PosCell::default(),
            node_req_set: AtomicBool::new(false),
            sync_timeout_us: AtomicU64::new(DEFAULT_SYNC_TIMEOUT_US),
            master: AtomicU64::new(0),
            next_token: AtomicU64::new(1),
            unready: AtomicBool::new(false),
            master_pos: PosCell::default(),
            master_set: AtomicBool::new(false),
            pub_seq: AtomicU32::new(0),
            state: AtomicU32::new(0),
            usecs: AtomicU64::new(0),
            rate: AtomicU32::new(0),
            sync_epoch: AtomicU32::new(0),
            timebase_epoch: AtomicU32::new(0),
            current: PosCell::default(),
            next: PosCell::default(),
            refused: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for TransportShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportShared")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl TransportShared {
    /// A token identifying one client (a callback node) as timebase master; never 0.
    pub fn new_token(&self) -> u64 {
        self.next_token.fetch_add(1, Relaxed)
    }

    /// `jack_transport_start`: applied at the next cycle start. Any thread.
    pub fn start(&self) {
        self.cmd.store(CMD_START, Release);
    }

    /// `jack_transport_stop`. Any thread.
    pub fn stop(&self) {
        self.cmd.store(CMD_STOP, Release);
    }

    /// `jack_transport_reposition` from a control thread: `pos` becomes the position
    /// at the next cycle start. Refused (`EINVAL` in JACK) when `pos.valid` has bits
    /// JACK does not define.
    pub fn request(&self, pos: &Position) -> Result<(), i32> {
        if pos.valid & !POSITION_BITS != 0 {
            self.refused.fetch_add(1, Relaxed);
            return Err(libc::EINVAL);
        }
        let _g = self.ctl_req_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.ctl_req.write(pos);
        Ok(())
    }

    /// A position request a callback node read from its client. *RT thread*.
    pub fn request_rt(&self, pos: &Position) -> bool {
        if pos.valid & !POSITION_BITS != 0 {
            self.refused.fetch_add(1, Relaxed);
            return false;
        }
        self.node_req.write(pos);
        self.node_req_set.store(true, Relaxed);
        true
    }

    /// Counts a request refused before it reached us (a malformed client request).
    pub fn count_refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }

    /// Requests refused as malformed so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// `jack_set_sync_timeout`, µs.
    pub fn set_sync_timeout(&self, usecs: u64) {
        self.sync_timeout_us.store(usecs, Relaxed);
    }

    /// The sync timeout, µs.
    pub fn sync_timeout(&self) -> u64 {
        self.sync_timeout_us.load(Relaxed)
    }

    /// `jack_set_timebase_callback`: makes `token` the master; a `conditional` request
    /// fails while another client is.
    pub fn set_master(&self, token: u64, conditional: bool) -> Result<(), TimebaseError> {
        if conditional {
            match self.master.compare_exchange(0, token, AcqRel, Acquire) {
                Ok(_) => Ok(()),
                Err(m) if m == token => Ok(()),
                Err(_) => Err(TimebaseError::Busy),
            }
        } else {
            self.master.store(token, Release);
            Ok(())
        }
    }

    /// `jack_release_timebase`, or the master going away.
    pub fn release_master(&self, token: u64) -> Result<(), TimebaseError> {
        self.master
            .compare_exchange(token, 0, AcqRel, Acquire)
            .map(|_| ())
            .map_err(|_| TimebaseError::NotMaster)
    }

    /// The master's token, 0 for none.
    pub fn master(&self) -> u64 {
        self.master.load(Acquire)
    }

    /// An active slow-sync client is not ready for the current start. *RT thread*.
    pub fn report_unready(&self) {
        self.unready.store(true, Relaxed);
    }

    /// BBT the master computed for [`TransportSnapshot::next`]; only the optional
    /// fields are taken, the frame stays the server's. *RT thread*.
    pub fn report_master(&self, token: u64, pos: &Position) -> bool {
        if token == 0 || self.master.load(Relaxed) != token || pos.valid & !POSITION_BITS != 0 {
            return false;
        }
        self.master_pos.write(pos);
        self.master_set.store(true, Relaxed);
        true
    }

    /// The transport as published at the last cycle start. Any thread (retries while
    /// the RT thread writes; it never waits for a reader).
    pub fn snapshot(&self) -> TransportSnapshot {
        loop {
            let g = self.pub_seq.load(Acquire);
            if g & 1 == 0 {
                let cur = self.current.read();
                let next = self.next.read();
                let s = TransportSnapshot {
                    state: TransportState::from_u32(self.state.load(Relaxed)),
                    current: cur.map(|c| c.1).unwrap_or_default(),
                    next: next.map(|c| c.1).unwrap_or_default(),
                    usecs: self.usecs.load(Relaxed),
                    rate: self.rate.load(Relaxed),
                    sync_epoch: self.sync_epoch.load(Relaxed),
                    timebase_epoch: self.timebase_epoch.load(Relaxed),
                    master: self.master.load(Relaxed),
                };
                std::sync::atomic::fence(Acquire);
                if cur.is_some() && next.is_some() && self.pub_seq.load(Relaxed) == g {
                    return s;
                }
            }
            std::hint::spin_loop();
        }
    }
}

/// The RT thread's side of the transport: the state machine.
#[derive(Debug)]
pub struct TransportEngine {
    shared: std::sync::Arc<TransportShared>,
    state: TransportState,
    prev_cmd: u32,
    pending: Position,
    current: Position,
    /// A position request was taken at the end of the last cycle start.
    pending_pos: bool,
    sync_left: u64,
    sync_epoch: u32,
    timebase_epoch: u32,
    ctl_req_seq: u32,
    master: u64,
}

impl TransportEngine {
    /// The engine over `shared`. Control thread.
    pub fn new(shared: std::sync::Arc<TransportShared>) -> TransportEngine {
        TransportEngine {
            shared,
            state: TransportState::Stopped,
            // jackd2 starts with "stop" as the previous command: a stop while stopped
            // is no news.
            prev_cmd: CMD_STOP,
            pending: Position::default(),
            current: Position::default(),
            pending_pos: false,
            sync_left: 0,
            sync_epoch: 0,
            timebase_epoch: 0,
            ctl_req_seq: 0,
            master: 0,
        }
    }

    /// The shared side.
    pub fn shared(&self) -> &std::sync::Arc<TransportShared> {
        &self.shared
    }

    /// The state in the current cycle.
    pub fn state(&self) -> TransportState {
        self.state
    }

    fn enter_starting(&mut self, frames: u32, rate: u32) {
        self.state = TransportState::Starting;
        self.sync_epoch = self.sync_epoch.wrapping_add(1);
        self.timebase_epoch = self.timebase_epoch.wrapping_add(1);
        let period_us = (frames as u64 * 1_000_000 / rate.max(1) as u64).max(1);
        self.sync_left = (self.shared.sync_timeout() / period_us).max(1);
    }

    /// Advances the transport at the start of a cycle of `frames` frames and publishes
    /// it. *RT*: no allocation, no locks.
    pub fn cycle(&mut self, frames: u32, rate: u32, usecs: u64) {
        // A second handle, not a borrow of self (an atomic increment, no allocation).
        let sh = std::sync::Arc::clone(&self.shared);
        // The master of the previous cycle, its BBT for what is now current.
        let master = sh.master.load(Acquire);
        if sh.master_set.swap(false, Relaxed)
            && let Some((_, m)) = sh.master_pos.read()
            && master != 0
            && master == self.master
        {
            self.pending.valid = m.valid & POSITION_BITS;
            self.pending.extra = m.extra;
        }
        let mut master_lost = false;
        if master != self.master {
            if master == 0 {
                // What the master wrote last is for a frame already passed: nobody
                // vouches for BBT from this cycle on.
                master_lost = true;
                self.pending.valid = 0;
            } else {
                self.timebase_epoch = self.timebase_epoch.wrapping_add(1);
            }
            self.master = master;
        }
        self.current = self.pending;
        let unready = sh.unready.swap(false, Relaxed);

        let cmd = sh.cmd.load(Acquire);
        let cmd = if cmd != 0 && cmd != self.prev_cmd {
            self.prev_cmd = cmd;
            cmd
        } else {
            0
        };
        match self.state {
            TransportState::Stopped => {
                if cmd == CMD_START {
                    self.enter_starting(frames, rate);
                } else if self.pending_pos {
                    self.timebase_epoch = self.timebase_epoch.wrapping_add(1);
                }
            }
            TransportState::Starting => {
                if cmd == CMD_STOP {
                    self.state = TransportState::Stopped;
                    self.sync_epoch = self.sync_epoch.wrapping_add(1);
                } else if self.pending_pos {
                    self.enter_starting(frames, rate);
                } else {
                    self.sync_left = self.sync_left.saturating_sub(1);
                    if self.sync_left == 0 || !unready {
                        self.state = TransportState::Rolling;
                    }
                }
            }
            TransportState::Rolling => {
                if cmd == CMD_STOP {
                    self.state = TransportState::Stopped;
                    self.sync_epoch = self.sync_epoch.wrapping_add(1);
                } else if self.pending_pos {
                    self.enter_starting(frames, rate);
                }
            }
        }
        if self.state == TransportState::Rolling {
            self.pending.frame = self.pending.frame.wrapping_add(frames);
        }
        // New position requests: a control thread's, then a client's (the later wins,
        // as the last of several requests in one jackd2 cycle does).
        self.pending_pos = false;
        if let Some((g, p)) = sh.ctl_req.read()
            && g != self.ctl_req_seq
        {
            self.ctl_req_seq = g;
            self.pending = p;
            self.pending_pos = true;
        }
        if sh.node_req_set.swap(false, Relaxed)
            && let Some((_, p)) = sh.node_req.read()
        {
            self.pending = p;
            self.pending_pos = true;
        }
        if master_lost && !self.pending_pos {
            // jackd2 resets the timebase by writing a position request without BBT
            // (`ResetTimebase`): the transport relocates to where it is, nobody
            // vouches for the BBT any more, and a rolling transport passes through
            // starting once. Clients see the same here.
            self.pending = Position {
                frame: self.current.frame,
                ..Position::default()
            };
            self.pending_pos = true;
        }
        self.publish(usecs, rate);
    }

    fn publish(&self, usecs: u64, rate: u32) {
        let sh = &*self.shared;
        let g = sh.pub_seq.load(Relaxed);
        sh.pub_seq.store(g.wrapping_add(1) | 1, Relaxed);
        std::sync::atomic::fence(Release);
        sh.state.store(self.state as u32, Relaxed);
        sh.usecs.store(usecs, Relaxed);
        sh.rate.store(rate, Relaxed);
        sh.sync_epoch.store(self.sync_epoch, Relaxed);
        sh.timebase_epoch.store(self.timebase_epoch, Relaxed);
        sh.current.write(&self.current);
        sh.next.write(&self.pending);
        sh.pub_seq.store((g | 1).wrapping_add(1), Release);
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
