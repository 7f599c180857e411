//! The server calls ring and doorbell operations from its real-time thread, which
//! must never allocate. This binary installs a counting allocator to prove it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use quaver_protocol::{Doorbell, ShmRing};

struct Counting;

thread_local! {
    // const-initialised with no destructor, so touching it never allocates.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls on this thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> usize {
    ALLOCS.with(|c| c.get())
}

#[test]
fn ring_and_doorbell_hot_paths_do_not_allocate() {
    let (ring, fd) = ShmRing::create(2, 256).unwrap();
    let peer = ShmRing::open(fd, 2).unwrap();
    let bell = Doorbell::new().unwrap();
    let input = vec![0.25f32; 2 * 100];
    let mut output = vec![0.0f32; 2 * 100];

    let before = allocs();
    let mut moved = 0;
    for _ in 0..1000 {
        moved += peer.write(&input);
        moved += ring.read(&mut output);
        ring.set_played_pos(ring.read_pos());
        ring.set_delay_frames(64);
        ring.add_xrun();
        let _ = ring.readable() + ring.writable() + peer.writable();
        let _ = ring.is_corrupt();
        let _ = ring.discard(1);
        bell.ring();
    }
    let after = allocs();
    assert!(moved > 0);
    assert_eq!(
        after - before,
        0,
        "hot paths allocated {} times",
        after - before
    );
    // The counter itself works.
    let v = std::hint::black_box(vec![1u8; 10]);
    assert!(allocs() > after);
    drop(v);
}

#[test]
fn midi_slots_are_read_and_written_without_allocating() {
    use quaver_protocol::CallbackGeometry;
    use quaver_protocol::CallbackShm;
    use quaver_protocol::midi;
    let geo = CallbackGeometry {
        inputs: 1,
        outputs: 1,
        max_frames: 1024,
    };
    let (shm, _fd) = CallbackShm::create(geo, 48000).unwrap();
    let mut list = vec![0u32; 1024];
    let mut out = vec![0u32; 1024];
    let before = allocs();
    for cycle in 0..1000u32 {
        midi::clear(&mut list);
        for t in 0..20 {
            midi::push(&mut list, t * 10, &[0x90, (cycle % 128) as u8, 100]);
        }
        // A hostile header every other cycle.
        if cycle % 2 == 1 {
            list[0] = u32::MAX;
            list[2] = u32::MAX;
        }
        shm.write_input_midi(0, &list);
        shm.write_output_midi(0, &list);
        shm.read_input_midi(0, 256, &mut out);
        shm.read_output_midi(0, 256, &mut out);
        assert!(midi::events(&out).count() >= 20);
    }
    assert_eq!(allocs(), before, "MIDI slot I/O allocated");
}
