//! `module-tunnel-sink-new` and `module-tunnel-source-new`: a local sink (source) whose
//! audio is played to (recorded from) another PulseAudio-protocol server over TCP —
//! PulseAudio, pipewire-pulse or another quaverd — authenticated with the cookie, as
//! PulseAudio 16's modules of those names do (docs/net.md, "PulseAudio tunnels").
//!
//! - Local half ([`local`]): a null sink with a tap behind it (or a null source with a
//!   feeder in front), moving audio through a wait-free ring between the RT thread and
//!   the tunnel's network thread; the RT side never touches the socket.
//! - Remote half ([`client`]): a native-protocol client built on the server side's
//!   wire code; one playback stream on the remote sink (`sink=`, else its default) fed
//!   as the remote's REQUESTs ask, or one record stream from `source=`.
//! - The network thread ([`run`]): serves the connection; when the remote goes (closed
//!   connection, killed stream) the local device goes too, its streams moved to the
//!   default devices by the module rescue path, logged once, and it reconnects with
//!   backoff, the device coming back (same name) when the remote does.
//!
//! Loading checks the arguments at once (a bad one fails LOAD_MODULE right away) and
//! starts the network thread, which connects and authenticates, bounded by
//! [`client::HANDSHAKE_TIMEOUT`] per step: the PulseAudio I/O thread, which serves
//! every client, never waits for the remote. The LOAD_MODULE reply is deferred until
//! the tunnel is up (the module is then listed and its device in the graph) or the
//! first connection failed, with the reason logged (a wrong address, a refused cookie,
//! a silent remote); see docs/net.md, "PulseAudio tunnels".

mod args;
mod client;
pub(crate) mod handle;
mod local;
mod run;

pub use client::TunnelError;
pub use handle::Tunnel;
pub use local::tap_for_alloc_guard;

use super::context::Load;
use super::loading::LoadDone;
use crate::rt::transport::Bell;
use pulseaudio::protocol::PulseError;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};

/// PulseAudio's name of the tunnel sink module.
pub(super) const SINK: &str = "module-tunnel-sink-new";
/// PulseAudio's name of the tunnel source module.
pub(super) const SOURCE: &str = "module-tunnel-source-new";

/// Starts loading `module-tunnel-sink-new` (`server`, `sink`, `sink_name`,
/// `sink_properties`, `cookie`, `latency_msec`, `format`, `channels`, `channel_map`,
/// `rate`, `reconnect_interval_ms`) or `module-tunnel-source-new` (the same with
/// `source`, `source_name`, `source_properties`), as `cx.name` says. Bad arguments fail
/// here; otherwise the network thread connects and tells `done` the module's index once
/// the tunnel is up, or that its first connection failed.
pub(super) fn start(cx: &Load<'_>, argument: &str, done: LoadDone) -> Result<(), PulseError> {
    let sink = cx.name == SINK;
    let fail = cx.fail();
    let a = args::parse(cx, sink).map_err(fail)?;
    let bell = Arc::new(Bell::new().map_err(|e| fail(format!("eventfd: {e}")))?);
    let stop = Arc::new(AtomicBool::new(false));
    let nodes = Arc::new(Mutex::new(Vec::new()));
    let conn = Arc::new(Mutex::new(None));
    let describe = format!(
        "{} {} {}, {} ch {} Hz {:?}, latency {} ms",
        a.shape.device.name,
        if sink { "plays to" } else { "records from" },
        a.describe_remote(),
        a.shape.map.len(),
        a.shape.rate,
        a.want.spec.format,
        a.latency_ms
    );
    let ctx = run::Ctx {
        srv: Arc::downgrade(cx.srv),
        module: if sink { SINK } else { SOURCE },
        addr: a.addr,
        cookie: a.cookie,
        want: a.want,
        shape: a.shape,
        codec: a.codec,
        stop: stop.clone(),
        bell: bell.clone(),
        nodes: nodes.clone(),
        dropped: Arc::new(AtomicU64::new(0)),
        cycle: Arc::new(AtomicUsize::new(0)),
        max_backoff: a.max_backoff,
        conn: conn.clone(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let first = run::First {
        done,
        argument: argument.to_string(),
        describe,
        tunnel: rx,
    };
    let thread = std::thread::Builder::new()
        .name("quaver-tunnel".into())
        .spawn(move || run::run(ctx, first))
        .map_err(|e| fail(format!("cannot start the tunnel's thread: {e}")))?;
    let _ = tx.send(Arc::new(Tunnel::new(stop, bell, thread, nodes, conn)));
    Ok(())
}
