//! The synth report: the marks as tables and plots.

use crate::modes::synth::SynthResults;
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
    let mut md = String::new();
    let ms = |q: usize| q as f64 * 1000.0 / r.rate as f64;
    md.push_str(&format!(
        "A callback client renders N voices (sawtooth → SVF low-pass following an ADSR \
         envelope, retriggered) in its process callback into quaverd's null sink at {} Hz. \
         Render time and wakeup latency are measured inside the callback; glitches are the \
         misses quaverd counted against the client.\n\n",
        r.rate
    ));
    let mut plots = Vec::new();
    if let Some(v) = &r.voice {
        summary.row(vec![
            "voice".into(),
            format!(
                "quantum {} ({:.2} ms), budget {}",
                v.quantum,
                ms(v.quantum),
                pct(v.budget)
            ),
            format!("{}{} voices", if v.capped { "≥ " } else { "" }, v.voices),
            v.points.iter().map(|p| p.glitches).sum::<u64>().to_string(),
            v.realtime.clone(),
        ]);
        md.push_str(&format!(
            "## Voice mark\n\n**{}{} voices** within {} of each {}-frame cycle (mean render \
             time){}. Client: {}.\n\n",
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
        ));
        let mut t = Table::new(&[
            "voices",
            "cycles",
            "mean load",
            "mean render",
            "render p99",
            "ns per voice-frame",
            "glitches",
            "late",
        ]);
        for p in &v.points {
            let s = &p.stats;
            t.row(vec![
                p.voices.to_string(),
                s.cycles.to_string(),
                pct(s.load()),
                fmt_ns(s.mean_render_ns()),
                b(&s.render, 99.0),
                if s.voice_frames > 0 {
                    format!("{:.2}", s.render_ns as f64 / s.voice_frames as f64)
                } else {
                    "–".into()
                },
                p.glitches.to_string(),
                s.late.to_string(),
            ]);
        }
        md.push_str(&t.markdown());
        md.push_str("\n{plot:voice-load}\n\n");
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
        plots.push((
            "voice-load".to_string(),
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
        ));
    }
    if let Some(l) = &r.latency {
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
        md.push_str(&format!(
            "## Latency mark\n\nSmallest quantum with no glitch for {} voices: **{}**. A \
             fresh client per quantum.\n\n",
            l.voices,
            match (l.quantum, l.ms) {
                (Some(q), Some(m)) => format!("{q} frames = {m:.2} ms"),
                _ => "none".into(),
            }
        ));
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
                    if w.went_async { "yes" } else { "no" }.into(),
                    w.stats.late.to_string(),
                ]),
                None => t.row(vec![
                    p.requested.to_string(),
                    format!("failed: {}", p.error.clone().unwrap_or_default()),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
            }
        }
        md.push_str(&t.markdown());
        md.push('\n');
    }
    if let Some(j) = &r.jitter {
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
        md.push_str(&format!(
            "## Jitter mark\n\n{} voices at quantum {} ({:.2} ms), {} callbacks, client {}. \
             Wakeup = callback start − cycle start (the server's timestamp, same clock); \
             render = the voices' rendering. Log2 buckets, shown by their upper bound.\n\n",
            w.voices,
            w.quantum,
            ms(w.quantum),
            w.stats.cycles,
            j.realtime
        ));
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
        md.push_str(&t.markdown());
        md.push_str(&format!(
            "\nGlitches: {}; callbacks after the deadline: {}.\n\n{{plot:jitter}}\n\n",
            w.glitches, w.stats.late
        ));
        // One category axis covering both.
        let mut cats: Vec<String> = Vec::new();
        let mut all: Vec<usize> = Vec::new();
        for h in [&w.stats.wake, &w.stats.render] {
            for (i, &c) in h.counts.iter().enumerate() {
                if c > 0 && !all.contains(&i) {
                    all.push(i);
                }
            }
        }
        all.sort_unstable();
        if let (Some(&lo), Some(&hi)) = (all.first(), all.last()) {
            let pick = |h: &Log2Hist| -> Vec<f64> {
                let t = h.total().max(1) as f64;
                (lo..=hi)
                    .map(|i| h.counts.get(i).copied().unwrap_or(0) as f64 * 100.0 / t)
                    .collect()
            };
            for i in lo..=hi {
                cats.push(format!(
                    "<{}",
                    fmt_ns(Log2Hist::bucket_bounds(i).upper as f64)
                ));
            }
            plots.push((
                "jitter".to_string(),
                bar_chart(
                    "Jitter mark: wakeup latency and render time",
                    "log2 bucket",
                    "% of callbacks",
                    &cats,
                    &[
                        ("wakeup".into(), pick(&w.stats.wake)),
                        ("render".into(), pick(&w.stats.render)),
                    ],
                ),
            ));
        }
    }
    if let Some(sw) = &r.switch {
        crate::modes::synth::switch::render(sw, &mut summary, &mut md, &mut plots);
    }
    let results = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
    ModeOutput {
        results,
        markdown: md,
        plots,
        summary,
        extra: Vec::new(),
    }
}
