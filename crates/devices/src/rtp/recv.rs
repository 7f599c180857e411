//! `rtp-recv`: a source that plays an RTP stream.
//!
//! The network thread receives datagrams (non-blocking, waiting in `poll`) and hands
//! each, with its source address and arrival time, to the RT side through a byte ring as
//! one record; the RT side parses them into the [`JitterBuffer`] and pulls each cycle's
//! frames from it. Parsing and the jitter buffer allocate nothing, so the RT side stays
//! within its contract.

use super::common::{MAX_PAYLOAD, NetCounters, STOP_POLL, bind_shared, now_ns, packet_frames};
use super::playout::Playout;
use super::status::{NetHandle, RecvLive};
use crate::clock::RealClock;
use crate::pacer::Pacer;
use crate::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus, check_format};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_net::{Encoding, JitterBuffer, JitterConfig, JitterStats, Push, RtpPacket};
use rustix::event::{PollFd, PollFlags};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The longest datagram handed to the RT side (longer ones are dropped and counted).
const MAX_DATAGRAM: usize = 2048;

/// A record's header in the ring: length (2 bytes), address (16, IPv4 mapped), port (2),
/// arrival time (8, monotonic ns).
const RECORD_HEAD: usize = 28;

/// How to open an [`RtpRecv`].
#[derive(Debug, Clone, PartialEq)]
pub struct RtpRecvConfig {
    /// The address and port to listen on; a multicast address joins that group.
    pub listen: SocketAddr,
    /// The only sender taken, when set.
    pub source: Option<IpAddr>,
    /// The payload encoding.
    pub encoding: Encoding,
    /// The stream's sample rate in Hz (its RTP clock).
    pub rate: u32,
    /// The rate the device runs at (the engine's): the stream is resampled from `rate`
    /// when they differ (PulseAudio sends 44.1 kHz by default).
    pub device_rate: u32,
    /// Channels received.
    pub channels: ChannelMap,
    /// RTP payload type expected.
    pub payload_type: u8,
    /// The jitter buffer's target delay in microseconds.
    pub latency_us: u32,
    /// Device name.
    pub name: String,
}

/// Network side of an [`RtpRecv`].
struct Receiver {
    socket: UdpSocket,
    records: rtrb::Producer<u8>,
    stop: Arc<AtomicBool>,
    counters: Arc<NetCounters>,
}

impl Receiver {
    fn run(mut self) {
        let mut buf = vec![0u8; 65_536];
        while !self.stop.load(Ordering::Relaxed) {
            let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
            let timeout = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: STOP_POLL.as_nanos() as i64,
            };
            if rustix::event::poll(&mut fds, Some(&timeout)).is_err() {
                continue;
            }
            loop {
                match self.socket.recv_from(&mut buf) {
                    Ok((n, from)) => self.hand_over(&buf[..n], from),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        if self.counters.errors.load(Ordering::Relaxed) == 0 {
                            tracing::warn!("rtp-recv: {e}");
                        }
                        NetCounters::add(&self.counters.errors);
                        break;
                    }
                }
            }
        }
    }

    fn hand_over(&mut self, data: &[u8], from: SocketAddr) {
        NetCounters::add(&self.counters.packets);
        if data.len() > MAX_DATAGRAM {
            NetCounters::add(&self.counters.dropped);
            return;
        }
        let Ok(chunk) = self.records.write_chunk_uninit(RECORD_HEAD + data.len()) else {
            NetCounters::add(&self.counters.dropped);
            return;
        };
        let ip = match from.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        let head = (data.len() as u16)
            .to_ne_bytes()
            .into_iter()
            .chain(ip.octets())
            .chain(from.port().to_ne_bytes())
            .chain(now_ns().to_ne_bytes());
        chunk.fill_from_iter(head.chain(data.iter().copied()));
    }
}

/// A source that plays a received RTP stream.
pub struct RtpRecv {
    info: DeviceInfo,
    pacer: Pacer,
    counters: DeviceCounters,
    records: rtrb::Consumer<u8>,
    jitter: JitterBuffer,
    /// Direct or resampled, steered to the sender's clock.
    playout: Playout,
    /// The stream's rate (the jitter buffer's and the arrival times' unit).
    stream_rate: u32,
    packet: Vec<u8>,
    interleaved: Vec<f32>,
    malformed: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    net: Arc<NetCounters>,
    local: SocketAddr,
    /// The live figures `quaver status` reads, and the handle reading them.
    live: Arc<RecvLive>,
    handle: NetHandle,
}

