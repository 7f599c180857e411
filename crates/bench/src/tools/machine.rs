//! The machine a benchmark ran on, and the versions of every program it used or
//! compares against. Missing programs are reported as "not installed", never guessed.

use crate::tools::exec::{run_bounded, which};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What a report says about a program that is not on this machine.
pub const NOT_INSTALLED: &str = "not installed";

/// The machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model (`model name` in /proc/cpuinfo).
    pub cpu_model: String,
    /// Logical CPUs online.
    pub cores: usize,
    /// `uname`: system, release, version, machine.
    pub kernel: String,
    /// cpufreq governor of cpu0, or "none" where the kernel exposes no cpufreq.
    pub governor: String,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Distribution (`PRETTY_NAME` in /etc/os-release), if known.
    pub os: String,
}

impl Machine {
    /// Reads it from /proc, /sys and uname.
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        Machine {
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            cores: online_cpus(&cpuinfo),
            kernel: uname(),
            governor: governor(Path::new("/sys/devices/system/cpu/cpu0/cpufreq")),
            memory_mib: mem_total_kb(&meminfo).unwrap_or(0) / 1024,
            os: os_name(&os).unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// The first `model name` of /proc/cpuinfo (x86), else `Hardware`/`cpu model` lines
/// other architectures use.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Hardware", "cpu model", "Model"]
        .iter()
        .find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key && !v.trim().is_empty()).then(|| v.trim().to_string())
            })
        })
}

fn online_cpus(cpuinfo: &str) -> usize {
    let n = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    if n > 0 {
        n
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

fn mem_total_kb(meminfo: &str) -> Option<u64> {
    let l = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    l["MemTotal:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn os_name(os_release: &str) -> Option<String> {
    let l = os_release.lines().find(|l| l.starts_with("PRETTY_NAME="))?;
    Some(l["PRETTY_NAME=".len()..].trim_matches('"').to_string())
}

/// The cpufreq governor in `cpufreq_dir`, or "none" if the directory does not exist.
pub fn governor(cpufreq_dir: &Path) -> String {
    if !cpufreq_dir.exists() {
        return "none".into();
    }
    std::fs::read_to_string(cpufreq_dir.join("scaling_governor"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown (cpufreq without scaling_governor)".into())
}

fn uname() -> String {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let f = |b: &[libc::c_char]| {
        // SAFETY: uname NUL-terminates every field within its array.
        unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    format!(
        "{} {} {} {}",
        f(&u.sysname),
        f(&u.release),
        f(&u.version),
        f(&u.machine)
    )
}

/// Programs whose versions every report records: the peers and the load tools.
pub const TOOLS: [(&str, &[&str]); 8] = [
    ("pulseaudio", &["--version"]),
    ("pipewire", &["--version"]),
    ("pipewire-pulse", &["--version"]),
    ("wireplumber", &["--version"]),
    ("jackd", &["--version"]),
    ("cyclictest", &["--help"]),
    ("stress-ng", &["--version"]),
    ("pactl", &["--version"]),
];

/// The version line(s) `program ARGS` prints, or [`NOT_INSTALLED`].
pub fn tool_version(program: &str, args: &[&str]) -> String {
    let Some(path) = which(program) else {
        return NOT_INSTALLED.into();
    };
    version_of(&path, args)
        .unwrap_or_else(|| format!("installed ({}), version unknown", path.display()))
}

/// Runs `path ARGS` (bounded) and extracts a version from what it prints.
pub fn version_of(path: &Path, args: &[&str]) -> Option<String> {
    let c = run_bounded(Command::new(path).args(args), Duration::from_secs(5)).ok()?;
    let text = format!("{}\n{}", c.stdout, c.stderr);
    version_line(&text)
}

/// The interesting lines of a `--version` output: those of its first three non-empty
/// lines that hold a digit, joined with "; " (cyclictest's `--help` puts
/// "cyclictest V 2.40" first and usage after it).
pub fn version_line(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(3)
        .filter(|l| l.chars().any(|c| c.is_ascii_digit()))
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Versions of every tool in [`TOOLS`].
pub fn tool_versions() -> BTreeMap<String, String> {
    TOOLS
        .iter()
        .map(|(p, a)| (p.to_string(), tool_version(p, a)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_fields() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7763\nprocessor\t: 1\nmodel name\t: AMD EPYC 7763\n";
        assert_eq!(cpu_model(x86).as_deref(), Some("AMD EPYC 7763"));
        assert_eq!(online_cpus(x86), 2);
        let arm = "processor\t: 0\nBogoMIPS\t: 108\nHardware\t: BCM2835\n";
        assert_eq!(cpu_model(arm).as_deref(), Some("BCM2835"));
        assert_eq!(cpu_model("flags: x\n"), None);
    }

    #[test]
    fn meminfo_and_os_release() {
        assert_eq!(
            mem_total_kb("MemTotal:       4028380 kB\nMemFree: 1 kB\n"),
            Some(4_028_380)
        );
        assert_eq!(
            os_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn governor_none_without_cpufreq() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(governor(&dir.path().join("cpufreq")), "none");
        std::fs::write(dir.path().join("scaling_governor"), "performance\n").unwrap();
        assert_eq!(governor(dir.path()), "performance");
    }

    #[test]
    fn version_lines() {
        assert_eq!(
            version_line("pulseaudio 16.1\n").as_deref(),
            Some("pulseaudio 16.1")
        );
        assert_eq!(
            version_line(
                "pipewire\nCompiled with libpipewire 0.3.65\nLinked with libpipewire 0.3.65\n"
            )
            .as_deref(),
            Some("Compiled with libpipewire 0.3.65; Linked with libpipewire 0.3.65")
        );
        assert_eq!(
            version_line(
                "cyclictest V 2.40\nUsage:\ncyclictest <options>\n\n-a [CPUSET] --affinity 1\n"
            )
            .as_deref(),
            Some("cyclictest V 2.40")
        );
        assert_eq!(version_line("no digits here"), None);
        assert_eq!(
            tool_version("no-such-tool-quaver", &["--version"]),
            NOT_INSTALLED
        );
    }

    #[test]
    fn probes_this_machine() {
        let m = Machine::probe();
        assert!(m.cores >= 1);
        assert!(m.kernel.starts_with("Linux"), "{}", m.kernel);
    }
}
