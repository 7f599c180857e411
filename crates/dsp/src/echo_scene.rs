//! An echo-cancellation test scene and its measures (docs/dsp/echo-cancel.md): far-end
//! speech through a simulated room impulse response plus near-end speech, as a
//! microphone would pick them up; echo return loss enhancement (ERLE) after
//! convergence and how well the near-end speech survives. Offline math for tests and
//! benchmarks; nothing here runs in the cycle.

use realfft::RealFftPlanner;
use realfft::num_complex::Complex;

/// What the far end says (spoken by espeak-ng's `en-us` voice at 165 words a minute:
/// about 13 s).
pub const FAR_TEXT: &str = "The quick brown fox jumps over the lazy dog. A far end talker \
    reads a long sentence into the call, while the loudspeaker in the room plays every \
    word of it back to the microphone. Echo cancellation has to remove all of that.";

/// What the near end says (espeak-ng's `en+f3` voice at 150 words a minute: about 4 s).
pub const NEAR_TEXT: &str = "Hello, this is the near end talker. I can hear you well.";

/// The room in a PulseAudio-protocol server's graph, as `pactl load-module` argument
/// lists in load order (the same on quaverd and PulseAudio): the scene file is played
/// into the null sink `scene`, whose left channel is the far end `far` and right channel
/// the microphone `mic`; module-echo-cancel makes the source `ec` over `mic` and the
/// sink `ec_sink` over the speakers `spk`; `far` is looped into `ec_sink`. The
/// canceller's `aec_args` are PulseAudio's webrtc settings (quaverd accepts and ignores
/// them).
pub const ROOM_MODULES: &[&[&str]] = &[
    &[
        "module-null-sink",
        "sink_name=scene",
        "channels=2",
        "rate=48000",
    ],
    &[
        "module-null-sink",
        "sink_name=spk",
        "channels=1",
        "rate=48000",
    ],
    &[
        "module-remap-source",
        "source_name=far",
        "master=scene.monitor",
        "channel_map=mono",
        "master_channel_map=front-left",
    ],
    &[
        "module-remap-source",
        "source_name=mic",
        "master=scene.monitor",
        "channel_map=mono",
        "master_channel_map=front-right",
    ],
    &[
        "module-echo-cancel",
        "source_master=mic",
        "sink_master=spk",
        "source_name=ec",
        "sink_name=ec_sink",
        "aec_method=webrtc",
        "aec_args=\"noise_suppression=0 analog_gain_control=0 digital_gain_control=0 extended_filter=1\"",
    ],
    &[
        "module-loopback",
        "source=far",
        "sink=ec_sink",
        "latency_msec=20",
    ],
];

/// The source [`ROOM_MODULES`] cancels the echo into.
pub const ROOM_SOURCE: &str = "ec";

/// Where the scene's parts lie, in seconds from its start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    /// The far end talks from 0 to here.
    pub far_end: f64,
    /// The canceller is given until here to converge; ERLE is measured from here to
    /// `near_start` (far end alone).
    pub converged: f64,
    /// The near end starts talking here (double talk until `far_end`).
    pub near_start: f64,
    /// The scene ends here (near end alone from `far_end` plus the room's tail).
    pub total: f64,
    /// Delay of the echo path before the room's response (the speaker's and the
    /// microphone's buffers), in seconds. The layouts take 120 ms: room for the
    /// loopback that plays the far end in the test's and the benchmark's graph (one
    /// quantum in quaverd, a few tens of ms in PulseAudio), so the echo comes after the
    /// reference on both.
    pub path_delay: f64,
}

impl Layout {
    /// A short scene for the test suite: 2 s to converge, 1.5 s of far end alone
    /// measured, 1 s of double talk, 1.5 s of near end alone.
    pub fn short() -> Self {
        Layout {
            far_end: 4.5,
            converged: 2.0,
            near_start: 3.5,
            total: 6.0,
            path_delay: 0.120,
        }
    }

