//! `drift`: several cards at once, each on its own crystal (issue 32, item 7).
//!
//! Per case, a quaverd with simulated cards whose clocks are off by ± a few hundred ppm
//! (the first card drives the graph, the others follow it through the engine's adaptive
//! resampling, docs/engine/followers.md), one `pacat` playing a tone into every card
//! through the PulseAudio protocol, for minutes. Every `poll` the daemon's `status`:
//! each card's underruns and overruns, and each follower's loop (its settled estimate of
//! the clocks' ratio, its playback level and the level it holds, the widest level error
//! the real-time thread saw). [`analysis`] turns the samples into lock time, settled
//! ratio error against the true drift, level statistics and glitches. One case steps
//! the follower's crystal from +X to −X ppm halfway (a crystal warming up). Cases run
//! concurrently by default, each with its own quaverd: sim cards pace in real time but
//! cost little CPU.

pub mod analysis;
pub mod render;

use crate::Ctx;
use crate::tools::daemon::DaemonSpec;
use crate::tools::exec::{describe, stop_child};
use crate::tools::servers::Server;
pub use analysis::{LOCK_PPM, PERIOD_FRAMES};

use analysis::{FollowerFigures, Sample};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The device rate.
pub const RATE: u32 = 48_000;

/// A set-up: one quaverd, its driving card's crystal and its followers'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum DriftCase {
    /// Driver +X ppm, follower −X ppm.
    Opposite,
    /// Driver −X ppm, follower +X ppm.
    Reverse,
    /// Driver exact; followers +X, −X, and one stepping from +X to −X halfway.
    AgainstExact,
}

impl DriftCase {
    /// Every case.
    pub const ALL: [DriftCase; 3] = [
        DriftCase::Opposite,
        DriftCase::Reverse,
        DriftCase::AgainstExact,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            DriftCase::Opposite => "opposite",
            DriftCase::Reverse => "reverse",
            DriftCase::AgainstExact => "against-exact",
        }
    }

    /// The driver's drift and the followers' (drift, and a step to a new drift at half
    /// the run), for a magnitude of `ppm`.
    pub fn clocks(self, ppm: f64) -> (f64, Vec<(f64, Option<f64>)>) {
        match self {
            DriftCase::Opposite => (ppm, vec![(-ppm, None)]),
            DriftCase::Reverse => (-ppm, vec![(ppm, None)]),
            DriftCase::AgainstExact => (0.0, vec![(ppm, None), (-ppm, None), (ppm, Some(-ppm))]),
        }
    }
}

/// Settings of a `drift` run.
#[derive(Debug, Clone)]
pub struct DriftOptions {
    /// The cases.
    pub cases: Vec<DriftCase>,
    /// Magnitude of every crystal's error, ppm.
    pub ppm: f64,
    /// How long each case plays, s.
    pub seconds: f64,
    /// Between two `status` readings, s.
    pub poll_seconds: f64,
    /// The latency each `pacat` asks for, ms.
    pub latency_ms: u32,
    /// Run the cases one after another instead of at once.
    pub sequential: bool,
    /// The sim cards' watermark, frames (the glitch band is ± half of it).
    pub period_frames: usize,
}

impl DriftOptions {
    /// Defaults: every case, ±200 ppm, 10 minutes, a reading every 100 ms, 40 ms
    /// streams, cases at once (quick: 5 s, every 50 ms).
    pub fn new(quick: bool) -> DriftOptions {
        DriftOptions {
            cases: DriftCase::ALL.to_vec(),
            ppm: 200.0,
            seconds: if quick { 5.0 } else { 600.0 },
            poll_seconds: if quick { 0.05 } else { 0.1 },
            latency_ms: 40,
            sequential: false,
            period_frames: PERIOD_FRAMES,
        }
    }
}

/// One card of a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardResult {
    /// Its device (and graph node) name.
    pub name: String,
    /// Its `--device` spec.
    pub spec: String,
    /// It drives the graph.
    pub driver: bool,
    /// Its crystal's drift, ppm, and after the step (if any).
    pub drift_ppm: f64,
    /// The drift after the step, ppm.
    pub step_ppm: Option<f64>,
    /// Underruns and overruns over the run.
    pub underruns: u64,
    /// Overruns over the run.
    pub overruns: u64,
    /// A follower's figures (None for the driver).
    pub follow: Option<FollowerFigures>,
}

/// One case's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    /// Which.
    pub case: DriftCase,
    /// The quantum the engine ran (at the end).
    pub quantum: u32,
    /// Seconds it played.
    pub seconds: f64,
    /// `status` readings taken.
    pub readings: usize,
    /// Every card, the driver first.
    pub cards: Vec<CardResult>,
    /// The players still ran at the end (a pacat that quit means a stream stopped).
    pub players_ok: bool,
    /// Why the case failed, if it did.
    pub failure: Option<String>,
}

