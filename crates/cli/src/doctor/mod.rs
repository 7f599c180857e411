//! `quaver doctor`: a health check of the sound setup. Each finding is one line, `ok`
//! or `problem`; each problem is followed by the command that fixes it. The exit status
//! is 1 when there is a problem.
//!
//! What it looks at: the daemon (running, pid, how it was started), the real-time
//! scheduling of its threads and its locked memory (`daemon.rs`), the configuration
//! file and the warnings about its settings (`quaverd --check-config` when no daemon
//! answers), who else competes for the PulseAudio socket, the JACK sockets and the
//! sound cards (`compete.rs`), and which server the session's systemd units start at
//! login (`session.rs`).

mod compete;
mod daemon;
mod finding;
mod session;

pub use finding::Finding;

use anyhow::Result;
use std::path::Path;

/// The report: one line per finding, each problem's fix indented below it, and a last
/// line counting the problems.
pub fn render(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let mark = if f.is_problem() { "problem" } else { "ok" };
        out.push_str(&format!("{mark:<8} {}: {}\n", f.topic, f.text));
        if let Some(fix) = &f.fix {
            out.push_str(&format!("         fix: {fix}\n"));
        }
    }
    match findings.iter().filter(|f| f.is_problem()).count() {
        0 => out.push_str("no problems found\n"),
        1 => out.push_str("1 problem\n"),
        n => out.push_str(&format!("{n} problems\n")),
    }
    out
}

/// `quaver doctor`: prints the report; fails (exit status 1) when there is a problem.
pub fn doctor(server: Option<&Path>) -> Result<()> {
    let socket = server
        .map(Path::to_path_buf)
        .unwrap_or_else(quaver_protocol::paths::default_socket_path);
    let mut findings = Vec::new();
    let running = daemon::check(&socket, &mut findings);
    compete::check(running.as_ref(), &mut findings);
    session::check(&mut findings);
    crate::commands::print_out(&render(&findings))?;
    let problems = findings.iter().filter(|f| f.is_problem()).count();
    if problems > 0 {
        // The report said everything; the error line only carries the exit status.
        anyhow::bail!(
            "{problems} problem{} found",
            if problems == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_marks_problems_with_their_fix_and_counts_them() {
        let text = render(&[
            Finding::ok("daemon", "quaverd 0.1.0, pid 7, started by hand"),
            Finding::problem(
                "real-time",
                "the audio thread runs SCHED_OTHER",
                "sudo apt install rtkit",
            ),
        ]);
        assert_eq!(
            text,
            "ok       daemon: quaverd 0.1.0, pid 7, started by hand\n\
             problem  real-time: the audio thread runs SCHED_OTHER\n\
             \x20        fix: sudo apt install rtkit\n\
             1 problem\n"
        );
        assert!(render(&[]).ends_with("no problems found\n"));
    }
}
