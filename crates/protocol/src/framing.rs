//! Length-prefixed frames over a Unix stream socket, with fd passing.
//!
//! A frame is a 4-byte little-endian payload length followed by the payload.
//! File descriptors travel as `SCM_RIGHTS` on the `sendmsg` that carries the
//! frame's header, so the kernel attaches them to the frame's first bytes.
//!
//! The receiver never reads past the end of the current frame. That costs one
//! extra syscall per frame but makes fd ownership unambiguous: any fds that
//! arrive while a frame is being read belong to that frame, never to the next.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// Largest payload accepted or sent (1 MiB); bigger length headers are an error.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Most file descriptors attached to one message.
pub const MAX_FDS: usize = 4;

const HEADER_BYTES: usize = 4;

/// A received frame: the payload and the fds that came with it.
pub type Frame = (Vec<u8>, Vec<OwnedFd>);

/// A violation of the framing rules; the connection cannot continue after one
/// (except for `Io` errors of kind `WouldBlock`/`TimedOut`/`Interrupted`, after which
/// `recv` may be called again and resumes the partial frame).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed.
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    /// The length header exceeds [`MAX_MESSAGE_BYTES`].
    #[error("message of {len} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes")]
    TooLarge {
        /// The length the header claimed.
        len: u64,
    },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed mid-message ({got} of {expected} bytes received)")]
    Truncated {
        /// Bytes the frame should have had (header included; 4 if the header itself was cut).
        expected: usize,
        /// Bytes actually received.
        got: usize,
    },
    /// More than [`MAX_FDS`] file descriptors were attached to one message.
    #[error("peer attached more than {MAX_FDS} file descriptors to one message")]
    TooManyFds,
}

impl FrameError {
    /// True for errors after which `recv` may simply be retried (timeouts, signals).
    pub fn is_retryable(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
        ))
    }
}

/// A framing or JSON error while exchanging typed messages.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// Framing or socket failure.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The payload was not valid JSON for the expected message type.
    #[error("malformed message from peer: {source} (payload starts with {preview:?})")]
    Malformed {
        /// The JSON error, with line and column.
        source: serde_json::Error,
        /// The first bytes of the payload, lossily decoded, to aid debugging.
        preview: String,
    },
    /// A value could not be encoded (e.g. a map with non-string keys).
    #[error("cannot encode message: {0}")]
    Encode(serde_json::Error),
    /// The encoded message exceeds [`MAX_MESSAGE_BYTES`].
    #[error("encoded message of {0} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes")]
    TooLarge(usize),
}

impl From<io::Error> for ProtocolError {
    fn from(e: io::Error) -> Self {
        ProtocolError::Frame(FrameError::Io(e))
    }
}

/// Decodes a JSON payload, turning serde's error into a [`ProtocolError`] with context.
pub fn decode_json<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ProtocolError> {
    serde_json::from_slice(payload).map_err(|source| {
        let end = payload.len().min(64);
        ProtocolError::Malformed {
            source,
            preview: String::from_utf8_lossy(&payload[..end]).into_owned(),
        }
    })
}

/// Encodes a value as a JSON payload, checking the size limit.
pub fn encode_json<T: Serialize>(value: &T) -> Result<Vec<u8>, ProtocolError> {
    let bytes = serde_json::to_vec(value).map_err(ProtocolError::Encode)?;
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(ProtocolError::TooLarge(bytes.len()));
    }
    Ok(bytes)
}

/// Progress of the frame currently being received, kept across calls so that a
/// read timeout (or a nonblocking socket) does not lose sync with the stream.
#[derive(Default)]
struct RecvState {
    header: [u8; HEADER_BYTES],
    header_got: usize,
    /// `Some` once the header is complete.
    payload: Option<Vec<u8>>,
    payload_got: usize,
    fds: Vec<OwnedFd>,
}

