//! The jack report: xrun tables and verdicts, cyclictest, per-client overhead.

use crate::modes::jack::client::CounterSnapshot;
use crate::modes::jack::pipewire::PwTool;
use crate::modes::jack::{CyclictestPoint, JackResults, JackServer, XrunPoint, XrunTotals, rate};
use crate::report::doc::{Doc, yes_no};
use crate::report::stats::{Summary, fmt_bounds};
use crate::report::stats::{median, midpoint_median};
use crate::report::{ModeOutput, Table};
use std::fmt::Write as _;

/// "median (min–max)" of per-window rates, or "n/a".
pub(crate) fn spread(rates: &[f64]) -> String {
    match (midpoint_median(rates), Summary::of(rates)) {
        (Some(m), Some(s)) => format!("{m:.2} ({:.2}–{:.2})", s.min, s.max),
        _ => "n/a".into(),
    }
}

fn us(ns: f64) -> String {
    format!("{:.1} µs", ns / 1000.0)
}

pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else if a == 0.0 {
        "– (0 / 0)".into()
    } else {
        "∞ (jackd2: 0)".into()
    }
}

/// A server-counted xrun figure with what it is made of: quaverd's missed cycles, or
/// how many of jackd2's lines were its driver's.
pub(crate) fn server_cell(xruns: Option<u64>, missed: Option<u64>, driver: Option<u64>) -> String {
    match (xruns, missed, driver) {
        (None, ..) => "n/a".into(),
        (Some(x), Some(m), Some(d)) => format!("{x} ({m} missed cycles, {d} driver)"),
        (Some(x), Some(m), None) => format!("{x} ({m} missed cycles)"),
        (Some(x), None, Some(d)) => format!("{x} ({d} driver)"),
        (Some(x), None, None) => x.to_string(),
    }
}

/// The acceptance line for one period, on quaverd's and jackd2's totals (None: either
/// has no server count).
pub(crate) fn verdict(q: &XrunTotals, j: &XrunTotals) -> Option<String> {
    let (qs, js) = (q.server_per_min?, j.server_per_min?);
    let (ql, jl) = (q.late_per_min?, j.late_per_min?);
    let med = |t: &XrunTotals| midpoint_median(&t.server_rates).unwrap_or(0.0);
    let half = |a: f64, b: f64| {
        if a <= 0.5 * b {
            "≤ 0.5×: met"
        } else {
            "> 0.5×: NOT met"
        }
    };
    Some(format!(
        "period {}: {} {qs:.2}/min ({} xruns in {:.2} min, {} windows) vs jackd2 \
         {js:.2}/min ({} in {:.2} min, {} windows) server-counted ({}; {}; per-window \
         median {:.2} vs {:.2}); callbacks more than two periods late {ql:.2}/min vs \
         {jl:.2}/min ({} late, issue 33: {})",
        q.period,
        q.server.name(),
        q.server_xruns.unwrap_or(0),
        q.server_minutes,
        q.windows,
        j.server_xruns.unwrap_or(0),
        j.server_minutes,
        j.windows,
        format_args!(
            "{} {} jackd2: {}",
            q.server.name(),
            if qs <= js { "≤" } else { ">" },
            if qs <= js { "met" } else { "NOT met" }
        ),
        format_args!("issue 33: {}", half(qs, js)),
        med(q),
        med(j),
        q.late,
        half(ql, jl),
    ))
}

