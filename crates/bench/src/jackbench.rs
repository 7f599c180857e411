//! `jack`: one JACK client ([`crate::jackclient`]) against quaverd (quaver's libjack),
//! jackd2 (dummy driver) and PipeWire (pipewire-jack), for two acceptance items of the
//! low-latency work:
//!
//! - **xruns under load**: at each period (64 and 32 frames) and with `stress-ng --cpu
//!   2` running, the client renders a SynthMark-like voice load of about half a core
//!   for a window (60 s) on each server, in rounds (3) whose windows alternate the
//!   servers; xruns as each server counts them, as the client's xrun callback reports
//!   them and as the client observes them (frame-time jumps, callbacks ending after the
//!   next cycle's start), per window and summed per server (the verdict is on the
//!   sums), next to cyclictest's count of wakeups later than one period under the same
//!   load for the same time;
//! - **per-client overhead**: 1, 8 and 32 clients with a light fixed load; quaverd's
//!   per-node WAIT/BUSY per client (its `timing` reply's nodes, pw-top's definitions),
//!   the time its RT thread blocked on and spent on each client, cycle busy time,
//!   PipeWire's per-node WAIT/BUSY as `pw-top` computes them (from `pw-top -b`, or,
//!   where pw-top has no batch mode, from the same profiler data through
//!   `pw-profiler`), and every server's figures as the client itself measures them.

use crate::cyclictest::{self, CyclictestResult};
use crate::daemon::{Daemon, DaemonSpec};
use crate::exec::{describe, run_bounded, signal, stop_child, wait_bounded, which};
use crate::jackclient::{ChildLine, ClientRun, CounterSnapshot, parse_line};
use crate::machine::{NOT_INSTALLED, tool_version};
use crate::report::{ModeOutput, Table};
use crate::servers::Server;
use crate::stats::{Log2Hist, Summary, fmt_bounds};
use crate::stressor::{self, StressorConfig, StressorKind};
use crate::{Ctx, jackclient};
use anyhow::{Context, Result, anyhow, bail};
use quaver_client::quaver_protocol::{GraphInfo, NodeTimingInfo, StatusInfo, TimingStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a JACK server may take to come up.
pub const JACKD_START_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest the client may take to open its clients and run their first cycles.
pub const CLIENT_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A server the client runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum JackServer {
    /// quaverd through quaver's libjack (`quaver-jack`).
    Quaverd,
    /// jackd2 with the dummy driver.
    Jackd2,
    /// PipeWire through pipewire-jack (`pw-jack`).
    Pipewire,
}

impl JackServer {
    /// Name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            JackServer::Quaverd => "quaverd",
            JackServer::Jackd2 => "jackd2",
            JackServer::Pipewire => "pipewire",
        }
    }
}

/// Settings of a `jack` run.
#[derive(Debug, Clone)]
pub struct JackOptions {
    /// Periods (quanta) of the xrun part, frames.
    pub periods: Vec<usize>,
    /// Sample rate.
    pub rate: u32,
    /// Servers, in order.
    pub servers: Vec<JackServer>,
    /// Run the xrun part.
    pub xruns: bool,
    /// Run the overhead part.
    pub overhead: bool,
    /// Window of the xrun part, s.
    pub seconds: f64,
    /// Windows per server and period in the xrun part, the servers alternating.
    pub repeats: usize,
    /// Warm-up before every window, s.
    pub warmup: f64,
    /// Voice load of the xrun part: share of a core.
    pub load: f64,
    /// Voices of the xrun part (None: calibrated to `load`).
    pub voices: Option<usize>,
    /// Load.
    pub stressor: StressorKind,
    /// Client counts of the overhead part.
    pub counts: Vec<usize>,
    /// Window of each overhead point, s.
    pub overhead_seconds: f64,
    /// Period of the overhead part.
    pub overhead_period: usize,
    /// Voices per client in the overhead part.
    pub overhead_voices: usize,
    /// jackd's `-P` (real-time priority); quaverd's is the common option.
    pub jackd_priority: i32,
    /// The quaver-bench binary (runs the client and the built-in stressor).
    pub self_exe: PathBuf,
}

impl JackOptions {
    /// Defaults for a full or quick run.
    pub fn new(quick: bool, self_exe: PathBuf) -> JackOptions {
        JackOptions {
            periods: vec![64, 32],
            rate: 48_000,
            servers: vec![
                JackServer::Quaverd,
                JackServer::Jackd2,
                JackServer::Pipewire,
            ],
            xruns: true,
            overhead: true,
            seconds: if quick { 3.0 } else { 60.0 },
            repeats: if quick { 1 } else { 3 },
            warmup: if quick { 0.5 } else { 2.0 },
            load: 0.5,
            voices: None,
            stressor: StressorKind::Auto,
            counts: if quick { vec![1, 4] } else { vec![1, 8, 32] },
            overhead_seconds: if quick { 2.0 } else { 10.0 },
            overhead_period: 64,
            overhead_voices: 4,
            jackd_priority: crate::rt::QUAVERD_DEFAULT_PRIORITY,
            self_exe,
        }
    }
}

// ---------------------------------------------------------------- servers

/// jackd2, headless: `jackd -n NAME -R -P PRIO -d dummy -r RATE -p PERIOD`.
pub struct Jackd {
    child: Option<Child>,
    /// Server name (clients find it through `JACK_DEFAULT_SERVER`).
    pub name: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// The exact command.
    pub command: String,
}

impl Jackd {
    /// The command line.
    pub fn command(name: &str, prio: i32, rate: u32, period: usize) -> Command {
        let mut c = Command::new("jackd");
        c.env("JACK_NO_AUDIO_RESERVATION", "1").args([
            "-n",
            name,
            "-R",
            "-P",
            &prio.to_string(),
            "-d",
            "dummy",
            "-r",
            &rate.to_string(),
            "-p",
            &period.to_string(),
        ]);
        c
    }

    /// Starts it and waits (bounded) until `jack_lsp` (or, without it, the server's
    /// log) says it runs.
    pub fn start(prio: i32, rate: u32, period: usize) -> Result<Jackd> {
        if which("jackd").is_none() {
            bail!("jackd is not installed");
        }
        let dir = crate::exec::tempdir("quaver-bench-jackd-")?;
        let name = format!("quaver-bench-{}-{period}", std::process::id());
        let mut cmd = Jackd::command(&name, prio, rate, period);
        let command = describe(&cmd);
        let log = dir.path().join("jackd.log");
        let f = std::fs::File::create(&log)?;
        let child = cmd
            .env_remove("JACK_DEFAULT_SERVER")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .context("starting jackd")?;
        let mut j = Jackd {
            child: Some(child),
            name,
            log,
            _dir: dir,
            command,
        };
        let t0 = Instant::now();
        loop {
            if let Some(st) = j.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                j.child = None;
                bail!("jackd exited at start ({st}): {}", j.log_text().trim());
            }
            if j.ready() {
                return Ok(j);
            }
            if t0.elapsed() > JACKD_START_TIMEOUT {
                let text = j.log_text();
                j.stop();
                bail!(
                    "jackd did not come up within {JACKD_START_TIMEOUT:?}: {}",
                    text.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ready(&self) -> bool {
        if which("jack_lsp").is_some() {
            let mut c = Command::new("jack_lsp");
            c.env("JACK_DEFAULT_SERVER", &self.name)
                .env("JACK_NO_START_SERVER", "1")
                .env_remove("LD_LIBRARY_PATH");
            return run_bounded(&mut c, Duration::from_secs(5))
                .is_ok_and(|o| o.success() && o.stdout.contains("system:playback_1"));
        }
        self.log_text().contains("dummy")
    }

    /// Everything it printed.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Bytes of log so far (to cut out a window).
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// Stops it by PID.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c, Duration::from_secs(5));
        }
    }
}

impl Drop for Jackd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// xruns jackd2 logged: lines naming an xrun or a client that was not finished.
pub fn jackd_xrun_lines(log: &str) -> u64 {
    log.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("xrun") || l.contains("not finished")
        })
        .count() as u64
}

/// Of [`jackd_xrun_lines`], those of its timed (dummy) driver waking later than a whole
/// period (`JackTimedDriver::Process XRun = … usec`): the server's own lateness, not a
/// client that was not finished.
pub fn jackd_driver_xrun_lines(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("JackTimedDriver::Process XRun"))
        .count() as u64
}

enum Running {
    Quaverd(Box<Daemon>),
    Jackd(Jackd),
    Pipewire(Box<Server>),
}

impl Running {
    fn stop(&mut self) {
        match self {
            Running::Quaverd(d) => {
                let _ = d.stop();
            }
            Running::Jackd(j) => j.stop(),
            Running::Pipewire(s) => s.stop(),
        }
    }
}

fn find_next_to_me(me: &Path, name: &str) -> Option<PathBuf> {
    me.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .or_else(|| which(name))
}

/// The client's command for `server` (wrapper, environment, arguments).
fn client_command(
    o: &JackOptions,
    server: &Running,
    period: usize,
    args: &[String],
) -> Result<Command> {
    let mut cmd = match server {
        Running::Quaverd(d) => {
            let wrapper = find_next_to_me(&o.self_exe, "quaver-jack").ok_or_else(|| {
                anyhow!(
                    "quaver-jack not found next to quaver-bench or on PATH (cargo build \
                     --release -p quaver-jack)"
                )
            })?;
            let mut c = Command::new(wrapper);
            c.arg("--quantum")
                .arg(period.to_string())
                .arg("--server")
                .arg(d.socket());
            c
        }
        Running::Jackd(j) => {
            let mut c = Command::new("env");
            c.arg(format!("JACK_DEFAULT_SERVER={}", j.name));
            c
        }
        Running::Pipewire(s) => {
            if which("pw-jack").is_none() {
                bail!("pw-jack is not installed (apt-get install pipewire-jack)");
            }
            let mut c = Command::new("pw-jack");
            c.args(["-p", &period.to_string()])
                .env("XDG_RUNTIME_DIR", s.runtime_dir());
            c
        }
    };
    cmd.arg(&o.self_exe).arg("jack-client").args(args);
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("JACK_DEFAULT_SERVER")
        .env_remove("PIPEWIRE_REMOTE")
        .env_remove("QUAVER_SERVER");
    Ok(cmd)
}

