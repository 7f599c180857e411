//! `[[filters]]` in the config: filter chains put on device sinks at start-up
//! (docs/dsp/filters.md). Every stream that plays to the sink passes through.

use crate::filters_channels::{CrossoverSpec, MixerSpec};
use crate::plugins::{LadspaSpec, Lv2Spec, Mute, PluginError, PluginSpec};
use anyhow::{Context, Result, bail};
use quaver_dsp::filter::{
    Biquad, BiquadKind, BiquadParams, Convolver, Delay, Filter, FilterChain, Gain, Limiter,
};
use quaver_engine::Engine;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The longest impulse response a convolver loads, in seconds: room correction needs
/// well under one, a long hall reverb a few; more is a wrong file, and would cost
/// memory (two spectra per channel) and CPU for nothing.
pub const MAX_IMPULSE_SECONDS: u32 = 10;

/// One `[[filters]]` entry: a chain for one sink.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SinkChain {
    /// The sink node's name, as `quaver ls` shows it (e.g. "null-sink").
    pub sink: String,
    /// The filters, first to last.
    pub chain: Vec<FilterSpec>,
}

/// One filter of a chain, as the config writes it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FilterSpec {
    /// An RBJ biquad.
    Biquad {
        /// peaking, low_shelf, high_shelf, low_pass, high_pass, notch or all_pass.
        kind: BiquadKind,
        /// Centre or corner frequency, Hz.
        freq: f64,
        /// Quality factor (0.707 when absent).
        #[serde(default = "default_q")]
        q: f64,
        /// Boost or cut, dB (peaking and shelves).
        #[serde(default)]
        gain_db: f64,
    },
    /// A gain, dB.
    Gain {
        /// The gain.
        gain_db: f64,
    },
    /// A delay per channel, whole frames.
    Delay {
        /// One value for every channel, or one per channel.
        frames: Vec<usize>,
        /// Longest delay the line holds, so it can change live (default: the largest
        /// of `frames`).
        #[serde(default)]
        max_frames: Option<usize>,
    },
    /// A lookahead limiter.
    Limiter {
        /// Ceiling, dBFS.
        threshold_db: f64,
        /// Lookahead (and attack and added latency), ms.
        #[serde(default = "default_lookahead")]
        lookahead_ms: f64,
        /// Release time constant, ms.
        #[serde(default = "default_release")]
        release_ms: f64,
    },
    /// A partitioned FFT convolver with the impulse response in a WAV file.
    Convolver {
        /// The WAV file: one channel for every channel, or one per channel, at the
        /// engine's rate.
        ir: PathBuf,
        /// Partition size, frames (a power of two; near the quantum is cheapest).
        #[serde(default = "default_partition")]
        partition: usize,
    },
    /// A channel mixer: output channels as weighted sums of the input channels.
    ChannelMixer(MixerSpec),
    /// A Linkwitz–Riley crossover: each input channel split into bands, each band an
    /// output channel.
    Crossover(CrossoverSpec),
    /// A LADSPA plugin (docs/dsp/plugins.md).
    Ladspa(LadspaSpec),
    /// An LV2 plugin (docs/dsp/plugins.md).
    Lv2(Lv2Spec),
}

fn default_q() -> f64 {
    std::f64::consts::FRAC_1_SQRT_2
}
fn default_lookahead() -> f64 {
    5.0
}
fn default_release() -> f64 {
    50.0
}
fn default_partition() -> usize {
    1024
}

