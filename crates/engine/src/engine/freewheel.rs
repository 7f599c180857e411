//! JACK's freewheel on the control side: the graph runs as fast as its clients allow,
//! detached from the devices (`rt/freewheel.rs` does it between cycles), and the
//! real-time thread runs SCHED_OTHER meanwhile, as jackd2's freewheel thread is not
//! real-time: cycles back to back at a real-time priority would starve the machine.

use crate::EngineError;
use crate::engine::handle::Engine;

impl Engine {
    /// Starts (`true`) or stops freewheeling. Freewheeling, no cycle waits for a device:
    /// the devices are suspended after one last cycle that fades their playback out,
    /// each cycle starts as soon as the previous one ends, and callback clients are
    /// waited for as long as they take (up to two seconds). Stopping starts the devices
    /// again with their fade-in. A setting of the server, like the forced quantum: it
    /// stays until changed.
    pub fn set_freewheel(&self, on: bool) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        if ctl.freewheel == on {
            return Ok(());
        }
        ctl.freewheel = on;
        if on {
            self.freewheel_scheduling(true, ctl.quantum);
        }
        if let Err(e) = self.publish(&mut ctl) {
            ctl.freewheel = !on;
            if on {
                self.freewheel_scheduling(false, ctl.quantum);
            }
            return Err(e);
        }
        if !on {
            self.freewheel_scheduling(false, ctl.quantum);
        }
        tracing::info!("freewheel {}", if on { "started" } else { "stopped" });
        Ok(())
    }

    /// Whether the graph freewheels.
    pub fn freewheel(&self) -> bool {
        self.lock().freewheel
    }

    /// Takes the real-time thread off real-time scheduling, or gives back what it had.
    fn freewheel_scheduling(&self, on: bool, quantum: usize) {
        let mut rt = self.shared.realtime.lock().expect("poisoned");
        rt.freewheeling = on;
        let Some(tid) = rt.tid else { return };
        if !rt.outcome.is_realtime() {
            return;
        }
        if on {
            if let Err(e) = quaver_rt::set_normal(tid) {
                tracing::warn!("freewheel: the audio thread stays real-time ({e})");
            }
            return;
        }
        let c = &self.shared.config;
        let req = quaver_rt::Request {
            scheduler: c.scheduler,
            priority: c.rt_priority,
            period: Some(crate::rt::sched::period(quantum, self.shared.rate)),
            rtkit: true,
        };
        rt.outcome = crate::rt::sched::promote(tid, &req);
    }
}
