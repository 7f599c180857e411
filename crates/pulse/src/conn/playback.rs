//! The control side of a playback stream: decoding, the ring, requests.

use crate::memstat::MemBlock;
use crate::rt::rtwire::Periods;
use crate::rt::shared::{F_CORKED, F_DRAIN, NEVER, PlayShared};
use crate::wire::convert::{Codec, bytes_to_usec, usec_to_bytes};
use crate::wire::{Out, SeekMode};
use pulseaudio::protocol::stream::BufferAttr;
use pulseaudio::protocol::{self as pa, Command, SampleSpec, Underflow};
use quaver_engine::NodeId;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::Instant;

/// Audio a playback stream keeps queued when its requests are coalesced beyond minreq:
/// room for the client's own scheduling delay on a loaded machine.
pub(crate) const REQUEST_RESERVE_USEC: u64 = 8_000;

/// The RT thread takes a stream's blocks in itself ([`crate::rt::intake`]) only when the
/// client is asked for data more often than this: each answer it takes saves the I/O
/// thread a wakeup, but while it holds the intake the I/O thread looks every
/// [`crate::ioloop`] watch period whether the RT thread still does.
pub(crate) const LEND_BELOW_USEC: u64 = 50_000;

/// The control side of a playback stream.
pub(crate) struct Playback {
    pub(crate) node: NodeId,
    pub(crate) channel: u32,
    pub(crate) spec: SampleSpec,
    pub(crate) codec: Codec,
    pub(crate) fs: usize,
    pub(crate) ch: usize,
    pub(crate) attr: BufferAttr,
    pub(crate) configured_usec: u64,
    pub(crate) shared: Arc<PlayShared>,
    /// The stream's ring; `None` while the RT thread's intake holds it.
    pub(crate) ring: Option<rtrb::Producer<f32>>,
    /// The ring as a memory block for STAT, held as long as the stream.
    pub(crate) _ring_block: MemBlock,
    pub(crate) ring_frames: usize,
    pub(crate) pending: VecDeque<f32>,
    pub(crate) carry: Vec<u8>,
    pub(crate) decoded: Vec<f32>,
    pub(crate) write_index: i64,
    pub(crate) missing: i64,
    pub(crate) pushed: u64,
    pub(crate) seen_consumed: u64,
    pub(crate) seen_starts: u32,
    pub(crate) seen_underruns: u32,
    pub(crate) drains: Vec<u32>,
    /// The rate a VARIABLE_RATE stream's converter was built for (the creation rate,
    /// or the last rate it was retuned to; `None`: the rate is fixed).
    pub(crate) variable_rate: Option<u32>,
    /// Bytes requested and not yet received, and when the last request went out and
    /// the last data came in: logged with each underrun, to tell a late client from a
    /// late server.
    pub(crate) asked: i64,
    pub(crate) last_request: Option<Instant>,
    pub(crate) last_data: Option<Instant>,
    /// The `consumed` count the RT side was last asked to ring the bell at.
    pub(crate) armed_wake: u64,
    /// Whether the RT side may send this stream's requests itself (a unix socket).
    pub(crate) rt_requests: bool,
    /// Whether a request is armed for the RT side (as of the last service).
    pub(crate) armed: bool,
    /// REQUESTs sent, and how many of them the RT side sent (logged at the end).
    pub(crate) requests: u64,
    pub(crate) rt_sent: u64,
    /// Blocks the RT thread took in itself ([`crate::rt::intake`]), logged at the end.
    pub(crate) rt_blocks: u64,
    /// Latency queries the RT thread answered itself, logged at the end.
    pub(crate) rt_answers: u64,
    /// The intake's copy buffer, kept between leases.
    pub(crate) lease_scratch: Vec<u8>,
}

impl Drop for Playback {
    fn drop(&mut self) {
        // No request for a stream that is gone.
        self.disarm();
        tracing::debug!(
            "pulse: playback channel {} sent {} requests, {} of them by the RT thread, which took in {} blocks and answered {} latency queries itself; {} answers came late",
            self.channel,
            self.requests,
            self.rt_sent,
            self.rt_blocks,
            self.rt_answers,
            self.shared.late_answers.load(Relaxed)
        );
    }
}

