//! Sound cards coming and going: the kernel's uevents, read from a netlink socket
//! (`NETLINK_KOBJECT_UEVENT`, the kernel's own multicast group), with no libudev.
//!
//! A card is announced by its control device: the kernel registers `controlC<N>` last,
//! after every PCM of the card, so when its `add` arrives the card can be opened; its
//! `remove` comes first thing when the card is disconnected (unplugged, unbound, module
//! removed), before the kernel waits for the card's open handles to close. Everything
//! else on the socket (other subsystems, the card's PCM devices) is skipped.
//!
//! The socket is read by a blocking `recvfrom` on a control thread: no periodic wakeups.
//! Only messages from the kernel (netlink port 0) count; another process could send to
//! the group otherwise.

use crate::DeviceError;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A card appeared or disappeared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardEvent {
    /// Card N is registered and can be opened (`hw:N`).
    Added(u32),
    /// Card N was disconnected: its handles must be closed for the removal to finish.
    Removed(u32),
}

/// The kernel's uevent multicast group (udev's rebroadcast is group 2).
const KERNEL_GROUP: u32 = 1;

/// Largest uevent the kernel sends (`UEVENT_BUFFER_SIZE`).
const UEVENT_BUFFER: usize = 2048;

/// A netlink socket subscribed to the kernel's uevents.
pub struct UeventSocket {
    fd: OwnedFd,
}

impl UeventSocket {
    /// Opens the socket and joins the kernel's group. *control*.
    pub fn open() -> Result<Self, DeviceError> {
        let err = |what: &str| DeviceError::Io {
            device: "uevent".into(),
            source: io::Error::new(
                io::Error::last_os_error().kind(),
                format!("{what}: {}", io::Error::last_os_error()),
            ),
        };
        // SAFETY: plain socket(2); the descriptor is owned below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_KOBJECT_UEVENT,
            )
        };
        if raw < 0 {
            return Err(err("netlink socket for kernel uevents"));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_nl is plain data; zero is a valid start.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = KERNEL_GROUP;
        // SAFETY: `addr` is a valid sockaddr_nl of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(err("joining the kernel's uevent group"));
        }
        Ok(UeventSocket { fd })
    }

    /// Blocks until the next card event. Messages that are not about a card's control
    /// device, or not from the kernel, are skipped. *control*.
    pub fn next_card_event(&self) -> io::Result<CardEvent> {
        let mut buf = [0u8; UEVENT_BUFFER];
        loop {
            // SAFETY: as above.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are valid for the sizes given.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                // ENOBUFS: a burst overflowed the socket; the lost events are gone, but
                // later ones still come.
                if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOBUFS)) {
                    continue;
                }
                return Err(e);
            }
            if from.nl_pid != 0 {
                continue;
            }
            if let Some(ev) = parse_uevent(&buf[..n as usize]) {
                return Ok(ev);
            }
        }
    }
}

/// The card event in one kernel uevent (`ACTION@DEVPATH\0KEY=VALUE\0…`), if it is the
/// `add` or `remove` of a card's control device (`SUBSYSTEM=sound`,
/// `DEVNAME=snd/controlC<N>`).
pub fn parse_uevent(msg: &[u8]) -> Option<CardEvent> {
    let mut action = None;
    let mut sound = false;
    let mut card = None;
    for field in msg.split(|&b| b == 0).skip(1) {
        let field = std::str::from_utf8(field).ok()?;
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        match key {
            "ACTION" => action = Some(value),
            "SUBSYSTEM" => sound = value == "sound",
            "DEVNAME" | "DEVPATH" => {
                let base = value.rsplit('/').next().unwrap_or(value);
                if let Some(n) = base.strip_prefix("controlC") {
                    card = n.parse().ok();
                }
            }
            _ => {}
        }
    }
    if !sound {
        return None;
    }
    match (action?, card?) {
        ("add", n) => Some(CardEvent::Added(n)),
        ("remove", n) => Some(CardEvent::Removed(n)),
        _ => None,
    }
}

/// Card N's id (e.g. "Dummy", "PCH"), if the card exists and is named yet: from
/// sysfs, else from `/proc/asound`. Right after the card's `add` it can still be empty:
/// the kernel names a card once its devices are registered.
pub fn card_id(card: u32) -> Option<String> {
    [
        format!("/sys/class/sound/card{card}/id"),
        format!("/proc/asound/card{card}/id"),
    ]
    .iter()
    .find_map(|path| {
        let id = std::fs::read_to_string(path).ok()?;
        let id = id.trim();
        (!id.is_empty()).then(|| id.to_string())
    })
}

