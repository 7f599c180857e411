//! Starting the server under test and the JACK client processes a window runs.

use crate::Ctx;
use crate::modes::jack::client::{ChildLine, ClientRun, parse_line};
use crate::modes::jack::jackd::Jackd;
use crate::modes::jack::options::{CLIENT_OPEN_TIMEOUT, JackOptions, JackServer};
use crate::modes::jack::pipewire::PW_JACK_LIB;
use crate::tools::daemon::{Daemon, DaemonSpec};
use crate::tools::exec::{describe, wait_bounded, which};
use crate::tools::servers::Server;
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(super) enum Running {
    Quaverd(Box<Daemon>),
    Jackd(Jackd),
    Pipewire(Box<Server>),
}

impl Running {
    pub(super) fn stop(&mut self) {
        match self {
            Running::Quaverd(d) => {
                let _ = d.stop();
            }
            Running::Jackd(j) => j.stop(),
            Running::Pipewire(s) => s.stop(),
        }
    }
}

pub(super) fn find_next_to_me(me: &Path, name: &str) -> Option<PathBuf> {
    me.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .or_else(|| which(name))
}

/// The client's command for `server` (wrapper, environment, arguments).
pub(super) fn client_command(
    o: &JackOptions,
    server: &Running,
    period: usize,
    args: &[String],
) -> Result<Command> {
    let mut cmd = match server {
        Running::Quaverd(d) => {
            let wrapper = find_next_to_me(&o.self_exe, "quaver-jack").ok_or_else(|| {
                anyhow!(
                    "quaver-jack not found next to quaver-bench or on PATH (cargo build \
                     --release -p quaver-jack)"
                )
            })?;
            let mut c = Command::new(wrapper);
            c.arg("--quantum")
                .arg(period.to_string())
                .arg("--server")
                .arg(d.socket());
            c
        }
        Running::Jackd(j) => {
            let mut c = Command::new("env");
            c.arg(format!("JACK_DEFAULT_SERVER={}", j.name));
            c
        }
        Running::Pipewire(s) => {
            if which("pw-jack").is_none() {
                bail!("pw-jack is not installed (apt-get install pipewire-jack)");
            }
            let mut c = Command::new("pw-jack");
            c.args(["-p", &period.to_string()])
                .env("XDG_RUNTIME_DIR", s.runtime_dir());
            c
        }
    };
    cmd.arg(&o.self_exe).arg("jack-client").args(args);
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("JACK_DEFAULT_SERVER")
        .env_remove("PIPEWIRE_REMOTE")
        .env_remove("QUAVER_SERVER");
    Ok(cmd)
}

/// Runs the client; calls `at_start` when its window begins and `at_end` when the
/// result arrives; bounded throughout. Returns its result and its stderr.
pub(super) fn run_client(
    mut cmd: Command,
    warmup: f64,
    seconds: f64,
    mut at_start: impl FnMut(),
    mut at_end: impl FnMut(),
) -> Result<ClientRun> {
    let dir = crate::tools::exec::tempdir("quaver-bench-jack-client-")?;
    let errlog = dir.path().join("stderr");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&errlog)?)
        .spawn()
        .with_context(|| format!("starting {}", describe(&cmd)))?;
    // The child keeps its JACK clients (and so quaverd's nodes) until this closes, so
    // the closing snapshot still finds them and their miss counts.
    let mut hold = child.stdin.take();
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(parse_line(&l)).is_err() {
                break;
            }
        }
    });
    let stderr = || std::fs::read_to_string(&errlog).unwrap_or_default();
    let result = (|| -> Result<ClientRun> {
        let mut deadline = Instant::now() + CLIENT_OPEN_TIMEOUT;
        let mut started = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(ChildLine::Open(_)) => {
                    deadline = Instant::now() + Duration::from_secs_f64(warmup + 10.0);
                }
                Ok(ChildLine::Start) => {
                    started = true;
                    at_start();
                    deadline = Instant::now() + Duration::from_secs_f64(seconds + 15.0);
                }
                Ok(ChildLine::Result(r)) if started => {
                    at_end();
                    hold.take();
                    return Ok(*r);
                }
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("the JACK client did not report in time")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("the JACK client exited early")
                }
            }
        }
    })();
    drop(hold);
    let (status, _) = wait_bounded(&mut child, Duration::from_secs(10))?;
    let _ = reader.join();
    match result {
        Ok(r) => Ok(r),
        Err(e) => Err(e.context(format!(
            "{} (exit: {}): {}",
            describe(&cmd),
            status.map_or("killed".into(), |s| s.to_string()),
            stderr().trim()
        ))),
    }
}

pub(super) fn client_args(
    clients: usize,
    voices: usize,
    prefix: &str,
    warmup: f64,
    seconds: f64,
    seed: u64,
) -> Vec<String> {
    vec![
        "--clients".into(),
        clients.to_string(),
        "--voices".into(),
        voices.to_string(),
        "--prefix".into(),
        prefix.into(),
        "--warmup".into(),
        format!("{warmup}"),
        "--seconds".into(),
        format!("{seconds}"),
        "--seed".into(),
        seed.to_string(),
    ]
}

pub(super) fn start_server(
    ctx: &mut Ctx,
    o: &JackOptions,
    s: JackServer,
    period: usize,
) -> Result<Running> {
    Ok(match s {
        JackServer::Quaverd | JackServer::QuaverdAsync => {
            Running::Quaverd(Box::new(ctx.start_daemon(DaemonSpec {
                devices: vec![format!("null:rate={}", o.rate)],
                rate: Some(o.rate),
                quantum: Some(period),
                quantum_min: Some(period.min(32)),
                config: callback_config(o, s),
                ..DaemonSpec::default()
            })?))
        }
        JackServer::Jackd2 => {
            let j = Jackd::start(o.jackd_priority, o.rate, period)?;
            ctx.record_command(format!("{} &", j.command));
            Running::Jackd(j)
        }
        JackServer::Pipewire => {
            if !Path::new(PW_JACK_LIB).exists() {
                bail!("pipewire-jack is not installed ({PW_JACK_LIB} missing)");
            }
            Running::Pipewire(Box::new(Server::pipewire(ctx)?))
        }
    })
}

/// quaverd's `[callback]` table for server `s`: the run's spin, and asynchronous clients
/// for `quaverd-async`.
fn callback_config(o: &JackOptions, s: JackServer) -> String {
    let mut c = String::new();
    if let Some(us) = o.callback_spin_us {
        c += &format!("spin_us = {us}\n");
    }
    if s == JackServer::QuaverdAsync {
        c += "asynchronous = true\n";
    }
    if c.is_empty() {
        c
    } else {
        format!("[callback]\n{c}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quaverd_async_gets_asynchronous_clients_and_the_spin_goes_to_both() {
        let mut o = JackOptions::new(true, PathBuf::from("quaver-bench"));
        assert_eq!(callback_config(&o, JackServer::Quaverd), "");
        assert_eq!(
            callback_config(&o, JackServer::QuaverdAsync),
            "[callback]\nasynchronous = true\n"
        );
        o.callback_spin_us = Some(100);
        assert_eq!(
            callback_config(&o, JackServer::Quaverd),
            "[callback]\nspin_us = 100\n"
        );
        assert_eq!(
            callback_config(&o, JackServer::QuaverdAsync),
            "[callback]\nspin_us = 100\nasynchronous = true\n"
        );
        assert!(JackServer::QuaverdAsync.is_quaverd() && !JackServer::Jackd2.is_quaverd());
    }
}
