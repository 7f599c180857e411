//! How the peer servers quaver is compared with are started headless, kept here because
//! both the benchmarks (`quaver-bench`) and the tests (`quaver-testkit`) start them and
//! this is the lowest crate both depend on.

/// `pulseaudio`'s arguments for a private, headless server: no config files, so exactly
/// the modules given with `-L` (`-n`), in the foreground, never exiting on idle, no PID
/// file, logging to stderr (the caller's log file).
pub const PULSEAUDIO_HEADLESS: &[&str] = &[
    "-n",
    "--daemonize=no",
    "--exit-idle-time=-1",
    "--disallow-exit",
    "--use-pid-file=no",
    "--system=no",
    "--log-target=stderr",
];
