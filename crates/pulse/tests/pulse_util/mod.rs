//! Helpers for the PulseAudio front-end tests: real libpulse clients (pactl, paplay,
//! parec, pacat) pointed at a private quaverd, never at a real server, and a minimal
//! raw-protocol client for what the tools cannot do (garbage, exact replies).

#![allow(dead_code)]

use quaver_testkit::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// True if every tool is on PATH.
pub fn have(tools: &[&str]) -> bool {
    tools.iter().all(|t| on_path(t))
}

/// Skips the calling test (loudly) when a tool is missing.
#[macro_export]
macro_rules! require_tools {
    ($($t:expr),+) => {
        if !pulse_util::have(&[$($t),+]) {
            eprintln!(
                "SKIPPED {}: needs {:?} (apt-get install pulseaudio-utils sox); not tested",
                module_path!(),
                [$($t),+]
            );
            return;
        }
    };
}

/// Starts a private quaverd (see `quaver_testkit::Daemon::start`) and waits until its
/// PulseAudio socket, bound just after the native one, accepts connections too.
pub fn start(args: &[&str]) -> Daemon {
    ready(Daemon::start(args))
}

/// Like [`start`] in a prepared temporary directory (e.g. holding a config file).
pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Daemon {
    ready(Daemon::start_in(dir, args))
}

/// Like [`start`] for a prepared quaverd command (see `quaver_testkit::Daemon::start_cmd`).
pub fn start_cmd(dir: tempfile::TempDir, cmd: std::process::Command) -> Daemon {
    ready(Daemon::start_cmd(dir, cmd))
}

fn ready(d: Daemon) -> Daemon {
    let sock = pulse_socket(&d);
    assert!(
        wait_until(WAIT, || std::os::unix::net::UnixStream::connect(&sock)
            .is_ok()),
        "the PulseAudio socket never accepted:\n{}",
        d.log_text()
    );
    d
}

/// The daemon's PulseAudio socket.
pub fn pulse_socket(d: &Daemon) -> PathBuf {
    d.pulse_socket()
}

/// A libpulse tool aimed at `d` only ([`Daemon::pulse_client`]).
pub fn pa(d: &Daemon, prog: &str) -> Command {
    d.pulse_client(prog)
}

