//! The kernel-ALSA guest rig (`scripts/guest`, docs/alsa/guest.md) for tests: a bash
//! script run as root in a QEMU guest that boots Debian's kernel with snd-aloop and
//! snd-dummy over this machine's root filesystem, so the binaries built here run there
//! from the same paths. Each run boots a guest (~10-30 s of both CPUs): tests batch their
//! checks into one script and look at its output and the files it left in [`Guest::out`].
//!
//! When the rig cannot run here (no qemu, kernel package or static busybox), tests skip
//! loudly through [`skip_unless_available`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `scripts/guest` in this workspace.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/guest")
}

/// Whether the rig can run here: `Err` holds `scripts/guest --check`'s reason (it
/// exits 3 when qemu, the kernel package or busybox-static is missing). Asked once per
/// test process.
pub fn available() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            let out = Command::new(script())
                .arg("--check")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
            match out.status.code() {
                Some(0) => Ok(()),
                Some(3) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
                _ => panic!(
                    "{} --check failed ({}): {}",
                    script().display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        })
        .clone()
}

/// True if the rig can run; otherwise prints "SKIPPED: kernel ALSA guest unavailable:
/// <reason>" on stderr (cargo shows it) and returns false, so a test returns early.
pub fn skip_unless_available(test: &str) -> bool {
    match available() {
        Ok(()) => true,
        Err(reason) => {
            eprintln!("SKIPPED: kernel ALSA guest unavailable: {reason} ({test} not tested)");
            false
        }
    }
}

/// What a guest run gave.
#[derive(Debug)]
pub struct GuestRun {
    /// `scripts/guest`'s exit status: the script's own, 3 if the rig could not run,
    /// 4 if the guest died or timed out before the script ended.
    pub status: ExitStatus,
    /// The script's stdout and stderr, interleaved as the guest wrote them, lines ended
    /// with LF (the serial console's CR LF undone).
    pub output: String,
    /// `scripts/guest`'s own messages (the serial console's tail when the guest died).
    pub rig: String,
}

impl GuestRun {
    /// Asserts the script exited 0, showing everything it and the rig said if not;
    /// returns its output.
    pub fn ok(&self) -> &str {
        assert!(
            self.status.success(),
            "the guest script failed ({}):\n{}\n--- scripts/guest ---\n{}",
            self.status,
            self.output,
            self.rig
        );
        &self.output
    }
}

/// Bash functions every [`Guest::run`] script can call (defined before its text): a
/// private runtime, bounded waits for the PulseAudio server and for a subscription,
/// and a bounded stop by PID.
pub const BASH_LIB: &str = r#"
# private_runtime: XDG_RUNTIME_DIR, HOME, XDG_STATE_HOME and XDG_CONFIG_HOME under a
# fresh directory of the guest's own /tmp, $PRIV (sockets do not belong on the 9p share).
private_runtime() {
    PRIV=$(mktemp -d)
    export XDG_RUNTIME_DIR=$PRIV/run HOME=$PRIV/home XDG_STATE_HOME=$PRIV/state \
        XDG_CONFIG_HOME=$PRIV/config
    mkdir -p -m 700 "$XDG_RUNTIME_DIR"; mkdir -p "$HOME"
}
# wait_server: until `pactl info` answers, 30 s at most (then says so and fails).
wait_server() {
    for _ in $(seq 150); do timeout 20 env pactl info >/dev/null 2>&1 && return 0; sleep 0.2; done
    echo "the server did not answer pactl info in 30 s"; return 1
}
# wait_subscribed FILE: until the `pactl subscribe` writing FILE reports a client
# coming and going, 10 s at most.
wait_subscribed() {
    for _ in $(seq 50); do
        timeout 20 env pactl info >/dev/null 2>&1; grep -q "on client" "$1" && return 0; sleep 0.2
    done
    echo "pactl subscribe reported no client in 10 s"; return 1
}
# stop_pid PID: SIGTERM, 20 s to end, then SIGKILL; its exit status in $RC.
stop_pid() {
    kill "$1" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$1" 2>/dev/null; wait "$1"; RC=$?
}
"#;

/// One guest run: its modules, whether udevd runs, a time bound and a directory both
/// sides can write (kept after the run when `QUAVER_GUEST_KEEP` is set).
pub struct Guest {
    modules: String,
    udev: bool,
    timeout: Duration,
    env: Vec<(String, String)>,
    out: tempfile::TempDir,
}

impl Default for Guest {
    fn default() -> Self {
        Self::new()
    }
}

impl Guest {
    /// A guest with snd-aloop and snd-dummy, no udevd, a 240 s bound and a fresh
    /// output directory.
    pub fn new() -> Guest {
        Guest {
            modules: "snd-aloop snd-dummy".into(),
            udev: false,
            timeout: Duration::from_secs(240),
            env: Vec::new(),
            out: out_dir(),
        }
    }

    /// The kernel modules to load before the script (space separated; "" for none).
    pub fn modules(mut self, modules: &str) -> Guest {
        self.modules = modules.into();
        self
    }

    /// Starts systemd-udevd in the guest (card add/remove events).
    pub fn udev(mut self) -> Guest {
        self.udev = true;
        self
    }

    /// Kills the guest after `t` (the run then fails with status 4).
    pub fn timeout(mut self, t: Duration) -> Guest {
        self.timeout = t;
        self
    }

