//! `rtp-send`: a sink whose playback is sent as an RTP stream.
//!
//! The RT side interleaves each cycle into a sample ring; the network thread takes whole
//! packets (`ptime` each) out of it, encodes them and sends them one packet time apart.
//! RTP timestamps count the frames sent, so they stay continuous across pauses (the
//! receiver's jitter buffer refills after one).

use super::common::{NetCounters, STOP_POLL, check_packet, packet_frames, random_u64};
use super::sap::{Announcer, SAP_INTERVAL};
use super::status::NetHandle;
use crate::clock::RealClock;
use crate::pacer::Pacer;
use crate::{Device, DeviceCounters, DeviceError, DeviceInfo, WaitStatus, check_format};
use quaver_dsp::{ChannelMap, Planar, PlanarMut};
use quaver_net::{Encoding, RtpHeader, SessionDescription};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Nothing to send for this long is a pause: the packet schedule starts over after it.
const PAUSE: Duration = Duration::from_millis(100);

/// How to open an [`RtpSend`].
#[derive(Debug, Clone, PartialEq)]
pub struct RtpSendConfig {
    /// Where packets go: a multicast group or a unicast host, and a port.
    pub dest: SocketAddr,
    /// The payload encoding.
    pub encoding: Encoding,
    /// Sample rate in Hz (the RTP clock rate).
    pub rate: u32,
    /// Channels sent.
    pub channels: ChannelMap,
    /// Packet time in microseconds (1000 = 1 ms, AES67's default).
    pub ptime_us: u32,
    /// RTP payload type.
    pub payload_type: u8,
    /// Multicast TTL (hops).
    pub ttl: u32,
    /// The group the stream is announced to by SAP (IPv4 only); `None`: not announced.
    pub sap: Option<std::net::Ipv4Addr>,
    /// Device name.
    pub name: String,
}

/// The SDP of `cfg`'s stream (the announcer fills in the origin and session id).
fn describe(cfg: &RtpSendConfig) -> SessionDescription {
    SessionDescription {
        session_id: 0,
        session_version: 0,
        origin: cfg.dest.ip(),
        name: cfg.name.clone(),
        address: cfg.dest.ip(),
        ttl: cfg
            .dest
            .ip()
            .is_multicast()
            .then_some(cfg.ttl.min(255) as u8),
        port: cfg.dest.port(),
        payload_type: cfg.payload_type,
        encoding: cfg.encoding,
        rate: cfg.rate,
        channels: cfg.channels.len() as u16,
        ptime_us: Some(cfg.ptime_us),
        ts_refclk: None,
        mediaclk: None,
    }
}

/// Network side of an [`RtpSend`].
struct Sender {
    socket: UdpSocket,
    dest: SocketAddr,
    samples: rtrb::Consumer<f32>,
    encoding: Encoding,
    channels: usize,
    frames: usize,
    rate: u32,
    header: RtpHeader,
    stop: Arc<AtomicBool>,
    counters: Arc<NetCounters>,
    sap: Option<Announcer>,
}

impl Sender {
    fn announce(&self, delete: bool) {
        if let Some(a) = &self.sap {
            let packet = if delete { &a.delete } else { &a.announce };
            if let Err(e) = self.socket.send_to(packet, a.group) {
                tracing::debug!("rtp-send: SAP to {}: {e}", a.group);
            }
        }
    }

    /// Encodes and sends one packet's samples.
    fn send(&mut self, samples: &[f32], payload: &mut [u8], packet: &mut [u8]) {
        // Sizes were fixed together at open: neither call can fail.
        let _ = self.encoding.encode(samples, payload);
        let Ok(n) = self.header.write(payload, packet) else {
            return;
        };
        match self.socket.send_to(&packet[..n], self.dest) {
            Ok(sent) => {
                NetCounters::add(&self.counters.packets);
                self.counters
                    .bytes
                    .fetch_add(sent as u64, Ordering::Relaxed);
            }
            Err(e) => {
                if self.counters.errors.load(Ordering::Relaxed) == 0 {
                    tracing::warn!("rtp-send to {}: {e}", self.dest);
                }
                NetCounters::add(&self.counters.errors);
            }
        }
        self.header.sequence = self.header.sequence.wrapping_add(1);
        self.header.timestamp = self.header.timestamp.wrapping_add(self.frames as u32);
    }

    fn run(mut self) {
        let per_packet = self.frames * self.channels;
        let mut samples = vec![0.0f32; per_packet];
        let mut payload = vec![0u8; per_packet * self.encoding.bytes()];
        let mut packet = vec![0u8; 12 + payload.len()];
        let ptime = Duration::from_nanos(self.frames as u64 * 1_000_000_000 / self.rate as u64);
        // Half a packet time between looks while the ring is empty.
        let nap = (ptime / 2).max(Duration::from_micros(100)).min(STOP_POLL);
        // When the next packet is due: packets leave one packet time apart, not in a
        // burst per engine cycle, so a receiver sees the jitter of the network only.
        // None after a pause (nothing to send for PAUSE): the next packet starts anew.
        let mut due: Option<Instant> = None;
        let mut next_sap = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_sap {
                self.announce(false);
                next_sap += SAP_INTERVAL;
            }
            // Late packets (the engine or this thread was held up) leave at once.
            while due.is_none_or(|d| d <= Instant::now()) {
                let Ok(chunk) = self.samples.read_chunk(per_packet) else {
                    break;
                };
                let (a, b) = chunk.as_slices();
                samples[..a.len()].copy_from_slice(a);
                samples[a.len()..].copy_from_slice(b);
                chunk.commit_all();
                self.send(&samples, &mut payload, &mut packet);
                due = Some(due.unwrap_or_else(Instant::now) + ptime);
            }
            let now = Instant::now();
            let sleep = match due {
                Some(d) if d > now => (d - now).min(STOP_POLL),
                Some(d) if now - d > PAUSE => {
                    due = None;
                    nap
                }
                _ => nap,
            };
            std::thread::sleep(sleep);
        }
        self.announce(true);
    }
}

