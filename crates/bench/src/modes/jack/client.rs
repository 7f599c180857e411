//! The `jack` mode's client: one JACK program, written against the C API loaded at run
//! time ([`crate::modes::jack::ffi`]), so the very same code runs on quaverd (quaver's libjack,
//! through `quaver-jack`), jackd2 (its own libjack) and PipeWire (pipewire-jack,
//! through `pw-jack`). It runs as a child process (`quaver-bench jack-client …`, hidden)
//! because the library is chosen by `LD_LIBRARY_PATH` when a process starts, as for any
//! JACK program.
//!
//! The child opens N JACK clients, each with one output port connected to the server's
//! first playback port, renders `voices` synth voices (the `synth` mode's [`Voice`]s) in
//! each process callback, and counts per client:
//!
//! - **xrun callbacks** (`jack_set_xrun_callback`): what the server reports;
//! - **frame jumps**: `jack_last_frame_time` advanced by more than one period since the
//!   previous callback — cycles the client was not run for;
//! - **overruns**: the callback ended more than one nominal period (`nframes / rate`)
//!   after its cycle started (`jack_get_cycle_times`'s `current_usecs`, on
//!   `jack_get_time`'s clock) — its output was not ready in time for any server. The
//!   nominal period, not `next_usecs`: jackd2's `next_usecs` is a filtered estimate that
//!   runs early of the real next cycle, which counted nearly every callback as late;
//! - **callbacks later than two periods** (`late2`): the callback started more than two
//!   periods after the previous one's start plus the frames between them
//!   (`jack_last_frame_time`), on CLOCK_MONOTONIC — the same on every server, since
//!   `jack_get_cycle_times` is off by more than a period on jackd2 at these periods. A
//!   stall and the cycles run back to back after it count once; so does a server that
//!   restarts its time line after a late wakeup (jackd2's timed driver does);
//! - wake (callback start − cycle start, µs, from the library's own clock) and busy
//!   (callback duration, ns) as log2 histograms and sums.
//!
//! Protocol on stdout, one line each: `jack-client open {json}` once every client runs,
//! `jack-client start` when the window begins (after the warm-up), `jack-client result
//! {json}` at its end. Errors go to stderr with a non-zero exit.
//!
//! [`Voice`]: crate::modes::synth::voice::Voice

use crate::modes::jack::ffi::{
    DEFAULT_AUDIO_TYPE, JACK_NO_START_SERVER, JackLib, LIBRARY, PORT_IS_INPUT, PORT_IS_OUTPUT,
    PORT_IS_PHYSICAL, cstr,
};
use crate::modes::synth::voice::{self as synth, Synth};
use crate::report::stats::{LOG2_BUCKETS, Log2Hist};
use crate::report::stats::{Since, since_by_field};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::cell::UnsafeCell;
use std::ffi::{CString, c_int, c_void};
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Prefix of every line the child prints for the parent.
pub const LINE_PREFIX: &str = "jack-client";

/// What the child runs.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// JACK clients to open in this process.
    pub clients: usize,
    /// Voices each client renders per cycle.
    pub voices: usize,
    /// Client names are `PREFIX-i`.
    pub prefix: String,
    /// Connect each output to the server's first playback port.
    pub connect: bool,
    /// Seconds before the window.
    pub warmup: f64,
    /// Window length, s.
    pub seconds: f64,
    /// Seed of the voices.
    pub seed: u64,
}

// ---------------------------------------------------------------- counting

/// Turns successive `jack_last_frame_time` values into skipped frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameTracker {
    prev: Option<u32>,
}

impl FrameTracker {
    /// Records the frame time of a cycle of `nframes`; returns the frames skipped
    /// since the previous cycle (0 when the clock advanced by exactly one period, or
    /// on the first cycle). Frame times are 32-bit and wrap.
    pub fn observe(&mut self, frame_time: u32, nframes: u32) -> u32 {
        let skipped = match self.prev {
            Some(p) => {
                let d = frame_time.wrapping_sub(p);
                // A backwards step (d ≥ 2^31) is a clock reset, not a skip.
                if d > nframes && d < 1 << 31 {
                    d - nframes
                } else {
                    0
                }
            }
            None => 0,
        };
        self.prev = Some(frame_time);
        skipped
    }
}

