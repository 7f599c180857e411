//! Host-side tests: no sequencer device needed. alsa-lib's `snd_midi_event_*` coder
//! works without one, so the byte ↔ event round trips run here; opening the sequencer
//! itself fails with a typed error on a machine without /dev/snd/seq.

use super::codec::{Assembler, Coder, MalformedMidi, Sysex, check_message, split_messages};
use super::ffi::{EV_SYSEX, SeqEvent, seq_lib};
use super::*;

fn lib() -> Option<&'static ffi::SeqLib> {
    match seq_lib() {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("SKIPPED: alsa-lib not loadable here ({e})");
            None
        }
    }
}

#[test]
fn complete_messages_pass_the_check() {
    for ok in [
        &[0x90, 0x3C, 0x7F][..],
        &[0x80, 0x3C, 0x00],
        &[0xC5, 0x10],
        &[0xE0, 0x00, 0x40],
        &[0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7],
        &[0xF0, 0xF7],
        &[0xF8],
        &[0xFE],
        &[0xF2, 0x10, 0x20],
        &[0xF3, 0x01],
        &[0xF6],
    ] {
        assert_eq!(check_message(ok), Ok(()), "{ok:02x?}");
    }
}

#[test]
fn malformed_messages_are_refused_with_the_reason() {
    use MalformedMidi::*;
    let cases: [(&[u8], MalformedMidi); 9] = [
        (&[], Empty),
        (&[0x3C, 0x7F], NoStatus(0x3C)),
        (
            &[0x90, 0x3C],
            WrongLength {
                status: 0x90,
                want: 2,
                got: 1,
            },
        ),
        (
            &[0xC0, 1, 2],
            WrongLength {
                status: 0xC0,
                want: 1,
                got: 2,
            },
        ),
        (&[0x90, 0x3C, 0x90], StatusInData { byte: 0x90, at: 2 }),
        (&[0xF4], BadStatus(0xF4)),
        (&[0xF7], BadStatus(0xF7)),
        (&[0xF0, 1, 2], UnterminatedSysex),
        (&[0xF0, 1, 0x90, 0xF7], StatusInData { byte: 0x90, at: 2 }),
    ];
    for (bytes, want) in cases {
        assert_eq!(check_message(bytes), Err(want), "{bytes:02x?}");
    }
    assert_eq!(
        check_message(&[0x90, 0x3C]).unwrap_err().to_string(),
        "status 0x90 takes 2 data byte(s), got 1"
    );
}

#[test]
fn decoded_bytes_split_into_messages() {
    let bytes = [0xB0, 0x07, 0x10, 0xB0, 0x27, 0x05, 0xF8, 0xC1, 0x03];
    let msgs: Vec<&[u8]> = split_messages(&bytes).collect();
    assert_eq!(
        msgs,
        [
            &[0xB0, 0x07, 0x10][..],
            &[0xB0, 0x27, 0x05],
            &[0xF8],
            &[0xC1, 0x03]
        ]
    );
    // A truncated tail comes out as it is rather than reading past the end.
    assert_eq!(
        split_messages(&[0x90, 0x3C]).collect::<Vec<_>>(),
        [&[0x90, 0x3C][..]]
    );
}

#[test]
fn every_kind_of_message_round_trips_through_alsa_libs_coder() {
    let Some(lib) = lib() else { return };
    let mut enc = Coder::new(lib, 256).unwrap();
    let mut dec = Coder::new(lib, 16).unwrap();
    for msg in [
        &[0x90, 0x3C, 0x7F][..],
        &[0x80, 0x3C, 0x00],
        &[0xA2, 0x3C, 0x20],
        &[0xB3, 0x07, 0x64],
        &[0xC4, 0x05],
        &[0xD5, 0x40],
        &[0xE6, 0x00, 0x40],
        &[0xF2, 0x10, 0x20],
        &[0xF3, 0x02],
        &[0xF6],
        &[0xF8],
        &[0xFA],
        &[0xFC],
    ] {
        let mut ev = SeqEvent::default();
        enc.encode(msg, &mut ev).unwrap();
        let mut out = [0u8; 32];
        let got = dec
            .decode(&ev, &mut out)
            .unwrap_or_else(|| panic!("{msg:02x?}"));
        assert_eq!(got, msg, "round trip of {msg:02x?}");
    }
}

