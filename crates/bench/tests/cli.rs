//! End to end: every mode runs from the binary with one command, on a short run, and
//! writes a JSON record and a Markdown report that name the machine, the versions, the
//! exact commands and the seed.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn bench(args: &[&str], out: &Path) -> Output {
    let mut c = Command::new(common::bench_bin());
    c.args(args)
        .arg("--out")
        .arg(out)
        .arg("--quaverd")
        .arg(common::quaverd_bin());
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut child = child;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!("quaver-bench {args:?} did not finish within 240 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The one JSON record a run wrote into `dir` for `mode`.
fn record(dir: &Path, mode: &str) -> serde_json::Value {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(&format!("{mode}-")) && n.ends_with(".json")
        })
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let md = files[0].with_extension("md");
    assert!(md.exists(), "Markdown report next to the record");
    serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap()
}

fn check_common(v: &serde_json::Value, mode: &str, seed: u64) {
    assert_eq!(v["mode"], mode);
    assert_eq!(v["seed"], seed);
    assert_eq!(v["quick"], true);
    assert!(v["machine"]["cpu_model"].is_string());
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(
        v["machine"]["kernel"]
            .as_str()
            .unwrap()
            .starts_with("Linux")
    );
    assert!(v["machine"]["governor"].is_string());
    assert!(
        v["versions"]["quaverd"]
            .as_str()
            .unwrap()
            .contains("quaverd")
    );
    for peer in ["pulseaudio", "pipewire", "jackd", "cyclictest", "stress-ng"] {
        let s = v["versions"][peer].as_str().unwrap();
        assert!(!s.is_empty() && s != "0", "{peer}: {s}");
    }
    assert!(
        v["reproduce"]
            .as_str()
            .unwrap()
            .contains(&format!("--seed {seed}")),
        "{}",
        v["reproduce"]
    );
}

#[test]
fn latency_quick_writes_its_report() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(
        &[
            "latency",
            "--quick",
            "--quanta",
            "64,256",
            "--impulses",
            "4",
            "--seed",
            "11",
        ],
        dir.path(),
    ));
    assert!(out.contains("sim") && out.contains("monitor"), "{out}");
    assert!(out.contains("report: "));
    let v = record(dir.path(), "latency");
    check_common(&v, "latency", 11);
    let pts = v["results"]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 4);
    let cmds = v["commands"].as_array().unwrap();
    assert_eq!(cmds.len(), 4, "one quaverd per point: {cmds:?}");
    assert!(cmds[0].as_str().unwrap().contains("--device sim:"));
    assert!(cmds[0].as_str().unwrap().contains("XDG_RUNTIME_DIR="));
    let svgs = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "svg"))
        .count();
    assert_eq!(svgs, 2);
}

#[test]
fn load_quick_writes_its_report() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(
        &[
            "load",
            "--quick",
            "--streams",
            "3",
            "--duration",
            "0.5",
            "--seed",
            "3",
        ],
        dir.path(),
    ));
    assert!(out.contains("native") && out.contains("resampled"), "{out}");
    let v = record(dir.path(), "load");
    check_common(&v, "load", 3);
    let pts = v["results"]["points"].as_array().unwrap();
    assert_eq!(pts.len(), 2);
    for p in pts {
        assert_eq!(p["streams"], 3);
        assert!(p["audio_s"].as_f64().unwrap() > 0.0);
        assert!(p["rss_kb"].as_u64().unwrap() > 0);
        assert!(p["wakeups_per_s"].as_f64().unwrap() > 0.0);
        assert!(p["threads"].as_u64().unwrap() >= 3);
    }
    assert_eq!(pts[1]["client_rate"], 44_100);
}

#[test]
fn stress_quick_writes_its_report() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(
        &[
            "stress",
            "--quick",
            "--stressor",
            "builtin",
            "--duration",
            "0.6",
            "--seed",
            "5",
        ],
        dir.path(),
    ));
    assert!(out.contains("quaverd"), "{out}");
    let v = record(dir.path(), "stress");
    check_common(&v, "stress", 5);
    let phases = v["results"]["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 1, "quick runs skip the idle baseline");
    let ph = &phases[0];
    assert_eq!(ph["load"], "built-in");
    assert!(ph["quaver"]["cycles"].as_u64().unwrap() > 0);
    // Either cyclictest ran or the probe stood in, and the version says which.
    let kind = ph["reference"]["kind"].as_str().unwrap();
    if ph["cyclictest"] == "not installed" {
        assert_eq!(kind, "probe");
    } else {
        assert!(kind == "cyclictest" || kind == "failed", "{kind}");
    }
    let cmds: Vec<String> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(
        cmds.iter().any(|c| c.contains("stressor --cpu")),
        "{cmds:?}"
    );
    assert!(cmds.iter().any(|c| c.contains("quaverd")), "{cmds:?}");
}

#[test]
fn synth_and_bad_quaverd_fail_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let o = bench(&["synth"], dir.path());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("issue 5"));
    let o = Command::new(common::bench_bin())
        .args(["latency", "--quick", "--quaverd", "/nonexistent/quaverd"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not an executable"));
}

#[test]
fn peers_quick_compares_quaverd_with_what_is_installed() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = bench(
        &["peers", "--quick", "--streams", "2", "--seed", "8"],
        dir.path(),
    );
    if quaver_bench::exec::which("pacat").is_none() {
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("pacat"));
        return;
    }
    ok(&o);
    let v = record(dir.path(), "peers");
    check_common(&v, "peers", 8);
    let servers = v["results"]["servers"].as_array().unwrap();
    assert_eq!(servers[0]["server"], "quaverd");
    assert!(servers[0]["error"].is_null(), "{}", servers[0]["error"]);
    assert_eq!(servers[0]["load"]["2"].as_array().unwrap().len(), 1);
    let pa_installed = v["versions"]["pulseaudio"] != "not installed";
    assert_eq!(
        servers.iter().any(|s| s["server"] == "pulseaudio"),
        pa_installed
    );
    // Peers that are not measured say why.
    for s in v["results"]["skipped"].as_array().unwrap() {
        assert!(!s[1].as_str().unwrap().is_empty());
    }
}
