//! Synthetic packet streams through the jitter buffer: reordering, loss, duplicates,
//! wraps, jumps, foreign packets.

use super::*;
use crate::rtp::RtpHeader;

const CH: usize = 2;
const PKT: usize = 48;
const PT: u8 = 97;
const SSRC: u32 = 0x5eed;

fn sender() -> IpAddr {
    "10.0.0.1".parse().unwrap()
}

fn config() -> JitterConfig {
    JitterConfig {
        encoding: Encoding::L24,
        channels: CH,
        payload_type: PT,
        target: 4 * PKT,
        max_packet: PKT * 4,
        capacity: 0,
        fade: 8,
        excess: None,
        source: Some(sender()),
    }
}

/// The test signal: a distinct 24-bit value per frame and channel.
fn value(frame: u64, c: usize) -> i32 {
    ((frame * 7919 + c as u64 * 104_729) % (1 << 24)) as i32 - (1 << 23)
}

fn sample(frame: u64, c: usize) -> f32 {
    value(frame, c) as f32 / 8_388_608.0
}

/// Packet `k` of a stream whose first packet has sequence `seq0` and timestamp `ts0`.
struct Stream {
    seq0: u16,
    ts0: u32,
    ssrc: u32,
}

impl Stream {
    fn new(seq0: u16, ts0: u32) -> Self {
        Stream {
            seq0,
            ts0,
            ssrc: SSRC,
        }
    }

    fn bytes(&self, k: u64) -> Vec<u8> {
        let h = RtpHeader::new(
            PT,
            self.seq0.wrapping_add(k as u16),
            self.ts0.wrapping_add((k * PKT as u64) as u32),
            self.ssrc,
        );
        let payload: Vec<u8> = (0..PKT as u64)
            .flat_map(|f| {
                (0..CH).flat_map(move |c| value(k * PKT as u64 + f, c).to_be_bytes()[1..].to_vec())
            })
            .collect();
        let mut out = vec![0u8; 12 + payload.len()];
        h.write(&payload, &mut out).unwrap();
        out
    }

    /// Pushes packet `k`, arriving on time.
    fn push(&self, jb: &mut JitterBuffer, k: u64) -> Push {
        self.push_at(jb, k, k * PKT as u64)
    }

    fn push_at(&self, jb: &mut JitterBuffer, k: u64, arrival: u64) -> Push {
        let b = self.bytes(k);
        jb.push(&RtpPacket::parse(&b).unwrap(), sender(), arrival)
    }
}

/// Pulls `frames` frames.
fn pull(jb: &mut JitterBuffer, frames: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; frames * CH];
    jb.pull(&mut out);
    out
}

/// Checks that `out` is the signal from frame `first` on.
fn assert_signal(out: &[f32], first: u64) {
    for (i, f) in out.chunks_exact(CH).enumerate() {
        for (c, s) in f.iter().enumerate() {
            let n = first + i as u64;
            assert_eq!(*s, sample(n, c), "frame {n} channel {c}");
        }
    }
}

/// Pushes packets in `order`, pulling one packet's worth after each push once the
/// buffer plays; returns everything pulled while playing.
fn run(jb: &mut JitterBuffer, s: &Stream, order: &[u64]) -> Vec<f32> {
    let mut played = Vec::new();
    for (i, &k) in order.iter().enumerate() {
        // Packets arrive one packet time apart, whatever their order; one packet's worth
        // is pulled per packet taken: the receiver's pace is the sender's.
        let arrival = (order[0] + i as u64) * PKT as u64;
        let taken = matches!(s.push_at(jb, k, arrival), Push::Accepted | Push::Restarted);
        let was = jb.playing();
        if taken {
            let out = pull(jb, PKT);
            // Kept from the pull that started playing on (silence before it).
            if was || jb.playing() {
                played.extend(out);
            }
        }
    }
    played
}

#[test]
fn in_order_stream_plays_bit_exact_after_the_target() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(100, 5000);
    for k in 0..3 {
        assert_eq!(s.push(&mut jb, k), Push::Accepted);
        assert!(!jb.playing());
        assert!(
            pull(&mut jb, PKT).iter().all(|&x| x == 0.0),
            "silence while buffering"
        );
    }
    let played = run(&mut jb, &s, &(3..200).collect::<Vec<_>>());
    assert_signal(&played, 0);
    assert_eq!(played.len(), 196 * PKT * CH);
    let st = jb.stats();
    assert_eq!(
        (st.accepted, st.lost, st.concealed, st.underruns),
        (200, 0, 0, 0)
    );
    assert_eq!(
        st.buffered,
        4 * PKT as u64,
        "the target stays buffered after each pull"
    );
    assert_eq!(
        st.jitter, 0.0,
        "packets arriving exactly on time have no jitter"
    );
}

