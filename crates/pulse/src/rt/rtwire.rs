//! Requests sent by the RT thread itself: a playback stream's next REQUEST, armed by
//! the connection thread and written to the client's socket (or, once the client took
//! the srbchannel, into its ring) by the RT thread in the cycle the stream has played
//! far enough for it.
//!
//! Why: with the connection thread sending every REQUEST, each request cost two
//! wakeups (the RT side's bell, then the client's data). A REQUEST is 40 bytes known in
//! advance but for its length, so the RT thread sends it with one non-blocking `send`
//! and the connection thread wakes only for the answer.
//!
//! Two rules keep this safe:
//!
//! - **The socket has one writer at a time** ([`RtWire`]): the RT thread writes only
//!   when the connection thread holds no unsent output for the socket (nor for the
//!   srbchannel's ring, once that carries the output), by taking a try-lock it never
//!   waits for. When it cannot (or should not: see
//!   `Bell::may_send`), it rings the bell as before and the connection thread sends the
//!   request: the RT thread never blocks, never spins.
//! - **The accounts stay with the connection thread** ([`ArmedRequest`]): it arms a
//!   request with its own view (bytes missing at a read position), the RT thread only
//!   adds what it consumed since, and the connection thread takes the result back
//!   (disarming) before it changes anything about the stream. A request the RT thread
//!   sent is accounted exactly as if the connection thread had sent it at that moment.
//!   While the RT thread also takes the answers in ([`crate::rt::intake`]) it arms each next
//!   request itself, a period the connection gave after the last; the connection then
//!   takes back the sum of all of them.

use crate::io::srb::SrbOut;
use rustix::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};
use std::sync::{Arc, OnceLock};

/// Bytes of a REQUEST packet: the 20-byte descriptor and four tagged u32s.
pub const REQUEST_LEN: usize = 40;
/// PA_COMMAND_REQUEST.
const COMMAND_REQUEST: u32 = 61;
/// Tag type of a u32 in a tagstruct ('L').
const TAG_U32: u8 = b'L';

/// The REQUEST packet for `channel` asking for `length` bytes, as the wire format has it
/// (a control packet with tag -1), built without allocating.
pub fn request_packet(channel: u32, length: u32) -> [u8; REQUEST_LEN] {
    let mut p = [0u8; REQUEST_LEN];
    // Descriptor: payload length, channel (-1: control), offset (2 × u32), flags.
    p[0..4].copy_from_slice(&20u32.to_be_bytes());
    p[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    for (i, v) in [COMMAND_REQUEST, u32::MAX, channel, length]
        .into_iter()
        .enumerate()
    {
        let at = 20 + 5 * i;
        p[at] = TAG_U32;
        p[at + 1..at + 5].copy_from_slice(&v.to_be_bytes());
    }
    p
}

const FREE: u32 = 0;
const RT: u32 = 1;
const IO: u32 = 2;
/// The RT thread's write went out in part; the rest must go before anything else.
const TORN: u32 = 3;
const CLOSED: u32 = 4;

/// What became of the RT thread's attempt to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The whole packet is on the socket.
    Whole,
    /// Part of it is; the connection thread sends the rest before its own output.
    Torn,
    /// Nothing was sent: the socket was busy, full or gone.
    No,
}

/// The wire was closed: the connection is going away and its socket with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the connection's socket is closing")]
pub struct WireClosed;

/// A client's unix socket as the RT thread may write to it (see the module docs).
#[derive(Debug)]
pub struct RtWire {
    /// A duplicate of the connection's socket, so its lifetime is the wire's own.
    fd: OwnedFd,
    owner: AtomicU32,
    /// The unsent tail of a torn packet, 8 bytes per word, and its length.
    torn: [AtomicU64; REQUEST_LEN.div_ceil(8)],
    torn_len: AtomicU32,
    /// The srbchannel's ring once it carries the connection's output: requests go
    /// there instead of the socket.
    srb: OnceLock<Arc<SrbOut>>,
    /// Requests the RT thread wrote into the srbchannel's ring (logged at the end).
    srb_sent: AtomicU64,
}

impl RtWire {
    /// A wire over a duplicate of `sock` (close-on-exec).
    pub fn new(sock: impl AsFd) -> std::io::Result<RtWire> {
        let fd = rustix::io::fcntl_dupfd_cloexec(sock, 0)?;
        Ok(RtWire {
            fd,
            owner: AtomicU32::new(FREE),
            torn: Default::default(),
            torn_len: AtomicU32::new(0),
            srb: OnceLock::new(),
            srb_sent: AtomicU64::new(0),
        })
    }