impl RtpRecv {
    /// Binds the socket (joining the group for a multicast address) and starts the
    /// network thread. *control*.
    pub fn open(cfg: RtpRecvConfig) -> Result<Self, DeviceError> {
        check_format(&cfg.name, cfg.rate, &cfg.channels)?;
        check_format(&cfg.name, cfg.device_rate, &cfg.channels)?;
        let channels = cfg.channels.len();
        let target = packet_frames(cfg.rate, cfg.latency_us);
        let playout = Playout::new(cfg.rate, cfg.device_rate, channels, target).map_err(|e| {
            DeviceError::BadSpec {
                spec: cfg.name.clone(),
                reason: e.to_string(),
            }
        })?;
        // Interleaved scratch for one pull from the jitter buffer.
        let scratch = playout.max_pull_input().max(8192);
        // Any packet time whose packets fit one datagram.
        let max_packet = MAX_PAYLOAD / (cfg.encoding.bytes() * channels);
        let io = |source| DeviceError::Io {
            device: cfg.name.clone(),
            source,
        };
        // A group is shared: several senders may use one group and port (told apart
        // by `source`), and other receivers on this host may listen to it too.
        let socket = if cfg.listen.ip().is_multicast() {
            bind_shared(cfg.listen)
        } else {
            UdpSocket::bind(cfg.listen)
        }
        .map_err(io)?;
        let local = socket.local_addr().map_err(io)?;
        match cfg.listen.ip() {
            IpAddr::V4(g) if g.is_multicast() => socket
                .join_multicast_v4(&g, &Ipv4Addr::UNSPECIFIED)
                .map_err(io)?,
            IpAddr::V6(g) if g.is_multicast() => socket.join_multicast_v6(&g, 0).map_err(io)?,
            _ => {}
        }
        socket.set_nonblocking(true).map_err(io)?;
        // Room for bursts while the network thread is not scheduled (best effort: the
        // kernel caps it at net.core.rmem_max).
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&socket, 1 << 20);
        let jitter = JitterBuffer::new(JitterConfig {
            encoding: cfg.encoding,
            channels,
            payload_type: cfg.payload_type,
            target,
            max_packet,
            // Room for a second of audio beyond the target: a sender far ahead is a jump.
            capacity: cfg.rate as usize,
            fade: (cfg.rate / 1000) as usize,
            excess: Some((cfg.rate as f64 * quaver_net::EXCESS_S) as usize),
            source: cfg.source,
        })
        .map_err(|e| DeviceError::BadSpec {
            spec: cfg.name.clone(),
            reason: e.to_string(),
        })?;
        // Records for a quarter of a second of packets of the longest size accepted.
        let (producer, consumer) = rtrb::RingBuffer::new(256 * (RECORD_HEAD + MAX_DATAGRAM));
        let stop = Arc::new(AtomicBool::new(false));
        let net = Arc::new(NetCounters::default());
        let receiver = Receiver {
            socket,
            records: producer,
            stop: stop.clone(),
            counters: net.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("rtp-recv {}", cfg.listen))
            .spawn(move || receiver.run())
            .map_err(io)?;
        let resampled = if cfg.rate != cfg.device_rate {
            format!(", resampled to {} Hz", cfg.device_rate)
        } else {
            String::new()
        };
        let info = DeviceInfo {
            description: format!(
                "RTP receiver on {} ({} {} Hz, {} ch, payload type {}, {} µs jitter buffer{resampled})",
                cfg.listen, cfg.encoding, cfg.rate, channels, cfg.payload_type, cfg.latency_us
            ),
            rate: cfg.device_rate,
            playback: None,
            capture: Some(cfg.channels.clone()),
            freewheel: false,
            name: cfg.name,
        };
        let live = Arc::new(RecvLive::default());
        let handle = NetHandle::recv(
            live.clone(),
            net.clone(),
            Arc::new(Mutex::new(None)),
            local,
            cfg.rate,
            target,
        );
        Ok(RtpRecv {
            live,
            handle,
            pacer: Pacer::new(info.rate, Box::new(RealClock)),
            info,
            counters: DeviceCounters::default(),
            records: consumer,
            jitter,
            playout,
            stream_rate: cfg.rate,
            packet: vec![0; MAX_DATAGRAM],
            interleaved: vec![0.0; scratch * channels],
            malformed: 0,
            stop,
            thread: Some(thread),
            net,
            local,
        })
    }

    /// The address the socket is bound to (the port, when the spec asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Names the session played (its SDP name, when found by SAP) for `quaver status`.
    pub fn set_session(&self, name: &str) {
        self.handle.set_session(name);
    }

    /// Steers at `factor` (stream frames consumed per frame played) from the next read
    /// on, as if the playout loop had engaged and said so: for tests and benchmarks of
    /// the resampled path and of the switch to it. *control*, before the device goes
    /// to the real-time thread.
    #[doc(hidden)]
    pub fn force_steering(&mut self, factor: f64) {
        self.playout.forced = Some(factor);
    }

    /// Whether reads go through the resampler.
    #[cfg(test)]
    pub(super) fn playout_resampling(&self) -> bool {
        self.playout.resampling()
    }

    /// The jitter buffer's counters, and the datagrams that were not RTP at all.
    pub fn stats(&self) -> (JitterStats, u64) {
        (self.jitter.stats(), self.malformed)
    }

    /// Datagrams received, receive errors, and datagrams dropped before the jitter buffer
    /// (ring full, too long).
    pub fn received(&self) -> (u64, u64, u64) {
        (
            self.net.packets.load(Ordering::Relaxed),
            self.net.errors.load(Ordering::Relaxed),
            self.net.dropped.load(Ordering::Relaxed),
        )
    }

    /// Moves every datagram the network thread handed over into the jitter buffer. *RT*.
    fn drain(&mut self) {
        let rate = self.stream_rate as u128;
        loop {
            let mut head = [0u8; RECORD_HEAD];
            // Records are committed whole: a head present means its datagram is too.
            let Ok(chunk) = self.records.read_chunk(RECORD_HEAD) else {
                return;
            };
            let (a, b) = chunk.as_slices();
            head[..a.len()].copy_from_slice(a);
            head[a.len()..].copy_from_slice(b);
            chunk.commit_all();
            let len = u16::from_ne_bytes([head[0], head[1]]) as usize;
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&head[2..18]);
            let ip = Ipv6Addr::from(ip);
            let from = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
            let port = u16::from_ne_bytes([head[18], head[19]]);
            let mut ns = [0u8; 8];
            ns.copy_from_slice(&head[20..28]);
            let arrival = (u64::from_ne_bytes(ns) as u128 * rate / 1_000_000_000) as u64;
            let Ok(chunk) = self.records.read_chunk(len) else {
                return;
            };
            let (a, b) = chunk.as_slices();
            self.packet[..a.len()].copy_from_slice(a);
            self.packet[a.len()..len].copy_from_slice(b);
            chunk.commit_all();
            match RtpPacket::parse(&self.packet[..len]) {
                Ok(p) => {
                    if matches!(
                        self.jitter.push(&p, from, arrival),
                        Push::Accepted | Push::Restarted
                    ) {
                        self.live.set_remote(ip, port);
                    }
                }
                Err(_) => self.malformed += 1,
            }
        }
    }
}

