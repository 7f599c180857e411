//! Reading headerless PCM (`quaver play --raw`) into interleaved f32.

use quaver_dsp::SampleFormat;
use quaver_dsp::format::decode_interleaved;
use std::io::{self, Read};

/// Reads interleaved PCM of a known format from a byte stream, whole frames at a time.
pub struct RawReader<R> {
    inner: R,
    format: SampleFormat,
    channels: usize,
    /// Bytes read but not yet decoded; always less than one chunk.
    buf: Vec<u8>,
    /// How many bytes at the start of `buf` are valid.
    filled: usize,
    eof: bool,
    frames: u64,
}

impl<R: Read> RawReader<R> {
    /// Wraps `inner`, which holds `channels`-channel frames of `format`.
    pub fn new(inner: R, format: SampleFormat, channels: usize) -> Self {
        assert!(channels > 0, "RawReader needs at least one channel");
        RawReader {
            inner,
            format,
            channels,
            buf: Vec::new(),
            filled: 0,
            eof: false,
            frames: 0,
        }
    }

    /// Bytes in one frame.
    pub fn frame_bytes(&self) -> usize {
        self.format.bytes_per_sample() * self.channels
    }

    /// Reads up to `max_frames` whole frames and appends their samples to `out`;
    /// returns the frames appended, 0 only at the end of the input.
    ///
    /// Blocks until at least one whole frame is available (a pipe may deliver a
    /// frame in pieces). Bytes of an incomplete last frame are dropped at the end;
    /// see [`RawReader::trailing_bytes`].
    pub fn read_frames(&mut self, out: &mut Vec<f32>, max_frames: usize) -> io::Result<usize> {
        let fb = self.frame_bytes();
        let want = max_frames.max(1) * fb;
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        // Fill until there is a whole frame, or the input ends.
        while self.filled < fb && !self.eof {
            match self.inner.read(&mut self.buf[self.filled..want]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let frames = (self.filled / fb).min(max_frames.max(1));
        if frames == 0 {
            return Ok(0);
        }
        let bytes = frames * fb;
        let start = out.len();
        out.resize(start + frames * self.channels, 0.0);
        decode_interleaved(self.format, &self.buf[..bytes], &mut out[start..]);
        // Keep the part of a frame that arrived early for the next call.
        self.buf.copy_within(bytes..self.filled, 0);
        self.filled -= bytes;
        self.frames += frames as u64;
        Ok(frames)
    }

    /// Bytes of an incomplete frame left over at the end of the input.
    pub fn trailing_bytes(&self) -> usize {
        if self.eof { self.filled } else { 0 }
    }

    /// Frames returned so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `step` bytes per call, like a pipe.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn read_all<R: Read>(r: &mut RawReader<R>, chunk: usize) -> Vec<f32> {
        let mut out = Vec::new();
        while r.read_frames(&mut out, chunk).unwrap() > 0 {}
        out
    }

    #[test]
    fn s16le_stereo_bit_exact() {
        let samples: [i16; 6] = [0, 1, -1, i16::MAX, i16::MIN, 12345];
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        let mut r = RawReader::new(&bytes[..], SampleFormat::S16Le, 2);
        let out = read_all(&mut r, 2);
        let want: Vec<f32> = samples.iter().map(|&s| s as f32 / 32768.0).collect();
        assert_eq!(out, want);
        assert_eq!(r.frames_read(), 3);
        assert_eq!(r.trailing_bytes(), 0);
    }

    #[test]
    fn frames_split_across_reads_are_reassembled() {
        let samples: Vec<f32> = (0..30).map(|i| i as f32 / 64.0 - 0.2).collect();
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        for step in [1, 3, 5, 7, 64] {
            for chunk in [1, 4, 100] {
                let mut r = RawReader::new(Trickle { data: &bytes, step }, SampleFormat::F32Le, 3);
                assert_eq!(
                    read_all(&mut r, chunk),
                    samples,
                    "step {step} chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn s24le_and_u8() {
        let bytes = [0x00, 0x00, 0x80, 0xff, 0xff, 0x7f, 0x01, 0x00, 0x00];
        let mut r = RawReader::new(&bytes[..], SampleFormat::S24Le, 1);
        assert_eq!(
            read_all(&mut r, 16),
            vec![-1.0, 8_388_607.0 / 8_388_608.0, 1.0 / 8_388_608.0]
        );
        let mut r = RawReader::new(&[128u8, 0, 255][..], SampleFormat::U8, 1);
        assert_eq!(read_all(&mut r, 16), vec![0.0, -1.0, 127.0 / 128.0]);
    }

    #[test]
    fn incomplete_last_frame_is_dropped_and_reported() {
        // Two stereo s16 frames plus three stray bytes.
        let bytes = [0u8, 0, 0, 0, 0, 64, 0, 192, 1, 2, 3];
        let mut r = RawReader::new(&bytes[..], SampleFormat::S16Le, 2);
        let out = read_all(&mut r, 8);
        assert_eq!(out, vec![0.0, 0.0, 0.5, -0.5]);
        assert_eq!(r.trailing_bytes(), 3);
    }

    #[test]
    fn empty_input() {
        let mut r = RawReader::new(&[][..], SampleFormat::S32Le, 2);
        let mut out = Vec::new();
        assert_eq!(r.read_frames(&mut out, 10).unwrap(), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn read_errors_propagate() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("boom"))
            }
        }
        let mut r = RawReader::new(Broken, SampleFormat::S16Le, 1);
        assert_eq!(
            r.read_frames(&mut Vec::new(), 4).unwrap_err().to_string(),
            "boom"
        );
    }
}