/// Times successive callback starts against the frames between them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GapTracker {
    prev: Option<(u64, u32)>,
}

impl GapTracker {
    /// Records a callback that started at `start_ns` (CLOCK_MONOTONIC) for the cycle at
    /// `frame_time`; returns how much later it started than the previous callback's
    /// start plus the frames in between at `rate` (0 on the first callback, or when it
    /// came early). A frame clock that did not advance, stepped back or jumped by more
    /// than a second (a reset) counts as one cycle of `nframes`.
    pub fn observe(&mut self, start_ns: u64, frame_time: u32, nframes: u32, rate: u32) -> u64 {
        let late = match self.prev {
            Some((p_ns, p_frame)) => {
                let d = frame_time.wrapping_sub(p_frame);
                let frames = if d == 0 || d > rate.max(1) {
                    nframes
                } else {
                    d
                };
                let expected = p_ns + frames as u64 * 1_000_000_000 / rate.max(1) as u64;
                start_ns.saturating_sub(expected)
            }
            None => 0,
        };
        self.prev = Some((start_ns, frame_time));
        late
    }
}

/// What a process callback publishes (lock-free, cumulative).
#[derive(Debug, Default)]
pub struct Counters {
    cycles: AtomicU64,
    frames: AtomicU64,
    xrun_callbacks: AtomicU64,
    jumps: AtomicU64,
    frames_skipped: AtomicU64,
    overruns: AtomicU64,
    late: AtomicU64,
    late2: AtomicU64,
    gap_max: AtomicU64,
    gap_hist: [AtomicU64; LOG2_BUCKETS],
    busy_ns: AtomicU64,
    wake_ns: AtomicU64,
    busy_max: AtomicU64,
    wake_max: AtomicU64,
    busy_hist: [AtomicU64; LOG2_BUCKETS],
    wake_hist: [AtomicU64; LOG2_BUCKETS],
    /// Scheduling policy of the process thread (-1 until the first callback).
    policy: AtomicI32,
    priority: AtomicI32,
    nframes: AtomicU64,
}

/// A copy of [`Counters`] (or a difference of two).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Callbacks.
    pub cycles: u64,
    /// Frames processed.
    pub frames: u64,
    /// xrun callbacks the library made.
    pub xrun_callbacks: u64,
    /// Callbacks whose frame time jumped by more than one period.
    pub jumps: u64,
    /// Frames skipped by those jumps.
    pub frames_skipped: u64,
    /// Callbacks that ended after the next cycle's start.
    pub overruns: u64,
    /// Callbacks that jumped or overran (each counted once).
    pub late: u64,
    /// Callbacks that started more than two periods later than the previous callback's
    /// start plus the frames between them ([`GapTracker`]).
    #[serde(default)]
    pub late2: u64,
    /// How much later than that each callback started, ns (0 for most).
    #[serde(default)]
    pub gap: Log2Hist,
    /// Sum of callback durations, ns.
    pub busy_ns: u64,
    /// Sum of wake delays (callback start − cycle start), ns.
    pub wake_ns: u64,
    /// Callback durations.
    pub busy: Log2Hist,
    /// Wake delays.
    pub wake: Log2Hist,
}

impl Counters {
    fn new() -> Counters {
        let c = Counters::default();
        c.policy.store(-1, Ordering::Relaxed);
        c
    }

