//! Client library tests against the fake server fixture in `fake_server/`.

mod fake_server;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fake_server::{FakeServer, Mode};
use quaver_client::{ClientError, Connection};
use quaver_protocol::{ChannelMap, ErrorCode, StreamParams};

#[test]
fn missing_server_has_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("native");
    let err = Connection::connect(Some(&path), "t").unwrap_err();
    assert!(matches!(err, ClientError::NoServer { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("no quaver server at"), "{msg}");
    assert!(msg.contains("is quaverd running?"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");

    // A stale socket file nobody listens on gives ECONNREFUSED: same message.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let err = Connection::connect(Some(&path), "t").unwrap_err();
    assert!(matches!(err, ClientError::NoServer { .. }), "{err:?}");
}

#[test]
fn hello_status_graph_and_errors() {
    let srv = FakeServer::start(Mode::Normal);
    let mut c = Connection::connect(Some(&srv.path), "unit-test").unwrap();
    assert_eq!(c.server_version(), "fake-0");
    assert_eq!(srv.stats.clients.lock().unwrap().as_slice(), ["unit-test"]);
    let st = c.status().unwrap();
    assert_eq!(st.quantum, fake_server::QUANTUM);
    assert!(c.graph().unwrap().nodes.is_empty());
    c.link("null:FL", "x").unwrap();
    c.unlink("null", "x").unwrap();
    c.set_volume("null", Some(0.5), None).unwrap();
    let err = c.link("nope:FL", "x").unwrap_err();
    match &err {
        ClientError::Server { code, message } => {
            assert_eq!(*code, ErrorCode::NoSuchPort);
            assert_eq!(err.to_string(), *message);
            assert!(message.contains("nope:FL"));
        }
        other => panic!("expected server error, got {other:?}"),
    }
    // Local validation catches nonsense before it reaches the server.
    assert!(matches!(
        c.set_volume("null", Some(f32::NAN), None),
        Err(ClientError::InvalidArgument(_))
    ));
    assert!(matches!(
        c.destroy_stream(12345),
        Err(ClientError::Server {
            code: ErrorCode::NoSuchNode,
            ..
        })
    ));
    // The connection still works after errors.
    c.status().unwrap();
}

#[test]
fn stray_reply_ids_are_ignored() {
    let srv = FakeServer::start(Mode::StrayReplies);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    for _ in 0..3 {
        c.status().unwrap();
    }
}

#[test]
fn version_mismatch_is_reported() {
    let srv = FakeServer::start(Mode::WrongVersion);
    let err = Connection::connect(Some(&srv.path), "t").unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::VersionMismatch {
                server: 99,
                client: 1
            }
        ),
        "{err:?}"
    );
}

fn sine(frames: usize, ch: usize, offset: usize) -> Vec<f32> {
    (0..frames)
        .flat_map(|i| {
            let v = ((offset + i) as f32 * 0.01).sin();
            std::iter::repeat_n(v, ch)
        })
        .collect()
}

#[test]
fn playback_write_blocks_respects_latency_and_drains() {
    let srv = FakeServer::start(Mode::Normal);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let mut p = StreamParams::playback("music", 48_000, ChannelMap::stereo());
    p.latency_ms = Some(20.0);
    let mut s = c.create_playback(p).unwrap();
    // 20 ms at 48 kHz = 960 frames, in a 1024-frame ring.
    assert_eq!(s.info().capacity_frames, 1024);
    assert_eq!(s.max_queued_frames(), 960);
    assert_eq!(srv.stats.live_streams.load(Ordering::Relaxed), 1);

    // 0.3 s of audio in uneven chunks: write must block for most of it.
    let total = 14_400;
    let audio = sine(total, 2, 0);
    let start = Instant::now();
    for chunk in audio.chunks(2 * 700) {
        s.write(chunk).unwrap();
        assert!(s.frames_queued() <= 960);
    }
    let write_time = start.elapsed();
    assert_eq!(s.frames_written(), total as u64);
    // Writing 0.3 s with at most 20 ms queued cannot finish much sooner than
    // 0.3 s - 20 ms (the fixture's timer sleeps at least one period per quantum).
    assert!(write_time >= Duration::from_millis(250), "{write_time:?}");

    s.drain().unwrap();
    assert!(s.frames_played() >= total as u64);
    assert!(start.elapsed() >= Duration::from_millis(290));
    assert!(srv.stats.max_fill.load(Ordering::Relaxed) <= 960);
    let played = srv.stats.played.lock().unwrap().clone();
    assert_eq!(played.len(), audio.len());
    assert_eq!(played, audio);

    // Draining twice, or with nothing new queued, returns at once.
    s.drain().unwrap();
    c.destroy_stream(s.node()).unwrap();
    assert_eq!(srv.stats.live_streams.load(Ordering::Relaxed), 0);
}

#[test]
fn prebuffering_server_gets_a_full_ring_then_latency_is_capped() {
    let srv = FakeServer::start(Mode::Prebuffer);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let mut p = StreamParams::playback("m", 48_000, ChannelMap::mono());
    p.latency_ms = Some(20.0);
    let mut s = c.create_playback(p).unwrap();
    s.set_timeout(Duration::from_millis(500));
    assert_eq!(s.max_queued_frames(), 960);
    // A client that stopped at 960 frames would never see the 1024-frame
    // prebuffer reached and would time out here.
    let audio = sine(9_600, 1, 0);
    s.write(&audio).unwrap();
    s.drain().unwrap();
    assert_eq!(*srv.stats.played.lock().unwrap(), audio);
}

#[test]
fn playback_without_latency_uses_whole_ring() {
    let srv = FakeServer::start(Mode::Normal);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let s = c
        .create_playback(StreamParams::playback("m", 44_100, ChannelMap::mono()))
        .unwrap();
    assert_eq!(s.max_queued_frames(), s.info().capacity_frames as usize);
}

#[test]
fn tiny_latency_is_raised_to_one_quantum() {
    let srv = FakeServer::start(Mode::Normal);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let mut p = StreamParams::playback("m", 48_000, ChannelMap::mono());
    p.latency_ms = Some(0.5);
    let s = c.create_playback(p).unwrap();
    assert_eq!(s.max_queued_frames(), fake_server::QUANTUM as usize);
}

#[test]
fn stalled_server_times_out_write_and_read() {
    let srv = FakeServer::start(Mode::Stalled);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let mut p = StreamParams::playback("m", 48_000, ChannelMap::stereo());
    p.latency_ms = Some(10.0);
    let mut s = c.create_playback(p).unwrap();
    s.set_timeout(Duration::from_millis(150));
    let start = Instant::now();
    let err = s.write(&sine(4800, 2, 0)).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // The server never started, so the client prebuffered the whole ring.
    assert_eq!(s.frames_written(), s.info().capacity_frames as u64);

    let err = s.drain().unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");

    let mut r = c
        .create_record(StreamParams::record("r", 48_000, ChannelMap::mono()))
        .unwrap();
    r.set_timeout(Duration::from_millis(100));
    let mut buf = [0.0f32; 64];
    assert_eq!(r.try_read(&mut buf).unwrap(), 0);
    let err = r.read(&mut buf).unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
}

#[test]
fn drain_times_out_when_nothing_is_played() {
    let srv = FakeServer::start(Mode::NeverPlayed);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let mut p = StreamParams::playback("m", 48_000, ChannelMap::mono());
    p.latency_ms = Some(10.0);
    let mut s = c.create_playback(p).unwrap();
    s.set_timeout(Duration::from_millis(100));
    s.write(&sine(2_400, 1, 0)).unwrap();
    let start = Instant::now();
    let err = s.drain().unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    // Bounded by the queued audio plus the timeout, not forever.
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn record_reads_in_order() {
    let srv = FakeServer::start(Mode::Normal);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let mut p = StreamParams::record("rec", 48_000, ChannelMap::stereo());
    p.latency_ms = Some(50.0);
    let mut r = c.create_record(p).unwrap();
    let mut buf = vec![0.0f32; 2 * 300];
    let mut last = -1.0f32;
    let mut total = 0;
    while total < 4_800 {
        let n = r.read(&mut buf).unwrap();
        assert!(n > 0);
        for f in buf[..n * 2].chunks(2) {
            assert_eq!(f[0], f[1]);
            assert!(f[0] > last, "{} after {last}", f[0]);
            last = f[0];
        }
        total += n;
    }
    assert_eq!(r.frames_read(), total as u64);
    assert!(matches!(
        r.read(&mut [0.0; 3]),
        Err(ClientError::InvalidArgument(_))
    ));
    assert_eq!(r.read(&mut []).unwrap(), 0);
}

#[test]
fn bad_params_are_rejected_locally() {
    let srv = FakeServer::start(Mode::Normal);
    let mut c = Connection::connect(Some(&srv.path), "t").unwrap();
    let p = StreamParams::record("r", 48_000, ChannelMap::stereo());
    assert!(matches!(
        c.create_playback(p),
        Err(ClientError::InvalidParams(_))
    ));
    let p = StreamParams::playback("r", 0, ChannelMap::stereo());
    let err = c.create_playback(p).unwrap_err();
    assert!(err.to_string().contains("rate"), "{err}");
    assert_eq!(srv.stats.live_streams.load(Ordering::Relaxed), 0);
    let mut s = c
        .create_playback(StreamParams::playback("p", 48_000, ChannelMap::stereo()))
        .unwrap();
    assert!(matches!(
        s.write(&[0.0; 3]),
        Err(ClientError::InvalidArgument(_))
    ));
}

#[test]
fn server_closing_connection_is_reported() {
    // A "server" that accepts and immediately hangs up.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("native");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let t = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        drop(conn);
    });
    let err = Connection::connect(Some(&path), "t").unwrap_err();
    assert!(matches!(err, ClientError::Disconnected), "{err:?}");
    t.join().unwrap();
}
