//! One PulseAudio connection, served by the front-end's I/O thread (`ioloop`).
//!
//! A `Conn` owns the socket (non-blocking, buffered both ways) and the control side of
//! the client's streams. When its socket is readable the I/O thread reads whole packets
//! ([`Conn::on_readable`]); after every wakeup that concerns it, it services every stream
//! (REQUESTs, STARTED/UNDERFLOW, drain acks, record data), forwards queued events and
//! writes what the socket takes ([`Conn::pump`]). An idle client costs no wakeups.
//!
//! Here: the connection's state, reading, pumping and lending the intake to the RT
//! thread. [`playback`] and [`record`] hold the control side of each stream, `shm` the
//! shared memory the connection offers and reads; the commands are in `commands/`.

use crate::io::export::ExportPool;
use crate::io::shared::{ConnHandle, ConnMsg};
use crate::io::tcp::Sock;
use crate::rt::intake::{Lease, MAX_RELEASES, RtIntake, Taken};
use crate::rt::rtwire::RtWire;
use crate::rt::shared::F_CORKED;
use crate::state::Server;
use crate::wire::convert::bytes_to_usec;
use crate::wire::{Out, Packet, PacketReader};
use playback::Playback;
use pulseaudio::protocol::{
    self as pa, Command, SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use quaver_engine::NodeId;
use record::{Record, Upload};
use std::collections::{BTreeMap, VecDeque};
use std::io::{ErrorKind, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed};

pub(crate) mod playback;
pub(crate) mod record;
mod shm;

/// What the I/O thread needs to know of every playback stream after each pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaybackSummary {
    /// Streams with a request armed for the RT thread.
    pub armed: usize,
    /// Uncorked streams asked for data their client has not sent yet (as of the last
    /// pass; a request the RT thread sent counts once it was taken back).
    pub awaiting: usize,
    /// The least time an uncorked stream gives its client to answer a request
    /// (tlength − minreq), µs; `u64::MAX` with none.
    pub shortest_low_water_usec: u64,
    /// Connections whose intake the RT thread holds.
    pub lent: usize,
}

impl Default for PlaybackSummary {
    fn default() -> Self {
        PlaybackSummary {
            armed: 0,
            awaiting: 0,
            lent: 0,
            shortest_low_water_usec: u64::MAX,
        }
    }
}

/// A client that lets this much output pile up unread is disconnected.
pub(crate) const MAX_OUT: usize = 32 * 1024 * 1024;

/// Most released client blocks held back to ride with the next message to the client.
pub(crate) const MAX_HELD_RELEASES: usize = 32;

/// The RT thread is taken to have stopped looking at a lent ring after this long.
pub(crate) const INTAKE_STALE_NS: u64 = 100_000_000;

impl Drop for Conn {
    fn drop(&mut self) {
        // The RT thread must be done with the client's pool before it is unmapped.
        self.reclaim_intake();
    }
}

