//! The bigbuf report: wakeups per server and latency, and the event latencies.

use crate::modes::bigbuf::event::{EventPart, EventRun};
use crate::modes::bigbuf::options::*;
use crate::modes::bigbuf::{BigbufResults, ThreadRate, WakeupPoint, WakeupSample};
use crate::report::doc::{Doc, opt};
use crate::report::stats::median;
use crate::report::svg::{Series, bar_chart, line_plot};
use crate::report::{ModeOutput, Table};
use crate::tools::servers::ServerKind;

impl WakeupPoint {
    fn med(&self, f: impl Fn(&WakeupSample) -> f64) -> Option<f64> {
        median(&self.samples.iter().map(f).collect::<Vec<_>>())
    }
}

fn point<'a>(r: &'a BigbufResults, k: ServerKind, lat: &str) -> Option<&'a WakeupPoint> {
    r.points.iter().find(|p| p.server == k && p.latency == lat)
}

/// The PulseAudio column's cell when it has no number.
fn pa_missing(r: &BigbufResults, p: Option<&WakeupPoint>) -> String {
    if let Some(e) = &r.pulseaudio_error {
        return e.clone();
    }
    match p {
        Some(p) if !p.failures.is_empty() => "failed".into(),
        _ => "–".into(),
    }
}

/// Verdict of the wakeups acceptance item at `lat`.
pub fn wakeups_verdict(r: &BigbufResults, lat: &str) -> String {
    let q = point(r, ServerKind::Quaverd, lat).and_then(|p| p.med(|s| s.voluntary_per_s));
    let pa = point(r, ServerKind::Pulseaudio, lat).and_then(|p| p.med(|s| s.voluntary_per_s));
    match (q, pa) {
        (Some(q), Some(pa)) if q <= pa => "yes".into(),
        (Some(_), Some(_)) => "no".into(),
        _ => "not measured".into(),
    }
}

/// Tables, plots and the terminal summary.
pub fn render(r: &BigbufResults) -> ModeOutput {
    let t = wakeup_table(r);
    let e = event_table(r);
    let mut doc = Doc::new();
    if !r.points.is_empty() {
        doc.heading(2, "Wakeups with a 2 s buffer")
            .para(wakeups_text(r))
            .table(&t)
            .plot("wakeups", wakeups_plot(r))
            .heading(3, "Per thread (medians)")
            .table(&thread_table(r))
            .heading(3, "Every window")
            .table(&window_table(r));
        let mut lines: Vec<String> = r
            .points
            .iter()
            .flat_map(|p| p.samples.iter())
            .find_map(|s| s.quaverd.as_ref())
            .map(|q| format!("quaverd's device: {} ({}).", q.device, q.device_state))
            .into_iter()
            .collect();
        for p in &r.points {
            for f in &p.failures {
                lines.push(format!(
                    "- {} at {}: failed: {f}",
                    p.server.name(),
                    p.latency
                ));
            }
        }
        if !lines.is_empty() {
            doc.para(lines.join("\n"));
        }
    }
    if let Some(ev) = &r.events {
        doc.heading(2, "Event sound latency")
            .para(events_text(r, ev))
            .table(&e)
            .place("events");
        if let Some(svg) = events_plot(ev) {
            doc.add_plot("events", svg);
        }
        doc.list(
            ev.runs
                .iter()
                .map(event_line)
                .chain(ev.failures.iter().map(|f| format!("failed: {f}"))),
        );
    }
    let (summary, extra) = if r.points.is_empty() {
        (e, Vec::new())
    } else if r.events.is_some() {
        (t, vec![e])
    } else {
        (t, Vec::new())
    };
    doc.finish(r, summary, extra)
}

