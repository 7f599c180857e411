//! `peers` monitor latency: what `paplay --latency-msec=N` gets from a server, measured
//! through the sink's monitor and compared with what the server says.
//!
//! Two PulseAudio-protocol connections to the server under test (the minimal client of
//! [`crate::tools::paclient`], so every packet is timestamped by the thread that writes or
//! reads it):
//!
//! - **playback**: float32le 48 kHz stereo (the sink's rate: no resampler delay), the
//!   buffer metrics `paplay --latency-msec=N` asks for (`tlength` = N ms, `maxlength`,
//!   `prebuf` and `minreq` left to the server, `ADJUST_LATENCY`). It writes exactly what
//!   the server requests, silence with a one-sample full-scale impulse every 250–350 ms
//!   (seeded). Just before writing a chunk that holds an impulse it asks
//!   `GET_PLAYBACK_LATENCY` and computes what `pa_stream_get_latency` would return
//!   (read index, transport, sink latency, interpolated to the write): the *reported*
//!   latency. It counts the server's `UNDERFLOW` events.
//! - **record**: the default sink's monitor source, float32le 48 kHz stereo, `fragsize`
//!   = [`MonitorOptions::fragsize_ms`] (the same for every server), no flags. Every
//!   100 ms it asks `GET_RECORD_LATENCY`, from which libpulse's record-stream latency
//!   follows (queued in the server + transport + source latency − the monitored sink's
//!   latency).
//!
//! Per impulse, on CLOCK_MONOTONIC: *write time* = when the chunk was handed to the
//! socket + the impulse's offset in the chunk / rate; *arrival* = when the chunk with
//! the impulse was read − (frames after the impulse in the chunk) / rate. The
//! **measured** latency is `arrival − write − record latency`: the time from writing
//! the sample to the monitor's account of when the sink played it, which is what
//! `pa_stream_get_latency` claims to predict. The raw `arrival − write` is kept too.

