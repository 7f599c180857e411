//! PipeWire's per-node timings as its tools print them: `pw-top -b` rows and
//! `pw-profiler` logs, and the monitor that runs one of them during a window.

use crate::tools::exec::{describe, run_bounded, signal, stop_child, wait_bounded, which};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One node's WAIT/BUSY samples as pw-top computes them: WAIT = awake − signal, BUSY
/// = finish − awake, one pair per sample, ns; `errors` counts samples whose status
/// was not "finished".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeTimes {
    /// Node name.
    pub name: String,
    /// WAIT samples, ns.
    pub wait_ns: Vec<f64>,
    /// BUSY samples, ns.
    pub busy_ns: Vec<f64>,
    /// Samples not finished in their cycle (pw-profiler) or pw-top's ERR at the end.
    pub errors: u64,
}

/// Parses `pw-top -b` output: every row under a `S   ID  QUANT …` header, keyed by
/// node name; WAIT/BUSY like `  12.3us`, `1.2ms`, `0.5s` or `---` (not running).
pub fn parse_pw_top(text: &str) -> BTreeMap<String, NodeTimes> {
    let mut out: BTreeMap<String, NodeTimes> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with("S ") && line.contains("WAIT") {
            continue;
        }
        let mut rest = line;
        let mut fields = Vec::new();
        // S ID QUANT RATE WAIT BUSY W/Q B/Q ERR, then FORMAT (16 wide) and the name.
        for _ in 0..9 {
            let t = rest.trim_start();
            let end = t.find(' ').unwrap_or(t.len());
            fields.push(&t[..end]);
            rest = &t[end..];
        }
        if fields.len() < 9 || fields[0].len() != 1 || fields[1].parse::<u32>().is_err() {
            continue;
        }
        let Ok(err) = fields[8].parse::<u64>() else {
            continue;
        };
        // One space, the 16-character format, then " + " for followers and the name.
        let name = rest
            .get(1..)
            .map(|r| r.chars().skip(16).collect::<String>())
            .unwrap_or_default();
        let name = name
            .trim_start()
            .trim_start_matches("+ ")
            .trim()
            .to_string();
        if name.is_empty() {
            continue;
        }
        let e = out.entry(name.clone()).or_insert_with(|| NodeTimes {
            name,
            ..NodeTimes::default()
        });
        if let (Some(w), Some(b)) = (pw_time_ns(fields[4]), pw_time_ns(fields[5])) {
            e.wait_ns.push(w);
            e.busy_ns.push(b);
        }
        e.errors = err;
    }
    out
}

/// `12.3us` / `12.3µs` / `1.2ms` / `0.5s` → ns; `---`/`+++` → None.
pub fn pw_time_ns(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        return None;
    };
    num.trim().parse::<f64>().ok().map(|v| v * scale)
}

/// Parses `pw-profiler`'s log (4 driver columns, then 8 per follower: id, then its
/// signal, awake and finish times relative to the driver's signal, µs, clamped at 0,
/// two derived columns, status, 0) and the follower names from the `Timing3.plot` it
/// writes on exit (`title "NAME/ID"`). WAIT and BUSY are taken as pw-top takes them,
/// awake − signal and finish − awake, from the three times (0.3.65's own WAIT column
/// is 0 for a follower signalled with the driver).
pub fn parse_pw_profiler(log: &str, plot: &str) -> BTreeMap<String, NodeTimes> {
    let mut names = BTreeMap::new();
    let mut rest = plot;
    while let Some(i) = rest.find("title \"") {
        rest = &rest[i + 7..];
        let Some(end) = rest.find('"') else { break };
        let t = &rest[..end];
        if let Some((n, id)) = t.rsplit_once('/')
            && let Ok(id) = id.parse::<u32>()
        {
            names.insert(id, n.to_string());
        }
        rest = &rest[end..];
    }
    let mut out: BTreeMap<String, NodeTimes> = BTreeMap::new();
    for line in log.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        for g in cols.get(4..).unwrap_or(&[]).chunks(8) {
            if g.len() < 7 {
                continue;
            }
            let Ok(id) = g[0].trim().parse::<u32>() else {
                continue;
            };
            let name = names.get(&id).cloned().unwrap_or_else(|| id.to_string());
            let e = out.entry(name.clone()).or_insert_with(|| NodeTimes {
                name,
                ..NodeTimes::default()
            });
            let t = |i: usize| g[i].trim().parse::<f64>().ok();
            if let (Some(signal), Some(awake), Some(finish)) = (t(1), t(2), t(3))
                && awake > 0.0
                && finish >= awake
            {
                e.wait_ns.push((awake - signal).max(0.0) * 1e3);
                e.busy_ns.push((finish - awake) * 1e3);
            }
            if g[6].trim() != "3" {
                e.errors += 1;
            }
        }
    }
    out
}

