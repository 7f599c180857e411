//! Whether the user's session starts quaver or another server at login, for
//! `quaver doctor`: the systemd user units' enablement (read as `quaver setup` reads
//! it, through systemctl, which needs no running manager for that) and setup's state.

use super::finding::Finding;
use crate::setup::state::{SetupState, default_path};
use crate::setup::systemctl::Systemctl;
use crate::setup::{OTHERS, SERVICE, SOCKET};

/// Adds the `session` finding; nothing when systemctl cannot be run.
pub fn check(out: &mut Vec<Finding>) {
    if let Some(path) = default_path()
        && let Ok(Some(_)) = SetupState::load(&path)
    {
        out.push(Finding::ok(
            "session",
            format!(
                "switched to quaver by `quaver setup` (state in {}; `quaver setup --undo` \
                 switches back)",
                path.display()
            ),
        ));
        return;
    }
    let Ok(sc) = Systemctl::new(false) else {
        return;
    };
    let mut units: Vec<&str> = OTHERS.to_vec();
    units.extend([SOCKET, SERVICE]);
    let Ok(states) = sc.states(&units) else {
        return;
    };
    let enabled = |u: &str| states[u].file.as_deref() == Some("enabled");
    let rivals: Vec<&str> = OTHERS.into_iter().filter(|u| enabled(u)).collect();
    let installed = states[SOCKET].file.is_some() && states[SERVICE].file.is_some();
    if !rivals.is_empty() {
        out.push(Finding::problem(
            "session",
            format!(
                "{} enabled: at login they take the PulseAudio socket, not quaver",
                rivals.join(", ")
            ),
            if installed {
                "`quaver setup`".to_string()
            } else {
                format!("{}, then `quaver setup`", crate::setup::INSTALL_HINT)
            },
        ));
    } else if enabled(SOCKET) {
        out.push(Finding::ok(
            "session",
            "quaverd.socket enabled: the first client of a session starts quaverd",
        ));
    } else {
        out.push(Finding::ok(
            "session",
            "no sound server is started by systemd at login (quaverd.socket not enabled)",
        ));
    }
}
