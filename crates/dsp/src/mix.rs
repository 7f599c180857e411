//! Summing and scaling kernels: the inner loops of the mixer and of volume.
//!
//! The fast versions walk the slices in `chunks_exact(LANES)` so LLVM emits SIMD
//! without target-specific code; [`reference`] holds plain one-sample-at-a-time loops
//! with the same arithmetic, and the tests require both to agree bit for bit.
//! Ramps give sample `i` of `len` the gain `from + (to - from) * (i + 1) / len`
//! (computed as `from + step * (i + 1)`), and the last sample gets exactly `to`, so a
//! ramp that ends at unity hands over seamlessly to an untouched signal.

/// Samples per unrolled block: two AVX registers or four SSE/NEON registers of f32.
const LANES: usize = 16;

/// The indices `1..=LANES` as f32, so a ramp's per-sample offsets are constants.
const OFFSETS: [f32; LANES] = {
    let mut o = [0.0f32; LANES];
    let mut i = 0;
    while i < LANES {
        o[i] = (i + 1) as f32;
        i += 1;
    }
    o
};

/// Views a `chunks_exact(LANES)` chunk as an array, so LLVM knows its length and
/// drops the bounds checks that would otherwise block vectorisation.
#[inline(always)]
fn lanes(s: &[f32]) -> &[f32; LANES] {
    s.try_into().expect("chunk of LANES")
}

/// Mutable counterpart of [`lanes`].
#[inline(always)]
fn lanes_mut(s: &mut [f32]) -> &mut [f32; LANES] {
    s.try_into().expect("chunk of LANES")
}

/// `dst[i] += src[i]`. Panics unless both slices have the same length.
pub fn mix_into(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "mix_into: length");
    let mut d = dst.chunks_exact_mut(LANES);
    let mut s = src.chunks_exact(LANES);
    for (d, s) in (&mut d).zip(&mut s) {
        let (d, s) = (lanes_mut(d), lanes(s));
        for k in 0..LANES {
            d[k] += s[k];
        }
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d += *s;
    }
}

/// `dst[i] += src[i] * gain`. Panics unless both slices have the same length.
pub fn mix_into_gain(dst: &mut [f32], src: &[f32], gain: f32) {
    assert_eq!(dst.len(), src.len(), "mix_into_gain: length");
    let mut d = dst.chunks_exact_mut(LANES);
    let mut s = src.chunks_exact(LANES);
    for (d, s) in (&mut d).zip(&mut s) {
        let (d, s) = (lanes_mut(d), lanes(s));
        for k in 0..LANES {
            d[k] += s[k] * gain;
        }
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d += *s * gain;
    }
}

/// `dst[i] += src[i] * g(i)` with `g` ramping linearly from `from_gain` (exclusive)
/// to `to_gain` (inclusive) across the slice.
pub fn mix_into_ramp(dst: &mut [f32], src: &[f32], from_gain: f32, to_gain: f32) {
    assert_eq!(dst.len(), src.len(), "mix_into_ramp: length");
    let len = dst.len();
    if len == 0 {
        return;
    }
    let step = (to_gain - from_gain) / len as f32;
    let (dst, dst_last) = dst.split_at_mut(len - 1);
    let (src, src_last) = src.split_at(len - 1);
    let mut d = dst.chunks_exact_mut(LANES);
    let mut s = src.chunks_exact(LANES);
    let mut base = 0usize;
    for (d, s) in (&mut d).zip(&mut s) {
        let (d, s) = (lanes_mut(d), lanes(s));
        let b = base as f32;
        for k in 0..LANES {
            d[k] += s[k] * (from_gain + step * (b + OFFSETS[k]));
        }
        base += LANES;
    }
    for (i, (d, s)) in d.into_remainder().iter_mut().zip(s.remainder()).enumerate() {
        *d += *s * (from_gain + step * ((base + i + 1) as f32));
    }
    dst_last[0] += src_last[0] * to_gain;
}