/// Tables and the terminal summary.
pub fn render(r: &JackResults) -> ModeOutput {
    let rounds = r.xruns.iter().map(|p| p.repeat + 1).max().unwrap_or(1);
    let periods: Vec<usize> = {
        let mut v: Vec<usize> = r.xruns.iter().map(|p| p.period).collect();
        v.dedup();
        v
    };
    // Servers in run order.
    let servers: Vec<JackServer> = {
        let mut v: Vec<JackServer> = Vec::new();
        for p in &r.xruns {
            if !v.contains(&p.server) {
                v.push(p.server);
            }
        }
        v
    };
    let totals: Vec<XrunTotals> = periods
        .iter()
        .flat_map(|&period| {
            servers
                .iter()
                .map(move |&s| XrunTotals::of(&r.xruns, period, s))
        })
        .filter(|t| t.windows + t.failed > 0)
        .collect();
    let total = |period: usize, s: JackServer| {
        totals
            .iter()
            .find(|t| t.period == period && t.server == s && t.windows > 0)
    };
    let mut summary = Table::new(&[
        "period",
        "server",
        "window",
        "voices (load)",
        "sched",
        "server xruns",
        "xrun cb",
        "cb > 2 periods late",
        "per min (srv / late)",
        "vs jackd2 (srv / late)",
        "window rates: median (min–max), srv / late",
    ]);
    for &period in &periods {
        for p in r.xruns.iter().filter(|p| p.period == period) {
            summary.row_padded(window_row(r, p, rounds));
        }
        let jt = total(period, JackServer::Jackd2);
        for t in totals.iter().filter(|t| t.period == period) {
            summary.row_padded(total_row(t, jt));
        }
        if let Some(ct) = r.cyclictest.iter().find(|c| c.period == period) {
            summary.row_padded(cyclictest_row(ct));
        }
    }
    let verdicts: Vec<String> = periods
        .iter()
        .flat_map(|&period| {
            [JackServer::Quaverd, JackServer::QuaverdAsync]
                .into_iter()
                .filter_map(move |q| verdict(total(period, q)?, total(period, JackServer::Jackd2)?))
        })
        .collect();
    let mut doc = Doc::new();
    doc.heading(2, "xruns under load")
        .para(intro(r, rounds))
        .table(&summary);
    if !verdicts.is_empty() {
        doc.para(
            "**Acceptance (quaver's xrun rate must not exceed jackd2's), on the totals of \
             the alternating windows:**",
        )
        .list(&verdicts);
    }
    doc.heading(3, "Details").list(details(r, rounds));
    for &period in &periods {
        for q in servers.iter().filter(|s| s.is_quaverd()) {
            let windows = r
                .xruns
                .iter()
                .filter(|p| p.period == period && p.server == *q)
                .filter_map(|p| p.quaver.as_ref()?.stages.as_ref());
            if let Some(w) = crate::modes::jack::stages::StageWindow::sum(windows) {
                let (text, table) = stage_table(period, &w);
                doc.heading(
                    3,
                    format!("{}, {period} frames: where the cycles' time went", q.name()),
                )
                .para(text)
                .table(&table);
            }
        }
    }
    let oh = overhead_table(r);
    if !r.overhead.is_empty() {
        doc.heading(2, "Per-client overhead")
            .para(overhead_text(r))
            .table(&oh);
    }
    if !r.missing.is_empty() {
        doc.heading(3, "Not measured")
            .list(r.missing.iter().map(|(s, w)| format!("{}: {w}", s.name())));
    }
    let extra = if r.overhead.is_empty() {
        Vec::new()
    } else {
        vec![oh]
    };
    let mut out = doc.finish(r, summary, extra);
    // The totals go into the record next to the windows (derived, so a record read
    // back as `JackResults` ignores them).
    if let Some(m) = out.results.as_object_mut() {
        m.insert(
            "xrun_totals".into(),
            serde_json::to_value(&totals).unwrap_or_default(),
        );
    }
    out
}

