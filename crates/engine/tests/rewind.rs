//! Big buffers without sluggishness: a stream asking for a long latency makes the
//! simulated card fill ahead (few wakeups), and a sound started meanwhile is heard after
//! the watermark because the queued audio is rewound and rendered again.
//!
//! Runs on virtual time, so the figures below are exact, not timings of this machine.
//! Every cycle runs under an allocation guard: filling ahead, rewinding and replaying
//! are real-time work too.

mod common;

use assert_no_alloc::{AllocDisabler, assert_no_alloc, violation_count};
use common::{Dc, Thru};

use quaver_devices::{DacProbe, SimCard, SimConfig, VirtualClock};
use quaver_dsp::ChannelMap;
use quaver_dsp::resample::ResampleQuality;
use quaver_engine::stream::{FrameSource, PlaybackAdapter, StreamFormat};
use quaver_engine::{Engine, EngineConfig, NodeKind, NodeSpec, RtRunner};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[global_allocator]
static A: AllocDisabler = AllocDisabler;

const RATE: u32 = 48_000;
/// A 2 s ring, as the issue asks.
const BUFFER: usize = 96_000;
const PERIOD: usize = 256;

/// Quiet endless music: every sample 0.1, below the probe's threshold.
struct Music {
    paused: Arc<AtomicBool>,
}

impl FrameSource for Music {
    fn available(&self) -> usize {
        1 << 24
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        out.fill(0.1);
        out.len() / 2
    }
    fn draining(&self) -> bool {
        false
    }
    fn report(&mut self, _played: u64, _delay: u32, _xruns: u32, _started: bool) {}
    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }
}

/// An event sound: one loud click, then a little silence, then done.
struct Click {
    left: usize,
    first: bool,
}

impl FrameSource for Click {
    fn available(&self) -> usize {
        self.left
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        let n = (out.len() / 2).min(self.left);
        out[..n * 2].fill(0.0);
        if self.first && n > 0 {
            out[0] = 0.9;
            out[1] = 0.9;
            self.first = false;
        }
        self.left -= n;
        n
    }
    fn draining(&self) -> bool {
        true
    }
    fn report(&mut self, _played: u64, _delay: u32, _xruns: u32, _started: bool) {}
}

fn stereo_48k() -> StreamFormat {
    StreamFormat {
        rate: RATE,
        channels: ChannelMap::stereo(),
    }
}

fn adapter<S: FrameSource + 'static>(engine: &Engine, src: S) -> Box<PlaybackAdapter<S>> {
    let a = PlaybackAdapter::new(
        src,
        &stereo_48k(),
        &ChannelMap::stereo(),
        RATE,
        engine.config().quantum_max,
        0,
        ResampleQuality::High,
    )
    .unwrap()
    .with_rewind(engine.rewind_capacity(), 2);
    Box::new(a)
}

/// The 2 s card every test uses, with `period` frames of watermark and a DAC probe.
fn card_config(period: usize) -> SimConfig {
    SimConfig {
        rate: RATE,
        buffer_frames: BUFFER,
        period_frames: period,
        loopback: false,
        ..SimConfig::default()
    }
}

fn engine_config() -> EngineConfig {
    EngineConfig {
        rt_priority: 0,
        suspend_timeout: None,
        ..EngineConfig::default()
    }
}

/// Adds the quiet music stream asking for 2 s of latency; returns its pause switch.
fn add_music(engine: &Engine) -> Arc<AtomicBool> {
    let paused = Arc::new(AtomicBool::new(false));
    let mut spec = NodeSpec::new("music", NodeKind::PlaybackStream);
    spec.outputs = ChannelMap::stereo();
    spec.latency_frames = Some(BUFFER as u32);
    let music = adapter(
        engine,
        Music {
            paused: paused.clone(),
        },
    );
    engine
        .add_node_linked(spec, Some(music), Some("sim-sink"))
        .unwrap();
    paused
}

/// Starts a click stream (no latency request of its own).
fn start_click(engine: &Engine) {
    let mut spec = NodeSpec::new("click", NodeKind::PlaybackStream);
    spec.outputs = ChannelMap::stereo();
    let click = adapter(
        engine,
        Click {
            left: 4800,
            first: true,
        },
    );
    engine
        .add_node_linked(spec, Some(click), Some("sim-sink"))
        .unwrap();
}

struct Rig {
    engine: Engine,
    runner: RtRunner,
    clock: VirtualClock,
    probe: DacProbe,
    paused: Arc<AtomicBool>,
}

