//! The per-stream audio ring in shared memory, and its doorbell.
//!
//! A stream's audio moves through a single-producer single-consumer ring of
//! interleaved f32 frames in a sealed memfd that both processes map. For playback
//! the client produces and the server's real-time thread consumes; for record it
//! is the other way round. The server rings the stream's [`Doorbell`] (an eventfd)
//! after it moved a position, so a blocked client wakes up.
//!
//! Both sides treat the other as hostile: the header lives in memory the peer can
//! scribble on at any time, so
//! - geometry (channels, capacity) is read once, validated against the file size,
//!   and then only the local copy is used;
//! - every index is masked into the ring and every length is bounded by the local
//!   capacity, so no value in shared memory can cause an out-of-bounds access;
//! - a fill level above capacity (or a reader ahead of the writer) puts the ring in
//!   a sticky corrupt state in which reads and writes move nothing.
//!
//! All shared words, samples included, are accessed through atomics. A peer writing
//! concurrently is then merely garbage-in rather than a data race, and on x86-64
//! and aarch64 relaxed atomic loads and stores are plain moves.

use std::io;
use std::mem::offset_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{EventfdFlags, PollFlags, eventfd};
use rustix::fs::{MemfdFlags, OFlags, SealFlags};
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};

use crate::framing::poll_fd;

/// `"QVRG"` little-endian: identifies a quaver ring.
pub const MAGIC: u32 = u32::from_le_bytes(*b"QVRG");
/// Version of the ring layout below; bumped on any incompatible change.
pub const LAYOUT_VERSION: u32 = 1;
/// Bytes before the sample data (the header, padded for future fields).
pub const HEADER_BYTES: usize = 512;
/// Largest ring capacity in frames.
pub const MAX_CAPACITY_FRAMES: u32 = 1 << 22;
/// Largest sample data area in bytes (256 MiB), whatever the geometry.
pub const MAX_DATA_BYTES: usize = 1 << 28;
/// Most channels in a ring.
pub const MAX_RING_CHANNELS: u32 = 64;

/// Flag set by the client: it wrote its last frame and waits for the server to play it.
pub const FLAG_CLIENT_DRAIN: u32 = 1 << 0;
/// Flag set by the server once the stream is running in the graph.
pub const FLAG_SERVER_STARTED: u32 = 1 << 1;
/// Flag set by the server when the stream failed (device gone, ring corrupt, killed).
pub const FLAG_SERVER_ERROR: u32 = 1 << 2;

/// Puts a field on its own cache line so the producer's and consumer's hot
/// words do not false-share.
#[repr(C, align(64))]
struct Line<T>(T);

/// Geometry, written once by the server before the fd is sent.
#[repr(C)]
struct Meta {
    magic: AtomicU32,
    version: AtomicU32,
    channels: AtomicU32,
    capacity_frames: AtomicU32,
    data_offset: AtomicU32,
}

#[repr(C)]
struct Header {
    meta: Line<Meta>,
    write_pos: Line<AtomicU64>,
    read_pos: Line<AtomicU64>,
    played_pos: Line<AtomicU64>,
    flags: Line<AtomicU32>,
    xruns: Line<AtomicU32>,
    delay_frames: Line<AtomicU32>,
}

// The layout is a wire format (documented in docs/protocol.md); pin it.
const _: () = {
    assert!(offset_of!(Meta, magic) == 0);
    assert!(offset_of!(Meta, version) == 4);
    assert!(offset_of!(Meta, channels) == 8);
    assert!(offset_of!(Meta, capacity_frames) == 12);
    assert!(offset_of!(Meta, data_offset) == 16);
    assert!(offset_of!(Header, write_pos) == 64);
    assert!(offset_of!(Header, read_pos) == 128);
    assert!(offset_of!(Header, played_pos) == 192);
    assert!(offset_of!(Header, flags) == 256);
    assert!(offset_of!(Header, xruns) == 320);
    assert!(offset_of!(Header, delay_frames) == 384);
    assert!(size_of::<Header>() <= HEADER_BYTES);
};

