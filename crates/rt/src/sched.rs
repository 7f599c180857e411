//! The kernel calls: SCHED_FIFO through `sched_setscheduler` and SCHED_DEADLINE through
//! the raw `sched_setattr` syscall (neither glibc, `libc` nor rustix wraps it).
//!
//! Both take a kernel thread id rather than a `pthread_t`, because RealtimeKit and
//! `sched_setattr` only know thread ids; one kind of handle keeps the three paths alike.

use std::io;
use std::time::Duration;

/// `SCHED_DEADLINE` from `<linux/sched.h>` (libc does not export it on every target).
const SCHED_DEADLINE: u32 = 6;
/// OR'ed into the policy of `sched_setscheduler`: children of a fork start at normal
/// priority (RealtimeKit insists on it, and a forked helper should not inherit RT).
const SCHED_RESET_ON_FORK: libc::c_int = 0x4000_0000;
/// The same for `sched_setattr`'s flags. A SCHED_DEADLINE thread may not fork at all
/// without it (the kernel answers EAGAIN).
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// A kernel thread id (`gettid()`), the handle every promotion path takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tid(pub libc::pid_t);

impl Tid {
    /// The calling thread's id.
    pub fn current() -> Tid {
        // SAFETY: gettid takes no arguments and cannot fail.
        Tid(unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t)
    }
}

/// SCHED_DEADLINE parameters, in nanoseconds (runtime ≤ deadline ≤ period).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineParams {
    /// CPU time the thread is guaranteed within each period.
    pub runtime_ns: u64,
    /// How soon after each activation the runtime must have been given.
    pub deadline_ns: u64,
    /// The activation period.
    pub period_ns: u64,
}

impl DeadlineParams {
    /// Shortest period the kernel accepts by default (`sched_deadline_period_min_us`).
    pub const MIN_PERIOD: Duration = Duration::from_micros(100);

    /// Parameters for a thread that runs once per `period` (one quantum): half of each
    /// period reserved, due by the end of the period. Half because a cycle normally
    /// takes a small fraction of a period, so a budget of 1/2 absorbs heavy graphs and
    /// page faults while leaving admission room (the kernel admits 95 % of each CPU in
    /// total) for more deadline threads.
    pub fn for_period(period: Duration) -> DeadlineParams {
        let period_ns = period
            .max(Self::MIN_PERIOD)
            .as_nanos()
            .min(u64::MAX as u128) as u64;
        DeadlineParams {
            runtime_ns: period_ns / 2,
            deadline_ns: period_ns,
            period_ns,
        }
    }
}

impl std::fmt::Display for DeadlineParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        write!(
            f,
            "runtime {:.3} ms, deadline {:.3} ms, period {:.3} ms",
            ms(self.runtime_ns),
            ms(self.deadline_ns),
            ms(self.period_ns)
        )
    }
}

/// `struct sched_attr` with the util-clamp fields (SCHED_ATTR_SIZE_VER1, 56 bytes).
/// Kernels that predate them accept it as long as those fields are zero.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Size of `struct sched_attr` with the util-clamp fields (Linux ≥ 5.3).
const SCHED_ATTR_SIZE_VER1: u32 = 56;
const SCHED_FLAG_KEEP_POLICY: u64 = 0x08;
const SCHED_FLAG_KEEP_PARAMS: u64 = 0x10;
const SCHED_FLAG_UTIL_CLAMP_MIN: u64 = 0x20;

