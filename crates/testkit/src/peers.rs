//! Rival servers from Debian, started headless for a test: PulseAudio in a directory of
//! the test's, on its own runtime directory and socket, stopped by PID.

use crate::{WAIT, on_path, signal, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// `pulseaudio`'s arguments for a test's private server (shared with quaver-bench).
pub use quaver_client::peers::PULSEAUDIO_HEADLESS;

/// A headless `pulseaudio` (module-native-protocol-unix on `<xdg>/pulse/native`), with
/// the modules a test asks for; SIGTERM by PID when dropped.
pub struct Pulseaudio {
    child: Child,
    xdg: PathBuf,
    home: PathBuf,
    log: PathBuf,
}

impl Pulseaudio {
    /// Starts it in `dir` (its HOME and log there) on runtime directory `xdg`, loading
    /// each of `modules` (`"module-null-sink sink_name=null"`, ...) before the native
    /// protocol; waits until its socket answers. `None`, with a SKIPPED line naming
    /// `what` is not tested, when pulseaudio is not installed.
    pub fn start(dir: &Path, xdg: &Path, modules: &[&str], what: &str) -> Option<Pulseaudio> {
        if !on_path("pulseaudio") {
            eprintln!("SKIPPED: pulseaudio not installed (Debian: pulseaudio); {what} not tested");
            return None;
        }
        let home = dir.join("pahome");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(xdg).unwrap();
        let log = dir.join("pulseaudio.log");
        let mut cmd = Command::new("pulseaudio");
        cmd.env("XDG_RUNTIME_DIR", xdg)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("PULSE_RUNTIME_PATH", xdg.join("pulse"))
            .env_remove("PULSE_SERVER")
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .args(PULSEAUDIO_HEADLESS);
        for m in modules {
            cmd.args(["-L", m]);
        }
        cmd.args(["-L", "module-native-protocol-unix"]);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning pulseaudio");
        let pa = Pulseaudio {
            child,
            xdg: xdg.to_path_buf(),
            home,
            log,
        };
        let sock = pa.socket();
        if !wait_until(WAIT, || {
            std::os::unix::net::UnixStream::connect(&sock).is_ok()
        }) {
            panic!(
                "pulseaudio did not listen on {}:\n{}",
                sock.display(),
                pa.log_text()
            );
        }
        Some(pa)
    }

    /// Its socket, `<xdg>/pulse/native`.
    pub fn socket(&self) -> PathBuf {
        self.xdg.join("pulse").join("native")
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sets a client command's environment so that it talks to this server.
    pub fn client_env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("XDG_RUNTIME_DIR", &self.xdg)
            .env("HOME", &self.home)
            .env("PULSE_SERVER", format!("unix:{}", self.socket().display()))
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
    }

    /// Stops it (SIGTERM by PID, then SIGKILL after the bounded wait) and reaps it.
    pub fn stop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), libc::SIGTERM);
            let _ = wait_until(WAIT, || self.child.try_wait().ok().flatten().is_some());
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Pulseaudio {
    fn drop(&mut self) {
        self.stop();
    }
}