/// Everything a `drift` run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftResults {
    /// Crystal error magnitude, ppm.
    pub ppm: f64,
    /// Seconds per case.
    pub seconds: f64,
    /// Poll interval, s.
    pub poll_seconds: f64,
    /// The players' latency, ms.
    pub latency_ms: u32,
    /// Cases ran one after another.
    pub sequential: bool,
    /// The lock band, ppm.
    pub lock_ppm: f64,
    /// The sim cards' watermark, frames.
    #[serde(default)]
    pub period_frames: usize,
    /// The glitch band, frames.
    pub band_frames: i64,
    /// The cases.
    pub cases: Vec<CaseResult>,
}

/// Runs every case (at once unless `sequential`).
pub fn run(ctx: &mut Ctx, o: &DriftOptions) -> Result<DriftResults> {
    if crate::tools::exec::which("pacat").is_none() {
        bail!("drift needs pacat (pulseaudio-utils) to play into the cards");
    }
    let mut started = Vec::new();
    let mut cases = Vec::new();
    for &case in &o.cases {
        match Running::start(ctx, o, case) {
            Ok(r) if o.sequential => cases.push(r.finish(o)),
            Ok(r) => started.push(r),
            Err(e) => cases.push(failed(case, o, format!("{e:#}"))),
        }
    }
    // At once: one poller thread per case, all for the same span.
    let handles: Vec<_> = started
        .into_iter()
        .map(|r| {
            let o = o.clone();
            std::thread::spawn(move || r.finish(&o))
        })
        .collect();
    for h in handles {
        cases.push(
            h.join()
                .map_err(|_| anyhow::anyhow!("a case's thread panicked"))?,
        );
    }
    cases.sort_by_key(|c| o.cases.iter().position(|k| *k == c.case));
    Ok(DriftResults {
        ppm: o.ppm,
        seconds: o.seconds,
        poll_seconds: o.poll_seconds,
        latency_ms: o.latency_ms,
        sequential: o.sequential,
        lock_ppm: LOCK_PPM,
        period_frames: o.period_frames,
        band_frames: o.period_frames as i64 / 2,
        cases,
    })
}

fn failed(case: DriftCase, o: &DriftOptions, why: String) -> CaseResult {
    CaseResult {
        case,
        quantum: 0,
        seconds: o.seconds,
        readings: 0,
        cards: Vec::new(),
        players_ok: false,
        failure: Some(why),
    }
}

/// A card of a case as started.
struct Card {
    name: String,
    spec: String,
    drift_ppm: f64,
    step_ppm: Option<f64>,
}

/// A case whose quaverd and players run.
struct Running {
    case: DriftCase,
    server: Server,
    cards: Vec<Card>,
    players: Vec<Player>,
    t0: Instant,
}

impl Running {
    fn start(ctx: &mut Ctx, o: &DriftOptions, case: DriftCase) -> Result<Running> {
        let (driver_ppm, followers) = case.clocks(o.ppm);
        let card = |i: usize, ppm: f64, step: Option<f64>| {
            let name = format!("card{i}");
            let mut spec = format!(
                "sim:name={name},drift_ppm={ppm},loopback=off,period={}",
                o.period_frames
            );
            if let Some(to) = step {
                spec.push_str(&format!(",drift_step={}:{to}", o.seconds / 2.0));
            }
            Card {
                name,
                spec,
                drift_ppm: ppm,
                step_ppm: step,
            }
        };
        let cards: Vec<Card> = std::iter::once(card(0, driver_ppm, None))
            .chain(
                followers
                    .iter()
                    .enumerate()
                    .map(|(i, &(p, s))| card(i + 1, p, s)),
            )
            .collect();
        // Readings count from here: the cards' clocks, and the step, start with the
        // daemon, a few tens of ms later.
        let t0 = Instant::now();
        let server = Server::quaverd_with(
            ctx,
            DaemonSpec {
                devices: cards.iter().map(|c| c.spec.clone()).collect(),
                rate: Some(RATE),
                ..DaemonSpec::default()
            },
        )?;
        let mut players = Vec::new();
        for c in &cards {
            players.push(Player::start(
                ctx,
                &server,
                &format!("{}-sink", c.name),
                o.latency_ms,
            )?);
        }
        Ok(Running {
            case,
            server,
            cards,
            players,
            t0,
        })
    }

