//! Issue 35, acceptance 1: the Debian package of the install layout is built from this
//! build's programs (`cargo xtask deb`), `lintian` finds no error in it and no warning
//! that docs/install.md does not explain, and `dpkg -i` of it in the kernel-ALSA guest
//! (its tmpfs overlay keeps this machine untouched) installs every file of the layout;
//! there `man quaverd`, `quaver --help`, the bash completion, the installed
//! quaver-jack's private library and the installed units work, and `dpkg -r` takes it
//! all away again. One guest boot for all of it.

use quaver_testkit::guest::{self, Guest};
use quaver_testkit::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The layout, written out by hand (docs/install.md) so that a file the tool stops
/// installing fails here rather than vanishing from both sides.
fn layout() -> Vec<String> {
    let mut files: Vec<String> = [
        "/usr/bin/quaverd",
        "/usr/bin/quaver",
        "/usr/bin/quaver-bench",
        "/usr/bin/quaver-jack",
        "/usr/lib/quaver/jack/libjack.so.0",
        "/usr/share/doc/quaver/examples/quaver.toml",
        "/usr/share/doc/quaver/copyright",
        "/usr/share/doc/quaver/changelog.Debian.gz",
        "/usr/lib/systemd/user/quaverd.socket",
        "/usr/lib/systemd/user/quaverd.service",
        // One page per program and per subcommand; these are a sample of the latter.
        "/usr/share/man/man1/quaver-play.1.gz",
        "/usr/share/man/man1/quaver-bench-peers.1.gz",
    ]
    .map(String::from)
    .into();
    for bin in ["quaverd", "quaver", "quaver-bench", "quaver-jack"] {
        files.push(format!("/usr/share/man/man1/{bin}.1.gz"));
        files.push(format!("/usr/share/bash-completion/completions/{bin}"));
        files.push(format!("/usr/share/zsh/vendor-completions/_{bin}"));
        files.push(format!("/usr/share/fish/vendor_completions.d/{bin}.fish"));
    }
    files
}

/// Whether `program` is on PATH; if not, says loudly that `skipped` is not tested.
fn have(program: &str, package: &str, skipped: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIPPED: {program} not installed (Debian: {package}); {skipped} not tested");
    }
    found
}

/// The lintian tags docs/install.md explains (its "lintian" list: lines `- \`tag\``).
fn explained_tags() -> Vec<String> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/install.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let section = text
        .split("## lintian")
        .nth(1)
        .unwrap_or_else(|| panic!("{} has no \"## lintian\" section", doc.display()));
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect()
}

/// Builds the package from this build's programs; returns its path.
fn build_deb(out: &Path) -> PathBuf {
    // Fail on stale programs here, with the command that rebuilds them.
    for b in ["quaverd", "quaver", "quaver-bench", "quaver-jack"] {
        bin(b);
    }
    libjack();
    let profile = target_dir();
    let t0 = Instant::now();
    let run = Command::new(bin("xtask"))
        .args(["deb", "--no-build", "--compress-level", "1", "--profile"])
        .arg(if profile.file_name().unwrap() == "debug" {
            "dev".into()
        } else {
            profile.file_name().unwrap().to_owned()
        })
        .arg("--target-dir")
        .arg(profile.parent().unwrap())
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "xtask deb failed: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("xtask deb took {:?}", t0.elapsed());
    let deb = PathBuf::from(String::from_utf8_lossy(&run.stdout).lines().last().unwrap());
    assert!(deb.is_file(), "{}", deb.display());
    deb
}

fn lint(deb: &Path) {
    let t0 = Instant::now();
    let out = Command::new("lintian")
        .args(["--tag-display-limit", "0", "--fail-on", "none"])
        .arg(deb)
        .output()
        .unwrap();
    eprintln!("lintian took {:?}", t0.elapsed());
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lintian could not run: {text}");
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian found errors:\n{text}");
    let explained = explained_tags();
    // "W: quaver: tag-name [details]"
    let unexplained: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("W:"))
        .filter(|l| {
            let tag = l.split_whitespace().nth(2).unwrap_or("");
            !explained.iter().any(|t| t == tag)
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "lintian warnings that docs/install.md's lintian list does not explain:\n{}",
        unexplained.join("\n")
    );
}

const GUEST_SCRIPT: &str = r#"
# The host builds the package while this guest boots: wait for it (or for the host's
# failure), 180 s at most.
for _ in $(seq 900); do { [ -e "$OUT/ready" ] || [ -e "$OUT/abort" ]; } && break; sleep 0.2; done
[ -e "$OUT/ready" ] || { echo "the host gave no package"; exit 9; }
# man-db's trigger rebuilds the whatis index after dpkg -i; under the guest's software
# emulation that costs tens of seconds, and man finds pages by path without it.
rm -f /var/lib/man-db/auto-update
echo "=== INSTALL"
dpkg -i "$DEB" > "$OUT/dpkg.log" 2>&1; echo "dpkg -i exit $?"
echo "=== FILES"
while read -r f; do [ -f "$f" ] && echo "present $f" || echo "MISSING $f"; done < "$OUT/layout"
echo "=== LISTED"
dpkg -L quaver | grep -c '^/usr/'
echo "=== MAN"
MANWIDTH=80 timeout 60 man -P cat quaverd 2>&1 | sed -n '1,12p'
echo "=== HELP"
timeout 20 quaver --help 2>&1 | cat
echo "=== BASH"
timeout 20 bash -c 'source /usr/share/bash-completion/completions/quaver && complete -p quaver &&
    COMP_WORDS=(quaver pl) COMP_CWORD=1 COMP_LINE="quaver pl" COMP_POINT=9 &&
    _quaver quaver pl quaver; echo "completes: ${COMPREPLY[*]}"' 2>&1