/// Runs a libpulse tool to completion (bounded) and returns its output.
pub fn run_pa(d: &Daemon, prog: &str, args: &[&str]) -> Output {
    let child = pa(d, prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"));
    wait_output(child, WAIT)
}

/// Starts a libpulse tool in the background.
pub fn spawn_pa(d: &Daemon, prog: &str, args: &[&str]) -> Child {
    pa(d, prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"))
}

/// Asserts success and returns stdout; shows the daemon log on failure.
pub fn pa_ok(d: &Daemon, out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}): {}\n--- quaverd log ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops a background tool with SIGINT (parec and pactl subscribe flush and exit) and
/// collects its output, bounded.
pub fn interrupt(child: Child) -> Output {
    signal(child.id(), libc::SIGINT);
    wait_output(child, WAIT)
}

/// Waits (bounded) for a sink input to appear and returns the first one's index.
pub fn wait_sink_input(d: &Daemon) -> String {
    let mut index = String::new();
    assert!(
        wait_until(WAIT, || {
            let l = pa_ok(d, &run_pa(d, "pactl", &["list", "short", "sink-inputs"]));
            index = l.split('\t').next().unwrap_or("").trim().to_string();
            !index.is_empty()
        }),
        "no sink input appeared\n{}",
        d.log_text()
    );
    index
}

/// The "took in N blocks" counts of every playback stream's end-of-stream debug line:
/// the blocks the RT thread took out of the srbchannel itself.
pub fn blocks_taken_in(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| {
            let rest = l.split(" took in ").nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// Reads interleaved little-endian s16 samples from a raw file.
pub fn read_raw_s16(path: &Path) -> Vec<i16> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// A bare PulseAudio protocol client (the codec's own reader and writer), for exact
/// replies and for misbehaving on purpose.
pub struct RawClient {
    pub sock: std::io::BufReader<std::os::unix::net::UnixStream>,
    pub version: u16,
    seq: u32,
}

impl RawClient {
    /// Connects without authenticating.
    pub fn connect(d: &Daemon) -> RawClient {
        let s = std::os::unix::net::UnixStream::connect(pulse_socket(d)).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        RawClient {
            sock: std::io::BufReader::new(s),
            version: quaver_pulse::pulseaudio::protocol::MAX_VERSION,
            seq: 0,
        }
    }

    /// Connects, authenticates and names itself.
    pub fn ready(d: &Daemon, name: &str) -> RawClient {
        use quaver_pulse::pulseaudio::protocol::*;
        let mut c = Self::connect(d);
        let reply: AuthReply = c
            .request(&Command::Auth(AuthParams {
                version: MAX_VERSION,
                supports_shm: false,
                supports_memfd: false,
                cookie: vec![0; 256],
            }))
            .expect("auth");
        // A client without shared memory must be offered none: audio travels inline.
        assert!(
            !reply.use_shm && !reply.use_memfd,
            "shm offered to a client without it"
        );
        c.version = reply.version.min(MAX_VERSION);
        let mut props = Props::new();
        props.set(Prop::ApplicationName, std::ffi::CString::new(name).unwrap());
        let _: SetClientNameReply = c.request(&Command::SetClientName(props)).unwrap();
        c
    }

    /// Sends a command, returns its sequence number.
    pub fn send(&mut self, cmd: &quaver_pulse::pulseaudio::protocol::Command) -> u32 {
        self.seq += 1;
        quaver_pulse::pulseaudio::protocol::write_command_message(
            self.sock.get_mut(),
            self.seq,
            cmd,
            self.version,
        )
        .unwrap();
        self.seq
    }

    /// Sends a control packet of command `command` whose payload after the sequence
    /// number is `rest` (for commands the codec has no type for); returns its sequence.
    pub fn send_payload(&mut self, command: u32, rest: &[u8]) -> u32 {
        self.seq += 1;
        let len = 10 + rest.len() as u32;
        let mut p = len.to_be_bytes().to_vec();
        p.extend_from_slice(&u32::MAX.to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.push(b'L');
        p.extend_from_slice(&command.to_be_bytes());
        p.push(b'L');
        p.extend_from_slice(&self.seq.to_be_bytes());
        p.extend_from_slice(rest);
        self.send_raw(&p).unwrap();
        self.seq
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        self.sock.get_mut().write_all(bytes)
    }

    /// Sends a command and reads its typed reply (or the server's error).
    pub fn request<R: quaver_pulse::pulseaudio::protocol::CommandReply>(
        &mut self,
        cmd: &quaver_pulse::pulseaudio::protocol::Command,
    ) -> Result<R, quaver_pulse::pulseaudio::protocol::ProtocolError> {
        let seq = self.send(cmd);
        let (got, r) =
            quaver_pulse::pulseaudio::protocol::read_reply_message(&mut self.sock, self.version)?;
        assert_eq!(got, seq, "reply to another request");
        Ok(r)
    }

    /// Reads an empty reply or the error for the last request.
    pub fn ack(&mut self) -> Result<u32, quaver_pulse::pulseaudio::protocol::ProtocolError> {
        quaver_pulse::pulseaudio::protocol::read_ack_message(&mut self.sock)
    }
}

/// One packet from the server, as the raw client sees it.
#[derive(Debug)]
pub enum Msg {
    /// A reply: its sequence number and the payload after it.
    Reply(u32, Vec<u8>),
    /// An error reply.
    Error(u32, u32),
    /// A command the server sent on its own (events, REQUEST, STARTED…).
    Event(Box<quaver_pulse::pulseaudio::protocol::Command>),
    /// Record data.
    Memblock(u32, Vec<u8>),
    /// The server is done with one of our shared-memory blocks.
    ShmRelease(u32),
}

impl RawClient {
    /// Reads the next packet (bounded by the socket's read timeout).
    pub fn next(&mut self) -> Msg {
        use quaver_pulse::pulseaudio::protocol::{Command, TagStructReader};
        use std::io::Read;
        let mut h = [0u8; 20];
        self.sock.read_exact(&mut h).expect("packet header");
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let channel = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let flags = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        if flags == 0x4000_0000 {
            return Msg::ShmRelease(u32::from_be_bytes([h[8], h[9], h[10], h[11]]));
        }
        let mut body = vec![0u8; len];
        self.sock.read_exact(&mut body).expect("packet body");
        if flags & 0x8000_0000 != 0 {
            // A shared-memory reference: here only the srbchannel offer's ring block,
            // which this client never accepts (it reads everything from the socket).
            return self.next();
        }
        if channel != u32::MAX {
            return Msg::Memblock(channel, body);
        }
        let mut cur = std::io::Cursor::new(&body[..]);
        let mut ts = TagStructReader::new(&mut cur, self.version);
        let tag = ts.read_u32().unwrap();
        let seq = ts.read_u32().unwrap();
        match tag {
            // The srbchannel offer (REGISTER_MEMFD_SHMID, ENABLE_SRBCHANNEL) to a client
            // that asked for shared memory: left unanswered, so the socket stays in use.
            101 | 103 => self.next(),
            0 => Msg::Error(seq, ts.read_u32().unwrap()),
            2 => Msg::Reply(seq, body[10..].to_vec()),
            _ => {
                let mut cur = std::io::Cursor::new(&body[..]);
                Msg::Event(Box::new(
                    Command::read_tag_prefixed(&mut cur, self.version)
                        .unwrap()
                        .1,
                ))
            }
        }
    }

    /// Waits for the reply to `seq`, handing every other packet to `other`.
    pub fn reply_to(&mut self, seq: u32, mut other: impl FnMut(Msg)) -> Result<Vec<u8>, u32> {
        loop {
            match self.next() {
                Msg::Reply(s, p) if s == seq => return Ok(p),
                Msg::Error(s, e) if s == seq => return Err(e),
                m => other(m),
            }
        }
    }

    /// Decodes a typed reply payload.
    pub fn decode<R: quaver_pulse::pulseaudio::protocol::TagStructRead>(&self, p: &[u8]) -> R {
        let mut cur = std::io::Cursor::new(p);
        let mut ts =
            quaver_pulse::pulseaudio::protocol::TagStructReader::new(&mut cur, self.version);
        R::read(&mut ts, self.version).unwrap()
    }

    /// Sends audio on a stream channel.
    pub fn write_audio(&mut self, channel: u32, data: &[u8]) {
        let mut p = Vec::with_capacity(20 + data.len());
        p.extend_from_slice(&(data.len() as u32).to_be_bytes());
        p.extend_from_slice(&channel.to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(data);
        self.send_raw(&p).unwrap();
    }
}

/// Waits (bounded) until `name` in the daemon's directory holds at least `bytes` bytes.
pub fn wait_for_file(d: &Daemon, name: &str, bytes: u64) {
    assert!(
        wait_until(WAIT, || std::fs::metadata(d.path(name))
            .is_ok_and(|m| m.len() >= bytes)),
        "{name} did not reach {bytes} bytes\n{}",
        d.log_text()
    );
}

/// Writes `input` (48 kHz stereo s16) as in.wav, records the null sink's monitor with
/// `parec` (`rec_args`: its format flags) while `paplay` plays it, and returns what
/// parec wrote once everything played has passed the monitor.
pub fn record_monitor_while_playing(d: &Daemon, input: &[i16], rec_args: &[&str]) -> Vec<i16> {
    record_monitor_at(d, input, rec_args, 48000 * 4)
}

/// [`record_monitor_while_playing`] for a parec that records `bytes_per_second`.
pub fn record_monitor_at(
    d: &Daemon,
    input: &[i16],
    rec_args: &[&str],
    bytes_per_second: usize,
) -> Vec<i16> {
    write_wav_s16(&d.path("in.wav"), 48000, 2, input);
    let mut args = vec!["-d", "null-sink.monitor"];
    args.extend(rec_args);
    args.push("rec.raw");
    let outputs = || {
        pa_ok(d, &run_pa(d, "pactl", &["list", "short", "source-outputs"]))
            .lines()
            .count()
    };
    let before = outputs();
    let rec = spawn_pa(d, "parec", &args);
    assert!(
        wait_until(WAIT, || outputs() == before + 1),
        "parec's stream did not appear"
    );
    pa_ok(d, &run_pa(d, "paplay", &["in.wav"]));
    // Everything played has passed the monitor once the file holds it plus a margin.
    let played = input.len() / 2 * bytes_per_second / 48000;
    wait_for_file(d, "rec.raw", (played + bytes_per_second / 5) as u64);
    let out = interrupt(rec);
    assert!(
        out.status.success() || out.status.code().is_none(),
        "parec: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    read_raw_s16(&d.path("rec.raw"))
}

/// `pactl load-module ARGS` against `d`, which must succeed; returns the module index.
pub fn load_module(d: &Daemon, args: &[&str]) -> String {
    let mut a = vec!["load-module"];
    a.extend(args);
    pa_ok(d, &run_pa(d, "pactl", &a)).trim().to_string()
}

/// Writes `toml` as the daemon's config file in a directory for [`start_in`].
pub fn write_config(dir: &tempfile::TempDir, toml: &str) {
    let cfg = dir.path().join("config/quaver");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("quaver.toml"), toml).unwrap();
}

/// parec's format flags for the monitor tests: what `noise_s16` makes.
pub const REC_ARGS: &[&str] = &["--format=s16le", "--rate=48000", "--channels=2", "--raw"];

/// Starts quaverd (null device) in `dir`, has paplay play 1 s of noise while parec
/// (with `client_conf` as its client.conf) records the monitor, asserts parec got it
/// bit-exact and returns the daemon's log.
pub fn play_and_record(dir: tempfile::TempDir, client_conf: &str) -> String {
    let mut d = start_in(dir, &["--device", "null"]);
    std::fs::write(d.path("pulse-client.conf"), client_conf).unwrap();
    let input = noise_s16(48000 * 2, 23, 20000);
    let got = record_monitor_while_playing(&d, &input, REC_ARGS);
    let log = d.stop();
    assert_contains_exactly(&got, &input, "parec of what paplay played");
    log
}

/// The (in, out) byte counts of every connection whose srbchannel carried something.
pub fn srb_counts(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("srbchannel carried ")? + "srbchannel carried ".len()..];
            let mut w = rest.split_whitespace();
            let i = w.next()?.parse().ok()?;
            let o = w.nth(2)?.parse().ok()?;
            Some((i, o))
        })
        .collect()
}

/// (blocks, bytes, inline while full) of every connection whose pool carried blocks.
pub fn pool_counts(log: &str) -> Vec<(u64, u64, u64)> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("memfd pool carried ")? + "memfd pool carried ".len()..];
            let mut w = rest.split_whitespace();
            let blocks = w.next()?.parse().ok()?;
            let bytes = w.nth(1)?.trim_start_matches('(').parse().ok()?;
            let inline = w.nth(4)?.parse().ok()?;
            Some((blocks, bytes, inline))
        })
        .collect()
}

