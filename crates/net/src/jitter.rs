//! The RTP receiver's jitter buffer: packets placed by their RTP timestamp into a ring of
//! frames, played out after a target delay at the pace of the receiver's cycles.
//!
//! * Order: a packet's timestamp (extended past its 32-bit wrap) says where its frames
//!   go, so reordered packets land in place; sequence numbers (extended past their 16-bit
//!   wrap) count the packets lost (RFC 3550 A.3: expected minus accepted).
//! * Target delay: after the first packet (and after each underrun) a
//!   [`JitterBuffer::pull`] gives silence until it can take its frames and leave `target`
//!   frames buffered; from then on every pull takes the next frames.
//! * Loss: a frame missing when its turn comes is concealed by **silence with a short
//!   fade**: the last played value of each channel ramps linearly to zero over `fade`
//!   frames, then silence; when frames arrive again they fade in over `fade` frames. No
//!   fade is applied at the stream's start, so a stream without loss plays bit-exact.
//!   A pull that had to conceal and leaves nothing buffered is an underrun: the buffer
//!   fills to the target again before playing on.
//! * Dropped and counted: packets from another source address than the expected one, of
//!   another payload type, whose payload is not whole frames or longer than `max_packet`,
//!   duplicates, packets that come after their frames played (late), and timestamps
//!   outside the ring's window around the play position (jumps). 16 jumps in a row
//!   (nothing accepted between) mean the sender restarted its clock: the buffer starts
//!   over at the new timestamps (a resync). Packets of another SSRC than the one locked on
//!   are dropped, unless 16 come in a row from one new SSRC while the locked one sends
//!   nothing: the sender restarted, and the buffer starts over with it.
//! * Jitter: RFC 3550's interarrival jitter estimate (6.4.1), in frames, from the arrival
//!   times the caller passes (in frames of the receiver's clock); and the sender's clock
//!   drift against the receiver's from the same times ([`crate::arrival`]).
//!
//! Nothing here allocates after [`JitterBuffer::new`], locks or makes a system call, so
//! both ends may run on the real-time thread.

use crate::MAX_CHANNELS;
use crate::arrival::{ClockDrift, InterarrivalJitter};
use crate::payload::Encoding;
use crate::rtp::RtpPacket;
use std::net::IpAddr;

/// Jumps (or packets of one new SSRC) in a row after which the stream starts over.
pub const RESTART_AFTER: u32 = 16;

/// Where extended timestamps and sequence numbers start, so earlier values (reordered
/// packets) never go below zero.
const ORIGIN: u64 = 1 << 40;

/// How a jitter buffer is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct JitterConfig {
    /// The payload's encoding.
    pub encoding: Encoding,
    /// Channels per frame.
    pub channels: usize,
    /// The payload type packets must carry.
    pub payload_type: u8,
    /// Frames buffered before playing starts.
    pub target: usize,
    /// Most frames one packet may carry.
    pub max_packet: usize,
    /// Frames the ring holds at least (rounded up to a power of two and to
    /// 2 × (`target` + `max_packet`)).
    pub capacity: usize,
    /// Frames of the concealment's fade out and back in.
    pub fade: usize,
    /// Frames beyond the target (after a pull) past which a gap being concealed is cut
    /// short; `None`: gaps are always played out. Receivers use [`EXCESS_S`].
    pub excess: Option<usize>,
    /// The only source address packets are taken from, when set.
    pub source: Option<IpAddr>,
}

/// Why a jitter buffer cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JitterError {
    /// A setting is out of range.
    #[error("jitter buffer: {0}")]
    Config(String),
}

/// What became of one pushed packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Its frames are in the buffer.
    Accepted,
    /// Accepted, after the buffer started over (a timestamp jump or a new SSRC that
    /// persisted).
    Restarted,
    /// From another source address than the expected one.
    WrongSource,
    /// Another payload type than the stream's.
    WrongType,
    /// Its payload is empty, not whole frames or longer than `max_packet`.
    Malformed,
    /// From another SSRC than the one the buffer follows.
    WrongSsrc,
    /// All its frames are already buffered.
    Duplicate,
    /// Its frames were already played (concealed).
    Late,
    /// Its timestamp is outside the ring's window around the play position.
    Jump,
}

