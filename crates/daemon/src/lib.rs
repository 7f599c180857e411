//! quaverd: wiring of the engine, devices, policy and protocol front-ends.
//!
//! The binary (`main.rs`) parses flags and calls [`run`]; everything with logic lives in
//! the library crates, so this crate stays thin.

pub mod activation;
pub mod advice;
pub mod alsamidi;
pub mod args;
pub mod cards;
pub mod config;
pub mod echo;
pub mod filters;
pub mod filters_channels;
pub mod filters_reload;
pub mod hotplug;
pub mod journal;
pub mod live;
mod mixers;
pub mod netdiscover;
pub mod plugins;
pub mod reserve;
pub mod stream_chains;

use anyhow::{Context, Result};
use config::Config;
use quaver_devices::DeviceError;
use quaver_devices::spec::{DeviceDefaults, open_device};
use quaver_dsp::ChannelMap;
use quaver_engine::Engine;
use quaver_native as native;
use quaver_policy::Policy;
use std::sync::{Arc, Mutex};

pub use quaver_rt::signals::{block_stop_signals, wait_for_stop_signal};

/// Where stream restore keeps its entries: the configured file, else the default one,
/// else (no state or home directory) memory only.
fn restore_mode(cfg: &Config) -> quaver_policy::restore::RestoreMode {
    use quaver_policy::restore::RestoreMode;
    if !cfg.pulse.stream_restore {
        return RestoreMode::Off;
    }
    match cfg
        .pulse
        .restore_file
        .clone()
        .or_else(quaver_policy::restore::default_path)
    {
        Some(path) => {
            tracing::info!("stream restore: entries kept in {}", path.display());
            RestoreMode::File(path)
        }
        None => {
            tracing::warn!(
                "stream restore: neither XDG_STATE_HOME nor HOME is set; entries are kept in memory only"
            );
            RestoreMode::Memory
        }
    }
}

/// Where the chosen card profiles are kept: the state directory, else memory only.
fn card_store() -> quaver_policy::cards::ProfileStore {
    use quaver_policy::cards::{ProfileStore, default_store_path};
    match default_store_path() {
        Some(path) => ProfileStore::open(&path),
        None => ProfileStore::memory(),
    }
}

/// What [`open_devices`] opened.
struct OpenedDevices {
    /// The engine's devices, the driver first.
    devices: Vec<Box<dyn quaver_devices::Device>>,
    /// Per device, the card it belongs to (`None`: not a discovered card's).
    owners: Vec<Option<cards::Owner>>,
    /// The cards found (their nodes filled once the engine runs).
    cards: Vec<quaver_policy::cards::Card>,
    /// Each found card's probe, profiles and devices (engine index, spec, owner).
    card_devices: Vec<CardDevices>,
    /// Configured ALSA devices that opened (engine device index, spec): their cards'
    /// mixers give them hardware volume once the engine runs.
    mixer_specs: Vec<(usize, String)>,
}

/// A discovered card as [`live::LiveCards::adopt`] takes it.
type CardDevices = (
    quaver_devices::alsa::cards::CardProbe,
    quaver_devices::alsa::cards::CardProfiles,
    Vec<(usize, String, cards::Owner)>,
);

/// Opens the configured devices in order, `"auto"` (or an empty list) standing for
/// every card found ([`cards::open_cards`]); the null device when that leaves none.
fn open_devices(
    cfg: &Config,
    defaults: &DeviceDefaults,
    registry: &quaver_policy::cards::Cards,
    mut reserver: Option<&mut reserve::Reserver>,
) -> Result<OpenedDevices> {
    let auto = [cards::AUTO.to_string()];
    let specs: &[String] = if cfg.engine.devices.is_empty() {
        &auto
    } else {
        &cfg.engine.devices
    };
    let mut out = OpenedDevices {
        devices: Vec::new(),
        owners: Vec::new(),
        cards: Vec::new(),
        card_devices: Vec::new(),
        mixer_specs: Vec::new(),
    };
    for spec in specs {
        if spec.trim() == cards::AUTO {
            let room = quaver_engine::rt::MAX_DEVICES.saturating_sub(out.devices.len());
            let mut may_open =
                |card: u32, id: &str| reserve::may_open(reserver.as_deref_mut(), card, id);
            let found = cards::open_cards(defaults, registry, room, &mut may_open);
            let mut per_card: Vec<CardDevices> = found
                .probes
                .into_iter()
                .map(|(p, f)| (p, f, Vec::new()))
                .collect();
            for o in found.devices {
                if let Some(c) = per_card
                    .iter_mut()
                    .find(|c| c.0.index as u32 == o.owner.card)
                {
                    c.2.push((out.devices.len(), o.spec, o.owner.clone()));
                }
                out.devices.push(o.device);
                out.owners.push(Some(o.owner));
            }
            out.cards.extend(found.cards);
            out.card_devices.extend(per_card);
            continue;
        }
        let dev = match open_device(spec, defaults) {
            Ok(d) => {
                out.mixer_specs.push((out.devices.len(), spec.clone()));
                d
            }
            // A sound card may be absent or busy; the daemon still serves on a null
            // device at the same rate so clients keep working, and says why.
            Err(
                e @ (DeviceError::Unavailable { .. }
                | DeviceError::Io { .. }
                | DeviceError::Gone(_)),
            ) if spec.starts_with("alsa:") => {
                tracing::warn!("{spec}: {e}; falling back to the null device");
                open_device("null", defaults).context("opening the fallback null device")?
            }
            Err(e) => return Err(e).with_context(|| format!("opening device '{spec}'")),
        };
        tracing::info!("device {}: {}", dev.info().name, dev.info().description);
        out.devices.push(dev);
        out.owners.push(None);
    }
    if out.devices.is_empty() {
        tracing::info!("no sound card opened; serving on the null sink and source");
        out.devices
            .push(open_device("null", defaults).context("opening the null device")?);
        out.owners.push(None);
    }
    Ok(out)
}