echo "=== JACK"
env -u QUAVER_JACK_LIBDIR -u LD_LIBRARY_PATH timeout 20 quaver-jack sh -c 'echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ls -l "${LD_LIBRARY_PATH%%:*}/libjack.so.0"' 2>&1
echo "=== UNITS"
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
XDG_RUNTIME_DIR=/tmp/xdg timeout 120 systemd-analyze verify --user \
    /usr/lib/systemd/user/quaverd.socket /usr/lib/systemd/user/quaverd.service 2>&1; echo "verify exit $?"
grep '^ExecStart=' /usr/lib/systemd/user/quaverd.service
echo "=== REMOVE"
dpkg -r quaver > "$OUT/dpkg-r.log" 2>&1; echo "dpkg -r exit $?"
while read -r f; do [ -e "$f" ] && echo "LEFT $f"; done < "$OUT/layout"
echo "=== END"
"#;

/// Lets the guest's script go on once the package is there, or stop at once when the
/// host side failed first (dropped unopened while unwinding): a waiting guest never
/// outlives the test.
struct Gate {
    out: PathBuf,
    guest: Option<std::thread::JoinHandle<(Guest, guest::GuestRun)>>,
}

impl Gate {
    /// Puts the package where the script looks and waits for the guest's run.
    fn open(mut self, deb: &Path) -> (Guest, guest::GuestRun) {
        let part = self.out.join("quaver.deb.part");
        std::fs::copy(deb, &part).unwrap();
        std::fs::rename(&part, self.out.join("quaver.deb")).unwrap();
        std::fs::write(self.out.join("ready"), "").unwrap();
        self.guest.take().unwrap().join().unwrap()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let Some(h) = self.guest.take() {
            let _ = std::fs::write(self.out.join("abort"), "");
            let _ = h.join();
        }
    }
}

#[test]
fn the_debian_package_lints_clean_and_installs_the_whole_layout_in_the_guest() {
    let whole = "the Debian package";
    if !have("dpkg-deb", "dpkg", whole)
        || !have("dpkg-shlibdeps", "dpkg-dev", whole)
        || !have("lintian", "lintian", whole)
    {
        return;
    }
    let t0 = Instant::now();
    // The guest boots (~30 s of emulation) while the package is built and linted; its
    // script waits for the package to appear in $OUT.
    let in_guest = "the package in the guest";
    let ready = have("man", "man-db", in_guest)
        && have("systemd-analyze", "systemd", in_guest)
        && guest::skip_unless_available(module_path!());
    let gate = ready.then(|| {
        let g = Guest::new().modules("").timeout(Duration::from_secs(300));
        std::fs::write(g.path("layout"), layout().join("\n") + "\n").unwrap();
        let out = g.out().to_path_buf();
        let g = g.env("DEB", out.join("quaver.deb"));
        let guest = std::thread::spawn(move || {
            let run = g.run(GUEST_SCRIPT);
            (g, run)
        });
        Gate {
            out,
            guest: Some(guest),
        }
    });
    let out = tempfile::tempdir().unwrap();
    let deb = build_deb(out.path());
    lint(&deb);
    // The package's own list of files must hold the whole layout.
    let contents = Command::new("dpkg-deb")
        .arg("--contents")
        .arg(&deb)
        .output()
        .unwrap();
    let contents = String::from_utf8_lossy(&contents.stdout);
    for f in layout() {
        assert!(
            contents.lines().any(|l| l.ends_with(&format!(".{f}"))),
            "{f} is not in the package:\n{contents}"
        );
    }
    eprintln!("package built and linted in {:?}", t0.elapsed());
    let Some(gate) = gate else {
        return;
    };
    let host_had = Path::new("/usr/bin/quaverd").exists();
    let (g, run) = gate.open(&deb);
    eprintln!("guest run ended {:?} after the start", t0.elapsed());
    let text = run.ok();
    eprintln!("{text}");
    let dpkg_log = std::fs::read_to_string(g.path("dpkg.log")).unwrap_or_default();
    assert!(
        guest::section(text, "INSTALL").contains("dpkg -i exit 0"),
        "{text}\n--- dpkg -i ---\n{dpkg_log}"
    );
    let files = guest::section(text, "FILES");
    assert!(!files.contains("MISSING"), "{files}");
    assert_eq!(files.lines().count(), layout().len(), "{files}");
    let man = guest::section(text, "MAN");
    assert!(
        man.contains("quaverd") && man.contains("sound server"),
        "man quaverd:\n{man}"
    );
    let help = guest::section(text, "HELP");
    assert!(
        help.contains("Usage: quaver") && help.contains("play"),
        "{help}"
    );
    let bash = guest::section(text, "BASH");
    assert!(bash.contains("-F _quaver quaver\n"), "{bash}");
    assert!(bash.contains("completes: play"), "{bash}");
    let jack = guest::section(text, "JACK");
    assert!(
        jack.contains("LD_LIBRARY_PATH=/usr/bin/../lib/quaver/jack\n"),
        "the installed wrapper did not use the installed library alone:\n{jack}"
    );
    assert!(jack.contains("libjack.so.0"), "{jack}");
    let units = guest::section(text, "UNITS");
    assert!(
        units.contains("verify exit 0") && units.contains("ExecStart=/usr/bin/quaverd\n"),
        "{units}"
    );
    let removed = guest::section(text, "REMOVE");
    assert!(
        removed.contains("dpkg -r exit 0") && !removed.contains("LEFT"),
        "{removed}"
    );
    // The overlay kept it all in the guest.
    assert_eq!(Path::new("/usr/bin/quaverd").exists(), host_had);
    eprintln!("whole check took {:?}", t0.elapsed());
}
