//! Harness: a private quaverd per test (quaver-testkit) and JACK programs run through
//! `quaver-jack` against it. Every wait is bounded; processes are stopped by PID.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

// Each test binary uses its own subset of these.
#[allow(unused_imports)]
pub use quaver_testkit::{WAIT, kill, ok, signal, text, wait_output, wait_until};

/// The `quaver-jack` wrapper under test.
pub fn wrapper() -> PathBuf {
    quaver_testkit::quaver_jack_bin()
}

/// True if the JACK example program `name` is installed; prints why a test is skipped
/// otherwise.
pub fn have_tool(name: &str) -> bool {
    let found = quaver_testkit::on_path(name);
    if !found {
        eprintln!(
            "SKIPPED: {name} is not installed (Debian package jackd2); \
             scripts/test installs it when run as root"
        );
    }
    found
}

/// A private quaverd (everything of [`quaver_testkit::Daemon`]) that runs JACK programs.
pub struct Daemon(quaver_testkit::Daemon);

impl std::ops::Deref for Daemon {
    type Target = quaver_testkit::Daemon;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Daemon {
    /// Starts quaverd with `args`, with quaver's current libjack next to the wrapper.
    pub fn start(args: &[&str]) -> Daemon {
        quaver_testkit::libjack();
        Daemon(quaver_testkit::Daemon::start(args))
    }

    /// Like [`Daemon::start`], with the engine's thread at SCHED_FIFO 20 (where it is
    /// refused, quaverd says so and runs without): for tests that count missed cycles
    /// on a machine other work keeps busy.
    pub fn start_realtime(args: &[&str]) -> Daemon {
        quaver_testkit::libjack();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(quaver_testkit::quaverd_bin());
        cmd.args(["--realtime-priority", "20", "--log-level", "debug"]);
        if !args.iter().any(|a| a.starts_with("--device")) {
            cmd.args(["--device", "null"]);
        }
        cmd.args(args);
        Daemon(quaver_testkit::Daemon::start_cmd(dir, cmd))
    }

    /// A native client connection.
    pub fn connect(&self) -> quaver_client::Connection {
        self.0.connect("jack-test")
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
}
