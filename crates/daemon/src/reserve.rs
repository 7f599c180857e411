//! Sharing cards with other sound servers through the D-Bus device reservation protocol
//! (`org.freedesktop.ReserveDevice1.AudioN` on the session bus, as PulseAudio, PipeWire
//! and jackd use it): quaverd (priority 0, PulseAudio's) opens a card only once it
//! holds the card's name, hands the card over to a requester of higher priority (jackd:
//! 10) by closing it and answering `RequestRelease` with true, and takes it back when
//! the name is free again. One thread blocks on the bus socket (no periodic wakeup).
//! docs/alsa/reservation.md.

use crate::live::{LiveCards, present};
use quaver_devices::alsa::cards::CardProbe;
use quaver_engine::Engine;
use quaver_rt::dbus::{
    Arg, Connection, DbusError, Message, NAME_ALLOW_REPLACEMENT, NAME_DO_NOT_QUEUE,
    NAME_REPLACE_EXISTING, NameReply, Value,
};
use rustix::event::{EventfdFlags, eventfd};
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// quaverd's priority: PulseAudio's, so jackd (10 and more) may take a card from it.
pub const PRIORITY: i32 = 0;

/// The interface of a reservation object.
pub const INTERFACE: &str = "org.freedesktop.ReserveDevice1";

const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const INTROSPECTABLE: &str = "org.freedesktop.DBus.Introspectable";

/// How long a card handed over may take to be closed before the answer goes anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// Pause between looks at whether it is closed (only while handing over).
const CLOSE_POLL: Duration = Duration::from_millis(10);

/// The well-known name of card `card`'s reservation.
pub fn service_name(card: u32) -> String {
    format!("{INTERFACE}.Audio{card}")
}

/// The object the holder of card `card` serves.
pub fn object_path(card: u32) -> String {
    format!("/org/freedesktop/ReserveDevice1/Audio{card}")
}

/// Who holds a reservation, as far as its properties tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its `ApplicationName`, if it says.
    pub application: Option<String>,
    /// Its `Priority`, if it says.
    pub priority: Option<i32>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let app = self.application.as_deref().unwrap_or("another program");
        match self.priority {
            Some(p) => write!(f, "{app} (priority {p})"),
            None => write!(f, "{app}"),
        }
    }
}

/// The outcome of [`Reserver::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// This connection holds the name now.
    Taken,
    /// The holder keeps it.
    Refused(Holder),
}

/// What a message on the bus meant for the reservations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A requester of higher priority asked for the card and was answered true.
    HandedOver(u32),
    /// The name was taken from this connection; `lent`: after a hand-over (the card is
    /// closed already), else without asking (close it now).
    Lost {
        /// The card.
        card: u32,
        /// Whether it was handed over first.
        lent: bool,
    },
    /// A card this connection wants is free: try [`Reserver::acquire`].
    Free(u32),
}

/// The reservations of one connection: the protocol, without the cards.
pub struct Reserver {
    conn: Connection,
    priority: i32,
    application: String,
    /// Held names: card → (`ApplicationDeviceName`, handed over already).
    held: BTreeMap<u32, (String, bool)>,
    /// Cards whose name is watched, to take them back when free.
    wanted: BTreeSet<u32>,
}

impl Reserver {
    /// A reserver on the bus at `address` (`None`: the session bus) with `priority`.
    pub fn connect(
        address: Option<&str>,
        application: &str,
        priority: i32,
    ) -> Result<Reserver, DbusError> {
        let conn = match address {
            Some(a) => Connection::open(a)?,
            None => Connection::session()?,
        };
        Ok(Reserver {
            conn,
            priority,
            application: application.to_string(),
            held: BTreeMap::new(),
            wanted: BTreeSet::new(),
        })
    }

    /// Whether this connection holds card `card`'s name.
    pub fn holds(&self, card: u32) -> bool {
        self.held.contains_key(&card)
    }

