//! SAP announcements of an `rtp-send` stream: its SDP sent to the SAP group every
//! [`SAP_INTERVAL`] (as PulseAudio's module-rtp-send does) and a deletion when it stops,
//! so receivers on the network can find it by name. IPv4 streams only for now.
//!
//! The group is 224.0.0.56 unless told otherwise (`sap=GROUP`): where PulseAudio's
//! module-rtp-recv and PipeWire's module-rtp-source listen by default (RFC 2974's
//! 239.255.255.255 is heard by neither). Every session id announced is noted in
//! [`own_sessions`] while it is, so this process's SAP discovery does not take its own
//! streams (multicast loops back to the sender's host) for someone else's.

use super::common::random_u64;
use quaver_net::sap::SAP_PORT;
use quaver_net::{SapKind, SapPacket, SessionDescription};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::time::Duration;

/// Session ids of the announcements this process sends now.
static OWN: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The session ids this process announces now (what its SAP discovery ignores).
pub fn own_sessions() -> Vec<u64> {
    OWN.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Time between two announcements.
pub(crate) const SAP_INTERVAL: Duration = Duration::from_secs(5);

/// The announcement and deletion packets of one stream, built once at open.
pub(crate) struct Announcer {
    pub(crate) announce: Vec<u8>,
    pub(crate) delete: Vec<u8>,
    pub(crate) group: SocketAddr,
    id: u64,
}

impl Drop for Announcer {
    fn drop(&mut self) {
        OWN.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&i| i != self.id);
    }
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
    pub(crate) fn new(mut sdp: SessionDescription, group: Ipv4Addr) -> Option<Announcer> {
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
        let (announce, delete) = (packet(SapKind::Announce)?, packet(SapKind::Delete)?);
        OWN.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        Some(Announcer {
            announce,
            delete,
            group: SocketAddr::from((group, SAP_PORT)),
            id,
        })
    }
}
