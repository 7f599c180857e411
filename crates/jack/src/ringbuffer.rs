//! `jack_ringbuffer_*`: JACK's lock-free single-reader single-writer byte ring, in
//! userspace. The struct is public in JACK's header, so its layout is kept; the size
//! is a power of two and one byte stays free to tell full from empty, as in JACK.
//! Positions are published with release stores and read with acquire loads.

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::guard;
use crate::types::{jack_ringbuffer_data_t, jack_ringbuffer_t};

/// # Safety
/// `rb` points to a live ring buffer.
unsafe fn wptr<'a>(rb: *const jack_ringbuffer_t) -> &'a AtomicUsize {
    // SAFETY: the field is a naturally aligned usize inside a live struct;
    // AtomicUsize has the same layout.
    unsafe { AtomicUsize::from_ptr(std::ptr::addr_of!((*rb).write_ptr).cast_mut()) }
}

/// # Safety
/// `rb` points to a live ring buffer.
unsafe fn rptr<'a>(rb: *const jack_ringbuffer_t) -> &'a AtomicUsize {
    // SAFETY: as in `wptr`.
    unsafe { AtomicUsize::from_ptr(std::ptr::addr_of!((*rb).read_ptr).cast_mut()) }
}

/// `jack_ringbuffer_create`: a ring of at least `sz` bytes (`sz` rounded up to a power
/// of two; one byte of it is never used).
#[unsafe(no_mangle)]
pub extern "C" fn jack_ringbuffer_create(sz: usize) -> *mut jack_ringbuffer_t {
    guard(std::ptr::null_mut(), || {
        let size = sz.max(1).checked_next_power_of_two();
        let Some(size) = size else {
            return std::ptr::null_mut();
        };
        // SAFETY: plain allocations, checked for NULL, initialised before use.
        unsafe {
            let rb = libc::malloc(size_of::<jack_ringbuffer_t>()).cast::<jack_ringbuffer_t>();
            if rb.is_null() {
                return rb;
            }
            let buf = libc::malloc(size).cast::<c_char>();
            if buf.is_null() {
                libc::free(rb.cast());
                return std::ptr::null_mut();
            }
            rb.write(jack_ringbuffer_t {
                buf,
                write_ptr: 0,
                read_ptr: 0,
                size,
                size_mask: size - 1,
                mlocked: 0,
            });
            rb
        }
    })
}

/// `jack_ringbuffer_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_free(rb: *mut jack_ringbuffer_t) {
    guard((), || {
        if rb.is_null() {
            return;
        }
        // SAFETY: `rb` came from jack_ringbuffer_create and is freed once.
        unsafe {
            if (*rb).mlocked != 0 {
                libc::munlock((*rb).buf.cast(), (*rb).size);
            }
            libc::free((*rb).buf.cast());
            libc::free(rb.cast());
        }
    })
}

/// `jack_ringbuffer_mlock`: locks the data in memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_mlock(rb: *mut jack_ringbuffer_t) -> c_int {
    guard(-1, || {
        if rb.is_null() {
            return -1;
        }
        // SAFETY: a live ring buffer.
        unsafe {
            if libc::mlock((*rb).buf.cast(), (*rb).size) != 0 {
                return -1;
            }
            (*rb).mlocked = 1;
        }
        0
    })
}

/// `jack_ringbuffer_reset`: empties the ring (not thread-safe, as in JACK).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_reset(rb: *mut jack_ringbuffer_t) {
    guard((), || {
        if rb.is_null() {
            return;
        }
        // SAFETY: a live ring buffer.
        unsafe {
            (*rb).read_ptr = 0;
            (*rb).write_ptr = 0;
            std::ptr::write_bytes((*rb).buf, 0, (*rb).size);
        }
    })
}

/// `jack_ringbuffer_reset_size`: empties the ring and uses only `sz` bytes of it (a
/// power of two no larger than the current size; other values are ignored, since the
/// struct does not remember how much was allocated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_reset_size(rb: *mut jack_ringbuffer_t, sz: usize) {
    guard((), || {
        if rb.is_null() {
            return;
        }
        // SAFETY: a live ring buffer.
        unsafe {
            if !sz.is_power_of_two() || sz > (*rb).size {
                return;
            }
            (*rb).size = sz;
            (*rb).size_mask = sz - 1;
            (*rb).read_ptr = 0;
            (*rb).write_ptr = 0;
        }
    })
}

fn read_space(rb: *const jack_ringbuffer_t, r: usize) -> usize {
    // SAFETY: callers pass a live ring buffer.
    unsafe {
        let w = wptr(rb).load(Ordering::Acquire);
        (w.wrapping_sub(r)) & (*rb).size_mask
    }
}

fn write_space(rb: *const jack_ringbuffer_t, w: usize) -> usize {
    // SAFETY: callers pass a live ring buffer.
    unsafe {
        let r = rptr(rb).load(Ordering::Acquire);
        (r.wrapping_sub(w).wrapping_sub(1)) & (*rb).size_mask
    }
}