impl Playback {
    /// Takes back the request armed for the RT side, accounting it if it went out, so
    /// that nothing about the stream's requests changes under us until the next arm.
    pub(crate) fn disarm(&mut self) {
        let Some(sent) = self.shared.request.disarm() else {
            return;
        };
        if sent.consumed > self.seen_consumed {
            self.missing += ((sent.consumed - self.seen_consumed) * self.fs as u64) as i64;
            self.seen_consumed = sent.consumed;
        }
        let length = sent.length.min(i64::MAX as u64) as i64;
        self.missing -= length;
        self.asked += length;
        self.requests += sent.count as u64;
        self.rt_sent += sent.count as u64;
        let ago = quaver_rt::monotonic_ns().saturating_sub(sent.at_ns);
        self.last_request = Instant::now().checked_sub(std::time::Duration::from_nanos(ago));
    }

    pub(crate) fn read_index(&self) -> i64 {
        (self.shared.consumed.load(Acquire) * self.fs as u64) as i64
    }

    pub(crate) fn queued_frames(&self) -> u64 {
        self.pushed
            .saturating_sub(self.shared.removed.load(Acquire))
            + (self.pending.len() / self.ch) as u64
    }

    /// Moves pending samples into the ring as far as it has room.
    pub(crate) fn fill_ring(&mut self) {
        while !self.pending.is_empty() {
            let Some(ring) = self.ring.as_mut() else {
                break;
            };
            let room = ring.slots() / self.ch * self.ch;
            let n = room.min(self.pending.len());
            if n == 0 {
                break;
            }
            let Ok(mut chunk) = ring.write_chunk(n) else {
                break;
            };
            let (a, b) = chunk.as_mut_slices();
            for (d, s) in a
                .iter_mut()
                .chain(b.iter_mut())
                .zip(self.pending.drain(..n))
            {
                *d = s;
            }
            chunk.commit_all();
            self.pushed += (n / self.ch) as u64;
        }
        self.shared.pushed.store(self.pushed, Release);
    }

    /// Queues decoded samples (whole frames) behind what is already queued.
    pub(crate) fn push(&mut self, samples: &[f32]) {
        let mut rest = samples;
        if self.pending.is_empty()
            && let Some(ring) = self.ring.as_mut()
        {
            let room = ring.slots() / self.ch * self.ch;
            let n = room.min(samples.len());
            if n > 0
                && let Ok(mut chunk) = ring.write_chunk(n)
            {
                let (a, b) = chunk.as_mut_slices();
                let split = a.len();
                a.copy_from_slice(&samples[..split]);
                b.copy_from_slice(&samples[split..n]);
                chunk.commit_all();
                self.pushed += (n / self.ch) as u64;
                rest = &samples[n..];
            }
        }
        self.pending.extend(rest.iter().copied());
        self.shared.pushed.store(self.pushed, Release);
    }

    /// Drops everything queued (FLUSH): the write index falls back to the read index.
    pub(crate) fn flush(&mut self) {
        self.disarm();
        self.pending.clear();
        self.carry.clear();
        self.shared.flush_to.store(self.pushed, Release);
        let read = self.read_index();
        self.missing += self.write_index - read;
        self.write_index = read;
    }

    /// Room left under `maxlength`, in frames.
    pub(crate) fn room_frames(&self) -> u64 {
        (self.attr.max_length as u64 / self.fs as u64).saturating_sub(self.queued_frames())
    }

    pub(crate) fn push_silence(&mut self, bytes: i64) -> i64 {
        let frames = ((bytes.max(0) as u64) / self.fs as u64).min(self.room_frames());
        let zeros = vec![0f32; frames as usize * self.ch];
        self.push(&zeros);
        frames as i64 * self.fs as i64
    }

