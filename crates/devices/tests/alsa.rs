//! The `alsa:` device against the real alsa-lib, with the PCMs every machine has: the
//! userspace `null` PCM and the `file` plugin (no kernel ALSA, no sound card needed).
//! Neither runs in real time, so nothing here assumes real-time behaviour: the device
//! paces them on a virtual clock. Tests that need alsa-lib skip (with a message) where
//! `libasound.so.2` is not installed; tests of the "unavailable" path run in a child
//! process with `QUAVER_ALSA_LIBRARY` pointing at a missing library.

use quaver_devices::alsa::pcm::{Access, Direction, PcmFormat};
use quaver_devices::alsa::{self, AlsaConfig, AlsaDevice, Pacing};
use quaver_devices::{
    Device, DeviceDefaults, DeviceError, DeviceSpec, VirtualClock, WaitStatus, open_device,
    parse_spec,
};
use quaver_dsp::{ChannelMap, PlanarBuf};
use std::process::Command;

const CHILD: &str = "QUAVER_ALSA_TEST_CHILD";

fn have_alsa() -> bool {
    match alsa::available() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("skipping: {why}");
            false
        }
    }
}

fn defaults() -> DeviceDefaults {
    DeviceDefaults::default()
}

fn spec(s: &str) -> AlsaConfig {
    match parse_spec(s, &defaults()) {
        Ok(DeviceSpec::Alsa(c)) => c,
        other => panic!("{s}: {other:?}"),
    }
}

fn bad(s: &str) -> String {
    match parse_spec(s, &defaults()) {
        Err(DeviceError::BadSpec { reason, .. }) => reason,
        other => panic!("{s}: expected BadSpec, got {other:?}"),
    }
}

fn open_virtual(cfg: AlsaConfig) -> (AlsaDevice, VirtualClock) {
    let clock = VirtualClock::new();
    let dev =
        AlsaDevice::open_with_clock(cfg, Box::new(clock.clone()), Box::new(clock.clone())).unwrap();
    (dev, clock)
}

// ---- spec grammar (no alsa-lib needed) ----

#[test]
fn alsa_spec_defaults_and_options() {
    let c = spec("alsa");
    assert_eq!(c.pcm, "default");
    assert_eq!((c.playback, c.capture, c.mmap), (true, false, true));
    assert_eq!(c.pacing, Pacing::Auto);
    assert_eq!(c.name, "alsa");
    let c = spec(
        "alsa:hw:1,rate=44100,channels=mono,format=s24_3,buffer=4096,period=1024,mmap=off,\
         capture,playback=off,margin=128,margin_max=2048,pace=device,name=card",
    );
    assert_eq!(c.pcm, "hw:1");
    assert_eq!(c.rate, 44_100);
    assert_eq!(c.channels, ChannelMap::mono());
    assert_eq!(c.format, Some(PcmFormat::S24_3));
    assert_eq!((c.buffer_frames, c.period_frames), (Some(4096), Some(1024)));
    assert_eq!((c.mmap, c.playback, c.capture), (false, false, true));
    assert_eq!(
        (c.margin_frames, c.margin_max_frames),
        (Some(128), Some(2048))
    );
    assert_eq!(c.pacing, Pacing::Device);
    assert_eq!(c.name, "card");
}

