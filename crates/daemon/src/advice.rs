//! Settings that are allowed but likely unwanted, as warnings quaverd logs at start,
//! reports in its status (`quaver doctor` shows them) and prints for
//! `quaverd --check-config`; and the process facts the status reply carries.

use crate::config::Config;
use quaver_protocol::message::{ServerProcess, started};
use std::path::Path;

/// Warnings about `cfg` (the file with the command line's flags applied), each naming
/// its key and what it costs.
pub fn warnings(cfg: &Config) -> Vec<String> {
    let e = &cfg.engine;
    let mut out = Vec::new();
    if e.realtime_priority == 0 {
        out.push(
            "engine.realtime_priority = 0: real-time scheduling is off, so other work \
             on the machine can delay the audio thread into xruns (20 is the default)"
                .to_string(),
        );
    }
    if e.lock_memory == "off" {
        out.push(
            "engine.lock_memory = \"off\": the audio thread's memory may be paged out, \
             and a page fault there is an xrun (\"auto\" is the default)"
                .to_string(),
        );
    }
    if e.suspend_timeout_ms == 0 {
        out.push(
            "engine.suspend_timeout_ms = 0: devices never suspend, so the cards stay \
             open and busy while nothing plays (3000 is the default)"
                .to_string(),
        );
    }
    if !cfg.pulse.enabled {
        out.push(
            "pulse.enabled = false: PulseAudio clients (most desktop applications) \
             are not served"
                .to_string(),
        );
    }
    out
}

/// How this process was started: sockets passed by systemd, a systemd service
/// (`INVOCATION_ID` is set for every unit's processes), or a command.
pub fn how_started(sockets_passed: bool) -> &'static str {
    if sockets_passed {
        started::SOCKET_ACTIVATION
    } else if std::env::var_os("INVOCATION_ID").is_some_and(|v| !v.is_empty()) {
        started::SYSTEMD
    } else {
        started::COMMAND
    }
}

/// The status reply's process facts for this daemon.
pub fn process(cfg: &Config, config: Option<&Path>, sockets_passed: bool) -> ServerProcess {
    ServerProcess {
        pid: std::process::id(),
        started: how_started(sockets_passed).into(),
        config: config.map(|p| p.display().to_string()),
        warnings: warnings(cfg),
    }
}

/// What `quaverd --check-config` prints on stdout: `config: PATH` (or that there is
/// none), then one `warning: …` line per warning.
pub fn check_report(cfg: &Config, config: Option<&Path>) -> String {
    let mut out = match config {
        Some(p) => format!("config: {}\n", p.display()),
        None => "config: none (built-in defaults)\n".to_string(),
    };
    for w in warnings(cfg) {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_warn_of_nothing_and_each_costly_setting_is_named() {
        assert!(warnings(&Config::default()).is_empty());
        let cfg = Config::parse(
            "[engine]\nrealtime_priority = 0\nlock_memory = \"off\"\nsuspend_timeout_ms = 0\n\
             [pulse]\nenabled = false\n",
            Path::new("q.toml"),
        )
        .unwrap();
        let w = warnings(&cfg);
        assert_eq!(w.len(), 4, "{w:?}");
        for key in [
            "engine.realtime_priority = 0",
            "engine.lock_memory",
            "engine.suspend_timeout_ms = 0",
            "pulse.enabled = false",
        ] {
            assert!(w.iter().any(|l| l.starts_with(key)), "{key}: {w:?}");
        }
        let report = check_report(&cfg, Some(Path::new("/x/q.toml")));
        assert!(report.starts_with("config: /x/q.toml\nwarning: engine.realtime_priority"));
        assert_eq!(report.lines().count(), 5);
        let p = process(&cfg, None, true);
        assert_eq!(p.started, started::SOCKET_ACTIVATION);
        assert_eq!(p.check(), Ok(()));
    }
}