#[test]
fn reordered_and_duplicated_packets_play_in_order() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(0, 0);
    // Pairs swapped, every packet sent twice, the first packet arriving second.
    let mut order = Vec::new();
    for k in (0..100).step_by(2) {
        order.extend([k + 1, k, k + 1, k]);
    }
    let played = run(&mut jb, &s, &order);
    assert_signal(&played, 0);
    let st = jb.stats();
    assert_eq!(
        (st.accepted, st.duplicates, st.lost, st.concealed),
        (100, 100, 0, 0)
    );
    assert!(st.jitter > 0.0, "reordering is jitter");
}

#[test]
fn sequence_and_timestamp_wraps_are_seamless() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(65_530, u32::MAX - 100);
    let played = run(&mut jb, &s, &(0..50).collect::<Vec<_>>());
    assert_signal(&played, 0);
    let st = jb.stats();
    assert_eq!(
        (st.accepted, st.lost, st.concealed, st.jumps),
        (50, 0, 0, 0)
    );
}

#[test]
fn a_lost_packet_is_counted_and_concealed_with_fades() {
    let cfg = config();
    let fade = cfg.fade;
    let mut jb = JitterBuffer::new(cfg).unwrap();
    let s = Stream::new(7, 0);
    let order: Vec<u64> = (0..40).filter(|&k| k != 10).collect();
    let played = run(&mut jb, &s, &order);
    let gap = 10 * PKT;
    assert_signal(&played[..gap * CH], 0);
    // Hold the last value and ramp it down over `fade` frames, then silence.
    for i in 0..PKT {
        for c in 0..CH {
            let want = if i < fade {
                sample(gap as u64 - 1, c) * (1.0 - (i + 1) as f32 / (fade + 1) as f32)
            } else {
                0.0
            };
            assert_eq!(
                played[(gap + i) * CH + c],
                want,
                "concealed frame {i} channel {c}"
            );
        }
    }
    // Back in over `fade` frames, then exact again.
    let back = gap + PKT;
    for i in 0..fade {
        for c in 0..CH {
            let gain = 1.0 - (fade - i) as f32 / (fade + 1) as f32;
            assert_eq!(
                played[(back + i) * CH + c],
                sample((back + i) as u64, c) * gain
            );
        }
    }
    assert_signal(&played[(back + fade) * CH..], (back + fade) as u64);
    let st = jb.stats();
    assert_eq!((st.lost, st.concealed, st.underruns), (1, PKT as u64, 0));
}

#[test]
fn a_packet_after_its_turn_is_late_and_dropped() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(0, 0);
    let mut order: Vec<u64> = (0..30).filter(|&k| k != 5).collect();
    order.push(5);
    run(&mut jb, &s, &order);
    let st = jb.stats();
    assert_eq!((st.late, st.lost, st.concealed), (1, 1, PKT as u64));
}

#[test]
fn foreign_packets_are_counted_and_dropped_and_the_stream_plays_on() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(0, 0);
    let mut other = Stream::new(9, 77);
    other.ssrc = 0xbad;
    let mut played = Vec::new();
    for k in 0..60 {
        assert_eq!(s.push(&mut jb, k), Push::Accepted);
        // Another SSRC interleaved (never 16 in a row), another host, another type,
        // a partial frame, an empty payload, a giant packet.
        assert_eq!(other.push(&mut jb, k), Push::WrongSsrc);
        let b = s.bytes(k);
        let p = RtpPacket::parse(&b).unwrap();
        assert_eq!(
            jb.push(&p, "10.0.0.66".parse().unwrap(), 0),
            Push::WrongSource
        );
        let mut typed = b.clone();
        typed[1] = 96;
        assert_eq!(
            jb.push(&RtpPacket::parse(&typed).unwrap(), sender(), 0),
            Push::WrongType
        );
        let short = &b[..b.len() - 1];
        assert_eq!(
            jb.push(&RtpPacket::parse(short).unwrap(), sender(), 0),
            Push::Malformed
        );
        assert_eq!(
            jb.push(&RtpPacket::parse(&b[..12]).unwrap(), sender(), 0),
            Push::Malformed
        );
        let mut giant = b.clone();
        giant.resize(12 + 5 * PKT * CH * 3, 0);
        assert_eq!(
            jb.push(&RtpPacket::parse(&giant).unwrap(), sender(), 0),
            Push::Malformed
        );
        let was = jb.playing();
        let out = pull(&mut jb, PKT);
        if was || jb.playing() {
            played.extend(out);
        }
    }
    assert_signal(&played, 0);
    let st = jb.stats();
    assert_eq!(
        (st.wrong_source, st.wrong_type, st.malformed, st.wrong_ssrc),
        (60, 60, 180, 60)
    );
    assert_eq!(
        (st.accepted, st.lost, st.concealed, st.restarts),
        (60, 0, 0, 0)
    );
}

