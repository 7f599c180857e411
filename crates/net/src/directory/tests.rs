use super::*;

/// What PipeWire 0.3.65's module-rtp-sink announces by default (its source.ip is
/// 0.0.0.0, so the origin is too).
fn pipewire_sdp(name: &str, id: u64) -> String {
    format!(
        "v=0\no=user {id} 0 IN IP4 0.0.0.0\ns={name}\nc=IN IP4 224.0.0.56/1\nt={id} 0\n\
         a=recvonly\na=tool:PipeWire 0.3.65\nm=audio 46000 RTP/AVP 127\n\
         a=rtpmap:127 L16/48000/2\na=type:broadcast\na=ptime:6\n"
    )
}

fn packet(kind: SapKind, hash: u16, sdp: &str) -> Vec<u8> {
    let mut out = vec![0u8; 64 + sdp.len()];
    let n = SapPacket {
        kind,
        hash,
        source: "10.0.0.2".parse().unwrap(),
        sdp,
    }
    .write(&mut out)
    .unwrap();
    out.truncate(n);
    out
}

const SEC: u64 = 1_000_000_000;

fn dir(max: usize) -> Directory {
    Directory::new(DirectoryConfig {
        max_sessions: max,
        timeout_ns: 20 * SEC,
    })
}

fn host(last: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, last])
}

#[test]
fn found_refreshed_changed_deleted_and_timed_out() {
    let mut d = dir(4);
    let sdp = pipewire_sdp("PipeWire RTP Stream on box", 7);
    let found = d.receive(&packet(SapKind::Announce, 9, &sdp), host(2), 0, &[]);
    let Some(Change::Found(key, desc)) = found else {
        panic!("not found: {found:?}");
    };
    assert_eq!(desc.name, "PipeWire RTP Stream on box");
    assert_eq!((key.sender, key.hash, key.session_id), (host(2), 9, 7));
    // Announced again: nothing changes, the timeout starts over.
    assert_eq!(
        d.receive(&packet(SapKind::Announce, 9, &sdp), host(2), 15 * SEC, &[]),
        None
    );
    assert_eq!(d.expire(30 * SEC), vec![]);
    assert_eq!(d.next_expiry(), Some(35 * SEC));
    // Another format: its receiver must be made again.
    let l24 = sdp.replace("L16/48000/2", "L24/48000/2");
    let changed = d.receive(&packet(SapKind::Announce, 9, &l24), host(2), 16 * SEC, &[]);
    assert!(
        matches!(changed, Some(Change::Changed(k, ref s)) if k == key && s.encoding == crate::Encoding::L24)
    );
    // The same SAP packet from another host is another stream.
    let other = d.receive(&packet(SapKind::Announce, 9, &sdp), host(3), 16 * SEC, &[]);
    assert!(matches!(other, Some(Change::Found(k, _)) if k.sender == host(3)));
    // A deletion carrying only the o= line ends it.
    let bye = "v=0\no=user 7 0 IN IP4 0.0.0.0\n";
    assert_eq!(
        d.receive(&packet(SapKind::Delete, 9, bye), host(2), 17 * SEC, &[]),
        Some(Change::Gone(key, GoneReason::Deleted))
    );
    // The other one times out.
    assert_eq!(d.expire(36 * SEC - 1), vec![]);
    assert_eq!(d.expire(36 * SEC).len(), 1);
    assert!(d.is_empty());
    assert_eq!(d.next_expiry(), None);
    let s = d.stats();
    assert_eq!(
        (s.found, s.refreshed, s.changed, s.deleted, s.timed_out),
        (2, 1, 1, 1, 1)
    );
}

#[test]
fn floods_unknown_deletions_absurd_sdp_and_own_streams_are_counted_and_dropped() {
    let mut d = dir(4);
    // A flood of 1000 distinct streams: four are kept.
    let mut found = 0;
    for i in 0..1000u64 {
        let sdp = pipewire_sdp(&format!("flood {i}"), i);
        if let Some(Change::Found(..)) =
            d.receive(&packet(SapKind::Announce, i as u16, &sdp), host(9), i, &[])
        {
            found += 1;
        }
    }
    assert_eq!((found, d.len(), d.stats().over_limit), (4, 4, 996));
    // Deleting streams nobody announced, or one announced by another host.
    for i in 500..600u64 {
        let bye = format!("v=0\no=- {i} 0 IN IP4 0.0.0.0\n");
        assert_eq!(
            d.receive(&packet(SapKind::Delete, i as u16, &bye), host(9), 0, &[]),
            None
        );
    }
    let bye = "v=0\no=- 0 0 IN IP4 0.0.0.0\n";
    assert_eq!(
        d.receive(&packet(SapKind::Delete, 0, bye), host(10), 0, &[]),
        None
    );
    assert_eq!((d.stats().unknown_deletions, d.len()), (101, 4));
    // Absurd descriptions and broken packets.
    let mut d = dir(4);
    let base = pipewire_sdp("x", 1);
    let absurd = [
        base.replace("L16/48000/2", "L16/48000/1000000000"),
        base.replace("L16/48000/2", "L16/0/2"),
        base.replace("RTP/AVP 127", &format!("RTP/AVP {}", "96 ".repeat(500))),
        base.replace("L16", "opus"),
        base.replace("c=IN IP4 224.0.0.56/1\n", ""),
        base.replace("o=user 1 0 IN IP4 0.0.0.0\n", ""),
        base.replace("46000", "0"),
    ];
    for sdp in &absurd {
        assert_eq!(
            d.receive(&packet(SapKind::Announce, 1, sdp), host(2), 0, &[]),
            None,
            "{sdp}"
        );
    }
    // Truncated, version 2, encrypted, authentication past the end, 20 KiB of SDP.
    let mut huge = vec![0x20, 0, 0, 0, 10, 0, 0, 2];
    huge.extend_from_slice(format!("{base}{}", "a=x\n".repeat(5000)).as_bytes());
    let broken: [&[u8]; 5] = [
        &[0x20],
        &[0x40, 0, 0, 0],
        &[0x22, 0, 0, 0, 1, 2, 3, 4],
        &[0x20, 200, 0, 0, 1, 2, 3, 4],
        &huge,
    ];
    for b in broken {
        assert_eq!(d.receive(b, host(2), 0, &[]), None);
    }
    let s = d.stats();
    assert_eq!((s.bad_sdp, s.bad_sap, d.len()), (absurd.len() as u64, 5, 0));
    // Our own announcements, heard through multicast loopback.
    assert_eq!(
        d.receive(&packet(SapKind::Announce, 1, &base), host(2), 0, &[1]),
        None
    );
    assert_eq!((d.stats().own, d.len()), (1, 0));
}
