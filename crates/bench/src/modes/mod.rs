//! The measurements, one module per `quaver-bench` subcommand.

pub mod bigbuf;
pub mod convolver;
pub mod drift;
pub mod echo;
pub mod jack;
pub mod latency;
pub mod load;
pub mod peers;
pub mod stress;
pub mod synth;
