//! Modules, extensions (stream and device restore) and object messages.

use super::Reply;
use crate::conn::Conn;
use crate::io::shared::ConnMsg;
use crate::wire::convert::cstr;
use pulseaudio::protocol::{
    self as pa, ChannelMap as PaMap, ChannelVolume, CommandTag, PulseError,
    SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use quaver_engine::NodeKind;
use std::sync::atomic::Ordering::Relaxed;

impl Conn {
    /// SEND_OBJECT_MESSAGE (see [`object_message`]).
    pub(crate) fn send_object_message(
        &mut self,
        seq: u32,
        path: Option<String>,
        message: Option<String>,
    ) -> Reply {
        let response = object_message(
            path.as_deref().ok_or(PulseError::Invalid)?,
            message.as_deref().ok_or(PulseError::Invalid)?,
        )?;
        let response = std::ffi::CString::new(response).map_err(|_| PulseError::Internal)?;
        self.out()
            .reply_with(seq, |ts| ts.write_string(Some(&response)).expect("vec"));
        Ok(())
    }

    /// LOAD_MODULE. A tunnel's is answered once it is up ([`Conn::module_loaded`]):
    /// its network thread connects while this thread goes on serving every client.
    pub(crate) fn load_module(&mut self, seq: u32, p: pa::LoadModuleParams) -> Reply {
        let handle = self.handle.clone();
        let done: crate::modules::LoadDone =
            Box::new(move |r| handle.post(ConnMsg::ModuleLoaded(seq, r)));
        match self.load_named_module(&p, done)? {
            crate::modules::Loading::Now(idx) => self.module_loaded(seq, Ok(idx)),
            crate::modules::Loading::Later => {}
        }
        Ok(())
    }

    /// Answers LOAD_MODULE `seq`: the module's index, or the error.
    pub(crate) fn module_loaded(&mut self, seq: u32, r: Result<u32, PulseError>) {
        match r {
            Ok(idx) => self.out().reply_with(seq, |ts| {
                ts.write_u32(idx).expect("vec");
            }),
            Err(e) => self.out().error(seq, e),
        }
    }

    /// UNLOAD_MODULE.
    pub(crate) fn unload_module(&mut self, seq: u32, idx: u32) -> Reply {
        self.unload_module_at(idx)?;
        self.out().ack(seq);
        Ok(())
    }

    pub(crate) fn load_named_module(
        &self,
        p: &pa::LoadModuleParams,
        done: crate::modules::LoadDone,
    ) -> Result<crate::modules::Loading, PulseError> {
        let srv = &self.srv;
        let name = p.name.to_str().map_err(|_| PulseError::Invalid)?;
        let argument = p
            .arguments
            .as_ref()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        crate::modules::load_or_start(srv, name, &argument, done)
    }

    pub(crate) fn unload_module_at(&self, idx: u32) -> Reply {
        let srv = &self.srv;
        let m = srv
            .lock()
            .modules
            .remove(&idx)
            .ok_or(PulseError::NoEntity)?;
        crate::modules::unload(srv, &m);
        srv.broadcast(Fac::Module, Ev::Removed, idx);
        tracing::info!("pulse: unloaded module #{idx} ({})", m.name);
        Ok(())
    }

    /// An extension's event to this client: EXTENSION from the server, addressed by the
    /// module's index and name, then the extension's words (its EVENT subcommand first).
    pub(crate) fn extension_event(&mut self, module: u32, name: &str, words: &[u32]) {
        self.out().command_with(CommandTag::Extension as u32, |ts| {
            ts.write_u32(module).expect("vec");
            ts.write_string(Some(cstr(name))).expect("vec");
            for &w in words {
                ts.write_u32(w).expect("vec");
            }
        })
    }

    /// EXTENSION module-device-restore ([`crate::ext::devrestore`]): every sink takes PCM,
    /// and only PCM.
    pub(crate) fn device_restore(&mut self, seq: u32, payload: &[u8]) -> Reply {
        use crate::ext::devrestore::{self as dr, Request};
        let req = Request::parse(payload, self.version).map_err(|e| {
            tracing::debug!("pulse client {}: device restore: {e}", self.client);
            e.pulse()
        })?;
        let graph = self.srv.engine.graph();
        let write_sink = |ts: &mut pa::TagStructWriter<'_>, index: u32| {
            let formats = dr::sink_formats();
            ts.write_u32(dr::TYPE_SINK).expect("vec");
            ts.write_u32(index).expect("vec");
            ts.write_u8(formats.len() as u8).expect("vec");
            for f in formats {
                ts.write(f).expect("vec");
            }
        };
        // As PulseAudio's module, formats are kept for sinks only.
        let sink = |kind: u32, index: u32| {
            if kind != dr::TYPE_SINK {
                return Err(PulseError::NotSupported);
            }
            self.srv
                .find_sink(&graph, Some(index), None)
                .map(|d| d.index)
                .ok_or(PulseError::NoEntity)
        };
        match req {
            Request::Test => self
                .out()
                .reply_with(seq, |ts| ts.write_u32(dr::VERSION).expect("vec")),
            Request::Subscribe(on) => {
                self.handle.device_restore_events.store(on, Relaxed);
                self.out().ack(seq);
            }
            Request::ReadAll => {
                let sinks: Vec<u32> = (graph.nodes.values())
                    .filter(|n| n.kind == NodeKind::DeviceSink)
                    .map(|n| n.id)
                    .collect();
                self.out().reply_with(seq, |ts| {
                    for i in sinks {
                        write_sink(ts, i);
                    }
                });
            }
            Request::Read(kind, index) => {
                let i = sink(kind, index)?;
                self.out().reply_with(seq, |ts| write_sink(ts, i));
            }
            Request::Save(kind, index, formats) => {
                let i = sink(kind, index)?;
                if !dr::takes(&formats) {
                    tracing::info!(
                        "pulse client {}: sink {i} cannot take {:?}: quaverd plays PCM only (no passthrough)",
                        self.client,
                        formats.iter().map(|f| f.encoding).collect::<Vec<_>>()
                    );
                    return Err(PulseError::NotSupported);
                }
                self.out().ack(seq);
                self.srv
                    .post_all(ConnMsg::DeviceRestoreEvent(dr::TYPE_SINK, i));
            }
        }
        Ok(())
    }

    /// EXTENSION: stream restore's protocol, or device restore's (above).
    pub(crate) fn extension(&mut self, seq: u32, payload: &[u8]) -> Reply {
        use crate::ext::restore::{self, Request};
        let bad = |e: restore::RequestError| {
            tracing::debug!("pulse client {}: extension: {e}", self.client);
            e.pulse()
        };
        let (index, name, at) = restore::split_target(payload).map_err(bad)?;
        // Exactly one of index and name, as PulseAudio requires.
        if index.is_some() == name.is_some() {
            return Err(PulseError::Invalid);
        }
        let addressed = |module: u32, module_name: &str| {
            index == Some(module) || name.as_deref() == Some(module_name)
        };
        if addressed(
            crate::modules::DEVICE_RESTORE_MODULE,
            crate::ext::devrestore::MODULE_NAME,
        ) {
            return self.device_restore(seq, &payload[at..]);
        }
        let ours = addressed(crate::modules::RESTORE_MODULE, restore::MODULE_NAME);
        let srv = self.srv.clone();
        let Some(store) = srv.restore.as_ref().filter(|_| ours) else {
            return Err(PulseError::NoExtension);
        };
        let lock = || {
            store
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        match Request::parse(&payload[at..]).map_err(bad)? {
            Request::Test => self
                .out()
                .reply_with(seq, |ts| ts.write_u32(restore::VERSION).expect("vec")),
            Request::Read => {
                let entries = lock().entries().clone();
                self.out().reply_with(seq, |ts| {
                    for (name, e) in &entries {
                        let (map, vol) = e
                            .volume
                            .as_ref()
                            .map(restore::volume_to_pa)
                            .unwrap_or((PaMap::empty(), ChannelVolume::empty()));
                        ts.write_string(Some(cstr(name))).expect("vec");
                        ts.write(map).expect("vec");
                        ts.write(vol).expect("vec");
                        ts.write_string(e.device.as_deref().map(cstr)).expect("vec");
                        ts.write_bool(e.mute.unwrap_or(false)).expect("vec");
                    }
                });
            }
            Request::Write(mode, apply, entries) => {
                let stored = lock().write(mode, entries).map_err(restore::store_error)?;
                if apply {
                    srv.apply_restore(&stored);
                }
                self.out().ack(seq);
                srv.restore_changed();
            }
            Request::Delete(names) => {
                lock().delete(&names);
                self.out().ack(seq);
                srv.restore_changed();
            }
            Request::Subscribe(on) => {
                self.handle
                    .restore_events
                    .store(on, std::sync::atomic::Ordering::Relaxed);
                self.out().ack(seq);
            }
        }
        Ok(())
    }
}

/// The message handlers quaverd has (PulseAudio's message API: `pactl send-message`,
/// `pactl list message-handlers`): object path and description.
const MESSAGE_HANDLERS: [(&str, &str); 1] = [("/core", "Core message handler")];

/// Answers SEND_OBJECT_MESSAGE for `path` as PulseAudio 16's handlers do: a JSON
/// response (`list-handlers`: an array of `{"name", "description"}` objects, which
/// pactl parses), NOENTITY for an object without a handler, NOTIMPLEMENTED for a message
/// it does not know.
fn object_message(path: &str, message: &str) -> Result<String, PulseError> {
    if !MESSAGE_HANDLERS.iter().any(|(p, _)| *p == path) {
        return Err(PulseError::NoEntity);
    }
    match message {
        "list-handlers" => {
            // Fields in PulseAudio's order (a struct keeps it; a JSON map would sort).
            #[derive(serde::Serialize)]
            struct Handler<'a> {
                name: &'a str,
                description: &'a str,
            }
            let list: Vec<Handler<'_>> = MESSAGE_HANDLERS
                .iter()
                .map(|&(name, description)| Handler { name, description })
                .collect();
            serde_json::to_string(&list).map_err(|_| PulseError::Internal)
        }
        _ => Err(PulseError::NotImplemented),
    }
}