    /// Exports `name=value` to the script (e.g. the built binaries' paths, which are
    /// the same in the guest).
    pub fn env(mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> Guest {
        let value = value.as_ref().to_str().expect("a UTF-8 value").to_string();
        self.env.push((name.into(), value));
        self
    }

    /// The directory the guest writes to: the same path on both sides; the script
    /// finds it in `$OUT`. Files the test puts here before the run are the input.
    pub fn out(&self) -> &Path {
        self.out.path()
    }

    /// A path inside [`Guest::out`].
    pub fn path(&self, name: &str) -> PathBuf {
        self.out.path().join(name)
    }

    /// Runs the bash script `text` (with `$OUT` and the [`Guest::env`] variables
    /// exported and the [`BASH_LIB`] functions defined) and waits for the guest to end,
    /// at most the timeout plus the time QEMU needs to be killed.
    pub fn run(&self, text: &str) -> GuestRun {
        let file = self.path("guest-script.sh");
        let mut full = format!("export OUT={}\n", quote(&self.out().to_string_lossy()));
        for (k, v) in &self.env {
            full.push_str(&format!("export {k}={}\n", quote(v)));
        }
        full.push_str(BASH_LIB);
        full.push_str(text);
        std::fs::write(&file, full).expect("writing the guest script");
        self.run_file(&file)
    }

    /// Runs the bash script in `file` (a path the guest sees: the workspace, the
    /// target directory, /tmp or [`Guest::out`]).
    pub fn run_file(&self, file: &Path) -> GuestRun {
        let mut cmd = Command::new(script());
        cmd.args(["--modules", &self.modules])
            .args(["--timeout", &self.timeout.as_secs().max(1).to_string()])
            .arg("--out")
            .arg(self.out());
        if self.udev {
            cmd.arg("--udev");
        }
        cmd.args(["--", "bash"])
            .arg(file)
            .env("OUT", self.out())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning scripts/guest");
        // Read both pipes while waiting: a chatty script must not block on a full pipe.
        let reader = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut buf);
                }
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let stdout = reader(child.stdout.take().map(|p| Box::new(p) as _));
        let stderr = reader(child.stderr.take().map(|p| Box::new(p) as _));
        // scripts/guest kills QEMU at the timeout and 10 s later for good.
        let limit = self.timeout + Duration::from_secs(30);
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("waiting for scripts/guest") {
                break st;
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "scripts/guest did not end within {limit:?}:\n{}\n{}",
                    stdout.join().unwrap_or_default(),
                    stderr.join().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        GuestRun {
            status,
            output: stdout.join().unwrap_or_default().replace("\r\n", "\n"),
            rig: stderr.join().unwrap_or_default(),
        }
    }
}

/// The lines a script printed under `=== NAME` in `out`, up to the next `=== ` line
/// (the last one with its newline). Panics, showing `out`, when there is no such section.
pub fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let head = format!("=== {name}\n");
    let start = out
        .find(&head)
        .unwrap_or_else(|| panic!("no section {name} in the guest's output:\n{out}"));
    let rest = &out[start + head.len()..];
    &rest[..rest.find("\n=== ").map_or(rest.len(), |i| i + 1)]
}

/// The run's output directory: removed afterwards unless `QUAVER_GUEST_KEEP` is set,
/// for looking at what a failing run left.
fn out_dir() -> tempfile::TempDir {
    let keep = std::env::var_os("QUAVER_GUEST_KEEP").is_some();
    let mut dir = tempfile::Builder::new()
        .prefix("quaver-guest-")
        .tempdir()
        .expect("tempdir for the guest's output");
    if keep {
        dir.disable_cleanup(true);
        eprintln!("guest: output kept in {}", dir.path().display());
    }
    dir
}

/// `s` as one bash word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_words_survive_bash() {
        let tricky = "a b'c\"$HOME\\";
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {}", quote(tricky)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), tricky);
    }

    /// One boot checks the rig's own promises: the cards are there, a value with
    /// quotes reaches the script, its output and exit status come back, a file it
    /// writes under `$OUT` is seen here, other writes stay in the guest.
    #[test]
    fn a_guest_run_returns_output_status_and_files() {
        if !skip_unless_available(module_path!()) {
            return;
        }
        let g = Guest::new()
            .modules("snd-aloop snd-dummy")
            .env("TRICKY", "it's \"quoted\" $HOME");
        std::fs::write(g.path("input"), "from the host").unwrap();
        let run = g.run(
            "cat /proc/asound/cards\n\
             printf '[%s]\\n' \"$TRICKY\"\n\
             echo \"$(cat \"$OUT/input\") and back\" > \"$OUT/result\"\n\
             touch /usr/quaver-guest-write && echo guest-wrote\n\
             exit 5\n",
        );
        assert_eq!(run.status.code(), Some(5), "{run:?}");
        assert!(
            run.output.contains("Loopback") && run.output.contains("Dummy"),
            "{run:?}"
        );
        assert!(run.output.contains("[it's \"quoted\" $HOME]"), "{run:?}");
        // The overlay takes writes, and they never reach the host.
        assert!(run.output.contains("guest-wrote"), "{run:?}");
        assert!(!Path::new("/usr/quaver-guest-write").exists());
        assert_eq!(
            std::fs::read_to_string(g.path("result")).unwrap().trim(),
            "from the host and back"
        );
    }

    #[test]
    fn a_section_runs_to_the_next_header() {
        let out = "guest: boot\n=== A\none\ntwo\n=== AB\nthree\n=== END\n";
        assert_eq!(section(out, "A"), "one\ntwo\n");
        assert_eq!(section(out, "AB"), "three\n");
        assert_eq!(section(out, "END"), "");
    }

    #[test]
    fn the_rig_script_is_found_and_answers_check() {
        assert!(script().is_file(), "{}", script().display());
        // Either answer is fine here; what matters is that an unavailable rig gives
        // its reason, never an empty one.
        if let Err(reason) = available() {
            assert!(
                reason.contains("missing") || reason.contains("QUAVER_GUEST=off"),
                "{reason}"
            );
        }
    }
}