impl Device for RtpRecv {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn start(&mut self, _quantum: usize) -> Result<(), DeviceError> {
        self.pacer.start();
        Ok(())
    }

    fn wait(&mut self, quantum: usize) -> Result<WaitStatus, DeviceError> {
        Ok(self
            .pacer
            .wait_device(quantum, &mut self.counters, false, true))
    }

    fn write(&mut self, _buf: Planar<'_>) -> Result<(), DeviceError> {
        Ok(())
    }

    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        self.drain();
        self.playout
            .read(&mut self.jitter, &mut self.interleaved, buf);
        let stats = self.jitter.stats();
        self.live
            .publish(&stats, self.malformed, self.playout.steering_ppm());
        self.counters.underruns = stats.underruns;
        self.counters.frames_read += buf.frames() as u64;
        Ok(())
    }

    fn suspend(&mut self) {
        self.pacer.stop();
    }

    fn playback_delay(&self) -> usize {
        0
    }

    /// What the jitter buffer holds ahead of the play position (and the resampler's
    /// filter delay), in the device's frames.
    fn capture_delay(&self) -> usize {
        let buffered =
            self.jitter.stats().buffered * self.info.rate as u64 / self.stream_rate as u64;
        buffered as usize + self.playout.delay_frames()
    }

    fn fades_in_on_start(&self) -> bool {
        false
    }

    fn periods_in_flight(&self) -> usize {
        1
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }

    fn net(&self) -> Option<NetHandle> {
        Some(self.handle.clone())
    }

    fn wakeup_lateness_ns(&self) -> Option<u64> {
        Some(self.pacer.last_lateness_ns)
    }

    fn close(&mut self) -> Result<(), DeviceError> {
        self.pacer.stop();
        let (st, malformed) = self.stats();
        let (datagrams, errors, dropped) = self.received();
        tracing::info!(
            "{}: {datagrams} datagrams ({errors} receive errors, {dropped} dropped before \
             the jitter buffer, {malformed} not RTP); {} accepted, {} lost, {} concealed \
             frames, {} underruns, {} late, {} duplicates, {} jumps, {} from another SSRC, \
             {} from another source, {} of another type, {} malformed, {} restarts; \
             jitter {:.1} frames",
            self.info.name,
            st.accepted,
            st.lost,
            st.concealed,
            st.underruns,
            st.late,
            st.duplicates,
            st.jumps,
            st.wrong_ssrc,
            st.wrong_source,
            st.wrong_type,
            st.malformed,
            st.restarts,
            st.jitter
        );
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Ok(())
    }
}

impl Drop for RtpRecv {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