/// `dst[i] = src[i] * g(i)` with the same ramp as [`mix_into_ramp`].
pub fn copy_ramp(dst: &mut [f32], src: &[f32], from_gain: f32, to_gain: f32) {
    assert_eq!(dst.len(), src.len(), "copy_ramp: length");
    let len = dst.len();
    if len == 0 {
        return;
    }
    let step = (to_gain - from_gain) / len as f32;
    let (dst, dst_last) = dst.split_at_mut(len - 1);
    let (src, src_last) = src.split_at(len - 1);
    let mut d = dst.chunks_exact_mut(LANES);
    let mut s = src.chunks_exact(LANES);
    let mut base = 0usize;
    for (d, s) in (&mut d).zip(&mut s) {
        let (d, s) = (lanes_mut(d), lanes(s));
        let b = base as f32;
        for k in 0..LANES {
            d[k] = s[k] * (from_gain + step * (b + OFFSETS[k]));
        }
        base += LANES;
    }
    for (i, (d, s)) in d.into_remainder().iter_mut().zip(s.remainder()).enumerate() {
        *d = *s * (from_gain + step * ((base + i + 1) as f32));
    }
    dst_last[0] = src_last[0] * to_gain;
}

/// `buf[i] *= g(i)` in place, with the same ramp as [`mix_into_ramp`].
pub fn scale_ramp(buf: &mut [f32], from_gain: f32, to_gain: f32) {
    let len = buf.len();
    if len == 0 {
        return;
    }
    let step = (to_gain - from_gain) / len as f32;
    let (buf, last) = buf.split_at_mut(len - 1);
    let mut d = buf.chunks_exact_mut(LANES);
    let mut base = 0usize;
    for d in &mut d {
        let d = lanes_mut(d);
        let b = base as f32;
        for k in 0..LANES {
            d[k] *= from_gain + step * (b + OFFSETS[k]);
        }
        base += LANES;
    }
    for (i, d) in d.into_remainder().iter_mut().enumerate() {
        *d *= from_gain + step * ((base + i + 1) as f32);
    }
    last[0] *= to_gain;
}

/// `buf[i] *= gain` in place.
pub fn scale(buf: &mut [f32], gain: f32) {
    let mut d = buf.chunks_exact_mut(LANES);
    for d in &mut d {
        for x in d.iter_mut() {
            *x *= gain;
        }
    }
    for x in d.into_remainder() {
        *x *= gain;
    }
}

/// One-sample-at-a-time versions of the kernels: the specification the fast ones
/// are tested against, and a baseline for benchmarks.
// Indexed loops on purpose: this is the obviously-correct form.
#[allow(clippy::needless_range_loop)]
pub mod reference {
    /// Scalar [`super::mix_into`].
    pub fn mix_into(dst: &mut [f32], src: &[f32]) {
        assert_eq!(dst.len(), src.len());
        for i in 0..dst.len() {
            dst[i] += src[i];
        }
    }

    /// Scalar [`super::mix_into_gain`].
    pub fn mix_into_gain(dst: &mut [f32], src: &[f32], gain: f32) {
        assert_eq!(dst.len(), src.len());
        for i in 0..dst.len() {
            dst[i] += src[i] * gain;
        }
    }

    /// The gain of sample `i` of a `len`-sample ramp.
    pub fn ramp_gain(i: usize, len: usize, from: f32, to: f32) -> f32 {
        if i + 1 == len {
            to
        } else {
            from + (to - from) / len as f32 * (i + 1) as f32
        }
    }

    /// Scalar [`super::mix_into_ramp`].
    pub fn mix_into_ramp(dst: &mut [f32], src: &[f32], from: f32, to: f32) {
        assert_eq!(dst.len(), src.len());
        let len = dst.len();
        for i in 0..len {
            dst[i] += src[i] * ramp_gain(i, len, from, to);
        }
    }