fn setattr(tid: Tid, attr: &SchedAttr) -> io::Result<()> {
    // SAFETY: a valid sched_attr whose `size` covers it; flags argument 0 as required.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid.0,
            attr as *const SchedAttr,
            0u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Thread `tid`'s utilization floor (`util_min`, 0…1024), or `None` when the kernel's
/// `sched_attr` has no util-clamp fields (Linux < 5.3). `Tid(0)` is the calling thread.
pub fn util_min(tid: Tid) -> io::Result<Option<u32>> {
    let mut attr = SchedAttr::default();
    // SAFETY: the kernel writes at most `size` bytes into `attr`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid.0,
            &mut attr as *mut SchedAttr,
            SCHED_ATTR_SIZE_VER1,
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((attr.size >= SCHED_ATTR_SIZE_VER1).then_some(attr.sched_util_min))
}

/// Sets thread `tid`'s utilization floor (clamped to 1024), keeping its policy and
/// parameters (`SCHED_FLAG_UTIL_CLAMP_MIN`). A syscall: for control threads.
pub fn set_util_min(tid: Tid, util_min: u32) -> io::Result<()> {
    setattr(
        tid,
        &SchedAttr {
            size: SCHED_ATTR_SIZE_VER1,
            sched_flags: SCHED_FLAG_KEEP_POLICY
                | SCHED_FLAG_KEEP_PARAMS
                | SCHED_FLAG_UTIL_CLAMP_MIN,
            sched_util_min: util_min.min(1024),
            ..SchedAttr::default()
        },
    )
}

/// Puts thread `tid` in SCHED_DEADLINE with `p` (reset on fork). Calling it again
/// re-parametrises the thread, subject to admission control again.
pub fn set_deadline(tid: Tid, p: DeadlineParams) -> io::Result<()> {
    let attr = SchedAttr {
        size: SCHED_ATTR_SIZE_VER1,
        sched_policy: SCHED_DEADLINE,
        sched_flags: SCHED_FLAG_RESET_ON_FORK,
        sched_runtime: p.runtime_ns,
        sched_deadline: p.deadline_ns,
        sched_period: p.period_ns,
        ..SchedAttr::default()
    };
    setattr(tid, &attr)
}

/// Puts thread `tid` in SCHED_FIFO at `priority` (1–99, reset on fork).
pub fn set_fifo(tid: Tid, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority.clamp(1, 99),
    };
    // SAFETY: a valid parameter block; a thread id is a valid pid for this call.
    let rc =
        unsafe { libc::sched_setscheduler(tid.0, libc::SCHED_FIFO | SCHED_RESET_ON_FORK, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SCHED_FIFO at `priority` for a thread known only by its `pthread_t` (the JACK
/// API's handle): no RealtimeKit possible, since that needs the kernel id.
pub fn set_fifo_pthread(thread: libc::pthread_t, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority.clamp(1, 99),
    };
    // SAFETY: the caller's live thread and a valid parameter block.
    match unsafe {
        libc::pthread_setschedparam(thread, libc::SCHED_FIFO | SCHED_RESET_ON_FORK, &param)
    } {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Returns `pthread_t` `thread` to SCHED_OTHER.
pub fn set_normal_pthread(thread: libc::pthread_t) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above.
    match unsafe { libc::pthread_setschedparam(thread, libc::SCHED_OTHER, &param) } {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Sets thread `tid`'s nice level (Linux applies `setpriority` to a thread id alone).
pub fn set_nice(tid: Tid, nice: i32) -> io::Result<()> {
    // SAFETY: plain syscall.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid.0 as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Returns thread `tid` to SCHED_OTHER.
pub fn set_normal(tid: Tid) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in `set_fifo`.
    let rc = unsafe { libc::sched_setscheduler(tid.0, libc::SCHED_OTHER, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The scheduling policy thread `tid` runs under now, as the kernel names it.
pub fn current_policy(tid: Tid) -> io::Result<&'static str> {
    // SAFETY: plain query.
    let p = unsafe { libc::sched_getscheduler(tid.0) };
    if p < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(match (p & !SCHED_RESET_ON_FORK) as u32 {
        0 => "SCHED_OTHER",
        1 => "SCHED_FIFO",
        2 => "SCHED_RR",
        3 => "SCHED_BATCH",
        5 => "SCHED_IDLE",
        SCHED_DEADLINE => "SCHED_DEADLINE",
        _ => "unknown",
    })
}

/// The calling thread's context switches and page faults so far (`getrusage(RUSAGE_THREAD)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// Switches because the thread blocked (waited for a lock, I/O, sleep).
    pub voluntary: u64,
    /// Switches because something else was given the CPU.
    pub involuntary: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
}

impl ThreadUsage {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
        }
    }
}

/// The calling thread's [`ThreadUsage`] (rustix has no getrusage, hence libc). Tells a
/// thread that blocked from one that was preempted when a wakeup comes late.
pub fn thread_usage() -> io::Result<ThreadUsage> {
    // SAFETY: getrusage only writes the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a valid pointer to an rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ThreadUsage {
        voluntary: ru.ru_nvcsw as u64,
        involuntary: ru.ru_nivcsw as u64,
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
    })
}

/// Utilization clamping (`sched_setattr` with `SCHED_FLAG_UTIL_CLAMP_MIN`): where the
/// kernel has it, a control thread raises the real-time thread's `util_min` together
/// with the device's safety margin (`quaver_devices::margin::util_min_for`); where it
/// does not, [`UtilClamp::probe`] says why and the margin works alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UtilClamp {
    /// The kernel accepts util-clamp requests.
    Available,
    /// It does not; the reason names the kernel's answer.
    Unavailable(String),
}

impl UtilClamp {
    /// Tries it: reads the calling thread's current `util_min` and sets the same value
    /// back (a no-op where it works), and reports why it does not where it fails.
    pub fn probe() -> UtilClamp {
        let me = Tid(0);
        let current = match util_min(me) {
            Ok(Some(v)) => v,
            Ok(None) => {
                return UtilClamp::Unavailable(
                    "the kernel's sched_attr has no util-clamp fields (Linux < 5.3)".into(),
                );
            }
            Err(e) => return UtilClamp::Unavailable(format!("sched_getattr failed: {e}")),
        };
        match set_util_min(me, current) {
            Ok(()) => UtilClamp::Available,
            Err(e) => UtilClamp::Unavailable(match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => format!(
                    "sched_setattr(SCHED_FLAG_UTIL_CLAMP_MIN): {e} (kernel built without CONFIG_UCLAMP_TASK)"
                ),
                Some(libc::EINVAL) | Some(libc::E2BIG) => format!(
                    "sched_setattr(SCHED_FLAG_UTIL_CLAMP_MIN): {e} (kernel predates util clamping)"
                ),
                Some(libc::ENOSYS) => format!("sched_setattr: {e} (system call not available)"),
                Some(libc::EPERM) => format!("sched_setattr: {e} (not permitted)"),
                _ => format!("sched_setattr(SCHED_FLAG_UTIL_CLAMP_MIN): {e}"),
            }),
        }
    }

    /// Sets thread `tid`'s `util_min` (0…1024). A control thread calls this for the
    /// real-time thread when the margin changes; it is a syscall, not for RT code.
    pub fn set_min(tid: i32, util_min: u32) -> io::Result<()> {
        set_util_min(Tid(tid), util_min)
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn a_sleep_counts_as_a_voluntary_switch_of_this_thread_only() {
        let before = thread_usage().expect("getrusage");
        std::thread::sleep(Duration::from_millis(2));
        let d = thread_usage().expect("getrusage").since(&before);
        assert!(d.voluntary >= 1, "{d:?}");
        // Another thread's sleeps are not this thread's.
        let before = thread_usage().expect("getrusage");
        std::thread::spawn(|| {
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
        .join()
        .expect("join");
        let d = thread_usage().expect("getrusage").since(&before);
        assert!(
            d.voluntary < 10,
            "the child's 20 sleeps are not ours: {d:?}"
        );
    }

    #[test]
    fn util_clamp_probe_reports_a_reason_or_works() {
        match UtilClamp::probe() {
            UtilClamp::Available => {
                // Setting our own util_min back to 0 must work where the probe did.
                UtilClamp::set_min(0, 0).unwrap();
            }
            UtilClamp::Unavailable(why) => {
                assert!(why.contains("sched_"), "{why}");
                eprintln!("util clamp unavailable here: {why}");
            }
        }
    }
}
