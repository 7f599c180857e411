//! PulseAudio stream semantics checked packet by packet with a bare protocol client:
//! requests, cork, STARTED, drain timing, underflow and latency indexes. Needs no tools.

mod pulse_util;

use pulse_util::*;
use quaver_pulse::pulseaudio::protocol::{
    self as pa, ChannelMap, ChannelVolume, Command, CorkStreamParams, LatencyParams,
    PlaybackStreamParams, SampleFormat, SampleSpec, stream::BufferAttr,
};
use quaver_testkit::*;
use std::time::{Duration, Instant, SystemTime};

fn s16(n_bytes: usize, seed: u64) -> Vec<u8> {
    noise_s16(n_bytes / 2, seed, 10000)
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect()
}

#[test]
fn playback_requests_cork_started_drain_underflow_and_latency() {
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::ready(&d, "flow");
    let tlength = 9600u32; // 50 ms of s16 stereo at 48 kHz
    let seq = c.send(&Command::CreatePlaybackStream(PlaybackStreamParams {
        sample_spec: SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 48000,
        },
        channel_map: ChannelMap::stereo(),
        buffer_attr: BufferAttr {
            target_length: tlength,
            ..BufferAttr::default()
        },
        cvolume: Some(ChannelVolume::norm(2)),
        flags: pa::stream::StreamFlags {
            start_corked: true,
            ..Default::default()
        },
        ..Default::default()
    }));
    let p = c.reply_to(seq, |_| {}).expect("stream created");
    let reply: pa::CreatePlaybackStreamReply = c.decode(&p);
    assert_eq!(reply.buffer_attr.target_length, tlength);
    assert_eq!(
        reply.requested_bytes, tlength,
        "the server asks for tlength first"
    );
    let ch = reply.channel;
    let mut requested = reply.requested_bytes as usize;
    let mut written = 0usize;
    let mut started = 0;
    let mut underflows = 0;
    let total = 48000 * 4; // one second
    let chunk = s16(requested, 1);
    c.write_audio(ch, &chunk);
    written += chunk.len();
    requested -= chunk.len();

    // Corked: nothing plays, nothing is consumed.
    std::thread::sleep(Duration::from_millis(200));
    let seq = c.send(&Command::GetPlaybackLatency(LatencyParams {
        channel: ch,
        now: SystemTime::now(),
    }));
    let p = c
        .reply_to(seq, |m| panic!("unexpected while corked: {m:?}"))
        .unwrap();
    let lat: pa::PlaybackLatency = c.decode(&p);
    assert_eq!(lat.write_offset, written as i64);
    assert_eq!(lat.read_offset, 0);
    assert!(!lat.playing);

    let seq = c.send(&Command::CorkPlaybackStream(CorkStreamParams {
        channel: ch,
        cork: false,
    }));
    let t0 = Instant::now();
    let handle = |m: Msg, requested: &mut usize, started: &mut u32, underflows: &mut u32| {
        let Msg::Event(cmd) = m else {
            panic!("unexpected {m:?}")
        };
        match *cmd {
            Command::Request(r) => {
                assert_eq!(r.channel, ch);
                *requested += r.length as usize;
            }
            Command::Started(s) => {
                assert_eq!(s, ch);
                *started += 1;
            }
            Command::Underflow(u) => {
                assert_eq!(u.channel, ch);
                *underflows += 1;
            }
            _ => {}
        }
    };
    c.reply_to(seq, |m| {
        handle(m, &mut requested, &mut started, &mut underflows)
    })
    .unwrap();
    // Feed exactly what is requested until a second has been written.
    while written < total {
        while requested == 0 {
            let m = c.next();
            handle(m, &mut requested, &mut started, &mut underflows);
            assert!(t0.elapsed() < WAIT, "no REQUEST for more data");
        }
        let n = requested.min(total - written) / 4 * 4;
        c.write_audio(ch, &s16(n, written as u64 + 2));
        written += n;
        requested -= n;
    }
    let seq = c.send(&Command::DrainPlaybackStream(ch));
    c.reply_to(seq, |m| {
        handle(m, &mut requested, &mut started, &mut underflows)
    })
    .expect("drain acked");
    let drained = t0.elapsed();
    assert!(
        drained >= Duration::from_millis(950),
        "drain acked after {drained:?}, before a second of audio could play"
    );
    assert_eq!(started, 1, "one start");
    assert_eq!(underflows, 0, "a stream fed on request never underflows");
    let seq = c.send(&Command::GetPlaybackLatency(LatencyParams {
        channel: ch,
        now: SystemTime::now(),
    }));
    let p = c.reply_to(seq, |_| {}).unwrap();
    let lat: pa::PlaybackLatency = c.decode(&p);
    assert_eq!(lat.write_offset, written as i64);
    assert_eq!(lat.read_offset, written as i64, "everything was consumed");

    // A burst of prebuf or more, then nothing: it starts again and underflows once it
    // runs dry. (Less than prebuf would wait, as in PulseAudio.)
    c.write_audio(ch, &s16(reply.buffer_attr.pre_buffering as usize, 9));
    let t1 = Instant::now();
    while underflows == 0 {
        let m = c.next();
        handle(m, &mut requested, &mut started, &mut underflows);
        assert!(t1.elapsed() < WAIT, "no UNDERFLOW");
    }
    assert_eq!(started, 2);
    let seq = c.send(&Command::DeletePlaybackStream(ch));
    c.reply_to(seq, |_| {}).unwrap();
}

