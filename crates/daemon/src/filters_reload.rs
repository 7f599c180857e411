//! SIGHUP: the config file's `[[filters]]` read again and applied while audio plays
//! (docs/dsp/filters.md, "Reloading on SIGHUP").
//!
//! A chain whose filters are the same kinds with the same fixed settings, only
//! controls changed (a gain, a corner frequency, a limiter's threshold, a crossover's
//! split frequencies, a plugin's control values), is changed in place through the live controls, so each change
//! ramps or crossfades as `set_filter_control` does and the filters keep their state:
//! no click, no gap. Any other change builds the new chain first (a bad one is logged
//! and the chain in force stays) and swaps it in at a cycle boundary.

use crate::config::Config;
use crate::filters::{FilterSpec, SinkChain};
use anyhow::{Context, Result};
use quaver_dsp::filter::FilterChain;
use quaver_engine::Engine;
use std::collections::BTreeMap;
use std::path::Path;

/// What a reload did to one sink's chain.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Same chain: nothing sent.
    Unchanged,
    /// Controls changed live: (filter index, control, value) each.
    Controls(Vec<(usize, String, f64)>),
    /// A new chain swapped in.
    Replaced,
    /// The chain taken off its sink.
    Removed,
}

/// The live control changes that turn filter `old` into `new`, or `None` when they
/// differ in anything a control cannot change (kind, fixed settings, plugin, the set
/// of plugin controls named).
pub fn control_changes(old: &FilterSpec, new: &FilterSpec) -> Option<Vec<(String, f64)>> {
    use FilterSpec as F;
    let pairs: Vec<(&str, f64, f64)> = match (old, new) {
        (
            F::Biquad {
                kind: k0,
                freq: f0,
                q: q0,
                gain_db: g0,
            },
            F::Biquad {
                kind: k1,
                freq: f1,
                q: q1,
                gain_db: g1,
            },
        ) if k0 == k1 => vec![("freq", *f0, *f1), ("q", *q0, *q1), ("gain_db", *g0, *g1)],
        (F::Gain { gain_db: a }, F::Gain { gain_db: b }) => vec![("gain_db", *a, *b)],
        (
            F::Delay {
                frames: a,
                max_frames: m0,
            },
            F::Delay {
                frames: b,
                max_frames: m1,
            },
        ) => {
            if a == b {
                vec![]
            } else {
                // The live control sets every channel to one delay; the line's length
                // is fixed when it is built.
                let one = *b.first()?;
                let longest = |f: &[usize], m: &Option<usize>| {
                    m.unwrap_or_else(|| f.iter().copied().max().unwrap_or(0))
                };
                if b.iter().any(|&f| f != one) || longest(a, m0) != longest(b, m1) {
                    return None;
                }
                vec![("frames", f64::NAN, one as f64)]
            }
        }
        (
            F::Limiter {
                threshold_db: t0,
                lookahead_ms: l0,
                release_ms: r0,
            },
            F::Limiter {
                threshold_db: t1,
                lookahead_ms: l1,
                release_ms: r1,
            },
        ) if l0 == l1 && r0 == r1 => vec![("threshold_db", *t0, *t1)],
        (F::ChannelMixer(a), F::ChannelMixer(b)) if a != b => return mixer_changes(a, b),
        (F::Crossover(a), F::Crossover(b)) if a != b => return crossover_changes(a, b),
        (F::Ladspa(a), F::Ladspa(b)) if a.plugin == b.plugin && a.label == b.label => {
            return plugin_changes(&a.controls, &b.controls);
        }
        (F::Lv2(a), F::Lv2(b)) if a.uri == b.uri => {
            return plugin_changes(&a.controls, &b.controls);
        }
        (a, b) if a == b => vec![],
        _ => return None,
    };
    Some(
        pairs
            .into_iter()
            // NaN != anything: a changed delay always goes.
            .filter(|(_, a, b)| a != b)
            .map(|(n, _, b)| (n.to_string(), b))
            .collect(),
    )
}

