//! The JACK transport's report (`transport_query` → `transport`).

use serde::{Deserialize, Serialize};

/// The transport as the server last published it (docs/protocol/transport.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransportInfo {
    /// `stopped`, `starting` or `rolling`.
    pub state: String,
    /// Transport frame of the current cycle.
    pub frame: u32,
    /// JACK position bits of the fields below (`0x10`: BBT).
    pub valid: u32,
    /// Bar (BBT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar: Option<i32>,
    /// Beat within the bar (BBT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beat: Option<i32>,
    /// Tick within the beat (BBT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<i32>,
    /// Tempo (BBT only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beats_per_minute: Option<f64>,
    /// Node of the timebase master, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<u32>,
    /// Sync timeout, µs.
    pub sync_timeout_us: u64,
    /// Malformed transport requests the server refused so far.
    #[serde(default)]
    pub refused: u64,
}

#[cfg(test)]
mod tests {
    use super::super::{Reply, Request, RequestEnvelope};
    use super::*;

    fn parse(json: &str) -> Request {
        serde_json::from_str::<RequestEnvelope>(json)
            .unwrap()
            .request
    }

    #[test]
    fn transport_requests_parse_and_check_their_ranges() {
        assert_eq!(
            parse(r#"{"id":1,"request":{"type":"transport_start"}}"#),
            Request::TransportStart
        );
        let r = parse(r#"{"id":1,"request":{"type":"set_timebase","node":4,"conditional":true}}"#);
        assert_eq!(
            r,
            Request::SetTimebase {
                node: 4,
                conditional: true
            }
        );
        assert_eq!(r.kind(), "set_timebase");
        let ok = parse(r#"{"id":1,"request":{"type":"transport_locate","frame":4294967295}}"#);
        assert!(ok.validate().is_ok());
        let far = parse(r#"{"id":1,"request":{"type":"transport_locate","frame":4294967296}}"#);
        let e = far.validate().unwrap_err();
        assert!(e.contains("32-bit") && e.contains("EINVAL"), "{e}");
        let long = parse(r#"{"id":1,"request":{"type":"set_sync_timeout","usecs":3600000001}}"#);
        assert!(long.validate().is_err());
        assert!(
            serde_json::from_str::<RequestEnvelope>(
                r#"{"id":1,"request":{"type":"transport_locate","frame":-1}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn the_transport_reply_round_trips() {
        let r = Reply::Transport(TransportInfo {
            state: "rolling".into(),
            frame: 512,
            valid: 0x10,
            bar: Some(1),
            beat: Some(2),
            tick: Some(3),
            beats_per_minute: Some(120.0),
            master: Some(7),
            sync_timeout_us: 2_000_000,
            refused: 0,
        });
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), r);
    }
}
