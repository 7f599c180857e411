//! Names and metadata end to end: Debian's jack_property, jack_alias and jack_lsp -A
//! through `quaver-jack`, python3-jack-client's properties, property-change callbacks
//! and aliases across two clients (compared with the transcript the same script gave
//! against jackd2), and bad input refused with the server unharmed. Each test skips,
//! saying so, when its program is missing.

mod common;

use common::*;
use quaver_client::ClientError;
use quaver_client::quaver_protocol::message::{
    MAX_PROPERTIES_PER_SUBJECT, MAX_PROPERTY_VALUE_BYTES, PropertyValue, node_uuid, port_uuid,
};
use quaver_client::quaver_protocol::{ErrorCode, Reply, Request};
use std::path::PathBuf;
use std::process::Output;

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn jack_property_sets_lists_and_deletes_and_refuses_a_uuid_nobody_has() {
    if !have_tool("jack_property") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let port = "null-sink:playback_FL";
    ok(&d.run(&[
        "jack_property",
        "-s",
        "--port",
        port,
        "http://jackaudio.org/metadata/pretty-name",
        "Left out",
        "text/plain",
    ]));
    let out = ok(&d.run(&[
        "jack_property",
        "-l",
        "--port",
        port,
        "http://jackaudio.org/metadata/pretty-name",
    ]));
    assert_eq!(out, "Left out\n");
    ok(&d.run(&["jack_property", "-s", "--client", "null-sink", "urn:c", "x"]));
    // Every property, as jack_property prints them: the subject's UUID, then its keys.
    let out = ok(&d.run(&["jack_property", "-l"]));
    let g = d.connect().graph().unwrap();
    let sink = g.nodes.iter().find(|n| n.name == "null-sink").unwrap();
    let fl = sink.ports.iter().find(|p| p.name == "playback_FL").unwrap();
    assert_eq!(
        out,
        format!(
            "{}\nkey: http://jackaudio.org/metadata/pretty-name value: Left out \
             type: text/plain\n{}\nkey: urn:c value: x\n",
            port_uuid(fl.id),
            node_uuid(sink.id)
        )
    );
    // A UUID of the right type that no client has: refused (jackd2 stores it anyway,
    // for a subject that can never go away; docs/jack/metadata.md).
    let bogus = node_uuid(999_999).to_string();
    let o = d.run(&["jack_property", "-s", &bogus, "urn:k", "v"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("no client or port has UUID {bogus}")),
        "{}",
        stderr(&o)
    );
    // Below 2^32 is no UUID at all, as in jackd2.
    let o = d.run(&["jack_property", "-s", "12345", "urn:k", "v"]);
    assert!(
        stderr(&o).contains("cannot parse subject as UUID"),
        "{}",
        stderr(&o)
    );
    let o = d.run(&["jack_property", "-d", "--port", port, "urn:none"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    ok(&d.run(&["jack_property", "-d", "--client", "null-sink"]));
    let out = ok(&d.run(&["jack_property", "-l"]));
    assert!(!out.contains("urn:c"), "{out}");
    ok(&d.run(&["jack_property", "-D"]));
    assert_eq!(ok(&d.run(&["jack_property", "-l"])), "");
    d.stop();
}

#[test]
fn jack_alias_gives_two_aliases_that_jack_lsp_shows_to_everyone() {
    if !have_tool("jack_alias") || !have_tool("jack_lsp") {
        return;
    }
    let mut d = Daemon::start(&[]);
    let port = "null-sink:monitor_FL";
    ok(&d.run(&["jack_alias", port, "mon:one"]));
    ok(&d.run(&["jack_alias", port, "mon:two"]));
    let o = d.run(&["jack_alias", port, "mon:three"]);
    assert!(!o.status.success(), "a third alias was accepted");
    // Another program sees them, and finds the port by either.
    let out = ok(&d.run(&["jack_lsp", "-A", "monitor_FL"]));
    assert_eq!(out, "null-sink:monitor_FL\n   mon:one\n   mon:two\n");
    let out = ok(&d.run(&["jack_lsp", "-A", "playback_FL"]));
    assert_eq!(out, "null-sink:playback_FL\n   system:playback_1\n");
    // The default sink's `system:` name takes one of its two places.
    ok(&d.run(&["jack_alias", "system:playback_1", "left:speaker"]));
    let o = d.run(&["jack_alias", "system:playback_1", "left:again"]);
    assert!(!o.status.success());
    let out = ok(&d.run(&["jack_lsp", "-A", "playback_FL"]));
    assert_eq!(
        out,
        "null-sink:playback_FL\n   system:playback_1\n   left:speaker\n"
    );
    ok(&d.run(&["jack_alias", "-u", port, "mon:one"]));
    let o = d.run(&["jack_alias", "-u", port, "mon:nope"]);
    assert!(!o.status.success());
    let out = ok(&d.run(&["jack_lsp", "-A", "monitor_FL"]));
    assert_eq!(out, "null-sink:monitor_FL\n   mon:two\n");
    // `quaver ls` lists them too.
    let ls = ok(&std::ops::Deref::deref(&d).run(&["ls"]));
    assert!(
        ls.ends_with(
            "\naliases:\n  null-sink:playback_FL = left:speaker\n  null-sink:monitor_FL = mon:two\n"
        ),
        "{ls}"
    );
    d.stop();
}

#[test]
fn python_jack_client_gives_jackd2_s_answers() {
    let py = "/usr/bin/python3";
    if !std::path::Path::new(py).exists() {
        eprintln!("SKIPPED: {py} is not installed");
        return;
    }
    let mut d = Daemon::start(&[]);
    let o = d.run(&[py, script("metadata.py").to_str().unwrap()]);
    if o.status.code() == Some(77) {
        eprintln!(
            "SKIPPED: python3-jack-client is not installed ({})",
            stderr(&o).trim()
        );
        d.stop();
        return;
    }
    let got = ok(&o);
    let want = std::fs::read_to_string(script("metadata.jackd2.txt")).unwrap();
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        panic!(
            "python3-jack-client's answers differ from jackd2's from line {}:\n\
             --- quaverd ---\n{got}\n--- jackd2 ---\n{want}\n--- stderr ---\n{}",
            first + 1,
            stderr(&o)
        );
    }
    d.stop();
}

#[test]
fn bad_metadata_requests_are_refused_and_harm_nobody() {
    let mut d = Daemon::start(&[]);
    let mut c = d.connect();
    let g = c.graph().unwrap();
    let sink = node_uuid(g.nodes[0].id);
    let set = |subject: u64, key: &str, value: Vec<u8>| Request::SetProperty {
        subject,
        key: key.into(),
        value: PropertyValue(value),
        value_type: None,
    };
    let code = |r: Result<_, ClientError>| match r {
        Err(ClientError::Server { code, message }) => (code, message),
        other => panic!("expected a refusal, got {other:?}"),
    };
    let (e, m) = code(c.request(set(node_uuid(424_242), "k", b"v".to_vec())));
    assert_eq!(e, ErrorCode::NoSuchNode, "{m}");
    let (e, _) = code(c.request(set(port_uuid(424_242), "k", b"v".to_vec())));
    assert_eq!(e, ErrorCode::NoSuchNode);
    let (e, _) = code(c.request(set(7 << 32, "k", b"v".to_vec())));
    assert_eq!(e, ErrorCode::NoSuchNode, "a UUID type quaver never gives");
    let big = vec![b'a'; MAX_PROPERTY_VALUE_BYTES + 1];
    let (e, m) = code(c.request(set(sink, "k", big)));
    assert_eq!(e, ErrorCode::BadRequest);
    assert!(m.contains("longer than"), "{m}");
    let (e, _) = code(c.request(set(sink, "k", b"a\0b".to_vec())));
    assert_eq!(e, ErrorCode::BadRequest);
    for i in 0..MAX_PROPERTIES_PER_SUBJECT {
        c.request(set(sink, &format!("k{i}"), b"v".to_vec()))
            .unwrap();
    }
    let (e, m) = code(c.request(set(sink, "one-more", b"v".to_vec())));
    assert_eq!(e, ErrorCode::TooMany, "{m}");
    let (e, _) = code(c.request(Request::SetAlias {
        port: 999_999,
        alias: "x:y".into(),
    }));
    assert_eq!(e, ErrorCode::NoSuchPort);
    // The server is unharmed and still holds what it accepted.
    match c
        .request(Request::GetProperties {
            subject: Some(sink),
        })
        .unwrap()
        .0
    {
        Reply::Properties { properties } => {
            assert_eq!(properties.len(), MAX_PROPERTIES_PER_SUBJECT)
        }
        other => panic!("{other:?}"),
    }
    match c.request(Request::RemoveAllProperties).unwrap().0 {
        Reply::Removed { count } => assert_eq!(count as usize, MAX_PROPERTIES_PER_SUBJECT),
        other => panic!("{other:?}"),
    }
    assert!(d.connect().status().is_ok());
    d.stop();
}