/// Per latency: each metric's median per server and their ratio, quaverd's own view,
/// and the verdict.
fn wakeup_table(r: &BigbufResults) -> Table {
    let mut t = Table::new(&[
        "latency",
        "metric",
        "quaverd",
        "pulseaudio",
        "quaverd / pulseaudio",
    ]);
    type Metric = (&'static str, fn(&WakeupSample) -> f64, usize);
    let metrics: [Metric; 4] = [
        ("wakeups/s (voluntary)", |s| s.voluntary_per_s, 2),
        ("preemptions/s (involuntary)", |s| s.involuntary_per_s, 2),
        (
            "all switches/s",
            |s| s.voluntary_per_s + s.involuntary_per_s,
            2,
        ),
        ("CPU %", |s| s.cpu_per_s * 100.0, 3),
    ];
    for lat in &r.latencies {
        let qp = point(r, ServerKind::Quaverd, lat);
        let pp = point(r, ServerKind::Pulseaudio, lat);
        for (name, f, d) in metrics.iter() {
            let q = qp.and_then(|p| p.med(f));
            let pa = pp.and_then(|p| p.med(f));
            t.row(vec![
                lat.clone(),
                name.to_string(),
                q.map_or_else(
                    || {
                        if qp.is_some_and(|p| !p.failures.is_empty()) {
                            "failed".into()
                        } else {
                            "–".into()
                        }
                    },
                    |v| format!("{v:.d$}"),
                ),
                pa.map_or_else(|| pa_missing(r, pp), |v| format!("{v:.d$}")),
                match (q, pa) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                    _ => "–".into(),
                },
            ]);
        }
        let qs = qp.map(|p| {
            p.samples
                .iter()
                .filter_map(|s| s.quaverd.as_ref())
                .collect::<Vec<_>>()
        });
        if let Some(qs) = qs.filter(|v| !v.is_empty()) {
            let dw = median(
                &qs.iter()
                    .map(|s| s.device_wakeups_per_s)
                    .collect::<Vec<_>>(),
            );
            let cw = median(
                &qs.iter()
                    .filter_map(|s| s.cycles_per_wakeup)
                    .collect::<Vec<_>>(),
            );
            t.row_padded(vec![
                lat.clone(),
                "quaverd: quantum, device wakeups/s, cycles/wakeup".into(),
                format!(
                    "{}, {}, {}",
                    qs.last().map_or(0, |s| s.quantum),
                    opt(dw, 2),
                    opt(cw, 1)
                ),
            ]);
        }
        t.row_padded(vec![
            lat.clone(),
            "quaverd ≤ pulseaudio (wakeups)".into(),
            wakeups_verdict(r, lat),
        ]);
    }
    t
}

/// A row per event run, then the runs that failed.
fn event_table(r: &BigbufResults) -> Table {
    let mut e = Table::new(&[
        "event run",
        "heard",
        "p50 ms",
        "p99 ms",
        "max ms",
        "queued at event ms (median)",
        "rewinds",
        "underruns",
        "≤ 30 ms",
    ]);
    let Some(ev) = &r.events else {
        return e;
    };
    for run in &ev.runs {
        let heard = run.latencies_ms.iter().flatten().count();
        let s = run.summary;
        e.row(vec![
            run.label.clone(),
            format!("{heard}/{}", run.latencies_ms.len()),
            opt(s.map(|s| s.p50), 1),
            opt(s.map(|s| s.p99), 1),
            opt(s.map(|s| s.max), 1),
            opt(median(&run.queued_ms), 0),
            run.rewinds.to_string(),
            run.underruns.to_string(),
            match s {
                Some(s) if heard == run.latencies_ms.len() && s.max <= EVENT_BOUND_MS => {
                    "yes".into()
                }
                Some(_) => "no".into(),
                None => "–".into(),
            },
        ]);
    }
    for f in &ev.failures {
        e.row_padded(vec![format!("failed: {f}")]);
    }
    e
}

