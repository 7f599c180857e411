//! A structural check of a tagstruct before it is decoded.
//!
//! The `pulseaudio` crate allocates an "arbitrary" blob with the length taken from the
//! wire before reading it, so a 10-byte packet could make it allocate 4 GiB. Walking the
//! packet once and checking that every length stays inside it makes every later
//! allocation bounded by the packet size (itself capped by the framing).

/// Checks that `data` is a sequence of well-formed tags whose lengths stay in bounds.
pub fn check(data: &[u8]) -> Result<(), String> {
    let mut i = 0;
    let need = |i: usize, n: usize| -> Result<(), String> {
        if data.len() - i < n {
            Err(format!("tagstruct truncated at byte {i}"))
        } else {
            Ok(())
        }
    };
    while i < data.len() {
        let tag = data[i];
        i += 1;
        let len = match tag {
            b't' => match data[i..].iter().position(|&b| b == 0) {
                Some(p) => p + 1,
                None => return Err(format!("unterminated string at byte {}", i - 1)),
            },
            // Null string, booleans, and markers whose contents are ordinary tags
            // (proplist entries up to a null string; format info = u8 + proplist).
            b'N' | b'1' | b'0' | b'P' | b'f' => 0,
            b'B' => 1,
            b'L' | b'V' => 4,
            b'R' | b'r' | b'T' | b'U' => 8,
            b'a' => 6,
            b'x' => {
                need(i, 4)?;
                let n = u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
                4usize
                    .checked_add(n as usize)
                    .ok_or_else(|| "arbitrary length overflows".to_string())?
            }
            b'm' => {
                need(i, 1)?;
                1 + data[i] as usize
            }
            b'v' => {
                need(i, 1)?;
                1 + 4 * data[i] as usize
            }
            other => return Err(format!("unknown tag 0x{other:02x} at byte {}", i - 1)),
        };
        need(i, len)?;
        i += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_real_command() {
        let mut buf = Vec::new();
        pulseaudio::protocol::write_command_message(
            &mut buf,
            7,
            &pulseaudio::protocol::Command::Auth(pulseaudio::protocol::AuthParams {
                version: 35,
                supports_shm: true,
                supports_memfd: true,
                cookie: vec![0; 256],
            }),
            35,
        )
        .unwrap();
        check(&buf[20..]).unwrap();
    }

    /// Random and mutated packets through the whole decode path: no panic, no huge
    /// allocation (a deterministic stand-in for the cargo-fuzz target in `fuzz/`).
    #[test]
    fn random_and_mutated_packets_decode_safely() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut valid = Vec::new();
        for cmd in [
            pulseaudio::protocol::Command::GetServerInfo,
            pulseaudio::protocol::Command::Auth(pulseaudio::protocol::AuthParams {
                version: 35,
                supports_shm: false,
                supports_memfd: false,
                cookie: vec![7; 256],
            }),
            pulseaudio::protocol::Command::CreatePlaybackStream(Default::default()),
            pulseaudio::protocol::Command::CreateRecordStream(Default::default()),
        ] {
            let mut b = Vec::new();
            pulseaudio::protocol::write_command_message(&mut b, 1, &cmd, 35).unwrap();
            valid.push(b);
        }
        valid.push(extension_write_packet());
        for i in 0..20_000 {
            let mut p = valid[i % valid.len()].clone();
            // Mostly mutate the payload so the codec, not the framing, sees the damage.
            let from = if i % 2 == 0 { 20 } else { 0 };
            for _ in 0..(rnd() % 8) {
                let at = from + (rnd() as usize) % (p.len() - from);
                p[at] = rnd() as u8;
            }
            if i % 5 == 0 {
                let cut = 20 + (rnd() as usize) % (p.len() - 20);
                p.truncate(cut);
                let len = (cut - 20) as u32;
                p[..4].copy_from_slice(&len.to_be_bytes());
            }
            if i % 7 == 0 {
                p = (0..(rnd() % 64)).map(|_| rnd() as u8).collect();
            }
            crate::decode_stream_for_fuzzing(&p);
        }
    }

    /// A stream-restore WRITE as libpulse frames it: the one payload the codec leaves to
    /// our own parser.
    fn extension_write_packet() -> Vec<u8> {
        use pulseaudio::protocol::{ChannelMap, ChannelVolume, CommandTag, TagStructWriter};
        let mut payload = Vec::new();
        let mut ts = TagStructWriter::new(&mut payload, 35);
        ts.write_u32(CommandTag::Extension as u32).unwrap();
        ts.write_u32(1).unwrap();
        ts.write_u32(u32::MAX).unwrap();
        ts.write_string(Some(c"module-stream-restore")).unwrap();
        for v in [2, 2] {
            ts.write_u32(v).unwrap();
        }
        ts.write_bool(true).unwrap();
        ts.write_string(Some(c"sink-input-by-media-role:event"))
            .unwrap();
        ts.write(ChannelMap::stereo()).unwrap();
        ts.write(ChannelVolume::norm(2)).unwrap();
        ts.write_string(Some(c"null-sink")).unwrap();
        ts.write_bool(false).unwrap();
        let mut p = (payload.len() as u32).to_be_bytes().to_vec();
        p.extend_from_slice(&u32::MAX.to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(&payload);
        p
    }

    #[test]
    fn refuses_huge_arbitrary_and_garbage() {
        assert!(check(b"x\xff\xff\xff\xff").is_err());
        assert!(check(b"L\x00\x00").is_err());
        assert!(check(b"tabc").is_err());
        assert!(check(b"Z").is_err());
        assert!(check(b"v\x20").is_err());
        check(b"").unwrap();
    }
}
