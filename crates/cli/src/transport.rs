//! `quaver transport`: the JACK transport — shown, started, stopped, located.

use crate::args::{TransportAction, TransportArgs};
use crate::commands::{connect, print_out};
use anyhow::{Result, bail};
use quaver_client::quaver_protocol::message::{Reply, Request, TransportInfo};
use std::path::Path;

/// One line: state, frame (and its time at `rate`), BBT and tempo, master.
pub fn transport_text(t: &TransportInfo, rate: u32) -> String {
    let secs = t.frame as f64 / rate.max(1) as f64;
    let mut s = format!(
        "{} at frame {} ({}:{:06.3})",
        t.state,
        t.frame,
        (secs / 60.0) as u64,
        secs % 60.0
    );
    if let (Some(bar), Some(beat), Some(tick)) = (t.bar, t.beat, t.tick) {
        s += &format!(", {bar}|{beat}|{tick:04}");
        if let Some(bpm) = t.beats_per_minute {
            s += &format!(" at {bpm:.1} bpm");
        }
    }
    match t.master {
        Some(n) => s += &format!(", timebase master: node {n}"),
        None => s += ", no timebase master",
    }
    s + "\n"
}

/// `quaver transport [start|stop|locate FRAME] [--json]`.
pub fn transport(server: Option<&Path>, a: &TransportArgs) -> Result<()> {
    let mut conn = connect(server)?;
    if let Some(action) = a.action {
        let req = match action {
            TransportAction::Start => Request::TransportStart,
            TransportAction::Stop => Request::TransportStop,
            TransportAction::Locate { frame } => Request::TransportLocate { frame },
        };
        conn.request(req)?;
        return Ok(());
    }
    let rate = conn.status()?.rate;
    let t = match conn.request(Request::TransportQuery)?.0 {
        Reply::Transport(t) => t,
        other => bail!("the server answered transport_query with {}", other.kind()),
    };
    if a.json {
        return print_out(&(serde_json::to_string_pretty(&t)? + "\n"));
    }
    print_out(&transport_text(&t, rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_reads_as_one_line() {
        let mut t = TransportInfo {
            state: "rolling".into(),
            frame: 96256,
            valid: 0x10,
            bar: Some(1),
            beat: Some(4),
            tick: Some(15),
            beats_per_minute: Some(90.0),
            master: Some(12),
            sync_timeout_us: 2_000_000,
            refused: 0,
        };
        assert_eq!(
            transport_text(&t, 48000),
            "rolling at frame 96256 (0:02.005), 1|4|0015 at 90.0 bpm, timebase master: node 12\n"
        );
        t.bar = None;
        t.master = None;
        t.state = "stopped".into();
        t.frame = 48000 * 61;
        assert_eq!(
            transport_text(&t, 48000),
            "stopped at frame 2928000 (1:01.000), no timebase master\n"
        );
    }
}
