//! Load for `stress`: CPU hogs on every core, a disk writer that fsyncs, and memory
//! churn — either stress-ng (when installed) or a built-in equivalent that runs as a
//! child process (`quaver-bench stressor …`, a hidden mode), so that it can be stopped
//! by PID and never shares an allocator or a scheduler slot with the measuring client.

use crate::tools::exec::{describe, stop_child, which};
use crate::tools::rng::Rng;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which stressor to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StressorKind {
    /// stress-ng if installed, else the built-in one.
    Auto,
    /// The built-in stressor.
    Builtin,
    /// stress-ng.
    StressNg,
    /// No load (a baseline).
    None,
}

/// How much load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StressorConfig {
    /// CPU hog threads (one per core by default).
    pub cpu: usize,
    /// A disk writer that fsyncs every MiB.
    pub io: bool,
    /// Memory churn: MiB allocated, touched and freed in a loop (0: none).
    pub vm_mb: usize,
}

impl StressorConfig {
    /// One CPU hog per core, one disk writer, 64 MiB of memory churn.
    pub fn default_for(cores: usize) -> StressorConfig {
        StressorConfig {
            cpu: cores.max(1),
            io: true,
            vm_mb: 64,
        }
    }
}

/// A running stressor process.
pub struct Stressor {
    child: Child,
    /// The exact command.
    pub command: String,
    /// "stress-ng" or "built-in".
    pub name: &'static str,
    _dir: tempfile::TempDir,
}

impl Stressor {
    /// Stops it by PID (SIGTERM, then SIGKILL).
    pub fn stop(mut self) {
        stop_child(&mut self.child, Duration::from_secs(5));
    }
}

/// Resolves `Auto`.
pub fn resolve(kind: StressorKind) -> StressorKind {
    match kind {
        StressorKind::Auto if which("stress-ng").is_some() => StressorKind::StressNg,
        StressorKind::Auto => StressorKind::Builtin,
        k => k,
    }
}

