//! Cards as PulseAudio clients see them: GET_CARD_INFO(_LIST) records, the card fields
//! of sink and source records, and SET_CARD_PROFILE — all from the daemon's card
//! registry ([`quaver_policy::cards`]); this front-end knows no device type.
//!
//! The wire format is PulseAudio's (`protocol-native.c`, `card_fill_tagstruct`): each
//! profile's `available` from protocol 29, the ports from 26, their latency offset from
//! 27, availability group and type from 34; the `pulseaudio` crate's codec writes those
//! gates from the connection's version.

use crate::commands::Reply;
use crate::conn::Conn;
use crate::state::Server;
use crate::wire::convert::cstr;
use pulseaudio::protocol::port_info::{PortAvailable, PortDirection, PortInfo, PortType};
use pulseaudio::protocol::{
    self as pa, CardInfo, CardPortInfo, CardProfileInfo, Prop, Props, PulseError,
    SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use quaver_policy::cards::{self, Availability, Card, Choice};

fn available(a: Availability) -> PortAvailable {
    match a {
        Availability::Unknown => PortAvailable::Unknown,
        Availability::No => PortAvailable::No,
        Availability::Yes => PortAvailable::Yes,
    }
}

/// PulseAudio's direction values: 1 is a sink's port (the crate calls it `Input`, the
/// sink's input side), 2 a source's.
fn direction(d: cards::PortDirection) -> PortDirection {
    match d {
        cards::PortDirection::Output => PortDirection::Input,
        cards::PortDirection::Input => PortDirection::Output,
    }
}

fn port_type(t: cards::PortType) -> PortType {
    match t {
        cards::PortType::Analog => PortType::Analog,
        cards::PortType::Hdmi => PortType::Hdmi,
        cards::PortType::Spdif => PortType::Spdif,
    }
}

/// The card record of `card`.
pub(crate) fn card_info(card: &Card) -> CardInfo {
    let mut props = Props::new();
    for (k, v) in &card.props {
        props.set_bytes(cstr(k), cstr(v).as_bytes_with_nul());
    }
    if let Some(p) = &card.pending {
        // Honest about a choice that is remembered but not open yet.
        props.set_bytes(cstr("quaver.profile.pending"), cstr(p).as_bytes_with_nul());
    }
    CardInfo {
        index: card.index,
        name: cstr(&card.name),
        props,
        owner_module_index: Some(crate::modules::DEVICES_MODULE),
        driver: Some(cstr(&card.driver)),
        ports: card
            .ports
            .iter()
            .map(|p| CardPortInfo {
                name: cstr(&p.name),
                port_type: port_type(p.port_type),
                description: Some(cstr(&p.description)),
                props: Props::new(),
                dir: direction(p.direction),
                priority: p.priority,
                available: available(p.available),
                availability_group: None,
                profiles: p.profiles.iter().map(|n| cstr(n)).collect(),
                latency_offset: 0,
            })
            .collect(),
        profiles: card
            .profiles
            .iter()
            .map(|p| CardProfileInfo {
                name: cstr(&p.name),
                description: Some(cstr(&p.description)),
                priority: p.priority,
                available: p.available as u32,
                num_sinks: p.sinks,
                num_sources: p.sources,
            })
            .collect(),
        active_profile: Some(cstr(&card.active)),
    }
}

/// Has cards that come and go reach subscribed clients as card events. The
/// listener holds the server weakly: the registry lives inside the server's options.
pub(crate) fn listen(reg: &cards::SharedCards, server: &std::sync::Arc<Server>) {
    let weak = std::sync::Arc::downgrade(server);
    reg.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .listen(std::sync::Arc::new(move |change| {
            let Some(srv) = weak.upgrade() else { return };
            let (kind, index) = match change {
                cards::CardChange::New(i) => (Ev::New, i),
                cards::CardChange::Removed(i) => (Ev::Removed, i),
            };
            srv.broadcast(Fac::Card, kind, index);
            // A card that came may outrank the default; one that went may have been it.
            srv.check_defaults();
        }));
}

/// A sink's or source's card fields: the card index, its ports and the active one, and
/// the card's properties to add to the device's.
pub(crate) struct DeviceCard {
    /// The card's index.
    pub index: u32,
    /// The device's ports.
    pub ports: Vec<PortInfo>,
    /// The index of the active one in `ports`.
    pub active: usize,
    /// `alsa.card`, `device.string`, … of the card.
    pub props: Vec<(String, String)>,
}

fn port_info(port: &cards::CardPort) -> PortInfo {
    PortInfo {
        name: cstr(&port.name),
        port_type: port_type(port.port_type),
        description: Some(cstr(&port.description)),
        dir: direction(port.direction),
        priority: port.priority,
        available: available(port.available),
        availability_group: None,
    }
}

impl Server {
    /// The card fields of the sink or source node called `node`, if a card opened it.
    pub(crate) fn device_card(&self, node: &str) -> Option<DeviceCard> {
        let reg = self.opts.cards.as_ref()?;
        let reg = reg
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (card, _) = reg.node(node)?;
        let (ports, active) = reg.ports_of(node)?;
        Some(DeviceCard {
            index: card.index,
            ports: ports.iter().map(port_info).collect(),
            active,
            props: card
                .props
                .iter()
                .filter(|(k, _)| k.starts_with("alsa.") || k == "device.string")
                .cloned()
                .collect(),
        })
    }
}

/// Turns the registry's port changes into subscription events: the card's `change`
/// (availability) and each sink's or source's `change` (ports, active port), as
/// pavucontrol expects them. Runs until the registry is gone.
pub(crate) fn spawn_port_events(srv: &std::sync::Arc<Server>) -> std::io::Result<()> {
    let Some(reg) = srv.opts.cards.clone() else {
        return Ok(());
    };
    let rx = reg
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .watch();
    let srv = srv.clone();
    std::thread::Builder::new()
        .name("quaver-pulse-ports".into())
        .spawn(move || {
            for change in rx {
                srv.broadcast(Fac::Card, Ev::Changed, change.card);
                let graph = srv.engine.graph();
                for node in &change.nodes {
                    if let Some(d) = srv.sink_by_name(&graph, node) {
                        srv.broadcast(Fac::Sink, Ev::Changed, d.index);
                    } else if let Some(d) = srv.source_by_name(&graph, node) {
                        srv.broadcast(Fac::Source, Ev::Changed, d.index);
                    }
                }
                // A port plugged or unplugged can change which device is the default.
                srv.check_defaults();
            }
        })
        .map(|_| ())
}

/// Adds a card's properties to a device's.
pub(crate) fn add_props(props: &mut Props, card: &DeviceCard) {
    for (k, v) in &card.props {
        props.set_bytes(cstr(k), cstr(v).as_bytes_with_nul());
    }
    props.set(Prop::DeviceApi, cstr("alsa"));
}

impl Conn {
    /// GET_CARD_INFO_LIST.
    pub(crate) fn get_card_info_list(&mut self, seq: u32) -> Reply {
        let list: Vec<CardInfo> = match &self.srv.opts.cards {
            Some(reg) => reg
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .list()
                .iter()
                .map(card_info)
                .collect(),
            None => Vec::new(),
        };
        self.out().reply(seq, &list);
        Ok(())
    }

    /// GET_CARD_INFO, by index or name.
    pub(crate) fn get_card_info(&mut self, seq: u32, q: pa::GetCardInfo) -> Reply {
        let reg = self.srv.opts.cards.clone().ok_or(PulseError::NoEntity)?;
        let info = {
            let reg = reg
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let name = q.name.as_ref().and_then(|n| n.to_str().ok());
            card_info(reg.find(q.index, name).ok_or(PulseError::NoEntity)?)
        };
        self.out().reply(seq, &info);
        Ok(())
    }

    /// SET_CARD_PROFILE: checks the card and profile, then has the daemon switch the
    /// card's devices (its [`cards::ProfileSwitch`]: old devices closed, streams moved,
    /// the new profile's devices opened and the choice remembered); a registry without
    /// one only remembers the choice for the next start.
    pub(crate) fn set_card_profile(&mut self, seq: u32, p: pa::SetCardProfileParams) -> Reply {
        let reg = self.srv.opts.cards.clone().ok_or(PulseError::NoEntity)?;
        let profile = p.profile_name.to_str().map_err(|_| PulseError::Invalid)?;
        let name = p.card_name.as_ref().and_then(|n| n.to_str().ok());
        let (checked, switcher) = {
            let reg = reg
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (reg.check(p.card_index, name, profile), reg.switcher())
        };
        let index = checked.map_err(|e| {
            tracing::info!("set-card-profile refused: {e}");
            match e {
                cards::CardError::NoCard(_) | cards::CardError::NoProfile { .. } => {
                    PulseError::NoEntity
                }
                cards::CardError::Unavailable { .. } => PulseError::NotSupported,
            }
        })?;
        match switcher {
            Some(s) => s.switch(index, profile).map_err(|e| {
                tracing::warn!("set-card-profile {profile}: {e}");
                PulseError::Io
            })?,
            None => {
                let choice = reg
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .choose(Some(index), None, profile)
                    .map(|(_, c)| c)
                    .map_err(|_| PulseError::NoEntity)?;
                if choice == Choice::Pending {
                    tracing::info!(
                        "card {index}: profile '{profile}' remembered; its devices open when quaverd next starts"
                    );
                }
            }
        }
        self.srv.broadcast(Fac::Card, Ev::Changed, index);
        self.out().ack(seq);
        Ok(())
    }
}

impl Conn {
    /// SET_SINK_PORT (`sink` true) and SET_SOURCE_PORT: makes a port of the device's
    /// card its active port; the mixer follows (docs/alsa/ports.md).
    pub(crate) fn set_device_port(&mut self, seq: u32, p: pa::SetPortParams, sink: bool) -> Reply {
        let srv = self.srv.clone();
        let reg = srv.opts.cards.clone().ok_or(PulseError::NoEntity)?;
        let port = p.port_name.to_str().map_err(|_| PulseError::Invalid)?;
        let graph = srv.engine.graph();
        let name = p.name.as_ref().and_then(|n| n.to_str().ok());
        let d = if sink {
            srv.find_sink(&graph, p.index, name)
        } else {
            srv.find_source(&graph, p.index, name)
        }
        .filter(|d| !d.monitor)
        .ok_or(PulseError::NoEntity)?;
        let node = graph
            .nodes
            .get(&d.node)
            .map(|n| n.name.clone())
            .ok_or(PulseError::NoEntity)?;
        let result = reg
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .set_port(&node, port);
        match result {
            Ok(_) => {
                tracing::info!("{node}: port {port} chosen by a client");
                self.out().ack(seq);
                Ok(())
            }
            Err(e) => {
                tracing::info!(
                    "set-{}-port refused: {e}",
                    if sink { "sink" } else { "source" }
                );
                Err(PulseError::NoEntity)
            }
        }
    }
}

/// Writes a source record as PulseAudio does. The `pulseaudio` crate's own writer
/// leaves out each port's availability group and type from protocol 34 on, which makes
/// clients fail on the first source that has a port ("Protocol error"); this is its
/// layout with those two fields, as `source_fill_tagstruct` in PulseAudio's
/// `protocol-native.c` writes it.
pub(crate) fn write_source_info(
    w: &mut pulseaudio::protocol::TagStructWriter<'_>,
    s: &pa::SourceInfo,
    version: u16,
) -> Result<(), pulseaudio::protocol::ProtocolError> {
    w.write_index(Some(s.index))?;
    w.write_string(Some(&s.name))?;
    w.write_string(s.description.as_ref())?;
    w.write(s.sample_spec)?;
    w.write(s.channel_map)?;
    w.write_index(s.owner_module_index)?;
    w.write(s.cvolume)?;
    w.write_bool(s.muted)?;
    w.write_index(s.monitor_of_sink_index)?;
    w.write_string(s.monitor_of_sink_name.as_ref())?;
    w.write_usec(s.actual_latency)?;
    w.write_string(s.driver.as_ref())?;
    w.write_u32(s.flags.bits())?;
    if version >= 13 {
        w.write(&s.props)?;
        w.write_usec(s.configured_latency)?;
    }
    if version >= 15 {
        w.write(s.base_volume)?;
        w.write_u32(s.state as u32)?;
        w.write_u32(s.volume_steps.unwrap_or(0))?;
        w.write_index(s.card_index)?;
    }
    if version >= 16 {
        w.write_u32(s.ports.len() as u32)?;
        for port in &s.ports {
            w.write_string(Some(&port.name))?;
            w.write_string(port.description.as_ref())?;
            w.write_u32(port.priority)?;
            if version >= 24 {
                w.write_u32(port.available as u32)?;
            }
            if version >= 34 {
                w.write_string(port.availability_group.as_ref())?;
                w.write_u32(port.port_type as u32)?;
            }
        }
        w.write_string(s.ports.get(s.active_port).map(|p| &p.name))?;
    }
    // Sources carry formats from 22 (sinks from 21).
    if version >= 22 {
        w.write_u8(s.formats.len() as u8)?;
        for format in &s.formats {
            w.write(format)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulseaudio::protocol::{TagStructReader, TagStructWriter};

    #[test]
    fn a_source_with_a_port_reads_back_at_every_version_that_has_ports() {
        let mut info = pa::SourceInfo {
            index: 7,
            name: cstr("Dummy.analog-stereo-source"),
            card_index: Some(1),
            ..Default::default()
        };
        info.ports.push(PortInfo {
            name: cstr("analog-input"),
            port_type: PortType::Analog,
            description: Some(cstr("Analog Input")),
            dir: PortDirection::Output,
            priority: 1500,
            available: PortAvailable::Unknown,
            availability_group: None,
        });
        for version in [16u16, 24, 33, 34, 35] {
            let mut buf = Vec::new();
            let mut w = TagStructWriter::new(&mut buf, version);
            write_source_info(&mut w, &info, version).unwrap();
            let mut cur = std::io::Cursor::new(&buf[..]);
            let mut r = TagStructReader::new(&mut cur, version);
            let back: pa::SourceInfo = r.read().unwrap();
            assert_eq!(back.ports.len(), 1, "protocol {version}");
            assert_eq!(back.ports[0].name, info.ports[0].name);
            assert_eq!(back.card_index, Some(1));
            assert!(
                !r.has_data_left().unwrap(),
                "protocol {version}: bytes left"
            );
        }
    }
}
