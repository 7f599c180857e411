use super::*;

const AES67: &str = "v=0\r\n\
o=- 1311738121 1311738122 IN IP4 192.168.1.10\r\n\
s=Living room\r\n\
c=IN IP4 239.69.0.1/32\r\n\
t=0 0\r\n\
m=audio 5004 RTP/AVP 97\r\n\
a=rtpmap:97 L24/48000/2\r\n\
a=ptime:1\r\n\
a=ts-refclk:ptp=IEEE1588-2008:00-11-22-FF-FE-33-44-55:0\r\n\
a=mediaclk:direct=0\r\n";

fn aes67() -> SessionDescription {
    SessionDescription {
        session_id: 1311738121,
        session_version: 1311738122,
        origin: "192.168.1.10".parse().unwrap(),
        name: "Living room".into(),
        address: "239.69.0.1".parse().unwrap(),
        ttl: Some(32),
        port: 5004,
        payload_type: 97,
        encoding: Encoding::L24,
        rate: 48_000,
        channels: 2,
        ptime_us: Some(1000),
        ts_refclk: Some("ptp=IEEE1588-2008:00-11-22-FF-FE-33-44-55:0".into()),
        mediaclk: Some("direct=0".into()),
    }
}

#[test]
fn aes67_description_parses_and_prints_back() {
    assert_eq!(SessionDescription::parse(AES67), Ok(aes67()));
    assert_eq!(aes67().to_text(), AES67.replace("\r\n", "\n"));
    let mut short = aes67();
    short.ptime_us = Some(125);
    assert!(short.to_text().contains("a=ptime:0.125\n"));
    assert_eq!(SessionDescription::parse(&short.to_text()), Ok(short));
}

#[test]
fn pulseaudio_style_description_with_static_type() {
    // What PulseAudio's module-rtp-send writes (LF line ends, static type 10).
    let text = "v=0\no=quaver 3 0 IN IP4 10.0.0.1\ns=PulseAudio RTP Stream on host\n\
                c=IN IP4 224.0.0.56\nt=3 0\na=recvonly\nm=audio 46000 RTP/AVP 10\n\
                a=rtpmap:10 L16/44100/2\na=type:broadcast\n";
    let d = SessionDescription::parse(text).unwrap();
    assert_eq!(
        (d.encoding, d.rate, d.channels, d.payload_type),
        (Encoding::L16, 44_100, 2, 10)
    );
    assert_eq!(d.name, "PulseAudio RTP Stream on host");
    assert_eq!(d.ttl, None);
    let text = text.replace("a=rtpmap:10 L16/44100/2\n", "");
    assert_eq!(SessionDescription::parse(&text).unwrap().channels, 2);
}

#[test]
fn first_decodable_payload_type_of_first_usable_audio_section() {
    let text = "v=0\no=- 1 1 IN IP6 ::1\ns=x\nc=IN IP6 ff02::1234\n\
                m=video 6000 RTP/AVP 31\na=rtpmap:31 H261/90000\n\
                m=audio 5006 RTP/AVP 111\na=rtpmap:111 opus/48000/2\n\
                m=audio 5008 RTP/AVP 98 96\na=rtpmap:98 opus/48000/2\na=rtpmap:96 L16/48000/8\n";
    let d = SessionDescription::parse(text).unwrap();
    assert_eq!((d.port, d.payload_type, d.channels), (5008, 96, 8));
    assert_eq!(d.address, "ff02::1234".parse::<IpAddr>().unwrap());
}

fn with(line: &str, by: &str) -> String {
    AES67.replace(line, by)
}

#[test]
fn absurd_values_are_refused_with_the_field() {
    let err = |t: &str| SessionDescription::parse(t).unwrap_err().to_string();
    assert_eq!(
        err(&with("L24/48000/2", "L24/48000/1000000000")),
        "SDP line 7: bad rtpmap channels: 1000000000 is out of range"
    );
    assert_eq!(
        err(&with("L24/48000/2", "L24/48000/65")),
        "SDP line 7: bad rtpmap channels: 65 is outside 1..=64"
    );
    assert_eq!(
        err(&with("L24/48000/2", "L24/0/2")),
        "SDP line 7: bad rtpmap rate: 0 Hz is outside 1..=768000"
    );
    assert_eq!(
        err(&with("L24/48000/2", "L24/-1/2")),
        "SDP line 7: bad rtpmap rate: '-1' is not a number"
    );
    let giant = format!("m=audio 5004 RTP/AVP{}", " 97".repeat(1000));
    assert_eq!(
        err(&with("m=audio 5004 RTP/AVP 97", &giant)),
        "SDP line 6: 1000 payload types, at most 32 accepted"
    );
    assert_eq!(
        err(&with("RTP/AVP 97", "RTP/AVP 200")),
        "SDP line 6: bad m= payload type: 200 is outside 0..=127"
    );
    assert_eq!(
        err(&with("a=ptime:1", "a=ptime:0")),
        "SDP line 8: bad ptime: 0 ms is outside 0.001..=1000"
    );
    assert_eq!(
        err(&with("a=ptime:1", "a=ptime:1.0001")),
        "SDP line 8: bad ptime: '1.0001' is not milliseconds with up to 3 decimals"
    );
    assert_eq!(
        err(&with("239.69.0.1/32", "239.69.0.1/300")),
        "SDP line 4: bad c= TTL: 300 is out of range"
    );
    assert_eq!(
        err(&with("239.69.0.1/32", "239.69.0.1/32/4")),
        "SDP line 4: bad c=: 4 addresses, only 1 supported"
    );
    assert_eq!(
        err(&with("IN IP4 239.69.0.1", "IN IP6 239.69.0.1")),
        "SDP line 4: bad c=: IP6 does not match address 239.69.0.1"
    );
    assert_eq!(
        err(&with("m=audio 5004", "m=audio 0")),
        "SDP line 6: bad m= port: 0 (stream disabled)"
    );
    assert_eq!(
        err(&with("L24/48000/2", "opus/48000/2")),
        "SDP has no audio stream in L16 or L24 (payload types offered: 97)"
    );
    assert_eq!(err(&with("s=Living room\r\n", "")), "SDP has no s= line");
    assert_eq!(
        err(&with("c=IN IP4 239.69.0.1/32\r\n", "")),
        "SDP has no c= line"
    );
    assert_eq!(
        err(&AES67.replace("v=0", "v=1")),
        "SDP does not start with v=0"
    );
    assert_eq!(
        err(&with("t=0 0", "garbage")),
        "SDP line 5: 'garbage' is not type=value"
    );
    assert_eq!(
        err(&with("s=Living room", "s=a\u{7}b")),
        "SDP line 3: bad s=: control characters"
    );
    let long = format!("s={}", "x".repeat(300));
    assert_eq!(
        err(&with("s=Living room", &long)),
        "SDP line 3: bad s=: 300 bytes, at most 255"
    );
    let huge = AES67.to_string() + &"a=x\r\n".repeat(4000);
    assert_eq!(
        err(&huge),
        format!("SDP of {} bytes, at most 16384 accepted", huge.len())
    );
}

#[test]
fn rtpmap_floods_are_not_kept() {
    // Mappings of types the m= line does not list are parsed and dropped, and a type's
    // second mapping does not replace its first.
    let flood = "a=rtpmap:1 L16/8000/1\r\n".repeat(500);
    let text = with(
        "a=rtpmap:97 L24/48000/2\r\n",
        &(flood + "a=rtpmap:97 L24/48000/2\r\na=rtpmap:97 L16/8000/1\r\n"),
    );
    assert_eq!(SessionDescription::parse(&text), Ok(aes67()));
}
