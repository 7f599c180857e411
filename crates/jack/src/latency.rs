//! Port latencies as JACK computes them for a client: what a port that is not ours
//! reports, and the defaults set on our own ports before the latency callback.

use std::ffi::c_int;
use std::sync::atomic::Ordering;

use crate::client::{Client, owner};
use crate::port::{Port, PortKind};
use crate::types::*;

/// Latency of a port that is not ours. A physical playback port's is the device's
/// `lead` (what it still holds when the driver wakes: the first sample a cycle writes
/// waits that long; one quantum when the server does not say), a physical capture
/// port's one quantum (a cycle's first input sample was captured a quantum before), as
/// a JACK backend reports them; others nothing known.
pub(crate) fn foreign_latency(p: &Port, mode: c_int, lead: Option<u32>) -> u32 {
    let q = owner(p).map_or(0, |c| c.buffer_size.load(Ordering::Relaxed));
    let physical = p.flags & JACK_PORT_IS_PHYSICAL != 0;
    let capture_side = p.flags & JACK_PORT_IS_OUTPUT != 0;
    match (physical, mode) {
        (true, JACK_CAPTURE_LATENCY) if capture_side => q,
        (true, JACK_PLAYBACK_LATENCY) if !capture_side => lead.unwrap_or(q),
        _ => 0,
    }
}

/// [`foreign_latency`], asking the server for a physical playback port's lead.
pub(crate) fn foreign_latency_now(p: &Port, mode: c_int) -> u32 {
    let playback = p.flags & (JACK_PORT_IS_PHYSICAL | JACK_PORT_IS_INPUT)
        == JACK_PORT_IS_PHYSICAL | JACK_PORT_IS_INPUT;
    let lead = if playback && mode == JACK_PLAYBACK_LATENCY {
        owner(p)
            .and_then(|c| c.graph())
            .and_then(|g| g.by_id(p.id).and_then(|v| v.playback_lead))
    } else {
        None
    };
    foreign_latency(p, mode, lead)
}

/// Before the application's latency callback: sets our ports' latencies from what they
/// are connected to (inputs: capture latency; outputs: playback latency) and, as JACK
/// does for clients without a latency callback, carries them across the client.
pub(crate) fn default_latencies(c: &Client) {
    let Some(g) = c.graph() else { return };
    let own = c.own_ports.lock().unwrap_or_else(|e| e.into_inner());
    let live: Vec<&Port> = own
        .iter()
        .filter(|p| p.alive.load(Ordering::Relaxed))
        .map(|p| &**p)
        .collect();
    let far = |p: &Port, mode: c_int| -> u32 {
        g.connections(p.name())
            .iter()
            .filter_map(|n| g.find(n))
            .map(|v| {
                let probe = Port::foreign(
                    (c as *const Client).cast(),
                    v.id,
                    &v.name,
                    &v.short,
                    v.flags,
                    if v.midi {
                        PortKind::Midi
                    } else {
                        PortKind::Audio
                    },
                );
                let own_match = live.iter().find(|o| o.id == v.id);
                match own_match {
                    Some(o) => o.latency(mode).max,
                    None => foreign_latency(&probe, mode, v.playback_lead),
                }
            })
            .max()
            .unwrap_or(0)
    };
    let mut in_capture = 0;
    let mut out_playback = 0;
    for p in &live {
        if p.flags & JACK_PORT_IS_INPUT != 0 {
            let l = far(p, JACK_CAPTURE_LATENCY);
            in_capture = in_capture.max(l);
            p.set_latency(
                JACK_CAPTURE_LATENCY,
                jack_latency_range_t { min: l, max: l },
            );
        } else {
            let l = far(p, JACK_PLAYBACK_LATENCY);
            out_playback = out_playback.max(l);
            p.set_latency(
                JACK_PLAYBACK_LATENCY,
                jack_latency_range_t { min: l, max: l },
            );
        }
    }
    let has_callback = c.callbacks().latency.0.is_some();
    if !has_callback {
        for p in &live {
            if p.flags & JACK_PORT_IS_INPUT != 0 {
                let r = jack_latency_range_t {
                    min: out_playback,
                    max: out_playback,
                };
                p.set_latency(JACK_PLAYBACK_LATENCY, r);
            } else {
                let r = jack_latency_range_t {
                    min: in_capture,
                    max: in_capture,
                };
                p.set_latency(JACK_CAPTURE_LATENCY, r);
            }
        }
    }
}
