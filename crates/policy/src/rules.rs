//! Rules: one file that says where streams go and what role they play, by their
//! properties — instead of WirePlumber's scripts or PulseAudio's many restore modules.
//!
//! ```toml
//! [[rule]]
//! match = { "application.name" = "mpv" }
//! target = "hdmi-sink"
//!
//! [[rule]]
//! match = { "application.process.binary" = "zoom*" }
//! role = "phone"
//! chain = "voice"
//! volume = 0.8
//! ```
//!
//! A rule applies to a stream when every property it names matches (`*` stands for any
//! run of characters, anything else is literal). The first rule that applies to a stream
//! decides each action it sets. `target` is the sink (playback) or source (record) the
//! stream goes to when it names none itself; `role` is the role it has for ducking
//! ([`crate::roles`]) when it states none; `chain` is a named filter chain of the
//! config run on the stream alone; `volume` its starting volume when neither the client
//! nor stream restore gives one. docs/policy/rules.md.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Longest rule file read, bytes: rules are written by hand.
const MAX_FILE: u64 = 1 << 20;

/// One rule: which streams, and what to do with them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Properties a stream must have, each a pattern (`*`: any run of characters).
    #[serde(rename = "match")]
    pub matches: BTreeMap<String, String>,
    /// The sink or source the stream goes to when it names none.
    #[serde(default)]
    pub target: Option<String>,
    /// The stream's role when it states none.
    #[serde(default)]
    pub role: Option<String>,
    /// The stream's own filter chain: a named `[[filters]]` entry of the config.
    #[serde(default)]
    pub chain: Option<String>,
    /// The stream's starting volume, as pactl and pavucontrol show it (1.0 is 100 %,
    /// 0.5 is 50 %, about −18 dB), when the client sets none and stream restore
    /// remembers none.
    #[serde(default)]
    pub volume: Option<f64>,
}

/// Highest rule volume: 150 %, pavucontrol's slider end.
pub const MAX_RULE_VOLUME: f64 = 1.5;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default, rename = "rule")]
    rules: Vec<Rule>,
}

/// Why a rule file is refused.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The file could not be read.
    #[error("{path}: {err}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        err: std::io::Error,
    },
    /// The file is not a rule file (syntax, an unknown key; the message has the line).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A rule parses but cannot work.
    #[error("{path}: rule {index} (line {line}): {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The rule's number, from 1.
        index: usize,
        /// The line its `[[rule]]` header is on.
        line: usize,
        /// What is wrong.
        why: String,
    },
}

/// A rule file, read and checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rules {
    rules: Vec<Rule>,
}

impl Rules {
    /// No rules.
    pub fn none() -> Rules {
        Rules::default()
    }

