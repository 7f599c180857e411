//! A private jackd2 (dummy driver) and the xrun lines of its log.

use crate::tools::exec::{describe, run_bounded, stop_child, which};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a JACK server may take to come up.
pub const JACKD_START_TIMEOUT: Duration = Duration::from_secs(15);

/// jackd2, headless: `jackd -n NAME -R -P PRIO -d dummy -r RATE -p PERIOD`.
pub struct Jackd {
    child: Option<Child>,
    /// Server name (clients find it through `JACK_DEFAULT_SERVER`).
    pub name: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    /// The exact command.
    pub command: String,
}

impl Jackd {
    /// The command line.
    pub fn command(name: &str, prio: i32, rate: u32, period: usize) -> Command {
        let mut c = Command::new("jackd");
        c.env("JACK_NO_AUDIO_RESERVATION", "1").args([
            "-n",
            name,
            "-R",
            "-P",
            &prio.to_string(),
            "-d",
            "dummy",
            "-r",
            &rate.to_string(),
            "-p",
            &period.to_string(),
        ]);
        c
    }

    /// Starts it and waits (bounded) until `jack_lsp` (or, without it, the server's
    /// log) says it runs.
    pub fn start(prio: i32, rate: u32, period: usize) -> Result<Jackd> {
        if which("jackd").is_none() {
            bail!("jackd is not installed");
        }
        let dir = crate::tools::exec::tempdir("quaver-bench-jackd-")?;
        let name = format!("quaver-bench-{}-{period}", std::process::id());
        let mut cmd = Jackd::command(&name, prio, rate, period);
        let command = describe(&cmd);
        let log = dir.path().join("jackd.log");
        let f = std::fs::File::create(&log)?;
        let child = cmd
            .env_remove("JACK_DEFAULT_SERVER")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .context("starting jackd")?;
        let mut j = Jackd {
            child: Some(child),
            name,
            log,
            _dir: dir,
            command,
        };
        let t0 = Instant::now();
        loop {
            if let Some(st) = j.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                j.child = None;
                bail!("jackd exited at start ({st}): {}", j.log_text().trim());
            }
            if j.ready() {
                return Ok(j);
            }
            if t0.elapsed() > JACKD_START_TIMEOUT {
                let text = j.log_text();
                j.stop();
                bail!(
                    "jackd did not come up within {JACKD_START_TIMEOUT:?}: {}",
                    text.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ready(&self) -> bool {
        if which("jack_lsp").is_some() {
            let mut c = Command::new("jack_lsp");
            c.env("JACK_DEFAULT_SERVER", &self.name)
                .env("JACK_NO_START_SERVER", "1")
                .env_remove("LD_LIBRARY_PATH");
            return run_bounded(&mut c, Duration::from_secs(5))
                .is_ok_and(|o| o.success() && o.stdout.contains("system:playback_1"));
        }
        self.log_text().contains("dummy")
    }

    /// Everything it printed.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Bytes of log so far (to cut out a window).
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// Stops it by PID.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop_child(&mut c, Duration::from_secs(5));
        }
    }
}

impl Drop for Jackd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// xruns jackd2 logged: lines naming an xrun or a client that was not finished.
pub fn jackd_xrun_lines(log: &str) -> u64 {
    log.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("xrun") || l.contains("not finished")
        })
        .count() as u64
}

/// Of [`jackd_xrun_lines`], those of its timed (dummy) driver waking later than a whole
/// period (`JackTimedDriver::Process XRun = … usec`): the server's own lateness, not a
/// client that was not finished.
pub fn jackd_driver_xrun_lines(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("JackTimedDriver::Process XRun"))
        .count() as u64
}