    /// A memblock from the client.
    pub(crate) fn write(&mut self, seek: SeekMode, offset: i64, data: &[u8], out: &mut Out) {
        self.disarm();
        let late_after = self.shared.late_after_ns.load(Relaxed);
        if self.asked > 0
            && late_after > 0
            && self
                .last_request
                .is_some_and(|t| t.elapsed().as_nanos() > late_after as u128)
        {
            self.shared
                .late_ns
                .store(quaver_rt::monotonic_ns(), Relaxed);
            self.shared.late_answers.fetch_add(1, Relaxed);
        }
        self.last_data = Some(Instant::now());
        self.asked = (self.asked - data.len() as i64).max(0);
        let old = self.write_index;
        let target = match seek {
            SeekMode::Relative | SeekMode::RelativeEnd => old.saturating_add(offset),
            SeekMode::Absolute => offset,
            SeekMode::RelativeOnRead => self.read_index().saturating_add(offset),
        };
        if target < self.write_index {
            // Audio handed to the graph cannot be rewritten. A seek to the read index
            // (or before it) replaces the queue, which is what such clients mean; other
            // backwards seeks append at the end instead of overwriting.
            if target <= self.read_index() {
                self.flush();
            } else {
                tracing::debug!(
                    "stream {}: backwards seek by {} bytes appended instead",
                    self.node,
                    self.write_index.saturating_sub(target)
                );
            }
        }
        if target > self.write_index {
            self.write_index += self.push_silence(target - self.write_index);
        }
        if seek != SeekMode::Relative {
            // PulseAudio does not account non-relative seeks to the client's request.
            self.missing -= self.write_index - old;
        }
        // Whole frames only; a partial frame waits for the next block.
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(data);
        let whole = bytes.len() / self.fs * self.fs;
        self.carry = bytes[whole..].to_vec();
        let mut frames = whole / self.fs;
        let room = self.room_frames() as usize;
        if frames > room {
            tracing::debug!(
                "stream {}: {} frames over maxlength dropped",
                self.node,
                frames - room
            );
            out.command(&Command::Overflow(self.channel));
            frames = room;
        }
        let n = frames * self.ch;
        self.decoded.resize(n, 0.0);
        self.codec
            .decode(&bytes[..frames * self.fs], &mut self.decoded[..n]);
        let decoded = std::mem::take(&mut self.decoded);
        self.push(&decoded[..n]);
        self.decoded = decoded;
        self.write_index += data.len() as i64;
    }

    /// How much must be missing before the client is asked for more: at least minreq,
    /// and up to half the target length as long as [`REQUEST_RESERVE_USEC`] of audio
    /// stays queued. Fewer, larger requests mean fewer wakeups on both sides (each
    /// request costs the server a wakeup for the data and the client one to send it),
    /// and the queue the client sees is shorter on average, never below the reserve.
    /// While the client answers late (see [`PlayShared::late`]) it is asked at half a
    /// minreq instead, so it keeps nearly all of tlength queued.
    pub(crate) fn request_threshold(&self) -> i64 {
        self.threshold(self.shared.late(quaver_rt::monotonic_ns()))
    }

    pub(crate) fn threshold(&self, late: bool) -> i64 {
        let tlength = self.attr.target_length as i64;
        let fs = self.fs as i64;
        let minreq = self.attr.minimum_request_length as i64;
        if late {
            return (minreq / 2 - minreq / 2 % fs).max(fs);
        }
        let reserve = usec_to_bytes(REQUEST_RESERVE_USEC, &self.spec) as i64;
        let coalesced = (tlength / 2).min(tlength - reserve);
        (coalesced - coalesced % fs).max(minreq)
    }

    /// How long an answer may take before the client counts as late: a quarter of what
    /// the stream leaves queued when it asks (tlength less the normal threshold).
    pub(crate) fn late_after_ns(&self) -> u64 {
        let margin = (self.attr.target_length as i64 - self.threshold(false)).max(0) as u64;
        bytes_to_usec(margin, &self.spec) * 1_000 / 4
    }

