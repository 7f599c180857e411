//! The peers of the interoperation test: Debian's PulseAudio 16 and PipeWire, each
//! started headless in a network namespace with its own runtime, home and config
//! directories, its RTP receiver loaded at start and its RTP sender started later
//! ([`Peer::start_sender`]) so its first SAP announcement reaches a quaverd already
//! listening. Stopped by PID (SIGTERM, then SIGKILL after a bounded wait).

use quaver_testkit::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// PulseAudio 16: module-rtp-recv at start, module-rtp-send loaded with pactl.
    PulseAudio,
    /// PipeWire: module-rtp-source in the daemon's config, module-rtp-sink in a second
    /// `pipewire -c` process (as pipewire-pulse is one).
    PipeWire,
}

/// PipeWire's module directory in Debian (libpipewire-0.3-modules).
const PW_MODULES: &str = "/usr/lib/x86_64-linux-gnu/pipewire-0.3";

impl Kind {
    /// Why this peer cannot run here (a program or module missing), if it cannot.
    pub fn missing(self) -> Option<String> {
        let progs: &[&str] = match self {
            Kind::PulseAudio => &["pulseaudio", "pactl", "paplay", "parec"],
            Kind::PipeWire => &[
                "pipewire",
                "wireplumber",
                "pipewire-pulse",
                "dbus-daemon",
                "pactl",
                "paplay",
                "parec",
            ],
        };
        if let Some(p) = progs.iter().find(|p| !on_path(p)) {
            return Some(format!("{p} is not installed"));
        }
        if self == Kind::PipeWire {
            for m in ["rtp-sink", "rtp-source"] {
                let so = format!("{PW_MODULES}/libpipewire-module-{m}.so");
                if !Path::new(&so).exists() {
                    return Some(format!("{so} is not installed"));
                }
            }
        }
        None
    }

    /// The start of the session name the peer's sender announces by default.
    pub fn session_prefix(self) -> &'static str {
        match self {
            Kind::PulseAudio => "PulseAudio RTP Stream on ",
            Kind::PipeWire => "PipeWire RTP Stream on ",
        }
    }

    /// The sink whose playback the peer sends.
    pub fn sending_sink(self) -> &'static str {
        match self {
            // module-rtp-send sends the `send` null sink's monitor.
            Kind::PulseAudio => "send",
            // module-rtp-sink is a sink of its own.
            Kind::PipeWire => "rtp-sink",
        }
    }
}

/// The PipeWire daemon's drop-in: no D-Bus, 48 kHz, a null sink driving the graph (the
/// default sink, where module-rtp-source's streams play), and the RTP receiver.
const PW_CONF: &str = r#"context.properties = {
    support.dbus = false
    default.clock.rate = 48000
    default.clock.allowed-rates = [ 48000 ]
}
context.objects = [
    { factory = adapter
      args = {
          factory.name = support.null-audio-sink
          node.name = "null"
          media.class = "Audio/Sink"
          audio.rate = 48000
          audio.channels = 2
          audio.position = [ FL FR ]
          node.driver = true
          priority.driver = 20000
          priority.session = 20000
          object.linger = true
      }
    }
]
context.modules = [
    { name = libpipewire-module-rtp-source args = { sess.latency.msec = 100 } }
]
"#;

/// The second PipeWire process: a client of the daemon holding module-rtp-sink with its
/// defaults (L16 48 kHz stereo to 224.0.0.56, SAP to 224.0.0.56:9875), made a sink.
const PW_SINK_CONF: &str = r#"context.properties = { support.dbus = false }
context.spa-libs = {
    audio.convert.* = audioconvert/libspa-audioconvert
    support.*       = support/libspa-support
}
context.modules = [
    { name = libpipewire-module-protocol-native }
    { name = libpipewire-module-client-node }
    { name = libpipewire-module-adapter }
    { name = libpipewire-module-rtp-sink
      args = { stream.props = { media.class = "Audio/Sink" node.name = "rtp-sink" } }
    }
]
"#;

/// WirePlumber 0.4 drop-ins: no device monitors.
const WP_MAIN: &str = "alsa_monitor.enabled = false\nv4l2_monitor = v4l2_monitor or {}\n\
v4l2_monitor.enabled = false\nlibcamera_monitor = libcamera_monitor or {}\n\
libcamera_monitor.enabled = false\n";
const WP_BT: &str = "bluez_monitor = bluez_monitor or {}\nbluez_monitor.enabled = false\n";

/// A running peer.
pub struct Peer {
    pub kind: Kind,
    ns: String,
    dir: tempfile::TempDir,
    /// Started processes, in start order (stopped in reverse).
    children: Vec<(String, Child)>,
    /// Every process's name, stopped or not (their logs).
    names: Vec<String>,
}

/// Bound on every wait for a peer.
const WAIT: Duration = Duration::from_secs(10);

