//! quaverd's command line (clap). It lives in the library, not in `main.rs`, so that the
//! man page and shell completions can be generated from it (`cargo xtask`,
//! docs/install.md) without the daemon linking the generators.

use clap::Parser;
use std::path::PathBuf;

/// The quaver sound server.
///
/// With no arguments it opens every ALSA card it finds (each through its profile), or
/// a null sink (with monitor) and null source at 48 kHz stereo when there is none.
#[derive(Parser, Debug)]
#[command(name = "quaverd", version)]
pub struct Args {
    /// Configuration file (default: $XDG_CONFIG_HOME/quaver/quaver.toml if present).
    #[arg(long, short = 'c')]
    pub config: Option<PathBuf>,
    /// Runtime directory for the socket (default: $XDG_RUNTIME_DIR/quaver).
    #[arg(long)]
    pub runtime_dir: Option<PathBuf>,
    /// Device to open, repeatable; the first drives the clock (auto, null, alsa:PCM,
    /// file:PATH.wav, sim…).
    #[arg(long = "device", short = 'd')]
    pub devices: Vec<String>,
    /// Default sample rate in Hz.
    #[arg(long)]
    pub rate: Option<u32>,
    /// Default channel layout (mono, stereo, 5.1, …).
    #[arg(long)]
    pub channels: Option<String>,
    /// Smallest quantum in frames.
    #[arg(long)]
    pub quantum_min: Option<usize>,
    /// Largest quantum in frames.
    #[arg(long)]
    pub quantum_max: Option<usize>,
    /// Quantum when no stream asks for a latency.
    #[arg(long)]
    pub quantum: Option<usize>,
    /// SCHED_FIFO priority of the audio thread; 0 disables real-time scheduling.
    #[arg(long)]
    pub realtime_priority: Option<i32>,
    /// Real-time class of the audio thread: fifo or deadline.
    #[arg(long)]
    pub scheduler: Option<String>,
    /// Idle time before devices suspend, in ms; 0 never suspends.
    #[arg(long)]
    pub suspend_timeout_ms: Option<u64>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, short = 'l')]
    pub log_level: Option<String>,
    /// Read and check the configuration (with the flags above), print the file used and
    /// any warnings about its settings, and exit (status 1 when it is invalid).
    #[arg(long)]
    pub check_config: bool,
    /// Check a rule file (docs/policy/rules.md): print how many rules it has, or what is
    /// wrong with it and on which line, and exit (status 1 when it is invalid).
    #[arg(long, value_name = "FILE")]
    pub check_rules: Option<PathBuf>,
    /// Internal: build and run one plugin in this process and exit (quaverd runs
    /// itself with this before it loads a plugin; docs/dsp/plugins.md).
    #[arg(long, hide = true, value_name = "JSON")]
    pub probe_plugin: Option<String>,
}
