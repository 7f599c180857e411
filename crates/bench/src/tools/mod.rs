//! The instruments and plumbing every mode shares: processes, /proc, clocks, servers
//! under test, stressors and cyclictest.

pub mod clock;
pub mod cyclictest;
pub mod daemon;
pub mod dl;
pub mod exec;
pub mod libpulse;
pub mod machine;
pub mod paclient;
pub mod procfs;
pub mod rng;
pub mod rt;
pub mod servers;
pub mod signal;
pub mod stressor;
