//! The control side of a record stream (and its peak detector), and an upload.

use crate::io::export::ExportPool;
use crate::memstat::MemBlock;
use crate::rt::shared::{NEVER, RecShared};
use crate::wire::Out;
use crate::wire::bufattr::{self};
use crate::wire::convert::{Codec, frame_size, usec_to_bytes};
use pulseaudio::protocol::stream::BufferAttr;
use pulseaudio::protocol::{ChannelMap as PaMap, Props, SampleSpec};
use quaver_engine::NodeId;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, Release};

/// Record data is only queued while less than this is waiting for the socket.
pub(crate) const RECORD_OUT_LIMIT: usize = 512 * 1024;

/// Fragments of at most this many cycles are sent every cycle (see `Record::eager`).
pub(crate) const EAGER_QUANTA: usize = 4;

/// Without ADJUST_LATENCY a record stream gets data at least this often.
pub(crate) const TRADITIONAL_RECORD_USEC: u64 = 100_000;

/// The control side of a record stream.
pub(crate) struct Record {
    pub(crate) node: NodeId,
    pub(crate) channel: u32,
    pub(crate) spec: SampleSpec,
    pub(crate) codec: Codec,
    pub(crate) fs: usize,
    pub(crate) ch: usize,
    pub(crate) attr: BufferAttr,
    pub(crate) configured_usec: u64,
    pub(crate) shared: Arc<RecShared>,
    pub(crate) ring: rtrb::Consumer<f32>,
    /// The ring as a memory block for STAT, held as long as the stream.
    pub(crate) _ring_block: MemBlock,
    pub(crate) frag_frames: usize,
    /// The client asked for its latency (ADJUST_LATENCY or EARLY_REQUESTS): its
    /// fragment is a latency bound, not just a block size.
    pub(crate) latency_bound: bool,
    pub(crate) sent: u64,
    pub(crate) scratch: Vec<u8>,
    /// Peak detection (PEAK_DETECT below the engine rate, e.g. pavucontrol's 25 Hz
    /// level meters): the ring carries engine-rate frames, each output frame is the
    /// per-channel peak of `decim` of them, as PulseAudio's "peaks" resampler does.
    pub(crate) peak: Option<Peak>,
    /// The rate a VARIABLE_RATE stream's converter was built for (the creation rate,
    /// or the last rate it was retuned to; `None`: the rate is fixed).
    pub(crate) variable_rate: Option<u32>,
}

/// State of a peak-detecting record stream.
pub(crate) struct Peak {
    pub(crate) decim: usize,
    pub(crate) acc: Vec<f32>,
    pub(crate) count: usize,
    pub(crate) out: Vec<f32>,
}

impl Peak {
    pub(crate) fn feed(&mut self, samples: &[f32]) {
        let ch = self.acc.len();
        for frame in samples.chunks_exact(ch) {
            for (a, x) in self.acc.iter_mut().zip(frame) {
                *a = a.max(x.abs());
            }
            self.count += 1;
            if self.count == self.decim {
                self.out.extend_from_slice(&self.acc);
                self.acc.fill(0.0);
                self.count = 0;
            }
        }
    }
}

impl Record {
    /// Sends the encoded chunk in `scratch`: as references into the client's pool where
    /// it has one and the chunk is worth it, split at frame boundaries into slot-sized
    /// blocks; inline otherwise (and whenever the client holds every slot).
    pub(crate) fn send_scratch(&self, out: &mut Out, pool: Option<&mut ExportPool>) {
        let data = &self.scratch[..];
        let Some(pool) = pool.filter(|_| data.len() >= crate::io::export::MIN_SHARED) else {
            out.memblock(self.channel, data);
            return;
        };
        let piece = crate::io::export::SLOT_SIZE / self.fs * self.fs;
        for part in data.chunks(piece) {
            match pool.put(part) {
                Some((block_id, index)) => out.shm_memblock(
                    self.channel,
                    0,
                    [block_id, pool.shm_id, index, part.len() as u32],
                ),
                None => out.memblock(self.channel, part),
            }
        }
    }

    /// Whether every cycle's data goes out in its cycle: a client that asked for its
    /// latency with a fragment of at most [`EAGER_QUANTA`] cycles (the streams whose
    /// latency sets the quantum, e.g. a call or a latency probe), as PulseAudio sends
    /// each block its source posts. Larger fragments, and plain recorders (`parec`
    /// without `--latency-msec`), are gathered: one wakeup per fragment.
    fn eager(&self, cycle: usize) -> bool {
        self.latency_bound && cycle > 0 && self.frag_frames <= EAGER_QUANTA * cycle
    }