/// How PipeWire's per-node figures are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PwTool {
    /// `pw-top -b` (PipeWire ≥ 0.3.67 or so).
    PwTop,
    /// `pw-profiler` (pw-top without batch mode): the same profiler data, every cycle.
    PwProfiler,
}

/// Which tool this PipeWire offers.
pub fn pw_tool() -> Option<PwTool> {
    let help = run_bounded(Command::new("pw-top").arg("--help"), Duration::from_secs(5)).ok();
    if help.is_some_and(|h| format!("{}{}", h.stdout, h.stderr).contains("batch-mode")) {
        Some(PwTool::PwTop)
    } else if which("pw-profiler").is_some() {
        Some(PwTool::PwProfiler)
    } else {
        None
    }
}

/// pw-top (or pw-profiler) running in the background for one window, its output in a
/// private folder.
pub(crate) struct PwMonitor {
    child: Child,
    tool: PwTool,
    dir: tempfile::TempDir,
    pub(crate) command: String,
}

impl PwMonitor {
    pub(crate) fn start(tool: PwTool, runtime: &Path) -> Result<PwMonitor> {
        let dir = crate::tools::exec::tempdir("quaver-bench-pwtop-")?;
        let mut c = match tool {
            PwTool::PwTop => {
                let mut c = Command::new("pw-top");
                c.arg("-b");
                c
            }
            PwTool::PwProfiler => {
                let mut c = Command::new("pw-profiler");
                c.args(["-o", "profiler.log"]);
                c
            }
        };
        c.env("XDG_RUNTIME_DIR", runtime).current_dir(dir.path());
        let command = describe(&c);
        let child = c
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("stdout"))?)
            .stderr(std::fs::File::create(dir.path().join("stderr"))?)
            .spawn()
            .with_context(|| format!("starting {command}"))?;
        Ok(PwMonitor {
            child,
            tool,
            dir,
            command,
        })
    }

    pub(crate) fn finish(mut self) -> BTreeMap<String, NodeTimes> {
        // SIGINT: both tools quit their main loop on it (pw-profiler then writes its
        // plot scripts, which name the followers).
        signal(self.child.id(), libc::SIGINT);
        if !matches!(
            wait_bounded(&mut self.child, Duration::from_secs(5)),
            Ok((Some(_), _))
        ) {
            stop_child(&mut self.child, Duration::from_secs(2));
        }
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        match self.tool {
            PwTool::PwTop => parse_pw_top(&read("stdout")),
            PwTool::PwProfiler => parse_pw_profiler(&read("profiler.log"), &read("Timing3.plot")),
        }
    }
}

