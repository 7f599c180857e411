//! Fuzzes the native protocol's framing (`FramedSocket::recv`) over a real Unix socket:
//! a peer sends an arbitrary byte stream in arbitrary pieces, some carrying a file
//! descriptor, and a nonblocking receiver reads frames between the pieces (so partial
//! headers and payloads are resumed after `WouldBlock`). What it receives must match a
//! model of the wire format: the same payloads, each fd with the frame holding the first
//! byte of the piece that carried it, and the error the model predicts (too large,
//! too many fds, truncated at EOF). Every frame received is sent again with
//! `FramedSocket::send`, which must reproduce its bytes exactly.
//!
//! Input layout: byte 0 = number of piece-size bytes (mod 8, at least 1), then those
//! bytes (piece `i` is `1 + size[i % n]` bytes long), then one byte whose bit `i` puts
//! an fd on piece `i` (pieces 0-7), then the stream.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quaver_protocol::framing::{FrameError, FramedSocket, MAX_FDS, MAX_MESSAGE_BYTES};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

/// What the receiver should end with after the frames.
#[derive(Debug, PartialEq)]
enum End {
    /// Clean EOF between frames.
    Eof,
    TooLarge(u64),
    TooManyFds,
    Truncated {
        expected: usize,
        got: usize,
    },
}

/// One frame of the model: its byte range in the stream and how many fds it carries.
#[derive(Debug)]
struct ModelFrame {
    start: usize,
    end: usize,
    fds: usize,
}

/// Splits `stream` into frames as the wire format says, with fds at `fd_at` (stream
/// offsets of the pieces carrying one fd each).
fn model(stream: &[u8], fd_at: &[usize]) -> (Vec<ModelFrame>, End) {
    let mut frames = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let start = pos;
        // fds that arrive with this frame's bytes, counted as the receiver reads them.
        let fds_before = |limit: usize| fd_at.iter().filter(|&&p| p >= start && p < limit).count();
        if stream.len() - start < 4 {
            if fds_before(stream.len()) > MAX_FDS {
                return (frames, End::TooManyFds);
            }
            return (
                frames,
                End::Truncated {
                    expected: 4,
                    got: stream.len() - start,
                },
            );
        }
        let len = u32::from_le_bytes(stream[start..start + 4].try_into().unwrap()) as usize;
        if fds_before(start + 4) > MAX_FDS {
            return (frames, End::TooManyFds);
        }
        if len > MAX_MESSAGE_BYTES {
            return (frames, End::TooLarge(len as u64));
        }
        let end = start + 4 + len;
        if end > stream.len() {
            if fds_before(stream.len()) > MAX_FDS {
                return (frames, End::TooManyFds);
            }
            return (
                frames,
                End::Truncated {
                    expected: 4 + len,
                    got: stream.len() - start,
                },
            );
        }
        let fds = fds_before(end);
        if fds > MAX_FDS {
            return (frames, End::TooManyFds);
        }
        frames.push(ModelFrame { start, end, fds });
        pos = end;
    }
    (frames, End::Eof)
}

/// An fd to pass around (each received copy is closed when dropped).
fn some_fd() -> &'static std::fs::File {
    static FILE: OnceLock<std::fs::File> = OnceLock::new();
    FILE.get_or_init(|| std::fs::File::open("/dev/null").expect("open /dev/null"))
}

fn send_piece(raw: &UnixStream, piece: &[u8], with_fd: bool) {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [some_fd().as_fd()];
    if with_fd {
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    }
    // One sendmsg carries the fd; a blocking Unix stream socket takes a piece whole.
    let n = sendmsg(
        raw,
        &[IoSlice::new(piece)],
        &mut control,
        SendFlags::empty(),
    )
    .expect("sendmsg");
    (&*raw).write_all(&piece[n..]).expect("write");
}

/// Outcome of receiving: frames (payload, fd count) and how it ended.
fn drain(rx: &mut FramedSocket, got: &mut Vec<(Vec<u8>, usize)>) -> Option<End> {
    loop {
        match rx.recv() {
            Ok(Some((payload, fds))) => got.push((payload, fds.len())),
            Ok(None) => return Some(End::Eof),
            Err(e) if e.is_retryable() => return None,
            Err(FrameError::TooLarge { len }) => return Some(End::TooLarge(len)),
            Err(FrameError::TooManyFds) => return Some(End::TooManyFds),
            Err(FrameError::Truncated { expected, got }) => {
                return Some(End::Truncated { expected, got });
            }
            Err(FrameError::Io(e)) => panic!("unexpected socket error {e}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n % 8).max(1) as usize;
    if rest.len() < n + 1 {
        return;
    }
    let (sizes, rest) = rest.split_at(n);
    let (fd_bits, stream) = (rest[0], &rest[1..]);

    let mut pieces = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let i = pieces.len();
        let len = (1 + sizes[i % n] as usize).min(stream.len() - pos);
        pieces.push((pos, len, i < 8 && fd_bits & (1 << i) != 0));
        pos += len;
    }
    let fd_at: Vec<usize> = pieces.iter().filter(|p| p.2).map(|p| p.0).collect();
    let (want_frames, want_end) = model(stream, &fd_at);

    let (raw, b) = UnixStream::pair().expect("socketpair");
    b.set_nonblocking(true).expect("nonblocking");
    let mut rx = FramedSocket::new(b);
    let mut got = Vec::new();
    let mut end = None;
    for &(start, len, with_fd) in &pieces {
        send_piece(&raw, &stream[start..start + len], with_fd);
        end = drain(&mut rx, &mut got);
        if end.is_some() {
            break;
        }
    }
    if end.is_none() {
        raw.shutdown(Shutdown::Write).expect("shutdown");
        end = drain(&mut rx, &mut got);
    }
    assert_eq!(end, Some(want_end));
    assert_eq!(got.len(), want_frames.len());
    for ((payload, fds), want) in got.iter().zip(&want_frames) {
        assert_eq!(&payload[..], &stream[want.start + 4..want.end]);
        assert_eq!(*fds, want.fds, "fds of frame at {}", want.start);
    }

    // Encode: every frame received, sent again, gives back its bytes.
    let (a, mut raw_rx) = UnixStream::pair().expect("socketpair");
    let mut tx = FramedSocket::new(a);
    for (payload, want) in got.iter().map(|g| &g.0).zip(&want_frames) {
        let fds = vec![some_fd().as_fd(); want.fds];
        tx.send(payload, &fds).expect("send");
        let mut bytes = vec![0; want.end - want.start];
        raw_rx.read_exact(&mut bytes).expect("read back");
        assert_eq!(&bytes[..], &stream[want.start..want.end]);
    }
});
