//! `module-native-protocol-tcp` and `module-native-protocol-unix`: more listeners for
//! PulseAudio clients; unloading one stops it and disconnects the clients it let in.

use super::args::{check_keys, parse_bool, unescape};
use super::context::Load;
use super::record::ModuleRec;
use crate::io::accept::{self, TcpAuth};
use crate::io::listener::PulseListener;
use crate::state::Server;
use pulseaudio::protocol::PulseError;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::Arc;

/// Binds what `module-native-protocol-tcp`'s arguments ask for; the listener, who it
/// serves, and its address.
fn tcp_listener(
    srv: &Server,
    args: &BTreeMap<String, String>,
) -> Result<(TcpListener, TcpAuth, String), String> {
    check_keys(
        args,
        &[
            "port",
            "listen",
            "auth-anonymous",
            "auth-ip-acl",
            "auth-cookie",
            "auth-cookie-enabled",
        ],
    )?;
    let port = match args.get("port") {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("port='{p}' is not a port number (1-65535)"))?,
        None => 4713,
    };
    let anonymous = match args.get("auth-anonymous") {
        Some(v) => parse_bool("auth-anonymous", v)?,
        None => false,
    };
    let allow = match args.get("auth-ip-acl") {
        Some(acl) => acl
            .split(';')
            .filter(|a| !a.trim().is_empty())
            .map(crate::io::tcp::Net::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("auth-ip-acl: {e}"))?,
        None => Vec::new(),
    };
    let cookie_enabled = match args.get("auth-cookie-enabled") {
        Some(v) => parse_bool("auth-cookie-enabled", v)?,
        None => true,
    };
    let cookie = if cookie_enabled && !anonymous {
        let path = args
            .get("auth-cookie")
            .map(|p| std::path::PathBuf::from(unescape(p)))
            .or_else(|| srv.opts.cookie_path.clone())
            .or_else(crate::io::tcp::default_cookie_path)
            .ok_or("no cookie path: give auth-cookie= (HOME is not set)")?;
        let c = crate::io::tcp::load_or_create_cookie(&path).map_err(|e| format!("{e:#}"))?;
        Some(Arc::new(c))
    } else {
        None
    };
    let listener = match args.get("listen") {
        Some(a) => {
            let a = a.trim_start_matches('[').trim_end_matches(']');
            let ip: IpAddr = a
                .parse()
                .map_err(|_| format!("listen='{a}' is not an IPv4 or IPv6 address"))?;
            TcpListener::bind(SocketAddr::new(ip, port))
                .map_err(|e| format!("binding {}: {e}", SocketAddr::new(ip, port)))?
        }
        // PulseAudio listens on every address by default; one IPv6 socket serves IPv4
        // too unless the system turned that off, so IPv4 alone is the fallback.
        None => TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port))
            .or_else(|_| TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))))
            .map_err(|e| format!("binding port {port}: {e}"))?,
    };
    let addr = listener
        .local_addr()
        .map_err(|e| format!("local address: {e}"))?
        .to_string();
    let auth = TcpAuth {
        anonymous,
        allow,
        cookie,
    };
    Ok((listener, auth, addr))
}

/// Binds `module-native-protocol-unix`'s socket (refusing one a server answers on).
fn unix_listener(args: &BTreeMap<String, String>) -> Result<PulseListener, String> {
    check_keys(
        args,
        &[
            "socket",
            "auth-anonymous",
            "auth-group",
            "auth-group-enable",
            "auth-cookie",
            "auth-cookie-enabled",
            "srbchannel",
        ],
    )?;
    for key in [
        "auth-anonymous",
        "auth-group-enable",
        "auth-cookie-enabled",
        "srbchannel",
    ] {
        if let Some(v) = args.get(key) {
            parse_bool(key, v)?;
        }
    }
    let path = std::path::PathBuf::from(unescape(
        args.get("socket")
            .ok_or("socket= is required (the default socket is quaverd's own)")?,
    ));
    if !path.is_absolute() {
        return Err(format!(
            "socket='{}' must be an absolute path",
            path.display()
        ));
    }
    PulseListener::bind(&path).map_err(|e| format!("{e:#}"))
}

/// `module-native-protocol-tcp`: a TCP listener with PulseAudio's defaults.
pub(super) fn load_tcp(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, name, args, ..
    } = cx;
    let fail = cx.fail();
    let (listen, auth, addr) = tcp_listener(srv, args).map_err(fail)?;
    tracing::info!(
        "pulse: {name}: PulseAudio TCP clients served on {addr} ({})",
        auth.describe()
    );
    let acc = accept::spawn(
        srv,
        accept::Listen::Tcp(listen, auth),
        addr,
        "quaver-pulse-tcp",
        None,
    )
    .map_err(|e| fail(format!("{e:#}")))?;
    rec.acceptor = Some(acc);
    Ok(())
}

/// `module-native-protocol-unix`: another unix socket, trusted like the main one.
pub(super) fn load_unix(cx: &Load<'_>, rec: &mut ModuleRec) -> Result<(), PulseError> {
    let Load {
        srv, name, args, ..
    } = cx;
    let fail = cx.fail();
    let file = unix_listener(args).map_err(fail)?;
    let l = file
        .listener
        .try_clone()
        .map_err(|e| fail(format!("cloning the listener: {e}")))?;
    let addr = file.path().display().to_string();
    tracing::info!("pulse: {name}: PulseAudio clients served on {addr}");
    let acc = accept::spawn(
        srv,
        accept::Listen::Unix(l),
        addr,
        "quaver-pulse-unix",
        Some(file),
    )
    .map_err(|e| fail(format!("{e:#}")))?;
    rec.acceptor = Some(acc);
    Ok(())
}
