//! PulseAudio over TCP (off by default): who may connect.
//!
//! A TCP client is served if its address is in the allow-list, or if its AUTH carries
//! the server's cookie (`~/.config/pulse/cookie`, 256 bytes, created 0600 when missing,
//! as PulseAudio does). Unix-socket clients are trusted by the socket directory's
//! permissions and never need the cookie.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Length of a PulseAudio cookie.
pub const COOKIE_LEN: usize = 256;

/// An address range: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// Parses `1.2.3.4`, `10.0.0.0/8`, `::1` or `fd00::/8`.
    pub fn parse(s: &str) -> Result<Net, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not an address or address/prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("bad prefix length in '{s}'"))?,
            None => max,
        };
        Ok(Net { addr, prefix })
    }

    /// True if `ip` is inside the range (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let bits = |a: IpAddr| -> (u128, u32) {
            match a {
                IpAddr::V4(v) => (u32::from(v) as u128, 32),
                IpAddr::V6(v) => (u128::from(v), 128),
            }
        };
        let ((n, nw), (x, xw)) = (bits(self.addr), bits(ip));
        if nw != xw {
            return false;
        }
        let shift = nw - self.prefix as u32;
        shift >= nw || (n >> shift) == (x >> shift)
    }
}

/// TCP settings.
#[derive(Debug, Clone)]
pub struct TcpOptions {
    /// Address to listen on, e.g. `127.0.0.1:4713`.
    pub listen: String,
    /// Clients from these ranges need no cookie.
    pub allow: Vec<Net>,
    /// The cookie other clients must present.
    pub cookie: Vec<u8>,
}

/// `$HOME/.config/pulse/cookie`, where libpulse reads its cookie.
pub fn default_cookie_path() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/pulse/cookie"))
}

/// Reads the cookie at `path`, creating a random one (mode 0600) if there is none.
pub fn load_or_create_cookie(path: &Path) -> Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(c) if c.len() >= COOKIE_LEN => return Ok(c[..COOKIE_LEN].to_vec()),
        Ok(c) => bail!(
            "{} holds {} bytes; a PulseAudio cookie has {COOKIE_LEN}",
            path.display(),
            c.len()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut cookie = vec![0u8; COOKIE_LEN];
    rustix::rand::getrandom(&mut cookie, rustix::rand::GetRandomFlags::empty())
        .context("random cookie")?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(&cookie)
        .with_context(|| format!("writing {}", path.display()))?;
    tracing::info!("created PulseAudio cookie {}", path.display());
    Ok(cookie)
}

/// A client's byte stream.
pub enum Sock {
    /// The unix socket.
    Unix(UnixStream),
    /// TCP; `cookie` is what AUTH must carry unless the peer is allowed by address.
    Tcp {
        /// The connection.
        stream: TcpStream,
        /// Required cookie, or None for an allow-listed peer.
        cookie: Option<std::sync::Arc<Vec<u8>>>,
    },
}

impl Sock {
    /// Switches to non-blocking mode.
    pub fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_nonblocking(true),
            Sock::Tcp { stream, .. } => {
                stream.set_nodelay(true)?;
                stream.set_nonblocking(true)
            }
        }
    }

    /// Reads bytes; file descriptors passed with them (SCM_RIGHTS, unix sockets only)
    /// are appended to `fds`, credentials (SCM_CREDENTIALS, checked by the kernel)
    /// replace `creds`.
    pub fn read_with_fds(
        &mut self,
        buf: &mut [u8],
        fds: &mut std::collections::VecDeque<rustix::fd::OwnedFd>,
        creds: &mut Option<rustix::net::UCred>,
    ) -> std::io::Result<usize> {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
        match self {
            Sock::Tcp { stream, .. } => stream.read(buf),
            Sock::Unix(s) => {
                let mut space = [std::mem::MaybeUninit::<u8>::uninit();
                    rustix::cmsg_space!(ScmRights(8), ScmCredentials(1))];
                let mut anc = RecvAncillaryBuffer::new(&mut space);
                let r = recvmsg(
                    &*s,
                    &mut [std::io::IoSliceMut::new(buf)],
                    &mut anc,
                    RecvFlags::CMSG_CLOEXEC,
                )
                .map_err(std::io::Error::from)?;
                for msg in anc.drain() {
                    match msg {
                        RecvAncillaryMessage::ScmRights(received) => fds.extend(received),
                        RecvAncillaryMessage::ScmCredentials(c) => *creds = Some(c),
                        _ => {}
                    }
                }
                Ok(r.bytes)
            }
        }
    }

    /// Sends bytes with descriptors attached (SCM_RIGHTS; unix sockets only).
    pub fn send_with_fds(
        &mut self,
        buf: &[u8],
        fds: &[rustix::fd::OwnedFd],
    ) -> std::io::Result<usize> {
        use rustix::fd::AsFd;
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
        match self {
            Sock::Tcp { .. } => Err(std::io::Error::from(std::io::ErrorKind::Unsupported)),
            Sock::Unix(s) => {
                let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
                let mut space =
                    [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
                let mut anc = SendAncillaryBuffer::new(&mut space);
                if !anc.push(SendAncillaryMessage::ScmRights(&borrowed)) {
                    return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
                }
                sendmsg(
                    &*s,
                    &[std::io::IoSlice::new(buf)],
                    &mut anc,
                    SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
                )
                .map_err(std::io::Error::from)
            }
        }
    }

    /// True for a unix-socket client.
    pub fn is_unix(&self) -> bool {
        matches!(self, Sock::Unix(_))
    }

    /// The cookie AUTH must carry, if any.
    pub fn required_cookie(&self) -> Option<&[u8]> {
        match self {
            Sock::Tcp {
                cookie: Some(c), ..
            } => Some(c),
            _ => None,
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Unix(s) => s.read(buf),
            Sock::Tcp { stream, .. } => stream.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sock::Unix(s) => s.write(buf),
            Sock::Tcp { stream, .. } => stream.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl rustix::fd::AsFd for Sock {
    fn as_fd(&self) -> rustix::fd::BorrowedFd<'_> {
        match self {
            Sock::Unix(s) => s.as_fd(),
            Sock::Tcp { stream, .. } => stream.as_fd(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_ranges() {
        let n = Net::parse("192.168.1.0/24").unwrap();
        assert!(n.contains("192.168.1.77".parse().unwrap()));
        assert!(!n.contains("192.168.2.1".parse().unwrap()));
        assert!(n.contains("::ffff:192.168.1.5".parse().unwrap()));
        let one = Net::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(
            Net::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(Net::parse("::1").unwrap().contains("::1".parse().unwrap()));
        assert!(Net::parse("10.0.0.0/33").is_err());
        assert!(Net::parse("host").is_err());
    }

    #[test]
    fn cookie_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pulse/cookie");
        let a = load_or_create_cookie(&p).unwrap();
        assert_eq!(a.len(), COOKIE_LEN);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_or_create_cookie(&p).unwrap(), a);
        std::fs::write(&p, b"short").unwrap();
        assert!(load_or_create_cookie(&p).is_err());
    }
}
