//! The filters against answers worked out independently: biquads against the analog
//! prototypes the cookbook maps through the bilinear transform, the convolver against
//! a direct convolution in f64, gain changes against the step a ramp allows, and the
//! chain's guard against NaN and infinity.

use quaver_dsp::PlanarBuf;
use quaver_dsp::filter::{
    Biquad, BiquadKind, BiquadParams, Convolver, Delay, Filter, FilterChain, FilterError, Gain,
    Limiter,
};
use std::f64::consts::PI;

// In this test binary rather than one of its own: one link fewer in CI.
#[path = "filters/mixer_crossover.rs"]
mod mixer_crossover;

const RATE: f64 = 48_000.0;
/// Block sizes that change from call to call, some larger than a convolver partition.
const BLOCKS: [usize; 9] = [1, 7, 64, 441, 1024, 5, 2000, 128, 300];

/// Runs `input` (planar, one Vec per channel) through `f` in blocks of varying size.
fn run(f: &mut dyn FnMut(&mut quaver_dsp::PlanarMut), input: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let channels = input.len();
    let len = input[0].len();
    let mut buf = PlanarBuf::new(channels, 2000);
    let mut out = vec![Vec::with_capacity(len); channels];
    let mut start = 0;
    for &size in BLOCKS.iter().cycle() {
        if start >= len {
            break;
        }
        let n = size.min(len - start);
        for (ch, x) in input.iter().enumerate() {
            for (d, s) in buf.channel_mut(ch)[..n].iter_mut().zip(&x[start..]) {
                *d = *s as f32;
            }
        }
        f(&mut buf.view_mut(n));
        for (ch, o) in out.iter_mut().enumerate() {
            o.extend(buf.channel(ch)[..n].iter().map(|&x| x as f64));
        }
        start += n;
    }
    out
}