    /// Frames between two requests in the steady state, when the RT thread may take
    /// the answers in itself; none when it may not (see [`LEND_BELOW_USEC`]).
    pub(crate) fn lend_period(&self) -> Periods {
        let fs = self.fs as i64;
        let frames = |t: i64| ((t + fs - 1) / fs).max(1) as u64;
        let normal = self.threshold(false);
        if bytes_to_usec(normal.max(0) as u64, &self.spec) >= LEND_BELOW_USEC {
            return Periods::NONE;
        }
        Periods {
            normal: frames(normal),
            late: frames(self.threshold(true)),
        }
    }

    /// Takes back what the RT thread's intake did with the stream while it held it.
    pub(crate) fn take_lease(&mut self, l: crate::rt::intake::Lease) {
        self.ring = Some(l.producer);
        self.pushed = l.pushed;
        self.shared.pushed.store(self.pushed, Release);
        let t = l.taken;
        let written = t.written.min(i64::MAX as u64) as i64;
        self.write_index = self.write_index.saturating_add(written);
        self.asked = (self.asked - written).max(0);
        self.rt_blocks += t.blocks;
        self.rt_answers += t.answered;
        if t.last_data_ns > 0 {
            let ago = quaver_rt::monotonic_ns().saturating_sub(t.last_data_ns);
            self.last_data = Instant::now().checked_sub(std::time::Duration::from_nanos(ago));
        }
        self.lease_scratch = l.scratch;
    }

