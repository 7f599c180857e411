//! The engine's settings, fixed at start.

use crate::rt::sched::{MemoryLock, Scheduler};
use std::time::Duration;

/// Engine settings fixed at start.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Smallest quantum a client may ask for, frames.
    pub quantum_min: usize,
    /// Largest quantum, frames; buffers are sized for it.
    pub quantum_max: usize,
    /// Quantum when no stream asks for a latency.
    pub quantum_default: usize,
    /// SCHED_FIFO priority for the RT thread; 0 disables real-time scheduling.
    pub rt_priority: i32,
    /// SCHED_FIFO, or SCHED_DEADLINE with the quantum as period (FIFO if refused).
    pub scheduler: Scheduler,
    /// How much memory to lock against page faults on the RT thread.
    pub lock_memory: MemoryLock,
    /// Idle time before devices suspend; `None` never suspends.
    pub suspend_timeout: Option<Duration>,
    /// Most nodes at once.
    pub max_nodes: usize,
    /// Length of link and volume ramps, frames (capped at one quantum for links).
    pub ramp_frames: usize,
    /// Time every node per cycle ([`crate::rt::timing`]): one clock read per node boundary
    /// on the real-time thread.
    pub node_timing: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            quantum_min: 32,
            quantum_max: 8192,
            quantum_default: 1024,
            rt_priority: 20,
            scheduler: Scheduler::Fifo,
            lock_memory: MemoryLock::Auto,
            suspend_timeout: Some(quaver_devices::DEFAULT_SUSPEND_TIMEOUT),
            max_nodes: 1024,
            ramp_frames: quaver_dsp::volume::DEFAULT_RAMP_FRAMES,
            node_timing: true,
        }
    }
}
