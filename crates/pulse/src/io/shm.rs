//! Shared memory: what this server hands to clients (a memfd of fixed size, sealed and
//! mapped here; the srbchannel block and the record pool are one), and the clients' own
//! memfd pools that playback audio arrives in.

use rustix::fd::OwnedFd;

/// A shared mapping of the first `len` bytes of a file, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of `fd` shared, with `prot`. The caller makes sure the file
    /// cannot shrink below `len` while mapped (a seal), or an access would be a SIGBUS.
    fn new(fd: &OwnedFd, len: usize, prot: rustix::mm::ProtFlags) -> std::io::Result<Mapping> {
        // SAFETY: a fresh mapping, owned by the value returned and unmapped in Drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )?
        };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length and never handed out past the owner.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.cast(), self.len);
        }
    }
}

// SAFETY: the mapping is owned by its value and only touched through it.
unsafe impl Send for Mapping {}

/// A sealed memfd and our shared mapping of all of it.
pub(crate) struct SealedMemfd {
    map: Mapping,
    /// The descriptor, until it is handed to the client with REGISTER_MEMFD_SHMID.
    fd: Option<OwnedFd>,
}

impl SealedMemfd {
    /// A memfd of `len` bytes, mapped read-write. It is sealed against shrinking and
    /// growing, and against further seals: the client gets the descriptor, and a client
    /// that could truncate it would make our next access a SIGBUS that takes the whole
    /// server down. It stays writable, because libpulse maps every registered memfd
    /// read-write (a write seal would make its mmap fail).
    pub(crate) fn new(name: &str, len: usize) -> std::io::Result<SealedMemfd> {
        use rustix::fs::{MemfdFlags, SealFlags};
        use rustix::mm::ProtFlags;
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let map = Mapping::new(&fd, len, ProtFlags::READ | ProtFlags::WRITE)?;
        Ok(SealedMemfd { map, fd: Some(fd) })
    }

    /// The start of the mapping (page-aligned, `len` bytes).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.ptr
    }

    /// The descriptor to register with the client (taken once).
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fd.take()
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
    map: Option<Mapping>,
}

impl ClientPool {
    /// Takes the client's descriptor; maps it if it can be sealed against shrinking.
    pub(crate) fn new(fd: OwnedFd) -> ClientPool {
        let map = Self::seal_and_map(&fd);
        ClientPool { fd, map }
    }

    fn seal_and_map(fd: &OwnedFd) -> Option<Mapping> {
        rustix::fs::fcntl_add_seals(fd, rustix::fs::SealFlags::SHRINK).ok()?;
        // Sealed: from here on the size can only grow, so all of it stays mapped.
        let size = rustix::fs::fstat(fd).ok()?.st_size as u64;
        if size == 0 || size > MAX_CLIENT_MAP {
            return None;
        }
        Mapping::new(fd, size as usize, rustix::mm::ProtFlags::READ).ok()
    }

    /// Whether blocks are copied out of a mapping (else read with `pread`).
    pub(crate) fn mapped(&self) -> bool {
        self.map.is_some()
    }

    /// The mapping (start, bytes), when the pool is mapped.
    pub(crate) fn mapping(&self) -> Option<(*const u8, usize)> {
        self.map.as_ref().map(|m| (m.ptr.cast_const(), m.len))
    }

    /// Fills `dst` from `offset`; what lies beyond the pool's end reads as silence.
    /// Returns how many bytes came from the pool.
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> usize {
        let Some(map) = &self.map else {
            let mut got = 0;
            while got < dst.len() {
                match rustix::io::pread(&self.fd, &mut dst[got..], offset + got as u64) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            dst[got..].fill(0);
            return got;
        };
        let start = offset.min(map.len as u64) as usize;
        let n = dst.len().min(map.len - start);
        // SAFETY: start + n <= len, inside the mapping, which cannot lose pages (sealed
        // against shrinking). The client may write the block while we copy it; we copy
        // bytes out before looking at them, as with the srbchannel.
        unsafe {
            std::ptr::copy_nonoverlapping(map.ptr.add(start), dst.as_mut_ptr(), n);
        }
        dst[n..].fill(0);
        n
    }
}
