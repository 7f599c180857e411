//! The sample cache: uploads, PLAY_SAMPLE, REMOVE_SAMPLE, sample info.

use super::Reply;
use crate::conn::Conn;
use crate::conn::record::Upload;
use crate::memstat::Counted;
use crate::wire::convert::prop_str;
use crate::wire::convert::{check_spec, frame_size};
use pulseaudio::protocol::{
    self as pa, Prop, PulseError, SubscriptionEventFacility as Fac, SubscriptionEventType as Ev,
};
use std::sync::Arc;

impl Conn {
    /// GET_SAMPLE_INFO, by index or (with the invalid index) by name.
    pub(crate) fn get_sample_info(
        &mut self,
        seq: u32,
        idx: u32,
        name: Option<std::ffi::CString>,
    ) -> Reply {
        let srv = self.srv.clone();
        let st = srv.lock();
        let idx = match (idx, name) {
            (u32::MAX, Some(n)) => st
                .sample_by_name(n.to_str().map_err(|_| PulseError::Invalid)?)
                .ok_or(PulseError::NoEntity)?,
            (u32::MAX, None) => return Err(PulseError::Invalid),
            (i, _) => i,
        };
        let info = st
            .samples
            .get(&idx)
            .map(|s| s.info(idx))
            .ok_or(PulseError::NoEntity)?;
        drop(st);
        self.out().reply(seq, &info);
        Ok(())
    }

    /// GET_SAMPLE_INFO_LIST.
    pub(crate) fn get_sample_info_list(&mut self, seq: u32) -> Reply {
        let srv = self.srv.clone();
        let list: Vec<pa::SampleInfo> =
            srv.lock().samples.iter().map(|(&i, s)| s.info(i)).collect();
        self.out().reply(seq, &list);
        Ok(())
    }

    /// DELETE_UPLOAD_STREAM.
    pub(crate) fn delete_upload_stream(&mut self, seq: u32, ch: u32) -> Reply {
        self.uploads.remove(&ch).ok_or(PulseError::NoEntity)?;
        self.out().ack(seq);
        Ok(())
    }

    /// FINISH_UPLOAD_STREAM.
    pub(crate) fn finish_upload_stream(&mut self, seq: u32, ch: u32) -> Reply {
        let u = self.uploads.remove(&ch).ok_or(PulseError::NoEntity)?;
        self.finish_upload(u);
        self.out().ack(seq);
        Ok(())
    }

    /// PLAY_SAMPLE.
    pub(crate) fn play_sample(&mut self, seq: u32, p: pa::PlaySampleParams) -> Reply {
        let srv = self.srv.clone();
        let graph = srv.engine.graph();
        let sink = match (p.sink_index, p.sink_name.as_ref()) {
            (None, None) => srv.default_sink(&graph),
            (i, n) => srv.find_sink(&graph, i, n.and_then(|n| n.to_str().ok())),
        }
        .ok_or(PulseError::NoEntity)?;
        let name = p.name.to_str().map_err(|_| PulseError::Invalid)?;
        let sample = {
            let st = srv.lock();
            st.sample_by_name(name)
                .and_then(|i| st.samples.get(&i).cloned())
                .ok_or(PulseError::NoEntity)?
        };
        let gain = if p.volume == u32::MAX {
            1.0
        } else {
            crate::wire::convert::volume_to_linear(pa::Volume::from_u32_clamped(p.volume))
        };
        let node = crate::scache::play(&srv, &sample, &sink, gain)?;
        self.out().reply_with(seq, |ts| {
            ts.write_u32(node).expect("vec");
        });
        Ok(())
    }

    /// REMOVE_SAMPLE.
    pub(crate) fn remove_sample(&mut self, seq: u32, name: std::ffi::CString) -> Reply {
        let srv = self.srv.clone();
        let name = name.to_str().map_err(|_| PulseError::Invalid)?;
        let mut st = srv.lock();
        let idx = st.sample_by_name(name).ok_or(PulseError::NoEntity)?;
        st.samples.remove(&idx);
        drop(st);
        srv.broadcast(Fac::SampleCache, Ev::Removed, idx);
        self.out().ack(seq);
        Ok(())
    }

    pub(crate) fn create_upload(&mut self, seq: u32, p: pa::UploadStreamParams) -> Reply {
        self.stream_limit()?;
        let codec = check_spec(&p.sample_spec).map_err(|_| PulseError::Invalid)?;
        if p.channel_map.num_channels() != p.sample_spec.channels {
            return Err(PulseError::Invalid);
        }
        let fs = frame_size(&p.sample_spec) as u32;
        if p.length == 0 || !p.length.is_multiple_of(fs) {
            return Err(PulseError::Invalid);
        }
        if p.length > crate::scache::MAX_SAMPLE_BYTES {
            return Err(PulseError::TooLarge);
        }
        let name = p
            .media_name
            .as_ref()
            .and_then(|n| n.to_str().ok().map(str::to_string))
            .or_else(|| prop_str(&p.props, Prop::EventId))
            .or_else(|| prop_str(&p.props, Prop::MediaName))
            .filter(|n| !n.is_empty() && n.len() <= 128)
            .ok_or(PulseError::Invalid)?;
        let channel = self.next_channel;
        self.next_channel += 1;
        self.uploads.insert(
            channel,
            Upload {
                name,
                spec: p.sample_spec,
                codec,
                map: p.channel_map,
                props: p.props.clone(),
                length: p.length as usize,
                data: Vec::new(),
            },
        );
        let reply = pa::CreateUploadStreamReply {
            channel,
            length: p.length,
        };
        self.out().reply(seq, &reply);
        Ok(())
    }

    pub(crate) fn finish_upload(&self, mut u: Upload) {
        // A short upload is padded with silence, as PulseAudio stores the whole block.
        u.data.resize(u.length, 0);
        let mut data = vec![0f32; u.length / u.codec.bytes()];
        let bytes = data.len() * size_of::<f32>();
        u.codec.decode(&u.data, &mut data);
        let mut sample = crate::state::Sample {
            name: u.name.clone(),
            spec: u.spec,
            map: u.map,
            props: u.props,
            data: Arc::new(Counted::new(data, bytes, &self.srv.mem)),
            bytes: u.length as u32,
        };
        let mut st = self.srv.lock();
        // As PulseAudio's cache: an upload whose name resolves to a sample (by name, or
        // a number as its index) replaces that sample's audio, keeping its name.
        let existing = st.sample_by_name(&u.name);
        let (idx, ev) = match existing {
            Some(i) => {
                if let Some(old) = st.samples.get(&i) {
                    sample.name = old.name.clone();
                }
                (i, Ev::Changed)
            }
            None => {
                let i = st.next_sample;
                st.next_sample += 1;
                (i, Ev::New)
            }
        };
        st.samples.insert(idx, sample);
        drop(st);
        tracing::info!("pulse: sample {} cached as #{idx}", u.name);
        self.srv.broadcast(Fac::SampleCache, ev, idx);
    }
}
