//! `quaver record`: capture a stream from the server into a WAV file.

use crate::args::RecordArgs;
use crate::commands::connect;
use crate::signals;
use crate::values::{WavFormat, format_time, io_message, parse_channels};
use anyhow::{Context, Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quaver_client::{ClientError, RecordStream};
use quaver_dsp::format::encode_interleaved;
use quaver_dsp::{ChannelMap, SampleFormat};
use quaver_protocol::StreamParams;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal};
use std::path::Path;
use std::time::{Duration, Instant};

/// Frames read from the stream per call.
const CHUNK_FRAMES: usize = 4096;
/// How long one `read` waits before control returns to check for Ctrl-C.
const READ_POLL: Duration = Duration::from_millis(250);
/// How long the server may deliver nothing before recording gives up.
const STALL_LIMIT: Duration = Duration::from_secs(10);

type Wav = hound::WavWriter<BufWriter<File>>;

fn hound_message(e: &hound::Error) -> String {
    match e {
        hound::Error::IoError(io) => io_message(io),
        other => other.to_string(),
    }
}

/// Converts f32 samples to the file's format with quaver's own rounding and
/// clipping, so a recording matches what `quaver_dsp` would produce anywhere else.
struct SampleWriter {
    format: WavFormat,
    bytes: Vec<u8>,
}

impl SampleWriter {
    fn write(&mut self, wav: &mut Wav, samples: &[f32]) -> Result<(), hound::Error> {
        let (fmt, bps) = match self.format {
            WavFormat::F32 => {
                for &s in samples {
                    wav.write_sample(s)?;
                }
                return Ok(());
            }
            WavFormat::S16 => (SampleFormat::S16Le, 2),
            WavFormat::S24 => (SampleFormat::S24Le, 3),
            WavFormat::S32 => (SampleFormat::S32Le, 4),
        };
        let bytes = &mut self.bytes;
        bytes.resize(samples.len() * bps, 0);
        encode_interleaved(fmt, samples, bytes);
        match self.format {
            WavFormat::S16 => {
                for b in bytes.chunks_exact(2) {
                    wav.write_sample(i16::from_le_bytes([b[0], b[1]]))?;
                }
            }
            WavFormat::S24 => {
                for b in bytes.chunks_exact(3) {
                    // Put the 24 bits at the top, then shift back to sign-extend.
                    wav.write_sample(i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8)?;
                }
            }
            _ => {
                for b in bytes.chunks_exact(4) {
                    wav.write_sample(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))?;
                }
            }
        }
        Ok(())
    }
}

/// `quaver record`.
pub fn record(server: Option<&Path>, verbose: bool, args: &RecordArgs) -> Result<()> {
    // Stopping is the normal way to end a recording: just raise the flag and let
    // the loop below finish the file.
    let stop = signals::install(|| {}).context("cannot set up signal handling")?;

    let format = args
        .format
        .as_deref()
        .map(WavFormat::parse)
        .transpose()?
        .unwrap_or(WavFormat::S16);
    let channels = args
        .channels
        .as_deref()
        .map(parse_channels)
        .transpose()?
        .unwrap_or_else(ChannelMap::stereo);
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        bail!("--duration must be a positive number of seconds");
    }
    if args.rate == Some(0) {
        bail!("--rate must be above 0");
    }
    let name = args.file.display().to_string();

    let mut conn = connect(server)?;
    let rate = match args.rate {
        Some(r) => r,
        None => conn.status()?.rate,
    };
    let limit = args.duration.map(|d| (d * rate as f64).round() as u64);
    let mut params =
        StreamParams::record(crate::play::stream_name(&args.file), rate, channels.clone());
    params.target = args.from.clone();
    params.latency_ms = args.latency_ms;
    let mut stream = conn.create_record(params)?;
    stream.set_timeout(READ_POLL);
    let node = stream.node();

    let spec = format.spec(channels.len() as u16, rate);
    let mut wav = match hound::WavWriter::create(&args.file, spec) {
        Ok(w) => w,
        Err(e) => {
            let _ = conn.destroy_stream(node);
            bail!("cannot create {name}: {}", hound_message(&e));
        }
    };
    if verbose {
        eprintln!(
            "recording {name}: {rate} Hz, {} channels ({channels}), {}, from {}",
            channels.len(),
            format.name(),
            args.from.as_deref().unwrap_or("the default source")
        );
    }

    let bar = progress_bar(limit);
    let mut writer = SampleWriter {
        format,
        bytes: Vec::new(),
    };
    let result = capture(&mut stream, &mut wav, &mut writer, limit, &stop, &bar, rate);
    bar.finish_and_clear();
    let _ = conn.destroy_stream(node);
    // Finish the file whatever happened, so what was captured stays readable.
    let frames = wav.duration();
    let finalized = wav.finalize();
    let frames_done = result.map_err(|e| e.context(format!("recording {name} stopped")))?;
    finalized.map_err(|e| anyhow!("cannot write {name}: {}", hound_message(&e)))?;
    debug_assert_eq!(frames as u64, frames_done);

    let xruns = stream.xruns();
    if xruns > 0 {
        eprintln!(
            "quaver: warning: {xruns} overrun{} while recording; the file has gaps",
            if xruns == 1 { "" } else { "s" }
        );
    }
    if verbose {
        eprintln!(
            "recorded {} ({frames_done} frames) to {name}",
            format_time(frames_done as f64 / rate as f64)
        );
    }
    Ok(())
}

