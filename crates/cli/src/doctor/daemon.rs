//! The daemon's side of `quaver doctor`: is it running, how was it started, its
//! real-time scheduling, its locked memory, its configuration.

use super::finding::Finding;
use crate::host;
use quaver_protocol::message::{Reply, Request, ServerProcess, StatusInfo, started};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A daemon that answered.
pub struct Running {
    /// Its status reply.
    pub status: StatusInfo,
    /// Its pid in our /proc, when known.
    pub pid: Option<u32>,
}

/// Checks the daemon at `socket`; returns it when it answers.
pub fn check(socket: &Path, out: &mut Vec<Finding>) -> Option<Running> {
    let mut conn =
        match quaver_client::Connection::connect(Some(socket), crate::commands::CLIENT_NAME) {
            Ok(c) => c,
            Err(e) => {
                out.push(Finding::problem(
                    "daemon",
                    format!("quaverd is not running ({})", crate::error_line(&e.into())),
                    "`systemctl --user start quaverd.socket` where `quaver setup` switched the \
                 session to quaver, else start `quaverd` (see `quaver setup`)",
                ));
                config(None, None, out);
                return None;
            }
        };
    let _ = conn.set_request_timeout(Some(std::time::Duration::from_secs(5)));
    let status = match conn.status() {
        Ok(s) => s,
        Err(e) => {
            out.push(Finding::problem(
                "daemon",
                format!(
                    "quaverd at {} accepts connections but does not answer: {e}",
                    socket.display()
                ),
                "restart it: `systemctl --user restart quaverd.service`, or stop it by its \
                 pid and start `quaverd` again",
            ));
            return None;
        }
    };
    // An older daemon refuses the request: it only lacks what the reply would add.
    let process = match conn.request(Request::Process) {
        Ok((Reply::Process(p), _)) => match p.check() {
            Ok(()) => Some(p),
            Err(why) => {
                out.push(Finding::problem(
                    "daemon",
                    format!("its process reply is malformed: {why}"),
                    "install quaverd and quaver of the same version",
                ));
                None
            }
        },
        _ => None,
    };
    // An older daemon does not say its pid: the process listening on the socket is it
    // (systemd holds a socket unit's socket too).
    let pid = match &process {
        Some(p) => {
            Some(p.pid).filter(|pid| host::process(*pid).is_some_and(|q| q.comm == "quaverd"))
        }
        None => host::listeners(socket)
            .into_iter()
            .find(|p| p.comm == "quaverd")
            .map(|p| p.pid),
    };
    out.push(Finding::ok(
        "daemon",
        describe(&status, process.as_ref(), pid, socket),
    ));
    if let Some(pid) = pid {
        realtime(&status, pid, out);
        memory(pid, out);
    } else {
        realtime_reported(&status, out);
    }
    config(
        process.as_ref(),
        process.as_ref().map(|p| p.warnings.as_slice()),
        out,
    );
    Some(Running { status, pid })
}

/// The daemon line: version, pid, how it was started, where it serves.
fn describe(st: &StatusInfo, p: Option<&ServerProcess>, pid: Option<u32>, socket: &Path) -> String {
    let unit = pid.and_then(host::process).and_then(|q| q.unit);
    let how = match p.map(|p| p.started.as_str()) {
        Some(started::SOCKET_ACTIVATION) => "started by systemd socket activation".to_string(),
        Some(started::SYSTEMD) => format!(
            "started by systemd ({})",
            unit.as_deref().unwrap_or("its unit")
        ),
        Some(_) => "started by a command, not by systemd".to_string(),
        None => "an older quaverd that does not say how it was started".to_string(),
    };
    let pid = match (pid, p) {
        (Some(pid), _) => format!("pid {pid}"),
        (None, Some(p)) => format!("pid {} in another pid namespace", p.pid),
        (None, None) => "pid unknown".to_string(),
    };
    format!(
        "quaverd {} running, {pid}, {how}, serving {}",
        st.server_version,
        socket.display()
    )
}

/// The real-time finding from what the daemon reports and what /proc shows of it.
fn realtime(st: &StatusInfo, pid: u32, out: &mut Vec<Finding>) {
    let threads = host::realtime_threads(pid);
    if st.realtime && !threads.is_empty() {
        let seen: Vec<String> = threads
            .iter()
            .map(|(name, pol)| format!("{name} {}", host::policy_name(*pol)))
            .collect();
        let how = if st.scheduling.contains("RealtimeKit") {
            "granted by RealtimeKit"
        } else {
            "set directly (privileges or an rtprio limit)"
        };
        out.push(Finding::ok(
            "real-time",
            format!("{} {how}; threads: {}", st.scheduling, seen.join(", ")),
        ));
    } else if st.realtime {
        // The daemon says so, but no thread of it runs a real-time class now
        // (freewheeling gives it up for a while).
        out.push(Finding::problem(
            "real-time",
            format!(
                "quaverd reports {} but none of its threads runs a real-time class now",
                st.scheduling
            ),
            format!("look at `quaver status` and `chrt -p` of the threads in /proc/{pid}/task"),
        ));
    } else {
        realtime_reported(st, out);
    }
}