/// Blocks in a client's memfd pool: read (mapped when the pool can be sealed against
/// shrinking, as libpulse's can; else with pread), released, and hostile references
/// read as silence. A sealed pool cannot be truncated under the server's mapping.
#[test]
fn memfd_block_references_are_read_released_and_bounded() {
    for sealable in [false, true] {
        memfd_blocks(sealable);
    }
}

fn memfd_blocks(sealable: bool) {
    use rustix::fs::MemfdFlags;
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let mut d = pulse_util::start(&["--device", "file:out.wav"]);
    let mut c = RawClient::connect(&d);
    let auth: pa::AuthReply = c
        .request(&Command::Auth(pa::AuthParams {
            version: pa::MAX_VERSION,
            supports_shm: true,
            supports_memfd: true,
            cookie: vec![0; 256],
        }))
        .unwrap();
    assert!(
        auth.use_memfd && auth.use_shm,
        "memfd offered to a capable client"
    );
    let input = noise_s16(48000 * 2, 23, 20000);
    let bytes: Vec<u8> = input.iter().flat_map(|s| s.to_le_bytes()).collect();
    let flags = if sealable {
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING
    } else {
        MemfdFlags::CLOEXEC
    };
    let memfd = rustix::fs::memfd_create("pool", flags).unwrap();
    rustix::fs::ftruncate(&memfd, 4096 + bytes.len() as u64).unwrap();
    rustix::io::pwrite(&memfd, &bytes, 4096).unwrap();
    // REGISTER_MEMFD_SHMID (103), no reply, the fd rides along.
    let mut body = Vec::new();
    for (tag, v) in [(b'L', 103u32), (b'L', u32::MAX), (b'L', 5)] {
        body.push(tag);
        body.extend_from_slice(&v.to_be_bytes());
    }
    let mut packet = (body.len() as u32).to_be_bytes().to_vec();
    packet.extend_from_slice(&u32::MAX.to_be_bytes());
    packet.extend_from_slice(&[0; 12]);
    packet.extend_from_slice(&body);
    let fds = [rustix::fd::AsFd::as_fd(&memfd)];
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    assert!(anc.push(SendAncillaryMessage::ScmRights(&fds)));
    sendmsg(
        c.sock.get_ref(),
        &[std::io::IoSlice::new(&packet)],
        &mut anc,
        SendFlags::empty(),
    )
    .unwrap();
    let seq = c.send(&Command::CreatePlaybackStream(PlaybackStreamParams {
        sample_spec: SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 48000,
        },
        channel_map: ChannelMap::stereo(),
        cvolume: Some(ChannelVolume::norm(2)),
        ..Default::default()
    }));
    let p = c.reply_to(seq, |_| {}).unwrap();
    let reply: pa::CreatePlaybackStreamReply = c.decode(&p);
    let ch = reply.channel;
    let shm_ref = |block: u32, shm: u32, index: u32, len: u32| {
        let mut p = 16u32.to_be_bytes().to_vec();
        p.extend_from_slice(&ch.to_be_bytes());
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(&0xA000_0000u32.to_be_bytes()); // SHMDATA | MEMFD_BLOCK
        for v in [block, shm, index, len] {
            p.extend_from_slice(&v.to_be_bytes());
        }
        p
    };
    let block = 48000u32;
    for k in 0..4 {
        c.send_raw(&shm_ref(100 + k, 5, 4096 + k * block, block))
            .unwrap();
    }
    if sealable {
        // The server sealed the pool when it registered it (before the stream was
        // created): a truncation would pull pages from under its mapping.
        assert!(
            rustix::fs::ftruncate(&memfd, 0).is_err(),
            "a sealed pool cannot shrink"
        );
    }
    // Hostile references: an unknown pool and a range past the memfd's end read as
    // silence; nothing breaks.
    c.send_raw(&shm_ref(200, 99, 0, 4800)).unwrap();
    c.send_raw(&shm_ref(201, 5, 1 << 30, 4800)).unwrap();
    let seq = c.send(&Command::DrainPlaybackStream(ch));
    let mut released = Vec::new();
    c.reply_to(seq, |m| {
        if let Msg::ShmRelease(b) = m {
            released.push(b);
        }
    })
    .expect("drained");
    released.sort();
    assert_eq!(
        released,
        [100, 101, 102, 103, 200, 201],
        "every block released"
    );
    let out_path = d.path("out.wav");
    let log = d.stop();
    let how = if sealable {
        "sealed and mapped"
    } else {
        "read with pread"
    };
    assert!(
        log.lines()
            .any(|l| l.contains("memfd pool 5 registered") && l.contains(how)),
        "pool not {how}:\n{log}"
    );
    assert_contains_exactly(&read_wav_s16(&out_path).1, &input, how);
}

