//! The command line: `quaver-bench <mode> [--out DIR] [--seed N] [--quick] …`.

pub mod args;
pub mod options;

pub use args::{Cli, Common, Mode};

use crate::Ctx;
use crate::modes::jack::client;
use crate::modes::jack::client::ClientOptions;
use crate::report::progress::Progress;
use crate::report::{self, ModeOutput, Record};
use crate::tools::clock::Utc;
use crate::tools::exec::{find_quaverd, quote};
use crate::tools::machine::{Machine, tool_versions};
use crate::tools::stressor::StressorConfig;
use crate::tools::{daemon, rng, stressor};
use anyhow::Result;
use clap::Parser;
use std::time::Duration;

/// Runs quaver-bench with `argv`; returns the process exit code.
pub fn main_with(argv: Vec<String>) -> i32 {
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli, &argv) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("quaver-bench: {e:#}");
            1
        }
    }
}

fn run(cli: Cli, argv: &[String]) -> Result<()> {
    if let Mode::Stressor {
        cpu,
        io_dir,
        vm_mb,
        duration,
        seed,
    } = &cli.mode
    {
        let ops = stressor::builtin_main(
            StressorConfig {
                cpu: *cpu,
                io: io_dir.is_some(),
                vm_mb: *vm_mb,
            },
            io_dir.clone(),
            Duration::from_secs(*duration),
            *seed,
        )?;
        println!("{}", serde_json::to_string(&ops)?);
        return Ok(());
    }
    if let Mode::PulseProbe {
        latency_ms,
        seconds,
        seed,
    } = &cli.mode
    {
        return crate::modes::peers::capture::probe_main(*latency_ms, *seconds, *seed);
    }
    if let Mode::JackClient {
        clients,
        voices,
        prefix,
        no_connect,
        warmup,
        seconds,
        seed,
    } = &cli.mode
    {
        return client::main(&ClientOptions {
            clients: *clients,
            voices: *voices,
            prefix: prefix.clone(),
            connect: !*no_connect,
            warmup: *warmup,
            seconds: *seconds,
            seed: *seed,
        });
    }
    let common = cli.mode.common().expect("not a helper mode").clone();
    let quaverd = find_quaverd(common.quaverd.as_deref())?;
    let seed = common.seed.unwrap_or_else(rng::seed_from_clock);
    let mut ctx = Ctx::new(quaverd.clone(), seed, common.quick);
    ctx.realtime_priority = common.realtime_priority;
    ctx.progress = Progress::new(!common.no_progress);
    if quaverd.components().any(|c| c.as_os_str() == "debug") {
        ctx.note(format!(
            "quaverd is a debug build ({}): fine for checking the instruments, not for \
             figures; build with `cargo build --release -p quaver-daemon -p quaver-bench` \
             and run target/release/quaver-bench",
            quaverd.display()
        ));
    }
    let started = Utc::now();
    let machine = Machine::probe();
    let mut versions = tool_versions();
    versions.insert(
        "quaver-bench".into(),
        format!("quaver-bench {}", env!("CARGO_PKG_VERSION")),
    );
    versions.insert("quaverd".into(), daemon::quaverd_version(&quaverd));
    let quick = common.quick;
    let out: ModeOutput = match &cli.mode {
        Mode::Latency { .. } => options::latency(&mut ctx, &cli.mode, quick)?,
        Mode::Load { .. } => options::load(&mut ctx, &cli.mode, quick)?,
        Mode::Stress { .. } => options::stress(&mut ctx, &cli.mode, quick)?,
        Mode::Peers { .. } => options::peers(&mut ctx, &cli.mode, quick)?,
        Mode::Synth { .. } => options::synth(&mut ctx, &cli.mode, quick)?,
        Mode::Jack { .. } => options::jack(&mut ctx, &cli.mode, &common)?,
        Mode::Bigbuf { .. } => options::bigbuf(&mut ctx, &cli.mode, quick)?,
        Mode::Drift { .. } => options::drift(&mut ctx, &cli.mode, quick)?,
        Mode::Echo { .. } => crate::modes::echo::render(&crate::modes::echo::run(&mut ctx)?),
        Mode::Convolver {
            repeats,
            window,
            partition,
            ..
        } => {
            use crate::modes::convolver;
            convolver::render(&convolver::run(&mut ctx, *repeats, *window, *partition)?)
        }
        Mode::Stressor { .. } | Mode::JackClient { .. } | Mode::PulseProbe { .. } => {
            unreachable!("handled above")
        }
    };
    let finished = Utc::now();
    let invocation = invocation(argv);
    let reproduce = reproduce(argv, seed);
    let rec = Record {
        mode: cli.mode.name(),
        started: started.iso(),
        finished: finished.iso(),
        seed,
        quick,
        invocation,
        reproduce,
        machine: &machine,
        versions: &versions,
        commands: &ctx.commands,
        notes: &ctx.notes,
        results: &out.results,
    };
    let written = report::write(&common.out, &started, &rec, &out)?;
    println!("{}", out.summary.text());
    for t in &out.extra {
        println!("{}", t.text());
    }
    for n in &ctx.notes {
        println!("note: {n}");
    }
    println!("report: {}", written.markdown.display());
    println!("record: {}", written.json.display());
    Ok(())
}