/// A channel mixer's changes: both written as matrices of one shape, each weight that
/// differs as its `gain_<output>_<input>` control. A preset may mean another shape for
/// another channel count, so a change to or from one rebuilds.
fn mixer_changes(
    a: &crate::filters_channels::MixerSpec,
    b: &crate::filters_channels::MixerSpec,
) -> Option<Vec<(String, f64)>> {
    let (Some(m0), Some(m1), None, None) = (&a.matrix, &b.matrix, a.preset, b.preset) else {
        return None;
    };
    if m0.len() != m1.len() || m0.iter().zip(m1).any(|(r0, r1)| r0.len() != r1.len()) {
        return None;
    }
    let mut changes = Vec::new();
    for (o, (r0, r1)) in m0.iter().zip(m1).enumerate() {
        for (i, (w0, w1)) in r0.iter().zip(r1).enumerate() {
            if w0 != w1 {
                changes.push((format!("gain_{o}_{i}"), *w1));
            }
        }
    }
    Some(changes)
}

/// A crossover's changes: the same outputs and number of splits, each moved split as
/// its `freq` (one split) or `freq_<k>` control. The new set is checked as a whole
/// (rising, in range) when it is built for the check at load; each step here is
/// checked again against the one before it, so a move that would cross a neighbour
/// on the way is sent in an order that never does.
fn crossover_changes(
    a: &crate::filters_channels::CrossoverSpec,
    b: &crate::filters_channels::CrossoverSpec,
) -> Option<Vec<(String, f64)>> {
    use crate::filters_channels::Freqs;
    let list = |f: &Freqs| match f {
        Freqs::One(x) => vec![*x],
        Freqs::More(v) => v.clone(),
    };
    let (f0, f1) = (list(&a.freq), list(&b.freq));
    if a.outputs != b.outputs || f0.len() != f1.len() {
        return None;
    }
    let name = |k: usize| {
        if f1.len() == 1 {
            "freq".to_string()
        } else {
            format!("freq_{k}")
        }
    };
    let moved: Vec<usize> = (0..f1.len()).filter(|&k| f0[k] != f1[k]).collect();
    // Moving up: the highest first, so none passes the one above it; down: the
    // lowest first.
    let up: Vec<usize> = moved
        .iter()
        .copied()
        .filter(|&k| f1[k] > f0[k])
        .rev()
        .collect();
    let down = moved.iter().copied().filter(|&k| f1[k] < f0[k]);
    Some(
        up.into_iter()
            .chain(down)
            .map(|k| (name(k), f1[k]))
            .collect(),
    )
}

/// A plugin's changes: the same controls named (one left out would go back to a
/// default only a rebuild knows), values that differ.
fn plugin_changes(
    a: &BTreeMap<String, f64>,
    b: &BTreeMap<String, f64>,
) -> Option<Vec<(String, f64)>> {
    if !a.keys().eq(b.keys()) {
        return None;
    }
    Some(
        b.iter()
            .filter(|(k, v)| a[*k] != **v)
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    )
}

/// The changes for a whole chain, each with its filter's index; `None`: rebuild.
pub fn chain_changes(old: &[FilterSpec], new: &[FilterSpec]) -> Option<Vec<(usize, String, f64)>> {
    if old.len() != new.len() {
        return None;
    }
    let mut all = Vec::new();
    for (i, (a, b)) in old.iter().zip(new).enumerate() {
        all.extend(control_changes(a, b)?.into_iter().map(|(n, v)| (i, n, v)));
    }
    Some(all)
}

/// Builds `chain` for sink node `sink` (control thread; plugins are probed first).
fn build(
    engine: &Engine,
    chain: &SinkChain,
) -> Result<Option<(quaver_engine::NodeId, FilterChain)>> {
    let found = engine.inspect(|g| g.node_by_name(&chain.sink).map(|n| (n.id, n.inputs.len())));
    let Some((id, channels)) = found else {
        return Ok(None);
    };
    let built = crate::filters::build_chain(&chain.chain, channels, engine.rate())?;
    Ok(Some((id, built)))
}

