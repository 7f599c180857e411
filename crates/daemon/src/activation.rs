//! systemd socket activation: the listening sockets systemd (or
//! `systemd-socket-activate`) bound for quaverd and passed on its first client.
//!
//! The protocol of sd_listen_fds(3), read directly instead of linking libsystemd: the
//! sockets are descriptors 3…3+`LISTEN_FDS`−1, meant for the process `LISTEN_PID`,
//! optionally named by `LISTEN_FDNAMES` (colon-separated, from `FileDescriptorName=`).
//! quaverd takes a socket named `native` (or bound at the native socket's path) and
//! one named `pulse` (or bound at the PulseAudio socket's path). Anything else is a
//! broken unit, and quaverd refuses to start rather than serve half its sockets.

use anyhow::{Result, bail};
use rustix::fd::{BorrowedFd, FromRawFd, OwnedFd};
use rustix::net::{AddressFamily, SocketType, sockopt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
const FIRST_FD: i32 = 3;
/// More than any unit of ours passes; a larger count is a mistake, not a unit.
const MAX_FDS: usize = 16;

/// The sockets systemd passed.
#[derive(Debug, Default)]
pub struct Passed {
    /// The native protocol's socket.
    pub native: Option<UnixListener>,
    /// The PulseAudio socket.
    pub pulse: Option<UnixListener>,
}

/// The environment that describes passed sockets.
#[derive(Debug, Clone, Default)]
pub struct ListenEnv {
    /// `LISTEN_PID`.
    pub pid: Option<String>,
    /// `LISTEN_FDS`.
    pub fds: Option<String>,
    /// `LISTEN_FDNAMES`.
    pub names: Option<String>,
}

impl ListenEnv {
    /// Reads the three variables of this process.
    pub fn from_process() -> ListenEnv {
        let get = |k: &str| std::env::var(k).ok();
        ListenEnv {
            pid: get("LISTEN_PID"),
            fds: get("LISTEN_FDS"),
            names: get("LISTEN_FDNAMES"),
        }
    }
}

/// Which socket a passed descriptor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Native,
    Pulse,
}

/// The descriptors systemd passed to this process, checked and sorted by role:
/// `Ok(None)` when nothing was passed. `native_path` and `pulse_path` (the configured
/// socket paths) identify unnamed sockets by the address they are bound to.
pub fn take(
    env: &ListenEnv,
    native_path: &Path,
    pulse_path: Option<&Path>,
) -> Result<Option<Passed>> {
    let Some(fds) = env.fds.as_deref() else {
        return Ok(None);
    };
    let me = std::process::id();
    match env.pid.as_deref().map(str::parse::<u32>) {
        Some(Ok(pid)) if pid == me => {}
        Some(Ok(pid)) => bail!(
            "socket activation: LISTEN_PID={pid} is not this process (pid {me}): the sockets \
             were passed to another process; refusing to start with sockets that are not ours"
        ),
        Some(Err(_)) => bail!(
            "socket activation: LISTEN_PID={:?} is not a process id",
            env.pid.as_deref().unwrap_or_default()
        ),
        None => bail!("socket activation: LISTEN_FDS is set but LISTEN_PID is not"),
    }
    let n: usize = fds.parse().ok().filter(|&n| n <= MAX_FDS).ok_or_else(|| {
        anyhow::anyhow!("socket activation: LISTEN_FDS={fds:?} is not a count of 0 to {MAX_FDS}")
    })?;
    let names: Vec<&str> = env
        .names
        .as_deref()
        .map_or(Vec::new(), |s| s.split(':').collect());
    let mut passed = Passed::default();
    for i in 0..n {
        let raw = FIRST_FD + i as i32;
        let name = names.get(i).copied().unwrap_or("");
        let what = if name.is_empty() {
            format!("fd {raw}")
        } else {
            format!("fd {raw} ({name})")
        };
        // SAFETY: only looked at; a descriptor that is not open fails fstat below and is
        // never owned (closing it would be closing someone else's descriptor).
        let path = check_listening_unix_stream(unsafe { BorrowedFd::borrow_raw(raw) }, &what)?;
        let role = match name {
            "native" | "quaver" => Role::Native,
            "pulse" => Role::Pulse,
            _ => match &path {
                Some(p) if p == native_path => Role::Native,
                Some(p) if Some(p.as_path()) == pulse_path => Role::Pulse,
                _ => bail!(
                    "socket activation: {what} is bound to {}, neither the native socket {} \
                     nor the PulseAudio socket{}; name it `native` or `pulse` \
                     (FileDescriptorName=) or fix ListenStream=",
                    path.as_deref()
                        .map_or("no path".into(), |p| p.display().to_string()),
                    native_path.display(),
                    pulse_path.map_or(" (disabled)".into(), |p| format!(" {}", p.display()))
                ),
            },
        };
        if role == Role::Pulse && pulse_path.is_none() {
            bail!(
                "socket activation: {what} is for the PulseAudio socket, but [pulse] enabled = false"
            );
        }
        // SAFETY: an open listening socket systemd handed to this process to own;
        // each descriptor is taken once.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
        let slot = match role {
            Role::Native => &mut passed.native,
            Role::Pulse => &mut passed.pulse,
        };
        if slot.is_some() {
            bail!("socket activation: {what} is a second {role:?} socket");
        }
        *slot = Some(UnixListener::from(fd));
    }
    Ok(Some(passed))
}

