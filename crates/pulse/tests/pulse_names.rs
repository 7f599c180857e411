//! Names that are a number: as PulseAudio's name registry does, a name no sink, source
//! or sample has, but that is a number, is that object's index. Every command that takes
//! a name is exercised with a decimal index through the real pactl (and paplay, parec),
//! plus the lookups pactl has no verb for through the raw client.

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_pulse::pulseaudio::protocol::{self as pa, Command};
use quaver_testkit::*;

/// `pactl list short KIND` as (index, name) pairs.
fn rows(d: &Daemon, kind: &str) -> Vec<(String, String)> {
    pa_ok(d, &run_pa(d, "pactl", &["list", "short", kind]))
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            let idx = f.next().unwrap_or_default().to_string();
            (idx, f.next().unwrap_or_default().to_string())
        })
        .collect()
}

/// The index of the `kind` row named `name`.
fn index_of(d: &Daemon, kind: &str, name: &str) -> String {
    rows(d, kind)
        .into_iter()
        .find(|(_, n)| n == name)
        .unwrap_or_else(|| panic!("no {kind} named {name}: {:?}", rows(d, kind)))
        .0
}

/// Runs `pactl ARGS`, which must succeed; returns its output.
fn pactl(d: &Daemon, args: &[&str]) -> String {
    pa_ok(d, &run_pa(d, "pactl", args))
}

/// Runs `pactl ARGS`, which must fail.
fn pactl_fails(d: &Daemon, args: &[&str]) {
    let out = run_pa(d, "pactl", args);
    assert!(!out.status.success(), "pactl {args:?} succeeded");
}

/// The state column of sink or source `index`.
fn state_of(d: &Daemon, kind: &str, index: &str) -> String {
    pactl(d, &["list", "short", kind])
        .lines()
        .find(|l| l.split('\t').next() == Some(index))
        .and_then(|l| l.split('\t').nth(4))
        .unwrap_or_default()
        .to_string()
}

/// The sink (or source) index each sink input (or source output) is on.
fn targets(d: &Daemon, kind: &str) -> Vec<String> {
    pactl(d, &["list", "short", kind])
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap_or_default().to_string())
        .collect()
}