    /// Copies the counters.
    pub fn snapshot(&self) -> CounterSnapshot {
        let h = |a: &[AtomicU64; LOG2_BUCKETS]| {
            Log2Hist::from_counts(
                &a.iter()
                    .map(|c| c.load(Ordering::Relaxed))
                    .collect::<Vec<_>>(),
            )
        };
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CounterSnapshot {
            cycles: l(&self.cycles),
            frames: l(&self.frames),
            xrun_callbacks: l(&self.xrun_callbacks),
            jumps: l(&self.jumps),
            frames_skipped: l(&self.frames_skipped),
            overruns: l(&self.overruns),
            late: l(&self.late),
            late2: l(&self.late2),
            gap: h(&self.gap_hist),
            busy_ns: l(&self.busy_ns),
            wake_ns: l(&self.wake_ns),
            busy: h(&self.busy_hist),
            wake: h(&self.wake_hist),
        }
    }

    /// Records one callback: `skipped` frames before it, whether it overran, its wake
    /// delay and duration. Real-time safe (atomics only).
    pub fn record(&self, nframes: u32, skipped: u32, overran: bool, wake_ns: u64, busy_ns: u64) {
        let r = Ordering::Relaxed;
        self.cycles.fetch_add(1, r);
        self.frames.fetch_add(nframes as u64, r);
        self.nframes.store(nframes as u64, r);
        if skipped > 0 {
            self.jumps.fetch_add(1, r);
            self.frames_skipped.fetch_add(skipped as u64, r);
        }
        if overran {
            self.overruns.fetch_add(1, r);
        }
        if overran || skipped > 0 {
            self.late.fetch_add(1, r);
        }
        self.busy_ns.fetch_add(busy_ns, r);
        self.wake_ns.fetch_add(wake_ns, r);
        self.busy_max.fetch_max(busy_ns, r);
        self.wake_max.fetch_max(wake_ns, r);
        self.busy_hist[Log2Hist::bucket(busy_ns)].fetch_add(1, r);
        self.wake_hist[Log2Hist::bucket(wake_ns)].fetch_add(1, r);
    }

    /// Records how much later than expected a callback started ([`GapTracker`]), and
    /// whether that is more than two periods of `nframes` at `rate`. Real-time safe.
    pub fn record_gap(&self, late_ns: u64, nframes: u32, rate: u32) {
        let r = Ordering::Relaxed;
        self.gap_hist[Log2Hist::bucket(late_ns)].fetch_add(1, r);
        self.gap_max.fetch_max(late_ns, r);
        if late_ns > 2 * nframes as u64 * 1_000_000_000 / rate.max(1) as u64 {
            self.late2.fetch_add(1, r);
        }
    }
}

since_by_field!(CounterSnapshot {
    cycles,
    frames,
    xrun_callbacks,
    jumps,
    frames_skipped,
    overruns,
    late,
    late2,
    busy_ns,
    wake_ns,
    busy,
    wake,
    gap
});

impl CounterSnapshot {
    /// The sum of several clients' counters.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a CounterSnapshot>) -> CounterSnapshot {
        let mut t = CounterSnapshot::default();
        for s in all {
            t.cycles += s.cycles;
            t.frames += s.frames;
            t.xrun_callbacks += s.xrun_callbacks;
            t.jumps += s.jumps;
            t.frames_skipped += s.frames_skipped;
            t.overruns += s.overruns;
            t.late += s.late;
            t.late2 += s.late2;
            t.busy_ns += s.busy_ns;
            t.wake_ns += s.wake_ns;
            for (h, o) in [
                (&mut t.busy, &s.busy),
                (&mut t.wake, &s.wake),
                (&mut t.gap, &s.gap),
            ] {
                if h.counts.len() < o.counts.len() {
                    h.counts.resize(o.counts.len(), 0);
                }
                for (a, b) in h.counts.iter_mut().zip(&o.counts) {
                    *a += b;
                }
            }
        }
        t
    }

    /// Mean callback duration, ns.
    pub fn mean_busy_ns(&self) -> f64 {
        self.busy_ns as f64 / self.cycles.max(1) as f64
    }

    /// Mean wake delay, ns.
    pub fn mean_wake_ns(&self) -> f64 {
        self.wake_ns as f64 / self.cycles.max(1) as f64
    }
}

// ---------------------------------------------------------------- the callback

