//! The tunnel's PulseAudio native-protocol client: as much of a libpulse client as a
//! tunnel needs — AUTH with the cookie, SET_CLIENT_NAME, one playback or record stream —
//! over a TCP connection, built from the server side's own wire code (the framing of
//! [`crate::wire`] and the `pulseaudio` crate's commands and replies, which the server
//! side decodes requests and encodes replies with).
//!
//! Connecting and the handshake run on the tunnel's network thread, never on the I/O
//! thread that serves every client: each step waits in `poll` on the socket and the
//! tunnel's bell, bounded by [`HANDSHAKE_TIMEOUT`], and gives up as soon as the tunnel
//! is told to stop ([`Interrupt`]). After it the network thread waits in `poll` and
//! calls [`Remote::read_some`] only when the socket is readable.

use crate::rt::transport::Bell;
use crate::wire::{Descriptor, Packet, PacketReader};
use pulseaudio::protocol::stream::{BufferAttr, StreamFlags};
use pulseaudio::protocol::{
    self as pa, ChannelMap as PaMap, Command, CommandReply, PulseError, SampleSpec, TagStructReader,
};
use rustix::event::{PollFd, PollFlags};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bound on connecting and on each answer of the handshake.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on one write to the remote: a remote that stops reading for this long is gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest memblock the tunnel sends in one packet.
pub(super) const MAX_BLOCK: usize = 64 * 1024;

/// Why the tunnel cannot talk to its remote.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    /// TCP connect failed or timed out.
    #[error("cannot connect to {addr}: {err}")]
    Connect {
        /// The remote.
        addr: SocketAddr,
        /// What connect said.
        err: std::io::Error,
    },
    /// The remote refused the cookie (or this address).
    #[error("{0} refused authentication (AUTH answered {1:?}): wrong cookie?")]
    AuthRefused(SocketAddr, PulseError),
    /// The remote answered a request with an error.
    #[error("{what} refused by the remote: {err:?}")]
    Refused {
        /// The request.
        what: &'static str,
        /// Its error.
        err: PulseError,
    },
    /// Reading or writing the socket failed, or the remote closed it.
    #[error("connection lost: {0}")]
    Io(#[from] std::io::Error),
    /// The remote accepted the connection and did not answer a request in time.
    #[error("no answer to {0} within {HANDSHAKE_TIMEOUT:?}")]
    Timeout(&'static str),
    /// The remote sent something this client cannot frame or decode.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server's name did not resolve.
    #[error("{0}")]
    Resolve(String),
    /// The tunnel was unloaded while it connected.
    #[error("stopped while connecting (the tunnel was unloaded)")]
    Stopped,
}

/// What ends a wait of the handshake early: the tunnel's stop flag, with the bell that
/// is rung when it is set.
pub(super) struct Interrupt<'a> {
    pub(super) stop: &'a AtomicBool,
    pub(super) bell: &'a Bell,
}

impl Interrupt<'_> {
    /// Waits until `fd` is ready for `flags` or `deadline` passes (false); stops early
    /// with [`TunnelError::Stopped`].
    fn wait(
        &self,
        fd: impl AsFd,
        flags: PollFlags,
        deadline: Instant,
    ) -> Result<bool, TunnelError> {
        loop {
            if self.stop.load(Ordering::Acquire) {
                return Err(TunnelError::Stopped);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            let t = rustix::time::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as i64,
            };
            let mut fds = [
                PollFd::new(&fd, flags),
                PollFd::new(self.bell, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, Some(&t)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(TunnelError::Io(e.into())),
            }
            let ready = !fds[0].revents().is_empty();
            self.bell.take();
            if self.stop.load(Ordering::Acquire) {
                return Err(TunnelError::Stopped);
            }
            if ready {
                return Ok(true);
            }
        }
    }
}

/// `connect` to `addr` within [`HANDSHAKE_TIMEOUT`], interruptible: a non-blocking
/// connect waited for in `poll` (what `TcpStream::connect_timeout` does, plus the bell).
fn connect(addr: SocketAddr, intr: &Interrupt<'_>) -> Result<TcpStream, TunnelError> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let err = |err: std::io::Error| TunnelError::Connect { addr, err };
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| err(e.into()))?;
    match rustix::net::connect(&fd, &addr) {
        Ok(()) => {}
        Err(rustix::io::Errno::INPROGRESS | rustix::io::Errno::INTR) => {
            let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
            if !intr.wait(&fd, PollFlags::OUT, deadline)? {
                return Err(err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connection timed out",
                )));
            }
            match rustix::net::sockopt::socket_error(&fd) {
                Ok(Ok(())) => {}
                Ok(Err(e)) | Err(e) => return Err(err(e.into())),
            }
        }
        Err(e) => return Err(err(e.into())),
    }
    let sock = TcpStream::from(fd);
    sock.set_nonblocking(false)?;
    Ok(sock)
}

