//! MIDI ports: sample-accurate, timestamped events in the same preallocated per-port
//! buffers audio ports use.
//!
//! A MIDI port's buffer is its node's channel of `max_quantum` f32 slots, read as
//! `u32` words (never as floats: no gain, mixing or sanitising touches it). It holds an
//! *event list*, the same layout as a callback client's MIDI slot in the shared block
//! (`docs/protocol/callback.md`), so the front-end copies it word by word:
//!
//! | word | meaning |
//! |---|---|
//! | 0 | `count`: events in the list |
//! | 1 | `lost`: events dropped on the way to this buffer in this cycle |
//! | 2 | `used`: words of event records after the header |
//! | 3 | reserved, 0 |
//! | 4.. | records: `time` (frame offset in the cycle), `size` (bytes), then the bytes, padded to a word |
//!
//! All zeros is an empty list, so a cleared (silent) buffer is a valid one. Events are
//! in time order. An input fed by several links gets their events merged in time order
//! (at equal times, earlier links first); what does not fit is counted in `lost`, with
//! the sources' own losses — as jackd2's MIDI mixdown does. Nothing here allocates.

use quaver_dsp::PlanarMut;
use quaver_dsp::volume::GainRamp;

/// Words before the first event record.
pub const HEADER_WORDS: usize = 4;
/// Words of an event record before its bytes.
pub const RECORD_WORDS: usize = 2;
/// MIDI ports must have a buffer index below this in their direction.
pub const MAX_MIDI_PORTS: usize = 1024;

/// A set of port buffer indices of one direction (below [`MAX_MIDI_PORTS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSet([u64; MAX_MIDI_PORTS / 64]);

impl Default for PortSet {
    fn default() -> Self {
        PortSet::EMPTY
    }
}

impl PortSet {
    /// No port.
    pub const EMPTY: PortSet = PortSet([0; MAX_MIDI_PORTS / 64]);

    /// Adds index `i`; false (and nothing added) past [`MAX_MIDI_PORTS`].
    pub fn insert(&mut self, i: usize) -> bool {
        if i >= MAX_MIDI_PORTS {
            return false;
        }
        self.0[i / 64] |= 1 << (i % 64);
        true
    }

    /// Whether index `i` is in the set.
    pub fn contains(&self, i: usize) -> bool {
        i < MAX_MIDI_PORTS && self.0[i / 64] & (1 << (i % 64)) != 0
    }

    /// True when no index is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
}

/// Which of a node's port buffers carry MIDI event lists, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MidiPorts {
    /// Input buffer indices.
    pub inputs: PortSet,
    /// Output buffer indices.
    pub outputs: PortSet,
}

impl MidiPorts {
    /// No MIDI port.
    pub const NONE: MidiPorts = MidiPorts {
        inputs: PortSet::EMPTY,
        outputs: PortSet::EMPTY,
    };
}

/// A port buffer as event-list words.
pub fn words(ch: &[f32]) -> &[u32] {
    // SAFETY: f32 and u32 have the same size and alignment, and every bit pattern is
    // valid for both.
    unsafe { std::slice::from_raw_parts(ch.as_ptr().cast(), ch.len()) }
}

/// A port buffer as writable event-list words.
pub fn words_mut(ch: &mut [f32]) -> &mut [u32] {
    // SAFETY: as in `words`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(ch.as_mut_ptr().cast(), ch.len()) }
}

/// Empties the list in `buf` (lost count included).
pub fn clear(buf: &mut [u32]) {
    let n = buf.len().min(HEADER_WORDS);
    buf[..n].fill(0);
}

/// Events in the list.
pub fn count(buf: &[u32]) -> u32 {
    buf.first().copied().unwrap_or(0)
}

/// Events lost on the way to this list in this cycle.
pub fn lost(buf: &[u32]) -> u32 {
    buf.get(1).copied().unwrap_or(0)
}

