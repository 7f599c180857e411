//! `quaver quantum`: the graph's quantum, why it is what it is, and forcing it.

use crate::args::{QuantumAction, QuantumArgs};
use crate::commands::{connect, print_out};
use anyhow::Result;
use quaver_client::quaver_protocol::QuantumReport;
use std::path::Path;

/// `quaver quantum [--json] [force N | release]`.
pub fn quantum(server: Option<&Path>, a: &QuantumArgs) -> Result<()> {
    let mut conn = connect(server)?;
    match a.action {
        Some(QuantumAction::Force { frames }) => conn.force_quantum(Some(frames))?,
        Some(QuantumAction::Release) => conn.force_quantum(None)?,
        None => {}
    }
    let q = conn.quantum()?;
    if a.json {
        return print_out(&(serde_json::to_string_pretty(&q)? + "\n"));
    }
    let rate = conn.status()?.rate;
    print_out(&report_text(&q, rate))
}

/// One line for the quantum in force and its reason, one for the bounds.
pub fn report_text(q: &QuantumReport, rate: u32) -> String {
    let ms = |f: u32| f as f64 * 1000.0 / rate.max(1) as f64;
    let why = match q.source.as_str() {
        "forced" => "forced (`quaver quantum release` gives it back to the clients)".into(),
        "requested" => format!(
            "requested by node {} '{}' (latency {} frames)",
            q.node.map_or_else(|| "?".into(), |n| n.to_string()),
            q.node_name.as_deref().unwrap_or("?"),
            q.latency.map_or_else(|| "?".into(), |l| l.to_string()),
        ),
        "default" => "default (no client asks for a latency)".into(),
        other => other.into(),
    };
    let mut s = format!(
        "quantum: {} frames ({:.2} ms at {rate} Hz), {why}\n",
        q.quantum,
        ms(q.quantum)
    );
    if let Some(f) = q.forced.filter(|&f| f != q.quantum) {
        // Only between the force and the plan carrying it.
        s += &format!("forced: {f} frames\n");
    }
    s += &format!(
        "bounds: {}..={} frames, default {}\n",
        q.min, q.max, q.default
    );
    if q.freewheel {
        s += "freewheeling: the graph runs as fast as its clients allow, devices suspended\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(source: &str) -> QuantumReport {
        QuantumReport {
            quantum: 128,
            source: source.into(),
            forced: None,
            node: None,
            node_name: None,
            latency: None,
            min: 32,
            max: 8192,
            default: 1024,
            freewheel: false,
        }
    }

    #[test]
    fn the_report_says_why() {
        let mut q = report("forced");
        q.forced = Some(128);
        assert_eq!(
            report_text(&q, 48000),
            "quantum: 128 frames (2.67 ms at 48000 Hz), forced (`quaver quantum release` \
             gives it back to the clients)\nbounds: 32..=8192 frames, default 1024\n"
        );
        let mut q = report("requested");
        (q.node, q.node_name, q.latency) = (Some(7), Some("synth".into()), Some(256));
        assert!(
            report_text(&q, 48000)
                .starts_with("quantum: 128 frames (2.67 ms at 48000 Hz), requested by node 7 'synth' (latency 256 frames)\n")
        );
        assert!(report_text(&report("default"), 48000).contains("default (no client asks"));
    }
}
