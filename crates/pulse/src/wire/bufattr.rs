//! Buffer attributes with PulseAudio's semantics: defaults for `-1` fields and the
//! fix-ups `protocol-native.c` applies, in the three latency modes (traditional,
//! ADJUST_LATENCY, EARLY_REQUESTS).
//!
//! The sink (or source) latency a stream asks for becomes its node's latency request, so
//! the graph quantum follows it; `grant` tells what the engine will deliver for a
//! request, which the client is told as the configured device latency.

use crate::wire::convert::{bytes_to_usec, frame_size, usec_to_bytes, usec_to_bytes_round_up};
use pulseaudio::protocol::SampleSpec;
use pulseaudio::protocol::stream::BufferAttr;

/// Largest queue in bytes (PulseAudio's `MAX_MEMBLOCKQ_LENGTH`).
pub const MAX_LENGTH: u32 = 4 * 1024 * 1024;
/// Default target length of a playback queue.
pub const DEFAULT_TLENGTH_USEC: u64 = 2_000_000;
/// Default largest minimum request.
pub const DEFAULT_PROCESS_USEC: u64 = 20_000;
/// Default record fragment.
pub const DEFAULT_FRAGSIZE_USEC: u64 = 2_000_000;

/// Which latency model the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencyMode {
    /// PA_STREAM_ADJUST_LATENCY: tlength/fragsize is the end-to-end latency.
    pub adjust_latency: bool,
    /// PA_STREAM_EARLY_REQUESTS: classic fragment model.
    pub early_requests: bool,
}

/// Fixed playback attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaybackAttr {
    /// What the client is told and the queue obeys.
    pub attr: BufferAttr,
    /// Device latency requested from the graph, µs.
    pub sink_request_usec: u64,
    /// Device latency the graph grants, µs (reported as the configured sink latency).
    pub configured_sink_usec: u64,
}

/// Applies PulseAudio's playback defaults and fix-ups. `grant(requested_usec)` returns
/// the device latency the graph will run with for that request.
pub fn fix_playback(
    req: &BufferAttr,
    spec: &SampleSpec,
    mode: LatencyMode,
    grant: impl Fn(u64) -> u64,
) -> PlaybackAttr {
    let fs = frame_size(spec).max(1) as u32;
    let mut a = *req;
    if a.max_length == u32::MAX || a.max_length > MAX_LENGTH {
        a.max_length = MAX_LENGTH;
    }
    if a.max_length == 0 {
        a.max_length = fs;
    }
    if a.target_length == u32::MAX {
        a.target_length = usec_to_bytes_round_up(DEFAULT_TLENGTH_USEC, spec) as u32;
    }
    if a.target_length == 0 {
        a.target_length = fs;
    }
    a.target_length = a.target_length.min(a.max_length);
    if a.minimum_request_length == u32::MAX {
        let process = usec_to_bytes_round_up(DEFAULT_PROCESS_USEC, spec) as u32;
        let m = a.target_length / 4;
        a.minimum_request_length = process.min(m - m % fs);
    }
    if a.minimum_request_length == 0 {
        a.minimum_request_length = fs;
    }
    if a.target_length < a.minimum_request_length + fs {
        a.target_length = a.minimum_request_length + fs;
    }

    let orig_tlength_usec = bytes_to_usec(a.target_length as u64, spec);
    let mut tlength_usec = orig_tlength_usec;
    let minreq_usec = bytes_to_usec(a.minimum_request_length as u64, spec);
    let sink_usec = if mode.early_requests {
        minreq_usec
    } else if mode.adjust_latency {
        tlength_usec.saturating_sub(2 * minreq_usec) / 2
    } else {
        tlength_usec.saturating_sub(2 * minreq_usec)
    };
    let configured = grant(sink_usec);
    // PulseAudio takes what the sink granted out of the budget, so a sink that grants
    // less than asked for gets a longer queue and the same total. We take out at least
    // what was asked for: the queue (and the margin the client has to answer a request,
    // tlength − minreq) is then what PulseAudio's own split gives, and a graph that runs
    // a smaller quantum than asked for lowers the stream's latency instead of moving it
    // into the queue. Measured through the monitor at `paplay --latency-msec=5`: 3.6 ms
    // with a 4.4 ms queue, 3.0 ms with this one, PulseAudio 3.35 ms (docs/pulse.md).
    let taken = configured.max(sink_usec);
    if !mode.early_requests && mode.adjust_latency && tlength_usec >= taken {
        tlength_usec -= taken;
    }
    tlength_usec = tlength_usec.max(configured + 2 * minreq_usec);
    if usec_to_bytes_round_up(orig_tlength_usec, spec) != usec_to_bytes_round_up(tlength_usec, spec)
    {
        a.target_length = usec_to_bytes_round_up(tlength_usec, spec) as u32;
    }
    a.target_length = a.target_length.min(a.max_length);
    if a.minimum_request_length == 0 {
        a.minimum_request_length = fs;
        a.target_length += 2 * fs;
    }
    if a.target_length <= a.minimum_request_length {
        a.target_length = 2 * a.minimum_request_length + fs;
    }
    let max_prebuf = a.target_length + fs - a.minimum_request_length;
    if a.pre_buffering == u32::MAX || a.pre_buffering > max_prebuf {
        a.pre_buffering = max_prebuf;
    }
    // Whole frames everywhere, so queue arithmetic never splits a frame.
    a.target_length -= a.target_length % fs;
    a.minimum_request_length -= a.minimum_request_length % fs;
    a.pre_buffering -= a.pre_buffering % fs;
    a.fragment_size = 0;
    PlaybackAttr {
        attr: a,
        sink_request_usec: sink_usec,
        configured_sink_usec: configured,
    }
}

