//! Shared by the integration tests: the binaries under test, and a lock so that the
//! tests of one binary never run two daemons' worth of real-time load at once.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// The quaver-bench binary under test.
pub fn bench_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quaver-bench"))
}

/// quaverd, built next to quaver-bench (built on demand if missing, as the daemon's own
/// tests do for the CLI; `./scripts/test` builds every binary first).
pub fn quaverd_bin() -> PathBuf {
    let p = bench_bin().with_file_name("quaverd");
    if !p.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "quaver-daemon", "--bin", "quaverd"])
            .status()
            .expect("running cargo build for quaverd");
        assert!(status.success(), "building quaverd failed");
    }
    p
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held while a test runs daemons.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}