    pub(crate) fn service(&mut self, out: &mut Out, mut pool: Option<&mut ExportPool>) {
        if let Some(pk) = self.peak.as_mut() {
            let avail = self.ring.slots() / self.ch;
            if avail >= self.frag_frames && out.buf.len() < RECORD_OUT_LIMIT {
                if let Ok(chunk) = self.ring.read_chunk(avail * self.ch) {
                    let (a, b) = chunk.as_slices();
                    pk.feed(a);
                    pk.feed(b);
                    chunk.commit_all();
                    self.sent += avail as u64;
                }
                if !pk.out.is_empty() {
                    self.scratch.resize(pk.out.len() / self.ch * self.fs, 0);
                    self.codec.encode(&pk.out, &mut self.scratch);
                    pk.out.clear();
                    self.send_scratch(out, pool.as_deref_mut());
                }
            }
        }
        // Ready as the RT side rings: a whole fragment, one more cycle would overshoot
        // it, or (a small fragment) any cycle's data. Then everything queued goes, in
        // fragment-sized packets, so nothing rendered waits for a later cycle; otherwise
        // nothing, so other wakeups of this thread do not cut small packets.
        let cycle = self.shared.cycle_frames.load(Relaxed) as usize;
        let eager = self.eager(cycle);
        let queued = self.ring.slots() / self.ch;
        let ready = queued >= self.frag_frames
            || queued + cycle > self.frag_frames
            || (eager && queued > 0);
        while ready && self.peak.is_none() && out.buf.len() < RECORD_OUT_LIMIT {
            let avail = self.ring.slots() / self.ch;
            if avail == 0 {
                break;
            }
            let n = avail.min(self.frag_frames);
            let Ok(chunk) = self.ring.read_chunk(n * self.ch) else {
                break;
            };
            let (a, b) = chunk.as_slices();
            self.scratch.resize(n * self.fs, 0);
            let split = a.len() / self.ch * self.fs;
            self.codec.encode(a, &mut self.scratch[..split]);
            self.codec.encode(b, &mut self.scratch[split..]);
            chunk.commit_all();
            self.send_scratch(out, pool.as_deref_mut());
            self.sent += n as u64;
        }
        self.shared.sent.store(self.sent, Release);
        // Wake when a whole fragment waits. If one already does, the socket is full and
        // POLLOUT brings the thread back.
        let queued = self.ring.slots() / self.ch;
        let target = if queued >= self.frag_frames {
            NEVER
        } else if eager {
            self.sent + 1
        } else {
            self.sent + self.frag_frames as u64
        };
        self.shared.wake_at.store(target, Release);
    }
}

/// A sample being uploaded.
pub(crate) struct Upload {
    pub(crate) name: String,
    pub(crate) spec: SampleSpec,
    pub(crate) codec: Codec,
    pub(crate) map: PaMap,
    pub(crate) props: Props,
    pub(crate) length: usize,
    pub(crate) data: Vec<u8>,
}

/// Frames of record data to gather before sending: the fragment size with
/// ADJUST_LATENCY or EARLY_REQUESTS, else at most [`TRADITIONAL_RECORD_USEC`]; always
/// less than half the ring.
pub(crate) fn record_wake_frames(
    fixed: &bufattr::RecordAttr,
    spec: &SampleSpec,
    ring_frames: usize,
) -> usize {
    let fs = frame_size(spec).max(1);
    let mut frag = fixed.attr.fragment_size as usize / fs;
    if fixed.source_request_usec.is_none() {
        frag = frag.min(usec_to_bytes(TRADITIONAL_RECORD_USEC, spec) as usize / fs);
    }
    frag.clamp(1, (ring_frames / 2).max(1))
}

#[cfg(test)]
mod peak_tests {
    use super::Peak;

    #[test]
    fn peaks_are_per_channel_magnitudes_over_each_block() {
        let mut p = Peak {
            decim: 3,
            acc: vec![0.0; 2],
            count: 0,
            out: Vec::new(),
        };
        // Four frames: one block of three, one frame carried into the next block.
        p.feed(&[0.1, -0.2, -0.5, 0.0, 0.2, 0.1, 0.3, 0.0]);
        assert_eq!(p.out, [0.5, 0.2]);
        p.feed(&[-0.4, 0.0, 0.0, 0.1, 0.0, 0.05]);
        assert_eq!(p.out, [0.5, 0.2, 0.4, 0.1]);
        assert_eq!(p.count, 1);
        assert_eq!(p.acc, [0.0, 0.05]);
    }
}
