//! One cycle's graph work: every step of the plan (links mixed in with their fades, the
//! node's processor or device I/O, its volume), split-phase nodes finished when a later
//! step reads them, and the rewind of a driver that fills ahead.

use crate::rt::midi;
use crate::rt::node::CycleInfo;
use crate::rt::plan::{DeviceRole, Fade, NodeSlot, Step};
use crate::rt::runner::RtRunner;
use quaver_dsp::PlanarMut;
use quaver_dsp::mix::{mix_into, mix_into_ramp};
use std::sync::atomic::Ordering::Relaxed;

impl RtRunner {
    /// stream can deliver another quantum (a stream that cannot would underrun in a
    /// burst of cycles; its client gets until the watermark instead), else none.
    pub(crate) fn set_driver_fill(&mut self, q: usize) {
        let Some(d) = self.driver else {
            return;
        };
        // Filling ahead needs one device (a follower could not be rewound with it): a
        // device added since the plan was compiled turns it off at once.
        let fill = if self.plan.fill > 0 && self.live_devices() == 1 && self.streams_ready(q) {
            self.plan.fill
        } else {
            0
        };
        if let Some(dev) = self.devices[d].as_mut() {
            dev.set_fill(fill);
        }
        self.driver_fill = fill;
    }

    /// Takes back what the driver has queued beyond a normal cycle and lets every node
    /// that produced it produce it again, so a change (a new stream, a volume, a pause)
    /// is heard after the watermark rather than after the whole buffer. Skipped when a
    /// node that already produced output cannot take it back, or when little is
    /// queued. Single-device engines only (fill is off otherwise). *RT*.
    pub(crate) fn rewind(&mut self, q: usize) {
        let Some(d) = self.driver else {
            return;
        };
        if !self.running || self.live_devices() != 1 {
            return;
        }
        // A normal cycle keeps about a quantum plus the watermark queued; rewinding
        // that would gain nothing.
        if self.devices[d]
            .as_ref()
            .is_none_or(|dev| dev.playback_delay() <= 2 * q)
        {
            return;
        }
        let all_can = self.plan.steps.iter().all(|s| {
            self.slots[s.slot].as_ref().is_none_or(|n| {
                // A filter chain cannot take back what it processed.
                !n.rendered
                    || (n.chain.is_none() && n.processor.as_ref().is_none_or(|p| p.can_rewind()))
            })
        });
        if !all_can {
            return;
        }
        // Filling ahead, the refill follows at once; otherwise keep one quantum so the
        // driver's next wakeup finds its usual lead.
        let keep = if self.plan.fill > 0 { 0 } else { q };
        let frames = self.devices[d].as_mut().map_or(0, |dev| dev.rewind(keep));
        if frames == 0 {
            return;
        }
        // Only what a node rendered into the rewound span is its to take back: a stream
        // held by a suspended sink last played long before it, and would replay that.
        let start = self.queued_until.saturating_sub(frames as u64);
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Some(slot) = slot
                && slot.rendered
                && let Some(p) = slot.processor.as_mut()
            {
                let mine = slot.rendered_until.saturating_sub(start) as usize;
                if mine > 0 || self.discard[i] {
                    p.rewind(mine, self.discard[i]);
                }
                slot.rendered_until = slot.rendered_until.min(start);
            }
        }
        self.queued_until = start;
    }

    /// True when every stream the plan runs on each cycle can deliver `q` frames. *RT*.
    pub(crate) fn streams_ready(&mut self, q: usize) -> bool {
        let slots = &mut self.slots;
        self.plan
            .steps
            .iter()
            .filter(|s| s.stream && !s.once && !s.only_device.is_some_and(|d| self.gone[d]))
            .all(|s| {
                slots[s.slot]
                    .as_mut()
                    .and_then(|n| n.processor.as_mut())
                    .is_none_or(|p| p.ready(q))
            })
    }

    /// Runs every step of the plan. With per-node timing, returns the clock reading at
    /// the last node boundary (the end of the work). *RT*.
    pub(crate) fn process_graph(&mut self, cx: &CycleInfo) -> Option<u64> {
        let timing = self.node_timing;
        // One clock reading per node boundary: the end of one node's work is the
        // start of the next one's.
        let mut mark = cx.time_ns;
        let q = cx.frames;
        let first = self.first_cycle_of_plan;
        // Freewheeling, playback goes nowhere (and capture is silence, `read_source`).
        let detached = self.detached();
        for si in 0..self.plan.steps.len() {
            let step = self.plan.steps[si].clone();
            if step.once && !first {
                continue;
            }
            if step.only_device.is_some_and(|d| self.gone[d]) {
                continue;
            }
            // A split-phase node's outputs exist only once it finished: finish the ones
            // this step reads from (the others keep running in parallel).
            for li in step.links.clone() {
                let src = self.plan.links[li].src_slot;
                if self.slots[src].as_ref().is_some_and(|s| s.pending) {
                    Self::finish_slot(self.slots[src].as_deref_mut(), cx);
                    if timing {
                        mark = self.time_finish(src, mark);
                    }
                }
            }
            let Some(mut cur) = self.slots[step.slot].take() else {
                continue;
            };
            self.gather_inputs(&step, &mut cur, q, first);
            let NodeSlot {
                processor,
                chain,
                inputs,
                outputs,
                gain,
                volume_on_inputs,
                pending,
                rendered,
                rendered_until,
                begin_ns,
                midi: ports,
                ..
            } = &mut *cur;
            if *volume_on_inputs {
                // A record stream's own chain works on what reaches it, before its
                // volume (as a playback stream's does on what it makes).
                if let Some(c) = chain.as_mut() {
                    c.process(&mut inputs.view_mut(q));
                }
                midi::apply_gain(gain, &mut inputs.view_mut(q), &ports.inputs);
            }
            match step.device {
                Some(DeviceRole::Sink(d)) => {
                    // A filter chain on the sink (`crate::filter`) turns the mix into
                    // what the device plays, and the monitor carries that too. It
                    // marks the node rendered: a chain cannot take back what it
                    // processed, so a big-buffer device is not rewound under it.
                    let played = match processor.as_mut() {
                        Some(p) => {
                            p.process(cx, inputs.view(q), &mut outputs.view_mut(q));
                            *rendered = true;
                            *rendered_until = self.queued_until + q as u64;
                            &mut *outputs
                        }
                        None => &mut *inputs,
                    };
                    if self.start_fades[d].is_ramping() {
                        self.start_fades[d].apply(&mut played.view_mut(q));
                    }
                    if let Some(dev) = self.devices[d].as_deref_mut().filter(|_| !detached) {
                        let ok = self.followers[d]
                            .as_mut()
                            .and_then(|f| f.write(&mut *dev, played.view(q)))
                            .unwrap_or_else(|| dev.write(played.view(q)).is_ok());
                        if !ok {
                            self.mark_gone(d);
                        }
                    }
                    if processor.is_none() {
                        for ch in 0..outputs.channels().min(inputs.channels()) {
                            outputs.channel_mut(ch)[..q].copy_from_slice(&inputs.channel(ch)[..q]);
                        }
                    }
                }
                Some(DeviceRole::Source(d)) => self.read_source(d, &mut outputs.view_mut(q)),
                None => match processor.as_mut() {
                    Some(p) if p.is_split() => {
                        p.begin(cx, inputs.view(q), &mut outputs.view_mut(q));
                        *pending = true;
                        *rendered = true;
                        *rendered_until = self.queued_until + q as u64;
                    }
                    Some(p) => {
                        p.process(cx, inputs.view(q), &mut outputs.view_mut(q));
                        *rendered = true;
                        *rendered_until = self.queued_until + q as u64;
                    }
                    None => outputs.view_mut(q).fill_silence(),
                },
            }
            if *pending {
                // Never reallocates: the capacity is one entry per slot.
                if self.pending.len() < self.pending.capacity() {
                    self.pending.push(step.slot);
                }
            } else if !*volume_on_inputs {
                if let Some(c) = chain.as_mut() {
                    c.process(&mut outputs.view_mut(q));
                }
                midi::apply_gain(gain, &mut outputs.view_mut(q), &ports.outputs);
            }
            if timing {
                let now = quaver_rt::monotonic_ns();
                let spent = now.saturating_sub(mark);
                mark = now;
                if *pending {
                    *begin_ns = spent;
                } else if let Some(t) = self.node_times.get(step.slot) {
                    t.record(0, spent, spent);
                    if let Some(p) = processor.as_ref() {
                        t.xruns.store(p.xruns(), Relaxed);
                    }
                }
            }
            self.slots[step.slot] = Some(cur);
        }
        for i in 0..self.pending.len() {
            let slot = self.pending[i];
            if self.slots[slot].as_ref().is_some_and(|s| s.pending) {
                Self::finish_slot(self.slots[slot].as_deref_mut(), cx);
                if timing {
                    mark = self.time_finish(slot, mark);
                }
            }
        }
        self.pending.clear();
        timing.then_some(mark)
    }

    /// When the quantum grows from `from` to `to` frames, silences every node's outputs
    /// in between: a feedback link reads its source's previous cycle up to the new
    /// quantum, and past the old one that cycle made nothing (without this it would
    /// replay an older, longer cycle's tail). *RT*; no allocation.
    pub(crate) fn clear_outputs_beyond(&mut self, from: usize, to: usize) {
        if to <= from {
            return;
        }
        for slot in self.slots.iter_mut().flatten() {
            for ch in 0..slot.outputs.channels() {
                // A MIDI port holds an event list, not samples: a feedback link
                // carries it whole whatever the quantum.
                if slot.midi.outputs.contains(ch) {
                    continue;
                }
                let buf = slot.outputs.channel_mut(ch);
                let end = to.min(buf.len());
                if from < end {
                    buf[from..end].fill(0.0);
                }
            }
        }
    }

    /// Reads device `d`'s capture into `out`: silence while freewheeling, or when it
    /// failed (and then it is gone). *RT*.
    fn read_source(&mut self, d: usize, out: &mut PlanarMut<'_>) {
        let dev = if self.detached() {
            None
        } else {
            self.devices[d].as_deref_mut()
        };
        let ok = dev.map(|dev| {
            self.followers[d]
                .as_mut()
                .and_then(|f| f.read(&mut *dev, out))
                .unwrap_or_else(|| dev.read(out).is_ok())
        });
        if ok != Some(true) {
            out.fill_silence();
        }
        if ok == Some(false) {
            self.mark_gone(d);
        }
    }

    /// Records a split-phase node's timing right after its `finish`; returns the clock
    /// reading, the next node boundary. *RT*.
    fn time_finish(&mut self, slot: usize, mark: u64) -> u64 {
        let now = quaver_rt::monotonic_ns();
        if let (Some(n), Some(t)) = (self.slots[slot].as_deref(), self.node_times.get(slot))
            && let Some(p) = n.processor.as_ref()
        {
            let missed = t.xruns.swap(p.xruns(), Relaxed) < p.xruns();
            self.stage_clock.collected(p.remote_times(), now, missed);
            if let Some(r) = p.remote_times() {
                let (wait, busy) = r.wait_busy(now);
                t.record(wait, busy, n.begin_ns + now.saturating_sub(mark));
            }
        }
        now
    }

    /// Finishes a split-phase node begun this cycle and applies its volume. *RT*; may
    /// wait (bounded) inside the processor's `finish`.
    fn finish_slot(slot: Option<&mut NodeSlot>, cx: &CycleInfo) {
        let Some(n) = slot else { return };
        n.pending = false;
        let q = cx.frames;
        if let Some(p) = n.processor.as_mut() {
            p.finish(cx, &mut n.outputs.view_mut(q));
        }
        if !n.volume_on_inputs {
            if let Some(c) = n.chain.as_mut() {
                c.process(&mut n.outputs.view_mut(q));
            }
            midi::apply_gain(&mut n.gain, &mut n.outputs.view_mut(q), &n.midi.outputs);
        }
    }

    /// Fills a node's inputs for this cycle from the links into it (audio mixed with
    /// the links' fades, MIDI merged in time order), after telling its processor which
    /// buffers are MIDI ones when it has any. *RT*.
    fn gather_inputs(&mut self, step: &Step, cur: &mut NodeSlot, q: usize, first: bool) {
        if step.midi.is_some() || cur.has_midi {
            cur.midi = step
                .midi
                .and_then(|i| self.plan.midi.get(i).copied())
                .unwrap_or(midi::MidiPorts::NONE);
            cur.has_midi = step.midi.is_some();
            if let Some(p) = cur.processor.as_mut() {
                p.midi_ports(&cur.midi);
            }
        }
        let inputs = &mut cur.inputs;
        for ch in 0..inputs.channels() {
            if cur.midi.inputs.contains(ch) {
                midi::clear(midi::words_mut(inputs.channel_mut(ch)));
            } else {
                inputs.channel_mut(ch)[..q].fill(0.0);
            }
        }
        let ramp = self.ramp_frames.min(q);
        let own_outputs = &cur.outputs;
        for l in &self.plan.links[step.links.clone()] {
            // A node linked to itself (feedback) reads what it made the cycle before;
            // its slot is taken out while it runs.
            let src = if l.src_slot == step.slot {
                own_outputs
            } else if let Some(src) = self.slots[l.src_slot].as_ref() {
                &src.outputs
            } else {
                continue;
            };
            if l.midi {
                // A removed link's last cycle carries its events too: nothing to fade.
                if l.fade != Fade::Out || first {
                    midi::merge(
                        midi::words_mut(inputs.channel_mut(l.dst_port)),
                        midi::words(src.channel(l.src_port)),
                        &mut self.midi_scratch,
                    );
                }
                continue;
            }
            mix_link(
                &mut inputs.channel_mut(l.dst_port)[..q],
                &src.channel(l.src_port)[..q],
                l.fade,
                first,
                ramp,
            );
        }
    }
}

/// Mixes one link's source `s` into `d` with its fade: ramped over `ramp` frames in the
/// plan's `first` cycle, a link fading out silent after it. *RT*.
fn mix_link(d: &mut [f32], s: &[f32], fade: Fade, first: bool, ramp: usize) {
    match (fade, first) {
        (Fade::Out, false) => {}
        (Fade::Steady, _) | (Fade::In, false) => mix_into(d, s),
        (Fade::In, true) => {
            mix_into_ramp(&mut d[..ramp], &s[..ramp], 0.0, 1.0);
            mix_into(&mut d[ramp..], &s[ramp..]);
        }
        (Fade::Out, true) => mix_into_ramp(&mut d[..ramp], &s[..ramp], 1.0, 0.0),
    }
}
