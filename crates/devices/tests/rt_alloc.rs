//! The real-time methods (start, wait, write, read, suspend, counters) never allocate once
//! a device is constructed — nor after an idle close and reopen (which may allocate: it
//! happens outside the cycle). A counting global allocator (this test binary only)
//! counts allocations made by the current thread.

use quaver_devices::{
    AlsaDevice, Device, DeviceDefaults, DeviceError, DeviceSpec, Fault, FileConfig, FileSink,
    NullConfig, NullDevice, SimCard, SimConfig, VirtualClock, WavFormat, parse_spec,
};
use quaver_dsp::{ChannelMap, PlanarBuf};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

/// Runs start + `cycles` cycles + suspend + start + cycles, counting allocations.
fn run(dev: &mut dyn Device, q: usize, cycles: usize) -> u64 {
    let mut inb = PlanarBuf::new(2, q);
    let outb = PlanarBuf::new(2, q);
    let before = allocs();
    for round in 0..2 {
        dev.start(q).unwrap();
        for _ in 0..cycles {
            dev.wait(q).unwrap();
            dev.read(&mut inb.view_mut(q)).unwrap();
            dev.write(outb.view(q)).unwrap();
            let _ = dev.counters();
            let _ = dev.playback_delay() + dev.capture_delay();
        }
        if round == 0 {
            dev.suspend();
        }
    }
    allocs() - before
}

/// Closes the device for idleness and reopens it (both may allocate: they happen
/// outside the cycle), then counts the allocations of `cycles` cycles.
fn cycles_after_reopen(dev: &mut dyn Device, q: usize, cycles: usize) -> u64 {
    let mut inb = PlanarBuf::new(2, q);
    let outb = PlanarBuf::new(2, q);
    dev.suspend();
    assert!(dev.close_idle(), "{} closes when idle", dev.info().name);
    dev.start(q).unwrap();
    let before = allocs();
    for _ in 0..cycles {
        dev.wait(q).unwrap();
        dev.read(&mut inb.view_mut(q)).unwrap();
        dev.write(outb.view(q)).unwrap();
        let _ = dev.counters();
    }
    allocs() - before
}

#[test]
fn null_rt_path_does_not_allocate() {
    let mut dev = NullDevice::with_clock(
        NullConfig {
            capture: true,
            ..NullConfig::default()
        },
        Box::new(VirtualClock::new()),
    )
    .unwrap();
    assert_eq!(run(&mut dev, 256, 200), 0);
}

#[test]
fn sim_rt_path_does_not_allocate_even_through_xruns() {
    let mut dev = SimCard::with_clock(
        SimConfig {
            faults: vec![
                Fault::Xrun { at_cycle: 50 },
                Fault::Stall {
                    at_cycle: 80,
                    duration: Duration::from_millis(200),
                },
            ],
            drift_ppm: 37.0,
            ..SimConfig::default()
        },
        Box::new(VirtualClock::new()),
    )
    .unwrap();
    assert_eq!(run(&mut dev, 256, 200), 0);
    assert!(dev.counters().underruns >= 2);
    assert_eq!(cycles_after_reopen(&mut dev, 256, 200), 0);
}

#[test]
fn sim_first_gone_error_does_not_allocate() {
    let mut dev = SimCard::with_clock(
        SimConfig {
            faults: vec![Fault::Unplug { at_cycle: 3 }],
            ..SimConfig::default()
        },
        Box::new(VirtualClock::new()),
    )
    .unwrap();
    let before = allocs();
    dev.start(128).unwrap();
    for _ in 0..3 {
        dev.wait(128).unwrap();
    }
    let err = dev.wait(128).unwrap_err();
    assert_eq!(allocs() - before, 0);
    assert!(matches!(err, DeviceError::Gone(ref n) if n == "sim"));
}

#[test]
fn file_rt_path_does_not_allocate() {
    let dir = tempfile::tempdir().unwrap();
    for format in [
        WavFormat::S16,
        WavFormat::S24,
        WavFormat::S32,
        WavFormat::F32,
    ] {
        let mut dev = FileSink::create(FileConfig {
            path: dir.path().join(format!("{format}.wav")),
            rate: 48_000,
            channels: ChannelMap::stereo(),
            format,
            freewheel: true,
        })
        .unwrap();
        // 2 × 2000 cycles of 256 stereo frames: many flushes of the output buffer.
        assert_eq!(run(&mut dev, 256, 2000), 0, "{format}");
        dev.close().unwrap();
    }
}

#[test]
fn alsa_rt_path_does_not_allocate() {
    if let Err(why) = quaver_devices::alsa::available() {
        eprintln!("skipping: {why}");
        return;
    }
    // alsa-lib's null PCM, duplex, with mmap and with read/write access; and told to
    // pace on its pointer, which exercises the status reading and the switch to clock
    // pacing when the pointer turns out not to run in real time.
    for opts in ["capture", "capture,mmap=off", "pace=device,capture"] {
        let Ok(DeviceSpec::Alsa(cfg)) =
            parse_spec(&format!("alsa:null,{opts}"), &DeviceDefaults::default())
        else {
            panic!("spec");
        };
        let clock = VirtualClock::new();
        let mut dev =
            AlsaDevice::open_with_clock(cfg, Box::new(clock.clone()), Box::new(clock)).unwrap();
        assert_eq!(run(&mut dev, 256, 500), 0, "{opts}");
        assert_eq!(
            cycles_after_reopen(&mut dev, 256, 500),
            0,
            "{opts}, reopened"
        );
        dev.close().unwrap();
    }
}

#[test]
fn midi_queue_push_pop_and_message_check_do_not_allocate() {
    use quaver_devices::alsa::seq::{PortId, check_message, queue};
    let (mut tx, mut rx) = queue(8, 64);
    let port = PortId {
        client: 20,
        port: 0,
    };
    let sysex = [0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7];
    let mut dst = [0u8; 64];
    let before = allocs();
    let mut got = 0;
    // Enough rounds to wrap both rings many times.
    for i in 0..1000u64 {
        check_message(&sysex).unwrap();
        tx.push(i, port, &[0x90, (i % 128) as u8, 0x7F]).unwrap();
        tx.push(i, port, &sysex).unwrap();
        while let Some(m) = rx.pop() {
            got += m.copy_to(&mut dst).unwrap();
        }
    }
    assert_eq!(allocs() - before, 0);
    assert_eq!(got, 1000 * 9);
}

#[test]
fn the_counter_sees_allocations() {
    let before = allocs();
    let v = std::hint::black_box(vec![1u8; 10]);
    assert_eq!(allocs() - before, 1);
    drop(v);
}
