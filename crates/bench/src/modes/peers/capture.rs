//! `peers` capture path: one libpulse client with two streams, as an application that
//! plays and records at once (a call, a latency probe) sees a server.
//!
//! - **playback**: float32le 48 kHz stereo to the default sink, `tlength` = N ms,
//!   `ADJUST_LATENCY` (what `paplay --latency-msec=N` asks for), fed whatever libpulse
//!   says is writable: silence with a one-sample full-scale impulse every 250–350 ms
//!   (seeded). Just before writing the chunk that starts with an impulse, the probe
//!   reads `pa_stream_get_latency` (interpolated): the *playback-side reported* latency,
//!   the server's account of when that sample will be heard.
//! - **record**: `@DEFAULT_MONITOR@`, the same format, `fragsize` = N ms,
//!   `ADJUST_LATENCY` (what `parec --latency-msec=N` asks for). When the impulse comes
//!   back, `pa_stream_get_latency` of the record stream is the *capture-side reported*
//!   latency: how long ago, by the server's account, that block was played.
//!
//! Per impulse on CLOCK_MONOTONIC: *write→capture* = (when the fragment holding the
//! impulse was read − the frames after it / rate) − when the chunk was handed to
//! libpulse. *Playback-side measured* = write→capture − capture-side reported: the time
//! from writing the sample to its being played, by the monitor's account. The probe runs
//! in a child process (the hidden `pulse-probe` mode) with the server's environment, so
//! libpulse finds the socket and cookie as any application does, and its threads end
//! with it.

use crate::report::stats::Summary;
use crate::tools::libpulse::{
    ADJUST_LATENCY, AUTO_TIMING_UPDATE, BufferAttr, Client, Direction, INTERPOLATE_TIMING,
    PulseLib, SAMPLE_FLOAT32LE, SampleSpec,
};
use crate::tools::rng::Rng;
use crate::tools::servers::Server;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::ffi::c_void;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

const RATE: u32 = 48_000;
const CHANNELS: usize = 2;
const FRAME: usize = 4 * CHANNELS;
/// Impulses not seen within this are lost.
const LOST_AFTER: Duration = Duration::from_secs(1);
/// Before the first impulse: the streams start and settle.
const WARMUP: Duration = Duration::from_millis(500);

/// What the capture-path part measures.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptureOptions {
    /// Requested latencies (both streams), ms.
    pub latencies_ms: Vec<u32>,
    /// Seconds of impulses per round.
    pub seconds: f64,
    /// Rounds per point, alternating between the servers.
    pub rounds: usize,
}

impl CaptureOptions {
    /// 5, 10, 20 and 50 ms, 3 rounds of 4 s (quick: 5 and 10 ms, one round of 1.5 s).
    pub fn new(quick: bool) -> CaptureOptions {
        CaptureOptions {
            latencies_ms: if quick {
                vec![5, 10]
            } else {
                vec![5, 10, 20, 50]
            },
            seconds: if quick { 1.5 } else { 4.0 },
            rounds: if quick { 1 } else { 3 },
        }
    }
}

/// One round, as the probe process prints it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Round {
    /// Write→capture per impulse, ms.
    pub write_to_capture_ms: Vec<f64>,
    /// Playback-side reported latency per impulse, ms.
    pub playback_reported_ms: Vec<f64>,
    /// Capture-side reported latency per impulse, ms.
    pub capture_reported_ms: Vec<f64>,
    /// Underflows libpulse was told of.
    pub underruns: u32,
    /// Impulses written.
    pub impulses: usize,
    /// Impulses never captured.
    pub lost: usize,
    /// The playback stream's grant: maxlength, tlength, prebuf, minreq (bytes).
    pub granted_playback: [u32; 4],
    /// The record stream's fragsize (bytes).
    pub granted_fragsize: u32,
}

