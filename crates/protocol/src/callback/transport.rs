//! The JACK transport in a callback client's shared block (layout version 1, added
//! within it: older clients leave these lines zero, older servers never write them).
//!
//! Two lines: one the server writes at every cycle start, before it wakes the client
//! (the transport state and position under a sequence lock, so a client thread that
//! reads between cycles sees a consistent copy), and one the client writes: whether it
//! is a slow-sync client and which start it is ready for, start/stop commands, position
//! requests and, when it is the timebase master, the BBT it computed. The server
//! validates every word it takes from the client's line (docs/protocol/callback.md).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// 32-bit words of a position (frame, valid bits, BBT, timecode, video fields).
pub const POS_WORDS: usize = 22;
/// Client transport flag: the client has a sync callback (a slow-sync client).
pub const CLIENT_SLOW_SYNC: u32 = 1 << 0;
/// Command word: start the transport.
pub const TRANSPORT_START: u32 = 1;
/// Command word: stop the transport.
pub const TRANSPORT_STOP: u32 = 2;
/// Position bits a client may set (`JackPositionBBT` … `JackTickDouble`).
pub const POSITION_BITS: u32 = 0x3f0;

/// Written by the server at each cycle start.
#[repr(C)]
pub(super) struct ServerWords {
    seq: AtomicU32,
    state: AtomicU32,
    master: AtomicU32,
    sync_epoch: AtomicU32,
    timebase_epoch: AtomicU32,
    frame_rate: AtomicU32,
    usecs: AtomicU64,
    current: [AtomicU32; POS_WORDS],
    next: [AtomicU32; POS_WORDS],
}

/// Written by the client.
#[repr(C)]
pub(super) struct ClientWords {
    flags: AtomicU32,
    ready_epoch: AtomicU32,
    cmd: AtomicU32,
    cmd_seq: AtomicU32,
    req_seq: AtomicU32,
    bbt_seq: AtomicU32,
    req: [AtomicU32; POS_WORDS],
    bbt: [AtomicU32; POS_WORDS],
}

const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(ServerWords, usecs) == 24);
    assert!(offset_of!(ServerWords, current) == 32);
    assert!(offset_of!(ServerWords, next) == 120);
    assert!(size_of::<ServerWords>() == 208);
    assert!(offset_of!(ClientWords, req) == 24);
    assert!(offset_of!(ClientWords, bbt) == 112);
    assert!(size_of::<ClientWords>() == 200);
};

/// A transport position, field by field as `jack_position_t` has them (without the
/// server-set `unique_*`, `usecs` and `frame_rate`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[allow(missing_docs)]
pub struct TransportPosition {
    pub frame: u32,
    pub valid: u32,
    pub bar: i32,
    pub beat: i32,
    pub tick: i32,
    pub bar_start_tick: f64,
    pub beats_per_bar: f32,
    pub beat_type: f32,
    pub ticks_per_beat: f64,
    pub beats_per_minute: f64,
    pub frame_time: f64,
    pub next_time: f64,
    pub bbt_offset: u32,
    pub audio_frames_per_video_frame: f32,
    pub video_offset: u32,
    pub tick_double: f64,
}

fn put64(w: &mut [u32], i: usize, v: f64) {
    let b = v.to_bits();
    w[i] = b as u32;
    w[i + 1] = (b >> 32) as u32;
}

fn get64(w: &[u32], i: usize) -> f64 {
    f64::from_bits(w[i] as u64 | (w[i + 1] as u64) << 32)
}

