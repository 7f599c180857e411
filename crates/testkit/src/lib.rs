//! What the end-to-end tests of every crate share: a private quaverd per test (own
//! runtime, config and state directories, started and stopped by PID), the workspace's
//! built binaries, bounded waits and the signal/process helpers around them, and the
//! WAV and bit-exactness helpers the audio tests compare with, and the kernel-ALSA
//! guest rig ([`guest`]), and rival servers from Debian started headless ([`peers`]).
//!
//! A dev-dependency only. Every wait here is time-bounded, and nothing is ever stopped
//! by name.

mod audio;
mod bins;
mod daemon;
pub mod guest;
pub mod peers;
mod process;

pub use audio::*;
pub use bins::*;
pub use daemon::*;
pub use process::*;

use std::time::Duration;

/// How long any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);
