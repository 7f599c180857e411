//! Running other programs with a time bound, and stopping the ones we started by PID.

use anyhow::{Context, Result, bail};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a bounded run produced.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Exit status (None if we had to kill it).
    pub status: Option<ExitStatus>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// True if it ran past its bound and was killed.
    pub timed_out: bool,
}

impl Captured {
    /// True if it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }
}

/// Runs `cmd` to completion, killing it (by PID) if it takes longer than `limit`.
/// Output is read by two threads while it runs, so a chatty program cannot block on a
/// full pipe.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<Captured> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", describe(cmd)))?;
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());
    let (status, timed_out) = wait_bounded(&mut child, limit)?;
    Ok(Captured {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
    })
}

fn reader<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut s);
        }
        String::from_utf8_lossy(&s).into_owned()
    })
}

/// Waits for `child` up to `limit`; past it, SIGKILLs it by PID and reaps it.
/// Returns the exit status (None if killed) and whether it timed out.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Result<(Option<ExitStatus>, bool)> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok((Some(st), false));
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok((None, true));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends `sig` to a process we started.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain syscall on a PID we own (a child we have not reaped yet).
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Stops a child we started: SIGTERM, then SIGKILL after `grace`; always reaps it.
/// Returns its exit status, or None if it had to be killed.
pub fn stop_child(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    if let Ok(Some(st)) = child.try_wait() {
        return Some(st);
    }
    signal(child.id(), libc::SIGTERM);
    match wait_bounded(child, grace) {
        Ok((st, _)) => st,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// How long the servers and clients get to stop after the bench is told to stop.
const CHILD_GRACE: Duration = Duration::from_secs(5);

/// Makes SIGTERM, SIGINT and SIGHUP stop every process this one started (SIGTERM,
/// SIGKILL after a grace time) and remove its temporary directories before exiting with
/// 128 + the signal: otherwise a bench stopped mid-run leaves its quaverd, PulseAudio
/// and PipeWire running and their runtime directories behind, since both are normally
/// cleaned up only by the guards' `Drop`. Call first thing in `main`.
pub fn stop_children_on_signal() -> std::io::Result<()> {
    quaver_rt::signals::block_stop_signals();
    std::thread::Builder::new()
        .name("bench-signals".into())
        .spawn(|| {
            let sig = quaver_rt::signals::wait_for_stop_signal();
            let mut left = crate::tools::procfs::children_of(std::process::id());
            eprintln!(
                "quaver-bench: stopping (signal {sig}); stopping the {} process(es) it started",
                left.len()
            );
            for &pid in &left {
                signal(pid, libc::SIGTERM);
            }
            let t0 = Instant::now();
            while !left.is_empty() && t0.elapsed() < CHILD_GRACE {
                left.retain(|&pid| !reaped(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            for &pid in &left {
                eprintln!("quaver-bench: process {pid} ignored SIGTERM; killing it");
                signal(pid, libc::SIGKILL);
                // SAFETY: waitpid on a child PID with a null status pointer.
                unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) };
            }
            for dir in TEMP_DIRS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                let _ = std::fs::remove_dir_all(dir);
            }
            std::process::exit(128 + sig);
        })?;
    Ok(())
}

/// The temporary directories this run made ([`tempdir`]), removed by the stop-signal
/// thread: the guards that normally remove them never run when a signal ends the run.
static TEMP_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// A temporary directory named `prefix…`, removed when dropped, or by
/// [`stop_children_on_signal`]'s thread if a signal ends the run first.
pub fn tempdir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let mut dirs = TEMP_DIRS.lock().unwrap_or_else(|p| p.into_inner());
    // Those already removed by their guards need not be remembered.
    dirs.retain(|d| d.exists());
    dirs.push(dir.path().to_path_buf());
    Ok(dir)
}

/// True once `pid` (a child) has exited: reaped here, or already reaped by the thread
/// that waits for it (then `waitpid` fails with ECHILD).
fn reaped(pid: u32) -> bool {
    // SAFETY: waitpid on a child PID with a null status pointer; WNOHANG never blocks.
    unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) != 0 }
}

/// `cmd` as a shell-like line (program and arguments, with the environment variables
/// it sets in front), for the report's list of exact commands.
pub fn describe(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            v.map(|v| format!("{}={}", k.to_string_lossy(), quote(&v.to_string_lossy())))
        })
        .collect();
    parts.push(quote(&cmd.get_program().to_string_lossy()));
    parts.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    parts.join(" ")
}

/// Quotes a word for a POSIX shell when it needs it.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Finds `name` on `$PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds quaverd: `explicit` if given, else next to this executable (or one directory
/// up, where cargo puts binaries when this is a test), else on `$PATH`.
pub fn find_quaverd(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if is_executable(p) {
            return Ok(p.to_path_buf());
        }
        bail!("--quaverd {}: not an executable file", p.display());
    }
    if let Ok(me) = std::env::current_exe() {
        for dir in me.ancestors().skip(1).take(2) {
            let p = dir.join("quaverd");
            if is_executable(&p) {
                return Ok(p);
            }
        }
    }
    which("quaverd").ok_or_else(|| {
        anyhow::anyhow!(
            "quaverd not found next to quaver-bench or on PATH; build it with \
             `cargo build --release -p quaver-daemon` or pass --quaverd PATH"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_listed_under_its_parent() {
        let mut c = Command::new("sleep").arg("30").spawn().unwrap();
        let kids = crate::tools::procfs::children_of(std::process::id());
        let _ = stop_child(&mut c, Duration::from_secs(5));
        assert!(kids.contains(&c.id()), "{} not in {kids:?}", c.id());
    }

    #[test]
    fn bounded_runs_capture_and_kill() {
        let c = run_bounded(
            Command::new("sh").args(["-c", "echo out; echo err >&2"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(c.success());
        assert_eq!(c.stdout, "out\n");
        assert_eq!(c.stderr, "err\n");
        let t0 = Instant::now();
        let c = run_bounded(Command::new("sleep").arg("10"), Duration::from_millis(100)).unwrap();
        assert!(c.timed_out && !c.success());
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn big_output_does_not_block() {
        let c = run_bounded(
            Command::new("sh").args(["-c", "yes 0123456789 | head -c 1000000"]),
            Duration::from_secs(20),
        )
        .unwrap();
        assert!(c.success());
        assert_eq!(c.stdout.len(), 1_000_000);
    }

    #[test]
    fn stop_child_terminates() {
        let mut ch = Command::new("sleep").arg("30").spawn().unwrap();
        let st = stop_child(&mut ch, Duration::from_secs(5));
        assert!(st.is_some(), "sleep dies of SIGTERM within the grace time");
    }

    #[test]
    fn describes_commands() {
        let mut c = Command::new("quaverd");
        c.env("XDG_RUNTIME_DIR", "/tmp/x y")
            .args(["--device", "sim:period=256", "it's"]);
        assert_eq!(
            describe(&c),
            "XDG_RUNTIME_DIR='/tmp/x y' quaverd --device sim:period=256 'it'\\''s'"
        );
        assert!(which("sh").is_some());
        assert!(which("no-such-program-here").is_none());
    }
}