/// The command line as run, program name normalized.
fn invocation(argv: &[String]) -> String {
    std::iter::once("quaver-bench".to_string())
        .chain(argv.iter().skip(1).map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command line that repeats this run: as invoked, with `--seed` added if it was
/// not given.
pub fn reproduce(argv: &[String], seed: u64) -> String {
    let mut s = invocation(argv);
    if !argv
        .iter()
        .any(|a| a == "--seed" || a.starts_with("--seed="))
    {
        s.push_str(&format!(" --seed {seed}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modes::jack::{JackOptions, JackServer};
    use crate::modes::latency::LatencyPath;
    use crate::modes::stress::StressDevice;
    use crate::modes::synth::Mark;
    use crate::tools::stressor::StressorKind;
    use std::path::PathBuf;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_modes_and_common_options() {
        let c = Cli::try_parse_from(argv(
            "quaver-bench latency --quick --quanta 64,256 --seed 5",
        ))
        .unwrap();
        match c.mode {
            Mode::Latency {
                quanta,
                common,
                paths,
                ..
            } => {
                assert_eq!(quanta, vec![64, 256]);
                assert_eq!(paths, vec![LatencyPath::Sim, LatencyPath::Monitor]);
                assert!(common.quick);
                assert_eq!(common.seed, Some(5));
            }
            m => panic!("{m:?}"),
        }
        let c = Cli::try_parse_from(argv("quaver-bench load --sweep --out /tmp/x")).unwrap();
        assert!(matches!(c.mode, Mode::Load { sweep: true, .. }));
        let c = Cli::try_parse_from(argv("quaver-bench stress --stressor builtin --device sim"))
            .unwrap();
        assert!(matches!(
            c.mode,
            Mode::Stress {
                stressor: StressorKind::Builtin,
                device: StressDevice::Sim,
                ..
            }
        ));
        assert!(Cli::try_parse_from(argv("quaver-bench frobnicate")).is_err());
    }

    #[test]
    fn reproduce_adds_the_seed_once() {
        assert_eq!(
            reproduce(&argv("/x/quaver-bench latency --quick"), 42),
            "quaver-bench latency --quick --seed 42"
        );
        assert_eq!(
            reproduce(&argv("quaver-bench load --seed 7"), 7),
            "quaver-bench load --seed 7"
        );
    }

    #[test]
    fn jack_takes_its_repeats() {
        let c = Cli::try_parse_from(argv(
            "quaver-bench jack --quick --repeats 2 --periods 64 --servers quaverd,jackd2",
        ))
        .unwrap();
        match c.mode {
            Mode::Jack {
                repeats,
                periods,
                servers,
                ..
            } => {
                assert_eq!(repeats, Some(2));
                assert_eq!(periods, vec![64]);
                assert_eq!(servers, vec![JackServer::Quaverd, JackServer::Jackd2]);
            }
            m => panic!("{m:?}"),
        }
        let c = Cli::try_parse_from(argv("quaver-bench jack")).unwrap();
        assert!(matches!(c.mode, Mode::Jack { repeats: None, .. }));
        let dummy = PathBuf::from("/x");
        assert_eq!(JackOptions::new(false, dummy.clone()).repeats, 3);
        assert_eq!(JackOptions::new(true, dummy).repeats, 1);
    }

    #[test]
    fn synth_parses_its_marks() {
        let c = Cli::try_parse_from(argv(
            "quaver-bench synth --marks voice,switch --switch-high 300 --quick",
        ))
        .unwrap();
        match c.mode {
            Mode::Synth {
                marks, switch_high, ..
            } => {
                assert_eq!(marks, vec![Mark::Voice, Mark::Switch]);
                assert_eq!(switch_high, Some(300));
            }
            m => panic!("{m:?}"),
        }
    }
}