/// `jack_ringbuffer_read_space`: bytes available to read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_read_space(rb: *const jack_ringbuffer_t) -> usize {
    if rb.is_null() {
        return 0;
    }
    // SAFETY: a live ring buffer.
    read_space(rb, unsafe { rptr(rb) }.load(Ordering::Relaxed))
}

/// `jack_ringbuffer_write_space`: bytes available to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_write_space(rb: *const jack_ringbuffer_t) -> usize {
    if rb.is_null() {
        return 0;
    }
    // SAFETY: a live ring buffer.
    write_space(rb, unsafe { wptr(rb) }.load(Ordering::Relaxed))
}

/// Copies `n` bytes out of the ring starting at position `r` into `dest`.
///
/// # Safety
/// `rb` is live, `dest` holds `n` bytes and `n` ≤ the readable bytes at `r`.
unsafe fn copy_out(rb: *const jack_ringbuffer_t, r: usize, dest: *mut c_char, n: usize) {
    // SAFETY: per the contract every range stays inside the ring and `dest`.
    unsafe {
        let size = (*rb).size;
        let start = r & (*rb).size_mask;
        let first = n.min(size - start);
        std::ptr::copy_nonoverlapping((*rb).buf.add(start), dest, first);
        std::ptr::copy_nonoverlapping((*rb).buf, dest.add(first), n - first);
    }
}

/// `jack_ringbuffer_read`: copies up to `cnt` bytes out; returns how many.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_read(
    rb: *mut jack_ringbuffer_t,
    dest: *mut c_char,
    cnt: usize,
) -> usize {
    if rb.is_null() || dest.is_null() {
        return 0;
    }
    // SAFETY: a live ring buffer; `dest` holds `cnt` bytes (caller's contract).
    unsafe {
        let r = rptr(rb).load(Ordering::Relaxed);
        let n = cnt.min(read_space(rb, r));
        copy_out(rb, r, dest, n);
        rptr(rb).store((r + n) & (*rb).size_mask, Ordering::Release);
        n
    }
}

/// `jack_ringbuffer_peek`: like read, without consuming.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_peek(
    rb: *mut jack_ringbuffer_t,
    dest: *mut c_char,
    cnt: usize,
) -> usize {
    if rb.is_null() || dest.is_null() {
        return 0;
    }
    // SAFETY: as in read.
    unsafe {
        let r = rptr(rb).load(Ordering::Relaxed);
        let n = cnt.min(read_space(rb, r));
        copy_out(rb, r, dest, n);
        n
    }
}

/// `jack_ringbuffer_write`: copies up to `cnt` bytes in; returns how many.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_write(
    rb: *mut jack_ringbuffer_t,
    src: *const c_char,
    cnt: usize,
) -> usize {
    if rb.is_null() || src.is_null() {
        return 0;
    }
    // SAFETY: a live ring buffer; `src` holds `cnt` bytes; ranges stay in the ring.
    unsafe {
        let w = wptr(rb).load(Ordering::Relaxed);
        let n = cnt.min(write_space(rb, w));
        let size = (*rb).size;
        let start = w & (*rb).size_mask;
        let first = n.min(size - start);
        std::ptr::copy_nonoverlapping(src, (*rb).buf.add(start), first);
        std::ptr::copy_nonoverlapping(src.add(first), (*rb).buf, n - first);
        wptr(rb).store((w + n) & (*rb).size_mask, Ordering::Release);
        n
    }
}

/// `jack_ringbuffer_read_advance`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_read_advance(rb: *mut jack_ringbuffer_t, cnt: usize) {
    if rb.is_null() {
        return;
    }
    // SAFETY: a live ring buffer.
    unsafe {
        let r = rptr(rb).load(Ordering::Relaxed);
        rptr(rb).store(r.wrapping_add(cnt) & (*rb).size_mask, Ordering::Release);
    }
}

/// `jack_ringbuffer_write_advance`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_write_advance(rb: *mut jack_ringbuffer_t, cnt: usize) {
    if rb.is_null() {
        return;
    }
    // SAFETY: a live ring buffer.
    unsafe {
        let w = wptr(rb).load(Ordering::Relaxed);
        wptr(rb).store(w.wrapping_add(cnt) & (*rb).size_mask, Ordering::Release);
    }
}

/// Fills `vec[0..2]` with the (up to two) contiguous regions of `len` bytes from `pos`.
///
/// # Safety
/// `rb` is live and `vec` points to two writable entries.
unsafe fn vectors(
    rb: *const jack_ringbuffer_t,
    pos: usize,
    len: usize,
    vec: *mut jack_ringbuffer_data_t,
) {
    // SAFETY: per the contract.
    unsafe {
        let size = (*rb).size;
        let start = pos & (*rb).size_mask;
        let first = len.min(size - start);
        *vec = jack_ringbuffer_data_t {
            buf: (*rb).buf.add(start),
            len: first,
        };
        *vec.add(1) = jack_ringbuffer_data_t {
            buf: (*rb).buf,
            len: len - first,
        };
    }
}

