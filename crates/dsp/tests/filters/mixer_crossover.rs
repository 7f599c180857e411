//! The channel mixer and the crossover against answers worked out independently: the
//! mixer's sums bit for bit, its live changes against the step a ramp allows; the
//! crossover's bands from an impulse response through realfft (the convolver's FFT
//! crate), against the Linkwitz–Riley properties (bands summing to an all-pass, −6 dB
//! each at the split, 24 dB per octave); and the chain's channel-count checks.

use quaver_dsp::PlanarBuf;
use quaver_dsp::filter::{
    ChannelMixer, Controls, Crossover, Filter, FilterChain, FilterError, MixerPreset,
};
use realfft::RealFftPlanner;
use std::f64::consts::PI;

const RATE: f64 = 48_000.0;
/// Block sizes that change from call to call, some longer than the filters' passes.
const BLOCKS: [usize; 9] = [1, 7, 64, 441, 1024, 5, 2000, 128, 300];

/// Runs `input` (planar) through `f` in blocks of varying size on a buffer of `width`
/// channels; returns the first `keep` channels.
fn run(
    f: &mut dyn FnMut(&mut quaver_dsp::PlanarMut),
    input: &[Vec<f32>],
    width: usize,
    keep: usize,
) -> Vec<Vec<f32>> {
    let len = input[0].len();
    let mut buf = PlanarBuf::new(width, 2000);
    let mut out = vec![Vec::with_capacity(len); keep];
    let mut start = 0;
    for &size in BLOCKS.iter().cycle() {
        if start >= len {
            break;
        }
        let n = size.min(len - start);
        for (ch, x) in input.iter().enumerate() {
            buf.channel_mut(ch)[..n].copy_from_slice(&x[start..start + n]);
        }
        f(&mut buf.view_mut(n));
        for (ch, o) in out.iter_mut().enumerate() {
            o.extend_from_slice(&buf.channel(ch)[..n]);
        }
        start += n;
    }
    out
}

fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((x >> 8) as f32 / (1 << 23) as f32 - 1.0) * 0.5
        })
        .collect()
}

#[test]
fn mixer_sums_are_exact_for_a_matrix_and_the_presets() {
    let ins: Vec<Vec<f32>> = (0..3).map(|c| noise(5_000, 7 + c)).collect();
    // A 3→2 matrix with weights exact in f32: each output a sum rounded the same way.
    let m = vec![vec![0.5, 0.25, -1.0], vec![0.0, 2.0, 0.125]];
    let mut mixer = ChannelMixer::new(&m).unwrap();
    let out = run(&mut |b| mixer.process(b), &ins, 3, 3);
    for (o, row) in m.iter().enumerate() {
        for n in 0..5_000 {
            let mut want = 0.0f32;
            for (i, w) in row.iter().enumerate() {
                want += *w as f32 * ins[i][n];
            }
            assert_eq!(out[o][n], want, "output {o} frame {n}");
        }
    }
    assert!(
        out[2].iter().all(|&x| x == 0.0),
        "the dropped channel is zeroed"
    );

    // Stereo to mono: (L + R) / 2, exact since halving is.
    let lr = &ins[..2];
    let mut mono = ChannelMixer::new(&MixerPreset::MonoDownmix.matrix(2).unwrap()).unwrap();
    let out = run(&mut |b| mono.process(b), lr, 2, 1);
    for n in 0..5_000 {
        assert_eq!(
            out[0][n],
            ((lr[0][n] as f64 + lr[1][n] as f64) / 2.0) as f32
        );
    }
    let mut swap = ChannelMixer::new(&MixerPreset::Swap.matrix(2).unwrap()).unwrap();
    let out = run(&mut |b| swap.process(b), lr, 2, 2);
    assert_eq!((&out[0], &out[1]), (&lr[1], &lr[0]));
    let mut up = ChannelMixer::new(&MixerPreset::StereoTo51Front.matrix(2).unwrap()).unwrap();
    let out = run(&mut |b| up.process(b), lr, 6, 6);
    assert_eq!((&out[0], &out[1]), (&lr[0], &lr[1]));
    assert!(out[2..].iter().flatten().all(|&x| x == 0.0));
}

fn max_step(y: &[f32]) -> f64 {
    y.windows(2)
        .map(|w| (w[1] - w[0]).abs() as f64)
        .fold(0.0, f64::max)
}

