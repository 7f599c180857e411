//! JACK MIDI buffers: the `jack_midi_*` API on a buffer format of our own.
//!
//! A MIDI port's buffer is private to the process thread: each cycle it is filled from
//! the port's event list in the shared block (inputs, [`fill_from_list`]) or emptied
//! and, after the process callback, written back to it (outputs, [`to_list`]), so the
//! server never sees this format and the application never sees the wire's. Times,
//! order and space are checked as jackd2 does, with its error codes (`-EINVAL` for a
//! time out of range or out of order, `-ENOBUFS` when the event does not fit, which
//! also counts it lost).
//!
//! Layout (private to this library; applications only hold `void *`): a 24-byte
//! header (`magic`, `nframes`, `count`, `lost`, `data_start`, `capacity`, all u32),
//! then `count` 12-byte event records (`time`, `size`, `offset`) growing upwards, and
//! event bytes growing downwards from the end.

use std::ffi::{c_int, c_void};

use quaver_protocol::midi as wire;

use crate::guard;
use crate::types::*;

const MAGIC: u32 = u32::from_le_bytes(*b"QJMB");
const HEADER: usize = 24;
const RECORD: usize = 12;

fn rd(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn wr(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

/// Formats `b` as an empty MIDI buffer for cycles of up to `nframes` frames.
pub fn init_buffer(b: &mut [u8], nframes: u32) {
    if b.len() < HEADER {
        return;
    }
    wr(b, 0, MAGIC);
    wr(b, 4, nframes);
    wr(b, 8, 0);
    wr(b, 12, 0);
    wr(b, 16, b.len() as u32);
    wr(b, 20, b.len() as u32);
}

/// Empties the buffer for a cycle of `nframes` frames, lost count included (jackd2's
/// `JackMidiBuffer::Reset`).
pub fn clear_for_cycle(b: &mut [u8], nframes: u32) {
    if b.len() >= HEADER && rd(b, 0) == MAGIC {
        wr(b, 4, nframes);
        wr(b, 8, 0);
        wr(b, 12, 0);
        wr(b, 16, b.len() as u32);
    }
}

/// Fills the buffer for a cycle of `nframes` frames with the events of a plain list
/// (one `read_input_midi` checked); its lost count is the list's and what did not fit.
pub fn fill_from_list(b: &mut [u8], nframes: u32, list: &[u32]) {
    clear_for_cycle(b, nframes);
    if b.len() < HEADER || rd(b, 0) != MAGIC {
        return;
    }
    for e in wire::events(list) {
        if let Ok(at) = reserve(b, e.time, e.data.len()) {
            b[at..at + e.data.len()].copy_from_slice(e.data);
        }
    }
    let lost = rd(b, 12).saturating_add(wire::lost(list));
    wr(b, 12, lost);
}

/// Writes the buffer's events as a plain list for the shared block. The application
/// may have scribbled on the buffer: every record is bounded here, and the server
/// checks times and order again.
pub fn to_list(b: &[u8], list: &mut [u32]) {
    wire::clear(list);
    if b.len() < HEADER || rd(b, 0) != MAGIC {
        return;
    }
    let count = (rd(b, 8) as usize).min((b.len() - HEADER) / RECORD);
    for i in 0..count {
        let rec = HEADER + i * RECORD;
        let (time, size, off) = (rd(b, rec), rd(b, rec + 4) as usize, rd(b, rec + 8) as usize);
        match off.checked_add(size) {
            Some(end) if end <= b.len() => {
                wire::push(list, time, &b[off..end]);
            }
            _ => wire::add_lost(list, 1),
        }
    }
    wire::add_lost(list, rd(b, 12));
}

/// The buffer behind an application's `void *`, if it is one of ours.
///
/// # Safety
/// `p` is NULL or points to a buffer this library handed out (or any readable memory
/// of at least `HEADER` bytes, which is then rejected by the magic check).
unsafe fn buffer<'a>(p: *mut c_void) -> Option<&'a mut [u8]> {
    if p.is_null() {
        return None;
    }
    let head = p.cast::<u8>();
    // SAFETY: per the contract at least the header is readable.
    let (magic, cap) = unsafe {
        (
            head.cast::<u32>().read_unaligned(),
            head.add(20).cast::<u32>().read_unaligned(),
        )
    };
    if magic != MAGIC || (cap as usize) < HEADER {
        return None;
    }
    // SAFETY: our buffers are `cap` bytes long.
    Some(unsafe { std::slice::from_raw_parts_mut(head, cap as usize) })
}

fn free_space(b: &[u8]) -> usize {
    let count = rd(b, 8) as usize;
    let start = rd(b, 16) as usize;
    start.saturating_sub(HEADER + count * RECORD)
}

/// Room for an event of `size` bytes at `time`: its offset, or jackd2's error code
/// (`-EINVAL`: time out of the cycle or before the last event; `-ENOBUFS`: no room,
/// counted lost).
fn reserve(b: &mut [u8], time: u32, size: usize) -> Result<usize, c_int> {
    let count = rd(b, 8) as usize;
    let nframes = rd(b, 4);
    if time >= nframes {
        return Err(-libc::EINVAL);
    }
    if count > 0 && rd(b, HEADER + (count - 1) * RECORD) > time {
        // JACK requires events in time order.
        return Err(-libc::EINVAL);
    }
    if free_space(b) < RECORD + size {
        let lost = rd(b, 12);
        wr(b, 12, lost.saturating_add(1));
        return Err(-libc::ENOBUFS);
    }
    let start = rd(b, 16) as usize - size;
    let rec = HEADER + count * RECORD;
    wr(b, rec, time);
    wr(b, rec + 4, size as u32);
    wr(b, rec + 8, start as u32);
    wr(b, 8, count as u32 + 1);
    wr(b, 16, start as u32);
    Ok(start)
}

/// `jack_midi_get_event_count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_get_event_count(port_buffer: *mut c_void) -> u32 {
    // SAFETY: see `buffer`.
    guard(0, || unsafe { buffer(port_buffer) }.map_or(0, |b| rd(b, 8)))
}

/// `jack_midi_event_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_event_get(
    event: *mut jack_midi_event_t,
    port_buffer: *mut c_void,
    event_index: u32,
) -> c_int {
    guard(-libc::EINVAL, || {
        // SAFETY: see `buffer`.
        let Some(b) = (unsafe { buffer(port_buffer) }) else {
            return -libc::EINVAL;
        };
        if event.is_null() {
            return -libc::EINVAL;
        }
        // As jackd2: an index past the events is -ENOBUFS.
        if event_index >= rd(b, 8) {
            return -libc::ENOBUFS;
        }
        let rec = HEADER + event_index as usize * RECORD;
        let (time, size, off) = (rd(b, rec), rd(b, rec + 4), rd(b, rec + 8) as usize);
        // SAFETY: `event` is the caller's, checked non-NULL.
        unsafe {
            *event = jack_midi_event_t {
                time,
                size: size as usize,
                buffer: b.as_mut_ptr().add(off),
            };
        }
        0
    })
}

