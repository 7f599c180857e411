//! Channel positions, channel maps and up/down-mix matrices.

use crate::buffer::{Planar, PlanarMut};
use crate::mix;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where a channel is meant to be heard; links and mixing match channels by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ChannelPosition {
    /// A single channel meant for every speaker.
    Mono,
    /// Front left.
    FL,
    /// Front right.
    FR,
    /// Front centre.
    FC,
    /// Low-frequency effects.
    LFE,
    /// Rear left.
    RL,
    /// Rear right.
    RR,
    /// Side left.
    SL,
    /// Side right.
    SR,
    /// Rear centre.
    RC,
    /// An auxiliary channel with no spatial meaning.
    Aux(u16),
}

impl ChannelPosition {
    /// The short name used on the command line and in port names ("FL", "AUX3").
    pub fn name(&self) -> String {
        match self {
            ChannelPosition::Mono => "MONO".into(),
            ChannelPosition::FL => "FL".into(),
            ChannelPosition::FR => "FR".into(),
            ChannelPosition::FC => "FC".into(),
            ChannelPosition::LFE => "LFE".into(),
            ChannelPosition::RL => "RL".into(),
            ChannelPosition::RR => "RR".into(),
            ChannelPosition::SL => "SL".into(),
            ChannelPosition::SR => "SR".into(),
            ChannelPosition::RC => "RC".into(),
            ChannelPosition::Aux(n) => format!("AUX{n}"),
        }
    }
}

impl fmt::Display for ChannelPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Error for an unknown channel position or layout name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown channel position or layout '{0}'")]
pub struct UnknownChannel(pub String);

impl FromStr for ChannelPosition {
    type Err = UnknownChannel;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let u = s.to_ascii_uppercase();
        Ok(match u.as_str() {
            "MONO" => ChannelPosition::Mono,
            "FL" => ChannelPosition::FL,
            "FR" => ChannelPosition::FR,
            "FC" => ChannelPosition::FC,
            "LFE" => ChannelPosition::LFE,
            "RL" => ChannelPosition::RL,
            "RR" => ChannelPosition::RR,
            "SL" => ChannelPosition::SL,
            "SR" => ChannelPosition::SR,
            "RC" => ChannelPosition::RC,
            _ => match u.strip_prefix("AUX").and_then(|n| n.parse().ok()) {
                Some(n) => ChannelPosition::Aux(n),
                None => return Err(UnknownChannel(s.to_string())),
            },
        })
    }
}

/// An ordered list of channel positions describing an interleaved frame or a node's ports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelMap(pub Vec<ChannelPosition>);

impl ChannelMap {
    /// One channel.
    pub fn mono() -> Self {
        ChannelMap(vec![ChannelPosition::Mono])
    }
    /// Front left and right.
    pub fn stereo() -> Self {
        use ChannelPosition::*;
        ChannelMap(vec![FL, FR])
    }
    /// The usual layout for a channel count (1 mono, 2 stereo, 3 2.1, 4 4.0, 6 5.1, 8 7.1,
    /// anything else auxiliary channels).
    pub fn default_for(channels: usize) -> Self {
        use ChannelPosition::*;
        match channels {
            1 => Self::mono(),
            2 => Self::stereo(),
            3 => ChannelMap(vec![FL, FR, LFE]),
            4 => ChannelMap(vec![FL, FR, RL, RR]),
            6 => ChannelMap(vec![FL, FR, FC, LFE, RL, RR]),
            8 => ChannelMap(vec![FL, FR, FC, LFE, RL, RR, SL, SR]),
            n => ChannelMap((0..n as u16).map(Aux).collect()),
        }
    }
    /// Number of channels.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True for a map with no channels (never valid for a stream).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The positions in order.
    pub fn positions(&self) -> &[ChannelPosition] {
        &self.0
    }
}

impl fmt::Display for ChannelMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(|p| p.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for ChannelMap {
    type Err = UnknownChannel;
    /// Parses a layout name ("mono", "stereo", "2.1", "4.0", "5.1", "7.1") or a
    /// comma-separated list of positions ("FL,FR,LFE").
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "mono" => Self::mono(),
            "stereo" => Self::stereo(),
            "2.1" => Self::default_for(3),
            "4.0" | "quad" => Self::default_for(4),
            "5.1" => Self::default_for(6),
            "7.1" => Self::default_for(8),
            _ => ChannelMap(
                s.split(',')
                    .map(|p| p.trim().parse())
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        })
    }
}