/// A 1 kHz sine at 0.5 on input 0 of a 2→1 mixer whose weight for it changes three
/// times (once during a running ramp); returns the largest step and the bound.
fn weight_changes_while_a_sine_plays(ramp: usize) -> (f64, f64) {
    let (amp, freq) = (0.5, 1_000.0);
    let sine: Vec<f32> = (0..30_000)
        .map(|n| (amp * (2.0 * PI * freq * n as f64 / RATE).sin()) as f32)
        .collect();
    let mut mixer = ChannelMixer::new(&[vec![1.0, 0.0]]).unwrap();
    mixer.set_ramp_frames(ramp);
    let mut chain = FilterChain::for_channels(
        vec![
            Box::new(mixer),
            Box::new(ChannelMixer::new(&[vec![1.0], vec![0.0]]).unwrap()),
        ],
        2,
    )
    .unwrap();
    let changes = [(10_000usize, 0.1f64), (20_011, 2.0), (20_100, 1.0)];
    let (mut frame, mut next) = (0usize, 0);
    let out = run(
        &mut |b| {
            if next < changes.len() && frame + b.frames() > changes[next].0 {
                chain.set_control(0, "gain_0_0", changes[next].1).unwrap();
                next += 1;
            }
            frame += b.frames();
            chain.process(b);
        },
        &[sine, vec![0.0; 30_000]],
        2,
        1,
    );
    assert_eq!(next, changes.len());
    // y[n] − y[n−1] = g[n]·(s[n] − s[n−1]) + (g[n] − g[n−1])·s[n−1]: the sine's own
    // step at the largest weight, plus the ramp's per-frame change times the amplitude.
    let g_max = 2.0;
    let sine_step = 2.0 * amp * (PI * freq / RATE).sin();
    let ramp_step = (2.0 - 0.1) / ramp.max(1) as f64 * amp;
    (max_step(&out[0]), g_max * sine_step + ramp_step + 1e-6)
}

#[test]
fn a_live_weight_change_steps_no_more_than_the_ramp_allows() {
    let (step, allowed) = weight_changes_while_a_sine_plays(256);
    eprintln!("ramped mixer weight: largest step {step:.5}, allowed {allowed:.5}");
    assert!(step <= allowed, "step {step} > {allowed}");
    let (unramped, _) = weight_changes_while_a_sine_plays(0);
    assert!(
        unramped > 2.0 * allowed,
        "unramped step {unramped} vs {allowed}"
    );
}

/// The impulse response of each of a crossover's outputs, `len` frames, one input
/// channel.
fn responses(x: &mut Crossover, len: usize) -> Vec<Vec<f32>> {
    let mut imp = vec![0.0f32; len];
    imp[0] = 1.0;
    let outs = x.outputs().len();
    run(&mut |b| x.process(b), &[imp], outs, outs)
}

/// Magnitudes in dB of `h`'s spectrum, bin k at k·RATE/len Hz.
fn spectrum_db(h: &[f64]) -> Vec<f64> {
    let mut planner = RealFftPlanner::<f64>::new();
    let fft = planner.plan_fft_forward(h.len());
    let mut input = h.to_vec();
    let mut out = fft.make_output_vec();
    fft.process(&mut input, &mut out).unwrap();
    out.iter().map(|c| 20.0 * c.norm().log10()).collect()
}

/// 48 000 frames: 1 Hz a bin, so every test frequency is one.
const LEN: usize = 48_000;

fn to_f64(h: &[f32]) -> Vec<f64> {
    h.iter().map(|&v| v as f64).collect()
}

/// The sum of the bands and each band at its splits, for a crossover at `freqs`.
fn check_linkwitz_riley(freqs: &[f64]) {
    let mut x = Crossover::new(1, RATE, freqs, None).unwrap();
    let h = responses(&mut x, LEN);
    assert_eq!(h.len(), freqs.len() + 1);
    let sum: Vec<f64> = (0..LEN)
        .map(|n| h.iter().map(|b| b[n] as f64).sum())
        .collect();
    let flat = spectrum_db(&sum);
    let worst = (20..=20_000).map(|f| flat[f].abs()).fold(0.0, f64::max);
    eprintln!("crossover at {freqs:?}: bands summed deviate at most {worst:.5} dB, 20 Hz–20 kHz");
    assert!(worst < 0.1, "bands summed: {worst} dB from flat");
    // The check can fail: the lowest band taken away instead of added is far from flat.
    let diff: Vec<f64> = (0..LEN).map(|n| sum[n] - 2.0 * h[0][n] as f64).collect();
    let notch = spectrum_db(&diff);
    assert!((20..=20_000).any(|f| notch[f] < -10.0));
    let bands: Vec<Vec<f64>> = h.iter().map(|b| spectrum_db(&to_f64(b))).collect();
    let want = 20.0 * 0.5f64.log10();
    for (k, &f) in freqs.iter().enumerate() {
        for b in [k, k + 1] {
            let got = bands[b][f as usize];
            eprintln!("  band {b} at {f} Hz: {got:.4} dB");
            assert!(
                (got - want).abs() < 0.1,
                "band {b} at the {f} Hz split: {got} dB, want {want:.3}"
            );
        }
    }
}

