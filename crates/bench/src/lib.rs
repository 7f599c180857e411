//! `quaver-bench`: the measuring instruments of quaver.
//!
//! Each mode starts its own quaverd (and, later, its peers) in a private runtime
//! directory, drives a workload through the native client library, measures from the
//! outside (`/proc`, the daemon's `status`/`timing` replies, the audio itself), and
//! writes a JSON record plus a Markdown report with SVG plots. Modes:
//!
//! - [`modes::latency`]: round-trip latency through the sim card's loopback and a sink
//!   monitor, measured with impulses, next to the latency the design predicts;
//! - [`modes::load`]: CPU seconds per second of audio, context switches, xruns and memory of
//!   quaverd for N playback streams (at the device rate and resampled);
//! - [`modes::stress`]: the real-time thread's wakeup lateness and cycle time while CPU, disk
//!   and memory stressors run, next to cyclictest's figure for the same load;
//! - [`modes::peers`]: the same PulseAudio-protocol workload (N `pacat` clients) against
//!   quaverd and PulseAudio, side by side;
//! - [`modes::synth`]: SynthMark-like voice, latency, jitter and switch marks, voices rendered
//!   in a low-latency callback client;
//! - [`modes::jack`] (`jack`): one JACK client (libjack loaded at run time) on quaverd, jackd2 and
//!   PipeWire: xruns under load next to cyclictest, and per-client overhead;
//! - [`modes::bigbuf`]: one stream asking for 2 s on the sim card with a 2 s ring: quaverd's
//!   wakeups next to PulseAudio's, and how soon an event sound started meanwhile plays;
//! - [`modes::drift`]: sim cards whose crystals are ± a few hundred ppm apart, a stream
//!   into each: the followers' rate matching (lock time, ratio error, level, xruns).
//!
//! The modes live in [`modes`], the instruments they share in [`tools`], and the
//! Markdown/JSON/SVG output in [`report`].
//!
//! Benchmarks measure; the tests of this crate check that the instruments measure
//! what they claim (e.g. a known injected delay shows up in `latency`), never timing.

#![warn(missing_docs)]

pub mod cli;
pub mod modes;
pub mod report;
pub mod tools;

use std::path::PathBuf;
use tools::daemon::{Daemon, DaemonSpec};

/// What every mode needs: where quaverd is, the seed, how long to run, and the list
/// of commands and notes that go into the report.
#[derive(Debug)]
pub struct Ctx {
    /// The quaverd binary.
    pub quaverd: PathBuf,
    /// Seed of every random choice.
    pub seed: u64,
    /// Shortened run (for tests and smoke checks).
    pub quick: bool,
    /// `--realtime-priority` for quaverd (None: its default).
    pub realtime_priority: Option<i32>,
    /// Progress bars.
    pub progress: report::progress::Progress,
    /// Every external command run, in order.
    pub commands: Vec<String>,
    /// Remarks for the report.
    pub notes: Vec<String>,
}

impl Ctx {
    /// A context with no commands recorded yet.
    pub fn new(quaverd: PathBuf, seed: u64, quick: bool) -> Ctx {
        Ctx {
            quaverd,
            seed,
            quick,
            realtime_priority: None,
            progress: report::progress::Progress::hidden(),
            commands: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Starts a private quaverd and records its command line.
    pub fn start_daemon(&mut self, mut spec: DaemonSpec) -> anyhow::Result<Daemon> {
        if spec.realtime_priority.is_none() {
            spec.realtime_priority = self.realtime_priority;
        }
        let d = Daemon::start(&self.quaverd, &spec)?;
        self.commands.push(d.command().to_string());
        if !spec.config.trim().is_empty() {
            self.commands.push(format!(
                "# with {}:\n#   {}",
                "quaver.toml",
                spec.config.trim().replace('\n', "\n#   ")
            ));
        }
        Ok(d)
    }

    /// Records a command run outside [`Ctx::start_daemon`].
    pub fn record_command(&mut self, c: impl Into<String>) {
        self.commands.push(c.into());
    }

    /// Adds a note to the report (once).
    pub fn note(&mut self, n: impl Into<String>) {
        let n = n.into();
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
}
