//! The peers report: CPU, wakeups and memory per server, monitor latency and
//! underruns under load.

use crate::modes::peers::monlat::{self};
use crate::modes::peers::underload::UnderLoadPoint;
use crate::modes::peers::{PeersResults, Sample, ServerResult};
use crate::report::doc::{Doc, opt};
use crate::report::stats::median;
use crate::report::svg::{Series, line_plot};
use crate::report::{ModeOutput, Table};
use crate::tools::servers::ServerKind;

pub(crate) fn med_of(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = samples.iter().filter_map(f).collect();
    median(&v)
}

/// Tables, plots and the terminal summary.
pub fn render(r: &PeersResults) -> ModeOutput {
    let mut doc = Doc::new();
    let t = load_table(r);
    let m = monitor_table(r);
    if !r.latencies.is_empty() {
        doc.heading(2, "Peers: load")
            .para(format!(
                "Every server runs headless on a null sink at 48 kHz stereo \
                 and plays N identical `paplay` clients of a {:.0} s 44.1 kHz s16 stereo WAV \
                 (so every server resamples), at each latency: `default` (no \
                 `--latency-msec`) and `--latency-msec=N`. The same PulseAudio-protocol \
                 workload for each, so only the server differs. Medians over {} run(s); CPU \
                 and context switches are the server process's (every thread; for PipeWire \
                 the sum of pipewire, wireplumber and pipewire-pulse — the private D-Bus \
                 daemon it needs here is not counted); 'reported latency' is what the server \
                 reports to the first client (`paplay -v`), not a measured round trip. Idle: \
                 after quaverd's 3 s suspend timeout. Ratios are quaverd / peer per \
                 (latency, streams, metric); below 1 quaverd is cheaper.",
                r.file_seconds, r.repeats
            ))
            .table(&t);
        load_plots(r, &mut doc);
    }
    if !r.monitor_latencies_ms.is_empty() {
        doc.heading(2, "Peers: monitor latency")
            .para(monitor_text(r))
            .table(&m);
    }
    let c = capture_table(r);
    if !r.capture_latencies_ms.is_empty() {
        doc.heading(2, "Peers: capture path (libpulse)")
            .para(capture_text(r))
            .table(&c);
    }
    if let Some(lat) = r.under_load_latency_ms {
        render_under_load(r, lat, &mut doc);
    }
    doc.list(server_notes(r));
    let mut tables = Vec::new();
    if !r.latencies.is_empty() {
        tables.push(t);
    }
    if !r.monitor_latencies_ms.is_empty() {
        tables.push(m);
    }
    if !r.capture_latencies_ms.is_empty() {
        tables.push(c);
    }
    let mut tables = tables.into_iter();
    let summary = tables
        .next()
        .unwrap_or_else(|| Table::new(&["nothing measured"]));
    doc.finish(r, summary, tables.collect())
}