/// Fixed record attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAttr {
    /// What the client is told: `max_length` and `fragment_size` are meaningful.
    pub attr: BufferAttr,
    /// Source latency requested from the graph, µs; `None` asks for nothing.
    pub source_request_usec: Option<u64>,
    /// Source latency the graph grants, µs (0 when nothing was requested).
    pub configured_source_usec: u64,
}

/// Applies PulseAudio's record defaults and fix-ups.
pub fn fix_record(
    req: &BufferAttr,
    spec: &SampleSpec,
    mode: LatencyMode,
    grant: impl Fn(u64) -> u64,
) -> RecordAttr {
    let fs = frame_size(spec).max(1) as u32;
    let mut a = *req;
    if a.max_length == u32::MAX || a.max_length > MAX_LENGTH {
        a.max_length = MAX_LENGTH;
    }
    if a.max_length == 0 {
        a.max_length = fs;
    }
    if a.fragment_size == u32::MAX {
        a.fragment_size = usec_to_bytes(DEFAULT_FRAGSIZE_USEC, spec) as u32;
    }
    if a.fragment_size == 0 {
        a.fragment_size = fs;
    }
    let orig_fragsize_usec = bytes_to_usec(a.fragment_size as u64, spec);
    let mut fragsize_usec = orig_fragsize_usec;
    let request = (mode.early_requests || mode.adjust_latency).then_some(fragsize_usec);
    let configured = request.map_or(0, &grant);
    if !mode.early_requests && mode.adjust_latency {
        fragsize_usec = configured;
    }
    if usec_to_bytes(orig_fragsize_usec, spec) != usec_to_bytes(fragsize_usec, spec) {
        a.fragment_size = usec_to_bytes(fragsize_usec, spec) as u32;
    }
    a.fragment_size -= a.fragment_size % fs;
    if a.fragment_size == 0 {
        a.fragment_size = fs;
    }
    a.fragment_size = a.fragment_size.min(a.max_length);
    a.target_length = 0;
    a.pre_buffering = 0;
    a.minimum_request_length = 0;
    RecordAttr {
        attr: a,
        source_request_usec: request,
        configured_source_usec: configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulseaudio::protocol::SampleFormat;

    fn s16_48k() -> SampleSpec {
        SampleSpec {
            format: SampleFormat::S16Le,
            channels: 2,
            sample_rate: 48000,
        }
    }

    #[test]
    fn defaults_match_pulseaudio() {
        let p = fix_playback(
            &BufferAttr::default(),
            &s16_48k(),
            LatencyMode::default(),
            |u| u,
        );
        // 2 s tlength, 20 ms minreq, prebuf = tlength - minreq + one frame.
        assert_eq!(p.attr.max_length, MAX_LENGTH);
        assert_eq!(p.attr.target_length, 384_000);
        assert_eq!(p.attr.minimum_request_length, 3840);
        assert_eq!(p.attr.pre_buffering, 384_000 - 3840 + 4);
        assert_eq!(p.sink_request_usec, 2_000_000 - 40_000);
    }

    #[test]
    fn adjust_latency_splits_the_budget() {
        // paplay --latency-msec=20: tlength = 20 ms with ADJUST_LATENCY.
        let req = BufferAttr {
            target_length: 3840,
            ..BufferAttr::default()
        };
        let mode = LatencyMode {
            adjust_latency: true,
            early_requests: false,
        };
        let p = fix_playback(&req, &s16_48k(), mode, |u| u);
        assert_eq!(p.attr.minimum_request_length, 960); // tlength/4 = 5 ms
        assert_eq!(p.sink_request_usec, 5_000); // (20 - 2*5) / 2
        assert_eq!(p.configured_sink_usec, 5_000);
        // The queue keeps the rest: 15 ms.
        assert_eq!(p.attr.target_length, 2880);
        assert!(p.attr.pre_buffering <= p.attr.target_length);
    }

    #[test]
    fn a_smaller_grant_than_asked_for_does_not_grow_the_queue() {
        // paplay --latency-msec=5 on a graph that runs 0.67 ms where 1.25 ms was asked
        // for: the queue keeps 5 − 1.25 ms (what PulseAudio's own split leaves), not
        // 5 − 0.67 ms, and the sink latency reported is what the graph runs.
        let req = BufferAttr {
            target_length: 960,
            ..BufferAttr::default()
        };
        let mode = LatencyMode {
            adjust_latency: true,
            early_requests: false,
        };
        let p = fix_playback(&req, &s16_48k(), mode, |_| 666);
        assert_eq!(p.attr.minimum_request_length, 240); // tlength/4 = 1.25 ms
        assert_eq!(p.sink_request_usec, 1_250); // (5 - 2*1.25) / 2
        assert_eq!(p.configured_sink_usec, 666);
        assert_eq!(p.attr.target_length, 720); // 3.75 ms
        // A larger grant than asked for is taken out whole, as PulseAudio does.
        let p = fix_playback(&req, &s16_48k(), mode, |_| 2_000);
        assert_eq!(p.attr.target_length, 864); // 5 − 2 = 3 ms < 2 + 2·1.25: 4.5 ms
    }

    #[test]
    fn tiny_and_zero_requests_are_fixed_up() {
        let req = BufferAttr {
            max_length: 0,
            target_length: 0,
            pre_buffering: 0,
            minimum_request_length: 0,
            fragment_size: 0,
        };
        let p = fix_playback(&req, &s16_48k(), LatencyMode::default(), |u| u);
        assert!(p.attr.target_length > p.attr.minimum_request_length);
        assert!(p.attr.minimum_request_length >= 4);
        assert_eq!(p.attr.target_length % 4, 0);
        let r = fix_record(&req, &s16_48k(), LatencyMode::default(), |u| u);
        assert_eq!(r.attr.fragment_size, 4);
        assert_eq!(r.source_request_usec, None);
    }

    #[test]
    fn record_fragsize_defaults_and_adjusts() {
        let r = fix_record(
            &BufferAttr::default(),
            &s16_48k(),
            LatencyMode::default(),
            |u| u,
        );
        assert_eq!(r.attr.fragment_size, 384_000);
        let req = BufferAttr {
            fragment_size: 1920,
            ..BufferAttr::default()
        };
        let mode = LatencyMode {
            adjust_latency: true,
            early_requests: false,
        };
        // The graph grants 8 ms for a 10 ms request: the fragment follows the grant.
        let r = fix_record(&req, &s16_48k(), mode, |_| 8_000);
        assert_eq!(r.source_request_usec, Some(10_000));
        assert_eq!(r.attr.fragment_size, 1536);
    }
}
