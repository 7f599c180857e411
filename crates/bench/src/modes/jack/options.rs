//! What a jack run is asked to do: the servers, periods, loads and client counts.

use crate::tools::stressor::StressorKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Longest the client may take to open its clients and run their first cycles.
pub const CLIENT_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A server the client runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum JackServer {
    /// quaverd through quaver's libjack (`quaver-jack`).
    Quaverd,
    /// quaverd with `callback.asynchronous = true`: the client runs one quantum later and
    /// is never waited for, as jackd2 runs clients without `-S`.
    QuaverdAsync,
    /// jackd2 with the dummy driver.
    Jackd2,
    /// PipeWire through pipewire-jack (`pw-jack`).
    Pipewire,
}

impl JackServer {
    /// Whether it is a quaverd (either mode).
    pub fn is_quaverd(&self) -> bool {
        matches!(self, JackServer::Quaverd | JackServer::QuaverdAsync)
    }

    /// Name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            JackServer::Quaverd => "quaverd",
            JackServer::QuaverdAsync => "quaverd-async",
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
    /// quaverd's `callback.spin_us` (None: its default).
    pub callback_spin_us: Option<u32>,
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
            jackd_priority: crate::tools::rt::QUAVERD_DEFAULT_PRIORITY,
            callback_spin_us: None,
            self_exe,
        }
    }
}
