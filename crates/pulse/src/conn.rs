//! One PulseAudio connection, served by the front-end's I/O thread (`ioloop`).
//!
//! A `Conn` owns the socket (non-blocking, buffered both ways) and the control side of
//! the client's streams. When its socket is readable the I/O thread reads whole packets
//! ([`Conn::on_readable`]); after every wakeup that concerns it, it services every stream
//! (REQUESTs, STARTED/UNDERFLOW, drain acks, record data), forwards queued events and
//! writes what the socket takes ([`Conn::pump`]). An idle client costs no wakeups.

use crate::bufattr::{self, LatencyMode};
use crate::convert::{
    Codec, bytes_to_usec, check_spec, cvolume_to_linear, frame_size, frames_to_usec, map_from_pa,
    usec_to_bytes,
};
use crate::export::ExportPool;
use crate::intake::{Lease, MAX_RELEASES, RtIntake, Taken};
use crate::introspect::{cstr, prop_str};
use crate::rtwire::{Periods, RtWire};
use crate::server::{
    ConnHandle, ConnMsg, Device, Server, StreamIo, StreamRec, record_source_index, stream_target,
};
use crate::tagcheck;
use crate::tcp::Sock;
use crate::transport::{
    F_CORKED, F_DRAIN, F_PREBUF, F_TRIGGER, NEVER, PlayShared, PlaySource, R_CORKED, RecShared,
    RecSink,
};
use crate::wire::{Out, Packet, PacketReader, SeekMode};
use pulseaudio::protocol::props::PropsUpdateMode;
use pulseaudio::protocol::stream::BufferAttr;
use pulseaudio::protocol::{
    self as pa, AuthReply, ChannelMap as PaMap, ChannelVolume, Command, CommandTag,
    CreatePlaybackStreamReply, CreateRecordStreamReply, FormatEncoding, FormatInfo, LookupReply,
    PlaybackLatency, PlaybackStreamMovedParams, PlaybackStreamParams, Prop, Props, PulseError,
    RecordLatency, RecordStreamMovedParams, RecordStreamParams, SampleFormat, SampleSpec,
    SetClientNameReply, SetPlaybackStreamBufferAttrReply, SetRecordStreamBufferAttrReply, StatInfo,
    SubscriptionEventFacility as Fac, SubscriptionEventType as Ev, TagStructReader, Underflow,
};
use quaver_engine::stream::{PlaybackAdapter, RecordAdapter, Retune, StreamFormat};
use quaver_engine::{EngineError, Graph, NodeId, NodeKind, NodeSpec};
use std::collections::{BTreeMap, VecDeque};
use std::io::{Cursor, ErrorKind, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{Instant, SystemTime};

/// What the I/O thread needs to know of every playback stream after each pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaybackSummary {
    /// Streams with a request armed for the RT thread.
    pub armed: usize,
    /// Uncorked streams asked for data their client has not sent yet (as of the last
    /// pass; a request the RT thread sent counts once it was taken back).
    pub awaiting: usize,
    /// The least time an uncorked stream gives its client to answer a request
    /// (tlength − minreq), µs; `u64::MAX` with none.
    pub shortest_low_water_usec: u64,
    /// Connections whose intake the RT thread holds.
    pub lent: usize,
}

impl Default for PlaybackSummary {
    fn default() -> Self {
        PlaybackSummary {
            armed: 0,
            awaiting: 0,
            lent: 0,
            shortest_low_water_usec: u64::MAX,
        }
    }
}

/// A client that lets this much output pile up unread is disconnected.
const MAX_OUT: usize = 32 * 1024 * 1024;
/// Record data is only queued while less than this is waiting for the socket.
const RECORD_OUT_LIMIT: usize = 512 * 1024;
/// Audio a playback stream keeps queued when its requests are coalesced beyond minreq:
/// room for the client's own scheduling delay on a loaded machine.
const REQUEST_RESERVE_USEC: u64 = 8_000;
/// Most released client blocks held back to ride with the next message to the client.
const MAX_HELD_RELEASES: usize = 32;
/// The RT thread takes a stream's blocks in itself ([`crate::intake`]) only when the
/// client is asked for data more often than this: each answer it takes saves the I/O
/// thread a wakeup, but while it holds the intake the I/O thread looks every
/// [`crate::ioloop`] watch period whether the RT thread still does.
const LEND_BELOW_USEC: u64 = 50_000;
/// The RT thread is taken to have stopped looking at a lent ring after this long.
const INTAKE_STALE_NS: u64 = 100_000_000;
/// Without ADJUST_LATENCY a record stream gets data at least this often.
const TRADITIONAL_RECORD_USEC: u64 = 100_000;
/// The protocol version this server speaks.
const SERVER_VERSION: u16 = pa::MAX_VERSION;

type Reply = Result<(), PulseError>;

/// The highest rate a stream created at `rate` may run at: a VARIABLE_RATE stream may
/// move to any rate PulseAudio allows. Its ring is built on the control side and cannot
/// grow once the RT thread holds the other end, so it is sized for this rate.
fn highest_rate(variable_rate: bool, rate: u32) -> u32 {
    if variable_rate {
        crate::convert::MAX_RATE.max(rate)
    } else {
        rate
    }
}

fn engine_err(e: EngineError) -> PulseError {
    match e {
        EngineError::NoSuchNode(_) | EngineError::NoSuchPort(_) | EngineError::NoSuchLink(_) => {
            PulseError::NoEntity
        }
        EngineError::Invalid(_) | EngineError::Incompatible(_) => PulseError::Invalid,
        EngineError::TooMany(_) => PulseError::TooLarge,
        EngineError::Busy(_) => PulseError::Busy,
        _ => PulseError::Internal,
    }
}

/// UPDATE_*_SAMPLE_RATE on a stream whose converter was built for `variable` (None: a
/// fixed-rate stream, BADSTATE): the stream's spec takes the new rate and its RT side
/// is told through `cell`. Within the converter's ratio range the RT side follows the
/// cell by itself; beyond it, as PulseAudio (which rebuilds its resampler for any
/// rate), `retune` hands the node a converter built for the new rate, which becomes
/// the new base. A rate the engine cannot convert at all is NOTSUPPORTED.
fn change_rate(
    variable: &mut Option<u32>,
    spec: &mut SampleSpec,
    cell: &std::sync::atomic::AtomicU32,
    rate: u32,
    retune: impl FnOnce(u32) -> Result<(), PulseError>,
) -> Reply {
    let base = variable.ok_or(PulseError::BadState)?;
    if rate == 0 || rate > crate::convert::MAX_RATE {
        return Err(PulseError::Invalid);
    }
    if !quaver_engine::stream::rate_change_ok(base, rate) {
        retune(rate)?;
        *variable = Some(rate);
    }
    spec.sample_rate = rate;
    cell.store(rate, Relaxed);
    Ok(())
}

/// Builds a stream's converter for `rate` and hands it to its node
/// ([`quaver_engine::Engine::retune`]).
fn retune_stream(
    srv: &Server,
    node: NodeId,
    channels: usize,
    rate: u32,
    playback: bool,
) -> Result<(), PulseError> {
    let engine_rate = srv.engine.rate();
    let quantum_max = srv.engine.config().quantum_max;
    let quality = srv.opts.resample_quality;
    let built = if playback {
        Retune::playback(rate, channels, engine_rate, quantum_max, quality)
    } else {
        Retune::record(rate, channels, engine_rate, quantum_max, quality)
    };
    let r = built.map_err(|e| {
        tracing::info!("pulse: stream {node} cannot change to {rate} Hz: {e}");
        PulseError::NotSupported
    })?;
    srv.engine.retune(node, r).map_err(engine_err)
}

/// A latency in µs as a node's latency request: frames at the engine `rate`, at least 1.
fn engine_frames(rate: u32, usec: u64) -> u32 {
    ((usec as u128 * rate as u128 / 1_000_000).min(u32::MAX as u128) as u32).max(1)
}

/// Applies a proplist update in PulseAudio's modes.
fn update_props(dst: &mut Props, mode: PropsUpdateMode, src: &Props) {
    match mode {
        PropsUpdateMode::Set => *dst = src.clone(),
        PropsUpdateMode::Merge => {
            for (k, v) in src.iter() {
                if dst.get_bytes(k).is_none() {
                    dst.set_bytes(k, v);
                }
            }
        }
        PropsUpdateMode::Replace => {
            for (k, v) in src.iter() {
                dst.set_bytes(k, v);
            }
        }
    }
}

fn remove_props(dst: &mut Props, keys: &[std::ffi::CString]) {
    let mut kept = Props::new();
    for (k, v) in dst.iter() {
        if !keys.iter().any(|r| r.as_c_str() == k.as_ref()) {
            kept.set_bytes(k, v);
        }
    }
    *dst = kept;
}

/// A node name from a stream's proplist: readable, without ':' and not too long.
fn node_name(props: &Props, client: &str, playback: bool) -> String {
    let base = prop_str(props, Prop::MediaName)
        .or_else(|| prop_str(props, Prop::ApplicationName))
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| {
            if client.is_empty() {
                if playback {
                    "pulse-playback"
                } else {
                    "pulse-record"
                }
                .to_string()
            } else {
                client.to_string()
            }
        });
    let clean: String = base
        .chars()
        .map(|c| if c == ':' || c.is_control() { '_' } else { c })
        .take(100)
        .collect();
    if clean.is_empty() {
        "pulse-stream".into()
    } else {
        clean
    }
}

/// A new stream's volume: the client's when it set one (uniform if its channel count is
/// wrong), else stream restore's, else 100 %.
fn stream_volume(
    client: Option<ChannelVolume>,
    restored: Option<&crate::restore::Entry>,
    map: &PaMap,
    ch: usize,
) -> ChannelVolume {
    match client {
        Some(v) if v.channels().len() == ch => v,
        Some(_) => crate::convert::uniform_cvolume(ch, 1.0),
        None => restored
            .and_then(|e| crate::restore::volume_for(e, map))
            .filter(|v| v.channels().len() == ch)
            .unwrap_or_else(|| crate::convert::uniform_cvolume(ch, 1.0)),
    }
}

/// A sample spec from a format list (clients that create streams with
/// `pa_stream_new_extended` send an invalid spec plus formats).
fn spec_from_formats(formats: &[FormatInfo], rate: u32) -> Option<(SampleSpec, Option<PaMap>)> {
    let f = formats.iter().find(|f| f.encoding == FormatEncoding::Pcm)?;
    let get = |p: Prop| prop_str(&f.props, p).map(|s| s.trim().trim_matches('"').to_string());
    let format = match get(Prop::FormatSampleFormat) {
        None => SampleFormat::Float32Le,
        Some(name) => crate::convert::parse_sample_format(&name)?,
    };
    let sample_rate = get(Prop::FormatRate)
        .and_then(|s| s.parse().ok())
        .unwrap_or(rate);
    let channels = get(Prop::FormatChannels)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    Some((
        SampleSpec {
            format,
            channels,
            sample_rate,
        },
        None,
    ))
}

/// A channel map for `channels` when the client sent none (PulseAudio's AIFF defaults
/// for the common counts).
/// The login name of `uid` (getpwuid_r), if it has one.
fn user_name(uid: u32) -> Option<String> {
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 4096];
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are to live, correctly sized locals.
    let r = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut res) };
    if r != 0 || res.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded; pw_name points into `buf`, NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

fn default_pa_map(channels: u8) -> PaMap {
    use pa::ChannelPosition::*;
    match channels {
        1 => PaMap::mono(),
        2 => PaMap::stereo(),
        3 => PaMap::new([FrontLeft, FrontRight, FrontCenter]),
        4 => PaMap::new([FrontLeft, FrontRight, RearLeft, RearRight]),
        5 => PaMap::new([FrontLeft, FrontRight, RearLeft, RearRight, FrontCenter]),
        6 => PaMap::new([FrontLeft, FrontRight, RearLeft, RearRight, FrontCenter, Lfe]),
        n => crate::convert::map_to_pa(&quaver_dsp::ChannelMap::default_for(n as usize)),
    }
}