/// Counters of a jitter buffer's life, for `quaver status` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JitterStats {
    /// Packets pushed.
    pub received: u64,
    /// Packets whose frames went into the buffer.
    pub accepted: u64,
    /// Packets expected (from sequence numbers) and not accepted; RFC 3550's
    /// cumulative loss, so packets still on their way count until they arrive.
    pub lost: u64,
    /// Dropped: another source address.
    pub wrong_source: u64,
    /// Dropped: another payload type.
    pub wrong_type: u64,
    /// Dropped: malformed payload.
    pub malformed: u64,
    /// Dropped: another SSRC.
    pub wrong_ssrc: u64,
    /// Dropped: duplicates.
    pub duplicates: u64,
    /// Dropped: arrived after their frames played.
    pub late: u64,
    /// Dropped: timestamp jumps.
    pub jumps: u64,
    /// Times the buffer started over (a sender restart, a new SSRC).
    pub restarts: u64,
    /// Frames concealed (played while missing).
    pub concealed: u64,
    /// Frames passed over instead of played: missing ones because the buffer held more
    /// than [`JitterConfig::excess`] beyond its target (see [`JitterBuffer::pull`]),
    /// and any asked for by [`JitterBuffer::drop_ahead`].
    pub skipped: u64,
    /// Times the buffer ran dry while playing and filled up again.
    pub underruns: u64,
    /// Frames buffered ahead of the play position (the delay the buffer adds now).
    pub buffered: u64,
    /// RFC 3550 interarrival jitter estimate, in frames.
    pub jitter: f64,
    /// The sender's clock against the receiver's, minus one, in ppm (positive: the
    /// sender runs fast), since the stream last started; `None` in its first seconds.
    pub drift_ppm: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No packet yet (or after a restart, until one comes).
    Idle,
    /// Filling to the target; pulls give silence.
    Buffering,
    /// Pulls take frames.
    Playing,
}

/// Seconds beyond the target (after a pull) past which receivers cut a gap being
/// concealed short rather than play it out ([`JitterConfig::excess`]): a sender's skip of time it lost arriving while this
/// receiver had stalled too (or its own xrun) left the buffer that much fuller, and
/// playing the whole gap would keep the latency it added for good.
pub const EXCESS_S: f64 = 0.010;

/// The jitter buffer of one received stream.
#[derive(Debug)]
pub struct JitterBuffer {
    cfg: JitterConfig,
    ring: Vec<f32>,
    present: Vec<bool>,
    mask: u64,
    state: State,
    ssrc: u32,
    /// Extended timestamp of the next frame to play, and one past the newest stored.
    read: u64,
    end: u64,
    /// Frames present in the ring.
    filled: usize,
    base_seq: u64,
    highest_seq: u64,
    /// Packets in a row that were jumps, and from `foreign` (another SSRC).
    jump_run: u32,
    foreign: u32,
    foreign_run: u32,
    /// Last played value per channel, the fade's position into a gap, and the frames of
    /// fade-in left after one.
    last: Vec<f32>,
    gap: usize,
    fade_in: usize,
    /// Frames to drop ahead ([`JitterBuffer::drop_ahead`]) once the fade out left ends.
    drop: usize,
    drop_fade: usize,
    jitter: InterarrivalJitter,
    drift: ClockDrift,
    /// Packets accepted, and lost, before the stream last started over.
    accepted_before: u64,
    lost_before: u64,
    stats: JitterStats,
}

