//! Callback clients: a process callback the server calls once per quantum, in sync
//! with the device, on a real-time thread this library starts (JACK-style).
//!
//! ```no_run
//! use quaver_client::Connection;
//! use quaver_client::callback::{ProcessHandler, ProcessScope, RtPriority};
//! use quaver_client::quaver_protocol::{CallbackParams, PortParams};
//!
//! struct Gain(f32);
//! impl ProcessHandler for Gain {
//!     fn process(&mut self, scope: &mut ProcessScope<'_>) {
//!         let frames = scope.frames();
//!         for i in 0..frames {
//!             let v = scope.input(0)[i] * self.0;
//!             scope.output(0)[i] = v;
//!         }
//!     }
//! }
//!
//! let mut conn = Connection::connect(None, "gain")?;
//! let mut p = CallbackParams::new("gain");
//! p.inputs.push(PortParams::new("in"));
//! p.outputs.push(PortParams::new("out"));
//! p.quantum = Some(64);
//! let client = conn.create_callback(p)?;
//! let active = client.activate(Gain(0.5), RtPriority::Default)?;
//! // ... link its ports with conn.link(...), run, then:
//! let (_client, _gain) = active.deactivate();
//! # Ok::<(), quaver_client::ClientError>(())
//! ```
//!
//! Port buffers are copied between the shared block and private buffers around each
//! callback, so the slices a callback sees are ordinary Rust memory that the server
//! cannot touch while the callback runs.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use quaver_protocol::callback::{
    CLIENT_ACTIVE, CallbackGeometry, CallbackShm, CycleHeader, EventBell, MODE_ASYNC, SERVER_ERROR,
    monotonic_ns,
};
use quaver_protocol::{CallbackCreated, CallbackPort};
use rustix::event::{PollFd, PollFlags};

use crate::{ClientError, Result};

/// SCHED_FIFO priority of process threads unless the caller asks for another: just
/// below quaverd's default of 20, so the server's own thread wins a tie.
pub const DEFAULT_RT_PRIORITY: i32 = 19;

/// How the server runs this client, as it last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The server waits for the callback within each cycle (up to its deadline).
    Sync,
    /// The client missed too many deadlines: the server takes its outputs one cycle
    /// later and never waits.
    Async,
}

/// Which scheduling the process thread asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtPriority {
    /// SCHED_FIFO at [`DEFAULT_RT_PRIORITY`] (or `$QUAVER_RT_PRIORITY`; 0 disables).
    Default,
    /// SCHED_FIFO at this priority (1–99).
    Fifo(i32),
    /// Normal scheduling.
    Off,
}

/// What became of the request for real-time scheduling (shared with the server).
pub type RtStatus = quaver_rt::RtOutcome;

/// Promotes thread `tid` to SCHED_FIFO (directly, else through RealtimeKit) from the
/// calling thread, so that the possibly slow request never runs on the audio thread.
pub fn promote(tid: quaver_rt::Tid, priority: RtPriority) -> RtStatus {
    let req = match priority {
        RtPriority::Off => return RtStatus::Disabled,
        RtPriority::Fifo(p) => quaver_rt::Request::fifo(p),
        RtPriority::Default => quaver_rt::Request::from_env(DEFAULT_RT_PRIORITY),
    };
    quaver_rt::promote(tid, &req).outcome
}

struct Inner {
    shm: CallbackShm,
    wake: EventBell,
    done: EventBell,
    /// A duplicate of the control socket, polled for hangup: the server is gone.
    hangup: OwnedFd,
    stop: AtomicBool,
    /// When `wait` last returned a cycle, and its seq: stamped into the block when the
    /// cycle completes, so the server can tell wake-up delay from callback time.
    awake_ns: AtomicU64,
    awake_seq: AtomicU64,
}

/// A callback node of this client: its shared port buffers and wakeups. Create it
/// with [`crate::Connection::create_callback`]; it is inert until activated.
///
/// The node lives on the server until `destroy_stream` or until the connection
/// closes (a handle keeps a duplicate of the connection's socket, so the connection
/// closes when both are dropped).
#[derive(Clone)]
pub struct CallbackClient {
    inner: Arc<Inner>,
    info: Arc<CallbackCreated>,
}

impl std::fmt::Debug for CallbackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackClient")
            .field("node", &self.info.node)
            .field("name", &self.info.node_name)
            .finish()
    }
}

/// What woke a process thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A cycle to process.
    Cycle(CycleHeader),
    /// [`CallbackClient::stop_waiting`] was called.
    Stopped,
    /// The server closed the connection or removed the node.
    ServerGone,
}

