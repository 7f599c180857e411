//! A network device's live figures (the engine's [`NetStatus`]) in protocol terms, for
//! the status reply (docs/protocol/requests.md, "Network devices").

use quaver_engine::NetStatus;
use quaver_protocol::message::{MAX_SESSION_NAME_BYTES, NetDeviceStatus, RtpRecvInfo, RtpSendInfo};

/// Non-finite, negative or absurd figures never leave the server (JSON has no NaN;
/// clients refuse more than an hour).
fn ms(v: f64) -> f64 {
    if v.is_finite() {
        v.clamp(0.0, 3_600_000.0)
    } else {
        0.0
    }
}

/// An SDP name as announced on the network, made fit to show: control characters
/// replaced, cut to [`MAX_SESSION_NAME_BYTES`].
fn session_name(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    let mut cut = s.len().min(MAX_SESSION_NAME_BYTES);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s
}

/// The protocol's form of `s`.
pub(crate) fn net_info(s: &NetStatus) -> NetDeviceStatus {
    match s {
        NetStatus::RtpRecv(r) => NetDeviceStatus::RtpRecv(RtpRecvInfo {
            listen: r.listen.to_string(),
            remote: r.remote.map(|a| a.to_string()),
            session: r.session.as_deref().map(session_name),
            datagrams: r.datagrams,
            // Taken and received are read a cycle apart: never more taken than came.
            packets: r.packets.min(r.datagrams),
            lost: r.lost,
            late: r.late,
            dropped: r.dropped,
            concealed_frames: r.concealed_frames,
            underruns: r.underruns,
            restarts: r.restarts,
            jitter_ms: ms(r.jitter_ms),
            target_ms: ms(r.target_ms),
            delay_ms: ms(r.delay_ms),
            drift_ppm: r.drift_ppm.filter(|d| (-1e6..=1e6).contains(d)),
            steered_ppm: r.steered_ppm.filter(|d| (-1e6..=1e6).contains(d)),
        }),
        NetStatus::RtpSend(t) => NetDeviceStatus::RtpSend(RtpSendInfo {
            dest: t.dest.to_string(),
            sap: t.sap.map(|a| a.to_string()),
            packets: t.packets,
            bytes: t.bytes,
            errors: t.errors,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_names_are_made_fit_to_show() {
        assert_eq!(
            session_name("studio\n\u{1b}[2J"),
            "studio\u{fffd}\u{fffd}[2J"
        );
        let long = "é".repeat(MAX_SESSION_NAME_BYTES);
        let cut = session_name(&long);
        assert_eq!(cut.len(), MAX_SESSION_NAME_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
