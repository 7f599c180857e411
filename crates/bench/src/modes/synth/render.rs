//! The synth report: the marks as tables and plots.

use crate::modes::synth::client::Window;
use crate::modes::synth::switch::{
    MARGIN_DECAY_STEP_MS, MARGIN_HOLD_S, Sample, SwitchMark, SwitchRun,
};
use crate::modes::synth::{JitterMark, LatencyMark, SynthResults, VoiceMark};
use crate::report::doc::{Doc, yes_no};
use crate::report::stats::{Log2Hist, fmt_bounds, fmt_ns};
use crate::report::svg::{Series, bar_chart, line_plot};
use crate::report::{ModeOutput, Table};

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn b(h: &Log2Hist, p: f64) -> String {
    fmt_bounds(h.percentile(p))
}

/// Tables, Markdown and plots.
pub fn render(r: &SynthResults) -> ModeOutput {
    let mut summary = Table::new(&["mark", "setting", "result", "glitches", "notes"]);
    let mut doc = Doc::new();
    doc.para(format!(
        "A callback client renders N voices (sawtooth → SVF low-pass following an ADSR \
         envelope, retriggered) in its process callback into quaverd's null sink at {} Hz. \
         Render time and wakeup latency are measured inside the callback; glitches are the \
         misses quaverd counted against the client.",
        r.rate
    ));
    if let Some(v) = &r.voice {
        voice_mark(&mut doc, &mut summary, v, r.rate);
    }
    if let Some(l) = &r.latency {
        latency_mark(&mut doc, &mut summary, l);
    }
    if let Some(j) = &r.jitter {
        jitter_mark(&mut doc, &mut summary, j, r.rate);
    }
    if let Some(sw) = &r.switch {
        switch_mark(sw, &mut summary, &mut doc);
    }
    doc.finish(r, summary, Vec::new())
}

fn ms(q: usize, rate: u32) -> f64 {
    q as f64 * 1000.0 / rate as f64
}

fn voice_mark(doc: &mut Doc, summary: &mut Table, v: &VoiceMark, rate: u32) {
    summary.row(vec![
        "voice".into(),
        format!(
            "quantum {} ({:.2} ms), budget {}",
            v.quantum,
            ms(v.quantum, rate),
            pct(v.budget)
        ),
        format!("{}{} voices", if v.capped { "≥ " } else { "" }, v.voices),
        v.points.iter().map(|p| p.glitches).sum::<u64>().to_string(),
        v.realtime.clone(),
    ]);
    let t = Table::of(
        &v.points,
        &[
            ("voices", &|p| p.voices.to_string()),
            ("cycles", &|p| p.stats.cycles.to_string()),
            ("mean load", &|p| pct(p.stats.load())),
            ("mean render", &|p| fmt_ns(p.stats.mean_render_ns())),
            ("render p99", &|p| b(&p.stats.render, 99.0)),
            ("ns per voice-frame", &|p| {
                let s = &p.stats;
                if s.voice_frames > 0 {
                    format!("{:.2}", s.render_ns as f64 / s.voice_frames as f64)
                } else {
                    "–".into()
                }
            }),
            ("glitches", &|p| p.glitches.to_string()),
            ("late", &|p| p.stats.late.to_string()),
        ],
    );
    let pts: Vec<(f64, f64)> = v
        .points
        .iter()
        .map(|p| (p.voices as f64, p.stats.load() * 100.0))
        .collect();
    let budget: Vec<(f64, f64)> = v
        .points
        .iter()
        .map(|p| (p.voices as f64, v.budget * 100.0))
        .collect();
    doc.heading(2, "Voice mark")
        .para(format!(
            "**{}{} voices** within {} of each {}-frame cycle (mean render \
             time){}. Client: {}.",
            if v.capped { "≥ " } else { "" },
            v.voices,
            pct(v.budget),
            v.quantum,
            if v.capped {
                " — the search stopped at --max-voices"
            } else {
                ""
            },
            v.realtime
        ))
        .table(&t)
        .plot(
            "voice-load",
            line_plot(
                "Voice mark: mean render time per cycle",
                "voices",
                "% of the cycle",
                &[
                    Series::new("load", pts),
                    Series::new("budget", budget).dashed(),
                ],
                true,
                true,
            ),
        );
}

