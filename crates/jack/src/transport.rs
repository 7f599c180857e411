//! The client side of the JACK transport: the sync and timebase callbacks, run on the
//! process thread as jackd2 runs them (the sync callback before the process callback,
//! the timebase callback after it), and the position conversions. The server publishes
//! the transport in the shared block at every cycle start; commands, position requests,
//! sync answers and the master's BBT go back through the block
//! (docs/engine/transport.md). Nothing here allocates; the request lock is taken only by
//! threads asking for a locate.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use quaver_client::quaver_protocol::callback::{
    CallbackShm, POS_WORDS, TransportPosition, TransportWords,
};

use crate::types::*;

/// `JackTransportRolling`.
pub const ROLLING: jack_transport_state_t = 1;

/// A client's transport callbacks and where it is with them.
#[derive(Default)]
pub struct ClientTransport {
    sync_cb: AtomicUsize,
    sync_arg: AtomicPtr<c_void>,
    timebase_cb: AtomicUsize,
    timebase_arg: AtomicPtr<c_void>,
    /// jackd2's `fTransportSync`: the sync callback is due (set by a new start and by
    /// registering it, cleared when it answers ready or the transport stops).
    sync_pending: AtomicBool,
    sync_epoch: AtomicU32,
    /// jackd2's `fTransportTimebase`: the master's next call gets `new_pos`.
    new_pos: AtomicBool,
    timebase_epoch: AtomicU32,
    /// Orders the threads that write position requests into the block.
    request: Mutex<()>,
}

static UNIQUE: AtomicU64 = AtomicU64::new(1);

/// A `jack_position_t` from the block's position words.
pub fn position(w: &[u32; POS_WORDS], t: &TransportWords) -> jack_position_t {
    let p = TransportPosition::from_words(w);
    let u = UNIQUE.fetch_add(1, Ordering::Relaxed);
    jack_position_t {
        unique_1: u,
        usecs: t.usecs,
        frame_rate: t.frame_rate,
        frame: p.frame,
        valid: p.valid as c_int,
        bar: p.bar,
        beat: p.beat,
        tick: p.tick,
        bar_start_tick: p.bar_start_tick,
        beats_per_bar: p.beats_per_bar,
        beat_type: p.beat_type,
        ticks_per_beat: p.ticks_per_beat,
        beats_per_minute: p.beats_per_minute,
        frame_time: p.frame_time,
        next_time: p.next_time,
        bbt_offset: p.bbt_offset,
        audio_frames_per_video_frame: p.audio_frames_per_video_frame,
        video_offset: p.video_offset,
        tick_double: p.tick_double,
        padding: [0; 5],
        unique_2: u,
    }
}

/// The block's words for `p` (the frame and what `valid` says).
pub fn words(p: &jack_position_t) -> [u32; POS_WORDS] {
    TransportPosition {
        frame: p.frame,
        valid: p.valid as u32,
        bar: p.bar,
        beat: p.beat,
        tick: p.tick,
        bar_start_tick: p.bar_start_tick,
        beats_per_bar: p.beats_per_bar,
        beat_type: p.beat_type,
        ticks_per_beat: p.ticks_per_beat,
        beats_per_minute: p.beats_per_minute,
        frame_time: p.frame_time,
        next_time: p.next_time,
        bbt_offset: p.bbt_offset,
        audio_frames_per_video_frame: p.audio_frames_per_video_frame,
        video_offset: p.video_offset,
        tick_double: p.tick_double,
    }
    .to_words()
}

impl ClientTransport {
    /// Starts where the server is, so a client opened mid-session is not asked about a
    /// start it never saw.
    pub fn sync_with(&self, shm: &CallbackShm) {
        let t = shm.transport();
        self.sync_epoch.store(t.sync_epoch, Ordering::Relaxed);
        self.timebase_epoch
            .store(t.timebase_epoch, Ordering::Relaxed);
    }

    fn sync_callback(&self) -> (JackSyncCallback, *mut c_void) {
        let f = self.sync_cb.load(Ordering::Acquire);
        // SAFETY: stored from a `JackSyncCallback` (a nullable fn pointer) below.
        let f = unsafe { std::mem::transmute::<usize, JackSyncCallback>(f) };
        (f, self.sync_arg.load(Ordering::Acquire))
    }

