//! How a received stream's frames reach the graph: straight from the jitter buffer,
//! bit-exact, while the stream has the device's rate and the sender keeps our pace;
//! through an adjustable resampler when the rates differ or the sender's clock drifts
//! (the loop of [`PlayoutSteer`] says how fast to consume the stream).
//!
//! The switch from the direct path to the resampler happens once, mid-stream, when the
//! loop engages. A resampler started from silence would leave a gap of its filter's
//! delay (about a millisecond) in the sound; instead the last frames played are fed to
//! it again first, and its output up to where they end is dropped, so the first frame
//! it gives is the stream's next one, in phase with the ones before.

use quaver_dsp::resample::{ResampleError, ResampleQuality, StreamResampler};
use quaver_dsp::{PlanarBuf, PlanarMut};
use quaver_net::{EXCESS_S, JitterBuffer, PlayoutSteer};

/// Frames one resampled pull gives at most (longer reads are cut into such pieces). The
/// converter takes its input in blocks of about this size: a block of 4096 frames
/// (85 ms) emptied a 60 ms jitter buffer at once and underran it.
pub(super) const CHUNK: usize = 256;

/// Frames of the direct path kept for the switch: more than the resampler's filter
/// reaches back.
const HISTORY: usize = 256;

/// The last frames the direct path played, interleaved, oldest first.
struct History {
    samples: Vec<f32>,
    channels: usize,
    frames: usize,
}

impl History {
    fn new(channels: usize) -> Self {
        History {
            samples: vec![0.0; HISTORY * channels],
            channels,
            frames: 0,
        }
    }

    /// Appends interleaved frames, keeping the newest [`HISTORY`]. *RT*.
    fn push(&mut self, inter: &[f32]) {
        let cap = self.samples.len();
        let n = inter.len().min(cap);
        let held = self.frames * self.channels;
        let keep = held.min(cap - n);
        self.samples.copy_within(held - keep..held, 0);
        self.samples[keep..keep + n].copy_from_slice(&inter[inter.len() - n..]);
        self.frames = (keep + n) / self.channels;
    }
}

/// The path from the jitter buffer to the device's reads.
pub(super) struct Playout {
    /// From the stream's rate to the device's, adjustable.
    resampler: StreamResampler,
    /// Reads go through the resampler: the rates differ, or the loop engaged.
    resampling: bool,
    steer: PlayoutSteer,
    history: History,
    /// Where the switch's output before the stream's next frame goes.
    discard: PlanarBuf,
    /// Output frames between an input frame and its output at a ratio of 1, measured
    /// ([`impulse_lag`]).
    lag: usize,
    /// The jitter buffer's restarts and underruns last seen.
    restarts_seen: u64,
    device_rate: f64,
    /// Frames above the level held past which the excess is dropped ([`EXCESS_S`]).
    excess: f64,
    /// A consumption factor to use as if the loop said it ([`super::RtpRecv::force_steering`]).
    pub(super) forced: Option<f64>,
}

impl Playout {
    /// The path for a stream at `stream_rate` played at `device_rate`, with a jitter
    /// buffer of `target` stream frames. *control*: all allocation is here.
    pub(super) fn new(
        stream_rate: u32,
        device_rate: u32,
        channels: usize,
        target: usize,
    ) -> Result<Self, ResampleError> {
        let resampler = StreamResampler::new(
            stream_rate,
            device_rate,
            channels,
            ResampleQuality::Medium,
            CHUNK,
        )?;
        let lag = if stream_rate == device_rate {
            impulse_lag(stream_rate)?
        } else {
            0
        };
        let discard = PlanarBuf::new(channels, CHUNK);
        Ok(Playout {
            resampler,
            resampling: stream_rate != device_rate,
            steer: PlayoutSteer::new(target, stream_rate),
            history: History::new(channels),
            discard,
            lag,
            restarts_seen: 0,
            device_rate: device_rate as f64,
            excess: stream_rate as f64 * EXCESS_S,
            forced: None,
        })
    }

