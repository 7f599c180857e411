//! PulseAudio tunnels (issue 37 acceptance 4): quaverd in one namespace, Debian's
//! PulseAudio 16 in the other serving TCP with cookie authentication. Bad arguments fail
//! LOAD_MODULE with their reason logged; `paplay` into `module-tunnel-sink-new` is heard
//! at the remote's null sink monitor; the remote stopped by PID takes the tunnel sink
//! away and the stream moves to quaverd's own sink and plays on; the remote started
//! again brings the tunnel sink back; `module-tunnel-source-new` from the remote's
//! monitor is heard by `parec` on quaverd. Then the same to another quaverd serving TCP
//! with the cookie. Throughout, a remote that never answers holds up no other client: a
//! load waiting for one leaves `pactl info` prompt, and a tunnel reconnecting to one
//! unloads at once.

use super::peers::{Kind, Peer, check_tone, left};
use super::{PEER_TONE, QUAVER_TONE, daemon_in, ok, tone_wav, two_hosts};
use quaver_testkit::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The remote's address (`two_hosts`' second host).
const REMOTE: &str = "10.237.0.2";
/// Each tunnel's latency: quaverd runs without real-time scheduling here, and on a
/// loaded machine 100 ms (the default) let its source run dry now and then.
const LATENCY: &str = "latency_msec=250";

/// A libpulse tool aimed at quaverd `d`.
fn pa(d: &Daemon, prog: &str, args: &[&str]) -> Command {
    let conf = d.path("pulse-client.conf");
    std::fs::write(&conf, "autospawn = no\n").unwrap();
    let home = d.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let sock = d.path("xdg/pulse/native");
    let mut c = Command::new(prog);
    c.args(args)
        .env("PULSE_SERVER", format!("unix:{}", sock.display()))
        .env("PULSE_CLIENTCONFIG", &conf)
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", d.path("xdg"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("PULSE_COOKIE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

pub(super) fn pactl(d: &Daemon, args: &[&str]) -> std::process::Output {
    wait_output(
        pa(d, "pactl", args).spawn().expect("pactl"),
        Duration::from_secs(10),
    )
}

/// quaverd's sink called `name`: its index, if it has one.
fn sink_index(d: &Daemon, name: &str) -> Option<String> {
    text(&pactl(d, &["list", "short", "sinks"]))
        .lines()
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&name))
        .map(|f| f[0].to_string())
}

/// The sink each of quaverd's sink inputs plays on.
fn input_sinks(d: &Daemon) -> Vec<String> {
    text(&pactl(d, &["list", "short", "sink-inputs"]))
        .lines()
        .filter_map(|l| l.split('\t').nth(1).map(str::to_string))
        .collect()
}

/// `parec` arguments recording `dev` at 48 kHz stereo s16 into the WAV `out`.
fn parec_args<'a>(dev: &'a str, out: &'a str) -> [&'a str; 8] {
    [
        "-d",
        dev,
        "--latency-msec=20",
        "--file-format=wav",
        "--format=s16le",
        "--rate=48000",
        "--channels=2",
        out,
    ]
}