/// What the xrun table shows and how the windows were run.
fn intro(r: &JackResults, rounds: usize) -> String {
    format!(
        "One JACK client (this benchmark's, the same code on every \
         server: libjack loaded with `dlopen` as `quaver-jack` / jackd2 / `pw-jack` put it \
         on the library path) with one output port connected to the server's first \
         playback port renders SynthMark-like voices calibrated to {:.0} % of a core, \
         while `{}` runs. *server xruns*: the server's own count in the window, as jackd2 \
         counts them: a run of consecutive cycles the client missed is one xrun (jackd2 \
         logs one \"was not finished\" for the first failing cycle of a run only; its \
         timed driver ending a cycle after the next one was due is one more line, shown \
         as *driver*); quaverd: xrun events counted against the client + device xruns + \
         times its RT thread woke more than a period after its deadline (a run of such \
         cycles is one, shown as *driver*), with every cycle the \
         client missed in brackets; PipeWire: not available without a profiler — see the \
         xrun callbacks. \
         *xrun cb*: calls of the client's `jack_set_xrun_callback` (quaver's libjack \
         coalesces misses that arrive together into one call). *cb > 2 periods \
         late*: callbacks that started more than two periods after the previous one's \
         start plus the frames between them (CLOCK_MONOTONIC in the client, the same on \
         every server; a stall and the cycles run back to back after it count once), \
         with the callbacks whose frame time jumped by more than a period (*jumps*) and \
         that ended more than a period after `jack_get_cycle_times`' cycle start \
         (*overruns*; meaningless on jackd2, whose cycle times are off by more than a \
         period at these sizes). cyclictest: wakeups later than one period, under the \
         same load for the same time, once per period after the windows.\n\n{}\
         Every window has its row (*window*: its round; *vs jackd2*: against jackd2's \
         window of the same round); the *total* row per server sums its windows: xruns / \
         minutes, server-counted and client-observed, with the median and range of the \
         per-window rates. The acceptance verdict is on the totals.{}",
        r.load * 100.0,
        match r.stressor.as_str() {
            "stress-ng" => "stress-ng --cpu 2",
            "built-in" => "the built-in stressor (2 CPU hogs)",
            _ => "no load",
        },
        if rounds > 1 {
            format!(
                "{rounds} windows per server and period, the servers' windows alternating \
                 (round 1: every server once, then round 2, …) so that every server sees \
                 the same stretches of the machine's noise: xruns here come in bursts. "
            )
        } else {
            "One window per server and period (`--repeats 1`): xruns here come in \
             bursts, so one window is a noisy basis for a verdict. "
                .to_string()
        },
        r.callback_spin_us.map_or(String::new(), |us| format!(
            " quaverd ran with `callback.spin_us = {us}`."
        ))
    )
}

/// One window's row of the xrun table (padded to the table's width by the caller).
fn window_row(r: &JackResults, p: &XrunPoint, rounds: usize) -> Vec<String> {
    let period = p.period;
    let name = p.server.name().to_string();
    let window = format!("{}/{rounds}", p.repeat + 1);
    let (Some(c), Some(t)) = (&p.client, p.totals()) else {
        return vec![
            period.to_string(),
            name,
            window,
            format!("failed: {}", p.error.clone().unwrap_or_default()),
        ];
    };
    // The same round's jackd2 window: the nearest in time, so the same noise.
    let jrates = r
        .xruns
        .iter()
        .find(|j| {
            j.period == period
                && j.repeat == p.repeat
                && j.server == JackServer::Jackd2
                && j.client.is_some()
        })
        .map(|j| {
            let t = j.totals().unwrap_or_default();
            (
                rate(j.server_xruns.unwrap_or(0), j.minutes()),
                rate(t.late2, j.minutes()),
            )
        });
    let period_ns = c.nframes.max(1) as f64 * 1e9 / r.rate as f64;
    let load = t.mean_busy_ns() / period_ns;
    let srv_rate = p.server_xruns.map(|x| rate(x, p.minutes()));
    let late_rate = rate(t.late2, p.minutes());
    let vs = match (p.server, jrates) {
        (JackServer::Jackd2, _) => "1".into(),
        (_, Some((js, jl))) => format!(
            "{} / {}",
            srv_rate.map_or("n/a".into(), |s| ratio(s, js)),
            ratio(late_rate, jl)
        ),
        _ => "no jackd2".into(),
    };
    vec![
        format!("{} ({})", period, c.nframes),
        name,
        window,
        format!("{} ({:.0} %)", c.voices, load * 100.0),
        c.clients.first().map_or(String::new(), |x| x.sched.clone()),
        server_cell(p.server_xruns, p.missed_cycles, p.driver_xruns),
        t.xrun_callbacks.to_string(),
        format!("{} ({} jumps, {} overruns)", t.late2, t.jumps, t.overruns),
        format!(
            "{} / {:.2}",
            srv_rate.map_or("n/a".into(), |s| format!("{s:.2}")),
            late_rate
        ),
        vs,
    ]
}

