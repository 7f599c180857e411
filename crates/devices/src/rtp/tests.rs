use super::*;
use crate::Device;
use quaver_dsp::{ChannelMap, PlanarBuf};
use quaver_net::Encoding;

/// A distinct L24 value per frame and channel.
fn sample(frame: usize, c: usize) -> f32 {
    let v = ((frame * 7919 + c * 104_729) % (1 << 24)) as i32 - (1 << 23);
    v as f32 / 8_388_608.0
}

/// A 48 kHz stereo L24 receiver on a free loopback port (taking packets from `source`
/// only, when given; 10 ms of jitter buffer) and a sender of 1 ms packets to it.
fn loopback_pair(source: Option<std::net::IpAddr>) -> (RtpRecv, RtpSend) {
    let rx = RtpRecv::open(RtpRecvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        source,
        encoding: Encoding::L24,
        rate: 48_000,
        device_rate: 48_000,
        channels: ChannelMap::stereo(),
        payload_type: 97,
        latency_us: 10_000,
        name: "rtp-recv".into(),
    })
    .unwrap();
    let tx = RtpSend::open(RtpSendConfig {
        dest: rx.local_addr(),
        encoding: Encoding::L24,
        rate: 48_000,
        channels: ChannelMap::stereo(),
        ptime_us: 1_000,
        payload_type: 97,
        ttl: 1,
        sap: None,
        name: "rtp-send".into(),
    })
    .unwrap();
    (rx, tx)
}

#[test]
fn loopback_stream_arrives_bit_exact_through_hostile_datagrams() {
    let (mut rx, mut tx) = loopback_pair(Some("127.0.0.1".parse().unwrap()));
    // Beside the stream, every cycle: three datagrams that are not RTP and one too long
    // from the sender's own address, and a well-formed packet from another host.
    let junk = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let stranger = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
    let mut forged = [0u8; 18];
    quaver_net::RtpHeader::new(97, 1, 0, 1)
        .write(&[0x7f; 6], &mut forged)
        .unwrap();
    let mut bad_csrc = [0u8; 12];
    bad_csrc[0] = 0x8f;
    let hostile: [&[u8]; 4] = [&[0x40; 12], &[0x80; 11], &bad_csrc, &[0x80; 3000]];
    let (cycles, q) = (20, 480);
    let mut buf = PlanarBuf::new(2, q);
    for k in 0..cycles {
        for c in 0..2 {
            for (f, s) in buf.channel_mut(c).iter_mut().enumerate() {
                *s = sample(k * q + f, c);
            }
        }
        tx.write(buf.view(q)).unwrap();
        for d in hostile {
            junk.send_to(d, rx.local_addr()).unwrap();
        }
        stranger.send_to(&forged, rx.local_addr()).unwrap();
        // At the stream's pace, as the engine's cycles would write it.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let want = (cycles * q / 48) as u64;
    let n = cycles as u64;
    let all = want + 5 * n;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rx.received().0 < all && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(tx.sent(), (want, 0));
    assert_eq!(rx.received(), (all, 0, n), "datagrams, errors, too long");
    for k in 0..cycles {
        let mut view = buf.view_mut(q);
        rx.read(&mut view).unwrap();
        for c in 0..2 {
            for (f, s) in buf.channel(c).iter().enumerate() {
                assert_eq!(*s, sample(k * q + f, c), "cycle {k} frame {f} channel {c}");
            }
        }
    }
    let (st, malformed) = rx.stats();
    assert_eq!((st.accepted, st.lost, st.concealed), (want, 0, 0));
    assert_eq!(
        (malformed, st.wrong_source),
        (3 * n, n),
        "not RTP, another host"
    );
    // The same as `quaver status` reads them: every drop counted once, the sender named.
    let Some(crate::NetStatus::RtpRecv(live)) = rx.net().map(|h| h.status()) else {
        panic!("a receiver reports its figures")
    };
    assert_eq!(
        (
            live.datagrams,
            live.packets,
            live.lost,
            live.late,
            live.dropped
        ),
        (all, want, 0, 0, 5 * n),
        "{live:?}"
    );
    assert_eq!(
        live.remote.map(|r| r.ip()),
        Some("127.0.0.1".parse().unwrap())
    );
    assert_eq!(live.listen, rx.local_addr());
    assert_eq!(live.session, None);
    rx.set_session("studio");
    assert!(matches!(rx.net().map(|h| h.status()),
        Some(crate::NetStatus::RtpRecv(s)) if s.session.as_deref() == Some("studio")));
    assert_eq!(live.target_ms, 10.0);
    assert!(
        live.jitter_ms.is_finite() && live.jitter_ms >= 0.0,
        "{live:?}"
    );
    // 48 frames × 2 channels × 3 bytes of L24 and a 12-byte header per packet.
    let Some(crate::NetStatus::RtpSend(sent)) = tx.net().map(|h| h.status()) else {
        panic!("a sender reports its figures")
    };
    assert_eq!(
        (sent.dest, sent.sap, sent.packets, sent.bytes, sent.errors),
        (rx.local_addr(), None, want, want * 300, 0)
    );
    tx.close().unwrap();
    rx.close().unwrap();
}

#[test]
fn packets_too_big_for_one_datagram_are_refused() {
    let err = RtpSend::open(RtpSendConfig {
        dest: "127.0.0.1:9".parse().unwrap(),
        encoding: Encoding::L24,
        rate: 48_000,
        channels: ChannelMap::default_for(8),
        ptime_us: 4_000,
        payload_type: 97,
        ttl: 1,
        sap: None,
        name: "rtp-send".into(),
    })
    .err()
    .unwrap();
    assert_eq!(
        err.to_string(),
        "bad device spec 'rtp-send': packets of 192 frames × 8 channels of L24 are 4608 bytes, \
         more than 1440 (use a shorter ptime)"
    );
}

#[test]
fn the_switch_to_the_resampler_mid_stream_leaves_no_gap_and_no_jump() {
    // A 1 kHz sine straight from the jitter buffer, then through the resampler from
    // the cycle the loop engages (forced here, at exactly the sender's pace): every
    // frame played is the sine at its own position, before and after.
    let (rate, q, cycles) = (48_000usize, 480usize, 40usize);
    let (mut rx, mut tx) = loopback_pair(None);
    let sine = |n: usize| {
        (0.5 * (2.0 * std::f64::consts::PI * 1000.0 * n as f64 / rate as f64).sin()) as f32
    };
    let mut buf = PlanarBuf::new(2, q);
    for k in 0..cycles {
        for c in 0..2 {
            for (f, s) in buf.channel_mut(c).iter_mut().enumerate() {
                *s = sine(k * q + f);
            }
        }
        tx.write(buf.view(q)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let want = (cycles * q / 48) as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rx.received().0 < want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut worst = (0.0f32, 0usize);
    for k in 0..cycles - 5 {
        if k == 10 {
            assert!(!rx.playout_resampling(), "direct until the loop engages");
            rx.force_steering(1.0);
        }
        let mut view = buf.view_mut(q);
        rx.read(&mut view).unwrap();
        for f in 0..q {
            let e = (buf.channel(0)[f] - sine(k * q + f)).abs();
            if e > worst.0 {
                worst = (e, k * q + f);
            }
        }
    }
    assert!(rx.playout_resampling(), "resampling after the switch");
    // A frame off would be 0.065 at the switch; the resampler's own error is far below.
    assert!(
        worst.0 < 2e-3,
        "off by {} at frame {} (switch at {})",
        worst.0,
        worst.1,
        10 * q
    );
}
