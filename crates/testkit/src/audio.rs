//! WAV files and the comparisons the audio tests make: what came out holds what went in,
//! sample for sample.

use std::path::Path;

/// Writes an interleaved S16 WAV.
pub fn write_wav_s16(path: &Path, rate: u32, channels: u16, samples: &[i16]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
}

/// Writes an interleaved f32 WAV.
pub fn write_wav_f32(path: &Path, rate: u32, channels: u16, samples: &[f32]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
}

/// Reads a WAV's samples as i16 (S16 files) with its spec.
pub fn read_wav_s16(path: &Path) -> (hound::WavSpec, Vec<i16>) {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    let s = r.samples::<i16>().map(|x| x.unwrap()).collect();
    (spec, s)
}

/// Reads an f32 WAV.
pub fn read_wav_f32(path: &Path) -> (hound::WavSpec, Vec<f32>) {
    let mut r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    let s = r.samples::<f32>().map(|x| x.unwrap()).collect();
    (spec, s)
}

/// A deterministic pseudo-random S16 signal (xorshift), scaled to ±`amp`.
pub fn noise_s16(n: usize, seed: u64, amp: i16) -> Vec<i16> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 33) as i64 % (amp as i64 + 1)) as i16 * if x & 1 == 0 { 1 } else { -1 }
        })
        .collect()
}

/// Asserts `out` contains `input` exactly, aligned on the first non-zero sample.
pub fn assert_contains_exactly<T: PartialEq + Default + Copy + std::fmt::Debug>(
    out: &[T],
    input: &[T],
    what: &str,
) {
    let start = onset(out)
        .checked_sub(onset(input))
        .expect("the output starts before the input could");
    assert!(
        out.len() >= start + input.len(),
        "{what}: output has {} samples after the onset, input {}",
        out.len() - start,
        input.len()
    );
    let diff: Vec<usize> = out[start..start + input.len()]
        .iter()
        .zip(input)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect();
    assert!(
        diff.is_empty(),
        "{what}: {} samples differ, first at {} ({:?} vs {:?})",
        diff.len(),
        diff[0],
        out[start + diff[0]],
        input[diff[0]]
    );
}

/// Index of the first non-zero sample.
pub fn onset<T: PartialEq + Default + Copy>(s: &[T]) -> usize {
    s.iter()
        .position(|&x| x != T::default())
        .expect("output is all silence")
}