/// Starts the stressor for at most `duration` (it also ends by itself then).
/// `self_exe` is the quaver-bench binary (for the built-in stressor).
pub fn start(
    kind: StressorKind,
    cfg: StressorConfig,
    duration: Duration,
    seed: u64,
    self_exe: &Path,
) -> Result<Option<Stressor>> {
    let dir = crate::tools::exec::tempdir("quaver-bench-stress-")?;
    let secs = duration.as_secs().max(1);
    let (mut cmd, name) = match resolve(kind) {
        StressorKind::None => return Ok(None),
        StressorKind::StressNg => {
            let mut c = Command::new("stress-ng");
            c.args(["--cpu", &cfg.cpu.to_string()]);
            if cfg.io {
                c.args(["--hdd", "1", "--hdd-bytes", "64M", "--hdd-opts", "fsync"]);
            }
            if cfg.vm_mb > 0 {
                c.args(["--vm", "1", "--vm-bytes", &format!("{}M", cfg.vm_mb)]);
            }
            c.args(["--timeout", &format!("{secs}s"), "--temp-path"])
                .arg(dir.path());
            (c, "stress-ng")
        }
        _ => {
            let mut c = Command::new(self_exe);
            c.args(["stressor", "--cpu", &cfg.cpu.to_string()]);
            if cfg.io {
                c.arg("--io-dir").arg(dir.path());
            }
            c.args([
                "--vm-mb",
                &cfg.vm_mb.to_string(),
                "--duration",
                &secs.to_string(),
                "--seed",
                &seed.to_string(),
            ]);
            (c, "built-in")
        }
    };
    let command = describe(&cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {command}"))?;
    Ok(Some(Stressor {
        child,
        command,
        name,
        _dir: dir,
    }))
}

/// Operations the built-in stressor completed, by kind.
#[derive(Debug, Default, Serialize)]
pub struct Ops {
    /// Millions of CPU-hog iterations.
    pub cpu_mops: u64,
    /// MiB written and fsynced.
    pub io_mib: u64,
    /// Memory churn rounds.
    pub vm_rounds: u64,
}

/// The built-in stressor's body (the hidden `stressor` mode): runs until `duration`
/// has passed (or SIGTERM), then prints its operation counts as JSON.
pub fn builtin_main(
    cfg: StressorConfig,
    io_dir: Option<PathBuf>,
    duration: Duration,
    seed: u64,
) -> Result<Ops> {
    let deadline = Instant::now() + duration;
    let done = AtomicBool::new(false);
    let cpu_mops = AtomicU64::new(0);
    let io_mib = AtomicU64::new(0);
    let vm_rounds = AtomicU64::new(0);
    let over = || done.load(Ordering::Relaxed) || Instant::now() >= deadline;
    std::thread::scope(|s| -> Result<()> {
        for i in 0..cfg.cpu {
            let (over, cpu_mops) = (&over, &cpu_mops);
            s.spawn(move || {
                let mut x = 1.0f64 + i as f64;
                while !over() {
                    for _ in 0..1_000_000 {
                        x = (x * 1.000_000_1 + 0.5).sqrt() + 1.0;
                    }
                    std::hint::black_box(x);
                    cpu_mops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        if cfg.vm_mb > 0 {
            let (over, vm_rounds) = (&over, &vm_rounds);
            s.spawn(move || {
                let mut rng = Rng::new(seed);
                while !over() {
                    let mut v = vec![0u8; cfg.vm_mb << 20];
                    let b = rng.next_u64() as u8;
                    for page in v.chunks_mut(4096) {
                        page[0] = b;
                    }
                    std::hint::black_box(&v);
                    drop(v);
                    vm_rounds.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let io = if let Some(dir) = &io_dir {
            let (over, io_mib) = (&over, &io_mib);
            let path = dir.join("quaver-bench-stress.bin");
            Some(s.spawn(move || -> Result<()> {
                let mut rng = Rng::new(seed ^ 0x10);
                let block: Vec<u8> = (0..256 * 1024).map(|_| rng.next_u64() as u8).collect();
                let mut f = std::fs::File::create(&path)?;
                let mut written = 0u64;
                while !over() {
                    for _ in 0..4 {
                        f.write_all(&block)?;
                    }
                    f.sync_data()?;
                    written += 1;
                    io_mib.fetch_add(1, Ordering::Relaxed);
                    if written.is_multiple_of(64) {
                        f.set_len(0)?;
                        f.rewind()?;
                    }
                }
                drop(f);
                let _ = std::fs::remove_file(&path);
                Ok(())
            }))
        } else {
            None
        };
        while !over() {
            std::thread::sleep(Duration::from_millis(20));
        }
        done.store(true, Ordering::Relaxed);
        if let Some(h) = io {
            h.join()
                .map_err(|_| anyhow::anyhow!("io thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(Ops {
        cpu_mops: cpu_mops.into_inner(),
        io_mib: io_mib.into_inner(),
        vm_rounds: vm_rounds.into_inner(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_stressor_does_every_kind_of_work_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = Instant::now();
        let ops = builtin_main(
            StressorConfig {
                cpu: 1,
                io: true,
                vm_mb: 4,
            },
            Some(dir.path().to_path_buf()),
            Duration::from_millis(300),
            1,
        )
        .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10));
        assert!(ops.io_mib >= 1 && ops.vm_rounds >= 1, "{ops:?}");
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "the disk writer removes its file"
        );
    }

    #[test]
    fn none_starts_nothing() {
        let s = start(
            StressorKind::None,
            StressorConfig::default_for(1),
            Duration::from_secs(1),
            0,
            Path::new("/nonexistent"),
        )
        .unwrap();
        assert!(s.is_none());
        assert_eq!(resolve(StressorKind::Builtin), StressorKind::Builtin);
    }
}
