//! JACK's freewheel on the RT thread: entering, one last cycle with the devices fades
//! their playback out and then suspends them; freewheeling, cycles run back to back
//! without device I/O (capture reads as silence, playback goes nowhere); leaving, the
//! devices start again as after an idle suspend, each with its fade-in. So neither
//! switch clicks.

use crate::rt::msg::RtEvent;
use crate::rt::runner::{Freewheel, RtRunner};

impl RtRunner {
    /// Follows the plan's freewheel setting at the start of a cycle of `q` frames.
    /// *RT*.
    pub(crate) fn follow_freewheel(&mut self, q: usize) {
        match (self.plan.freewheel, self.freewheel_state) {
            (true, Freewheel::Off) if self.running => {
                for (i, d) in self.devices.iter().enumerate() {
                    if d.is_some() {
                        self.start_fades[i].set_target(0.0, q);
                    }
                }
                self.freewheel_state = Freewheel::Entering;
            }
            (true, Freewheel::Off) => self.enter_freewheel(),
            (false, Freewheel::Entering) => {
                // Changed its mind within the cycle: fade back in.
                for f in self.start_fades.iter_mut() {
                    f.set_target(1.0, q);
                }
                self.freewheel_state = Freewheel::Off;
            }
            (false, Freewheel::On) => {
                // `running` is false: this cycle starts the devices, with their fade-in.
                self.freewheel_state = Freewheel::Off;
                self.event(RtEvent::Freewheel(false));
            }
            _ => {}
        }
    }

    /// After a cycle: the fade-out cycle is over, so suspend the devices. *RT*.
    pub(crate) fn end_freewheel_fade(&mut self) {
        if self.freewheel_state == Freewheel::Entering {
            self.enter_freewheel();
        }
    }

    fn enter_freewheel(&mut self) {
        if self.running {
            for d in self.devices.iter_mut().flatten() {
                d.suspend();
            }
            self.running = false;
        }
        self.freewheel_state = Freewheel::On;
        self.event(RtEvent::Freewheel(true));
    }

    /// True while no cycle waits for or touches a device.
    pub(crate) fn detached(&self) -> bool {
        self.freewheel_state == Freewheel::On
    }
}
