//! MIDI event lists on the wire: the format of a MIDI port's slot in a callback
//! client's shared block (`docs/protocol/callback.md`, "MIDI ports").
//!
//! A slot is the port's buffer of `max_frames` 32-bit words. It holds:
//!
//! | word | meaning |
//! |---|---|
//! | 0 | `count`: events |
//! | 1 | `lost`: events dropped on the way (by the writer, or by the server) |
//! | 2 | `used`: words of event records after the header |
//! | 3 | reserved, 0 |
//! | 4.. | records: `time` (frame offset in the cycle), `size` (bytes), the bytes padded to a word |
//!
//! All zeros is an empty list. The engine keeps the same layout in its port buffers
//! (`quaver_engine::midi`), so the server copies lists word by word. What a client
//! wrote is checked on the way in ([`read_list`]): records must lie within `used` and
//! the slot, times must be below the cycle's frames and in order; an event that breaks
//! a rule is dropped and counted lost, and a record whose size breaks the framing ends
//! the list (the rest counted lost). Nothing here allocates.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::callback::CallbackShm;

/// Words before the first record.
pub const HEADER_WORDS: usize = 4;
/// Words of a record before its bytes.
pub const RECORD_WORDS: usize = 2;

/// Words an event of `size` bytes takes.
pub fn event_words(size: usize) -> usize {
    RECORD_WORDS + size.div_ceil(4)
}

/// Empties a plain list.
pub fn clear(list: &mut [u32]) {
    let n = list.len().min(HEADER_WORDS);
    list[..n].fill(0);
}

/// Events in a plain list.
pub fn count(list: &[u32]) -> u32 {
    list.first().copied().unwrap_or(0)
}

/// Lost events of a plain list.
pub fn lost(list: &[u32]) -> u32 {
    list.get(1).copied().unwrap_or(0)
}

fn used(list: &[u32]) -> usize {
    (list.get(2).copied().unwrap_or(0) as usize).min(list.len().saturating_sub(HEADER_WORDS))
}

/// Adds `n` to a plain list's lost count.
pub fn add_lost(list: &mut [u32], n: u32) {
    if let Some(l) = list.get_mut(1) {
        *l = l.saturating_add(n);
    }
}

/// Appends an event to a plain list (the caller keeps time order); false, with the
/// event counted lost, when it does not fit.
pub fn push(list: &mut [u32], time: u32, data: &[u8]) -> bool {
    if list.len() < HEADER_WORDS {
        return false;
    }
    let at = HEADER_WORDS + used(list);
    let need = event_words(data.len());
    if at + need > list.len() || list[0] == u32::MAX {
        add_lost(list, 1);
        return false;
    }
    list[at] = time;
    list[at + 1] = data.len() as u32;
    let dst = &mut list[at + RECORD_WORDS..at + need];
    dst.fill(0);
    // SAFETY: `dst` holds at least `data.len()` bytes; u8 has no alignment needs.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), dst.as_mut_ptr().cast::<u8>(), data.len())
    };
    list[0] += 1;
    list[2] = (at + need - HEADER_WORDS) as u32;
    true
}

/// One event of a plain list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// Frame offset in the cycle.
    pub time: u32,
    /// The MIDI bytes.
    pub data: &'a [u8],
}

/// The events of a plain list (one [`read_list`] filled, or one made with [`push`]).
pub fn events(list: &[u32]) -> Events<'_> {
    let end = (HEADER_WORDS + used(list)).min(list.len());
    Events {
        list: &list[..end],
        at: HEADER_WORDS,
        left: count(list),
    }
}

