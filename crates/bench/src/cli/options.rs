//! Each mode's arguments turned into its options, then the mode run and reported.

use crate::Ctx;
use crate::cli::args::{Common, Mode};
use crate::modes::bigbuf::BigbufOptions;
use crate::modes::jack::JackOptions;
use crate::modes::latency::LatencyOptions;
use crate::modes::load::LoadOptions;
use crate::modes::peers::PeersOptions;
use crate::modes::stress::StressOptions;
use crate::modes::synth::SynthOptions;
use crate::modes::{bigbuf, drift, jack, latency, load, peers, stress, synth};
use crate::report::ModeOutput;
use anyhow::{Result, bail};

/// `quaver-bench latency`: its options from the command line, run and reported.
pub fn latency(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Latency {
        quanta,
        paths,
        period,
        impulses,
        inject_delay,
        rate,
        after_idle,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = LatencyOptions::new(quick);
    o.quanta = quanta.clone();
    o.paths = paths.clone();
    o.period = *period;
    o.rate = *rate;
    o.inject_delay = *inject_delay;
    o.after_idle = *after_idle;
    if let Some(n) = impulses {
        o.impulses = *n;
    }
    Ok(latency::render(&latency::run(ctx, &o)?))
}

/// `quaver-bench load`: its options from the command line, run and reported.
pub fn load(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Load {
        streams,
        sweep,
        max_streams,
        latency_ms,
        duration,
        variants,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = LoadOptions::new(quick, *streams, *sweep, *max_streams);
    o.latency_ms = *latency_ms;
    o.variants = variants.clone();
    if let Some(d) = duration {
        o.window_seconds = *d;
    }
    Ok(load::render(&load::run(ctx, &o)?))
}

/// `quaver-bench stress`: its options from the command line, run and reported.
pub fn stress(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Stress {
        quantum,
        duration,
        stressor,
        device,
        period,
        no_baseline,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = StressOptions::new(quick, std::env::current_exe()?);
    o.quantum = *quantum;
    o.stressor = *stressor;
    o.device = *device;
    o.period = *period;
    if let Some(d) = duration {
        o.seconds = *d;
    }
    if *no_baseline {
        o.baseline = false;
    }
    Ok(stress::render(&stress::run(ctx, &o)?))
}

/// `quaver-bench peers`: its options from the command line, run and reported.
pub fn peers(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Peers {
        streams,
        repeats,
        latencies,
        no_load,
        monitor_latencies,
        no_monitor_latency,
        monitor_seconds,
        monitor_rounds,
        monitor_fragsize_ms,
        inject_delay_ms,
        capture_latencies,
        no_capture_path,
        capture_seconds,
        capture_rounds,
        under_load,
        under_load_streams,
        under_load_latency_ms,
        under_load_seconds,
        under_load_rounds,
        under_load_hogs_per_core,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = PeersOptions::new(quick);
    if *under_load {
        let mut u = crate::modes::peers::underload::UnderLoadOptions::new(quick);
        if let Some(s) = under_load_streams {
            if s.is_empty() || s.contains(&0) {
                bail!("--under-load-streams takes stream counts of at least 1");
            }
            u.counts = s.clone();
        }
        if *under_load_latency_ms == 0 {
            bail!("--under-load-latency-ms must be at least 1");
        }
        u.latency_ms = *under_load_latency_ms;
        if let Some(s) = under_load_seconds {
            if !(*s > 0.0 && s.is_finite()) {
                bail!("--under-load-seconds must be a positive number");
            }
            u.seconds = *s;
        }
        if let Some(r) = under_load_rounds {
            u.rounds = (*r).max(1);
        }
        u.hogs_per_core = (*under_load_hogs_per_core).max(1);
        o.under_load = Some(u);
    }
    if let Some(s) = streams {
        o.counts = s.clone();
    }
    if let Some(r) = repeats {
        o.repeats = (*r).max(1);
    }
    o.latencies = latencies.clone();
    o.load = !*no_load;
    if *no_monitor_latency {
        o.monitor = None;
    }
    if *no_capture_path {
        o.capture = None;
    }
    if !o.load && o.monitor.is_none() && o.capture.is_none() && !*under_load {
        bail!(
            "--no-load, --no-monitor-latency and --no-capture-path together leave nothing to \
             measure"
        );
    }
    if let Some(c) = o.capture.as_mut() {
        if let Some(l) = capture_latencies {
            if l.is_empty() || l.contains(&0) {
                bail!("--capture-latencies takes latencies of at least 1 ms");
            }
            c.latencies_ms = l.clone();
        }
        if let Some(s) = capture_seconds {
            if !(*s > 0.0 && s.is_finite()) {
                bail!("--capture-seconds must be a positive number");
            }
            c.seconds = *s;
        }
        if let Some(r) = capture_rounds {
            c.rounds = (*r).max(1);
        }
    }
    if let Some(m) = o.monitor.as_mut() {
        m.latencies_ms = monitor_latencies.clone();
        if let Some(s) = monitor_seconds {
            m.seconds = *s;
        }
        if let Some(r) = monitor_rounds {
            m.rounds = (*r).max(1);
        }
        m.fragsize_ms = *monitor_fragsize_ms;
        m.inject_delay_ms = *inject_delay_ms;
    }
    Ok(peers::render::render(&peers::run(ctx, &o)?))
}

/// `quaver-bench synth`: its options from the command line, run and reported.
pub fn synth(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Synth {
        marks,
        quantum,
        budget,
        max_voices,
        voices,
        quanta,
        duration,
        switch_period_ms,
        switch_low,
        switch_high,
        sim_period,
        margin_max,
        spike_every_ms,
        spike_ms,
        rate,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = SynthOptions::new(quick);
    o.marks = marks.clone();
    o.quantum = *quantum;
    o.budget = budget / 100.0;
    if let Some(m) = max_voices {
        o.max_voices = *m;
    }
    o.voices = *voices;
    o.quanta = quanta.clone();
    if let Some(d) = duration {
        o.jitter_seconds = *d;
        o.switch_seconds = *d;
    }
    if let Some(p) = switch_period_ms {
        o.switch_period_ms = *p;
    }
    o.switch_low = *switch_low;
    o.switch_high = *switch_high;
    o.sim_period = *sim_period;
    if let Some(m) = margin_max {
        o.margin_max = *m;
    }
    if let Some(e) = spike_every_ms {
        o.spike_every_ms = *e;
    }
    if let Some(d) = spike_ms {
        o.spike_ms = *d;
    }
    o.rate = *rate;
    Ok(synth::render::render(&synth::run(ctx, &o)?))
}

/// `quaver-bench jack`: its options from the command line, run and reported.
pub fn jack(ctx: &mut Ctx, mode: &Mode, common: &Common) -> Result<ModeOutput> {
    let quick = common.quick;
    let Mode::Jack {
        periods,
        servers,
        duration,
        repeats,
        load,
        voices,
        stressor,
        clients,
        overhead_duration,
        overhead_period,
        overhead_voices,
        no_xruns,
        no_overhead,
        jackd_priority,
        callback_spin_us,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = JackOptions::new(quick, std::env::current_exe()?);
    o.periods = periods.clone();
    o.servers = servers.clone();
    if let Some(d) = duration {
        o.seconds = *d;
    }
    if let Some(r) = repeats {
        o.repeats = (*r).max(1);
    }
    o.load = load / 100.0;
    o.voices = *voices;
    o.stressor = *stressor;
    if let Some(c) = clients {
        o.counts = c.clone();
    }
    if let Some(d) = overhead_duration {
        o.overhead_seconds = *d;
    }
    o.overhead_period = *overhead_period;
    o.overhead_voices = *overhead_voices;
    o.xruns = !*no_xruns;
    o.overhead = !*no_overhead;
    o.callback_spin_us = *callback_spin_us;
    o.jackd_priority = jackd_priority.unwrap_or(
        common
            .realtime_priority
            .filter(|p| *p > 0)
            .unwrap_or(crate::tools::rt::QUAVERD_DEFAULT_PRIORITY),
    );
    Ok(jack::render::render(&jack::run(ctx, &o)?))
}

/// `quaver-bench bigbuf`: its options from the command line, run and reported.
pub fn bigbuf(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Bigbuf {
        latencies,
        window,
        settle,
        repeat,
        events,
        no_wakeups,
        no_events,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = BigbufOptions::new(quick);
    o.latencies = latencies.clone();
    if let Some(w) = window {
        o.window_seconds = *w;
    }
    if let Some(s) = settle {
        o.settle_seconds = *s;
    }
    if let Some(r) = repeat {
        o.repeats = (*r).max(1);
    }
    if let Some(n) = events {
        o.events = *n;
    }
    o.wakeups = !*no_wakeups;
    o.event_part = !*no_events;
    Ok(bigbuf::render::render(&bigbuf::run(ctx, &o)?))
}

/// `quaver-bench drift`: its options from the command line, run and reported.
pub fn drift(ctx: &mut Ctx, mode: &Mode, quick: bool) -> Result<ModeOutput> {
    let Mode::Drift {
        cases,
        ppm,
        duration,
        poll_ms,
        latency_ms,
        sequential,
        period,
        ..
    } = mode
    else {
        unreachable!("called for its own mode")
    };
    let mut o = drift::DriftOptions::new(quick);
    o.cases = cases.clone();
    if !ppm.is_finite() || ppm.abs() > 100_000.0 {
        anyhow::bail!("--ppm {ppm} is outside ±100000 (the sim card's limit)");
    }
    o.ppm = *ppm;
    if let Some(d) = duration {
        if !(d.is_finite() && *d > 0.0) {
            anyhow::bail!("--duration must be a positive number of seconds, not {d}");
        }
        o.seconds = *d;
    }
    if let Some(p) = poll_ms {
        if !(p.is_finite() && *p >= 10.0) {
            anyhow::bail!("--poll-ms must be at least 10, not {p}");
        }
        o.poll_seconds = p / 1e3;
    }
    o.latency_ms = *latency_ms;
    o.sequential = *sequential;
    o.period_frames = *period;
    Ok(drift::render::render(&drift::run(ctx, &o)?))
}