    /// Reports what the RT side did and asks for more data; returns drain acks to send.
    /// `due`: in this pass some playback stream reached its request threshold. `lone`:
    /// the stream is its connection's only one and the RT thread may take its answers
    /// in (so it also re-arms each next request itself).
    pub(crate) fn service(&mut self, out: &mut Out, due: bool, lone: bool) {
        self.disarm();
        let sh = self.shared.clone();
        // From the attributes as they are now (SET_PLAYBACK_STREAM_BUFFER_ATTR changes
        // them).
        sh.late_after_ns.store(self.late_after_ns(), Relaxed);
        let consumed = sh.consumed.load(Acquire);
        if consumed > self.seen_consumed {
            self.missing += ((consumed - self.seen_consumed) * self.fs as u64) as i64;
            self.seen_consumed = consumed;
        }
        self.fill_ring();
        let starts = sh.starts.load(Acquire);
        if starts != self.seen_starts {
            self.seen_starts = starts;
            out.command(&Command::Started(self.channel));
        }
        let underruns = sh.underruns.load(Acquire);
        if underruns != self.seen_underruns {
            self.seen_underruns = underruns;
            let ago = |t: Option<Instant>| t.map_or(-1.0, |t| t.elapsed().as_secs_f64() * 1e3);
            let (written, taken) = sh.bell.ages_ns();
            tracing::debug!(
                "pulse: playback channel {} underran: {} bytes requested and not received, last request {:.2} ms ago, last data {:.2} ms ago, serviced {:.2} ms of audio after the bell was due; bell written {:.2} ms ago, taken {:.2} ms ago",
                self.channel,
                self.asked,
                ago(self.last_request),
                ago(self.last_data),
                consumed.saturating_sub(self.armed_wake) as f64 * 1e3
                    / self.spec.sample_rate as f64,
                written as f64 / 1e6,
                taken as f64 / 1e6,
            );
            out.command(&Command::Underflow(Underflow {
                channel: self.channel,
                offset: (sh.underrun_at.load(Relaxed) * self.fs as u64) as i64,
            }));
        }
        let removed = sh.removed.load(Acquire);
        if !self.drains.is_empty() {
            let played = sh.played.load(Acquire);
            if self.pending.is_empty() && removed >= self.pushed && played >= consumed {
                for seq in self.drains.drain(..) {
                    out.ack(seq);
                }
                sh.set_flag(F_DRAIN, false);
                sh.drain_at.store(NEVER, Release);
            } else {
                sh.drain_at.store(consumed + self.queued_frames(), Release);
            }
        }
        // When a playback stream got to its threshold, top up every stream serviced
        // with it from half a minreq: streams woken together are then topped up
        // together and reach their thresholds in the same cycle again, so one wakeup
        // serves all of them instead of one each. Half a minreq, as a cycle may consume
        // less than minreq (192-frame cycles take 176 frames of a 44.1 kHz stream, whose
        // minreq at 20 ms is 220), and a stream one cycle behind would otherwise never
        // be topped up with the others (streams started apart kept two bells per
        // threshold). Not on other wakeups (a monitor record stream's bell every cycle
        // or two, a client's command): there a stream is asked only for what its own
        // threshold would ask; topping up at those kept a stream's queue full and its
        // latency through the monitor up.
        let minreq = self.attr.minimum_request_length as i64;
        let floor = if due {
            minreq / 2
        } else {
            self.request_threshold()
        };
        let prebuffering = sh.prebuffering.load(Relaxed) || self.queued_frames() == 0;
        if self.missing > 0 && (self.missing >= floor || prebuffering) {
            out.command(&Command::Request(pa::Request {
                channel: self.channel,
                length: self.missing.min(u32::MAX as i64) as u32,
            }));
            self.asked += self.missing;
            self.requests += 1;
            self.last_request = Some(Instant::now());
            self.missing = 0;
        }
        let fs = self.fs as i64;
        let need = ((self.request_threshold() - self.missing).max(fs) + fs - 1) / fs;
        let mut wake = consumed + need as u64;
        if !self.pending.is_empty() {
            wake = wake.min(consumed + (self.ring_frames as u64 / 4).max(1));
        }
        if sh.flush_to.load(Relaxed) > removed {
            wake = consumed;
        }
        self.armed_wake = wake;
        // In the steady state the RT side sends the next request itself when the
        // stream gets there, and this thread wakes only for the answer. Not before the
        // client's first data (it must have the stream's channel before a request on it
        // can arrive by another path than the creation reply), nor while anything else
        // needs this thread at that point (a full ring, a flush, prebuffering, a drain).
        let steady = self.rt_requests
            && self.last_data.is_some()
            && self.pending.is_empty()
            && sh.flush_to.load(Relaxed) <= removed
            && !prebuffering
            && self.drains.is_empty()
            && sh.flags.load(Relaxed) & F_CORKED == 0;
        if steady {
            let period = if lone {
                self.lend_period()
            } else {
                Periods::NONE
            };
            sh.request.arm(
                self.channel,
                wake,
                self.seen_consumed,
                self.missing,
                self.fs as u32,
                period,
            );
            sh.wake_at.store(NEVER, Release);
        } else {
            sh.wake_at.store(wake, Release);
        }
        self.armed = steady;
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;
    use crate::rt::rtwire::request_packet;
    use crate::rt::shared::Bell;
    use pulseaudio::protocol::SampleFormat;

    /// Bytes of a 44.1 kHz s16 stereo frame.
    const FS: u64 = 4;

    /// A 44.1 kHz s16 stereo stream with `paplay --latency-msec=20`'s attributes
    /// (tlength 15 ms, minreq 5 ms = 220 frames), past prebuffering with audio queued,
    /// nothing missing.
    fn stream() -> Playback {
        let spec = SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 44100,
        };
        let attr = BufferAttr {
            max_length: 4 * 1024 * 1024,
            target_length: 2644,
            pre_buffering: 1768,
            minimum_request_length: 880,
            fragment_size: 0,
        };
        let shared = Arc::new(PlayShared::new(Arc::new(Bell::new().unwrap()), 0, false));
        shared.prebuffering.store(false, Relaxed);
        let (producer, _consumer) = rtrb::RingBuffer::new(4096 * 2);
        let mut p = Playback {
            node: 1,
            channel: 0,
            spec,
            codec: Codec::of(SampleFormat::S16Le).unwrap(),
            fs: FS as usize,
            ch: 2,
            attr,
            configured_usec: 4000,
            shared,
            ring: Some(producer),
            _ring_block: Arc::new(crate::memstat::MemStats::default()).block(4096 * 2 * 4),
            ring_frames: 4096,
            pending: VecDeque::new(),
            carry: Vec::new(),
            decoded: Vec::new(),
            write_index: 0,
            missing: 0,
            pushed: 0,
            seen_consumed: 0,
            seen_starts: 0,
            seen_underruns: 0,
            drains: Vec::new(),
            variable_rate: None,
            asked: 0,
            last_request: None,
            last_data: None,
            armed_wake: 0,
            rt_requests: false,
            armed: false,
            requests: 0,
            rt_sent: 0,
            rt_blocks: 0,
            rt_answers: 0,
            lease_scratch: Vec::new(),
        };
        p.push(&[0.0; 2 * 1000]);
        p
    }

