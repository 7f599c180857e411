//! The memfd pool a connection exports record audio through, as PulseAudio's memexport
//! does: the pool is registered with the client once (REGISTER_MEMFD_SHMID), each
//! record chunk is copied into a free slot and sent as a 16-byte reference, and the slot
//! is ours again when the client sends SHMRELEASE for its block id.
//!
//! One pool per client, not one for the server: libpulse maps a registered memfd
//! read-write and the descriptor lets it read everything in it, so a shared pool would
//! show every client the others' recordings (another application's microphone) and
//! let it scribble on their blocks in flight. Per client, it sees only its own audio,
//! and a client that holds its blocks exhausts only its own pool.
//!
//! The pool is bounded. A client that never releases (stuck, or hostile) holds at
//! most [`SLOTS`] blocks; after that its audio goes inline, block by block, until it
//! releases some — as PulseAudio's exporter falls back to copying when its slots are
//! taken. The memfd is sized for every slot but costs memory only for slots written:
//! free slots are reused last-in first-out, so a client that releases promptly keeps
//! touching the same one or two.
//!
//! Only the I/O thread touches a pool (record data is encoded there, from the ring the
//! RT side fills), so nothing here is shared between threads.

use crate::io::shm::SealedMemfd;
use crate::memstat::MemStats;
use rustix::fd::OwnedFd;
use std::sync::Arc;

/// Bytes per slot: PulseAudio's pool slot size. A larger chunk is sent as several
/// references.
pub const SLOT_SIZE: usize = 64 * 1024;
/// Slots per client. libpulse imports at most 160 blocks per connection (one is the
/// srbchannel's); a reference beyond its limit would be dropped as a hole in the audio.
pub const SLOTS: usize = 64;
/// Chunks smaller than this go inline: a reference (36 bytes and a release frame back)
/// costs more than the bytes themselves (pavucontrol's 4-byte peak meters).
pub const MIN_SHARED: usize = 256;
/// Block ids start here so they never meet the srbchannel block's id: libpulse keys
/// every block it imports by id alone.
const FIRST_BLOCK_ID: u32 = 16;
const _: () = assert!(crate::io::srb::BLOCK_ID < FIRST_BLOCK_ID);

/// One connection's record pool.
pub(crate) struct ExportPool {
    mem: SealedMemfd,
    /// The id the pool is registered under.
    pub shm_id: u32,
    /// Free slots, most recently released last.
    free: Vec<u16>,
    /// Which slots the client holds, and the bytes in each (STAT counts a held slot as
    /// a memory block of those bytes).
    held: [Option<u32>; SLOTS],
    stats: Arc<MemStats>,
    /// Set once the client held every slot (logged once).
    pub exhausted: bool,
    /// Blocks sent as references.
    pub blocks: u64,
    /// Bytes sent as references.
    pub bytes: u64,
    /// Chunks sent inline because the client held every slot.
    pub inline_full: u64,
    /// Most slots the client held at once.
    pub peak_held: usize,
}

impl ExportPool {
    /// A new pool registered under `shm_id`, its slots in flight counted in `stats`.
    pub(crate) fn new(shm_id: u32, stats: Arc<MemStats>) -> std::io::Result<ExportPool> {
        Ok(ExportPool {
            mem: SealedMemfd::new("quaver-pulse-record", SLOTS * SLOT_SIZE)?,
            shm_id,
            free: (0..SLOTS as u16).rev().collect(),
            held: [None; SLOTS],
            stats,
            exhausted: false,
            blocks: 0,
            bytes: 0,
            inline_full: 0,
            peak_held: 0,
        })
    }

    /// The memfd to register with the client (taken once).
    pub(crate) fn take_memfd(&mut self) -> Option<OwnedFd> {
        self.mem.take_fd()
    }

