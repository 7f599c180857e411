//! `[[filters]]` in the config: filter chains put on device sinks at start-up
//! (docs/dsp/filters.md). Every stream that plays to the sink passes through.

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
    /// Builds the filter for `channels` channels at `rate` Hz (control thread).
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
        })
    }
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
        let filters = c
            .chain
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.build(channels, engine.rate())
                    .with_context(|| format!("filters for sink '{}', filter {}", c.sink, i + 1))
            })
            .collect::<Result<Vec<_>>>()?;
        let chain = FilterChain::new(filters);
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<SinkChain>, toml::de::Error> {
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
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 48_000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::create(&ir, spec).unwrap();
        for i in 0..2000 {
            w.write_sample(if i == 0 { 1.0f32 } else { 0.0 }).unwrap();
        }
        w.finalize().unwrap();
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
        // Eleven seconds of (silent) response: refused before any sample is read.
        let long = dir.path().join("long.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 8_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(&long, spec).unwrap();
        for _ in 0..11 * 8_000 {
            w.write_sample(0i16).unwrap();
        }
        w.finalize().unwrap();
        let f = FilterSpec::Convolver {
            ir: long,
            partition: 1024,
        };
        let e = format!("{:#}", f.build(2, 8_000).err().unwrap());
        assert!(e.contains("11.0 s long, more than the 10 s"), "{e}");
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
