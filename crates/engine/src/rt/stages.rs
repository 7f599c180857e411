//! Where a cycle's time goes, stage by stage, for the cycle's callback client: the
//! per-cycle breakdown `quaver-bench jack` prints (docs/engine/stages.md).
//!
//! The real-time thread already reads the clock at every node boundary when per-node
//! timing is on (`engine.node_timing`), and a callback client stamps when its process
//! thread woke and when it finished. From those readings, with no further clock read,
//! each cycle adds one sample per [`Stage`] to fixed histograms of atomics allocated
//! with the engine ([`CycleStages`]): no allocation, lock or syscall in the cycle, and a
//! reader that polls rarely loses nothing (the histograms are cumulative; it
//! differences two reads). Each cycle counts in [`Class::All`], and also in
//! [`Class::Late`] when its client's callback started more than two periods after the
//! cycle's nominal start, and in [`Class::Xrun`] when the client missed the cycle or the
//! thread woke more than a period late. Per class, [`CycleStages::dominant`] counts
//! which stage was the longest of the cycle: "which stage took the time".

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The stages of one cycle, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Stage {
    /// The previous cycle's end past this cycle's nominal start (0 when it ended in
    /// time): the thread was still busy, e.g. blocked on a client, when the cycle fell due.
    Overhang = 0,
    /// Driver wakeup lateness beyond the overhang: the thread's timer/device wakeup
    /// after the deadline, less what the previous cycle's late end explains.
    Timer,
    /// From the thread running to its signal to the client (messages, transport, the
    /// nodes before the client).
    Pre,
    /// Signal → the client's process thread awake (its scheduling delay).
    Wake,
    /// Awake → the client signalled completion (its callback).
    Callback,
    /// Completion signalled → the thread saw it: its own wakeup when it blocked on the
    /// client (the second wakeup of a cycle with a synchronous client), ~0 when the
    /// client had finished before the thread came to wait.
    Resume,
    /// From then to the end of the cycle's work (the mixing and the device write).
    Post,
    /// The nominal cycle start → the client's process thread awake: how late its
    /// callback came (the sum of the stages before it, less the overlap of the first two).
    CallbackLate,
}

/// Number of [`Stage`]s.
pub const STAGES: usize = 8;

/// Names of the stages, in order (protocol and reports).
pub const STAGE_NAMES: [&str; STAGES] = [
    "overhang",
    "timer",
    "pre",
    "wake",
    "callback",
    "resume",
    "post",
    "callback_late",
];

/// Which cycles a histogram covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Class {
    /// Every cycle with a callback client.
    All = 0,
    /// The client's callback started more than two periods after the nominal start.
    Late,
    /// The client missed the cycle, or the driver woke more than a period late.
    Xrun,
}

/// Number of [`Class`]es.
pub const CLASSES: usize = 3;

/// Names of the classes, in order.
pub const CLASS_NAMES: [&str; CLASSES] = ["all", "late", "xrun"];

/// Linear sub-buckets per power of two: 12.5 % resolution.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;

/// Buckets per histogram: exact below 8 ns, then 8 per power of two up to 2^33 ns
/// (8.6 s; the last bucket takes everything longer).
pub const STAGE_BUCKETS: usize = 256;

/// The bucket of `ns`.
pub fn stage_bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let e = u64::BITS - 1 - ns.leading_zeros();
    let sub = ((ns >> (e - SUB_BITS)) as usize) & (SUB - 1);
    (((e - SUB_BITS + 1) as usize) * SUB + sub).min(STAGE_BUCKETS - 1)
}

/// The smallest value of bucket `i`, ns.
pub fn stage_bucket_low(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let e = (i / SUB) as u32 + SUB_BITS - 1;
    ((SUB + i % SUB) as u64) << (e - SUB_BITS)
}

/// One cycle's stage times, ns (None: not known this cycle, e.g. the client did not
/// answer, or stamped nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CycleSample {
    /// Per [`Stage`].
    pub ns: [Option<u64>; STAGES],
    /// The client missed the cycle or the driver woke more than a period late.
    pub xrun: bool,
}

/// The cumulative histograms, written by the real-time thread only.
#[derive(Debug)]
pub struct CycleStages {
    /// `[class][stage][bucket]`, flattened.
    hist: Box<[AtomicU64]>,
    /// Cycles per class.
    cycles: [AtomicU64; CLASSES],
    /// `[class][stage]`: cycles whose longest stage (of those before `CallbackLate`)
    /// it was.
    dominant: [[AtomicU64; STAGES]; CLASSES],
    /// `[class][stage]`: sums, ns.
    sum: [[AtomicU64; STAGES]; CLASSES],
}

