//! `[[echo_cancel]]` in the config: echo-cancel pairs made at start-up, as PulseAudio's
//! module-echo-cancel makes them (docs/dsp/echo-cancel.md).

use anyhow::{Result, bail};
use quaver_dsp::ChannelMap;
use quaver_engine::Engine;
use quaver_engine::echo::{self, EchoPair, EchoSpec};
use serde::Deserialize;

/// One `[[echo_cancel]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EchoCancel {
    /// The microphone: a source node's name (or a sink's, for its monitor), as
    /// `quaver ls` shows it.
    pub source_master: String,
    /// The speakers: a sink node's name; what it plays is cancelled.
    pub sink_master: String,
    /// The cleaned source's name (default `<source_master>.echo-cancel`).
    #[serde(default)]
    pub source_name: Option<String>,
    /// The name of the sink that plays on `sink_master` (default
    /// `<sink_master>.echo-cancel`).
    #[serde(default)]
    pub sink_name: Option<String>,
    /// Channels of the cleaned source (the same signal on each; default 1).
    #[serde(default = "one")]
    pub channels: usize,
}

fn one() -> usize {
    1
}

/// Makes every configured pair; they run as long as the returned pairs are kept.
pub fn start(engine: &Engine, list: &[EchoCancel]) -> Result<Vec<EchoPair>> {
    let mut pairs = Vec::new();
    for (i, e) in list.iter().enumerate() {
        if !(1..=32).contains(&e.channels) {
            bail!(
                "echo_cancel #{}: channels={} is not 1-32",
                i + 1,
                e.channels
            );
        }
        let source_name = e
            .source_name
            .clone()
            .unwrap_or_else(|| format!("{}.echo-cancel", e.source_master));
        let sink_name = e
            .sink_name
            .clone()
            .unwrap_or_else(|| format!("{}.echo-cancel", e.sink_master));
        let spec = EchoSpec {
            source_description: format!("{} (echo cancelled)", e.source_master),
            sink_description: format!("{} (echo cancelled)", e.sink_master),
            source_name,
            sink_name,
            source_master: e.source_master.clone(),
            sink_master: e.sink_master.clone(),
            channels: ChannelMap::default_for(e.channels),
        };
        match echo::add(engine, &spec) {
            Ok(p) => pairs.push(p),
            Err(err) => bail!(
                "echo_cancel #{} ({} with {}): {err}",
                i + 1,
                e.source_master,
                e.sink_master
            ),
        }
        tracing::info!(
            "echo cancellation: {} cleaned of what {} plays",
            e.source_master,
            e.sink_master
        );
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use std::path::Path;

    #[test]
    fn the_annotated_example_parses_and_unknown_keys_are_refused() {
        let text = include_str!("../../../config/quaver.toml");
        let block: String = text
            .lines()
            .skip_while(|l| *l != "# [[echo_cancel]]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
            .collect();
        let cfg = Config::parse(&block, Path::new("q.toml")).unwrap();
        let e = &cfg.echo_cancel[0];
        assert_eq!(
            (e.source_master.as_str(), e.sink_master.as_str(), e.channels),
            ("null-source", "null-sink", 1)
        );
        assert_eq!(e.source_name.as_deref(), Some("mic-ec"));
        let err = Config::parse(
            "[[echo_cancel]]\nsource_master = \"a\"\nsink_master = \"b\"\nmethod = \"x\"\n",
            Path::new("q.toml"),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("method"), "{err:#}");
    }
}