    /// The most input frames one resampled pull takes.
    pub(super) fn max_pull_input(&self) -> usize {
        self.resampler.max_pull_input()
    }

    /// Whether reads go through the resampler.
    #[cfg(test)]
    pub(super) fn resampling(&self) -> bool {
        self.resampling
    }

    /// The resampler's delay while reads go through it, in device frames.
    pub(super) fn delay_frames(&self) -> usize {
        if self.resampling {
            self.resampler.delay_frames()
        } else {
            0
        }
    }

    /// The loop's estimate of the sender's clock against ours (ppm) once it steers.
    pub(super) fn steering_ppm(&self) -> Option<f64> {
        self.steer.engaged().then(|| self.steer.estimate_ppm())
    }

    /// Fills `buf` from `jitter` (`inter`: interleaved scratch for at least
    /// [`Self::max_pull_input`] frames and 8192), steering first. *RT*.
    pub(super) fn read(
        &mut self,
        jitter: &mut JitterBuffer,
        inter: &mut [f32],
        buf: &mut PlanarMut<'_>,
    ) {
        self.steer(jitter, buf.frames());
        if self.resampling {
            self.read_resampled(jitter, inter, buf);
        } else {
            self.read_direct(jitter, inter, buf);
        }
    }

    /// One reading of the buffer's level for the loop; engages the resampler when the
    /// loop does. *RT*.
    fn steer(&mut self, jitter: &mut JitterBuffer, frames: usize) {
        let st = jitter.stats();
        let restarts = st.restarts + st.underruns;
        if restarts != self.restarts_seen {
            self.restarts_seen = restarts;
            self.steer.restart();
        }
        if !jitter.playing() {
            return;
        }
        let dt = frames as f64 / self.device_rate;
        let factor = self.steer.update(st.buffered as usize, dt, st.drift_ppm);
        // Well above the level held: this receiver's graph lost time (it stalled and
        // did not play what came meanwhile). Paid back at the loop's pace that would be
        // tens of seconds of latency its sender's other receivers do not have; dropped
        // (faded out and in), back to just above the level held.
        // Only once the loop steers: before that a level creeping with the drift is
        // what engages it (past a quarter of the target, which may exceed this).
        if self.steer.engaged()
            && self.steer.error_frames().is_some_and(|e| e > self.excess)
            && let Some(hold) = self.steer.held()
        {
            let want = st.buffered as f64 - hold - self.excess / 5.0;
            let dropped = jitter.drop_ahead(want.max(0.0) as usize);
            self.steer.shift(dropped as f64);
        }
        let (factor, engaged) = match self.forced {
            Some(f) => (f, true),
            None => (factor, self.steer.engaged()),
        };
        if !engaged {
            return;
        }
        if !self.resampling {
            self.switch(jitter);
        }
        // Consuming `factor` stream frames per frame played: output/input is 1/factor.
        self.resampler.set_ratio_relative(1.0 / factor);
    }