#[test]
fn alsa_pcm_names_with_colons_commas_and_quotes() {
    // Unquoted, the PCM runs up to the first of our options.
    assert_eq!(spec("alsa:hw:0,0").pcm, "hw:0,0");
    assert_eq!(spec("alsa:plughw:1,0,rate=44100").pcm, "plughw:1,0");
    assert_eq!(
        spec("alsa:file:FILE=/tmp/x.raw,FORMAT=raw,format=s16").pcm,
        "file:FILE=/tmp/x.raw,FORMAT=raw"
    );
    // Quoted: anything, including our option names and ALSA's own quotes.
    let c = spec("alsa:'file:FILE=/tmp/a,rate=b.raw,FORMAT=raw',format=s16");
    assert_eq!(c.pcm, "file:FILE=/tmp/a,rate=b.raw,FORMAT=raw");
    assert_eq!(c.format, Some(PcmFormat::S16));
    assert_eq!(
        spec(r#"alsa:"file:'/tmp/x y.raw',raw""#).pcm,
        "file:'/tmp/x y.raw',raw"
    );
    // pcm= is the same, quoted or not.
    assert_eq!(spec("alsa:pcm='hw:0,1',rate=96000").pcm, "hw:0,1");
    assert_eq!(spec("alsa:rate=96000,pcm=null").pcm, "null");
    assert_eq!(spec("alsa:,rate=8000").pcm, "default");
}

#[test]
fn bad_alsa_specs_say_why() {
    assert!(bad("alsa:null,pcm=hw:0").contains("twice"));
    assert!(bad("alsa:null,rate=48000,bogus=1").contains("unknown option 'bogus'"));
    assert!(bad("alsa:null,rate=48000,0").contains("quote a PCM name"));
    assert!(bad("alsa:'null").contains("unbalanced"));
    assert!(bad("alsa:'hw:0',0").contains("quote the whole PCM name"));
    assert!(bad("alsa:null,format=u8").contains("unknown ALSA format"));
    assert!(bad("alsa:null,playback=off").contains("nothing to open"));
    assert!(bad("alsa:null,margin=512,margin_max=256").contains("below margin"));
    assert!(bad("alsa:null,buffer=256,period=512").contains("larger than buffer"));
    assert!(bad("alsa:null,buffer=0").contains("outside"));
    assert!(bad("alsa:null,pace=fast").contains("auto, device or clock"));
    assert!(bad("alsa:null,rate=1,rate=2").contains("twice"));
    assert!(bad("nope").contains("null, file, sim, alsa, rtp-send or rtp-recv"));
}

// ---- alsa-lib's null PCM ----

#[test]
fn null_pcm_negotiates_f32_mmap_and_is_paced_on_the_clock() {
    if !have_alsa() {
        return;
    }
    let (mut dev, clock) = open_virtual(spec("alsa:null,capture"));
    let info = dev.info().clone();
    assert_eq!(info.rate, 48_000);
    assert_eq!(info.playback, Some(ChannelMap::stereo()));
    assert_eq!(info.capture, Some(ChannelMap::stereo()));
    assert!(
        info.description.contains("FLOAT_LE"),
        "{}",
        info.description
    );
    assert!(
        info.description.contains("CLOCK_MONOTONIC"),
        "{}",
        info.description
    );
    assert_eq!(dev.pacing(), Pacing::Clock);
    for (dir, s) in dev.setups() {
        assert_eq!(s.format, PcmFormat::F32, "{dir:?}");
        assert_eq!(s.access, Access::Mmap, "{dir:?}");
        assert!(s.formats_refused.is_empty());
        assert_eq!(s.buffer_frames, 12_000, "250 ms near");
    }
    assert_eq!(dev.poll_descriptor_count(), 1);
    dev.start(480).unwrap();
    let mut inb = PlanarBuf::new(2, 480);
    let mut out = PlanarBuf::new(2, 480);
    out.channel_mut(0).fill(0.25);
    let t0 = clock.now();
    for _ in 0..100 {
        assert_eq!(dev.wait(480).unwrap(), WaitStatus::Ready);
        inb.channel_mut(0).fill(1.0);
        dev.read(&mut inb.view_mut(480)).unwrap();
        assert!(
            inb.channel(0).iter().all(|&x| x == 0.0),
            "null captures zeros: {:?}",
            &inb.channel(0)[..8]
        );
        dev.write(out.view(480)).unwrap();
    }
    // 100 cycles of 10 ms on the (virtual) monotonic clock, exactly.
    assert_eq!(clock.now() - t0, 1_000_000_000);
    let c = dev.counters();
    assert_eq!(
        (c.wakeups, c.frames_written, c.frames_read),
        (100, 48_000, 48_000)
    );
    assert_eq!((c.underruns, c.overruns, c.pointer_queries), (0, 0, 0));
    assert_eq!(dev.playback_delay(), 480);
    assert_eq!(dev.rewindable().unwrap(), 12_000);
    dev.suspend();
    dev.start(480).unwrap();
    assert_eq!(dev.wait(480).unwrap(), WaitStatus::Ready);
    dev.close().unwrap();
    dev.close().unwrap();
}

/// Idle close on the real alsa-lib: `snd_pcm_close` on both PCMs, and `start` opens
/// and negotiates them again (same setup) and runs as before.
#[test]
fn null_pcm_closes_when_idle_and_reopens_on_start() {
    if !have_alsa() {
        return;
    }
    let (mut dev, _clock) = open_virtual(spec("alsa:null,capture,mmap=off,format=s16"));
    let setups = dev.setups().to_vec();
    let mut out = PlanarBuf::new(2, 480);
    let mut inb = PlanarBuf::new(2, 480);
    out.channel_mut(0).fill(0.25);
    let mut cycles = |dev: &mut AlsaDevice| {
        for _ in 0..10 {
            assert_eq!(dev.wait(480).unwrap(), WaitStatus::Ready);
            dev.read(&mut inb.view_mut(480)).unwrap();
            dev.write(out.view(480)).unwrap();
        }
    };
    dev.start(480).unwrap();
    cycles(&mut dev);
    assert!(dev.is_open());
    dev.suspend();
    assert!(dev.close_idle());
    assert!(!dev.is_open(), "the PCM handles are closed");
    assert!(!dev.close_idle());
    let c = dev.counters();
    assert_eq!((c.closed, c.idle_closes, c.reopens), (true, 1, 0));
    dev.start(480).unwrap();
    assert!(dev.is_open());
    assert_eq!(dev.setups(), &setups[..]);
    cycles(&mut dev);
    let c = dev.counters();
    assert_eq!((c.closed, c.idle_closes, c.reopens), (false, 1, 1));
    assert_eq!((c.frames_written, c.frames_read), (9600, 9600));
    assert_eq!((c.underruns, c.overruns), (0, 0));
    // Closed again, `wait` (which starts a stopped device) reopens too.
    dev.suspend();
    assert!(dev.close_idle());
    assert_eq!(dev.wait(480).unwrap(), WaitStatus::Ready);
    assert_eq!(dev.counters().reopens, 2);
    dev.close().unwrap();
}

/// alsa-lib's `file` plugin stays open while idle: reopening it would start a new output
/// file instead of continuing this one.
#[test]
fn file_pcm_stays_open_when_idle() {
    if !have_alsa() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.raw");
    let (mut dev, _clock) = open_virtual(spec(&format!("alsa:{},format=s16", file_pcm(&path))));
    let mut out = PlanarBuf::new(2, 480);
    out.channel_mut(0).fill(0.5);
    dev.start(480).unwrap();
    for _ in 0..2 {
        dev.wait(480).unwrap();
        dev.write(out.view(480)).unwrap();
        dev.suspend();
        assert!(!dev.close_idle());
        assert!(dev.is_open());
        dev.start(480).unwrap();
    }
    dev.close().unwrap();
    // Both cycles are in the one file: 2 × 480 frames of S16 stereo.
    assert_eq!(std::fs::read(&path).unwrap().len(), 2 * 480 * 4);
}

#[test]
fn null_pcm_with_read_write_access_and_a_forced_format() {
    if !have_alsa() {
        return;
    }
    for format in ["s16", "s24", "s24_3", "s32"] {
        let (mut dev, _clock) = open_virtual(spec(&format!(
            "alsa:null,mmap=off,format={format},rate=44100,channels=5.1,buffer=2048,period=512"
        )));
        let (_, s) = &dev.setups()[0];
        assert_eq!(s.access, Access::ReadWrite);
        assert_eq!(s.format.name(), format);
        assert_eq!((s.rate, s.channels), (44_100, 6));
        assert_eq!((s.buffer_frames, s.period_frames), (2048, 512));
        assert_eq!(dev.info().playback.as_ref().unwrap().len(), 6);
        let out = PlanarBuf::new(6, 1024);
        for _ in 0..10 {
            dev.wait(1024).unwrap();
            dev.write(out.view(1024)).unwrap();
        }
        assert_eq!(dev.counters().frames_written, 10_240);
    }
}

#[test]
fn a_pcm_that_does_not_run_in_real_time_is_detected_even_when_told_otherwise() {
    if !have_alsa() {
        return;
    }
    // pace=device on the null PCM: its pointer follows the writes at once, which a card
    // never does; the device notices within a few readings and paces itself.
    let (mut dev, clock) = open_virtual(spec("alsa:null,pace=device"));
    assert_eq!(dev.pacing(), Pacing::Device);
    let out = PlanarBuf::new(2, 256);
    let t0 = clock.now();
    for _ in 0..200 {
        dev.wait(256).unwrap();
        dev.write(out.view(256)).unwrap();
    }
    assert_eq!(dev.pacing(), Pacing::Clock);
    let elapsed = (clock.now() - t0) as f64 / 1e9;
    let expect = 200.0 * 256.0 / 48_000.0;
    assert!(
        (elapsed - expect).abs() < 0.02,
        "{elapsed} s for {expect} s of audio"
    );
    assert!(dev.counters().pointer_queries <= 4);
}

#[test]
fn missing_pcms_fail_with_the_alsa_message() {
    if !have_alsa() {
        return;
    }
    let err = open_device("alsa:no_such_pcm_here", &defaults())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no_such_pcm_here"), "{err}");
    // No kernel ALSA here: a card index fails too, with the errno's text.
    let err = open_device("alsa:hw:7", &defaults()).err().unwrap();
    assert!(matches!(err, DeviceError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("hw:7"), "{err}");
}

#[test]
fn enumeration_lists_the_null_pcm() {
    if !have_alsa() {
        return;
    }
    let pcms = alsa::list_pcms().unwrap();
    let null = pcms.iter().find(|p| p.name == "null").expect("null PCM");
    assert!(null.playback && null.capture);
    assert!(!null.description.is_empty());
    // No kernel ALSA here, so no cards (a machine with cards lists them).
    let _ = alsa::list_cards().unwrap();
    let s = alsa::probe("null", Direction::Capture).unwrap();
    assert_eq!(s.format, PcmFormat::F32);
}

// ---- the file plugin: byte-exact output ----

fn file_pcm(path: &std::path::Path) -> String {
    format!("'file:FILE={},FORMAT=raw'", path.display())
}

/// Runs the device over `frames` of two channels produced by `sample(frame, channel)`,
/// in cycles of `q`, and returns the file's bytes.
fn play_through_file(
    opts: &str,
    q: usize,
    cycles: usize,
    sample: impl Fn(usize, usize) -> f32,
) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.raw");
    let (mut dev, _clock) = open_virtual(spec(&format!("alsa:{}{opts}", file_pcm(&path))));
    assert_eq!(dev.pacing(), Pacing::Clock);
    let mut out = PlanarBuf::new(2, q);
    dev.start(q).unwrap();
    for cycle in 0..cycles {
        assert_eq!(dev.wait(q).unwrap(), WaitStatus::Ready);
        for ch in 0..2 {
            for (i, x) in out.channel_mut(ch).iter_mut().enumerate() {
                *x = sample(cycle * q + i, ch);
            }
        }
        dev.write(out.view(q)).unwrap();
    }
    dev.close().unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
fn file_pcm_output_is_byte_exact_s16() {
    if !have_alsa() {
        return;
    }
    // Every S16 code appears: frame i, channel c holds k = (i·97 + c·30000) mod 65536.
    let code = |i: usize, c: usize| ((i * 97 + c * 30_000) % 65_536) as i32 - 32_768;
    for mmap in ["on", "off"] {
        let bytes = play_through_file(&format!(",format=s16,mmap={mmap}"), 256, 40, |i, c| {
            code(i, c) as f32 / 32_768.0
        });
        let mut expect = Vec::new();
        for i in 0..256 * 40 {
            for c in 0..2 {
                expect.extend_from_slice(&(code(i, c) as i16).to_le_bytes());
            }
        }
        assert_eq!(bytes.len(), expect.len(), "mmap={mmap}");
        assert!(
            bytes == expect,
            "mmap={mmap}: file differs from what was written"
        );
    }
}

#[test]
fn file_pcm_output_is_bit_exact_f32_by_default() {
    if !have_alsa() {
        return;
    }
    // Float is the first choice and passes any value through, even beyond ±1.
    let value = |i: usize, c: usize| (i as f32 * 0.001 - 1.5) * if c == 0 { 1.0 } else { -0.7 };
    let bytes = play_through_file("", 100, 7, value);
    let mut expect = Vec::new();
    for i in 0..700 {
        for c in 0..2 {
            expect.extend_from_slice(&value(i, c).to_le_bytes());
        }
    }
    assert!(bytes == expect, "{} vs {} bytes", bytes.len(), expect.len());
}

#[test]
fn file_pcm_output_s24_3_and_s32_match_the_conversion() {
    if !have_alsa() {
        return;
    }
    let code24 = |i: usize, c: usize| ((i * 4099 + c * 77) % (1 << 24)) as i32 - (1 << 23);
    let bytes = play_through_file(",format=s24_3", 64, 10, |i, c| {
        code24(i, c) as f32 / (1 << 23) as f32
    });
    let mut expect = Vec::new();
    for i in 0..640 {
        for c in 0..2 {
            expect.extend_from_slice(&code24(i, c).to_le_bytes()[..3]);
        }
    }
    assert!(bytes == expect, "S24_3LE differs");
    // S32: codes an f32 holds exactly (multiples of 256) come back exactly.
    let bytes = play_through_file(",format=s32", 64, 10, |i, c| {
        code24(i, c) as f32 / (1 << 23) as f32
    });
    let mut expect = Vec::new();
    for i in 0..640 {
        for c in 0..2 {
            expect.extend_from_slice(&(code24(i, c) * 256).to_le_bytes());
        }
    }
    assert!(bytes == expect, "S32_LE differs");
}

// ---- child processes: the unavailable library and a custom alsa-lib configuration ----

fn run_child(test: &str, envs: &[(&str, &str)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child {test} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child {test} did not run:\n{text}"
    );
}

#[test]
fn without_libasound_opening_says_alsa_is_unavailable() {
    run_child(
        "child_without_libasound",
        &[(alsa::LIBRARY_ENV, "libasound-not-installed.so.2")],
    );
}

#[test]
#[ignore = "runs in a child process started by without_libasound_opening_says_alsa_is_unavailable"]
fn child_without_libasound() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let err = open_device("alsa:null", &defaults()).err().unwrap();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            DeviceError::Unavailable {
                backend: "ALSA",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        text.starts_with("ALSA unavailable: libasound-not-installed.so.2 not found"),
        "{text}"
    );
    // Parsing still works (a daemon validates --device before opening anything), and
    // the other devices are unaffected: this is what a fallback opens.
    assert!(parse_spec("alsa:hw:0", &defaults()).is_ok());
    assert!(open_device("null", &defaults()).is_ok());
    assert!(alsa::available().is_err());
    assert!(matches!(
        alsa::list_pcms(),
        Err(DeviceError::Unavailable { .. })
    ));
}

#[test]
fn format_negotiation_falls_back_in_order() {
    if !have_alsa() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("asound.conf");
    // A `linear` plugin accepts integer formats only: F32 is refused, S32 is next.
    std::fs::write(
        &conf,
        "pcm.intonly { type linear slave { pcm \"null\" format S16_LE } }\n",
    )
    .unwrap();
    let path = format!("/usr/share/alsa/alsa.conf:{}", conf.display());
    run_child("child_format_fallback", &[("ALSA_CONFIG_PATH", &path)]);
}

#[test]
#[ignore = "runs in a child process started by format_negotiation_falls_back_in_order"]
fn child_format_fallback() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    let (dev, _clock) = open_virtual(spec("alsa:intonly,pace=clock"));
    let (_, s) = &dev.setups()[0];
    assert_eq!(s.formats_refused, vec![PcmFormat::F32]);
    assert_eq!(s.format, PcmFormat::S32);
    // Asking for float only fails, naming the format.
    let err = AlsaDevice::open(spec("alsa:intonly,format=f32"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("FLOAT_LE"), "{err}");
}