/// A 2 s sim card on virtual time with one music stream asking for 2 s of latency.
fn rig() -> Rig {
    let clock = VirtualClock::new();
    let probe = DacProbe::new(0.5);
    let card = SimCard::with_clock(card_config(PERIOD), Box::new(clock.clone()))
        .unwrap()
        .with_dac_probe(probe.clone());
    let (engine, runner) = Engine::new_manual(engine_config(), vec![Box::new(card)]).unwrap();
    assert_eq!(engine.rewind_capacity(), BUFFER);
    let paused = add_music(&engine);
    Rig {
        engine,
        runner,
        clock,
        probe,
        paused,
    }
}

impl Rig {
    /// Runs cycles until virtual time reaches `t_ns` (bounded by a cycle count).
    fn run_until(&mut self, t_ns: u64) {
        for _ in 0..100_000 {
            if self.clock.now() >= t_ns {
                return;
            }
            self.cycle();
        }
        panic!("virtual time stuck at {} ns", self.clock.now());
    }

    /// Finishes the refill in progress (the cycles that run back to back), then lets
    /// half a second pass as if the thread slept: about 1.3 s of music is queued then.
    /// On virtual time, time only moves while the driver sleeps, so without this every
    /// test would act right after a wakeup, with only the watermark left.
    fn mid_sleep(&mut self) {
        let q = self.engine.quantum() as u64;
        for _ in 0..1000 {
            let queued = self.engine.stats().devices[0]
                .playback_delay
                .load(Ordering::Relaxed);
            if queued + q > BUFFER as u64 {
                self.clock.advance(Duration::from_millis(500));
                return;
            }
            self.cycle();
        }
        panic!("the card never filled");
    }

    /// Runs cycles until the probe fires; returns when the loud sample was played.
    fn run_until_heard(&mut self, limit_ns: u64) -> u64 {
        for _ in 0..100_000 {
            if let Some(t) = self.probe.first_played_ns() {
                return t;
            }
            assert!(self.clock.now() < limit_ns, "never heard");
            self.cycle();
        }
        panic!("never heard");
    }

    /// One real-time cycle under the allocation guard, then the control side's cleanup.
    fn cycle(&mut self) {
        let runner = &mut self.runner;
        assert!(assert_no_alloc(|| runner.run_cycle()));
        assert_eq!(violation_count(), 0, "allocation in the real-time cycle");
        self.engine.collect();
    }

    fn wakeups(&self) -> u64 {
        self.engine.stats().devices[0]
            .wakeups
            .load(Ordering::Relaxed)
    }

    fn underruns(&self) -> u64 {
        self.engine.stats().devices[0]
            .underruns
            .load(Ordering::Relaxed)
    }

    fn rewinds(&self) -> u64 {
        self.engine.stats().devices[0]
            .rewinds
            .load(Ordering::Relaxed)
    }

