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

/// Writes an interleaved S32 WAV of `samples` shifted into the top 16 bits (the same
/// values as the S16 file of `samples`).
pub fn write_wav_s32(path: &Path, rate: u32, channels: u16, samples: &[i16]) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for &s in samples {
        w.write_sample((s as i32) << 16).unwrap();
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

/// The peak magnitude of one channel of interleaved `samples`, per block of `frames`
/// frames (the last block may be shorter): a level trace, e.g. of a ducked stream.
pub fn block_peaks(samples: &[f32], channels: usize, channel: usize, frames: usize) -> Vec<f32> {
    samples
        .chunks(frames * channels)
        .map(|b| {
            b.iter()
                .skip(channel)
                .step_by(channels)
                .fold(0f32, |m, &x| m.max(x.abs()))
        })
        .collect()
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

/// Raw audio recorded in ALSA format `fmt` (S16_LE, S32_LE or FLOAT_LE), in s16 units:
/// exact integers where it holds an s16 value exactly, fractions where it does not (a
/// fade, a conversion that lost it).
pub fn s16_values(raw: &[u8], fmt: &str) -> Vec<f64> {
    match fmt {
        "S16_LE" => raw
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f64)
            .collect(),
        "S32_LE" => raw
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f64 / 65536.0)
            .collect(),
        "FLOAT_LE" => raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64 * 32768.0)
            .collect(),
        other => panic!("a recorded format the tests do not compare: {other:?}"),
    }
}

/// Checks that `out` (in s16 units, [`s16_values`]) holds `input` exactly after leading
/// silence, except that its first `fade` samples may be `input` scaled by a gain in
/// [0, 1] (the fade-in of a card that starts with the stream, docs/engine/idle.md). The
/// start is found by matching a stretch past the fade, so a faded first sample cannot
/// shift it.
pub fn compare_recording(out: &[f64], input: &[i16], fade: usize) -> Result<(), String> {
    const PROBE: usize = 64;
    let k = fade + 16;
    let probe: Vec<f64> = input[k..k + PROBE].iter().map(|&x| x as f64).collect();
    let at = out
        .windows(PROBE)
        .position(|w| w == probe.as_slice())
        .ok_or_else(|| {
            format!(
                "input samples {k}..{} appear nowhere in the {} recorded samples \
                 (first non-zero recorded: {:?})",
                k + PROBE,
                out.len(),
                out.iter().find(|&&x| x != 0.0)
            )
        })?;
    let start = at
        .checked_sub(k)
        .ok_or("the recording starts inside the input")?;
    if out.len() < start + input.len() {
        return Err(format!(
            "the recording ends {} samples before the input does",
            start + input.len() - out.len()
        ));
    }
    if let Some(i) = out[..start].iter().position(|&x| x != 0.0) {
        return Err(format!(
            "sample {i} before the input's start is {} (not silence)",
            out[i]
        ));
    }
    let got = &out[start..start + input.len()];
    for (i, (&o, &x)) in got.iter().zip(input).take(fade).enumerate() {
        let x = x as f64;
        let g = if x == 0.0 { 0.0 } else { o / x };
        if (x == 0.0 && o != 0.0) || !(0.0..=1.0).contains(&g) {
            return Err(format!(
                "sample {i}, inside the fade-in, is {o} for {x}: not a gain in [0, 1]"
            ));
        }
    }
    let bad: Vec<usize> = (fade..input.len())
        .filter(|&i| got[i] != input[i] as f64)
        .collect();
    match bad.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "{} samples differ after the first {fade}; first at {i}: {} for {}",
            bad.len(),
            got[i],
            input[i]
        )),
    }
}

/// Amplitude of the `freq` Hz component of `x` at `rate` Hz (a whole number of its
/// periods long, so other such tones add nothing): a single-bin DFT.
pub fn tone_amplitude(x: &[f32], freq: f64, rate: f64) -> f64 {
    let w = 2.0 * std::f64::consts::PI * freq / rate;
    let (mut re, mut im) = (0.0, 0.0);
    for (n, &v) in x.iter().enumerate() {
        re += v as f64 * (w * n as f64).cos();
        im += v as f64 * (w * n as f64).sin();
    }
    2.0 * re.hypot(im) / x.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordings_are_read_in_s16_units() {
        let f: Vec<u8> = [0.5f32, -1.0, 1.0 / 65536.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(s16_values(&f, "FLOAT_LE"), [16384.0, -32768.0, 0.5]);
        let i: Vec<u8> = [0x4000_0000i32, 0x0000_8000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(s16_values(&i, "S32_LE"), [16384.0, 0.5]);
        assert_eq!(
            s16_values(&[0x00, 0x80, 0x01, 0x00], "S16_LE"),
            [-32768.0, 1.0]
        );
    }

    #[test]
    fn the_comparison_fails_on_any_lost_or_changed_sample() {
        // A 5 ms stereo fade at 48 kHz.
        const FADE: usize = 480;
        let input = noise_s16(4000, 9, 30000);
        let mut out: Vec<f64> = vec![0.0; 333];
        out.extend(input.iter().map(|&x| x as f64));
        out.extend([0.0; 50]);
        assert_eq!(compare_recording(&out, &input, 0), Ok(()));
        // A fade over the first 480 samples is allowed only where the caller allows it.
        let mut faded = out.clone();
        for i in 0..FADE {
            faded[333 + i] *= i as f64 / FADE as f64;
        }
        assert_eq!(compare_recording(&faded, &input, FADE), Ok(()));
        assert!(compare_recording(&faded, &input, 0).is_err());
        // One sample off by one LSB, late in the signal.
        let mut changed = out.clone();
        changed[333 + 3000] += 1.0;
        let e = compare_recording(&changed, &input, FADE).unwrap_err();
        assert!(e.contains("first at 3000"), "{e}");
        // A gain above 1 inside the fade, a cut tail, noise before the start.
        let mut loud = faded.clone();
        loud[333 + 10] = input[10] as f64 * 1.5;
        assert!(compare_recording(&loud, &input, FADE).is_err());
        assert!(compare_recording(&out[..333 + 3900], &input, 0).is_err());
        let mut early = out.clone();
        early[5] = 1.0;
        assert!(compare_recording(&early, &input, 0).is_err());
        // A recording that never holds the input.
        assert!(compare_recording(&vec![0.0; 9000], &input, 0).is_err());
    }
}
