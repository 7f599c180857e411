//! A private quaverd for one measurement: its own runtime and config directories,
//! started with exactly the flags the benchmark records, stopped by PID.

use crate::tools::exec::{describe, signal, wait_bounded};
use anyhow::{Context, Result, bail};
use quaver_client::Connection;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a daemon may take to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest a daemon may take to exit after SIGTERM before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start quaverd.
#[derive(Debug, Clone, Default)]
pub struct DaemonSpec {
    /// `--device` specs, in order (the first drives the clock).
    pub devices: Vec<String>,
    /// `--rate`.
    pub rate: Option<u32>,
    /// `--quantum` (the quantum while no stream asks for a latency).
    pub quantum: Option<usize>,
    /// `--quantum-min`.
    pub quantum_min: Option<usize>,
    /// `--quantum-max`.
    pub quantum_max: Option<usize>,
    /// `--realtime-priority` (None: quaverd's default).
    pub realtime_priority: Option<i32>,
    /// Extra configuration file text (TOML), written to the private config file.
    pub config: String,
}

impl DaemonSpec {
    /// The command-line arguments (without `--config`).
    pub fn args(&self) -> Vec<String> {
        let mut a = Vec::new();
        for d in &self.devices {
            a.push("--device".to_string());
            a.push(d.clone());
        }
        let mut opt = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                a.push(k.to_string());
                a.push(v);
            }
        };
        opt("--rate", self.rate.map(|v| v.to_string()));
        opt("--quantum-min", self.quantum_min.map(|v| v.to_string()));
        opt("--quantum-max", self.quantum_max.map(|v| v.to_string()));
        opt("--quantum", self.quantum.map(|v| v.to_string()));
        opt(
            "--realtime-priority",
            self.realtime_priority.map(|v| v.to_string()),
        );
        a
    }
}

/// A running private quaverd.
pub struct Daemon {
    child: Option<Child>,
    pid: u32,
    dir: tempfile::TempDir,
    socket: PathBuf,
    log: PathBuf,
    command: String,
}

impl Daemon {
    /// Starts `bin` as `spec` says in a fresh temporary directory and waits (bounded)
    /// until it accepts connections.
    pub fn start(bin: &Path, spec: &DaemonSpec) -> Result<Daemon> {
        let dir = crate::tools::exec::tempdir("quaver-bench-")
            .context("creating a private runtime directory")?;
        let xdg = dir.path().join("xdg");
        std::fs::create_dir_all(&xdg)?;
        let config = dir.path().join("quaver.toml");
        std::fs::write(&config, &spec.config)?;
        let log = dir.path().join("quaverd.log");
        let mut cmd = Command::new(bin);
        cmd.env("XDG_RUNTIME_DIR", &xdg)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .arg("--config")
            .arg(&config)
            .args(spec.args());
        let command = describe(&cmd);
        let child = cmd
            .env_remove("QUAVER_SERVER")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut d = Daemon {
            pid: child.id(),
            child: Some(child),
            socket: xdg.join("quaver").join("native"),
            dir,
            log,
            command,
        };
        d.wait_ready()?;
        Ok(d)
    }

    fn wait_ready(&mut self) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if let Some(st) = self.child.as_mut().expect("running").try_wait()? {
                self.child = None;
                bail!("quaverd exited at start ({st}):\n{}", self.log_tail());
            }
            if t0.elapsed() > START_TIMEOUT {
                self.kill();
                bail!(
                    "quaverd did not accept connections within {START_TIMEOUT:?}:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The daemon's PID.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The private directory (the daemon's working directory).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The exact command line it was started with (environment included).
    pub fn command(&self) -> &str {
        &self.command
    }

    /// A new client connection.
    pub fn connect(&self, name: &str) -> Result<Connection> {
        Connection::connect(Some(&self.socket), name)
            .with_context(|| format!("connecting to quaverd at {}", self.socket.display()))
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM, then waits (bounded) for a clean exit; kills it if it hangs.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        signal(self.pid, libc::SIGTERM);
        match wait_bounded(&mut child, STOP_TIMEOUT)? {
            (Some(st), _) if st.success() => Ok(()),
            (Some(st), _) => bail!("quaverd exited with {st}:\n{}", self.log_tail()),
            (None, _) => bail!(
                "quaverd did not stop within {STOP_TIMEOUT:?} of SIGTERM and was killed:\n{}",
                self.log_tail()
            ),
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `quaverd --version`, e.g. "quaverd 0.1.0".
pub fn quaverd_version(bin: &Path) -> String {
    crate::tools::machine::version_of(bin, &["--version"]).unwrap_or_else(|| "unknown".into())
}