/// A precomputed up/down-mix matrix from one channel map to another.
///
/// Rules, applied in order for each pair of layouts:
/// 1. A position present on both sides passes through at 1.0.
/// 2. A mono output with no mono input averages every input channel except LFE
///    (front, side and rear alike, so nothing the source carries is lost).
/// 3. Inputs whose position the output lacks are folded in: Mono goes to FL, FR and
///    FC at 1.0 each (as PulseAudio does); FC to FL/FR at 0.707; rear and side
///    channels to the other of side/rear on the same side if the output has it,
///    else to FL/FR at 0.707; RC to the rear (else side, else front) pair at 0.707;
///    FL/FR to FC at 0.707 when the output has a centre but no left/right. LFE is
///    dropped. Unmatched Aux inputs go to unmatched Aux outputs in order.
/// 4. Rows that received folded channels are scaled so their coefficients sum to at
///    most 1, so a downmix cannot clip what the source did not clip.
/// 5. If nothing matched at all (say Aux channels into a stereo sink), channels map
///    by index.
///
/// Outputs with no source (e.g. centre and rears in a stereo→5.1 upmix) stay silent.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelMixer {
    inputs: usize,
    outputs: usize,
    /// Row-major `outputs × inputs` coefficients.
    matrix: Vec<f32>,
    /// Non-zero terms `(input, coefficient)`, grouped by output row.
    terms: Vec<(usize, f32)>,
    /// `terms[row_start[o]..row_start[o + 1]]` feed output `o`.
    row_start: Vec<usize>,
    identity: bool,
}

/// −3 dB: the usual weight for folding one channel into two.
const FOLD: f32 = std::f32::consts::FRAC_1_SQRT_2;

impl ChannelMixer {
    /// Builds the matrix that mixes `from` into `to` (control thread: allocates).
    pub fn new(from: &ChannelMap, to: &ChannelMap) -> ChannelMixer {
        let matrix = Self::build_matrix(from.positions(), to.positions());
        Self::from_matrix(from.len(), to.len(), matrix)
    }

    /// Builds a mixer from an explicit row-major `outputs × inputs` matrix, for
    /// callers with their own rules (panning, custom routing).
    pub fn from_matrix(inputs: usize, outputs: usize, matrix: Vec<f32>) -> ChannelMixer {
        assert_eq!(matrix.len(), inputs * outputs, "matrix size");
        let mut terms = Vec::new();
        let mut row_start = Vec::with_capacity(outputs + 1);
        for o in 0..outputs {
            row_start.push(terms.len());
            for i in 0..inputs {
                let c = matrix[o * inputs + i];
                if c != 0.0 {
                    terms.push((i, c));
                }
            }
        }
        row_start.push(terms.len());
        let identity = inputs == outputs
            && (0..outputs).all(|o| {
                (0..inputs).all(|i| matrix[o * inputs + i] == if o == i { 1.0 } else { 0.0 })
            });
        ChannelMixer {
            inputs,
            outputs,
            matrix,
            terms,
            row_start,
            identity,
        }
    }

