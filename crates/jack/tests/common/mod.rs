//! Harness: a private quaverd per test and JACK programs run through `quaver-jack`.
//! Every wait is bounded; processes are stopped by PID.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(20);

/// The `quaver-jack` wrapper under test.
pub fn wrapper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quaver-jack"))
}

fn target_dir() -> PathBuf {
    wrapper().parent().unwrap().to_path_buf()
}

/// Builds what the tests need next to the wrapper: quaverd and the cdylib itself
/// (`cargo test` builds the library only as an rlib for the tests, so a libjack.so
/// left from an earlier build would be stale). Once per test binary.
fn ensure_built() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let st = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "quaver-daemon",
                "--bin",
                "quaverd",
                "-p",
                "quaver-jack",
                "--lib",
            ])
            .status()
            .expect("running cargo build");
        assert!(st.success(), "building quaverd and libjack failed");
        assert!(target_dir().join("libjack.so").exists());
    });
}

/// True if the JACK example program `name` is installed; prints why a test is skipped
/// otherwise.
pub fn have_tool(name: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).exists()))
        .unwrap_or(false);
    if !found {
        eprintln!(
            "SKIPPED: {name} is not installed (Debian package jackd2); \
             scripts/test installs it when run as root"
        );
    }
    found
}

/// A private quaverd.
pub struct Daemon {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    pub fn start(args: &[&str]) -> Daemon {
        ensure_built();
        let dir = tempfile::tempdir().unwrap();
        let xdg = dir.path().join("xdg");
        std::fs::create_dir_all(&xdg).unwrap();
        let log = dir.path().join("quaverd.log");
        let child = Command::new(target_dir().join("quaverd"))
            .args(["--realtime-priority", "0", "--log-level", "debug"])
            .args(args)
            .env("XDG_RUNTIME_DIR", &xdg)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .env_remove("QUAVER_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning quaverd");
        let socket = xdg.join("quaver/native");
        let mut d = Daemon {
            child: Some(child),
            dir,
            socket,
            log,
        };
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
            if let Some(st) = d.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("quaverd exited early ({st}):\n{}", d.log_text());
            }
            assert!(t0.elapsed() < WAIT, "quaverd did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn connect(&self) -> quaver_client::Connection {
        quaver_client::Connection::connect(Some(&self.socket), "jack-test").unwrap()
    }

    /// `quaver-jack ARGS…` aimed at this daemon.
    pub fn jack(&self, args: &[&str]) -> Command {
        let mut c = Command::new(wrapper());
        c.args(args)
            .env("QUAVER_SERVER", &self.socket)
            .env("QUAVER_RT_PRIORITY", "0")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    /// Runs `quaver-jack ARGS…` to completion (bounded).
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self
            .jack(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning quaver-jack");
        wait_output(child, WAIT)
    }

    /// Starts a long-running JACK program.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.jack(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning quaver-jack")
    }

    pub fn stop(&mut self) -> String {
        let mut child = self.child.take().unwrap();
        signal(child.id(), libc::SIGTERM);
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                let log = self.log_text();
                assert!(st.success(), "quaverd exited with {st}:\n{log}");
                return log;
            }
            assert!(t0.elapsed() < WAIT, "quaverd did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
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

pub fn signal(pid: u32, sig: i32) {
    // SAFETY: a plain syscall on a PID we started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Kills a child we started and reaps it.
pub fn kill(mut child: Child) -> Output {
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

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

pub fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed ({}): {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    text(o)
}

/// Whether `p` exists (for skipping when something is not built).
pub fn exists(p: &Path) -> bool {
    p.exists()
}
