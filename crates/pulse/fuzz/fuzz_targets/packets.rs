//! Fuzzes the PulseAudio packet framing, the tagstruct bounds check and the command
//! decoder with arbitrary client byte streams:
//! `cd crates/pulse/fuzz && cargo +nightly fuzz run packets -- -max_total_time=60`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quaver_pulse::decode_stream_for_fuzzing(data);
});
