//! The process thread: woken by quaverd once per cycle, it copies the inputs into the
//! ports' buffers, runs the application's process callback, copies the outputs back
//! and tells the server the cycle is done. Nothing here allocates, locks or logs once
//! the loop runs; the only syscalls are the `poll` that waits for the wake, the
//! eventfd reads/writes and clock reads.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

use quaver_client::callback::Wake;
use quaver_client::quaver_protocol::callback::CYCLE_FREEWHEEL;

use crate::client::{Callbacks, Client, ClientPtr, now_ns};
use crate::midi;
use crate::port::PortKind;
use crate::types::*;

/// Waits for the next cycle and prepares it; returns its frames, or 0 when the client
/// was deactivated or the server went away. *Process thread*.
pub(crate) fn cycle_wait(c: &Client, cbs: &Callbacks) -> u32 {
    loop {
        let last = c.last_seq.load(Ordering::Relaxed);
        let h = match c.cb.wait(last) {
            Ok(Wake::Cycle(h)) => h,
            Ok(Wake::Stopped) => return 0,
            Ok(Wake::ServerGone) | Err(_) => {
                c.notifier.server_gone();
                return 0;
            }
        };
        c.last_seq.store(h.seq, Ordering::Relaxed);
        if h.frames == 0 {
            c.cb.complete(h.seq);
            continue;
        }
        c.cur_seq.store(h.seq, Ordering::Relaxed);
        c.cycle_start_ns.store(now_ns(), Ordering::Relaxed);
        c.publish_timing(h.position, h.time_ns, h.period_ns, h.frames);
        let f = h.frames as usize;
        if h.frames != c.buffer_size.swap(h.frames, Ordering::AcqRel) {
            c.known_size.store(h.frames, Ordering::Relaxed);
            if let (Some(cb), a) = cbs.buffer_size {
                // SAFETY: the application's callback with its own argument.
                unsafe { cb(h.frames, a.0) };
            }
        }
        // As jackd2 tells every client when freewheel starts and stops: before the first
        // cycle of the new kind.
        let freewheel = h.flags & CYCLE_FREEWHEEL != 0;
        if freewheel != c.freewheeling.swap(freewheel, Ordering::AcqRel) {
            // The notification thread takes this thread's real-time priority away while
            // the graph freewheels and gives it back after (`follow_freewheel`).
            c.notifier.freewheel_changed();
            if let (Some(cb), a) = cbs.freewheel {
                // SAFETY: the application's callback with its own argument.
                unsafe { cb(c_int::from(freewheel), a.0) };
            }
        }
        crate::transport::before_process(&c.transport, c.cb.shm());
        let xruns = c.cb.xruns();
        if xruns != c.xruns_seen.swap(xruns, Ordering::Relaxed) {
            c.notifier.xrun();
        }
        for s in c.in_slots.iter() {
            let p = s.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: port objects live until close; only this thread touches
                // their buffers.
                let port = unsafe { &*p };
                match port.kind {
                    PortKind::Audio => {
                        let buf = unsafe { port.audio_mut() };
                        c.cb.read_input(port.index, &mut buf[..f]);
                    }
                    PortKind::Midi => {
                        // SAFETY: as above.
                        let (list, buf) = unsafe { (port.wire_mut(), port.midi_mut()) };
                        c.cb.read_input_midi(port.index, h.frames, list);
                        midi::fill_from_list(buf, h.frames, list);
                    }
                }
            }
        }
        for s in c.out_slots.iter() {
            let p = s.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: as above.
                let port = unsafe { &*p };
                match port.kind {
                    PortKind::Audio => unsafe { port.audio_mut()[..f].fill(0.0) },
                    PortKind::Midi => unsafe { midi::clear_for_cycle(port.midi_mut(), h.frames) },
                }
            }
        }
        return h.frames;
    }
}

/// Publishes the outputs of the current cycle and completes it. *Process thread*.
pub(crate) fn cycle_signal(c: &Client, status: c_int) {
    let f = c.timing.frames.load(Ordering::Relaxed) as usize;
    if status == 0 {
        crate::transport::after_process(&c.transport, c.cb.shm(), f as u32);
    }
    for s in c.out_slots.iter() {
        let p = s.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: as in cycle_wait.
            let port = unsafe { &*p };
            match port.kind {
                PortKind::Audio => {
                    c.cb.write_output(port.index, unsafe { &port.audio_mut()[..f] });
                }
                PortKind::Midi => {
                    // SAFETY: as in cycle_wait.
                    let (list, buf) = unsafe { (port.wire_mut(), port.midi_mut()) };
                    midi::to_list(buf, list);
                    c.cb.write_output_midi(port.index, list);
                }
            }
        }
    }
    c.cb.complete(c.cur_seq.load(Ordering::Relaxed));
    // Load: share of the period this client's callback used, smoothed.
    let busy = now_ns().saturating_sub(c.cycle_start_ns.load(Ordering::Relaxed));
    let period = c.timing.period_ns.load(Ordering::Relaxed).max(1);
    let sample = busy as f32 * 100.0 / period as f32;
    let old = f32::from_bits(c.load.load(Ordering::Relaxed));
    c.load
        .store((old * 0.9 + sample * 0.1).to_bits(), Ordering::Relaxed);
    if status != 0 {
        // JACK: a process callback that fails takes the client out of the graph.
        c.process_failed.store(true, Ordering::Release);
        c.cb.set_active(false);
        c.cb.stop_waiting();
    }
}

