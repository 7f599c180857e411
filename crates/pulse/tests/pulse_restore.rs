//! Stream restore through quaverd: what a user sets on a kind of stream with pactl comes
//! back for the next stream of that kind, across a restart; and the extension protocol
//! (`pa_ext_stream_restore_*`) that pavucontrol uses, including its bad input.

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_pulse::pulseaudio::protocol::{
    ChannelMap, ChannelVolume, Command, FormatEncoding, FormatInfo, PulseError, TagStructReader,
    TagStructWriter, Volume,
};
use quaver_testkit::*;
use std::time::Duration;

/// `pactl list sink-inputs`, one block per stream.
fn sink_inputs(d: &Daemon) -> Vec<String> {
    let all = pa_ok(d, &run_pa(d, "pactl", &["list", "sink-inputs"]));
    all.split("Sink Input #")
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Waits (bounded) for a sink input whose block contains `needle` and not `not`;
/// returns its block.
fn wait_input(d: &Daemon, needle: &str, not: &str) -> String {
    let mut found = String::new();
    assert!(
        wait_until(WAIT, || {
            found = sink_inputs(d)
                .into_iter()
                .find(|b| b.contains(needle) && (not.is_empty() || !b.contains(not)))
                .unwrap_or_default();
            !found.is_empty()
        }),
        "no sink input with {needle:?}:\n{}",
        d.log_text()
    );
    found
}

/// The index of sink `name` (`pactl list short sinks`).
fn sink_index(d: &Daemon, name: &str) -> String {
    let sinks = pa_ok(d, &run_pa(d, "pactl", &["list", "short", "sinks"]));
    sinks
        .lines()
        .find(|l| l.split('\t').nth(1) == Some(name))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no sink {name}:\n{sinks}"))
        .to_string()
}

fn block_field<'a>(block: &'a str, name: &str) -> &'a str {
    block
        .lines()
        .find_map(|l| l.trim().strip_prefix(name))
        .unwrap_or("")
        .trim()
}

#[test]
fn a_kinds_volume_mute_and_device_come_back_after_a_restart() {
    require_tools!("pactl", "paplay");
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("restore.toml");
    let conf = format!("[pulse]\nrestore_file = \"{}\"\n", file.display());
    let devices = ["--device", "file:a.wav", "--device", "file:b.wav"];
    let dir = tempfile::tempdir().unwrap();
    write_config(&dir, &conf);
    let mut d = pulse_util::start_in(dir, &devices);
    let mods = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "modules"]));
    assert!(mods.contains("module-stream-restore"), "{mods}");
    let sinks = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sinks"]));
    let names: Vec<String> = sinks
        .lines()
        .filter_map(|l| l.split('\t').nth(1).map(str::to_string))
        .collect();
    assert_eq!(names.len(), 2, "{sinks}");
    // 30 s of silence: long enough for every step, stopped by its PID.
    write_wav_s16(&d.path("long.wav"), 8000, 1, &vec![0; 8000 * 30]);
    let mut player = spawn_pa(&d, "paplay", &["--property=media.role=music", "long.wav"]);
    let block = wait_input(&d, "media.role = \"music\"", "");
    let index = block.lines().next().unwrap().trim().to_string();
    for args in [
        ["set-sink-input-volume", &index, "40%"],
        ["set-sink-input-mute", &index, "1"],
        ["move-sink-input", &index, &names[1]],
    ] {
        pa_ok(&d, &run_pa(&d, "pactl", &args));
    }
    player.kill().unwrap();
    let _ = player.wait();
    let mut text = String::new();
    assert!(
        wait_until(WAIT, || {
            text = std::fs::read_to_string(&file).unwrap_or_default();
            text.contains(&format!("device = \"{}\"", names[1]))
        }),
        "the entry was never saved:\n{text}\n{}",
        d.log_text()
    );
    assert!(text.contains("sink-input-by-media-role:music"), "{text}");
    assert!(text.contains("mute = true"), "{text}");
    d.stop();

    let dir = tempfile::tempdir().unwrap();
    write_config(&dir, &conf);
    let mut d = pulse_util::start_in(dir, &devices);
    write_wav_s16(&d.path("long.wav"), 8000, 1, &vec![0; 8000 * 30]);
    let second = sink_index(&d, &names[1]);
    let mut music = spawn_pa(&d, "paplay", &["--property=media.role=music", "long.wav"]);
    // Another kind, and the same kind with a volume of its own: neither is restored
    // (the second keeps its own volume, takes the remembered mute and device).
    let mut game = spawn_pa(&d, "paplay", &["--property=media.role=game", "long.wav"]);
    let mut own = spawn_pa(
        &d,
        "paplay",
        &[
            "--property=media.role=music",
            "--property=media.name=own volume",
            "--volume=65536",
            "long.wav",
        ],
    );
    let m = wait_input(&d, "media.role = \"music\"", "own volume");
    let g = wait_input(&d, "media.role = \"game\"", "");
    let o = wait_input(&d, "media.name = \"own volume\"", "");
    assert!(block_field(&m, "Volume:").contains("40%"), "{m}");
    assert_eq!(block_field(&m, "Mute:"), "yes", "{m}");
    assert_eq!(block_field(&m, "Sink:"), second, "{m}");
    assert!(block_field(&g, "Volume:").contains("100%"), "{g}");
    assert_eq!(block_field(&g, "Mute:"), "no", "{g}");
    assert_ne!(block_field(&g, "Sink:"), second, "{g}");
    assert!(block_field(&o, "Volume:").contains("100%"), "{o}");
    assert_eq!(block_field(&o, "Mute:"), "yes", "{o}");
    for p in [&mut music, &mut game, &mut own] {
        p.kill().unwrap();
        let _ = p.wait();
    }
    d.stop();
}