/// One client connection: its socket, buffered output and streams.
pub(crate) struct Conn {
    pub(crate) srv: Arc<Server>,
    pub(crate) handle: Arc<ConnHandle>,
    pub(crate) client: u32,
    pub(crate) sock: Sock,
    pub(crate) reader: PacketReader,
    pub(crate) out: Vec<u8>,
    pub(crate) version: u16,
    pub(crate) authed: bool,
    pub(crate) playback: BTreeMap<u32, Playback>,
    pub(crate) record: BTreeMap<u32, Record>,
    pub(crate) uploads: BTreeMap<u32, Upload>,
    pub(crate) next_channel: u32,
    pub(crate) closing: bool,
    /// File descriptors received and not yet claimed by a command.
    pub(crate) fds: VecDeque<rustix::fd::OwnedFd>,
    /// The client's memfd pools by shm id (REGISTER_MEMFD_SHMID).
    pub(crate) memfds: BTreeMap<u32, crate::io::shm::ClientPool>,
    /// Where each client block is copied to (kept between blocks).
    pub(crate) shm_scratch: Vec<u8>,
    /// Audio bytes received through shared memory (for logs and tests).
    pub(crate) shm_bytes: u64,
    /// The command tag of the packet being handled (for logs).
    pub(crate) last_tag: u32,
    /// The shared ring-buffer channel, once offered.
    pub(crate) srb: Option<crate::io::srb::Srb>,
    /// The srbchannel's ring as a memory block for STAT.
    pub(crate) srb_block: Option<crate::memstat::MemBlock>,
    /// The memfd pool record audio goes out through (memfd clients).
    pub(crate) pool: Option<ExportPool>,
    /// Framing of what arrives through the srbchannel (its own byte stream).
    pub(crate) srb_reader: PacketReader,
    /// Packets in `out` that carry descriptors: (offset, length, descriptors).
    pub(crate) out_fds: VecDeque<(usize, usize, Vec<rustix::fd::OwnedFd>)>,
    /// Socket output queued before the srbchannel took over; it leaves first, so the
    /// client sees packets in order.
    pub(crate) sock_tail: Vec<u8>,
    /// The socket as the RT thread may write requests to it: made with the first
    /// playback stream (most connections never play), unix sockets only.
    pub(crate) wire: Option<Arc<RtWire>>,
    /// The client's credentials as last received (SCM_CREDENTIALS; with SO_PASSCRED
    /// every read has some: those the client passed, else the kernel's).
    pub(crate) creds: Option<rustix::net::UCred>,
    /// Those that came with AUTH (libpulse passes its own there), as PulseAudio uses.
    pub(crate) auth_creds: Option<rustix::net::UCred>,
    /// Client blocks already copied out whose release has not been sent yet (see
    /// [`Conn::send_held_releases`]).
    pub(crate) held_releases: Vec<u32>,
    /// What the RT thread needs to take a lone low-latency stream's blocks in itself
    /// ([`crate::rt::intake`]); made with the wire.
    pub(crate) intake: Option<Arc<RtIntake>>,
    /// The pool the client's last block came from (the one a lease lends).
    pub(crate) last_shm_id: Option<u32>,
    /// The RT thread's intake found the client's ring corrupt.
    pub(crate) intake_corrupt: bool,
}

impl Conn {
    /// Whether one of this client's playback streams has got to the point its wakeup was
    /// set for (its request threshold).
    pub(crate) fn playback_due(&self) -> bool {
        self.playback
            .values()
            .any(|p| p.shared.consumed.load(Acquire) >= p.armed_wake)
    }

    /// Adds this client's playback streams to `sum`, in one walk over them.
    pub(crate) fn add_playback_to(&self, sum: &mut PlaybackSummary) {
        let lent = self.intake_lent();
        sum.lent += usize::from(lent);
        for p in self.playback.values() {
            sum.armed += usize::from(p.armed);
            if p.shared.flags.load(Relaxed) & F_CORKED != 0 {
                continue;
            }
            // Answers the RT thread takes in do not wake this thread: nothing to gather.
            sum.awaiting += usize::from(p.asked > 0 && !lent);
            let w = p
                .attr
                .target_length
                .saturating_sub(p.attr.minimum_request_length);
            sum.shortest_low_water_usec = sum
                .shortest_low_water_usec
                .min(bytes_to_usec(w as u64, &p.spec));
        }
    }

    /// The wire for the RT thread's requests, made on first use; `None` over TCP (a send
    /// may go out in part far more readily, and remote clients are not the ones whose
    /// wakeups matter), when `[pulse] rt_requests` is off, or if the socket cannot be
    /// duplicated (the requests then stay with this thread).
    pub(crate) fn rt_wire(&mut self) -> Option<Arc<RtWire>> {
        if self.wire.is_none()
            && self.srv.opts.rt_requests
            && let Sock::Unix(s) = &self.sock
        {
            match RtWire::new(s) {
                Ok(w) => {
                    if let Some(srb) = self.srb.as_ref().filter(|s| s.active) {
                        w.use_srb(srb.out());
                    }
                    self.wire = Some(Arc::new(w));
                }
                Err(e) => tracing::warn!(
                    "pulse client {}: requests stay with the I/O thread: {e}",
                    self.client
                ),
            }
        }
        self.wire.clone()
    }