/// What parec recorded (1 s of noise and some silence) came through the pool whole.
pub fn assert_parec_used_the_pool(log: &str) {
    let counts = pool_counts(log);
    assert!(
        counts
            .iter()
            .any(|&(blocks, bytes, inline)| blocks > 1 && bytes >= 192_000 && inline == 0),
        "parec's audio did not come through the memfd pool: {counts:?}\n{log}"
    );
}

/// One frame as it arrived: descriptor fields and payload.
#[derive(Debug)]
pub struct Frame {
    pub channel: u32,
    /// High word of the offset (the block id of a release frame).
    pub offset_hi: u32,
    pub flags: u32,
    pub body: Vec<u8>,
}

impl Frame {
    /// Word `i` of a control packet made of 'L' (u32) tags: 0 is the command.
    pub fn word(&self, i: usize) -> u32 {
        u32::from_be_bytes(self.body[i * 5 + 1..i * 5 + 5].try_into().unwrap())
    }

    /// Word `i` of a shared-memory reference (block id, shm id, index, length).
    pub fn shm(&self, i: usize) -> u32 {
        u32::from_be_bytes(self.body[i * 4..i * 4 + 4].try_into().unwrap())
    }

    /// A control packet (a tagstruct).
    pub fn is_control(&self) -> bool {
        self.channel == u32::MAX && self.flags == 0
    }
}