/// A server's total row at one period, against jackd2's total `jt`.
fn total_row(t: &XrunTotals, jt: Option<&XrunTotals>) -> Vec<String> {
    let mut window = format!("total: {} ({:.2} min)", t.windows, t.minutes);
    if t.failed > 0 {
        let _ = write!(window, ", {} failed", t.failed);
    }
    if t.windows == 0 {
        return vec![t.period.to_string(), t.server.name().into(), window];
    }
    let srv_rate = t.server_per_min;
    let late_rate = t.late_per_min.unwrap_or(0.0);
    let vs = match (t.server, jt) {
        (JackServer::Jackd2, _) => "1".into(),
        (_, Some(j)) => format!(
            "{} / {}",
            match (srv_rate, j.server_per_min) {
                (Some(s), Some(js)) => ratio(s, js),
                _ => "n/a".into(),
            },
            ratio(late_rate, j.late_per_min.unwrap_or(0.0))
        ),
        _ => "no jackd2".into(),
    };
    vec![
        t.period.to_string(),
        t.server.name().into(),
        window,
        String::new(),
        String::new(),
        server_cell(t.server_xruns, t.missed_cycles, t.driver_xruns),
        t.xrun_callbacks.to_string(),
        format!("{} ({} jumps, {} overruns)", t.late, t.jumps, t.overruns),
        format!(
            "{} / {:.2}",
            srv_rate.map_or("n/a".into(), |s| format!("{s:.2}")),
            late_rate
        ),
        vs,
        format!("{} / {}", spread(&t.server_rates), spread(&t.late_rates)),
    ]
}

/// cyclictest's row at one period.
fn cyclictest_row(ct: &CyclictestPoint) -> Vec<String> {
    match (&ct.result, ct.late) {
        (Some(res), Some(late)) => vec![
            ct.period.to_string(),
            "cyclictest".into(),
            "once".into(),
            format!("-i {} µs", ct.interval_us),
            "SCHED_FIFO 80".into(),
            format!("{late} > {} µs", ct.interval_us),
            String::new(),
            format!("of {} wakeups, max {} µs", res.samples, res.max_us),
            format!(
                "{:.2}",
                rate(late, res.samples as f64 * ct.interval_us as f64 / 6e7)
            ),
        ],
        _ => vec![
            ct.period.to_string(),
            "cyclictest".into(),
            "once".into(),
            ct.error.clone().unwrap_or_default(),
        ],
    }
}