#[test]
fn running_status_is_expanded_and_note_on_velocity_zero_kept() {
    let Some(lib) = lib() else { return };
    let mut enc = Coder::new(lib, 16).unwrap();
    let mut dec = Coder::new(lib, 16).unwrap();
    // Two note-ons in a row from the same channel: each decodes with its status byte.
    for msg in [[0x91, 0x40, 0x50], [0x91, 0x41, 0x00]] {
        let mut ev = SeqEvent::default();
        enc.encode(&msg, &mut ev).unwrap();
        let mut out = [0u8; 8];
        assert_eq!(dec.decode(&ev, &mut out).unwrap(), msg);
    }
}

#[test]
fn sysex_encodes_to_one_variable_event_with_its_bytes() {
    let Some(lib) = lib() else { return };
    let mut enc = Coder::new(lib, 64).unwrap();
    let msg = [0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7];
    let mut ev = SeqEvent::default();
    enc.encode(&msg, &mut ev).unwrap();
    assert_eq!(ev.kind, EV_SYSEX);
    assert!(ev.is_variable());
    // SAFETY: the encoder's buffer is alive until its next use.
    assert_eq!(unsafe { ev.ext() }, msg);
    // Exactly as long as the encoder holds: still one event.
    let mut exact = Coder::new(lib, 6).unwrap();
    exact.encode(&msg, &mut ev).unwrap();
    // SAFETY: as above.
    assert_eq!((ev.kind, unsafe { ev.ext() }), (EV_SYSEX, &msg[..]));
    // Longer than the encoder holds: alsa-lib hands out a first chunk, which `encode`
    // reports as not one event rather than sending half a message.
    let mut small = Coder::new(lib, 4).unwrap();
    let err = small.encode(&msg, &mut ev).unwrap_err();
    assert!(err.contains("of 6 bytes"), "{err}");
}

#[test]
fn sysex_chunks_are_reassembled_and_oversized_ones_dropped() {
    let mut a = Assembler::new(8);
    let p = PortId {
        client: 20,
        port: 0,
    };
    let q = PortId {
        client: 21,
        port: 0,
    };
    assert_eq!(a.push(p, &[0xF0, 1, 2]), Sysex::Partial);
    // Another port's chunks interleave without mixing.
    assert_eq!(
        a.push(q, &[0xF0, 9, 0xF7]),
        Sysex::Complete(&[0xF0, 9, 0xF7])
    );
    assert_eq!(a.push(p, &[3, 4]), Sysex::Partial);
    assert_eq!(
        a.push(p, &[5, 0xF7]),
        Sysex::Complete(&[0xF0, 1, 2, 3, 4, 5, 0xF7])
    );
    // A continuation with no start (lost): dropped.
    assert_eq!(a.push(p, &[6, 0xF7]), Sysex::Dropped);
    // Over the 8-byte bound: everything up to F7 dropped, once.
    assert_eq!(a.push(p, &[0xF0, 1, 2, 3, 4]), Sysex::Partial);
    assert_eq!(a.push(p, &[5, 6, 7, 8]), Sysex::Partial);
    assert_eq!(a.push(p, &[9, 0xF7]), Sysex::Dropped);
    // And the next one is fine again; exactly the bound fits.
    let whole = [0xF0, 1, 2, 3, 4, 5, 6, 0xF7];
    assert_eq!(a.push(p, &whole), Sysex::Complete(&whole));
    // A port that went away forgets its partial message.
    assert_eq!(a.push(p, &[0xF0, 1]), Sysex::Partial);
    a.forget(p);
    assert_eq!(a.push(p, &[2, 0xF7]), Sysex::Dropped);
}

#[test]
fn port_ids_parse_and_print_as_client_colon_port() {
    let p: PortId = "20:0".parse().unwrap();
    assert_eq!(
        p,
        PortId {
            client: 20,
            port: 0
        }
    );
    assert_eq!(p.to_string(), "20:0");
    assert!("20".parse::<PortId>().unwrap_err().contains("client:port"));
    assert!("300:0".parse::<PortId>().unwrap_err().contains("0-255"));
}

#[test]
fn without_a_sequencer_device_open_fails_with_a_typed_error() {
    if std::path::Path::new("/dev/snd/seq").exists() {
        eprintln!("SKIPPED: this machine has /dev/snd/seq (the guest test covers it)");
        return;
    }
    match SeqBridge::open(SeqConfig::default()) {
        Err(SeqError::NoSequencer(why)) => {
            let text = SeqError::NoSequencer(why).to_string();
            assert!(
                text.starts_with("no ALSA sequencer: /dev/snd/seq does not exist"),
                "{text}"
            );
        }
        Err(SeqError::Unavailable(why)) => eprintln!("alsa-lib unavailable here: {why}"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("opened a sequencer with no /dev/snd/seq"),
    }
}