#[test]
fn two_way_bands_sum_flat_and_cross_at_minus_6_db() {
    check_linkwitz_riley(&[1_000.0]);
}

#[test]
fn three_way_bands_sum_flat_and_cross_at_minus_6_db() {
    check_linkwitz_riley(&[300.0, 3_000.0]);
}

#[test]
fn each_band_falls_24_db_per_octave() {
    // Far from the split (8 to 16 times), where 1/(1 + x⁴) is a 24.08 dB octave, and
    // low enough that the bilinear map's warping adds little (0.1 dB at 1.6 kHz).
    let mut lo = Crossover::new(1, RATE, &[100.0], None).unwrap();
    let h = responses(&mut lo, LEN);
    let low = spectrum_db(&to_f64(&h[0]));
    let slope_low = low[800] - low[1_600];
    let mut hi = Crossover::new(1, RATE, &[1_000.0], None).unwrap();
    let h = responses(&mut hi, LEN);
    let high = spectrum_db(&to_f64(&h[1]));
    let slope_high = high[125] - high[62];
    // 62 Hz, not 62.5: one bin below, which the 4th-order rise accounts for.
    let slope_high = slope_high - 80.0 * (62.5f64 / 62.0).log10();
    eprintln!("slopes: low band {slope_low:.2} dB/oct, high band {slope_high:.2} dB/oct");
    for s in [slope_low, slope_high] {
        assert!((s - 24.0).abs() < 0.5, "{s} dB per octave");
    }
}

#[test]
fn crossover_settings_are_checked_with_the_reason() {
    let e = |r: Result<Crossover, FilterError>| r.err().unwrap().to_string();
    assert_eq!(
        e(Crossover::new(2, RATE, &[30_000.0], None)),
        "frequency 30000 Hz is outside (0, 24000) Hz, the range at sample rate 48000 Hz"
    );
    assert!(e(Crossover::new(2, RATE, &[0.0], None)).contains("outside (0, 24000)"));
    assert!(e(Crossover::new(2, RATE, &[f64::NAN], None)).contains("outside (0, 24000)"));
    assert!(e(Crossover::new(2, RATE, &[3e3, 300.0], None)).contains("must rise"));
    assert!(e(Crossover::new(2, RATE, &[], None)).contains("1 to 3"));
    assert!(e(Crossover::new(2, RATE, &[1e3], Some(&[(2, 0)]))).contains("input channel"));
    assert!(e(Crossover::new(2, RATE, &[1e3], Some(&[(0, 2)]))).contains("band past"));
}

/// 2.1 bass management on a 3-channel sink: the stereo pair split at 80 Hz, the highs
/// to the mains, both lows summed to the subwoofer. Inside, 4 channels flow.
fn bass_management() -> Vec<Box<dyn Filter>> {
    vec![
        Box::new(ChannelMixer::new(&[vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0]]).unwrap()),
        Box::new(Crossover::new(2, RATE, &[80.0], None).unwrap()),
        Box::new(
            ChannelMixer::new(&[
                vec![0.0, 1.0, 0.0, 0.0],
                vec![0.0, 0.0, 0.0, 1.0],
                vec![1.0, 0.0, 1.0, 0.0],
            ])
            .unwrap(),
        ),
    ]
}