/// The calibration, then every window: the library, its timings and quaverd's counts.
fn details(r: &JackResults, rounds: usize) -> Vec<String> {
    let mut items = Vec::new();
    for (period, ns) in &r.ns_per_voice {
        let v = r.voices.iter().find(|x| x.0 == *period).map_or(0, |x| x.1);
        items.push(format!(
            "calibration at {period} frames: {:.0} ns per voice per cycle ({:.2} ns per \
             voice-frame) → {v} voices",
            ns,
            ns / *period as f64
        ));
    }
    for p in &r.xruns {
        let mut item = format!(
            "{} at {}, window {}/{rounds}: ",
            p.server.name(),
            p.period,
            p.repeat + 1
        );
        let Some(c) = &p.client else {
            let _ = write!(item, "failed: {}", p.error.clone().unwrap_or_default());
            items.push(item);
            continue;
        };
        let t = p.totals().unwrap_or_default();
        let _ = write!(
            item,
            "library `{}` ({}), {} frames/cycle, {:.1} s, {} cycles, wake p50/p99/max \
             {} / {} / {}, busy p50/p99/max {} / {} / {}, jack_cpu_load {:.1} %",
            c.open.library,
            c.open.version,
            c.nframes,
            c.seconds,
            t.cycles,
            fmt_bounds(t.wake.percentile(50.0)),
            fmt_bounds(t.wake.percentile(99.0)),
            fmt_bounds(t.wake.max_bucket()),
            fmt_bounds(t.busy.percentile(50.0)),
            fmt_bounds(t.busy.percentile(99.0)),
            fmt_bounds(t.busy.max_bucket()),
            c.clients.first().map_or(0.0, |x| x.cpu_load),
        );
        if let Some(q) = &p.quaver {
            let _ = write!(
                item,
                "; quaverd: RT SCHED_FIFO {}, {} xrun events of {} missed cycles, \
                 fell behind {}× ({} cycles late), {} caught up, {} skips, {} device \
                 xruns, {} async, cycle busy p50/p99 {} / {}",
                yes_no(q.realtime),
                q.client_xrun_events,
                q.client_misses,
                q.overdue_runs,
                q.overdue_cycles,
                q.client_caught_up,
                q.client_skips,
                q.device_xruns,
                q.async_clients,
                fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(50.0))),
                fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(99.0))),
            );
        }
        items.push(item);
    }
    items
}

/// Per-client overhead: rows per server and client count, one per source of figures.
fn overhead_table(r: &JackResults) -> Table {
    let mut oh = Table::new(&[
        "clients",
        "server",
        "source",
        "wait / client",
        "busy / client",
        "cycle busy",
        "xruns",
    ]);
    for p in &r.overhead {
        let name = p.server.name().to_string();
        let n = p.clients.to_string();
        let Some(c) = &p.client else {
            oh.row_padded(vec![
                n,
                name,
                format!("failed: {}", p.error.clone().unwrap_or_default()),
            ]);
            continue;
        };
        let t = CounterSnapshot::sum(c.clients.iter().map(|x| &x.window));
        if let Some(q) = &p.quaver {
            oh.row_padded(vec![
                n.clone(),
                name.clone(),
                "quaverd timing WAIT/BUSY (per node)".into(),
                q.node_wait_ns.map_or("n/a".into(), us),
                q.node_busy_ns.map_or("n/a".into(), us),
                format!("{} of {} nodes timed", q.timed_clients, p.clients),
            ]);
            oh.row(vec![
                n.clone(),
                name.clone(),
                "quaverd RT thread (blocked / per client)".into(),
                q.wait_per_client_ns.map_or("n/a".into(), us),
                q.node_rt_ns.map_or("n/a".into(), us),
                format!(
                    "p50 {} / p99 {}",
                    fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(50.0))),
                    fmt_bounds(q.busy.as_ref().and_then(|b| b.percentile(99.0)))
                ),
                format!("{} misses, {} device", q.client_misses, q.device_xruns),
            ]);
        }
        if let Some(nodes) = &p.pw_nodes {
            let waits: Vec<f64> = nodes.iter().filter_map(|x| median(&x.wait_ns)).collect();
            let busys: Vec<f64> = nodes.iter().filter_map(|x| median(&x.busy_ns)).collect();
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            oh.row(vec![
                n.clone(),
                name.clone(),
                match p.pw_tool {
                    Some(PwTool::PwTop) => "pw-top -b WAIT/BUSY".into(),
                    _ => "pw-top WAIT/BUSY via pw-profiler".into(),
                },
                mean(&waits).map_or("n/a".into(), us),
                mean(&busys).map_or("n/a".into(), us),
                format!("{} of {} nodes seen", nodes.len(), p.clients),
                format!(
                    "{} not finished",
                    nodes.iter().map(|x| x.errors).sum::<u64>()
                ),
            ]);
        } else if let Some(w) = &p.pw_command
            && p.server == JackServer::Pipewire
        {
            oh.row_padded(vec![n.clone(), name.clone(), format!("pw-top: {w}")]);
        }
        oh.row(vec![
            n,
            name,
            "client (wake / callback)".into(),
            us(t.mean_wake_ns()),
            us(t.mean_busy_ns()),
            String::new(),
            format!("{} cb, {} late", t.xrun_callbacks, t.late),
        ]);
    }
    oh
}