/// Iterator of [`events`]; stops at the first record that does not fit.
pub struct Events<'a> {
    list: &'a [u32],
    at: usize,
    left: u32,
}

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;
    fn next(&mut self) -> Option<Event<'a>> {
        if self.left == 0 || self.at + RECORD_WORDS > self.list.len() {
            return None;
        }
        let (time, size) = (self.list[self.at], self.list[self.at + 1] as usize);
        let start = self.at + RECORD_WORDS;
        if size > (self.list.len() - start) * 4 {
            return None;
        }
        let w = &self.list[start..start + size.div_ceil(4)];
        // SAFETY: `w` is at least `size` initialised bytes.
        let data = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), size) };
        self.at = start + w.len();
        self.left -= 1;
        Some(Event { time, data })
    }
}

/// Copies a plain list (trusted: made by this side) into a slot.
pub fn write_list(slot: &[AtomicU32], list: &[u32]) {
    let end = (HEADER_WORDS + used(list)).min(list.len()).min(slot.len());
    for (d, s) in slot[..end].iter().zip(list) {
        d.store(*s, Relaxed);
    }
    if end < HEADER_WORDS {
        for d in &slot[end..slot.len().min(HEADER_WORDS)] {
            d.store(0, Relaxed);
        }
    }
}

/// Reads the list the peer wrote into `slot` as a plain list in `out`, checking every
/// record (see the module docs) against `frames`, the cycle's length. Returns how many
/// events were dropped as invalid (also added to `out`'s lost count, with the lost
/// count the peer reported).
pub fn read_list(slot: &[AtomicU32], frames: u32, out: &mut [u32]) -> u32 {
    clear(out);
    if slot.len() < HEADER_WORDS || out.len() < HEADER_WORDS {
        return 0;
    }
    let claimed = slot[0].load(Relaxed);
    let reported_lost = slot[1].load(Relaxed);
    let used = slot[2].load(Relaxed) as usize;
    let end = HEADER_WORDS.saturating_add(used).min(slot.len());
    let mut dropped = 0u32;
    let mut at = HEADER_WORDS;
    let mut last = 0u32;
    let mut seen = 0u32;
    while seen < claimed {
        if at + RECORD_WORDS > end {
            break;
        }
        let time = slot[at].load(Relaxed);
        let size = slot[at + 1].load(Relaxed) as usize;
        let start = at + RECORD_WORDS;
        if size > (end - start) * 4 {
            break;
        }
        let words = &slot[start..start + size.div_ceil(4)];
        at = start + words.len();
        seen += 1;
        if time >= frames || time < last {
            dropped += 1;
            continue;
        }
        if !push_words(out, time, size, words) {
            continue;
        }
        last = time;
    }
    // Claimed but unreadable records (a broken size, past `used` or the slot).
    dropped = dropped.saturating_add(claimed - seen);
    add_lost(out, reported_lost.saturating_add(dropped));
    dropped
}

/// [`push`] with the bytes taken from shared words.
fn push_words(out: &mut [u32], time: u32, size: usize, words: &[AtomicU32]) -> bool {
    let at = HEADER_WORDS + used(out);
    let need = RECORD_WORDS + words.len();
    if at + need > out.len() {
        add_lost(out, 1);
        return false;
    }
    out[at] = time;
    out[at + 1] = size as u32;
    for (d, s) in out[at + RECORD_WORDS..at + need].iter_mut().zip(words) {
        *d = s.load(Relaxed);
    }
    out[0] += 1;
    out[2] = (at + need - HEADER_WORDS) as u32;
    true
}

impl CallbackShm {
    /// Server: hands input `i` (a MIDI port) the engine's event list. *RT*.
    pub fn write_input_midi(&self, i: usize, list: &[u32]) {
        if i < self.geometry().inputs as usize
            && let Some(slot) = self.port(i)
        {
            write_list(slot, list);
        }
    }

    /// Server: the client's event list of output `o` (a MIDI port), checked, as a plain
    /// list in `out` (empty past the geometry). Returns the events dropped as invalid.
    /// *RT*.
    pub fn read_output_midi(&self, o: usize, frames: u32, out: &mut [u32]) -> u32 {
        let geo = self.geometry();
        match (o < geo.outputs as usize)
            .then(|| self.port(geo.inputs as usize + o))
            .flatten()
        {
            Some(slot) => read_list(slot, frames, out),
            None => {
                clear(out);
                0
            }
        }
    }

