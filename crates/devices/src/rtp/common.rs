//! What both RTP devices share: packet sizes, counters, random starts, the clock.

use quaver_net::Encoding;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The largest RTP payload quaver sends: an Ethernet MTU of 1500 minus the IPv4, UDP and
/// RTP headers, so packets are never fragmented.
pub const MAX_PAYLOAD: usize = 1440;

/// The dynamic payload type quaver uses unless told otherwise.
pub const DEFAULT_PAYLOAD_TYPE: u8 = 97;

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