/// Runs the client; calls `at_start` when its window begins and `at_end` when the
/// result arrives; bounded throughout. Returns its result and its stderr.
fn run_client(
    mut cmd: Command,
    warmup: f64,
    seconds: f64,
    mut at_start: impl FnMut(),
    mut at_end: impl FnMut(),
) -> Result<ClientRun> {
    let dir = crate::exec::tempdir("quaver-bench-jack-client-")?;
    let errlog = dir.path().join("stderr");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&errlog)?)
        .spawn()
        .with_context(|| format!("starting {}", describe(&cmd)))?;
    // The child keeps its JACK clients (and so quaverd's nodes) until this closes, so
    // the closing snapshot still finds them and their miss counts.
    let mut hold = child.stdin.take();
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(parse_line(&l)).is_err() {
                break;
            }
        }
    });
    let stderr = || std::fs::read_to_string(&errlog).unwrap_or_default();
    let result = (|| -> Result<ClientRun> {
        let mut deadline = Instant::now() + CLIENT_OPEN_TIMEOUT;
        let mut started = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(ChildLine::Open(_)) => {
                    deadline = Instant::now() + Duration::from_secs_f64(warmup + 10.0);
                }
                Ok(ChildLine::Start) => {
                    started = true;
                    at_start();
                    deadline = Instant::now() + Duration::from_secs_f64(seconds + 15.0);
                }
                Ok(ChildLine::Result(r)) if started => {
                    at_end();
                    hold.take();
                    return Ok(*r);
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("the JACK client did not report in time")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("the JACK client exited early")
                }
            }
        }
    })();
    drop(hold);
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(10))?;
    let _ = reader.join();
    match result {
        Ok(r) => Ok(r),
        Err(e) => Err(e.context(format!(
            "{} (exit: {}): {}",
            describe(&cmd),
            status.map_or("killed".into(), |s| s.to_string()),
            stderr().trim()
        ))),
    }
}

fn client_args(
    clients: usize,
    voices: usize,
    prefix: &str,
    warmup: f64,
    seconds: f64,
    seed: u64,
) -> Vec<String> {
    vec![
        "--clients".into(),
        clients.to_string(),
        "--voices".into(),
        voices.to_string(),
        "--prefix".into(),
        prefix.into(),
        "--warmup".into(),
        format!("{warmup}"),
        "--seconds".into(),
        format!("{seconds}"),
        "--seed".into(),
        seed.to_string(),
    ]
}

fn start_server(ctx: &mut Ctx, o: &JackOptions, s: JackServer, period: usize) -> Result<Running> {
    Ok(match s {
        JackServer::Quaverd => Running::Quaverd(Box::new(ctx.start_daemon(DaemonSpec {
            devices: vec![format!("null:rate={}", o.rate)],
            rate: Some(o.rate),
            quantum: Some(period),
            quantum_min: Some(period.min(32)),
            ..DaemonSpec::default()
        })?)),
        JackServer::Jackd2 => {
            let j = Jackd::start(o.jackd_priority, o.rate, period)?;
            ctx.record_command(format!("{} &", j.command));
            Running::Jackd(j)
        }
        JackServer::Pipewire => {
            if !Path::new(PW_JACK_LIB).exists() {
                bail!("pipewire-jack is not installed ({PW_JACK_LIB} missing)");
            }
            Running::Pipewire(Box::new(Server::pipewire(ctx)?))
        }
    })
}

/// pipewire-jack's libjack on Debian/Ubuntu x86-64.
pub const PW_JACK_LIB: &str = "/usr/lib/x86_64-linux-gnu/pipewire-0.3/jack/libjack.so.0";

// ---------------------------------------------------------------- quaverd's side

#[derive(Debug, Clone, Default)]
struct QuaverSnap {
    status: Option<StatusInfo>,
    timing: Option<TimingStats>,
    graph: Option<GraphInfo>,
}

fn quaver_snap(d: &Daemon) -> QuaverSnap {
    match d.connect("quaver-bench jack") {
        Ok(mut c) => QuaverSnap {
            status: c.status().ok(),
            timing: c.timing().ok(),
            graph: c.graph().ok(),
        },
        Err(_) => QuaverSnap::default(),
    }
}

/// quaverd's own account of a window, for the clients named `prefix-…`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QuaverSide {
    /// Device xruns (status).
    pub device_xruns: u64,
    /// Cycles missed by the clients (graph, callback nodes).
    pub client_misses: u64,
    /// Runs of consecutive missed cycles: xrun events, as jackd2 counts them.
    #[serde(default)]
    pub client_xrun_events: u64,
    /// Cycles quaverd ran early (catching up after its own late wakeup) and waited for a
    /// client still within its deadline.
    #[serde(default)]
    pub client_caught_up: u64,
    /// Cycles the clients were not woken because an upstream node was late.
    pub client_skips: u64,
    /// Times the RT thread fell behind: runs of driver wakeups more than a period after
    /// their deadline (what jackd2's timed driver logs as an xrun).
    #[serde(default)]
    pub overdue_runs: u64,
    /// The driver cycles of those runs.
    #[serde(default)]
    pub overdue_cycles: u64,
    /// Clients in async mode at the end.
    pub async_clients: usize,
    /// Whether both graph snapshots came back and the end one still held the clients'
    /// nodes: without it the miss count is unknown, not zero.
    #[serde(default)]
    pub counted: bool,
    /// Mean time the server waited for a client per wake, ns (over the window, mean of
    /// the clients).
    pub wait_per_client_ns: Option<f64>,
    /// Wakes in the window (all clients).
    pub wakes: u64,
    /// Cycles in the window.
    pub cycles: u64,
    /// The RT thread's busy time per cycle over the window.
    pub busy: Option<Log2Hist>,
    /// The RT thread's wakeup lateness over the window.
    pub lateness: Option<Log2Hist>,
    /// Whether the RT thread ran SCHED_FIFO.
    pub realtime: bool,
    /// pw-top's WAIT per cycle as quaverd times it (`timing` nodes: signal → the
    /// client's process thread awake), mean over the window, mean of the clients, ns.
    #[serde(default)]
    pub node_wait_ns: Option<f64>,
    /// pw-top's BUSY per cycle as quaverd times it (awake → completion), ns.
    #[serde(default)]
    pub node_busy_ns: Option<f64>,
    /// The RT thread's own time per client per cycle (waking it, blocking on it,
    /// collecting it), ns.
    #[serde(default)]
    pub node_rt_ns: Option<f64>,
    /// Clients the per-node figures cover.
    #[serde(default)]
    pub timed_clients: usize,
}

fn quaver_side(a: &QuaverSnap, b: &QuaverSnap, prefix: &str) -> QuaverSide {
    let mut q = QuaverSide::default();
    if let (Some(s0), Some(s1)) = (&a.status, &b.status) {
        q.device_xruns = s1.xruns.saturating_sub(s0.xruns);
        q.cycles = s1.cycles.saturating_sub(s0.cycles);
        q.realtime = s1.realtime;
    }
    if let (Some(t0), Some(t1)) = (&a.timing, &b.timing) {
        q.busy = Some(
            Log2Hist::from_counts(&t1.busy_ns_log2).since(&Log2Hist::from_counts(&t0.busy_ns_log2)),
        );
        let l = Log2Hist::from_counts(&t1.lateness_ns_log2)
            .since(&Log2Hist::from_counts(&t0.lateness_ns_log2));
        q.lateness = (l.total() > 0).then_some(l);
        q.overdue_runs = t1.overdue_runs.saturating_sub(t0.overdue_runs);
        q.overdue_cycles = t1.overdue_cycles.saturating_sub(t0.overdue_cycles);
        // The window-start snapshot's `timing` request opened the interval the end
        // snapshot's node figures cover: exactly the window.
        let ours: Vec<_> = t1
            .nodes
            .iter()
            .filter(|n| n.name.starts_with(&format!("{prefix}-")) && n.cycles > 0)
            .collect();
        let mean = |f: fn(&NodeTimingInfo) -> u64| {
            (!ours.is_empty())
                .then(|| ours.iter().map(|n| f(n) as f64).sum::<f64>() / ours.len() as f64)
        };
        q.node_wait_ns = mean(|n| n.wait_avg_ns);
        q.node_busy_ns = mean(|n| n.busy_avg_ns);
        q.node_rt_ns = mean(|n| n.rt_avg_ns);
        q.timed_clients = ours.len();
    }
    if let (Some(g0), Some(g1)) = (&a.graph, &b.graph) {
        let mut waits = Vec::new();
        for n in &g1.nodes {
            let Some(cb1) = &n.callback else { continue };
            if !n.name.starts_with(&format!("{prefix}-")) {
                continue;
            }
            q.counted = true;
            let cb0 = g0
                .nodes
                .iter()
                .find(|m| m.id == n.id)
                .and_then(|m| m.callback.clone())
                .unwrap_or_default();
            q.client_misses += cb1.xruns.saturating_sub(cb0.xruns);
            q.client_xrun_events += cb1.xrun_events.saturating_sub(cb0.xrun_events);
            q.client_caught_up += cb1.caught_up.saturating_sub(cb0.caught_up);
            q.client_skips += cb1.skipped.saturating_sub(cb0.skipped);
            if cb1.mode == "async" {
                q.async_clients += 1;
            }
            let woken = cb1.woken.saturating_sub(cb0.woken);
            q.wakes += woken;
            if woken > 0 {
                let total = cb1.wait_avg_ns as f64 * cb1.woken as f64
                    - cb0.wait_avg_ns as f64 * cb0.woken as f64;
                waits.push((total / woken as f64).max(0.0));
            }
        }
        if !waits.is_empty() {
            q.wait_per_client_ns = Some(waits.iter().sum::<f64>() / waits.len() as f64);
        }
    }
    q
}

// ---------------------------------------------------------------- pw-top / pw-profiler

/// One node's WAIT/BUSY samples as pw-top computes them: WAIT = awake − signal, BUSY
/// = finish − awake, one pair per sample, ns; `errors` counts samples whose status
/// was not "finished".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeTimes {
    /// Node name.
    pub name: String,
    /// WAIT samples, ns.
    pub wait_ns: Vec<f64>,
    /// BUSY samples, ns.
    pub busy_ns: Vec<f64>,
    /// Samples not finished in their cycle (pw-profiler) or pw-top's ERR at the end.
    pub errors: u64,
}