    /// Reads and checks the rule file at `path`.
    pub fn load(path: &Path) -> Result<Rules, RulesError> {
        let read = |err| RulesError::Read {
            path: path.to_path_buf(),
            err,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > MAX_FILE {
            return Err(RulesError::Parse {
                path: path.to_path_buf(),
                message: format!("{len} bytes; a rule file has at most {MAX_FILE}"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Rules::parse(&text, path)
    }

    /// Checks the rules in `text`, read from `path` (for the messages).
    pub fn parse(text: &str, path: &Path) -> Result<Rules, RulesError> {
        let file: RuleFile = toml::from_str(text).map_err(|e| RulesError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        // Where each rule starts, for messages about rules that parse.
        let headers: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with("[[rule]]"))
            .map(|(i, _)| i + 1)
            .collect();
        for (i, r) in file.rules.iter().enumerate() {
            let why = if r.matches.is_empty() {
                Some("`match` names no property (it would apply to every stream)".to_string())
            } else if let Some(k) = r.matches.keys().find(|k| k.trim().is_empty()) {
                Some(format!("`match` has an empty property name {k:?}"))
            } else if r.target.is_none()
                && r.role.is_none()
                && r.chain.is_none()
                && r.volume.is_none()
            {
                Some("no action: set `target`, `role`, `chain` or `volume`".to_string())
            } else if r.chain.as_deref().is_some_and(str::is_empty) {
                Some("`chain` is empty".to_string())
            } else if let Some(v) = r.volume.filter(|v| !(0.0..=MAX_RULE_VOLUME).contains(v)) {
                Some(format!(
                    "`volume` {v} is outside 0.0–{MAX_RULE_VOLUME} (1.0 is 100 %)"
                ))
            } else if r.target.as_deref().is_some_and(str::is_empty) {
                Some("`target` is empty".to_string())
            } else if r.role.as_deref().is_some_and(str::is_empty) {
                Some("`role` is empty".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                return Err(RulesError::Invalid {
                    path: path.to_path_buf(),
                    index: i + 1,
                    line: headers.get(i).copied().unwrap_or(0),
                    why,
                });
            }
        }
        Ok(Rules { rules: file.rules })
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The target of the first rule with one that applies to a stream whose properties
    /// `prop` gives.
    pub fn target(&self, prop: &dyn Fn(&str) -> Option<String>) -> Option<&str> {
        self.rules
            .iter()
            .filter(|r| applies(r, prop))
            .find_map(|r| r.target.as_deref())
    }

    /// The role of the first rule with one that applies to the stream.
    pub fn role(&self, prop: &dyn Fn(&str) -> Option<String>) -> Option<&str> {
        self.rules
            .iter()
            .filter(|r| applies(r, prop))
            .find_map(|r| r.role.as_deref())
    }

    /// The chain of the first rule with one that applies to the stream.
    pub fn chain(&self, prop: &dyn Fn(&str) -> Option<String>) -> Option<&str> {
        self.rules
            .iter()
            .filter(|r| applies(r, prop))
            .find_map(|r| r.chain.as_deref())
    }

    /// The starting volume of the first rule with one that applies to the stream, as a
    /// linear gain (the rule's pactl-style fraction, cubed as PulseAudio's scale is).
    pub fn volume(&self, prop: &dyn Fn(&str) -> Option<String>) -> Option<f32> {
        self.rules
            .iter()
            .filter(|r| applies(r, prop))
            .find_map(|r| r.volume)
            .map(|v| v.powi(3) as f32)
    }

    /// The chains the rules name, each once, for checking them against the config.
    pub fn chains(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .rules
            .iter()
            .filter_map(|r| r.chain.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// Whether every property `rule` names matches the stream's.
fn applies(rule: &Rule, prop: &dyn Fn(&str) -> Option<String>) -> bool {
    rule.matches
        .iter()
        .all(|(k, pat)| prop(k).is_some_and(|v| wildcard(pat, &v)))
}

/// Whether `text` matches `pattern`, where `*` matches any run of characters (a glob
/// crate would bring character classes nobody needs here, and a dependency).
fn wildcard(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for p in middle {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn wildcards_match_runs_of_characters() {
        assert!(wildcard("mpv", "mpv"));
        assert!(!wildcard("mpv", "mpv2"));
        assert!(wildcard("zoom*", "zoom.real"));
        assert!(wildcard("*fox*", "firefox-esr"));
        assert!(wildcard("a*b*c", "aXbYc"));
        assert!(!wildcard("a*b*c", "aXcYb"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("ab*ba", "aba"));
    }

    #[test]
    fn the_first_rule_that_applies_decides_each_action() {
        let text = r#"
[[rule]]
match = { "application.name" = "mpv", "media.role" = "video" }
target = "tv-sink"

[[rule]]
match = { "application.name" = "mpv" }
target = "speakers"
role = "music"
"#;
        let r = Rules::parse(text, Path::new("rules.toml")).unwrap();
        assert_eq!(r.len(), 2);
        let video = props(&[("application.name", "mpv"), ("media.role", "video")]);
        assert_eq!(r.target(&video), Some("tv-sink"));
        assert_eq!(r.role(&video), Some("music"));
        let plain = props(&[("application.name", "mpv")]);
        assert_eq!(r.target(&plain), Some("speakers"));
        assert_eq!(r.target(&props(&[("application.name", "vlc")])), None);
    }

    #[test]
    fn a_typo_is_named_with_its_line() {
        let text = "[[rule]]\nmatch = { \"application.name\" = \"mpv\" }\ntargte = \"hdmi\"\n";
        let e = Rules::parse(text, Path::new("rules.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rules.toml"), "{e}");
        assert!(e.contains("line 3"), "{e}");
        assert!(e.contains("unknown field `targte`"), "{e}");
    }

    #[test]
    fn rules_that_cannot_work_are_refused() {
        let e = |text: &str| {
            Rules::parse(text, Path::new("r.toml"))
                .unwrap_err()
                .to_string()
        };
        let s = e("[[rule]]\nmatch = {}\ntarget = \"x\"\n");
        assert!(
            s.contains("rule 1 (line 1)") && s.contains("every stream"),
            "{s}"
        );
        let s = e("# hi\n\n[[rule]]\nmatch = { a = \"b\" }\n");
        assert!(
            s.contains("rule 1 (line 3)") && s.contains("no action"),
            "{s}"
        );
        assert!(e("[[rule]]\nmatch = { a = \"b\" }\ntarget = \"\"\n").contains("empty"));
        assert!(e("[[rule]]\nmatch = { a = \"b\" }\ntarget = 3\n").contains("line 3"));
        assert!(Rules::parse("", Path::new("r.toml")).unwrap().is_empty());
        let s = e("[[rule]]\nmatch = { a = \"b\" }\nvolume = 2.0\n");
        assert!(s.contains("`volume` 2 is outside"), "{s}");
        assert!(e("[[rule]]\nmatch = { a = \"b\" }\nchain = \"\"\n").contains("`chain` is empty"));
    }

    #[test]
    fn chains_and_volumes_come_from_the_first_rule_that_sets_them() {
        let text = r#"
[[rule]]
match = { "media.role" = "phone" }
chain = "voice"

[[rule]]
match = { "application.name" = "mpv" }
chain = "loudness"
volume = 0.5
"#;
        let r = Rules::parse(text, Path::new("rules.toml")).unwrap();
        let call = props(&[("application.name", "mpv"), ("media.role", "phone")]);
        assert_eq!(r.chain(&call), Some("voice"));
        assert_eq!(r.volume(&call), Some(0.125));
        assert_eq!(r.chain(&props(&[("application.name", "vlc")])), None);
        assert_eq!(r.volume(&props(&[("application.name", "vlc")])), None);
        assert_eq!(r.chains(), vec!["loudness", "voice"]);
    }
}
