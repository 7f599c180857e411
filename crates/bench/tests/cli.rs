//! End to end: every mode runs from the binary with one command, on a short run, and
//! writes a JSON record and a Markdown report that name the machine, the versions, the
//! exact commands and the seed.

mod common;

use common::ok;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn bench(args: &[&str], out: &Path) -> Output {
    common::bench_with(args, out, None, Duration::from_secs(240))
}

/// The one JSON record a run wrote into `dir` for `mode` (its Markdown report checked).
fn record(dir: &Path, mode: &str) -> serde_json::Value {
    common::record(dir, mode).0
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
fn synth_quick_measures_what_it_says() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(
        &[
            "synth",
            "--quick",
            "--marks",
            "voice,latency,jitter",
            "--max-voices",
            "256",
            "--quanta",
            "64,256",
            "--voices",
            "8",
            "--duration",
            "0.6",
            "--seed",
            "9",
        ],
        dir.path(),
    ));
    assert!(out.contains("voice") && out.contains("jitter"), "{out}");
    let v = record(dir.path(), "synth");
    check_common(&v, "synth", 9);
    let r = &v["results"];
    // Voice mark: more voices, more render time per cycle (work grows 2× per point;
    // the first and the last point are at least 8× apart).
    let pts = r["voice"]["points"].as_array().unwrap();
    assert!(pts.len() >= 4, "{pts:?}");
    let render = |p: &serde_json::Value| {
        p["stats"]["render_ns"].as_f64().unwrap() / p["stats"]["cycles"].as_f64().unwrap()
    };
    let (first, last) = (&pts[0], &pts[pts.len() - 1]);
    assert!(last["voices"].as_u64().unwrap() >= 8 * first["voices"].as_u64().unwrap());
    assert!(render(last) > render(first), "{first} vs {last}");
    for p in pts {
        assert!(p["stats"]["cycles"].as_u64().unwrap() > 0);
        assert_eq!(p["quantum"], 128);
        // Every callback rendered the voice count asked for (give or take the one
        // callback in flight at a snapshot).
        let per_cycle = p["voices"].as_u64().unwrap() * 128;
        let expect = per_cycle * p["stats"]["cycles"].as_u64().unwrap();
        let got = p["stats"]["voice_frames"].as_u64().unwrap();
        assert!(got.abs_diff(expect) <= per_cycle, "{got} vs {expect}");
    }
    // Latency mark: each requested quantum is the one the callback ran at.
    for p in r["latency"]["points"].as_array().unwrap() {
        assert_eq!(p["window"]["quantum"], p["requested"]);
        assert_eq!(p["window"]["voices"], 8);
    }
    let j = &r["jitter"]["window"];
    assert!(j["stats"]["cycles"].as_u64().unwrap() > 0);
    let wake: u64 = j["stats"]["wake"]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    // One histogram entry per cycle, give or take the callback in flight at the
    // snapshot (the count and the histogram are read one after the other; seen 226/225).
    let cycles = j["stats"]["cycles"].as_u64().unwrap();
    assert!(
        wake.abs_diff(cycles) <= 1,
        "{wake} wake entries, {cycles} cycles"
    );
    assert!(r["switch"].is_null(), "switch was not asked for");
}

