//! The WAV file sink: exact samples, freewheel speed, pacing, header finalization.

use quaver_devices::{
    Device, DeviceError, FileConfig, FileSink, VirtualClock, WaitStatus, WavFormat,
};
use quaver_dsp::{ChannelMap, PlanarBuf};
use std::path::Path;
use std::time::{Duration, Instant};

/// A small deterministic generator (xorshift64*), so the test needs no extra crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn config(path: &Path, format: WavFormat, freewheel: bool) -> FileConfig {
    FileConfig {
        path: path.to_path_buf(),
        rate: 48_000,
        channels: ChannelMap::stereo(),
        format,
        freewheel,
    }
}

/// Renders `seconds` of stereo in 256-frame cycles through the engine's call sequence,
/// with samples from `gen`; returns the samples written (interleaved) and the wall time.
fn render(
    dev: &mut FileSink,
    seconds: usize,
    mut generate: impl FnMut() -> f32,
) -> (Vec<f32>, Duration) {
    let q = 256;
    let frames = seconds * 48_000;
    let mut buf = PlanarBuf::new(2, q);
    let mut expect = Vec::with_capacity(frames * 2);
    let t = Instant::now();
    dev.start(q).unwrap();
    let mut done = 0;
    while done < frames {
        let n = q.min(frames - done);
        assert_eq!(dev.wait(n).unwrap(), WaitStatus::Ready);
        for ch in 0..2 {
            for s in &mut buf.channel_mut(ch)[..n] {
                *s = generate();
            }
        }
        for f in 0..n {
            expect.push(buf.channel(0)[f]);
            expect.push(buf.channel(1)[f]);
        }
        dev.write(buf.view(n)).unwrap();
        done += n;
    }
    let elapsed = t.elapsed();
    dev.close().unwrap();
    (expect, elapsed)
}

#[test]
fn freewheel_s16_render_is_fast_and_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.wav");
    let mut dev = FileSink::create(config(&path, WavFormat::S16, true)).unwrap();
    assert!(dev.info().freewheel);
    let mut rng = Rng(0x1234_5678);
    // Every 16-bit code is reachable: values k/32768 decode back to exactly k.
    let (expect, elapsed) = render(&mut dev, 5, || {
        (rng.next() >> 48) as u16 as i16 as f32 / 32768.0
    });
    assert!(
        elapsed < Duration::from_millis(1500),
        "5 s rendered in {elapsed:?}, not far faster than real time"
    );
    eprintln!("s16 render of 5 s took {elapsed:?}");
    assert_eq!(dev.counters().frames_written, 5 * 48_000);
    let mut r = hound::WavReader::open(&path).unwrap();
    let spec = r.spec();
    assert_eq!(
        (spec.channels, spec.sample_rate, spec.bits_per_sample),
        (2, 48_000, 16)
    );
    assert_eq!(spec.sample_format, hound::SampleFormat::Int);
    assert_eq!(r.duration(), 5 * 48_000);
    let got: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
    assert_eq!(got.len(), expect.len());
    for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
        assert_eq!(*g as f32 / 32768.0, *e, "sample {i}");
    }
}

#[test]
fn freewheel_f32_render_is_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.wav");
    let mut dev = FileSink::create(config(&path, WavFormat::F32, true)).unwrap();
    let mut rng = Rng(99);
    // Arbitrary finite floats, including ones outside [-1, 1]: F32 stores them untouched.
    let (expect, elapsed) = render(&mut dev, 5, || {
        loop {
            let x = f32::from_bits(rng.next() as u32);
            if x.is_finite() {
                break x;
            }
        }
    });
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    let mut r = hound::WavReader::open(&path).unwrap();
    assert_eq!(r.spec().sample_format, hound::SampleFormat::Float);
    let got: Vec<f32> = r.samples::<f32>().map(Result::unwrap).collect();
    assert_eq!(got.len(), expect.len());
    assert!(
        got.iter()
            .zip(&expect)
            .all(|(g, e)| g.to_bits() == e.to_bits())
    );
}