struct State {
    lib: &'static JackLib,
    client: *mut c_void,
    port: *mut c_void,
    /// Touched by the process thread only.
    synth: UnsafeCell<Synth>,
    frames: UnsafeCell<FrameTracker>,
    gaps: UnsafeCell<GapTracker>,
    counters: Counters,
    /// The server's sample rate (for the nominal period), read once at setup.
    rate: u32,
}

unsafe extern "C" fn process(nframes: u32, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `State` registered with this callback; it outlives the
    // client (freed only after jack_client_close).
    let s = unsafe { &*(arg as *const State) };
    let t0 = synth::now_ns();
    // SAFETY: live client; out-pointers to locals.
    let now_us = unsafe { (s.lib.get_time)() };
    let (mut cf, mut cu, mut nu, mut pu) = (0u32, 0u64, 0u64, 0f32);
    // SAFETY: as above.
    let times_ok =
        unsafe { (s.lib.get_cycle_times)(s.client, &mut cf, &mut cu, &mut nu, &mut pu) } == 0;
    // SAFETY: live client.
    let lft = unsafe { (s.lib.last_frame_time)(s.client) };
    // SAFETY: the process thread is the only user of these cells.
    let skipped = unsafe { &mut *s.frames.get() }.observe(lft, nframes);
    // SAFETY: as above.
    let gap = unsafe { &mut *s.gaps.get() }.observe(t0, lft, nframes, s.rate);
    s.counters.record_gap(gap, nframes, s.rate);
    // SAFETY: live port; JACK hands out a buffer of `nframes` floats for this cycle.
    let buf = unsafe { (s.lib.port_get_buffer)(s.port, nframes) } as *mut f32;
    if !buf.is_null() {
        // SAFETY: see above.
        let out = unsafe { std::slice::from_raw_parts_mut(buf, nframes as usize) };
        out.fill(0.0);
        // SAFETY: process thread only.
        unsafe { &mut *s.synth.get() }.render(out);
    }
    if s.counters.policy.load(Ordering::Relaxed) < 0 {
        let mut policy = 0;
        // SAFETY: plain data out-parameter.
        let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
        // SAFETY: the calling thread; valid out-pointers. Once per client.
        unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
        s.counters
            .priority
            .store(param.sched_priority, Ordering::Relaxed);
        s.counters.policy.store(policy, Ordering::Relaxed);
    }
    let t1 = synth::now_ns();
    // SAFETY: no arguments.
    let end_us = unsafe { (s.lib.get_time)() };
    let period_us = nframes as u64 * 1_000_000 / s.rate.max(1) as u64;
    let overran = times_ok && cu > 0 && end_us > cu + period_us;
    let wake_ns = if times_ok {
        now_us.saturating_sub(cu) * 1000
    } else {
        0
    };
    s.counters
        .record(nframes, skipped, overran, wake_ns, t1.saturating_sub(t0));
    0
}

unsafe extern "C" fn xrun(arg: *mut c_void) -> c_int {
    // SAFETY: as in `process`.
    let s = unsafe { &*(arg as *const State) };
    s.counters.xrun_callbacks.fetch_add(1, Ordering::Relaxed);
    0
}

// ---------------------------------------------------------------- the run

/// One client's figures over the window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientFigures {
    /// Name the server gave it.
    pub name: String,
    /// Port its output was connected to (None: not connected).
    pub connected_to: Option<String>,
    /// Scheduling of its process thread, e.g. "SCHED_FIFO 19".
    pub sched: String,
    /// `jack_cpu_load` at the end (the server's DSP load estimate, %).
    pub cpu_load: f32,
    /// Counters over the window.
    pub window: CounterSnapshot,
}

/// What `jack-client open` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenInfo {
    /// The library file the dynamic linker loaded.
    pub library: String,
    /// `jack_get_version_string()`.
    pub version: String,
    /// Sample rate.
    pub rate: u32,
    /// Buffer size (period) at open.
    pub buffer_size: u32,
    /// Whether `jack_is_realtime` says the server runs real-time.
    pub server_realtime: bool,
}