/// `jack_ringbuffer_get_read_vector`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_get_read_vector(
    rb: *const jack_ringbuffer_t,
    vec: *mut jack_ringbuffer_data_t,
) {
    if rb.is_null() || vec.is_null() {
        return;
    }
    // SAFETY: a live ring buffer and the caller's two entries.
    unsafe {
        let r = rptr(rb).load(Ordering::Relaxed);
        vectors(rb, r, read_space(rb, r), vec);
    }
}

/// `jack_ringbuffer_get_write_vector`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jack_ringbuffer_get_write_vector(
    rb: *const jack_ringbuffer_t,
    vec: *mut jack_ringbuffer_data_t,
) {
    if rb.is_null() || vec.is_null() {
        return;
    }
    // SAFETY: a live ring buffer and the caller's two entries.
    unsafe {
        let w = wptr(rb).load(Ordering::Relaxed);
        vectors(rb, w, write_space(rb, w), vec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jack_semantics_size_space_wrap() {
        // SAFETY: a ring created, used and freed here.
        unsafe {
            let rb = jack_ringbuffer_create(10);
            assert_eq!((*rb).size, 16);
            assert_eq!(jack_ringbuffer_write_space(rb), 15, "one byte stays free");
            assert_eq!(jack_ringbuffer_read_space(rb), 0);
            let data: Vec<c_char> = (0..12).map(|i| i as c_char).collect();
            assert_eq!(jack_ringbuffer_write(rb, data.as_ptr(), 12), 12);
            let mut out = [0 as c_char; 16];
            assert_eq!(jack_ringbuffer_peek(rb, out.as_mut_ptr(), 4), 4);
            assert_eq!(&out[..4], &data[..4]);
            assert_eq!(jack_ringbuffer_read(rb, out.as_mut_ptr(), 10), 10);
            assert_eq!(&out[..10], &data[..10]);
            // Wrap around.
            assert_eq!(jack_ringbuffer_write(rb, data.as_ptr(), 12), 12);
            assert_eq!(jack_ringbuffer_write_space(rb), 1);
            assert_eq!(jack_ringbuffer_write(rb, data.as_ptr(), 5), 1);
            let mut v = [jack_ringbuffer_data_t {
                buf: std::ptr::null_mut(),
                len: 0,
            }; 2];
            jack_ringbuffer_get_read_vector(rb, v.as_mut_ptr());
            assert_eq!(v[0].len + v[1].len, 15);
            assert_eq!(v[0].len, 6, "from position 10 to the end");
            assert_eq!(jack_ringbuffer_read(rb, out.as_mut_ptr(), 16), 15);
            assert_eq!(&out[..2], &data[10..12]);
            assert_eq!(&out[2..14], &data[..12]);
            assert_eq!(out[14], data[0]);
            jack_ringbuffer_get_write_vector(rb, v.as_mut_ptr());
            assert_eq!(v[0].len + v[1].len, 15);
            jack_ringbuffer_write_advance(rb, 3);
            assert_eq!(jack_ringbuffer_read_space(rb), 3);
            jack_ringbuffer_read_advance(rb, 3);
            assert_eq!(jack_ringbuffer_read_space(rb), 0);
            jack_ringbuffer_reset(rb);
            assert_eq!(jack_ringbuffer_write_space(rb), 15);
            jack_ringbuffer_reset_size(rb, 8);
            assert_eq!(jack_ringbuffer_write_space(rb), 7);
            jack_ringbuffer_free(rb);
        }
    }

    #[test]
    fn threads_move_bytes_in_order() {
        struct P(*mut jack_ringbuffer_t);
        // SAFETY: the ring is single-producer single-consumer by design.
        unsafe impl Send for P {}
        let rb = jack_ringbuffer_create(64);
        let p = P(rb);
        let writer = std::thread::spawn(move || {
            let p = p;
            let mut next = 0u32;
            while next < 100_000 {
                let b = (next % 251) as c_char;
                // SAFETY: live ring, one byte.
                if unsafe { jack_ringbuffer_write(p.0, &b, 1) } == 1 {
                    next += 1;
                }
            }
        });
        let mut got = 0u32;
        let mut buf = [0 as c_char; 32];
        while got < 100_000 {
            // SAFETY: live ring, our buffer.
            let n = unsafe { jack_ringbuffer_read(rb, buf.as_mut_ptr(), 32) };
            for &b in &buf[..n] {
                assert_eq!(b, (got % 251) as c_char);
                got += 1;
            }
        }
        writer.join().unwrap();
        // SAFETY: freed once, after both threads are done.
        unsafe { jack_ringbuffer_free(rb) };
    }
}