/// SET_PLAYBACK_STREAM_BUFFER_ATTR re-fixes the attributes with PulseAudio's rules and
/// moves the stream's latency request, so the quantum follows a client that asks for
/// lower latency after creation (as `pa_stream_set_buffer_attr` callers do).
#[test]
fn set_buffer_attr_moves_the_quantum() {
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::ready(&d, "attr");
    let spec = SampleSpec {
        format: SampleFormat::S16Le,
        channels: 2,
        sample_rate: 48000,
    };
    let seq = c.send(&Command::CreatePlaybackStream(PlaybackStreamParams {
        sample_spec: spec,
        channel_map: ChannelMap::stereo(),
        buffer_attr: BufferAttr {
            target_length: 192_000, // 1 s
            ..BufferAttr::default()
        },
        cvolume: Some(ChannelVolume::norm(2)),
        flags: pa::stream::StreamFlags {
            start_corked: true,
            adjust_latency: true,
            ..Default::default()
        },
        ..Default::default()
    }));
    let p = c.reply_to(seq, |_| {}).expect("stream created");
    let reply: pa::CreatePlaybackStreamReply = c.decode(&p);
    let quanta = |d: &Daemon| -> Vec<usize> {
        d.log_text()
            .lines()
            .filter_map(|l| l.split("quantum is now ").nth(1))
            .filter_map(|t| t.split_whitespace().next()?.parse().ok())
            .collect()
    };
    assert!(
        wait_until(WAIT, || quanta(&d).last().is_some_and(|&q| q >= 4096)),
        "a 1 s stream runs a large quantum: {:?}",
        quanta(&d)
    );
    let seq = c.send(&Command::SetPlaybackStreamBufferAttr(
        pa::SetPlaybackStreamBufferAttrParams {
            index: reply.channel,
            buffer_attr: BufferAttr {
                max_length: u32::MAX,
                target_length: 3840, // 20 ms
                pre_buffering: u32::MAX,
                minimum_request_length: u32::MAX,
                fragment_size: 0,
            },
            adjust_latency: true,
            early_requests: false,
        },
    ));
    let p = c.reply_to(seq, |_| {}).expect("attributes set");
    let set: pa::SetPlaybackStreamBufferAttrReply = c.decode(&p);
    // 20 ms with ADJUST_LATENCY leaves 5 ms (240 frames) for the device: 192 frames on
    // the null sink.
    assert_eq!(set.configured_sink_latency, 192 * 1_000_000 / 48000);
    assert!(
        set.buffer_attr.target_length < 3840,
        "{:?}",
        set.buffer_attr
    );
    assert!(
        wait_until(WAIT, || quanta(&d).last() == Some(&192)),
        "the quantum follows the new latency: {:?}",
        quanta(&d)
    );
}

