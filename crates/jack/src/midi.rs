//! JACK MIDI buffers: the `jack_midi_*` API on a buffer format of our own.
//!
//! MIDI does not travel through the quaver graph yet, so a MIDI input port always
//! holds zero events and what a client writes to a MIDI output port is dropped at the
//! end of the cycle — but the API is complete and valid: events written can be read
//! back, ordering and space are checked as JACK does.
//!
//! Layout (private to this library; applications only hold `void *`): a 24-byte
//! header (`magic`, `nframes`, `count`, `lost`, `data_start`, `capacity`, all u32),
//! then `count` 12-byte event records (`time`, `size`, `offset`) growing upwards, and
//! event bytes growing downwards from the end.

use std::ffi::{c_int, c_void};

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

/// Empties the buffer for a cycle of `nframes` frames, keeping the lost count.
pub fn clear_for_cycle(b: &mut [u8], nframes: u32) {
    if b.len() >= HEADER && rd(b, 0) == MAGIC {
        wr(b, 4, nframes);
        wr(b, 8, 0);
        wr(b, 16, b.len() as u32);
    }
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

fn reserve(b: &mut [u8], time: u32, size: usize) -> Option<usize> {
    let count = rd(b, 8) as usize;
    let nframes = rd(b, 4);
    if time >= nframes || size == 0 {
        return None;
    }
    if count > 0 && rd(b, HEADER + (count - 1) * RECORD) > time {
        // JACK requires events in time order.
        return None;
    }
    if free_space(b) < RECORD + size {
        let lost = rd(b, 12);
        wr(b, 12, lost.wrapping_add(1));
        return None;
    }
    let start = rd(b, 16) as usize - size;
    let rec = HEADER + count * RECORD;
    wr(b, rec, time);
    wr(b, rec + 4, size as u32);
    wr(b, rec + 8, start as u32);
    wr(b, 8, count as u32 + 1);
    wr(b, 16, start as u32);
    Some(start)
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
    guard(libc::ENODATA, || {
        // SAFETY: see `buffer`.
        let Some(b) = (unsafe { buffer(port_buffer) }) else {
            return libc::EINVAL;
        };
        if event.is_null() {
            return libc::EINVAL;
        }
        if event_index >= rd(b, 8) {
            return libc::ENODATA;
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
            Some(at) => unsafe { b.as_mut_ptr().add(at) },
            None => std::ptr::null_mut(),
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
    guard(libc::ENOBUFS, || {
        // SAFETY: see `buffer`.
        let Some(b) = (unsafe { buffer(port_buffer) }) else {
            return libc::EINVAL;
        };
        if data.is_null() {
            return libc::EINVAL;
        }
        match reserve(b, time, data_size) {
            Some(at) => {
                // SAFETY: the caller's `data_size` bytes; `at..at+size` is ours.
                unsafe { std::ptr::copy_nonoverlapping(data, b.as_mut_ptr().add(at), data_size) };
                0
            }
            None => libc::ENOBUFS,
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
            assert_eq!(
                jack_midi_event_write(p, 1, [0x80, 60, 0].as_ptr(), 3),
                libc::ENOBUFS
            );
            assert_eq!(
                jack_midi_event_write(p, 64, [0x80].as_ptr(), 1),
                libc::ENOBUFS
            );
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
            assert_eq!(jack_midi_event_get(&mut ev, p, 2), libc::ENODATA);
            // 128 - 24 header - 2 records - 5 bytes = 75 free; one record more is 12.
            assert_eq!(jack_midi_max_event_size(p), 75 - 12);
            assert!(jack_midi_event_reserve(p, 20, 70).is_null());
            assert_eq!(jack_midi_get_lost_event_count(p), 1);
            jack_midi_clear_buffer(p);
            assert_eq!(jack_midi_get_event_count(p), 0);
            assert_eq!(jack_midi_get_lost_event_count(p), 1);
            jack_midi_reset_buffer(p);
            assert_eq!(jack_midi_get_lost_event_count(p), 0);
            let mut junk = [0u8; 64];
            assert_eq!(jack_midi_get_event_count(junk.as_mut_ptr().cast()), 0);
            assert_eq!(jack_midi_get_event_count(std::ptr::null_mut()), 0);
        }
    }
}