fn used(buf: &[u32]) -> usize {
    (buf.get(2).copied().unwrap_or(0) as usize).min(buf.len().saturating_sub(HEADER_WORDS))
}

/// Words an event of `size` bytes takes.
pub fn event_words(size: usize) -> usize {
    RECORD_WORDS + size.div_ceil(4)
}

/// One event of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MidiEvent<'a> {
    /// Frame offset in the cycle.
    pub time: u32,
    /// The MIDI bytes.
    pub data: &'a [u8],
}

/// The events of a list, in order; stops at the first record that does not fit (a
/// list the engine made always fits).
pub fn events(buf: &[u32]) -> Events<'_> {
    let end = HEADER_WORDS + used(buf);
    Events {
        buf: &buf[..end.min(buf.len())],
        at: HEADER_WORDS,
        left: count(buf),
    }
}

/// Iterator of [`events`].
pub struct Events<'a> {
    buf: &'a [u32],
    at: usize,
    left: u32,
}

impl<'a> Iterator for Events<'a> {
    type Item = MidiEvent<'a>;
    fn next(&mut self) -> Option<MidiEvent<'a>> {
        if self.left == 0 || self.at + RECORD_WORDS > self.buf.len() {
            return None;
        }
        let (time, size) = (self.buf[self.at], self.buf[self.at + 1] as usize);
        let start = self.at + RECORD_WORDS;
        if size > (self.buf.len() - start) * 4 {
            return None;
        }
        let w = &self.buf[start..start + size.div_ceil(4)];
        // SAFETY: `w` is initialised memory of at least `size` bytes; u8 has no
        // alignment or validity requirement.
        let data = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), size) };
        self.at = start + w.len();
        self.left -= 1;
        Some(MidiEvent { time, data })
    }
}

/// Appends an event (the caller keeps time order); false, with `lost` counted, when it
/// does not fit.
pub fn push(buf: &mut [u32], time: u32, data: &[u8]) -> bool {
    if buf.len() < HEADER_WORDS {
        return false;
    }
    let at = HEADER_WORDS + used(buf);
    let need = event_words(data.len());
    if at + need > buf.len() || count(buf) == u32::MAX {
        buf[1] = buf[1].saturating_add(1);
        return false;
    }
    buf[at] = time;
    buf[at + 1] = data.len() as u32;
    let dst = &mut buf[at + RECORD_WORDS..at + need];
    dst.fill(0);
    // SAFETY: `dst` is `need - RECORD_WORDS` words, at least `data.len()` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), dst.as_mut_ptr().cast::<u8>(), data.len())
    };
    buf[0] += 1;
    buf[2] = (at + need - HEADER_WORDS) as u32;
    true
}

/// Merges `src`'s events into `dst` in time order (at equal times `dst`'s first),
/// through `scratch` (as long as `dst`); `dst`'s lost count takes `src`'s and every
/// event that does not fit. *RT*.
pub fn merge(dst: &mut [u32], src: &[u32], scratch: &mut [u32]) {
    if count(src) == 0 {
        if lost(src) > 0 && dst.len() >= HEADER_WORDS {
            dst[1] = dst[1].saturating_add(lost(src));
        }
        return;
    }
    let n = dst.len().min(scratch.len());
    let out = &mut scratch[..n];
    clear(out);
    if out.len() >= HEADER_WORDS {
        out[1] = lost(dst).saturating_add(lost(src));
    }
    let (mut a, mut b) = (events(dst).peekable(), events(src).peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.time <= y.time,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let e = if take_a { a.next() } else { b.next() }.expect("peeked");
        push(out, e.time, e.data);
    }
    let end = HEADER_WORDS + used(out);
    if n >= end {
        dst[..end].copy_from_slice(&out[..end]);
    }
}

