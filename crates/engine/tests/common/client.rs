//! An in-process stand-in for a callback client: the transport the engine sees and a
//! client thread that answers it over two eventfds, like a client process would.

use quaver_dsp::{Planar, PlanarMut};
use quaver_engine::{CallbackMode, CallbackTransport, callback::CallbackCycle};
use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd};
use rustix::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

pub const MAX_FRAMES: usize = 4096;

/// What the client does with each cycle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Behaviour {
    /// outputs = inputs × gain (channel by channel; missing inputs count as 0).
    Gain(f32),
    /// Outputs the cycle number as a constant (shows which cycle's output arrives).
    CycleNumber,
    /// Sleeps this long in every callback, then outputs 1.0.
    Slow(Duration),
    /// Answers the first `n` cycles with 1.0, then never again (hung in its callback).
    HangAfter(u64),
    /// Like `CycleNumber`, but sleeps this long in each of its first `n` callbacks.
    CycleNumberLateFirst(u64, Duration),
}

pub struct Shared {
    pub seq: AtomicU64,
    pub done: AtomicU64,
    pub active: AtomicBool,
    pub frames: AtomicU32,
    pub cycle: AtomicU64,
    pub inputs: Vec<AtomicU32>,
    pub outputs: Vec<AtomicU32>,
    pub xruns: AtomicU64,
    pub mode: AtomicU32,
    pub stop: AtomicBool,
    pub calls: AtomicU64,
    /// The client's own clock readings for the cycle `times_seq`: woke, finished.
    pub awake_ns: AtomicU64,
    pub finish_ns: AtomicU64,
    pub times_seq: AtomicU64,
}

pub struct TestTransport {
    sh: Arc<Shared>,
    seq: u64,
    n_in: usize,
    n_out: usize,
    wake: Arc<OwnedFd>,
    done: Arc<OwnedFd>,
}

use quaver_rt::monotonic_ns as now_ns;

impl CallbackTransport for TestTransport {
    fn active(&self) -> bool {
        self.sh.active.load(Ordering::Acquire)
    }
    fn completed(&self) -> bool {
        self.sh.done.load(Ordering::Acquire) == self.seq
    }
    fn start(&mut self, cycle: &CallbackCycle, inputs: Planar<'_>) {
        let f = cycle.frames as usize;
        for ch in 0..self.n_in.min(inputs.channels()) {
            for (i, s) in inputs.channel(ch)[..f].iter().enumerate() {
                self.sh.inputs[ch * MAX_FRAMES + i].store(s.to_bits(), Ordering::Relaxed);
            }
        }
        self.sh.frames.store(cycle.frames, Ordering::Relaxed);
        self.sh.cycle.store(cycle.cycle, Ordering::Relaxed);
        self.seq += 1;
        self.sh.seq.store(self.seq, Ordering::Release);
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
    }
    fn wait_completed(&mut self, deadline_ns: u64) -> bool {
        loop {
            if self.completed() {
                return true;
            }
            let now = now_ns();
            if now >= deadline_ns {
                return false;
            }
            let left = deadline_ns - now;
            let ts = rustix::time::Timespec {
                tv_sec: (left / 1_000_000_000) as i64,
                tv_nsec: (left % 1_000_000_000) as i64,
            };
            let mut fds = [PollFd::new(&*self.done, PollFlags::IN)];
            if let Ok(n) = rustix::event::poll(&mut fds, Some(&ts))
                && n > 0
            {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&*self.done, &mut b);
            }
        }
    }
    fn read_outputs(&mut self, outputs: &mut PlanarMut<'_>) {
        let f = outputs.frames();
        for ch in 0..outputs.channels() {
            let out = outputs.channel_mut(ch);
            if ch >= self.n_out {
                out.fill(0.0);
                continue;
            }
            for (i, s) in out[..f].iter_mut().enumerate() {
                *s = f32::from_bits(self.sh.outputs[ch * MAX_FRAMES + i].load(Ordering::Relaxed));
            }
        }
    }
    fn report(&mut self, xruns: u64, mode: CallbackMode) {
        self.sh.xruns.store(xruns, Ordering::Relaxed);
        self.sh.mode.store(mode as u32, Ordering::Relaxed);
    }
    fn client_times(&self) -> Option<(u64, u64)> {
        (self.sh.times_seq.load(Ordering::Acquire) == self.seq).then(|| {
            (
                self.sh.awake_ns.load(Ordering::Relaxed),
                self.sh.finish_ns.load(Ordering::Relaxed),
            )
        })
    }
}

