//! Child processes and bounded waits: signals by PID, outputs collected within a limit,
//! polling with a deadline.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Sends `sig` to `pid`, a process the test started.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: a plain syscall on a PID we started.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Kills a child we started and reaps it.
pub fn kill(mut child: Child) -> Output {
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// Waits for a child with a time bound, killing it if it overruns.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "command did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `f` until it returns true or `limit` passes; returns whether it did.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A command's stdout as text.
pub fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts a command succeeded, showing both its streams if not; returns its stdout.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "command failed ({}): {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    text(o)
}

/// True if a program called `name` is on PATH.
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// A TCP port nothing listens on now on `host` (bound and released; the caller binds it
/// right after). None if `host` cannot be bound at all (e.g. no IPv6).
pub fn free_port(host: &str) -> Option<u16> {
    let l = std::net::TcpListener::bind((host, 0)).ok()?;
    Some(l.local_addr().ok()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn waits_are_bounded() {
        let t0 = Instant::now();
        assert!(!wait_until(Duration::from_millis(100), || false));
        assert!(t0.elapsed() < Duration::from_secs(5));
        let child = Command::new("sleep")
            .arg("30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let overran = std::panic::catch_unwind(|| wait_output(child, Duration::from_millis(100)));
        assert!(overran.is_err());
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn ok_shows_what_failed() {
        let out = Command::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        let failed = std::panic::catch_unwind(|| ok(&out));
        let msg = *failed.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("out") && msg.contains("err"), "{msg}");
    }
}