    fn build_matrix(inp: &[ChannelPosition], out: &[ChannelPosition]) -> Vec<f32> {
        use ChannelPosition::*;
        let (ni, no) = (inp.len(), out.len());
        let mut m = vec![0.0f32; ni * no];
        let out_idx = |p: ChannelPosition| out.iter().position(|&q| q == p);
        let has_out = |p: ChannelPosition| out.contains(&p);
        let mut folded = vec![false; no];

        // 1. Same position passes through.
        for (o, &po) in out.iter().enumerate() {
            for (i, &pi) in inp.iter().enumerate() {
                if po == pi {
                    m[o * ni + i] = 1.0;
                }
            }
        }

        // 2. Mono output averages everything but LFE.
        if let Some(o) = out_idx(Mono)
            && !inp.contains(&Mono)
        {
            let mut srcs: Vec<usize> = (0..ni).filter(|&i| inp[i] != LFE).collect();
            if srcs.is_empty() {
                srcs = (0..ni).collect();
            }
            let w = 1.0 / srcs.len() as f32;
            for i in srcs {
                m[o * ni + i] = w;
            }
        }

        // 3. Fold inputs the output has no place for.
        let mut aux_out = out
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, Aux(_)) && !inp.contains(p))
            .map(|(o, _)| o);
        for (i, &pi) in inp.iter().enumerate() {
            if has_out(pi) {
                continue;
            }
            let mut add = |p: ChannelPosition, w: f32| -> bool {
                match out_idx(p) {
                    Some(o) => {
                        m[o * ni + i] += w;
                        folded[o] = true;
                        true
                    }
                    None => false,
                }
            };
            // Adds to both members of a pair if the output has at least one of them.
            let mut pair = |l: ChannelPosition, r: ChannelPosition, w: f32| -> bool {
                let a = add(l, w);
                let b = add(r, w);
                a || b
            };
            match pi {
                Mono => {
                    pair(FL, FR, 1.0);
                    add(FC, 1.0);
                }
                FC => {
                    pair(FL, FR, FOLD);
                }
                FL | FR => {
                    add(FC, FOLD);
                }
                RL | SL => {
                    let other = if pi == RL { SL } else { RL };
                    if !add(other, FOLD) {
                        add(FL, FOLD);
                    }
                }
                RR | SR => {
                    let other = if pi == RR { SR } else { RR };
                    if !add(other, FOLD) {
                        add(FR, FOLD);
                    }
                }
                RC => {
                    if !pair(RL, RR, FOLD) && !pair(SL, SR, FOLD) {
                        pair(FL, FR, 0.5);
                    }
                }
                LFE => {}
                Aux(_) => {
                    if let Some(o) = aux_out.next() {
                        m[o * ni + i] = 1.0;
                    }
                }
            }
        }

        // 4. Normalise downmixed rows so they cannot clip.
        for o in (0..no).filter(|&o| folded[o]) {
            let row = &mut m[o * ni..(o + 1) * ni];
            let sum: f32 = row.iter().map(|c| c.abs()).sum();
            if sum > 1.0 {
                row.iter_mut().for_each(|c| *c /= sum);
            }
        }

        // 5. Unrelated layouts map by index rather than going silent.
        if m.iter().all(|&c| c == 0.0) {
            for k in 0..ni.min(no) {
                m[k * ni + k] = 1.0;
            }
        }
        m
    }

    /// Number of input channels.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Number of output channels.
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// The weight of input `input` in output `output`.
    pub fn coefficient(&self, output: usize, input: usize) -> f32 {
        self.matrix[output * self.inputs + input]
    }

    /// True when the mix is a plain copy, so the caller may skip it entirely.
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    /// Mixes `src` into `dst` (overwriting it). Panics unless the channel counts match
    /// the maps and `dst.frames() == src.frames()`. Never allocates.
    pub fn process(&self, src: Planar, dst: &mut PlanarMut) {
        assert_eq!(src.channels(), self.inputs, "ChannelMixer: input channels");
        assert_eq!(
            dst.channels(),
            self.outputs,
            "ChannelMixer: output channels"
        );
        assert_eq!(src.frames(), dst.frames(), "ChannelMixer: frames");
        for o in 0..self.outputs {
            let out = dst.channel_mut(o);
            let terms = &self.terms[self.row_start[o]..self.row_start[o + 1]];
            match terms.split_first() {
                None => out.fill(0.0),
                Some((&(i, c), rest)) => {
                    if c == 1.0 {
                        out.copy_from_slice(src.channel(i));
                    } else {
                        out.fill(0.0);
                        mix::mix_into_gain(out, src.channel(i), c);
                    }
                    for &(i, c) in rest {
                        if c == 1.0 {
                            mix::mix_into(out, src.channel(i));
                        } else {
                            mix::mix_into_gain(out, src.channel(i), c);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::PlanarBuf;
    use ChannelPosition::*;

    fn layouts() -> Vec<(&'static str, ChannelMap)> {
        ["mono", "stereo", "2.1", "4.0", "5.1", "7.1"]
            .into_iter()
            .map(|n| (n, n.parse().unwrap()))
            .collect()
    }

    fn coef(
        m: &ChannelMixer,
        from: &ChannelMap,
        to: &ChannelMap,
        o: ChannelPosition,
        i: ChannelPosition,
    ) -> f32 {
        let oi = to.0.iter().position(|&p| p == o).unwrap();
        let ii = from.0.iter().position(|&p| p == i).unwrap();
        m.coefficient(oi, ii)
    }

    #[test]
    fn parse_and_display() {
        assert_eq!("fl".parse::<ChannelPosition>().unwrap(), FL);
        assert_eq!("AUX12".parse::<ChannelPosition>().unwrap(), Aux(12));
        assert!("XY".parse::<ChannelPosition>().is_err());
        let m: ChannelMap = "FL,FR,LFE".parse().unwrap();
        assert_eq!(m.to_string(), "FL,FR,LFE");
        assert_eq!(
            "5.1".parse::<ChannelMap>().unwrap(),
            ChannelMap::default_for(6)
        );
    }

    #[test]
    fn every_layout_pair_is_sane() {
        for (fname, from) in layouts() {
            for (tname, to) in layouts() {
                let m = ChannelMixer::new(&from, &to);
                let pair = format!("{fname} -> {tname}");
                assert_eq!(m.is_identity(), fname == tname, "{pair}");
                for o in 0..to.len() {
                    let sum: f32 = (0..from.len()).map(|i| m.coefficient(o, i)).sum();
                    assert!(sum <= 1.0 + 1e-6, "{pair}: row {o} sums to {sum}");
                    for i in 0..from.len() {
                        assert!(m.coefficient(o, i) >= 0.0);
                    }
                }
                // Every non-LFE input is heard somewhere.
                for (i, p) in from.0.iter().enumerate() {
                    let heard = (0..to.len()).any(|o| m.coefficient(o, i) > 0.0);
                    assert!(heard || *p == LFE, "{pair}: {p} is dropped");
                }
                // Shared positions pass straight through unless the row is a downmix.
                for (o, po) in to.0.iter().enumerate() {
                    if let Some(i) = from.0.iter().position(|p| p == po) {
                        let others: f32 = (0..from.len())
                            .filter(|&k| k != i)
                            .map(|k| m.coefficient(o, k))
                            .sum();
                        if others == 0.0 {
                            assert_eq!(m.coefficient(o, i), 1.0, "{pair}: {po}");
                        }
                    }
                }
                // LFE never leaks into other speakers.
                if let Some(i) = from.0.iter().position(|p| *p == LFE) {
                    for (o, po) in to.0.iter().enumerate() {
                        if *po != LFE {
                            assert_eq!(m.coefficient(o, i), 0.0, "{pair}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn specific_matrices() {
        let l: std::collections::HashMap<_, _> = layouts().into_iter().collect();
        let (mono, stereo, l21, quad, l51, l71) = (
            &l["mono"],
            &l["stereo"],
            &l["2.1"],
            &l["4.0"],
            &l["5.1"],
            &l["7.1"],
        );

        // Mono up to front speakers at full level, like PulseAudio.
        let m = ChannelMixer::new(mono, stereo);
        assert_eq!((m.coefficient(0, 0), m.coefficient(1, 0)), (1.0, 1.0));
        let m = ChannelMixer::new(mono, l51);
        for (p, c) in [
            (FL, 1.0),
            (FR, 1.0),
            (FC, 1.0),
            (LFE, 0.0),
            (RL, 0.0),
            (RR, 0.0),
        ] {
            assert_eq!(coef(&m, mono, l51, p, Mono), c, "{p}");
        }

        // Down to mono averages.
        let m = ChannelMixer::new(stereo, mono);
        assert_eq!((m.coefficient(0, 0), m.coefficient(0, 1)), (0.5, 0.5));
        let m = ChannelMixer::new(l21, mono);
        assert_eq!(coef(&m, l21, mono, Mono, FL), 0.5);
        assert_eq!(coef(&m, l21, mono, Mono, LFE), 0.0);
        let m = ChannelMixer::new(l51, mono);
        assert_eq!(coef(&m, l51, mono, Mono, FC), 0.2);
        assert_eq!(coef(&m, l51, mono, Mono, LFE), 0.0);

        // 5.1 -> stereo: FL + 0.707 FC + 0.707 RL, normalised.
        let m = ChannelMixer::new(l51, stereo);
        let norm = 1.0 + 2.0 * FOLD;
        for (p, c) in [
            (FL, 1.0 / norm),
            (FC, FOLD / norm),
            (RL, FOLD / norm),
            (FR, 0.0),
            (RR, 0.0),
            (LFE, 0.0),
        ] {
            assert!((coef(&m, l51, stereo, FL, p) - c).abs() < 1e-6, "{p}");
        }
        for (p, c) in [
            (FR, 1.0 / norm),
            (FC, FOLD / norm),
            (RR, FOLD / norm),
            (FL, 0.0),
        ] {
            assert!((coef(&m, l51, stereo, FR, p) - c).abs() < 1e-6, "{p}");
        }

        // 7.1 -> stereo folds both side and rear.
        let m = ChannelMixer::new(l71, stereo);
        let norm = 1.0 + 3.0 * FOLD;
        for (p, c) in [
            (FL, 1.0 / norm),
            (FC, FOLD / norm),
            (RL, FOLD / norm),
            (SL, FOLD / norm),
            (SR, 0.0),
        ] {
            assert!((coef(&m, l71, stereo, FL, p) - c).abs() < 1e-6, "{p}");
        }

        // Stereo up: fronts straight, everything else silent.
        for to in [l21, quad, l51, l71] {
            let m = ChannelMixer::new(stereo, to);
            for (o, p) in to.0.iter().enumerate() {
                let want = match p {
                    FL => [1.0, 0.0],
                    FR => [0.0, 1.0],
                    _ => [0.0, 0.0],
                };
                assert_eq!([m.coefficient(o, 0), m.coefficient(o, 1)], want, "{p}");
            }
        }

        // 2.1 -> stereo just drops LFE; 5.1 -> 7.1 and 4.0 -> 5.1 pass through.
        let m = ChannelMixer::new(l21, stereo);
        assert_eq!(coef(&m, l21, stereo, FL, FL), 1.0);
        assert_eq!(coef(&m, l21, stereo, FL, LFE), 0.0);
        let m = ChannelMixer::new(l51, l71);
        for p in [FL, FR, FC, LFE, RL, RR] {
            assert_eq!(coef(&m, l51, l71, p, p), 1.0);
        }
        let m = ChannelMixer::new(quad, l51);
        for p in [FL, FR, RL, RR] {
            assert_eq!(coef(&m, quad, l51, p, p), 1.0);
        }
        assert_eq!(coef(&m, quad, l51, FC, FL), 0.0);

        // 7.1 -> 5.1 folds the sides into the rears.
        let m = ChannelMixer::new(l71, l51);
        let norm = 1.0 + FOLD;
        assert!((coef(&m, l71, l51, RL, RL) - 1.0 / norm).abs() < 1e-6);
        assert!((coef(&m, l71, l51, RL, SL) - FOLD / norm).abs() < 1e-6);
        assert_eq!(coef(&m, l71, l51, FL, FL), 1.0);
        assert_eq!(coef(&m, l71, l51, FC, FC), 1.0);
    }

    #[test]
    fn aux_and_unrelated_layouts() {
        let aux4 = ChannelMap::default_for(5); // AUX0..AUX4
        let aux_other = ChannelMap(vec![Aux(10), Aux(11)]);
        let m = ChannelMixer::new(&aux4, &aux_other);
        assert_eq!(m.coefficient(0, 0), 1.0);
        assert_eq!(m.coefficient(1, 1), 1.0);
        assert_eq!(m.coefficient(1, 2), 0.0);
        // Shared Aux positions match by position first.
        let m = ChannelMixer::new(
            &ChannelMap(vec![Aux(1), Aux(0)]),
            &ChannelMap(vec![Aux(0), Aux(1)]),
        );
        assert_eq!((m.coefficient(0, 1), m.coefficient(1, 0)), (1.0, 1.0));
        assert!(!m.is_identity());
        // Aux into stereo maps by index instead of going silent.
        let m = ChannelMixer::new(&ChannelMap::default_for(5), &ChannelMap::stereo());
        assert_eq!((m.coefficient(0, 0), m.coefficient(1, 1)), (1.0, 1.0));
    }

    #[test]
    fn process_matches_matrix() {
        let mut x = 12345u32;
        for (_, from) in layouts() {
            for (_, to) in layouts() {
                let m = ChannelMixer::new(&from, &to);
                let frames = 77;
                let mut src = PlanarBuf::new(from.len(), 128);
                for ch in 0..from.len() {
                    for s in src.channel_mut(ch) {
                        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        *s = (x >> 8) as f32 / (1 << 23) as f32 - 1.0;
                    }
                }
                let mut dst = PlanarBuf::new(to.len(), 128);
                dst.channel_mut(0).fill(9.0); // stale data must be overwritten
                m.process(src.view(frames), &mut dst.view_mut(frames));
                for o in 0..to.len() {
                    for f in 0..frames {
                        let want: f32 = (0..from.len())
                            .map(|i| m.coefficient(o, i) * src.channel(i)[f])
                            .sum();
                        assert!((dst.channel(o)[f] - want).abs() < 1e-6);
                    }
                    if m.is_identity() {
                        assert_eq!(&dst.channel(o)[..frames], &src.channel(o)[..frames]);
                    }
                }
            }
        }
    }
}
