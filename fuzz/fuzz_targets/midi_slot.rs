//! Fuzzes `quaver_protocol::midi::read_list`, the server's reading of a MIDI port's slot
//! that a callback client wrote (any bytes at all), into engine lists of any length.
//!
//! Input layout: bytes 0-1 = the cycle's frames (u16 LE, 0 allowed), byte 2 = the
//! length of the list read into (words, from 0), then the slot's bytes (a partial last
//! word is zero-padded).
//!
//! Checked: the list read is well formed — exactly `count` events iterate, within the
//! list, each time below `frames` and not before the one before — every event the
//! slot claimed is either in it or counted lost, and writing it into a slot and reading
//! it back gives the same list with nothing dropped.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quaver_protocol::midi::{count, events, lost, read_list, write_list};
use std::sync::atomic::AtomicU32;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let frames = u16::from_le_bytes([data[0], data[1]]) as u32;
    let out_len = data[2] as usize * 4;
    let slot: Vec<AtomicU32> = data[3..]
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            AtomicU32::new(u32::from_le_bytes(w))
        })
        .collect();
    let mut out = vec![0xA5A5_A5A5u32; out_len];
    let dropped = read_list(&slot, frames, &mut out);
    let n = count(&out);
    let mut last = 0;
    let mut seen = 0u32;
    for e in events(&out) {
        assert!(e.time < frames, "time {} not below {frames}", e.time);
        assert!(e.time >= last, "time {} before {last}", e.time);
        last = e.time;
        seen += 1;
    }
    assert_eq!(seen, n, "every counted event iterates");
    if slot.len() >= 4 && out.len() >= 4 {
        let claimed = slot[0].load(std::sync::atomic::Ordering::Relaxed);
        let reported = slot[1].load(std::sync::atomic::Ordering::Relaxed);
        assert!(dropped <= claimed);
        // What was claimed is delivered or lost (losses saturate).
        let accounted = (n as u64) + (lost(&out) as u64);
        assert!(
            accounted >= (claimed as u64).min(u32::MAX as u64) || lost(&out) == u32::MAX,
            "{claimed} claimed, {n} delivered, {} lost (reported {reported})",
            lost(&out)
        );
    }
    // A list the server made survives the slot unchanged.
    let again: Vec<AtomicU32> = (0..out.len().max(4)).map(|_| AtomicU32::new(0)).collect();
    write_list(&again, &out);
    let mut back = vec![0u32; out.len()];
    assert_eq!(read_list(&again, frames, &mut back), 0);
    let a: Vec<_> = events(&out).collect();
    let b: Vec<_> = events(&back).collect();
    assert_eq!(a, b);
    assert_eq!(lost(&back), lost(&out));
});