/// A Unix stream socket speaking length-prefixed frames with attached fds.
pub struct FramedSocket {
    stream: UnixStream,
    rx: RecvState,
    /// Set when a send stopped midway: the peer would misparse anything we sent next.
    tx_broken: bool,
}

impl FramedSocket {
    /// Wraps a connected stream; blocking mode is expected but nonblocking works for `recv`.
    pub fn new(stream: UnixStream) -> Self {
        FramedSocket {
            stream,
            rx: RecvState::default(),
            tx_broken: false,
        }
    }

    /// The underlying stream (e.g. to set timeouts or read peer credentials).
    pub fn get_ref(&self) -> &UnixStream {
        &self.stream
    }

    /// Unwraps the stream; a partially received frame is discarded.
    pub fn into_inner(self) -> UnixStream {
        self.stream
    }

    /// Sends one frame with `fds` attached (at most [`MAX_FDS`]).
    ///
    /// If the socket's buffer fills up after part of the frame was sent, this waits
    /// for it to drain (up to the stream's write timeout) rather than return, because
    /// a half-sent frame would desynchronise the peer.
    pub fn send(&mut self, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if self.tx_broken {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier send was interrupted midway; the connection is unusable",
            ));
        }
        if payload.len() > MAX_MESSAGE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "message of {} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes",
                    payload.len()
                ),
            ));
        }
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} fds exceed the limit of {MAX_FDS} per message",
                    fds.len()
                ),
            ));
        }
        let header = (payload.len() as u32).to_le_bytes();
        let total = HEADER_BYTES + payload.len();
        let mut sent = 0usize;
        while sent < total {
            let iov_storage;
            let iov: &[IoSlice<'_>] = if sent < HEADER_BYTES {
                iov_storage = [IoSlice::new(&header[sent..]), IoSlice::new(payload)];
                &iov_storage
            } else {
                iov_storage = [
                    IoSlice::new(&payload[sent - HEADER_BYTES..]),
                    IoSlice::new(&[]),
                ];
                &iov_storage[..1]
            };
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if sent == 0 && !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
                return Err(io::Error::other("cannot build SCM_RIGHTS control message"));
            }
            // NOSIGNAL: a vanished peer must give EPIPE, not kill the process.
            match sendmsg(&self.stream, iov, &mut control, SendFlags::NOSIGNAL) {
                Ok(0) => {
                    self.tx_broken = sent > 0;
                    return Err(io::ErrorKind::WriteZero.into());
                }
                Ok(n) => sent += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) if sent == 0 => return Err(io::ErrorKind::WouldBlock.into()),
                Err(Errno::AGAIN) => {
                    if let Err(e) = self.wait_writable() {
                        self.tx_broken = true;
                        return Err(e);
                    }
                }
                Err(e) => {
                    self.tx_broken = sent > 0;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    fn wait_writable(&self) -> io::Result<()> {
        let timeout = self.stream.write_timeout()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "peer stopped reading in the middle of a message",
                        ));
                    }
                    Some(d - now)
                }
                None => None,
            };
            if poll_fd(self.stream.as_fd(), PollFlags::OUT, left)? {
                return Ok(());
            }
        }
    }

    /// Receives one frame and the fds attached to it; `Ok(None)` on a clean EOF
    /// between frames.
    pub fn recv(&mut self) -> Result<Option<Frame>, FrameError> {
        let result = self.recv_inner();
        if let Err(e) = &result
            && !e.is_retryable()
        {
            // The stream is out of sync; drop any partial frame (and close its fds).
            self.rx = RecvState::default();
        }
        result
    }

    fn recv_inner(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            if self.rx.payload.is_none() {
                let got = self.rx.header_got;
                let mut header = self.rx.header;
                let n = self.recv_chunk(&mut header[got..])?;
                self.rx.header = header;
                if n == 0 {
                    if got == 0 && self.rx.fds.is_empty() {
                        return Ok(None);
                    }
                    return Err(FrameError::Truncated {
                        expected: HEADER_BYTES,
                        got,
                    });
                }
                self.rx.header_got += n;
                if self.rx.header_got == HEADER_BYTES {
                    let len = u32::from_le_bytes(self.rx.header) as usize;
                    if len > MAX_MESSAGE_BYTES {
                        return Err(FrameError::TooLarge { len: len as u64 });
                    }
                    self.rx.payload = Some(vec![0; len]);
                    self.rx.payload_got = 0;
                }
            } else {
                let mut payload = self.rx.payload.take().unwrap_or_default();
                let got = self.rx.payload_got;
                if got < payload.len() {
                    let r = self.recv_chunk(&mut payload[got..]);
                    let len = payload.len();
                    self.rx.payload = Some(payload);
                    let n = r?;
                    if n == 0 {
                        return Err(FrameError::Truncated {
                            expected: HEADER_BYTES + len,
                            got: HEADER_BYTES + got,
                        });
                    }
                    self.rx.payload_got += n;
                    continue;
                }
                let fds = std::mem::take(&mut self.rx.fds);
                self.rx = RecvState::default();
                return Ok(Some((payload, fds)));
            }
        }
    }

    /// One `recvmsg` into `buf` (never more than `buf.len()`, so never past the
    /// frame), collecting any fds into the current frame.
    fn recv_chunk(&mut self, buf: &mut [u8]) -> Result<usize, FrameError> {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        loop {
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(buf)];
            // CMSG_CLOEXEC: fds must not leak into processes we spawn.
            let msg = match recvmsg(
                &self.stream,
                &mut iov,
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Ok(m) => m,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(FrameError::Io(e.into())),
            };
            for m in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = m {
                    self.rx.fds.extend(fds);
                }
            }
            // CTRUNC: the kernel dropped fds that did not fit, i.e. more than MAX_FDS.
            if msg.flags.contains(ReturnFlags::CTRUNC) || self.rx.fds.len() > MAX_FDS {
                return Err(FrameError::TooManyFds);
            }
            return Ok(msg.bytes);
        }
    }

    /// Serializes `value` as JSON and sends it with `fds` attached.
    pub fn send_json<T: Serialize>(
        &mut self,
        value: &T,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), ProtocolError> {
        let bytes = encode_json(value)?;
        self.send(&bytes, fds)?;
        Ok(())
    }

    /// Receives one frame and parses it as JSON; `Ok(None)` on clean EOF.
    pub fn recv_json<T: DeserializeOwned>(
        &mut self,
    ) -> Result<Option<(T, Vec<OwnedFd>)>, ProtocolError> {
        match self.recv()? {
            None => Ok(None),
            Some((payload, fds)) => Ok(Some((decode_json(&payload)?, fds))),
        }
    }
}

