//! SAP discovery (`[net] discover = true`): one thread listens for SAP announcements
//! (what PulseAudio's module-rtp-send, PipeWire's module-rtp-sink, AES67 devices and
//! quaver's own `rtp-send` send) and adds an `rtp-recv` device for each stream
//! announced, named by the SDP's session name (`s=`), so its source `NAME-source`
//! appears in every front-end; a deletion or `timeout_ms` without an announcement
//! removes it (its streams move, as when a card is unplugged). Off by default: it opens
//! an input to whatever any host on the link announces. docs/net.md.
//!
//! The thread blocks in `poll` with no timeout while no stream is known, so an idle
//! daemon gains no periodic wakeup; with streams it wakes when the next one would
//! time out.

use anyhow::{Result, bail};
use quaver_devices::rtp::{SapSocket, own_sessions};
use quaver_devices::{Device, RtpRecv, RtpRecvConfig};
use quaver_dsp::ChannelMap;
use quaver_engine::Engine;
use quaver_net::{Change, Directory, DirectoryConfig, GoneReason, SessionDescription, SessionKey};
use serde::Deserialize;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `[net]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NetSection {
    /// Listen for SAP announcements and add a source for each RTP stream announced.
    pub discover: bool,
    /// The IPv4 multicast groups listened on (port 9875).
    pub sap_groups: Vec<Ipv4Addr>,
    /// The jitter buffer of each discovered stream, ms.
    pub latency_ms: u32,
    /// Most discovered streams at once (each is one of the engine's 8 devices).
    pub max_streams: usize,
    /// A stream not announced for this long (ms) is removed.
    pub timeout_ms: u64,
}

impl Default for NetSection {
    fn default() -> Self {
        NetSection {
            discover: false,
            sap_groups: vec![
                quaver_net::sap::SAP_GROUP_AUDIO,
                quaver_net::sap::SAP_GROUP_V4,
            ],
            latency_ms: 100,
            max_streams: 4,
            timeout_ms: 60_000,
        }
    }
}

impl NetSection {
    /// Checks what TOML types cannot.
    pub fn validate(&self) -> Result<()> {
        if let Some(g) = self.sap_groups.iter().find(|g| !g.is_multicast()) {
            bail!("net.sap_groups: {g} is not a multicast address");
        }
        if self.sap_groups.len() > 16 {
            bail!(
                "net.sap_groups: {} groups, at most 16",
                self.sap_groups.len()
            );
        }
        if !(1..=2000).contains(&self.latency_ms) {
            bail!("net.latency_ms {} is outside 1..=2000", self.latency_ms);
        }
        if !(1..=7).contains(&self.max_streams) {
            bail!(
                "net.max_streams {} is outside 1..=7 (the engine has 8 devices)",
                self.max_streams
            );
        }
        if !(1000..=86_400_000).contains(&self.timeout_ms) {
            bail!(
                "net.timeout_ms {} is outside 1000..=86400000",
                self.timeout_ms
            );
        }
        Ok(())
    }
}

/// A discovered stream's device in the engine.
struct Added {
    index: usize,
    name: String,
}

/// The discovery thread's state.
struct Discovery {
    engine: Engine,
    cfg: NetSection,
    directory: Directory,
    devices: HashMap<SessionKey, Added>,
    start: Instant,
}

/// Starts discovery if `cfg.discover`; logs why not and returns `None` when the SAP
/// port cannot be opened (the daemon runs on without it).
pub fn spawn(engine: &Engine, cfg: &NetSection) -> Option<JoinHandle<()>> {
    if !cfg.discover {
        return None;
    }
    let socket = match SapSocket::open(&cfg.sap_groups) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("SAP discovery: cannot listen on port 9875: {e}; off");
            return None;
        }
    };
    let groups: Vec<String> = cfg.sap_groups.iter().map(|g| g.to_string()).collect();
    tracing::info!(
        "SAP discovery: listening on {} port 9875",
        groups.join(", ")
    );
    let mut d = Discovery {
        engine: engine.clone(),
        cfg: cfg.clone(),
        directory: Directory::new(DirectoryConfig {
            max_sessions: cfg.max_streams,
            timeout_ns: cfg.timeout_ms * 1_000_000,
        }),
        devices: HashMap::new(),
        start: Instant::now(),
    };
    let spawned = std::thread::Builder::new()
        .name("quaver-sap".into())
        .spawn(move || d.run(&socket));
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!("SAP discovery: cannot start its thread: {e}");
            None
        }
    }
}

impl Discovery {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn run(&mut self, socket: &SapSocket) {
        let mut buf = vec![0u8; 65_536];
        let mut errors = 0u64;
        loop {
            let now = self.now_ns();
            let timeout = self
                .directory
                .next_expiry()
                .map(|t| Duration::from_nanos(t.saturating_sub(now)));
            match socket.recv(&mut buf, timeout) {
                Ok(Some((n, from))) => {
                    let before = self.directory.stats();
                    let change =
                        self.directory
                            .receive(&buf[..n], from, self.now_ns(), &own_sessions());
                    self.log_dropped(before, from);
                    if let Some(c) = change {
                        self.apply(c);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    errors += 1;
                    if errors == 1 {
                        tracing::warn!("SAP discovery: receiving: {e}");
                    }
                    // A socket error that repeats must not spin the thread.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            for key in self.directory.expire(self.now_ns()) {
                self.remove(&key, "no longer announced");
            }
        }
    }

    /// Logs what the directory dropped, with the counts so far: at debug (any host may
    /// send them), and only the 1st, 2nd, 4th, 8th… of each kind, so a flood cannot
    /// flood the log.
    fn log_dropped(&self, before: quaver_net::DirectoryStats, from: IpAddr) {
        let s = self.directory.stats();
        let (what, n) = if s.bad_sap > before.bad_sap {
            ("not a SAP packet quaver reads", s.bad_sap)
        } else if s.bad_sdp > before.bad_sdp {
            ("an SDP without a usable L16/L24 stream", s.bad_sdp)
        } else if s.unknown_deletions > before.unknown_deletions {
            ("a deletion of a stream not known", s.unknown_deletions)
        } else if s.over_limit > before.over_limit {
            ("a new stream beyond net.max_streams", s.over_limit)
        } else {
            return;
        };
        if n.is_power_of_two() {
            tracing::debug!(
                "SAP discovery: dropped {what} from {from} ({n} so far); counts: {} datagrams, \
                 {} not SAP, {} bad SDP, {} unknown deletions, {} over the limit, {} found, \
                 {} deleted, {} timed out",
                s.datagrams,
                s.bad_sap,
                s.bad_sdp,
                s.unknown_deletions,
                s.over_limit,
                s.found,
                s.deleted,
                s.timed_out
            );
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Found(key, sdp) => self.add(key, &sdp),
            Change::Changed(key, sdp) => {
                let old = self.devices.get(&key).map(|a| (a.index, a.name.clone()));
                self.remove(&key, "announced with another description; made again");
                // The rehome thread removes the old device; its name is free after.
                if let Some((index, name)) = old {
                    let t0 = Instant::now();
                    while crate::live::present(&self.engine, index, &name)
                        && t0.elapsed() < Duration::from_secs(1)
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                self.add(key, &sdp);
            }
            Change::Gone(key, GoneReason::Deleted) => self.remove(&key, "deleted by its sender"),
            Change::Gone(key, GoneReason::TimedOut) => self.remove(&key, "no longer announced"),
        }
    }

    /// A name no device has: the session name, or with " #2", " #3"… after it.
    fn unique_name(&self, base: &str) -> String {
        let taken: Vec<String> = self
            .engine
            .devices()
            .into_iter()
            .map(|(_, info)| info.name)
            .collect();
        (1..)
            .map(|i| {
                if i == 1 {
                    base.to_string()
                } else {
                    format!("{base} #{i}")
                }
            })
            .find(|n| !taken.contains(n))
            .unwrap_or_else(|| base.to_string())
    }

    fn add(&mut self, key: SessionKey, sdp: &SessionDescription) {
        let name = self.unique_name(&sdp.name);
        // A multicast stream is received on its group; a unicast one on its port.
        let listen = if sdp.address.is_multicast() {
            SocketAddr::new(sdp.address, sdp.port)
        } else if sdp.address.is_ipv4() {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), sdp.port)
        } else {
            SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), sdp.port)
        };
        let cfg = RtpRecvConfig {
            listen,
            source: Some(key.sender),
            encoding: sdp.encoding,
            rate: sdp.rate,
            device_rate: self.engine.rate(),
            channels: ChannelMap::default_for(sdp.channels as usize),
            payload_type: sdp.payload_type,
            latency_us: self.cfg.latency_ms * 1000,
            name: name.clone(),
        };
        let what = format!(
            "RTP stream '{}' from {} ({} {} Hz {} ch, payload type {}, on {listen})",
            sdp.name, key.sender, sdp.encoding, sdp.rate, sdp.channels, sdp.payload_type
        );
        let device = match RtpRecv::open(cfg) {
            Ok(d) => {
                d.set_session(&sdp.name);
                Box::new(d) as Box<dyn Device>
            }
            Err(e) => {
                tracing::warn!("SAP discovery: {what}: not received: {e}");
                return;
            }
        };
        match self.engine.add_device(device) {
            Ok(index) => {
                tracing::info!("SAP discovery: {what}: source '{name}-source'");
                self.devices.insert(key, Added { index, name });
            }
            Err(e) => tracing::warn!("SAP discovery: {what}: not received: {e}"),
        }
    }

    fn remove(&mut self, key: &SessionKey, why: &str) {
        let Some(added) = self.devices.remove(key) else {
            return;
        };
        tracing::info!("SAP discovery: RTP stream '{}' {why}", added.name);
        if crate::live::present(&self.engine, added.index, &added.name) {
            // As for an unplugged card: the rehome thread moves its streams and
            // removes the device.
            if let Err(e) = self.engine.device_gone(added.index) {
                tracing::debug!("SAP discovery: {}: {e}", added.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NetSection;

    #[test]
    fn net_section_defaults_and_refusals() {
        let d = NetSection::default();
        assert!(!d.discover, "discovery must stay off unless asked for");
        d.validate().unwrap();
        let err = |f: &dyn Fn(&mut NetSection)| {
            let mut n = NetSection::default();
            f(&mut n);
            n.validate().unwrap_err().to_string()
        };
        assert_eq!(
            err(&|n| n.sap_groups = vec!["10.0.0.1".parse().unwrap()]),
            "net.sap_groups: 10.0.0.1 is not a multicast address"
        );
        assert_eq!(
            err(&|n| n.max_streams = 8),
            "net.max_streams 8 is outside 1..=7 (the engine has 8 devices)"
        );
        assert_eq!(
            err(&|n| n.timeout_ms = 10),
            "net.timeout_ms 10 is outside 1000..=86400000"
        );
        assert_eq!(
            err(&|n| n.latency_ms = 0),
            "net.latency_ms 0 is outside 1..=2000"
        );
    }
}