/// `jack_midi_clear_buffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_clear_buffer(port_buffer: *mut c_void) {
    guard((), || {
        // SAFETY: see `buffer`.
        if let Some(b) = unsafe { buffer(port_buffer) } {
            let n = rd(b, 4);
            clear_for_cycle(b, n);
        }
    })
}

/// `jack_midi_reset_buffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_reset_buffer(port_buffer: *mut c_void) {
    guard((), || {
        // SAFETY: see `buffer`.
        if let Some(b) = unsafe { buffer(port_buffer) } {
            let n = rd(b, 4);
            clear_for_cycle(b, n);
            wr(b, 12, 0);
        }
    })
}

/// `jack_midi_max_event_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_max_event_size(port_buffer: *mut c_void) -> usize {
    guard(0, || {
        // SAFETY: see `buffer`.
        unsafe { buffer(port_buffer) }.map_or(0, |b| free_space(b).saturating_sub(RECORD))
    })
}

/// `jack_midi_event_reserve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_event_reserve(
    port_buffer: *mut c_void,
    time: jack_nframes_t,
    data_size: usize,
) -> *mut u8 {
    guard(std::ptr::null_mut(), || {
        // SAFETY: see `buffer`.
        let Some(b) = (unsafe { buffer(port_buffer) }) else {
            return std::ptr::null_mut();
        };
        match reserve(b, time, data_size) {
            // SAFETY: `at` is inside the buffer.
            Ok(at) => unsafe { b.as_mut_ptr().add(at) },
            Err(_) => std::ptr::null_mut(),
        }
    })
}

/// `jack_midi_event_write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_event_write(
    port_buffer: *mut c_void,
    time: jack_nframes_t,
    data: *const u8,
    data_size: usize,
) -> c_int {
    guard(-libc::ENOBUFS, || {
        // SAFETY: see `buffer`.
        let Some(b) = (unsafe { buffer(port_buffer) }) else {
            return -libc::EINVAL;
        };
        if data.is_null() && data_size > 0 {
            return -libc::EINVAL;
        }
        match reserve(b, time, data_size) {
            Ok(at) => {
                if data_size > 0 {
                    // SAFETY: the caller's `data_size` bytes; `at..at+size` is ours.
                    unsafe {
                        std::ptr::copy_nonoverlapping(data, b.as_mut_ptr().add(at), data_size)
                    };
                }
                0
            }
            Err(e) => e,
        }
    })
}

