//! [`PluginFilter`]: a LADSPA or LV2 plugin as a [`Filter`]. Buffers are allocated and
//! every port connected once, when it is built; `process` copies each block into the
//! plugin's input buffers, runs it and copies the outputs back, allocating nothing.

use super::types::{PluginError, alias, intern};
use quaver_dsp::PlanarMut;
use quaver_dsp::filter::{Controls, Filter, FilterError, NamedControl, NamedControls};
use std::collections::BTreeMap;

/// Frames a plugin is run for at most per call (longer blocks run in pieces); what
/// LV2's `maxBlockLength` option says.
pub const CHUNK: usize = 1024;
/// A control change moves in this many steps…
const RAMP_STEPS: u32 = 8;
/// …of this many frames each (256 frames in all, as the built-in gain's ramp).
const RAMP_STEP_FRAMES: usize = 32;

/// What a port is for the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Role {
    AudioIn,
    AudioOut,
    ControlIn,
    ControlOut,
    /// An LV2 atom sequence input (events, messages from a UI): always empty here.
    AtomIn,
    /// An LV2 atom sequence output (notifications for a UI): given room, never read.
    AtomOut,
    /// A port the plugin lets the host leave unconnected (LV2 `connectionOptional`).
    Unconnected,
}

/// Bytes of each atom port's buffer (room for a plugin's notifications per cycle).
/// x42's fil4 asks for 8416 (its `rsz:minimumSize`) and complains below; 64 KiB
/// leaves room for any plugin seen so far, and only its headers are touched per run.
const ATOM_BYTES: usize = 65536;
/// Bytes of an atom header (`LV2_Atom`: size, type) or a sequence body header.
const ATOM_HEADER: u32 = 8;

/// One port as the plugin describes it.
#[derive(Debug, Clone)]
pub(crate) struct Port {
    pub index: u32,
    pub role: Role,
    pub name: String,
    /// Bounds (infinite when the plugin gives none), already scaled by the rate.
    pub min: f64,
    pub max: f64,
    pub default: f64,
    /// Whole numbers only (integer, toggled, enumeration): such changes jump.
    pub integer: bool,
    /// An output control that reports the plugin's latency in frames.
    pub latency: bool,
}

/// A plugin's name for messages and its ports, in index order.
pub(crate) struct Description {
    pub what: String,
    pub ports: Vec<Port>,
    /// The URIDs of `atom:Sequence` and `atom:Chunk`, for atom ports (LV2 only).
    pub atom_types: (u32, u32),
    /// The plugin declares its run free of allocation and blocking (LADSPA's
    /// `HARD_RT_CAPABLE`, LV2's `lv2:hardRTCapable`).
    pub hard_rt: bool,
}

/// One instance of a plugin, instantiated at the sink's rate. Dropping it deactivates
/// it (if active) and frees it.
pub(crate) trait RawInstance: Send {
    /// Connects `port` to `data`.
    ///
    /// # Safety
    /// `data` is null (for an optional port) or stays valid, for [`CHUNK`] samples,
    /// until the instance is dropped.
    unsafe fn connect(&mut self, port: u32, data: *mut f32);
    /// Activates the instance (once, before the first run).
    fn activate(&mut self);
    /// Runs `frames` (at most [`CHUNK`]) frames. *RT*.
    fn run(&mut self, frames: usize);
}

/// A plugin as a filter: one instance for a plugin with as many audio inputs and
/// outputs as the sink has channels, or one per channel for a mono plugin.
pub struct PluginFilter {
    instances: Vec<Box<dyn RawInstance>>,
    /// Channels each instance takes.
    per: usize,
    audio_in: Box<[f32]>,
    audio_out: Box<[f32]>,
    /// Input control values, instance after instance (the plugin reads them here).
    ctl: Box<[f32]>,
    /// Output controls, written by the plugin.
    ctl_out: Box<[f32]>,
    /// Atom port buffers, 8-byte aligned, instance after instance.
    atoms: Box<[u64]>,
    /// Per instance: each atom port's offset in `atoms` (words) and whether it is an input.
    atom_ports: Vec<(usize, bool)>,
    atom_types: (u32, u32),
    named: NamedControls,
    current: Box<[f64]>,
    target: Box<[f64]>,
    step: Box<[f64]>,
    ramp_left: u32,
    /// Index into `ctl_out` (of instance 0) of a latency port.
    latency: Option<usize>,
    text: String,
}