#[test]
fn chains_check_channel_counts_and_run_wider_inside() {
    let e =
        |f: Vec<Box<dyn Filter>>, ch| FilterChain::for_channels(f, ch).err().unwrap().to_string();
    let split = || Box::new(Crossover::new(2, RATE, &[1e3], None).unwrap()) as Box<dyn Filter>;
    assert_eq!(
        e(vec![split()], 2),
        "the chain ends with 4 channels but runs on 2 (end it with a channel mixer back to 2)"
    );
    assert_eq!(
        e(vec![split()], 4),
        "filter 0 (from 0) takes 2 channels, but 4 reach it (the chain starts with the \
         sink's channels; a channel mixer or crossover changes the count)"
    );
    let mut chain = FilterChain::for_channels(bass_management(), 3).unwrap();
    // The same filters by hand on a 4-channel buffer give the same samples.
    let mut by_hand = bass_management();
    let ins: Vec<Vec<f32>> = (0..3).map(|c| noise(6_000, 20 + c)).collect();
    let got = run(&mut |b| chain.process(b), &ins, 3, 3);
    let want = run(
        &mut |b| by_hand.iter_mut().for_each(|f| f.process(b)),
        &ins,
        4,
        3,
    );
    assert_eq!(got, want);
    // Left alone in: main + sub is the left channel through an all-pass.
    let mut imp = vec![0.0f32; LEN];
    imp[0] = 1.0;
    let mut chain = FilterChain::for_channels(bass_management(), 3).unwrap();
    let out = run(
        &mut |b| chain.process(b),
        &[imp, vec![0.0; LEN], vec![0.0; LEN]],
        3,
        3,
    );
    assert!(out[1].iter().all(|&x| x == 0.0));
    let sum: Vec<f64> = (0..LEN).map(|n| (out[0][n] + out[2][n]) as f64).collect();
    let flat = spectrum_db(&sum);
    let worst = (20..=20_000).map(|f| flat[f].abs()).fold(0.0, f64::max);
    assert!(worst < 0.1, "{worst} dB");
}

#[test]
fn nan_never_leaves_a_chain_with_a_crossover_and_it_recovers_as_new() {
    let mut chain = FilterChain::for_channels(bass_management(), 3).unwrap();
    let mut fresh = FilterChain::for_channels(bass_management(), 3).unwrap();
    let mut buf = PlanarBuf::new(3, 700);
    let mut other = PlanarBuf::new(3, 700);
    let fill = |buf: &mut PlanarBuf, k: usize| {
        for ch in 0..3 {
            for (i, x) in buf.channel_mut(ch).iter_mut().enumerate() {
                *x = ((k * 700 + i) as f32 * 0.05 * (ch + 1) as f32).sin();
            }
        }
    };
    for (k, bad) in [f32::NAN, f32::INFINITY].into_iter().enumerate() {
        fill(&mut buf, k);
        chain.process(&mut buf.view_mut(700));
        fill(&mut buf, k);
        buf.channel_mut(1)[600] = bad;
        chain.process(&mut buf.view_mut(700));
        // Passes of 256 frames: the pass with the bad sample and the one after it (the
        // state it left) come out silent, never the bad value.
        assert!((0..3).all(|c| buf.channel(c).iter().all(|x| x.is_finite())));
        assert!(buf.channel(0)[512..].iter().all(|&x| x == 0.0));
        assert!(chain.nonfinite_resets() > k as u64);
    }
    for k in 0..10 {
        fill(&mut buf, k);
        fill(&mut other, k);
        chain.process(&mut buf.view_mut(700));
        fresh.process(&mut other.view_mut(700));
        for c in 0..3 {
            assert_eq!(buf.channel(c), other.channel(c), "block {k}");
        }
    }
}

#[test]
fn mixer_controls_are_checked_the_same_on_both_sides() {
    let mut chain = FilterChain::for_channels(
        vec![
            Box::new(ChannelMixer::new(&[vec![1.0, 1.0]]).unwrap()),
            Box::new(ChannelMixer::new(&[vec![1.0], vec![1.0]]).unwrap()),
        ],
        2,
    )
    .unwrap();
    let mut checks = chain.controls();
    assert_eq!(
        checks[0],
        Controls::Mixer {
            outputs: 1,
            inputs: 2
        }
    );
    for (name, value) in [
        ("gain_0_1", 0.5),
        ("gain_0_1", -0.5),
        ("gain_1_0", 0.5),
        ("gain_0_2", 0.5),
        ("gain_0_0", f64::INFINITY),
        ("gain_0_0", 2e6),
        ("gain_db", 1.0),
        ("gain_x_0", 1.0),
    ] {
        let side = checks[0].check(name, value);
        let real = chain.set_control(0, name, value);
        assert_eq!(side, real, "{name} = {value}");
    }
    assert_eq!(
        chain.set_control(0, "volume", 1.0).unwrap_err().to_string(),
        "no such control: this filter has gain_<output>_<input> (a linear weight, from 0)"
    );
}

