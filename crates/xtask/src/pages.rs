//! Man pages and shell completions, generated from the programs' own clap definitions,
//! so a new flag reaches both without anyone writing it down twice.

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::Shell;
use std::path::Path;

/// Every installed program's command line: quaverd, quaver, quaver-bench, quaver-jack.
pub fn programs() -> Vec<Command> {
    vec![
        quaver_daemon::args::Args::command(),
        quaver_cli::args::Cli::command(),
        quaver_bench::cli::Cli::command(),
        jack::wrapper::WrapperArgs::command(),
    ]
}

/// Sections that only people can write: files, environment, and the other pages. Roff
/// source; `@PREFIX@` is replaced by the install prefix.
fn extra_sections(name: &str) -> &'static str {
    match name {
        "quaverd" => {
            r#".SH FILES
.TP
\fI$XDG_CONFIG_HOME/quaver/quaver.toml\fR (else \fI~/.config/quaver/quaver.toml\fR)
The configuration file read when \fB\-\-config\fR is not given. Every key is
optional; flags override the file; an unknown key or a bad value stops quaverd with
the line it is on.
.TP
\fI@PREFIX@/share/doc/quaver/examples/quaver.toml\fR
Every key beside its default, with what it does.
.TP
\fI$XDG_RUNTIME_DIR/quaver/native\fR
The native socket (quaver, quaver\-jack and libjack clients).
.TP
\fI$XDG_RUNTIME_DIR/pulse/native\fR
The PulseAudio\-protocol socket (paplay, pactl, pavucontrol, browsers, ...).
.TP
\fI@PREFIX@/lib/systemd/user/quaverd.socket\fR, \fIquaverd.service\fR
systemd user units: the sockets start quaverd on the first client. Enable with
\fBsystemctl \-\-user enable \-\-now quaverd.socket\fR after disabling PulseAudio's or
pipewire\-pulse's units.
.SH ENVIRONMENT
.TP
\fBXDG_RUNTIME_DIR\fR
Where the sockets are made.
.TP
\fBLISTEN_FDS\fR, \fBLISTEN_PID\fR, \fBLISTEN_FDNAMES\fR
Sockets passed by systemd (socket activation); each must be a listening unix stream
socket bound to one of the two paths above.
.TP
\fBJOURNAL_STREAM\fR
When stderr is the journal, every line carries its syslog priority.
.SH SEE ALSO
\fBquaver\fR(1), \fBquaver\-jack\fR(1), \fBquaver\-bench\fR(1), \fBsystemd.socket\fR(5)
"#
        }
        "quaver" => {
            r#".SH ENVIRONMENT
.TP
\fBQUAVER_SERVER\fR
The server's socket, as \fB\-\-server\fR.
.TP
\fBXDG_RUNTIME_DIR\fR
The default socket is \fI$XDG_RUNTIME_DIR/quaver/native\fR.
.SH SEE ALSO
\fBquaverd\fR(1), \fBquaver\-jack\fR(1), \fBquaver\-bench\fR(1)
"#
        }
        "quaver-jack" => {
            r#".SH FILES
.TP
\fI@PREFIX@/lib/quaver/jack/libjack.so.0\fR
quaver's libjack, private to this wrapper: it goes on the program's
\fBLD_LIBRARY_PATH\fR only, never on the system's library path.
.SH ENVIRONMENT
.TP
\fBQUAVER_JACK_LIBDIR\fR
A directory holding another libjack.so.0 to use.
.TP
\fBQUAVER_JACK_QUANTUM\fR, \fBQUAVER_SERVER\fR
Set for the program by \fB\-\-quantum\fR and \fB\-\-server\fR.
.SH EXAMPLES
.EX
quaver\-jack jack_lsp \-c
quaver\-jack \-\-quantum 64 ardour
.EE
.SH SEE ALSO
\fBquaverd\fR(1), \fBquaver\fR(1), \fBjackd\fR(1)
"#
        }
        "quaver-bench" => {
            r#".SH SEE ALSO
\fBquaverd\fR(1), \fBquaver\fR(1)
"#
        }
        _ => "",
    }
}

/// The man pages of one program and its subcommands: (file name, roff text).
fn pages_of(cmd: Command, prefix: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = cmd;
    cmd.build();
    let mut out = Vec::new();
    collect(&cmd, prefix, &mut out)?;
    Ok(out)
}

