//! Real-time scheduling for the engine thread.
//!
//! We call `pthread_setschedparam` through `libc` rather than a wrapper crate: it is one
//! call, and issue-5 work needs `sched_setattr` (SCHED_DEADLINE) which the wrappers lack.

use std::os::unix::thread::JoinHandleExt;
use std::thread::JoinHandle;

/// Outcome of asking for real-time scheduling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtOutcome {
    /// Not requested (priority 0 in the config).
    Disabled,
    /// Running SCHED_FIFO at this priority.
    Fifo(i32),
    /// Refused; the thread keeps normal priority.
    Refused(String),
}

/// Promotes `thread` to SCHED_FIFO at `priority` (1–99). Called from a control thread
/// so the audio thread never makes this (possibly slow) call itself.
pub fn promote<T>(thread: &JoinHandle<T>, priority: i32) -> RtOutcome {
    if priority <= 0 {
        return RtOutcome::Disabled;
    }
    let priority = priority.min(99);
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: the pthread_t comes from a live JoinHandle and `param` is a valid struct.
    let rc =
        unsafe { libc::pthread_setschedparam(thread.as_pthread_t(), libc::SCHED_FIFO, &param) };
    if rc == 0 {
        RtOutcome::Fifo(priority)
    } else {
        RtOutcome::Refused(std::io::Error::from_raw_os_error(rc).to_string())
    }
}
