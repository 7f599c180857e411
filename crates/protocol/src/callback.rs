//! Shared memory and wakeups of callback clients (JACK-style process callbacks).
//!
//! A callback client owns one graph node. Every cycle the server copies the node's
//! inputs into the client's port buffers in a sealed memfd both sides map, publishes a
//! cycle header and signals the client's *wake* eventfd; the client's real-time thread
//! reads its inputs, runs its process callback, writes its outputs, publishes the
//! cycle it completed and signals the *done* eventfd, on which the server waits — at
//! most until its deadline. The layout is described in `docs/protocol.md`.
//!
//! As with the stream ring, neither side trusts the other: geometry is validated once
//! against the file and then only the local copy is used, every buffer access is
//! bounded by it, and all shared words (samples included) are atomics. The server
//! never reads a value from the block that could make it index out of bounds, wait
//! longer than its deadline, or loop; a hostile client can only produce garbage audio
//! (which the server sanitises) or miss its cycles.

use std::io;
use std::mem::offset_of;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd};
use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::shm::{Mapping, ShmError, check_sealed_memfd, create_sealed_memfd};

mod transport;
pub use transport::{
    CLIENT_SLOW_SYNC, POS_WORDS, POSITION_BITS, TRANSPORT_START, TRANSPORT_STOP, TransportPosition,
    TransportWords,
};

/// `"QVCB"` little-endian: identifies a callback client's shared block.
pub const CALLBACK_MAGIC: u32 = u32::from_le_bytes(*b"QVCB");
/// Version of the layout below; bumped on any incompatible change.
pub const CALLBACK_LAYOUT_VERSION: u32 = 1;
/// Bytes before the first port buffer.
pub const CALLBACK_HEADER_BYTES: usize = 1024;
/// Most ports of either direction one block may hold.
pub const MAX_CALLBACK_PORTS: u32 = 1024;
/// Largest per-port buffer, frames.
pub const MAX_CALLBACK_FRAMES: u32 = 65536;
/// Largest port-buffer area, bytes (256 MiB).
pub const MAX_CALLBACK_DATA_BYTES: usize = 1 << 28;

/// Client flag: the client's process thread runs and wants to be woken.
pub const CLIENT_ACTIVE: u32 = 1 << 0;
/// Server flag: the node failed or was removed; the client should stop.
pub const SERVER_ERROR: u32 = 1 << 0;

/// Cycle flag: the graph freewheels (JACK's freewheel): no device paces this cycle.
pub const CYCLE_FREEWHEEL: u32 = 1 << 0;

/// Mode value: the server waits for the client within the cycle.
pub const MODE_SYNC: u32 = 0;
/// Mode value: the server takes the client's outputs one cycle later, never waiting.
pub const MODE_ASYNC: u32 = 1;

#[repr(C, align(64))]
struct Line<T>(T);

#[repr(C)]
struct Meta {
    magic: AtomicU32,
    version: AtomicU32,
    inputs: AtomicU32,
    outputs: AtomicU32,
    max_frames: AtomicU32,
    data_offset: AtomicU32,
    rate: AtomicU32,
}

/// Written by the server before it wakes the client; `seq` last (release).
#[repr(C)]
struct CycleWords {
    seq: AtomicU64,
    cycle: AtomicU64,
    position: AtomicU64,
    time_ns: AtomicU64,
    period_ns: AtomicU64,
    deadline_ns: AtomicU64,
    frames: AtomicU32,
    /// `CYCLE_*` bits; added within layout version 1 (older servers leave 0).
    flags: AtomicU32,
}

#[repr(C)]
struct StatusWords {
    xruns: AtomicU64,
    mode: AtomicU32,
    server_flags: AtomicU32,
}

/// Written by the client when it completes a cycle, before `done_seq`: when its process
/// thread woke for wake `seq` and when it finished (CLOCK_MONOTONIC ns). Added within
/// layout version 1: a client that does not write them leaves zeros, which the server
/// reads as "not reported".
#[repr(C)]
struct TimesWords {
    seq: AtomicU64,
    awake_ns: AtomicU64,
    finish_ns: AtomicU64,
}