/// Body of the process thread.
fn run(c: &Client) {
    let cbs = *c.callbacks();
    if let (Some(f), a) = cbs.thread_init {
        // SAFETY: the application's callback with its own argument.
        unsafe { f(a.0) };
    }
    if let (Some(f), a) = cbs.process_thread {
        // The application runs its own loop with jack_cycle_wait/jack_cycle_signal.
        // SAFETY: as above.
        unsafe { f(a.0) };
        return;
    }
    loop {
        let n = cycle_wait(c, &cbs);
        if n == 0 {
            return;
        }
        let status = match cbs.process {
            // SAFETY: as above.
            (Some(f), a) => unsafe { f(n, a.0) },
            _ => 0,
        };
        cycle_signal(c, status);
        if status != 0 {
            return;
        }
    }
}

extern "C" fn trampoline(arg: *mut c_void) -> *mut c_void {
    let c = arg.cast_const().cast::<Client>();
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the client outlives its process thread (deactivate joins it).
        let c = unsafe { &*c };
        c.process_thread_id
            .store(unsafe { libc::pthread_self() } as u64, Ordering::Relaxed);
        // Set-up before the first cycle: no stack page faults in later. Only the stack
        // is locked, never the whole application.
        let _ = quaver_rt::prepare_rt_stack(true);
        c.process_tid
            .store(quaver_rt::Tid::current().0, Ordering::Release);
        run(c)
    });
    std::ptr::null_mut()
}

/// The thread creator installed with `jack_set_thread_creator`, if any.
pub(crate) static THREAD_CREATOR: std::sync::Mutex<JackThreadCreator> = std::sync::Mutex::new(None);

/// Creates a thread running `routine(arg)`, through the application's thread creator
/// if it installed one.
pub(crate) fn create_thread(
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> Result<libc::pthread_t, c_int> {
    let creator = *THREAD_CREATOR.lock().unwrap_or_else(|e| e.into_inner());
    let mut tid: libc::pthread_t = 0;
    // SAFETY: valid out-pointer; the routine and argument are the caller's.
    let rc = unsafe {
        match creator {
            Some(f) => f(&mut tid, std::ptr::null(), routine, arg),
            None => libc::pthread_create(&mut tid, std::ptr::null(), routine, arg),
        }
    };
    if rc == 0 { Ok(tid) } else { Err(rc) }
}

/// What a real-time thread made by [`create_rt_thread`] starts with.
struct RtStart {
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
    priority: c_int,
}

/// Start routine of [`create_rt_thread`]: the new thread promotes itself (its kernel id
/// is known here, so RealtimeKit can be asked when SCHED_FIFO is refused), then runs
/// the application's routine.
extern "C" fn rt_trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: the box `create_rt_thread` leaked for this thread, taken back once.
    let RtStart {
        routine,
        arg,
        priority,
    } = *unsafe { Box::from_raw(p.cast::<RtStart>()) };
    let req = quaver_rt::Request::fifo(priority);
    let promoted = std::panic::catch_unwind(|| quaver_rt::promote(quaver_rt::Tid::current(), &req));
    match promoted.map(|p| p.outcome) {
        Ok(quaver_rt::RtOutcome::Fifo { .. } | quaver_rt::RtOutcome::Disabled) => {}
        Ok(other) => crate::info(&format!(
            "real-time scheduling refused for a client thread; it runs {other}"
        )),
        Err(_) => crate::error("promoting a client thread failed"),
    }
    routine(arg)
}

/// A thread for `jack_client_create_thread(…, realtime = 1, …)`: made by the installed
/// thread creator like any other, it asks for SCHED_FIFO at `priority` itself before
/// running `routine`, by the same path as the process thread (RealtimeKit included),
/// which a JACK `pthread_t` seen from outside cannot take.
pub(crate) fn create_rt_thread(
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
    priority: c_int,
) -> Result<libc::pthread_t, c_int> {
    let start = Box::into_raw(Box::new(RtStart {
        routine,
        arg,
        priority,
    }));
    create_thread(rt_trampoline, start.cast()).inspect_err(|_| {
        // SAFETY: the thread was not made, so nothing else took the box.
        drop(unsafe { Box::from_raw(start) });
    })
}

/// SCHED_FIFO at `priority` for `thread` (a JACK API `pthread_t`, whose kernel id we
/// cannot learn, so no RealtimeKit); 0 on success, else an errno.
pub(crate) fn set_fifo(thread: libc::pthread_t, priority: c_int) -> c_int {
    // SAFETY: pthread_self is always safe.
    if unsafe { libc::pthread_equal(thread, libc::pthread_self()) } != 0 {
        // Our own thread: its kernel id is known, so the full path (RealtimeKit too).
        let req = quaver_rt::Request::fifo(priority);
        return match quaver_rt::promote(quaver_rt::Tid::current(), &req).outcome {
            quaver_rt::RtOutcome::Fifo { .. } => 0,
            _ => libc::EPERM,
        };
    }
    match quaver_rt::sched::set_fifo_pthread(thread, priority) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EPERM),
    }
}

