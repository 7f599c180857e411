//! The shared ring-buffer channel (srbchannel) with the real libpulse tools: audio
//! arrives bit-exact through the rings, and clients without shared memory (or a server
//! with the channel switched off) fall back to the socket. The same runs check that
//! parec's audio came as references into the server's memfd record pool (over the ring
//! and over the socket) and, without shm, inline.

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_testkit::*;

#[test]
fn paplay_and_parec_are_bit_exact_through_the_srbchannel() {
    require_tools!("paplay", "parec", "pactl");
    let log = play_and_record(tempfile::tempdir().unwrap(), "autospawn = no\n");
    let counts = srb_counts(&log);
    // paplay sends its audio as references into its memfd pool, parec gets its audio
    // as references into ours: both through the rings, a few hundred bytes each way.
    assert_parec_used_the_pool(&log);
    assert!(
        log.contains("bytes of audio came by memfd")
            && counts.iter().any(|&(i, _)| i > 200)
            && counts.iter().any(|&(_, o)| o > 200),
        "the rings carried too little: {counts:?}\n{log}"
    );
}

#[test]
fn clients_without_shm_and_a_server_without_srbchannel_use_the_socket() {
    require_tools!("paplay", "parec", "pactl");
    let log = play_and_record(
        tempfile::tempdir().unwrap(),
        "autospawn = no\nenable-shm = no\n",
    );
    assert!(!log.contains("srbchannel enabled"), "{log}");
    assert!(!log.contains("memfd pool carried"), "{log}");
    let dir = tempfile::tempdir().unwrap();
    write_config(&dir, "[pulse]\nsrbchannel = false\n");
    let log = play_and_record(dir, "autospawn = no\n");
    assert!(!log.contains("srbchannel enabled"), "{log}");
    // Both memfd directions work over the plain socket too.
    assert!(log.contains("bytes of audio came by memfd"), "{log}");
    assert_parec_used_the_pool(&log);
}

/// A hand-written client does the srbchannel handshake, then writes a fill count no
/// ring can hold: it is disconnected with the reason logged, and a paplay playing at
/// the same time is not disturbed.
#[test]
fn a_client_that_corrupts_its_ring_is_disconnected_and_others_play_on() {
    use quaver_pulse::pulseaudio::protocol as pa;
    require_tools!("paplay");
    let mut d = pulse_util::start(&["--device", "file:out.wav"]);
    let input = noise_s16(48000 * 2, 31, 20000);
    write_wav_s16(&d.path("in.wav"), 48000, 2, &input);
    let player = spawn_pa(&d, "paplay", &["in.wav"]);

    let mut c = RawClient::connect(&d);
    c.send(&pa::Command::Auth(pa::AuthParams {
        version: pa::MAX_VERSION,
        supports_shm: true,
        supports_memfd: true,
        cookie: vec![0; 256],
    }));
    // AUTH reply, REGISTER_MEMFD_SHMID of the record pool and of the ring block,
    // ENABLE_SRBCHANNEL, the ring block's reference; the descriptors ride in that order.
    let sock = c.sock.get_ref();
    let mut r = FrameReader::default();
    let frames: Vec<Frame> = (0..5).map(|_| r.next(sock)).collect();
    assert_eq!(frames[1].word(0), 103, "REGISTER_MEMFD_SHMID");
    assert_eq!(frames[2].word(0), 103, "REGISTER_MEMFD_SHMID");
    assert_eq!(frames[3].word(0), 101, "ENABLE_SRBCHANNEL");
    let tag = frames[3].word(1);
    assert_eq!(frames[4].channel, 0, "the ring block comes on channel 0");
    assert_eq!(frames[4].shm(1), frames[2].word(2), "the ring block's pool");
    let fds = &r.fds[1..];
    assert_eq!(fds.len(), 3, "a memfd and two wakeup descriptors");
    let map = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            65536,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            &fds[0],
            0,
        )
        .unwrap()
    }
    .cast::<i32>();
    // Acknowledge (over the socket, as libpulse does), then corrupt the fill count of
    // the ring we write and wake the server.
    let mut ack = Vec::new();
    for v in [101u32, tag] {
        ack.push(b'L');
        ack.extend_from_slice(&v.to_be_bytes());
    }
    let mut packet = (ack.len() as u32).to_be_bytes().to_vec();
    packet.extend_from_slice(&u32::MAX.to_be_bytes());
    packet.extend_from_slice(&[0; 12]);
    packet.extend_from_slice(&ack);
    c.send_raw(&packet).unwrap();
    unsafe {
        let count = &*(map as *const std::sync::atomic::AtomicI32);
        count.store(0x7fff_0000, std::sync::atomic::Ordering::SeqCst);
    }
    rustix::io::write(&fds[1], &1u64.to_ne_bytes()).unwrap();
    // The server hangs up on us (the socket's read timeout bounds this). If it saw the
    // ring before it read our acknowledgement, it closes with that packet unread and the
    // kernel reports the hang-up as a reset rather than an end of stream.
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(c.sock.get_ref(), &mut buf) {
            Ok(0) | Err(rustix::io::Errno::CONNRESET) => break,
            Ok(_) => continue,
            Err(e) => panic!("not disconnected: {e}\n{}", d.log_text()),
        }
    }
    let out = wait_output(player, WAIT);
    assert!(
        out.status.success(),
        "paplay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out_path = d.path("out.wav");
    let log = d.stop();
    assert!(
        log.contains("srbchannel ring count 2147418112 out of range; disconnecting"),
        "{log}"
    );
    assert_contains_exactly(&read_wav_s16(&out_path).1, &input, "paplay next to it");
}
