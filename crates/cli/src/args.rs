//! Command-line syntax of `quaver`.
//!
//! Values with a grammar of their own (volume levels, sample formats, channel
//! layouts) are kept as strings here and parsed by the command that uses them, so
//! that a bad value gives the same one-line error as every other failure instead of
//! clap's usage screen.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// `quaver`: control the quaver sound server and play or record through it.
#[derive(Parser, Debug)]
#[command(name = "quaver", version, about, max_term_width = 100)]
pub struct Cli {
    /// Socket of the quaver server [default: $XDG_RUNTIME_DIR/quaver/native].
    #[arg(long, global = true, env = "QUAVER_SERVER", value_name = "PATH")]
    pub server: Option<PathBuf>,
    /// Say more about what is happening (on stderr).
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the server's state: rate, quantum, devices, clients.
    Status {
        /// Print the raw status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show every node's time per cycle, live, like pw-top (Ctrl-C ends it).
    Top(TopArgs),
    /// List nodes, their ports, and links.
    Ls {
        /// Print the graph as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Play an audio file (WAV, FLAC, Ogg Vorbis, MP3) or raw PCM.
    Play(PlayArgs),
    /// Record from a source (or a sink's monitor) into a WAV file.
    Record(RecordArgs),
    /// Link an output (node or node:port) to an input.
    Link {
        /// Output node or `node:port`.
        output: String,
        /// Input node or `node:port`.
        input: String,
    },
    /// Remove the link(s) between an output and an input.
    Unlink {
        /// Output node or `node:port`.
        output: String,
        /// Input node or `node:port`.
        input: String,
    },
    /// Set a node's volume and/or mute.
    Volume(VolumeArgs),
    /// Show the graph's quantum and why (forced, requested by a node, default), or
    /// force or release it for every client.
    Quantum(QuantumArgs),
    /// Print the processing graph (Graphviz dot by default).
    Graph {
        /// Graphviz dot output (the default), e.g. `quaver graph --dot | dot -Tsvg`.
        #[arg(long)]
        dot: bool,
        /// JSON output instead of dot.
        #[arg(long, conflicts_with = "dot")]
        json: bool,
    },
    /// Show the JACK transport, or start, stop or locate it.
    Transport(TransportArgs),
    /// Switch this user's session to quaver: stop and mask PulseAudio's or
    /// pipewire-pulse's systemd user units and enable quaverd.socket; `--undo` restores
    /// exactly what was there.
    Setup(SetupArgs),
    /// Check the sound setup: the daemon, real-time scheduling, memory locking, cards,
    /// competing servers, the config file; each problem with the command that fixes it
    /// (exit status 1 when there is one).
    Doctor,
    /// The rule file (docs/policy/rules.md).
    Rules(RulesArgs),
    /// Run a benchmark mode of `quaver-bench` (latency, load, stress, …); arguments
    /// are passed through, e.g. `quaver bench latency --quick`.
    #[command(disable_help_flag = true)]
    Bench {
        /// Mode and its arguments (see `quaver bench --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Arguments of `quaver rules`.
#[derive(Args, Debug)]
pub struct RulesArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: RulesAction,
}

/// What `quaver rules` does.
#[derive(Subcommand, Debug)]
pub enum RulesAction {
    /// Check a rule file: how many rules it has, or what is wrong and on which line
    /// (exit status 1). quaverd reads it again on SIGHUP.
    Check {
        /// The rule file.
        file: std::path::PathBuf,
    },
}

/// Arguments of `quaver setup`.
#[derive(Args, Debug)]
pub struct SetupArgs {
    /// Restore the units as they were before `quaver setup` (from its state file).
    #[arg(long)]
    pub undo: bool,
    /// Print the systemctl commands instead of running them.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `quaver transport`.
#[derive(Args, Debug)]
pub struct TransportArgs {
    /// What to do; without one, show the transport.
    #[command(subcommand)]
    pub action: Option<TransportAction>,
    /// Print the transport as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `quaver transport` actions (applied at the next cycle start, as JACK's).
#[derive(Subcommand, Debug, Clone, Copy)]
pub enum TransportAction {
    /// Start rolling (slow-sync clients may hold it in starting).
    Start,
    /// Stop.
    Stop,
    /// Move to a frame (0 ..= 4294967295).
    Locate {
        /// Transport frame.
        frame: u64,
    },
}

/// Arguments of `quaver top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    /// Seconds between refreshes (each frame covers that interval).
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub interval: f64,
    /// Show one frame and exit.
    #[arg(long, conflicts_with = "iterations")]
    pub once: bool,
    /// Show this many frames and exit.
    #[arg(long, value_name = "N")]
    pub iterations: Option<u64>,
    /// One JSON object (the `timing` reply) per line instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `quaver play`.
#[derive(Args, Debug)]
pub struct PlayArgs {
    /// Audio file, or `-` for standard input.
    pub file: PathBuf,
    /// Node to play to instead of the default sink.
    #[arg(long, value_name = "NODE")]
    pub to: Option<String>,
    /// Latency to ask for, in milliseconds.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub latency_ms: Option<f64>,
    /// Stream volume: `0.5`, `50%` or `-6dB`.
    #[arg(long, value_name = "LEVEL", allow_hyphen_values = true)]
    pub volume: Option<String>,
    /// The stream's role (`music`, `phone`, `event`, …): while a `phone` stream plays,
    /// lower roles are ducked (docs/policy/roles.md).
    #[arg(long, value_name = "ROLE")]
    pub role: Option<String>,
    /// The input is headerless PCM (needs --rate, --channels and --format).
    #[arg(long)]
    pub raw: bool,
    /// Raw input: sample rate in Hz.
    #[arg(long, requires = "raw", value_name = "HZ")]
    pub rate: Option<u32>,
    /// Raw input: channel count or layout (`2`, `stereo`, `5.1`, `FL,FR`).
    #[arg(long, requires = "raw", value_name = "N|LAYOUT")]
    pub channels: Option<String>,
    /// Raw input: sample format (`s16le`, `s24le`, `s32le`, `f32le`, `u8`, …).
    #[arg(long, requires = "raw", value_name = "FORMAT")]
    pub format: Option<String>,
}

/// Arguments of `quaver record`.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// WAV file to write (replaced if it exists).
    pub file: PathBuf,
    /// Source node to record, or a sink node to record its monitor.
    #[arg(long, value_name = "NODE")]
    pub from: Option<String>,
    /// Stop after this many seconds (exactly round(S × rate) frames).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Sample rate in Hz [default: the server's rate].
    #[arg(long, value_name = "HZ")]
    pub rate: Option<u32>,
    /// Channel count or layout (`1`, `2`, `mono`, `stereo`, `5.1`, `FL,FR`) [default: stereo].
    #[arg(long, value_name = "N|LAYOUT")]
    pub channels: Option<String>,
    /// Sample format of the WAV file: s16, s24, s32 or f32 [default: s16].
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Latency to ask for, in milliseconds.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    pub latency_ms: Option<f64>,
}

/// Arguments of `quaver volume`.
#[derive(Args, Debug)]
pub struct VolumeArgs {
    /// Node name or id.
    pub node: String,
    /// Level: `0.5`, `50%` or `-6dB` (may be left out with --mute/--unmute).
    #[arg(allow_hyphen_values = true)]
    pub level: Option<String>,
    /// Mute the node.
    #[arg(long)]
    pub mute: bool,
    /// Unmute the node.
    #[arg(long, conflicts_with = "mute")]
    pub unmute: bool,
}

/// Arguments of `quaver quantum`.
#[derive(Args, Debug)]
pub struct QuantumArgs {
    /// Print the quantum report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Force or release; without one, show the quantum in force.
    #[command(subcommand)]
    pub action: Option<QuantumAction>,
}

/// What `quaver quantum` changes.
#[derive(Subcommand, Debug, PartialEq, Eq)]
pub enum QuantumAction {
    /// Run every cycle at N frames whatever clients ask for, until released (as
    /// `jack_bufsize N` does); N is a power of two within the server's bounds.
    Force {
        /// Frames per cycle.
        frames: u32,
    },
    /// Give the quantum back to the clients' latency requests.
    Release,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("quaver").chain(args.iter().copied()))
    }

    #[test]
    fn quantum_shows_forces_and_releases() {
        let action = |args: &[&str]| match parse(args).unwrap().command {
            Command::Quantum(q) => q.action,
            c => panic!("{c:?}"),
        };
        assert_eq!(action(&["quantum"]), None);
        assert_eq!(
            action(&["quantum", "force", "128"]),
            Some(QuantumAction::Force { frames: 128 })
        );
        assert_eq!(
            action(&["quantum", "release"]),
            Some(QuantumAction::Release)
        );
        assert!(parse(&["quantum", "force"]).is_err());
        assert!(parse(&["quantum", "force", "-4"]).is_err());
        assert!(parse(&["quantum", "force", "lots"]).is_err());
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn volume_accepts_negative_decibels_and_flags() {
        let Command::Volume(v) = parse(&["volume", "sink", "-6dB"]).unwrap().command else {
            panic!()
        };
        assert_eq!(v.node, "sink");
        assert_eq!(v.level.as_deref(), Some("-6dB"));
        assert!(!v.mute && !v.unmute);

        let Command::Volume(v) = parse(&["volume", "sink", "--mute"]).unwrap().command else {
            panic!()
        };
        assert_eq!(v.level, None);
        assert!(v.mute);

        let Command::Volume(v) = parse(&["volume", "sink", "50%", "--unmute"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(v.level.as_deref(), Some("50%"));
        assert!(v.unmute);

        assert!(parse(&["volume", "sink", "--mute", "--unmute"]).is_err());
    }

    #[test]
    fn play_options() {
        let cli = parse(&[
            "--server",
            "/tmp/s",
            "play",
            "a.flac",
            "--to",
            "null",
            "--latency-ms",
            "20",
            "--volume",
            "-3dB",
        ])
        .unwrap();
        assert_eq!(cli.server.as_deref(), Some(std::path::Path::new("/tmp/s")));
        let Command::Play(p) = cli.command else {
            panic!()
        };
        assert_eq!(p.file, PathBuf::from("a.flac"));
        assert_eq!(p.to.as_deref(), Some("null"));
        assert_eq!(p.latency_ms, Some(20.0));
        assert_eq!(p.volume.as_deref(), Some("-3dB"));
        assert!(!p.raw);

        let Command::Play(p) = parse(&[
            "play",
            "-",
            "--raw",
            "--rate",
            "8000",
            "--channels",
            "1",
            "--format",
            "s16le",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(p.file, PathBuf::from("-"));
        assert!(p.raw);
        assert_eq!(p.rate, Some(8000));
        // Raw-only options make no sense for a container file.
        assert!(parse(&["play", "a.wav", "--rate", "8000"]).is_err());
    }

    #[test]
    fn global_server_after_subcommand() {
        let cli = parse(&["status", "--json", "--server", "/x"]).unwrap();
        assert_eq!(cli.server.as_deref(), Some(std::path::Path::new("/x")));
        assert!(matches!(cli.command, Command::Status { json: true }));
    }

    #[test]
    fn record_options() {
        let Command::Record(r) = parse(&[
            "record",
            "out.wav",
            "--from",
            "null",
            "--duration",
            "1.5",
            "--channels",
            "mono",
            "--format",
            "s24",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(r.from.as_deref(), Some("null"));
        assert_eq!(r.duration, Some(1.5));
        assert_eq!(r.channels.as_deref(), Some("mono"));
        assert_eq!(r.format.as_deref(), Some("s24"));
    }

    #[test]
    fn graph_flags() {
        assert!(matches!(
            parse(&["graph", "--dot"]).unwrap().command,
            Command::Graph {
                dot: true,
                json: false
            }
        ));
        assert!(parse(&["graph", "--dot", "--json"]).is_err());
    }
}
