//! Stop signals (SIGTERM, SIGINT, SIGHUP) taken synchronously by one thread with
//! `sigwait`, so a program can stop cleanly without async signal handlers.
//!
//! Blocking must happen before any other thread starts: a thread started earlier keeps
//! the default disposition and lets the signal kill the process. Children started with
//! `std::process::Command` get an empty mask back, so they still see these signals.

/// Signals that ask a program to stop.
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

fn stop_signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in STOP_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the stop signals in this thread and every thread started after it, so that
/// only [`wait_for_stop_signal`] receives them. Call first thing in `main`.
pub fn block_stop_signals() {
    let set = stop_signal_set();
    // SAFETY: valid set pointer; a null old-set pointer is allowed.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Asks this process to stop as SIGTERM from outside would: with the stop signals
/// blocked everywhere, [`wait_for_stop_signal`] takes it and the usual clean stop runs.
pub fn request_stop() {
    // SAFETY: kill on our own PID with a valid signal number.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Waits for SIGTERM, SIGINT or SIGHUP; returns its number.
pub fn wait_for_stop_signal() -> i32 {
    let set = stop_signal_set();
    let mut sig = 0;
    // SAFETY: valid pointers; the signals are blocked so sigwait can take them.
    unsafe {
        libc::sigwait(&set, &mut sig);
    }
    sig
}