impl FilterSpec {
    /// Builds the filter for `channels` channels at `rate` Hz (control thread); for a
    /// channel mixer or crossover, `channels` is what it takes in.
    pub fn build(&self, channels: usize, rate: u32) -> Result<Box<dyn Filter>> {
        let r = rate as f64;
        Ok(match self {
            FilterSpec::Biquad {
                kind,
                freq,
                q,
                gain_db,
            } => {
                let p = BiquadParams {
                    kind: *kind,
                    freq: *freq,
                    q: *q,
                    gain_db: *gain_db,
                };
                Box::new(Biquad::new(channels, r, p)?)
            }
            FilterSpec::Gain { gain_db } => Box::new(Gain::new(*gain_db)?),
            FilterSpec::Delay { frames, max_frames } => {
                let longest = frames.iter().copied().max().unwrap_or(0);
                let max = max_frames.unwrap_or(longest);
                // A minute at 384 kHz: beyond it a value is a typo, and the line is memory.
                if max > 60 * 384_000 {
                    bail!("delay of {max} frames is longer than a minute");
                }
                Box::new(Delay::new(channels, max, frames)?)
            }
            FilterSpec::Limiter {
                threshold_db,
                lookahead_ms,
                release_ms,
            } => Box::new(Limiter::new(
                channels,
                r,
                *threshold_db,
                *lookahead_ms,
                *release_ms,
            )?),
            FilterSpec::Convolver { ir, partition } => {
                let irs = load_impulse(ir, channels, rate)?;
                Box::new(Convolver::new(channels, &irs, *partition)?)
            }
            FilterSpec::ChannelMixer(m) => Box::new(m.build(channels)?),
            FilterSpec::Crossover(x) => Box::new(x.build(channels, rate)?),
            FilterSpec::Ladspa(s) => plugin(PluginSpec::Ladspa(s.clone()), channels, rate)?,
            FilterSpec::Lv2(s) => plugin(PluginSpec::Lv2(s.clone()), channels, rate)?,
        })
    }
}

/// The name of a filter's `type`, for messages.
fn kind(f: &FilterSpec) -> &'static str {
    match f {
        FilterSpec::Biquad { .. } => "biquad",
        FilterSpec::Gain { .. } => "gain",
        FilterSpec::Delay { .. } => "delay",
        FilterSpec::Limiter { .. } => "limiter",
        FilterSpec::Convolver { .. } => "convolver",
        FilterSpec::ChannelMixer(_) => "channel_mixer",
        FilterSpec::Crossover(_) => "crossover",
        FilterSpec::Ladspa(_) => "ladspa",
        FilterSpec::Lv2(_) => "lv2",
    }
}

/// Builds `specs` as a chain for a sink of `channels` channels at `rate` Hz. Each
/// filter is built for the channels that reach it (a channel mixer or crossover
/// changes the count for those after it), and the chain must end with the sink's
/// count; errors name the filter (from 1, as the config lists them) and its type.
pub fn build_chain(specs: &[FilterSpec], channels: usize, rate: u32) -> Result<FilterChain> {
    let mut now = channels;
    let mut last_change = None;
    let mut filters: Vec<Box<dyn Filter>> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let f = spec
            .build(now, rate)
            .with_context(|| format!("filter {} ({}, {now} channels in)", i + 1, kind(spec)))?;
        if let Some((_, out)) = f.channels_in_out() {
            now = out;
            last_change = Some((i + 1, kind(spec)));
        }
        filters.push(f);
    }
    if now != channels {
        let (i, k) = last_change.unwrap_or((0, "none"));
        bail!(
            "the chain ends with {now} channels, but the sink has {channels}: filter {i} ({k}) \
             leaves {now}; end the chain with a channel_mixer back to {channels}"
        );
    }
    Ok(FilterChain::for_channels(filters, channels)?)
}

/// Checks what the chains' types cannot: one chain per sink. A chain is a list run in
/// order on one device sink's mix and names no other chain or node, so chains cannot
/// form a cycle; a second chain for the same sink would silently replace the first.
pub fn validate(chains: &[SinkChain]) -> Result<()> {
    for (i, c) in chains.iter().enumerate() {
        if let Some(j) = chains[..i].iter().position(|o| o.sink == c.sink) {
            bail!(
                "[[filters]] entries {} and {} are both for sink '{}': give it one chain \
                 (filters run in the order of its list)",
                j + 1,
                i + 1,
                c.sink
            );
        }
    }
    Ok(())
}

/// A plugin, probed in a child quaverd first: this process's own executable through
/// /proc/self/exe, which runs even after a package upgrade replaced the file.
fn plugin(spec: PluginSpec, channels: usize, rate: u32) -> Result<Box<dyn Filter>> {
    let exe = Path::new("/proc/self/exe");
    Ok(Box::new(spec.build_probed(exe, channels, rate)?))
}