fn latency_mark(doc: &mut Doc, summary: &mut Table, l: &LatencyMark) {
    summary.row(vec![
        "latency".into(),
        format!("{} voices", l.voices),
        match (l.quantum, l.ms) {
            (Some(q), Some(m)) => format!("{q} frames ({m:.2} ms)"),
            _ => "every quantum glitched".into(),
        },
        l.points
            .iter()
            .filter_map(|p| p.window.as_ref())
            .map(|w| w.glitches)
            .sum::<u64>()
            .to_string(),
        String::new(),
    ]);
    let mut t = Table::new(&[
        "requested",
        "ran at",
        "cycles",
        "mean load",
        "render max",
        "wake p99",
        "glitches",
        "async",
        "late",
    ]);
    for p in &l.points {
        match &p.window {
            Some(w) => t.row(vec![
                p.requested.to_string(),
                w.quantum.to_string(),
                w.stats.cycles.to_string(),
                pct(w.stats.load()),
                fmt_bounds(w.stats.render.max_bucket()),
                b(&w.stats.wake, 99.0),
                w.glitches.to_string(),
                yes_no(w.went_async).into(),
                w.stats.late.to_string(),
            ]),
            None => t.row_padded(vec![
                p.requested.to_string(),
                format!("failed: {}", p.error.clone().unwrap_or_default()),
            ]),
        }
    }
    doc.heading(2, "Latency mark")
        .para(format!(
            "Smallest quantum with no glitch for {} voices: **{}**. A \
             fresh client per quantum.",
            l.voices,
            match (l.quantum, l.ms) {
                (Some(q), Some(m)) => format!("{q} frames = {m:.2} ms"),
                _ => "none".into(),
            }
        ))
        .table(&t);
}

fn jitter_mark(doc: &mut Doc, summary: &mut Table, j: &JitterMark, rate: u32) {
    let w = &j.window;
    summary.row(vec![
        "jitter".into(),
        format!("{} voices, quantum {}", w.voices, w.quantum),
        format!(
            "wake p99 {}, render p99 {}",
            b(&w.stats.wake, 99.0),
            b(&w.stats.render, 99.0)
        ),
        w.glitches.to_string(),
        j.realtime.clone(),
    ]);
    let mut t = Table::new(&["", "p50", "p99", "p99.9", "max bucket", "max (exact)"]);
    for (name, h, max) in [
        ("wakeup", &w.stats.wake, j.wake_max_ns),
        ("render", &w.stats.render, j.render_max_ns),
    ] {
        t.row(vec![
            name.into(),
            b(h, 50.0),
            b(h, 99.0),
            b(h, 99.9),
            fmt_bounds(h.max_bucket()),
            fmt_ns(max as f64),
        ]);
    }
    doc.heading(2, "Jitter mark")
        .para(format!(
            "{} voices at quantum {} ({:.2} ms), {} callbacks, client {}. \
             Wakeup = callback start − cycle start (the server's timestamp, same clock); \
             render = the voices' rendering. Log2 buckets, shown by their upper bound.",
            w.voices,
            w.quantum,
            ms(w.quantum, rate),
            w.stats.cycles,
            j.realtime
        ))
        .table(&t)
        .para(format!(
            "Glitches: {}; callbacks after the deadline: {}.",
            w.glitches, w.stats.late
        ))
        .place("jitter");
    if let Some(svg) = jitter_plot(w) {
        doc.add_plot("jitter", svg);
    }
}

/// Wakeup and render histograms on one category axis covering both.
fn jitter_plot(w: &Window) -> Option<String> {
    let mut all: Vec<usize> = Vec::new();
    for h in [&w.stats.wake, &w.stats.render] {
        for (i, &c) in h.counts.iter().enumerate() {
            if c > 0 && !all.contains(&i) {
                all.push(i);
            }
        }
    }
    all.sort_unstable();
    let (&lo, &hi) = (all.first()?, all.last()?);
    let pick = |h: &Log2Hist| -> Vec<f64> {
        let t = h.total().max(1) as f64;
        (lo..=hi)
            .map(|i| h.counts.get(i).copied().unwrap_or(0) as f64 * 100.0 / t)
            .collect()
    };
    let cats: Vec<String> = (lo..=hi)
        .map(|i| format!("<{}", fmt_ns(Log2Hist::bucket_bounds(i).upper as f64)))
        .collect();
    Some(bar_chart(
        "Jitter mark: wakeup latency and render time",
        "log2 bucket",
        "% of callbacks",
        &cats,
        &[
            ("wakeup".into(), pick(&w.stats.wake)),
            ("render".into(), pick(&w.stats.render)),
        ],
    ))
}

// ---------------------------------------------------------------- the switch mark