impl JitterBuffer {
    /// A buffer for one stream; allocates its ring now and never again.
    pub fn new(cfg: JitterConfig) -> Result<Self, JitterError> {
        let bad = |s: String| Err(JitterError::Config(s));
        if cfg.channels == 0 || cfg.channels > MAX_CHANNELS as usize {
            return bad(format!(
                "{} channels is outside 1..={MAX_CHANNELS}",
                cfg.channels
            ));
        }
        if cfg.payload_type > 127 {
            return bad(format!(
                "payload type {} is outside 0..=127",
                cfg.payload_type
            ));
        }
        const MAX_FRAMES: usize = 1 << 22;
        for (what, v) in [
            ("target", cfg.target),
            ("max_packet", cfg.max_packet),
            ("capacity", cfg.capacity),
        ] {
            if v > MAX_FRAMES {
                return bad(format!("{what} of {v} frames is above {MAX_FRAMES}"));
            }
        }
        if cfg.max_packet == 0 {
            return bad("max_packet of 0 frames".into());
        }
        let capacity = cfg
            .capacity
            .max(2 * (cfg.target + cfg.max_packet))
            .next_power_of_two();
        Ok(JitterBuffer {
            ring: vec![0.0; capacity * cfg.channels],
            present: vec![false; capacity],
            mask: capacity as u64 - 1,
            state: State::Idle,
            ssrc: 0,
            read: ORIGIN,
            end: ORIGIN,
            filled: 0,
            base_seq: 0,
            highest_seq: 0,
            jump_run: 0,
            foreign: 0,
            foreign_run: 0,
            last: vec![0.0; cfg.channels],
            gap: 0,
            fade_in: 0,
            drop: 0,
            drop_fade: 0,
            jitter: InterarrivalJitter::default(),
            // Windows as long as the ring (a receiver sizes it to a second or more):
            // the smallest transit in each.
            drift: ClockDrift::new(capacity as u64),
            accepted_before: 0,
            lost_before: 0,
            stats: JitterStats::default(),
            cfg,
        })
    }

    /// The frames the ring holds.
    pub fn capacity(&self) -> usize {
        self.present.len()
    }

    /// The counters now.
    pub fn stats(&self) -> JitterStats {
        let mut s = self.stats;
        s.lost = self.lost_before;
        if self.state != State::Idle {
            let expected = self.highest_seq + 1 - self.base_seq;
            let accepted = self.stats.accepted - self.accepted_before;
            s.lost += expected.saturating_sub(accepted);
        }
        s.buffered = self.end.saturating_sub(self.read);
        s.jitter = self.jitter.frames();
        s.drift_ppm = self.drift.ppm();
        s
    }

    /// Whether pulls take frames (the target was reached, and no underrun since).
    pub fn playing(&self) -> bool {
        self.state == State::Playing
    }

    /// Takes one packet that arrived from `from` at `arrival` (in frames of the
    /// receiver's clock, any origin). Allocates nothing.
    pub fn push(&mut self, pkt: &RtpPacket<'_>, from: IpAddr, arrival: u64) -> Push {
        self.stats.received += 1;
        let h = &pkt.header;
        if self.cfg.source.is_some_and(|s| s != from) {
            self.stats.wrong_source += 1;
            return Push::WrongSource;
        }
        if h.payload_type != self.cfg.payload_type {
            self.stats.wrong_type += 1;
            return Push::WrongType;
        }
        let frames = match self
            .cfg
            .encoding
            .frames(pkt.payload.len(), self.cfg.channels)
        {
            Ok(f) if f > 0 && f <= self.cfg.max_packet => f,
            _ => {
                self.stats.malformed += 1;
                return Push::Malformed;
            }
        };
        let mut restarted = false;
        if self.state == State::Idle {
            self.start(h.ssrc, h.timestamp, h.sequence);
        } else if h.ssrc != self.ssrc {
            if self.foreign == h.ssrc {
                self.foreign_run += 1;
            } else {
                self.foreign = h.ssrc;
                self.foreign_run = 1;
            }
            if self.foreign_run < RESTART_AFTER {
                self.stats.wrong_ssrc += 1;
                return Push::WrongSsrc;
            }
            self.restart(h.ssrc, h.timestamp, h.sequence);
            restarted = true;
        }
        let cap = self.capacity() as u64;
        let mut ts = self.extend_ts(h.timestamp);
        if self.filled == 0
            && self.state != State::Playing
            && (ts >= self.read || ts + cap < self.read)
        {
            // Nothing buffered and nothing playing: the timeline starts at this packet
            // (after a pause in sending, its timestamp is anywhere ahead).
            self.read = ts;
            self.end = ts;
        }
        let span = self.end.max(ts + frames as u64) - ts;
        if self.state == State::Buffering && ts < self.read && span <= cap {
            // Reordered before the first packet while nothing played yet: play it too.
            self.read = ts;
        }
        let too_far = ts + frames as u64 > self.read + cap || ts + cap < self.read;
        if too_far {
            self.jump_run += 1;
            if self.jump_run < RESTART_AFTER {
                self.stats.jumps += 1;
                return Push::Jump;
            }
            self.restart(h.ssrc, h.timestamp, h.sequence);
            restarted = true;
            ts = self.extend_ts(h.timestamp);
            self.read = ts;
            self.end = ts;
        }
        if ts + frames as u64 <= self.read {
            self.stats.late += 1;
            return Push::Late;
        }
        // Frames before the play position already played (concealed): skip them.
        let skip = self.read.saturating_sub(ts) as usize;
        if (skip..frames).all(|i| self.present[((ts + i as u64) & self.mask) as usize]) {
            self.stats.duplicates += 1;
            return Push::Duplicate;
        }
        self.store(pkt.payload, ts, skip, frames);
        self.end = self.end.max(ts + frames as u64);
        self.count_sequence(h.sequence);
        self.jump_run = 0;
        self.foreign_run = 0;
        self.stats.accepted += 1;
        self.update_jitter(arrival, ts);
        if restarted {
            Push::Restarted
        } else {
            Push::Accepted
        }
    }