    /// The benchmark's smoke run (`--quick`): 1 s to converge, 1 s measured, 0.5 s of
    /// double talk, 0.4 s of near end alone. Too short for figures.
    pub fn tiny() -> Self {
        Layout {
            far_end: 2.5,
            converged: 1.0,
            near_start: 2.0,
            total: 3.2,
            path_delay: 0.120,
        }
    }

    /// The benchmark's scene: 4 s to converge, 4 s measured, 2 s of double talk,
    /// 3 s of near end alone.
    pub fn long() -> Self {
        Layout {
            far_end: 10.0,
            converged: 4.0,
            near_start: 8.0,
            total: 13.0,
            path_delay: 0.120,
        }
    }
}

/// Seconds after the far end stops before the near-end-alone window starts: the
/// room's tail has died away by then.
const TAIL: f64 = 0.3;

/// A rendered scene at one rate, every signal as long as the scene.
#[derive(Debug, Clone)]
pub struct Scene {
    /// Sample rate (Hz).
    pub rate: u32,
    /// Where its parts lie.
    pub layout: Layout,
    /// What the far end says: the loudspeaker's signal and the canceller's reference.
    pub far: Vec<f32>,
    /// The far end's echo at the microphone (room response, path delay).
    pub echo: Vec<f32>,
    /// The near end's speech at the microphone.
    pub near: Vec<f32>,
    /// The microphone: echo + near + a low noise floor.
    pub mic: Vec<f32>,
}

/// A synthetic room impulse response: a direct path, a few early reflections and an
/// exponentially decaying diffuse tail with reverberation time `rt60` (s),
/// deterministic for a `seed`. Peak 1.
pub fn room_impulse_response(rate: u32, rt60: f64, seed: u64) -> Vec<f32> {
    let len = (rate as f64 * rt60.min(1.0)) as usize;
    let mut h = vec![0.0f32; len.max(16)];
    let mut rng = Lcg(seed);
    // Direct path after ~1 m of air, then reflections off nearby surfaces.
    let ms = |t: f64| (t * rate as f64 / 1000.0) as usize;
    h[ms(3.0)] = 1.0;
    for (t, g) in [(5.5, -0.55), (8.2, 0.4), (11.7, -0.32), (15.1, 0.25)] {
        h[ms(t)] += g;
    }
    // -60 dB over rt60: amplitude decays by 10^-3 in rt60 seconds.
    let decay = (-3.0 * std::f64::consts::LN_10 / (rt60 * rate as f64)).exp();
    let mut env = 0.2;
    for x in h.iter_mut().skip(ms(4.0)) {
        *x += (env * rng.uniform()) as f32;
        env *= decay;
    }
    h
}

/// Linear convolution of `x` with `h` (FFT, one block), `x.len() + h.len() - 1` long.
pub fn convolve(x: &[f32], h: &[f32]) -> Vec<f32> {
    if x.is_empty() || h.is_empty() {
        return Vec::new();
    }
    let out_len = x.len() + h.len() - 1;
    let n = out_len.next_power_of_two();
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(n);
    let inv = planner.plan_fft_inverse(n);
    let spectrum = |s: &[f32]| {
        let mut buf = vec![0.0f64; n];
        for (b, v) in buf.iter_mut().zip(s) {
            *b = *v as f64;
        }
        let mut spec = fwd.make_output_vec();
        fwd.process(&mut buf, &mut spec)
            .expect("sizes from the planner");
        spec
    };
    let a = spectrum(x);
    let b = spectrum(h);
    let mut prod: Vec<Complex<f64>> = a.iter().zip(&b).map(|(p, q)| p * q).collect();
    // The inverse wants purely real first and last bins; they are, up to rounding.
    prod[0].im = 0.0;
    prod[n / 2].im = 0.0;
    let mut out = inv.make_output_vec();
    inv.process(&mut prod, &mut out)
        .expect("sizes from the planner");
    out.truncate(out_len);
    out.iter().map(|v| (*v / n as f64) as f32).collect()
}