/// The PulseAudio TCP settings, with the cookie loaded (or created), if TCP is on.
fn pulse_tcp(cfg: &Config) -> Result<Option<quaver_pulse::TcpOptions>> {
    let Some(listen) = cfg.pulse.tcp.clone() else {
        return Ok(None);
    };
    let path = cfg
        .pulse
        .cookie
        .clone()
        .or_else(quaver_pulse::tcp::default_cookie_path)
        .context("pulse.tcp needs a cookie path: set pulse.cookie or HOME")?;
    let cookie = quaver_pulse::tcp::load_or_create_cookie(&path)?;
    let allow = cfg
        .pulse
        .tcp_allow
        .iter()
        .map(|a| {
            quaver_pulse::tcp::Net::parse(a).map_err(|e| anyhow::anyhow!("pulse.tcp_allow: {e}"))
        })
        .collect::<Result<_>>()?;
    Ok(Some(quaver_pulse::TcpOptions {
        listen,
        allow,
        cookie,
    }))
}

/// Opens the cards plugged in from now on, at the engine's rate (`hotplug`), where
/// alsa-lib can be loaded; `specs` are the configured ALSA devices that opened.
fn follow_cards(
    engine: &Engine,
    specs: &[(usize, String)],
    defaults: &DeviceDefaults,
    live: Arc<live::LiveCards>,
    plugged: Option<reserve::Plugged>,
) {
    if let Err(why) = quaver_devices::alsa::available() {
        tracing::debug!("hotplug: off ({why})");
        return;
    }
    let cards = hotplug::configured_cards(engine, specs, defaults);
    hotplug::spawn(engine.clone(), cards, live, plugged);
}

/// The native and PulseAudio listening sockets: passed by systemd (socket activation)
/// or bound here. A live server on the PulseAudio socket is refused before any device
/// opens.
fn listeners(
    cfg: &Config,
    runtime_dir: &std::path::Path,
) -> Result<(native::Listener, Option<quaver_pulse::PulseListener>, bool)> {
    let pulse_path = cfg.pulse.enabled.then(|| cfg.pulse_socket());
    let native_path = runtime_dir.join(quaver_protocol::paths::SOCKET_NAME);
    let passed = activation::take(
        &activation::ListenEnv::from_process(),
        &native_path,
        pulse_path.as_deref(),
    )?;
    if let Some(p) = &passed {
        tracing::info!(
            "socket activation: native socket {}, PulseAudio socket {}",
            if p.native.is_some() {
                "passed"
            } else {
                "bound here"
            },
            match (&p.pulse, &pulse_path) {
                (Some(_), _) => "passed",
                (None, Some(_)) => "bound here",
                (None, None) => "disabled",
            }
        );
    }
    let activated = passed.is_some();
    let (passed_native, passed_pulse) = passed.map_or((None, None), |p| (p.native, p.pulse));
    let listener = match passed_native {
        Some(l) => native::Listener::adopt(runtime_dir, l)?,
        None => native::Listener::bind(runtime_dir)?,
    };
    // Refuse a PulseAudio socket a live server answers on before any device opens.
    let pulse_listener = match (pulse_path, passed_pulse) {
        (Some(path), Some(l)) => Some(quaver_pulse::PulseListener::adopt(&path, l)),
        (Some(path), None) => Some(quaver_pulse::PulseListener::bind(&path)?),
        (None, _) => None,
    };
    Ok((listener, pulse_listener, activated))
}

