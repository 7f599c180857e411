//! The RT half of PulseAudio streams never allocates: the engine's adapters over
//! `PlaySource` and `RecSink` run thousands of cycles — resampling, channel mixing,
//! prebuffering, underruns, cork, flush, trigger, drain, a full record ring — under an
//! allocation guard, while the "connection" side feeds and drains the rings outside it.
//! The playback stream also sends its armed requests to a client itself: on its socket,
//! or into the srbchannel's ring (which nobody reads here, so it also fills up); and
//! with the intake lent, it takes the client's blocks out of the srbchannel itself and
//! answers the latency queries among them.

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use quaver_dsp::resample::ResampleQuality;
use quaver_dsp::{ChannelMap, PlanarBuf};
use quaver_engine::stream::{PlaybackAdapter, RecordAdapter, StreamFormat};
use quaver_engine::{CycleInfo, Processor};
use quaver_pulse::intake::{Lease, RtIntake, Taken};
use quaver_pulse::rtwire::{Periods, REQUEST_LEN, RtWire};
use quaver_pulse::transport::{
    Bell, F_CORKED, F_DRAIN, F_PREBUF, F_TRIGGER, PlayShared, PlaySource, RecShared, RecSink,
};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

#[test]
fn pulse_stream_transport_allocates_nothing_in_the_cycle() {
    transport_cycles(false, false);
}

#[test]
fn pulse_stream_transport_allocates_nothing_in_the_cycle_with_the_srbchannel() {
    transport_cycles(true, false);
}

#[test]
fn pulse_stream_transport_allocates_nothing_in_the_cycle_taking_blocks_in_itself() {
    transport_cycles(true, true);
}

/// A memfd block frame for channel 1: `len` bytes at `index` of pool 9.
fn block_frame(id: u32, index: u32, len: u32) -> Vec<u8> {
    let mut f = Vec::new();
    for w in [16, 1, 0, 0, 0x8000_0000 | 0x2000_0000, id, 9, index, len] {
        f.extend_from_slice(&u32::to_be_bytes(w));
    }
    f
}

/// GET_PLAYBACK_LATENCY for channel 1, as libpulse writes it.
fn latency_query(tag: u32) -> Vec<u8> {
    use quaver_pulse::pulseaudio::protocol::{self as pa, Command, LatencyParams};
    let mut b = Vec::new();
    let params = LatencyParams {
        channel: 1,
        now: std::time::SystemTime::now(),
    };
    pa::write_command_message(
        &mut b,
        tag,
        &Command::GetPlaybackLatency(params),
        pa::MAX_VERSION,
    )
    .unwrap();
    b
}

