//! Throughput of the real-time kernels at typical sizes (1024-frame stereo quanta).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quaver_dsp::format::{self, SampleFormat};
use quaver_dsp::mix;
use quaver_dsp::resample::{ResampleQuality, StreamResampler};
use quaver_dsp::volume::GainRamp;
use quaver_dsp::{PlanarBuf, PlanarMut};
use std::hint::black_box;

const FRAMES: usize = 1024;
const CHANNELS: usize = 2;

fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((x >> 8) as f32 / (1 << 23) as f32 - 1.0) * 0.5
        })
        .collect()
}

fn bench_mix(c: &mut Criterion) {
    let streams: Vec<Vec<f32>> = (0..32).map(|i| noise(FRAMES * CHANNELS, i)).collect();
    let mut dst = vec![0.0f32; FRAMES * CHANNELS];
    let mut g = c.benchmark_group("mix_32_stereo_streams_1024");
    g.throughput(Throughput::Elements((32 * FRAMES) as u64));
    g.bench_function("mix_into", |b| {
        b.iter(|| {
            dst.fill(0.0);
            for s in &streams {
                mix::mix_into(&mut dst, s);
            }
            black_box(&dst);
        })
    });
    g.bench_function("mix_into_gain", |b| {
        b.iter(|| {
            dst.fill(0.0);
            for s in &streams {
                mix::mix_into_gain(&mut dst, s, 0.7);
            }
            black_box(&dst);
        })
    });
    g.bench_function("mix_into_ramp", |b| {
        b.iter(|| {
            dst.fill(0.0);
            for s in &streams {
                mix::mix_into_ramp(&mut dst, s, 0.2, 0.9);
            }
            black_box(&dst);
        })
    });
    g.bench_function("reference_mix_into_gain", |b| {
        b.iter(|| {
            dst.fill(0.0);
            for s in &streams {
                mix::reference::mix_into_gain(&mut dst, black_box(s), 0.7);
            }
            black_box(&dst);
        })
    });
    g.finish();
}

fn bench_volume(c: &mut Criterion) {
    let mut buf = PlanarBuf::new(CHANNELS, FRAMES);
    let src = noise(FRAMES, 9);
    for ch in 0..CHANNELS {
        buf.channel_mut(ch).copy_from_slice(&src);
    }
    let mut g = c.benchmark_group("volume_stereo_1024");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("constant_0.5", |b| {
        let mut ramp = GainRamp::new(0.5);
        b.iter(|| ramp.apply(&mut buf.view_mut(FRAMES)))
    });
    g.bench_function("unity", |b| {
        let mut ramp = GainRamp::new(1.0);
        b.iter(|| ramp.apply(&mut buf.view_mut(FRAMES)))
    });
    g.bench_function("ramping", |b| {
        let mut ramp = GainRamp::new(0.5);
        let mut up = true;
        b.iter(|| {
            // A ramp longer than the block, so every iteration ramps the whole block.
            up = !up;
            ramp.set_target(if up { 0.9 } else { 0.1 }, 4 * FRAMES);
            ramp.apply(&mut buf.view_mut(FRAMES))
        })
    });
    g.finish();
}

