//! `quaver play`: decode a file (or read raw PCM) and stream it to the server.

use crate::args::PlayArgs;
use crate::commands::connect;
use crate::decode::Decoder;
use crate::raw::RawReader;
use crate::signals::{self, StopFlag};
use crate::values::{format_time, io_message, parse_channels, parse_level, parse_sample_format};
use anyhow::{Context, Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use quaver_client::{ClientError, DEFAULT_STREAM_TIMEOUT, PlaybackStream};
use quaver_dsp::ChannelMap;
use quaver_protocol::StreamParams;
use quaver_protocol::message::MAX_NAME_BYTES;
use std::fs::File;
use std::io::{self, IsTerminal, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Frames read from raw input per write.
const RAW_CHUNK_FRAMES: usize = 4096;
/// How long one `write` waits before control returns to check for Ctrl-C.
const WRITE_POLL: Duration = Duration::from_millis(250);
/// How long the server may take no audio at all before playback gives up.
const STALL_LIMIT: Duration = Duration::from_secs(10);
/// After Ctrl-C, how long the main thread gets to stop by itself before the
/// signal thread ends the process (it may be blocked draining or reading stdin).
const STOP_GRACE: Duration = Duration::from_millis(500);

/// Where the audio comes from.
enum Source {
    File(Decoder),
    Raw {
        reader: RawReader<Box<dyn Read>>,
        name: String,
        rate: u32,
        channels: ChannelMap,
    },
}

impl Source {
    fn open(args: &PlayArgs) -> Result<Source> {
        let stdin = args.file.as_os_str() == "-";
        if !args.raw {
            let d = if stdin {
                Decoder::from_stdin()?
            } else {
                Decoder::open(&args.file)?
            };
            return Ok(Source::File(d));
        }
        let (Some(rate), Some(channels), Some(format)) =
            (args.rate, args.channels.as_deref(), args.format.as_deref())
        else {
            bail!("--raw needs --rate, --channels and --format");
        };
        if rate == 0 {
            bail!("--rate must be above 0");
        }
        let channels = parse_channels(channels)?;
        let format = parse_sample_format(format)?;
        let (input, name): (Box<dyn Read>, String) = if stdin {
            (Box::new(io::stdin().lock()), "stdin".into())
        } else {
            let name = args.file.display().to_string();
            let f = File::open(&args.file)
                .map_err(|e| anyhow!("cannot open {name}: {}", io_message(&e)))?;
            (Box::new(f), name)
        };
        Ok(Source::Raw {
            reader: RawReader::new(input, format, channels.len()),
            name,
            rate,
            channels,
        })
    }

    fn rate(&self) -> u32 {
        match self {
            Source::File(d) => d.info().rate,
            Source::Raw { rate, .. } => *rate,
        }
    }

    fn channels(&self) -> &ChannelMap {
        match self {
            Source::File(d) => &d.info().channels,
            Source::Raw { channels, .. } => channels,
        }
    }

    fn total_frames(&self) -> Option<u64> {
        match self {
            Source::File(d) => d.info().total_frames,
            Source::Raw { .. } => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Source::File(d) => {
                let i = d.info();
                format!("{}/{}", i.container, i.codec)
            }
            Source::Raw { .. } => "raw PCM".into(),
        }
    }

    /// Appends the next samples to `out`; 0 frames at the end.
    fn next(&mut self, out: &mut Vec<f32>) -> Result<usize> {
        match self {
            Source::File(d) => Ok(d.next_chunk(out)?),
            Source::Raw { reader, name, .. } => reader
                .read_frames(out, RAW_CHUNK_FRAMES)
                .map_err(|e| anyhow!("{name}: read error: {}", io_message(&e))),
        }
    }
}

/// The stream's name: the file's name, made acceptable to the server.
pub(crate) fn stream_name(file: &Path) -> String {
    let base = if file.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        file.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.display().to_string())
    };
    let mut name: String = base
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if name.len() > MAX_NAME_BYTES {
        let mut cut = MAX_NAME_BYTES;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    if name.is_empty() {
        name = "quaver play".into();
    }
    name
}

/// The progress display, which exists only when stderr is a terminal.
#[derive(Clone)]
struct Progress {
    bar: ProgressBar,
    rate: f64,
    total: Option<u64>,
    total_text: String,
}

impl Progress {
    fn new(bar: ProgressBar, rate: u32, total: Option<u64>) -> Progress {
        let style = match total {
            Some(_) => ProgressStyle::with_template("{bar:40} {msg}"),
            None => ProgressStyle::with_template("{spinner} {msg}"),
        };
        if let Ok(style) = style {
            bar.set_style(style);
        }
        if let Some(t) = total {
            bar.set_length(t);
        }
        let total_text = total.map_or_else(String::new, |t| format_time(t as f64 / rate as f64));
        Progress {
            bar,
            rate: rate as f64,
            total,
            total_text,
        }
    }

    fn show(&self, played: u64) {
        if self.bar.is_hidden() {
            return;
        }
        let pos = self.total.map_or(played, |t| played.min(t));
        self.bar.set_position(pos);
        let now = format_time(pos as f64 / self.rate);
        if self.total.is_some() {
            self.bar.set_message(format!("{now} / {}", self.total_text));
        } else {
            self.bar.set_message(now);
        }
    }
}

/// `quaver play`.
pub fn play(server: Option<&Path>, verbose: bool, args: &PlayArgs) -> Result<()> {
    let bar = if io::stderr().is_terminal() {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let bar_for_signal = bar.clone();
    let stop = signals::install(move || {
        std::thread::sleep(STOP_GRACE);
        bar_for_signal.finish_and_clear();
        std::process::exit(0);
    })
    .context("cannot set up signal handling")?;

    let volume = args.volume.as_deref().map(parse_level).transpose()?;
    let mut source = Source::open(args)?;
    let rate = source.rate();
    let channels = source.channels().clone();

    let mut conn = connect(server)?;
    let mut params = StreamParams::playback(stream_name(&args.file), rate, channels.clone());
    params.target = args.to.clone();
    params.latency_ms = args.latency_ms;
    params.volume = volume;
    params.role = args.role.clone();
    let mut stream = conn.create_playback(params)?;
    stream.set_timeout(WRITE_POLL);
    let node = stream.node();

    if verbose {
        let len = source
            .total_frames()
            .map(|t| format!(", {}", format_time(t as f64 / rate as f64)))
            .unwrap_or_default();
        let info = stream.info();
        bar.suspend(|| {
            eprintln!(
                "playing {}: {}, {rate} Hz, {} channels ({channels}){len}",
                if args.file.as_os_str() == "-" {
                    "stdin".into()
                } else {
                    args.file.display().to_string()
                },
                source.describe(),
                channels.len(),
            );
            eprintln!(
                "stream '{}' (node {node}), device rate {} Hz, quantum {}, queue {} frames",
                info.node_name,
                info.device_rate,
                info.quantum,
                stream.max_queued_frames()
            );
        });
    }

    let progress = Progress::new(bar.clone(), rate, source.total_frames());
    let ch = channels.len();
    let mut buf: Vec<f32> = Vec::with_capacity(RAW_CHUNK_FRAMES * ch);
    let mut source_error = None;
    loop {
        if stop.is_set() {
            return interrupted(&mut conn, node, &bar);
        }
        buf.clear();
        match source.next(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            // Play what decoded, then report.
            Err(e) => {
                source_error = Some(e);
                break;
            }
        }
        if !write_all(&mut stream, &buf, ch, &stop, &progress)? {
            return interrupted(&mut conn, node, &bar);
        }
    }

    drain(&mut stream, &progress)?;
    bar.finish_and_clear();
    if verbose {
        let frames = stream.frames_written();
        eprintln!(
            "played {} ({frames} frames), {} underruns",
            format_time(frames as f64 / rate as f64),
            stream.xruns()
        );
        if let Source::Raw { reader, .. } = &source
            && reader.trailing_bytes() > 0
        {
            eprintln!(
                "ignored {} bytes at the end (an incomplete frame)",
                reader.trailing_bytes()
            );
        }
    }
    // The connection closing would remove the node too; doing it now means the
    // node is gone by the time this command returns.
    let _ = conn.destroy_stream(node);
    match source_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Ctrl-C while writing: drop the queued audio and leave quietly.
fn interrupted(conn: &mut quaver_client::Connection, node: u32, bar: &ProgressBar) -> Result<()> {
    bar.finish_and_clear();
    let _ = conn.destroy_stream(node);
    Ok(())
}

/// Writes `samples`, returning false if a stop was requested first.
///
/// `write` is given a short timeout so that Ctrl-C is noticed between attempts;
/// a timeout is only an error once the server has taken nothing for `STALL_LIMIT`.
fn write_all(
    stream: &mut PlaybackStream,
    samples: &[f32],
    ch: usize,
    stop: &StopFlag,
    progress: &Progress,
) -> Result<bool> {
    let mut rest = samples;
    let mut stalled_since: Option<Instant> = None;
    while !rest.is_empty() {
        if stop.is_set() {
            return Ok(false);
        }
        let before = stream.frames_written();
        let result = stream.write(rest);
        let written = (stream.frames_written() - before) as usize;
        rest = &rest[(written * ch).min(rest.len())..];
        match result {
            Ok(()) => rest = &[],
            Err(ClientError::Timeout { .. }) => {
                if written > 0 {
                    stalled_since = None;
                } else {
                    let since = *stalled_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= STALL_LIMIT {
                        bail!(
                            "the server stopped taking audio (nothing consumed for {} s)",
                            STALL_LIMIT.as_secs()
                        );
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
        progress.show(stream.frames_played());
    }
    Ok(true)
}

/// Waits until everything written has been played, keeping the progress bar
/// moving meanwhile (the stream cannot be polled while `drain` blocks, so the
/// position is extrapolated from the clock).
fn drain(stream: &mut PlaybackStream, progress: &Progress) -> Result<()> {
    // Draining waits for the device; a quantum can be longer than the write poll.
    stream.set_timeout(DEFAULT_STREAM_TIMEOUT);
    let done = Arc::new(AtomicBool::new(false));
    let ticker = (!progress.bar.is_hidden()).then(|| {
        let done = done.clone();
        let progress = progress.clone();
        let start_pos = stream.frames_played();
        let end_pos = stream.frames_written();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::Acquire) {
                let ahead = (start.elapsed().as_secs_f64() * progress.rate) as u64;
                progress.show((start_pos + ahead).min(end_pos));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });
    let result = stream.drain();
    done.store(true, Ordering::Release);
    if let Some(t) = ticker {
        let _ = t.join();
    }
    result.map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names() {
        assert_eq!(stream_name(Path::new("/music/a song.flac")), "a song.flac");
        assert_eq!(stream_name(Path::new("-")), "stdin");
        assert_eq!(stream_name(Path::new("x\ny.wav")), "x?y.wav");
        let long = "é".repeat(200);
        let n = stream_name(Path::new(&long));
        assert!(n.len() <= MAX_NAME_BYTES && n.chars().all(|c| c == 'é'));
    }
}