/// A client thread plus the transport to hand to a `CallbackNode`.
pub struct TestClient {
    pub sh: Arc<Shared>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl TestClient {
    pub fn start(n_in: usize, n_out: usize, behaviour: Behaviour) -> (TestClient, TestTransport) {
        let sh = Arc::new(Shared {
            seq: AtomicU64::new(0),
            done: AtomicU64::new(0),
            active: AtomicBool::new(true),
            frames: AtomicU32::new(0),
            cycle: AtomicU64::new(0),
            inputs: (0..n_in * MAX_FRAMES).map(|_| AtomicU32::new(0)).collect(),
            outputs: (0..n_out * MAX_FRAMES).map(|_| AtomicU32::new(0)).collect(),
            xruns: AtomicU64::new(0),
            mode: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            awake_ns: AtomicU64::new(0),
            finish_ns: AtomicU64::new(0),
            times_seq: AtomicU64::new(0),
        });
        let wake = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).unwrap());
        let done = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).unwrap());
        let transport = TestTransport {
            sh: sh.clone(),
            seq: 0,
            n_in,
            n_out,
            wake: wake.clone(),
            done: done.clone(),
        };
        let (sh2, wake2) = (sh.clone(), wake.clone());
        let thread =
            std::thread::spawn(move || client_loop(sh2, wake2, done, n_in, n_out, behaviour));
        (
            TestClient {
                sh,
                wake,
                thread: Some(thread),
            },
            transport,
        )
    }

    pub fn xruns(&self) -> u64 {
        self.sh.xruns.load(Ordering::Relaxed)
    }

    pub fn mode(&self) -> u32 {
        self.sh.mode.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until the client answered the last cycle it was woken for.
    pub fn wait_idle(&self) {
        let t0 = std::time::Instant::now();
        while self.sh.done.load(Ordering::Acquire) != self.sh.seq.load(Ordering::Acquire) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "client never answered"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub fn calls(&self) -> u64 {
        self.sh.calls.load(Ordering::Relaxed)
    }
}

impl Drop for TestClient {
    fn drop(&mut self) {
        self.sh.stop.store(true, Ordering::Release);
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn client_loop(
    sh: Arc<Shared>,
    wake: Arc<OwnedFd>,
    done: Arc<OwnedFd>,
    n_in: usize,
    n_out: usize,
    behaviour: Behaviour,
) {
    let mut handled = 0u64;
    loop {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&*wake, &mut b);
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let seq = sh.seq.load(Ordering::Acquire);
        if seq == handled {
            continue;
        }
        handled = seq;
        let awake = now_ns();
        let calls = sh.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let frames = sh.frames.load(Ordering::Relaxed) as usize;
        let cycle = sh.cycle.load(Ordering::Relaxed);
        for ch in 0..n_out {
            for i in 0..frames {
                let v = match behaviour {
                    Behaviour::Gain(g) => {
                        if ch < n_in {
                            g * f32::from_bits(
                                sh.inputs[ch * MAX_FRAMES + i].load(Ordering::Relaxed),
                            )
                        } else {
                            0.0
                        }
                    }
                    Behaviour::CycleNumber | Behaviour::CycleNumberLateFirst(..) => cycle as f32,
                    Behaviour::Slow(_) | Behaviour::HangAfter(_) => 1.0,
                };
                sh.outputs[ch * MAX_FRAMES + i].store(v.to_bits(), Ordering::Relaxed);
            }
        }
        match behaviour {
            Behaviour::Slow(d) => std::thread::sleep(d),
            Behaviour::CycleNumberLateFirst(n, d) if calls <= n => std::thread::sleep(d),
            Behaviour::HangAfter(n) if calls > n => {
                // Hung: never answers again (until the test stops us).
                while !sh.stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return;
            }
            _ => {}
        }
        sh.awake_ns.store(awake, Ordering::Relaxed);
        sh.finish_ns.store(now_ns(), Ordering::Relaxed);
        sh.times_seq.store(seq, Ordering::Release);
        sh.done.store(seq, Ordering::Release);
        let _ = rustix::io::write(&*done, &1u64.to_ne_bytes());
    }
}
