//! The PulseAudio socket: where it lives, and taking it over safely.
//!
//! libpulse looks for `$PULSE_SERVER`, else `$XDG_RUNTIME_DIR/pulse/native`, so that is
//! the default. Before binding, the path is probed: if a server answers there (a running
//! PulseAudio or pipewire-pulse), quaverd refuses to start rather than steal its clients;
//! a socket file nobody answers on is stale and is replaced.

use anyhow::{Context, Result, bail};
use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

/// `$XDG_RUNTIME_DIR/pulse/native`, or `/tmp/quaver-pulse-<uid>/native` without a
/// usable `XDG_RUNTIME_DIR`.
pub fn default_socket_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("pulse").join("native"),
        _ => PathBuf::from(format!(
            "/tmp/quaver-pulse-{}",
            rustix::process::geteuid().as_raw()
        ))
        .join("native"),
    }
}

/// The bound PulseAudio socket; removed again when dropped.
pub struct PulseListener {
    pub(crate) listener: UnixListener,
    path: PathBuf,
    ino: u64,
}

impl PulseListener {
    /// Prepares the directory, refuses a path a live server answers on, removes a
    /// stale socket and binds.
    pub fn bind(path: &Path) -> Result<PulseListener> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            match DirBuilder::new().mode(0o700).recursive(true).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("creating {}", dir.display()));
                }
            }
        }
        match std::fs::symlink_metadata(path) {
            Ok(meta) => {
                if !meta.file_type().is_socket() {
                    bail!(
                        "{} exists and is not a socket; refusing to replace it ([pulse] socket)",
                        path.display()
                    );
                }
                match UnixStream::connect(path) {
                    Ok(_) => bail!(
                        "a PulseAudio server already answers on {}; stop it first (e.g. `systemctl --user stop pulseaudio.socket pulseaudio.service` or `pulseaudio -k`), or set [pulse] socket to another path or [pulse] enabled = false",
                        path.display()
                    ),
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                        tracing::info!("removing stale PulseAudio socket {}", path.display());
                        std::fs::remove_file(path)
                            .with_context(|| format!("removing stale socket {}", path.display()))?;
                    }
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("probing existing socket {}", path.display())
                        });
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("inspecting {}", path.display())),
        }
        let listener =
            UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
        let ino = std::fs::symlink_metadata(path)
            .map(|m| m.ino())
            .unwrap_or(0);
        Ok(PulseListener {
            listener,
            path: path.to_path_buf(),
            ino,
        })
    }

    /// A socket systemd already bound at `path` and listens on (socket activation);
    /// the socket file stays systemd's, so it is not removed when dropped.
    pub fn adopt(path: &Path, listener: UnixListener) -> PulseListener {
        PulseListener {
            listener,
            path: path.to_path_buf(),
            // No inode matches: the drop never removes systemd's file.
            ino: 0,
        }
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PulseListener {
    fn drop(&mut self) {
        // Only remove the socket if it is still ours.
        if self.ino != 0 && std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_live_server_and_replaces_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pulse").join("native");
        let first = PulseListener::bind(&path).unwrap();
        let err = PulseListener::bind(&path).err().unwrap().to_string();
        assert!(err.contains("already answers"), "{err}");
        // A socket file without a listener is stale.
        std::mem::forget(first.listener.try_clone().unwrap());
        drop(first);
        let stale = UnixListener::bind(&path).unwrap();
        drop(stale); // the file stays, nobody listens
        assert!(path.exists());
        let again = PulseListener::bind(&path).unwrap();
        drop(again);
        assert!(!path.exists(), "socket removed on drop");
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(PulseListener::bind(&path).is_err());
    }
}