/// Creates a 44.1 kHz s16 stereo playback stream with PulseAudio's default buffer
/// attributes; returns its channel.
fn create_44k1_s16_stereo(c: &mut RawClient, corked: bool, variable_rate: bool) -> u32 {
    let seq = c.send(&Command::CreatePlaybackStream(PlaybackStreamParams {
        sample_spec: SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 44100,
        },
        channel_map: ChannelMap::stereo(),
        cvolume: Some(ChannelVolume::norm(2)),
        flags: pa::stream::StreamFlags {
            start_corked: corked,
            variable_rate,
            ..Default::default()
        },
        ..Default::default()
    }));
    let p = c.reply_to(seq, |_| {}).expect("stream created");
    let reply: pa::CreatePlaybackStreamReply = c.decode(&p);
    reply.channel
}

/// UPDATE_PLAYBACK_STREAM_SAMPLE_RATE: a VARIABLE_RATE stream may move to any rate from
/// 1 Hz to 384 kHz (within the resampler's range by itself, beyond it with a new
/// converter) and introspection shows the new rate; a fixed-rate stream gets BADSTATE,
/// a zero or too high rate INVALID.
#[test]
fn variable_rate_streams_change_rate() {
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::ready(&d, "rate");
    let var = create_44k1_s16_stereo(&mut c, true, true);
    let fixed = create_44k1_s16_stereo(&mut c, true, false);
    let update = |c: &mut RawClient, index: u32, sample_rate: u32| {
        let seq = c.send(&Command::UpdatePlaybackStreamSampleRate(
            pa::UpdateSampleRateParams { index, sample_rate },
        ));
        c.reply_to(seq, |_| {})
    };
    assert!(update(&mut c, var, 46000).is_ok(), "within range");
    assert_eq!(
        update(&mut c, fixed, 46000).err(),
        Some(pa::PulseError::BadState as u32)
    );
    if have(&["pactl"]) {
        let text = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sink-inputs"]));
        assert!(
            text.contains("46000Hz"),
            "introspection shows the new rate: {text}"
        );
    }
    // Far beyond the converter's own range (and back): a new converter each time, down
    // to PulseAudio's lowest rate (beyond a factor 16 from 48 kHz, a cascade of stages).
    assert!(update(&mut c, var, 8000).is_ok(), "to 8 kHz");
    assert!(update(&mut c, var, 1000).is_ok(), "to 1 kHz");
    assert!(update(&mut c, var, 1).is_ok(), "to 1 Hz");
    assert!(update(&mut c, var, 96000).is_ok(), "to 96 kHz");
    assert_eq!(
        update(&mut c, var, 0).err(),
        Some(pa::PulseError::Invalid as u32)
    );
    assert_eq!(
        update(&mut c, var, 400_000).err(),
        Some(pa::PulseError::Invalid as u32)
    );
    if have(&["pactl"]) {
        let text = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sink-inputs"]));
        assert!(
            text.contains("96000Hz"),
            "the refused rates left the last good one: {text}"
        );
    }
}

/// `frames` of a stereo sine of `period` samples at amplitude 8000, never exactly zero.
fn sine_stereo(frames: usize, period: f64) -> Vec<i16> {
    (0..frames)
        .flat_map(|i| {
            let v = (8000.0 * (std::f64::consts::TAU * (i as f64 + 0.5) / period).sin()) as i16;
            [v, v]
        })
        .collect()
}