impl AsFd for FramedSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl std::fmt::Debug for FramedSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramedSocket")
            .field("stream", &self.stream)
            .field("partial_header", &self.rx.header_got)
            .field("partial_payload", &self.rx.payload_got)
            .finish()
    }
}

/// Polls one fd for `events`; `Ok(false)` on timeout. `None` waits forever.
pub fn poll_fd(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    let ts = match timeout {
        Some(t) => Some(
            Timespec::try_from(t)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "timeout too large"))?,
        ),
        None => None,
    };
    let mut fds = [PollFd::from_borrowed_fd(fd, events)];
    match poll(&mut fds, ts.as_ref()) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        // A signal is a spurious wakeup; callers re-check their condition and loop.
        Err(Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ErrorCode, Reply, ReplyEnvelope, Request, RequestEnvelope};
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsFd;

    fn pair() -> (FramedSocket, FramedSocket) {
        let (a, b) = UnixStream::pair().unwrap();
        (FramedSocket::new(a), FramedSocket::new(b))
    }

    #[test]
    fn roundtrip_messages() {
        let (mut a, mut b) = pair();
        a.send(b"hello", &[]).unwrap();
        a.send(b"", &[]).unwrap();
        let (p, fds) = b.recv().unwrap().unwrap();
        assert_eq!(p, b"hello");
        assert!(fds.is_empty());
        assert_eq!(b.recv().unwrap().unwrap().0, b"");
        drop(a);
        assert!(b.recv().unwrap().is_none());
    }

    #[test]
    fn large_message_across_threads() {
        let (mut a, mut b) = pair();
        // Bigger than the socket buffer, so both sides see partial transfers.
        let t = std::thread::spawn(move || {
            for i in 0..20u8 {
                a.send(&vec![i; MAX_MESSAGE_BYTES - i as usize], &[])
                    .unwrap();
            }
        });
        for i in 0..20u8 {
            let (p, _) = b.recv().unwrap().unwrap();
            assert_eq!(p.len(), MAX_MESSAGE_BYTES - i as usize);
            assert!(p.iter().all(|&x| x == i));
        }
        t.join().unwrap();
    }

    #[test]
    fn json_roundtrip() {
        let (mut a, mut b) = pair();
        let env = RequestEnvelope {
            id: 9,
            request: Request::Status,
        };
        a.send_json(&env, &[]).unwrap();
        let (got, fds): (RequestEnvelope, _) = b.recv_json().unwrap().unwrap();
        assert_eq!(got, env);
        assert!(fds.is_empty());
        let rep = ReplyEnvelope {
            id: 9,
            reply: Reply::error(ErrorCode::BadRequest, "nope"),
        };
        b.send_json(&rep, &[]).unwrap();
        let (got, _): (ReplyEnvelope, _) = a.recv_json().unwrap().unwrap();
        assert_eq!(got, rep);
    }

    fn memfd_with(content: &[u8]) -> std::fs::File {
        let fd = rustix::fs::memfd_create("test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(content).unwrap();
        f
    }

    #[test]
    fn passes_fds() {
        let (mut a, mut b) = pair();
        let f1 = memfd_with(b"first file");
        let f2 = memfd_with(b"second");
        a.send(b"two fds", &[f1.as_fd(), f2.as_fd()]).unwrap();
        a.send(b"none", &[]).unwrap();
        let f3 = memfd_with(b"third");
        a.send(b"one", &[f3.as_fd()]).unwrap();

        let (p, fds) = b.recv().unwrap().unwrap();
        assert_eq!(p, b"two fds");
        assert_eq!(fds.len(), 2);
        let read_all = |fd: OwnedFd| {
            let mut f = std::fs::File::from(fd);
            f.seek(SeekFrom::Start(0)).unwrap();
            let mut s = String::new();
            f.read_to_string(&mut s).unwrap();
            s
        };
        let mut it = fds.into_iter();
        assert_eq!(read_all(it.next().unwrap()), "first file");
        assert_eq!(read_all(it.next().unwrap()), "second");
        let (p, fds) = b.recv().unwrap().unwrap();
        assert_eq!(p, b"none");
        assert!(fds.is_empty());
        let (p, fds) = b.recv().unwrap().unwrap();
        assert_eq!(p, b"one");
        assert_eq!(read_all(fds.into_iter().next().unwrap()), "third");
    }

    #[test]
    fn received_fds_are_cloexec() {
        let (mut a, mut b) = pair();
        let f = memfd_with(b"x");
        a.send(b"x", &[f.as_fd()]).unwrap();
        let (_, fds) = b.recv().unwrap().unwrap();
        let flags = rustix::io::fcntl_getfd(&fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn refuses_to_send_too_many_fds_or_bytes() {
        let (mut a, _b) = pair();
        let f = memfd_with(b"x");
        let fds = [f.as_fd(); 5];
        assert_eq!(
            a.send(b"x", &fds).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            a.send(&vec![0; MAX_MESSAGE_BYTES + 1], &[])
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn too_many_fds_from_peer() {
        let (raw, b) = UnixStream::pair().unwrap();
        let mut b = FramedSocket::new(b);
        let f = memfd_with(b"x");
        let fds = [f.as_fd(); 6];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(6))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        let mut frame = 1u32.to_le_bytes().to_vec();
        frame.push(b'x');
        sendmsg(
            &raw,
            &[IoSlice::new(&frame)],
            &mut control,
            SendFlags::empty(),
        )
        .unwrap();
        assert!(matches!(b.recv(), Err(FrameError::TooManyFds)));
    }

    #[test]
    fn oversize_header_is_rejected_without_allocating() {
        let (mut raw, b) = UnixStream::pair().unwrap();
        let mut b = FramedSocket::new(b);
        raw.write_all(&(2u32 << 30).to_le_bytes()).unwrap();
        match b.recv() {
            Err(FrameError::TooLarge { len }) => assert_eq!(len, 2 << 30),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn garbage_json_gives_clear_error() {
        let (mut a, mut b) = pair();
        a.send(b"{not json", &[]).unwrap();
        let err = b.recv_json::<RequestEnvelope>().unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ProtocolError::Malformed { .. }));
        assert!(msg.contains("malformed message"), "{msg}");
        assert!(msg.contains("{not json"), "{msg}");
        // Valid JSON of the wrong shape is also Malformed and names the problem.
        a.send(br#"{"id":1,"request":{"type":"dance"}}"#, &[])
            .unwrap();
        let msg = b.recv_json::<RequestEnvelope>().unwrap_err().to_string();
        assert!(msg.contains("dance"), "{msg}");
    }

    #[test]
    fn eof_mid_frame_is_truncated() {
        let (mut raw, b) = UnixStream::pair().unwrap();
        let mut b = FramedSocket::new(b);
        raw.write_all(&10u32.to_le_bytes()).unwrap();
        raw.write_all(b"abc").unwrap();
        drop(raw);
        match b.recv() {
            Err(FrameError::Truncated { expected, got }) => {
                assert_eq!((expected, got), (14, 7));
            }
            other => panic!("expected Truncated, got {other:?}"),
        }

        let (mut raw, b) = UnixStream::pair().unwrap();
        let mut b = FramedSocket::new(b);
        raw.write_all(&[1, 0]).unwrap();
        drop(raw);
        assert!(matches!(
            b.recv(),
            Err(FrameError::Truncated {
                expected: 4,
                got: 2
            })
        ));
    }

    #[test]
    fn frame_in_pieces_and_fds_with_first_chunk() {
        let (raw, b) = UnixStream::pair().unwrap();
        let mut b = FramedSocket::new(b);
        let f = memfd_with(b"piece");
        let t = std::thread::spawn(move || {
            let payload = b"0123456789abcdef";
            let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
            frame.extend_from_slice(payload);
            // First chunk: 2 header bytes plus the fd; then dribble the rest.
            let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            let fds = [f.as_fd()];
            assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
            sendmsg(
                &raw,
                &[IoSlice::new(&frame[..2])],
                &mut control,
                SendFlags::empty(),
            )
            .unwrap();
            for chunk in frame[2..].chunks(3) {
                std::thread::sleep(Duration::from_millis(2));
                (&raw).write_all(chunk).unwrap();
            }
            // A second frame right behind, to check we do not read into it.
            (&raw).write_all(&[1, 0, 0, 0, b'Z']).unwrap();
        });
        let (p, fds) = b.recv().unwrap().unwrap();
        assert_eq!(p, b"0123456789abcdef");
        assert_eq!(fds.len(), 1);
        let (p, fds) = b.recv().unwrap().unwrap();
        assert_eq!(p, b"Z");
        assert!(fds.is_empty());
        t.join().unwrap();
    }

    #[test]
    fn read_timeout_resumes_partial_frame() {
        let (mut raw, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut b = FramedSocket::new(b);
        raw.write_all(&[5, 0, 0, 0, b'a', b'b']).unwrap();
        let err = b.recv().unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        raw.write_all(b"cde").unwrap();
        assert_eq!(b.recv().unwrap().unwrap().0, b"abcde");
    }
}