#[test]
fn a_new_ssrc_that_persists_takes_over() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(0, 0);
    run(&mut jb, &s, &(0..20).collect::<Vec<_>>());
    // The sender restarts: a new SSRC, new sequence and timestamps, the old one silent.
    let mut new = Stream::new(4000, 123_456_789);
    new.ssrc = 0xabc;
    for k in 0..RESTART_AFTER as u64 - 1 {
        assert_eq!(new.push(&mut jb, k), Push::WrongSsrc);
    }
    assert_eq!(new.push(&mut jb, 15), Push::Restarted);
    let played = run(&mut jb, &new, &(16..40).collect::<Vec<_>>());
    assert_signal(&played, 15 * PKT as u64);
    assert_eq!(played.len(), 21 * PKT * CH);
    let st = jb.stats();
    assert_eq!((st.restarts, st.wrong_ssrc), (1, 15));
}

#[test]
fn a_timestamp_jump_is_dropped_and_a_persistent_one_restarts() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(0, 0);
    run(&mut jb, &s, &(0..10).collect::<Vec<_>>());
    // One packet claims a timestamp far away: dropped, its frames concealed.
    let mut b = s.bytes(10);
    b[4..8].copy_from_slice(&1_000_000u32.to_be_bytes());
    assert_eq!(
        jb.push(&RtpPacket::parse(&b).unwrap(), sender(), 0),
        Push::Jump
    );
    let played = run(&mut jb, &s, &(11..30).collect::<Vec<_>>());
    assert_eq!(played.len(), 19 * PKT * CH);
    let st = jb.stats();
    assert_eq!(
        (st.jumps, st.lost, st.concealed, st.restarts),
        (1, 1, PKT as u64, 0)
    );
    // The sender's clock jumps for good: 16 in a row restart the buffer there.
    let moved = Stream::new(30, 9_000_000);
    for k in 30..30 + RESTART_AFTER as u64 - 1 {
        assert_eq!(moved.push(&mut jb, k), Push::Jump);
    }
    assert_eq!(moved.push(&mut jb, 45), Push::Restarted);
    let st = jb.stats();
    assert_eq!((st.jumps, st.restarts), (16, 1));
}

#[test]
fn an_underrun_refills_to_the_target_and_a_pause_starts_a_new_timeline() {
    let mut jb = JitterBuffer::new(config()).unwrap();
    let s = Stream::new(0, 0);
    run(&mut jb, &s, &(0..10).collect::<Vec<_>>());
    // The sender stops: the buffer plays out what it has, then conceals and refills.
    let rest = pull(&mut jb, 5 * PKT);
    assert_signal(&rest[..4 * PKT * CH], 6 * PKT as u64);
    assert!(!jb.playing());
    assert_eq!(jb.stats().underruns, 1);
    assert!(pull(&mut jb, PKT).iter().all(|&x| x == 0.0));
    // It starts again a minute later (timestamps far ahead, sequence continuing).
    let later = Stream::new(0, 60 * 48_000);
    for k in 10..13 {
        assert_eq!(later.push(&mut jb, k), Push::Accepted);
        assert!(!jb.playing());
    }
    let played = run(&mut jb, &later, &(13..30).collect::<Vec<_>>());
    // It fades in (the underrun faded out), then plays exact.
    let fade = config().fade;
    for i in 0..fade {
        let gain = 1.0 - (fade - i) as f32 / (fade + 1) as f32;
        for c in 0..CH {
            assert_eq!(
                played[i * CH + c],
                sample(10 * PKT as u64 + i as u64, c) * gain
            );
        }
    }
    assert_signal(&played[fade * CH..], (10 * PKT + fade) as u64);
    let st = jb.stats();
    assert_eq!((st.jumps, st.lost, st.underruns), (0, 0, 1));
}

#[test]
fn bad_configs_are_refused() {
    let bad = |f: fn(&mut JitterConfig)| {
        let mut c = config();
        f(&mut c);
        JitterBuffer::new(c).unwrap_err().to_string()
    };
    assert_eq!(
        bad(|c| c.channels = 0),
        "jitter buffer: 0 channels is outside 1..=64"
    );
    assert_eq!(
        bad(|c| c.channels = 65),
        "jitter buffer: 65 channels is outside 1..=64"
    );
    assert_eq!(
        bad(|c| c.payload_type = 128),
        "jitter buffer: payload type 128 is outside 0..=127"
    );
    assert_eq!(
        bad(|c| c.max_packet = 0),
        "jitter buffer: max_packet of 0 frames"
    );
    assert_eq!(
        bad(|c| c.target = usize::MAX),
        format!(
            "jitter buffer: target of {} frames is above 4194304",
            usize::MAX
        )
    );
    let jb = JitterBuffer::new(config()).unwrap();
    assert_eq!(jb.capacity(), 1024, "2 x (192 + 192) rounded up");
}