use crate::report::stats::Summary;
use crate::tools::cyclictest::Probe;
use crate::tools::paclient::{Conn, Packet, Timing};
use crate::tools::rng::Rng;
use crate::tools::servers::Server;
use anyhow::{Context, Result, bail};
use pulseaudio::protocol::stream::{BufferAttr, StreamFlags};
use pulseaudio::protocol::{
    self, ChannelMap, Command, LatencyParams, PlaybackStreamParams, Prop, Props,
    RecordStreamParams, SampleFormat, SampleSpec,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Stream rate (the null sinks' rate).
pub const RATE: u32 = 48_000;
/// Bytes per frame: float32 stereo.
const FRAME: usize = 8;
/// Before the first impulse: the stream has started and settled.
const WARMUP: Duration = Duration::from_millis(500);
/// After the last impulse: time for it to come back.
const DRAIN: Duration = Duration::from_millis(600);
/// An impulse not captured within this is lost.
const LOST_AFTER: Duration = Duration::from_secs(1);
/// Captured samples above this are an impulse (the rest of the signal is silence).
const THRESHOLD: f32 = 0.1;
/// Longest the playback side waits without a request before giving up (PulseAudio's
/// idle null sink may hold a new stream back for up to 2 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);
/// Most a server may take, beyond the point's own length, to consume it.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the record side asks for its timing.
const RECORD_TIMING_EVERY: Duration = Duration::from_millis(100);

/// Settings of the measurement.
#[derive(Debug, Clone)]
pub struct MonitorOptions {
    /// The playback stream's `--latency-msec` values.
    pub latencies_ms: Vec<u32>,
    /// Seconds of impulses per point.
    pub seconds: f64,
    /// Rounds a point is measured in, each of `seconds / rounds` (the caller alternates
    /// servers between rounds, so a noisy minute falls on all of them alike).
    pub rounds: usize,
    /// The record stream's fragsize, ms.
    pub fragsize_ms: f64,
    /// Write each impulse this many ms later in the stream than the bookkeeping says
    /// (checks the instrument: the measured latency must grow by it, the reported not).
    pub inject_delay_ms: u32,
}

impl MonitorOptions {
    /// Defaults: 5, 10, 20 and 50 ms, 10 s each in 5 rounds (quick: 1.5 s, 1 round).
    pub fn new(quick: bool) -> MonitorOptions {
        MonitorOptions {
            latencies_ms: vec![5, 10, 20, 50],
            seconds: if quick { 1.5 } else { 10.0 },
            rounds: if quick { 1 } else { 5 },
            fragsize_ms: 2.0,
            inject_delay_ms: 0,
        }
    }
}

/// One (server, N) point.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MonitorPoint {
    /// The playback stream's requested latency (`tlength`), ms.
    pub latency_ms: u32,
    /// Buffer metrics the server granted the playback stream: maxlength, tlength,
    /// prebuf, minreq, bytes.
    pub granted: [u32; 4],
    /// From creating the playback stream to the server's first request after the
    /// initial fill (when it started consuming), ms.
    pub start_ms: Option<f64>,
    /// The record stream's granted fragsize, bytes.
    pub fragsize: u32,
    /// Impulses written.
    pub impulses: usize,
    /// Impulses that never came back.
    pub lost: usize,
    /// Measured latency (write → played, by the monitor's account), ms.
    pub measured_ms: Option<Summary>,
    /// Write → arrival at the record client, ms (no record-side correction).
    pub arrival_ms: Option<Summary>,
    /// Reported latency (`pa_stream_get_latency` at each impulse write), ms.
    pub reported_ms: Option<Summary>,
    /// The record stream's reported latency (median over the point), ms.
    pub record_latency_ms: Option<f64>,
    /// The playback sink latency in the timing replies (median), ms.
    pub sink_latency_ms: Option<f64>,
    /// Median measured − median reported, ms.
    pub difference_ms: Option<f64>,
    /// `UNDERFLOW` events for the playback stream.
    pub underruns: usize,
    /// `OVERFLOW` events for the record stream.
    pub overflows: usize,
    /// CPU time the hypervisor gave to others while the point ran (`/proc/stat`'s
    /// steal, all CPUs, 10 ms resolution), ms: a VM's stalls that no server can
    /// answer through, next to the underruns they cause. `None` where not reported.
    #[serde(default)]
    pub steal_ms: Option<f64>,
    /// What a bystander real-time thread saw while the point ran. `None` where not
    /// reported.
    #[serde(default)]
    pub bystander: Option<Bystander>,
    /// Why the point failed, if it did.
    pub error: Option<String>,
}

/// Threads of the bench, one pinned to each CPU, that do nothing but sleep to a
/// deadline every [`BYSTANDER_INTERVAL`] at SCHED_FIFO [`BYSTANDER_PRIORITY`] (the class
/// and priority quaverd's pulse I/O thread takes for low-latency streams) while a point
/// runs: how often this machine lets such a thread run later than a stream's client
/// has to answer a request, on any CPU (a stalled vCPU is only seen by a thread on it).
/// A server whose request round trip needs a thread to run within that budget cannot
/// avoid an underrun when even these threads could not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Bystander {
    /// Wakeups.
    pub wakeups: u64,
    /// Wakeups later than the point's answer budget (granted tlength − minreq).
    pub late: u64,
    /// The answer budget they were compared with, ms.
    pub budget_ms: f64,
    /// The latest wakeup, ms after its deadline.
    pub max_ms: f64,
    /// Whether every thread got SCHED_FIFO (false: some ran as normal threads).
    pub realtime: bool,
    /// Threads, one per CPU (0 in reports from before they were pinned: one unpinned).
    #[serde(default)]
    pub cpus: usize,
    /// Underruns of the point with a bystander wakeup at least [`STALL`] late, on any
    /// CPU, in the [`STALL_WINDOW`] before the client got the UNDERFLOW: the machine
    /// stalled just before them.
    #[serde(default)]
    pub stalled_underruns: u64,
}

