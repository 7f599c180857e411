//! cyclictest (rt-tests): the wakeup latency any real-time thread can reach on this
//! machine under a given load, and a built-in stand-in for machines without it.

use crate::report::stats::{Log2Hist, Summary};
use crate::tools::exec::{describe, run_bounded, which};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Histogram range asked of cyclictest, µs (latencies beyond count as overflows).
pub const HIST_US: u64 = 10_000;

/// What a cyclictest run reported (one thread).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CyclictestResult {
    /// Smallest latency, µs.
    pub min_us: u64,
    /// Mean latency, µs.
    pub avg_us: u64,
    /// Largest latency, µs.
    pub max_us: u64,
    /// Samples.
    pub samples: u64,
    /// Samples beyond the histogram range.
    pub overflows: u64,
    /// Histogram (1 µs bins) as (µs, count), non-empty bins only.
    pub bins: Vec<(u64, u64)>,
}

impl CyclictestResult {
    /// Nearest-rank percentile from the histogram, µs (overflows count as the max).
    pub fn percentile_us(&self, p: f64) -> Option<u64> {
        let total: u64 = self.bins.iter().map(|b| b.1).sum::<u64>() + self.overflows;
        if total == 0 {
            return None;
        }
        let rank = (((p / 100.0) * total as f64).ceil() as u64).max(1);
        let mut acc = 0;
        for &(us, c) in &self.bins {
            acc += c;
            if acc >= rank {
                return Some(us);
            }
        }
        Some(self.max_us)
    }

    /// The histogram in quaverd's log2 ns layout (overflows at the max).
    pub fn log2(&self) -> Log2Hist {
        let mut h = Log2Hist::from_us_bins(&self.bins);
        if self.overflows > 0 {
            h.add_n(self.max_us * 1000, self.overflows);
        }
        h
    }
}

/// The command: `cyclictest -m -p 80 -i INTERVAL -D SECONDSs -q -h 10000`
/// (`-h` adds the histogram the percentiles come from).
pub fn command(seconds: u64, interval_us: u64) -> Command {
    let mut c = Command::new("cyclictest");
    c.args([
        "-m",
        "-p",
        "80",
        "-i",
        &interval_us.to_string(),
        "-D",
        &format!("{seconds}s"),
        "-q",
        "-h",
        &HIST_US.to_string(),
    ]);
    c
}

/// Runs cyclictest (bounded) if installed: `Ok(None)` if it is not, and the command
/// line run otherwise.
pub fn run(seconds: u64, interval_us: u64) -> Result<Option<(String, CyclictestResult)>> {
    if which("cyclictest").is_none() {
        return Ok(None);
    }
    let mut cmd = command(seconds, interval_us);
    let line = describe(&cmd);
    let out = run_bounded(&mut cmd, Duration::from_secs(seconds + 15))?;
    if !out.success() {
        bail!(
            "{line} failed ({}): {}",
            out.status.map_or("timed out".into(), |s| s.to_string()),
            out.stderr.trim()
        );
    }
    Ok(Some((line, parse(&out.stdout)?)))
}

/// Parses cyclictest's output: the `-h` histogram with its `# Min/Avg/Max Latencies`
/// footer, or (without `-h`) the `T: 0 (...) ... Min: Act: Avg: Max:` summary line.
pub fn parse(text: &str) -> Result<CyclictestResult> {
    let mut bins = Vec::new();
    let mut min = None;
    let mut avg = None;
    let mut max = None;
    let mut overflows = 0;
    let mut samples = None;
    let footer = |l: &str, key: &str| -> Option<u64> {
        l.strip_prefix(key)?.split_whitespace().next()?.parse().ok()
    };
    for l in text.lines() {
        let l = l.trim();
        if let Some(v) = footer(l, "# Min Latencies:") {
            min = Some(v);
        } else if let Some(v) = footer(l, "# Avg Latencies:") {
            avg = Some(v);
        } else if let Some(v) = footer(l, "# Max Latencies:") {
            max = Some(v);
        } else if let Some(v) = footer(l, "# Histogram Overflows:") {
            overflows = v;
        } else if let Some(v) = footer(l, "# Total:") {
            samples = Some(v);
        } else if l.starts_with("T:") {
            let field = |key: &str| -> Option<u64> {
                let i = l.find(key)? + key.len();
                l[i..].split_whitespace().next()?.parse().ok()
            };
            min = min.or(field("Min:"));
            avg = avg.or(field("Avg:"));
            max = max.or(field("Max:"));
            samples = samples.or(field("C:"));
        } else if !l.starts_with('#') {
            let mut it = l.split_whitespace();
            if let (Some(a), Some(b), None) = (it.next(), it.next(), it.next())
                && let (Ok(us), Ok(c)) = (a.parse::<u64>(), b.parse::<u64>())
                && c > 0
            {
                bins.push((us, c));
            }
        }
    }
    let (Some(min_us), Some(avg_us), Some(max_us)) = (min, avg, max) else {
        bail!("no Min/Avg/Max latencies in cyclictest's output");
    };
    let in_bins: u64 = bins.iter().map(|b| b.1).sum();
    Ok(CyclictestResult {
        min_us,
        avg_us,
        max_us,
        samples: samples.unwrap_or(in_bins + overflows),
        overflows,
        bins,
    })
}

