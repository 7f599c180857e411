//! `quaver setup` and `quaver setup --undo`: switch the user's session from PulseAudio
//! or pipewire-pulse to quaver through systemd's user units, and back exactly.
//!
//! Setup masks the other servers' units (a mask is one symlink of the unit to
//! `/dev/null`, so unmasking restores every enablement link the user had) and enables
//! `quaverd.socket`; with a user manager running it also stops the other servers and
//! starts quaver's sockets. Every unit's state before is kept in a state file
//! (`state.rs`), and undo reverses what setup did, then checks that each unit's
//! enablement is what it was.

pub mod state;
pub mod systemctl;

use crate::host;
use anyhow::{Context, Result, bail};
use state::{Before, SetupState};
use std::path::{Path, PathBuf};
use systemctl::{Systemctl, UnitState};

/// The units of servers that want the PulseAudio socket.
pub const OTHERS: [&str; 4] = [
    "pulseaudio.socket",
    "pulseaudio.service",
    "pipewire-pulse.socket",
    "pipewire-pulse.service",
];
/// quaver's socket unit, which setup enables.
pub const SOCKET: &str = "quaverd.socket";
/// quaver's service unit, started by the socket.
pub const SERVICE: &str = "quaverd.service";

/// How to install quaver's units when they are missing.
pub const INSTALL_HINT: &str = "install quaver's systemd user units: with the Debian \
     package (`cargo xtask deb`), with `sudo make install` (into /usr/local/lib/systemd/user), \
     or for another prefix by linking PREFIX/lib/systemd/user/quaverd.socket and \
     quaverd.service into ~/.config/systemd/user/ (docs/install.md)";

/// The PulseAudio socket path clients use: `$XDG_RUNTIME_DIR/pulse/native`.
pub fn pulse_socket() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .map(|d| PathBuf::from(d).join("pulse").join("native"))
}

/// The state file's path, or why there is none.
fn state_path() -> Result<PathBuf> {
    state::default_path()
        .context("neither XDG_STATE_HOME nor HOME is set: nowhere to keep setup's state")
}

/// `quaver setup [--dry-run]`.
pub fn setup(dry_run: bool) -> Result<()> {
    let path = state_path()?;
    if let Some(st) = SetupState::load(&path)? {
        bail!(
            "already switched to quaver (at {} s since the epoch, state in {}); run \
             `quaver setup --undo` first",
            st.time,
            path.display()
        );
    }
    let sc = Systemctl::new(dry_run)?;
    let mut units: Vec<&str> = OTHERS.to_vec();
    units.extend([SOCKET, SERVICE]);
    let states = sc.states(&units)?;
    for u in [SOCKET, SERVICE] {
        match states[u].file.as_deref() {
            None => bail!("{u} is not installed: {INSTALL_HINT}; then run `quaver setup` again"),
            Some("masked") => {
                bail!("{u} is masked: `systemctl --user unmask {u}`, then run `quaver setup` again")
            }
            _ => {}
        }
    }
    // The sockets quaverd.socket will hold: PulseAudio's, and quaver's own (where a
    // quaverd started by hand may sit).
    let native = quaver_protocol::paths::runtime_dir().join(quaver_protocol::paths::SOCKET_NAME);
    for sock in pulse_socket().into_iter().chain([native]) {
        check_holders(&sock, &host::listeners(&sock), sc.manager)?;
    }
    let before: Vec<Before> = units.iter().map(|u| Before::of(u, &states[*u])).collect();
    let mut st = SetupState::new(before);
    if !sc.manager {
        println!(
            "no systemd user manager answers: changing the units' enablement only \
             (it takes effect at the next login)"
        );
    }
    // Recorded before anything changes, so that an interrupted setup can be undone.
    if !dry_run {
        st.save(&path)?;
    }
    if let Err(e) = apply(&sc, &states, &mut st, &path) {
        if dry_run {
            return Err(e);
        }
        // The state file goes only with a complete rollback: otherwise `--undo` can
        // finish the job from it.
        return Err(match reverse(&sc, &st) {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
                e.context("setup failed and was rolled back")
            }
            Err(r) => e.context(format!(
                "setup failed, and rolling it back failed too ({r:#}); `quaver setup \
                 --undo` retries from {}",
                path.display()
            )),
        });
    }
    if dry_run {
        return Ok(());
    }
    println!(
        "switched to quaver: {} masked, {} enabled{}; `quaver setup --undo` restores what was \
         there (state in {})",
        list(&st.masked),
        list(&st.enabled),
        if sc.manager {
            format!(
                ", {} stopped, {} started",
                list(&st.stopped),
                list(&st.started)
            )
        } else {
            String::new()
        },
        path.display()
    );
    Ok(())
}