fn progress_bar(limit: Option<u64>) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(limit, ProgressDrawTarget::stderr());
    let template = if limit.is_some() {
        "recording {bar:40} {msg}"
    } else {
        "recording {spinner} {msg}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// Reads until the frame limit, a stop signal or an error; returns frames written.
fn capture(
    stream: &mut RecordStream,
    wav: &mut Wav,
    writer: &mut SampleWriter,
    limit: Option<u64>,
    stop: &signals::StopFlag,
    bar: &ProgressBar,
    rate: u32,
) -> Result<u64> {
    let ch = stream.info().channels as usize;
    let mut buf = vec![0.0f32; CHUNK_FRAMES * ch];
    let mut got: u64 = 0;
    let mut idle_since: Option<Instant> = None;
    while !stop.is_set() {
        let want = match limit {
            Some(l) if got >= l => break,
            Some(l) => (l - got).min(CHUNK_FRAMES as u64) as usize,
            None => CHUNK_FRAMES,
        };
        match stream.read(&mut buf[..want * ch]) {
            Ok(n) => {
                writer
                    .write(wav, &buf[..n * ch])
                    .map_err(|e| anyhow!("write error: {}", hound_message(&e)))?;
                got += n as u64;
                idle_since = None;
                if !bar.is_hidden() {
                    bar.set_position(got);
                    bar.set_message(format_time(got as f64 / rate as f64));
                }
            }
            Err(ClientError::Timeout { .. }) => {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= STALL_LIMIT {
                    bail!("the server sent no audio for {} s", STALL_LIMIT.as_secs());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(format: WavFormat, samples: &[f32]) -> hound::WavReader<io::BufReader<File>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.wav");
        let mut wav = hound::WavWriter::create(&path, format.spec(2, 48000)).unwrap();
        let mut w = SampleWriter {
            format,
            bytes: Vec::new(),
        };
        w.write(&mut wav, samples).unwrap();
        wav.finalize().unwrap();
        // The reader keeps the file open, so the directory may go away.
        hound::WavReader::open(&path).unwrap()
    }

    const SAMPLES: [f32; 8] = [0.0, 0.5, -0.5, 1.0, -1.0, 2.0, 1.0 / 32768.0, -0.25];

    #[test]
    fn s16_samples_are_rounded_and_clipped() {
        let got: Vec<i16> = roundtrip(WavFormat::S16, &SAMPLES)
            .samples::<i16>()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, vec![0, 16384, -16384, 32767, -32768, 32767, 1, -8192]);
    }

    #[test]
    fn s24_samples_are_sign_extended() {
        let r = roundtrip(WavFormat::S24, &SAMPLES);
        assert_eq!(r.spec().bits_per_sample, 24);
        let got: Vec<i32> = r.into_samples::<i32>().map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![
                0, 4_194_304, -4_194_304, 8_388_607, -8_388_608, 8_388_607, 256, -2_097_152
            ]
        );
    }

    #[test]
    fn s32_and_f32() {
        let got: Vec<i32> = roundtrip(WavFormat::S32, &SAMPLES)
            .into_samples::<i32>()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got[1], 1 << 30);
        assert_eq!(got[4], i32::MIN);
        assert_eq!(got[3], i32::MAX);
        let got: Vec<f32> = roundtrip(WavFormat::F32, &SAMPLES)
            .into_samples::<f32>()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, SAMPLES.to_vec());
    }
}