#[test]
fn synth_switch_quick_spikes_the_sim_card_with_fixed_and_adaptive_margins() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(
        &[
            "synth",
            "--quick",
            "--marks",
            "switch",
            "--max-voices",
            "256",
            "--switch-high",
            "64",
            "--seed",
            "12",
        ],
        dir.path(),
    ));
    assert!(
        out.contains("switch (adaptive on)") && out.contains("switch (adaptive off)"),
        "{out}"
    );
    assert!(out.contains("switch: fixed vs adaptive"), "{out}");
    let v = record(dir.path(), "synth");
    check_common(&v, "synth", 12);
    let r = &v["results"];
    assert_eq!(r["adaptive_quantum_available"], false);
    assert!(r["adaptive_control"].as_str().unwrap().contains("margin"));
    let sw = &r["switch"];
    // --quick: a 10 ms spike every second from 1 s on, in a 3 s load phase, at quantum
    // 128 and 48 kHz (375 cycles a second): cycles 375 and 750.
    let cycles: Vec<u64> = sw["plan"]["cycles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(cycles, vec![375, 750]);
    assert_eq!(sw["period_frames"], 256);
    assert_eq!(sw["margin_max_frames"], 544);
    let runs = sw["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let (on, off) = (&runs[0], &runs[1]);
    assert_eq!(on["adaptive"], "on");
    assert_eq!(off["adaptive"], "off");
    assert!(
        on["label"]
            .as_str()
            .unwrap()
            .contains("adaptive margin 256…544")
    );
    assert!(off["label"].as_str().unwrap().contains("fixed margin 256"));
    assert!(on["device"].as_str().unwrap().contains("margin_max=544"));
    assert!(!off["device"].as_str().unwrap().contains("margin_max"));
    let commands: Vec<&str> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for run in runs {
        let device = run["device"].as_str().unwrap();
        // Both runs got the same spikes, at the computed cycles, on the command line.
        for c in &cycles {
            assert!(device.contains(&format!("stall={c}:10")), "{device}");
        }
        assert!(
            commands
                .iter()
                .any(|c| c.contains(&format!("--device {device}"))),
            "{commands:?}"
        );
        assert_eq!(run["final_quantum"], 128);
        assert_eq!(run["spikes_injected"], 2, "{run}");
        let spikes = run["spikes"].as_array().unwrap();
        assert_eq!(
            spikes
                .iter()
                .map(|h| h["cycle"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            cycles
        );
        // 10 ms against at most quantum + period = 8 ms queued: certain to underrun at
        // the minimum margin.
        assert_eq!(run["spike_exceeds_min_headroom"], true);
        // The margin series: one sample per poll, the margin within its bounds.
        let samples = run["samples"].as_array().unwrap();
        assert!(samples.len() > 10, "{}", samples.len());
        let (lo, hi) = (
            run["margin_min_frames"].as_u64().unwrap(),
            run["margin_max_frames"].as_u64().unwrap(),
        );
        let mut last_t = -1.0;
        for s in samples {
            let s = s.as_array().unwrap();
            assert_eq!(s.len(), 5);
            let t = s[0].as_f64().unwrap();
            assert!(t > last_t);
            last_t = t;
            let m = s[2].as_u64().unwrap();
            assert!((lo..=hi).contains(&m), "margin {m} outside {lo}..={hi}");
        }
        assert!(run["tail_seconds"].as_f64().unwrap() > 0.0);
    }
    // Fixed margin: every spike exceeds it, so the card's underruns count at least the
    // spikes, and each spike the polls bracket came with an underrun.
    assert_eq!(off["margin_max_frames"], 256);
    assert!(off["underruns_load"].as_u64().unwrap() >= 2, "{off}");
    for h in off["spikes"].as_array().unwrap() {
        assert_ne!(h["underrun"], false, "{h}");
    }
    assert_eq!(off["margin_peak_frames"], 256);
    assert_eq!(off["margin_changes"], 0);
    // Adaptive: an underrun (the first spike at the latest) raised the margin to its
    // maximum, which the series shows.
    assert_eq!(on["margin_max_frames"], 544);
    assert!(on["underruns_load"].as_u64().unwrap() >= 1, "{on}");
    assert_eq!(on["margin_peak_frames"], 544);
    assert!(on["margin_changes"].as_u64().unwrap() >= 1);
    let md = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.path().extension().is_some_and(|x| x == "md"))
        .unwrap();
    let md = std::fs::read_to_string(md.path()).unwrap();
    assert!(md.contains("device safety margin"), "{md}");
    assert!(!md.contains("not available"), "{md}");
    for plot in ["switch-margin", "switch-underruns", "switch"] {
        assert!(
            std::fs::read_dir(dir.path()).unwrap().flatten().any(|e| e
                .file_name()
                .to_string_lossy()
                .ends_with(&format!("-{plot}.svg"))),
            "no {plot} plot"
        );
    }
}

#[test]
fn a_bad_quaverd_fails_with_a_reason() {
    let o = Command::new(common::bench_bin())
        .args(["latency", "--quick", "--quaverd", "/nonexistent/quaverd"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not an executable"));
}

#[test]
fn peers_with_nothing_to_measure_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let o = bench(
        &[
            "peers",
            "--no-load",
            "--no-monitor-latency",
            "--no-capture-path",
        ],
        dir.path(),
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nothing to measure"),
        "{o:?}"
    );
}

#[test]
fn a_bench_told_to_stop_stops_the_daemon_it_started() {
    use std::os::unix::process::ExitStatusExt;
    use std::time::Instant;
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut bench = Command::new(common::bench_bin())
        .args(["load", "--quick", "--streams", "1", "--duration", "60"])
        .arg("--out")
        .arg(dir.path())
        .arg("--quaverd")
        .arg(common::quaverd_bin())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The serving daemon, not the `quaverd --version` the bench runs briefly first (found
    // once and gone before its environment could be read).
    let is_quaverd = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "quaverd")
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"--config"))
    };
    let t0 = Instant::now();
    let daemon = loop {
        if let Some(p) = quaver_bench::tools::procfs::children_of(bench.id())
            .into_iter()
            .find(is_quaverd)
        {
            break p;
        }
        assert!(bench.try_wait().unwrap().is_none(), "the bench ended early");
        assert!(t0.elapsed() < Duration::from_secs(60), "no quaverd started");
        std::thread::sleep(Duration::from_millis(50));
    };
    // Whatever happens below, the daemon does not outlive the test.
    struct Reap(u32);
    impl Drop for Reap {
        fn drop(&mut self) {
            if std::path::Path::new(&format!("/proc/{}", self.0)).exists() {
                // SAFETY: a signal to the quaverd the bench under test started.
                unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
            }
        }
    }
    let _reap = Reap(daemon);
    // The daemon's runtime directory is inside the temporary directory the bench made.
    let environ = std::fs::read(format!("/proc/{daemon}/environ")).unwrap();
    let runtime = environ
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"XDG_RUNTIME_DIR="))
        .map(|v| std::path::PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .expect("quaverd has XDG_RUNTIME_DIR");
    let made = runtime.parent().unwrap().to_path_buf();
    assert!(made.exists());
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(bench.id() as i32, libc::SIGTERM) };
    let (status, _) =
        quaver_bench::tools::exec::wait_bounded(&mut bench, Duration::from_secs(20)).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut bench.stderr.take().unwrap(), &mut err).unwrap();
    let status = status.unwrap_or_else(|| panic!("the bench did not stop: {err}"));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?} {err}");
    assert!(status.signal().is_none());
    let gone = Instant::now();
    while std::path::Path::new(&format!("/proc/{daemon}")).exists() {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "quaverd {daemon} outlived the bench: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!made.exists(), "{} was left behind", made.display());
}

