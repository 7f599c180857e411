//! `quaver setup` and `quaver setup --undo` in a test HOME (issue 35, acceptance 3),
//! driving Debian's own `systemctl --user` over the unit files Debian's pulseaudio and
//! pipewire-pulse packages install under /usr/lib/systemd/user. No user manager
//! answers here (the test's XDG_RUNTIME_DIR has none), so setup changes enablement
//! only — symlinks in the test's XDG_CONFIG_HOME/systemd/user, compared before, after
//! setup and after undo — and says so. Also: `--dry-run` changes nothing, a second setup
//! is refused, a pulseaudio started by hand on the PulseAudio socket makes setup refuse
//! with its pid, and missing quaver units are named with how to install them.
//!
//! Stopping and starting running units through a user manager is not tested: a manager
//! needs a machine booted with systemd, and one started here anyway (`systemd --user`
//! in a private mount namespace with a fake `/run/systemd/system`) moves every process
//! of the machine into its own cgroups.

use quaver_testkit::peers::Pulseaudio;
use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const UNITS: [&str; 6] = [
    "pulseaudio.socket",
    "pulseaudio.service",
    "pipewire-pulse.socket",
    "pipewire-pulse.service",
    "quaverd.socket",
    "quaverd.service",
];

struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Home {
    fn config(&self) -> PathBuf {
        self.root.join("config")
    }
    fn units(&self) -> PathBuf {
        self.config().join("systemd/user")
    }
    fn xdg(&self) -> PathBuf {
        self.root.join("xdg")
    }
    fn state_file(&self) -> PathBuf {
        self.root.join("state/quaver/setup.json")
    }

    /// A command with this HOME's environment and no way to a user manager.
    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("HOME", self.root.join("home"))
            .env("XDG_CONFIG_HOME", self.config())
            .env("XDG_STATE_HOME", self.root.join("state"))
            .env("XDG_RUNTIME_DIR", self.xdg())
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("QUAVER_SERVER")
            .stdin(Stdio::null());
        c
    }

    fn quaver(&self, args: &[&str]) -> Output {
        let out = self
            .cmd(env!("CARGO_BIN_EXE_quaver"))
            .args(args)
            .output()
            .unwrap();
        eprintln!(
            "quaver {}: {}\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Debian's systemctl on this HOME's unit files (offline: no manager).
    fn systemctl(&self, args: &[&str]) -> String {
        let out = self
            .cmd("systemctl")
            .env("SYSTEMD_OFFLINE", "1")
            .arg("--user")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "systemctl --user {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every unit's enablement as `systemctl --user list-unit-files` says.
    fn states(&self) -> BTreeMap<String, String> {
        self.systemctl(&["list-unit-files", "--no-legend", "--no-pager", "--full"])
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (unit, state) = (f.next()?, f.next()?);
                UNITS
                    .contains(&unit)
                    .then(|| (unit.to_string(), state.to_string()))
            })
            .collect()
    }

    /// Every symlink under the user unit directory and where it points.
    fn links(&self) -> BTreeMap<String, String> {
        fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.map(Result::unwrap) {
                let p = e.path();
                let rel = p.strip_prefix(base).unwrap().display().to_string();
                if e.file_type().unwrap().is_symlink() {
                    out.insert(rel, std::fs::read_link(&p).unwrap().display().to_string());
                } else if p.is_dir() {
                    walk(&p, base, out);
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.units(), &self.units(), &mut out);
        out
    }
}

fn have_units() -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v systemctl"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("SKIPPED: systemctl not installed (Debian: systemd)");
        return false;
    }
    for unit in &UNITS[..4] {
        if !Path::new("/usr/lib/systemd/user").join(unit).exists() {
            eprintln!(
                "SKIPPED: /usr/lib/systemd/user/{unit} missing (Debian: pulseaudio, pipewire-pulse)"
            );
            return false;
        }
    }
    true
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn setup_then_undo_leaves_every_unit_as_it_was() {
    if !have_units() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = Home {
        root: dir.path().to_path_buf(),
        _dir: dir,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(home.xdg().join("pulse"))
        .unwrap();
    std::fs::create_dir_all(home.root.join("home")).unwrap();
    // quaver's units installed for this user, as from a source tree.
    std::fs::create_dir_all(home.units()).unwrap();
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/systemd/user");
    for unit in ["quaverd.socket", "quaverd.service"] {
        std::fs::copy(dist.join(unit), home.units().join(unit)).unwrap();
    }
    // Prior choices of this user that setup must keep: pipewire-pulse's socket enabled
    // for the user too, PulseAudio's service already masked.
    home.systemctl(&["enable", "pipewire-pulse.socket"]);
    home.systemctl(&["mask", "pulseaudio.service"]);
    let links0 = home.links();
    let states0 = home.states();
    assert_eq!(states0["pulseaudio.service"], "masked");
    assert_eq!(states0["quaverd.socket"], "disabled");
    assert!(
        links0.contains_key("sockets.target.wants/pipewire-pulse.socket"),
        "{links0:?}"
    );

    // Not switched yet: `quaver doctor` names the units that take the socket at login.
    let said = text(&home.quaver(&["doctor"]));
    assert!(
        said.lines().any(|l| l.starts_with("problem  session: ")
            && l.contains("pipewire-pulse.socket")
            && l.ends_with("enabled: at login they take the PulseAudio socket, not quaver")),
        "{said}"
    );
    assert!(said.contains("         fix: `quaver setup`\n"), "{said}");

    // A dry run prints the commands and changes nothing.
    let out = home.quaver(&["setup", "--dry-run"]);
    assert!(out.status.success());
    let said = text(&out);
    assert!(
        said.contains(
            "systemctl --user mask pulseaudio.socket pipewire-pulse.socket pipewire-pulse.service\n"
        ) && said.contains("systemctl --user enable quaverd.socket\n"),
        "{said}"
    );
    assert!(said.contains("no systemd user manager answers"), "{said}");
    assert_eq!(home.links(), links0);
    assert!(!home.state_file().exists());

    // Setup: the other servers' units masked, quaver's socket enabled.
    let out = home.quaver(&["setup"]);
    assert!(out.status.success(), "{}", text(&out));
    let states1 = home.states();
    for unit in &UNITS[..4] {
        assert_eq!(states1[*unit], "masked", "{unit}: {states1:?}");
    }
    assert_eq!(states1["quaverd.socket"], "enabled", "{states1:?}");
    let links1 = home.links();
    for unit in &UNITS[..4] {
        assert_eq!(links1[*unit], "/dev/null", "{links1:?}");
    }
    assert!(
        links1.contains_key("sockets.target.wants/quaverd.socket"),
        "{links1:?}"
    );
    // The user's own enablement link is untouched under the mask.
    assert!(links1.contains_key("sockets.target.wants/pipewire-pulse.socket"));
    let state = std::fs::read_to_string(home.state_file()).unwrap();
    assert!(state.contains("\"pulseaudio.service\""), "{state}");

    let said = text(&home.quaver(&["doctor"]));
    assert!(
        said.contains("ok       session: switched to quaver by `quaver setup`"),
        "{said}"
    );

    // A second setup would record the masks as the prior state: refused.
    let out = home.quaver(&["setup"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("already switched to quaver"),
        "{}",
        text(&out)
    );

    // Undo: every link and state exactly as before, the state file gone.
    let out = home.quaver(&["setup", "--undo"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(home.links(), links0);
    assert_eq!(home.states(), states0);
    assert!(!home.state_file().exists());
    let out = home.quaver(&["setup", "--undo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("nothing to undo"), "{}", text(&out));

    refused_while_a_server_started_by_hand_holds_the_socket(&home, &links0);

    // Without quaver's units: named, with how to install them.
    for unit in ["quaverd.socket", "quaverd.service"] {
        std::fs::remove_file(home.units().join(unit)).unwrap();
    }
    let out = home.quaver(&["setup"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("quaverd.socket is not installed: install quaver's systemd user units"),
        "{}",
        text(&out)
    );
}

/// A pulseaudio started by hand (not by a unit) on the test's PulseAudio socket:
/// setup names it and changes nothing.
fn refused_while_a_server_started_by_hand_holds_the_socket(
    home: &Home,
    links0: &BTreeMap<String, String>,
) {
    let sock = home.xdg().join("pulse/native");
    let pa = Pulseaudio::start(
        &home.root,
        &home.xdg(),
        &["module-null-sink"],
        "setup refusing a real pulseaudio (a plain listener holds the socket instead)",
    );
    let (pid, comm, _listener) = match &pa {
        Some(pa) => (pa.pid(), "pulseaudio".to_string(), None),
        None => {
            let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
            let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
            (std::process::id(), comm.trim().to_string(), Some(l))
        }
    };
    let out = home.quaver(&["setup"]);
    drop(pa);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(&format!("pid {pid} ({comm})"))
            && said.contains(&format!("listens on {}", sock.display()))
            && said.contains("then run `quaver setup` again"),
        "{said}"
    );
    if comm == "pulseaudio" {
        assert!(said.contains("`pulseaudio --kill`"), "{said}");
    }
    assert_eq!(&home.links(), links0);
    assert!(!home.state_file().exists());
}