/// Root mean square of `x` (0 for an empty slice).
pub fn rms(x: &[f32]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
}

impl Scene {
    /// Renders the scene from two mono speech recordings at `rate`: the far end is
    /// cut or padded to `layout.far_end`, the near end starts at `layout.near_start`;
    /// the echo is the far end through [`room_impulse_response`] (RT60 0.25 s) after
    /// `layout.path_delay`, levelled so echo and near end are equally loud at the mic.
    pub fn render(rate: u32, far_speech: &[f32], near_speech: &[f32], layout: Layout) -> Scene {
        let at = |t: f64| (t * rate as f64) as usize;
        let total = at(layout.total);
        let mut far = vec![0.0f32; total];
        let n = at(layout.far_end).min(far_speech.len()).min(total);
        far[..n].copy_from_slice(&far_speech[..n]);
        let peak = far.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-9);
        far.iter_mut().for_each(|v| *v *= 0.5 / peak);
        let h = room_impulse_response(rate, 0.25, 36);
        let wet = convolve(&far, &h);
        let mut echo = vec![0.0f32; total];
        let d = at(layout.path_delay);
        for (i, e) in echo.iter_mut().enumerate().skip(d) {
            *e = wet.get(i - d).copied().unwrap_or(0.0);
        }
        let mut near = vec![0.0f32; total];
        let s = at(layout.near_start);
        let m = near_speech.len().min(total.saturating_sub(s));
        near[s..s + m].copy_from_slice(&near_speech[..m]);
        // Equal loudness at the mic, each measured where it is active: echo at about
        // -20 dBFS RMS, like speech from a laptop's speakers at a call's level.
        let echo_rms = rms(&echo[..at(layout.far_end)]).max(1e-9);
        let near_rms = rms(&near[s..s + m]).max(1e-9);
        echo.iter_mut().for_each(|v| *v *= (0.1 / echo_rms) as f32);
        near.iter_mut().for_each(|v| *v *= (0.1 / near_rms) as f32);
        let mut rng = Lcg(7);
        // A noise floor 60 dB under the speech, as a quiet room's.
        let mic = echo
            .iter()
            .zip(&near)
            .map(|(e, n)| e + n + (1e-4 * rng.uniform()) as f32)
            .collect();
        Scene {
            rate,
            layout,
            far,
            echo,
            near,
            mic,
        }
    }

    fn span(&self, from: f64, to: f64) -> std::ops::Range<usize> {
        let at = |t: f64| ((t * self.rate as f64) as usize).min(self.mic.len());
        at(from)..at(to)
    }

    /// Where the scene starts in `output` (a recording of the canceller's output that
    /// began before the scene): the lag at which `output` best matches the near-end
    /// speech, which a canceller passes on. `None` if `output` is shorter than the scene.
    pub fn find_in(&self, output: &[f32]) -> Option<usize> {
        if output.len() < self.mic.len() {
            return None;
        }
        // Correlate against the near end's own part only: it is what survives.
        let near = &self.near[self.span(self.layout.near_start, self.layout.total)];
        let lead = self.span(0.0, self.layout.near_start).end;
        let corr = convolve(output, &near.iter().rev().copied().collect::<Vec<_>>());
        // corr[k + near.len() - 1] = sum output[k + i] near[i]
        let lags = output.len() - self.mic.len() + 1;
        (0..lags)
            .map(|lag| (lag, corr[lag + lead + near.len() - 1]))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(lag, _)| lag)
    }

    /// Measures `out`, the canceller's output for this scene sample-aligned with it
    /// (at least as long as the scene).
    pub fn measure(&self, out: &[f32]) -> Measures {
        let l = &self.layout;
        let erle = self.span(l.converged, l.near_start);
        let double = self.span(l.near_start, l.far_end);
        let single = self.span(l.far_end + TAIL, l.total);
        let db = |a: f64, b: f64| 20.0 * (a.max(1e-12) / b.max(1e-12)).log10();
        Measures {
            erle_db: db(rms(&self.mic[erle.clone()]), rms(&out[erle])),
            near_kept_single: self.kept(out, single.clone()),
            near_kept_double: self.kept(out, double),
            near_level_db: db(rms(&out[single.clone()]), rms(&self.near[single])),
        }
    }
}

