//! `set_port_latency` and `port_latencies`: the latency ranges JACK clients publish for
//! their own ports, kept with the aliases so that they go when the port goes, and
//! announced to every watcher so the other clients rerun their latency callbacks.

use super::store::MetaError;
use super::{WatchItem, meta_error};
use crate::NativeServer;
use quaver_protocol::message::{ErrorCode, PortLatency, Reply};

impl NativeServer {
    /// `set_port_latency`: only for a port of one of `client`'s callback nodes, so a
    /// client cannot rewrite what another says of its ports. A `latency` event for the
    /// port's node goes to every watcher when the ranges changed.
    pub(crate) fn set_port_latency(&self, client: u32, l: PortLatency) -> Reply {
        let changed = {
            let mut store = self.meta.lock_store();
            let Some(node) = self
                .engine
                .inspect(|g| g.ports.get(&l.port).map(|p| p.node))
            else {
                return meta_error(MetaError::NoSuchPort(l.port));
            };
            if self.check_callback(client, node).is_err() {
                return Reply::error(
                    ErrorCode::BadRequest,
                    format!(
                        "port {} is not a port of this client's callback nodes",
                        l.port
                    ),
                );
            }
            store.set_latency(l).then_some(node)
        };
        if let Some(node) = changed {
            self.meta.send(WatchItem::Latency(node));
        }
        Reply::Ok
    }

    /// `port_latencies`.
    pub(crate) fn port_latencies(&self) -> Reply {
        Reply::PortLatencies {
            ports: self.meta.lock_store().latencies(),
        }
    }
}