/// A row per (latency, streams, metric): each server's median, then quaverd's ratio to
/// each peer.
fn load_table(r: &PeersResults) -> Table {
    let servers: Vec<&ServerResult> = r.servers.iter().collect();
    let mut headers: Vec<String> = vec!["latency".into(), "streams".into(), "metric".into()];
    for s in &servers {
        headers.push(s.server.name().into());
    }
    for s in servers.iter().skip(1) {
        headers.push(format!("quaverd / {}", s.server.name()));
    }
    let mut t = Table {
        headers,
        rows: Vec::new(),
    };
    type Metric = (&'static str, fn(&Sample) -> Option<f64>, fn(f64) -> String);
    let metrics: [Metric; 4] = [
        ("CPU s/s", |s| Some(s.cpu_per_s), |v| format!("{v:.4}")),
        (
            "wakeups/s",
            |s| Some(s.wakeups_per_s),
            |v| format!("{v:.0}"),
        ),
        (
            "RSS MiB",
            |s| Some(s.rss_kb as f64 / 1024.0),
            |v| format!("{v:.1}"),
        ),
        (
            "reported latency ms",
            |s| s.reported_latency_us.map(|u| u / 1000.0),
            |v| format!("{v:.1}"),
        ),
    ];
    let mut rows_for = |lat: String, label: String, pick: &dyn Fn(&ServerResult) -> Vec<Sample>| {
        for (name, f, fmt) in metrics.iter() {
            let vals: Vec<Option<f64>> = servers.iter().map(|s| med_of(&pick(s), f)).collect();
            if vals.iter().all(Option::is_none) {
                continue;
            }
            let mut row = vec![lat.clone(), label.clone(), name.to_string()];
            row.extend(vals.iter().map(|v| v.map_or("–".into(), fmt)));
            for v in vals.iter().skip(1) {
                row.push(match (vals[0], v) {
                    (Some(a), Some(b)) if *b > 0.0 => format!("{:.2}", a / b),
                    _ => "–".into(),
                });
            }
            t.row(row);
        }
    };
    if !r.latencies.is_empty() {
        rows_for("–".into(), "idle".into(), &|s| s.idle.clone());
    }
    for lat in &r.latencies {
        for &n in &r.counts {
            rows_for(lat.clone(), n.to_string(), &|s| {
                s.load
                    .get(lat)
                    .and_then(|m| m.get(&n))
                    .cloned()
                    .unwrap_or_default()
            });
        }
    }
    t
}

/// CPU and wakeups against the number of streams, a line per server and latency.
fn load_plots(r: &PeersResults, doc: &mut Doc) {
    for (name, title, f) in [
        (
            "cpu",
            "CPU seconds per second",
            (|s: &Sample| Some(s.cpu_per_s)) as fn(&Sample) -> Option<f64>,
        ),
        (
            "wakeups",
            "voluntary context switches per second",
            |s: &Sample| Some(s.wakeups_per_s),
        ),
    ] {
        let mut series = Vec::new();
        for s in &r.servers {
            for lat in &r.latencies {
                let pts = r
                    .counts
                    .iter()
                    .filter_map(|n| {
                        let v = s.load.get(lat).and_then(|m| m.get(n));
                        med_of(v.map_or(&[][..], |v| v), f).map(|v| (*n as f64, v))
                    })
                    .collect();
                let lab = if lat == "default" {
                    format!("{} (default latency)", s.server.name())
                } else {
                    format!("{} ({lat} ms)", s.server.name())
                };
                series.push(Series::new(&lab, pts));
            }
        }
        doc.plot(
            name,
            line_plot(
                &format!("{title}, by number of paplay streams"),
                "playback streams (paplay, 44.1 kHz s16 stereo into a 48 kHz sink)",
                title,
                &series,
                true,
                true,
            ),
        );
    }
}

/// Monitor latency: a row per (N, server).
fn monitor_table(r: &PeersResults) -> Table {
    let mut m = Table::new(&[
        "N ms",
        "server",
        "measured p50",
        "p99",
        "reported p50",
        "meas − rep",
        "vs pulseaudio",
        "arrival p50",
        "rec lat",
        "sink lat",
        "underruns",
        "after a stall",
        "steal ms",
        "RT late (max ms)",
        "impulses (lost)",
        "tlength/minreq ms",
        "start ms",
    ]);
    let pa_measured = |n: u32| {
        r.servers
            .iter()
            .find(|s| s.server == ServerKind::Pulseaudio)
            .and_then(|s| s.monitor.iter().find(|p| p.latency_ms == n))
            .and_then(|p| p.measured_ms)
            .map(|m| m.p50)
    };
    let bytes_ms = |b: u32| {
        if b == u32::MAX {
            "–".to_string()
        } else {
            format!("{:.1}", b as f64 * 1000.0 / (monlat::RATE as f64 * 8.0))
        }
    };
    let failed = |n: u32, s: &ServerResult, e: &str| {
        vec![
            n.to_string(),
            s.server.name().into(),
            format!("failed: {}", e.lines().next().unwrap_or("")),
        ]
    };
    for &n in &r.monitor_latencies_ms {
        for s in &r.servers {
            let Some(p) = s.monitor.iter().find(|p| p.latency_ms == n) else {
                if let Some(e) = &s.monitor_error {
                    m.row_padded(failed(n, s, e));
                }
                continue;
            };
            if let Some(e) = &p.error {
                m.row_padded(failed(n, s, e));
                continue;
            }
            let med = p.measured_ms.map(|m| m.p50);
            m.row(vec![
                n.to_string(),
                s.server.name().into(),
                opt(med, 2),
                opt(p.measured_ms.map(|m| m.p99), 2),
                opt(p.reported_ms.map(|m| m.p50), 2),
                opt(p.difference_ms, 2),
                match (med, pa_measured(n)) {
                    (Some(a), Some(b)) if s.server != ServerKind::Pulseaudio => {
                        format!("{:+.2}", a - b)
                    }
                    _ => "–".into(),
                },
                opt(p.arrival_ms.map(|m| m.p50), 2),
                opt(p.record_latency_ms, 2),
                opt(p.sink_latency_ms, 2),
                p.underruns.to_string(),
                p.bystander
                    .map_or("–".into(), |b| b.stalled_underruns.to_string()),
                opt(p.steal_ms, 0),
                p.bystander.map_or("–".into(), |b| {
                    format!(
                        "{}{} ({:.1})",
                        b.late,
                        if b.realtime { "" } else { "*" },
                        b.max_ms
                    )
                }),
                format!("{} ({})", p.impulses, p.lost),
                format!("{}/{}", bytes_ms(p.granted[1]), bytes_ms(p.granted[3])),
                opt(p.start_ms, 0),
            ]);
        }
    }
    m
}

/// What the monitor-latency table's columns mean.
fn monitor_text(r: &PeersResults) -> String {
    format!(
        "Per server and N: a built-in PulseAudio-protocol \
         playback client asks what `paplay --latency-msec=N` asks (tlength = N ms, \
         ADJUST_LATENCY; float32le 48 kHz stereo) and writes silence with an impulse \
         every 250–350 ms as the server requests data; a record client on the sink's \
         monitor (fragsize {} ms, no flags) captures it. {} s of impulses per point, in {} \
         rounds; every server runs through the whole part (idle but for the one \
         measured) and the rounds alternate between them, so a noisy stretch of the \
         machine falls on each alike. \
         *measured* = capture − write − the record stream's own reported latency \
         (*rec lat*, libpulse's formula: server queue + transport + source latency − \
         the monitored sink's latency), corrected for each impulse's place in its \
         written and captured chunk; *arrival* is the same without the record \
         correction. *reported* is what `pa_stream_get_latency` would return at the \
         impulse's write (from GET_PLAYBACK_LATENCY just before it); *sink lat* the \
         sink latency in those replies; *start*: from creating the stream to the \
         server's first request after the initial fill. *vs pulseaudio*: measured p50 − PulseAudio's \
         (negative: lower than PulseAudio). Underruns are the server's UNDERFLOW \
         events. *steal*: CPU time the hypervisor gave to others during the point \
         (`/proc/stat`). *RT late*: wakeups of the bench's bystander threads \
         (one pinned to each CPU, SCHED_FIFO 1, sleeping to a deadline every 1 ms \
         through the point, doing nothing else) later than the client's answer \
         budget (granted tlength − minreq), with the latest wakeup: when even they \
         could not run in time, a request round trip through the server's threads \
         could not either (*: a thread did not get SCHED_FIFO or its CPU). *after a \
         stall*: underruns with a bystander wakeup at least 1 ms late, on any CPU, \
         in the 20 ms before the client got the \
         UNDERFLOW. Times in ms.{}",
        r.monitor_fragsize_ms,
        r.monitor_seconds,
        r.monitor_rounds,
        if r.monitor_inject_delay_ms > 0 {
            format!(
                " **Injected delay: each impulse written {} ms later than the \
                 bookkeeping says (instrument check).**",
                r.monitor_inject_delay_ms
            )
        } else {
            String::new()
        }
    )
}

/// Per server: its version and what went wrong; then the peers not measured.
/// A row per (N, server): write→capture, then the playback and capture sides, each as
/// libpulse reports it (and the playback side as measured).
fn capture_table(r: &PeersResults) -> Table {
    let mut c = Table::new(&[
        "N ms",
        "server",
        "write→capture p50",
        "p99",
        "vs pulseaudio",
        "playback measured p50",
        "playback reported p50",
        "capture reported p50",
        "capture vs pulseaudio",
        "underruns",
        "impulses (lost)",
        "tlength/minreq/frag ms",
    ]);
    let pa = |n: u32| {
        r.servers
            .iter()
            .find(|s| s.server == ServerKind::Pulseaudio)
            .and_then(|s| {
                s.capture
                    .iter()
                    .find(|p| p.latency_ms == n && p.error.is_none())
            })
    };
    let vs = |s: &ServerResult, a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if s.server != ServerKind::Pulseaudio => format!("{:+.2}", a - b),
        _ => "–".into(),
    };
    let ms = |b: u32| {
        if b == u32::MAX || b == 0 {
            "–".to_string()
        } else {
            format!("{:.1}", b as f64 * 1000.0 / (monlat::RATE as f64 * 8.0))
        }
    };
    for &n in &r.capture_latencies_ms {
        for s in &r.servers {
            let Some(p) = s.capture.iter().find(|p| p.latency_ms == n) else {
                if let Some(e) = &s.capture_error {
                    c.row_padded(vec![
                        n.to_string(),
                        s.server.name().into(),
                        format!("failed: {}", e.lines().next().unwrap_or("")),
                    ]);
                }
                continue;
            };
            if let Some(e) = &p.error {
                c.row_padded(vec![
                    n.to_string(),
                    s.server.name().into(),
                    format!("failed: {}", e.lines().next().unwrap_or("")),
                ]);
                continue;
            }
            let p50 = |x: Option<crate::report::stats::Summary>| x.map(|m| m.p50);
            let peer = pa(n);
            c.row(vec![
                n.to_string(),
                s.server.name().into(),
                opt(p50(p.write_to_capture_ms), 2),
                opt(p.write_to_capture_ms.map(|m| m.p99), 2),
                vs(
                    s,
                    p50(p.write_to_capture_ms),
                    peer.and_then(|q| p50(q.write_to_capture_ms)),
                ),
                opt(p50(p.playback_measured_ms), 2),
                opt(p50(p.playback_reported_ms), 2),
                opt(p50(p.capture_reported_ms), 2),
                vs(
                    s,
                    p50(p.capture_reported_ms),
                    peer.and_then(|q| p50(q.capture_reported_ms)),
                ),
                p.underruns.to_string(),
                format!("{} ({})", p.impulses, p.lost),
                format!(
                    "{}/{}/{}",
                    ms(p.granted[1]),
                    ms(p.granted[3]),
                    ms(p.granted[4])
                ),
            ]);
        }
    }
    c
}