/// What `jack-client result` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientRun {
    /// Library, version, rate.
    pub open: OpenInfo,
    /// Frames per cycle at the end of the window.
    pub nframes: u32,
    /// Window length, s (measured).
    pub seconds: f64,
    /// Voices per client.
    pub voices: usize,
    /// Per client.
    pub clients: Vec<ClientFigures>,
}

fn policy_name(policy: i32, prio: i32) -> String {
    // PipeWire's threads carry SCHED_RESET_ON_FORK (0x40000000) in the policy.
    let policy = if policy < 0 {
        policy
    } else {
        policy & !0x4000_0000
    };
    match policy {
        libc::SCHED_FIFO => format!("SCHED_FIFO {prio}"),
        libc::SCHED_RR => format!("SCHED_RR {prio}"),
        libc::SCHED_OTHER => "SCHED_OTHER".into(),
        -1 => "never ran".into(),
        p => format!("policy {p} prio {prio}"),
    }
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{LINE_PREFIX} {line}");
    let _ = o.flush();
}

/// The first input port to connect to: a physical one if the server has any, else the
/// first audio input that is not one of ours.
fn playback_port(lib: &JackLib, client: *mut c_void, prefix: &str) -> Option<String> {
    let list = |flags| -> Vec<String> {
        // SAFETY: live client; NULL pattern; static type string.
        let p = unsafe {
            (lib.get_ports)(client, std::ptr::null(), DEFAULT_AUDIO_TYPE.as_ptr(), flags)
        };
        let mut v = Vec::new();
        if p.is_null() {
            return v;
        }
        let mut i = 0;
        loop {
            // SAFETY: a NULL-terminated array from jack_get_ports.
            let s = unsafe { *p.add(i) };
            if s.is_null() {
                break;
            }
            // SAFETY: NUL-terminated port name.
            v.extend(unsafe { cstr(s) });
            i += 1;
        }
        // SAFETY: the array came from jack_get_ports.
        unsafe { (lib.free)(p.cast()) };
        v
    };
    list(PORT_IS_INPUT | PORT_IS_PHYSICAL)
        .into_iter()
        .next()
        .or_else(|| {
            list(PORT_IS_INPUT)
                .into_iter()
                .find(|n| !n.starts_with(&format!("{prefix}-")))
        })
}

/// Connects every client's port to the server's first playback port; per client, the
/// port it is connected to.
fn connect(
    lib: &JackLib,
    states: &[(Box<State>, Arc<synth::Shared>)],
    prefix: &str,
) -> Result<Vec<Option<String>>> {
    let mut connected = vec![None; states.len()];
    if let Some((first, _)) = states.first()
        && let Some(target) = playback_port(lib, first.client, prefix)
    {
        let dst = CString::new(target.clone())?;
        for (i, (s, _)) in states.iter().enumerate() {
            // SAFETY: live client and port.
            let src = unsafe { cstr((lib.port_name)(s.port)) }.unwrap_or_default();
            let csrc = CString::new(src)?;
            // SAFETY: live client, NUL-terminated names.
            let r = unsafe { (lib.connect)(s.client, csrc.as_ptr(), dst.as_ptr()) };
            if r == 0 || r == libc::EEXIST {
                connected[i] = Some(target.clone());
            }
        }
    }
    Ok(connected)
}

