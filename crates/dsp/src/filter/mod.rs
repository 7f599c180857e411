//! Filters for effect chains: biquads, gain, delay, a lookahead limiter, a
//! partitioned FFT convolver, a channel mixer and a Linkwitz–Riley crossover, and
//! [`FilterChain`], which runs them in order, checks the channel counts between them
//! and keeps NaN and infinity from ever leaving the chain.
//!
//! Everything is allocated at construction; `process` and the parameter setters never
//! allocate, lock or block, so the engine may call them on its real-time thread. No
//! filter has a maximum block size: each takes any number of frames per call.

mod base;
pub mod biquad;
mod chain;
pub mod controls;
pub mod convolver;
pub mod crossover;
pub mod delay;
mod design;
mod error;
pub mod gain;
pub mod limiter;
mod matrix;
pub mod mixer;
mod named;
mod splits;

pub use base::Filter;
pub use biquad::Biquad;
pub use chain::{FilterChain, all_finite};
pub use controls::Controls;
pub use convolver::Convolver;
pub use crossover::Crossover;
pub use delay::Delay;
pub use design::{BiquadKind, BiquadParams, Coeffs};
pub use error::{DEFAULT_FADE_FRAMES, FilterError, MAX_GAIN_DB};
pub use gain::Gain;
pub use limiter::Limiter;
pub use matrix::max_weight;
pub use mixer::{ChannelMixer, MixerPreset};
pub use named::{NamedControl, NamedControls};
