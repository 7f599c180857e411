//! Reports: a JSON record, a Markdown page with SVG plots, and a summary table for the
//! terminal. Every report records the machine, the versions of every program, the
//! exact commands run and the seed.

pub mod doc;
#[cfg(test)]
mod golden;
pub mod progress;
pub mod stats;
pub mod svg;

use crate::tools::clock::Utc;
use crate::tools::machine::Machine;
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A column (or, in [`Table::by_row`], a row) of a table built from items: its
/// heading and how an item's cell is made.
pub type Column<'a, T> = (&'a str, &'a dyn Fn(&T) -> String);

/// A table printed on the terminal and embedded in Markdown.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Table {
    /// Column headings.
    pub headers: Vec<String>,
    /// Rows of cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headings.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// A table with a row per item: each column is its heading and how an item's cell
    /// is made.
    pub fn of<'a, T: 'a>(
        items: impl IntoIterator<Item = &'a T>,
        columns: &[Column<'_, T>],
    ) -> Table {
        let mut t = Table::new(&columns.iter().map(|c| c.0).collect::<Vec<_>>());
        for item in items {
            t.row(columns.iter().map(|c| (c.1)(item)).collect());
        }
        t
    }

    /// A table with a column per item (after the `corner` column of row names): each
    /// row is its name and how an item's cell is made.
    pub fn by_row<'a, T: 'a>(
        corner: &str,
        items: &'a [T],
        heading: impl Fn(&T) -> String,
        rows: &[Column<'_, T>],
    ) -> Table {
        let mut t = Table {
            headers: std::iter::once(corner.to_string())
                .chain(items.iter().map(heading))
                .collect(),
            rows: Vec::new(),
        };
        for (name, f) in rows {
            t.row(
                std::iter::once(name.to_string())
                    .chain(items.iter().map(f))
                    .collect(),
            );
        }
        t
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Appends a row, filled up with empty cells to the width of the headings.
    pub fn row_padded(&mut self, mut cells: Vec<String>) {
        cells.resize(self.headers.len().max(cells.len()), String::new());
        self.rows.push(cells);
    }

    /// GitHub-flavoured Markdown.
    pub fn markdown(&self) -> String {
        let esc = |s: &str| s.replace('|', "\\|");
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| {} |",
            self.headers
                .iter()
                .map(|h| esc(h))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(out, "|{}", "---|".repeat(self.headers.len()));
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} |",
                r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        out
    }

    /// Plain text with aligned columns (first column left, the others right).
    pub fn text(&self) -> String {
        let n = self.headers.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let mut s = String::new();
            for (i, c) in r.iter().enumerate().take(n) {
                let pad = " ".repeat(w[i] - c.chars().count());
                if i == 0 {
                    let _ = write!(s, "{c}{pad}");
                } else {
                    let _ = write!(s, "  {pad}{c}");
                }
            }
            s.trim_end().to_string()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        out.push_str(&"-".repeat(w.iter().sum::<usize>() + 2 * n.saturating_sub(1)));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// What a mode hands back to be written.
#[derive(Debug, Default)]
pub struct ModeOutput {
    /// Machine-readable results (the JSON record's `results`).
    pub results: serde_json::Value,
    /// The Markdown body (tables, explanations); plots are referenced as
    /// `{plot:NAME}` and replaced by image links.
    pub markdown: String,
    /// SVG plots by name.
    pub plots: Vec<(String, String)>,
    /// The table printed on the terminal at the end.
    pub summary: Table,
    /// Further tables printed after it (a mode with more than one part).
    pub extra: Vec<Table>,
}

/// The JSON record.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    /// Mode name.
    pub mode: &'a str,
    /// When the run started (UTC, RFC 3339).
    pub started: String,
    /// When it finished.
    pub finished: String,
    /// Seed of every random choice.
    pub seed: u64,
    /// Whether `--quick` shortened the run.
    pub quick: bool,
    /// How quaver-bench was invoked.
    pub invocation: String,
    /// The command that reproduces the run.
    pub reproduce: String,
    /// The machine.
    pub machine: &'a Machine,
    /// Versions of everything used or compared against.
    pub versions: &'a BTreeMap<String, String>,
    /// Every external command run, exactly (environment included).
    pub commands: &'a [String],
    /// Remarks (degraded settings, missing tools).
    pub notes: &'a [String],
    /// The mode's results.
    pub results: &'a serde_json::Value,
}

/// Paths of the files a report wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// The JSON record.
    pub json: PathBuf,
    /// The Markdown report.
    pub markdown: PathBuf,
    /// The plots.
    pub plots: Vec<PathBuf>,
}

/// Writes `DIR/<mode>-<stamp>.{json,md}` and `DIR/<mode>-<stamp>-<plot>.svg`.
pub fn write(dir: &Path, stamp: &Utc, record: &Record<'_>, out: &ModeOutput) -> Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = format!("{}-{}", record.mode, stamp.compact());
    let json = dir.join(format!("{base}.json"));
    let text = serde_json::to_string_pretty(record)?;
    std::fs::write(&json, text + "\n").with_context(|| format!("writing {}", json.display()))?;
    let mut plots = Vec::new();
    let mut body = out.markdown.clone();
    for (name, svg) in &out.plots {
        let file = format!("{base}-{name}.svg");
        let p = dir.join(&file);
        std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
        body = body.replace(&format!("{{plot:{name}}}"), &format!("![{name}]({file})"));
        plots.push(p);
    }
    let md = dir.join(format!("{base}.md"));
    std::fs::write(&md, markdown(record, &body))
        .with_context(|| format!("writing {}", md.display()))?;
    Ok(Written {
        json,
        markdown: md,
        plots,
    })
}

fn markdown(r: &Record<'_>, body: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# quaver-bench {} — {}\n", r.mode, r.started);
    let _ = writeln!(
        s,
        "Reproduce with `{}` (seed {}{}). Finished {}.\n",
        r.reproduce,
        r.seed,
        if r.quick { ", quick run" } else { "" },
        r.finished
    );
    s.push_str(body.trim_end());
    s.push_str("\n\n## Machine\n\n");
    let m = r.machine;
    let mut t = Table::new(&["", ""]);
    t.row(vec!["CPU".into(), m.cpu_model.clone()]);
    t.row(vec!["logical CPUs".into(), m.cores.to_string()]);
    t.row(vec!["memory".into(), format!("{} MiB", m.memory_mib)]);
    t.row(vec!["kernel".into(), m.kernel.clone()]);
    t.row(vec!["cpufreq governor".into(), m.governor.clone()]);
    t.row(vec!["OS".into(), m.os.clone()]);
    s.push_str(&t.markdown());
    s.push_str("\n## Versions\n\n");
    let mut t = Table::new(&["program", "version"]);
    for (k, v) in r.versions {
        t.row(vec![k.clone(), v.clone()]);
    }
    s.push_str(&t.markdown());
    s.push_str("\n## Commands\n\nquaver-bench was run as:\n\n```sh\n");
    s.push_str(&r.invocation);
    s.push_str("\n```\n\nand ran, in order:\n\n```sh\n");
    for c in r.commands {
        s.push_str(c);
        s.push('\n');
    }
    s.push_str("```\n");
    if !r.notes.is_empty() {
        s.push_str("\n## Notes\n\n");
        for n in r.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::new(&["quantum", "measured", "a|b"]);
        t.row(vec!["32".into(), "320".into(), "x".into()]);
        t.row(vec!["2048".into(), "4352 µs".into(), "y".into()]);
        t
    }

    #[test]
    fn markdown_tables_escape_pipes() {
        let md = table().markdown();
        assert!(md.starts_with("| quantum | measured | a\\|b |\n|---|---|---|\n"));
        assert!(md.contains("| 2048 | 4352 µs | y |"));
    }

    #[test]
    fn text_tables_align_by_characters() {
        let txt = table().text();
        let lines: Vec<&str> = txt.lines().collect();
        assert_eq!(lines[0], "quantum  measured  a|b");
        assert_eq!(lines[2], "32            320    x");
        assert_eq!(lines[3], "2048      4352 µs    y");
    }

    #[test]
    fn writes_json_markdown_and_plots() {
        let dir = tempfile::tempdir().unwrap();
        let machine = Machine::probe();
        let versions: BTreeMap<String, String> =
            [("cyclictest".to_string(), "not installed".to_string())].into();
        let commands = vec!["quaverd --device sim".to_string()];
        let results = serde_json::json!({"points": [1, 2]});
        let rec = Record {
            mode: "latency",
            started: "2026-01-01T00:00:00Z".into(),
            finished: "2026-01-01T00:01:00Z".into(),
            seed: 42,
            quick: true,
            invocation: "quaver-bench latency --quick".into(),
            reproduce: "quaver-bench latency --seed 42 --quick".into(),
            machine: &machine,
            versions: &versions,
            commands: &commands,
            notes: &["a note".to_string()],
            results: &results,
        };
        let out = ModeOutput {
            results: serde_json::Value::Null,
            markdown: "## Results\n\n{plot:latency}\n".into(),
            plots: vec![("latency".into(), "<svg/>".into())],
            summary: table(),
            extra: Vec::new(),
        };
        let stamp = Utc::from_unix(1_700_000_000);
        let w = write(dir.path(), &stamp, &rec, &out).unwrap();
        assert!(w.json.ends_with("latency-20231114T221320Z.json"));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
        assert_eq!(v["seed"], 42);
        assert_eq!(v["versions"]["cyclictest"], "not installed");
        assert_eq!(v["results"]["points"][1], 2);
        let md = std::fs::read_to_string(&w.markdown).unwrap();
        assert!(md.contains("![latency](latency-20231114T221320Z-latency.svg)"));
        assert!(md.contains("quaverd --device sim"));
        assert!(md.contains("seed 42"));
        assert!(md.contains("- a note"));
        assert_eq!(std::fs::read_to_string(&w.plots[0]).unwrap(), "<svg/>");
    }
}
