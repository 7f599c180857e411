//! One client's connection: the hello handshake, the request loop, and the event
//! stream of a client that asked to `watch`.

use crate::callback::callback_port;
use crate::{ClientEntry, NativeServer, engine_error};
use quaver_dsp::ChannelPosition;
use quaver_engine::Direction as PortDir;
use quaver_protocol::framing::{FramedSocket, decode_json, encode_json};
use quaver_protocol::message::*;
use rustix::fd::{AsFd, OwnedFd};
use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// True if the client closed its end (checked without reading: a watching client
/// sends nothing, so any readable state means EOF or garbage, and either ends it).
fn peer_gone(sock: &FramedSocket) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        sock.get_ref(),
        rustix::event::PollFlags::IN | rustix::event::PollFlags::RDHUP,
    )];
    matches!(rustix::event::poll(&mut fds, Some(&rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 })), Ok(n) if n > 0)
}

fn peer_pid(stream: &UnixStream) -> Option<u32> {
    rustix::net::sockopt::socket_peercred(stream)
        .ok()
        .map(|c| c.pid.as_raw_nonzero().get() as u32)
}

impl NativeServer {
    /// Serves a new connection on a thread of its own, or refuses it past the client limit.
    pub(crate) fn start_client(self: Arc<Self>, stream: UnixStream) {
        let id = self.next_client.fetch_add(1, Ordering::Relaxed);
        let pid = peer_pid(&stream);
        let full = self.clients.lock().expect("poisoned").len() >= self.opts.max_clients;
        if full {
            tracing::warn!(
                "refusing client {id} (pid {pid:?}): {} clients connected",
                self.opts.max_clients
            );
            let mut sock = FramedSocket::new(stream);
            let msg = format!("too many clients (limit {})", self.opts.max_clients);
            let _ = send_reply(&mut sock, 0, Reply::error(ErrorCode::TooMany, msg), &[]);
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("quaver-client-{id}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                self.client_loop(id, pid, stream);
                self.drop_client(id);
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start a thread for client {id}: {e}");
        }
    }

    /// Forgets a client that left: its callback nodes learn they are gone, and its
    /// nodes leave the graph.
    fn drop_client(&self, id: u32) {
        let entry = self.clients.lock().expect("poisoned").remove(&id);
        if let Some(c) = entry {
            for cb in c.callbacks.values() {
                cb.retire();
            }
            for node in &c.streams {
                if let Err(e) = self.engine.remove_node(*node) {
                    tracing::warn!("removing stream {node} of client {id}: {e}");
                }
            }
            tracing::info!(
                "client {id} ({}) left; {} stream(s) removed",
                c.name,
                c.streams.len()
            );
        }
    }

    fn client_loop(&self, id: u32, pid: Option<u32>, stream: UnixStream) {
        let mut sock = FramedSocket::new(stream);
        let mut hello = false;
        loop {
            let (bytes, _fds) = match sock.recv() {
                Ok(Some(m)) => m,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("client {id}: {e}; disconnecting");
                    return;
                }
            };
            let env: RequestEnvelope = match decode_json(&bytes) {
                Ok(env) => env,
                Err(e) => {
                    tracing::warn!("client {id}: bad request: {e}");
                    let reply = Reply::error(ErrorCode::BadRequest, e.to_string());
                    if send_reply(&mut sock, 0, reply, &[]).is_err() {
                        return;
                    }
                    continue;
                }
            };
            let (reply, fds) = if let Err(why) = env.request.validate() {
                (Reply::error(ErrorCode::BadRequest, why), Vec::new())
            } else if !hello {
                match env.request {
                    Request::Hello {
                        version,
                        client_name,
                    } => {
                        if version != PROTOCOL_VERSION {
                            let msg = format!(
                                "protocol version {version} is not supported; this server speaks {PROTOCOL_VERSION}"
                            );
                            let _ = send_reply(
                                &mut sock,
                                env.id,
                                Reply::error(ErrorCode::UnsupportedVersion, msg),
                                &[],
                            );
                            return;
                        }
                        hello = true;
                        tracing::info!("client {id} connected: {client_name} (pid {pid:?})");
                        self.clients.lock().expect("poisoned").insert(
                            id,
                            ClientEntry {
                                name: client_name,
                                pid,
                                streams: Vec::new(),
                                kinds: BTreeMap::new(),
                                callbacks: BTreeMap::new(),
                            },
                        );
                        (
                            Reply::Welcome {
                                server_version: env!("CARGO_PKG_VERSION").to_string(),
                                protocol_version: PROTOCOL_VERSION,
                            },
                            Vec::new(),
                        )
                    }
                    _ => (
                        Reply::error(ErrorCode::BadRequest, "the first request must be hello"),
                        Vec::new(),
                    ),
                }
            } else if env.request == Request::Watch {
                if send_reply(&mut sock, env.id, Reply::Ok, &[]).is_err() {
                    return;
                }
                self.watch_loop(id, &mut sock);
                return;
            } else {
                self.handle(id, env.request)
            };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            if let Err(e) = send_reply(&mut sock, env.id, reply, &borrowed) {
                tracing::debug!("client {id}: send failed: {e}");
                return;
            }
        }
    }