fn transport_cycles(srbchannel: bool, intake: bool) {
    let bell = Arc::new(Bell::new().unwrap());
    let rate = 48000;
    let max_q = 1024;
    // Playback: mono 44.1 kHz into a stereo node (mixing + resampling).
    let play = Arc::new(PlayShared::new(bell.clone(), 2048, false));
    // Answers are timed (and found late when the client is starved below).
    play.late_after_ns.store(1_000_000, Relaxed);
    let (tx, rx) = rtrb::RingBuffer::new(16384);
    let mut tx = Some(tx);
    let (ours, mut client) = std::os::unix::net::UnixStream::pair().unwrap();
    client.set_nonblocking(true).unwrap();
    let wire = Arc::new(RtWire::new(&ours).unwrap());
    let srb = quaver_pulse::srb::Srb::new(1, 1).unwrap();
    if srbchannel {
        wire.use_srb(srb.out());
    }
    let mut requests = 0usize;
    // The client's pool: a sine in s16le mono.
    let pool: Vec<u8> = (0..32 * 1024)
        .flat_map(|k| ((8000.0 * (k as f32 * 0.05).sin()) as i16).to_le_bytes())
        .collect();
    let ik = Arc::new(RtIntake::default());
    let (mut client_at, mut blocks, mut pushed, mut ring_at) = (0usize, 0u64, 0u64, 0usize);
    let mut answered = 0u64;
    let lend = |ik: &RtIntake, producer: rtrb::Producer<f32>, pushed: u64, rd: usize| {
        ik.lend(Lease {
            srb: srb.out(),
            rd,
            pool: pool.as_ptr(),
            pool_len: pool.len(),
            shm_id: 9,
            channel: 1,
            frame_bytes: 2,
            channels: 1,
            codec: quaver_pulse::convert::Codec::of(
                quaver_pulse::pulseaudio::protocol::SampleFormat::S16Le,
            )
            .unwrap(),
            max_frames: 16384,
            rate: 44100,
            write_index: 0,
            producer,
            pushed,
            scratch: vec![0; 64 * 1024],
            taken: Taken::holding(&[]),
        })
    };
    if intake {
        lend(&ik, tx.take().unwrap(), 0, 0);
    }
    let mut got = vec![0u8; 64 * 1024];
    let mut player = PlaybackAdapter::new(
        PlaySource::new(play.clone(), rx, 1)
            .with_wire(Some(wire.clone()))
            .with_intake(Some(ik.clone()), 1),
        &StreamFormat {
            rate: 44100,
            channels: ChannelMap::mono(),
        },
        &ChannelMap::stereo(),
        rate,
        max_q,
        0,
        ResampleQuality::Medium,
    )
    .and_then(|a| a.variable_rate(ResampleQuality::Medium))
    .unwrap();
    // Record: stereo node into a 5.1 stream at 96 kHz, with a small ring that overflows.
    let rec = Arc::new(RecShared::new(bell.clone(), false));
    let (rtx, mut rrx) = rtrb::RingBuffer::new(6 * 4096);
    let five_one: ChannelMap = "5.1".parse().unwrap();
    let mut recorder = RecordAdapter::new(
        RecSink::new(rec.clone(), rtx, 6),
        &StreamFormat {
            rate: 96000,
            channels: five_one,
        },
        &ChannelMap::stereo(),
        rate,
        max_q,
        ResampleQuality::Fast,
    )
    .and_then(|a| a.variable_rate(ResampleQuality::Fast))
    .unwrap();
    let mut outputs = PlanarBuf::new(2, max_q);
    let mut nothing = PlanarBuf::new(0, max_q);
    let mut phase = 0f32;
    reset_violation_count();
    for cycle in 0..12_000u64 {
        // Connection side (may allocate): feed, flip flags, drain the record ring.
        // Starved now and then (every 7th cycle, and cycles 800–899 of each thousand), so
        // the stream underruns, prebuffers again and restarts.
        let feed = cycle % 7 != 0 && !(800..900).contains(&(cycle % 1000));
        if feed && intake {
            // The client writes a block reference into its ring, keeping a few there
            // (so the stream still starves when it stops).
            let index = (cycle as u32 * 1400) % (pool.len() as u32 - 1400);
            let f = block_frame(cycle as u32, index, 1400);
            if srb.in_fill().is_some_and(|n| n < 4 * f.len()) {
                srb.client_write(&mut client_at, &f);
                // A player showing its position asks for the latency now and then.
                if cycle % 20 == 1 {
                    srb.client_write(&mut client_at, &latency_query(cycle as u32));
                }
            }
        }
        if let Some(tx) = tx.as_mut().filter(|_| feed) {
            let n = tx.slots().min(700);
            if let Ok(mut c) = tx.write_chunk(n) {
                let (a, b) = c.as_mut_slices();
                for s in a.iter_mut().chain(b.iter_mut()) {
                    phase = (phase + 0.05) % std::f32::consts::TAU;
                    *s = 0.3 * phase.sin();
                }
                c.commit_all();
            }
        }
        match cycle % 1000 {
            100 => play.set_flag(F_CORKED, true),
            150 => play.set_flag(F_CORKED, false),
            300 => play
                .flush_to
                .store(play.removed.load(Relaxed) + 3000, Relaxed),
            400 => play.set_flag(F_PREBUF, true),
            450 => play.set_flag(F_TRIGGER, true),
            600 => play.set_flag(F_DRAIN, true),
            700 => play.set_flag(F_DRAIN, false),
            // Variable-rate streams change rate (UPDATE_*_SAMPLE_RATE) mid-stream.
            750 => {
                play.rate.store(46000, Relaxed);
                rec.rate.store(90000, Relaxed);
            }
            950 => {
                play.rate.store(44100, Relaxed);
                rec.rate.store(96000, Relaxed);
            }
            _ => {}
        }
        play.wake_at
            .store(play.consumed.load(Relaxed) + 100, Relaxed);
        // Every fifth cycle a pass of the connection thread: take back the last armed
        // request, arm the next, read what reached the client.
        if cycle % 5 == 0 {
            play.request.disarm();
            bell.take();
            let consumed = play.consumed.load(Relaxed);
            play.request.arm(
                1,
                consumed + 100,
                consumed,
                0,
                4,
                if intake {
                    Periods {
                        normal: 100,
                        late: 20,
                    }
                } else {
                    Periods::NONE
                },
            );
            // Take the intake back (the releases "sent") and lend it again.
            if let Some(l) = ik.reclaim() {
                blocks += l.taken.blocks;
                answered += l.taken.answered;
                pushed = l.pushed;
                ring_at = l.rd;
                lend(&ik, l.producer, pushed, ring_at);
            }
            while let Ok(n) = client.read(&mut got) {
                if n == 0 {
                    break;
                }
                requests += n;
            }
        }
        // The recorder stops reading for a while, so its ring overflows.
        if cycle % 3 == 0 && !(500..560).contains(&(cycle % 1000)) {
            let n = rrx.slots();
            if let Ok(c) = rrx.read_chunk(n) {
                c.commit_all();
            }
        }
        rec.wake_at.store(rec.produced.load(Relaxed) + 500, Relaxed);
        let q = [64usize, 128, 256, 1024][(cycle % 4) as usize];
        let cx = CycleInfo {
            frames: q,
            rate,
            cycle,
            time_ns: cycle * 1_000_000,
            playback_delay: 256,
            capture_delay: 128,
            ..CycleInfo::default()
        };
        // RT side: must not allocate.
        assert_no_alloc(|| {
            player.process(&cx, nothing.view(q), &mut outputs.view_mut(q));
            recorder.process(&cx, outputs.view(q), &mut nothing.view_mut(q));
        });
    }
    assert!(
        play.starts.load(Relaxed) >= 2,
        "the stream started and restarted"
    );
    assert!(
        rec.overflows.load(Relaxed) >= 1,
        "the record ring overflowed"
    );
    if intake {
        // Blocks went in until the ring of requests filled up and the client's ring
        // with it (nobody plays the client here), all of them through the RT side.
        let l = ik.reclaim().expect("lent");
        blocks += l.taken.blocks;
        answered += l.taken.answered;
        assert!(blocks >= 100, "the RT side took blocks in: {blocks}");
        assert!(answered >= 5, "the RT side answered queries: {answered}");
        assert!(l.pushed >= pushed && ring_at < srb.out().capacity());
    } else if srbchannel {
        // Half the block is our ring: it fills up (~800 requests), and the rest found it
        // full and rang the bell instead, also without allocating.
        assert!(requests == 0, "nothing on the socket: {requests} bytes");
        let sent = wire.srb_sent() as usize;
        assert!(
            sent * REQUEST_LEN > quaver_pulse::srb::BLOCK_SIZE / 2 - 2 * REQUEST_LEN,
            "the RT side filled the ring with requests: {sent}"
        );
    } else {
        assert!(
            requests >= REQUEST_LEN * 100 && requests.is_multiple_of(REQUEST_LEN),
            "the RT side sent requests: {requests} bytes"
        );
    }
    assert_eq!(violation_count(), 0, "allocations in the RT path");
}

