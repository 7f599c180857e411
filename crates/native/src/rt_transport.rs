//! A callback client's share of the JACK transport, on the RT thread: each cycle the
//! transport the engine published goes into the client's shared block, and what the
//! client wrote back (commands, position requests, its sync answer, the master's BBT)
//! goes to the engine's transport after validation (docs/engine/transport.md).

use quaver_engine::rt::transport::{
    POSITION_EXTRA_WORDS, Position, TransportShared, TransportSnapshot, TransportState,
};
use quaver_protocol::callback::{
    CallbackShm, POS_WORDS, TRANSPORT_START, TRANSPORT_STOP, TransportWords,
};
use std::sync::Arc;

/// The words of a position in the block (frame, valid, then the rest).
pub(crate) fn to_words(p: &Position) -> [u32; POS_WORDS] {
    let mut w = [0; POS_WORDS];
    w[0] = p.frame;
    w[1] = p.valid;
    w[2..].copy_from_slice(&p.extra);
    w
}

/// A position from the block's words.
pub(crate) fn from_words(w: &[u32; POS_WORDS]) -> Position {
    let mut extra = [0; POSITION_EXTRA_WORDS];
    extra.copy_from_slice(&w[2..]);
    Position {
        frame: w[0],
        valid: w[1],
        extra,
    }
}

/// One callback node's link to the engine's transport.
pub(crate) struct TransportLink {
    shared: Arc<TransportShared>,
    /// This node's timebase-master token.
    token: u64,
    snap: TransportSnapshot,
    cmd_seq: u32,
    req_seq: u32,
    bbt_seq: u32,
}

impl TransportLink {
    pub(crate) fn new(shared: Arc<TransportShared>, token: u64) -> TransportLink {
        TransportLink {
            shared,
            token,
            snap: TransportSnapshot::default(),
            cmd_seq: 0,
            req_seq: 0,
            bbt_seq: 0,
        }
    }

    /// Publishes this cycle's transport to the client. *RT*.
    pub(crate) fn publish(&mut self, shm: &CallbackShm) {
        self.snap = self.shared.snapshot();
        let s = &self.snap;
        shm.publish_transport(&TransportWords {
            state: s.state as u32,
            master: s.master == self.token,
            sync_epoch: s.sync_epoch,
            timebase_epoch: s.timebase_epoch,
            frame_rate: s.rate,
            usecs: s.usecs,
            current: to_words(&s.current),
            next: to_words(&s.next),
        });
    }

    /// Takes what the client wrote: its sync answer while starting (only from an
    /// active client, as jackd2 waits only for those), start/stop commands, position
    /// requests and, from the master, BBT. Words the client wrote are checked by the
    /// engine's transport (unknown position bits are refused and counted). *RT*.
    pub(crate) fn collect(&mut self, shm: &CallbackShm, active: bool) {
        let t = &*self.shared;
        if active && self.snap.state == TransportState::Starting {
            let (slow, ready) = shm.sync_answer();
            if slow && ready != self.snap.sync_epoch {
                t.report_unready();
            }
        }
        let (seq, cmd) = shm.transport_command();
        if seq != self.cmd_seq {
            self.cmd_seq = seq;
            match cmd {
                TRANSPORT_START => t.start(),
                TRANSPORT_STOP => t.stop(),
                _ => t.count_refused(),
            }
        }
        if let Some((seq, w)) = shm.transport_request()
            && seq != self.req_seq
        {
            self.req_seq = seq;
            t.request_rt(&from_words(&w));
        }
        if let Some((seq, w)) = shm.transport_bbt()
            && seq != self.bbt_seq
        {
            self.bbt_seq = seq;
            if self.snap.master == self.token && !t.report_master(self.token, &from_words(&w)) {
                t.count_refused();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
    use quaver_engine::rt::transport::TransportEngine;
    use quaver_protocol::callback::{CallbackGeometry, TransportPosition};

    // Only counts inside `assert_no_alloc`; the other tests of this crate are unaffected.
    #[global_allocator]
    static A: AllocDisabler = AllocDisabler;

    /// A client's words go through a node's link to the engine and back, and the RT
    /// side of it (publish, collect, the engine's cycle) allocates nothing.
    #[test]
    fn a_clients_transport_words_reach_the_engine_without_allocating() {
        let geo = CallbackGeometry {
            inputs: 0,
            outputs: 1,
            max_frames: 256,
        };
        let (server, fd) = CallbackShm::create(geo, 48000).unwrap();
        let client = CallbackShm::open(fd, geo).unwrap();
        let shared = Arc::new(TransportShared::default());
        let mut engine = TransportEngine::new(shared.clone());
        let token = shared.new_token();
        let mut link = TransportLink::new(shared.clone(), token);
        shared.set_master(token, false).unwrap();
        client.set_slow_sync(true);
        reset_violation_count();
        let mut cycle = |link: &mut TransportLink| {
            assert_no_alloc(|| {
                engine.cycle(256, 48000, 0);
                link.publish(&server);
                link.collect(&server, true);
            });
            client.transport()
        };
        cycle(&mut link);
        client.send_transport_command(TRANSPORT_START);
        cycle(&mut link);
        let t = cycle(&mut link);
        assert_eq!(t.state, TransportState::Starting as u32);
        assert!(t.master);
        // Not ready: still starting; ready: rolling.
        assert_eq!(cycle(&mut link).state, TransportState::Starting as u32);
        client.set_ready_epoch(t.sync_epoch);
        cycle(&mut link);
        let t = cycle(&mut link);
        assert_eq!(t.state, TransportState::Rolling as u32);
        // The master's BBT for the next cycle is everyone's in the next cycle.
        let mut p = TransportPosition::from_words(&t.next);
        p.valid = 0x10;
        p.bar = 5;
        client.write_bbt(&p.to_words());
        cycle(&mut link);
        let t = cycle(&mut link);
        let cur = TransportPosition::from_words(&t.current);
        assert_eq!((cur.valid, cur.bar), (0x10, 5));
        // A request with bits JACK does not define is refused and counted.
        let bad = TransportPosition {
            frame: 7,
            valid: 0x1,
            ..TransportPosition::default()
        };
        client.send_transport_request(&bad.to_words());
        cycle(&mut link);
        assert_eq!(shared.refused(), 1);
        assert_ne!(
            TransportPosition::from_words(&cycle(&mut link).current).frame,
            7
        );
        client.send_transport_request(&TransportPosition::default().to_words());
        cycle(&mut link);
        cycle(&mut link);
        assert_eq!(cycle(&mut link).state, TransportState::Starting as u32);
        for _ in 0..1000 {
            cycle(&mut link);
        }
        assert_eq!(
            violation_count(),
            0,
            "allocations on the RT side of the transport"
        );
    }
}