impl Scene {
    /// How much of the near end `out` keeps over `span`: the best correlation of the
    /// two within ±20 ms (a canceller may delay its output by a block; its high-pass
    /// filter shifts the lowest frequencies' phase, which the lag search absorbs too).
    fn kept(&self, out: &[f32], span: std::ops::Range<usize>) -> f64 {
        let max_lag = self.rate as usize / 50;
        // Short of the end by the largest lag, so every lag fits in a scene-long output.
        let near = &self.near[span.start..span.end.saturating_sub(max_lag).max(span.start)];
        (0..=2 * max_lag)
            .filter_map(|k| {
                let start = (span.start + k).checked_sub(max_lag)?;
                let o = out.get(start..start + near.len())?;
                Some(correlation(o, near))
            })
            .fold(0.0, f64::max)
    }
}

/// What [`Scene::measure`] found.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Measures {
    /// Echo return loss enhancement after convergence, far end alone: the mic's level
    /// over the output's (dB).
    pub erle_db: f64,
    /// Correlation of the output with the clean near end while it talks alone (1: kept
    /// exactly, up to a gain).
    pub near_kept_single: f64,
    /// The same during double talk.
    pub near_kept_double: f64,
    /// The near end's level in the output against the clean near end's, talking alone
    /// (dB; 0: untouched).
    pub near_level_db: f64,
}

/// Pearson correlation of two equally long signals (0 if either is silent).
pub fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    if n == 0 {
        return 0.0;
    }
    let mean = |x: &[f32]| x[..n].iter().map(|v| *v as f64).sum::<f64>() / n as f64;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (x, y) = (a[i] as f64 - ma, b[i] as f64 - mb);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa * bb).sqrt()
}

/// A small deterministic generator: the scene is the same on every machine.
struct Lcg(u64);

impl Lcg {
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convolution_matches_direct_sum() {
        let x: Vec<f32> = (0..100).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let h = [0.5f32, -0.25, 0.0, 1.0];
        let y = convolve(&x, &h);
        for (n, v) in y.iter().enumerate() {
            let direct: f32 = (0..h.len())
                .filter(|k| n >= *k && n - k < x.len())
                .map(|k| h[k] * x[n - k])
                .sum();
            assert!((v - direct).abs() < 1e-4, "at {n}: {v} vs {direct}");
        }
    }

    #[test]
    fn scene_measures_an_ideal_and_a_useless_canceller() {
        let rate = 16_000;
        let speech = |f: f64| -> Vec<f32> {
            (0..rate as usize * 10)
                .map(|i| {
                    let t = i as f64 / rate as f64;
                    ((f * t * std::f64::consts::TAU).sin() * (3.0 * t).sin().abs()) as f32
                })
                .collect()
        };
        let s = Scene::render(rate, &speech(300.0), &speech(510.0), Layout::short());
        // Doing nothing: no enhancement, and the near end is mixed with echo.
        let none = s.measure(&s.mic);
        assert!(none.erle_db.abs() < 0.5, "{none:?}");
        // Removing the echo exactly: ERLE up to the noise floor, near end intact.
        let ideal: Vec<f32> = s.mic.iter().zip(&s.echo).map(|(m, e)| m - e).collect();
        let m = s.measure(&ideal);
        assert!(m.erle_db > 50.0, "{m:?}");
        assert!(
            m.near_kept_single > 0.99 && m.near_kept_double > 0.99,
            "{m:?}"
        );
        // Found again in a recording that starts 1234 samples early.
        let mut rec = vec![0.0f32; 1234];
        rec.extend_from_slice(&ideal);
        rec.extend(std::iter::repeat_n(0.0, 500));
        assert_eq!(s.find_in(&rec), Some(1234));
    }
}