/// Moves playback stream `ch` (VARIABLE_RATE) to `rate`, writes `tone` (s16 stereo) in
/// blocks of `block` frames, drains, stops the daemon and returns the left channel of
/// its out.wav.
fn play_at_rate(
    d: &mut Daemon,
    c: &mut RawClient,
    ch: u32,
    rate: u32,
    tone: &[i16],
    block: usize,
) -> Vec<i16> {
    let seq = c.send(&Command::UpdatePlaybackStreamSampleRate(
        pa::UpdateSampleRateParams {
            index: ch,
            sample_rate: rate,
        },
    ));
    c.reply_to(seq, |_| {}).expect("rate changed");
    let bytes: Vec<u8> = tone.iter().flat_map(|s| s.to_le_bytes()).collect();
    for chunk in bytes.chunks(block * 4) {
        c.write_audio(ch, chunk);
    }
    let seq = c.send(&Command::DrainPlaybackStream(ch));
    c.reply_to(seq, |_| {}).expect("drained");
    let out_path = d.path("out.wav");
    d.stop();
    let (_, out) = read_wav_s16(&out_path);
    out.chunks(2).map(|f| f[0]).collect()
}

/// Where a tone lies in `frames`: its frames from the first to the last loud sample,
/// the sign changes between them and the longest quiet run among them. Panics when
/// nothing is loud.
fn tone_extent(frames: &[i16]) -> (usize, usize, usize) {
    let loud = |v: &i16| v.abs() > 200;
    let first = frames.iter().position(loud).expect("the tone arrived");
    let last = frames.iter().rposition(loud).unwrap();
    let x = &frames[first..=last];
    let crossings = x.windows(2).filter(|w| (w[0] < 0) != (w[1] < 0)).count();
    let quiet = x.split(loud).map(<[i16]>::len).max().unwrap_or(0);
    (last - first, crossings, quiet)
}

/// A VARIABLE_RATE stream created at 44.1 kHz and moved to 11.025 kHz (far beyond the
/// converter's own range) plays at the new rate: one second of audio written at
/// 11.025 kHz lasts one second in the 48 kHz file, not the quarter second it would at
/// the creation rate.
#[test]
fn a_stream_moved_far_from_its_creation_rate_plays_at_the_new_rate() {
    let mut d = pulse_util::start(&["--device", "file:out.wav"]);
    let mut c = RawClient::ready(&d, "retune");
    let ch = create_44k1_s16_stereo(&mut c, false, true);
    // 441 Hz (25 samples a period at 11.025 kHz).
    let frames = play_at_rate(&mut d, &mut c, ch, 11025, &sine_stereo(11025, 25.0), 1102);
    let (span, crossings, _) = tone_extent(&frames);
    assert!(
        (47_000..=49_000).contains(&span),
        "one second at 48 kHz expected, got {span} frames\n{}",
        d.log_text()
    );
    // And the pitch: 441 Hz has 882 sign changes a second.
    assert!((860..=900).contains(&crossings), "{crossings} sign changes");
}

/// A VARIABLE_RATE stream created at 8 kHz with a small buffer and moved to 96 kHz
/// still gets a whole cycle's input at the largest quantum: its ring was sized for the
/// rates it may move to, so one second of a tone plays as one second, with no gaps.
#[test]
fn a_small_buffer_moved_to_a_high_rate_plays_without_gaps() {
    let mut d = pulse_util::start(&[
        "--device",
        "file:out.wav",
        "--quantum-min",
        "8192",
        "--quantum",
        "8192",
    ]);
    let mut c = RawClient::ready(&d, "retune-up");
    let seq = c.send(&Command::CreatePlaybackStream(PlaybackStreamParams {
        sample_spec: SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 8000,
        },
        channel_map: ChannelMap::stereo(),
        buffer_attr: BufferAttr {
            target_length: 4000, // 125 ms at 8 kHz, 10 ms at 96 kHz
            ..BufferAttr::default()
        },
        cvolume: Some(ChannelVolume::norm(2)),
        flags: pa::stream::StreamFlags {
            variable_rate: true,
            ..Default::default()
        },
        ..Default::default()
    }));
    let p = c.reply_to(seq, |_| {}).expect("stream created");
    let ch = c.decode::<pa::CreatePlaybackStreamReply>(&p).channel;
    // 960 Hz (100 samples a period at 96 kHz).
    let frames = play_at_rate(&mut d, &mut c, ch, 96000, &sine_stereo(96000, 100.0), 9600);
    let (span, _, quiet) = tone_extent(&frames);
    assert!(
        (47_000..=49_000).contains(&span),
        "one second at 48 kHz expected, got {span} frames\n{}",
        d.log_text()
    );
    // A 960 Hz tone at 48 kHz is loud again within 25 frames; a gap is longer.
    assert!(quiet < 25, "a gap of {quiet} frames");
}

