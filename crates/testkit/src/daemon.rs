//! A private quaverd per test: its own runtime, config and state directories in a
//! temporary directory, its stderr kept there for failure messages, started and stopped
//! by PID, and the `quaver` CLI pointed at it.

use crate::{WAIT, quaver_bin, quaverd_bin, signal, wait_output};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running private daemon.
pub struct Daemon {
    /// The daemon process (None once stopped).
    pub child: Option<Child>,
    /// The test's temporary directory, the daemon's working directory.
    pub dir: tempfile::TempDir,
    /// The daemon's runtime directory (`$XDG_RUNTIME_DIR/quaver`).
    pub runtime: PathBuf,
    /// The native protocol socket.
    pub socket: PathBuf,
    /// The daemon's stderr.
    pub log: PathBuf,
}

impl Daemon {
    /// Starts quaverd with `args` (plus a private runtime dir, no real-time priority,
    /// and the null device unless `args` name a device or a config) and waits until its
    /// socket accepts connections.
    pub fn start(args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(dir, args)
    }

    /// Like [`Daemon::start`] in a given temporary directory.
    pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Daemon {
        Self::start_cmd(dir, Self::command(0, args))
    }

    /// Like [`Daemon::start`], with the engine's thread at SCHED_FIFO `priority` (where
    /// that is refused, quaverd says so and runs without): for tests that count missed
    /// cycles on a machine other work keeps busy.
    pub fn start_realtime(priority: u32, args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_cmd(dir, Self::command(priority, args))
    }

    /// quaverd with `args` at real-time `priority` (0: none), logging at debug level.
    fn command(priority: u32, args: &[&str]) -> Command {
        let mut cmd = Command::new(quaverd_bin());
        cmd.args([
            "--realtime-priority",
            &priority.to_string(),
            "--log-level",
            "debug",
        ]);
        // quaverd's default opens every sound card found: a test that names neither a
        // device nor a config must not take the developer's cards.
        if !args
            .iter()
            .any(|a| matches!(*a, "--device" | "-d" | "--config") || a.starts_with("--device="))
        {
            cmd.args(["--device", "null"]);
        }
        cmd.args(args);
        cmd
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

    /// The daemon's PulseAudio socket.
    pub fn pulse_socket(&self) -> PathBuf {
        self.runtime.parent().unwrap().join("pulse").join("native")
    }

    /// A libpulse tool (`paplay`, `pactl`, …) aimed at this daemon only: PULSE_SERVER
    /// set, autospawn off, HOME and libpulse's runtime and state inside the test's
    /// directory, no inherited cookie or default device, in the test's directory.
    pub fn pulse_client(&self, prog: &str) -> Command {
        let conf = self.path("pulse-client.conf");
        if !conf.exists() {
            std::fs::write(&conf, "autospawn = no\n").unwrap();
        }
        let home = self.path("home");
        std::fs::create_dir_all(&home).unwrap();
        let mut c = Command::new(prog);
        c.env(
            "PULSE_SERVER",
            format!("unix:{}", self.pulse_socket().display()),
        )
        .env("PULSE_CLIENTCONFIG", &conf)
        .env("PULSE_RUNTIME_PATH", home.join("pulse-runtime"))
        .env("PULSE_STATE_PATH", home.join("pulse-state"))
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", self.runtime.parent().unwrap())
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("PULSE_COOKIE")
        .env_remove("PULSE_SINK")
        .env_remove("PULSE_SOURCE")
        .current_dir(self.dir.path())
        .stdin(Stdio::null());
        c
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