    /// Drops up to `frames` frames ahead of the play position, audio or not: the
    /// receiver's own graph lost time (a stall, an xrun) and what it did not play sits
    /// in the buffer as latency its sender's other receivers do not have. The next pulls
    /// fade out over `fade` frames, drop, and fade back in; never below the target (and
    /// the pull in progress). Returns the frames that will be dropped. Allocates nothing.
    pub fn drop_ahead(&mut self, frames: usize) -> usize {
        if self.state != State::Playing || self.drop > 0 {
            return 0;
        }
        let spare = (self.end - self.read).saturating_sub((self.cfg.target + self.cfg.fade) as u64);
        self.drop = frames.min(spare as usize);
        self.drop_fade = self.cfg.fade;
        self.drop
    }

    /// Fills `out` (interleaved, `out.len() / channels` frames) with the next frames:
    /// silence until the target is reached, then the stream, concealing what is missing.
    /// Allocates nothing.
    pub fn pull(&mut self, out: &mut [f32]) {
        let ch = self.cfg.channels;
        let whole = out.len() / ch * ch;
        out[whole..].fill(0.0);
        let out = &mut out[..whole];
        // Playing starts once this pull leaves the target buffered: the target is
        // what stays ahead of the puller, whatever its cycle's length.
        let need = (self.cfg.target + whole / ch) as u64;
        if self.state == State::Buffering && self.end - self.read >= need {
            self.state = State::Playing;
        }
        if self.state != State::Playing {
            out.fill(0.0);
            return;
        }
        let mut concealed = false;
        let n = (whole / ch) as u64;
        let keep = self
            .cfg
            .excess
            .map_or(u64::MAX / 4, |e| (self.cfg.target + e) as u64);
        for (i, frame) in out.chunks_exact_mut(ch).enumerate() {
            // Past the fade out, a gap is passed over while what would stay buffered
            // after this pull is still more than `keep`: never audio, only silence, and
            // the fade in follows as after any gap.
            if self.gap > 0 && self.gap >= self.cfg.fade {
                let left = n - i as u64;
                while self.read + left + keep < self.end
                    && !self.present[(self.read & self.mask) as usize]
                {
                    self.read += 1;
                    self.stats.skipped += 1;
                }
            }
            if self.drop > 0 && self.drop_fade == 0 {
                for _ in 0..self.drop.min((self.end - self.read) as usize) {
                    let at = (self.read & self.mask) as usize;
                    if self.present[at] {
                        self.present[at] = false;
                        self.filled -= 1;
                    }
                    self.read += 1;
                    self.stats.skipped += 1;
                }
                self.drop = 0;
                self.fade_in = self.cfg.fade;
            }
            let at = (self.read & self.mask) as usize;
            if self.present[at] {
                self.present[at] = false;
                self.filled -= 1;
                frame.copy_from_slice(&self.ring[at * ch..(at + 1) * ch]);
                if self.fade_in > 0 {
                    let gain = 1.0 - self.fade_in as f32 / (self.cfg.fade + 1) as f32;
                    frame.iter_mut().for_each(|s| *s *= gain);
                    self.fade_in -= 1;
                }
                self.last.copy_from_slice(frame);
                self.gap = 0;
            } else {
                concealed = true;
                self.stats.concealed += 1;
                self.gap += 1;
                let gain = if self.gap <= self.cfg.fade {
                    1.0 - self.gap as f32 / (self.cfg.fade + 1) as f32
                } else {
                    0.0
                };
                for (o, l) in frame.iter_mut().zip(&self.last) {
                    *o = l * gain;
                }
                self.fade_in = self.cfg.fade;
            }
            if self.drop > 0 {
                let gain = self.drop_fade as f32 / (self.cfg.fade + 1) as f32;
                frame.iter_mut().for_each(|s| *s *= gain);
                self.drop_fade -= 1;
            }
            self.read += 1;
        }
        self.end = self.end.max(self.read);
        if concealed && self.filled == 0 {
            self.drop = 0;
            self.stats.underruns += 1;
            self.state = State::Buffering;
        }
    }

