//! `peers --under-load`: the underruns N `paplay --latency-msec=L` clients are told of
//! while every core is oversubscribed with CPU hogs, per server.
//!
//! Crackling under load is the first thing users of sound servers complain about, and on
//! a loaded machine what a PulseAudio-protocol stream needs is that the client's answer
//! to each request is read in time by the server's threads, whatever their scheduling.
//! Per round and server: the server is started fresh, the stressor (stress-ng's `--cpu`
//! hogs, or the built-in stressor) starts, then the N clients, each with `-v` (paplay
//! then prints "Stream underrun." for every UNDERFLOW the server sends); after the window
//! everything is stopped by PID and each client's underruns are counted. The rounds
//! alternate between the servers, so a noisy stretch of the machine falls on each alike.

use crate::Ctx;
use crate::tools::exec::{describe, stop_child};
use crate::tools::rng::Rng;
use crate::tools::servers::{Server, ServerKind};
use crate::tools::signal::{FILE_RATE, write_wav};
use crate::tools::stressor::{self, StressorConfig, StressorKind};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Settings of the under-load part.
#[derive(Debug, Clone)]
pub struct UnderLoadOptions {
    /// Stream counts.
    pub counts: Vec<usize>,
    /// The clients' `--latency-msec`.
    pub latency_ms: u32,
    /// Window per point, s.
    pub seconds: f64,
    /// Rounds (the servers alternate within each).
    pub rounds: usize,
    /// CPU hogs per core.
    pub hogs_per_core: usize,
}

impl UnderLoadOptions {
    /// Defaults: 1 and 8 streams at 20 ms, 20 s windows, 3 rounds, three hogs per core
    /// (quick: 1 stream, 2 s, once).
    pub fn new(quick: bool) -> UnderLoadOptions {
        UnderLoadOptions {
            counts: if quick { vec![1] } else { vec![1, 8] },
            latency_ms: 20,
            seconds: if quick { 2.0 } else { 20.0 },
            rounds: if quick { 1 } else { 3 },
            hogs_per_core: 3,
        }
    }
}

/// One window of one server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnderLoadPoint {
    /// Clients.
    pub streams: usize,
    /// Round, from 1.
    pub round: usize,
    /// Underruns each client was told of.
    pub underruns: Vec<u32>,
    /// Why the point failed, if it did (its counts are then incomplete).
    pub error: Option<String>,
}

impl UnderLoadPoint {
    /// Underruns of all clients together.
    pub fn total(&self) -> u32 {
        self.underruns.iter().sum()
    }
}

/// The stressor's configuration for `cores` cores.
pub fn stress_config(o: &UnderLoadOptions, cores: usize) -> StressorConfig {
    StressorConfig {
        cpu: o.hogs_per_core.max(1) * cores.max(1),
        io: false,
        vm_mb: 0,
    }
}

/// Runs every point: per round, per stream count, each server in turn. Returns the
/// points per server (in `kinds` order) and the stressor's command.
pub fn run(
    ctx: &mut Ctx,
    kinds: &[ServerKind],
    o: &UnderLoadOptions,
    mut tick: impl FnMut(String),
) -> Result<(Vec<Vec<UnderLoadPoint>>, String)> {
    let dir = crate::tools::exec::tempdir("quaver-bench-underload-")?;
    let wav = dir.path().join("signal-s16-44100-2ch.wav");
    // Longer than the window and the clients' start, so none ends inside it.
    write_wav(
        &wav,
        FILE_RATE,
        o.seconds + 6.0,
        &mut Rng::new(ctx.seed ^ 0x756e_6465_726c_6f61),
    )?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cfg = stress_config(o, cores);
    let self_exe = std::env::current_exe().context("finding quaver-bench itself")?;
    let mut points = vec![Vec::new(); kinds.len()];
    let mut stress_command = String::new();
    for round in 1..=o.rounds.max(1) {
        for &n in &o.counts {
            for (i, &kind) in kinds.iter().enumerate() {
                tick(format!(
                    "under load: {} × {n} (round {round} of {})",
                    kind.name(),
                    o.rounds
                ));
                let mut counts = Vec::new();
                let r = point(ctx, kind, n, o, cfg, &wav, &self_exe, &mut counts)
                    .map(|cmd| stress_command = cmd);
                points[i].push(UnderLoadPoint {
                    streams: n,
                    round,
                    underruns: counts,
                    error: r.err().map(|e| format!("{e:#}")),
                });
            }
        }
    }
    Ok((points, stress_command))
}

