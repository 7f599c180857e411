//! The memory-block figures STAT reports. PulseAudio reports its memory pool's blocks;
//! quaver's blocks are the buffers it holds for clients (`docs/pulse/control.md`, STAT):
//! each stream's ring, each record-pool slot the client holds, each srbchannel ring and
//! each cached sample. They are counted where they are made and dropped, on control
//! threads only (the RT thread never makes or frees one), with relaxed atomics: the
//! figures are a report, nothing is ordered by them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Blocks held now and allocated since start, with their bytes.
#[derive(Debug, Default)]
pub struct MemStats {
    live_blocks: AtomicU64,
    live_bytes: AtomicU64,
    total_blocks: AtomicU64,
    total_bytes: AtomicU64,
}

/// A reading of [`MemStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemFigures {
    /// Blocks held now.
    pub live_blocks: u64,
    /// Their bytes.
    pub live_bytes: u64,
    /// Blocks allocated since start.
    pub total_blocks: u64,
    /// Their bytes.
    pub total_bytes: u64,
}

impl MemStats {
    /// Counts a block of `bytes` made now.
    pub fn alloc(&self, bytes: usize) {
        self.live_blocks.fetch_add(1, Relaxed);
        self.live_bytes.fetch_add(bytes as u64, Relaxed);
        self.total_blocks.fetch_add(1, Relaxed);
        self.total_bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// Counts a block of `bytes` given up now (one counted by [`MemStats::alloc`]).
    pub fn free(&self, bytes: usize) {
        self.live_blocks.fetch_sub(1, Relaxed);
        self.live_bytes.fetch_sub(bytes as u64, Relaxed);
    }

    /// A block of `bytes`, counted until the returned token drops.
    pub fn block(self: &Arc<Self>, bytes: usize) -> MemBlock {
        self.alloc(bytes);
        MemBlock {
            stats: self.clone(),
            bytes,
        }
    }

    /// The figures now.
    pub fn read(&self) -> MemFigures {
        MemFigures {
            live_blocks: self.live_blocks.load(Relaxed),
            live_bytes: self.live_bytes.load(Relaxed),
            total_blocks: self.total_blocks.load(Relaxed),
            total_bytes: self.total_bytes.load(Relaxed),
        }
    }
}

/// One counted block: it counts as held until dropped.
#[derive(Debug)]
pub struct MemBlock {
    stats: Arc<MemStats>,
    bytes: usize,
}

impl Drop for MemBlock {
    fn drop(&mut self) {
        self.stats.free(self.bytes);
    }
}

/// A value whose memory counts as one block while it lives (a cached sample's audio,
/// which outlives its cache entry while it plays).
#[derive(Debug)]
pub struct Counted<T> {
    value: T,
    _block: MemBlock,
}

impl<T> Counted<T> {
    /// `value`, counted as a block of `bytes` in `stats`.
    pub fn new(value: T, bytes: usize, stats: &Arc<MemStats>) -> Counted<T> {
        Counted {
            value,
            _block: stats.block(bytes),
        }
    }
}

impl<T> std::ops::Deref for Counted<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_count_until_dropped_and_totals_only_rise() {
        let stats = Arc::new(MemStats::default());
        let a = stats.block(100);
        let b = Counted::new(vec![1.0f32; 4], 16, &stats);
        stats.alloc(8);
        assert_eq!(
            stats.read(),
            MemFigures {
                live_blocks: 3,
                live_bytes: 124,
                total_blocks: 3,
                total_bytes: 124
            }
        );
        assert_eq!(b.len(), 4);
        drop(a);
        drop(b);
        stats.free(8);
        let f = stats.read();
        assert_eq!((f.live_blocks, f.live_bytes), (0, 0));
        assert_eq!((f.total_blocks, f.total_bytes), (3, 124));
    }
}
