//! CPU of each filter per 1024-frame stereo block, and of a 64k-tap convolver on two
//! channels (issue 36's benchmark). `cargo bench -p quaver-dsp --bench filters`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use quaver_dsp::PlanarBuf;
use quaver_dsp::filter::{
    Biquad, BiquadKind, BiquadParams, ChannelMixer, Convolver, Crossover, Delay, Filter,
    FilterChain, Gain, Limiter, MixerPreset, all_finite,
};
use std::hint::black_box;

const FRAMES: usize = 1024;
const CHANNELS: usize = 2;
const RATE: f64 = 48_000.0;

fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((x >> 8) as f32 / (1 << 23) as f32 - 1.0) * 0.5
        })
        .collect()
}

fn peaking(freq: f64, gain_db: f64) -> BiquadParams {
    BiquadParams {
        kind: BiquadKind::Peaking,
        freq,
        q: 1.0,
        gain_db,
    }
}

/// Times `f` on a stereo block of noise.
fn bench(c: &mut Criterion, name: &str, f: &mut dyn Filter) {
    bench_wide(c, name, f, CHANNELS)
}

/// Times `f` on a stereo block of noise in a buffer of `width` channels (for a filter
/// that writes more channels than it reads).
fn bench_wide(c: &mut Criterion, name: &str, f: &mut dyn Filter, width: usize) {
    let src = noise(FRAMES, 3);
    let mut buf = PlanarBuf::new(width, FRAMES);
    for ch in 0..CHANNELS {
        buf.channel_mut(ch).copy_from_slice(&src);
    }
    let mut g = c.benchmark_group("filter_stereo_1024");
    g.throughput(Throughput::Elements(FRAMES as u64));
    // A fresh copy of the noise for each run, made outside the timing, so filters
    // that settle (a limiter at rest, a decaying state) see the same input every time.
    g.bench_function(name, |b| {
        b.iter_batched_ref(
            || buf.clone(),
            |x| f.process(&mut x.view_mut(FRAMES)),
            criterion::BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_filters(c: &mut Criterion) {
    bench(
        c,
        "biquad",
        &mut Biquad::new(CHANNELS, RATE, peaking(1e3, 6.0)).unwrap(),
    );
    // A biquad in the middle of a crossfade runs two sections.
    let mut fading = Biquad::new(CHANNELS, RATE, peaking(1e3, 6.0)).unwrap();
    fading.set_fade_frames(usize::MAX / 2);
    fading.set_params(peaking(2e3, -6.0)).unwrap();
    bench(c, "biquad_crossfading", &mut fading);
    bench(c, "gain_constant", &mut Gain::new(-6.0).unwrap());
    let mut ramping = Gain::new(-6.0).unwrap();
    ramping.set_ramp_frames(usize::MAX / 2);
    ramping.set_db(6.0).unwrap();
    bench(c, "gain_ramping", &mut ramping);
    bench(
        c,
        "delay",
        &mut Delay::new(CHANNELS, 48_000, &[480, 960]).unwrap(),
    );
    bench(
        c,
        "limiter",
        &mut Limiter::new(CHANNELS, RATE, -6.0, 5.0, 50.0).unwrap(),
    );
    bench(
        c,
        "channel_mixer_swap",
        &mut ChannelMixer::new(&MixerPreset::Swap.matrix(2).unwrap()).unwrap(),
    );
    let mut ramping = ChannelMixer::new(&[vec![1.0, 0.5], vec![0.5, 1.0]]).unwrap();
    ramping.set_ramp_frames(usize::MAX / 2);
    for (o, i) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        ramping.set_weight(o, i, 0.25).unwrap();
    }
    bench(c, "channel_mixer_ramping", &mut ramping);
    bench_wide(
        c,
        "crossover_lr4_2way_to_4",
        &mut Crossover::new(CHANNELS, RATE, &[2_000.0], None).unwrap(),
        4,
    );
    bench_wide(
        c,
        "crossover_lr4_3way_to_6",
        &mut Crossover::new(CHANNELS, RATE, &[300.0, 3_000.0], None).unwrap(),
        6,
    );
    let ir = noise(4096, 5);
    bench(
        c,
        "convolver_4k_taps_partition_1024",
        &mut Convolver::new(CHANNELS, std::slice::from_ref(&ir), 1024).unwrap(),
    );

    let src = noise(FRAMES, 3);
    let mut buf = PlanarBuf::new(CHANNELS, FRAMES);
    for ch in 0..CHANNELS {
        buf.channel_mut(ch).copy_from_slice(&src);
    }
    let mut g = c.benchmark_group("filter_stereo_1024");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("nonfinite_guard", |b| {
        b.iter(|| black_box(all_finite(&buf.view_mut(FRAMES))))
    });
    let mut eq = FilterChain::new(
        [
            (80.0, 4.0),
            (250.0, -3.0),
            (1e3, 2.0),
            (4e3, -4.0),
            (10e3, 3.0),
        ]
        .into_iter()
        .map(|(f, g)| {
            Box::new(Biquad::new(CHANNELS, RATE, peaking(f, g)).unwrap()) as Box<dyn Filter>
        })
        .collect(),
    );
    g.bench_function("eq_5_band_chain", |b| {
        b.iter(|| eq.process(&mut buf.view_mut(FRAMES)))
    });
    g.finish();
}

fn bench_convolver_64k(c: &mut Criterion) {
    // Two different 65536-tap responses (1.4 s at 48 kHz), one per channel.
    let irs: Vec<Vec<f32>> = (0..2)
        .map(|ch| {
            noise(65_536, 11 + ch)
                .into_iter()
                .enumerate()
                .map(|(n, x)| x * (-(n as f32) / 8000.0).exp())
                .collect()
        })
        .collect();
    let src = noise(FRAMES, 3);
    let mut buf = PlanarBuf::new(CHANNELS, FRAMES);
    let mut g = c.benchmark_group("convolver_64k_taps_stereo_1024");
    g.throughput(Throughput::Elements(FRAMES as u64));
    for partition in [256, 1024, 4096] {
        let mut conv = Convolver::new(CHANNELS, &irs, partition).unwrap();
        g.bench_function(format!("partition_{partition}"), |b| {
            b.iter(|| {
                for ch in 0..CHANNELS {
                    buf.channel_mut(ch).copy_from_slice(&src);
                }
                conv.process(&mut buf.view_mut(FRAMES))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_filters, bench_convolver_64k);
criterion_main!(benches);
