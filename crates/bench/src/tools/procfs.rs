//! What `/proc` says about a process we started: CPU time (`stat`, and each thread's
//! `schedstat` to the nanosecond), context switches of every thread (`task/*/status`)
//! and memory (`smaps_rollup`).
//!
//! Parsers take the file's text so they can be tested on fixed inputs; the `read_*`
//! functions do the I/O.

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The fields of `/proc/PID/stat` (or `task/TID/stat`) the benchmarks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// User-mode CPU time, clock ticks.
    pub utime: u64,
    /// Kernel-mode CPU time, clock ticks.
    pub stime: u64,
    /// Number of threads.
    pub num_threads: u64,
}

/// Field `n` (1-based, as proc(5) numbers them) of a `/proc/PID/stat` line. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses itself, so
/// fields are counted after its *last* `)`.
fn stat_field(text: &str, n: usize) -> Result<u64> {
    let close = text
        .rfind(')')
        .ok_or_else(|| anyhow!("no ')' in stat line"))?;
    // After ") ": field 3 (state) is index 0, so field N is index N − 3.
    text[close + 1..]
        .split_whitespace()
        .nth(n - 3)
        .ok_or_else(|| anyhow!("stat line has no field {n}"))?
        .parse::<u64>()
        .map_err(|e| anyhow!("stat field {n}: {e}"))
}

/// Parses `/proc/PID/stat`.
pub fn parse_stat(text: &str) -> Result<Stat> {
    let field = |n: usize| stat_field(text, n);
    Ok(Stat {
        utime: field(14)?,
        stime: field(15)?,
        num_threads: field(20)?,
    })
}

/// The parent PID in a `/proc/PID/stat` line (field 4).
pub fn parse_parent(text: &str) -> Result<u32> {
    Ok(stat_field(text, 4)? as u32)
}

/// The processes whose parent is `parent`, from /proc/PID/stat.
pub fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| parse_parent(&s).ok())
                == Some(parent)
        })
        .collect()
}

/// Context switches from a `status` file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtxSwitches {
    /// The thread blocked (slept, waited): roughly its wakeups.
    pub voluntary: u64,
    /// The thread was preempted.
    pub nonvoluntary: u64,
}

impl CtxSwitches {
    /// Both kinds together.
    pub fn total(&self) -> u64 {
        self.voluntary + self.nonvoluntary
    }
}

/// Parses the `voluntary_ctxt_switches`/`nonvoluntary_ctxt_switches` lines of a
/// `status` file.
pub fn parse_ctx_switches(text: &str) -> Result<CtxSwitches> {
    let mut v = None;
    let mut n = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("voluntary_ctxt_switches:") {
            v = Some(rest.trim().parse::<u64>()?);
        } else if let Some(rest) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
            n = Some(rest.trim().parse::<u64>()?);
        }
    }
    Ok(CtxSwitches {
        voluntary: v.ok_or_else(|| anyhow!("no voluntary_ctxt_switches line"))?,
        nonvoluntary: n.ok_or_else(|| anyhow!("no nonvoluntary_ctxt_switches line"))?,
    })
}

/// The first number of a `schedstat` file: time spent on a CPU, ns.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Memory of a process from `smaps_rollup`, in kB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Resident set size: every page mapped and present, shared ones in full.
    pub rss_kb: u64,
    /// Proportional set size: shared pages divided among the processes sharing them
    /// (a stream's shared-memory ring counts half for the server, half for the client).
    pub pss_kb: u64,
}

/// Parses `smaps_rollup` (the `Rss:` and `Pss:` lines).
pub fn parse_smaps_rollup(text: &str) -> Result<Memory> {
    let kb = |key: &str| -> Result<u64> {
        let line = text
            .lines()
            .find(|l| l.starts_with(key))
            .ok_or_else(|| anyhow!("no {key} line in smaps_rollup"))?;
        let v = line[key.len()..]
            .split_whitespace()
            .next()
            .ok_or_else(|| anyhow!("empty {key} line"))?;
        Ok(v.parse::<u64>()?)
    };
    Ok(Memory {
        rss_kb: kb("Rss:")?,
        pss_kb: kb("Pss:")?,
    })
}

/// Kernel clock ticks per second (the unit of `utime`/`stime`).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// The `steal` field of `/proc/stat`'s first line (all CPUs), in clock ticks.
pub fn parse_steal_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?;
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait irq softirq steal
    f.nth(7)?.parse().ok()
}