/// An EXTENSION request for module `name` (or index `index`) carrying `body`.
fn extension(c: &mut RawClient, index: Option<u32>, name: Option<&str>, body: &[u8]) -> u32 {
    let mut rest = Vec::new();
    {
        let mut ts = TagStructWriter::new(&mut rest, c.version);
        ts.write_u32(index.unwrap_or(u32::MAX)).unwrap();
        match name {
            Some(n) => ts
                .write_string(Some(std::ffi::CString::new(n).unwrap()))
                .unwrap(),
            None => ts.write_null_string().unwrap(),
        }
    }
    rest.extend_from_slice(body);
    c.send_payload(87, &rest)
}

fn body(version: u16, f: impl FnOnce(&mut TagStructWriter<'_>)) -> Vec<u8> {
    let mut b = Vec::new();
    f(&mut TagStructWriter::new(&mut b, version));
    b
}

const NAME: Option<&str> = Some("module-stream-restore");

#[test]
fn the_extension_reads_writes_deletes_and_tells_subscribers() {
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::ready(&d, "restore-test");
    let v = c.version;
    let events = std::cell::Cell::new(0);
    let count = |m: Msg| {
        if let Msg::Event(e) = m
            && let Command::Extension(p) = *e
        {
            assert_eq!(p.index, Some(2));
            events.set(events.get() + 1);
        }
    };

    let seq = extension(&mut c, None, NAME, &body(v, |t| t.write_u32(0).unwrap()));
    let p = c.reply_to(seq, count).expect("TEST");
    let mut cur = std::io::Cursor::new(&p[..]);
    assert_eq!(TagStructReader::new(&mut cur, v).read_u32().unwrap(), 1);
    // By index too.
    let seq = extension(&mut c, Some(2), None, &body(v, |t| t.write_u32(0).unwrap()));
    c.reply_to(seq, count).expect("TEST by index");

    let sub = body(v, |t| {
        t.write_u32(4).unwrap();
        t.write_bool(true).unwrap();
    });
    let seq = extension(&mut c, None, NAME, &sub);
    c.reply_to(seq, count).expect("SUBSCRIBE");

    let mut vol = ChannelVolume::empty();
    vol.push(Volume::from_u32_clamped(30000));
    vol.push(Volume::from_u32_clamped(30000));
    let write = body(v, |t| {
        t.write_u32(2).unwrap();
        t.write_u32(2).unwrap();
        t.write_bool(true).unwrap();
        t.write_string(Some(c"sink-input-by-media-role:event"))
            .unwrap();
        t.write(ChannelMap::stereo()).unwrap();
        t.write(vol).unwrap();
        t.write_null_string().unwrap();
        t.write_bool(false).unwrap();
    });
    let seq = extension(&mut c, None, NAME, &write);
    c.reply_to(seq, count).expect("WRITE");

    let seq = extension(&mut c, None, NAME, &body(v, |t| t.write_u32(1).unwrap()));
    let p = c.reply_to(seq, count).expect("READ");
    let mut cur = std::io::Cursor::new(&p[..]);
    let mut ts = TagStructReader::new(&mut cur, v);
    assert_eq!(
        ts.read_string().unwrap().unwrap().to_str().unwrap(),
        "sink-input-by-media-role:event"
    );
    assert_eq!(ts.read::<ChannelMap>().unwrap(), ChannelMap::stereo());
    assert_eq!(ts.read::<ChannelVolume>().unwrap(), vol);
    assert_eq!(ts.read_string().unwrap(), None);
    assert!(!ts.read_bool().unwrap());
    assert!(!ts.has_data_left().unwrap());

    // Bad requests get errors and leave the connection and the entries alone.
    let wrong_module = extension(&mut c, None, Some("module-nothing"), &[]);
    assert_eq!(
        c.reply_to(wrong_module, count),
        Err(PulseError::NoExtension as u32)
    );
    let wrong_index = extension(&mut c, Some(0), None, &[]);
    assert_eq!(
        c.reply_to(wrong_index, count),
        Err(PulseError::NoExtension as u32)
    );
    let both = extension(&mut c, Some(2), NAME, &[]);
    assert_eq!(c.reply_to(both, count), Err(PulseError::Invalid as u32));
    let cut = extension(&mut c, None, NAME, &write[..write.len() - 1]);
    assert_eq!(c.reply_to(cut, count), Err(PulseError::Invalid as u32));
    let event = extension(&mut c, None, NAME, &body(v, |t| t.write_u32(5).unwrap()));
    assert_eq!(
        c.reply_to(event, count),
        Err(PulseError::NotSupported as u32)
    );

    let del = body(v, |t| {
        t.write_u32(3).unwrap();
        t.write_string(Some(c"sink-input-by-media-role:event"))
            .unwrap();
    });
    let seq = extension(&mut c, None, NAME, &del);
    c.reply_to(seq, count).expect("DELETE");
    let seq = extension(&mut c, None, NAME, &body(v, |t| t.write_u32(1).unwrap()));
    let p = c.reply_to(seq, count).expect("READ after DELETE");
    assert!(p.is_empty(), "entries left: {p:?}");
    // One event for the write, one for the delete; the last may still be in flight.
    let t0 = std::time::Instant::now();
    while events.get() < 2 && t0.elapsed() < WAIT {
        let seq = extension(&mut c, None, NAME, &body(v, |t| t.write_u32(0).unwrap()));
        c.reply_to(seq, count).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(events.get(), 2, "events to the subscriber");
}

#[test]
fn with_stream_restore_off_the_extension_is_absent() {
    let dir = tempfile::tempdir().unwrap();
    write_config(&dir, "[pulse]\nstream_restore = false\n");
    let d = pulse_util::start_in(dir, &["--device", "null"]);
    let mut c = RawClient::ready(&d, "restore-off");
    let v = c.version;
    let seq = extension(&mut c, None, NAME, &body(v, |t| t.write_u32(0).unwrap()));
    assert_eq!(c.reply_to(seq, |_| {}), Err(PulseError::NoExtension as u32));
}

#[test]
fn a_stream_returns_to_its_remembered_sink_when_that_sink_comes_back() {
    require_tools!("pactl", "paplay");
    let d = pulse_util::start(&["--device", "null"]);
    let load = || {
        pa_ok(
            &d,
            &run_pa(
                &d,
                "pactl",
                &["load-module", "module-null-sink", "sink_name=headset"],
            ),
        )
        .trim()
        .to_string()
    };
    let module = load();
    write_wav_s16(&d.path("long.wav"), 8000, 1, &vec![0; 8000 * 30]);
    let mut player = spawn_pa(&d, "paplay", &["--property=media.role=music", "long.wav"]);
    // Another stream whose client named the default sink itself: it stays put.
    let mut pinned = spawn_pa(
        &d,
        "paplay",
        &[
            "--property=media.role=music",
            "--property=media.name=pinned",
            "--device=null-sink",
            "long.wav",
        ],
    );
    let block = wait_input(&d, "media.role = \"music\"", "pinned");
    wait_input(&d, "media.name = \"pinned\"", "");
    let index = block.lines().next().unwrap().trim().to_string();
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["move-sink-input", &index, "headset"]),
    );
    // Unplugged: the stream is rescued to the default sink.
    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    let null = sink_index(&d, "null-sink");
    let b = wait_input(&d, &format!("Sink: {null}\n"), "pinned");
    assert!(b.starts_with(&index), "{b}");
    // Plugged back: it returns by itself; the pinned stream does not move.
    load();
    let headset = sink_index(&d, "headset");
    let b = wait_input(&d, &format!("Sink: {headset}\n"), "pinned");
    assert!(b.starts_with(&index), "{b}");
    let p = wait_input(&d, "media.name = \"pinned\"", "");
    assert_eq!(block_field(&p, "Sink:"), null, "{p}");
    for c in [&mut player, &mut pinned] {
        c.kill().unwrap();
        let _ = c.wait();
    }
}

