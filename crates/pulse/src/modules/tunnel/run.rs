//! The tunnel's network thread: serves one connection at a time, and between them
//! keeps the local device out of the graph and reconnects with backoff.
//!
//! Sink: the tap rings the thread every few ms; the thread sends what the ring holds, as
//! much as the remote's REQUESTs asked for. What the remote has not asked for waits in
//! the ring, at most half the latency beyond the last cycle: past that the oldest is
//! dropped down to a quarter, so a remote whose clock runs slower than the graph's cannot make the delay
//! grow. Source: the remote's memblocks are decoded into the feeder's ring; when it
//! holds the latency already (the remote runs faster, or the graph stalled), they are
//! dropped.

use super::args::Target;
use super::client::{Event, Interrupt, Remote, StreamWant, TunnelError};
use super::handle::{ConnSlot, Tunnel, lock};
use super::local::{LocalIo, Shape, add_nodes};
use crate::modules::loading::{LoadDone, register};
use crate::modules::record::ModuleRec;
use crate::rt::transport::Bell;
use crate::state::Server;
use crate::wire::convert::Codec;
use quaver_engine::NodeId;
use rustix::event::{PollFd, PollFlags};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// First wait before reconnecting.
const MIN_BACKOFF: Duration = Duration::from_millis(250);

/// What the network thread works with.
pub(super) struct Ctx {
    pub(super) srv: Weak<Server>,
    pub(super) module: &'static str,
    pub(super) addr: Target,
    pub(super) cookie: Vec<u8>,
    pub(super) want: StreamWant,
    pub(super) shape: Shape,
    pub(super) codec: Codec,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) bell: Arc<Bell>,
    /// The nodes in the graph now, shared with the module's [`super::Tunnel`].
    pub(super) nodes: Arc<Mutex<Vec<NodeId>>>,
    /// Frames dropped: ring full on the RT side, or over the latency bound here.
    pub(super) dropped: Arc<AtomicU64>,
    /// The sink's last cycle, in frames (the tap writes it).
    pub(super) cycle: Arc<AtomicUsize>,
    pub(super) max_backoff: Duration,
    /// The connection served now, for an unload to shut down.
    pub(super) conn: ConnSlot,
}

/// What the first connection finishes: the LOAD_MODULE waiting for it.
pub(super) struct First {
    /// Told the module's index once the tunnel is up, or that it failed.
    pub(super) done: LoadDone,
    /// The module's arguments as given (its record lists them).
    pub(super) argument: String,
    /// What the tunnel connects, for the log once it is up.
    pub(super) describe: String,
    /// The tunnel's handle, sent right after the thread starts (the record holds it).
    pub(super) tunnel: Receiver<Arc<Tunnel>>,
}

/// The thread's body: the first connection finishes the load (the module is listed,
/// its device in the graph, the client answered) or fails it; then serves and
/// reconnects until stopped.
pub(super) fn run(ctx: Ctx, first: First) {
    let Some((remote, io)) = first_connection(&ctx, first) else {
        return;
    };
    let mut conn = Some((remote, io));
    let mut backoff = MIN_BACKOFF;
    let name = ctx.shape.device.name.clone();
    loop {
        if let Some((remote, io)) = conn.take() {
            *lock(&ctx.conn) = remote.sock.try_clone().ok();
            let why = serve(&ctx, remote, io);
            *lock(&ctx.conn) = None;
            let dropped = ctx.dropped.load(Ordering::Relaxed);
            if ctx.stopping() {
                tracing::info!(
                    "{}: {name} closed; {dropped} frames dropped over the latency bound",
                    ctx.module
                );
                return;
            }
            // Once per loss; the attempts that follow log at debug.
            tracing::warn!(
                "{}: {} lost ({why}): {name} removed, its streams moved; reconnecting \
                 ({dropped} frames dropped over the latency bound so far)",
                ctx.module,
                ctx.addr
            );
            if !ctx.set_nodes(None) {
                return;
            }
            backoff = MIN_BACKOFF;
        }
        if ctx.sleep(backoff) {
            return;
        }
        match ctx.open() {
            Ok(remote) => {
                let Some(srv) = ctx.srv.upgrade() else {
                    return;
                };
                match add_nodes(&srv, &ctx.shape, &ctx.bell, &ctx.dropped, &ctx.cycle) {
                    Ok((nodes, io)) => {
                        drop(srv);
                        if !ctx.set_nodes(Some(nodes)) {
                            return;
                        }
                        tracing::info!(
                            "{}: reconnected to {}: {name} is back",
                            ctx.module,
                            ctx.addr
                        );
                        conn = Some((remote, io));
                    }
                    Err(e) => {
                        tracing::warn!("{}: cannot make {name} again: {e}", ctx.module);
                        backoff = (backoff * 2).min(ctx.max_backoff);
                    }
                }
            }
            Err(TunnelError::Stopped) => return,
            Err(e) => {
                tracing::debug!("{}: reconnecting to {}: {e}", ctx.module, ctx.addr);
                backoff = (backoff * 2).min(ctx.max_backoff);
            }
        }
    }
}

