//! Decoding audio files (WAV, FLAC, Ogg Vorbis, MP3) to interleaved f32 with symphonia.
//!
//! [`Decoder::open`] decodes the first packet before returning, so a file that is
//! not audio, or whose first packet is already damaged, fails before anything is
//! sent to the server, and the rate and channel count are known even for formats
//! whose headers do not state them. Samples are converted with symphonia's
//! power-of-two scaling (s16 `x` → `x / 32768`, s24 `x` → `x / 2^23`), the same
//! as `quaver_dsp::format`, so integer PCM reaches the server bit-exactly.

use quaver_dsp::{ChannelMap, ChannelPosition};
use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;
use symphonia::core::audio::{ChannelLabel, Channels, Position};
use symphonia::core::codecs::audio::{AudioDecoder, AudioDecoderOptions};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, FormatReader, TrackType};
use symphonia::core::io::{MediaSource, MediaSourceStream, ReadOnlySource};
use symphonia::core::meta::MetadataOptions;

use crate::values::io_message;

/// Consecutive undecodable packets after which a file counts as corrupt rather
/// than as having a few damaged frames (which players conventionally skip).
const MAX_CONSECUTIVE_BAD_PACKETS: u32 = 16;

/// Why a file could not be (fully) decoded. `name` is the file as the user gave it.
#[derive(Debug)]
pub enum DecodeError {
    /// The file could not be opened.
    Open {
        /// The file.
        name: String,
        /// Why.
        source: io::Error,
    },
    /// Not a container or codec this build can read.
    Unsupported {
        /// The file.
        name: String,
    },
    /// A container without an audio track.
    NoAudioTrack {
        /// The file.
        name: String,
    },
    /// The file ends before the audio its header announced.
    Truncated {
        /// The file.
        name: String,
        /// Frames decoded before the end.
        decoded: u64,
        /// Frames the header announced.
        expected: u64,
    },
    /// The data is malformed.
    Corrupt {
        /// The file.
        name: String,
        /// What symphonia said.
        detail: String,
    },
    /// Fewer frames came out than the header announced (the demuxer skipped
    /// damaged data without saying so).
    Short {
        /// The file.
        name: String,
        /// Frames decoded.
        decoded: u64,
        /// Frames the header announced.
        expected: u64,
    },
    /// Some packets could not be decoded and were skipped.
    DamagedPackets {
        /// The file.
        name: String,
        /// How many were skipped.
        count: u32,
    },
    /// The stream changes rate or channel count midway, which a stream cannot follow.
    FormatChange {
        /// The file.
        name: String,
    },
    /// Reading failed.
    Io {
        /// The file.
        name: String,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Open { name, source } => {
                write!(f, "cannot open {name}: {}", io_message(source))
            }
            DecodeError::Unsupported { name } => {
                write!(f, "{name}: unsupported or unrecognised audio format")
            }
            DecodeError::NoAudioTrack { name } => write!(f, "{name}: contains no audio track"),
            DecodeError::Truncated {
                name,
                decoded,
                expected,
            } => write!(
                f,
                "{name}: file is truncated (audio ends after {decoded} of {expected} frames)"
            ),
            DecodeError::Corrupt { name, detail } => {
                write!(f, "{name}: corrupt audio data ({detail})")
            }
            DecodeError::Short {
                name,
                decoded,
                expected,
            } => write!(
                f,
                "{name}: corrupt or truncated audio data (only {decoded} of {expected} frames could be decoded)"
            ),
            DecodeError::DamagedPackets { name, count } => write!(
                f,
                "{name}: corrupt audio data ({count} damaged packet{} skipped)",
                if *count == 1 { "" } else { "s" }
            ),
            DecodeError::FormatChange { name } => write!(
                f,
                "{name}: the sample rate or channel count changes midway, which is not supported"
            ),
            DecodeError::Io { name, source } => {
                write!(f, "{name}: read error: {}", io_message(source))
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// What a decoded file contains.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioInfo {
    /// Sample rate in Hz.
    pub rate: u32,
    /// Channel positions of the interleaved frames.
    pub channels: ChannelMap,
    /// Frames in the file, when the container says.
    pub total_frames: Option<u64>,
    /// Container name (`wave`, `flac`, `ogg`, `mp3`, …).
    pub container: String,
    /// Codec name (`pcm_s16le`, `flac`, `vorbis`, `mp3`, …).
    pub codec: String,
}

/// Streams decoded audio out of a file, packet by packet.
pub struct Decoder {
    name: String,
    reader: Box<dyn FormatReader>,
    decoder: Box<dyn AudioDecoder>,
    track_id: u32,
    info: AudioInfo,
    /// Samples decoded by `open` that the first `next_chunk` hands out.
    first: Vec<f32>,
    frames_out: u64,
    bad_packets: u32,
    consecutive_bad: u32,
    done: bool,
}

impl fmt::Debug for Decoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decoder")
            .field("name", &self.name)
            .field("info", &self.info)
            .field("frames_out", &self.frames_out)
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// Opens and probes a file.
    pub fn open(path: &Path) -> Result<Decoder, DecodeError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(|source| DecodeError::Open {
            name: name.clone(),
            source,
        })?;
        // A directory opens fine on Linux but reads fail with a confusing EISDIR later.
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(DecodeError::Open {
                name,
                source: io::Error::from_raw_os_error(libc::EISDIR),
            });
        }
        let ext = path.extension().and_then(|e| e.to_str());
        Self::from_source(Box::new(file), &name, ext)
    }

    /// Decodes from standard input (not seekable; formats are recognised by content).
    pub fn from_stdin() -> Result<Decoder, DecodeError> {
        Self::from_source(Box::new(ReadOnlySource::new(io::stdin())), "stdin", None)
    }

    /// Decodes from any media source; `name` is used in error messages and
    /// `extension` (if any) helps recognise the format.
    pub fn from_source(
        source: Box<dyn MediaSource>,
        name: &str,
        extension: Option<&str>,
    ) -> Result<Decoder, DecodeError> {
        let name = name.to_string();
        let mss = MediaSourceStream::new(source, Default::default());
        let mut hint = Hint::new();
        if let Some(ext) = extension {
            hint.with_extension(ext);
        }
        let reader = symphonia::default::get_probe()
            .probe(
                &hint,
                mss,
                FormatOptions::default(),
                MetadataOptions::default(),
            )
            .map_err(|e| open_error(&name, e))?;
        let track = reader
            .default_track(TrackType::Audio)
            .ok_or_else(|| DecodeError::NoAudioTrack { name: name.clone() })?;
        let params = track
            .codec_params
            .as_ref()
            .and_then(|p| p.audio())
            .ok_or_else(|| DecodeError::NoAudioTrack { name: name.clone() })?
            .clone();
        let track_id = track.id;
        let total_frames = track.num_frames;
        let decoder = symphonia::default::get_codecs()
            .make_audio_decoder(&params, &AudioDecoderOptions::default())
            .map_err(|e| open_error(&name, e))?;
        let codec = decoder.codec_info().short_name.to_string();
        let container = reader.format_info().short_name.to_string();
        // Provisional until the first packet is decoded: some containers leave these out.
        let info = AudioInfo {
            rate: params.sample_rate.unwrap_or(0),
            channels: ChannelMap(Vec::new()),
            total_frames,
            container,
            codec,
        };
        let mut d = Decoder {
            name,
            reader,
            decoder,
            track_id,
            info,
            first: Vec::new(),
            frames_out: 0,
            bad_packets: 0,
            consecutive_bad: 0,
            done: false,
        };
        let mut first = Vec::new();
        d.decode_packet(&mut first, params.channels.as_ref())?;
        if d.info.channels.is_empty() {
            // No audio at all (e.g. an empty data chunk): fall back on the header,
            // so an empty but valid file plays as silence of length zero.
            let n = params.channels.as_ref().map_or(0, Channels::count);
            if n == 0 || d.info.rate == 0 {
                return Err(DecodeError::Corrupt {
                    name: d.name,
                    detail: "no audio and no sample rate or channel count".into(),
                });
            }
            d.info.channels = channel_map(params.channels.as_ref().unwrap(), n, &d.info.container);
        }
        d.first = first;
        Ok(d)
    }

    /// What the file contains.
    pub fn info(&self) -> &AudioInfo {
        &self.info
    }

    /// Frames handed out so far.
    pub fn frames_decoded(&self) -> u64 {
        self.frames_out
    }

    /// Appends the next decoded interleaved samples to `out` and returns the frames
    /// appended; `Ok(0)` at the end. An error ends the stream: the audio before it
    /// has already been handed out, so a caller can play it and then report.
    pub fn next_chunk(&mut self, out: &mut Vec<f32>) -> Result<usize, DecodeError> {
        if !self.first.is_empty() {
            let frames = self.first.len() / self.info.channels.len();
            out.append(&mut self.first);
            self.frames_out += frames as u64;
            return Ok(frames);
        }
        let frames = self.decode_packet(out, None)?;
        self.frames_out += frames as u64;
        Ok(frames)
    }

    /// Decodes until one packet yields audio, appending it to `out`.
    /// `header_channels` is only given for the first packet, to fix the layout.
    fn decode_packet(
        &mut self,
        out: &mut Vec<f32>,
        header_channels: Option<&Channels>,
    ) -> Result<usize, DecodeError> {
        if self.done {
            return Ok(0);
        }
        let result = self.decode_packet_inner(out, header_channels);
        if !matches!(result, Ok(n) if n > 0) {
            self.done = true;
        }
        result
    }

    fn decode_packet_inner(
        &mut self,
        out: &mut Vec<f32>,
        header_channels: Option<&Channels>,
    ) -> Result<usize, DecodeError> {
        loop {
            let packet = match self.reader.next_packet() {
                Ok(Some(p)) => p,
                // A chained Ogg stream starts a new logical stream here; its format may
                // differ, and a stream cannot follow, so playback ends with the first.
                Ok(None) | Err(SymError::ResetRequired) => return self.end(),
                Err(SymError::IoError(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    // Streamed WAVs (unknown length) end this way; anything with a
                    // known length that ends early is truncated.
                    return match self.info.total_frames {
                        Some(expected) if self.frames_out < expected => {
                            Err(DecodeError::Truncated {
                                name: self.name.clone(),
                                decoded: self.frames_out,
                                expected,
                            })
                        }
                        _ => self.end(),
                    };
                }
                Err(SymError::IoError(source)) => {
                    return Err(DecodeError::Io {
                        name: self.name.clone(),
                        source,
                    });
                }
                Err(e) => {
                    return Err(DecodeError::Corrupt {
                        name: self.name.clone(),
                        detail: e.to_string(),
                    });
                }
            };
            if packet.track_id != self.track_id {
                continue;
            }
            match self.decoder.decode(&packet) {
                Ok(buf) => {
                    self.consecutive_bad = 0;
                    let frames = buf.frames();
                    if frames == 0 {
                        continue;
                    }
                    let spec = buf.spec();
                    let n_ch = spec.channels().count();
                    if self.info.channels.is_empty() {
                        // First audio: fix rate and layout for the whole stream.
                        let chans = header_channels.unwrap_or(spec.channels());
                        self.info.channels = channel_map(chans, n_ch, &self.info.container);
                        if self.info.rate == 0 {
                            self.info.rate = spec.rate();
                        }
                    } else if n_ch != self.info.channels.len() || spec.rate() != self.info.rate {
                        return Err(DecodeError::FormatChange {
                            name: self.name.clone(),
                        });
                    }
                    let start = out.len();
                    out.resize(start + frames * n_ch, 0.0);
                    buf.copy_to_slice_interleaved(&mut out[start..]);
                    return Ok(frames);
                }
                // A damaged packet: skip it like every player does, but remember it so
                // the user learns the file is not intact.
                Err(SymError::DecodeError(detail)) => {
                    self.bad_packets += 1;
                    self.consecutive_bad += 1;
                    if self.consecutive_bad >= MAX_CONSECUTIVE_BAD_PACKETS {
                        return Err(DecodeError::Corrupt {
                            name: self.name.clone(),
                            detail: format!("malformed stream: {detail}"),
                        });
                    }
                }
                Err(SymError::Unsupported(_)) => {
                    return Err(DecodeError::Unsupported {
                        name: self.name.clone(),
                    });
                }
                Err(SymError::IoError(source)) => {
                    return Err(DecodeError::Io {
                        name: self.name.clone(),
                        source,
                    });
                }
                Err(e) => {
                    return Err(DecodeError::Corrupt {
                        name: self.name.clone(),
                        detail: e.to_string(),
                    });
                }
            }
        }
    }

    fn end(&mut self) -> Result<usize, DecodeError> {
        // Only WAV and FLAC headers state an exact length: MP3 lengths may be
        // estimated from the bitrate, and Ogg states none.
        if let Some(expected) = self.info.total_frames
            && matches!(self.info.container.as_str(), "wave" | "flac")
            && self.frames_out < expected
        {
            return Err(DecodeError::Short {
                name: self.name.clone(),
                decoded: self.frames_out,
                expected,
            });
        }
        if self.bad_packets > 0 {
            return Err(DecodeError::DamagedPackets {
                name: self.name.clone(),
                count: self.bad_packets,
            });
        }
        Ok(0)
    }
}