/// The child's main: opens the clients, runs the window, prints the result.
pub fn main(o: &ClientOptions) -> Result<()> {
    let lib: &'static JackLib = Box::leak(Box::new(
        JackLib::open(LIBRARY).map_err(|e| anyhow::anyhow!(e))?,
    ));
    let mut states: Vec<(Box<State>, Arc<synth::Shared>)> = Vec::new();
    let mut open = None;
    for i in 0..o.clients {
        let name = CString::new(format!("{}-{i}", o.prefix))?;
        let mut status = 0;
        // SAFETY: NUL-terminated name, valid status out-pointer; no variadic arguments
        // (JackServerName is not set).
        let client = unsafe { (lib.client_open)(name.as_ptr(), JACK_NO_START_SERVER, &mut status) };
        if client.is_null() {
            bail!(
                "jack_client_open({}) failed (status 0x{status:x}) with {}",
                name.to_string_lossy(),
                lib.path
            );
        }
        let port_name = c"out";
        // SAFETY: live client, NUL-terminated strings.
        let port = unsafe {
            (lib.port_register)(
                client,
                port_name.as_ptr(),
                DEFAULT_AUDIO_TYPE.as_ptr(),
                PORT_IS_OUTPUT,
                0,
            )
        };
        if port.is_null() {
            bail!("jack_port_register failed for {}", name.to_string_lossy());
        }
        // SAFETY: live client.
        let rate = unsafe { (lib.get_sample_rate)(client) };
        let shared = Arc::new(synth::Shared::default());
        shared.voices.store(o.voices, Ordering::Relaxed);
        let s = Box::new(State {
            lib,
            client,
            port,
            synth: UnsafeCell::new(Synth::new(
                o.voices.max(1),
                rate.max(1),
                o.seed.wrapping_add(i as u64),
                shared.clone(),
            )),
            frames: UnsafeCell::new(FrameTracker::default()),
            gaps: UnsafeCell::new(GapTracker::default()),
            rate: rate.max(1),
            counters: Counters::new(),
        });
        let arg = &*s as *const State as *mut c_void;
        // SAFETY: live client; `arg` outlives it (kept in `states` until after close).
        unsafe {
            if (lib.set_process_callback)(client, Some(process), arg) != 0 {
                bail!("jack_set_process_callback failed");
            }
            if (lib.set_xrun_callback)(client, Some(xrun), arg) != 0 {
                bail!("jack_set_xrun_callback failed");
            }
            if (lib.activate)(client) != 0 {
                bail!("jack_activate failed for {}", name.to_string_lossy());
            }
        }
        if open.is_none() {
            open = Some(OpenInfo {
                library: lib.path.clone(),
                version: lib.version(),
                rate,
                // SAFETY: live client.
                buffer_size: unsafe { (lib.get_buffer_size)(client) },
                // SAFETY: live client.
                server_realtime: unsafe { (lib.is_realtime)(client) } != 0,
            });
        }
        states.push((s, shared));
    }
    let connected = if o.connect {
        connect(lib, &states, &o.prefix)?
    } else {
        vec![None; states.len()]
    };
    // Every client must be running before the window starts.
    let t0 = Instant::now();
    while states
        .iter()
        .any(|(s, _)| s.counters.cycles.load(Ordering::Relaxed) < 4)
    {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("not every JACK client's process callback ran within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    say(&format!(
        "open {}",
        serde_json::to_string(open.as_ref().expect("at least one client"))?
    ));
    std::thread::sleep(Duration::from_secs_f64(o.warmup.max(0.0)));
    let before: Vec<CounterSnapshot> = states.iter().map(|(s, _)| s.counters.snapshot()).collect();
    let w0 = Instant::now();
    say("start");
    std::thread::sleep(Duration::from_secs_f64(o.seconds.max(0.0)));
    let after: Vec<CounterSnapshot> = states.iter().map(|(s, _)| s.counters.snapshot()).collect();
    let seconds = w0.elapsed().as_secs_f64();
    let mut clients = Vec::new();
    for (i, (s, _)) in states.iter().enumerate() {
        clients.push(ClientFigures {
            // SAFETY: live client.
            name: unsafe { cstr((lib.get_client_name)(s.client)) }.unwrap_or_default(),
            connected_to: connected[i].clone(),
            sched: policy_name(
                s.counters.policy.load(Ordering::Relaxed),
                s.counters.priority.load(Ordering::Relaxed),
            ),
            // SAFETY: live client.
            cpu_load: unsafe { (lib.cpu_load)(s.client) },
            window: after[i].since(&before[i]),
        });
    }
    let nframes = states.first().map_or(0, |(s, _)| {
        s.counters.nframes.load(Ordering::Relaxed) as u32
    });
    let run = ClientRun {
        open: open.expect("at least one client"),
        nframes,
        seconds,
        voices: o.voices,
        clients,
    };
    say(&format!("result {}", serde_json::to_string(&run)?));
    // Hold the clients until the bench has taken its closing snapshot of the server
    // (it then closes our stdin; EOF at once when stdin is not a pipe).
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    for (s, _) in &states {
        // SAFETY: live clients; closed once, then their states are dropped.
        unsafe {
            (lib.deactivate)(s.client);
            (lib.client_close)(s.client);
        }
    }
    drop(states);
    Ok(())
}

