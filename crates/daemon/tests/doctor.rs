//! `quaver doctor` names what it finds (issue 35, acceptance 4): no daemon (and an
//! invalid config file); a daemon without real-time scheduling (testkit's,
//! `--realtime-priority 0`) whose config disables its PulseAudio front-end; and a second
//! server, Debian's `pulseaudio` (headless, in the test's runtime directory), on the
//! PulseAudio socket. One daemon start; the socket-activated daemon of `systemd.rs`
//! checks "started by systemd".

use quaver_testkit::*;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// `quaver doctor` with `XDG_RUNTIME_DIR` = `xdg`: its exit code and stdout.
fn doctor(mut cmd: Command, xdg: &Path, config: &Path) -> (Option<i32>, String) {
    let child = cmd
        .arg("doctor")
        .env("XDG_RUNTIME_DIR", xdg)
        .env("XDG_CONFIG_HOME", config)
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning quaver doctor");
    let out = wait_output(child, WAIT);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "quaver doctor:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The second server on `xdg/pulse/native`: Debian's pulseaudio, headless, or (when it
/// is not installed) this test process listening there.
enum Rival {
    Pulseaudio(peers::Pulseaudio),
    /// Held so that the socket keeps listening.
    Listener(#[allow(dead_code)] std::os::unix::net::UnixListener),
}

fn start_rival(dir: &Path, xdg: &Path) -> Rival {
    let what = "a real PulseAudio on the socket (a plain listener holds it instead)";
    match peers::Pulseaudio::start(dir, xdg, &["module-null-sink sink_name=null"], what) {
        Some(pa) => Rival::Pulseaudio(pa),
        None => {
            let sock = xdg.join("pulse").join("native");
            Rival::Listener(std::os::unix::net::UnixListener::bind(&sock).unwrap())
        }
    }
}

#[test]
fn doctor_names_a_missing_daemon_one_without_real_time_and_a_rival_on_the_pulse_socket() {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(xdg.join("pulse"))
        .unwrap();
    let config_home = dir.path().join("config");

    // No daemon: said first, with what starts one; exit status 1. The config file it
    // would read has an unknown key: quaverd's own check names it.
    let default_config = config_home.join("quaver/quaver.toml");
    std::fs::create_dir_all(default_config.parent().unwrap()).unwrap();
    std::fs::write(&default_config, "[engine]\nquantum_mni = 64\n").unwrap();
    let mut cmd = Command::new(quaver_bin());
    cmd.env_remove("QUAVER_SERVER");
    let (code, text) = doctor(cmd, &xdg, &config_home);
    assert_eq!(code, Some(1), "{text}");
    let native = xdg.join("quaver").join("native");
    assert!(
        text.starts_with(&format!(
            "problem  daemon: quaverd is not running (no quaver server at {}",
            native.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("         fix: `systemctl --user start quaverd.socket`"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "problem  config: invalid, quaverd refuses to start with it: {}: TOML parse error \
             at line 2, column 1: unknown field `quantum_mni`",
            default_config.display()
        )),
        "{text}"
    );
    std::fs::remove_file(&default_config).unwrap();

    // A second server on the PulseAudio socket, and a daemon without real-time whose
    // config leaves PulseAudio clients to it.
    let mut rival = start_rival(dir.path(), &xdg);
    let config = dir.path().join("quaver.toml");
    std::fs::write(&config, "[pulse]\nenabled = false\n").unwrap();
    let config_arg = config.display().to_string();
    let mut d = Daemon::start_in(dir, &["--config", &config_arg, "--device", "null"]);
    let daemon_pid = d.pid();
    let (code, text) = doctor(d.quaver(), &xdg, &config_home);
    let rival_pid = match &rival {
        Rival::Pulseaudio(pa) => pa.pid(),
        Rival::Listener(_) => std::process::id(),
    };
    let rival_comm = std::fs::read_to_string(format!("/proc/{rival_pid}/comm")).unwrap();
    if let Rival::Pulseaudio(pa) = &mut rival {
        pa.stop();
    }
    let log = d.stop();
    assert!(
        log.contains("WARN") && log.contains("pulse.enabled = false"),
        "{log}"
    );

    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "ok       daemon: quaverd {} running, pid {}, started by a command, not by systemd, serving {}\n",
            env!("CARGO_PKG_VERSION"),
            daemon_pid,
            native.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "problem  real-time: the audio thread runs without real-time scheduling: \
             SCHED_OTHER (real-time disabled)\n         fix: set `engine.realtime_priority = 20`"
        ),
        "{text}"
    );
    // Locked or not depends on the machine's memory-lock limit: only that it is looked at.
    assert!(text.contains(" memory: "), "{text}");
    assert!(
        text.contains(&format!("ok       config: {config_arg}, valid\n")),
        "{text}"
    );
    assert!(
        text.contains("problem  config: pulse.enabled = false: PulseAudio clients"),
        "{text}"
    );
    let pulse = xdg.join("pulse").join("native");
    assert!(
        text.contains(&format!(
            "problem  pulse socket: pid {rival_pid} ({})",
            rival_comm.trim()
        )) && text.contains(&format!(
            "listens on {}: PulseAudio clients reach it, not quaver\n",
            pulse.display()
        )),
        "{text}"
    );
    if matches!(rival, Rival::Pulseaudio(_)) {
        assert!(text.contains("fix: `pulseaudio --kill`"), "{text}");
    }
    assert!(
        // Running, or suspended when the machine kept the test idle past the timeout.
        text.contains("ok       devices: quaverd serves null ("),
        "{text}"
    );
}