/// One window: returns the stressor's command; the clients' counts go to `counts`
/// (filled even when the point fails part-way).
#[allow(clippy::too_many_arguments)]
fn point(
    ctx: &mut Ctx,
    kind: ServerKind,
    n: usize,
    o: &UnderLoadOptions,
    cfg: StressorConfig,
    wav: &std::path::Path,
    self_exe: &std::path::Path,
    counts: &mut Vec<u32>,
) -> Result<String> {
    let mut server = Server::start(ctx, kind)?;
    let window = Duration::from_secs_f64(o.seconds);
    let stress = stressor::start(
        StressorKind::Auto,
        cfg,
        window + Duration::from_secs(10),
        ctx.seed,
        self_exe,
    );
    let stress = match stress {
        Ok(Some(s)) => s,
        Ok(None) => unreachable!("Auto always starts a stressor"),
        Err(e) => {
            server.stop();
            return Err(e);
        }
    };
    let command = stress.command.clone();
    // The hogs take the cores before the clients start, as on a machine already busy.
    std::thread::sleep(Duration::from_millis(500));
    let mut clients = Vec::with_capacity(n);
    let mut readers = Vec::with_capacity(n);
    let tallies: Vec<Arc<AtomicU32>> = (0..n).map(|_| Arc::new(AtomicU32::new(0))).collect();
    let started = (|| -> Result<()> {
        for (i, tally) in tallies.iter().enumerate() {
            let mut c = Command::new("paplay");
            server.client_env(&mut c);
            c.args([
                "-v",
                &format!("--latency-msec={}", o.latency_ms),
                &format!("--stream-name=underload-{i}"),
                "--client-name=quaver-bench",
            ])
            .arg(wav);
            if i == 0 {
                ctx.record_command(format!("{} &   # ×{n} under `{command}`", describe(&c)));
            }
            let mut child = c
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting paplay")?;
            let err = child.stderr.take().expect("piped");
            let tally = tally.clone();
            readers.push(std::thread::spawn(move || {
                // paplay -v rewrites its status line with '\r'.
                for chunk in BufReader::new(err).split(b'\r').map_while(Result::ok) {
                    for part in String::from_utf8_lossy(&chunk).split('\n') {
                        if part.to_ascii_lowercase().contains("underrun") {
                            tally.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
            clients.push(child);
            std::thread::sleep(Duration::from_millis(20));
        }
        let t0 = Instant::now();
        while t0.elapsed() < window {
            std::thread::sleep(Duration::from_millis(100));
            for (i, c) in clients.iter_mut().enumerate() {
                if let Some(st) = c.try_wait()? {
                    bail!(
                        "paplay {i} of {n} exited early ({st}) against {}{}",
                        kind.name(),
                        server.ended().map(|e| format!("; {e}")).unwrap_or_default()
                    );
                }
            }
        }
        server.check_alive()
    })();
    for c in clients.iter_mut() {
        stop_child(c, Duration::from_secs(5));
    }
    for r in readers {
        let _ = r.join();
    }
    stress.stop();
    server.stop();
    *counts = tallies.iter().map(|t| t.load(Ordering::Relaxed)).collect();
    started.map(|()| command)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_oversubscribes_every_core_with_cpu_hogs_only() {
        let o = UnderLoadOptions::new(false);
        assert_eq!(
            stress_config(&o, 2),
            StressorConfig {
                cpu: 6,
                io: false,
                vm_mb: 0
            }
        );
        let p = UnderLoadPoint {
            streams: 2,
            round: 1,
            underruns: vec![3, 4],
            error: None,
        };
        assert_eq!(p.total(), 7);
    }
}