/// The changes, each recorded in `st` (and its file) as soon as it is made.
fn apply(
    sc: &Systemctl,
    states: &std::collections::BTreeMap<String, UnitState>,
    st: &mut SetupState,
    path: &Path,
) -> Result<()> {
    let save = |st: &SetupState| if sc.dry_run { Ok(()) } else { st.save(path) };
    let present: Vec<&str> = OTHERS
        .into_iter()
        .filter(|u| states[*u].file.is_some())
        .collect();
    let running: Vec<&str> = present
        .iter()
        .copied()
        .filter(|u| states[*u].is_active())
        .collect();
    if sc.manager && !running.is_empty() {
        sc.change(&[&["stop"][..], &running].concat())?;
        st.stopped.extend(running.iter().map(|u| u.to_string()));
        save(st)?;
    }
    let to_mask: Vec<&str> = present
        .into_iter()
        .filter(|u| states[*u].file.as_deref() != Some("masked"))
        .collect();
    if !to_mask.is_empty() {
        sc.change(&[&["mask"][..], &to_mask].concat())?;
        st.masked.extend(to_mask.iter().map(|u| u.to_string()));
        save(st)?;
    }
    if states[SOCKET].file.as_deref() != Some("enabled") {
        sc.change(&["enable", SOCKET])?;
        st.enabled.push(SOCKET.into());
        save(st)?;
    }
    sc.reload()?;
    if sc.manager && !states[SOCKET].is_active() {
        sc.change(&["start", SOCKET])?;
        st.started.push(SOCKET.into());
        save(st)?;
    }
    Ok(())
}

/// Reverses what `st` records, last change first.
fn reverse(sc: &Systemctl, st: &SetupState) -> Result<()> {
    if sc.manager && !st.started.is_empty() {
        // The service the socket started goes too, unless it ran before.
        let mut stop: Vec<&str> = st.started.iter().map(String::as_str).collect();
        let service_ran = st
            .before
            .iter()
            .any(|b| b.unit == SERVICE && b.active == Some(true));
        if !service_ran {
            stop.push(SERVICE);
        }
        sc.change(&[&["stop"][..], &stop].concat())?;
    }
    if !st.enabled.is_empty() {
        let units: Vec<&str> = st.enabled.iter().map(String::as_str).collect();
        sc.change(&[&["disable"][..], &units].concat())?;
    }
    if !st.masked.is_empty() {
        let units: Vec<&str> = st.masked.iter().map(String::as_str).collect();
        sc.change(&[&["unmask"][..], &units].concat())?;
    }
    sc.reload()?;
    if !st.stopped.is_empty() {
        if !sc.manager {
            bail!(
                "{} ran before setup, but no systemd user manager answers to start them",
                list(&st.stopped)
            );
        }
        let units: Vec<&str> = st.stopped.iter().map(String::as_str).collect();
        sc.change(&[&["start"][..], &units].concat())?;
    }
    Ok(())
}

