//! LOAD_MODULE / UNLOAD_MODULE for the modules quaver can express as graph objects.
//!
//! - `module-null-sink`: a sink node without a device. Its processor copies the (post-
//!   volume) inputs to its outputs, which are the monitor, exactly as a device sink's
//!   outputs are; nothing is played anywhere.
//! - `module-null-source`: a source node without a device that records silence.
//! - `module-combine-sink`: the same kind of node, its outputs linked to every slave
//!   sink: what is played into it is played on all of them.
//! - `module-remap-sink`: the same kind of node in the remapped layout, its outputs
//!   linked channel by channel to the master sink (`master_channel_map`).
//! - `module-remap-source`: a source node in the remapped layout, its inputs linked
//!   channel by channel from the master source (or monitor), e.g. one channel of a
//!   multi-channel interface as a mono microphone.
//! - `module-loopback`: a node from a source (or a sink's monitor) to a sink, listed as
//!   a sink input (volume, mute, move). Both ends run on the engine's one clock, so no
//!   resampler or latency adaptation is needed.
//! - `module-echo-cancel`: a source cleaned of what a sink plays and a sink playing on
//!   it (`echo`, over quaver_engine::echo).
//!
//! - `module-native-protocol-tcp`: a TCP listener (`port`, `listen`, `auth-anonymous`,
//!   `auth-ip-acl`, `auth-cookie`, `auth-cookie-enabled`, with PulseAudio's defaults:
//!   port 4713 on every address, the cookie required); unloading it stops the listener
//!   and disconnects the clients it let in.
//! - `module-native-protocol-unix`: another unix socket (`socket`, an absolute path);
//!   its clients are trusted like the main socket's.
//! - `module-tunnel-sink-new`, `module-tunnel-source-new`: a sink (source) played to
//!   (recorded from) a remote PulseAudio-protocol server over TCP ([`tunnel`]).
//!
//! Other modules answer PA_ERR_MODINITFAILED, as PulseAudio does for a module it cannot
//! load.
//!
//! One file per kind of module: `null` (null sink and source, and the argument checks
//! every sink or source shares), `combine`, `remap`, `loopback`, [`pipe`], `protocol`
//! (TCP and unix listeners), `idle` (suspend-on-idle); the processors their nodes run
//! in `nodes`. Below them: `args` (the argument syntax), [`record`] (what a loaded
//! module is), `context` (what a constructor works from). This file holds [`load`],
//! which dispatches by name, and [`unload`].

mod args;
mod combine;
mod context;
mod echo;
mod idle;
pub(crate) mod loading;
mod loopback;
mod nodes;
mod null;
pub mod pipe;
mod protocol;
pub mod record;
mod remap;
pub(crate) mod rescue;
pub mod tunnel;

pub use args::{parse_args, parse_args_raw, parse_channel_map, parse_props, unescape};
pub(crate) use loading::register;
pub use loading::{LoadDone, Loading};
pub use nodes::{LoopCapture, NullSink};
pub use null::{NullSinkPlan, null_sink};
pub use record::{
    DEVICE_RESTORE_MODULE, DEVICES_MODULE, FIRST_LOADED, ModuleRec, PROTOCOL_MODULE,
    RESTORE_MODULE, SUSPEND_ON_IDLE,
};

use crate::state::{Server, stream_target};
use context::{Load, port_layout};
use pulseaudio::protocol::PulseError;
use quaver_dsp::ChannelMap;
use quaver_engine::NodeId;
use std::sync::Arc;

/// Loads module `name` and lists it: at once ([`load_indexed`]), or for a tunnel, whose
/// remote may take seconds to answer, on the tunnel's own thread, `done` told the
/// outcome. Arguments found bad at once fail here either way.
pub fn load_or_start(
    srv: &Arc<Server>,
    name: &str,
    argument: &str,
    done: LoadDone,
) -> Result<Loading, PulseError> {
    if name == tunnel::SINK || name == tunnel::SOURCE {
        let cx = context(srv, name, argument)?;
        tunnel::start(&cx, argument, done)?;
        return Ok(Loading::Later);
    }
    load_indexed(srv, name, argument).map(Loading::Now)
}

/// Loads module `name` ([`load`]) and lists it under the next free index, which it
/// returns; subscribers are told.
pub fn load_indexed(srv: &Arc<Server>, name: &str, argument: &str) -> Result<u32, PulseError> {
    let rec = load(srv, name, argument)?;
    Ok(register(srv, rec))
}

/// What module `name`'s constructor works from.
fn context<'a>(
    srv: &'a Arc<Server>,
    name: &'a str,
    argument: &str,
) -> Result<Load<'a>, PulseError> {
    let args = parse_args_raw(argument).map_err(|why| {
        tracing::info!("pulse: {name}: {why}");
        PulseError::ModInitFailed
    })?;
    let graph = srv.engine.graph();
    let default_map = srv
        .default_sink(&graph)
        .and_then(|d| graph.nodes.get(&d.node))
        .map(|n| port_layout(&graph, n, true))
        .unwrap_or_else(ChannelMap::stereo);
    Ok(Load {
        srv,
        name,
        args,
        graph,
        default_map,
    })
}

