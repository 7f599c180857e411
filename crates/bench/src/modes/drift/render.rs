//! The drift report: per follower and phase, lock time, settled ratio error, level and
//! glitches; every card's xruns; the estimate's error and the level over time.

use crate::modes::drift::analysis::Phase;
use crate::modes::drift::{CardResult, CaseResult, DriftResults};
use crate::report::doc::{Doc, opt};
use crate::report::svg::{Series, line_plot};
use crate::report::{ModeOutput, Table};

/// One row of the main table: a follower's phase, with its case and card.
struct Row<'a> {
    case: &'a CaseResult,
    card: &'a CardResult,
    phase: &'a Phase,
    /// "", "before the step", "after the step".
    part: &'static str,
}

fn rows(r: &DriftResults) -> Vec<Row<'_>> {
    let mut out = Vec::new();
    for case in &r.cases {
        for card in &case.cards {
            let Some(f) = &card.follow else { continue };
            let two = f.phases.len() > 1;
            for (i, phase) in f.phases.iter().enumerate() {
                let part = match (two, i) {
                    (false, _) => "",
                    (true, 0) => "before the step",
                    (true, _) => "after the step",
                };
                out.push(Row {
                    case,
                    card,
                    phase,
                    part,
                });
            }
        }
    }
    out
}

fn driver(case: &CaseResult) -> Option<&CardResult> {
    case.cards.iter().find(|c| c.driver)
}

fn crystals(row: &Row<'_>) -> String {
    let d = driver(row.case).map_or(0.0, |d| d.drift_ppm);
    let f = match (row.part, row.card.step_ppm) {
        ("after the step", Some(p)) => p,
        _ => row.card.drift_ppm,
    };
    format!("{d:+} / {f:+}")
}

fn level(p: &Phase) -> String {
    match (p.level_min, p.level_max, p.level_mean) {
        (Some(lo), Some(hi), Some(m)) => format!("{lo:+} / {hi:+} / {m:+.1}"),
        _ => "–".into(),
    }
}