/// `quaver setup --undo [--dry-run]`.
pub fn undo(dry_run: bool) -> Result<()> {
    let path = state_path()?;
    let Some(st) = SetupState::load(&path)? else {
        bail!(
            "nothing to undo: no state file at {} (quaver setup did not run, or was undone)",
            path.display()
        );
    };
    let sc = Systemctl::new(dry_run)?;
    reverse(&sc, &st)?;
    if dry_run {
        return Ok(());
    }
    let units: Vec<&str> = st.before.iter().map(|b| b.unit.as_str()).collect();
    let now = sc.states(&units)?;
    let differ: Vec<String> = st
        .before
        .iter()
        .filter(|b| now[&b.unit].file != b.file)
        .map(|b| {
            format!(
                "{} is {} (was {})",
                b.unit,
                now[&b.unit].file.as_deref().unwrap_or("not installed"),
                b.file.as_deref().unwrap_or("not installed")
            )
        })
        .collect();
    if !differ.is_empty() {
        bail!(
            "undone, but not every unit is as it was: {} (state kept in {})",
            differ.join("; "),
            path.display()
        );
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    println!(
        "switched back: {} unmasked, {} disabled{}; every unit's enablement is as before setup",
        list(&st.masked),
        list(&st.enabled),
        if sc.manager {
            format!(", {} started again", list(&st.stopped))
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Refuses when a process that setup cannot stop listens on the PulseAudio socket:
/// setup stops only the other servers' units, and only through a running manager.
pub fn check_holders(sock: &Path, holders: &[host::Proc], manager: bool) -> Result<()> {
    for p in holders {
        let unit = p.unit.as_deref().unwrap_or("");
        let quaverd = p.comm == "quaverd";
        // Without a manager only enablement changes (for the next login), so a quaverd
        // running now is in nobody's way; with one, quaverd.socket is started now and a
        // quaverd outside quaverd.service holds what it must bind.
        if quaverd && (unit == SERVICE || !manager) {
            continue;
        }
        if quaverd {
            bail!(
                "{p} holds {} outside quaverd.service, and quaverd.socket must take it: \
                 stop it (`kill {}`), then run `quaver setup` again",
                sock.display(),
                p.pid
            );
        }
        let stoppable = manager
            && (OTHERS.contains(&unit)
                // The manager itself holds a socket unit's socket.
                || (unit == "init.scope" && p.comm == "systemd"));
        if stoppable {
            continue;
        }
        let why = if OTHERS.contains(&unit) {
            "no systemd user manager answers to stop its unit".to_string()
        } else {
            format!(
                "it was not started by a unit quaver setup stops ({})",
                if unit.is_empty() { "no unit" } else { unit }
            )
        };
        let fix = match p.comm.as_str() {
            "pulseaudio" => format!(
                "`pulseaudio --kill` (or `kill {}`), and `autospawn = no` in \
                 ~/.config/pulse/client.conf so that clients do not start it again",
                p.pid
            ),
            _ => format!("`kill {}`", p.pid),
        };
        bail!(
            "{p} listens on {} and {why}; stop it with {fix}, then run `quaver setup` again",
            sock.display()
        );
    }
    Ok(())
}

/// Units as a comma-separated list, or "none".
fn list(units: &[String]) -> String {
    if units.is_empty() {
        "none".into()
    } else {
        units.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, comm: &str, unit: Option<&str>) -> host::Proc {
        host::Proc {
            pid,
            comm: comm.into(),
            unit: unit.map(str::to_string),
        }
    }

    #[test]
    fn only_servers_setup_can_stop_may_hold_the_socket() {
        let s = Path::new("/run/user/1000/pulse/native");
        let unit = p(10, "pulseaudio", Some("pulseaudio.service"));
        let manager = p(11, "systemd", Some("init.scope"));
        let quaverd = p(12, "quaverd", Some("session-2.scope"));
        let by_hand = p(13, "pulseaudio", Some("session-2.scope"));
        let service = p(15, "quaverd", Some("quaverd.service"));
        assert!(check_holders(s, &[unit.clone(), manager.clone(), service], true).is_ok());
        // A quaverd started by hand is in the way only of a start now.
        assert!(check_holders(s, std::slice::from_ref(&quaverd), false).is_ok());
        let e = check_holders(s, &[quaverd], true).unwrap_err().to_string();
        assert!(
            e.contains("pid 12 (quaverd)") && e.contains("`kill 12`"),
            "{e}"
        );
        let e = check_holders(s, &[unit], false).unwrap_err().to_string();
        assert!(e.contains("no systemd user manager answers"), "{e}");
        let e = check_holders(s, &[by_hand], true).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "pid 13 (pulseaudio) in session-2.scope listens on /run/user/1000/pulse/native"
            ),
            "{e}"
        );
        assert!(e.contains("pulseaudio --kill"), "{e}");
        let e = check_holders(s, &[p(14, "pipewire-pulse", None)], true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("(no unit)") && e.contains("`kill 14`"), "{e}");
    }
}