impl TransportPosition {
    /// The block's words: frame, valid, bar, beat, tick, bar_start_tick (2),
    /// beats_per_bar, beat_type, ticks_per_beat (2), beats_per_minute (2), frame_time
    /// (2), next_time (2), bbt_offset, audio_frames_per_video_frame, video_offset,
    /// tick_double (2); f64 as low word first.
    pub fn to_words(&self) -> [u32; POS_WORDS] {
        let mut w = [0u32; POS_WORDS];
        w[0] = self.frame;
        w[1] = self.valid;
        w[2] = self.bar as u32;
        w[3] = self.beat as u32;
        w[4] = self.tick as u32;
        put64(&mut w, 5, self.bar_start_tick);
        w[7] = self.beats_per_bar.to_bits();
        w[8] = self.beat_type.to_bits();
        put64(&mut w, 9, self.ticks_per_beat);
        put64(&mut w, 11, self.beats_per_minute);
        put64(&mut w, 13, self.frame_time);
        put64(&mut w, 15, self.next_time);
        w[17] = self.bbt_offset;
        w[18] = self.audio_frames_per_video_frame.to_bits();
        w[19] = self.video_offset;
        put64(&mut w, 20, self.tick_double);
        w
    }

    /// From the block's words.
    pub fn from_words(w: &[u32; POS_WORDS]) -> TransportPosition {
        TransportPosition {
            frame: w[0],
            valid: w[1],
            bar: w[2] as i32,
            beat: w[3] as i32,
            tick: w[4] as i32,
            bar_start_tick: get64(w, 5),
            beats_per_bar: f32::from_bits(w[7]),
            beat_type: f32::from_bits(w[8]),
            ticks_per_beat: get64(w, 9),
            beats_per_minute: get64(w, 11),
            frame_time: get64(w, 13),
            next_time: get64(w, 15),
            bbt_offset: w[17],
            audio_frames_per_video_frame: f32::from_bits(w[18]),
            video_offset: w[19],
            tick_double: get64(w, 20),
        }
    }
}

/// What the server publishes to a client at a cycle start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportWords {
    /// `jack_transport_state_t`.
    pub state: u32,
    /// This client is the timebase master.
    pub master: bool,
    /// Changes at every start or stop: a slow-sync client answers each start once.
    pub sync_epoch: u32,
    /// Changes whenever the position jumps or the master changes (`new_pos`).
    pub timebase_epoch: u32,
    /// Sample rate.
    pub frame_rate: u32,
    /// CLOCK_MONOTONIC µs of the cycle start.
    pub usecs: u64,
    /// The position of this cycle.
    pub current: [u32; POS_WORDS],
    /// The position of the next cycle (what the master computes BBT for).
    pub next: [u32; POS_WORDS],
}

fn store(dst: &[AtomicU32; POS_WORDS], src: &[u32; POS_WORDS]) {
    for (d, s) in dst.iter().zip(src) {
        d.store(*s, Ordering::Relaxed);
    }
}

fn load(src: &[AtomicU32; POS_WORDS]) -> [u32; POS_WORDS] {
    std::array::from_fn(|i| src[i].load(Ordering::Relaxed))
}

/// Writes under the sequence lock `seq` (single writer).
fn locked_write(seq: &AtomicU32, write: impl FnOnce()) -> u32 {
    let s = seq.load(Ordering::Relaxed);
    seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    write();
    let done = (s | 1).wrapping_add(1);
    seq.store(done, Ordering::Release);
    done
}

/// Reads under the sequence lock `seq`: the value and its sequence, or `None` when a
/// write was under way (never waits).
fn locked_read<T>(seq: &AtomicU32, read: impl FnOnce() -> T) -> Option<(u32, T)> {
    let s = seq.load(Ordering::Acquire);
    if s & 1 != 0 {
        return None;
    }
    let v = read();
    std::sync::atomic::fence(Ordering::Acquire);
    (seq.load(Ordering::Relaxed) == s).then_some((s, v))
}

impl ServerWords {
    /// Server: publishes the transport for the coming cycle. *RT*.
    pub(super) fn publish(&self, t: &TransportWords) {
        let w = self;
        locked_write(&w.seq, || {
            w.state.store(t.state, Ordering::Relaxed);
            w.master.store(t.master as u32, Ordering::Relaxed);
            w.sync_epoch.store(t.sync_epoch, Ordering::Relaxed);
            w.timebase_epoch.store(t.timebase_epoch, Ordering::Relaxed);
            w.frame_rate.store(t.frame_rate, Ordering::Relaxed);
            w.usecs.store(t.usecs, Ordering::Relaxed);
            store(&w.current, &t.current);
            store(&w.next, &t.next);
        });
    }

