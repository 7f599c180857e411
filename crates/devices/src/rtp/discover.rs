//! The socket SAP discovery listens on: UDP port 9875 on every interface, the SAP groups
//! joined, shared (`SO_REUSEADDR`) with any other listener on the host (PulseAudio's
//! module-rtp-recv binds the same port the same way). What the datagrams say is read by
//! `quaver_net::Directory`; the daemon's discovery thread owns both. docs/net.md.

use super::common::bind_shared;
use quaver_net::sap::SAP_PORT;
use rustix::event::{PollFd, PollFlags};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

/// Where SAP announcements are received.
pub struct SapSocket {
    socket: UdpSocket,
}

impl SapSocket {
    /// Binds port 9875 (shared) and joins each IPv4 `group` on the default interface.
    pub fn open(groups: &[Ipv4Addr]) -> std::io::Result<SapSocket> {
        Self::open_port(groups, SAP_PORT)
    }

    /// [`SapSocket::open`] on another port (tests).
    pub fn open_port(groups: &[Ipv4Addr], port: u16) -> std::io::Result<SapSocket> {
        // Bound to the wildcard address: the groups' traffic, and unicast announcements.
        let socket = bind_shared(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))?;
        for g in groups {
            socket.join_multicast_v4(g, &Ipv4Addr::UNSPECIFIED)?;
        }
        Ok(SapSocket { socket })
    }

    /// Waits up to `timeout` (`None`: for ever) for one datagram; returns its length
    /// and sender, or `None` when the time ran out. A datagram longer than `buf` is cut
    /// (SAP's SDP is bounded far below any `buf` worth using).
    pub fn recv(
        &self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> std::io::Result<Option<(usize, IpAddr)>> {
        loop {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => return Ok(Some((n, from.ip()))),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
            let ts = timeout.map(|t| rustix::time::Timespec {
                tv_sec: t.as_secs() as i64,
                tv_nsec: t.subsec_nanos() as i64,
            });
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The local address (the port, for [`SapSocket::open_port`] with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}
