//! The probe: before a plugin is loaded into quaverd, a child process
//! (`quaverd --probe-plugin JSON`) loads it the same way, instantiates it for the
//! sink's channels and rate, activates it, runs a few blocks of a tone through it and
//! frees it. A plugin that crashes or hangs there (in its constructor, its first run
//! or its destructor) kills or stalls the child, and quaverd refuses it with the
//! signal's name instead of dying with it.

use super::host::PluginFilter;
use super::types::{PluginError, PluginSpec};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the child may take: lilv reading every installed bundle is the slow part.
pub const PROBE_SECONDS: u64 = 10;
/// What the child's error output is cut to.
const MAX_STDERR: u64 = 4096;

/// What the child is asked to build.
#[derive(Serialize, Deserialize)]
struct Request {
    spec: PluginSpec,
    channels: usize,
    rate: u32,
}

/// Builds and runs `spec` in a child `exe --probe-plugin …`; Ok when the child did so
/// and exited 0 within [`PROBE_SECONDS`].
pub fn probe(
    exe: &std::path::Path,
    spec: &PluginSpec,
    channels: usize,
    rate: u32,
) -> Result<(), PluginError> {
    probe_within(
        exe,
        spec,
        channels,
        rate,
        Duration::from_secs(PROBE_SECONDS),
    )
}

/// [`probe`] with its own time limit.
pub fn probe_within(
    exe: &std::path::Path,
    spec: &PluginSpec,
    channels: usize,
    rate: u32,
    limit: Duration,
) -> Result<(), PluginError> {
    let what = spec.what();
    let fail = |why: String| PluginError::Probe {
        what: what.clone(),
        why,
    };
    let json = serde_json::to_string(&Request {
        spec: spec.clone(),
        channels,
        rate,
    })
    .map_err(|e| fail(e.to_string()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--probe-plugin")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe. No core file for a plugin that crashes
    // (it is expected here, and a core dump of "quaverd" would mislead).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        })
    };
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot start {}: {e}", exe.display())))?;
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = (&mut err).take(MAX_STDERR).read_to_string(&mut s);
        // Drain the rest so the child never blocks on a full pipe.
        let _ = std::io::copy(&mut err, &mut std::io::sink());
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PluginError::Hung {
                    what,
                    secs: limit.as_secs_f64(),
                });
            }
            Err(e) => return Err(fail(format!("waiting for the probe: {e}"))),
        }
    };
    let stderr = reader.join().unwrap_or_default().trim().to_string();
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        return Err(PluginError::Crashed {
            what,
            signal: signal_name(sig),
            stderr: if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            },
        });
    }
    if status.success() {
        return Ok(());
    }
    Err(fail(if stderr.is_empty() {
        format!("the probe exited with {status} and said nothing")
    } else {
        stderr
    }))
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTRAP => "SIGTRAP",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// The child's side: builds the plugin, runs it on a few blocks of a tone, drops it.
/// Returns the exit code; an error is printed on stderr for the parent.
pub fn probe_main(json: &str) -> i32 {
    use quaver_dsp::filter::Filter;
    let req: Request = match serde_json::from_str(json) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bad probe request: {e}");
            return 2;
        }
    };
    let mut f = match req.spec.build_here(req.channels, req.rate) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let frames = 256;
    let mut buf = quaver_dsp::PlanarBuf::new(req.channels, frames);
    for block in 0..4 {
        for ch in 0..req.channels {
            for (n, s) in buf.channel_mut(ch).iter_mut().enumerate() {
                let t = (block * frames + n) as f32 / req.rate as f32;
                *s = 0.25 * (std::f32::consts::TAU * 440.0 * t).sin();
            }
        }
        f.process(&mut buf.view_mut(frames));
    }
    drop(f);
    0
}

impl PluginSpec {
    /// Builds and runs the filter in a probe child first (`quaverd` is `exe`), then,
    /// if the child lived, in this process.
    pub fn build_probed(
        &self,
        exe: &std::path::Path,
        channels: usize,
        rate: u32,
    ) -> Result<PluginFilter, PluginError> {
        probe(exe, self, channels, rate)?;
        let f = self.build_here(channels, rate)?;
        tracing::info!("{}: {}", self.what(), f.describe());
        Ok(f)
    }
}