impl CallbackClient {
    pub(crate) fn open(
        info: CallbackCreated,
        fds: Vec<OwnedFd>,
        socket: &std::os::unix::net::UnixStream,
    ) -> Result<CallbackClient> {
        let [memfd, wake, done]: [OwnedFd; 3] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
            ClientError::BadReply(format!(
                "callback_created carried {} file descriptors, expected 3",
                fds.len()
            ))
        })?;
        if info.rate == 0 || info.max_frames == 0 {
            return Err(ClientError::BadReply(
                "callback node with rate or max_frames 0".into(),
            ));
        }
        let geo = CallbackGeometry {
            inputs: info.max_inputs,
            outputs: info.max_outputs,
            max_frames: info.max_frames,
        };
        let shm = CallbackShm::open(memfd, geo)?;
        let hangup = socket.as_fd().try_clone_to_owned()?;
        Ok(CallbackClient {
            inner: Arc::new(Inner {
                shm,
                wake: EventBell::from_fd(wake)?,
                done: EventBell::from_fd(done)?,
                hangup,
                stop: AtomicBool::new(false),
                awake_ns: AtomicU64::new(0),
                awake_seq: AtomicU64::new(0),
            }),
            info: Arc::new(info),
        })
    }

    /// The shared block (for the transport words libjack reads and writes).
    pub fn shm(&self) -> &CallbackShm {
        &self.inner.shm
    }

    /// Everything the server said when it created the node.
    pub fn info(&self) -> &CallbackCreated {
        &self.info
    }

    /// The node id.
    pub fn node(&self) -> u32 {
        self.info.node
    }

    /// The node name as registered.
    pub fn name(&self) -> &str {
        &self.info.node_name
    }

    /// The ports created with the node.
    pub fn ports(&self) -> &[CallbackPort] {
        &self.info.ports
    }

    /// Graph sample rate.
    pub fn rate(&self) -> u32 {
        self.info.rate
    }

    /// Largest number of frames a cycle may have.
    pub fn max_frames(&self) -> usize {
        self.info.max_frames as usize
    }

    /// Misses the server counted against this client.
    pub fn xruns(&self) -> u64 {
        self.inner.shm.xruns()
    }

    /// How the server runs this client now.
    pub fn mode(&self) -> Mode {
        if self.inner.shm.mode() == MODE_ASYNC {
            Mode::Async
        } else {
            Mode::Sync
        }
    }

    /// The latest cycle header the server published.
    pub fn last_cycle(&self) -> CycleHeader {
        self.inner.shm.cycle()
    }

    // ----- the low-level cycle API, for process loops of one's own (libjack) -----

    /// Tells the server whether to wake this client each cycle.
    pub fn set_active(&self, active: bool) {
        self.inner.shm.set_client_flags(CLIENT_ACTIVE, active);
    }

    /// Blocks until the server starts a cycle newer than `last_seq`, the server goes
    /// away, or [`CallbackClient::stop_waiting`] is called. For the process thread.
    pub fn wait(&self, last_seq: u64) -> io::Result<Wake> {
        let i = &*self.inner;
        loop {
            if i.stop.load(Ordering::Acquire) {
                return Ok(Wake::Stopped);
            }
            if i.shm.server_flags() & SERVER_ERROR != 0 {
                return Ok(Wake::ServerGone);
            }
            let c = i.shm.cycle();
            if c.seq != last_seq && c.seq != i.shm.done_seq() {
                i.awake_ns.store(monotonic_ns(), Ordering::Relaxed);
                i.awake_seq.store(c.seq, Ordering::Relaxed);
                return Ok(Wake::Cycle(c));
            }
            let mut fds = [
                PollFd::new(&i.wake, PollFlags::IN),
                PollFd::new(&i.hangup, PollFlags::RDHUP),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if !fds[1].revents().is_empty() {
                return Ok(Wake::ServerGone);
            }
            i.wake.drain();
        }
    }

    /// Makes a blocked or later [`CallbackClient::wait`] return `Stopped`.
    pub fn stop_waiting(&self) {
        self.inner.stop.store(true, Ordering::Release);
        // Our own signal on the wake eventfd: the waiter re-checks everything after
        // every wakeup, so sharing it with the server's signals is harmless.
        self.inner.wake.signal();
    }

    /// Undoes [`CallbackClient::stop_waiting`] before a new process thread starts.
    pub fn reset_stop(&self) {
        self.inner.stop.store(false, Ordering::Release);
    }

    /// Copies input buffer `index` (see [`CallbackPort::index`]) into `out`.
    pub fn read_input(&self, index: usize, out: &mut [f32]) {
        self.inner.shm.read_input(index, out);
    }

    /// Copies `data` into output buffer `index`.
    pub fn write_output(&self, index: usize, data: &[f32]) {
        self.inner.shm.write_output(index, data);
    }

    /// Reads the event list of MIDI input `index` into `out` (a plain list,
    /// `quaver_protocol::midi`), checking it against the cycle's `frames`; returns the
    /// events dropped as invalid.
    pub fn read_input_midi(&self, index: usize, frames: u32, out: &mut [u32]) -> u32 {
        self.inner.shm.read_input_midi(index, frames, out)
    }

    /// Publishes the plain event list `list` as MIDI output `index`'s events.
    pub fn write_output_midi(&self, index: usize, list: &[u32]) {
        self.inner.shm.write_output_midi(index, list);
    }

    /// Tells the server cycle `seq` is done (after writing the outputs), with the times
    /// the process thread woke for it and finished it (the server's per-node WAIT and
    /// BUSY).
    pub fn complete(&self, seq: u64) {
        let i = &*self.inner;
        if i.awake_seq.load(Ordering::Relaxed) == seq {
            i.shm
                .complete_timed(seq, i.awake_ns.load(Ordering::Relaxed), monotonic_ns());
        } else {
            i.shm.complete(seq);
        }
        i.done.signal();
    }

    /// Starts a process thread that calls `handler` once per cycle, promoted to
    /// real-time scheduling as asked (refusal is not an error: see
    /// [`ActiveCallback::realtime`]).
    pub fn activate<H: ProcessHandler>(
        self,
        handler: H,
        priority: RtPriority,
    ) -> Result<ActiveCallback<H>> {
        self.reset_stop();
        let client = self.clone();
        // The stack is prefaulted and locked (never the whole program: its memory is
        // the application's business); a refused lock only costs residency.
        let (thread, tid, _stack_refused) =
            quaver_rt::spawn(format!("quaver-cb-{}", self.info.node), true, move || {
                process_loop(client, handler)
            })
            .map_err(ClientError::Io)?;
        let realtime = promote(tid, priority);
        self.set_active(true);
        Ok(ActiveCallback {
            client: self,
            thread: Some(thread),
            realtime,
        })
    }
}