#[test]
fn s24_and_s32_round_trip_exact_codes_and_clip() {
    for (format, bits) in [(WavFormat::S24, 24), (WavFormat::S32, 32)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.wav");
        let mut dev = FileSink::create(FileConfig {
            channels: ChannelMap::mono(),
            ..config(&path, format, true)
        })
        .unwrap();
        let full = (1i64 << (bits - 1)) as f64;
        // Codes that an f32 holds exactly (at most 24 significant bits).
        let codes: Vec<i32> = vec![
            0,
            1 << (bits - 24),
            -(1 << (bits - 24)),
            12_345 << (bits - 24),
            -(1 << (bits - 2)),
            ((1i64 << (bits - 1)) - (1 << (bits - 24))) as i32,
            (-(1i64 << (bits - 1))) as i32,
        ];
        let mut input: Vec<f32> = codes.iter().map(|&c| (c as f64 / full) as f32).collect();
        input.extend([1.0, 3.0, -3.0, f32::NAN]);
        let mut buf = PlanarBuf::new(1, input.len());
        buf.channel_mut(0).copy_from_slice(&input);
        dev.wait(input.len()).unwrap();
        dev.write(buf.view(input.len())).unwrap();
        dev.close().unwrap();
        let mut r = hound::WavReader::open(&path).unwrap();
        assert_eq!(r.spec().bits_per_sample, bits);
        let got: Vec<i32> = r.samples::<i32>().map(Result::unwrap).collect();
        let max = ((1i64 << (bits - 1)) - 1) as i32;
        let min = (-(1i64 << (bits - 1))) as i32;
        let mut want = codes.clone();
        want.extend([max, max, min, 0]);
        assert_eq!(got, want, "{format}");
    }
}

#[test]
fn real_time_file_is_paced_by_its_clock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.wav");
    let clock = VirtualClock::new();
    let mut dev = FileSink::create_with_clock(
        config(&path, WavFormat::S16, false),
        Box::new(clock.clone()),
    )
    .unwrap();
    let buf = PlanarBuf::new(2, 480);
    dev.start(480).unwrap();
    for _ in 0..100 {
        assert_eq!(dev.wait(480).unwrap(), WaitStatus::Ready);
        dev.write(buf.view(480)).unwrap();
    }
    assert_eq!(clock.now(), 1_000_000_000);
    assert_eq!(dev.playback_delay(), 480);
    clock.advance(Duration::from_secs(3));
    assert_eq!(dev.wait(480).unwrap(), WaitStatus::Xrun);
    assert_eq!(dev.counters().underruns, 1);
    dev.close().unwrap();
    assert_eq!(hound::WavReader::open(&path).unwrap().duration(), 48_000);
}

#[test]
fn missing_channels_are_written_as_silence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.wav");
    let mut dev = FileSink::create(FileConfig {
        channels: ChannelMap::default_for(3),
        ..config(&path, WavFormat::S16, true)
    })
    .unwrap();
    let mut buf = PlanarBuf::new(2, 2);
    buf.channel_mut(0).copy_from_slice(&[0.5, -0.5]);
    buf.channel_mut(1).copy_from_slice(&[0.25, -0.25]);
    dev.write(buf.view(2)).unwrap();
    dev.close().unwrap();
    let got: Vec<i16> = hound::WavReader::open(&path)
        .unwrap()
        .samples::<i16>()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, vec![16384, 8192, 0, -16384, -8192, 0]);
}

#[test]
fn close_is_idempotent_and_drop_finalizes() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.wav");
    let mut dev = FileSink::create(config(&a, WavFormat::S16, true)).unwrap();
    let buf = PlanarBuf::new(2, 100);
    dev.write(buf.view(100)).unwrap();
    dev.close().unwrap();
    dev.close().unwrap();
    // Writes after close go nowhere (the control side owns the device by then).
    dev.write(buf.view(100)).unwrap();
    assert_eq!(hound::WavReader::open(&a).unwrap().duration(), 100);

    let b = dir.path().join("b.wav");
    {
        let mut dev = FileSink::create(config(&b, WavFormat::S16, true)).unwrap();
        dev.write(buf.view(100)).unwrap();
    }
    assert_eq!(hound::WavReader::open(&b).unwrap().duration(), 100);
}

#[test]
fn unwritable_path_is_an_io_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/out.wav");
    let err = FileSink::create(config(&path, WavFormat::S16, true))
        .err()
        .expect("creating in a missing directory must fail");
    match &err {
        DeviceError::Io { device, source } => {
            assert_eq!(device, "file");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Io, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn info_describes_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.wav");
    let dev = FileSink::create(config(&path, WavFormat::S24, false))
        .unwrap()
        .with_name("rec");
    let info = dev.info();
    assert_eq!(info.name, "rec");
    assert_eq!(info.playback, Some(ChannelMap::stereo()));
    assert_eq!(info.capture, None);
    assert!(!info.freewheel);
    assert!(info.description.contains("x.wav"), "{}", info.description);
}