    /// Requests the RT thread wrote into the srbchannel's ring.
    pub fn srb_sent(&self) -> u64 {
        self.srb_sent.load(Relaxed)
    }

    /// Connection side: the srbchannel carries the output from now on; so do requests.
    pub fn use_srb(&self, out: Arc<SrbOut>) {
        let _ = self.srb.set(out);
    }

    /// Whether the srbchannel carries the output (a packet then goes whole or not at
    /// all).
    pub fn on_srb(&self) -> bool {
        self.srb.get().is_some()
    }

    /// RT side: sends `packet` if nobody else is writing to the socket (or the ring).
    /// Never blocks and never waits for the lock; never tears a packet into the ring.
    pub fn try_send(&self, packet: &[u8]) -> Sent {
        if self
            .owner
            .compare_exchange(FREE, RT, Acquire, Relaxed)
            .is_err()
        {
            return Sent::No;
        }
        if let Some(srb) = self.srb.get() {
            let whole = srb.write_whole(packet);
            self.owner.store(FREE, Release);
            if !whole {
                return Sent::No;
            }
            self.srb_sent.fetch_add(1, Relaxed);
            return Sent::Whole;
        }
        use rustix::net::{SendFlags, send};
        let r = send(&self.fd, packet, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
        match r {
            Ok(n) if n >= packet.len() => {
                self.owner.store(FREE, Release);
                Sent::Whole
            }
            Ok(n) if n > 0 => {
                let rest = &packet[n..];
                for (i, word) in self.torn.iter().enumerate() {
                    let mut b = [0u8; 8];
                    let chunk = rest.get(i * 8..).unwrap_or(&[]);
                    let k = chunk.len().min(8);
                    b[..k].copy_from_slice(&chunk[..k]);
                    word.store(u64::from_ne_bytes(b), Relaxed);
                }
                self.torn_len.store(rest.len() as u32, Relaxed);
                self.owner.store(TORN, Release);
                Sent::Torn
            }
            _ => {
                self.owner.store(FREE, Release);
                Sent::No
            }
        }
    }

    /// Connection side: takes the socket before writing to it, waiting out the RT
    /// thread's single `send` if one is under way. Returns the unsent tail of a packet
    /// the RT thread tore, which must be written before anything else; `Err` once the
    /// wire is closed.
    pub fn acquire(&self) -> Result<Option<Vec<u8>>, WireClosed> {
        loop {
            match self.owner.compare_exchange(FREE, IO, Acquire, Acquire) {
                Ok(_) | Err(IO) => return Ok(None),
                Err(CLOSED) => return Err(WireClosed),
                Err(TORN) => {
                    if self
                        .owner
                        .compare_exchange(TORN, IO, Acquire, Relaxed)
                        .is_ok()
                    {
                        let n = self.torn_len.load(Relaxed) as usize;
                        let mut rest = Vec::with_capacity(n);
                        for w in &self.torn {
                            rest.extend_from_slice(&w.load(Relaxed).to_ne_bytes());
                        }
                        rest.truncate(n);
                        return Ok(Some(rest));
                    }
                }
                // The RT thread is inside one non-blocking send.
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// Connection side: gives the socket back once it has no output of its own left.
    pub fn release(&self) {
        let _ = self.owner.compare_exchange(IO, FREE, Release, Relaxed);
    }

    /// Connection side: no more RT writes (the connection is closing); shuts the socket
    /// down so the client sees the end now, not when the last duplicate is dropped.
    pub fn close(&self) {
        let _ = self.acquire();
        self.owner.store(CLOSED, Release);
        let _ = rustix::net::shutdown(&self.fd, rustix::net::Shutdown::Both);
    }
}

const IDLE: u32 = 0;
const ARMED: u32 = 1;
const SENDING: u32 = 2;
const SENT: u32 = 3;

/// A playback stream's next REQUEST, armed by the connection thread for the RT thread.
#[derive(Debug, Default)]
pub struct ArmedRequest {
    state: AtomicU32,
    channel: AtomicU32,
    /// Send once the stream's `consumed` count reaches this.
    at: AtomicU64,
    /// The connection's view when arming: bytes missing at `consumed == base_consumed`.
    base_consumed: AtomicU64,
    base_bytes: AtomicI64,
    frame_bytes: AtomicU32,
    /// Frames between two requests when the RT thread re-arms the next one itself
    /// (0: the connection re-arms): while the RT thread also takes the answers in
    /// ([`crate::rt::intake`]), the connection does not wake to do it.
    period: AtomicU64,
    /// The period while the client answers late (0: the same).
    late_period: AtomicU64,
    /// What was sent since the arm: the `consumed` count of the last request, the
    /// bytes of all of them and how many.
    sent_consumed: AtomicU64,
    sent_len: AtomicU64,
    sent_count: AtomicU32,
    sent_ns: AtomicU64,
    /// The request claimed by `due` and not yet sent: its `consumed` count and length.
    claimed_consumed: AtomicU64,
    claimed_len: AtomicU32,
}

/// Frames between two requests the RT thread arms itself: normally, and while the
/// client answers late (so it is asked sooner and keeps more queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Periods {
    /// The period while the client keeps up (0: the connection arms each request).
    pub normal: u64,
    /// The period after a late answer or an underrun.
    pub late: u64,
}

impl Periods {
    /// The connection re-arms every request.
    pub const NONE: Periods = Periods { normal: 0, late: 0 };
}

/// A request the RT thread sent: the `consumed` count it covers and its length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentRequest {
    /// Frames consumed when the last of them was sent.
    pub consumed: u64,
    /// Bytes requested, all of them together.
    pub length: u64,
    /// How many requests went out.
    pub count: u32,
    /// CLOCK_MONOTONIC ns when the last one was sent.
    pub at_ns: u64,
}

impl ArmedRequest {
    /// Connection side (after [`ArmedRequest::disarm`]): send a REQUEST on `channel`
    /// when `consumed` reaches `at`, for `base_bytes` plus what was consumed past
    /// `base_consumed` (`frame_bytes` per frame). `base_bytes` is negative when the
    /// client wrote more than it was asked for. With a period the RT thread arms each
    /// next request itself, that many frames after the last, for what was consumed
    /// since (a request asks for everything missing, so nothing is left over).
    pub fn arm(
        &self,
        channel: u32,
        at: u64,
        base_consumed: u64,
        base_bytes: i64,
        frame_bytes: u32,
        period: Periods,
    ) {
        self.channel.store(channel, Relaxed);
        self.at.store(at, Relaxed);
        self.base_consumed.store(base_consumed, Relaxed);
        self.base_bytes.store(base_bytes, Relaxed);
        self.frame_bytes.store(frame_bytes, Relaxed);
        self.period.store(period.normal, Relaxed);
        self.late_period.store(period.late, Relaxed);
        self.sent_len.store(0, Relaxed);
        self.sent_count.store(0, Relaxed);
        self.state.store(ARMED, Release);
    }

    /// Connection side: nothing is armed any more; returns what the RT thread sent
    /// since the arm, if anything. Waits out a send under way.
    pub fn disarm(&self) -> Option<SentRequest> {
        loop {
            match self.state.load(Acquire) {
                IDLE => return None,
                SENDING => std::thread::yield_now(),
                s => {
                    if self
                        .state
                        .compare_exchange(s, IDLE, AcqRel, Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    let count = self.sent_count.load(Relaxed);
                    return (count > 0).then(|| SentRequest {
                        consumed: self.sent_consumed.load(Relaxed),
                        length: self.sent_len.load(Relaxed),
                        count,
                        at_ns: self.sent_ns.load(Relaxed),
                    });
                }
            }
        }
    }

    /// RT side: if a request is armed and `consumed` reached its point, claims it and
    /// returns the packet to send. Follow with [`ArmedRequest::sent`] or
    /// [`ArmedRequest::unsent`].
    pub fn due(&self, consumed: u64) -> Option<[u8; REQUEST_LEN]> {
        if self.state.load(Acquire) != ARMED || consumed < self.at.load(Relaxed) {
            return None;
        }
        self.state
            .compare_exchange(ARMED, SENDING, AcqRel, Relaxed)
            .ok()?;
        let extra = consumed.saturating_sub(self.base_consumed.load(Relaxed));
        let played = extra.saturating_mul(self.frame_bytes.load(Relaxed) as u64);
        let bytes = self
            .base_bytes
            .load(Relaxed)
            .saturating_add(played.min(i64::MAX as u64) as i64);
        let length = bytes.clamp(0, u32::MAX as i64) as u32;
        self.claimed_consumed.store(consumed, Relaxed);
        self.claimed_len.store(length, Relaxed);
        Some(request_packet(self.channel.load(Relaxed), length))
    }

    /// CLOCK_MONOTONIC ns when the RT thread last sent a request (0: never).
    pub fn last_sent_ns(&self) -> u64 {
        self.sent_ns.load(Relaxed)
    }

    /// RT side: the claimed request went out; re-armed for the next one if the
    /// connection gave a period (the late one while the client answers `late`).
    pub fn sent(&self, late: bool) {
        let consumed = self.claimed_consumed.load(Relaxed);
        self.sent_consumed.store(consumed, Relaxed);
        self.sent_len
            .fetch_add(self.claimed_len.load(Relaxed) as u64, Relaxed);
        self.sent_count.fetch_add(1, Relaxed);
        self.sent_ns.store(quaver_rt::monotonic_ns(), Relaxed);
        let mut period = self.period.load(Relaxed);
        if late && period > 0 {
            period = self.late_period.load(Relaxed).clamp(1, period);
        }
        if period > 0 {
            self.base_consumed.store(consumed, Relaxed);
            self.base_bytes.store(0, Relaxed);
            self.at.store(consumed.saturating_add(period), Relaxed);
            self.state.store(ARMED, Release);
        } else {
            self.state.store(SENT, Release);
        }
    }

    /// RT side: the claimed request did not go out; the connection thread sends it
    /// (and whatever went out before it stays accounted).
    pub fn unsent(&self) {
        self.state.store(
            if self.sent_count.load(Relaxed) > 0 {
                SENT
            } else {
                IDLE
            },
            Release,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Out, Packet, PacketReader};
    use pulseaudio::protocol::{self as pa, Command};
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_request_packet_is_what_the_encoder_writes() {
        let mut buf = Vec::new();
        let mut out = Out {
            buf: &mut buf,
            version: pa::MAX_VERSION,
        };
        out.command(&Command::Request(pa::Request {
            channel: 7,
            length: 0x0102_0304,
        }));
        assert_eq!(buf.as_slice(), &request_packet(7, 0x0102_0304)[..]);
        let (used, packet) = PacketReader::default().feed(&buf).unwrap();
        assert_eq!(used, REQUEST_LEN);
        assert!(matches!(packet, Some(Packet::Control(_))));
    }

    #[test]
    fn an_armed_request_covers_what_was_consumed_since_it_was_armed() {
        let rq = ArmedRequest::default();
        assert!(rq.due(1_000).is_none(), "nothing armed");
        // 100 bytes missing at consumed 50; send at 80; 4 bytes a frame.
        rq.arm(3, 80, 50, 100, 4, Periods::NONE);
        assert!(rq.due(79).is_none(), "not yet");
        let p = rq.due(96).expect("due");
        assert_eq!(p, request_packet(3, 100 + 46 * 4));
        assert!(rq.due(200).is_none(), "claimed once");
        rq.sent(false);
        assert_eq!(
            rq.disarm(),
            Some(SentRequest {
                consumed: 96,
                length: 284,
                count: 1,
                at_ns: rq.sent_ns.load(Relaxed),
            })
        );
        assert_eq!(rq.disarm(), None, "taken back once");
        // A client that wrote ahead of its requests gets that much less.
        rq.arm(3, 80, 50, -40, 4, Periods::NONE);
        assert_eq!(rq.due(80).unwrap(), request_packet(3, 30 * 4 - 40));
        rq.unsent();
        // Disarmed before it was due: nothing goes out.
        rq.arm(3, 80, 50, 100, 4, Periods::NONE);
        assert_eq!(rq.disarm(), None);
        assert!(rq.due(100).is_none());
        // Claimed but not sent: the connection thread sends it itself.
        rq.arm(3, 80, 50, 100, 4, Periods::NONE);
        assert!(rq.due(100).is_some());
        rq.unsent();
        assert_eq!(rq.disarm(), None);
    }

    #[test]
    fn with_a_period_the_rt_side_rearms_and_the_connection_gets_the_sum() {
        let rq = ArmedRequest::default();
        // 100 bytes missing at consumed 50; first at 80, then every 40 frames.
        rq.arm(
            3,
            80,
            50,
            100,
            4,
            Periods {
                normal: 40,
                late: 10,
            },
        );
        assert_eq!(rq.due(84).unwrap(), request_packet(3, 100 + 34 * 4));
        rq.sent(false);
        assert!(rq.due(123).is_none(), "next one at 124");
        assert_eq!(rq.due(130).unwrap(), request_packet(3, 46 * 4));
        // The client answered late: the next one comes sooner.
        rq.sent(true);
        assert!(rq.due(139).is_none(), "next one at 140");
        assert_eq!(rq.due(140).unwrap(), request_packet(3, 10 * 4));
        rq.sent(false);
        // The fourth cannot go out: the connection thread will send it, and the three
        // before it stay accounted.
        assert_eq!(rq.due(180).unwrap(), request_packet(3, 40 * 4));
        rq.unsent();
        assert!(rq.due(300).is_none(), "not re-armed after an unsent one");
        let sent = rq.disarm().expect("three went out");
        assert_eq!(
            (sent.consumed, sent.length, sent.count),
            (140, 236 + 184 + 40, 3)
        );
        // Everything missing at 50 plus everything consumed to 140 was asked for.
        assert_eq!(sent.length as i64, 100 + (140 - 50) * 4);
        assert_eq!(rq.disarm(), None);
    }

    #[test]
    fn the_rt_side_writes_only_while_the_connection_holds_no_output() {
        let (ours, mut client) = UnixStream::pair().unwrap();
        let wire = RtWire::new(&ours).unwrap();
        assert_eq!(wire.try_send(&request_packet(1, 10)), Sent::Whole);
        assert_eq!(wire.acquire(), Ok(None));
        assert_eq!(wire.try_send(&request_packet(1, 20)), Sent::No, "held");
        wire.release();
        assert_eq!(wire.try_send(&request_packet(1, 30)), Sent::Whole);
        let mut got = [0u8; 2 * REQUEST_LEN];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got[..REQUEST_LEN], &request_packet(1, 10)[..]);
        assert_eq!(&got[REQUEST_LEN..], &request_packet(1, 30)[..]);
        wire.close();
        assert_eq!(wire.acquire(), Err(WireClosed));
        assert_eq!(wire.try_send(&request_packet(1, 40)), Sent::No, "closed");
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "the client sees the end");
    }

    #[test]
    fn with_the_srbchannel_requests_go_whole_into_its_ring_or_not_at_all() {
        use crate::io::srb::Srb;
        let (ours, client) = UnixStream::pair().unwrap();
        client.set_nonblocking(true).unwrap();
        let mut srb = Srb::new(1, 2).unwrap();
        let wire = RtWire::new(&ours).unwrap();
        wire.use_srb(srb.out());
        let mut at = 0;
        assert_eq!(wire.try_send(&request_packet(1, 10)), Sent::Whole);
        assert_eq!(wire.srb_sent(), 1);
        assert_eq!(srb.client_read(&mut at), request_packet(1, 10));
        assert!(
            (&client).read(&mut [0u8; 8]).is_err(),
            "nothing on the socket"
        );
        // Held by the connection thread: nothing.
        assert_eq!(wire.acquire(), Ok(None));
        assert_eq!(wire.try_send(&request_packet(1, 20)), Sent::No);
        // A ring with room for less than a packet takes none of it, and the
        // connection thread gets the socket back untorn.
        let fill = vec![7u8; srb.room() - (REQUEST_LEN - 1)];
        assert_eq!(srb.write(&fill).unwrap(), fill.len());
        wire.release();
        assert_eq!(wire.try_send(&request_packet(1, 30)), Sent::No);
        assert_eq!(srb.room(), REQUEST_LEN - 1);
        assert_eq!(wire.acquire(), Ok(None));
        assert_eq!(srb.client_read(&mut at), fill);
        // A packet that crosses the ring's end goes in two pieces, read back whole.
        let fill = vec![8u8; srb.room() - 20 - at];
        assert_eq!(srb.write(&fill).unwrap(), fill.len());
        assert_eq!(srb.client_read(&mut at), fill);
        assert_eq!(srb.room() - at, 20, "20 bytes before the end");
        wire.release();
        assert_eq!(wire.try_send(&request_packet(1, 40)), Sent::Whole);
        assert_eq!(srb.client_read(&mut at), request_packet(1, 40));
    }

    #[test]
    fn a_full_socket_leaves_the_request_to_the_connection_thread() {
        let (ours, _client) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let wire = RtWire::new(&ours).unwrap();
        let mut whole = 0;
        let mut last = Sent::Whole;
        for _ in 0..1_000_000 {
            last = wire.try_send(&request_packet(1, 1));
            if last != Sent::Whole {
                break;
            }
            whole += 1;
        }
        assert!(whole > 0);
        // A unix stream socket takes a small packet whole or not at all; a torn one is
        // handed over whole to the connection thread.
        match last {
            Sent::No => assert_eq!(wire.acquire(), Ok(None)),
            Sent::Torn => {
                let rest = wire.acquire().unwrap().expect("tail");
                assert!(!rest.is_empty() && rest.len() < REQUEST_LEN);
            }
            Sent::Whole => panic!("a socket that never fills"),
        }
    }
}
