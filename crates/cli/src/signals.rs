//! Ctrl-C (SIGINT) and SIGTERM as a stop request instead of sudden death.
//!
//! The signals are blocked in the calling thread, and so in every thread started
//! after it, and a dedicated thread takes them with `sigwait`. That avoids async
//! signal handlers altogether: the waiting thread is ordinary code and may set
//! flags, clear a progress bar or exit. A second signal exits at once, so a hung
//! server can never make the command unkillable from the keyboard.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Exit status after a second Ctrl-C: 128 + SIGINT, as shells report it.
const FORCED_EXIT: i32 = 130;

/// Set once a stop signal has arrived.
#[derive(Debug, Clone)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// True once SIGINT or SIGTERM has been received.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The signals the CLI takes as a stop request (a hangup still ends it at once).
const STOP: [i32; 2] = [libc::SIGINT, libc::SIGTERM];

/// Routes SIGINT/SIGTERM to a stop flag; `on_stop` then runs on the signal thread.
///
/// Call before starting any other thread: threads started earlier keep the
/// default disposition and would let a signal kill the process.
pub fn install(on_stop: impl Fn() + Send + 'static) -> io::Result<StopFlag> {
    quaver_rt::signals::block(&STOP)?;
    let flag = StopFlag(Arc::new(AtomicBool::new(false)));
    let f = flag.clone();
    std::thread::Builder::new()
        .name("quaver-signals".into())
        .spawn(move || {
            loop {
                quaver_rt::signals::wait(&STOP);
                if f.0.swap(true, Ordering::AcqRel) {
                    std::process::exit(FORCED_EXIT);
                }
                on_stop();
            }
        })?;
    Ok(flag)
}