/// Why a received ring fd was refused.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A syscall on the fd failed.
    #[error("shared memory: {0}")]
    Io(#[from] io::Error),
    /// The fd is not a regular file (memfd).
    #[error("ring fd is not a memfd")]
    NotAFile,
    /// The file can still grow or shrink; a shrinking peer could crash us with SIGBUS.
    #[error("ring memfd is not sealed against resizing")]
    NotSealed,
    /// The file is too small or too large to be a ring.
    #[error("ring memfd has implausible size {0} bytes")]
    BadSize(u64),
    /// The magic number is wrong.
    #[error("ring has bad magic {0:#010x}")]
    BadMagic(u32),
    /// The layout version is not ours.
    #[error("ring layout version {0} is not supported (expected {LAYOUT_VERSION})")]
    BadVersion(u32),
    /// The channel count differs from what the reply announced.
    #[error("ring has {found} channels, expected {expected}")]
    ChannelMismatch {
        /// Channels announced in the reply.
        expected: u32,
        /// Channels in the ring header.
        found: u32,
    },
    /// Capacity zero, not a power of two or too large.
    #[error("ring capacity {0} frames is not a power of two in 1..={MAX_CAPACITY_FRAMES}")]
    BadCapacity(u32),
    /// The header's data offset is not [`HEADER_BYTES`].
    #[error("ring data offset {0} is not {HEADER_BYTES}")]
    BadDataOffset(u32),
    /// A callback client's shared block does not match what the reply announced.
    #[error("callback shared memory: {0}")]
    BadGeometry(String),
    /// The header's geometry does not match the file size.
    #[error("ring header describes {expected} bytes but the memfd has {actual}")]
    SizeMismatch {
        /// Size implied by the header.
        expected: u64,
        /// Size of the file.
        actual: u64,
    },
}

/// A shared mapping, unmapped on drop.
pub(crate) struct Mapping {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
}

impl Mapping {
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file we hold; no existing memory is
        // affected. The file is sealed against shrinking, so the whole range stays
        // backed for the mapping's lifetime.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from mmap and nothing borrows the mapping any more
        // (ShmRing hands out no references that outlive it).
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A single-producer single-consumer ring of interleaved f32 frames in a memfd.
///
/// One side calls only the producer methods (`write`), the other only the consumer
/// methods (`read`, `discard`); both may call the inspectors. It is `Sync` so the
/// two ends may live in two threads of one process (as in tests), but two
/// concurrent producers (or consumers) garble audio.
pub struct ShmRing {
    map: Mapping,
    channels: u32,
    capacity: u32,
    corrupt: AtomicBool,
}

// SAFETY: all access to the mapping goes through atomics; the geometry is immutable.
unsafe impl Send for ShmRing {}
// SAFETY: as above; concurrent use from several threads cannot cause memory unsafety.
unsafe impl Sync for ShmRing {}

impl std::fmt::Debug for ShmRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmRing")
            .field("channels", &self.channels)
            .field("capacity_frames", &self.capacity)
            .field("write_pos", &self.write_pos())
            .field("read_pos", &self.read_pos())
            .field("corrupt", &self.corrupt.load(Ordering::Relaxed))
            .finish()
    }
}

/// Creates a memfd of `len` bytes sealed against growing and shrinking, and maps it
/// (server side of every shared block).
pub(crate) fn create_sealed_memfd(name: &str, len: usize) -> io::Result<(OwnedFd, Mapping)> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    // Sealing the size lets the client map it without fearing SIGBUS; SEAL stops the
    // client from adding seals that would hamper us.
    rustix::fs::fcntl_add_seals(&fd, SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL)?;
    let map = Mapping::new(fd.as_fd(), len)?;
    Ok((fd, map))
}

/// Checks that `fd` is a regular file (memfd) of at most `max_size` bytes, sealed
/// against growing and shrinking; returns its size.
pub(crate) fn check_sealed_memfd(fd: &OwnedFd, max_size: u64) -> Result<u64, ShmError> {
    let st = rustix::fs::fstat(fd).map_err(io::Error::from)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(ShmError::NotAFile);
    }
    let size = st.st_size as u64;
    if size == 0 || size > max_size {
        return Err(ShmError::BadSize(size));
    }
    let seals = match rustix::fs::fcntl_get_seals(fd) {
        Ok(s) => s,
        Err(Errno::INVAL) => return Err(ShmError::NotSealed),
        Err(e) => return Err(ShmError::Io(e.into())),
    };
    if !seals.contains(SealFlags::GROW | SealFlags::SHRINK) {
        return Err(ShmError::NotSealed);
    }
    Ok(size)
}

