//! quaverd's configuration: one TOML file, every key optional, command-line flags on top.
//!
//! The annotated example at `config/quaver.toml` documents every key; a test keeps it
//! parseable and in sync with the defaults here.

use anyhow::{Context, Result, bail};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_policy::PolicyConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole configuration file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`: where and how the daemon serves.
    pub server: ServerConfig,
    /// `[engine]`: graph engine and devices.
    pub engine: EngineSection,
    /// `[policy]`: routing defaults.
    pub policy: PolicyConfig,
    /// `[pulse]`: the PulseAudio front-end.
    pub pulse: PulseSection,
    /// `[callback]`: JACK-style callback clients.
    pub callback: CallbackSection,
    /// `[[filters]]`: filter chains on device sinks.
    pub filters: Vec<crate::filters::SinkChain>,
    /// `[[chains]]`: named filter chains the rule file puts on single streams.
    pub chains: Vec<crate::stream_chains::NamedChain>,
    /// `[net]`: network audio (SAP discovery of RTP streams).
    pub net: crate::netdiscover::NetSection,
    /// `[[echo_cancel]]`: echo-cancel source/sink pairs.
    pub echo_cancel: Vec<crate::echo::EchoCancel>,
}

/// `[callback]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CallbackSection {
    /// Fraction of the quantum period, from the cycle start, by which a synchronous
    /// callback client must have answered (0.05..=1.0).
    pub deadline: f64,
    /// Consecutive woken cycles answered late after which a client runs
    /// asynchronously (one quantum later, never waited on); 0: never.
    pub async_after: u32,
    /// Milliseconds a client may leave every cycle unanswered before it is taken as hung
    /// and run asynchronously; 0: never.
    pub hung_ms: u32,
    /// Milliseconds of asynchronous answers all in time after which a client goes back
    /// to synchronous mode; 0: never.
    pub recover_ms: u32,
    /// Most ports of one direction a callback client may register (1..=4096).
    pub max_ports: u32,
    /// Microseconds the RT thread may poll a synchronous client's completion around its
    /// expected answer before blocking on it (0..=500; 0: block at once).
    pub spin_us: u32,
    /// Every client asynchronous from its first cycle, as jackd2 without `-S`: one
    /// wakeup of the RT thread per cycle instead of two, one quantum more latency.
    pub asynchronous: bool,
}

impl Default for CallbackSection {
    fn default() -> Self {
        let c = crate::native::CallbackOptions::default();
        CallbackSection {
            deadline: c.deadline,
            async_after: c.async_after,
            hung_ms: c.hung_ms,
            recover_ms: c.recover_ms,
            max_ports: c.max_ports,
            spin_us: c.spin_us,
            asynchronous: c.asynchronous,
        }
    }
}

impl CallbackSection {
    /// The native front-end's options these settings make.
    pub fn options(&self) -> crate::native::CallbackOptions {
        crate::native::CallbackOptions {
            deadline: self.deadline,
            async_after: self.async_after,
            hung_ms: self.hung_ms,
            recover_ms: self.recover_ms,
            max_ports: self.max_ports,
            spin_us: self.spin_us,
            asynchronous: self.asynchronous,
        }
    }
}

/// Whether the engine's thread sends playback requests itself unless configured: it
/// saves the I/O thread a wakeup per request (docs/pulse/rt-requests.md).
const RT_REQUESTS_DEFAULT: bool = true;

