//! A tunnel module's arguments: the remote server, its device, the cookie, the latency,
//! and the local device's name and layout (checked as a null sink's are).

use super::client::{Direction, StreamWant};
use super::local::Shape;
use crate::modules::args::unescape;
use crate::modules::context::Load;
use crate::modules::null::{null_sink, source_args};
use crate::wire::convert::{Codec, map_to_pa, parse_sample_format};
use pulseaudio::protocol::{SampleFormat, SampleSpec};
use quaver_engine::NodeKind;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// PulseAudio's TCP port.
const DEFAULT_PORT: u16 = 4713;
/// PulseAudio's tunnel's default latency.
const DEFAULT_LATENCY_MS: u64 = 100;
/// Length of a PulseAudio cookie.
const COOKIE_LEN: usize = 256;
/// Longest wait between reconnection attempts unless `reconnect_interval_ms` says.
const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Arguments of the remote side, handled here; the rest go to the null sink's checks.
const REMOTE_KEYS: [&str; 5] = [
    "server",
    "cookie",
    "latency_msec",
    "format",
    "reconnect_interval_ms",
];

/// A tunnel module's arguments, checked.
pub(super) struct TunnelArgs {
    pub(super) addr: Target,
    /// The `server` argument as given (for the log).
    server: String,
    pub(super) cookie: Vec<u8>,
    pub(super) want: StreamWant,
    pub(super) shape: Shape,
    pub(super) codec: Codec,
    pub(super) latency_ms: u64,
    pub(super) max_backoff: Duration,
}

impl TunnelArgs {
    /// "`sink` on `server`" for the log.
    pub(super) fn describe_remote(&self) -> String {
        let dev = match &self.want.direction {
            Direction::Play(d) | Direction::Record(d) => d.as_deref().unwrap_or("its default"),
        };
        format!("{dev} on {} ({})", self.server, self.addr)
    }
}

/// Checks the arguments of a tunnel sink (`sink`) or source.
pub(super) fn parse(cx: &Load<'_>, sink: bool) -> Result<TunnelArgs, String> {
    let raw = &cx.args;
    let get = |k: &str| raw.get(k).map(|v| unescape(v));
    let remote_key = if sink { "sink" } else { "source" };
    let server = get("server").ok_or("no server= (tcp:HOST[:PORT])")?;
    let addr = Target::of(&server)?;
    let remote_dev = get(remote_key).filter(|d| !d.is_empty());
    let cookie = read_cookie(get("cookie").map(PathBuf::from))?;
    let latency_ms = match get("latency_msec") {
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|l| (1..=2000).contains(l))
            .ok_or_else(|| format!("latency_msec={v} is not 1-2000"))?,
        None => DEFAULT_LATENCY_MS,
    };
    let max_backoff = match get("reconnect_interval_ms") {
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|l| (100..=600_000).contains(l))
            .map(Duration::from_millis)
            .ok_or_else(|| format!("reconnect_interval_ms={v} is not 100-600000"))?,
        None => DEFAULT_MAX_BACKOFF,
    };
    let format = match get("format") {
        Some(f) => parse_sample_format(&f).ok_or_else(|| format!("unknown format '{f}'"))?,
        // The graph's own samples: nothing lost on the way.
        None => SampleFormat::Float32Le,
    };
    let codec = Codec::of(format).ok_or_else(|| format!("format {format:?} is not PCM"))?;
    // The local device: what is left, checked as a null sink's arguments.
    let host = server.trim_start_matches("tcp:").replace(':', "_");
    let default_name = format!(
        "tunnel-{}-new.{host}{}",
        if sink { "sink" } else { "source" },
        remote_dev
            .as_ref()
            .map(|d| format!(".{d}"))
            .unwrap_or_default()
    );
    let mut local: BTreeMap<String, String> = raw.clone();
    local.retain(|k, _| !REMOTE_KEYS.contains(&k.as_str()) && k != remote_key);
    let local = if sink {
        local
            .entry("sink_name".into())
            .or_insert_with(|| default_name.clone());
        for k in local.keys() {
            if k.starts_with("source") {
                return Err(format!("unknown argument '{k}'"));
            }
        }
        local
    } else {
        source_args(&local, &[], default_name)?
    };
    let engine_rate = cx.srv.engine.rate();
    let mut plan =
        null_sink(&local, &cx.default_map, engine_rate).map_err(|_| "bad device arguments")?;
    if !sink {
        // Its inputs stay: the feeder in front of it plays into them.
        plan.spec.kind = NodeKind::DeviceSource;
    }
    if !local.contains_key("sink_properties") {
        plan.spec.description = format!(
            "Tunnel to {}@{server}",
            remote_dev.as_deref().unwrap_or("default")
        );
    }
    let map = if sink {
        plan.spec.inputs.clone()
    } else {
        plan.spec.outputs.clone()
    };
    let spec = SampleSpec {
        format,
        channels: map.len() as u8,
        sample_rate: engine_rate,
    };
    let latency = (engine_rate as u64 * latency_ms / 1000) as usize;
    let bytes = (latency * map.len() * codec.bytes()) as u32;
    let name = format!("quaver tunnel from {}", plan.spec.name);
    let want = StreamWant {
        direction: if sink {
            Direction::Play(remote_dev)
        } else {
            Direction::Record(remote_dev)
        },
        spec,
        map: map_to_pa(&map),
        // A record stream's fragments: a quarter of the latency each.
        bytes: if sink { bytes } else { (bytes / 4).max(1) },
        name,
    };
    let shape = Shape {
        device: plan.spec,
        map,
        rate: engine_rate,
        latency,
        max_quantum: cx.srv.engine.config().quantum_max,
        quality: cx.srv.opts.resample_quality,
    };
    Ok(TunnelArgs {
        addr,
        server,
        cookie,
        want,
        shape,
        codec,
        latency_ms,
        max_backoff,
    })
}