    /// Serves a connection that asked to `watch`: one event per graph, device or
    /// property change until the client goes away (noticed at the next send, or by a
    /// hangup poll).
    fn watch_loop(&self, client: u32, sock: &mut FramedSocket) {
        use crate::meta::WatchItem;
        use quaver_engine::GraphEvent as E;
        let rx = self.meta.subscribe();
        tracing::debug!("client {client} watches the graph");
        loop {
            // Wake up now and then only to notice a client that left while nothing
            // changed; an event is sent at once.
            let e = match rx.recv_timeout(std::time::Duration::from_secs(5)) {
                Ok(e) => e,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if peer_gone(sock) {
                        return;
                    }
                    continue;
                }
                Err(_) => return,
            };
            let mut session = None;
            let (event, node, property) = match e {
                WatchItem::Graph(E::NodeAdded(n)) => ("node_added", Some(n), None),
                WatchItem::Graph(E::NodeRemoved(n)) => ("node_removed", Some(n), None),
                WatchItem::Graph(E::NodeChanged(n)) => ("node_changed", Some(n), None),
                WatchItem::Graph(E::LinksChanged) => ("links_changed", None, None),
                WatchItem::Graph(E::Suspended(true)) => ("suspended", None, None),
                WatchItem::Graph(E::Suspended(false)) => ("resumed", None, None),
                WatchItem::Graph(E::DeviceGone(_)) => ("device_gone", None, None),
                WatchItem::Property(p) => ("property", None, Some(p)),
                WatchItem::Latency(n) => ("latency", Some(n), None),
                WatchItem::Session(n, ev) => {
                    session = Some(ev);
                    ("session", Some(n), None)
                }
            };
            let reply = Reply::Event(GraphEvent {
                event: event.into(),
                node,
                property,
                session,
            });
            if send_reply(sock, 0, reply, &[]).is_err() {
                return;
            }
        }
    }

    fn handle(&self, client: u32, req: Request) -> (Reply, Vec<OwnedFd>) {
        let none = Vec::new();
        match req {
            Request::Hello { .. } => (
                Reply::error(ErrorCode::BadRequest, "hello was already sent"),
                none,
            ),
            Request::Watch => (Reply::Ok, none),
            r @ (Request::TransportStart
            | Request::TransportStop
            | Request::TransportLocate { .. }
            | Request::TransportQuery
            | Request::SetTimebase { .. }
            | Request::ReleaseTimebase { .. }
            | Request::SetSyncTimeout { .. }) => (self.transport_request(client, &r), none),
            Request::Status => (Reply::Status(self.status()), none),
            Request::Process => (self.process_reply(), none),
            Request::Timing => (Reply::Timing(Box::new(self.timing())), none),
            Request::Graph => (Reply::Graph(self.graph_info()), none),
            Request::Quantum => (Reply::Quantum(self.quantum_report()), none),
            Request::ForceQuantum { quantum } => (self.force_quantum(client, quantum), none),
            Request::SetFreewheel { on } => (self.set_freewheel(client, on), none),
            Request::CreateStream(p) => match self.create_stream(client, &p) {
                Ok((created, fds)) => (Reply::StreamCreated(created), fds),
                Err(reply) => (reply, none),
            },
            Request::DestroyStream { node } => (self.destroy_stream(client, node), none),
            Request::Link { output, input } => match self
                .engine
                // As JACK (libjack's jack_connect comes this way): a link may close a
                // loop and then carries the previous cycle.
                .link_with_feedback(&output, &input)
            {
                Ok(_) => (Reply::Ok, none),
                Err(e) => (engine_error(e), none),
            },
            Request::Unlink { output, input } => match self.engine.unlink(&output, &input) {
                Ok(_) => (Reply::Ok, none),
                Err(e) => (engine_error(e), none),
            },
            Request::CreateCallback(p) => match self.create_callback(client, &p) {
                Ok((created, fds)) => (Reply::CallbackCreated(created), fds),
                Err(reply) => (reply, none),
            },
            Request::AddPort {
                node,
                direction,
                name,
                channel,
                port_type,
            } => (
                self.add_port(client, node, direction, &name, channel, port_type),
                none,
            ),
            Request::RemovePort { node, port } => {
                if let Err(r) = self.check_callback(client, node) {
                    return (r, none);
                }
                match self.engine.remove_port(node, port) {
                    Ok(()) => (Reply::Ok, none),
                    Err(e) => (engine_error(e), none),
                }
            }
            Request::SetQuantum { node, quantum } => {
                (self.set_quantum(client, node, quantum), none)
            }
            Request::SetProperty {
                subject,
                key,
                value,
                value_type,
            } => (
                self.set_property(subject, &key, &value.0, value_type.as_deref()),
                none,
            ),
            Request::GetProperties { subject } => (self.get_properties(subject), none),
            Request::RemoveProperty { subject, key } => (self.remove_property(subject, key), none),
            Request::RemoveAllProperties => (self.remove_all_properties(), none),
            Request::SetAlias { port, alias } => (self.alias(port, &alias, true), none),
            Request::UnsetAlias { port, alias } => (self.alias(port, &alias, false), none),
            Request::Aliases => (self.aliases(), none),
            Request::SetPortLatency {
                port,
                capture,
                playback,
            } => {
                let l = quaver_protocol::message::PortLatency {
                    port,
                    capture,
                    playback,
                };
                (self.set_port_latency(client, l), none)
            }
            Request::PortLatencies => (self.port_latencies(), none),
            Request::SetSessionCallback { node, on } => {
                (self.set_session_callback(client, node, on), none)
            }
            Request::HasSessionCallback { name } => (self.has_session_callback(&name), none),
            Request::SessionNotify { target, kind, path } => {
                (self.session_notify(target.as_deref(), kind, &path), none)
            }
            Request::SessionReply {
                node,
                command,
                flags,
            } => (self.session_reply(client, node, command, flags), none),
            Request::SetFilterControl {
                node,
                index,
                control,
                value,
            } => match self
                .engine
                .filter_control(&node, index as usize, &control, value)
            {
                Ok(()) => (Reply::Ok, none),
                Err(e) => (engine_error(e), none),
            },
            Request::SetVolume { node, volume, mute } => {
                match self.engine.set_volume(&node, volume, mute) {
                    Ok(()) => {
                        self.remember(&node, volume, mute);
                        (Reply::Ok, none)
                    }
                    Err(e) => (engine_error(e), none),
                }
            }
        }
    }

    /// `destroy_stream`: one of this client's streams (or callback nodes) leaves.
    fn destroy_stream(&self, client: u32, node: u32) -> Reply {
        let owned = {
            let mut clients = self.clients.lock().expect("poisoned");
            let c = clients.get_mut(&client).expect("registered at hello");
            let before = c.streams.len();
            c.streams.retain(|&n| n != node);
            c.kinds.remove(&node);
            if let Some(cb) = c.callbacks.remove(&node) {
                cb.retire();
            }
            before != c.streams.len()
        };
        if !owned {
            let msg = format!("node {node} is not a stream of this client");
            return Reply::error(ErrorCode::NoSuchNode, msg);
        }
        match self.engine.remove_node(node) {
            Ok(()) => Reply::Ok,
            Err(e) => engine_error(e),
        }
    }

    /// `add_port`: a port added to one of this client's callback nodes.
    fn add_port(
        &self,
        client: u32,
        node: u32,
        direction: PortDirection,
        name: &str,
        channel: Option<ChannelPosition>,
        port_type: quaver_protocol::message::PortType,
    ) -> Reply {
        if let Err(r) = self.check_callback(client, node) {
            return r;
        }
        let dir = match direction {
            PortDirection::In => PortDir::In,
            PortDirection::Out => PortDir::Out,
        };
        let channel = channel.unwrap_or_else(|| {
            let g = self.engine.graph();
            let n = g.nodes.get(&node).map_or(0, |n| match dir {
                PortDir::In => n.inputs.len(),
                PortDir::Out => n.outputs.len(),
            });
            ChannelPosition::Aux(n as u16)
        });
        let ty = crate::callback::engine_type(port_type);
        match self
            .engine
            .add_port_typed(node, dir, Some(name), channel, ty)
        {
            Ok(id) => {
                let g = self.engine.graph();
                Reply::PortAdded(callback_port(&g.ports[&id]))
            }
            Err(e) => engine_error(e),
        }
    }

    /// `set_quantum`: the quantum one of this client's nodes asks for, as a latency
    /// request.
    fn set_quantum(&self, client: u32, node: u32, quantum: Option<u32>) -> Reply {
        {
            let mut clients = self.clients.lock().expect("poisoned");
            let c = clients.get_mut(&client).expect("registered at hello");
            if !c.streams.contains(&node) {
                let msg = format!("node {node} is not a node of this client");
                return Reply::error(ErrorCode::NoSuchNode, msg);
            }
            if let Some(cb) = c.callbacks.get_mut(&node) {
                cb.quantum = quantum;
            }
        }
        // A quantum Q is the latency request the engine turns back into Q.
        let latency = quantum.map(|q| {
            self.engine
                .latency_for_quantum(q as usize)
                .min(u32::MAX as usize) as u32
        });
        match self.engine.set_latency(node, latency) {
            Ok(()) => Reply::Ok,
            Err(e) => engine_error(e),
        }
    }
}

fn send_reply(
    sock: &mut FramedSocket,
    id: u64,
    reply: Reply,
    fds: &[rustix::fd::BorrowedFd<'_>],
) -> std::io::Result<()> {
    let bytes = encode_json(&ReplyEnvelope { id, reply })
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    sock.send(&bytes, fds)
}