/// `jack_midi_get_lost_event_count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_midi_get_lost_event_count(port_buffer: *mut c_void) -> u32 {
    // SAFETY: see `buffer`.
    guard(0, || {
        unsafe { buffer(port_buffer) }.map_or(0, |b| rd(b, 12))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_in_order_within_space() {
        let mut b = vec![0u8; 128];
        init_buffer(&mut b, 64);
        let p = b.as_mut_ptr().cast::<c_void>();
        // SAFETY: a buffer formatted above.
        unsafe {
            assert_eq!(jack_midi_get_event_count(p), 0);
            assert_eq!(jack_midi_event_write(p, 3, [0x90, 60, 100].as_ptr(), 3), 0);
            // jackd2's codes: out of order or out of the cycle -EINVAL, no room -ENOBUFS.
            assert_eq!(
                jack_midi_event_write(p, 1, [0x80, 60, 0].as_ptr(), 3),
                -libc::EINVAL
            );
            assert_eq!(
                jack_midi_event_write(p, 64, [0x80].as_ptr(), 1),
                -libc::EINVAL
            );
            assert_eq!(jack_midi_get_lost_event_count(p), 0);
            let r = jack_midi_event_reserve(p, 10, 2);
            assert!(!r.is_null());
            *r = 0xC0;
            *r.add(1) = 5;
            assert_eq!(jack_midi_get_event_count(p), 2);
            let mut ev = std::mem::zeroed::<jack_midi_event_t>();
            assert_eq!(jack_midi_event_get(&mut ev, p, 0), 0);
            assert_eq!((ev.time, ev.size), (3, 3));
            assert_eq!(std::slice::from_raw_parts(ev.buffer, 3), &[0x90, 60, 100]);
            assert_eq!(jack_midi_event_get(&mut ev, p, 1), 0);
            assert_eq!(std::slice::from_raw_parts(ev.buffer, 2), &[0xC0, 5]);
            assert_eq!(jack_midi_event_get(&mut ev, p, 2), -libc::ENOBUFS);
            // 128 - 24 header - 2 records - 5 bytes = 75 free; one record more is 12.
            assert_eq!(jack_midi_max_event_size(p), 75 - 12);
            assert!(jack_midi_event_reserve(p, 20, 70).is_null());
            let big = [0u8; 70];
            assert_eq!(
                jack_midi_event_write(p, 20, big.as_ptr(), 70),
                -libc::ENOBUFS
            );
            assert_eq!(jack_midi_get_lost_event_count(p), 2);
            jack_midi_clear_buffer(p);
            assert_eq!(jack_midi_get_event_count(p), 0);
            assert_eq!(jack_midi_get_lost_event_count(p), 0);
            let mut junk = [0u8; 64];
            assert_eq!(jack_midi_get_event_count(junk.as_mut_ptr().cast()), 0);
            assert_eq!(jack_midi_get_event_count(std::ptr::null_mut()), 0);
            assert_eq!(
                jack_midi_event_write(junk.as_mut_ptr().cast(), 0, big.as_ptr(), 1),
                -libc::EINVAL
            );
        }
    }

    #[test]
    fn buffers_convert_to_and_from_wire_lists() {
        let mut b = vec![0u8; 256];
        init_buffer(&mut b, 64);
        let p = b.as_mut_ptr().cast::<c_void>();
        // SAFETY: a buffer formatted above.
        unsafe {
            jack_midi_event_write(p, 2, [0x90, 60, 100].as_ptr(), 3);
            jack_midi_event_write(p, 5, [0xF0, 1, 2, 3, 4, 0xF7].as_ptr(), 6);
        }
        let mut list = vec![0u32; 64];
        to_list(&b, &mut list);
        let mut back = vec![0u8; 256];
        init_buffer(&mut back, 64);
        fill_from_list(&mut back, 64, &list);
        assert_eq!(rd(&back, 8), 2);
        let evs: Vec<(u32, Vec<u8>)> = wire::events(&list)
            .map(|e| (e.time, e.data.to_vec()))
            .collect();
        assert_eq!(
            evs,
            vec![(2, vec![0x90, 60, 100]), (5, vec![0xF0, 1, 2, 3, 4, 0xF7])]
        );
        // A buffer the application scribbled on converts to what stays in bounds.
        wr(&mut b, 8, 1000);
        wr(&mut b, HEADER + 4, 1000);
        to_list(&b, &mut list);
        assert!(wire::count(&list) <= ((256 - HEADER) / RECORD) as u32);
        assert!(wire::lost(&list) >= 1);
    }
}