    /// Takes card `card`'s name (presented as `device_name`): at once if free, else by
    /// asking its holder to release it (`RequestRelease` with this priority). From now
    /// on the name is watched: [`Event::Free`] says when it is free again.
    pub fn acquire(&mut self, card: u32, device_name: &str) -> Result<Acquired, DbusError> {
        let name = service_name(card);
        if self.wanted.insert(card) {
            self.conn.add_match(&format!(
                "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{name}'"
            ))?;
        }
        let flags = NAME_DO_NOT_QUEUE | NAME_ALLOW_REPLACEMENT;
        match self.conn.request_name(&name, flags)? {
            NameReply::PrimaryOwner | NameReply::AlreadyOwner => {
                self.held.insert(card, (device_name.to_string(), false));
                return Ok(Acquired::Taken);
            }
            NameReply::Exists | NameReply::InQueue => {}
        }
        let path = object_path(card);
        let agreed = self.conn.call(
            &name,
            &path,
            INTERFACE,
            "RequestRelease",
            &[Arg::I32(self.priority)],
        );
        match agreed {
            Ok(v) if v.first() == Some(&Value::Bool(true)) => {}
            // A refusal, a holder that does not answer (in time) or does not implement
            // it: the spec counts them all as no.
            Ok(_) | Err(DbusError::Remote { .. }) => {
                return Ok(Acquired::Refused(self.holder(card)));
            }
            // Silent: its properties would not come either.
            Err(DbusError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Acquired::Refused(Holder {
                    application: None,
                    priority: None,
                }));
            }
            Err(e) => return Err(e),
        }
        match self
            .conn
            .request_name(&name, flags | NAME_REPLACE_EXISTING)?
        {
            NameReply::PrimaryOwner | NameReply::AlreadyOwner => {
                self.held.insert(card, (device_name.to_string(), false));
                Ok(Acquired::Taken)
            }
            NameReply::Exists | NameReply::InQueue => Ok(Acquired::Refused(self.holder(card))),
        }
    }

    /// The current holder of card `card`'s name, from its properties.
    pub fn holder(&mut self, card: u32) -> Holder {
        let (name, path) = (service_name(card), object_path(card));
        let mut get = |prop: &str| self.conn.get_property(&name, &path, INTERFACE, prop).ok();
        Holder {
            application: match get("ApplicationName") {
                Some(Value::Str(s)) => Some(s),
                _ => None,
            },
            priority: match get("Priority") {
                Some(Value::Int(p)) => Some(p as i32),
                _ => None,
            },
        }
    }

    /// Gives card `card`'s name back and stops watching it.
    pub fn release(&mut self, card: u32) -> Result<(), DbusError> {
        self.wanted.remove(&card);
        if self.held.remove(&card).is_some() {
            self.conn.release_name(&service_name(card))?;
        }
        Ok(())
    }

    /// Waits until the bus has a message (true) or `bell` rings (false).
    pub fn wait_or(&self, bell: BorrowedFd<'_>) -> Result<bool, DbusError> {
        self.conn.wait_or(bell)
    }

    /// Waits for the next message and handles it: answers calls on the held objects
    /// (`release(card, priority)` closes the card and says whether it did, for a
    /// `RequestRelease` of higher priority) and reads the name signals. `None`: the
    /// message changed nothing.
    pub fn next_event(
        &mut self,
        release: &mut dyn FnMut(u32, i32) -> bool,
    ) -> Result<Option<Event>, DbusError> {
        self.conn.wait()?;
        let m = self.conn.receive()?;
        if m.kind == quaver_rt::dbus::METHOD_CALL {
            return self.answer(&m, release);
        }
        if m.is_signal("org.freedesktop.DBus", "NameLost") {
            let Some(card) = m.str_arg(0).and_then(card_of_name) else {
                return Ok(None);
            };
            return Ok(self
                .held
                .remove(&card)
                .map(|(_, lent)| Event::Lost { card, lent }));
        }
        if m.is_signal("org.freedesktop.DBus", "NameOwnerChanged")
            && m.str_arg(2) == Some("")
            && let Some(card) = m.str_arg(0).and_then(card_of_name)
            && self.wanted.contains(&card)
            && !self.held.contains_key(&card)
        {
            return Ok(Some(Event::Free(card)));
        }
        Ok(None)
    }

    fn answer(
        &mut self,
        m: &Message,
        release: &mut dyn FnMut(u32, i32) -> bool,
    ) -> Result<Option<Event>, DbusError> {
        let card = m
            .path
            .as_deref()
            .and_then(|p| p.strip_prefix("/org/freedesktop/ReserveDevice1/Audio"))
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|c| self.held.contains_key(c));
        let Some(card) = card else {
            let text = format!("no object {}", m.path.as_deref().unwrap_or(""));
            self.conn
                .reply_error(m, "org.freedesktop.DBus.Error.UnknownObject", &text)?;
            return Ok(None);
        };
        if m.is_call(INTERFACE, "RequestRelease") {
            let Some(Value::Int(p)) = m.body.first() else {
                self.conn.reply_error(
                    m,
                    "org.freedesktop.DBus.Error.InvalidArgs",
                    "RequestRelease takes the requester's priority (i)",
                )?;
                return Ok(None);
            };
            let p = *p as i32;
            // Close first, then answer (the spec's order): the requester opens the card
            // as soon as it has the name.
            let agreed = p > self.priority && release(card, p);
            if agreed && let Some(h) = self.held.get_mut(&card) {
                h.1 = true;
            }
            self.conn.reply(m, &[Arg::Bool(agreed)])?;
            return Ok(agreed.then_some(Event::HandedOver(card)));
        }
        let device = self
            .held
            .get(&card)
            .map(|h| h.0.clone())
            .unwrap_or_default();
        let props = [
            ("ApplicationName", Arg::Str(&self.application)),
            ("ApplicationDeviceName", Arg::Str(&device)),
            ("Priority", Arg::I32(self.priority)),
        ];
        if m.is_call(PROPERTIES, "Get") {
            let (iface, prop) = (m.str_arg(0), m.str_arg(1));
            match props.iter().find(|(n, _)| Some(*n) == prop) {
                Some((_, v)) if iface == Some(INTERFACE) || iface == Some("") => {
                    self.conn.reply(m, &[Arg::Variant(v)])?
                }
                _ => self.conn.reply_error(
                    m,
                    "org.freedesktop.DBus.Error.UnknownProperty",
                    &format!("no property {iface:?}.{prop:?}"),
                )?,
            }
        } else if m.is_call(PROPERTIES, "GetAll") {
            let all: &[(&str, Arg<'_>)] = if m.str_arg(0) == Some(INTERFACE) {
                &props
            } else {
                &[]
            };
            self.conn.reply(m, &[Arg::Props(all)])?;
        } else if m.is_call(INTROSPECTABLE, "Introspect") {
            self.conn.reply(m, &[Arg::Str(INTROSPECTION)])?;
        } else {
            let text = format!(
                "no method {}.{}",
                m.interface.as_deref().unwrap_or(""),
                m.member.as_deref().unwrap_or("")
            );
            self.conn
                .reply_error(m, "org.freedesktop.DBus.Error.UnknownMethod", &text)?;
        }
        Ok(None)
    }
}