/// Connects for the first time and finishes the load: the device in the graph, the
/// module listed under its index, the client told. On failure the client gets the
/// error LOAD_MODULE always gave (the reason logged as a module's load failure is).
fn first_connection(ctx: &Ctx, first: First) -> Option<(Remote, LocalIo)> {
    let First {
        done,
        argument,
        describe,
        tunnel,
    } = first;
    tracing::info!("{}: connecting to {}", ctx.module, ctx.addr);
    let up = (|| {
        let remote = ctx.open().map_err(|e| e.to_string())?;
        let srv = ctx.srv.upgrade().ok_or("the server is shutting down")?;
        let (nodes, io) = add_nodes(&srv, &ctx.shape, &ctx.bell, &ctx.dropped, &ctx.cycle)?;
        // The sender sent it right after this thread started.
        let Ok(tunnel) = tunnel.recv() else {
            crate::modules::rescue::remove_rescuing(&srv, &nodes, ctx.module);
            return Err("the tunnel's handle never came".to_string());
        };
        Ok((srv, remote, nodes, io, tunnel))
    })();
    let (srv, remote, nodes, io, tunnel) = match up {
        Ok(up) => up,
        Err(why) => {
            tracing::info!("pulse: {}: {why}", ctx.module);
            done(Err(pulseaudio::protocol::PulseError::ModInitFailed));
            return None;
        }
    };
    *lock(&ctx.nodes) = nodes.clone();
    tracing::info!("{}: {describe}", ctx.module);
    let mut rec = ModuleRec::new(ctx.module, &argument);
    rec.nodes = nodes;
    rec.tunnel = Some(tunnel);
    let idx = register(&srv, rec);
    done(Ok(idx));
    Some((remote, io))
}

impl Ctx {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Resolves the server's name (if it has one), connects and opens the stream.
    fn open(&self) -> Result<Remote, TunnelError> {
        let addr = self.addr.resolve().map_err(TunnelError::Resolve)?;
        Remote::open(addr, &self.cookie, &self.want, &self.interrupt())
    }

    /// What ends the handshake's waits early: this tunnel's stop.
    fn interrupt(&self) -> Interrupt<'_> {
        Interrupt {
            stop: &self.stop,
            bell: &self.bell,
        }
    }

    /// Sleeps `d`, or less if stopped; true if stopped.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        loop {
            if self.stopping() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let t = rustix::time::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: left.subsec_nanos() as i64,
            };
            let mut fds = [PollFd::new(&*self.bell, PollFlags::IN)];
            let _ = rustix::event::poll(&mut fds, Some(&t));
            self.bell.take();
        }
    }

    /// Puts `nodes` in the graph's place of the old ones: `None` removes them (their
    /// streams moved to the default devices). The module's record follows. False when
    /// the server is gone or the module is being unloaded (the unload removes what
    /// [`super::Tunnel::stop`] hands it).
    fn set_nodes(&self, nodes: Option<Vec<NodeId>>) -> bool {
        let Some(srv) = self.srv.upgrade() else {
            return false;
        };
        let mut mine = super::handle::lock(&self.nodes);
        if nodes.is_none() {
            crate::modules::rescue::remove_rescuing(&srv, &mine, self.module);
        }
        *mine = nodes.unwrap_or_default();
        let now = mine.clone();
        drop(mine);
        let mut st = srv.lock();
        if let Some(m) = st
            .modules
            .values_mut()
            .find(|m| m.tunnel.as_ref().is_some_and(|t| t.owns(&self.nodes)))
        {
            m.nodes = now;
        }
        !self.stopping()
    }
}