fn bench_format(c: &mut Criterion) {
    let samples = FRAMES * CHANNELS;
    let f = noise(samples, 3);
    let mut out_f = vec![0.0f32; samples];
    let mut g = c.benchmark_group("format_stereo_1024");
    g.throughput(Throughput::Elements(FRAMES as u64));
    for fmt in [
        SampleFormat::S16Le,
        SampleFormat::S24Le,
        SampleFormat::S32Le,
    ] {
        let mut bytes = vec![0u8; samples * fmt.bytes_per_sample()];
        format::encode_interleaved(fmt, &f, &mut bytes);
        g.bench_function(format!("{fmt}_to_f32"), |b| {
            b.iter(|| format::decode_interleaved(fmt, black_box(&bytes), &mut out_f))
        });
    }
    for fmt in [SampleFormat::S16Le, SampleFormat::S24Le] {
        let mut bytes = vec![0u8; samples * fmt.bytes_per_sample()];
        g.bench_function(format!("f32_to_{fmt}"), |b| {
            b.iter(|| format::encode_interleaved(fmt, black_box(&f), &mut bytes))
        });
    }
    let mut planar = PlanarBuf::new(CHANNELS, FRAMES);
    g.bench_function("deinterleave", |b| {
        b.iter(|| format::deinterleave(black_box(&f), &mut planar.view_mut(FRAMES)))
    });
    let mut bytes = vec![0u8; samples * 2];
    format::encode_interleaved(SampleFormat::S16Le, &f, &mut bytes);
    g.bench_function("s16le_to_planar", |b| {
        b.iter(|| {
            format::decode_to_planar(
                SampleFormat::S16Le,
                black_box(&bytes),
                &mut planar.view_mut(FRAMES),
            )
        })
    });
    g.finish();
}

fn bench_resample(c: &mut Criterion) {
    let mut g = c.benchmark_group("resample_44k1_to_48k_stereo_1024");
    g.throughput(Throughput::Elements(FRAMES as u64));
    let src = noise(4096, 5);
    for q in ResampleQuality::ALL {
        let mut r = StreamResampler::new(44100, 48000, CHANNELS, q, FRAMES).unwrap();
        let mut out = PlanarBuf::new(CHANNELS, FRAMES);
        g.bench_with_input(BenchmarkId::new("pull", q), &q, |b, _| {
            b.iter(|| {
                r.process_pull(&mut out.view_mut(FRAMES), &mut |s: &mut PlanarMut| {
                    let n = s.frames();
                    for ch in 0..CHANNELS {
                        s.channel_mut(ch).copy_from_slice(&src[..n]);
                    }
                    n
                })
            })
        });
    }
    let mut fixed =
        StreamResampler::new_fixed(44100, 48000, CHANNELS, ResampleQuality::Medium, FRAMES)
            .unwrap();
    let mut out = PlanarBuf::new(CHANNELS, FRAMES);
    g.bench_function("pull/medium-fixed", |b| {
        b.iter(|| {
            fixed.process_pull(&mut out.view_mut(FRAMES), &mut |s: &mut PlanarMut| {
                let n = s.frames();
                for ch in 0..CHANNELS {
                    s.channel_mut(ch).copy_from_slice(&src[..n]);
                }
                n
            })
        })
    });
    g.finish();

    // What a daemon with many 44.1 kHz streams does each cycle: 32 streams in turn at a
    // 128-frame quantum, each with its own resampler (the fixed ones share one table).
    const STREAMS: usize = 32;
    const Q: usize = 128;
    let mut g = c.benchmark_group("resample_32_streams_44k1_to_48k_stereo_128");
    g.throughput(Throughput::Elements((STREAMS * Q) as u64));
    for (name, fixed) in [("medium-adjustable", false), ("medium-fixed", true)] {
        let make = if fixed {
            StreamResampler::new_fixed
        } else {
            StreamResampler::new
        };
        let mut rs: Vec<StreamResampler> = (0..STREAMS)
            .map(|_| make(44100, 48000, CHANNELS, ResampleQuality::Medium, 8192).unwrap())
            .collect();
        let mut out = PlanarBuf::new(CHANNELS, Q);
        g.bench_function(name, |b| {
            b.iter(|| {
                for r in rs.iter_mut() {
                    r.process_pull(&mut out.view_mut(Q), &mut |s: &mut PlanarMut| {
                        let n = s.frames();
                        for ch in 0..CHANNELS {
                            s.channel_mut(ch).copy_from_slice(&src[..n]);
                        }
                        n
                    })
                }
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_mix,
    bench_volume,
    bench_format,
    bench_resample
);
criterion_main!(benches);