/// `[pulse]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PulseSection {
    /// Serve the PulseAudio native protocol.
    pub enabled: bool,
    /// Socket path; default `$XDG_RUNTIME_DIR/pulse/native`.
    pub socket: Option<PathBuf>,
    /// Most PulseAudio clients at once.
    pub max_clients: usize,
    /// Most streams per PulseAudio client.
    pub max_streams_per_client: usize,
    /// TCP address to serve PulseAudio on (`host:port`); off when unset.
    pub tcp: Option<String>,
    /// TCP clients from these addresses (`a.b.c.d`, `a.b.c.d/n`, IPv6 too) need no cookie.
    pub tcp_allow: Vec<String>,
    /// The auth cookie other TCP clients must present; default `~/.config/pulse/cookie`
    /// (created when missing).
    pub cookie: Option<PathBuf>,
    /// Let clients send audio as references into their memfd pools.
    pub memfd: bool,
    /// Offer memfd clients the shared ring-buffer channel (packets through shared memory).
    pub srbchannel: bool,
    /// Send memfd clients record audio as references into a memfd pool of the server's.
    pub memfd_record: bool,
    /// The front-end's I/O thread runs SCHED_FIFO while a playback stream leaves its
    /// client less than this many ms to answer a request (0: never).
    pub realtime_io_below_ms: u32,
    /// The engine's thread sends playback streams' requests to their clients itself
    /// (one wakeup per request instead of two).
    pub rt_requests: bool,
    /// Remember stream volumes, mutes and devices by kind of stream (stream restore).
    pub stream_restore: bool,
    /// Stream restore's file; default `$XDG_STATE_HOME/quaver/restore.toml`.
    pub restore_file: Option<PathBuf>,
    /// PulseAudio modules to load at start, in order, each as `pactl load-module` takes
    /// it ("module-null-sink sink_name=vmic").
    pub modules: Vec<String>,
    /// Let a client stop the server with EXIT (`pactl exit`), as PulseAudio does unless
    /// started with `--disallow-exit`.
    pub allow_exit: bool,
}

impl Default for PulseSection {
    fn default() -> Self {
        PulseSection {
            enabled: true,
            socket: None,
            max_clients: 256,
            max_streams_per_client: 64,
            tcp: None,
            tcp_allow: Vec::new(),
            cookie: None,
            memfd: true,
            srbchannel: true,
            memfd_record: true,
            realtime_io_below_ms: 8,
            rt_requests: RT_REQUESTS_DEFAULT,
            stream_restore: true,
            restore_file: None,
            modules: Vec::new(),
            allow_exit: true,
        }
    }
}

/// `[server]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Runtime directory holding the socket; default `$XDG_RUNTIME_DIR/quaver`.
    pub runtime_dir: Option<PathBuf>,
    /// Log level: error, warn, info, debug or trace.
    pub log_level: String,
    /// Most simultaneous clients.
    pub max_clients: usize,
    /// Most streams per client.
    pub max_streams_per_client: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            runtime_dir: None,
            log_level: "info".into(),
            max_clients: 256,
            max_streams_per_client: 64,
        }
    }
}

/// `[engine]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// Devices to open; the first drives the clock. `"auto"` (the default, and what an
    /// empty list means) stands for every ALSA card found, else the null device.
    pub devices: Vec<String>,
    /// Sample rate for devices that do not name one.
    pub rate: u32,
    /// Channel layout for devices that do not name one.
    pub channels: String,
    /// Smallest quantum, frames (power of two).
    pub quantum_min: usize,
    /// Largest quantum, frames (power of two).
    pub quantum_max: usize,
    /// Quantum when no stream asks for a latency.
    pub quantum_default: usize,
    /// SCHED_FIFO priority of the audio thread; 0 keeps normal scheduling.
    pub realtime_priority: i32,
    /// Real-time class: "fifo", or "deadline" (SCHED_DEADLINE with one quantum as
    /// period, half of it as runtime; SCHED_FIFO when refused).
    pub scheduler: String,
    /// Memory locking: "auto" (mlockall when unlimited, else the RT stack), "all" or
    /// "off".
    pub lock_memory: String,
    /// Idle time before devices suspend, ms; 0 never suspends.
    pub suspend_timeout_ms: u64,
    /// Most graph nodes.
    pub max_nodes: usize,
    /// Link and volume ramp length, frames.
    pub ramp_frames: usize,
    /// Resampler quality: fast, medium or high.
    pub resample_quality: String,
    /// Time every node per cycle (`quaver top`): one clock read per node boundary.
    pub node_timing: bool,
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            devices: vec![crate::cards::AUTO.into()],
            rate: 48000,
            channels: "stereo".into(),
            quantum_min: 32,
            quantum_max: 8192,
            quantum_default: 1024,
            realtime_priority: 20,
            scheduler: "fifo".into(),
            lock_memory: "auto".into(),
            suspend_timeout_ms: 3000,
            max_nodes: 1024,
            ramp_frames: 256,
            resample_quality: "medium".into(),
            node_timing: true,
        }
    }
}

