//! Test harness: a private quaverd per test (own runtime dir, own config dir), started
//! and stopped by PID, and the `quaver` CLI pointed at it. Every wait is bounded.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any single wait in these tests may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// Path of the quaverd binary under test.
pub fn quaverd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quaverd"))
}

/// Path of the quaver CLI, built next to quaverd (built on demand if missing).
pub fn quaver_bin() -> PathBuf {
    let p = quaverd_bin().with_file_name("quaver");
    if !p.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "quaver-cli", "--bin", "quaver"])
            .status()
            .expect("running cargo build for the quaver CLI");
        assert!(status.success(), "building the quaver CLI failed");
    }
    p
}

/// A running private daemon.
pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub runtime: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts quaverd with `args` (plus a private runtime dir and no real-time priority)
    /// and waits until its socket accepts connections.
    pub fn start(args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(dir, args)
    }

    /// Like [`Daemon::start`] in a given temporary directory.
    pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Daemon {
        let mut cmd = Command::new(quaverd_bin());
        cmd.args(["--realtime-priority", "0", "--log-level", "debug"])
            .args(args);
        Self::start_cmd(dir, cmd)
    }

    /// Runs `cmd` (quaverd and its arguments, perhaps behind a wrapper such as
    /// `setpriv`) with the private runtime and config dirs of `dir` and its log there,
    /// and waits until the socket accepts connections.
    pub fn start_cmd(dir: tempfile::TempDir, mut cmd: Command) -> Daemon {
        let xdg = dir.path().join("xdg");
        std::fs::create_dir_all(&xdg).unwrap();
        let runtime = xdg.join("quaver");
        let log = dir.path().join("quaverd.log");
        let child = cmd
            .env("XDG_RUNTIME_DIR", &xdg)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .env_remove("QUAVER_SERVER")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning quaverd");
        let mut d = Daemon {
            child: Some(child),
            dir,
            socket: runtime.join("native"),
            runtime,
            log,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let t0 = Instant::now();
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("quaverd exited early ({st}):\n{}", self.log_text());
            }
            assert!(
                t0.elapsed() < WAIT,
                "quaverd did not start:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Everything the daemon logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A path inside the test's temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A `quaver` command aimed at this daemon.
    pub fn quaver(&self) -> Command {
        let mut c = Command::new(quaver_bin());
        c.env("QUAVER_SERVER", &self.socket)
            .current_dir(self.dir.path());
        c
    }

    /// Runs `quaver ARGS` to completion (bounded) and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self
            .quaver()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning quaver");
        wait_output(child, WAIT)
    }

    /// A client connection to this daemon.
    pub fn connect(&self, name: &str) -> quaver_client::Connection {
        quaver_client::Connection::connect(Some(&self.socket), name).expect("connecting")
    }

    /// Sends SIGTERM and waits (bounded) for a clean exit; returns the log. The
    /// temporary directory lives on until the `Daemon` is dropped.
    pub fn stop(&mut self) -> String {
        signal(self.pid(), libc::SIGTERM);
        self.wait_exit()
    }

    /// Waits (bounded) for the daemon to exit cleanly by itself; returns the log.
    pub fn wait_exit(&mut self) -> String {
        let mut child = self.child.take().expect("daemon already stopped");
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                let log = self.log_text();
                assert!(st.success(), "quaverd exited with {st}:\n{log}");
                return log;
            }
            if t0.elapsed() > WAIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("quaverd did not stop:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain syscall on a PID we started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Waits for a child with a time bound, killing it if it overruns.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "command did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Asserts a command succeeded, showing its stderr if not.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes an interleaved S16 WAV.
pub fn write_wav_s16(path: &Path, rate: u32, channels: u16, samples: &[i16]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
}

/// Writes an interleaved f32 WAV.
pub fn write_wav_f32(path: &Path, rate: u32, channels: u16, samples: &[f32]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
}

/// Reads a WAV's samples as i16 (S16 files) with its spec.
pub fn read_wav_s16(path: &Path) -> (hound::WavSpec, Vec<i16>) {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    let s = r.samples::<i16>().map(|x| x.unwrap()).collect();
    (spec, s)
}

/// Reads an f32 WAV.
pub fn read_wav_f32(path: &Path) -> (hound::WavSpec, Vec<f32>) {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    let s = r.samples::<f32>().map(|x| x.unwrap()).collect();
    (spec, s)
}

/// A deterministic pseudo-random S16 signal (xorshift), scaled to ±`amp`.
pub fn noise_s16(n: usize, seed: u64, amp: i16) -> Vec<i16> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 33) as i64 % (amp as i64 + 1)) as i16 * if x & 1 == 0 { 1 } else { -1 }
        })
        .collect()
}

/// Polls `f` until it returns true or `limit` passes; returns whether it did.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Asserts `out` contains `input` exactly, aligned on the first non-zero sample.
pub fn assert_contains_exactly<T: PartialEq + Default + Copy + std::fmt::Debug>(
    out: &[T],
    input: &[T],
    what: &str,
) {
    let start = onset(out)
        .checked_sub(onset(input))
        .expect("the output starts before the input could");
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

/// Index of the first non-zero sample.
pub fn onset<T: PartialEq + Default + Copy>(s: &[T]) -> usize {
    s.iter()
        .position(|&x| x != T::default())
        .expect("output is all silence")
}