/// Runs `quaver-bench peers ARGS --seed SEED` in `dir`: its record, checked for what
/// every mode records, or `None` when paplay is missing (then it must have said so).
fn peers_record(args: &[&str], seed: u64, dir: &Path) -> Option<serde_json::Value> {
    let seed_s = seed.to_string();
    let mut all = vec!["peers"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--seed", &seed_s]);
    let o = bench(&all, dir);
    if quaver_bench::tools::exec::which("paplay").is_none() {
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("paplay"));
        return None;
    }
    ok(&o);
    let v = record(dir, "peers");
    check_common(&v, "peers", seed);
    Some(v)
}

#[test]
fn peers_quick_compares_quaverd_with_what_is_installed() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let Some(v) = peers_record(
        &[
            "--quick",
            "--streams",
            "2",
            // One latency for the load part: with PulseAudio and PipeWire installed (as
            // scripts/test does for the setup and doctor tests) each costs every server
            // its windows; both latencies are rendered by the golden report tests.
            "--latencies",
            "20",
            "--monitor-latencies",
            "20",
            "--capture-latencies",
            "20",
        ],
        8,
        dir.path(),
    ) else {
        return;
    };
    let servers = v["results"]["servers"].as_array().unwrap();
    assert_eq!(servers[0]["server"], "quaverd");
    assert!(servers[0]["error"].is_null(), "{}", servers[0]["error"]);
    // The load part at its one latency, one sample.
    assert_eq!(servers[0]["load"]["20"]["2"].as_array().unwrap().len(), 1);
    assert!(servers[0]["load"]["default"].is_null());
    // The monitor-latency part ran against quaverd: impulses went out and came back.
    let m = &servers[0]["monitor"][0];
    assert_eq!(m["latency_ms"], 20);
    assert!(m["error"].is_null(), "{m}");
    assert!(m["impulses"].as_u64().unwrap() >= 3, "{m}");
    assert!(m["measured_ms"]["n"].as_u64().unwrap() >= 1, "{m}");
    let cmds = v["commands"].as_array().unwrap();
    assert!(
        cmds.iter().any(|c| {
            let c = c.as_str().unwrap();
            c.contains("paplay") && c.contains("--latency-msec=20") && c.ends_with(".wav &")
        }),
        "{cmds:?}"
    );
    let pa_installed = v["versions"]["pulseaudio"] != "not installed";
    assert_eq!(
        servers.iter().any(|s| s["server"] == "pulseaudio"),
        pa_installed
    );
    // PipeWire is measured whenever its programs are installed, and then it ran (an
    // error would name the reason, never a zero).
    let pw_installed = ["pipewire", "pipewire-pulse", "wireplumber", "dbus-daemon"]
        .iter()
        .all(|p| quaver_bench::tools::exec::which(p).is_some());
    let pw = servers.iter().find(|s| s["server"] == "pipewire");
    assert_eq!(pw.is_some(), pw_installed);
    if let Some(pw) = pw {
        assert!(pw["error"].is_null(), "{}", pw["error"]);
        assert!(pw["load"]["20"]["2"][0]["rss_kb"].as_u64().unwrap() > 0);
        let cmds = v["commands"].as_array().unwrap();
        assert!(
            cmds.iter()
                .any(|c| c.as_str().unwrap().contains("support.dbus = false")),
            "{cmds:?}"
        );
    }
    // Peers that are not measured say why.
    for s in v["results"]["skipped"].as_array().unwrap() {
        assert!(!s[1].as_str().unwrap().is_empty());
    }
}

