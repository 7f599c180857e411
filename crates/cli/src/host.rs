//! The local machine as `/proc` shows it, for `quaver setup` and `quaver doctor`: who
//! listens on a unix socket (its inode in `/proc/net/unix`, then the processes holding a
//! descriptor of it), which systemd unit a process runs in (`/proc/PID/cgroup`), who
//! holds a sound card's PCM device open, and a process's scheduling and locked memory.
//! Processes of other users whose descriptors we may not read are not seen.

use std::collections::BTreeSet;
use std::path::Path;

/// `__SO_ACCEPTCON` in `/proc/net/unix`'s flags: the socket listens.
const SO_ACCEPTCON: u32 = 0x0001_0000;

/// A process found through `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
    /// The systemd unit it runs in, if any (`pulseaudio.service`, `init.scope` for a
    /// manager itself, `session-2.scope` for a login session's processes).
    pub unit: Option<String>,
}

impl std::fmt::Display for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.comm)?;
        if let Some(u) = &self.unit {
            write!(f, " in {u}")?;
        }
        Ok(())
    }
}

/// The inodes of listening unix sockets bound to `path`, from `/proc/net/unix`'s text.
pub fn listening_inodes(net_unix: &str, path: &Path) -> BTreeSet<u64> {
    let want = path.as_os_str().as_encoded_bytes();
    net_unix
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode [Path]
            let mut f = line.split_whitespace();
            let flags = u32::from_str_radix(f.nth(3)?, 16).ok()?;
            let inode = f.nth(2)?.parse::<u64>().ok()?;
            let p = f.next()?;
            (flags & SO_ACCEPTCON != 0 && p.as_bytes() == want).then_some(inode)
        })
        .collect()
}

/// Listening unix socket paths (inode, path) that satisfy `keep`.
pub fn listening_paths(net_unix: &str, keep: impl Fn(&str) -> bool) -> Vec<(u64, String)> {
    net_unix
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let flags = u32::from_str_radix(f.nth(3)?, 16).ok()?;
            let inode = f.nth(2)?.parse::<u64>().ok()?;
            let p = f.next()?;
            (flags & SO_ACCEPTCON != 0 && keep(p)).then(|| (inode, p.to_string()))
        })
        .collect()
}

/// The systemd unit of a process from its `/proc/PID/cgroup` text: the last path
/// element naming a unit (`.service`, `.scope`).
pub fn unit_of_cgroup(cgroup: &str) -> Option<String> {
    // cgroup v2's line is "0::/path"; with v1 too, the name=systemd line carries it.
    let path = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| *p != "/")
        .or_else(|| {
            cgroup
                .lines()
                .find_map(|l| l.split_once(":name=systemd:").map(|(_, p)| p))
        })?;
    path.rsplit('/')
        .find(|e| e.ends_with(".service") || e.ends_with(".scope"))
        .map(str::to_string)
}

/// The process `pid` as `/proc` shows it (None once it is gone).
pub fn process(pid: u32) -> Option<Proc> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let unit = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|c| unit_of_cgroup(&c));
    Some(Proc {
        pid,
        comm: comm.trim_end().to_string(),
        unit,
    })
}

/// Every process id in `/proc`.
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut v: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The targets of every descriptor of process `pid` we may read.
fn fd_targets(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let t = std::fs::read_link(e.ok()?.path()).ok()?;
        Some(t.to_string_lossy().into_owned())
    })
    .collect()
}

/// The processes holding a descriptor of a socket with one of `inodes`.
pub fn socket_holders(inodes: &BTreeSet<u64>) -> Vec<Proc> {
    if inodes.is_empty() {
        return Vec::new();
    }
    pids()
        .into_iter()
        .filter(|&pid| {
            fd_targets(pid).iter().any(|t| {
                t.strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| inodes.contains(&n))
            })
        })
        .filter_map(process)
        .collect()
}

/// The processes listening on the unix socket at `path`.
pub fn listeners(path: &Path) -> Vec<Proc> {
    let net = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    socket_holders(&listening_inodes(&net, path))
}

/// The card and device of a PCM device node path (`/dev/snd/pcmC1D0p` → (1, 0)).
pub fn pcm_node(path: &str) -> Option<(u32, u32)> {
    let rest = path.strip_prefix("/dev/snd/pcmC")?;
    let rest = rest.strip_suffix(['p', 'c'])?;
    let (card, dev) = rest.split_once('D')?;
    Some((card.parse().ok()?, dev.parse().ok()?))
}

/// Every process holding a PCM device node open, with the card numbers it holds.
pub fn pcm_holders() -> Vec<(Proc, BTreeSet<u32>)> {
    pids()
        .into_iter()
        .filter_map(|pid| {
            let cards: BTreeSet<u32> = fd_targets(pid)
                .iter()
                .filter_map(|t| pcm_node(t).map(|(c, _)| c))
                .collect();
            if cards.is_empty() {
                return None;
            }
            Some((process(pid)?, cards))
        })
        .collect()
}

