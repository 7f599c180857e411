//! The real-time half of the native front-end: the engine's views of a stream's
//! shared-memory ring and of a callback client's shared block.
//!
//! Every method here runs on the engine's RT thread and follows its contract
//! (`quaver_engine::rt`): no allocation, no locks, no logging. The only syscalls are one
//! eventfd write per cycle (a stream's doorbell, a callback client's wake) and the
//! contract's one exception, for callback clients: a wait on the completion eventfd that
//! never runs past the cycle's deadline. The peer may scribble on the shared memory at
//! any time; `quaver_protocol` bounds every index and length read from it.

use crate::rt_transport::TransportLink;
use quaver_dsp::{Planar, PlanarMut};
use quaver_engine::callback::CallbackCycle;
use quaver_engine::midi::{self, PortSet};
use quaver_engine::stream::{FrameSink, FrameSource};
use quaver_engine::{CallbackMode, CallbackTransport};
use quaver_protocol::callback::{
    CLIENT_ACTIVE, CYCLE_FREEWHEEL, CallbackShm, CycleHeader, EventBell,
};
use quaver_protocol::shm::{Doorbell, FLAG_CLIENT_DRAIN, FLAG_SERVER_STARTED, ShmRing};
use std::sync::Arc;

/// The engine's view of a callback client: its shared block and eventfds.
pub(crate) struct ShmCallback {
    pub(crate) shm: Arc<CallbackShm>,
    pub(crate) wake: Arc<EventBell>,
    pub(crate) done: EventBell,
    pub(crate) seq: u64,
    pub(crate) transport: TransportLink,
}

impl CallbackTransport for ShmCallback {
    fn active(&self) -> bool {
        self.shm.client_flags() & CLIENT_ACTIVE != 0
    }
    fn completed(&self) -> bool {
        self.shm.done_seq() == self.seq
    }
    fn start(&mut self, c: &CallbackCycle, inputs: Planar<'_>) {
        self.start_midi(c, inputs, &PortSet::EMPTY);
    }
    fn start_midi(&mut self, c: &CallbackCycle, inputs: Planar<'_>, midi: &PortSet) {
        for i in 0..inputs.channels() {
            if midi.contains(i) {
                self.shm
                    .write_input_midi(i, midi::words(inputs.whole_channel(i)));
            } else {
                self.shm.write_input(i, inputs.channel(i));
            }
        }
        self.seq += 1;
        self.shm.publish_cycle(&CycleHeader {
            seq: self.seq,
            cycle: c.cycle,
            position: c.position,
            time_ns: c.time_ns,
            period_ns: c.period_ns,
            deadline_ns: c.deadline_ns,
            frames: c.frames,
            flags: if c.freewheel { CYCLE_FREEWHEEL } else { 0 },
        });
        self.wake.signal();
    }
    fn wait_completed(&mut self, deadline_ns: u64) -> bool {
        loop {
            if self.completed() {
                return true;
            }
            // A signal left over from a late answer wakes us early; re-check.
            if !self.done.wait_until(deadline_ns) {
                return self.completed();
            }
        }
    }
    fn read_outputs(&mut self, outputs: &mut PlanarMut<'_>) {
        self.read_outputs_midi(outputs, &PortSet::EMPTY);
    }
    fn read_outputs_midi(&mut self, outputs: &mut PlanarMut<'_>, midi: &PortSet) {
        let frames = outputs.frames() as u32;
        for o in 0..outputs.channels() {
            if midi.contains(o) {
                // Checked on the way in: bad events are dropped and counted lost.
                let list = midi::words_mut(outputs.whole_channel_mut(o));
                self.shm.read_output_midi(o, frames, list);
            } else {
                self.shm.read_output(o, outputs.channel_mut(o));
            }
        }
    }
    fn report(&mut self, xruns: u64, mode: CallbackMode) {
        self.shm.set_status(xruns, mode as u32);
        let active = self.active();
        self.transport.collect(&self.shm, active);
    }
    fn begin_cycle(&mut self) {
        self.transport.publish(&self.shm);
    }
    fn client_times(&self) -> Option<(u64, u64)> {
        self.shm.client_times(self.seq)
    }
}