    /// What `service` sends after the RT side consumed `frames`, in a pass where a
    /// playback stream reached its threshold (`due`) or not.
    fn serviced(frames: u64, due: bool) -> Vec<u8> {
        let mut p = stream();
        p.shared.consumed.store(frames, Release);
        let mut buf = Vec::new();
        let mut out = Out {
            buf: &mut buf,
            version: pa::MAX_VERSION,
        };
        p.service(&mut out, due, false);
        buf
    }

    #[test]
    fn a_stream_is_topped_up_from_half_a_minreq_only_in_a_pass_a_threshold_rang() {
        // 192-frame cycles at 48 kHz take 176 frames of a 44.1 kHz stream: less than
        // its 220-frame minreq. Topped up with the stream whose threshold rang, it
        // stays in step with it instead of ringing a bell of its own a cycle later.
        assert_eq!(serviced(176, true), request_packet(0, (176 * FS) as u32));
        // Below half a minreq, nothing.
        assert!(serviced(109, true).is_empty());
        // Woken for anything else (a monitor's record bell, a command), only what the
        // stream's own threshold asks: topping up there, even from a whole minreq, kept
        // the queue full and the latency high once a cycle consumed a minreq.
        assert!(serviced(220, false).is_empty());
        assert_eq!(serviced(309, false), request_packet(0, (309 * FS) as u32));
    }

    #[test]
    fn a_client_that_answered_late_is_asked_at_half_a_minreq_for_a_while() {
        let p = stream();
        // tlength 661 frames: asked when 309 are missing (the 8 ms reserve stays
        // queued), the answer late after a quarter of the 352 left (2 ms).
        assert_eq!(p.request_threshold(), 309 * FS as i64);
        assert_eq!(p.late_after_ns(), 352 * 1_000_000 / 44_100 * 1_000 / 4);
        assert_eq!(
            p.lend_period(),
            Periods {
                normal: 309,
                late: 110
            }
        );
        let now = quaver_rt::monotonic_ns();
        p.shared.late_ns.store(now, Relaxed);
        assert_eq!(p.request_threshold(), 110 * FS as i64, "half of minreq");
        // Ten seconds on, it is asked as before.
        p.shared.late_ns.store(
            now.saturating_sub(crate::rt::transport::LATE_HOLD_NS + 1),
            Relaxed,
        );
        assert_eq!(p.request_threshold(), 309 * FS as i64);
    }

    #[test]
    fn the_late_limit_follows_the_buffer_attributes() {
        let mut p = stream();
        let mut buf = Vec::new();
        let mut out = Out {
            buf: &mut buf,
            version: pa::MAX_VERSION,
        };
        p.service(&mut out, false, false);
        let before = p.shared.late_after_ns.load(Relaxed);
        assert_eq!(before, p.late_after_ns());
        // SET_PLAYBACK_STREAM_BUFFER_ATTR doubles tlength: more margin, a later limit.
        p.attr.target_length *= 2;
        p.service(&mut out, false, false);
        assert!(p.shared.late_after_ns.load(Relaxed) > before);
    }
}