/// As jackd2's libjack on its freewheel notifications: the process thread runs
/// SCHED_OTHER while the graph freewheels (a freewheeling graph runs as fast as its
/// clients allow, and a real-time thread that never sleeps would starve the machine),
/// and is promoted again, the way activation promoted it, when freewheel ends.
/// Notification thread; nothing for a client whose thread was never promoted.
pub(crate) fn follow_freewheel(c: &Client) {
    let tid = c.process_tid.load(Ordering::Acquire);
    if c.rt_priority.load(Ordering::Relaxed) <= 0 || tid == 0 {
        return;
    }
    let tid = quaver_rt::Tid(tid);
    if c.freewheeling.load(Ordering::Acquire) {
        if let Err(e) = quaver_rt::sched::set_normal(tid) {
            crate::error(&format!(
                "cannot take the process thread off real-time scheduling for freewheel: {e}"
            ));
        }
    } else {
        let outcome = quaver_rt::promote(tid, &wanted()).outcome;
        if !matches!(outcome, quaver_rt::RtOutcome::Fifo { .. }) {
            crate::error(&format!(
                "cannot give the process thread its real-time priority back after \
                 freewheel: {outcome}"
            ));
        }
    }
}

/// The request process threads make: `$QUAVER_RT_PRIORITY`, else the library
/// default; 0 or less disables real-time scheduling.
pub(crate) fn wanted() -> quaver_rt::Request {
    quaver_rt::Request::from_env(quaver_client::callback::DEFAULT_RT_PRIORITY)
}

/// The priority process threads ask for (0 or less: none).
pub(crate) fn wanted_priority() -> c_int {
    wanted().priority
}

/// Waits (bounded) for the new process thread to publish its kernel id.
fn process_tid(c: &Client) -> Option<quaver_rt::Tid> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let t = c.process_tid.load(Ordering::Acquire);
        if t != 0 {
            return Some(quaver_rt::Tid(t));
        }
        if std::time::Instant::now() > until {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Starts the process thread and asks the server to wake the client.
pub(crate) fn activate(c: &Client) -> c_int {
    if c.active.load(Ordering::Acquire) {
        return 0;
    }
    if c.notifier.is_shut_down() {
        return -1;
    }
    c.process_failed.store(false, Ordering::Release);
    c.cb.reset_stop();
    c.transport.activated();
    let arg = ClientPtr(c as *const Client);
    c.process_tid.store(0, Ordering::Release);
    let tid = match create_thread(trampoline, arg.0.cast_mut().cast()) {
        Ok(t) => t,
        Err(rc) => {
            crate::error(&format!("cannot create the process thread (error {rc})"));
            return -1;
        }
    };
    // Promote from here: the possibly slow request (RealtimeKit) stays off the audio
    // thread.
    let req = wanted();
    if req.priority > 0 {
        let outcome = match process_tid(c) {
            Some(t) => quaver_rt::promote(t, &req).outcome,
            None => quaver_rt::RtOutcome::Refused("the process thread never started".into()),
        };
        match outcome {
            quaver_rt::RtOutcome::Fifo { priority, .. } => {
                c.rt_priority.store(priority, Ordering::Relaxed);
                crate::info(&format!("process thread runs {outcome}"));
            }
            quaver_rt::RtOutcome::Refused(why)
            | quaver_rt::RtOutcome::Nice { refused: why, .. } => {
                c.rt_priority.store(-1, Ordering::Relaxed);
                // Through the error hook (stderr by default), as jackd2's libjack
                // reports a refused real-time request.
                crate::error(&quaver_rt::refusal_message("the process thread", &why));
            }
            _ => c.rt_priority.store(-1, Ordering::Relaxed),
        }
    }
    *c.process_thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(tid);
    c.cb.set_active(true);
    c.active.store(true, Ordering::Release);
    c.notify(crate::notify::Note::Latency);
    c.notify(crate::notify::Note::GraphOrder);
    0
}

/// Stops the process thread (joining it unless called from it).
pub(crate) fn deactivate(c: &Client) -> c_int {
    if !c.active.swap(false, Ordering::AcqRel) {
        return 0;
    }
    c.cb.set_active(false);
    c.cb.stop_waiting();
    let tid = c
        .process_thread
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(t) = tid {
        // SAFETY: pthread_self is always safe; joining a thread we created once.
        unsafe {
            if libc::pthread_equal(t, libc::pthread_self()) == 0 {
                if c.callbacks().process_thread.0.is_some() {
                    // The application's own loop may never return from its thread
                    // function; it parks in jack_cycle_wait instead. Detach it.
                    libc::pthread_detach(t);
                } else {
                    libc::pthread_join(t, std::ptr::null_mut());
                }
            }
        }
    }
    c.cb.reset_stop();
    0
}