/// pipewire-jack's libjack on Debian/Ubuntu x86-64.
pub const PW_JACK_LIB: &str = "/usr/lib/x86_64-linux-gnu/pipewire-0.3/jack/libjack.so.0";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pw_top_batch_rows() {
        // Rows as pw-top's batch mode prints them:
        // "%s %4.1u %6.1u %6.1u %s %s %s %s  %3.1u %16.16s %s%s".
        let row = |st: &str,
                   id: u32,
                   q: u32,
                   r: u32,
                   w: &str,
                   b: &str,
                   err: u32,
                   fmt: &str,
                   f: bool,
                   name: &str| {
            format!(
                "{st} {id:>4} {q:>6} {r:>6} {w:>7} {b:>7} {:>5} {:>5}  {err:>3} {fmt:>16.16} {}{name}\n",
                "0.01",
                "0.00",
                if f { " + " } else { "" }
            )
        };
        let header =
            "S   ID  QUANT   RATE    WAIT    BUSY   W/Q   B/Q  ERR FORMAT           NAME \n";
        let text = [
            header.to_string(),
            row(
                "R",
                30,
                64,
                48000,
                " 12.5us",
                "  3.1us",
                0,
                "F32LE 2 48000",
                false,
                "null",
            ),
            row(
                "R",
                41,
                64,
                48000,
                " 20.0us",
                "  8.5us",
                2,
                "F32LE 1 48000",
                true,
                "qb-light-0",
            ),
            row(
                "R",
                42,
                0,
                0,
                "  1.2ms",
                "150.0us",
                0,
                "",
                true,
                "qb-light-1",
            ),
            row(
                "S",
                50,
                0,
                0,
                "   --- ",
                "   --- ",
                0,
                "",
                false,
                "idle node",
            ),
            header.to_string(),
            row(
                "R",
                41,
                64,
                48000,
                " 22.0us",
                "  9.5us",
                3,
                "F32LE 1 48000",
                true,
                "qb-light-0",
            ),
        ]
        .concat();
        let text = text.as_str();
        let m = parse_pw_top(text);
        let a = &m["qb-light-0"];
        assert_eq!(a.wait_ns, vec![20_000.0, 22_000.0]);
        assert_eq!(a.busy_ns, vec![8_500.0, 9_500.0]);
        assert_eq!(a.errors, 3, "ERR is cumulative: the last value");
        assert_eq!(m["qb-light-1"].wait_ns, vec![1_200_000.0]);
        assert_eq!(m["qb-light-1"].busy_ns, vec![150_000.0]);
        assert_eq!(m["null"].busy_ns, vec![3_100.0]);
        assert!(m["idle node"].wait_ns.is_empty(), "--- is not a sample");
        assert_eq!(pw_time_ns("12.5µs"), Some(12_500.0));
        assert_eq!(pw_time_ns("0.5s"), Some(5e8));
        assert_eq!(pw_time_ns("---"), None);
    }

    #[test]
    fn parses_pw_profiler_logs() {
        // As 0.3.65 writes it: integers; the first follower's own WAIT column is 0.
        let log = "1314\t61\t0\t1333\t41\t0\t20\t28\t0\t8\t3\t0\t42\t10\t34\t35\t24\t1\t3\t0\t \t \t \t \t \t \t \t \t\n\
1338\t48\t0\t1333\t41\t5\t15\t20\t10\t5\t1\t0\t42\t6\t20\t23\t14\t3\t3\t0\t \t \t \t \t \t \t \t \t\n";
        let plot = "plot \"profiler.log\" using 1 title \"Audio period\" with lines, \
                    \"profiler.log\" using 8 title \"qb-light-0/41\" with lines, \
                    \"profiler.log\" using 16 title \"qb-light-1/42\" with lines\n";
        let m = parse_pw_profiler(log, plot);
        assert_eq!(m.len(), 2);
        let a = &m["qb-light-0"];
        assert_eq!(a.wait_ns, vec![20_000.0, 10_000.0]);
        assert_eq!(a.busy_ns, vec![8_000.0, 5_000.0]);
        assert_eq!(a.errors, 1, "status 1 (triggered) is not finished");
        assert_eq!(m["qb-light-1"].busy_ns, vec![1_000.0, 3_000.0]);
        // Without the plot file the ids stand in for the names.
        assert!(parse_pw_profiler(log, "").contains_key("41"));
    }
}
