//! Real-time scheduling for quaver's audio threads, shared by the server's RT thread,
//! native callback clients and the libjack replacement.
//!
//! A promotion is asked for from a control thread, never from the audio thread itself:
//! the RealtimeKit path is a D-Bus round trip (and a polkit check behind it). The
//! audio thread is started with [`spawn`], which publishes its kernel thread id and
//! prefaults its stack, and the control thread then calls [`promote`]:
//!
//! 1. SCHED_DEADLINE, when asked and the period is known (needs CAP_SYS_NICE);
//! 2. SCHED_FIFO directly (root, CAP_SYS_NICE or RLIMIT_RTPRIO);
//! 3. SCHED_FIFO through RealtimeKit;
//! 4. otherwise SCHED_OTHER, with every reason collected for one warning, at nice
//!    [`FALLBACK_NICE`] if that is allowed (RLIMIT_NICE, or RealtimeKit's
//!    `MakeThreadHighPriority`).

pub mod dbus;
pub mod memory;
pub mod rtkit;
pub mod rttime;
pub mod sched;
pub mod signals;

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use memory::{LockOutcome, MemoryLock, lock_process, prepare_rt_stack};
pub use rttime::RttimeGuard;
pub use sched::{
    DeadlineParams, ThreadUsage, Tid, UtilClamp, set_deadline, set_fifo, set_normal, thread_usage,
};

/// The nice level asked for when real-time scheduling is refused (PipeWire's choice).
pub const FALLBACK_NICE: i32 = -11;

/// CLOCK_MONOTONIC in nanoseconds: a vDSO read, no system call, so RT-safe.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// What to tell a user whose system refused every kind of real-time scheduling.
pub const ADVICE: &str = "to allow it, run rtkit-daemon (RealtimeKit) on the system bus, or \
     raise RLIMIT_RTPRIO (e.g. '@audio - rtprio 95' and '@audio - memlock unlimited' in \
     /etc/security/limits.d/audio.conf, with the user in group audio), or grant CAP_SYS_NICE";

/// The scheduling class asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduler {
    /// SCHED_FIFO at the request's priority.
    #[default]
    Fifo,
    /// SCHED_DEADLINE with parameters from the period; SCHED_FIFO if refused.
    Deadline,
}

impl std::str::FromStr for Scheduler {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fifo" => Ok(Scheduler::Fifo),
            "deadline" => Ok(Scheduler::Deadline),
            _ => Err(format!("unknown scheduler {s:?} (fifo or deadline)")),
        }
    }
}

/// A request for real-time scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Preferred class.
    pub scheduler: Scheduler,
    /// SCHED_FIFO priority (1–99); 0 or less disables real-time scheduling.
    pub priority: i32,
    /// The thread's activation period (one quantum), needed for SCHED_DEADLINE.
    pub period: Option<Duration>,
    /// Whether to ask RealtimeKit when SCHED_FIFO is refused.
    pub rtkit: bool,
}

impl Request {
    /// SCHED_FIFO at `priority`, through RealtimeKit if need be.
    pub fn fifo(priority: i32) -> Request {
        Request {
            scheduler: Scheduler::Fifo,
            priority,
            period: None,
            rtkit: true,
        }
    }

    /// The request a client library makes by default: SCHED_FIFO at
    /// `$QUAVER_RT_PRIORITY`, else `default_priority` (0 or less disables). Clients
    /// do not ask for SCHED_DEADLINE: their period (the server's quantum) changes
    /// under them and they have no control thread to re-parametrise it.
    pub fn from_env(default_priority: i32) -> Request {
        let priority = std::env::var("QUAVER_RT_PRIORITY")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default_priority);
        Request::fifo(priority)
    }
}

/// How a SCHED_FIFO promotion was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `sched_setscheduler` by this process.
    Direct,
    /// RealtimeKit did it for us (SCHED_RR unless it was started with
    /// `--scheduling-policy=FIFO`; `round_robin` says which the kernel reports).
    RealtimeKit {
        /// The thread runs SCHED_RR (same priority rules; equal-priority threads
        /// take turns instead of running to completion).
        round_robin: bool,
    },
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtOutcome {
    /// Not requested.
    Disabled,
    /// SCHED_FIFO at this priority.
    Fifo {
        /// The priority granted.
        priority: i32,
        /// Who set it.
        via: Via,
    },
    /// SCHED_DEADLINE with these parameters.
    Deadline(DeadlineParams),
    /// Real-time was refused, but the thread got a raised nice level (SCHED_OTHER).
    Nice {
        /// The nice level granted (negative: favoured).
        nice: i32,
        /// Who set it.
        via: Via,
        /// Why real-time was refused.
        refused: String,
    },
    /// Everything was refused; the thread runs at normal priority. Says why.
    Refused(String),
}

impl RtOutcome {
    /// Whether the thread runs with a real-time class.
    pub fn is_realtime(&self) -> bool {
        matches!(self, RtOutcome::Fifo { .. } | RtOutcome::Deadline(_))
    }

    /// Why real-time scheduling was refused, when it was asked for and refused.
    pub fn refused(&self) -> Option<&str> {
        match self {
            RtOutcome::Refused(why) | RtOutcome::Nice { refused: why, .. } => Some(why),
            _ => None,
        }
    }
}