    fn timebase_callback(&self) -> (JackTimebaseCallback, *mut c_void) {
        let f = self.timebase_cb.load(Ordering::Acquire);
        // SAFETY: stored from a `JackTimebaseCallback` below.
        let f = unsafe { std::mem::transmute::<usize, JackTimebaseCallback>(f) };
        (f, self.timebase_arg.load(Ordering::Acquire))
    }

    /// `jack_set_sync_callback`: as in jackd2 the callback is due at the next cycle,
    /// whatever the state.
    pub fn set_sync(&self, shm: &CallbackShm, cb: JackSyncCallback, arg: *mut c_void) {
        self.sync_arg.store(arg, Ordering::Release);
        self.sync_cb
            .store(cb.map_or(0, |f| f as usize), Ordering::Release);
        shm.set_slow_sync(cb.is_some());
        self.sync_pending.store(true, Ordering::Release);
    }

    /// The timebase callback after the server made this client the master.
    pub fn set_timebase(&self, cb: JackTimebaseCallback, arg: *mut c_void) {
        self.timebase_arg.store(arg, Ordering::Release);
        self.timebase_cb
            .store(cb.map_or(0, |f| f as usize), Ordering::Release);
        self.new_pos.store(true, Ordering::Release);
    }

    /// `jack_activate`: as jackd2's `JackClient::Activate`, the sync callback is due
    /// and the master's next call gets `new_pos`.
    pub fn activated(&self) {
        self.sync_pending.store(true, Ordering::Release);
        self.new_pos.store(true, Ordering::Release);
    }

    /// Serialises position requests.
    pub fn request_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.request.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Before the process callback: notes starts, stops and jumps, and runs the sync
/// callback while it is due. *Process thread*.
pub(crate) fn before_process(tr: &ClientTransport, shm: &CallbackShm) {
    let t = shm.transport();
    if t.timebase_epoch != tr.timebase_epoch.swap(t.timebase_epoch, Ordering::Relaxed) {
        tr.new_pos.store(true, Ordering::Relaxed);
    }
    if t.sync_epoch != tr.sync_epoch.swap(t.sync_epoch, Ordering::Relaxed) {
        // A start (or a locate while rolling) makes every client answer again; a stop
        // releases them all (jackd2's MakeAllStartingLocating / MakeAllStopping).
        let starting = t.state as jack_transport_state_t != JACK_TRANSPORT_STOPPED;
        tr.sync_pending.store(starting, Ordering::Relaxed);
        if !starting {
            tr.new_pos.store(false, Ordering::Relaxed);
        }
    }
    if !tr.sync_pending.load(Ordering::Acquire) {
        return;
    }
    let ready = match tr.sync_callback() {
        (Some(f), arg) => {
            let mut pos = position(&t.current, &t);
            // SAFETY: the application's callback with its own argument.
            unsafe { f(t.state as jack_transport_state_t, &mut pos, arg) != 0 }
        }
        (None, _) => true,
    };
    if ready {
        tr.sync_pending.store(false, Ordering::Relaxed);
        shm.set_ready_epoch(t.sync_epoch);
    }
}

/// After a successful process callback: the timebase master fills in the position of
/// the next cycle, with `new_pos` once after a jump or after it took over, and on every
/// cycle while rolling. *Process thread*.
pub(crate) fn after_process(tr: &ClientTransport, shm: &CallbackShm, nframes: u32) {
    let t = shm.transport();
    if !t.master {
        return;
    }
    let (Some(f), arg) = tr.timebase_callback() else {
        return;
    };
    let new_pos = tr.new_pos.swap(false, Ordering::Relaxed);
    if !new_pos && t.state as jack_transport_state_t != ROLLING {
        return;
    }
    let mut pos = position(&t.next, &t);
    // SAFETY: the application's callback with its own argument.
    unsafe {
        f(
            t.state as jack_transport_state_t,
            nframes,
            &mut pos,
            new_pos as c_int,
            arg,
        )
    };
    shm.write_bbt(&words(&pos));
}
