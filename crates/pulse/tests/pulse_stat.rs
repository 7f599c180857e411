//! STAT (`pactl stat`): the memory blocks quaver holds for clients (stream rings,
//! srbchannel rings, record-pool slots in flight, cached samples) rise while streams
//! play and fall back when they end; the lifetime totals only rise.

#[macro_use]
mod pulse_util;

use pulse_util::*;
use quaver_pulse::pulseaudio::protocol::{self as pa, Command};
use quaver_testkit::*;

/// STAT through the raw client, which itself holds no block (it has no shared memory).
fn stat(c: &mut RawClient) -> pa::StatInfo {
    c.request(&Command::Stat).expect("STAT")
}

/// The block counts `pactl stat` prints: (in use, allocated during the whole lifetime).
fn pactl_blocks(d: &Daemon) -> (u64, u64) {
    let out = pa_ok(d, &run_pa(d, "pactl", &["stat"]));
    let count = |prefix: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix:?} in pactl stat:\n{out}"))
    };
    (
        count("Currently in use: "),
        count("Allocated during whole lifetime: "),
    )
}

fn count_of(d: &Daemon, kind: &str) -> usize {
    pa_ok(d, &run_pa(d, "pactl", &["list", "short", kind]))
        .lines()
        .count()
}

#[test]
fn stat_counts_blocks_while_streams_play_and_gives_them_back() {
    require_tools!("pactl", "paplay", "parec");
    let d = pulse_util::start(&["--device", "null"]);
    let mut c = RawClient::ready(&d, "stat-test");
    let idle = stat(&mut c);
    assert_eq!(
        (idle.memblock_total, idle.memblock_total_size),
        (0, 0),
        "blocks held with no stream and no sample: {idle:?}"
    );
    let (pactl_idle, _) = pactl_blocks(&d);

    let long = noise_s16(48000 * 20, 5, 1000);
    write_wav_s16(&d.path("long.wav"), 48000, 2, &long);
    let mut player = spawn_pa(&d, "paplay", &["long.wav"]);
    let recorder = spawn_pa(&d, "parec", &["-d", "null-sink.monitor", "/dev/null"]);
    assert!(
        wait_until(WAIT, || count_of(&d, "sink-inputs") == 1
            && count_of(&d, "source-outputs") == 1),
        "the streams did not appear\n{}",
        d.log_text()
    );
    let playing = stat(&mut c);
    // Each stream's ring (f32, at least 1024 frames of two channels) is a block.
    assert!(
        playing.memblock_total >= 2 && playing.memblock_total_size >= 2 * 1024 * 2 * 4,
        "{playing:?}"
    );
    assert!(
        playing.memblock_allocated >= playing.memblock_total
            && playing.memblock_allocated_size >= playing.memblock_total_size
            && playing.memblock_allocated > idle.memblock_allocated,
        "{idle:?} then {playing:?}"
    );
    let (pactl_playing, _) = pactl_blocks(&d);
    assert!(
        pactl_playing >= pactl_idle + 2,
        "pactl stat: {pactl_idle} blocks idle, {pactl_playing} while two streams run"
    );

    // A cached sample is a block of its decoded audio (f32) until removed.
    write_wav_s16(&d.path("bell.wav"), 48000, 2, &noise_s16(24000, 6, 1000));
    pa_ok(
        &d,
        &run_pa(&d, "pactl", &["upload-sample", "bell.wav", "bell"]),
    );

    player.kill().unwrap();
    player.wait().unwrap();
    let _ = interrupt(recorder);
    // 24 000 s16 samples, stored as f32.
    let sample_bytes = 24000 * 4;
    let mut after = stat(&mut c);
    assert!(
        wait_until(WAIT, || {
            after = stat(&mut c);
            (after.memblock_total, after.memblock_total_size) == (1, sample_bytes)
        }),
        "the streams' blocks were not given back: {after:?}\n{}",
        d.log_text()
    );
    // pactl uploads float32 (as it does to PulseAudio).
    assert_eq!(after.sample_cache_size, 24000 * 4, "uploaded bytes");
    assert!(
        after.memblock_allocated > playing.memblock_allocated
            && after.memblock_allocated_size >= playing.memblock_allocated_size + sample_bytes,
        "lifetime totals only rise: {playing:?} then {after:?}"
    );
    assert!(
        wait_until(WAIT, || pactl_blocks(&d).0 == pactl_idle + 1),
        "pactl stat: {pactl_idle} blocks idle, {:?} with one sample",
        pactl_blocks(&d)
    );

    pa_ok(&d, &run_pa(&d, "pactl", &["remove-sample", "bell"]));
    let mut end = stat(&mut c);
    assert!(
        wait_until(WAIT, || {
            end = stat(&mut c);
            (end.memblock_total, end.memblock_total_size) == (0, 0)
        }),
        "{end:?}"
    );
    assert!(
        end.memblock_allocated >= after.memblock_allocated
            && end.memblock_allocated_size >= after.memblock_allocated_size,
        "{after:?} then {end:?}"
    );
    assert_eq!(end.sample_cache_size, 0);
}
