//! `quaver-jack [--quantum N] [--server SOCKET] CMD [ARGS…]`: runs a JACK program against
//! quaverd by putting quaver's `libjack.so.0` first on `LD_LIBRARY_PATH` and exec'ing it
//! (like PipeWire's `pw-jack`). Only the exec'd program gets the variable: the wrapper
//! is replaced by it, and nothing is set for the session (docs/install.md).
//!
//! The library directory is, in order: `$QUAVER_JACK_LIBDIR`; `../lib/quaver/jack`
//! next to this executable (installed layout); or, in a cargo build, a `jack/`
//! directory created next to this executable holding `libjack.so.0` → the newest of
//! `libjack.so` beside it and `deps/libjack.so` (where `cargo build --bins` leaves it).

use clap::Parser;
use jack::wrapper::WrapperArgs;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::SystemTime;

fn has_lib(dir: &Path) -> bool {
    dir.join("libjack.so.0").exists()
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Finds (or, in a build tree, makes) the directory holding our libjack.so.0.
fn lib_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("QUAVER_JACK_LIBDIR") {
        let d = PathBuf::from(d);
        return if has_lib(&d) {
            Ok(d)
        } else {
            Err(format!(
                "QUAVER_JACK_LIBDIR={} holds no libjack.so.0",
                d.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let bin = exe
        .parent()
        .ok_or("the executable has no directory")?
        .to_path_buf();
    let installed = bin.join("../lib/quaver/jack");
    if has_lib(&installed) {
        return Ok(installed);
    }
    // A cargo build: `cargo build --lib` copies libjack.so up next to us, a build of
    // the binaries alone leaves it in deps/. Take the newer one.
    let newest = ["libjack.so", "deps/libjack.so"]
        .into_iter()
        .filter_map(|rel| mtime(&bin.join(rel)).map(|t| (t, rel)))
        .max();
    if let Some((_, rel)) = newest {
        let dir = bin.join("jack");
        let link = dir.join("libjack.so.0");
        let target = Path::new("..").join(rel);
        if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            // Made beside it and renamed over it: wrappers started together never see
            // the link missing.
            let tmp = dir.join(format!(".libjack.so.0.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)
                .and_then(|()| std::fs::rename(&tmp, &link))
                .map_err(|e| format!("creating {}: {e}", link.display()))?;
        }
        return Ok(dir);
    }
    Err(format!(
        "quaver's libjack.so.0 was not found (looked in {}, and for libjack.so next to {} \
         and in its deps/); set QUAVER_JACK_LIBDIR",
        installed.display(),
        exe.display()
    ))
}

fn main() -> ExitCode {
    let args = WrapperArgs::parse();
    let dir = match lib_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("quaver-jack: {e}");
            return ExitCode::from(1);
        }
    };
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]).env("LD_LIBRARY_PATH", path);
    if let Some(q) = args.quantum {
        cmd.env("QUAVER_JACK_QUANTUM", q.to_string());
    }
    if let Some(s) = args.server {
        cmd.env("QUAVER_SERVER", s);
    }
    let err = cmd.exec();
    eprintln!(
        "quaver-jack: cannot run {}: {err}",
        args.command[0].to_string_lossy()
    );
    ExitCode::from(127)
}
