//! The runner's device set while it runs: devices added and removed by the control
//! side, devices that fail or go away, and which device drives the cycles.
//!
//! Every index has a place allocated up front (`MAX_DEVICES`), so taking a device in or
//! handing one back moves a box and never allocates or frees here. A device that fails
//! or goes away (its card unplugged: `DeviceError::Gone`) leaves at once, in the cycle
//! that saw it: it goes back through the garbage queue and the service thread closes it
//! at its next wakeup, so the kernel can finish the unplug (an unbind waits until every
//! handle on the card is closed). If it was the driver, the next device present takes
//! over; with none left the thread paces itself on its own clock.

use crate::rt::follow::Follower;
use crate::rt::msg::{Garbage, RtEvent};
use crate::rt::runner::RtRunner;
use quaver_devices::Device;
use std::sync::atomic::Ordering::Relaxed;

impl RtRunner {
    /// The driver's device, if a device drives.
    pub(crate) fn driver_device(&self) -> Option<&dyn Device> {
        self.devices[self.driver?].as_deref()
    }

    /// How many devices are there and working.
    pub(crate) fn live_devices(&self) -> usize {
        self.devices.iter().filter(|d| d.is_some()).count()
    }

    /// Takes in a device opened on a control thread. Started at the next cycle's start
    /// if the devices run; closed at once if they are suspended for idleness, like the
    /// others (an idle daemon holds no card, and nothing would notice it vanish). *RT*,
    /// between cycles.
    pub(crate) fn add_device(
        &mut self,
        index: usize,
        device: Box<dyn Device>,
        follower: Option<Box<Follower>>,
    ) {
        if let Some(old) = self.devices[index].take() {
            let follower = self.followers[index].take();
            self.retire(Garbage::Device {
                device: old,
                follower,
            });
        }
        if let Some(old) = std::mem::replace(&mut self.followers[index], follower) {
            self.retire(Garbage::Follower(old));
        }
        self.devices[index] = Some(device);
        self.gone[index] = false;
        self.closed[index] = false;
        let s = &self.stats.devices[index];
        s.gone.store(false, Relaxed);
        s.closed.store(false, Relaxed);
        s.margin_changes.store(0, Relaxed);
        s.follow_active.store(false, Relaxed);
        if self.driver.is_none() {
            self.driver = Some(index);
            self.fallback_deadline = quaver_rt::monotonic_ns();
        }
        if self.running {
            self.needs_start[index] = true;
        } else if self.suspended {
            self.close_idle(index);
        }
    }

    /// Hands device `index` back (its nodes already left the plan). *RT*.
    pub(crate) fn remove_device(&mut self, index: usize) {
        self.needs_start[index] = false;
        self.release(index);
    }

    /// Device `i` failed or went away: reported once, and handed back at once so its
    /// handles close. *RT*.
    pub(crate) fn mark_gone(&mut self, i: usize) {
        if self.devices[i].is_none() {
            return;
        }
        if !self.gone[i] {
            self.gone[i] = true;
            self.stats.devices[i].gone.store(true, Relaxed);
            self.event(RtEvent::DeviceGone { device: i });
        }
        self.release(i);
    }

    /// Gives device `i` and its follower back to the control side; a new driver if it
    /// drove. *RT*.
    fn release(&mut self, i: usize) {
        let Some(device) = self.devices[i].take() else {
            return;
        };
        let follower = self.followers[i].take();
        self.retire(Garbage::Device { device, follower });
        if self.driver == Some(i) {
            self.promote_driver();
        }
    }

    /// The first device present drives from now on. One that was steered as a follower
    /// keeps running as it is (its queue already holds the lead it needs); one without a
    /// clock of its own (null, file) starts its time line now. None left: the thread
    /// paces on its own clock from now. *RT*.
    pub(crate) fn promote_driver(&mut self) {
        self.driver = (0..self.devices.len()).find(|&i| self.devices[i].is_some());
        let Some(d) = self.driver else {
            self.fallback_deadline = quaver_rt::monotonic_ns();
            return;
        };
        let steered = self.followers[d]
            .as_mut()
            .is_some_and(|f| std::mem::replace(&mut f.active, false));
        self.stats.devices[d].follow_active.store(false, Relaxed);
        if self.running && !steered {
            let q = self.plan.quantum.max(1);
            self.start_device(d, q);
        }
    }

    /// Closes a suspended device's handles (idle), if it has any to close. *RT*, right
    /// after an idle suspend (see the module docs of [`crate::rt`]).
    pub(crate) fn close_idle(&mut self, i: usize) {
        if let Some(d) = self.devices[i].as_mut()
            && d.close_idle()
        {
            self.closed[i] = true;
            self.event(RtEvent::DeviceClosed { device: i });
        }
    }
}