/// Parses `pw-top -b` output: every row under a `S   ID  QUANT …` header, keyed by
/// node name; WAIT/BUSY like `  12.3us`, `1.2ms`, `0.5s` or `---` (not running).
pub fn parse_pw_top(text: &str) -> BTreeMap<String, NodeTimes> {
    let mut out: BTreeMap<String, NodeTimes> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with("S ") && line.contains("WAIT") {
            continue;
        }
        let mut rest = line;
        let mut fields = Vec::new();
        // S ID QUANT RATE WAIT BUSY W/Q B/Q ERR, then FORMAT (16 wide) and the name.
        for _ in 0..9 {
            let t = rest.trim_start();
            let end = t.find(' ').unwrap_or(t.len());
            fields.push(&t[..end]);
            rest = &t[end..];
        }
        if fields.len() < 9 || fields[0].len() != 1 || fields[1].parse::<u32>().is_err() {
            continue;
        }
        let Ok(err) = fields[8].parse::<u64>() else {
            continue;
        };
        // One space, the 16-character format, then " + " for followers and the name.
        let name = rest
            .get(1..)
            .map(|r| r.chars().skip(16).collect::<String>())
            .unwrap_or_default();
        let name = name
            .trim_start()
            .trim_start_matches("+ ")
            .trim()
            .to_string();
        if name.is_empty() {
            continue;
        }
        let e = out.entry(name.clone()).or_insert_with(|| NodeTimes {
            name,
            ..NodeTimes::default()
        });
        if let (Some(w), Some(b)) = (pw_time_ns(fields[4]), pw_time_ns(fields[5])) {
            e.wait_ns.push(w);
            e.busy_ns.push(b);
        }
        e.errors = err;
    }
    out
}

/// `12.3us` / `12.3µs` / `1.2ms` / `0.5s` → ns; `---`/`+++` → None.
pub fn pw_time_ns(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        return None;
    };
    num.trim().parse::<f64>().ok().map(|v| v * scale)
}

/// Parses `pw-profiler`'s log (4 driver columns, then 8 per follower: id, then its
/// signal, awake and finish times relative to the driver's signal, µs, clamped at 0,
/// two derived columns, status, 0) and the follower names from the `Timing3.plot` it
/// writes on exit (`title "NAME/ID"`). WAIT and BUSY are taken as pw-top takes them,
/// awake − signal and finish − awake, from the three times (0.3.65's own WAIT column
/// is 0 for a follower signalled with the driver).
pub fn parse_pw_profiler(log: &str, plot: &str) -> BTreeMap<String, NodeTimes> {
    let mut names = BTreeMap::new();
    let mut rest = plot;
    while let Some(i) = rest.find("title \"") {
        rest = &rest[i + 7..];
        let Some(end) = rest.find('"') else { break };
        let t = &rest[..end];
        if let Some((n, id)) = t.rsplit_once('/')
            && let Ok(id) = id.parse::<u32>()
        {
            names.insert(id, n.to_string());
        }
        rest = &rest[end..];
    }
    let mut out: BTreeMap<String, NodeTimes> = BTreeMap::new();
    for line in log.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        for g in cols.get(4..).unwrap_or(&[]).chunks(8) {
            if g.len() < 7 {
                continue;
            }
            let Ok(id) = g[0].trim().parse::<u32>() else {
                continue;
            };
            let name = names.get(&id).cloned().unwrap_or_else(|| id.to_string());
            let e = out.entry(name.clone()).or_insert_with(|| NodeTimes {
                name,
                ..NodeTimes::default()
            });
            let t = |i: usize| g[i].trim().parse::<f64>().ok();
            if let (Some(signal), Some(awake), Some(finish)) = (t(1), t(2), t(3))
                && awake > 0.0
                && finish >= awake
            {
                e.wait_ns.push((awake - signal).max(0.0) * 1e3);
                e.busy_ns.push((finish - awake) * 1e3);
            }
            if g[6].trim() != "3" {
                e.errors += 1;
            }
        }
    }
    out
}

/// How PipeWire's per-node figures are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PwTool {
    /// `pw-top -b` (PipeWire ≥ 0.3.67 or so).
    PwTop,
    /// `pw-profiler` (pw-top without batch mode): the same profiler data, every cycle.
    PwProfiler,
}

/// Which tool this PipeWire offers.
pub fn pw_tool() -> Option<PwTool> {
    let help = run_bounded(Command::new("pw-top").arg("--help"), Duration::from_secs(5)).ok();
    if help.is_some_and(|h| format!("{}{}", h.stdout, h.stderr).contains("batch-mode")) {
        Some(PwTool::PwTop)
    } else if which("pw-profiler").is_some() {
        Some(PwTool::PwProfiler)
    } else {
        None
    }
}

struct PwMonitor {
    child: Child,
    tool: PwTool,
    dir: tempfile::TempDir,
    command: String,
}

impl PwMonitor {
    fn start(tool: PwTool, runtime: &Path) -> Result<PwMonitor> {
        let dir = crate::exec::tempdir("quaver-bench-pwtop-")?;
        let mut c = match tool {
            PwTool::PwTop => {
                let mut c = Command::new("pw-top");
                c.arg("-b");
                c
            }
            PwTool::PwProfiler => {
                let mut c = Command::new("pw-profiler");
                c.args(["-o", "profiler.log"]);
                c
            }
        };
        c.env("XDG_RUNTIME_DIR", runtime).current_dir(dir.path());
        let command = describe(&c);
        let child = c
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout"))?)
            .stderr(std::fs::File::create(dir.path().join("stderr"))?)
            .spawn()
            .with_context(|| format!("starting {command}"))?;
        Ok(PwMonitor {
            child,
            tool,
            dir,
            command,
        })
    }

    fn finish(mut self) -> BTreeMap<String, NodeTimes> {
        // SIGINT: both tools quit their main loop on it (pw-profiler then writes its
        // plot scripts, which name the followers).
        signal(self.child.id(), libc::SIGINT);
        if !matches!(
            wait_bounded(&mut self.child, Duration::from_secs(5)),
            Ok((Some(_), _))
        ) {
            stop_child(&mut self.child, Duration::from_secs(2));
        }
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        match self.tool {
            PwTool::PwTop => parse_pw_top(&read("stdout")),
            PwTool::PwProfiler => parse_pw_profiler(&read("profiler.log"), &read("Timing3.plot")),
        }
    }
}

// ---------------------------------------------------------------- results

/// One window of one server at one period in the xrun part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XrunPoint {
    /// Server.
    pub server: JackServer,
    /// Period asked for.
    pub period: usize,
    /// Round of the period's alternating windows, from 0 (records from before
    /// `--repeats` had one round and read as 0).
    #[serde(default)]
    pub repeat: usize,
    /// The client's figures (None: failed).
    pub client: Option<ClientRun>,
    /// The server's own xrun count in the window, as jackd2 counts them (quaverd: xrun
    /// events — runs of missed cycles — + device xruns + times its RT thread fell a cycle
    /// behind; jackd2: xrun lines in its log,
    /// which it writes for the first failing cycle of a run only; PipeWire: none, see the
    /// xrun callbacks).
    pub server_xruns: Option<u64>,
    /// quaverd: cycles the client missed (every cycle of every run).
    #[serde(default)]
    pub missed_cycles: Option<u64>,
    /// Of `server_xruns`, the server's own lateness: jackd2's timed-driver lines (a cycle
    /// ended after the next was due), quaverd's runs of overdue driver cycles.
    #[serde(default)]
    pub driver_xruns: Option<u64>,
    /// quaverd's details.
    pub quaver: Option<QuaverSide>,
    /// The load's command.
    pub stressor: Option<String>,
    /// Why there are no figures.
    pub error: Option<String>,
}

impl XrunPoint {
    fn totals(&self) -> Option<CounterSnapshot> {
        self.client
            .as_ref()
            .map(|c| CounterSnapshot::sum(c.clients.iter().map(|x| &x.window)))
    }

    fn minutes(&self) -> f64 {
        self.client.as_ref().map_or(0.0, |c| c.seconds / 60.0)
    }
}

/// One server's windows at one period, summed: what the acceptance verdict compares.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XrunTotals {
    /// Period asked for.
    pub period: usize,
    /// Server.
    pub server: JackServer,
    /// Windows with figures.
    pub windows: usize,
    /// Windows that failed (left out of every figure here).
    pub failed: usize,
    /// Minutes of the windows with figures.
    pub minutes: f64,
    /// Server-counted xruns over the windows that have a count (None: none has).
    pub server_xruns: Option<u64>,
    /// quaverd: missed cycles over those windows.
    pub missed_cycles: Option<u64>,
    /// jackd2: driver-late lines over those windows.
    pub driver_xruns: Option<u64>,
    /// Minutes of the windows that have a server count.
    pub server_minutes: f64,
    /// The client's xrun callbacks over the windows.
    pub xrun_callbacks: u64,
    /// Client-observed late callbacks over the windows.
    pub late: u64,
    /// Of those, frame-time jumps.
    pub jumps: u64,
    /// Of those, overruns.
    pub overruns: u64,
    /// Server-counted xruns / minutes over all windows (None: no count or no window).
    pub server_per_min: Option<f64>,
    /// Client-observed late callbacks / minutes over all windows (None: no window).
    pub late_per_min: Option<f64>,
    /// Each window's server-counted rate, /min, in run order.
    pub server_rates: Vec<f64>,
    /// Each window's client-observed rate, /min, in run order.
    pub late_rates: Vec<f64>,
}

