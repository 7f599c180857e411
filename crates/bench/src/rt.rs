//! Real-time scheduling for the benchmark's own audio threads (the clients), so that on
//! a machine where quaverd runs SCHED_FIFO the client is not the weak link.

/// Puts the calling thread on SCHED_FIFO at `priority` (as quaverd's threads: reset on
/// fork); false if not permitted.
pub fn set_fifo(priority: i32) -> bool {
    priority > 0 && quaver_rt::set_fifo(quaver_rt::Tid::current(), priority).is_ok()
}

/// The priority quaverd uses for its real-time thread when not told otherwise.
pub const QUAVERD_DEFAULT_PRIORITY: i32 = 20;

/// Priority for a client thread: just below the server's, so the server's cycle is
/// never preempted by its own client.
pub fn client_priority(server: Option<i32>) -> i32 {
    let s = server.unwrap_or(QUAVERD_DEFAULT_PRIORITY);
    if s <= 1 { 0 } else { s - 1 }
}
