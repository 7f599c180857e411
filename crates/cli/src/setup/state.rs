//! The state file of `quaver setup`: what every touched unit was before, and what setup
//! changed, so that `--undo` reverses exactly that and checks the result.

use super::systemctl::UnitState;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version of the file's layout.
const VERSION: u32 = 1;

/// One unit as it was before setup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Before {
    /// Unit name.
    pub unit: String,
    /// Its enablement (`enabled`, `masked`, …); `None`: not installed.
    pub file: Option<String>,
    /// Whether it ran; `None`: unknown (no user manager answered).
    pub active: Option<bool>,
}

impl Before {
    /// The record of `unit` in state `st`.
    pub fn of(unit: &str, st: &UnitState) -> Before {
        Before {
            unit: unit.to_string(),
            file: st.file.clone(),
            active: st.active.as_ref().map(|_| st.is_active()),
        }
    }
}

/// What setup found and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupState {
    /// Layout version.
    pub version: u32,
    /// When setup ran (seconds since the epoch).
    pub time: u64,
    /// Every unit setup looked at, as it was.
    pub before: Vec<Before>,
    /// Units setup stopped (to start again on undo).
    pub stopped: Vec<String>,
    /// Units setup masked (to unmask on undo).
    pub masked: Vec<String>,
    /// Units setup enabled (to disable on undo).
    pub enabled: Vec<String>,
    /// Units setup started (to stop on undo).
    pub started: Vec<String>,
}

impl SetupState {
    /// An empty record of `before`.
    pub fn new(before: Vec<Before>) -> SetupState {
        SetupState {
            version: VERSION,
            time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            before,
            stopped: Vec::new(),
            masked: Vec::new(),
            enabled: Vec::new(),
            started: Vec::new(),
        }
    }

    /// Reads the file at `path`; None when there is none.
    pub fn load(path: &Path) -> Result<Option<SetupState>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let st: SetupState = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a quaver setup state file", path.display()))?;
        if st.version != VERSION {
            anyhow::bail!(
                "{} has layout version {}, this quaver reads {VERSION}",
                path.display(),
                st.version
            );
        }
        Ok(Some(st))
    }

    /// Writes the file (its directory created), replacing it whole.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
    }
}

/// `$XDG_STATE_HOME/quaver/setup.json`, else `~/.local/state/quaver/setup.json`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    Some(base.join("quaver").join("setup.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_loads_and_refuses_strangers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q/setup.json");
        assert_eq!(SetupState::load(&path).unwrap(), None);
        let mut st = SetupState::new(vec![Before {
            unit: "pulseaudio.socket".into(),
            file: Some("enabled".into()),
            active: None,
        }]);
        st.masked.push("pulseaudio.socket".into());
        st.save(&path).unwrap();
        assert_eq!(SetupState::load(&path).unwrap(), Some(st.clone()));
        std::fs::write(&path, "{}").unwrap();
        let e = format!("{:#}", SetupState::load(&path).unwrap_err());
        assert!(e.contains("not a quaver setup state file"), "{e}");
        st.version = 9;
        st.save(&path).unwrap();
        let e = format!("{:#}", SetupState::load(&path).unwrap_err());
        assert!(e.contains("layout version 9"), "{e}");
    }
}
