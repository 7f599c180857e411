//! Human-readable `quaver status` and `quaver ls` output: short, aligned tables.

use crate::values::format_volume;
use quaver_protocol::message::PortType;
use quaver_protocol::{
    GraphInfo, NodeInfo, NodeTimingInfo, PortDirection, StatusInfo, TimingStats,
};
use std::collections::HashMap;
use std::fmt::Write;

/// A table whose columns are padded to their widest cell; the last column is not
/// padded, so lines carry no trailing blanks.
struct Table {
    indent: usize,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(indent: usize, header: &[&str]) -> Table {
        Table {
            indent,
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self, out: &mut String) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = " ".repeat(self.indent);
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(widths[c] - cell.chars().count() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn opt_u32(v: Option<u32>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A duration the way pw-top prints one: µs below a millisecond, else ms.
fn time_text(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else {
        format!("{:.2}ms", ns as f64 / 1e6)
    }
}

/// The per-node table of `quaver status` and `quaver top`, pw-top's columns: state
/// (`R` ran in the interval, `I` idle, `S` devices suspended), id, quantum, rate, mean
/// wait and busy time per cycle, both as a share of the quantum's period, xruns, kind
/// and name.
pub fn node_table(t: &TimingStats, indent: usize) -> String {
    let mut table = Table::new(
        indent,
        &[
            "S", "ID", "QUANT", "RATE", "WAIT", "BUSY", "W/Q", "B/Q", "ERR", "KIND", "NAME",
        ],
    );
    for n in &t.nodes {
        table.row(node_row(n, t.suspended));
    }
    let mut s = String::new();
    table.render(&mut s);
    s
}

fn node_row(n: &NodeTimingInfo, suspended: bool) -> Vec<String> {
    let period_ns = if n.rate > 0 {
        n.quantum as f64 * 1e9 / n.rate as f64
    } else {
        0.0
    };
    let share = |ns: u64| {
        if period_ns > 0.0 {
            format!("{:.2}", ns as f64 / period_ns)
        } else {
            "-".into()
        }
    };
    let state = if suspended {
        "S"
    } else if n.cycles > 0 {
        "R"
    } else {
        "I"
    };
    vec![
        state.into(),
        n.id.to_string(),
        n.quantum.to_string(),
        n.rate.to_string(),
        time_text(n.wait_avg_ns),
        time_text(n.busy_avg_ns),
        share(n.wait_avg_ns),
        share(n.busy_avg_ns),
        n.xruns.to_string(),
        n.kind.clone(),
        n.name.clone(),
    ]
}

/// One frame of `quaver top`: a summary line, then the node table.
pub fn top_text(t: &TimingStats) -> String {
    let ms = if t.rate > 0 {
        t.quantum as f64 * 1000.0 / t.rate as f64
    } else {
        0.0
    };
    let mut s = format!(
        "quaverd: {} Hz, quantum {} ({ms:.2} ms), cycles {}, xruns {}{}, cycle busy max {}{}\n",
        t.rate,
        t.quantum,
        t.cycles,
        t.xruns,
        if t.overdue_runs > 0 {
            format!(
                ", fell behind {}× ({} cycles late)",
                t.overdue_runs, t.overdue_cycles
            )
        } else {
            String::new()
        },
        time_text(t.busy_max_ns),
        if t.suspended { ", suspended" } else { "" },
    );
    s.push_str(&node_table(t, 0));
    s
}

/// A follower's rate matching in one line: the clock it found, and its playback level.
fn follow_text(f: &quaver_protocol::message::FollowStatus) -> String {
    let ppm = |p: Option<i64>| p.map(|p| format!("{:+.1} ppm", p as f64 / 1e3));
    let clock = ppm(f.play_ppb)
        .or_else(|| ppm(f.capture_ppb))
        .unwrap_or_else(|| "not measured yet".into());
    let mut s = format!("follows the driver's clock: {clock}");
    if let (Some(level), Some(target)) = (f.play_level, f.play_target) {
        let _ = write!(
            s,
            ", playback level {level} frames (holds {target}, {:+}..{:+} since start)",
            f.play_error_min, f.play_error_max
        );
    }
    if f.restarts > 1 {
        let _ = write!(s, ", {} restarts", f.restarts - 1);
    }
    s
}

/// `quaver status` text; `graph`, when available, names the clients' streams, and
/// `timing` adds the per-node table.
pub fn status_text(
    st: &StatusInfo,
    graph: Option<&GraphInfo>,
    timing: Option<&TimingStats>,
) -> String {
    let mut s = String::new();
    let ms = if st.rate > 0 {
        st.quantum as f64 * 1000.0 / st.rate as f64
    } else {
        0.0
    };
    let kv = [
        (
            "server",
            format!(
                "quaverd {} (protocol {})",
                st.server_version, st.protocol_version
            ),
        ),
        ("rate", format!("{} Hz", st.rate)),
        (
            "quantum",
            format!(
                "{} frames ({ms:.1} ms), bounds {}..{}",
                st.quantum, st.quantum_min, st.quantum_max
            ),
        ),
        (
            "realtime",
            if st.scheduling.is_empty() {
                yes_no(st.realtime).to_string()
            } else {
                format!("{} ({})", yes_no(st.realtime), st.scheduling)
            },
        ),
        ("cycles", st.cycles.to_string()),
        ("xruns", st.xruns.to_string()),
    ];
    for (k, v) in kv {
        let _ = writeln!(s, "{:<10}{v}", format!("{k}:"));
    }

    s.push('\n');
    if st.devices.is_empty() {
        s.push_str("devices:  none\n");
    } else {
        s.push_str("devices:\n");
        let mut t = Table::new(
            2,
            &[
                "NAME",
                "STATE",
                "RATE",
                "OUT",
                "IN",
                "UNDERRUNS",
                "OVERRUNS",
                "WAKEUPS",
                "DESCRIPTION",
            ],
        );
        for d in &st.devices {
            t.row(vec![
                d.name.clone(),
                if d.state == "closed" {
                    "closed (idle)".to_string()
                } else {
                    d.state.clone()
                },
                d.rate.to_string(),
                opt_u32(d.playback_channels),
                opt_u32(d.capture_channels),
                d.underruns.to_string(),
                d.overruns.to_string(),
                d.wakeups.to_string(),
                d.description.clone(),
            ]);
        }
        t.render(&mut s);
        for d in &st.devices {
            if let Some(f) = &d.follow {
                let _ = writeln!(s, "  {} {}", d.name, follow_text(f));
            }
        }
        s.push_str(&crate::netshow::network_text(&st.devices));
    }

    if let Some(t) = timing.filter(|t| !t.nodes.is_empty()) {
        s.push('\n');
        let _ = writeln!(
            s,
            "nodes (per cycle, over the last {:.1} s):",
            t.interval_ns as f64 / 1e9
        );
        s.push_str(&node_table(t, 2));
    }

    s.push('\n');
    if st.clients.is_empty() {
        s.push_str("clients:  none\n");
    } else {
        s.push_str("clients:\n");
        let nodes: HashMap<u32, &NodeInfo> = graph
            .map(|g| g.nodes.iter().map(|n| (n.id, n)).collect())
            .unwrap_or_default();
        let mut t = Table::new(2, &["ID", "NAME", "PID", "STREAMS"]);
        for c in &st.clients {
            let streams: Vec<String> = c
                .streams
                .iter()
                .map(|id| match nodes.get(id) {
                    Some(n) => match &n.callback {
                        Some(cb) => format!(
                            "{id} {} ({}, {}, {} xruns, {} missed cycles)",
                            n.name,
                            n.kind,
                            callback_mode(cb),
                            cb.xrun_events,
                            cb.xruns
                        ),
                        None => format!("{id} {} ({})", n.name, n.kind),
                    },
                    None => id.to_string(),
                })
                .collect();
            t.row(vec![
                c.id.to_string(),
                c.name.clone(),
                opt_u32(c.pid),
                if streams.is_empty() {
                    "-".into()
                } else {
                    streams.join(", ")
                },
            ]);
        }
        t.render(&mut s);
    }
    s
}

/// `sync`, `async`, or `async (why)`.
fn callback_mode(cb: &quaver_protocol::CallbackNodeInfo) -> String {
    if cb.async_cause.is_empty() {
        cb.mode.clone()
    } else {
        format!("{} ({})", cb.mode, cb.async_cause)
    }
}

/// One line about how a callback client runs.
fn callback_line(cb: &quaver_protocol::CallbackNodeInfo) -> String {
    let mut line = format!(
        "client: {}, {}, {} xruns ({} missed cycles), {} skipped, wait {:.1}/{:.1} ms avg/max",
        callback_mode(cb),
        if cb.active { "active" } else { "inactive" },
        cb.xrun_events,
        cb.xruns,
        cb.skipped,
        cb.wait_avg_ns as f64 / 1e6,
        cb.wait_max_ns as f64 / 1e6,
    );
    if cb.resynced > 0 {
        let _ = write!(line, ", back to sync {}×", cb.resynced);
    }
    if let Some(q) = cb.quantum {
        let _ = write!(line, ", asks quantum {q}");
    }
    line
}

/// `quaver ls` text: nodes with their ports, then links.
pub fn ls_text(g: &GraphInfo) -> String {
    ls_text_with(g, &[])
}

/// [`ls_text`] with a short line of network figures under each node of a network
/// device among `devices` (from `status`).
pub fn ls_text_with(g: &GraphInfo, devices: &[quaver_protocol::DeviceStatus]) -> String {
    let mut s = String::new();
    if g.nodes.is_empty() {
        s.push_str("nodes:  none\n");
    } else {
        s.push_str("nodes:\n");
        let mut t = Table::new(2, &["ID", "NAME", "KIND", "VOLUME", "DESCRIPTION"]);
        for n in &g.nodes {
            t.row(vec![
                n.id.to_string(),
                n.name.clone(),
                if n.suspended {
                    format!("{} (suspended)", n.kind)
                } else {
                    n.kind.clone()
                },
                format_volume(n.volume, n.mute),
                n.description.clone(),
            ]);
        }
        // Render the table, then slot each node's port lines under its row.
        let mut table = String::new();
        t.render(&mut table);
        let mut lines = table.lines();
        if let Some(header) = lines.next() {
            s.push_str(header);
            s.push('\n');
        }
        for (n, line) in g.nodes.iter().zip(lines) {
            s.push_str(line);
            s.push('\n');
            for (dir, label) in [(PortDirection::In, "in: "), (PortDirection::Out, "out:")] {
                let ports: Vec<String> = n
                    .ports
                    .iter()
                    .filter(|p| p.direction == dir)
                    .map(|p| {
                        // The channel is only worth repeating when the name does not say
                        // it; a MIDI port has no channel worth showing, its type is.
                        if p.port_type == PortType::Midi {
                            format!("{}[midi]", p.name)
                        } else if p.name == p.channel {
                            p.name.clone()
                        } else {
                            format!("{}[{}]", p.name, p.channel)
                        }
                    })
                    .collect();
                if !ports.is_empty() {
                    let _ = writeln!(s, "      {label} {}", ports.join(" "));
                }
            }
            if let Some(cb) = &n.callback {
                let _ = writeln!(s, "      {}", callback_line(cb));
            }
            // A device's nodes are `<device>-sink` and `<device>-source`.
            let net = devices.iter().find(|d| {
                n.name
                    .strip_prefix(d.name.as_str())
                    .is_some_and(|rest| rest == "-sink" || rest == "-source")
            });
            if let Some(line) = net.and_then(crate::netshow::short_line) {
                let _ = writeln!(s, "      {line}");
            }
        }
    }
    s.push('\n');
    if g.links.is_empty() {
        s.push_str("links:  none\n");
    } else {
        s.push_str("links:\n");
        let mut t = Table::new(2, &[]);
        t.rows.clear();
        for l in &g.links {
            let mut to = format!("{}:{}", l.input_node, l.input_port);
            if l.feedback {
                to.push_str(" (feedback: one quantum late)");
            }
            t.row(vec![
                format!("{}:{}", l.output_node, l.output_port),
                "->".into(),
                to,
            ]);
        }
        t.render(&mut s);
    }
    s
}

/// `quaver ls` text for port aliases: `node:port = alias, alias` per port that has
/// any; empty when none does.
pub fn aliases_text(g: &GraphInfo, aliases: &[quaver_protocol::message::PortAliases]) -> String {
    let mut s = String::new();
    for pa in aliases.iter().filter(|pa| !pa.aliases.is_empty()) {
        let name = g
            .nodes
            .iter()
            .find_map(|n| {
                let p = n.ports.iter().find(|p| p.id == pa.port)?;
                Some(format!("{}:{}", n.name, p.name))
            })
            .unwrap_or_else(|| format!("port {}", pa.port));
        if s.is_empty() {
            s.push_str("\naliases:\n");
        }
        let _ = writeln!(s, "  {name} = {}", pa.aliases.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use quaver_protocol::{ClientInfo, DeviceStatus, LinkInfo, PortInfo};

    fn graph() -> GraphInfo {
        GraphInfo {
            nodes: vec![
                NodeInfo {
                    id: 1,
                    name: "null".into(),
                    kind: "sink".into(),
                    description: "Null output".into(),
                    volume: 1.0,
                    mute: false,
                    latency_ms: None,
                    playback_lead_frames: None,
                    suspended: false,
                    physical: false,
                    ports: vec![
                        PortInfo {
                            id: 10,
                            name: "FL".into(),
                            direction: PortDirection::In,
                            channel: "FL".into(),
                            port_type: PortType::Audio,
                        },
                        PortInfo {
                            id: 12,
                            name: "monitor_FL".into(),
                            direction: PortDirection::Out,
                            channel: "FL".into(),
                            port_type: PortType::Audio,
                        },
                    ],
                    callback: None,
                },
                NodeInfo {
                    id: 7,
                    name: "music.wav".into(),
                    kind: "playback".into(),
                    description: String::new(),
                    volume: 0.5,
                    mute: true,
                    latency_ms: Some(20.0),
                    playback_lead_frames: None,
                    suspended: false,
                    physical: false,
                    ports: vec![PortInfo {
                        id: 30,
                        name: "FL".into(),
                        direction: PortDirection::Out,
                        channel: "FL".into(),
                        port_type: PortType::Audio,
                    }],
                    callback: None,
                },
                NodeInfo {
                    id: 8,
                    name: "synth".into(),
                    kind: "client".into(),
                    description: String::new(),
                    volume: 1.0,
                    mute: false,
                    latency_ms: None,
                    playback_lead_frames: None,
                    suspended: false,
                    physical: false,
                    ports: vec![PortInfo {
                        id: 40,
                        name: "midi_in".into(),
                        direction: PortDirection::In,
                        channel: "AUX0".into(),
                        port_type: PortType::Midi,
                    }],
                    callback: Some(quaver_protocol::CallbackNodeInfo {
                        mode: "async".into(),
                        active: true,
                        woken: 100,
                        xruns: 9,
                        xrun_events: 2,
                        caught_up: 0,
                        async_cause: "hung".into(),
                        resynced: 0,
                        skipped: 1,
                        wait_avg_ns: 120_000,
                        wait_max_ns: 1_050_000,
                        quantum: Some(64),
                    }),
                },
            ],
            links: vec![
                LinkInfo {
                    id: 1,
                    output_node: "music.wav".into(),
                    output_port: "FL".into(),
                    input_node: "null".into(),
                    input_port: "FL".into(),
                    feedback: false,
                },
                LinkInfo {
                    id: 2,
                    output_node: "synth".into(),
                    output_port: "out".into(),
                    input_node: "synth".into(),
                    input_port: "in".into(),
                    feedback: true,
                },
            ],
        }
    }

    #[test]
    fn aliases_are_listed_by_port_name() {
        use quaver_protocol::message::PortAliases;
        let g = graph();
        assert_eq!(aliases_text(&g, &[]), "");
        let port = g.nodes[0].ports[0].id;
        let name = format!("{}:{}", g.nodes[0].name, g.nodes[0].ports[0].name);
        let text = aliases_text(
            &g,
            &[
                PortAliases {
                    port,
                    aliases: vec!["mon:one".into(), "mon:two".into()],
                },
                PortAliases {
                    port: 999_999,
                    aliases: vec!["x:y".into()],
                },
            ],
        );
        assert_eq!(
            text,
            format!("\naliases:\n  {name} = mon:one, mon:two\n  port 999999 = x:y\n")
        );
    }

    #[test]
    fn ls() {
        let want = "\
nodes:
  ID  NAME       KIND      VOLUME               DESCRIPTION
  1   null       sink      100%                 Null output
      in:  FL
      out: monitor_FL[FL]
  7   music.wav  playback  50% (-6.0 dB) muted
      out: FL
  8   synth      client    100%
      in:  midi_in[midi]
      client: async (hung), active, 2 xruns (9 missed cycles), 1 skipped, wait 0.1/1.1 ms avg/max, asks quantum 64

links:
  music.wav:FL  ->  null:FL
  synth:out     ->  synth:in (feedback: one quantum late)
";
        assert_eq!(ls_text(&graph()), want);
    }

    #[test]
    fn status() {
        let st = StatusInfo {
            server_version: "0.1.0".into(),
            protocol_version: 1,
            rate: 48000,
            quantum: 1024,
            quantum_min: 32,
            quantum_max: 2048,
            realtime: true,
            scheduling: Box::default(),
            cycles: 1234,
            xruns: 2,
            devices: vec![DeviceStatus {
                name: "null".into(),
                description: "Null output".into(),
                state: "running".into(),
                rate: 48000,
                playback_channels: Some(2),
                capture_channels: None,
                underruns: 2,
                overruns: 0,
                wakeups: 99,
                margin_frames: 0,
                margin_changes: 0,
                follow: None,
                net: None,
            }],
            clients: vec![ClientInfo {
                id: 3,
                name: "quaver".into(),
                pid: Some(4242),
                streams: vec![7, 8],
            }],
        };
        let want = "\
server:   quaverd 0.1.0 (protocol 1)
rate:     48000 Hz
quantum:  1024 frames (21.3 ms), bounds 32..2048
realtime: yes
cycles:   1234
xruns:    2

devices:
  NAME  STATE    RATE   OUT  IN  UNDERRUNS  OVERRUNS  WAKEUPS  DESCRIPTION
  null  running  48000  2    -   2          0         99       Null output

clients:
  ID  NAME    PID   STREAMS
  3   quaver  4242  7 music.wav (playback), 8 synth (client, async (hung), 2 xruns, 9 missed cycles)
";
        assert_eq!(status_text(&st, Some(&graph()), None), want);
        let empty = StatusInfo {
            devices: vec![],
            clients: vec![],
            ..st.clone()
        };
        let text = status_text(&empty, None, None);
        assert!(text.contains("devices:  none\n") && text.contains("clients:  none\n"));
        let mut follower = st.devices[0].clone();
        follower.name = "sim2".into();
        follower.follow = Some(quaver_protocol::message::FollowStatus {
            play_ppb: Some(-399_920),
            capture_ppb: Some(-399_910),
            play_level: Some(515),
            play_target: Some(512),
            play_error_min: -4,
            play_error_max: 6,
            restarts: 1,
        });
        let two = StatusInfo {
            devices: vec![st.devices[0].clone(), follower],
            ..st
        };
        let text = status_text(&two, None, None);
        assert!(
            text.contains(
                "  sim2 follows the driver's clock: -399.9 ppm, playback level 515 frames \
                 (holds 512, -4..+6 since start)\n"
            ),
            "{text}"
        );
    }

    fn timing() -> TimingStats {
        TimingStats {
            rate: 48000,
            quantum: 64,
            cycles: 5000,
            xruns: 1,
            lateness_ns_log2: vec![],
            busy_ns_log2: vec![],
            lateness_max_ns: 0,
            busy_max_ns: 250_000,
            stages: None,
            nodes: vec![
                NodeTimingInfo {
                    id: 1,
                    name: "null-sink".into(),
                    kind: "sink".into(),
                    quantum: 64,
                    rate: 48000,
                    cycles: 750,
                    busy_avg_ns: 2_500,
                    ..NodeTimingInfo::default()
                },
                NodeTimingInfo {
                    id: 8,
                    name: "synth".into(),
                    kind: "client".into(),
                    quantum: 64,
                    quantum_requested: Some(64),
                    rate: 48000,
                    cycles: 750,
                    wait_avg_ns: 40_000,
                    busy_avg_ns: 1_200_000,
                    xruns: 3,
                    ..NodeTimingInfo::default()
                },
                NodeTimingInfo {
                    id: 9,
                    name: "idle".into(),
                    kind: "client".into(),
                    quantum: 64,
                    rate: 48000,
                    ..NodeTimingInfo::default()
                },
            ],
            interval_ns: 1_000_000_000,
            suspended: false,
            overdue_cycles: 0,
            overdue_runs: 0,
        }
    }

    #[test]
    fn top() {
        let want = "\
quaverd: 48000 Hz, quantum 64 (1.33 ms), cycles 5000, xruns 1, cycle busy max 250.0us
S  ID  QUANT  RATE   WAIT    BUSY    W/Q   B/Q   ERR  KIND    NAME
R  1   64     48000  0.0us   2.5us   0.00  0.00  0    sink    null-sink
R  8   64     48000  40.0us  1.20ms  0.03  0.90  3    client  synth
I  9   64     48000  0.0us   0.0us   0.00  0.00  0    client  idle
";
        assert_eq!(top_text(&timing()), want);
        let suspended = TimingStats {
            suspended: true,
            ..timing()
        };
        assert!(top_text(&suspended).contains("\nS  1 "));
        let behind = TimingStats {
            overdue_cycles: 7,
            overdue_runs: 2,
            ..timing()
        };
        assert!(
            top_text(&behind).contains("xruns 1, fell behind 2× (7 cycles late), cycle busy"),
            "{}",
            top_text(&behind)
        );
        let st = StatusInfo {
            server_version: "0.1.0".into(),
            protocol_version: 1,
            rate: 48000,
            quantum: 64,
            quantum_min: 32,
            quantum_max: 2048,
            realtime: true,
            scheduling: Box::default(),
            cycles: 5000,
            xruns: 1,
            devices: vec![],
            clients: vec![],
        };
        let text = status_text(&st, None, Some(&timing()));
        assert!(
            text.contains("nodes (per cycle, over the last 1.0 s):\n  S  ID  QUANT"),
            "{text}"
        );
        assert!(
            text.contains("\n  R  8   64     48000  40.0us  1.20ms"),
            "{text}"
        );
    }
}