#[repr(C)]
struct Header {
    meta: Line<Meta>,
    cycle: Line<CycleWords>,
    done_seq: Line<AtomicU64>,
    status: Line<StatusWords>,
    client_flags: Line<AtomicU32>,
    times: Line<TimesWords>,
    /// Free for further lines (384–511).
    _spare: [u8; 128],
    /// The transport the server publishes (512–719, `transport.rs`).
    transport_server: Line<transport::ServerWords>,
    /// The client's transport answers and requests (768–967).
    transport_client: Line<transport::ClientWords>,
}

// The layout is a wire format (docs/protocol.md); pin it.
const _: () = {
    assert!(offset_of!(Meta, magic) == 0);
    assert!(offset_of!(Meta, version) == 4);
    assert!(offset_of!(Meta, inputs) == 8);
    assert!(offset_of!(Meta, outputs) == 12);
    assert!(offset_of!(Meta, max_frames) == 16);
    assert!(offset_of!(Meta, data_offset) == 20);
    assert!(offset_of!(Meta, rate) == 24);
    assert!(offset_of!(Header, cycle) == 64);
    assert!(offset_of!(CycleWords, seq) == 0);
    assert!(offset_of!(CycleWords, cycle) == 8);
    assert!(offset_of!(CycleWords, position) == 16);
    assert!(offset_of!(CycleWords, time_ns) == 24);
    assert!(offset_of!(CycleWords, period_ns) == 32);
    assert!(offset_of!(CycleWords, deadline_ns) == 40);
    assert!(offset_of!(CycleWords, frames) == 48);
    assert!(offset_of!(CycleWords, flags) == 52);
    assert!(offset_of!(Header, done_seq) == 128);
    assert!(offset_of!(Header, status) == 192);
    assert!(offset_of!(StatusWords, xruns) == 0);
    assert!(offset_of!(StatusWords, mode) == 8);
    assert!(offset_of!(StatusWords, server_flags) == 12);
    assert!(offset_of!(Header, client_flags) == 256);
    assert!(offset_of!(Header, times) == 320);
    assert!(offset_of!(TimesWords, seq) == 0);
    assert!(offset_of!(TimesWords, awake_ns) == 8);
    assert!(offset_of!(TimesWords, finish_ns) == 16);
    assert!(offset_of!(Header, transport_server) == 512);
    assert!(offset_of!(Header, transport_client) == 768);
    assert!(size_of::<Header>() <= CALLBACK_HEADER_BYTES);
};

/// The cycle a client is woken for, as published in the header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CycleHeader {
    /// Wake sequence number (1 for the first wake); the client echoes it when done.
    pub seq: u64,
    /// Server cycle counter.
    pub cycle: u64,
    /// Graph frame clock at the cycle start (JACK's frame time).
    pub position: u64,
    /// CLOCK_MONOTONIC ns at the cycle start.
    pub time_ns: u64,
    /// Nominal cycle duration, ns.
    pub period_ns: u64,
    /// CLOCK_MONOTONIC ns by which the server needs the outputs (sync mode).
    pub deadline_ns: u64,
    /// Frames in this cycle (the current quantum); at most `max_frames`.
    pub frames: u32,
    /// `CYCLE_*` bits (`CYCLE_FREEWHEEL`).
    pub flags: u32,
}

/// Geometry of a callback block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackGeometry {
    /// Input port buffers.
    pub inputs: u32,
    /// Output port buffers.
    pub outputs: u32,
    /// Frames per port buffer (the server's largest quantum).
    pub max_frames: u32,
}

impl CallbackGeometry {
    fn bytes(&self) -> Option<usize> {
        if self.inputs > MAX_CALLBACK_PORTS
            || self.outputs > MAX_CALLBACK_PORTS
            || self.max_frames == 0
            || self.max_frames > MAX_CALLBACK_FRAMES
        {
            return None;
        }
        let data = (self.inputs as usize + self.outputs as usize)
            .checked_mul(self.max_frames as usize)?
            .checked_mul(size_of::<f32>())?;
        (data <= MAX_CALLBACK_DATA_BYTES).then_some(CALLBACK_HEADER_BYTES + data)
    }
}