/// A process callback.
pub trait ProcessHandler: Send + 'static {
    /// Called once per cycle on the process thread: read `scope.input(..)`, fill
    /// `scope.output(..)` (outputs start as silence). Must not block; the server waits
    /// for it only until its deadline. *Real-time*.
    fn process(&mut self, scope: &mut ProcessScope<'_>);
    /// Called on the process thread before `process` when the number of frames per
    /// cycle changed (and before the first cycle).
    fn quantum_changed(&mut self, _frames: usize) {}
    /// Called on the process thread when the server changed how it runs this client.
    fn mode_changed(&mut self, _mode: Mode) {}
    /// Called on the process thread when the server went away; the thread then ends.
    fn server_gone(&mut self) {}
}

/// One cycle as a process callback sees it.
pub struct ProcessScope<'a> {
    header: CycleHeader,
    inputs: &'a [Vec<f32>],
    outputs: &'a mut [Vec<f32>],
    xruns: u64,
    mode: Mode,
}

impl ProcessScope<'_> {
    /// Frames in this cycle.
    pub fn frames(&self) -> usize {
        self.header.frames as usize
    }
    /// The server's cycle counter.
    pub fn cycle(&self) -> u64 {
        self.header.cycle
    }
    /// The graph frame clock at the start of this cycle.
    pub fn position(&self) -> u64 {
        self.header.position
    }
    /// CLOCK_MONOTONIC ns at the start of the cycle.
    pub fn time_ns(&self) -> u64 {
        self.header.time_ns
    }
    /// Nominal duration of the cycle, ns.
    pub fn period_ns(&self) -> u64 {
        self.header.period_ns
    }
    /// CLOCK_MONOTONIC ns by which the server needs the outputs.
    pub fn deadline_ns(&self) -> u64 {
        self.header.deadline_ns
    }
    /// Input buffer `index` (`frames()` samples); empty past the reservation.
    pub fn input(&self, index: usize) -> &[f32] {
        let f = self.frames();
        self.inputs.get(index).map_or(&[], |b| &b[..f])
    }
    /// Output buffer `index` (`frames()` samples); empty past the reservation.
    pub fn output(&mut self, index: usize) -> &mut [f32] {
        let f = self.frames();
        match self.outputs.get_mut(index) {
            Some(b) => &mut b[..f],
            None => &mut [],
        }
    }
    /// Number of input buffers (the reservation).
    pub fn inputs(&self) -> usize {
        self.inputs.len()
    }
    /// Number of output buffers (the reservation).
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }
    /// Misses the server counted against this client so far.
    pub fn xruns(&self) -> u64 {
        self.xruns
    }
    /// How the server runs this client.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