#[test]
fn peers_under_load_counts_every_servers_underruns_under_cpu_hogs() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let Some(v) = peers_record(
        &[
            "--quick",
            "--no-load",
            "--no-monitor-latency",
            "--no-capture-path",
            "--under-load",
            "--under-load-streams",
            "2",
            "--under-load-seconds",
            "1",
        ],
        9,
        dir.path(),
    ) else {
        return;
    };
    let r = &v["results"];
    assert_eq!(r["under_load_latency_ms"], 20);
    assert_eq!(r["under_load_counts"][0], 2);
    let stressor = r["under_load_stressor"].as_str().unwrap();
    assert!(stressor.contains("--cpu"), "{stressor}");
    // Every measured server: one window of two clients, each client counted.
    for s in r["servers"].as_array().unwrap() {
        let pts = s["under_load"].as_array().unwrap();
        assert_eq!(pts.len(), 1, "{s}");
        assert!(pts[0]["error"].is_null(), "{}", pts[0]["error"]);
        assert_eq!(pts[0]["streams"], 2);
        assert_eq!(pts[0]["underruns"].as_array().unwrap().len(), 2);
    }
    let report = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap();
    assert!(
        report.contains("## Peers: underruns under load"),
        "{report}"
    );
    let cmds = v["commands"].as_array().unwrap();
    assert!(
        cmds.iter().any(|c| {
            let c = c.as_str().unwrap();
            c.contains("paplay -v --latency-msec=20") && c.contains("under `")
        }),
        "{cmds:?}"
    );
}

