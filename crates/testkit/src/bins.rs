//! The workspace's binaries, found next to the test executable (`target/<profile>/`) and
//! never built from inside a test. `cargo test -p X` builds only X's own binaries, so a
//! missing or stale one fails the test with the command that builds it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What to run when a binary is missing or older than its sources.
const BUILD_HINT: &str = "run `cargo build --workspace --bins` first (./scripts/test does)";

/// `target/<profile>/`, where cargo puts the workspace's binaries, found from the running
/// test executable (`target/<profile>/deps/<test>-<hash>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().expect("the test executable's directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The workspace binary `name` in [`target_dir`]; fails the test, saying how to build
/// it, if it is missing or older than one of the sources it was built from.
pub fn bin(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(p.is_file(), "{} is not built: {BUILD_HINT}", p.display());
    assert_fresh(&p, &target_dir().join(format!("{name}.d")));
    p
}

/// quaverd, the daemon.
pub fn quaverd_bin() -> PathBuf {
    bin("quaverd")
}

/// quaver, the CLI.
pub fn quaver_bin() -> PathBuf {
    bin("quaver")
}

/// quaver-bench.
pub fn quaver_bench_bin() -> PathBuf {
    bin("quaver-bench")
}

/// quaver-jack, the wrapper that runs JACK programs on quaver's libjack.
pub fn quaver_jack_bin() -> PathBuf {
    bin("quaver-jack")
}

/// quaver's `libjack.so` in [`target_dir`], next to `quaver-jack`, which looks for it
/// there. Cargo builds the cdylib into `deps/` for the jack crate's tests but copies it
/// up only when the library itself is asked for (`cargo build --lib`), so a newer one in
/// `deps/` is hard-linked up here first, as that build would.
pub fn libjack() -> PathBuf {
    let dir = target_dir();
    let built = dir.join("deps").join("libjack.so");
    let lib = dir.join("libjack.so");
    assert!(
        built.is_file() || lib.is_file(),
        "{} is not built: run `cargo build -p quaver-jack` first (./scripts/test does)",
        lib.display()
    );
    if built.is_file() && (!lib.is_file() || mtime(&built) > mtime(&lib)) {
        // Link beside it and rename over it: a reader never sees a half-written library.
        // The name is this call's own: tests of one binary run here at the same time.
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".libjack.so.{}.{n}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        if std::fs::hard_link(&built, &tmp).is_err() {
            std::fs::copy(&built, &tmp).expect("copying deps/libjack.so");
        }
        std::fs::rename(&tmp, &lib).expect("putting libjack.so next to quaver-jack");
    }
    lib
}

/// Fails if a source listed in cargo's dep-info file `dep_info` is newer than `bin`:
/// tests of another crate would otherwise run yesterday's daemon without a word.
fn assert_fresh(bin: &Path, dep_info: &Path) {
    let Ok(text) = std::fs::read_to_string(dep_info) else {
        return;
    };
    let Some((_, deps)) = text.lines().next().and_then(|l| l.split_once(": ")) else {
        return;
    };
    let built = mtime(bin);
    // Cargo escapes a space inside a path as "\ ".
    for dep in deps.replace("\\ ", "\0").split_whitespace() {
        let src = PathBuf::from(dep.replace('\0', " "));
        if std::fs::metadata(&src).is_ok() && mtime(&src) > built {
            panic!(
                "{} is older than {}: {BUILD_HINT}",
                bin.display(),
                src.display()
            );
        }
    }
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn set_mtime(p: &Path, t: SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[test]
    fn a_binary_older_than_a_listed_source_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, src, dep) = (
            dir.path().join("quaverd"),
            dir.path().join("a b.rs"),
            dir.path().join("quaverd.d"),
        );
        std::fs::write(&bin, "").unwrap();
        std::fs::write(&src, "").unwrap();
        let escaped = src.display().to_string().replace(' ', "\\ ");
        std::fs::write(&dep, format!("{}: /gone.rs {escaped}\n", bin.display())).unwrap();
        let now = SystemTime::now();
        set_mtime(&src, now - Duration::from_secs(60));
        set_mtime(&bin, now);
        assert_fresh(&bin, &dep);
        set_mtime(&src, now + Duration::from_secs(60));
        let stale = std::panic::catch_unwind(|| assert_fresh(&bin, &dep));
        let msg = *stale.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("a b.rs") && msg.contains("cargo build"),
            "{msg}"
        );
    }

    #[test]
    fn binaries_are_looked_up_beside_deps() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(exe.parent().unwrap().file_name().unwrap(), "deps");
        assert_eq!(target_dir(), exe.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let missing = std::panic::catch_unwind(|| bin("no-such-quaver-binary"));
        let msg = *missing.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("cargo build --workspace --bins"), "{msg}");
    }
}