/// Each CPU's probes of several rounds as one probe per CPU.
fn merge_probes(rounds: impl IntoIterator<Item = Vec<Probe>>) -> Vec<Probe> {
    let mut out: Vec<Probe> = Vec::new();
    for probes in rounds {
        for (i, p) in probes.into_iter().enumerate() {
            if let Some(m) = out.get_mut(i) {
                m.late.extend(p.late);
                m.stalls.extend(p.stalls);
                m.realtime &= p.realtime;
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// A bystander wakeup at least this late is a stall (normal wakeups here take tens of
/// µs).
pub const STALL: Duration = Duration::from_millis(1);
/// How far before an UNDERFLOW reached the client a stall counts as its cause: more
/// than the largest queue at the points it matters for (5 and 10 ms) plus the time the
/// notice takes to arrive.
pub const STALL_WINDOW: Duration = Duration::from_millis(20);

/// How often the bystander wakes.
pub const BYSTANDER_INTERVAL: Duration = Duration::from_millis(1);
/// The bystander's SCHED_FIFO priority.
pub const BYSTANDER_PRIORITY: i32 = 1;

impl Bystander {
    /// Summarises what each thread saw against a `budget_ms`, and which of the
    /// underruns (when the client got them, CLOCK_MONOTONIC ns) followed a stall.
    pub fn of(threads: &[Probe], budget_ms: f64, underrun_ns: &[u64]) -> Bystander {
        let budget_ns = (budget_ms * 1e6) as u64;
        let all = || threads.iter().flat_map(|t| t.late.iter().copied());
        let window = STALL_WINDOW.as_nanos() as u64;
        let stalled = underrun_ns
            .iter()
            .filter(|&&u| {
                threads
                    .iter()
                    .flat_map(|t| &t.stalls)
                    .any(|&(deadline, late)| {
                        deadline <= u && deadline + late >= u.saturating_sub(window)
                    })
            })
            .count() as u64;
        Bystander {
            wakeups: all().count() as u64,
            late: all().filter(|&l| l > budget_ns).count() as u64,
            budget_ms,
            max_ms: all().max().unwrap_or(0) as f64 / 1e6,
            realtime: !threads.is_empty() && threads.iter().all(|t| t.realtime),
            cpus: threads.len(),
            stalled_underruns: stalled,
        }
    }
}

/// The time a client has to answer a request, ms: granted tlength − minreq (bytes of
/// [`FRAME`] at [`RATE`]); `None` when the server granted no sizes.
fn answer_budget_ms(granted: &[u32; 4]) -> Option<f64> {
    let (t, m) = (granted[1], granted[3]);
    (t != 0 && t != u32::MAX && m != u32::MAX && t > m)
        .then(|| (t - m) as f64 * 1000.0 / (RATE as f64 * FRAME as f64))
}

struct Capture {
    /// When the impulse's sample arrived (corrected for its place in its chunk).
    at: Instant,
    /// The impulse's number modulo [`IDS`], from its right channel.
    id: u32,
}

/// Impulses carry their number modulo this in the right channel (`(id + 1) / 32`), so a
/// capture pairs with its own impulse even when another impulse is lost (PulseAudio
/// drops data written behind the read index after an underrun). With 250 ms spacing the
/// numbers repeat after 7.5 s, far beyond [`LOST_AFTER`].
const IDS: u32 = 30;

fn id_level(id: u32) -> f32 {
    (id % IDS + 1) as f32 / 32.0
}

#[derive(Default)]
struct RecordShared {
    captures: Vec<Capture>,
    latencies_usec: Vec<f64>,
    overflows: usize,
    fragsize: u32,
}

fn spec() -> SampleSpec {
    SampleSpec {
        format: SampleFormat::Float32Le,
        channels: 2,
        sample_rate: RATE,
    }
}

fn props(name: &str) -> Result<Props> {
    let mut p = Props::new();
    p.set(Prop::MediaName, CString::new(name)?);
    Ok(p)
}

fn bytes_per_s() -> f64 {
    (RATE as usize * FRAME) as f64
}

/// One round of a point: what the playback and record sides saw, and the machine
/// meanwhile.
pub struct Round {
    played: Played,
    rec: RecordShared,
    steal_ms: Option<f64>,
    probes: Vec<Probe>,
}

/// One round of a point against `server`: `paplay --latency-msec=n` with
/// `o.seconds / o.rounds` of impulses, captured through the monitor.
pub fn measure_round(server: &Server, n: u32, o: &MonitorOptions, rng: &mut Rng) -> Result<Round> {
    let socket = server.pulse_socket();
    let cookie = server.cookie();
    let shared = Arc::new(Mutex::new(RecordShared::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
    let rec = {
        let (socket, cookie) = (socket.clone(), cookie.clone());
        let (shared, stop) = (shared.clone(), stop.clone());
        let frag = ((o.fragsize_ms * RATE as f64 / 1000.0).round() as usize).max(1) * FRAME;
        std::thread::spawn(move || {
            let r = record(
                &socket,
                cookie.as_deref(),
                frag as u32,
                &shared,
                &stop,
                &ready_tx,
            );
            if let Err(e) = &r {
                let _ = ready_tx.send(Err(anyhow::anyhow!("{e:#}")));
            }
            r
        })
    };
    let started = ready_rx
        .recv_timeout(Duration::from_secs(10))
        .context("the record stream did not start within 10 s")
        .and_then(|r| r);
    let steal0 = crate::tools::procfs::steal_ms();
    let bystander_stop = Arc::new(AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bystanders: Vec<_> = (0..cpus)
        .map(|cpu| {
            let stop = bystander_stop.clone();
            std::thread::spawn(move || {
                if !crate::tools::rt::pin_to_cpu(cpu) {
                    return Probe::default();
                }
                crate::tools::cyclictest::probe_until(
                    &stop,
                    BYSTANDER_INTERVAL,
                    BYSTANDER_PRIORITY,
                    STALL.as_nanos() as u64,
                )
            })
        })
        .collect();
    let seconds = o.seconds / o.rounds.max(1) as f64;
    let played = match started {
        Ok(()) => play(
            &socket,
            cookie.as_deref(),
            n,
            seconds,
            o.inject_delay_ms,
            rng,
        ),
        Err(e) => Err(e),
    };
    let steal_ms = steal0
        .zip(crate::tools::procfs::steal_ms())
        .map(|(a, b)| (b - a).max(0.0));
    bystander_stop.store(true, Ordering::Relaxed);
    let probes = bystanders
        .into_iter()
        .map(|b| b.join())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| anyhow::anyhow!("bystander thread panicked"))?;
    stop.store(true, Ordering::Relaxed);
    let rec_result = rec
        .join()
        .map_err(|_| anyhow::anyhow!("record thread panicked"))?;
    let played = played?;
    rec_result?;
    let rec = std::mem::take(&mut *shared.lock().expect("record state"));
    Ok(Round {
        played,
        rec,
        steal_ms,
        probes,
    })
}

/// The point at `n` from its rounds (at least one).
pub fn point(n: u32, rounds: Vec<Round>) -> MonitorPoint {
    let steal_ms = rounds.iter().map(|r| r.steal_ms).sum::<Option<f64>>();
    let underrun_ns: Vec<u64> = rounds
        .iter()
        .flat_map(|r| r.played.underrun_ns.iter().copied())
        .collect();
    let granted = rounds.first().map_or([0; 4], |r| r.played.granted);
    let mut sides = Vec::with_capacity(rounds.len());
    let mut probes = Vec::with_capacity(rounds.len());
    for r in rounds {
        sides.push((r.played, r.rec));
        probes.push(r.probes);
    }
    let bystander =
        answer_budget_ms(&granted).map(|b| Bystander::of(&merge_probes(probes), b, &underrun_ns));
    MonitorPoint {
        steal_ms,
        bystander,
        ..evaluate(n, &sides)
    }
}

/// What the playback side saw.
struct Played {
    granted: [u32; 4],
    start_ms: Option<f64>,
    /// Per impulse: declared write time and the reported latency, µs.
    impulses: Vec<(Instant, f64)>,
    sink_usec: Vec<f64>,
    /// When each UNDERFLOW reached the client, CLOCK_MONOTONIC ns.
    underrun_ns: Vec<u64>,
}

/// Pairs each impulse of a round with its capture: (arrival ms, reported ms) of those
/// that came back, and how many did not.
fn pair(p: &Played, r: &RecordShared) -> (Vec<(f64, f64)>, usize) {
    let mut found_pairs = Vec::new();
    let mut lost = 0;
    let mut next = 0;
    for (i, &(w, rep)) in p.impulses.iter().enumerate() {
        // The first capture after the write that carries this impulse's number;
        // captures before the write (spurious, or of earlier impulses) are skipped.
        while next < r.captures.len() && r.captures[next].at < w {
            next += 1;
        }
        let id = i as u32 % IDS;
        let found = r.captures[next.min(r.captures.len())..]
            .iter()
            .take_while(|c| c.at.duration_since(w) < LOST_AFTER)
            .position(|c| c.id == id);
        match found {
            Some(k) => {
                let c = &r.captures[next + k];
                found_pairs.push((c.at.duration_since(w).as_secs_f64() * 1e3, rep / 1e3));
                next += k + 1;
            }
            None => lost += 1,
        }
    }
    (found_pairs, lost)
}

/// The point at `n` from each round's playback and record sides; each round's arrivals
/// are corrected by its own record stream's latency.
fn evaluate(n: u32, rounds: &[(Played, RecordShared)]) -> MonitorPoint {
    let mut arrival = Vec::new();
    let mut reported = Vec::new();
    let mut measured = Vec::new();
    let mut lost = 0;
    for (p, r) in rounds {
        let (pairs, l) = pair(p, r);
        lost += l;
        let rec_lat = Summary::of(&r.latencies_usec).map(|s| s.p50);
        for (a, rep) in pairs {
            arrival.push(a);
            reported.push(rep);
            if let Some(l) = rec_lat {
                measured.push(a - l / 1e3);
            }
        }
    }
    let all = |f: fn(&(Played, RecordShared)) -> &[f64]| -> Vec<f64> {
        rounds.iter().flat_map(|x| f(x).iter().copied()).collect()
    };
    let rec_lat = Summary::of(&all(|x| &x.1.latencies_usec)).map(|s| s.p50);
    let starts: Vec<f64> = rounds.iter().filter_map(|x| x.0.start_ms).collect();
    let m = Summary::of(&measured);
    let rep = Summary::of(&reported);
    MonitorPoint {
        latency_ms: n,
        granted: rounds.first().map_or([0; 4], |x| x.0.granted),
        start_ms: Summary::of(&starts).map(|s| s.p50),
        fragsize: rounds.first().map_or(0, |x| x.1.fragsize),
        impulses: rounds.iter().map(|x| x.0.impulses.len()).sum(),
        lost,
        measured_ms: m,
        arrival_ms: Summary::of(&arrival),
        reported_ms: rep,
        record_latency_ms: rec_lat.map(|l| l / 1e3),
        sink_latency_ms: Summary::of(&all(|x| &x.0.sink_usec)).map(|s| s.p50 / 1e3),
        difference_ms: match (m, rep) {
            (Some(m), Some(r)) => Some(m.p50 - r.p50),
            _ => None,
        },
        underruns: rounds.iter().map(|x| x.0.underrun_ns.len()).sum(),
        overflows: rounds.iter().map(|x| x.1.overflows).sum(),
        steal_ms: None,
        bystander: None,
        error: None,
    }
}

/// Opens the playback stream `paplay --latency-msec=N` would (tlength bytes,
/// ADJUST_LATENCY) and waits for the server's reply.
fn create_playback(
    c: &mut Conn,
    n: u32,
    tlength: u32,
) -> Result<protocol::CreatePlaybackStreamReply> {
    let seq = c.send(&Command::CreatePlaybackStream(PlaybackStreamParams {
        sample_spec: spec(),
        channel_map: ChannelMap::stereo(),
        sink_index: None,
        sink_name: None,
        buffer_attr: BufferAttr {
            max_length: u32::MAX,
            target_length: tlength,
            pre_buffering: u32::MAX,
            minimum_request_length: u32::MAX,
            fragment_size: u32::MAX,
        },
        sync_id: 0,
        cvolume: None,
        props: props(&format!("paplay --latency-msec={n}"))?,
        formats: Vec::new(),
        flags: StreamFlags {
            adjust_latency: true,
            ..StreamFlags::default()
        },
    }))?;
    c.wait_reply(seq, &mut |_| {})
}

fn record(
    socket: &std::path::Path,
    cookie: Option<&std::path::Path>,
    fragsize: u32,
    shared: &Mutex<RecordShared>,
    stop: &AtomicBool,
    ready: &std::sync::mpsc::Sender<Result<()>>,
) -> Result<()> {
    let mut c = Conn::connect(socket, cookie, "quaver-bench monitor")?;
    let seq = c.send(&Command::GetSinkInfo(protocol::GetSinkInfo {
        index: None,
        name: Some(protocol::DEFAULT_SINK.to_owned()),
    }))?;
    let sink: protocol::SinkInfo = c.wait_reply(seq, &mut |_| {})?;
    let Some(monitor) = sink.monitor_source_name else {
        bail!("the default sink {:?} has no monitor source", sink.name);
    };
    let seq = c.send(&Command::CreateRecordStream(RecordStreamParams {
        sample_spec: spec(),
        channel_map: ChannelMap::stereo(),
        source_index: None,
        source_name: Some(monitor),
        buffer_attr: BufferAttr {
            max_length: u32::MAX,
            target_length: u32::MAX,
            pre_buffering: u32::MAX,
            minimum_request_length: u32::MAX,
            fragment_size: fragsize,
        },
        flags: StreamFlags::default(),
        props: props("monitor")?,
        ..RecordStreamParams::default()
    }))?;
    let reply: protocol::CreateRecordStreamReply = c.wait_reply(seq, &mut |_| {})?;
    let channel = reply.channel;
    shared.lock().expect("record state").fragsize = reply.buffer_attr.fragment_size;
    let _ = ready.send(Ok(()));
    let mut last_hit: Option<u64> = None;
    let mut frames_seen: u64 = 0;
    let mut partial: Vec<u8> = Vec::new();
    let mut pending_timing: Option<u32> = None;
    let mut last_timing = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if pending_timing.is_none() && last_timing.elapsed() >= RECORD_TIMING_EVERY {
            pending_timing = Some(c.send(&Command::GetRecordLatency(LatencyParams {
                channel,
                now: SystemTime::now(),
            }))?);
            last_timing = Instant::now();
        }
        let Some(p) = c.recv(Duration::from_millis(50))? else {
            continue;
        };
        match p {
            Packet::Data { channel: ch, bytes } if ch == channel => {
                let at = Instant::now();
                partial.extend_from_slice(&bytes);
                let whole = partial.len() / FRAME * FRAME;
                let frames = whole / FRAME;
                let mut sh = shared.lock().expect("record state");
                for i in 0..frames {
                    let b = &partial[i * FRAME..i * FRAME + FRAME];
                    let l = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let r = f32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                    let idx = frames_seen + i as u64;
                    if l.abs() > THRESHOLD {
                        // One impulse may come back as a few samples (a resampler or
                        // filter); only the first counts.
                        if last_hit.is_none_or(|h| idx > h + 2400) {
                            let behind = (frames - i) as f64 / RATE as f64;
                            sh.captures.push(Capture {
                                at: at - Duration::from_secs_f64(behind),
                                id: ((r * 32.0).round().max(1.0) as u32 - 1) % IDS,
                            });
                        }
                        last_hit = Some(idx);
                    }
                }
                frames_seen += frames as u64;
                partial.drain(..whole);
            }
            Packet::Command { seq, cmd, payload } => match *cmd {
                Command::Reply if Some(seq) == pending_timing => {
                    let r: protocol::RecordLatency = c.parse_reply(&payload)?;
                    let t = Timing::record(&r, SystemTime::now());
                    if t.playing {
                        shared
                            .lock()
                            .expect("record state")
                            .latencies_usec
                            .push(t.record_latency_usec(bytes_per_s()));
                    }
                    pending_timing = None;
                }
                Command::Error(e) if Some(seq) == pending_timing => {
                    bail!("GET_RECORD_LATENCY refused: {e:?}");
                }
                Command::Overflow(ch) if ch == channel => {
                    shared.lock().expect("record state").overflows += 1;
                }
                _ => {}
            },
            _ => {}
        }
    }
    Ok(())
}

fn play(
    socket: &std::path::Path,
    cookie: Option<&std::path::Path>,
    n: u32,
    seconds: f64,
    inject_delay_ms: u32,
    rng: &mut Rng,
) -> Result<Played> {
    let mut c = Conn::connect(socket, cookie, "quaver-bench paplay")?;
    let tlength = (n as usize * RATE as usize / 1000 * FRAME) as u32;
    let reply = create_playback(&mut c, n, tlength)?;
    let channel = reply.channel;
    let b = reply.buffer_attr;
    let granted = [
        b.max_length,
        b.target_length,
        b.pre_buffering,
        b.minimum_request_length,
    ];
    let mut requested = reply.requested_bytes as usize;
    let mut underruns: Vec<u64> = Vec::new();
    let inject = (inject_delay_ms as u64 * RATE as u64) / 1000;
    let spacing = |rng: &mut Rng| (RATE as u64 / 4) + rng.below(RATE as u64 / 10);
    // Impulse positions in stream frames: where the bookkeeping says (declared) and
    // where the sample really is (declared + inject).
    let mut next_declared =
        WARMUP.as_millis() as u64 * RATE as u64 / 1000 + rng.below(RATE as u64 / 10);
    let mut actual: VecDeque<(u64, u32)> = VecDeque::new();
    let mut count: u32 = 0;
    let mut written: u64 = 0; // frames
    let mut impulses = Vec::new();
    let mut sink_usec = Vec::new();
    // The point runs on stream time, not wall time: impulses from WARMUP to WARMUP +
    // seconds of written audio, then DRAIN more, so a server that starts playing late
    // (PulseAudio's null sink finishes the block it rendered while idle first) gets as
    // many impulses as the others. Wall time is only a bound.
    let t0 = Instant::now();
    let frames_of = |d: Duration| (d.as_secs_f64() * RATE as f64) as u64;
    let impulses_until = frames_of(WARMUP + Duration::from_secs_f64(seconds));
    let end_frames = impulses_until + frames_of(DRAIN);
    let deadline = t0 + Duration::from_secs_f64(seconds) + WARMUP + DRAIN + START_TIMEOUT;
    let initial = requested / FRAME * FRAME;
    let mut started: Option<Duration> = None;
    let mut last_request = Instant::now();
    let mut chunk: Vec<u8> = Vec::new();
    let on_packet = |p: Packet, requested: &mut usize, underruns: &mut Vec<u64>| {
        if let Packet::Command { cmd, .. } = p {
            match *cmd {
                Command::Request(r) if r.channel == channel => *requested += r.length as usize,
                Command::Underflow(u) if u.channel == channel => {
                    underruns.push(crate::tools::clock::monotonic_ns())
                }
                _ => {}
            }
        }
    };
    while written < end_frames {
        if Instant::now() > deadline {
            bail!(
                "the server consumed {:.2} s of audio in {:.2} s",
                written as f64 / RATE as f64,
                t0.elapsed().as_secs_f64()
            );
        }
        if requested >= FRAME {
            if started.is_none() && written * FRAME as u64 >= initial as u64 && written > 0 {
                started = Some(t0.elapsed());
            }
            let frames = requested / FRAME;
            let (start, stop) = (written, written + frames as u64);
            // Impulses declared in this chunk (only while impulses are due).
            let mut declared = Vec::new();
            while next_declared < stop && next_declared < impulses_until {
                if next_declared >= start {
                    declared.push(next_declared);
                    actual.push_back((next_declared + inject, count));
                    count += 1;
                }
                next_declared += spacing(rng);
            }
            chunk.clear();
            chunk.resize(frames * FRAME, 0);
            while let Some(&(a, id)) = actual.front() {
                if a >= stop {
                    break;
                }
                actual.pop_front();
                if a >= start {
                    let i = (a - start) as usize * FRAME;
                    chunk[i..i + 4].copy_from_slice(&1.0f32.to_le_bytes());
                    chunk[i + 4..i + 8].copy_from_slice(&id_level(id).to_le_bytes());
                }
            }
            let mut timing = None;
            if !declared.is_empty() {
                let seq = c.send(&Command::GetPlaybackLatency(LatencyParams {
                    channel,
                    now: SystemTime::now(),
                }))?;
                let mut more = 0;
                let mut under = Vec::new();
                let r: protocol::PlaybackLatency =
                    c.wait_reply(seq, &mut |p| on_packet(p, &mut more, &mut under))?;
                let t = Timing::playback(&r, SystemTime::now());
                timing = Some((t, Instant::now()));
                requested += more;
                underruns.append(&mut under);
                sink_usec.push(t.sink_usec as f64);
            }
            let at = Instant::now();
            c.write_data(channel, &chunk)?;
            if let Some((t, got)) = timing {
                let lat = t.playback_latency_usec(
                    (written as usize * FRAME) as i64,
                    bytes_per_s(),
                    at.duration_since(got),
                );
                for d in declared {
                    let offset = Duration::from_secs_f64((d - start) as f64 / RATE as f64);
                    impulses.push((at + offset, lat));
                }
            }
            written = stop;
            requested -= frames * FRAME;
            last_request = Instant::now();
            continue;
        }
        if last_request.elapsed() > REQUEST_TIMEOUT {
            bail!("no data request from the server for {REQUEST_TIMEOUT:?}");
        }
        if let Some(p) = c.recv(Duration::from_millis(100))? {
            on_packet(p, &mut requested, &mut underruns);
        }
    }
    let _ = c.send(&Command::DeletePlaybackStream(channel));
    Ok(Played {
        granted,
        start_ms: started.map(|d| d.as_secs_f64() * 1e3),
        impulses,
        sink_usec,
        underrun_ns: underruns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_budget_is_tlength_minus_minreq() {
        // paplay --latency-msec=5 as quaverd grants it: 3.75 ms queue, 1.25 ms minreq.
        let b = answer_budget_ms(&[4_194_304, 1440, 1208, 480]).unwrap();
        assert!((b - 2.5).abs() < 1e-9, "{b}");
        // No sizes granted (a failed point), or nonsense ones: no budget.
        assert_eq!(answer_budget_ms(&[0; 4]), None);
        assert_eq!(answer_budget_ms(&[0, 480, 0, 1440]), None);
        assert_eq!(answer_budget_ms(&[0, u32::MAX, 0, 480]), None);
    }

    #[test]
    fn the_bystander_counts_wakeups_beyond_the_budget() {
        let ms = |m: u64| m * 1_000_000;
        let cpu0 = Probe {
            late: vec![20_000, 2_400_000, 2_600_000],
            // A 2.6 ms stall due at 100 ms.
            stalls: vec![(ms(100), 2_600_000)],
            realtime: true,
        };
        let cpu1 = Probe {
            late: vec![8_000_000, 0],
            // An 8 ms stall due at 500 ms.
            stalls: vec![(ms(500), ms(8))],
            realtime: true,
        };
        // Underruns at 110 ms (10 ms after the first stall began), 300 ms (no stall
        // in the 20 ms before), 525 ms (the second stall ended 17 ms before) and 530 ms
        // (22 ms after it ended).
        let underruns = [ms(110), ms(300), ms(525), ms(530)];
        let b = Bystander::of(&[cpu0.clone(), cpu1], 2.5, &underruns);
        assert_eq!((b.wakeups, b.late, b.realtime, b.cpus), (5, 2, true, 2));
        assert!((b.max_ms - 8.0).abs() < 1e-9 && (b.budget_ms - 2.5).abs() < 1e-9);
        assert_eq!(b.stalled_underruns, 2);
        // An underrun before the stall it would be matched with is not its effect.
        assert_eq!(
            Bystander::of(std::slice::from_ref(&cpu0), 2.5, &[ms(99)]).stalled_underruns,
            0
        );
        // One thread without SCHED_FIFO makes the whole count suspect.
        assert!(!Bystander::of(&[cpu0, Probe::default()], 2.5, &[]).realtime);
        assert_eq!(Bystander::of(&[], 2.5, &[]).late, 0);
    }

    #[test]
    fn the_bystander_stops_when_told() {
        let stop = AtomicBool::new(false);
        let p = std::thread::scope(|s| {
            let h = s.spawn(|| {
                crate::tools::cyclictest::probe_until(&stop, Duration::from_millis(1), 0, u64::MAX)
            });
            std::thread::sleep(Duration::from_millis(30));
            stop.store(true, Ordering::Relaxed);
            h.join().unwrap()
        });
        // Returning at all is the point (a loop that ignored `stop` would hang here).
        assert!(!p.late.is_empty() && p.stalls.is_empty());
    }

    #[test]
    fn impulses_pair_with_the_first_capture_after_their_write() {
        let t = Instant::now();
        let ms = |m: u64| t + Duration::from_millis(m);
        let played = Played {
            granted: [0; 4],
            start_ms: Some(1.0),
            // Written at 100, 400 and 700 ms, reported 20 ms each.
            impulses: vec![
                (ms(100), 20_000.0),
                (ms(400), 20_000.0),
                (ms(700), 20_000.0),
            ],
            sink_usec: vec![5_000.0],
            underrun_ns: vec![1, 2],
        };
        let rec = RecordShared {
            // A stray capture before the first write, then 15 and 17 ms after the
            // first two writes; the third never comes back.
            captures: vec![
                Capture { at: ms(50), id: 7 },
                Capture { at: ms(115), id: 0 },
                Capture { at: ms(417), id: 1 },
            ],
            latencies_usec: vec![-4_000.0, -5_000.0, -6_000.0],
            overflows: 0,
            fragsize: 768,
        };
        let p = evaluate(20, &[(played, rec)]);
        assert_eq!((p.impulses, p.lost, p.underruns), (3, 1, 2));
        let a = p.arrival_ms.unwrap();
        assert!(
            (a.min - 15.0).abs() < 1e-6 && (a.max - 17.0).abs() < 1e-6,
            "{a:?}"
        );
        // Measured = arrival − record latency (median −5 ms).
        let m = p.measured_ms.unwrap();
        assert!(
            (m.min - 20.0).abs() < 1e-6 && (m.max - 22.0).abs() < 1e-6,
            "{m:?}"
        );
        assert!((p.record_latency_ms.unwrap() + 5.0).abs() < 1e-9);
        assert!((p.difference_ms.unwrap() - (m.p50 - 20.0)).abs() < 1e-9);
    }

    #[test]
    fn a_lost_impulse_does_not_shift_the_pairing() {
        let t = Instant::now();
        let ms = |m: u64| t + Duration::from_millis(m);
        let played = Played {
            granted: [0; 4],
            start_ms: None,
            impulses: (0..4).map(|i| (ms(100 + 300 * i), 10_000.0)).collect(),
            sink_usec: Vec::new(),
            underrun_ns: vec![1],
        };
        // Impulse 1 never comes back; 0, 2 and 3 do, 12 ms after their writes.
        let rec = RecordShared {
            captures: [0u64, 2, 3]
                .iter()
                .map(|&i| Capture {
                    at: ms(112 + 300 * i),
                    id: i as u32,
                })
                .collect(),
            latencies_usec: vec![0.0],
            overflows: 0,
            fragsize: 768,
        };
        let p = evaluate(20, &[(played, rec)]);
        assert_eq!(p.lost, 1);
        let a = p.arrival_ms.unwrap();
        assert_eq!(a.n, 3);
        assert!((a.max - 12.0).abs() < 1e-6, "{a:?}");
    }

    #[test]
    fn rounds_add_up_and_each_is_corrected_by_its_own_record_latency() {
        let t = Instant::now();
        let ms = |m: u64| t + Duration::from_millis(m);
        let round = |at: u64, rec_lat_ms: f64, underruns: Vec<u64>| {
            let played = Played {
                granted: [0, 1440, 0, 480],
                start_ms: Some(at as f64 / 100.0),
                impulses: vec![(ms(at), 3_000.0)],
                sink_usec: vec![700.0],
                underrun_ns: underruns,
            };
            let rec = RecordShared {
                captures: vec![Capture {
                    at: ms(at + 10),
                    id: 0,
                }],
                latencies_usec: vec![rec_lat_ms * 1e3],
                overflows: 1,
                fragsize: 768,
            };
            (played, rec)
        };
        // Both impulses arrive 10 ms after their writes; the first round's record
        // stream reports −2 ms, the second's −6 ms.
        let p = evaluate(
            20,
            &[round(100, -2.0, vec![1]), round(5_000, -6.0, vec![2, 3])],
        );
        assert_eq!((p.impulses, p.lost, p.underruns, p.overflows), (2, 0, 3, 2));
        let m = p.measured_ms.unwrap();
        assert!(
            (m.min - 12.0).abs() < 1e-6 && (m.max - 16.0).abs() < 1e-6,
            "{m:?}"
        );
        // The rounds' median start (nearest rank: the lower of two).
        assert_eq!(p.start_ms, Some(1.0));
        assert_eq!(p.granted, [0, 1440, 0, 480]);
    }

    #[test]
    fn probes_of_rounds_merge_per_cpu() {
        let probe = |late: u64, realtime: bool| Probe {
            late: vec![late],
            stalls: vec![(late, late)],
            realtime,
        };
        let merged = merge_probes([
            vec![probe(1, true), probe(2, true)],
            vec![probe(3, true), probe(4, false)],
        ]);
        assert_eq!(merged.len(), 2, "one per CPU");
        assert_eq!(
            (merged[0].late.clone(), merged[0].realtime),
            (vec![1, 3], true)
        );
        assert_eq!((merged[1].stalls.len(), merged[1].realtime), (2, false));
    }

    #[test]
    fn impulse_numbers_survive_16_bit_quantisation() {
        for id in 0..IDS {
            let q = (id_level(id) * 32767.0).round() / 32768.0;
            assert_eq!(((q * 32.0).round() as u32 - 1) % IDS, id);
        }
    }
}
