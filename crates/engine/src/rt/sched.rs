//! Real-time scheduling of the engine thread, through `quaver-rt` (shared with the
//! client libraries): the control side promotes the thread once it started, and
//! re-parametrises SCHED_DEADLINE when the quantum (its period) changes.

use std::sync::Mutex;
use std::time::Duration;

pub use quaver_rt::{MemoryLock, RtOutcome, Scheduler};
use quaver_rt::{Request, Tid};

/// The RT thread as the control side knows it.
#[derive(Debug)]
pub(crate) struct RtThread {
    /// What it got.
    pub outcome: RtOutcome,
    /// Its kernel thread id (None before start, or in manual mode).
    pub tid: Option<Tid>,
    /// Returned to SCHED_OTHER while the graph freewheels (`engine/freewheel.rs`).
    pub freewheeling: bool,
}

/// One quantum as a duration.
pub(crate) fn period(quantum: usize, rate: u32) -> Duration {
    Duration::from_nanos(quantum as u64 * 1_000_000_000 / rate.max(1) as u64)
}

/// Promotes the freshly started RT thread and logs the outcome (one warning with what
/// to do when everything was refused).
pub(crate) fn promote(tid: Tid, req: &Request) -> RtOutcome {
    let p = quaver_rt::promote(tid, req);
    if let Some(why) = p.outcome.refused() {
        tracing::warn!("{}", quaver_rt::refusal_message("the audio thread", why));
        if let RtOutcome::Nice { .. } = p.outcome {
            tracing::info!("real-time thread runs {}", p.outcome);
        }
        return p.outcome;
    }
    match &p.outcome {
        RtOutcome::Disabled => tracing::info!("real-time scheduling disabled by configuration"),
        ok => {
            for r in &p.refusals {
                tracing::info!("real-time: {r}; falling back");
            }
            tracing::info!("real-time thread runs {ok}");
        }
    }
    p.outcome
}

/// The quantum changed: a SCHED_DEADLINE thread gets the new period (runtime and
/// deadline scale with it); if the kernel refuses (admission control), SCHED_FIFO.
/// Runs on the service thread, never on the RT thread.
pub(crate) fn quantum_changed(rt: &Mutex<RtThread>, quantum: usize, rate: u32, priority: i32) {
    let mut rt = rt.lock().expect("poisoned");
    let (RtOutcome::Deadline(old), Some(tid), false) = (&rt.outcome, rt.tid, rt.freewheeling)
    else {
        return;
    };
    let new = quaver_rt::DeadlineParams::for_period(period(quantum, rate));
    if new == *old {
        return;
    }
    match quaver_rt::set_deadline(tid, new) {
        Ok(()) => {
            tracing::debug!("SCHED_DEADLINE follows the quantum: {new}");
            rt.outcome = RtOutcome::Deadline(new);
        }
        Err(e) => {
            tracing::warn!(
                "SCHED_DEADLINE refused for the new quantum ({new}: {e}); trying SCHED_FIFO"
            );
            // Privileged (SCHED_DEADLINE was granted), so no RealtimeKit round trip
            // while the service thread holds the engine's lock.
            let req = Request {
                rtkit: false,
                ..Request::fifo(priority)
            };
            rt.outcome = promote(tid, &req);
        }
    }
}

/// Locks memory as configured and logs what was achieved; returns whether RT thread
/// stacks must be locked one by one.
pub(crate) fn lock_memory(mode: MemoryLock) -> bool {
    let outcome = quaver_rt::lock_process(mode);
    match &outcome {
        quaver_rt::LockOutcome::Off => tracing::info!("memory locking disabled by configuration"),
        quaver_rt::LockOutcome::All => tracing::info!("memory locked (mlockall, on fault)"),
        quaver_rt::LockOutcome::StacksOnly(why) => {
            tracing::info!("{why}; locking the real-time thread's stack only")
        }
    }
    outcome.lock_stacks()
}