impl XrunTotals {
    /// Sums `server`'s windows at `period` among `points`.
    pub fn of(points: &[XrunPoint], period: usize, server: JackServer) -> XrunTotals {
        let mut t = XrunTotals {
            period,
            server,
            windows: 0,
            failed: 0,
            minutes: 0.0,
            server_xruns: None,
            missed_cycles: None,
            driver_xruns: None,
            server_minutes: 0.0,
            xrun_callbacks: 0,
            late: 0,
            jumps: 0,
            overruns: 0,
            server_per_min: None,
            late_per_min: None,
            server_rates: Vec::new(),
            late_rates: Vec::new(),
        };
        for p in points
            .iter()
            .filter(|p| p.period == period && p.server == server)
        {
            let Some(c) = p.totals() else {
                t.failed += 1;
                continue;
            };
            let m = p.minutes();
            t.windows += 1;
            t.minutes += m;
            t.xrun_callbacks += c.xrun_callbacks;
            t.late += c.late;
            t.jumps += c.jumps;
            t.overruns += c.overruns;
            t.late_rates.push(rate(c.late, m));
            if let Some(x) = p.server_xruns {
                t.server_xruns = Some(t.server_xruns.unwrap_or(0) + x);
                let add = |sum: Option<u64>, v: Option<u64>| match v {
                    Some(v) => Some(sum.unwrap_or(0) + v),
                    None => sum,
                };
                t.missed_cycles = add(t.missed_cycles, p.missed_cycles);
                t.driver_xruns = add(t.driver_xruns, p.driver_xruns);
                t.server_minutes += m;
                t.server_rates.push(rate(x, m));
            }
        }
        // Rates over the summed minutes, not means of the window rates: a window cut
        // short weighs by what it measured.
        t.server_per_min = t.server_xruns.map(|x| rate(x, t.server_minutes));
        t.late_per_min = (t.windows > 0).then(|| rate(t.late, t.minutes));
        t
    }
}

/// The median of per-window rates: the middle one, or the mean of the middle two (with
/// two windows a nearest-rank median would just be the smaller).
fn rate_median(rates: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = rates.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// "median (min–max)" of per-window rates, or "n/a".
fn spread(rates: &[f64]) -> String {
    match (rate_median(rates), Summary::of(rates)) {
        (Some(m), Some(s)) => format!("{m:.2} ({:.2}–{:.2})", s.min, s.max),
        _ => "n/a".into(),
    }
}

/// cyclictest at one period.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CyclictestPoint {
    /// Period, frames (its interval is one period).
    pub period: usize,
    /// Interval, µs.
    pub interval_us: u64,
    /// The command.
    pub command: Option<String>,
    /// Its result.
    pub result: Option<CyclictestResult>,
    /// Wakeups later than one period (histogram bins above it plus overflows).
    pub late: Option<u64>,
    /// Why there is none.
    pub error: Option<String>,
}

/// Wakeups of a cyclictest histogram later than `limit_us`.
pub fn cyclictest_late(r: &CyclictestResult, limit_us: u64) -> u64 {
    r.bins
        .iter()
        .filter(|(us, _)| *us > limit_us)
        .map(|b| b.1)
        .sum::<u64>()
        + r.overflows
}

/// One (server, N) point of the overhead part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverheadPoint {
    /// Server.
    pub server: JackServer,
    /// Clients.
    pub clients: usize,
    /// The client's figures.
    pub client: Option<ClientRun>,
    /// quaverd's server-side figures.
    pub quaver: Option<QuaverSide>,
    /// PipeWire's per-node figures (ours only), and how they were taken.
    pub pw_nodes: Option<Vec<NodeTimes>>,
    /// The tool.
    pub pw_tool: Option<PwTool>,
    /// Its command.
    pub pw_command: Option<String>,
    /// Why there are no figures.
    pub error: Option<String>,
}

/// Everything a `jack` run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JackResults {
    /// Rate.
    pub rate: u32,
    /// Calibration: render time of one voice per cycle, ns, per period.
    pub ns_per_voice: Vec<(usize, f64)>,
    /// Voices of the xrun part, per period.
    pub voices: Vec<(usize, usize)>,
    /// Target share of a core.
    pub load: f64,
    /// Load name ("stress-ng", "built-in", "idle").
    pub stressor: String,
    /// Xrun part.
    pub xruns: Vec<XrunPoint>,
    /// cyclictest per period.
    pub cyclictest: Vec<CyclictestPoint>,
    /// Overhead part.
    pub overhead: Vec<OverheadPoint>,
    /// Overhead part's period.
    pub overhead_period: usize,
    /// Overhead part's voices per client.
    pub overhead_voices: usize,
    /// Servers not measured, with the reason.
    pub missing: Vec<(JackServer, String)>,
}

// ---------------------------------------------------------------- the run

fn load_cfg() -> StressorConfig {
    StressorConfig {
        cpu: 2,
        io: false,
        vm_mb: 0,
    }
}

/// Runs both parts.
pub fn run(ctx: &mut Ctx, o: &JackOptions) -> Result<JackResults> {
    let prio = crate::rt::client_priority(ctx.realtime_priority);
    let mut res = JackResults {
        rate: o.rate,
        ns_per_voice: Vec::new(),
        voices: Vec::new(),
        load: o.load,
        stressor: match stressor::resolve(o.stressor) {
            StressorKind::StressNg => "stress-ng".into(),
            StressorKind::None => "idle".into(),
            _ => "built-in".into(),
        },
        xruns: Vec::new(),
        cyclictest: Vec::new(),
        overhead: Vec::new(),
        overhead_period: o.overhead_period,
        overhead_voices: o.overhead_voices,
        missing: Vec::new(),
    };
    if res.stressor == "built-in" {
        ctx.note(
            "stress-ng is not installed: the built-in stressor (2 spinning threads) is the load",
        );
    }
    // Which servers can run at all.
    let mut servers = Vec::new();
    for &s in &o.servers {
        let why = match s {
            JackServer::Quaverd => find_next_to_me(&o.self_exe, "quaver-jack")
                .is_none()
                .then(|| "quaver-jack not found (cargo build --release -p quaver-jack)".into()),
            JackServer::Jackd2 => (tool_version("jackd", &["--version"]) == NOT_INSTALLED)
                .then(|| "jackd: not installed".to_string()),
            JackServer::Pipewire => {
                if !Path::new(PW_JACK_LIB).exists() {
                    Some(format!(
                        "pipewire-jack: not installed ({PW_JACK_LIB} missing)"
                    ))
                } else if which("pw-jack").is_none() {
                    Some("pw-jack: not installed".into())
                } else {
                    crate::servers::PIPEWIRE_PROGRAMS
                        .iter()
                        .find(|p| which(p).is_none())
                        .map(|p| format!("{p}: not installed"))
                }
            }
        };
        match why {
            Some(w) => {
                ctx.note(format!("{}: not measured — {w}", s.name()));
                res.missing.push((s, w));
            }
            None => servers.push(s),
        }
    }
    // Per period: every server's window in every round, then one cyclictest.
    let xrun_steps = if o.xruns {
        o.periods.len() as f64
            * ((servers.len() * o.repeats.max(1)) as f64 + 1.0)
            * (o.seconds + o.warmup + 3.0)
    } else {
        0.0
    };
    let oh_steps = if o.overhead {
        o.counts.len() as f64 * servers.len() as f64 * (o.overhead_seconds + o.warmup + 3.0)
    } else {
        0.0
    };
    let pb = ctx
        .progress
        .bar((xrun_steps + oh_steps).ceil() as u64, "jack");
    let t_start = Instant::now();
    let tick = |pb: &indicatif::ProgressBar| pb.set_position(t_start.elapsed().as_secs());
    if o.xruns {
        for &period in &o.periods {
            pb.set_message(format!("jack: calibrating the voices at {period}"));
            let ns = jackclient::calibrate(
                period,
                o.rate,
                64,
                if ctx.quick { 300 } else { 3000 },
                ctx.seed,
                prio,
            );
            let voices = o
                .voices
                .unwrap_or_else(|| jackclient::voices_for(o.load, period, o.rate, ns));
            res.ns_per_voice.push((period, ns));
            res.voices.push((period, voices));
            // Rounds alternate the servers (q, j, p, q, j, p, …) rather than running
            // one server's windows back to back: xruns on a shared VM come in bursts
            // (CPU slowdowns of tens of ms) that cluster in time, and alternating
            // spreads the same stretch of that noise over every server.
            let rounds = o.repeats.max(1);
            for repeat in 0..rounds {
                for &s in &servers {
                    pb.set_message(format!(
                        "jack: {} at {period} under load, window {}/{rounds}",
                        s.name(),
                        repeat + 1
                    ));
                    tick(&pb);
                    let p = xrun_point(ctx, o, s, period, voices, repeat);
                    tick(&pb);
                    res.xruns.push(p);
                }
            }
            // cyclictest is a reference for the machine, not part of the verdict: one
            // run per period, after the windows, keeps a full run's length in check.
            pb.set_message(format!("jack: cyclictest at {period} under load"));
            res.cyclictest.push(cyclictest_point(ctx, o, period));
            tick(&pb);
        }
    }
    if o.overhead {
        for &n in &o.counts {
            for &s in &servers {
                pb.set_message(format!("jack: {n} clients on {}", s.name()));
                tick(&pb);
                res.overhead.push(overhead_point(ctx, o, s, n));
            }
        }
    }
    pb.finish_and_clear();
    Ok(res)
}

