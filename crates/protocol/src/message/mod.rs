//! Control messages of the native protocol (JSON, one message per frame).
//!
//! Requests are parsed strictly (`deny_unknown_fields`): they come from untrusted
//! clients and a typo should be an error, not a silently ignored option. Info
//! replies are parsed leniently so that a server may add fields within v1 without
//! breaking older clients.
//!
//! One file per group: requests (`request.rs`) with the stream and callback parameters
//! they carry (`stream.rs`, `callback.rs`), replies (`reply.rs`), the status and graph
//! reports (`status.rs`, `graph.rs`) and the limits requests are checked against
//! (`limits.rs`), and the quantum report (`quantum.rs`); every type is re-exported here under its old path.

mod callback;
mod graph;
mod latency;
mod limits;
mod meta;
mod net;
mod process;
mod quantum;
mod reply;
mod request;
mod session;
mod status;
mod stream;
mod transport;

pub use callback::{CallbackCreated, CallbackParams, CallbackPort, PortParams};
pub use graph::{
    CallbackNodeInfo, GraphInfo, LinkInfo, NodeInfo, PortDirection, PortInfo, PortType,
};
pub use latency::{LatencyRange, PortLatency};
pub use limits::{
    MAX_CALLBACK_PORTS, MAX_CHANNELS, MAX_LATENCY_MS, MAX_NAME_BYTES, MAX_PORT_NAME_BYTES,
    MAX_QUANTUM, MAX_RATE, MAX_VOLUME,
};
pub use meta::{
    MAX_ALIAS_BYTES, MAX_ALIASES, MAX_PROPERTIES, MAX_PROPERTIES_PER_SUBJECT, MAX_PROPERTY_BYTES,
    MAX_PROPERTY_KEY_BYTES, MAX_PROPERTY_TYPE_BYTES, MAX_PROPERTY_VALUE_BYTES, PortAliases,
    Property, PropertyChange, PropertyEvent, PropertyValue, UUID_TYPE_CLIENT, UUID_TYPE_PORT,
    UuidSubject, node_uuid, parse_uuid, port_uuid,
};
pub use net::{MAX_SESSION_NAME_BYTES, NetDeviceStatus, RtpRecvInfo, RtpSendInfo};
pub use process::{
    MAX_CONFIG_PATH_BYTES, MAX_PID, MAX_WARNING_BYTES, MAX_WARNINGS, ServerProcess, started,
};
pub use quantum::QuantumReport;
pub use reply::{ErrorCode, GraphEvent, Reply};
pub use request::Request;
pub use session::{
    MAX_SESSION_COMMAND_BYTES, MAX_SESSION_PATH_BYTES, SESSION_NEED_TERMINAL, SESSION_SAVE_ERROR,
    SessionCommand, SessionEvent, SessionEventType,
};
pub use status::{
    ClientInfo, DeviceStatus, FollowStatus, NodeTimingInfo, StageClass, StageStats, StatusInfo,
    TimingStats,
};
pub use stream::{Direction, StreamCreated, StreamParams};
pub use transport::TransportInfo;

use serde::{Deserialize, Serialize};

/// Version of the message set; a server rejects a `Hello` carrying another version.
pub const PROTOCOL_VERSION: u32 = 1;

/// Client→server wire message: `{"id": N, "request": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestEnvelope {
    /// Chosen by the client, echoed in the reply.
    pub id: u64,
    /// The request.
    pub request: Request,
}

/// Server→client wire message: `{"id": N, "reply": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyEnvelope {
    /// The id of the request this answers.
    pub id: u64,
    /// The reply.
    pub reply: Reply,
}

#[cfg(test)]
mod tests {

