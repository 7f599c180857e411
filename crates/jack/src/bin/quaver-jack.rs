//! `quaver-jack [--quantum N] CMD [ARGS…]`: runs a JACK program against quaverd by
//! putting quaver's `libjack.so.0` first on `LD_LIBRARY_PATH` and exec'ing it (like
//! PipeWire's `pw-jack`).
//!
//! The library directory is, in order: `$QUAVER_JACK_LIBDIR`; `../lib/quaver/jack`
//! next to this executable (installed layout); or, in a cargo build, a `jack/`
//! directory created next to this executable holding `libjack.so.0 → ../libjack.so`.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn usage() -> ExitCode {
    eprintln!(
        "usage: quaver-jack [--quantum FRAMES] [--server SOCKET] COMMAND [ARGS...]\n\
         Runs a JACK program with quaver's libjack, so it talks to quaverd.\n\
         --quantum   ask for this many frames per cycle (sets QUAVER_JACK_QUANTUM)\n\
         --server    quaverd's socket (sets QUAVER_SERVER)"
    );
    ExitCode::from(2)
}

fn has_lib(dir: &Path) -> bool {
    dir.join("libjack.so.0").exists()
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
    // A cargo build: libjack.so sits next to us; give it its soname in jack/.
    let built = bin.join("libjack.so");
    if built.exists() {
        let dir = bin.join("jack");
        let link = dir.join("libjack.so.0");
        if !link.exists() {
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("../libjack.so", &link)
                .map_err(|e| format!("creating {}: {e}", link.display()))?;
        }
        return Ok(dir);
    }
    Err(format!(
        "quaver's libjack.so.0 was not found (looked in {} and next to {}); \
         set QUAVER_JACK_LIBDIR",
        installed.display(),
        exe.display()
    ))
}

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut quantum = None;
    let mut server = None;
    while let Some(a) = args.first().and_then(|a| a.to_str()).map(str::to_owned) {
        match a.as_str() {
            "-h" | "--help" => return usage(),
            "--quantum" | "--server" if args.len() >= 2 => {
                let v = args[1].clone();
                if a == "--quantum" {
                    quantum = Some(v);
                } else {
                    server = Some(v);
                }
                args.drain(..2);
            }
            "--" => {
                args.remove(0);
                break;
            }
            s if s.starts_with('-') => return usage(),
            _ => break,
        }
    }
    if args.is_empty() {
        return usage();
    }
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
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]).env("LD_LIBRARY_PATH", path);
    if let Some(q) = quantum {
        cmd.env("QUAVER_JACK_QUANTUM", q);
    }
    if let Some(s) = server {
        cmd.env("QUAVER_SERVER", s);
    }
    let err = cmd.exec();
    eprintln!(
        "quaver-jack: cannot run {}: {err}",
        args[0].to_string_lossy()
    );
    ExitCode::from(127)
}