fn xrun_point(
    ctx: &mut Ctx,
    o: &JackOptions,
    s: JackServer,
    period: usize,
    voices: usize,
    repeat: usize,
) -> XrunPoint {
    let mut p = XrunPoint {
        server: s,
        period,
        repeat,
        client: None,
        server_xruns: None,
        missed_cycles: None,
        driver_xruns: None,
        quaver: None,
        stressor: None,
        error: None,
    };
    let budget = Duration::from_secs_f64(o.seconds + o.warmup + 60.0);
    let st = match stressor::start(o.stressor, load_cfg(), budget, ctx.seed, &o.self_exe) {
        Ok(st) => st,
        Err(e) => {
            p.error = Some(format!("{e:#}"));
            return p;
        }
    };
    if let Some(st) = &st {
        ctx.record_command(format!("{} &", st.command));
        p.stressor = Some(st.command.clone());
    }
    let r = (|| -> Result<()> {
        std::thread::sleep(Duration::from_millis(500));
        let mut server = start_server(ctx, o, s, period)?;
        let prefix = "qb-synth";
        let args = client_args(1, voices, prefix, o.warmup, o.seconds, ctx.seed);
        let cmd = client_command(o, &server, period, &args)?;
        ctx.record_command(describe(&cmd));
        let mut snaps = (QuaverSnap::default(), QuaverSnap::default());
        let mut log = (0u64, 0u64);
        let r = {
            let srv = &server;
            run_client(
                cmd,
                o.warmup,
                o.seconds,
                || match srv {
                    Running::Quaverd(d) => snaps.0 = quaver_snap(d),
                    Running::Jackd(j) => log.0 = j.log_len(),
                    Running::Pipewire(_) => {}
                },
                || match srv {
                    Running::Quaverd(d) => snaps.1 = quaver_snap(d),
                    Running::Jackd(j) => log.1 = j.log_len(),
                    Running::Pipewire(_) => {}
                },
            )
        };
        match &server {
            Running::Quaverd(_) => {
                let q = quaver_side(&snaps.0, &snaps.1, prefix);
                p.server_xruns = q
                    .counted
                    .then_some(q.client_xrun_events + q.device_xruns + q.overdue_runs);
                p.missed_cycles = q.counted.then_some(q.client_misses + q.device_xruns);
                p.driver_xruns = q.counted.then_some(q.overdue_runs);
                if !q.counted {
                    ctx.note(
                        "quaverd: a window's closing snapshot did not find the client's node, \
                         so its miss count is unknown (n/a), not zero",
                    );
                }
                p.quaver = Some(q);
            }
            Running::Jackd(j) => {
                let text = j.log_text();
                let a = (log.0 as usize).min(text.len());
                let b = (log.1 as usize).clamp(a, text.len());
                p.server_xruns = text.get(a..b).map(jackd_xrun_lines);
                p.driver_xruns = text.get(a..b).map(jackd_driver_xrun_lines);
            }
            Running::Pipewire(_) => {}
        }
        server.stop();
        p.client = Some(r?);
        Ok(())
    })();
    if let Some(st) = st {
        st.stop();
    }
    if let Err(e) = r {
        p.error = Some(format!("{e:#}"));
    }
    p
}

fn cyclictest_point(ctx: &mut Ctx, o: &JackOptions, period: usize) -> CyclictestPoint {
    let interval_us = (period as u64 * 1_000_000).div_ceil(o.rate as u64);
    let mut c = CyclictestPoint {
        period,
        interval_us,
        command: None,
        result: None,
        late: None,
        error: None,
    };
    let secs = o.seconds.ceil().max(1.0) as u64;
    let st = stressor::start(
        o.stressor,
        load_cfg(),
        Duration::from_secs(secs + 30),
        ctx.seed,
        &o.self_exe,
    );
    let st = match st {
        Ok(st) => st,
        Err(e) => {
            c.error = Some(format!("{e:#}"));
            return c;
        }
    };
    if let Some(st) = &st {
        ctx.record_command(format!("{} &", st.command));
    }
    std::thread::sleep(Duration::from_millis(500));
    match cyclictest::run(secs, interval_us) {
        Ok(Some((cmd, r))) => {
            ctx.record_command(cmd.clone());
            c.late = Some(cyclictest_late(&r, interval_us));
            c.command = Some(cmd);
            c.result = Some(r);
        }
        Ok(None) => c.error = Some("cyclictest: not installed (apt install rt-tests)".into()),
        Err(e) => c.error = Some(format!("{e:#}")),
    }
    if let Some(st) = st {
        st.stop();
    }
    c
}

fn overhead_point(ctx: &mut Ctx, o: &JackOptions, s: JackServer, n: usize) -> OverheadPoint {
    let mut p = OverheadPoint {
        server: s,
        clients: n,
        client: None,
        quaver: None,
        pw_nodes: None,
        pw_tool: None,
        pw_command: None,
        error: None,
    };
    let r = (|| -> Result<()> {
        let period = o.overhead_period;
        let mut server = start_server(ctx, o, s, period)?;
        let prefix = "qb-light";
        let args = client_args(
            n,
            o.overhead_voices,
            prefix,
            o.warmup,
            o.overhead_seconds,
            ctx.seed,
        );
        let cmd = client_command(o, &server, period, &args)?;
        ctx.record_command(describe(&cmd));
        let tool = if s == JackServer::Pipewire {
            pw_tool()
        } else {
            None
        };
        p.pw_tool = tool;
        let mut snaps = (QuaverSnap::default(), QuaverSnap::default());
        let mut mon: Option<PwMonitor> = None;
        let mut mon_err = None;
        let r = {
            let srv = &server;
            run_client(
                cmd,
                o.warmup,
                o.overhead_seconds,
                || match srv {
                    Running::Quaverd(d) => snaps.0 = quaver_snap(d),
                    Running::Pipewire(ps) => {
                        if let Some(t) = tool {
                            match PwMonitor::start(t, ps.runtime_dir()) {
                                Ok(m) => mon = Some(m),
                                Err(e) => mon_err = Some(format!("{e:#}")),
                            }
                        }
                    }
                    Running::Jackd(_) => {}
                },
                || {
                    if let Running::Quaverd(d) = srv {
                        snaps.1 = quaver_snap(d)
                    }
                },
            )
        };
        if let Some(m) = mon {
            p.pw_command = Some(m.command.clone());
            ctx.record_command(format!("{} &   # during the window", m.command));
            let nodes = m.finish();
            p.pw_nodes = Some(
                nodes
                    .into_values()
                    .filter(|n| n.name.starts_with(&format!("{prefix}-")))
                    .collect(),
            );
        } else if s == JackServer::Pipewire {
            p.pw_command =
                Some(mon_err.unwrap_or_else(|| "pw-top/pw-profiler: not installed".into()));
        }
        if let Running::Quaverd(_) = &server {
            p.quaver = Some(quaver_side(&snaps.0, &snaps.1, prefix));
        }
        server.stop();
        p.client = Some(r?);
        Ok(())
    })();
    if let Err(e) = r {
        p.error = Some(format!("{e:#}"));
    }
    p
}

// ---------------------------------------------------------------- rendering

fn us(ns: f64) -> String {
    format!("{:.1} µs", ns / 1000.0)
}

fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    Some(s[s.len() / 2])
}

