//! Stream messages: the parameters a client asks for and the server's answer.

use super::limits::{MAX_CHANNELS, MAX_LATENCY_MS, MAX_RATE, check_name, check_volume};
use quaver_dsp::{ChannelMap, ChannelPosition};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Which way audio flows through a stream, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The client writes audio that the server plays.
    Playback,
    /// The client reads audio the server captured.
    Record,
}

/// Parameters of a new stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamParams {
    /// Playback or record.
    pub direction: Direction,
    /// Stream (node) name; the server may make it unique.
    pub name: String,
    /// Sample rate of the client's audio in Hz; the server resamples if needed.
    pub rate: u32,
    /// Channel positions of the interleaved frames in the ring.
    pub channels: ChannelMap,
    /// Requested latency: how much audio may be queued between client and device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// Node to link to instead of the policy's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Initial linear volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<f32>,
    /// Record streams only: record what this sink plays instead of a source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitor_of: Option<String>,
    /// Playback streams: the stream's role ("music", "phone", "event", …), PulseAudio's
    /// `media.role`: streams of lower roles are ducked while it plays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

impl StreamParams {
    /// Parameters for a playback stream with defaults for the optional fields.
    pub fn playback(name: impl Into<String>, rate: u32, channels: ChannelMap) -> Self {
        Self::new(Direction::Playback, name.into(), rate, channels)
    }

    /// Parameters for a record stream with defaults for the optional fields.
    pub fn record(name: impl Into<String>, rate: u32, channels: ChannelMap) -> Self {
        Self::new(Direction::Record, name.into(), rate, channels)
    }

    fn new(direction: Direction, name: String, rate: u32, channels: ChannelMap) -> Self {
        StreamParams {
            direction,
            name,
            rate,
            channels,
            latency_ms: None,
            target: None,
            volume: None,
            monitor_of: None,
            role: None,
        }
    }

    /// Checks every field's range; returns a message naming the offending field.
    pub fn validate(&self) -> Result<(), String> {
        check_name("name", &self.name)?;
        if !(1..=MAX_RATE).contains(&self.rate) {
            return Err(format!("rate {} out of range 1..={MAX_RATE}", self.rate));
        }
        let n = self.channels.len();
        if !(1..=MAX_CHANNELS).contains(&n) {
            return Err(format!("{n} channels out of range 1..={MAX_CHANNELS}"));
        }
        // Ports are named after positions, so duplicates would make links ambiguous.
        let mut seen: HashSet<ChannelPosition> = HashSet::with_capacity(n);
        for p in self.channels.positions() {
            if !seen.insert(*p) {
                return Err(format!("channel position {p} appears twice"));
            }
        }
        if let Some(l) = self.latency_ms
            && !(l.is_finite() && l > 0.0 && l <= MAX_LATENCY_MS)
        {
            return Err(format!("latency_ms {l} out of range (0, {MAX_LATENCY_MS}]"));
        }
        if let Some(v) = self.volume {
            check_volume(v)?;
        }
        if let Some(t) = &self.target {
            check_name("target", t)?;
        }
        if let Some(r) = &self.role {
            check_name("role", r)?;
        }
        if let Some(m) = &self.monitor_of {
            check_name("monitor_of", m)?;
            if self.direction != Direction::Record {
                return Err("monitor_of is only valid for record streams".into());
            }
        }
        Ok(())
    }
}

/// Details of a new stream; fd 0 = ring memfd, fd 1 = doorbell eventfd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamCreated {
    /// Node id, used by `DestroyStream`.
    pub node: u32,
    /// Node name as the server registered it (maybe made unique).
    pub node_name: String,
    /// Ring capacity in frames (a power of two).
    pub capacity_frames: u32,
    /// Channels per frame in the ring.
    pub channels: u32,
    /// Stream rate (the client's rate).
    pub rate: u32,
    /// Rate of the device the stream is linked to.
    pub device_rate: u32,
    /// Current graph quantum in device frames.
    pub quantum: u32,
}
