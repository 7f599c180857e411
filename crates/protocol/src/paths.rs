//! Where quaverd's sockets live.
//!
//! The runtime directory holds sockets that grant full control of the sound
//! server, so it must be private to the user: [`ensure_private_dir`] refuses a
//! directory that someone else owns or that others can enter.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// File name of the native protocol socket inside [`runtime_dir`].
pub const SOCKET_NAME: &str = "native";

/// Environment variable that overrides the socket path for clients.
pub const SERVER_ENV: &str = "QUAVER_SERVER";

/// The per-user runtime directory: `$XDG_RUNTIME_DIR/quaver`, else `/tmp/quaver-<uid>`.
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        // A relative XDG_RUNTIME_DIR is invalid per the XDG spec; ignoring it avoids
        // creating sockets relative to whatever the current directory happens to be.
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir).join("quaver"),
        _ => PathBuf::from(format!(
            "/tmp/quaver-{}",
            rustix::process::geteuid().as_raw()
        )),
    }
}

/// The socket a client connects to: `$QUAVER_SERVER` if set, else `runtime_dir()/native`.
pub fn default_socket_path() -> PathBuf {
    match std::env::var_os(SERVER_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => runtime_dir().join(SOCKET_NAME),
    }
}

/// Creates `path` with mode 0700 (and missing parents), or checks that the existing
/// directory is ours and not accessible by group or others.
pub fn ensure_private_dir(path: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Parents are missing (e.g. a fresh XDG_RUNTIME_DIR); make them private too.
            DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(path)
                .map_err(|e| annotate(e, path, "cannot create runtime directory"))?;
        }
        Err(e) => return Err(annotate(e, path, "cannot create runtime directory")),
    }
    // lstat, not stat: in /tmp an attacker could pre-create a symlink to a directory
    // they control.
    let meta = std::fs::symlink_metadata(path).map_err(|e| annotate(e, path, "cannot inspect"))?;
    if !meta.file_type().is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} exists but is not a directory (a symlink or file); refusing to use it",
                path.display()
            ),
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is owned by uid {}, not by us (uid {me}); refusing to use it",
                path.display(),
                meta.uid()
            ),
        ));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} has mode {mode:03o} but must not be accessible by group or others \
                 (run: chmod 700 {})",
                path.display(),
                path.display()
            ),
        ));
    }
    Ok(())
}

fn annotate(e: io::Error, path: &Path, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_private_dir_with_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/quaver");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Idempotent.
        ensure_private_dir(&dir).unwrap();
    }

    #[test]
    fn rejects_group_accessible_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_private_dir(&dir).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("chmod 700"), "{err}");
    }

    #[test]
    fn rejects_symlink_and_file() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        ensure_private_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(ensure_private_dir(&link).is_err());
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(ensure_private_dir(&file).is_err());
    }

    #[test]
    fn socket_path_ends_with_name() {
        // Only checks the shape; the environment is shared between tests, so we do
        // not mutate it here.
        if std::env::var_os(SERVER_ENV).is_none() {
            assert!(default_socket_path().ends_with(SOCKET_NAME));
        }
        assert!(runtime_dir().is_absolute());
    }
}
