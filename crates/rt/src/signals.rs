//! Signals taken synchronously by one thread with `sigwait`, so a program can stop
//! cleanly without async signal handlers: quaverd's stop signals (SIGTERM, SIGINT,
//! SIGHUP), and whatever set a command-line tool chooses.
//!
//! Blocking must happen before any other thread starts: a thread started earlier keeps
//! the default disposition and lets the signal kill the process. Children started with
//! `std::process::Command` get an empty mask back, so they still see these signals.

/// Signals that ask a program to stop.
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

fn set_of(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks `signals` in this thread and every thread started after it, so that only
/// [`wait`] receives them.
pub fn block(signals: &[i32]) -> std::io::Result<()> {
    let set = set_of(signals);
    // SAFETY: valid set pointer; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for one of `signals` (blocked with [`block`]); returns its number.
pub fn wait(signals: &[i32]) -> i32 {
    let set = set_of(signals);
    let mut sig = 0;
    // SAFETY: valid pointers; the signals are blocked so sigwait can take them.
    while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
    sig
}

/// Blocks the stop signals in this thread and every thread started after it, so that
/// only [`wait_for_stop_signal`] receives them. Call first thing in `main`.
pub fn block_stop_signals() {
    // Blocking a valid set in the calling thread cannot fail.
    let _ = block(&STOP_SIGNALS);
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
    wait(&STOP_SIGNALS)
}
