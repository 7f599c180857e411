//! `quaverd`: the quaver sound server.

use anyhow::Result;
use clap::Parser;
use quaver_daemon::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

/// The quaver sound server. With no arguments it opens every ALSA card it finds (each
/// through its profile), or a null sink (with monitor) and null source at 48 kHz stereo
/// when there is none.
#[derive(Parser, Debug)]
#[command(name = "quaverd", version, about)]
struct Args {
    /// Configuration file (default: $XDG_CONFIG_HOME/quaver/quaver.toml if present).
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Runtime directory for the socket (default: $XDG_RUNTIME_DIR/quaver).
    #[arg(long)]
    runtime_dir: Option<PathBuf>,
    /// Device to open, repeatable; the first drives the clock (auto, null, alsa:PCM,
    /// file:PATH.wav, sim…).
    #[arg(long = "device", short = 'd')]
    devices: Vec<String>,
    /// Default sample rate in Hz.
    #[arg(long)]
    rate: Option<u32>,
    /// Default channel layout (mono, stereo, 5.1, …).
    #[arg(long)]
    channels: Option<String>,
    /// Smallest quantum in frames.
    #[arg(long)]
    quantum_min: Option<usize>,
    /// Largest quantum in frames.
    #[arg(long)]
    quantum_max: Option<usize>,
    /// Quantum when no stream asks for a latency.
    #[arg(long)]
    quantum: Option<usize>,
    /// SCHED_FIFO priority of the audio thread; 0 disables real-time scheduling.
    #[arg(long)]
    realtime_priority: Option<i32>,
    /// Real-time class of the audio thread: fifo or deadline.
    #[arg(long)]
    scheduler: Option<String>,
    /// Idle time before devices suspend, in ms; 0 never suspends.
    #[arg(long)]
    suspend_timeout_ms: Option<u64>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, short = 'l')]
    log_level: Option<String>,
    /// Read and check the configuration (with the flags above), print the file used and
    /// any warnings about its settings, and exit (status 1 when it is invalid).
    #[arg(long)]
    check_config: bool,
}

fn main() -> ExitCode {
    let journal = quaver_daemon::journal::stderr_is_journal();
    match serve(journal) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if journal {
                // Every line at priority err: the journal takes each line as an entry.
                for line in format!("quaverd: {e:#}").lines() {
                    eprintln!("<3>{line}");
                }
            } else {
                eprintln!("Error: {e:?}");
            }
            ExitCode::FAILURE
        }
    }
}

fn serve(journal: bool) -> Result<()> {
    quaver_daemon::block_stop_signals();
    let args = Args::parse();
    let (mut cfg, path) = Config::load(args.config.as_deref())?;
    if let Some(v) = args.runtime_dir {
        cfg.server.runtime_dir = Some(v);
    }
    if !args.devices.is_empty() {
        cfg.engine.devices = args.devices;
    }
    if let Some(v) = args.rate {
        cfg.engine.rate = v;
    }
    if let Some(v) = args.channels {
        cfg.engine.channels = v;
    }
    if let Some(v) = args.quantum_min {
        cfg.engine.quantum_min = v;
    }
    if let Some(v) = args.quantum_max {
        cfg.engine.quantum_max = v;
    }
    if let Some(v) = args.quantum {
        cfg.engine.quantum_default = v;
    }
    if let Some(v) = args.realtime_priority {
        cfg.engine.realtime_priority = v;
    }
    if let Some(v) = args.scheduler {
        cfg.engine.scheduler = v;
    }
    if let Some(v) = args.suspend_timeout_ms {
        cfg.engine.suspend_timeout_ms = v;
    }
    if let Some(v) = args.log_level {
        cfg.server.log_level = v;
    }
    cfg.validate()?;
    if args.check_config {
        print!(
            "{}",
            quaver_daemon::advice::check_report(&cfg, path.as_deref())
        );
        return Ok(());
    }
    let level: tracing::Level = cfg.server.log_level.parse()?;
    let log = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    if journal {
        log.event_format(quaver_daemon::journal::JournalFormat)
            .init();
    } else {
        log.with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    if let Some(p) = &path {
        tracing::info!("configuration from {}", p.display());
    }
    quaver_daemon::run_with_path(cfg, path.as_deref())
}