/// Reads frames with `recvmsg`, keeping the descriptors that ride with them (in order),
/// for tests that take the server's memfds. Read the client's socket only through this.
#[derive(Default)]
pub struct FrameReader {
    bytes: Vec<u8>,
    pub fds: Vec<rustix::fd::OwnedFd>,
}

impl FrameReader {
    /// The next frame (bounded by the socket's read timeout).
    pub fn next(&mut self, sock: &std::os::unix::net::UnixStream) -> Frame {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
        loop {
            if self.bytes.len() >= 20 {
                let w = |i: usize| u32::from_be_bytes(self.bytes[i..i + 4].try_into().unwrap());
                let (channel, offset_hi, flags) = (w(4), w(8), w(16));
                // Release and revoke frames carry no payload whatever their length says.
                let len = if flags == 0x4000_0000 || flags == 0xC000_0000 {
                    0
                } else {
                    w(0) as usize
                };
                if self.bytes.len() >= 20 + len {
                    let body = self.bytes[20..20 + len].to_vec();
                    self.bytes.drain(..20 + len);
                    return Frame {
                        channel,
                        offset_hi,
                        flags,
                        body,
                    };
                }
            }
            let mut buf = [0u8; 65536];
            let mut space =
                [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(8))];
            let mut anc = RecvAncillaryBuffer::new(&mut space);
            let r = recvmsg(
                sock,
                &mut [std::io::IoSliceMut::new(&mut buf)],
                &mut anc,
                RecvFlags::CMSG_CLOEXEC,
            )
            .expect("reading frames (bounded by the socket's read timeout)");
            assert!(r.bytes > 0, "the server hung up");
            for m in anc.drain() {
                if let RecvAncillaryMessage::ScmRights(got) = m {
                    self.fds.extend(got);
                }
            }
            self.bytes.extend_from_slice(&buf[..r.bytes]);
        }
    }

    /// Frames up to the reply to `seq` (its payload after command and tag), handing the
    /// others to `other`.
    pub fn reply(
        &mut self,
        sock: &std::os::unix::net::UnixStream,
        seq: u32,
        mut other: impl FnMut(Frame),
    ) -> Vec<u8> {
        loop {
            let f = self.next(sock);
            if f.is_control() && f.word(0) == 2 && f.word(1) == seq {
                return f.body[10..].to_vec();
            }
            assert!(
                !(f.is_control() && f.word(0) == 0 && f.word(1) == seq),
                "request {seq} failed: error {}",
                f.word(2)
            );
            other(f);
        }
    }
}

/// The scheduling policy (0 normal, 1 SCHED_FIFO, 6 SCHED_DEADLINE) of the daemon's
/// thread named `name`, from /proc.
pub fn thread_policy(d: &Daemon, name: &str) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", d.pid())).ok()?;
    tasks.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim() != name {
            return None;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
        // Field 41 of stat; the fields after the command name start at field 3.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(38)?
            .parse()
            .ok()
    })
}