impl Default for CycleStages {
    fn default() -> Self {
        CycleStages {
            hist: (0..CLASSES * STAGES * STAGE_BUCKETS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            cycles: Default::default(),
            dominant: Default::default(),
            sum: Default::default(),
        }
    }
}

/// A copy of one class's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// Cycles.
    pub cycles: u64,
    /// Per stage: histogram of [`STAGE_BUCKETS`] (trailing zeros cut).
    pub hist: Vec<Vec<u64>>,
    /// Per stage: how often it was the cycle's longest.
    pub dominant: Vec<u64>,
    /// Per stage: sum, ns.
    pub sum_ns: Vec<u64>,
}

impl CycleStages {
    /// Adds one cycle. *RT*: atomics only.
    pub fn record(&self, s: &CycleSample, period_ns: u64) {
        let late = s.ns[Stage::CallbackLate as usize].is_some_and(|l| l > 2 * period_ns);
        let dominant = s.ns[..Stage::CallbackLate as usize]
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .max_by_key(|&(_, v)| v)
            .map(|(i, _)| i);
        for (class, on) in [
            (Class::All, true),
            (Class::Late, late),
            (Class::Xrun, s.xrun),
        ] {
            if !on {
                continue;
            }
            let c = class as usize;
            self.cycles[c].fetch_add(1, Relaxed);
            if let Some(d) = dominant {
                self.dominant[c][d].fetch_add(1, Relaxed);
            }
            for (st, v) in s.ns.iter().enumerate() {
                if let Some(v) = *v {
                    self.hist[(c * STAGES + st) * STAGE_BUCKETS + stage_bucket(v)]
                        .fetch_add(1, Relaxed);
                    self.sum[c][st].fetch_add(v, Relaxed);
                }
            }
        }
    }

    /// Copies one class. Control side.
    pub fn read(&self, class: Class) -> ClassCounts {
        let c = class as usize;
        let hist = (0..STAGES)
            .map(|st| {
                let at = (c * STAGES + st) * STAGE_BUCKETS;
                let v: Vec<u64> = self.hist[at..at + STAGE_BUCKETS]
                    .iter()
                    .map(|a| a.load(Relaxed))
                    .collect();
                let used = v.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
                v[..used].to_vec()
            })
            .collect();
        ClassCounts {
            cycles: self.cycles[c].load(Relaxed),
            hist,
            dominant: self.dominant[c].iter().map(|a| a.load(Relaxed)).collect(),
            sum_ns: self.sum[c].iter().map(|a| a.load(Relaxed)).collect(),
        }
    }
}

/// The real-time thread's per-cycle notes for [`CycleStages`]: what the callback
/// client of the cycle reported, and when the previous cycle ended.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StageClock {
    /// The client collected last this cycle: its times and when the thread saw its
    /// completion.
    client: Option<(crate::rt::timing::RemoteTimes, u64)>,
    /// A callback client missed this cycle.
    missed: bool,
    /// When the previous cycle's work ended (0: none yet).
    prev_end_ns: u64,
}

impl StageClock {
    /// Notes a split-phase node collected this cycle: its times (None when it did not
    /// answer), seen complete at `seen_ns`, and whether it missed the cycle. *RT*.
    pub(crate) fn collected(
        &mut self,
        times: Option<crate::rt::timing::RemoteTimes>,
        seen_ns: u64,
        missed: bool,
    ) {
        if let Some(t) = times.filter(|t| t.signal_ns != 0) {
            // The last collected is the one the cycle's end waited for.
            self.client = Some((t, seen_ns));
        }
        self.missed |= missed;
    }

