//! Keeping the audio path's memory resident: a page fault that has to read from swap
//! (or even a minor fault under memory pressure) on the RT thread is an xrun.

/// Bytes of stack each RT thread touches (and locks) before its loop: far more than
/// the cycle uses, far less than the 2 MiB a Rust thread gets.
pub const RT_STACK_PREFAULT: usize = 256 * 1024;

/// How much memory to lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryLock {
    /// Lock nothing (stacks are still prefaulted).
    Off,
    /// The RT stacks only (see [`lock_process`] for why not everything).
    #[default]
    Auto,
    /// Try `mlockall`; on refusal fall back to the RT stacks.
    All,
}

impl std::str::FromStr for MemoryLock {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "none" => Ok(MemoryLock::Off),
            "auto" => Ok(MemoryLock::Auto),
            "all" => Ok(MemoryLock::All),
            _ => Err(format!("unknown memory lock {s:?} (off, auto or all)")),
        }
    }
}

/// What [`lock_process`] achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOutcome {
    /// Nothing was asked.
    Off,
    /// The whole process is locked (`mlockall(MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT)`).
    All,
    /// Only RT thread stacks will be locked; the string says why not everything.
    StacksOnly(String),
}

impl LockOutcome {
    /// Whether RT threads should lock their own stacks.
    pub fn lock_stacks(&self) -> bool {
        matches!(self, LockOutcome::StacksOnly(_))
    }
}

fn memlock_limit() -> Option<u64> {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut l) } != 0 {
        return Some(0);
    }
    (l.rlim_cur != libc::RLIM_INFINITY).then_some(l.rlim_cur)
}

/// Locks the process's memory as `mode` asks. Never fails: a refusal is reported in
/// the outcome for the caller to log.
///
/// `Auto` locks only the RT stacks: locked pages cannot be given back by the allocator
/// (glibc trims with `MADV_DONTNEED`, which locked pages refuse), so under `mlockall`
/// the daemon's RSS stays at its high-water mark (three times the memory after a burst
/// of streams, docs/bench.md). `All` is for machines under
/// memory pressure, where a fault from swap on the RT path is the bigger risk.
///
/// `MCL_ONFAULT` is why locking everything is affordable: pages are locked as they
/// are touched instead of all at once, so the 8 MiB reserved for each thread's stack
/// and the allocator's arenas do not become resident. `MCL_FUTURE` is only used
/// when RLIMIT_MEMLOCK is unlimited (or we are root), because under a finite limit
/// every later `mmap` beyond it would fail — turning a locking nicety into
/// allocation failures.
pub fn lock_process(mode: MemoryLock) -> LockOutcome {
    if mode == MemoryLock::Off {
        return LockOutcome::Off;
    }
    if mode == MemoryLock::Auto {
        return LockOutcome::StacksOnly(
            "lock_memory = \"auto\" keeps the allocator free to return memory".into(),
        );
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    // Under a finite limit MCL_FUTURE would make every later mmap beyond it fail.
    let flags = if root || memlock_limit().is_none() {
        libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT
    } else {
        libc::MCL_CURRENT | libc::MCL_ONFAULT
    };
    // SAFETY: plain syscall.
    if unsafe { libc::mlockall(flags) } == 0 {
        LockOutcome::All
    } else {
        LockOutcome::StacksOnly(format!(
            "mlockall refused: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Touches [`RT_STACK_PREFAULT`] bytes of the calling thread's stack so the cycle never
/// faults a stack page in, and locks them when `lock` is set. Call it on the RT thread
/// before its loop (it is set-up, not part of the cycle). Returns why locking failed.
pub fn prepare_rt_stack(lock: bool) -> Result<(), String> {
    let top = touch_stack();
    if !lock {
        return Ok(());
    }
    // SAFETY: sysconf is a plain query.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let hi = top.next_multiple_of(page);
    let lo = (top - RT_STACK_PREFAULT) & !(page - 1);
    // SAFETY: the range lies inside this thread's mapped stack (just touched).
    if unsafe { libc::mlock(lo as *const libc::c_void, hi - lo) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "mlock of the RT stack refused: {} (raise RLIMIT_MEMLOCK, e.g. 'memlock' in limits.conf)",
            std::io::Error::last_os_error()
        ))
    }
}

/// Writes one byte per page of a large stack array; returns an address near the top
/// of the touched range.
#[inline(never)]
fn touch_stack() -> usize {
    let mut buf = [0u8; RT_STACK_PREFAULT];
    let top = buf.as_ptr() as usize + RT_STACK_PREFAULT;
    let b = std::hint::black_box(&mut buf);
    for i in (0..RT_STACK_PREFAULT).step_by(4096) {
        b[i] = 1;
    }
    std::hint::black_box(b);
    top
}