/// The remote `server=` names: an address, or a host name that the network thread
/// resolves before each connection (a slow resolver never holds up the I/O thread).
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// `server=` as given, for errors.
    server: String,
    /// `HOST:PORT` or `[ADDR]:PORT`.
    with_port: String,
    /// The address, when `server=` gave one.
    literal: Option<SocketAddr>,
}

impl Target {
    /// Checks `server` (`tcp:HOST:PORT`, `tcp:HOST`, `HOST:PORT`, `tcp6:[ADDR]:PORT`…)
    /// without resolving it.
    fn of(server: &str) -> Result<Target, String> {
        let with_port = with_port(server)?;
        Ok(Target {
            server: server.to_string(),
            literal: with_port.parse().ok(),
            with_port,
        })
    }

    /// The address to connect to (a name is looked up: this may block).
    pub(super) fn resolve(&self) -> Result<SocketAddr, String> {
        match self.literal {
            Some(a) => Ok(a),
            None => lookup(&self.server, &self.with_port),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.literal {
            Some(a) => a.fmt(f),
            None => f.write_str(&self.with_port),
        }
    }
}

/// `tcp:HOST:PORT`, `tcp:HOST`, `HOST:PORT`, `tcp6:[ADDR]:PORT`… to one address.
#[cfg(test)]
fn resolve(server: &str) -> Result<SocketAddr, String> {
    lookup(server, &with_port(server)?)
}

/// `HOST:PORT` of `server`, PulseAudio's port when it names none.
fn with_port(server: &str) -> Result<String, String> {
    if server.starts_with("unix:") || server.starts_with('/') {
        return Err(format!(
            "server={server}: a tunnel goes over TCP (tcp:HOST[:PORT])"
        ));
    }
    let rest = server
        .strip_prefix("tcp:")
        .or_else(|| server.strip_prefix("tcp4:"))
        .or_else(|| server.strip_prefix("tcp6:"))
        .unwrap_or(server);
    if rest.is_empty() {
        return Err(format!("server={server} names no host"));
    }
    // A port is what follows the last colon of a name or IPv4 address, or a bracketed
    // IPv6 address.
    Ok(if rest.starts_with('[') {
        if rest.contains("]:") {
            rest.to_string()
        } else {
            format!("{rest}:{DEFAULT_PORT}")
        }
    } else if rest.matches(':').count() == 1 {
        rest.to_string()
    } else if rest.contains(':') {
        format!("[{rest}]:{DEFAULT_PORT}")
    } else {
        format!("{rest}:{DEFAULT_PORT}")
    })
}

/// The first address of `with_port` (`server=`'s, named in errors).
fn lookup(server: &str, with_port: &str) -> Result<SocketAddr, String> {
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("server={server}: {e}"))?
        .next()
        .ok_or_else(|| format!("server={server}: no address"))
}

