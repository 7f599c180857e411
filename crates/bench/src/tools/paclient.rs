//! A minimal, synchronous PulseAudio-protocol client for measurements: one blocking
//! Unix socket, packets read and written by the calling thread, so every write and
//! every arrival can be timestamped where it happens (no reactor thread, no buffering
//! between the socket and the measurement).
//!
//! The wire codec (descriptors, tagstructs, commands, replies) is the `pulseaudio`
//! crate's, the same one `crates/pulse` serves with. Data goes through the socket
//! (no shared memory is offered), which every server accepts.

use anyhow::{Context, Result, bail};
use pulseaudio::protocol::{self, Command, CommandReply, DESCRIPTOR_SIZE, TagStructReader};
use std::io::{Cursor, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// Longest a reply to a setup command may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// One packet from the server.
pub enum Packet {
    /// A command, a reply or an error; `payload` is the whole tagstruct (a reply's
    /// fields follow its tag and sequence number).
    Command {
        /// Sequence number (the request's, for replies).
        seq: u32,
        /// The command (`Command::Reply` for a reply); boxed, as commands are large.
        cmd: Box<Command>,
        /// The tagstruct after the header, for [`Conn::parse_reply`].
        payload: Vec<u8>,
    },
    /// Stream data for a record stream.
    Data {
        /// The stream's channel.
        channel: u32,
        /// The bytes.
        bytes: Vec<u8>,
    },
}

/// A connection.
pub struct Conn {
    sock: UnixStream,
    /// Negotiated protocol version.
    pub version: u16,
    next_seq: u32,
}

impl Conn {
    /// Connects to `socket`, authenticates with `cookie` (PulseAudio's; others ignore
    /// it) and names the client.
    pub fn connect(socket: &Path, cookie: Option<&Path>, name: &str) -> Result<Conn> {
        let sock = UnixStream::connect(socket)
            .with_context(|| format!("connecting to {}", socket.display()))?;
        let cookie = cookie
            .and_then(|p| std::fs::read(p).ok())
            .unwrap_or_else(|| vec![0; 256]);
        let mut c = Conn {
            sock,
            version: protocol::MAX_VERSION,
            next_seq: 0,
        };
        let seq = c.send(&Command::Auth(protocol::AuthParams {
            version: protocol::MAX_VERSION,
            supports_shm: false,
            supports_memfd: false,
            cookie,
        }))?;
        let auth: protocol::AuthReply = c.wait_reply(seq, &mut |_| {})?;
        c.version = protocol::MAX_VERSION.min(auth.version);
        let mut props = protocol::Props::new();
        props.set(
            protocol::Prop::ApplicationName,
            std::ffi::CString::new(name)?,
        );
        let seq = c.send(&Command::SetClientName(props))?;
        let _: protocol::SetClientNameReply = c.wait_reply(seq, &mut |_| {})?;
        Ok(c)
    }

    /// Sends a command; returns its sequence number.
    pub fn send(&mut self, cmd: &Command) -> Result<u32> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut buf = Vec::with_capacity(256);
        protocol::encode_command_message(&mut buf, seq, cmd, self.version)?;
        self.sock.write_all(&buf)?;
        Ok(seq)
    }

    /// Writes stream data (one packet).
    pub fn write_data(&mut self, channel: u32, bytes: &[u8]) -> Result<()> {
        let mut buf = Vec::with_capacity(DESCRIPTOR_SIZE + bytes.len());
        protocol::write_memblock(&mut buf, channel, bytes, 0)?;
        self.sock.write_all(&buf)?;
        Ok(())
    }

    /// Blocks for the next packet, at most `timeout` (`None` when it passed).
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Packet>> {
        self.sock
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut head = [0u8; DESCRIPTOR_SIZE];
        match self.sock.read_exact(&mut head[..1]) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e).context("reading from the server"),
        }
        // The rest of a packet follows its first byte at once.
        self.sock.set_read_timeout(Some(REPLY_TIMEOUT))?;
        self.sock.read_exact(&mut head[1..])?;
        let desc = protocol::read_descriptor(&mut Cursor::new(&head[..]))?;
        if desc.length as usize > protocol::MAX_MEMBLOCKQ_LENGTH {
            bail!("packet of {} bytes from the server", desc.length);
        }
        let mut payload = vec![0u8; desc.length as usize];
        self.sock.read_exact(&mut payload)?;
        if desc.channel != u32::MAX {
            return Ok(Some(Packet::Data {
                channel: desc.channel,
                bytes: payload,
            }));
        }
        let (seq, cmd) = Command::read_tag_prefixed(&mut Cursor::new(&payload[..]), self.version)?;
        Ok(Some(Packet::Command {
            seq,
            cmd: Box::new(cmd),
            payload,
        }))
    }

    /// Parses a reply's fields from a [`Packet::Command`] payload.
    pub fn parse_reply<T: CommandReply>(&self, payload: &[u8]) -> Result<T> {
        let mut cur = Cursor::new(payload);
        let mut ts = TagStructReader::new(&mut cur, self.version);
        let _tag = ts.read_u32()?;
        let _seq = ts.read_u32()?;
        Ok(T::read(&mut ts, self.version)?)
    }

    /// Reads packets until the reply to `seq`, handing every other packet to `other`.
    pub fn wait_reply<T: CommandReply>(
        &mut self,
        seq: u32,
        other: &mut dyn FnMut(Packet),
    ) -> Result<T> {
        let t0 = Instant::now();
        loop {
            let left = REPLY_TIMEOUT.saturating_sub(t0.elapsed());
            if left.is_zero() {
                bail!("no reply to request {seq} within {REPLY_TIMEOUT:?}");
            }
            match self.recv(left)? {
                Some(Packet::Command {
                    seq: s,
                    cmd,
                    payload,
                }) if s == seq && matches!(*cmd, Command::Reply | Command::Error(_)) => {
                    if let Command::Error(e) = *cmd {
                        bail!("the server refused request {seq}: {e:?}");
                    }
                    return self.parse_reply(&payload);
                }
                Some(p) => other(p),
                None => {}
            }
        }
    }
}

