//! Sample math for quaver. Nothing here knows threads, sockets or devices; every
//! function that runs in the real-time cycle works on caller-provided buffers and
//! never allocates.

pub mod analysis;
pub mod buffer;
pub mod channels;
pub mod echo_scene;
pub mod filter;
pub mod format;
pub mod mix;
mod polyphase;
pub mod resample;
pub mod volume;

pub use buffer::{Planar, PlanarBuf, PlanarMut};
pub use channels::{ChannelMap, ChannelMixer, ChannelPosition};
pub use format::SampleFormat;
pub use resample::{ResampleQuality, StreamResampler};
pub use volume::GainRamp;
