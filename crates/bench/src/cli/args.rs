//! The command line's grammar: the modes and their arguments (clap).

use crate::modes::drift::DriftCase;
use crate::modes::jack::JackServer;
use crate::modes::latency::LatencyPath;
use crate::modes::load::Variant;
use crate::modes::peers::PeerLatency;
use crate::modes::stress::StressDevice;
use crate::modes::synth::Mark;
use crate::tools::stressor::StressorKind;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// quaver's measuring instruments: latency, CPU cost, wakeups and glitches under
/// stress, each run against a private quaverd and written up as JSON + Markdown + SVG.
#[derive(Parser, Debug)]
#[command(name = "quaver-bench", version, about)]
pub struct Cli {
    /// What to measure.
    #[command(subcommand)]
    pub mode: Mode,
}

/// Options every mode takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Folder for the reports (created if missing).
    #[arg(long, default_value = "bench-results", global = true)]
    pub out: PathBuf,
    /// Seed of every random choice (default: from the clock; recorded either way).
    #[arg(long, global = true)]
    pub seed: Option<u64>,
    /// A short run (seconds instead of minutes): for smoke tests, not for figures.
    #[arg(long, global = true)]
    pub quick: bool,
    /// The quaverd to measure (default: next to quaver-bench, else on PATH).
    #[arg(long, global = true)]
    pub quaverd: Option<PathBuf>,
    /// quaverd's --realtime-priority (0: normal scheduling; default: quaverd's own).
    #[arg(long, global = true)]
    pub realtime_priority: Option<i32>,
    /// No progress bar even on a terminal.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

