//! The notification thread: calls the application's non-real-time callbacks (port
//! connections and registrations, graph order, latency, xruns, property changes) and
//! notices when the
//! server goes away (shutdown callbacks). It blocks on an eventfd and on the control
//! socket's hangup, so an idle client makes no periodic wakeups.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use quaver_client::GraphWatcher;
use quaver_client::quaver_protocol::message::PropertyChange;
use rustix::event::{PollFd, PollFlags};

use crate::client::{Callbacks, Client};
use crate::graph::GraphView;
use crate::notify::Note;
use crate::types::*;

/// The thread body. `watcher`, when the server supports it, delivers graph changes
/// made by anyone, reported against `seen` (the graph when the client opened);
/// without it only this client's own changes are reported.
pub(crate) fn run(
    client: &Client,
    hangup: OwnedFd,
    mut watcher: Option<GraphWatcher>,
    mut seen: Option<GraphView>,
) {
    let n = &*client.notifier;
    let mut budget = crate::latency::PassBudget::new();
    loop {
        let (hung_up, watch_ready) = {
            let mut fds = vec![
                PollFd::new(&n.bell, PollFlags::IN),
                PollFd::new(&hangup, PollFlags::RDHUP),
            ];
            if let Some(w) = &watcher {
                fds.push(PollFd::new(w, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
            (
                !fds[1].revents().is_empty(),
                fds.get(2).is_some_and(|f| !f.revents().is_empty()),
            )
        };
        n.bell.drain();
        if n.stop.load(Ordering::Acquire) {
            return;
        }
        let mut notes: Vec<Note> = n
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        let mut properties = Vec::new();
        let mut sessions = Vec::new();
        if watch_ready && let Some(w) = watcher.as_mut() {
            // Take every queued event; one graph comparison covers them all.
            let mut changed = false;
            let mut latency = false;
            loop {
                match w.next_event(Some(std::time::Duration::ZERO)) {
                    Ok(Some(e)) if e.property.is_some() => properties.extend(e.property),
                    Ok(Some(e)) if e.event == "latency" => latency = true,
                    Ok(Some(e)) if e.event == "session" => {
                        if e.node == Some(client.node) {
                            sessions.extend(e.session);
                        }
                    }
                    Ok(Some(e)) => changed |= e.event != "suspended" && e.event != "resumed",
                    Ok(None) => break,
                    Err(_) => {
                        watcher = None;
                        break;
                    }
                }
            }
            if changed {
                notes.push(Note::GraphChanged);
            }
            // Another client published new ranges: ours may depend on them.
            if latency && !notes.contains(&Note::Latency) && budget.take() {
                notes.push(Note::Latency);
            }
        }
        let cbs = *client.callbacks();
        for note in notes {
            match note {
                Note::GraphChanged => graph_changed(client, &cbs, &mut seen),
                // This client's own changes are reported at once, and recorded in the
                // snapshot so that the server's event for them is not reported again
                // (or, if that event came first, they are not reported twice).
                Note::PortConnect(a, b, on) if !record_link(&mut seen, a, b, on) => {}
                Note::PortRegistration(id, on) if !record_port(client, &mut seen, id, on) => {}
                _ => deliver(client, &cbs, note),
            }
        }
        if let (Some(f), a) = cbs.property_change {
            for p in properties {
                let key = p.key.and_then(|k| CString::new(k).ok());
                let kp = key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr());
                // SAFETY: the application's callback with its own argument.
                unsafe { f(p.subject, kp, change_code(p.change), a.0) };
            }
        }
        for ev in sessions {
            crate::api_session::deliver(client, &cbs, ev);
        }
        if n.freewheel.swap(false, Ordering::AcqRel) {
            crate::process::follow_freewheel(client);
        }
        if n.xrun.swap(false, Ordering::AcqRel)
            && let (Some(f), a) = cbs.xrun
        {
            // SAFETY: the application's callback with its own argument.
            unsafe { f(a.0) };
        }
        if hung_up || n.gone.load(Ordering::Acquire) {
            shutdown(client, &cbs, "quaverd closed the connection");
            return;
        }
    }
}

/// JACK's `jack_property_change_t` (`PropertyCreated`, `PropertyChanged`,
/// `PropertyDeleted`) for a server change.
fn change_code(c: PropertyChange) -> std::ffi::c_int {
    match c {
        PropertyChange::Created => 0,
        PropertyChange::Changed => 1,
        PropertyChange::Deleted => 2,
    }
}

/// Applies a link change of our own to the snapshot; false if it already shows it.
fn record_link(seen: &mut Option<GraphView>, a: u32, b: u32, on: bool) -> bool {
    let Some(g) = seen.as_mut() else { return true };
    let (Some(o), Some(i)) = (g.by_id(a), g.by_id(b)) else {
        return true;
    };
    let (o, i) = (o.name.clone(), i.name.clone());
    if g.linked(&o, &i) == on {
        return false;
    }
    if on {
        g.links.push((o, i));
    } else {
        g.links.retain(|(x, y)| !(x == &o && y == &i));
    }
    true
}

/// Applies a port (un)registration of our own to the snapshot; false if it already
/// shows it.
fn record_port(client: &Client, seen: &mut Option<GraphView>, id: u32, on: bool) -> bool {
    let Some(g) = seen.as_mut() else { return true };
    if g.by_id(id).is_some() == on {
        return false;
    }
    if on {
        let Some(p) = client.own_port_by_id(id) else {
            return true;
        };
        // SAFETY: port objects live until the client closes.
        let p = unsafe { &*p };
        g.ports.push(crate::graph::PortView {
            id,
            name: p.name().to_string(),
            node: client.name_str().to_string(),
            short: p.short_name.to_string_lossy().into_owned(),
            flags: p.flags,
            aliases: Vec::new(),
            playback_lead: None,
            midi: p.kind == crate::port::PortKind::Midi,
        });
    } else {
        g.ports.retain(|p| p.id != id);
    }
    true
}

/// Reports what changed since the last snapshot, as jackd2 tells every client.
fn graph_changed(client: &Client, cbs: &Callbacks, seen: &mut Option<GraphView>) {
    let Some(now) = client.graph() else { return };
    let Some(old) = seen.replace(now) else { return };
    let now = seen.as_ref().expect("just set");
    let ch = now.diff(&old);
    // SAFETY (all calls below): the application's callbacks with its own arguments.
    for (name, on) in &ch.clients {
        if let (Some(f), arg) = cbs.client_registration {
            let c = CString::new(name.as_str()).unwrap_or_default();
            unsafe { f(c.as_ptr(), *on as i32, arg.0) };
        }
    }
    let relinked = !ch.links.is_empty() || !ch.clients.is_empty();
    // Latencies first: when the application's port-connect callback runs, its ports'
    // ranges already follow the new graph, and a range it sets from then on is not
    // overwritten by this change's recomputation (jackd2 recomputes synchronously
    // before jack_connect/jack_disconnect return).
    if relinked {
        deliver(client, cbs, Note::Latency);
    }
    for &(id, on) in &ch.ports {
        deliver(client, cbs, Note::PortRegistration(id, on));
    }
    for &(a, b, on) in &ch.links {
        deliver(client, cbs, Note::PortConnect(a, b, on));
    }
    if relinked {
        deliver(client, cbs, Note::GraphOrder);
    }
}

fn deliver(client: &Client, cbs: &Callbacks, note: Note) {
    // SAFETY (all calls below): the application's callbacks with its own arguments.
    match note {
        Note::PortConnect(a, b, on) => {
            if let (Some(f), arg) = cbs.port_connect {
                unsafe { f(a, b, on as i32, arg.0) };
            }
        }
        Note::PortRegistration(id, on) => {
            if let (Some(f), arg) = cbs.port_registration {
                unsafe { f(id, on as i32, arg.0) };
            }
        }
        Note::GraphOrder => {
            if let (Some(f), arg) = cbs.graph_order {
                unsafe { f(arg.0) };
            }
        }
        Note::GraphChanged => {}
        Note::Latency => crate::latency::run_pass(client, cbs),
        Note::PublishLatency => crate::latency::publish(client),
    }
}

/// Runs the shutdown callbacks once.
pub(crate) fn shutdown(client: &Client, cbs: &Callbacks, why: &str) {
    if client.notifier.shut_down.swap(true, Ordering::AcqRel) {
        return;
    }
    client.active.store(false, Ordering::Release);
    crate::error(why);
    let reason = CString::new(why).unwrap_or_default();
    // SAFETY: the application's callbacks with their own arguments.
    unsafe {
        if let (Some(f), arg) = cbs.info_shutdown {
            f(JACK_FAILURE | JACK_SERVER_ERROR, reason.as_ptr(), arg.0);
        } else if let (Some(f), arg) = cbs.shutdown {
            f(arg.0);
        }
    }
}