    #[test]
    fn suspended_and_closed_devices_are_idle() {
        let mut d: DeviceStatus = serde_json::from_str(
            r#"{"name":"sim","description":"","state":"running","rate":48000,
                "playback_channels":2,"capture_channels":null,"underruns":0,
                "overruns":0,"wakeups":0}"#,
        )
        .unwrap();
        assert!(!d.is_idle());
        for state in ["suspended", "closed"] {
            d.state = state.into();
            assert!(d.is_idle(), "{state}");
        }
        d.state = "gone".into();
        assert!(!d.is_idle());
    }

    use super::*;
    use quaver_dsp::{ChannelMap, ChannelPosition};
    use serde_json::json;

    fn roundtrip_req(r: Request) {
        let env = RequestEnvelope { id: 7, request: r };
        let s = serde_json::to_string(&env).unwrap();
        let back: RequestEnvelope = serde_json::from_str(&s).unwrap();
        assert_eq!(back, env, "{s}");
    }

    #[test]
    fn request_roundtrips() {
        roundtrip_req(Request::Hello {
            version: 1,
            client_name: "cli".into(),
        });
        roundtrip_req(Request::Status);
        roundtrip_req(Request::Process);
        roundtrip_req(Request::Graph);
        let mut p = StreamParams::playback("music", 48000, ChannelMap::stereo());
        p.latency_ms = Some(20.0);
        p.volume = Some(0.5);
        p.target = Some("null".into());
        roundtrip_req(Request::CreateStream(p));
        roundtrip_req(Request::DestroyStream { node: 3 });
        roundtrip_req(Request::Link {
            output: "a:FL".into(),
            input: "b:FL".into(),
        });
        roundtrip_req(Request::Unlink {
            output: "a".into(),
            input: "b".into(),
        });
        roundtrip_req(Request::SetVolume {
            node: "a".into(),
            volume: None,
            mute: Some(true),
        });
        let set = Request::SetFilterControl {
            node: "file-sink".into(),
            index: 1,
            control: "gain_db".into(),
            value: -6.5,
        };
        roundtrip_req(set.clone());
        assert!(set.validate().is_ok());
        let nan = Request::SetFilterControl {
            node: "file-sink".into(),
            index: 1,
            control: "gain_db".into(),
            value: f64::NAN,
        };
        assert_eq!(
            nan.validate().unwrap_err(),
            "control value NaN is not a finite number"
        );
    }

    #[test]
    fn metadata_messages_roundtrip_and_validate() {
        let set = Request::SetProperty {
            subject: node_uuid(4),
            key: "http://jackaudio.org/metadata/pretty-name".into(),
            value: PropertyValue(vec![0xff, b'x']),
            value_type: Some("application/octet-stream".into()),
        };
        assert!(set.validate().is_ok());
        roundtrip_req(set);
        roundtrip_req(Request::GetProperties { subject: None });
        roundtrip_req(Request::GetProperties {
            subject: Some(port_uuid(9)),
        });
        roundtrip_req(Request::RemoveProperty {
            subject: 5,
            key: Some("k".into()),
        });
        roundtrip_req(Request::RemoveAllProperties);
        roundtrip_req(Request::Aliases);
        let alias = Request::SetAlias {
            port: 3,
            alias: "alias:one".into(),
        };
        assert!(alias.validate().is_ok());
        roundtrip_req(alias);
        let bad = Request::SetProperty {
            subject: 1,
            key: String::new(),
            value: PropertyValue::default(),
            value_type: None,
        };
        assert!(bad.validate().unwrap_err().contains("key"));
        let bad = Request::UnsetAlias {
            port: 3,
            alias: String::new(),
        };
        assert!(bad.validate().is_err());
        let range = |min, max| LatencyRange { min, max };
        let lat = Request::SetPortLatency {
            port: 4,
            capture: range(0, 64),
            playback: range(100, 100),
        };
        assert!(lat.validate().is_ok());
        roundtrip_req(lat);
        roundtrip_req(Request::PortLatencies);
        let bad = Request::SetPortLatency {
            port: 4,
            capture: range(0, 64),
            playback: range(101, 100),
        };
        assert!(bad.validate().unwrap_err().contains("playback"));
        let ev = Reply::Event(GraphEvent {
            event: "property".into(),
            node: None,
            property: Some(PropertyEvent {
                subject: 0,
                key: None,
                change: PropertyChange::Deleted,
            }),
            session: None,
        });
        let s = serde_json::to_string(&ev).unwrap();
        assert_eq!(
            s,
            r#"{"type":"event","event":"property","property":{"subject":0,"change":"deleted"}}"#
        );
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), ev);
        for r in [
            Reply::Properties {
                properties: vec![Property {
                    subject: port_uuid(2),
                    key: "k".into(),
                    value: PropertyValue(b"v".to_vec()),
                    value_type: None,
                }],
            },
            Reply::Removed { count: 3 },
            Reply::PortLatencies {
                ports: vec![PortLatency {
                    port: 2,
                    capture: LatencyRange { min: 1, max: 2 },
                    playback: LatencyRange::default(),
                }],
            },
            Reply::Aliases {
                ports: vec![PortAliases {
                    port: 2,
                    aliases: vec!["a:b".into()],
                }],
            },
        ] {
            let s = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), r);
        }
    }

    #[test]
    fn wire_shape_is_internally_tagged() {
        let env = RequestEnvelope {
            id: 1,
            request: Request::CreateStream(StreamParams::record("rec", 44100, ChannelMap::mono())),
        };
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(
            v,
            json!({"id": 1, "request": {"type": "create_stream", "direction": "record",
                   "name": "rec", "rate": 44100, "channels": ["Mono"]}})
        );
        let v = serde_json::to_value(RequestEnvelope {
            id: 2,
            request: Request::Status,
        })
        .unwrap();
        assert_eq!(v, json!({"id": 2, "request": {"type": "status"}}));
        let v = serde_json::to_value(ReplyEnvelope {
            id: 2,
            reply: Reply::error(ErrorCode::NoSuchNode, "no node x"),
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"id": 2, "reply": {"type": "error", "code": "no_such_node", "message": "no node x"}})
        );
    }

    #[test]
    fn unknown_fields_in_requests_are_rejected() {
        let s = r#"{"id":1,"request":{"type":"hello","version":1,"client_name":"x","extra":1}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
        let s = r#"{"id":1,"request":{"type":"create_stream","direction":"playback","name":"x",
                    "rate":48000,"channels":["FL","FR"],"latncy_ms":5}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
        let s = r#"{"id":1,"request":{"type":"frobnicate"}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
    }

    #[test]
    fn replies_tolerate_added_fields_and_codes() {
        let s = r#"{"id":1,"reply":{"type":"error","code":"quota_exceeded","message":"m"}}"#;
        let r: ReplyEnvelope = serde_json::from_str(s).unwrap();
        assert_eq!(r.reply, Reply::error(ErrorCode::Unknown, "m"));
        let s = r#"{"id":1,"reply":{"type":"welcome","server_version":"0.1","protocol_version":1,"new":true}}"#;
        assert!(serde_json::from_str::<ReplyEnvelope>(s).is_ok());
    }

    #[test]
    fn status_and_graph_roundtrip() {
        let st = Reply::Status(StatusInfo {
            server_version: "0.1.0".into(),
            protocol_version: 1,
            rate: 48000,
            quantum: 256,
            quantum_min: 32,
            quantum_max: 2048,
            realtime: false,
            scheduling: Box::default(),
            cycles: 10,
            xruns: 0,
            devices: vec![DeviceStatus {
                name: "null".into(),
                description: "Null".into(),
                state: "running".into(),
                rate: 48000,
                playback_channels: Some(2),
                capture_channels: None,
                underruns: 0,
                overruns: 0,
                wakeups: 5,
                margin_frames: 256,
                margin_changes: 0,
                follow: Some(FollowStatus {
                    play_ppb: Some(-399_920),
                    capture_ppb: None,
                    play_level: Some(512),
                    play_target: Some(510),
                    play_error_min: -3,
                    play_error_max: 4,
                    restarts: 1,
                }),
                net: Some(NetDeviceStatus::RtpSend(RtpSendInfo {
                    dest: "239.69.0.1:5004".into(),
                    sap: None,
                    packets: 3,
                    bytes: 900,
                    errors: 0,
                })),
            }],
            clients: vec![ClientInfo {
                id: 1,
                name: "cli".into(),
                pid: Some(42),
                streams: vec![3],
            }],
        });
        let s = serde_json::to_string(&st).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), st);
        let g = Reply::Graph(GraphInfo {
            nodes: vec![NodeInfo {
                id: 1,
                name: "null".into(),
                kind: "sink".into(),
                description: "Null sink".into(),
                volume: 1.0,
                mute: false,
                latency_ms: Some(5.3),
                playback_lead_frames: None,
                suspended: false,
                physical: false,
                ports: vec![PortInfo {
                    id: 10,
                    name: "FL".into(),
                    direction: PortDirection::In,
                    channel: "FL".into(),
                    port_type: PortType::Audio,
                }],
                callback: Some(CallbackNodeInfo {
                    mode: "async".into(),
                    active: true,
                    woken: 9,
                    xruns: 8,
                    xrun_events: 1,
                    caught_up: 2,
                    async_cause: "hung".into(),
                    resynced: 1,
                    skipped: 1,
                    wait_avg_ns: 1000,
                    wait_max_ns: 5000,
                    quantum: Some(64),
                }),
            }],
            links: vec![LinkInfo {
                id: 4,
                output_node: "music".into(),
                output_port: "FL".into(),
                input_node: "null".into(),
                input_port: "FL".into(),
                feedback: true,
            }],
        });
        let s = serde_json::to_string(&g).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), g);
        let c = Reply::StreamCreated(StreamCreated {
            node: 3,
            node_name: "music".into(),
            capacity_frames: 4096,
            channels: 2,
            rate: 44100,
            device_rate: 48000,
            quantum: 256,
        });
        let s = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), c);
        assert_eq!(
            serde_json::from_str::<Reply>(r#"{"type":"ok"}"#).unwrap(),
            Reply::Ok
        );
    }

    #[test]
    fn timing_with_nodes_roundtrips_and_older_replies_parse() {
        let t = Reply::Timing(Box::new(TimingStats {
            rate: 48000,
            quantum: 64,
            cycles: 1000,
            xruns: 1,
            lateness_ns_log2: vec![0, 3],
            busy_ns_log2: vec![1],
            lateness_max_ns: 9000,
            busy_max_ns: 40000,
            nodes: vec![NodeTimingInfo {
                id: 7,
                name: "synth".into(),
                kind: "client".into(),
                quantum: 64,
                quantum_requested: Some(64),
                rate: 48000,
                cycles: 750,
                wait_avg_ns: 21000,
                wait_max_ns: 80000,
                busy_avg_ns: 110000,
                busy_max_ns: 400000,
                rt_avg_ns: 130000,
                rt_max_ns: 500000,
                xruns: 2,
            }],
            interval_ns: 1_000_000_000,
            suspended: false,
            overdue_cycles: 0,
            overdue_runs: 0,
            stages: Some(StageStats {
                stages: vec!["timer".into(), "resume".into()],
                classes: vec![StageClass {
                    name: "late".into(),
                    cycles: 2,
                    hist: vec![vec![0, 2], vec![1, 0, 1]],
                    dominant: vec![2, 0],
                    sum_ns: vec![2, 2],
                }],
            }),
        }));
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), t);
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["nodes"][0]["busy_avg_ns"], 110000);
        assert_eq!(v["nodes"][0]["wait_max_ns"], 80000);
        // A server from before per-node timing: no nodes, no interval.
        let old = r#"{"type":"timing","rate":48000,"quantum":256,"cycles":5,"xruns":0,
                      "lateness_ns_log2":[],"busy_ns_log2":[],"lateness_max_ns":0,"busy_max_ns":0}"#;
        match serde_json::from_str::<Reply>(old).unwrap() {
            Reply::Timing(t) => assert!(
                t.nodes.is_empty() && t.interval_ns == 0 && !t.suspended && t.stages.is_none()
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn callback_messages_roundtrip_and_validate() {
        let mut p = CallbackParams::new("synth");
        p.outputs.push(PortParams {
            name: "out_L".into(),
            channel: Some(ChannelPosition::FL),
            port_type: PortType::Audio,
        });
        p.inputs.push(PortParams::midi("midi_in"));
        p.max_inputs = Some(4);
        p.quantum = Some(64);
        assert!(p.validate().is_ok());
        roundtrip_req(Request::CreateCallback(p.clone()));
        roundtrip_req(Request::AddPort {
            node: 3,
            direction: PortDirection::Out,
            name: "aux".into(),
            channel: None,
            port_type: PortType::Midi,
        });
        // The port type is optional and defaults to audio; a MIDI one is named so.
        let s = r#"{"type":"add_port","node":3,"direction":"in","name":"m","port_type":"midi"}"#;
        assert!(matches!(
            serde_json::from_str::<Request>(s).unwrap(),
            Request::AddPort {
                port_type: PortType::Midi,
                ..
            }
        ));
        let s = r#"{"type":"add_port","node":3,"direction":"in","name":"m","port_type":"osc"}"#;
        assert!(serde_json::from_str::<Request>(s).is_err());
        roundtrip_req(Request::RemovePort { node: 3, port: 9 });
        roundtrip_req(Request::Watch);
        let ev = Reply::Event(GraphEvent {
            event: "links_changed".into(),
            node: None,
            property: None,
            session: None,
        });
        let s = serde_json::to_string(&ev).unwrap();
        assert_eq!(s, r#"{"type":"event","event":"links_changed"}"#);
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), ev);
        roundtrip_req(Request::SetQuantum {
            node: 3,
            quantum: Some(128),
        });
        roundtrip_req(Request::SetQuantum {
            node: 3,
            quantum: None,
        });
        roundtrip_req(Request::ForceQuantum { quantum: Some(128) });
        roundtrip_req(Request::ForceQuantum { quantum: None });
        roundtrip_req(Request::Quantum);
        roundtrip_req(Request::SetFreewheel { on: true });
        assert_eq!(
            serde_json::to_value(Request::SetFreewheel { on: false }).unwrap(),
            json!({"type": "set_freewheel", "on": false})
        );
        let v = serde_json::to_value(Request::ForceQuantum { quantum: None }).unwrap();
        assert_eq!(v, json!({"type": "force_quantum"}), "release: no field");
        for q in [0, MAX_QUANTUM + 1] {
            let e = Request::ForceQuantum { quantum: Some(q) }
                .validate()
                .unwrap_err();
            assert!(e.contains(&format!("quantum {q} out of range")), "{e}");
        }
        let r = Reply::Quantum(QuantumReport {
            quantum: 128,
            source: "requested".into(),
            forced: None,
            node: Some(7),
            node_name: Some("synth".into()),
            latency: Some(256),
            min: 32,
            max: 8192,
            default: 1024,
            freewheel: false,
        });
        let s = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), r);
        assert!(!s.contains("forced"), "{s}");
        let v = serde_json::to_value(RequestEnvelope {
            id: 1,
            request: Request::CreateCallback(CallbackParams::new("x")),
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"id": 1, "request": {"type": "create_callback", "name": "x"}})
        );
        let bad = |f: &dyn Fn(&mut CallbackParams)| {
            let mut q = p.clone();
            f(&mut q);
            q.validate().unwrap_err()
        };
        assert!(bad(&|q| q.name = String::new()).contains("name"));
        assert!(bad(&|q| q.outputs[0].name = "a:b".into()).contains("':'"));
        assert!(bad(&|q| q.outputs[0].name = "midi_in".into()).contains("twice"));
        assert!(bad(&|q| q.outputs[0].name = "n".repeat(129)).contains("128"));
        assert!(bad(&|q| q.max_inputs = Some(MAX_CALLBACK_PORTS + 1)).contains("inputs"));
        assert!(bad(&|q| q.quantum = Some(0)).contains("quantum"));
        assert!(bad(&|q| q.quantum = Some(MAX_QUANTUM + 1)).contains("quantum"));
        assert!(
            Request::SetQuantum {
                node: 1,
                quantum: Some(0)
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::AddPort {
                node: 1,
                direction: PortDirection::In,
                name: "x:y".into(),
                channel: None,
                port_type: PortType::Audio,
            }
            .validate()
            .is_err()
        );
        let s = r#"{"id":1,"request":{"type":"create_callback","name":"x","latency":5}}"#;
        assert!(serde_json::from_str::<RequestEnvelope>(s).is_err());
        let created = Reply::CallbackCreated(CallbackCreated {
            node: 3,
            node_name: "synth".into(),
            rate: 48000,
            quantum: 64,
            max_frames: 8192,
            max_inputs: 4,
            max_outputs: 1,
            ports: vec![CallbackPort {
                id: 5,
                name: "out_L".into(),
                direction: PortDirection::Out,
                index: 0,
                channel: "FL".into(),
                port_type: PortType::Audio,
            }],
            deadline: 0.8,
            async_after: 8,
            hung_ms: 250,
            recover_ms: 5000,
        });
        let s = serde_json::to_string(&created).unwrap();
        assert_eq!(serde_json::from_str::<Reply>(&s).unwrap(), created);
        // Older graph replies (no callback field) still parse.
        let s = r#"{"type":"graph","nodes":[{"id":1,"name":"n","kind":"sink","description":"",
                    "volume":1.0,"mute":false,"latency_ms":null,"ports":[]}],"links":[]}"#;
        match serde_json::from_str::<Reply>(s).unwrap() {
            Reply::Graph(g) => assert_eq!(g.nodes[0].callback, None),
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn stream_params_validation() {
        let ok = StreamParams::playback("x", 48000, ChannelMap::stereo());
        assert!(ok.validate().is_ok());
        let bad = |f: &dyn Fn(&mut StreamParams)| {
            let mut p = ok.clone();
            f(&mut p);
            p.validate().unwrap_err()
        };
        assert!(bad(&|p| p.rate = 0).contains("rate"));
        assert!(bad(&|p| p.rate = 384_001).contains("rate"));
        assert!(bad(&|p| p.channels = ChannelMap(vec![])).contains("channels"));
        assert!(bad(&|p| p.channels = ChannelMap::default_for(65)).contains("channels"));
        assert!(
            bad(&|p| p.channels = ChannelMap(vec![ChannelPosition::FL, ChannelPosition::FL]))
                .contains("twice")
        );
        assert!(bad(&|p| p.latency_ms = Some(0.0)).contains("latency"));
        assert!(bad(&|p| p.latency_ms = Some(f64::NAN)).contains("latency"));
        assert!(bad(&|p| p.latency_ms = Some(10_000.5)).contains("latency"));
        assert!(bad(&|p| p.volume = Some(f32::INFINITY)).contains("volume"));
        assert!(bad(&|p| p.volume = Some(-0.1)).contains("volume"));
        assert!(bad(&|p| p.volume = Some(10.5)).contains("volume"));
        assert!(bad(&|p| p.name = "n".repeat(257)).contains("name"));
        assert!(bad(&|p| p.name = String::new()).contains("name"));
        assert!(bad(&|p| p.name = "a\nb".into()).contains("control"));
        assert!(bad(&|p| p.monitor_of = Some("sink".into())).contains("record"));
        let mut p = ok.clone();
        p.latency_ms = Some(10_000.0);
        p.volume = Some(10.0);
        p.channels = ChannelMap::default_for(64);
        p.rate = 384_000;
        p.name = "n".repeat(256);
        assert!(p.validate().is_ok());
    }

    #[test]
    fn request_validation() {
        assert!(
            Request::SetVolume {
                node: "x".into(),
                volume: None,
                mute: None
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::SetVolume {
                node: "x".into(),
                volume: Some(f32::NAN),
                mute: None
            }
            .validate()
            .is_err()
        );
        assert!(
            Request::Link {
                output: String::new(),
                input: "b".into()
            }
            .validate()
            .is_err()
        );
    }
}
