//! What a bigbuf run is asked to do, and the constants of its set-up.

use crate::modes::peers::PeerLatency;
use std::time::Duration;

/// The device rate everywhere in this mode.
pub const RATE: u32 = 48_000;
/// The sim card's ring: 2 s, the "2 s maximum buffer".
pub const BUFFER_FRAMES: usize = 96_000;
/// The sim card's watermark.
pub const PERIOD_FRAMES: usize = 256;
/// quaverd's device in the wakeups part.
pub const QUAVERD_DEVICE: &str = "sim:buffer=96000,loopback=off";
/// PulseAudio's first choice: alsa-lib's `null` PCM through the ALSA sink module.
pub const PA_ALSA_NULL_SINK: &str =
    "module-alsa-sink device=null sink_name=null rate=48000 channels=2";
/// The acceptance bound on an event sound's latency, ms.
pub const EVENT_BOUND_MS: f64 = 30.0;
/// The DAC probe's threshold: above the music (0.1, two streams 0.2), below a click.
pub(super) const PROBE_THRESHOLD: f32 = 0.5;
/// The quiet music's amplitude.
pub(super) const MUSIC_AMPLITUDE: f32 = 0.1;
/// The click's one loud sample.
pub(super) const CLICK_AMPLITUDE: f32 = 0.9;
/// A click is one loud frame then 100 ms of silence.
pub(super) const CLICK_FRAMES: usize = 4800;
/// Longest wait for the card to fill, refill, or play a click; the ring holds 2 s and
/// the probe learns what was played at the driver's next pointer read (≤ 2 s later).
pub(super) const EVENT_WAIT: Duration = Duration::from_secs(8);
/// A refill is over when the card's counters have not moved for this long.
pub(super) const STILL: Duration = Duration::from_millis(30);
/// How long PulseAudio on alsa-lib's `null` PCM must survive, and at what CPU cost, to
/// be used: the null PCM never blocks, so a sink thread without timer scheduling spins.
pub(super) const ALSA_PROBE: Duration = Duration::from_secs(3);
/// CPU seconds per second above which the alsa-null PulseAudio counts as spinning.
pub(super) const ALSA_SPIN_CPU: f64 = 0.5;

/// Settings of a `bigbuf` run.
#[derive(Debug, Clone)]
pub struct BigbufOptions {
    /// The paplay client's latency requests.
    pub latencies: Vec<PeerLatency>,
    /// Measurement window, s.
    pub window_seconds: f64,
    /// From starting paplay to the window, s.
    pub settle_seconds: f64,
    /// Repetitions (servers alternate within each).
    pub repeats: usize,
    /// Click events per event run.
    pub events: usize,
    /// Run the wakeups part.
    pub wakeups: bool,
    /// Run the event-latency part.
    pub event_part: bool,
}

impl BigbufOptions {
    /// Defaults: 2000 ms and the default latency, 30 s windows after 5 s, 3 repetitions,
    /// 20 events (quick: 3 s windows after 3 s, once, 3 events).
    pub fn new(quick: bool) -> BigbufOptions {
        BigbufOptions {
            latencies: vec![PeerLatency::Ms(2000), PeerLatency::Default],
            window_seconds: if quick { 3.0 } else { 30.0 },
            settle_seconds: if quick { 3.0 } else { 5.0 },
            repeats: if quick { 1 } else { 3 },
            events: if quick { 3 } else { 20 },
            wakeups: true,
            event_part: true,
        }
    }
}