impl Config {
    /// Parses a configuration file's text; errors name the line and the key.
    pub fn parse(text: &str, origin: &Path) -> Result<Config> {
        let cfg: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}: {}", origin.display(), e.to_string().trim_end()))?;
        cfg.validate()
            .with_context(|| format!("{}: invalid value", origin.display()))?;
        Ok(cfg)
    }

    /// Loads `path`, or the default location if `path` is None (absent file = defaults).
    pub fn load(path: Option<&Path>) -> Result<(Config, Option<PathBuf>)> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => match default_config_path() {
                Some(p) => (p, false),
                None => return Ok((Config::default(), None)),
            },
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok((Config::parse(&text, &path)?, Some(path))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => {
                Ok((Config::default(), None))
            }
            Err(e) => Err(e).with_context(|| format!("reading config {}", path.display())),
        }
    }

    /// Checks values that TOML types alone cannot.
    pub fn validate(&self) -> Result<()> {
        self.net.validate()?;
        crate::filters::validate(&self.filters)?;
        crate::stream_chains::validate(&self.chains)?;
        let e = &self.engine;
        if e.devices
            .iter()
            .filter(|d| d.trim() == crate::cards::AUTO)
            .count()
            > 1
        {
            bail!("engine.devices names \"auto\" more than once");
        }
        if !(1..=384_000).contains(&e.rate) {
            bail!("engine.rate {} is outside 1..=384000", e.rate);
        }
        e.channels
            .parse::<ChannelMap>()
            .map_err(|err| anyhow::anyhow!("engine.channels: {err}"))?;
        for (k, v) in [
            ("quantum_min", e.quantum_min),
            ("quantum_max", e.quantum_max),
            ("quantum_default", e.quantum_default),
        ] {
            if !v.is_power_of_two() || !(16..=65536).contains(&v) {
                bail!("engine.{k} = {v} must be a power of two in 16..=65536");
            }
        }
        if !(e.quantum_min <= e.quantum_default && e.quantum_default <= e.quantum_max) {
            bail!(
                "engine quantum bounds must satisfy quantum_min ≤ quantum_default ≤ quantum_max (got {} ≤ {} ≤ {})",
                e.quantum_min,
                e.quantum_default,
                e.quantum_max
            );
        }
        if !(0..=99).contains(&e.realtime_priority) {
            bail!(
                "engine.realtime_priority {} is outside 0..=99",
                e.realtime_priority
            );
        }
        e.scheduler
            .parse::<quaver_engine::sched::Scheduler>()
            .map_err(|err| anyhow::anyhow!("engine.scheduler: {err}"))?;
        e.lock_memory
            .parse::<quaver_engine::sched::MemoryLock>()
            .map_err(|err| anyhow::anyhow!("engine.lock_memory: {err}"))?;
        if e.max_nodes == 0 || e.max_nodes > 65536 {
            bail!("engine.max_nodes {} is outside 1..=65536", e.max_nodes);
        }
        e.resample_quality
            .parse::<ResampleQuality>()
            .map_err(|err| anyhow::anyhow!("engine.resample_quality: {err}"))?;
        self.policy.roles.validate()?;
        let c = &self.callback;
        if !(0.05..=1.0).contains(&c.deadline) {
            bail!(
                "callback.deadline {} is outside 0.05..=1.0 (a fraction of the quantum period)",
                c.deadline
            );
        }
        if c.hung_ms > 60_000 {
            bail!(
                "callback.hung_ms {} is above 60000 (a minute of silence is not a stall)",
                c.hung_ms
            );
        }
        if c.recover_ms > 3_600_000 {
            bail!(
                "callback.recover_ms {} is above 3600000 (use 0 to never go back to sync)",
                c.recover_ms
            );
        }
        if !(1..=4096).contains(&c.max_ports) {
            bail!("callback.max_ports {} is outside 1..=4096", c.max_ports);
        }
        if c.spin_us > 500 {
            bail!(
                "callback.spin_us {} is above 500 (a spin longer than that costs more \
                 CPU than the wakeup it saves)",
                c.spin_us
            );
        }
        let p = &self.pulse;
        if p.max_clients == 0 || p.max_streams_per_client == 0 {
            bail!("pulse.max_clients and pulse.max_streams_per_client must be at least 1");
        }
        if let Some(s) = &p.socket
            && s.as_os_str().is_empty()
        {
            bail!("pulse.socket must not be empty");
        }
        if p.realtime_io_below_ms > 1000 {
            bail!(
                "pulse.realtime_io_below_ms {} is above 1000 (use 0 to keep the I/O thread \
                 a normal thread)",
                p.realtime_io_below_ms
            );
        }
        if let Some(t) = &p.tcp
            && t.parse::<std::net::SocketAddr>().is_err()
        {
            bail!("pulse.tcp '{t}' must be an address and port, e.g. \"127.0.0.1:4713\"");
        }
        for a in &p.tcp_allow {
            quaver_pulse::tcp::Net::parse(a)
                .map_err(|e| anyhow::anyhow!("pulse.tcp_allow: {e}"))?;
        }
        if !["error", "warn", "info", "debug", "trace"].contains(&self.server.log_level.as_str()) {
            bail!(
                "server.log_level '{}' must be one of error, warn, info, debug, trace",
                self.server.log_level
            );
        }
        Ok(())
    }

    /// The engine settings this configuration asks for.
    pub fn engine_config(&self) -> quaver_engine::EngineConfig {
        let e = &self.engine;
        quaver_engine::EngineConfig {
            quantum_min: e.quantum_min,
            quantum_max: e.quantum_max,
            quantum_default: e.quantum_default,
            rt_priority: e.realtime_priority,
            scheduler: e.scheduler.parse().unwrap_or_default(),
            lock_memory: e.lock_memory.parse().unwrap_or_default(),
            suspend_timeout: (e.suspend_timeout_ms > 0)
                .then(|| Duration::from_millis(e.suspend_timeout_ms)),
            max_nodes: e.max_nodes,
            ramp_frames: e.ramp_frames.max(1),
            node_timing: e.node_timing,
        }
    }

    /// The PulseAudio socket path: configured, else `$XDG_RUNTIME_DIR/pulse/native`.
    pub fn pulse_socket(&self) -> PathBuf {
        self.pulse
            .socket
            .clone()
            .unwrap_or_else(quaver_pulse::default_socket_path)
    }

    /// The runtime directory: configured, else `$XDG_RUNTIME_DIR/quaver` (or the
    /// protocol crate's private fallback).
    pub fn runtime_dir(&self) -> PathBuf {
        self.server
            .runtime_dir
            .clone()
            .unwrap_or_else(quaver_protocol::paths::runtime_dir)
    }
}

