//! The `quaver` command line: control commands, playback and recording against
//! quaverd. The binary is a thin wrapper around [`main`]; the modules are public
//! so that integration tests can reuse the decoder and the parsers.

pub mod args;
pub mod decode;
pub mod doctor;
pub mod dot;
pub mod host;
pub mod netshow;
pub mod present;
pub mod raw;
pub mod setup;
pub mod values;

mod commands;
mod play;
mod quantum;
mod record;
mod signals;
mod transport;

use anyhow::{Context, Result};
use args::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;

/// Runs one parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    let server = cli.server.as_deref();
    match &cli.command {
        Command::Status { json } => commands::status(server, *json),
        Command::Top(a) => top(server, a),
        Command::Ls { json } => commands::ls(server, *json),
        Command::Play(a) => play::play(server, cli.verbose, a),
        Command::Record(a) => record::record(server, cli.verbose, a),
        Command::Link { output, input } => commands::link(server, output, input, false),
        Command::Unlink { output, input } => commands::link(server, output, input, true),
        Command::Volume(a) => commands::volume(server, a),
        Command::Quantum(a) => quantum::quantum(server, a),
        Command::Graph { json, .. } => commands::graph(server, *json),
        Command::Transport(a) => transport::transport(server, a),
        Command::Setup(a) if a.undo => setup::undo(a.dry_run),
        Command::Setup(a) => setup::setup(a.dry_run),
        Command::Doctor => doctor::doctor(server),
        Command::Rules(a) => match &a.action {
            args::RulesAction::Check { file } => rules_check(file),
        },
        Command::Bench { args } => bench(args),
    }
}

/// `quaver rules check FILE`: the daemon's own parser, through `quaverd --check-rules`
/// (the command line does not link the policy crate), so both say the same.
fn rules_check(file: &std::path::Path) -> Result<()> {
    let beside = std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("quaverd"))
        .filter(|p| p.exists());
    let program = beside.unwrap_or_else(|| "quaverd".into());
    let out = std::process::Command::new(&program)
        .arg("--check-rules")
        .arg(file)
        .output()
        .with_context(|| format!("cannot run {} (is quaverd installed?)", program.display()))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim().trim_start_matches("Error: ");
        anyhow::bail!("{err}");
    }
    Ok(())
}

/// `quaver top` after checking its arguments.
fn top(server: Option<&std::path::Path>, a: &args::TopArgs) -> Result<()> {
    if !(a.interval.is_finite() && (0.01..=3600.0).contains(&a.interval)) {
        anyhow::bail!("--interval must be between 0.01 and 3600 seconds");
    }
    let iterations = if a.once { Some(1) } else { a.iterations };
    commands::top(
        server,
        std::time::Duration::from_secs_f64(a.interval),
        iterations,
        a.json,
    )
}

/// Runs `quaver-bench` from next to this executable (or from PATH) with `args`, and
/// exits with its status: the benchmarks live in their own crate and binary so the
/// CLI stays lean.
fn bench(args: &[String]) -> Result<()> {
    use anyhow::Context;
    let beside = std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("quaver-bench"))
        .filter(|p| p.exists());
    let program = beside.unwrap_or_else(|| "quaver-bench".into());
    let status = std::process::Command::new(&program)
        .args(args)
        .status()
        .with_context(|| {
            format!(
                "cannot run {} (is quaver-bench installed?)",
                program.display()
            )
        })?;
    if !status.success() {
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

/// One line for an error and its causes, skipping causes the message already
/// quotes (client errors embed their source) and OS error numbers.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = strip_os_error(&cause.to_string());
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn strip_os_error(s: &str) -> String {
    let mut out = s.to_string();
    while let Some(i) = out.find(" (os error ") {
        match out[i..].find(')') {
            Some(j) => out.replace_range(i..i + j + 1, ""),
            None => break,
        }
    }
    out
}

/// Entry point of the `quaver` binary: usage errors exit 2 (clap), others 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quaver: {}", error_line(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn error_lines() {
        let io = std::io::Error::from_raw_os_error(13);
        let e = anyhow::Error::new(io).context("cannot create out.wav");
        assert_eq!(error_line(&e), "cannot create out.wav: Permission denied");

        // A message that already contains its cause is not repeated.
        let e: anyhow::Error = Err::<(), _>(std::io::Error::from_raw_os_error(2))
            .context("cannot open x: No such file or directory (os error 2)")
            .unwrap_err();
        assert_eq!(error_line(&e), "cannot open x: No such file or directory");
    }
}
