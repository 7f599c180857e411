//! Golden tests of the modes' reports: fixed results (the `results` of real `--quick`
//! runs, and hand-made ones for jack and for failures) rendered and compared with the output captured
//! before the reports moved to the shared builder ([`crate::report::doc`]), so that a
//! change to a report's content shows up here. `QUAVER_BENCH_BLESS=1 cargo test -p
//! quaver-bench golden` rewrites the expected files after an intended change.

use crate::modes::{bigbuf, drift, jack, latency, load, peers, stress, synth};
use crate::report::ModeOutput;
use serde::de::DeserializeOwned;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/report/golden")
}

fn fixture<T: DeserializeOwned>(name: &str) -> T {
    let p = dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Everything a report hands on, as text. The Markdown is compared without trailing
/// whitespace, which `report::write` trims.
fn dump(out: &ModeOutput) -> String {
    let mut s = String::new();
    s.push_str(out.markdown.trim_end());
    s.push_str("\n=== summary\n");
    s.push_str(&out.summary.text());
    for t in &out.extra {
        s.push_str("=== extra\n");
        s.push_str(&t.text());
    }
    // Plots and the JSON record by digest: they are long, and a change shows as well.
    for (name, svg) in &out.plots {
        s.push_str(&format!("=== plot {name} {}\n", digest(svg)));
    }
    let json = serde_json::to_string(&out.results).unwrap_or_default();
    s.push_str(&format!("=== results {}\n", digest(&json)));
    s
}

/// FNV-1a 64 and the length: stable across Rust versions, unlike `DefaultHasher`.
fn digest(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("fnv64 {h:016x}, {} bytes", text.len())
}

fn check(name: &str, out: ModeOutput) {
    let got = dump(&out);
    let p = dir().join(format!("{name}.out"));
    if std::env::var_os("QUAVER_BENCH_BLESS").is_some() {
        std::fs::write(&p, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if got != want {
        let line = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| got.lines().count().min(want.lines().count()));
        panic!(
            "{name}: the report differs from {} from line {}:\n got: {:?}\nwant: {:?}",
            p.display(),
            line + 1,
            got.lines().nth(line),
            want.lines().nth(line)
        );
    }
}

#[test]
fn latency_report() {
    check("latency", latency::render(&fixture("latency")));
}

#[test]
fn load_report() {
    check("load", load::render(&fixture("load")));
}

#[test]
fn stress_reports() {
    for name in ["stress", "stress_failures"] {
        check(name, stress::render(&fixture(name)));
    }
}

#[test]
fn synth_reports() {
    for name in ["synth", "synth_failures"] {
        check(name, synth::render::render(&fixture(name)));
    }
}

#[test]
fn peers_reports() {
    for name in [
        "peers",
        "peers_failures",
        "peers_monitor_only",
        "peers_capture_only",
    ] {
        check(name, peers::render::render(&fixture(name)));
    }
}

#[test]
fn jack_reports() {
    for name in ["jack", "jack_one_round"] {
        check(name, jack::render::render(&fixture(name)));
    }
}

#[test]
fn bigbuf_reports() {
    for name in ["bigbuf", "bigbuf_failures", "bigbuf_events_only"] {
        check(name, bigbuf::render::render(&fixture(name)));
    }
}

#[test]
fn drift_report() {
    check("drift", drift::render::render(&fixture("drift")));
}
