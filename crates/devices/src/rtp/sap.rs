//! SAP announcements of an `rtp-send` stream: its SDP sent to the SAP group every
//! [`SAP_INTERVAL`] (as PulseAudio's module-rtp-send does) and a deletion when it stops,
//! so receivers on the network can find it by name. IPv4 streams only for now.

use super::common::random_u64;
use quaver_net::sap::{SAP_GROUP_V4, SAP_PORT};
use quaver_net::{SapKind, SapPacket, SessionDescription};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

/// Time between two announcements.
pub(crate) const SAP_INTERVAL: Duration = Duration::from_secs(5);

/// The announcement and deletion packets of one stream, built once at open.
pub(crate) struct Announcer {
    pub(crate) announce: Vec<u8>,
    pub(crate) delete: Vec<u8>,
    pub(crate) group: SocketAddr,
}

/// The local address packets to `dest` leave from (what the SDP's `o=` names).
fn source_for(dest: SocketAddr) -> Option<IpAddr> {
    let probe = UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect(dest).ok()?;
    Some(probe.local_addr().ok()?.ip())
}

impl Announcer {
    /// The packets announcing `sdp` (its origin, session id and version are filled in
    /// here), or `None` for an IPv6 stream or when no route leads to its address.
    pub(crate) fn new(mut sdp: SessionDescription) -> Option<Announcer> {
        let dest = SocketAddr::new(sdp.address, sdp.port);
        if !dest.is_ipv4() {
            return None;
        }
        let origin = source_for(dest)?;
        let id = random_u64() >> 1;
        sdp.origin = origin;
        sdp.session_id = id;
        sdp.session_version = id;
        let sdp = sdp.to_text();
        let hash = (id >> 8) as u16;
        let packet = |kind| {
            let mut out = vec![0u8; 64 + sdp.len()];
            let p = SapPacket {
                kind,
                hash,
                source: origin,
                sdp: &sdp,
            };
            let n = p.write(&mut out).ok()?;
            out.truncate(n);
            Some(out)
        };
        Some(Announcer {
            announce: packet(SapKind::Announce)?,
            delete: packet(SapKind::Delete)?,
            group: SocketAddr::from((SAP_GROUP_V4, SAP_PORT)),
        })
    }
}