/// CPU time the hypervisor has given to other guests since boot (`/proc/stat`'s steal,
/// all CPUs), ms; `None` where it cannot be read.
pub fn steal_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_steal_ticks(&stat).map(|t| t as f64 * 1000.0 / clock_ticks_per_second() as f64)
}

/// One thread of a sampled process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSample {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`comm`), e.g. `quaver-rt`.
    pub name: String,
    /// utime + stime, ticks.
    pub cpu_ticks: u64,
    /// Time on a CPU from `schedstat`, ns (`None` where the kernel has no schedstat).
    #[serde(default)]
    pub run_ns: Option<u64>,
    /// Context switches.
    pub ctx: CtxSwitches,
}

/// A snapshot of a process: CPU time and context switches of every thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcSample {
    /// When it was taken, ns on CLOCK_MONOTONIC.
    pub at_ns: u64,
    /// Process CPU time (all threads, including exited ones), ticks.
    pub cpu_ticks: u64,
    /// Threads alive at the time.
    pub threads: Vec<ThreadSample>,
}

impl ProcSample {
    /// Context switches summed over the live threads.
    pub fn ctx(&self) -> CtxSwitches {
        self.threads
            .iter()
            .fold(CtxSwitches::default(), |a, t| CtxSwitches {
                voluntary: a.voluntary + t.ctx.voluntary,
                nonvoluntary: a.nonvoluntary + t.ctx.nonvoluntary,
            })
    }
}

/// Reads `/proc/PID/stat` and every `task/TID/{stat,status,comm}`. Threads that exit
/// while we read are skipped.
pub fn sample(pid: u32) -> Result<ProcSample> {
    sample_in(Path::new("/proc"), pid)
}