    fn start_click(&self) {
        start_click(&self.engine);
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn a_two_second_request_fills_the_card_and_wakes_about_once_per_refill() {
    let mut r = rig();
    r.run_until(2 * S);
    let before = r.wakeups();
    r.run_until(12 * S);
    let wakeups = r.wakeups() - before;
    // Each wakeup finds the watermark left and refills to 2 s less at most one
    // quantum: one wakeup per (2 s - quantum - watermark) of audio, about 1.82 s.
    let per_refill = (BUFFER - 8192 - PERIOD) as f64 / RATE as f64;
    let most = (10.0 / per_refill).ceil() as u64 + 1;
    assert!(
        wakeups <= most,
        "{wakeups} wakeups in 10 s (at most {most} expected)"
    );
    assert!(wakeups >= 1);
    assert_eq!(r.underruns(), 0);
}

#[test]
fn an_event_sound_is_heard_within_30_ms_while_two_seconds_are_queued() {
    let mut r = rig();
    r.run_until(3 * S);
    r.mid_sleep();
    assert!(
        r.probe.first_played_ns().is_none(),
        "the music alone is quiet"
    );
    let started = r.clock.now();
    r.start_click();
    let heard = r.run_until_heard(started + 3 * S);
    let ms = (heard - started) as f64 / 1e6;
    eprintln!("virtual time: the click was heard {ms:.2} ms after it started");
    assert!(
        ms <= 30.0,
        "the click was heard {ms:.1} ms after it started"
    );
    assert!(r.rewinds() >= 1);
    assert_eq!(r.underruns(), 0);
}

#[test]
fn without_a_rewind_the_event_would_wait_behind_the_queue() {
    // The control experiment for the test above: a second stream that keeps no
    // history cannot take its output back, so no rewind happens and the same click
    // waits behind the music already queued (about 1.3 s here).
    let mut r = rig();
    let mut spec = NodeSpec::new("stubborn", NodeKind::PlaybackStream);
    spec.outputs = ChannelMap::stereo();
    let stubborn = PlaybackAdapter::new(
        Music {
            paused: Arc::new(AtomicBool::new(false)),
        },
        &stereo_48k(),
        &ChannelMap::stereo(),
        RATE,
        r.engine.config().quantum_max,
        0,
        ResampleQuality::High,
    )
    .unwrap();
    r.engine
        .add_node_linked(spec, Some(Box::new(stubborn)), Some("sim-sink"))
        .unwrap();
    r.run_until(3 * S);
    r.mid_sleep();
    let started = r.clock.now();
    r.start_click();
    let heard = r.run_until_heard(started + 5 * S);
    let ms = (heard - started) as f64 / 1e6;
    assert!(ms > 500.0, "heard after {ms:.1} ms without a rewind");
}

#[test]
fn a_pause_is_heard_at_once_and_resuming_loses_nothing() {
    let mut r = rig();
    r.run_until(3 * S);
    r.mid_sleep();
    r.paused.store(true, Ordering::Relaxed);
    r.engine.rewind().unwrap();
    let rewinds = r.rewinds();
    r.run_until(r.clock.now() + S / 10);
    assert_eq!(r.rewinds(), rewinds + 1, "pausing rewound the card");
    r.paused.store(false, Ordering::Relaxed);
    r.engine.rewind().unwrap();
    r.run_until(6 * S);
    assert_eq!(r.underruns(), 0);
}

#[test]
fn the_real_time_thread_is_woken_from_a_long_sleep_to_rewind() {
    // The engine's own thread on the real clock: it sleeps up to ~2 s between refills,
    // so a rewind must cut that sleep short. Bounded waits; no timing is asserted.
    let probe = DacProbe::new(0.5);
    let card = SimCard::new(card_config(1024))
        .unwrap()
        .with_dac_probe(probe.clone());
    let engine = Engine::start(engine_config(), vec![Box::new(card)]).unwrap();
    add_music(&engine);
    let stats = engine.stats();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Wait for the first big refill: more than a second queued.
    while stats.devices[0].playback_delay.load(Ordering::Relaxed) < RATE as u64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the card never filled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let started = quaver_devices::clock::monotonic_ns();
    start_click(&engine);
    while probe.first_played_ns().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the click was never played"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Reported, not asserted: this is the real clock of a shared machine.
    let ms = (probe.first_played_ns().unwrap() - started) as f64 / 1e6;
    eprintln!("real clock: the click was heard {ms:.2} ms after it started");
    assert!(stats.devices[0].rewinds.load(Ordering::Relaxed) >= 1);
    engine.shutdown().unwrap();
}

#[test]
fn a_playback_node_fed_from_the_graph_stops_the_filling_ahead() {
    // A loopback is a playback node whose audio is computed from other nodes in the
    // cycle: it cannot be rendered ahead and taken back, so the card goes back to one
    // quantum per wakeup while it exists.
    let mut r = rig();
    r.run_until(2 * S);
    let before = r.wakeups();
    r.run_until(6 * S);
    let filling = r.wakeups() - before;
    let mut spec = NodeSpec::new("loop", NodeKind::PlaybackStream);
    spec.inputs = ChannelMap::stereo();
    spec.outputs = ChannelMap::stereo();
    r.engine.add_node(spec, Some(Box::new(Thru))).unwrap();
    r.engine.link("music", "loop").unwrap();
    r.engine.link("loop", "sim-sink").unwrap();
    r.run_until(7 * S);
    let before = r.wakeups();
    r.run_until(11 * S);
    let looping = r.wakeups() - before;
    let per_quantum = 4 * RATE as u64 / r.engine.quantum() as u64;
    assert!(filling <= 4, "{filling} wakeups in 4 s while filling ahead");
    assert!(
        looping + 2 >= per_quantum,
        "{looping} wakeups in 4 s with the loop; one per quantum is {per_quantum}"
    );
    assert_eq!(r.underruns(), 0);
}

#[test]
fn a_feedback_link_stops_the_filling_ahead() {
    // The card's monitor into its own playback (a JACK link, so a loop is allowed): the
    // loop carries each cycle into the next, which a rewind could not take back.
    let mut r = rig();
    r.run_until(2 * S);
    let before = r.wakeups();
    r.run_until(6 * S);
    let filling = r.wakeups() - before;
    r.engine
        .link_with_feedback("sim-sink:monitor_FL", "sim-sink:playback_FL")
        .unwrap();
    r.run_until(7 * S);
    let before = r.wakeups();
    r.run_until(11 * S);
    let looping = r.wakeups() - before;
    let per_quantum = 4 * RATE as u64 / r.engine.quantum() as u64;
    assert!(filling <= 4, "{filling} wakeups in 4 s while filling ahead");
    assert!(
        looping + 2 >= per_quantum,
        "{looping} wakeups in 4 s with the feedback link; one per quantum is {per_quantum}"
    );
    assert_eq!(r.underruns(), 0);
}

#[test]
fn a_low_latency_stream_held_by_a_suspended_sink_lets_the_card_fill_ahead_again() {
    let mut r = rig();
    // A virtual sink with a 5 ms stream: the card must wake every few ms for it...
    let vsink = common::virtual_sink(&r.engine);
    let mut low = NodeSpec::new("low", NodeKind::PlaybackStream);
    low.outputs = ChannelMap::stereo();
    low.latency_frames = Some(240);
    r.engine.add_node(low, Some(Box::new(Dc(0.0)))).unwrap();
    r.engine.link("low", "vsink").unwrap();
    r.run_until(2 * S);
    let before = r.wakeups();
    r.run_until(4 * S);
    let held_back = r.wakeups() - before;
    // ...until that sink is suspended: then only the music's 2 s request counts.
    assert!(r.engine.suspend_node(vsink, true).unwrap());
    r.run_until(6 * S);
    let before = r.wakeups();
    r.run_until(10 * S);
    let filling = r.wakeups() - before;
    assert!(
        held_back > 100,
        "{held_back} wakeups in 2 s with a 5 ms stream"
    );
    assert!(
        filling <= 4,
        "{filling} wakeups in 4 s with the 5 ms stream held by a suspended sink"
    );
    assert_eq!(r.underruns(), 0);
}

/// Counts up, one value per frame (both channels), without end.
struct Ramp(f32);

impl FrameSource for Ramp {
    fn available(&self) -> usize {
        1 << 24
    }
    fn read(&mut self, out: &mut [f32]) -> usize {
        for f in out.chunks_exact_mut(2) {
            self.0 += 1.0;
            f.fill(self.0);
        }
        out.len() / 2
    }
    fn draining(&self) -> bool {
        false
    }
    fn report(&mut self, _played: u64, _delay: u32, _xruns: u32, _started: bool) {}
}

/// Keeps every left-channel sample it is given (in room reserved up front: it runs
/// under the allocation guard).
struct Tape(Arc<std::sync::Mutex<Vec<f32>>>);

impl quaver_engine::Processor for Tape {
    fn process(
        &mut self,
        _cx: &quaver_engine::CycleInfo,
        inputs: quaver_dsp::Planar<'_>,
        _outputs: &mut quaver_dsp::PlanarMut<'_>,
    ) {
        let mut t = self.0.lock().unwrap();
        let room = t.capacity() - t.len();
        let s = inputs.channel(0);
        t.extend_from_slice(&s[..s.len().min(room)]);
    }
}

#[test]
fn a_rewind_while_a_stream_is_held_does_not_replay_what_it_played_before() {
    let mut r = rig();
    let vsink = common::virtual_sink(&r.engine);
    let mut s = NodeSpec::new("ramp", NodeKind::PlaybackStream);
    s.outputs = ChannelMap::stereo();
    // Linked as they are added: a new node's links start at full gain.
    r.engine
        .add_node_linked(s, Some(adapter(&r.engine, Ramp(0.0))), Some("vsink"))
        .unwrap();
    let tape = Arc::new(std::sync::Mutex::new(Vec::with_capacity(1 << 20)));
    let mut rec = NodeSpec::new("rec", NodeKind::RecordStream);
    rec.inputs = ChannelMap::stereo();
    r.engine
        .add_node_linked(rec, Some(Box::new(Tape(tape.clone()))), Some("vsink"))
        .unwrap();
    r.run_until(S);
    // Held: the card fills ahead for the music again, and a pause of the music rewinds
    // it, long after the held stream last played.
    assert!(r.engine.suspend_node(vsink, true).unwrap());
    r.run_until(3 * S);
    r.mid_sleep();
    let rewinds = r.rewinds();
    r.paused.store(true, Ordering::Relaxed);
    r.engine.rewind().unwrap();
    r.run_until(r.clock.now() + S / 10);
    assert_eq!(r.rewinds(), rewinds + 1, "pausing rewound the card");
    r.paused.store(false, Ordering::Relaxed);
    assert!(r.engine.suspend_node(vsink, false).unwrap());
    r.run_until(r.clock.now() + S);
    let t = tape.lock().unwrap();
    assert!(t.len() > 48_000, "recorded {} frames", t.len());
    let repeat = t.windows(2).position(|w| w[1] != w[0] + 1.0);
    assert_eq!(
        repeat.map(|i| (t[i], t[i + 1])),
        None,
        "the held stream's monitor jumped (frame {repeat:?} of {})",
        t.len()
    );
}