/// Median voluntary switches per server at each latency request.
fn wakeups_plot(r: &BigbufResults) -> String {
    let mut series = Vec::new();
    for k in [ServerKind::Quaverd, ServerKind::Pulseaudio] {
        let v: Vec<f64> = r
            .latencies
            .iter()
            .map(|l| {
                point(r, k, l)
                    .and_then(|p| p.med(|s| s.voluntary_per_s))
                    .unwrap_or(f64::NAN)
            })
            .collect();
        if v.iter().any(|x| x.is_finite()) {
            series.push((k.name().to_string(), v));
        }
    }
    let cats: Vec<String> = r
        .latencies
        .iter()
        .map(|l| {
            if l == "default" {
                "default latency".into()
            } else {
                format!("--latency-msec={l}")
            }
        })
        .collect();
    bar_chart(
        "server wakeups per second, one paplay stream (medians)",
        "paplay latency request",
        "voluntary context switches / s, all threads",
        &cats,
        &series,
    )
}

/// Each event's latency per run (`None` without a run).
fn events_plot(ev: &EventPart) -> Option<String> {
    let series: Vec<Series> = ev
        .runs
        .iter()
        .map(|run| {
            Series::new(
                &run.label,
                run.latencies_ms
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| ((i + 1) as f64, v)))
                    .collect(),
            )
        })
        .collect();
    (!series.is_empty()).then(|| {
        line_plot(
            "event sound: click added → played by the virtual DAC",
            "event",
            "ms",
            &series,
            false,
            true,
        )
    })
}

/// Per latency, server and thread name: the medians of that name's threads.
fn thread_table(r: &BigbufResults) -> Table {
    let mut pt = Table::new(&[
        "latency",
        "server",
        "thread",
        "threads",
        "wakeups/s",
        "preemptions/s",
        "CPU %",
    ]);
    for lat in &r.latencies {
        for k in [ServerKind::Quaverd, ServerKind::Pulseaudio] {
            let Some(p) = point(r, k, lat) else { continue };
            let mut names: Vec<&str> = p
                .samples
                .iter()
                .flat_map(|s| s.threads.iter().map(|t| t.name.as_str()))
                .collect();
            names.sort();
            names.dedup();
            for n in names {
                let of = |f: fn(&ThreadRate) -> f64| {
                    median(
                        &p.samples
                            .iter()
                            .filter_map(|s| s.threads.iter().find(|t| t.name == n))
                            .map(f)
                            .collect::<Vec<_>>(),
                    )
                };
                pt.row(vec![
                    lat.clone(),
                    k.name().into(),
                    n.into(),
                    opt(of(|t| t.threads as f64), 0),
                    opt(of(|t| t.voluntary_per_s), 2),
                    opt(of(|t| t.involuntary_per_s), 2),
                    opt(of(|t| t.cpu_per_s * 100.0), 3),
                ]);
            }
        }
    }
    pt
}

/// Every measured window.
fn window_table(r: &BigbufResults) -> Table {
    let windows: Vec<(&WakeupPoint, &WakeupSample)> = r
        .points
        .iter()
        .flat_map(|p| p.samples.iter().map(move |s| (p, s)))
        .collect();
    Table::of(
        &windows,
        &[
            ("latency", &|(p, _)| p.latency.clone()),
            ("server", &|(p, _)| p.server.name().into()),
            ("run", &|(_, s)| s.run.to_string()),
            ("window s", &|(_, s)| format!("{:.1}", s.window_s)),
            ("wakeups/s", &|(_, s)| format!("{:.2}", s.voluntary_per_s)),
            ("preemptions/s", &|(_, s)| {
                format!("{:.2}", s.involuntary_per_s)
            }),
            ("CPU %", &|(_, s)| format!("{:.3}", s.cpu_per_s * 100.0)),
            ("sink inputs", &|(_, s)| s.sink_inputs.to_string()),
            ("quaverd quantum", &|(_, s)| {
                s.quaverd
                    .as_ref()
                    .map_or("–".into(), |q| q.quantum.to_string())
            }),
            ("device wakeups/s", &|(_, s)| {
                opt(s.quaverd.as_ref().map(|q| q.device_wakeups_per_s), 2)
            }),
            ("cycles/wakeup", &|(_, s)| {
                opt(s.quaverd.as_ref().and_then(|q| q.cycles_per_wakeup), 1)
            }),
            ("xruns", &|(_, s)| {
                s.quaverd
                    .as_ref()
                    .map_or("–".into(), |q| q.xruns.to_string())
            }),
        ],
    )
}

