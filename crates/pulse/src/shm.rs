//! Shared memory this server hands to clients: a memfd of fixed size, sealed and mapped
//! here. Both the srbchannel block and the record pool are one.

use rustix::fd::OwnedFd;

/// A sealed memfd and our shared mapping of all of it.
pub(crate) struct SealedMemfd {
    map: *mut u8,
    len: usize,
    /// The descriptor, until it is handed to the client with REGISTER_MEMFD_SHMID.
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is owned by this value and only touched through it.
unsafe impl Send for SealedMemfd {}

impl SealedMemfd {
    /// A memfd of `len` bytes, mapped read-write. It is sealed against shrinking and
    /// growing, and against further seals: the client gets the descriptor, and a client
    /// that could truncate it would make our next access a SIGBUS that takes the whole
    /// server down. It stays writable, because libpulse maps every registered memfd
    /// read-write (a write seal would make its mmap fail).
    pub(crate) fn new(name: &str, len: usize) -> std::io::Result<SealedMemfd> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        // SAFETY: a fresh shared mapping of a file we just sized and sealed; unmapped in
        // Drop.
        let map = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )?
        }
        .cast::<u8>();
        Ok(SealedMemfd {
            map,
            len,
            fd: Some(fd),
        })
    }

    /// The start of the mapping (page-aligned, `len` bytes).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map
    }

    /// The descriptor to register with the client (taken once).
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
    }
}

impl Drop for SealedMemfd {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length and never handed out.
        unsafe {
            let _ = rustix::mm::munmap(self.map.cast(), self.len);
        }
    }
}