    /// Polls until the run's end, then stops everything and sums up.
    fn finish(mut self, o: &DriftOptions) -> CaseResult {
        let result = self.poll(o);
        let players_ok = self.players.iter_mut().all(|p| p.running());
        for p in &mut self.players {
            p.stop();
        }
        self.server.stop();
        match result {
            Ok((quantum, readings, cards)) => CaseResult {
                case: self.case,
                quantum,
                seconds: o.seconds,
                readings,
                cards,
                players_ok,
                failure: None,
            },
            Err(e) => failed(self.case, o, format!("{e:#}")),
        }
    }

    fn poll(&mut self, o: &DriftOptions) -> Result<(u32, usize, Vec<CardResult>)> {
        let socket = self.server.runtime_dir().join("quaver").join("native");
        let mut conn = quaver_client::Connection::connect(Some(&socket), "quaver-bench-drift")
            .with_context(|| format!("connecting to quaverd at {}", socket.display()))?;
        let n = self.cards.len();
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); n];
        let mut readings = 0;
        let period = Duration::from_secs_f64(o.poll_seconds);
        let end = self.t0 + Duration::from_secs_f64(o.seconds);
        let mut last = None;
        let mut next = self.t0;
        while Instant::now() < end {
            next += period;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            self.server.check_alive()?;
            let st = conn.status()?;
            let t = self.t0.elapsed().as_secs_f64();
            readings += 1;
            for (i, c) in self.cards.iter().enumerate() {
                let d = st.devices.iter().find(|d| d.name == c.name);
                let d = d.with_context(|| format!("{} is not among quaverd's devices", c.name))?;
                if let Some(f) = &d.follow {
                    samples[i].push(Sample::of(t, f));
                }
            }
            last = Some(st);
        }
        let st = last.context("no status reading")?;
        let half = o.seconds / 2.0;
        let (driver_ppm, _) = self.case.clocks(o.ppm);
        let cards = self
            .cards
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let d = st.devices.iter().find(|d| d.name == c.name);
                let (underruns, overruns) = d.map_or((0, 0), |d| (d.underruns, d.overruns));
                let follow = (i > 0).then(|| {
                    let truth = analysis::relative_ppm(c.drift_ppm, driver_ppm);
                    let step = c
                        .step_ppm
                        .map(|p| (half, analysis::relative_ppm(p, driver_ppm)));
                    let rt_extremes = d
                        .and_then(|d| d.follow.as_ref())
                        .map(|f| (f.play_error_min, f.play_error_max));
                    let band = o.period_frames as i64 / 2;
                    analysis::figures(&samples[i], truth, step, rt_extremes, RATE, band)
                });
                CardResult {
                    name: c.name.clone(),
                    spec: c.spec.clone(),
                    driver: i == 0,
                    drift_ppm: c.drift_ppm,
                    step_ppm: c.step_ppm,
                    underruns,
                    overruns,
                    follow,
                }
            })
            .collect();
        Ok((st.quantum, readings, cards))
    }
}

/// A `pacat` playing a tone into one sink, fed through its stdin by a thread.
struct Player {
    child: Child,
    stop: Arc<AtomicBool>,
    feeder: Option<std::thread::JoinHandle<()>>,
}

impl Player {
    fn start(ctx: &mut Ctx, server: &Server, sink: &str, latency_ms: u32) -> Result<Player> {
        let mut c = Command::new("pacat");
        server.client_env(&mut c);
        c.args([
            "--playback",
            "--format=s16le",
            "--rate=48000",
            "--channels=2",
            &format!("--latency-msec={latency_ms}"),
            &format!("--device={sink}"),
            "--client-name=quaver-bench",
            "--stream-name=drift",
        ]);
        ctx.record_command(format!("<440 Hz tone> | {} &", describe(&c)));
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting pacat")?;
        let mut stdin = child.stdin.take().context("pacat's stdin")?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // One second of a quiet 440 Hz tone (a whole number of periods), over and over;
        // the pipe paces the writes at the rate pacat reads.
        let second: Vec<u8> = (0..RATE as usize)
            .flat_map(|i| {
                let x = (i as f64 * 440.0 * std::f64::consts::TAU / RATE as f64).sin();
                let s = ((x * 0.1 * 32767.0) as i16).to_le_bytes();
                [s[0], s[1], s[0], s[1]]
            })
            .collect();
        let feeder = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if stdin.write_all(&second).is_err() {
                    return;
                }
            }
        });
        Ok(Player {
            child,
            stop,
            feeder: Some(feeder),
        })
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The feeder's blocked write fails once pacat is gone.
        stop_child(&mut self.child, Duration::from_secs(5));
        if let Some(f) = self.feeder.take() {
            let _ = f.join();
        }
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        self.stop();
    }
}
