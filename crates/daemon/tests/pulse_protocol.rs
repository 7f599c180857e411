//! PulseAudio stream semantics checked packet by packet with a bare protocol client:
//! requests, cork, STARTED, drain timing, underflow and latency indexes. Needs no tools.

mod common;
mod pulse_util;

use common::*;
use pulse_util::*;
use quaver_pulse::pulseaudio::protocol::{
    self as pa, ChannelMap, ChannelVolume, Command, CorkStreamParams, LatencyParams,
    PlaybackStreamParams, SampleFormat, SampleSpec, stream::BufferAttr,
};
use std::time::{Duration, Instant, SystemTime};

fn s16(n_bytes: usize, seed: u64) -> Vec<u8> {
    noise_s16(n_bytes / 2, seed, 10000)
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect()
}

#[test]
fn playback_requests_cork_started_drain_underflow_and_latency() {
    let d = Daemon::start(&["--device", "null"]);
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