/// A callback client's shared block: header plus one f32 buffer per port (inputs,
/// then outputs), each `max_frames` long.
pub struct CallbackShm {
    map: Mapping,
    geo: CallbackGeometry,
    rate: u32,
}

// SAFETY: all access to the mapping goes through atomics; the geometry is immutable.
unsafe impl Send for CallbackShm {}
// SAFETY: as above.
unsafe impl Sync for CallbackShm {}

impl std::fmt::Debug for CallbackShm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackShm")
            .field("geometry", &self.geo)
            .field("rate", &self.rate)
            .finish()
    }
}

impl CallbackShm {
    /// Creates a block (server side); returns it with the memfd for the client.
    pub fn create(geo: CallbackGeometry, rate: u32) -> io::Result<(CallbackShm, OwnedFd)> {
        let len = geo.bytes().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "callback block of {}+{} ports x {} frames is out of limits",
                    geo.inputs, geo.outputs, geo.max_frames
                ),
            )
        })?;
        let (fd, map) = create_sealed_memfd("quaver-callback", len)?;
        let shm = CallbackShm { map, geo, rate };
        let m = &shm.header().meta.0;
        m.inputs.store(geo.inputs, Ordering::Relaxed);
        m.outputs.store(geo.outputs, Ordering::Relaxed);
        m.max_frames.store(geo.max_frames, Ordering::Relaxed);
        m.data_offset
            .store(CALLBACK_HEADER_BYTES as u32, Ordering::Relaxed);
        m.rate.store(rate, Ordering::Relaxed);
        m.version.store(CALLBACK_LAYOUT_VERSION, Ordering::Relaxed);
        m.magic.store(CALLBACK_MAGIC, Ordering::Release);
        Ok((shm, fd))
    }

    /// Maps a block received from the server, checking it against the file and the
    /// geometry the reply announced.
    pub fn open(fd: OwnedFd, expected: CallbackGeometry) -> Result<CallbackShm, ShmError> {
        let want = expected
            .bytes()
            .ok_or_else(|| ShmError::BadGeometry(format!("{expected:?} is out of limits")))?;
        let size = check_sealed_memfd(
            &fd,
            (CALLBACK_HEADER_BYTES + MAX_CALLBACK_DATA_BYTES) as u64,
        )?;
        if size != want as u64 {
            return Err(ShmError::SizeMismatch {
                expected: want as u64,
                actual: size,
            });
        }
        let map = Mapping::new(fd.as_fd(), size as usize)?;
        drop(fd);
        // SAFETY: the mapping is page aligned and longer than the header.
        let meta = unsafe { &(*map.ptr.as_ptr().cast::<Header>()).meta.0 };
        let magic = meta.magic.load(Ordering::Acquire);
        if magic != CALLBACK_MAGIC {
            return Err(ShmError::BadMagic(magic));
        }
        let version = meta.version.load(Ordering::Relaxed);
        if version != CALLBACK_LAYOUT_VERSION {
            return Err(ShmError::BadVersion(version));
        }
        let found = CallbackGeometry {
            inputs: meta.inputs.load(Ordering::Relaxed),
            outputs: meta.outputs.load(Ordering::Relaxed),
            max_frames: meta.max_frames.load(Ordering::Relaxed),
        };
        if found != expected {
            return Err(ShmError::BadGeometry(format!(
                "block holds {found:?}, the reply announced {expected:?}"
            )));
        }
        let offset = meta.data_offset.load(Ordering::Relaxed);
        if offset as usize != CALLBACK_HEADER_BYTES {
            return Err(ShmError::BadDataOffset(offset));
        }
        let rate = meta.rate.load(Ordering::Relaxed);
        Ok(CallbackShm {
            map,
            geo: expected,
            rate,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page aligned and at least CALLBACK_HEADER_BYTES long;
        // the header holds only atomics, valid for any bit pattern.
        unsafe { &*self.map.ptr.as_ptr().cast::<Header>() }
    }

    /// Port buffer `k` (inputs first, then outputs), or `None` past the geometry.
    pub(crate) fn port(&self, k: usize) -> Option<&[AtomicU32]> {
        if k >= self.geo.inputs as usize + self.geo.outputs as usize {
            return None;
        }
        let frames = self.geo.max_frames as usize;
        // SAFETY: create/open checked the mapping holds the header plus
        // (inputs + outputs) * max_frames samples; k is below that count; the header
        // size keeps 4-byte alignment; AtomicU32 is valid for any bit pattern.
        Some(unsafe {
            std::slice::from_raw_parts(
                self.map
                    .ptr
                    .as_ptr()
                    .add(CALLBACK_HEADER_BYTES + k * frames * 4)
                    .cast::<AtomicU32>(),
                frames,
            )
        })
    }

    /// The block's geometry (the local, validated copy).
    pub fn geometry(&self) -> CallbackGeometry {
        self.geo
    }

    /// The server's sample rate as published at creation.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    // ----- server side -----

    /// Server: copies `data` into input buffer `i` (bounded by the buffer). *RT*.
    pub fn write_input(&self, i: usize, data: &[f32]) {
        if i >= self.geo.inputs as usize {
            return;
        }
        if let Some(buf) = self.port(i) {
            for (d, s) in buf.iter().zip(data) {
                d.store(s.to_bits(), Ordering::Relaxed);
            }
        }
    }

    /// Server: copies output buffer `o` into `out`, replacing non-finite samples by 0
    /// (the client is not trusted). Fills `out` with silence past the buffer. *RT*.
    pub fn read_output(&self, o: usize, out: &mut [f32]) {
        let buf = (o < self.geo.outputs as usize)
            .then(|| self.port(self.geo.inputs as usize + o))
            .flatten();
        let Some(buf) = buf else {
            out.fill(0.0);
            return;
        };
        let n = out.len().min(buf.len());
        for (d, s) in out[..n].iter_mut().zip(buf) {
            *d = quaver_dsp::format::finite_sample(f32::from_bits(s.load(Ordering::Relaxed)));
        }
        out[n..].fill(0.0);
    }

    /// Server: publishes the cycle (all fields but `seq`, which is `seq` here) and then
    /// the sequence number, with release ordering. The caller wakes the client next.
    /// *RT*.
    pub fn publish_cycle(&self, c: &CycleHeader) {
        let w = &self.header().cycle.0;
        w.cycle.store(c.cycle, Ordering::Relaxed);
        w.position.store(c.position, Ordering::Relaxed);
        w.time_ns.store(c.time_ns, Ordering::Relaxed);
        w.period_ns.store(c.period_ns, Ordering::Relaxed);
        w.deadline_ns.store(c.deadline_ns, Ordering::Relaxed);
        w.frames
            .store(c.frames.min(self.geo.max_frames), Ordering::Relaxed);
        w.flags.store(c.flags, Ordering::Relaxed);
        w.seq.store(c.seq, Ordering::Release);
    }

    /// The sequence number the client last completed.
    pub fn done_seq(&self) -> u64 {
        self.header().done_seq.0.load(Ordering::Acquire)
    }

    /// Server: publishes the client's miss counter and mode. *RT*.
    pub fn set_status(&self, xruns: u64, mode: u32) {
        let s = &self.header().status.0;
        s.xruns.store(xruns, Ordering::Relaxed);
        s.mode.store(mode, Ordering::Relaxed);
    }

    /// Server: sets `SERVER_*` flag bits.
    pub fn set_server_flags(&self, bits: u32) {
        self.header()
            .status
            .0
            .server_flags
            .fetch_or(bits, Ordering::AcqRel);
    }

    /// The `CLIENT_*` flag bits.
    pub fn client_flags(&self) -> u32 {
        self.header().client_flags.0.load(Ordering::Acquire)
    }

    /// Server: when the client woke for wake `seq` and when it finished it, if it
    /// stamped them (read after seeing `done_seq == seq`). Untrusted: for statistics
    /// only. *RT*.
    pub fn client_times(&self, seq: u64) -> Option<(u64, u64)> {
        let t = &self.header().times.0;
        if t.seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let times = (
            t.awake_ns.load(Ordering::Relaxed),
            t.finish_ns.load(Ordering::Relaxed),
        );
        // A client stamping the next wake while we read: the pair may be torn.
        (t.seq.load(Ordering::Acquire) == seq).then_some(times)
    }

    // ----- the JACK transport lines (`callback/transport.rs`) -----

    /// Server: publishes the transport for the coming cycle. *RT*.
    pub fn publish_transport(&self, t: &TransportWords) {
        self.header().transport_server.0.publish(t);
    }

    /// Server: the client's `CLIENT_SLOW_SYNC` flag and the sync epoch it last said it
    /// is ready for. *RT*.
    pub fn sync_answer(&self) -> (bool, u32) {
        self.header().transport_client.0.sync_answer()
    }

    /// Server: the client's command counter and last command word (unchecked). *RT*.
    pub fn transport_command(&self) -> (u32, u32) {
        self.header().transport_client.0.command()
    }

    /// Server: the client's latest position request and its sequence, if it is not
    /// being written. Unchecked words. *RT*.
    pub fn transport_request(&self) -> Option<(u32, [u32; POS_WORDS])> {
        self.header().transport_client.0.request()
    }

    /// Server: the BBT the client last wrote as master, with its sequence. *RT*.
    pub fn transport_bbt(&self) -> Option<(u32, [u32; POS_WORDS])> {
        self.header().transport_client.0.bbt()
    }

    /// Client: the transport as published for the latest cycle.
    pub fn transport(&self) -> TransportWords {
        self.header().transport_server.0.read()
    }

    /// Client: sets or clears `CLIENT_SLOW_SYNC`.
    pub fn set_slow_sync(&self, on: bool) {
        self.header().transport_client.0.set_slow_sync(on);
    }

    /// Client: ready for the start of `epoch`.
    pub fn set_ready_epoch(&self, epoch: u32) {
        self.header().transport_client.0.set_ready_epoch(epoch);
    }

    /// Client: asks for a start or a stop.
    pub fn send_transport_command(&self, cmd: u32) {
        self.header().transport_client.0.send_command(cmd);
    }

    /// Client: asks for a new position. One writer at a time (the caller serialises).
    pub fn send_transport_request(&self, pos: &[u32; POS_WORDS]) {
        self.header().transport_client.0.send_request(pos);
    }

    /// Client (the master's process thread): the BBT it computed this cycle.
    pub fn write_bbt(&self, pos: &[u32; POS_WORDS]) {
        self.header().transport_client.0.write_bbt(pos);
    }

    // ----- client side -----

    /// Client: the latest cycle the server woke it for. `frames` is clamped to the
    /// local `max_frames`.
    pub fn cycle(&self) -> CycleHeader {
        let w = &self.header().cycle.0;
        let seq = w.seq.load(Ordering::Acquire);
        CycleHeader {
            seq,
            cycle: w.cycle.load(Ordering::Relaxed),
            position: w.position.load(Ordering::Relaxed),
            time_ns: w.time_ns.load(Ordering::Relaxed),
            period_ns: w.period_ns.load(Ordering::Relaxed),
            deadline_ns: w.deadline_ns.load(Ordering::Relaxed),
            frames: w.frames.load(Ordering::Relaxed).min(self.geo.max_frames),
            flags: w.flags.load(Ordering::Relaxed),
        }
    }

    /// Client: copies input buffer `i` into `out` (bounded; silence past the buffer).
    pub fn read_input(&self, i: usize, out: &mut [f32]) {
        let buf = (i < self.geo.inputs as usize)
            .then(|| self.port(i))
            .flatten();
        let Some(buf) = buf else {
            out.fill(0.0);
            return;
        };
        let n = out.len().min(buf.len());
        for (d, s) in out[..n].iter_mut().zip(buf) {
            *d = f32::from_bits(s.load(Ordering::Relaxed));
        }
        out[n..].fill(0.0);
    }

    /// Client: copies `data` into output buffer `o` (bounded by the buffer).
    pub fn write_output(&self, o: usize, data: &[f32]) {
        if o >= self.geo.outputs as usize {
            return;
        }
        if let Some(buf) = self.port(self.geo.inputs as usize + o) {
            for (d, s) in buf.iter().zip(data) {
                d.store(s.to_bits(), Ordering::Relaxed);
            }
        }
    }

    /// Client: publishes that it completed wake `seq` (release: its outputs first).
    pub fn complete(&self, seq: u64) {
        self.header().done_seq.0.store(seq, Ordering::Release);
    }

    /// Client: like [`CallbackShm::complete`], first stamping when the process thread
    /// woke for `seq` and when it finished (CLOCK_MONOTONIC ns; pw-top's WAIT and BUSY
    /// on the server side).
    pub fn complete_timed(&self, seq: u64, awake_ns: u64, finish_ns: u64) {
        let t = &self.header().times.0;
        // Invalidate first so a reader never pairs the old seq with new stamps.
        t.seq.store(0, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        t.awake_ns.store(awake_ns, Ordering::Relaxed);
        t.finish_ns.store(finish_ns, Ordering::Relaxed);
        t.seq.store(seq, Ordering::Release);
        self.complete(seq);
    }

    /// The miss counter the server published.
    pub fn xruns(&self) -> u64 {
        self.header().status.0.xruns.load(Ordering::Relaxed)
    }

    /// The mode the server published (`MODE_SYNC` or `MODE_ASYNC`).
    pub fn mode(&self) -> u32 {
        self.header().status.0.mode.load(Ordering::Relaxed)
    }

    /// The `SERVER_*` flag bits.
    pub fn server_flags(&self) -> u32 {
        self.header().status.0.server_flags.load(Ordering::Acquire)
    }

    /// Client: sets or clears `CLIENT_*` bits.
    pub fn set_client_flags(&self, bits: u32, on: bool) {
        let f = &self.header().client_flags.0;
        if on {
            f.fetch_or(bits, Ordering::AcqRel);
        } else {
            f.fetch_and(!bits, Ordering::AcqRel);
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// One direction of a callback client's wakeups: an eventfd with exactly one side
/// that signals and one side that waits (wake: server → client; done: client →
/// server). Always nonblocking; waiting is done with `ppoll`.
#[derive(Debug)]
pub struct EventBell {
    fd: OwnedFd,
}

impl EventBell {
    /// A new nonblocking, close-on-exec eventfd.
    pub fn new() -> io::Result<EventBell> {
        Ok(EventBell {
            fd: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
        })
    }

    /// Wraps a received eventfd, forcing it nonblocking.
    pub fn from_fd(fd: OwnedFd) -> io::Result<EventBell> {
        let fl = rustix::fs::fcntl_getfl(&fd)?;
        if !fl.contains(OFlags::NONBLOCK) {
            rustix::fs::fcntl_setfl(&fd, fl | OFlags::NONBLOCK)?;
        }
        Ok(EventBell { fd })
    }

    /// Signals the waiter: one `write`, no allocation. *RT*.
    #[inline]
    pub fn signal(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// Resets the counter without blocking; true if it had been signalled. *RT*.
    pub fn drain(&self) -> bool {
        let mut buf = [0u8; 8];
        loop {
            match rustix::io::read(&self.fd, &mut buf) {
                Ok(_) => return true,
                Err(Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }

    /// Waits until signalled or CLOCK_MONOTONIC reaches `deadline_ns`; returns whether
    /// it was signalled (and resets it). One `ppoll` per wakeup, no allocation: this is
    /// the bounded wait the server's real-time thread makes for a callback client.
    pub fn wait_until(&self, deadline_ns: u64) -> bool {
        loop {
            if self.drain() {
                return true;
            }
            let now = monotonic_ns();
            if now >= deadline_ns {
                return false;
            }
            let left = deadline_ns - now;
            let ts = rustix::time::Timespec {
                tv_sec: (left / 1_000_000_000) as i64,
                tv_nsec: (left % 1_000_000_000) as i64,
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(_) => return false,
            }
        }
    }
}

impl AsFd for EventBell {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> CallbackGeometry {
        CallbackGeometry {
            inputs: 2,
            outputs: 3,
            max_frames: 256,
        }
    }

    #[test]
    fn create_open_and_exchange_a_cycle() {
        let (srv, fd) = CallbackShm::create(geo(), 48000).unwrap();
        let cli = CallbackShm::open(fd, geo()).unwrap();
        assert_eq!(cli.rate(), 48000);
        srv.write_input(1, &[0.5; 300]);
        let c = CycleHeader {
            seq: 1,
            cycle: 7,
            position: 7 * 64,
            time_ns: 1000,
            period_ns: 1_333_333,
            deadline_ns: 2000,
            frames: 64,
            flags: CYCLE_FREEWHEEL,
        };
        srv.publish_cycle(&c);
        assert_eq!(cli.cycle(), c);
        let mut buf = [1.0f32; 300];
        cli.read_input(1, &mut buf);
        assert!(buf[..256].iter().all(|&v| v == 0.5));
        assert!(
            buf[256..].iter().all(|&v| v == 0.0),
            "past the buffer: silence"
        );
        cli.read_input(2, &mut buf);
        assert!(buf.iter().all(|&v| v == 0.0), "no such input: silence");
        cli.write_output(2, &[0.25, f32::NAN, f32::INFINITY, -1.0]);
        cli.write_output(3, &[9.0; 4]);
        cli.complete(1);
        assert_eq!(srv.done_seq(), 1);
        let mut out = [7.0f32; 4];
        srv.read_output(2, &mut out);
        assert_eq!(
            out,
            [0.25, 0.0, 0.0, -1.0],
            "non-finite samples are sanitised"
        );
        srv.read_output(3, &mut out);
        assert_eq!(out, [0.0; 4]);
        srv.set_status(3, MODE_ASYNC);
        assert_eq!((cli.xruns(), cli.mode()), (3, MODE_ASYNC));
        cli.set_client_flags(CLIENT_ACTIVE, true);
        assert_eq!(srv.client_flags(), CLIENT_ACTIVE);
        cli.set_client_flags(CLIENT_ACTIVE, false);
        assert_eq!(srv.client_flags(), 0);
        srv.set_server_flags(SERVER_ERROR);
        assert_eq!(cli.server_flags(), SERVER_ERROR);
    }

    #[test]
    fn client_times_belong_to_the_wake_they_name() {
        let (srv, fd) = CallbackShm::create(geo(), 48000).unwrap();
        let cli = CallbackShm::open(fd, geo()).unwrap();
        assert_eq!(srv.client_times(1), None, "nothing stamped yet");
        cli.complete(1);
        assert_eq!(srv.client_times(1), None, "an untimed completion");
        cli.complete_timed(2, 5000, 9000);
        assert_eq!(srv.done_seq(), 2);
        assert_eq!(srv.client_times(2), Some((5000, 9000)));
        assert_eq!(srv.client_times(3), None, "stamps of another wake");
    }

    #[test]
    fn open_checks_geometry_and_header() {
        let (srv, fd) = CallbackShm::create(geo(), 48000).unwrap();
        let dup = || fd.try_clone().unwrap();
        let other = CallbackGeometry {
            inputs: 3,
            outputs: 2,
            max_frames: 256,
        };
        // Same size, different split: caught by the header check.
        assert!(matches!(
            CallbackShm::open(dup(), other),
            Err(ShmError::BadGeometry(_))
        ));
        let bigger = CallbackGeometry {
            max_frames: 512,
            ..geo()
        };
        assert!(matches!(
            CallbackShm::open(dup(), bigger),
            Err(ShmError::SizeMismatch { .. })
        ));
        let m = &srv.header().meta.0;
        m.magic.store(0, Ordering::Relaxed);
        assert!(matches!(
            CallbackShm::open(dup(), geo()),
            Err(ShmError::BadMagic(0))
        ));
        m.magic.store(CALLBACK_MAGIC, Ordering::Relaxed);
        m.version.store(2, Ordering::Relaxed);
        assert!(matches!(
            CallbackShm::open(dup(), geo()),
            Err(ShmError::BadVersion(2))
        ));
        m.version.store(CALLBACK_LAYOUT_VERSION, Ordering::Relaxed);
        assert!(CallbackShm::open(dup(), geo()).is_ok());
        let unsealed = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&unsealed, geo().bytes().unwrap() as u64).unwrap();
        assert!(matches!(
            CallbackShm::open(unsealed, geo()),
            Err(ShmError::NotSealed)
        ));
    }

    #[test]
    fn create_refuses_silly_geometry() {
        for g in [
            CallbackGeometry {
                inputs: MAX_CALLBACK_PORTS + 1,
                outputs: 0,
                max_frames: 64,
            },
            CallbackGeometry {
                inputs: 1,
                outputs: 1,
                max_frames: 0,
            },
            CallbackGeometry {
                inputs: 1,
                outputs: 1,
                max_frames: MAX_CALLBACK_FRAMES + 1,
            },
            CallbackGeometry {
                inputs: MAX_CALLBACK_PORTS,
                outputs: MAX_CALLBACK_PORTS,
                max_frames: MAX_CALLBACK_FRAMES,
            },
        ] {
            assert!(CallbackShm::create(g, 48000).is_err(), "{g:?}");
        }
        // A node with no ports at all is fine (ports come later).
        assert!(
            CallbackShm::create(
                CallbackGeometry {
                    inputs: 0,
                    outputs: 0,
                    max_frames: 64
                },
                48000
            )
            .is_ok()
        );
    }

    #[test]
    fn bell_waits_until_a_deadline_or_a_signal() {
        let bell = EventBell::new().unwrap();
        let t0 = monotonic_ns();
        assert!(!bell.wait_until(t0 + 5_000_000));
        assert!(monotonic_ns() - t0 >= 5_000_000);
        assert!(!bell.wait_until(t0), "a past deadline returns at once");
        bell.signal();
        bell.signal();
        assert!(
            bell.wait_until(t0),
            "a pending signal counts even past the deadline"
        );
        assert!(!bell.drain(), "one wait consumed both signals");
        let other = EventBell::from_fd(bell.as_fd().try_clone_to_owned().unwrap()).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            other.signal();
        });
        assert!(bell.wait_until(monotonic_ns() + 5_000_000_000));
        t.join().unwrap();
    }

    #[test]
    fn both_sides_see_each_others_transport_words() {
        let geo = CallbackGeometry {
            inputs: 1,
            outputs: 1,
            max_frames: 64,
        };
        let (server, fd) = CallbackShm::create(geo, 48000).unwrap();
        let client = CallbackShm::open(fd, geo).unwrap();
        let t = TransportWords {
            state: 3,
            master: true,
            sync_epoch: 5,
            timebase_epoch: 6,
            frame_rate: 48000,
            usecs: 77,
            current: [1; POS_WORDS],
            next: [2; POS_WORDS],
        };
        server.publish_transport(&t);
        assert_eq!(client.transport(), t);
        client.set_slow_sync(true);
        client.set_ready_epoch(5);
        assert_eq!(server.sync_answer(), (true, 5));
        client.send_transport_command(TRANSPORT_START);
        assert_eq!(server.transport_command(), (1, TRANSPORT_START));
        client.send_transport_request(&[3; POS_WORDS]);
        let (s1, w) = server.transport_request().unwrap();
        assert_eq!(w, [3; POS_WORDS]);
        client.send_transport_request(&[4; POS_WORDS]);
        assert_ne!(server.transport_request().unwrap().0, s1);
        client.write_bbt(&[5; POS_WORDS]);
        assert_eq!(server.transport_bbt().unwrap().1, [5; POS_WORDS]);
    }
}
