//! Shared by the integration tests: the binaries under test, and a lock so that the
//! tests of one binary never run two daemons' worth of real-time load at once.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("quaver-bench {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Its stdout, after asserting it succeeded (both streams in the message if not).
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
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
