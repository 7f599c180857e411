//! The JACK transport's native requests: start, stop, locate, query, the timebase
//! master and the sync timeout (docs/protocol/transport.md). Per-cycle traffic (a
//! libjack client's commands, sync answers, BBT) goes through the shared block
//! instead (`rt_transport.rs`).

use crate::NativeServer;
use quaver_engine::rt::transport::{Position, TimebaseError};
use quaver_protocol::message::*;

fn timebase_error(e: TimebaseError) -> Reply {
    let code = match e {
        TimebaseError::Busy => ErrorCode::Busy,
        TimebaseError::NotMaster => ErrorCode::BadRequest,
    };
    Reply::error(code, format!("{e} (errno {})", e.errno()))
}

impl NativeServer {
    /// The timebase-master token of `client`'s callback node `node`.
    fn transport_token(&self, client: u32, node: u32) -> Result<u64, Reply> {
        self.check_callback(client, node)?;
        let clients = self.clients.lock().expect("poisoned");
        Ok(clients[&client].callbacks[&node].transport_token)
    }

    /// Answers a transport request (already validated).
    pub(crate) fn transport_request(&self, client: u32, r: &Request) -> Reply {
        let t = self.engine.transport();
        match r {
            Request::TransportStart => t.start(),
            Request::TransportStop => t.stop(),
            Request::TransportLocate { frame } => {
                let Ok(frame) = u32::try_from(*frame) else {
                    return Reply::error(ErrorCode::BadRequest, "frame out of range (EINVAL)");
                };
                if let Err(errno) = t.request(&Position {
                    frame,
                    ..Position::default()
                }) {
                    return Reply::error(ErrorCode::BadRequest, format!("errno {errno}"));
                }
            }
            Request::SetSyncTimeout { usecs } => t.set_sync_timeout(*usecs),
            Request::SetTimebase { node, conditional } => {
                let token = match self.transport_token(client, *node) {
                    Ok(t) => t,
                    Err(reply) => return reply,
                };
                if let Err(e) = t.set_master(token, *conditional) {
                    return timebase_error(e);
                }
            }
            Request::ReleaseTimebase { node } => {
                let token = match self.transport_token(client, *node) {
                    Ok(t) => t,
                    Err(reply) => return reply,
                };
                if let Err(e) = t.release_master(token) {
                    return timebase_error(e);
                }
            }
            Request::TransportQuery => return Reply::Transport(self.transport_info()),
            _ => return Reply::error(ErrorCode::Internal, "not a transport request"),
        }
        Reply::Ok
    }

    fn transport_info(&self) -> TransportInfo {
        let t = self.engine.transport();
        let s = t.snapshot();
        let master = (s.master != 0)
            .then(|| {
                let clients = self.clients.lock().expect("poisoned");
                clients.values().find_map(|c| {
                    c.callbacks
                        .iter()
                        .find(|(_, e)| e.transport_token == s.master)
                        .map(|(id, _)| *id)
                })
            })
            .flatten();
        let p = quaver_protocol::callback::TransportPosition::from_words(
            &crate::rt_transport::to_words(&s.current),
        );
        let bbt = p.valid & 0x10 != 0;
        TransportInfo {
            state: s.state.as_str().into(),
            frame: p.frame,
            valid: p.valid,
            bar: bbt.then_some(p.bar),
            beat: bbt.then_some(p.beat),
            tick: bbt.then_some(p.tick),
            beats_per_minute: bbt.then_some(p.beats_per_minute),
            master,
            sync_timeout_us: t.sync_timeout(),
            refused: t.refused(),
        }
    }
}