    /// Ends a cycle that started running at `t0` (its driver wakeup `lateness` after
    /// its deadline, when the driver knows it) and whose work ended at `end`; records
    /// it into `into` when a callback client took part, and starts the next. *RT*.
    pub(crate) fn end_cycle(
        &mut self,
        into: &CycleStages,
        t0: u64,
        lateness: Option<u64>,
        overdue: bool,
        end: u64,
        period_ns: u64,
    ) {
        let client = self.client.take();
        let missed = std::mem::take(&mut self.missed);
        let prev_end = std::mem::replace(&mut self.prev_end_ns, end);
        if client.is_none() && !missed {
            return;
        }
        let mut ns = [None; STAGES];
        let nominal = lateness.map(|l| t0.saturating_sub(l));
        if let (Some(n), Some(l)) = (nominal, lateness) {
            // The part of the lateness the previous cycle's overrun explains is the
            // overhang's, not the timer's: each cycle's delay is counted in one stage.
            let over = prev_end.saturating_sub(n).min(l);
            ns[Stage::Overhang as usize] = Some(over);
            ns[Stage::Timer as usize] = Some(l - over);
        }
        if let Some((r, seen)) = client {
            ns[Stage::Pre as usize] = Some(r.signal_ns.saturating_sub(t0));
            // The client's stamps only where they fall between the thread's readings.
            let trusted = r.awake_ns != 0
                && r.signal_ns <= r.awake_ns
                && r.awake_ns <= r.finish_ns
                && r.finish_ns <= seen;
            if trusted {
                ns[Stage::Wake as usize] = Some(r.awake_ns - r.signal_ns);
                ns[Stage::Callback as usize] = Some(r.finish_ns - r.awake_ns);
                ns[Stage::Resume as usize] = Some(seen - r.finish_ns);
                if let Some(n) = nominal {
                    ns[Stage::CallbackLate as usize] = Some(r.awake_ns.saturating_sub(n));
                }
            }
            ns[Stage::Post as usize] = Some(end.saturating_sub(seen));
        }
        into.record(
            &CycleSample {
                ns,
                xrun: missed || overdue,
            },
            period_ns,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_have_eight_steps_per_power_of_two() {
        for ns in 0..8 {
            assert_eq!(stage_bucket(ns), ns as usize);
        }
        assert_eq!(stage_bucket(8), 8);
        assert_eq!(stage_bucket(15), 15);
        assert_eq!(stage_bucket(16), 16);
        assert_eq!(stage_bucket(17), 16);
        assert_eq!(stage_bucket(18), 17);
        for i in 0..STAGE_BUCKETS - 1 {
            let lo = stage_bucket_low(i);
            assert_eq!(stage_bucket(lo), i, "low end of {i}");
            assert_eq!(
                stage_bucket(stage_bucket_low(i + 1) - 1),
                i,
                "high end of {i}"
            );
            // 12.5 % resolution or better.
            let width = stage_bucket_low(i + 1) - lo;
            assert!(width * 8 <= lo.max(8), "bucket {i}: {lo} + {width}");
        }
        assert_eq!(stage_bucket(u64::MAX), STAGE_BUCKETS - 1);
        assert!(stage_bucket_low(STAGE_BUCKETS - 1) > 8_000_000_000);
    }

    #[test]
    fn a_cycle_is_split_into_its_stages() {
        use crate::rt::timing::RemoteTimes;
        let s = CycleStages::default();
        let period = 1_333_333;
        let mut c = StageClock::default();
        // A cycle due at 10 ms whose previous cycle ended at 10.5 ms; the thread ran
        // at 13 ms (3 ms late), signalled at 13.005, the client woke at 13.040,
        // finished at 13.740, the thread saw it at 13.790 and ended at 13.792.
        c.end_cycle(&s, 0, None, false, 10_500_000, period);
        c.collected(
            Some(RemoteTimes {
                signal_ns: 13_005_000,
                awake_ns: 13_040_000,
                finish_ns: 13_740_000,
            }),
            13_790_000,
            false,
        );
        c.end_cycle(&s, 13_000_000, Some(3_000_000), false, 13_792_000, period);
        let late = s.read(Class::Late);
        assert_eq!(late.cycles, 1);
        let sum = |st: Stage| late.sum_ns[st as usize];
        assert_eq!(sum(Stage::Overhang), 500_000);
        assert_eq!(sum(Stage::Timer), 2_500_000, "less the overhang");
        assert_eq!(sum(Stage::Pre), 5_000);
        assert_eq!(sum(Stage::Wake), 35_000);
        assert_eq!(sum(Stage::Callback), 700_000);
        assert_eq!(sum(Stage::Resume), 50_000);
        assert_eq!(sum(Stage::Post), 2_000);
        assert_eq!(sum(Stage::CallbackLate), 3_040_000);
        assert_eq!(late.dominant[Stage::Timer as usize], 1);
        // The first call had no client: nothing recorded for it.
        assert_eq!(s.read(Class::All).cycles, 1);
    }

    #[test]
    fn late_and_xrun_cycles_are_counted_apart_with_their_longest_stage() {
        let s = CycleStages::default();
        let period = 1_333_333;
        let mut ns = [Some(1_000); STAGES];
        ns[Stage::CallbackLate as usize] = Some(30_000);
        s.record(&CycleSample { ns, xrun: false }, period);
        ns[Stage::Timer as usize] = Some(3_000_000);
        ns[Stage::CallbackLate as usize] = Some(3_010_000);
        s.record(&CycleSample { ns, xrun: true }, period);
        let mut missed = [None; STAGES];
        missed[Stage::Post as usize] = Some(5_000);
        s.record(
            &CycleSample {
                ns: missed,
                xrun: true,
            },
            period,
        );
        let all = s.read(Class::All);
        assert_eq!(all.cycles, 3);
        assert_eq!(all.hist[Stage::Timer as usize].iter().sum::<u64>(), 2);
        assert_eq!(all.hist[Stage::Post as usize].iter().sum::<u64>(), 3);
        let late = s.read(Class::Late);
        assert_eq!(late.cycles, 1);
        assert_eq!(late.dominant[Stage::Timer as usize], 1);
        assert_eq!(late.sum_ns[Stage::Timer as usize], 3_000_000);
        let xrun = s.read(Class::Xrun);
        assert_eq!(xrun.cycles, 2);
        assert_eq!(xrun.dominant[Stage::Timer as usize], 1);
        assert_eq!(xrun.dominant[Stage::Post as usize], 1);
        assert_eq!(xrun.hist[Stage::Callback as usize].iter().sum::<u64>(), 1);
    }
}
