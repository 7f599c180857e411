//! Fuzzes what quaver reads from the network for RTP streams (`quaver_net`): RTP
//! packets, SDP texts, SAP packets (and the SDP they carry), and streams of RTP packets
//! through the jitter buffer.
//!
//! Input layout: byte 0 picks the parser (mod 4): 0 RTP, 1 SDP, 2 SAP, 3 jitter buffer;
//! the rest is the datagram or text. For the jitter buffer the rest is a sequence of
//! packets, each a length byte and that many bytes, whose first byte's low bits also
//! pick the pull size after it.
//!
//! Checked besides "no panic": an accepted RTP packet's payload lies inside the datagram
//! and its header written back parses to the same fields; an accepted SDP keeps the
//! ranges (1..=64 channels, 1..=768000 Hz) and its text written back parses equal; an
//! accepted SAP packet written back parses equal, and SAP discovery's directory
//! (`Directory`) fed it keeps within its bound; the jitter buffer counts every packet
//! exactly once and plays only finite samples within -1..=1.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quaver_net::{
    Change, Directory, DirectoryConfig, Encoding, JitterBuffer, JitterConfig, MAX_CHANNELS, MAX_RATE, RtpPacket, SapPacket,
    SessionDescription,
};

fn rtp(data: &[u8]) {
    let Ok(p) = RtpPacket::parse(data) else {
        return;
    };
    let start = p.payload.as_ptr() as usize - data.as_ptr() as usize;
    assert!(start + p.payload.len() <= data.len());
    assert!(p.header.csrc_count <= 15);
    let mut h = p.header;
    h.extension = None;
    let mut out = vec![0u8; h.len() + p.payload.len()];
    let n = h
        .write(p.payload, &mut out)
        .expect("a parsed header writes back");
    let back = RtpPacket::parse(&out[..n]).expect("a written packet parses");
    assert_eq!(back.header, h);
    assert_eq!(back.payload, p.payload);
}

fn sdp(text: &str) {
    let Ok(d) = SessionDescription::parse(text) else {
        return;
    };
    assert!(
        (1..=MAX_CHANNELS).contains(&d.channels),
        "{} channels",
        d.channels
    );
    assert!((1..=MAX_RATE).contains(&d.rate), "{} Hz", d.rate);
    assert!(d.payload_type <= 127 && d.port != 0);
    let again = d.to_text();
    assert_eq!(SessionDescription::parse(&again), Ok(d), "{again}");
}

fn sap(data: &[u8]) {
    directory(data);
    let Ok(p) = SapPacket::parse(data) else {
        return;
    };
    let mut out = vec![0u8; data.len() + 64];
    let n = p.write(&mut out).expect("a parsed packet writes back");
    assert_eq!(SapPacket::parse(&out[..n]), Ok(p));
    sdp(p.sdp);
}

/// SAP discovery's book fed the datagram as announcements from two hosts and again a
/// second later: it never keeps more streams than its bound, and what it reports found
/// it keeps.
fn directory(data: &[u8]) {
    let mut d = Directory::new(DirectoryConfig {
        max_sessions: 1,
        timeout_ns: 500_000_000,
    });
    for (i, host) in ["10.0.0.1", "10.0.0.2"].iter().enumerate() {
        let found = d.receive(data, host.parse().unwrap(), i as u64, &[]);
        assert!(d.len() <= 1);
        if let Some(Change::Found(_, s)) = found {
            assert!((1..=MAX_CHANNELS).contains(&s.channels) && (1..=MAX_RATE).contains(&s.rate));
            assert_eq!(d.len(), 1);
        }
    }
    assert!(d.expire(1_000_000_000).len() <= 1);
    assert!(d.is_empty());
}

fn jitter(data: &[u8]) {
    let cfg = JitterConfig {
        encoding: if data.first().is_some_and(|b| b & 1 == 1) {
            Encoding::L16
        } else {
            Encoding::L24
        },
        channels: 1 + data.get(1).map_or(0, |b| (b & 3) as usize),
        payload_type: 97,
        target: 8,
        max_packet: 16,
        capacity: 0,
        fade: 4,
        // Gaps cut short past a few frames of excess, or never.
        excess: data
            .get(1)
            .filter(|b| *b & 0x80 == 0)
            .map(|b| (b >> 2 & 31) as usize),
        source: None,
    };
    let channels = cfg.channels;
    let mut jb = JitterBuffer::new(cfg).expect("valid config");
    let from = "10.0.0.1".parse().unwrap();
    let mut rest = data.get(2..).unwrap_or(&[]);
    let mut out = vec![0.0f32; 64 * channels];
    let mut arrival = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        let len = (len as usize).min(tail.len());
        let (pkt, next) = tail.split_at(len);
        rest = next;
        arrival += 8;
        if let Ok(p) = RtpPacket::parse(pkt) {
            jb.push(&p, from, arrival);
        }
        let frames = pkt.first().map_or(0, |b| (b & 31) as usize);
        let buf = &mut out[..frames * channels];
        jb.pull(buf);
        assert!(
            buf.iter()
                .all(|s| s.is_finite() && (-1.0..=1.0).contains(s))
        );
    }
    let s = jb.stats();
    let dropped = s.wrong_source
        + s.wrong_type
        + s.malformed
        + s.wrong_ssrc
        + s.duplicates
        + s.late
        + s.jumps;
    assert_eq!(s.received, s.accepted + dropped, "{s:?}");
    assert!(s.buffered <= jb.capacity() as u64);
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 4 {
        0 => rtp(rest),
        1 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                sdp(text);
            }
        }
        2 => sap(rest),
        _ => jitter(rest),
    }
});
