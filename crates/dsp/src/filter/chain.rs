//! A chain of filters with a guard against NaN and infinity at its end.

use super::base::Filter;
use super::controls::Controls;
use super::error::FilterError;
use crate::buffer::{PlanarBuf, PlanarMut};

/// Frames per pass through a chain that is wider inside than at its ends.
const WIDE_CHUNK: usize = 256;

/// Filters run in order on the same buffer, with a guard at the end: a block that
/// comes out with NaN or infinity in it is replaced by silence and every filter is
/// reset, so one bad input (or a filter that went unstable) costs one silent block,
/// never a device fed garbage or a filter stuck at NaN.
pub struct FilterChain {
    filters: Vec<Box<dyn Filter>>,
    nonfinite_resets: u64,
    /// For a chain with more channels inside than at its ends (a crossover that a
    /// channel mixer folds back): the widest count × [`WIDE_CHUNK`] frames, through
    /// which the block runs a pass at a time.
    wide: Option<PlanarBuf>,
}

impl FilterChain {
    /// A chain of `filters`, run first to last, each in place on the buffer it is
    /// given. For filters that change the channel count use [`FilterChain::for_channels`].
    pub fn new(filters: Vec<Box<dyn Filter>>) -> Self {
        FilterChain {
            filters,
            nonfinite_resets: 0,
            wide: None,
        }
    }

    /// A chain of `filters` that runs on `channels` channels, checked: each filter that
    /// takes a fixed count (a channel mixer, a crossover) must get the count that
    /// flows to it, and the last must leave `channels`. Where the count inside grows
    /// past `channels`, the chain gets a buffer of its own for the widest point.
    pub fn for_channels(
        filters: Vec<Box<dyn Filter>>,
        channels: usize,
    ) -> Result<Self, FilterError> {
        let mut now = channels;
        let mut widest = channels;
        for (index, f) in filters.iter().enumerate() {
            if let Some((takes, gives)) = f.channels_in_out() {
                if takes != now {
                    return Err(FilterError::ChannelsIn {
                        index,
                        takes,
                        gets: now,
                    });
                }
                now = gives;
                widest = widest.max(gives);
            }
        }
        if now != channels {
            return Err(FilterError::ChannelsOut {
                ends: now,
                channels,
            });
        }
        let mut chain = FilterChain::new(filters);
        if widest > channels {
            chain.wide = Some(PlanarBuf::new(widest, WIDE_CHUNK));
        }
        Ok(chain)
    }

    /// Runs every filter on `buf`, then the non-finite guard. Never allocates.
    pub fn process(&mut self, buf: &mut PlanarMut) {
        match self.wide.take() {
            Some(mut wide) if wide.channels() > buf.channels() => {
                self.process_wide(buf, &mut wide);
                self.wide = Some(wide);
            }
            other => {
                self.wide = other;
                self.process_in_place(buf);
            }
        }
    }

    /// Runs the chain a pass at a time through its own wider buffer.
    fn process_wide(&mut self, buf: &mut PlanarMut, wide: &mut PlanarBuf) {
        let frames = buf.frames();
        let mut off = 0;
        while off < frames {
            let n = (frames - off).min(WIDE_CHUNK);
            for ch in 0..buf.channels() {
                wide.channel_mut(ch)[..n].copy_from_slice(&buf.channel(ch)[off..off + n]);
            }
            self.process_in_place(&mut wide.view_mut(n));
            for ch in 0..buf.channels() {
                buf.channel_mut(ch)[off..off + n].copy_from_slice(&wide.channel(ch)[..n]);
            }
            off += n;
        }
    }

    fn process_in_place(&mut self, buf: &mut PlanarMut) {
        for f in &mut self.filters {
            f.process(buf);
        }
        if !all_finite(buf) {
            buf.fill_silence();
            self.reset();
            self.nonfinite_resets += 1;
        }
    }

    /// Resets every filter.
    pub fn reset(&mut self) {
        for f in &mut self.filters {
            f.reset();
        }
    }

    /// How many blocks the guard silenced because NaN or infinity came out.
    pub fn nonfinite_resets(&self) -> u64 {
        self.nonfinite_resets
    }

    /// Number of filters.
    pub fn len(&self) -> usize {
        self.filters.len()
    }

    /// True for a chain with no filters (it still guards against NaN).
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Changes control `name` of filter `index` (see [`Filter::set_control`]).
    pub fn set_control(&mut self, index: usize, name: &str, value: f64) -> Result<(), FilterError> {
        match self.filters.get_mut(index) {
            Some(f) => f.set_control(name, value),
            None => Err(FilterError::NoFilter {
                index,
                len: self.filters.len(),
            }),
        }
    }

    /// Each filter's controls, to check changes before they are sent
    /// ([`Controls::check`]).
    pub fn controls(&self) -> Vec<Controls> {
        self.filters.iter().map(|f| f.controls()).collect()
    }

    /// Total delay of the chain in frames.
    pub fn latency(&self) -> usize {
        self.filters.iter().map(|f| f.latency()).sum()
    }
}

/// True when every sample of `buf` is finite. `x * 0` is 0 for finite `x` and NaN for
/// NaN or ±∞, and a sum of those vectorises, unlike a branch per sample.
pub fn all_finite(buf: &PlanarMut) -> bool {
    (0..buf.channels()).all(|ch| {
        let s = buf.channel(ch);
        let mut acc = [0.0f32; 8];
        let mut chunks = s.chunks_exact(8);
        for c in &mut chunks {
            for i in 0..8 {
                acc[i] += c[i] * 0.0;
            }
        }
        let tail: f32 = chunks.remainder().iter().map(|&x| x * 0.0).sum();
        acc.iter().sum::<f32>() + tail == 0.0
    })
}