    /// Scalar [`super::copy_ramp`].
    pub fn copy_ramp(dst: &mut [f32], src: &[f32], from: f32, to: f32) {
        assert_eq!(dst.len(), src.len());
        let len = dst.len();
        for i in 0..len {
            dst[i] = src[i] * ramp_gain(i, len, from, to);
        }
    }

    /// Scalar [`super::scale_ramp`].
    pub fn scale_ramp(buf: &mut [f32], from: f32, to: f32) {
        let len = buf.len();
        for i in 0..len {
            buf[i] *= ramp_gain(i, len, from, to);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn f32(&mut self) -> f32 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
            (v >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
        fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.f32()).collect()
        }
    }

    // Lengths around the block size and its remainders, plus typical quanta.
    const LENS: [usize; 14] = [0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 100, 256, 1023, 1024];

    #[test]
    fn fast_kernels_match_reference_bit_for_bit() {
        let mut rng = Rng(0xdead_beef);
        for len in LENS {
            let src = rng.vec(len);
            let base = rng.vec(len);
            let g = rng.f32() * 2.0;
            let (from, to) = (rng.f32(), rng.f32());

            let (mut a, mut b) = (base.clone(), base.clone());
            mix_into(&mut a, &src);
            reference::mix_into(&mut b, &src);
            assert_eq!(a, b, "mix_into {len}");

            let (mut a, mut b) = (base.clone(), base.clone());
            mix_into_gain(&mut a, &src, g);
            reference::mix_into_gain(&mut b, &src, g);
            assert_eq!(a, b, "mix_into_gain {len}");

            let (mut a, mut b) = (base.clone(), base.clone());
            mix_into_ramp(&mut a, &src, from, to);
            reference::mix_into_ramp(&mut b, &src, from, to);
            assert_eq!(a, b, "mix_into_ramp {len}");

            let (mut a, mut b) = (base.clone(), base.clone());
            copy_ramp(&mut a, &src, from, to);
            reference::copy_ramp(&mut b, &src, from, to);
            assert_eq!(a, b, "copy_ramp {len}");

            let (mut a, mut b) = (base.clone(), base.clone());
            scale_ramp(&mut a, from, to);
            reference::scale_ramp(&mut b, from, to);
            assert_eq!(a, b, "scale_ramp {len}");

            let mut a = base.clone();
            scale(&mut a, g);
            let b: Vec<f32> = base.iter().map(|x| x * g).collect();
            assert_eq!(a, b, "scale {len}");
        }
    }

    #[test]
    fn ramp_follows_the_documented_formula() {
        let src = [1.0f32; 4];
        let mut dst = [0.0f32; 4];
        copy_ramp(&mut dst, &src, 0.0, 1.0);
        assert_eq!(dst, [0.25, 0.5, 0.75, 1.0]);
        let mut dst = [1.0f32; 4];
        mix_into_ramp(&mut dst, &src, 1.0, 0.0);
        assert_eq!(dst, [1.75, 1.5, 1.25, 1.0]);
        // The last sample lands exactly on the target even when the step is inexact.
        let src = vec![1.0f32; 1000];
        let mut dst = vec![0.0f32; 1000];
        copy_ramp(&mut dst, &src, 0.1, 0.7);
        assert_eq!(dst[999], 0.7);
        for w in dst.windows(2) {
            assert!(w[1] > w[0]);
        }
    }

    #[test]
    fn mixing_sums() {
        let mut dst = vec![0.25f32; 40];
        let src: Vec<f32> = (0..40).map(|i| i as f32).collect();
        mix_into(&mut dst, &src);
        mix_into_gain(&mut dst, &src, -0.5);
        for (i, d) in dst.iter().enumerate() {
            assert_eq!(*d, 0.25 + i as f32 * 0.5);
        }
    }

    #[test]
    #[should_panic]
    fn length_mismatch_panics() {
        mix_into(&mut [0.0; 3], &[0.0; 4]);
    }
}