#[test]
fn sinks_and_sources_answer_to_their_index_as_a_name() {
    require_tools!("pactl", "paplay", "parec");
    let d = pulse_util::start(&["--device", "null", "--device", "null:capture=off"]);
    let sinks = rows(&d, "sinks");
    assert_eq!(sinks.len(), 2, "{sinks:?}");
    let (first, second) = (sinks[0].clone(), sinks[1].clone());
    let source = index_of(&d, "sources", "null-source");
    let monitor = index_of(&d, "sources", &format!("{}.monitor", second.1));

    // Defaults.
    pactl(&d, &["set-default-sink", &second.0]);
    assert_eq!(pactl(&d, &["get-default-sink"]).trim(), second.1);
    pactl(&d, &["set-default-source", &monitor]);
    assert_eq!(
        pactl(&d, &["get-default-source"]).trim(),
        format!("{}.monitor", second.1)
    );
    pactl(&d, &["set-default-source", &source]);
    assert_eq!(pactl(&d, &["get-default-source"]).trim(), "null-source");
    pactl(&d, &["set-default-sink", &first.0]);
    assert_eq!(pactl(&d, &["get-default-sink"]).trim(), first.1);

    // Volume, mute and suspend by index-as-name.
    pactl(&d, &["set-sink-volume", &second.0, "50%"]);
    assert!(pactl(&d, &["get-sink-volume", &second.0]).contains("50%"));
    pactl(&d, &["set-sink-mute", &second.0, "1"]);
    assert!(pactl(&d, &["get-sink-mute", &second.0]).contains("yes"));
    pactl(&d, &["set-source-volume", &source, "40%"]);
    assert!(pactl(&d, &["get-source-volume", &source]).contains("40%"));
    pactl(&d, &["set-source-mute", &source, "1"]);
    assert!(pactl(&d, &["get-source-mute", &source]).contains("yes"));
    pactl(&d, &["suspend-sink", &second.0, "1"]);
    assert!(
        wait_until(WAIT, || state_of(&d, "sinks", &second.0) == "SUSPENDED"),
        "{}",
        pactl(&d, &["list", "short", "sinks"])
    );
    pactl(&d, &["suspend-sink", &second.0, "0"]);
    pactl(&d, &["suspend-source", &source, "1"]);
    assert!(
        wait_until(WAIT, || state_of(&d, "sources", &source) == "SUSPENDED"),
        "{}",
        pactl(&d, &["list", "short", "sources"])
    );
    pactl(&d, &["suspend-source", &source, "0"]);

    // Streams created on an index-as-name, and moved to one.
    let long = noise_s16(48000 * 20, 3, 1000);
    write_wav_s16(&d.path("long.wav"), 48000, 2, &long);
    let mut player = spawn_pa(&d, "paplay", &["-d", &second.0, "long.wav"]);
    assert!(
        wait_until(WAIT, || targets(&d, "sink-inputs") == [second.0.clone()]),
        "paplay -d {} is not on it: {:?}",
        second.0,
        targets(&d, "sink-inputs")
    );
    let input = wait_sink_input(&d);
    pactl(&d, &["move-sink-input", &input, &first.0]);
    assert_eq!(targets(&d, "sink-inputs"), [first.0.as_str()]);
    let recorder = spawn_pa(&d, "parec", &["-d", &monitor, "/dev/null"]);
    assert!(
        wait_until(WAIT, || targets(&d, "source-outputs") == [monitor.clone()]),
        "parec -d {monitor} is not on it: {:?}",
        targets(&d, "source-outputs")
    );
    let output = pactl(&d, &["list", "short", "source-outputs"]);
    let output = output.split('\t').next().unwrap().to_string();
    pactl(&d, &["move-source-output", &output, &source]);
    assert_eq!(targets(&d, "source-outputs"), [source.as_str()]);
    let _ = interrupt(recorder);
    player.kill().unwrap();
    player.wait().unwrap();

    // Module arguments that name a device.
    let lo = load_module(
        &d,
        &[
            "module-loopback",
            &format!("source={source}"),
            &format!("sink={}", second.0),
        ],
    );
    assert!(
        wait_until(WAIT, || targets(&d, "sink-inputs") == [second.0.clone()]),
        "the loopback is not on sink {}: {:?}",
        second.0,
        targets(&d, "sink-inputs")
    );
    pactl(&d, &["unload-module", &lo]);
    load_module(
        &d,
        &[
            "module-remap-sink",
            &format!("master={}", second.0),
            "sink_name=remapped",
        ],
    );
    index_of(&d, "sinks", "remapped");
    load_module(
        &d,
        &[
            "module-remap-source",
            &format!("master={source}"),
            "source_name=remapped_src",
        ],
    );
    index_of(&d, "sources", "remapped_src");
    load_module(
        &d,
        &[
            "module-combine-sink",
            &format!("slaves={},{}", first.0, second.0),
            "sink_name=both",
        ],
    );
    index_of(&d, "sinks", "both");

    // Lookups pactl has no verb for.
    let mut c = RawClient::ready(&d, "names-test");
    let name = |s: &str| std::ffi::CString::new(s).unwrap();
    let got: pa::LookupReply = c.request(&Command::LookupSink(name(&second.0))).unwrap();
    assert_eq!(got.0.to_string(), second.0);
    let got: pa::LookupReply = c.request(&Command::LookupSource(name(&source))).unwrap();
    assert_eq!(got.0.to_string(), source);
    let got: pa::LookupReply = c.request(&Command::LookupSource(name(&monitor))).unwrap();
    assert_eq!(got.0.to_string(), monitor);

    // A number is read as PulseAudio reads one: hexadecimal works, a sign does not, and
    // a number no sink has is no sink.
    pactl(
        &d,
        &[
            "set-default-sink",
            &format!("{:#x}", second.0.parse::<u32>().unwrap()),
        ],
    );
    assert_eq!(pactl(&d, &["get-default-sink"]).trim(), second.1);
    pactl_fails(&d, &["set-default-sink", &format!("+{}", first.0)]);
    pactl_fails(&d, &["set-default-sink", "4000000"]);
    assert_eq!(pactl(&d, &["get-default-sink"]).trim(), second.1);
    // A sink index is not a source.
    pactl_fails(&d, &["suspend-source", "4000000", "1"]);
}

