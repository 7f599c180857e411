//! Graph edits: nodes, ports, links, volume, latency, suspend and hold, rewinds. Each
//! edit publishes a new plan before it returns.

use crate::EngineError;
use crate::engine::handle::{Engine, notify};
use crate::engine::report::GraphEvent;
use crate::graph::{Direction, Graph, LinkId, NodeId, NodeSpec, PortId, PortType};
use crate::rt::msg::ToRt;
use crate::rt::node::Processor;
use crate::rt::plan::NodeSlot;
use crate::rt::retune::Retune;
use quaver_dsp::filter::FilterChain;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Most ports (inputs plus outputs, reserved ones included) one node may have.
pub const MAX_PORTS_PER_NODE: usize = 4096;

/// Longest [`Engine::hold`] waits for the devices to suspend: a cycle of the largest
/// quantum and then some.
const HOLD_WAIT: Duration = Duration::from_secs(2);

impl Engine {
    /// Suspends the devices on request (`on`), streams or not, until released: what
    /// PulseAudio's SUSPEND_SINK does (`pasuspender` frees a card for a program that
    /// opens it directly). The devices share one clock, so they suspend together; the
    /// streams wait, nothing of theirs is lost. While held, idle suspend and resume
    /// change nothing; released, the devices resume if streams exist.
    ///
    /// A hold returns once the devices are suspended (at the end of the cycle running
    /// now), so a program started next finds the card free, or after `HOLD_WAIT` at most;
    /// the result says whether they are suspended.
    pub fn hold(&self, on: bool) -> Result<bool, EngineError> {
        {
            let mut ctl = self.lock();
            if ctl.held != on {
                ctl.held = on;
                self.publish(&mut ctl)?;
            }
        }
        let suspended = || self.shared.stats.suspended.load(Relaxed);
        if on {
            let t0 = std::time::Instant::now();
            while !suspended() && t0.elapsed() < HOLD_WAIT {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(suspended())
    }

    /// Whether the devices are held suspended ([`Engine::hold`]).
    pub fn held(&self) -> bool {
        self.lock().held
    }

    /// Suspends or resumes one node that is not a device (a virtual sink or source):
    /// it stops running, and so do the nodes that only feed it or are only fed by it
    /// (its streams stop being read, its monitor's recorders get nothing), while the
    /// devices and every other node go on. Returns whether anything changed.
    pub fn suspend_node(&self, node: NodeId, on: bool) -> Result<bool, EngineError> {
        let mut ctl = self.lock();
        let n = ctl.graph.node_mut(node)?;
        if n.device.is_some() {
            // A device stops with its clock: that is `hold`.
            return Err(EngineError::Invalid(format!(
                "{} is a device; devices suspend together",
                n.name
            )));
        }
        if n.suspended == on {
            return Ok(false);
        }
        n.suspended = on;
        self.publish(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        Ok(true)
    }

    /// Asks the real-time thread to take back the device's queued playback and render
    /// it again, so a change made outside the graph (a stream paused or resumed by its
    /// client) is heard at once. Does nothing unless the device is filling ahead.
    pub fn rewind(&self) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        self.request_rewind(&mut ctl)
    }

    /// Like [`Engine::rewind`], for a stream whose queued audio was dropped (a flush):
    /// what the device takes back of `node`'s output is not played again, so a seek is
    /// heard at once instead of after the device's queue.
    pub fn rewind_flushed(&self, node: NodeId) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        self.request_rewind_of(&mut ctl, Some(node))
    }

    /// Adds a node; `processor` is None only for device nodes. Returns its id.
    pub fn add_node(
        &self,
        spec: NodeSpec,
        processor: Option<Box<dyn Processor>>,
    ) -> Result<NodeId, EngineError> {
        self.add_node_linked(spec, processor, None)
    }

    /// Adds a node and, in the same plan, links it with `target` (its outputs to the
    /// target's inputs, or the target's outputs to its inputs for a node without
    /// outputs). Its links start at full gain: the new node's first sample is its start.
    /// On any error nothing changes.
    pub fn add_node_linked(
        &self,
        spec: NodeSpec,
        processor: Option<Box<dyn Processor>>,
        target: Option<&str>,
    ) -> Result<NodeId, EngineError> {
        self.add_stream_node(spec, processor, target, None)
    }

    /// [`Engine::add_node_linked`] for a client stream with its own filter chain (a
    /// rule's `chain`): the chain is part of the node from its first cycle, on a
    /// playback stream's outputs or a record stream's inputs, before its volume. The
    /// chain must be built for the stream's channels at the engine's rate.
    pub fn add_stream_node(
        &self,
        spec: NodeSpec,
        processor: Option<Box<dyn Processor>>,
        target: Option<&str>,
        chain: Option<FilterChain>,
    ) -> Result<NodeId, EngineError> {
        if chain.is_some() && !spec.kind.is_stream() {
            return Err(EngineError::Invalid(format!(
                "node '{}' is a {}: a node's own chain is for client streams",
                spec.name,
                spec.kind.as_str()
            )));
        }
        if spec.name.is_empty() || spec.name.contains(':') || spec.name.len() > 128 {
            return Err(EngineError::Invalid(format!(
                "node name '{}' must be 1–128 characters without ':'",
                spec.name
            )));
        }
        if processor.is_none() && spec.device.is_none() {
            return Err(EngineError::Invalid("a node needs a processor".into()));
        }
        let midi_past = |types: &[PortType]| {
            types
                .iter()
                .enumerate()
                .any(|(i, t)| *t == PortType::Midi && i >= crate::rt::midi::MAX_MIDI_PORTS)
        };
        if midi_past(&spec.input_types) || midi_past(&spec.output_types) {
            return Err(EngineError::TooMany(format!(
                "MIDI ports need a buffer index below {}",
                crate::rt::midi::MAX_MIDI_PORTS
            )));
        }
        let mut ctl = self.lock();
        let slot = ctl.free_slots.pop().ok_or_else(|| {
            EngineError::TooMany(format!(
                "node limit of {} reached",
                self.shared.config.max_nodes
            ))
        })?;
        if spec.input_capacity() + spec.output_capacity() > MAX_PORTS_PER_NODE {
            return Err(EngineError::TooMany(format!(
                "a node may have at most {MAX_PORTS_PER_NODE} ports"
            )));
        }
        for n in spec.input_names.iter().chain(&spec.output_names) {
            Graph::check_port_name(n)?;
        }
        let mut node = Box::new(NodeSlot::new(
            processor,
            spec.input_capacity(),
            spec.output_capacity(),
            self.shared.config.quantum_max,
            spec.volume,
            spec.kind.volume_on_inputs(),
        ));
        let controls = chain.as_ref().map(FilterChain::controls);
        node.chain = chain.map(Box::new);
        let id = ctl.graph.add_node(&spec, slot);
        if let Some(c) = controls {
            ctl.chains.insert(id, c);
        }
        if let Some(t) = target {
            let name = ctl.graph.nodes[&id].name.clone();
            let linked = if spec.outputs.is_empty() {
                ctl.graph.link_pairs(t, &name)
            } else {
                ctl.graph.link_pairs(&name, t)
            }
            .and_then(|pairs| ctl.graph.add_links(&pairs));
            if let Err(e) = linked {
                ctl.graph.remove_node(id);
                ctl.chains.remove(&id);
                ctl.free_slots.push(slot);
                return Err(e);
            }
        }
        if let Err(e) = self.send(&mut ctl, ToRt::AddNode { slot, node }) {
            ctl.graph.remove_node(id);
            ctl.chains.remove(&id);
            ctl.free_slots.push(slot);
            return Err(e);
        }
        self.publish_with_new(&mut ctl, &HashSet::from([id]))?;
        // The new node is heard after the watermark, not after what is queued.
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeAdded(id));
        if target.is_some() {
            notify(&mut ctl, GraphEvent::LinksChanged);
        }
        Ok(id)
    }

