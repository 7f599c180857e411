//! Live figures of the RTP devices for `quaver status` (docs/net.md, "Watching a
//! stream"): the receiver's RT side copies its jitter buffer's counters into atomics
//! once per cycle (relaxed stores, nothing else), the network threads count datagrams;
//! a [`NetHandle`], taken on the control side when the device opens, reads them from any
//! thread. Figures from different atomics may be a cycle apart, never torn.

use super::common::NetCounters;
use quaver_net::JitterStats;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// What a network device reports, read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub enum NetStatus {
    /// An `rtp-recv` device.
    RtpRecv(RtpRecvStatus),
    /// An `rtp-send` device.
    RtpSend(RtpSendStatus),
}

/// An RTP receiver's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct RtpRecvStatus {
    /// The address and port it listens on (a multicast group, or a local address).
    pub listen: SocketAddr,
    /// Where the stream's packets come from (the latest accepted packet's sender).
    pub remote: Option<SocketAddr>,
    /// The session's SDP name, when the stream was found by SAP.
    pub session: Option<String>,
    /// Datagrams the socket received (every one, RTP or not).
    pub datagrams: u64,
    /// Packets whose frames went into the jitter buffer.
    pub packets: u64,
    /// Packets expected from the sequence numbers and never accepted (RFC 3550).
    pub lost: u64,
    /// Packets that came after their frames had played.
    pub late: u64,
    /// Everything else dropped: not RTP, from another source, SSRC or payload type,
    /// malformed, duplicated, timestamp jumps, too long or no room in the ring.
    pub dropped: u64,
    /// Frames played while missing (concealed).
    pub concealed_frames: u64,
    /// Times the jitter buffer ran dry and filled up again.
    pub underruns: u64,
    /// Times the stream started over (a sender restart, a new SSRC).
    pub restarts: u64,
    /// RFC 3550 interarrival jitter, ms.
    pub jitter_ms: f64,
    /// The jitter buffer's target delay, ms.
    pub target_ms: f64,
    /// What the jitter buffer holds ahead of the play position now, ms.
    pub delay_ms: f64,
    /// The sender's clock against ours, minus one, ppm (positive: the sender runs
    /// fast), as measured from the packets' arrival times; `None` in the first seconds.
    pub drift_ppm: Option<f64>,
    /// Once the receiver resamples to follow the sender's clock: the playout loop's
    /// estimate of that clock against ours, ppm; `None` while it plays the stream as it
    /// comes (bit-exact).
    pub steered_ppm: Option<f64>,
}

/// An RTP sender's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct RtpSendStatus {
    /// Where packets go.
    pub dest: SocketAddr,
    /// The SAP group the stream is announced to, `None` when not announced.
    pub sap: Option<SocketAddr>,
    /// Packets sent.
    pub packets: u64,
    /// Bytes sent (RTP headers and payloads).
    pub bytes: u64,
    /// Sends that failed.
    pub errors: u64,
}

/// The receiver's figures the RT side writes ([`RecvLive::publish`]).
#[derive(Debug, Default)]
pub(crate) struct RecvLive {
    accepted: AtomicU64,
    lost: AtomicU64,
    late: AtomicU64,
    dropped: AtomicU64,
    concealed: AtomicU64,
    underruns: AtomicU64,
    restarts: AtomicU64,
    /// f64 bits.
    jitter: AtomicU64,
    buffered: AtomicU64,
    /// f64 bits; NaN for none.
    drift: AtomicU64,
    /// f64 bits; NaN while not steered.
    steered: AtomicU64,
    /// The latest accepted packet's sender, IPv6 (IPv4 mapped) in two halves, and its
    /// port with bit 16 set once there is one.
    remote_hi: AtomicU64,
    remote_lo: AtomicU64,
    remote_port: AtomicU32,
    /// Datagrams the RT side found not to be RTP at all.
    malformed: AtomicU64,
}

impl RecvLive {
    /// Copies the jitter buffer's counters. *RT*: relaxed stores only.
    pub(crate) fn publish(&self, st: &JitterStats, malformed: u64, steered_ppm: Option<f64>) {
        let dropped = st.wrong_source
            + st.wrong_type
            + st.malformed
            + st.wrong_ssrc
            + st.duplicates
            + st.jumps;
        self.accepted.store(st.accepted, Relaxed);
        self.lost.store(st.lost, Relaxed);
        self.late.store(st.late, Relaxed);
        self.dropped.store(dropped, Relaxed);
        self.concealed.store(st.concealed, Relaxed);
        self.underruns.store(st.underruns, Relaxed);
        self.restarts.store(st.restarts, Relaxed);
        self.jitter.store(st.jitter.to_bits(), Relaxed);
        self.buffered.store(st.buffered, Relaxed);
        self.drift
            .store(st.drift_ppm.unwrap_or(f64::NAN).to_bits(), Relaxed);
        self.malformed.store(malformed, Relaxed);
        self.steered
            .store(steered_ppm.unwrap_or(f64::NAN).to_bits(), Relaxed);
    }

