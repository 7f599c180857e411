//! Port latencies as JACK computes them for a client: what a port reports (ours, what
//! its owner published to the server, or a device's), jackd2's recomputation of our
//! ports from what they are connected to around the application's latency callback
//! (or its default action without one), and publishing our ports' ranges so that every
//! other client reads and propagates them, as jackd2's clients share the port table.

use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use quaver_client::quaver_protocol::message::{LatencyRange, Reply, Request};

use crate::client::{Callbacks, Client, owner};
use crate::graph::{GraphView, PortView};
use crate::port::Port;
use crate::types::*;

type Range = jack_latency_range_t;

/// Latency of a device port. A physical playback port's is the device's `lead` (what
/// it still holds when the driver wakes: the first sample a cycle writes waits that
/// long; one quantum `q` when the server does not say), a physical capture port's one
/// quantum (a cycle's first input sample was captured a quantum before), as a JACK
/// backend reports them; other ports nothing.
fn device_latency(flags: c_int, mode: c_int, lead: Option<u32>, q: u32) -> u32 {
    let physical = flags & JACK_PORT_IS_PHYSICAL != 0;
    let capture_side = flags & JACK_PORT_IS_OUTPUT != 0;
    match (physical, mode) {
        (true, JACK_CAPTURE_LATENCY) if capture_side => q,
        (true, JACK_PLAYBACK_LATENCY) if !capture_side => lead.unwrap_or(q),
        _ => 0,
    }
}

fn from_wire(r: LatencyRange) -> Range {
    Range {
        min: r.min,
        max: r.max,
    }
}

fn to_wire(r: Range) -> LatencyRange {
    LatencyRange {
        min: r.min,
        max: r.max,
    }
}

/// The range port `v` reports in `mode`: ours (`own`), else what its owner published,
/// else a device port's latency.
fn range_of(own: &[&Port], g: &GraphView, v: &PortView, mode: c_int, q: u32) -> Range {
    if let Some(o) = own.iter().find(|o| o.id == v.id) {
        return o.latency(mode);
    }
    if let Some(l) = g.latencies.get(&v.id) {
        return from_wire(if mode == JACK_PLAYBACK_LATENCY {
            l.playback
        } else {
            l.capture
        });
    }
    // A device port's range in the other direction (a capture port's playback
    // latency) is what its connections say, as jackd2's driver client recomputes it;
    // its peers are on the other side, so this goes one link deep.
    let own_mode = (mode == JACK_CAPTURE_LATENCY) == (v.flags & JACK_PORT_IS_OUTPUT != 0);
    if v.flags & JACK_PORT_IS_PHYSICAL != 0 && !own_mode {
        let peers = g.connections(&v.name);
        return span(
            peers
                .iter()
                .filter_map(|n| g.find(n))
                .filter(|w| w.flags & JACK_PORT_IS_OUTPUT != v.flags & JACK_PORT_IS_OUTPUT)
                .map(|w| range_of(own, g, w, mode, q)),
        );
    }
    let d = device_latency(v.flags, mode, v.playback_lead, q);
    Range { min: d, max: d }
}

/// `jack_port_get_latency_range` of a port that is not ours, read from the server now.
pub(crate) fn foreign_range_now(p: &Port, mode: c_int) -> Range {
    let c = owner(p);
    let q = c.map_or(0, |c| c.buffer_size.load(Ordering::Relaxed));
    let g = c.and_then(|c| c.graph());
    match g.as_ref().and_then(|g| Some((g, g.by_id(p.id)?))) {
        Some((g, v)) => range_of(&[], g, v, mode, q),
        None => {
            let d = device_latency(p.flags, mode, None, q);
            Range { min: d, max: d }
        }
    }
}

/// Smallest minimum and largest maximum of `ranges` (`{0, 0}` for none), as jackd2's
/// `RecalculateLatency` and default latency action combine them.
fn span(ranges: impl Iterator<Item = Range>) -> Range {
    let mut r = Range {
        min: u32::MAX,
        max: 0,
    };
    for o in ranges {
        r.min = r.min.min(o.min);
        r.max = r.max.max(o.max);
    }
    if r.min == u32::MAX {
        r.min = 0;
    }
    r
}

fn is_input(p: &Port) -> bool {
    p.flags & JACK_PORT_IS_INPUT != 0
}

/// This client's live ports, taken out of the lock: it is not held over the
/// application's latency callback, which may register ports.
fn live_ports(c: &Client) -> Vec<&Port> {
    let ptrs: Vec<*const Port> = c
        .own_ports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|p| p.alive.load(Ordering::Relaxed))
        .map(|p| &**p as *const Port)
        .collect();
    // SAFETY: port objects are never freed before their client closes.
    ptrs.iter().map(|&p| unsafe { &*p }).collect()
}