    /// Client: the server's event list of input `i`, checked, as a plain list in `out`.
    pub fn read_input_midi(&self, i: usize, frames: u32, out: &mut [u32]) -> u32 {
        match (i < self.geometry().inputs as usize)
            .then(|| self.port(i))
            .flatten()
        {
            Some(slot) => read_list(slot, frames, out),
            None => {
                clear(out);
                0
            }
        }
    }

    /// Client: publishes the plain list `list` as output `o`'s events.
    pub fn write_output_midi(&self, o: usize, list: &[u32]) {
        let geo = self.geometry();
        if o < geo.outputs as usize
            && let Some(slot) = self.port(geo.inputs as usize + o)
        {
            write_list(slot, list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(words: &[u32], len: usize) -> Vec<AtomicU32> {
        let mut v: Vec<AtomicU32> = (0..len).map(|_| AtomicU32::new(0)).collect();
        for (d, s) in v.iter_mut().zip(words) {
            *d.get_mut() = *s;
        }
        v
    }

    fn collect(list: &[u32]) -> Vec<(u32, Vec<u8>)> {
        events(list).map(|e| (e.time, e.data.to_vec())).collect()
    }

    #[test]
    fn a_list_survives_the_slot() {
        let mut list = vec![0u32; 32];
        assert!(push(&mut list, 0, &[0x90, 60, 100]));
        assert!(push(&mut list, 7, &[0xF0, 1, 2, 3, 0xF7]));
        add_lost(&mut list, 2);
        let s = slot(&[], 32);
        write_list(&s, &list);
        let mut out = vec![0u32; 32];
        assert_eq!(read_list(&s, 8, &mut out), 0);
        assert_eq!(
            collect(&out),
            vec![(0, vec![0x90, 60, 100]), (7, vec![0xF0, 1, 2, 3, 0xF7])]
        );
        assert_eq!(lost(&out), 2);
    }

    #[test]
    fn bad_events_are_dropped_and_counted() {
        // Three records: time 5, then time 3 (out of order), then time 9 ≥ frames 8.
        let words = [3, 0, 9, 0, 5, 1, 0x90, 3, 1, 0x80, 9, 1, 0xC0];
        let mut out = vec![0u32; 32];
        assert_eq!(read_list(&slot(&words, 16), 8, &mut out), 2);
        assert_eq!(collect(&out), vec![(5, vec![0x90])]);
        assert_eq!(lost(&out), 2);
        // A size past `used` ends the list: that record and the rest are lost.
        let words = [3, 1, 6, 0, 2, 1, 0x90, 4, 4000, 0];
        assert_eq!(read_list(&slot(&words, 16), 8, &mut out), 2);
        assert_eq!(collect(&out), vec![(2, vec![0x90])]);
        assert_eq!(lost(&out), 3);
        // Lies in every header word never read past the slot.
        let words = [u32::MAX, u32::MAX, u32::MAX, u32::MAX, 0, u32::MAX];
        let dropped = read_list(&slot(&words, 6), 8, &mut out);
        assert_eq!(count(&out), 0);
        assert_eq!(dropped, u32::MAX);
        assert_eq!(lost(&out), u32::MAX);
        // An output list too small for what arrives counts the rest lost.
        let mut list = vec![0u32; 32];
        for t in 0..5 {
            push(&mut list, t, &[1, 2, 3]);
        }
        let s = slot(&[], 32);
        write_list(&s, &list);
        let mut small = vec![0u32; 10];
        assert_eq!(read_list(&s, 8, &mut small), 0);
        assert_eq!((count(&small), lost(&small)), (2, 3));
    }
}