/// The card part of an ALSA PCM name, as written: `hw:1,0` → `1`, `plughw:Dummy` →
/// `Dummy`, `front:CARD=PCH,DEV=0` → `PCH`; `None` for a PCM that names no card
/// (`default`, `null`).
pub fn pcm_card_token(pcm: &str) -> Option<&str> {
    let (_, args) = pcm.split_once(':')?;
    let token = match args.split(',').find_map(|a| a.trim().strip_prefix("CARD=")) {
        Some(card) => card,
        None => args.split(',').next()?.trim(),
    };
    let token = token.trim_matches('"');
    (!token.is_empty() && !token.contains('=')).then_some(token)
}

/// The number of the card an ALSA PCM name opens, if it names one that exists now.
pub fn pcm_card(pcm: &str) -> Option<u32> {
    let token = pcm_card_token(pcm)?;
    if let Ok(n) = token.parse() {
        return Some(n);
    }
    let cards = std::fs::read_dir("/sys/class/sound").ok()?;
    cards.flatten().find_map(|e| {
        let n: u32 = e.file_name().to_str()?.strip_prefix("card")?.parse().ok()?;
        (card_id(n)? == token).then_some(n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(fields: &[&str]) -> Vec<u8> {
        fields.join("\0").into_bytes()
    }

    #[test]
    fn control_devices_of_sound_cards_are_card_events() {
        let add = msg(&[
            "add@/devices/platform/snd_dummy.0/sound/card1/controlC1",
            "ACTION=add",
            "DEVPATH=/devices/platform/snd_dummy.0/sound/card1/controlC1",
            "SUBSYSTEM=sound",
            "MAJOR=116",
            "MINOR=32",
            "DEVNAME=snd/controlC1",
            "SEQNUM=2105",
        ]);
        assert_eq!(parse_uevent(&add), Some(CardEvent::Added(1)));
        let remove = msg(&[
            "remove@/devices/platform/snd_dummy.0/sound/card12/controlC12",
            "ACTION=remove",
            "DEVPATH=/devices/platform/snd_dummy.0/sound/card12/controlC12",
            "SUBSYSTEM=sound",
            "DEVNAME=snd/controlC12",
        ]);
        assert_eq!(parse_uevent(&remove), Some(CardEvent::Removed(12)));
    }

    #[test]
    fn the_card_of_a_pcm_name() {
        assert_eq!(pcm_card_token("hw:1"), Some("1"));
        assert_eq!(pcm_card_token("hw:Loopback,0,0"), Some("Loopback"));
        assert_eq!(pcm_card_token("plughw:CARD=PCH,DEV=3"), Some("PCH"));
        assert_eq!(pcm_card_token("front:CARD=\"Dummy\""), Some("Dummy"));
        assert_eq!(pcm_card_token("hw:DEV=0"), None);
        assert_eq!(pcm_card_token("default"), None);
        assert_eq!(pcm_card_token("null"), None);
        assert_eq!(pcm_card(""), None);
        assert_eq!(pcm_card("hw:7,0"), Some(7));
    }

    #[test]
    fn other_devices_and_subsystems_are_skipped() {
        for m in [
            // A PCM of the card: the card is announced by its control device only.
            msg(&[
                "add@/devices/platform/snd_dummy.0/sound/card1/pcmC1D0p",
                "ACTION=add",
                "SUBSYSTEM=sound",
                "DEVNAME=snd/pcmC1D0p",
            ]),
            // The card itself (no device node).
            msg(&[
                "add@/devices/platform/snd_dummy.0/sound/card1",
                "ACTION=add",
                "DEVPATH=/devices/platform/snd_dummy.0/sound/card1",
                "SUBSYSTEM=sound",
            ]),
            // Another subsystem whose name looks alike.
            msg(&[
                "add@/devices/virtual/misc/controlC3",
                "ACTION=add",
                "SUBSYSTEM=misc",
                "DEVNAME=controlC3",
            ]),
            msg(&[
                "change@/devices/platform/snd_dummy.0/sound/card1/controlC1",
                "ACTION=change",
                "SUBSYSTEM=sound",
                "DEVNAME=snd/controlC1",
            ]),
            msg(&["ACTION=add", "SUBSYSTEM=sound", "DEVNAME=snd/controlCx"]),
            b"garbage\0\xff\xfe".to_vec(),
            Vec::new(),
        ] {
            assert_eq!(parse_uevent(&m), None, "{:?}", String::from_utf8_lossy(&m));
        }
    }
}