/// Ten packets' time in which neither side ran (one host stalled), then the sender's
/// timestamps skip those ten packets: the receiver, which played nothing meanwhile,
/// finds a gap of ten packets ahead on top of its target. Returns the stats, and the
/// frames buffered after each pull that follows.
fn gap_after_a_shared_stall(excess: Option<usize>) -> (JitterStats, Vec<u64>, Vec<f32>) {
    let mut jb = JitterBuffer::new(JitterConfig { excess, ..config() }).unwrap();
    let before = Stream::new(100, 5000);
    let after = Stream::new(100, 5000 + 10 * PKT as u32);
    for k in 0..40 {
        before.push(&mut jb, k);
        pull(&mut jb, PKT);
    }
    let (mut levels, mut played) = (Vec::new(), Vec::new());
    for k in 40..80 {
        assert_eq!(
            after.push_at(&mut jb, k, (k + 10) * PKT as u64),
            Push::Accepted
        );
        played.extend(pull(&mut jb, PKT));
        levels.push(jb.stats().buffered);
    }
    (jb.stats(), levels, played)
}

#[test]
fn a_gap_beyond_the_excess_is_cut_short_and_no_audio_is_lost() {
    let cfg = config();
    // Played out, the gap keeps its ten packets of latency for good.
    let (st, levels, _) = gap_after_a_shared_stall(None);
    assert_eq!(st.skipped, 0);
    assert!(
        *levels.last().unwrap() >= (cfg.target + 9 * PKT) as u64,
        "{levels:?}"
    );
    // Cut short past two packets of excess: back within it, the fade out first.
    let excess = 2 * PKT;
    let (st, levels, played) = gap_after_a_shared_stall(Some(excess));
    assert!(st.skipped > 0, "{st:?}");
    assert_eq!(st.skipped + st.concealed, 10 * PKT as u64, "{st:?}");
    assert!(st.concealed >= cfg.fade as u64, "{st:?}");
    assert!(
        *levels.last().unwrap() <= (cfg.target + excess) as u64,
        "{levels:?}"
    );
    // Only silence was passed over: the last frame before the stall, the concealment
    // played, `fade` frames fading in, then the signal exact from packet 40's frame on.
    let at = |n: u64| {
        played
            .chunks_exact(CH)
            .position(|f| f[0] == sample(n, 0))
            .unwrap_or_else(|| panic!("frame {n} never played"))
    };
    let last = 40 * PKT as u64 - 1;
    let (p, q) = (at(last), at(last + 1 + cfg.fade as u64));
    assert_signal(&played[..(p + 1) * CH], last - p as u64);
    assert_eq!((q - p - 1) as u64, st.concealed + cfg.fade as u64);
    assert_signal(&played[q * CH..], last + 1 + cfg.fade as u64);
}

#[test]
fn drop_ahead_fades_out_drops_and_fades_back_in() {
    let cfg = config();
    let fade = cfg.fade;
    let mut jb = JitterBuffer::new(cfg.clone()).unwrap();
    let s = Stream::new(3, 0);
    // Six packets in, then one in and one out each time: plays from frame 0.
    for k in 0..6 {
        s.push(&mut jb, k);
    }
    let (mut played, mut dropped) = (Vec::new(), 0);
    for k in 6..20 {
        s.push(&mut jb, k);
        if k == 12 {
            // Not into the target (nor the fade): 13 packets in, 6 played.
            dropped = jb.drop_ahead(10 * PKT);
            assert_eq!(dropped, 7 * PKT - cfg.target - fade);
            assert_eq!(jb.drop_ahead(PKT), 0, "one drop at a time");
        }
        played.extend(pull(&mut jb, PKT));
    }
    assert_eq!(jb.stats().skipped, dropped as u64);
    let at = 6 * PKT;
    assert_signal(&played[..at * CH], 0);
    for j in 0..fade {
        let out = (fade - j) as f32 / (fade + 1) as f32;
        let back = 1.0 - (fade - j) as f32 / (fade + 1) as f32;
        for c in 0..CH {
            let n = (at + j) as u64;
            assert_eq!(
                played[(at + j) * CH + c],
                sample(n, c) * out,
                "fade out {j}"
            );
            let n = (at + fade + dropped + j) as u64;
            assert_eq!(
                played[(at + fade + j) * CH + c],
                sample(n, c) * back,
                "fade in {j}"
            );
        }
    }
    assert_signal(
        &played[(at + 2 * fade) * CH..],
        (at + 2 * fade + dropped) as u64,
    );
}