/// Total memfd size for a geometry, or `None` if it exceeds the limits.
fn ring_bytes(channels: u32, capacity: u32) -> Option<usize> {
    let data = (channels as usize)
        .checked_mul(capacity as usize)?
        .checked_mul(size_of::<f32>())?;
    if data > MAX_DATA_BYTES {
        return None;
    }
    Some(HEADER_BYTES + data)
}

impl ShmRing {
    /// Creates a ring (server side) and returns it with the memfd to send to the client.
    pub fn create(channels: u32, capacity_frames: u32) -> io::Result<(ShmRing, OwnedFd)> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        if !(1..=MAX_RING_CHANNELS).contains(&channels) {
            return Err(invalid(format!(
                "ring channels {channels} out of range 1..={MAX_RING_CHANNELS}"
            )));
        }
        if !capacity_frames.is_power_of_two() || capacity_frames > MAX_CAPACITY_FRAMES {
            return Err(invalid(format!(
                "ring capacity {capacity_frames} is not a power of two in 1..={MAX_CAPACITY_FRAMES}"
            )));
        }
        let len = ring_bytes(channels, capacity_frames).ok_or_else(|| {
            invalid(format!(
                "ring of {channels} channels x {capacity_frames} frames exceeds {MAX_DATA_BYTES} bytes"
            ))
        })?;
        let (fd, map) = create_sealed_memfd("quaver-ring", len)?;
        let ring = ShmRing {
            map,
            channels,
            capacity: capacity_frames,
            corrupt: AtomicBool::new(false),
        };
        let m = &ring.header().meta.0;
        m.channels.store(channels, Ordering::Relaxed);
        m.capacity_frames.store(capacity_frames, Ordering::Relaxed);
        m.data_offset.store(HEADER_BYTES as u32, Ordering::Relaxed);
        m.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        // Release: whoever sees the magic sees the geometry (same-process mappings).
        m.magic.store(MAGIC, Ordering::Release);
        Ok((ring, fd))
    }

    /// Maps a ring received from the server, validating it against the file itself.
    pub fn open(fd: OwnedFd, expected_channels: u32) -> Result<ShmRing, ShmError> {
        let size = check_sealed_memfd(&fd, (HEADER_BYTES + MAX_DATA_BYTES) as u64)?;
        if size < HEADER_BYTES as u64 {
            return Err(ShmError::BadSize(size));
        }
        let map = Mapping::new(fd.as_fd(), size as usize)?;
        // The fd is no longer needed: the mapping keeps the memory alive.
        drop(fd);
        // SAFETY: the mapping is at least HEADER_BYTES long and page aligned.
        let meta = unsafe { &(*map.ptr.as_ptr().cast::<Header>()).meta.0 };
        let magic = meta.magic.load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(ShmError::BadMagic(magic));
        }
        let version = meta.version.load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(ShmError::BadVersion(version));
        }
        let channels = meta.channels.load(Ordering::Relaxed);
        if channels != expected_channels || !(1..=MAX_RING_CHANNELS).contains(&channels) {
            return Err(ShmError::ChannelMismatch {
                expected: expected_channels,
                found: channels,
            });
        }
        let capacity = meta.capacity_frames.load(Ordering::Relaxed);
        if !capacity.is_power_of_two() || capacity > MAX_CAPACITY_FRAMES {
            return Err(ShmError::BadCapacity(capacity));
        }
        let data_offset = meta.data_offset.load(Ordering::Relaxed);
        if data_offset as usize != HEADER_BYTES {
            return Err(ShmError::BadDataOffset(data_offset));
        }
        let expected = HEADER_BYTES as u64 + channels as u64 * capacity as u64 * 4;
        if expected != size {
            return Err(ShmError::SizeMismatch {
                expected,
                actual: size,
            });
        }
        Ok(ShmRing {
            map,
            channels,
            capacity,
            corrupt: AtomicBool::new(false),
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page aligned and at least HEADER_BYTES long (checked
        // in create/open); Header holds only atomics, valid for any bit pattern.
        unsafe { &*self.map.ptr.as_ptr().cast::<Header>() }
    }

    fn data(&self) -> &[AtomicU32] {
        // SAFETY: create/open checked that the mapping holds HEADER_BYTES plus
        // capacity * channels samples; HEADER_BYTES keeps 4-byte alignment;
        // AtomicU32 is valid for any bit pattern.
        unsafe {
            std::slice::from_raw_parts(
                self.map.ptr.as_ptr().add(HEADER_BYTES).cast::<AtomicU32>(),
                self.capacity as usize * self.channels as usize,
            )
        }
    }

    /// Channels per frame.
    pub fn channels(&self) -> u32 {
        self.channels
    }

    /// Ring capacity in frames (a power of two).
    pub fn capacity_frames(&self) -> u32 {
        self.capacity
    }

    /// Fill level for positions read by the producer or consumer itself, or `None`
    /// (entering the sticky corrupt state) if the peer broke `0 <= w - r <= capacity`.
    ///
    /// Only valid when one of the two positions is the caller's own: then the
    /// invariant holds for any honest peer regardless of timing.
    #[inline]
    fn check(&self, w: u64, r: u64) -> Option<u64> {
        let used = w.wrapping_sub(r);
        if used > self.capacity as u64 || self.corrupt.load(Ordering::Relaxed) {
            self.corrupt.store(true, Ordering::Relaxed);
            return None;
        }
        Some(used)
    }

    /// Fill level for inspectors that may run on a third thread, where both
    /// positions can move between the two loads. A pair is trusted (and judged)
    /// only if `write_pos` did not change around the `read_pos` load; otherwise the
    /// estimate is clamped and nothing is judged, so a busy honest ring is never
    /// declared corrupt. `read`/`write` do their own exact checks.
    #[inline]
    fn snapshot_fill(&self) -> Option<u64> {
        if self.corrupt.load(Ordering::Relaxed) {
            return None;
        }
        let h = self.header();
        let mut w2 = 0;
        let mut r = 0;
        for _ in 0..4 {
            let w1 = h.write_pos.0.load(Ordering::Acquire);
            r = h.read_pos.0.load(Ordering::Acquire);
            w2 = h.write_pos.0.load(Ordering::Acquire);
            if w1 == w2 {
                return self.check(w1, r);
            }
        }
        let used = w2.wrapping_sub(r) as i64;
        Some(used.clamp(0, self.capacity as i64) as u64)
    }

    /// True once either position was seen out of range; the ring then moves no data
    /// and the stream should be torn down.
    pub fn is_corrupt(&self) -> bool {
        self.snapshot_fill().is_none()
    }

    /// Frames the consumer can read now (0 if corrupt).
    #[inline]
    pub fn readable(&self) -> usize {
        self.snapshot_fill().unwrap_or(0) as usize
    }

    /// Frames the producer can write now (0 if corrupt).
    #[inline]
    pub fn writable(&self) -> usize {
        match self.snapshot_fill() {
            Some(used) => (self.capacity as u64 - used) as usize,
            None => 0,
        }
    }

    /// Producer: copies whole frames from `interleaved` into the ring; returns the
    /// frames written (limited by free space; a trailing partial frame is ignored).
    /// Lock-free, allocation-free, never panics.
    #[inline]
    pub fn write(&self, interleaved: &[f32]) -> usize {
        let ch = self.channels as usize;
        let frames = interleaved.len() / ch;
        let h = self.header();
        // Acquire on read_pos: the consumer's copies out of the slots we are about
        // to overwrite happened before it published that position.
        let w = h.write_pos.0.load(Ordering::Relaxed);
        let r = h.read_pos.0.load(Ordering::Acquire);
        let Some(used) = self.check(w, r) else {
            return 0;
        };
        let n = frames.min((self.capacity as u64 - used) as usize);
        if n == 0 {
            return 0;
        }
        let cap = self.capacity as usize;
        let start = (w & (cap as u64 - 1)) as usize;
        let first = n.min(cap - start);
        let data = self.data();
        let src = &interleaved[..n * ch];
        let (src_a, src_b) = src.split_at(first * ch);
        for (d, s) in data[start * ch..(start + first) * ch].iter().zip(src_a) {
            d.store(s.to_bits(), Ordering::Relaxed);
        }
        for (d, s) in data[..src_b.len()].iter().zip(src_b) {
            d.store(s.to_bits(), Ordering::Relaxed);
        }
        // Release: the samples are visible before the new position.
        h.write_pos
            .0
            .store(w.wrapping_add(n as u64), Ordering::Release);
        n
    }

    /// Consumer: copies whole frames out of the ring into `out`; returns the frames
    /// read (0 if empty or corrupt). Lock-free, allocation-free, never panics.
    #[inline]
    pub fn read(&self, out: &mut [f32]) -> usize {
        let ch = self.channels as usize;
        let frames = out.len() / ch;
        let h = self.header();
        let r = h.read_pos.0.load(Ordering::Relaxed);
        // Acquire on write_pos: the producer's samples are visible.
        let w = h.write_pos.0.load(Ordering::Acquire);
        let Some(used) = self.check(w, r) else {
            return 0;
        };
        let n = frames.min(used as usize);
        if n == 0 {
            return 0;
        }
        let cap = self.capacity as usize;
        let start = (r & (cap as u64 - 1)) as usize;
        let first = n.min(cap - start);
        let data = self.data();
        let (dst_a, dst_b) = out[..n * ch].split_at_mut(first * ch);
        for (d, s) in dst_a
            .iter_mut()
            .zip(&data[start * ch..(start + first) * ch])
        {
            *d = finite(f32::from_bits(s.load(Ordering::Relaxed)));
        }
        let tail = dst_b.len();
        for (d, s) in dst_b.iter_mut().zip(&data[..tail]) {
            *d = finite(f32::from_bits(s.load(Ordering::Relaxed)));
        }
        // Release: our loads of the slots complete before the producer may reuse them.
        h.read_pos
            .0
            .store(r.wrapping_add(n as u64), Ordering::Release);
        n
    }

    /// Consumer: drops up to `frames` queued frames without copying; returns how many.
    pub fn discard(&self, frames: usize) -> usize {
        let h = self.header();
        let r = h.read_pos.0.load(Ordering::Relaxed);
        let w = h.write_pos.0.load(Ordering::Acquire);
        let Some(used) = self.check(w, r) else {
            return 0;
        };
        let n = frames.min(used as usize);
        h.read_pos
            .0
            .store(r.wrapping_add(n as u64), Ordering::Release);
        n
    }

    /// Total frames ever written (producer position).
    pub fn write_pos(&self) -> u64 {
        self.header().write_pos.0.load(Ordering::Acquire)
    }

    /// Total frames ever read (consumer position).
    pub fn read_pos(&self) -> u64 {
        self.header().read_pos.0.load(Ordering::Acquire)
    }

    /// Playback: stream frames that have reached the device output (server-written).
    pub fn played_pos(&self) -> u64 {
        self.header().played_pos.0.load(Ordering::Acquire)
    }

    /// Server: publishes how many stream frames have been played.
    pub fn set_played_pos(&self, frames: u64) {
        self.header().played_pos.0.store(frames, Ordering::Release);
    }

    /// The `FLAG_*` bits.
    pub fn flags(&self) -> u32 {
        self.header().flags.0.load(Ordering::Acquire)
    }

    /// Sets `bits` in the flags word (atomic OR; other bits are untouched).
    pub fn set_flags(&self, bits: u32) {
        self.header().flags.0.fetch_or(bits, Ordering::AcqRel);
    }

    /// Clears `bits` in the flags word (atomic AND-NOT).
    pub fn clear_flags(&self, bits: u32) {
        self.header().flags.0.fetch_and(!bits, Ordering::AcqRel);
    }

    /// Underruns/overruns the server counted for this stream.
    pub fn xruns(&self) -> u32 {
        self.header().xruns.0.load(Ordering::Relaxed)
    }

    /// Server: counts one more xrun (wrapping).
    pub fn add_xrun(&self) {
        self.header().xruns.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Server: current device plus pipeline delay in stream frames.
    pub fn delay_frames(&self) -> u32 {
        self.header().delay_frames.0.load(Ordering::Relaxed)
    }

    /// Server: publishes the current delay in stream frames.
    pub fn set_delay_frames(&self, frames: u32) {
        self.header()
            .delay_frames
            .0
            .store(frames, Ordering::Relaxed);
    }
}

/// A wakeup signal from server to client over an eventfd.
///
/// Only the server rings and only the client waits: a side that rang and then
/// waited on the same eventfd could swallow its own signal.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    /// A new nonblocking, close-on-exec eventfd.
    pub fn new() -> io::Result<Doorbell> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Doorbell { fd })
    }

    /// Wraps a received eventfd, forcing it nonblocking so that `ring` and the
    /// drain in `wait` can never block even if the sender forgot the flag.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Doorbell> {
        let fl = rustix::fs::fcntl_getfl(&fd)?;
        if !fl.contains(OFlags::NONBLOCK) {
            rustix::fs::fcntl_setfl(&fd, fl | OFlags::NONBLOCK)?;
        }
        Ok(Doorbell { fd })
    }

    /// Signals the waiter. One `write` syscall, no allocation; errors are ignored
    /// because a full counter (EAGAIN) already means "wake up" and the real-time
    /// caller could not act on anything else.
    #[inline]
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Waits until rung or `timeout` passes (`None` = forever); returns whether it
    /// was rung. Resets the bell, so callers re-check their condition afterwards.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.try_drain()? {
                return Ok(true);
            }
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(false);
                    }
                    Some(d - now)
                }
                None => None,
            };
            if poll_fd(self.fd.as_fd(), PollFlags::IN, left)? && self.try_drain()? {
                return Ok(true);
            }
        }
    }

    /// Resets the counter without blocking; true if it had been rung.
    fn try_drain(&self) -> io::Result<bool> {
        let mut buf = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut buf) {
                Ok(_) => return Ok(true),
                Err(Errno::AGAIN) => return Ok(false),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsFd for Doorbell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// NaN and infinities read from a ring become silence: whichever side wrote them, they
/// would poison every mix, resampler and filter after them. *RT*.
#[inline]
fn finite(v: f32) -> f32 {
    if v.is_finite() { v } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn dup(fd: &OwnedFd) -> OwnedFd {
        fd.try_clone().unwrap()
    }

    #[test]
    fn create_and_open_agree() {
        let (srv, fd) = ShmRing::create(2, 1024).unwrap();
        let cli = ShmRing::open(fd, 2).unwrap();
        assert_eq!(cli.channels(), 2);
        assert_eq!(cli.capacity_frames(), 1024);
        assert_eq!(cli.writable(), 1024);
        assert_eq!(cli.write(&[1.0, 2.0, 3.0, 4.0, 5.0]), 2);
        let mut out = [0.0; 8];
        assert_eq!(srv.readable(), 2);
        assert_eq!(srv.read(&mut out), 2);
        assert_eq!(&out[..4], &[1.0, 2.0, 3.0, 4.0]);
        srv.set_played_pos(2);
        srv.set_flags(FLAG_SERVER_STARTED);
        srv.add_xrun();
        srv.set_delay_frames(480);
        cli.set_flags(FLAG_CLIENT_DRAIN);
        assert_eq!(cli.played_pos(), 2);
        assert_eq!(cli.flags(), FLAG_SERVER_STARTED | FLAG_CLIENT_DRAIN);
        cli.clear_flags(FLAG_CLIENT_DRAIN);
        assert_eq!(srv.flags(), FLAG_SERVER_STARTED);
        assert_eq!(cli.xruns(), 1);
        assert_eq!(cli.delay_frames(), 480);
    }

    #[test]
    fn create_rejects_bad_geometry() {
        assert!(ShmRing::create(0, 1024).is_err());
        assert!(ShmRing::create(65, 1024).is_err());
        assert!(ShmRing::create(2, 1000).is_err());
        assert!(ShmRing::create(2, 0).is_err());
        assert!(ShmRing::create(2, MAX_CAPACITY_FRAMES * 2).is_err());
        assert!(ShmRing::create(64, MAX_CAPACITY_FRAMES).is_err());
    }

    #[test]
    fn wraparound_preserves_order() {
        let (ring, _fd) = ShmRing::create(3, 8).unwrap();
        let mut next_w = 0u32;
        let mut next_r = 0u32;
        let mut out = [0.0f32; 3 * 5];
        for round in 0..200 {
            let want = 1 + round % 7;
            let frames: Vec<f32> = (0..want)
                .flat_map(|i| {
                    let v = (next_w + i) as f32;
                    [v, -v, v + 0.5]
                })
                .collect();
            let n = ring.write(&frames) as u32;
            next_w += n;
            let got = ring.read(&mut out[..3 * (1 + round as usize % 5)]);
            for f in out.chunks(3).take(got) {
                let v = next_r as f32;
                assert_eq!(f, &[v, -v, v + 0.5]);
                next_r += 1;
            }
        }
        assert_eq!(ring.write_pos(), next_w as u64);
        assert_eq!(ring.read_pos(), next_r as u64);
    }

    #[test]
    fn positions_wrapping_u64_still_work() {
        let (ring, _fd) = ShmRing::create(1, 4).unwrap();
        let start = u64::MAX - 5;
        ring.header().write_pos.0.store(start, Ordering::Relaxed);
        ring.header().read_pos.0.store(start, Ordering::Relaxed);
        let mut out = [0.0f32; 3];
        for i in 0..10 {
            let v = [i as f32, i as f32 + 0.25, i as f32 + 0.5];
            assert_eq!(ring.write(&v), 3);
            assert_eq!(ring.read(&mut out), 3);
            assert_eq!(out, v);
        }
        assert!(!ring.is_corrupt());
    }

    #[test]
    fn full_and_empty() {
        let (ring, _fd) = ShmRing::create(2, 4).unwrap();
        assert_eq!(ring.write(&[1.0; 20]), 4);
        assert_eq!(ring.write(&[1.0; 2]), 0);
        assert_eq!(ring.writable(), 0);
        assert_eq!(ring.discard(3), 3);
        assert_eq!(ring.readable(), 1);
        let mut out = [0.0; 8];
        assert_eq!(ring.read(&mut out), 1);
        assert_eq!(ring.read(&mut out), 0);
        assert_eq!(ring.read(&mut []), 0);
        assert_eq!(ring.write(&[]), 0);
    }

    #[test]
    fn corrupt_positions_are_detected_not_followed() {
        let (srv, fd) = ShmRing::create(2, 16).unwrap();
        let cli = ShmRing::open(dup(&fd), 2).unwrap();
        assert_eq!(cli.write(&[0.5; 8]), 4);
        // A hostile client claims to have written far more than fits.
        cli.header().write_pos.0.store(1 << 40, Ordering::Release);
        let mut out = [0.0; 64];
        assert_eq!(srv.read(&mut out), 0);
        assert!(srv.is_corrupt());
        assert_eq!(srv.readable(), 0);
        // Sticky even if the peer repairs the value: the stream must be torn down.
        cli.header().write_pos.0.store(4, Ordering::Release);
        assert_eq!(srv.read(&mut out), 0);
        assert!(srv.is_corrupt());

        // A reader ahead of the writer is corrupt too (w - r wraps to huge).
        let (srv, fd) = ShmRing::create(1, 16).unwrap();
        let cli = ShmRing::open(fd, 1).unwrap();
        srv.header().read_pos.0.store(10, Ordering::Release);
        assert_eq!(cli.write(&[1.0; 4]), 0);
        assert_eq!(cli.writable(), 0);
        assert!(cli.is_corrupt());
    }

    #[test]
    fn open_validates_header_against_file() {
        let (srv, fd) = ShmRing::create(2, 64).unwrap();
        assert!(matches!(
            ShmRing::open(dup(&fd), 4),
            Err(ShmError::ChannelMismatch {
                expected: 4,
                found: 2
            })
        ));
        let meta = &srv.header().meta.0;
        // Lying about capacity would make us index past the file.
        meta.capacity_frames.store(1 << 16, Ordering::Relaxed);
        assert!(matches!(
            ShmRing::open(dup(&fd), 2),
            Err(ShmError::SizeMismatch { .. })
        ));
        meta.capacity_frames.store(63, Ordering::Relaxed);
        assert!(matches!(
            ShmRing::open(dup(&fd), 2),
            Err(ShmError::BadCapacity(63))
        ));
        meta.capacity_frames.store(64, Ordering::Relaxed);
        meta.data_offset.store(64, Ordering::Relaxed);
        assert!(matches!(
            ShmRing::open(dup(&fd), 2),
            Err(ShmError::BadDataOffset(64))
        ));
        meta.data_offset
            .store(HEADER_BYTES as u32, Ordering::Relaxed);
        meta.version.store(99, Ordering::Relaxed);
        assert!(matches!(
            ShmRing::open(dup(&fd), 2),
            Err(ShmError::BadVersion(99))
        ));
        meta.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        meta.magic.store(0xdead_beef, Ordering::Relaxed);
        assert!(matches!(
            ShmRing::open(dup(&fd), 2),
            Err(ShmError::BadMagic(0xdead_beef))
        ));
        meta.magic.store(MAGIC, Ordering::Relaxed);
        assert!(ShmRing::open(fd, 2).is_ok());
    }

    #[test]
    fn open_rejects_unsealed_and_odd_fds() {
        // An unsealed memfd with a perfect header: the peer could still shrink it.
        let fd =
            rustix::fs::memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, (HEADER_BYTES + 4 * 16) as u64).unwrap();
        assert!(matches!(ShmRing::open(fd, 1), Err(ShmError::NotSealed)));
        let fd = rustix::fs::memfd_create("x", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, (HEADER_BYTES + 4 * 16) as u64).unwrap();
        assert!(matches!(ShmRing::open(fd, 1), Err(ShmError::NotSealed)));
        let fd = rustix::fs::memfd_create("x", MemfdFlags::CLOEXEC).unwrap();
        assert!(matches!(ShmRing::open(fd, 1), Err(ShmError::BadSize(0))));
        let bell = Doorbell::new().unwrap();
        assert!(matches!(ShmRing::open(bell.fd, 1), Err(ShmError::NotAFile)));
    }

    /// Streams `total` frames from producer to consumer, checking every sample.
    fn stream(producer: Arc<ShmRing>, consumer: Arc<ShmRing>, total: u64) {
        let ch = producer.channels() as usize;
        let t = std::thread::spawn(move || {
            let mut buf = vec![0.0f32; 333 * ch];
            let mut sent = 0u64;
            while sent < total {
                let want = (333u64).min(total - sent) as usize;
                for (i, f) in buf.chunks_mut(ch).take(want).enumerate() {
                    for (c, s) in f.iter_mut().enumerate() {
                        *s = ((sent + i as u64) * 8 + c as u64) as f32;
                    }
                }
                let n = producer.write(&buf[..want * ch]);
                sent += n as u64;
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let mut out = vec![0.0f32; 500 * ch];
        let mut got = 0u64;
        while got < total {
            let n = consumer.read(&mut out);
            for (i, f) in out.chunks(ch).take(n).enumerate() {
                for (c, s) in f.iter().enumerate() {
                    // Exact: the values stay below 2^24.
                    assert_eq!(*s, ((got + i as u64) * 8 + c as u64) as f32);
                }
            }
            got += n as u64;
            if n == 0 {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
        assert!(!consumer.is_corrupt());
        assert_eq!(consumer.read_pos(), total);
    }

    #[test]
    fn cross_thread_one_mapping_1m_frames() {
        let (ring, _fd) = ShmRing::create(2, 1024).unwrap();
        let ring = Arc::new(ring);
        stream(ring.clone(), ring, 1_000_000);
    }

    #[test]
    fn cross_mapping_1m_frames() {
        let (srv, fd) = ShmRing::create(2, 512).unwrap();
        let cli = ShmRing::open(fd, 2).unwrap();
        stream(Arc::new(cli), Arc::new(srv), 1_000_000);
    }

    #[test]
    fn doorbell_rings_and_times_out() {
        let bell = Doorbell::new().unwrap();
        assert!(!bell.wait(Some(Duration::from_millis(10))).unwrap());
        bell.ring();
        bell.ring();
        assert!(bell.wait(Some(Duration::ZERO)).unwrap());
        // Both rings were consumed by one wait.
        assert!(!bell.wait(Some(Duration::from_millis(5))).unwrap());

        let other = Doorbell::from_fd(bell.as_fd().try_clone_to_owned().unwrap()).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.ring();
        });
        let start = Instant::now();
        assert!(bell.wait(Some(Duration::from_secs(5))).unwrap());
        assert!(start.elapsed() < Duration::from_secs(4));
        t.join().unwrap();
    }

    #[test]
    fn doorbell_from_blocking_fd_becomes_nonblocking() {
        let fd = eventfd(0, EventfdFlags::CLOEXEC).unwrap();
        let bell = Doorbell::from_fd(fd).unwrap();
        assert!(!bell.wait(Some(Duration::from_millis(1))).unwrap());
    }
}
