//! Who else wants what quaver serves, for `quaver doctor`: the PulseAudio socket, the
//! JACK server sockets, and the sound cards (held open, or reserved through the D-Bus
//! device reservation names, docs/alsa/reservation.md).

use super::daemon::Running;
use super::finding::Finding;
use crate::host::{self, Proc};
use crate::setup;

/// Runs every check of this file.
pub fn check(running: Option<&Running>, out: &mut Vec<Finding>) {
    let ours = running.and_then(|r| r.pid);
    pulse_socket(running, ours, out);
    jack_sockets(out);
    cards(running, ours, out);
}

/// Whether `p` is the daemon (or, with no daemon pid known, any quaverd).
fn is_quaverd(p: &Proc, ours: Option<u32>) -> bool {
    ours.map_or(p.comm == "quaverd", |pid| p.pid == pid)
}

/// The command that stops `p` for good.
fn stop_command(p: &Proc) -> String {
    match p.unit.as_deref() {
        Some(u) if setup::OTHERS.contains(&u) => {
            format!("`quaver setup` (stops and masks {u} and its socket, enables quaver's)")
        }
        Some(u) if u.ends_with(".service") && u != "user@0.service" => {
            format!("`systemctl --user mask --now {u}`")
        }
        _ if p.comm == "pulseaudio" => format!(
            "`pulseaudio --kill` (or `kill {}`), and `autospawn = no` in \
             ~/.config/pulse/client.conf",
            p.pid
        ),
        _ if p.comm.starts_with("jackd") => format!(
            "`kill {}` (SIGTERM: jackd cleans up its shared memory)",
            p.pid
        ),
        _ => format!("`kill {}`", p.pid),
    }
}

/// Who listens on `$XDG_RUNTIME_DIR/pulse/native`.
fn pulse_socket(running: Option<&Running>, ours: Option<u32>, out: &mut Vec<Finding>) {
    let Some(sock) = setup::pulse_socket() else {
        out.push(Finding::ok(
            "pulse socket",
            "XDG_RUNTIME_DIR is not set: no PulseAudio socket to look at",
        ));
        return;
    };
    let holders = host::listeners(&sock);
    let (mine, others): (Vec<Proc>, Vec<Proc>) = holders.into_iter().partition(|p| {
        is_quaverd(p, ours) || (p.comm == "systemd" && p.unit.as_deref() == Some("init.scope"))
    });
    for p in &others {
        out.push(Finding::problem(
            "pulse socket",
            format!(
                "{p} listens on {}: PulseAudio clients reach it, not quaver",
                sock.display()
            ),
            stop_command(p),
        ));
    }
    if !others.is_empty() {
        return;
    }
    if mine.iter().any(|p| is_quaverd(p, ours)) {
        out.push(Finding::ok(
            "pulse socket",
            format!("{} is served by quaverd", sock.display()),
        ));
    } else if !mine.is_empty() {
        match socket_unit(&sock).as_deref() {
            Some(setup::SOCKET) => out.push(Finding::ok(
                "pulse socket",
                format!(
                    "{} is held by systemd for {}: the first client starts quaverd",
                    sock.display(),
                    setup::SOCKET
                ),
            )),
            unit => out.push(Finding::problem(
                "pulse socket",
                format!(
                    "{} is held by the systemd user manager for {}: PulseAudio clients \
                     start that server, not quaver",
                    sock.display(),
                    unit.unwrap_or("a socket unit it does not name")
                ),
                "`quaver setup`",
            )),
        }
    } else if running.is_some() {
        out.push(Finding::problem(
            "pulse socket",
            format!(
                "nothing listens on {}: PulseAudio clients find no server",
                sock.display()
            ),
            "serve PulseAudio clients: `[pulse] enabled = true` (the default) in the config \
             file, then restart quaverd",
        ));
    } else {
        out.push(Finding::ok(
            "pulse socket",
            format!("nothing listens on {}", sock.display()),
        ));
    }
}

/// The socket unit the user manager holds `sock` for (`systemctl --user list-sockets`).
fn socket_unit(sock: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new("systemctl")
        .args([
            "--user",
            "list-sockets",
            "--no-legend",
            "--no-pager",
            "--full",
        ])
        .output()
        .ok()?;
    let want = sock.to_str()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next()? == want).then(|| f.next().map(str::to_string))?
    })
}

/// JACK servers (jackd2's sockets are `/dev/shm/jack_NAME_UID_N`).
fn jack_sockets(out: &mut Vec<Finding>) {
    let net = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let socks = host::listening_paths(&net, |p| p.starts_with("/dev/shm/jack"));
    if socks.is_empty() {
        out.push(Finding::ok("jack", "no JACK server runs"));
        return;
    }
    let inodes = socks.iter().map(|(i, _)| *i).collect();
    for p in host::socket_holders(&inodes) {
        out.push(Finding::problem(
            "jack",
            format!(
                "{p} serves JACK clients that do not run through quaver-jack, and competes \
                 for the sound cards"
            ),
            stop_command(&p),
        ));
    }
}