/// One requested latency on one server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapturePoint {
    /// Requested, ms.
    pub latency_ms: u32,
    /// Write→capture, ms.
    pub write_to_capture_ms: Option<Summary>,
    /// Playback-side reported, ms.
    pub playback_reported_ms: Option<Summary>,
    /// Playback-side measured (write→capture − capture-side reported), ms.
    pub playback_measured_ms: Option<Summary>,
    /// Capture-side reported, ms.
    pub capture_reported_ms: Option<Summary>,
    /// Underflows over all rounds.
    pub underruns: u32,
    /// Impulses written.
    pub impulses: usize,
    /// Impulses lost.
    pub lost: usize,
    /// The last round's grants (playback maxlength/tlength/prebuf/minreq, fragsize).
    pub granted: [u32; 5],
    /// Why the point is missing, if it is.
    pub error: Option<String>,
}

/// Adds the rounds up.
pub fn point(latency_ms: u32, rounds: &[Round]) -> CapturePoint {
    let all = |f: fn(&Round) -> &Vec<f64>| rounds.iter().flat_map(f).copied().collect::<Vec<_>>();
    let measured: Vec<f64> = rounds
        .iter()
        .flat_map(|r| {
            r.write_to_capture_ms
                .iter()
                .zip(&r.capture_reported_ms)
                .map(|(w, c)| w - c)
        })
        .collect();
    let last = rounds.last().cloned().unwrap_or_default();
    let g = last.granted_playback;
    CapturePoint {
        latency_ms,
        write_to_capture_ms: Summary::of(&all(|r| &r.write_to_capture_ms)),
        playback_reported_ms: Summary::of(&all(|r| &r.playback_reported_ms)),
        playback_measured_ms: Summary::of(&measured),
        capture_reported_ms: Summary::of(&all(|r| &r.capture_reported_ms)),
        underruns: rounds.iter().map(|r| r.underruns).sum(),
        impulses: rounds.iter().map(|r| r.impulses).sum(),
        lost: rounds.iter().map(|r| r.lost).sum(),
        granted: [g[0], g[1], g[2], g[3], last.granted_fragsize],
        error: None,
    }
}

/// Runs one round in a child process against `server`.
pub fn measure_round(server: &Server, n: u32, seconds: f64, rng: &mut Rng) -> Result<Round> {
    let exe = std::env::current_exe().context("finding quaver-bench itself")?;
    let mut cmd = Command::new(exe);
    server.client_env(&mut cmd);
    let out = cmd
        .args([
            "pulse-probe",
            "--latency-ms",
            &n.to_string(),
            "--seconds",
            &seconds.to_string(),
            "--seed",
            &rng.next_u64().to_string(),
        ])
        .stdin(Stdio::null())
        .output()
        .context("running the libpulse probe")?;
    if !out.status.success() {
        bail!(
            "libpulse probe: {} ({})",
            String::from_utf8_lossy(&out.stderr).trim(),
            out.status
        );
    }
    serde_json::from_slice(&out.stdout).context("reading the libpulse probe's result")
}

/// The probe process: connects, plays and records for `seconds` after a warm-up,
/// prints the [`Round`] as JSON.
pub fn probe_main(n: u32, seconds: f64, seed: u64) -> Result<()> {
    let lib = PulseLib::open().map_err(|e| anyhow!(e))?;
    let round = probe(&lib, n, seconds, seed).map_err(|e| anyhow!(e))?;
    println!("{}", serde_json::to_string(&round)?);
    Ok(())
}

unsafe extern "C" fn count_underflow(_stream: *mut c_void, userdata: *mut c_void) {
    // SAFETY: userdata is the probe's counter, alive while the stream is.
    unsafe { &*userdata.cast::<AtomicU32>() }.fetch_add(1, Relaxed);
}

/// The level of impulse `i`: 0.5 to 0.9375 in eight steps (a unity-gain path keeps
/// float samples exact).
fn impulse_level(i: usize) -> f32 {
    0.5 + (i % 8) as f32 * 0.0625
}

fn bytes(ms: u32) -> u32 {
    (RATE as u64 * ms as u64 / 1000) as u32 * FRAME as u32
}

