//! Network devices in `quaver status` (a `network:` section, every figure) and `quaver
//! ls` (one short line under the device's node): RTP receivers' loss, jitter, buffer
//! delay and the sender's clock; RTP senders' packets (docs/cli.md, docs/net.md).

use quaver_protocol::DeviceStatus;
use quaver_protocol::message::{NetDeviceStatus, RtpRecvInfo, RtpSendInfo};
use std::fmt::Write;

/// The device's figures, if it has any and they pass [`NetDeviceStatus::check`]; a
/// line saying what was wrong otherwise.
fn checked(d: &DeviceStatus) -> Option<Result<&NetDeviceStatus, String>> {
    let n = d.net.as_ref()?;
    Some(n.check().map(|()| n))
}

/// Bytes in B, kB, MB or GB (powers of 1000, as network rates are).
fn bytes_text(b: u64) -> String {
    match b {
        0..1_000 => format!("{b} B"),
        1_000..1_000_000 => format!("{:.1} kB", b as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        _ => format!("{:.2} GB", b as f64 / 1e9),
    }
}

/// Where a receiver's stream comes from: `'name' from addr`, `addr`, or "no packets
/// yet".
fn origin(r: &RtpRecvInfo) -> String {
    match (&r.session, &r.remote) {
        (Some(s), Some(a)) => format!("'{s}' from {a}"),
        (Some(s), None) => format!("'{s}' (no packets yet)"),
        (None, Some(a)) => format!("from {a}"),
        (None, None) => "no packets yet".into(),
    }
}

fn drift_text(r: &RtpRecvInfo) -> String {
    let measured = r
        .drift_ppm
        .map_or_else(|| "not measured yet".into(), |d| format!("{d:+.1} ppm"));
    match r.steered_ppm {
        Some(p) => format!("{measured}, followed by resampling ({p:+.1} ppm)"),
        None => measured,
    }
}

fn recv_lines(name: &str, r: &RtpRecvInfo, s: &mut String) {
    let _ = writeln!(s, "  {name}: RTP receiver on {}, {}", r.listen, origin(r));
    let _ = writeln!(
        s,
        "    packets {} ({} datagrams), lost {}, late {}, dropped {}, concealed {} frames, \
         underruns {}, restarts {}",
        r.packets,
        r.datagrams,
        r.lost,
        r.late,
        r.dropped,
        r.concealed_frames,
        r.underruns,
        r.restarts
    );
    let _ = writeln!(
        s,
        "    jitter {:.2} ms, buffer {:.1} ms (target {:.1} ms), sender clock {}",
        r.jitter_ms,
        r.delay_ms,
        r.target_ms,
        drift_text(r)
    );
}

fn send_lines(name: &str, t: &RtpSendInfo, s: &mut String) {
    let sap = t
        .sap
        .as_ref()
        .map_or_else(|| "SAP off".into(), |g| format!("SAP on ({g})"));
    let _ = writeln!(
        s,
        "  {name}: RTP sender to {}, {sap}: {} packets, {}, {} errors",
        t.dest,
        t.packets,
        bytes_text(t.bytes),
        t.errors
    );
}

/// The `network:` section of `quaver status`: empty without network devices.
pub fn network_text(devices: &[DeviceStatus]) -> String {
    let mut s = String::new();
    for d in devices {
        match checked(d) {
            None => continue,
            Some(Err(e)) => {
                let _ = writeln!(s, "  {}: figures not shown: {e}", d.name);
            }
            Some(Ok(NetDeviceStatus::RtpRecv(r))) => recv_lines(&d.name, r, &mut s),
            Some(Ok(NetDeviceStatus::RtpSend(t))) => send_lines(&d.name, t, &mut s),
        }
    }
    if s.is_empty() {
        s
    } else {
        format!("\nnetwork:\n{s}")
    }
}

/// One short line for `quaver ls`, under the node of device `d`.
pub fn short_line(d: &DeviceStatus) -> Option<String> {
    Some(match checked(d)? {
        Err(e) => format!("net: figures not shown: {e}"),
        Ok(NetDeviceStatus::RtpRecv(r)) => format!(
            "net: {}, {} packets, {} lost, jitter {:.2} ms, buffer {:.1}/{:.1} ms, clock {}",
            origin(r),
            r.packets,
            r.lost,
            r.jitter_ms,
            r.delay_ms,
            r.target_ms,
            drift_text(r)
        ),
        Ok(NetDeviceStatus::RtpSend(t)) => format!(
            "net: to {}, {} packets, {}, SAP {}",
            t.dest,
            t.packets,
            bytes_text(t.bytes),
            if t.sap.is_some() { "on" } else { "off" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(name: &str, net: NetDeviceStatus) -> DeviceStatus {
        DeviceStatus {
            name: name.into(),
            description: String::new(),
            state: "running".into(),
            rate: 48000,
            playback_channels: None,
            capture_channels: Some(2),
            underruns: 0,
            overruns: 0,
            wakeups: 0,
            margin_frames: 0,
            margin_changes: 0,
            follow: None,
            net: Some(net),
        }
    }

    fn recv() -> RtpRecvInfo {
        RtpRecvInfo {
            listen: "239.69.0.1:5004".into(),
            remote: Some("10.237.0.1:40000".into()),
            session: Some("studio".into()),
            datagrams: 2010,
            packets: 1990,
            lost: 10,
            late: 1,
            dropped: 19,
            concealed_frames: 480,
            underruns: 0,
            restarts: 0,
            jitter_ms: 0.0512,
            target_ms: 60.0,
            delay_ms: 60.44,
            drift_ppm: Some(-3.24),
            steered_ppm: None,
        }
    }

    #[test]
    fn status_section_and_ls_lines() {
        let send = NetDeviceStatus::RtpSend(RtpSendInfo {
            dest: "239.69.0.1:5004".into(),
            sap: Some("224.0.0.56:9875".into()),
            packets: 3000,
            bytes: 3_600_000,
            errors: 0,
        });
        let mut plain = device("null", send.clone());
        plain.net = None;
        let devices = [
            plain,
            device("rtp-recv", NetDeviceStatus::RtpRecv(recv())),
            device("rtp-send", send),
        ];
        let want = "
network:
  rtp-recv: RTP receiver on 239.69.0.1:5004, 'studio' from 10.237.0.1:40000
    packets 1990 (2010 datagrams), lost 10, late 1, dropped 19, concealed 480 frames, underruns 0, restarts 0
    jitter 0.05 ms, buffer 60.4 ms (target 60.0 ms), sender clock -3.2 ppm
  rtp-send: RTP sender to 239.69.0.1:5004, SAP on (224.0.0.56:9875): 3000 packets, 3.6 MB, 0 errors
";
        assert_eq!(network_text(&devices), want);
        assert_eq!(network_text(&devices[..1]), "");
        assert_eq!(short_line(&devices[0]), None);
        assert_eq!(
            short_line(&devices[1]).unwrap(),
            "net: 'studio' from 10.237.0.1:40000, 1990 packets, 10 lost, jitter 0.05 ms, \
             buffer 60.4/60.0 ms, clock -3.2 ppm"
        );
        assert_eq!(
            short_line(&devices[2]).unwrap(),
            "net: to 239.69.0.1:5004, 3000 packets, 3.6 MB, SAP on"
        );
    }

    #[test]
    fn unchecked_figures_are_not_shown() {
        let mut r = recv();
        r.session = Some("\u{1b}[2J".into());
        r.drift_ppm = None;
        let d = device("rtp-recv", NetDeviceStatus::RtpRecv(r));
        let text = network_text(std::slice::from_ref(&d));
        assert!(
            text.contains("rtp-recv: figures not shown: session name") && !text.contains('\u{1b}'),
            "{text}"
        );
        let mut r = recv();
        (r.session, r.remote, r.drift_ppm) = (None, None, None);
        let d = device("rtp-recv", NetDeviceStatus::RtpRecv(r));
        assert!(
            short_line(&d)
                .unwrap()
                .starts_with("net: no packets yet, 1990 packets"),
        );
        assert!(network_text(&[d]).contains("sender clock not measured yet"));
    }
}