fn rate(n: u64, minutes: f64) -> f64 {
    if minutes > 0.0 {
        n as f64 / minutes
    } else {
        0.0
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else if a == 0.0 {
        "– (0 / 0)".into()
    } else {
        "∞ (jackd2: 0)".into()
    }
}

/// A server-counted xrun figure with what it is made of: quaverd's missed cycles, or
/// how many of jackd2's lines were its driver's.
fn server_cell(xruns: Option<u64>, missed: Option<u64>, driver: Option<u64>) -> String {
    match (xruns, missed, driver) {
        (None, ..) => "n/a".into(),
        (Some(x), Some(m), Some(d)) => format!("{x} ({m} missed cycles, {d} driver)"),
        (Some(x), Some(m), None) => format!("{x} ({m} missed cycles)"),
        (Some(x), None, Some(d)) => format!("{x} ({d} driver)"),
        (Some(x), None, None) => x.to_string(),
    }
}

/// The acceptance line for one period, on quaverd's and jackd2's totals (None: either
/// has no server count).
fn verdict(q: &XrunTotals, j: &XrunTotals) -> Option<String> {
    let (qs, js) = (q.server_per_min?, j.server_per_min?);
    let (ql, jl) = (q.late_per_min?, j.late_per_min?);
    let med = |t: &XrunTotals| rate_median(&t.server_rates).unwrap_or(0.0);
    Some(format!(
        "period {}: quaverd {qs:.2}/min ({} xruns in {:.2} min, {} windows) vs jackd2 \
         {js:.2}/min ({} in {:.2} min, {} windows) server-counted ({}; per-window median \
         {:.2} vs {:.2}), {ql:.2}/min vs {jl:.2}/min client-observed ({})",
        q.period,
        q.server_xruns.unwrap_or(0),
        q.server_minutes,
        q.windows,
        j.server_xruns.unwrap_or(0),
        j.server_minutes,
        j.windows,
        if qs <= js {
            "quaverd ≤ jackd2: met"
        } else {
            "quaverd > jackd2: NOT met"
        },
        med(q),
        med(j),
        if ql <= jl { "met" } else { "NOT met" },
    ))
}

/// Tables and the terminal summary.
pub fn render(r: &JackResults) -> ModeOutput {
    let mut md = String::new();
    let mut summary = Table::new(&[
        "period",
        "server",
        "window",
        "voices (load)",
        "sched",
        "server xruns",
        "xrun cb",
        "client late",
        "per min (srv / late)",
        "vs jackd2 (srv / late)",
        "window rates: median (min–max), srv / late",
    ]);
    let rounds = r.xruns.iter().map(|p| p.repeat + 1).max().unwrap_or(1);
    let _ = writeln!(
        md,
        "## xruns under load\n\nOne JACK client (this benchmark's, the same code on every \
         server: libjack loaded with `dlopen` as `quaver-jack` / jackd2 / `pw-jack` put it \
         on the library path) with one output port connected to the server's first \
         playback port renders SynthMark-like voices calibrated to {:.0} % of a core, \
         while `{}` runs. *server xruns*: the server's own count in the window, as jackd2 \
         counts them: a run of consecutive cycles the client missed is one xrun (jackd2 \
         logs one \"was not finished\" for the first failing cycle of a run only; its \
         timed driver ending a cycle after the next one was due is one more line, shown \
         as *driver*); quaverd: xrun events counted against the client + device xruns + \
         times its RT thread woke more than a period after its deadline (a run of such \
         cycles is one, shown as *driver*), with every cycle the \
         client missed in brackets; PipeWire: not available without a profiler — see the \
         xrun callbacks. \
         *xrun cb*: calls of the client's `jack_set_xrun_callback` (quaver's libjack \
         coalesces misses that arrive together into one call). *client late*: \
         callbacks whose frame time jumped by more than one period or that ended after \
         the next cycle's start. cyclictest: wakeups later than one period, under the \
         same load for the same time, once per period after the windows.\n\n{}\
         Every window has its row (*window*: its round; *vs jackd2*: against jackd2's \
         window of the same round); the *total* row per server sums its windows: xruns / \
         minutes, server-counted and client-observed, with the median and range of the \
         per-window rates. The acceptance verdict is on the totals.\n",
        r.load * 100.0,
        match r.stressor.as_str() {
            "stress-ng" => "stress-ng --cpu 2",
            "built-in" => "the built-in stressor (2 CPU hogs)",
            _ => "no load",
        },
        if rounds > 1 {
            format!(
                "{rounds} windows per server and period, the servers' windows alternating \
                 (round 1: every server once, then round 2, …) so that every server sees \
                 the same stretches of the machine's noise: xruns here come in bursts. "
            )
        } else {
            "One window per server and period (`--repeats 1`): xruns here come in \
             bursts, so one window is a noisy basis for a verdict. "
                .to_string()
        }
    );
    let periods: Vec<usize> = {
        let mut v: Vec<usize> = r.xruns.iter().map(|p| p.period).collect();
        v.dedup();
        v
    };
    // Servers in run order.
    let servers: Vec<JackServer> = {
        let mut v: Vec<JackServer> = Vec::new();
        for p in &r.xruns {
            if !v.contains(&p.server) {
                v.push(p.server);
            }
        }
        v
    };
    let totals: Vec<XrunTotals> = periods
        .iter()
        .flat_map(|&period| {
            servers
                .iter()
                .map(move |&s| XrunTotals::of(&r.xruns, period, s))
        })
        .filter(|t| t.windows + t.failed > 0)
        .collect();
    let total = |period: usize, s: JackServer| {
        totals
            .iter()
            .find(|t| t.period == period && t.server == s && t.windows > 0)
    };
    let blank = |n: usize| vec![String::new(); n];
    for &period in &periods {
        for p in r.xruns.iter().filter(|p| p.period == period) {
            let name = p.server.name().to_string();
            let window = format!("{}/{rounds}", p.repeat + 1);
            let (Some(c), Some(t)) = (&p.client, p.totals()) else {
                let mut row = vec![
                    period.to_string(),
                    name,
                    window,
                    format!("failed: {}", p.error.clone().unwrap_or_default()),
                ];
                row.extend(blank(7));
                summary.row(row);
                continue;
            };
            // The same round's jackd2 window: the nearest in time, so the same noise.
            let jrates = r
                .xruns
                .iter()
                .find(|j| {
                    j.period == period
                        && j.repeat == p.repeat
                        && j.server == JackServer::Jackd2
                        && j.client.is_some()
                })
                .map(|j| {
                    let t = j.totals().unwrap_or_default();
                    (
                        rate(j.server_xruns.unwrap_or(0), j.minutes()),
                        rate(t.late, j.minutes()),
                    )
                });
            let period_ns = c.nframes.max(1) as f64 * 1e9 / r.rate as f64;
            let load = t.mean_busy_ns() / period_ns;
            let srv = server_cell(p.server_xruns, p.missed_cycles, p.driver_xruns);
            let srv_rate = p.server_xruns.map(|x| rate(x, p.minutes()));
            let late_rate = rate(t.late, p.minutes());
            let vs = match (p.server, jrates) {
                (JackServer::Jackd2, _) => "1".into(),
                (_, Some((js, jl))) => format!(
                    "{} / {}",
                    srv_rate.map_or("n/a".into(), |s| ratio(s, js)),
                    ratio(late_rate, jl)
                ),
                _ => "no jackd2".into(),
            };
            summary.row(vec![
                format!("{} ({})", period, c.nframes),
                name,
                window,
                format!("{} ({:.0} %)", c.voices, load * 100.0),
                c.clients.first().map_or(String::new(), |x| x.sched.clone()),
                srv,
                t.xrun_callbacks.to_string(),
                format!("{} ({} jumps, {} overruns)", t.late, t.jumps, t.overruns),
                format!(
                    "{} / {:.2}",
                    srv_rate.map_or("n/a".into(), |s| format!("{s:.2}")),
                    late_rate
                ),
                vs,
                String::new(),
            ]);
        }
        let jt = total(period, JackServer::Jackd2);
        for t in totals.iter().filter(|t| t.period == period) {
            let mut window = format!("total: {} ({:.2} min)", t.windows, t.minutes);
            if t.failed > 0 {
                let _ = write!(window, ", {} failed", t.failed);
            }
            if t.windows == 0 {
                let mut row = vec![t.period.to_string(), t.server.name().into(), window];
                row.extend(blank(8));
                summary.row(row);
                continue;
            }
            let srv_rate = t.server_per_min;
            let late_rate = t.late_per_min.unwrap_or(0.0);
            let vs = match (t.server, jt) {
                (JackServer::Jackd2, _) => "1".into(),
                (_, Some(j)) => format!(
                    "{} / {}",
                    match (srv_rate, j.server_per_min) {
                        (Some(s), Some(js)) => ratio(s, js),
                        _ => "n/a".into(),
                    },
                    ratio(late_rate, j.late_per_min.unwrap_or(0.0))
                ),
                _ => "no jackd2".into(),
            };
            summary.row(vec![
                t.period.to_string(),
                t.server.name().into(),
                window,
                String::new(),
                String::new(),
                server_cell(t.server_xruns, t.missed_cycles, t.driver_xruns),
                t.xrun_callbacks.to_string(),
                format!("{} ({} jumps, {} overruns)", t.late, t.jumps, t.overruns),
                format!(
                    "{} / {:.2}",
                    srv_rate.map_or("n/a".into(), |s| format!("{s:.2}")),
                    late_rate
                ),
                vs,
                format!("{} / {}", spread(&t.server_rates), spread(&t.late_rates)),
            ]);
        }
        if let Some(ct) = r.cyclictest.iter().find(|c| c.period == period) {
            match (&ct.result, ct.late) {
                (Some(res), Some(late)) => summary.row(vec![
                    period.to_string(),
                    "cyclictest".into(),
                    "once".into(),
                    format!("-i {} µs", ct.interval_us),
                    "SCHED_FIFO 80".into(),
                    format!("{late} > {} µs", ct.interval_us),
                    String::new(),
                    format!("of {} wakeups, max {} µs", res.samples, res.max_us),
                    format!(
                        "{:.2}",
                        rate(late, res.samples as f64 * ct.interval_us as f64 / 6e7)
                    ),
                    String::new(),
                    String::new(),
                ]),
                _ => {
                    let mut row = vec![
                        period.to_string(),
                        "cyclictest".into(),
                        "once".into(),
                        ct.error.clone().unwrap_or_default(),
                    ];
                    row.extend(blank(7));
                    summary.row(row);
                }
            }
        }
    }
    md.push_str(&summary.markdown());
    let verdicts: Vec<String> = periods
        .iter()
        .filter_map(|&period| {
            verdict(
                total(period, JackServer::Quaverd)?,
                total(period, JackServer::Jackd2)?,
            )
        })
        .collect();
    if !verdicts.is_empty() {
        md.push_str(
            "\n**Acceptance (quaver's xrun rate must not exceed jackd2's), on the totals of \
             the alternating windows:**\n\n",
        );
        for v in &verdicts {
            let _ = writeln!(md, "- {v}");
        }
    }
    let _ = writeln!(md, "\n### Details\n");
    for (period, ns) in &r.ns_per_voice {
        let v = r.voices.iter().find(|x| x.0 == *period).map_or(0, |x| x.1);
        let _ = writeln!(
            md,
            "- calibration at {period} frames: {:.0} ns per voice per cycle ({:.2} ns per \
             voice-frame) → {v} voices",
            ns,
            ns / *period as f64
        );
    }
    for p in &r.xruns {
        let _ = write!(
            md,
            "- {} at {}, window {}/{rounds}: ",
            p.server.name(),
            p.period,
            p.repeat + 1
        );
        match &p.client {
            Some(c) => {
                let t = p.totals().unwrap_or_default();
                let _ = write!(
                    md,
                    "library `{}` ({}), {} frames/cycle, {:.1} s, {} cycles, wake p50/p99/max \
                     {} / {} / {}, busy p50/p99/max {} / {} / {}, jack_cpu_load {:.1} %",
                    c.open.library,
                    c.open.version,
                    c.nframes,
                    c.seconds,
                    t.cycles,
                    fmt_bounds(t.wake.percentile(50.0)),
                    fmt_bounds(t.wake.percentile(99.0)),
                    fmt_bounds(t.wake.max_bucket()),
                    fmt_bounds(t.busy.percentile(50.0)),
                    fmt_bounds(t.busy.percentile(99.0)),
                    fmt_bounds(t.busy.max_bucket()),
                    c.clients.first().map_or(0.0, |x| x.cpu_load),
                );
                if let Some(q) = &p.quaver {
                    let _ = write!(
                        md,
                        "; quaverd: RT SCHED_FIFO {}, {} xrun events of {} missed cycles, \
                         fell behind {}× ({} cycles late), {} caught up, {} skips, {} device \
                         xruns, {} async, cycle busy p50/p99 {} / {}",
                        if q.realtime { "yes" } else { "no" },
                        q.client_xrun_events,
                        q.client_misses,
                        q.overdue_runs,
                        q.overdue_cycles,
                        q.client_caught_up,
                        q.client_skips,
                        q.device_xruns,
                        q.async_clients,
                        fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(50.0))),
                        fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(99.0))),
                    );
                }
                let _ = writeln!(md);
            }
            None => {
                let _ = writeln!(md, "failed: {}", p.error.clone().unwrap_or_default());
            }
        }
    }
    // Overhead.
    let mut oh = Table::new(&[
        "clients",
        "server",
        "source",
        "wait / client",
        "busy / client",
        "cycle busy",
        "xruns",
    ]);
    for p in &r.overhead {
        let name = p.server.name().to_string();
        let n = p.clients.to_string();
        let Some(c) = &p.client else {
            oh.row(vec![
                n,
                name,
                format!("failed: {}", p.error.clone().unwrap_or_default()),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            continue;
        };
        let t = CounterSnapshot::sum(c.clients.iter().map(|x| &x.window));
        if let Some(q) = &p.quaver {
            oh.row(vec![
                n.clone(),
                name.clone(),
                "quaverd timing WAIT/BUSY (per node)".into(),
                q.node_wait_ns.map_or("n/a".into(), us),
                q.node_busy_ns.map_or("n/a".into(), us),
                format!("{} of {} nodes timed", q.timed_clients, p.clients),
                String::new(),
            ]);
            oh.row(vec![
                n.clone(),
                name.clone(),
                "quaverd RT thread (blocked / per client)".into(),
                q.wait_per_client_ns.map_or("n/a".into(), us),
                q.node_rt_ns.map_or("n/a".into(), us),
                format!(
                    "p50 {} / p99 {}",
                    fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(50.0))),
                    fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(99.0)))
                ),
                format!("{} misses, {} device", q.client_misses, q.device_xruns),
            ]);
        }
        if let Some(nodes) = &p.pw_nodes {
            let waits: Vec<f64> = nodes.iter().filter_map(|x| median(&x.wait_ns)).collect();
            let busys: Vec<f64> = nodes.iter().filter_map(|x| median(&x.busy_ns)).collect();
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            oh.row(vec![
                n.clone(),
                name.clone(),
                match p.pw_tool {
                    Some(PwTool::PwTop) => "pw-top -b WAIT/BUSY".into(),
                    _ => "pw-top WAIT/BUSY via pw-profiler".into(),
                },
                mean(&waits).map_or("n/a".into(), us),
                mean(&busys).map_or("n/a".into(), us),
                format!("{} of {} nodes seen", nodes.len(), p.clients),
                format!(
                    "{} not finished",
                    nodes.iter().map(|x| x.errors).sum::<u64>()
                ),
            ]);
        } else if let Some(w) = &p.pw_command
            && p.server == JackServer::Pipewire
        {
            oh.row(vec![
                n.clone(),
                name.clone(),
                format!("pw-top: {w}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        oh.row(vec![
            n,
            name,
            "client (wake / callback)".into(),
            us(t.mean_wake_ns()),
            us(t.mean_busy_ns()),
            String::new(),
            format!("{} cb, {} late", t.xrun_callbacks, t.late),
        ]);
    }
    if !r.overhead.is_empty() {
        let _ = writeln!(
            md,
            "\n## Per-client overhead\n\nN JACK clients in one process, each with one output \
             port connected to the server's first playback port and {} voices (a light fixed \
             load), at period {}. Rows per server:\n\n\
             - *quaverd timing WAIT/BUSY*: quaverd's per-node timing (`timing` reply, `quaver \
             top`): WAIT = the client's process thread awake − the server's signal, BUSY = its \
             completion − awake, stamped as pw-top's are; mean over the window per node, mean \
             of the clients;\n\
             - *quaverd RT thread*: the time the RT thread blocked on a client's completion per \
             wake (`quaver graph`'s callback statistics), then the RT thread's whole time on a \
             client per cycle (waking it, blocking, collecting; `rt_avg_ns`), and the RT \
             thread's whole-cycle busy time (log2 buckets);\n\
             - *pw-top WAIT/BUSY*: PipeWire's per-node WAIT (awake − signal) and BUSY (finish − \
             awake), median of the samples per node, mean of the nodes — from `pw-top -b`, or, \
             where pw-top has no batch mode (0.3.65), from `pw-profiler`, the same profiler data \
             pw-top reads, every cycle;\n\
             - *client*: what the client measures on every server: wake = callback start − \
             cycle start (`jack_get_cycle_times`, the library's clock), callback = its duration.\n\n\
             quaverd's WAIT/BUSY and pw-top's have the same definition; quaverd's are means, \
             pw-top's medians of the samples. The RT thread's blocked time includes the \
             client's whole wake-up and callback whenever it was not done when needed.\n",
            r.overhead_voices, r.overhead_period
        );
        md.push_str(&oh.markdown());
    }
    if !r.missing.is_empty() {
        md.push_str("\n### Not measured\n\n");
        for (s, w) in &r.missing {
            let _ = writeln!(md, "- {}: {w}", s.name());
        }
    }
    // The totals go into the record next to the windows (derived, so a record read
    // back as `JackResults` ignores them).
    let mut results = serde_json::to_value(r).unwrap_or_default();
    if let Some(m) = results.as_object_mut() {
        m.insert(
            "xrun_totals".into(),
            serde_json::to_value(&totals).unwrap_or_default(),
        );
    }
    ModeOutput {
        results,
        markdown: md,
        plots: Vec::new(),
        summary,
        extra: if r.overhead.is_empty() {
            Vec::new()
        } else {
            vec![oh]
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pw_top_batch_rows() {
        // Rows as pw-top's batch mode prints them:
        // "%s %4.1u %6.1u %6.1u %s %s %s %s  %3.1u %16.16s %s%s".
        let row = |st: &str,
                   id: u32,
                   q: u32,
                   r: u32,
                   w: &str,
                   b: &str,
                   err: u32,
                   fmt: &str,
                   f: bool,
                   name: &str| {
            format!(
                "{st} {id:>4} {q:>6} {r:>6} {w:>7} {b:>7} {:>5} {:>5}  {err:>3} {fmt:>16.16} {}{name}\n",
                "0.01",
                "0.00",
                if f { " + " } else { "" }
            )
        };
        let header =
            "S   ID  QUANT   RATE    WAIT    BUSY   W/Q   B/Q  ERR FORMAT           NAME \n";
        let text = [
            header.to_string(),
            row(
                "R",
                30,
                64,
                48000,
                " 12.5us",
                "  3.1us",
                0,
                "F32LE 2 48000",
                false,
                "null",
            ),
            row(
                "R",
                41,
                64,
                48000,
                " 20.0us",
                "  8.5us",
                2,
                "F32LE 1 48000",
                true,
                "qb-light-0",
            ),
            row(
                "R",
                42,
                0,
                0,
                "  1.2ms",
                "150.0us",
                0,
                "",
                true,
                "qb-light-1",
            ),
            row(
                "S",
                50,
                0,
                0,
                "   --- ",
                "   --- ",
                0,
                "",
                false,
                "idle node",
            ),
            header.to_string(),
            row(
                "R",
                41,
                64,
                48000,
                " 22.0us",
                "  9.5us",
                3,
                "F32LE 1 48000",
                true,
                "qb-light-0",
            ),
        ]
        .concat();
        let text = text.as_str();
        let m = parse_pw_top(text);
        let a = &m["qb-light-0"];
        assert_eq!(a.wait_ns, vec![20_000.0, 22_000.0]);
        assert_eq!(a.busy_ns, vec![8_500.0, 9_500.0]);
        assert_eq!(a.errors, 3, "ERR is cumulative: the last value");
        assert_eq!(m["qb-light-1"].wait_ns, vec![1_200_000.0]);
        assert_eq!(m["qb-light-1"].busy_ns, vec![150_000.0]);
        assert_eq!(m["null"].busy_ns, vec![3_100.0]);
        assert!(m["idle node"].wait_ns.is_empty(), "--- is not a sample");
        assert_eq!(pw_time_ns("12.5µs"), Some(12_500.0));
        assert_eq!(pw_time_ns("0.5s"), Some(5e8));
        assert_eq!(pw_time_ns("---"), None);
    }

    #[test]
    fn parses_pw_profiler_logs() {
        // As 0.3.65 writes it: integers; the first follower's own WAIT column is 0.
        let log = "1314\t61\t0\t1333\t41\t0\t20\t28\t0\t8\t3\t0\t42\t10\t34\t35\t24\t1\t3\t0\t \t \t \t \t \t \t \t \t\n\
1338\t48\t0\t1333\t41\t5\t15\t20\t10\t5\t1\t0\t42\t6\t20\t23\t14\t3\t3\t0\t \t \t \t \t \t \t \t \t\n";
        let plot = "plot \"profiler.log\" using 1 title \"Audio period\" with lines, \
                    \"profiler.log\" using 8 title \"qb-light-0/41\" with lines, \
                    \"profiler.log\" using 16 title \"qb-light-1/42\" with lines\n";
        let m = parse_pw_profiler(log, plot);
        assert_eq!(m.len(), 2);
        let a = &m["qb-light-0"];
        assert_eq!(a.wait_ns, vec![20_000.0, 10_000.0]);
        assert_eq!(a.busy_ns, vec![8_000.0, 5_000.0]);
        assert_eq!(a.errors, 1, "status 1 (triggered) is not finished");
        assert_eq!(m["qb-light-1"].busy_ns, vec![1_000.0, 3_000.0]);
        // Without the plot file the ids stand in for the names.
        assert!(parse_pw_profiler(log, "").contains_key("41"));
    }

    #[test]
    fn counts_jackd_xrun_lines_and_cyclictest_lateness() {
        let log = "jackdmp 1.9.21\nJackEngine::XRun: client = qb-synth-0 was not finished, state = Triggered\n\
                   JackAudioDriver::ProcessGraphAsyncMaster: Process error\nsome other line\n\
                   JackTimedDriver::Process XRun = 2051 usec\n";
        assert_eq!(jackd_xrun_lines(log), 2);
        assert_eq!(jackd_driver_xrun_lines(log), 1);
        assert_eq!(server_cell(Some(3), Some(40), None), "3 (40 missed cycles)");
        assert_eq!(server_cell(Some(2), None, Some(1)), "2 (1 driver)");
        assert_eq!(
            server_cell(Some(5), Some(40), Some(2)),
            "5 (40 missed cycles, 2 driver)"
        );
        assert_eq!(server_cell(None, Some(1), None), "n/a");
        let r = CyclictestResult {
            min_us: 3,
            avg_us: 10,
            max_us: 20_000,
            samples: 107,
            overflows: 2,
            bins: vec![(5, 100), (1333, 1), (1334, 3), (4000, 1)],
        };
        assert_eq!(cyclictest_late(&r, 1334), 1 + 2);
        assert_eq!(cyclictest_late(&r, 1333), 4 + 2);
    }

    #[test]
    fn quaver_side_differences_the_snapshots() {
        use quaver_client::quaver_protocol::{CallbackNodeInfo, NodeInfo};
        let node = |woken, xruns, xrun_events, wait_avg_ns| NodeInfo {
            id: 7,
            name: "qb-light-0".into(),
            kind: "callback".into(),
            description: String::new(),
            volume: 1.0,
            mute: false,
            latency_ms: None,
            playback_lead_frames: None,
            suspended: false,
            ports: Vec::new(),
            callback: Some(CallbackNodeInfo {
                mode: "sync".into(),
                active: true,
                woken,
                xruns,
                xrun_events,
                skipped: 0,
                wait_avg_ns,
                wait_max_ns: 0,
                quantum: Some(64),
                ..CallbackNodeInfo::default()
            }),
        };
        let g = |n| GraphInfo {
            nodes: vec![n],
            links: Vec::new(),
        };
        let a = QuaverSnap {
            graph: Some(g(node(100, 1, 1, 10_000))),
            ..QuaverSnap::default()
        };
        let b = QuaverSnap {
            graph: Some(g(node(300, 4, 2, 20_000))),
            ..QuaverSnap::default()
        };
        let q = quaver_side(&a, &b, "qb-light");
        assert_eq!(q.client_misses, 3);
        assert_eq!(q.client_xrun_events, 1);
        assert_eq!(q.wakes, 200);
        // (300·20 µs − 100·10 µs) / 200 = 25 µs.
        assert_eq!(q.wait_per_client_ns, Some(25_000.0));
        assert_eq!(quaver_side(&a, &b, "other").wakes, 0);
        assert_eq!(q.node_busy_ns, None, "no timing, no per-node figures");
    }

    #[test]
    fn quaver_side_takes_per_node_figures_from_the_end_snapshot() {
        let t = |nodes| TimingStats {
            rate: 48000,
            quantum: 64,
            cycles: 0,
            xruns: 0,
            lateness_ns_log2: Vec::new(),
            busy_ns_log2: Vec::new(),
            lateness_max_ns: 0,
            busy_max_ns: 0,
            nodes,
            interval_ns: 3_000_000_000,
            suspended: false,
            overdue_cycles: 0,
            overdue_runs: 0,
        };
        let node = |name: &str, cycles, wait, busy| NodeTimingInfo {
            name: name.into(),
            cycles,
            wait_avg_ns: wait,
            busy_avg_ns: busy,
            rt_avg_ns: wait + busy,
            ..NodeTimingInfo::default()
        };
        let a = QuaverSnap {
            timing: Some(TimingStats {
                overdue_cycles: 5,
                overdue_runs: 2,
                ..t(Vec::new())
            }),
            ..QuaverSnap::default()
        };
        let b = QuaverSnap {
            timing: Some(TimingStats {
                overdue_cycles: 12,
                overdue_runs: 3,
                ..t(vec![
                    node("qb-light-0", 100, 10_000, 30_000),
                    node("qb-light-1", 100, 20_000, 50_000),
                    node("qb-light-2", 0, 0, 0),
                    node("null-sink", 100, 0, 2_000),
                ])
            }),
            ..QuaverSnap::default()
        };
        let q = quaver_side(&a, &b, "qb-light");
        assert_eq!(
            (q.overdue_runs, q.overdue_cycles),
            (1, 7),
            "the window's own"
        );
        assert_eq!(q.timed_clients, 2, "idle and foreign nodes are left out");
        assert_eq!(q.node_wait_ns, Some(15_000.0));
        assert_eq!(q.node_busy_ns, Some(40_000.0));
        assert_eq!(q.node_rt_ns, Some(55_000.0));
    }

    /// A window of `server` in round `repeat` at period 64: one minute, `srv` server
    /// xruns (None: not counted), `late` late callbacks (None: the window failed).
    fn window(server: JackServer, repeat: usize, srv: Option<u64>, late: Option<u64>) -> XrunPoint {
        let client = late.map(|late| ClientRun {
            open: jackclient::OpenInfo {
                library: "/usr/lib/libjack.so.0".into(),
                version: "1.9.21".into(),
                rate: 48_000,
                buffer_size: 64,
                server_realtime: true,
            },
            nframes: 64,
            seconds: 60.0,
            voices: 100,
            clients: vec![jackclient::ClientFigures {
                name: "qb-synth-0".into(),
                connected_to: Some("system:playback_1".into()),
                sched: "SCHED_FIFO 19".into(),
                cpu_load: 50.0,
                window: CounterSnapshot {
                    cycles: 45_000,
                    late,
                    jumps: late,
                    xrun_callbacks: late,
                    ..CounterSnapshot::default()
                },
            }],
        });
        XrunPoint {
            server,
            period: 64,
            repeat,
            error: client.is_none().then(|| "it broke".into()),
            client,
            server_xruns: srv,
            missed_cycles: None,
            driver_xruns: None,
            quaver: None,
            stressor: Some("stress-ng --cpu 2".into()),
        }
    }

    fn results(xruns: Vec<XrunPoint>) -> JackResults {
        JackResults {
            rate: 48_000,
            ns_per_voice: vec![(64, 500.0)],
            voices: vec![(64, 100)],
            load: 0.5,
            stressor: "stress-ng".into(),
            xruns,
            cyclictest: Vec::new(),
            overhead: Vec::new(),
            overhead_period: 64,
            overhead_voices: 4,
            missing: Vec::new(),
        }
    }

    #[test]
    fn totals_sum_the_alternating_windows_and_the_verdict_is_on_them() {
        use JackServer::*;
        // Three rounds, q j p alternating. Round 2 alone would fail quaverd (9 vs 1) and
        // round 1 alone would pass it; the totals (9 in 3 min vs 10 in 3 min) pass.
        let xruns = vec![
            window(Quaverd, 0, Some(0), Some(2)),
            window(Jackd2, 0, Some(5), Some(1)),
            window(Pipewire, 0, None, None),
            window(Quaverd, 1, Some(9), Some(4)),
            window(Jackd2, 1, Some(1), Some(1)),
            window(Pipewire, 1, None, Some(6)),
            window(Quaverd, 2, Some(0), Some(0)),
            window(Jackd2, 2, Some(4), Some(1)),
            window(Pipewire, 2, None, Some(3)),
        ];
        let q = XrunTotals::of(&xruns, 64, Quaverd);
        assert_eq!((q.windows, q.failed), (3, 0));
        assert_eq!(q.server_xruns, Some(9));
        assert_eq!(q.server_per_min, Some(3.0));
        assert_eq!(q.late, 6);
        assert_eq!(q.late_per_min, Some(2.0));
        assert_eq!(q.server_rates, vec![0.0, 9.0, 0.0]);
        assert_eq!(spread(&q.server_rates), "0.00 (0.00–9.00)");
        let j = XrunTotals::of(&xruns, 64, Jackd2);
        assert_eq!(j.server_xruns, Some(10));
        assert!((j.server_per_min.unwrap() - 10.0 / 3.0).abs() < 1e-9);
        assert_eq!(spread(&j.server_rates), "4.00 (1.00–5.00)");
        let p = XrunTotals::of(&xruns, 64, Pipewire);
        assert_eq!(
            (p.windows, p.failed),
            (2, 1),
            "the failed window is left out"
        );
        assert_eq!(p.server_xruns, None);
        assert_eq!(p.server_per_min, None);
        assert_eq!(p.late_per_min, Some(4.5));
        assert_eq!(XrunTotals::of(&xruns, 32, Quaverd).windows, 0);

        let out = render(&results(xruns.clone()));
        let md = &out.markdown;
        assert!(
            md.contains("3 windows per server and period, the servers' windows alternating"),
            "{md}"
        );
        assert!(
            md.contains(
                "period 64: quaverd 3.00/min (9 xruns in 3.00 min, 3 windows) vs jackd2 3.33/min"
            ),
            "{md}"
        );
        assert!(md.contains("quaverd ≤ jackd2: met"), "{md}");
        assert!(md.contains("per-window median 0.00 vs 4.00"), "{md}");
        // 6 late in 3 min vs 3 late: client-observed not met.
        assert!(
            md.contains("2.00/min vs 1.00/min client-observed (NOT met)"),
            "{md}"
        );
        assert_eq!(md.matches("- period ").count(), 1, "one verdict per period");
        // A row per window with its round, and a total row per server.
        let text = out.summary.markdown();
        assert_eq!(text.matches("| 2/3 |").count(), 3, "{text}");
        assert!(text.contains("| total: 3 (3.00 min) |"), "{text}");
        assert!(text.contains("| total: 2 (2.00 min), 1 failed |"), "{text}");
        // PipeWire's two measured windows: 6 and 3 late per minute, the median between.
        assert!(text.contains("| n/a / 4.50 (3.00–6.00) |"), "{text}");
        assert!(
            text.contains("0.00 (0.00–9.00) / 2.00 (0.00–4.00)"),
            "{text}"
        );
        assert!(md.contains("- quaverd at 64, window 3/3: "), "{md}");
        // The round-2 quaverd row compares with round 2's jackd2 window (9 vs 1).
        assert!(text.contains("| 9.00 / 4.00 | 9.00 / 4.00 |"), "{text}");
        let tot = out.results["xrun_totals"].as_array().unwrap();
        assert_eq!(tot.len(), 3);
        assert_eq!(tot[0]["server"], "quaverd");
        assert_eq!(tot[0]["server_xruns"], 9);

        // One more bad quaverd window tips the totals: 19 in 4 min > 10 in 3 min.
        let mut worse = xruns;
        worse.push(window(Quaverd, 3, Some(10), Some(0)));
        let md = render(&results(worse)).markdown;
        assert!(md.contains("quaverd > jackd2: NOT met"), "{md}");
    }

    #[test]
    fn xrun_points_from_before_repeats_read_as_round_zero() {
        let mut v = serde_json::to_value(window(JackServer::Jackd2, 4, Some(1), Some(1))).unwrap();
        assert_eq!(v["repeat"], 4);
        v.as_object_mut().unwrap().remove("repeat");
        let p: XrunPoint = serde_json::from_value(v).unwrap();
        assert_eq!(p.repeat, 0);
        // A whole old record reads and renders, as one round.
        let mut r = serde_json::to_value(results(vec![window(
            JackServer::Quaverd,
            0,
            Some(2),
            Some(2),
        )]))
        .unwrap();
        r["xruns"][0].as_object_mut().unwrap().remove("repeat");
        let r: JackResults = serde_json::from_value(r).unwrap();
        assert!(
            render(&r)
                .markdown
                .contains("- quaverd at 64, window 1/1: ")
        );
    }

    #[test]
    fn ratios_say_what_they_compare() {
        assert_eq!(ratio(1.0, 2.0), "0.50");
        assert_eq!(ratio(0.0, 0.0), "– (0 / 0)");
        assert_eq!(ratio(1.0, 0.0), "∞ (jackd2: 0)");
        let c = describe(&Jackd::command("x", 20, 48_000, 64));
        assert_eq!(
            c,
            "JACK_NO_AUDIO_RESERVATION=1 jackd -n x -R -P 20 -d dummy -r 48000 -p 64"
        );
    }
}