/// What the stream is.
#[derive(Debug, Clone)]
pub(super) enum Direction {
    /// A playback stream on the remote's sink (its default: `None`).
    Play(Option<String>),
    /// A record stream from the remote's source (its default: `None`).
    Record(Option<String>),
}

/// The stream the tunnel opens on the remote.
#[derive(Debug, Clone)]
pub(super) struct StreamWant {
    pub(super) direction: Direction,
    pub(super) spec: SampleSpec,
    pub(super) map: PaMap,
    /// Playback: the remote's target buffer; record: the fragment size, in bytes.
    pub(super) bytes: u32,
    /// `media.name` of the stream.
    pub(super) name: String,
}

/// An authenticated connection with its one stream.
pub(super) struct Remote {
    pub(super) sock: TcpStream,
    reader: PacketReader,
    version: u16,
    seq: u32,
    /// The stream's channel.
    pub(super) channel: u32,
    /// The stream's index on the remote (named in its events).
    pub(super) index: u32,
    /// Bytes the remote asked for and has not been sent yet (playback).
    pub(super) requested: u64,
    /// Packets read but not handled yet.
    pending: VecDeque<Packet>,
    buf: Vec<u8>,
}

/// An event the network thread acts on.
#[derive(Debug)]
pub(super) enum Event {
    /// Audio of the record stream.
    Audio(Vec<u8>),
    /// The remote killed the stream (its sink or source went away).
    Killed,
    /// Anything else (Started, Underflow, ...): nothing to do.
    Other,
}

impl Remote {
    /// Connects to `addr`, authenticates with `cookie` and opens the stream; every
    /// step bounded by [`HANDSHAKE_TIMEOUT`] and ended early by `intr`.
    pub(super) fn open(
        addr: SocketAddr,
        cookie: &[u8],
        want: &StreamWant,
        intr: &Interrupt<'_>,
    ) -> Result<Remote, TunnelError> {
        let sock = connect(addr, intr)?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let mut r = Remote {
            sock,
            reader: PacketReader::new(),
            version: pa::MAX_VERSION,
            seq: 0,
            channel: 0,
            index: 0,
            requested: 0,
            pending: VecDeque::new(),
            buf: vec![0; 64 * 1024],
        };
        let auth = Command::Auth(pa::AuthParams {
            version: pa::MAX_VERSION,
            supports_shm: false,
            supports_memfd: false,
            cookie: cookie.to_vec(),
        });
        let reply: pa::AuthReply = r.ask(&auth, "AUTH", intr).map_err(|e| match e {
            TunnelError::Refused { err, .. } => TunnelError::AuthRefused(addr, err),
            e => e,
        })?;
        r.version = reply.version.min(pa::MAX_VERSION);
        if r.version < pa::MIN_VERSION {
            return Err(TunnelError::Protocol(format!(
                "the remote speaks protocol version {}",
                reply.version
            )));
        }
        let mut props = pa::Props::new();
        props.set(pa::Prop::ApplicationName, c"quaver tunnel");
        let _: pa::SetClientNameReply =
            r.ask(&Command::SetClientName(props), "SET_CLIENT_NAME", intr)?;
        r.create_stream(want, intr)?;
        Ok(r)
    }

