//! The shared ring-buffer channel (srbchannel): once a shm-capable client has
//! acknowledged it, packets in both directions travel through two byte rings in one
//! shared memfd block instead of the socket, with pa_fdsem-style wakeups (a flag in
//! shared memory says whether the other side sleeps, so a wakeup costs a syscall only
//! then).
//!
//! The layout is PulseAudio's (`srbchannel.c`, `fdsem.c`): a header of atomics
//! (fill counts of both rings, the two semaphores' waiting / signalled / in-pipe
//! counters, capacity and the two ring offsets), then the ring the client writes
//! ("read" from our side) and the ring we write. Only the fill counts are shared; each
//! side keeps its own index. Everything the client can touch is validated on every
//! access: our capacity and offsets are our own copies, and a fill count out of range
//! is an error that ends that client's connection.
//!
//! Wakeups use pipes, not eventfds: an eventfd's blocking flag and counter belong to
//! the file description the client shares, so a client could make our read or write
//! block (flip O_NONBLOCK, saturate the counter) and stall the I/O thread for everyone.
//! With a pipe the client holds the other end only; our end stays non-blocking. The
//! client's fdsem reads and writes 8-byte counters, which a pipe carries unchanged.

use crate::io::shm::SealedMemfd;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};

/// Size of the shared block (PulseAudio's pool slot size).
pub const BLOCK_SIZE: usize = 64 * 1024;
/// The block id the shared block is referenced by.
pub const BLOCK_ID: u32 = 1;
/// The header, rounded to pointer alignment as PulseAudio's `PA_ALIGN` does.
const HEADER: usize = 48;
const READ_COUNT: usize = 0;
const WRITE_COUNT: usize = 4;
/// Semaphore the client posts (we wait on it).
const READ_SEM: usize = 8;
/// Semaphore we post (the client waits on it).
const WRITE_SEM: usize = 20;
const SEM_WAITING: usize = 0;
const SEM_SIGNALLED: usize = 4;
const SEM_IN_PIPE: usize = 8;
const CAPACITY: usize = 32;
const READBUF_OFFSET: usize = 36;
const WRITEBUF_OFFSET: usize = 40;
/// Most bytes taken from the client's ring per call, so one client cannot keep the
/// I/O thread to itself by refilling its ring.
const MAX_READ_PER_CALL: usize = 256 * 1024;

/// One connection's srbchannel (server side).
pub struct Srb {
    /// The block and our ring, shared with the RT thread's requests.
    out: Arc<SrbOut>,
    /// The block's descriptor, until it is sent with REGISTER_MEMFD_SHMID.
    memfd: Option<OwnedFd>,
    readbuf: usize,
    rd: usize,
    /// Our (non-blocking) read end of the client's wakeup pipe.
    wake_in: OwnedFd,
    /// The ends handed to the client: (its write end, its read end).
    client_fds: Option<(OwnedFd, OwnedFd)>,
    waiting: bool,
    /// The pool id the block is registered under.
    pub shm_id: u32,
    /// The tag of ENABLE_SRBCHANNEL the client must echo.
    pub tag: u32,
    /// Set once the client acknowledged: output goes through the ring from then on.
    pub active: bool,
    /// Bytes received through the ring.
    pub bytes_in: u64,
}

/// The shared block and the ring we write. Two threads write it, one at a time: the
/// connection thread, and the RT thread for a stream's REQUEST (through the ring a
/// request costs a copy and, when the client sleeps, a pipe write instead of a socket
/// `send`, which allocates a buffer). The connection's `RtWire` decides who may write.
pub struct SrbOut {
    /// The shared block (its descriptor taken out into `Srb::memfd`).
    mem: SealedMemfd,
    capacity: usize,
    writebuf: usize,
    /// Our write index; only the writer holding the connection's `RtWire` touches it.
    wr: AtomicUsize,
    /// Our (non-blocking) write end of the client's wakeup pipe.
    wake_out: OwnedFd,
    /// Bytes sent through the ring.
    bytes_out: AtomicU64,
}

impl std::fmt::Debug for SrbOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrbOut")
            .field("capacity", &self.capacity)
            .field("bytes_out", &self.bytes_out.load(Relaxed))
            .finish_non_exhaustive()
    }
}

