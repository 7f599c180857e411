//! Real-time scheduling for the benchmark's own audio threads (the clients), so that on
//! a machine where quaverd runs SCHED_FIFO the client is not the weak link.

/// Puts the calling thread on SCHED_FIFO at `priority` (as quaverd's threads: reset on
/// fork); false if not permitted.
pub fn set_fifo(priority: i32) -> bool {
    priority > 0 && quaver_rt::set_fifo(quaver_rt::Tid::current(), priority).is_ok()
}

/// Keeps the calling thread on CPU `cpu` only; false if refused (e.g. no such CPU).
pub fn pin_to_cpu(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET stays within it (checked
    // above); sched_setaffinity(0, …) applies to the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The priority quaverd uses for its real-time thread when not told otherwise.
pub const QUAVERD_DEFAULT_PRIORITY: i32 = 20;

/// Priority for a client thread: just below the server's, so the server's cycle is
/// never preempted by its own client.
pub fn client_priority(server: Option<i32>) -> i32 {
    let s = server.unwrap_or(QUAVERD_DEFAULT_PRIORITY);
    if s <= 1 { 0 } else { s - 1 }
}
