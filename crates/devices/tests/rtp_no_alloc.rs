//! The RTP devices' cycle methods allocate nothing: `RtpSend::write` (into its ring) and
//! `RtpRecv::read` (draining datagrams, parsing them, the jitter buffer, the pull) under
//! the allocation guard (with the live figures `quaver status` reads) the engine's
//! no_alloc test uses, with packets really flowing over
//! the loopback interface (their network threads may allocate; the guard watches only the
//! calling thread, which plays the RT thread here). Halfway, the 48 kHz receiver is made
//! to steer as if its sender drifted: its switch to the resampler and the resampled
//! reads after it run under the guard too. A second pair sends 44.1 kHz L16,
//! PulseAudio's default, to a receiver that resamples it to 48 kHz.

use assert_no_alloc::{AllocDisabler, assert_no_alloc, reset_violation_count, violation_count};
use quaver_devices::{Device, RtpRecv, RtpRecvConfig, RtpSend, RtpSendConfig};
use quaver_dsp::{ChannelMap, PlanarBuf};
use quaver_net::Encoding;
use std::time::Duration;

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

#[test]
fn rtp_write_and_read_allocate_nothing() {
    let mut rx = RtpRecv::open(RtpRecvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        source: None,
        encoding: Encoding::L24,
        rate: 48_000,
        device_rate: 48_000,
        channels: ChannelMap::stereo(),
        payload_type: 97,
        latency_us: 5_000,
        name: "rtp-recv".into(),
    })
    .unwrap();
    let mut tx = RtpSend::open(RtpSendConfig {
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
    let mut rx44 = RtpRecv::open(RtpRecvConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        source: None,
        encoding: Encoding::L16,
        rate: 44_100,
        device_rate: 48_000,
        channels: ChannelMap::stereo(),
        payload_type: 10,
        latency_us: 5_000,
        name: "rtp-recv-44".into(),
    })
    .unwrap();
    let mut tx44 = RtpSend::open(RtpSendConfig {
        dest: rx44.local_addr(),
        encoding: Encoding::L16,
        rate: 44_100,
        channels: ChannelMap::stereo(),
        ptime_us: 1_000,
        payload_type: 10,
        ttl: 1,
        sap: None,
        name: "rtp-send-44".into(),
    })
    .unwrap();
    let q = 96;
    let mut out = PlanarBuf::new(2, q);
    let mut inp = PlanarBuf::new(2, q);
    for c in 0..2 {
        for (i, s) in out.channel_mut(c).iter_mut().enumerate() {
            *s = (i as f32 / q as f32) - 0.5;
        }
    }
    reset_violation_count();
    for k in 0..300 {
        if k == 150 {
            // From here the 48 kHz stream is steered as if its sender drifted: the
            // switch from the direct path to the resampler, then resampled reads.
            rx.force_steering(1.0005);
        }
        assert_no_alloc(|| {
            tx.write(out.view(q)).unwrap();
            rx.read(&mut inp.view_mut(q)).unwrap();
            tx44.write(out.view(q)).unwrap();
            rx44.read(&mut inp.view_mut(q)).unwrap();
        });
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        violation_count(),
        0,
        "the RTP devices allocated in the cycle"
    );
    let (st, malformed) = rx.stats();
    assert!(st.accepted > 200, "packets flowed: {st:?}");
    assert_eq!(malformed, 0);
    // What the cycle published for `quaver status` (stores only, inside the guard).
    match rx.net().map(|h| h.status()) {
        Some(quaver_devices::NetStatus::RtpRecv(live)) => {
            assert_eq!(live.packets, st.accepted, "{live:?}")
        }
        other => panic!("no receiver figures: {other:?}"),
    }
    let (st, _) = rx44.stats();
    assert!(st.accepted > 200, "44.1 kHz packets flowed: {st:?}");
    for d in [&mut tx as &mut dyn Device, &mut rx, &mut tx44, &mut rx44] {
        d.close().unwrap();
    }
}
