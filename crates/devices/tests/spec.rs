//! Device spec parsing and opening.

use quaver_devices::{
    DeviceDefaults, DeviceError, DeviceSpec, DriftStep, Fault, FileConfig, NullConfig, SimConfig,
    WavFormat, open_device, parse_spec,
};
use quaver_dsp::{ChannelMap, ChannelPosition};
use std::path::PathBuf;
use std::time::Duration;

fn d() -> DeviceDefaults {
    DeviceDefaults {
        rate: 44_100,
        channels: ChannelMap::stereo(),
    }
}

fn bad(spec: &str) -> String {
    match parse_spec(spec, &d()) {
        Err(DeviceError::BadSpec { spec: s, reason }) => {
            assert_eq!(s, spec);
            reason
        }
        other => panic!("{spec}: expected BadSpec, got {other:?}"),
    }
}

#[test]
fn null_specs() {
    assert_eq!(
        parse_spec("null", &d()).unwrap(),
        DeviceSpec::Null(NullConfig {
            rate: 44_100,
            channels: ChannelMap::stereo(),
            playback: true,
            capture: true,
            name: "null".into(),
        })
    );
    assert_eq!(
        parse_spec("null:", &d()).unwrap(),
        parse_spec("null", &d()).unwrap()
    );
    assert_eq!(
        parse_spec(
            " null:rate=48000, channels=5.1,capture=on,playback=off,name=quiet ",
            &d()
        )
        .unwrap(),
        DeviceSpec::Null(NullConfig {
            rate: 48_000,
            channels: ChannelMap::default_for(6),
            playback: false,
            capture: true,
            name: "quiet".into(),
        })
    );
    let DeviceSpec::Null(c) = parse_spec("null:channels=1", &d()).unwrap() else {
        panic!()
    };
    assert_eq!(c.channels, ChannelMap::mono());
    let DeviceSpec::Null(c) = parse_spec("null:channels=FL+FR+LFE,capture", &d()).unwrap() else {
        panic!()
    };
    use ChannelPosition::*;
    assert_eq!(c.channels, ChannelMap(vec![FL, FR, LFE]));
    assert!(c.capture);
}

#[test]
fn file_specs() {
    assert_eq!(
        parse_spec("file:/tmp/out.wav", &d()).unwrap(),
        DeviceSpec::File {
            config: FileConfig {
                path: PathBuf::from("/tmp/out.wav"),
                rate: 44_100,
                channels: ChannelMap::stereo(),
                format: WavFormat::S16,
                freewheel: false,
            },
            name: "file".into(),
        }
    );
    assert_eq!(
        parse_spec(
            "file:rec.wav,format=f32,freewheel,rate=96000,channels=mono,name=rec",
            &d()
        )
        .unwrap(),
        DeviceSpec::File {
            config: FileConfig {
                path: PathBuf::from("rec.wav"),
                rate: 96_000,
                channels: ChannelMap::mono(),
                format: WavFormat::F32,
                freewheel: true,
            },
            name: "rec".into(),
        }
    );
    let DeviceSpec::File { config, .. } = parse_spec("file:a.wav,freewheel=off", &d()).unwrap()
    else {
        panic!()
    };
    assert!(!config.freewheel);
}

