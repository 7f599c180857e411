//! Introspection: server, sinks, sources, streams, clients, modules, lookups, STAT
//! (cards: `crate::cards`).

use super::Reply;
use crate::conn::Conn;
use crate::state::Server;
use crate::wire::convert::cstr;
use pulseaudio::protocol::{
    self as pa, LookupReply, PulseError, SampleFormat, SampleSpec, StatInfo,
};
use quaver_engine::NodeKind;

impl Conn {
    /// STAT.
    pub(crate) fn stat(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let cache: u32 = srv.lock().samples.values().map(|s| s.bytes).sum();
        let m = srv.mem.read();
        let wire = |n: u64| n.min(u32::MAX as u64) as u32;
        self.out().reply(
            seq,
            &StatInfo {
                memblock_total: wire(m.live_blocks),
                memblock_total_size: wire(m.live_bytes),
                memblock_allocated: wire(m.total_blocks),
                memblock_allocated_size: wire(m.total_bytes),
                sample_cache_size: cache,
            },
        );
        Ok(())
    }

    /// GET_SERVER_INFO.
    pub(crate) fn get_server_info(&mut self, seq: u32) -> Reply {
        let info = self.server_info();
        self.out().reply(seq, &info);
        Ok(())
    }

    /// GET_SINK_INFO.
    pub(crate) fn get_sink_info(&mut self, seq: u32, q: pa::GetSinkInfo) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let dev = srv
            .find_sink(
                &snap.graph,
                q.index,
                q.name.as_ref().and_then(|n| n.to_str().ok()),
            )
            .ok_or(PulseError::NoEntity)?;
        let info = srv.sink_info(&snap, &srv.lock(), &snap.graph.nodes[&dev.node]);
        self.out().reply(seq, &info);
        Ok(())
    }

    /// GET_SINK_INFO_LIST.
    pub(crate) fn get_sink_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let list = srv.sink_list(&snap, &srv.lock());
        self.out().reply(seq, &list);
        Ok(())
    }

    /// GET_SOURCE_INFO.
    pub(crate) fn get_source_info(&mut self, seq: u32, q: pa::GetSourceInfo) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let dev = srv
            .find_source(
                &snap.graph,
                q.index,
                q.name.as_ref().and_then(|n| n.to_str().ok()),
            )
            .ok_or(PulseError::NoEntity)?;
        let info = srv
            .source_info(&snap, &srv.lock(), &dev)
            .ok_or(PulseError::NoEntity)?;
        let version = self.version;
        self.out().reply_with(seq, |w| {
            let _ = crate::cards::write_source_info(w, &info, version);
        });
        Ok(())
    }

    /// GET_SOURCE_INFO_LIST.
    pub(crate) fn get_source_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let list = srv.source_list(&snap, &srv.lock());
        let version = self.version;
        self.out().reply_with(seq, |w| {
            for info in &list {
                let _ = crate::cards::write_source_info(w, info, version);
            }
        });
        Ok(())
    }

    /// GET_SINK_INPUT_INFO.
    pub(crate) fn get_sink_input_info(&mut self, seq: u32, idx: u32) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let node = Server::stream_node(&snap, idx, NodeKind::PlaybackStream)
            .ok_or(PulseError::NoEntity)?;
        let info = srv.sink_input_info(&snap, &srv.lock(), node);
        self.out().reply(seq, &info);
        Ok(())
    }

    /// GET_SINK_INPUT_INFO_LIST.
    pub(crate) fn get_sink_input_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let list = srv.sink_input_list(&snap, &srv.lock());
        self.out().reply(seq, &list);
        Ok(())
    }

    /// GET_SOURCE_OUTPUT_INFO.
    pub(crate) fn get_source_output_info(&mut self, seq: u32, idx: u32) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let node =
            Server::stream_node(&snap, idx, NodeKind::RecordStream).ok_or(PulseError::NoEntity)?;
        let info = srv.source_output_info(&snap, &srv.lock(), node);
        self.out().reply(seq, &info);
        Ok(())
    }

    /// GET_SOURCE_OUTPUT_INFO_LIST.
    pub(crate) fn get_source_output_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let snap = srv.snapshot();
        let list = srv.source_output_list(&snap, &srv.lock());
        self.out().reply(seq, &list);
        Ok(())
    }

    /// GET_CLIENT_INFO.
    pub(crate) fn get_client_info(&mut self, seq: u32, idx: u32) -> Reply {
        let srv = self.srv.clone();
        let info = srv
            .client_info(&srv.lock(), idx)
            .ok_or(PulseError::NoEntity)?;
        self.out().reply(seq, &info);
        Ok(())
    }

    /// GET_CLIENT_INFO_LIST.
    pub(crate) fn get_client_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let list = srv.client_list(&srv.lock());
        self.out().reply(seq, &list);
        Ok(())
    }

    /// GET_MODULE_INFO.
    pub(crate) fn get_module_info(&mut self, seq: u32, idx: u32) -> Reply {
        let srv = self.srv.clone();
        let list = srv.module_list(&srv.lock());
        let m = list
            .into_iter()
            .find(|m| m.index == idx)
            .ok_or(PulseError::NoEntity)?;
        self.out().reply(seq, &m);
        Ok(())
    }

    /// GET_MODULE_INFO_LIST.
    pub(crate) fn get_module_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let list = srv.module_list(&srv.lock());
        self.out().reply(seq, &list);
        Ok(())
    }

    /// LOOKUP_SINK.
    pub(crate) fn lookup_sink(&mut self, seq: u32, name: std::ffi::CString) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let d = srv
            .sink_by_name(&graph, name.to_str().unwrap_or(""))
            .ok_or(PulseError::NoEntity)?;
        self.out().reply(seq, &LookupReply(d.index));
        Ok(())
    }

    /// LOOKUP_SOURCE.
    pub(crate) fn lookup_source(&mut self, seq: u32, name: std::ffi::CString) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let d = srv
            .source_by_name(&graph, name.to_str().unwrap_or(""))
            .ok_or(PulseError::NoEntity)?;
        self.out().reply(seq, &LookupReply(d.index));
        Ok(())
    }

    pub(crate) fn server_info(&self) -> pa::ServerInfo {
        let snap = self.srv.snapshot();
        let sink = snap.default_sink.as_ref();
        let channels = sink
            .and_then(|d| snap.graph.nodes.get(&d.node))
            .map(|n| {
                quaver_dsp::ChannelMap(
                    n.inputs
                        .iter()
                        .map(|p| snap.graph.ports[p].channel)
                        .collect(),
                )
            })
            .unwrap_or_else(quaver_dsp::ChannelMap::stereo);
        let user = std::env::var("USER").unwrap_or_else(|_| "quaver".into());
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        pa::ServerInfo {
            server_name: Some(cstr("pulseaudio")),
            server_version: Some(cstr(&format!(
                "16.1.0 (quaver {})",
                env!("CARGO_PKG_VERSION")
            ))),
            user_name: Some(cstr(&user)),
            host_name: Some(cstr(&host)),
            sample_spec: SampleSpec {
                format: SampleFormat::Float32Le,
                channels: channels.len().clamp(1, 32) as u8,
                sample_rate: snap.rate,
            },
            cookie: self.srv.cookie,
            default_sink_name: snap.default_sink.as_ref().map(|d| cstr(&d.name)),
            default_source_name: snap.default_source.as_ref().map(|d| cstr(&d.name)),
            channel_map: crate::wire::convert::map_to_pa(&channels),
        }
    }
}
