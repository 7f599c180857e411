//! Progress bars (indicatif), drawn only when stderr is a terminal. Measurement threads
//! never draw: they bump an atomic counter that the main thread shows.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Makes progress bars, or hidden ones.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    enabled: bool,
}

impl Progress {
    /// Bars are drawn if `wanted` and stderr is a terminal.
    pub fn new(wanted: bool) -> Progress {
        Progress {
            enabled: wanted && std::io::stderr().is_terminal(),
        }
    }

    /// Never draws.
    pub fn hidden() -> Progress {
        Progress { enabled: false }
    }

    /// A bar of `len` steps labelled `msg`.
    pub fn bar(&self, len: u64, msg: impl Into<String>) -> ProgressBar {
        if !self.enabled {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg:40} [{bar:30}] {pos}/{len} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_message(msg.into());
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    }

    /// Prints a line above any bar (or to stderr when bars are off and `always`).
    pub fn println(&self, pb: &ProgressBar, line: &str) {
        if self.enabled {
            pb.println(line);
        }
    }
}

/// Runs `work` on its own thread while this thread shows `counter`'s value on `pb`
/// (offset by `base`) every 100 ms. Returns what `work` returns.
pub fn run_with_progress<T: Send>(
    pb: &ProgressBar,
    base: u64,
    work: impl FnOnce(&AtomicU64) -> T + Send,
) -> T {
    let counter = AtomicU64::new(0);
    std::thread::scope(|s| {
        let h = s.spawn(|| work(&counter));
        while !h.is_finished() {
            pb.set_position(base + counter.load(Ordering::Relaxed));
            std::thread::sleep(Duration::from_millis(100));
        }
        pb.set_position(base + counter.load(Ordering::Relaxed));
        match h.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_work_and_returns_its_value() {
        let pb = Progress::hidden().bar(10, "x");
        let v = run_with_progress(&pb, 0, |c| {
            for _ in 0..10 {
                c.fetch_add(1, Ordering::Relaxed);
            }
            7
        });
        assert_eq!(v, 7);
    }
}