/// [`sample`] with another proc root (for tests).
pub fn sample_in(proc_root: &Path, pid: u32) -> Result<ProcSample> {
    let at_ns = crate::tools::clock::monotonic_ns();
    let base = proc_root.join(pid.to_string());
    let stat = parse_stat(&read(&base.join("stat"))?)?;
    let mut threads = Vec::new();
    let tasks = base.join("task");
    let entries =
        std::fs::read_dir(&tasks).with_context(|| format!("listing {}", tasks.display()))?;
    for e in entries.flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let dir = e.path();
        let (Ok(st), Ok(status)) = (read(&dir.join("stat")), read(&dir.join("status"))) else {
            continue; // exited meanwhile
        };
        let name = read(&dir.join("comm"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let st = parse_stat(&st)?;
        threads.push(ThreadSample {
            tid,
            name,
            cpu_ticks: st.utime + st.stime,
            run_ns: read(&dir.join("schedstat"))
                .ok()
                .and_then(|t| parse_schedstat(&t)),
            ctx: parse_ctx_switches(&status)?,
        });
    }
    threads.sort_by_key(|t| t.tid);
    Ok(ProcSample {
        at_ns,
        cpu_ticks: stat.utime + stat.stime,
        threads,
    })
}

/// Reads `/proc/PID/smaps_rollup`.
pub fn memory(pid: u32) -> Result<Memory> {
    parse_smaps_rollup(&read(&PathBuf::from(format!("/proc/{pid}/smaps_rollup")))?)
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// What a process did between two samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcDelta {
    /// Wall time between the samples, s.
    pub wall_s: f64,
    /// CPU time used, s (all threads).
    pub cpu_s: f64,
    /// Whether `cpu_s` comes from the threads' `schedstat` (ns) rather than the
    /// process's clock ticks (10 ms each: 2 ticks ± 1 in a 5 s window of an idle
    /// server).
    #[serde(default)]
    pub cpu_exact: bool,
    /// Voluntary context switches of threads alive at both samples.
    pub voluntary: u64,
    /// Involuntary context switches of threads alive at both samples.
    pub nonvoluntary: u64,
    /// CPU seconds per thread name, for threads alive at both samples.
    pub cpu_s_by_thread: Vec<(String, f64)>,
}

impl ProcDelta {
    /// The difference `later − earlier`; `ticks_per_s` from [`clock_ticks_per_second`].
    ///
    /// CPU time is summed from the threads' `schedstat` when the same threads, all with
    /// one, are in both samples; a thread that came or went between them would take
    /// its time with it, so then the process's ticks are used (they keep the time of
    /// exited threads).
    pub fn between(earlier: &ProcSample, later: &ProcSample, ticks_per_s: u64) -> ProcDelta {
        let tps = ticks_per_s.max(1) as f64;
        let same_threads = earlier.threads.len() == later.threads.len()
            && later
                .threads
                .iter()
                .all(|t| earlier.threads.iter().any(|e| e.tid == t.tid));
        let exact = same_threads
            && earlier
                .threads
                .iter()
                .chain(&later.threads)
                .all(|t| t.run_ns.is_some());
        // Seconds of one thread between the samples, in the unit chosen above.
        let spent = |e: &ThreadSample, t: &ThreadSample| -> f64 {
            match (exact, e.run_ns, t.run_ns) {
                (true, Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e9,
                _ => t.cpu_ticks.saturating_sub(e.cpu_ticks) as f64 / tps,
            }
        };
        let mut voluntary = 0;
        let mut nonvoluntary = 0;
        let mut thread_s = 0.0;
        let mut by_name: std::collections::BTreeMap<String, f64> = Default::default();
        for t in &later.threads {
            if let Some(e) = earlier.threads.iter().find(|e| e.tid == t.tid) {
                voluntary += t.ctx.voluntary.saturating_sub(e.ctx.voluntary);
                nonvoluntary += t.ctx.nonvoluntary.saturating_sub(e.ctx.nonvoluntary);
                let s = spent(e, t);
                thread_s += s;
                *by_name.entry(t.name.clone()).or_default() += s;
            }
        }
        ProcDelta {
            wall_s: later.at_ns.saturating_sub(earlier.at_ns) as f64 / 1e9,
            cpu_s: if exact {
                thread_s
            } else {
                later.cpu_ticks.saturating_sub(earlier.cpu_ticks) as f64 / tps
            },
            cpu_exact: exact,
            voluntary,
            nonvoluntary,
            cpu_s_by_thread: by_name.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line() {
        let stat = "cpu  60709 0 22273 543862 1122 0 109 417 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_steal_ticks(stat), Some(417));
        assert_eq!(parse_steal_ticks("cpu  1 2 3\n"), None);
        assert_eq!(parse_steal_ticks("intr 1 2 3 4 5 6 7 8 9\n"), None);
    }

    const STAT: &str = "4242 (quaver (rt) d) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                        731 265 0 0 -2 0 7 0 987654 123456789 2345 18446744073709551615 \
                        1 1 0 0 0 0 0 0 0 0 0 0 17 1 21 1 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn stat_fields_after_a_tricky_comm() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(
            s,
            Stat {
                utime: 731,
                stime: 265,
                num_threads: 7
            }
        );
        assert!(parse_stat("garbage").is_err());
        assert_eq!(parse_parent("42 (a (b) c) S 17 42 42 0").unwrap(), 17);
        assert!(parse_parent("42 (x) R").is_err());
        assert!(parse_parent("garbage").is_err());
        assert!(parse_stat("1 (x) S 1").is_err());
    }

    #[test]
    fn ctx_switch_lines() {
        let status = "Name:\tquaverd\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t1500\n\
                      nonvoluntary_ctxt_switches:\t\t12\n";
        let c = parse_ctx_switches(status).unwrap();
        assert_eq!((c.voluntary, c.nonvoluntary, c.total()), (1500, 12, 1512));
        assert!(parse_ctx_switches("Name:\tx\n").is_err());
    }

    #[test]
    fn smaps_rollup_rss_and_pss() {
        let text = "5584aebe8000-7ffd390ae000 ---p 00000000 00:00 0   [rollup]\n\
                    Rss:                1672 kB\nPss:                 353 kB\n\
                    Pss_Dirty:           116 kB\nPss_Anon:            116 kB\n";
        let m = parse_smaps_rollup(text).unwrap();
        assert_eq!(
            m,
            Memory {
                rss_kb: 1672,
                pss_kb: 353
            }
        );
        assert!(parse_smaps_rollup("Rss: 1 kB\n").is_err());
    }

    #[test]
    fn samples_this_process_and_differences() {
        let pid = std::process::id();
        let a = sample(pid).unwrap();
        // Burn a little CPU and block a few times.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let b = sample(pid).unwrap();
        assert!(!a.threads.is_empty());
        assert!(b.cpu_ticks >= a.cpu_ticks);
        let d = ProcDelta::between(&a, &b, clock_ticks_per_second());
        assert!(d.wall_s > 0.0);
        assert!(
            d.voluntary >= 3,
            "three sleeps are three voluntary switches: {d:?}"
        );
        assert!(memory(pid).unwrap().rss_kb > 0);
    }

    #[test]
    fn sample_from_a_fake_proc_tree() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("77");
        std::fs::create_dir_all(p.join("task/77")).unwrap();
        std::fs::create_dir_all(p.join("task/78")).unwrap();
        std::fs::write(p.join("stat"), STAT).unwrap();
        for (t, v) in [("77", 10), ("78", 20)] {
            let d = p.join("task").join(t);
            std::fs::write(d.join("stat"), STAT).unwrap();
            std::fs::write(
                d.join("status"),
                format!("voluntary_ctxt_switches:\t{v}\nnonvoluntary_ctxt_switches:\t1\n"),
            )
            .unwrap();
            std::fs::write(d.join("comm"), format!("t{t}\n")).unwrap();
        }
        let s = sample_in(dir.path(), 77).unwrap();
        assert_eq!(s.cpu_ticks, 996);
        assert_eq!(s.threads.len(), 2);
        assert_eq!(s.threads[1].name, "t78");
        assert_eq!(s.ctx().voluntary, 30);
        assert_eq!(s.ctx().nonvoluntary, 2);
        // No schedstat files in this tree: CPU time only in ticks.
        assert!(s.threads.iter().all(|t| t.run_ns.is_none()));
    }

    #[test]
    fn schedstat_first_number() {
        assert_eq!(
            parse_schedstat("233086944 128261035 678\n"),
            Some(233_086_944)
        );
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
    }

    fn thread(tid: u32, ticks: u64, run_ns: Option<u64>) -> ThreadSample {
        ThreadSample {
            tid,
            name: format!("t{tid}"),
            cpu_ticks: ticks,
            run_ns,
            ctx: CtxSwitches::default(),
        }
    }

    fn proc_sample(at_s: u64, ticks: u64, threads: Vec<ThreadSample>) -> ProcSample {
        ProcSample {
            at_ns: at_s * 1_000_000_000,
            cpu_ticks: ticks,
            threads,
        }
    }

    #[test]
    fn cpu_time_in_nanoseconds_when_the_same_threads_have_schedstat() {
        // 2 ticks by the process's count, 23.5 ms by the threads' own clocks.
        let a = proc_sample(
            0,
            100,
            vec![thread(1, 60, Some(5_000_000)), thread(2, 40, Some(0))],
        );
        let b = proc_sample(
            5,
            102,
            vec![
                thread(1, 61, Some(25_000_000)),
                thread(2, 41, Some(3_500_000)),
            ],
        );
        let d = ProcDelta::between(&a, &b, 100);
        assert!(d.cpu_exact);
        assert!((d.cpu_s - 0.0235).abs() < 1e-12, "{d:?}");
        assert!((d.cpu_s_by_thread[0].1 - 0.020).abs() < 1e-12);
        assert!((d.cpu_s_by_thread[1].1 - 0.0035).abs() < 1e-12);
    }

    #[test]
    fn cpu_time_in_ticks_when_a_thread_came_went_or_has_no_schedstat() {
        let a = proc_sample(0, 100, vec![thread(1, 60, Some(0)), thread(2, 40, Some(0))]);
        // Thread 2 exited with its time; thread 3 was born.
        let b = proc_sample(5, 150, vec![thread(1, 70, Some(1)), thread(3, 5, Some(1))]);
        let d = ProcDelta::between(&a, &b, 100);
        assert!(!d.cpu_exact);
        assert!((d.cpu_s - 0.5).abs() < 1e-12);
        assert_eq!(d.cpu_s_by_thread, vec![("t1".to_string(), 0.1)]);
        // The same threads, one without schedstat.
        let b = proc_sample(5, 130, vec![thread(1, 80, None), thread(2, 50, Some(1))]);
        let d = ProcDelta::between(&a, &b, 100);
        assert!(!d.cpu_exact);
        assert!((d.cpu_s - 0.3).abs() < 1e-12);
    }
}