/// Applies `gain` to the audio channels of `buf`, leaving the MIDI ones (`midi`)
/// untouched, and advances it by one view. *RT*.
pub fn apply_gain(gain: &mut GainRamp, buf: &mut PlanarMut<'_>, midi: &PortSet) {
    if midi.is_empty() {
        gain.apply(buf);
        return;
    }
    let frames = buf.frames();
    for ch in 0..buf.channels() {
        if !midi.contains(ch) {
            let mut g = gain.clone();
            g.apply(&mut PlanarMut::new(buf.channel_mut(ch), 1, frames, frames));
        }
    }
    gain.apply(&mut PlanarMut::new(&mut [], 0, frames, frames));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(events: &[(u32, &[u8])], words: usize) -> Vec<u32> {
        let mut b = vec![0u32; words];
        for (t, d) in events {
            assert!(push(&mut b, *t, d));
        }
        b
    }

    fn collect(b: &[u32]) -> Vec<(u32, Vec<u8>)> {
        events(b).map(|e| (e.time, e.data.to_vec())).collect()
    }

    #[test]
    fn merge_keeps_time_order_and_earlier_links_first() {
        let mut dst = list(&[(0, &[0x90, 60, 100]), (10, &[0x80, 60, 0])], 64);
        let src = list(&[(5, &[0xC0, 3]), (10, &[0xF0, 1, 2, 3, 4, 0xF7])], 64);
        let mut scratch = vec![0u32; 64];
        merge(&mut dst, &src, &mut scratch);
        assert_eq!(
            collect(&dst),
            vec![
                (0, vec![0x90, 60, 100]),
                (5, vec![0xC0, 3]),
                (10, vec![0x80, 60, 0]),
                (10, vec![0xF0, 1, 2, 3, 4, 0xF7]),
            ]
        );
        assert_eq!((count(&dst), lost(&dst)), (4, 0));
    }

    #[test]
    fn what_does_not_fit_is_lost_with_the_sources_losses() {
        // 4 header words + 3 events of 3 words = 13: the fourth event does not fit.
        let mut dst = list(&[(1, &[1, 2, 3]), (7, &[4, 5, 6])], 13);
        let mut src = list(&[(3, &[7, 8, 9]), (9, &[10, 11, 12])], 64);
        src[1] = 2;
        let mut scratch = vec![0u32; 64];
        merge(&mut dst, &src, &mut scratch);
        let times: Vec<u32> = events(&dst).map(|e| e.time).collect();
        assert_eq!(times, vec![1, 3, 7]);
        assert_eq!(lost(&dst), 3);
        // A source with only losses passes them on.
        let mut empty_src = vec![0u32; 8];
        empty_src[1] = 4;
        merge(&mut dst, &empty_src, &mut scratch);
        assert_eq!((count(&dst), lost(&dst)), (3, 7));
    }

    #[test]
    fn garbage_headers_never_read_out_of_bounds() {
        let b = [5u32, 0, 1000, 0, 1, 999_999];
        assert_eq!(events(&b).count(), 0);
        let b = [u32::MAX, u32::MAX, u32::MAX, 0];
        assert_eq!(events(&b).count(), 0);
        let mut dst = vec![0u32; 16];
        let mut scratch = vec![0u32; 16];
        merge(&mut dst, &b, &mut scratch);
        assert_eq!(count(&dst), 0);
        let mut tiny = [0u32; 2];
        assert!(!push(&mut tiny, 0, &[1]));
    }

    #[test]
    fn gain_leaves_midi_channels_alone() {
        let mut data = vec![0.5f32; 16];
        let w = words_mut(&mut data[8..]);
        clear(w);
        assert!(push(w, 0, &[0x90]));
        let before = data[8..].to_vec();
        let mut g = GainRamp::new(0.5);
        let mut set = PortSet::EMPTY;
        set.insert(1);
        apply_gain(&mut g, &mut PlanarMut::new(&mut data, 2, 8, 8), &set);
        assert_eq!(&data[..8], &[0.25; 8]);
        assert_eq!(
            data[8..].iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
            before.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        );
    }
}