#[test]
fn a_name_wins_over_an_index_that_reads_the_same() {
    // The engine never names a node like another node's id, so only samples can have a
    // name that reads as another one's index.
    require_tools!("pactl");
    let d = pulse_util::start(&["--device", "null"]);
    write_wav_s16(&d.path("a.wav"), 48000, 2, &noise_s16(4800, 1, 1000));
    pactl(&d, &["upload-sample", "a.wav", "1"]);
    pactl(&d, &["upload-sample", "a.wav", "other"]);
    let numbered = index_of(&d, "samples", "1");
    let other = index_of(&d, "samples", "other");
    assert_eq!(other, "1", "{:?}", rows(&d, "samples"));
    assert_ne!(numbered, other);
    // "1" is the sample of that name, not sample #1.
    pactl(&d, &["remove-sample", "1"]);
    assert_eq!(rows(&d, "samples"), [(other.clone(), "other".to_string())]);
    // Now no sample is called "1": it is #1.
    pactl(&d, &["remove-sample", "1"]);
    assert!(rows(&d, "samples").is_empty());
}

#[test]
fn samples_answer_to_their_index_as_a_name() {
    require_tools!("pactl");
    let d = pulse_util::start(&["--device", "null"]);
    let sink = index_of(&d, "sinks", "null-sink");
    write_wav_s16(&d.path("short.wav"), 48000, 2, &noise_s16(4800, 1, 1000));
    write_wav_s16(&d.path("long.wav"), 48000, 2, &noise_s16(24000, 2, 1000));
    pactl(&d, &["upload-sample", "short.wav", "first"]);
    pactl(&d, &["upload-sample", "short.wav", "second"]);
    let first = index_of(&d, "samples", "first");
    let second = index_of(&d, "samples", "second");

    // PLAY_SAMPLE with both the sample and the sink named by index.
    pactl(&d, &["play-sample", &second, &sink]);
    assert!(
        wait_until(WAIT, || targets(&d, "sink-inputs").is_empty()),
        "the sample's stream stayed"
    );
    pactl_fails(&d, &["play-sample", "4000000"]);

    // GET_SAMPLE_INFO by name (libpulse's pa_context_get_sample_info_by_name): the
    // invalid index, then the name.
    let mut c = RawClient::ready(&d, "names-test");
    let mut payload = vec![b'L'];
    payload.extend_from_slice(&u32::MAX.to_be_bytes());
    payload.push(b't');
    payload.extend_from_slice(second.as_bytes());
    payload.push(0);
    let seq = c.send_payload(pa::CommandTag::GetSampleInfo as u32, &payload);
    let reply = c
        .reply_to(seq, |_| {})
        .expect("sample info by index-as-name");
    let info: pa::SampleInfo = c.decode(&reply);
    assert_eq!(info.name.to_str().unwrap(), "second");
    assert_eq!(info.index.to_string(), second);

    // An upload whose name is an index replaces that sample's audio and keeps its name,
    // as PulseAudio's cache does.
    pactl(&d, &["upload-sample", "long.wav", &first]);
    let list = pactl(&d, &["list", "short", "samples"]);
    assert_eq!(list.lines().count(), 2, "{list}");
    let row = list
        .lines()
        .find(|l| l.starts_with(&format!("{first}\t")))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        row.contains("\tfirst\t") && row.ends_with("0.250"),
        "{list}"
    );

    // REMOVE_SAMPLE by index-as-name.
    pactl(&d, &["remove-sample", &second]);
    assert_eq!(rows(&d, "samples"), [(first.clone(), "first".to_string())]);
    pactl_fails(&d, &["remove-sample", &second]);
    pactl(&d, &["remove-sample", &first]);
    assert!(rows(&d, "samples").is_empty());
}