// SAFETY: the header words are only accessed atomically; the ring and `wr` are written
// by one thread at a time (the holder of the connection's `RtWire`, or the connection
// thread alone when there is no wire); the mapping lives as long as the value.
unsafe impl Sync for SrbOut {}

fn nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    let fl = fcntl_getfl(fd)?;
    fcntl_setfl(fd, fl | OFlags::NONBLOCK)?;
    Ok(())
}

impl Srb {
    /// A new channel: a sealed memfd block with an initialised header and two pipes.
    pub fn new(shm_id: u32, tag: u32) -> std::io::Result<Srb> {
        let mut mem = SealedMemfd::new("quaver-pulse-srb", BLOCK_SIZE)?;
        let memfd = mem.take_fd();
        let readbuf = HEADER;
        let capacity = (BLOCK_SIZE - HEADER) / 2;
        let writebuf = (readbuf + capacity).next_multiple_of(8);
        let (a_r, a_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (b_r, b_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        nonblocking(&a_r)?;
        nonblocking(&b_w)?;
        let out = SrbOut {
            mem,
            capacity,
            writebuf,
            wr: AtomicUsize::new(0),
            wake_out: b_w,
            bytes_out: AtomicU64::new(0),
        };
        out.at(CAPACITY).store(capacity as i32, SeqCst);
        out.at(READBUF_OFFSET).store(readbuf as i32, SeqCst);
        out.at(WRITEBUF_OFFSET).store(writebuf as i32, SeqCst);
        Ok(Srb {
            out: Arc::new(out),
            memfd,
            readbuf,
            rd: 0,
            wake_in: a_r,
            client_fds: Some((a_w, b_r)),
            waiting: false,
            shm_id,
            tag,
            active: false,
            bytes_in: 0,
        })
    }

    fn at(&self, off: usize) -> &AtomicI32 {
        self.out.at(off)
    }

    /// Our ring, for the RT thread's requests once the channel is active.
    pub fn out(&self) -> Arc<SrbOut> {
        self.out.clone()
    }

    /// Bytes the client has in its ring; `None` when it corrupted the count.
    pub fn in_fill(&self) -> Option<usize> {
        self.out.in_fill()
    }

    /// Our index into the client's ring (handed to the RT thread with its intake).
    pub(crate) fn read_index(&self) -> usize {
        self.rd
    }

    /// Takes the index back from the RT thread's intake, with the bytes it read.
    pub(crate) fn set_read_index(&mut self, rd: usize, bytes: u64) {
        self.rd = rd % self.out.capacity;
        self.bytes_in += bytes;
    }

    /// Bytes sent through the ring.
    pub fn bytes_out(&self) -> u64 {
        self.out.bytes_out.load(Relaxed)
    }

    /// Tests: the client's read of our ring from its index `at` (everything there).
    #[cfg(test)]
    pub(crate) fn client_read(&self, at: &mut usize) -> Vec<u8> {
        let o = &self.out;
        let n = o.fill(WRITE_COUNT).expect("count in range");
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            // SAFETY: inside our ring in the mapping.
            v.push(unsafe { *o.mem.ptr().add(o.writebuf + *at) });
            *at = (*at + 1) % o.capacity;
        }
        o.at(WRITE_COUNT).fetch_sub(n as i32, SeqCst);
        v
    }

    /// Tests: the client's write into its ring at its index `at`.
    #[doc(hidden)]
    pub fn client_write(&self, at: &mut usize, data: &[u8]) {
        let o = &self.out;
        assert!(data.len() <= o.capacity - o.fill(READ_COUNT).expect("count in range"));
        for &b in data {
            // SAFETY: inside the client's ring in the mapping.
            unsafe { *o.mem.ptr().add(self.readbuf + *at) = b };
            *at = (*at + 1) % o.capacity;
        }
        o.at(READ_COUNT).fetch_add(data.len() as i32, SeqCst);
    }

    /// Tests: bytes our ring has room for.
    #[cfg(test)]
    pub(crate) fn room(&self) -> usize {
        self.out.capacity - self.out.fill(WRITE_COUNT).expect("count in range")
    }

    /// The memfd to register with the client (taken once).
    pub fn take_memfd(&mut self) -> Option<OwnedFd> {
        self.memfd.take()
    }

    /// The two descriptors ENABLE_SRBCHANNEL carries: the client's write end of our
    /// wakeup pipe (its "readfd") and its read end of its wakeup pipe ("writefd").
    pub fn take_client_fds(&mut self) -> Option<(OwnedFd, OwnedFd)> {
        self.client_fds.take()
    }

    /// The descriptor that becomes readable when the client posts a wakeup.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_in.as_fd()
    }