impl Config {
    /// The rule file: `[policy] rules`, else `rules.toml` beside the default config file
    /// when it exists (docs/policy/rules.md).
    pub fn rules_path(&self) -> Option<PathBuf> {
        self.policy.rules.clone().or_else(|| {
            default_config_path()
                .map(|p| p.with_file_name("rules.toml"))
                .filter(|p| p.exists())
        })
    }

    /// Reads and checks the rule file, if there is one.
    pub fn load_rules(&self) -> Result<quaver_policy::rules::Rules> {
        match self.rules_path() {
            Some(p) => Ok(quaver_policy::rules::Rules::load(&p)?),
            None => Ok(quaver_policy::rules::Rules::none()),
        }
    }
}

/// `$XDG_CONFIG_HOME/quaver/quaver.toml`, else `~/.config/quaver/quaver.toml`.
pub fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("quaver").join("quaver.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_and_matches_defaults() {
        let text = include_str!("../../../config/quaver.toml");
        let cfg = Config::parse(text, Path::new("config/quaver.toml")).unwrap();
        assert_eq!(cfg.engine, EngineSection::default());
        assert_eq!(cfg.server, ServerConfig::default());
        assert_eq!(cfg.pulse, PulseSection::default());
        assert_eq!(cfg.callback, CallbackSection::default());
        assert_eq!(cfg.policy, PolicyConfig::default());
        assert_eq!(cfg.net, crate::netdiscover::NetSection::default());
    }

    #[test]
    fn callback_section_is_read_and_checked() {
        let cfg = Config::parse(
            "[callback]\ndeadline = 0.9\nasync_after = 0\nhung_ms = 1000\nrecover_ms = 0\nmax_ports = 16\nspin_us = 40\nasynchronous = true\n",
            Path::new("q.toml"),
        )
        .unwrap();
        assert_eq!(
            cfg.callback,
            CallbackSection {
                deadline: 0.9,
                async_after: 0,
                hung_ms: 1000,
                recover_ms: 0,
                max_ports: 16,
                spin_us: 40,
                asynchronous: true,
            }
        );
        let err = format!(
            "{:#}",
            Config::parse("[callback]\ndeadline = 1.5\n", Path::new("q.toml")).unwrap_err()
        );
        assert!(err.contains("callback.deadline"), "{err}");
        let err = format!(
            "{:#}",
            Config::parse("[callback]\nmax_ports = 0\n", Path::new("q.toml")).unwrap_err()
        );
        assert!(err.contains("callback.max_ports"), "{err}");
        let err = format!(
            "{:#}",
            Config::parse("[callback]\nspin_us = 501\n", Path::new("q.toml")).unwrap_err()
        );
        assert!(err.contains("callback.spin_us"), "{err}");
    }

    #[test]
    fn discovery_is_the_default_and_an_empty_list_means_it() {
        assert_eq!(EngineSection::default().devices, ["auto"]);
        let cfg = Config::parse("[engine]\ndevices = []\n", Path::new("q.toml")).unwrap();
        assert!(cfg.engine.devices.is_empty());
        let err = format!(
            "{:#}",
            Config::parse(
                "[engine]\ndevices = [\"auto\", \"auto\"]\n",
                Path::new("q.toml")
            )
            .unwrap_err()
        );
        assert!(err.contains("\"auto\" more than once"), "{err}");
    }

    #[test]
    fn unknown_key_names_its_line() {
        let err = Config::parse(
            "[engine]\nrate = 48000\nquantum_mni = 64\n",
            Path::new("q.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("quantum_mni"), "{err}");
    }

    #[test]
    fn bad_value_type_names_its_line() {
        let err = Config::parse("[engine]\n\nrate = \"fast\"\n", Path::new("q.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn out_of_range_values_are_refused() {
        for bad in [
            "[engine]\nquantum_min = 48\n",
            "[engine]\nrate = 0\n",
            "[engine]\nquantum_min = 4096\nquantum_default = 1024\n",
            "[engine]\nresample_quality = \"best\"\n",
            "[server]\nlog_level = \"loud\"\n",
            "[engine]\ndevices = [\"auto\", \"null\", \"auto\"]\n",
            "[pulse]\nmax_clients = 0\n",
            "[pulse]\nenable = true\n",
            "[pulse]\ntcp = \"localhost\"\n",
            "[pulse]\ntcp_allow = [\"10.0.0.0/40\"]\n",
        ] {
            assert!(Config::parse(bad, Path::new("q.toml")).is_err(), "{bad}");
        }
    }
}
