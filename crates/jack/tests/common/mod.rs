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
        Daemon(quaver_testkit::Daemon::start_realtime(20, args))
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

/// A private jackd2 on the dummy driver (48 kHz, `period` frames) for answers to
/// compare with, stopped by PID when dropped.
///
/// Its server name is `quaver-test-N`, the first N from a small set whose lock file
/// (`$TMPDIR/quaver-test-jackd-N.lock`, `flock`ed while the server lives, released by
/// the kernel if the test dies) no other test holds, in this process or another. Not a
/// name per process: jackd2 keeps at most 8 servers in its registry
/// (`/dev/shm/jack-shm-registry`) and reclaims an entry only when a server of the same
/// name starts, so a jackd that was killed rather than stopped would hold its slot for
/// good; reused names take such slots back. Not a name without a lock: two tests
/// starting the same name at once both found the first one's server ready.
pub struct Jackd {
    child: Option<Child>,
    name: String,
    _lock: std::fs::File,
}

impl Jackd {
    /// Starts jackd and waits (bounded) until it lists its playback ports; `None`, with
    /// a SKIPPED line, when jackd2's programs are not installed.
    pub fn start(period: &str) -> Option<Jackd> {
        if !have_tool("jackd") || !have_tool("jack_lsp") {
            return None;
        }
        for n in 0..8 {
            let path = std::env::temp_dir().join(format!("quaver-test-jackd-{n}.lock"));
            let lock = std::fs::File::create(&path).expect("creating a jackd lock file");
            // SAFETY: flock on a descriptor this function owns.
            let taken = unsafe {
                libc::flock(
                    std::os::fd::AsRawFd::as_raw_fd(&lock),
                    libc::LOCK_EX | libc::LOCK_NB,
                )
            } != 0;
            if taken {
                continue;
            }
            let name = format!("quaver-test-{n}");
            let child = Command::new("jackd")
                .env("JACK_NO_AUDIO_RESERVATION", "1")
                .args(["-n", &name, "-d", "dummy", "-r", "48000", "-p", period])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawning jackd");
            let mut j = Jackd {
                child: Some(child),
                name,
                _lock: lock,
            };
            // Up, or gone at once: the name is held by a server no test started (or
            // the registry is full), so the next name is tried.
            let mut exited = false;
            let up = wait_until(WAIT, || {
                if let Some(c) = j.child.as_mut()
                    && c.try_wait().ok().flatten().is_some()
                {
                    exited = true;
                    return true;
                }
                j.cmd(&["jack_lsp"])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("system:playback_1"))
            });
            if up && !exited {
                return Some(j);
            }
            assert!(up, "jackd -d dummy -n {} did not come up", j.name);
        }
        panic!("no jackd could start under quaver-test-0..7 (all in use?)");
    }

    /// `ARGS…` aimed at this server with the system's libjack (output piped).
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(args[0]);
        c.args(&args[1..])
            .env("JACK_DEFAULT_SERVER", &self.name)
            .env("JACK_NO_START_SERVER", "1")
            .env_remove("LD_LIBRARY_PATH")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `ARGS…` against this server to completion (bounded).
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self.cmd(args).spawn().expect("spawning a JACK program");
        wait_output(child, WAIT)
    }
}

impl Drop for Jackd {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            signal(c.id(), libc::SIGTERM);
            let _ = wait_output(c, WAIT);
        }
    }
}

/// The Python that has Debian's python3-jack-client.
pub const PYTHON: &str = "/usr/bin/python3";

/// True if [`PYTHON`] can import jack; prints why a test is skipped otherwise.
pub fn have_python_jack() -> bool {
    let found = Command::new(PYTHON)
        .args(["-c", "import jack"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("SKIPPED: {PYTHON} cannot import jack (Debian package python3-jack-client)");
    }
    found
}

/// A long-running probe program (a python3-jack-client script, say) talked to over its
/// stdin, its stdout lines read on a thread of their own so every wait can be bounded.
pub struct Probe {
    /// The probe; its stdin is piped.
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Probe {
    /// Spawns `cmd` with stdin and stdout piped (stderr passed through).
    pub fn start(mut cmd: Command) -> Probe {
        use std::io::BufRead;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the probe");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Probe { child, lines }
    }

    /// The next line starting with `prefix` (bounded wait; other lines are skipped).
    pub fn expect(&mut self, prefix: &str) -> String {
        let t0 = std::time::Instant::now();
        loop {
            let left = WAIT.saturating_sub(t0.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return l,
                Ok(_) => {}
                Err(_) => panic!("the probe never printed '{prefix}…'"),
            }
        }
    }
}

/// The daemon's graph now.
pub fn graph(d: &Daemon) -> quaver_client::quaver_protocol::GraphInfo {
    d.connect().graph().unwrap()
}

/// The callback statistics of the node called `node`, if it is a callback client.
pub fn callback_info(
    d: &Daemon,
    node: &str,
) -> Option<quaver_client::quaver_protocol::CallbackNodeInfo> {
    graph(d)
        .nodes
        .into_iter()
        .find(|n| n.name == node)
        .and_then(|n| n.callback)
}

/// Builds `tests/c/NAME.c` against JACK's headers and quaver's libjack into `dir/NAME`;
/// `None`, with a SKIPPED line, without the headers (`header` is the one it needs) or gcc.
pub fn build_c(name: &str, header: &str, dir: &std::path::Path) -> Option<PathBuf> {
    if !std::path::Path::new(header).exists() {
        eprintln!("SKIPPED: JACK headers missing (Debian package libjack-jackd2-dev)");
        return None;
    }
    let exe = dir.join(name);
    // Cargo's value at run time (see the cli crate's decode tests for why).
    let src = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join(format!("tests/c/{name}.c"));
    let lib_dir = wrapper().parent().unwrap().to_path_buf();
    let out = match Command::new("gcc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(src)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-ljack")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED: cannot run gcc ({e})");
            return None;
        }
    };
    assert!(out.status.success(), "gcc failed: {}", text(&out));
    Some(exe)
}