/// The real-time finding from the status reply alone.
fn realtime_reported(st: &StatusInfo, out: &mut Vec<Finding>) {
    if st.realtime {
        out.push(Finding::ok("real-time", st.scheduling.to_string()));
        return;
    }
    let what = if st.scheduling.is_empty() {
        "off".to_string()
    } else {
        st.scheduling.to_string()
    };
    let fix = if st.scheduling.contains("disabled") {
        "set `engine.realtime_priority = 20` in the config file (and no \
         `--realtime-priority 0` on quaverd's command line), then restart quaverd"
    } else {
        "install RealtimeKit (`sudo apt install rtkit`), or allow your user real-time \
         priority: `echo '@audio - rtprio 95' | sudo tee /etc/security/limits.d/95-audio.conf` \
         and `sudo adduser $USER audio`, log in again; then restart quaverd"
    };
    out.push(Finding::problem(
        "real-time",
        format!("the audio thread runs without real-time scheduling: {what}"),
        fix,
    ));
}

/// The locked-memory finding from `/proc/PID/status`.
fn memory(pid: u32, out: &mut Vec<Finding>) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    match host::status_kb(&status, "VmLck") {
        Some(0) => out.push(Finding::problem(
            "memory",
            "no memory locked (VmLck 0 kB): the audio thread's stack and buffers may be \
             paged out",
            "raise the memory-lock limit (`LimitMEMLOCK=64M` in quaverd.service does; by \
             hand `ulimit -l 65536` before quaverd) and keep `engine.lock_memory = \"auto\"`",
        )),
        Some(kb) => out.push(Finding::ok("memory", format!("{kb} kB locked (VmLck)"))),
        None => out.push(Finding::ok(
            "memory",
            format!("locked memory not readable in /proc/{pid}/status"),
        )),
    }
}

/// quaverd's error report on one line: its first line (the file and what kind of error)
/// and its last (the innermost cause), without TOML's source excerpt (`2 | key = 1`,
/// `| ^^^`) and anyhow's headings.
fn error_summary(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with('|')
                && *l != "Caused by:"
                // "2 | quantum_mni = 64": a source line quoted by the TOML parser.
                && l.split_once(" |").is_none_or(|(n, _)| n.parse::<u32>().is_err())
        })
        .collect();
    let first = lines
        .first()
        .map_or("", |l| l.trim_start_matches("Error: "));
    match lines.last() {
        Some(last) if lines.len() > 1 => format!("{first}: {last}"),
        _ => first.to_string(),
    }
}

/// `quaverd` beside this executable, else from PATH.
fn quaverd() -> PathBuf {
    std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("quaverd"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| "quaverd".into())
}

/// The configuration: the file the daemon read (or would read) checked as it is now by
/// `quaverd --check-config`, and the warnings about the settings (the daemon's when it
/// runs, else the file's).
fn config(p: Option<&ServerProcess>, daemon_warnings: Option<&[String]>, out: &mut Vec<Finding>) {
    let mut cmd = Command::new(quaverd());
    // The error's text without a backtrace, which anyhow adds when these ask for it.
    cmd.arg("--check-config")
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0");
    if let Some(path) = p.and_then(|p| p.config.as_deref()) {
        cmd.args(["--config", path]);
    }
    // A daemon that started without a file took the defaults; the default file may have
    // appeared since, and is what its next start reads.
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) => {
            out.push(Finding::ok(
                "config",
                format!("not checked: cannot run {} ({e})", quaverd().display()),
            ));
            return;
        }
    };
    if !output.status.success() {
        out.push(Finding::problem(
            "config",
            format!(
                "invalid, quaverd refuses to start with it: {}",
                error_summary(&String::from_utf8_lossy(&output.stderr))
            ),
            "correct what it names, then `quaverd --check-config` checks it again",
        ));
        return;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let file = text
        .lines()
        .find_map(|l| l.strip_prefix("config: "))
        .unwrap_or("none");
    let file_warnings: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("warning: ").map(str::to_string))
        .collect();
    let used = match p {
        Some(p) => p.config.as_deref().unwrap_or("none (built-in defaults)"),
        None => file,
    };
    out.push(Finding::ok("config", format!("{used}, valid")));
    let warnings = daemon_warnings.map_or(file_warnings, <[String]>::to_vec);
    for w in warnings {
        out.push(Finding::problem(
            "config",
            w,
            "change that setting in the config file (or quaverd's command line), then \
             restart quaverd",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaverd_errors_are_summed_up_on_one_line() {
        let toml = "Error: /c/q.toml: TOML parse error at line 2, column 1\n  |\n2 | quantum_mni = 64\n  | ^^^^^^^^^^^\nunknown field `quantum_mni`, expected one of `devices`\n";
        assert_eq!(
            error_summary(toml),
            "/c/q.toml: TOML parse error at line 2, column 1: unknown field `quantum_mni`, expected one of `devices`"
        );
        let value =
            "Error: q.toml: invalid value\n\nCaused by:\n    engine.rate 0 is outside 1..=384000\n";
        assert_eq!(
            error_summary(value),
            "q.toml: invalid value: engine.rate 0 is outside 1..=384000"
        );
        assert_eq!(
            error_summary("Error: reading config x\n"),
            "reading config x"
        );
    }
}