/// The low band of a 200 Hz sine at 0.5 through a 2-way crossover at 1 kHz whose split
/// moves to 150 Hz at frame 10 000, crossfaded over `fade` frames; and the same sine
/// through a crossover built at 150 Hz.
fn split_moves_while_a_sine_plays(fade: usize) -> (Vec<f32>, Vec<f32>) {
    let sine: Vec<f32> = (0..40_000)
        .map(|n| (0.5 * (2.0 * PI * 200.0 * n as f64 / RATE).sin()) as f32)
        .collect();
    let mut x = Crossover::new(1, RATE, &[1_000.0], None).unwrap();
    x.set_fade_frames(fade);
    let mut frame = 0usize;
    let mut moved = false;
    let out = run(
        &mut |b| {
            if !moved && frame + b.frames() > 10_000 {
                x.set_control("freq", 150.0).unwrap();
                moved = true;
            }
            frame += b.frames();
            x.process(b);
        },
        std::slice::from_ref(&sine),
        2,
        1,
    );
    let mut fresh = Crossover::new(1, RATE, &[150.0], None).unwrap();
    let want = run(&mut |b| fresh.process(b), &[sine], 2, 1);
    (out[0].clone(), want[0].clone())
}

/// The largest second difference: a sine's is its amplitude times ω², a click's is
/// far more.
fn max_bend(y: &[f32]) -> f64 {
    y.windows(3)
        .map(|w| (w[2] as f64 - 2.0 * w[1] as f64 + w[0] as f64).abs())
        .fold(0.0, f64::max)
}

#[test]
fn a_live_split_frequency_change_crossfades_and_ends_as_a_new_crossover_would() {
    let (faded, fresh) = split_moves_while_a_sine_plays(quaver_dsp::filter::DEFAULT_FADE_FRAMES);
    let w = 2.0 * PI * 200.0 / RATE;
    let sine_bend = 0.5 * w * w;
    let bend = max_bend(&faded[9_000..14_000]);
    let (jumped, _) = split_moves_while_a_sine_plays(0);
    let jump_bend = max_bend(&jumped[9_000..14_000]);
    eprintln!(
        "split 1 kHz -> 150 Hz under a 200 Hz sine: largest bend {bend:.6} faded, \
         {jump_bend:.6} jumped, the sine's own {sine_bend:.6}"
    );
    // The blend of two crossovers is no pure sine while it lasts (measured: 1.7 times
    // the sine's bend), but a click is of another order (the jump: over 100 times).
    assert!(
        bend <= 2.5 * sine_bend,
        "faded: bend {bend} vs the sine's {sine_bend}"
    );
    assert!(
        jump_bend > 10.0 * sine_bend,
        "the jump shows no click ({jump_bend}): this check could not fail"
    );
    // Once the fade and the old state's tail are over, it is the 150 Hz crossover.
    let worst = faded[30_000..]
        .iter()
        .zip(&fresh[30_000..])
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst < 1e-4,
        "differs from a crossover built at 150 Hz by {worst}"
    );
}

#[test]
fn split_frequency_controls_are_checked_with_the_reason() {
    let one = Crossover::new(1, RATE, &[1_000.0], None).unwrap();
    let e = one
        .controls()
        .check("freq_0", 500.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("freq (one split)"), "{e}");
    let mut two = Crossover::new(1, RATE, &[300.0, 3_000.0], None).unwrap();
    let mut c = two.controls();
    assert!(
        c.check("freq", 500.0)
            .unwrap_err()
            .to_string()
            .contains("freq_0")
    );
    assert!(c.check("freq_2", 500.0).is_err());
    let e = c.check("freq_0", 3_500.0).unwrap_err().to_string();
    assert!(e.contains("must rise"), "{e}");
    c.check("freq_1", 4_000.0).unwrap();
    // Checked against the change before it: 3 500 is below 4 000 now.
    c.check("freq_0", 3_500.0).unwrap();
    assert!(
        two.set_control("freq_0", 3_500.0).is_err(),
        "the filter checks too"
    );
    two.set_control("freq_1", 4_000.0).unwrap();
    two.set_control("freq_0", 3_500.0).unwrap();
    assert!(
        matches!(two.controls(), Controls::Crossover { freqs, .. } if freqs[..2] == [3_500.0, 4_000.0])
    );
}