/// Serves one connection until it ends or the tunnel stops; returns why it ended.
fn serve(ctx: &Ctx, mut remote: Remote, mut io: LocalIo) -> String {
    let channels = ctx.shape.map.len();
    let frame_bytes = ctx.codec.bytes() * channels;
    let mut bytes = Vec::new();
    let mut partial = Vec::new();
    let mut samples = Vec::new();
    let mut moved = 0u64;
    loop {
        // The bell that told of a stop may have been taken while connecting.
        if ctx.stopping() {
            return "stopped".into();
        }
        let readable = {
            let mut fds = [
                PollFd::new(&remote.sock, PollFlags::IN),
                PollFd::new(&*ctx.bell, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return format!("poll: {e}"),
            }
            !fds[0].revents().is_empty()
        };
        ctx.bell.take();
        if ctx.stopping() {
            return "stopped".into();
        }
        if readable && let Err(e) = remote.read_some() {
            return e.to_string();
        }
        while let Some(ev) = remote.next_event() {
            match (ev, &mut io) {
                (Event::Killed, _) => return "the remote ended the stream".into(),
                (Event::Audio(data), LocalIo::Source(ring)) => {
                    if moved == 0 {
                        tracing::debug!("{}: first audio, {} bytes", ctx.module, data.len());
                    }
                    moved += data.len() as u64;
                    partial.extend_from_slice(&data);
                    let frames = partial.len() / frame_bytes;
                    samples.resize(frames * channels, 0.0);
                    ctx.codec
                        .decode(&partial[..frames * frame_bytes], &mut samples);
                    partial.drain(..frames * frame_bytes);
                    // What waits for the graph stays within the latency: past it
                    // (the remote's clock runs ahead, or the graph stalled) the new
                    // audio is dropped.
                    let queued = ring.buffer().capacity() - ring.slots();
                    let room = (ctx.shape.latency * channels).saturating_sub(queued);
                    match ring.write_chunk(samples.len()) {
                        Ok(mut chunk) if samples.len() <= room => {
                            let (a, b) = chunk.as_mut_slices();
                            let split = a.len();
                            a.copy_from_slice(&samples[..split]);
                            b.copy_from_slice(&samples[split..]);
                            chunk.commit_all();
                        }
                        _ => {
                            ctx.dropped.fetch_add(frames as u64, Ordering::Relaxed);
                        }
                    }
                }
                _ => {}
            }
        }
        if let LocalIo::Sink(ring) = &mut io
            && let Err(e) = send(ctx, &mut remote, ring, &mut bytes)
        {
            return e.to_string();
        }
    }
}

/// Sends what the ring holds, as much as the remote asked for, keeping the rest within
/// the latency bound.
fn send(
    ctx: &Ctx,
    remote: &mut Remote,
    ring: &mut rtrb::Consumer<f32>,
    bytes: &mut Vec<u8>,
) -> Result<(), super::client::TunnelError> {
    let channels = ctx.shape.map.len();
    let frame_bytes = (ctx.codec.bytes() * channels) as u64;
    let held = ring.slots() / channels;
    // A whole cycle arrives at once: it never counts against the bound.
    let cycle = ctx.cycle.load(Ordering::Relaxed);
    if held > ctx.shape.latency / 2 + cycle {
        let skip = held - ctx.shape.latency / 4 - cycle;
        if let Ok(chunk) = ring.read_chunk(skip * channels) {
            chunk.commit_all();
        }
        ctx.dropped.fetch_add(skip as u64, Ordering::Relaxed);
    }
    let held = ring.slots() / channels;
    let n = held.min((remote.requested / frame_bytes) as usize);
    if n == 0 {
        return Ok(());
    }
    let Ok(chunk) = ring.read_chunk(n * channels) else {
        return Ok(());
    };
    let (a, b) = chunk.as_slices();
    let sample = ctx.codec.bytes();
    bytes.resize(n * channels * sample, 0);
    let split = a.len() * sample;
    ctx.codec.encode(a, &mut bytes[..split]);
    ctx.codec.encode(b, &mut bytes[split..]);
    chunk.commit_all();
    remote.send_audio(bytes)
}