#[test]
fn jack_quick_alternates_the_servers_windows() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(
        &[
            "jack",
            "--quick",
            "--repeats",
            "2",
            "--periods",
            "64",
            "--servers",
            "quaverd,jackd2",
            "--duration",
            "1",
            "--no-overhead",
            "--seed",
            "6",
        ],
        dir.path(),
    ));
    let v = record(dir.path(), "jack");
    check_common(&v, "jack", 6);
    let r = &v["results"];
    // The servers that could run (a missing one is listed with its reason, not run).
    let missing: Vec<&str> = r["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[0].as_str().unwrap())
        .collect();
    let measured: Vec<&str> = ["quaverd", "jackd2"]
        .into_iter()
        .filter(|s| !missing.contains(s))
        .collect();
    // Round by round, every server once in the order asked: q, j, q, j.
    let order: Vec<(u64, &str)> = r["xruns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["repeat"].as_u64().unwrap(), p["server"].as_str().unwrap()))
        .collect();
    let expect: Vec<(u64, &str)> = (0..2)
        .flat_map(|rep| measured.iter().map(move |s| (rep, *s)))
        .collect();
    assert_eq!(order, expect);
    // A totals entry per measured server, over both windows (or naming the failures).
    let totals = r["xrun_totals"].as_array().unwrap();
    assert_eq!(totals.len(), measured.len(), "{totals:?}");
    for t in totals {
        assert_eq!(
            t["windows"].as_u64().unwrap() + t["failed"].as_u64().unwrap(),
            2,
            "{t}"
        );
    }
    if !measured.is_empty() {
        assert!(out.contains("total: "), "{out}");
    }
    // quaverd's windows carry the per-cycle stage breakdown, and the report its table;
    // every client window its count of callbacks later than two periods.
    let quaverd_ok: Vec<&serde_json::Value> = r["xruns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["server"] == "quaverd" && !p["client"].is_null())
        .collect();
    for p in &quaverd_ok {
        let st = &p["quaver"]["stages"];
        assert_eq!(st["stages"].as_array().unwrap().len(), 8, "{st}");
        let all = st["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "all")
            .unwrap();
        assert!(all["cycles"].as_u64().unwrap() > 0, "{st}");
        assert!(p["client"]["clients"][0]["window"]["late2"].is_u64(), "{p}");
    }
    if !quaverd_ok.is_empty() {
        let md = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.path().extension().is_some_and(|x| x == "md"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .unwrap();
        assert!(md.contains("where the cycles' time went"), "{md}");
        assert!(md.contains("| resume |"), "{md}");
    }
    assert_eq!(
        r["cyclictest"].as_array().unwrap().len(),
        1,
        "once per period"
    );
}

#[test]
fn drift_quick_reads_every_followers_loop() {
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    // Two cases at once, 3 s: too short to lock (that takes about 8 s), long enough to
    // check what is read and how it is reported.
    let out = ok(&bench(
        &[
            "drift",
            "--quick",
            "--cases",
            "opposite,against-exact",
            "--duration",
            "3",
            "--seed",
            "5",
        ],
        dir.path(),
    ));
    assert!(
        out.contains("against-exact") && out.contains("card3"),
        "{out}"
    );
    let v = record(dir.path(), "drift");
    check_common(&v, "drift", 5);
    let cmds: Vec<&str> = v["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    // One quaverd per case, one pacat per card.
    assert_eq!(
        cmds.iter().filter(|c| c.contains("quaverd")).count(),
        2,
        "{cmds:?}"
    );
    assert_eq!(
        cmds.iter().filter(|c| c.contains("pacat")).count(),
        6,
        "{cmds:?}"
    );
    assert!(
        cmds.iter().any(|c| c.contains("drift_step=1.5:-200")),
        "{cmds:?}"
    );
    let cases = v["results"]["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for case in cases {
        assert!(case["failure"].is_null(), "{case}");
        assert_eq!(case["players_ok"], true, "{case}");
        let cards = case["cards"].as_array().unwrap();
        assert_eq!(cards[0]["driver"], true);
        for card in &cards[1..] {
            // Every follower's loop was read through status, at the true drift's sign.
            let f = &card["follow"];
            let phases = f["phases"].as_array().unwrap();
            assert!(phases[0]["readings"].as_u64().unwrap() >= 20, "{card}");
            let truth = phases[0]["truth_ppm"].as_f64().unwrap();
            let drift = card["drift_ppm"].as_f64().unwrap();
            assert!(
                (truth.signum(), truth.abs() > 150.0) == (drift.signum(), true),
                "{card}"
            );
            assert!(!f["trace"].as_array().unwrap().is_empty(), "{card}");
        }
    }
    let stepping = &cases[1]["cards"][3]["follow"]["phases"];
    assert_eq!(stepping.as_array().unwrap().len(), 2);
    assert!((stepping[1]["truth_ppm"].as_f64().unwrap() + 200.0).abs() < 1e-6);
}

/// `echo --quick`: the tiny scene on quaverd and, when installed, PulseAudio; both
/// measured with finite figures, from the same rendered scene.
#[test]
fn echo_quick_measures_quaverd_and_pulseaudio_on_one_scene() {
    for tool in ["espeak-ng", "sox", "paplay", "parec", "pactl"] {
        if quaver_bench::tools::exec::which(tool).is_none() {
            eprintln!(
                "SKIPPED: echo_quick needs {tool} (Debian: espeak-ng, sox, pulseaudio-utils)"
            );
            return;
        }
    }
    let _g = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&bench(&["echo", "--quick", "--seed", "3"], dir.path()));
    assert!(out.contains("ERLE"), "{out}");
    let v = record(dir.path(), "echo");
    check_common(&v, "echo", 3);
    let runs = v["results"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in runs {
        let installed =
            run["server"] == "quaverd" || quaver_bench::tools::exec::which("pulseaudio").is_some();
        if !installed {
            assert!(run["measures"]["Err"].is_string(), "{run}");
            continue;
        }
        let m = &run["measures"]["Ok"];
        for k in [
            "erle_db",
            "near_kept_single",
            "near_kept_double",
            "near_level_db",
        ] {
            assert!(m[k].as_f64().is_some_and(f64::is_finite), "{k}: {run}");
        }
        // Both pass the near end; quaverd's canceller has converged one second in
        // (PulseAudio's takes longer: the figures come from the long scene).
        assert!(m["near_kept_single"].as_f64().unwrap() > 0.5, "{run}");
        if run["server"] == "quaverd" {
            assert!(m["erle_db"].as_f64().unwrap() > 20.0, "{run}");
        }
        assert!(run["cpu_percent"].as_f64().is_some(), "{run}");
    }
}