/// A sink that sends its playback as RTP.
pub struct RtpSend {
    info: DeviceInfo,
    pacer: Pacer,
    counters: DeviceCounters,
    samples: rtrb::Producer<f32>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    net: Arc<NetCounters>,
    handle: NetHandle,
    last_write: usize,
}

impl RtpSend {
    /// Opens the socket and starts the network thread. *control*.
    pub fn open(cfg: RtpSendConfig) -> Result<Self, DeviceError> {
        check_format(&cfg.name, cfg.rate, &cfg.channels)?;
        let channels = cfg.channels.len();
        let frames = packet_frames(cfg.rate, cfg.ptime_us);
        check_packet(&cfg.name, cfg.encoding, channels, frames)?;
        let io = |source| DeviceError::Io {
            device: cfg.name.clone(),
            source,
        };
        let bind: SocketAddr = if cfg.dest.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal")
        } else {
            "[::]:0".parse().expect("literal")
        };
        let socket = UdpSocket::bind(bind).map_err(io)?;
        socket.set_nonblocking(true).map_err(io)?;
        if cfg.dest.ip().is_multicast() {
            if cfg.dest.is_ipv4() {
                socket.set_multicast_ttl_v4(cfg.ttl).map_err(io)?;
                socket.set_multicast_loop_v4(true).map_err(io)?;
            }
        } else if cfg.dest.is_ipv4() {
            socket.set_ttl(cfg.ttl.max(1)).map_err(io)?;
        }
        // A quarter of a second of audio between the RT side and the network thread.
        let (producer, consumer) =
            rtrb::RingBuffer::new((cfg.rate as usize / 4).max(frames * 4) * channels);
        let r = random_u64();
        let header = RtpHeader::new(
            cfg.payload_type,
            r as u16,
            (r >> 16) as u32,
            (r >> 48) as u32 ^ 0x5157_0000,
        );
        let stop = Arc::new(AtomicBool::new(false));
        let net = Arc::new(NetCounters::default());
        let announcer = cfg
            .sap
            .and_then(|group| Announcer::new(describe(&cfg), group));
        let handle = NetHandle::send(net.clone(), cfg.dest, announcer.as_ref().map(|a| a.group));
        let sender = Sender {
            socket,
            dest: cfg.dest,
            samples: consumer,
            encoding: cfg.encoding,
            channels,
            frames,
            rate: cfg.rate,
            header,
            stop: stop.clone(),
            counters: net.clone(),
            sap: announcer,
        };
        let thread = std::thread::Builder::new()
            .name(format!("rtp-send {}", cfg.dest))
            .spawn(move || sender.run())
            .map_err(io)?;
        let info = DeviceInfo {
            description: format!(
                "RTP sender to {} ({} {} Hz, {} ch, {} µs packets, payload type {})",
                cfg.dest, cfg.encoding, cfg.rate, channels, cfg.ptime_us, cfg.payload_type
            ),
            rate: cfg.rate,
            playback: Some(cfg.channels.clone()),
            capture: None,
            freewheel: false,
            name: cfg.name,
        };
        Ok(RtpSend {
            pacer: Pacer::new(info.rate, Box::new(RealClock)),
            info,
            counters: DeviceCounters::default(),
            samples: producer,
            stop,
            thread: Some(thread),
            net,
            handle,
            last_write: 0,
        })
    }

    /// Packets sent and send errors so far.
    pub fn sent(&self) -> (u64, u64) {
        (
            self.net.packets.load(Ordering::Relaxed),
            self.net.errors.load(Ordering::Relaxed),
        )
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Device for RtpSend {
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
            .wait_device(quantum, &mut self.counters, true, false))
    }

    fn write(&mut self, buf: Planar<'_>) -> Result<(), DeviceError> {
        let ch = buf.channels();
        let frames = buf.frames();
        self.last_write = frames;
        // The network thread fell behind by a quarter second: this cycle is lost.
        let Ok(chunk) = self.samples.write_chunk_uninit(frames * ch) else {
            self.counters.overruns += 1;
            return Ok(());
        };
        chunk.fill_from_iter((0..frames).flat_map(|f| (0..ch).map(move |c| buf.channel(c)[f])));
        self.counters.frames_written += frames as u64;
        Ok(())
    }

    fn read(&mut self, buf: &mut PlanarMut<'_>) -> Result<(), DeviceError> {
        buf.fill_silence();
        Ok(())
    }

    fn suspend(&mut self) {
        self.pacer.stop();
    }

    fn playback_delay(&self) -> usize {
        self.last_write
    }

    fn capture_delay(&self) -> usize {
        0
    }

    /// What is sent must arrive as it was played (a receiver may check it bit-exact).
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
        self.stop_thread();
        let (sent, errors) = self.sent();
        tracing::info!(
            "{}: {sent} packets sent, {errors} send errors, {} cycles dropped (ring full)",
            self.info.name,
            self.counters.overruns
        );
        Ok(())
    }
}

impl Drop for RtpSend {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
