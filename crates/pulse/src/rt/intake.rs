//! The RT thread's intake: in the steady state of a low-latency playback stream, the
//! RT thread itself takes the client's blocks out of the srbchannel, so the I/O thread
//! sleeps through the whole request/answer round.
//!
//! Why: with the RT thread sending the REQUESTs ([`crate::rt::rtwire`]) the I/O thread
//! still woke once per answer, only to copy a few milliseconds of audio into the
//! stream's ring; the RT thread wakes every cycle anyway, and looking at the ring then
//! is one atomic load.
//!
//! The connection *lends* the intake ([`Lease`]: the client's ring position, the mapped
//! pool its blocks live in, the stream's ring producer and how to decode) to the RT thread
//! while nothing else needs it, and takes it back ([`RtIntake::reclaim`]) before it
//! looks at the stream or the ring for any reason. The RT thread takes only what it can
//! take whole: a memfd block for the lent stream, relative to the write index, that fits
//! the stream's ring. At anything else (a command, a seek, a block for another stream,
//! a full ring) it stops before the frame, hands the intake back and rings the I/O
//! thread's bell, which then reads on from exactly there. The client is never told: the
//! ring and its wakeup flag look the same to it, only nobody sleeps on the flag, so its
//! posts cost it no pipe write either.
//!
//! One command is answered here too: GET_PLAYBACK_LATENCY for the lent stream, which
//! libpulse sends several times a second for a stream with automatic timing updates
//! (`paplay -v`, players that show a position). Everything its reply holds is in the
//! stream's shared state or the lease, and handing the intake back for it would cost
//! an RT hand-back, an I/O-thread wakeup and a re-lend per query.