/// The cookie at `path`, else where libpulse looks (`$PULSE_COOKIE`,
/// `$XDG_CONFIG_HOME/pulse/cookie`, `~/.config/pulse/cookie`, `~/.pulse-cookie`); none
/// there is an anonymous AUTH (zeros), which a server with auth-anonymous or an address
/// ACL accepts. A named file that cannot be read fails the load.
fn read_cookie(path: Option<PathBuf>) -> Result<Vec<u8>, String> {
    let read = |p: &std::path::Path| -> Result<Vec<u8>, String> {
        let c = std::fs::read(p).map_err(|e| format!("cookie {}: {e}", p.display()))?;
        if c.len() < COOKIE_LEN {
            return Err(format!(
                "cookie {} holds {} bytes; a PulseAudio cookie has {COOKIE_LEN}",
                p.display(),
                c.len()
            ));
        }
        Ok(c[..COOKIE_LEN].to_vec())
    };
    if let Some(p) = path {
        return read(&p);
    }
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let candidates = [
        env("PULSE_COOKIE"),
        env("XDG_CONFIG_HOME").map(|d| d.join("pulse/cookie")),
        env("HOME").map(|h| h.join(".config/pulse/cookie")),
        env("HOME").map(|h| h.join(".pulse-cookie")),
    ];
    for p in candidates.into_iter().flatten() {
        if p.exists() {
            return read(&p);
        }
    }
    tracing::info!("tunnel: no cookie found; authenticating anonymously");
    Ok(vec![0; COOKIE_LEN])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_resolve_with_pulseaudio_default_port() {
        let a = |s: &str| resolve(s).map(|a| a.to_string());
        assert_eq!(a("tcp:10.0.0.2:4714").unwrap(), "10.0.0.2:4714");
        assert_eq!(a("tcp:10.0.0.2").unwrap(), "10.0.0.2:4713");
        assert_eq!(a("127.0.0.1").unwrap(), "127.0.0.1:4713");
        assert_eq!(a("tcp6:[::1]:5000").unwrap(), "[::1]:5000");
        assert_eq!(a("tcp6:::1").unwrap(), "[::1]:4713");
        assert!(a("unix:/run/pulse/native").is_err());
        assert!(a("tcp:").is_err());
        assert!(a("tcp:10.0.0.2:notaport").is_err());
        // An address is taken as it is; a name waits for the network thread.
        assert!(Target::of("tcp:10.0.0.2").unwrap().literal.is_some());
        let named = Target::of("tcp:localhost:4714").unwrap();
        assert!(named.literal.is_none());
        assert_eq!(named.to_string(), "localhost:4714");
        assert_eq!(named.resolve().unwrap().port(), 4714);
    }

    #[test]
    fn cookies_must_be_whole() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, [1u8; 10]).unwrap();
        assert!(read_cookie(Some(short)).unwrap_err().contains("10 bytes"));
        assert!(read_cookie(Some(dir.path().join("none"))).is_err());
        let good = dir.path().join("good");
        std::fs::write(&good, [7u8; 300]).unwrap();
        assert_eq!(read_cookie(Some(good)).unwrap(), vec![7u8; 256]);
    }
}