fn probe(lib: &PulseLib, n: u32, seconds: f64, seed: u64) -> Result<Round, String> {
    let timeout = Duration::from_secs(10);
    let mut c = Client::connect(lib, None, "quaver-bench capture probe", timeout)?;
    let spec = SampleSpec {
        format: SAMPLE_FLOAT32LE,
        rate: RATE,
        channels: CHANNELS as u8,
    };
    let flags = ADJUST_LATENCY | INTERPOLATE_TIMING | AUTO_TIMING_UPDATE;
    let unset = BufferAttr {
        maxlength: u32::MAX,
        tlength: u32::MAX,
        prebuf: u32::MAX,
        minreq: u32::MAX,
        fragsize: u32::MAX,
    };
    let rec_attr = BufferAttr {
        fragsize: bytes(n),
        ..unset
    };
    let rec = c.stream(
        "capture",
        spec,
        Direction::Record("@DEFAULT_MONITOR@"),
        rec_attr,
        flags,
        timeout,
    )?;
    let play_attr = BufferAttr {
        tlength: bytes(n),
        ..unset
    };
    let play = c.stream(
        "playback",
        spec,
        Direction::Playback(None),
        play_attr,
        flags,
        timeout,
    )?;
    let underruns = Box::new(AtomicU32::new(0));
    let counter: *const AtomicU32 = &*underruns;
    // SAFETY: the counter is boxed and dropped only after the stream is released.
    unsafe { c.on_underflow(&play, count_underflow, counter.cast_mut().cast()) };
    let mut r = Round::default();
    if let Some(g) = c.granted(&play) {
        r.granted_playback = [g.maxlength, g.tlength, g.prebuf, g.minreq];
    }
    r.granted_fragsize = c.granted(&rec).map_or(0, |g| g.fragsize);
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let end = start + WARMUP + Duration::from_secs_f64(seconds);
    let mut next_impulse = start + WARMUP;
    // The impulse in flight: its level, when it was written and the playback-side
    // report then. Levels differ from one impulse to the next, so one that comes back
    // after it was given up for lost is not taken for its successor.
    let mut in_flight: Option<(f32, Instant, f64)> = None;
    let mut chunk = Vec::new();
    let result = loop {
        let now = Instant::now();
        if now >= end && in_flight.is_none() || now >= end + LOST_AFTER {
            break Ok(());
        }
        if let Some((_, at, _)) = in_flight
            && now.duration_since(at) > LOST_AFTER
        {
            r.lost += 1;
            in_flight = None;
        }
        let writable = c.writable(&play) / FRAME * FRAME;
        if writable > 0 {
            chunk.clear();
            chunk.resize(writable, 0);
            if in_flight.is_none() && now >= next_impulse && now < end {
                let reported = c.latency_usec(&play).unwrap_or(f64::NAN) / 1e3;
                let level = impulse_level(r.impulses);
                for ch in 0..CHANNELS {
                    chunk[ch * 4..ch * 4 + 4].copy_from_slice(&level.to_le_bytes());
                }
                in_flight = Some((level, Instant::now(), reported));
                r.impulses += 1;
                next_impulse = now + Duration::from_millis(250 + rng.below(101));
            }
            if let Err(e) = c.write(&play, &chunk) {
                break Err(e);
            }
        }
        loop {
            let mut seen = None;
            let read = c.read(&rec, |data| {
                let Some(data) = data else { return };
                let frames = data.len() / FRAME;
                seen = (0..frames).find_map(|i| {
                    let b = &data[i * FRAME..i * FRAME + 4];
                    let x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    (x > 0.25).then_some((x, frames - i))
                });
            });
            match read {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return Err(e),
            }
            if let (Some((x, after)), Some((level, at, reported))) = (seen, in_flight)
                && (x - level).abs() < 0.01
            {
                let arrival = Instant::now() - Duration::from_secs_f64(after as f64 / RATE as f64);
                r.write_to_capture_ms
                    .push(arrival.saturating_duration_since(at).as_secs_f64() * 1e3);
                r.playback_reported_ms.push(reported);
                r.capture_reported_ms
                    .push(c.latency_usec(&rec).unwrap_or(f64::NAN) / 1e3);
                in_flight = None;
            }
        }
        if let Err(e) = c.iterate(Duration::from_millis(5)) {
            break Err(e);
        }
    };
    r.underruns = underruns.load(Relaxed);
    c.release(play);
    c.release(rec);
    drop(c);
    drop(underruns);
    result.map(|()| r)
}
