//! RTP between two quaverds on two hosts (issue 37 acceptance 1, first half): two network
//! namespaces joined by a veth pair with a multicast route, created and removed by this
//! test; one quaverd sends a 48 kHz L24 stereo stream to a multicast group through an
//! `rtp-send` sink, the other receives it through an `rtp-recv` source linked to its file
//! sink, and the file holds exactly what was played. The sender's SAP announcement is
//! caught in the receiver's namespace and describes the stream.

use quaver_net::{Encoding, SapKind, SapPacket, SessionDescription};
use quaver_testkit::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Prints the first datagram to the SAP group and port (9875), or fails after 8 s.
const SAP_CATCH: &str = "
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('239.255.255.255', 9875))
m = struct.pack('4s4s', socket.inet_aton('239.255.255.255'), socket.inet_aton('0.0.0.0'))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, m)
s.settimeout(8)
sys.stdout.buffer.write(s.recv(65536))
";

/// Bound for each `ip` command.
const IP_WAIT: Duration = Duration::from_secs(10);

/// Runs `ip ARGS` (bounded); the error carries its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let child = Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ip: {e}"))?;
    let out = wait_output(child, IP_WAIT);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Network namespaces this test made; removed when dropped, even after a failure (the
/// veth pair goes with them).
struct Namespaces(Vec<String>);

impl Namespaces {
    fn add(&mut self, name: &str) -> Result<(), String> {
        ip(&["netns", "add", name])?;
        self.0.push(name.to_string());
        Ok(())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            if let Err(e) = ip(&["netns", "del", n]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// Two hosts: `tx` at 10.237.0.1 and `rx` at 10.237.0.2, multicast routed over the link.
fn two_hosts(tx: &str, rx: &str) -> Result<Namespaces, String> {
    let mut ns = Namespaces(Vec::new());
    ns.add(tx)?;
    ns.add(rx)?;
    // Per-process names: the pair is made in this namespace before it moves, so a name
    // another run holds here would fail the test as if namespaces were not permitted.
    let (a, b) = (
        format!("qv{}a", std::process::id() % 100_000),
        format!("qv{}b", std::process::id() % 100_000),
    );
    ip(&[
        "link", "add", &a, "netns", tx, "type", "veth", "peer", "name", &b, "netns", rx,
    ])?;
    for (n, dev, addr) in [(tx, &a, "10.237.0.1/24"), (rx, &b, "10.237.0.2/24")] {
        ip(&["-n", n, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", n, "link", "set", dev, "up"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        ip(&["-n", n, "route", "add", "224.0.0.0/4", "dev", dev])?;
    }
    Ok(ns)
}

/// quaverd in namespace `ns` with `args`.
fn daemon_in(ns: &str, args: &[&str]) -> Daemon {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(quaverd_bin())
        .args(["--realtime-priority", "0", "--log-level", "debug"])
        .args(["--suspend-timeout-ms", "0"])
        .args(args);
    Daemon::start_cmd(tempfile::tempdir().unwrap(), cmd)
}

fn ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn l24_stream_between_two_namespaces_arrives_bit_exact() {
    let tx = format!("qv-tx-{}", std::process::id());
    let rx = format!("qv-rx-{}", std::process::id());
    let _hosts = match two_hosts(&tx, &rx) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIPPED: network namespaces not available here ({e})");
            return;
        }
    };
    let group = "239.69.0.1:5004";
    // One SAP packet, caught in the receiver's namespace (started before the sender,
    // whose first announcement leaves as it opens).
    let sap_listener = Command::new("ip")
        .args(["netns", "exec", &rx, "python3", "-c", SAP_CATCH])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    std::thread::sleep(Duration::from_millis(300));
    let mut sender = daemon_in(
        &tx,
        &[
            "--device",
            &format!("rtp-send:dest={group},format=L24,rate=48000,channels=2"),
        ],
    );
    let mut receiver = daemon_in(
        &rx,
        &[
            "--device",
            "file:out.wav,format=f32,rate=48000,channels=2",
            "--device",
            &format!(
                "rtp-recv:listen={group},source=10.237.0.1,format=L24,rate=48000,channels=2,latency=60"
            ),
        ],
    );
    ok(&receiver.run(&["link", "rtp-recv-source", "file-sink"]));
    let sap = wait_output(sap_listener, Duration::from_secs(10));
    ok(&sap);
    let p = SapPacket::parse(&sap.stdout).expect("a SAP packet");
    assert_eq!(
        (p.kind, p.source),
        (SapKind::Announce, "10.237.0.1".parse().unwrap())
    );
    let d = SessionDescription::parse(p.sdp).expect("its SDP");
    assert_eq!(
        (d.name.as_str(), d.address.to_string(), d.port, d.ttl),
        ("rtp-send", "239.69.0.1".to_string(), 5004, Some(1))
    );
    assert_eq!(
        (d.encoding, d.rate, d.channels, d.payload_type, d.ptime_us),
        (Encoding::L24, 48_000, 2, 97, Some(1000))
    );
    // Two seconds of 24-bit noise (every value exact in L24), starting non-zero.
    let input: Vec<f32> = noise_s16(48_000 * 2 * 2, 37, 30_000)
        .iter()
        .enumerate()
        .map(|(i, &s)| ((s as i32 * 256 + (i as i32 % 251)) | 1) as f32 / 8_388_608.0)
        .collect();
    write_wav_f32(&sender.path("in.wav"), 48_000, 2, &input);
    let t0 = Instant::now();
    ok(&sender.run(&["play", "in.wav"]));
    // The tail crosses the link and the 60 ms jitter buffer.
    std::thread::sleep(Duration::from_millis(300));
    let played = t0.elapsed();
    // The receiver first: it must not see the sender go quiet.
    let out_path = receiver.path("out.wav");
    let log = receiver.stop();
    sender.stop();
    let (_, out) = read_wav_f32(&out_path);
    assert!(
        out.iter().any(|&s| s != 0.0),
        "nothing arrived in {played:?}; receiver log:\n{log}"
    );
    // The receiver's account when it closed: nothing lost, concealed or dropped.
    let line = log
        .lines()
        .find(|l| l.contains("rtp-recv: ") && l.contains(" accepted, "))
        .unwrap_or_else(|| panic!("no rtp-recv summary in the log:\n{log}"));
    eprintln!("{line}");
    assert_contains_exactly(&out, &input, "received stream");
    for clean in [
        " 0 lost,",
        " 0 concealed",
        " 0 late,",
        " 0 jumps,",
        " 0 malformed,",
        " 0 dropped",
    ] {
        assert!(line.contains(clean), "{clean:?} missing in: {line}");
    }
}
