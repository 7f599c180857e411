//! Shared memory: what this server hands to clients (a memfd of fixed size, sealed and
//! mapped here; the srbchannel block and the record pool are one), and the clients' own
//! memfd pools that playback audio arrives in.

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

/// Largest client pool we map (libpulse's is 64 MiB); a larger one is read with `pread`.
const MAX_CLIENT_MAP: u64 = 1 << 30;

/// A client's memfd pool, registered with REGISTER_MEMFD_SHMID, that its blocks refer
/// to. Mapped read-only when we could seal it against shrinking (libpulse creates its
/// pools sealable and never shrinks them): a block is then one copy out of the mapping
/// instead of a `pread` system call (32 `paplay --latency-msec=20` streams sent 4 000
/// blocks a second). Without the seal a client could truncate the file under our
/// mapping and our next read would be a SIGBUS that takes the server down, so such a
/// pool (and anything that is not a memfd) is read with `pread`.
pub(crate) struct ClientPool {
    fd: OwnedFd,
    map: *const u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only read through it.
unsafe impl Send for ClientPool {}

impl ClientPool {
    /// Takes the client's descriptor; maps it if it can be sealed against shrinking.
    pub(crate) fn new(fd: OwnedFd) -> ClientPool {
        let mut pool = ClientPool {
            fd,
            map: std::ptr::null(),
            len: 0,
        };
        if rustix::fs::fcntl_add_seals(&pool.fd, rustix::fs::SealFlags::SHRINK).is_err() {
            return pool;
        }
        // Sealed: from here on the size can only grow, so all of it stays mapped.
        let Ok(size) = rustix::fs::fstat(&pool.fd).map(|st| st.st_size as u64) else {
            return pool;
        };
        if size == 0 || size > MAX_CLIENT_MAP {
            return pool;
        }
        // SAFETY: a read-only shared mapping of `size` bytes of a file that cannot
        // shrink below that; unmapped in Drop.
        let map = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                size as usize,
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::SHARED,
                &pool.fd,
                0,
            )
        };
        if let Ok(p) = map {
            pool.map = p.cast::<u8>().cast_const();
            pool.len = size as usize;
        }
        pool
    }

    /// Whether blocks are copied out of a mapping (else read with `pread`).
    pub(crate) fn mapped(&self) -> bool {
        !self.map.is_null()
    }

    /// Fills `dst` from `offset`; what lies beyond the pool's end reads as silence.
    /// Returns how many bytes came from the pool.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> usize {
        if self.map.is_null() {
            let mut got = 0;
            while got < dst.len() {
                match rustix::io::pread(&self.fd, &mut dst[got..], offset + got as u64) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            dst[got..].fill(0);
            return got;
        }
        let start = (offset.min(self.len as u64)) as usize;
        let n = dst.len().min(self.len - start);
        // SAFETY: start + n <= len, inside the mapping, which cannot lose pages (sealed
        // against shrinking). The client may write the block while we copy it; we copy
        // bytes out before looking at them, as with the srbchannel.
        unsafe {
            std::ptr::copy_nonoverlapping(self.map.add(start), dst.as_mut_ptr(), n);
        }
        dst[n..].fill(0);
        n
    }
}

impl Drop for ClientPool {
    fn drop(&mut self) {
        if !self.map.is_null() {
            // SAFETY: mapped in `new` with this length and never handed out.
            unsafe {
                let _ = rustix::mm::munmap(self.map.cast_mut().cast(), self.len);
            }
        }
    }
}
