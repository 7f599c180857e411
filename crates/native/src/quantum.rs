//! The graph's clock as a server setting: `force_quantum`, `set_freewheel` and the
//! `quantum` report.

use crate::{NativeServer, engine_error};
use quaver_engine::QuantumSource;
use quaver_protocol::message::{QuantumReport, Reply};

impl NativeServer {
    /// Forces (or releases, `None`) the quantum for the whole graph. Anyone may, as
    /// any JACK client may set jackd2's buffer size; it outlives the connection.
    pub(crate) fn force_quantum(&self, client: u32, quantum: Option<u32>) -> Reply {
        match self.engine.force_quantum(quantum.map(|q| q as usize)) {
            Ok(()) => {
                tracing::debug!("client {client} forced quantum {quantum:?}");
                Reply::Ok
            }
            Err(e) => engine_error(e),
        }
    }

    /// Starts or stops freewheeling; anyone may, as any JACK client may on jackd2.
    pub(crate) fn set_freewheel(&self, client: u32, on: bool) -> Reply {
        match self.engine.set_freewheel(on) {
            Ok(()) => {
                tracing::debug!("client {client} set freewheel {on}");
                Reply::Ok
            }
            Err(e) => engine_error(e),
        }
    }

    /// The quantum in force and why.
    pub(crate) fn quantum_report(&self) -> QuantumReport {
        let q = self.engine.quantum_info();
        let frames = |v: usize| v.min(u32::MAX as usize) as u32;
        let (source, node, node_name, latency) = match q.source {
            QuantumSource::Forced => ("forced", None, None, None),
            QuantumSource::Requested {
                node,
                name,
                latency,
            } => ("requested", Some(node), Some(name), Some(latency)),
            QuantumSource::Default => ("default", None, None, None),
        };
        QuantumReport {
            quantum: frames(q.quantum),
            source: source.into(),
            forced: q.forced.map(frames),
            node,
            node_name,
            latency,
            min: frames(q.min),
            max: frames(q.max),
            default: frames(q.default),
            freewheel: self.engine.freewheel(),
        }
    }
}
