//! `jack_client_t`: a connection to quaverd plus one callback node.

use std::collections::HashMap;
use std::ffi::{CString, c_int, c_void};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use quaver_client::callback::CallbackClient;
use quaver_client::quaver_protocol::message::PortType;
use quaver_client::quaver_protocol::{CallbackParams, ErrorCode, PortDirection, Reply, Request};
use quaver_client::{ClientError, Connection, GraphWatcher};

use crate::graph::GraphView;
use crate::notify::{Note, Notifier};
use crate::port::{Port, PortKind};
use crate::types::*;

/// The notification thread's body ([`crate::notify_thread::run`]), handed in by the
/// caller so that this file stays below the thread that calls back into the client.
pub(crate) type NotifyThread = fn(&Client, OwnedFd, Option<GraphWatcher>, Option<GraphView>);

/// A `void *` an application gave us, handed back to its callbacks.
#[derive(Debug, Clone, Copy)]
pub struct Arg(pub *mut c_void);
// SAFETY: the pointer is opaque to us; the application decides what it is safe for.
unsafe impl Send for Arg {}
// SAFETY: as above.
unsafe impl Sync for Arg {}

impl Default for Arg {
    fn default() -> Self {
        Arg(std::ptr::null_mut())
    }
}

/// The application's callbacks.
#[derive(Clone, Copy, Default)]
pub struct Callbacks {
    pub process: (JackProcessCallback, Arg),
    pub process_thread: (JackThreadCallback, Arg),
    pub thread_init: (JackThreadInitCallback, Arg),
    pub buffer_size: (JackBufferSizeCallback, Arg),
    pub sample_rate: (JackSampleRateCallback, Arg),
    pub xrun: (JackXRunCallback, Arg),
    pub shutdown: (JackShutdownCallback, Arg),
    pub info_shutdown: (JackInfoShutdownCallback, Arg),
    pub port_connect: (JackPortConnectCallback, Arg),
    pub port_registration: (JackPortRegistrationCallback, Arg),
    pub client_registration: (JackClientRegistrationCallback, Arg),
    pub graph_order: (JackGraphOrderCallback, Arg),
    pub latency: (JackLatencyCallback, Arg),
    pub freewheel: (JackFreewheelCallback, Arg),
    pub port_rename: (JackPortRenameCallback, Arg),
    pub property_change: (JackPropertyChangeCallback, Arg),
    pub session: (JackSessionCallback, Arg),
}

/// Timing of the latest cycle, published by the process thread.
#[derive(Default)]
pub struct Timing {
    pub position: AtomicU64,
    pub time_ns: AtomicU64,
    pub period_ns: AtomicU64,
    pub frames: AtomicU32,
}

/// The state behind a `jack_client_t *`.
pub struct Client {
    pub(crate) conn: Mutex<Connection>,
    pub(crate) cb: CallbackClient,
    pub(crate) name: CString,
    pub(crate) node: u32,
    pub(crate) rate: u32,
    pub(crate) max_frames: usize,
    pub(crate) buffer_size: AtomicU32,
    /// The server's buffer size as last learnt, from a cycle or from this client's own
    /// `jack_set_buffer_size` (which jackd2 applies before it returns), for
    /// `jack_get_buffer_size`; `buffer_size` stays the process thread's, so the
    /// buffer-size callback still fires at the first cycle of the new size.
    pub(crate) known_size: AtomicU32,
    pub(crate) callbacks: Mutex<Callbacks>,
    pub(crate) timing: Timing,
    pub(crate) open_ns: u64,
    /// Own ports (audio and MIDI) by buffer index, for the process thread.
    pub(crate) in_slots: Box<[AtomicPtr<Port>]>,
    pub(crate) out_slots: Box<[AtomicPtr<Port>]>,
    /// Every port object this client handed out (own ones, dead or alive); boxed so
    /// that the addresses the application holds never move.
    #[allow(clippy::vec_box)]
    pub(crate) own_ports: Mutex<Vec<Box<Port>>>,
    /// Handles on other nodes' ports, by full name.
    pub(crate) foreign: Mutex<HashMap<String, Box<Port>>>,
    pub(crate) active: AtomicBool,
    pub(crate) process_thread: Mutex<Option<libc::pthread_t>>,
    pub(crate) process_thread_id: AtomicU64,
    pub(crate) rt_priority: AtomicI32,
    /// The process thread's kernel id once it started (0 before): what promotion
    /// (sched_setscheduler, RealtimeKit) needs.
    pub(crate) process_tid: AtomicI32,
    pub(crate) notifier: Arc<Notifier>,
    pub(crate) notify_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Process-thread state: last handled wake, the cycle in flight, load.
    pub(crate) last_seq: AtomicU64,
    pub(crate) cur_seq: AtomicU64,
    pub(crate) cycle_start_ns: AtomicU64,
    pub(crate) load: AtomicU32,
    pub(crate) xruns_seen: AtomicU64,
    pub(crate) process_failed: AtomicBool,
    /// Transport callbacks and their state (`transport.rs`).
    pub(crate) transport: crate::transport::ClientTransport,
    /// Whether the latest cycle was a freewheeling one (for the freewheel callback).
    pub(crate) freewheeling: AtomicBool,
}