    /// Before sleeping: announces that we wait. True when the client already posted,
    /// so the caller must not sleep.
    pub fn before_poll(&mut self) -> bool {
        let take = |s: &Srb| {
            s.at(READ_SEM + SEM_SIGNALLED)
                .compare_exchange(1, 0, SeqCst, SeqCst)
                .is_ok()
        };
        if take(self) {
            return true;
        }
        if self.waiting {
            // Still announced from an interrupted wait.
            return false;
        }
        self.at(READ_SEM + SEM_WAITING).fetch_add(1, SeqCst);
        if take(self) {
            self.at(READ_SEM + SEM_WAITING).fetch_sub(1, SeqCst);
            return true;
        }
        self.waiting = true;
        false
    }

    /// After waking: no longer waiting; consumes a pending post (the caller reads the
    /// ring next, so a post that comes after this is seen by the next `before_poll`).
    pub fn after_poll(&mut self) {
        if self.waiting {
            self.at(READ_SEM + SEM_WAITING).fetch_sub(1, SeqCst);
            self.waiting = false;
        }
        let _ = self
            .at(READ_SEM + SEM_SIGNALLED)
            .compare_exchange(1, 0, SeqCst, SeqCst);
    }

    /// Empties our wakeup pipe (never blocks: our end is non-blocking and ours alone).
    pub fn drain_wake(&self) {
        let mut buf = [0u8; 256];
        let mut total = 0usize;
        for _ in 0..16 {
            match rustix::io::read(&self.wake_in, &mut buf) {
                // A short read emptied the pipe: no second read just to hear EAGAIN
                // (one syscall less per wakeup; a post after this is seen next pass).
                Ok(n) if n > 0 && n < buf.len() => {
                    total += n;
                    break;
                }
                Ok(n) if n > 0 => total += n,
                _ => break,
            }
        }
        // Keep the client's view of outstanding wakeups roughly honest (it never reads
        // this counter; PulseAudio's reader subtracts what it read).
        if total >= 8 {
            self.at(READ_SEM + SEM_IN_PIPE)
                .fetch_sub((total / 8) as i32, SeqCst);
        }
    }

    fn count(&self, off: usize) -> Result<usize, String> {
        self.out.count(off)
    }

    /// Appends what the client wrote into its ring to `out`; `Err` for a corrupt ring.
    pub fn read(&mut self, out: &mut Vec<u8>) -> Result<usize, String> {
        let capacity = self.out.capacity;
        let mut got = 0;
        while got < MAX_READ_PER_CALL {
            let c = self.count(READ_COUNT)?;
            let n = c.min(capacity - self.rd);
            if n == 0 {
                break;
            }
            let start = out.len();
            out.resize(start + n, 0);
            // SAFETY: rd < capacity and rd + n <= capacity, all inside the mapping.
            // The client may scribble concurrently; we copy before looking at it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.out.mem.ptr().add(self.readbuf + self.rd),
                    out[start..].as_mut_ptr(),
                    n,
                );
            }
            let prev = self.at(READ_COUNT).fetch_sub(n as i32, SeqCst);
            if prev < n as i32 || prev as usize > capacity {
                return Err(format!("srbchannel ring count {prev} changed under us"));
            }
            self.rd = (self.rd + n) % capacity;
            got += n;
            if prev as usize >= capacity {
                // It was full: the client may be waiting for room.
                self.out.post();
            }
        }
        self.bytes_in += got as u64;
        Ok(got)
    }

    /// Writes as much of `data` as the ring takes and wakes the client; `Err` for a
    /// corrupt ring. The caller holds the connection's `RtWire`, if it has one.
    pub fn write(&mut self, data: &[u8]) -> Result<usize, String> {
        self.out.write(data)
    }
}