/// What the capture-path table's columns mean.
fn capture_text(r: &PeersResults) -> String {
    format!(
        "One libpulse client per server (`quaver-bench pulse-probe`, libpulse loaded at run \
         time) with two streams at N ms each, float32le 48 kHz stereo: playback to the \
         default sink (`tlength` = N ms, ADJUST_LATENCY, as `paplay --latency-msec=N`) \
         and record from `@DEFAULT_MONITOR@` (`fragsize` = N ms, ADJUST_LATENCY, as \
         `parec --latency-msec=N`). A one-sample impulse every 250–350 ms; {} s of \
         impulses per round, {} round(s) per point alternating between the servers. \
         *write→capture*: from handing the chunk to libpulse to the impulse's place in \
         the fragment the record stream delivered (CLOCK_MONOTONIC). *playback reported*: \
         `pa_stream_get_latency` of the playback stream just before the write; *capture \
         reported*: that of the record stream when the impulse arrived (how long ago the \
         sink played it, by the server's account); *playback measured* = write→capture − \
         capture reported. 'vs pulseaudio' columns: quaverd's (or PipeWire's) median \
         minus PulseAudio's, ms.",
        r.capture_seconds, r.capture_rounds
    )
}

fn server_notes(r: &PeersResults) -> Vec<String> {
    let mut items = Vec::new();
    for s in &r.servers {
        let mut item = format!("{}: {}", s.server.name(), s.version);
        let mut sub = |line: String| {
            item.push_str("\n  - ");
            item.push_str(&line);
        };
        if let Some(e) = &s.error {
            sub(format!("not measured: {e}"));
        } else {
            let samples: Vec<&Sample> = s
                .idle
                .iter()
                .chain(s.load.values().flat_map(|by_n| by_n.values().flatten()))
                .collect();
            let ticks = samples.iter().filter(|x| !x.cpu_exact).count();
            if ticks > 0 {
                sub(format!(
                    "CPU time in clock ticks in {ticks} of {} samples (a thread \
                     came or went in the window), to the nanosecond in the others",
                    samples.len()
                ));
            }
            for f in &s.failures {
                sub(format!(
                    "failed part-way (fewer samples in the medians): {f}"
                ));
            }
        }
        if let Some(e) = &s.monitor_error {
            sub(format!("monitor latency not measured: {e}"));
        }
        if let Some(e) = &s.capture_error {
            sub(format!("capture path not measured: {e}"));
        }
        for p in &s.monitor {
            if let Some(e) = &p.error {
                sub(format!(
                    "monitor latency at {} ms failed: {e}",
                    p.latency_ms
                ));
            }
        }
        items.push(item);
    }
    for (name, why) in &r.skipped {
        items.push(format!("{name}: {why}"));
    }
    items
}

