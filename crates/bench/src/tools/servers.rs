//! Sound servers under test, each started headless in its own runtime directory with a
//! null sink at 48 kHz stereo, reachable by PulseAudio-protocol clients (`pacat`,
//! `pactl`) through the environment [`Server::client_env`] gives, and stopped by PID.

use crate::Ctx;
use crate::tools::daemon::{Daemon, DaemonSpec};
use crate::tools::exec::{describe, run_bounded, stop_child, which};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::DirBuilderExt;
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
        log: Option<PathBuf>,
        _dir: tempfile::TempDir,
    },
    /// Several processes started in order (stopped in reverse); `measured` says which
    /// of them count as the server.
    Group {
        children: Vec<(String, Child, bool)>,
        _dir: tempfile::TempDir,
    },
}

/// What a headless PipeWire needs besides `pipewire` itself.
pub const PIPEWIRE_PROGRAMS: [&str; 4] =
    ["pipewire", "pipewire-pulse", "wireplumber", "dbus-daemon"];

/// pipewire.conf drop-in: no D-Bus, 48 kHz only, a null sink that drives the graph.
pub const PIPEWIRE_CONF: &str = r#"context.properties = {
    support.dbus = false
    default.clock.rate = 48000
    default.clock.allowed-rates = [ 48000 ]
}
context.objects = [
    { factory = adapter
      args = {
          factory.name = support.null-audio-sink
          node.name = "null"
          node.description = "null sink"
          media.class = "Audio/Sink"
          audio.rate = 48000
          audio.channels = 2
          audio.position = [ FL FR ]
          node.driver = true
          priority.driver = 20000
          priority.session = 20000
          object.linger = true
      }
    }
]
"#;

/// pipewire-pulse.conf drop-in.
pub const PIPEWIRE_PULSE_CONF: &str = "context.properties = {\n    support.dbus = false\n}\n";

/// WirePlumber (0.4, Lua config) drop-ins: no device monitors (no ALSA cards, cameras,
/// Bluetooth), so the null sink is the only sink.
pub const WIREPLUMBER_MAIN_LUA: &str = "alsa_monitor.enabled = false\n\
v4l2_monitor = v4l2_monitor or {}\nv4l2_monitor.enabled = false\n\
libcamera_monitor = libcamera_monitor or {}\nlibcamera_monitor.enabled = false\n";
/// WirePlumber Bluetooth drop-in.
pub const WIREPLUMBER_BT_LUA: &str =
    "bluez_monitor = bluez_monitor or {}\nbluez_monitor.enabled = false\n";

/// A running server.
pub struct Server {
    /// Which.
    pub kind: ServerKind,
    process: Process,
    xdg: PathBuf,
    home: PathBuf,
}

impl Server {
    /// Starts a fresh server of `kind`, headless in its own runtime directory.
    pub fn start(ctx: &mut Ctx, kind: ServerKind) -> Result<Server> {
        match kind {
            ServerKind::Quaverd => Server::quaverd(ctx),
            ServerKind::Pulseaudio => Server::pulseaudio(ctx),
            ServerKind::Pipewire => Server::pipewire(ctx),
        }
    }

    /// Starts quaverd on a null sink (its PulseAudio front-end on, as by default).
    pub fn quaverd(ctx: &mut Ctx) -> Result<Server> {
        Server::quaverd_with(
            ctx,
            DaemonSpec {
                devices: vec!["null:rate=48000,channels=stereo".into()],
                rate: Some(48_000),
                ..DaemonSpec::default()
            },
        )
    }