    /// A new connection on `sock` (made non-blocking here).
    pub(crate) fn new(
        srv: Arc<Server>,
        sock: Sock,
        handle: Arc<ConnHandle>,
    ) -> std::io::Result<Conn> {
        sock.set_nonblocking()?;
        if let Sock::Unix(s) = &sock {
            // Receive the credentials libpulse passes with AUTH.
            rustix::net::sockopt::set_socket_passcred(s, true)?;
        }
        Ok(Conn {
            client: handle.client,
            srv,
            handle,
            sock,
            reader: PacketReader::new(),
            out: Vec::new(),
            version: pa::MIN_VERSION,
            authed: false,
            playback: BTreeMap::new(),
            record: BTreeMap::new(),
            uploads: BTreeMap::new(),
            next_channel: 0,
            closing: false,
            fds: VecDeque::new(),
            memfds: BTreeMap::new(),
            shm_scratch: Vec::new(),
            shm_bytes: 0,
            last_tag: 0,
            srb: None,
            srb_block: None,
            pool: None,
            srb_reader: {
                let mut r = PacketReader::new();
                r.enable_shm();
                r
            },
            out_fds: VecDeque::new(),
            sock_tail: Vec::new(),
            wire: None,
            held_releases: Vec::with_capacity(MAX_HELD_RELEASES),
            intake: None,
            last_shm_id: None,
            intake_corrupt: false,
            creds: None,
            auth_creds: None,
        })
    }

    /// The client's index (for the I/O thread's diagnostics).
    pub(crate) fn client(&self) -> u32 {
        self.client
    }

    /// The client's socket (for the I/O thread's epoll set).
    pub(crate) fn sock(&self) -> &Sock {
        &self.sock
    }

    /// Whether output waits for the socket to take it.
    pub(crate) fn wants_write(&self) -> bool {
        !self.sock_tail.is_empty() || (!self.srb_active() && !self.out.is_empty())
    }

    pub(crate) fn srb_active(&self) -> bool {
        self.srb.as_ref().is_some_and(|s| s.active)
    }