impl SrbOut {
    fn at(&self, off: usize) -> &AtomicI32 {
        debug_assert!(off + 4 <= HEADER && off.is_multiple_of(4));
        // SAFETY: inside the mapping, 4-aligned (the mapping is page-aligned); the
        // other process only ever accesses these words atomically too.
        unsafe { AtomicI32::from_ptr(self.mem.ptr().add(off).cast()) }
    }

    /// Wakes the client if it sleeps (pa_fdsem_post).
    fn post(&self) {
        if self
            .at(WRITE_SEM + SEM_SIGNALLED)
            .compare_exchange(0, 1, SeqCst, SeqCst)
            .is_ok()
            && self.at(WRITE_SEM + SEM_WAITING).load(SeqCst) != 0
        {
            let in_pipe = self.at(WRITE_SEM + SEM_IN_PIPE);
            in_pipe.fetch_add(1, SeqCst);
            if rustix::io::write(&self.wake_out, &1u64.to_ne_bytes()) != Ok(8) {
                // A full pipe: the client stopped reading its wakeups; it will find the
                // data when it looks at the ring.
                in_pipe.fetch_sub(1, SeqCst);
            }
        }
    }

    /// A ring's fill count, `None` when the client corrupted it (no allocation: the RT
    /// thread asks too).
    fn fill(&self, off: usize) -> Option<usize> {
        let c = self.at(off).load(SeqCst);
        usize::try_from(c).ok().filter(|&c| c <= self.capacity)
    }

    fn count(&self, off: usize) -> Result<usize, String> {
        self.fill(off).ok_or_else(|| {
            format!(
                "srbchannel ring count {} out of range",
                self.at(off).load(SeqCst)
            )
        })
    }