/// Maps a probe or decoder-creation failure to the error a user should see.
fn open_error(name: &str, e: SymError) -> DecodeError {
    let name = name.to_string();
    match e {
        SymError::Unsupported(_) => DecodeError::Unsupported { name },
        // Too short to hold any header: not recognisable as audio.
        SymError::IoError(ref io) if io.kind() == io::ErrorKind::UnexpectedEof => {
            DecodeError::Unsupported { name }
        }
        SymError::IoError(source) => DecodeError::Io { name, source },
        other => DecodeError::Corrupt {
            name,
            detail: other.to_string(),
        },
    }
}

/// The channel map for a file: its own positions if it states them and they all
/// have a quaver equivalent, else the usual layout for the count.
fn channel_map(chans: &Channels, count: usize, container: &str) -> ChannelMap {
    if count == 1 {
        return ChannelMap::mono();
    }
    let mapped = match chans {
        Channels::Positioned(mask) => {
            // Plain (non-extensible) WAV carries only a count, which symphonia turns
            // into the first `count` WAVE positions; that is a guess, not the file's
            // statement, and for 3 or 4 channels it disagrees with the usual layout.
            if container == "wave" && Position::from_count(count as u32) == Some(*mask) {
                None
            } else {
                mask.iter().map(map_position).collect::<Option<Vec<_>>>()
            }
        }
        Channels::Custom(labels) => labels
            .iter()
            .map(|l| match l {
                ChannelLabel::Positioned(p) => map_position(*p),
                _ => None,
            })
            .collect::<Option<Vec<_>>>(),
        _ => None,
    };
    match mapped {
        Some(v) if v.len() == count => ChannelMap(v),
        _ => ChannelMap::default_for(count),
    }
}