impl PluginFilter {
    /// Builds the filter for `channels` channels: checks the ports, applies `controls`
    /// from the config, then `instantiate`s, connects and activates.
    pub(crate) fn new(
        desc: Description,
        channels: usize,
        controls: &BTreeMap<String, f64>,
        mut instantiate: impl FnMut() -> Result<Box<dyn RawInstance>, PluginError>,
    ) -> Result<PluginFilter, PluginError> {
        let what = desc.what.clone();
        let count = |r: Role| desc.ports.iter().filter(|p| p.role == r).count();
        let (ai, ao) = (count(Role::AudioIn), count(Role::AudioOut));
        let (per, n) = if ai == channels && ao == channels {
            (channels, 1)
        } else if ai == 1 && ao == 1 {
            (1, channels)
        } else {
            return Err(PluginError::Unsupported {
                what,
                why: format!(
                    "it has {ai} audio input(s) and {ao} output(s); a filter on a {channels}-channel sink needs {channels} of each, or 1 of each (run once per channel)"
                ),
            });
        };
        let ins: Vec<&Port> = desc
            .ports
            .iter()
            .filter(|p| p.role == Role::ControlIn)
            .collect();
        let outs: Vec<&Port> = desc
            .ports
            .iter()
            .filter(|p| p.role == Role::ControlOut)
            .collect();
        let (named, values) = configured(&ins, controls, &what)?;
        let nci = ins.len();
        let nco = outs.len().max(1);
        let words = ATOM_BYTES / 8;
        let atom_ports: Vec<(usize, bool)> = desc
            .ports
            .iter()
            .filter(|p| matches!(p.role, Role::AtomIn | Role::AtomOut))
            .enumerate()
            .map(|(k, p)| (k * words, p.role == Role::AtomIn))
            .collect();
        let per_instance_words = atom_ports.len() * words;
        let mut f = PluginFilter {
            instances: Vec::with_capacity(n),
            per,
            audio_in: vec![0.0; n * per * CHUNK].into_boxed_slice(),
            audio_out: vec![0.0; n * per * CHUNK].into_boxed_slice(),
            ctl: (0..n)
                .flat_map(|_| values.iter().map(|&v| v as f32))
                .collect(),
            ctl_out: vec![0.0; n * nco].into_boxed_slice(),
            atoms: vec![0u64; n * per_instance_words].into_boxed_slice(),
            atom_types: desc.atom_types,
            atom_ports,
            current: values.clone().into_boxed_slice(),
            target: values.into_boxed_slice(),
            step: vec![0.0; nci].into_boxed_slice(),
            ramp_left: 0,
            latency: outs.iter().position(|p| p.latency),
            text: String::new(),
            named,
        };
        for i in 0..n {
            let mut inst = instantiate()?;
            f.connect(i, &mut *inst, &desc.ports, nco, per_instance_words);
            inst.activate();
            f.instances.push(inst);
        }
        f.text = format!(
            "{}{} instance(s) of {} channel(s); controls: {}",
            if desc.hard_rt {
                ""
            } else {
                "not declared hard real-time capable (its run may allocate or block); "
            },
            n,
            per,
            if ins.is_empty() {
                "none".to_string()
            } else {
                ins.iter()
                    .zip(f.current.iter())
                    .map(|(p, &v)| {
                        let a = alias(&p.name);
                        let name = if a == p.name {
                            a
                        } else {
                            format!("{} ({a})", p.name)
                        };
                        // As f32, the plugin's own precision: 0.01, not 0.0099999997….
                        format!(
                            "{name} = {} in [{}, {}]",
                            v as f32, p.min as f32, p.max as f32
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        );
        Ok(f)
    }

    /// Connects every port of instance `i` to its place in the buffers.
    fn connect(
        &mut self,
        i: usize,
        inst: &mut dyn RawInstance,
        ports: &[Port],
        nco: usize,
        atom_words: usize,
    ) {
        let (per, nci) = (self.per, self.current.len());
        let (mut a_in, mut a_out, mut c_in, mut c_out, mut atom) = (0, 0, 0, 0, 0);
        for p in ports {
            let data: *mut f32 = match p.role {
                Role::AudioIn => {
                    a_in += 1;
                    self.audio_in[(i * per + a_in - 1) * CHUNK..].as_mut_ptr()
                }
                Role::AudioOut => {
                    a_out += 1;
                    self.audio_out[(i * per + a_out - 1) * CHUNK..].as_mut_ptr()
                }
                Role::ControlIn => {
                    c_in += 1;
                    &mut self.ctl[i * nci + c_in - 1]
                }
                Role::ControlOut => {
                    c_out += 1;
                    &mut self.ctl_out[i * nco + c_out - 1]
                }
                Role::AtomIn | Role::AtomOut => {
                    atom += 1;
                    let at = i * atom_words + self.atom_ports[atom - 1].0;
                    self.atoms[at..].as_mut_ptr().cast()
                }
                Role::Unconnected => std::ptr::null_mut(),
            };
            // SAFETY: the boxed slices never move or change size while the filter
            // lives, and the instances are dropped first (see Drop).
            unsafe { inst.connect(p.index, data) };
        }
    }

    /// The instances and controls with their values and ranges, for the log.
    pub fn describe(&self) -> &str {
        &self.text
    }

    /// Writes the current control values where every instance reads them.
    fn write_controls(&mut self) {
        let nci = self.current.len();
        if nci == 0 {
            return;
        }
        for inst in self.ctl.chunks_exact_mut(nci) {
            for (d, &v) in inst.iter_mut().zip(self.current.iter()) {
                *d = v as f32;
            }
        }
    }

    /// Runs every instance on `frames` frames of `buf` from `at`.
    fn run_part(&mut self, buf: &mut PlanarMut, at: usize, frames: usize) {
        let channels = buf.channels();
        for (i, inst) in self.instances.iter_mut().enumerate() {
            for c in 0..self.per {
                let ch = i * self.per + c;
                let dst = &mut self.audio_in[ch * CHUNK..ch * CHUNK + frames];
                if ch < channels {
                    dst.copy_from_slice(&buf.channel(ch)[at..at + frames]);
                } else {
                    dst.fill(0.0);
                }
            }
            prepare_atoms(&mut self.atoms, &self.atom_ports, i, self.atom_types);
            inst.run(frames);
            for c in 0..self.per {
                let ch = i * self.per + c;
                if ch < channels {
                    buf.channel_mut(ch)[at..at + frames]
                        .copy_from_slice(&self.audio_out[ch * CHUNK..ch * CHUNK + frames]);
                }
            }
        }
    }
}

/// The input control ports as named controls, and their first values: the defaults,
/// with the config's `controls` checked and applied.
fn configured(
    ins: &[&Port],
    controls: &BTreeMap<String, f64>,
    what: &str,
) -> Result<(NamedControls, Vec<f64>), PluginError> {
    let named = NamedControls {
        names: intern(
            &ins.iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        controls: ins
            .iter()
            .map(|p| NamedControl {
                name: intern(&p.name),
                alias: intern(&alias(&p.name)),
                min: p.min,
                max: p.max,
                integer: p.integer,
                out_of_range: intern(&format!(
                    "outside [{}, {}], the range the plugin declares",
                    p.min as f32, p.max as f32
                )),
            })
            .collect(),
    };
    let mut values: Vec<f64> = ins.iter().map(|p| p.default).collect();
    for (key, &v) in controls {
        let fail = |why: String| PluginError::Control {
            what: what.into(),
            name: key.clone(),
            why,
        };
        let Some(k) = named.controls.iter().position(|c| c.is(key)) else {
            return Err(fail(format!(
                "no such control port; it has: {}",
                named.names
            )));
        };
        let c = &named.controls[k];
        c.check(v).map_err(|e| fail(e.to_string()))?;
        values[k] = v;
    }
    Ok((named, values))
}

/// Before each run: every atom input an empty sequence, every output its capacity
/// (the host's side of LV2's atom port contract).
fn prepare_atoms(atoms: &mut [u64], ports: &[(usize, bool)], instance: usize, types: (u32, u32)) {
    let base = instance * ports.len() * (ATOM_BYTES / 8);
    for &(at, input) in ports {
        // Word 0 is the atom header (size, type), word 1 a sequence body's (unit, pad).
        let (size, kind) = if input {
            (ATOM_HEADER, types.0)
        } else {
            (ATOM_BYTES as u32 - ATOM_HEADER, types.1)
        };
        let w = &mut atoms[base + at..base + at + 2];
        w[0] = header(size, kind);
        w[1] = 0;
    }
}

/// An `LV2_Atom` header (two native-endian u32s) as one aligned word.
fn header(size: u32, kind: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&size.to_ne_bytes());
    b[4..].copy_from_slice(&kind.to_ne_bytes());
    u64::from_ne_bytes(b)
}

impl Filter for PluginFilter {
    fn process(&mut self, buf: &mut PlanarMut) {
        let total = buf.frames();
        let mut at = 0;
        while at < total {
            let mut n = (total - at).min(CHUNK);
            if self.ramp_left > 0 {
                n = n.min(RAMP_STEP_FRAMES);
                self.ramp_left -= 1;
                for k in 0..self.current.len() {
                    self.current[k] = if self.ramp_left == 0 {
                        self.target[k]
                    } else {
                        self.current[k] + self.step[k]
                    };
                }
                self.write_controls();
            }
            self.run_part(buf, at, n);
            at += n;
        }
    }

    /// Nothing: a plugin's state is its own, and `deactivate`/`activate` (the only
    /// reset either standard has) are not real-time safe. A plugin that keeps writing
    /// NaN keeps its chain's guard silencing every block.
    fn reset(&mut self) {}

    fn latency(&self) -> usize {
        match self.latency {
            Some(k) => {
                let v = self.ctl_out[k];
                if v.is_finite() && v > 0.0 {
                    v as usize
                } else {
                    0
                }
            }
            None => 0,
        }
    }

    fn set_control(&mut self, name: &str, value: f64) -> Result<(), FilterError> {
        let Some(k) = self.named.controls.iter().position(|c| c.is(name)) else {
            return Err(FilterError::UnknownControl {
                known: self.named.names,
            });
        };
        self.named.controls[k].check(value)?;
        self.target[k] = value;
        if self.named.controls[k].integer {
            self.current[k] = value;
            self.write_controls();
        }
        // Every control still moving restarts its ramp from where it is now.
        for j in 0..self.current.len() {
            self.step[j] = (self.target[j] - self.current[j]) / RAMP_STEPS as f64;
        }
        self.ramp_left = RAMP_STEPS;
        Ok(())
    }

    fn controls(&self) -> Controls {
        Controls::Named(self.named.clone())
    }
}

impl Drop for PluginFilter {
    fn drop(&mut self) {
        // Instances first: they point into the buffers.
        self.instances.clear();
    }
}