/// The fields of a timing reply that `pa_stream_get_latency` uses, with the transport
/// delay libpulse derives from the timestamps.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The device's latency (the sink's for playback; for a record stream on a
    /// monitor, the monitored sink's), µs.
    pub sink_usec: i64,
    /// The source's latency plus data in flight (record streams; may be negative for
    /// a monitor, sent as its two's complement), µs.
    pub source_usec: i64,
    /// Whether the stream is playing.
    pub playing: bool,
    /// Server write index, bytes.
    pub write_index: i64,
    /// Server read index, bytes.
    pub read_index: i64,
    /// One-way transport delay as libpulse estimates it, µs.
    pub transport_usec: i64,
}

impl Timing {
    /// From a playback timing reply received at `received` (wall clock).
    pub fn playback(r: &protocol::PlaybackLatency, received: SystemTime) -> Timing {
        Timing {
            sink_usec: r.sink_usec as i64,
            source_usec: r.source_usec as i64,
            playing: r.playing,
            write_index: r.write_offset,
            read_index: r.read_offset,
            transport_usec: transport_usec(r.local_time, r.remote_time, received),
        }
    }

    /// From a record timing reply received at `received` (wall clock).
    pub fn record(r: &protocol::RecordLatency, received: SystemTime) -> Timing {
        Timing {
            sink_usec: r.sink_usec as i64,
            source_usec: r.source_usec as i64,
            playing: r.playing,
            write_index: r.write_offset,
            read_index: r.read_offset,
            transport_usec: transport_usec(r.local_time, r.remote_time, received),
        }
    }

    /// What `pa_stream_get_latency` returns for a playback stream whose client has
    /// written `written` bytes, `since` after this reply arrived (the interpolation of
    /// `PA_STREAM_INTERPOLATE_TIMING`), µs.
    pub fn playback_latency_usec(&self, written: i64, bytes_per_s: f64, since: Duration) -> f64 {
        let usec = |b: i64| b as f64 * 1e6 / bytes_per_s;
        let mut played = usec(self.read_index.max(0));
        if self.playing {
            played += self.transport_usec as f64 + since.as_secs_f64() * 1e6;
            played = (played - self.sink_usec as f64).max(0.0);
        }
        usec(written) - played
    }

    /// What `pa_stream_get_latency` returns for a record stream whose client has read
    /// everything the server sent (read index = the server's), µs: data queued in the
    /// server, transport and source latency, minus the monitored sink's latency.
    pub fn record_latency_usec(&self, bytes_per_s: f64) -> f64 {
        let queued = (self.write_index - self.read_index) as f64 * 1e6 / bytes_per_s;
        queued + (self.transport_usec + self.source_usec - self.sink_usec) as f64
    }
}

/// libpulse's estimate: with clocks that agree (local ≤ remote ≤ now) the request's
/// trip to the server, else half the round trip.
fn transport_usec(local: SystemTime, remote: SystemTime, now: SystemTime) -> i64 {
    let us = |a: SystemTime, b: SystemTime| match b.duration_since(a) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    };
    if local <= remote && remote <= now {
        us(local, remote)
    } else {
        us(local, now) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn playback_latency_is_written_minus_played_plus_device() {
        // 48 kHz stereo f32: 384000 bytes/s. Written 1 s, read 0.9 s, sink holds
        // 10 ms, transport 1 ms: played = 0.9 + 0.001 − 0.010 s → latency 109 ms.
        let t = Timing {
            sink_usec: 10_000,
            source_usec: 0,
            playing: true,
            write_index: 384_000,
            read_index: 345_600,
            transport_usec: 1_000,
        };
        let l = t.playback_latency_usec(384_000, 384_000.0, Duration::ZERO);
        assert!((l - 109_000.0).abs() < 1e-6, "{l}");
        // Interpolation: 5 ms later, 5 ms less.
        let l = t.playback_latency_usec(384_000, 384_000.0, Duration::from_millis(5));
        assert!((l - 104_000.0).abs() < 1e-6, "{l}");
        // Not playing: no device or transport term.
        let t = Timing {
            playing: false,
            ..t
        };
        let l = t.playback_latency_usec(384_000, 384_000.0, Duration::ZERO);
        assert!((l - 100_000.0).abs() < 1e-6, "{l}");
    }

    #[test]
    fn record_latency_subtracts_the_monitored_sink() {
        let t = Timing {
            sink_usec: 8_000,
            source_usec: -2_000,
            playing: true,
            write_index: 3_840,
            read_index: 0,
            transport_usec: 100,
        };
        // 10 ms queued + 0.1 − 2 − 8 ms.
        assert!((t.record_latency_usec(384_000.0) - 100.0).abs() < 1e-6);
    }

    #[test]
    fn transport_follows_libpulse() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let ms = Duration::from_millis;
        assert_eq!(transport_usec(t0, t0 + ms(1), t0 + ms(3)), 1000);
        // Remote clock ahead of now: half the round trip.
        assert_eq!(transport_usec(t0, t0 + ms(10), t0 + ms(4)), 2000);
    }
}
