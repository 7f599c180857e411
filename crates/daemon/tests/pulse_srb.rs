//! The shared ring-buffer channel (srbchannel) with the real libpulse tools: audio
//! arrives bit-exact through the rings, and clients without shared memory (or a server
//! with the channel switched off) fall back to the socket.

mod common;
#[macro_use]
mod pulse_util;

use common::*;
use pulse_util::*;

/// The (in, out) byte counts of every connection whose srbchannel carried something.
fn srb_counts(log: &str) -> Vec<(u64, u64)> {
    log.lines()
        .filter_map(|l| {
            let rest = &l[l.find("srbchannel carried ")? + "srbchannel carried ".len()..];
            let mut w = rest.split_whitespace();
            let i = w.next()?.parse().ok()?;
            let o = w.nth(2)?.parse().ok()?;
            Some((i, o))
        })
        .collect()
}

fn config(dir: &tempfile::TempDir, toml: &str) {
    let cfg = dir.path().join("config/quaver");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("quaver.toml"), toml).unwrap();
}

const REC_ARGS: &[&str] = &["--format=s16le", "--rate=48000", "--channels=2", "--raw"];

/// Plays through paplay while parec records the monitor; returns the daemon's log.
fn play_and_record(dir: tempfile::TempDir, client_conf: &str) -> String {
    let mut d = pulse_util::start_in(dir, &["--device", "null"]);
    std::fs::write(d.path("pulse-client.conf"), client_conf).unwrap();
    let input = noise_s16(48000 * 2, 23, 20000);
    let got = record_monitor_while_playing(&d, &input, REC_ARGS);
    let log = d.stop();
    assert_contains_exactly(&got, &input, "parec of what paplay played");
    log
}

#[test]
fn paplay_and_parec_are_bit_exact_through_the_srbchannel() {
    require_tools!("paplay", "parec", "pactl");
    let log = play_and_record(tempfile::tempdir().unwrap(), "autospawn = no\n");
    let counts = srb_counts(&log);
    // paplay sends its audio as memfd references through the ring (a few hundred
    // bytes); parec gets its audio inline through the ring (≥ 192 000 bytes).
    assert!(
        log.contains("bytes of audio came by memfd")
            && counts.iter().any(|&(i, _)| i > 200)
            && counts.iter().any(|&(_, o)| o >= 192_000),
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
    let dir = tempfile::tempdir().unwrap();
    config(&dir, "[pulse]\nsrbchannel = false\n");
    let log = play_and_record(dir, "autospawn = no\n");
    assert!(!log.contains("srbchannel enabled"), "{log}");
    assert!(log.contains("bytes of audio came by memfd"), "{log}");
}

/// A hand-written client does the srbchannel handshake, then writes a fill count no
/// ring can hold: it is disconnected with the reason logged, and a paplay playing at
/// the same time is not disturbed.
#[test]
fn a_client_that_corrupts_its_ring_is_disconnected_and_others_play_on() {
    use quaver_pulse::pulseaudio::protocol as pa;
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
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
    // Read frames (and the descriptors riding with them) until the block reference.
    let sock = c.sock.get_ref();
    let mut bytes = Vec::new();
    let mut fds = Vec::new();
    let mut frames: Vec<(u32, u32, Vec<u8>)> = Vec::new();
    while frames.len() < 4 {
        let mut buf = [0u8; 4096];
        let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = recvmsg(
            sock,
            &mut [std::io::IoSliceMut::new(&mut buf)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        )
        .expect("reading the handshake (bounded by the socket's read timeout)");
        assert!(r.bytes > 0, "server hung up during the handshake");
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(got) = m {
                fds.extend(got);
            }
        }
        bytes.extend_from_slice(&buf[..r.bytes]);
        while bytes.len() >= 20 {
            let w = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
            let (len, channel, flags) = (w(0) as usize, w(4), w(16));
            if bytes.len() < 20 + len {
                break;
            }
            frames.push((channel, flags, bytes[20..20 + len].to_vec()));
            bytes.drain(..20 + len);
        }
    }
    // AUTH reply, REGISTER_MEMFD_SHMID, ENABLE_SRBCHANNEL, the block reference.
    let word = |p: &[u8], i: usize| u32::from_be_bytes(p[i * 5 + 1..i * 5 + 5].try_into().unwrap());
    assert_eq!(word(&frames[1].2, 0), 103, "REGISTER_MEMFD_SHMID");
    assert_eq!(word(&frames[2].2, 0), 101, "ENABLE_SRBCHANNEL");
    let tag = word(&frames[2].2, 1);
    assert_eq!(frames[3].0, 0, "the ring block comes on channel 0");
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
    // The server hangs up on us (the socket's read timeout bounds this).
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(c.sock.get_ref(), &mut buf) {
            Ok(0) => break,
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