    /// Copies `data` in at our write index, publishes it and wakes the client.
    fn put(&self, data: &[u8]) {
        let mut wr = self.wr.load(Relaxed);
        let mut done = 0;
        while done < data.len() {
            let n = (self.capacity - wr).min(data.len() - done);
            // SAFETY: wr + n <= capacity, inside the mapping; the caller checked the
            // client has read these bytes (they are not counted as filled).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data[done..].as_ptr(),
                    self.mem.ptr().add(self.writebuf + wr),
                    n,
                );
            }
            self.at(WRITE_COUNT).fetch_add(n as i32, SeqCst);
            wr = (wr + n) % self.capacity;
            done += n;
        }
        self.wr.store(wr, Relaxed);
        self.bytes_out.fetch_add(data.len() as u64, Relaxed);
        self.post();
    }

    /// Writes as much of `data` as the ring takes and wakes the client; `Err` for a
    /// corrupt ring.
    fn write(&self, data: &[u8]) -> Result<usize, String> {
        let room = self.capacity - self.count(WRITE_COUNT)?;
        let n = room.min(data.len());
        if n > 0 {
            self.put(&data[..n]);
        }
        Ok(n)
    }

    /// Bytes the client has in its ring; `None` when it corrupted the count. *RT*.
    pub fn in_fill(&self) -> Option<usize> {
        self.fill(READ_COUNT)
    }

    /// Copies `dst.len()` bytes of the client's ring from index `rd` (wrapping at the
    /// ring's end); the caller checked that many are filled. *RT*.
    pub(crate) fn peek_in(&self, rd: usize, dst: &mut [u8]) {
        let mut at = rd % self.capacity;
        let mut done = 0;
        while done < dst.len() {
            let n = (self.capacity - at).min(dst.len() - done);
            // SAFETY: at + n <= capacity, inside the client's ring in the mapping. The
            // client may scribble concurrently; bytes are copied before being looked at.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.mem.ptr().add(HEADER + at),
                    dst[done..].as_mut_ptr(),
                    n,
                );
            }
            at = (at + n) % self.capacity;
            done += n;
        }
    }

    /// The first `n` bytes of the client's ring are read: gives them back to the client
    /// (waking it if the ring was full and it may wait for room). False when the count
    /// changed under us, which only a corrupting client does. *RT*.
    pub(crate) fn consume_in(&self, n: usize) -> bool {
        let prev = self.at(READ_COUNT).fetch_sub(n as i32, SeqCst);
        if prev < n as i32 || prev as usize > self.capacity {
            return false;
        }
        if prev as usize >= self.capacity {
            self.post();
        }
        true
    }

    /// The ring's size in bytes (both rings have it).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// RT side, holding the connection's `RtWire`: writes all of `packet` or nothing
    /// (a whole packet or none keeps the stream framed). No allocation, no lock; one
    /// pipe write when the client sleeps.
    pub fn write_whole(&self, packet: &[u8]) -> bool {
        match self.fill(WRITE_COUNT) {
            Some(c) if self.capacity - c >= packet.len() => {
                self.put(packet);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's half, as libpulse sees the block (rings swapped).
    fn client_write(s: &Srb, data: &[u8]) {
        let cap = s.at(CAPACITY).load(SeqCst) as usize;
        let off = s.at(READBUF_OFFSET).load(SeqCst) as usize;
        assert!(data.len() <= cap);
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), s.out.mem.ptr().add(off), data.len());
        }
        s.at(READ_COUNT).fetch_add(data.len() as i32, SeqCst);
    }

    #[test]
    fn bytes_cross_both_rings_and_corrupt_counts_are_refused() {
        let mut s = Srb::new(7, 9).unwrap();
        assert_eq!(s.at(WRITEBUF_OFFSET).load(SeqCst) as usize % 8, 0);
        assert!(s.out.writebuf + s.out.capacity <= BLOCK_SIZE);
        client_write(&s, b"hello");
        let mut v = Vec::new();
        assert_eq!(s.read(&mut v).unwrap(), 5);
        assert_eq!(v, b"hello");
        assert_eq!(s.at(READ_COUNT).load(SeqCst), 0);
        // Our ring fills up to capacity and no further.
        let big = vec![1u8; s.out.capacity + 10];
        assert_eq!(s.write(&big).unwrap(), s.out.capacity);
        assert_eq!(s.write(b"x").unwrap(), 0);
        s.at(READ_COUNT).store(-3, SeqCst);
        assert!(s.read(&mut v).is_err());
        s.at(READ_COUNT).store(i32::MAX, SeqCst);
        assert!(s.read(&mut v).is_err());
    }

    #[test]
    fn a_post_writes_the_pipe_only_when_the_client_waits() {
        let mut s = Srb::new(1, 2).unwrap();
        let (_a_w, b_r) = s.take_client_fds().unwrap();
        nonblocking(&b_r).unwrap();
        let mut buf = [0u8; 64];
        s.write(b"a").unwrap();
        assert!(rustix::io::read(&b_r, &mut buf).is_err(), "nobody waited");
        s.at(WRITE_SEM + SEM_SIGNALLED).store(0, SeqCst);
        s.at(WRITE_SEM + SEM_WAITING).store(1, SeqCst);
        s.write(b"b").unwrap();
        assert_eq!(rustix::io::read(&b_r, &mut buf).unwrap(), 8);
        assert_eq!(s.at(WRITE_SEM + SEM_IN_PIPE).load(SeqCst), 1);
        // Our side: a pending post means "don't sleep".
        s.at(READ_SEM + SEM_SIGNALLED).store(1, SeqCst);
        assert!(s.before_poll());
        assert!(!s.before_poll());
        assert_eq!(s.at(READ_SEM + SEM_WAITING).load(SeqCst), 1);
        s.after_poll();
        assert_eq!(s.at(READ_SEM + SEM_WAITING).load(SeqCst), 0);
    }

    #[test]
    fn draining_empties_the_wakeup_pipe_of_any_number_of_posts() {
        let mut s = Srb::new(1, 2).unwrap();
        let (a_w, _b_r) = s.take_client_fds().unwrap();
        // More posts than one read's buffer holds, then a few: both drain completely.
        for posts in [40, 3] {
            s.at(READ_SEM + SEM_IN_PIPE).store(posts, SeqCst);
            for _ in 0..posts {
                assert_eq!(rustix::io::write(&a_w, &1u64.to_ne_bytes()), Ok(8));
            }
            s.drain_wake();
            let mut buf = [0u8; 8];
            assert!(
                rustix::io::read(&s.wake_in, &mut buf).is_err(),
                "pipe left non-empty"
            );
            assert_eq!(s.at(READ_SEM + SEM_IN_PIPE).load(SeqCst), 0);
        }
    }
}
