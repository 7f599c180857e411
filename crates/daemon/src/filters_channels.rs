//! The `[[filters]]` entries that change the channel count, a channel mixer and a
//! crossover (docs/dsp/filters.md, "Channel mixer and crossover"); `filters::build_chain`
//! checks the count from filter to filter.

use anyhow::{Context, Result, bail};
use quaver_dsp::filter::{ChannelMixer, Crossover, MixerPreset};
use serde::Deserialize;

/// `type = "channel_mixer"`: a matrix, or a preset.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MixerSpec {
    /// One row per output channel, one linear weight per input channel in each.
    #[serde(default)]
    pub matrix: Option<Vec<Vec<f64>>>,
    /// mono_downmix, swap or stereo_to_5_1_front.
    #[serde(default)]
    pub preset: Option<MixerPreset>,
}

/// One frequency, or a list of them.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Freqs {
    /// A 2-way split.
    One(f64),
    /// 1 to 3 splits, rising.
    More(Vec<f64>),
}

/// `type = "crossover"`: Linkwitz–Riley 4th order.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CrossoverSpec {
    /// The split frequency in Hz, or 2 or 3 of them, rising, for 3 or 4 bands.
    pub freq: Freqs,
    /// The output channels as "<input channel>.<band>" (band: low, mid, high or a
    /// number from 0 = lowest); default: each input's bands in turn, low first.
    #[serde(default)]
    pub outputs: Option<Vec<String>>,
}

impl MixerSpec {
    /// The mixer for `channels` channels in.
    pub fn build(&self, channels: usize) -> Result<ChannelMixer> {
        let matrix = match (&self.matrix, self.preset) {
            (Some(m), None) => {
                if let Some(row) = m.iter().position(|r| r.len() != channels) {
                    bail!(
                        "channel_mixer: matrix row {} has {} weights (one per input), but {channels} \
                         channels reach it here",
                        row + 1,
                        m[row].len()
                    );
                }
                m.clone()
            }
            (None, Some(p)) => p
                .matrix(channels)
                .with_context(|| format!("channel_mixer: {channels} channels reach it here"))?,
            _ => bail!("channel_mixer: give either `matrix` or `preset`, not both or neither"),
        };
        Ok(ChannelMixer::new(&matrix)?)
    }
}

