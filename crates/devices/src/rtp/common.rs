//! What both RTP devices share: packet sizes, counters, random starts, the clock.

use quaver_net::Encoding;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The largest RTP payload quaver sends: an Ethernet MTU of 1500 minus the IPv4, UDP and
/// RTP headers, so packets are never fragmented.
pub const MAX_PAYLOAD: usize = 1440;

/// The dynamic payload type quaver uses unless told otherwise (see
/// [`default_payload_type`]): PipeWire's module-rtp-sink always sends 127, and
/// PulseAudio 16's receiver (Debian's, on its GStreamer backend) takes no other
/// dynamic type, whatever the SDP maps.
pub const DEFAULT_PAYLOAD_TYPE: u8 = 127;

/// The payload type for a stream when none is given: RFC 3551's static types where
/// one fits (10 and 11: L16 at 44.1 kHz, stereo and mono, as PulseAudio sends its
/// default format), else [`DEFAULT_PAYLOAD_TYPE`].
pub fn default_payload_type(encoding: Encoding, rate: u32, channels: usize) -> u8 {
    match (encoding, rate, channels) {
        (Encoding::L16, 44_100, 2) => 10,
        (Encoding::L16, 44_100, 1) => 11,
        _ => DEFAULT_PAYLOAD_TYPE,
    }
}

/// How long a network thread waits in one `poll` or sleep before it looks at its stop
/// flag again (bounds how long closing a device takes).
pub(crate) const STOP_POLL: Duration = Duration::from_millis(50);

/// Counters a network thread keeps for the control side.
#[derive(Debug, Default)]
pub(crate) struct NetCounters {
    /// Datagrams sent or received.
    pub(crate) packets: AtomicU64,
    /// Socket errors (a send that failed, a receive error other than "nothing there").
    pub(crate) errors: AtomicU64,
    /// Datagrams dropped because the ring to or from the RT side was full, or (receive)
    /// longer than any packet the device accepts.
    pub(crate) dropped: AtomicU64,
    /// Bytes sent (RTP headers and payloads; the sender's only).
    pub(crate) bytes: AtomicU64,
}

impl NetCounters {
    pub(crate) fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Frames in one packet of `ptime_us` microseconds at `rate`.
pub(crate) fn packet_frames(rate: u32, ptime_us: u32) -> usize {
    (rate as u64 * ptime_us as u64 / 1_000_000) as usize
}

/// Checks that packets of `frames` frames fit [`MAX_PAYLOAD`] and hold at least one frame.
pub(crate) fn check_packet(
    name: &str,
    encoding: Encoding,
    channels: usize,
    frames: usize,
) -> Result<(), crate::DeviceError> {
    let bytes = frames * channels * encoding.bytes();
    let reason = if frames == 0 {
        "ptime is shorter than one frame".to_string()
    } else if bytes > MAX_PAYLOAD {
        format!(
            "packets of {frames} frames × {channels} channels of {encoding} are {bytes} bytes, \
             more than {MAX_PAYLOAD} (use a shorter ptime)"
        )
    } else {
        return Ok(());
    };
    Err(crate::DeviceError::BadSpec {
        spec: name.to_string(),
        reason,
    })
}

/// Random bits for the SSRC, first sequence number and first timestamp (RFC 3550 wants
/// them unpredictable), from the kernel; the time and process id if that fails.
pub(crate) fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ ((std::process::id() as u64) << 32)
}

/// Monotonic nanoseconds (arrival times of received packets).
pub(crate) fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// A non-blocking UDP socket bound to `addr` with `SO_REUSEADDR`, so other receivers on
/// this host (another stream on the same group and port from another sender,
/// PulseAudio's receiver, SAP listeners) can bind it too.
pub(crate) fn bind_shared(addr: std::net::SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
    rustix::net::bind(&fd, &addr)?;
    Ok(std::net::UdpSocket::from(fd))
}