use crate::io::srb::SrbOut;
use crate::rt::rtwire::{RtWire, Sent};
use crate::rt::shared::PlayShared;
use crate::rt::shared::{PlayTiming, query_time_ns};
use crate::wire::convert::Codec;
use crate::wire::{
    CONTROL_CHANNEL, DESCRIPTOR_SIZE, FLAG_SEEK_MASK, FLAG_SHMDATA, FLAG_SHMDATA_MEMFD_BLOCK,
    FLAG_SHMRELEASE, FLAG_SHMWRITABLE, SHM_INFO_SIZE,
};
use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Block releases the RT thread holds before it hands the intake back (each is a
/// 20-byte frame sent with the stream's next REQUEST).
pub const MAX_RELEASES: usize = 16;
/// Bytes of one release frame.
pub const RELEASE_LEN: usize = DESCRIPTOR_SIZE;

/// PA_COMMAND_GET_PLAYBACK_LATENCY.
const COMMAND_GET_PLAYBACK_LATENCY: u32 = 14;
/// PA_COMMAND_REPLY.
const COMMAND_REPLY: u32 = 2;
/// Bytes of a GET_PLAYBACK_LATENCY packet: the descriptor, then command, tag and channel
/// (tagged u32s) and the client's time (a tagged timeval).
pub const LATENCY_QUERY_LEN: usize = DESCRIPTOR_SIZE + 3 * 5 + 9;
/// Bytes of its reply: the descriptor, command and tag, two usecs, a bool, two timevals,
/// the write and read indexes (s64) and the underrun and playing counts (u64).
pub const LATENCY_REPLY_LEN: usize = DESCRIPTOR_SIZE + 2 * 5 + 2 * 9 + 1 + 2 * 9 + 4 * 9;

const IO: u32 = 0;
const RT: u32 = 1;
const BUSY: u32 = 2;
const BACK: u32 = 3;

/// What the RT thread needs to take blocks in for one stream, owned by whichever
/// thread holds the intake.
pub struct Lease {
    /// The connection's srbchannel.
    pub srb: Arc<SrbOut>,
    /// Our index into the client's ring.
    pub rd: usize,
    /// The client's pool the blocks are in: its mapping (sealed against shrinking,
    /// owned by the connection, which reclaims the lease before unmapping it).
    pub pool: *const u8,
    /// Bytes mapped at `pool`.
    pub pool_len: usize,
    /// The pool's shm id; blocks of any other pool go to the I/O thread.
    pub shm_id: u32,
    /// The lent stream's channel.
    pub channel: u32,
    /// Its frame size in bytes, samples per frame and sample coding.
    pub frame_bytes: usize,
    /// Samples per frame.
    pub channels: usize,
    /// How its samples are coded.
    pub codec: Codec,
    /// Most frames the stream may hold queued (its maxlength).
    pub max_frames: u64,
    /// Its sample rate (for the device latency a latency reply gives in µs).
    pub rate: u32,
    /// The connection's write index (bytes) when it lent the intake; a latency reply
    /// adds what was taken in since.
    pub write_index: i64,
    /// The stream's ring, written here while lent.
    pub producer: rtrb::Producer<f32>,
    /// Frames ever pushed into the ring (the connection's count, carried on).
    pub pushed: u64,
    /// Where a block is copied before it is decoded (sized by the connection).
    pub scratch: Vec<u8>,
    /// What the holder did with the lease; the connection starts it with the releases
    /// it still holds.
    pub taken: Taken,
}

/// What was taken in under a lease, for the connection's accounts.
#[derive(Debug, Default, Clone, Copy)]
pub struct Taken {
    /// Bytes of audio taken in.
    pub written: u64,
    /// Blocks taken in.
    pub blocks: u64,
    /// Bytes of the client's ring consumed.
    pub ring_bytes: u64,
    /// Blocks copied out whose release frame has not been sent.
    pub releases: [u32; MAX_RELEASES],
    /// How many of `releases` are held.
    pub held: usize,
    /// CLOCK_MONOTONIC ns of the last block taken in (0: none).
    pub last_data_ns: u64,
    /// Whether the client corrupted its ring's count (the connection ends it).
    pub corrupt: bool,
    /// GET_PLAYBACK_LATENCY queries the RT thread answered.
    pub answered: u64,
}

impl Taken {
    /// Nothing taken yet, with `held` releases to send (at most [`MAX_RELEASES`]).
    pub fn holding(held: &[u32]) -> Taken {
        let mut t = Taken::default();
        let n = held.len().min(MAX_RELEASES);
        t.releases[..n].copy_from_slice(&held[..n]);
        t.held = n;
        t
    }
}

/// One connection's intake, shared by the connection and its streams' RT readers.
pub struct RtIntake {
    state: AtomicU32,
    lease: UnsafeCell<Option<Lease>>,
    /// CLOCK_MONOTONIC ns when the RT thread last looked (the connection takes the
    /// intake back when the RT thread stops looking, e.g. the stream's device stopped).
    looked_ns: AtomicU64,
}

// SAFETY: `lease` is touched only by the holder of `state`: the connection while it is
// IO or BACK (after its acquiring swap), the RT thread between its RT→BUSY exchange and
// the release store that ends it. The pool pointer is only dereferenced by that holder,
// and the connection keeps the mapping alive until it has reclaimed the lease.
unsafe impl Sync for RtIntake {}
// SAFETY: as above; every field is Send but the raw pool pointer, which is only a view
// of a mapping the connection owns and outlives every lease.
unsafe impl Send for RtIntake {}

impl std::fmt::Debug for RtIntake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtIntake")
            .field("state", &self.state.load(Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for RtIntake {
    fn default() -> Self {
        RtIntake {
            state: AtomicU32::new(IO),
            lease: UnsafeCell::new(None),
            looked_ns: AtomicU64::new(0),
        }
    }
}

/// Where the RT side answers the lent stream's latency queries: the client's wire and
/// the stream's shared state (`None`: every query goes to the I/O thread).
pub type AnswerOn<'a> = Option<(&'a RtWire, &'a PlayShared)>;

/// What the RT thread's look at the ring came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pulled {
    /// Frames pushed into the stream's ring.
    pub frames: u64,
    /// The intake went back to the I/O thread (the caller rings its bell).
    pub handed_back: bool,
}

/// One frame at the front of the client's ring, as far as the RT thread cares.
enum Front {
    /// Not all of it is there yet.
    Partial,
    /// A block of the lent stream: (block id, index, length) in the lent pool.
    Block(u32, u32, u32),
    /// GET_PLAYBACK_LATENCY for the lent stream: its tag and the client's timeval as
    /// sent (seconds, microseconds below a second).
    Query(u32, [u8; 8]),
    /// Anything else: the I/O thread's.
    Other,
}

fn be(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

impl Lease {
    fn front(&self, fill: usize) -> Front {
        if fill < DESCRIPTOR_SIZE {
            return Front::Partial;
        }
        let mut d = [0u8; DESCRIPTOR_SIZE + SHM_INFO_SIZE as usize];
        self.srb.peek_in(self.rd, &mut d[..DESCRIPTOR_SIZE]);
        let (length, channel, offset, flags) =
            (be(&d, 0), be(&d, 4), (be(&d, 8), be(&d, 12)), be(&d, 16));
        if channel == CONTROL_CHANNEL
            && length as usize == LATENCY_QUERY_LEN - DESCRIPTOR_SIZE
            && offset == (0, 0)
            && flags == 0
        {
            return self.query(fill);
        }
        let ours = FLAG_SHMDATA | FLAG_SHMDATA_MEMFD_BLOCK;
        // Relative seek (0) by 0 bytes, a memfd block, nothing else set.
        if channel != self.channel
            || length != SHM_INFO_SIZE
            || offset != (0, 0)
            || flags & ours != ours
            || flags & !(ours | FLAG_SHMWRITABLE) != 0
            || flags & FLAG_SEEK_MASK != 0
        {
            return Front::Other;
        }
        if fill < d.len() {
            return Front::Partial;
        }
        self.srb.peek_in(self.rd, &mut d);
        let (block, shm_id, index, len) = (be(&d, 20), be(&d, 24), be(&d, 28), be(&d, 32));
        if shm_id != self.shm_id {
            return Front::Other;
        }
        Front::Block(block, index, len)
    }

    /// A control packet of a latency query's length at the front: the query for the
    /// lent stream, exactly as libpulse encodes it, or the I/O thread's.
    fn query(&self, fill: usize) -> Front {
        if fill < LATENCY_QUERY_LEN {
            return Front::Partial;
        }
        let mut p = [0u8; LATENCY_QUERY_LEN];
        self.srb.peek_in(self.rd, &mut p);
        let d = DESCRIPTOR_SIZE;
        let tagged = [(d, b'L'), (d + 5, b'L'), (d + 10, b'L'), (d + 15, b'T')]
            .iter()
            .all(|&(at, t)| p[at] == t);
        // A timeval's microseconds past a second are the decoder's to refuse.
        if !tagged
            || be(&p, d + 1) != COMMAND_GET_PLAYBACK_LATENCY
            || be(&p, d + 11) != self.channel
            || be(&p, d + 20) >= 1_000_000
        {
            return Front::Other;
        }
        let mut local = [0u8; 8];
        local.copy_from_slice(&p[d + 16..d + 24]);
        Front::Query(be(&p, d + 6), local)
    }

    /// The reply to a latency query with `tag` and the client's time `local`, as the
    /// connection would answer it (`remote_ns`: our wall clock, ns since the epoch,
    /// `mono_ns`: CLOCK_MONOTONIC read with it).
    pub fn latency_reply(
        &self,
        tag: u32,
        local: [u8; 8],
        t: &PlayTiming,
        remote_ns: u64,
        mono_ns: u64,
    ) -> [u8; LATENCY_REPLY_LEN] {
        let local_us = u32::from_be_bytes([local[0], local[1], local[2], local[3]]) as u64
            * 1_000_000
            + u32::from_be_bytes([local[4], local[5], local[6], local[7]]) as u64;
        let query_ns = query_time_ns(local_us, remote_ns, mono_ns);
        let (sink_usec, read_index, playing_for) =
            t.figures(self.frame_bytes as u64, self.rate, query_ns);
        let write_index = self.write_index.saturating_add(self.taken.written as i64);
        let mut p = [0u8; LATENCY_REPLY_LEN];
        p[0..4].copy_from_slice(&((LATENCY_REPLY_LEN - DESCRIPTOR_SIZE) as u32).to_be_bytes());
        p[4..8].copy_from_slice(&CONTROL_CHANNEL.to_be_bytes());
        let mut at = DESCRIPTOR_SIZE;
        let mut put = |tag: u8, bytes: &[u8]| {
            p[at] = tag;
            p[at + 1..at + 1 + bytes.len()].copy_from_slice(bytes);
            at += 1 + bytes.len();
        };
        put(b'L', &COMMAND_REPLY.to_be_bytes());
        put(b'L', &tag.to_be_bytes());
        put(b'U', &sink_usec.to_be_bytes());
        put(b'U', &0u64.to_be_bytes());
        put(if t.playing { b'1' } else { b'0' }, &[]);
        put(b'T', &local);
        let (secs, usecs) = (remote_ns / 1_000_000_000, remote_ns % 1_000_000_000 / 1_000);
        let mut remote = [0u8; 8];
        remote[..4].copy_from_slice(&(secs as u32).to_be_bytes());
        remote[4..].copy_from_slice(&(usecs as u32).to_be_bytes());
        put(b'T', &remote);
        put(b'r', &write_index.to_be_bytes());
        put(b'r', &read_index.to_be_bytes());
        put(b'R', &0u64.to_be_bytes());
        put(b'R', &playing_for.to_be_bytes());
        debug_assert_eq!(at, LATENCY_REPLY_LEN);
        p
    }

    /// Answers the latency query at the front on `wire` and steps past it; false when
    /// it cannot (the wire is not the srbchannel, or busy, or the ring is full): the I/O
    /// thread then answers it.
    fn answer(&mut self, tag: u32, local: [u8; 8], to: AnswerOn<'_>) -> bool {
        let Some((wire, shared)) = to.filter(|(w, _)| w.on_srb()) else {
            return false;
        };
        // Wall clock, as the connection's replies give it: a vDSO read.
        let remote_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mono_ns = quaver_rt::monotonic_ns();
        let reply = self.latency_reply(tag, local, &shared.timing(), remote_ns, mono_ns);
        if wire.try_send(&reply) != Sent::Whole {
            return false;
        }
        self.step(LATENCY_QUERY_LEN)
    }

    /// Consumes `used` bytes of the client's ring; false if its count was corrupt.
    fn step(&mut self, used: usize) -> bool {
        if !self.srb.consume_in(used) {
            self.taken.corrupt = true;
            return false;
        }
        self.rd = (self.rd + used) % self.srb.capacity();
        self.taken.ring_bytes += used as u64;
        true
    }

    /// Takes whole blocks of the lent stream from the front of the client's ring while
    /// they fit, answering latency queries for it on the way; false when it stopped at
    /// something the I/O thread must see.
    fn take(&mut self, removed: u64, now_ns: u64, pulled: &mut Pulled, to: AnswerOn<'_>) -> bool {
        loop {
            let Some(fill) = self.srb.in_fill() else {
                self.taken.corrupt = true;
                return false;
            };
            let (block, index, len) = match self.front(fill) {
                Front::Partial => return true,
                Front::Other => return false,
                Front::Query(tag, local) => {
                    if !self.answer(tag, local, to) {
                        return false;
                    }
                    self.taken.answered += 1;
                    continue;
                }
                Front::Block(b, i, l) => (b, i as usize, l as usize),
            };
            let fs = self.frame_bytes;
            let frames = len / fs;
            let queued = self.pushed.saturating_sub(removed);
            // A partial frame, a block past the pool's end, one larger than the copy
            // buffer or than the stream may queue, and a full ring (the block would wait
            // in the connection's overflow queue) are the I/O thread's to handle.
            if len == 0
                || !len.is_multiple_of(fs)
                || index.checked_add(len).is_none_or(|end| end > self.pool_len)
                || len > self.scratch.len()
                || queued + frames as u64 > self.max_frames
                || self.producer.slots() < frames * self.channels
                || self.taken.held == MAX_RELEASES
            {
                return false;
            }
            let bytes = &mut self.scratch[..len];
            // SAFETY: index + len <= pool_len, inside the client's mapping, which is
            // sealed against shrinking and outlives the lease. The client may write the
            // block meanwhile; the bytes are copied before they are decoded.
            unsafe {
                std::ptr::copy_nonoverlapping(self.pool.add(index), bytes.as_mut_ptr(), len);
            }
            let n = frames * self.channels;
            let Ok(mut chunk) = self.producer.write_chunk(n) else {
                return false;
            };
            let (a, b) = chunk.as_mut_slices();
            let split = a.len() / self.channels * fs;
            self.codec.decode(&bytes[..split], a);
            self.codec.decode(&bytes[split..], b);
            chunk.commit_all();
            if !self.step(DESCRIPTOR_SIZE + SHM_INFO_SIZE as usize) {
                return false;
            }
            let t = &mut self.taken;
            t.written += len as u64;
            t.blocks += 1;
            t.releases[t.held] = block;
            t.held += 1;
            t.last_data_ns = now_ns;
            self.pushed += frames as u64;
            pulled.frames += frames as u64;
        }
    }

    /// Writes the held releases as frames into `buf` (room for `MAX_RELEASES` frames)
    /// and returns the bytes written; the caller clears `held` once they went out.
    pub fn releases_into(&self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        for &id in &self.taken.releases[..self.taken.held] {
            let f = &mut buf[n..n + RELEASE_LEN];
            f.fill(0);
            f[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
            f[8..12].copy_from_slice(&id.to_be_bytes());
            f[16..20].copy_from_slice(&FLAG_SHMRELEASE.to_be_bytes());
            n += RELEASE_LEN;
        }
        n
    }
}

impl RtIntake {
    /// Connection side: lends the intake to the RT thread. The caller reclaimed any
    /// earlier lease and its own packet reader is between packets at `lease.rd`.
    pub fn lend(&self, lease: Lease) {
        debug_assert_eq!(self.state.load(Relaxed), IO);
        // SAFETY: IO: the connection holds the intake.
        unsafe { *self.lease.get() = Some(lease) };
        self.looked_ns.store(quaver_rt::monotonic_ns(), Relaxed);
        self.state.store(RT, Release);
    }

    /// Connection side: takes the intake back (waiting out an RT look under way) and
    /// returns the lease, if one was out.
    pub fn reclaim(&self) -> Option<Lease> {
        loop {
            match self.state.load(Acquire) {
                IO => return None,
                BUSY => std::thread::yield_now(),
                s => {
                    if self.state.compare_exchange(s, IO, AcqRel, Acquire).is_ok() {
                        // SAFETY: IO now: the RT thread will not touch the lease.
                        return unsafe { (*self.lease.get()).take() };
                    }
                }
            }
        }
    }

    /// Whether the RT thread holds the intake (the connection must not read the ring).
    pub fn lent(&self) -> bool {
        matches!(self.state.load(Acquire), RT | BUSY)
    }

    /// Whether the RT thread gave the intake back (the connection reclaims it and
    /// reads on).
    pub fn handed_back(&self) -> bool {
        self.state.load(Acquire) == BACK
    }

    /// Nanoseconds since the RT thread last looked at the ring.
    pub fn since_look_ns(&self) -> u64 {
        quaver_rt::monotonic_ns().saturating_sub(self.looked_ns.load(Relaxed))
    }

    /// RT side: runs `f` on the lease if it is lent for `channel`; `f` returns whether
    /// the RT thread keeps the intake (false hands it back). No allocation, no waiting.
    pub fn with_lease<R>(
        &self,
        channel: u32,
        f: impl FnOnce(&mut Lease) -> (R, bool),
    ) -> Option<R> {
        if self
            .state
            .compare_exchange(RT, BUSY, Acquire, Relaxed)
            .is_err()
        {
            return None;
        }
        // SAFETY: BUSY: the RT thread holds the intake until the store below.
        let lease = unsafe { (*self.lease.get()).as_mut() };
        let Some(lease) = lease.filter(|l| l.channel == channel) else {
            self.state.store(RT, Release);
            return None;
        };
        let (r, keep) = f(lease);
        self.state.store(if keep { RT } else { BACK }, Release);
        Some(r)
    }

    /// RT side: takes in what the client's ring holds for stream `channel` (whose RT
    /// reader has removed `removed` frames from its ring), answering its latency queries
    /// as `to` says.
    pub fn pull(&self, channel: u32, removed: u64, to: AnswerOn<'_>) -> Pulled {
        let now = quaver_rt::monotonic_ns();
        self.looked_ns.store(now, Relaxed);
        let mut pulled = Pulled::default();
        let kept = self.with_lease(channel, |l| {
            let keep = l.take(removed, now, &mut pulled, to);
            (keep, keep)
        });
        pulled.handed_back = kept == Some(false);
        pulled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::srb::Srb;
    use crate::wire::{Out, Packet, PacketReader};
    use std::sync::atomic::Ordering::Relaxed;

    /// A lease over `srb` for channel 5, s16le stereo, with a 64 KiB "pool" of ours.
    fn lease(srb: &Srb, pool: &[u8], ring: usize) -> (Lease, rtrb::Consumer<f32>) {
        let (producer, consumer) = rtrb::RingBuffer::new(ring);
        let l = Lease {
            srb: srb.out(),
            rd: srb.read_index(),
            pool: pool.as_ptr(),
            pool_len: pool.len(),
            shm_id: 9,
            channel: 5,
            frame_bytes: 4,
            channels: 2,
            codec: Codec::Pcm(quaver_dsp::format::SampleFormat::S16Le),
            max_frames: 1_000,
            rate: 48_000,
            write_index: 0,
            producer,
            pushed: 0,
            scratch: vec![0; 4096],
            taken: Taken::holding(&[]),
        };
        (l, consumer)
    }

    fn block(buf: &mut Vec<u8>, channel: u32, id: u32, shm: u32, index: u32, len: u32) {
        Out {
            buf,
            version: pulseaudio::protocol::MAX_VERSION,
        }
        .shm_memblock(channel, 0, [id, shm, index, len]);
    }

    #[test]
    fn blocks_of_the_lent_stream_are_taken_whole_and_anything_else_goes_back() {
        let mut srb = Srb::new(1, 2).unwrap();
        let mut at = 0;
        // Frames of s16le stereo: sample k of the pool is k.
        let pool: Vec<u8> = (0..4096u16)
            .flat_map(|k| (k as i16).to_le_bytes())
            .collect();
        let (l, mut consumer) = lease(&srb, &pool, 2 * 1_000);
        let ik = RtIntake::default();
        assert!(!ik.lent());
        ik.lend(l);
        assert!(ik.lent());
        assert_eq!(ik.pull(5, 0, None), Pulled::default(), "an empty ring");
        let mut bytes = Vec::new();
        block(&mut bytes, 5, 70, 9, 8, 16);
        block(&mut bytes, 5, 71, 9, 24, 8);
        // Half of the next descriptor: waits for the rest.
        let mut cmd = Vec::new();
        Out {
            buf: &mut cmd,
            version: pulseaudio::protocol::MAX_VERSION,
        }
        .command(&pulseaudio::protocol::Command::Request(
            pulseaudio::protocol::Request {
                channel: 1,
                length: 2,
            },
        ));
        srb.client_write(&mut at, &bytes);
        srb.client_write(&mut at, &cmd[..10]);
        assert_eq!(
            ik.pull(5, 0, None),
            Pulled {
                frames: 6,
                handed_back: false
            }
        );
        assert_eq!(
            ik.pull(5, 0, None),
            Pulled::default(),
            "a partial descriptor waits"
        );
        // Another stream's reader does not touch it.
        srb.client_write(&mut at, &cmd[10..]);
        assert_eq!(ik.pull(4, 0, None), Pulled::default());
        assert!(ik.lent());
        // A command: handed back, untouched.
        assert_eq!(
            ik.pull(5, 0, None),
            Pulled {
                frames: 0,
                handed_back: true
            }
        );
        assert!(ik.handed_back() && !ik.lent());
        assert_eq!(
            ik.pull(5, 0, None),
            Pulled::default(),
            "not the RT thread's any more"
        );
        let l = ik.reclaim().expect("lent");
        let t = l.taken;
        assert_eq!((t.written, t.blocks, l.pushed, t.held), (24, 2, 6, 2));
        assert_eq!(t.releases[..2], [70, 71]);
        let got: Vec<f32> = consumer.read_chunk(12).unwrap().into_iter().collect();
        // Samples 4..16 of the pool (bytes 8..32).
        let want: Vec<f32> = (4..16).map(|k| k as f32 / 32768.0).collect();
        assert_eq!(got, want);
        // The connection reads on from where the RT thread stopped: the whole command.
        srb.set_read_index(l.rd, l.taken.ring_bytes);
        let mut rest = Vec::new();
        srb.read(&mut rest).unwrap();
        let (used, p) = PacketReader::default().feed(&rest).unwrap();
        assert_eq!(used, cmd.len());
        assert!(matches!(p, Some(Packet::Control(_))));
        // Releases go out as the frames the reader parses.
        let mut buf = [0u8; MAX_RELEASES * RELEASE_LEN];
        let n = l.releases_into(&mut buf);
        assert_eq!(n, 2 * RELEASE_LEN);
        let mut r = PacketReader::default();
        r.enable_shm();
        assert_eq!(
            r.feed(&buf[..n]).unwrap(),
            (RELEASE_LEN, Some(Packet::ShmRelease(70)))
        );
        assert!(ik.reclaim().is_none(), "taken back once");
    }

    /// GET_PLAYBACK_LATENCY for `channel` with `tag`, as libpulse writes it, at a time
    /// `usecs` past the epoch.
    fn latency_query(tag: u32, channel: u32, usecs: u64) -> Vec<u8> {
        use pulseaudio::protocol::{Command, LatencyParams};
        let mut b = Vec::new();
        pulseaudio::protocol::write_command_message(
            &mut b,
            tag,
            &Command::GetPlaybackLatency(LatencyParams {
                channel,
                now: std::time::UNIX_EPOCH + std::time::Duration::from_micros(usecs),
            }),
            pulseaudio::protocol::MAX_VERSION,
        )
        .unwrap();
        assert_eq!(b.len(), LATENCY_QUERY_LEN);
        b
    }

    const T0: u64 = 1_700_000_000_123_456;

    fn timing() -> PlayTiming {
        PlayTiming {
            consumed: 300,
            delay: 480,
            playing: true,
            start_at: 100,
            at_ns: 0,
        }
    }

    /// A stream's shared state as `timing` has it.
    fn shared() -> PlayShared {
        let t = timing();
        let s = PlayShared::new(
            Arc::new(crate::rt::transport::Bell::new().unwrap()),
            0,
            false,
        );
        s.consumed.store(t.consumed, Relaxed);
        s.delay.store(t.delay, Relaxed);
        s.playing.store(t.playing, Relaxed);
        s.start_at.store(t.start_at, Relaxed);
        assert_eq!(s.timing(), t);
        s
    }

    #[test]
    fn the_rt_sides_latency_reply_is_the_connections() {
        use pulseaudio::protocol::PlaybackLatency;
        use std::time::{Duration, UNIX_EPOCH};
        let srb = Srb::new(1, 2).unwrap();
        let pool = vec![0u8; 64];
        let (mut l, _c) = lease(&srb, &pool, 64);
        l.write_index = 1_000;
        l.taken.written = 24;
        let remote_ns = 1_800_000_000_987_654_321;
        let local = {
            let q = latency_query(1, 5, T0);
            let mut t = [0u8; 8];
            t.copy_from_slice(&q[LATENCY_QUERY_LEN - 8..]);
            t
        };
        for playing in [true, false] {
            let t = PlayTiming {
                playing,
                ..timing()
            };
            let mut want = Vec::new();
            Out {
                buf: &mut want,
                version: pulseaudio::protocol::MAX_VERSION,
            }
            .reply(
                0xABCD,
                &PlaybackLatency {
                    sink_usec: 10_000,
                    source_usec: 0,
                    playing,
                    local_time: UNIX_EPOCH + Duration::from_micros(T0),
                    remote_time: UNIX_EPOCH + Duration::from_nanos(remote_ns),
                    write_offset: 1_024,
                    read_offset: 1_200,
                    underrun_for: 0,
                    playing_for: if playing { 800 } else { 0 },
                },
            );
            assert_eq!(
                l.latency_reply(0xABCD, local, &t, remote_ns, 1)[..],
                want[..],
                "playing: {playing}"
            );
        }
    }

    #[test]
    fn the_lent_streams_latency_queries_are_answered_between_its_blocks() {
        use crate::rt::rtwire::RtWire;
        use pulseaudio::protocol::PlaybackLatency;
        use std::time::{Duration, SystemTime, UNIX_EPOCH};
        let (ours, _client) = std::os::unix::net::UnixStream::pair().unwrap();
        let srb = Srb::new(1, 2).unwrap();
        let wire = RtWire::new(&ours).unwrap();
        wire.use_srb(srb.out());
        let (mut at, mut back) = (0, 0);
        let pool = vec![0u8; 4096];
        let (mut l, _c) = lease(&srb, &pool, 2_000);
        l.write_index = 1_000;
        let ik = RtIntake::default();
        ik.lend(l);
        let mut bytes = Vec::new();
        block(&mut bytes, 5, 1, 9, 0, 16);
        bytes.extend(latency_query(77, 5, T0));
        block(&mut bytes, 5, 2, 9, 16, 8);
        srb.client_write(&mut at, &bytes);
        let sh = shared();
        let to = Some((&wire, &sh));
        let before = SystemTime::now();
        assert_eq!(
            ik.pull(5, 0, to),
            Pulled {
                frames: 6,
                handed_back: false
            }
        );
        let after = SystemTime::now();
        let reply = srb.client_read(&mut back);
        let (tag, r): (u32, PlaybackLatency) = pulseaudio::protocol::read_reply_message(
            &mut &reply[..],
            pulseaudio::protocol::MAX_VERSION,
        )
        .unwrap();
        assert_eq!(reply.len(), LATENCY_REPLY_LEN);
        assert_eq!(tag, 77);
        // The write index counts what was taken in before the query, not after.
        assert_eq!(
            (r.sink_usec, r.playing, r.write_offset, r.read_offset),
            (10_000, true, 1_016, 1_200)
        );
        assert_eq!((r.underrun_for, r.playing_for), (0, 800));
        assert_eq!(r.local_time, UNIX_EPOCH + Duration::from_micros(T0));
        let us = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_micros();
        assert!((us(before)..=us(after)).contains(&us(r.remote_time)));
        let l = ik.reclaim().unwrap();
        assert_eq!((l.taken.answered, l.taken.blocks), (1, 2));
        assert_eq!(l.taken.ring_bytes as usize, bytes.len());
    }

    #[test]
    fn a_query_the_rt_side_cannot_answer_goes_back_unread() {
        use crate::rt::rtwire::RtWire;
        let pool = vec![0u8; 4096];
        let mut other_cmd = latency_query(7, 5, T0);
        other_cmd[21..25].copy_from_slice(&15u32.to_be_bytes()); // GET_RECORD_LATENCY
        let mut bad_usec = latency_query(7, 5, T0);
        bad_usec[LATENCY_QUERY_LEN - 4..].copy_from_slice(&1_000_000u32.to_be_bytes());
        let cases: [(&str, Vec<u8>, bool, bool); 5] = [
            ("another stream's", latency_query(7, 6, T0), true, false),
            ("another command", other_cmd, true, false),
            ("microseconds past a second", bad_usec, true, false),
            (
                "the socket, not the srbchannel",
                latency_query(7, 5, T0),
                false,
                false,
            ),
            (
                "the connection holding the wire",
                latency_query(7, 5, T0),
                true,
                true,
            ),
        ];
        for (what, query, on_srb, held) in cases {
            let (ours, _client) = std::os::unix::net::UnixStream::pair().unwrap();
            let srb = Srb::new(1, 2).unwrap();
            let wire = RtWire::new(&ours).unwrap();
            if on_srb {
                wire.use_srb(srb.out());
            }
            if held {
                assert_eq!(wire.acquire(), Ok(None));
            }
            let (l, _c) = lease(&srb, &pool, 2_000);
            let ik = RtIntake::default();
            ik.lend(l);
            let mut at = 0;
            srb.client_write(&mut at, &query[..30]);
            let sh = shared();
            let to = Some((&wire, &sh));
            assert_eq!(ik.pull(5, 0, to), Pulled::default(), "{what}: a part waits");
            srb.client_write(&mut at, &query[30..]);
            assert_eq!(
                ik.pull(5, 0, to),
                Pulled {
                    frames: 0,
                    handed_back: true
                },
                "{what}"
            );
            let l = ik.reclaim().unwrap();
            assert_eq!((l.rd, l.taken.answered), (0, 0), "{what}: nothing read");
            assert!(srb.client_read(&mut 0).is_empty(), "{what}: nothing sent");
        }
    }

    #[test]
    fn an_answer_missing_at_the_first_look_after_its_request_is_late() {
        use crate::rt::rtwire::Periods;
        use crate::rt::shared::{Bell, PlayShared};
        use crate::rt::transport::PlaySource;
        use quaver_engine::stream::FrameSource;
        let srb = Srb::new(1, 2).unwrap();
        let mut at = 0;
        let pool = vec![0u8; 4096];
        let (l, consumer) = lease(&srb, &pool, 2_000);
        let shared = Arc::new(PlayShared::new(Arc::new(Bell::new().unwrap()), 0, false));
        shared.late_after_ns.store(1, Relaxed);
        let ik = Arc::new(RtIntake::default());
        ik.lend(l);
        let mut src = PlaySource::new(shared.clone(), consumer, 2).with_intake(Some(ik), 5);
        let rq = &shared.request;
        rq.arm(
            5,
            0,
            0,
            0,
            4,
            Periods {
                normal: 10,
                late: 2,
            },
        );
        let ask = |consumed: u64| {
            assert!(rq.due(consumed).is_some());
            let late = shared.late(quaver_rt::monotonic_ns());
            rq.sent(late);
        };
        let mut answer = || {
            let mut b = Vec::new();
            block(&mut b, 5, 1, 9, 0, 16);
            srb.client_write(&mut at, &b);
        };
        // Answered before the RT thread's first look after the request: on time, even
        // though a cycle went by (here: any time at all is over the limit).
        ask(0);
        answer();
        std::thread::sleep(std::time::Duration::from_millis(1));
        src.prepare();
        assert!(!shared.late(quaver_rt::monotonic_ns()));
        assert_eq!(shared.pushed.load(Relaxed), 4, "the pushed count follows");
        // Not there at the first look, there at the next: late.
        ask(10);
        src.prepare();
        answer();
        std::thread::sleep(std::time::Duration::from_millis(1));
        src.prepare();
        assert!(shared.late(quaver_rt::monotonic_ns()));
        assert_eq!(shared.late_answers.load(Relaxed), 1);
        // So the next request comes 2 frames on, not 10.
        ask(20);
        assert!(rq.due(21).is_none());
        assert!(rq.due(22).is_some());
    }

    #[test]
    fn what_does_not_fit_or_is_not_a_plain_block_goes_back_before_it_is_read() {
        let pool = vec![0u8; 4096];
        let cases: [(&str, u32, u32, u32, u32, u64, usize); 6] = [
            ("another pool", 5, 8, 0, 16, 1_000, 2_000),
            ("a partial frame", 5, 9, 0, 6, 1_000, 2_000),
            ("past the pool's end", 5, 9, 4090, 16, 1_000, 2_000),
            ("over maxlength", 5, 9, 0, 4000, 100, 2_000),
            ("a full ring", 5, 9, 0, 4000, 10_000, 200),
            ("another channel", 6, 9, 0, 16, 1_000, 2_000),
        ];
        for (what, channel, shm, index, len, max, ring) in cases {
            let srb = Srb::new(1, 2).unwrap();
            let mut at = 0;
            let (mut l, _c) = lease(&srb, &pool, ring);
            l.max_frames = max;
            let ik = RtIntake::default();
            ik.lend(l);
            let mut bytes = Vec::new();
            block(&mut bytes, channel, 1, shm, index, len);
            srb.client_write(&mut at, &bytes);
            let p = ik.pull(5, 0, None);
            assert_eq!(
                p,
                Pulled {
                    frames: 0,
                    handed_back: true
                },
                "{what}"
            );
            let l = ik.reclaim().unwrap();
            assert_eq!((l.rd, l.taken.blocks), (0, 0), "{what}: nothing read");
        }
        // A seek is the connection's too.
        let srb = Srb::new(1, 2).unwrap();
        let mut at = 0;
        let (l, _c) = lease(&srb, &pool, 2_000);
        let ik = RtIntake::default();
        ik.lend(l);
        let mut bytes = Vec::new();
        block(&mut bytes, 5, 1, 9, 0, 16);
        bytes[19] = 1; // PA_SEEK_ABSOLUTE
        srb.client_write(&mut at, &bytes);
        assert!(ik.pull(5, 0, None).handed_back);
    }
}
