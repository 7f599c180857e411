//! quaverd under systemd: socket activation through Debian's `systemd-socket-activate`
//! (real sockets, real clients, `quaver doctor` naming it), the user units accepted by
//! `systemd-analyze verify`, and what a broken unit or config gets: one line at priority
//! err in the journal's format and a non-zero exit, never a half-started daemon.

use quaver_testkit::*;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

fn have(program: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("SKIPPED: {program} not installed (Debian: systemd)");
    }
    found
}

fn private_dir(p: &Path) {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(p)
        .unwrap();
}

/// The comm name of `pid` (what `ps` shows).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn the_first_client_starts_quaverd_on_the_sockets_systemd_holds() {
    if !have("systemd-socket-activate") || !have("paplay") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    private_dir(&xdg.join("quaver"));
    private_dir(&xdg.join("pulse"));
    let native = xdg.join("quaver").join("native");
    let pulse = xdg.join("pulse").join("native");
    let mut cmd = Command::new("systemd-socket-activate");
    cmd.arg("-l").arg(&native).arg("-l").arg(&pulse);
    for var in ["XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME"] {
        cmd.args(["-E", var]);
    }
    cmd.arg(quaverd_bin())
        .args(["--realtime-priority", "0", "--log-level", "debug"])
        .args(["--device", "null"]);
    // Daemon's readiness check is the first client: its connection starts quaverd.
    let mut d = Daemon::start_cmd(dir, cmd);
    let t0 = Instant::now();
    while comm(d.pid()) != "quaverd" {
        assert!(t0.elapsed() < WAIT, "not started: {}", comm(d.pid()));
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    while !d.log_text().contains("socket activation") {
        assert!(t0.elapsed() < WAIT, "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        d.log_text()
            .contains("socket activation: native socket passed, PulseAudio socket passed"),
        "{}",
        d.log_text()
    );
    // Both front-ends serve on the passed sockets.
    write_wav_s16(&d.path("in.wav"), 48000, 2, &noise_s16(4800, 3, 1000));
    ok(&d.run(&["play", "in.wav"]));
    let child = Command::new("paplay")
        .arg(d.path("in.wav"))
        .env("XDG_RUNTIME_DIR", &xdg)
        .env_remove("PULSE_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ok(&wait_output(child, WAIT));
    // `quaver doctor` says how it was started, and that it serves the PulseAudio socket
    // systemd passed (its exit status counts other findings: real-time is off here).
    let out = d
        .quaver()
        .arg("doctor")
        .env("XDG_RUNTIME_DIR", &xdg)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "ok       daemon: quaverd {} running, pid {}, started by systemd socket activation",
            env!("CARGO_PKG_VERSION"),
            d.pid()
        )) && said.contains(&format!(
            "ok       pulse socket: {} is served by quaverd\n",
            pulse.display()
        )),
        "{said}"
    );
    let log = d.stop();
    assert!(!log.contains("ERROR"), "{log}");
    // The sockets are systemd's: quaverd leaves their files in place.
    assert!(native.exists() && pulse.exists());
}

#[test]
fn the_user_units_pass_systemd_analyze_verify() {
    if !have("systemd-analyze") {
        return;
    }
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/systemd/user");
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    private_dir(&xdg);
    let mut args = vec!["verify".to_string(), "--user".into(), "--man=no".into()];
    for unit in ["quaverd.socket", "quaverd.service"] {
        let text = std::fs::read_to_string(units.join(unit)).unwrap();
        // The package installs /usr/bin/quaverd; here the built one stands in.
        let text = text.replace("/usr/bin/quaverd", &quaverd_bin().display().to_string());
        let path = dir.path().join(unit);
        std::fs::write(&path, text).unwrap();
        args.push(path.display().to_string());
    }
    let out = Command::new("systemd-analyze")
        .args(&args)
        .env("XDG_RUNTIME_DIR", &xdg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// quaverd run as systemd would, with stderr a file whose device and inode are in
/// `JOURNAL_STREAM`, and `prepare` adjusting the command; its exit and stderr.
fn under_journal(args: &[&str], prepare: impl FnOnce(&mut Command, &Path)) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    private_dir(&xdg);
    let err_path = dir.path().join("stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let meta = err.metadata().unwrap();
    let mut cmd = Command::new(quaverd_bin());
    cmd.args(["--realtime-priority", "0"])
        .args(args)
        .env("XDG_RUNTIME_DIR", &xdg)
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    prepare(&mut cmd, dir.path());
    let child = cmd
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap();
    let out = wait_output(child, WAIT);
    let text = std::fs::read_to_string(&err_path).unwrap();
    (out, text)
}

/// The error quaverd ended with: from its last `<3>quaverd: ` line on, every line at
/// priority err (3).
fn last_err_line(text: &str) -> String {
    let start = text
        .rfind("<3>quaverd: ")
        .unwrap_or_else(|| panic!("no error line: {text}"));
    let tail = &text[start..];
    assert!(tail.lines().all(|l| l.starts_with("<3>")), "{text}");
    tail.to_string()
}

#[test]
fn sockets_passed_to_another_process_are_refused() {
    let (out, text) = under_journal(&["--device", "null"], |c, _| {
        c.env("LISTEN_PID", "1").env("LISTEN_FDS", "1");
    });
    assert!(!out.status.success());
    let line = last_err_line(&text);
    assert!(line.contains("LISTEN_PID=1 is not this process"), "{text}");
}

#[test]
fn a_passed_socket_that_is_not_a_unix_stream_socket_is_refused() {
    if !have("python3") {
        return;
    }
    // A UDP socket at descriptor 3 and LISTEN_PID set to the process that execs
    // quaverd (the pid stays across exec), as a unit with ListenDatagram= would.
    let (out, text) = under_journal(&["--device", "null"], |c, _| {
        let argv: Vec<String> = std::iter::once(quaverd_bin().display().to_string())
            .chain(c.get_args().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        let script = "import os, socket, sys\n\
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
             s.bind(('127.0.0.1', 0))\n\
             os.dup2(s.fileno(), 3) if s.fileno() != 3 else None\n\
             os.set_inheritable(3, True)\n\
             os.environ['LISTEN_PID'] = str(os.getpid())\n\
             os.environ['LISTEN_FDS'] = '1'\n\
             os.execv(sys.argv[1], sys.argv[1:])\n";
        let mut py = Command::new("python3");
        py.arg("-c").arg(script).args(&argv);
        for (k, v) in c.get_envs() {
            if let Some(v) = v {
                py.env(k, v);
            }
        }
        *c = py;
    });
    assert!(!out.status.success());
    let line = last_err_line(&text);
    assert!(
        line.contains("fd 3 is not a listening unix stream socket"),
        "{text}"
    );
}

#[test]
fn an_unknown_config_key_under_systemd_is_one_error_line_and_a_failure() {
    let (out, text) = under_journal(&[], |c, dir: &Path| {
        let cfg: PathBuf = dir.join("bad.toml");
        std::fs::write(&cfg, "[engine]\nquantom = 256\n").unwrap();
        c.arg("--config").arg(cfg);
    });
    assert!(!out.status.success());
    let line = last_err_line(&text);
    assert!(line.contains("quantom"), "{text}");
}