    /// Notes the sender of an accepted packet. *RT*: relaxed stores only.
    pub(crate) fn set_remote(&self, ip: Ipv6Addr, port: u16) {
        let v = u128::from(ip);
        self.remote_hi.store((v >> 64) as u64, Relaxed);
        self.remote_lo.store(v as u64, Relaxed);
        self.remote_port.store(0x1_0000 | port as u32, Relaxed);
    }

    fn remote(&self) -> Option<SocketAddr> {
        let port = self.remote_port.load(Relaxed);
        if port & 0x1_0000 == 0 {
            return None;
        }
        let v = (self.remote_hi.load(Relaxed) as u128) << 64 | self.remote_lo.load(Relaxed) as u128;
        let ip = Ipv6Addr::from(v);
        let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
        Some(SocketAddr::new(ip, port as u16))
    }
}

/// Reads a network device's live figures from any thread; clones share them. Taken
/// with [`crate::Device::net`] before the device goes to the real-time thread.
#[derive(Debug, Clone)]
pub struct NetHandle(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Recv {
        live: Arc<RecvLive>,
        net: Arc<NetCounters>,
        session: Arc<Mutex<Option<String>>>,
        listen: SocketAddr,
        /// Frames per ms of the stream (the jitter buffer's unit).
        frames_per_ms: f64,
        target_frames: usize,
    },
    Send {
        net: Arc<NetCounters>,
        dest: SocketAddr,
        sap: Option<SocketAddr>,
    },
}

impl NetHandle {
    pub(crate) fn recv(
        live: Arc<RecvLive>,
        net: Arc<NetCounters>,
        session: Arc<Mutex<Option<String>>>,
        listen: SocketAddr,
        rate: u32,
        target_frames: usize,
    ) -> Self {
        NetHandle(Kind::Recv {
            live,
            net,
            session,
            listen,
            frames_per_ms: rate as f64 / 1000.0,
            target_frames,
        })
    }

    pub(crate) fn send(net: Arc<NetCounters>, dest: SocketAddr, sap: Option<SocketAddr>) -> Self {
        NetHandle(Kind::Send { net, dest, sap })
    }

    /// The figures now.
    pub fn status(&self) -> NetStatus {
        match &self.0 {
            Kind::Recv {
                live,
                net,
                session,
                listen,
                frames_per_ms,
                target_frames,
            } => {
                let ms = |frames: f64| frames / frames_per_ms;
                let drift = f64::from_bits(live.drift.load(Relaxed));
                let steered = f64::from_bits(live.steered.load(Relaxed));
                NetStatus::RtpRecv(RtpRecvStatus {
                    listen: *listen,
                    remote: live.remote(),
                    session: session.lock().expect("poisoned").clone(),
                    datagrams: net.packets.load(Relaxed),
                    packets: live.accepted.load(Relaxed),
                    lost: live.lost.load(Relaxed),
                    late: live.late.load(Relaxed),
                    dropped: live.dropped.load(Relaxed)
                        + live.malformed.load(Relaxed)
                        + net.dropped.load(Relaxed),
                    concealed_frames: live.concealed.load(Relaxed),
                    underruns: live.underruns.load(Relaxed),
                    restarts: live.restarts.load(Relaxed),
                    jitter_ms: ms(f64::from_bits(live.jitter.load(Relaxed))),
                    target_ms: ms(*target_frames as f64),
                    delay_ms: ms(live.buffered.load(Relaxed) as f64),
                    drift_ppm: drift.is_finite().then_some(drift),
                    steered_ppm: steered.is_finite().then_some(steered),
                })
            }
            Kind::Send { net, dest, sap } => NetStatus::RtpSend(RtpSendStatus {
                dest: *dest,
                sap: *sap,
                packets: net.packets.load(Relaxed),
                bytes: net.bytes.load(Relaxed),
                errors: net.errors.load(Relaxed),
            }),
        }
    }

    /// Names the session a receiver plays (its SDP name, when found by SAP); nothing
    /// for a sender. *control*.
    pub fn set_session(&self, name: &str) {
        if let Kind::Recv { session, .. } = &self.0 {
            *session.lock().expect("poisoned") = Some(name.to_string());
        }
    }
}