    /// Copies `data` (at most [`SLOT_SIZE`] bytes) into a free slot and returns the
    /// block id and byte offset to reference it by; `None` when the client holds every
    /// slot (the caller sends the chunk inline).
    pub(crate) fn put(&mut self, data: &[u8]) -> Option<(u32, u32)> {
        assert!(data.len() <= SLOT_SIZE, "chunk larger than a slot");
        let Some(slot) = self.free.pop() else {
            self.inline_full += 1;
            return None;
        };
        let slot = slot as usize;
        let offset = slot * SLOT_SIZE;
        // SAFETY: offset + len <= SLOTS * SLOT_SIZE, inside the mapping. The client may
        // write into its mapping too; we only write, never read back.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.ptr().add(offset), data.len());
        }
        self.held[slot] = Some(data.len() as u32);
        self.stats.alloc(data.len());
        self.peak_held = self.peak_held.max(SLOTS - self.free.len());
        self.blocks += 1;
        self.bytes += data.len() as u64;
        Some((FIRST_BLOCK_ID + slot as u32, offset as u32))
    }

    /// The client released `block_id`; false for an id that is not an outstanding block
    /// of this pool (another pool's, a second release), which changes nothing.
    pub(crate) fn release(&mut self, block_id: u32) -> bool {
        let Some(slot) = block_id
            .checked_sub(FIRST_BLOCK_ID)
            .map(|s| s as usize)
            .filter(|&s| s < SLOTS && self.held[s].is_some())
        else {
            return false;
        };
        if let Some(len) = self.held[slot].take() {
            self.stats.free(len as usize);
        }
        self.free.push(slot as u16);
        true
    }
}

impl Drop for ExportPool {
    fn drop(&mut self) {
        // The client's mapping may outlive us, but the blocks are no longer ours.
        for len in self.held.iter().flatten() {
            self.stats.free(*len as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_last_in_first_out_and_bounded() {
        let stats = Arc::new(MemStats::default());
        let mut p = ExportPool::new(9, stats.clone()).unwrap();
        let (a, off_a) = p.put(&[1; 100]).unwrap();
        assert_eq!((a, off_a), (FIRST_BLOCK_ID, 0));
        assert!(p.release(a));
        assert!(!p.release(a), "a second release changes nothing");
        assert!(
            !p.release(crate::io::srb::BLOCK_ID),
            "the srbchannel block is not ours"
        );
        assert_eq!(p.put(&[2; 100]).unwrap(), (a, off_a), "the warm slot again");
        let mut ids = vec![a];
        while let Some((id, off)) = p.put(&[3; SLOT_SIZE]) {
            assert_eq!(off as usize, (id - FIRST_BLOCK_ID) as usize * SLOT_SIZE);
            ids.push(id);
        }
        assert_eq!(ids.len(), SLOTS);
        assert_eq!(p.inline_full, 1);
        assert!(p.release(ids[7]));
        assert_eq!(p.put(&[4; 8]).unwrap().0, ids[7]);
        assert_eq!(p.blocks, SLOTS as u64 + 2);
        assert_eq!(p.peak_held, SLOTS);
        // Slots the client holds count as blocks until released or the pool goes.
        let m = stats.read();
        assert_eq!(m.live_blocks, SLOTS as u64);
        assert_eq!(
            m.live_bytes,
            100 + (SLOTS - 2) as u64 * SLOT_SIZE as u64 + 8
        );
        assert_eq!(m.total_blocks, SLOTS as u64 + 2);
        assert!(p.release(ids[7]));
        assert_eq!(stats.read().live_blocks, SLOTS as u64 - 1);
        drop(p);
        let m = stats.read();
        assert_eq!((m.live_blocks, m.live_bytes), (0, 0));
        assert_eq!(m.total_blocks, SLOTS as u64 + 2);
    }

    #[test]
    fn the_client_reads_what_was_put_through_its_descriptor() {
        let mut p = ExportPool::new(9, Arc::default()).unwrap();
        let fd = p.take_memfd().unwrap();
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(st.st_size as usize, SLOTS * SLOT_SIZE);
        // Sealed: a client cannot shrink it under our mapping.
        assert!(rustix::fs::ftruncate(&fd, 0).is_err());
        p.put(&[5; 10]).unwrap();
        let (_, off) = p.put(b"quaver").unwrap();
        let mut buf = [0u8; 6];
        rustix::io::pread(&fd, &mut buf, off as u64).unwrap();
        assert_eq!(&buf, b"quaver");
    }
}
