//! Devices added and removed while the engine runs (a card plugged in or unplugged, a
//! sink loaded): the control half. A device is opened on the caller's thread, handed
//! to the real-time thread through its queue with its rate matching built here, and
//! its nodes join the graph in one plan; removing it takes its nodes out of the plan
//! first, then the device, which comes back through the garbage queue and is closed on
//! the service thread. The real-time half is `crate::rt::devices`.

use crate::EngineError;
use crate::engine::build::{device_node_specs, follower_for};
use crate::engine::handle::{Engine, notify};
use crate::engine::report::GraphEvent;
use crate::graph::NodeId;
use crate::rt::msg::ToRt;
use crate::rt::stats::MAX_DEVICES;
use quaver_devices::{Device, DeviceInfo};

impl Engine {
    /// Adds an opened device while the engine runs and returns its index: it follows
    /// the driver's clock (rate matched like the devices given at start), or drives if
    /// no device does; its sink and source nodes appear in the graph (`NodeAdded`). It
    /// must run at the engine's rate and take the engine's largest quantum. On error
    /// the device is closed and nothing changes.
    pub fn add_device(&self, mut device: Box<dyn Device>) -> Result<usize, EngineError> {
        let refuse = |device: &mut Box<dyn Device>, why: String| {
            let _ = device.close();
            Err(EngineError::Config(why))
        };
        let info = device.info().clone();
        let net = device.net();
        if info.rate != self.shared.rate {
            return refuse(
                &mut device,
                format!(
                    "device {} runs at {} Hz but the engine at {} Hz; one engine has one rate",
                    info.name, info.rate, self.shared.rate
                ),
            );
        }
        if info.freewheel {
            return refuse(
                &mut device,
                format!(
                    "device {} renders as fast as it can; it cannot join running devices",
                    info.name
                ),
            );
        }
        let qmax = self.shared.config.quantum_max;
        if let Some(limit) = device.max_quantum().filter(|&m| m < qmax) {
            return refuse(
                &mut device,
                format!(
                    "device {} allows at most {limit} frames per cycle, below the engine's largest quantum {qmax}",
                    info.name
                ),
            );
        }
        let follower = match follower_for(&info, self.shared.rate, qmax) {
            Ok(f) => f,
            Err(e) => return refuse(&mut device, e.to_string()),
        };
        let mut ctl = self.lock();
        let index = {
            let mut table = self.shared.devices.write().expect("poisoned");
            let Some(index) = table.iter().position(Option::is_none) else {
                drop(table);
                drop(ctl);
                return refuse(
                    &mut device,
                    format!("device {}: at most {MAX_DEVICES} devices", info.name),
                );
            };
            table[index] = Some(info.clone());
            self.shared.net.write().expect("poisoned")[index] = net;
            index
        };
        // A mark left by a device retired after it had already failed (its end was
        // reported once, before the mark) is not this device's.
        ctl.retiring.remove(&index);
        let sent = self.send(
            &mut ctl,
            ToRt::AddDevice {
                index,
                device,
                follower: Some(follower),
            },
        );
        if let Err(e) = sent {
            self.shared.devices.write().expect("poisoned")[index] = None;
            self.shared.net.write().expect("poisoned")[index] = None;
            return Err(e);
        }
        let ids = self.add_device_nodes(&mut ctl, device_node_specs(index, &info))?;
        for id in ids {
            notify(&mut ctl, GraphEvent::NodeAdded(id));
        }
        tracing::info!("device {} added: {}", info.name, info.description);
        Ok(index)
    }

    /// Removes device `index` and its nodes (`NodeRemoved`); links to them go with
    /// them, so move the streams first. The device is closed on the service thread.
    /// Gone devices are removed the same way (that frees their index).
    pub fn remove_device(&self, index: usize) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let name = match self.shared.devices.read().expect("poisoned").get(index) {
            Some(Some(info)) => info.name.clone(),
            _ => return Err(EngineError::Invalid(format!("no device #{index}"))),
        };
        let ids: Vec<NodeId> = ctl
            .graph
            .nodes
            .values()
            .filter(|n| n.device == Some(index))
            .map(|n| n.id)
            .collect();
        let slots: Vec<usize> = ids
            .iter()
            .filter_map(|&id| ctl.graph.remove_node(id))
            .map(|n| n.slot)
            .collect();
        self.publish(&mut ctl)?;
        for slot in slots {
            self.send(&mut ctl, ToRt::RemoveNode { slot })?;
            ctl.free_slots.push(slot);
        }
        self.send(&mut ctl, ToRt::RemoveDevice { index })?;
        self.shared.devices.write().expect("poisoned")[index] = None;
        self.shared.net.write().expect("poisoned")[index] = None;
        // Its nodes' mixers go with them, released after the lock (as `remove_node`
        // does): a mixer kept would hold the card's control device open.
        let hw: Vec<_> = ids.iter().filter_map(|id| ctl.hw.remove(id)).collect();
        for id in ids {
            notify(&mut ctl, GraphEvent::NodeRemoved(id));
        }
        drop(ctl);
        drop(hw);
        tracing::info!("device {name} removed");
        Ok(())
    }

    /// Device `index` went away (its card was unplugged): the real-time thread drops it
    /// at the next cycle boundary, hands it back to be closed, and reports it as a
    /// failure (`DeviceGone`), so its streams move on and its nodes go
    /// (`quaver_policy::rehome`). Nothing if it is already gone.
    pub fn device_gone(&self, index: usize) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        if !matches!(
            self.shared.devices.read().expect("poisoned").get(index),
            Some(Some(_))
        ) {
            return Err(EngineError::Invalid(format!("no device #{index}")));
        }
        ctl.retiring.insert(index);
        self.send(&mut ctl, ToRt::DeviceGone { index })
    }

    /// The devices there now, with their indices (a node's `device`), in index order.
    pub fn devices(&self) -> Vec<(usize, DeviceInfo)> {
        self.shared
            .devices
            .read()
            .expect("poisoned")
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.clone().map(|d| (i, d)))
            .collect()
    }
}