/// What the overhead table's rows measure.
fn overhead_text(r: &JackResults) -> String {
    format!(
        "N JACK clients in one process, each with one output \
         port connected to the server's first playback port and {} voices (a light fixed \
         load), at period {}. Rows per server:\n\n\
         - *quaverd timing WAIT/BUSY*: quaverd's per-node timing (`timing` reply, `quaver \
         top`): WAIT = the client's process thread awake − the server's signal, BUSY = its \
         completion − awake, stamped as pw-top's are; mean over the window per node, mean \
         of the clients;\n\
         - *quaverd RT thread*: the time the RT thread blocked on a client's completion per \
         wake (`quaver graph`'s callback statistics), then the RT thread's whole time on a \
         client per cycle (waking it, blocking, collecting; `rt_avg_ns`), and the RT \
         thread's whole-cycle busy time (log2 buckets);\n\
         - *pw-top WAIT/BUSY*: PipeWire's per-node WAIT (awake − signal) and BUSY (finish − \
         awake), median of the samples per node, mean of the nodes — from `pw-top -b`, or, \
         where pw-top has no batch mode (0.3.65), from `pw-profiler`, the same profiler data \
         pw-top reads, every cycle;\n\
         - *client*: what the client measures on every server: wake = callback start − \
         cycle start (`jack_get_cycle_times`, the library's clock), callback = its duration.\n\n\
         quaverd's WAIT/BUSY and pw-top's have the same definition; quaverd's are means, \
         pw-top's medians of the samples. The RT thread's blocked time includes the \
         client's whole wake-up and callback whenever it was not done when needed.",
        r.overhead_voices, r.overhead_period
    )
}

/// quaverd's stage breakdown at one period, summed over its windows.
fn stage_table(period: usize, w: &crate::modes::jack::stages::StageWindow) -> (String, Table) {
    let n = |c: &str| w.class(c).map_or(0, |c| c.cycles);
    let mut t = Table::new(&[
        "stage",
        &format!("all {} cycles: p50 / p99 / max (longest in)", n("all")),
        &format!("callback > 2 periods late, {} cycles", n("late")),
        &format!("xrun, {} cycles", n("xrun")),
    ]);
    for row in crate::modes::jack::stages::rows(w, &["all", "late", "xrun"]) {
        t.row_padded(row);
    }
    let text = format!(
        "Every cycle with the client, as quaverd's RT thread timed it (`timing` reply, \
         `stages`; docs/engine/stages.md), over all quaverd windows at {period} frames. \
         *overhang*: the previous cycle ended after this one was due; *timer*: the driver \
         woke the RT thread after the deadline; *pre*: RT thread running → client \
         signalled; *wake*: signalled → the client's process thread awake; *callback*: \
         its callback; *resume*: the client done → the RT thread saw it (its second \
         wakeup when it blocked on the client); *post*: then the mixing and the device \
         write; *callback_late*: the nominal cycle start → the client awake (what makes a \
         cycle *late*: more than two periods). *xrun*: the client missed the cycle or the \
         RT thread woke more than a period late (a missed cycle has no client stages). \
         Percentiles are bucket upper ends (12.5 % resolution); *longest in*: cycles in \
         which the stage was the longest."
    );
    (text, t)
}