    /// Locks onto a stream: its SSRC, timestamps and sequence numbers start here.
    fn start(&mut self, ssrc: u32, ts: u32, seq: u16) {
        self.ssrc = ssrc;
        self.state = State::Buffering;
        self.read = ORIGIN + ts as u64;
        self.end = self.read;
        self.base_seq = ORIGIN + seq as u64;
        self.highest_seq = self.base_seq - 1;
        self.accepted_before = self.stats.accepted;
        self.jitter.restart();
        self.drift.restart();
    }

    /// Drops everything buffered and starts over with a new stream.
    fn restart(&mut self, ssrc: u32, ts: u32, seq: u16) {
        self.present.fill(false);
        self.filled = 0;
        self.jump_run = 0;
        self.foreign_run = 0;
        self.stats.restarts += 1;
        self.drop = 0;
        // What was lost so far stays counted.
        self.lost_before = self.stats().lost;
        self.start(ssrc, ts, seq);
    }

    /// The timestamp extended to 64 bits around the play position.
    fn extend_ts(&self, ts: u32) -> u64 {
        let delta = ts.wrapping_sub(self.read as u32) as i32;
        self.read.wrapping_add_signed(delta as i64)
    }

    fn count_sequence(&mut self, seq: u16) {
        let delta = seq.wrapping_sub(self.highest_seq as u16) as i16;
        let ext = self.highest_seq.wrapping_add_signed(delta as i64);
        if ext > self.highest_seq {
            self.highest_seq = ext;
        } else if ext < self.base_seq {
            self.base_seq = ext;
        }
    }

    fn store(&mut self, payload: &[u8], ts: u64, skip: usize, frames: usize) {
        let ch = self.cfg.channels;
        let fb = self.cfg.encoding.bytes() * ch;
        let mut i = skip;
        while i < frames {
            let at = ((ts + i as u64) & self.mask) as usize;
            // Up to the ring's end in one piece.
            let n = (frames - i).min(self.capacity() - at);
            let src = &payload[i * fb..(i + n) * fb];
            // Cannot fail: whole frames were checked and the ring piece holds n frames.
            let _ = self
                .cfg
                .encoding
                .decode(src, ch, &mut self.ring[at * ch..(at + n) * ch]);
            for p in &mut self.present[at..at + n] {
                if !*p {
                    *p = true;
                    self.filled += 1;
                }
            }
            i += n;
        }
    }

    fn update_jitter(&mut self, arrival: u64, ts: u64) {
        self.jitter.update(arrival, ts);
        self.drift.update(arrival, ts);
    }
}

#[cfg(test)]
mod tests;