#[test]
fn streams_on_an_unloaded_default_sink_move_to_the_sink_that_remains() {
    require_tools!("pactl", "paplay", "parec");
    let d = pulse_util::start(&["--device", "null"]);
    let module = pa_ok(
        &d,
        &run_pa(
            &d,
            "pactl",
            &["load-module", "module-null-sink", "sink_name=headset"],
        ),
    )
    .trim()
    .to_string();
    // The user made it the default, so new streams start on it and the policy still
    // names it when it goes.
    pa_ok(&d, &run_pa(&d, "pactl", &["set-default-sink", "headset"]));
    write_wav_s16(&d.path("long.wav"), 8000, 1, &vec![0; 8000 * 30]);
    let mut player = spawn_pa(&d, "paplay", &["long.wav"]);
    let mut recorder = spawn_pa(&d, "parec", &["--device=headset.monitor", "/dev/null"]);
    let headset = sink_index(&d, "headset");
    wait_input(&d, &format!("Sink: {headset}\n"), "");
    let monitor_of = |sink: &str| {
        let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sources"]));
        sources
            .lines()
            .find(|l| l.split('\t').nth(1) == Some(&format!("{sink}.monitor")))
            .and_then(|l| l.split('\t').next())
            .unwrap_or_else(|| panic!("no monitor of {sink}:\n{sources}"))
            .to_string()
    };
    let recording_from = || {
        let outputs = pa_ok(
            &d,
            &run_pa(&d, "pactl", &["list", "short", "source-outputs"]),
        );
        outputs
            .lines()
            .find_map(|l| l.split('\t').nth(1).map(str::to_string))
            .unwrap_or_default()
    };
    let headset_monitor = monitor_of("headset");
    assert!(
        wait_until(WAIT, || recording_from() == headset_monitor),
        "parec is not on {headset_monitor}: {}",
        recording_from()
    );

    pa_ok(&d, &run_pa(&d, "pactl", &["unload-module", &module]));
    // Both streams live on, moved to the defaults that remain, as PulseAudio moves
    // them: the null sink, and the null device's silent source.
    let null = sink_index(&d, "null-sink");
    wait_input(&d, &format!("Sink: {null}\n"), "");
    let info = pa_ok(&d, &run_pa(&d, "pactl", &["info"]));
    assert!(info.contains("Default Sink: null-sink\n"), "{info}");
    let source = block_field(&info, "Default Source:").to_string();
    let sources = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "sources"]));
    let default_source = sources
        .lines()
        .find(|l| l.split('\t').nth(1) == Some(&source))
        .and_then(|l| l.split('\t').next())
        .unwrap_or_else(|| panic!("no source {source}:\n{sources}"))
        .to_string();
    assert!(
        wait_until(WAIT, || recording_from() == default_source),
        "parec is not on {source} ({default_source}): {}",
        recording_from()
    );
    for c in [&mut player, &mut recorder] {
        assert!(c.try_wait().unwrap().is_none(), "a client left");
        c.kill().unwrap();
        let _ = c.wait();
    }
}

