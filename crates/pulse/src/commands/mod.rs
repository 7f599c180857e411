//! Commands from a client: a control packet is checked ([`tagcheck`]), decoded by the
//! codec (or read here for the few it does not read: [`Conn::manual`]) and dispatched
//! by [`Conn::handle_cmd`], one line per command, to a method named after it in the
//! file of its group:
//!
//! - `auth`: AUTH, the client's name and proplist, SUBSCRIBE, memfd and srbchannel.
//! - `stream`: CREATE_PLAYBACK_STREAM / CREATE_RECORD_STREAM, through one prologue;
//!   `stream_rules`: where a new stream goes and what the rule file gives it.
//! - `stream_ctl`: everything on an open stream (delete, drain, cork, flush, latency,
//!   buffer attributes, names, proplists, rate).
//! - `introspect`: the GET_*_INFO commands, lookups, STAT.
//! - `control`: defaults, volumes, mutes, suspend, move, kill, EXIT.
//! - `modules`: LOAD/UNLOAD_MODULE, extensions, object messages.
//! - `sample`: the sample cache.
//!
//! The commands are methods of [`Conn`] so that `conn/` never names this folder: the
//! connection calls in only through [`Conn::on_control`].

use crate::conn::Conn;
use crate::wire::tagcheck;
use pulseaudio::protocol::props::PropsUpdateMode;
use pulseaudio::protocol::{self as pa, Command, CommandTag, Props, PulseError, TagStructReader};
use quaver_engine::{EngineError, NodeKind};
use std::io::Cursor;

mod auth;
mod control;
mod introspect;
mod modules;
mod sample;
mod stream;
mod stream_ctl;
mod stream_rules;

/// What a command's handler returns: `Err` is sent to the client as an ERROR reply.
pub(crate) type Reply = Result<(), PulseError>;

/// A latency in µs as a node's latency request: frames at the engine `rate`, at least 1.
pub(crate) fn engine_frames(rate: u32, usec: u64) -> u32 {
    ((usec as u128 * rate as u128 / 1_000_000).min(u32::MAX as u128) as u32).max(1)
}

/// The PulseAudio error a client sees for an engine error.
pub(crate) fn engine_err(e: EngineError) -> PulseError {
    match e {
        EngineError::NoSuchNode(_) | EngineError::NoSuchPort(_) | EngineError::NoSuchLink(_) => {
            PulseError::NoEntity
        }
        EngineError::Invalid(_) | EngineError::Incompatible(_) => PulseError::Invalid,
        EngineError::TooMany(_) => PulseError::TooLarge,
        EngineError::Busy(_) => PulseError::Busy,
        _ => PulseError::Internal,
    }
}

/// Applies a proplist update in PulseAudio's modes.
pub(crate) fn update_props(dst: &mut Props, mode: PropsUpdateMode, src: &Props) {
    match mode {
        PropsUpdateMode::Set => *dst = src.clone(),
        PropsUpdateMode::Merge => {
            for (k, v) in src.iter() {
                if dst.get_bytes(k).is_none() {
                    dst.set_bytes(k, v);
                }
            }
        }
        PropsUpdateMode::Replace => {
            for (k, v) in src.iter() {
                dst.set_bytes(k, v);
            }
        }
    }
}

pub(crate) fn remove_props(dst: &mut Props, keys: &[std::ffi::CString]) {
    let mut kept = Props::new();
    for (k, v) in dst.iter() {
        if !keys.iter().any(|r| r.as_c_str() == k.as_ref()) {
            kept.set_bytes(k, v);
        }
    }
    *dst = kept;
}

impl Conn {
    pub(crate) fn on_control(&mut self, data: &[u8]) -> Result<(), String> {
        if data.len() < 10 || data[0] != b'L' || data[5] != b'L' {
            return Err("control packet without command and tag".into());
        }
        let tag = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
        self.last_tag = tag;
        let seq = u32::from_be_bytes([data[6], data[7], data[8], data[9]]);
        if let Err(why) = tagcheck::check(data) {
            tracing::debug!("pulse client {}: malformed tagstruct: {why}", self.client);
            self.out().error(seq, PulseError::Protocol);
            return Ok(());
        }
        if !self.authed && tag != CommandTag::Auth as u32 {
            self.out().error(seq, PulseError::AccessDenied);
            return Ok(());
        }
        // Commands whose payload the codec does not read (or reads only partly).
        let manual = [
            CommandTag::RemoveClientProplist,
            CommandTag::RemovePlaybackStreamProplist,
            CommandTag::RemoveRecordStreamProplist,
            CommandTag::Extension,
            CommandTag::EnableSrbchannel,
            CommandTag::DisableSrbchannel,
            CommandTag::RegisterMemfdShmid,
            CommandTag::SendObjectMessage,
            CommandTag::GetSampleInfo,
        ];
        if let Some(&t) = manual.iter().find(|&&t| t as u32 == tag) {
            let r = self.manual(seq, t, &data[10..]);
            self.finish(seq, r);
            return Ok(());
        }
        let known = tag <= CommandTag::SendObjectMessage as u32 && !(53..=56).contains(&tag);
        if !known {
            tracing::debug!("pulse client {}: unknown command {tag}", self.client);
            self.out().error(seq, PulseError::Command);
            return Ok(());
        }
        let mut cursor = Cursor::new(data);
        match Command::read_tag_prefixed(&mut cursor, self.version) {
            Ok((_, cmd)) => {
                let r = self.handle_cmd(seq, cmd);
                self.finish(seq, r);
            }
            Err(pa::ProtocolError::Unimplemented(..)) => {
                self.out().error(seq, PulseError::NotSupported)
            }
            Err(e) => {
                tracing::debug!("pulse client {}: bad command {tag}: {e}", self.client);
                self.out().error(seq, PulseError::Invalid);
            }
        }
        Ok(())
    }

