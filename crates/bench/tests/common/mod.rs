//! Shared by the integration tests: quaver-bench run against the workspace's quaverd
//! (both found by quaver-testkit), its records, and a lock so that the tests of one
//! binary never run two daemons' worth of real-time load at once.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

// Each test binary uses its own subset of these.
#[allow(unused_imports)]
pub use quaver_testkit::{ok, quaver_bench_bin as bench_bin, quaverd_bin};

static SERIAL: Mutex<()> = Mutex::new(());

/// Held while a test runs daemons.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `quaver-bench ARGS --out OUT --quaverd <quaverd>`, with `PATH` replaced when
/// `path_env` is given, and returns its output; killed (and the test failed) if it has
/// not finished within `limit`.
pub fn bench_with(args: &[&str], out: &Path, path_env: Option<&Path>, limit: Duration) -> Output {
    let mut c = Command::new(bench_bin());
    c.args(args)
        .arg("--out")
        .arg(out)
        .arg("--quaverd")
        .arg(quaverd_bin());
    if let Some(p) = path_env {
        c.env("PATH", p);
    }
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    quaver_testkit::wait_output(child, limit)
}

/// The one JSON record a run wrote into `dir` for `mode`, and the Markdown report next
/// to it.
pub fn record(dir: &Path, mode: &str) -> (serde_json::Value, String) {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(&format!("{mode}-")) && n.ends_with(".json")
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let md = std::fs::read_to_string(files[0].with_extension("md"))
        .expect("Markdown report next to the record");
    let v = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    (v, md)
}
