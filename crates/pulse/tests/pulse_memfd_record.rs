//! Record audio through the server's memfd pool: a server with the pool off sends it
//! inline, and a client that never releases its blocks gets inline audio once it holds
//! them all while a paplay and parec beside it stay bit-exact. (parec getting the
//! monitor bit-exact through the pool, over the srbchannel and over the plain socket,
//! and clients without shm getting it inline are checked in pulse_srb.rs: the runs are
//! the same.)

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_testkit::*;

#[test]
fn a_server_without_the_pool_sends_record_audio_inline() {
    require_tools!("paplay", "parec", "pactl");
    let dir = tempfile::tempdir().unwrap();
    write_config(&dir, "[pulse]\nmemfd_record = false\n");
    let log = play_and_record(dir, "autospawn = no\n");
    let counts = srb_counts(&log);
    // parec's audio came inline through the srbchannel's ring; playback by memfd is a
    // switch of its own and still on.
    assert!(
        !log.contains("memfd pool carried")
            && log.contains("bytes of audio came by memfd")
            && counts.iter().any(|&(_, o)| o >= 192_000),
        "parec's audio did not come inline through the ring: {counts:?}\n{log}"
    );
}

/// A hand-written memfd client records the monitor and never releases a block: it gets
/// exactly the pool's 64 references, then inline audio (logged once); blocks it does
/// release are used again; a paplay and parec beside it stay bit-exact.
#[test]
fn a_client_that_never_releases_gets_inline_audio_and_others_stay_exact() {
    use quaver_pulse::pulseaudio::protocol as pa;
    require_tools!("paplay", "parec", "pactl");
    const SLOTS: usize = 64;
    const SLOT_SIZE: u64 = 64 * 1024;
    let mut d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::connect(&d);
    let sock = c.sock.get_ref().try_clone().unwrap();
    let mut r = FrameReader::default();
    let seq = c.send(&pa::Command::Auth(pa::AuthParams {
        version: pa::MAX_VERSION,
        supports_shm: true,
        supports_memfd: true,
        cookie: vec![0; 256],
    }));
    let auth: pa::AuthReply = c.decode(&r.reply(&sock, seq, |_| {}));
    assert!(auth.use_memfd, "memfd offered to a capable client");
    // The first registration after the reply is the record pool (the srbchannel's
    // follows; this client never acknowledges it, so all stays on the socket).
    let register = r.next(&sock);
    assert_eq!(register.word(0), 103, "REGISTER_MEMFD_SHMID");
    let pool_id = register.word(2);
    let pool_size = rustix::fs::fstat(&r.fds[0]).unwrap().st_size as u64;
    assert_eq!(pool_size, SLOTS as u64 * SLOT_SIZE);
    let seq = c.send(&pa::Command::CreateRecordStream(pa::RecordStreamParams {
        sample_spec: pa::SampleSpec {
            format: pa::SampleFormat::S16Le,
            channels: 2,
            sample_rate: 48000,
        },
        channel_map: pa::ChannelMap::stereo(),
        source_name: Some(c"null-sink.monitor".into()),
        // 10 ms fragments: the pool runs out in well under a second.
        buffer_attr: pa::stream::BufferAttr {
            fragment_size: 1920,
            ..Default::default()
        },
        flags: pa::stream::StreamFlags {
            adjust_latency: true,
            ..Default::default()
        },
        ..Default::default()
    }));
    let reply: pa::CreateRecordStreamReply = c.decode(&r.reply(&sock, seq, |_| {}));
    let ch = reply.channel;

    // References, each a distinct block inside the pool, until the first inline block.
    let mut held = Vec::new();
    let inline_after = |r: &mut FrameReader, held: &mut Vec<u32>| loop {
        let f = r.next(&sock);
        if f.channel != ch {
            continue;
        }
        if f.flags == 0 {
            assert!(
                !f.body.is_empty() && f.body.len().is_multiple_of(4),
                "inline audio"
            );
            return;
        }
        assert_eq!(f.flags, 0xA000_0000, "SHMDATA | MEMFD_BLOCK");
        assert_eq!(f.shm(1), pool_id, "a reference into the record pool");
        assert!(
            f.shm(2) as u64 + f.shm(3) as u64 <= pool_size,
            "inside the pool"
        );
        assert!(!held.contains(&f.shm(0)), "block {} sent twice", f.shm(0));
        held.push(f.shm(0));
    };
    inline_after(&mut r, &mut held);
    assert_eq!(held.len(), SLOTS, "references before the pool ran out");
    // Release eight: exactly those come back, then inline again.
    let released: Vec<u32> = held.drain(..8).collect();
    for b in &released {
        let mut frame = 0u32.to_be_bytes().to_vec();
        frame.extend_from_slice(&u32::MAX.to_be_bytes());
        frame.extend_from_slice(&b.to_be_bytes());
        frame.extend_from_slice(&[0; 4]);
        frame.extend_from_slice(&0x4000_0000u32.to_be_bytes());
        c.send_raw(&frame).unwrap();
    }
    let mut again = Vec::new();
    inline_after(&mut r, &mut again);
    again.sort();
    let mut want = released.clone();
    want.sort();
    assert_eq!(again, want, "the released blocks, used again");

    // The stuck client keeps its stream (its queue stays bounded while it stops
    // reading); a paplay and parec beside it are not disturbed.
    let input = noise_s16(48000 * 2, 41, 20000);
    let got = record_monitor_while_playing(&d, &input, REC_ARGS);
    drop(c);
    let log = d.stop();
    assert_contains_exactly(&got, &input, "parec beside the stuck client");
    assert_parec_used_the_pool(&log);
    assert_eq!(
        log.matches("blocks of its memfd record pool without releasing")
            .count(),
        1,
        "logged once\n{log}"
    );
}