    fn create_stream(
        &mut self,
        want: &StreamWant,
        intr: &Interrupt<'_>,
    ) -> Result<(), TunnelError> {
        let mut props = pa::Props::new();
        props.set(
            pa::Prop::MediaName,
            crate::wire::convert::cstr(&want.name).as_c_str(),
        );
        let name = |n: &Option<String>| n.as_deref().map(crate::wire::convert::cstr);
        match &want.direction {
            Direction::Play(sink) => {
                let params = pa::PlaybackStreamParams {
                    sample_spec: want.spec,
                    channel_map: want.map,
                    sink_name: name(sink),
                    buffer_attr: BufferAttr {
                        max_length: u32::MAX,
                        target_length: want.bytes,
                        pre_buffering: want.bytes / 2,
                        minimum_request_length: u32::MAX,
                        fragment_size: u32::MAX,
                    },
                    props,
                    flags: StreamFlags {
                        no_move: false,
                        adjust_latency: false,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let reply: pa::CreatePlaybackStreamReply = self.ask(
                    &Command::CreatePlaybackStream(params),
                    "CREATE_PLAYBACK_STREAM",
                    intr,
                )?;
                self.channel = reply.channel;
                self.index = reply.stream_index;
                self.requested += reply.requested_bytes as u64;
            }
            Direction::Record(source) => {
                let params = pa::RecordStreamParams {
                    sample_spec: want.spec,
                    channel_map: want.map,
                    source_name: name(source),
                    buffer_attr: BufferAttr {
                        max_length: u32::MAX,
                        target_length: u32::MAX,
                        pre_buffering: u32::MAX,
                        minimum_request_length: u32::MAX,
                        fragment_size: want.bytes,
                    },
                    props,
                    flags: StreamFlags {
                        adjust_latency: true,
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let reply: pa::CreateRecordStreamReply = self.ask(
                    &Command::CreateRecordStream(params),
                    "CREATE_RECORD_STREAM",
                    intr,
                )?;
                self.channel = reply.channel;
                self.index = reply.stream_index;
            }
        }
        Ok(())
    }

    /// Sends `cmd` and reads until its answer, within [`HANDSHAKE_TIMEOUT`]; events
    /// read meanwhile are kept.
    fn ask<R: CommandReply>(
        &mut self,
        cmd: &Command,
        what: &'static str,
        intr: &Interrupt<'_>,
    ) -> Result<R, TunnelError> {
        self.seq += 1;
        let seq = self.seq;
        let mut out = Vec::new();
        pa::write_command_message(&mut out, seq, cmd, self.version)
            .map_err(|e| TunnelError::Protocol(format!("encoding {what}: {e}")))?;
        self.sock.write_all(&out)?;
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        loop {
            let packet = match self.pending.pop_front() {
                Some(p) => p,
                None => {
                    if !intr.wait(&self.sock, PollFlags::IN, deadline)? {
                        return Err(TunnelError::Timeout(what));
                    }
                    self.read_some()?;
                    continue;
                }
            };
            let Packet::Control(data) = &packet else {
                continue;
            };
            let mut rest: &[u8] = data;
            match Command::read_tag_prefixed(&mut rest, self.version) {
                Ok((s, Command::Reply)) if s == seq => {
                    let mut ts = TagStructReader::new(&mut rest, self.version);
                    return R::read(&mut ts, self.version)
                        .map_err(|e| TunnelError::Protocol(format!("the answer to {what}: {e}")));
                }
                Ok((s, Command::Error(err))) if s == seq => {
                    return Err(TunnelError::Refused { what, err });
                }
                Ok((_, Command::Request(r))) => self.requested += r.length as u64,
                _ => {}
            }
        }
    }

    /// Reads what the socket has (blocking until something comes, or the read timeout)
    /// and frames it into pending packets. A closed connection is an error.
    pub(super) fn read_some(&mut self) -> Result<(), TunnelError> {
        let n = match self.sock.read(&mut self.buf) {
            Ok(0) => {
                return Err(TunnelError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the remote closed the connection",
                )));
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut input = &self.buf[..n];
        while !input.is_empty() {
            let (used, p) = self
                .reader
                .feed(input)
                .map_err(|e| TunnelError::Protocol(e.to_string()))?;
            input = &input[used..];
            self.pending.extend(p);
        }
        Ok(())
    }

    /// The next event read, if any: REQUESTs are added to [`Remote::requested`].
    pub(super) fn next_event(&mut self) -> Option<Event> {
        let p = self.pending.pop_front()?;
        Some(match p {
            Packet::Memblock { channel, data, .. } if channel == self.channel => Event::Audio(data),
            Packet::Control(data) => {
                let mut rest: &[u8] = &data;
                match Command::read_tag_prefixed(&mut rest, self.version) {
                    Ok((_, Command::Request(r))) if r.channel == self.channel => {
                        self.requested += r.length as u64;
                        Event::Other
                    }
                    Ok((_, Command::PlaybackStreamKilled(c) | Command::RecordStreamKilled(c)))
                        if c == self.channel =>
                    {
                        Event::Killed
                    }
                    Ok((_, cmd)) => {
                        tracing::trace!("tunnel: {cmd:?} from the remote");
                        Event::Other
                    }
                    Err(e) => {
                        tracing::debug!("tunnel: undecodable packet from the remote: {e}");
                        Event::Other
                    }
                }
            }
            other => {
                tracing::debug!("tunnel: unexpected packet from the remote: {other:?}");
                Event::Other
            }
        })
    }

    /// Sends `data` as the playback stream's memblocks (at most [`MAX_BLOCK`] each).
    pub(super) fn send_audio(&mut self, data: &[u8]) -> Result<(), TunnelError> {
        let mut out = Vec::with_capacity(data.len() + 64);
        for block in data.chunks(MAX_BLOCK) {
            let d = Descriptor {
                length: block.len() as u32,
                channel: self.channel,
                offset: 0,
                flags: 0,
            };
            out.extend_from_slice(&d.encode());
            out.extend_from_slice(block);
        }
        self.sock.write_all(&out)?;
        self.requested = self.requested.saturating_sub(data.len() as u64);
        Ok(())
    }
}