#[test]
fn sim_specs() {
    assert_eq!(
        parse_spec("sim", &d()).unwrap(),
        DeviceSpec::Sim {
            config: SimConfig {
                rate: 44_100,
                ..SimConfig::default()
            },
            name: "sim".into(),
        }
    );
    let DeviceSpec::Sim { config, name } = parse_spec(
        "sim:rate=48000,buffer=4096,period=128,drift_ppm=-12.5,drift_step=300:+200,loopback=off,\
         channels=4,name=card,xrun=10,stall=20:150,stall=30:0.5,unplug=40",
        &d(),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(name, "card");
    assert_eq!(
        config,
        SimConfig {
            rate: 48_000,
            channels: ChannelMap::default_for(4),
            buffer_frames: 4096,
            period_frames: 128,
            margin_max_frames: None,
            loopback: false,
            drift_ppm: -12.5,
            drift_step: Some(DriftStep {
                after: Duration::from_secs(300),
                ppm: 200.0
            }),
            faults: vec![
                Fault::Xrun { at_cycle: 10 },
                Fault::Stall {
                    at_cycle: 20,
                    duration: Duration::from_millis(150)
                },
                Fault::Stall {
                    at_cycle: 30,
                    duration: Duration::from_micros(500)
                },
                Fault::Unplug { at_cycle: 40 },
            ],
        }
    );
}

#[test]
fn sim_margin_max_makes_the_watermark_adaptive() {
    let Ok(DeviceSpec::Sim { config, .. }) = parse_spec("sim:period=128,margin_max=2048", &d())
    else {
        panic!()
    };
    assert_eq!(
        (config.period_frames, config.margin_max_frames),
        (128, Some(2048))
    );
    assert!(bad("sim:period=128,margin_max=64").contains("margin_max 64"));
    assert!(bad("sim:buffer=4096,margin_max=4096").contains("smaller than buffer"));
}

#[test]
fn errors_name_the_offending_part() {
    assert!(bad("oss:/dev/dsp").contains("'oss'"));
    assert!(bad("").contains("empty"));
    assert!(bad("null:volume=3").contains("'volume'"));
    assert!(bad("null:rate=fast").contains("'fast'"));
    assert!(bad("null:rate=0").contains("rate 0"));
    assert!(bad("null:channels=0").contains("channel count 0"));
    assert!(bad("null:channels=quadrophonic").contains("'quadrophonic'"));
    assert!(bad("null:capture=maybe").contains("'maybe'"));
    assert!(bad("null:playback=off,capture=off").contains("nothing"));
    assert!(bad("null:rate=48000,rate=44100").contains("'rate' given twice"));
    assert!(bad("null:name").contains("'name' needs a value"));
    assert!(bad("null:=3").contains("no key"));
    assert!(bad("file:").contains("missing file path"));
    assert!(bad("file:,format=s16").contains("missing file path"));
    assert!(bad("file:x.wav,format=u8").contains("'u8'"));
    assert!(bad("file:x.wav,loopback=on").contains("'loopback'"));
    assert!(bad("sim:period=0").contains("period 0"));
    assert!(bad("sim:buffer=256,period=256").contains("period 256"));
    assert!(bad("sim:drift_ppm=1e9").contains("drift_ppm"));
    assert!(bad("sim:drift_step=200").contains("'200' for drift_step"));
    assert!(bad("sim:drift_step=10:1e9").contains("drift_step"));
    assert!(bad("sim:drift_step=-1:100").contains("drift_step"));
    assert!(bad("sim:stall=5").contains("'5'"));
    assert!(bad("sim:stall=x:5").contains("'x:5'"));
    // Found by fuzz/device_spec: a stall too long for a Duration panicked.
    assert!(bad("sim:stall=4:39999999999999999999999922229").contains("stall"));
    assert!(bad("sim:xrun=-1").contains("'-1'"));
    assert!(bad("sim:foo=1").contains("'foo'"));
}

#[test]
fn open_device_opens_each_kind_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("o.wav");
    let cases = [
        ("null".to_string(), "null"),
        ("null:name=n2,capture=on".to_string(), "n2"),
        (format!("file:{}", file.display()), "file"),
        (
            format!("file:{},name=rec,format=s24", file.display()),
            "rec",
        ),
        ("sim".to_string(), "sim"),
        ("sim:name=hw,period=64".to_string(), "hw"),
    ];
    for (spec, name) in cases {
        let mut dev = open_device(&spec, &d()).unwrap();
        assert_eq!(dev.info().name, name, "{spec}");
        assert_eq!(dev.info().rate, 44_100);
        dev.close().unwrap();
    }
    let dev = open_device("null:capture=on,playback=off", &d()).unwrap();
    assert!(dev.info().playback.is_none() && dev.info().capture.is_some());
    let dev = open_device("sim", &d()).unwrap();
    assert!(dev.info().playback.is_some() && dev.info().capture.is_some());
    let err = open_device("file:/nonexistent-dir/x.wav", &d())
        .err()
        .unwrap();
    assert!(matches!(err, DeviceError::Io { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent-dir/x.wav"), "{err}");
}