/// Starts quaverd with `cfg` and serves until a stop signal arrives.
pub fn run(cfg: Config) -> Result<()> {
    run_with_path(cfg, None)
}

/// One role ducking for both front-ends, with its thread that forgets streams whose
/// node leaves the engine.
fn start_ducking(cfg: &Config, engine: &Engine) -> Result<quaver_policy::roles::SharedDucking> {
    let ducking = quaver_policy::roles::Ducking::new(cfg.policy.roles.clone(), engine.clone());
    ducking
        .watch()
        .context("starting the roles thread (streams leaving ducking)")?;
    Ok(ducking)
}

/// [`run`], with the configuration file `cfg` was read from (for the status reply).
pub fn run_with_path(cfg: Config, config: Option<&std::path::Path>) -> Result<()> {
    let runtime_dir = cfg.runtime_dir();
    // Take the runtime directory before touching devices: a second daemon must not
    // truncate the first one's output file.
    let (listener, pulse_listener, activated) = listeners(&cfg, &runtime_dir)?;
    for w in advice::warnings(&cfg) {
        tracing::warn!("{w}");
    }
    let channels: ChannelMap = cfg
        .engine
        .channels
        .parse()
        .map_err(|e| anyhow::anyhow!("engine.channels: {e}"))?;
    let defaults = DeviceDefaults {
        rate: cfg.engine.rate,
        channels,
    };
    let mut registry = quaver_policy::cards::Cards::new(card_store());
    // Only discovered cards are reserved: no bus connection for configured devices.
    let discovering =
        cfg.engine.devices.is_empty() || cfg.engine.devices.iter().any(|d| d.trim() == cards::AUTO);
    let mut reserver = if discovering { reserve::start() } else { None };
    let mut opened = open_devices(&cfg, &defaults, &registry, reserver.as_mut())?;
    let engine =
        Engine::start(cfg.engine_config(), opened.devices).context("starting the engine")?;
    cards::fill_nodes(&engine, &mut opened.cards, &opened.owners);
    filters::attach(&engine, &cfg.filters)?;
    let _echo = echo::start(&engine, &cfg.echo_cancel)?; // kept while serving
    for c in opened.cards {
        registry.add(c);
    }
    let registry = registry.shared();
    // Kept while serving: each mixer's watch thread follows amixer and the jacks.
    let _mixers = mixers::attach(&engine, &opened.mixer_specs, &defaults, &registry, None);
    let policy = start_policy(&cfg)?;
    // The default sink and source by their cards' port priority and availability.
    policy
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .set_cards(registry.clone());
    stream_chains::install(&policy, &cfg.chains, stream_channels(&cfg), engine.rate())?;
    // The discovered cards: their mixers, cards plugged in later, profile switches.
    let live = live::LiveCards::new(
        engine.clone(),
        defaults.clone(),
        registry.clone(),
        policy.clone(),
    );
    for (probe, profiles, devices) in opened.card_devices {
        live.adopt(probe, profiles, devices);
    }
    registry
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .set_switcher(live.clone());
    let plugged = reserver.and_then(|r| {
        let served = reserve::Served {
            engine: engine.clone(),
            live: live.clone(),
        };
        reserve::spawn(r, served)
    });
    quaver_policy::rehome::spawn(engine.clone(), policy.clone())
        .context("starting the rehome thread")?;
    follow_cards(&engine, &opened.mixer_specs, &defaults, live, plugged);
    let _sap_discovery = netdiscover::spawn(&engine, &cfg.net);
    // ALSA sequencer ports as the `a2j` node's MIDI ports (a2jmidid's job under jackd2).
    let _alsa_midi = alsamidi::start(&engine);
    // One memory for both front-ends: a kind of stream keeps its volume whichever
    // protocol its next stream comes through.
    let restore = restore_mode(&cfg).open();
    let ducking = start_ducking(&cfg, &engine)?;
    let server = native::NativeServer::with_callback_options(
        engine.clone(),
        policy.clone(),
        native::NativeOptions {
            max_clients: cfg.server.max_clients,
            max_streams_per_client: cfg.server.max_streams_per_client,
            resample_quality: cfg
                .engine
                .resample_quality
                .parse()
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            restore: restore.clone(),
            ducking: Some(ducking.clone()),
        },
        cfg.callback.options(),
    );
    server.set_process(advice::process(&cfg, config, activated));
    server.spawn_accept(&listener)?;
    let pulse = match pulse_listener {
        Some(l) => {
            let p = quaver_pulse::PulseServer::start(
                engine.clone(),
                policy.clone(),
                l,
                quaver_pulse::PulseOptions {
                    max_clients: cfg.pulse.max_clients,
                    max_streams_per_client: cfg.pulse.max_streams_per_client,
                    memfd: cfg.pulse.memfd,
                    srbchannel: cfg.pulse.srbchannel,
                    memfd_record: cfg.pulse.memfd_record,
                    realtime_io_below_usec: cfg.pulse.realtime_io_below_ms as u64 * 1000,
                    rt_requests: cfg.pulse.rt_requests,
                    stream_restore: restore.clone(),
                    cookie_path: cfg.pulse.cookie.clone(),
                    modules: cfg.pulse.modules.clone(),
                    on_exit: cfg
                        .pulse
                        .allow_exit
                        .then_some(quaver_rt::signals::request_stop as fn()),
                    cards: Some(registry.clone()),
                    ducking: Some(ducking.clone()),
                    resample_quality: cfg
                        .engine
                        .resample_quality
                        .parse()
                        .map_err(|e| anyhow::anyhow!("{e}"))?,
                },
                pulse_tcp(&cfg)?,
            )?;
            tracing::info!("PulseAudio clients served on {}", p.socket_path().display());
            if let Some(a) = p.tcp_addr() {
                tracing::info!("PulseAudio TCP clients served on {a}");
            }
            Some(p)
        }
        None => None,
    };
    tracing::info!(
        "quaverd {} serving on {} ({} Hz, quantum {}..{})",
        env!("CARGO_PKG_VERSION"),
        listener.socket_path().display(),
        engine.rate(),
        cfg.engine.quantum_min,
        cfg.engine.quantum_max
    );
    let sig = serve_until_stop(&cfg, &policy, &engine, config);
    tracing::info!("signal {sig} received; shutting down");
    if let Some(p) = &pulse {
        p.unload_modules();
    }
    let closed = engine.shutdown();
    drop(listener);
    drop(pulse);
    closed.context("closing devices")?;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// SIGHUP: reads `[[chains]]` from `path` again. New streams get the new chains;
/// streams playing keep theirs. A file that no longer parses, or a chain that no
/// longer builds, is logged and the chains in force stay.
fn reload_stream_chains(
    policy: &Mutex<Policy>,
    path: Option<&std::path::Path>,
    channels: usize,
    rate: u32,
) {
    let Some(path) = path else {
        return;
    };
    let read = std::fs::read_to_string(path)
        .with_context(|| format!("reading config {}", path.display()))
        .and_then(|t| Config::parse(&t, path))
        .and_then(|cfg| stream_chains::install(policy, &cfg.chains, channels, rate));
    match read {
        Ok(()) => tracing::info!("SIGHUP: [[chains]] read again"),
        Err(e) => tracing::error!("SIGHUP: {e:#}; the chains in force stay"),
    }
}

/// The channel count named chains are checked with at start: the engine's.
fn stream_channels(cfg: &Config) -> usize {
    cfg.engine
        .channels
        .parse::<quaver_dsp::ChannelMap>()
        .map_or(2, |m| m.len())
}

/// The routing policy with the rule file read.
fn start_policy(cfg: &Config) -> Result<Arc<Mutex<Policy>>> {
    let mut policy = Policy::new(cfg.policy.clone());
    let rules = cfg.load_rules()?;
    if !rules.is_empty() {
        let from = show_path(cfg.rules_path());
        tracing::info!("rules: {} from {from}", rules.len());
    }
    policy.set_rules(rules);
    Ok(Arc::new(Mutex::new(policy)))
}

/// Waits for a stop signal, reading the rule file and the config's filter chains
/// again on each SIGHUP; returns the signal that stops quaverd.
fn serve_until_stop(
    cfg: &Config,
    policy: &Mutex<Policy>,
    engine: &Engine,
    config: Option<&std::path::Path>,
) -> i32 {
    let mut chains = cfg.filters.clone();
    loop {
        match wait_for_stop_signal() {
            libc::SIGHUP => {
                reload_rules(cfg, policy);
                filters_reload::reload(engine, config, &mut chains);
                reload_stream_chains(policy, config, stream_channels(cfg), engine.rate());
            }
            sig => return sig,
        }
    }
}

/// SIGHUP: reads the rule file again. New streams follow the new rules; streams already
/// playing keep their place (nothing is moved or interrupted). A file that no longer
/// parses is logged and the rules in force stay.
fn reload_rules(cfg: &Config, policy: &Mutex<Policy>) {
    match cfg.load_rules() {
        Ok(rules) => {
            tracing::info!(
                "SIGHUP: {} rule(s) from {}",
                rules.len(),
                show_path(cfg.rules_path())
            );
            policy
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .set_rules(rules);
        }
        Err(e) => tracing::error!("SIGHUP: {e:#}; the rules in force stay"),
    }
}

fn show_path(p: Option<std::path::PathBuf>) -> String {
    p.map_or_else(|| "no rule file".into(), |p| p.display().to_string())
}
