//! The latency parts of `peers` (monitor latency, capture path): every server started
//! fresh, then each requested latency's rounds alternating between the servers.

use crate::Ctx;
use crate::modes::peers::capture::{self, CaptureOptions, CapturePoint};
use crate::modes::peers::monlat::{self, MonitorOptions, MonitorPoint};
use crate::report::progress::run_with_progress;
use crate::tools::rng::Rng;
use crate::tools::servers::{Server, ServerKind};
use anyhow::Result;

/// Per server kind: per requested latency, its rounds or why one failed.
type Rounds<R> = Vec<Result<Vec<Result<Vec<R>, String>>>>;

/// A latency part's schedule: every server started fresh and left running (idle but for
/// the one measured), then for each N its rounds alternating between the servers, so
/// the machine's noisy minutes fall on all of them alike. A failed round skips the rest
/// of that N on that server; a server that died fails its whole part.
#[allow(clippy::too_many_arguments)]
fn alternate_rounds<R: Send>(
    ctx: &mut Ctx,
    kinds: &[ServerKind],
    part: &str,
    latencies_ms: &[u32],
    rounds: usize,
    mut rng: Rng,
    pb: &indicatif::ProgressBar,
    step: &mut u64,
    describe: impl Fn(&Server, ServerKind) -> String,
    mut measure: impl FnMut(&Server, u32, &mut Rng) -> Result<R> + Send,
) -> Rounds<R> {
    let mut servers: Vec<Result<Server>> = Vec::new();
    let mut rngs = Vec::new();
    for &kind in kinds {
        pb.set_message(format!("peers: starting {} for {part}", kind.name()));
        let server = run_with_progress(pb, *step, |_| Server::start(ctx, kind));
        if let Ok(server) = &server {
            ctx.record_command(describe(server, kind));
        }
        servers.push(server);
        rngs.push(rng.fork());
    }
    let rounds = rounds.max(1);
    let mut got: Vec<Vec<Result<Vec<R>, String>>> = kinds
        .iter()
        .map(|_| latencies_ms.iter().map(|_| Ok(Vec::new())).collect())
        .collect();
    for (i, &n) in latencies_ms.iter().enumerate() {
        for round in 0..rounds {
            for (k, server) in servers.iter().enumerate() {
                let Ok(server) = server else { continue };
                let Ok(done) = &mut got[k][i] else { continue };
                pb.set_message(format!(
                    "peers: {part} {n} ms, round {} of {rounds}, {}",
                    round + 1,
                    kinds[k].name()
                ));
                let mut r = rngs[k].fork();
                match run_with_progress(pb, *step, |_| measure(server, n, &mut r)) {
                    Ok(x) => done.push(x),
                    Err(e) => got[k][i] = Err(format!("round {}: {e:#}", round + 1)),
                }
            }
        }
        *step += kinds.len() as u64;
        pb.set_position(*step);
    }
    servers
        .into_iter()
        .zip(got)
        .map(|(server, points)| {
            let mut server = server?;
            let alive = server.check_alive();
            server.stop();
            alive?;
            Ok(points)
        })
        .collect()
}

/// The monitor-latency part ([`alternate_rounds`]). One result per kind.
pub(super) fn monitor_servers(
    ctx: &mut Ctx,
    kinds: &[ServerKind],
    m: &MonitorOptions,
    rng: Rng,
    pb: &indicatif::ProgressBar,
    step: &mut u64,
) -> Vec<Result<Vec<MonitorPoint>>> {
    let describe = |server: &Server, kind: ServerKind| {
        format!(
            "# monitor latency against {}: built-in PulseAudio-protocol clients on {} \
             (playback float32le 48 kHz stereo, tlength = N ms, ADJUST_LATENCY, for N in \
             {:?}; record on the default sink's monitor, fragsize {} ms; {} rounds per \
             N, alternating between servers)",
            kind.name(),
            server.pulse_socket().display(),
            m.latencies_ms,
            m.fragsize_ms,
            m.rounds.max(1)
        )
    };
    let got = alternate_rounds(
        ctx,
        kinds,
        "monitor latency",
        &m.latencies_ms,
        m.rounds,
        rng,
        pb,
        step,
        describe,
        |server, n, r| monlat::measure_round(server, n, m, r),
    );
    got.into_iter()
        .map(|points| {
            Ok(m.latencies_ms
                .iter()
                .zip(points?)
                .map(|(&n, p)| match p {
                    Ok(rounds) => monlat::point(n, rounds),
                    Err(e) => MonitorPoint {
                        latency_ms: n,
                        error: Some(e),
                        ..MonitorPoint::default()
                    },
                })
                .collect())
        })
        .collect()
}

/// The capture-path part ([`alternate_rounds`]). One result per kind.
pub(super) fn capture_servers(
    ctx: &mut Ctx,
    kinds: &[ServerKind],
    c: &CaptureOptions,
    rng: Rng,
    pb: &indicatif::ProgressBar,
    step: &mut u64,
) -> Vec<Result<Vec<CapturePoint>>> {
    let describe = |server: &Server, kind: ServerKind| {
        format!(
            "# capture path against {}: `quaver-bench pulse-probe --latency-ms N --seconds \
             {}` (one libpulse client: playback tlength = N ms and a record stream on \
             @DEFAULT_MONITOR@ with fragsize = N ms, both ADJUST_LATENCY) with the \
             server's environment ({}), for N in {:?}; {} rounds per N, alternating \
             between servers",
            kind.name(),
            c.seconds,
            server.runtime_dir().display(),
            c.latencies_ms,
            c.rounds.max(1)
        )
    };
    let got = alternate_rounds(
        ctx,
        kinds,
        "capture path",
        &c.latencies_ms,
        c.rounds,
        rng,
        pb,
        step,
        describe,
        |server, n, r| capture::measure_round(server, n, c.seconds, r),
    );
    got.into_iter()
        .map(|points| {
            Ok(c.latencies_ms
                .iter()
                .zip(points?)
                .map(|(&n, p)| match p {
                    Ok(rounds) => capture::point(n, &rounds),
                    Err(e) => CapturePoint {
                        latency_ms: n,
                        error: Some(e),
                        ..CapturePoint::default()
                    },
                })
                .collect())
        })
        .collect()
}