/// Reads an impulse response from a WAV file: one response per file channel.
pub fn load_impulse(path: &Path, channels: usize, rate: u32) -> Result<Vec<Vec<f32>>> {
    let reader = hound::WavReader::open(path).with_context(|| {
        format!(
            "impulse response {}: not a readable WAV file",
            path.display()
        )
    })?;
    let spec = reader.spec();
    let ch = spec.channels as usize;
    if spec.sample_rate != rate {
        bail!(
            "impulse response {}: recorded at {} Hz, the engine runs at {rate} Hz (resample it)",
            path.display(),
            spec.sample_rate
        );
    }
    if ch != 1 && ch != channels {
        bail!(
            "impulse response {}: {ch} channels for a {channels}-channel sink (give 1 or {channels})",
            path.display()
        );
    }
    let frames = reader.duration() as u64;
    if frames > MAX_IMPULSE_SECONDS as u64 * rate as u64 {
        bail!(
            "impulse response {}: {:.1} s long, more than the {MAX_IMPULSE_SECONDS} s a convolver takes",
            path.display(),
            frames as f64 / rate as f64
        );
    }
    let samples: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader.into_samples::<f32>().collect::<Result<_, _>>(),
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<Result<_, _>>()
        }
    }
    .with_context(|| format!("impulse response {}: reading samples", path.display()))?;
    Ok((0..ch)
        .map(|c| samples.iter().skip(c).step_by(ch).copied().collect())
        .collect())
}

