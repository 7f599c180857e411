//! `systemctl --user` as plain processes: queries always run; changes run, or with
//! `--dry-run` are printed instead. Enabling, disabling and masking are symlinks in the
//! user's unit directory, which systemctl writes itself when no manager answers (no
//! systemd as PID 1, a container); stopping and starting need a running user manager,
//! so they are only asked for when one answers.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::process::Command;

/// The program, from PATH.
fn program() -> &'static str {
    "systemctl"
}

/// One unit's enablement and whether it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitState {
    /// `list-unit-files`'s state (`enabled`, `disabled`, `masked`, `static`, …);
    /// `None`: no unit file of that name.
    pub file: Option<String>,
    /// `is-active`'s answer (`active`, `inactive`, `failed`, …); `None` when no user
    /// manager answers.
    pub active: Option<String>,
}

impl UnitState {
    /// Whether it runs (or starts) now.
    pub fn is_active(&self) -> bool {
        matches!(
            self.active.as_deref(),
            Some("active" | "activating" | "reloading")
        )
    }
}

/// The user's systemctl, and whether a user manager answers.
pub struct Systemctl {
    /// Print changes instead of making them.
    pub dry_run: bool,
    /// A user manager answers (`is-system-running` reaches it).
    pub manager: bool,
}

impl Systemctl {
    /// `systemctl --user ARGS`; with no manager answering, told to work on the unit
    /// files itself (`SYSTEMD_OFFLINE=1`), as it does by itself where systemd is not
    /// PID 1, so that enablement changes work on a booted host too (an ssh login
    /// without a user session).
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(program());
        c.arg("--user").args(args);
        if !self.manager {
            c.env("SYSTEMD_OFFLINE", "1");
        }
        c
    }

    /// Finds out whether a user manager answers; fails when systemctl cannot be run.
    pub fn new(dry_run: bool) -> Result<Systemctl> {
        let out = Command::new(program())
            .args(["--user", "is-system-running"])
            .output()
            .with_context(|| {
                format!(
                    "cannot run {} (quaver setup drives systemd's user units; is systemd installed?)",
                    program()
                )
            })?;
        // "offline" is what it says when it reaches no manager; anything else
        // (running, degraded, starting, …) came from one.
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(Systemctl {
            dry_run,
            manager: !said.is_empty() && said != "offline",
        })
    }

    /// Enablement and activity of `units`.
    pub fn states(&self, units: &[&str]) -> Result<BTreeMap<String, UnitState>> {
        let out = self
            .command(&["list-unit-files", "--no-legend", "--no-pager", "--full"])
            .args(units)
            .output()
            .context("running systemctl --user list-unit-files")?;
        let text = String::from_utf8_lossy(&out.stdout);
        // It exits 1 when no unit of the list exists, with nothing on stdout.
        if !out.status.success() && !text.trim().is_empty() {
            bail!(
                "systemctl --user list-unit-files failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let files = parse_unit_files(&text);
        let active = if self.manager {
            let out = self
                .command(&["is-active"])
                .args(units)
                .output()
                .context("running systemctl --user is-active")?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let lines: Vec<&str> = text.lines().collect();
            if lines.len() != units.len() {
                bail!(
                    "systemctl --user is-active answered {} lines for {} units",
                    lines.len(),
                    units.len()
                );
            }
            lines
                .into_iter()
                .map(|l| Some(l.trim().to_string()))
                .collect()
        } else {
            vec![None; units.len()]
        };
        Ok(units
            .iter()
            .zip(active)
            .map(|(u, active)| {
                let st = UnitState {
                    file: files.get(*u).cloned(),
                    active,
                };
                (u.to_string(), st)
            })
            .collect())
    }

    /// Has a running manager read the unit files again. Through the manager systemctl
    /// reloads after each change itself, but where systemd is not PID 1 it writes the
    /// links itself and the manager would not see them.
    pub fn reload(&self) -> Result<()> {
        if self.manager {
            self.change(&["daemon-reload"])?;
        }
        Ok(())
    }

    /// Runs `systemctl --user ARGS` (or prints it with `--dry-run`).
    pub fn change(&self, args: &[&str]) -> Result<()> {
        let line = format!("systemctl --user {}", args.join(" "));
        if self.dry_run {
            println!("{line}");
            return Ok(());
        }
        let out = self
            .command(args)
            .output()
            .with_context(|| format!("running {line}"))?;
        if !out.status.success() {
            bail!(
                "{line} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

/// `list-unit-files --no-legend` lines (`UNIT STATE [PRESET]`) as unit → state.
pub fn parse_unit_files(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_file_lines_parse() {
        let m = parse_unit_files(
            "pulseaudio.service     enabled enabled\npulseaudio.socket      masked  enabled\n\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m["pulseaudio.socket"], "masked");
        let st = UnitState {
            file: None,
            active: Some("activating".into()),
        };
        assert!(st.is_active());
    }
}