/// A card of `/proc/asound/cards`: index and id.
fn parse_cards(text: &str) -> Vec<(u32, String)> {
    // " 0 [PCH            ]: HDA-Intel - HDA Intel PCH", then an indented second line.
    text.lines()
        .filter_map(|l| {
            let (index, rest) = l.trim_start().split_once(' ')?;
            let index = index.parse().ok()?;
            let id = rest
                .trim_start()
                .strip_prefix('[')?
                .split(']')
                .next()?
                .trim();
            Some((index, id.to_string()))
        })
        .collect()
}

/// The sound cards: what quaverd has open, who else holds or reserves one.
fn cards(running: Option<&Running>, ours: Option<u32>, out: &mut Vec<Finding>) {
    if let Some(r) = running {
        let devices: Vec<String> = r
            .status
            .devices
            .iter()
            .map(|d| format!("{} ({})", d.name, d.state))
            .collect();
        out.push(Finding::ok(
            "devices",
            if devices.is_empty() {
                "quaverd has no device open".to_string()
            } else {
                format!("quaverd serves {}", devices.join(", "))
            },
        ));
    }
    let cards = parse_cards(&std::fs::read_to_string("/proc/asound/cards").unwrap_or_default());
    if cards.is_empty() {
        out.push(Finding::ok("cards", "no sound card on this machine"));
        return;
    }
    let name = |c: u32| {
        cards
            .iter()
            .find(|(i, _)| *i == c)
            .map_or(format!("card {c}"), |(_, id)| format!("card {c} ({id})"))
    };
    let mut clear = true;
    for (p, held) in host::pcm_holders() {
        if is_quaverd(&p, ours) {
            continue;
        }
        clear = false;
        let held: Vec<String> = held.into_iter().map(name).collect();
        out.push(Finding::problem(
            "cards",
            format!("{} held open by {p}", held.join(", ")),
            stop_command(&p),
        ));
    }
    for (c, holder) in reservations(&cards, ours) {
        clear = false;
        out.push(Finding::problem(
            "cards",
            format!(
                "{} is reserved by {holder}; quaverd leaves it alone",
                name(c)
            ),
            "stop that program, or have it release the card (quaverd takes a card whose \
             reservation is let go)",
        ));
    }
    if clear {
        out.push(Finding::ok(
            "cards",
            format!(
                "{} found; none held or reserved by another program",
                cards
                    .iter()
                    .map(|(i, _)| name(*i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
}

/// The cards whose `org.freedesktop.ReserveDevice1.AudioN` name another process holds
/// on the session bus, with that holder described; none without a session bus.
fn reservations(cards: &[(u32, String)], ours: Option<u32>) -> Vec<(u32, String)> {
    use quaver_rt::dbus::{Arg, Connection, Value};
    let Ok(mut bus) = Connection::session() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (c, _) in cards {
        let name = format!("org.freedesktop.ReserveDevice1.Audio{c}");
        let owner = bus.call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetConnectionUnixProcessID",
            &[Arg::Str(&name)],
        );
        // An error: nobody holds the name.
        let Ok(v) = owner else { continue };
        let pid = match v.first() {
            Some(Value::Int(p)) => u32::try_from(*p).ok(),
            _ => None,
        };
        if pid.is_some() && pid == ours {
            continue;
        }
        let path = format!("/org/freedesktop/ReserveDevice1/Audio{c}");
        let app = match bus.get_property(
            &name,
            &path,
            "org.freedesktop.ReserveDevice1",
            "ApplicationName",
        ) {
            Ok(Value::Str(s)) => s,
            _ => "an unnamed program".into(),
        };
        let who = match pid.and_then(host::process) {
            Some(p) => format!("{app} ({p})"),
            None => app,
        };
        found.push((*c, who));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_file_parses() {
        let text = " 0 [PCH            ]: HDA-Intel - HDA Intel PCH\n\
                    \x20                     HDA Intel PCH at 0xf7f10000 irq 33\n\
                    \x2012 [Dummy          ]: Dummy - Dummy\n\
                    \x20                     Dummy 1\n";
        assert_eq!(
            parse_cards(text),
            [(0, "PCH".to_string()), (12, "Dummy".to_string())]
        );
        assert!(parse_cards("--- no soundcards ---\n").is_empty());
    }

    #[test]
    fn each_holder_gets_the_command_that_stops_it() {
        let p = |comm: &str, unit: Option<&str>| Proc {
            pid: 9,
            comm: comm.into(),
            unit: unit.map(str::to_string),
        };
        assert!(
            stop_command(&p("pulseaudio", Some("pulseaudio.service")))
                .starts_with("`quaver setup`")
        );
        assert_eq!(
            stop_command(&p("wireplumber", Some("wireplumber.service"))),
            "`systemctl --user mask --now wireplumber.service`"
        );
        assert!(
            stop_command(&p("pulseaudio", Some("session-2.scope")))
                .starts_with("`pulseaudio --kill`")
        );
        assert!(stop_command(&p("jackd", None)).starts_with("`kill 9` (SIGTERM"));
        assert_eq!(stop_command(&p("aplay", None)), "`kill 9`");
    }
}
