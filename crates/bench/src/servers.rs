//! Sound servers under test, each started headless in its own runtime directory with a
//! null sink at 48 kHz stereo, reachable by PulseAudio-protocol clients (`pacat`,
//! `pactl`) through the environment [`Server::client_env`] gives, and stopped by PID.

use crate::Ctx;
use crate::daemon::{Daemon, DaemonSpec};
use crate::exec::{describe, run_bounded, stop_child, which};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a server may take to answer `pactl info` after starting.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    /// quaverd (through its PulseAudio front-end).
    Quaverd,
    /// PulseAudio.
    Pulseaudio,
    /// PipeWire with pipewire-pulse.
    Pipewire,
}

impl ServerKind {
    /// Name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            ServerKind::Quaverd => "quaverd",
            ServerKind::Pulseaudio => "pulseaudio",
            ServerKind::Pipewire => "pipewire",
        }
    }
}

enum Process {
    Quaverd(Box<Daemon>),
    Other {
        child: Child,
        _dir: tempfile::TempDir,
    },
}

/// A running server.
pub struct Server {
    /// Which.
    pub kind: ServerKind,
    process: Process,
    xdg: PathBuf,
    home: PathBuf,
}

impl Server {
    /// Starts quaverd on a null sink (its PulseAudio front-end on, as by default).
    pub fn quaverd(ctx: &mut Ctx) -> Result<Server> {
        let d = ctx.start_daemon(DaemonSpec {
            devices: vec!["null:rate=48000,channels=stereo".into()],
            rate: Some(48_000),
            ..DaemonSpec::default()
        })?;
        let xdg = d.dir().join("xdg");
        let home = d.dir().join("home");
        std::fs::create_dir_all(&home)?;
        let s = Server {
            kind: ServerKind::Quaverd,
            process: Process::Quaverd(Box::new(d)),
            xdg,
            home,
        };
        s.wait_ready()?;
        Ok(s)
    }

    /// Starts PulseAudio with no configuration files, no autospawn and a null sink.
    pub fn pulseaudio(ctx: &mut Ctx) -> Result<Server> {
        if which("pulseaudio").is_none() {
            bail!("pulseaudio is not installed");
        }
        let dir = tempfile::Builder::new()
            .prefix("quaver-bench-pulse-")
            .tempdir()?;
        let xdg = dir.path().join("xdg");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&xdg)?;
        std::fs::create_dir_all(&home)?;
        let mut cmd = Command::new("pulseaudio");
        cmd.env("XDG_RUNTIME_DIR", &xdg)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("PULSE_RUNTIME_PATH", xdg.join("pulse"))
            .args([
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--use-pid-file=no",
                "--system=no",
                "--log-target=stderr",
                "-L",
                "module-null-sink sink_name=null rate=48000 channels=2",
                "-L",
                "module-native-protocol-unix",
            ]);
        ctx.record_command(format!("{} &", describe(&cmd)));
        let log = dir.path().join("pulseaudio.log");
        let child = cmd
            .env_remove("PULSE_SERVER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting pulseaudio")?;
        let mut s = Server {
            kind: ServerKind::Pulseaudio,
            process: Process::Other { child, _dir: dir },
            xdg,
            home,
        };
        if let Err(e) = s.wait_ready() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            s.stop();
            return Err(e.context(text.trim().to_string()));
        }
        Ok(s)
    }

    /// The server's PID (the process whose cost is measured).
    pub fn pid(&self) -> u32 {
        match &self.process {
            Process::Quaverd(d) => d.pid(),
            Process::Other { child, .. } => child.id(),
        }
    }

    /// Points a PulseAudio client at this server.
    pub fn client_env(&self, cmd: &mut Command) {
        cmd.env("XDG_RUNTIME_DIR", &self.xdg)
            .env("HOME", &self.home)
            .env("PULSE_RUNTIME_PATH", self.xdg.join("pulse"))
            .env_remove("PULSE_SERVER");
    }

    /// The private runtime directory.
    pub fn runtime_dir(&self) -> &Path {
        &self.xdg
    }

    fn alive(&mut self) -> bool {
        match &mut self.process {
            Process::Quaverd(d) => d.alive(),
            Process::Other { child, .. } => matches!(child.try_wait(), Ok(None)),
        }
    }

    /// Waits (bounded) until `pactl info` answers.
    pub fn wait_ready(&self) -> Result<()> {
        if which("pactl").is_none() {
            // No way to ask; give it a moment.
            std::thread::sleep(Duration::from_secs(1));
            return Ok(());
        }
        let t0 = Instant::now();
        loop {
            let mut c = Command::new("pactl");
            self.client_env(&mut c);
            c.arg("info");
            if run_bounded(&mut c, Duration::from_secs(5))?.success() {
                return Ok(());
            }
            if t0.elapsed() > READY_TIMEOUT {
                bail!(
                    "{} did not answer `pactl info` within {READY_TIMEOUT:?}",
                    self.kind.name()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops it by PID.
    pub fn stop(&mut self) {
        match &mut self.process {
            Process::Quaverd(d) => {
                let _ = d.stop();
            }
            Process::Other { child, .. } => {
                stop_child(child, Duration::from_secs(5));
            }
        }
    }

    /// Whether it still runs (a crash during a measurement invalidates it).
    pub fn check_alive(&mut self) -> Result<()> {
        if self.alive() {
            Ok(())
        } else {
            bail!("{} exited during the measurement", self.kind.name())
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
