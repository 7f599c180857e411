//! A network device's live figures as properties of its sink or source
//! (`quaver.rtp.*`, shown by `pactl list sources`): the same figures as `quaver status`
//! (docs/net.md, "Watching a stream"), read when the list is asked for.

use crate::wire::convert::cstr;
use pulseaudio::protocol::Props;
use quaver_engine::NetStatus;

/// Adds the figures of the network device whose node is `node` (`<device>-source` or
/// `<device>-sink`), if `net` has one.
pub(crate) fn add(props: &mut Props, net: &[(String, NetStatus)], node: &str) {
    let Some((_, st)) = net.iter().find(|(dev, _)| {
        node.strip_prefix(dev.as_str())
            .is_some_and(|rest| rest == "-source" || rest == "-sink")
    }) else {
        return;
    };
    let mut set = |key: &str, value: String| {
        props.set_bytes(
            cstr(&format!("quaver.rtp.{key}")),
            cstr(&value).as_bytes_with_nul(),
        );
    };
    match st {
        NetStatus::RtpRecv(r) => {
            set("listen", r.listen.to_string());
            if let Some(a) = r.remote {
                set("remote", a.to_string());
            }
            if let Some(s) = &r.session {
                set("session", s.clone());
            }
            for (k, v) in [
                ("packets", r.packets),
                ("lost", r.lost),
                ("late", r.late),
                ("dropped", r.dropped),
                ("concealed_frames", r.concealed_frames),
                ("underruns", r.underruns),
            ] {
                set(k, v.to_string());
            }
            for (k, v) in [
                ("jitter_ms", r.jitter_ms),
                ("delay_ms", r.delay_ms),
                ("target_ms", r.target_ms),
            ] {
                set(k, format!("{v:.3}"));
            }
            if let Some(d) = r.drift_ppm {
                set("drift_ppm", format!("{d:.1}"));
            }
        }
        NetStatus::RtpSend(t) => {
            set("dest", t.dest.to_string());
            set("sap", t.sap.map_or_else(|| "off".into(), |g| g.to_string()));
            for (k, v) in [
                ("packets", t.packets),
                ("bytes", t.bytes),
                ("errors", t.errors),
            ] {
                set(k, v.to_string());
            }
        }
    }
}
