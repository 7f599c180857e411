//! Fuzzes the PulseAudio packet framing, the tagstruct bounds check and the command
//! decoder with arbitrary client byte streams: `scripts/fuzz --run pulse_packets`
//! (docs/fuzz.md).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quaver_pulse::decode_stream_for_fuzzing(data);
});