/// Builds each configured chain and puts it on its sink. A sink that does not exist
/// (a card not plugged in) is logged and skipped; a chain that cannot be built is an
/// error naming the sink and the filter.
pub fn attach(engine: &Engine, chains: &[SinkChain]) -> Result<()> {
    for c in chains {
        let found = engine.inspect(|g| g.node_by_name(&c.sink).map(|n| (n.id, n.inputs.len())));
        let Some((id, channels)) = found else {
            tracing::warn!("filters: no sink named '{}'; its chain is not used", c.sink);
            continue;
        };
        let built = build_chain(&c.chain, channels, engine.rate())
            .with_context(|| format!("filters for sink '{}'", c.sink));
        let chain = match built {
            Ok(chain) => chain,
            // A plugin that cannot be used (not installed, crashed in its probe,
            // refused) mutes its sink; the daemon and every other sink go on.
            Err(e) if e.chain().any(|c| c.is::<PluginError>()) => {
                tracing::error!("{e:#}; sink '{}' is muted until its chain is fixed", c.sink);
                FilterChain::new(vec![Box::new(Mute)])
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            "filters: {} filter(s) on '{}', {} frames of added latency",
            chain.len(),
            c.sink,
            chain.latency()
        );
        engine
            .set_sink_filter(id, Some(chain))
            .with_context(|| format!("filters for sink '{}'", c.sink))?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `[[filters]]` entries from a TOML text (shared with `filters_channels`' tests).
    pub(crate) fn parse(text: &str) -> Result<Vec<SinkChain>, toml::de::Error> {
        #[derive(Deserialize)]
        struct T {
            filters: Vec<SinkChain>,
        }
        toml::from_str::<T>(text).map(|t| t.filters)
    }

    #[test]
    fn every_kind_parses_and_builds() {
        let dir = tempfile::tempdir().unwrap();
        let ir = dir.path().join("ir.wav");
        let mut impulse = vec![0f32; 2000];
        impulse[0] = 1.0;
        quaver_testkit::write_wav_f32(&ir, 48_000, 1, &impulse);
        let text = format!(
            r#"
[[filters]]
sink = "null-sink"
chain = [
  {{ type = "biquad", kind = "low_shelf", freq = 80.0, gain_db = 4.0 }},
  {{ type = "gain", gain_db = -3.0 }},
  {{ type = "delay", frames = [0, 48], max_frames = 4800 }},
  {{ type = "limiter", threshold_db = -1.0 }},
  {{ type = "convolver", ir = "{}", partition = 256 }},
]
"#,
            ir.display()
        );
        let chains = parse(&text).unwrap();
        assert_eq!(chains[0].chain.len(), 5);
        for f in &chains[0].chain {
            f.build(2, 48_000).unwrap();
        }
    }

    #[test]
    fn the_annotated_example_parses_and_builds_but_for_its_impulse_file() {
        let text = include_str!("../../../config/quaver.toml");
        let block: String = text
            .lines()
            .skip_while(|l| *l != "# [[filters]]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
            .collect();
        let chains = parse(&block).unwrap();
        assert_eq!(chains[0].sink, "null-sink");
        assert_eq!(chains[0].chain.len(), 6, "{block}");
        for f in &chains[0].chain {
            match f {
                FilterSpec::Convolver { ir, .. } => assert_eq!(ir, Path::new("/path/to/room.wav")),
                f => drop(f.build(2, 48_000).unwrap()),
            }
        }
    }

    #[test]
    fn the_annotated_plugin_example_parses() {
        let text = include_str!("../../../config/quaver.toml");
        let block: String = text
            .lines()
            .skip_while(|l| !l.starts_with("# Plugins as filters"))
            .skip_while(|l| *l != "# [[filters]]")
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or("")))
            .collect();
        let chains = parse(&block).unwrap();
        assert!(
            matches!(
                &chains[0].chain[..],
                [FilterSpec::Ladspa(_), FilterSpec::Lv2(_)]
            ),
            "{block}"
        );
    }

    #[test]
    fn plugin_entries_parse_and_typos_are_named() {
        let chains = parse(
            r#"
[[filters]]
sink = "s"
chain = [
  { type = "ladspa", plugin = "amp", label = "amp_mono", controls = { gain = 2.0 } },
  { type = "lv2", uri = "http://plugin.org.uk/swh-plugins/amp" },
]
"#,
        )
        .unwrap();
        let FilterSpec::Ladspa(l) = &chains[0].chain[0] else {
            panic!("{:?}", chains[0].chain[0])
        };
        assert_eq!(
            (l.plugin.as_str(), l.label.as_deref()),
            ("amp", Some("amp_mono"))
        );
        assert_eq!(l.controls["gain"], 2.0);
        assert!(matches!(&chains[0].chain[1], FilterSpec::Lv2(s) if s.controls.is_empty()));
        let e = parse("[[filters]]\nsink = \"s\"\nchain = [{ type = \"ladspa\", plugin = \"amp\", lable = \"x\" }]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lable") && e.contains("line 3"), "{e}");
    }

    /// Issue 36, acceptance 6, "a filter chain with a cycle": a chain is a list for one
    /// device sink and cannot name another chain or node, so no cycle can be written.
    /// What comes closest is refused with a clear error.
    #[test]
    fn chains_cannot_form_a_cycle() {
        // A filter that would be another chain (or a link to a node) is no filter type.
        let e = parse("[[filters]]\nsink = \"a\"\nchain = [{ type = \"chain\", sink = \"b\" }]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `chain`") && e.contains("convolver"),
            "{e}"
        );
        // A sink given two chains (the second would silently replace the first) is
        // refused at load, naming both entries.
        let two = parse(
            "[[filters]]\nsink = \"s\"\nchain = [{ type = \"gain\", gain_db = 1.0 }]\n\
             [[filters]]\nsink = \"s\"\nchain = [{ type = \"gain\", gain_db = 2.0 }]\n",
        )
        .unwrap();
        let e = format!("{:#}", validate(&two).unwrap_err());
        assert!(e.contains("entries 1 and 2 are both for sink 's'"), "{e}");
        validate(&two[..1]).unwrap();
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        let e = parse("[[filters]]\nsink = \"s\"\nchain = [{ type = \"gain\", gian_db = 1.0 }]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("gian_db") && e.contains("line 3"), "{e}");
        let e = parse("[[filters]]\nsink = \"s\"\nchain = [{ type = \"reverb\" }]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("reverb"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let not_audio = dir.path().join("notes.txt");
        std::fs::write(&not_audio, "not audio").unwrap();
        let f = FilterSpec::Convolver {
            ir: not_audio,
            partition: 1024,
        };
        let e = format!("{:#}", f.build(2, 48_000).err().unwrap());
        assert!(e.contains("notes.txt: not a readable WAV file"), "{e}");
        // Ten minutes of (silent) response: refused before any sample is read.
        let long = dir.path().join("long.wav");
        quaver_testkit::write_wav_s16(&long, 8_000, 1, &vec![0i16; 600 * 8_000]);
        let f = FilterSpec::Convolver {
            ir: long,
            partition: 1024,
        };
        let e = format!("{:#}", f.build(2, 8_000).err().unwrap());
        assert!(
            e.contains("long.wav: 600.0 s long, more than the 10 s"),
            "{e}"
        );
        let f = FilterSpec::Biquad {
            kind: BiquadKind::Peaking,
            freq: 30_000.0,
            q: 1.0,
            gain_db: 3.0,
        };
        let e = format!("{:#}", f.build(2, 48_000).err().unwrap());
        assert!(e.contains("outside (0, 24000) Hz"), "{e}");
    }
}