/// The control side of a playback stream.
struct Playback {
    node: NodeId,
    channel: u32,
    spec: SampleSpec,
    codec: Codec,
    fs: usize,
    ch: usize,
    attr: BufferAttr,
    configured_usec: u64,
    shared: Arc<PlayShared>,
    /// The stream's ring; `None` while the RT thread's intake holds it.
    ring: Option<rtrb::Producer<f32>>,
    ring_frames: usize,
    pending: VecDeque<f32>,
    carry: Vec<u8>,
    decoded: Vec<f32>,
    write_index: i64,
    missing: i64,
    pushed: u64,
    seen_consumed: u64,
    seen_starts: u32,
    seen_underruns: u32,
    drains: Vec<u32>,
    /// The rate a VARIABLE_RATE stream's converter was built for (the creation rate,
    /// or the last rate it was retuned to; `None`: the rate is fixed).
    variable_rate: Option<u32>,
    /// Bytes requested and not yet received, and when the last request went out and
    /// the last data came in: logged with each underrun, to tell a late client from a
    /// late server.
    asked: i64,
    last_request: Option<Instant>,
    last_data: Option<Instant>,
    /// The `consumed` count the RT side was last asked to ring the bell at.
    armed_wake: u64,
    /// Whether the RT side may send this stream's requests itself (a unix socket).
    rt_requests: bool,
    /// Whether a request is armed for the RT side (as of the last service).
    armed: bool,
    /// REQUESTs sent, and how many of them the RT side sent (logged at the end).
    requests: u64,
    rt_sent: u64,
    /// Blocks the RT thread took in itself ([`crate::intake`]), logged at the end.
    rt_blocks: u64,
    /// Latency queries the RT thread answered itself, logged at the end.
    rt_answers: u64,
    /// The intake's copy buffer, kept between leases.
    lease_scratch: Vec<u8>,
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
    fn disarm(&mut self) {
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

    fn read_index(&self) -> i64 {
        (self.shared.consumed.load(Acquire) * self.fs as u64) as i64
    }

    fn queued_frames(&self) -> u64 {
        self.pushed
            .saturating_sub(self.shared.removed.load(Acquire))
            + (self.pending.len() / self.ch) as u64
    }

    /// Moves pending samples into the ring as far as it has room.
    fn fill_ring(&mut self) {
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
    fn push(&mut self, samples: &[f32]) {
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
    fn flush(&mut self) {
        self.disarm();
        self.pending.clear();
        self.carry.clear();
        self.shared.flush_to.store(self.pushed, Release);
        let read = self.read_index();
        self.missing += self.write_index - read;
        self.write_index = read;
    }

    /// Room left under `maxlength`, in frames.
    fn room_frames(&self) -> u64 {
        (self.attr.max_length as u64 / self.fs as u64).saturating_sub(self.queued_frames())
    }

    fn push_silence(&mut self, bytes: i64) -> i64 {
        let frames = ((bytes.max(0) as u64) / self.fs as u64).min(self.room_frames());
        let zeros = vec![0f32; frames as usize * self.ch];
        self.push(&zeros);
        frames as i64 * self.fs as i64
    }

    /// A memblock from the client.
    fn write(&mut self, seek: SeekMode, offset: i64, data: &[u8], out: &mut Out) {
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
    fn request_threshold(&self) -> i64 {
        self.threshold(self.shared.late(quaver_rt::monotonic_ns()))
    }

    fn threshold(&self, late: bool) -> i64 {
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
    fn late_after_ns(&self) -> u64 {
        let margin = (self.attr.target_length as i64 - self.threshold(false)).max(0) as u64;
        bytes_to_usec(margin, &self.spec) * 1_000 / 4
    }

    /// Frames between two requests in the steady state, when the RT thread may take
    /// the answers in itself; none when it may not (see [`LEND_BELOW_USEC`]).
    fn lend_period(&self) -> Periods {
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
    fn take_lease(&mut self, l: crate::intake::Lease) {
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
    fn service(&mut self, out: &mut Out, due: bool, lone: bool) {
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
        // be topped up with the others; 8 such streams started apart kept two bells per
        // threshold, ~900 wakeups/s instead of ~520. Not on other wakeups (a monitor
        // record stream's bell every cycle or two, a client's command): there a stream
        // is asked only for what its own threshold would ask. Topping up at those kept a
        // 20 ms stream's queue full and its latency through the monitor up: 16.8 ms
        // instead of 11 from half a minreq, and 15.9 from a whole minreq in a trial of
        // 240-frame cycles, where a cycle consumed one.
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

/// The control side of a record stream.
struct Record {
    node: NodeId,
    channel: u32,
    spec: SampleSpec,
    codec: Codec,
    fs: usize,
    ch: usize,
    attr: BufferAttr,
    configured_usec: u64,
    shared: Arc<RecShared>,
    ring: rtrb::Consumer<f32>,
    frag_frames: usize,
    sent: u64,
    scratch: Vec<u8>,
    /// Peak detection (PEAK_DETECT below the engine rate, e.g. pavucontrol's 25 Hz
    /// level meters): the ring carries engine-rate frames, each output frame is the
    /// per-channel peak of `decim` of them, as PulseAudio's "peaks" resampler does.
    peak: Option<Peak>,
    /// The rate a VARIABLE_RATE stream's converter was built for (the creation rate,
    /// or the last rate it was retuned to; `None`: the rate is fixed).
    variable_rate: Option<u32>,
}

/// State of a peak-detecting record stream.
struct Peak {
    decim: usize,
    acc: Vec<f32>,
    count: usize,
    out: Vec<f32>,
}

impl Peak {
    fn feed(&mut self, samples: &[f32]) {
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
    fn send_scratch(&self, out: &mut Out, pool: Option<&mut ExportPool>) {
        let data = &self.scratch[..];
        let Some(pool) = pool.filter(|_| data.len() >= crate::export::MIN_SHARED) else {
            out.memblock(self.channel, data);
            return;
        };
        let piece = crate::export::SLOT_SIZE / self.fs * self.fs;
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

    fn service(&mut self, out: &mut Out, mut pool: Option<&mut ExportPool>) {
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
        while self.peak.is_none() && out.buf.len() < RECORD_OUT_LIMIT {
            let avail = self.ring.slots() / self.ch;
            if avail == 0 || avail < self.frag_frames {
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
        } else {
            self.sent + self.frag_frames as u64
        };
        self.shared.wake_at.store(target, Release);
    }
}

/// A sample being uploaded.
struct Upload {
    name: String,
    spec: SampleSpec,
    codec: Codec,
    map: PaMap,
    props: Props,
    length: usize,
    data: Vec<u8>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // The RT thread must be done with the client's pool before it is unmapped.
        self.reclaim_intake();
    }
}

/// One client connection: its socket, buffered output and streams.
pub(crate) struct Conn {
    srv: Arc<Server>,
    handle: Arc<ConnHandle>,
    client: u32,
    sock: Sock,
    reader: PacketReader,
    out: Vec<u8>,
    version: u16,
    authed: bool,
    playback: BTreeMap<u32, Playback>,
    record: BTreeMap<u32, Record>,
    uploads: BTreeMap<u32, Upload>,
    next_channel: u32,
    closing: bool,
    /// File descriptors received and not yet claimed by a command.
    fds: VecDeque<rustix::fd::OwnedFd>,
    /// The client's memfd pools by shm id (REGISTER_MEMFD_SHMID).
    memfds: BTreeMap<u32, crate::shm::ClientPool>,
    /// Where each client block is copied to (kept between blocks).
    shm_scratch: Vec<u8>,
    /// Audio bytes received through shared memory (for logs and tests).
    shm_bytes: u64,
    /// The command tag of the packet being handled (for logs).
    last_tag: u32,
    /// The shared ring-buffer channel, once offered.
    srb: Option<crate::srb::Srb>,
    /// The memfd pool record audio goes out through (memfd clients).
    pool: Option<ExportPool>,
    /// Framing of what arrives through the srbchannel (its own byte stream).
    srb_reader: PacketReader,
    /// Packets in `out` that carry descriptors: (offset, length, descriptors).
    out_fds: VecDeque<(usize, usize, Vec<rustix::fd::OwnedFd>)>,
    /// Socket output queued before the srbchannel took over; it leaves first, so the
    /// client sees packets in order.
    sock_tail: Vec<u8>,
    /// The socket as the RT thread may write requests to it: made with the first
    /// playback stream (most connections never play), unix sockets only.
    wire: Option<Arc<RtWire>>,
    /// The client's credentials as last received (SCM_CREDENTIALS; with SO_PASSCRED
    /// every read has some: those the client passed, else the kernel's).
    creds: Option<rustix::net::UCred>,
    /// Those that came with AUTH (libpulse passes its own there), as PulseAudio uses.
    auth_creds: Option<rustix::net::UCred>,
    /// Client blocks already copied out whose release has not been sent yet (see
    /// [`Conn::send_held_releases`]).
    held_releases: Vec<u32>,
    /// What the RT thread needs to take a lone low-latency stream's blocks in itself
    /// ([`crate::intake`]); made with the wire.
    intake: Option<Arc<RtIntake>>,
    /// The pool the client's last block came from (the one a lease lends).
    last_shm_id: Option<u32>,
    /// The RT thread's intake found the client's ring corrupt.
    intake_corrupt: bool,
}

impl Conn {
    /// Whether one of this client's playback streams has got to the point its wakeup was
    /// set for (its request threshold).
    pub(crate) fn playback_due(&self) -> bool {
        self.playback
            .values()
            .any(|p| p.shared.consumed.load(Acquire) >= p.armed_wake)
    }

    /// Adds this client's playback streams to `sum`, in one walk over them.
    pub(crate) fn add_playback_to(&self, sum: &mut PlaybackSummary) {
        let lent = self.intake_lent();
        sum.lent += usize::from(lent);
        for p in self.playback.values() {
            sum.armed += usize::from(p.armed);
            if p.shared.flags.load(Relaxed) & F_CORKED != 0 {
                continue;
            }
            // Answers the RT thread takes in do not wake this thread: nothing to gather.
            sum.awaiting += usize::from(p.asked > 0 && !lent);
            let w = p
                .attr
                .target_length
                .saturating_sub(p.attr.minimum_request_length);
            sum.shortest_low_water_usec = sum
                .shortest_low_water_usec
                .min(bytes_to_usec(w as u64, &p.spec));
        }
    }

    /// The wire for the RT thread's requests, made on first use; `None` over TCP (a send
    /// may go out in part far more readily, and remote clients are not the ones whose
    /// wakeups matter), when `[pulse] rt_requests` is off, or if the socket cannot be
    /// duplicated (the requests then stay with this thread).
    fn rt_wire(&mut self) -> Option<Arc<RtWire>> {
        if self.wire.is_none()
            && self.srv.opts.rt_requests
            && let Sock::Unix(s) = &self.sock
        {
            match RtWire::new(s) {
                Ok(w) => {
                    if let Some(srb) = self.srb.as_ref().filter(|s| s.active) {
                        w.use_srb(srb.out());
                    }
                    self.wire = Some(Arc::new(w));
                }
                Err(e) => tracing::warn!(
                    "pulse client {}: requests stay with the I/O thread: {e}",
                    self.client
                ),
            }
        }
        self.wire.clone()
    }

    /// A new connection on `sock` (made non-blocking here).
    pub(crate) fn new(
        srv: Arc<Server>,
        sock: Sock,
        handle: Arc<ConnHandle>,
    ) -> std::io::Result<Conn> {
        sock.set_nonblocking()?;
        if let Sock::Unix(s) = &sock {
            // Receive the credentials libpulse passes with AUTH.
            rustix::net::sockopt::set_socket_passcred(s, true)?;
        }
        Ok(Conn {
            client: handle.client,
            srv,
            handle,
            sock,
            reader: PacketReader::new(),
            out: Vec::new(),
            version: pa::MIN_VERSION,
            authed: false,
            playback: BTreeMap::new(),
            record: BTreeMap::new(),
            uploads: BTreeMap::new(),
            next_channel: 0,
            closing: false,
            fds: VecDeque::new(),
            memfds: BTreeMap::new(),
            shm_scratch: Vec::new(),
            shm_bytes: 0,
            last_tag: 0,
            srb: None,
            pool: None,
            srb_reader: {
                let mut r = PacketReader::new();
                r.enable_shm();
                r
            },
            out_fds: VecDeque::new(),
            sock_tail: Vec::new(),
            wire: None,
            held_releases: Vec::with_capacity(MAX_HELD_RELEASES),
            intake: None,
            last_shm_id: None,
            intake_corrupt: false,
            creds: None,
            auth_creds: None,
        })
    }

    /// The client's index (for the I/O thread's diagnostics).
    pub(crate) fn client(&self) -> u32 {
        self.client
    }

    /// The client's socket (for the I/O thread's epoll set).
    pub(crate) fn sock(&self) -> &Sock {
        &self.sock
    }

    /// Whether output waits for the socket to take it.
    pub(crate) fn wants_write(&self) -> bool {
        !self.sock_tail.is_empty() || (!self.srb_active() && !self.out.is_empty())
    }

    fn srb_active(&self) -> bool {
        self.srb.as_ref().is_some_and(|s| s.active)
    }

    /// The srbchannel's wakeup descriptor, once offered (for the I/O thread's epoll).
    pub(crate) fn srb_wake_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.srb.as_ref().map(|s| s.wake_fd())
    }

    /// Before the I/O thread sleeps; true when the client already posted a wakeup.
    /// Not while the RT thread takes the ring in: then nobody sleeps on the client's
    /// posts, and they cost it no pipe write either.
    pub(crate) fn srb_before_poll(&mut self) -> bool {
        if self.intake_lent() {
            return false;
        }
        self.srb.as_mut().is_some_and(|s| s.before_poll())
    }

    /// Whether the RT thread could take this connection's blocks in: its only playback
    /// stream, through an active srbchannel.
    fn intake_possible(&self) -> bool {
        self.intake.is_some() && self.srb_active() && self.playback.len() == 1
    }

    /// Whether the RT thread holds the intake.
    pub(crate) fn intake_lent(&self) -> bool {
        self.intake.as_ref().is_some_and(|i| i.lent())
    }

    /// Takes the intake back from the RT thread, with what it did meanwhile.
    fn reclaim_intake(&mut self) {
        let Some(l) = self.intake.as_ref().and_then(|i| i.reclaim()) else {
            return;
        };
        let t = l.taken;
        if let Some(srb) = self.srb.as_mut() {
            srb.set_read_index(l.rd, t.ring_bytes);
        }
        self.held_releases.extend_from_slice(&t.releases[..t.held]);
        self.shm_bytes += t.written;
        self.intake_corrupt |= t.corrupt;
        if let Some(p) = self.playback.get_mut(&l.channel) {
            p.take_lease(l);
        }
    }

    /// Lends the intake to the RT thread when it can take the client's blocks in: a
    /// lone playback stream in its steady state with requests close together
    /// ([`LEND_BELOW_USEC`]), the srbchannel between packets, blocks from a mapped pool.
    fn lend_intake(&mut self) {
        let Some(intake) = self.intake.clone() else {
            return;
        };
        if intake.lent() || self.closing || !self.intake_possible() {
            return;
        }
        // The releases still held go with the RT thread's next request.
        if !self.srb_reader.at_boundary() || self.held_releases.len() > MAX_RELEASES {
            return;
        }
        let Some(shm_id) = self.last_shm_id else {
            return;
        };
        let Some((pool, pool_len)) = self.memfds.get(&shm_id).and_then(|p| p.mapping()) else {
            return;
        };
        let srb = self.srb.as_ref().expect("active");
        let (out, rd) = (srb.out(), srb.read_index());
        let p = self.playback.values_mut().next().expect("one stream");
        if !p.armed || !p.carry.is_empty() || !p.pending.is_empty() || p.lend_period().normal == 0 {
            return;
        }
        let Some(producer) = p.ring.take() else {
            return;
        };
        let mut scratch = std::mem::take(&mut p.lease_scratch);
        // libpulse's blocks are at most one pool slot (64 KiB); larger ones go to us.
        scratch.resize(64 * 1024, 0);
        intake.lend(Lease {
            srb: out,
            rd,
            pool,
            pool_len,
            shm_id,
            channel: p.channel,
            frame_bytes: p.fs,
            channels: p.ch,
            codec: p.codec,
            max_frames: p.attr.max_length as u64 / p.fs as u64,
            rate: p.spec.sample_rate,
            write_index: p.write_index,
            producer,
            pushed: p.pushed,
            scratch,
            taken: Taken::holding(&self.held_releases),
        });
        self.held_releases.clear();
    }

    /// After the I/O thread woke: takes the wakeup and handles what the ring holds.
    /// `Ok(true)` when the connection needs a pump (packets came, or output waits for
    /// room the client may have made).
    pub(crate) fn on_srb(&mut self, woken: bool) -> Result<bool, String> {
        if let Some(i) = self.intake.as_ref().filter(|i| i.lent()) {
            // The RT thread reads the ring; unless it stopped looking (its stream's
            // device stopped, say) while something waits there.
            let waiting = self
                .srb
                .as_ref()
                .is_some_and(|s| s.in_fill().is_none_or(|n| n > 0));
            if !(waiting && i.since_look_ns() > INTAKE_STALE_NS) {
                return Ok(false);
            }
        }
        self.reclaim_intake();
        if std::mem::take(&mut self.intake_corrupt) {
            return Err("srbchannel ring count out of range".into());
        }
        let Some(srb) = self.srb.as_mut() else {
            return Ok(false);
        };
        if woken {
            srb.drain_wake();
        }
        srb.after_poll();
        let mut bytes = Vec::new();
        srb.read(&mut bytes)?;
        let pending = srb.active && !self.out.is_empty();
        let mut rest = &bytes[..];
        while !rest.is_empty() && !self.closing {
            let (used, packet) = self.srb_reader.feed(rest).map_err(|e| e.to_string())?;
            rest = &rest[used..];
            if let Some(p) = packet {
                self.on_packet(p)?;
            }
        }
        Ok(!bytes.is_empty() || pending)
    }

    /// Queues the held block releases. They wait for the next message to the client (a
    /// REQUEST, a reply) or until [`MAX_HELD_RELEASES`] have piled up: sent on their own,
    /// a release can wake the client a second time for every block it writes.
    fn send_held_releases(&mut self) {
        let mut out = Out {
            buf: &mut self.out,
            version: self.version,
        };
        for id in self.held_releases.drain(..) {
            out.shm_release(id);
        }
    }

    fn out(&mut self) -> Out<'_> {
        Out {
            buf: &mut self.out,
            version: self.version,
        }
    }

    /// Reads and handles every whole packet the socket has; `Err` ends the connection
    /// with that reason ("closed" when the client hung up cleanly).
    pub(crate) fn on_readable(&mut self, buf: &mut [u8]) -> Result<(), String> {
        // Whatever the client sends may concern its stream.
        self.reclaim_intake();
        loop {
            match self.sock.read_with_fds(buf, &mut self.fds, &mut self.creds) {
                Ok(0) => {
                    return Err(if self.reader.at_boundary() {
                        "closed".into()
                    } else {
                        "closed inside a packet".into()
                    });
                }
                Ok(n) => self.on_bytes(&buf[..n])?,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read: {e}")),
            }
            if self.closing {
                break;
            }
        }
        if self.fds.len() > 8 {
            return Err("sent file descriptors no command claimed".into());
        }
        Ok(())
    }

    /// Services the streams (`due`: some playback stream, of any client, reached its
    /// request threshold in this pass), forwards queued messages and writes what the
    /// socket takes; `Err` ends the connection with that reason.
    pub(crate) fn pump(&mut self, due: bool) -> Result<(), String> {
        self.reclaim_intake();
        self.service(due);
        if !self.out.is_empty() || self.held_releases.len() >= MAX_HELD_RELEASES {
            self.send_held_releases();
        }
        self.flush_out()?;
        self.lend_intake();
        if self.closing {
            return Err("killed".into());
        }
        if self.out.len() > MAX_OUT {
            return Err("client does not read its socket".into());
        }
        Ok(())
    }

    /// Logs why the connection ended and removes its streams and client object.
    pub(crate) fn close(&mut self, why: &str) {
        match why {
            "closed" => tracing::debug!("pulse client {} closed the connection", self.client),
            "panic" => tracing::error!(
                "pulse client {}: internal error; disconnecting",
                self.client
            ),
            _ => tracing::info!("pulse client {}: {why}; disconnecting", self.client),
        }
        self.cleanup();
    }

    /// Writes what is queued for the client, holding the socket against the RT thread's
    /// requests ([`RtWire`]) while any of it is left.
    fn flush_out(&mut self) -> Result<(), String> {
        let Some(wire) = self.wire.clone() else {
            return self.write_out();
        };
        match wire.acquire() {
            Err(e) => return Err(e.to_string()),
            Ok(Some(rest)) => {
                // The rest of a request the RT thread tore goes first.
                if self.srb_active() {
                    self.sock_tail.splice(0..0, rest);
                } else {
                    for (off, ..) in self.out_fds.iter_mut() {
                        *off += rest.len();
                    }
                    self.out.splice(0..0, rest);
                }
            }
            Ok(None) => {}
        }
        let r = self.write_out();
        // With the srbchannel the RT thread writes its requests into the ring, so it
        // waits for both: what the socket still holds, and a packet the full ring took
        // only part of.
        if self.sock_tail.is_empty() && self.out.is_empty() {
            wire.release();
        }
        r
    }

    fn write_out(&mut self) -> Result<(), String> {
        if self.srb_active() {
            while !self.sock_tail.is_empty() {
                match self.sock.write(&self.sock_tail) {
                    Ok(0) => return Err("socket closed".into()),
                    Ok(n) => {
                        self.sock_tail.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(format!("write: {e}")),
                }
            }
            let srb = self.srb.as_mut().expect("active");
            let n = srb.write(&self.out)?;
            self.out.drain(..n);
            return Ok(());
        }
        while !self.out.is_empty() {
            let r = match self.out_fds.front() {
                // A packet with descriptors goes alone in one sendmsg, the descriptors
                // with its first byte, as libpulse's pstream expects.
                Some((0, len, fds)) => self.sock.send_with_fds(&self.out[..*len], fds),
                Some((off, ..)) => self.sock.write(&self.out[..*off]),
                None => self.sock.write(&self.out),
            };
            match r {
                Ok(0) => return Err("socket closed".into()),
                Ok(n) => {
                    self.out.drain(..n);
                    // The descriptors left with the first byte; the rest of that
                    // packet goes as plain bytes.
                    if let Some((0, ..)) = self.out_fds.front() {
                        self.out_fds.pop_front();
                    }
                    for (off, ..) in self.out_fds.iter_mut() {
                        *off -= n;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        Ok(())
    }

    fn on_bytes(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while !bytes.is_empty() {
            let (used, packet) = self.reader.feed(bytes).map_err(|e| e.to_string())?;
            bytes = &bytes[used..];
            if let Some(p) = packet {
                self.on_packet(p)?;
            }
        }
        Ok(())
    }

    fn on_packet(&mut self, packet: Packet) -> Result<(), String> {
        match packet {
            Packet::Control(data) => {
                // Whatever this command answers comes after the releases of the blocks
                // sent before it (a client may wait for those before it reuses them).
                self.send_held_releases();
                self.on_control(&data)?
            }
            Packet::Memblock {
                channel,
                offset,
                seek,
                data,
            } => {
                if !self.authed {
                    return Err("audio before AUTH".into());
                }
                let mut out = Out {
                    buf: &mut self.out,
                    version: self.version,
                };
                match self.playback.get_mut(&channel) {
                    Some(p) => p.write(seek, offset, &data, &mut out),
                    None if self.uploads.contains_key(&channel) => {
                        let u = self.uploads.get_mut(&channel).expect("checked");
                        let room = u.length - u.data.len();
                        u.data.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    None => tracing::debug!(
                        "pulse client {}: audio for unknown channel {channel} dropped",
                        self.client
                    ),
                }
            }
            Packet::ShmRef {
                channel,
                offset,
                seek,
                block_id,
                shm_id,
                index,
                length,
                memfd,
            } => {
                // One buffer for every block: no allocation per block.
                let mut data = std::mem::take(&mut self.shm_scratch);
                if memfd {
                    self.last_shm_id = Some(shm_id);
                }
                self.read_shm(shm_id, index, length, memfd, &mut data);
                // The bytes are copied out: the block can go back to the client, with
                // the next message it gets.
                self.held_releases.push(block_id);
                let mut out = Out {
                    buf: &mut self.out,
                    version: self.version,
                };
                match self.playback.get_mut(&channel) {
                    Some(p) => p.write(seek, offset, &data, &mut out),
                    None if self.uploads.contains_key(&channel) => {
                        let u = self.uploads.get_mut(&channel).expect("checked");
                        let room = u.length - u.data.len();
                        u.data.extend_from_slice(&data[..data.len().min(room)]);
                    }
                    None => {}
                }
                self.shm_scratch = data;
            }
            Packet::ShmRelease(block_id) => {
                // An id that is not an outstanding block of ours changes nothing.
                if let Some(pool) = self.pool.as_mut() {
                    pool.release(block_id);
                }
            }
            // We copy the client's blocks as they arrive: nothing to give back.
            Packet::ShmRevoke(_) => {}
        }
        Ok(())
    }

    /// Offers the srbchannel: registers its memfd block as a pool of ours, sends
    /// ENABLE_SRBCHANNEL with the two wakeup descriptors, then a writable reference to
    /// the block; the client answers ENABLE_SRBCHANNEL with our tag.
    fn offer_srb(&mut self) {
        let shm_id = self.new_shm_id();
        let tag = random_u32() & 0x7fff_ffff;
        let mut srb = match crate::srb::Srb::new(shm_id, tag) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("pulse client {}: srbchannel not offered: {e}", self.client);
                return;
            }
        };
        let (Some(memfd), Some((wake_w, wake_r))) = (srb.take_memfd(), srb.take_client_fds())
        else {
            return;
        };
        self.queue_with_fds(
            &[CommandTag::RegisterMemfdShmid as u32, u32::MAX, shm_id],
            vec![memfd],
        );
        self.queue_with_fds(
            &[CommandTag::EnableSrbchannel as u32, tag],
            vec![wake_w, wake_r],
        );
        self.out().shm_memblock(
            0,
            crate::wire::FLAG_SHMWRITABLE,
            [
                crate::srb::BLOCK_ID,
                shm_id,
                0,
                crate::srb::BLOCK_SIZE as u32,
            ],
        );
        tracing::debug!("pulse client {}: srbchannel offered", self.client);
        self.srb = Some(srb);
    }

    /// A packet of 'L' words (a tagstruct of u32s) whose descriptors go with its first
    /// byte.
    fn queue_with_fds(&mut self, words: &[u32], fds: Vec<rustix::fd::OwnedFd>) {
        use crate::wire::{CONTROL_CHANNEL, Descriptor};
        let mut payload = Vec::with_capacity(words.len() * 5);
        for w in words {
            payload.push(b'L');
            payload.extend_from_slice(&w.to_be_bytes());
        }
        let d = Descriptor {
            length: payload.len() as u32,
            channel: CONTROL_CHANNEL,
            offset: 0,
            flags: 0,
        };
        let off = self.out.len();
        self.out.extend_from_slice(&d.encode());
        self.out.extend_from_slice(&payload);
        self.out_fds.push_back((off, self.out.len() - off, fds));
    }

    /// A random pool id for a memfd we register, distinct from this connection's others.
    fn new_shm_id(&self) -> u32 {
        loop {
            let id = random_u32() | 1;
            if self.srb.as_ref().is_none_or(|s| s.shm_id != id)
                && self.pool.as_ref().is_none_or(|p| p.shm_id != id)
            {
                return id;
            }
        }
    }

    /// Registers the record pool with the client (its memfd rides along), so record
    /// audio can go out as references into it.
    fn offer_pool(&mut self) {
        let shm_id = self.new_shm_id();
        let mut pool = match ExportPool::new(shm_id) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    "pulse client {}: no memfd record pool, record audio goes inline: {e}",
                    self.client
                );
                return;
            }
        };
        let Some(memfd) = pool.take_memfd() else {
            return;
        };
        self.queue_with_fds(
            &[CommandTag::RegisterMemfdShmid as u32, u32::MAX, shm_id],
            vec![memfd],
        );
        self.pool = Some(pool);
    }

    /// Copies a block out of the client's memfd pool with `pread` (a client that
    /// shrinks its memfd gets short reads, never a SIGBUS here). An unknown pool or a
    /// POSIX-shm reference reads as silence.
    /// Copies a client block out of its memfd pool into `data` (silence where the pool
    /// is unknown or ends).
    fn read_shm(&mut self, shm_id: u32, index: u32, length: u32, memfd: bool, data: &mut Vec<u8>) {
        let length = length.min(crate::wire::MAX_MEMBLOCK_PACKET) as usize;
        // Sized only: the read writes every byte (silence past the pool's end).
        data.resize(length, 0);
        match self.memfds.get(&shm_id).filter(|_| memfd) {
            Some(pool) => self.shm_bytes += pool.read(index as u64, data) as u64,
            None => {
                data.fill(0);
                tracing::debug!(
                    "pulse client {}: audio in unknown shared memory {shm_id} played as silence",
                    self.client
                )
            }
        }
    }

    /// Services streams and forwards what other threads queued for this client.
    fn service(&mut self, due: bool) {
        let msgs: Vec<ConnMsg> = self
            .handle
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
            .collect();
        for m in msgs {
            match m {
                ConnMsg::Event(e) => self.out().command(&Command::SubscribeEvent(e)),
                ConnMsg::Kill => self.closing = true,
                ConnMsg::KillStream(node) => self.kill_stream(node),
                ConnMsg::Moved(node) => self.send_moved(node),
                ConnMsg::NodeSuspended(node, on) => self.tell_suspended(Some(node), on),
                ConnMsg::DevicesSuspended(on) => self.tell_suspended(None, on),
                ConnMsg::DeviceRestoreEvent(kind, index) => self.extension_event(
                    crate::modules::DEVICE_RESTORE_MODULE,
                    crate::devrestore::MODULE_NAME,
                    &[crate::devrestore::EVENT, kind, index],
                ),
                ConnMsg::RestoreEvent => self.extension_event(
                    crate::modules::RESTORE_MODULE,
                    crate::restore::MODULE_NAME,
                    &[crate::restore::sub::EVENT],
                ),
            }
        }
        let lone = self.intake_possible();
        let mut out = Out {
            buf: &mut self.out,
            version: self.version,
        };
        for p in self.playback.values_mut() {
            p.service(&mut out, due, lone);
        }
        for r in self.record.values_mut() {
            r.service(&mut out, self.pool.as_mut());
        }
        if let Some(pool) = self
            .pool
            .as_mut()
            .filter(|p| p.inline_full > 0 && !p.exhausted)
        {
            pool.exhausted = true;
            tracing::warn!(
                "pulse client {}: holds all {} blocks of its memfd record pool without \
                 releasing them; its record audio goes inline while it does",
                self.client,
                crate::export::SLOTS
            );
        }
    }

    fn on_control(&mut self, data: &[u8]) -> Result<(), String> {
        if data.len() < 10 || data[0] != b'L' || data[5] != b'L' {
            return Err("control packet without command and tag".into());
        }
        let tag = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
        self.last_tag = tag;
        let seq = u32::from_be_bytes([data[6], data[7], data[8], data[9]]);
        if let Err(why) = tagcheck::check(data) {
            tracing::debug!("pulse client {}: malformed tagstruct: {why}", self.client);
            self.out().error(seq, PulseError::Protocol);
            return Ok(());
        }
        if !self.authed && tag != CommandTag::Auth as u32 {
            self.out().error(seq, PulseError::AccessDenied);
            return Ok(());
        }
        // Commands whose payload the codec does not read (or reads only partly).
        let manual = [
            CommandTag::RemoveClientProplist,
            CommandTag::RemovePlaybackStreamProplist,
            CommandTag::RemoveRecordStreamProplist,
            CommandTag::Extension,
            CommandTag::EnableSrbchannel,
            CommandTag::DisableSrbchannel,
            CommandTag::RegisterMemfdShmid,
            CommandTag::SendObjectMessage,
        ];
        if let Some(&t) = manual.iter().find(|&&t| t as u32 == tag) {
            let r = self.manual(seq, t, &data[10..]);
            self.finish(seq, r);
            return Ok(());
        }
        let known = tag <= CommandTag::SendObjectMessage as u32 && !(53..=56).contains(&tag);
        if !known {
            tracing::debug!("pulse client {}: unknown command {tag}", self.client);
            self.out().error(seq, PulseError::Command);
            return Ok(());
        }
        let mut cursor = Cursor::new(data);
        match Command::read_tag_prefixed(&mut cursor, self.version) {
            Ok((_, cmd)) => {
                let r = self.handle_cmd(seq, cmd);
                self.finish(seq, r);
            }
            Err(pa::ProtocolError::Unimplemented(..)) => {
                self.out().error(seq, PulseError::NotSupported)
            }
            Err(e) => {
                tracing::debug!("pulse client {}: bad command {tag}: {e}", self.client);
                self.out().error(seq, PulseError::Invalid);
            }
        }
        Ok(())
    }

    fn reader_shm(&self) -> bool {
        self.reader.shm_enabled()
    }

    fn finish(&mut self, seq: u32, r: Reply) {
        if let Err(e) = r {
            tracing::debug!(
                "pulse client {}: request {seq} (command {}) failed: {e:?}",
                self.client,
                self.last_tag
            );
            self.out().error(seq, e);
        }
    }

    fn manual(&mut self, seq: u32, tag: CommandTag, payload: &[u8]) -> Reply {
        if tag == CommandTag::Extension {
            return self.extension(seq, payload);
        }
        let mut cur = Cursor::new(payload);
        let mut ts = TagStructReader::new(&mut cur, self.version);
        let keys = |ts: &mut TagStructReader<'_>| -> Result<Vec<std::ffi::CString>, PulseError> {
            let mut keys = Vec::new();
            while let Some(k) = ts.read_string().map_err(|_| PulseError::Invalid)? {
                keys.push(k);
            }
            Ok(keys)
        };
        match tag {
            CommandTag::RemoveClientProplist => {
                let keys = keys(&mut ts)?;
                let mut st = self.srv.lock();
                if let Some(c) = st.clients.get_mut(&self.client) {
                    remove_props(&mut c.props, &keys);
                }
                drop(st);
                self.srv.broadcast(Fac::Client, Ev::Changed, self.client);
                self.out().ack(seq);
                Ok(())
            }
            CommandTag::RemovePlaybackStreamProplist | CommandTag::RemoveRecordStreamProplist => {
                let channel = ts.read_u32().map_err(|_| PulseError::Invalid)?;
                let keys = keys(&mut ts)?;
                let playback = tag == CommandTag::RemovePlaybackStreamProplist;
                let node = self.stream_node(channel, playback)?;
                if let Some(s) = self.srv.lock().streams.get_mut(&node) {
                    remove_props(&mut s.props, &keys);
                }
                self.srv.broadcast(
                    if playback {
                        Fac::SinkInput
                    } else {
                        Fac::SourceOutput
                    },
                    Ev::Changed,
                    node,
                );
                self.out().ack(seq);
                Ok(())
            }
            CommandTag::RegisterMemfdShmid => {
                // No reply either way (PulseAudio sends none); a bad registration is a
                // protocol error that ends the connection.
                let _ = seq;
                let shm_id = ts.read_u32().ok();
                let fd = self.fds.pop_front();
                let size = fd
                    .as_ref()
                    .and_then(|f| rustix::fs::fstat(f).ok())
                    .map_or(0, |st| st.st_size);
                match (shm_id, fd) {
                    (Some(id), Some(fd))
                        if self.reader_shm() && size > 0 && self.memfds.len() < 64 =>
                    {
                        let pool = crate::shm::ClientPool::new(fd);
                        tracing::debug!(
                            "pulse client {}: memfd pool {id} registered ({size} bytes, {})",
                            self.client,
                            if pool.mapped() {
                                "sealed and mapped"
                            } else {
                                "read with pread: cannot be sealed"
                            }
                        );
                        self.memfds.insert(id, pool);
                    }
                    _ => {
                        tracing::info!(
                            "pulse client {}: bad memfd registration; disconnecting",
                            self.client
                        );
                        self.closing = true;
                    }
                }
                Ok(())
            }
            CommandTag::EnableSrbchannel => {
                // The client's acknowledgement (no reply): from now on our output goes
                // through the ring, after what the socket still holds.
                match self.srb.as_mut() {
                    Some(s) if !s.active && s.tag == seq && self.out_fds.is_empty() => {
                        s.active = true;
                        if let Some(w) = &self.wire {
                            w.use_srb(s.out());
                        }
                        self.sock_tail.append(&mut self.out);
                        tracing::debug!("pulse client {}: srbchannel enabled", self.client);
                    }
                    _ => {
                        tracing::info!(
                            "pulse client {}: unexpected ENABLE_SRBCHANNEL (tag {seq}); disconnecting",
                            self.client
                        );
                        self.closing = true;
                    }
                }
                Ok(())
            }
            CommandTag::SendObjectMessage => {
                let mut text = || -> Result<Option<String>, PulseError> {
                    let s = ts.read_string().map_err(|_| PulseError::Invalid)?;
                    s.map(|s| s.into_string().map_err(|_| PulseError::Invalid))
                        .transpose()
                };
                let (path, message) = (text()?, text()?);
                let _params = text()?;
                let response = object_message(
                    path.as_deref().ok_or(PulseError::Invalid)?,
                    message.as_deref().ok_or(PulseError::Invalid)?,
                )?;
                let response =
                    std::ffi::CString::new(response).map_err(|_| PulseError::Internal)?;
                self.out()
                    .reply_with(seq, |ts| ts.write_string(Some(&response)).expect("vec"));
                Ok(())
            }
            _ => Err(PulseError::NotSupported),
        }
    }

    /// An extension's event to this client: EXTENSION from the server, addressed by the
    /// module's index and name, then the extension's words (its EVENT subcommand first).
    fn extension_event(&mut self, module: u32, name: &str, words: &[u32]) {
        self.out().command_with(CommandTag::Extension as u32, |ts| {
            ts.write_u32(module).expect("vec");
            ts.write_string(Some(cstr(name))).expect("vec");
            for &w in words {
                ts.write_u32(w).expect("vec");
            }
        })
    }

    /// EXTENSION module-device-restore ([`crate::devrestore`]): every sink takes PCM,
    /// and only PCM.
    fn device_restore(&mut self, seq: u32, payload: &[u8]) -> Reply {
        use crate::devrestore::{self as dr, Request};
        let req = Request::parse(payload, self.version).map_err(|e| {
            tracing::debug!("pulse client {}: device restore: {e}", self.client);
            e.pulse()
        })?;
        let graph = self.srv.engine.graph();
        let write_sink = |ts: &mut pa::TagStructWriter<'_>, index: u32| {
            let formats = dr::sink_formats();
            ts.write_u32(dr::TYPE_SINK).expect("vec");
            ts.write_u32(index).expect("vec");
            ts.write_u8(formats.len() as u8).expect("vec");
            for f in formats {
                ts.write(f).expect("vec");
            }
        };
        // As PulseAudio's module, formats are kept for sinks only.
        let sink = |kind: u32, index: u32| {
            if kind != dr::TYPE_SINK {
                return Err(PulseError::NotSupported);
            }
            self.srv
                .find_sink(&graph, Some(index), None)
                .map(|d| d.index)
                .ok_or(PulseError::NoEntity)
        };
        match req {
            Request::Test => self
                .out()
                .reply_with(seq, |ts| ts.write_u32(dr::VERSION).expect("vec")),
            Request::Subscribe(on) => {
                self.handle.device_restore_events.store(on, Relaxed);
                self.out().ack(seq);
            }
            Request::ReadAll => {
                let sinks: Vec<u32> = (graph.nodes.values())
                    .filter(|n| n.kind == NodeKind::DeviceSink)
                    .map(|n| n.id)
                    .collect();
                self.out().reply_with(seq, |ts| {
                    for i in sinks {
                        write_sink(ts, i);
                    }
                });
            }
            Request::Read(kind, index) => {
                let i = sink(kind, index)?;
                self.out().reply_with(seq, |ts| write_sink(ts, i));
            }
            Request::Save(kind, index, formats) => {
                let i = sink(kind, index)?;
                if !dr::takes(&formats) {
                    tracing::info!(
                        "pulse client {}: sink {i} cannot take {:?}: quaverd plays PCM only (no passthrough)",
                        self.client,
                        formats.iter().map(|f| f.encoding).collect::<Vec<_>>()
                    );
                    return Err(PulseError::NotSupported);
                }
                self.out().ack(seq);
                self.srv
                    .post_all(ConnMsg::DeviceRestoreEvent(dr::TYPE_SINK, i));
            }
        }
        Ok(())
    }

    /// EXTENSION: stream restore's protocol, or device restore's (above).
    fn extension(&mut self, seq: u32, payload: &[u8]) -> Reply {
        use crate::restore::{self, Request};
        let bad = |e: restore::RequestError| {
            tracing::debug!("pulse client {}: extension: {e}", self.client);
            e.pulse()
        };
        let (index, name, at) = restore::split_target(payload).map_err(bad)?;
        // Exactly one of index and name, as PulseAudio requires.
        if index.is_some() == name.is_some() {
            return Err(PulseError::Invalid);
        }
        let addressed = |module: u32, module_name: &str| {
            index == Some(module) || name.as_deref() == Some(module_name)
        };
        if addressed(
            crate::modules::DEVICE_RESTORE_MODULE,
            crate::devrestore::MODULE_NAME,
        ) {
            return self.device_restore(seq, &payload[at..]);
        }
        let ours = addressed(crate::modules::RESTORE_MODULE, restore::MODULE_NAME);
        let srv = self.srv.clone();
        let Some(store) = srv.restore.as_ref().filter(|_| ours) else {
            return Err(PulseError::NoExtension);
        };
        let lock = || {
            store
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        match Request::parse(&payload[at..]).map_err(bad)? {
            Request::Test => self
                .out()
                .reply_with(seq, |ts| ts.write_u32(restore::VERSION).expect("vec")),
            Request::Read => {
                let entries = lock().entries().clone();
                self.out().reply_with(seq, |ts| {
                    for (name, e) in &entries {
                        let (map, vol) =
                            e.volume.unwrap_or((PaMap::empty(), ChannelVolume::empty()));
                        ts.write_string(Some(cstr(name))).expect("vec");
                        ts.write(map).expect("vec");
                        ts.write(vol).expect("vec");
                        ts.write_string(e.device.as_deref().map(cstr)).expect("vec");
                        ts.write_bool(e.mute.unwrap_or(false)).expect("vec");
                    }
                });
            }
            Request::Write(mode, apply, entries) => {
                let stored = lock().write(mode, entries)?;
                if apply {
                    srv.apply_restore(&stored);
                }
                self.out().ack(seq);
                srv.restore_changed();
            }
            Request::Delete(names) => {
                lock().delete(&names);
                self.out().ack(seq);
                srv.restore_changed();
            }
            Request::Subscribe(on) => {
                self.handle
                    .restore_events
                    .store(on, std::sync::atomic::Ordering::Relaxed);
                self.out().ack(seq);
            }
        }
        Ok(())
    }
}

/// What a new stream links to.
struct Target {
    /// Node to link with.
    node: NodeId,
    /// Its name (the engine links by name).
    name: String,
    /// PulseAudio index and name of the device the client sees.
    dev_index: u32,
    dev_name: String,
}

impl Conn {
    fn stream_node(&self, channel: u32, playback: bool) -> Result<NodeId, PulseError> {
        if playback {
            self.playback.get(&channel).map(|p| p.node)
        } else {
            self.record.get(&channel).map(|r| r.node)
        }
        .ok_or(PulseError::NoEntity)
    }

    fn handle_cmd(&mut self, seq: u32, cmd: Command) -> Reply {
        let srv = self.srv.clone();
        match cmd {
            Command::Auth(p) => {
                if p.version < pa::MIN_VERSION {
                    self.closing = true;
                    return Err(PulseError::Version);
                }
                if let Some(cookie) = self.sock.required_cookie()
                    && p.cookie.as_slice() != cookie
                {
                    tracing::warn!(
                        "pulse client {}: TCP peer without the cookie refused",
                        self.client
                    );
                    self.closing = true;
                    return Err(PulseError::AccessDenied);
                }
                self.version = p.version.min(SERVER_VERSION);
                self.authed = true;
                // Shared memory only as memfd (no POSIX shm segments to open), only on the
                // unix socket, and only for libraries past the 9.0 memfd bug (v32). A
                // client with shm disabled (`enable-shm = no`) still says memfd: as
                // PulseAudio, memfd needs shm too.
                self.auth_creds = self.creds;
                let same_user = self.same_user();
                let memfd = self.srv.opts.memfd
                    && same_user
                    && p.supports_shm
                    && p.supports_memfd
                    && p.version >= 32
                    && self.sock.is_unix();
                if memfd {
                    self.reader.enable_shm();
                }
                tracing::debug!(
                    "pulse client {}: protocol {} (shm {}, memfd {}): audio {}",
                    self.client,
                    self.version,
                    p.supports_shm,
                    p.supports_memfd,
                    if memfd { "by memfd" } else { "inline" }
                );
                self.out().reply(
                    seq,
                    &AuthReply {
                        version: SERVER_VERSION,
                        use_memfd: memfd,
                        use_shm: memfd,
                    },
                );
                // Registered before the srbchannel is offered, as PulseAudio registers
                // its pool: everything before the offer leaves through the socket
                // before the ring is used, so the client knows the pool before the
                // first reference into it can reach it through the ring.
                if memfd && self.srv.opts.memfd_record && self.pool.is_none() {
                    self.offer_pool();
                }
                // As PulseAudio: offered right after the reply, only with shared memory
                // (the rings live in a memfd block) and only once.
                if memfd && self.srv.opts.srbchannel && self.version >= 30 && self.srb.is_none() {
                    self.offer_srb();
                }
            }
            Command::SetClientName(props) => {
                self.update_client(PropsUpdateMode::Replace, &props);
                let reply = SetClientNameReply {
                    client_id: self.client,
                };
                self.out().reply(seq, &reply);
            }
            Command::UpdateClientProplist(p) => {
                self.update_client(p.mode, &p.props);
                self.out().ack(seq);
            }
            Command::Exit => {
                let Some(exit) = self.srv.opts.on_exit else {
                    tracing::info!(
                        "pulse client {}: EXIT refused ([pulse] allow_exit = false)",
                        self.client
                    );
                    return Err(PulseError::AccessDenied);
                };
                tracing::info!("pulse client {} asked the server to exit", self.client);
                // The answer goes out now: the stop closes every connection soon after.
                self.out().ack(seq);
                let _ = self.flush_out();
                exit();
            }
            Command::Stat => {
                let st = srv.lock();
                let blocks = st.streams.len() as u32;
                let cache: u32 = st.samples.values().map(|s| s.bytes).sum();
                drop(st);
                self.out().reply(
                    seq,
                    &StatInfo {
                        memblock_total: blocks,
                        memblock_total_size: 0,
                        memblock_allocated: blocks,
                        memblock_allocated_size: 0,
                        sample_cache_size: cache,
                    },
                );
            }
            Command::GetServerInfo => {
                let info = self.server_info();
                self.out().reply(seq, &info);
            }
            Command::GetSinkInfo(q) => {
                let snap = srv.snapshot();
                let dev = srv
                    .find_sink(
                        &snap.graph,
                        q.index,
                        q.name.as_ref().and_then(|n| n.to_str().ok()),
                    )
                    .ok_or(PulseError::NoEntity)?;
                let info = srv.sink_info(&snap, &srv.lock(), &snap.graph.nodes[&dev.node]);
                self.out().reply(seq, &info);
            }
            Command::GetSinkInfoList => {
                let snap = srv.snapshot();
                let list = srv.sink_list(&snap, &srv.lock());
                self.out().reply(seq, &list);
            }
            Command::GetSourceInfo(q) => {
                let snap = srv.snapshot();
                let dev = srv
                    .find_source(
                        &snap.graph,
                        q.index,
                        q.name.as_ref().and_then(|n| n.to_str().ok()),
                    )
                    .ok_or(PulseError::NoEntity)?;
                let info = srv
                    .source_info(&snap, &srv.lock(), &dev)
                    .ok_or(PulseError::NoEntity)?;
                self.out().reply(seq, &info);
            }
            Command::GetSourceInfoList => {
                let snap = srv.snapshot();
                let list = srv.source_list(&snap, &srv.lock());
                self.out().reply(seq, &list);
            }
            Command::GetSinkInputInfo(idx) => {
                let snap = srv.snapshot();
                let node = Server::stream_node(&snap, idx, NodeKind::PlaybackStream)
                    .ok_or(PulseError::NoEntity)?;
                let info = srv.sink_input_info(&snap, &srv.lock(), node);
                self.out().reply(seq, &info);
            }
            Command::GetSinkInputInfoList => {
                let snap = srv.snapshot();
                let list = srv.sink_input_list(&snap, &srv.lock());
                self.out().reply(seq, &list);
            }
            Command::GetSourceOutputInfo(idx) => {
                let snap = srv.snapshot();
                let node = Server::stream_node(&snap, idx, NodeKind::RecordStream)
                    .ok_or(PulseError::NoEntity)?;
                let info = srv.source_output_info(&snap, &srv.lock(), node);
                self.out().reply(seq, &info);
            }
            Command::GetSourceOutputInfoList => {
                let snap = srv.snapshot();
                let list = srv.source_output_list(&snap, &srv.lock());
                self.out().reply(seq, &list);
            }
            Command::GetClientInfo(idx) => {
                let info = srv
                    .client_info(&srv.lock(), idx)
                    .ok_or(PulseError::NoEntity)?;
                self.out().reply(seq, &info);
            }
            Command::GetClientInfoList => {
                let list = srv.client_list(&srv.lock());
                self.out().reply(seq, &list);
            }
            Command::GetModuleInfo(idx) => {
                let list = srv.module_list(&srv.lock());
                let m = list
                    .into_iter()
                    .find(|m| m.index == idx)
                    .ok_or(PulseError::NoEntity)?;
                self.out().reply(seq, &m);
            }
            Command::GetModuleInfoList => {
                let list = srv.module_list(&srv.lock());
                self.out().reply(seq, &list);
            }
            Command::GetCardInfo(_) => return Err(PulseError::NoEntity),
            Command::GetCardInfoList => self.out().reply_with(seq, |_| {}),
            Command::GetSampleInfo(idx) => {
                let info = srv
                    .lock()
                    .samples
                    .get(&idx)
                    .map(|s| s.info(idx))
                    .ok_or(PulseError::NoEntity)?;
                self.out().reply(seq, &info);
            }
            Command::GetSampleInfoList => {
                let list: Vec<pa::SampleInfo> =
                    srv.lock().samples.iter().map(|(&i, s)| s.info(i)).collect();
                self.out().reply(seq, &list);
            }
            Command::LookupSink(name) => {
                let graph = srv.engine.graph();
                let d = srv
                    .sink_by_name(&graph, name.to_str().unwrap_or(""))
                    .ok_or(PulseError::NoEntity)?;
                self.out().reply(seq, &LookupReply(d.index));
            }
            Command::LookupSource(name) => {
                let graph = srv.engine.graph();
                let d = srv
                    .source_by_name(&graph, name.to_str().unwrap_or(""))
                    .ok_or(PulseError::NoEntity)?;
                self.out().reply(seq, &LookupReply(d.index));
            }
            Command::Subscribe(mask) => {
                self.handle.mask.store(mask.bits(), Relaxed);
                self.out().ack(seq);
            }
            Command::SetDefaultSink(name) => {
                let name = name.to_str().map_err(|_| PulseError::Invalid)?.to_string();
                let graph = srv.engine.graph();
                let d = srv
                    .sink_by_name(&graph, &name)
                    .ok_or(PulseError::NoEntity)?;
                srv.policy
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .set_default_sink(Some(d.name.clone()));
                srv.broadcast(Fac::Server, Ev::Changed, u32::MAX);
                srv.follow_default(&d, true);
                self.out().ack(seq);
            }
            Command::SetDefaultSource(name) => {
                let name = name.to_str().map_err(|_| PulseError::Invalid)?.to_string();
                let graph = srv.engine.graph();
                let d = srv
                    .source_by_name(&graph, &name)
                    .ok_or(PulseError::NoEntity)?;
                srv.policy
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .set_default_source(Some(d.name.clone()));
                srv.broadcast(Fac::Server, Ev::Changed, u32::MAX);
                srv.follow_default(&d, false);
                self.out().ack(seq);
            }
            Command::SetSinkVolume(p) => {
                let graph = srv.engine.graph();
                let d = srv
                    .find_sink(
                        &graph,
                        p.device_index,
                        p.device_name.as_ref().and_then(|n| n.to_str().ok()),
                    )
                    .ok_or(PulseError::NoEntity)?;
                srv.engine
                    .set_volume(&d.name, Some(cvolume_to_linear(&p.volume)), None)
                    .map_err(engine_err)?;
                srv.lock().device_volumes.insert((false, d.index), p.volume);
                self.out().ack(seq);
            }
            Command::SetSourceVolume(p) => {
                let graph = srv.engine.graph();
                let d = srv
                    .find_source(
                        &graph,
                        p.device_index,
                        p.device_name.as_ref().and_then(|n| n.to_str().ok()),
                    )
                    .ok_or(PulseError::NoEntity)?;
                srv.lock().device_volumes.insert((true, d.index), p.volume);
                if d.monitor {
                    srv.broadcast(Fac::Source, Ev::Changed, d.index);
                } else {
                    srv.engine
                        .set_volume(&d.name, Some(cvolume_to_linear(&p.volume)), None)
                        .map_err(engine_err)?;
                }
                self.out().ack(seq);
            }
            Command::SetSinkMute(p) => {
                let graph = srv.engine.graph();
                let d = srv
                    .find_sink(
                        &graph,
                        p.device_index,
                        p.device_name.as_ref().and_then(|n| n.to_str().ok()),
                    )
                    .ok_or(PulseError::NoEntity)?;
                srv.engine
                    .set_volume(&d.name, None, Some(p.mute))
                    .map_err(engine_err)?;
                self.out().ack(seq);
            }
            Command::SetSourceMute(p) => {
                let graph = srv.engine.graph();
                let d = srv
                    .find_source(
                        &graph,
                        p.device_index,
                        p.device_name.as_ref().and_then(|n| n.to_str().ok()),
                    )
                    .ok_or(PulseError::NoEntity)?;
                if d.monitor {
                    srv.lock().monitor_mute.insert(d.index, p.mute);
                    srv.broadcast(Fac::Source, Ev::Changed, d.index);
                } else {
                    srv.engine
                        .set_volume(&d.name, None, Some(p.mute))
                        .map_err(engine_err)?;
                }
                self.out().ack(seq);
            }
            Command::SetSinkInputVolume(p) => {
                self.set_stream_volume(p.index, NodeKind::PlaybackStream, Some(p.volume), None)?;
                self.out().ack(seq);
            }
            Command::SetSourceOutputVolume(p) => {
                self.set_stream_volume(p.index, NodeKind::RecordStream, Some(p.volume), None)?;
                self.out().ack(seq);
            }
            Command::SetSinkInputMute(p) => {
                self.set_stream_volume(p.index, NodeKind::PlaybackStream, None, Some(p.mute))?;
                self.out().ack(seq);
            }
            Command::SetSourceOutputMute(p) => {
                self.set_stream_volume(p.index, NodeKind::RecordStream, None, Some(p.mute))?;
                self.out().ack(seq);
            }
            Command::SuspendSink(p) => {
                self.suspend_devices(&p, true)?;
                self.out().ack(seq);
            }
            Command::SuspendSource(p) => {
                self.suspend_devices(&p, false)?;
                self.out().ack(seq);
            }
            Command::MoveSinkInput(p) => {
                self.move_stream(p.index, p.device_index, p.device_name, true)?;
                self.out().ack(seq);
            }
            Command::MoveSourceOutput(p) => {
                self.move_stream(p.index, p.device_index, p.device_name, false)?;
                self.out().ack(seq);
            }
            Command::KillClient(idx) => {
                let conn = srv
                    .lock()
                    .clients
                    .get(&idx)
                    .map(|c| c.conn.clone())
                    .ok_or(PulseError::NoEntity)?;
                self.out().ack(seq);
                if idx == self.client {
                    self.closing = true;
                } else {
                    conn.post(ConnMsg::Kill);
                }
            }
            Command::KillSinkInput(idx) | Command::KillSourceOutput(idx) => {
                let kind = if matches!(cmd, Command::KillSinkInput(_)) {
                    NodeKind::PlaybackStream
                } else {
                    NodeKind::RecordStream
                };
                let is_stream = srv.engine.graph().nodes.get(&idx).is_some_and(|n| {
                    n.kind == kind
                        || (kind == NodeKind::RecordStream && crate::server::is_source_output(n))
                });
                let (owner, module) = {
                    let st = srv.lock();
                    let module = st
                        .modules
                        .iter()
                        .find(|(_, m)| is_stream && m.nodes.contains(&idx))
                        .map(|(&i, _)| i);
                    (st.streams.get(&idx).map(|s| s.client), module)
                };
                if let (None, Some(module)) = (owner, module) {
                    // A module's stream (a loopback): PulseAudio unloads the module.
                    self.unload_module(module)?;
                    self.out().ack(seq);
                    return Ok(());
                }
                let owner = owner.ok_or(PulseError::NoEntity)?;
                self.out().ack(seq);
                if owner == self.client {
                    self.kill_stream(idx);
                } else if let Some(c) = srv.lock().clients.get(&owner) {
                    c.conn.post(ConnMsg::KillStream(idx));
                }
            }
            Command::SetSinkPort(_)
            | Command::SetSourcePort(_)
            | Command::SetCardProfile(_)
            | Command::SetPortLatencyOffset(_) => return Err(PulseError::NoEntity),
            Command::LoadModule(p) => {
                let idx = self.load_module(&p)?;
                self.out().reply_with(seq, |ts| {
                    ts.write_u32(idx).expect("vec");
                });
            }
            Command::UnloadModule(idx) => {
                self.unload_module(idx)?;
                self.out().ack(seq);
            }
            Command::Extension(_) => return Err(PulseError::NoExtension),
            Command::CreateUploadStream(p) => self.create_upload(seq, p)?,
            Command::DeleteUploadStream(ch) => {
                self.uploads.remove(&ch).ok_or(PulseError::NoEntity)?;
                self.out().ack(seq);
            }
            Command::FinishUploadStream(ch) => {
                let u = self.uploads.remove(&ch).ok_or(PulseError::NoEntity)?;
                self.finish_upload(u);
                self.out().ack(seq);
            }
            Command::PlaySample(p) => {
                let graph = srv.engine.graph();
                let sink = match (p.sink_index, p.sink_name.as_ref()) {
                    (None, None) => srv.default_sink(&graph),
                    (i, n) => srv.find_sink(&graph, i, n.and_then(|n| n.to_str().ok())),
                }
                .ok_or(PulseError::NoEntity)?;
                let name = p.name.to_str().map_err(|_| PulseError::Invalid)?;
                let sample = srv
                    .lock()
                    .samples
                    .values()
                    .find(|s| s.name == name)
                    .cloned()
                    .ok_or(PulseError::NoEntity)?;
                let gain = if p.volume == u32::MAX {
                    1.0
                } else {
                    crate::convert::volume_to_linear(pa::Volume::from_u32_clamped(p.volume))
                };
                let node = crate::scache::play(&srv, &sample, &sink, gain)?;
                self.out().reply_with(seq, |ts| {
                    ts.write_u32(node).expect("vec");
                });
            }
            Command::RemoveSample(name) => {
                let name = name.to_str().map_err(|_| PulseError::Invalid)?;
                let mut st = srv.lock();
                let idx = st
                    .samples
                    .iter()
                    .find(|(_, s)| s.name == name)
                    .map(|(&i, _)| i)
                    .ok_or(PulseError::NoEntity)?;
                st.samples.remove(&idx);
                drop(st);
                srv.broadcast(Fac::SampleCache, Ev::Removed, idx);
                self.out().ack(seq);
            }
            Command::CreatePlaybackStream(p) => self.create_playback(seq, p)?,
            Command::CreateRecordStream(p) => self.create_record(seq, p)?,
            Command::DeletePlaybackStream(ch) => {
                let p = self.playback.remove(&ch).ok_or(PulseError::NoEntity)?;
                self.drop_stream(p.node);
                self.out().ack(seq);
            }
            Command::DeleteRecordStream(ch) => {
                let r = self.record.remove(&ch).ok_or(PulseError::NoEntity)?;
                self.drop_stream(r.node);
                self.out().ack(seq);
            }
            Command::DrainPlaybackStream(ch) => {
                let p = self.playback.get_mut(&ch).ok_or(PulseError::NoEntity)?;
                p.shared.set_flag(F_DRAIN, true);
                p.drains.push(seq);
                // Acked from service() once the last frame has played.
            }
            Command::CorkPlaybackStream(c) => {
                let p = self.playback.get(&c.channel).ok_or(PulseError::NoEntity)?;
                p.shared.set_flag(F_CORKED, c.cork);
                let node = p.node;
                self.set_corked(node, c.cork);
                // Where the device holds a long queue, pause and resume are heard at
                // once: the queue is taken back and rendered again (the stream keeps
                // the audio it had queued for when it resumes).
                if let Err(e) = self.srv.engine.rewind() {
                    tracing::debug!("pulse: rewind after cork: {e}");
                }
                self.out().ack(seq);
            }
            Command::CorkRecordStream(c) => {
                let r = self.record.get(&c.channel).ok_or(PulseError::NoEntity)?;
                if c.cork {
                    r.shared.flags.fetch_or(R_CORKED, Release);
                } else {
                    r.shared.flags.fetch_and(!R_CORKED, Release);
                }
                let node = r.node;
                self.set_corked(node, c.cork);
                self.out().ack(seq);
            }
            Command::FlushPlaybackStream(ch) => {
                let p = self.playback.get_mut(&ch).ok_or(PulseError::NoEntity)?;
                p.flush();
                // What the device already holds of this stream goes too (a seek is heard
                // at once where the device keeps a long queue).
                let node = p.node;
                if let Err(e) = self.srv.engine.rewind_flushed(node) {
                    tracing::debug!("pulse: rewind after flush: {e}");
                }
                self.out().ack(seq);
            }
            Command::FlushRecordStream(ch) => {
                let r = self.record.get_mut(&ch).ok_or(PulseError::NoEntity)?;
                let n = r.ring.slots();
                if let Ok(c) = r.ring.read_chunk(n) {
                    c.commit_all();
                }
                r.sent += (n / r.ch) as u64;
                self.out().ack(seq);
            }
            Command::TriggerPlaybackStream(ch) => {
                let p = self.playback.get(&ch).ok_or(PulseError::NoEntity)?;
                p.shared.set_flag(F_TRIGGER, true);
                self.out().ack(seq);
            }
            Command::PrebufPlaybackStream(ch) => {
                let p = self.playback.get(&ch).ok_or(PulseError::NoEntity)?;
                p.shared.set_flag(F_PREBUF, true);
                self.out().ack(seq);
            }
            Command::GetPlaybackLatency(q) => {
                let p = self.playback.get(&q.channel).ok_or(PulseError::NoEntity)?;
                let t = p.shared.timing();
                let (sink_usec, read_offset, playing_for) =
                    t.figures(p.fs as u64, p.spec.sample_rate);
                let reply = PlaybackLatency {
                    sink_usec,
                    source_usec: 0,
                    playing: t.playing,
                    local_time: q.now,
                    remote_time: SystemTime::now(),
                    write_offset: p.write_index,
                    read_offset,
                    underrun_for: 0,
                    playing_for,
                };
                self.out().reply(seq, &reply);
            }
            Command::GetRecordLatency(q) => {
                let r = self.record.get(&q.channel).ok_or(PulseError::NoEntity)?;
                let sh = &r.shared;
                let reply = RecordLatency {
                    sink_usec: self.monitor_usec(r.node),
                    source_usec: frames_to_usec(sh.delay.load(Relaxed) as u64, r.spec.sample_rate),
                    playing: sh.flags.load(Acquire) & R_CORKED == 0,
                    local_time: q.now,
                    remote_time: SystemTime::now(),
                    write_offset: (sh.produced.load(Acquire) * r.fs as u64) as i64,
                    read_offset: (r.sent * r.fs as u64) as i64,
                };
                self.out().reply(seq, &reply);
            }
            Command::SetPlaybackStreamName(p) => {
                self.rename_stream(p.index, true, &p.name)?;
                self.out().ack(seq);
            }
            Command::SetRecordStreamName(p) => {
                self.rename_stream(p.index, false, &p.name)?;
                self.out().ack(seq);
            }
            Command::UpdatePlaybackStreamProplist(p) => {
                self.update_stream_props(p.index, true, p.mode, &p.props)?;
                self.out().ack(seq);
            }
            Command::UpdateRecordStreamProplist(p) => {
                self.update_stream_props(p.index, false, p.mode, &p.props)?;
                self.out().ack(seq);
            }
            Command::SetPlaybackStreamBufferAttr(q) => {
                let grant = self.grant();
                let rate = self.srv.engine.rate();
                let p = self
                    .playback
                    .get_mut(&q.index)
                    .ok_or(PulseError::NoEntity)?;
                let mode = LatencyMode {
                    adjust_latency: q.adjust_latency,
                    early_requests: q.early_requests,
                };
                let fixed = bufattr::fix_playback(&q.buffer_attr, &p.spec, mode, grant);
                // The node's latency request, and with it the quantum, follows the new
                // sink latency; the queue follows at once.
                let frames = engine_frames(rate, fixed.sink_request_usec);
                if let Err(e) = self.srv.engine.set_latency(p.node, Some(frames)) {
                    tracing::debug!("pulse: latency of stream {}: {e}", p.node);
                }
                let old_tlength = p.attr.target_length as i64;
                p.attr = fixed.attr;
                p.missing += fixed.attr.target_length as i64 - old_tlength;
                p.shared
                    .prebuf
                    .store(fixed.attr.pre_buffering / p.fs as u32, Relaxed);
                p.configured_usec = fixed.configured_sink_usec;
                let reply = SetPlaybackStreamBufferAttrReply {
                    buffer_attr: fixed.attr,
                    configured_sink_latency: fixed.configured_sink_usec,
                };
                self.out().reply(seq, &reply);
            }
            Command::SetRecordStreamBufferAttr(q) => {
                let grant = self.grant();
                let r = self.record.get_mut(&q.index).ok_or(PulseError::NoEntity)?;
                let mode = LatencyMode {
                    adjust_latency: q.adjust_latency,
                    early_requests: q.early_requests,
                };
                let fixed = bufattr::fix_record(&q.buffer_attr, &r.spec, mode, grant);
                let rate = self.srv.engine.rate();
                let frames = fixed.source_request_usec.map(|u| engine_frames(rate, u));
                if let Err(e) = self.srv.engine.set_latency(r.node, frames) {
                    tracing::debug!("pulse: latency of stream {}: {e}", r.node);
                }
                r.attr = fixed.attr;
                let ring_frames = r.ring.buffer().capacity() / r.ch;
                let decim = r.peak.as_ref().map_or(1, |p| p.decim);
                r.frag_frames = (record_wake_frames(&fixed, &r.spec, ring_frames) * decim)
                    .clamp(1, (ring_frames / 2).max(1));
                r.configured_usec = fixed.configured_source_usec;
                let reply = SetRecordStreamBufferAttrReply {
                    buffer_attr: fixed.attr,
                    configured_source_latency: fixed.configured_source_usec,
                };
                self.out().reply(seq, &reply);
            }
            Command::UpdatePlaybackStreamSampleRate(q) => {
                let p = self
                    .playback
                    .get_mut(&q.index)
                    .ok_or(PulseError::NoEntity)?;
                let (node, ch) = (p.node, p.ch);
                let srv = &self.srv;
                change_rate(
                    &mut p.variable_rate,
                    &mut p.spec,
                    &p.shared.rate,
                    q.sample_rate,
                    |rate| retune_stream(srv, node, ch, rate, true),
                )?;
                self.rate_changed(node, q.sample_rate, true);
                self.out().ack(seq);
            }
            Command::UpdateRecordStreamSampleRate(q) => {
                let r = self.record.get_mut(&q.index).ok_or(PulseError::NoEntity)?;
                if r.peak.is_some() {
                    // Its ring carries engine-rate frames for the peak detector.
                    return Err(PulseError::NotSupported);
                }
                let (node, ch) = (r.node, r.ch);
                let srv = &self.srv;
                change_rate(
                    &mut r.variable_rate,
                    &mut r.spec,
                    &r.shared.rate,
                    q.sample_rate,
                    |rate| retune_stream(srv, node, ch, rate, false),
                )?;
                self.rate_changed(node, q.sample_rate, false);
                self.out().ack(seq);
            }
            // Replies and server-to-client commands are not requests.
            _ => return Err(PulseError::Command),
        }
        Ok(())
    }

    /// For a record stream on a sink's monitor (or on a sink input's), the sink's
    /// latency: PulseAudio reports it as the monitor latency, which libpulse subtracts,
    /// because a monitor hears a sample before the sink plays it. 0 for real sources.
    fn monitor_usec(&self, node: NodeId) -> u64 {
        // Asked on every latency query: look, do not copy the graph.
        let device = self.srv.engine.inspect(|graph| {
            record_source_index(graph, node)
                .and_then(|src| graph.nodes.get(&src))
                .filter(|n| n.kind == NodeKind::DeviceSink)
                .and_then(|n| n.device)
        });
        device.map_or(0, |i| {
            let frames = self.srv.engine.stats().devices[i]
                .playback_delay
                .load(Relaxed);
            frames_to_usec(frames, self.srv.engine.rate())
        })
    }

    /// Introspection shows the new rate; subscribers hear of the change.
    fn rate_changed(&self, node: NodeId, rate: u32, playback: bool) {
        if let Some(rec) = self.srv.lock().streams.get_mut(&node) {
            rec.spec.sample_rate = rate;
        }
        self.stream_changed(node, playback);
    }

    fn server_info(&self) -> pa::ServerInfo {
        let snap = self.srv.snapshot();
        let sink = snap.default_sink.as_ref();
        let channels = sink
            .and_then(|d| snap.graph.nodes.get(&d.node))
            .map(|n| {
                quaver_dsp::ChannelMap(
                    n.inputs
                        .iter()
                        .map(|p| snap.graph.ports[p].channel)
                        .collect(),
                )
            })
            .unwrap_or_else(quaver_dsp::ChannelMap::stereo);
        let user = std::env::var("USER").unwrap_or_else(|_| "quaver".into());
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        pa::ServerInfo {
            server_name: Some(cstr("pulseaudio")),
            server_version: Some(cstr(&format!(
                "16.1.0 (quaver {})",
                env!("CARGO_PKG_VERSION")
            ))),
            user_name: Some(cstr(&user)),
            host_name: Some(cstr(&host)),
            sample_spec: SampleSpec {
                format: SampleFormat::Float32Le,
                channels: channels.len().clamp(1, 32) as u8,
                sample_rate: snap.rate,
            },
            cookie: self.srv.cookie,
            default_sink_name: snap.default_sink.as_ref().map(|d| cstr(&d.name)),
            default_source_name: snap.default_source.as_ref().map(|d| cstr(&d.name)),
            channel_map: crate::convert::map_to_pa(&channels),
        }
    }

    fn rename_stream(&self, channel: u32, playback: bool, name: &std::ffi::CStr) -> Reply {
        let node = self.stream_node(channel, playback)?;
        if let Some(s) = self.srv.lock().streams.get_mut(&node) {
            s.props.set(Prop::MediaName, name);
        }
        self.stream_changed(node, playback);
        Ok(())
    }

    fn update_stream_props(
        &self,
        channel: u32,
        playback: bool,
        mode: PropsUpdateMode,
        props: &Props,
    ) -> Reply {
        let node = self.stream_node(channel, playback)?;
        if let Some(s) = self.srv.lock().streams.get_mut(&node) {
            update_props(&mut s.props, mode, props);
        }
        self.stream_changed(node, playback);
        Ok(())
    }

    fn stream_changed(&self, node: NodeId, playback: bool) {
        self.srv.broadcast(
            if playback {
                Fac::SinkInput
            } else {
                Fac::SourceOutput
            },
            Ev::Changed,
            node,
        );
    }

    /// Whether the client runs as our user — as PulseAudio, shared memory is only used
    /// then, so nothing of ours is mapped into another user's process. The uid comes
    /// from the credentials passed with AUTH, else from the socket's peer credentials
    /// (both checked by the kernel).
    fn same_user(&self) -> bool {
        let uid = match (&self.auth_creds, &self.sock) {
            (Some(c), _) => Some(c.uid),
            (None, Sock::Unix(s)) => rustix::net::sockopt::socket_peercred(s).ok().map(|c| c.uid),
            (None, Sock::Tcp { .. }) => None,
        };
        if let Some(c) = &self.auth_creds {
            tracing::debug!(
                "pulse client {}: credentials pid {} uid {} gid {}",
                self.client,
                c.pid.as_raw_nonzero(),
                c.uid.as_raw(),
                c.gid.as_raw()
            );
        }
        let same = uid == Some(rustix::process::geteuid());
        if !same && uid.is_some() {
            tracing::info!(
                "pulse client {}: runs as uid {} (not ours): no shared memory",
                self.client,
                uid.map_or(0, |u| u.as_raw())
            );
        }
        same
    }

    fn update_client(&mut self, mode: PropsUpdateMode, props: &Props) {
        let creds = self.auth_creds;
        let mut st = self.srv.lock();
        if let Some(c) = st.clients.get_mut(&self.client) {
            update_props(&mut c.props, mode, props);
            // What the kernel vouches for fills what the client left out.
            if let Some(cr) = creds {
                if c.props.get(Prop::ApplicationProcessId).is_none() {
                    c.props.set(
                        Prop::ApplicationProcessId,
                        cstr(&cr.pid.as_raw_nonzero().to_string()),
                    );
                }
                if c.props.get(Prop::ApplicationProcessUser).is_none()
                    && let Some(user) = user_name(cr.uid.as_raw())
                {
                    c.props.set(Prop::ApplicationProcessUser, cstr(&user));
                }
            }
            if let Some(n) = prop_str(&c.props, Prop::ApplicationName) {
                c.name = n;
            }
        }
        drop(st);
        self.srv.broadcast(Fac::Client, Ev::Changed, self.client);
    }

    fn set_corked(&self, node: NodeId, corked: bool) {
        let playback = {
            let mut st = self.srv.lock();
            match st.streams.get_mut(&node) {
                Some(s) => {
                    s.corked = corked;
                    matches!(s.io, StreamIo::Play(_))
                }
                None => return,
            }
        };
        self.stream_changed(node, playback);
        // The device's state may have changed with it (RUNNING ↔ IDLE), which
        // PulseAudio announces as a change of the sink or source.
        let graph = self.srv.engine.graph();
        if playback {
            if let Some(sink) = crate::server::stream_target(&graph, node) {
                self.srv.broadcast(Fac::Sink, Ev::Changed, sink);
            }
        } else if let Some(source) = crate::server::record_source_index(&graph, node) {
            self.srv.broadcast(Fac::Source, Ev::Changed, source);
        }
    }

    fn set_stream_volume(
        &self,
        index: u32,
        kind: NodeKind,
        volume: Option<ChannelVolume>,
        mute: Option<bool>,
    ) -> Reply {
        let graph = self.srv.engine.graph();
        if kind == NodeKind::RecordStream
            && graph.nodes.get(&index).is_some_and(crate::server::is_loop)
        {
            // A loopback's capture side has a volume of its own (the module's).
            let capture = self
                .srv
                .lock()
                .modules
                .values()
                .find(|m| m.nodes.contains(&index))
                .and_then(|m| m.capture.clone())
                .ok_or(PulseError::NoEntity)?;
            capture.update(volume.map(|v| cvolume_to_linear(&v)), mute);
            self.srv.broadcast(Fac::SourceOutput, Ev::Changed, index);
            return Ok(());
        }
        graph
            .nodes
            .get(&index)
            .filter(|n| n.kind == kind)
            .ok_or(PulseError::NoEntity)?;
        if let Some(v) = &volume
            && let Some(s) = self.srv.lock().streams.get_mut(&index)
        {
            let n = v.channels().len();
            if n != s.spec.channels as usize && n != 1 {
                return Err(PulseError::Invalid);
            }
            s.cvolume = if n == 1 {
                crate::convert::uniform_cvolume(s.spec.channels as usize, cvolume_to_linear(v))
            } else {
                *v
            };
        }
        self.srv
            .engine
            .set_volume(
                &index.to_string(),
                volume.map(|v| cvolume_to_linear(&v)),
                mute,
            )
            .map_err(engine_err)?;
        self.srv.remember(index, |e, s| {
            if volume.is_some() {
                e.volume = Some((s.map, s.cvolume));
            }
            if mute.is_some() {
                e.mute = mute;
            }
        });
        Ok(())
    }

    /// SUSPEND_SINK / SUSPEND_SOURCE (`sink`): records the request for the named
    /// device, or for every sink (source) when none is named, as `pasuspender` asks;
    /// the engine's devices are held suspended while any request stands (they share
    /// one clock, so they suspend together; streams wait and lose nothing).
    fn suspend_devices(&self, p: &pa::SuspendParams, sink: bool) -> Reply {
        let srv = &self.srv;
        let graph = srv.engine.graph();
        // No index and an empty name (libpulse's "by index" with PA_INVALID_INDEX, as
        // pasuspender sends) or no name at all: every device.
        let name = p
            .device_name
            .as_ref()
            .map(|n| n.to_str().unwrap_or("\u{fffd}"));
        let all = p.device_index.is_none() && name.is_none_or(str::is_empty);
        let targets: Vec<NodeId> = if !all {
            let dev = if sink {
                srv.find_sink(&graph, p.device_index, name)
            } else {
                srv.find_source(&graph, p.device_index, name)
            };
            let dev = dev.ok_or(PulseError::NoEntity)?;
            if graph
                .nodes
                .get(&dev.node)
                .is_some_and(|n| n.device.is_none())
            {
                return self.suspend_module_node(&dev, sink, p.suspend);
            }
            let node = dev.node;
            vec![node]
        } else if sink {
            graph
                .nodes
                .values()
                .filter(|n| n.kind == NodeKind::DeviceSink)
                .map(|n| n.id)
                .collect()
        } else {
            srv.sources(&graph).iter().map(|d| d.node).collect()
        };
        let held = {
            let mut st = srv.lock();
            for n in targets {
                if p.suspend {
                    st.suspend_requests.insert((sink, n));
                } else {
                    st.suspend_requests.remove(&(sink, n));
                }
            }
            // Requests for devices that are gone no longer count.
            st.suspend_requests
                .retain(|(_, n)| graph.nodes.contains_key(n));
            !st.suspend_requests.is_empty()
        };
        let was = srv.engine.held();
        let suspended = srv.engine.hold(held).map_err(engine_err)?;
        if held && !suspended {
            tracing::warn!(
                "pulse: client {}: devices did not suspend in time; they will at the end of the running cycle",
                self.client
            );
        }
        if was != held {
            tracing::info!(
                "pulse: client {}: devices {} on request",
                self.client,
                if held { "suspended" } else { "resumed" }
            );
        }
        Ok(())
    }

    /// Suspends a module's sink or source (a null sink, a remap) on its own: it has no
    /// clock, so the engine stops it and the streams that only feed it or only read it,
    /// and the card plays on. A monitor follows its sink, as in PulseAudio.
    fn suspend_module_node(&self, dev: &Device, sink: bool, on: bool) -> Reply {
        if dev.monitor {
            tracing::info!(
                "pulse: client {}: {} is a monitor; it is suspended with its sink",
                self.client,
                dev.name
            );
            return Err(PulseError::NotSupported);
        }
        let changed = self
            .srv
            .engine
            .suspend_node(dev.node, on)
            .map_err(engine_err)?;
        if changed {
            tracing::info!(
                "pulse: client {}: {} {} {} on request",
                self.client,
                if sink { "sink" } else { "source" },
                dev.name,
                if on { "suspended" } else { "resumed" }
            );
            if sink {
                // Its monitor's state changed with it.
                self.srv.broadcast(Fac::Source, Ev::Changed, dev.index);
            }
            self.srv.post_all(ConnMsg::NodeSuspended(dev.node, on));
        }
        Ok(())
    }

    /// Tells this client's streams on the sink or source `node` (every stream: `None`,
    /// the devices) that it was suspended or resumed (PLAYBACK/RECORD_STREAM_SUSPENDED,
    /// what `pacat -v` prints as "Stream device suspended.").
    fn tell_suspended(&mut self, node: Option<NodeId>, on: bool) {
        let graph = self.srv.engine.graph();
        let on_node = |stream: NodeId| node.is_none() || stream_target(&graph, stream) == node;
        let play: Vec<u32> = (self.playback.values())
            .filter(|p| on_node(p.node))
            .map(|p| p.channel)
            .collect();
        let rec: Vec<u32> = (self.record.values())
            .filter(|r| on_node(r.node))
            .map(|r| r.channel)
            .collect();
        let params = |stream_index| pa::StreamSuspendedParams {
            stream_index,
            suspended: on,
        };
        for channel in play {
            self.out()
                .command(&Command::PlaybackStreamSuspended(params(channel)));
        }
        for channel in rec {
            self.out()
                .command(&Command::RecordStreamSuspended(params(channel)));
        }
    }

    /// Whether the sink or source on `node` is suspended: all devices held, or that
    /// node on its own.
    fn is_suspended(&self, graph: &Graph, node: NodeId) -> bool {
        self.srv.engine.held() || graph.nodes.get(&node).is_some_and(|n| n.suspended)
    }

    fn move_stream(
        &self,
        index: Option<u32>,
        dev_index: Option<u32>,
        dev_name: Option<std::ffi::CString>,
        playback: bool,
    ) -> Reply {
        let srv = &self.srv;
        let index = index.ok_or(PulseError::Invalid)?;
        let graph = srv.engine.graph();
        let name = dev_name.as_ref().and_then(|n| n.to_str().ok());
        let dev = if playback {
            srv.find_sink(&graph, dev_index, name)
        } else {
            srv.find_source(&graph, dev_index, name)
        }
        .ok_or(PulseError::NoEntity)?;
        srv.move_stream(&graph, index, &dev, playback)?;
        if let Some(s) = srv.lock().streams.get_mut(&index) {
            s.follows_default = false;
            s.pinned = false;
        }
        srv.remember(index, |e, _| e.device = Some(dev.name.clone()));
        Ok(())
    }

    fn send_moved(&mut self, node: NodeId) {
        let graph = self.srv.engine.graph();
        if let Some(p) = self.playback.values().find(|p| p.node == node) {
            let Some(sink) = stream_target(&graph, node) else {
                return;
            };
            let cmd = Command::PlaybackStreamMoved(PlaybackStreamMovedParams {
                stream_index: p.channel,
                device_index: sink,
                device_name: cstr(&graph.nodes[&sink].name),
                device_suspended: self.is_suspended(&graph, sink),
                buffer_attr: p.attr,
                configured_sink_latency: p.configured_usec,
            });
            self.out().command(&cmd);
        } else if let Some(r) = self.record.values().find(|r| r.node == node) {
            let Some(src) = record_source_index(&graph, node) else {
                return;
            };
            let Some(dev) = self.srv.source_by_index(&graph, src) else {
                return;
            };
            let cmd = Command::RecordStreamMoved(RecordStreamMovedParams {
                stream_index: r.channel,
                device_index: dev.index,
                device_name: cstr(&dev.name),
                device_suspended: self.is_suspended(&graph, dev.node),
                buffer_attr: r.attr,
                configured_source_latency: r.configured_usec,
            });
            self.out().command(&cmd);
        }
    }

    fn kill_stream(&mut self, node: NodeId) {
        if let Some(ch) = self
            .playback
            .iter()
            .find(|(_, p)| p.node == node)
            .map(|(c, _)| *c)
        {
            self.playback.remove(&ch);
            self.drop_stream(node);
            self.out().command(&Command::PlaybackStreamKilled(ch));
        } else if let Some(ch) = self
            .record
            .iter()
            .find(|(_, r)| r.node == node)
            .map(|(c, _)| *c)
        {
            self.record.remove(&ch);
            self.drop_stream(node);
            self.out().command(&Command::RecordStreamKilled(ch));
        }
    }

    fn drop_stream(&self, node: NodeId) {
        if let Err(e) = self.srv.engine.remove_node(node) {
            tracing::warn!("pulse: removing stream node {node}: {e}");
        }
        self.srv.lock().streams.remove(&node);
    }

    fn cleanup(&mut self) {
        self.reclaim_intake();
        if let Some(w) = &self.wire {
            w.close();
        }
        let nodes: Vec<NodeId> = self
            .playback
            .values()
            .map(|p| p.node)
            .chain(self.record.values().map(|r| r.node))
            .collect();
        self.playback.clear();
        self.record.clear();
        for n in &nodes {
            self.drop_stream(*n);
        }
        let name = self
            .srv
            .lock()
            .clients
            .remove(&self.client)
            .map(|c| c.name)
            .unwrap_or_default();
        self.srv.broadcast(Fac::Client, Ev::Removed, self.client);
        if self.shm_bytes > 0 {
            tracing::debug!(
                "pulse client {}: {} bytes of audio came by memfd",
                self.client,
                self.shm_bytes
            );
        }
        if let Some(p) = self.pool.as_ref().filter(|p| p.blocks > 0) {
            tracing::debug!(
                "pulse client {}: memfd pool carried {} blocks ({} bytes) of record audio; \
                 {} went inline while the client held every block; at most {} held at once",
                self.client,
                p.blocks,
                p.bytes,
                p.inline_full,
                p.peak_held
            );
        }
        if let Some(s) = self.srb.as_ref().filter(|s| s.active) {
            tracing::debug!(
                "pulse client {}: srbchannel carried {} bytes in, {} bytes out ({} requests written by the RT thread)",
                self.client,
                s.bytes_in,
                s.bytes_out(),
                self.wire.as_ref().map_or(0, |w| w.srb_sent())
            );
        }
        if nodes.is_empty() {
            tracing::debug!("pulse client {} ({name}) left", self.client);
        } else {
            tracing::info!(
                "pulse client {} ({name}) left; {} stream(s) removed",
                self.client,
                nodes.len()
            );
        }
    }

    /// What the engine grants for a device-latency request: the device latency of the
    /// quantum this stream alone would make, or the request itself where the device
    /// fills ahead that far.
    fn grant(&self) -> impl Fn(u64) -> u64 + use<> {
        let engine = self.srv.engine.clone();
        let rate = engine.rate();
        move |usec: u64| {
            let granted = engine.granted_latency(engine_frames(rate, usec) as usize);
            frames_to_usec(granted as u64, rate)
        }
    }

    fn stream_limit(&self) -> Reply {
        if self.playback.len() + self.record.len() + self.uploads.len()
            >= self.srv.opts.max_streams_per_client
        {
            return Err(PulseError::TooLarge);
        }
        Ok(())
    }

    /// Spec, codec and channel map of a new stream, from the spec or the format list.
    fn stream_format(
        &self,
        spec: SampleSpec,
        map: PaMap,
        formats: &[FormatInfo],
    ) -> Result<(SampleSpec, Codec, PaMap), PulseError> {
        let (spec, map) = if spec.format == SampleFormat::Invalid {
            let (s, m) = spec_from_formats(formats, self.srv.engine.rate())
                .ok_or(PulseError::NotSupported)?;
            (s, m.unwrap_or_else(PaMap::empty))
        } else {
            (spec, map)
        };
        let codec = check_spec(&spec).map_err(|why| {
            tracing::debug!("pulse client {}: {why}", self.client);
            PulseError::Invalid
        })?;
        let map = if map.num_channels() == 0 {
            default_pa_map(spec.channels)
        } else if map.num_channels() != spec.channels {
            return Err(PulseError::Invalid);
        } else {
            map
        };
        Ok((spec, codec, map))
    }

    /// A new stream's proplist: its own, plus the client's properties it does not set
    /// (PulseAudio merges them the same way, so e.g. pavucontrol recognises and hides
    /// its own meter streams by `application.id`).
    fn stream_props(&self, own: &Props) -> Props {
        let mut props = own.clone();
        if let Some(c) = self.srv.lock().clients.get(&self.client) {
            for (k, v) in c.props.iter() {
                if props.get_bytes(&**k).is_none() {
                    props.set_bytes(&**k, &**v);
                }
            }
        }
        props
    }

    fn client_name(&self) -> String {
        self.srv
            .lock()
            .clients
            .get(&self.client)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }

    fn create_playback(&mut self, seq: u32, p: PlaybackStreamParams) -> Reply {
        self.stream_limit()?;
        let srv = self.srv.clone();
        let (spec, codec, map) = self.stream_format(p.sample_spec, p.channel_map, &p.formats)?;
        let graph = srv.engine.graph();
        let props = self.stream_props(&p.props);
        let restored = srv.restore_for(&props, true);
        let restored_sink = match (p.sink_index, p.sink_name.as_ref(), &restored) {
            (None, None, Some(e)) => e.device.as_ref().and_then(|d| srv.sink_by_name(&graph, d)),
            _ => None,
        };
        let sink = match (p.sink_index, p.sink_name.as_ref()) {
            _ if restored_sink.is_some() => restored_sink.clone(),
            (None, None) => srv.default_sink(&graph),
            (i, n) => srv.find_sink(&graph, i, n.and_then(|n| n.to_str().ok())),
        }
        .ok_or(PulseError::NoEntity)?;
        let sink_node = &graph.nodes[&sink.node];
        let node_map = quaver_dsp::ChannelMap(
            sink_node
                .inputs
                .iter()
                .map(|id| graph.ports[id].channel)
                .collect(),
        );
        let mode = LatencyMode {
            adjust_latency: p.flags.adjust_latency,
            early_requests: p.flags.early_requests,
        };
        let fixed = bufattr::fix_playback(&p.buffer_attr, &spec, mode, self.grant());
        let attr = fixed.attr;
        let fs = frame_size(&spec);
        let ch = spec.channels as usize;
        let rate = srv.engine.rate();
        let cfg = srv.engine.config().clone();
        let tlength_frames = attr.target_length as usize / fs;
        let minreq_frames = attr.minimum_request_length as usize / fs;
        // A cycle at the largest quantum must fit in the ring, at any rate the stream
        // may move to.
        let top_rate = highest_rate(p.flags.variable_rate, spec.sample_rate);
        let quantum_frames =
            (cfg.quantum_max as u64 * top_rate as u64).div_ceil(rate as u64) as usize;
        let ring_frames = (tlength_frames + minreq_frames + quantum_frames)
            .max(1024)
            .next_power_of_two();
        let (producer, consumer) = rtrb::RingBuffer::new(ring_frames * ch);
        let corked = p.flags.start_corked;
        let shared = Arc::new(PlayShared::new(
            self.handle.bell.clone(),
            attr.pre_buffering / fs as u32,
            corked,
        ));
        let wire = self.rt_wire();
        // The channel this stream is about to get (assigned below, once it exists).
        let intake = wire
            .as_ref()
            .map(|_| self.intake.get_or_insert_default().clone());
        let source = PlaySource::new(shared.clone(), consumer, ch)
            .with_wire(wire)
            .with_intake(intake, self.next_channel);
        let format = StreamFormat {
            rate: spec.sample_rate,
            channels: map_from_pa(&map),
        };
        let adapter = PlaybackAdapter::new(
            source,
            &format,
            &node_map,
            rate,
            cfg.quantum_max,
            0,
            srv.opts.resample_quality,
        )
        .and_then(|a| {
            if p.flags.variable_rate {
                a.variable_rate(srv.opts.resample_quality)
            } else {
                Ok(a)
            }
        })
        .map(|a| a.with_rewind(srv.engine.rewind_capacity(), node_map.len()))
        .map_err(|e| {
            tracing::warn!("pulse: cannot resample {} Hz: {e}", spec.sample_rate);
            PulseError::NotSupported
        })?;
        let client_name = self.client_name();
        let mut nspec = NodeSpec::new(
            &node_name(&p.props, &client_name, true),
            NodeKind::PlaybackStream,
        );
        nspec.description = format!("PulseAudio stream of {client_name}");
        nspec.outputs = node_map;
        nspec.latency_frames = Some(engine_frames(rate, fixed.sink_request_usec));
        let cvolume = stream_volume(p.cvolume, restored.as_ref(), &map, ch);
        nspec.volume = cvolume_to_linear(&cvolume);
        let node = srv
            .engine
            .add_node_linked(nspec, Some(Box::new(adapter)), Some(&sink.name))
            .map_err(engine_err)?;
        if p.flags
            .start_muted
            .or_else(|| restored.as_ref().and_then(|e| e.mute))
            == Some(true)
        {
            let _ = srv.engine.set_volume(&node.to_string(), None, Some(true));
        }
        let channel = self.next_channel;
        self.next_channel += 1;
        srv.lock().streams.insert(
            node,
            StreamRec {
                client: self.client,
                spec,
                map,
                props,
                cvolume,
                corked,
                follows_default: restored_sink.is_none()
                    && p.sink_index.is_none()
                    && p.sink_name
                        .as_ref()
                        .is_none_or(|n| n.as_bytes() == b"@DEFAULT_SINK@"),
                pinned: p.sink_index.is_some() || p.sink_name.is_some(),
                monitors: None,
                io: StreamIo::Play(shared.clone()),
            },
        );
        tracing::info!(
            "pulse client {}: playback {node} {:?} {} ch {:?} {} Hz → {} (tlength {} ms, minreq {} ms, prebuf {} ms, device {} ms)",
            self.client,
            spec.format,
            spec.channels,
            map,
            spec.sample_rate,
            sink.name,
            bytes_to_usec(attr.target_length as u64, &spec) / 1000,
            bytes_to_usec(attr.minimum_request_length as u64, &spec) / 1000,
            bytes_to_usec(attr.pre_buffering as u64, &spec) / 1000,
            fixed.configured_sink_usec / 1000,
        );
        let requested = attr.target_length;
        self.playback.insert(
            channel,
            Playback {
                node,
                channel,
                spec,
                codec,
                fs,
                ch,
                attr,
                configured_usec: fixed.configured_sink_usec,
                shared,
                ring: Some(producer),
                ring_frames,
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
                variable_rate: p.flags.variable_rate.then_some(spec.sample_rate),
                asked: requested as i64,
                last_request: None,
                last_data: None,
                armed_wake: 0,
                rt_requests: self.wire.is_some(),
                armed: false,
                requests: 0,
                rt_sent: 0,
                rt_blocks: 0,
                rt_answers: 0,
                lease_scratch: Vec::new(),
            },
        );
        let reply = CreatePlaybackStreamReply {
            channel,
            stream_index: node,
            requested_bytes: requested,
            buffer_attr: attr,
            sample_spec: spec,
            channel_map: map,
            stream_latency: fixed.configured_sink_usec,
            sink_index: sink.index,
            sink_name: Some(cstr(&sink.name)),
            suspended: self.is_suspended(&graph, sink.node),
            format: FormatInfo::new(FormatEncoding::Pcm),
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    fn load_module(&self, p: &pa::LoadModuleParams) -> Result<u32, PulseError> {
        let srv = &self.srv;
        let name = p.name.to_str().map_err(|_| PulseError::Invalid)?;
        let argument = p
            .arguments
            .as_ref()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        crate::modules::load_indexed(srv, name, &argument)
    }

    fn unload_module(&self, idx: u32) -> Reply {
        let srv = &self.srv;
        let m = srv
            .lock()
            .modules
            .remove(&idx)
            .ok_or(PulseError::NoEntity)?;
        crate::modules::unload(srv, &m);
        srv.broadcast(Fac::Module, Ev::Removed, idx);
        tracing::info!("pulse: unloaded module #{idx} ({})", m.name);
        Ok(())
    }

    fn create_upload(&mut self, seq: u32, p: pa::UploadStreamParams) -> Reply {
        self.stream_limit()?;
        let codec = check_spec(&p.sample_spec).map_err(|_| PulseError::Invalid)?;
        if p.channel_map.num_channels() != p.sample_spec.channels {
            return Err(PulseError::Invalid);
        }
        let fs = frame_size(&p.sample_spec) as u32;
        if p.length == 0 || !p.length.is_multiple_of(fs) {
            return Err(PulseError::Invalid);
        }
        if p.length > crate::scache::MAX_SAMPLE_BYTES {
            return Err(PulseError::TooLarge);
        }
        let name = p
            .media_name
            .as_ref()
            .and_then(|n| n.to_str().ok().map(str::to_string))
            .or_else(|| prop_str(&p.props, Prop::EventId))
            .or_else(|| prop_str(&p.props, Prop::MediaName))
            .filter(|n| !n.is_empty() && n.len() <= 128)
            .ok_or(PulseError::Invalid)?;
        let channel = self.next_channel;
        self.next_channel += 1;
        self.uploads.insert(
            channel,
            Upload {
                name,
                spec: p.sample_spec,
                codec,
                map: p.channel_map,
                props: p.props.clone(),
                length: p.length as usize,
                data: Vec::new(),
            },
        );
        let reply = pa::CreateUploadStreamReply {
            channel,
            length: p.length,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    fn finish_upload(&self, mut u: Upload) {
        // A short upload is padded with silence, as PulseAudio stores the whole block.
        u.data.resize(u.length, 0);
        let mut data = vec![0f32; u.length / u.codec.bytes()];
        u.codec.decode(&u.data, &mut data);
        let sample = crate::scache::Sample {
            name: u.name.clone(),
            spec: u.spec,
            map: u.map,
            props: u.props,
            data: Arc::new(data),
            bytes: u.length as u32,
        };
        let mut st = self.srv.lock();
        let existing = st
            .samples
            .iter()
            .find(|(_, s)| s.name == u.name)
            .map(|(&i, _)| i);
        let (idx, ev) = match existing {
            Some(i) => (i, Ev::Changed),
            None => {
                let i = st.next_sample;
                st.next_sample += 1;
                (i, Ev::New)
            }
        };
        st.samples.insert(idx, sample);
        drop(st);
        tracing::info!("pulse: sample {} cached as #{idx}", u.name);
        self.srv.broadcast(Fac::SampleCache, ev, idx);
    }

    /// What a record stream taps: the sink input it monitors, else the device it names,
    /// else the one stream restore remembers (`restored`, if it exists), else the default.
    fn record_target(
        &self,
        p: &RecordStreamParams,
        restored: Option<&str>,
    ) -> Result<(Target, Device), PulseError> {
        let srv = &self.srv;
        let graph = srv.engine.graph();
        if let Some(input) = p.direct_on_input_index {
            // A single sink input's monitor: tap that stream's node.
            let n = graph
                .nodes
                .get(&input)
                .filter(|n| n.kind == NodeKind::PlaybackStream)
                .ok_or(PulseError::NoEntity)?;
            let sink = stream_target(&graph, input)
                .and_then(|s| srv.monitor_of(&graph, s))
                .ok_or(PulseError::NoEntity)?;
            return Ok((
                Target {
                    node: n.id,
                    name: n.name.clone(),
                    dev_index: sink.index,
                    dev_name: sink.name.clone(),
                },
                sink,
            ));
        }
        let dev = match (p.source_index, p.source_name.as_ref()) {
            (None, None) => restored
                .and_then(|d| srv.source_by_name(&graph, d))
                .or_else(|| srv.default_source(&graph)),
            (i, n) => srv.find_source(&graph, i, n.and_then(|n| n.to_str().ok())),
        }
        .ok_or(PulseError::NoEntity)?;
        let node = &graph.nodes[&dev.node];
        Ok((
            Target {
                node: node.id,
                name: node.name.clone(),
                dev_index: dev.index,
                dev_name: dev.name.clone(),
            },
            dev,
        ))
    }

    fn create_record(&mut self, seq: u32, p: RecordStreamParams) -> Reply {
        self.stream_limit()?;
        let srv = self.srv.clone();
        let (spec, codec, map) = self.stream_format(p.sample_spec, p.channel_map, &p.formats)?;
        let props = self.stream_props(&p.props);
        // Meters (peak detection, one sink input's monitor) are not the user's streams.
        let restored = if p.direct_on_input_index.is_none() && !p.flags.peak_detect {
            srv.restore_for(&props, false)
        } else {
            None
        };
        let (target, dev) =
            self.record_target(&p, restored.as_ref().and_then(|e| e.device.as_deref()))?;
        let restored_dev = p.source_index.is_none()
            && p.source_name.is_none()
            && restored
                .as_ref()
                .and_then(|e| e.device.as_deref())
                .is_some_and(|d| d == dev.name);
        let graph = srv.engine.graph();
        let tnode = graph.nodes.get(&target.node).ok_or(PulseError::NoEntity)?;
        let node_map = quaver_dsp::ChannelMap(
            tnode
                .outputs
                .iter()
                .map(|id| graph.ports[id].channel)
                .collect(),
        );
        if node_map.is_empty() {
            return Err(PulseError::NoEntity);
        }
        let mode = LatencyMode {
            adjust_latency: p.flags.adjust_latency,
            early_requests: p.flags.early_requests,
        };
        let fixed = bufattr::fix_record(&p.buffer_attr, &spec, mode, self.grant());
        let fs = frame_size(&spec);
        let ch = spec.channels as usize;
        let rate = srv.engine.rate();
        let cfg = srv.engine.config().clone();
        // A peak-detecting stream below the engine rate records at the engine rate and
        // decimates to peaks on the connection thread.
        let decim = if p.flags.peak_detect && spec.sample_rate < rate {
            (rate / spec.sample_rate) as usize
        } else {
            1
        };
        let ring_rate = if decim > 1 { rate } else { spec.sample_rate };
        // A cycle at the largest quantum must fit in the ring, at any rate the stream
        // may move to (a peak-detecting one never moves).
        let top_rate = highest_rate(p.flags.variable_rate && !p.flags.peak_detect, ring_rate);
        let quantum_frames =
            (cfg.quantum_max as u64 * top_rate as u64).div_ceil(rate as u64) as usize;
        let frag = (fixed.attr.fragment_size as usize / fs).max(1) * decim;
        let ring_frames = (2 * frag.min(ring_rate as usize * 4) + 2 * quantum_frames)
            .max(4096)
            .next_power_of_two();
        let (producer, consumer) = rtrb::RingBuffer::new(ring_frames * ch);
        let corked = p.flags.start_corked;
        let shared = Arc::new(RecShared::new(self.handle.bell.clone(), corked));
        let sink = RecSink::new(shared.clone(), producer, ch);
        let format = StreamFormat {
            rate: ring_rate,
            channels: map_from_pa(&map),
        };
        let adapter = RecordAdapter::new(
            sink,
            &format,
            &node_map,
            rate,
            cfg.quantum_max,
            srv.opts.resample_quality,
        )
        .and_then(|a| {
            if p.flags.variable_rate {
                a.variable_rate(srv.opts.resample_quality)
            } else {
                Ok(a)
            }
        })
        .map_err(|e| {
            tracing::warn!("pulse: cannot resample {} Hz: {e}", spec.sample_rate);
            PulseError::NotSupported
        })?;
        let client_name = self.client_name();
        let mut nspec = NodeSpec::new(
            &node_name(&p.props, &client_name, false),
            NodeKind::RecordStream,
        );
        nspec.description = format!("PulseAudio record stream of {client_name}");
        nspec.inputs = node_map;
        nspec.latency_frames = fixed.source_request_usec.map(|u| engine_frames(rate, u));
        let cvolume = stream_volume(p.cvolume, restored.as_ref(), &map, ch);
        nspec.volume = cvolume_to_linear(&cvolume);
        let node = srv
            .engine
            .add_node_linked(nspec, Some(Box::new(adapter)), Some(&target.name))
            .map_err(engine_err)?;
        if p.flags
            .start_muted
            .or_else(|| restored.as_ref().and_then(|e| e.mute))
            == Some(true)
        {
            let _ = srv.engine.set_volume(&node.to_string(), None, Some(true));
        }
        let channel = self.next_channel;
        self.next_channel += 1;
        srv.lock().streams.insert(
            node,
            StreamRec {
                client: self.client,
                spec,
                map,
                props,
                cvolume,
                corked,
                pinned: p.direct_on_input_index.is_some()
                    || p.source_index.is_some()
                    || p.source_name.is_some(),
                monitors: p.direct_on_input_index.map(|_| target.node),
                follows_default: !restored_dev
                    && p.direct_on_input_index.is_none()
                    && p.source_index.is_none()
                    && p.source_name.as_ref().is_none_or(|n| {
                        n.as_bytes() == b"@DEFAULT_SOURCE@" || n.as_bytes() == b"@DEFAULT_MONITOR@"
                    }),
                io: StreamIo::Record(shared.clone()),
            },
        );
        let frag_frames =
            (record_wake_frames(&fixed, &spec, ring_frames) * decim).clamp(1, ring_frames / 2);
        tracing::info!(
            "pulse client {}: record {node} {:?} {} ch {} Hz ← {} (fragment {} ms)",
            self.client,
            spec.format,
            spec.channels,
            spec.sample_rate,
            target.dev_name,
            frames_to_usec(frag_frames as u64, ring_rate) / 1000,
        );
        shared.wake_at.store(frag_frames as u64, Release);
        self.record.insert(
            channel,
            Record {
                node,
                channel,
                spec,
                codec,
                fs,
                ch,
                attr: fixed.attr,
                configured_usec: fixed.configured_source_usec,
                shared,
                ring: consumer,
                frag_frames,
                sent: 0,
                scratch: Vec::new(),
                peak: (decim > 1).then(|| Peak {
                    decim,
                    acc: vec![0.0; ch],
                    count: 0,
                    out: Vec::new(),
                }),
                variable_rate: p.flags.variable_rate.then_some(spec.sample_rate),
            },
        );
        let reply = CreateRecordStreamReply {
            channel,
            stream_index: node,
            buffer_attr: fixed.attr,
            sample_spec: spec,
            channel_map: map,
            stream_latency: fixed.configured_source_usec,
            sink_index: target.dev_index,
            sink_name: Some(cstr(&dev.name)),
            suspended: self.is_suspended(&graph, target.node),
            format: FormatInfo::new(FormatEncoding::Pcm),
        };
        self.out().reply(seq, &reply);
        Ok(())
    }
}

fn random_u32() -> u32 {
    let mut rnd = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty());
    u32::from_ne_bytes(rnd)
}

/// Frames of record data to gather before sending: the fragment size with
/// ADJUST_LATENCY or EARLY_REQUESTS, else at most [`TRADITIONAL_RECORD_USEC`]; always
/// less than half the ring.
fn record_wake_frames(fixed: &bufattr::RecordAttr, spec: &SampleSpec, ring_frames: usize) -> usize {
    let fs = frame_size(spec).max(1);
    let mut frag = fixed.attr.fragment_size as usize / fs;
    if fixed.source_request_usec.is_none() {
        frag = frag.min(usec_to_bytes(TRADITIONAL_RECORD_USEC, spec) as usize / fs);
    }
    frag.clamp(1, (ring_frames / 2).max(1))
}

/// The message handlers quaverd has (PulseAudio's message API: `pactl send-message`,
/// `pactl list message-handlers`): object path and description.
const MESSAGE_HANDLERS: [(&str, &str); 1] = [("/core", "Core message handler")];

/// Answers SEND_OBJECT_MESSAGE for `path` as PulseAudio 16's handlers do: a JSON
/// response (`list-handlers`: an array of `{"name", "description"}` objects, which
/// pactl parses), NOENTITY for an object without a handler, NOTIMPLEMENTED for a message
/// it does not know.
fn object_message(path: &str, message: &str) -> Result<String, PulseError> {
    if !MESSAGE_HANDLERS.iter().any(|(p, _)| *p == path) {
        return Err(PulseError::NoEntity);
    }
    match message {
        "list-handlers" => {
            // Fields in PulseAudio's order (a struct keeps it; a JSON map would sort).
            #[derive(serde::Serialize)]
            struct Handler<'a> {
                name: &'a str,
                description: &'a str,
            }
            let list: Vec<Handler<'_>> = MESSAGE_HANDLERS
                .iter()
                .map(|&(name, description)| Handler { name, description })
                .collect();
            serde_json::to_string(&list).map_err(|_| PulseError::Internal)
        }
        _ => Err(PulseError::NotImplemented),
    }
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

#[cfg(test)]
mod request_tests {
    use super::*;
    use crate::rtwire::request_packet;
    use crate::transport::Bell;

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
            now.saturating_sub(crate::transport::LATE_HOLD_NS + 1),
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
