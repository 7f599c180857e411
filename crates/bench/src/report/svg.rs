//! Small hand-written SVG plots (line plots and grouped bar charts): a few hundred
//! bytes of markup each, no plotting library.

use std::fmt::Write as _;

const W: f64 = 720.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 180.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One line of a line plot.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// (x, y) points, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// Dashed line (e.g. theory next to measurement).
    pub dashed: bool,
}

impl Series {
    /// A solid series.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            dashed: false,
        }
    }

    /// The same series, dashed.
    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }
}

/// Escapes text for SVG.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// "Nice" linear ticks (steps of 1, 2 or 5 × 10^k) covering `[lo, hi]`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo - 1.0, lo + 1.0)
    };
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).floor() * step;
    let mut t = Vec::new();
    let mut v = start;
    while v <= hi + step * 0.5 && t.len() < 50 {
        t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    t
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e7 || v.abs() < 1e-2 {
        format!("{v:.1e}")
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        out,
        r#"<rect width="{W}" height="{H}" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(title)
    );
}

fn axes_labels(out: &mut String, x_label: &str, y_label: &str) {
    let (x0, x1, y1) = (LEFT, W - RIGHT, H - BOTTOM);
    let _ = write!(
        out,
        r#"<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="black"/><line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y1}" stroke="black"/>"#
    );
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        H - 15.0,
        esc(x_label)
    );
    let _ = write!(
        out,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
        (TOP + y1) / 2.0,
        (TOP + y1) / 2.0,
        esc(y_label)
    );
}

fn legend(out: &mut String, names: &[(String, bool)]) {
    for (i, (name, dashed)) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 20.0;
        let x = W - RIGHT + 15.0;
        let c = COLORS[i % COLORS.len()];
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{c}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            esc(name)
        );
    }
}

/// A line plot. With `x_log2` the x axis is logarithmic (base 2) and ticks sit on
/// powers of two (quanta, stream counts); `y_from_zero` starts the y axis at 0.
pub fn line_plot(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_log2: bool,
    y_from_zero: bool,
) -> String {
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.0.is_finite() && p.1.is_finite() && (!x_log2 || p.0 > 0.0));
    let tx = |x: f64| if x_log2 { x.log2() } else { x };
    let (mut xmin, mut xmax, mut ymin, mut ymax) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        xmin = xmin.min(tx(x));
        xmax = xmax.max(tx(x));
        ymin = ymin.min(y);
        ymax = ymax.max(y);
    }
    let mut out = String::new();
    header(&mut out, title);
    if xmin > xmax {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
            W / 2.0,
            H / 2.0
        );
        return out;
    }
    if y_from_zero {
        ymin = ymin.min(0.0);
    }
    let yt = nice_ticks(ymin, ymax, 5);
    let (ylo, yhi) = (yt[0], *yt.last().expect("ticks"));
    let (xlo, xhi) = if x_log2 {
        (xmin.floor(), xmax.ceil().max(xmin.floor() + 1.0))
    } else {
        let t = nice_ticks(xmin, xmax, 6);
        (t[0], *t.last().expect("ticks"))
    };
    let px = |x: f64| LEFT + (tx(x) - xlo) / (xhi - xlo).max(1e-12) * (W - RIGHT - LEFT);
    let py = |y: f64| (H - BOTTOM) - (y - ylo) / (yhi - ylo).max(1e-12) * (H - BOTTOM - TOP);
    for &v in &yt {
        let y = py(v);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v)
        );
    }
    let xticks: Vec<f64> = if x_log2 {
        (xlo as i32..=xhi as i32).map(|e| 2f64.powi(e)).collect()
    } else {
        nice_ticks(xlo, xhi, 6)
    };
    for v in xticks {
        let x = px(v);
        let _ = write!(
            out,
            r#"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="black"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
            H - BOTTOM,
            H - BOTTOM + 5.0,
            H - BOTTOM + 19.0,
            fmt_tick(v)
        );
    }
    axes_labels(&mut out, x_label, y_label);
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!x_log2 || p.0 > 0.0))
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let dash = if s.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').expect("formatted above");
            let _ = write!(out, r#"<circle cx="{x}" cy="{y}" r="3" fill="{c}"/>"#);
        }
    }
    legend(
        &mut out,
        &series
            .iter()
            .map(|s| (s.name.clone(), s.dashed))
            .collect::<Vec<_>>(),
    );
    out.push_str("</svg>\n");
    out
}