/// Ports of each direction reserved per client unless `$QUAVER_JACK_MAX_PORTS` says.
pub const DEFAULT_MAX_PORTS: u32 = 64;

fn env_u32(name: &str) -> Option<u32> {
    let v = std::env::var(name).ok()?;
    // "256" or PipeWire's "256/48000".
    v.split('/').next()?.trim().parse().ok()
}

pub(crate) fn now_ns() -> u64 {
    quaver_client::quaver_protocol::callback::monotonic_ns()
}

impl Client {
    /// Opens a client; on failure returns the `jack_status_t` bits.
    pub(crate) fn open(
        name: &str,
        options: c_int,
        notify: NotifyThread,
    ) -> Result<(Box<Client>, c_int), c_int> {
        let mut status = 0;
        if options & !JACK_OPEN_OPTIONS != 0 {
            return Err(JACK_FAILURE | JACK_INVALID_OPTION);
        }
        if name.is_empty() || name.len() >= CLIENT_NAME_SIZE {
            crate::error(&format!(
                "client name '{name}' must be 1–{} bytes",
                CLIENT_NAME_SIZE - 1
            ));
            return Err(JACK_FAILURE | JACK_INVALID_OPTION);
        }
        let node_name: String = name
            .chars()
            .map(|c| if c == ':' || c.is_control() { '_' } else { c })
            .collect();
        let mut conn = match Connection::connect(None, &node_name) {
            Ok(c) => c,
            Err(e) => {
                crate::error(&format!("cannot connect to quaverd: {e}"));
                return Err(JACK_FAILURE | JACK_SERVER_FAILED);
            }
        };
        if options & JACK_USE_EXACT_NAME != 0 {
            let taken = conn
                .graph()
                .map(|g| g.nodes.iter().any(|n| n.name == node_name))
                .unwrap_or(false);
            if taken {
                return Err(JACK_FAILURE | JACK_NAME_NOT_UNIQUE);
            }
        }
        let max_ports = env_u32("QUAVER_JACK_MAX_PORTS").unwrap_or(DEFAULT_MAX_PORTS);
        let mut p = CallbackParams::new(node_name.clone());
        p.max_inputs = Some(max_ports);
        p.max_outputs = Some(max_ports);
        p.quantum = env_u32("QUAVER_JACK_QUANTUM").filter(|&q| q > 0);
        let cb = match conn.create_callback(p) {
            Ok(cb) => cb,
            Err(e) => {
                crate::error(&format!("cannot create the client's node: {e}"));
                let bits = match e {
                    ClientError::Server {
                        code: ErrorCode::TooMany,
                        ..
                    } => JACK_FAILURE | JACK_SERVER_ERROR,
                    _ => JACK_FAILURE | JACK_SERVER_ERROR,
                };
                return Err(bits);
            }
        };
        if cb.name() != node_name {
            status |= JACK_NAME_NOT_UNIQUE;
        }
        let hangup = conn.hangup_fd().map_err(|_| JACK_FAILURE)?;
        // A second connection that only carries graph events (servers without `watch`
        // refuse it; then only this client's own changes are reported).
        let watcher = Connection::connect(None, &format!("{node_name} (graph events)"))
            .and_then(|c| c.watch())
            .ok();
        if watcher.is_none() {
            crate::info("the server does not report graph changes; only this client's own are");
        }
        let info = cb.info().clone();
        let slots = |n: u32| -> Box<[AtomicPtr<Port>]> {
            (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect()
        };
        let notifier = Arc::new(Notifier::new().map_err(|_| JACK_FAILURE)?);
        let client = Box::new(Client {
            name: CString::new(cb.name()).unwrap_or_default(),
            node: cb.node(),
            rate: info.rate,
            max_frames: info.max_frames as usize,
            buffer_size: AtomicU32::new(info.quantum),
            known_size: AtomicU32::new(info.quantum),
            in_slots: slots(info.max_inputs),
            out_slots: slots(info.max_outputs),
            cb,
            conn: Mutex::new(conn),
            callbacks: Mutex::new(Callbacks::default()),
            timing: Timing::default(),
            open_ns: now_ns(),
            own_ports: Mutex::new(Vec::new()),
            foreign: Mutex::new(HashMap::new()),
            active: AtomicBool::new(false),
            freewheeling: AtomicBool::new(false),
            process_thread: Mutex::new(None),
            process_thread_id: AtomicU64::new(0),
            rt_priority: AtomicI32::new(-1),
            process_tid: AtomicI32::new(0),
            notifier: notifier.clone(),
            notify_thread: Mutex::new(None),
            last_seq: AtomicU64::new(0),
            cur_seq: AtomicU64::new(0),
            cycle_start_ns: AtomicU64::new(0),
            load: AtomicU32::new(0),
            xruns_seen: AtomicU64::new(0),
            process_failed: AtomicBool::new(false),
            transport: Default::default(),
        });
        client.transport.sync_with(client.cb.shm());
        client.timing.frames.store(info.quantum, Ordering::Relaxed);
        client.timing.period_ns.store(
            info.quantum as u64 * 1_000_000_000 / info.rate.max(1) as u64,
            Ordering::Relaxed,
        );
        client
            .timing
            .time_ns
            .store(client.open_ns, Ordering::Relaxed);
        // The snapshot that later graph events are compared with, taken before the
        // application can change anything.
        let seen = watcher.as_ref().and_then(|_| client.graph());
        let ptr = ClientPtr(&*client as *const Client);
        let t = std::thread::Builder::new()
            .name("quaver-jack-notify".into())
            .spawn(move || {
                let p = ptr;
                // SAFETY: the client outlives this thread: close joins it first.
                notify(unsafe { &*p.0 }, hangup, watcher, seen);
            })
            .map_err(|_| JACK_FAILURE)?;
        *client.notify_thread.lock().expect("poisoned") = Some(t);
        Ok((client, status))
    }

    /// The control connection.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The callbacks.
    pub(crate) fn callbacks(&self) -> MutexGuard<'_, Callbacks> {
        self.callbacks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client name as registered.
    pub(crate) fn name_str(&self) -> &str {
        self.name.to_str().unwrap_or("")
    }

    /// A fresh view of the graph with the server's port aliases, or None if the
    /// server does not answer.
    pub(crate) fn graph(&self) -> Option<GraphView> {
        let mut conn = self.conn();
        let mut view = match conn.graph() {
            Ok(g) => GraphView::new(&g),
            Err(e) => {
                crate::error(&format!("cannot read the graph: {e}"));
                return None;
            }
        };
        // A server without aliases refuses the request; the view then has none.
        if let Ok((Reply::Aliases { ports }, _)) = conn.request(Request::Aliases) {
            view.add_aliases(&ports);
        }
        // Likewise for published latencies: other clients' ports then report none.
        if let Ok((Reply::PortLatencies { ports }, _)) = conn.request(Request::PortLatencies) {
            view.latencies = ports.into_iter().map(|l| (l.port, l)).collect();
        }
        Some(view)
    }

    /// Queues a notification for the notification thread.
    pub(crate) fn notify(&self, n: Note) {
        self.notifier.push(n);
    }

    /// Queues a notification about a change this client made. Reported at once; the
    /// notification thread keeps the server's event for it from being reported twice.
    pub(crate) fn notify_own(&self, n: Note) {
        self.notifier.push(n);
    }

    /// Registers a port; returns the object handed to the application.
    pub(crate) fn register_port(
        &self,
        short: &str,
        kind: PortKind,
        flags: c_int,
    ) -> Result<*mut Port, String> {
        let dir_bits = flags & (JACK_PORT_IS_INPUT | JACK_PORT_IS_OUTPUT);
        if dir_bits != JACK_PORT_IS_INPUT && dir_bits != JACK_PORT_IS_OUTPUT {
            return Err("a port is either an input or an output".into());
        }
        let input = dir_bits == JACK_PORT_IS_INPUT;
        let short: String = short
            .chars()
            .map(|c| if c == ':' || c.is_control() { '_' } else { c })
            .collect();
        let full = format!("{}:{}", self.name_str(), short);
        if full.len() >= PORT_NAME_SIZE {
            return Err(format!("port name '{full}' is too long"));
        }
        let mut own = self.own_ports.lock().unwrap_or_else(|e| e.into_inner());
        if own
            .iter()
            .any(|p| p.alive.load(Ordering::Relaxed) && p.name() == full)
        {
            return Err(format!("port '{full}' already exists"));
        }
        let me = (self as *const Client).cast();
        let dir = if input {
            PortDirection::In
        } else {
            PortDirection::Out
        };
        let wire = match kind {
            PortKind::Audio => PortType::Audio,
            PortKind::Midi => PortType::Midi,
        };
        let added = self
            .conn()
            .add_port_typed(self.node, dir, &short, None, wire)
            .map_err(|e| format!("cannot register port '{full}': {e}"))?;
        let slots = if input {
            &self.in_slots
        } else {
            &self.out_slots
        };
        let index = added.index as usize;
        if index >= slots.len() || added.port_type != wire {
            return Err(format!(
                "server gave port '{full}' a bad buffer index or type"
            ));
        }
        let full = format!("{}:{}", self.name_str(), added.name);
        let mut b = Box::new(Port::own(
            me,
            added.id,
            &full,
            &added.name,
            kind,
            flags,
            index,
            self.max_frames,
        ));
        let port: *mut Port = &mut *b;
        slots[index].store(port, Ordering::Release);
        own.push(b);
        drop(own);
        // SAFETY: just created, owned by `own_ports`.
        let id = unsafe { (*port).id };
        self.notify_own(Note::PortRegistration(id, true));
        Ok(port)
    }

    /// Unregisters one of our ports (the object stays allocated until close).
    pub(crate) fn unregister_port(&self, port: &Port) -> Result<(), String> {
        if !port.mine || !std::ptr::eq(port.client, (self as *const Client).cast()) {
            return Err(format!("port '{}' is not this client's", port.name()));
        }
        if !port.alive.swap(false, Ordering::AcqRel) {
            return Err(format!("port '{}' was already unregistered", port.name()));
        }
        let slots = if port.flags & JACK_PORT_IS_INPUT != 0 {
            &self.in_slots
        } else {
            &self.out_slots
        };
        if let Some(s) = slots.get(port.index) {
            let _ = s.compare_exchange(
                port as *const Port as *mut Port,
                std::ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        if let Err(e) = self.conn().remove_port(self.node, port.id) {
            crate::error(&format!("unregistering '{}': {e}", port.name()));
        }
        self.notify_own(Note::PortRegistration(port.id, false));
        Ok(())
    }

    /// Our own live port called `full`.
    pub(crate) fn own_port_by_name(&self, full: &str) -> Option<*mut Port> {
        let own = self.own_ports.lock().unwrap_or_else(|e| e.into_inner());
        own.iter()
            .find(|p| p.alive.load(Ordering::Relaxed) && p.name() == full)
            .map(|p| &**p as *const Port as *mut Port)
    }

    /// Our own live port with id `id`.
    pub(crate) fn own_port_by_id(&self, id: u32) -> Option<*mut Port> {
        let own = self.own_ports.lock().unwrap_or_else(|e| e.into_inner());
        own.iter()
            .find(|p| p.alive.load(Ordering::Relaxed) && p.id == id)
            .map(|p| &**p as *const Port as *mut Port)
    }

    /// A port object for `name` (ours, or a handle on another node's port).
    pub(crate) fn port_by_name(&self, name: &str) -> Option<*mut Port> {
        if let Some(p) = self.own_port_by_name(name) {
            return Some(p);
        }
        let g = self.graph()?;
        let v = g.find(name)?;
        if let Some(p) = self.own_port_by_id(v.id) {
            return Some(p);
        }
        Some(self.foreign_port(v))
    }

    /// A port object for graph port `id`.
    pub(crate) fn port_by_id(&self, id: u32) -> Option<*mut Port> {
        if let Some(p) = self.own_port_by_id(id) {
            return Some(p);
        }
        let g = self.graph()?;
        let v = g.by_id(id)?;
        Some(self.foreign_port(v))
    }

    fn foreign_port(&self, v: &crate::graph::PortView) -> *mut Port {
        let mut f = self.foreign.lock().unwrap_or_else(|e| e.into_inner());
        let e = f.entry(v.name.clone()).or_insert_with(|| {
            Box::new(Port::foreign(
                (self as *const Client).cast(),
                v.id,
                &v.name,
                &v.short,
                v.flags,
                if v.midi {
                    PortKind::Midi
                } else {
                    PortKind::Audio
                },
            ))
        });
        &mut **e as *mut Port
    }

    /// Resolves a port name (ours, graph name or alias) to the graph's `node:port`.
    pub(crate) fn canonical(&self, g: &GraphView, name: &str) -> Option<String> {
        g.find(name).map(|p| p.name.clone())
    }

    /// Links `src` → `dst`; JACK error codes.
    pub(crate) fn connect(&self, src: &str, dst: &str) -> c_int {
        let Some(g) = self.graph() else { return -1 };
        let (Some(s), Some(d)) = (self.canonical(&g, src), self.canonical(&g, dst)) else {
            crate::error(&format!("cannot connect {src} to {dst}: no such port"));
            return -1;
        };
        if g.linked(&s, &d) {
            return libc::EEXIST;
        }
        match self.conn().link(&s, &d) {
            Ok(()) => {
                let (a, b) = (g.find(&s).map(|p| p.id), g.find(&d).map(|p| p.id));
                if let (Some(a), Some(b)) = (a, b) {
                    self.notify_own(Note::PortConnect(a, b, true));
                }
                0
            }
            Err(e) => {
                crate::error(&format!("cannot connect {src} to {dst}: {e}"));
                -1
            }
        }
    }

    /// Unlinks `src` → `dst`; JACK error codes.
    pub(crate) fn disconnect(&self, src: &str, dst: &str) -> c_int {
        let Some(g) = self.graph() else { return -1 };
        let (Some(s), Some(d)) = (self.canonical(&g, src), self.canonical(&g, dst)) else {
            crate::error(&format!("cannot disconnect {src} from {dst}: no such port"));
            return -1;
        };
        if !g.linked(&s, &d) {
            return -1;
        }
        match self.conn().unlink(&s, &d) {
            Ok(()) => {
                let (a, b) = (g.find(&s).map(|p| p.id), g.find(&d).map(|p| p.id));
                if let (Some(a), Some(b)) = (a, b) {
                    self.notify_own(Note::PortConnect(a, b, false));
                }
                0
            }
            Err(e) => {
                crate::error(&format!("cannot disconnect {src} from {dst}: {e}"));
                -1
            }
        }
    }

    /// Removes every link of port `name` (all of ours for `None`).
    pub(crate) fn disconnect_all(&self, name: Option<&str>) -> c_int {
        let Some(g) = self.graph() else { return -1 };
        let prefix = format!("{}:", self.name_str());
        let mut rc = 0;
        for (o, i) in &g.links {
            let hit = match name {
                Some(n) => o == n || i == n,
                None => o.starts_with(&prefix) || i.starts_with(&prefix),
            };
            if hit && self.disconnect(o, i) != 0 {
                rc = -1;
            }
        }
        rc
    }

    /// Publishes the latest cycle's timing (process thread).
    pub(crate) fn publish_timing(&self, position: u64, time_ns: u64, period_ns: u64, frames: u32) {
        self.timing.position.store(position, Ordering::Relaxed);
        self.timing.time_ns.store(time_ns, Ordering::Relaxed);
        self.timing.period_ns.store(period_ns, Ordering::Relaxed);
        self.timing.frames.store(frames, Ordering::Relaxed);
    }

    /// (position, time_ns, period_ns) of the latest cycle.
    pub(crate) fn last_cycle(&self) -> (u64, u64, u64) {
        (
            self.timing.position.load(Ordering::Relaxed),
            self.timing.time_ns.load(Ordering::Relaxed),
            self.timing.period_ns.load(Ordering::Relaxed),
        )
    }

    /// The graph frame clock at CLOCK_MONOTONIC `t_ns`, extrapolated from the latest
    /// cycle.
    pub(crate) fn frames_at(&self, t_ns: u64) -> u64 {
        let (pos, t0, _) = self.last_cycle();
        let dt = t_ns as i128 - t0 as i128;
        let df = dt * self.rate as i128 / 1_000_000_000;
        (pos as i128 + df).max(0) as u64
    }

    /// CLOCK_MONOTONIC ns of graph frame `frame` (32-bit JACK frame time, wrapping).
    pub(crate) fn time_at(&self, frame: u32) -> u64 {
        let (pos, t0, _) = self.last_cycle();
        let df = frame.wrapping_sub(pos as u32) as i32 as i128;
        let dt = df * 1_000_000_000 / self.rate.max(1) as i128;
        (t0 as i128 + dt).max(0) as u64
    }
}

/// A client pointer that may cross to the notification thread.
#[derive(Clone, Copy)]
pub(crate) struct ClientPtr(pub *const Client);
// SAFETY: the client outlives the threads that get this pointer (close joins them).
unsafe impl Send for ClientPtr {}

/// # Safety
/// `p` is NULL or a pointer returned by `jack_client_open` and not yet closed.
pub(crate) unsafe fn as_client<'a>(p: *const Client) -> Option<&'a Client> {
    // SAFETY: per the contract.
    unsafe { p.as_ref() }
}

/// The client that made a port object.
pub(crate) fn owner(p: &Port) -> Option<&Client> {
    // SAFETY: port objects never outlive their client.
    unsafe { p.client.cast::<Client>().as_ref() }
}
