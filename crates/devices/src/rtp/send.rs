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
use quaver_net::{ClockDrift, Encoding, PlayoutSteer, RtpHeader, SessionDescription};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Nothing to send for this long is a pause: the packet schedule starts over after it.
const PAUSE: Duration = Duration::from_millis(100);

/// A due packet's data this late is time the graph lost, not the phase of its writes
/// (those leave a packet or two waiting at most).
const LOST_AFTER: Duration = Duration::from_millis(8);

/// The sender's packet clock against its graph's: the graph runs on its driver's clock
/// (a sound card's crystal), packets leave on the monotonic clock, and a card a little
/// fast would fill the ring until it overflowed. The ring's level steers the packet
/// interval with the loop a receiver steers its playout with ([`PlayoutSteer`]), seeded
/// by the graph's rate against the monotonic clock measured from when its writes are
/// seen ([`ClockDrift`], as a receiver measures a sender from arrivals), so packets
/// leave evenly at the graph's pace and receivers see the card's clock, not ours.
struct GraphPace {
    steer: PlayoutSteer,
    drift: ClockDrift,
    rate: f64,
    channels: usize,
    /// Since when the graph's writes are timed (the stream's start or its last pause).
    start: Instant,
    /// Frames taken out of the ring, and the graph's total writes last seen.
    taken: u64,
    written: u64,
    last: Instant,
    /// Stream frames to send per frame of the monotonic clock.
    factor: f64,
}

impl GraphPace {
    fn new(rate: u32, channels: usize, target: usize) -> Self {
        let now = Instant::now();
        GraphPace {
            steer: PlayoutSteer::new(target, rate),
            drift: ClockDrift::new(rate as u64),
            rate: rate as f64,
            channels,
            start: now,
            taken: 0,
            written: 0,
            last: now,
            factor: 1.0,
        }
    }

    /// The stream paused: its writes are timed anew, the estimate of the clocks kept.
    fn restart(&mut self) {
        self.steer.restart();
        self.drift.restart();
        self.start = Instant::now();
        self.last = self.start;
        self.written = self.taken;
    }

    /// The schedule restarted after the ring ran dry: the packets' phase against the
    /// graph's writes is new, and so is the ring's mean level. The loop takes that level
    /// to hold; steered back to the old one instead, it bent the pace by a few hundred
    /// ppm for tens of seconds, which receivers read as the sender's clock.
    fn resync(&mut self) {
        self.steer.restart();
    }

    /// Looks at the ring (`slots` samples waiting) at `now`.
    fn observe(&mut self, slots: usize, now: Instant) {
        let level = slots / self.channels;
        let written = self.taken + level as u64;
        if written != self.written {
            self.written = written;
            let arrival = ((now - self.start).as_secs_f64() * self.rate) as u64;
            self.drift.update(arrival, written);
        }
        let dt = (now - self.last).as_secs_f64();
        self.last = now;
        if dt > 0.0 {
            self.factor = self.steer.update(level, dt, self.drift.ppm());
        }
    }
}

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
    /// The graph's transit ([`GraphTransit`]).
    transit: Arc<GraphTransit>,
}

/// When the graph's last write came, minus the time of the frames it had written by
/// then, in nanoseconds of the monotonic clock since `base`: constant while the graph
/// keeps time, up by whatever time it loses (its driver's xrun). Stamped by the RT
/// side at each write (a vDSO clock read and a relaxed store), so the network
/// thread's own lateness does not count.
struct GraphTransit {
    base: Instant,
    ns: AtomicI64,
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

    /// The graph lost `lost` (its writes came that much later than its frames' count
    /// says: its driver's xrun, measured across a stall) and the packets now leave
    /// `slip` behind their schedule. Past [`LOST_AFTER`] both, the timestamps skip the
    /// slip in whole packets, so receivers conceal the gap and keep their delay. Sent on
    /// with the timestamps unbroken, the stream would reach them late by the gap: each
    /// sender xrun took ~30 ms off a receiver's buffer until it underran. The slip, not
    /// the time lost: what the ring held when the graph stalled carried the packets
    /// through part of it (skipped by the time lost, a receiver's buffer gained 21 ms).
    fn skip_lost(&mut self, lost: Duration, slip: Duration) {
        if lost > LOST_AFTER && slip > LOST_AFTER {
            let packets =
                (slip.as_secs_f64() * self.rate as f64 / self.frames as f64).round() as u32;
            self.header.timestamp = self
                .header
                .timestamp
                .wrapping_add(packets.wrapping_mul(self.frames as u32));
            tracing::debug!(
                "rtp-send to {}: the graph lost {:.1} ms, packets {:.1} ms behind; \
                 timestamps skip {packets} packets",
                self.dest,
                lost.as_secs_f64() * 1e3,
                slip.as_secs_f64() * 1e3
            );
        }
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
        let mut pace = GraphPace::new(self.rate, self.channels, self.frames * 2);
        // Since when a due packet has found the ring empty, and the graph's transit then.
        let mut starved: Option<(Instant, i64)> = None;
        while !self.stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_sap {
                self.announce(false);
                next_sap += SAP_INTERVAL;
            }
            // Late packets (this thread was held up) leave at once.
            while due.is_none_or(|d| d <= Instant::now()) {
                let Ok(chunk) = self.samples.read_chunk(per_packet) else {
                    // Due but not there: the graph is behind the schedule (it lost
                    // time in an xrun, or its clock is slower). The schedule restarts
                    // from the packet's arrival; sent in a burst instead, the packets
                    // after it would reach receivers late by the gap, as jitter.
                    starved
                        .get_or_insert((Instant::now(), self.transit.ns.load(Ordering::Relaxed)));
                    break;
                };
                let (a, b) = chunk.as_slices();
                samples[..a.len()].copy_from_slice(a);
                samples[a.len()..].copy_from_slice(b);
                chunk.commit_all();
                pace.taken += self.frames as u64;
                if let Some((_, before)) = starved.take() {
                    let now = Instant::now();
                    let slip = due.map_or(Duration::ZERO, |d| now.saturating_duration_since(d));
                    due = Some(now);
                    pace.resync();
                    let lost_ns = self.transit.ns.load(Ordering::Relaxed) - before;
                    self.skip_lost(Duration::from_nanos(lost_ns.max(0) as u64), slip);
                }
                self.send(&samples, &mut payload, &mut packet);
                due = Some(due.unwrap_or_else(Instant::now) + ptime.div_f64(pace.factor));
            }
            let now = Instant::now();
            if due.is_some() {
                pace.observe(self.samples.slots(), now);
            }
            let sleep = match (due, starved) {
                (Some(d), _) if d > now => (d - now).min(STOP_POLL),
                (Some(_), Some((s, _))) if now - s > PAUSE => {
                    (due, starved) = (None, None);
                    pace.restart();
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
    transit: Arc<GraphTransit>,
    /// Frames the graph has written, for [`GraphTransit`].
    written: u64,
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
        let transit = Arc::new(GraphTransit {
            base: Instant::now(),
            ns: AtomicI64::new(0),
        });
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
            transit: transit.clone(),
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
            transit,
            written: 0,
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
        self.written += frames as u64;
        let at = self.transit.base.elapsed().as_nanos() as i64;
        let played = (self.written as u128 * 1_000_000_000 / self.info.rate as u128) as i64;
        self.transit.ns.store(at - played, Ordering::Relaxed);
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
