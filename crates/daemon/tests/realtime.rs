//! Real-time scheduling as quaverd reports it, and graceful operation when the system
//! permits none of it.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use quaver_testkit::{Daemon, ok, write_wav_s16};

#[test]
fn status_names_the_scheduling() {
    let mut d = Daemon::start(&[]);
    let st = d.connect("t").status().unwrap();
    assert!(!st.realtime);
    assert_eq!(*st.scheduling, "SCHED_OTHER (real-time disabled)");
    let text = ok(&d.run(&["status"]));
    assert!(
        text.contains("realtime: no (SCHED_OTHER (real-time disabled))"),
        "{text}"
    );
    d.stop();
}

/// As an unprivileged user (RLIMIT_RTPRIO 0, no system bus): one warning saying what
/// was refused and what to do, and the daemon plays. Needs root to switch users;
/// skipped otherwise.
#[test]
fn unprivileged_daemon_warns_once_and_plays() {
    // SAFETY: plain query.
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and setpriv to run quaverd as nobody");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // A copy nobody can reach: the target dir may sit under a private home.
    let bin = dir.path().join("quaverd");
    std::fs::copy(quaver_testkit::quaverd_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let xdg = dir.path().join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(["--device", "null", "--log-level", "info"])
        .env("HOME", dir.path())
        // No RealtimeKit: a bus address where nothing listens.
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            "unix:path=/nonexistent/quaver-test-bus",
        );
    let mut d = Daemon::start_cmd(dir, cmd);

    let st = d.connect("t").status().unwrap();
    assert!(!st.realtime);
    assert_eq!(*st.scheduling, "SCHED_OTHER (real-time refused)");

    let wav = d.path("tone.wav");
    write_wav_s16(
        &wav,
        48000,
        2,
        &quaver_testkit::noise_s16(48000 / 5 * 2, 7, 3000),
    );
    ok(&d.run(&["play", wav.to_str().unwrap()]));
    assert!(d.connect("t").status().unwrap().cycles > 0);

    let log = d.stop();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "{log}");
    let w = warnings[0];
    for want in ["SCHED_FIFO 20", "RealtimeKit", "rtkit-daemon", "rtprio"] {
        assert!(w.contains(want), "{want:?} missing from {w}");
    }
}