/// A line the child printed, parsed.
#[derive(Debug, Clone)]
pub enum ChildLine {
    /// Every client runs.
    Open(OpenInfo),
    /// The window starts.
    Start,
    /// The window's figures.
    Result(Box<ClientRun>),
    /// Anything else (a library's own chatter on stdout).
    Other(String),
}

/// Parses one line of the child's stdout.
pub fn parse_line(line: &str) -> ChildLine {
    let Some(rest) = line
        .strip_prefix(LINE_PREFIX)
        .and_then(|r| r.strip_prefix(' '))
    else {
        return ChildLine::Other(line.to_string());
    };
    if rest == "start" {
        return ChildLine::Start;
    }
    if let Some(j) = rest.strip_prefix("open ")
        && let Ok(v) = serde_json::from_str(j)
    {
        return ChildLine::Open(v);
    }
    if let Some(j) = rest.strip_prefix("result ")
        && let Ok(v) = serde_json::from_str(j)
    {
        return ChildLine::Result(Box::new(v));
    }
    ChildLine::Other(line.to_string())
}

// ---------------------------------------------------------------- calibration

/// Mean render time of one voice for one cycle of `period` frames, ns: renders
/// `voices` voices for `cycles` cycles on the calling thread (SCHED_FIFO `prio` when
/// permitted) and takes the median cycle, so a preempted cycle does not count.
pub fn calibrate(
    period: usize,
    rate: u32,
    voices: usize,
    cycles: usize,
    seed: u64,
    prio: i32,
) -> f64 {
    std::thread::scope(|sc| {
        sc.spawn(|| {
            crate::tools::rt::set_fifo(prio);
            let shared = Arc::new(synth::Shared::default());
            shared.voices.store(voices, Ordering::Relaxed);
            let mut s = Synth::new(voices.max(1), rate, seed, shared);
            let mut out = vec![0f32; period];
            let mut times = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                out.fill(0.0);
                let t0 = synth::now_ns();
                s.render(&mut out);
                times.push(synth::now_ns() - t0);
                std::hint::black_box(&out);
            }
            times.sort_unstable();
            times[times.len() / 2] as f64 / voices.max(1) as f64
        })
        .join()
        .unwrap_or(f64::NAN)
    })
}

