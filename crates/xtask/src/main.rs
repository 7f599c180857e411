//! `cargo xtask`: quaver's build tasks (docs/install.md).
//!
//! - `man DIR`, `completions DIR`: the man pages and bash/zsh/fish completions of every
//!   program, generated from the clap definitions the programs parse with;
//! - `install`: the whole install layout (binaries, quaver-jack's private libjack.so.0,
//!   the example config, systemd user units, pages, completions) under `PREFIX`, staged
//!   into `DESTDIR` when given;
//! - `deb`: a Debian package of that layout, built with `dpkg-deb`.
//!
//! The generators (clap_mangen, clap_complete) are linked into this tool only, never
//! into the programs it installs.

mod deb;
mod install;
mod pages;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// quaver's build tasks: pages, completions, install layout, Debian package.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

/// Where the programs come from and go to (shared by `install` and `deb`).
#[derive(clap::Args, Debug, Clone)]
pub struct BuildOpts {
    /// Cargo profile whose binaries are installed (built first unless --no-build).
    #[arg(long, default_value = "release")]
    pub profile: String,
    /// Install what is already built; do not run cargo.
    #[arg(long)]
    pub no_build: bool,
    /// Cargo's target directory [default: $CARGO_TARGET_DIR, else the one this tool
    /// was built in].
    #[arg(long, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    /// Strip debugging symbols from the installed binaries and library.
    #[arg(long)]
    pub strip: bool,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Write the man pages (section 1) of quaverd, quaver, quaver-bench and quaver-jack.
    Man {
        /// Directory for the pages (created).
        dir: PathBuf,
        /// The install prefix the pages name in FILES [default: $PREFIX, else /usr/local].
        #[arg(long)]
        prefix: Option<PathBuf>,
    },
    /// Write bash, zsh and fish completions of every program into DIR/{bash,zsh,fish}.
    Completions {
        /// Directory for the scripts (created).
        dir: PathBuf,
    },
    /// Build (unless --no-build) and install the whole layout (docs/install.md).
    Install {
        /// Where the programs will live [default: $PREFIX, else /usr/local].
        #[arg(long)]
        prefix: Option<PathBuf>,
        /// Staging root the layout is written under (packaging); the files still
        /// name PREFIX [default: $DESTDIR, else none].
        #[arg(long, value_name = "DIR")]
        destdir: Option<PathBuf>,
        #[command(flatten)]
        build: BuildOpts,
    },
    /// Build a Debian package of the layout (prefix /usr, stripped) with dpkg-deb.
    Deb {
        /// Directory the .deb is written to [default: TARGET/debian].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// The Maintainer field.
        #[arg(
            long,
            env = "QUAVER_DEB_MAINTAINER",
            default_value = "quaver developers <quaver@sound-server.invalid>"
        )]
        maintainer: String,
        /// dpkg-deb's xz level (0-9): the default (6) for a package to ship; the tests
        /// take 1, seconds faster for a larger file.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=9))]
        compress_level: Option<u8>,
        #[command(flatten)]
        build: BuildOpts,
    },
}

/// The option, else the environment variable `name` when set and not empty (make's
/// way: `DESTDIR= make install` means none), else `default`.
fn or_env(opt: Option<PathBuf>, name: &str, default: &str) -> PathBuf {
    opt.or_else(|| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
    .unwrap_or_else(|| PathBuf::from(default))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = match cli.task {
        Task::Man { dir, prefix } => {
            pages::write_man(&dir, &or_env(prefix, "PREFIX", "/usr/local")).map(|n| {
                println!("{n} man pages in {}", dir.display());
            })
        }
        Task::Completions { dir } => pages::write_completions(&dir).map(|n| {
            println!("{n} completion scripts in {}", dir.display());
        }),
        Task::Install {
            prefix,
            destdir,
            build,
        } => {
            let prefix = or_env(prefix, "PREFIX", "/usr/local");
            let destdir = or_env(destdir, "DESTDIR", "");
            let destdir = (!destdir.as_os_str().is_empty()).then_some(destdir);
            install::run(&prefix, destdir.as_deref(), &build).map(|files| {
                println!("installed {} files", files.len());
            })
        }
        Task::Deb {
            out,
            maintainer,
            compress_level,
            build,
        } => deb::run(out.as_deref(), &maintainer, compress_level, &build).map(|deb| {
            println!("{}", deb.display());
        }),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}
