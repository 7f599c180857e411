//! The bridge: [`SeqBridge`] and [`SeqOutput`], the handles the daemon holds, and the
//! thread that makes every ALSA call, blocked in `poll` on the sequencer and a wakeup
//! eventfd.

use super::codec::{Assembler, Coder, Sysex, check_message, is_sysex, split_messages};
use super::ffi::{self, Addr, SeqEvent, seq_lib};
use super::handle::{Seq, errno_text};
use super::queue::{self, MidiReceiver, MidiSender};
use super::types::{
    PortId, PortInfo, SendError, SeqConfig, SeqCounters, SeqError, SeqNotice, now_ns,
};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

/// State shared between the handles and the bridge's thread.
struct Shared {
    stop: AtomicBool,
    /// An eventfd: written to wake the thread (output queued, stop).
    wake: OwnedFd,
    counters: SeqCounters,
}

impl Shared {
    /// Wakes the thread. *Allocation-free*: one `write` on a non-blocking eventfd.
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: 8 bytes from a local to our eventfd. A full counter (EAGAIN) means a
        // wakeup is pending already.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// The sequencer, bridged: see the module documentation.
pub struct SeqBridge {
    shared: Arc<Shared>,
    client: u8,
    ports: Vec<PortInfo>,
    input: Option<MidiReceiver>,
    output: Option<SeqOutput>,
    notices: mpsc::Receiver<SeqNotice>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SeqBridge {
    /// Opens the sequencer, lists and subscribes, and starts the bridge's thread.
    pub fn open(config: SeqConfig) -> Result<SeqBridge, SeqError> {
        open(config)
    }

    /// Our client number.
    pub fn client(&self) -> u8 {
        self.client
    }

    /// The ports found when the bridge opened (later changes are [`SeqNotice`]s).
    pub fn ports(&self) -> &[PortInfo] {
        &self.ports
    }

    /// The input queue (once): every message from every readable port.
    pub fn take_input(&mut self) -> Option<MidiReceiver> {
        self.input.take()
    }

    /// The output handle (once).
    pub fn take_output(&mut self) -> Option<SeqOutput> {
        self.output.take()
    }

    /// Ports added and removed, failed sends.
    pub fn notices(&self) -> &mpsc::Receiver<SeqNotice> {
        &self.notices
    }

    /// What the bridge counted.
    pub fn counters(&self) -> &SeqCounters {
        &self.shared.counters
    }
}

impl Drop for SeqBridge {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends MIDI to sequencer ports through the bridge's thread.
pub struct SeqOutput {
    tx: queue::MidiSender,
    shared: Arc<Shared>,
    max_sysex: usize,
}

impl SeqOutput {
    /// Queues one complete MIDI message for `port`. Checked here (so the caller learns
    /// at once what is wrong with it); delivery failures (the port went away) come as
    /// [`SeqNotice::SendFailed`]. *Allocation-free, lock-free*: a real-time thread may
    /// call it.
    pub fn send(&mut self, port: PortId, bytes: &[u8]) -> Result<(), SendError> {
        check_message(bytes)?;
        if bytes.len() > self.max_sysex {
            return Err(SendError::TooLong {
                len: bytes.len(),
                max: self.max_sysex,
            });
        }
        self.tx.push(now_ns(), port, bytes)?;
        self.shared.wake();
        Ok(())
    }
}

/// Opens the bridge (see [`SeqBridge::open`]).
fn open(config: SeqConfig) -> Result<SeqBridge, SeqError> {
    let lib = seq_lib().map_err(|e| SeqError::Unavailable(e.to_string()))?;
    let max_sysex = config.max_sysex.max(2);
    let queue_bytes = config.queue_bytes.max(max_sysex);
    let seq = Seq::open(lib, &config.client_name)?;
    let mut known = BTreeMap::new();
    for p in seq.list() {
        if let Err(e) = seq.subscribe(&p) {
            tracing::warn!(
                "ALSA sequencer: cannot subscribe to {} ({}): {e}",
                p.id,
                p.port_name
            );
        }
        known.insert(p.id, p);
    }
    let coder = |cap| {
        Coder::new(lib, cap).map_err(|why| SeqError::Call {
            what: "snd_midi_event_new",
            why,
        })
    };
    let (decoder, encoder) = (coder(16)?, coder(max_sysex)?);
    // SAFETY: plain eventfd(2); owned at once.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let wake = unsafe { OwnedFd::from_raw_fd(raw) };
    let shared = Arc::new(Shared {
        stop: Default::default(),
        wake,
        counters: Default::default(),
    });
    let (in_tx, in_rx) = queue::queue(config.queue_messages, queue_bytes);
    let (out_tx, out_rx) = queue::queue(config.queue_messages, queue_bytes);
    let (notice_tx, notices) = mpsc::channel();
    let client = seq.client;
    let ports: Vec<PortInfo> = known.values().cloned().collect();
    let mut worker = Worker {
        seq,
        shared: shared.clone(),
        known,
        input: in_tx,
        output: out_rx,
        notices: notice_tx,
        decoder,
        encoder,
        sysex: Assembler::new(max_sysex),
        scratch: vec![0; max_sysex],
    };
    let thread = std::thread::Builder::new()
        .name("alsa-seq".into())
        .spawn(move || worker.run())?;
    Ok(SeqBridge {
        shared: shared.clone(),
        client,
        ports,
        input: Some(in_rx),
        output: Some(SeqOutput {
            tx: out_tx,
            shared,
            max_sysex,
        }),
        notices,
        thread: Some(thread),
    })
}

/// The bridge's thread.
pub(super) struct Worker {
    seq: Seq,
    shared: Arc<Shared>,
    known: BTreeMap<PortId, PortInfo>,
    input: MidiSender,
    output: MidiReceiver,
    notices: mpsc::Sender<SeqNotice>,
    decoder: Coder,
    encoder: Coder,
    sysex: Assembler<PortId>,
    scratch: Vec<u8>,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Worker {
    fn run(&mut self) {
        let mut fds = self.seq.poll_fds();
        fds.push(libc::pollfd {
            fd: self.shared.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        while !self.shared.stop.load(Ordering::Acquire) {
            // SAFETY: `fds` is a valid array of its length. No timeout: idle means asleep.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                let _ = self.notices.send(SeqNotice::Stopped(format!("poll: {e}")));
                return;
            }
            let mut count = [0u8; 8];
            // SAFETY: reads (and so clears) the eventfd's counter into a local.
            unsafe { libc::read(self.shared.wake.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
            self.drain_output();
            if let Err(e) = self.read_input() {
                let _ = self.notices.send(SeqNotice::Stopped(e));
                return;
            }
        }
    }

    /// Reads every event waiting.
    fn read_input(&mut self) -> Result<(), String> {
        loop {
            let mut ev: *mut SeqEvent = std::ptr::null_mut();
            // SAFETY: live handle; `ev` is set to alsa-lib's buffer on success.
            let rc = unsafe { (self.seq.lib.seq_event_input)(self.seq.h, &mut ev) };
            if rc == -libc::EAGAIN {
                return Ok(());
            }
            if rc == -libc::ENOSPC {
                bump(&self.shared.counters.overruns);
                continue;
            }
            if rc < 0 {
                return Err(format!("snd_seq_event_input: {}", errno_text(rc)));
            }
            if ev.is_null() {
                continue;
            }
            // SAFETY: valid until the next snd_seq_event_input, which is after this.
            let ev = unsafe { *ev };
            let from = ev.source;
            if from.client == ffi::CLIENT_SYSTEM && from.port == ffi::PORT_SYSTEM_ANNOUNCE {
                self.announce(&ev);
            } else if is_sysex(&ev) {
                // SAFETY: a variable-length event from the input buffer, still valid.
                let chunk = unsafe { ev.ext() };
                let port = id(from);
                match self.sysex.push(port, chunk) {
                    Sysex::Complete(msg) => {
                        let c = &self.shared.counters;
                        match self.input.push(now_ns(), port, msg) {
                            Ok(()) => bump(&c.received),
                            Err(_) => bump(&c.input_dropped),
                        }
                    }
                    Sysex::Partial => {}
                    Sysex::Dropped => bump(&self.shared.counters.sysex_dropped),
                }
            } else {
                self.midi(&ev);
            }
        }
    }

    /// A non-sysex event: decoded and queued message by message.
    fn midi(&mut self, ev: &SeqEvent) {
        let mut buf = [0u8; 32];
        let c = &self.shared.counters;
        let Some(bytes) = self.decoder.decode(ev, &mut buf) else {
            bump(&c.not_midi);
            return;
        };
        for msg in split_messages(bytes) {
            match self.input.push(now_ns(), id(ev.source), msg) {
                Ok(()) => bump(&c.received),
                Err(_) => bump(&c.input_dropped),
            }
        }
    }

    /// A system announcement: clients and ports coming and going.
    fn announce(&mut self, ev: &SeqEvent) {
        let a = ev.data_addr();
        if a.client == self.seq.client || a.client == ffi::CLIENT_SYSTEM {
            return;
        }
        match ev.kind {
            ffi::EV_PORT_START | ffi::EV_PORT_CHANGE => {
                let p = id(a);
                if self.known.contains_key(&p) {
                    return;
                }
                if let Some(info) = self.seq.lookup(a) {
                    if let Err(e) = self.seq.subscribe(&info) {
                        tracing::warn!("ALSA sequencer: cannot subscribe to {p}: {e}");
                    }
                    self.known.insert(p, info.clone());
                    let _ = self.notices.send(SeqNotice::PortAdded(info));
                }
            }
            ffi::EV_PORT_EXIT => self.gone(id(a)),
            ffi::EV_CLIENT_EXIT => {
                let ports: Vec<PortId> = self
                    .known
                    .keys()
                    .filter(|p| p.client == a.client)
                    .copied()
                    .collect();
                for p in ports {
                    self.gone(p);
                }
            }
            _ => {}
        }
    }

    fn gone(&mut self, p: PortId) {
        if self.known.remove(&p).is_some() {
            self.sysex.forget(p);
            let _ = self.notices.send(SeqNotice::PortRemoved(p));
        }
    }

    /// Sends everything queued.
    fn drain_output(&mut self) {
        loop {
            let (port, n) = {
                let Some(msg) = self.output.pop() else { break };
                // `send` refused anything longer than the scratch buffer (max_sysex).
                let Some(n) = msg.copy_to(&mut self.scratch) else {
                    continue;
                };
                (msg.port, n)
            };
            let result = self.send(port, n);
            let c = &self.shared.counters;
            match result {
                Ok(()) => bump(&c.sent),
                Err(error) => {
                    bump(&c.send_failed);
                    tracing::debug!("ALSA sequencer: sending to {port}: {error}");
                    let _ = self.notices.send(SeqNotice::SendFailed { port, error });
                }
            }
        }
    }

    fn send(&mut self, port: PortId, n: usize) -> Result<(), String> {
        if !self.known.get(&port).is_some_and(|p| p.writable) {
            return Err(format!(
                "{port} is not (or no longer) a writable sequencer port"
            ));
        }
        let mut ev = SeqEvent::default();
        self.encoder.encode(&self.scratch[..n], &mut ev)?;
        ev.source = Addr {
            client: self.seq.client,
            port: self.seq.out_port,
        };
        ev.dest = Addr {
            client: port.client,
            port: port.port,
        };
        ev.queue = ffi::QUEUE_DIRECT;
        for _ in 0..100 {
            // SAFETY: live handle; `ev` (and the encoder's buffer it points to) valid.
            let rc = unsafe { (self.seq.lib.seq_event_output_direct)(self.seq.h, &mut ev) };
            if rc >= 0 {
                return Ok(());
            }
            if rc != -libc::EAGAIN {
                return Err(format!("snd_seq_event_output_direct: {}", errno_text(rc)));
            }
            // The kernel's pool for us is full: give it a moment to drain.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Err("the sequencer stayed busy (EAGAIN) for 200 ms".into())
    }
}

fn id(a: Addr) -> PortId {
    PortId {
        client: a.client,
        port: a.port,
    }
}