/// Voices whose render takes `share` of a `period`-frame cycle at `ns_per_voice`.
pub fn voices_for(share: f64, period: usize, rate: u32, ns_per_voice: f64) -> usize {
    let period_ns = period as f64 * 1e9 / rate as f64;
    if ns_per_voice.is_nan() || ns_per_voice <= 0.0 {
        return 1;
    }
    ((share * period_ns / ns_per_voice).round() as usize).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_jumps_count_skipped_frames() {
        let mut t = FrameTracker::default();
        assert_eq!(t.observe(1000, 64), 0, "first cycle");
        assert_eq!(t.observe(1064, 64), 0);
        assert_eq!(t.observe(1192, 64), 64, "one cycle missed");
        assert_eq!(t.observe(1256, 64), 0);
        // Wrapping at 2^32.
        let mut t = FrameTracker::default();
        t.observe(u32::MAX - 31, 64);
        assert_eq!(t.observe(32, 64), 0);
        assert_eq!(t.observe(32 + 64 * 4, 64), 192);
        // The same frame time twice (a library that does not advance) or a step back
        // is not a skip.
        assert_eq!(t.observe(32 + 64 * 4, 64), 0);
        assert_eq!(t.observe(10, 64), 0);
    }

    #[test]
    fn gaps_are_measured_against_the_frames_between_callbacks() {
        let mut g = GapTracker::default();
        let p = 1_333_333; // 64 frames at 48 kHz
        assert_eq!(g.observe(1_000_000, 0, 64, 48_000), 0, "first");
        assert_eq!(g.observe(1_000_000 + p + 500, 64, 64, 48_000), 500);
        // A skipped cycle: the frames say two periods, so on time.
        let t = 1_000_000 + 3 * p + 500;
        assert_eq!(g.observe(t, 192, 64, 48_000), 0);
        // Three periods late.
        let c = Counters::new();
        let late = g.observe(t + 4 * p, 256, 64, 48_000);
        assert!((3 * p - 2..=3 * p + 2).contains(&late), "{late}");
        c.record_gap(late, 64, 48_000);
        // Back to back after the stall (catching up): early, not late.
        assert_eq!(g.observe(t + 4 * p + 20_000, 320, 64, 48_000), 0);
        c.record_gap(0, 64, 48_000);
        // A frame clock reset (jump back) counts as one period.
        assert_eq!(g.observe(t + 5 * p + 20_000, 7, 64, 48_000), 0);
        c.record_gap(2 * p, 64, 48_000);
        let s = c.snapshot();
        assert_eq!(s.late2, 1, "only the stall is more than two periods late");
        assert_eq!(s.gap.total(), 3);
    }

    #[test]
    fn counters_count_each_late_callback_once() {
        let c = Counters::new();
        let s0 = c.snapshot();
        c.record(64, 0, false, 20_000, 5_000);
        c.record(64, 64, true, 1_500_000, 900_000);
        c.record(64, 0, true, 30_000, 1_400_000);
        c.record(64, 128, false, 10_000, 4_000);
        let d = c.snapshot().since(&s0);
        assert_eq!(d.cycles, 4);
        assert_eq!(d.frames, 256);
        assert_eq!((d.jumps, d.frames_skipped), (2, 192));
        assert_eq!(d.overruns, 2);
        assert_eq!(d.late, 3);
        assert_eq!(d.busy.total(), 4);
        assert_eq!(d.wake_ns, 1_560_000);
        let sum = CounterSnapshot::sum([&d, &d]);
        assert_eq!((sum.cycles, sum.late, sum.busy.total()), (8, 6, 8));
        assert_eq!(sum.mean_busy_ns(), d.mean_busy_ns());
    }

    #[test]
    fn child_lines_parse() {
        assert!(matches!(parse_line("jack-client start"), ChildLine::Start));
        let open = OpenInfo {
            library: "/x/libjack.so.0".into(),
            version: "1.9.21".into(),
            rate: 48_000,
            buffer_size: 64,
            server_realtime: true,
        };
        let l = format!("jack-client open {}", serde_json::to_string(&open).unwrap());
        match parse_line(&l) {
            ChildLine::Open(o) => assert_eq!(o.buffer_size, 64),
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            parse_line("Cannot connect to server socket"),
            ChildLine::Other(_)
        ));
        assert!(matches!(
            parse_line("jack-client result {broken"),
            ChildLine::Other(_)
        ));
    }

    #[test]
    fn voice_count_for_a_budget() {
        // 64 frames at 48 kHz = 1.333 ms; half of it at 1 µs per voice = 667 voices.
        assert_eq!(voices_for(0.5, 64, 48_000, 1000.0), 667);
        assert_eq!(voices_for(0.5, 64, 48_000, f64::NAN), 1);
        let ns = calibrate(64, 48_000, 8, 50, 1, 0);
        assert!(ns > 0.0 && ns.is_finite());
    }
}