/// The built-in stand-in when rt-tests is missing: a thread at SCHED_FIFO `priority`
/// (if permitted) sleeps to absolute deadlines every `interval` for `duration` and
/// records how late it wakes, ns. Returns the lateness samples and whether it ran
/// SCHED_FIFO.
pub fn probe(duration: Duration, interval: Duration, priority: i32) -> (Vec<u64>, bool) {
    let n = (duration.as_nanos() / interval.as_nanos().max(1)) as usize;
    std::thread::scope(|s| {
        s.spawn(|| probe_loop(interval, priority, n, |done, _, _| done < n))
            .join()
            .unwrap_or_default()
    })
}

/// What [`probe_until`] saw.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// How late each wakeup was, ns.
    pub late: Vec<u64>,
    /// The wakeups at least `stall_ns` late: (deadline, lateness), CLOCK_MONOTONIC ns.
    pub stalls: Vec<(u64, u64)>,
    /// Whether the thread ran SCHED_FIFO.
    pub realtime: bool,
}

/// [`probe`] on the calling thread until `stop` is set (checked at every wakeup), for a
/// bystander that runs next to a measurement of unknown length; wakeups at least
/// `stall_ns` late are also kept with their deadlines.
pub fn probe_until(stop: &AtomicBool, interval: Duration, priority: i32, stall_ns: u64) -> Probe {
    let mut stalls = Vec::new();
    let (late, realtime) = probe_loop(interval, priority, 1024, |done, deadline, late| {
        if done > 0 && late >= stall_ns {
            stalls.push((deadline, late));
        }
        !stop.load(Ordering::Relaxed)
    });
    Probe {
        late,
        stalls,
        realtime,
    }
}

/// The probe's loop: sets the calling thread's priority, then sleeps to deadlines while
/// `more(wakeups so far, the last deadline, its lateness)`.
fn probe_loop(
    interval: Duration,
    priority: i32,
    capacity: usize,
    mut more: impl FnMut(usize, u64, u64) -> bool,
) -> (Vec<u64>, bool) {
    let rt = crate::tools::rt::set_fifo(priority);
    let mut late = Vec::with_capacity(capacity);
    let step = interval.as_nanos() as u64;
    let mut next = crate::tools::clock::monotonic_ns() + step;
    let mut last = (0, 0);
    while more(late.len(), last.0, last.1) {
        let ts = libc::timespec {
            tv_sec: (next / 1_000_000_000) as libc::time_t,
            tv_nsec: (next % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: valid timespec; absolute sleep on CLOCK_MONOTONIC.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            );
        }
        let now = crate::tools::clock::monotonic_ns();
        let l = now.saturating_sub(next);
        late.push(l);
        last = (next, l);
        next += step;
        if now > next {
            next = now + step; // do not run a burst of catch-up wakeups
        }
    }
    (late, rt)
}

/// Summary (µs) of the probe's samples.
pub fn probe_summary(late_ns: &[u64]) -> Option<Summary> {
    let us: Vec<f64> = late_ns.iter().map(|&n| n as f64 / 1000.0).collect();
    Summary::of(&us)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HIST: &str = "# /dev/cpu_dma_latency set to 0us\n# Histogram\n000000 000000\n\
                        000017 000000\n000018 000013\n000019 000128\n000020 000291\n\
                        000197 000001\n# Total: 000000433\n# Min Latencies: 00018\n\
                        # Avg Latencies: 00024\n# Max Latencies: 00197\n\
                        # Histogram Overflows: 00000\n# Histogram Overflow at cycle number:\n\
                        # Thread 0:\n";

    #[test]
    fn parses_the_histogram_form() {
        let r = parse(HIST).unwrap();
        assert_eq!((r.min_us, r.avg_us, r.max_us), (18, 24, 197));
        assert_eq!(r.samples, 433);
        assert_eq!(r.bins, vec![(18, 13), (19, 128), (20, 291), (197, 1)]);
        assert_eq!(r.percentile_us(50.0), Some(20));
        // 3% of 433 is rank 13: the last sample of the 18 µs bin.
        assert_eq!(r.percentile_us(3.0), Some(18));
        assert_eq!(r.percentile_us(3.1), Some(19));
        assert_eq!(r.percentile_us(100.0), Some(197));
        assert_eq!(r.log2().total(), 433);
    }

    #[test]
    fn parses_the_summary_line() {
        let text = "# /dev/cpu_dma_latency set to 0us\n\
                    T: 0 ( 6805) P:80 I:1000 C:   1991 Min:     13 Act:   32 Avg:   32 Max:    7233\n";
        let r = parse(text).unwrap();
        assert_eq!(
            (r.min_us, r.avg_us, r.max_us, r.samples),
            (13, 32, 7233, 1991)
        );
        assert!(r.bins.is_empty());
        assert!(parse("nothing useful").is_err());
    }

    #[test]
    fn overflows_count_at_the_maximum() {
        let r = CyclictestResult {
            min_us: 5,
            avg_us: 6,
            max_us: 20_000,
            samples: 4,
            overflows: 1,
            bins: vec![(5, 3)],
        };
        assert_eq!(r.percentile_us(75.0), Some(5));
        assert_eq!(r.percentile_us(99.0), Some(20_000));
        assert_eq!(r.log2().total(), 4);
    }

    #[test]
    fn command_line() {
        assert_eq!(
            describe(&command(20, 1000)),
            "cyclictest -m -p 80 -i 1000 -D 20s -q -h 10000"
        );
    }

    #[test]
    fn probe_records_every_wakeup() {
        let (late, _) = probe(Duration::from_millis(50), Duration::from_millis(5), 0);
        assert_eq!(late.len(), 10);
        assert!(probe_summary(&late).is_some());
    }
}
