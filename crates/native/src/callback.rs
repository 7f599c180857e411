//! Callback (JACK-style) nodes: a shared block for the ports' buffers, two eventfds to
//! wake the client and to hear back, and a graph node the engine drives each cycle.

use crate::rt::ShmCallback;
use crate::rt_transport::TransportLink;
use crate::{CallbackEntry, NativeServer, engine_error};
use quaver_dsp::{ChannelMap, ChannelPosition};
use quaver_engine::{
    CallbackConfig, CallbackNode, Direction as PortDir, NodeId, NodeKind, NodeSpec,
};
use quaver_protocol::callback::{CallbackGeometry, CallbackShm, EventBell};
use quaver_protocol::message::PortType as WireType;
use quaver_protocol::message::*;
use rustix::fd::{AsFd, OwnedFd};
use std::sync::Arc;

impl NativeServer {
    /// Ok if `node` is a callback node of `client`.
    pub(crate) fn check_callback(&self, client: u32, node: NodeId) -> Result<(), Reply> {
        let clients = self.clients.lock().expect("poisoned");
        if clients[&client].callbacks.contains_key(&node) {
            Ok(())
        } else {
            let msg = format!("node {node} is not a callback node of this client");
            Err(Reply::error(ErrorCode::NoSuchNode, msg))
        }
    }

    /// Opens a callback node for `client`: its shared block and eventfds (whose fds the
    /// reply carries) and its node, unlinked.
    pub(crate) fn create_callback(
        &self,
        client: u32,
        p: &CallbackParams,
    ) -> Result<(CallbackCreated, Vec<OwnedFd>), Reply> {
        self.check_stream_limit(client)?;
        let opts = &self.callbacks;
        let max_in = p.max_inputs.unwrap_or(0).max(p.inputs.len() as u32);
        let max_out = p.max_outputs.unwrap_or(0).max(p.outputs.len() as u32);
        if max_in > opts.max_ports || max_out > opts.max_ports {
            let msg = format!(
                "{max_in} inputs / {max_out} outputs exceed the limit of {} ports per direction",
                opts.max_ports
            );
            return Err(Reply::error(ErrorCode::TooMany, msg));
        }
        let cfg = self.engine.config();
        let rate = self.engine.rate();
        let geo = CallbackGeometry {
            inputs: max_in,
            outputs: max_out,
            max_frames: cfg.quantum_max as u32,
        };
        let internal = |what: &str, e: std::io::Error| {
            Reply::error(ErrorCode::Internal, format!("{what}: {e}"))
        };
        let (shm, memfd) =
            CallbackShm::create(geo, rate).map_err(|e| internal("creating shared memory", e))?;
        let shm = Arc::new(shm);
        let wake = Arc::new(EventBell::new().map_err(|e| internal("creating eventfd", e))?);
        let done = EventBell::new().map_err(|e| internal("creating eventfd", e))?;
        let wake_fd =
            rustix::io::dup(wake.as_fd()).map_err(|e| internal("dup eventfd", e.into()))?;
        let done_fd =
            rustix::io::dup(done.as_fd()).map_err(|e| internal("dup eventfd", e.into()))?;
        let positions = |ports: &[PortParams]| {
            ChannelMap(
                ports
                    .iter()
                    .enumerate()
                    .map(|(i, p)| p.channel.unwrap_or(ChannelPosition::Aux(i as u16)))
                    .collect(),
            )
        };
        let mut spec = NodeSpec::new(&p.name.replace(':', "_"), NodeKind::Filter);
        spec.description = format!("callback client of client {client}");
        spec.inputs = positions(&p.inputs);
        spec.outputs = positions(&p.outputs);
        spec.input_names = p.inputs.iter().map(|p| p.name.clone()).collect();
        spec.output_names = p.outputs.iter().map(|p| p.name.clone()).collect();
        spec.input_types = p.inputs.iter().map(|p| engine_type(p.port_type)).collect();
        spec.output_types = p.outputs.iter().map(|p| engine_type(p.port_type)).collect();
        spec.max_inputs = max_in as usize;
        spec.max_outputs = max_out as usize;
        spec.keep_awake = true;
        spec.owner = Some(client);
        // JACK programs assume power-of-two buffer sizes (FFT blocks, partitioned
        // convolution), as JACK itself gives them.
        spec.pow2_quantum = true;
        spec.latency_frames = p.quantum.map(|q| {
            self.engine
                .latency_for_quantum(q as usize)
                .min(u32::MAX as usize) as u32
        });
        let token = self.engine.transport().new_token();
        let mut link = TransportLink::new(self.engine.transport().clone(), token);
        // The client may query the transport before its node's first cycle; the RT
        // thread takes over writing the line once the node is in the graph.
        link.publish(&shm);
        let (node, stats) = CallbackNode::new(
            ShmCallback {
                shm: shm.clone(),
                wake: wake.clone(),
                done,
                seq: 0,
                transport: link,
            },
            CallbackConfig {
                deadline: opts.deadline,
                async_after: opts.async_after,
                hung_ms: opts.hung_ms,
                recover_ms: opts.recover_ms,
                spin_us: opts.spin_us,
                asynchronous: opts.asynchronous,
            },
        );
        let id = self
            .engine
            .add_node(spec, Some(Box::new(node)))
            .map_err(engine_error)?;
        let g = self.engine.graph();
        let n = &g.nodes[&id];
        let ports = n
            .inputs
            .iter()
            .chain(&n.outputs)
            .map(|pid| callback_port(&g.ports[pid]))
            .collect();
        {
            let mut clients = self.clients.lock().expect("poisoned");
            let c = clients.get_mut(&client).expect("registered at hello");
            c.streams.push(id);
            c.callbacks.insert(
                id,
                CallbackEntry {
                    stats,
                    shm,
                    wake,
                    quantum: p.quantum,
                    transport_token: token,
                    transport: self.engine.transport().clone(),
                },
            );
        }
        tracing::info!(
            "client {client}: callback node {} ({max_in} in / {max_out} out reserved{})",
            n.name,
            p.quantum
                .map(|q| format!(", asks for quantum {q}"))
                .unwrap_or_default()
        );
        Ok((
            CallbackCreated {
                node: id,
                node_name: n.name.clone(),
                rate,
                quantum: self.engine.quantum() as u32,
                max_frames: geo.max_frames,
                max_inputs: max_in,
                max_outputs: max_out,
                ports,
                deadline: opts.deadline,
                async_after: opts.async_after,
                hung_ms: opts.hung_ms,
                recover_ms: opts.recover_ms,
            },
            vec![memfd, wake_fd, done_fd],
        ))
    }
}

/// A port as the callback protocol describes it.
pub(crate) fn callback_port(p: &quaver_engine::graph::Port) -> CallbackPort {
    CallbackPort {
        id: p.id,
        name: p.name.clone(),
        direction: match p.direction {
            PortDir::In => PortDirection::In,
            PortDir::Out => PortDirection::Out,
        },
        index: p.index as u32,
        channel: p.channel.name(),
        port_type: wire_type(p.port_type),
    }
}

/// A port type of the protocol as the engine's.
pub(crate) fn engine_type(t: WireType) -> quaver_engine::PortType {
    match t {
        WireType::Audio => quaver_engine::PortType::Audio,
        WireType::Midi => quaver_engine::PortType::Midi,
    }
}

/// A port type of the engine as the protocol's.
pub(crate) fn wire_type(t: quaver_engine::PortType) -> WireType {
    match t {
        quaver_engine::PortType::Audio => WireType::Audio,
        quaver_engine::PortType::Midi => WireType::Midi,
    }
}