/// The modes.
#[derive(Subcommand, Debug)]
pub enum Mode {
    /// Round-trip latency through the sim card's loopback and a sink monitor, measured
    /// with impulses, against the theoretical chain.
    Latency {
        /// Quanta to measure at (each stream requests 2 × quantum).
        #[arg(long, value_delimiter = ',', default_values_t = [32usize, 64, 128, 256, 512, 1024, 2048])]
        quanta: Vec<usize>,
        /// Paths to measure.
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["sim", "monitor"])]
        paths: Vec<LatencyPath>,
        /// The sim card's watermark, frames.
        #[arg(long, default_value_t = 256)]
        period: usize,
        /// Impulses per point (default 200; 12 with --quick).
        #[arg(long)]
        impulses: Option<usize>,
        /// Hold the client's output back by this many frames (checks the instrument:
        /// the delay must appear in the measurement).
        #[arg(long, default_value_t = 0)]
        inject_delay: usize,
        /// Sample rate.
        #[arg(long, default_value_t = 48_000)]
        rate: u32,
        /// Let quaverd suspend its idle devices first, so the streams wake a suspended
        /// device instead of joining one that has run since the daemon started.
        #[arg(long)]
        after_idle: bool,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// CPU, wakeups, xruns and memory of quaverd for N playback streams.
    Load {
        /// Number of streams (default 8; 4 with --quick).
        #[arg(long)]
        streams: Option<usize>,
        /// Measure N = 1, 2, 4, … up to --max-streams instead.
        #[arg(long)]
        sweep: bool,
        /// Largest N of the sweep.
        #[arg(long, default_value_t = 256)]
        max_streams: usize,
        /// Latency each stream requests, ms.
        #[arg(long, default_value_t = 20.0)]
        latency_ms: f64,
        /// Measurement window per point, s (default 5; 1 with --quick).
        #[arg(long)]
        duration: Option<f64>,
        /// Variants (streams at the device rate, and at 44.1 kHz resampled to 48 kHz).
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["native", "resampled"])]
        variants: Vec<Variant>,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// RT thread wakeup lateness, cycle time and xruns under CPU, disk and memory
    /// stress, next to cyclictest's figure for the same load.
    Stress {
        /// Quantum, frames.
        #[arg(long, default_value_t = 64)]
        quantum: usize,
        /// Seconds per measurement (default 20; 1.5 with --quick).
        #[arg(long)]
        duration: Option<f64>,
        /// Load generator.
        #[arg(long, value_enum, default_value_t = StressorKind::Auto)]
        stressor: StressorKind,
        /// Device quaverd drives.
        #[arg(long, value_enum, default_value_t = StressDevice::Null)]
        device: StressDevice,
        /// Sim watermark, frames (default: one quantum).
        #[arg(long)]
        period: Option<usize>,
        /// Skip the idle baseline (always skipped with --quick).
        #[arg(long)]
        no_baseline: bool,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// SynthMark-like voice, latency, jitter and switch marks: N voices rendered in a
    /// low-latency callback client.
    Synth {
        /// Marks to run.
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["voice", "latency", "jitter", "switch"])]
        marks: Vec<Mark>,
        /// Quantum of the voice, jitter and switch marks, frames.
        #[arg(long, default_value_t = 128)]
        quantum: usize,
        /// Voice mark budget: mean render time as a percentage of the cycle.
        #[arg(long, default_value_t = 50.0)]
        budget: f64,
        /// Most voices (default 4096; 512 with --quick).
        #[arg(long)]
        max_voices: Option<usize>,
        /// Voices of the latency and jitter marks (default: half the voice mark, else 32).
        #[arg(long)]
        voices: Option<usize>,
        /// Quanta the latency mark tries.
        #[arg(long, value_delimiter = ',', default_values_t = [16usize, 32, 64, 128, 256, 512, 1024])]
        quanta: Vec<usize>,
        /// Jitter mark, and each switch run's load phase, seconds (default 10 and 20; 1
        /// and 3 with --quick).
        #[arg(long)]
        duration: Option<f64>,
        /// Switch mark: toggle period, ms (default 500; 200 with --quick).
        #[arg(long)]
        switch_period_ms: Option<u64>,
        /// Switch mark: low voice count.
        #[arg(long, default_value_t = 4)]
        switch_low: usize,
        /// Switch mark: high voice count (default: 1.5 × the voice mark, else 256).
        #[arg(long)]
        switch_high: Option<usize>,
        /// Switch mark: the sim card's period, its fixed (and smallest) safety margin, frames.
        #[arg(long, default_value_t = 256)]
        sim_period: usize,
        /// Switch mark: margin_max of the adaptive run, frames (default 1024; 544 with --quick).
        #[arg(long)]
        margin_max: Option<usize>,
        /// Switch mark: a processing spike every this many ms (default 3000; 1000 with
        /// --quick; 0: none).
        #[arg(long)]
        spike_every_ms: Option<u64>,
        /// Switch mark: length of each spike (the sim card stalls), ms (default 15; 10
        /// with --quick).
        #[arg(long)]
        spike_ms: Option<f64>,
        /// Sample rate.
        #[arg(long, default_value_t = 48_000)]
        rate: u32,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// quaverd next to PulseAudio and PipeWire (JACK2 when supported): idle cost; CPU,
    /// wakeups, memory and reported latency for N identical paplay clients; and the
    /// latency measured through the sink's monitor vs the reported one.
    Peers {
        /// Stream counts (default 1,8,32; 1,4 with --quick).
        #[arg(long, value_delimiter = ',')]
        streams: Option<Vec<usize>>,
        /// Repetitions of the load part; tables show medians (default 3; 1 with --quick).
        #[arg(long)]
        repeats: Option<usize>,
        /// The load clients' latencies: `default` (no --latency-msec) or ms.
        #[arg(long, value_delimiter = ',', default_values = ["default", "20"])]
        latencies: Vec<PeerLatency>,
        /// Skip the load part (idle and N paplay clients).
        #[arg(long)]
        no_load: bool,
        /// Monitor latency: the playback stream's --latency-msec values.
        #[arg(long, value_delimiter = ',', default_values_t = [5u32, 10, 20, 50])]
        monitor_latencies: Vec<u32>,
        /// Skip the monitor-latency part.
        #[arg(long)]
        no_monitor_latency: bool,
        /// Capture path (one libpulse client, a playback and a monitor record stream):
        /// the requested latencies, ms (default 5,10,20,50; 5,10 with --quick).
        #[arg(long, value_delimiter = ',')]
        capture_latencies: Option<Vec<u32>>,
        /// Skip the capture-path part.
        #[arg(long)]
        no_capture_path: bool,
        /// Capture path: seconds of impulses per round (default 4; 1.5 with --quick).
        #[arg(long)]
        capture_seconds: Option<f64>,
        /// Capture path: rounds per point, alternating between the servers (default 3;
        /// 1 with --quick).
        #[arg(long)]
        capture_rounds: Option<usize>,
        /// Monitor latency: seconds of impulses per point (default 10; 1.5 with --quick).
        #[arg(long)]
        monitor_seconds: Option<f64>,
        /// Monitor latency: rounds each point is split into, alternating between the
        /// servers (default 5; 1 with --quick).
        #[arg(long)]
        monitor_rounds: Option<usize>,
        /// Monitor latency: the record stream's fragsize, ms.
        #[arg(long, default_value_t = 2.0)]
        monitor_fragsize_ms: f64,
        /// Monitor latency: write each impulse this many ms later than the bookkeeping
        /// says (checks the instrument: the measured latency must grow by it).
        #[arg(long, default_value_t = 0)]
        inject_delay_ms: u32,
        /// Also count the underruns of N `paplay -v --latency-msec=L` clients per server
        /// while CPU hogs oversubscribe every core (off by default: minutes of load).
        #[arg(long)]
        under_load: bool,
        /// Under load: stream counts (default 1,8; 1 with --quick).
        #[arg(long, value_delimiter = ',')]
        under_load_streams: Option<Vec<usize>>,
        /// Under load: the clients' --latency-msec.
        #[arg(long, default_value_t = 20)]
        under_load_latency_ms: u32,
        /// Under load: seconds per window (default 20; 2 with --quick).
        #[arg(long)]
        under_load_seconds: Option<f64>,
        /// Under load: rounds, the servers alternating within each (default 3; 1 with
        /// --quick).
        #[arg(long)]
        under_load_rounds: Option<usize>,
        /// Under load: CPU hogs per core.
        #[arg(long, default_value_t = 3)]
        under_load_hogs_per_core: usize,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// One JACK client (libjack loaded at run time) on quaverd, jackd2 and PipeWire:
    /// xruns with a voice load under stress-ng next to cyclictest, and per-client
    /// overhead for 1, 8 and 32 clients next to pw-top's figures.
    Jack {
        /// Periods of the xrun part, frames.
        #[arg(long, value_delimiter = ',', default_values_t = [64usize, 32])]
        periods: Vec<usize>,
        /// Servers, in order.
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["quaverd", "jackd2", "pipewire"])]
        servers: Vec<JackServer>,
        /// Window of the xrun part per server and period, s (default 60; 3 with --quick).
        #[arg(long)]
        duration: Option<f64>,
        /// Windows per server and period in the xrun part, the servers alternating
        /// (q, j, p, q, j, p, …); the verdict is on their totals (default 3; 1 with
        /// --quick).
        #[arg(long)]
        repeats: Option<usize>,
        /// Voice load of the xrun part, % of a core (calibrated before each period).
        #[arg(long, default_value_t = 50.0)]
        load: f64,
        /// Voices of the xrun part instead of calibrating.
        #[arg(long)]
        voices: Option<usize>,
        /// Load generator (`stress-ng --cpu 2`, or the built-in one without it).
        #[arg(long, value_enum, default_value_t = StressorKind::Auto)]
        stressor: StressorKind,
        /// Client counts of the overhead part (default 1,8,32; 1,4 with --quick).
        #[arg(long, value_delimiter = ',')]
        clients: Option<Vec<usize>>,
        /// Window of each overhead point, s (default 10; 2 with --quick).
        #[arg(long)]
        overhead_duration: Option<f64>,
        /// Period of the overhead part, frames.
        #[arg(long, default_value_t = 64)]
        overhead_period: usize,
        /// Voices per client in the overhead part.
        #[arg(long, default_value_t = 4)]
        overhead_voices: usize,
        /// Skip the xrun part.
        #[arg(long)]
        no_xruns: bool,
        /// Skip the overhead part.
        #[arg(long)]
        no_overhead: bool,
        /// jackd's -P (default: quaverd's real-time priority).
        #[arg(long)]
        jackd_priority: Option<i32>,
        /// quaverd's `callback.spin_us` (0..=500): how long its RT thread may poll the
        /// client's completion before blocking (default: quaverd's own, 0).
        #[arg(long)]
        callback_spin_us: Option<u32>,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// Big buffers: one paplay asking for 2 s on a sim card with a 2 s ring — quaverd's
    /// wakeups next to PulseAudio's — and how soon an event sound started meanwhile plays.
    Bigbuf {
        /// The paplay client's latencies: `default` (no --latency-msec) or ms.
        #[arg(long, value_delimiter = ',', default_values = ["2000", "default"])]
        latencies: Vec<PeerLatency>,
        /// Measurement window per point, s (default 30; 3 with --quick).
        #[arg(long)]
        window: Option<f64>,
        /// From starting paplay to the window, s (default 5; 3 with --quick).
        #[arg(long)]
        settle: Option<f64>,
        /// Repetitions, servers alternating (default 3; 1 with --quick).
        #[arg(long)]
        repeat: Option<usize>,
        /// Event sounds per event run (default 20; 3 with --quick).
        #[arg(long)]
        events: Option<usize>,
        /// Skip the wakeups part.
        #[arg(long)]
        no_wakeups: bool,
        /// Skip the event-latency part.
        #[arg(long)]
        no_events: bool,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// Several cards at once, each on its own crystal: sim cards ± ppm apart, a pacat
    /// into each, the followers' rate matching (lock, ratio error, level, xruns).
    Drift {
        /// Cases: opposite (+X/−X), reverse (−X/+X), against-exact (0 vs +X, −X and a
        /// +X → −X step halfway).
        #[arg(long, value_enum, value_delimiter = ',', default_values = ["opposite", "reverse", "against-exact"])]
        cases: Vec<DriftCase>,
        /// Every crystal's error, ppm.
        #[arg(long, default_value_t = 200.0)]
        ppm: f64,
        /// Seconds each case plays (default 600; 5 with --quick).
        #[arg(long)]
        duration: Option<f64>,
        /// Between two status readings, ms (default 100; 50 with --quick).
        #[arg(long)]
        poll_ms: Option<f64>,
        /// The latency each pacat asks for, ms.
        #[arg(long, default_value_t = 40)]
        latency_ms: u32,
        /// Run the cases one after another (default: at once, each its own quaverd).
        #[arg(long)]
        sequential: bool,
        /// The sim cards' watermark, frames: room for the RT thread's wakeup lateness
        /// on a busy machine (the glitch band is ± half of it).
        #[arg(long, default_value_t = crate::modes::drift::PERIOD_FRAMES)]
        period: usize,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// Echo cancellation on a recorded scene: far-end speech through a simulated room
    /// plus near-end speech, quaverd's module-echo-cancel beside PulseAudio's (webrtc):
    /// ERLE, the near end kept, CPU.
    Echo {
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// A 64k-tap convolver on 2 channels: quaverd's `[[filters]]` convolver beside
    /// PipeWire's filter-chain convolver on the same impulse response, alternating
    /// runs with and without it: the servers' CPU.
    Convolver {
        /// Runs of each server with and without the convolver.
        #[arg(long, default_value_t = 3)]
        repeats: usize,
        /// Seconds of each measured window.
        #[arg(long, default_value_t = 15.0)]
        window: f64,
        /// quaverd's convolver partition, frames (a power of two).
        #[arg(long, default_value_t = 1024)]
        partition: usize,
        /// Options every mode takes.
        #[command(flatten)]
        common: Common,
    },
    /// The JACK client of `jack` (started by it through a libjack wrapper; not for
    /// direct use).
    #[command(hide = true)]
    JackClient {
        /// JACK clients to open.
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// Voices per client.
        #[arg(long, default_value_t = 4)]
        voices: usize,
        /// Client name prefix.
        #[arg(long, default_value = "qb")]
        prefix: String,
        /// Do not connect the outputs.
        #[arg(long)]
        no_connect: bool,
        /// Warm-up, s.
        #[arg(long, default_value_t = 1.0)]
        warmup: f64,
        /// Window, s.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// The libpulse capture-path probe (started by `peers`; not for direct use).
    #[command(hide = true)]
    PulseProbe {
        /// Both streams' requested latency, ms.
        #[arg(long)]
        latency_ms: u32,
        /// Seconds of impulses.
        #[arg(long)]
        seconds: f64,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// The built-in stressor (started by `stress`; not for direct use).
    #[command(hide = true)]
    Stressor {
        /// CPU hog threads.
        #[arg(long, default_value_t = 1)]
        cpu: usize,
        /// Directory for the fsyncing disk writer (none: no writer).
        #[arg(long)]
        io_dir: Option<PathBuf>,
        /// MiB of memory churn.
        #[arg(long, default_value_t = 64)]
        vm_mb: usize,
        /// Seconds to run.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

impl Mode {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Mode::Latency { .. } => "latency",
            Mode::Load { .. } => "load",
            Mode::Stress { .. } => "stress",
            Mode::Synth { .. } => "synth",
            Mode::Peers { .. } => "peers",
            Mode::Jack { .. } => "jack",
            Mode::Bigbuf { .. } => "bigbuf",
            Mode::Drift { .. } => "drift",
            Mode::Echo { .. } => "echo",
            Mode::Convolver { .. } => "convolver",
            Mode::JackClient { .. } => "jack-client",
            Mode::PulseProbe { .. } => "pulse-probe",
            Mode::Stressor { .. } => "stressor",
        }
    }

    pub(crate) fn common(&self) -> Option<&Common> {
        match self {
            Mode::Latency { common, .. }
            | Mode::Load { common, .. }
            | Mode::Stress { common, .. }
            | Mode::Synth { common, .. }
            | Mode::Peers { common, .. }
            | Mode::Jack { common, .. }
            | Mode::Bigbuf { common, .. }
            | Mode::Drift { common, .. }
            | Mode::Echo { common }
            | Mode::Convolver { common, .. } => Some(common),
            Mode::Stressor { .. } | Mode::JackClient { .. } | Mode::PulseProbe { .. } => None,
        }
    }
}