const INTROSPECTION: &str = r#"<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node>
 <interface name="org.freedesktop.ReserveDevice1">
  <method name="RequestRelease"><arg name="priority" type="i" direction="in"/><arg name="result" type="b" direction="out"/></method>
  <property name="Priority" type="i" access="read"/>
  <property name="ApplicationName" type="s" access="read"/>
  <property name="ApplicationDeviceName" type="s" access="read"/>
 </interface>
 <interface name="org.freedesktop.DBus.Properties">
  <method name="Get"><arg name="interface" type="s" direction="in"/><arg name="property" type="s" direction="in"/><arg name="value" type="v" direction="out"/></method>
  <method name="GetAll"><arg name="interface" type="s" direction="in"/><arg name="properties" type="a{sv}" direction="out"/></method>
 </interface>
 <interface name="org.freedesktop.DBus.Introspectable">
  <method name="Introspect"><arg name="data" type="s" direction="out"/></method>
 </interface>
</node>
"#;

/// The card of a reservation name (`…ReserveDevice1.Audio3` → 3).
fn card_of_name(name: &str) -> Option<u32> {
    name.strip_prefix(INTERFACE)?
        .strip_prefix(".Audio")?
        .parse()
        .ok()
}

/// quaverd's reservations, or `None` (logged once) without a session bus: then cards
/// are opened as if no one else wanted them.
pub fn start() -> Option<Reserver> {
    match Reserver::connect(None, "quaverd", PRIORITY) {
        Ok(r) => Some(r),
        Err(DbusError::NoSessionBus) => {
            tracing::info!(
                "device reservation: no session bus (DBUS_SESSION_BUS_ADDRESS unset); cards are opened without reserving them"
            );
            None
        }
        Err(e) => {
            tracing::info!(
                "device reservation: session bus unreachable ({e}); cards are opened without reserving them"
            );
            None
        }
    }
}