/// The main table.
fn follower_table(r: &DriftResults) -> Table {
    let rows = rows(r);
    Table::of(
        &rows,
        &[
            ("case", &|x: &Row<'_>| x.case.case.name().to_string()),
            ("card", &|x| {
                if x.part.is_empty() {
                    x.card.name.clone()
                } else {
                    format!("{} ({})", x.card.name, x.part)
                }
            }),
            ("crystals ppm (driver / card)", &crystals),
            ("true ppm", &|x| format!("{:+.2}", x.phase.truth_ppm)),
            ("lock s", &|x| opt(x.phase.lock_s, 1)),
            ("settled error ppm (mean)", &|x| {
                opt(x.phase.settled_error_ppm, 2)
            }),
            ("max |error| ppm", &|x| {
                opt(x.phase.settled_error_max_ppm, 2)
            }),
            ("level − target frames (min / max / mean)", &|x| {
                level(x.phase)
            }),
            ("ratio error from level drift ppm", &|x| {
                opt(x.phase.level_drift_ppm, 3)
            }),
            ("readings outside band", &|x| {
                format!("{} / {}", x.phase.outside_band, x.phase.readings)
            }),
        ],
    )
}

/// Every card's xruns, and each follower's loop restarts and real-time extremes.
fn card_table(r: &DriftResults) -> Table {
    let cards: Vec<(&CaseResult, &CardResult)> = r
        .cases
        .iter()
        .flat_map(|c| c.cards.iter().map(move |k| (c, k)))
        .collect();
    Table::of(
        &cards,
        &[
            ("case", &|x: &(&CaseResult, &CardResult)| {
                x.0.case.name().to_string()
            }),
            ("card", &|x| x.1.name.clone()),
            ("role", &|x| {
                if x.1.driver { "driver" } else { "follower" }.to_string()
            }),
            ("crystal ppm", &|x| match x.1.step_ppm {
                Some(p) => format!("{:+} → {p:+}", x.1.drift_ppm),
                None => format!("{:+}", x.1.drift_ppm),
            }),
            ("underruns", &|x| x.1.underruns.to_string()),
            ("overruns", &|x| x.1.overruns.to_string()),
            ("loop restarts", &|x| {
                x.1.follow
                    .as_ref()
                    .map_or("–".into(), |f| f.restarts.to_string())
            }),
            ("level error every cycle (min / max)", &|x| match x
                .1
                .follow
                .as_ref()
                .and_then(|f| f.rt_level_error)
            {
                Some((lo, hi)) => format!("{lo:+} / {hi:+}"),
                None => "–".into(),
            }),
            ("glitch", &|x| match &x.1.follow {
                Some(f) if f.glitch => "yes".into(),
                Some(_) => "no".into(),
                None => "–".into(),
            }),
        ],
    )
}

fn plot(r: &DriftResults, title: &str, y: &str, pick: fn(&(f64, f64, f64)) -> f64) -> String {
    let series: Vec<Series> = r
        .cases
        .iter()
        .flat_map(|c| {
            c.cards.iter().filter_map(move |k| {
                let f = k.follow.as_ref()?;
                let pts = f.trace.iter().map(|p| (p.0, pick(p))).collect();
                Some(Series::new(format!("{} {}", c.case.name(), k.name), pts))
            })
        })
        .collect();
    line_plot(
        title,
        "time since quaverd started (s)",
        y,
        &series,
        false,
        false,
    )
}

/// Tables, plots and the terminal summary.
pub fn render(r: &DriftResults) -> ModeOutput {
    let main = follower_table(r);
    let cards = card_table(r);
    let mut doc = Doc::new();
    doc.heading(2, "Followers on crystals ± ppm apart")
        .para(format!(
            "Each case is a quaverd with simulated cards whose crystals are off by ±{} ppm \
             ({}-frame watermark; the first card drives the graph, the others follow it \
             through adaptive resampling), one pacat asking for {} ms playing a tone into every card, for \
             {:.0} s{}. quaverd's `status` every {:.0} ms gives each follower's loop: its \
             settled estimate of the clocks' ratio (locked once it stays within {} ppm of \
             the truth for {} s; readings off lock: outside that band after it), and its playback level against the \
             level it holds (band ±{} frames). The ratio error from the level drift is \
             what the converter really applied on average after the lock: how far the \
             level moved between the first and last fifth of that span.",
            r.ppm,
            r.period_frames,
            r.latency_ms,
            r.seconds,
            if r.sequential {
                ", cases one after another"
            } else {
                ", every case at once, each with its own quaverd"
            },
            r.poll_seconds * 1e3,
            r.lock_ppm,
            crate::modes::drift::analysis::LOCK_HOLD_S,
            r.band_frames,
        ))
        .table(&main)
        .heading(3, "Cards")
        .table(&cards);
    if r.cases
        .iter()
        .any(|c| c.cards.iter().any(|k| k.follow.is_some()))
    {
        doc.plot(
            "estimate",
            plot(r, "Loop estimate minus true drift", "ppm", |p| p.1),
        )
        .plot(
            "level",
            plot(r, "Playback level minus target", "frames", |p| p.2),
        );
    }
    let notes: Vec<String> = r
        .cases
        .iter()
        .flat_map(|c| {
            let mut v = Vec::new();
            if let Some(f) = &c.failure {
                v.push(format!("{}: failed: {f}", c.case.name()));
            } else {
                v.push(format!(
                    "{}: quantum {} frames, {} readings, players {}",
                    c.case.name(),
                    c.quantum,
                    c.readings,
                    if c.players_ok {
                        "ran to the end"
                    } else {
                        "did NOT run to the end"
                    }
                ));
            }
            v
        })
        .collect();
    doc.list(notes);
    doc.finish(r, main, vec![cards])
}