    /// Starts quaverd as `spec` says (e.g. on the sim card), its PulseAudio front-end on.
    pub fn quaverd_with(ctx: &mut Ctx, spec: DaemonSpec) -> Result<Server> {
        let d = ctx.start_daemon(spec)?;
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

    /// The sink module [`Server::pulseaudio`] loads.
    pub const PULSEAUDIO_NULL_SINK: &'static str =
        "module-null-sink sink_name=null rate=48000 channels=2";

    /// Starts PulseAudio with no configuration files, no autospawn and a null sink.
    pub fn pulseaudio(ctx: &mut Ctx) -> Result<Server> {
        Server::pulseaudio_with_sink(ctx, Server::PULSEAUDIO_NULL_SINK)
    }

    /// Starts PulseAudio like [`Server::pulseaudio`], with `sink_module` (a `-L` module
    /// line, e.g. `module-alsa-sink device=null …`) as its sink.
    pub fn pulseaudio_with_sink(ctx: &mut Ctx, sink_module: &str) -> Result<Server> {
        if which("pulseaudio").is_none() {
            bail!("pulseaudio is not installed");
        }
        let dir = crate::tools::exec::tempdir("quaver-bench-pulse-")?;
        let xdg = dir.path().join("xdg");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&xdg)?;
        std::fs::create_dir_all(&home)?;
        let mut cmd = Command::new("pulseaudio");
        cmd.env("XDG_RUNTIME_DIR", &xdg)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("PULSE_RUNTIME_PATH", xdg.join("pulse"))
            .args(quaver_client::peers::PULSEAUDIO_HEADLESS)
            .args(["-L", sink_module, "-L", "module-native-protocol-unix"]);
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
            process: Process::Other {
                child,
                log: Some(log.clone()),
                _dir: dir,
            },
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

    /// Starts PipeWire headless: a private D-Bus session bus (WirePlumber 0.4 will
    /// not run without one), `pipewire` with a drop-in that disables D-Bus and adds a
    /// 48 kHz null sink driving the graph, `wireplumber` with its device monitors off,
    /// and `pipewire-pulse`; all in a private `XDG_RUNTIME_DIR`, `HOME` and
    /// `XDG_CONFIG_HOME`. pipewire, wireplumber and pipewire-pulse are measured
    /// together; the bus is scaffolding and is not.
    pub fn pipewire(ctx: &mut Ctx) -> Result<Server> {
        Server::pipewire_with(ctx, &[])
    }

    /// Starts PipeWire like [`Server::pipewire`], with more drop-ins: each a path
    /// under `$XDG_CONFIG_HOME` (e.g. `pipewire/pipewire.conf.d/91-x.conf`, read
    /// after the bench's own) and its text.
    pub fn pipewire_with(ctx: &mut Ctx, extra: &[(&str, &str)]) -> Result<Server> {
        for p in PIPEWIRE_PROGRAMS {
            if which(p).is_none() {
                bail!("{p} is not installed");
            }
        }
        let dir = crate::tools::exec::tempdir("quaver-bench-pipewire-")?;
        let xdg = dir.path().join("xdg");
        let home = dir.path().join("home");
        let cfg = dir.path().join("config");
        for d in [
            &xdg,
            &home,
            &cfg.join("pipewire/pipewire.conf.d"),
            &cfg.join("pipewire/pipewire-pulse.conf.d"),
            &cfg.join("wireplumber/main.lua.d"),
            &cfg.join("wireplumber/bluetooth.lua.d"),
        ] {
            std::fs::create_dir_all(d)?;
        }
        // pipewire-pulse checks for $XDG_RUNTIME_DIR/pulse and then creates it, and
        // fails ("mkdir() …/pulse failed: File exists") when the readiness probe's
        // libpulse makes it in between; made here first, there is nothing to race.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(xdg.join("pulse"))?;
        let files = [
            (
                "pipewire/pipewire.conf.d/90-quaver-bench.conf",
                PIPEWIRE_CONF,
            ),
            (
                "pipewire/pipewire-pulse.conf.d/90-quaver-bench.conf",
                PIPEWIRE_PULSE_CONF,
            ),
            (
                "wireplumber/main.lua.d/90-quaver-bench.lua",
                WIREPLUMBER_MAIN_LUA,
            ),
            (
                "wireplumber/bluetooth.lua.d/90-quaver-bench.lua",
                WIREPLUMBER_BT_LUA,
            ),
        ];
        for (name, text) in files.into_iter().chain(extra.iter().copied()) {
            std::fs::write(cfg.join(name), text)?;
            ctx.record_command(format!(
                "# $XDG_CONFIG_HOME/{name}:\n#   {}",
                text.trim().replace('\n', "\n#   ")
            ));
        }
        let bus = format!("unix:path={}", xdg.join("bus").display());
        let mut s = Server {
            kind: ServerKind::Pipewire,
            process: Process::Group {
                children: Vec::new(),
                _dir: dir,
            },
            xdg: xdg.clone(),
            home: home.clone(),
        };
        let steps: [(&str, Vec<String>, bool, u64); 4] = [
            (
                "dbus-daemon",
                vec![
                    "--session".into(),
                    format!("--address={bus}"),
                    "--nofork".into(),
                    "--nopidfile".into(),
                ],
                false,
                300,
            ),
            ("pipewire", vec![], true, 700),
            ("wireplumber", vec![], true, 500),
            ("pipewire-pulse", vec![], true, 0),
        ];
        let logdir = crate::tools::exec::tempdir("quaver-bench-pipewire-log-")?;
        for (prog, args, measured, settle_ms) in steps {
            let mut cmd = Command::new(prog);
            cmd.args(&args)
                .env("XDG_RUNTIME_DIR", &xdg)
                .env("HOME", &home)
                .env("XDG_CONFIG_HOME", &cfg)
                .env("DBUS_SESSION_BUS_ADDRESS", &bus)
                .env_remove("PULSE_SERVER")
                .env_remove("PIPEWIRE_REMOTE");
            ctx.record_command(format!("{} &", describe(&cmd)));
            let log = logdir.path().join(format!("{prog}.log"));
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()
                .with_context(|| format!("starting {prog}"))?;
            if let Process::Group { children, .. } = &mut s.process {
                children.push((prog.to_string(), child, measured));
            }
            std::thread::sleep(Duration::from_millis(settle_ms));
            if !s.alive() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                s.stop();
                bail!("{prog} exited at start: {}", text.trim());
            }
        }
        if let Err(e) = s.wait_ready().and_then(|_| s.check_alive()) {
            let mut text = String::new();
            for p in ["pipewire", "wireplumber", "pipewire-pulse"] {
                let t = std::fs::read_to_string(logdir.path().join(format!("{p}.log")))
                    .unwrap_or_default();
                text.push_str(&format!("{p}: {}\n", t.trim()));
            }
            s.stop();
            return Err(e.context(text));
        }
        Ok(s)
    }