impl std::fmt::Display for RtOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RtOutcome::Disabled => write!(f, "SCHED_OTHER (real-time disabled)"),
            RtOutcome::Fifo {
                priority,
                via: Via::Direct,
            } => write!(f, "SCHED_FIFO {priority}"),
            RtOutcome::Fifo {
                priority,
                via: Via::RealtimeKit { round_robin },
            } => {
                let class = if *round_robin { "RR" } else { "FIFO" };
                write!(f, "SCHED_{class} {priority} via RealtimeKit")
            }
            RtOutcome::Deadline(p) => write!(f, "SCHED_DEADLINE ({p})"),
            RtOutcome::Nice { nice, via, .. } => {
                let by = if matches!(via, Via::Direct) {
                    ""
                } else {
                    " via RealtimeKit"
                };
                write!(f, "SCHED_OTHER nice {nice}{by} (real-time refused)")
            }
            RtOutcome::Refused(_) => write!(f, "SCHED_OTHER (real-time refused)"),
        }
    }
}

/// The result of [`promote`]: the outcome and, for each better option that was
/// refused on the way, why (to log even when a fallback succeeded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    /// What the thread got.
    pub outcome: RtOutcome,
    /// Refusals on the way, e.g. "SCHED_DEADLINE: Operation not permitted".
    pub refusals: Vec<String>,
}

/// Promotes thread `tid` as `req` asks, falling back as the module docs say. Blocks
/// (RealtimeKit): call it from a control thread.
pub fn promote(tid: Tid, req: &Request) -> Promotion {
    let mut refusals = Vec::new();
    if req.priority <= 0 {
        return Promotion {
            outcome: RtOutcome::Disabled,
            refusals,
        };
    }
    if req.scheduler == Scheduler::Deadline {
        match req.period {
            Some(period) => {
                let p = DeadlineParams::for_period(period);
                match set_deadline(tid, p) {
                    Ok(()) => {
                        return Promotion {
                            outcome: RtOutcome::Deadline(p),
                            refusals,
                        };
                    }
                    Err(e) => refusals.push(format!("SCHED_DEADLINE ({p}): {e}")),
                }
            }
            None => refusals.push("SCHED_DEADLINE: the thread's period is unknown".into()),
        }
    }
    let priority = req.priority.min(99);
    match set_fifo(tid, priority) {
        Ok(()) => {
            return Promotion {
                outcome: RtOutcome::Fifo {
                    priority,
                    via: Via::Direct,
                },
                refusals,
            };
        }
        Err(e) => refusals.push(format!("SCHED_FIFO {priority}: {e}")),
    }
    let mut bus = None;
    if req.rtkit {
        match dbus::Connection::system() {
            Ok(mut c) => {
                match rtkit::make_realtime_on(&mut c, tid, priority) {
                    Ok(p) => {
                        let round_robin = sched::current_policy(tid).is_ok_and(|c| c == "SCHED_RR");
                        return Promotion {
                            outcome: RtOutcome::Fifo {
                                priority: p,
                                via: Via::RealtimeKit { round_robin },
                            },
                            refusals,
                        };
                    }
                    Err(e) => refusals.push(format!("RealtimeKit: {e}")),
                }
                bus = Some(c);
            }
            Err(e) => refusals.push(format!("RealtimeKit: {e}")),
        }
    }
    // Second best, as PipeWire does: a raised nice level, directly (RLIMIT_NICE) or
    // through RealtimeKit. Still reported as a refusal: it is not real-time.
    let refused = refusals.join("; ");
    let nice = match sched::set_nice(tid, FALLBACK_NICE) {
        Ok(()) => Some((FALLBACK_NICE, Via::Direct)),
        Err(_) => bus.as_mut().and_then(|c| {
            rtkit::make_high_priority_on(c, tid, FALLBACK_NICE)
                .ok()
                .map(|n| (n, Via::RealtimeKit { round_robin: false }))
        }),
    };
    let outcome = match nice {
        Some((nice, via)) => RtOutcome::Nice { nice, via, refused },
        None => RtOutcome::Refused(refused),
    };
    Promotion { outcome, refusals }
}

/// Starts thread `name` running `f` after it published its thread id and prefaulted
/// (and, with `lock_stack`, locked) its stack; returns once the id is known, so the
/// caller can [`promote`] it. A stack-lock refusal is returned for the caller to log
/// (the thread itself must not log).
pub fn spawn<F, T>(
    name: String,
    lock_stack: bool,
    f: F,
) -> io::Result<(JoinHandle<T>, Tid, Option<String>)>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    let handle = std::thread::Builder::new().name(name).spawn(move || {
        let locked = prepare_rt_stack(lock_stack);
        let _ = tx.send((Tid::current(), locked.err()));
        drop(tx);
        f()
    })?;
    // The thread sends before anything else; a bound keeps a wedged system from
    // hanging the caller.
    let (tid, note) = rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| io::Error::other("the new thread never reported its id"))?;
    Ok((handle, tid, note))
}

/// Logs-ready text for a refused request: what was refused and what to do.
pub fn refusal_message(what: &str, refusals: &str) -> String {
    format!(
        "real-time scheduling refused for {what} ({refusals}); it runs without real-time priority and may glitch under load; {ADVICE}"
    )
}