/// Applies `new` for one sink whose chain in force is `old` (None: no chain).
fn apply_one(engine: &Engine, old: Option<&SinkChain>, new: Option<&SinkChain>) -> Result<Change> {
    match (old, new) {
        (Some(o), Some(n)) if o == n => Ok(Change::Unchanged),
        (Some(o), None) => {
            let id = engine.inspect(|g| g.node_by_name(&o.sink).map(|n| n.id));
            if let Some(id) = id {
                engine.set_sink_filter(id, None)?;
            }
            Ok(Change::Removed)
        }
        (_, None) => Ok(Change::Unchanged),
        (old, Some(n)) => {
            // Built first in every case: a file, plugin or value that no longer works
            // leaves the chain in force untouched.
            let Some((id, chain)) = build(engine, n)? else {
                tracing::warn!("filters: no sink named '{}'; its chain is not used", n.sink);
                return Ok(Change::Unchanged);
            };
            if let Some(changes) = old.and_then(|o| chain_changes(&o.chain, &n.chain)) {
                let sent = changes
                    .iter()
                    .try_for_each(|(i, name, v)| engine.filter_control(&n.sink, *i, name, *v));
                match sent {
                    Ok(()) => return Ok(Change::Controls(changes)),
                    // The chain in force is not the one its spec describes (a plugin
                    // that failed muted the sink): replace it.
                    Err(e) => tracing::info!(
                        "filters: '{}' cannot take the changes live ({e}); replacing its chain",
                        n.sink
                    ),
                }
            }
            engine.set_sink_filter(id, Some(chain))?;
            Ok(Change::Replaced)
        }
    }
}