/// When the margin came back to its minimum after the load, and whether it stayed.
fn back_at_min(r: &SwitchRun) -> String {
    match (r.margin_first_at_min_after_s, r.margin_at_min_after_s) {
        (Some(a), Some(b)) if a == b => format!("{a:.1} s after the load"),
        (Some(a), Some(b)) => format!("{a:.1} s after the load, for good from {b:.1} s"),
        (Some(a), None) => {
            format!("{a:.1} s after the load, raised again by an underrun in the tail")
        }
        _ => "not within the tail".into(),
    }
}

/// Card underruns that coincided with a spike, out of the spikes the polls bracket.
fn spike_underruns(r: &SwitchRun) -> (usize, usize) {
    let known: Vec<bool> = r.spikes.iter().filter_map(|h| h.underrun).collect();
    (known.iter().filter(|&&u| u).count(), known.len())
}

/// Adds the switch mark to the summary, the Markdown body and the plots.
fn switch_mark(sw: &SwitchMark, summary: &mut Table, doc: &mut Doc) {
    summary_rows(sw, summary);
    let p = &sw.plan;
    let ms = |f: f64| f * 1000.0 / p.rate as f64;
    doc.heading(2, "Switch mark").para(format!(
        "quaverd's adaptive control is the **{}**, not the quantum \
         (quaverd has no adaptive quantum; it is {} frames in both runs). Each run has its \
         own quaverd on the simulated card (real clock) and the synth client linked to \
         `sim-sink`; the voice count toggles between {} and {} every {} ms until the card \
         has run {} cycles ({:.1} s of its clock), while the card stalls the real-time \
         thread — a processing spike — {} (sim `stall=CYCLE:MS` faults at cycles {}). \
         Then the load and the spikes stop and a tail at {} voices runs until the margin \
         has been back at its minimum for a while. 'off' = fixed margin (`period` \
         {} frames, {:.2} ms); 'on' = the same card with `margin_max={}` ({:.2} ms): an \
         underrun raises the margin to the maximum, which holds {} s after the last \
         underrun or near miss and then decays {} ms per second. A spike longer than \
         quantum + margin ({:.2} ms with the fixed margin) underruns with certainty. \
         Underruns are the card's (quaverd's device counters in `status`), misses are the \
         client's deadline misses counted by quaverd; the latency is quantum + margin. \
         Client: {}.",
        sw.control,
        p.quantum,
        sw.runs.first().map_or(0, |r| r.low),
        sw.runs.first().map_or(0, |r| r.high),
        sw.runs.first().map_or(0, |r| r.period_ms),
        p.load_end_cycle,
        ms((p.load_end_cycle * p.quantum as u64) as f64) / 1000.0,
        if p.cycles.is_empty() {
            "never".to_string()
        } else {
            format!("for {} ms every {} ms", p.spike_ms, p.every_ms)
        },
        p.cycles
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        sw.runs.first().map_or(0, |r| r.low),
        sw.period_frames,
        ms(sw.period_frames as f64),
        sw.margin_max_frames,
        ms(sw.margin_max_frames as f64),
        MARGIN_HOLD_S,
        MARGIN_DECAY_STEP_MS,
        ms((p.quantum + sw.period_frames) as f64),
        sw.realtime,
    ));
    doc.table(&runs_table(sw)).para(format!(
        "Devices: {}",
        sw.runs
            .iter()
            .map(|r| format!("{}: `{}`", r.adaptive, r.device))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    plots(sw, doc);
}

/// The summary's rows: one per run, then fixed against adaptive.
fn summary_rows(sw: &SwitchMark, summary: &mut Table) {
    let p = &sw.plan;
    let spikes = if p.cycles.is_empty() {
        "no spikes".to_string()
    } else {
        format!(
            "{} spikes of {} ms every {} ms",
            p.cycles.len(),
            p.spike_ms,
            p.every_ms
        )
    };
    for r in &sw.runs {
        summary.row(vec![
            format!("switch (adaptive {})", r.adaptive),
            format!(
                "{}↔{} voices / {} ms, {spikes}, {}",
                r.low, r.high, r.period_ms, r.label
            ),
            format!(
                "under load {:.2} ms, ends at {:.2} ms (quantum {} + margin {})",
                r.latency_load_end_ms, r.final_latency_ms, r.final_quantum, r.final_margin_frames
            ),
            format!(
                "{} underruns, {} misses",
                r.underruns_load + r.underruns_tail,
                r.glitches_low + r.glitches_high + r.glitches_tail
            ),
            format!(
                "{} spikes injected; margin back at minimum {}",
                r.spikes_injected,
                back_at_min(r)
            ),
        ]);
    }
    let by = |a: &str| sw.runs.iter().find(|r| r.adaptive == a);
    if let (Some(off), Some(on)) = (by("off"), by("on")) {
        summary.row(vec![
            "switch: fixed vs adaptive".into(),
            "device underruns during the load; client misses".into(),
            format!(
                "underruns {} fixed vs {} adaptive",
                off.underruns_load, on.underruns_load
            ),
            format!(
                "{} vs {}",
                off.underruns_load + off.underruns_tail,
                on.underruns_load + on.underruns_tail
            ),
            format!(
                "misses {} fixed vs {} adaptive",
                off.glitches_low + off.glitches_high + off.glitches_tail,
                on.glitches_low + on.glitches_high + on.glitches_tail
            ),
        ]);
    }
}

/// The runs side by side, a row per figure.
fn runs_table(sw: &SwitchMark) -> Table {
    let adaptive = |r: &SwitchRun| {
        if r.adaptive == "on" {
            "adaptive on"
        } else {
            "adaptive off"
        }
        .to_string()
    };
    Table::by_row(
        "",
        &sw.runs,
        adaptive,
        &[
            ("what ran", &|r| r.label.clone()),
            ("spikes injected (planned)", &|r| {
                format!("{} ({})", r.spikes_injected, r.spikes.len())
            }),
            ("spikes that underran", &|r| {
                let (u, k) = spike_underruns(r);
                format!("{u} of {k}")
            }),
            ("device underruns, load", &|r| r.underruns_load.to_string()),
            ("device underruns, tail", &|r| r.underruns_tail.to_string()),
            ("client misses low / high / tail", &|r| {
                format!(
                    "{} / {} / {}",
                    r.glitches_low, r.glitches_high, r.glitches_tail
                )
            }),
            ("late callbacks", &|r| r.late.to_string()),
            ("async at end", &|r| yes_no(r.went_async).into()),
            ("high-phase load", &|r| {
                format!("{:.1}%", r.high_load * 100.0)
            }),
            ("margin min…max (frames)", &|r| {
                format!("{}…{}", r.margin_min_frames, r.margin_max_frames)
            }),
            ("margin peak seen", &|r| r.margin_peak_frames.to_string()),
            ("margin changes", &|r| r.margin_changes.to_string()),
            ("latency at end of load", &|r| {
                format!(
                    "{:.2} ms (margin {})",
                    r.latency_load_end_ms, r.margin_load_end_frames
                )
            }),
            ("margin back at minimum", &|r| back_at_min(r)),
            ("final latency", &|r| {
                format!(
                    "{:.2} ms (quantum {} + margin {})",
                    r.final_latency_ms, r.final_quantum, r.final_margin_frames
                )
            }),
            ("quanta seen", &|r| {
                r.quanta_seen
                    .iter()
                    .map(|q| q.to_string())
                    .collect::<Vec<_>>()
                    .join("→")
            }),
            ("load / tail", &|r| {
                format!("{:.1} s / {:.1} s", r.load_seconds, r.tail_seconds)
            }),
        ],
    )
}

/// The margin, the device underruns and the client misses over time, per run.
fn plots(sw: &SwitchMark, doc: &mut Doc) {
    let ms = |f: f64| f * 1000.0 / sw.plan.rate as f64;
    let series = |f: &dyn Fn(&Sample) -> f64, name: &str| -> Vec<Series> {
        sw.runs
            .iter()
            .map(|r| {
                Series::new(
                    format!("{} adaptive {}", name, r.adaptive),
                    r.samples.iter().map(|s| (s.0, f(s))).collect(),
                )
            })
            .collect()
    };
    let base = |r: &SwitchRun| r.samples.first().map_or(0, |s| s.3);
    let underruns: Vec<Series> = sw
        .runs
        .iter()
        .map(|r| {
            Series::new(
                format!("adaptive {}", r.adaptive),
                r.samples
                    .iter()
                    .map(|s| (s.0, s.3.saturating_sub(base(r)) as f64))
                    .collect(),
            )
        })
        .collect();
    doc.plot(
        "switch-margin",
        line_plot(
            "Switch mark: safety margin over time",
            "s",
            "margin, ms",
            &series(&|s| ms(s.2 as f64), "margin"),
            false,
            true,
        ),
    )
    .plot(
        "switch-underruns",
        line_plot(
            "Switch mark: cumulative device underruns",
            "s",
            "underruns since the run started",
            &underruns,
            false,
            true,
        ),
    )
    .plot(
        "switch",
        line_plot(
            "Switch mark: cumulative client misses",
            "s",
            "misses",
            &series(&|s| s.4 as f64, "misses"),
            false,
            true,
        ),
    );
}