/// Whether card `card` (id `id`) may be opened: its reservation is taken, or cannot be
/// asked about (logged). A card another program keeps is logged and not opened.
pub fn may_open(reserver: Option<&mut Reserver>, card: u32, id: &str) -> bool {
    let Some(r) = reserver else {
        return true;
    };
    match r.acquire(card, &crate::cards::card_name(id)) {
        Ok(Acquired::Taken) => {
            tracing::debug!("device reservation: card {id} (Audio{card}) taken");
            true
        }
        Ok(Acquired::Refused(holder)) => {
            tracing::info!("card {id} is reserved by {holder}; not opened");
            false
        }
        Err(e) => {
            tracing::warn!("device reservation: card {id}: {e}; opened without reserving it");
            true
        }
    }
}

/// What the thread needs to close and reopen cards.
pub struct Served {
    /// The running engine.
    pub engine: Engine,
    /// The discovered cards: a card handed over leaves them as an unplugged one does,
    /// and comes back as a plugged-in one (profile, devices, mixers, card object).
    pub live: Arc<LiveCards>,
}

/// Where cards plugged in while quaverd runs go: to the reservation thread, the one
/// user of the bus connection, which takes each card's name as at start and opens the
/// card only once it has it (a card another program keeps is opened when it is free).
#[derive(Clone)]
pub struct Plugged {
    tx: mpsc::Sender<CardProbe>,
    bell: Arc<OwnedFd>,
}

impl Plugged {
    /// Hands card `probe` to the reservation thread; false if that thread is gone.
    pub fn send(&self, probe: CardProbe) -> bool {
        self.tx.send(probe).is_ok() && rustix::io::write(&*self.bell, &1u64.to_ne_bytes()).is_ok()
    }
}

/// Starts the thread that serves the reservations and hands cards over and back; the
/// [`Plugged`] handle is for the hotplug thread.
pub fn spawn(reserver: Reserver, served: Served) -> Option<Plugged> {
    let bell = match eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK) {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            tracing::warn!("device reservation: eventfd: {e}; reservations not served");
            return None;
        }
    };
    let (tx, rx) = mpsc::channel();
    let plugged = Plugged {
        tx,
        bell: bell.clone(),
    };
    let spawned = std::thread::Builder::new()
        .name("quaver-reserve".into())
        .spawn(move || serve(reserver, served, &bell, &rx));
    match spawned {
        Ok(_) => Some(plugged),
        Err(e) => {
            tracing::warn!("device reservation: cannot start its thread: {e}");
            None
        }
    }
}

/// A card plugged in: opened only if its reservation is taken (as [`may_open`] decides
/// at start); a card kept by another program is watched and opened once free.
fn plugged_in(r: &mut Reserver, s: &Served, probe: CardProbe) {
    let card = probe.index as u32;
    if may_open(Some(r), card, &probe.id) {
        s.live.card_added(probe);
    }
}

fn serve(mut r: Reserver, s: Served, bell: &OwnedFd, plugged: &mpsc::Receiver<CardProbe>) {
    loop {
        match r.wait_or(bell.as_fd()) {
            Ok(true) => {}
            Ok(false) => {
                let mut n = [0u8; 8];
                let _ = rustix::io::read(bell, &mut n);
                while let Ok(probe) = plugged.try_recv() {
                    plugged_in(&mut r, &s, probe);
                }
                continue;
            }
            Err(e) => {
                tracing::error!(
                    "device reservation: session bus: {e}; reservations no longer served"
                );
                return;
            }
        }
        let event = r.next_event(&mut |card, priority| {
            tracing::info!(
                "device reservation: card {} requested with priority {priority}; closing it",
                label(card)
            );
            hand_over(&s, card);
            true
        });
        match event {
            Ok(Some(Event::HandedOver(card))) => {
                tracing::info!("device reservation: card {} handed over", label(card))
            }
            Ok(Some(Event::Lost { card, lent })) => {
                if !lent {
                    tracing::info!(
                        "device reservation: card {} taken without asking; closing it",
                        label(card)
                    );
                    hand_over(&s, card);
                }
            }
            Ok(Some(Event::Free(card))) => take_back(&mut r, &s, card),
            Ok(None) => {}
            Err(e) => {
                tracing::error!(
                    "device reservation: session bus: {e}; reservations no longer served"
                );
                return;
            }
        }
    }
}