/// The processes whose command name is one of `names`.
pub fn processes_named(names: &[&str]) -> Vec<Proc> {
    pids()
        .into_iter()
        .filter_map(process)
        .filter(|p| names.contains(&p.comm.as_str()))
        .collect()
}

/// A thread's scheduling policy from its `/proc/…/stat` text (field 41): 0 normal,
/// 1 FIFO, 2 RR, 3 batch, 5 idle, 6 deadline.
pub fn stat_policy(stat: &str) -> Option<u32> {
    // The command name (field 2) may hold spaces and parentheses: count after its end.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(38)?.parse().ok()
}

/// The name of a scheduling policy number.
pub fn policy_name(policy: u32) -> &'static str {
    match policy {
        0 => "SCHED_OTHER",
        1 => "SCHED_FIFO",
        2 => "SCHED_RR",
        3 => "SCHED_BATCH",
        5 => "SCHED_IDLE",
        6 => "SCHED_DEADLINE",
        _ => "unknown",
    }
}

/// Process `pid`'s threads that run a real-time policy: (thread name, policy).
pub fn realtime_threads(pid: u32) -> Vec<(String, u32)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let p = e.ok()?.path();
        let policy = stat_policy(&std::fs::read_to_string(p.join("stat")).ok()?)?;
        let name = std::fs::read_to_string(p.join("comm")).ok()?;
        matches!(policy, 1 | 2 | 6).then(|| (name.trim_end().to_string(), policy))
    })
    .collect()
}

/// A `kB` field of `/proc/PID/status` (`VmLck`, `VmRSS`).
pub fn status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(field)?.strip_prefix(':')?;
        v.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_UNIX: &str = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 4242 /run/user/1000/pulse/native
0000000000000000: 00000003 00000000 00000000 0001 03 4343 /run/user/1000/pulse/native
0000000000000000: 00000002 00000000 00010000 0001 01 4444 /run/user/1000/quaver/native
0000000000000000: 00000002 00000000 00010000 0005 01 4545 @/tmp/.X11-unix/X0
0000000000000000: 00000002 00000000 00010000 0001 01 4646
";

    #[test]
    fn listening_sockets_are_found_by_path_and_connections_are_not() {
        let l = listening_inodes(NET_UNIX, Path::new("/run/user/1000/pulse/native"));
        assert_eq!(l.into_iter().collect::<Vec<_>>(), [4242]);
        assert!(listening_inodes(NET_UNIX, Path::new("/run/user/1000/pulse")).is_empty());
        let q = listening_paths(NET_UNIX, |p| p.ends_with("/native"));
        assert_eq!(q.len(), 2);
        assert_eq!(q[1], (4444, "/run/user/1000/quaver/native".into()));
    }

    #[test]
    fn units_come_from_the_cgroup_path() {
        assert_eq!(
            unit_of_cgroup(
                "0::/user.slice/user-1000.slice/user@1000.service/session.slice/pulseaudio.service\n"
            )
            .as_deref(),
            Some("pulseaudio.service")
        );
        assert_eq!(
            unit_of_cgroup("0::/user.slice/user-1000.slice/user@1000.service/init.scope\n")
                .as_deref(),
            Some("init.scope")
        );
        assert_eq!(
            unit_of_cgroup("12:pids:/\n1:name=systemd:/user.slice/session-3.scope\n0::/\n")
                .as_deref(),
            Some("session-3.scope")
        );
        assert_eq!(unit_of_cgroup("0::/\n"), None);
    }

    #[test]
    fn pcm_nodes_scheduling_and_status_fields_parse() {
        assert_eq!(pcm_node("/dev/snd/pcmC1D0p"), Some((1, 0)));
        assert_eq!(pcm_node("/dev/snd/pcmC12D3c"), Some((12, 3)));
        assert_eq!(pcm_node("/dev/snd/controlC0"), None);
        assert_eq!(pcm_node("/dev/snd/pcmC1D0x"), None);
        // The command name may contain ") (": the policy is counted from the last ')'.
        let stat = "17 (a) (b c) S 1 17 17 0 -1 4194560 100 0 0 0 5 3 0 0 -21 0 3 0 \
                    123 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 20 1 0 0 0";
        assert_eq!(stat_policy(stat), Some(1));
        assert_eq!(policy_name(6), "SCHED_DEADLINE");
        let status = "Name:\tquaverd\nVmLck:\t     132 kB\nVmRSS:\t   9000 kB\n";
        assert_eq!(status_kb(status, "VmLck"), Some(132));
        assert_eq!(status_kb(status, "VmPin"), None);
    }

    #[test]
    fn this_process_is_seen_with_its_own_listener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sock");
        let _l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let found = listeners(&path);
        assert_eq!(
            found.iter().map(|p| p.pid).collect::<Vec<_>>(),
            [std::process::id()]
        );
        assert!(realtime_threads(std::process::id()).is_empty());
    }
}