/// SIGHUP: reads `[[filters]]` from `path` again and applies it; `in_force` is what
/// was applied so far and becomes what is now. A file that no longer parses, or a
/// chain that cannot be built, is logged and what was in force for it stays.
pub fn reload(engine: &Engine, path: Option<&Path>, in_force: &mut Vec<SinkChain>) {
    let Some(path) = path else {
        return;
    };
    let cfg = match std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))
        .and_then(|t| Config::parse(&t, path))
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("SIGHUP: {e:#}; the filter chains in force stay");
            return;
        }
    };
    let mut sinks: Vec<&str> = in_force.iter().map(|c| c.sink.as_str()).collect();
    sinks.extend(cfg.filters.iter().map(|c| c.sink.as_str()));
    sinks.sort_unstable();
    sinks.dedup();
    let mut now = Vec::new();
    for sink in sinks {
        let old = in_force.iter().find(|c| c.sink == sink);
        let new = cfg.filters.iter().find(|c| c.sink == sink);
        match apply_one(engine, old, new) {
            Ok(change) => {
                if change != Change::Unchanged {
                    tracing::info!("SIGHUP: filters on '{sink}': {change:?}");
                }
                now.extend(new.cloned());
            }
            Err(e) => {
                tracing::error!(
                    "SIGHUP: filters for sink '{sink}': {e:#}; the chain in force stays"
                );
                now.extend(old.cloned());
            }
        }
    }
    *in_force = now;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(text: &str) -> Vec<FilterSpec> {
        #[derive(serde::Deserialize)]
        struct T {
            chain: Vec<FilterSpec>,
        }
        toml::from_str::<T>(&format!("chain = [{text}]"))
            .unwrap()
            .chain
    }

    #[test]
    fn controls_change_live_and_anything_else_rebuilds() {
        let old = chain(
            r#"{ type = "biquad", kind = "peaking", freq = 1000.0, gain_db = 6.0 },
               { type = "gain", gain_db = -3.0 },
               { type = "delay", frames = [0, 48], max_frames = 480 },
               { type = "limiter", threshold_db = -1.0 },
               { type = "ladspa", plugin = "amp", label = "amp_mono", controls = { gain = 2.0 } }"#,
        );
        assert_eq!(chain_changes(&old, &old), Some(vec![]));
        let new = chain(
            r#"{ type = "biquad", kind = "peaking", freq = 1200.0, gain_db = 6.0 },
               { type = "gain", gain_db = -9.0 },
               { type = "delay", frames = [96], max_frames = 480 },
               { type = "limiter", threshold_db = -2.0 },
               { type = "ladspa", plugin = "amp", label = "amp_mono", controls = { gain = 0.5 } }"#,
        );
        let got = chain_changes(&old, &new).unwrap();
        let want: Vec<(usize, String, f64)> = [
            (0, "freq", 1200.0),
            (1, "gain_db", -9.0),
            (2, "frames", 96.0),
            (3, "threshold_db", -2.0),
            (4, "gain", 0.5),
        ]
        .into_iter()
        .map(|(i, n, v)| (i, n.to_string(), v))
        .collect();
        assert_eq!(got, want);
        // Each of these needs a new chain.
        for (a, b) in [
            (
                r#"{ type = "biquad", kind = "peaking", freq = 1000.0 }"#,
                r#"{ type = "biquad", kind = "notch", freq = 1000.0 }"#,
            ),
            (
                r#"{ type = "delay", frames = [0, 48] }"#,
                r#"{ type = "delay", frames = [48, 0] }"#,
            ),
            (
                r#"{ type = "delay", frames = [0], max_frames = 480 }"#,
                r#"{ type = "delay", frames = [96], max_frames = 960 }"#,
            ),
            (
                r#"{ type = "limiter", threshold_db = -1.0 }"#,
                r#"{ type = "limiter", threshold_db = -1.0, lookahead_ms = 2.0 }"#,
            ),
            (
                r#"{ type = "convolver", ir = "a.wav" }"#,
                r#"{ type = "convolver", ir = "b.wav" }"#,
            ),
            (
                r#"{ type = "lv2", uri = "u", controls = { a = 1.0 } }"#,
                r#"{ type = "lv2", uri = "u", controls = { b = 1.0 } }"#,
            ),
            (
                r#"{ type = "gain", gain_db = 0.0 }"#,
                r#"{ type = "limiter", threshold_db = -1.0 }"#,
            ),
        ] {
            assert_eq!(chain_changes(&chain(a), &chain(b)), None, "{a} -> {b}");
        }
        assert_eq!(chain_changes(&old[..1], &old), None, "a filter added");
        let same = r#"{ type = "convolver", ir = "a.wav" }"#;
        assert_eq!(chain_changes(&chain(same), &chain(same)), Some(vec![]));
    }

    #[test]
    fn crossover_frequencies_move_live_in_an_order_that_never_crosses() {
        let x = |f: &str| chain(&format!(r#"{{ type = "crossover", freq = {f} }}"#));
        let got = chain_changes(&x("1000.0"), &x("2000.0")).unwrap();
        assert_eq!(got, vec![(0, "freq".to_string(), 2000.0)]);
        // Both up past the old upper one: the upper moves first.
        let got = chain_changes(&x("[300.0, 3000.0]"), &x("[3100.0, 3200.0]")).unwrap();
        let names: Vec<&str> = got.iter().map(|(_, n, _)| n.as_str()).collect();
        assert_eq!(names, ["freq_1", "freq_0"]);
        // Each step, checked as the engine checks it, stays rising.
        let mut controls = quaver_dsp::filter::Crossover::new(1, 48_000.0, &[300.0, 3000.0], None)
            .map(|c| quaver_dsp::filter::Filter::controls(&c))
            .unwrap();
        for (_, n, v) in &got {
            controls.check(n, *v).unwrap();
        }
        let got = chain_changes(&x("[300.0, 3000.0]"), &x("[100.0, 200.0]")).unwrap();
        let names: Vec<&str> = got.iter().map(|(_, n, _)| n.as_str()).collect();
        assert_eq!(names, ["freq_0", "freq_1"]);
        // Another split count or other outputs: a new chain.
        assert_eq!(chain_changes(&x("1000.0"), &x("[300.0, 3000.0]")), None);
        let outs = chain(r#"{ type = "crossover", freq = 1000.0, outputs = ["0.high", "0.low"] }"#);
        assert_eq!(chain_changes(&x("1000.0"), &outs), None);
    }
}