/// Stops `parec` and returns the left channel of what it wrote to `wav`.
fn finish_parec(child: std::process::Child, wav: &std::path::Path) -> Vec<f32> {
    signal(child.id(), libc::SIGINT);
    let out = wait_output(child, Duration::from_secs(5));
    let (_, s) = read_wav_s16(wav);
    if s.is_empty() {
        eprintln!(
            "parec recorded nothing ({:?} bytes, {}): {}",
            std::fs::metadata(wav).map(|m| m.len()),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    left(&s.iter().map(|&v| v as f32 / 32768.0).collect::<Vec<_>>())
}

/// A TCP listener on `addr` inside namespace `ns`, made on a thread that joins the
/// namespace and ends: a peer that connects is let in by the kernel (the handshake
/// completes in the backlog) and then hears nothing, however long it waits.
fn silent_listener(ns: &str, addr: &str) -> std::net::TcpListener {
    use std::os::fd::AsRawFd;
    std::thread::scope(|s| {
        s.spawn(|| {
            let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("namespace file");
            // SAFETY: setns on this short-lived thread only; the fd is open.
            let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {ns}: {}", std::io::Error::last_os_error());
            std::net::TcpListener::bind(addr).unwrap_or_else(|e| panic!("binding {addr}: {e}"))
        })
        .join()
        .expect("listener thread")
    })
}

/// Runs `pactl args` against `d`; its output and how long it took.
fn timed_pactl(d: &Daemon, args: &[&str]) -> (std::process::Output, Duration) {
    let t = Instant::now();
    let out = pactl(d, args);
    (out, t.elapsed())
}

/// What a client answered while a tunnel's remote is silent may take: far below the
/// tunnel's 2 s bound on each handshake step (client::HANDSHAKE_TIMEOUT), which every
/// client waited out while the I/O thread itself connected; `pactl` starting and asking
/// takes tens of ms, so this leaves a loaded machine room and still fails on a stall.
const PROMPT: Duration = Duration::from_secs(1);

#[test]
fn tunnels_to_pulseaudio_over_tcp_follow_the_remote() {
    let _alone = super::one_at_a_time();
    if let Some(why) = Kind::PulseAudio.missing() {
        eprintln!("SKIPPED: PulseAudio tunnels: {why}");
        return;
    }
    let tx = format!("qv-tq-{}", std::process::id());
    let rx = format!("qv-tp-{}", std::process::id());
    let _hosts = match two_hosts(&tx, &rx, 't') {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIPPED: network namespaces not available here ({e})");
            return;
        }
    };
    let t0 = Instant::now();
    let work = tempfile::tempdir().unwrap();
    let w = |n: &str| work.path().join(n).to_str().unwrap().to_string();
    let cookie = w("cookie");
    let bytes: Vec<u8> = noise_s16(128, 11, 30_000)
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(&cookie, &bytes).unwrap();
    std::fs::write(w("wrong-cookie"), [0u8; 256]).unwrap();
    let modules = vec![
        "module-null-sink sink_name=null rate=48000".to_string(),
        "module-null-sink sink_name=src rate=48000".to_string(),
        format!(
            "module-native-protocol-tcp listen={REMOTE} auth-anonymous=0 auth-cookie={cookie} auth-cookie-enabled=1"
        ),
    ];
    let mut remote = Peer::pulseaudio_with(&rx, &modules);
    // The tone the tunnel source will record, playing from the start: PulseAudio's
    // monitor of a sink that had just started playing sent nothing for 1.5 s.
    tone_wav(
        work.path().join("peer.wav").as_path(),
        48_000,
        PEER_TONE,
        8.0,
    );
    let peer_play = remote.client_spawn(
        "paplay",
        &["-d", "src", "--latency-msec=30", &w("peer.wav")],
    );
    let mut q = daemon_in(
        &tx,
        &["--device", "file:out.wav,format=f32,rate=48000,channels=2"],
    );
    // Bad arguments: each load fails, its reason in the log.
    let wrong = w("wrong-cookie");
    for (args, why) in [
        (
            format!("server=tcp:{REMOTE} cookie={wrong}"),
            "refused authentication",
        ),
        ("sink=null".to_string(), "no server="),
        (
            format!("server=tcp:{REMOTE} cookie=/nonexistent/cookie"),
            "cookie /nonexistent/cookie",
        ),
        (
            format!("server=tcp:{REMOTE}:4799 cookie={cookie}"),
            "cannot connect to 10.237.0.2:4799",
        ),
    ] {
        let out = pactl(&q, &["load-module", "module-tunnel-sink-new", &args]);
        assert!(!out.status.success(), "'{args}' loaded");
        assert!(
            q.log_text().contains(why),
            "no '{why}' logged for '{args}':\n{}",
            q.log_text()
        );
    }
    // A remote that lets the connection in and never answers AUTH: the load waits out
    // the handshake's 2 s bound on the tunnel's own thread, and meanwhile every other
    // client is served at once (before, the one I/O thread waited for it).
    let silent = silent_listener(&rx, &format!("{REMOTE}:4716"));
    let pending = pa(
        &q,
        "pactl",
        &[
            "load-module",
            "module-tunnel-sink-new",
            &format!("server=tcp:{REMOTE}:4716"),
            &format!("cookie={cookie}"),
            "sink_name=silent",
        ],
    )
    .spawn()
    .expect("pactl");
    let connecting = wait_until(Duration::from_secs(5), || {
        q.log_text().contains("connecting to 10.237.0.2:4716")
    });
    assert!(
        connecting,
        "the silent load did not start:\n{}",
        q.log_text()
    );
    let (info, took) = timed_pactl(&q, &["info"]);
    ok(&info);
    eprintln!(
        "pactl info while a tunnel load waits for a silent remote: {:.0} ms",
        took.as_secs_f64() * 1000.0
    );
    assert!(
        took < PROMPT,
        "pactl info took {took:?} while a tunnel load waited for its remote"
    );
    // The tunnel sink, heard at the remote's null sink.
    let server = format!("server=tcp:{REMOTE}");
    let cookie_arg = format!("cookie={cookie}");
    ok(&pactl(
        &q,
        &[
            "load-module",
            "module-tunnel-sink-new",
            &server,
            "sink=null",
            "sink_name=tunnel",
            LATENCY,
            "reconnect_interval_ms=500",
            &cookie_arg,
        ],
    ));
    assert!(sink_index(&q, "tunnel").is_some(), "no tunnel sink");
    let heard_wav = w("heard.wav");
    let parec = remote.client_spawn("parec", &parec_args("null.monitor", &heard_wav));
    let recording = wait_until(Duration::from_secs(10), || {
        !text(&remote.client("pactl", &["list", "short", "source-outputs"]))
            .trim()
            .is_empty()
    });
    assert!(recording, "parec did not start:\n{}", remote.logs());
    tone_wav(
        work.path().join("tone.wav").as_path(),
        48_000,
        QUAVER_TONE,
        6.0,
    );
    let mut paplay = pa(
        &q,
        "paplay",
        &["-d", "tunnel", "--latency-msec=30", &w("tone.wav")],
    )
    .spawn()
    .expect("paplay");
    // Meanwhile the source: the remote plays a tone into its second null sink, which
    // quaverd records through the tunnel.
    let loaded = pactl(
        &q,
        &[
            "load-module",
            "module-tunnel-source-new",
            &server,
            "source=src.monitor",
            "source_name=tunnel_in",
            LATENCY,
            "reconnect_interval_ms=500",
            &cookie_arg,
        ],
    );
    assert!(
        loaded.status.success(),
        "module-tunnel-source-new: {}\n{}",
        text(&loaded),
        q.log_text()
    );
    let in_wav = w("in.wav");
    let parec_in = pa(&q, "parec", &parec_args("tunnel_in", &in_wav))
        .spawn()
        .expect("parec");
    // parec writes its file in large pieces: long enough for a few of them.
    std::thread::sleep(Duration::from_millis(2500));
    // The silent load failed (its 2 s bound is over by now), the reason logged as a
    // refused one's is; no sink stays.
    let failed = wait_output(pending, Duration::from_secs(10));
    assert!(
        !failed.status.success(),
        "a load to a silent remote succeeded"
    );
    assert!(
        q.log_text().contains("no answer to AUTH"),
        "no reason logged for the silent remote:\n{}",
        q.log_text()
    );
    assert!(
        sink_index(&q, "silent").is_none(),
        "the silent tunnel's sink stayed"
    );
    drop(silent);
    let heard = finish_parec(parec, work.path().join("heard.wav").as_path());
    let got = finish_parec(parec_in, work.path().join("in.wav").as_path());
    let _ = kill(peer_play);
    let at_remote = check_tone(&heard, 48_000, QUAVER_TONE, 0.5, PEER_TONE).unwrap_or_else(|e| {
        panic!(
            "paplay → tunnel → PulseAudio: {e}\nquaverd:\n{}\n{}",
            q.log_text(),
            remote.logs()
        )
    });
    eprintln!("quaverd tunnel sink → PulseAudio: {at_remote}");
    let at_quaver = check_tone(&got, 48_000, PEER_TONE, 0.5, QUAVER_TONE).unwrap_or_else(|e| {
        panic!(
            "PulseAudio → tunnel source → parec: {e}\nquaverd:\n{}\n{}",
            q.log_text(),
            remote.logs()
        )
    });
    eprintln!("PulseAudio → quaverd tunnel source: {at_quaver}");
    // The remote stopped by PID: the sink goes, the stream moves to file-sink and plays.
    remote.stop();
    let gone = wait_until(Duration::from_secs(5), || {
        sink_index(&q, "tunnel").is_none()
    });
    assert!(
        gone,
        "the tunnel sink outlived its remote:\n{}",
        q.log_text()
    );
    let file_sink = sink_index(&q, "file-sink").expect("file-sink");
    let moved = wait_until(Duration::from_secs(5), || {
        input_sinks(&q) == vec![file_sink.clone()]
    });
    assert!(
        moved,
        "paplay's stream did not move to file-sink: {:?}\n{}",
        input_sinks(&q),
        q.log_text()
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        paplay.try_wait().unwrap().is_none(),
        "paplay ended when the remote went"
    );
    let sources = || text(&pactl(&q, &["list", "short", "sources"]));
    assert!(
        !sources().contains("tunnel_in"),
        "the tunnel source outlived its remote"
    );
    for module in ["module-tunnel-sink-new: ", "module-tunnel-source-new: "] {
        let lost = q
            .log_text()
            .lines()
            .filter(|l| l.contains(module) && l.contains(" lost ("))
            .count();
        assert_eq!(
            lost,
            1,
            "{module}: the loss is logged once:\n{}",
            q.log_text()
        );
    }
    // Back: the devices return under their names, within reconnect_interval_ms of the
    // remote answering (the longest wait between attempts).
    remote.spawn_pulseaudio("pulseaudio-again", &modules);
    let t_back = Instant::now();
    let back = wait_until(Duration::from_secs(8), || {
        sink_index(&q, "tunnel").is_some() && sources().contains("tunnel_in")
    });
    assert!(
        back,
        "the tunnel devices did not come back:\n{}",
        q.log_text()
    );
    eprintln!(
        "tunnel sink and source back {:.2} s after the remote answered",
        t_back.elapsed().as_secs_f64()
    );
    signal(paplay.id(), libc::SIGTERM);
    let _ = wait_output(paplay, Duration::from_secs(5));
    remote.stop();
    quaverd_to_quaverd(&q, &rx, &cookie);
    let out = q.path("out.wav");
    let log = q.stop();
    // What played on after the move reached quaverd's own sink.
    let (_, played) = read_wav_f32(&out);
    let on_file = check_tone(&left(&played), 48_000, QUAVER_TONE, 0.5, PEER_TONE)
        .unwrap_or_else(|e| panic!("after the move, file-sink: {e}\n{log}"));
    eprintln!("after the move, file-sink: {on_file}");
    eprintln!("tunnel test: {:.1} s", t0.elapsed().as_secs_f64());
}

/// A tunnel from `q` to a second quaverd in namespace `rx` serving TCP with `cookie`:
/// a tone played into it lands in the second quaverd's file sink.
fn quaverd_to_quaverd(q: &Daemon, rx: &str, cookie: &str) {
    let mut q2 = daemon_in(
        rx,
        &["--device", "file:out.wav,format=f32,rate=48000,channels=2"],
    );
    ok(&pactl(
        &q2,
        &[
            "load-module",
            "module-native-protocol-tcp",
            &format!("listen={REMOTE}"),
            "port=4714",
            "auth-anonymous=0",
            &format!("auth-cookie={cookie}"),
        ],
    ));
    let loaded = pactl(
        q,
        &[
            "load-module",
            "module-tunnel-sink-new",
            &format!("server=tcp:{REMOTE}:4714"),
            "sink=file-sink",
            "sink_name=to_q2",
            LATENCY,
            "reconnect_interval_ms=500",
            &format!("cookie={cookie}"),
        ],
    );
    assert!(
        loaded.status.success(),
        "a tunnel to quaverd: {}\n{}\n{}",
        text(&loaded),
        q.log_text(),
        q2.log_text()
    );
    let wav = q.path("q2-tone.wav");
    tone_wav(&wav, 48_000, QUAVER_TONE, 0.6);
    let paplay = pa(
        q,
        "paplay",
        &["-d", "to_q2", "--latency-msec=30", wav.to_str().unwrap()],
    )
    .spawn()
    .expect("paplay");
    ok(&wait_output(paplay, Duration::from_secs(10)));
    // Through the tunnel's 100 ms and the remote stream's buffer.
    std::thread::sleep(Duration::from_millis(300));
    let out = q2.path("out.wav");
    let log2 = q2.stop();
    let (_, got) = read_wav_f32(&out);
    let at_q2 = check_tone(&left(&got), 48_000, QUAVER_TONE, 0.5, PEER_TONE)
        .unwrap_or_else(|e| panic!("quaverd → tunnel → quaverd: {e}\n{log2}"));
    eprintln!("quaverd tunnel → quaverd: {at_q2}");
    // The second quaverd stopped: the tunnel sink goes.
    let gone = wait_until(Duration::from_secs(5), || sink_index(q, "to_q2").is_none());
    assert!(
        gone,
        "the tunnel sink outlived its quaverd:\n{}",
        q.log_text()
    );
    // Unloaded while a reconnect waits for a remote that lets it in and never answers:
    // the unload returns at once instead of waiting out the handshake's bound.
    let silent = silent_listener(rx, &format!("{REMOTE}:4714"));
    silent.set_nonblocking(true).unwrap();
    let mut held = None;
    let reconnecting = wait_until(Duration::from_secs(5), || {
        held = silent.accept().ok();
        held.is_some()
    });
    assert!(reconnecting, "no reconnect came:\n{}", q.log_text());
    let module = text(&loaded).trim().to_string();
    let (out, took) = timed_pactl(q, &["unload-module", &module]);
    ok(&out);
    eprintln!(
        "unload-module of a tunnel mid-reconnect: {:.0} ms",
        took.as_secs_f64() * 1000.0
    );
    assert!(
        took < PROMPT,
        "unloading a reconnecting tunnel took {took:?}"
    );
    let listed = text(&pactl(q, &["list", "short", "modules"]));
    assert!(
        !listed.contains("to_q2"),
        "module {module} still listed:\n{listed}"
    );
}