    /// Moves the direct path onto the resampler without a gap: the history first, its
    /// output dropped up to the stream's next frame. Equal rates only (a stream whose
    /// rates differ is resampled from its start), so the resampler's ratio is 1 here
    /// and input frame `i` comes out as output frame `i + lag`. *RT*.
    fn switch(&mut self, jitter: &mut JitterBuffer) {
        self.resampler.reset();
        let held = self.history.frames;
        let skip = held + self.lag;
        let ch = self.history.channels;
        let (history, mut fed) = (&self.history.samples[..held * ch], 0);
        let mut input_of = |input: &mut PlanarMut<'_>| {
            let m = input.frames();
            let from_history = (held - fed).min(m);
            deinterleave(
                &history[fed * ch..(fed + from_history) * ch],
                &mut input.part_mut(0, from_history),
            );
            fed += from_history;
            if from_history < m {
                pull_into(jitter, &mut input.part_mut(from_history, m - from_history));
            }
            m
        };
        let mut dropped = 0;
        while dropped < skip {
            let n = (skip - dropped).min(CHUNK);
            self.resampler
                .process_pull(&mut self.discard.view_mut(n), &mut input_of);
            dropped += n;
        }
        self.history.frames = 0;
        self.resampling = true;
    }

    /// Fills `buf` straight from the jitter buffer, keeping the newest frames for a
    /// switch. *RT*.
    fn read_direct(
        &mut self,
        jitter: &mut JitterBuffer,
        inter: &mut [f32],
        buf: &mut PlanarMut<'_>,
    ) {
        let ch = buf.channels();
        let max = inter.len() / ch;
        let mut done = 0;
        while done < buf.frames() {
            let n = (buf.frames() - done).min(max);
            let inter = &mut inter[..n * ch];
            jitter.pull(inter);
            self.history.push(inter);
            deinterleave(inter, &mut buf.part_mut(done, n));
            done += n;
        }
    }

    /// Fills `buf` through the resampler, which pulls the stream's frames it needs from
    /// the jitter buffer. *RT*.
    fn read_resampled(
        &mut self,
        jitter: &mut JitterBuffer,
        inter: &mut [f32],
        buf: &mut PlanarMut<'_>,
    ) {
        let mut done = 0;
        while done < buf.frames() {
            let n = (buf.frames() - done).min(CHUNK);
            let mut part = buf.part_mut(done, n);
            self.resampler
                .process_pull(&mut part, &mut |input: &mut PlanarMut<'_>| {
                    let (m, ch) = (input.frames(), input.channels());
                    let inter = &mut inter[..m * ch];
                    jitter.pull(inter);
                    deinterleave(inter, input);
                    m
                });
            done += n;
        }
    }
}

/// Where an impulse comes out of a fresh resampler at a ratio of 1, in frames after it
/// went in: what the switch drops besides the history. Measured rather than taken from
/// [`StreamResampler::delay_frames`], which is the filter's nominal delay and was 2
/// frames more than the sinc converter's real one at 48 kHz (a switch aligned by it
/// played 2 frames ahead). *control*.
fn impulse_lag(rate: u32) -> Result<usize, ResampleError> {
    const AT: usize = 256;
    const LEN: usize = 2048;
    // Built and pulled as the playout's own converter is.
    let mut r = StreamResampler::new(rate, rate, 1, ResampleQuality::Medium, CHUNK)?;
    let mut out = vec![0.0f32; LEN];
    let mut piece = PlanarBuf::new(1, CHUNK);
    let mut fed = 0;
    for at in (0..LEN).step_by(CHUNK) {
        r.process_pull(&mut piece.view_mut(CHUNK), &mut |input: &mut PlanarMut<
            '_,
        >| {
            let m = input.frames();
            for (i, s) in input.channel_mut(0).iter_mut().enumerate() {
                *s = if fed + i == AT { 1.0 } else { 0.0 };
            }
            fed += m;
            m
        });
        out[at..at + CHUNK].copy_from_slice(piece.channel(0));
    }
    let peak = out
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        .map_or(AT, |(i, _)| i);
    Ok(peak.saturating_sub(AT))
}

/// Fills `out` from the jitter buffer through a small interleaved scratch on the stack
/// (the switch's few frames, outside the reads' scratch). *RT*.
fn pull_into(jitter: &mut JitterBuffer, out: &mut PlanarMut<'_>) {
    const STEP: usize = 64;
    let ch = out.channels();
    let mut scratch = [0.0f32; STEP * quaver_net::MAX_CHANNELS as usize];
    let mut done = 0;
    while done < out.frames() {
        let n = (out.frames() - done).min(STEP);
        let inter = &mut scratch[..n * ch];
        jitter.pull(inter);
        deinterleave(inter, &mut out.part_mut(done, n));
        done += n;
    }
}

/// Interleaved `inter` into the planar `out` (as many frames as `out` has).
fn deinterleave(inter: &[f32], out: &mut PlanarMut<'_>) {
    let ch = out.channels();
    for c in 0..ch {
        for (o, frame) in out.channel_mut(c).iter_mut().zip(inter.chunks_exact(ch)) {
            *o = frame[c];
        }
    }
}