const DEVICE_RESTORE: Option<&str> = Some("module-device-restore");

#[test]
fn device_restore_says_every_sink_takes_pcm_and_refuses_other_formats() {
    require_tools!("pactl");
    let d = pulse_util::start(&["--device", "null"]);
    load_module(&d, &["module-null-sink", "sink_name=vmic"]);
    let sinks: Vec<u32> = ["null-sink", "vmic"]
        .iter()
        .map(|n| sink_index(&d, n).parse().unwrap())
        .collect();
    let mut c = RawClient::ready(&d, "device-restore-test");
    let v = c.version;
    let events = std::cell::Cell::new(0);
    let count = |m: Msg| {
        if let Msg::Event(e) = m
            && let Command::Extension(p) = *e
        {
            assert_eq!(p.index, Some(3));
            assert_eq!(p.name.as_deref(), Some(c"module-device-restore"));
            events.set(events.get() + 1);
        }
    };
    let ask = |c: &mut RawClient, index: Option<u32>, name: Option<&str>, b: &[u8]| {
        let seq = extension(c, index, name, b);
        c.reply_to(seq, count)
    };
    // (type, index, formats) entries of a READ_FORMATS(_ALL) reply.
    let entries = |p: Vec<u8>| {
        let mut cur = std::io::Cursor::new(&p[..]);
        let mut ts = TagStructReader::new(&mut cur, v);
        let mut out = Vec::new();
        while ts.has_data_left().unwrap() {
            let kind = ts.read_u32().unwrap();
            let index = ts.read_u32().unwrap();
            let n = ts.read_u8().unwrap();
            let formats: Vec<FormatEncoding> = (0..n)
                .map(|_| ts.read::<FormatInfo>().unwrap().encoding)
                .collect();
            out.push((kind, index, formats));
        }
        out
    };

    let p = ask(
        &mut c,
        None,
        DEVICE_RESTORE,
        &body(v, |t| t.write_u32(0).unwrap()),
    )
    .unwrap();
    let mut cur = std::io::Cursor::new(&p[..]);
    assert_eq!(TagStructReader::new(&mut cur, v).read_u32().unwrap(), 1);
    ask(&mut c, Some(3), None, &body(v, |t| t.write_u32(0).unwrap())).expect("TEST by index");
    let sub = body(v, |t| {
        t.write_u32(1).unwrap();
        t.write_bool(true).unwrap();
    });
    ask(&mut c, None, DEVICE_RESTORE, &sub).expect("SUBSCRIBE");

    let all = ask(
        &mut c,
        None,
        DEVICE_RESTORE,
        &body(v, |t| t.write_u32(3).unwrap()),
    );
    let mut all = entries(all.expect("READ_FORMATS_ALL"));
    all.sort_by_key(|e| e.1);
    let pcm = vec![FormatEncoding::Pcm];
    assert_eq!(
        all,
        vec![(0, sinks[0], pcm.clone()), (0, sinks[1], pcm.clone())]
    );
    let read = |kind: u32, index: u32| {
        body(v, move |t| {
            t.write_u32(4).unwrap();
            t.write_u32(kind).unwrap();
            t.write_u32(index).unwrap();
        })
    };
    let one = ask(&mut c, None, DEVICE_RESTORE, &read(0, sinks[1])).expect("READ_FORMATS");
    assert_eq!(entries(one), vec![(0, sinks[1], pcm.clone())]);
    for (b, err) in [
        (read(1, sinks[0]), PulseError::NotSupported),
        (read(0, 9999), PulseError::NoEntity),
        (read(7, sinks[0]), PulseError::Invalid),
    ] {
        assert_eq!(ask(&mut c, None, DEVICE_RESTORE, &b), Err(err as u32));
    }

    // Through pactl: PCM is taken (and told to the subscriber), passthrough is not.
    let idx = sinks[0].to_string();
    pa_ok(&d, &run_pa(&d, "pactl", &["set-sink-formats", &idx, "pcm"]));
    let refused = run_pa(
        &d,
        "pactl",
        &["set-sink-formats", &idx, "pcm; ac3-iec61937"],
    );
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("Not supported"), "{err}");
    assert!(d.log_text().contains("quaverd plays PCM only"));
    let empty_save = body(v, |t| {
        t.write_u32(5).unwrap();
        t.write_u32(0).unwrap();
        t.write_u32(sinks[0]).unwrap();
        t.write_u8(0).unwrap();
    });
    assert_eq!(
        ask(&mut c, None, DEVICE_RESTORE, &empty_save),
        Err(PulseError::Invalid as u32)
    );
    let t0 = std::time::Instant::now();
    while events.get() < 1 && t0.elapsed() < WAIT {
        ask(
            &mut c,
            None,
            DEVICE_RESTORE,
            &body(v, |t| t.write_u32(0).unwrap()),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(events.get(), 1, "one event for the one save");
    let modules = pa_ok(&d, &run_pa(&d, "pactl", &["list", "short", "modules"]));
    assert!(modules.contains("3\tmodule-device-restore"), "{modules}");
}