    pub(crate) fn finish(&mut self, seq: u32, r: Reply) {
        if let Err(e) = r {
            tracing::debug!(
                "pulse client {}: request {seq} (command {}) failed: {e:?}",
                self.client,
                self.last_tag
            );
            self.out().error(seq, e);
        }
    }

    /// Commands whose payload the codec does not read (or reads only partly).
    pub(crate) fn manual(&mut self, seq: u32, tag: CommandTag, payload: &[u8]) -> Reply {
        if tag == CommandTag::Extension {
            return self.extension(seq, payload);
        }
        let mut cur = Cursor::new(payload);
        let mut ts = TagStructReader::new(&mut cur, self.version);
        let keys = |ts: &mut TagStructReader<'_>| -> Result<Vec<std::ffi::CString>, PulseError> {
            let mut keys = Vec::new();
            while let Some(k) = ts.read_string().map_err(|_| PulseError::Invalid)? {
                keys.push(k);
            }
            Ok(keys)
        };
        match tag {
            CommandTag::RemoveClientProplist => {
                let keys = keys(&mut ts)?;
                self.remove_client_proplist(seq, &keys)
            }
            CommandTag::RemovePlaybackStreamProplist | CommandTag::RemoveRecordStreamProplist => {
                let channel = ts.read_u32().map_err(|_| PulseError::Invalid)?;
                let keys = keys(&mut ts)?;
                let playback = tag == CommandTag::RemovePlaybackStreamProplist;
                self.remove_stream_proplist(seq, channel, playback, &keys)
            }
            CommandTag::RegisterMemfdShmid => {
                // No reply either way (PulseAudio sends none); a bad registration is a
                // protocol error that ends the connection.
                let _ = seq;
                self.register_memfd(ts.read_u32().ok());
                Ok(())
            }
            CommandTag::EnableSrbchannel => {
                self.enable_srbchannel(seq);
                Ok(())
            }
            CommandTag::SendObjectMessage => {
                let mut text = || -> Result<Option<String>, PulseError> {
                    let s = ts.read_string().map_err(|_| PulseError::Invalid)?;
                    s.map(|s| s.into_string().map_err(|_| PulseError::Invalid))
                        .transpose()
                };
                let (path, message) = (text()?, text()?);
                let _params = text()?;
                self.send_object_message(seq, path, message)
            }
            CommandTag::GetSampleInfo => {
                // The codec reads only the index; a lookup by name sends the invalid
                // index and the name after it.
                let idx = ts.read_u32().map_err(|_| PulseError::Invalid)?;
                let name = ts.read_string().ok().flatten();
                self.get_sample_info(seq, idx, name)
            }
            _ => Err(PulseError::NotSupported),
        }
    }

    /// Runs a decoded command; each group lives in its own file under `commands/`.
    pub(crate) fn handle_cmd(&mut self, seq: u32, cmd: Command) -> Reply {
        match cmd {
            Command::Auth(p) => self.auth(seq, p),
            Command::SetClientName(props) => self.set_client_name(seq, props),
            Command::UpdateClientProplist(p) => self.update_client_proplist(seq, p),
            Command::Exit => self.exit(seq),
            Command::Stat => self.stat(seq),
            Command::GetServerInfo => self.get_server_info(seq),
            Command::GetSinkInfo(q) => self.get_sink_info(seq, q),
            Command::GetSinkInfoList => self.get_sink_info_list(seq),
            Command::GetSourceInfo(q) => self.get_source_info(seq, q),
            Command::GetSourceInfoList => self.get_source_info_list(seq),
            Command::GetSinkInputInfo(idx) => self.get_sink_input_info(seq, idx),
            Command::GetSinkInputInfoList => self.get_sink_input_info_list(seq),
            Command::GetSourceOutputInfo(idx) => self.get_source_output_info(seq, idx),
            Command::GetSourceOutputInfoList => self.get_source_output_info_list(seq),
            Command::GetClientInfo(idx) => self.get_client_info(seq, idx),
            Command::GetClientInfoList => self.get_client_info_list(seq),
            Command::GetModuleInfo(idx) => self.get_module_info(seq, idx),
            Command::GetModuleInfoList => self.get_module_info_list(seq),
            Command::GetCardInfo(q) => self.get_card_info(seq, q),
            Command::GetCardInfoList => self.get_card_info_list(seq),
            Command::GetSampleInfo(idx) => self.get_sample_info(seq, idx, None),
            Command::GetSampleInfoList => self.get_sample_info_list(seq),
            Command::LookupSink(name) => self.lookup_sink(seq, name),
            Command::LookupSource(name) => self.lookup_source(seq, name),
            Command::Subscribe(mask) => self.subscribe(seq, mask),
            Command::SetDefaultSink(name) => self.set_default_sink(seq, name),
            Command::SetDefaultSource(name) => self.set_default_source(seq, name),
            Command::SetSinkVolume(p) => self.set_sink_volume(seq, p),
            Command::SetSourceVolume(p) => self.set_source_volume(seq, p),
            Command::SetSinkMute(p) => self.set_sink_mute(seq, p),
            Command::SetSourceMute(p) => self.set_source_mute(seq, p),
            Command::SetSinkInputVolume(p) => self.set_sink_input_volume(seq, p),
            Command::SetSourceOutputVolume(p) => self.set_source_output_volume(seq, p),
            Command::SetSinkInputMute(p) => self.set_sink_input_mute(seq, p),
            Command::SetSourceOutputMute(p) => self.set_source_output_mute(seq, p),
            Command::SuspendSink(p) => self.suspend_sink(seq, p),
            Command::SuspendSource(p) => self.suspend_source(seq, p),
            Command::MoveSinkInput(p) => self.move_sink_input(seq, p),
            Command::MoveSourceOutput(p) => self.move_source_output(seq, p),
            Command::KillClient(idx) => self.kill_client(seq, idx),
            Command::KillSinkInput(idx) => {
                self.kill_stream_request(seq, idx, NodeKind::PlaybackStream)
            }
            Command::KillSourceOutput(idx) => {
                self.kill_stream_request(seq, idx, NodeKind::RecordStream)
            }
            Command::SetCardProfile(p) => self.set_card_profile(seq, p),
            Command::SetSinkPort(p) => self.set_device_port(seq, p, true),
            Command::SetSourcePort(p) => self.set_device_port(seq, p, false),
            Command::SetPortLatencyOffset(_) => Err(PulseError::NoEntity),
            Command::LoadModule(p) => self.load_module(seq, p),
            Command::UnloadModule(idx) => self.unload_module(seq, idx),
            Command::Extension(_) => Err(PulseError::NoExtension),
            Command::CreateUploadStream(p) => self.create_upload(seq, p),
            Command::DeleteUploadStream(ch) => self.delete_upload_stream(seq, ch),
            Command::FinishUploadStream(ch) => self.finish_upload_stream(seq, ch),
            Command::PlaySample(p) => self.play_sample(seq, p),
            Command::RemoveSample(name) => self.remove_sample(seq, name),
            Command::CreatePlaybackStream(p) => self.create_playback(seq, p),
            Command::CreateRecordStream(p) => self.create_record(seq, p),
            Command::DeletePlaybackStream(ch) => self.delete_playback_stream(seq, ch),
            Command::DeleteRecordStream(ch) => self.delete_record_stream(seq, ch),
            Command::DrainPlaybackStream(ch) => self.drain_playback_stream(seq, ch),
            Command::CorkPlaybackStream(c) => self.cork_playback_stream(seq, c),
            Command::CorkRecordStream(c) => self.cork_record_stream(seq, c),
            Command::FlushPlaybackStream(ch) => self.flush_playback_stream(seq, ch),
            Command::FlushRecordStream(ch) => self.flush_record_stream(seq, ch),
            Command::TriggerPlaybackStream(ch) => self.trigger_playback_stream(seq, ch),
            Command::PrebufPlaybackStream(ch) => self.prebuf_playback_stream(seq, ch),
            Command::GetPlaybackLatency(q) => self.get_playback_latency(seq, q),
            Command::GetRecordLatency(q) => self.get_record_latency(seq, q),
            Command::SetPlaybackStreamName(p) => self.set_playback_stream_name(seq, p),
            Command::SetRecordStreamName(p) => self.set_record_stream_name(seq, p),
            Command::UpdatePlaybackStreamProplist(p) => {
                self.update_playback_stream_proplist(seq, p)
            }
            Command::UpdateRecordStreamProplist(p) => self.update_record_stream_proplist(seq, p),
            Command::SetPlaybackStreamBufferAttr(q) => self.set_playback_stream_buffer_attr(seq, q),
            Command::SetRecordStreamBufferAttr(q) => self.set_record_stream_buffer_attr(seq, q),
            Command::UpdatePlaybackStreamSampleRate(q) => {
                self.update_playback_stream_sample_rate(seq, q)
            }
            Command::UpdateRecordStreamSampleRate(q) => {
                self.update_record_stream_sample_rate(seq, q)
            }
            // Replies and server-to-client commands are not requests.
            _ => Err(PulseError::Command),
        }
    }
}