/// The record side of the same: a VARIABLE_RATE record stream created at 8 kHz with
/// small fragments and moved to 96 kHz takes a whole cycle at the largest quantum, so a
/// one-second tone played into the sink is recorded whole from its monitor.
#[test]
fn a_record_stream_moved_to_a_high_rate_loses_nothing() {
    require_tools!("paplay");
    let d = pulse_util::start(&[
        "--device",
        "null",
        "--quantum-min",
        "8192",
        "--quantum",
        "8192",
    ]);
    let mut c = RawClient::ready(&d, "retune-rec");
    let seq = c.send(&Command::CreateRecordStream(pa::RecordStreamParams {
        sample_spec: SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 8000,
        },
        channel_map: ChannelMap::stereo(),
        source_name: Some(c"null-sink.monitor".into()),
        buffer_attr: BufferAttr {
            fragment_size: 1600, // 50 ms at 8 kHz, 4 ms at 96 kHz
            ..BufferAttr::default()
        },
        flags: pa::stream::StreamFlags {
            variable_rate: true,
            ..Default::default()
        },
        ..Default::default()
    }));
    let p = c.reply_to(seq, |_| {}).expect("record stream created");
    let ch = c.decode::<pa::CreateRecordStreamReply>(&p).channel;
    let seq = c.send(&Command::UpdateRecordStreamSampleRate(
        pa::UpdateSampleRateParams {
            index: ch,
            sample_rate: 96000,
        },
    ));
    c.reply_to(seq, |_| {}).expect("rate changed");
    // One second of 480 Hz (100 samples a period at 48 kHz).
    write_wav_s16(&d.path("tone.wav"), 48000, 2, &sine_stereo(48000, 100.0));
    let player = spawn_pa(&d, "paplay", &["tone.wav"]);
    // Record until the tone has come and gone (2.5 s at 96 kHz), bounded by the
    // socket's read timeout on each packet.
    let mut rec = Vec::new();
    while rec.len() < 2_500 * 96 * 4 {
        if let Msg::Memblock(got, data) = c.next() {
            assert_eq!(got, ch);
            rec.extend_from_slice(&data);
        }
    }
    let out = wait_output(player, WAIT);
    assert!(out.status.success(), "paplay failed");
    let frames: Vec<i16> = rec
        .chunks(4)
        .map(|f| i16::from_le_bytes([f[0], f[1]]))
        .collect();
    let (span, _, quiet) = tone_extent(&frames);
    assert!(
        (94_000..=98_000).contains(&span),
        "one second at 96 kHz expected, got {span} frames\n{}",
        d.log_text()
    );
    // 480 Hz at 96 kHz is loud again within 50 frames; a gap is longer.
    assert!(quiet < 50, "a gap of {quiet} frames");
}