/// A grouped bar chart: one group per category, one bar per series.
pub fn bar_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter())
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    if categories.is_empty() || series.is_empty() {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
            W / 2.0,
            H / 2.0
        );
        return out;
    }
    let yt = nice_ticks(0.0, ymax.max(1e-9), 5);
    let yhi = *yt.last().expect("ticks");
    let py = |y: f64| (H - BOTTOM) - y / yhi.max(1e-12) * (H - BOTTOM - TOP);
    for &v in &yt {
        let y = py(v);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v)
        );
    }
    let group = (W - RIGHT - LEFT) / categories.len() as f64;
    let bar = group * 0.8 / series.len() as f64;
    let label_every = (categories.len() / 16).max(1);
    for (ci, cat) in categories.iter().enumerate() {
        let gx = LEFT + ci as f64 * group + group * 0.1;
        for (si, (_, vals)) in series.iter().enumerate() {
            let v = vals.get(ci).copied().unwrap_or(0.0);
            if v.is_finite() && v > 0.0 {
                let y = py(v);
                let _ = write!(
                    out,
                    r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                    gx + si as f64 * bar,
                    bar.max(0.5),
                    (H - BOTTOM - y).max(0.0),
                    COLORS[si % COLORS.len()]
                );
            }
        }
        if ci % label_every == 0 {
            let x = LEFT + (ci as f64 + 0.5) * group;
            let _ = write!(
                out,
                r#"<text x="{x:.1}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
                H - BOTTOM + 16.0,
                esc(cat)
            );
        }
    }
    axes_labels(&mut out, x_label, y_label);
    legend(
        &mut out,
        &series
            .iter()
            .map(|s| (s.0.clone(), false))
            .collect::<Vec<_>>(),
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice() {
        assert_eq!(
            nice_ticks(0.0, 10.0, 5),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(nice_ticks(3.0, 3.0, 5), vec![2.0, 2.5, 3.0, 3.5, 4.0]);
        let t = nice_ticks(0.0, 0.013, 5);
        assert!(t.len() >= 3 && *t.last().unwrap() >= 0.013);
    }

    #[test]
    fn line_plot_is_wellformed_svg() {
        let s = line_plot(
            "latency <sim>",
            "quantum",
            "frames",
            &[
                Series::new(
                    "measured",
                    vec![(32.0, 320.0), (64.0, 384.0), (2048.0, 4352.0)],
                ),
                Series::new("theory", vec![(32.0, 320.0), (2048.0, 4352.0)]).dashed(),
            ],
            true,
            true,
        );
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("latency &lt;sim&gt;"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("stroke-dasharray"));
        // Ticks on powers of two from 32 to 2048.
        for t in ["32", "64", "1024", "2048"] {
            assert!(s.contains(&format!(">{t}</text>")), "tick {t}");
        }
        assert!(line_plot("t", "x", "y", &[], false, false).contains("no data"));
    }

    #[test]
    fn bar_chart_draws_every_nonzero_bar() {
        let s = bar_chart(
            "hist",
            "ns",
            "count",
            &["<1µs".to_string(), "<2µs".to_string()],
            &[
                ("quaverd".to_string(), vec![3.0, 0.0]),
                ("cyclictest".to_string(), vec![1.0, 2.0]),
            ],
        );
        assert_eq!(s.matches("<rect x=").count(), 3);
        assert!(s.contains("&lt;1µs"));
    }
}
