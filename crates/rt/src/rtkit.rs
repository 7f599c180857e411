//! RealtimeKit (`org.freedesktop.RealtimeKit1` on the system bus): the daemon that
//! hands SCHED_FIFO to unprivileged desktop programs.
//!
//! It refuses a process whose RLIMIT_RTTIME is unset or above its `RTTimeUSecMax`
//! (a runaway RT thread must be killable by the kernel), so the limit is lowered
//! first; and it caps the priority at `MaxRealtimePriority`.

use crate::dbus::{Arg, Connection, DbusError, Value};
use crate::sched::Tid;

const NAME: &str = "org.freedesktop.RealtimeKit1";
const PATH: &str = "/org/freedesktop/RealtimeKit1";

/// Why RealtimeKit did not promote a thread.
#[derive(Debug, thiserror::Error)]
pub enum RtkitError {
    /// The bus or RealtimeKit could not be reached, or refused.
    #[error("{0}")]
    Dbus(#[from] DbusError),
    /// RLIMIT_RTTIME could not be lowered to what RealtimeKit demands.
    #[error("cannot set RLIMIT_RTTIME: {0}")]
    Limit(std::io::Error),
}

/// Asks RealtimeKit to run thread `tid` of this process SCHED_FIFO at `priority` (or
/// its maximum, if lower). Returns the priority granted. Blocks for a D-Bus round
/// trip or more: call it from a control thread.
pub fn make_realtime(tid: Tid, priority: i32) -> Result<i32, RtkitError> {
    make_realtime_on(&mut Connection::system()?, tid, priority)
}

/// [`make_realtime`] over an open bus connection.
pub fn make_realtime_on(bus: &mut Connection, tid: Tid, priority: i32) -> Result<i32, RtkitError> {
    let max = match bus.get_property(NAME, PATH, NAME, "MaxRealtimePriority")? {
        Value::Int(v) | Value::Long(v) => v as i32,
        _ => return Err(DbusError::Malformed("MaxRealtimePriority is not a number").into()),
    };
    let rttime = match bus.get_property(NAME, PATH, NAME, "RTTimeUSecMax")? {
        Value::Int(v) | Value::Long(v) => v.max(0) as u64,
        _ => return Err(DbusError::Malformed("RTTimeUSecMax is not a number").into()),
    };
    limit_rttime(rttime).map_err(RtkitError::Limit)?;
    let prio = priority.clamp(1, max.max(1));
    bus.call(
        NAME,
        PATH,
        NAME,
        "MakeThreadRealtime",
        &[Arg::U64(tid.0 as u64), Arg::U32(prio as u32)],
    )?;
    Ok(prio)
}

/// Asks RealtimeKit to raise thread `tid`'s nice level to `nice` (or its
/// `MinNiceLevel`, if that is higher). Returns the level granted.
pub fn make_high_priority_on(bus: &mut Connection, tid: Tid, nice: i32) -> Result<i32, RtkitError> {
    let min = match bus.get_property(NAME, PATH, NAME, "MinNiceLevel")? {
        Value::Int(v) | Value::Long(v) => v as i32,
        _ => return Err(DbusError::Malformed("MinNiceLevel is not a number").into()),
    };
    let nice = nice.max(min);
    bus.call(
        NAME,
        PATH,
        NAME,
        "MakeThreadHighPriority",
        &[Arg::U64(tid.0 as u64), Arg::I32(nice)],
    )?;
    Ok(nice)
}

/// Lowers RLIMIT_RTTIME (µs of CPU an RT thread may use without blocking) to at most
/// `usec`; never raises it.
fn limit_rttime(usec: u64) -> std::io::Result<()> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut cur) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if cur.rlim_max != libc::RLIM_INFINITY && cur.rlim_max <= usec {
        return Ok(());
    }
    let new = libc::rlimit {
        rlim_cur: usec,
        rlim_max: usec,
    };
    // SAFETY: valid limit struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_RTTIME, &new) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request path against the fake bus (not a real RealtimeKit: see
    /// docs/engine.md for the run against rtkit-daemon on a private system bus).
    #[test]
    fn asks_with_the_thread_id_and_a_capped_priority() {
        let (addr, server) = crate::dbus::fake::serve();
        let mut bus = Connection::open(&addr).unwrap();
        let tid = Tid::current();
        assert_eq!(make_realtime_on(&mut bus, tid, 20).unwrap(), 15);
        drop(bus);
        assert_eq!(server.join().unwrap(), Some((tid.0 as u64, 15)));
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_RTTIME, &mut l) }, 0);
        assert!(l.rlim_max <= 200_000);
    }

    #[test]
    fn high_priority_is_capped_at_min_nice_level() {
        let (addr, server) = crate::dbus::fake::serve();
        let mut bus = Connection::open(&addr).unwrap();
        let tid = Tid::current();
        assert_eq!(make_high_priority_on(&mut bus, tid, -20).unwrap(), -15);
        drop(bus);
        assert_eq!(server.join().unwrap(), Some((tid.0 as u64, -15i32 as u32)));
    }
}