fn collect(cmd: &Command, prefix: &Path, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let man = clap_mangen::Man::new(cmd.clone())
        .title(name.to_uppercase())
        .section("1")
        .source(format!("quaver {}", env!("CARGO_PKG_VERSION")))
        .manual("quaver");
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut page)?;
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(&mut page)?;
    }
    let extra = extra_sections(&name).replace("@PREFIX@", &prefix.to_string_lossy());
    page.extend_from_slice(extra.as_bytes());
    if cmd.get_version().is_some() || cmd.get_long_version().is_some() {
        man.render_version_section(&mut page)?;
    }
    out.push((format!("{name}.1"), page));
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        collect(sub, prefix, out)?;
    }
    Ok(())
}

/// Every page of every program: (file name, roff text).
pub fn man_pages(prefix: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut all = Vec::new();
    for cmd in programs() {
        all.extend(pages_of(cmd, prefix)?);
    }
    Ok(all)
}

/// The shells completions are generated for, with each one's file name for `bin`.
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bash"),
    (Shell::Zsh, "zsh"),
    (Shell::Fish, "fish"),
];

/// The completion script's file name for `bin` in `shell`'s conventional directory.
pub fn completion_file(shell: Shell, bin: &str) -> String {
    match shell {
        Shell::Zsh => format!("_{bin}"),
        Shell::Fish => format!("{bin}.fish"),
        _ => bin.to_string(),
    }
}

/// Every program's completion script for `shell`: (file name, text).
pub fn completions(shell: Shell) -> Vec<(String, Vec<u8>)> {
    programs()
        .into_iter()
        .map(|mut cmd| {
            let bin = cmd.get_name().to_string();
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, &bin, &mut text);
            (completion_file(shell, &bin), text)
        })
        .collect()
}

/// `xtask man DIR`: returns how many pages were written.
pub fn write_man(dir: &Path, prefix: &Path) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let pages = man_pages(prefix)?;
    for (name, text) in &pages {
        let p = dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(pages.len())
}

/// `xtask completions DIR`: returns how many scripts were written.
pub fn write_completions(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for (shell, sub) in SHELLS {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        for (name, text) in completions(shell) {
            let p = d.join(name);
            std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every visible (sub)command of `cmd`, by display name, as the pages are named.
    fn names(cmd: &Command, out: &mut Vec<String>) {
        out.push(cmd.get_display_name().unwrap_or(cmd.get_name()).to_string());
        for sub in cmd.get_subcommands() {
            if !sub.is_hide_set() && sub.get_name() != "help" {
                names(sub, out);
            }
        }
    }

    #[test]
    fn every_program_and_subcommand_gets_a_page_naming_the_prefix() {
        let pages = man_pages(Path::new("/opt/q")).unwrap();
        let mut want = Vec::new();
        for mut cmd in programs() {
            cmd.build();
            names(&cmd, &mut want);
        }
        let got: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<String> = want.iter().map(|n| format!("{n}.1")).collect();
        assert_eq!(got, want);
        for name in ["quaverd.1", "quaver.1", "quaver-play.1", "quaver-jack.1"] {
            assert!(got.contains(&name), "{name} missing: {got:?}");
        }
        for (name, text) in &pages {
            let text = String::from_utf8_lossy(text);
            assert!(
                text.starts_with(".ie") || text.contains(".TH "),
                "{name}: {text}"
            );
            assert!(text.contains(".SH NAME"), "{name}");
        }
        let quaverd = String::from_utf8_lossy(&pages[0].1).into_owned();
        assert!(quaverd.contains("/opt/q/share/doc/quaver/examples/quaver.toml"));
        assert!(!quaverd.contains("@PREFIX@"));
    }

    #[test]
    fn every_shell_gets_a_script_for_every_program() {
        for (shell, _) in SHELLS {
            let scripts = completions(shell);
            assert_eq!(scripts.len(), programs().len());
            for (name, text) in scripts {
                let text = String::from_utf8(text).unwrap();
                assert!(text.contains("quaver"), "{shell} {name}");
            }
        }
        let bash = completions(Shell::Bash);
        let (name, text) = &bash[1];
        assert_eq!(name, "quaver");
        assert!(String::from_utf8_lossy(text).contains("-F _quaver"));
        assert_eq!(completion_file(Shell::Zsh, "quaverd"), "_quaverd");
        assert_eq!(completion_file(Shell::Fish, "quaverd"), "quaverd.fish");
    }
}
