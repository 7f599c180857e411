//! Fuzzes the native protocol's JSON control messages as both ends read them: a frame's
//! payload parsed as a request (what quaverd does with every client frame, then
//! `validate`) and as a reply (what a client does with the server's). A message that
//! parses must encode, and the encoding must parse back to the same message with the
//! same verdict from `validate`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quaver_protocol::framing::{decode_json, encode_json};
use quaver_protocol::{ErrorCode, Reply, ReplyEnvelope, RequestEnvelope};

fuzz_target!(|data: &[u8]| {
    match decode_json::<RequestEnvelope>(data) {
        Ok(env) => {
            let verdict = env.request.validate();
            let _ = env.request.kind();
            let bytes = encode_json(&env).expect("a parsed request encodes");
            let back: RequestEnvelope = decode_json(&bytes).expect("an encoded request parses");
            assert_eq!(back, env, "request round trip through {bytes:?}");
            assert_eq!(back.request.validate(), verdict);
        }
        Err(e) => {
            // The server answers a malformed frame with the parse error's text.
            let reply = ReplyEnvelope {
                id: 0,
                reply: Reply::error(ErrorCode::BadRequest, e.to_string()),
            };
            let bytes = encode_json(&reply).expect("an error reply encodes");
            let back: ReplyEnvelope = decode_json(&bytes).expect("an error reply parses");
            assert_eq!(back, reply);
        }
    }
    if let Ok(env) = decode_json::<ReplyEnvelope>(data) {
        let _ = env.reply.kind();
        // What a client checks before using a process reply (quaver doctor).
        if let Reply::Process(p) = &env.reply {
            let _ = p.check();
        }
        // And a network device's figures before `quaver status` shows them.
        if let Reply::Status(st) = &env.reply {
            for net in st.devices.iter().filter_map(|d| d.net.as_ref()) {
                let _ = net.check();
            }
        }
        let bytes = encode_json(&env).expect("a parsed reply encodes");
        let back: ReplyEnvelope = decode_json(&bytes).expect("an encoded reply parses");
        assert_eq!(back, env, "reply round trip through {bytes:?}");
    }
});
