//! The daemon's process as `quaver doctor` needs it: its pid, how it was started, the
//! configuration file it read and the warnings about its settings. Sent inside
//! [`StatusInfo`](super::StatusInfo) (added within v1) and checked by the client with
//! [`ServerProcess::check`] before use, as everything a peer sends.

use serde::{Deserialize, Serialize};

/// How quaverd was started.
pub mod started {
    /// systemd passed it its listening sockets (`LISTEN_FDS`, a socket unit).
    pub const SOCKET_ACTIVATION: &str = "socket-activation";
    /// Run by systemd as a service, binding its sockets itself.
    pub const SYSTEMD: &str = "systemd";
    /// Run by hand or by a script.
    pub const COMMAND: &str = "command";
    /// Every value a server may send.
    pub const ALL: [&str; 3] = [SOCKET_ACTIVATION, SYSTEMD, COMMAND];
}

/// Longest configuration path a client accepts, bytes (Linux's `PATH_MAX`).
pub const MAX_CONFIG_PATH_BYTES: usize = 4096;
/// Most settings warnings a client accepts.
pub const MAX_WARNINGS: usize = 64;
/// Longest settings warning a client accepts, bytes.
pub const MAX_WARNING_BYTES: usize = 1024;
/// Largest pid Linux hands out (`PID_MAX_LIMIT` on 64-bit).
pub const MAX_PID: u32 = 4_194_304;

/// The server process, in [`StatusInfo::server`](super::StatusInfo::server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerProcess {
    /// quaverd's process id (in the server's pid namespace).
    pub pid: u32,
    /// How it was started: one of [`started::ALL`].
    pub started: String,
    /// The configuration file read at start; `None`: none (built-in defaults).
    pub config: Option<String>,
    /// Settings the daemon runs with that are allowed but likely unwanted
    /// (`engine.realtime_priority = 0: …`), from the file and the command line.
    pub warnings: Vec<String>,
}

impl ServerProcess {
    /// Checks every field against what a server may send; says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_PID).contains(&self.pid) {
            return Err(format!("pid {} is outside 1..={MAX_PID}", self.pid));
        }
        if !started::ALL.contains(&self.started.as_str()) {
            return Err(format!(
                "started {:?} is none of {}",
                self.started,
                started::ALL.join(", ")
            ));
        }
        if let Some(c) = &self.config
            && (c.is_empty() || c.len() > MAX_CONFIG_PATH_BYTES || c.contains('\0'))
        {
            return Err(format!(
                "config path of {} bytes is not a path (1..={MAX_CONFIG_PATH_BYTES} bytes, no NUL)",
                c.len()
            ));
        }
        if self.warnings.len() > MAX_WARNINGS {
            return Err(format!(
                "{} warnings, more than {MAX_WARNINGS}",
                self.warnings.len()
            ));
        }
        if let Some(w) = self
            .warnings
            .iter()
            .find(|w| w.is_empty() || w.len() > MAX_WARNING_BYTES)
        {
            return Err(format!(
                "a warning of {} bytes (1..={MAX_WARNING_BYTES})",
                w.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ServerProcess {
        ServerProcess {
            pid: 42,
            started: started::SOCKET_ACTIVATION.into(),
            config: Some("/home/u/.config/quaver/quaver.toml".into()),
            warnings: vec!["engine.realtime_priority = 0: real-time scheduling is off".into()],
        }
    }

    #[test]
    fn a_sane_process_passes_and_each_bad_field_is_named() {
        assert_eq!(good().check(), Ok(()));
        let bad = |f: fn(&mut ServerProcess)| {
            let mut p = good();
            f(&mut p);
            p.check().unwrap_err()
        };
        assert!(bad(|p| p.pid = 0).contains("pid 0"));
        assert!(bad(|p| p.pid = MAX_PID + 1).contains("pid"));
        assert!(bad(|p| p.started = "cron".into()).contains("\"cron\""));
        assert!(bad(|p| p.config = Some(String::new())).contains("config path"));
        assert!(bad(|p| p.config = Some("a\0b".into())).contains("config path"));
        assert!(bad(|p| p.warnings = vec!["w".into(); MAX_WARNINGS + 1]).contains("65 warnings"));
        assert!(bad(|p| p.warnings = vec![String::new()]).contains("warning of 0 bytes"));
    }

    #[test]
    fn round_trips_through_json() {
        let p = good();
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<ServerProcess>(&text).unwrap(), p);
    }
}
