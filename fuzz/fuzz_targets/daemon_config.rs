//! Fuzzes quaverd's configuration file through its public API, as the daemon reads it:
//! `Config::parse` on arbitrary text, then, for a file it accepts, the settings derived
//! from it and every `engine.devices` spec parsed with the file's defaults. It must not
//! panic; an accepted file must pass `validate` again and give engine settings within
//! the checked bounds; a file TOML itself refuses must be refused with a line number.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quaver_daemon::config::Config;
use quaver_devices::spec::{DeviceDefaults, parse_spec};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let cfg = match Config::parse(text, Path::new("quaver.toml")) {
        Ok(cfg) => cfg,
        Err(e) => {
            let msg = format!("{e:#}");
            assert!(msg.starts_with("quaver.toml: "), "{msg}");
            if toml::from_str::<toml::Table>(text).is_err() {
                assert!(
                    msg.contains("line "),
                    "a TOML error without its line: {msg}"
                );
            }
            return;
        }
    };
    cfg.validate().expect("an accepted file validates again");
    let e = cfg.engine_config();
    assert!(e.quantum_min <= e.quantum_default && e.quantum_default <= e.quantum_max);
    assert!(e.quantum_min.is_power_of_two() && e.quantum_max <= 65536);
    assert!((1..=65536).contains(&e.max_nodes));
    assert!(e.ramp_frames >= 1);
    let defaults = DeviceDefaults {
        rate: cfg.engine.rate,
        channels: cfg
            .engine
            .channels
            .parse()
            .expect("validated channels parse"),
    };
    for spec in &cfg.engine.devices {
        let _ = parse_spec(spec, &defaults);
    }
});
