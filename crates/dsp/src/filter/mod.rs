//! Filters for effect chains: biquads, gain, delay, a lookahead limiter and a
//! partitioned FFT convolver, and [`FilterChain`], which runs them in order and keeps
//! NaN and infinity from ever leaving the chain.
//!
//! Everything is allocated at construction; `process` and the parameter setters never
//! allocate, lock or block, so the engine may call them on its real-time thread. No
//! filter has a maximum block size: each takes any number of frames per call.

mod base;
pub mod biquad;
mod chain;
pub mod controls;
pub mod convolver;
pub mod delay;
mod design;
mod error;
pub mod gain;
pub mod limiter;

pub use base::Filter;
pub use biquad::Biquad;
pub use chain::{FilterChain, all_finite};
pub use controls::Controls;
pub use convolver::Convolver;
pub use delay::Delay;
pub use design::{BiquadKind, BiquadParams, Coeffs};
pub use error::{DEFAULT_FADE_FRAMES, FilterError, MAX_GAIN_DB};
pub use gain::Gain;
pub use limiter::Limiter;
