//! An RTP sender whose clock drifts, followed by the receiver (issue 37: "sender clock
//! drift absorbed by adaptive resampling"; docs/net.md, "Following the sender's
//! clock"). Two pairs of quaverds on this host's loopback, unicast, no SAP:
//!
//! - the drifting pair: the sender's graph runs on the simulated card at +500 ppm (a
//!   crystal far off, so that the test is short) and sends a 1 kHz tone; the receiver,
//!   on a file sink paced by the monotonic clock, engages its playout loop within
//!   seconds and then holds the jitter buffer at its level: no underrun, no restart,
//!   the buffer's delay near its target at the end, `quaver status` showing the
//!   resampling at about the sender's rate, and the tone in the file continuous across
//!   the switch from the direct path to the resampler (no gap, no jump);
//! - the steady pair, on one clock: the receiver never resamples (bit-exact path kept).

use quaver_testkit::*;
use std::time::{Duration, Instant};

const RATE: u32 = 48_000;
/// How long the streams run: the loop engaged 13–35 s in (the arrival times' drift
/// estimate needs eight one-second windows, and measures a step such as the sender's
/// skip after an xrun for another; 500 ppm is past its 200 ppm bar, and the estimate
/// seeds the loop).
const SECONDS: u64 = 60;

fn status_of(d: &Daemon) -> serde_json::Value {
    let out = d.run(&["status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

fn recv_figures(d: &Daemon) -> serde_json::Value {
    let st = status_of(d);
    st["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["name"] == "rtp-recv"))
        .map(|d| d["net"].clone())
        .unwrap_or_else(|| panic!("no rtp-recv in {st:#}"))
}

fn pair(sender_clock: &str, record: bool) -> (Daemon, Daemon) {
    let port = free_port("127.0.0.1").expect("a free port");
    let sink = if record {
        "file:out.wav,format=f32"
    } else {
        "null"
    };
    let receiver = Daemon::start(&[
        "--suspend-timeout-ms",
        "0",
        "--device",
        sink,
        "--device",
        &format!("rtp-recv:listen=127.0.0.1:{port},format=L24,rate=48000,channels=2,latency=60"),
    ]);
    // Real-time, as a sender on a sound card runs: without it, this loaded host gave
    // the simulated card xruns, each a gap the receiver can only play through.
    let sender = Daemon::start_realtime(
        20,
        &[
            "--suspend-timeout-ms",
            "0",
            "--device",
            sender_clock,
            "--device",
            &format!("rtp-send:dest=127.0.0.1:{port},format=L24,rate=48000,channels=2,sap=off"),
        ],
    );
    (receiver, sender)
}

#[test]
fn a_drifting_sender_is_followed_and_one_clock_stays_bit_exact() {
    // A card's period of 1024 frames (21 ms of headroom at the graph's quantum): with
    // the simulated card's default of 256 this shared host gave the sender an xrun
    // every 12-20 s, each a step the receiver pays back at 0.5 ms a second at most
    // (`crates/net` tests those steps; this test is about the drift).
    let (mut drift_rx, mut drift_tx) = pair("sim:drift_ppm=500,period=1024", true);
    let (mut same_rx, mut same_tx) = pair("null", false);
    let linked = drift_rx.run(&["link", "rtp-recv-source", "file-sink"]);
    assert!(
        linked.status.success(),
        "{}",
        String::from_utf8_lossy(&linked.stderr)
    );
    // The tone, a little longer than the run.
    let frames = (SECONDS as usize + 4) * RATE as usize;
    let tone: Vec<f32> = (0..frames)
        .flat_map(|n| {
            let v =
                (0.5 * (2.0 * std::f64::consts::PI * 1000.0 * n as f64 / RATE as f64).sin()) as f32;
            [v, v]
        })
        .collect();
    write_wav_f32(&drift_tx.path("tone.wav"), RATE, 2, &tone);
    let mut play = drift_tx
        .quaver()
        .args(["play", "--to", "rtp-send-sink", "tone.wav"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("quaver play");
    let t0 = Instant::now();
    // When the loop engaged, and the buffer's delay then.
    let mut engaged: Option<(Duration, f64)> = None;
    // The buffer's delay at each reading since.
    let mut delays = Vec::new();
    while t0.elapsed() < Duration::from_secs(SECONDS) {
        std::thread::sleep(Duration::from_secs(1));
        let r = recv_figures(&drift_rx);
        if engaged.is_none() && r["steered_ppm"].is_number() {
            engaged = Some((t0.elapsed(), r["delay_ms"].as_f64().unwrap_or(f64::NAN)));
        }
        if engaged.is_some() {
            delays.push(r["delay_ms"].as_f64().unwrap_or(f64::NAN));
        }
        eprintln!("{:>4.1} s: {r}", t0.elapsed().as_secs_f64());
    }
    // The sender's card had xruns (a loaded host): each loses audio for real, and the
    // sender's timestamps skip the time lost (logged), so each may leave one gap below.
    let tx_log = drift_tx.log_text();
    let sender_xruns = tx_log.matches("xrun on device").count();
    for l in tx_log
        .lines()
        .filter(|l| l.contains("xrun") || l.contains("graph lost"))
    {
        eprintln!("sender: {l}");
    }
    let r = recv_figures(&drift_rx);
    let same = recv_figures(&same_rx);
    let _ = play.kill();
    let _ = play.wait();
    let num =
        |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no {k} in {v}"));
    // Followed: the loop's estimate near the sender's +500 ppm, and the buffer held.
    let (engaged_at, delay_then) = engaged.unwrap_or_else(|| panic!("never resampled: {r}"));
    assert!(
        engaged_at < Duration::from_secs(SECONDS - 20),
        "the loop engaged only {engaged_at:?} in: too late to see it hold the level"
    );
    let steered = num(&r, "steered_ppm");
    assert!(
        (steered - 500.0).abs() < 200.0,
        "estimate {steered} ppm: {r}"
    );
    assert_eq!(
        (num(&r, "underruns"), num(&r, "restarts")),
        (0.0, 0.0),
        "{r}"
    );
    // Unfollowed, the delay would grow by 0.5 ms a second from where the loop engaged
    // (at least 10 ms over the 20 s or more after it); held, it stays there. The median
    // of the last 15 readings, within half of what unfollowed drift would have added:
    // a sender's xrun shifts the level and the loop pays that back at 0.5 ms a second
    // at most (seen under the whole suite: stalls of 54 and 97 ms 20 s before the end
    // left the median 6 ms low, paying back).
    let mut last: Vec<f64> = delays[delays.len().saturating_sub(15)..].to_vec();
    last.sort_by(f64::total_cmp);
    let delay = last[last.len() / 2];
    let unfollowed = 0.5 * (t0.elapsed().as_secs_f64() - engaged_at.as_secs_f64());
    assert!(
        (delay - delay_then).abs() < unfollowed / 2.0,
        "delay {delay_then:.1} ms when the loop engaged {engaged_at:?} in, median {delay:.1} \
         ms over the last readings {last:.1?} (unfollowed: {unfollowed:.1} ms more): {r}"
    );
    // One clock: never resampled.
    assert!(
        same["steered_ppm"].is_null(),
        "the steady pair resampled: {same}"
    );
    assert!(num(&same, "packets") > 10_000.0, "{same}");
    // The tone as the receiver's file sink wrote it: continuous (no sample off the sine
    // its neighbours predict by more than a resampled sine's own error; a gap, a
    // repeated or a skipped frame would be 0.06 or more) but where the sender lost
    // audio — and across the switch to the resampler in particular.
    drift_rx.stop();
    let out = read_wav_f32(&drift_rx.path("out.wav")).1;
    let left: Vec<f32> = out.iter().step_by(2).copied().collect();
    let start = left
        .iter()
        .position(|v| v.abs() > 0.25)
        .expect("the tone reached the file");
    // Skip the tone's first second (the stream's start, and the fade-in of a new link).
    let body = &left[start + RATE as usize..left.len().saturating_sub(RATE as usize)];
    let c = 2.0 * (2.0 * std::f64::consts::PI * 1000.0 / RATE as f64).cos() as f32;
    let off: Vec<usize> = body
        .windows(3)
        .enumerate()
        .filter(|(_, w)| (w[2] - c * w[1] + w[0]).abs() >= 0.01)
        .map(|(i, _)| i)
        .collect();
    // One event per stretch: samples within 10 ms of each other are one gap.
    let gaps: Vec<f64> = off
        .iter()
        .enumerate()
        .filter(|&(k, &i)| k == 0 || i - off[k - 1] > RATE as usize / 100)
        .map(|(_, &i)| (i + RATE as usize) as f64 / RATE as f64)
        .collect();
    assert!(
        gaps.len() <= sender_xruns,
        "{} discontinuities in the tone (at {gaps:.3?} s of it) but {sender_xruns} sender \
         xruns; the loop engaged {engaged_at:?} in",
        gaps.len()
    );
    same_rx.stop();
    same_tx.stop();
    drift_tx.stop();
}