    /// Removes a node and its links.
    pub fn remove_node(&self, id: NodeId) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let node = ctl
            .graph
            .remove_node(id)
            .ok_or_else(|| EngineError::NoSuchNode(id.to_string()))?;
        self.publish(&mut ctl)?;
        self.send(&mut ctl, ToRt::RemoveNode { slot: node.slot })?;
        ctl.free_slots.push(node.slot);
        ctl.chains.remove(&id);
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeRemoved(id));
        // A device node's mixer goes with it, released after the lock: dropping the last
        // handle joins its watch thread, which may be waiting for this lock.
        let hw = ctl.hw.remove(&id);
        drop(ctl);
        drop(hw);
        Ok(())
    }

    /// Hands a stream node the rate converter its client's new rate needs (built on the
    /// calling thread: [`crate::stream::Retune`]); the node swaps it in at its next
    /// cycle and the old one is freed here later. For rate moves beyond what the
    /// node's converter can follow by itself ([`crate::stream::MAX_RATE_CHANGE`]).
    pub fn retune(&self, node: NodeId, r: Retune) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let slot = ctl
            .graph
            .nodes
            .get(&node)
            .ok_or_else(|| EngineError::NoSuchNode(node.to_string()))?
            .slot;
        self.send(
            &mut ctl,
            ToRt::Retune {
                slot,
                retune: Box::new(r),
            },
        )
    }

    /// Changes how long the devices may be idle before they suspend (`None`: never),
    /// as loading and unloading PulseAudio's module-suspend-on-idle do. A freewheeling
    /// engine keeps suspending at once.
    pub fn set_suspend_timeout(&self, timeout: Option<Duration>) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let frames = timeout.map(|t| (t.as_secs_f64() * self.shared.rate as f64) as u64);
        self.send(&mut ctl, ToRt::SuspendAfter(frames))
    }

    /// Adds a port to a node created with room for it (`NodeSpec::max_inputs` /
    /// `max_outputs`); returns its id. Its buffer index is the lowest free one.
    pub fn add_port(
        &self,
        node: NodeId,
        direction: Direction,
        name: Option<&str>,
        channel: quaver_dsp::ChannelPosition,
    ) -> Result<PortId, EngineError> {
        self.add_port_typed(node, direction, name, channel, PortType::Audio)
    }

    /// [`Engine::add_port`] for a port of any type (MIDI ports: [`crate::rt::midi`]).
    pub fn add_port_typed(
        &self,
        node: NodeId,
        direction: Direction,
        name: Option<&str>,
        channel: quaver_dsp::ChannelPosition,
        port_type: PortType,
    ) -> Result<PortId, EngineError> {
        let mut ctl = self.lock();
        let id = ctl
            .graph
            .add_port_typed(node, direction, name, channel, port_type)?;
        if let Err(e) = self.publish(&mut ctl) {
            let _ = ctl.graph.remove_port(node, id);
            return Err(e);
        }
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        Ok(id)
    }

    /// Removes a port of `node` and its links.
    pub fn remove_port(&self, node: NodeId, port: PortId) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let had_links = ctl
            .graph
            .links
            .values()
            .any(|l| l.output == port || l.input == port);
        ctl.graph.remove_port(node, port)?;
        self.publish(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        if had_links {
            notify(&mut ctl, GraphEvent::LinksChanged);
        }
        Ok(())
    }

    /// Changes the latency a node asks for (frames at the engine rate; `None` for no
    /// request). The quantum follows with the next plan.
    pub fn set_latency(&self, node: NodeId, frames: Option<u32>) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let n = ctl.graph.node_mut(node)?;
        if n.latency_frames == frames {
            return Ok(());
        }
        n.latency_frames = frames;
        self.publish(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(node));
        Ok(())
    }

    /// Links `output` to `input` ("node" or "node:port" on each side). A link that
    /// would close a loop is refused; [`Engine::link_with_feedback`] takes it.
    pub fn link(&self, output: &str, input: &str) -> Result<Vec<LinkId>, EngineError> {
        self.link_as(output, input, false)
    }

    /// Like [`Engine::link`], but a link that closes a loop (a node into itself
    /// included) is accepted, as JACK accepts it: it carries the previous cycle
    /// (docs/engine/feedback.md). For the native protocol's `link`, which libjack's
    /// `jack_connect` and `quaver link` use.
    pub fn link_with_feedback(
        &self,
        output: &str,
        input: &str,
    ) -> Result<Vec<LinkId>, EngineError> {
        self.link_as(output, input, true)
    }

    fn link_as(
        &self,
        output: &str,
        input: &str,
        feedback: bool,
    ) -> Result<Vec<LinkId>, EngineError> {
        let mut ctl = self.lock();
        let pairs = ctl.graph.link_pairs(output, input)?;
        let ids = if feedback {
            ctl.graph.add_links_with_feedback(&pairs)?
        } else {
            ctl.graph.add_links(&pairs)?
        };
        self.publish(&mut ctl)?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::LinksChanged);
        Ok(ids)
    }

    /// Moves a node from one peer to another in a single plan, so the old links fade
    /// out while the new ones fade in within the same cycle (no gap, no double play).
    /// A node with outputs is moved between sinks (its output links), a node with only
    /// inputs between sources. `from` limits which peer it leaves; `None` means all.
    /// On error nothing changes.
    pub fn relink(&self, node: &str, from: Option<&str>, to: &str) -> Result<(), EngineError> {
        self.relink_side(node, from, to, None)
    }

    /// Like [`Engine::relink`] for the input side of a node that has outputs too (a
    /// loopback moved to another source).
    pub fn relink_inputs(
        &self,
        node: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<(), EngineError> {
        self.relink_side(node, from, to, Some(false))
    }

    /// [`Engine::relink`] on the output side (`outward`), the input side, or (`None`)
    /// the output side of a node that has outputs, else its input side.
    fn relink_side(
        &self,
        node: &str,
        from: Option<&str>,
        to: &str,
        outward: Option<bool>,
    ) -> Result<(), EngineError> {
        let mut ctl = self.lock();
        let backup = ctl.graph.clone();
        let result = (|| {
            let g = &mut ctl.graph;
            let (id, _) = g.resolve(node)?;
            let from_id = from.map(|f| g.resolve(f).map(|r| r.0)).transpose()?;
            let n = &g.nodes[&id];
            let outward = outward.unwrap_or(!n.outputs.is_empty());
            let mine: HashSet<PortId> = if outward {
                n.outputs.iter().copied().collect()
            } else {
                n.inputs.iter().copied().collect()
            };
            let ports = g.ports.clone();
            g.links.retain(|_, l| {
                let (own, peer) = if outward {
                    (l.output, l.input)
                } else {
                    (l.input, l.output)
                };
                !(mine.contains(&own) && from_id.is_none_or(|f| ports[&peer].node == f))
            });
            let name = g.nodes[&id].name.clone();
            let pairs = if outward {
                g.link_pairs(&name, to)?
            } else {
                g.link_pairs(to, &name)?
            };
            g.add_links(&pairs)?;
            Ok(())
        })();
        if let Err(e) = result {
            ctl.graph = backup;
            return Err(e);
        }
        self.publish(&mut ctl)?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::LinksChanged);
        Ok(())
    }

    /// Removes links between `output` and `input`; returns how many.
    pub fn unlink(&self, output: &str, input: &str) -> Result<usize, EngineError> {
        let mut ctl = self.lock();
        let n = ctl.graph.unlink(output, input)?;
        self.publish(&mut ctl)?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::LinksChanged);
        Ok(n)
    }

    /// Sets a node's linear volume and/or mute, ramped.
    pub fn set_volume(
        &self,
        node: &str,
        volume: Option<f32>,
        mute: Option<bool>,
    ) -> Result<(), EngineError> {
        if let Some(v) = volume
            && !(v.is_finite() && (0.0..=10.0).contains(&v))
        {
            return Err(EngineError::Invalid(format!(
                "volume {v} is outside 0..=10"
            )));
        }
        let mut ctl = self.lock();
        let (id, _) = ctl.graph.resolve(node)?;
        let n = ctl.graph.nodes.get_mut(&id).expect("resolved");
        if let Some(v) = volume {
            n.volume = v;
        }
        if let Some(m) = mute {
            n.mute = m;
        }
        let (slot, v, m, duck) = (n.slot, n.volume, n.mute, n.duck);
        // A device node with a hardware volume drives its element; the gain is the rest.
        let gain = super::hwvol::node_gain(&mut ctl, id, v, m, volume.is_some(), mute.is_some());
        let ramp = self.shared.config.ramp_frames;
        let gain = gain * duck;
        self.send(&mut ctl, ToRt::Volume { slot, gain, ramp })?;
        self.request_rewind(&mut ctl)?;
        notify(&mut ctl, GraphEvent::NodeChanged(id));
        Ok(())
    }

    /// Attenuates a stream by `factor` (linear, 0..=1) on top of its volume, ramped over
    /// `ramp_frames` — the policy's ducking, which leaves the volume clients see alone.
    /// Device nodes are refused: their volume may be the card's.
    pub fn set_duck(&self, id: NodeId, factor: f32, ramp_frames: usize) -> Result<(), EngineError> {
        if !(factor.is_finite() && (0.0..=1.0).contains(&factor)) {
            return Err(EngineError::Invalid(format!(
                "duck factor {factor} is outside 0..=1"
            )));
        }
        let mut ctl = self.lock();
        let n = (ctl.graph.nodes.get_mut(&id))
            .ok_or_else(|| EngineError::NoSuchNode(id.to_string()))?;
        if n.device.is_some() {
            return Err(EngineError::Invalid(format!(
                "{} is a device node; only streams are ducked",
                n.name
            )));
        }
        if n.duck == factor {
            return Ok(());
        }
        n.duck = factor;
        let slot = n.slot;
        let gain = if n.mute { 0.0 } else { n.volume * factor };
        self.send(
            &mut ctl,
            ToRt::Volume {
                slot,
                gain,
                ramp: ramp_frames,
            },
        )?;
        // No rewind: a ramp over what is already queued ahead is not worth a glitch risk;
        // the duck starts with the next cycle rendered.
        Ok(())
    }
}