fn map_position(p: Position) -> Option<ChannelPosition> {
    Some(match p {
        Position::FRONT_LEFT => ChannelPosition::FL,
        Position::FRONT_RIGHT => ChannelPosition::FR,
        Position::FRONT_CENTER => ChannelPosition::FC,
        Position::LFE1 => ChannelPosition::LFE,
        Position::REAR_LEFT => ChannelPosition::RL,
        Position::REAR_RIGHT => ChannelPosition::RR,
        Position::REAR_CENTER => ChannelPosition::RC,
        Position::SIDE_LEFT => ChannelPosition::SL,
        Position::SIDE_RIGHT => ChannelPosition::SR,
        _ => return None,
    })
}

/// Decodes a whole file into memory (tests and short files); fails on any error.
pub fn decode_file(path: &Path) -> Result<(AudioInfo, Vec<f32>), DecodeError> {
    let mut d = Decoder::open(path)?;
    let mut out = Vec::new();
    while d.next_chunk(&mut out)? > 0 {}
    Ok((d.info().clone(), out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn write_wav<S: hound::Sample + Copy>(
        dir: &Path,
        name: &str,
        spec: hound::WavSpec,
        samples: &[S],
    ) -> PathBuf {
        let path = dir.join(name);
        let mut w = hound::WavWriter::create(&path, spec).unwrap();
        for &s in samples {
            w.write_sample(s).unwrap();
        }
        w.finalize().unwrap();
        path
    }

    fn spec(channels: u16, rate: u32, bits: u16, float: bool) -> hound::WavSpec {
        hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: bits,
            sample_format: if float {
                hound::SampleFormat::Float
            } else {
                hound::SampleFormat::Int
            },
        }
    }

    /// A deterministic test signal covering full scale, zero and odd values.
    fn s16_signal(n: usize) -> Vec<i16> {
        let mut v = vec![0, 1, -1, i16::MAX, i16::MIN];
        let mut x: u32 = 12345;
        while v.len() < n {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            v.push((x >> 16) as i16);
        }
        v.truncate(n);
        v
    }

    #[test]
    fn s16_mono_is_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        let samples = s16_signal(3001);
        let path = write_wav(dir.path(), "m.wav", spec(1, 8000, 16, false), &samples);
        let (info, out) = decode_file(&path).unwrap();
        assert_eq!(info.rate, 8000);
        assert_eq!(info.channels, ChannelMap::mono());
        assert_eq!(info.total_frames, Some(3001));
        assert_eq!(info.container, "wave");
        let want: Vec<f32> = samples.iter().map(|&s| s as f32 / 32768.0).collect();
        assert_eq!(out.len(), want.len());
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "sample {i}");
        }
    }

    #[test]
    fn s16_stereo_is_bit_exact_and_interleaved() {
        let dir = tempfile::tempdir().unwrap();
        let samples = s16_signal(2 * 2500);
        let path = write_wav(dir.path(), "s.wav", spec(2, 44100, 16, false), &samples);
        let (info, out) = decode_file(&path).unwrap();
        assert_eq!(info.rate, 44100);
        assert_eq!(info.channels, ChannelMap::stereo());
        let want: Vec<f32> = samples.iter().map(|&s| s as f32 / 32768.0).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn s24_stereo_is_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        let mut samples: Vec<i32> = vec![0, 1, -1, 8_388_607, -8_388_608, 4_000_000];
        samples.extend((0..2000).map(|i| (i * 4099 % 16_777_216) - 8_388_608));
        let path = write_wav(dir.path(), "s24.wav", spec(2, 48000, 24, false), &samples);
        let (info, out) = decode_file(&path).unwrap();
        assert_eq!(info.channels, ChannelMap::stereo());
        let want: Vec<f32> = samples.iter().map(|&s| s as f32 / 8_388_608.0).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn f32_mono_is_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<f32> = (0..1500)
            .map(|i| ((i as f32) * 0.013).sin() * 0.9)
            .chain([1.0, -1.0, 0.0, 1.5, -2.0, f32::MIN_POSITIVE])
            .collect();
        let path = write_wav(dir.path(), "f.wav", spec(1, 22050, 32, true), &samples);
        let (info, out) = decode_file(&path).unwrap();
        assert_eq!(info.rate, 22050);
        assert_eq!(info.channels, ChannelMap::mono());
        assert_eq!(out.len(), samples.len());
        for (a, b) in out.iter().zip(&samples) {
            assert_eq!(a.to_bits(), b.to_bits());
        }
    }

    #[test]
    fn f32_stereo_and_u8() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<f32> = (0..400).map(|i| (i as f32 - 200.0) / 256.0).collect();
        let path = write_wav(dir.path(), "f2.wav", spec(2, 96000, 32, true), &samples);
        let (info, out) = decode_file(&path).unwrap();
        assert_eq!((info.rate, info.channels.len()), (96000, 2));
        assert_eq!(out, samples);

        // hound takes 8-bit samples as i8 and stores them offset by 128.
        let bytes: Vec<i8> = vec![0, -128, 127, 64];
        let path = write_wav(dir.path(), "u8.wav", spec(1, 8000, 8, false), &bytes);
        let (_, out) = decode_file(&path).unwrap();
        assert_eq!(out, vec![0.0, -1.0, 127.0 / 128.0, 0.5]);
    }

    #[test]
    fn multichannel_wav_gets_the_usual_layout() {
        let dir = tempfile::tempdir().unwrap();
        for (n, want) in [
            (4, ChannelMap::default_for(4)),
            (6, ChannelMap::default_for(6)),
            (3, ChannelMap::default_for(3)),
        ] {
            let samples = s16_signal(n * 100);
            let path = write_wav(
                dir.path(),
                &format!("c{n}.wav"),
                spec(n as u16, 48000, 16, false),
                &samples,
            );
            let (info, out) = decode_file(&path).unwrap();
            assert_eq!(info.channels, want, "{n} channels");
            assert_eq!(out.len(), samples.len());
        }
    }

    #[test]
    fn streaming_yields_all_frames_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let samples = s16_signal(2 * 10_000);
        let path = write_wav(dir.path(), "long.wav", spec(2, 48000, 16, false), &samples);
        let mut d = Decoder::open(&path).unwrap();
        let mut out = Vec::new();
        let mut calls = 0;
        loop {
            let before = out.len();
            let n = d.next_chunk(&mut out).unwrap();
            if n == 0 {
                break;
            }
            assert_eq!(out.len() - before, n * 2);
            calls += 1;
        }
        assert!(calls > 1);
        assert_eq!(d.frames_decoded(), 10_000);
        assert_eq!(out.len(), samples.len());
        // After the end it stays at the end.
        assert_eq!(d.next_chunk(&mut out).unwrap(), 0);
    }

    #[test]
    fn truncated_wav_gives_the_audio_before_the_cut_then_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let samples = s16_signal(20_000);
        let path = write_wav(dir.path(), "t.wav", spec(1, 8000, 16, false), &samples);
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // 44-byte header plus 10001 samples: the cut falls inside a sample.
        f.set_len(44 + 2 * 10_000 + 1).unwrap();
        drop(f);

        assert!(matches!(
            decode_file(&path),
            Err(DecodeError::Truncated { .. })
        ));

        let mut d = Decoder::open(&path).unwrap();
        let mut out = Vec::new();
        let err = loop {
            match d.next_chunk(&mut out) {
                Ok(0) => panic!("truncation not detected"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("{}: file is truncated", path.display())),
            "{msg}"
        );
        assert!(msg.contains("of 20000 frames"), "{msg}");
        // What came out is the start of the file, unchanged.
        assert!(!out.is_empty() && out.len() <= 10_000);
        for (a, &b) in out.iter().zip(&samples) {
            assert_eq!(*a, b as f32 / 32768.0);
        }
        // The stream stays ended.
        assert_eq!(d.next_chunk(&mut out).unwrap(), 0);
    }

    #[test]
    fn wav_cut_inside_the_header_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_wav(
            dir.path(),
            "h.wav",
            spec(2, 8000, 16, false),
            &s16_signal(100),
        );
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(30).unwrap();
        drop(f);
        let err = decode_file(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}: ", path.display())), "{err}");
    }

    #[test]
    fn empty_wav_is_valid_and_silent() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_wav::<i16>(dir.path(), "e.wav", spec(2, 32000, 16, false), &[]);
        let mut d = Decoder::open(&path).unwrap();
        assert_eq!(d.info().rate, 32000);
        assert_eq!(d.info().channels, ChannelMap::stereo());
        assert_eq!(d.next_chunk(&mut Vec::new()).unwrap(), 0);
    }

    #[test]
    fn garbage_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, "this is not audio, just some text\n".repeat(200)).unwrap();
        let err = decode_file(&path).unwrap_err();
        assert!(matches!(err, DecodeError::Unsupported { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: unsupported or unrecognised audio format",
                path.display()
            )
        );
        // Even with an audio extension the content decides.
        let path = dir.path().join("fake.wav");
        std::fs::write(&path, "not a riff file at all".repeat(50)).unwrap();
        assert!(matches!(
            decode_file(&path),
            Err(DecodeError::Unsupported { .. })
        ));
        let path = dir.path().join("empty.flac");
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            decode_file(&path),
            Err(DecodeError::Unsupported { .. })
        ));
    }

    #[test]
    fn missing_file() {
        let err = decode_file(Path::new("/nonexistent/dir/song.flac")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot open /nonexistent/dir/song.flac: No such file or directory"
        );
        let dir = tempfile::tempdir().unwrap();
        let err = decode_file(dir.path()).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot open ") && err.ends_with("Is a directory"),
            "{err}"
        );
    }

    /// The signal the files in `testdata/` were encoded from (see its README).
    fn fixture_signal(i: usize) -> (i16, i16) {
        let p = (i % 100) as i32;
        let t = if p < 50 { p } else { 100 - p };
        let l = (t - 25) * 1000;
        let r = ((i as i32 * 7) % 150 - 75) * 200;
        (l as i16, r as i16)
    }

    fn fixture(name: &str) -> PathBuf {
        // Cargo's value at run time, not the one compiled in: a test binary another
        // checkout of the same sources built into a shared target directory (cargo
        // keeps its hash for a moved workspace) must read this checkout's files.
        std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
            .join("testdata")
            .join(name)
    }

    /// Signal-to-noise ratio in dB of `got` against channel `ch` of the fixture.
    fn snr_db(got: &[f32], channels: usize, ch: usize) -> f64 {
        let (mut sig, mut noise) = (0f64, 0f64);
        for (i, frame) in got.chunks_exact(channels).enumerate() {
            let (l, r) = fixture_signal(i);
            let want = if ch == 0 { l } else { r } as f64 / 32768.0;
            sig += want * want;
            noise += (frame[ch] as f64 - want).powi(2);
        }
        10.0 * (sig / noise).log10()
    }

    #[test]
    fn flac_is_bit_exact() {
        let (info, out) = decode_file(&fixture("stereo.flac")).unwrap();
        assert_eq!(info.container, "flac");
        assert_eq!(info.rate, 22050);
        assert_eq!(info.channels, ChannelMap::stereo());
        assert_eq!(info.total_frames, Some(5000));
        assert_eq!(out.len(), 10_000);
        for (i, f) in out.chunks_exact(2).enumerate() {
            let (l, r) = fixture_signal(i);
            assert_eq!(
                (f[0], f[1]),
                (l as f32 / 32768.0, r as f32 / 32768.0),
                "frame {i}"
            );
        }
    }

    #[test]
    fn truncated_flac_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let data = std::fs::read(fixture("stereo.flac")).unwrap();
        let path = dir.path().join("cut.flac");
        std::fs::write(&path, &data[..data.len() * 2 / 3]).unwrap();
        // The cut falls inside the first FLAC frame, which the demuxer then skips
        // as if it were damaged: nothing decodes.
        let msg = decode_file(&path).unwrap_err().to_string();
        assert!(
            msg.ends_with("truncated audio data (only 0 of 5000 frames could be decoded)"),
            "{msg}"
        );
    }

    #[test]
    fn damaged_flac_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = std::fs::read(fixture("stereo.flac")).unwrap();
        let mid = data.len() / 2;
        for b in &mut data[mid..mid + 200] {
            *b = b.wrapping_mul(7).wrapping_add(13);
        }
        let path = dir.path().join("bad.flac");
        std::fs::write(&path, &data).unwrap();
        let msg = decode_file(&path).unwrap_err().to_string();
        assert!(msg.contains(": corrupt "), "{msg}");
    }

    #[test]
    fn ogg_vorbis_decodes_close_to_the_source() {
        let (info, out) = decode_file(&fixture("stereo.ogg")).unwrap();
        assert_eq!(
            (info.container.as_str(), info.codec.as_str()),
            ("ogg", "vorbis")
        );
        assert_eq!(info.rate, 22050);
        assert_eq!(info.channels, ChannelMap::stereo());
        assert_eq!(out.len(), 10_000);
        // Lossy, so compare by signal-to-noise ratio: swapped channels or a start
        // offset of more than a few frames would fall well below the threshold.
        for ch in 0..2 {
            let snr = snr_db(&out, 2, ch);
            assert!(snr > 15.0, "channel {ch}: {snr:.1} dB");
        }
    }

    #[test]
    fn mp3_decodes_close_to_the_source() {
        let (info, out) = decode_file(&fixture("stereo.mp3")).unwrap();
        assert_eq!(info.codec, "mp3");
        assert_eq!(info.rate, 22050);
        assert_eq!(info.channels, ChannelMap::stereo());
        // LAME's gapless header lets the decoder trim its delay and padding exactly.
        assert_eq!(out.len(), 10_000);
        for ch in 0..2 {
            let snr = snr_db(&out, 2, ch);
            assert!(snr > 12.0, "channel {ch}: {snr:.1} dB");
        }
        let (info, out) = decode_file(&fixture("mono.mp3")).unwrap();
        assert_eq!(info.channels, ChannelMap::mono());
        assert_eq!(out.len(), 5000);
        let snr = snr_db(&out, 1, 0);
        assert!(snr > 12.0, "mono: {snr:.1} dB");
    }
}