/// How the wakeups part ran.
fn wakeups_text(r: &BigbufResults) -> String {
    let pa = match (&r.pulseaudio_sink, &r.pulseaudio_error) {
        (Some(s), _) => format!(
            "PulseAudio on `{}` ({}; module-alsa-sink on alsa-lib's `null` PCM: {})",
            s.module, s.kind, s.alsa_null
        ),
        (None, Some(e)) => format!("PulseAudio: {e}"),
        (None, None) => "PulseAudio: not measured".into(),
    };
    format!(
        "One `paplay` of a {:.0} s 48 kHz s16 stereo \
         WAV per point, against a fresh server: quaverd on `--device {}` (the \
         simulated card with a 2 s ring, filling ahead), and {}. Each server \
         runs headless in its own runtime directory. After {} s of playing, \
         `/proc/PID/task/*/{{status,stat}}` of every thread of the server are sampled \
         over a {} s window; medians over {} run(s), servers alternating. quaverd's own \
         `status` before and after the window gives its quantum, the device's \
         wakeups and the cycles rendered per wakeup (> 1: filling ahead).",
        r.file_seconds, r.quaverd_device, pa, r.settle_seconds, r.window_seconds, r.repeats
    )
}

/// How the event part ran.
fn events_text(r: &BigbufResults, ev: &EventPart) -> String {
    format!(
        "In-process, on the real clock: {}. The engine's \
         real-time thread: {}. A quiet music stream (sine, amplitude {MUSIC_AMPLITUDE}) \
         asks for {BUFFER_FRAMES} frames (2 s), so the card fills ahead and the thread \
         sleeps about {:.2} s between refills. {} times per run, after a refill (a \
         driver wakeup, then the card full and its counters still for {} ms) and a \
         seeded random 5–75 % of that sleep, a click stream (one frame at \
         {CLICK_AMPLITUDE}) is added; its latency is the DAC probe's time for the first \
         sample ≥ {PROBE_THRESHOLD} minus the moment just before `add_node_linked`. \
         The probe is re-armed before each click, and each click's node is removed \
         after it played. *queued* is the audio the card held when the click was \
         added (estimated from the refill). Contrast run (*rewind blocked*): a second \
         music stream without rewind history, which makes rewinds impossible, so the \
         click waits behind the queue. Acceptance: heard within {EVENT_BOUND_MS} ms.",
        ev.card,
        ev.realtime,
        (BUFFER_FRAMES - 8192 - PERIOD_FRAMES) as f64 / RATE as f64,
        r.events_per_run,
        STILL.as_millis()
    )
}

/// One event run in a line: its wakeups, rewinds and every event's latency.
fn event_line(run: &EventRun) -> String {
    format!(
        "{}: quantum {}, {} driver wakeups and {} rewinds ({} frames taken back) \
         in {:.1} s; events mid-sleep {}/{}; `add_node_linked` took {} µs \
         (median); per event (ms): {}",
        run.label,
        run.quantum,
        run.wakeups,
        run.rewinds,
        run.rewound_frames,
        run.seconds,
        run.mid_sleep.iter().filter(|m| **m).count(),
        run.mid_sleep.len(),
        opt(median(&run.add_us), 0),
        run.latencies_ms
            .iter()
            .map(|v| opt(*v, 1))
            .collect::<Vec<_>>()
            .join(", ")
    )
}