/// Checks that `fd` is a listening unix stream socket; its bound path, if it has one.
fn check_listening_unix_stream(fd: BorrowedFd<'_>, what: &str) -> Result<Option<PathBuf>> {
    let not = |why: String| {
        anyhow::anyhow!(
            "socket activation: {what} is not a listening unix stream socket ({why}); check \
             the .socket unit's ListenStream="
        )
    };
    let st = rustix::fs::fstat(fd).map_err(|e| not(format!("fstat: {e}")))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(not("not a socket".into()));
    }
    let domain = sockopt::socket_domain(fd).map_err(|e| not(format!("{e}")))?;
    if domain != AddressFamily::UNIX {
        return Err(not(format!("address family {}", domain.as_raw())));
    }
    let ty = sockopt::socket_type(fd).map_err(|e| not(format!("{e}")))?;
    if ty != SocketType::STREAM {
        return Err(not(format!("socket type {}", ty.as_raw())));
    }
    if !sockopt::socket_acceptconn(fd).map_err(|e| not(format!("{e}")))? {
        return Err(not("not listening".into()));
    }
    let addr = rustix::net::getsockname(fd).map_err(|e| not(format!("getsockname: {e}")))?;
    let path = rustix::net::SocketAddrUnix::try_from(addr)
        .ok()
        .and_then(|u| {
            u.path()
                .map(|p| PathBuf::from(p.to_string_lossy().into_owned()))
        });
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pid: Option<&str>, fds: Option<&str>) -> ListenEnv {
        ListenEnv {
            pid: pid.map(Into::into),
            fds: fds.map(Into::into),
            names: None,
        }
    }

    #[test]
    fn nothing_passed_is_no_activation() {
        assert!(
            take(&env(None, None), Path::new("/x"), None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn sockets_for_another_process_are_refused() {
        let e = take(&env(Some("1"), Some("1")), Path::new("/x"), None).unwrap_err();
        assert!(
            format!("{e}").contains("LISTEN_PID=1 is not this process"),
            "{e}"
        );
        let e = take(&env(None, Some("1")), Path::new("/x"), None).unwrap_err();
        assert!(format!("{e}").contains("LISTEN_PID is not"), "{e}");
        let me = std::process::id().to_string();
        let e = take(&env(Some(&me), Some("lots")), Path::new("/x"), None).unwrap_err();
        assert!(format!("{e}").contains("LISTEN_FDS=\"lots\""), "{e}");
    }
}
