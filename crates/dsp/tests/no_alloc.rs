//! Proves that the real-time entry points never allocate: a counting global
//! allocator records every allocation made on the current thread while armed.

use quaver_dsp::channels::{ChannelMap, ChannelMixer};
use quaver_dsp::format::{self, SampleFormat};
use quaver_dsp::mix;
use quaver_dsp::resample::{ResampleQuality, StreamResampler};
use quaver_dsp::volume::{self, GainRamp};
use quaver_dsp::{Planar, PlanarBuf, PlanarMut};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Const-initialised and without Drop, so touching them inside the allocator
    // cannot itself allocate or register a destructor.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            COUNT.with(|c| c.set(c.get() + 1));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note();
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` with the counter armed and returns how many allocator calls it made.
fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    COUNT.with(|c| c.get())
}

#[test]
fn counter_sees_allocations() {
    let n = allocations(|| {
        let v = vec![1u8; 100];
        std::hint::black_box(v);
    });
    assert!(n >= 1);
}

/// Frame counts that change from call to call, like a quantum that follows clients.
const BLOCKS: [usize; 9] = [1024, 1, 64, 441, 256, 7, 1000, 128, 480];

#[test]
fn resampler_pull_and_push_do_not_allocate() {
    type Ctor = fn(
        u32,
        u32,
        usize,
        ResampleQuality,
        usize,
    ) -> Result<StreamResampler, quaver_dsp::resample::ResampleError>;
    let ctors: [Ctor; 2] = [StreamResampler::new, StreamResampler::new_fixed];
    for (quality, make) in ResampleQuality::ALL
        .into_iter()
        .flat_map(|q| ctors.map(|c| (q, c)))
    {
        // The last three are cascades of stages (beyond a ratio of 16).
        for (from, to) in [
            (44100u32, 48000u32),
            (48000, 44100),
            (96000, 48000),
            (1000, 48000),
            (48000, 1000),
            (8000, 384_000),
        ] {
            let channels = 2;
            let mut r = make(from, to, channels, quality, 1024).unwrap();
            let mut push_r = make(from, to, channels, quality, 1024).unwrap();
            let mut out = PlanarBuf::new(channels, 1024);
            let mut input = PlanarBuf::new(channels, 1024);
            for (i, s) in input.channel_mut(0).iter_mut().enumerate() {
                *s = (i as f32 * 0.01).sin();
            }
            let mut phase = 0.0f32;
            let mut emitted = 0usize;
            let n = allocations(|| {
                for (k, &frames) in BLOCKS.iter().cycle().take(300).enumerate() {
                    if k == 100 {
                        r.set_ratio_relative(1.001);
                        push_r.set_ratio_relative(0.999);
                    }
                    let mut view = out.view_mut(frames);
                    r.process_pull(&mut view, &mut |s: &mut PlanarMut| {
                        for ch in 0..s.channels() {
                            for x in s.channel_mut(ch) {
                                phase += 0.05;
                                *x = phase.sin();
                            }
                        }
                        s.frames()
                    });
                    push_r.process_push(input.view(frames), &mut |p: Planar| emitted += p.frames());
                    std::hint::black_box(r.delay_frames());
                }
            });
            assert_eq!(
                n,
                0,
                "{quality} {from}->{to} (adjustable: {}): {n} allocations",
                r.is_adjustable()
            );
            assert!(emitted > 0);
        }
    }
}

#[test]
fn kernels_do_not_allocate() {
    let stereo = ChannelMap::stereo();
    let surround = ChannelMap::default_for(6);
    let down = ChannelMixer::new(&surround, &stereo);
    let up = ChannelMixer::new(&ChannelMap::mono(), &surround);
    let mut six = PlanarBuf::new(6, 1024);
    let mut two = PlanarBuf::new(2, 1024);
    let mut one = PlanarBuf::new(1, 1024);
    let mut inter = vec![0.0f32; 2 * 1024];
    let mut bytes = vec![0u8; 2 * 1024 * 4];
    let mut acc = vec![0.0f32; 1024];
    let mut ramp = GainRamp::new(1.0);
    ramp.set_target(0.0, volume::DEFAULT_RAMP_FRAMES);

    let n = allocations(|| {
        for &frames in BLOCKS.iter().cycle().take(100) {
            up.process(one.view(frames), &mut six.view_mut(frames));
            down.process(six.view(frames), &mut two.view_mut(frames));
            ramp.apply(&mut two.view_mut(frames));
            if !ramp.is_ramping() {
                ramp.set_target(if ramp.current() == 0.0 { 1.0 } else { 0.0 }, 300);
            }
            volume::apply_gain(&mut two.channel_mut(0)[..frames], 0.5);
            let inter = &mut inter[..2 * frames];
            format::interleave(two.view(frames), inter);
            format::deinterleave(inter, &mut two.view_mut(frames));
            for fmt in SampleFormat::ALL {
                let bytes = &mut bytes[..2 * frames * fmt.bytes_per_sample()];
                format::encode_interleaved(fmt, inter, bytes);
                format::decode_interleaved(fmt, bytes, inter);
                format::encode_from_planar(fmt, two.view(frames), bytes);
                format::decode_to_planar(fmt, bytes, &mut two.view_mut(frames));
            }
            let acc = &mut acc[..frames];
            mix::mix_into(acc, &two.channel(0)[..frames]);
            mix::mix_into_gain(acc, &two.channel(1)[..frames], 0.3);
            mix::mix_into_ramp(acc, &two.channel(0)[..frames], 0.1, 0.9);
            mix::copy_ramp(&mut one.channel_mut(0)[..frames], acc, 1.0, 0.0);
        }
    });
    assert_eq!(n, 0, "{n} allocations");
}

#[test]
fn filter_chain_and_its_controls_do_not_allocate() {
    use quaver_dsp::filter::{
        Biquad, BiquadKind, BiquadParams, Convolver, Delay, FilterChain, Gain, Limiter,
    };
    let ir: Vec<f32> = (0..5000)
        .map(|i| (i as f32 * 0.37).sin() * (-(i as f32) / 800.0).exp())
        .collect();
    let peaking = BiquadParams {
        kind: BiquadKind::Peaking,
        freq: 1000.0,
        q: 1.0,
        gain_db: 3.0,
    };
    let mut chain = FilterChain::new(vec![
        Box::new(Biquad::new(2, 48_000.0, peaking).unwrap()),
        Box::new(Gain::new(-3.0).unwrap()),
        Box::new(Delay::new(2, 4800, &[0, 100]).unwrap()),
        Box::new(Convolver::new(2, &[ir], 256).unwrap()),
        Box::new(Limiter::new(2, 48_000.0, -1.0, 2.0, 50.0).unwrap()),
    ]);
    let mut buf = PlanarBuf::new(2, 1024);
    let n = allocations(|| {
        for (k, &frames) in BLOCKS.iter().cycle().take(200).enumerate() {
            for ch in 0..2 {
                for (i, x) in buf.channel_mut(ch)[..frames].iter_mut().enumerate() {
                    *x = ((k * 1024 + i) as f32 * 0.03).sin();
                }
            }
            if k == 30 {
                // A non-finite block: silenced and every filter reset, still no allocation.
                buf.channel_mut(0)[0] = f32::NAN;
            }
            match k % 40 {
                5 => chain.set_control(0, "gain_db", -6.0).unwrap(),
                6 => chain.set_control(0, "freq", 2500.0).unwrap(),
                10 => chain.set_control(1, "gain_db", 2.0).unwrap(),
                15 => chain.set_control(2, "frames", 700.0).unwrap(),
                20 => chain.set_control(4, "threshold_db", -6.0).unwrap(),
                _ => {}
            }
            chain.process(&mut buf.view_mut(frames));
        }
    });
    assert_eq!(n, 0, "{n} allocations");
    assert_eq!(chain.nonfinite_resets(), 1);
}

#[test]
fn channel_mixer_and_crossover_in_a_wider_chain_do_not_allocate() {
    use quaver_dsp::filter::{
        Biquad, BiquadKind, BiquadParams, ChannelMixer, Crossover, FilterChain,
    };
    let low_shelf = BiquadParams {
        kind: BiquadKind::LowShelf,
        freq: 60.0,
        q: 0.707,
        gain_db: 3.0,
    };
    // 2.1 bass management on 3 channels, 4 inside: the chain's own wide buffer, a
    // 3-way split of the sub's feed, and live weight changes during ramps.
    let mut chain = FilterChain::for_channels(
        vec![
            Box::new(ChannelMixer::new(&[vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0]]).unwrap()),
            Box::new(Crossover::new(2, 48_000.0, &[80.0], None).unwrap()),
            Box::new(Biquad::new(4, 48_000.0, low_shelf).unwrap()),
            Box::new(
                ChannelMixer::new(&[
                    vec![0.0, 1.0, 0.0, 0.0],
                    vec![0.0, 0.0, 0.0, 1.0],
                    vec![1.0, 0.0, 1.0, 0.0],
                ])
                .unwrap(),
            ),
            Box::new(
                Crossover::new(
                    3,
                    48_000.0,
                    &[200.0, 2_000.0],
                    Some(&[(0, 2), (1, 1), (2, 0)]),
                )
                .unwrap(),
            ),
        ],
        3,
    )
    .unwrap();
    let mut buf = PlanarBuf::new(3, 1024);
    let n = allocations(|| {
        for (k, &frames) in BLOCKS.iter().cycle().take(200).enumerate() {
            for ch in 0..3 {
                for (i, x) in buf.channel_mut(ch)[..frames].iter_mut().enumerate() {
                    *x = ((k * 1024 + i) as f32 * 0.03 * (ch + 1) as f32).sin();
                }
            }
            if k == 30 {
                buf.channel_mut(1)[0] = f32::INFINITY;
            }
            match k % 40 {
                5 => chain.set_control(0, "gain_0_1", 0.5).unwrap(),
                6 => chain.set_control(3, "gain_2_2", 0.25).unwrap(),
                7 => chain.set_control(3, "gain_2_2", 1.0).unwrap(),
                8 => assert!(chain.set_control(3, "gain_9_0", 1.0).is_err()),
                9 => assert!(chain.set_control(1, "freq", 30_000.0).is_err()),
                // Split frequencies move live: a crossfade, one change arriving
                // during it (pending), one refused for crossing its neighbour.
                10 => chain.set_control(1, "freq", 120.0).unwrap(),
                11 => chain.set_control(1, "freq", 90.0).unwrap(),
                12 => assert!(chain.set_control(4, "freq_0", 2_500.0).is_err()),
                13 => chain.set_control(4, "freq_1", 2_500.0).unwrap(),
                _ => {}
            }
            chain.process(&mut buf.view_mut(frames));
        }
    });
    assert_eq!(n, 0, "{n} allocations");
    assert_eq!(chain.nonfinite_resets(), 1);
}