/// Reads a playback stream's frames from its shared-memory ring.
pub(crate) struct ShmSource {
    pub(crate) ring: ShmRing,
    pub(crate) bell: Arc<Doorbell>,
    pub(crate) xruns_reported: u32,
}

impl FrameSource for ShmSource {
    fn available(&self) -> usize {
        self.ring.readable()
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        let n = self.ring.read(out);
        // The ring already turned NaN and infinities into silence; a client's absurd
        // magnitudes are clipped here, on the server's side only.
        let ch = self.ring.channels() as usize;
        for v in &mut out[..n * ch] {
            *v = quaver_dsp::format::finite_sample(*v);
        }
        n
    }
    fn draining(&self) -> bool {
        self.ring.flags() & FLAG_CLIENT_DRAIN != 0
    }
    fn report(&mut self, played: u64, delay: u32, xruns: u32, started: bool) {
        self.ring.set_played_pos(played);
        self.ring.set_delay_frames(delay);
        while self.xruns_reported < xruns {
            self.ring.add_xrun();
            self.xruns_reported += 1;
        }
        if started && self.ring.flags() & FLAG_SERVER_STARTED == 0 {
            self.ring.set_flags(FLAG_SERVER_STARTED);
        }
        // One eventfd write per cycle wakes a client blocked on a full ring or a drain.
        self.bell.ring();
    }
}

/// Writes a record stream's frames into its shared-memory ring.
pub(crate) struct ShmSink {
    pub(crate) ring: ShmRing,
    pub(crate) bell: Arc<Doorbell>,
    pub(crate) overruns_reported: u32,
}

impl FrameSink for ShmSink {
    fn write(&mut self, frames: &[f32]) -> usize {
        self.ring.write(frames)
    }
    fn report(&mut self, overruns: u32, delay: u32) {
        self.ring.set_delay_frames(delay);
        while self.overruns_reported < overruns {
            self.ring.add_xrun();
            self.overruns_reported += 1;
        }
        if self.ring.flags() & FLAG_SERVER_STARTED == 0 {
            self.ring.set_flags(FLAG_SERVER_STARTED);
        }
        self.bell.ring();
    }
}

#[cfg(test)]
mod tests {
    use quaver_engine::midi as engine_midi;
    use quaver_protocol::callback::{CallbackGeometry, CallbackShm};
    use quaver_protocol::midi as wire;

    /// The engine's event lists and the wire's are one format: a list the engine made
    /// reaches the client intact, and one a client made reaches the engine intact.
    #[test]
    fn engine_and_wire_lists_are_one_format() {
        let geo = CallbackGeometry {
            inputs: 1,
            outputs: 1,
            max_frames: 64,
        };
        let (shm, _fd) = CallbackShm::create(geo, 48000).unwrap();
        let mut list = vec![0u32; 64];
        engine_midi::push(&mut list, 3, &[0x90, 60, 100]);
        engine_midi::push(&mut list, 9, &[0xF0, 0x7E, 0x7F, 0x09, 0x01, 0xF7]);
        shm.write_input_midi(0, &list);
        let mut got = vec![0u32; 64];
        assert_eq!(shm.read_input_midi(0, 64, &mut got), 0);
        let seen: Vec<(u32, Vec<u8>)> = wire::events(&got)
            .map(|e| (e.time, e.data.to_vec()))
            .collect();
        let sent: Vec<(u32, Vec<u8>)> = engine_midi::events(&list)
            .map(|e| (e.time, e.data.to_vec()))
            .collect();
        assert_eq!(seen, sent);
        let mut out = vec![0u32; 64];
        wire::push(&mut out, 1, &[0xB0, 7, 127]);
        shm.write_output_midi(0, &out);
        let mut back = vec![0u32; 64];
        assert_eq!(shm.read_output_midi(0, 64, &mut back), 0);
        let e: Vec<_> = engine_midi::events(&back).collect();
        assert_eq!((e.len(), e[0].time, e[0].data), (1, 1, &[0xB0, 7, 127][..]));
    }
}