    /// The server's main PID.
    pub fn pid(&self) -> u32 {
        self.pids()[0]
    }

    /// Every process whose cost counts as the server's (PipeWire: pipewire,
    /// wireplumber and pipewire-pulse).
    pub fn pids(&self) -> Vec<u32> {
        match &self.process {
            Process::Quaverd(d) => vec![d.pid()],
            Process::Other { child, .. } => vec![child.id()],
            Process::Group { children, .. } => children
                .iter()
                .filter(|(_, _, m)| *m)
                .map(|(_, c, _)| c.id())
                .collect(),
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

    /// The PulseAudio-protocol socket (`$PULSE_RUNTIME_PATH/native`).
    pub fn pulse_socket(&self) -> PathBuf {
        self.xdg.join("pulse").join("native")
    }

    /// The authentication cookie PulseAudio created for its clients (`None` if the
    /// server wrote none; quaverd and pipewire-pulse do not check it).
    pub fn cookie(&self) -> Option<PathBuf> {
        let p = self.home.join(".config").join("pulse").join("cookie");
        p.exists().then_some(p)
    }

    fn alive(&mut self) -> bool {
        match &mut self.process {
            Process::Quaverd(d) => d.alive(),
            Process::Other { child, .. } => matches!(child.try_wait(), Ok(None)),
            Process::Group { children, .. } => children
                .iter_mut()
                .all(|(_, c, _)| matches!(c.try_wait(), Ok(None))),
        }
    }

    /// How the server's (main) process ended, if it has: `exit status: 1`, `signal: 9
    /// (SIGKILL)`; `None` while it runs.
    pub fn exit_status(&mut self) -> Option<String> {
        let st = match &mut self.process {
            Process::Quaverd(d) => return (!d.alive()).then(|| "exited".to_string()),
            Process::Other { child, .. } => child.try_wait().ok().flatten(),
            Process::Group { children, .. } => children
                .iter_mut()
                .find_map(|(_, c, _)| c.try_wait().ok().flatten()),
        };
        st.map(|s| s.to_string())
    }

    /// The server's own log (stderr), where it has one file for it (PulseAudio).
    pub fn log_text(&self) -> Option<String> {
        match &self.process {
            Process::Other { log: Some(p), .. } => std::fs::read_to_string(p).ok(),
            _ => None,
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
            Process::Group { children, .. } => {
                for (_, c, _) in children.iter_mut().rev() {
                    stop_child(c, Duration::from_secs(5));
                }
            }
        }
    }

    /// Whether it still runs (a crash during a measurement invalidates it).
    pub fn check_alive(&mut self) -> Result<()> {
        match self.ended() {
            None => Ok(()),
            Some(how) => bail!("{how} during the measurement"),
        }
    }

    /// How it ended, with the last lines of its log where it keeps one (`pulseaudio
    /// ended (signal: 9 (SIGKILL)); its log ends: …`); `None` while it runs.
    pub fn ended(&mut self) -> Option<String> {
        if self.alive() {
            return None;
        }
        let status = self.exit_status().unwrap_or_else(|| "exited".to_string());
        let tail = self.log_text().map(|t| {
            let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
            lines[lines.len().saturating_sub(3)..].join(" | ")
        });
        Some(match tail {
            Some(t) if !t.is_empty() => {
                format!("{} ended ({status}); its log ends: {t}", self.kind.name())
            }
            _ => format!("{} ended ({status})", self.kind.name()),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
