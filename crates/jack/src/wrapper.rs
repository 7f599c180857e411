//! The command line of the `quaver-jack` wrapper (clap). It lives in the library so
//! that its man page and shell completions come from the same definition as the
//! parser (`cargo xtask`, docs/install.md); the wrapper binary only parses and execs.

use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;

/// Runs a JACK program with quaver's libjack.so.0, so it talks to quaverd.
///
/// The library's directory goes first on the program's LD_LIBRARY_PATH (like
/// PipeWire's pw-jack), and the program replaces the wrapper. The library is looked for in
/// $QUAVER_JACK_LIBDIR, then in ../lib/quaver/jack next to the wrapper (installed
/// layout), then in the cargo build tree the wrapper was built in.
#[derive(Parser, Debug)]
#[command(name = "quaver-jack", version)]
pub struct WrapperArgs {
    /// Ask for this many frames per cycle (sets QUAVER_JACK_QUANTUM).
    #[arg(long, value_name = "FRAMES", value_parser = clap::value_parser!(u32).range(1..))]
    pub quantum: Option<u32>,
    /// quaverd's socket (sets QUAVER_SERVER).
    #[arg(long, value_name = "SOCKET")]
    pub server: Option<PathBuf>,
    /// The JACK program to run, then its own arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        value_name = "COMMAND",
        value_hint = clap::ValueHint::CommandWithArguments
    )]
    pub command: Vec<OsString>,
}
