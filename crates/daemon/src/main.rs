//! `quaverd`: the quaver sound server.

use anyhow::Result;
use clap::Parser;
use quaver_daemon::args::Args;
use quaver_daemon::config::Config;
use std::process::ExitCode;

fn main() -> ExitCode {
    // We are the PulseAudio server: alsa-lib's PulseAudio hook (libasound2-plugins) checks
    // this, as PulseAudio sets it for itself, instead of connecting to the pulse socket —
    // ours, or a rival's — from inside the daemon whenever alsa-lib loads its config.
    // SAFETY: first thing in main, before any thread exists.
    unsafe { std::env::set_var("PULSE_INTERNAL", "1") };
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
    if let Some(req) = &args.probe_plugin {
        std::process::exit(quaver_daemon::plugins::probe::probe_main(req));
    }
    if let Some(file) = &args.check_rules {
        let rules = quaver_policy::rules::Rules::load(file)?;
        println!("{}: {} rule(s), valid", file.display(), rules.len());
        return Ok(());
    }
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
    // A broken rule file stops quaverd at start, like a broken config line; read again on
    // SIGHUP, it is logged and the rules in force stay.
    cfg.load_rules()?;
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
