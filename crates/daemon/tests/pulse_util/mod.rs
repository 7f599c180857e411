//! Helpers for the PulseAudio front-end tests: real libpulse clients (pactl, paplay,
//! parec, pacat) pointed at a private quaverd, never at a real server, and a minimal
//! raw-protocol client for what the tools cannot do (garbage, exact replies).

#![allow(dead_code)]

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// True if every tool is on PATH.
pub fn have(tools: &[&str]) -> bool {
    tools.iter().all(|t| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file()))
    })
}

/// Skips the calling test (loudly) when a tool is missing.
#[macro_export]
macro_rules! require_tools {
    ($($t:expr),+) => {
        if !pulse_util::have(&[$($t),+]) {
            eprintln!(
                "SKIPPED {}: needs {:?} (apt-get install pulseaudio-utils sox); not tested",
                module_path!(),
                [$($t),+]
            );
            return;
        }
    };
}

/// The daemon's PulseAudio socket.
pub fn pulse_socket(d: &Daemon) -> PathBuf {
    d.runtime.parent().unwrap().join("pulse").join("native")
}

/// A libpulse tool aimed at `d` only: PULSE_SERVER set, autospawn off, HOME and the
/// runtime paths inside the test's directory.
pub fn pa(d: &Daemon, prog: &str) -> Command {
    let conf = d.path("pulse-client.conf");
    if !conf.exists() {
        std::fs::write(&conf, "autospawn = no\n").unwrap();
    }
    let home = d.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut c = Command::new(prog);
    c.env(
        "PULSE_SERVER",
        format!("unix:{}", pulse_socket(d).display()),
    )
    .env("PULSE_CLIENTCONFIG", &conf)
    .env("PULSE_RUNTIME_PATH", home.join("pulse-runtime"))
    .env("PULSE_STATE_PATH", home.join("pulse-state"))
    .env("HOME", &home)
    .env("XDG_RUNTIME_DIR", d.runtime.parent().unwrap())
    .env("XDG_CONFIG_HOME", home.join(".config"))
    .env_remove("PULSE_COOKIE")
    .env_remove("PULSE_SINK")
    .env_remove("PULSE_SOURCE")
    .current_dir(d.dir.path())
    .stdin(Stdio::null());
    c
}

/// Runs a libpulse tool to completion (bounded) and returns its output.
pub fn run_pa(d: &Daemon, prog: &str, args: &[&str]) -> Output {
    let child = pa(d, prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"));
    wait_output(child, WAIT)
}

/// Starts a libpulse tool in the background.
pub fn spawn_pa(d: &Daemon, prog: &str, args: &[&str]) -> Child {
    pa(d, prog)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {prog}: {e}"))
}

/// Asserts success and returns stdout; shows the daemon log on failure.
pub fn pa_ok(d: &Daemon, out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}): {}\n--- quaverd log ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stops a background tool with SIGINT (parec and pactl subscribe flush and exit) and
/// collects its output, bounded.
pub fn interrupt(child: Child) -> Output {
    signal(child.id(), libc::SIGINT);
    wait_output(child, WAIT)
}

/// Index of the first non-zero sample.
pub fn onset<T: PartialEq + Default + Copy>(s: &[T]) -> usize {
    s.iter()
        .position(|&x| x != T::default())
        .expect("output is all silence")
}

/// Reads interleaved little-endian s16 samples from a raw file.
pub fn read_raw_s16(path: &Path) -> Vec<i16> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// Asserts `out` contains `input` exactly, aligned on the first non-zero sample.
pub fn assert_contains_exactly<T: PartialEq + Default + Copy + std::fmt::Debug>(
    out: &[T],
    input: &[T],
    what: &str,
) {
    let start = onset(out) - onset(input);
    assert!(
        out.len() >= start + input.len(),
        "{what}: output has {} samples after the onset, input {}",
        out.len() - start,
        input.len()
    );
    let diff: Vec<usize> = out[start..start + input.len()]
        .iter()
        .zip(input)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect();
    assert!(
        diff.is_empty(),
        "{what}: {} samples differ, first at {} ({:?} vs {:?})",
        diff.len(),
        diff[0],
        out[start + diff[0]],
        input[diff[0]]
    );
}