#[derive(Clone, Copy)]
struct Cx(f64, f64);
impl Cx {
    fn mul(self, o: Cx) -> Cx {
        Cx(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
    fn div(self, o: Cx) -> Cx {
        let d = o.0 * o.0 + o.1 * o.1;
        Cx(
            (self.0 * o.0 + self.1 * o.1) / d,
            (self.1 * o.0 - self.0 * o.1) / d,
        )
    }
    fn abs(self) -> f64 {
        self.0.hypot(self.1)
    }
}

/// The analog prototype of `p` at `f` Hz, with the bilinear transform's frequency
/// warping (s = j·tan(πf/fs)/tan(πf0/fs)), as the cookbook derives its designs.
fn analytic(p: &BiquadParams, f: f64) -> f64 {
    let w = (PI * f / RATE).tan() / (PI * p.freq / RATE).tan();
    // A polynomial c2·s² + c1·s + c0 at s = jw.
    let poly = |c2: f64, c1: f64, c0: f64| Cx(c0 - c2 * w * w, c1 * w);
    let a = 10f64.powf(p.gain_db / 40.0);
    let q = p.q;
    let den_std = poly(1.0, 1.0 / q, 1.0);
    let h = match p.kind {
        BiquadKind::LowPass => poly(0.0, 0.0, 1.0).div(den_std),
        BiquadKind::HighPass => poly(1.0, 0.0, 0.0).div(den_std),
        BiquadKind::Notch => poly(1.0, 0.0, 1.0).div(den_std),
        BiquadKind::AllPass => poly(1.0, -1.0 / q, 1.0).div(den_std),
        BiquadKind::Peaking => poly(1.0, a / q, 1.0).div(poly(1.0, 1.0 / (a * q), 1.0)),
        BiquadKind::LowShelf => {
            Cx(a, 0.0)
                .mul(poly(1.0, a.sqrt() / q, a))
                .div(poly(a, a.sqrt() / q, 1.0))
        }
        BiquadKind::HighShelf => {
            Cx(a, 0.0)
                .mul(poly(a, a.sqrt() / q, 1.0))
                .div(poly(1.0, a.sqrt() / q, a))
        }
    };
    h.abs()
}

/// Magnitude in dB at `f` of the impulse response `h`, by a direct DFT.
fn measured_db(h: &[f64], f: f64) -> f64 {
    let w = 2.0 * PI * f / RATE;
    let (mut re, mut im) = (0.0, 0.0);
    for (n, &x) in h.iter().enumerate() {
        let (s, c) = (w * n as f64).sin_cos();
        re += x * c;
        im -= x * s;
    }
    20.0 * re.hypot(im).log10()
}

fn impulse(len: usize) -> Vec<f64> {
    let mut v = vec![0.0; len];
    v[0] = 1.0;
    v
}

/// Frequencies from 20 Hz to 20 kHz, 8 per octave.
fn freqs() -> Vec<f64> {
    (0..80).map(|i| 20.0 * 2f64.powf(i as f64 / 8.0)).collect()
}

fn bq(kind: BiquadKind, freq: f64, q: f64, gain_db: f64) -> BiquadParams {
    BiquadParams {
        kind,
        freq,
        q,
        gain_db,
    }
}

#[test]
fn five_band_eq_matches_its_analytic_response_within_a_tenth_of_a_db() {
    let bands = [
        bq(BiquadKind::LowShelf, 80.0, 0.707, 6.0),
        bq(BiquadKind::Peaking, 250.0, 1.0, -4.5),
        bq(BiquadKind::Peaking, 1_000.0, 2.0, 3.0),
        bq(BiquadKind::Peaking, 4_000.0, 0.7, -8.0),
        bq(BiquadKind::HighShelf, 10_000.0, 0.707, 4.0),
    ];
    let filters: Vec<Box<dyn Filter>> = bands
        .iter()
        .map(|p| Box::new(Biquad::new(2, RATE, *p).unwrap()) as Box<dyn Filter>)
        .collect();
    let mut chain = FilterChain::new(filters);
    // Both channels, the second fed the impulse later: the response must not depend
    // on where block boundaries fall.
    let mut right = vec![0.0; 65_536];
    right[333] = 1.0;
    let out = run(&mut |b| chain.process(b), &[impulse(65_536), right]);
    let mut worst = 0.0f64;
    for f in freqs() {
        let want: f64 = 20.0
            * bands
                .iter()
                .map(|p| analytic(p, f))
                .product::<f64>()
                .log10();
        for (ch, h) in out.iter().enumerate() {
            let got = measured_db(&h[if ch == 0 { 0 } else { 333 }..], f);
            assert!(
                (got - want).abs() < 0.1,
                "channel {ch} at {f:.1} Hz: {got:.3} dB, analytic {want:.3} dB"
            );
            worst = worst.max((got - want).abs());
        }
    }
    eprintln!("5-band EQ: worst deviation from the analytic response {worst:.2e} dB");
}

#[test]
fn every_biquad_kind_matches_its_analog_prototype() {
    for p in [
        bq(BiquadKind::LowPass, 2_000.0, 0.707, 0.0),
        bq(BiquadKind::HighPass, 150.0, 2.0, 0.0),
        bq(BiquadKind::Notch, 1_000.0, 5.0, 0.0),
        bq(BiquadKind::AllPass, 3_000.0, 0.5, 0.0),
        bq(BiquadKind::Peaking, 12_000.0, 4.0, 12.0),
        bq(BiquadKind::LowShelf, 30.0, 0.5, -12.0),
        bq(BiquadKind::HighShelf, 5_000.0, 1.5, -6.0),
    ] {
        let mut f = Biquad::new(1, RATE, p).unwrap();
        let h = &run(&mut |b| f.process(b), &[impulse(65_536)])[0];
        for fr in freqs() {
            let want = 20.0 * analytic(&p, fr).log10();
            if want < -60.0 {
                continue; // deep in a stop band, f32 output noise dominates
            }
            let got = measured_db(h, fr);
            assert!(
                (got - want).abs() < 0.1,
                "{:?} at {fr:.1} Hz: {got:.3} dB, analytic {want:.3} dB",
                p.kind
            );
        }
    }
}

/// A room-like response: direct sound, a few early reflections, then a diffuse tail of
/// noise decaying by 60 dB over `len` frames.
fn room(len: usize, seed: u32) -> Vec<f32> {
    let mut x = seed;
    let mut ir: Vec<f32> = (0..len)
        .map(|n| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (x >> 8) as f32 / (1 << 23) as f32 - 1.0;
            noise * 0.3 * 10f32.powf(-3.0 * n as f32 / len as f32)
        })
        .collect();
    ir[0] = 1.0;
    for (at, g) in [(97, -0.5), (211, 0.35), (389, 0.25), (560, -0.2)] {
        if at < len {
            ir[at] += g;
        }
    }
    ir
}

fn direct(x: &[f64], h: &[f32]) -> Vec<f64> {
    (0..x.len())
        .map(|n| {
            let lo = n.saturating_sub(h.len() - 1);
            (lo..=n).map(|k| x[k] * h[n - k] as f64).sum()
        })
        .collect()
}

fn rel_error_db(got: &[f64], want: &[f64]) -> f64 {
    let e: f64 = got.iter().zip(want).map(|(a, b)| (a - b) * (a - b)).sum();
    let s: f64 = want.iter().map(|b| b * b).sum();
    10.0 * (e / s).log10()
}

#[test]
fn convolver_matches_a_direct_convolution_to_minus_100_db() {
    let irs = [room(6_000, 1), room(4_500, 2)];
    let len = 24_000;
    let mut seed = 7u32;
    let signal: Vec<f64> = (0..len)
        .map(|n| {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            0.3 * (2.0 * PI * 440.0 * n as f64 / RATE).sin()
                + 0.2 * ((seed >> 8) as f64 / (1u32 << 23) as f64 - 1.0)
        })
        .collect();
    let input = [signal.clone(), signal.iter().map(|x| -0.5 * x).collect()];
    let want: Vec<Vec<f64>> = (0..2).map(|ch| direct(&input[ch], &irs[ch])).collect();
    for partition in [64, 256, 1024] {
        let mut conv = Convolver::new(2, &irs, partition).unwrap();
        let got = run(&mut |b| conv.process(b), &input);
        for ch in 0..2 {
            let err = rel_error_db(&got[ch], &want[ch]);
            eprintln!("partition {partition}, channel {ch}: relative error {err:.1} dB");
            assert!(
                err < -100.0,
                "partition {partition}, channel {ch}: {err:.1} dB"
            );
        }
    }
    // One response shared by two channels, an odd length shorter than a partition.
    let short = room(100, 3);
    let mut conv = Convolver::new(2, std::slice::from_ref(&short), 256).unwrap();
    let got = run(&mut |b| conv.process(b), &input);
    for ch in 0..2 {
        let err = rel_error_db(&got[ch], &direct(&input[ch], &short));
        assert!(err < -100.0, "short response, channel {ch}: {err:.1} dB");
    }
}

#[test]
fn convolver_refuses_bad_responses_with_the_reason() {
    let e = |r: Result<Convolver, FilterError>| r.err().unwrap().to_string();
    assert_eq!(
        e(Convolver::new(2, &[vec![1.0, f32::NAN]], 256)),
        "impulse response for channel 0 holds NaN or infinity"
    );
    assert_eq!(
        e(Convolver::new(2, &[vec![1.0], vec![], vec![]], 256)),
        "3 impulse responses for 2 channels: give one for all or one per channel"
    );
    assert_eq!(
        e(Convolver::new(1, &[vec![]], 256)),
        "impulse response for channel 0 is empty"
    );
    assert!(e(Convolver::new(1, &[vec![1.0]], 300)).contains("power of two"));
}

/// Largest sample-to-sample step of `y`.
fn max_step(y: &[f64]) -> f64 {
    y.windows(2)
        .map(|w| (w[1] - w[0]).abs())
        .fold(0.0, f64::max)
}

/// Plays a 1 kHz sine at 0.5 through a gain whose changes ramp over `ramp` frames,
/// changing it part-way into blocks and once during a running ramp; returns the
/// largest step in the output and the largest a ramp of that length allows.
fn gain_changes_while_a_sine_plays(ramp: usize) -> (f64, f64) {
    let (amp, freq) = (0.5, 1_000.0);
    let sine: Vec<f64> = (0..30_000)
        .map(|n| amp * (2.0 * PI * freq * n as f64 / RATE).sin())
        .collect();
    let mut gain = Gain::new(0.0).unwrap();
    gain.set_ramp_frames(ramp);
    let mut chain = FilterChain::new(vec![Box::new(gain)]);
    let mut frame = 0usize;
    let changes = [(10_000usize, -20.0f64), (20_011, 6.0), (20_100, 0.0)];
    let mut next = 0;
    let out = run(
        &mut |b| {
            if next < changes.len() && frame + b.frames() > changes[next].0 {
                chain.set_control(0, "gain_db", changes[next].1).unwrap();
                next += 1;
            }
            frame += b.frames();
            chain.process(b);
        },
        &[sine],
    );
    assert_eq!(next, changes.len());
    // y[n] - y[n-1] = g[n]·(s[n] - s[n-1]) + (g[n] - g[n-1])·s[n-1]: the sine's own
    // step at the highest gain, plus the ramp's per-frame change times the amplitude.
    // The largest change between two settings here is from −20 dB to +6 dB.
    let g_max = 10f64.powf(6.0 / 20.0);
    let sine_step = 2.0 * amp * (PI * freq / RATE).sin();
    let ramp_step = (g_max - 0.1) / ramp.max(1) as f64 * amp;
    (max_step(&out[0]), g_max * sine_step + ramp_step + 1e-6)
}

#[test]
fn a_gain_change_while_a_sine_plays_steps_no_more_than_the_ramp_allows() {
    let (step, allowed) = gain_changes_while_a_sine_plays(256);
    eprintln!("ramped gain: largest step {step:.5}, allowed {allowed:.5}");
    assert!(step <= allowed, "step {step} > {allowed}");
    // The check can fail: the same changes without a ramp jump far beyond it.
    let (unramped, _) = gain_changes_while_a_sine_plays(0);
    assert!(
        unramped > 2.0 * allowed,
        "unramped step {unramped} vs {allowed}"
    );
}

#[test]
fn nan_and_infinity_never_leave_a_chain_and_it_recovers_as_new() {
    let make = || {
        FilterChain::new(vec![
            Box::new(Biquad::new(2, RATE, bq(BiquadKind::Peaking, 500.0, 1.0, 6.0)).unwrap()),
            Box::new(Gain::new(-3.0).unwrap()),
            Box::new(Delay::new(2, 100, &[10, 20]).unwrap()),
            Box::new(Convolver::new(2, &[room(3_000, 5)], 256).unwrap()),
            Box::new(Limiter::new(2, RATE, -1.0, 1.0, 50.0).unwrap()),
        ])
    };
    let mut chain = make();
    let mut fresh = make();
    let mut buf = PlanarBuf::new(2, 512);
    let fill = |buf: &mut PlanarBuf, k: usize| {
        for ch in 0..2 {
            for (i, x) in buf.channel_mut(ch).iter_mut().enumerate() {
                *x = ((k * 512 + i) as f32 * 0.05 * (ch + 1) as f32).sin();
            }
        }
    };
    for (k, bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY]
        .into_iter()
        .enumerate()
    {
        fill(&mut buf, k);
        chain.process(&mut buf.view_mut(512));
        fill(&mut buf, k);
        buf.channel_mut(1)[100] = bad;
        chain.process(&mut buf.view_mut(512));
        assert!(
            buf.channel(0)
                .iter()
                .chain(buf.channel(1))
                .all(|x| *x == 0.0)
        );
        assert_eq!(chain.nonfinite_resets(), k as u64 + 1);
    }
    // After the reset the chain behaves exactly like a new one.
    let mut other = PlanarBuf::new(2, 512);
    for k in 0..20 {
        fill(&mut buf, k);
        fill(&mut other, k);
        chain.process(&mut buf.view_mut(512));
        fresh.process(&mut other.view_mut(512));
        assert_eq!(buf.channel(0), other.channel(0), "block {k}");
        assert_eq!(buf.channel(1), other.channel(1), "block {k}");
    }
    assert_eq!(chain.nonfinite_resets(), 3);
    assert_eq!(chain.latency(), 20 + 48);
}

#[test]
fn controls_are_checked_by_name_and_value() {
    let mut chain = FilterChain::new(vec![
        Box::new(Gain::new(0.0).unwrap()),
        Box::new(Biquad::new(2, RATE, bq(BiquadKind::LowPass, 1e3, 0.7, 0.0)).unwrap()),
    ]);
    let e = |r: Result<(), FilterError>| r.err().unwrap().to_string();
    assert_eq!(
        e(chain.set_control(0, "volume", 1.0)),
        "no such control: this filter has gain_db"
    );
    assert_eq!(
        e(chain.set_control(2, "q", 1.0)),
        "no filter 2: the chain has 2"
    );
    assert_eq!(
        e(chain.set_control(1, "q", -1.0)),
        "Q -1 is not a finite number above 0"
    );
    assert!(chain.set_control(1, "freq", 2e3).is_ok());
}

#[test]
fn control_checks_on_the_control_side_agree_with_the_filters() {
    let mut chain = FilterChain::new(vec![
        Box::new(Gain::new(0.0).unwrap()),
        Box::new(Biquad::new(2, RATE, bq(BiquadKind::Peaking, 1e3, 1.0, 3.0)).unwrap()),
        Box::new(Delay::new(2, 100, &[0]).unwrap()),
        Box::new(Limiter::new(2, RATE, -1.0, 1.0, 50.0).unwrap()),
        Box::new(Convolver::new(2, &[vec![1.0]], 64).unwrap()),
    ]);
    let mut checks = chain.controls();
    let tries = [
        ("gain_db", -6.0),
        ("gain_db", 500.0),
        ("freq", 30_000.0),
        ("freq", 20_000.0),
        ("q", 0.0),
        ("q", 5.0),
        ("frames", 100.0),
        ("frames", 101.0),
        ("frames", 2.5),
        ("threshold_db", 1.0),
        ("threshold_db", -3.0),
        ("volume", 1.0),
    ];
    for (i, check) in checks.iter_mut().enumerate() {
        for (name, value) in tries {
            let want = chain.set_control(i, name, value);
            assert_eq!(
                check.check(name, value),
                want,
                "filter {i}: {name} = {value}"
            );
        }
    }
}