/// Creates what module `name` stands for in the graph (a tunnel loads only through
/// [`load_or_start`]).
pub fn load(srv: &Arc<Server>, name: &str, argument: &str) -> Result<ModuleRec, PulseError> {
    let cx = context(srv, name, argument)?;
    let mut rec = ModuleRec::new(name, argument);
    let r = &mut rec;
    match name {
        "module-null-sink" => null::load_sink(&cx, r),
        "module-null-source" => null::load_source(&cx, r),
        "module-pipe-sink" => pipe::load::load_sink(&cx, r),
        SUSPEND_ON_IDLE => idle::load(&cx, r),
        "module-pipe-source" => pipe::load::load_source(&cx, r),
        "module-combine-sink" => combine::load(&cx, r),
        "module-remap-sink" => remap::load_sink(&cx, r),
        "module-remap-source" => remap::load_source(&cx, r),
        "module-loopback" => loopback::load(&cx, r),
        "module-echo-cancel" => echo::load(&cx, r),
        "module-native-protocol-tcp" => protocol::load_tcp(&cx, r),
        "module-native-protocol-unix" => protocol::load_unix(&cx, r),
        tunnel::SINK | tunnel::SOURCE => Err(cx.fail()(format!(
            "{name} connects on its own thread: loaded through load_or_start"
        ))),
        other => Err(cx.fail()(format!("{other} is not available in quaver"))),
    }?;
    Ok(rec)
}

/// Undoes [`load`]: streams on its sinks move to the default devices that remain (as
/// PulseAudio rescues them), then its nodes and links go.
pub fn unload(srv: &Server, m: &ModuleRec) {
    if let Some(acc) = &m.acceptor {
        acc.stop(srv);
    }
    // A tunnel's nodes come and go with its remote: its thread knows which are there.
    let nodes = match &m.tunnel {
        Some(t) => t.stop(),
        None => m.nodes.clone(),
    };
    rescue::remove_rescuing(srv, &nodes, &m.name);
    for (o, i) in &m.links {
        let _ = srv.engine.unlink(o, i);
    }
    // Its nodes are gone: the canceller's thread has nothing more to do.
    if let Some(e) = &m.echo {
        e.worker.stop();
    }
    // After its tap left the graph: what the tap wrote last still reaches the pipe.
    if let Some(p) = &m.pipe {
        let (written, lost) = p.counts();
        p.stop();
        tracing::info!("module-pipe-sink: {written} frames written, {lost} lost");
    }
    if let Some(p) = &m.pipe_in {
        p.stop();
        tracing::info!("module-pipe-source: {} frames read", p.frames_read());
    }
    if m.idle_suspend {
        match srv.engine.set_suspend_timeout(None) {
            Ok(()) => tracing::info!("idle devices no longer suspend"),
            Err(e) => tracing::warn!("{SUSPEND_ON_IDLE}: {e}"),
        }
    }
}

/// Unloads every module a node it needs has left (a remap whose master sink was
/// unloaded or unplugged), and then those that needed what it made.
pub fn unload_orphans(srv: &Server) {
    loop {
        // Every stream that ends comes here: copy the graph only when some module
        // depends on other nodes at all. Only modules listed before the copy is taken
        // are judged by it: one listed after may have linked its nodes after the copy
        // (a loopback seen without links is not stranded, only not yet loaded).
        let judged: std::collections::BTreeSet<u32> = {
            let st = srv.lock();
            let dependent = st
                .modules
                .values()
                .any(|m| !m.needs.is_empty() || m.capture.is_some());
            if !dependent {
                return;
            }
            st.modules.keys().copied().collect()
        };
        let graph = srv.engine.graph();
        let orphan = {
            let mut st = srv.lock();
            // A loop without a source has nothing to play; one whose sink went and
            // that no other sink could take (the default sink's monitor was its
            // source) plays nowhere: PulseAudio kills it too.
            let stranded_loop = |n: &NodeId| {
                graph.nodes.get(n).is_some_and(crate::state::is_loop)
                    && (crate::state::loop_source(&graph, *n).is_none()
                        || stream_target(&graph, *n).is_none())
            };
            let idx = st
                .modules
                .iter()
                .filter(|(i, _)| judged.contains(i))
                .find(|(_, m)| {
                    m.needs.iter().any(|n| !graph.nodes.contains_key(n))
                        || m.nodes.iter().any(stranded_loop)
                })
                .map(|(&i, _)| i);
            idx.and_then(|i| st.modules.remove(&i).map(|m| (i, m)))
        };
        let Some((idx, m)) = orphan else {
            return;
        };
        unload(srv, &m);
        srv.broadcast(
            pulseaudio::protocol::SubscriptionEventFacility::Module,
            pulseaudio::protocol::SubscriptionEventType::Removed,
            idx,
        );
        tracing::info!(
            "pulse: unloaded module #{idx} ({} {}): a device it needs is gone",
            m.name,
            m.argument
        );
    }
}
