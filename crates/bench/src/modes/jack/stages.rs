//! quaverd's per-cycle stage breakdown over a window (the `timing` reply's `stages`,
//! docs/engine/stages.md): where the cycles with a late callback or an xrun spent
//! their time, next to all cycles.

use quaver_client::quaver_protocol::StageStats;
use quaver_engine::rt::stages::{STAGE_BUCKETS, stage_bucket_low};
use serde::{Deserialize, Serialize};

/// One class of cycles over a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageClassWindow {
    /// `all`, `late` or `xrun`.
    pub name: String,
    /// Cycles.
    pub cycles: u64,
    /// Per stage: histogram (the protocol's buckets).
    pub hist: Vec<Vec<u64>>,
    /// Per stage: cycles in which it was the longest.
    pub dominant: Vec<u64>,
}

/// The breakdown over a window (or the sum of several).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageWindow {
    /// Stage names.
    pub stages: Vec<String>,
    /// Per class.
    pub classes: Vec<StageClassWindow>,
}

fn sub(a: &[u64], b: &[u64]) -> Vec<u64> {
    (0..a.len().max(b.len()))
        .map(|i| {
            a.get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(b.get(i).copied().unwrap_or(0))
        })
        .collect()
}

fn add(into: &mut Vec<u64>, b: &[u64]) {
    if into.len() < b.len() {
        into.resize(b.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(b) {
        *a += b;
    }
}

/// What happened between two cumulative readings.
pub fn window(before: &StageStats, after: &StageStats) -> StageWindow {
    StageWindow {
        stages: after.stages.clone(),
        classes: after
            .classes
            .iter()
            .map(|c1| {
                let c0 = before.classes.iter().find(|c| c.name == c1.name);
                let empty = Vec::new();
                let h0 = |i: usize| c0.and_then(|c| c.hist.get(i)).unwrap_or(&empty);
                StageClassWindow {
                    name: c1.name.clone(),
                    cycles: c1.cycles.saturating_sub(c0.map_or(0, |c| c.cycles)),
                    hist: c1
                        .hist
                        .iter()
                        .enumerate()
                        .map(|(i, h)| sub(h, h0(i)))
                        .collect(),
                    dominant: sub(&c1.dominant, c0.map_or(&empty, |c| &c.dominant)),
                }
            })
            .collect(),
    }
}

impl StageWindow {
    /// The sum of several windows.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a StageWindow>) -> Option<StageWindow> {
        let mut t: Option<StageWindow> = None;
        for w in all {
            let t = t.get_or_insert_with(|| StageWindow {
                stages: w.stages.clone(),
                classes: Vec::new(),
            });
            for c in &w.classes {
                let at = match t.classes.iter().position(|x| x.name == c.name) {
                    Some(i) => i,
                    None => {
                        t.classes.push(StageClassWindow {
                            name: c.name.clone(),
                            ..StageClassWindow::default()
                        });
                        t.classes.len() - 1
                    }
                };
                let into = &mut t.classes[at];
                into.cycles += c.cycles;
                add(&mut into.dominant, &c.dominant);
                if into.hist.len() < c.hist.len() {
                    into.hist.resize(c.hist.len(), Vec::new());
                }
                for (h, o) in into.hist.iter_mut().zip(&c.hist) {
                    add(h, o);
                }
            }
        }
        t
    }

    /// A class by name.
    pub fn class(&self, name: &str) -> Option<&StageClassWindow> {
        self.classes.iter().find(|c| c.name == name)
    }
}

/// The upper end of the bucket holding percentile `p` of `hist`, ns (None: empty).
pub fn percentile(hist: &[u64], p: f64) -> Option<u64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, &n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(upper(i));
        }
    }
    hist.len().checked_sub(1).map(upper)
}

fn upper(i: usize) -> u64 {
    if i + 1 >= STAGE_BUCKETS {
        stage_bucket_low(i)
    } else {
        stage_bucket_low(i + 1)
    }
}

/// A duration for the tables: µs with one decimal below 1 ms, else ms.
pub fn fmt_ns(ns: Option<u64>) -> String {
    match ns {
        None => "–".into(),
        Some(n) if n >= 1_000_000 => format!("{:.2} ms", n as f64 / 1e6),
        Some(n) => format!("{:.1} µs", n as f64 / 1e3),
    }
}

/// Per stage, one table row: the stage, then for each class `p50 / p99 / max (longest
/// in N)`.
pub fn rows(w: &StageWindow, classes: &[&str]) -> Vec<Vec<String>> {
    w.stages
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut row = vec![name.clone()];
            for c in classes {
                let Some(c) = w.class(c) else {
                    row.push("n/a".into());
                    continue;
                };
                let h = c.hist.get(i).map(Vec::as_slice).unwrap_or(&[]);
                let longest = c.dominant.get(i).copied().unwrap_or(0);
                row.push(format!(
                    "{} / {} / {}{}",
                    fmt_ns(percentile(h, 50.0)),
                    fmt_ns(percentile(h, 99.0)),
                    fmt_ns(percentile(h, 100.0)),
                    if name == "callback_late" {
                        String::new()
                    } else {
                        format!(" ({longest})")
                    }
                ));
            }
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_client::quaver_protocol::StageClass;
    use quaver_engine::rt::stages::stage_bucket;

    fn stats(late_cycles: u64, timer: &[u64]) -> StageStats {
        let mut hist = vec![0u64; stage_bucket(3_000_000) + 1];
        for &t in timer {
            hist[stage_bucket(t)] += 1;
        }
        StageStats {
            stages: vec!["timer".into(), "resume".into()],
            classes: vec![StageClass {
                name: "late".into(),
                cycles: late_cycles,
                hist: vec![hist, vec![]],
                dominant: vec![late_cycles, 0],
                sum_ns: vec![0, 0],
            }],
        }
    }

    #[test]
    fn a_window_is_the_difference_and_windows_add_up() {
        let a = stats(1, &[2_000_000]);
        let b = stats(3, &[2_000_000, 3_000_000, 3_000_000]);
        let w = window(&a, &b);
        let late = w.class("late").unwrap();
        assert_eq!(late.cycles, 2);
        assert_eq!(late.dominant, vec![2, 0]);
        assert_eq!(late.hist[0].iter().sum::<u64>(), 2);
        let p = percentile(&late.hist[0], 50.0).unwrap();
        assert!((3_000_000..3_400_000).contains(&p), "{p}");
        let two = StageWindow::sum([&w, &w]).unwrap();
        assert_eq!(two.class("late").unwrap().cycles, 4);
        let r = rows(&two, &["late", "xrun"]);
        assert_eq!(r.len(), 2);
        assert!(r[0][1].ends_with("(4)"), "{:?}", r[0]);
        assert_eq!(r[0][2], "n/a");
        assert_eq!(percentile(&[], 50.0), None);
    }
}
