//! `peers`: the same workloads against PulseAudio, PipeWire (+ pipewire-pulse) and
//! JACK2's dummy driver, each started headless in its own runtime directory.
//!
//! Not finished: the workloads need quaver's PulseAudio-protocol front-end (issue 3) so
//! that one PulseAudio-protocol client can drive every server alike. What runs today:
//! every peer is detected and its version recorded ("not installed" otherwise), and
//! each installed peer is started headless with a null sink, checked to answer, sampled
//! idle (CPU, wakeups, RSS) and stopped by PID.

use crate::Ctx;
use crate::exec::{describe, run_bounded, stop_child, which};
use crate::machine::{NOT_INSTALLED, tool_version};
use crate::procfs::{self, ProcDelta};
use crate::report::{ModeOutput, Table};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A peer sound server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// PulseAudio.
    Pulseaudio,
    /// PipeWire with pipewire-pulse.
    Pipewire,
    /// JACK2 (jackd -d dummy).
    Jack,
}

impl Peer {
    /// All peers.
    pub const ALL: [Peer; 3] = [Peer::Pulseaudio, Peer::Pipewire, Peer::Jack];

    /// The server binary.
    pub fn binary(&self) -> &'static str {
        match self {
            Peer::Pulseaudio => "pulseaudio",
            Peer::Pipewire => "pipewire",
            Peer::Jack => "jackd",
        }
    }
}

/// What `peers` found out about one peer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerStatus {
    /// Which.
    pub peer: Peer,
    /// `--version` output or "not installed".
    pub version: String,
    /// Whether it started headless and answered.
    pub started: Option<bool>,
    /// Why not, if it did not.
    pub error: Option<String>,
    /// Idle CPU seconds per second while sampled.
    pub idle_cpu_per_s: Option<f64>,
    /// Idle voluntary context switches per second (all threads).
    pub idle_wakeups_per_s: Option<f64>,
    /// RSS, kB.
    pub rss_kb: Option<u64>,
}

/// Detects every peer and, for installed ones, starts it headless and samples it idle.
pub fn run(ctx: &mut Ctx) -> Result<Vec<PeerStatus>> {
    let idle = if ctx.quick { 1.0 } else { 5.0 };
    let mut out = Vec::new();
    for p in Peer::ALL {
        let version = tool_version(p.binary(), &["--version"]);
        let mut st = PeerStatus {
            peer: p,
            version: version.clone(),
            started: None,
            error: None,
            idle_cpu_per_s: None,
            idle_wakeups_per_s: None,
            rss_kb: None,
        };
        if version != NOT_INSTALLED {
            match p {
                Peer::Pulseaudio => match idle_pulseaudio(ctx, idle) {
                    Ok((d, rss)) => {
                        st.started = Some(true);
                        st.idle_cpu_per_s = Some(d.cpu_s / d.wall_s.max(1e-9));
                        st.idle_wakeups_per_s = Some(d.voluntary as f64 / d.wall_s.max(1e-9));
                        st.rss_kb = Some(rss);
                    }
                    Err(e) => {
                        st.started = Some(false);
                        st.error = Some(format!("{e:#}"));
                    }
                },
                _ => {
                    st.error = Some("headless start not implemented yet".into());
                }
            }
        }
        out.push(st);
    }
    Ok(out)
}

/// Starts PulseAudio headless in a private runtime directory (no autospawn, no
/// configuration files, a null sink), waits until `pactl info` answers, samples it
/// idle for `seconds`, and stops it by PID.
fn idle_pulseaudio(ctx: &mut Ctx, seconds: f64) -> Result<(ProcDelta, u64)> {
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
    let line = describe(&cmd);
    ctx.record_command(format!("{line} &"));
    let log = dir.path().join("pulseaudio.log");
    let mut child = cmd
        .env_remove("PULSE_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting pulseaudio")?;
    let result = (|| -> Result<(ProcDelta, u64)> {
        let t0 = Instant::now();
        let mut info = Command::new("pactl");
        info.env("XDG_RUNTIME_DIR", &xdg)
            .env("HOME", &home)
            .env("PULSE_RUNTIME_PATH", xdg.join("pulse"))
            .env_remove("PULSE_SERVER")
            .arg("info");
        loop {
            if which("pactl").is_none() {
                break;
            }
            let c = run_bounded(&mut info, Duration::from_secs(5))?;
            if c.success() {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                bail!(
                    "pulseaudio exited at start ({st}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default().trim()
                );
            }
            if t0.elapsed() > Duration::from_secs(15) {
                bail!("pulseaudio did not answer `pactl info` within 15 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(300));
        let a = procfs::sample(pid)?;
        std::thread::sleep(Duration::from_secs_f64(seconds));
        let b = procfs::sample(pid)?;
        let rss = procfs::memory(pid)?.rss_kb;
        Ok((
            ProcDelta::between(&a, &b, procfs::clock_ticks_per_second()),
            rss,
        ))
    })();
    stop_child(&mut child, Duration::from_secs(5));
    result
}

/// Tables for the report.
pub fn render(peers: &[PeerStatus]) -> ModeOutput {
    let mut t = Table::new(&[
        "peer",
        "version",
        "headless start",
        "idle CPU s/s",
        "idle wakeups/s",
        "RSS MiB",
    ]);
    for p in peers {
        t.row(vec![
            p.peer.binary().into(),
            p.version.clone(),
            match (p.started, &p.error) {
                (Some(true), _) => "ok".into(),
                (_, Some(e)) => e.clone(),
                _ => "–".into(),
            },
            p.idle_cpu_per_s.map_or("–".into(), |v| format!("{v:.5}")),
            p.idle_wakeups_per_s
                .map_or("–".into(), |v| format!("{v:.1}")),
            p.rss_kb
                .map_or("–".into(), |v| format!("{:.1}", v as f64 / 1024.0)),
        ]);
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## Peers\n\nThe side-by-side `latency` and `load` workloads against the peers need \
         quaver's PulseAudio-protocol front-end (issue 3) and are not run yet. Below: \
         which peers are installed, and for those that can be started headless here, \
         their idle cost.\n"
    );
    md.push_str(&t.markdown());
    ModeOutput {
        results: serde_json::to_value(peers).unwrap_or_default(),
        markdown: md,
        plots: Vec::new(),
        summary: t,
    }
}
