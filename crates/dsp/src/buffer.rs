//! Planar f32 audio buffers shared by the engine and the devices.

/// A read-only view of planar audio: `channels` slices of `frames` samples each,
/// stored back to back with a fixed stride.
#[derive(Debug, Clone, Copy)]
pub struct Planar<'a> {
    data: &'a [f32],
    channels: usize,
    frames: usize,
    stride: usize,
}

impl<'a> Planar<'a> {
    /// Wraps `data` laid out as `channels` runs of `stride` samples, of which the first
    /// `frames` are valid (the last run may be cut short after them, as in
    /// [`PlanarMut::new`]). Panics if `data` is too short (a caller bug, caught in tests).
    pub fn new(data: &'a [f32], channels: usize, frames: usize, stride: usize) -> Self {
        assert!(
            frames <= stride && (channels == 0 || data.len() >= (channels - 1) * stride + frames)
        );
        Planar {
            data,
            channels,
            frames,
            stride,
        }
    }
    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels
    }
    /// Number of valid frames per channel.
    pub fn frames(&self) -> usize {
        self.frames
    }
    /// The samples of channel `ch`.
    pub fn channel(&self, ch: usize) -> &'a [f32] {
        &self.data[ch * self.stride..ch * self.stride + self.frames]
    }
    /// Channel `ch`'s whole run of `stride` slots (the last may be cut short), beyond the
    /// valid frames: for port buffers that carry data other than audio (MIDI event lists).
    pub fn whole_channel(&self, ch: usize) -> &'a [f32] {
        let start = ch * self.stride;
        &self.data[start..(start + self.stride).min(self.data.len())]
    }
    /// The `frames` frames from `offset` on, as a view of their own.
    pub fn part(&self, offset: usize, frames: usize) -> Planar<'a> {
        assert!(offset + frames <= self.frames);
        let end = if self.channels == 0 {
            offset
        } else {
            (self.channels - 1) * self.stride + offset + frames
        };
        Planar {
            data: &self.data[offset..end],
            channels: self.channels,
            frames,
            stride: self.stride,
        }
    }
}

/// A mutable view of planar audio with the same layout as [`Planar`].
#[derive(Debug)]
pub struct PlanarMut<'a> {
    data: &'a mut [f32],
    channels: usize,
    frames: usize,
    stride: usize,
}

impl<'a> PlanarMut<'a> {
    /// Wraps `data` laid out as `channels` runs of `stride` samples, of which the first
    /// `frames` are in use (the last run may be cut short after them, so a view can
    /// start part-way into each run of a larger buffer).
    pub fn new(data: &'a mut [f32], channels: usize, frames: usize, stride: usize) -> Self {
        assert!(
            frames <= stride && (channels == 0 || data.len() >= (channels - 1) * stride + frames)
        );
        PlanarMut {
            data,
            channels,
            frames,
            stride,
        }
    }
    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels
    }
    /// Number of frames per channel.
    pub fn frames(&self) -> usize {
        self.frames
    }
    /// The samples of channel `ch`.
    pub fn channel(&self, ch: usize) -> &[f32] {
        &self.data[ch * self.stride..ch * self.stride + self.frames]
    }
    /// The samples of channel `ch`, writable.
    pub fn channel_mut(&mut self, ch: usize) -> &mut [f32] {
        &mut self.data[ch * self.stride..ch * self.stride + self.frames]
    }
    /// Channel `ch`'s whole run of `stride` slots, writable (see
    /// [`Planar::whole_channel`]).
    pub fn whole_channel_mut(&mut self, ch: usize) -> &mut [f32] {
        let start = ch * self.stride;
        let end = (start + self.stride).min(self.data.len());
        &mut self.data[start..end]
    }
    /// A read-only view of the same samples.
    pub fn as_planar(&self) -> Planar<'_> {
        Planar::new(self.data, self.channels, self.frames, self.stride)
    }
    /// The samples and the stride between channels (channel `c`'s frames start at
    /// `c * stride`), for kernels that write every channel in one loop.
    pub(crate) fn raw_mut(&mut self) -> (&mut [f32], usize) {
        (&mut *self.data, self.stride)
    }
    /// The `frames` frames from `offset` on, as a writable view of their own.
    pub fn part_mut(&mut self, offset: usize, frames: usize) -> PlanarMut<'_> {
        assert!(offset + frames <= self.frames);
        PlanarMut::new(&mut self.data[offset..], self.channels, frames, self.stride)
    }
    /// Sets every sample to zero.
    pub fn fill_silence(&mut self) {
        for ch in 0..self.channels {
            self.channel_mut(ch).fill(0.0);
        }
    }
}

/// An owned planar buffer allocated once for a maximum number of frames.
#[derive(Debug, Clone)]
pub struct PlanarBuf {
    data: Vec<f32>,
    channels: usize,
    max_frames: usize,
}

impl PlanarBuf {
    /// Allocates silence for `channels` × `max_frames` samples (control thread only).
    pub fn new(channels: usize, max_frames: usize) -> Self {
        PlanarBuf {
            data: vec![0.0; channels * max_frames],
            channels,
            max_frames,
        }
    }
    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.channels
    }
    /// Capacity in frames.
    pub fn max_frames(&self) -> usize {
        self.max_frames
    }
    /// A view of the first `frames` frames. Panics if `frames` exceeds the capacity.
    pub fn view(&self, frames: usize) -> Planar<'_> {
        Planar::new(&self.data, self.channels, frames, self.max_frames)
    }
    /// A writable view of the first `frames` frames.
    pub fn view_mut(&mut self, frames: usize) -> PlanarMut<'_> {
        PlanarMut::new(&mut self.data, self.channels, frames, self.max_frames)
    }
    /// Channel `ch`, all `max_frames` samples.
    pub fn channel(&self, ch: usize) -> &[f32] {
        &self.data[ch * self.max_frames..(ch + 1) * self.max_frames]
    }
    /// Channel `ch`, all `max_frames` samples, writable.
    pub fn channel_mut(&mut self, ch: usize) -> &mut [f32] {
        &mut self.data[ch * self.max_frames..(ch + 1) * self.max_frames]
    }
}