/// One latency pass over this client's ports, as jackd2's `HandleLatencyCallback`: for
/// each mode (capture, then playback), the ports on the side that mode flows into
/// (inputs for capture, outputs for playback) get the span of what they are connected
/// to, then the application's callback runs, or without one the span of those ports
/// is set on the other side's. Then what changed is published to the server.
pub(crate) fn run_pass(c: &Client, cbs: &Callbacks) {
    let Some(g) = c.graph() else { return };
    let q = c.buffer_size.load(Ordering::Relaxed);
    let live = live_ports(c);
    for mode in [JACK_CAPTURE_LATENCY, JACK_PLAYBACK_LATENCY] {
        let into = |p: &Port| is_input(p) == (mode == JACK_CAPTURE_LATENCY);
        for p in live.iter().filter(|p| into(p)) {
            let peers = g.connections(p.name());
            let r = span(
                peers
                    .iter()
                    .filter_map(|n| g.find(n))
                    .map(|v| range_of(&live, &g, v, mode, q)),
            );
            p.set_latency(mode, r);
        }
        if let (Some(f), arg) = cbs.latency {
            // SAFETY: the application's callback with its own argument.
            unsafe { f(mode, arg.0) };
        } else {
            let r = span(live.iter().filter(|p| into(p)).map(|p| p.latency(mode)));
            for p in live.iter().filter(|p| !into(p)) {
                p.set_latency(mode, r);
            }
        }
    }
    publish_ports(c, &live);
}

/// Publishes this client's ports' ranges that changed since they were last published.
pub(crate) fn publish(c: &Client) {
    publish_ports(c, &live_ports(c));
}

fn publish_ports(c: &Client, live: &[&Port]) {
    for p in live {
        let bits = p.latency_bits();
        let mut last = p.published.lock().unwrap_or_else(|e| e.into_inner());
        if *last == Some(bits) {
            continue;
        }
        let req = Request::SetPortLatency {
            port: p.id,
            capture: to_wire(p.latency(JACK_CAPTURE_LATENCY)),
            playback: to_wire(p.latency(JACK_PLAYBACK_LATENCY)),
        };
        match c.conn().request(req) {
            Ok((Reply::Ok, _)) => *last = Some(bits),
            Ok((Reply::Error { message, .. }, _)) => crate::error(&format!(
                "cannot publish the latency of {}: {message}",
                p.name()
            )),
            Ok(_) => crate::error("unexpected answer to set_port_latency"),
            Err(e) => crate::error(&format!("cannot publish the latency of {}: {e}", p.name())),
        }
    }
}

/// Latency passes other clients' published changes may start per second. Every pass
/// publishes only what changed, so propagation along a chain ends after as many passes
/// as the chain is long; a loop through clients that each add latency (two
/// `jack_latent_client`s in a ring) would grow without end, as it grows on jackd2 at
/// every recomputation: this bound keeps such a loop from keeping the clients busy.
const PASSES_PER_SECOND: u32 = 32;

/// The passes left to `latency` events in the current second.
pub(crate) struct PassBudget {
    left: u32,
    since: Instant,
}

impl PassBudget {
    /// A full budget.
    pub(crate) fn new() -> PassBudget {
        PassBudget {
            left: PASSES_PER_SECOND,
            since: Instant::now(),
        }
    }

    /// True if another pass may run now.
    pub(crate) fn take(&mut self) -> bool {
        if self.since.elapsed() >= Duration::from_secs(1) {
            *self = PassBudget::new();
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_take_the_smallest_min_and_the_largest_max() {
        let r = |min, max| Range { min, max };
        let s = span([r(64, 64), r(0, 0), r(10, 128)].into_iter());
        assert_eq!((s.min, s.max), (0, 128));
        let none = span(std::iter::empty());
        assert_eq!((none.min, none.max), (0, 0));
    }

    #[test]
    fn device_ports_report_the_lead_and_one_quantum() {
        let play = JACK_PORT_IS_INPUT | JACK_PORT_IS_PHYSICAL;
        let capt = JACK_PORT_IS_OUTPUT | JACK_PORT_IS_PHYSICAL;
        assert_eq!(
            device_latency(play, JACK_PLAYBACK_LATENCY, Some(256), 64),
            256
        );
        assert_eq!(device_latency(play, JACK_PLAYBACK_LATENCY, None, 64), 64);
        assert_eq!(device_latency(capt, JACK_CAPTURE_LATENCY, None, 64), 64);
        assert_eq!(device_latency(capt, JACK_PLAYBACK_LATENCY, None, 64), 0);
        assert_eq!(
            device_latency(JACK_PORT_IS_OUTPUT, JACK_CAPTURE_LATENCY, None, 64),
            0
        );
    }

    #[test]
    fn the_pass_budget_runs_out_within_a_second() {
        let mut b = PassBudget::new();
        assert_eq!(
            (0..100).filter(|_| b.take()).count(),
            PASSES_PER_SECOND as usize
        );
        b.since -= Duration::from_secs(1);
        assert!(b.take(), "a new second gives a new budget");
    }
}
