//! Hardware volume of device nodes: a sink's or source's volume split between the
//! card's mixer element and the node's software gain.
//!
//! The daemon attaches a [`HardwareVolume`] (the device layer's trait; the ALSA mixer
//! implements it) to a device node. From then on [`Engine::set_volume`] on that node
//! drives the element in dB as far as it goes and gives the node's gain only the rest
//! ([`quaver_devices::hwvol`] has the arithmetic), so the node's `volume` stays what
//! the client asked for while the RT thread applies the residual. Mute uses the
//! element's switch where it has one. When another program changes the element, its
//! watch thread calls back here: the node's volume becomes the hardware's and the
//! software gain goes back to unity (PulseAudio resets its soft volume the same way),
//! and watchers get [`GraphEvent::NodeChanged`] as for any volume change.
//!
//! Threads: control threads and the element's watch thread. Lock order is the
//! engine's control lock, then the element's own lock; the watch thread calls back
//! without holding its lock, so the two never wait on each other.

use super::handle::{Control, Engine, HwEntry, notify};
use crate::EngineError;
use crate::engine::report::GraphEvent;
use crate::graph::{NodeId, NodeKind};
use crate::rt::msg::ToRt;
use quaver_devices::hwvol::{self, HardwareVolume, HwEvent, HwReading, HwVolumeInfo};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The gain the RT thread applies to node `id` whose volume is `volume` and mute
/// `mute`, after driving its hardware volume if it has one (`set_volume` and
/// `set_mute` say what changed). Without hardware volume: `volume`, or 0 when muted.
pub(super) fn node_gain(
    ctl: &mut Control,
    id: NodeId,
    volume: f32,
    mute: bool,
    set_volume: bool,
    set_mute: bool,
) -> f32 {
    let Some(e) = ctl.hw.get_mut(&id) else {
        return if mute { 0.0 } else { volume };
    };
    let info = e.control.info().clone();
    if set_volume {
        e.sw_gain = match hwvol::apply(&*e.control, volume) {
            Ok(split) => {
                tracing::debug!(
                    "{} {}: volume {volume:.4} = {:.2} dB in hardware × {:.4} in software",
                    info.card,
                    info.element,
                    split.hw_db,
                    split.sw_gain
                );
                split.sw_gain
            }
            Err(err) => {
                // The element failed (the card is going away): the volume stays
                // right in software against what the hardware last held.
                tracing::warn!("{} {}: {err}; volume in software", info.card, info.element);
                e.control
                    .read()
                    .map(|r| hwvol::software_gain(volume, r.db))
                    .unwrap_or(volume)
            }
        };
    }
    let mut hw_mute = info.has_switch;
    if set_mute
        && info.has_switch
        && let Err(err) = e.control.set_mute(mute)
    {
        tracing::warn!("{} {}: {err}; muting in software", info.card, info.element);
        hw_mute = false;
    }
    if mute && !hw_mute { 0.0 } else { e.sw_gain }
}

impl Engine {
    /// Gives the sink (`capture` false) or source node of device `device` the hardware
    /// volume `control`: its volume now drives the element, and the node takes the
    /// element's current volume (as a desktop server shows what the mixer holds).
    /// Returns the node. *control*.
    pub fn attach_hardware_volume(
        &self,
        device: usize,
        capture: bool,
        control: Arc<dyn HardwareVolume>,
    ) -> Result<NodeId, EngineError> {
        let kind = if capture {
            NodeKind::DeviceSource
        } else {
            NodeKind::DeviceSink
        };
        let reading = control.read()?;
        let id = {
            let mut ctl = self.lock();
            let id = ctl
                .graph
                .nodes
                .values()
                .find(|n| n.device == Some(device) && n.kind == kind)
                .map(|n| n.id)
                .ok_or_else(|| {
                    EngineError::NoSuchNode(format!(
                        "{} of device {device}",
                        if capture { "source" } else { "sink" }
                    ))
                })?;
            ctl.hw.insert(
                id,
                HwEntry {
                    control: control.clone(),
                    sw_gain: 1.0,
                },
            );
            self.follow_hardware(&mut ctl, id, reading)?;
            id
        };
        let weak = Arc::downgrade(&self.shared);
        control.watch(Box::new(move |event| {
            if let Some(shared) = weak.upgrade() {
                Engine { shared }.hardware_event(id, event);
            }
        }));
        Ok(id)
    }

    /// The hardware volume of node `id`, if it has one.
    pub fn hardware_volume(&self, id: NodeId) -> Option<HwVolumeInfo> {
        self.lock().hw.get(&id).map(|e| e.control.info().clone())
    }

    /// Every node's hardware volume.
    pub fn hardware_volumes(&self) -> BTreeMap<NodeId, HwVolumeInfo> {
        self.lock()
            .hw
            .iter()
            .map(|(&id, e)| (id, e.control.info().clone()))
            .collect()
    }

    /// The software gain node `id` applies on top of its hardware volume (1.0 when the
    /// hardware does it all; `None` without hardware volume).
    pub fn software_gain(&self, id: NodeId) -> Option<f32> {
        self.lock().hw.get(&id).map(|e| e.sw_gain)
    }

    /// From the element's watch thread.
    fn hardware_event(&self, id: NodeId, event: HwEvent) {
        let mut ctl = self.lock();
        match event {
            HwEvent::Changed(r) => {
                if let Err(e) = self.follow_hardware(&mut ctl, id, r) {
                    tracing::warn!("node {id}: following its hardware volume: {e}");
                }
            }
            HwEvent::Gone(why) => {
                tracing::warn!("node {id}: {why}; its volume is software only from now on");
                // Dropped on this (the watch) thread, which the mixer does not join.
                let _gone = ctl.hw.remove(&id);
                if let Some(n) = ctl.graph.nodes.get(&id) {
                    let (slot, volume, mute) = (n.slot, n.volume, n.mute);
                    let gain = node_gain(&mut ctl, id, volume, mute, false, false);
                    let ramp = self.shared.config.ramp_frames;
                    let _ = self.send(&mut ctl, ToRt::Volume { slot, gain, ramp });
                }
            }
        }
    }

    /// The node's volume becomes what the hardware holds, with unity software gain.
    fn follow_hardware(
        &self,
        ctl: &mut Control,
        id: NodeId,
        r: HwReading,
    ) -> Result<(), EngineError> {
        let Some(n) = ctl.graph.nodes.get_mut(&id) else {
            return Ok(());
        };
        n.volume = (hwvol::db_to_gain(r.db) as f32).clamp(0.0, 10.0);
        if let Some(m) = r.muted {
            n.mute = m;
        }
        let (slot, volume, mute) = (n.slot, n.volume, n.mute);
        let Some(e) = ctl.hw.get_mut(&id) else {
            return Ok(());
        };
        e.sw_gain = 1.0;
        let gain = node_gain(ctl, id, volume, mute, false, false);
        let ramp = self.shared.config.ramp_frames;
        self.send(ctl, ToRt::Volume { slot, gain, ramp })?;
        self.request_rewind(ctl)?;
        notify(ctl, GraphEvent::NodeChanged(id));
        Ok(())
    }
}