/// The under-load table: per stream count and server, each round's underruns (all
/// clients together), their median, and per stream and minute.
fn render_under_load(r: &PeersResults, lat: u32, doc: &mut Doc) {
    let mut t = Table::new(&[
        "streams",
        "server",
        "underruns per round",
        "median",
        "per stream per minute",
        "failed rounds",
    ]);
    for &n in &r.under_load_counts {
        for s in &r.servers {
            let pts: Vec<&UnderLoadPoint> =
                s.under_load.iter().filter(|p| p.streams == n).collect();
            if pts.is_empty() {
                continue;
            }
            let ok: Vec<f64> = pts
                .iter()
                .filter(|p| p.error.is_none())
                .map(|p| p.total() as f64)
                .collect();
            let med = median(&ok);
            let failed: Vec<String> = pts
                .iter()
                .filter_map(|p| {
                    p.error
                        .as_ref()
                        .map(|e| format!("{}: {}", p.round, e.lines().next().unwrap_or("")))
                })
                .collect();
            t.row(vec![
                n.to_string(),
                s.server.name().into(),
                pts.iter()
                    .map(|p| match &p.error {
                        None => p.total().to_string(),
                        Some(_) => format!("({}, failed)", p.total()),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                med.map_or("–".into(), |m| format!("{m:.0}")),
                med.filter(|_| r.under_load_seconds > 0.0 && n > 0)
                    .map_or("–".into(), |m| {
                        format!("{:.1}", m / n as f64 * 60.0 / r.under_load_seconds)
                    }),
                if failed.is_empty() {
                    "–".into()
                } else {
                    failed.join("; ")
                },
            ]);
        }
    }
    doc.heading(2, "Peers: underruns under load")
        .para(format!(
            "Per round and server: the server started fresh, \
             then `{}` (CPU hogs oversubscribing every core), then N `paplay -v \
             --latency-msec={lat}` clients of a 44.1 kHz s16 stereo WAV into the 48 kHz null \
             sink for {:.0} s; each client's \"Stream underrun\" lines (one per UNDERFLOW the \
             server sends) are counted. The rounds alternate between the servers. Lower is \
             better; the clients themselves are delayed by the same load, so some underruns \
             are theirs on every server.",
            r.under_load_stressor, r.under_load_seconds,
        ))
        .table(&t);
}