impl CrossoverSpec {
    /// The crossover for `channels` channels in at `rate` Hz.
    pub fn build(&self, channels: usize, rate: u32) -> Result<Crossover> {
        let freqs = match &self.freq {
            Freqs::One(f) => vec![*f],
            Freqs::More(v) => v.clone(),
        };
        let bands = freqs.len() + 1;
        let outputs = self
            .outputs
            .as_ref()
            .map(|o| {
                o.iter()
                    .map(|s| parse_output(s, bands))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        Ok(Crossover::new(
            channels,
            rate as f64,
            &freqs,
            outputs.as_deref(),
        )?)
    }
}

/// "1.high" → (1, last band).
fn parse_output(s: &str, bands: usize) -> Result<(usize, usize)> {
    let bad = |why: &str| anyhow::anyhow!("crossover output '{s}': {why}");
    let (ch, band) = s
        .split_once('.')
        .ok_or_else(|| bad("write it as <input channel>.<band>, e.g. 0.low"))?;
    let ch = ch
        .parse()
        .map_err(|_| bad("the input channel is a number from 0"))?;
    let band = match band {
        "low" => 0,
        "high" => bands - 1,
        "mid" if bands == 3 => 1,
        "mid" => {
            return Err(bad(
                "`mid` names the middle of 3 bands; number the bands from 0",
            ));
        }
        n => n
            .parse()
            .map_err(|_| bad("the band is low, mid, high or a number from 0 = lowest"))?,
    };
    Ok((ch, band))
}

#[cfg(test)]
mod tests {
    use crate::filters::tests::parse;
    use crate::filters::{FilterSpec, build_chain};

    fn chain(entries: &str) -> Vec<FilterSpec> {
        parse(&format!(
            "[[filters]]\nsink = \"s\"\nchain = [\n{entries}\n]\n"
        ))
        .unwrap()
        .remove(0)
        .chain
    }

    fn error(entries: &str, channels: usize) -> String {
        format!(
            "{:#}",
            build_chain(&chain(entries), channels, 48_000)
                .err()
                .unwrap()
        )
    }

    #[test]
    fn active_stereo_on_a_quad_sink_builds() {
        let c = build_chain(
            &chain(
                r#"{ type = "channel_mixer", matrix = [[1, 0, 0, 0], [0, 1, 0, 0]] },
                   { type = "crossover", freq = 2000.0 },
                   { type = "gain", gain_db = -3.0 },"#,
            ),
            4,
            48_000,
        )
        .unwrap();
        assert_eq!(c.len(), 3);
        let c = chain(
            r#"{ type = "crossover", freq = [300.0, 3000.0], outputs = ["0.low", "1.low", "0.mid", "1.mid", "0.high", "1.2"] }"#,
        );
        let FilterSpec::Crossover(x) = &c[0] else {
            panic!("{c:?}")
        };
        let built = x.build(2, 48_000).unwrap();
        assert_eq!(
            built.outputs(),
            &[(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
        );
        // 2 → 6 → 2.
        let mut c = c;
        c.push(
            chain(
                r#"{ type = "channel_mixer", matrix = [[1, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1]] }"#,
            )
            .remove(0),
        );
        build_chain(&c, 2, 48_000).unwrap();
    }

    #[test]
    fn channel_count_errors_name_the_entry() {
        let e = error(r#"{ type = "crossover", freq = 2000.0 }"#, 2);
        assert!(
            e.contains("the chain ends with 4 channels, but the sink has 2: filter 1 (crossover) leaves 4; end the chain with a channel_mixer back to 2"),
            "{e}"
        );
        let e = error(
            r#"{ type = "gain", gain_db = 1.0 }, { type = "channel_mixer", matrix = [[1, 0, 0], [0, 1, 0]] }"#,
            2,
        );
        assert!(
            e.contains("filter 2 (channel_mixer, 2 channels in): channel_mixer: matrix row 1 has 3 weights (one per input), but 2 channels reach it here"),
            "{e}"
        );
        let e = error(
            r#"{ type = "crossover", freq = 500.0 }, { type = "channel_mixer", preset = "swap" }"#,
            2,
        );
        assert!(
            e.contains("filter 2 (channel_mixer, 4 channels in): channel_mixer: 4 channels reach it here: channel mixer: swap takes 2 channels in"),
            "{e}"
        );
        let e = error(r#"{ type = "crossover", freq = 30000.0 }"#, 2);
        assert!(
            e.contains(
                "filter 1 (crossover, 2 channels in): frequency 30000 Hz is outside (0, 24000) Hz"
            ),
            "{e}"
        );
        let e = error(
            r#"{ type = "crossover", freq = 1000.0, outputs = ["0.mid"] }"#,
            2,
        );
        assert!(
            e.contains("crossover output '0.mid': `mid` names the middle of 3 bands"),
            "{e}"
        );
        let e = error(
            r#"{ type = "crossover", freq = 1000.0, outputs = ["3.low", "0.high"] }"#,
            2,
        );
        assert!(
            e.contains("an output names an input channel the crossover does not get"),
            "{e}"
        );
        let e = error(
            r#"{ type = "channel_mixer", preset = "swap", matrix = [[1, 0], [0, 1]] }"#,
            2,
        );
        assert!(e.contains("either `matrix` or `preset`"), "{e}");
        let e = parse(
            "[[filters]]\nsink = \"s\"\nchain = [{ type = \"crossover\", frequency = 1.0 }]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("frequency") && e.contains("line 3"), "{e}");
        let e = parse("[[filters]]\nsink = \"s\"\nchain = [{ type = \"channel_mixer\", preset = \"mono\" }]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mono_downmix"), "{e}");
    }

    #[test]
    fn weights_and_splits_change_live_on_sighup_and_other_changes_rebuild() {
        use crate::filters_reload::chain_changes;
        let old = chain(
            r#"{ type = "channel_mixer", matrix = [[1, 0], [0, 1]] },
               { type = "crossover", freq = 1000.0 }, { type = "channel_mixer", preset = "mono_downmix" }"#,
        );
        let new = chain(
            r#"{ type = "channel_mixer", matrix = [[0.5, 0], [0, 1]] },
               { type = "crossover", freq = 1000.0 }, { type = "channel_mixer", preset = "mono_downmix" }"#,
        );
        assert_eq!(
            chain_changes(&old, &new),
            Some(vec![(0, "gain_0_0".to_string(), 0.5)])
        );
        let other_freq = chain(
            r#"{ type = "channel_mixer", matrix = [[1, 0], [0, 1]] },
               { type = "crossover", freq = 1200.0 }, { type = "channel_mixer", preset = "mono_downmix" }"#,
        );
        // A split frequency is a live control too (filters_reload's own test).
        assert_eq!(
            chain_changes(&old, &other_freq),
            Some(vec![(1, "freq".to_string(), 1200.0)])
        );
        let other_shape = chain(
            r#"{ type = "channel_mixer", matrix = [[1, 0]] },
               { type = "crossover", freq = 1000.0 }, { type = "channel_mixer", preset = "mono_downmix" }"#,
        );
        assert_eq!(chain_changes(&old, &other_shape), None);
    }

    #[test]
    fn the_annotated_example_builds_for_a_4_channel_sink() {
        let text = include_str!("../../../config/quaver.toml");
        let block: String = text
            .lines()
            .skip_while(|l| !l.starts_with("# Channel mixer and crossover"))
            .skip_while(|l| *l != "# [[filters]]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
            .collect();
        let chains = parse(&block).unwrap();
        assert_eq!(chains[0].chain.len(), 3, "{block}");
        let chain = build_chain(&chains[0].chain, 4, 48_000).unwrap();
        assert_eq!(chain.latency(), 24);
        let e = format!(
            "{:#}",
            build_chain(&chains[0].chain, 2, 48_000).err().unwrap()
        );
        assert!(e.contains("matrix row 1 has 4 weights"), "{e}");
    }
}