/// A record stream on a sink's monitor reports the sink's latency as its monitor
/// latency (libpulse subtracts it: a monitor hears a sample before the sink plays it);
/// one on a real source reports none.
#[test]
fn monitor_record_streams_report_the_sink_latency() {
    let d = pulse_util::start(&["--device", "null", "--quantum", "256"]);
    let mut c = RawClient::ready(&d, "monlat");
    let latency_of = |c: &mut RawClient, source: &str| -> pa::RecordLatency {
        let seq = c.send(&Command::CreateRecordStream(pa::RecordStreamParams {
            sample_spec: SampleSpec {
                format: SampleFormat::S16Le,
                channels: 2,
                sample_rate: 48000,
            },
            channel_map: ChannelMap::stereo(),
            source_name: Some(std::ffi::CString::new(source).unwrap()),
            ..Default::default()
        }));
        let p = c.reply_to(seq, |_| {}).expect("record stream created");
        let reply: pa::CreateRecordStreamReply = c.decode(&p);
        let t0 = Instant::now();
        loop {
            let seq = c.send(&Command::GetRecordLatency(LatencyParams {
                channel: reply.channel,
                now: SystemTime::now(),
            }));
            let p = c.reply_to(seq, |_| {}).unwrap();
            let lat: pa::RecordLatency = c.decode(&p);
            // The sink reports its delay once it has played a cycle.
            if lat.sink_usec > 0 || source != "null-sink.monitor" || t0.elapsed() > WAIT {
                return lat;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let monitor = latency_of(&mut c, "null-sink.monitor");
    // One quantum of 256 frames is in flight on the null sink: 5333 µs.
    assert_eq!(monitor.sink_usec, 256 * 1_000_000 / 48000);
    let source = latency_of(&mut c, "null-source");
    assert_eq!(source.sink_usec, 0);
}

/// A sink's state says whether something plays into it, as PulseAudio counts it: a
/// corked stream does not make it RUNNING, and neither does a loopback held because the
/// sink it records from is suspended.
#[test]
fn a_sink_is_idle_while_its_only_input_is_corked_or_held() {
    require_tools!("pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let state = |name: &str| {
        let text = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]));
        text.lines()
            .find(|l| l.split('\t').nth(1) == Some(name))
            .and_then(|l| l.split('\t').nth(4))
            .unwrap_or_else(|| panic!("no sink {name}: {text}"))
            .to_string()
    };
    let card = pa_ok(&d, &run_pa(&d, "pactl", &["get-default-sink"]))
        .trim()
        .to_string();
    let card_index = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]))
        .lines()
        .find(|l| l.split('\t').nth(1) == Some(card.as_str()))
        .and_then(|l| l.split('\t').next())
        .expect("the card is listed")
        .to_string();
    let mut c = RawClient::ready(&d, "cork");
    let ch = create_44k1_s16_stereo(&mut c, true, false);
    assert_eq!(state(&card), "IDLE", "a corked stream counted as playing");
    let clients = || {
        pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "clients"]))
            .lines()
            .count()
    };
    let sub = spawn_pa(&d, "pactl", &["subscribe"]);
    assert!(
        wait_until(WAIT, || clients() >= 3),
        "pactl subscribe did not connect"
    );
    let cork = |c: &mut RawClient, cork: bool| {
        let seq = c.send(&Command::CorkPlaybackStream(CorkStreamParams {
            channel: ch,
            cork,
        }));
        c.reply_to(seq, |_| {}).unwrap();
    };
    cork(&mut c, false);
    assert_eq!(state(&card), "RUNNING");
    cork(&mut c, true);
    assert_eq!(state(&card), "IDLE");
    // Each state change is announced as a change of the sink, as PulseAudio does.
    std::thread::sleep(Duration::from_millis(300));
    let out = interrupt(sub);
    let text = String::from_utf8_lossy(&out.stdout);
    let needle = format!("Event 'change' on sink #{card_index}");
    assert!(
        text.matches(&needle).count() >= 2,
        "no two {needle:?} in:\n{text}"
    );

    // A loopback from a null sink's monitor into the card: held while that sink is
    // suspended.
    load_module(&d, &["module-null-sink", "sink_name=vmic"]);
    load_module(
        &d,
        &[
            "module-loopback",
            "source=vmic.monitor",
            &format!("sink={card}"),
        ],
    );
    assert_eq!(state(&card), "RUNNING");
    pa_ok(&d, &run_pa(&d, "pactl", &["suspend-sink", "vmic", "1"]));
    assert_eq!(state("vmic"), "SUSPENDED");
    assert_eq!(state(&card), "IDLE", "a held loopback counted as playing");
    pa_ok(&d, &run_pa(&d, "pactl", &["suspend-sink", "vmic", "0"]));
    assert_eq!(state(&card), "RUNNING");
}