impl Peer {
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// A command run with the peer's directories (in its namespace when `netns`).
    fn command(&self, prog: &str, netns: bool) -> Command {
        let mut c = if netns {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &self.ns, prog]);
            c
        } else {
            Command::new(prog)
        };
        let xdg = self.path("xdg");
        c.env("XDG_RUNTIME_DIR", &xdg)
            .env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("PULSE_RUNTIME_PATH", xdg.join("pulse"))
            .env(
                "DBUS_SESSION_BUS_ADDRESS",
                format!("unix:path={}", xdg.join("bus").display()),
            )
            .env_remove("PULSE_SERVER")
            .env_remove("PIPEWIRE_REMOTE")
            .stdin(Stdio::null());
        c
    }

    /// Starts `prog ARGS` in the namespace, its stderr in `NAME.log`.
    fn spawn(&mut self, name: &str, prog: &str, args: &[&str]) {
        let log = std::fs::File::create(self.path(&format!("{name}.log"))).unwrap();
        let child = self
            .command(prog, true)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {prog}: {e}"));
        self.children.push((name.to_string(), child));
        self.names.push(name.to_string());
    }

    /// The logs of every process, for failure messages.
    pub fn logs(&self) -> String {
        self.names
            .iter()
            .map(|n| {
                let t = std::fs::read_to_string(self.path(&format!("{n}.log"))).unwrap_or_default();
                let tail: Vec<&str> = t.lines().rev().take(60).collect();
                format!(
                    "--- {n} (last lines):\n{}\n",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }

    /// Runs a PulseAudio client (pactl …) against the peer, bounded.
    pub fn client(&self, prog: &str, args: &[&str]) -> Output {
        let child = self
            .command(prog, false)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{prog}: {e}"));
        wait_output(child, WAIT)
    }

    /// Starts a PulseAudio client without waiting (paplay, parec).
    pub fn client_spawn(&self, prog: &str, args: &[&str]) -> Child {
        self.command(prog, false)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    /// Starts the peer in namespace `ns` with its RTP receiver, and waits until its
    /// PulseAudio socket answers.
    pub fn start(kind: Kind, ns: &str) -> Peer {
        let mut p = Peer::empty(kind, ns);
        use std::os::unix::fs::DirBuilderExt;
        match kind {
            Kind::PulseAudio => p.spawn(
                "pulseaudio",
                "pulseaudio",
                &[
                    quaver_testkit::peers::PULSEAUDIO_HEADLESS,
                    &[
                        "--log-level=info",
                        // PulseAudio's default format: s16le 44.1 kHz stereo.
                        "-L",
                        "module-null-sink sink_name=null",
                        "-L",
                        "module-native-protocol-unix",
                        // What the peer sends: a sink of its own, so what it receives
                        // (played into `null`) is not sent back.
                        "-L",
                        "module-null-sink sink_name=send",
                        "-L",
                        "module-rtp-recv sink=null latency_msec=100",
                    ],
                ]
                .concat(),
            ),
            Kind::PipeWire => {
                let cfg = p.path("config");
                let files = [
                    ("pipewire/pipewire.conf.d/90-test.conf", PW_CONF),
                    ("pipewire/rtp-sink.conf", PW_SINK_CONF),
                    (
                        "pipewire/pipewire-pulse.conf.d/90-test.conf",
                        "context.properties = {\n    support.dbus = false\n}\n",
                    ),
                    ("wireplumber/main.lua.d/90-test.lua", WP_MAIN),
                    ("wireplumber/bluetooth.lua.d/90-test.lua", WP_BT),
                ];
                for (name, text) in files {
                    let f = cfg.join(name);
                    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                    std::fs::write(f, text).unwrap();
                }
                // pipewire-pulse fails if the readiness probe's libpulse makes this first.
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(p.path("xdg/pulse"))
                    .unwrap();
                let bus = format!("--address=unix:path={}", p.path("xdg/bus").display());
                p.spawn(
                    "dbus-daemon",
                    "dbus-daemon",
                    &["--session", &bus, "--nofork", "--nopidfile"],
                );
                let bus_up = wait_until(WAIT, || p.path("xdg/bus").exists());
                assert!(bus_up, "dbus-daemon did not start:\n{}", p.logs());
                p.spawn("pipewire", "pipewire", &[]);
                let pw_up = wait_until(WAIT, || p.path("xdg/pipewire-0").exists());
                assert!(pw_up, "pipewire did not start:\n{}", p.logs());
                p.spawn("wireplumber", "wireplumber", &[]);
                p.spawn("pipewire-pulse", "pipewire-pulse", &[]);
            }
        }
        let up = wait_until(WAIT, || p.client("pactl", &["info"]).status.success());
        assert!(up, "{kind:?} did not answer pactl info:\n{}", p.logs());
        p
    }

    /// A peer with its directories made and nothing started.
    fn empty(kind: Kind, ns: &str) -> Peer {
        let p = Peer {
            kind,
            ns: ns.to_string(),
            dir: tempfile::tempdir().unwrap(),
            children: Vec::new(),
            names: Vec::new(),
        };
        for d in ["xdg", "home", "config"] {
            std::fs::create_dir_all(p.path(d)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p.path("xdg"), std::fs::Permissions::from_mode(0o700)).unwrap();
        p
    }

    /// PulseAudio in namespace `ns` with exactly `modules` and its unix socket (for the
    /// test's tools); waits until it answers.
    pub fn pulseaudio_with(ns: &str, modules: &[String]) -> Peer {
        let mut p = Peer::empty(Kind::PulseAudio, ns);
        p.spawn_pulseaudio("pulseaudio", modules);
        p
    }

    /// Starts (again) PulseAudio with `modules`, its log in `NAME.log`; waits until it
    /// answers.
    pub fn spawn_pulseaudio(&mut self, name: &str, modules: &[String]) {
        let mut args: Vec<&str> = quaver_testkit::peers::PULSEAUDIO_HEADLESS.to_vec();
        args.push("--log-level=info");
        for m in modules {
            args.extend(["-L", m.as_str()]);
        }
        args.extend(["-L", "module-native-protocol-unix"]);
        self.spawn(name, "pulseaudio", &args);
        let up = wait_until(WAIT, || self.client("pactl", &["info"]).status.success());
        assert!(up, "PulseAudio did not answer pactl info:\n{}", self.logs());
    }

    /// Starts the peer's RTP sender (its SAP announcement leaves at once).
    pub fn start_sender(&mut self) {
        match self.kind {
            Kind::PulseAudio => {
                ok(&self.client(
                    "pactl",
                    &["load-module", "module-rtp-send", "source=send.monitor"],
                ));
            }
            Kind::PipeWire => {
                let conf = self.path("config/pipewire/rtp-sink.conf");
                let conf = conf.to_str().unwrap().to_string();
                self.spawn("rtp-sink", "pipewire", &["-c", &conf]);
                let up = wait_until(WAIT, || {
                    text(&self.client("pactl", &["list", "short", "sinks"])).contains("rtp-sink")
                });
                assert!(up, "PipeWire's rtp-sink did not appear:\n{}", self.logs());
            }
        }
    }

    /// Waits until the peer plays a received RTP stream whose properties name `session`.
    pub fn wait_receiving(&self, session: &str) -> bool {
        wait_until(WAIT, || {
            text(&self.client("pactl", &["list", "sink-inputs"])).contains(session)
        })
    }

    /// Stops every process, last started first: SIGTERM, then SIGKILL after 3 s.
    pub fn stop(&mut self) {
        while let Some((name, mut child)) = self.children.pop() {
            signal(child.id(), libc::SIGTERM);
            let t0 = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if t0.elapsed() > Duration::from_secs(3) {
                    eprintln!("{name} ignored SIGTERM for 3 s; killed");
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Amplitude of the `freq` component of `x` (Goertzel), as a sine of that amplitude
/// would give.
pub fn tone_amplitude(x: &[f32], rate: u32, freq: f64) -> f64 {
    let w = 2.0 * std::f64::consts::PI * freq / rate as f64;
    let c = 2.0 * w.cos();
    let (mut s1, mut s2) = (0.0f64, 0.0f64);
    for &v in x {
        let s = v as f64 + c * s1 - s2;
        s2 = s1;
        s1 = s;
    }
    let p = s1 * s1 + s2 * s2 - c * s1 * s2;
    p.max(0.0).sqrt() * 2.0 / x.len() as f64
}

/// Checks that `left` (one channel) holds a steady sine of `freq` at `amp` (±10 %) in
/// its loudest tenth of a second (short enough that PulseAudio's receiver, which moves
/// its rate by up to 2 ‰ to hold its latency, does not smear the tone out of the
/// measure), with nothing else in it (its RMS is the sine's) and no
/// trace of `absent`; returns what was measured, or why not.
pub fn check_tone(
    left: &[f32],
    rate: u32,
    freq: f64,
    amp: f64,
    absent: f64,
) -> Result<String, String> {
    let win = rate as usize / 10;
    let best = left
        .chunks_exact(win)
        .map(|w| (tone_amplitude(w, rate, freq), w))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let Some((a, w)) = best else {
        return Err(format!("only {} frames recorded", left.len()));
    };
    let rms = (w.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>() / w.len() as f64).sqrt();
    let other = tone_amplitude(w, rate, absent);
    let got = format!(
        "{freq} Hz at {a:.3} (want {amp}), RMS {rms:.3} (a pure sine: {:.3}), {absent} Hz at {other:.4}",
        a / 2f64.sqrt()
    );
    let pure = (rms - a / 2f64.sqrt()).abs() < 0.05 * amp;
    if (a - amp).abs() < 0.1 * amp && pure && other < 0.01 {
        Ok(got)
    } else {
        Err(got)
    }
}

/// The first channel of interleaved stereo.
pub fn left(interleaved: &[f32]) -> Vec<f32> {
    interleaved.iter().step_by(2).copied().collect()
}