fn process_loop<H: ProcessHandler>(client: CallbackClient, mut handler: H) -> H {
    let frames = client.max_frames();
    let mut inputs: Vec<Vec<f32>> = (0..client.info.max_inputs)
        .map(|_| vec![0.0; frames])
        .collect();
    let mut outputs: Vec<Vec<f32>> = (0..client.info.max_outputs)
        .map(|_| vec![0.0; frames])
        .collect();
    let mut last_seq = client.inner.shm.done_seq();
    let mut last_frames = 0usize;
    let mut last_mode = Mode::Sync;
    loop {
        let header = match client.wait(last_seq) {
            Ok(Wake::Cycle(h)) => h,
            Ok(Wake::Stopped) => return handler,
            Ok(Wake::ServerGone) | Err(_) => {
                handler.server_gone();
                return handler;
            }
        };
        last_seq = header.seq;
        let f = header.frames as usize;
        if f != last_frames {
            last_frames = f;
            handler.quantum_changed(f);
        }
        let mode = client.mode();
        if mode != last_mode {
            last_mode = mode;
            handler.mode_changed(mode);
        }
        for (i, b) in inputs.iter_mut().enumerate() {
            client.read_input(i, &mut b[..f]);
        }
        for b in outputs.iter_mut() {
            b[..f].fill(0.0);
        }
        let mut scope = ProcessScope {
            header,
            inputs: &inputs,
            outputs: &mut outputs,
            xruns: client.xruns(),
            mode,
        };
        handler.process(&mut scope);
        for (o, b) in outputs.iter().enumerate() {
            client.write_output(o, &b[..f]);
        }
        client.complete(header.seq);
    }
}

/// A callback client whose process thread runs.
pub struct ActiveCallback<H: ProcessHandler> {
    client: CallbackClient,
    thread: Option<JoinHandle<H>>,
    realtime: RtStatus,
}

impl<H: ProcessHandler> ActiveCallback<H> {
    /// The client.
    pub fn client(&self) -> &CallbackClient {
        &self.client
    }

    /// What became of the real-time scheduling request.
    pub fn realtime(&self) -> &RtStatus {
        &self.realtime
    }

    /// True once the process thread ended (the server went away).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the process thread and returns the client and the handler. The server
    /// stops waking the client first, so no cycle is left waiting.
    pub fn deactivate(mut self) -> (CallbackClient, H) {
        let h = self.stop().expect("the process thread is joined only here");
        (self.client.clone(), h)
    }

    fn stop(&mut self) -> Option<H> {
        let t = self.thread.take()?;
        self.client.set_active(false);
        self.client.stop_waiting();
        match t.join() {
            Ok(h) => Some(h),
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

impl<H: ProcessHandler> Drop for ActiveCallback<H> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.client.set_active(false);
            self.client.stop_waiting();
            let _ = t.join();
        }
    }
}

impl<H: ProcessHandler> std::fmt::Debug for ActiveCallback<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveCallback")
            .field("client", &self.client)
            .field("realtime", &self.realtime)
            .finish()
    }
}

/// Ports of a callback node, added and removed over its connection.
impl crate::Connection {
    // (Here rather than in lib.rs, which is at its length limit.)
    /// Adds a port to a callback node of this connection.
    pub fn add_port(
        &mut self,
        node: u32,
        direction: quaver_protocol::PortDirection,
        name: &str,
        channel: Option<quaver_protocol::ChannelPosition>,
    ) -> Result<quaver_protocol::CallbackPort> {
        let audio = quaver_protocol::message::PortType::Audio;
        self.add_port_typed(node, direction, name, channel, audio)
    }

    /// Adds a port of any type (a MIDI port: `PortType::Midi`) to a callback node of
    /// this connection.
    pub fn add_port_typed(
        &mut self,
        node: u32,
        direction: quaver_protocol::PortDirection,
        name: &str,
        channel: Option<quaver_protocol::ChannelPosition>,
        port_type: quaver_protocol::message::PortType,
    ) -> Result<quaver_protocol::CallbackPort> {
        let req = quaver_protocol::Request::AddPort {
            node,
            direction,
            name: name.into(),
            channel,
            port_type,
        };
        req.validate().map_err(ClientError::InvalidArgument)?;
        match self.request(req)?.0 {
            quaver_protocol::Reply::PortAdded(p) => Ok(p),
            other => Err(crate::unexpected("add_port", &other)),
        }
    }

    /// Removes a port (by id) of a callback node of this connection.
    pub fn remove_port(&mut self, node: u32, port: u32) -> Result<()> {
        self.request_ok(quaver_protocol::Request::RemovePort { node, port })
    }
}
