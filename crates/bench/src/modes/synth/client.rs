//! A synth callback client on a private quaverd, and the measurement window it
//! reports.

use crate::Ctx;
use crate::modes::synth::voice::{Shared, Snapshot, Synth};
use crate::report::stats::Since;
use crate::tools::daemon::Daemon;
use anyhow::{Context, Result, bail};
use quaver_client::Connection;
use quaver_client::callback::{ActiveCallback, Mode as CbMode, RtPriority, RtStatus};
use quaver_client::quaver_protocol::message::StatusInfo;
use quaver_client::quaver_protocol::{CallbackParams, PortParams};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A running synth client on a private quaverd.
pub struct Client {
    conn: Connection,
    active: Option<ActiveCallback<Synth>>,
    /// Its published counters.
    pub shared: Arc<Shared>,
    /// What became of its request for real-time scheduling.
    pub realtime: String,
    node: u32,
}

fn rt_label(s: &RtStatus) -> String {
    match s {
        RtStatus::Disabled => "normal scheduling".into(),
        RtStatus::Refused(e) => format!("SCHED_FIFO refused ({e})"),
        s => s.to_string(),
    }
}

impl Client {
    /// Creates, activates and links (to `sink`) a synth client asking for `quantum`,
    /// rendering `voices` voices; waits (bounded) until its cycles have that quantum.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        daemon: &Daemon,
        sink: &str,
        quantum: usize,
        max_voices: usize,
        voices: usize,
        rate: u32,
        seed: u64,
        prio: RtPriority,
    ) -> Result<Client> {
        let mut conn = daemon.connect("quaver-bench synth")?;
        let mut p = CallbackParams::new("synth");
        p.outputs.push(PortParams::new("out"));
        p.quantum = Some(quantum as u32);
        let client = conn
            .create_callback(p)
            .context("creating the callback client")?;
        let name = client.name().to_string();
        let node = client.node();
        let shared = Arc::new(Shared::default());
        shared.voices.store(voices, Ordering::Relaxed);
        let synth = Synth::new(max_voices, rate, seed, shared.clone());
        let active = client.activate(synth, prio)?;
        let realtime = rt_label(active.realtime());
        conn.link(&name, sink)
            .with_context(|| format!("linking {name} to {sink}"))?;
        let t0 = Instant::now();
        while shared.frames.load(Ordering::Relaxed) != quantum
            || shared.cycles.load(Ordering::Relaxed) < 4
        {
            if t0.elapsed() > Duration::from_secs(5) {
                bail!(
                    "the synth client never ran at quantum {quantum} (last cycle: {} frames, \
                     {} cycles)",
                    shared.frames.load(Ordering::Relaxed),
                    shared.cycles.load(Ordering::Relaxed)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Client {
            conn,
            active: Some(active),
            shared,
            realtime,
            node,
        })
    }

    /// Misses the server counted against the client.
    pub fn xruns(&self) -> u64 {
        self.active.as_ref().map_or(0, |a| a.client().xruns())
    }

    /// Whether the server runs the client asynchronously now.
    pub fn is_async(&self) -> bool {
        self.active
            .as_ref()
            .is_some_and(|a| a.client().mode() == CbMode::Async)
    }

    /// The server's current quantum.
    pub fn server_quantum(&mut self) -> Result<u32> {
        Ok(self.conn.status()?.quantum)
    }

    /// The server's status (quantum, cycles, device counters).
    pub fn status(&mut self) -> Result<StatusInfo> {
        Ok(self.conn.status()?)
    }

    /// True once the client's process thread has ended.
    pub fn finished(&self) -> bool {
        self.active.as_ref().is_some_and(|a| a.is_finished())
    }

    /// Measures a window of `secs` at the current voice count.
    pub fn window(&mut self, secs: f64) -> Result<Window> {
        let s0 = self.shared.snapshot();
        let x0 = self.xruns();
        std::thread::sleep(Duration::from_secs_f64(secs));
        let d = self.shared.snapshot().since(&s0);
        let glitches = self.xruns() - x0;
        if self.finished() {
            bail!("the synth client's process thread ended (server gone?)");
        }
        Ok(Window {
            voices: self.shared.voices.load(Ordering::Relaxed),
            quantum: self.shared.frames.load(Ordering::Relaxed),
            glitches,
            went_async: self.is_async(),
            stats: d,
        })
    }

    /// Deactivates and destroys the client.
    pub fn stop(mut self) -> Result<()> {
        if let Some(a) = self.active.take() {
            drop(a.deactivate());
        }
        self.conn.destroy_stream(self.node)?;
        Ok(())
    }
}

/// One measurement window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    /// Voices rendered.
    pub voices: usize,
    /// Frames per cycle.
    pub quantum: usize,
    /// Misses the server counted against the client in the window.
    pub glitches: u64,
    /// Whether the server ran the client asynchronously at the end of the window.
    pub went_async: bool,
    /// The callback's own counters over the window.
    pub stats: Snapshot,
}

/// The benchmark's client priority (one below quaverd's, when permitted).
pub fn priority(ctx: &Ctx) -> RtPriority {
    let p = crate::tools::rt::client_priority(ctx.realtime_priority);
    if p > 0 {
        RtPriority::Fifo(p)
    } else {
        RtPriority::Off
    }
}