    /// The srbchannel's wakeup descriptor, once offered (for the I/O thread's epoll).
    pub(crate) fn srb_wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.srb.as_ref().map(|s| s.wake_fd())
    }

    /// Before the I/O thread sleeps; true when the client already posted a wakeup.
    /// Not while the RT thread takes the ring in: then nobody sleeps on the client's
    /// posts, and they cost it no pipe write either.
    pub(crate) fn srb_before_poll(&mut self) -> bool {
        if self.intake_lent() {
            return false;
        }
        self.srb.as_mut().is_some_and(|s| s.before_poll())
    }

    /// Whether the RT thread could take this connection's blocks in: its only playback
    /// stream, through an active srbchannel.
    pub(crate) fn intake_possible(&self) -> bool {
        self.intake.is_some() && self.srb_active() && self.playback.len() == 1
    }

    /// Whether the RT thread holds the intake.
    pub(crate) fn intake_lent(&self) -> bool {
        self.intake.as_ref().is_some_and(|i| i.lent())
    }

    /// Takes the intake back from the RT thread, with what it did meanwhile.
    pub(crate) fn reclaim_intake(&mut self) {
        let Some(l) = self.intake.as_ref().and_then(|i| i.reclaim()) else {
            return;
        };
        let t = l.taken;
        if let Some(srb) = self.srb.as_mut() {
            srb.set_read_index(l.rd, t.ring_bytes);
        }
        self.held_releases.extend_from_slice(&t.releases[..t.held]);
        self.shm_bytes += t.written;
        self.intake_corrupt |= t.corrupt;
        if let Some(p) = self.playback.get_mut(&l.channel) {
            p.take_lease(l);
        }
    }

    /// Lends the intake to the RT thread when it can take the client's blocks in: a
    /// lone playback stream in its steady state with requests close together
    /// ([`playback::LEND_BELOW_USEC`]), the srbchannel between packets, blocks from a
    /// mapped pool.
    pub(crate) fn lend_intake(&mut self) {
        let Some(intake) = self.intake.clone() else {
            return;
        };
        if intake.lent() || self.closing || !self.intake_possible() {
            return;
        }
        // The releases still held go with the RT thread's next request.
        if !self.srb_reader.at_boundary() || self.held_releases.len() > MAX_RELEASES {
            return;
        }
        let Some(shm_id) = self.last_shm_id else {
            return;
        };
        let Some((pool, pool_len)) = self.memfds.get(&shm_id).and_then(|p| p.mapping()) else {
            return;
        };
        let srb = self.srb.as_ref().expect("active");
        let (out, rd) = (srb.out(), srb.read_index());
        let p = self.playback.values_mut().next().expect("one stream");
        if !p.armed || !p.carry.is_empty() || !p.pending.is_empty() || p.lend_period().normal == 0 {
            return;
        }
        let Some(producer) = p.ring.take() else {
            return;
        };
        let mut scratch = std::mem::take(&mut p.lease_scratch);
        // libpulse's blocks are at most one pool slot (64 KiB); larger ones go to us.
        scratch.resize(64 * 1024, 0);
        intake.lend(Lease {
            srb: out,
            rd,
            pool,
            pool_len,
            shm_id,
            channel: p.channel,
            frame_bytes: p.fs,
            channels: p.ch,
            codec: p.codec,
            max_frames: p.attr.max_length as u64 / p.fs as u64,
            rate: p.spec.sample_rate,
            write_index: p.write_index,
            producer,
            pushed: p.pushed,
            scratch,
            taken: Taken::holding(&self.held_releases),
        });
        self.held_releases.clear();
    }

    /// After the I/O thread woke: takes the wakeup and handles what the ring holds.
    /// `Ok(true)` when the connection needs a pump (packets came, or output waits for
    /// room the client may have made).
    pub(crate) fn on_srb(&mut self, woken: bool) -> Result<bool, String> {
        if let Some(i) = self.intake.as_ref().filter(|i| i.lent()) {
            // The RT thread reads the ring; unless it stopped looking (its stream's
            // device stopped, say) while something waits there.
            let waiting = self
                .srb
                .as_ref()
                .is_some_and(|s| s.in_fill().is_none_or(|n| n > 0));
            if !(waiting && i.since_look_ns() > INTAKE_STALE_NS) {
                return Ok(false);
            }
        }
        self.reclaim_intake();
        if std::mem::take(&mut self.intake_corrupt) {
            return Err("srbchannel ring count out of range".into());
        }
        let Some(srb) = self.srb.as_mut() else {
            return Ok(false);
        };
        if woken {
            srb.drain_wake();
        }
        srb.after_poll();
        let mut bytes = Vec::new();
        srb.read(&mut bytes)?;
        let pending = srb.active && !self.out.is_empty();
        let mut rest = &bytes[..];
        while !rest.is_empty() && !self.closing {
            let (used, packet) = self.srb_reader.feed(rest).map_err(|e| e.to_string())?;
            rest = &rest[used..];
            if let Some(p) = packet {
                self.on_packet(p)?;
            }
        }
        Ok(!bytes.is_empty() || pending)
    }

    /// Queues the held block releases. They wait for the next message to the client (a
    /// REQUEST, a reply) or until [`MAX_HELD_RELEASES`] have piled up: sent on their own,
    /// a release can wake the client a second time for every block it writes.
    pub(crate) fn send_held_releases(&mut self) {
        let mut out = Out {
            buf: &mut self.out,
            version: self.version,
        };
        for id in self.held_releases.drain(..) {
            out.shm_release(id);
        }
    }

    pub(crate) fn out(&mut self) -> Out<'_> {
        Out {
            buf: &mut self.out,
            version: self.version,
        }
    }

    /// Reads and handles every whole packet the socket has; `Err` ends the connection
    /// with that reason ("closed" when the client hung up cleanly).
    pub(crate) fn on_readable(&mut self, buf: &mut [u8]) -> Result<(), String> {
        // Whatever the client sends may concern its stream.
        self.reclaim_intake();
        loop {
            match self.sock.read_with_fds(buf, &mut self.fds, &mut self.creds) {
                Ok(0) => {
                    return Err(if self.reader.at_boundary() {
                        "closed".into()
                    } else {
                        "closed inside a packet".into()
                    });
                }
                Ok(n) => self.on_bytes(&buf[..n])?,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read: {e}")),
            }
            if self.closing {
                break;
            }
        }
        if self.fds.len() > 8 {
            return Err("sent file descriptors no command claimed".into());
        }
        Ok(())
    }

    /// Services the streams (`due`: some playback stream, of any client, reached its
    /// request threshold in this pass), forwards queued messages and writes what the
    /// socket takes; `Err` ends the connection with that reason.
    pub(crate) fn pump(&mut self, due: bool) -> Result<(), String> {
        self.reclaim_intake();
        self.service(due);
        if !self.out.is_empty() || self.held_releases.len() >= MAX_HELD_RELEASES {
            self.send_held_releases();
        }
        self.flush_out()?;
        self.lend_intake();
        if self.closing {
            return Err("killed".into());
        }
        if self.out.len() > MAX_OUT {
            return Err("client does not read its socket".into());
        }
        Ok(())
    }

    /// Logs why the connection ended and removes its streams and client object.
    pub(crate) fn close(&mut self, why: &str) {
        match why {
            "closed" => tracing::debug!("pulse client {} closed the connection", self.client),
            "panic" => tracing::error!(
                "pulse client {}: internal error; disconnecting",
                self.client
            ),
            _ => tracing::info!("pulse client {}: {why}; disconnecting", self.client),
        }
        self.cleanup();
    }

    /// Writes what is queued for the client, holding the socket against the RT thread's
    /// requests ([`RtWire`]) while any of it is left.
    pub(crate) fn flush_out(&mut self) -> Result<(), String> {
        let Some(wire) = self.wire.clone() else {
            return self.write_out();
        };
        match wire.acquire() {
            Err(e) => return Err(e.to_string()),
            Ok(Some(rest)) => {
                // The rest of a request the RT thread tore goes first.
                if self.srb_active() {
                    self.sock_tail.splice(0..0, rest);
                } else {
                    for (off, ..) in self.out_fds.iter_mut() {
                        *off += rest.len();
                    }
                    self.out.splice(0..0, rest);
                }
            }
            Ok(None) => {}
        }
        let r = self.write_out();
        // With the srbchannel the RT thread writes its requests into the ring, so it
        // waits for both: what the socket still holds, and a packet the full ring took
        // only part of.
        if self.sock_tail.is_empty() && self.out.is_empty() {
            wire.release();
        }
        r
    }

    pub(crate) fn write_out(&mut self) -> Result<(), String> {
        if self.srb_active() {
            while !self.sock_tail.is_empty() {
                match self.sock.write(&self.sock_tail) {
                    Ok(0) => return Err("socket closed".into()),
                    Ok(n) => {
                        self.sock_tail.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(format!("write: {e}")),
                }
            }
            let srb = self.srb.as_mut().expect("active");
            let n = srb.write(&self.out)?;
            self.out.drain(..n);
            return Ok(());
        }
        while !self.out.is_empty() {
            let r = match self.out_fds.front() {
                // A packet with descriptors goes alone in one sendmsg, the descriptors
                // with its first byte, as libpulse's pstream expects.
                Some((0, len, fds)) => self.sock.send_with_fds(&self.out[..*len], fds),
                Some((off, ..)) => self.sock.write(&self.out[..*off]),
                None => self.sock.write(&self.out),
            };
            match r {
                Ok(0) => return Err("socket closed".into()),
                Ok(n) => {
                    self.out.drain(..n);
                    // The descriptors left with the first byte; the rest of that
                    // packet goes as plain bytes.
                    if let Some((0, ..)) = self.out_fds.front() {
                        self.out_fds.pop_front();
                    }
                    for (off, ..) in self.out_fds.iter_mut() {
                        *off -= n;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        Ok(())
    }

    pub(crate) fn on_bytes(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            let (used, packet) = self.reader.feed(bytes).map_err(|e| e.to_string())?;
            bytes = &bytes[used..];
            if let Some(p) = packet {
                self.on_packet(p)?;
            }
        }
        Ok(())
    }

    pub(crate) fn on_packet(&mut self, packet: Packet) -> Result<(), String> {
        match packet {
            Packet::Control(data) => {
                // Whatever this command answers comes after the releases of the blocks
                // sent before it (a client may wait for those before it reuses them).
                self.send_held_releases();
                self.on_control(&data)?
            }
            Packet::Memblock {
                channel,
                offset,
                seek,
                data,
            } => {
                if !self.authed {
                    return Err("audio before AUTH".into());
                }
                let mut out = Out {
                    buf: &mut self.out,
                    version: self.version,
                };
                match self.playback.get_mut(&channel) {
                    Some(p) => p.write(seek, offset, &data, &mut out),
                    None if self.uploads.contains_key(&channel) => {
                        let u = self.uploads.get_mut(&channel).expect("checked");
                        let room = u.length - u.data.len();
                        u.data.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    None => tracing::debug!(
                        "pulse client {}: audio for unknown channel {channel} dropped",
                        self.client
                    ),
                }
            }
            Packet::ShmRef {
                channel,
                offset,
                seek,
                block_id,
                shm_id,
                index,
                length,
                memfd,
            } => {
                // One buffer for every block: no allocation per block.
                let mut data = std::mem::take(&mut self.shm_scratch);
                if memfd {
                    self.last_shm_id = Some(shm_id);
                }
                self.read_shm(shm_id, index, length, memfd, &mut data);
                // The bytes are copied out: the block can go back to the client, with
                // the next message it gets.
                self.held_releases.push(block_id);
                let mut out = Out {
                    buf: &mut self.out,
                    version: self.version,
                };
                match self.playback.get_mut(&channel) {
                    Some(p) => p.write(seek, offset, &data, &mut out),
                    None if self.uploads.contains_key(&channel) => {
                        let u = self.uploads.get_mut(&channel).expect("checked");
                        let room = u.length - u.data.len();
                        u.data.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    None => {}
                }
                self.shm_scratch = data;
            }
            Packet::ShmRelease(block_id) => {
                // An id that is not an outstanding block of ours changes nothing.
                if let Some(pool) = self.pool.as_mut() {
                    pool.release(block_id);
                }
            }
            // We copy the client's blocks as they arrive: nothing to give back.
            Packet::ShmRevoke(_) => {}
        }
        Ok(())
    }

    /// Services streams and forwards what other threads queued for this client.
    pub(crate) fn service(&mut self, due: bool) {
        let msgs: Vec<ConnMsg> = self
            .handle
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
            .collect();
        for m in msgs {
            match m {
                ConnMsg::Event(e) => self.out().command(&Command::SubscribeEvent(e)),
                ConnMsg::Kill => self.closing = true,
                ConnMsg::KillStream(node) => self.kill_stream(node),
                ConnMsg::Moved(node) => self.send_moved(node),
                ConnMsg::NodeSuspended(node, on) => self.tell_suspended(Some(node), on),
                ConnMsg::DevicesSuspended(on) => self.tell_suspended(None, on),
                ConnMsg::DeviceRestoreEvent(kind, index) => self.extension_event(
                    crate::modules::DEVICE_RESTORE_MODULE,
                    crate::ext::devrestore::MODULE_NAME,
                    &[crate::ext::devrestore::EVENT, kind, index],
                ),
                ConnMsg::ModuleLoaded(seq, r) => self.module_loaded(seq, r),
                ConnMsg::RestoreEvent => self.extension_event(
                    crate::modules::RESTORE_MODULE,
                    crate::ext::restore::MODULE_NAME,
                    &[crate::ext::restore::sub::EVENT],
                ),
            }
        }
        let lone = self.intake_possible();
        let mut out = Out {
            buf: &mut self.out,
            version: self.version,
        };
        for p in self.playback.values_mut() {
            p.service(&mut out, due, lone);
        }
        for r in self.record.values_mut() {
            r.service(&mut out, self.pool.as_mut());
        }
        if let Some(pool) = self
            .pool
            .as_mut()
            .filter(|p| p.inline_full > 0 && !p.exhausted)
        {
            pool.exhausted = true;
            tracing::warn!(
                "pulse client {}: holds all {} blocks of its memfd record pool without \
                 releasing them; its record audio goes inline while it does",
                self.client,
                crate::io::export::SLOTS
            );
        }
    }

    pub(crate) fn reader_shm(&self) -> bool {
        self.reader.shm_enabled()
    }

    pub(crate) fn drop_stream(&self, node: NodeId) {
        if let Err(e) = self.srv.engine.remove_node(node) {
            tracing::warn!("pulse: removing stream node {node}: {e}");
        }
        self.srv.lock().streams.remove(&node);
    }

    pub(crate) fn cleanup(&mut self) {
        self.reclaim_intake();
        if let Some(w) = &self.wire {
            w.close();
        }
        let nodes: Vec<NodeId> = self
            .playback
            .values()
            .map(|p| p.node)
            .chain(self.record.values().map(|r| r.node))
            .collect();
        self.playback.clear();
        self.record.clear();
        for n in &nodes {
            self.drop_stream(*n);
        }
        let name = self
            .srv
            .lock()
            .clients
            .remove(&self.client)
            .map(|c| c.name)
            .unwrap_or_default();
        self.srv.broadcast(Fac::Client, Ev::Removed, self.client);
        if self.shm_bytes > 0 {
            tracing::debug!(
                "pulse client {}: {} bytes of audio came by memfd",
                self.client,
                self.shm_bytes
            );
        }
        if let Some(p) = self.pool.as_ref().filter(|p| p.blocks > 0) {
            tracing::debug!(
                "pulse client {}: memfd pool carried {} blocks ({} bytes) of record audio; \
                 {} went inline while the client held every block; at most {} held at once",
                self.client,
                p.blocks,
                p.bytes,
                p.inline_full,
                p.peak_held
            );
        }
        if let Some(s) = self.srb.as_ref().filter(|s| s.active) {
            tracing::debug!(
                "pulse client {}: srbchannel carried {} bytes in, {} bytes out ({} requests written by the RT thread)",
                self.client,
                s.bytes_in,
                s.bytes_out(),
                self.wire.as_ref().map_or(0, |w| w.srb_sent())
            );
        }
        if nodes.is_empty() {
            tracing::debug!("pulse client {} ({name}) left", self.client);
        } else {
            tracing::info!(
                "pulse client {} ({name}) left; {} stream(s) removed",
                self.client,
                nodes.len()
            );
        }
    }
}