#[test]
fn a_pipe_sinks_tap_allocates_nothing_in_the_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let codec =
        quaver_pulse::convert::Codec::of(quaver_pulse::pulseaudio::protocol::SampleFormat::S16Le)
            .unwrap();
    let (out, mut tap) = quaver_pulse::pipe::PipeOut::start(&fifo, codec, 2, 48000).unwrap();
    // Nobody reads the FIFO: it fills, then the ring does, and the tap drops.
    taps_cycles_under_guard(&mut tap, |_| {});
    drop(tap);
    out.stop();
    let (written, lost) = out.counts();
    assert!(written > 0 && lost > 0, "written {written}, lost {lost}");
    assert!(!fifo.exists());
}

#[test]
fn a_tunnel_sinks_tap_allocates_nothing_in_the_cycle() {
    let bell = Arc::new(quaver_pulse::transport::Bell::new().unwrap());
    let (mut tap, mut rx) =
        quaver_pulse::modules::tunnel::tap_for_alloc_guard(2, 4096, 48000, bell.clone());
    // The network thread takes half the cycles' audio: the ring fills, then the tap
    // drops, and rings the network thread all along.
    taps_cycles_under_guard(tap.as_mut(), |cycle| {
        if cycle % 2 == 0
            && let Ok(chunk) = rx.read_chunk(rx.slots().min(512))
        {
            chunk.commit_all();
        }
    });
    assert!(
        bell.written_at_ns() > 0,
        "the tap never rang the network thread"
    );
}

/// Runs `tap` for 2000 cycles of 256 stereo frames, each under the allocation guard,
/// with `between` after each (outside it); fails on any allocation.
fn taps_cycles_under_guard(tap: &mut dyn Processor, mut between: impl FnMut(u64)) {
    let mut input = PlanarBuf::new(2, 256);
    for c in 0..2 {
        input.view_mut(256).channel_mut(c).fill(0.25);
    }
    let mut nothing = PlanarBuf::new(0, 256);
    reset_violation_count();
    for cycle in 0..2000u64 {
        let cx = CycleInfo {
            frames: 256,
            rate: 48000,
            cycle,
            ..CycleInfo::default()
        };
        let inputs = input.view(256);
        let mut outs = nothing.view_mut(256);
        assert_no_alloc(|| tap.process(&cx, inputs, &mut outs));
        between(cycle);
    }
    assert_eq!(violation_count(), 0, "allocations in the RT path");
}