/// Closes card `card` (its streams move on, its mixers close, its card object goes, as
/// when it is unplugged) and waits until the kernel says its PCMs are closed.
fn hand_over(s: &Served, card: u32) {
    let devs = s.live.devices_of(card);
    s.live.card_removed(card);
    wait_closed(&s.engine, card, &devs);
}

/// Card `card` is free again: take its name and open it as a card plugged in is opened
/// (its remembered or default profile, hardware volume, its card object).
fn take_back(r: &mut Reserver, s: &Served, card: u32) {
    let id = label(card);
    match r.acquire(card, &crate::cards::card_name(&id)) {
        Ok(Acquired::Taken) => {}
        Ok(Acquired::Refused(holder)) => {
            tracing::info!("card {id} is reserved by {holder}; not opened");
            return;
        }
        Err(e) => {
            tracing::warn!("device reservation: card {id}: {e}");
            return;
        }
    }
    match quaver_devices::alsa::cards::probe(card) {
        Ok(probe) => s.live.card_added(probe),
        Err(e) => tracing::warn!("device reservation: card {id}: {e}"),
    }
    let opened = s.live.devices_of(card);
    if opened.is_empty() {
        tracing::warn!("device reservation: card {id} is free again but nothing of it opened");
        // Leave it to whoever else wants it.
        if let Err(e) = r.release(card) {
            tracing::debug!("device reservation: releasing card {id}: {e}");
        }
        return;
    }
    let names: Vec<&str> = opened.iter().map(|(_, n)| n.as_str()).collect();
    tracing::info!(
        "device reservation: card {id} is free again; opened {}",
        names.join(", ")
    );
}

/// Card `card`'s id (`Dummy`), or its index where the kernel does not say.
fn label(card: u32) -> String {
    quaver_devices::alsa::hotplug::card_id(card).unwrap_or_else(|| card.to_string())
}

/// Waits, bounded, until card `card`'s devices `devs`, reported gone, have left the
/// engine and the card's PCMs are closed.
fn wait_closed(engine: &Engine, card: u32, devs: &[(usize, String)]) {
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        let gone = devs.iter().all(|(i, n)| !present(engine, *i, n));
        if gone && pcms_closed(card) {
            return;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                "device reservation: card {} still open after {CLOSE_WAIT:?}; handing it over anyway",
                label(card)
            );
            return;
        }
        std::thread::sleep(CLOSE_POLL);
    }
}

/// Whether every PCM substream of card `card` is closed, as the kernel reports it
/// (`/proc/asound/cardN/pcm*/sub*/status`); true where that cannot be read.
fn pcms_closed(card: u32) -> bool {
    let Ok(pcms) = std::fs::read_dir(format!("/proc/asound/card{card}")) else {
        return true;
    };
    for pcm in pcms.flatten() {
        if !pcm.file_name().to_string_lossy().starts_with("pcm") {
            continue;
        }
        let Ok(subs) = std::fs::read_dir(pcm.path()) else {
            continue;
        };
        for sub in subs.flatten() {
            if !sub.file_name().to_string_lossy().starts_with("sub") {
                continue;
            }
            if let Ok(s) = std::fs::read_to_string(sub.path().join("status"))
                && s.trim() != "closed"
            {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_follow_the_card_index() {
        assert_eq!(service_name(1), "org.freedesktop.ReserveDevice1.Audio1");
        assert_eq!(object_path(12), "/org/freedesktop/ReserveDevice1/Audio12");
        assert_eq!(
            card_of_name("org.freedesktop.ReserveDevice1.Audio12"),
            Some(12)
        );
        assert_eq!(card_of_name("org.freedesktop.ReserveDevice1.Video0"), None);
        assert_eq!(card_of_name("org.example.Audio1"), None);
        let h = Holder {
            application: Some("jackd".into()),
            priority: Some(10),
        };
        assert_eq!(h.to_string(), "jackd (priority 10)");
    }
}