    /// Client: the transport as published for the latest cycle (retries while the
    /// server writes, which it does for a few hundred nanoseconds per cycle; a server
    /// that died in the middle is given up on after about a million tries).
    pub(super) fn read(&self) -> TransportWords {
        let w = self;
        let mut tries = 0u32;
        loop {
            let read = || TransportWords {
                state: w.state.load(Ordering::Relaxed),
                master: w.master.load(Ordering::Relaxed) != 0,
                sync_epoch: w.sync_epoch.load(Ordering::Relaxed),
                timebase_epoch: w.timebase_epoch.load(Ordering::Relaxed),
                frame_rate: w.frame_rate.load(Ordering::Relaxed),
                usecs: w.usecs.load(Ordering::Relaxed),
                current: load(&w.current),
                next: load(&w.next),
            };
            if let Some((_, t)) = locked_read(&w.seq, read) {
                return t;
            }
            tries += 1;
            if tries > 1 << 20 {
                return read();
            }
            std::hint::spin_loop();
        }
    }
}

impl ClientWords {
    /// Server: `CLIENT_SLOW_SYNC` and the sync epoch the client is ready for.
    pub(super) fn sync_answer(&self) -> (bool, u32) {
        (
            self.flags.load(Ordering::Acquire) & CLIENT_SLOW_SYNC != 0,
            self.ready_epoch.load(Ordering::Acquire),
        )
    }

    /// Server: the command counter and the last command word (unchecked).
    pub(super) fn command(&self) -> (u32, u32) {
        let seq = self.cmd_seq.load(Ordering::Acquire);
        (seq, self.cmd.load(Ordering::Relaxed))
    }

    /// Server: the latest position request and its sequence, unless being written.
    pub(super) fn request(&self) -> Option<(u32, [u32; POS_WORDS])> {
        locked_read(&self.req_seq, || load(&self.req))
    }

    /// Server: the master's latest BBT and its sequence, unless being written.
    pub(super) fn bbt(&self) -> Option<(u32, [u32; POS_WORDS])> {
        locked_read(&self.bbt_seq, || load(&self.bbt))
    }

    /// Client: sets or clears `CLIENT_SLOW_SYNC`.
    pub(super) fn set_slow_sync(&self, on: bool) {
        if on {
            self.flags.fetch_or(CLIENT_SLOW_SYNC, Ordering::AcqRel);
        } else {
            self.flags.fetch_and(!CLIENT_SLOW_SYNC, Ordering::AcqRel);
        }
    }

    /// Client: ready for the start of `epoch`.
    pub(super) fn set_ready_epoch(&self, epoch: u32) {
        self.ready_epoch.store(epoch, Ordering::Release);
    }

    /// Client: asks for a start or a stop.
    pub(super) fn send_command(&self, cmd: u32) {
        self.cmd.store(cmd, Ordering::Relaxed);
        self.cmd_seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Client: asks for a new position (one writer at a time).
    pub(super) fn send_request(&self, pos: &[u32; POS_WORDS]) {
        locked_write(&self.req_seq, || store(&self.req, pos));
    }

    /// Client (the master's process thread): the BBT it computed this cycle.
    pub(super) fn write_bbt(&self, pos: &[u32; POS_WORDS]) {
        locked_write(&self.bbt_seq, || store(&self.bbt, pos));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_through_words() {
        let p = TransportPosition {
            frame: 48000,
            valid: 0x10 | 0x200,
            bar: 3,
            beat: -2,
            tick: 960,
            bar_start_tick: 1920.5,
            beats_per_bar: 4.0,
            beat_type: 4.0,
            ticks_per_beat: 1920.0,
            beats_per_minute: 120.25,
            frame_time: 1.5,
            next_time: 2.5,
            bbt_offset: 7,
            audio_frames_per_video_frame: 1600.0,
            video_offset: 9,
            tick_double: 960.25,
        };
        assert_eq!(TransportPosition::from_words(&p.to_words()), p);
    }
}
