//! The builder every mode writes its report with: Markdown blocks (headings,
//! paragraphs, tables, lists, plot placeholders) separated by blank lines, the SVG plots
//! they reference, and the terminal tables.

use crate::report::{ModeOutput, Table};
use serde::Serialize;

/// A report under construction.
#[derive(Debug, Default)]
pub struct Doc {
    md: String,
    plots: Vec<(String, String)>,
}

impl Doc {
    /// An empty report.
    pub fn new() -> Doc {
        Doc::default()
    }

    /// Starts a block: a blank line after the previous one.
    fn block(&mut self) -> &mut String {
        if !self.md.is_empty() {
            self.md.push('\n');
        }
        &mut self.md
    }

    /// A heading of `level` (`##` for a mode's parts, `###` below).
    pub fn heading(&mut self, level: usize, title: impl AsRef<str>) -> &mut Doc {
        let b = self.block();
        b.push_str(&"#".repeat(level));
        b.push(' ');
        b.push_str(title.as_ref());
        b.push('\n');
        self
    }

    /// A paragraph (one logical line; Markdown wraps it).
    pub fn para(&mut self, text: impl AsRef<str>) -> &mut Doc {
        let b = self.block();
        b.push_str(text.as_ref());
        b.push('\n');
        self
    }

    /// A table.
    pub fn table(&mut self, t: &Table) -> &mut Doc {
        let md = t.markdown();
        self.block().push_str(&md);
        self
    }

    /// A bullet list, one item per line (an item may hold nested `  - ` lines).
    pub fn list<S: AsRef<str>>(&mut self, items: impl IntoIterator<Item = S>) -> &mut Doc {
        let mut s = String::new();
        for i in items {
            s.push_str("- ");
            s.push_str(i.as_ref());
            s.push('\n');
        }
        if !s.is_empty() {
            self.block().push_str(&s);
        }
        self
    }

    /// The plot `name` (an SVG document), placed here.
    pub fn plot(&mut self, name: &str, svg: String) -> &mut Doc {
        self.plots.push((name.to_string(), svg));
        self.place(name)
    }

    /// A placeholder for a plot added with [`Doc::add_plot`].
    pub fn place(&mut self, name: &str) -> &mut Doc {
        let b = self.block();
        b.push_str("{plot:");
        b.push_str(name);
        b.push_str("}\n");
        self
    }

    /// Adds the plot `name` without placing it (placed with [`Doc::place`]).
    pub fn add_plot(&mut self, name: &str, svg: String) -> &mut Doc {
        self.plots.push((name.to_string(), svg));
        self
    }

    /// The Markdown so far.
    pub fn markdown(&self) -> &str {
        &self.md
    }

    /// The mode's output: `results` as its JSON, this Markdown and these plots, and
    /// the tables printed on the terminal.
    pub fn finish(self, results: &impl Serialize, summary: Table, extra: Vec<Table>) -> ModeOutput {
        ModeOutput {
            results: serde_json::to_value(results).unwrap_or_default(),
            markdown: self.md,
            plots: self.plots,
            summary,
            extra,
        }
    }
}

/// `v` with `digits` decimals, or "–".
pub fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// "yes" or "no".
pub fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_separated_by_one_blank_line() {
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["1".into(), "2".into()]);
        let mut d = Doc::new();
        d.heading(2, "Part")
            .para("Text.")
            .table(&t)
            .plot("p", "<svg/>".into())
            .list(["x", "y"])
            .list(Vec::<String>::new())
            .heading(3, "Detail");
        assert_eq!(
            d.markdown(),
            "## Part\n\nText.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n{plot:p}\n\n- x\n- y\n\n### Detail\n"
        );
        let out = d.finish(&serde_json::json!({"k": 1}), t, Vec::new());
        assert_eq!(out.plots, vec![("p".to_string(), "<svg/>".to_string())]);
        assert_eq!(out.results["k"], 1);
        assert_eq!(
            (opt(Some(1.234), 1), opt(None, 1)),
            ("1.2".into(), "–".into())
        );
    }
}
