//! What a pipe sink and a pipe source share: the FIFO, opened without blocking, and the
//! thread that serves it.

use crate::rt::transport::Bell;
use rustix::fd::OwnedFd;
use rustix::fs::{FileType, Mode, OFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A pipe module's thread and FIFO: [`PipeThread::stop`] ends the thread and removes
/// the FIFO if the module made it.
#[derive(Debug)]
pub(super) struct PipeThread {
    stop: Arc<AtomicBool>,
    bell: Arc<Bell>,
    thread: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    /// The FIFO did not exist before: it is removed on unload, as PulseAudio does.
    created: bool,
}

impl PipeThread {
    /// Runs `body` on a thread called `name`; it must return once `stop` is set and
    /// `bell` rung. If the thread cannot start, the FIFO is removed (if made here).
    pub(super) fn spawn(
        name: &str,
        path: &Path,
        created: bool,
        stop: Arc<AtomicBool>,
        bell: Arc<Bell>,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<PipeThread, String> {
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .map_err(|e| {
                if created {
                    let _ = std::fs::remove_file(path);
                }
                format!("cannot start {name}: {e}")
            })?;
        Ok(PipeThread {
            stop,
            bell,
            thread: Mutex::new(Some(thread)),
            path: path.to_path_buf(),
            created,
        })
    }

    pub(super) fn stop(&self, module: &str) {
        self.stop.store(true, Ordering::Release);
        self.bell.ring();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(t) = thread {
            let _ = t.join();
        }
        if self.created
            && let Err(e) = std::fs::remove_file(&self.path)
        {
            tracing::warn!("{module}: removing {}: {e}", self.path.display());
        }
    }
}

/// Opens (making it if needed) the FIFO at `path` for writing without blocking.
/// Returns the descriptor and whether it was made here.
pub(super) fn open_fifo(path: &Path) -> Result<(OwnedFd, bool), String> {
    let shown = path.display();
    let created = match rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::Fifo,
        Mode::from_raw_mode(0o666),
        0,
    ) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => return Err(format!("cannot make the FIFO {shown}: {e}")),
    };
    // Read-write: the pipe then always has a reader (us), so writing never fails with
    // EPIPE while no program reads it, and opening never waits for one.
    let fd = rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open {shown}: {e}"))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat {shown}: {e}"))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Fifo {
        return Err(format!("{shown} exists and is not a FIFO"));
    }
    Ok((fd, created))
}
