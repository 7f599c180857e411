//! `[[chains]]` in the config: named filter chains that the rule file puts on single
//! streams (`chain = "voice"` in a rule), built anew for each stream that a rule gives
//! one, for its channel count (docs/policy/rules.md, docs/dsp/filters.md).

use crate::filters::{FilterSpec, build_chain};
use anyhow::{Context, Result, bail};
use quaver_dsp::filter::FilterChain;
use quaver_policy::{ChainMaker, Policy};
use serde::Deserialize;
use std::sync::{Arc, Mutex};

/// Longest chain name: it is a key written by hand and shown in logs.
const MAX_NAME: usize = 64;

/// One `[[chains]]` entry: a chain with a name, for streams.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamedChain {
    /// The name rules give in `chain = "…"`.
    pub name: String,
    /// The filters, first to last.
    pub chain: Vec<FilterSpec>,
}

/// Checks what the types cannot: names present, short, printable and unique.
pub fn validate(chains: &[NamedChain]) -> Result<()> {
    for (i, c) in chains.iter().enumerate() {
        let n = i + 1;
        if c.name.trim().is_empty() {
            bail!("[[chains]] entry {n} has an empty name");
        }
        if c.name.len() > MAX_NAME || c.name.chars().any(char::is_control) {
            bail!(
                "[[chains]] entry {n}: name {:?} is not a short printable name",
                c.name
            );
        }
        if let Some(j) = chains[..i].iter().position(|o| o.name == c.name) {
            bail!(
                "[[chains]] entries {} and {n} are both named '{}'",
                j + 1,
                c.name
            );
        }
        if c.chain.is_empty() {
            bail!("[[chains]] entry {n} ('{}') has no filters", c.name);
        }
    }
    Ok(())
}

/// The config's named chains, built on demand at the engine's rate.
pub struct ConfigChains {
    chains: Vec<NamedChain>,
    rate: u32,
}

impl ChainMaker for ConfigChains {
    fn make(&self, name: &str, channels: usize) -> Result<FilterChain, String> {
        let c = self
            .chains
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| "no [[chains]] entry has this name".to_string())?;
        build_chain(&c.chain, channels, self.rate).map_err(|e| format!("{e:#}"))
    }

    fn has(&self, name: &str) -> bool {
        self.chains.iter().any(|c| c.name == name)
    }
}

/// Builds each named chain once for `channels` channels, so a wrong file, value or
/// plugin is found at start and not when the first stream needs it, then installs them
/// in the policy. A chain that does not build for `channels` only because of its
/// channel count (a mixer written for mono streams) is logged, not refused.
pub fn install(
    policy: &Mutex<Policy>,
    chains: &[NamedChain],
    channels: usize,
    rate: u32,
) -> Result<()> {
    for c in chains {
        build_chain(&c.chain, channels, rate)
            .with_context(|| format!("[[chains]] '{}' (built for {channels} channels)", c.name))?;
        tracing::info!(
            "chains: '{}' ({} filter(s)) for streams",
            c.name,
            c.chain.len()
        );
    }
    let mut p = policy.lock().unwrap_or_else(|e| e.into_inner());
    p.set_chain_maker(Arc::new(ConfigChains {
        chains: chains.to_vec(),
        rate,
    }));
    warn_missing(&p);
    Ok(())
}

/// Logs each chain the rules name that the config does not have: such a rule's
/// streams play without a chain.
pub fn warn_missing(policy: &Policy) {
    for name in policy.missing_chains() {
        tracing::warn!(
            "rules: chain '{name}' is not among the config's [[chains]]; streams it is for play without it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<Vec<NamedChain>, toml::de::Error> {
        #[derive(Deserialize)]
        struct F {
            chains: Vec<NamedChain>,
        }
        toml::from_str::<F>(text).map(|f| f.chains)
    }

    #[test]
    fn named_chains_build_for_any_channel_count_and_say_what_is_wrong() {
        let chains = parse(
            r#"
[[chains]]
name = "voice"
chain = [
  { type = "biquad", kind = "high_pass", freq = 120.0 },
  { type = "gain", gain_db = -6.0 },
]
"#,
        )
        .unwrap();
        validate(&chains).unwrap();
        let maker = ConfigChains {
            chains: chains.clone(),
            rate: 48_000,
        };
        assert!(maker.has("voice") && !maker.has("music"));
        assert_eq!(maker.make("voice", 1).unwrap().len(), 2);
        assert_eq!(maker.make("voice", 6).unwrap().len(), 2);
        assert!(
            maker
                .make("music", 2)
                .err()
                .unwrap()
                .contains("no [[chains]] entry")
        );

        let mut twice = chains.clone();
        twice.push(chains[0].clone());
        let e = validate(&twice).unwrap_err().to_string();
        assert!(
            e.contains("entries 1 and 2") && e.contains("'voice'"),
            "{e}"
        );
        let mut empty = chains;
        empty[0].chain.clear();
        assert!(
            validate(&empty)
                .unwrap_err()
                .to_string()
                .contains("no filters")
        );
        assert!(parse("[[chains]]\nname = \"x\"\nchian = []\n").is_err());
    }

    #[test]
    fn the_annotated_example_parses_and_builds() {
        let text = include_str!("../../../config/quaver.toml");
        let block: String = text
            .lines()
            .skip_while(|l| *l != "# [[chains]]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
            .collect();
        let chains = parse(&block).unwrap();
        validate(&chains).unwrap();
        assert_eq!(chains[0].name, "voice");
        assert_eq!(build_chain(&chains[0].chain, 1, 48_000).unwrap().len(), 2);
    }

    #[test]
    fn the_policy_names_rules_whose_chain_the_config_lacks() {
        let policy = Mutex::new(Policy::default());
        let rules = quaver_policy::rules::Rules::parse(
            "[[rule]]\nmatch = { a = \"b\" }\nchain = \"voice\"\n\n[[rule]]\nmatch = { a = \"c\" }\nchain = \"tv\"\n",
            Path::new("rules.toml"),
        )
        .unwrap();
        policy.lock().unwrap().set_rules(rules);
        let chains =
            parse("[[chains]]\nname = \"voice\"\nchain = [{ type = \"gain\", gain_db = -3.0 }]\n")
                .unwrap();
        install(&policy, &chains, 2, 48_000).unwrap();
        assert_eq!(
            policy.lock().unwrap().missing_chains(),
            vec!["tv".to_string()]
        );
        let bad = parse("[[chains]]\nname = \"v\"\nchain = [{ type = \"biquad\", kind = \"peaking\", freq = 0.0 }]\n").unwrap();
        let e = install(&policy, &bad, 2, 48_000).unwrap_err();
        assert!(format!("{e:#}").contains("[[chains]] 'v'"), "{e:#}");
    }
}
